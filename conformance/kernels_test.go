package conformance

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/reference"
	"github.com/attnc/attnc/targets/cpu"
)

// needTools skips locally, and fails in CI, when the LLVM tools are missing.
func needTools(t *testing.T) {
	t.Helper()
	needtool.Check(t, cpurt.Tools())
}

// spec parses a one-variant spec.
func spec(t *testing.T, src string) *ir.Variant {
	t.Helper()
	vs, err := frontend.Parse("matrix.attn", []byte(src))
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return vs[0]
}

// matrixSpecs covers page sizes 1, 2, 4, 8, 16, 32, 64, 128, 256; GQA group
// sizes 1, 2, 4, 8; head dims 64, 128, 256 and (192, 128); f32, f16, bf16;
// HND and NHD; masks causal, none, window (smaller than a page), expr with
// fully masked rows; sinks tokens; softcap and alibi scores.
var matrixSpecs = []string{
	`variant ps1_mha { heads qo = 4, kv = 4
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 1, layout = HND)
	  mask causal }`,
	`variant ps16_gqa4 { heads qo = 8, kv = 2
	  head_dim 128
	  dtype f16
	  cache paged(page_size = 16, layout = NHD)
	  mask causal }`,
	`variant ps256_gqa8 { heads qo = 8, kv = 1
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 256, layout = HND)
	  mask causal }`,
	`variant ps8_window { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8, layout = NHD)
	  mask window(left = 3) }`,
	`variant ps16_d256 { heads qo = 2, kv = 1
	  head_dim 256
	  dtype bf16
	  cache paged(page_size = 16)
	  mask causal
	  score softcap(score, 5.0) }`,
	`variant ps32_d192 { heads qo = 4, kv = 4
	  head_dim qk = 192, v = 128
	  dtype f16
	  cache paged(page_size = 32, layout = NHD)
	  mask causal }`,
	`variant ps2_none { heads qo = 4, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 2)
	  mask none }`,
	`variant ps64_alibi { heads qo = 6, kv = 6
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 64)
	  mask expr(kv_pos <= q_pos && q_pos / 32 == kv_pos / 32)
	  score score - alibi_slope(head) * (q_pos - kv_pos) }`,
	`variant ps4_masked_rows { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 4, layout = HND)
	  mask expr(q_pos >= 40 && kv_pos <= q_pos) }`,
	`variant ps4_window_sinks { heads qo = 4, kv = 2
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 4, layout = NHD)
	  mask window(left = 5)
	  sinks tokens(2) }`,
	`variant ps32_block_table_sinks { heads qo = 8, kv = 2
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 32, layout = NHD, table = block_table)
	  mask window(left = 40)
	  sinks tokens(4) }`,
	`variant ps2_block_table_f32 { heads qo = 4, kv = 4
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 2, table = block_table)
	  mask causal
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant ps16_learned_sinks { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  mask window(left = 30)
	  sinks learned }`,
	`variant ps4_tree { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 4, layout = NHD)
	  mask tree }`,
	`variant ps8_custom_window_sinks { heads qo = 4, kv = 4
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8, table = block_table)
	  mask custom, window(left = 20)
	  sinks tokens(3) }`,
	`variant ps16_rope_f32 { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 16)
	  rope inline(theta = 10000) }`,
	`variant ps8_eagle_like { heads qo = 8, kv = 2
	  head_dim 128
	  dtype f16
	  cache paged(page_size = 8)
	  mask tree
	  rope inline(theta = 500000, style = llama3, factor = 8, low_freq = 1, high_freq = 4, original_max = 8192) }`,
	`variant ps32_yarn { heads qo = 2, kv = 2
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 32, layout = NHD)
	  rope inline(theta = 10000, style = yarn, factor = 4, original_max = 4096) }`,
	`variant ps16_rope_neox_partial { heads qo = 4, kv = 2
	  head_dim 80
	  dtype f16
	  cache paged(page_size = 16, layout = NHD)
	  rope inline(theta = 10000, rotary_dim = 20) }`,
	`variant ps4_rope_interleaved { heads qo = 2, kv = 1
	  head_dim qk = 72, v = 40
	  dtype f32
	  cache paged(page_size = 4)
	  mask tree
	  rope inline(theta = 10000, pairs = interleaved, rotary_dim = 64, style = llama3, factor = 8, low_freq = 1, high_freq = 4, original_max = 64) }`,
	`variant ps16_gptoss_like { heads qo = 8, kv = 1
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 16)
	  mask window(size = 50)
	  sinks learned
	  rope inline(theta = 150000, style = yarn, factor = 32, original_max = 4096, beta_fast = 32, beta_slow = 1, truncate = false) }`,
	// RoPE from runtime arguments: cos/sin tables (GQA, interleaved and
	// partial rotary_dim, a tree whose keys rotate at their queries'
	// table rows, a window, prefill_ragged) and style factors (with
	// attn_factor, partial and interleaved), f16, bf16 and f32.
	`variant ps16_rope_table_f16 { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  rope inline(table) }`,
	`variant ps4_rope_table_tree_interleaved { heads qo = 4, kv = 4
	  head_dim 96
	  dtype bf16
	  cache paged(page_size = 4, table = block_table)
	  mask tree
	  rope inline(table, rotary_dim = 32, pairs = interleaved) }`,
	`variant ps8_rope_table_window_f32 { heads qo = 6, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8, layout = NHD)
	  mask window(left = 20)
	  rope inline(table, rotary_dim = 16)
	  kernels prefill, decode, merge_state, prefill_ragged }`,
	`variant ps16_rope_factors_bf16 { heads qo = 8, kv = 2
	  head_dim 96
	  dtype bf16
	  cache paged(page_size = 16)
	  mask causal
	  rope inline(style = factors, theta = 10000, attn_factor = 1.1902380714238083)
	  kernels prefill, decode, merge_state, prefill_ragged }`,
	`variant ps32_rope_factors_f32_partial { heads qo = 4, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 32, layout = NHD, table = block_table)
	  rope inline(style = factors, theta = 500000, rotary_dim = 48, pairs = interleaved) }`,
	`variant ps8_rope_factors_f16_tree { heads qo = 8, kv = 4
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 8)
	  mask tree
	  rope inline(style = factors, attn_factor = 0.8) }`,
	`variant ps16_lse2_learned_sinks { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 16, table = block_table)
	  mask window(size = 40)
	  sinks learned
	  lse base = 2 }`,
	`variant ps8_lse2_f16 { heads qo = 4, kv = 4
	  head_dim 128
	  dtype f16
	  cache paged(page_size = 8, layout = NHD)
	  lse base = 2 }`,
	`variant ps16_mla { mla(heads = 16, kv_lora_rank = 64, rope_dim = 32)
	  dtype f16
	  cache paged(page_size = 16)
	  mask causal
	  scale 0.1 }`,
	`variant ps64_mla_f32 { mla(heads = 8, kv_lora_rank = 128, rope_dim = 64)
	  dtype f32
	  cache paged(page_size = 64, table = block_table)
	  scale 0.07 }`,
	`variant ps16_gqa24_head_tiles { heads qo = 48, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  mask window(left = 50)
	  sinks learned }`,
	// Integer / and % by zero and MIN / -1 at run time (DESIGN §3: by zero
	// gives 0, never a trap), in the mask and in the score.
	`variant ps4_div_by_zero { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 4)
	  mask expr(kv_pos <= q_pos && (q_pos % (kv_pos - 3) != 1 || kv_pos / (q_pos - kv_pos) == 0))
	  score score + 0.01 * ((q_pos - 2147483647 - 1) / (kv_pos - kv_pos - 1) % (kv_pos - 7)) }`,
	// A mask that wraps i32 from kv_pos 31 on: classify-tiles must not take
	// its interval bounds for the kernel's values.
	`variant ps4_wrapping_mask { heads qo = 2, kv = 1
	  head_dim 16
	  dtype f32
	  cache paged(page_size = 4)
	  mask expr(kv_pos + 2147483617 >= 0 && kv_pos <= q_pos) }`,
	`variant ps128_gqa4 { heads qo = 16, kv = 4
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 128, layout = NHD)
	  mask causal
	  scale 0.2 }`,
	// Quantized caches (issue 9): both fp8 formats and int8, both scale
	// kinds, every (q dtype, kv dtype) pair, page sizes 1 to 256, GQA, a
	// window with sinks, learned sinks, a tree, RoPE (K dequantized, then
	// rotated), MLA over an fp8 latent cache, and the page kernels (append
	// quantizes, copy_page moves codes).
	`variant ps16_e4m3_gqa4 { heads qo = 8, kv = 2
	  head_dim 128
	  dtype f16
	  cache paged(page_size = 16, layout = NHD, kv_dtype = e4m3)
	  mask causal
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant ps4_e5m2_window_sinks { heads qo = 4, kv = 2
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 4, table = block_table, kv_dtype = e5m2, kv_scale = per_head)
	  mask window(left = 5)
	  sinks tokens(2)
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant ps32_i8_rope { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 32, kv_dtype = i8, kv_scale = per_head)
	  rope inline(theta = 10000) }`,
	`variant ps1_i8_f16_none { heads qo = 4, kv = 4
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 1, layout = NHD, kv_dtype = i8)
	  mask none
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant ps8_e4m3_f32_learned { heads qo = 8, kv = 4
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8, kv_dtype = e4m3, kv_scale = per_head)
	  mask window(size = 40)
	  sinks learned
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant ps64_e5m2_f16_tree_rope { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 64, layout = NHD, kv_dtype = e5m2)
	  mask tree
	  rope inline(theta = 500000, style = llama3, factor = 8, low_freq = 1, high_freq = 4, original_max = 8192) }`,
	`variant ps256_i8_bf16_gqa8 { heads qo = 8, kv = 1
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 256, kv_dtype = i8, kv_scale = per_head) }`,
	`variant ps128_e5m2_f32_none { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 128, kv_dtype = e5m2, kv_scale = per_head)
	  mask none
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant ps16_mla_e4m3 { mla(heads = 16, kv_lora_rank = 64, rope_dim = 32)
	  dtype bf16
	  cache paged(page_size = 16, kv_dtype = e4m3)
	  mask causal
	  scale 0.1 }`,
	`variant ps2_mla_e5m2_f16 { mla(heads = 8, kv_lora_rank = 128, rope_dim = 64)
	  dtype f16
	  cache paged(page_size = 2, table = block_table, kv_dtype = e5m2, kv_scale = per_tensor)
	  scale 0.07 }`,
	// MLA decode items of 64 heads (the CPU's MLADecodeHeads): Q·Kᵀ and
	// P·V of 64 rows as prefill's micro-kernels, on bf16 pairs at
	// x86-64-v4-bf16 and on the tiles at x86-64-amx; deepseek_v3_mla
	// (TestExamples) and lim_mla (TestLargestShapes) at 512-wide latents.
	`variant ps32_mla64_bf16 { mla(heads = 64, kv_lora_rank = 64, rope_dim = 32)
	  dtype bf16
	  cache paged(page_size = 32)
	  mask causal
	  scale 0.1 }`,
}

