package lower

import "github.com/attnc/attnc/ir"

// qkv_append (TVM's split-QKV/RoPE/append kernel): row t of qkv holds
// qo_heads q heads, then kv_heads k heads, then kv_heads v heads. Every q
// and k head is staged in f32, normed (qk_norm) and rotated at
// positions[t] (rope at_append) when the variant declares them; q goes to
// q_out, k and v to slot position_map[t] of the cache, each element
// rounded once from its f32 value (8-bit codes through kvCode, as append
// stores them). A slot of -1 skips the cache write, not q_out.

// qkvAppendParams are qkv_append's arguments: its inputs (qkv; with rope
// at_append positions and the angles' source, ropeSourceParams;
// position_map, n, the qk_norm weights), the cache as append takes it,
// and q_out.
func (l *lowering) qkvAppendParams() []*ir.Param {
	ps := []*ir.Param{buf("qkv", l.dt, false, "n", itoa(l.H+2*l.KVH), itoa(l.D))}
	if l.atAppendRope() != nil {
		ps = append(append(ps, buf("positions", ir.I32, false, "n")), l.ropeSourceParams()...)
	}
	ps = append(ps, buf("position_map", ir.I32, false, "n"), scalar("n"))
	if l.v.QKNorm != nil {
		ps = append(ps, buf("q_norm_weight", ir.F32, false, itoa(l.D)), buf("k_norm_weight", ir.F32, false, itoa(l.D)))
	}
	ps = append(ps, append(append(l.pageParams(true), l.scaleParams()...), scalar("num_pages"))...)
	return append(ps, buf("q_out", l.dt, true, "n", itoa(l.H), itoa(l.D)))
}

// atAppendRope is the variant's rope when qkv_append applies it.
func (l *lowering) atAppendRope() *ir.Rope {
	if l.v.Rope != nil && l.v.Rope.AtAppend {
		return l.v.Rope
	}
	return nil
}

// qkvAppend is the qkv_append role: one work item per (token, kv head)
// writes the kv head's GQA group of q heads to q_out and its k and v rows
// to the token's slot. The entry validates position_map as append's does
// (every entry -1 or a slot of the pool) before anything is written.
func (l *lowering) qkvAppend() ([]*ir.Kernel, *ir.Plan) {
	n := ir.R("n", ir.I32)
	var b blk
	item := ir.R("item", ir.I32)
	b.loop("item", i32(0), mul(n, i32(l.KVH)), ir.Parallel, ir.TagWork, func(w *blk) {
		i := w.let("i", div(item, i32(l.KVH)))
		kvh := w.let("kvh", rem(item, i32(l.KVH)))
		w.alloc("xs", ir.F32, l.D)
		w.alloc("xn", ir.F32, l.D)
		var pos ir.Expr
		if l.atAppendRope() != nil {
			l.ropeTable(w)
			l.fillRopeTable(w)
			pos = w.let("rope_pos", ldi("positions", i))
		}
		if r := l.atAppendRope(); r != nil && r.Style == ir.RopeTable {
			// The validated entry or, on a GPU (whose launcher cannot read
			// positions), a position outside the table: the token is
			// skipped, q_out included, and no table row is read.
			w.when(not(ropePosOutside(pos)), func(x *blk) { l.qkvToken(x, i, kvh, pos) })
			return
		}
		l.qkvToken(w, i, kvh, pos)
	})
	b.add(&ir.Return{Value: i32(0)})
	params := l.qkvAppendParams()
	k := &ir.Kernel{Name: l.name("qkv_append_work"), Role: ir.RoleQKVAppend, Params: params, Body: b.block()}
	// Step 1 (n, num_pages, rope_positions not negative), TOO_LARGE, then
	// the tables: position_map (BAD_SLOT), positions (BAD_ARGUMENT).
	sizes := sizeChecks("n", mul(i64(n), i64c(l.KVH)))
	checks := append(append(sizes[:1:1], ropeChecks(l.atAppendRope())...), sizes[1:]...)
	var v blk
	v.add(l.validateMap().Stmts...)
	l.validateAppendPositions(&v)
	p := &ir.Plan{Role: ir.RoleQKVAppend, Entry: l.name("qkv_append"), Public: true, Params: params,
		Checks: checks, Validate: v.block(), Skip: eq(n, i32(0)),
		Direct: []ir.Launch{{Kernel: k.Name, Items: mul(n, i32(l.KVH))}}}
	return []*ir.Kernel{k}, p
}

