package conformance

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// TestRopeFactorsNear2p20: style factors computes its angles as exactly as
// f64 pos · f_i although f_i is a runtime value, so the rounding rule
// holds at positions just below 2^20 (DESIGN §3.1), with factors below 1
// (faster turns than θ's schedule) and above. An angle computed in f32
// (pos · f_i with 24 bits) is off by up to 2^20 · 2^-24 = 1/16 rad there
// and fails the tolerance.
func TestRopeFactorsNear2p20(t *testing.T) {
	t.Parallel()
	const src = `variant rope_factors_far { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8)
	  rope inline(style = factors, theta = 10000, attn_factor = 1.25) }`
	peerSuites(t, src, func(t *testing.T, s *Suite) {
		v := s.V
		c := reference.NewCase(v, rand.New(rand.NewSource(41)), reference.CaseSpec{QLens: []int{3, 2}, KVLens: []int{37, 21}, NaNFill: true})
		for i := range c.RopeFactors {
			c.RopeFactors[i] = []float32{0.37, 1, 1.5, 3.25, 17, 0.9}[i%6]
		}
		c.KRopeOffset = []int32{1<<20 - 37, 1<<20 - 21}
		for i := range c.QRopePos {
			c.QRopePos[i] = 1<<20 - 1 - int32(i)
		}
		wantO, wantL := reference.Attention(v, c)
		gotO, gotL := runOn(t, s, ir.RolePrefill, c, 2)
		expect(t, s, v.Name, gotO, gotL, wantO, wantL)
	})
}

// TestRopeFactorZeroIsNaN: a factor of 0 (or NaN) makes f_i infinite or
// NaN, and pos · f_i in f64 gives NaN angles: the rotated scores, and so
// every row's o and lse, are NaN, as in the reference — not a wrapped
// fixed-point angle from an undefined conversion.
func TestRopeFactorZeroIsNaN(t *testing.T) {
	t.Parallel()
	const src = `variant rope_factors_zero { heads qo = 2, kv = 1
	  head_dim 32
	  dtype f32
	  cache paged(page_size = 4)
	  rope inline(style = factors) }`
	peerSuites(t, src, func(t *testing.T, s *Suite) {
		for _, bad := range []float32{0, float32(math.NaN())} {
			v := s.V
			c := reference.NewCase(v, rand.New(rand.NewSource(43)), reference.CaseSpec{QLens: []int{2}, KVLens: []int{9}})
			c.RopeFactors[5] = bad
			_, gotL := runOn(t, s, ir.RolePrefill, c, 1)
			_, wantL := reference.Attention(v, c)
			for i, w := range wantL {
				if !math.IsNaN(w) || !math.IsNaN(float64(gotL[i])) {
					t.Fatalf("factor %v: lse[%d] = %v, reference %v; want NaN for both", bad, i, gotL[i], w)
				}
			}
		}
	})
}
