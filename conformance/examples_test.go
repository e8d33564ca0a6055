package conformance

import (
	"path/filepath"
	"testing"

	"github.com/attnc/attnc/build"
)

// TestExamples verifies every spec under examples/ — each variant's whole
// conformance matrix (prefill, decode, merge_state, bad inputs, page
// kernels) — on the CPU kernels at 1 and 3 threads and on the CUDA
// launchers under the emulator. build.TestCUDAToPTX compiles the same files
// to PTX.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.attn"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		vs, err := build.ParseSpecs([]string{f})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			t.Run(v.Name, func(t *testing.T) {
				t.Parallel()
				t.Run("cpu", func(t *testing.T) {
					needTools(t)
					s, err := buildEnds(v, t.TempDir())
					if err != nil {
						t.Fatal(err)
					}
					defer s.Lib.Close()
					recordAll(t, "example "+dtypeKey(v), s.RunAll([]int{1, 3}, 5))
				})
				t.Run("cuda", func(t *testing.T) {
					needEmu(t)
					s, err := BuildCUDA(v, t.TempDir())
					if err != nil {
						t.Fatal(err)
					}
					defer s.Lib.Close()
					recordAll(t, "example cuda "+dtypeKey(v), s.RunAll([]int{1}, 5))
				})
			})
		}
	}
}

// recordAll fails t for every failed result and folds the errors into the
// package's maximum-error report under key.
func recordAll(t *testing.T, key string, rs []Result) {
	t.Helper()
	if len(rs) == 0 {
		t.Fatal("no results")
	}
	for _, r := range rs {
		if !r.Pass {
			t.Errorf("%s", r)
		}
		record(key, r)
	}
}
