package lower

import (
	"github.com/attnc/attnc/ir"
)

// The one attention skeleton. Every role (prefill query tiles, decode
// items, split-KV chunks) runs the same work item: stage the group's query
// rows (RoPE inline), walk the KV tiles (the page walk stages each K/V
// tile once for every qo head the item serves), score with a tile matmul,
// then transform, mask and hide each score once, fold the tile into the
// online-softmax state, accumulate P·V with a second matmul, and finally
// normalize and store (o and lse, or a split's partial state). The loops
// are spread loops with static bounds and guards; each target maps them.

// attnItem is what distinguishes one role's work item from another's.
type attnItem struct {
	decode bool // one query token per sequence, at q[b]
	split  bool // a KV chunk of a split item: the result is a partial state
	// both: a split kernel that also stores the final o and lse, each
	// result under `if NotNull(...)` of its buffer (Tiling.DecodeOneKernel).
	both bool
}

// rowsPerItem is the static row extent R of a work item and its query
// rows QT.
func (l *lowering) rowsPerItem(decode bool) (R, QT int) {
	QT = 1
	if !decode {
		QT = l.t.QTile(l.G)
	}
	R = l.GB * QT
	if l.t.PadRows {
		R = max(R, l.t.Rows)
	}
	return R, QT
}

// headTiles is the number of work items a GQA group splits into.
func (l *lowering) headTiles() int { return l.G / l.GB }

// itemsPerSeq is work items per sequence (and query tile): kv heads times
// head tiles.
func (l *lowering) itemsPerSeq() int { return l.KVH * l.headTiles() }

// splitBySequence reports whether decode splits by sequence
// (Tiling.SplitBySequence): where a sequence's items are its kv heads,
// whose blocks threads would read side by side. With one kv head its items
// are head tiles reading the same rows (MQA, MLA), which threads share
// through the cache; split by sequence they would only add partial
// outputs to merge (MLA's 128 × 512 floats a chunk).
func (l *lowering) splitBySequence() bool { return l.t.SplitBySequence && l.KVH > 1 }

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

// Per-sequence plan values (ir.SeqValue): the prefill query tiles, the KV
// tiles, and whether a sequence breaks the decode layout (one query token
// at q[b]).
func (l *lowering) seqMaxQT() ir.SeqValue {
	_, QT := l.rowsPerItem(false)
	return ir.SeqValue{Name: "max_qt", Op: ir.ReduceMax, Of: ceilDiv(ir.R(ir.SeqQLen, ir.I32), QT)}
}

func (l *lowering) seqMaxTiles() ir.SeqValue {
	// A host launcher cannot read lengths: it plans for long sequences
	// (chunks past a sequence's end finish at once).
	return ir.SeqValue{Name: "max_tiles", Op: ir.ReduceMax, Of: ceilDiv(ir.R(ir.SeqKVLen, ir.I32), l.t.KVTile), Host: i32(1 << 20)}
}

func seqMulti() ir.SeqValue {
	one := and(eq(ir.R(ir.SeqQLen, ir.I32), i32(1)), eq(ir.R(ir.SeqQBeg, ir.I32), ir.R(ir.SeqB, ir.I32)))
	return ir.SeqValue{Name: "multi", Op: ir.ReduceMax, Of: sel(one, i32(0), i32(1))}
}

// foldSeq appends name = op(name, sv.Of) for one sequence whose names are
// bound in env.
func foldSeq(b *blk, sv ir.SeqValue, env map[string]ir.Expr) {
	b.set(sv.Name, ir.Bin(sv.Op.BinOp(), ir.R(sv.Name, ir.I32), ir.Subst(sv.Of, env)))
}

// prefill is the ragged-query role: (sequence, kv head, head tile, query
// tile) work items; its plan hands over to decode when every sequence has
// exactly one query token laid out as in decode.
func (l *lowering) prefill() ([]*ir.Kernel, *ir.Plan) {
	params := l.prefillParams()
	work := l.attentionKernel(l.name("prefill_work"), ir.RolePrefill, params, attnItem{})
	maxQT := l.seqMaxQT()
	multi := seqMulti()
	bs := ir.R("batch_size", ir.I32)
	var v blk
	v.vr(maxQT.Name, i32(0))
	v.vr(multi.Name, i32(0))
	l.validateCache(&v, true, func(t *blk, env map[string]ir.Expr) {
		foldSeq(t, maxQT, env)
		foldSeq(t, multi, env)
	})
	p := &ir.Plan{Role: ir.RolePrefill, Entry: l.name("prefill"), Public: true, Params: params,
		Checks: l.tableChecks(), Validate: v.block(), Seq: []ir.SeqValue{maxQT, multi},
		Limits:  []ir.Check{tooLarge(l.prefillItems64(bs, ir.R(maxQT.Name, ir.I32)))},
		Skip:    eq(bs, i32(0)),
		Handoff: &ir.Handoff{Role: ir.RoleDecode, When: eq(ir.R(multi.Name, ir.I32), i32(0))},
		Direct:  []ir.Launch{{Kernel: work.Name, Items: mul(mul(bs, i32(l.itemsPerSeq())), ir.R(maxQT.Name, ir.I32))}}}
	return []*ir.Kernel{work}, p
}

// prefillItems64 is prefill's work-item count in i64: (sequence, kv head,
// head tile) units, capped at 2^31 so that the product with maxQT cannot
// wrap i64 either.
func (l *lowering) prefillItems64(bs, maxQT ir.Expr) ir.Expr {
	units := minE(mul(i64(bs), i64c(l.itemsPerSeq())), i64c(MaxItems+1))
	return mul(units, i64(maxQT))
}

// prefillParams are the prefill entry's arguments.
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

