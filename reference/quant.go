package reference

import (
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/attnc/attnc/ir"
)

// The 8-bit KV codes, written from their definitions rather than from the
// kernels' bit manipulation: OCP 8-bit Floating Point Specification (OFP8)
// rev. 1.0 for E4M3 and E5M2, and int8 two's complement. DESIGN §3: a
// cached value is code value * scale; append stores
// round-to-nearest-even(x / scale) saturated to the finite range, NaN stays
// NaN (fp8) or becomes 0 (int8), -0 keeps its sign (fp8).

// FP8 is an OFP8 format: exponent and mantissa widths and bias. IEEE
// formats (E5M2) reserve the all-ones exponent for inf (mantissa 0) and NaN;
// E4M3 has no inf and one NaN magnitude, S.1111.111, so its all-ones
// exponent also holds the normals up to S.1111.110 = 448.
type FP8 struct {
	Name          string
	ExpBits, Mant int
	Bias          int
	IEEE          bool
}

// The two OFP8 formats.
var (
	E4M3 = FP8{Name: "e4m3", ExpBits: 4, Mant: 3, Bias: 7}
	E5M2 = FP8{Name: "e5m2", ExpBits: 5, Mant: 2, Bias: 15, IEEE: true}
)

// FP8Of is dt's format; ok is false for other dtypes.
func FP8Of(dt ir.DType) (f FP8, ok bool) {
	switch dt {
	case ir.DTE4M3:
		return E4M3, true
	case ir.DTE5M2:
		return E5M2, true
	}
	return FP8{}, false
}

// Value is the real value of code c (OFP8 §"Encodings"): sign S, biased
// exponent E and mantissa M; E = 0 is subnormal, (-1)^S 2^(1-bias) M/2^m;
// otherwise (-1)^S 2^(E-bias) (1 + M/2^m), except the special encodings.
func (f FP8) Value(c uint8) float64 {
	s := c >> 7
	e := int(c>>f.Mant) & (1<<f.ExpBits - 1)
	m := int(c) & (1<<f.Mant - 1)
	allOnes := e == 1<<f.ExpBits-1
	var x float64
	switch {
	case f.IEEE && allOnes && m == 0:
		x = math.Inf(1)
	case f.IEEE && allOnes, !f.IEEE && allOnes && m == 1<<f.Mant-1:
		return math.NaN()
	case e == 0:
		x = math.Ldexp(float64(m), 1-f.Bias-f.Mant)
	default:
		x = math.Ldexp(float64(m+1<<f.Mant), e-f.Bias-f.Mant)
	}
	if s == 1 {
		x = -x
	}
	return x
}

// values is Value of every code of f, computed once per format: Encode
// searches them for each input (a pool of a million elements included).
func (f FP8) values() *[256]float64 {
	switch f {
	case E4M3:
		return e4m3Values()
	case E5M2:
		return e5m2Values()
	}
	return f.valueTable()
}

func (f FP8) valueTable() *[256]float64 {
	var t [256]float64
	for c := range t {
		t[c] = f.Value(uint8(c))
	}
	return &t
}

var (
	e4m3Values = sync.OnceValue(E4M3.valueTable)
	e5m2Values = sync.OnceValue(E5M2.valueTable)
)

// MaxCode is the code of the largest finite value (448, 57344).
func (f FP8) MaxCode() uint8 {
	if f.IEEE {
		return uint8((1<<f.ExpBits-1)<<f.Mant) - 1
	}
	return 0x7e
}

// Max is the largest finite value.
func (f FP8) Max() float64 { return f.Value(f.MaxCode()) }

// Encode is the code of x: NaN gives 0x7f with x's sign; |x| at or above
// the largest finite value (infinities included) saturates to it;
// otherwise the finite non-negative code nearest to |x|, on a tie the one
// with an even mantissa (round to nearest, ties to even), with x's sign
// (so -0 and negative values that round to 0 give 0x80).
func (f FP8) Encode(x float64) uint8 {
	var sign uint8
	if math.Signbit(x) {
		sign = 0x80
	}
	if math.IsNaN(x) {
		return 0x7f | sign
	}
	a := math.Abs(x)
	max := f.MaxCode()
	if a >= f.Value(max) {
		return max | sign
	}
	// The finite non-negative codes 0..max in increasing order of value:
	// find the neighbours of a (lo: the last code whose value is <= a).
	vals := f.values()
	lo := uint8(sort.Search(int(max)+1, func(c int) bool { return vals[c] > a }) - 1)
	hi := lo + 1
	dl, dh := a-vals[lo], vals[hi]-a
	switch {
	case dl < dh:
		return lo | sign
	case dh < dl:
		return hi | sign
	case lo&1 == 0:
		return lo | sign
	}
	return hi | sign
}

// I8Value is the value of int8 code c.
func I8Value(c uint8) float64 { return float64(int8(c)) }

