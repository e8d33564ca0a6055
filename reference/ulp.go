package reference

import (
	"math"

	"github.com/attnc/attnc/ir"
)

// ULP is the spacing of storage type dt's values at |x|: the distance
// between the two values of dt that enclose x (the subnormal spacing below
// the smallest normal).
func ULP(dt ir.DType, x float64) float64 {
	mant, minExp := 23, -126 // f32
	switch dt {
	case ir.DTF16:
		mant, minExp = 10, -14
	case ir.DTBF16:
		mant = 7
	}
	if x == 0 {
		return math.Ldexp(1, minExp-mant)
	}
	_, e := math.Frexp(math.Abs(x)) // |x| = f * 2^e, f in [0.5, 1)
	return math.Ldexp(1, max(e-1, minExp)-mant)
}

// HalfAllowance bounds, relative to mag = sum_j w_j |v_j| / sum_j w_j, the
// error a kernel's f32 arithmetic may add before its one rounding of an
// f16/bf16 output: 16 units of 2^-24 (2^-20). A kernel computes
// o = sum_j w_j v_j / sum_j w_j in f32. A relative error e_j in a weight
// (the D-term dot product of the score, the score transform, exp; on the
// tensor cores the split of P into half-precision parts, below 2^-22)
// moves o by sum_j w_j e_j (v_j - o) / sum_j w_j, at most 2 max|e_j| mag,
// and every f32 sum or product rounds at 2^-24 of the magnitudes it adds:
// a few 2^-24 mag in all. Measured over the CPU and emulated CUDA
// conformance matrices (f32, f16 and bf16 paths) it stays below 6 units;
// 16 leaves room for a GPU's approximate exp and tensor-core accumulation.
// It stays far below half an ulp of the output (at least 2^-12 of |o| for
// f16, 2^-9 for bf16) unless |o| is much smaller than mag, so a truncating
// conversion or a result one ulp off fails.
const HalfAllowance = 0x1p-20

// CompareULP checks an f16/bf16 output got against the float64 reference
// want: each element must be within half an ulp of dt at want (what one
// round-to-nearest of the exact value gives) plus HalfAllowance*mag[i].
// NaN always fails and an infinite want must be matched exactly. It returns
// the largest error in ulps of dt at want, the index of the first element
// out of bounds (else of the largest error; -1 on a length mismatch) and
// whether every element is within its bound.
func CompareULP(dt ir.DType, got []float32, want, mag []float64) (maxULP float64, idx int, ok bool) {
	if len(got) != len(want) || len(mag) != len(want) {
		return math.Inf(1), -1, false
	}
	idx, bad := 0, -1
	for i, w := range want {
		g := float64(got[i])
		e, out := 0.0, false
		switch {
		case math.IsNaN(g) || math.IsNaN(w):
			e, out = math.Inf(1), true
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			if g != w {
				e, out = math.Inf(1), true
			}
		default:
			u := ULP(dt, w)
			e = math.Abs(g-w) / u
			out = math.Abs(g-w) > 0.5*u+HalfAllowance*mag[i]
		}
		if out && bad < 0 {
			bad = i
		}
		if e > maxULP {
			maxULP, idx = e, i
		}
	}
	if bad >= 0 {
		return maxULP, bad, false
	}
	return maxULP, idx, true
}

// MagErr is the largest error of got against want beyond what rounding to
// storage type dt explains (half an ulp of dt at want for f16/bf16, none
// for f32), in units of 2^-24 mag[i]: the f32 arithmetic error that
// HalfAllowance must cover. Non-finite elements are left out.
func MagErr(dt ir.DType, got []float32, want, mag []float64) float64 {
	worst := 0.0
	for i, w := range want {
		g := float64(got[i])
		if i >= len(mag) || math.IsNaN(g) || math.IsInf(g, 0) || math.IsNaN(w) || math.IsInf(w, 0) || mag[i] == 0 {
			continue
		}
		e := math.Abs(g - w)
		if dt != ir.DTF32 {
			e -= 0.5 * ULP(dt, w)
		}
		worst = max(worst, e/(0x1p-24*mag[i]))
	}
	return worst
}
