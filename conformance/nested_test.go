package conformance

import (
	"strings"
	"testing"
)

// nestedMaskSpec has a mask as deeply nested as the frontend allows
// around abs, min and max, the operators whose interval rules read a bound
// twice (classify-tiles names those bounds with lets, and pipeline-kv
// evaluates the skip test's lets for the tile it prefetches). The mask
// hides some positions in every tile class: it must give the reference's
// results on the CPU and on the emulated CUDA target.
func nestedMaskSpec() string {
	e := "(q_pos - kv_pos)"
	for i := range 30 {
		switch i % 3 {
		case 0:
			e = "abs(" + e + " - 1)"
		case 1:
			e = "min(" + e + ", 40)"
		case 2:
			e = "max(" + e + " - 2, -3)"
		}
	}
	return `variant nested_abs { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  mask expr(kv_pos <= q_pos && ` + e + ` != 3 && ` + strings.Repeat("abs(", 20) + "q_pos - kv_pos" + strings.Repeat(")", 20) + ` < 300) }`
}

func TestNestedMaskKernels(t *testing.T) {
	t.Parallel()
	peerSuites(t, nestedMaskSpec(), func(t *testing.T, s *Suite) {
		threads := []int{1, 3}
		if s.Target == "cuda" {
			threads = []int{1}
		}
		for _, r := range s.RunAll(threads, 5) {
			if !r.Pass {
				t.Errorf("%s", r)
			}
		}
	})
}
