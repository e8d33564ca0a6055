package cpu

import (
	"fmt"
	"math"
	"testing"
)

// tanhULPBound is the error PolyTanh must stay within, in ulps of the f32
// result, against float64 tanh: compiled at every CPU level and in the
// interpreter, as PolyExp's: below tanhSmall Cephes' polynomial (about
// one ulp); above, PolyExp's error shrinks through 2/(e + 1) and the
// subtraction from 1 adds its rounding (1.3 ulp measured on Zen 5).
const tanhULPBound = 2.0

// tanhInputs are every stride-th f32 bit pattern from -24 to 24 (both
// signs, every binade down to the smallest subnormal), and the edges:
// ±0, ±inf, NaN, the largest magnitudes, the neighbours of ±tanhSmall and
// of 9.01 (above it tanh rounds to 1 in f32) and of 44.4 (where 2|x|
// passes ExpMaxArg).
func tanhInputs(stride uint32) []float32 {
	xs := append(strideFloats(stride, 24, -24), 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32)
	for _, e := range []float32{tanhSmall, 9.01, 44.4} {
		for d := int32(-4); d <= 4; d++ {
			v := math.Float32frombits(uint32(int32(math.Float32bits(e)) + d))
			xs = append(xs, v, -v)
		}
	}
	return xs
}

// tanhErr checks y = PolyTanh(x) and returns its error in ulps of the
// f32 result (subnormal ulps below 2^-126): NaN for NaN, ±1 for ±inf, the
// sign of zero kept.
func tanhErr(x, y float32) (float64, error) {
	switch {
	case math.IsNaN(float64(x)):
		if !math.IsNaN(float64(y)) {
			return 0, fmt.Errorf("tanh(NaN) = %v", y)
		}
		return 0, nil
	case x == 0:
		if y != 0 || math.Signbit(float64(y)) != math.Signbit(float64(x)) {
			return 0, fmt.Errorf("tanh(%v) = %v, want the same zero", x, y)
		}
		return 0, nil
	}
	want := math.Tanh(float64(x))
	_, e := math.Frexp(want)
	return math.Abs(float64(y)-want) / math.Ldexp(1, max(e-24, -149)), nil
}

// TestPolyTanhError compiles VectorExp's tanh for every CPU level this CPU
// runs and checks it against float64 tanh over tanhInputs, within
// tanhULPBound, and the interpreter's evaluation on a sparser sample; no
// tanhf call may be left.
func TestPolyTanhError(t *testing.T) {
	t.Parallel()
	checkPolyError(t, "tanh", []string{"tanh"}, tanhInputs(97), tanhInputs(9973), tanhErr, tanhULPBound)
}
