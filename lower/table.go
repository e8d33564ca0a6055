package lower

import (
	"math"
	"math/bits"

	"github.com/attnc/attnc/ir"
)

// The page table is the only thing CSR and block-table kernels differ in:
// its arguments, its validation, a sequence's (table offset, cached length)
// and where the K/V rows of a position are. Every skeleton goes through the
// pageTable interface below, one implementation per encoding; the ragged
// rows of prefill_ragged (ragged.go) are one more.
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

// pageTable is how the skeleton finds a position's K/V rows: one
// page-table encoding over the paged pool (CSR, block table), or K/V held
// contiguously and ragged by an indptr (prefill_ragged), which is a table
// without pages. It gives its arguments, the scalar checks and indptrs of
// those arguments, the walk (a sequence's base and length, where the rows
// of a position are) and the validation of a sequence's entries and of
// the page ids. Lowering asks the table for these and branches on its
// kind nowhere else; a new encoding is one more implementation.
type pageTable interface {
	// params are the K/V arguments: the pools (a quantized cache's scales
	// included), num_pages and the table's own, or the ragged rows and
	// their indptr.
	params() []*ir.Param
	// checks are step 1 for the table's scalars (beyond batch_size).
	checks() []ir.Check
	// indptrs are the table's indptr arguments (step 2).
	indptrs() []indptr
	// seqPages binds, in a work kernel, sequence sb's base (i64, kv_beg:
	// its offset into the page-id buffer or its first row) and its
	// length (kv_len), forced in i64 into what the table can describe
	// and 0..MaxSeqLen: a GPU kernel cannot report bad input (the CPU
	// entry has validated it).
	seqPages(b *blk, sb ir.Expr) (base, kvLen ir.Expr)
	// rowAt binds in b where position pos (of the sequence at base) keeps
	// its K and V rows: one page-table lookup, which also serves the
	// positions after pos on its page (a page run). It returns the
	// condition under which they may be read (a page in the pool and not
	// hidden; nil: always) and locate, which binds inside that condition
	// what the rows need and returns the i64 element offset of the row of
	// position pos+js (js nil: 0; pos+js on pos's page) and kv head kvh in
	// a K or V buffer of head dim d.
	rowAt(b *blk, base, pos ir.Expr) (readable ir.Expr, locate func(*blk) func(js, kvh ir.Expr, d int) ir.Expr)
	// pageRun is how many positions, from a multiple of it, one rowAt
	// lookup serves: the page size, or MaxSeqLen for rows without pages.
	pageRun() int
	// bufs are the buffers holding the K and the V rows.
	bufs() (k, v string)
	// validateSeq is step 3 for the table: sequence vb's cached length
	// and, where the table holds them per sequence, its page ids; it
	// returns the length (i32, at most MaxSeqLen).
	validateSeq(t *blk, vb *ir.Ref) ir.Expr
	// validatePageIDs is step 4: the page ids the sequences name, where
	// validateSeq did not check them.
	validatePageIDs(b *blk)
}

// pagePool is the paged cache a page table points into: its arguments
// (the pools, then a quantized cache's scales), page size and the element
// offset of (page, kv head, slot) in a pool of head dim d.
type pagePool struct {
	args []*ir.Param
	ps   int
	row  func(page, kvh, slot ir.Expr, d int) ir.Expr
}

// newPageTable is the page table of kind t over pool.
func newPageTable(t ir.Table, pool pagePool) pageTable {
	if t == ir.BlockTable {
		return blockTable{pool}
	}
	return csrTable{pool}
}

// poolParams are a page table's arguments: the pool's, num_pages, then
// the table's own.
func (p pagePool) poolParams(table ...*ir.Param) []*ir.Param {
	return append(append(append([]*ir.Param(nil), p.args...), scalar("num_pages")), table...)
}

func (pagePool) bufs() (k, v string) { return "k_pages", "v_pages" }

// rowAt reads position pos's page id from the table (pageAt); its rows
// are readable when the page is in the pool (-1, hidden, is not). The
// rows of pos+js are slot (pos's) + js of the same page.
func (p pagePool) rowAt(b *blk, pos ir.Expr, pageAt ir.Expr) (ir.Expr, func(*blk) func(ir.Expr, ir.Expr, int) ir.Expr) {
	page := b.let("page", pageAt)
	return and(ge(page, i32(0)), lt(page, ir.R("num_pages", ir.I32))), func(z *blk) func(ir.Expr, ir.Expr, int) ir.Expr {
		slot := z.let("slot", ir.Bin(ir.And, pos, i32(p.ps-1)))
		return func(js, kvh ir.Expr, d int) ir.Expr {
			if js == nil {
				return p.row(page, kvh, slot, d)
			}
			return p.row(page, kvh, add(slot, js), d)
		}
	}
}

