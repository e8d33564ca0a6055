package cpu

import (
	"fmt"
	"math"
	"strings"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// VectorExp writes every f32 exp of a let, var, assignment or store as a
// polynomial in plain arithmetic (PolyExp), hoisted into lets before the
// statement: LLVM vectorizes it with the loop around it, where exp would
// stay a scalar call of libm's expf per lane. Every f32 tanh (soft-capped
// scores) becomes PolyTanh the same way, instead of a tanhf call per lane.
//
// A scalar let (outside vector loops) of the form select(c, exp(x), 1) —
// the online softmax's rescale factor alpha = exp(m_old - m_new) of a live
// row — branches instead: the exp runs only when c holds and x is not 0,
// since exp(±0) is exactly 1 (PolyExp too). The running max of a row
// rarely moves after its first tiles, so most tiles skip the exp: the
// same value, bit for bit.
func VectorExp(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		prefix := freePrefix(k, "vexp")
		n := 0
		inVector := map[ir.Stmt]bool{}
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if f, ok := s.(*ir.For); ok && f.Kind == ir.Vector {
				ir.MapStmts(f.Body, func(t ir.Stmt) []ir.Stmt {
					inVector[t] = true
					return []ir.Stmt{t}
				})
			}
			return []ir.Stmt{s}
		})
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if x, ok := s.(*ir.Let); ok && !inVector[s] {
				if c, arg, ok := expOrOne(x.Value); ok {
					// var a = 1; if c & x != 0 { a = exp(x) }; let NAME = a
					pfx := fmt.Sprintf("%s%d_", prefix, n)
					n++
					xv := ir.R(pfx+"arg", ir.F32)
					lets, v := PolyExp(pfx, xv)
					then := append(lets, &ir.Assign{Name: pfx + "one", Value: v})
					return []ir.Stmt{
						&ir.Let{Name: pfx + "arg", Value: arg},
						&ir.Var{Name: pfx + "one", Init: ir.Float(1)},
						&ir.If{Cond: ir.Bin(ir.And, c, ir.Bin(ir.Ne, xv, ir.Float(0))), Then: &ir.Block{Stmts: then}},
						&ir.Let{Name: x.Name, Value: ir.R(pfx+"one", ir.F32)},
					}
				}
			}
			var pre []ir.Stmt
			rw := func(e ir.Expr) ir.Expr {
				return ir.MapExpr(e, func(x ir.Expr) ir.Expr {
					u, ok := x.(*ir.Unary)
					if !ok || (u.Op != ir.Exp && u.Op != ir.Tanh) || u.Type() != ir.F32 {
						return x
					}
					poly := PolyExp
					arg := u.X
					if u.Op == ir.Tanh {
						poly = PolyTanh
					} else if a, ok := nonPosArg(u.X); ok {
						poly, arg = PolyExpNonPos, a
					}
					lets, v := poly(fmt.Sprintf("%s%d_", prefix, n), arg)
					n++
					pre = append(pre, lets...)
					return v
				})
			}
			var out ir.Stmt
			switch x := s.(type) {
			case *ir.Let:
				out = &ir.Let{Name: x.Name, Value: rw(x.Value)}
			case *ir.Var:
				out = &ir.Var{Name: x.Name, Init: rw(x.Init)}
			case *ir.Assign:
				out = &ir.Assign{Name: x.Name, Value: rw(x.Value)}
			case *ir.Store:
				out = &ir.Store{Buf: x.Buf, Index: rw(x.Index), Value: rw(x.Value)}
			default:
				return []ir.Stmt{s}
			}
			if len(pre) == 0 {
				return []ir.Stmt{s}
			}
			return append(pre, out)
		}), nil
	})
}

// nonPosArg is x when e is min(x, 0) (or min(0, x)) in f32: exp(e) is
// then PolyExpNonPos(x).
func nonPosArg(e ir.Expr) (ir.Expr, bool) {
	b, ok := e.(*ir.Binary)
	if !ok || b.Op != ir.Min || b.Type() != ir.F32 {
		return nil, false
	}
	isZero := func(x ir.Expr) bool {
		c, ok := x.(*ir.Const)
		return ok && c.T == ir.F32 && c.Float == 0
	}
	switch {
	case isZero(b.Y):
		return b.X, true
	case isZero(b.X):
		return b.Y, true
	}
	return nil, false
}

// expOrOne is c and x when e is select(c, exp(x), 1.0) in scalar f32.
func expOrOne(e ir.Expr) (c, x ir.Expr, ok bool) {
	sel, ok := e.(*ir.Select)
	if !ok || sel.Type() != ir.F32 {
		return nil, nil, false
	}
	u, ok := sel.X.(*ir.Unary)
	one, isConst := sel.Y.(*ir.Const)
	if !ok || u.Op != ir.Exp || u.Type() != ir.F32 || !isConst || one.T != ir.F32 || one.Float != 1 || sel.Cond.Type() != ir.Bool {
		return nil, nil, false
	}
	return sel.Cond, u.X, true
}

