package passes_test

import (
	"flag"
	"testing"

	"github.com/attnc/attnc/internal/passtest"
	"github.com/attnc/attnc/passes"
)

var update = flag.Bool("update", false, "rewrite the after sections of testdata/*.txt")

func TestPassOrder(t *testing.T) {
	if err := passes.CheckOrder(passes.Neutral, passes.NeutralConstraints); err != nil {
		t.Error(err)
	}
	swapped := append([]passes.Pass(nil), passes.Neutral...)
	swapped[0], swapped[2] = swapped[2], swapped[0]
	if err := passes.CheckOrder(swapped, passes.NeutralConstraints); err == nil {
		t.Error("CheckOrder accepts classify-tiles before inline-defs")
	}
	if err := passes.CheckOrder(passes.Neutral, []passes.Constraint{{"inline-defs", "no-such-pass", "typo"}}); err == nil {
		t.Error("CheckOrder accepts a constraint naming an unknown pass")
	}
}

// TestBeforeAfter runs each testdata/*.txt case (see internal/passtest)
// through the passes this package owns: the neutral ones and heap-scratch,
// which the CPU table runs.
func TestBeforeAfter(t *testing.T) {
	passtest.Run(t, "testdata/*.txt", append(append([]passes.Pass(nil), passes.Neutral...), passes.HeapScratchPass), *update)
}
