package reference

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnc/attnc/ir"
)

var codeDTypes = []ir.DType{ir.DTE4M3, ir.DTE5M2, ir.DTI8}

// TestOFP8Values checks the reference decoder against the value tables of
// the OCP 8-bit Floating Point Specification (OFP8) rev. 1.0, §"FP8
// formats": exponent bias, infinities, NaN, zeros, max normal, min normal,
// max and min subnormal.
func TestOFP8Values(t *testing.T) {
	p2 := func(e int) float64 { return math.Ldexp(1, e) }
	cases := []struct {
		f    FP8
		code uint8
		want float64
	}{
		{E4M3, 0x00, 0}, {E4M3, 0x7e, 448}, {E4M3, 0xfe, -448}, {E4M3, 0x08, p2(-6)},
		{E4M3, 0x07, 0.875 * p2(-6)}, {E4M3, 0x01, p2(-9)}, {E4M3, 0x38, 1}, {E4M3, 0x78, 256},
		{E4M3, 0x7f, math.NaN()}, {E4M3, 0xff, math.NaN()}, {E4M3, 0x77, 240},
		{E5M2, 0x00, 0}, {E5M2, 0x7b, 57344}, {E5M2, 0xfb, -57344}, {E5M2, 0x04, p2(-14)},
		{E5M2, 0x03, 0.75 * p2(-14)}, {E5M2, 0x01, p2(-16)}, {E5M2, 0x3c, 1},
		{E5M2, 0x7c, math.Inf(1)}, {E5M2, 0xfc, math.Inf(-1)},
		{E5M2, 0x7d, math.NaN()}, {E5M2, 0x7e, math.NaN()}, {E5M2, 0x7f, math.NaN()}, {E5M2, 0xff, math.NaN()},
	}
	for _, c := range cases {
		got := c.f.Value(c.code)
		if got != c.want && !(math.IsNaN(got) && math.IsNaN(c.want)) {
			t.Errorf("%s %#02x = %g, want %g", c.f.Name, c.code, got, c.want)
		}
	}
	if v := E4M3.Value(0x80); v != 0 || !math.Signbit(v) {
		t.Errorf("e4m3 0x80 = %g, want -0", v)
	}
	// E4M3 has no inf and exactly two NaN codes; E5M2 six NaN codes.
	for _, f := range []FP8{E4M3, E5M2} {
		nans, infs := 0, 0
		for c := range 256 {
			v := f.Value(uint8(c))
			if math.IsNaN(v) {
				nans++
			}
			if math.IsInf(v, 0) {
				infs++
			}
		}
		want := map[string][2]int{"e4m3": {2, 0}, "e5m2": {6, 2}}[f.Name]
		if nans != want[0] || infs != want[1] {
			t.Errorf("%s: %d NaN and %d inf codes, want %v", f.Name, nans, infs, want)
		}
	}
}

// TestCodesWidenExhaustive compares the dtype table's Widen expression (the
// kernels' dequantization) with the reference decoder on all 256 codes of
// each 8-bit format, bit for bit (the sign of zero included).
func TestCodesWidenExhaustive(t *testing.T) {
	for _, dt := range codeDTypes {
		r := dt.Info()
		for c := range 256 {
			got, err := ir.EvalExpr(r.Widen(ir.IntT(ir.U8, int64(c))), nil)
			if err != nil {
				t.Fatal(err)
			}
			g, want := got.(float32), CodeValue(dt, uint8(c))
			switch {
			case math.IsNaN(want):
				if !math.IsNaN(float64(g)) {
					t.Errorf("%s %#02x widens to %g, want NaN", dt, c, g)
				}
			case float64(g) != want || math.Signbit(float64(g)) != math.Signbit(want):
				t.Errorf("%s %#02x widens to %g, want %g", dt, c, g, want)
			}
		}
	}
}

// TestCodesHalfExact checks the table's HalfExact: every finite code value
// is an f16 and a bf16 value (tensor cores take the codes after an exact
// conversion in registers), and so are inf and NaN.
func TestCodesHalfExact(t *testing.T) {
	for _, dt := range codeDTypes {
		if !dt.Info().HalfExact {
			t.Errorf("%s: HalfExact is false", dt)
		}
		for c := range 256 {
			v := float32(CodeValue(dt, uint8(c)))
			for _, h := range []ir.DType{ir.DTF16, ir.DTBF16} {
				if r := Round(h, v); r != v && !(v != v && r != r) {
					t.Errorf("%s %#02x = %g is %g in %s", dt, c, v, r, h)
				}
			}
		}
	}
}