// decode is the one-token-per-sequence role: (sequence, kv head, head
// tile) work items, or, when @plan_splits asks for more than one KV chunk
// per item, the chunks into f32 scratch and a merge of each row's chunks
// with the merge_state update.
func (l *lowering) decode(public bool) ([]*ir.Kernel, *ir.Plan) {
	params := l.decodeParams()
	nIn := len(l.qParams("")) + len(l.maskParams("")) + len(l.ropeParams("")) + len(l.cacheParams())
	partO := buf("part_o", ir.F32, true, "splits", "batch_size", itoa(l.H), itoa(l.DV))
	partLSE := buf("part_lse", ir.F32, true, "splits", "batch_size", itoa(l.H))
	splitParams := append(append([]*ir.Param(nil), params[:nIn]...), partO, partLSE, scalar(ir.PlanSplits))
	var direct, split *ir.Kernel
	var directBind, splitBind []ir.Bind
	if l.t.DecodeOneKernel {
		// One work kernel for both launches: the direct one passes splits
		// = 1 and NULL partial buffers, the split one NULL o and lse.
		oneParams := append([]*ir.Param(nil), params[:nIn]...)
		for _, p := range append(params[nIn:len(params):len(params)], partO, partLSE) {
			q := *p
			q.Null = true
			oneParams = append(oneParams, &q)
		}
		oneParams = append(oneParams, scalar(ir.PlanSplits))
		direct = l.attentionKernel(l.name("decode_work"), ir.RoleDecode, oneParams, attnItem{decode: true, split: true, both: true})
		split = direct
		directBind = []ir.Bind{{Param: "part_o"}, {Param: "part_lse"}, {Param: ir.PlanSplits, Value: i32(1)}}
		for _, p := range params[nIn:] {
			splitBind = append(splitBind, ir.Bind{Param: p.Name})
		}
	} else {
		direct = l.attentionKernel(l.name("decode_work"), ir.RoleDecode, params, attnItem{decode: true})
		split = l.attentionKernel(l.name("decode_split_work"), ir.RoleDecode, splitParams, attnItem{decode: true, split: true})
	}
	merge := l.mergeSplits()
	maxTiles := l.seqMaxTiles()
	bs := ir.R("batch_size", ir.I32)
	var v blk
	v.vr(maxTiles.Name, i32(0))
	l.validateCache(&v, false, func(t *blk, env map[string]ir.Expr) { foldSeq(t, maxTiles, env) })
	items := mul(bs, i32(l.itemsPerSeq()))
	units := items
	if l.splitBySequence() {
		units = bs
	}
	splits := ir.R(ir.PlanSplits, ir.I32)
	// Splits happen only with fewer items than threads, so these counts
	// are small; the sizes are i64 anyway.
	rows := mul(mul(i64(splits), i64(bs)), i64c(l.H))
	p := &ir.Plan{Role: ir.RoleDecode, Entry: l.name("decode"), Public: public, Params: params,
		Checks: l.tableChecks(), Validate: v.block(), Seq: []ir.SeqValue{maxTiles},
		Limits: []ir.Check{tooLarge(mul(i64(bs), i64c(l.itemsPerSeq())))},
		Skip:   eq(bs, i32(0)),
		Direct: []ir.Launch{{Kernel: direct.Name, Items: items, Bind: directBind}},
		Split: &ir.Split{
			Splits: &ir.Call{Fn: "plan_splits", Args: []ir.Expr{units, ir.R(ir.PlanThreads, ir.I32), ir.R(maxTiles.Name, ir.I32)}, T: ir.I32},
			Scratch: []ir.Scratch{
				{Name: "part_o", T: ir.F32, Size: mul(rows, ir.IntT(ir.I64, int64(l.DV)))},
				{Name: "part_lse", T: ir.F32, Size: rows},
			},
			Launches: []ir.Launch{{Kernel: split.Name, Items: mul(items, splits), Bind: splitBind}, {Kernel: merge.Name, Items: mul(bs, i32(l.H))}},
		}}
	if split == direct {
		return []*ir.Kernel{direct, merge}, p
	}
	return []*ir.Kernel{direct, split, merge}, p
}

// attentionKernel builds a work kernel: one parallel loop over items, each
// the attention skeleton — bind the item, stage its query rows, walk its
// KV tiles, normalize and store.
func (l *lowering) attentionKernel(name string, role ir.Role, params []*ir.Param, it attnItem) *ir.Kernel {
	var b blk
	nItems := l.itemCount(&b, it)
	if l.ropeRel {
		l.ropeRelTable(&b)
	}
	work := b.loop("item", i32(0), nItems, ir.Parallel, ir.TagWork, func(w *blk) {
		x := l.bindItem(w, it, ir.R("item", ir.I32))
		l.allocItem(w, x)
		if l.nextKVHead(it) {
			x.first = w.vr("kv_first", i32(-1))
		}
		l.stageQuery(w, x)
		kt := ir.R("kt", ir.I32)
		tile := w.loop("kt", x.tileLo, x.tileHi, ir.Serial, ir.TagKVTile, func(t *blk) { l.tileStep(t, x, kt) })
		// The position ranges of a tile, for classify-tiles.
		KT := l.t.KVTile
		tile.Ranges = []ir.Range{
			{Var: "kv_pos", Lo: x.tileStart(kt, KT), Hi: sub(minE(add(x.tileStart(kt, KT), i32(KT)), x.kvLen), i32(1))},
			{Var: "q_pos", Lo: x.qPos0, Hi: sub(add(x.qPos0, x.rows), i32(1))},
			{Var: "head", Lo: x.head0, Hi: add(x.head0, i32(l.GB-1))},
			{Var: refName(x.sb), Lo: x.sb, Hi: x.sb},
		}
		// The item's lengths are constant over its tiles: named here, a
		// tree's "before the tree" (kv_pos < kv_len - q_len) bounds per
		// tile too. Decode only: there every tile but a sequence's last
		// is before the tree; a prefill item's tiles before its tree
		// would copy its tile body for the unmasked tiles, which cost
		// gfx942's tree prefill two VGPR spills.
		for _, n := range []ir.Expr{x.kvLen, x.qLen} {
			if _, ok := n.(*ir.Ref); ok && l.hasMask(ir.MaskTree) && it.decode {
				tile.Ranges = append(tile.Ranges, ir.Range{Var: refName(n), Lo: n, Hi: n})
			}
		}
		l.storeItem(w, x)
	})
	if it.decode && (!it.split || it.both || l.splitBySequence()) && l.itemsPerSeq() > 1 {
		// A sequence's items (of one chunk, split) read the same pages: a
		// thread takes them together where every thread can have a run.
		work.Run = l.itemsPerSeq()
	}
	if l.ropeRel {
		b.add(&ir.Free{Name: "rope_jc"}, &ir.Free{Name: "rope_js"})
	}
	b.add(&ir.Return{Value: i32(0)})
	return &ir.Kernel{Name: name, Role: role, Params: params, Body: b.block()}
}

