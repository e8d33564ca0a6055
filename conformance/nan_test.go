package conformance

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// The NaN matrix (DESIGN §3, "Non-finite data at visible positions"): a
// NaN or +inf score at a visible position — from q, a K row, a NaN k_scale
// or the score expression — makes that row's o and lse NaN; a -inf score
// hides its position like the mask, its V row included; NaN in the V row
// of a visible position reaches o; a masked position's NaN never does. Every
// path runs it: prefill, decode, split-KV decode with its merge, and
// merge_state, at every CPU level of this machine and on the emulated CUDA
// target. Each output is checked element by element: NaN exactly where the
// float64 reference has NaN, the reference's values elsewhere.

// nanSpecs are the variants of the NaN matrix: f32 and f16 over a float
// cache (GQA, causal), an fp8 cache with per-head scales and empty rows, and two score
// expressions, one giving NaN at kv_pos 5 (sqrt(-1)) and one giving -inf
// there (log(0)) under a softcap.
var nanSpecs = []string{
	`variant nan_f32_gqa { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 16)
	  mask causal }`,
	`variant nan_f16_gqa { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 8, layout = NHD)
	  mask causal }`,
	// Rows at q_pos < 3 see nothing: they stay o = 0, lse = -inf under a
	// NaN v_scale.
	`variant nan_e4m3 { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 8, layout = NHD, kv_dtype = e4m3, kv_scale = per_head)
	  mask expr(kv_pos <= q_pos && q_pos >= 3) }`,
	`variant nan_score_nan { heads qo = 2, kv = 1
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 4)
	  mask causal
	  score score + sqrt(abs(kv_pos - 5) - 1) }`,
	`variant nan_score_ninf { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 8)
	  mask causal
	  score softcap(score, 30.0) + log(abs(kv_pos - 5)) }`,
}

// nanScoreMasked is nan_score_ninf with kv_pos 5 masked instead: where the
// score is -inf the position is hidden, so both must give the same rows.
const nanScoreMasked = `variant nan_score_ninf { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 8)
	  mask expr(kv_pos <= q_pos && kv_pos != 5)
	  score softcap(score, 30.0) + log(abs(kv_pos - 5)) }`

// nanEdit puts non-finite values into case c of variant v: at position
// pos of sequence b (its kv head 1, or 0 with one kv head) or at query row
// row (qo head 1). It reports false when it does not apply to v.
type nanEdit struct {
	name string
	edit func(v *ir.Variant, c *reference.Case, b, pos, row int) bool
	// masked, when set, is the variant the rule makes the edited case
	// equal to (the reference of the edited case in it is the want).
	masked string
	// wantNaN says whether some output must be NaN.
	wantNaN bool
}

// kvHead is the kv head the edits touch.
func kvHead(v *ir.Variant) int { return min(1, v.KVHeads-1) }

// kvAt is the index of element d of position pos's K (dim dqk) or V row of
// sequence b at kv head kh.
func kvAt(v *ir.Variant, c *reference.Case, b, pos, kh, d, dim int) int {
	return reference.PageIndex(v, c.Pages[b][pos/v.PageSize], kh, pos%v.PageSize, d, dim)
}

