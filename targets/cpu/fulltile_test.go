package cpu

import (
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
)

// TestFullTilesKeepsResults runs the CPU pass table with and without
// full-tiles on decode over f32, f16, bf16 and 8-bit caches and
// interprets every level's decode kernel on the same paged inputs (3
// sequences of 0, 5 and 37 positions: whole tiles, a partial last tile,
// a hidden page): o and lse are bit for bit the same. The whole-tile
// version must be there (an If on kv_n) and the prefill kernels untouched.
func TestFullTilesKeepsResults(t *testing.T) {
	without := []passes.Pass{}
	for _, p := range Table {
		if p.Name != "full-tiles" {
			without = append(without, p)
		}
	}
	if len(without) != len(Table)-1 {
		t.Fatal("the CPU table has no full-tiles pass")
	}
	for _, c := range []struct {
		dt, kv ir.DType
		scale  ir.KVScale
	}{
		{ir.DTF32, ir.DTF32, ir.KVScaleNone}, {ir.DTF16, ir.DTF16, ir.KVScaleNone}, {ir.DTBF16, ir.DTE5M2, ir.KVScalePerHead},
		{ir.DTF16, ir.DTI8, ir.KVScalePerTensor},
	} {
		v := &ir.Variant{Name: "t", QOHeads: 8, KVHeads: 2, HeadDimQK: 16, HeadDimV: 16, DType: c.dt, KVDType: c.kv, KVScale: c.scale,
			PageSize: 4, Scale: 0.25, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: []ir.KernelRef{{Role: ir.RolePrefill}, {Role: ir.RoleDecode}}}
		name := c.dt.String() + "/" + c.kv.String()
		var outs [2]map[string]map[string]any
		for i, table := range [][]passes.Pass{without, Table} {
			m, err := lower.Lower(v, Target{}.Tiling(v))
			if err != nil {
				t.Fatal(err)
			}
			if m, err = passes.RunTable(table, m, passes.Options{VerifyEach: true}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for _, k := range m.Kernels {
				versioned := strings.Contains(ir.StmtString(k.Body), "if (kv_n == ")
				if want := i == 1 && k.Role == ir.RoleDecode && k.Level != ""; versioned != want {
					t.Fatalf("%s full-tiles=%v %s: whole tiles versioned: %v, want %v", name, i == 1, k.Name, versioned, want)
				}
			}
			outs[i] = map[string]map[string]any{}
			runLevelDecodes(t, name, m, v, nil, outs[i])
		}
		sameDecodeOutputs(t, name, outs, 3, "without full-tiles", "with")
	}
}