func (p pagePool) pageRun() int { return p.ps }

// pageIn is the page id of position pos in buffer ids, whose sequence
// starts at base, for pages of ps slots.
func pageIn(ids string, base, pos ir.Expr, ps int) ir.Expr {
	return ldi(ids, add(base, i64(ir.Bin(ir.Shr, pos, i32(bits.TrailingZeros(uint(ps)))))))
}

// csrTable is FlashInfer's table: sequence b's pages are
// kv_indices[kv_indptr[b] .. kv_indptr[b+1]), the last one filled to
// kv_last_page_len[b].
type csrTable struct{ pagePool }

func (c csrTable) params() []*ir.Param {
	return c.poolParams(
		buf("kv_indptr", ir.I32, false, "batch_size+1"),
		buf("kv_indices", ir.I32, false, "nnz_pages"),
		buf("kv_last_page_len", ir.I32, false, "batch_size"),
	)
}

func (csrTable) checks() []ir.Check { return []ir.Check{numPagesCheck()} }

func (csrTable) indptrs() []indptr { return []indptr{{"kv_indptr", ErrBadKVIndptr}} }

func (c csrTable) seqPages(b *blk, sb ir.Expr) (base, kvLen ir.Expr) {
	beg := ldi("kv_indptr", sb)
	base = b.let("kv_beg", i64(beg))
	np := b.let("np", maxE(sub(i64(ldi("kv_indptr", add(sb, i32(1)))), i64(beg)), i64c(0)))
	last := minE(maxE(ldi("kv_last_page_len", sb), i32(1)), i32(c.ps))
	n := sel(gt(np, i64c(0)), add(mul(sub(np, i64c(1)), i64c(c.ps)), i64(last)), i64c(0))
	return base, b.let("kv_len", ir.Cvt(ir.I32, minE(n, i64c(MaxSeqLen))))
}

func (c csrTable) rowAt(b *blk, base, pos ir.Expr) (ir.Expr, func(*blk) func(ir.Expr, ir.Expr, int) ir.Expr) {
	return c.pagePool.rowAt(b, pos, pageIn("kv_indices", base, pos, c.ps))
}

func (c csrTable) validateSeq(t *blk, vb *ir.Ref) ir.Expr {
	// kv_indptr is ordered (step 2): the page count cannot wrap.
	n := t.let("v_np", sub(ldi("kv_indptr", add(vb, i32(1))), ldi("kv_indptr", vb)))
	last := t.let("v_last", ldi("kv_last_page_len", vb))
	t.fail(and(gt(n, i32(0)), or(lt(last, i32(1)), gt(last, i32(c.ps)))), ErrBadLastPageLen)
	kvLen := t.let("v_kv_len64", sel(gt(n, i32(0)), add(mul(sub(i64(n), i64c(1)), i64c(c.ps)), i64(last)), i64c(0)))
	t.fail(gt(kvLen, i64c(MaxSeqLen)), ErrBadKVLen)
	return t.let("v_kv_len", ir.Cvt(ir.I32, kvLen))
}

// validatePageIDs checks every page id the sequences name,
// kv_indices[kv_indptr[0] .. kv_indptr[batch_size]) (a range step 2
// proved ordered).
func (csrTable) validatePageIDs(b *blk) {
	bs := ir.R("batch_size", ir.I32)
	b.when(gt(bs, i32(0)), func(t *blk) {
		t.loop("vj", ldi("kv_indptr", i32(0)), ldi("kv_indptr", bs), ir.Serial, ir.TagValidate, func(u *blk) {
			pg := u.let("v_page", ldi("kv_indices", ir.R("vj", ir.I32)))
			u.fail(badPage(pg), ErrBadPageID)
		})
	})
}

// blockTable is vLLM's table: row b of block_table [batch_size,
// max_blocks] holds sequence b's pages, kv_lens[b] its cached length.
type blockTable struct{ pagePool }