var nanEdits = []nanEdit{
	{name: "NaN in one q row", wantNaN: true, edit: func(v *ir.Variant, c *reference.Case, b, pos, row int) bool {
		c.Q[(row*v.QOHeads+1)*v.HeadDimQK+3] = float32(math.NaN())
		return true
	}},
	// Rows before pos see it masked: they keep their values.
	{name: "NaN in a K row later rows see", wantNaN: true, edit: func(v *ir.Variant, c *reference.Case, b, pos, row int) bool {
		c.KPages[kvAt(v, c, b, pos, kvHead(v), 5, v.HeadDimQK)] = float32(math.NaN())
		return true
	}},
	// +inf times the last row's positive q element is a +inf score there
	// (NaN o and lse, or the softcap's finite cap); the other rows get +inf
	// or -inf (hidden) by their q element's sign.
	{name: "+inf in a K row", wantNaN: true, edit: func(v *ir.Variant, c *reference.Case, b, pos, row int) bool {
		if v.Quantized() { // fp8 E4M3 has no inf
			return false
		}
		c.KPages[kvAt(v, c, b, pos, kvHead(v), 9, v.HeadDimQK)] = float32(math.Inf(1))
		for h := kvHead(v) * v.GroupSize(); h < (kvHead(v)+1)*v.GroupSize(); h++ {
			q := &c.Q[(row*v.QOHeads+h)*v.HeadDimQK+9]
			*q = float32(math.Abs(float64(*q))) + 0.25
		}
		return true
	}},
	{name: "NaN k_scale", wantNaN: true, edit: func(v *ir.Variant, c *reference.Case, b, pos, row int) bool {
		if !v.Quantized() {
			return false
		}
		c.KScale[kvHead(v)] = float32(math.NaN())
		return true
	}},
	// v_scale multiplies o: NaN in every row of the kv head that sees a
	// position, lse unchanged.
	{name: "NaN v_scale", wantNaN: true, edit: func(v *ir.Variant, c *reference.Case, b, pos, row int) bool {
		if !v.Quantized() || v.MLA != nil {
			return false
		}
		c.VScale[kvHead(v)] = float32(math.NaN())
		return true
	}},
	{name: nanVEdit, wantNaN: true, edit: func(v *ir.Variant, c *reference.Case, b, pos, row int) bool {
		c.VPages[kvAt(v, c, b, pos, kvHead(v), 7, v.HeadDimV)] = float32(math.NaN())
		if !v.Quantized() {
			c.VPages[kvAt(v, c, b, pos, kvHead(v), 8, v.HeadDimV)] = float32(math.Inf(-1))
		}
		return true
	}},
	// +inf in K times a negative q element is a -inf score from the data:
	// it hides its position like the mask, its NaN and inf V row included,
	// in a tile every row sees (nanHiddenVEdit places it). The last row's
	// q element is positive: +inf there, NaN o and lse.
	{name: nanHiddenVEdit, wantNaN: true, edit: func(v *ir.Variant, c *reference.Case, b, pos, row int) bool {
		if v.Quantized() || v.Score != nil { // E4M3 has no inf; a softcap bounds -inf
			return false
		}
		kh := kvHead(v)
		c.KPages[kvAt(v, c, b, pos, kh, 9, v.HeadDimQK)] = float32(math.Inf(1))
		for r := range c.TotalQ() {
			for h := kh * v.GroupSize(); h < (kh+1)*v.GroupSize(); h++ {
				c.Q[(r*v.QOHeads+h)*v.HeadDimQK+9] = -0.5 // exact in every dtype
				if r == row {
					c.Q[(r*v.QOHeads+h)*v.HeadDimQK+9] = 0.5
				}
			}
		}
		c.VPages[kvAt(v, c, b, pos, kh, 7, v.HeadDimV)] = float32(math.NaN())
		c.VPages[kvAt(v, c, b, pos, kh, 8, v.HeadDimV)] = float32(math.Inf(1))
		return true
	}},
	// The score expression makes kv_pos 5's score NaN or -inf by itself.
	{name: "score expression", wantNaN: true, edit: func(v *ir.Variant, c *reference.Case, b, pos, row int) bool {
		return v.Name == "nan_score_nan"
	}},
	// -inf hides kv_pos 5, its V row included.
	{name: "-inf score hides NaN V", masked: nanScoreMasked, edit: func(v *ir.Variant, c *reference.Case, b, pos, row int) bool {
		if v.Name != "nan_score_ninf" {
			return false
		}
		for sb := range c.Batch {
			if c.KVLens[sb] > 5 {
				for kh := range v.KVHeads {
					c.VPages[kvAt(v, c, sb, 5, kh, 7, v.HeadDimV)] = float32(math.NaN())
					c.VPages[kvAt(v, c, sb, 5, kh, 8, v.HeadDimV)] = float32(math.Inf(1))
				}
			}
		}
		return true
	}},
}

const (
	nanVEdit       = "NaN and inf in a V row later rows see"
	nanHiddenVEdit = "+inf K and negative q hide NaN and inf V"
)

// nanShape is one call shape of the NaN matrix: an entry, its sequences,
// the thread count (decode of one sequence at 8 threads splits its KV).
type nanShape struct {
	name    string
	role    ir.Role
	spec    reference.CaseSpec
	threads int
}

var nanShapes = []nanShape{
	{name: "prefill", role: ir.RolePrefill, threads: 3,
		spec: reference.CaseSpec{QLens: []int{3, 5, 20}, KVLens: []int{3, 40, 90}, ExtraPages: 1, NaNFill: true}},
	{name: "decode", role: ir.RoleDecode, threads: 1,
		spec: reference.CaseSpec{QLens: []int{1, 1, 1}, KVLens: []int{4, 33, 150}, ExtraPages: 1, NaNFill: true}},
	{name: "split decode", role: ir.RoleDecode, threads: 8,
		spec: reference.CaseSpec{QLens: []int{1}, KVLens: []int{200}, NaNFill: true}},
}

