package cpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
)

// TestSpreadPrefetchesCoverNextTile runs every level's decode work clone
// (x86-64-v4-bf16's too, whose Q·Kᵀ over bf16 reads K's rows as pairs)
// at head dim 128 (f32, f16 and bf16 rows: 8, 4 and 4 lines of 64 bytes;
// f16 and bf16 dot blocks prefetch in address order, f32's and every P·V
// row-strided; e4m3, e5m2 and i8 codes under f16 queries: rows of 2
// lines; 16-position tiles of f32, 64 of the others) with each prefetch
// and each product load (a let reading a pool) or
// finite-codes check load (an assign) also marking the 64-byte line it
// touches, and checks that every line a product reads was prefetched,
// except the lines of a sequence's first item's first tile (no tile
// before it prefetches them) and those of a later kv head's first tile
// past the previous kv head's last tile's length (its look-ahead into the
// next item, ir.For.Next, reaches as far as its own rows): a reordering
// of the spread prefetches that skipped a line, or prefetched another
// row's, or a next item's look-ahead at the wrong kv head or tile, would
// leave a read line unmarked.
// Pages of 4 and 16 positions (f32 tiles of 4 and 1 page runs, the
// others' of 16 and 4), three sequences of 0, 5 or 17, and 93 or 369
// positions over a shuffled page table; the interpreter fails a mark
// outside the pool. GQA groups of 4; f32, f16 and bf16 also as MHA and
// groups of 2, whose dot blocks of 16 and 8 keys prefetch several rows a
// step (seqGroupShort).
func TestSpreadPrefetchesCoverNextTile(t *testing.T) {
	for _, c := range []decodeCase{
		{ir.DTF32, ir.DTF32, ir.KVScaleNone}, {ir.DTF16, ir.DTF16, ir.KVScaleNone}, {ir.DTBF16, ir.DTBF16, ir.KVScaleNone},
		// 8-bit codes: rows of 2 lines; e4m3's
		// products run behind the finite-codes check (its @finite copy
		// and the exact one).
		{ir.DTF16, ir.DTE4M3, ir.KVScalePerTensor}, {ir.DTF16, ir.DTE5M2, ir.KVScalePerTensor},
		{ir.DTF16, ir.DTI8, ir.KVScalePerTensor},
	} {
		groups := []int{4}
		if c.kv == c.dt {
			groups = []int{4, 1, 2}
		}
		for _, g := range groups {
			for _, ps := range []int{4, 16} {
				v := &ir.Variant{Name: "t", QOHeads: 2 * g, KVHeads: 2, HeadDimQK: 128, HeadDimV: 128, DType: c.dt, KVDType: c.kv, KVScale: c.scale,
					PageSize: ps, Scale: 0.25, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: []ir.KernelRef{{Role: ir.RoleDecode}}}
				spreadCoversNextTile(t, v)
			}
		}
	}
}