// itemCount appends what the work kernel's item count needs and returns
// the count: (sequence, kv head, head tile) units, times the longest
// sequence's query tiles (prefill) and the KV chunks (split).
func (l *lowering) itemCount(b *blk, it attnItem) ir.Expr {
	bs := ir.R("batch_size", ir.I32)
	var nItems ir.Expr = mul(bs, i32(l.itemsPerSeq()))
	if !it.decode {
		// The item count needs every sequence's query length: the kernel
		// scans qo_indptr itself, as the plan's max_qt does. A GPU kernel
		// cannot report bad input: lengths are clamped to 0..MaxSeqLen and
		// the count to MaxItems, in i64, so that nothing wraps (the CPU
		// entry has validated both).
		sv := l.seqMaxQT()
		b.vr(sv.Name, i32(0))
		b.loop("sq", i32(0), bs, ir.Serial, ir.NoTag, func(t *blk) {
			sq := ir.R("sq", ir.I32)
			qLen := minE(maxE(sub(i64(ldi("qo_indptr", add(sq, i32(1)))), i64(ldi("qo_indptr", sq))), i64c(0)), i64c(MaxSeqLen))
			foldSeq(t, sv, map[string]ir.Expr{ir.SeqQLen: ir.Cvt(ir.I32, qLen)})
		})
		nItems = ir.Cvt(ir.I32, minE(l.prefillItems64(bs, ir.R(sv.Name, ir.I32)), i64c(MaxItems)))
	}
	if it.split {
		nItems = mul(nItems, ir.R(ir.PlanSplits, ir.I32))
	}
	return nItems
}

// itemVars are a work item's bindings: its sequence, kv head and split
// chunk, its query rows (nRows of the static R are in use) and positions,
// its heads and the KV tiles it walks.
type itemVars struct {
	it                      attnItem
	R                       int
	sb, kvh, sp             ir.Expr
	qBeg, qLen, rows, nRows ir.Expr
	qRow0, qPos0, head0     ir.Expr
	kvBeg, kvLen            ir.Expr
	tileLo, tileHi          ir.Expr
	// kvBase, where not nil (Tiling.DecodeWindowTiles), is the position
	// of tile 0: tile kt holds kv_base + kt·KVTile onwards.
	kvBase ir.Expr
	// scoreScale multiplies each dot product (the variant's scale, times
	// k_scale for a quantized cache); vScale, when not nil, each output
	// (v_scale): the K and V tiles hold the codes' values.
	scoreScale, vScale ir.Expr
	// first, where not nil (nextKVHead), is the var that records the
	// kv_lo of the item's first tile that runs, for its staging loops'
	// ir.For.Next.
	first ir.Expr
}

// tileStart is the first position of the item's tile kt (KT positions each):
// kt·KT, from kv_base where the walk has one.
func (x itemVars) tileStart(kt ir.Expr, KT int) ir.Expr {
	if x.kvBase == nil {
		return mul(kt, i32(KT))
	}
	return add(x.kvBase, mul(kt, i32(KT)))
}

// nextKVHead reports whether the item a thread runs after a work item of
// it is known to be the next kv head's of the same sequence and KV chunk
// (Tiling.DecodeNextItem): decode items in runs of a sequence's kv heads
// (ir.For.Run), one head tile each, so the next item walks the same pages
// and tiles, a kv head further (the last kv head's next item is another
// sequence's: ir.For.Next's condition leaves it out).
func (l *lowering) nextKVHead(it attnItem) bool {
	return l.t.DecodeNextItem && it.decode && l.KVH > 1 && l.headTiles() == 1 && (!it.split || l.splitBySequence())
}

// bindItem binds work item `item`: item = ((b*kv_heads + kvh)*head_tiles
// + ht) * splits + sp) * max_qt + qt, with the factors a role lacks left out
// (Tiling.SplitBySequence: sp * batch*kv_heads*head_tiles + the rest).
func (l *lowering) bindItem(w *blk, it attnItem, item ir.Expr) itemVars {
	G, GB, KT := l.G, l.GB, l.t.KVTile
	R, QT := l.rowsPerItem(it.decode)
	x := itemVars{it: it, R: R}
	splits := ir.R(ir.PlanSplits, ir.I32)
	maxQT := ir.R(l.seqMaxQT().Name, ir.I32)
	rest := item
	var qt ir.Expr
	if !it.decode {
		qt = w.let("qt", rem(rest, maxQT))
		rest = w.let("rest", div(rest, maxQT))
	}
	if it.split && l.splitBySequence() {
		// Chunk-major: the decode's items of one chunk are adjacent.
		per := mul(ir.R("batch_size", ir.I32), i32(l.itemsPerSeq()))
		x.sp = w.let("sp", div(rest, per))
		rest = w.let("rest", rem(rest, per))
	} else if it.split {
		x.sp = w.let("sp", rem(rest, splits))
		rest = w.let("rest", div(rest, splits))
	}
	var ht, qLo ir.Expr
	x.sb, x.kvh, ht = l.splitItem(w, rest)
	x.scoreScale = f32(float64(float32(l.v.Scale)))
	if l.v.Quantized() {
		// A quantized cache's scales are uniform over the item's kv head:
		// S = (Q·Kcodes)·(scale·k_scale), O = (P·Vcodes)·v_scale / sum P.
		x.scoreScale = w.let("score_scale", mul(x.scoreScale, l.kvScale("k_scale", x.kvh)))
		x.vScale = w.let("out_scale", l.kvScale(l.vScaleName(), x.kvh))
	}
	if it.decode {
		x.qBeg, x.qLen, qLo, x.rows = x.sb, i32(1), i32(0), i32(1)
	} else {
		x.qBeg = w.let("q_beg", ldi("qo_indptr", x.sb))
		x.qLen = w.let("q_len", sub(ldi("qo_indptr", add(x.sb, i32(1))), x.qBeg))
		qLo = w.let("q_lo", mul(qt, i32(QT)))
		w.when(ge(qLo, x.qLen), func(u *blk) { u.add(&ir.Continue{}) })
		x.rows = w.let("rows", minE(i32(QT), sub(x.qLen, qLo)))
	}
	x.kvBeg, x.kvLen = l.pt.seqPages(w, x.sb)
	x.qRow0 = plusE(x.qBeg, qLo)
	x.qPos0 = w.let("q_pos0", add(sub(x.kvLen, x.qLen), qLo))
	x.nRows = simplifyMul(x.rows, GB)
	if _, ok := x.nRows.(*ir.Const); !ok {
		x.nRows = w.let("n_rows", x.nRows)
	}
	head0 := ir.Expr(mul(x.kvh, i32(G)))
	if c, ok := ht.(*ir.Const); !ok || c.Int != 0 {
		head0 = add(head0, mul(ht, i32(GB)))
	}
	x.head0 = w.let("head0", head0)
	floor := l.kvFloor(x.qPos0)
	var nTiles ir.Expr
	if floor != nil && it.decode && l.t.DecodeWindowTiles {
		// The tiles start at the floor's page run (the staging's runs
		// stay on one page each).
		run := min(l.PS, KT)
		x.kvBase = w.let("kv_base", mul(div(minE(maxE(floor, i32(0)), x.kvLen), i32(run)), i32(run)))
		nTiles = w.let("n_tiles_w", ceilDiv(sub(x.kvLen, x.kvBase), KT))
	} else {
		nTiles = w.let("n_tiles", ceilDiv(x.kvLen, KT))
	}
	x.tileLo, x.tileHi = i32(0), nTiles
	var walked ir.Expr = nTiles // the tiles from the first to the last
	if floor != nil && x.kvBase == nil {
		// No row of the item sees a position below the mask's floor for
		// its first row: its walk starts at that position's tile, not at
		// the sequence's first.
		x.tileLo = w.let("t_first", minE(div(maxE(floor, i32(0)), i32(KT)), nTiles))
		walked = sub(nTiles, x.tileLo)
	}
	if it.split {
		// Chunk sp covers tiles [first + sp*per, min(first + (sp+1)*per, n_tiles)).
		first := x.tileLo
		per := w.let("per", div(add(walked, sub(splits, i32(1))), splits))
		x.tileLo = w.let("t_lo", minE(plusE(mul(x.sp, per), first), nTiles))
		x.tileHi = w.let("t_hi", minE(add(x.tileLo, per), nTiles))
	}
	return x
}

