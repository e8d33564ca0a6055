package gpu

import "github.com/attnc/attnc/ir"

// ArrayStores lists the values stored into each local array.
func ArrayStores(b *ir.Block) map[string][]ir.Expr {
	out := map[string][]ir.Expr{}
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if st, ok := s.(*ir.Store); ok {
			out[st.Buf] = append(out[st.Buf], st.Value)
		}
		return []ir.Stmt{s}
	})
	return out
}

// NarrowType is the tensor-core dtype, or the HalfExact 8-bit code, whose
// elements are all an array holds (every store is f32(load of that dtype)
// or the constant 0), or Void.
func NarrowType(vals []ir.Expr) ir.Type {
	t := ir.Void
	for _, v := range vals {
		switch x := v.(type) {
		case *ir.Convert:
			l, ok := x.X.(*ir.Load)
			if !ok {
				return ir.Void
			}
			if r := ir.StorageOf(l.T); r == nil || !(r.TensorCore || r.HalfExact) || (t != ir.Void && t != l.T) {
				return ir.Void
			}
			t = l.T
		case *ir.Const:
			if x.Float != 0 {
				return ir.Void
			}
		default:
			return ir.Void
		}
	}
	return t
}

// NarrowValue is a stored f32 value as an element of t.
func NarrowValue(v ir.Expr, t ir.Type) ir.Expr {
	if c, ok := v.(*ir.Convert); ok {
		return c.X
	}
	return &ir.Const{T: t}
}
