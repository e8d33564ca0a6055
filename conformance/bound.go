package conformance

import (
	"hash/fnv"
	"math"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// AllowanceUsed is the largest share, over the elements, of the error
// allowance CompareOut grants beyond exact rounding: for f16/bf16, o's
// error past half an ulp of dt at want (what rounding the exact value
// once gives) over reference.HalfAllowance*mag (the f32 accumulation's
// allowance); for f32, |got - want| over Tolerance*max(1, |want|). A
// result passes when it is at most 1; an f16/bf16 result within half an
// ulp everywhere uses none. Elements where want is NaN are left out
// (compareNaN judges them); a non-finite mismatch gives +Inf.
func AllowanceUsed(dt ir.DType, got []float32, want, mag []float64) float64 {
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
		e := math.Abs(g - w)
		var used float64
		if dt == ir.DTF32 {
			used = e / (Tolerance * math.Max(1, math.Abs(w)))
		} else {
			past := e - 0.5*reference.ULP(dt, w)
			if past <= 0 {
				continue
			}
			m := 0.0
			if i < len(mag) {
				m = mag[i]
			}
			used = past / (reference.HalfAllowance * m) // +Inf when m is 0
		}
		worst = max(worst, used)
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