func spreadCoversNextTile(t *testing.T, v *ir.Variant) {
	t.Helper()
	name := fmt.Sprintf("%s/%s %d/%d heads page %d", v.DType, v.KVDType, v.QOHeads, v.KVHeads, v.PageSize)
	m, tiling := compiled(t, v, name)
	indices := validIndices
	eb := max(1, v.KVDType.Type().Bits()/8)
	lineElems := int64(64 / eb)
	runs := 0
	for _, k := range m.Kernels {
		if k.Role != ir.RoleDecode || !strings.HasPrefix(k.Name, "t_decode_work") || k.Level == "" {
			continue
		}
		args := stagedDecodeArgs(v, indices)
		poolLines := int64(lenOf(args["k_pages"])) / lineElems
		marked := *k
		marked.Params = append([]*ir.Param{}, k.Params...)
		for _, p := range []string{"pf_k_pages", "pf_v_pages", "rd_k_pages", "rd_v_pages"} {
			marked.Params = append(marked.Params, &ir.Param{Name: p, Buffer: true, Elem: ir.I32, Shape: []string{fmt.Sprint(poolLines)}, Output: true})
			args[p] = make([]int32, poolLines)
		}
		prefetches, reads := 0, 0
		mark := func(buf string, at ir.Expr) ir.Stmt {
			return &ir.Store{Buf: buf, Index: ir.Bin(ir.Div, at, ir.IntT(at.Type(), lineElems)), Value: ir.IntT(ir.I32, 1)}
		}
		// markReads appends to out a mark of each pool line v reads.
		markReads := func(out *ir.Block, v ir.Expr) {
			ir.VisitExpr(v, func(e ir.Expr) {
				if l, ok := e.(*ir.Load); ok && (l.Buf == "k_pages" || l.Buf == "v_pages") {
					out.Stmts = append(out.Stmts, mark("rd_"+l.Buf, l.Index))
					reads++
				}
			})
		}
		var walk func(b *ir.Block) *ir.Block
		walk = func(b *ir.Block) *ir.Block {
			out := &ir.Block{}
			for _, s := range b.Stmts {
				switch x := s.(type) {
				case *ir.Prefetch:
					out.Stmts = append(out.Stmts, s, mark("pf_"+x.Buf, x.Index))
					prefetches++
					continue
				case *ir.Let:
					out.Stmts = append(out.Stmts, s)
					markReads(out, x.Value)
					continue
				case *ir.Assign:
					// The finite-codes check's reads of the tile's rows.
					out.Stmts = append(out.Stmts, s)
					markReads(out, x.Value)
					continue
				case *ir.For:
					c := *x
					c.Body = walk(x.Body)
					out.Stmts = append(out.Stmts, &c)
					continue
				case *ir.If:
					c := *x
					c.Then = walk(x.Then)
					if x.Else != nil {
						c.Else = walk(x.Else)
					}
					out.Stmts = append(out.Stmts, &c)
					continue
				case *ir.Block:
					out.Stmts = append(out.Stmts, walk(x))
					continue
				}
				out.Stmts = append(out.Stmts, s)
			}
			return out
		}
		marked.Body = walk(k.Body)
		if prefetches == 0 || reads == 0 {
			t.Fatalf("%s %s: %d prefetches and %d product loads of the pools, want both", name, k.Name, prefetches, reads)
		}
		mm := &ir.Module{Kernels: []*ir.Kernel{&marked}}
		if st, err := runDirect(mm, marked.Name, args); err != nil || st != 0 {
			t.Fatalf("%s %s: status %d, %v", name, k.Name, st, err)
		}
		// The lines no earlier tile prefetched: a sequence's first item's
		// (kv head 0) first tile, the rows of the pages its first TileRows
		// positions lie on; and of a later kv head's first tile the rows
		// at or past the length of the previous kv head's last tile, which
		// looks ahead into it (ir.For.Next) only as far as its own rows
		// reach.
		first := map[int64]bool{}
		tile := tiling.DecodeKVTile
		indptr := args["kv_indptr"].([]int32)
		lastLen := args["kv_last_page_len"].([]int32)
		rowElems := int64(v.HeadDimQK)
		for b := 0; b+1 < len(indptr); b++ {
			np := int(indptr[b+1] - indptr[b])
			if np == 0 {
				continue
			}
			kvLen := (np-1)*v.PageSize + int(lastLen[b])
			lastN := kvLen - (kvLen-1)/tile*tile
			for pos := 0; pos < min(tile, np*v.PageSize); pos++ {
				p := indptr[b] + int32(pos/v.PageSize)
				for h := range v.KVHeads {
					if h > 0 && pos < lastN {
						continue
					}
					row := ((int64(indices[p])*int64(v.KVHeads)+int64(h))*int64(v.PageSize) + int64(pos%v.PageSize)) * rowElems
					for c := int64(0); c < rowElems; c += lineElems {
						first[(row+c)/lineElems] = true
					}
				}
			}
		}
		checked := 0
		for _, pool := range []string{"k_pages", "v_pages"} {
			pf, rd := args["pf_"+pool].([]int32), args["rd_"+pool].([]int32)
			for line := range rd {
				if rd[line] == 0 || first[int64(line)] {
					continue
				}
				checked++
				if pf[line] == 0 {
					t.Errorf("%s %s: %s line %d (row %d, line %d of it) read by the products, never prefetched", name, k.Name, pool, line,
						int64(line)*lineElems/rowElems, int64(line)%(rowElems/lineElems))
				}
			}
		}
		if checked == 0 {
			t.Fatalf("%s %s: no line read past an item's first tile", name, k.Name)
		}
		runs++
	}
	// x86-64, -v3 and -v4; a bf16 cache's Q·Kᵀ runs on vdpbf16ps at
	// x86-64-v4-bf16 too (dotPairsFits).
	want := 3
	if v.DType == ir.DTBF16 && v.KVDType == ir.DTBF16 {
		want = 4
	}
	if runs != want {
		t.Fatalf("%s: ran %d decode work clones, want %d", name, runs, want)
	}
}

