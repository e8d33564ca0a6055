package driver

import (
	"flag"
	"slices"
	"sync"
	"testing"
)

// update is accepted so that `go test ./... -update`, which regenerates the
// golden files of the packages that have them, runs here too.
var _ = flag.Bool("update", false, "regenerate golden files (none in this package)")

// examplesAll runs the CUDA toolchain tests (TestSASS, TestCUDAToPTX,
// TestCUDANVCCBranch) on every example, and TestSASS and TestCUDAToPTX at
// both architectures on cudaOneArch and TestSASS at sm_80 on sassSM90Only
// too, TestHeaderDeclaresOnlyDefined on every example with
// every target set, TestDeterministic's build of every example at once
// and TestVectorized(AArch64) on vectorizedLong too; CI's long pass sets it.
var examplesAll = flag.Bool("examples.all", false, "run the CUDA toolchain tests (SASS, PTX, the nvcc branch) on every example, not only cudaShort")

// cudaShort are the examples the default run takes through the slow CUDA
// toolchain steps (ptxas and cuobjdump, a second PTX architecture, the nvcc
// branch at -O1): f16 on tensor cores with a CSR table in HND (llama3_8b,
// whose cubins cli's TestSASSCommand shares through the run's tool
// cache), f32 on the SIMT path in NHD (mha_softcap), MLA (deepseek_v3_mla)
// and bf16 with qkv_append (qwen3_8b). The other examples compile to PTX
// with -examples.all (CI's long pass), among them llama3_8b_fp8 (an 8-bit
// cache with append and copy_page: the f16 tensor-core path of llama3_8b
// after a conversion; the costliest to assemble, about a tenth of the
// package's CPU) and mistral_7b (a block table with a window: bf16 on
// tensor cores as qwen3_8b), which the default run took until the
// default go test ./... had to fit in ten minutes.
var cudaShort = []string{"deepseek_v3_mla", "llama3_8b", "mha_softcap", "qwen3_8b"}

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

// cudaOneArch are the examples of cudaShort that TestSASS and
// TestCUDAToPTX take at one architecture by default (both, sm_80 and
// sm_90, with -examples.all, CI's long pass): mha_softcap (f32 on the
// SIMT path) at sm_80 and qwen3_8b (bf16 on the tensor cores) at sm_90.
// llama3_8b (f16 on the tensor cores) takes both, as cli's TestSASSCommand
// does (the run's tool cache shares its PTX and cubins), and
// deepseek_v3_mla its PTX at both and its SASS at sm_90 (sassSM90Only).
var cudaOneArch = map[string]string{"mha_softcap": "sm_80", "qwen3_8b": "sm_90"}

// cudaArchs are the architectures the CUDA toolchain tests take for
// example ex.
func cudaArchs(ex string) []string {
	if a, ok := cudaOneArch[ex]; ok && !*examplesAll {
		return []string{a}
	}
	return []string{"sm_80", "sm_90"}
}

// vectorizedLong are the examples TestVectorized and TestVectorizedAArch64
// leave to -examples.all (CI's long pass): by default they check the
// vectorized loops of llama3_8b (f16, HND) only.
var vectorizedLong = []string{"mha_softcap"}

// vectorizedExamples are the examples TestVectorized and
// TestVectorizedAArch64 check.
func vectorizedExamples() []string {
	out := []string{"llama3_8b"}
	if *examplesAll {
		out = append(out, vectorizedLong...)
	}
	return out
}

// builds memoizes buildTargets: Build is deterministic (TestDeterministic
// checks it with builds of its own), so the tests that read one example's
// artifacts for the same targets (TestSASS, TestCUDAToPTX,
// TestCUDANVCCBranch, TestHeaderDeclaresOnlyDefined, the manifest tests)
// share one build instead of repeating it. Callers must not modify the
// Output.
var builds sync.Map // example + " " + targets -> *buildOnce

type buildOnce struct {
	once sync.Once
	out  *Output
	err  error
}

// TestShortListsNameExamples: every name of cudaShort, sassSM90Only,
// cudaOneArch and vectorizedLong is an example, so that no list silently
// names nothing, and sassSM90Only's and cudaOneArch's are cudaShort's.
func TestShortListsNameExamples(t *testing.T) {
	var oneArch []string
	for ex, arch := range cudaOneArch {
		oneArch = append(oneArch, ex)
		if arch != "sm_80" && arch != "sm_90" {
			t.Errorf("cudaOneArch gives %s architecture %s, not sm_80 or sm_90", ex, arch)
		}
	}
	for list, ns := range map[string][]string{"cudaShort": cudaShort, "sassSM90Only": sassSM90Only, "cudaOneArch": oneArch, "vectorizedLong": vectorizedLong} {
		for _, n := range ns {
			if !slices.Contains(inScope, n) {
				t.Errorf("%s names %s, which examples/ does not have", list, n)
			}
			if (list == "sassSM90Only" || list == "cudaOneArch") && !slices.Contains(cudaShort, n) {
				t.Errorf("%s names %s, which cudaShort does not have", list, n)
			}
		}
	}
}
