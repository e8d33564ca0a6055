package cpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
)

// TestDecodeDirectKeepsResults lowers decode with K and V rows read
// straight from the pages (Tiling.DecodeDirect: the products read B at
// row offsets) and copied into f32 tiles, runs the CPU pass table on both
// and interprets every level's decode kernel (and the neutral module, the
// interpreter's own products) on the same paged inputs — f32, f16, bf16
// and 8-bit caches, a hidden (-1) page (its tile takes the copy), an
// empty sequence and a partial last tile: o and lse are bit for bit the
// same. The interpreter fails a read (or prefetch) outside the pools, so a
// row offset of the hidden page that a product read would fail the run.
// A second page table puts the hidden page and one past the pool
// (num_pages) in the third sequence's last tile, right after a tile read
// in place, whose products prefetch the rows a tile ahead: an offset from
// either page would fail the run there.
func TestDecodeDirectKeepsResults(t *testing.T) {
	for _, indices := range [][]int32{stagedIndices, {3, 9, 0, 14, 5, 12, 7, 1, 11, 2, -1, 16}} {
		decodeDirectKeepsResults(t, indices)
	}
}

func decodeDirectKeepsResults(t *testing.T, indices []int32) {
	for _, c := range []struct {
		dt, kv ir.DType
		scale  ir.KVScale
	}{
		{ir.DTF32, ir.DTF32, ir.KVScaleNone}, {ir.DTF16, ir.DTF16, ir.KVScaleNone}, {ir.DTBF16, ir.DTBF16, ir.KVScaleNone},
		{ir.DTF16, ir.DTE4M3, ir.KVScalePerTensor}, {ir.DTBF16, ir.DTE5M2, ir.KVScalePerHead},
		{ir.DTF16, ir.DTI8, ir.KVScalePerTensor},
	} {
		v := &ir.Variant{Name: "t", QOHeads: 8, KVHeads: 2, HeadDimQK: 16, HeadDimV: 16, DType: c.dt, KVDType: c.kv, KVScale: c.scale,
			PageSize: 4, Scale: 0.25, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: []ir.KernelRef{{Role: ir.RoleDecode}}}
		name := c.dt.String() + "/" + c.kv.String()
		tiling := Target{}.Tiling(v)
		if !tiling.DecodeDirect {
			t.Fatalf("%s: the CPU tiling reads decode's rows through copies", name)
		}
		var outs [2]map[string]map[string]any
		for i, direct := range []bool{false, true} {
			tl := tiling
			tl.DecodeDirect = direct
			m, err := lower.Lower(v, tl)
			if err != nil {
				t.Fatal(err)
			}
			outs[i] = map[string]map[string]any{}
			neutral, err := passes.RunTable(passes.Neutral, m, passes.Options{VerifyEach: true})
			if err != nil {
				t.Fatalf("%s direct=%v: %v", name, direct, err)
			}
			args := stagedDecodeArgs(v, indices)
			if st, err := ir.Run(neutral, "t_decode_work", args); err != nil || st != 0 {
				t.Fatalf("%s direct=%v neutral: status %d, %v", name, direct, st, err)
			}
			outs[i]["neutral"] = args
			if got := strings.Contains(neutral.String(), "rows(koff)"); got != direct {
				t.Fatalf("%s direct=%v: a product reads K at row offsets: %v", name, direct, got)
			}
			if m, err = passes.RunTable(Table, m, passes.Options{VerifyEach: true}); err != nil {
				t.Fatalf("%s direct=%v: %v", name, direct, err)
			}
			runLevelDecodes(t, fmt.Sprintf("%s direct=%v", name, direct), m, v, indices, outs[i])
		}
		sameDecodeOutputs(t, name, outs, 4, "copied", "read in place")
	}
}
