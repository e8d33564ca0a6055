package registry

import (
	"fmt"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
)

// TestReclaimableRange checks the reclaimable pages against the mask the
// kernels compile (lower.MaskDef, evaluated by the IR interpreter): every
// position of a reclaimable page is invisible to every query at from or
// later, and the pages just outside the range hold a position some such
// query sees (a sink, or one inside the window).
func TestReclaimableRange(t *testing.T) {
	window := func(w int) ir.MaskClause { return ir.MaskClause{Kind: ir.MaskWindow, Left: w} }
	expr := ir.Bin(ir.Ne, ir.Bin(ir.Rem, ir.R("kv_pos", ir.I32), ir.Int(3)), ir.Int(1))
	cases := []struct {
		name  string
		masks []ir.MaskClause
		sinks *ir.Sinks
		none  bool // nothing is ever reclaimable
		loose bool // another clause hides more than the window: the range may be conservative
	}{
		{"causal", []ir.MaskClause{{Kind: ir.MaskCausal}}, nil, true, false},
		{"learned sinks", []ir.MaskClause{{Kind: ir.MaskCausal}}, &ir.Sinks{Kind: ir.SinkLearned}, true, false},
		{"window", []ir.MaskClause{window(15)}, nil, false, false},
		{"window sinks", []ir.MaskClause{window(15)}, &ir.Sinks{Kind: ir.SinkTokens, Tokens: 4}, false, false},
		{"two windows", []ir.MaskClause{window(40), window(9)}, &ir.Sinks{Kind: ir.SinkTokens, Tokens: 17}, false, false},
		{"window and expr", []ir.MaskClause{{Kind: ir.MaskExpr, Expr: expr}, window(20)}, &ir.Sinks{Kind: ir.SinkTokens, Tokens: 3}, false, true},
		{"window, learned sinks", []ir.MaskClause{window(7)}, &ir.Sinks{Kind: ir.SinkLearned}, false, false},
	}
	for _, c := range cases {
		for _, ps := range []int{1, 4, 16} {
			v := reclaimVariant()
			v.Masks, v.Sinks, v.PageSize = c.masks, c.sinks, ps
			mask := lower.MaskDef(v).Body
			seen := func(q, kv int) bool {
				r, err := ir.EvalExpr(mask, map[string]any{"q_pos": int32(q), "kv_pos": int32(kv), "head": int32(0), "batch": int32(0)})
				if err != nil {
					t.Fatal(err)
				}
				return r.(bool)
			}
			// pageSeen: some query at from .. from+99 sees a position of page p.
			pageSeen := func(p, from int) bool {
				for kv := p * ps; kv < (p+1)*ps; kv++ {
					for q := max(from, kv); q < from+100; q++ {
						if seen(q, kv) {
							return true
						}
					}
				}
				return false
			}
			name := fmt.Sprintf("%s ps=%d", c.name, ps)
			for from := 0; from < 120; from += 7 {
				lo, hi, err := ReclaimableRange(v, from)
				if err != nil {
					t.Fatalf("%s from=%d: %v", name, from, err)
				}
				pages, _ := ReclaimablePages(v, from)
				if len(pages) != hi-lo || len(pages) > 0 && (pages[0] != lo || pages[len(pages)-1] != hi-1) {
					t.Errorf("%s from=%d: pages %v, range [%d, %d)", name, from, pages, lo, hi)
				}
				if c.none && hi > lo {
					t.Errorf("%s from=%d: pages [%d, %d) reclaimable without a window", name, from, lo, hi)
				}
				for p := lo; p < hi; p++ {
					if pageSeen(p, from) {
						t.Fatalf("%s from=%d: page %d of [%d, %d) is still seen", name, from, p, lo, hi)
					}
				}
				if !c.loose && hi > lo && (lo > 0 && !pageSeen(lo-1, from) || !pageSeen(hi, from)) {
					t.Errorf("%s from=%d: range [%d, %d) is not tight", name, from, lo, hi)
				}
			}
		}
	}
	if _, _, err := ReclaimableRange(reclaimVariant(), -1); err == nil {
		t.Error("a negative position must be rejected")
	}
}

// TestManifestReclaim checks the manifest's machine-readable reclaim rule.
func TestManifestReclaim(t *testing.T) {
	v := reclaimVariant()
	m, err := lower.Lower(v, lower.Tiling{KVTile: 64, Rows: 64, MaxHeads: 16})
	if err != nil {
		t.Fatal(err)
	}
	if r := VariantEntry(v, m).Reclaim; r != nil {
		t.Errorf("causal variant: reclaim rule %+v, want none", r)
	}
	v.Masks = []ir.MaskClause{{Kind: ir.MaskWindow, Left: 15}}
	v.Sinks = &ir.Sinks{Kind: ir.SinkTokens, Tokens: 4}
	m, _ = lower.Lower(v, lower.Tiling{KVTile: 64, Rows: 64, MaxHeads: 16})
	vm := VariantEntry(v, m)
	mf := Manifest{ABI: ABI, Variants: []VariantManifest{vm}}
	b, err := mf.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"reclaim": {
        "window_left": 15,
        "sink_tokens": 4
      }`) {
		t.Errorf("manifest lacks the reclaim rule:\n%s", b)
	}
}

func reclaimVariant() *ir.Variant {
	return &ir.Variant{Name: "r", QOHeads: 32, KVHeads: 8, HeadDimQK: 128, HeadDimV: 128, DType: ir.DTF16,
		PageSize: 16, Scale: 0.088, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}},
		Kernels: []ir.KernelRef{{Role: ir.RolePrefill}, {Role: ir.RoleDecode}, {Role: ir.RoleMergeState}}}
}
