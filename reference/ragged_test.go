package reference

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnc/attnc/ir"
)

// TestRaggedEqualsPaged: attention over the gathered ragged rows is
// attention over the pages, bit for bit (the same values in the same
// order), and it reads the ragged rows: poisoning the pages afterwards
// changes nothing, changing a visible ragged row changes o.
func TestRaggedEqualsPaged(t *testing.T) {
	for _, v := range []*ir.Variant{
		testVariant(nil),
		testVariant(func(v *ir.Variant) { v.Rope = &ir.Rope{Theta: 10000, Params: map[string]float64{}} }),
	} {
		c := NewCase(v, rand.New(rand.NewSource(4)), CaseSpec{QLens: []int{3, 0, 5}, KVLens: []int{9, 2, 5}, ExtraPages: 1, NaNFill: true})
		o, lse := Attention(v, c)
		r := Ragged(v, c, 3)
		if r.KVTokenIndptr[0] != 3 || r.KVTokenIndptr[3] != 3+16 {
			t.Fatalf("kv_token_indptr %v", r.KVTokenIndptr)
		}
		for i := range r.KPages {
			r.KPages[i] = float32(math.NaN())
		}
		r.KPages = append([]float32(nil), r.KPages...)
		ro, rl := Attention(v, r)
		for i := range o {
			if o[i] != ro[i] {
				t.Fatalf("o[%d] = %g over ragged rows, %g over pages", i, ro[i], o[i])
			}
		}
		for i := range lse {
			if lse[i] != rl[i] {
				t.Fatalf("lse[%d] = %g over ragged rows, %g over pages", i, rl[i], lse[i])
			}
		}
		// Sequence 0's position 0 is visible to its queries.
		r.RaggedV = append([]float32(nil), r.RaggedV...)
		r.RaggedV[3*v.KVHeads*v.HeadDimV] += 1
		if ro2, _ := Attention(v, r); ro2[0] == ro[0] {
			t.Fatal("changing a visible ragged V row left o unchanged")
		}
	}
}

// TestSplitChunkMerges: TVM's chunked prefill in the reference — the
// chunk's queries over the prefix with no mask, merged with their causal
// attention over the chunk's own ragged rows, equal causal attention over
// prefix and chunk (RoPE included: the ragged keys rotate at their
// sequence positions).
func TestSplitChunkMerges(t *testing.T) {
	for _, v := range []*ir.Variant{
		testVariant(nil),
		testVariant(func(v *ir.Variant) { v.Rope = &ir.Rope{Theta: 10000, Params: map[string]float64{}} }),
	} {
		none := *v
		none.Masks = []ir.MaskClause{{Kind: ir.MaskNone}}
		c := NewCase(v, rand.New(rand.NewSource(5)), CaseSpec{QLens: []int{4, 7, 1}, KVLens: []int{13, 7, 9}})
		o, lse := Attention(v, c)
		pre, chunk := SplitChunk(v, c, []int{9, 0, 8}, 2)
		oa, sa := Attention(&none, pre)
		ob, sb := Attention(v, chunk)
		om, sm := MergeState(oa, sa, ob, sb)
		for i := range lse {
			if !near(sm[i], lse[i], 1e-12) {
				t.Fatalf("lse[%d]: merged %g, want %g", i, sm[i], lse[i])
			}
		}
		for i := range o {
			if !near(om[i], o[i], 1e-12) {
				t.Fatalf("o[%d]: merged %g, want %g", i, om[i], o[i])
			}
		}
	}
}
