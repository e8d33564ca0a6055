package lower

import (
	"math"
	"math/bits"

	"github.com/attnc/attnc/ir"
)

// The page table is the only thing CSR and block-table kernels differ in:
// its arguments, its validation, a sequence's (table offset, cached length)
// and the page of a position. Every skeleton goes through these.
//
// Kernel inputs are untrusted. The CPU entries validate them completely
// before the first read of data (q, the pools, the masks' contents), in an
// order where every read is justified by an earlier check, and with every
// size computed in i64 or by comparing neighbours (never a subtraction or
// product that could wrap in i32):
//
//  1. scalars: batch_size, num_pages, max_blocks (and n) >= 0;
//  2. every indptr (qo_indptr, kv_indptr, tree_order_indptr, mask_indptr),
//     whole: entry 0 >= 0 and entry b <= entry b+1 for b < batch_size (the
//     ABI gives them batch_size+1 entries, readable once 1. holds);
//     tree_order_indptr[batch_size] <= total_q;
//  3. per sequence (the arrays of batch_size entries): q_len and kv_len in
//     0..MaxSeqLen, kv_last_page_len in 1..page_size for a sequence with
//     pages, kv_lens <= max_blocks*page_size, q_len <= kv_len, the mask
//     rows and bytes; block tables: the sequence's ceil(kv_len/page_size)
//     entries, each -1 or in 0..num_pages-1;
//  4. CSR page ids: kv_indices[j] for j in kv_indptr[0]..kv_indptr[batch_size]
//     (a range 2. proved ordered), each -1 or in 0..num_pages-1;
//  5. the work fits the parallel loops: at most MaxItems work items, else
//     TOO_LARGE.
//
// What the kernels trust (the ABI's shapes, which no kernel can check):
// q and o have qo_indptr[batch_size] rows (decode: batch_size), kv_indices
// has kv_indptr[batch_size] entries, block_table batch_size*max_blocks,
// custom_mask mask_indptr[batch_size] bytes, and the pools num_pages pages.

// MaxSeqLen is the most query or cached tokens one sequence may have
// (2^30). Positions, and the sums kernels form from them (tile ends, the
// rows of a query tile), then stay far from i32 overflow. Longer sequences
// are rejected with BAD_QO_INDPTR or BAD_KV_LEN.
const MaxSeqLen = ir.MaxSeqLen

// MaxItems is the most work items one parallel loop may have (the loops
// count in i32); a call that needs more returns TOO_LARGE.
const MaxItems = math.MaxInt32

// tableParams are the page-table arguments.
func (l *lowering) tableParams() []*ir.Param {
	if l.v.Table == ir.BlockTable {
		return []*ir.Param{
			buf("block_table", ir.I32, false, "batch_size", "max_blocks"),
			scalar("max_blocks"),
			buf("kv_lens", ir.I32, false, "batch_size"),
		}
	}
	return []*ir.Param{
		buf("kv_indptr", ir.I32, false, "batch_size+1"),
		buf("kv_indices", ir.I32, false, "nnz_pages"),
		buf("kv_last_page_len", ir.I32, false, "batch_size"),
	}
}

// tableBuf is the buffer holding page ids.
func (l *lowering) tableBuf() string {
	if l.v.Table == ir.BlockTable {
		return "block_table"
	}
	return "kv_indices"
}

// seqPages binds sequence sb's offset into the page-id buffer (i64) and its
// cached length. With clamp (GPU kernels, which cannot report bad input)
// the length is forced, in i64, into what the table can describe and
// 0..MaxSeqLen.
func (l *lowering) seqPages(b *blk, sb ir.Expr, prefix string, clamp bool) (base, kvLen ir.Expr) {
	if l.v.Table == ir.BlockTable {
		mb := ir.R("max_blocks", ir.I32)
		base = b.let(prefix+"kv_beg", mul(i64(sb), i64(mb)))
		n := ldi("kv_lens", sb)
		if clamp {
			lim := minE(mul(i64(maxE(mb, i32(0))), i64c(l.PS)), i64c(MaxSeqLen))
			n = ir.Cvt(ir.I32, minE(i64(maxE(n, i32(0))), lim))
		}
		return base, b.let(prefix+"kv_len", n)
	}
	beg := ldi("kv_indptr", sb)
	base = b.let(prefix+"kv_beg", i64(beg))
	if clamp {
		np := b.let(prefix+"np", maxE(sub(i64(ldi("kv_indptr", add(sb, i32(1)))), i64(beg)), i64c(0)))
		last := minE(maxE(ldi("kv_last_page_len", sb), i32(1)), i32(l.PS))
		n := sel(gt(np, i64c(0)), add(mul(sub(np, i64c(1)), i64c(l.PS)), i64(last)), i64c(0))
		return base, b.let(prefix+"kv_len", ir.Cvt(ir.I32, minE(n, i64c(MaxSeqLen))))
	}
	npRef := b.let(prefix+"np", sub(ldi("kv_indptr", add(sb, i32(1))), beg))
	last := ldi("kv_last_page_len", sb)
	return base, b.let(prefix+"kv_len", sel(gt(npRef, i32(0)), add(mul(sub(npRef, i32(1)), i32(l.PS)), last), i32(0)))
}

