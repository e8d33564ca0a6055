package cpu

import (
	"fmt"
	"math/rand"
	"regexp"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

// TestFullTilesKeepsResults lowers prefill (f32 and bf16, GQA, pages of 4
// and 32; causal, and a causal window; with -long MHA too) and decode
// (decodeCases: f32, f16, bf16 and 8-bit caches), runs the CPU pass table
// with and without full-tiles, and interprets every level's prefill or
// decode work kernel (decode's split kernels too) on the same paged inputs
// (fullTileArgs: fully visible tiles of all 64 positions, fully visible
// tiles of fewer — which now take the masked body —, diagonal tiles, a
// hidden page, an empty sequence; stagedDecodeArgs: a whole decode tile
// and a sequence's shorter last ones, a hidden page, an empty sequence):
// o and lse are bit for bit the same. With the pass every level's kernel
// sends its fully visible branch whole tiles only, and without it none.
func TestFullTilesKeepsResults(t *testing.T) {
	masks := map[string][]ir.MaskClause{
		"causal":        {{Kind: ir.MaskCausal}},
		"causal window": {{Kind: ir.MaskCausal}, {Kind: ir.MaskWindow, Left: 90}},
	}
	type fullTileCase struct {
		qo, kv, ps int
		dt         ir.DType
		mask       string
	}
	cases := []fullTileCase{{8, 2, 4, ir.DTF32, "causal"}, {8, 2, 32, ir.DTBF16, "causal"}, {8, 2, 4, ir.DTF32, "causal window"}}
	if *long {
		// MHA over pages of 32 (prefillLong's shape): CI's long pass.
		cases = append(cases, fullTileCase{4, 4, 32, ir.DTF32, "causal"})
	}
	for _, c := range cases {
		v := &ir.Variant{Name: "t", QOHeads: c.qo, KVHeads: c.kv, HeadDimQK: 32, HeadDimV: 32, DType: c.dt, KVDType: c.dt,
			PageSize: c.ps, Scale: 0.25, Masks: masks[c.mask], Kernels: []ir.KernelRef{{Role: ir.RolePrefill}}}
		what := fmt.Sprintf("%s %d/%d heads, page %d, %s", c.dt, c.qo, c.kv, c.ps, c.mask)
		outs := passOutputs(t, what, "full-tiles", v, ir.RolePrefill, "t_prefill_work", func() map[string]any { return fullTileArgs(v) }, func(k *ir.Kernel, with bool) {
			if got := strings.Contains(k.String(), "& (64 <= (kv_len - (kt * 64))))\n"); got != with {
				t.Fatalf("%s, %s: the constant extent is there: %v", what, k.Name, got)
			}
		})
		sameOutputs(t, "full-tiles "+what, outs, len(outs[0]), "without full-tiles", "with it")
	}
	for _, c := range decodeCases {
		// The staged tests' page tables: a hidden page in the first
		// tile of the third sequence (it stages), or only past it (a
		// whole tile read in place).
		for _, indices := range [][]int32{stagedIndices, tailHiddenIndices} {
			fullTilesDecode(t, c, indices)
		}
	}
}

// fullTilesDecode is TestFullTilesKeepsResults for decode case c over the
// page table indices.
func fullTilesDecode(t *testing.T, c decodeCase, indices []int32) {
	whole := regexp.MustCompile(`& \(([0-9]+) <= \(kv_len - \(kt \* ([0-9]+)\)\)\)\)\n`)
	v := decodeVariant(c)
	what := fmt.Sprintf("decode %s, pages %v", c.name(), indices)
	outs := passOutputs(t, what, "full-tiles", v, ir.RoleDecode, "t_decode_work", func() map[string]any { return stagedDecodeArgs(v, indices) }, func(k *ir.Kernel, with bool) {
		got := whole.FindStringSubmatch(k.String())
		if (got != nil) != with || got != nil && got[1] != got[2] {
			t.Fatalf("%s, %s: the constant extent: %q", what, k.Name, got)
		}
	})
	sameOutputs(t, "full-tiles "+what, outs, len(outs[0]), "without full-tiles", "with it")
}

// fullTileArgs are fixed random prefill inputs for v (f32 or bf16): 5
// sequences of 130, 0, 100, 70 and 37 cached positions with 3, 0, 1, 70
// and 9 query rows. The first's queries (positions 127..129) see tiles
// 0..63 and 64..127 whole and 128..129 partly (causal); the third's one
// query (position 99) sees 0..63 whole and 64..99 whole, a fully visible
// tile of 36 positions; the fourth has full and diagonal tiles; the last
// a hidden (-1) page. Pages in a scattered order.
func fullTileArgs(v *ir.Variant) map[string]any {
	return pagedPrefillArgs(v, 5, []int{130, 0, 100, 70, 37}, []int{3, 0, 1, 70, 9}, 4)
}

// pagedPrefillArgs are fixed random prefill inputs for v (f32, or bf16
// bits when v's cache is bf16) from seed: sequences of kvLens positions
// with qLens query rows each, their pages in a scattered order, the middle
// page of sequence number hidden hidden (-1); values ±(0.5 … 2).
func pagedPrefillArgs(v *ir.Variant, seed int64, kvLens, qLens []int, hidden int) map[string]any {
	rng := rand.New(rand.NewSource(seed))
	ps := v.PageSize
	pagesOf := func(n int) int { return (n + ps - 1) / ps }
	pages := 1
	for _, n := range kvLens {
		pages += pagesOf(n)
	}
	perm := rng.Perm(pages)
	var indptr, indices, last []int32
	indptr = append(indptr, 0)
	next := 0
	for s, n := range kvLens {
		for p := 0; p < pagesOf(n); p++ {
			id := int32(perm[next])
			next++
			if s == hidden && p == pagesOf(n)/2 {
				id = -1
			}
			indices = append(indices, id)
		}
		indptr = append(indptr, int32(len(indices)))
		last = append(last, int32((n+ps-1)%ps+1))
	}
	qIndptr := []int32{0}
	for _, n := range qLens {
		qIndptr = append(qIndptr, qIndptr[len(qIndptr)-1]+int32(n))
	}
	total := int(qIndptr[len(qIndptr)-1])
	vals := func(n int) any {
		f := make([]float32, n)
		for i := range f {
			f[i] = float32(rng.Intn(2)*2-1) * (0.5 + 1.5*rng.Float32())
		}
		if v.DType != ir.DTBF16 {
			return f
		}
		b := make([]uint16, n)
		for i, x := range f {
			b[i] = bf16Bits(x)
		}
		return b
	}
	out := func(n int) any {
		if v.DType == ir.DTBF16 {
			return make([]uint16, n)
		}
		return make([]float32, n)
	}
	row := v.KVHeads * ps * v.HeadDimQK
	return map[string]any{
		"q":                vals(total * v.QOHeads * v.HeadDimQK),
		"qo_indptr":        qIndptr,
		"k_pages":          vals(pages * row),
		"v_pages":          vals(pages * row),
		"num_pages":        int32(pages),
		"kv_indptr":        indptr,
		"kv_indices":       indices,
		"kv_last_page_len": last,
		"batch_size":       int32(len(kvLens)),
		"o":                out(total * v.QOHeads * v.HeadDimV),
		"lse":              make([]float32, total*v.QOHeads),
	}
}
