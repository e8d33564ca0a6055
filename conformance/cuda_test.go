package conformance

import (
	"flag"
	"slices"
	"testing"

	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/targets"
)

// needEmu skips locally, and fails in CI, without g++ for the emulator.
func needEmu(t *testing.T) {
	t.Helper()
	_, err := cuda.GXX()
	needtool.Check(t, err)
}

// cudaMatrix is the emulated CUDA conformance matrix: the tensor-core path
// (f16 / bf16 with <= 16 rows per block) and the SIMT path (f32, and wide
// GQA groups), every layout, page sizes 1 to 256, all mask kinds.
var cudaMatrix = []string{
	`variant cu_ps1_f32 { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 1, layout = HND)
	  mask causal }`,
	`variant cu_ps16_f16 { heads qo = 8, kv = 2
	  head_dim 128
	  dtype f16
	  cache paged(page_size = 16, layout = NHD)
	  mask causal }`,
	`variant cu_ps256_bf16 { heads qo = 8, kv = 1
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 256)
	  mask window(left = 20)
	  sinks tokens(2) }`,
	`variant cu_ps4_masked { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 4)
	  mask expr(q_pos >= 40 && kv_pos <= q_pos)
	  score softcap(score, 5.0) }`,
	`variant cu_ps8_none_d192 { heads qo = 2, kv = 2
	  head_dim qk = 192, v = 128
	  dtype bf16
	  cache paged(page_size = 8, layout = NHD)
	  mask none
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant cu_ps32_alibi { heads qo = 6, kv = 6
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 32)
	  mask expr(kv_pos <= q_pos && q_pos / 32 == kv_pos / 32)
	  score score - alibi_slope(head) * (q_pos - kv_pos) }`,
	`variant cu_block_table { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 4, layout = NHD, table = block_table)
	  mask window(left = 9)
	  sinks tokens(3) }`,
	`variant cu_block_table_f32 { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8, table = block_table)
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant cu_learned_sinks { heads qo = 4, kv = 1
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 8)
	  mask expr(kv_pos <= q_pos && q_pos >= 20)
	  sinks learned }`,
	`variant cu_learned_sinks_f32 { heads qo = 2, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 16)
	  sinks learned }`,
	`variant cu_tree { heads qo = 8, kv = 2
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 16)
	  mask tree, window(left = 50) }`,
	`variant cu_custom_f32 { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 4, layout = NHD)
	  mask custom
	  sinks learned }`,
	`variant cu_rope_llama3_tree { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  mask tree
	  rope inline(theta = 500000, style = llama3, factor = 8, low_freq = 1, high_freq = 4, original_max = 8192) }`,
	`variant cu_rope_f32 { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 4, layout = NHD)
	  rope inline(theta = 10000, style = yarn, factor = 4, original_max = 2048, mscale = 1, mscale_all_dim = 0.5) }`,
	`variant cu_rope_interleaved_partial { heads qo = 4, kv = 2
	  head_dim qk = 72, v = 64
	  dtype bf16
	  cache paged(page_size = 8)
	  mask tree
	  rope inline(theta = 10000, pairs = interleaved, rotary_dim = 40) }`,
	`variant cu_gptoss_like { heads qo = 8, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 16, layout = NHD)
	  mask window(size = 50)
	  sinks learned
	  rope inline(theta = 150000, style = yarn, factor = 32, original_max = 4096, truncate = false, mscale = 1, mscale_all_dim = 0) }`,
	`variant cu_rope_table_f16 { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  mask tree
	  rope inline(table, rotary_dim = 48, pairs = interleaved)
	  kernels prefill, decode, merge_state, prefill_ragged }`,
	`variant cu_rope_factors_f32 { heads qo = 4, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8, layout = NHD, table = block_table)
	  rope inline(style = factors, theta = 10000, attn_factor = 1.19) }`,
	`variant cu_lse2_mma { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  mask window(size = 33)
	  sinks learned
	  lse base = 2 }`,
	`variant cu_lse2_f32_none { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 4, table = block_table)
	  mask none
	  lse base = 2 }`,
	`variant cu_gqa24_head_tiles { heads qo = 48, kv = 2
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 32)
	  mask window(left = 70) }`,
	`variant cu_mla_bf16 { mla(heads = 32, kv_lora_rank = 64, rope_dim = 32)
	  dtype bf16
	  cache paged(page_size = 8)
	  mask causal
	  scale 0.1 }`,
	`variant cu_mla_f32 { mla(heads = 4, kv_lora_rank = 32, rope_dim = 16)
	  dtype f32
	  cache paged(page_size = 16)
	  scale 0.15 }`,
	`variant cu_div_by_zero { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 8)
	  mask expr(kv_pos <= q_pos && (q_pos % (kv_pos - 3) != 1 || kv_pos / (q_pos - kv_pos) == 0))
	  score score + 0.01 * ((q_pos - 2147483647 - 1) / (kv_pos - kv_pos - 1) % (kv_pos - 7)) }`,
	`variant cu_wrapping_mask { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8)
	  mask expr(kv_pos + 2147483617 >= 0 && kv_pos <= q_pos) }`,
	`variant cu_gqa32_simt { heads qo = 32, kv = 1
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16) }`,
	// Quantized caches (issue 9): f16/bf16 queries over 8-bit codes on
	// the tensor cores (codes staged as bytes, converted in registers),
	// f32 queries on the SIMT path (codes staged as bytes too), a GQA
	// group of 32 (head tiles), RoPE (K rotated, so its tile is f32), MLA
	// over fp8, both scale kinds, the page kernels; every (q dtype, kv
	// dtype) pair.
	`variant cu_ps16_f16_e4m3 { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16, layout = NHD, kv_dtype = e4m3)
	  mask causal
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant cu_ps4_bf16_e5m2_window_sinks { heads qo = 4, kv = 2
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 4, table = block_table, kv_dtype = e5m2, kv_scale = per_head)
	  mask window(left = 5)
	  sinks tokens(2)
	  kernels prefill, decode, append }`,
	`variant cu_ps32_f32_i8 { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 32, kv_dtype = i8, kv_scale = per_head)
	  mask causal
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant cu_ps8_f16_i8_rope { heads qo = 8, kv = 4
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 8, kv_dtype = i8, kv_scale = per_head)
	  rope inline(theta = 10000) }`,
	`variant cu_ps256_bf16_i8 { heads qo = 8, kv = 1
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 256, kv_dtype = i8) }`,
	`variant cu_gqa32_simt_e5m2 { heads qo = 32, kv = 1
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16, kv_dtype = e5m2) }`,
	`variant cu_ps2_f32_e5m2 { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 2, layout = NHD, kv_dtype = e5m2)
	  mask none }`,
	`variant cu_ps64_f32_e4m3_per_head { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 64, kv_dtype = e4m3, kv_scale = per_head)
	  sinks learned }`,
	`variant cu_ps16_mla_e4m3 { mla(heads = 16, kv_lora_rank = 64, rope_dim = 32)
	  dtype bf16
	  cache paged(page_size = 16, kv_dtype = e4m3)
	  mask causal
	  scale 0.1 }`,
}