// qkvToken writes work item (token i, kv head kvh) of qkv_append: the kv
// head's GQA group of q heads to q_out, rotated at pos (nil: no rope at
// append), and its k and v rows to the token's slot when it has one.
func (l *lowering) qkvToken(w *blk, i, kvh, pos ir.Expr) {
	D, rowHeads := l.D, l.H+2*l.KVH
	slot := w.let("slot_at", ldi("position_map", i))
	// The validated entry or, on a GPU, a slot outside the pool: skipped.
	cached := w.let("cached", and(ge(slot, i32(0)), not(l.badMapSlot(slot))))
	page := w.let("page", sel(cached, div(slot, i32(l.PS)), i32(0)))
	off := w.let("off", sel(cached, rem(slot, i32(l.PS)), i32(0)))
	src := func(x *blk, name string, head ir.Expr) ir.Expr {
		// i64: n * (qo_heads + 2*kv_heads) may pass 2^31.
		return x.let(name, mul(rowHead(i, rowHeads, head), i64c(D)))
	}
	// The GQA group's q heads, in turn.
	w.loop("qh", i32(0), i32(l.G), ir.Serial, ir.NoTag, func(x *blk) {
		head := x.let("q_head", add(mul(kvh, i32(l.G)), ir.R("qh", ir.I32)))
		dst := x.let("q_out_row", mul(rowHead(i, l.H, head), i64c(D)))
		l.qkRow(x, src(x, "q_src", head), "q_norm_weight", pos, func(y *blk, d, val ir.Expr) {
			y.store("q_out", add(dst, i64(d)), ir.Cvt(l.dt, val))
		})
	})
	w.when(cached, func(x *blk) {
		var sc map[string]ir.Expr
		if l.v.Quantized() {
			sc = map[string]ir.Expr{}
		}
		pools := l.kvPools()
		k, v := pools[0], pools[1]
		kDst := x.let("k_pages_row", l.rowIndex(page, kvh, off, D))
		l.qkRow(x, src(x, "k_src", add(i32(l.H), kvh)), "k_norm_weight", pos, func(y *blk, d, val ir.Expr) {
			y.store(k.pages, add(kDst, i64(d)), l.cacheElem(x, sc, k, kvh, val))
		})
		vSrc := src(x, "v_src", add(i32(l.H+l.KVH), kvh))
		vDst := x.let("v_pages_row", l.rowIndex(page, kvh, off, D))
		x.spread("d", D, func(y *blk, d ir.Expr) {
			if sc == nil {
				y.store(v.pages, add(vDst, i64(d)), ld("qkv", l.dt, add(vSrc, i64(d))))
				return
			}
			y.store(v.pages, add(vDst, i64(d)), l.cacheElem(x, sc, v, kvh, tof32(ld("qkv", l.dt, add(vSrc, i64(d))))))
		})
	})
}

// cacheElem is what pool p stores for the f32 value val: the dtype rounded
// once, or the 8-bit code under the kv head's scale (bound once in x when
// scales is not nil).
func (l *lowering) cacheElem(x *blk, scales map[string]ir.Expr, p kvPool, kvh, val ir.Expr) ir.Expr {
	if scales == nil {
		return ir.Cvt(l.kvt, val)
	}
	return l.kvCode(val, l.scaleOnce(x, scales, p, kvh))
}

// qkRow stages the q or k head whose first element is qkv[src] in f32,
// norms it with weights w (qk_norm), and hands each element d of the row
// rotated at pos (rope at_append; nil: none) to store.
func (l *lowering) qkRow(x *blk, src ir.Expr, w string, pos ir.Expr, store func(y *blk, d, val ir.Expr)) {
	D := l.D
	x.spread("d", D, func(y *blk, d ir.Expr) { y.store("xs", d, tof32(ld("qkv", l.dt, add(src, i64(d))))) })
	row := "xs"
	if nm := l.v.QKNorm; nm != nil {
		d := ir.R("d", ir.I32)
		x.add(&ir.Reduce{Name: "ss", Op: ir.ReduceAdd, Var: "d", Lo: i32(0), Hi: i32(D),
			Value: mul(ld("xs", ir.F32, d), ld("xs", ir.F32, d))})
		// x / sqrt(mean(x^2) + eps) * (offset + w), in f32.
		rms := x.let("rms", ir.Un(ir.Sqrt, add(div(ir.R("ss", ir.F32), f32(float64(D))), f32(float64(float32(nm.Eps))))))
		x.spread("d", D, func(y *blk, d ir.Expr) {
			y.store("xn", d, mul(div(ld("xs", ir.F32, d), rms), add(f32(nm.Offset), ld(w, ir.F32, d))))
		})
		row = "xn"
	}
	at := func(k ir.Expr) ir.Expr { return ld(row, ir.F32, k) }
	l.rotateRow(x, D, l.ropeAt(pos), at, store)
}