// freePrefix is a name prefix no let, var, loop variable, array or param
// of k starts with.
func freePrefix(k *ir.Kernel, base string) string {
	var names []string
	for _, p := range k.Params {
		names = append(names, p.Name)
	}
	ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Let:
			names = append(names, x.Name)
		case *ir.Var:
			names = append(names, x.Name)
		case *ir.For:
			names = append(names, x.Var)
		case *ir.Alloc:
			names = append(names, x.Name)
		case *ir.CallStmt:
			names = append(names, x.Result)
		}
		return []ir.Stmt{s}
	})
	for i := 0; ; i++ {
		p := base
		if i > 0 {
			p = fmt.Sprintf("%s%d", base, i)
		}
		taken := false
		for _, n := range names {
			if strings.HasPrefix(n, p) {
				taken = true
				break
			}
		}
		if !taken {
			return p
		}
	}
}

// The polynomial exp (Cody and Waite's reduction, the minimax polynomial
// of Cephes' expf): exp(x) = 2^n · exp(r) with n = round(x·log2 e) and
// r = x − n·ln 2 in [−ln2/2, ln2/2], ln 2 split in two so that n·ExpLn2Hi
// is exact; exp(r) ≈ 1 + r + r²·P(r).
const (
	ExpLog2E  = 1.44269504088896341
	ExpLn2Hi  = 0.693359375
	ExpLn2Lo  = -2.12194440e-4
	ExpMaxArg = 88.72283172607421875  // the largest f32 whose exp is finite in f32
	ExpMinArg = -87.33654022216796875 // about ln(FLT_MIN): below, exp flushes to 0
)

// expRoundMagic is 1.5·2^23: c·log2 e + expRoundMagic rounds to an
// integer, n + 1.5·2^23, whose bits are n + its bits.
const expRoundMagic = 12582912.0

// expPoly are P's coefficients, highest degree first.
var expPoly = []float64{1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1}

// PolyExp is exp(x) for f32 x as lets named prefix+... and the expression
// of the result, in operations every CPU level vectorizes (no floor or
// libm call): relative error within a few ulps (see the test) where the
// result is normal (x in [ExpMinArg, ExpMaxArg]); 0 below (−inf included),
// +inf above, NaN for NaN.
func PolyExp(prefix string, x ir.Expr) ([]ir.Stmt, ir.Expr) {
	var lets []ir.Stmt
	let := letsNamed(prefix, &lets)
	f := ir.Float
	xv := let("x", x)
	// The clamp is written as selects, not Min/Max (which propagate NaN):
	// a NaN x becomes a finite c here, so the integer conversion below is
	// defined, and the result's last select gives NaN back.
	hi := let("hi", ir.Sel(ir.Bin(ir.Lt, xv, f(ExpMaxArg)), xv, f(ExpMaxArg)))
	c := let("c", ir.Sel(ir.Bin(ir.Gt, hi, f(ExpMinArg)), hi, f(ExpMinArg)))
	ni, y := expCore(let, c)
	// 2^n as exponent bits; n = 128 (x just below ExpMaxArg) as 2·2^127.
	scale := let("s", &ir.Bitcast{To: ir.F32, X: ir.Bin(ir.Shl, ir.Bin(ir.Add, ir.Bin(ir.Min, ni, ir.Int(127)), ir.Int(127)), ir.Int(23))})
	y2 := ir.Sel(ir.Bin(ir.Gt, ni, ir.Int(127)), ir.Bin(ir.Mul, y, f(2)), y)
	v := let("v", ir.Bin(ir.Mul, y2, scale))
	res := ir.Sel(ir.Bin(ir.Lt, xv, f(ExpMinArg)), f(0),
		ir.Sel(ir.Bin(ir.Gt, xv, f(ExpMaxArg)), f(math.Inf(1)),
			ir.Sel(ir.Bin(ir.Ne, xv, xv), xv, v)))
	return lets, res
}

// PolyExpNonPos is exp(min(x, 0)) for f32 x, the online softmax's
// exp(s - max) (ExpBound), as PolyExp's lets and result expression
// without its overflow half: the clamp above is at 0, so n <= 0 and 2^n
// needs neither the clamp at 127 nor the 2·2^127 step, and there is no
// +inf select, no clamp below. A NaN x is carried through the arithmetic
// (the clamp's select keeps it, the conversion of its bits is some
// integer, and every operation after r has a NaN operand) instead of
// selected at the end.
// For x <= 0 (and -0) the result is PolyExp(x) bit for bit, NaN for NaN.
func PolyExpNonPos(prefix string, x ir.Expr) ([]ir.Stmt, ir.Expr) {
	var lets []ir.Stmt
	let := letsNamed(prefix, &lets)
	f := ir.Float
	xv := let("x", x)
	// Written so that a NaN x stays NaN: a comparison with NaN is false.
	// No clamp below: where x < ExpMinArg (-inf included) n, r and y may
	// be anything (the integer steps wrap, at worst y is NaN), and the
	// last select gives 0 there.
	hi := let("hi", ir.Sel(ir.Bin(ir.Gt, xv, f(0)), f(0), xv))
	ni, y := expCore(let, hi)
	scale := let("s", &ir.Bitcast{To: ir.F32, X: ir.Bin(ir.Shl, ir.Bin(ir.Add, ni, ir.Int(127)), ir.Int(23))})
	v := let("v", ir.Bin(ir.Mul, y, scale))
	return lets, ir.Sel(ir.Bin(ir.Lt, xv, f(ExpMinArg)), f(0), v)
}

