package passes

import (
	"fmt"

	"github.com/attnc/attnc/ir"
)

// LegalizeDType removes storage-only types (f16, bf16: every row of the
// dtype table whose Carrier is not itself) from expressions: buffers and
// local arrays of those types carry their bits in the Carrier integer type,
// loads are widened to f32 and stores narrowed from f32 with the table's
// exact conversions (round-to-nearest-even, denormals, inf and NaN kept), so
// every backend computes exactly the same bits without native support.
func LegalizeDType(m *ir.Module) (*ir.Module, error) {
	out := *m
	out.Kernels = nil
	for _, k := range m.Kernels {
		narrow := map[string]ir.Type{}
		nk := *k
		nk.Params = nil
		for _, p := range k.Params {
			np := *p
			if p.Buffer && p.Elem.IsStorageOnly() {
				narrow[p.Name] = p.Elem
				np.Elem = ir.StorageOf(p.Elem).Carrier
			}
			nk.Params = append(nk.Params, &np)
		}
		// Local arrays are scoped, but names are unique among visible
		// declarations; collect them first so loads anywhere see them.
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if a, ok := s.(*ir.Alloc); ok && a.T.IsStorageOnly() {
				narrow[a.Name] = a.T
			}
			return []ir.Stmt{s}
		})
		var err error
		nk.Body = ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if err != nil {
				return []ir.Stmt{s}
			}
			switch x := s.(type) {
			case *ir.Store:
				v := x.Value
				if t, ok := narrow[x.Buf]; ok {
					v, err = narrowTo(t, x.Value)
				}
				return []ir.Stmt{&ir.Store{Buf: x.Buf, Index: legalExpr(x.Index, &err), Value: legalExpr(v, &err)}}
			case *ir.Alloc:
				if x.T.IsStorageOnly() {
					c := *x
					c.T = ir.StorageOf(x.T).Carrier
					return []ir.Stmt{&c}
				}
			case *ir.Malloc:
				if x.T.IsStorageOnly() {
					err = fmt.Errorf("heap buffer %s of %s is not supported", x.Name, x.T)
				}
			}
			return []ir.Stmt{s}
		})
		if err == nil {
			nk.Body = ir.MapStmtExprs(nk.Body, func(e ir.Expr) ir.Expr { return legalExpr(e, &err) })
			// Buffers passed on to other kernels carry their bits too.
			nk.Body = ir.MapExprs(nk.Body, func(e ir.Expr) ir.Expr {
				if r, ok := e.(*ir.Ref); ok && narrow[r.Name] != 0 && r.T == narrow[r.Name] {
					return ir.R(r.Name, ir.StorageOf(r.T).Carrier)
				}
				return e
			})
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.Name, err)
		}
		out.Kernels = append(out.Kernels, &nk)
	}
	return &out, nil
}

// carrierLoad reads the bits of a storage-only element.
func carrierLoad(l *ir.Load) *ir.Load {
	return &ir.Load{Buf: l.Buf, Index: l.Index, T: ir.StorageOf(l.T).Carrier}
}

// narrowTo turns a value stored into a t buffer (t storage-only), which
// must be Convert(t, f32 expr) or a load of another t buffer, into the
// Carrier bits of that value.
func narrowTo(t ir.Type, v ir.Expr) (ir.Expr, error) {
	c, ok := v.(*ir.Convert)
	if !ok || c.To != t || c.X.Type() != ir.F32 {
		// A value loaded from a t buffer and stored unchanged keeps its bits.
		if l, ok := v.(*ir.Load); ok && l.T == t {
			return carrierLoad(l), nil
		}
		return nil, fmt.Errorf("store of %s must be a conversion from f32, got %s", t, ir.ExprString(v))
	}
	return ir.StorageOf(t).Narrow(c.X), nil
}

// legalExpr rewrites widening conversions of storage-only loads; such a
// load used any other way is an error.
func legalExpr(e ir.Expr, err *error) ir.Expr {
	out := ir.MapExpr(e, func(n ir.Expr) ir.Expr {
		if bc, ok := n.(*ir.Bitcast); ok {
			// The bits themselves (tensor-core operands): no conversion.
			if l, ok := bc.X.(*ir.Load); ok && l.T.IsStorageOnly() && bc.To == ir.StorageOf(l.T).Carrier {
				return carrierLoad(l)
			}
		}
		x, ok := n.(*ir.Convert)
		if !ok {
			return n
		}
		l, ok := x.X.(*ir.Load)
		if !ok || !l.T.IsStorageOnly() {
			return n
		}
		return ir.Cvt(x.To, ir.StorageOf(l.T).Widen(carrierLoad(l)))
	})
	ir.VisitExpr(out, func(n ir.Expr) {
		if l, ok := n.(*ir.Load); ok && l.T.IsStorageOnly() && *err == nil {
			*err = fmt.Errorf("%s load of %s used without widening", l.T, l.Buf)
		}
	})
	return out
}
