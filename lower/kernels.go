package lower

import (
	"math"

	"github.com/attnc/attnc/ir"
)

// MaskDef states the variant's visibility rule as one boolean expression
// over q_pos, kv_pos, head and batch: every mask clause must allow a
// position, then `sinks tokens(N)` adds the first N (causal) positions back.
func MaskDef(v *ir.Variant) *ir.Def {
	qPos, kvPos := ir.R("q_pos", ir.I32), ir.R("kv_pos", ir.I32)
	var vis ir.Expr = ir.BoolConst(true)
	conj := func(e ir.Expr) {
		if ir.IsTrue(vis) {
			vis = e
		} else {
			vis = and(vis, e)
		}
	}
	for _, c := range v.Masks {
		switch c.Kind {
		case ir.MaskCausal:
			conj(le(kvPos, qPos))
		case ir.MaskNone:
		case ir.MaskWindow:
			conj(and(le(kvPos, qPos), le(sub(qPos, kvPos), i32(c.Left))))
		case ir.MaskExpr:
			conj(c.Expr)
		}
	}
	if v.Sinks != nil && v.Sinks.Kind == ir.SinkTokens {
		vis = or(vis, and(lt(kvPos, i32(v.Sinks.Tokens)), le(kvPos, qPos)))
	}
	return &ir.Def{Name: "mask", Params: []*ir.Param{scalar("q_pos"), scalar("kv_pos"), scalar("head"), scalar("batch")}, Body: vis}
}

// ScoreDef states the score transform over score (already scaled), q_pos,
// kv_pos and head; the identity when the variant has none.
func ScoreDef(v *ir.Variant) *ir.Def {
	var body ir.Expr = ir.R("score", ir.F32)
	if v.Score != nil {
		body = ir.Cvt(ir.F32, v.Score)
	}
	return &ir.Def{Name: "score", Params: []*ir.Param{{Name: "score", Elem: ir.F32}, scalar("q_pos"), scalar("kv_pos"), scalar("head")}, Body: body}
}

// PlanSplitsDef is the split-KV rule shared by the registry (evaluated in Go)
// and the generated decode entry: with fewer (sequence, kv head) items than
// threads, split each sequence's KV tiles into enough chunks to give every
// thread work, never more chunks than tiles.
func PlanSplitsDef() *ir.Def {
	items, threads, tiles := ir.R("items", ir.I32), ir.R("threads", ir.I32), ir.R("max_tiles", ir.I32)
	want := div(add(threads, sub(maxE(items, i32(1)), i32(1))), maxE(items, i32(1)))
	body := sel(ge(items, threads), i32(1), maxE(i32(1), minE(want, tiles)))
	return &ir.Def{Name: "plan_splits", Params: []*ir.Param{scalar("items"), scalar("threads"), scalar("max_tiles")}, Body: body}
}

func (l *lowering) name(role string) string { return l.p + "_" + role }

// headTiles is the number of CPU work items a GQA group splits into.
func (l *lowering) headTiles() int { return l.G / HeadTile(l.G) }

// splitItem binds a work item's sequence, kv head and head tile from x =
// (b * kv_heads + kvh) * headTiles + ht.
func (l *lowering) splitItem(b *blk, x ir.Expr) (sb, kvh, ht ir.Expr) {
	if n := l.headTiles(); n > 1 {
		ht = b.let("ht", rem(x, i32(n)))
		x = b.let("rest_h", div(x, i32(n)))
	} else {
		ht = i32(0)
	}
	kvh = b.let("kvh", rem(x, i32(l.KVH)))
	return b.let("b", div(x, i32(l.KVH))), kvh, ht
}