// TestDotBlocksPrefetchInAddressOrder runs decode's work clones at head
// dim 128 with each prefetch a tile ahead (into L2) marking the tick of
// its line's first prefetch, and checks that within each page's rows of a
// kv head (consecutive in the pool) the lines were first prefetched in
// address order: a row's lines one after another, then the next row's.
// That is seqGroup's order (addressOrder: GQA groups of 4 over f16 and
// bf16 rows of 4 lines) and seqGroupShort's (dot blocks of more keys than
// a row has lines: MHA's 16 keys and a group of 2's 8 over f16 and bf16
// rows, MHA's 16 over f32 rows of 8 lines at x86-64-v4), where the
// row-strided order (line L of each of the block's rows, then line L+1)
// fetched a step's lines from as many rows as the block has keys. Blocks
// of 4 or 8 keys over f32 rows of 8 lines keep the row-strided order
// (seqLines: GQA groups of 4 and 2 at x86-64-v4, x86-64-v3's and x86-64's
// blocks) and are not checked.
func TestDotBlocksPrefetchInAddressOrder(t *testing.T) {
	for _, c := range []struct {
		dt    ir.DType
		group int
	}{{ir.DTF16, 1}, {ir.DTF16, 2}, {ir.DTF16, 4}, {ir.DTBF16, 1}, {ir.DTBF16, 4}, {ir.DTF32, 1}} {
		for _, ps := range []int{4, 16} {
			v := &ir.Variant{Name: "t", QOHeads: 2 * c.group, KVHeads: 2, HeadDimQK: 128, HeadDimV: 128, DType: c.dt, KVDType: c.dt,
				PageSize: ps, Scale: 0.25, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: []ir.KernelRef{{Role: ir.RoleDecode}}}
			dotBlocksPrefetchInOrder(t, v)
		}
	}
}