// TestCodesNarrowEdges compares the dtype table's Narrow expression (what
// append stores) with the reference encoder, bit for bit, on the edge
// inputs, on every f16 and bf16 value, and on random f32 values of every
// magnitude.
func TestCodesNarrowEdges(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	for _, dt := range codeDTypes {
		r := dt.Info()
		inputs := QuantEdges(dt, ir.DTF32, 1)
		for h := range 1 << 16 {
			inputs = append(inputs, F16Float(uint16(h)), BF16Float(uint16(h)))
		}
		for range 20000 {
			inputs = append(inputs, math.Float32frombits(rng.Uint32()), float32(math.Ldexp(rng.Float64()*2-1, rng.Intn(40)-24)))
		}
		bad := 0
		for _, x := range inputs {
			got, err := ir.EvalExpr(r.Narrow(ir.Float(float64(x))), nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := CodeOf(dt, float64(x)); got.(uint8) != want {
				if bad++; bad <= 10 {
					t.Errorf("%s: %g (bits %#08x) narrows to %#02x, want %#02x", dt, x, math.Float32bits(x), got, want)
				}
			}
		}
	}
}

// TestQuotientCodeMatchesQuantize compares ir.QuotientCode (what append
// and qkv_append store), evaluated by the interpreter, with the reference
// quantizer, bit for bit, on the edge inputs against scales of both signs,
// zero, infinities and NaN, and on random bit patterns; once as the
// interpreter divides (x86's NaN rule) and once with every NaN quotient
// made the positive canonical NaN, as an NVIDIA GPU's division gives it.
func TestQuotientCodeMatchesQuantize(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	scales := []float32{1, -1, 0.375, -3, 0, float32(math.Copysign(0, -1)), inf, -inf, nan, -nan, 0x1p-130}
	for _, dt := range codeDTypes {
		inputs := QuantEdges(dt, ir.DTF32, 1)
		for range 2000 {
			inputs = append(inputs, math.Float32frombits(rng.Uint32()))
		}
		bad := 0
		for _, sc := range scales {
			for _, x := range inputs {
				e := ir.QuotientCode(dt.Info().Type, ir.Float(float64(x)), ir.Float(float64(sc)))
				got, err := ir.EvalExpr(e, nil)
				if err != nil {
					t.Fatal(err)
				}
				gpu, err := ir.EvalExpr(ir.MapExpr(e, canonicalNaN), nil)
				if err != nil {
					t.Fatal(err)
				}
				if gpu != got {
					if bad++; bad <= 10 {
						t.Errorf("%s: %g / %g: %#02x with the GPU's NaN, %#02x with x86's", dt, x, sc, gpu, got)
					}
				}
				code, ok := got.(uint8)
				if i, isI8 := got.(int8); isI8 {
					code, ok = uint8(i), true
				}
				if !ok {
					t.Fatalf("%s: QuotientCode gives a %T", dt, got)
				}
				if want := Quantize(dt, x, sc); code != want {
					if bad++; bad <= 10 {
						t.Errorf("%s: %g / %g (bits %#08x / %#08x) stores %#02x, want %#02x", dt, x, sc, math.Float32bits(x), math.Float32bits(sc), code, want)
					}
				}
			}
		}
	}
}

// TestQuantizeKnown pins append's rule on a few inputs worked by hand.
func TestQuantizeKnown(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	cases := []struct {
		dt       ir.DType
		x, scale float32
		want     uint8
	}{
		{ir.DTE4M3, 1, 1, 0x38},
		{ir.DTE4M3, 448, 1, 0x7e},
		{ir.DTE4M3, 464, 1, 0x7e}, // the tie past 448 (480 would be next): saturates
		{ir.DTE4M3, 1000, 1, 0x7e},
		{ir.DTE4M3, -inf, 1, 0xfe},
		{ir.DTE4M3, nan, 1, 0x7f},
		// A NaN quotient's sign is x86's: a NaN x's, else a NaN
		// scale's, else negative (the default NaN of 0/0 and inf/inf).
		{ir.DTE4M3, -nan, 1, 0xff},
		{ir.DTE4M3, -nan, -2, 0xff},
		{ir.DTE4M3, nan, -2, 0x7f},
		{ir.DTE4M3, 0, 0, 0xff},
		{ir.DTE4M3, negZero, 0, 0xff},
		{ir.DTE5M2, inf, inf, 0xff},
		{ir.DTE5M2, -1, nan, 0x7f},
		{ir.DTE5M2, 1, -nan, 0xff},
		{ir.DTE4M3, negZero, 1, 0x80},
		{ir.DTE4M3, -1e-9, 1, 0x80},    // rounds to -0
		{ir.DTE4M3, 1.0625, 1, 0x38},   // tie between 1 and 1.125: even
		{ir.DTE4M3, 1.1875, 1, 0x3a},   // tie between 1.125 and 1.25: even
		{ir.DTE4M3, 0x1p-10, 1, 0x00},  // half the smallest subnormal: even (0)
		{ir.DTE4M3, 0x1.8p-9, 1, 0x02}, // 1.5 subnormal units: even (2)
		{ir.DTE4M3, 0x1.ep-7, 1, 0x08}, // 7.5 units of 2^-9: even, the smallest normal
		{ir.DTE4M3, 3, 0.5, 0x4c},      // 6 = 1.5 * 2^2
		{ir.DTE5M2, 57344, 1, 0x7b},
		{ir.DTE5M2, 61440, 1, 0x7b}, // tie past the max: saturates
		{ir.DTE5M2, inf, 1, 0x7b},
		{ir.DTE5M2, 0x1p-17, 1, 0x00}, // half the smallest subnormal
		{ir.DTE5M2, 1.125, 1, 0x3c},   // tie between 1 and 1.25: even
		{ir.DTE5M2, 1.375, 1, 0x3e},   // tie between 1.25 and 1.5: even
		{ir.DTE5M2, negZero, 1, 0x80},
		{ir.DTI8, 2.5, 1, 2},
		{ir.DTI8, -2.5, 1, 0xfe},
		{ir.DTI8, 3.5, 1, 4},
		{ir.DTI8, 127.5, 1, 127},
		{ir.DTI8, -200, 1, 0x81}, // -127, never -128
		{ir.DTI8, -inf, 1, 0x81},
		{ir.DTI8, nan, 1, 0},
		{ir.DTI8, negZero, 1, 0},
		{ir.DTI8, 10, 4, 2}, // 2.5: even
	}
	for _, c := range cases {
		if got := Quantize(c.dt, c.x, c.scale); got != c.want {
			t.Errorf("quantize %s(%g / %g) = %#02x, want %#02x", c.dt, c.x, c.scale, got, c.want)
		}
	}
}

// TestStepUlp: for every finite f16 and bf16 value, stepUlp gives the
// next value up and down: on the right side, with no value in between.
func TestStepUlp(t *testing.T) {
	for _, dt := range []ir.DType{ir.DTF16, ir.DTBF16} {
		float := F16Float
		if dt == ir.DTBF16 {
			float = BF16Float
		}
		for h := range 1 << 16 {
			x := float(uint16(h))
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				continue
			}
			for _, dir := range []int{1, -1} {
				y := stepUlp(dt, x, dir)
				between := float32((float64(x) + float64(y)) / 2)
				if float64(y-x)*float64(dir) <= 0 || Round(dt, y) != y || (Round(dt, between) != x && Round(dt, between) != y) {
					t.Fatalf("%s: stepUlp(%g, %d) = %g", dt, x, dir, y)
				}
			}
		}
	}
}