// I8Encode is the int8 code of x: NaN gives 0; x is clamped to [-127, 127]
// (infinities too) and rounded to the nearest integer, ties to even.
func I8Encode(x float64) uint8 {
	if math.IsNaN(x) {
		return 0
	}
	return uint8(int8(math.RoundToEven(math.Max(-127, math.Min(127, x)))))
}

// CodeValue is the value of code c of 8-bit dtype dt.
func CodeValue(dt ir.DType, c uint8) float64 {
	if f, ok := FP8Of(dt); ok {
		return f.Value(c)
	}
	return I8Value(c)
}

// CodeOf is the code of 8-bit dtype dt for value x (no scale).
func CodeOf(dt ir.DType, x float64) uint8 {
	if f, ok := FP8Of(dt); ok {
		return f.Encode(x)
	}
	return I8Encode(x)
}

// Quantize is append's code of 8-bit dtype dt for input x and scale
// (DESIGN §3): x / scale in f32 (IEEE division, rounded once, as vLLM's
// and FlashInfer's quantizers compute it), encoded. A NaN quotient's sign,
// which IEEE 754 leaves open, is the one x86's division gives: a NaN x's,
// else a NaN scale's, else negative (0/0, inf/inf; docs/spec.md).
func Quantize(dt ir.DType, x, scale float32) uint8 {
	q := x / scale
	if q != q {
		var sign uint32 = 1 << 31
		switch {
		case x != x:
			sign = math.Float32bits(x) & (1 << 31)
		case scale != scale:
			sign = math.Float32bits(scale) & (1 << 31)
		}
		q = math.Float32frombits(0x7fc00000 | sign)
	}
	return CodeOf(dt, float64(q))
}

// QuantEdges are the inputs of dtype in where append's rounding and
// saturation decide, for a cache of 8-bit dtype code with scale: each
// anchor times scale, rounded to in, its negation and its neighbours one
// ulp of in either side. The anchors, in code units, are every finite code
// value, the midpoints between neighbouring values (ties), the largest
// finite value and above it (the tie past it, 1.5x, 4x), 1e30 and the
// largest f32; for fp8 half and a quarter of the smallest subnormal and
// 1.5 of it. Then the specials: ±inf, NaN of both signs, ±0 and f32
// subnormals (as in rounds them).
func QuantEdges(code, in ir.DType, scale float32) []float32 {
	var vals []float64
	for c := range 256 {
		if v := CodeValue(code, uint8(c)); !math.IsNaN(v) && !math.IsInf(v, 0) {
			vals = append(vals, v)
		}
	}
	slices.Sort(vals)
	vals = slices.Compact(vals) // +0 and -0 are one value
	var out []float32
	add := func(a float64) {
		f := Round(in, float32(a*float64(scale)))
		out = append(out, f, -f, stepUlp(in, f, 1), stepUlp(in, f, -1))
	}
	for i, a := range vals {
		add(a)
		if i+1 < len(vals) {
			add((a + vals[i+1]) / 2)
		}
	}
	maxV := 127.0
	if f, ok := FP8Of(code); ok {
		maxV = f.Max()
		add(f.Value(1) / 2)
		add(f.Value(1) / 4)
		add(f.Value(1) * 1.5)
	}
	add(maxV)
	add(maxV * 1.0625)
	add(maxV * 1.5)
	add(maxV * 4)
	add(1e30)
	add(math.MaxFloat32)
	for _, x := range []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		float32(math.Copysign(math.NaN(), -1)), 0, float32(math.Copysign(0, -1)),
		math.Float32frombits(1), math.Float32frombits(0x80000001), math.Float32frombits(0x007fffff)} {
		out = append(out, Round(in, x))
	}
	return out
}

// stepUlp is the value of dtype dt (f32, f16 or bf16) next to x (a dt
// value) towards +inf (dir 1) or -inf (dir -1): the bit pattern one step
// away, as math.Nextafter32 steps f32's.
func stepUlp(dt ir.DType, x float32, dir int) float32 {
	if dt == ir.DTF32 {
		return math.Nextafter32(x, float32(math.Inf(dir)))
	}
	bits, float := F16Bits, F16Float
	if dt == ir.DTBF16 {
		bits, float = BF16Bits, BF16Float
	}
	const sign = 0x8000
	b := bits(x)
	if x != x || (dir > 0 && x > 0 && math.IsInf(float64(x), 1)) || (dir < 0 && math.IsInf(float64(x), -1)) {
		return x
	}
	switch {
	case b&^sign == 0: // ±0: the smallest subnormal of the direction's sign
		if dir > 0 {
			return float(1)
		}
		return float(sign | 1)
	case (b&sign == 0) == (dir > 0): // away from zero
		return float(b + 1)
	}
	return float(b - 1)
}