// pageAt is the page id of position pos (base from seqPages).
func (l *lowering) pageAt(base, pos ir.Expr) ir.Expr {
	return ldi(l.tableBuf(), add(base, i64(ir.Bin(ir.Shr, pos, i32(bits.TrailingZeros(uint(l.PS)))))))
}

// badPage is true for a page id that is neither -1 (hidden) nor in
// 0..num_pages-1.
func badPage(pg ir.Expr) ir.Expr {
	return or(lt(pg, i32(-1)), ge(pg, ir.R("num_pages", ir.I32)))
}

// indptr is an indptr argument and the status its violations return.
type indptr struct {
	name string
	code int
}

// indptrs lists the indptr arguments of an attention entry (prefill has
// qo_indptr).
func (l *lowering) indptrs(prefill bool) []indptr {
	var out []indptr
	if prefill {
		out = append(out, indptr{"qo_indptr", ErrBadQOIndptr})
	}
	if l.v.Table == ir.CSR {
		out = append(out, indptr{"kv_indptr", ErrBadKVIndptr})
	}
	if l.hasMask(ir.MaskTree) {
		out = append(out, indptr{"tree_order_indptr", ErrBadMaskIndptr})
	}
	if l.hasMask(ir.MaskCustom) {
		out = append(out, indptr{"mask_indptr", ErrBadMaskIndptr})
	}
	return out
}

// validateIndptrs is step 2: every indptr starts at or above 0 and never
// decreases, compared neighbour with neighbour. Nothing is read when
// batch_size is 0.
func (l *lowering) validateIndptrs(b *blk, prefill bool) {
	bs := ir.R("batch_size", ir.I32)
	ips := l.indptrs(prefill)
	b.when(gt(bs, i32(0)), func(t *blk) {
		for _, ip := range ips {
			t.fail(lt(ldi(ip.name, i32(0)), i32(0)), ip.code)
		}
		vi := ir.R("vi", ir.I32)
		t.loop("vi", i32(0), bs, ir.Serial, ir.TagValidate, func(u *blk) {
			for _, ip := range ips {
				u.fail(lt(ldi(ip.name, add(vi, i32(1))), ldi(ip.name, vi)), ip.code)
			}
		})
		if l.hasMask(ir.MaskTree) {
			// The tree rows must lie inside tree_order's total_q rows.
			rows := ir.Expr(bs)
			if prefill {
				rows = ldi("qo_indptr", bs)
			}
			t.fail(gt(ldi("tree_order_indptr", bs), rows), ErrBadMaskIndptr)
		}
	})
}

// validateTable is step 3 for the table: sequence vb's cached length (and,
// for a block table, its page ids); it returns the length (i32, at most
// MaxSeqLen).
func (l *lowering) validateTable(t *blk, vb *ir.Ref) ir.Expr {
	if l.v.Table == ir.BlockTable {
		mb := ir.R("max_blocks", ir.I32)
		kvLen := t.let("v_kv_len", ldi("kv_lens", vb))
		t.fail(or(or(lt(kvLen, i32(0)), gt(kvLen, i32(MaxSeqLen))), gt(i64(kvLen), mul(i64(mb), i64c(l.PS)))), ErrBadKVLen)
		// kv_len <= max_blocks*page_size: the row has these entries.
		base := t.let("v_kv_beg", mul(i64(vb), i64(mb)))
		t.loop("vj", i32(0), ceilDiv(kvLen, l.PS), ir.Serial, ir.NoTag, func(u *blk) {
			pg := u.let("v_page", ldi("block_table", add(base, i64(ir.R("vj", ir.I32)))))
			u.fail(badPage(pg), ErrBadPageID)
		})
		return kvLen
	}
	// kv_indptr is ordered (step 2): the page count cannot wrap.
	n := t.let("v_np", sub(ldi("kv_indptr", add(vb, i32(1))), ldi("kv_indptr", vb)))
	last := t.let("v_last", ldi("kv_last_page_len", vb))
	t.fail(and(gt(n, i32(0)), or(lt(last, i32(1)), gt(last, i32(l.PS)))), ErrBadLastPageLen)
	kvLen := t.let("v_kv_len64", sel(gt(n, i32(0)), add(mul(sub(i64(n), i64c(1)), i64c(l.PS)), i64(last)), i64c(0)))
	t.fail(gt(kvLen, i64c(MaxSeqLen)), ErrBadKVLen)
	return t.let("v_kv_len", ir.Cvt(ir.I32, kvLen))
}

