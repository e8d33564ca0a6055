package cuda_test

import (
	"flag"
	"testing"

	"github.com/attnc/attnc/internal/passtest"
	_ "github.com/attnc/attnc/internal/testgc"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets/cuda"
	"github.com/attnc/attnc/targets/gpu"
)

var update = flag.Bool("update", false, "rewrite the after sections of testdata/*.txt")

func TestTableOrder(t *testing.T) {
	if err := passes.CheckOrder(cuda.Table, cuda.Constraints); err != nil {
		t.Fatal(err)
	}
	for _, g := range gpu.Constraints {
		found := false
		for _, c := range cuda.Constraints {
			found = found || c == g
		}
		if !found {
			t.Errorf("the cuda table lacks the GPU layer's constraint %s before %s", g.Before, g.After)
		}
	}
	for _, p := range passes.Neutral {
		if passes.Find(cuda.Table, p.Name) == nil {
			t.Errorf("the cuda table lacks the neutral pass %s", p.Name)
		}
	}
}

func TestBeforeAfter(t *testing.T) {
	passtest.Run(t, "testdata/*.txt", cuda.Table, *update)
}
