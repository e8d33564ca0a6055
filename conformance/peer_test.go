package conformance

import (
	"math"
	"math/rand"
	"path/filepath"
	"slices"
	"testing"

	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// Peer tests: each checks the generated kernels (CPU, and the CUDA
// launchers on the emulator) against numbers computed the way a peer
// library defines the convention — the formula is written out here from
// the peer's definition, not taken from attnc's reference — so that a user
// porting from that peer gets what they expect.

// peerModel is an attention computed as a peer defines it: the query and
// key vectors the peer feeds to q·k (rotated its way), which cache
// positions a query sees, and an optional sink logit per head.
type peerModel struct {
	q       func(row, h int) []float64
	k       func(b, kv, kh int) []float64
	visible func(b, i, kv int) bool // query i of sequence b sees cache position kv
	sink    func(h int) (float64, bool)
}

// attend returns o [total_q, qo_heads, d_v] and the natural-log lse of
// softmax(q·k·scale) over the visible positions (plus the sink), computed
// directly: o = Σ p_j v_j with p_j = exp(s_j) / Σ exp; a row that sees
// nothing has o = 0 and lse = -inf.
func (pm peerModel) attend(v *ir.Variant, c *reference.Case) (o, lse []float64) {
	H, dv, group := v.QOHeads, v.HeadDimV, v.GroupSize()
	o = make([]float64, c.TotalQ()*H*dv)
	lse = make([]float64, c.TotalQ()*H)
	row := 0
	for b := range c.Batch {
		for i := range c.QLens[b] {
			for h := range H {
				q := pm.q(row+i, h)
				var logits []float64
				var vals [][]float64
				for kv := range c.KVLens[b] {
					if !pm.visible(b, i, kv) {
						continue
					}
					k := pm.k(b, kv, h/group)
					dot := 0.0
					for d := range q {
						dot += q[d] * k[d]
					}
					logits = append(logits, dot*v.Scale)
					page, slot := c.Pages[b][kv/v.PageSize], kv%v.PageSize
					val := make([]float64, dv)
					for d := range val {
						val[d] = float64(c.VPages[reference.PageIndex(v, page, h/group, slot, d, dv)])
					}
					vals = append(vals, val)
				}
				m := math.Inf(-1)
				for _, s := range logits {
					m = math.Max(m, s)
				}
				sink, hasSink := 0.0, false
				if pm.sink != nil {
					sink, hasSink = pm.sink(h)
					if hasSink {
						m = math.Max(m, sink)
					}
				}
				at := (row+i)*H + h
				if math.IsInf(m, -1) {
					lse[at] = m
					continue
				}
				den := 0.0
				if hasSink {
					den = math.Exp(sink - m)
				}
				for j, s := range logits {
					w := math.Exp(s - m)
					den += w
					for d := range dv {
						o[at*dv+d] += w * vals[j][d]
					}
				}
				for d := range dv {
					o[at*dv+d] /= den
				}
				lse[at] = m + math.Log(den)
			}
		}
		row += c.QLens[b]
	}
	return o, lse
}

// plainQ and plainK read q and k as stored (no rotation).
func plainQ(v *ir.Variant, c *reference.Case) func(row, h int) []float64 {
	return func(row, h int) []float64 {
		x := make([]float64, v.HeadDimQK)
		for d := range x {
			x[d] = float64(c.Q[(row*v.QOHeads+h)*v.HeadDimQK+d])
		}
		return x
	}
}

func plainK(v *ir.Variant, c *reference.Case) func(b, kv, kh int) []float64 {
	return func(b, kv, kh int) []float64 {
		page, slot := c.Pages[b][kv/v.PageSize], kv%v.PageSize
		x := make([]float64, v.HeadDimQK)
		for d := range x {
			x[d] = float64(c.KPages[reference.PageIndex(v, page, kh, slot, d, v.HeadDimQK)])
		}
		return x
	}
}

// qPosOf is query i's position in sequence b: the new tokens are the last
// q_len positions of the cache.
func qPosOf(c *reference.Case, b, i int) int { return c.KVLens[b] - c.QLens[b] + i }

// peerCUDAShort are the variants whose peer check peerSuites runs on the
// CUDA emulator by default (every one with -cuda.all, CI's long pass of
// the emulated targets; each is a g++ compile of its own): a draft tree
// with llama3 RoPE at q_rope_position (eagle_peer), YaRN (hf_yarn_gptoss),
// FlashInfer's custom mask bytes (fi_custom), a deeply nested mask
// expression (nested_abs) and RoPE offsets past int32 (rope_far). The
// others run on the CPU by default.
var peerCUDAShort = []string{"eagle_peer", "hf_yarn_gptoss", "fi_custom", "nested_abs", "rope_far"}

// peerSuites builds v for the CPU and for the CUDA emulator (each skipped
// locally, failed in CI, when its tools are missing; the emulator for
// peerCUDAShort only without -cuda.all) and runs f on each.
func peerSuites(t *testing.T, src string, f func(t *testing.T, s *Suite)) {
	t.Helper()
	v := spec(t, src)
	t.Run("cpu", func(t *testing.T) {
		needTools(t)
		s, err := buildHostLevel(v, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Lib.Close()
		f(t, s)
	})
	t.Run("cuda", func(t *testing.T) {
		if !*cudaAll && !slices.Contains(peerCUDAShort, v.Name) {
			t.Skip("on the CUDA emulator with -cuda.all (CI's long pass, .ci/run); the default run takes peerCUDAShort")
		}
		needEmu(t)
		s, err := BuildCUDA(v, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Lib.Close()
		f(t, s)
	})
}

// runOn runs role on case c (at threads workers on the CPU) and returns o
// and lse as written.
func runOn(t *testing.T, s *Suite, role ir.Role, c *reference.Case, threads int) (o, lse []float32) {
	t.Helper()
	cb := s.buffers(c)
	defer cb.free()
	if err := s.SetThreads(threads); err != nil {
		t.Fatal(err)
	}
	if st, err := s.run(role, cb); err != nil || st != 0 {
		t.Fatalf("%s: status %d (%s), %v", role, st, s.strerror(st), err)
	}
	return append([]float32(nil), s.dec(cb.o)...), append([]float32(nil), cb.lse.F32()...)
}

// expect compares a kernel's o and lse with the peer's numbers.
func expect(t *testing.T, s *Suite, what string, gotO, gotL []float32, wantO, wantL []float64) {
	t.Helper()
	if s.V.DType != ir.DTF32 {
		t.Fatalf("%s: the peer tests compare f32 kernels (f16/bf16 need the reference's magnitudes)", what)
	}
	tol := Tolerance
	if e, i, ok := reference.Compare(gotO, wantO, tol); !ok {
		t.Errorf("%s: o[%d] = %v, peer %v (err %.3g, tol %g)", what, i, gotO[max(i, 0)], wantO[max(i, 0)], e, tol)
	}
	if e, i, ok := reference.Compare(gotL, wantL, tol); !ok {
		t.Errorf("%s: lse[%d] = %v, peer %v (err %.3g, tol %g)", what, i, gotL[max(i, 0)], wantL[max(i, 0)], e, tol)
	}
}

func maxAbsDiff(a, b []float64) float64 {
	m := 0.0
	for i := range a {
		if !math.IsInf(a[i], 0) || a[i] != b[i] {
			m = math.Max(m, math.Abs(a[i]-b[i]))
		}
	}
	return m
}

// TestPeerWindowSizeHF: `window(size = S)` is HF's sliding_window = S
// (transformers masking_utils: causal and kv_idx > q_idx - sliding_window,
// so a query sees itself and S - 1 earlier tokens; vLLM and Mistral/Gemma
// configs use the same number). FlashInfer's window_left = S - 1 is the
// same window, attnc's window(left = S - 1).
func TestPeerWindowSizeHF(t *testing.T) {
	t.Parallel()
	const S = 7
	peerSuites(t, `variant hf_window { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 4, layout = NHD)
	  mask window(size = 7) }`, func(t *testing.T, s *Suite) {
		v := s.V
		c := reference.NewCase(v, rand.New(rand.NewSource(21)), reference.CaseSpec{QLens: []int{5, 1, 12}, KVLens: []int{30, 9, 12}, NaNFill: true})
		hf := func(slidingWindow int) peerModel {
			return peerModel{q: plainQ(v, c), k: plainK(v, c), visible: func(b, i, kv int) bool {
				q := qPosOf(c, b, i)
				return kv <= q && kv > q-slidingWindow
			}}
		}
		wantO, wantL := hf(S).attend(v, c)
		gotO, gotL := runOn(t, s, ir.RolePrefill, c, 1)
		expect(t, s, "window(size = 7) vs HF sliding_window = 7", gotO, gotL, wantO, wantL)
		// The trap this replaces: window(left = 7) sees one token more.
		oldO, _ := hf(S+1).attend(v, c)
		t.Logf("before/after: window(left = %d) vs window(size = %d): max |o diff| = %.3g; at q_pos 10000, left = 4096 sees %d tokens, size = 4096 sees %d (HF: 4096)",
			S, S, maxAbsDiff(oldO, wantO), seen(4096, 10000), seen(4095, 10000))
	})
}

// seen counts the positions window(left = left) shows the query at q.
func seen(left, q int) int {
	v := &ir.Variant{Masks: []ir.MaskClause{{Kind: ir.MaskWindow, Left: left}}}
	n := 0
	for kv := 0; kv <= q; kv++ {
		if reference.Visible(v, 0, 0, q, kv) {
			n++
		}
	}
	return n
}

// TestPeerLSEBase2FlashInfer: with `lse base = 2`, lse and merge_state
// follow FlashInfer (and TVM): the online softmax runs in base 2 on
// s·log2(e), a learned sink joins as sink·log2(e) (FlashInfer's
// AttentionSink variant), lse = m + log2(d); merge_state weights each side
// by 2^(s - max) and returns max + log2(sum of weights). Equivalently
// lse_2 = lse_e / ln 2.
func TestPeerLSEBase2FlashInfer(t *testing.T) {
	t.Parallel()
	peerSuites(t, `variant fi_lse2 { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8)
	  sinks learned
	  lse base = 2 }`, func(t *testing.T, s *Suite) {
		v := s.V
		c := reference.NewCase(v, rand.New(rand.NewSource(22)), reference.CaseSpec{QLens: []int{1, 1}, KVLens: []int{300, 45}, NaNFill: true})
		// FlashInfer's base-2 online softmax, written out.
		flashinfer := func(c *reference.Case, visible func(b, i, kv int) bool) (o, lse2 []float64) {
			pm := peerModel{q: plainQ(v, c), k: plainK(v, c), visible: visible}
			o, _ = pm.attend(v, c) // o does not depend on the base
			lse2 = make([]float64, len(o)/v.HeadDimV)
			row := 0
			for b := range c.Batch {
				for i := range c.QLens[b] {
					for h := range v.QOHeads {
						q := pm.q(row+i, h)
						logSink := float64(c.Sinks[h]) * math.Log2E
						m := logSink
						var s2 []float64
						for kv := range c.KVLens[b] {
							if !visible(b, i, kv) {
								continue
							}
							k := pm.k(b, kv, h/v.GroupSize())
							dot := 0.0
							for d := range q {
								dot += q[d] * k[d]
							}
							s2 = append(s2, dot*v.Scale*math.Log2E)
							m = math.Max(m, s2[len(s2)-1])
						}
						d := math.Exp2(logSink - m)
						for _, x := range s2 {
							d += math.Exp2(x - m)
						}
						lse2[(row+i)*v.QOHeads+h] = m + math.Log2(d)
					}
				}
				row += c.QLens[b]
			}
			return o, lse2
		}
		causal := func(c *reference.Case) func(b, i, kv int) bool {
			return func(b, i, kv int) bool { return kv <= qPosOf(c, b, i) }
		}
		_, wantL := flashinfer(c, causal(c))
		// o with the sink in the denominator: the peer model with the sink.
		wantO, wantLE := peerModel{q: plainQ(v, c), k: plainK(v, c), visible: causal(c),
			sink: func(h int) (float64, bool) { return float64(c.Sinks[h]), true }}.attend(v, c)
		for i := range wantL {
			if d := math.Abs(wantLE[i]/math.Ln2 - wantL[i]); d > 1e-9*math.Abs(wantL[i]) {
				t.Fatalf("FlashInfer's base-2 lse %v is not lse_e / ln 2 = %v", wantL[i], wantLE[i]/math.Ln2)
			}
		}
		for _, threads := range []int{1, 4} { // 4: split-KV partials merged in base 2
			gotO, gotL := runOn(t, s, ir.RoleDecode, c, threads)
			expect(t, s, "decode lse base 2 vs FlashInfer", gotO, gotL, wantO, wantL)
		}
		t.Logf("before/after: natural lse %.6g vs base-2 lse %.6g on row 0 (ratio ln 2)", wantLE[0], wantL[0])

		// merge_state of two halves of every cache, FlashInfer's formula.
		half := func(lo bool) *reference.Case {
			h := *c
			h.KVLens, h.Pages = make([]int, c.Batch), make([][]int, c.Batch)
			for b := range c.Batch {
				n := 2 * v.PageSize
				if lo {
					h.KVLens[b], h.Pages[b] = n, c.Pages[b][:2]
				} else {
					h.KVLens[b], h.Pages[b] = c.KVLens[b]-n, c.Pages[b][2:]
				}
			}
			return &h
		}
		// Two partial states in base 2 (each half's decode), merged by the
		// kernel and by FlashInfer's formula from the same inputs.
		oA, lA := runOn(t, s, ir.RoleDecode, half(true), 1)
		oB, lB := runOn(t, s, ir.RoleDecode, half(false), 1)
		cb := s.mergeArgs(oA, lA, oB, lB, c.Batch)
		defer cb.free()
		if st, err := s.run(ir.RoleMergeState, cb); err != nil || st != 0 {
			t.Fatalf("merge_state: status %d, %v", st, err)
		}
		var fiV, fiS []float64
		d := v.HeadDimV
		for r := range lA {
			sa, sb := float64(lA[r]), float64(lB[r])
			sMax := math.Max(sa, sb)
			wa, wb := math.Exp2(sa-sMax), math.Exp2(sb-sMax)
			for k := range d {
				fiV = append(fiV, (float64(oA[r*d+k])*wa+float64(oB[r*d+k])*wb)/(wa+wb))
			}
			fiS = append(fiS, sMax+math.Log2(wa+wb))
		}
		expect(t, s, "merge_state base 2 vs FlashInfer", s.dec(cb.byName["v"]), cb.byName["s"].F32(), fiV, fiS)
	})
}

// hfInvFreq is HF transformers' _compute_default_rope_parameters over a
// rotary dim of dim: inv_freq_i = 1 / base^(2i/dim).
func hfInvFreq(base float64, dim int) []float64 {
	out := make([]float64, dim/2)
	for i := range out {
		out[i] = 1 / math.Pow(base, float64(2*i)/float64(dim))
	}
	return out
}

// hfYarn is HF transformers' _compute_yarn_parameters: inv_freq blends
// extrapolation (1/pos_freqs) and interpolation (1/(factor·pos_freqs)) by
// 1 - a linear ramp over find_correction_range(beta_fast, beta_slow) —
// floor/ceil of the correction dims unless truncate is false, clamped to
// [0, dim - 1], max += 0.001 when equal — and attention_factor is given, or
// get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both
// are truthy (0 counts as absent), or get_mscale(factor).
func hfYarn(base float64, dim int, factor, origMax, betaFast, betaSlow, mscale, mscaleAllDim float64, truncate bool) (inv []float64, attn float64) {
	getMscale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	if mscale != 0 && mscaleAllDim != 0 {
		attn = getMscale(factor, mscale) / getMscale(factor, mscaleAllDim)
	} else {
		attn = getMscale(factor, 1)
	}
	corrDim := func(rot float64) float64 {
		return float64(dim) * math.Log(origMax/(rot*2*math.Pi)) / (2 * math.Log(base))
	}
	low, high := corrDim(betaFast), corrDim(betaSlow)
	if truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = math.Max(low, 0), math.Min(high, float64(dim-1))
	if low == high {
		high += 0.001
	}
	for i := 0; i < dim/2; i++ {
		posFreq := math.Pow(base, float64(2*i)/float64(dim))
		extra, inter := 1/posFreq, 1/(factor*posFreq)
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		extraFactor := 1 - ramp
		inv = append(inv, inter*(1-extraFactor)+extra*extraFactor)
	}
	return inv, attn
}

// hfLlama3 is HF transformers' _compute_llama3_parameters: wavelengths
// above original_max/low_freq_factor divide by factor, below
// original_max/high_freq_factor stay, and the band between is smoothed.
func hfLlama3(base float64, dim int, factor, low, high, orig float64) []float64 {
	inv := hfInvFreq(base, dim)
	for i, f := range inv {
		wavelen := 2 * math.Pi / f
		switch {
		case wavelen > orig/low:
			inv[i] = f / factor
		case wavelen < orig/high:
		default:
			smooth := (orig/wavelen - low) / (high - low)
			inv[i] = (1-smooth)*f/factor + smooth*f
		}
	}
	return inv
}

// hfRotateHalf is HF's apply_rotary_pos_emb with partial rotary: x[:R] is
// rotated as x·cos + rotate_half(x)·sin with cos = cat(freqs, freqs).cos()
// · attention_factor (same for sin) and rotate_half(x) = cat(-x2, x1);
// x[R:] passes through.
func hfRotateHalf(x, inv []float64, pos int, attn float64) []float64 {
	R := 2 * len(inv)
	out := append([]float64(nil), x...)
	for d := range R {
		f := inv[d%(R/2)] * float64(pos)
		c, s := math.Cos(f)*attn, math.Sin(f)*attn
		var rh float64
		if d < R/2 {
			rh = -x[d+R/2]
		} else {
			rh = x[d-R/2]
		}
		out[d] = x[d]*c + rh*s
	}
	return out
}

// gptjRotateEveryTwo is GPT-J's apply_rotary_pos_emb (HF modeling_gptj):
// x[:R]·cos + rotate_every_two(x[:R])·sin with sin and cos
// repeat_interleave'd by 2 and rotate_every_two(x) = (-x1, x0, -x3, x2, ...).
func gptjRotateEveryTwo(x, inv []float64, pos int) []float64 {
	R := 2 * len(inv)
	out := append([]float64(nil), x...)
	for d := range R {
		f := inv[d/2] * float64(pos)
		var r2 float64
		if d%2 == 0 {
			r2 = -x[d+1]
		} else {
			r2 = x[d-1]
		}
		out[d] = x[d]*math.Cos(f) + r2*math.Sin(f)
	}
	return out
}

// TestPeerRopeStyles: inline RoPE matches HF's rotate_half with
// partial_rotary_factor, GPT-J's interleaved pairs (HF modeling_gptj,
// llama.cpp NORM) and HF's YaRN (truncate = false as gpt-oss, the
// attention factor on cos and sin), with q at q_rope_position and k at
// kv_pos + k_rope_pos_offset.
func TestPeerRopeStyles(t *testing.T) {
	t.Parallel()
	cases := []struct {
		src string
		rot func(x []float64, pos int) []float64
	}{
		{`variant hf_partial { heads qo = 2, kv = 1
		  head_dim 80
		  dtype f32
		  cache paged(page_size = 8)
		  rope inline(theta = 10000, rotary_dim = 20) }`,
			func(x []float64, pos int) []float64 { return hfRotateHalf(x, hfInvFreq(10000, 20), pos, 1) }},
		{`variant gptj_interleaved { heads qo = 2, kv = 2
		  head_dim 64
		  dtype f32
		  cache paged(page_size = 16, layout = NHD)
		  rope inline(theta = 10000, pairs = interleaved, rotary_dim = 32) }`,
			func(x []float64, pos int) []float64 { return gptjRotateEveryTwo(x, hfInvFreq(10000, 32), pos) }},
		{`variant hf_yarn_gptoss { heads qo = 4, kv = 1
		  head_dim 64
		  dtype f32
		  cache paged(page_size = 4)
		  rope inline(theta = 150000, style = yarn, factor = 32, original_max = 4096, truncate = false) }`,
			func(x []float64, pos int) []float64 {
				inv, attn := hfYarn(150000, 64, 32, 4096, 32, 1, 0, 0, false)
				return hfRotateHalf(x, inv, pos, attn)
			}},
		{`variant hf_yarn_deepseek { heads qo = 2, kv = 2
		  head_dim 64
		  dtype f32
		  cache paged(page_size = 8)
		  rope inline(theta = 10000, style = yarn, factor = 40, original_max = 4096, mscale = 0.707, mscale_all_dim = 1, pairs = interleaved) }`,
			func(x []float64, pos int) []float64 {
				inv, attn := hfYarn(10000, 64, 40, 4096, 32, 1, 0.707, 1, true)
				// DeepSeek's yarn rotates interleaved pairs; the factor scales cos and sin.
				out := gptjRotateEveryTwo(x, inv, pos)
				for d := range out {
					out[d] *= attn
				}
				return out
			}},
	}
	for _, tc := range cases {
		v := spec(t, tc.src)
		t.Run(v.Name, func(t *testing.T) {
			peerSuites(t, tc.src, func(t *testing.T, s *Suite) {
				v := s.V
				c := reference.NewCase(v, rand.New(rand.NewSource(23)), reference.CaseSpec{QLens: []int{4, 1}, KVLens: []int{37, 20}, NaNFill: true})
				pq, pk := plainQ(v, c), plainK(v, c)
				pm := peerModel{
					q:       func(row, h int) []float64 { return tc.rot(pq(row, h), int(c.QRopePos[row])) },
					k:       func(b, kv, kh int) []float64 { return tc.rot(pk(b, kv, kh), kv+int(c.KRopeOffset[b])) },
					visible: func(b, i, kv int) bool { return kv <= qPosOf(c, b, i) },
				}
				wantO, wantL := pm.attend(v, c)
				gotO, gotL := runOn(t, s, ir.RolePrefill, c, 2)
				expect(t, s, v.Name, gotO, gotL, wantO, wantL)
			})
		})
	}
	// Before/after on one case: the same weights read as rotate_half
	// instead of GPT-J's pairs, and rotating all 80 dims instead of 20.
	v := spec(t, cases[0].src)
	c := reference.NewCase(v, rand.New(rand.NewSource(23)), reference.CaseSpec{QLens: []int{4}, KVLens: []int{37}})
	model := func(rot func([]float64, int) []float64) []float64 {
		pq, pk := plainQ(v, c), plainK(v, c)
		o, _ := peerModel{q: func(row, h int) []float64 { return rot(pq(row, h), int(c.QRopePos[row])) },
			k:       func(b, kv, kh int) []float64 { return rot(pk(b, kv, kh), kv+int(c.KRopeOffset[b])) },
			visible: func(b, i, kv int) bool { return kv <= qPosOf(c, b, i) }}.attend(v, c)
		return o
	}
	partial := model(cases[0].rot)
	full := model(func(x []float64, pos int) []float64 { return hfRotateHalf(x, hfInvFreq(10000, 80), pos, 1) })
	inter := model(func(x []float64, pos int) []float64 { return gptjRotateEveryTwo(x, hfInvFreq(10000, 20), pos) })
	t.Logf("before/after: rotary_dim 20 vs all 80 dims: max |o diff| = %.3g; rotate_half vs interleaved pairs: %.3g",
		maxAbsDiff(partial, full), maxAbsDiff(partial, inter))
}

// TestPeerTreeRopeEAGLE: a speculative-decoding draft tree with inline
// RoPE. EAGLE / HF compute each draft token's key with its own
// position_ids — prefix length + depth in the tree, so siblings share a
// position — and cache it rotated; attnc stores the key un-rotated and must
// rotate the key at cache position kv_len - q_len + j at q_rope_position[j].
// The tree below is eagle_tree's RoPE (llama3, θ = 500000).
func TestPeerTreeRopeEAGLE(t *testing.T) {
	t.Parallel()
	const src = `variant eagle_peer { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 16)
	  mask tree
	  rope inline(theta = 500000, style = llama3, factor = 8, low_freq = 1, high_freq = 4, original_max = 8192) }`
	// Draft tree: 0 is the root; 1 and 2 its children; 3 a child of 1; 4 of 2.
	parent := []int{-1, 0, 0, 1, 2}
	depth := []int{0, 1, 1, 2, 2}
	ancestor := func(j, i int) bool { // j is i or an ancestor of i
		for ; i >= 0; i = parent[i] {
			if i == j {
				return true
			}
		}
		return false
	}
	var before []float64
	peerSuites(t, src, func(t *testing.T, s *Suite) {
		v := s.V
		c := reference.NewCase(v, rand.New(rand.NewSource(24)), reference.CaseSpec{QLens: []int{5}, KVLens: []int{40}, NaNFill: true})
		// TVM's DFS intervals for the tree: root [0,5), 1 [1,3), 3 [2,3), 2 [3,5), 4 [4,5).
		c.TreeOrder = []int32{0, 5, 1, 3, 3, 5, 2, 3, 4, 5}
		c.TreeIndptr = []int32{0, 5}
		prefix := c.KVLens[0] - c.QLens[0]
		c.KRopeOffset = []int32{0} // HF: a cached token's position is its index
		for i := range depth {
			c.QRopePos[i] = int32(prefix + depth[i])
		}
		inv := hfLlama3(500000, 64, 8, 1, 4, 8192)
		rot := func(x []float64, pos int) []float64 { return hfRotateHalf(x, inv, pos, 1) }
		pq, pk := plainQ(v, c), plainK(v, c)
		keyPos := func(kv int, tree bool) int {
			if tree && kv >= prefix {
				return prefix + depth[kv-prefix] // the draft token's position_ids
			}
			return kv
		}
		model := func(tree bool) peerModel {
			return peerModel{
				q: func(row, h int) []float64 { return rot(pq(row, h), prefix+depth[row]) },
				k: func(b, kv, kh int) []float64 { return rot(pk(b, kv, kh), keyPos(kv, tree)) },
				visible: func(b, i, kv int) bool {
					return kv < prefix || ancestor(kv-prefix, i)
				},
			}
		}
		wantO, wantL := model(true).attend(v, c)
		for _, role := range []ir.Role{ir.RolePrefill} {
			gotO, gotL := runOn(t, s, role, c, 2)
			expect(t, s, "tree + RoPE vs EAGLE position_ids", gotO, gotL, wantO, wantL)
		}
		oldO, _ := model(false).attend(v, c)
		before = []float64{maxAbsDiff(oldO, wantO)}
	})
	if before != nil {
		t.Logf("before/after: tree keys at kv_pos + offset vs at their tree positions: max |o diff| = %.3g", before[0])
	}
}

// TestPeerCrossAttentionORT: under `mask none` every query sees every
// key whatever q_len and kv_len are (ONNX Runtime's non-causal paged
// attention, encoder / cross attention); kv_len 0 gives o = 0, lse = -inf.
// And the page-table lengths: ORT's past_seqlens excludes this step's
// tokens, attnc's kv_lens is the total (kv_len = past_seqlens + q_len): a
// causal query i then sits at position past + i, as ORT places it.
func TestPeerCrossAttentionORT(t *testing.T) {
	t.Parallel()
	peerSuites(t, `variant ort_cross { heads qo = 4, kv = 4
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8, table = block_table)
	  mask none }`, func(t *testing.T, s *Suite) {
		v := s.V
		c := reference.NewCase(v, rand.New(rand.NewSource(25)), reference.CaseSpec{QLens: []int{12, 3, 2}, KVLens: []int{5, 0, 17}, NaNFill: true})
		wantO, wantL := peerModel{q: plainQ(v, c), k: plainK(v, c), visible: func(b, i, kv int) bool { return true }}.attend(v, c)
		for i := 12 * v.QOHeads; i < 15*v.QOHeads; i++ {
			if !math.IsInf(wantL[i], -1) {
				t.Fatalf("peer lse of an empty cache = %v", wantL[i])
			}
		}
		gotO, gotL := runOn(t, s, ir.RolePrefill, c, 3)
		expect(t, s, "cross attention q_len > kv_len", gotO, gotL, wantO, wantL)
		d := reference.NewCase(v, rand.New(rand.NewSource(26)), reference.CaseSpec{QLens: []int{1, 1}, KVLens: []int{0, 30}})
		wantO, wantL = peerModel{q: plainQ(v, d), k: plainK(v, d), visible: func(b, i, kv int) bool { return true }}.attend(v, d)
		gotO, gotL = runOn(t, s, ir.RoleDecode, d, 3)
		expect(t, s, "decode over an empty cache", gotO, gotL, wantO, wantL)
	})
	peerSuites(t, `variant ort_causal { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 8, table = block_table) }`, func(t *testing.T, s *Suite) {
		v := s.V
		past, newTokens := []int{13, 0, 40}, []int{3, 6, 1}
		kvLens := make([]int, len(past))
		for b := range past {
			kvLens[b] = past[b] + newTokens[b] // the one-line conversion
		}
		c := reference.NewCase(v, rand.New(rand.NewSource(27)), reference.CaseSpec{QLens: newTokens, KVLens: kvLens, NaNFill: true})
		ort := peerModel{q: plainQ(v, c), k: plainK(v, c), visible: func(b, i, kv int) bool { return kv <= past[b]+i }}
		wantO, wantL := ort.attend(v, c)
		gotO, gotL := runOn(t, s, ir.RolePrefill, c, 1)
		expect(t, s, "kv_lens = ORT past_seqlens + q_len", gotO, gotL, wantO, wantL)
	})
}

// TestPeerMLAScaleDeepSeek: DeepSeek-V3's softmax scale (its modeling
// code): qk_head_dim^-0.5 with qk_head_dim = qk_nope_head_dim 128 +
// qk_rope_head_dim 64, times mscale² where mscale = yarn_get_mscale(factor
// 40, mscale_all_dim 1) = 0.1·1·ln(40) + 1. The example must say it.
func TestPeerMLAScaleDeepSeek(t *testing.T) {
	t.Parallel()
	vs, err := frontend.ParseFile(filepath.Join("..", "examples", "deepseek_v3_mla.attn"))
	if err != nil {
		t.Fatal(err)
	}
	mscale := 0.1*1*math.Log(40) + 1
	want := math.Pow(128+64, -0.5) * mscale * mscale
	if got := vs[0].Scale; math.Abs(got-want) > 1e-9 {
		t.Errorf("deepseek_v3_mla scale %.10f, DeepSeek-V3 softmax_scale %.10f", got, want)
	}
	t.Logf("before/after: scale 1/sqrt(192) = %.8f vs %.10f (scores x%.4f)", 1/math.Sqrt(192), want, want*math.Sqrt(192))
}

// alibiSlope is the ALiBi paper's slope for head h of n heads, n a power of
// two: 2^(-8(h+1)/n).
func alibiSlope(h, n int) float64 { return math.Exp2(-8 * float64(h+1) / float64(n)) }

// TestPeerALiBiOffsets: the conventions table's ALiBi rows. FlashInfer adds
// slope·(kv_idx - qo_idx) with qo_idx the query's index in its segment,
// BLOOM (HF build_alibi_tensor) adds slope·kv_pos; attnc's `score -
// alibi_slope(head) * (q_pos - kv_pos)` gives the same o, and lse differs
// by slope·(kv_len - q_len) (FlashInfer) or slope·q_pos (BLOOM).
func TestPeerALiBiOffsets(t *testing.T) {
	t.Parallel()
	peerSuites(t, `variant alibi_peer { heads qo = 8, kv = 8
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 16)
	  score score - alibi_slope(head) * (q_pos - kv_pos) }`, func(t *testing.T, s *Suite) {
		v := s.V
		c := reference.NewCase(v, rand.New(rand.NewSource(28)), reference.CaseSpec{QLens: []int{5, 2}, KVLens: []int{40, 19}})
		gotO, gotL := runOn(t, s, ir.RolePrefill, c, 1)
		// peerWith attends with the peer's additive bias on the scaled scores.
		peerWith := func(bias func(b, i, kv, h int) float64) (o, lse []float64) {
			H, dv := v.QOHeads, v.HeadDimV
			o, lse = make([]float64, len(gotO)), make([]float64, len(gotL))
			pq, pk := plainQ(v, c), plainK(v, c)
			row := 0
			for b := range c.Batch {
				for i := range c.QLens[b] {
					for h := range H {
						var logits []float64
						m := math.Inf(-1)
						for kv := 0; kv <= qPosOf(c, b, i); kv++ {
							q, k := pq(row+i, h), pk(b, kv, h)
							dot := 0.0
							for d := range q {
								dot += q[d] * k[d]
							}
							logits = append(logits, dot*v.Scale+bias(b, i, kv, h))
							m = math.Max(m, logits[kv])
						}
						den := 0.0
						at := (row+i)*H + h
						for kv, x := range logits {
							w := math.Exp(x - m)
							den += w
							page, slot := c.Pages[b][kv/v.PageSize], kv%v.PageSize
							for d := range dv {
								o[at*dv+d] += w * float64(c.VPages[reference.PageIndex(v, page, h, slot, d, dv)])
							}
						}
						for d := range dv {
							o[at*dv+d] /= den
						}
						lse[at] = m + math.Log(den)
					}
				}
				row += c.QLens[b]
			}
			return o, lse
		}
		H := v.QOHeads
		fiO, fiL := peerWith(func(b, i, kv, h int) float64 { return alibiSlope(h, H) * float64(kv-i) }) // FlashInfer: kv_idx - qo_idx
		hfO, hfL := peerWith(func(b, i, kv, h int) float64 { return alibiSlope(h, H) * float64(kv) })   // BLOOM: key position only
		shifted := func(off func(b, i, h int) float64) []float64 {
			out := make([]float64, len(gotL))
			row := 0
			for b := range c.Batch {
				for i := range c.QLens[b] {
					for h := range H {
						out[(row+i)*H+h] = float64(gotL[(row+i)*H+h]) + off(b, i, h)
					}
				}
				row += c.QLens[b]
			}
			return out
		}
		f32s := func(xs []float64) []float32 {
			out := make([]float32, len(xs))
			for i, x := range xs {
				out[i] = float32(x)
			}
			return out
		}
		// o is the same; lse + slope·(kv_len - q_len) is FlashInfer's, lse + slope·q_pos is BLOOM's.
		expect(t, s, "ALiBi vs FlashInfer", gotO, f32s(shifted(func(b, i, h int) float64 {
			return alibiSlope(h, H) * float64(c.KVLens[b]-c.QLens[b])
		})), fiO, fiL)
		expect(t, s, "ALiBi vs BLOOM", gotO, f32s(shifted(func(b, i, h int) float64 {
			return alibiSlope(h, H) * float64(qPosOf(c, b, i))
		})), hfO, hfL)
	})
}

// TestPeerCustomMaskBytes: attnc's mask_indptr is a byte offset where each
// sequence's row-major q_len x kv_len bits start, little-endian within a
// byte — FlashInfer's layout after plan(custom_mask=...) packs each
// sequence with segment_packbits(bitorder="little") and its kernel reads
// custom_mask + mask_indptr[b] as bytes, bit q_idx·kv_len + kv_idx.
func TestPeerCustomMaskBytes(t *testing.T) {
	t.Parallel()
	peerSuites(t, `variant fi_custom { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 4)
	  mask custom }`, func(t *testing.T, s *Suite) {
		v := s.V
		c := reference.NewCase(v, rand.New(rand.NewSource(29)), reference.CaseSpec{QLens: []int{3, 5}, KVLens: []int{7, 13}})
		rng := rand.New(rand.NewSource(30))
		// Boolean masks per sequence, then packed the way segment_packbits does.
		bools := make([][]bool, c.Batch)
		c.CustomMask, c.MaskIndptr = nil, []int32{0}
		for b := range c.Batch {
			n := c.QLens[b] * c.KVLens[b]
			bools[b] = make([]bool, n)
			packed := make([]byte, (n+7)/8)
			for k := range n {
				bools[b][k] = rng.Intn(3) > 0
				if bools[b][k] {
					packed[k/8] |= 1 << (k % 8)
				}
			}
			c.CustomMask = append(c.CustomMask, packed...)
			c.MaskIndptr = append(c.MaskIndptr, int32(len(c.CustomMask)))
		}
		want, wantL := peerModel{q: plainQ(v, c), k: plainK(v, c), visible: func(b, i, kv int) bool {
			return bools[b][i*c.KVLens[b]+kv]
		}}.attend(v, c)
		gotO, gotL := runOn(t, s, ir.RolePrefill, c, 1)
		expect(t, s, "custom mask, byte offsets", gotO, gotL, want, wantL)
	})
}
