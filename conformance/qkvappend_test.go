package conformance

import (
	"slices"
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
	"github.com/attnc/attnc/targets"
)

// qkvAppendSpecs are variants with qkv_append: f32, f16 and bf16; plain,
// e4m3, e5m2 and i8 caches (both scale kinds); GQA and MHA; HND and NHD;
// page sizes 1 to 256; a block table; qk_norm with offset 0 and 1 and
// none; rope at_append of every style (normal, llama3, yarn, factors), from
// a table, both pairs, partial rotary_dim, and none. The f32 variants
// with qk_norm or a table or factors also list prefill and decode for the
// composition test.
var qkvAppendSpecs = []string{
	`variant qa_f32_norm0 { heads qo = 4, kv = 2
	  head_dim 16
	  dtype f32
	  cache paged(page_size = 4)
	  qk_norm rms(eps = 1e-6)
	  rope at_append(theta = 1000000)
	  kernels prefill, decode, qkv_append }`,
	`variant qa_f32_yarn_norm1_nhd { heads qo = 8, kv = 2
	  head_dim 32
	  dtype f32
	  cache paged(page_size = 8, layout = NHD)
	  qk_norm rms(eps = 1e-5, offset = 1)
	  rope at_append(style = yarn, factor = 8, original_max = 2048, pairs = interleaved, rotary_dim = 16)
	  kernels qkv_append, prefill, decode }`,
	`variant qa_f16_llama3_nhd_gqa { heads qo = 8, kv = 2
	  head_dim 32
	  dtype f16
	  cache paged(page_size = 16, layout = NHD)
	  qk_norm rms(offset = 1)
	  rope at_append(style = llama3, theta = 500000, factor = 8, original_max = 8192)
	  kernels qkv_append }`,
	`variant qa_bf16_yarn_partial_ps1 { heads qo = 2, kv = 1
	  head_dim 32
	  dtype bf16
	  cache paged(page_size = 1)
	  rope at_append(style = yarn, factor = 4, original_max = 4096, pairs = interleaved, rotary_dim = 16)
	  kernels qkv_append }`,
	`variant qa_f16_e4m3_perhead { heads qo = 6, kv = 3
	  head_dim 16
	  dtype f16
	  cache paged(page_size = 8, kv_dtype = e4m3, kv_scale = per_head)
	  qk_norm rms(eps = 1e-5)
	  rope at_append(theta = 10000, pairs = interleaved)
	  kernels decode, qkv_append }`,
	`variant qa_f32_i8_bt_ps256 { heads qo = 2, kv = 2
	  head_dim 8
	  dtype f32
	  cache paged(page_size = 256, table = block_table, kv_dtype = i8)
	  qk_norm rms(offset = 1)
	  kernels qkv_append }`,
	`variant qa_bf16_e5m2_plain { heads qo = 4, kv = 1
	  head_dim 16
	  dtype bf16
	  cache paged(page_size = 2, layout = NHD, kv_dtype = e5m2)
	  kernels qkv_append }`,
	`variant qa_f16_partial_half_ps32 { heads qo = 4, kv = 4
	  head_dim 16
	  dtype f16
	  cache paged(page_size = 32)
	  rope at_append(theta = 10000, rotary_dim = 8)
	  kernels qkv_append }`,
	// The angles from a table (rope_cos, rope_sin, rope_positions) or
	// from rope_factors; the first two compose with prefill and decode.
	`variant qa_f32_table_norm { heads qo = 4, kv = 2
	  head_dim 16
	  dtype f32
	  cache paged(page_size = 4)
	  qk_norm rms(eps = 1e-6)
	  rope at_append(table, rotary_dim = 8, pairs = interleaved)
	  kernels prefill, decode, qkv_append }`,
	`variant qa_f32_factors_nhd { heads qo = 8, kv = 2
	  head_dim 32
	  dtype f32
	  cache paged(page_size = 8, layout = NHD)
	  rope at_append(style = factors, theta = 10000, attn_factor = 1.19)
	  kernels qkv_append, prefill, decode }`,
	`variant qa_f16_table_bt_gqa { heads qo = 8, kv = 2
	  head_dim 32
	  dtype f16
	  cache paged(page_size = 16, table = block_table)
	  qk_norm rms(offset = 1)
	  rope at_append(table)
	  kernels qkv_append }`,
	`variant qa_bf16_factors_partial_ps1 { heads qo = 2, kv = 1
	  head_dim 32
	  dtype bf16
	  cache paged(page_size = 1)
	  rope at_append(style = factors, theta = 500000, rotary_dim = 16, pairs = interleaved, attn_factor = 0.8)
	  kernels qkv_append }`,
	`variant qa_f16_e4m3_table_perhead { heads qo = 4, kv = 2
	  head_dim 16
	  dtype f16
	  cache paged(page_size = 8, kv_dtype = e4m3, kv_scale = per_head)
	  qk_norm rms(eps = 1e-5)
	  rope at_append(table, pairs = interleaved)
	  kernels qkv_append }`,
	`variant qa_bf16_i8_factors { heads qo = 4, kv = 1
	  head_dim 16
	  dtype bf16
	  cache paged(page_size = 4, layout = NHD, kv_dtype = i8)
	  qk_norm rms(offset = 1)
	  rope at_append(style = factors, theta = 10000)
	  kernels qkv_append }`,
}