// kvFloor is a position below which a query at q (an i32 expression) sees
// nothing, from the mask clauses that bound kv_pos from below — every
// clause must allow a position, so the highest of their floors holds —,
// or nil when none does or sink tokens add the first positions back:
// window(left = W) gives q - W; an expr conjunct q_pos / C == kv_pos / C
// (C > 0: chunked attention, Llama 4's) gives (q / C) * C, and
// q_pos - kv_pos <= W (< W) gives q - W (q - W + 1). Each is
// nondecreasing in q, so the floor of an item's first row holds for its
// later rows.
func (l *lowering) kvFloor(q ir.Expr) ir.Expr {
	if l.v.Sinks != nil && l.v.Sinks.Kind == ir.SinkTokens && l.v.Sinks.Tokens > 0 {
		return nil
	}
	var floor ir.Expr
	raise := func(f ir.Expr) {
		if floor == nil {
			floor = f
		} else {
			floor = maxE(floor, f)
		}
	}
	for _, c := range l.v.Masks {
		switch c.Kind {
		case ir.MaskWindow:
			raise(sub(q, i32(c.Left)))
		case ir.MaskExpr:
			for _, e := range conjuncts(c.Expr) {
				if f := exprFloor(e, q); f != nil {
					raise(f)
				}
			}
		}
	}
	return floor
}

// conjuncts are the operands of e's top-level ands (e itself when it is
// none).
func conjuncts(e ir.Expr) []ir.Expr {
	if b, ok := e.(*ir.Binary); ok && b.Op == ir.And && b.X.Type() == ir.Bool {
		return append(conjuncts(b.X), conjuncts(b.Y)...)
	}
	return []ir.Expr{e}
}

// exprFloor is the floor (kvFloor) that mask conjunct e puts on kv_pos
// for a query at q, or nil for a conjunct of another form.
func exprFloor(e, q ir.Expr) ir.Expr {
	b, ok := e.(*ir.Binary)
	if !ok {
		return nil
	}
	isRef := func(x ir.Expr, name string) bool {
		r, ok := x.(*ir.Ref)
		return ok && r.Name == name
	}
	posConst := func(x ir.Expr) (int64, bool) {
		c, ok := x.(*ir.Const)
		if !ok || c.T != ir.I32 || c.Int <= 0 {
			return 0, false
		}
		return c.Int, true
	}
	switch b.Op {
	case ir.Eq:
		// q_pos / C == kv_pos / C, either way round.
		for _, xy := range [][2]ir.Expr{{b.X, b.Y}, {b.Y, b.X}} {
			dq, ok1 := xy[0].(*ir.Binary)
			dk, ok2 := xy[1].(*ir.Binary)
			if !ok1 || !ok2 || dq.Op != ir.Div || dk.Op != ir.Div || !isRef(dq.X, "q_pos") || !isRef(dk.X, "kv_pos") {
				continue
			}
			cq, okq := posConst(dq.Y)
			ck, okk := posConst(dk.Y)
			if okq && okk && cq == ck {
				return mul(div(q, i32(int(cq))), i32(int(cq)))
			}
		}
	case ir.Le, ir.Lt:
		// q_pos - kv_pos <= W (or < W).
		d, ok := b.X.(*ir.Binary)
		w, okw := b.Y.(*ir.Const)
		if !ok || d.Op != ir.Sub || !isRef(d.X, "q_pos") || !isRef(d.Y, "kv_pos") || !okw || w.T != ir.I32 || w.Int < 0 || w.Int >= 1<<30 {
			return nil
		}
		if b.Op == ir.Lt {
			return sub(q, i32(int(w.Int)-1))
		}
		return sub(q, i32(int(w.Int)))
	}
	return nil
}

// allocItem declares a work item's arrays: the query rows, a K and a V
// tile, the tile's scores, and the online-softmax state of every row.
func (l *lowering) allocItem(w *blk, x itemVars) {
	R, D, DV, KT := x.R, l.D, l.DV, l.t.KVTile
	w.alloc("qs", ir.F32, R*D)
	w.alloc("kb", l.stageType(), KT*D)
	w.alloc("vb", l.stageType(), KT*DV)
	w.alloc("sc", ir.F32, R*KT)
	w.alloc("acc", ir.F32, R*DV)
	w.alloc("mx", ir.F32, R)
	w.alloc("den", ir.F32, R)
	w.alloc("alpha", ir.F32, R)
	if l.alphaLoop(x.it) {
		w.alloc("tsum", ir.F32, R)
	}
	w.alloc("kvis", ir.I32, KT)
	if l.directK {
		w.alloc("koff", ir.I64, KT)
	}
	if l.directV {
		w.alloc("voff", ir.I64, KT)
	}
	if l.v.InlineRope() != nil && !l.ropeRel {
		l.ropeTable(w)
		l.fillRopeTable(w)
	}
	if l.ropeRel {
		// The turns and the tile's table are the kernel's (ropeRelTable).
		w.alloc("qs0", ir.F32, R*l.rotDim())
		if oneToken(x) {
			// The tile's query turn, one for the item's rows (rotateQueriesRel).
			w.alloc("rope_qc", ir.F32, l.rotDim()/2)
			w.alloc("rope_qs", ir.F32, l.rotDim()/2)
		}
	}
}

