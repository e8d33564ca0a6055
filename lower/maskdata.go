package lower

import "github.com/attnc/attnc/ir"

// Data masks: `mask tree` (DFS intervals per query token) and `mask
// custom` (packed bits) read per-call buffers, so they are not Defs over
// positions; lowering emits them as one visibility condition that joins the
// @mask clauses (every clause must allow a position) before `sinks
// tokens(N)` adds the first N back. classify-tiles leaves them alone.

func (l *lowering) hasMask(k ir.MaskKind) bool {
	for _, c := range l.v.Masks {
		if c.Kind == k {
			return true
		}
	}
	return false
}

// maskParams are the data-mask arguments; rows names the query rows.
func (l *lowering) maskParams(rows string) []*ir.Param {
	var ps []*ir.Param
	if l.hasMask(ir.MaskTree) {
		ps = append(ps, buf("tree_order", ir.I32, false, rows, "2"), buf("tree_order_indptr", ir.I32, false, "batch_size+1"))
	}
	if l.hasMask(ir.MaskCustom) {
		ps = append(ps, buf("custom_mask", ir.U8, false, "mask_bytes"), buf("mask_indptr", ir.I32, false, "batch_size+1"))
	}
	return append(ps, l.paramArgs()...)
}

// paramArgs are the variant's param tensors, each followed by the named
// dims it declares first (i32 scalars): the mask and score expressions
// read them.
func (l *lowering) paramArgs() []*ir.Param {
	var ps []*ir.Param
	seen := map[string]bool{}
	for _, p := range l.v.Params {
		var dims []*ir.Param
		for _, d := range p.Dims {
			if d.Runtime() && !seen[d.Name] {
				seen[d.Name] = true
				dims = append(dims, scalar(d.Name))
			}
		}
		ps = append(append(ps, buf(p.Name, p.T, false, paramShape(l.v, p)...)), dims...)
	}
	return ps
}

// validateMasks checks sequence vb's tree rows (exactly q_len) and mask
// bytes (enough for q_len x kv_len bits, counted in i64); the indptrs are
// already known to be ordered (validateIndptrs), so differences cannot wrap.
func (l *lowering) validateMasks(t *blk, vb, qLen, kvLen ir.Expr) {
	next := add(vb, i32(1))
	if l.hasMask(ir.MaskTree) {
		t.fail(ne(sub(ldi("tree_order_indptr", next), ldi("tree_order_indptr", vb)), qLen), ErrBadMaskIndptr)
	}
	if l.hasMask(ir.MaskCustom) {
		bytes := div(add(mul(i64(qLen), i64(kvLen)), i64c(7)), i64c(8))
		t.fail(lt(i64(sub(ldi("mask_indptr", next), ldi("mask_indptr", vb))), bytes), ErrBadMaskIndptr)
	}
}

// dataVisible is the visibility of (qPos, kvPos) under the data masks and
// the sink tokens, or nil when the variant has no data mask. qBase is the
// position of the sequence's first query token (kv_len - q_len).
func (l *lowering) dataVisible(b *blk, sb, qPos, kvPos, qBase, kvLen ir.Expr) ir.Expr {
	var vis ir.Expr
	conj := func(e ir.Expr) {
		if vis == nil {
			vis = e
		} else {
			vis = and(vis, e)
		}
	}
	i := sub(qPos, qBase) // the query token's index in its segment
	if l.hasMask(ir.MaskTree) {
		base := b.let("tree_base", ldi("tree_order_indptr", sb))
		// Positions before the tree see everything; clamp the index so the
		// (unused) loads for them stay inside the sequence's rows.
		jj := maxE(sub(kvPos, qBase), i32(0))
		left := b.let("tree_left", ldi("tree_order", mul(i64(add(base, i)), i64c(2))))
		lj := ldi("tree_order", mul(i64(add(base, jj)), i64c(2)))
		rj := ldi("tree_order", add(mul(i64(add(base, jj)), i64c(2)), i64c(1)))
		conj(or(lt(kvPos, qBase), and(le(lj, left), lt(left, rj))))
	}
	if l.hasMask(ir.MaskCustom) {
		bit := b.let("mask_bit", add(mul(i64(i), i64(kvLen)), i64(kvPos)))
		by := ir.Cvt(ir.I32, ld("custom_mask", ir.U8, add(i64(ldi("mask_indptr", sb)), div(bit, ir.IntT(ir.I64, 8)))))
		conj(ne(ir.Bin(ir.And, ir.Bin(ir.Shr, by, ir.Cvt(ir.I32, rem(bit, ir.IntT(ir.I64, 8)))), i32(1)), i32(0)))
	}
	if vis == nil {
		return nil
	}
	if l.v.Sinks != nil && l.v.Sinks.Kind == ir.SinkTokens {
		vis = or(vis, and(lt(kvPos, i32(l.v.Sinks.Tokens)), le(kvPos, qPos)))
	}
	return vis
}

// hideUnless appends `if not(vis) { s = -inf } @mask` when vis is not
// nil. Tagged @mask like the Def's if, it joins the tile classification
// (classify-tiles): a tile the data mask cannot hide (a tree's positions
// before the tree) drops it with the rest of the mask.
func hideUnless(b *blk, vis ir.Expr) {
	if vis != nil {
		b.when(not(vis), func(x *blk) { x.set("s", negInf()) }).Tag = ir.TagMask
	}
}