func dotBlocksPrefetchInOrder(t *testing.T, v *ir.Variant) {
	t.Helper()
	name := fmt.Sprintf("%s %d/%d heads page %d", v.DType, v.QOHeads, v.KVHeads, v.PageSize)
	m, _ := compiled(t, v, name)
	eb := int64(max(1, v.KVDType.Type().Bits()/8))
	lineElems := 64 / eb
	spanLines := int64(v.PageSize) * int64(v.HeadDimQK) / lineElems // one page's rows of a kv head
	rowLines := int64(v.HeadDimQK) / lineElems
	runs := 0
	for _, k := range m.Kernels {
		if k.Role != ir.RoleDecode || !strings.HasPrefix(k.Name, "t_decode_work") || k.Level == "" {
			continue
		}
		// The level's dot blocks: n keys of R query rows a step.
		lanes := 0
		for _, l := range x86Levels {
			if l.Name == k.Level {
				lanes = l.Lanes
			}
		}
		if lanes == 0 {
			t.Fatalf("%s %s: level %q is not an x86-64 level", name, k.Name, k.Level)
		}
		n := int64(lanes / dotBlockRows(v.QOHeads/v.KVHeads, lanes, false))
		if !(rowLines < n && n%rowLines == 0) && !(rowLines >= n && rowLines <= seqLines && rowLines%n == 0) {
			continue // row-strided: f32's 8 lines against 4 or 8 keys
		}
		args := stagedDecodeArgs(v, validIndices)
		poolLines := int64(lenOf(args["k_pages"])) / lineElems
		marked := *k
		marked.Params = append(append([]*ir.Param{}, k.Params...),
			&ir.Param{Name: "clock", Buffer: true, Elem: ir.I32, Shape: []string{"1"}, Output: true},
			&ir.Param{Name: "pf_k", Buffer: true, Elem: ir.I32, Shape: []string{fmt.Sprint(poolLines)}, Output: true})
		args["clock"], args["pf_k"] = make([]int32, 1), make([]int32, poolLines)
		prefetches := 0
		marked.Body = ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			x, ok := s.(*ir.Prefetch)
			if !ok || x.L1 || x.Buf != "k_pages" {
				return []ir.Stmt{s}
			}
			prefetches++
			line := ir.Bin(ir.Div, x.Index, ir.IntT(x.Index.Type(), lineElems))
			now := ir.Bin(ir.Add, ir.Ld("clock", ir.I32, ir.Int(0)), ir.IntT(ir.I32, 1))
			was := ir.Ld("pf_k", ir.I32, line)
			return []ir.Stmt{s,
				&ir.Store{Buf: "clock", Index: ir.Int(0), Value: now},
				&ir.Store{Buf: "pf_k", Index: line, Value: ir.Sel(ir.Bin(ir.Eq, was, ir.IntT(ir.I32, 0)), ir.Ld("clock", ir.I32, ir.Int(0)), was)},
			}
		})
		if prefetches == 0 {
			t.Fatalf("%s %s: no prefetch of K into L2", name, k.Name)
		}
		if st, err := runDirect(&ir.Module{Kernels: []*ir.Kernel{&marked}}, marked.Name, args); err != nil || st != 0 {
			t.Fatalf("%s %s: status %d, %v", name, k.Name, st, err)
		}
		tick := args["pf_k"].([]int32)
		checked := 0
		for span := int64(0); span+spanLines <= int64(len(tick)); span += spanLines {
			last := int64(-1) // the span's last line prefetched so far, in address order
			for line := span; line < span+spanLines; line++ {
				if tick[line] == 0 {
					continue
				}
				if last >= 0 && tick[line] < tick[last] {
					t.Errorf("%s %s: K line %d (row %d, line %d of it) first prefetched at tick %d, before line %d at %d",
						name, k.Name, line, line*lineElems/int64(v.HeadDimQK), line%(int64(v.HeadDimQK)/lineElems), tick[line], last, tick[last])
					break
				}
				last = line
				checked++
			}
		}
		if checked == 0 {
			t.Fatalf("%s %s: no K line prefetched", name, k.Name)
		}
		runs++
	}
	if runs == 0 {
		t.Fatalf("%s: no decode work clone prefetches in address order", name)
	}
}

// lenOf is the length of a slice argument.
func lenOf(x any) int {
	switch s := x.(type) {
	case []float32:
		return len(s)
	case []uint16:
		return len(s)
	case []byte:
		return len(s)
	}
	return 0
}