// maxErr records the largest errors per dtype for the closing report: o
// (relative for f32, in ulps for f16/bf16), lse (relative) and the error
// beyond the output's rounding in units of 2^-24 mag (Result.MagErr).
var maxErr = struct {
	sync.Mutex
	o, lse, mag map[string]float64
	cases       int
}{o: map[string]float64{}, lse: map[string]float64{}, mag: map[string]float64{}}

// dtypeKey names a variant's storage for the error records: "f16", or
// "f16/e4m3" for f16 queries over an 8-bit cache.
func dtypeKey(v *ir.Variant) string {
	if v.Quantized() {
		return v.DType.String() + "/" + v.KVDType.String()
	}
	return v.DType.String()
}

// record adds r to maxErr under key.
func record(key string, r Result) {
	maxErr.Lock()
	defer maxErr.Unlock()
	maxErr.o[key] = math.Max(maxErr.o[key], r.MaxErr)
	maxErr.lse[key] = math.Max(maxErr.lse[key], r.LSEErr)
	maxErr.mag[key] = math.Max(maxErr.mag[key], r.MagErr)
	maxErr.cases++
}

func TestKernelMatrix(t *testing.T) {
	t.Parallel()
	needTools(t)
	if *matrixDTypes != "" {
		// A dtype no variant has (a typo) would run nothing and pass.
		for _, d := range strings.Split(*matrixDTypes, ",") {
			if !slices.ContainsFunc(matrixSpecs, func(src string) bool { return spec(t, src).DType.String() == d }) {
				t.Fatalf("-matrix.dtypes %s: no matrix variant has query dtype %q", *matrixDTypes, d)
			}
		}
	}
	for i, src := range matrixSpecs {
		v := spec(t, src)
		// The default run takes every matrixStride-th variant but
		// matrixLong, and levelShort and matrixAlways; -levels.all
		// (CI's long pass) every variant.
		if !*levelsAll && !slices.Contains(levelShort, v.Name) && !slices.Contains(matrixAlways, v.Name) &&
			(i%matrixStride != 0 || slices.Contains(matrixLong, v.Name)) {
			continue
		}
		if *matrixDTypes != "" && !slices.Contains(strings.Split(*matrixDTypes, ","), v.DType.String()) {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			// Every level's clone only where the lower levels run below.
			atLevels := *levelsAll || slices.Contains(levelShort, v.Name)
			build := buildHostLevel
			if atLevels {
				build = Build
			}
			s, err := build(v, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Lib.Close()
			for _, r := range s.RunAll([]int{1, 3}, 7) {
				if !r.Pass {
					t.Errorf("%s", r)
				}
				record(dtypeKey(v), r)
			}
			// The lower levels of the same library, forced with
			// $ATTNC_CPU_LEVEL: prefill and decode at 3 threads.
			for _, level := range clonedBelow(t, s) {
				if !atLevels {
					break
				}
				ls, err := s.AtLevel(level)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range ls.RunAttentionAll(3, 7) {
					if !r.Pass {
						t.Errorf("level %s: %s", level, r)
					}
					record(v.DType.String(), r)
				}
				ls.Lib.Close()
			}
			for _, level := range higherLevels(t, s) {
				if hasClone(s.Final, level) {
					t.Logf("level %s not run: this CPU lacks it", level)
				} else {
					t.Logf("level %s not run: no kernel of %s is cloned at it", level, v.Name)
				}
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("%d kernel runs; max errors: o %v (f16/bf16 in ulps), lse %v, beyond rounding in 2^-24 mag %v", maxErr.cases, maxErr.o, maxErr.lse, maxErr.mag)
	})
}

var levelsAll = flag.Bool("levels.all", false, "run every matrix variant at every lower CPU level too, not only levelShort")

// matrixDTypes restricts TestKernelMatrix to the variants of some query
// dtypes (scripts/amx-check.sh runs the bf16 ones at every level on a CPU
// with AMX, where only bf16 kernels have an x86-64-amx clone).
var matrixDTypes = flag.String("matrix.dtypes", "", "run only the matrix variants of these query dtypes (comma-separated: f32,f16,bf16); empty: every dtype")

// buildHostLevel builds v for this machine's CPU like Build, with the
// clone of the CPU level this machine runs only (cpu.LevelTable of
// hostLevel): the tests that do not exercise the levels save two clones'
// compile time; TestKernelMatrix builds every level and runs them.
func buildHostLevel(v *ir.Variant, dir string) (*Suite, error) {
	table, err := hostLevelTable()
	if err != nil {
		return nil, err
	}
	return BuildWith(v, dir, Options{Passes: table})
}

// bf16Levels is a small bf16 variant whose library has every CPU level
// there is (x86-64-v4-bf16 and x86-64-amx included). hostLevelTable,
// TestBF16DenormalOperands and TestAMXPrefillEmulated all build it with
// every level: the same IR, so the package's object cache (TestMain)
// runs opt and llc on it once for the three, not three times.
const bf16Levels = `variant bf16_levels { heads qo = 4, kv = 2
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 16)
	  mask causal }`

// hostLevelTable is the CPU pass table that clones the level this
// machine's entries run (CPUID, or $ATTNC_CPU_LEVEL), read once from a
// small library built with every level: bf16Levels, whose library has
// every level there is.
var hostLevelTable = sync.OnceValues(func() ([]passes.Pass, error) {
	vs, err := frontend.Parse("level.attn", []byte(bf16Levels))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "attnc-level-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s, err := Build(vs[0], dir)
	if err != nil {
		return nil, fmt.Errorf("finding this machine's CPU level: %w", err)
	}
	defer s.Lib.Close()
	// --cpu-levels host decides in Go what the library decided: they
	// must agree where $ATTNC_CPU_LEVEL does not force the library.
	if os.Getenv(cpu.LevelEnv) == "" {
		host, err := cpu.Target{}.CheckLevels("", []string{cpu.HostLevel})
		if err != nil {
			return nil, err
		}
		if len(host) != 1 || host[0] != s.Level {
			return nil, fmt.Errorf("--cpu-levels host resolves to %v on this machine, but a library of every level runs %s", host, s.Level)
		}
	}
	return cpu.LevelTable(s.Level)
})

// TestHostLevelBuild: a library built with buildHostLevel runs the level
// this machine picks and matches the reference there; forced to a lower
// level (the clone it lacks) every entry returns CPU_LEVEL at once and
// <prefix>_cpu_level() NULL. By default for f16 (TestKernelMatrix's
// levelShort ps16_gqa4) and bf16 (bf16Levels, hostLevelTable's variant),
// whose libraries of every level those build too: the package's object
// cache (TestMain) compiles them once. With -levels.all (CI's long pass)
// also for ps256_gqa8, bf16 over pages of 256.
func TestHostLevelBuild(t *testing.T) {
	t.Parallel()
	needTools(t)
	names := []string{"ps16_gqa4"}
	if *levelsAll {
		names = append(names, "ps256_gqa8")
	}
	for _, name := range names {
		i := slices.IndexFunc(matrixSpecs, func(src string) bool { return spec(t, src).Name == name })
		if i < 0 {
			t.Fatalf("%s is not a variant of matrixSpecs", name)
		}
		if name == "ps16_gqa4" && !slices.Contains(levelShort, name) {
			t.Fatalf("%s is not a levelShort variant", name)
		}
		v := spec(t, matrixSpecs[i])
		t.Run(v.DType.String()+"_"+v.Name, func(t *testing.T) { testHostLevelBuild(t, v) })
	}
	v := spec(t, bf16Levels)
	t.Run(v.DType.String()+"_"+v.Name, func(t *testing.T) { testHostLevelBuild(t, v) })
}

// testHostLevelBuild is TestHostLevelBuild for one variant (bf16 prefill
// has the x86-64-v4-bf16 level where the CPU has AVX512-BF16; f16 does
// not).
func testHostLevelBuild(t *testing.T, v *ir.Variant) {
	s, err := buildHostLevel(v, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Lib.Close()
	full, err := Build(v, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer full.Lib.Close()
	if s.Level != full.Level {
		t.Fatalf("the host-level library runs %q, a library of every level %q", s.Level, full.Level)
	}
	for _, r := range s.RunAttentionAll(2, 7) {
		if !r.Pass {
			t.Errorf("%s", r)
		}
	}
	lower := lowerLevels(t, s)
	if len(lower) == 0 {
		t.Skipf("this machine runs the baseline level %s: no lower level to refuse", s.Level)
	}
	checkRefused(t, s, lower[0])
}

// checkRefused loads a copy of s's library with $ATTNC_CPU_LEVEL=level, a
// level it has no clone for: <prefix>_cpu_level() must say NULL and every
// entry return CPU_LEVEL at once (all-zero arguments: it returns before
// reading any).
func checkRefused(t *testing.T, s *Suite, level string) {
	t.Helper()
	data, err := os.ReadFile(s.so)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "refused.so")
	if err := os.WriteFile(cp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	lib, got, err := openLevel(cp, s.rt, level, true)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	if !refused(got) {
		t.Errorf("at %s the library reports level %q, want none (NULL)", level, got)
	}
	for role, e := range s.Entries {
		args := make([]int64, len(e.Params))
		if got, err := lib.Call(e.Symbol, args...); err != nil || got != ir.StatusCPULevel {
			t.Errorf("%s at %s: status %d (%v), want CPU_LEVEL %d", role, level, got, err, ir.StatusCPULevel)
		}
	}
}

// levelShort are the variants of matrixSpecs whose library TestKernelMatrix
// also runs at the lower CPU levels (with -levels.all, CI's long pass,
// every variant): f16, GQA 4, pages of 16, NHD. bf16 at the lower levels
// runs by default in bf16Levels' library (TestCPULevelsBuild at x86-64
// and x86-64-v4, TestBF16DenormalOperands at every level this CPU has);
// ps256_gqa8 (bf16, GQA 8, pages of 256, HND) was here until the default
// go test ./... had to fit in ten minutes, and runs at this machine's
// level by default (matrixAlways). f32 (ps8_window, a window mask over
// pages of 8), MLA and RoPE at the lower levels (ps16_mla, ps8_eagle_like)
// run in the long pass; at this machine's level they run by default
// (ps2_block_table_f32 and the other f32 variants, ps2_mla_e5m2_f16,
// ps8_eagle_like and the other RoPE variants; windows in
// ps32_block_table_sinks and ps16_gptoss_like).
var levelShort = []string{"ps16_gqa4"}

// matrixStride: the default run of TestKernelMatrix takes the variants of
// matrixSpecs at a multiple of it (0, 16, 32: ps1_mha, ps8_eagle_like,
// ps4_div_by_zero; each is an opt and llc compile of its own, most of the
// test's cost), with levelShort and matrixAlways; -levels.all (CI's long
// pass) takes every variant. It was 4, then 8, until the default go test
// ./... had to fit in ten minutes: of the variants at 4, 12, 20, ... the
// default run keeps MLA (ps2_mla_e5m2_f16) and a window with learned sinks
// (ps16_gptoss_like) in matrixAlways; head dim 256 (ps16_d256;
// gemma2_local in TestExamples), lse in base 2 (ps8_lse2_f16;
// TestPeerLSEBase2FlashInfer) and an e5m2 cache under a window with sinks
// (ps4_e5m2_window_sinks) run in the long pass; of those at 8, 24, 40,
// ps16_rope_factors_bf16 is in matrixAlways, fully masked rows
// (ps4_masked_rows; TestFullyMaskedRow, f16) and an e5m2 cache under a
// tree with llama3 RoPE over pages of 64 (ps64_e5m2_f16_tree_rope; e5m2
// in ps2_mla_e5m2_f16, the tree and llama3 RoPE in ps8_eagle_like) run in
// the long pass.
const matrixStride = 16

// matrixAlways are the variants of matrixSpecs that the default run of
// TestKernelMatrix takes whatever their place: RoPE from runtime
// arguments, one table and one factors variant (the others run when their
// place comes, and with -levels.all), the i8 cache (f16, pages of one
// token, no mask) and a block table (bf16, a window with sink tokens,
// NHD), which no variant at a multiple of matrixStride has, MLA (f16
// queries over an e5m2 cache, a block table, pages of 2) and a window with
// learned sinks (bf16, gpt-oss's shape), and pages of 256 (bf16, GQA 8,
// HND; larger than a KV tile, which ps128_gqa4 and the 8-bit variants
// over pages of 128 and 256 have too in the long pass).
var matrixAlways = []string{"ps4_rope_table_tree_interleaved", "ps16_rope_factors_bf16", "ps1_i8_f16_none", "ps32_block_table_sinks",
	"ps2_mla_e5m2_f16", "ps16_gptoss_like", "ps256_gqa8"}

// matrixLong are the variants of matrixSpecs at a multiple of
// matrixStride that TestKernelMatrix leaves to -levels.all (CI's long
// pass): what they check, the default run checks in other variants. None
// since matrixStride is 8 or more (ps16_learned_sinks, at 12, was one: a window
// with learned sinks in ps16_gptoss_like (bf16), f16 GQA 4 over pages of
// 16 in ps16_gqa4).
var matrixLong = []string{}

// TestMatrixListsNameVariants: every name of levelShort, matrixAlways and
// matrixLong is a variant of matrixSpecs (matrixLong's at a multiple of
// matrixStride, which the default run would take otherwise), and TestAArch64Matrix's
// aarch64Short too, so that no list silently names nothing.
func TestMatrixListsNameVariants(t *testing.T) {
	t.Parallel()
	at := map[string]int{}
	for i, src := range matrixSpecs {
		at[spec(t, src).Name] = i
	}
	for list, ns := range map[string][]string{"levelShort": levelShort, "matrixAlways": matrixAlways, "matrixLong": matrixLong, "aarch64Short": aarch64Short} {
		for _, n := range ns {
			i, ok := at[n]
			if !ok {
				t.Errorf("%s names %s, which matrixSpecs does not have", list, n)
			} else if list == "matrixLong" && i%matrixStride != 0 {
				t.Errorf("matrixLong names %s, at place %d, which the default run leaves out anyway", n, i)
			}
		}
	}
}

// lowerLevels are the CPU levels of s's triple below the one its entries
// chose: the best this CPU runs, unless $ATTNC_CPU_LEVEL forced one.
func lowerLevels(t *testing.T, s *Suite) []string {
	t.Helper()
	names, err := s.Levels()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(names, s.Level)
	if i < 0 {
		t.Fatalf("the library runs CPU level %q, not one of %v", s.Level, names)
	}
	return names[:i]
}

// clonedBelow are lowerLevels at which a kernel of s is cloned: forcing
// another (x86-64-v4-bf16 for a library whose kernels have no clone there)
// runs the best level below it, which the list holds already.
func clonedBelow(t *testing.T, s *Suite) []string {
	t.Helper()
	var out []string
	for _, level := range lowerLevels(t, s) {
		if hasClone(s.Final, level) {
			out = append(out, level)
		}
	}
	return out
}

// higherLevels are the CPU levels of s's triple above the one its entries
// chose: levels this CPU lacks, or that no kernel of s is cloned at.
func higherLevels(t *testing.T, s *Suite) []string {
	t.Helper()
	names, err := s.Levels()
	if err != nil {
		t.Fatal(err)
	}
	return names[slices.Index(names, s.Level)+1:]
}

// hasClone reports whether a kernel of m is a clone at CPU level level
// (x86-64-v4-bf16 clones only the kernels whose Q·Kᵀ reads exact bf16
// operands).
func hasClone(m *ir.Module, level string) bool {
	for _, k := range m.Kernels {
		if k.Level == level {
			return true
		}
	}
	return false
}

// TestMergeHalvesEqualsWhole splits every sequence's cache into two halves,
// runs the prefill entry on each half and merges the results with the
// merge_state entry: the merge must equal one prefill over the whole cache.
func TestMergeHalvesEqualsWhole(t *testing.T) {
	t.Parallel()
	needTools(t)
	v := spec(t, `variant halves { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8)
	  mask none }`)
	s, err := buildHostLevel(v, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Lib.Close()
	rng := rand.New(rand.NewSource(3))
	whole := reference.NewCase(v, rng, reference.CaseSpec{Name: "whole", QLens: []int{3, 5}, KVLens: []int{40, 29}})
	// Halves at page boundaries: the first 3 pages, then the rest.
	half := func(first bool) *reference.Case {
		c := *whole
		c.Pages = make([][]int, c.Batch)
		c.KVLens = make([]int, c.Batch)
		for b := range c.Batch {
			n := 3 * v.PageSize
			if first {
				c.Pages[b], c.KVLens[b] = whole.Pages[b][:3], n
			} else {
				c.Pages[b], c.KVLens[b] = whole.Pages[b][3:], whole.KVLens[b]-n
			}
		}
		return &c
	}
	run := func(c *reference.Case) ([]float32, []float32) {
		cb := s.buffers(c)
		defer cb.free()
		if st, err := s.run(ir.RolePrefill, cb); err != nil || st != 0 {
			t.Fatalf("prefill: status %d, %v", st, err)
		}
		return append([]float32(nil), s.dec(cb.o)...), append([]float32(nil), cb.lse.F32()...)
	}
	oW, lW := run(whole)
	oA, lA := run(half(true))
	oB, lB := run(half(false))
	cb := s.mergeArgs(oA, lA, oB, lB, whole.TotalQ())
	defer cb.free()
	bv, bs := cb.byName["v"], cb.byName["s"]
	if st, err := s.run(ir.RoleMergeState, cb); err != nil || st != 0 {
		t.Fatalf("merge_state: status %d, %v", st, err)
	}
	want := func(xs []float32) []float64 {
		o := make([]float64, len(xs))
		for i, x := range xs {
			o[i] = float64(x)
		}
		return o
	}
	if e, i, ok := reference.Compare(s.dec(bv), want(oW), 1e-5); !ok {
		t.Errorf("merged o differs from whole at %d: err %g", i, e)
	}
	if e, i, ok := reference.Compare(bs.F32(), want(lW), 1e-5); !ok {
		t.Errorf("merged lse differs from whole at %d: err %g", i, e)
	}
}

// TestFullyMaskedRow checks o = 0 exactly and lse = -inf for rows that see
// nothing, with NaN everywhere a kernel must not read.
func TestFullyMaskedRow(t *testing.T) {
	t.Parallel()
	needTools(t)
	v := spec(t, `variant hidden { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  mask expr(q_pos >= 20 && kv_pos <= q_pos) }`)
	s, err := buildHostLevel(v, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Lib.Close()
	c := reference.NewCase(v, rand.New(rand.NewSource(1)), reference.CaseSpec{QLens: []int{30}, KVLens: []int{30}, NaNFill: true, ExtraPages: 2})
	cb := s.buffers(c)
	defer cb.free()
	if st, err := s.run(ir.RolePrefill, cb); err != nil || st != 0 {
		t.Fatalf("status %d, %v", st, err)
	}
	o, lse := s.dec(cb.o), cb.lse.F32()
	for i := 0; i < 20*v.QOHeads; i++ {
		if !math.IsInf(float64(lse[i]), -1) {
			t.Fatalf("lse[%d] = %v, want -inf", i, lse[i])
		}
		for d := 0; d < v.HeadDimV; d++ {
			if x := o[i*v.HeadDimV+d]; x != 0 {
				t.Fatalf("o[%d][%d] = %v, want 0", i, d, x)
			}
		}
	}
	for i := 20 * v.QOHeads; i < len(lse); i++ {
		if math.IsInf(float64(lse[i]), 0) || math.IsNaN(float64(lse[i])) {
			t.Fatalf("visible row %d has lse %v", i, lse[i])
		}
	}
}

// TestNullLSE checks that lse may be NULL.
func TestNullLSE(t *testing.T) {
	t.Parallel()
	needTools(t)
	v := spec(t, `variant nolse { heads qo = 2, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 4) }`)
	s, err := buildHostLevel(v, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Lib.Close()
	for _, q := range [][]int{{1, 1}, {3, 2}} {
		c := reference.NewCase(v, rand.New(rand.NewSource(1)), reference.CaseSpec{QLens: q, KVLens: []int{9, 5}})
		want, _ := reference.Attention(v, c)
		cb := s.buffers(c)
		cb.vals["lse"] = 0
		if st, err := s.run(ir.RolePrefill, cb); err != nil || st != 0 {
			t.Fatalf("status %d, %v", st, err)
		}
		if e, i, ok := reference.Compare(s.dec(cb.o), want, 1e-5); !ok {
			t.Errorf("q lens %v: o[%d] err %g", q, i, e)
		}
		cb.free()
	}
}

// TestDefaultListsNameVariants: every name of the other default-run lists
// (nanShort, nanCUDAShort, nanAArch64Short, nomemShort,
// aarch64RaggedShort, the qkv_append and param lists) is a variant of the
// specs or the list it picks from, so that no list silently names nothing.
func TestDefaultListsNameVariants(t *testing.T) {
	t.Parallel()
	names := func(specs []string) []string {
		var out []string
		for _, src := range specs {
			out = append(out, spec(t, src).Name)
		}
		return out
	}
	nan, nomem, matrix := names(nanSpecs), names(nomemSpecs), names(matrixSpecs)
	for _, c := range []struct {
		list   string
		ns, of []string
	}{{"nanShort", nanShort, nan}, {"nanCUDAShort", nanCUDAShort, nan}, {"nanAArch64Short", nanAArch64Short, nan}, {"nanAArch64All", nanAArch64All, nan}, {"nomemShort", nomemShort, nomem},
		{"aarch64RaggedShort", aarch64RaggedShort, matrix}, {"qkvAppendShort", qkvAppendShort, names(qkvAppendSpecs)},
		{"qkvAppendEmulatedShort", qkvAppendEmulatedShort, qkvAppendShort}, {"qkvAppendOtherGPUs", qkvAppendOtherGPUs, qkvAppendShort},
		{"qkvAppendOtherGPUsShort", qkvAppendOtherGPUsShort, qkvAppendOtherGPUs}, {"paramEmulated", paramEmulated, names(paramSpecs)}} {
		for _, n := range c.ns {
			if !slices.Contains(c.of, n) {
				t.Errorf("%s names %s, which its specs do not have", c.list, n)
			}
		}
	} // peerCUDAShort names variants written in the peer tests' sources.
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	for _, n := range peerCUDAShort {
		if !bytes.Contains(src, []byte("variant "+n+" {")) {
			t.Errorf("peerCUDAShort names %s, which no test's spec has", n)
		}
	}
}