// qkvAppendShort are the variants of qkvAppendSpecs that run under
// qemu-aarch64 and on the CUDA emulator: f32 with qk_norm and yarn over
// NHD (also the composition), f16 llama3 GQA, an e4m3 cache, and the
// angles from a table and from factors (both also composed).
var qkvAppendShort = []string{"qa_f32_yarn_norm1_nhd", "qa_f16_llama3_nhd_gqa", "qa_f16_e4m3_perhead",
	"qa_f32_table_norm", "qa_f32_factors_nhd"}

// qkvAppendEmulatedShort are the variants of qkvAppendShort that the
// default run takes under qemu-aarch64 and on the CUDA emulator (every one
// with -aarch64.all and -cuda.all, CI's long pass of the emulated
// targets): f16 GQA over an e4m3 cache, and the angles from a table
// composed with prefill and decode; qkvAppendEmulatedShort(true) is
// qkvAppendShort.
var qkvAppendEmulatedShort = []string{"qa_f16_e4m3_perhead", "qa_f32_table_norm"}

// qkvAppendEmulated is qkvAppendShort with all, else
// qkvAppendEmulatedShort.
func qkvAppendEmulated(all bool) []string {
	if all {
		return qkvAppendShort
	}
	return qkvAppendEmulatedShort
}

// qkvComposeSpecs are the composition's cases: prefill (several
// sequences, chunks after a cached prefix) and decode.
var qkvComposeSpecs = []struct {
	role ir.Role
	spec reference.CaseSpec
}{
	{ir.RolePrefill, reference.CaseSpec{Name: "prefill", QLens: []int{5, 1, 17}, KVLens: []int{9, 20, 17}, ExtraPages: 2}},
	{ir.RoleDecode, reference.CaseSpec{Name: "decode", QLens: []int{1, 1, 1}, KVLens: []int{1, 33, 70}, ExtraPages: 1}},
}

// runQKVAppendSpecs builds the variants of qkvAppendSpecs (those in only
// when not nil) with build and runs qkv_append's cases at positions near
// 300 and near 2^20 (the angle's precision far from 0), valid and bad
// inputs both required, and, for the variants with prefill and decode,
// the composition with the attention kernels.
func runQKVAppendSpecs(t *testing.T, only []string, build func(v *ir.Variant, dir string) (*Suite, error)) {
	for _, src := range qkvAppendSpecs {
		v := spec(t, src)
		if only != nil && !slices.Contains(only, v.Name) {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s, err := build(v, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			valid, bad := 0, 0
			worst := 0.0
			for i, pos0 := range []int{300, 1 << 20} {
				for _, r := range s.RunQKVAppend(int64(11+i), pos0) {
					if !r.Pass {
						t.Errorf("%s: %s", s.Target, r)
					}
					if strings.Contains(r.Note, "(want 0)") {
						valid++
						worst = max(worst, r.MaxErr)
					} else {
						bad++
					}
				}
			}
			if valid == 0 || bad == 0 {
				t.Errorf("%s: qkv_append ran %d valid and %d bad-input cases: want both", s.Target, valid, bad)
			}
			t.Logf("%s %s: %d valid, %d bad-input cases; max error %.3g (ulps of %s; relative for f32)", s.Target, v.Name, valid, bad, worst, v.DType)
			if !v.HasRole(ir.RolePrefill) || !v.HasRole(ir.RoleDecode) {
				return
			}
			for i, c := range qkvComposeSpecs {
				r := s.RunQKVThenAttention(c.role, c.spec, int64(21+i))
				if !r.Pass {
					t.Errorf("%s: %s", s.Target, r)
				}
				t.Logf("%s: %s", s.Target, r)
			}
		})
	}
}