// prefill is the ragged-query entry. When every sequence has exactly one
// query token laid out as in decode, it dispatches to the decode kernel
// (which may split KV); otherwise it runs (sequence, kv head, query tile)
// work items over the thread pool.
func (l *lowering) prefill(decodeIsEntry bool) *ir.Kernel {
	QT := QTile(HeadTile(l.G))
	params := l.prefillParams()
	var b blk
	b.vr("max_qt", i32(0))
	b.vr("single", ir.BoolConst(true))
	l.validateCache(&b, true, func(t *blk, vb *ir.Ref, qLen, kvLen ir.Expr) {
		t.set("single", and(ir.R("single", ir.Bool), and(eq(qLen, i32(1)), eq(ldi("qo_indptr", vb), vb))))
		t.set("max_qt", maxE(ir.R("max_qt", ir.I32), ceilDiv(qLen, QT)))
	})
	bs := ir.R("batch_size", ir.I32)
	b.when(and(ir.R("single", ir.Bool), gt(bs, i32(0))), func(t *blk) {
		var args []ir.Expr
		for _, p := range l.decodeParams() {
			args = append(args, ir.R(p.Name, p.Elem))
		}
		t.add(&ir.CallStmt{Result: "st", Fn: l.name("decode"), Args: args})
		t.add(&ir.Return{Value: ir.R("st", ir.I32)})
	})
	maxQT := ir.R("max_qt", ir.I32)
	// Items in i64: (sequence, kv head, head tile) units, capped at 2^31 so
	// that the product with max_qt cannot wrap i64 either.
	units := minE(mul(i64(bs), i64c(l.KVH*l.headTiles())), i64c(MaxItems+1))
	nItems64 := b.let("n_items64", mul(units, i64(maxQT)))
	failTooLarge(&b, nItems64)
	nItems := b.let("n_items", ir.Cvt(ir.I32, nItems64))
	item := ir.R("item", ir.I32)
	b.loop("item", i32(0), nItems, ir.Parallel, "work", func(t *blk) {
		qt := t.let("qt", rem(item, maxQT))
		sb, kvh, ht := l.splitItem(t, t.let("rest", div(item, maxQT)))
		qBeg := t.let("q_beg", ldi("qo_indptr", sb))
		qLen := t.let("q_len", sub(ldi("qo_indptr", add(sb, i32(1))), qBeg))
		qLo := t.let("q_lo", mul(qt, i32(QT)))
		t.when(ge(qLo, qLen), func(u *blk) { u.add(&ir.Continue{}) })
		rows := t.let("rows", minE(i32(QT), sub(qLen, qLo)))
		kvBeg, kvLen := l.seqPages(t, sb, "", false)
		l.attend(t, tileWork{qt: QT, b: sb, kvh: kvh, ht: ht, qRow0: add(qBeg, qLo), rows: rows, qBase: sub(kvLen, qLen), qSeqRow: qBeg,
			qPos0: t.let("q_pos0", add(sub(kvLen, qLen), qLo)), kvBeg: kvBeg, kvLen: kvLen,
			tileLo: i32(0), tileHi: ceilDiv(kvLen, KVTile), store: l.storeOut})
	})
	b.add(&ir.Return{Value: i32(0)})
	return &ir.Kernel{Name: l.name("prefill"), Role: ir.RolePrefill, Entry: true, Params: params, Body: b.block()}
}

// prefillParams are the prefill entry's arguments (CPU entry and CUDA
// launcher alike).
func (l *lowering) prefillParams() []*ir.Param {
	params := append(l.qParams("total_q"), buf("qo_indptr", ir.I32, false, "batch_size+1"))
	params = append(params, append(l.maskParams("total_q"), l.ropeParams("total_q")...)...)
	return append(append(params, l.cacheParams()...), l.outParams("total_q")...)
}

// decodeParams are the decode entry's arguments.
func (l *lowering) decodeParams() []*ir.Param {
	params := append(l.qParams("batch_size"), append(l.maskParams("batch_size"), l.ropeParams("batch_size")...)...)
	return append(append(params, l.cacheParams()...), l.outParams("batch_size")...)
}