// TestPairedPrefetches checks where decode's work clones at head dim 128
// prefetch the next tile's V lines: beside K's in Q·K's dot blocks, and
// none in P·V's row loops, for 8-bit codes (rows of 2 lines, pairLines)
// at x86-64-v4; in P·V's row loops for f16, bf16 and f32 rows (4 and 8
// lines) at every level; never both. A P·V row loop is a loop whose body
// loads V directly (its lets).
func TestPairedPrefetches(t *testing.T) {
	for _, c := range []struct {
		dc     decodeCase
		paired bool
	}{
		{decodeCase{ir.DTF32, ir.DTF32, ir.KVScaleNone}, false},
		{decodeCase{ir.DTF16, ir.DTF16, ir.KVScaleNone}, false},
		{decodeCase{ir.DTBF16, ir.DTBF16, ir.KVScaleNone}, false},
		{decodeCase{ir.DTF16, ir.DTE4M3, ir.KVScalePerTensor}, true},
		{decodeCase{ir.DTF16, ir.DTE5M2, ir.KVScalePerTensor}, true},
		{decodeCase{ir.DTF16, ir.DTI8, ir.KVScalePerTensor}, true},
	} {
		v := &ir.Variant{Name: "t", QOHeads: 8, KVHeads: 2, HeadDimQK: 128, HeadDimV: 128, DType: c.dc.dt, KVDType: c.dc.kv, KVScale: c.dc.scale,
			PageSize: 16, Scale: 0.25, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: []ir.KernelRef{{Role: ir.RoleDecode}}}
		m, err := lower.Lower(v, Target{}.Tiling(v))
		if err != nil {
			t.Fatal(err)
		}
		if m, err = passes.RunTable(Table, m, passes.Options{VerifyEach: true}); err != nil {
			t.Fatal(err)
		}
		clones := 0
		for _, k := range m.Kernels {
			if k.Role != ir.RoleDecode || !strings.HasPrefix(k.Name, "t_decode_work") || k.Level == "" {
				continue
			}
			clones++
			inPV, elsewhere := 0, 0
			var walk func(b *ir.Block, pv bool)
			walk = func(b *ir.Block, pv bool) {
				for _, s := range b.Stmts {
					switch x := s.(type) {
					case *ir.For:
						loadsV := false
						for _, s := range x.Body.Stmts {
							if l, ok := s.(*ir.Let); ok {
								ir.VisitExpr(l.Value, func(e ir.Expr) {
									if ld, ok := e.(*ir.Load); ok && ld.Buf == "v_pages" {
										loadsV = true
									}
								})
							}
						}
						walk(x.Body, loadsV)
					case *ir.If:
						walk(x.Then, pv)
						if x.Else != nil {
							walk(x.Else, pv)
						}
					case *ir.Block:
						walk(x, pv)
					case *ir.Prefetch:
						if x.Buf != "v_pages" {
							continue
						}
						if pv {
							inPV++
						} else {
							elsewhere++
						}
					}
				}
			}
			walk(k.Body, false)
			name := fmt.Sprintf("%s/%s %s", c.dc.dt, c.dc.kv, k.Level)
			paired := inPV == 0 && elsewhere > 0
			if !paired && (inPV == 0 || elsewhere != 0) {
				t.Errorf("%s: %d V prefetches in P·V's row loops and %d elsewhere: neither paired nor P·V's own", name, inPV, elsewhere)
			}
			// Below AVX-512, pairRows finds no row pass (rowPassOf) among
			// the loops that read 8-bit V rows, and those clones keep
			// P·V's own prefetches.
			if k.Level == "x86-64-v4" && paired != c.paired {
				t.Errorf("%s: paired %v (%d V prefetches in P·V's row loops, %d elsewhere), want %v", name, paired, inPV, elsewhere, c.paired)
			}
			if !c.paired && paired {
				t.Errorf("%s: V prefetched beside K's", name)
			}
		}
		if clones == 0 {
			t.Fatalf("%s/%s: no decode work clone", c.dc.dt, c.dc.kv)
		}
	}
}