// rowParts binds a row's query index r and head index g: rows are
// query-major (row = r*GB + g), so the rows in use are a prefix.
func (l *lowering) rowParts(x *blk, row ir.Expr) (r, g ir.Expr) {
	return x.let("r", div(row, i32(l.GB))), x.let("g", rem(row, i32(l.GB)))
}

// stageQuery stages the item's query rows (RoPE inline; unused rows are
// zeros) and resets the running state.
func (l *lowering) stageQuery(w *blk, x itemVars) {
	D, DV := l.D, l.DV
	w.spread("row", x.R, func(y *blk, row ir.Expr) {
		y.guarded(lt(row, x.nRows), func(u *blk) {
			r, g := l.rowParts(u, row)
			qrow := u.let("q_row", add(x.qRow0, r))
			qflat := u.let("qflat", rowHead(qrow, l.H, add(x.head0, g)))
			for _, sg := range l.qSegs() {
				base := u.let("qbase"+segName(sg), mul(qflat, ir.IntT(ir.I64, int64(sg.w))))
				var cs ropeCS
				if !l.ropeRel {
					cs = l.ropeAt(l.qRopePos(qrow))
				}
				l.stageRow(u, "qs", sg.w, func(d ir.Expr) ir.Expr { return add(mul(row, i32(D)), plus(d, sg.off)) }, cs,
					func(k ir.Expr) ir.Expr { return tof32(ld(sg.buf, l.dt, add(base, i64(k)))) })
				if l.ropeRel {
					// The rotated dims as staged: each tile turns them from here.
					Rd := l.rotDim()
					u.spread("d", Rd, func(z *blk, d ir.Expr) {
						z.store("qs0", add(mul(row, i32(Rd)), d), ld("qs", ir.F32, add(mul(row, i32(D)), d)))
					})
				}
			}
		}, func(u *blk) {
			u.spread("d", D, func(z *blk, d ir.Expr) { z.store("qs", add(mul(row, i32(D)), d), f32(0)) })
		})
	})
	w.spread("row", x.R, func(y *blk, row ir.Expr) {
		y.store("mx", row, negInf())
		y.store("den", row, f32(0))
		y.spread("d", DV, func(z *blk, d ir.Expr) { z.store("acc", add(mul(row, i32(DV)), d), f32(0)) })
	})
}

// tileStep is one KV tile kt of a work item: stage K and V (the page
// walk), S = Q·Kᵀ, the score step once per (row, position), the
// online-softmax update, then acc += P·V.
func (l *lowering) tileStep(t *blk, x itemVars, kt ir.Expr) {
	R, D, DV, KT := x.R, l.D, l.DV, l.t.KVTile
	kvLo := t.let("kv_lo", x.tileStart(kt, KT))
	kvN := t.let("kv_n", minE(i32(KT), sub(x.kvLen, kvLo)))
	if l.ropeRel {
		l.rotateQueriesRel(t, x, kvLo)
	}
	if x.first != nil {
		t.when(lt(x.first, i32(0)), func(u *blk) { u.set(refName(x.first), kvLo) })
	}
	stage := l.stageKV(t, x.kvBeg, kvLo, kvN, sub(x.kvLen, kvLo), x.kvh, x.sb, sub(x.kvLen, x.qLen), x.qBeg)
	if x.first != nil {
		// The next kv head's item walks this item's pages from its first tile.
		stage.Next = &ir.Next{When: lt(add(x.kvh, i32(1)), i32(l.KVH)),
			Subst: []ir.Rebind{{Name: refName(kvLo), Value: x.first}, {Name: refName(x.kvh), Value: add(x.kvh, i32(1))}}}
	}
	// direct: every position of the tile is on a readable page, so the
	// products read the rows where the staging found them.
	var direct ir.Expr
	if l.directK || l.directV {
		j := ir.R("j", ir.I32)
		t.add(&ir.Reduce{Name: "kv_seen", Op: ir.ReduceAdd, Var: "j", Lo: i32(0), Hi: i32(KT),
			Value: sel(lt(j, kvN), ld("kvis", ir.I32, j), i32(0))})
		seen := eq(ir.R("kv_seen", ir.I32), kvN)
		if l.ropeInDot && l.hasMask(ir.MaskTree) {
			// A tree's own keys turn at their queries' positions: a tile
			// that holds one is staged.
			seen = and(seen, le(add(kvLo, kvN), sub(x.kvLen, x.qLen)))
		}
		direct = t.let("kv_direct", seen)
		t.add(&ir.If{Cond: not(direct), Then: l.stageRunsBlock(x.kvBeg, kvLo, kvN, x.kvh, x.sb, sub(x.kvLen, x.qLen), x.qBeg,
			l.directK, l.directV, false, ir.NoTag)})
	}
	qk := &ir.MatMul{C: "sc", A: "qs", B: "kb", M: R, N: KT, K: D, TransB: true,
		MExt: x.nRows, NExt: kvN, KExt: i32(D)}
	t.add(directOr(direct, l.directK, qk, l.kSegs()[0].buf, "koff", l.rotK()))
	// Score: scale, @score, @mask, the data masks and hidden blocks, once
	// per (row, position).
	t.spread("row", R, func(y *blk, row ir.Expr) {
		y.guarded(lt(row, x.nRows), func(u *blk) {
			r, g := l.rowParts(u, row)
			head := u.let("head", add(x.head0, g))
			qPos := u.let("q_pos", add(x.qPos0, r))
			u.spread("j", KT, func(z *blk, j ir.Expr) {
				at := add(mul(row, i32(KT)), j)
				z.guarded(lt(j, kvN), func(v *blk) {
					l.scoreStep(v, at, j, qPos, add(kvLo, j), head, x.sb, sub(x.kvLen, x.qLen), x.kvLen, x.scoreScale)
				}, func(v *blk) { v.store("sc", at, negInf()) })
			})
		}, nil)
	})
	l.softmaxUpdate(t, R, x.nRows, kvN, l.alphaLoop(x.it), l.phases(x.it))
	// P·V: a hidden position's weight (-0: masked, or a -inf score from
	// the mask, the score expression or the data) contributes exactly
	// nothing, its V row included, in every tile (DESIGN §3); a visible
	// position's weight multiplies its V row as IEEE arithmetic does.
	pv := &ir.MatMul{C: "acc", A: "sc", B: "vb", M: R, N: DV, K: KT, Accumulate: true, ZeroSkip: true,
		MExt: x.nRows, NExt: i32(DV), KExt: kvN}
	t.add(directOr(direct, l.directV, pv, l.vSegs()[0].buf, "voff", nil))
}

