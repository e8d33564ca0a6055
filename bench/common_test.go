package bench

import (
	"math"
	"os"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
)

// hostLevels are the CPU levels the tests build (attnc build
// --cpu-levels): the level this machine's entries run (host, or the one
// $ATTNC_CPU_LEVEL forces), which is what they time; one opt and llc
// compile of each work kernel instead of three or four.
func hostLevels() []string {
	if l := os.Getenv("ATTNC_CPU_LEVEL"); l != "" {
		return []string{l}
	}
	return []string{"host"}
}

// needTools skips without LLVM 14 and gcc, except in CI.
func needTools(tb testing.TB) {
	tb.Helper()
	needtool.Check(tb, cpurt.Tools())
}

const small = `variant small { heads qo = 4, kv = 2
  head_dim 64
  dtype f16
  cache paged(page_size = 16)
  mask causal }`

func variant(t testing.TB, src string) *ir.Variant {
	t.Helper()
	vs, err := frontend.Parse("bench.attn", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return vs[0]
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
