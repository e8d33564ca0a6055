package passes

import (
	"fmt"

	"github.com/attnc/attnc/ir"
)

// LegalizeDType removes storage-only types (f16, bf16: every row of the
// dtype table whose Carrier is not itself) from expressions: buffers and
// local arrays of those types keep their type (it is the ABI) but are read
// and written as their Carrier bits; loads are widened to f32 and stores
// narrowed from f32 with the table's exact conversions (round-to-nearest-
// even, denormals, inf and NaN kept), so every backend computes exactly the
// same bits without native support.
func LegalizeDType(m *ir.Module) (*ir.Module, error) {
	return mapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		var err error
		n := 0
		body := ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if err != nil {
				return []ir.Stmt{s}
			}
			switch x := s.(type) {
			case *ir.Store:
				v := x.Value
				var pre []ir.Stmt
				if t := v.Type(); t.Elem().IsStorageOnly() {
					// The conversion uses its operand several times: bind
					// a computed operand once.
					if c, ok := v.(*ir.Convert); ok && c.X.Type().Elem() == ir.F32 && !simpleOperand(c.X) {
						n++
						name := fmt.Sprintf("narrow%d", n)
						pre = append(pre, &ir.Let{Name: name, Value: legalExpr(c.X, &err)})
						v = &ir.Convert{To: t, X: ir.R(name, c.X.Type())}
					}
					v, err = narrowTo(t, v)
				}
				return append(pre, &ir.Store{Buf: x.Buf, Index: legalExpr(x.Index, &err), Value: legalExpr(v, &err)})
			case *ir.Malloc:
				if x.T.IsStorageOnly() {
					err = fmt.Errorf("heap buffer %s of %s is not supported", x.Name, x.T)
				}
			}
			return []ir.Stmt{s}
		})
		if err == nil {
			body = ir.MapStmtExprs(body, func(e ir.Expr) ir.Expr { return legalExpr(e, &err) })
		}
		return body, err
	})
}

// simpleOperand reports whether e is cheap to repeat: a name or a constant.
func simpleOperand(e ir.Expr) bool {
	switch e.(type) {
	case *ir.Ref, *ir.Const:
		return true
	}
	return false
}

// carrierLoad reads the bits of a storage-only element (or of a vector
// of them).
func carrierLoad(l *ir.Load) *ir.Load {
	return &ir.Load{Buf: l.Buf, Index: l.Index, T: ir.Vec(ir.StorageOf(l.T.Elem()).Carrier, l.T.Lanes())}
}

// narrowTo turns a value of storage-only type t (or a vector of it)
// stored into a t buffer — Convert(t, f32 expr), a load of another t
// buffer, or a scalar constant — into the Carrier bits of that value.
func narrowTo(t ir.Type, v ir.Expr) (ir.Expr, error) {
	switch x := v.(type) {
	case *ir.Convert:
		if c, ok := x.X.(*ir.Const); ok && c.T == ir.F32 && !t.IsVector() {
			return narrowTo(t, c) // a constant's bits, computed now
		}
		if x.X.Type().Elem() == ir.F32 {
			return ir.Lanewise(ir.StorageOf(t.Elem()).Narrow, x.X), nil
		}
	case *ir.Load:
		// A value loaded from a t buffer and stored unchanged keeps its bits.
		return carrierLoad(x), nil
	case *ir.Const:
		r := ir.StorageOf(t)
		bits, err := ir.EvalExpr(r.Narrow(ir.Float(x.Float)), nil)
		if err != nil {
			return nil, err
		}
		switch b := bits.(type) {
		case uint16: // i16 carrier
			return ir.IntT(r.Carrier, int64(int16(b))), nil
		case uint8:
			return ir.IntT(r.Carrier, int64(b)), nil
		}
		return nil, fmt.Errorf("constant %s of %s has no carrier bits", ir.ExprString(x), t)
	}
	return nil, fmt.Errorf("store of %s must be a conversion from f32, got %s", t, ir.ExprString(v))
}

// legalExpr rewrites widening conversions of storage-only loads, scalar
// or vector (the table's Widen lane by lane); such a load used any other
// way is an error.
func legalExpr(e ir.Expr, err *error) ir.Expr {
	out := ir.MapExpr(e, func(n ir.Expr) ir.Expr {
		if bc, ok := n.(*ir.Bitcast); ok {
			// The bits themselves (tensor-core operands, bf16 pairs read
			// as i32 lanes): no conversion.
			if l, ok := bc.X.(*ir.Load); ok && l.T.Elem().IsStorageOnly() {
				c := carrierLoad(l)
				if bc.To == c.T {
					return c
				}
				return &ir.Bitcast{To: bc.To, X: c}
			}
		}
		x, ok := n.(*ir.Convert)
		if !ok {
			return n
		}
		l, ok := x.X.(*ir.Load)
		if !ok || !l.T.Elem().IsStorageOnly() {
			return n
		}
		return ir.Cvt(x.To, ir.Lanewise(ir.StorageOf(l.T.Elem()).Widen, carrierLoad(l)))
	})
	ir.VisitExpr(out, func(n ir.Expr) {
		if l, ok := n.(*ir.Load); ok && l.T.Elem().IsStorageOnly() && *err == nil {
			*err = fmt.Errorf("%s load of %s used without widening", l.T, l.Buf)
		}
	})
	return out
}