// runNaNMatrix runs every edit of the matrix at every shape on suite s.
func runNaNMatrix(t *testing.T, s *Suite, label string) {
	t.Helper()
	for si, sh := range nanShapes {
		if _, ok := s.Entries[sh.role]; !ok {
			continue
		}
		for ei, ed := range nanEdits {
			c := reference.NewCase(s.V, rand.New(rand.NewSource(int64(100*si+ei))), sh.spec)
			b := c.Batch - 1
			row := c.TotalQ() - 1
			// A position inside the last query chunk (prefill: the rows
			// before it see it masked), or two thirds into the cache.
			pos := c.KVLens[b] - c.QLens[b] + c.QLens[b]/2
			if sh.role == ir.RoleDecode {
				pos = c.KVLens[b] * 2 / 3
			} else if ed.name == nanHiddenVEdit {
				// In the first KV tile, which every row of the sequence
				// sees: no mask hides anything there.
				pos = (c.KVLens[b] - c.QLens[b]) / 4
			}
			if !ed.edit(s.V, c, b, pos, row) {
				continue
			}
			ref := s.V
			if ed.masked != "" {
				ref = spec(t, ed.masked)
			}
			wantO, wantL, mag := reference.AttentionMag(ref, c)
			name := fmt.Sprintf("%s %s, %s", label, sh.name, ed.name)
			// Every shape but the one-sequence split has rows that stay finite.
			// A softcap keeps +inf finite: with a score expression, +inf
			// in K may give NaN or not.
			sure := ed.name != "+inf in a K row" || s.V.Score == nil
			if n := countNaN(wantO) + countNaN(wantL); sure && (n > 0) != ed.wantNaN || n == len(wantO)+len(wantL) && c.Batch > 1 {
				t.Fatalf("%s: the reference has %d NaN of %d outputs: the case does not test the rule", name, n, len(wantO)+len(wantL))
			}
			cb := s.buffers(c)
			if err := s.SetThreads(sh.threads); err != nil {
				t.Fatal(err)
			}
			st, err := s.run(sh.role, cb)
			if err != nil || st != 0 {
				t.Errorf("%s: status %d, %v", name, st, err)
				cb.free()
				continue
			}
			checkNaNRule(t, name+": o", s.dec(cb.o), wantO, func(g []float32, w []float64, keep []int) (float64, int, bool) {
				m := make([]float64, len(keep))
				for i, k := range keep {
					m[i] = mag[k]
				}
				return CompareOut(s.V.DType, g, w, m)
			})
			checkNaNRule(t, name+": lse", cb.lse.F32(), wantL, func(g []float32, w []float64, _ []int) (float64, int, bool) {
				return reference.Compare(g, w, Tolerance)
			})
			cb.free()
		}
	}
	if _, ok := s.Entries[ir.RoleMergeState]; ok {
		// merge_state alone: NaN, +inf and -inf partial states (RunMergeState).
		if r := s.RunMergeState(7, 5, 3); !r.Pass {
			t.Errorf("%s merge_state: %s", label, r)
		}
	}
}

func countNaN(xs []float64) int {
	n := 0
	for _, x := range xs {
		if math.IsNaN(x) {
			n++
		}
	}
	return n
}

// checkNaNRule checks got against want: NaN exactly where want is NaN,
// and compare (given the kept elements and their indices) on the others.
func checkNaNRule(t *testing.T, name string, got []float32, want []float64, compare func([]float32, []float64, []int) (float64, int, bool)) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d outputs, want %d", name, len(got), len(want))
		return
	}
	var g []float32
	var w []float64
	var keep []int
	bad := 0
	for i := range want {
		gn, wn := math.IsNaN(float64(got[i])), math.IsNaN(want[i])
		if gn != wn {
			if bad < 3 {
				t.Errorf("%s[%d] = %v, want %v", name, i, got[i], want[i])
			}
			bad++
			continue
		}
		if !wn {
			g, w, keep = append(g, got[i]), append(w, want[i]), append(keep, i)
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements break the NaN rule", name, bad, len(want))
	}
	if e, i, ok := compare(g, w, keep); !ok && i >= 0 && i < len(keep) {
		t.Errorf("%s[%d] = %v, want %v (err %g)", name, keep[i], g[i], w[i], e)
	}
}