// alphaLoop reports whether the work item's softmax update computes alpha
// in a loop of its own (Tiling.PrefillAlphaLoop, prefill items; Tiling.
// DecodePhases, decode items).
func (l *lowering) alphaLoop(it attnItem) bool {
	if it.decode {
		return l.t.DecodePhases
	}
	return l.t.PrefillAlphaLoop
}

// phases reports whether the work item's softmax update takes its rows'
// maxes in a loop of their own, before their exps (Tiling.DecodePhases,
// Tiling.PrefillPhases with PrefillAlphaLoop).
func (l *lowering) phases(it attnItem) bool {
	if it.decode {
		return l.t.DecodePhases
	}
	return l.t.PrefillPhases && l.t.PrefillAlphaLoop
}

// directOr is mm, or, when its B is read in place (on), `if direct { mm
// reading B's rows in pool at the offsets rows, turned by rot when it is
// not nil } else { mm }`.
func directOr(direct ir.Expr, on bool, mm *ir.MatMul, pool, rows string, rot *ir.RotB) ir.Stmt {
	if !on {
		return mm
	}
	in := *mm
	in.B, in.BRows, in.RotB = pool, rows, rot
	return &ir.If{Cond: direct, Then: &ir.Block{Stmts: []ir.Stmt{&in}}, Else: &ir.Block{Stmts: []ir.Stmt{mm}}}
}

// storeItem normalizes each row and stores it: o and lse, or a split
// chunk's partial state — both, each under `if NotNull(...)` of its
// buffer, in a kernel that serves both launches (attnItem.both).
func (l *lowering) storeItem(w *blk, x itemVars) {
	switch {
	case x.it.both:
		w.when(&ir.NotNull{Buf: "part_o"}, func(u *blk) { l.storeRows(u, x, true) })
		w.when(&ir.NotNull{Buf: "o"}, func(u *blk) { l.storeRows(u, x, false) })
	default:
		l.storeRows(w, x, x.it.split)
	}
}

// storeRows normalizes each row and stores it: a split chunk's partial
// state (part), or o and lse.
func (l *lowering) storeRows(w *blk, x itemVars, part bool) {
	DV := l.DV
	bs := ir.R("batch_size", ir.I32)
	w.spread("row", x.R, func(y *blk, row ir.Expr) {
		y.guarded(lt(row, x.nRows), func(u *blk) {
			r, g := l.rowParts(u, row)
			head := u.let("head", add(x.head0, g))
			inv, lse := l.finish(u, u.let("lv", ld("den", ir.F32, row)), ld("mx", ir.F32, row), head, !part)
			if x.vScale != nil {
				// A row with nothing visible (inv = 0) keeps o = 0 under a
				// NaN or infinite v_scale (DESIGN §3).
				inv = u.let("inv_v", sel(eq(inv, f32(0)), f32(0), mul(inv, x.vScale)))
			}
			acc := func(d ir.Expr) ir.Expr { return mul(ld("acc", ir.F32, add(mul(row, i32(DV)), d)), inv) }
			if part {
				flat := u.let("pflat", add(mul(add(mul(x.sp, bs), x.sb), i32(l.H)), head))
				u.spread("d", DV, func(z *blk, d ir.Expr) {
					z.store("part_o", add(mul(i64(flat), ir.IntT(ir.I64, int64(DV))), i64(d)), acc(d))
				})
				if x.it.both {
					u.when(&ir.NotNull{Buf: "part_lse"}, func(z *blk) { z.store("part_lse", flat, lse) })
				} else {
					u.store("part_lse", flat, lse)
				}
				return
			}
			flat := u.let("oflat", rowHead(add(x.qRow0, r), l.H, head))
			u.spread("d", DV, func(z *blk, d ir.Expr) {
				z.store("o", add(mul(flat, ir.IntT(ir.I64, int64(DV))), i64(d)), ir.Cvt(l.dt, acc(d)))
			})
			u.when(&ir.NotNull{Buf: "lse"}, func(z *blk) { z.store("lse", flat, l.userLSE(lse)) })
		}, nil)
	})
}

// stageType is the element type of the staged K and V tiles: f32, or the
// cache's own type when they are staged as stored.
func (l *lowering) stageType() ir.Type {
	if l.stageStored {
		return l.kvt
	}
	return ir.F32
}

// stageLoad reads a cache element for a K or V tile: widened to f32, or
// as stored.
func (l *lowering) stageLoad(buf string, idx ir.Expr) ir.Expr {
	if l.stageStored {
		return ld(buf, l.kvt, idx)
	}
	return l.kvLoad(buf, idx)
}

// stageKV stages the tile's K and V rows (the page walk): position j of
// the tile finds its page, so a tile may span pages of any power-of-two
// size. Positions past the tile's end, and pages outside the pool or
// hidden by the table, are never read: their rows are zeros and (hidden
// blocks) kvis[j] = 0 masks them. kvRest counts the item's positions
// from the tile's first on, this tile's and the later ones'.
func (l *lowering) stageKV(t *blk, kvBeg, kvLo, kvN, kvRest, kvh, sb, qBase, qSeqRow ir.Expr) *ir.For {
	if l.t.PageRuns {
		return l.stageKVRuns(t, kvBeg, kvLo, kvN, kvRest, kvh, sb, qBase, qSeqRow)
	}
	D, DV := l.D, l.DV
	zero := func(x *blk, j ir.Expr) {
		x.store("kvis", j, i32(0))
		x.spread("d", D, func(y *blk, d ir.Expr) { y.store("kb", add(mul(j, i32(D)), d), ir.Cvt(l.stageType(), f32(0))) })
		x.spread("d", DV, func(y *blk, d ir.Expr) { y.store("vb", add(mul(j, i32(DV)), d), ir.Cvt(l.stageType(), f32(0))) })
	}
	stage := t.loop("j", i32(0), i32(l.t.KVTile), ir.Spread, ir.TagStage, func(x *blk) {
		j := ir.R("j", ir.I32)
		x.guarded(lt(j, kvN), func(y *blk) {
			pos := y.let("kv_at", add(kvLo, j))
			readable, locate := l.pt.rowAt(y, kvBeg, pos)
			load := func(z *blk) {
				z.store("kvis", j, i32(1))
				rowOf := locate(z)
				for _, sg := range l.kSegs() {
					row := z.let("krow"+segName(sg), rowOf(nil, kvh, sg.w))
					l.stageKRow(z, sg, j, pos, kvLo, sb, qBase, qSeqRow, func(k ir.Expr) ir.Expr { return l.stageLoad(sg.buf, add(row, i64(k))) })
				}
				for _, sg := range l.vSegs() {
					row := z.let("vrow"+segName(sg), rowOf(nil, kvh, sg.w))
					z.spread("d", sg.w, func(u *blk, d ir.Expr) {
						u.store("vb", add(mul(j, i32(DV)), plus(d, sg.off)), l.stageLoad(sg.buf, add(row, i64(d))))
					})
				}
			}
			if readable == nil {
				load(y)
				return
			}
			y.guarded(readable, load, func(z *blk) { zero(z, j) })
		}, func(y *blk) { zero(y, j) })
	})
	// j up to kv_rest-1 stages a position of the item, in this tile or a
	// later one: what a pass that looks ahead (prefetch-kv) may touch.
	stage.Ranges = []ir.Range{{Var: "j", Lo: i32(0), Hi: sub(kvRest, i32(1))}}
	return stage
}