// TestCodeToHalfExhaustive compares ir.CodeToHalf (the CUDA tensor-core
// path's conversion of a staged code to the query's half type) with the
// reference decoder on all 256 codes of each 8-bit format, for f16 and
// bf16, bit for bit (NaN: any NaN).
func TestCodeToHalfExhaustive(t *testing.T) {
	for _, dt := range codeDTypes {
		for _, h := range []ir.DType{ir.DTF16, ir.DTBF16} {
			float := F16Float
			if h == ir.DTBF16 {
				float = BF16Float
			}
			for c := range 256 {
				got, err := ir.EvalExpr(ir.CodeToHalf(dt.Type(), h.Type(), ir.IntT(ir.U8, int64(c))), nil)
				if err != nil {
					t.Fatal(err)
				}
				bits := got.(uint16)
				g, want := float(bits), CodeValue(dt, uint8(c))
				switch {
				case math.IsNaN(want):
					if !math.IsNaN(float64(g)) {
						t.Errorf("%s %#02x to %s: %g, want NaN", dt, c, h, g)
					}
				case float64(g) != want || math.Signbit(float64(g)) != math.Signbit(want):
					t.Errorf("%s %#02x to %s: %g (bits %#04x), want %g", dt, c, h, g, bits, want)
				}
			}
		}
	}
}

// canonicalNaN makes a division's NaN the positive canonical NaN, as NVIDIA
// GPUs compute it (MapExpr's callback: other nodes stay).
func canonicalNaN(e ir.Expr) ir.Expr {
	if b, ok := e.(*ir.Binary); ok && b.Op == ir.Div {
		return ir.Sel(ir.Bin(ir.Ne, b, b), ir.Float(math.NaN()), b)
	}
	return e
}
