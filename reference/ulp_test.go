package reference

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnc/attnc/ir"
)

func TestULP(t *testing.T) {
	for _, c := range []struct {
		dt   ir.DType
		x    float64
		want float64
	}{
		{ir.DTF16, 1, 0x1p-10}, {ir.DTF16, 1.999, 0x1p-10}, {ir.DTF16, -0.75, 0x1p-11},
		{ir.DTF16, 0x1p-14, 0x1p-24}, {ir.DTF16, 0x1p-20, 0x1p-24}, {ir.DTF16, 0, 0x1p-24},
		{ir.DTBF16, 1, 0x1p-7}, {ir.DTBF16, 3, 0x1p-6}, {ir.DTBF16, 0x1p-130, 0x1p-133},
		{ir.DTF32, 1, 0x1p-23}, {ir.DTF32, 0x1p-140, 0x1p-149},
	} {
		if got := ULP(c.dt, c.x); got != c.want {
			t.Errorf("ULP(%s, %g) = %g, want %g", c.dt, c.x, got, c.want)
		}
	}
}

// TestCompareULPRejectsMisrounding rounds random exact values to f16 and
// bf16 three ways: to nearest even (must pass), truncated toward zero and
// one ulp up (each must fail), with mag = |x| as a kernel's would be for a
// single position.
func TestCompareULPRejectsMisrounding(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, dt := range []ir.DType{ir.DTF16, ir.DTBF16} {
		n := 4096
		want, mag := make([]float64, n), make([]float64, n)
		nearest, trunc, up := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range want {
			x := float32((2*rng.Float64() - 1) * math.Pow(2, float64(rng.Intn(12)-8)))
			want[i], mag[i] = float64(x), math.Abs(float64(x))
			nearest[i] = Round(dt, x)
			u := math.Float32bits(x)
			if dt == ir.DTF16 {
				trunc[i] = Round(dt, math.Float32frombits(u&^(1<<13-1)))
			} else {
				trunc[i] = Round(dt, math.Float32frombits(u&^(1<<16-1)))
			}
			up[i] = nearest[i] + float32(math.Copysign(ULP(dt, float64(nearest[i])), float64(x)))
		}
		if e, i, ok := CompareULP(dt, nearest, want, mag); !ok || e > 0.5 {
			t.Errorf("%s: round to nearest even fails at %d: %.3f ulp", dt, i, e)
		}
		if e, _, ok := CompareULP(dt, trunc, want, mag); ok {
			t.Errorf("%s: truncation passes (max %.3f ulp)", dt, e)
		}
		if e, _, ok := CompareULP(dt, up, want, mag); ok {
			t.Errorf("%s: one ulp up passes (max %.3f ulp)", dt, e)
		}
		// The old relative tolerances (2e-3 f16, 1e-2 bf16) let both through.
		old := map[ir.DType]float64{ir.DTF16: 2e-3, ir.DTBF16: 1e-2}[dt]
		if _, _, ok := Compare(trunc, want, old); !ok {
			t.Logf("%s: the old tolerance %g would have caught truncation", dt, old)
		}
	}
	if _, _, ok := CompareULP(ir.DTF16, []float32{float32(math.NaN())}, []float64{1}, []float64{1}); ok {
		t.Error("NaN passes")
	}
	if _, _, ok := CompareULP(ir.DTF16, []float32{float32(math.Inf(-1))}, []float64{math.Inf(-1)}, []float64{0}); !ok {
		t.Error("matching -inf fails")
	}
}
