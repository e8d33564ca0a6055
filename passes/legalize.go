package passes

import (
	"fmt"

	"github.com/attnc/attnc/ir"
)

// LegalizeDType removes f16 and bf16 from expressions: buffers of those
// types become i16 buffers (their bit patterns), loads are widened to f32
// and stores narrowed from f32 with explicit integer code (IEEE
// round-to-nearest-even, denormals, inf and NaN kept), so every backend
// computes exactly the same bits without native half support.
func LegalizeDType(m *ir.Module) (*ir.Module, error) {
	out := *m
	out.Kernels = nil
	for _, k := range m.Kernels {
		half := map[string]ir.Type{}
		nk := *k
		nk.Params = nil
		for _, p := range k.Params {
			np := *p
			if p.Buffer && (p.Elem == ir.F16 || p.Elem == ir.BF16) {
				half[p.Name] = p.Elem
				np.Elem = ir.I16
			}
			nk.Params = append(nk.Params, &np)
		}
		var err error
		nk.Body = ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if err != nil {
				return []ir.Stmt{s}
			}
			switch x := s.(type) {
			case *ir.Store:
				v := x.Value
				if t, ok := half[x.Buf]; ok {
					v, err = narrowTo(t, x.Value)
				}
				return []ir.Stmt{&ir.Store{Buf: x.Buf, Index: legalExpr(x.Index, &err), Value: legalExpr(v, &err)}}
			case *ir.Alloc:
				if x.T == ir.F16 || x.T == ir.BF16 {
					err = fmt.Errorf("local array %s of %s is not supported", x.Name, x.T)
				}
			}
			return []ir.Stmt{s}
		})
		if err == nil {
			nk.Body = ir.MapStmtExprs(nk.Body, func(e ir.Expr) ir.Expr { return legalExpr(e, &err) })
			// Buffers passed on to other kernels are i16 now too.
			nk.Body = ir.MapExprs(nk.Body, func(e ir.Expr) ir.Expr {
				if r, ok := e.(*ir.Ref); ok && half[r.Name] != 0 && r.T == half[r.Name] {
					return ir.R(r.Name, ir.I16)
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

// narrowTo turns a value stored into a t buffer (t = f16 or bf16), which
// must be Convert(t, f32 expr), into the i16 bits of that conversion.
func narrowTo(t ir.Type, v ir.Expr) (ir.Expr, error) {
	c, ok := v.(*ir.Convert)
	if !ok || c.To != t || c.X.Type() != ir.F32 {
		// A value loaded from a half buffer and stored unchanged keeps its bits.
		if l, ok := v.(*ir.Load); ok && l.T == t {
			return &ir.Load{Buf: l.Buf, Index: l.Index, T: ir.I16}, nil
		}
		return nil, fmt.Errorf("store of %s must be a conversion from f32, got %s", t, ir.ExprString(v))
	}
	if t == ir.BF16 {
		return ir.F32ToBF16(c.X), nil
	}
	return ir.F32ToF16(c.X), nil
}

// legalExpr rewrites widening conversions of half loads; a half load used
// any other way is an error.
func legalExpr(e ir.Expr, err *error) ir.Expr {
	out := ir.MapExpr(e, func(n ir.Expr) ir.Expr {
		if bc, ok := n.(*ir.Bitcast); ok && bc.To == ir.I16 {
			// The bits themselves (tensor-core operands): no conversion.
			if l, ok := bc.X.(*ir.Load); ok && (l.T == ir.F16 || l.T == ir.BF16) {
				return &ir.Load{Buf: l.Buf, Index: l.Index, T: ir.I16}
			}
		}
		x, ok := n.(*ir.Convert)
		if !ok {
			return n
		}
		l, ok := x.X.(*ir.Load)
		if !ok || (l.T != ir.F16 && l.T != ir.BF16) {
			return n
		}
		bits := &ir.Load{Buf: l.Buf, Index: l.Index, T: ir.I16}
		if l.T == ir.BF16 {
			return ir.Cvt(x.To, ir.BF16ToF32(bits))
		}
		return ir.Cvt(x.To, ir.F16ToF32(bits))
	})
	ir.VisitExpr(out, func(n ir.Expr) {
		if l, ok := n.(*ir.Load); ok && (l.T == ir.F16 || l.T == ir.BF16) && *err == nil {
			*err = fmt.Errorf("%s load of %s used without widening", l.T, l.Buf)
		}
	})
	return out
}