// TestDotBlocksPrefetchNextBlockIntoL1 runs every level's decode work
// clone at head dim 128 (f32, f16 and bf16 rows; a group of 4 query heads,
// dot blocks of 4 keys) with a clock that ticks at each prefetch into L1
// and each product load of a pool, and marks of the first tick at which
// each 64-byte line was prefetched into L1 and first read, and of the
// last. Every K line the products read beyond the first block of its
// tile was prefetched into L1 before its first read (by the block before
// it: nextBlock), and every line prefetched into L1 is read after its last
// such prefetch — but for the last row of a tile, which the last block,
// with no block after it, prefetches again beside its own loads: a
// prefetch of a row past the tile's last (a row-offset slot the staging
// did not write for this tile, left from an earlier one) would not be
// read after it. P·V's row passes prefetch nothing into L1. Pages of 4
// and 16 positions over validIndices (three sequences of 0, 5 or 17, and
// 93 or 369 positions).
func TestDotBlocksPrefetchNextBlockIntoL1(t *testing.T) {
	for _, dt := range []ir.DType{ir.DTF32, ir.DTF16, ir.DTBF16} {
		for _, ps := range []int{4, 16} {
			v := &ir.Variant{Name: "t", QOHeads: 8, KVHeads: 2, HeadDimQK: 128, HeadDimV: 128, DType: dt, KVDType: dt,
				PageSize: ps, Scale: 0.25, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: []ir.KernelRef{{Role: ir.RoleDecode}}}
			dotBlocksPrefetchNextBlock(t, v)
		}
	}
}

