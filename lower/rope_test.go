package lower

import (
	"math"
	"testing"

	"github.com/attnc/attnc/ir"
)

// turnCosSinULPBound is how far turnCosSin's cos and sin may be from the
// float64 cos and sin of the exact angle t·2π/2^24, in ulps of the
// float32 result (or of 2^-24 for results below 2^-24 ... 0): the
// reduction's one rounding of x, its f32 constant and the polynomials'.
const turnCosSinULPBound = 2.0

// TestTurnCosSin runs turnCosSin in the interpreter (every f32 operation
// rounded) on every turn near the eight octant edges and a stride through
// all 2^24 turns, and checks cos and sin against float64 within
// turnCosSinULPBound: a wrong quarter's sign or swap, or a coefficient off
// in its fifth digit, fails.
func TestTurnCosSin(t *testing.T) {
	var ts []int32
	for o := int32(0); o <= 8; o++ {
		for d := int32(-40); d <= 40; d++ {
			if v := o<<21 + d; v >= 0 && v < 1<<24 {
				ts = append(ts, v)
			}
		}
	}
	for v := int32(0); v < 1<<24; v += 997 {
		ts = append(ts, v)
	}
	var b blk
	b.loop("i", i32(0), ir.R("n", ir.I32), ir.Serial, ir.NoTag, func(x *blk) {
		i := ir.R("i", ir.I32)
		c, s := turnCosSin(x, x.let("rope_t", ldi("t", i)))
		x.store("c", i, c)
		x.store("s", i, s)
	})
	b.add(&ir.Return{Value: i32(0)})
	m := &ir.Module{Name: "cs", Prefix: "cs", Kernels: []*ir.Kernel{{
		Name: "cs", Role: ir.RoleDecode,
		Params: []*ir.Param{{Name: "t", Buffer: true, Elem: ir.I32}, {Name: "c", Buffer: true, Elem: ir.F32, Output: true},
			{Name: "s", Buffer: true, Elem: ir.F32, Output: true}, {Name: "n", Elem: ir.I32}},
		Body: b.block(),
	}}}
	c, s := make([]float32, len(ts)), make([]float32, len(ts))
	if st, err := ir.Run(m, "cs", map[string]any{"t": ts, "c": c, "s": s, "n": int32(len(ts))}); err != nil || st != 0 {
		t.Fatalf("run: status %d, %v", st, err)
	}
	ulps := func(got float32, want float64) float64 {
		unit := math.Max(math.Abs(want), 1.0/(1<<24))
		_, e := math.Frexp(unit)
		return math.Abs(float64(got)-want) / math.Ldexp(1, e-24)
	}
	worst, at := 0.0, int32(0)
	for k, v := range ts {
		// The exact angle, reduced in integers so float64 keeps its bits.
		ang := float64(v) * (2 * math.Pi / (1 << 24))
		for _, e := range []float64{ulps(c[k], math.Cos(ang)), ulps(s[k], math.Sin(ang))} {
			if e > worst {
				worst, at = e, v
			}
		}
	}
	t.Logf("%d turns, worst %.3f ulp (t = %d)", len(ts), worst, at)
	if worst > turnCosSinULPBound {
		t.Errorf("cos/sin of turn %d off by %.3f ulp, above %g", at, worst, turnCosSinULPBound)
	}
}
