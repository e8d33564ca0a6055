package conformance

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// TestRopeOffsetPastInt32: a key rotates at kv_pos + k_rope_pos_offset[b]
// as an integer, not as a wrapped i32. An offset near INT32_MAX (an
// untrusted request can send one) puts later keys past 2^31; a kernel that
// adds in i32 rotates them at negative positions and disagrees with the
// reference, which adds in Go ints.
func TestRopeOffsetPastInt32(t *testing.T) {
	t.Parallel()
	const src = `variant rope_far { heads qo = 4, kv = 2
	  head_dim 32
	  dtype f32
	  cache paged(page_size = 4)
	  rope inline(theta = 10000) }`
	peerSuites(t, src, func(t *testing.T, s *Suite) {
		v := s.V
		c := reference.NewCase(v, rand.New(rand.NewSource(31)), reference.CaseSpec{QLens: []int{3, 2}, KVLens: []int{37, 21}, NaNFill: true})
		c.KRopeOffset = []int32{math.MaxInt32 - 20, math.MaxInt32}
		for i := range c.QRopePos {
			c.QRopePos[i] = math.MaxInt32 - int32(i)
		}
		wantO, wantL := reference.Attention(v, c)
		gotO, gotL := runOn(t, s, ir.RolePrefill, c, 2)
		expect(t, s, v.Name, gotO, gotL, wantO, wantL)
	})
}