// decode is the one-token-per-sequence entry. It validates, asks
// @plan_splits how many KV chunks each (sequence, kv head) item gets, and
// either runs the items directly or runs the chunks into f32 scratch and
// merges them with the merge_state formula.
func (l *lowering) decode(entry bool) *ir.Kernel {
	params := l.decodeParams()
	var b blk
	b.vr("max_tiles", i32(0))
	l.validateCache(&b, false, func(t *blk, vb *ir.Ref, qLen, kvLen ir.Expr) {
		t.set("max_tiles", maxE(ir.R("max_tiles", ir.I32), ceilDiv(kvLen, KVTile)))
	})
	bs := ir.R("batch_size", ir.I32)
	items64 := b.let("items64", mul(i64(bs), i64c(l.KVH*l.headTiles())))
	failTooLarge(&b, items64)
	b.add(&ir.CallStmt{Result: "threads", Fn: "rt.num_threads"})
	items := b.let("items", ir.Cvt(ir.I32, items64))
	splits := b.let("splits", &ir.Call{Fn: "plan_splits", Args: []ir.Expr{items, ir.R("threads", ir.I32), ir.R("max_tiles", ir.I32)}, T: ir.I32})
	// seq binds the per-sequence lets of a work item.
	seq := func(t *blk, sb ir.Expr) (kvBeg, kvLen ir.Expr) {
		return l.seqPages(t, sb, "", false)
	}
	item := ir.R("item", ir.I32)
	b.when(le(splits, i32(1)), func(t *blk) {
		t.loop("item", i32(0), items, ir.Parallel, "work", func(u *blk) {
			sb, kvh, ht := l.splitItem(u, item)
			kvBeg, kvLen := seq(u, sb)
			l.attend(u, tileWork{qt: 1, b: sb, kvh: kvh, ht: ht, qRow0: sb, rows: i32(1), qPos0: sub(kvLen, i32(1)), qBase: sub(kvLen, i32(1)), qSeqRow: sb,
				kvBeg: kvBeg, kvLen: kvLen, tileLo: i32(0), tileHi: ceilDiv(kvLen, KVTile), store: l.storeOut})
		})
		t.add(&ir.Return{Value: i32(0)})
	})
	// Split-KV: chunk sp of sequence b covers tiles [sp*per, min((sp+1)*per, n)).
	// Splits happen only with fewer items than threads (at most
	// MaxThreads), so these counts are small; the sizes are i64 anyway.
	rowsPerSplit := mul(bs, i32(l.H))
	b.add(&ir.Malloc{Name: "part_o", T: ir.F32, Size: mul(mul(i64(splits), i64(rowsPerSplit)), i64c(l.DV))})
	b.add(&ir.Malloc{Name: "part_lse", T: ir.F32, Size: mul(i64(splits), i64(rowsPerSplit))})
	b.loop("item", i32(0), mul(items, splits), ir.Parallel, "work", func(u *blk) {
		sp := u.let("sp", rem(item, splits))
		sb, kvh, ht := l.splitItem(u, u.let("rest", div(item, splits)))
		kvBeg, kvLen := seq(u, sb)
		nt := u.let("n_tiles", ceilDiv(kvLen, KVTile))
		per := u.let("per", div(add(nt, sub(splits, i32(1))), splits))
		tLo := u.let("t_lo", minE(mul(sp, per), nt))
		l.attend(u, tileWork{qt: 1, b: sb, kvh: kvh, ht: ht, qRow0: sb, rows: i32(1), qPos0: sub(kvLen, i32(1)), qBase: sub(kvLen, i32(1)), qSeqRow: sb,
			kvBeg: kvBeg, kvLen: kvLen, tileLo: tLo, tileHi: minE(add(tLo, per), nt), partial: true,
			store: func(x *blk, qrow, head ir.Expr, acc func(ir.Expr) ir.Expr, inv, lse ir.Expr) {
				flat := x.let("pflat", add(mul(add(mul(sp, bs), qrow), i32(l.H)), head))
				d := ir.R("d", ir.I32)
				x.loop("d", i32(0), i32(l.DV), ir.Vector, "", func(y *blk) {
					y.store("part_o", add(mul(flat, i32(l.DV)), d), mul(acc(d), inv))
				})
				x.store("part_lse", flat, lse)
			}})
	})
	// Merge the chunks of each (sequence, qo head) row, folding with the
	// pairwise merge_state update.
	row := ir.R("mrow", ir.I32)
	b.loop("mrow", i32(0), rowsPerSplit, ir.Parallel, "merge", func(u *blk) {
		u.alloc("macc", ir.F32, l.DV)
		u.vr("mlse", l.mergeStart(row))
		d := ir.R("d", ir.I32)
		u.loop("d", i32(0), i32(l.DV), ir.Vector, "", func(x *blk) { x.store("macc", d, f32(0)) })
		u.loop("sp", i32(0), splits, ir.Serial, "", func(x *blk) {
			pflat := x.let("pflat", add(mul(ir.R("sp", ir.I32), rowsPerSplit), row))
			l.pairMerge(x, ir.R("mlse", ir.F32), ld("part_lse", ir.F32, pflat),
				func(dv ir.Expr) ir.Expr { return ld("macc", ir.F32, dv) },
				func(dv ir.Expr) ir.Expr { return ld("part_o", ir.F32, add(mul(pflat, i32(l.DV)), dv)) },
				func(y *blk, dv, val ir.Expr) { y.store("macc", dv, val) },
				func(y *blk, val ir.Expr) { y.set("mlse", val) }, ir.LSEBaseE)
		})
		u.loop("d", i32(0), i32(l.DV), ir.Vector, "", func(x *blk) {
			x.store("o", add(mul(i64(row), ir.IntT(ir.I64, int64(l.DV))), i64(d)), ir.Cvt(l.dt, ld("macc", ir.F32, d)))
		})
		u.when(&ir.NotNull{Buf: "lse"}, func(x *blk) { x.store("lse", row, l.userLSE(ir.R("mlse", ir.F32))) })
	})
	b.add(&ir.Free{Name: "part_o"}, &ir.Free{Name: "part_lse"})
	b.add(&ir.Return{Value: i32(0)})
	return &ir.Kernel{Name: l.name("decode"), Role: ir.RoleDecode, Entry: entry, Params: params, Body: b.block()}
}

