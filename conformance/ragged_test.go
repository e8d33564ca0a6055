package conformance

import (
	"math"
	"math/rand"
	"slices"
	"sync"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// raggedOnly is v with prefill_ragged as its only kernel: the ragged
// matrix builds just that entry.
func raggedOnly(v *ir.Variant) *ir.Variant {
	r := *v
	r.Kernels = []ir.KernelRef{{Role: ir.RolePrefillRagged, Pos: v.Pos}}
	return &r
}

// raggedErr records the ragged matrix's largest errors per dtype.
var raggedErr = struct {
	sync.Mutex
	o, lse, allow map[string]float64
	runs          int
}{o: map[string]float64{}, lse: map[string]float64{}, allow: map[string]float64{}}

// TestRaggedMatrix runs prefill_ragged of every third matrix variant
// (every one with -levels.all) but MLA's (which refuses it) against the
// float64 reference over the gathered rows (RaggedMatrix: ragged batches with empty sequences, shared prefixes,
// chunks over many tiles, poisoned rows before the first sequence and
// wherever the mask hides a position from the whole call, cross attention
// for mask none) at 1 and 3 threads, and its bad inputs (status, outputs
// untouched). The variants cover every dtype, 8-bit caches (whose ragged
// rows are the dtype), GQA, head dims, every mask kind, sinks, score
// transforms, RoPE styles, lse base 2.
func TestRaggedMatrix(t *testing.T) {
	t.Parallel()
	needTools(t)
	for i, src := range matrixSpecs {
		v := spec(t, src)
		if v.MLA != nil {
			continue
		}
		// The default run takes every third variant; CI's long pass
		// (-levels.all) takes them all.
		if !*levelsAll && i%3 != 0 {
			continue
		}
		v = raggedOnly(v)
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s, err := buildHostLevel(v, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Lib.Close()
			for _, r := range s.RunAll([]int{1, 3}, 11) {
				if !r.Pass {
					t.Errorf("%s", r)
				}
				raggedErr.Lock()
				raggedErr.o[dtypeKey(v)] = math.Max(raggedErr.o[dtypeKey(v)], r.MaxErr)
				raggedErr.lse[dtypeKey(v)] = math.Max(raggedErr.lse[dtypeKey(v)], r.LSEErr)
				raggedErr.allow[dtypeKey(v)] = math.Max(raggedErr.allow[dtypeKey(v)], r.Allowance)
				raggedErr.runs++
				raggedErr.Unlock()
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("%d prefill_ragged runs; max errors: o %v (f16/bf16 in ulps of o), lse %v; f16/bf16 allowance used %v", raggedErr.runs, raggedErr.o, raggedErr.lse, raggedErr.allow)
	})
}

// TestChunkedPrefillComposes is TVM's chunked prefill: a chunk of q_len
// new tokens per sequence, whose K/V the engine holds contiguously, over
// a cached prefix in pages. A paged prefill of a `mask none` variant gives
// the chunk's queries over the prefix, prefill_ragged of the causal
// variant their causal attention over the chunk's own rows (the first
// chunk of a sequence has an empty prefix: lse -inf), and merge_state
// merges the two states. The result must equal causal attention over
// prefix and chunk: the float64 reference and the causal variant's one
// paged prefill over the whole cache. Bounds: f32 outputs and every lse
// within Tolerance; an f16/bf16 o is rounded twice on this path (each
// part's o, then the merge's): within half an ulp of the exact value plus
// one ulp of the row's magnitude mag (the parts' roundings: the merge
// weighs part i's half ulp of its own magnitude mag_i, at most
// 2^-mantissa mag_i, by w_i, and sum w_i mag_i = mag) plus
// reference.HalfAllowance of mag, and within one more half ulp of the one
// paged prefill's (rounded once).
func TestChunkedPrefillComposes(t *testing.T) {
	t.Parallel()
	needTools(t)
	for _, tc := range []struct{ name, body string }{
		{"f32_gqa_rope", `heads qo = 8, kv = 2
		  head_dim 64
		  dtype f32
		  cache paged(page_size = 16)
		  rope inline(theta = 500000, style = llama3, factor = 8, low_freq = 1, high_freq = 4, original_max = 8192)`},
		{"f16_nhd", `heads qo = 4, kv = 4
		  head_dim 128
		  dtype f16
		  cache paged(page_size = 8, layout = NHD, table = block_table)`},
		{"bf16_lse2_softcap", `heads qo = 8, kv = 1
		  head_dim 64
		  dtype bf16
		  cache paged(page_size = 4)
		  score softcap(score, 30.0)
		  lse base = 2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			causal := spec(t, "variant chunk_"+tc.name+" {\n"+tc.body+"\n mask causal\n kernels prefill, merge_state, prefill_ragged }")
			none := spec(t, "variant prefix_"+tc.name+" {\n"+tc.body+"\n mask none\n kernels prefill }")
			sc, err := buildHostLevel(causal, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Lib.Close()
			sn, err := buildHostLevel(none, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer sn.Lib.Close()
			// Chunks after a prefix of several pages, a first chunk (no
			// prefix), a one-token chunk, an empty sequence.
			qLens := []int{37, 20, 1, 0, 70}
			prefix := []int{2*causal.PageSize + 5, 0, 9, 3, 3 * causal.PageSize}
			kvLens := make([]int, len(qLens))
			for b := range kvLens {
				kvLens[b] = prefix[b] + qLens[b]
			}
			c := reference.NewCase(causal, rand.New(rand.NewSource(21)), reference.CaseSpec{Name: "chunked", QLens: qLens, KVLens: kvLens, ExtraPages: 1, NaNFill: true})
			want, wantL, mag := reference.AttentionMag(causal, c)
			pre, chunk := reference.SplitChunk(causal, c, prefix, RaggedLead)
			run := func(s *Suite, role ir.Role, c *reference.Case) ([]float32, []float32) {
				cb := s.buffers(c)
				defer cb.free()
				if st, err := s.run(role, cb); err != nil || st != 0 {
					t.Fatalf("%s %s: status %d, %v", s.V.Name, role, st, err)
				}
				return append([]float32(nil), s.dec(cb.o)...), append([]float32(nil), cb.lse.F32()...)
			}
			oOne, lOne := run(sc, ir.RolePrefill, c)
			oA, lA := run(sn, ir.RolePrefill, pre)
			oB, lB := run(sc, ir.RolePrefillRagged, chunk)
			cb := sc.mergeArgs(oA, lA, oB, lB, c.TotalQ())
			defer cb.free()
			if st, err := sc.run(ir.RoleMergeState, cb); err != nil || st != 0 {
				t.Fatalf("merge_state: status %d, %v", st, err)
			}
			got, gotL := sc.dec(cb.byName["v"]), cb.byName["s"].F32()
			dt := causal.DType
			one := make([]float64, len(oOne))
			for i, x := range oOne {
				one[i] = float64(x)
			}
			worst, worstOne := 0.0, 0.0
			for i, w := range want {
				e, eOne := math.Abs(float64(got[i])-w), math.Abs(float64(got[i])-one[i])
				var bound, boundOne float64
				if dt == ir.DTF32 {
					bound, boundOne = Tolerance*math.Max(1, math.Abs(w)), Tolerance*math.Max(1, math.Abs(one[i]))
				} else {
					bound = reference.ULP(dt, w)/2 + reference.ULP(dt, mag[i]) + reference.HalfAllowance*mag[i]
					boundOne = bound + reference.ULP(dt, w)/2
				}
				if !(e <= bound) {
					t.Fatalf("o[%d] = %v composed, want %v (reference): error %g > %g", i, got[i], w, e, bound)
				}
				if !(eOne <= boundOne) {
					t.Fatalf("o[%d] = %v composed, %v from one paged prefill: difference %g > %g", i, got[i], one[i], eOne, boundOne)
				}
				worst, worstOne = math.Max(worst, e/bound), math.Max(worstOne, eOne/boundOne)
			}
			if e, i, ok := reference.Compare(gotL, wantL, Tolerance); !ok {
				t.Fatalf("lse[%d] = %v composed, want %v: error %g", i, gotL[i], wantL[i], e)
			}
			oneL := make([]float64, len(lOne))
			for i, x := range lOne {
				oneL[i] = float64(x)
			}
			if e, i, ok := reference.Compare(gotL, oneL, Tolerance); !ok {
				t.Fatalf("lse[%d] = %v composed, %v from one paged prefill: error %g", i, gotL[i], lOne[i], e)
			}
			t.Logf("%d rows: o within %.2f of its bound to the reference, %.2f to the one paged prefill", c.TotalQ()*causal.QOHeads, worst, worstOne)
		})
	}
}

// cudaRaggedShort are the variants of cudaMatrix whose prefill_ragged
// TestCUDAEmulatedRagged runs by default (with -cuda.all, every variant
// but MLA's): the SIMT path (f32), the tensor cores (f16 over an 8-bit
// cache, with ragged rows in the dtype), a window with sinks, and a tree
// with llama3 RoPE; with -cuda.all bf16 (cu_ps256_bf16), f16 over an f16
// cache (cu_ps16_f16, which TestEmulatedKernels runs on the other emulated
// targets) and the others.
var cudaRaggedShort = []string{"cu_ps1_f32", "cu_ps4_masked", "cu_ps16_f16_e4m3", "cu_rope_llama3_tree"}

// TestCUDAEmulatedRagged runs prefill_ragged of the emulated CUDA matrix's
// variants on the emulator: RaggedMatrix against the reference, and the
// bad inputs a launcher checks on the host.
func TestCUDAEmulatedRagged(t *testing.T) {
	t.Parallel()
	emulatedRagged(t, "cuda", cudaRaggedShort)
}

// emulatedRagged is TestCUDAEmulatedRagged on the target's emulator, short
// in place of cudaRaggedShort.
func emulatedRagged(t *testing.T, target string, short []string) {
	needEmu(t)
	for _, src := range cudaMatrix {
		v := spec(t, src)
		if v.MLA != nil || !*cudaAll && !slices.Contains(short, v.Name) {
			continue
		}
		v = raggedOnly(v)
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s, err := BuildFor(v, target, t.TempDir(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Lib.Close()
			n := 0
			for _, r := range s.RunAll([]int{1}, 11) {
				if !r.Pass {
					t.Errorf("%s", r)
				}
				record(target+" ragged "+dtypeKey(v), r)
				n++
			}
			if n == 0 {
				t.Fatal("no prefill_ragged run")
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("%d kernel runs; max errors: o %v (f16/bf16 in ulps), lse %v, beyond rounding in 2^-24 mag %v", maxErr.cases, maxErr.o, maxErr.lse, maxErr.mag)
	})
}

// TestCUDARaggedShortNamesExist: every cudaRaggedShort name is a variant
// of cudaMatrix.
func TestCUDARaggedShortNamesExist(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, src := range cudaMatrix {
		names[spec(t, src).Name] = true
	}
	for _, n := range cudaRaggedShort {
		if !names[n] {
			t.Errorf("cudaRaggedShort names %s, which cudaMatrix does not have", n)
		}
	}
}

// aarch64RaggedShort are the matrix variants whose prefill_ragged
// TestAArch64Ragged runs under qemu-aarch64 by default (with
// -aarch64.all, every variant but MLA's): bf16 with a window and sinks,
// f32 with RoPE; f16 GQA (ps16_gqa4) and an e4m3 cache (ps16_e4m3_gqa4),
// whose attention kernels TestAArch64Matrix runs under qemu by default,
// in the long pass.
var aarch64RaggedShort = []string{"ps4_window_sinks", "ps16_rope_f32"}

// TestAArch64Ragged cross-compiles prefill_ragged of matrix variants for
// aarch64 and runs RaggedMatrix and its bad inputs under qemu-aarch64.
func TestAArch64Ragged(t *testing.T) {
	t.Parallel()
	_, err := cpurt.ToolchainFor(aarch64)
	needtool.Check(t, err)
	for _, src := range matrixSpecs {
		v := spec(t, src)
		if v.MLA != nil || !*aarch64All && !slices.Contains(aarch64RaggedShort, v.Name) {
			continue
		}
		v = raggedOnly(v)
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s := buildAArch64(t, v)
			n := 0
			for _, r := range s.RunAll([]int{1, 3}, 7) {
				if !r.Pass {
					t.Errorf("%s", r)
				}
				record("aarch64 ragged "+dtypeKey(v), r)
				n++
			}
			if n == 0 {
				t.Fatal("no prefill_ragged run")
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("%d kernel runs; max errors: o %v (f16/bf16 in ulps), lse %v", maxErr.cases, maxErr.o, maxErr.lse)
	})
}
