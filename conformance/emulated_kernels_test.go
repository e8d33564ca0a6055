package conformance

import (
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/targets"
)

// otherEmulated lists the registered targets besides cuda whose kernels
// run on this machine on an emulator rather than on the CPU's worker
// threads (HIP at 64 lanes).
func otherEmulated(t *testing.T) []string {
	var out []string
	for _, name := range Harnessed() {
		tg, _, err := harnessOf(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, threads := tg.(targets.HostRuntime); !threads && name != "cuda" {
			out = append(out, name)
		}
	}
	return out
}

// TestEmulatedKernels runs the page kernels, qkv_append and
// prefill_ragged on every target of otherEmulated, as the CUDA emulator
// runs them (TestPageKernelsCUDAEmulated, TestQKVAppendCUDAEmulated,
// TestCUDAEmulatedRagged): by default one variant of each (f16 GQA over
// NHD pages, f16 llama3 GQA with RoPE at append, f16 on the matrix cores),
// with -cuda.all the CUDA emulator's lists (an 8-bit cache, MLA's cache,
// qk_norm, every matrix variant's prefill_ragged). TestParamEmulated runs
// the param variants there.
func TestEmulatedKernels(t *testing.T) {
	t.Parallel()
	names := otherEmulated(t)
	if len(names) == 0 {
		t.Skip("no other emulated target is registered")
	}
	pick := func(short []string, one string) []string {
		if *cudaAll {
			return short
		}
		return []string{one}
	}
	for _, name := range names {
		build := func(v *ir.Variant, dir string) (*Suite, error) { return BuildFor(v, name, dir, Options{}) }
		t.Run(name, func(t *testing.T) {
			needEmu(t)
			t.Run("pages", func(t *testing.T) {
				runPageKernelSpecs(t, pick(pageKernelShort, "pk_ps16_f16_nhd_gqa"), build)
			})
			t.Run("qkv_append", func(t *testing.T) {
				runQKVAppendSpecs(t, pick(qkvAppendShort, "qa_f16_llama3_nhd_gqa"), build)
			})
			t.Run("prefill_ragged", func(t *testing.T) { emulatedRagged(t, name, []string{"cu_ps16_f16"}) })
		})
	}
}