// dimsLoop runs body over the head dims d of a row; k indexes where the
// running thread keeps element d (the CPU keeps all: k = d; a GPU thread
// keeps its share).
type dimsLoop func(b *blk, body func(b *blk, k, d ir.Expr))

// cpuDims is a vectorizable loop over all head dims.
func (l *lowering) cpuDims(b *blk, body func(b *blk, k, d ir.Expr)) {
	d := ir.R("d", ir.I32)
	b.loop("d", i32(0), i32(l.DV), ir.Vector, "", func(t *blk) { body(t, d, d) })
}

// mergeStart is the state a split-KV merge folds the chunks into: empty,
// or the row's learned sink (a logit without a value).
func (l *lowering) mergeStart(row ir.Expr) ir.Expr {
	if l.learnedSinks() {
		return ld("sinks", ir.F32, rem(row, i32(l.H)))
	}
	return negInf()
}

// pairMergeBy appends the merge_state update of state a = (la, va) with
// b = (lb, vb), whose lse are in base: weights base^(l - max) — exp, or
// exp2 for base 2, of the difference, so large lse values lose nothing to a
// conversion — that are exactly 0 for an empty side (whose values are never
// read into the sum), o = weighted mean, lse = max + log_base(sum of
// weights); two empty sides give o = 0, lse = -inf. A NaN or +inf lse on
// either side gives NaN in o and lse (DESIGN §3), so a bad state never
// passes for an empty one. CPU and GPU kernels share it and differ only in
// how dims maps the head dims.
func (l *lowering) pairMergeBy(b *blk, la, lb ir.Expr, va, vb func(k, d ir.Expr) ir.Expr, setV func(b *blk, k, d, val ir.Expr), setL func(*blk, ir.Expr), dims dimsLoop, base ir.LSEBase) {
	pow, logOf := func(x ir.Expr) ir.Expr { return ir.Un(ir.Exp, x) }, func(x ir.Expr) ir.Expr { return ir.Un(ir.Log, x) }
	if base == ir.LSEBase2 {
		pow = func(x ir.Expr) ir.Expr { return ir.Un(ir.Exp2, x) }
		logOf = func(x ir.Expr) ir.Expr { return mul(ir.Un(ir.Log, x), f32(math.Log2E)) }
	}
	lA := b.let("la", la)
	lB := b.let("lb", lb)
	// !(x < +inf) holds for NaN and +inf alike (ordered compare).
	bad := b.let("m_bad", or(not(lt(lA, posInf())), not(lt(lB, posInf()))))
	m := b.let("mm", maxE(lA, lB))
	wa := b.let("wa", sel(gt(lA, negInf()), pow(sub(lA, m)), f32(0)))
	wb := b.let("wb", sel(gt(lB, negInf()), pow(sub(lB, m)), f32(0)))
	ws := b.let("ws", add(wa, wb))
	inv := b.let("winv", sel(gt(ws, f32(0)), ir.Bin(ir.Div, f32(1), ws), f32(0)))
	dims(b, func(t *blk, k, d ir.Expr) {
		ta := sel(gt(wa, f32(0)), mul(wa, va(k, d)), f32(0))
		tb := sel(gt(wb, f32(0)), mul(wb, vb(k, d)), f32(0))
		setV(t, k, d, sel(bad, nan(), mul(add(ta, tb), inv)))
	})
	setL(b, sel(bad, nan(), sel(gt(ws, f32(0)), add(m, logOf(ws)), negInf())))
}

