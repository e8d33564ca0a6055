package conformance

import (
	"math"
	"math/rand"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// TestAllowanceUsedMatchesCompare: AllowanceUsed is at most 1 exactly when
// CompareOut passes, for f16, bf16 and f32 outputs with errors around
// their bounds, so allowance_used reads as pass/fail.
func TestAllowanceUsedMatchesCompare(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(5))
	for _, dt := range []ir.DType{ir.DTF16, ir.DTBF16, ir.DTF32} {
		for trial := 0; trial < 2000; trial++ {
			n := 1 + rng.Intn(8)
			got, want, mag := make([]float32, n), make([]float64, n), make([]float64, n)
			for i := range want {
				w := (rng.Float64()*2 - 1) * math.Pow(2, float64(rng.Intn(12)-6))
				want[i] = w
				mag[i] = math.Abs(w) * (1 + 4*rng.Float64())
				var bound float64
				if dt == ir.DTF32 {
					bound = Tolerance * math.Max(1, math.Abs(w))
				} else {
					bound = 0.5*reference.ULP(dt, w) + reference.HalfAllowance*mag[i]
				}
				got[i] = float32(w + (rng.Float64()*2.4-1.2)*bound)
			}
			_, _, ok := CompareOut(dt, got, want, mag)
			r := AllowanceUsed(dt, got, want, mag)
			// float32(got) rounds: only judge cases clear of the edge.
			if math.Abs(r-1) < 1e-3 {
				continue
			}
			if ok != (r <= 1) {
				t.Fatalf("%s: CompareOut ok=%v but AllowanceUsed=%v (got %v want %v mag %v)", dt, ok, r, got, want, mag)
			}
		}
	}
}

// TestResultPrintsAppliedBound: a half-precision output more than half an
// ulp off that passes (its error within the accumulation allowance) prints
// the bound it passed, not "tol=0.5ulp" under a larger max_err.
func TestResultPrintsAppliedBound(t *testing.T) {
	t.Parallel()
	dt := ir.DTF16
	want := []float64{0.001}
	u := reference.ULP(dt, want[0])
	mag := []float64{u / reference.HalfAllowance} // values that cancel: an allowance of one ulp
	got := []float32{float32(want[0] + 1.08*u)}
	maxErr, _, ok := CompareOut(dt, got, want, mag)
	if !ok || maxErr <= 0.5 {
		t.Fatalf("setup: CompareOut = %v, %v; want a pass above 0.5ulp", maxErr, ok)
	}
	r := Result{Kernel: "k", Case: "c", DType: dt, MaxErr: maxErr, Allowance: AllowanceUsed(dt, got, want, mag), Pass: ok}
	s := r.String()
	if strings.Contains(s, "tol=0.5ulp") || !strings.Contains(s, "bound=0.5ulp+2^-20*mag") {
		t.Fatalf("result line does not name the bound applied: %s", s)
	}
	// 1.08ulp is 0.58ulp past the half ulp, of an allowance of one ulp.
	m := regexp.MustCompile(`allowance_used=([0-9.]+)`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no allowance_used in %s", s)
	}
	if v, _ := strconv.ParseFloat(m[1], 64); math.Abs(v-0.58) > 0.011 {
		t.Errorf("prints allowance_used=%v, want 0.58: %s", v, s)
	}
	// Within half an ulp everywhere, no allowance is used.
	if u := AllowanceUsed(dt, []float32{float32(want[0] + 0.4*u)}, want, mag); u != 0 {
		t.Errorf("an error of 0.4ulp uses %v of the allowance, want 0", u)
	}
}