// TestQKVAppendMatrix runs qkv_append of every variant of qkvAppendSpecs
// on this machine's CPU against the float64 reference, bad inputs
// included, and the composition qkv_append → prefill/decode with rope
// at_append against the reference attention with inline RoPE.
func TestQKVAppendMatrix(t *testing.T) {
	t.Parallel()
	needTools(t)
	runQKVAppendSpecs(t, nil, buildHostLevel)
}

// TestQKVAppendAArch64 runs qkvAppendShort built for aarch64 under qemu
// (qkvAppendEmulatedShort without -aarch64.all).
func TestQKVAppendAArch64(t *testing.T) {
	t.Parallel()
	_, err := cpurt.ToolchainFor(aarch64)
	needtool.Check(t, err)
	runQKVAppendSpecs(t, qkvAppendEmulated(*aarch64All), func(v *ir.Variant, dir string) (*Suite, error) {
		return BuildWith(v, dir, Options{Triple: aarch64})
	})
}

// TestQKVAppendCUDAEmulated runs qkvAppendShort through the CUDA
// launchers on the emulator (the bad scalars; a launcher cannot see a bad
// slot in device memory, its kernel skips it); qkvAppendEmulatedShort
// without -cuda.all.
func TestQKVAppendCUDAEmulated(t *testing.T) {
	t.Parallel()
	needEmu(t)
	runQKVAppendSpecs(t, qkvAppendEmulated(*cudaAll), BuildCUDA)
}

// qkvAppendOtherGPUs are the variants of qkvAppendSpecs that run on the
// other emulated GPU targets (HIP at 64 lanes): the angles from a table
// and from factors, both composed with prefill and decode, and GQA f16
// over an 8-bit cache. The default run takes qkvAppendOtherGPUsShort,
// -cuda.all (CI's long pass of the emulated targets) every one.
var qkvAppendOtherGPUs = []string{"qa_f32_table_norm", "qa_f32_factors_nhd", "qa_f16_e4m3_perhead"}

// qkvAppendOtherGPUsShort: the angles from factors, composed with prefill
// and decode (the CUDA emulator runs the table and the 8-bit cache by
// default).
var qkvAppendOtherGPUsShort = []string{"qa_f32_factors_nhd"}

// TestQKVAppendEmulatedTargets runs qkvAppendOtherGPUs through the
// launchers of every emulated GPU target other than CUDA (its own test),
// as TestEmulatedMatrices does for the attention matrix.
func TestQKVAppendEmulatedTargets(t *testing.T) {
	t.Parallel()
	needEmu(t)
	ran := false
	for _, name := range Harnessed() {
		tg, _, err := harnessOf(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, threads := tg.(targets.HostRuntime); threads || name == "cuda" {
			continue // TestQKVAppendMatrix, TestQKVAppendCUDAEmulated
		}
		ran = true
		t.Run(name, func(t *testing.T) {
			only := qkvAppendOtherGPUsShort
			if *cudaAll {
				only = qkvAppendOtherGPUs
			}
			runQKVAppendSpecs(t, only, func(v *ir.Variant, dir string) (*Suite, error) {
				return BuildFor(v, name, dir, Options{})
			})
		})
	}
	if !ran {
		t.Skip("no other emulated target is registered")
	}
}

// qkvAppendLevels are the variants of qkvAppendSpecs that
// TestQKVAppendLevels runs at every lower CPU level: the angles from a
// table (f16, GQA, block table) and from factors (bf16, partial,
// interleaved).
var qkvAppendLevels = []string{"qa_f16_table_bt_gqa", "qa_bf16_factors_partial_ps1"}

// TestQKVAppendLevels runs qkv_append of qkvAppendLevels at every CPU level
// below the one this machine's entries choose ($ATTNC_CPU_LEVEL), valid
// and bad inputs, against the float64 reference.
func TestQKVAppendLevels(t *testing.T) {
	t.Parallel()
	needTools(t)
	for _, src := range qkvAppendSpecs {
		v := spec(t, src)
		if !slices.Contains(qkvAppendLevels, v.Name) {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s, err := Build(v, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, level := range clonedBelow(t, s) {
				ls, err := s.AtLevel(level)
				if err != nil {
					t.Fatal(err)
				}
				worst, ran := 0.0, 0
				for i, pos0 := range []int{300, 1 << 20} {
					for _, r := range ls.RunQKVAppend(int64(11+i), pos0) {
						if !r.Pass {
							t.Errorf("level %s: %s", level, r)
						}
						worst, ran = max(worst, r.MaxErr), ran+1
					}
				}
				t.Logf("level %s %s: %d cases; max error %.3g ulps of %s", level, v.Name, ran, worst, v.DType)
				ls.Lib.Close()
			}
		})
	}
}
