package reference

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnc/attnc/ir"
)

func TestF16Known(t *testing.T) {
	p2 := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	cases := []struct {
		x    float32
		want uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{0.1, 0x2e66},
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{65504, 0x7bff},
		{65519.99, 0x7bff},
		{65520, 0x7c00}, // halfway to 2^16 rounds to even: inf
		{1e10, 0x7c00},
		{-1e10, 0xfc00},
		{p2(-24), 0x0001},
		{p2(-25), 0x0000},                  // tie between 0 and 2^-24: even
		{1.5 * p2(-25), 0x0001},            // above the tie
		{3 * p2(-25), 0x0002},              // 1.5 units: tie, even
		{p2(-14), 0x0400},                  // smallest normal
		{p2(-14) - p2(-24), 0x03ff},        // largest subnormal
		{p2(-14) - p2(-25), 0x0400},        // tie rounds up into the normals
		{1 + p2(-11), 0x3c00},              // tie, even
		{1 + 3*p2(-11), 0x3c02},            // tie, even
		{1 + p2(-11) + p2(-20), 0x3c01},    // above the tie
		{float32(math.Inf(1)), 0x7c00},     // inf
		{float32(math.Inf(-1)), 0xfc00},    // -inf
		{math.Float32frombits(1), 0x0000},  // f32 subnormal
		{-math.Float32frombits(1), 0x8000}, // f32 subnormal
	}
	for _, c := range cases {
		if got := F16Bits(c.x); got != c.want {
			t.Errorf("F16Bits(%g) = %#04x, want %#04x", c.x, got, c.want)
		}
	}
	if h := F16Bits(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("F16Bits(NaN) = %#04x, not a NaN", h)
	}
	for h, want := range map[uint16]float32{0x3c00: 1, 0x7bff: 65504, 0x0001: p2(-24), 0x8001: -p2(-24), 0x03ff: p2(-14) - p2(-24), 0xc000: -2} {
		if got := F16Float(h); got != want {
			t.Errorf("F16Float(%#04x) = %g, want %g", h, got, want)
		}
	}
	if !math.IsInf(float64(F16Float(0x7c00)), 1) || !math.IsInf(float64(F16Float(0xfc00)), -1) || !math.IsNaN(float64(F16Float(0x7e00))) {
		t.Error("F16Float of inf/nan")
	}
}

func TestF16RoundTripAndNearest(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := F16Float(h)
		if math.IsNaN(float64(f)) {
			if g := F16Bits(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 || g&0x8000 != h&0x8000 {
				t.Fatalf("NaN %#04x round-trips to %#04x", h, g)
			}
			continue
		}
		if g := F16Bits(f); g != h {
			t.Fatalf("F16Bits(F16Float(%#04x)) = %#04x", h, g)
		}
	}
	// Random float32 values: the result is a nearest half, ties to even.
	rng := rand.New(rand.NewSource(1))
	for range 200000 {
		x := float32(math.Ldexp(2*rng.Float64()-1, rng.Intn(44)-28))
		h := F16Bits(x)
		if h&0x7fff >= 0x7c00 {
			if math.Abs(float64(x)) < 65520 {
				t.Fatalf("F16Bits(%g) overflowed", x)
			}
			continue
		}
		d := math.Abs(float64(F16Float(h)) - float64(x))
		for _, n := range []uint16{h + 1, h - 1} {
			if n&0x7fff >= 0x7c00 || (h&0x7fff == 0 && n == h-1) {
				continue
			}
			dn := math.Abs(float64(F16Float(n)) - float64(x))
			if dn < d || dn == d && h&1 == 1 {
				t.Fatalf("F16Bits(%g) = %#04x (err %g), but %#04x is nearer or even (err %g)", x, h, d, n, dn)
			}
		}
	}
}

func TestBF16(t *testing.T) {
	p2 := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	cases := []struct {
		x    float32
		want uint16
	}{
		{1, 0x3f80},
		{-1, 0xbf80},
		{1 + p2(-8), 0x3f80},           // tie, even
		{1 + 3*p2(-8), 0x3f82},         // tie, even
		{1 + p2(-8) + p2(-20), 0x3f81}, // above the tie
		{math.MaxFloat32, 0x7f80},      // rounds to inf
		{float32(math.Inf(-1)), 0xff80},
		{3.140625, 0x4049},
	}
	for _, c := range cases {
		if got := BF16Bits(c.x); got != c.want {
			t.Errorf("BF16Bits(%g) = %#04x, want %#04x", c.x, got, c.want)
		}
	}
	for _, nan := range []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff} {
		h := BF16Bits(math.Float32frombits(nan))
		if !math.IsNaN(float64(BF16Float(h))) || uint32(h)>>15 != nan>>31 {
			t.Errorf("BF16Bits(NaN %#08x) = %#04x", nan, h)
		}
	}
	for i := range 1 << 16 {
		h := uint16(i)
		if f := BF16Float(h); !math.IsNaN(float64(f)) && BF16Bits(f) != h {
			t.Fatalf("bf16 %#04x does not round-trip", h)
		}
	}
}

func TestRoundEncode(t *testing.T) {
	xs := []float32{1, 0.1, -3.3, 70000, float32(math.Inf(1))}
	for _, dt := range []ir.DType{ir.DTF32, ir.DTF16, ir.DTBF16} {
		dec := Decode(dt, Encode(dt, xs))
		for i, x := range xs {
			if dec[i] != Round(dt, x) {
				t.Errorf("%s: decode(encode(%g)) = %g, Round = %g", dt, x, dec[i], Round(dt, x))
			}
			if Round(dt, Round(dt, x)) != Round(dt, x) {
				t.Errorf("%s: Round(%g) is not idempotent", dt, x)
			}
		}
	}
	if Round(ir.DTF16, 0.1) != F16Float(0x2e66) || Round(ir.DTBF16, 1+float32(math.Ldexp(1, -9))) != 1 {
		t.Error("Round")
	}
}
