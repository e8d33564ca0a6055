package conformance

import (
	"hash/fnv"
	"math"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// BoundRatio is the largest ratio, over the elements, of o's error
// |got - want| to the bound CompareOut applies at that element: half an
// ulp of dt at want plus reference.HalfAllowance*mag for f16/bf16 (the
// once-rounded exact value plus the f32 accumulation's allowance),
// Tolerance*max(1, |want|) for f32. A result passes when it is at most 1.
// Elements where want is NaN are left out (compareNaN judges them); a
// non-finite mismatch gives +Inf.
func BoundRatio(dt ir.DType, got []float32, want, mag []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	worst := 0.0
	for i, w := range want {
		g := float64(got[i])
		switch {
		case math.IsNaN(w):
			continue
		case math.IsNaN(g):
			return math.Inf(1)
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			if g != w {
				return math.Inf(1)
			}
			continue
		}
		var bound float64
		if dt == ir.DTF32 {
			bound = Tolerance * math.Max(1, math.Abs(w))
		} else {
			m := 0.0
			if i < len(mag) {
				m = mag[i]
			}
			bound = 0.5*reference.ULP(dt, w) + reference.HalfAllowance*m
		}
		e := math.Abs(g - w)
		if e == 0 {
			continue
		}
		worst = max(worst, e/bound)
	}
	return worst
}

// digest is an FNV-64a hash of the outputs' bytes: two builds of one
// variant computed the same outputs on a case when their digests agree.
func digest(bufs ...*cpurt.Buffer) uint64 {
	h := fnv.New64a()
	for _, b := range bufs {
		if b != nil {
			h.Write(b.U8())
		}
	}
	return h.Sum64()
}
