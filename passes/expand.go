package passes

import (
	"fmt"

	"math/bits"

	"github.com/attnc/attnc/ir"
)

// ExpandCalls rewrites the high-level score functions into arithmetic:
//
//	softcap(x, c)      = c * tanh(x / c)
//	alibi_slope(h, n)  = the ALiBi slope of head h of n heads: 2^(-8(h+1)/n)
//	                     for n a power of two; otherwise, with m the largest
//	                     power of two below n, 2^(-8(h+1)/m) for h < m and
//	                     2^(-4(2(h-m)+1)/m) after (the paper's interleaving).
//
// Any other call left in a kernel is an error.
func ExpandCalls(m *ir.Module) (*ir.Module, error) {
	var firstErr error
	expand := func(e ir.Expr) ir.Expr {
		c, ok := e.(*ir.Call)
		if !ok {
			return e
		}
		switch c.Fn {
		case "softcap":
			if len(c.Args) == 2 {
				x, cap := ir.Cvt(ir.F32, c.Args[0]), ir.Cvt(ir.F32, c.Args[1])
				return ir.Bin(ir.Mul, cap, ir.Un(ir.Tanh, ir.Bin(ir.Div, x, cap)))
			}
		case "alibi_slope":
			if len(c.Args) == 2 {
				if n, ok := c.Args[1].(*ir.Const); ok && n.Int > 0 {
					return alibiSlope(c.Args[0], int(n.Int))
				}
			}
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("cannot expand call @%s with %d arguments", c.Fn, len(c.Args))
		}
		return e
	}
	out, err := mapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		return ir.MapExprs(k.Body, expand), nil
	})
	if firstErr != nil {
		return nil, firstErr
	}
	return out, err
}

func alibiSlope(h ir.Expr, n int) ir.Expr {
	mPow := 1 << (bits.Len(uint(n)) - 1)
	hp1 := ir.Cvt(ir.F32, ir.Bin(ir.Add, h, ir.Int(1)))
	first := ir.Un(ir.Exp2, ir.Bin(ir.Mul, hp1, ir.Float(-8/float64(mPow))))
	if mPow == n {
		return first
	}
	k := ir.Cvt(ir.F32, ir.Bin(ir.Add, ir.Bin(ir.Mul, ir.Bin(ir.Sub, h, ir.Int(int64(mPow))), ir.Int(2)), ir.Int(1)))
	extra := ir.Un(ir.Exp2, ir.Bin(ir.Mul, k, ir.Float(-4/float64(mPow))))
	return ir.Sel(ir.Bin(ir.Lt, h, ir.Int(int64(mPow))), first, extra)
}
