package conformance

import (
	"flag"
	"path/filepath"
	"slices"
	"testing"

	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/ir"
)

// examplesCUDAShort are the examples TestExamples also runs on the CUDA
// emulator by default (with -cuda.all, CI's long pass, every example):
// f16 on the tensor cores over an fp8 cache, with the page kernels
// (llama3_8b, the same f16 GQA over an f16 cache, runs with -cuda.all).
var examplesCUDAShort = []string{"llama3_8b_fp8"}

// examplesLong are the examples whose CPU matrix costs the most (MLA's
// 512-wide latent, gpt-oss's 64 heads; Phi-3's 32 MHA heads at head dim
// 96, whose RoPE factors the kernel matrix covers) and those whose
// features the default kernel matrix runs in a smaller shape (eagle_tree:
// ps8_eagle_like's tree and llama3 RoPE, f16, GQA 4, head dim 128;
// mistral_7b: ps32_block_table_sinks' bf16 window over a block table in
// NHD; llama2_streaming: the same window with sink tokens): TestExamples
// and TestSmallStacks run them with -examples.all (CI's long pass); by
// default TestLargestShapes checks MLA's 512-wide latent (and 256 heads)
// within the stated 64 KiB of stack, and the kernel matrix the features.
// To keep the default go test ./... within ten minutes, examplesBreadth
// go to the long pass too.
var examplesLong = append([]string{"deepseek_v3_mla", "gpt_oss_20b_sliding", "phi3_mini_longrope", "eagle_tree", "mistral_7b", "llama2_streaming"},
	examplesBreadth...)

// examplesBreadth are the examples of examplesLong whose features another
// example of the default run has at production shape: llama3_8b
// (llama3_8b_fp8: the same heads and layout over an 8-bit cache, and
// TestKernelMatrix's f16 variants), qwen2_7b_paged_ops (bf16 with append
// and copy_page: llama3_8b_fp8's page kernels, qwen3_8b's bf16 GQA),
// gptj_6b (f16 at head dim 256 with partial interleaved RoPE: gemma2_local's
// head dim 256, the kernel matrix's interleaved and partial RoPE) and
// mla_prefill_qk192_v128 (bf16 MHA with a 192-wide Q·K and a 128-wide V:
// TestKernelMatrix's qk != v variants) and mha_softcap (f32 MHA, causal,
// NHD, soft-capped scores: TestKernelMatrix's ps1_mha, gemma2_local's
// softcap).
var examplesBreadth = []string{"llama3_8b", "qwen2_7b_paged_ops", "gptj_6b", "mla_prefill_qk192_v128", "mha_softcap"}

var examplesAll = flag.Bool("examples.all", false, "run every example's CPU matrix in TestExamples, not only those outside examplesLong")

// TestExamples verifies every spec under examples/ — each variant's whole
// conformance matrix (prefill, decode, merge_state, bad inputs, page
// kernels) — on the CPU kernels at 1 and 3 threads and on the CUDA
// launchers under the emulator (examplesCUDAShort by default, every
// example with -cuda.all). build.TestCUDAToPTX compiles the same files to
// PTX.
func TestExamples(t *testing.T) {
	t.Parallel()
	for _, v := range exampleVariants(t) {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("cpu", func(t *testing.T) {
				if !*examplesAll && slices.Contains(examplesLong, v.Name) {
					t.Skip("on the CPU with -examples.all (CI's long pass, .ci/run)")
				}
				needTools(t)
				s, err := buildHostLevel(v, t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				defer s.Lib.Close()
				recordAll(t, "example "+dtypeKey(v), s.RunAll([]int{1, 3}, 5))
			})
			t.Run("cuda", func(t *testing.T) {
				if !*cudaAll && !slices.Contains(examplesCUDAShort, v.Name) {
					t.Skip("on the CUDA emulator with -cuda.all (CI's long pass, .ci/run); the default run takes examplesCUDAShort")
				}
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

// exampleVariants parses every spec under examples/, in file order.
func exampleVariants(t *testing.T) []*ir.Variant {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.attn"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	vs, err := driver.ParseSpecs(files)
	if err != nil {
		t.Fatal(err)
	}
	return vs
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

// TestExamplesCUDAShortNamesExist: every examplesCUDAShort (and
// examplesEmulatedShort, examplesLong) name is a
// variant of an example, so the default run does not silently skip one.
func TestExamplesCUDAShortNamesExist(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, v := range exampleVariants(t) {
		names[v.Name] = true
	}
	for list, ns := range map[string][]string{"examplesCUDAShort": examplesCUDAShort, "examplesEmulatedShort": examplesEmulatedShort, "examplesLong": examplesLong} {
		for _, n := range ns {
			if !names[n] {
				t.Errorf("%s names %s, which no example has", list, n)
			}
		}
	}
}