// nanShort are the variants of nanSpecs that TestNaNMatrix runs by
// default (-levels.all, CI's long pass, runs every one, at every level):
// f32 and f16 GQA and a score expression that gives NaN; nan_e4m3 (NaN
// codes and scales) and nan_score_ninf run in the long pass, nan_e4m3 by
// default under qemu with -aarch64.all only, its NaN codes' widening on
// the CPU in reference's and TestAppendQuantizerEdges' checks.
var nanShort = []string{"nan_f32_gqa", "nan_f16_gqa", "nan_score_nan"}

func TestNaNMatrix(t *testing.T) {
	t.Parallel()
	needTools(t)
	for _, src := range nanSpecs {
		v := spec(t, src)
		if !*levelsAll && !slices.Contains(nanShort, v.Name) {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			// The default run takes the widest level this CPU runs;
			// -levels.all (CI's long pass) every level.
			build := buildHostLevel
			if *levelsAll {
				build = Build
			}
			s, err := build(v, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Lib.Close()
			runNaNMatrix(t, s, "level "+s.Level)
			if !*levelsAll {
				return
			}
			// The lower levels of the same library ($ATTNC_CPU_LEVEL).
			for _, level := range clonedBelow(t, s) {
				ls, err := s.AtLevel(level)
				if err != nil {
					t.Fatal(err)
				}
				runNaNMatrix(t, ls, "level "+ls.Level)
				ls.Lib.Close()
			}
		})
	}
}

// nanCUDAShort are the variants of nanSpecs that TestCUDAEmulatedNaNMatrix
// runs by default (-cuda.all, CI's long pass, runs every one): a tensor-core
// f16 variant (a score expression that gives NaN runs on the CPU by
// default, on the emulator in the long pass).
var nanCUDAShort = []string{"nan_f16_gqa"}

func TestCUDAEmulatedNaNMatrix(t *testing.T) {
	t.Parallel()
	needEmu(t)
	for _, src := range nanSpecs {
		v := spec(t, src)
		if !*cudaAll && !slices.Contains(nanCUDAShort, v.Name) {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s, err := BuildCUDA(v, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Lib.Close()
			runNaNMatrix(t, s, "cuda")
		})
	}
}

// TestHIPEmulatedNaNMatrix runs the NaN matrix on the HIP target under the
// emulator at 64 lanes (MFMA's wavefronts): the f16 variant that takes the
// matrix cores by default, every variant with -cuda.all.
func TestHIPEmulatedNaNMatrix(t *testing.T) {
	t.Parallel()
	needEmu(t)
	for _, src := range nanSpecs {
		v := spec(t, src)
		if !*cudaAll && v.Name != "nan_f16_gqa" {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s, err := BuildFor(v, "hip", t.TempDir(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Lib.Close()
			runNaNMatrix(t, s, "hip")
		})
	}
}

// nanAArch64Short are the variants of nanSpecs that TestAArch64NaNMatrix
// runs under qemu by default: f16, whose fully visible tiles take the P·V
// without selects when no weight is -0. -aarch64.all (CI's
// emulated-targets pass) adds nan_f32_gqa (the same on f32) and nan_e4m3:
// its NaN codes through NEON's native half widening, and NaN k_scale and
// v_scale — 10.8 s of CPU under qemu on a loaded 2-core Zen 5
// (scripts/testcpu.py), against 15.7 s for the two float variants.
var nanAArch64Short = []string{"nan_f16_gqa"}

// nanAArch64All are the variants TestAArch64NaNMatrix runs with
// -aarch64.all.
var nanAArch64All = []string{"nan_f32_gqa", "nan_f16_gqa", "nan_e4m3"}

// TestAArch64NaNMatrix runs the NaN matrix on aarch64 (NEON) under qemu:
// nanAArch64Short, or nanAArch64All with -aarch64.all.
func TestAArch64NaNMatrix(t *testing.T) {
	t.Parallel()
	_, err := cpurt.ToolchainFor(aarch64)
	needtool.Check(t, err)
	names := nanAArch64Short
	if *aarch64All {
		names = nanAArch64All
	}
	for _, src := range nanSpecs {
		v := spec(t, src)
		if !slices.Contains(names, v.Name) {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s := buildAArch64(t, v)
			runNaNMatrix(t, s, "aarch64")
		})
	}
}
