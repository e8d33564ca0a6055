package gpu

import (
	"testing"

	"github.com/attnc/attnc/ir"
)

// splitRowNest refuses a nest whose per-row work, once moved ahead of the
// column loop, would change what the column loop reads or writes.
func TestSplitRowNestKeepsOrder(t *testing.T) {
	fl := &fragLoop{c: "acc", n: 16, accumulate: true}
	frag := &Fragment{M: 16, N: 8, Regs: 4,
		Row: func(lane, c ir.Expr) ir.Expr {
			return add(ir.Bin(ir.Div, lane, i32(4)), mul(ir.Bin(ir.Div, c, i32(2)), i32(8)))
		},
		Col: func(lane, c ir.Expr) ir.Expr {
			return add(mul(ir.Bin(ir.Rem, lane, i32(4)), i32(2)), ir.Bin(ir.Rem, c, i32(2)))
		}}
	a := (&accCtx{l: &Layer{Lanes: 32, BlockThreads: 128}, f: frag}).newAccRegs(fl)
	row, d := ir.R("row", ir.I32), ir.R("d", ir.I32)
	at := add(mul(row, i32(16)), d)
	nest := func(after ir.Stmt) ir.Stmt {
		cols := &ir.For{Var: "d", Lo: i32(0), Hi: i32(16), Kind: ir.Spread, Body: &ir.Block{Stmts: []ir.Stmt{
			&ir.Store{Buf: "o", Index: at, Value: ir.Bin(ir.Mul, ir.Ld("acc", ir.F32, at), ir.Ld("x", ir.F32, row))}}}}
		return &ir.For{Var: "row", Lo: i32(0), Hi: i32(16), Kind: ir.Spread, Body: &ir.Block{Stmts: []ir.Stmt{cols, after}}}
	}
	for _, c := range []struct {
		name  string
		after ir.Stmt
		ok    bool
	}{
		{"independent row store", &ir.Store{Buf: "y", Index: row, Value: ir.Float(1)}, true},
		{"overwrites what the columns read", &ir.Store{Buf: "x", Index: row, Value: ir.Float(0)}, false},
		{"reads what the columns wrote", &ir.Store{Buf: "y", Index: row, Value: ir.Ld("o", ir.F32, at)}, false},
		{"leaves the item", &ir.If{Cond: ir.Bin(ir.Lt, row, i32(3)), Then: &ir.Block{Stmts: []ir.Stmt{&ir.Continue{}}}}, false},
	} {
		rows, frag := a.splitRowNest(nest(c.after), fl)
		if got := rows != nil && frag != nil; got != c.ok {
			t.Errorf("%s: split %v, want %v", c.name, got, c.ok)
		}
	}
}