// stageKVRuns is stageKV a page run at a time (Tiling.PageRuns): the
// tile's positions split into runs of min(page size, tile) positions, each
// on one page (tiles and pages are powers of two and tiles start at a
// multiple of their size, so no run crosses a page). Each run looks its
// page up once and, when it is readable, copies its rows from the page's
// base, row js at slot + js; a hidden or outside page zeros the run.
// Positions past the tile's end are never read, as in stageKV. The
// staging loop (TagStage) is over runs; its range on the run index says
// how many runs the item has left (this tile's and the later ones'), for
// prefetch-kv.
func (l *lowering) stageKVRuns(t *blk, kvBeg, kvLo, kvN, kvRest, kvh, sb, qBase, qSeqRow ir.Expr) *ir.For {
	KT := l.t.KVTile
	run := min(l.pt.pageRun(), KT)
	stage := l.stageRunsBlock(kvBeg, kvLo, kvN, kvh, sb, qBase, qSeqRow, !l.directK, !l.directV, l.directK || l.directV, ir.TagStage)
	t.add(stage.Stmts...)
	// pj up to (kv_rest-1)/run stages a run of the item, in this tile or
	// a later one: what prefetch-kv may touch.
	loop := stage.Stmts[0].(*ir.For)
	loop.Ranges = []ir.Range{{Var: "pj", Lo: i32(0), Hi: div(sub(kvRest, i32(1)), i32(run))}}
	return loop
}

// stageRunsBlock is the loop over a tile's page runs (tagged tag) that
// copies the K rows (copyK) and V rows (copyV) of the readable runs and
// zeros the others', and, with offsets, records kvis and the pool offset
// of each row read in place (koff, voff: Tiling.DecodeDirect). Without
// offsets it marks kvis itself.
func (l *lowering) stageRunsBlock(kvBeg, kvLo, kvN, kvh, sb, qBase, qSeqRow ir.Expr, copyK, copyV, offsets bool, tag ir.Tag) *ir.Block {
	D, DV, KT := l.D, l.DV, l.t.KVTile
	run := min(l.pt.pageRun(), KT)
	marks := offsets || (copyK && !l.directK) || (copyV && !l.directV) || !(l.directK || l.directV)
	zero := func(x *blk, j ir.Expr) {
		if marks {
			x.store("kvis", j, i32(0))
		}
		if copyK {
			x.spread("d", D, func(y *blk, d ir.Expr) { y.store("kb", add(mul(j, i32(D)), d), ir.Cvt(l.stageType(), f32(0))) })
		}
		if copyV {
			x.spread("d", DV, func(y *blk, d ir.Expr) { y.store("vb", add(mul(j, i32(DV)), d), ir.Cvt(l.stageType(), f32(0))) })
		}
	}
	zeroRun := func(x *blk, j0 ir.Expr) {
		x.spread("js", run, func(y *blk, js ir.Expr) { zero(y, add(j0, js)) })
	}
	pj := ir.R("pj", ir.I32)
	var t blk
	t.loop("pj", i32(0), i32(KT/run), ir.Spread, tag, func(x *blk) {
		x.guarded(lt(pj, ceilDiv(kvN, run)), func(y *blk) {
			j0 := y.let("j0", mul(pj, i32(run)))
			pos0 := y.let("kv_at", add(kvLo, j0))
			nRun := y.let("n_run", minE(i32(run), sub(kvN, j0)))
			readable, locate := l.pt.rowAt(y, kvBeg, pos0)
			load := func(z *blk) {
				rowOf := locate(z)
				z.spread("js", run, func(u *blk, js ir.Expr) {
					u.guarded(lt(js, nRun), func(w *blk) {
						j := w.let("jr", add(j0, js))
						if marks {
							w.store("kvis", j, i32(1))
						}
						for _, sg := range l.kSegs() {
							row := w.let("krow"+segName(sg), rowOf(js, kvh, sg.w))
							if offsets && l.directK {
								w.store("koff", j, row)
							}
							if !copyK {
								continue
							}
							l.stageKRow(w, sg, j, add(pos0, js), kvLo, sb, qBase, qSeqRow, func(k ir.Expr) ir.Expr { return l.stageLoad(sg.buf, add(row, i64(k))) })
						}
						for _, sg := range l.vSegs() {
							row := w.let("vrow"+segName(sg), rowOf(js, kvh, sg.w))
							if offsets && l.directV {
								w.store("voff", j, row)
							}
							if !copyV {
								continue
							}
							w.spread("d", sg.w, func(v *blk, d ir.Expr) {
								v.store("vb", add(mul(j, i32(DV)), plus(d, sg.off)), l.stageLoad(sg.buf, add(row, i64(d))))
							})
						}
					}, func(w *blk) { zero(w, add(j0, js)) })
				})
			}
			if readable == nil {
				load(y)
				return
			}
			y.guarded(readable, load, func(z *blk) { zeroRun(z, j0) })
		}, func(y *blk) { zeroRun(y, mul(pj, i32(run))) })
	})
	return t.block()
}

// scoreStep finishes the score at sc[at] (the dot product of a query row
// and key j): scale, the @score transform, then hide it (-inf) where the
// @mask Def, a data mask or a hidden block does not show the position.
func (l *lowering) scoreStep(b *blk, at, j, qPos, kvPosE, head, sb, qBase, kvLen, scale ir.Expr) {
	kvPos := b.let("kv_pos", kvPosE)
	scaled := mul(ld("sc", ir.F32, at), scale)
	scoreArgs := []ir.Expr{scaled, qPos, kvPos, head}
	if ScoreReadsBatch(l.v) {
		scoreArgs = append(scoreArgs, sb)
	}
	b.vr("s", &ir.Call{Fn: "score", Args: scoreArgs, T: ir.F32})
	b.add(&ir.If{Tag: ir.TagMask, Cond: not(&ir.Call{Fn: "mask", Args: []ir.Expr{qPos, kvPos, head, sb}, T: ir.Bool}),
		Then: &ir.Block{Stmts: []ir.Stmt{&ir.Assign{Name: "s", Value: negInf()}}}})
	hideUnless(b, l.dataVisible(b, sb, qPos, kvPos, qBase, kvLen))
	b.when(eq(ld("kvis", ir.I32, j), i32(0)), func(x *blk) { x.set("s", negInf()) })
	b.store("sc", at, ir.R("s", ir.F32))
}