func (bt blockTable) params() []*ir.Param {
	return bt.poolParams(
		buf("block_table", ir.I32, false, "batch_size", "max_blocks"),
		scalar("max_blocks"),
		buf("kv_lens", ir.I32, false, "batch_size"),
	)
}

func (blockTable) checks() []ir.Check {
	return []ir.Check{numPagesCheck(), {Fail: lt(ir.R("max_blocks", ir.I32), i32(0)), Code: ErrBadArgument}}
}

func (blockTable) indptrs() []indptr { return nil }

func (bt blockTable) seqPages(b *blk, sb ir.Expr) (base, kvLen ir.Expr) {
	mb := ir.R("max_blocks", ir.I32)
	base = b.let("kv_beg", mul(i64(sb), i64(mb)))
	lim := minE(mul(i64(maxE(mb, i32(0))), i64c(bt.ps)), i64c(MaxSeqLen))
	return base, b.let("kv_len", ir.Cvt(ir.I32, minE(i64(maxE(ldi("kv_lens", sb), i32(0))), lim)))
}

func (bt blockTable) rowAt(b *blk, base, pos ir.Expr) (ir.Expr, func(*blk) func(ir.Expr, ir.Expr, int) ir.Expr) {
	return bt.pagePool.rowAt(b, pos, pageIn("block_table", base, pos, bt.ps))
}

// validateSeq checks kv_lens[vb] and the sequence's ceil(kv_len /
// page_size) page ids.
func (bt blockTable) validateSeq(t *blk, vb *ir.Ref) ir.Expr {
	mb := ir.R("max_blocks", ir.I32)
	kvLen := t.let("v_kv_len", ldi("kv_lens", vb))
	t.fail(or(or(lt(kvLen, i32(0)), gt(kvLen, i32(MaxSeqLen))), gt(i64(kvLen), mul(i64(mb), i64c(bt.ps)))), ErrBadKVLen)
	// kv_len <= max_blocks*page_size: the row has these entries.
	base := t.let("v_kv_beg", mul(i64(vb), i64(mb)))
	t.loop("vj", i32(0), ceilDiv(kvLen, bt.ps), ir.Serial, ir.NoTag, func(u *blk) {
		pg := u.let("v_page", ldi("block_table", add(base, i64(ir.R("vj", ir.I32)))))
		u.fail(badPage(pg), ErrBadPageID)
	})
	return kvLen
}

// validatePageIDs does nothing: validateSeq checked each sequence's ids.
func (blockTable) validatePageIDs(*blk) {}

// numPagesCheck is step 1 for num_pages.
func numPagesCheck() ir.Check {
	return ir.Check{Fail: lt(ir.R("num_pages", ir.I32), i32(0)), Code: ErrBadArgument}
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
	out = append(out, l.pt.indptrs()...)
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

// tableChecks is step 1: the scalar checks of the cache arguments, which
// every target runs before anything is read (a GPU launcher on the host).
func (l *lowering) tableChecks() []ir.Check {
	cs := []ir.Check{{Fail: lt(ir.R("batch_size", ir.I32), i32(0)), Code: ErrBadArgument}}
	for _, d := range l.v.ParamDimNames() { // a param's runtime dims
		cs = append(cs, ir.Check{Fail: lt(ir.R(d, ir.I32), i32(0)), Code: ErrBadArgument})
	}
	return append(append(cs, l.pt.checks()...), ropeChecks(l.v.InlineRope())...)
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
		kvLen := l.pt.validateSeq(t, vb)
		if !l.v.NonCausal() { // mask none: cross attention takes any q_len and kv_len
			t.fail(gt(qLen, kvLen), ErrQLenExceedsKVLen)
		}
		l.validateMasks(t, vb, qLen, kvLen)
		l.validateRopePositions(t, vb, qBeg, qLen, kvLen)
		each(t, map[string]ir.Expr{ir.SeqB: vb, ir.SeqQBeg: qBeg, ir.SeqQLen: qLen, ir.SeqKVLen: kvLen})
	})
	l.pt.validatePageIDs(b)
}

// tooLarge is step 5: TOO_LARGE when the i64 item count n exceeds
// MaxItems.
func tooLarge(n ir.Expr) ir.Check { return ir.Check{Fail: gt(n, i64c(MaxItems)), Code: ErrTooLarge} }

func i64c(v int) *ir.Const { return ir.IntT(ir.I64, int64(v)) }
