package lower

import (
	"math/bits"

	"github.com/attnc/attnc/ir"
)

// The page table is the only thing CSR and block-table kernels differ in:
// its arguments, its validation, a sequence's (table offset, cached length)
// and the page of a position. Every skeleton goes through these.

// ErrBadKVLen rejects a block-table length that does not fit the table.
const ErrBadKVLen = -9

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

// hidesBlocks reports whether a table entry may hide a page, which then
// reads as masked and is never read: -1 in a block table and, as DESIGN §3
// says, -1 in a CSR table's kv_indices alike.
func (l *lowering) hidesBlocks() bool { return true }

// seqPages binds sequence sb's offset into the page-id buffer and its
// cached length. With clamp (GPU kernels, which cannot report bad input)
// the length is forced into what the table can describe.
func (l *lowering) seqPages(b *blk, sb ir.Expr, prefix string, clamp bool) (base, kvLen ir.Expr) {
	if l.v.Table == ir.BlockTable {
		mb := ir.R("max_blocks", ir.I32)
		base = b.let(prefix+"kv_beg", mul(sb, mb))
		n := ldi("kv_lens", sb)
		if clamp {
			n = minE(maxE(n, i32(0)), mul(maxE(mb, i32(0)), i32(l.PS)))
		}
		return base, b.let(prefix+"kv_len", n)
	}
	base = b.let(prefix+"kv_beg", ldi("kv_indptr", sb))
	np := sub(ldi("kv_indptr", add(sb, i32(1))), base)
	last := ldi("kv_last_page_len", sb)
	if clamp {
		np = maxE(np, i32(0))
		last = minE(maxE(last, i32(1)), i32(l.PS))
	}
	npRef := b.let(prefix+"np", np)
	return base, b.let(prefix+"kv_len", sel(gt(npRef, i32(0)), add(mul(sub(npRef, i32(1)), i32(l.PS)), last), i32(0)))
}

// pageAt is the page id of position pos.
func (l *lowering) pageAt(base, pos ir.Expr) ir.Expr {
	return ldi(l.tableBuf(), add(base, ir.Bin(ir.Shr, pos, i32(bits.TrailingZeros(uint(l.PS))))))
}

// validateTable checks the table-wide scalars and sequence vb's entries;
// it returns vb's cached length.
func (l *lowering) validateTable(t *blk, vb *ir.Ref) ir.Expr {
	np := ir.R("num_pages", ir.I32)
	if l.v.Table == ir.BlockTable {
		mb := ir.R("max_blocks", ir.I32)
		base, kvLen := l.seqPages(t, vb, "v_", false)
		t.fail(or(lt(kvLen, i32(0)), gt(kvLen, mul(mb, i32(l.PS)))), ErrBadKVLen)
		t.loop("vj", i32(0), ceilDiv(kvLen, l.PS), ir.Serial, "", func(u *blk) {
			pg := u.let("v_page", ldi("block_table", add(base, ir.R("vj", ir.I32))))
			u.fail(or(lt(pg, i32(-1)), ge(pg, np)), ErrBadPageID)
		})
		return kvLen
	}
	kvBeg := t.let("v_kv_beg", ldi("kv_indptr", vb))
	n := t.let("v_np", sub(ldi("kv_indptr", add(vb, i32(1))), kvBeg))
	t.fail(lt(n, i32(0)), ErrBadKVIndptr)
	t.when(gt(n, i32(0)), func(u *blk) {
		last := u.let("v_last", ldi("kv_last_page_len", vb))
		u.fail(or(lt(last, i32(1)), gt(last, i32(l.PS))), ErrBadLastPageLen)
	})
	kvLen := t.let("v_kv_len", sel(gt(n, i32(0)), add(mul(sub(n, i32(1)), i32(l.PS)), ldi("kv_last_page_len", vb)), i32(0)))
	t.loop("vj", kvBeg, add(kvBeg, n), ir.Serial, "", func(u *blk) {
		pg := u.let("v_page", ldi("kv_indices", ir.R("vj", ir.I32)))
		u.fail(or(lt(pg, i32(-1)), ge(pg, np)), ErrBadPageID) // -1 hides the page
	})
	return kvLen
}

// validateTableScalars checks the table's scalar arguments.
func (l *lowering) validateTableScalars(b *blk) {
	if l.v.Table == ir.BlockTable {
		b.fail(lt(ir.R("max_blocks", ir.I32), i32(0)), ErrBadArgument)
		return
	}
	b.when(gt(ir.R("batch_size", ir.I32), i32(0)), func(t *blk) {
		t.fail(lt(ldi("kv_indptr", i32(0)), i32(0)), ErrBadKVIndptr)
	})
}
