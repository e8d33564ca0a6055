package gpu

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// copyBytes is the width of one widened copy: a 128-bit access.
const copyBytes = 16

// WidenCopies turns innermost spread loops that move a row element by
// element into 16-byte copies: `for d in 0 .. W spread { store X[a + d] =
// Y[b + d] }` with elements of the same width w (bits), n = 128 / w
// elements per copy, W a multiple of n and a, b provably multiples of n,
// becomes `for c in 0 .. W/n spread { copy X[a + c*n] = Y[b + c*n] x n }`.
// A loop that stores a value not depending on d (a row of zeros) is grouped
// the same way, n stores per iteration, so both arms of a staging branch
// keep the same extent. Buffer parameters and shared arrays are 16-byte
// aligned, so the copies are too.
func WidenCopies(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		env := LetValues(k.Body)
		elems := elemTypes(k)
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Kind != ir.Spread || len(f.Body.Stmts) != 1 {
				return []ir.Stmt{s}
			}
			st, ok := f.Body.Stmts[0].(*ir.Store)
			if !ok {
				return []ir.Stmt{s}
			}
			if w := widen(f, st, env, elems); w != nil {
				return []ir.Stmt{w}
			}
			return []ir.Stmt{s}
		}), nil
	})
}

func widen(f *ir.For, st *ir.Store, env map[string]ir.Expr, elems map[string]ir.Type) ir.Stmt {
	lo, ok1 := f.Lo.(*ir.Const)
	hi, ok2 := f.Hi.(*ir.Const)
	t, ok3 := elems[st.Buf]
	if !ok1 || !ok2 || !ok3 || lo.Int != 0 || t.Bits() < 8 {
		return nil
	}
	n := copyBytes * 8 / t.Bits()
	W := int(hi.Int)
	if W%n != 0 {
		return nil
	}
	dstBase, ok := unitStride(st.Index, f.Var)
	if !ok || Multiple(dstBase, env)%int64(n) != 0 {
		return nil
	}
	c := ir.R(f.Var+"_c", ir.I32)
	at := func(e ir.Expr, u int) ir.Expr {
		return ir.Subst(e, map[string]ir.Expr{f.Var: add(mul(c, i32(n)), i32(u))})
	}
	var body ir.Stmt
	if l, ok := st.Value.(*ir.Load); ok && l.T == t {
		srcBase, ok := unitStride(l.Index, f.Var)
		if st2, known := elems[l.Buf]; !ok || !known || st2.Bits() != t.Bits() || Multiple(srcBase, env)%int64(n) != 0 {
			return nil
		}
		body = &ir.Copy{Dst: st.Buf, DstIndex: at(st.Index, 0), Src: l.Buf, SrcIndex: at(l.Index, 0), N: n}
	} else if !passes.Uses(st.Value, f.Var) {
		var stores []ir.Stmt
		for u := 0; u < n; u++ {
			stores = append(stores, &ir.Store{Buf: st.Buf, Index: at(st.Index, u), Value: st.Value})
		}
		body = &ir.Block{Stmts: stores}
	} else {
		return nil
	}
	return &ir.For{Var: c.Name, Lo: i32(0), Hi: i32(W / n), Kind: ir.Spread, Tag: f.Tag, Body: &ir.Block{Stmts: []ir.Stmt{body}}}
}

// unitStride reports whether index is base + v with base not using v, and
// returns base (i32 or i64, as the index).
func unitStride(index ir.Expr, v string) (ir.Expr, bool) {
	zero := ir.Subst(index, map[string]ir.Expr{v: ir.Int(0)})
	if passes.Uses(zero, v) {
		return nil, false
	}
	// index(v) - index(0) must be v: check the affine coefficient.
	coef, ok := coefficient(index, v)
	return zero, ok && coef == 1
}

// coefficient is the factor of v in an affine index expression.
func coefficient(e ir.Expr, v string) (int64, bool) {
	if !passes.Uses(e, v) {
		return 0, true
	}
	switch x := e.(type) {
	case *ir.Ref:
		return 1, x.Name == v
	case *ir.Convert:
		if x.To == ir.I64 && x.X.Type() == ir.I32 {
			return coefficient(x.X, v)
		}
	case *ir.Binary:
		a, ok1 := coefficient(x.X, v)
		b, ok2 := coefficient(x.Y, v)
		if !ok1 || !ok2 {
			return 0, false
		}
		switch x.Op {
		case ir.Add:
			return a + b, true
		case ir.Sub:
			return a - b, true
		case ir.Mul:
			if c, ok := x.Y.(*ir.Const); ok && b == 0 {
				return a * c.Int, true
			}
			if c, ok := x.X.(*ir.Const); ok && a == 0 {
				return b * c.Int, true
			}
		}
	}
	return 0, false
}

// Multiple is a number that e is known to be a multiple of (1 when
// nothing is known; 0 stands for the value 0, a multiple of everything).
func Multiple(e ir.Expr, env map[string]ir.Expr) int64 {
	var m func(e ir.Expr, depth int) int64
	m = func(e ir.Expr, depth int) int64 {
		if depth > 32 {
			return 1
		}
		switch x := e.(type) {
		case *ir.Const:
			if x.Int < 0 {
				return -x.Int
			}
			return x.Int
		case *ir.Ref:
			if v, ok := env[x.Name]; ok && v != nil {
				return m(v, depth+1)
			}
		case *ir.Convert:
			if x.X.Type().IsInt() && x.To.IsInt() && x.To.Bits() >= x.X.Type().Bits() {
				return m(x.X, depth+1)
			}
		case *ir.Binary:
			a, b := m(x.X, depth+1), m(x.Y, depth+1)
			switch x.Op {
			case ir.Mul:
				return a * b
			case ir.Add, ir.Sub:
				return gcd(a, b)
			case ir.Shl:
				if c, ok := x.Y.(*ir.Const); ok && c.Int < 62 {
					return a << c.Int
				}
			}
		}
		return 1
	}
	return m(e, 0)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// LetValues maps every let of b to its value; a name bound twice (in
// sibling scopes, e.g. the two copies of a tile body classify-tiles makes)
// to different values maps to nil, which Multiple treats as unknown.
func LetValues(b *ir.Block) map[string]ir.Expr {
	env := map[string]ir.Expr{}
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if l, ok := s.(*ir.Let); ok {
			if old, dup := env[l.Name]; dup && (old == nil || ir.ExprString(old) != ir.ExprString(l.Value)) {
				env[l.Name] = nil
			} else if !dup {
				env[l.Name] = l.Value
			}
		}
		return []ir.Stmt{s}
	})
	return env
}

// elemTypes maps the kernel's buffers and arrays to their element types
// (arrays declared twice with different types are left out).
func elemTypes(k *ir.Kernel) map[string]ir.Type {
	out := map[string]ir.Type{}
	bad := map[string]bool{}
	for _, p := range k.Params {
		if p.Buffer {
			out[p.Name] = p.Elem
		}
	}
	ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
		if a, ok := s.(*ir.Alloc); ok {
			if t, dup := out[a.Name]; dup && t != a.T {
				bad[a.Name] = true
			}
			out[a.Name] = a.T
		}
		return []ir.Stmt{s}
	})
	for n := range bad {
		delete(out, n)
	}
	return out
}
