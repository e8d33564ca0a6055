package conformance

import (
	"fmt"
	"slices"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// paramSpecs are variants whose masks and scores read param tensors:
// FlexAttention's packed-document mask, per-head slopes, a 2-D f32 table
// in a score indexed partly outside its shape, an i32 param as a boolean,
// params indexed by batch in a score.
var paramSpecs = []string{
	`variant pm_docs { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  param doc i32[batch, max_len]
	  mask expr(kv_pos <= q_pos && doc[batch, q_pos] == doc[batch, kv_pos])
	  kernels prefill, decode, prefill_ragged }`,
	`variant pm_slopes { heads qo = 4, kv = 4
	  head_dim 128
	  dtype bf16
	  cache paged(page_size = 32, layout = NHD, table = block_table)
	  param slopes f32[qo_heads]
	  score score - slopes[head] * (q_pos - kv_pos)
	  kernels prefill, decode }`,
	`variant pm_table { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8)
	  param bias f32[16, kv_heads]
	  score score + 4.0 * bias[kv_pos - q_pos + 11, head / 2]
	  kernels prefill, decode, prefill_ragged }`,
	`variant pm_keep { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 4, table = block_table)
	  param keep i32[qo_heads, 5]
	  mask window(left = 40), expr(keep[head, kv_pos % 7] || kv_pos == q_pos)
	  kernels prefill, decode }`,
	`variant pm_batch { heads qo = 4, kv = 1
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 2, layout = NHD)
	  param bb f32[batch, qo_heads]
	  param doc i32[batch, doc_len]
	  score score * (1.0 + bb[batch, head]) - 0.5 * doc[batch, kv_pos]
	  kernels prefill, decode }`,
}

// paramDimCases are the named-dim settings every param variant also runs
// with (besides the default, the longest kv_len): a dim shorter than the
// positions (reads past it give 0) and 0 (an empty tensor: every read is
// 0, none touches memory).
var paramDimCases = []int{5, 0}

// TestParamMatrix runs the param variants on prefill, decode and
// prefill_ragged against the float64 reference: the whole matrix at 1 and
// 3 threads (bad inputs included: a negative named dim is a status with
// nothing written), then prefill and decode again with named dims that put
// indices outside the param's shape.
func TestParamMatrix(t *testing.T) {
	t.Parallel()
	needTools(t)
	for _, src := range paramSpecs {
		v := spec(t, src)
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s, err := buildHostLevel(v, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Lib.Close()
			n := 0
			for _, r := range append(s.RunAll([]int{1, 3}, 7), runParamDims(s, 3)...) {
				if !r.Pass {
					t.Errorf("%s", r)
				}
				record("param "+dtypeKey(v), r)
				n++
			}
			t.Logf("%d runs", n)
		})
	}
	t.Cleanup(func() {
		t.Logf("%d kernel runs; max errors: o %v (f16/bf16 in ulps), lse %v, beyond rounding in 2^-24 mag %v", maxErr.cases, maxErr.o, maxErr.lse, maxErr.mag)
	})
}

// runParamDims runs prefill's and decode's matrices with every named dim
// of the variant set to each of paramDimCases.
func runParamDims(s *Suite, threads int) []Result {
	dims := s.V.ParamDimNames()
	if len(dims) == 0 {
		return nil
	}
	var out []Result
	for _, n := range paramDimCases {
		set := func(spec reference.CaseSpec) reference.CaseSpec {
			spec.ParamDims = map[string]int{}
			for _, d := range dims {
				spec.ParamDims[d] = n
			}
			spec.Name += fmt.Sprintf(" (param dims %d)", n)
			return spec
		}
		for i, spec := range Matrix(s.V) {
			out = append(out, s.RunAttention(ir.RolePrefill, set(spec), int64(100+i), threads))
		}
		for i, spec := range DecodeMatrix(s.V) {
			out = append(out, s.RunAttention(ir.RoleDecode, set(spec), int64(200+i), threads))
		}
	}
	return out
}

// paramEmulated are the param variants the CUDA emulator and qemu-aarch64
// run with -cuda.all and -aarch64.all (CI's long pass); the default run
// takes the first (the emulators are slow), on the CUDA emulator only
// (qemu-aarch64 with -aarch64.all, the other emulated targets with
// -cuda.all).
var paramEmulated = []string{"pm_docs", "pm_table", "pm_batch"}

// TestParamEmulated runs paramEmulated on the emulated CUDA target, on
// every other registered target whose kernels run on an emulator (HIP),
// and on aarch64 under qemu, named dims inside and outside the positions.
func TestParamEmulated(t *testing.T) {
	t.Parallel()
	for _, target := range append([]string{"cuda", "aarch64"}, otherEmulated(t)...) {
		t.Run(target, func(t *testing.T) {
			if target != "aarch64" {
				needEmu(t)
			} else {
				_, err := cpurt.ToolchainFor(aarch64)
				needtool.Check(t, err)
			}
			for _, src := range paramSpecs {
				v := spec(t, src)
				all := target != "aarch64" && *cudaAll || target == "aarch64" && *aarch64All
				if !slices.Contains(paramEmulated, v.Name) || !all && (v.Name != paramEmulated[0] || target != "cuda") {
					continue
				}
				t.Run(v.Name, func(t *testing.T) {
					t.Parallel()
					var s *Suite
					var err error
					if target != "aarch64" {
						s, err = BuildFor(v, target, t.TempDir(), Options{})
					} else {
						s, err = BuildWith(v, t.TempDir(), Options{Triple: aarch64})
					}
					if err != nil {
						t.Fatal(err)
					}
					defer s.Close()
					n := 0
					for _, r := range append(s.RunAll([]int{1}, 11), runParamDims(s, 1)...) {
						if !r.Pass {
							t.Errorf("%s", r)
						}
						record(target+" param "+dtypeKey(v), r)
						n++
					}
					t.Logf("%d runs", n)
				})
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("%d kernel runs; max errors: o %v (f16/bf16 in ulps), lse %v", maxErr.cases, maxErr.o, maxErr.lse)
	})
}
