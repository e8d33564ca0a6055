package conformance

import (
	"flag"
	"slices"
	"testing"
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
