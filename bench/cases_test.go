package bench

import (
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// The closed forms agree with the reference's own visibility, position by
// position.
func TestVisibleRows(t *testing.T) {
	for _, m := range []string{"causal", "none", "window(left = 5)", "causal\n sinks tokens(3)", "window(left = 4)\n sinks tokens(2)",
		"none\n sinks tokens(4)", "window(left = 0)", "causal, window(left = 7)", "expr(kv_pos % 3 != 1)"} {
		v := variant(t, strings.Replace(small, "mask causal", "mask "+m, 1))
		for kvLen := 1; kvLen < 40; kvLen += 3 {
			for q := 0; q < kvLen; q++ {
				var want int64
				for kv := range kvLen {
					if reference.Visible(v, 0, 0, q, kv) {
						want++
					}
				}
				if got, exact := visibleRows(v, q, kvLen); got != want || !exact {
					t.Fatalf("mask %s: q %d of kv_len %d: %d rows (exact %t), reference %d", m, q, kvLen, got, exact, want)
				}
			}
		}
	}
	v := variant(t, small)
	for _, l := range []int{1, 2, 17, 2048} {
		if got, _ := visiblePairs(v, l, l); got != int64(l)*int64(l+1)/2 {
			t.Errorf("causal pairs of %d: %d, want L(L+1)/2", l, got)
		}
	}
	if got, exact := visiblePairs(variant(t, strings.Replace(small, "mask causal", "mask tree", 1)), 4, 10); exact || got != 7+8+9+10 {
		t.Errorf("tree: %d pairs (exact %t), want the causal bound", got, exact)
	}
}

func TestBuiltinPlan(t *testing.T) {
	p := BuiltinPlan(DefaultHeads, DefaultBuiltins())
	var names []string
	for _, c := range p.Cases {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, ","); got != "decode f32,decode f16,decode bf16,decode f16/e4m3,decode f16/i8,prefill f32,prefill bf16" {
		t.Errorf("cases %s", got)
	}
	if len(p.Variants) != 5 {
		t.Fatalf("%d variants, want one per storage", len(p.Variants))
	}
	for i, pv := range p.Variants {
		if pv.Err != nil {
			t.Fatalf("variant %d: %v", i, pv.Err)
		}
		v := pv.Variant
		if v.QOHeads != 32 || v.KVHeads != 8 || v.HeadDimQK != 128 || v.HeadDimV != 128 || v.PageSize != 16 ||
			len(v.Masks) != 1 || v.Masks[0].Kind != ir.MaskCausal || !v.HasRole(ir.RoleDecode) {
			t.Errorf("variant %s: %+v", v.Name, v)
		}
	}
	for _, c := range p.Cases {
		v := p.Variants[c.Variant].Variant
		if !v.HasRole(c.Role) || !strings.Contains(c.Name, v.DType.String()) {
			t.Errorf("case %s on %s", c.Name, v.Name)
		}
	}
	if p.Variants[1].Variant.HasRole(ir.RolePrefill) {
		t.Errorf("f16 builds a prefill nobody measures")
	}

	for i, want := range []string{"", "", "", "e4m3", "i8"} {
		if got := p.Variants[i].Variant; (want == "" && got.Quantized()) || (want != "" && got.KVDType.String() != want) {
			t.Errorf("variant %s: kv_dtype %s, want %q", got.Name, got.KVDType, want)
		}
	}

	// An 8-bit cache is the spec's kv_dtype; a name the spec language
	// does not know is planned with the spec's error.
	b, err := ParseStorage(ir.RoleDecode, "f16/e4m3")
	if err != nil || b.KVDType != "e4m3" || b.Name() != "decode f16/e4m3" {
		t.Fatalf("ParseStorage: %+v %v", b, err)
	}
	tiny := Heads{QOHeads: 4, KVHeads: 2, HeadDim: 32, PageSize: 4}
	if spec := BuiltinSpec("x", tiny, []Builtin{b}); !strings.Contains(spec, "kv_dtype = e4m3") {
		t.Errorf("spec without kv_dtype:\n%s", spec)
	}
	if p = BuiltinPlan(tiny, []Builtin{b}); len(p.Variants) != 1 || p.Variants[0].Err != nil || p.Variants[0].Variant.KVDType != ir.DTE4M3 {
		t.Errorf("plan %+v", p)
	}
	fp4, err := ParseStorage(ir.RoleDecode, "f16/fp4")
	if err != nil {
		t.Fatal(err)
	}
	if p = BuiltinPlan(tiny, []Builtin{fp4}); len(p.Variants) != 1 || p.Variants[0].Err == nil || !strings.Contains(p.Variants[0].Err.Error(), `unknown kv_dtype "fp4"`) {
		t.Errorf("plan %+v", p)
	}
	for _, bad := range []string{"f64", "", "f16/", "int8"} {
		if _, err := ParseStorage(ir.RoleDecode, bad); err == nil {
			t.Errorf("ParseStorage(%q): no error", bad)
		}
	}

	vs := []*ir.Variant{variant(t, small), variant(t, strings.Replace(small, "mask causal }", "mask causal\n kernels decode }", 1))}
	vs[1].Name = "dec"
	p = SpecPlan(vs)
	names = nil
	for _, c := range p.Cases {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, ","); got != "small decode,dec decode,small prefill" {
		t.Errorf("spec cases %s", got)
	}
}
