package conformance

import (
	"flag"
	"path/filepath"
	"slices"
	"testing"

	"github.com/attnc/attnc/driver"
)

var hipAll = flag.Bool("hip.all", false, "run every variant of cudaMatrix on the HIP emulator (64-lane warps), not only cudaShort")

// TestHIPEmulatedMatrix runs the emulated CUDA matrix's variants (cudaShort
// by default, every one with -hip.all) for the hip target, through its
// harness: the .hip compiled for the CPU emulator with 64-lane warps.
func TestHIPEmulatedMatrix(t *testing.T) {
	needEmu(t)
	for _, src := range cudaMatrix {
		v := spec(t, src)
		if !*hipAll && !slices.Contains(cudaShort, v.Name) {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s, err := BuildFor(v, "hip", t.TempDir(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Lib.Close()
			for _, r := range s.RunAll([]int{1}, 11) {
				if !r.Pass {
					t.Errorf("%s", r)
				}
				record("hip "+dtypeKey(v), r)
			}
		})
	}
}

// TestHIPExamples runs examples' whole conformance matrices on the HIP
// emulator (64-lane warps): examplesCUDAShort by default, every example
// with -hip.all.
func TestHIPExamples(t *testing.T) {
	needEmu(t)
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.attn"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		vs, err := driver.ParseSpecs([]string{f})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if !*hipAll && !slices.Contains(examplesCUDAShort, v.Name) {
				continue
			}
			t.Run(v.Name, func(t *testing.T) {
				t.Parallel()
				s, err := BuildFor(v, "hip", t.TempDir(), Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Lib.Close()
				recordAll(t, "example hip "+dtypeKey(v), s.RunAll([]int{1}, 5))
			})
		}
	}
}
