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

// The polynomial exp (Cody and Waite's reduction and a minimax
// polynomial): exp(x) = 2^n · exp(r) with n = round(x·log2 e) and
// r = x − n·ln 2 in [−ln2/2, ln2/2], ln 2 split in two so that n·ExpLn2Hi
// is exact; exp(r) ≈ 1 + r + r²·P(r).
const (
	ExpLog2E  = 1.44269504088896341
	ExpLn2Hi  = 0.693359375
	ExpLn2Lo  = -2.12194440e-4
	ExpMaxArg = 88.72283172607421875  // the largest f32 whose exp is finite in f32
	ExpMinArg = -87.33654022216796875 // about ln(FLT_MIN): below, exp flushes to 0
)

// expRoundMagic is 1.5·2^23 + 127: c·log2 e + expRoundMagic rounds to
// the integer n + expRoundMagic (|n| <= 128 keeps it inside [2^23, 2^24),
// where an f32 ulp is 1), whose bits are n plus the magic's bits. Those
// bits' low nine are 127 + n, so shifted left by 23 they are the bits of
// 2^n for n in [-126, 127] (the exponent field 127 + n; the bits above it
// shift out): PolyExpNonPos's scale in one shift.
const expRoundMagic = 12583039.0

// expPoly are P's coefficients c2 .. c6, lowest degree first: the f32
// values of the minimax fit of (exp(r) - 1 - r)/r² in exp(r)'s relative
// error on [−ln2/2, ln2/2] (Remez, 40 digits: 3.06e-9 at most, a 20th of
// an ulp or less; each f32 rounding in evaluating it costs more).
var expPoly = []float64{0.4999999403953552, 0.1666652113199234, 0.04166838899254799, 0.008368710055947304, 0.001381461275741458}

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
	k, q := expCore(let, c)
	ni := let("n", ir.Bin(ir.Sub, &ir.Bitcast{To: ir.I32, X: k}, ir.Int(int64(math.Float32bits(expRoundMagic)))))
	// 2^n as exponent bits; n = 128 (x just below ExpMaxArg) as 2·2^127.
	scale := let("s", &ir.Bitcast{To: ir.F32, X: ir.Bin(ir.Shl, ir.Bin(ir.Add, ir.Bin(ir.Min, ni, ir.Int(127)), ir.Int(127)), ir.Int(23))})
	y := let("y", &ir.MulAdd{X: q, Y: scale, Z: scale})
	v := let("v", ir.Sel(ir.Bin(ir.Gt, ni, ir.Int(127)), ir.Bin(ir.Mul, y, f(2)), y))
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
	// No clamp below: where x < ExpMinArg (-inf included) k, r, q and the
	// scale may be anything (k's bits shift out, at worst q is NaN), and
	// the last select gives 0 there.
	hi := let("hi", ir.Sel(ir.Bin(ir.Gt, xv, f(0)), f(0), xv))
	k, q := expCore(let, hi)
	// 2^n (n in [-126, 0] where x >= ExpMinArg) straight from k's bits.
	scale := let("s", &ir.Bitcast{To: ir.F32, X: ir.Bin(ir.Shl, &ir.Bitcast{To: ir.I32, X: k}, ir.Int(23))})
	v := let("v", &ir.MulAdd{X: q, Y: scale, Z: scale})
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

// expCore is k and q of exp(c) = (1 + q)·2^n for c in [ExpMinArg,
// ExpMaxArg] (garbage outside, NaN for NaN), as lets through let: k is the
// f32 n + expRoundMagic, whose bits give n and 2^n. The caller scales
// 1 + q by 2^n as one multiply-add, s + q·s: one rounding, as 1 + q and
// an exact scaling by 2^n (where the result is normal) would round.
func expCore(let func(string, ir.Expr) ir.Expr, c ir.Expr) (k, q ir.Expr) {
	f := ir.Float
	// n = round(c·log2 e) by the round-to-nearest of adding expRoundMagic;
	// n as f32 is k minus the magic again, exact (both in one binade). A
	// MulAdd, not a product and a sum: reassociation (the fast-math flags
	// of vector loops) could fold (c·log2 e + M) - M to c·log2 e, where it
	// leaves the multiply-add alone. Two dependent operations, where a
	// truncation corrected to a floor took six and the integer bits
	// converted back took three.
	k = let("k", &ir.MulAdd{X: c, Y: f(ExpLog2E), Z: f(expRoundMagic)})
	nf := let("nf", ir.Bin(ir.Sub, k, f(expRoundMagic)))
	// MulAdds: fast-math reassociation inside vector loops must not merge
	// the two halves of ln 2.
	r := let("r", &ir.MulAdd{X: nf, Y: f(-ExpLn2Lo), Z: &ir.MulAdd{X: nf, Y: f(-ExpLn2Hi), Z: c}})
	// q = r + r²·P(r), P of degree 4 in r² steps: (c2 + c3·r) + r²·((c4 +
	// c5·r) + r²·c6), the two pairs beside r², then three dependent
	// multiply-adds: 10 multiplies and multiply-adds per vector with the
	// scaling, where Cephes' degree-7 polynomial by Estrin's scheme took
	// 12 (and an add). Vectorized, exp runs near the multiply-add units'
	// rate, so the count is most of its cost: a loop of exp(min(x - m, 0))
	// on Zen 4 took 0.280 ns a weight at x86-64-v4 and 0.50 at x86-64-v3
	// before, 0.256 and 0.32 after (with the one-subtract n and the
	// one-shift 2^n above).
	r2 := let("r2", ir.Bin(ir.Mul, r, r))
	pair := func(i int) ir.Expr { return &ir.MulAdd{X: f(expPoly[i+1]), Y: r, Z: f(expPoly[i])} }
	hi := &ir.MulAdd{X: f(expPoly[4]), Y: r2, Z: pair(2)}
	pv := let("p", &ir.MulAdd{X: hi, Y: r2, Z: pair(0)})
	q = let("q", &ir.MulAdd{X: pv, Y: r2, Z: r})
	return k, q
}
