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
		return F32ToBF16(c.X), nil
	}
	return F32ToF16(c.X), nil
}

// legalExpr rewrites widening conversions of half loads; a half load used
// any other way is an error.
func legalExpr(e ir.Expr, err *error) ir.Expr {
	out := ir.MapExpr(e, func(n ir.Expr) ir.Expr {
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
			return ir.Cvt(x.To, BF16ToF32(bits))
		}
		return ir.Cvt(x.To, F16ToF32(bits))
	})
	ir.VisitExpr(out, func(n ir.Expr) {
		if l, ok := n.(*ir.Load); ok && (l.T == ir.F16 || l.T == ir.BF16) && *err == nil {
			*err = fmt.Errorf("%s load of %s used without widening", l.T, l.Buf)
		}
	})
	return out
}

func c32(v int64) ir.Expr { return ir.Int(v) }

// bitsI32 zero-extends 16-bit pattern h to i32.
func bitsI32(h ir.Expr) ir.Expr {
	return ir.Bin(ir.And, ir.Cvt(ir.I32, h), c32(0xffff))
}

// BF16ToF32 widens bf16 bits (i16) to f32: the bits move to the top half.
func BF16ToF32(h ir.Expr) ir.Expr {
	return &ir.Bitcast{To: ir.F32, X: ir.Bin(ir.Shl, bitsI32(h), c32(16))}
}

// F32ToBF16 narrows f32 to bf16 bits with round-to-nearest-even; NaN stays
// a (quiet) NaN.
func F32ToBF16(x ir.Expr) ir.Expr {
	u := &ir.Bitcast{To: ir.I32, X: x}
	isNaN := ir.Bin(ir.Gt, ir.Bin(ir.And, u, c32(0x7fffffff)), c32(0x7f800000))
	lsb := ir.Bin(ir.And, ir.Bin(ir.Shr, u, c32(16)), c32(1))
	rounded := ir.Bin(ir.Shr, ir.Bin(ir.Add, ir.Bin(ir.Add, u, c32(0x7fff)), lsb), c32(16))
	quiet := ir.Bin(ir.Or, ir.Bin(ir.Shr, u, c32(16)), c32(0x40))
	return ir.Cvt(ir.I16, ir.Sel(isNaN, quiet, rounded))
}

// F16ToF32 widens IEEE half bits (i16) to f32, denormals, inf and NaN
// included: the exponent/mantissa bits shifted into place are a float that
// 2^112 rescales exactly; inf/NaN get the all-ones exponent.
func F16ToF32(h ir.Expr) ir.Expr {
	hb := bitsI32(h)
	sign := ir.Bin(ir.Shl, ir.Bin(ir.And, hb, c32(0x8000)), c32(16))
	em := ir.Bin(ir.And, hb, c32(0x7fff))
	shifted := ir.Bin(ir.Shl, em, c32(13))
	scaled := &ir.Bitcast{To: ir.I32, X: ir.Bin(ir.Mul, &ir.Bitcast{To: ir.F32, X: shifted}, ir.Float(0x1p112))}
	special := ir.Bin(ir.Or, shifted, c32(0x7f800000))
	mag := ir.Sel(ir.Bin(ir.Ge, em, c32(0x7c00)), special, scaled)
	return &ir.Bitcast{To: ir.F32, X: ir.Bin(ir.Or, mag, sign)}
}

// F32ToF16 narrows f32 to IEEE half bits with round-to-nearest-even,
// overflow to inf, denormals and NaN (F. Giesen's float_to_half_fast3_rtne).
func F32ToF16(x ir.Expr) ir.Expr {
	u := &ir.Bitcast{To: ir.I32, X: x}
	sign := ir.Bin(ir.And, u, c32(-0x80000000))
	f := ir.Bin(ir.Xor, u, sign)
	big := ir.Sel(ir.Bin(ir.Gt, f, c32(0x7f800000)), c32(0x7e00), c32(0x7c00))
	denorm := ir.Bin(ir.Sub, &ir.Bitcast{To: ir.I32, X: ir.Bin(ir.Add, &ir.Bitcast{To: ir.F32, X: f}, ir.Float(0.5))}, c32(0x3f000000))
	odd := ir.Bin(ir.And, ir.Bin(ir.Shr, f, c32(13)), c32(1))
	normal := ir.Bin(ir.Shr, ir.Bin(ir.Add, ir.Bin(ir.Add, f, c32(-0x38000000+0xfff)), odd), c32(13))
	mag := ir.Sel(ir.Bin(ir.Ge, f, c32(0x47800000)), big, ir.Sel(ir.Bin(ir.Lt, f, c32(0x38800000)), denorm, normal))
	return ir.Cvt(ir.I16, ir.Bin(ir.Or, mag, ir.Bin(ir.Shr, sign, c32(16))))
}
