package conformance

import (
	"slices"
	"testing"

	"github.com/attnc/attnc/targets"
)

// TestEmulatedExamples runs examples' whole conformance matrices on every
// registered target besides cuda (TestExamples) whose kernels run on an
// emulator: examplesEmulatedShort by default, every example with -cuda.all.
func TestEmulatedExamples(t *testing.T) {
	t.Parallel()
	vs := exampleVariants(t)
	ran := false
	for _, name := range Harnessed() {
		tg, _, err := harnessOf(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, threads := tg.(targets.HostRuntime); threads || name == "cuda" {
			continue // TestExamples
		}
		ran = true
		t.Run(name, func(t *testing.T) {
			needEmu(t)
			for _, v := range vs {
				if !*cudaAll && !slices.Contains(examplesEmulatedShort, v.Name) {
					continue
				}
				t.Run(v.Name, func(t *testing.T) {
					t.Parallel()
					s, err := BuildFor(v, name, t.TempDir(), Options{})
					if err != nil {
						t.Fatal(err)
					}
					defer s.Lib.Close()
					recordAll(t, "example "+name+" "+dtypeKey(v), s.RunAll([]int{1}, 5))
				})
			}
		})
	}
	if !ran {
		t.Skip("no other emulated target is registered")
	}
}

// examplesEmulatedShort are the examples TestEmulatedExamples runs by
// default: llama3_8b_fp8, f16 on the tensor cores (head_dim 128, a CSR
// table in HND) over an e4m3 cache with append and copy_page. Its plain
// f16 twin llama3_8b (examplesCUDAShort's other) runs the same kernels
// over f16 pages, which the matrix's cu_ps16_f16 runs by default too;
// -cuda.all runs every example.
var examplesEmulatedShort = []string{"llama3_8b_fp8"}
