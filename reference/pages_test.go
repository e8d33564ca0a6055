package reference

import (
	"bytes"
	"testing"

	"github.com/attnc/attnc/ir"
)

// pagesVariant is a cache of page size 2, 2 kv heads, HND, 8-bit e4m3
// codes with per-head scales.
func pagesVariant() *ir.Variant {
	return &ir.Variant{PageSize: 2, KVHeads: 2, Layout: ir.HND, DType: ir.DTF16, KVDType: ir.DTE4M3, KVScale: ir.KVScalePerHead}
}

// TestCompactCopyShiftsLeft: an overlapping left shift by one, in index
// order, moves every row (not the first copy's source into every slot).
func TestCompactCopyShiftsLeft(t *testing.T) {
	v := pagesVariant()
	v.KVDType, v.KVScale = ir.DTF16, ir.KVScaleNone
	// d = 1 f16 element per row: 2 pages x 2 heads x 2 slots = 8 rows.
	pool := Encode(ir.DTF16, []float32{0, 1, 10, 11, 2, 3, 12, 13})
	// Head 0 holds slots 0..3 as 0, 1, 2, 3; head 1 as 10, 11, 12, 13.
	CompactCopy(v, pool, 1, []int32{0, 3}, []int32{1, 2, 3}, []int32{0, 1, 2})
	want := Encode(ir.DTF16, []float32{1, 2, 11, 12, 3, 3, 13, 13})
	if !bytes.Equal(pool, want) {
		t.Errorf("pool %v, want %v", Decode(ir.DTF16, pool), Decode(ir.DTF16, want))
	}
}

// TestReadKVDequantizes: code 0x38 of e4m3 is 1.0, 0x3c is 1.5; each
// kv head's scale multiplies; -1 skips the row.
func TestReadKVDequantizes(t *testing.T) {
	v := pagesVariant()
	pool := make([]byte, 2*2*2*2) // 2 pages, d = 2
	a, _ := RowBytes(v, 3, 1, 2)  // page 1, head 1, slot 1
	pool[a], pool[a+1] = 0x38, 0x3c
	got := ReadKV(v, pool, 2, []int32{-1, 3}, []float32{4, 0.25})
	if got[0] != nil || got[1] != nil || got[2] == nil {
		t.Fatalf("rows %v: want row 0 skipped, row 1 read", got)
	}
	if got[3][0] != 0.25 || got[3][1] != 0.375 {
		t.Errorf("head 1 of slot 3: %v, want [0.25 0.375]", got[3])
	}
	if a != ((1*2+1)*2+1)*2 {
		t.Errorf("row (slot 3, head 1) at byte %d, want %d (HND)", a, ((1*2+1)*2+1)*2)
	}
}

// TestGatherScatterRoundTrip: scatter puts back what gather took, into
// other pages.
func TestGatherScatterRoundTrip(t *testing.T) {
	v := pagesVariant()
	pool := make([]byte, 4*PageBytes(v, 3))
	for i := range pool {
		pool[i] = byte(i)
	}
	buf := GatherPages(v, pool, 3, []int32{2, 0})
	if !bytes.Equal(buf[:PageBytes(v, 3)], pool[2*PageBytes(v, 3):3*PageBytes(v, 3)]) {
		t.Fatal("page 0 of the buffer is not pool page 2")
	}
	out := make([]byte, len(pool))
	ScatterPages(v, out, 3, []int32{1, 3}, buf)
	if !bytes.Equal(out[PageBytes(v, 3):2*PageBytes(v, 3)], pool[2*PageBytes(v, 3):3*PageBytes(v, 3)]) ||
		!bytes.Equal(out[3*PageBytes(v, 3):], pool[:PageBytes(v, 3)]) {
		t.Error("scatter did not put the gathered pages at 1 and 3")
	}
}