// softmaxUpdate folds the tile's scores into each row's running max,
// denominator and accumulator (online softmax): the scores become p =
// exp(s - max), and alpha rescales what the row accumulated before. A row
// whose scores are all -inf so far keeps max -inf and adds nothing. A NaN
// or +inf score makes the max NaN or +inf (Max propagates NaN), so p, the
// denominator and the accumulator become NaN from that tile on (DESIGN §3:
// the row's o and lse are NaN). A -inf score (a hidden position) gives p =
// -0, which the zeroskip P·V skips; exp gives +0 when it underflows, and
// that weight multiplies its V row (0·NaN is NaN: the position is visible).
//
// With alphaLoop (Tiling.PrefillAlphaLoop) the row loop leaves each row's
// new max in alpha and its tile sum in tsum, and a loop of its own over
// the rows then computes alpha = exp(m_old - m_new), the denominator and
// the max: the same arithmetic, with no inner loop, so that a CPU runs it
// as a vector loop (one vector exp for a vector of rows, not a scalar exp
// per row).
//
// With phases (Tiling.DecodePhases, or PrefillPhases with alphaLoop) a
// loop of its own before the row loop takes every row's new max first and
// leaves it in alpha, where the row loop reads it.
func (l *lowering) softmaxUpdate(b *blk, R int, nRows, kvN ir.Expr, alphaLoop, phases bool) {
	KT, DV := l.t.KVTile, l.DV
	// Not > -inf: a NaN max is live, so that the NaN reaches p.
	isLive := func(y *blk, mNew ir.Expr) ir.Expr { return y.let("live", not(eq(mNew, negInf()))) }
	fold := func(y *blk, row, mOld, mNew, live, psum ir.Expr) {
		a := y.let("a", sel(live, ir.Un(ir.Exp, sub(mOld, mNew)), f32(1)))
		y.store("den", row, add(mul(ld("den", ir.F32, row), a), psum))
		y.store("mx", row, mNew)
		y.store("alpha", row, a)
	}
	newMax := func(y *blk, row ir.Expr) (mOld, mNew ir.Expr) {
		j := ir.R("j", ir.I32)
		// maxnum: a NaN score reaches the row through its weight,
		// exp(NaN - max), whether the max keeps it or not.
		y.add(&ir.Reduce{Name: "m_tile", Op: ir.ReduceMaxNum, Var: "j", Lo: i32(0), Hi: i32(KT),
			Value: sel(lt(j, kvN), ld("sc", ir.F32, add(mul(row, i32(KT)), j)), negInf())})
		mOld = y.let("m_old", ld("mx", ir.F32, row))
		return mOld, y.let("m_new", maxE(mOld, ir.R("m_tile", ir.F32)))
	}
	if phases {
		b.spread("row", R, func(x *blk, row ir.Expr) {
			x.guarded(lt(row, nRows), func(y *blk) {
				_, mNew := newMax(y, row)
				y.store("alpha", row, mNew)
			}, nil)
		})
	}
	b.spread("row", R, func(x *blk, row ir.Expr) {
		x.guarded(lt(row, nRows), func(y *blk) {
			at := func(j ir.Expr) ir.Expr { return add(mul(row, i32(KT)), j) }
			j := ir.R("j", ir.I32)
			var mOld, mNew ir.Expr
			if phases {
				mNew = y.let("m_new", ld("alpha", ir.F32, row))
			} else {
				mOld, mNew = newMax(y, row)
			}
			var live ir.Expr
			if !alphaLoop {
				live = isLive(y, mNew)
			}
			y.spread("j", KT, func(z *blk, j ir.Expr) {
				z.guarded(lt(j, kvN), func(u *blk) {
					// A row that is not live has only -inf scores so far.
					s := u.let("s_j", ld("sc", ir.F32, at(j)))
					u.store("sc", at(j), sel(eq(s, negInf()), ir.NegZero(), ir.Un(ir.Exp, sub(s, mNew))))
				}, func(u *blk) { u.store("sc", at(j), f32(0)) })
			})
			y.add(&ir.Reduce{Name: "psum", Op: ir.ReduceAdd, Var: "j", Lo: i32(0), Hi: i32(KT),
				Value: sel(lt(j, kvN), ld("sc", ir.F32, at(j)), f32(0))})
			if alphaLoop {
				if !phases {
					y.store("alpha", row, mNew)
				}
				y.store("tsum", row, ir.R("psum", ir.F32))
				return
			}
			fold(y, row, mOld, mNew, live, ir.R("psum", ir.F32))
		}, nil)
	})
	if alphaLoop {
		b.spread("row", R, func(x *blk, row ir.Expr) {
			x.guarded(lt(row, nRows), func(y *blk) {
				mNew := y.let("m_new", ld("alpha", ir.F32, row))
				fold(y, row, y.let("m_old", ld("mx", ir.F32, row)), mNew, isLive(y, mNew), ld("tsum", ir.F32, row))
			}, nil)
		})
	}
	b.spread("row", R, func(x *blk, row ir.Expr) {
		x.guarded(lt(row, nRows), func(y *blk) {
			a := y.let("a", ld("alpha", ir.F32, row))
			y.spread("d", DV, func(z *blk, d ir.Expr) {
				i := add(mul(row, i32(DV)), d)
				z.store("acc", i, mul(ld("acc", ir.F32, i), a))
			})
		}, nil)
	})
}

func refName(e ir.Expr) string {
	if r, ok := e.(*ir.Ref); ok {
		return r.Name
	}
	return "batch"
}

// plusE is x + y, or x when y is the constant 0.
func plusE(x, y ir.Expr) ir.Expr {
	if c, ok := y.(*ir.Const); ok && c.Int == 0 {
		return x
	}
	return add(x, y)
}

// simplifyMul is x * n, folded when x is a constant or n is 1.
func simplifyMul(x ir.Expr, n int) ir.Expr {
	if c, ok := x.(*ir.Const); ok {
		return i32(int(c.Int) * n)
	}
	if n == 1 {
		return x
	}
	return mul(x, i32(n))
}