var cudaAll = flag.Bool("cuda.all", false, "run every variant of cudaMatrix on the CUDA emulator, not only cudaShort")

// cudaShort are the variants of cudaMatrix that TestCUDAEmulatedMatrix runs
// by default (with -cuda.all, CI's long pass in .ci/run, every variant):
// the SIMT path (f32) and the tensor cores (f16 over an 8-bit cache,
// bf16), page sizes 1 to 256, a window mask, MLA; the other features (f16
// over an f16 cache, RoPE from a table or factors among them) run in the
// long pass (RoPE at append by default in TestEmulatedKernels'
// qkv_append, a tree with llama3 RoPE in TestCUDAEmulatedRagged).
// TestExamples runs every example on the emulator there too.
var cudaShort = []string{"cu_ps1_f32", "cu_ps256_bf16", "cu_ps4_masked", "cu_mla_f32", "cu_ps16_f16_e4m3"}

func TestCUDAEmulatedMatrix(t *testing.T) {
	t.Parallel()
	emulatedMatrix(t, "cuda")
}

// emulatedShort are the variants of cudaMatrix that TestEmulatedMatrices
// runs by default on the other emulated targets (hip): f32 on the SIMT
// path with pages of one token, bf16 on the matrix cores over pages of
// 256 and MLA. What else their 64-lane wavefronts run by default: f16 on
// the matrix cores over an e4m3 cache with append and copy_page
// (TestEmulatedExamples' llama3_8b_fp8), the page kernels, qkv_append and
// prefill_ragged (TestEmulatedKernels), the param variants and the NaN
// matrix. The rest of cudaShort (the window mask, the 8-bit cache) runs
// there with -cuda.all (CI's
// long pass of the emulated targets), every variant of cudaMatrix too.
var emulatedShort = []string{"cu_ps1_f32", "cu_ps256_bf16", "cu_mla_f32"}

// TestEmulatedMatrices runs the emulated GPU matrix (cudaMatrix, cudaShort
// and -cuda.all as for CUDA) on every other registered target whose
// kernels run on this machine on an emulator rather than on the CPU's
// worker threads: a new GPU target gets its matrix by registering.
func TestEmulatedMatrices(t *testing.T) {
	t.Parallel()
	ran := false
	for _, name := range Harnessed() {
		tg, _, err := harnessOf(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, threads := tg.(targets.HostRuntime); threads || name == "cuda" {
			continue // TestKernelMatrix, TestCUDAEmulatedMatrix
		}
		ran = true
		t.Run(name, func(t *testing.T) { emulatedMatrix(t, name) })
	}
	if !ran {
		t.Skip("no other emulated target is registered")
	}
}

// emulatedMatrix runs the matrix of GPU variants on the target's emulator.
func emulatedMatrix(t *testing.T, target string) {
	needEmu(t)
	short := cudaShort
	if target != "cuda" {
		short = emulatedShort
	}
	for _, src := range cudaMatrix {
		v := spec(t, src)
		if !*cudaAll && !slices.Contains(short, v.Name) {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s, err := BuildFor(v, target, t.TempDir(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Lib.Close()
			for _, r := range s.RunAll([]int{1}, 11) {
				if !r.Pass {
					t.Errorf("%s", r)
				}
				record(target+" "+dtypeKey(v), r)
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("%d kernel runs; max errors: o %v (f16/bf16 in ulps), lse %v, beyond rounding in 2^-24 mag %v", maxErr.cases, maxErr.o, maxErr.lse, maxErr.mag)
	})
}

// TestCUDAShortNamesExist: every cudaShort name is a variant of cudaMatrix,
// so the default run does not silently skip a renamed variant.
func TestCUDAShortNamesExist(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, src := range cudaMatrix {
		names[spec(t, src).Name] = true
	}
	for _, n := range cudaShort {
		if !names[n] {
			t.Errorf("cudaShort names %s, which cudaMatrix does not have", n)
		}
	}
	for _, n := range emulatedShort {
		if !slices.Contains(cudaShort, n) {
			t.Errorf("emulatedShort names %s, which cudaShort does not have", n)
		}
	}
}
