package lower

import (
	"math"

	"github.com/attnc/attnc/ir"
)

// blk accumulates statements.
type blk struct{ s []ir.Stmt }

func (b *blk) add(s ...ir.Stmt) { b.s = append(b.s, s...) }

func (b *blk) block() *ir.Block { return &ir.Block{Stmts: b.s} }

// let binds e to name and returns a Ref to it.
func (b *blk) let(name string, e ir.Expr) *ir.Ref {
	b.add(&ir.Let{Name: name, Value: e})
	return ir.R(name, e.Type())
}

// vr declares a mutable var.
func (b *blk) vr(name string, e ir.Expr) *ir.Ref {
	b.add(&ir.Var{Name: name, Init: e})
	return ir.R(name, e.Type())
}

func (b *blk) set(name string, e ir.Expr) { b.add(&ir.Assign{Name: name, Value: e}) }

func (b *blk) store(buf string, idx, v ir.Expr) {
	b.add(&ir.Store{Buf: buf, Index: idx, Value: v})
}

func (b *blk) alloc(name string, t ir.Type, n int) { b.add(&ir.Alloc{Name: name, T: t, Size: n}) }

// loop appends a for statement whose body is built by body.
func (b *blk) loop(v string, lo, hi ir.Expr, kind ir.LoopKind, tag ir.Tag, body func(*blk)) *ir.For {
	var in blk
	body(&in)
	f := &ir.For{Var: v, Lo: lo, Hi: hi, Kind: kind, Tag: tag, Body: in.block()}
	b.add(f)
	return f
}

// when appends `if c { then }`.
func (b *blk) when(c ir.Expr, then func(*blk)) *ir.If {
	var in blk
	then(&in)
	s := &ir.If{Cond: c, Then: in.block()}
	b.add(s)
	return s
}

// fail appends `if c { return code }`.
func (b *blk) fail(c ir.Expr, code int) {
	b.when(c, func(t *blk) { t.add(&ir.Return{Value: ir.Int(int64(code))}) })
}

// Expression shorthands.
func i32(v int) *ir.Const                         { return ir.Int(int64(v)) }
func f32(v float64) *ir.Const                     { return ir.Float(v) }
func add(x, y ir.Expr) ir.Expr                    { return ir.Bin(ir.Add, x, y) }
func sub(x, y ir.Expr) ir.Expr                    { return ir.Bin(ir.Sub, x, y) }
func mul(x, y ir.Expr) ir.Expr                    { return ir.Bin(ir.Mul, x, y) }
func div(x, y ir.Expr) ir.Expr                    { return ir.Bin(ir.Div, x, y) }
func rem(x, y ir.Expr) ir.Expr                    { return ir.Bin(ir.Rem, x, y) }
func minE(x, y ir.Expr) ir.Expr                   { return ir.Bin(ir.Min, x, y) }
func maxE(x, y ir.Expr) ir.Expr                   { return ir.Bin(ir.Max, x, y) }
func lt(x, y ir.Expr) ir.Expr                     { return ir.Bin(ir.Lt, x, y) }
func le(x, y ir.Expr) ir.Expr                     { return ir.Bin(ir.Le, x, y) }
func gt(x, y ir.Expr) ir.Expr                     { return ir.Bin(ir.Gt, x, y) }
func ge(x, y ir.Expr) ir.Expr                     { return ir.Bin(ir.Ge, x, y) }
func eq(x, y ir.Expr) ir.Expr                     { return ir.Bin(ir.Eq, x, y) }
func ne(x, y ir.Expr) ir.Expr                     { return ir.Bin(ir.Ne, x, y) }
func and(x, y ir.Expr) ir.Expr                    { return ir.Bin(ir.And, x, y) }
func or(x, y ir.Expr) ir.Expr                     { return ir.Bin(ir.Or, x, y) }
func not(x ir.Expr) ir.Expr                       { return ir.Un(ir.Not, x) }
func sel(c, x, y ir.Expr) ir.Expr                 { return ir.Sel(c, x, y) }
func i64(x ir.Expr) ir.Expr                       { return ir.Cvt(ir.I64, x) }
func tof32(x ir.Expr) ir.Expr                     { return ir.Cvt(ir.F32, x) }
func ld(buf string, t ir.Type, i ir.Expr) ir.Expr { return ir.Ld(buf, t, i) }
func ldi(buf string, i ir.Expr) ir.Expr           { return ir.Ld(buf, ir.I32, i) }

// plus is x + n, or x itself when n is 0.
func plus(x ir.Expr, n int) ir.Expr {
	if n == 0 {
		return x
	}
	return add(x, i32(n))
}

func ceilDiv(x ir.Expr, d int) ir.Expr { return div(add(x, i32(d-1)), i32(d)) }
func negInf() *ir.Const                { return f32(negInfV) }
func posInf() *ir.Const                { return f32(math.Inf(1)) }
func nan() *ir.Const                   { return f32(math.NaN()) }

// rowHead is the i64 index of (row, head) in a [rows, heads] array: rows
// come from untrusted indptrs and row * heads may pass 2^31.
func rowHead(row ir.Expr, heads int, head ir.Expr) ir.Expr {
	return add(mul(i64(row), i64c(heads)), i64(head))
}
