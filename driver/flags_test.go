package driver

import (
	"flag"
	"slices"
)

// update is accepted so that `go test ./... -update`, which regenerates the
// golden files of the packages that have them, runs here too.
var _ = flag.Bool("update", false, "regenerate golden files (none in this package)")

// examplesAll runs the CUDA toolchain tests (TestSASS, TestCUDAToPTX,
// TestCUDANVCCBranch) on every example, and TestSASS at sm_80 on
// sassSM90Only too; CI's long pass sets it.
var examplesAll = flag.Bool("examples.all", false, "run the CUDA toolchain tests (SASS, PTX, the nvcc branch) on every example, not only cudaShort")

// cudaShort are the examples the default run takes through the slow CUDA
// toolchain steps (ptxas and cuobjdump, a second PTX architecture, the nvcc
// branch at -O1), about a third of the examples' cost: f16 on tensor cores
// with a CSR table in HND (llama3_8b), an 8-bit cache with append and
// copy_page (llama3_8b_fp8), f32 on the SIMT path in NHD (mha_softcap), MLA
// (deepseek_v3_mla), bf16 with qkv_append (qwen3_8b), and a block table
// with a window (mistral_7b). The other examples compile to PTX with
// -examples.all (CI's long pass).
var cudaShort = []string{"deepseek_v3_mla", "llama3_8b", "llama3_8b_fp8", "mha_softcap", "mistral_7b", "qwen3_8b"}

// cudaExamples are the examples the CUDA toolchain tests run: every one
// with -examples.all, else those of cudaShort.
func cudaExamples() []string {
	if *examplesAll {
		return inScope
	}
	var out []string
	for _, ex := range inScope {
		if slices.Contains(cudaShort, ex) {
			out = append(out, ex)
		}
	}
	return out
}
