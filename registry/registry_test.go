package registry

import (
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
)

func variant() *ir.Variant {
	return &ir.Variant{Name: "r", QOHeads: 32, KVHeads: 8, HeadDimQK: 128, HeadDimV: 128, DType: ir.DTF16,
		PageSize: 16, Scale: 0.088, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}},
		Kernels: []ir.KernelRef{{Role: ir.RolePrefill}, {Role: ir.RoleDecode}, {Role: ir.RoleMergeState}}}
}

func TestSelect(t *testing.T) {
	v := variant()
	m, err := lower.Lower(v)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		shape  Shape
		role   ir.Role
		splits int
	}{
		{"prefill chunk", Shape{QLens: []int{100}, KVLens: []int{100}, Threads: 8}, ir.RolePrefill, 1},
		{"mixed", Shape{QLens: []int{1, 7}, KVLens: []int{10, 9}, Threads: 8}, ir.RolePrefill, 1},
		// 1 sequence x 8 kv heads = 8 items >= 8 threads: no split.
		{"decode enough items", Shape{QLens: []int{1}, KVLens: []int{4096}, Threads: 8}, ir.RoleDecode, 1},
		// 8 items, 32 threads: 4 chunks each.
		{"decode split", Shape{QLens: []int{1}, KVLens: []int{4096}, Threads: 32}, ir.RoleDecode, 4},
		// Never more chunks than 64-position tiles: 100 positions = 2 tiles.
		{"decode split capped by tiles", Shape{QLens: []int{1}, KVLens: []int{100}, Threads: 64}, ir.RoleDecode, 2},
		{"decode one thread", Shape{QLens: []int{1, 1}, KVLens: []int{5000, 3}, Threads: 1}, ir.RoleDecode, 1},
	}
	for _, c := range cases {
		s, err := Select(v, m, c.shape)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.Role != c.role || s.Splits != c.splits || s.Merge != (c.splits > 1) {
			t.Errorf("%s: got %+v, want role %s splits %d", c.name, s, c.role, c.splits)
		}
	}
	if _, err := Select(v, m, Shape{QLens: []int{5}, KVLens: []int{4}}); err == nil {
		t.Error("q_len > kv_len must be rejected")
	}
	// Under mask none (cross attention) any lengths are a call, kv_len 0 included.
	v.Masks = []ir.MaskClause{{Kind: ir.MaskNone}}
	if s, err := Select(v, m, Shape{QLens: []int{5, 1}, KVLens: []int{4, 0}, Threads: 2}); err != nil || s.Role != ir.RolePrefill {
		t.Errorf("mask none, q_len > kv_len: %+v, %v", s, err)
	}
}

// TestSplitRuleIsTheCompiledRule checks that Select's split count comes
// from the module's plan_splits Def, the expression the decode entry
// inlines: changing the Def changes Select.
func TestSplitRuleIsTheCompiledRule(t *testing.T) {
	v := variant()
	m, _ := lower.Lower(v)
	m.Def("plan_splits").Body = ir.Int(3)
	s, err := Select(v, m, Shape{QLens: []int{1}, KVLens: []int{64}, Threads: 1})
	if err != nil || s.Splits != 3 {
		t.Fatalf("got %+v, %v; want the Def's 3 splits", s, err)
	}
}

func TestManifestDeterministic(t *testing.T) {
	v := variant()
	m, _ := lower.Lower(v)
	mk := func() []byte {
		man := &Manifest{ABI: ABI, LSEBase: "e", Variants: []VariantManifest{VariantEntry(v, m)}}
		for _, k := range m.Kernels {
			man.Kernels = append(man.Kernels, KernelManifest{Variant: v.Name, Role: string(k.Role), Symbol: k.Name, Entry: k.Entry, Target: "cpu", Args: Args(k), Constraints: Constraints(v)})
		}
		b, err := man.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if string(mk()) != string(mk()) {
		t.Fatal("manifest not deterministic")
	}
	args := Args(m.Kernel("r_prefill"))
	if args[0].Name != "q" || args[0].DType != "f16" || args[0].Kind != "buffer" || args[1].Name != "qo_indptr" {
		t.Errorf("prefill args start %+v", args[:2])
	}
}

// TestSelectHeadTiles: a 128-head MLA-like group splits into 8 CPU work
// items of 16 heads per sequence, so one decode sequence already has 8
// items and 8 threads need no KV split.
func TestSelectHeadTiles(t *testing.T) {
	v := variant()
	v.QOHeads, v.KVHeads = 128, 1
	m, err := lower.Lower(v)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Select(v, m, Shape{QLens: []int{1}, KVLens: []int{4096}, Threads: 8})
	if err != nil {
		t.Fatal(err)
	}
	if s.Items != 8 || s.Splits != 1 {
		t.Errorf("got %+v, want 8 items, no split", s)
	}
	if lower.HeadTile(128) != 16 || lower.HeadTile(24) != 12 || lower.HeadTile(8) != 8 || lower.HeadTile(7) != 7 || lower.HeadTile(17) != 1 {
		t.Error("HeadTile")
	}
}

// TestSelectTooLarge: Select counts work items in int64 as the entries do;
// past 2^31-1 it says TOO_LARGE, and a uniform batch is never listed.
func TestSelectTooLarge(t *testing.T) {
	v := variant()
	m, err := lower.Lower(v)
	if err != nil {
		t.Fatal(err)
	}
	per := int64(itemsPerSeq(v))
	qt := int64(queryTile(v))
	for _, tc := range []struct {
		s        Shape
		tooLarge bool
		items    int
	}{
		{Shape{QLens: []int{1}, KVLens: []int{100}, Batch: 1000, Threads: 4}, false, int(1000 * per)},
		{Shape{QLens: []int{1}, KVLens: []int{100}, Batch: 1<<31 - 1, Threads: 4}, per > 1, 0},
		{Shape{QLens: []int{64}, KVLens: []int{100}, Batch: 1 << 20, Threads: 4}, false, int((1 << 20) * per * ((64 + qt - 1) / qt))},
		{Shape{QLens: []int{1 << 30}, KVLens: []int{1 << 30}, Batch: 1 << 30, Threads: 4}, true, 0},
	} {
		sel, err := Select(v, m, tc.s)
		if err != nil {
			t.Fatal(err)
		}
		if sel.TooLarge != tc.tooLarge || (!tc.tooLarge && sel.Items != tc.items) {
			t.Errorf("%+v: got %+v, want too large %v, %d items", tc.s, sel, tc.tooLarge, tc.items)
		}
	}
}
