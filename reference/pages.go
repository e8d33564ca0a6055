package reference

import (
	"math"

	"github.com/attnc/attnc/ir"
)

// The page kernels' reference: plain loops over a pool's stored bytes, one
// row (a slot of one kv head, d elements) at a time, in the order DESIGN
// §3.2 states. A pool is K or V (d = head_dim qk or v), or MLA's ckv or
// kpe (d = kv_lora_rank or rope_dim, one latent head).

// RowBytes is the byte range [a, b) of row (slot, kv head h) of a pool of
// d-element rows: slot = page * page_size + offset.
func RowBytes(v *ir.Variant, slot, h, d int) (a, b int) {
	size := Size(v.KVDType)
	a = PageIndex(v, slot/v.PageSize, h, slot%v.PageSize, 0, d) * size
	return a, a + d*size
}

// ReadKV is read_kv's exact result for slots over a pool of d-element
// rows: row i, kv head h holds the values of slot slots[i] (nil for a
// skipped slot, -1): the stored values, or for an 8-bit cache each code's
// value times the kv head's scale (scales: one, or one per kv head),
// exact in float64.
func ReadKV(v *ir.Variant, pool []byte, d int, slots []int32, scales []float32) [][]float64 {
	out := make([][]float64, len(slots)*v.KVHeads)
	for i, slot := range slots {
		if slot < 0 {
			continue
		}
		for h := range v.KVHeads {
			a, b := RowBytes(v, int(slot), h, d)
			row := make([]float64, d)
			for j, x := range Decode(v.KVDType, pool[a:b]) {
				row[j] = float64(x)
				if v.Quantized() {
					row[j] *= float64(scales[h%len(scales)])
				}
			}
			out[i*v.KVHeads+h] = row
		}
	}
	return out
}

// ReadKVBytes is the bytes read_kv writes for an exact value x: x rounded
// to f32 (the f32 product of code and scale is that rounding), then to
// the variant's dtype.
func ReadKVBytes(v *ir.Variant, x float64) []byte {
	return Encode(v.DType, []float32{float32(x)})
}

// CompactCopy applies compact_copy to a pool of d-element rows in place:
// for each sequence b, copy j of copy_indptr[b] .. copy_indptr[b+1] moves
// every kv head's row from slot src[j] to slot dst[j], one copy after the
// other.
func CompactCopy(v *ir.Variant, pool []byte, d int, indptr, src, dst []int32) {
	for b := 0; b+1 < len(indptr); b++ {
		for j := indptr[b]; j < indptr[b+1]; j++ {
			for h := range v.KVHeads {
				a, e := RowBytes(v, int(src[j]), h, d)
				x, _ := RowBytes(v, int(dst[j]), h, d)
				copy(pool[x:x+(e-a)], pool[a:e])
			}
		}
	}
}

// PageBytes is the byte size of one page of a pool of d-element rows.
func PageBytes(v *ir.Variant, d int) int {
	return v.PageSize * v.KVHeads * d * Size(v.KVDType)
}

// GatherPages is gather_pages' buffer: page ids[i] of the pool as page i.
func GatherPages(v *ir.Variant, pool []byte, d int, ids []int32) []byte {
	pb := PageBytes(v, d)
	out := make([]byte, 0, len(ids)*pb)
	for _, id := range ids {
		out = append(out, pool[int(id)*pb:][:pb]...)
	}
	return out
}

// ScatterPages applies scatter_pages to a pool in place: page i of buf
// becomes page ids[i].
func ScatterPages(v *ir.Variant, pool []byte, d int, ids []int32, buf []byte) {
	pb := PageBytes(v, d)
	for i, id := range ids {
		copy(pool[int(id)*pb:][:pb], buf[i*pb:][:pb])
	}
}

// SameOrNaN reports whether two encoded elements of dtype dt are the same
// bits, or both NaN (a NaN's sign and payload are not specified).
func SameOrNaN(dt ir.DType, got, want []byte) bool {
	if string(got) == string(want) {
		return true
	}
	g, w := Decode(dt, got), Decode(dt, want)
	return len(g) == 1 && len(w) == 1 && math.IsNaN(float64(g[0])) && math.IsNaN(float64(w[0]))
}
