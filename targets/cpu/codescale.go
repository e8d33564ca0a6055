package cpu

import (
	"math"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// Code scale folding: e4m3's widening through the half conversion
// (HalfWiden, FiniteHalfWiden) yields the code's value / 2^8 as a half and
// restores it with one f32 multiply by 2^8 per vector — 8 multiplies per
// 128-code row of K and as many of V, beside 4 to 5 other operations per
// vector. Block-matmul moves that factor out of the inner loops where the
// product's bits cannot change, in the clones whose level converts half
// natively (where native-widen writes that widening): the products' B
// loads are written as f32(code) · 2^-8, which native-widen's foldHalfScale
// turns into the half value itself (the f32 of value/2^8, no multiply),
// and the 2^8 goes where it is one operation per many products:
//
//   - decode's Q·Kᵀ dot-product blocks (foldsDot) multiply each block's
//     result vector (L dot products) by 2^8 before storing it. Exact when
//     A holds f16 values (halfExact: decode's staged f16 query): every
//     product q·(k/2^8) is then a multiple of 2^-41 (q of 2^-24, an e4m3
//     value of 2^-9), so every partial sum is 0 or at least 2^-41 in
//     magnitude — never an f32 subnormal — and at most K·65504·448 — never
//     an overflow; rounding commutes with a power-of-two scaling in that
//     range, so each multiply-add and each add of the tree gives 2^-8
//     times the bits it gave before (infinities and NaN alike), and the
//     final ·2^8 restores them exactly. A bf16 or f32 query could reach
//     f32's subnormals or overflow in one of the two forms: not folded.
//   - decode's P·V micro-kernels (foldsPV) read A, the softmax weights,
//     from a copy scaled by 2^8 once per tile (M·K/L vector multiplies,
//     against one multiply per vector of V): each product
//     (p·2^8)·(v/2^8) equals p·v exactly, so every multiply-add gives the
//     bits it gave before. Exact when p·2^8 is: a zeroskip product's A is
//     the online softmax's weights exp(s − max) (at most 1) or -0 or NaN
//     (ir.MatMul's ZeroSkip: the attention P·V), whose scaling by 2^8
//     neither overflows nor loses a bit; -0 stays -0, so zeroskip skips
//     the same weights.
//
// In a finite-codes tile of an AVX-512 clone, native-widen widens e4m3
// through f32 bits instead (bitsWiden: FiniteBitsWiden, the f32 of value /
// 2^120, subnormal for the subnormal codes), and the factor folded is
// 2^120 (finiteCodeScale):
//
//   - P·V as above: (p·2^120)·(v/2^120) = p·v exactly, p·2^120 at most
//     2^120, -0 and NaN kept, a subnormal p scaled exactly.
//   - Q·Kᵀ over f16 queries: q·(k/2^120) would be an f32 subnormal for
//     small q and k (2^-24 · 2^-129), so the blocks multiply each load of
//     A by dotFoldA = 2^64 (exact: at most 65504 · 2^64; LLVM hoists it
//     with the loads of A out of the loop over K's rows) and each result
//     by 2^56: every product (q·2^64)·(k/2^120) is a multiple of 2^-89 and
//     every partial sum at most K · 2^16 · 448 · 2^-56, so each rounding
//     again scales exactly and the bits are the half path's.
//
// Without native-widen (a table that leaves it out) the loads stay exact
// integer widenings times 2^-8 (2^-120) — the same bits, one multiply more.

// foldCodeScales turns the folding on; tests compare against it off.
var foldCodeScales = true

// codeScale is the power of two by which level l's half widening of
// storage type t multiplies the half value it converts (2^8 for e4m3), or
// 0 where there is none to fold: a level without native half conversion,
// or a type whose HalfWiden ends in no such multiply.
func codeScale(t ir.Type, l Level) float64 {
	if !foldCodeScales || !l.NativeF16 || !t.IsStorageOnly() {
		return 0
	}
	r := ir.StorageOf(t)
	if r == nil || r.HalfWiden == nil {
		return 0
	}
	probe := ir.R("cs_probe", r.Carrier)
	_, s := scaledHalf(r.HalfWiden(probe))
	if r.FiniteHalfWiden != nil {
		if _, fs := scaledHalf(r.FiniteHalfWiden(probe)); fs != s {
			return 0
		}
	}
	return s
}

// finiteCodeScale is codeScale for the products in a finite-codes
// branch (no NaN codes there): the power of two of storage type t's
// FiniteBitsWiden where level l widens t with it (bitsWiden: 2^120 for
// e4m3), else codeScale.
func finiteCodeScale(t ir.Type, l Level) float64 {
	if !foldCodeScales || !bitsWiden(t, l) {
		return codeScale(t, l)
	}
	r := ir.StorageOf(t)
	_, s := scaledHalf(r.FiniteBitsWiden(ir.R("cs_probe", r.Carrier)))
	return s
}

// dotFoldA is the power of two a dot-product block multiplies A's f16
// values by when B's code scale exceeds 2^64 (FiniteBitsWiden's 2^120):
// the block's result is then multiplied by fold / dotFoldA.
const dotFoldA = 0x1p64

// scaledHalf matches w = f32(half h) · 2^s with 1 <= s <= 64, or w =
// bitcast.f32(bits) · 2^s with 1 <= s <= 120 (FiniteBitsWiden's form), and
// returns the f32 of h (the bitcast) and 2^s (0 when w has another form).
func scaledHalf(w ir.Expr) (ir.Expr, float64) {
	b, ok := w.(*ir.Binary)
	if !ok || b.Op != ir.Mul {
		return nil, 0
	}
	c, ok := b.Y.(*ir.Const)
	if !ok || c.T.Elem() != ir.F32 {
		return nil, 0
	}
	frac, exp := math.Frexp(c.Float)
	if frac != 0.5 || exp < 2 || exp > 121 {
		return nil, 0
	}
	if bc, ok := b.X.(*ir.Bitcast); ok && bc.To.Elem() == ir.F32 {
		return bc, c.Float
	}
	if exp > 65 {
		return nil, 0
	}
	cv, ok := b.X.(*ir.Convert)
	if !ok || cv.To.Elem() != ir.F32 {
		return nil, 0
	}
	if bc, ok := cv.X.(*ir.Bitcast); !ok || bc.To.Elem() != ir.F16 {
		return nil, 0
	}
	return cv, c.Float
}

// foldHalfScale rewrites (f32(half h) · 2^s) · 2^-s, a folded product's
// load of codes after native-widen, as f32(h): h · 2^s is exact (at most
// 65504 · 2^64, at least 2^-24 · 2 in magnitude when not 0) and so is its
// scaling back; likewise (bitcast.f32(bits) · 2^s) · 2^-s, FiniteBitsWiden's,
// as the bitcast (e4m3: value / 2^120 is exact, subnormal or not, and so
// is its scaling by 2^120). Other expressions are returned as they are.
func foldHalfScale(e ir.Expr) ir.Expr {
	b, ok := e.(*ir.Binary)
	if !ok || b.Op != ir.Mul {
		return e
	}
	c, ok := b.Y.(*ir.Const)
	if !ok {
		return e
	}
	h, s := scaledHalf(b.X)
	if s == 0 || c.Float*s != 1 || c.T != b.X.Type() {
		return e
	}
	return h
}

// loadScaled is passes.LoadF32 of B, times 1/fold when fold is not 0 (a
// folded product's B: native-widen drops both multiplies).
func loadScaled(b string, elem ir.Type, L int, at ir.Expr, fold float64) ir.Expr {
	v := passes.LoadF32(b, elem, L, at)
	if fold == 0 {
		return v
	}
	return ir.Bin(ir.Mul, v, ir.Splat(ir.Float(1/fold), L))
}

// halfExact lists the f32 arrays of body that hold f16 values only:
// every statement that writes one stores an f32 conversion of an f16
// value (a staged f16 query element) or a constant f16 represents exactly
// (the zeros of padding rows).
func halfExact(body *ir.Block) map[string]bool {
	return exactArrays(body, func(e ir.Expr) bool {
		switch x := e.(type) {
		case *ir.Convert:
			return x.To == ir.F32 && x.X.Type() == ir.F16
		case *ir.Const:
			return x.T == ir.F32 && x.Float == 0
		}
		return false
	})
}

// foldsDot reports whether decode's Q·Kᵀ dot-product blocks for mm fold
// B's code scale fold into their results: A holds f16 values.
func foldsDot(mm *ir.MatMul, fold float64, half map[string]bool) bool {
	return fold != 0 && half[mm.A] && mm.K <= 1<<20
}

// foldsPV reports whether the micro-kernels of mm (B read as stored, not
// packed) fold B's code scale into a scaled copy of A: the attention P·V
// (zeroskip: A the softmax weights), A a whole number of vectors.
func foldsPV(mm *ir.MatMul, fold float64, allocs map[string]*ir.Alloc, L int) bool {
	if fold == 0 || !mm.ZeroSkip || mm.TransB || (mm.M*mm.K)%L != 0 {
		return false
	}
	a, ok := allocs[mm.A]
	return ok && a.T == ir.F32 && a.Size >= mm.M*mm.K
}

// scaleCopy stores src[0 .. n) · f into dst, L lanes a step.
func scaleCopy(dst, src string, n, L int, f float64) []ir.Stmt {
	vt := ir.Vec(ir.F32, L)
	at := mulE(ir.R("cs_i", ir.I32), L)
	return []ir.Stmt{&ir.For{Var: "cs_i", Lo: i32c(0), Hi: i32c(n / L), Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
		&ir.Store{Buf: dst, Index: at, Value: ir.Bin(ir.Mul, ir.Ld(src, vt, at), ir.Splat(ir.Float(f), L))},
	}}}}
}