// tableChecks is step 1: the scalar checks of the cache arguments, which
// every target runs before anything is read (a GPU launcher on the host).
func (l *lowering) tableChecks() []ir.Check {
	cs := []ir.Check{
		{Fail: lt(ir.R("batch_size", ir.I32), i32(0)), Code: ErrBadArgument},
		{Fail: lt(ir.R("num_pages", ir.I32), i32(0)), Code: ErrBadArgument},
	}
	if l.v.Table == ir.BlockTable {
		cs = append(cs, ir.Check{Fail: lt(ir.R("max_blocks", ir.I32), i32(0)), Code: ErrBadArgument})
	}
	return cs
}

// validatePageIDs is step 4 for CSR tables: every page id the sequences
// name, kv_indices[kv_indptr[0] .. kv_indptr[batch_size]).
func (l *lowering) validatePageIDs(b *blk) {
	if l.v.Table == ir.BlockTable {
		return // checked per sequence in validateTable
	}
	bs := ir.R("batch_size", ir.I32)
	b.when(gt(bs, i32(0)), func(t *blk) {
		t.loop("vj", ldi("kv_indptr", i32(0)), ldi("kv_indptr", bs), ir.Serial, ir.TagValidate, func(u *blk) {
			pg := u.let("v_page", ldi("kv_indices", ir.R("vj", ir.I32)))
			u.fail(badPage(pg), ErrBadPageID)
		})
	})
}

// validateCache is steps 2 to 4 for an attention entry (after the scalar
// checks of tableChecks): the indptrs, every sequence's lengths, masks and
// (block tables) page ids, then the CSR page ids, before any data is read.
// Sequence b's query offset and length are qo_indptr's (prefill) or b and
// 1 (decode); each folds per-sequence plan values over the names b,
// q_beg, q_len and kv_len after the sequence's checks.
func (l *lowering) validateCache(b *blk, prefill bool, each func(*blk, map[string]ir.Expr)) {
	l.validateIndptrs(b, prefill)
	b.loop("vs", i32(0), ir.R("batch_size", ir.I32), ir.Serial, ir.TagValidate, func(t *blk) {
		vb := ir.R("vs", ir.I32)
		var qBeg, qLen ir.Expr = vb, i32(1)
		if prefill {
			// qo_indptr is ordered: the difference cannot wrap.
			qBeg = t.let("v_q_beg", ldi("qo_indptr", vb))
			qLen = t.let("v_q_len", sub(ldi("qo_indptr", add(vb, i32(1))), qBeg))
			t.fail(gt(qLen, i32(MaxSeqLen)), ErrBadQOIndptr)
		}
		kvLen := l.validateTable(t, vb)
		if !l.v.NonCausal() { // mask none: cross attention takes any q_len and kv_len
			t.fail(gt(qLen, kvLen), ErrQLenExceedsKVLen)
		}
		l.validateMasks(t, vb, qLen, kvLen)
		each(t, map[string]ir.Expr{ir.SeqB: vb, ir.SeqQBeg: qBeg, ir.SeqQLen: qLen, ir.SeqKVLen: kvLen})
	})
	l.validatePageIDs(b)
}

// tooLarge is step 5: TOO_LARGE when the i64 item count n exceeds
// MaxItems.
func tooLarge(n ir.Expr) ir.Check { return ir.Check{Fail: gt(n, i64c(MaxItems)), Code: ErrTooLarge} }

func i64c(v int) *ir.Const { return ir.IntT(ir.I64, int64(v)) }
