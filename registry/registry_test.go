package registry_test

import (
	"fmt"
	"testing"

	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/registry"
)

func variant() *ir.Variant {
	return &ir.Variant{Name: "r", QOHeads: 32, KVHeads: 8, HeadDimQK: 128, HeadDimV: 128, DType: ir.DTF16, KVDType: ir.DTF16,
		PageSize: 16, Scale: 0.088, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}},
		Kernels: []ir.KernelRef{{Role: ir.RolePrefill}, {Role: ir.RoleDecode}, {Role: ir.RoleMergeState}}}
}

func compile(t *testing.T, v *ir.Variant, target string) *driver.Compiled {
	t.Helper()
	c, err := driver.CompileFor(v, target, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSelect(t *testing.T) {
	c := compile(t, variant(), "cpu")
	cases := []struct {
		name   string
		shape  registry.Shape
		role   ir.Role
		splits int
		items  int
	}{
		// 1 sequence x 8 kv heads x ceil(100 / 64 query rows per item:
		// 256 rows for a group of 4, targets/cpu PrefillRows).
		{"prefill chunk", registry.Shape{QLens: []int{100}, KVLens: []int{100}, Threads: 8}, ir.RolePrefill, 1, 8 * 2},
		{"mixed", registry.Shape{QLens: []int{1, 7}, KVLens: []int{10, 9}, Threads: 8}, ir.RolePrefill, 1, 2 * 8},
		// The CPU splits by sequence: 1 sequence, 8 threads: 8 chunks of
		// its positions, each for its 8 kv heads.
		{"decode one sequence", registry.Shape{QLens: []int{1}, KVLens: []int{4096}, Threads: 8}, ir.RoleDecode, 8, 64},
		{"decode split", registry.Shape{QLens: []int{1}, KVLens: []int{4096}, Threads: 32}, ir.RoleDecode, 32, 256},
		// 2 sequences, 3 threads: 2 chunks each; 2 sequences, 2 threads:
		// no split.
		{"decode two sequences", registry.Shape{QLens: []int{1, 1}, KVLens: []int{4096, 100}, Threads: 3}, ir.RoleDecode, 2, 32},
		{"decode enough sequences", registry.Shape{QLens: []int{1, 1}, KVLens: []int{4096, 100}, Threads: 2}, ir.RoleDecode, 1, 16},
		// Never more chunks than the CPU's decode tiles (64 positions of
		// f16 at head dim 128): 150 positions = 3 tiles.
		{"decode split capped by tiles", registry.Shape{QLens: []int{1}, KVLens: []int{150}, Threads: 64}, ir.RoleDecode, 3, 24},
		{"decode one thread", registry.Shape{QLens: []int{1, 1}, KVLens: []int{5000, 3}, Threads: 1}, ir.RoleDecode, 1, 16},
	}
	for _, tc := range cases {
		s, err := c.Select(tc.shape)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if s.Role != tc.role || s.Splits != tc.splits || s.Merge != (tc.splits > 1) || s.Items != tc.items {
			t.Errorf("%s: got %+v, want role %s splits %d items %d", tc.name, s, tc.role, tc.splits, tc.items)
		}
	}
	if _, err := c.Select(registry.Shape{QLens: []int{5}, KVLens: []int{4}}); err == nil {
		t.Error("q_len > kv_len must be rejected")
	}
	// Under mask none (cross attention) any lengths are a call, kv_len 0 included.
	v := variant()
	v.Masks = []ir.MaskClause{{Kind: ir.MaskNone}}
	if s, err := compile(t, v, "cpu").Select(registry.Shape{QLens: []int{5, 1}, KVLens: []int{4, 0}, Threads: 2}); err != nil || s.Role != ir.RolePrefill {
		t.Errorf("mask none, q_len > kv_len: %+v, %v", s, err)
	}
}

// TestSplitRuleIsTheCompiledRule checks that Select's split count comes
// from the module's plan_splits Def, the expression the decode entry
// inlines: changing the Def changes Select.
func TestSplitRuleIsTheCompiledRule(t *testing.T) {
	c := compile(t, variant(), "cpu")
	c.Final.Def("plan_splits").Body = ir.Int(3)
	s, err := c.Select(registry.Shape{QLens: []int{1}, KVLens: []int{64}, Threads: 1})
	if err != nil || s.Splits != 3 {
		t.Fatalf("got %+v, %v; want the Def's 3 splits", s, err)
	}
}

// TestSelectCUDA evaluates the decode plan as the CUDA launcher does: 2 x
// SMs workers and no sequence lengths (max_tiles is the launcher's stand-in),
// with each launch's grid, block and shared memory; prefill never hands
// over (the launcher cannot tell the query lengths) and strides its items
// over 4 blocks per SM.
func TestSelectCUDA(t *testing.T) {
	c := compile(t, variant(), "cuda")
	s, err := c.Select(registry.Shape{QLens: []int{1}, KVLens: []int{4096}, SMs: 4})
	if err != nil {
		t.Fatal(err)
	}
	// 1 sequence x 8 kv heads = 8 items >= 2 x 4 SMs workers: no split.
	if s.Target != "cuda" || s.Role != ir.RoleDecode || s.Symbol != "r_decode_launch" || s.Splits != 1 || len(s.Launches) != 1 {
		t.Fatalf("got %+v", s)
	}
	l := s.Launches[0]
	if l.Grid != 8 || l.Block != 128 || l.Smem <= 0 || !l.Known {
		t.Errorf("decode launch %+v, want grid 8 of 128 threads with shared memory", l)
	}
	s, err = c.Select(registry.Shape{QLens: []int{1}, KVLens: []int{4096}, SMs: 132})
	if err != nil || s.Splits != 33 || len(s.Launches) != 2 || s.Launches[0].Grid != 8*33 || s.Launches[1].Grid != 32 {
		t.Errorf("got %+v, %v; want 33 chunks (264 workers / 8 items) then a merge of 32 rows", s, err)
	}
	s, err = c.Select(registry.Shape{QLens: []int{1, 1}, KVLens: []int{30, 40}, SMs: 4})
	if err != nil || s.Role != ir.RoleDecode {
		t.Fatalf("got %+v, %v", s, err)
	}
	s, err = c.Select(registry.Shape{QLens: []int{3}, KVLens: []int{30}, SMs: 4})
	if err != nil || s.Role != ir.RolePrefill || s.Launches[0].Known || s.Launches[0].Grid != 16 {
		t.Errorf("prefill: got %+v, %v; want a grid-stride launch of 4 x 4 blocks", s, err)
	}
}

func TestManifestDeterministic(t *testing.T) {
	v := variant()
	mk := func() []byte {
		out, err := driver.Build([]*ir.Variant{v}, driver.Options{Targets: []string{"cpu", "cuda"}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := out.Manifest.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if string(mk()) != string(mk()) {
		t.Fatal("manifest not deterministic")
	}
	args := registry.ArgsOf(compile(t, v, "cpu").Final.Plan(ir.RolePrefill).Params)
	if args[0].Name != "q" || args[0].DType != "f16" || args[0].Kind != "buffer" || args[1].Name != "qo_indptr" {
		t.Errorf("prefill args start %+v", args[:2])
	}
}

// TestSelectHeadTiles: a 128-head MLA-like group splits into 8 CPU work
// items of 16 heads per sequence, so one decode sequence already has 8
// items and 8 threads need no KV split: with one kv head the CPU does not
// split by sequence (its head tiles read the same rows).
func TestSelectHeadTiles(t *testing.T) {
	v := variant()
	v.QOHeads, v.KVHeads = 128, 1
	s, err := compile(t, v, "cpu").Select(registry.Shape{QLens: []int{1}, KVLens: []int{4096}, Threads: 8})
	if err != nil {
		t.Fatal(err)
	}
	if s.Items != 8 || s.Splits != 1 {
		t.Errorf("got %+v, want 8 items, no split", s)
	}
}

// TestSelectTooLarge: Select evaluates the plan's limits in int64 as the
// entries do; past 2^31-1 work items it says TOO_LARGE, on the CPU and on
// CUDA (decode: the launcher's grid), and a uniform batch is never listed.
func TestSelectTooLarge(t *testing.T) {
	v := variant()
	c := compile(t, v, "cpu")
	// 8 kv heads, one item per group of 4 heads; 256 rows (a group of 4
	// at head dim 128: targets/cpu PrefillRows) = 64 queries each.
	const per, qt = 8, 64
	for _, tc := range []struct {
		s        registry.Shape
		tooLarge bool
		items    int
	}{
		{registry.Shape{QLens: []int{1}, KVLens: []int{100}, Batch: 1000, Threads: 4}, false, 1000 * per},
		{registry.Shape{QLens: []int{1}, KVLens: []int{100}, Batch: 1<<31 - 1, Threads: 4}, true, 0},
		{registry.Shape{QLens: []int{64}, KVLens: []int{100}, Batch: 1 << 20, Threads: 4}, false, (1 << 20) * per * ((64 + qt - 1) / qt)},
		{registry.Shape{QLens: []int{1 << 30}, KVLens: []int{1 << 30}, Batch: 1 << 30, Threads: 4}, true, 0},
	} {
		sel, err := c.Select(tc.s)
		if err != nil {
			t.Fatal(err)
		}
		if sel.TooLarge != tc.tooLarge || (!tc.tooLarge && sel.Items != tc.items) {
			t.Errorf("%+v: got %+v, want too large %v, %d items", tc.s, sel, tc.tooLarge, tc.items)
		}
	}
	sel, err := compile(t, v, "cuda").Select(registry.Shape{QLens: []int{1}, KVLens: []int{100}, Batch: 1<<31 - 1})
	if err != nil || !sel.TooLarge {
		t.Errorf("cuda decode of 2^31-1 sequences: got %+v, %v; want TOO_LARGE", sel, err)
	}
}

// TestSelectRole: a shape with Role selects that entry, prefill_ragged,
// whatever the lengths (one-token sequences do not go to decode, which
// reads pages); a module without the entry is an error.
func TestSelectRole(t *testing.T) {
	v := variant()
	v.Kernels = append(v.Kernels, ir.KernelRef{Role: ir.RolePrefillRagged})
	c := compile(t, v, "cpu")
	for _, tc := range []struct {
		shape registry.Shape
		items int
	}{
		// 1 sequence x 8 kv heads x ceil(100 / 64 query rows per item).
		{registry.Shape{QLens: []int{100}, KVLens: []int{100}, Threads: 8, Role: ir.RolePrefillRagged}, 8 * 2},
		{registry.Shape{QLens: []int{1, 1}, KVLens: []int{7, 9}, Threads: 8, DecodeLayout: true, Role: ir.RolePrefillRagged}, 2 * 8},
	} {
		s, err := c.Select(tc.shape)
		if err != nil {
			t.Fatal(err)
		}
		if s.Role != ir.RolePrefillRagged || s.Symbol != "r_prefill_ragged" || s.Items != tc.items || s.Splits != 1 {
			t.Errorf("%+v: got %+v, want prefill_ragged with %d items", tc.shape, s, tc.items)
		}
	}
	if _, err := c.Select(registry.Shape{QLens: []int{5}, KVLens: []int{4}, Role: ir.RolePrefillRagged}); err == nil {
		t.Error("q_len > kv_len must be rejected")
	}
	if _, err := compile(t, variant(), "cpu").Select(registry.Shape{QLens: []int{5}, KVLens: []int{5}, Role: ir.RolePrefillRagged}); err == nil {
		t.Error("a module without prefill_ragged selected it")
	}
}

// TestConstraintsQKVAppend: a variant with rope at_append and qk_norm says
// so in its constraints (the cache holds rotated K; the weights' offset),
// and one without either has no such keys.
func TestConstraintsQKVAppend(t *testing.T) {
	v := variant()
	c := registry.Constraints(v)
	for _, k := range []string{"rope", "qk_norm_eps", "qk_norm_offset"} {
		if _, ok := c[k]; ok {
			t.Errorf("plain variant: constraint %s = %v, want none", k, c[k])
		}
	}
	v.Rope = &ir.Rope{Theta: 1e6, AtAppend: true}
	v.QKNorm = &ir.QKNorm{Eps: 1e-6, Offset: 1}
	c = registry.Constraints(v)
	if c["rope"] != "at_append" || c["qk_norm_eps"] != 1e-6 || c["qk_norm_offset"] != 1.0 {
		t.Errorf("constraints %v: want rope at_append, qk_norm_eps 1e-6, qk_norm_offset 1", c)
	}
	v.Rope.AtAppend = false
	if got := registry.Constraints(v)["rope"]; got != "inline" {
		t.Errorf("rope inline: constraint rope = %v, want inline (the attention entries take the positions)", got)
	}
}

// TestConstraintsSemantics: the constraints say what decides a variant's
// values as a spec writes it — mask clauses, sinks, score (integer
// literals read as floats), RoPE — however the spec spelled it, so that
// a caller can compare a compiled variant with what it was asked for.
func TestConstraintsSemantics(t *testing.T) {
	spec := func(lines string) map[string]any {
		t.Helper()
		vs, err := frontend.Parse("c.attn", []byte("variant c {\n  heads qo = 4, kv = 2\n  head_dim 16\n  dtype f32\n"+
			"  cache paged(page_size = 4)\n"+lines+"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return registry.Constraints(vs[0])
	}
	c := spec("")
	if got := fmt.Sprint(c["mask"]); got != "[causal]" {
		t.Errorf("default mask: %s, want [causal]", got)
	}
	for _, k := range []string{"sinks", "score", "rope", "rope_theta"} {
		if _, ok := c[k]; ok {
			t.Errorf("plain variant: constraint %s = %v, want none", k, c[k])
		}
	}
	c = spec("  mask custom, window(size = 8), expr(q_pos - kv_pos <= 3), none\n  sinks tokens(4)\n" +
		"  score softcap(score, 20)\n" +
		"  rope inline(theta = 500000, style = llama3, factor = 2, low_freq = 1, high_freq = 2, original_max = 64, rotary_dim = 8)\n")
	want := map[string]string{
		"mask":        "[custom window(left = 7) expr((q_pos - kv_pos) <= 3) none]",
		"sinks":       "tokens(4)",
		"score":       "@softcap.f32(score, 20.0:f32)",
		"rope":        "inline",
		"rope_style":  "llama3",
		"rope_theta":  "500000",
		"rope_params": "map[factor:2 high_freq:2 low_freq:1 original_max:64]",
		"rope_pairs":  "half",
		"rope_dim":    "8",
	}
	for k, w := range want {
		if got := fmt.Sprint(c[k]); got != w {
			t.Errorf("constraint %s = %s, want %s", k, got, w)
		}
	}
	if got := spec("  score softcap(score, 20.0)\n")["score"]; got != want["score"] {
		t.Errorf("softcap(score, 20.0): score %v, want %s as for softcap(score, 20)", got, want["score"])
	}
	if got := spec("  sinks learned\n  mask none\n"); fmt.Sprintf("%v %v", got["sinks"], got["mask"]) != "learned [none]" {
		t.Errorf("sinks learned, mask none: sinks %v, mask %v", got["sinks"], got["mask"])
	}
}

// TestRulesReadAsConstraints: the manifest's rules["def score"] writes
// the score as the score constraint does (integer literals that convert
// to a float read as float literals), so that the two agree however the
// spec spelled its numbers.
func TestRulesReadAsConstraints(t *testing.T) {
	want := "(@softcap.f32(score, 20.0:f32) - f32(((q_pos - kv_pos) * 2)))"
	for _, score := range []string{"softcap(score, 20) - (q_pos - kv_pos) * 2", "softcap(score, 20.0) - (q_pos - kv_pos) * 2"} {
		vs, err := frontend.Parse("c.attn", []byte("variant c {\n  heads qo = 4, kv = 2\n  head_dim 16\n  dtype f32\n"+
			"  cache paged(page_size = 4)\n  score "+score+"\n  kernels decode\n}\n"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := lower.Lower(vs[0], lower.Tiling{KVTile: 64, Rows: 64, MaxHeads: 16})
		if err != nil {
			t.Fatal(err)
		}
		vm := registry.VariantEntry(vs[0], m)
		if got := vm.Rules["def score"]; got != want {
			t.Errorf("score %s: rules[def score] = %s, want %s", score, got, want)
		}
		if got := vm.Constraints["score"]; got != want {
			t.Errorf("score %s: constraint score = %v, want %s", score, got, want)
		}
	}
}
