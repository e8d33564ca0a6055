package conformance

import (
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
	"github.com/attnc/attnc/targets"
)

// limitSpecs are variants at the largest shapes `attnc check` accepts
// (ir.MaxHeads, ir.MaxHeadDimQK, ir.MaxHeadDimV): f32 (the CUDA SIMT path,
// the most shared memory) and bf16 MLA (tensor cores).
var limitSpecs = []string{
	`variant lim_f32 { heads qo = 256, kv = 4
	  head_dim qk = 576, v = 512
	  dtype f32
	  cache paged(page_size = 16) }`,
	`variant lim_mla { mla(heads = 256, kv_lora_rank = 512, rope_dim = 64)
	  dtype bf16
	  cache paged(page_size = 64)
	  scale 0.07 }`,
}

// TestLargestShapes runs prefill and (split-KV) decode at the limits on the
// CPU and on the CUDA emulator, and with -cuda.all (CI's long pass) on
// every other target with a harness (HIP's emulator): what check accepts,
// the kernels serve.
func TestLargestShapes(t *testing.T) {
	t.Parallel()
	needTools(t)
	needEmu(t)
	runs := []struct {
		role    ir.Role
		spec    reference.CaseSpec
		threads int
	}{
		{ir.RolePrefill, reference.CaseSpec{Name: "prefill", QLens: []int{3, 2}, KVLens: []int{40, 70}, NaNFill: true}, 2},
		{ir.RoleDecode, reference.CaseSpec{Name: "decode", QLens: []int{1}, KVLens: []int{150}, NaNFill: true}, 64},
	}
	for _, src := range limitSpecs {
		v := spec(t, src)
		for _, target := range Harnessed() {
			t.Run(v.Name+"/"+target, func(t *testing.T) {
				if target != "cpu" && target != "cuda" && !*cudaAll {
					t.Skip("on the other emulated targets with -cuda.all (CI's long pass, .ci/run)")
				}
				t.Parallel()
				// The CPU library clones the level this machine runs
				// only (the one its entries would pick from a library
				// of every level; the run is the same): with
				// -levels.all (CI's long pass) it has every level's
				// clone, so that opt and llc compile the largest
				// shapes at every level too.
				o := Options{}
				if target == "cpu" && !*levelsAll {
					table, err := hostLevelTable()
					if err != nil {
						t.Fatal(err)
					}
					o.Passes = table
				}
				s, err := BuildFor(v, target, t.TempDir(), o)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Lib.Close()
				if r, ok := s.tgt.(targets.HostRuntime); ok {
					// The largest shapes too need at most 64 KiB of the
					// caller's stack, as stated (by every level's clone:
					// the target's own pass table, scheduled without
					// compiling it) and as run (a target whose runtime
					// states the stack: the CPU).
					all, err := compileFor(v, target, t.TempDir(), Options{})
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range s.Entries {
						if n := r.StackBytes(all.Final, e.Symbol); n > 64<<10 {
							t.Errorf("%s needs %d bytes of stack", e.Symbol, n)
						}
					}
					s.Stack = 64 << 10
				}
				for _, r := range runs {
					if res := s.RunAttention(r.role, r.spec, 3, r.threads); !res.Pass {
						t.Errorf("%s", res)
					}
				}
			})
		}
	}
}