// pairMerge is pairMergeBy over all head dims.
func (l *lowering) pairMerge(b *blk, la, lb ir.Expr, va, vb func(ir.Expr) ir.Expr, setV func(*blk, ir.Expr, ir.Expr), setL func(*blk, ir.Expr), base ir.LSEBase) {
	l.pairMergeBy(b, la, lb,
		func(k, d ir.Expr) ir.Expr { return va(d) }, func(k, d ir.Expr) ir.Expr { return vb(d) },
		func(t *blk, k, d, val ir.Expr) { setV(t, d, val) }, setL, l.cpuDims, base)
}

// mergeState is the merge_state entry: merges (v_other, s_other) into (v, s)
// in place, row by row, with the same pairwise update as split-KV decode.
func (l *lowering) mergeState() *ir.Kernel {
	H, DV := l.H, l.DV
	params := []*ir.Param{
		buf("v", l.dt, true, "n", itoa(H), itoa(DV)),
		buf("s", ir.F32, true, "n", itoa(H)),
		buf("v_other", l.dt, false, "n", itoa(H), itoa(DV)),
		buf("s_other", ir.F32, false, "n", itoa(H)),
		scalar("n"),
	}
	var b blk
	n := ir.R("n", ir.I32)
	b.fail(lt(n, i32(0)), ErrBadArgument)
	failTooLarge(&b, mul(i64(n), i64c(H)))
	row := ir.R("row", ir.I32)
	b.loop("row", i32(0), mul(n, i32(H)), ir.Parallel, "work", func(t *blk) {
		base := t.let("base", mul(i64(row), ir.IntT(ir.I64, int64(DV))))
		t.alloc("mv", ir.F32, DV)
		l.pairMerge(t, ld("s", ir.F32, row), ld("s_other", ir.F32, row),
			func(dv ir.Expr) ir.Expr { return tof32(ld("v", l.dt, add(base, i64(dv)))) },
			func(dv ir.Expr) ir.Expr { return tof32(ld("v_other", l.dt, add(base, i64(dv)))) },
			func(y *blk, dv, val ir.Expr) { y.store("mv", dv, val) },
			func(y *blk, val ir.Expr) { y.store("s", row, val) }, l.v.LSEBase)
		d := ir.R("d", ir.I32)
		t.loop("d", i32(0), i32(DV), ir.Vector, "", func(x *blk) {
			x.store("v", add(base, i64(d)), ir.Cvt(l.dt, ld("mv", ir.F32, d)))
		})
	})
	b.add(&ir.Return{Value: i32(0)})
	return &ir.Kernel{Name: l.name("merge_state"), Role: ir.RoleMergeState, Entry: true, Params: params, Body: b.block()}
}