// Cephes' tanhf: below tanhSmall, tanh(x) = x + x·z·P(z), z = x², with
// tanhPoly's coefficients (highest degree first).
const tanhSmall = 0.625

var tanhPoly = []float64{-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1}

// PolyTanh is tanh(x) for f32 x as lets named prefix+... and the
// expression of the result, in operations every CPU level vectorizes: for
// m = |x| below tanhSmall Cephes' odd polynomial m + m·z·P(z), above
// 1 - 2/(exp(2m) + 1) with PolyExp (exp overflows to +inf past m = 44:
// the quotient is 0, the result 1), then x's sign bit (so -0 stays -0);
// NaN for NaN. Both halves are computed and one selected: a vector of
// scores takes no branch.
func PolyTanh(prefix string, x ir.Expr) ([]ir.Stmt, ir.Expr) {
	var lets []ir.Stmt
	let := letsNamed(prefix, &lets)
	f := ir.Float
	xv := let("x", x)
	m := let("a", ir.Un(ir.Abs, xv))
	z := let("z", ir.Bin(ir.Mul, m, m))
	var p ir.Expr = f(tanhPoly[0])
	for _, c := range tanhPoly[1:] {
		p = &ir.MulAdd{X: p, Y: z, Z: f(c)}
	}
	small := ir.Bin(ir.Add, m, ir.Bin(ir.Mul, m, ir.Bin(ir.Mul, z, p)))
	eLets, e := PolyExp(prefix+"e", ir.Bin(ir.Mul, m, f(2)))
	lets = append(lets, eLets...)
	big := ir.Bin(ir.Sub, f(1), ir.Bin(ir.Div, f(2), ir.Bin(ir.Add, e, f(1))))
	mag := let("t", ir.Sel(ir.Bin(ir.Lt, m, f(tanhSmall)), small, big))
	bits := func(v ir.Expr) ir.Expr { return &ir.Bitcast{To: ir.I32, X: v} }
	sign := ir.Bin(ir.And, bits(xv), ir.Int(math.MinInt32))
	return lets, &ir.Bitcast{To: ir.F32, X: ir.Bin(ir.Or, bits(mag), sign)}
}

// letsNamed returns a function that appends a let named prefix+name of e
// to *lets and returns a reference to it.
func letsNamed(prefix string, lets *[]ir.Stmt) func(name string, e ir.Expr) ir.Expr {
	return func(name string, e ir.Expr) ir.Expr {
		*lets = append(*lets, &ir.Let{Name: prefix + name, Value: e})
		return ir.R(prefix+name, e.Type())
	}
}

// expCore is n and y of exp(c) = y·2^n for c in [ExpMinArg, ExpMaxArg]
// (garbage outside, NaN for NaN), as lets through let.
func expCore(let func(string, ir.Expr) ir.Expr, c ir.Expr) (ni, y ir.Expr) {
	f := ir.Float
	// n = round(c·log2 e) by the round-to-nearest of adding 1.5·2^23 (the
	// sum's low mantissa bits are n: |n| ≤ 128), read back as integer
	// bits rather than by subtracting 1.5·2^23 again (which fast-math
	// inside vector loops may fold away). Two dependent operations and a
	// conversion, where a truncation corrected to a floor took six.
	k := let("k", &ir.MulAdd{X: c, Y: f(ExpLog2E), Z: f(expRoundMagic)})
	ni = let("n", ir.Bin(ir.Sub, &ir.Bitcast{To: ir.I32, X: k}, ir.Int(int64(math.Float32bits(expRoundMagic)))))
	nf := let("nf", ir.Cvt(ir.F32, ni))
	// MulAdds: fast-math reassociation inside vector loops must not merge
	// the two halves of ln 2.
	r := let("r", &ir.MulAdd{X: nf, Y: f(-ExpLn2Lo), Z: &ir.MulAdd{X: nf, Y: f(-ExpLn2Hi), Z: c}})
	// P(r) by Estrin's scheme: three independent pairs, combined with r²
	// and r⁴, half the dependent multiply-adds of Horner's. Vectorized
	// exp is bound by its dependency chain (a loop iteration's ~40
	// operations fill the scheduler before the next iteration's can
	// issue), so the chain's length is its cost.
	r2 := let("r2", ir.Bin(ir.Mul, r, r))
	r4 := let("r4", ir.Bin(ir.Mul, r2, r2))
	pair := func(i int) ir.Expr { return &ir.MulAdd{X: f(expPoly[i]), Y: r, Z: f(expPoly[i+1])} }
	pv := let("p", &ir.MulAdd{X: r4, Y: pair(0), Z: &ir.MulAdd{X: r2, Y: pair(2), Z: pair(4)}})
	y = let("y", ir.Bin(ir.Add, &ir.MulAdd{X: pv, Y: r2, Z: r}, f(1)))
	return ni, y
}
