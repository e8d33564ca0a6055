package cpu

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
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
	for _, indices := range [][]int32{stagedIndices, tailHiddenIndices} {
		decodeDirectKeepsResults(t, indices)
	}
}

func decodeDirectKeepsResults(t *testing.T, indices []int32) {
	for _, c := range decodeCases {
		v := decodeVariant(c)
		tilingSwitch{
			name: c.name(), v: v, at: func(tl *lower.Tiling) *bool { return &tl.DecodeDirect }, defaultOn: true,
			args:         func() map[string]any { return stagedDecodeArgs(v, indices) },
			neutralShows: func(m *ir.Module) bool { return strings.Contains(m.String(), "rows(koff)") },
			as0:          "copied", as1: "read in place",
		}.run(t)
	}
}

// TestDecodePhasesKeepsResults is TestDecodeDirectKeepsResults's test
// with decode's online-softmax update in one loop over the rows and in a
// loop per phase (Tiling.DecodePhases: every row's max, then every row's
// exp and sum, then alpha, the denominator and the max): the same
// arithmetic, bit for bit, on the same inputs (f32, f16, bf16 and 8-bit
// caches, a hidden page, an empty sequence, a partial last tile).
func TestDecodePhasesKeepsResults(t *testing.T) {
	for _, indices := range [][]int32{stagedIndices, tailHiddenIndices} {
		for _, c := range decodeCases {
			v := decodeVariant(c)
			tilingSwitch{
				name: c.name(), v: v, at: func(tl *lower.Tiling) *bool { return &tl.DecodePhases }, defaultOn: true,
				args:         func() map[string]any { return stagedDecodeArgs(v, indices) },
				neutralShows: func(m *ir.Module) bool { return strings.Contains(m.Kernel("t_decode_work").String(), "tsum") },
				as0:          "one row loop", as1: "a loop per phase",
			}.run(t)
		}
	}
}

// TestPrefillDirectKeepsResults lowers prefill over an f32 cache with K
// and V rows read straight from the pages (Tiling.PrefillDirect: K packed
// for the micro-kernels from the pool rows, P·V reading V there) and
// copied into f32 tiles, runs the CPU pass table on both and interprets
// the neutral module and every level's prefill kernel on the same paged
// inputs (prefillBothWays): o and lse are bit for bit the same. The
// interpreter fails a read outside the pools, so a row offset of the
// hidden page (or one past a tile's end) that the packing or P·V read
// would fail the run.
func TestPrefillDirectKeepsResults(t *testing.T) {
	prefillBothWays(t, "copied", "read in place", func(tl *lower.Tiling) *bool { return &tl.PrefillDirect },
		func(m *ir.Module) bool {
			work := m.Kernel("t_prefill_work").String()
			return strings.Contains(work, "rows(koff)") && strings.Contains(work, "rows(voff)")
		})
}

// TestPrefillAlphaLoopKeepsResults is the same with prefill's rescale
// factors computed in the row loop and in a loop over the rows of their
// own (Tiling.PrefillAlphaLoop): the same arithmetic, bit for bit.
func TestPrefillAlphaLoopKeepsResults(t *testing.T) {
	prefillBothWays(t, "per row", "in a loop of their own", func(tl *lower.Tiling) *bool { return &tl.PrefillAlphaLoop },
		func(m *ir.Module) bool { return strings.Contains(m.Kernel("t_prefill_work").String(), "tsum") })
}

// TestPrefillPhasesKeepsResults is the same with each row's max taken in
// the row loop of its exp and sum and in a loop of its own before it
// (Tiling.PrefillPhases): the same arithmetic, bit for bit. With phases
// the exp loop reads the new max back from alpha, as the rescale loop does.
func TestPrefillPhasesKeepsResults(t *testing.T) {
	prefillBothWays(t, "in the exp's row loop", "in a loop of their own", func(tl *lower.Tiling) *bool { return &tl.PrefillPhases },
		func(m *ir.Module) bool {
			work := m.Kernel("t_prefill_work").String()
			return strings.Count(work, "let m_new = alpha[row]") > strings.Count(work, "store alpha[row] = a\n")
		})
}

// prefillBothWays lowers f32 prefill variants (prefillCases: GQA over
// pages of 4; with -long MHA, and pages of 32 positions, too) with the CPU tiling's switch (at) off and on and
// checks that on shows in the neutral work kernel (shows) and that the
// neutral module and every level's prefill kernel write bit for bit the
// same o and lse on directPrefillArgs — an empty sequence, a tile wholly
// on readable pages with a partial one after it, and a sequence with a
// hidden (-1) page (tilingSwitch); as0 and as1 name the two ways.
func prefillBothWays(t *testing.T, as0, as1 string, at func(*lower.Tiling) *bool, shows func(*ir.Module) bool) {
	t.Helper()
	for _, c := range prefillCases() {
		v := &ir.Variant{Name: "t", QOHeads: c.qo, KVHeads: c.kv, HeadDimQK: 32, HeadDimV: 32, DType: ir.DTF32, KVDType: ir.DTF32,
			PageSize: c.ps, Scale: 0.25, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: []ir.KernelRef{{Role: ir.RolePrefill}}}
		tilingSwitch{
			name: fmt.Sprintf("%d/%d heads, page %d", c.qo, c.kv, c.ps), v: v, at: at, defaultOn: true,
			args:         func() map[string]any { return directPrefillArgs(v) },
			neutralShows: shows, as0: as0, as1: as1,
		}.run(t)
	}
}

// prefillCase is a prefill variant's heads (qo over kv) and page size.
type prefillCase struct{ qo, kv, ps int }

// prefillShort is the case of prefillBothWays and TestExpBoundKeepsResults
// the default run takes: GQA over pages of 4 (directPrefillArgs' 70
// positions on 18 pages, a partial last page, a hidden one); prefillLong
// are the cases -long (CI's long pass) adds: MHA, and pages of 32 (a tile
// within one page).
var (
	prefillShort = []prefillCase{{8, 2, 4}}
	prefillLong  = []prefillCase{{4, 4, 4}, {8, 2, 32}}
)

// prefillCases are prefillShort, and prefillLong with -long.
func prefillCases() []prefillCase {
	if *long {
		return append(slices.Clone(prefillShort), prefillLong...)
	}
	return prefillShort
}

// directPrefillArgs are fixed random prefill inputs for v: 3 sequences of
// 0, 70 and 37 positions (0, 70 and 9 query rows), the last with one page
// hidden (-1), the pages in a scattered order.
func directPrefillArgs(v *ir.Variant) map[string]any {
	return pagedPrefillArgs(v, 11, []int{0, 70, 37}, []int{0, 70, 9}, 2)
}