func dotBlocksPrefetchNextBlock(t *testing.T, v *ir.Variant) {
	t.Helper()
	const blockKeys = 4
	name := fmt.Sprintf("%s page %d", v.DType, v.PageSize)
	m, tiling := compiled(t, v, name)
	eb := int64(max(1, v.KVDType.Type().Bits()/8))
	lineElems := 64 / eb
	rowElems := int64(v.HeadDimQK)
	// The tile-local position of every line of the pages the sequences
	// hold.
	args0 := stagedDecodeArgs(v, validIndices)
	indptr := args0["kv_indptr"].([]int32)
	pos := map[int64]int{}
	lastRow := map[int64]bool{} // lines of the last row of a tile
	lastPage := args0["kv_last_page_len"].([]int32)
	for b := 0; b+1 < len(indptr); b++ {
		n := int(indptr[b+1]-indptr[b]-1)*v.PageSize + int(lastPage[b])
		for p := indptr[b]; p < indptr[b+1]; p++ {
			for h := range v.KVHeads {
				for r := range v.PageSize {
					row := ((int64(validIndices[p])*int64(v.KVHeads)+int64(h))*int64(v.PageSize) + int64(r)) * rowElems
					for c := int64(0); c < rowElems; c += lineElems {
						at := int(p-indptr[b])*v.PageSize + r
						pos[(row+c)/lineElems] = at
						lastRow[(row+c)/lineElems] = at%tiling.DecodeKVTile == tiling.DecodeKVTile-1 || at == n-1
					}
				}
			}
		}
	}
	runs := 0
	for _, k := range m.Kernels {
		if k.Role != ir.RoleDecode || !strings.HasPrefix(k.Name, "t_decode_work") || k.Level == "" {
			continue
		}
		keys := false
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if l, ok := s.(*ir.Let); ok && l.Name == "db_nb0" && ir.ExprString(l.Value) == fmt.Sprintf("(db_nb * %d)", blockKeys) {
				keys = true
			}
			return []ir.Stmt{s}
		})
		if !keys {
			t.Fatalf("%s %s: no dot blocks of %d keys (let db_nb0 = (db_nb * %d)): this test assumes them", name, k.Name, blockKeys, blockKeys)
		}
		args := stagedDecodeArgs(v, validIndices)
		poolLines := int64(lenOf(args["k_pages"])) / lineElems
		marked := *k
		marked.Params = append([]*ir.Param{}, k.Params...)
		marked.Params = append(marked.Params, &ir.Param{Name: "clock", Buffer: true, Elem: ir.I32, Shape: []string{"1"}, Output: true})
		args["clock"] = make([]int32, 1)
		for _, p := range []string{"l1_k_pages", "l1_v_pages", "rd_k_pages", "rd_v_pages", "l1last_k_pages", "l1last_v_pages", "rdlast_k_pages", "rdlast_v_pages"} {
			marked.Params = append(marked.Params, &ir.Param{Name: p, Buffer: true, Elem: ir.I32, Shape: []string{fmt.Sprint(poolLines)}, Output: true})
			args[p] = make([]int32, poolLines)
		}
		// first ticks the clock and marks at's line in buf with the tick
		// unless it holds an earlier one, and in the buffer of last
		// ticks (what follows "_") with the tick.
		first := func(buf string, at ir.Expr) []ir.Stmt {
			line := ir.Bin(ir.Div, at, ir.IntT(at.Type(), lineElems))
			now := ir.Ld("clock", ir.I32, ir.Int(0))
			was := ir.Ld(buf, ir.I32, line)
			kind, pool, _ := strings.Cut(buf, "_")
			return []ir.Stmt{
				&ir.Store{Buf: "clock", Index: ir.Int(0), Value: ir.Bin(ir.Add, now, ir.IntT(ir.I32, 1))},
				&ir.Store{Buf: buf, Index: line, Value: ir.Sel(ir.Bin(ir.Eq, was, ir.IntT(ir.I32, 0)), now, was)},
				&ir.Store{Buf: kind + "last_" + pool, Index: line, Value: now},
			}
		}
		l1s := 0
		marked.Body = ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			out := []ir.Stmt{s}
			switch x := s.(type) {
			case *ir.Prefetch:
				if x.L1 {
					l1s++
					out = append(out, first("l1_"+x.Buf, x.Index)...)
				}
			case *ir.Let:
				ir.VisitExpr(x.Value, func(e ir.Expr) {
					if l, ok := e.(*ir.Load); ok && (l.Buf == "k_pages" || l.Buf == "v_pages") {
						out = append(out, first("rd_"+l.Buf, l.Index)...)
					}
				})
			}
			return out
		})
		if l1s == 0 {
			t.Fatalf("%s %s: no prefetch into L1", name, k.Name)
		}
		mm := &ir.Module{Kernels: []*ir.Kernel{&marked}}
		if st, err := runDirect(mm, marked.Name, args); err != nil || st != 0 {
			t.Fatalf("%s %s: status %d, %v", name, k.Name, st, err)
		}
		l1, rd := args["l1_k_pages"].([]int32), args["rd_k_pages"].([]int32)
		l1Last, rdLast := args["l1last_k_pages"].([]int32), args["rdlast_k_pages"].([]int32)
		checked := 0
		for line := range rd {
			if l1[line] != 0 && rdLast[line] <= l1Last[line] && !lastRow[int64(line)] {
				t.Errorf("%s %s: K line %d (row %d) prefetched into L1 at tick %d, last read at %d (0: never)", name, k.Name, line, int64(line)*lineElems/rowElems, l1Last[line], rdLast[line])
			}
			if rd[line] == 0 || pos[int64(line)]%tiling.DecodeKVTile < blockKeys {
				continue
			}
			checked++
			if l1[line] == 0 || l1[line] > rd[line] {
				t.Errorf("%s %s: K line %d (position %d) first read at tick %d, prefetched into L1 at %d (0: never)", name, k.Name, line, pos[int64(line)], rd[line], l1[line])
			}
		}
		if checked == 0 {
			t.Fatalf("%s %s: no K line read beyond a tile's first block", name, k.Name)
		}
		for line, x := range args["l1_v_pages"].([]int32) {
			if x != 0 {
				t.Errorf("%s %s: V line %d prefetched into L1", name, k.Name, line)
				break
			}
		}
		runs++
	}
	want := 3
	if v.DType == ir.DTBF16 {
		want = 4
	}
	if runs != want {
		t.Fatalf("%s: ran %d decode work clones, want %d", name, runs, want)
	}
}

// compiled is v lowered with the CPU target's tiling and run through its
// pass table (the verifier after each pass), and that tiling.
func compiled(t *testing.T, v *ir.Variant, name string) (*ir.Module, lower.Tiling) {
	t.Helper()
	tiling := Target{}.Tiling(v)
	m, err := lower.Lower(v, tiling)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = passes.RunTable(Table, m, passes.Options{VerifyEach: true}); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m, tiling
}
