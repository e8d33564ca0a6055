package lower

import "github.com/attnc/attnc/ir"

// Page kernels: append writes new K/V rows into their slots, copy_page
// copies the first length slots of a page (every kv head, K and V),
// compact_copy copies slots within each sequence in index order, read_kv
// reads slots back (dequantized), gather_pages and scatter_pages move
// whole pages between the pool and a contiguous buffer. A row's head dims
// are a spread loop. Every one of them works on the cache's pools
// (kvPools): K and V, or MLA's latent ckv and kpe, so an MLA cache gets
// the same kernels.
//
// Their inputs are untrusted like the attention kernels': the CPU entry
// checks the scalars, then validates every slot, page id and indptr entry
// before the first read of the pools, and returns a status with nothing
// written; the work kernels themselves skip a slot or page outside the
// pool and clamp an indptr range (a GPU kernel cannot report bad input).

// kvPool is one page pool of the cache and the names its rows take in the
// page kernels' other arguments.
type kvPool struct {
	pages string // the pool argument
	d     int    // elements per row
	scale string // its scale argument (a quantized cache)
	in    string // append's new rows
	out   string // read_kv's rows
	buf   string // gather_pages' and scatter_pages' contiguous pages
}

// kvPools are the cache's pools: K and V, or MLA's ckv (the latent,
// kv_lora_rank wide) and kpe (its RoPE part), which share k_scale.
func (l *lowering) kvPools() []kvPool {
	if m := l.v.MLA; m != nil {
		return []kvPool{
			{pages: "ckv_pages", d: m.KVLoraRank, scale: "k_scale", in: "ckv", out: "ckv_out", buf: "ckv_buf"},
			{pages: "kpe_pages", d: m.RopeDim, scale: "k_scale", in: "kpe", out: "kpe_out", buf: "kpe_buf"},
		}
	}
	return []kvPool{
		{pages: "k_pages", d: l.D, scale: "k_scale", in: "k", out: "k_out", buf: "k_buf"},
		{pages: "v_pages", d: l.DV, scale: "v_scale", in: "v", out: "v_out", buf: "v_buf"},
	}
}

// rowShape is the shape of n rows of d elements per kv head ([n, d] for
// MLA's one latent head).
func (l *lowering) rowShape(n string, d int) []string {
	if l.v.MLA != nil {
		return []string{n, itoa(d)}
	}
	return []string{n, itoa(l.KVH), itoa(d)}
}

// bufShape is the shape of a gather/scatter buffer: n pages of the pool's
// own layout.
func (l *lowering) bufShape(d int) []string {
	if l.v.MLA != nil {
		return []string{"n", itoa(l.PS), itoa(d)}
	}
	return append([]string{"n"}, l.pageShape(d)[1:]...)
}

// rowOf is the i64 element offset of row (i, kvh) in n rows of d elements
// per kv head.
func (l *lowering) rowOf(i, kvh ir.Expr, d int) ir.Expr {
	return mul(i64(add(mul(i, i32(l.KVH)), kvh)), ir.IntT(ir.I64, int64(d)))
}

// scaleOnce binds kv head kvh's scale of pool p in x, once per scale
// argument (MLA's two pools share k_scale).
func (l *lowering) scaleOnce(x *blk, bound map[string]ir.Expr, p kvPool, kvh ir.Expr) ir.Expr {
	if s, ok := bound[p.scale]; ok {
		return s
	}
	s := x.let(p.scale+"_v", l.kvScale(p.scale, kvh))
	bound[p.scale] = s
	return s
}

// slotPool is the pool's slot count, num_pages * page_size, in i64 (it may
// pass 2^31).
func (l *lowering) slotPool() ir.Expr { return mul(i64(ir.R("num_pages", ir.I32)), i64c(l.PS)) }

// outsidePool is true for a slot that is negative or past the pool.
func (l *lowering) outsidePool(slot ir.Expr) ir.Expr {
	return or(lt(slot, i32(0)), ge(i64(slot), l.slotPool()))
}

// badMapSlot is true for a position_map entry that is neither -1 (skip)
// nor a slot of the pool.
func (l *lowering) badMapSlot(slot ir.Expr) ir.Expr {
	return or(lt(slot, i32(-1)), ge(i64(slot), l.slotPool()))
}

// sizeChecks are the scalar checks of a page kernel taking a count named
// count: the count and num_pages are not negative, and items (i64) fit
// the parallel loop.
func sizeChecks(count string, items ir.Expr) []ir.Check {
	return []ir.Check{
		{Fail: or(lt(ir.R(count, ir.I32), i32(0)), lt(ir.R("num_pages", ir.I32), i32(0))), Code: ErrBadArgument},
		tooLarge(items),
	}
}

// validateMap is the validation of position_map[0..n): every entry -1 or
// a slot of the pool.
func (l *lowering) validateMap() *ir.Block {
	var v blk
	v.loop("vi", i32(0), ir.R("n", ir.I32), ir.Serial, ir.TagValidate, func(t *blk) {
		t.fail(l.badMapSlot(ldi("position_map", ir.R("vi", ir.I32))), ErrBadSlot)
	})
	return v.block()
}

// forMapSlots appends the work loop of the position_map kernels (append,
// read_kv): one item per (row, kv head), the row's slot split into page
// and offset, a slot of -1 (or, unvalidated on a GPU, outside the pool)
// skipped; body gets the row, kv head, page and offset.
func (l *lowering) forMapSlots(b *blk, body func(x *blk, i, kvh, page, off ir.Expr)) {
	n := ir.R("n", ir.I32)
	item := ir.R("item", ir.I32)
	b.loop("item", i32(0), mul(n, i32(l.KVH)), ir.Parallel, ir.TagWork, func(w *blk) {
		i := w.let("i", div(item, i32(l.KVH)))
		kvh := w.let("kvh", rem(item, i32(l.KVH)))
		slot := w.let("slot_at", ldi("position_map", i))
		w.when(and(ge(slot, i32(0)), not(l.badMapSlot(slot))), func(x *blk) {
			page := x.let("page", div(slot, i32(l.PS)))
			off := x.let("off", rem(slot, i32(l.PS)))
			body(x, i, kvh, page, off)
		})
	})
}

func (l *lowering) appendParams() []*ir.Param {
	var ps []*ir.Param
	for _, p := range l.kvPools() {
		ps = append(ps, buf(p.in, l.dt, false, l.rowShape("n", p.d)...))
	}
	ps = append(ps, buf("position_map", ir.I32, false, "n"), scalar("n"))
	return append(ps, append(append(l.pageParams(true), l.scaleParams()...), scalar("num_pages"))...)
}

func (l *lowering) copyPageParams() []*ir.Param {
	return append(l.pageParams(true), scalar("num_pages"), scalar("src_page"), scalar("dst_page"), scalar("length"))
}

// appendKernel is the append role: row i of every pool's input (every kv
// head) goes to slot position_map[i]; -1 skips the row. The entry rejects
// any other slot outside the pool before writing anything; the work
// kernel itself skips such a slot (a GPU cannot report it). A quantized
// cache stores each element's code: x / scale in f32, narrowed by the
// dtype table (nearest even, saturated; DESIGN §3).
func (l *lowering) appendKernel() ([]*ir.Kernel, *ir.Plan) {
	n := ir.R("n", ir.I32)
	var b blk
	l.forMapSlots(&b, func(x *blk, i, kvh, page, off ir.Expr) {
		scales := map[string]ir.Expr{}
		for _, p := range l.kvPools() {
			src := x.let(p.in+"_row", l.rowOf(i, kvh, p.d))
			dst := x.let(p.pages+"_row", l.rowIndex(page, kvh, off, p.d))
			value := func(d ir.Expr) ir.Expr { return ld(p.in, l.dt, add(src, i64(d))) }
			if l.v.Quantized() {
				sc := l.scaleOnce(x, scales, p, kvh)
				value = func(d ir.Expr) ir.Expr { return l.kvCode(tof32(ld(p.in, l.dt, add(src, i64(d)))), sc) }
			}
			x.spread("d", p.d, func(y *blk, d ir.Expr) { y.store(p.pages, add(dst, i64(d)), value(d)) })
		}
	})
	b.add(&ir.Return{Value: i32(0)})
	params := l.appendParams()
	k := &ir.Kernel{Name: l.name("append_work"), Role: ir.RoleAppend, Params: params, Body: b.block()}
	p := &ir.Plan{Role: ir.RoleAppend, Entry: l.name("append"), Public: true, Params: params,
		Checks:   sizeChecks("n", mul(i64(n), i64c(l.KVH))),
		Validate: l.validateMap(), Skip: eq(n, i32(0)),
		Direct: []ir.Launch{{Kernel: k.Name, Items: mul(n, i32(l.KVH))}}}
	return []*ir.Kernel{k}, p
}

// kvCode is the 8-bit code a quantized cache stores for the f32 value x
// under scale sc: x / sc in f32, narrowed by the dtype table (nearest
// even, saturated; NaN stays NaN for fp8, with the sign x86's division
// gives it on every target, and is 0 for int8; DESIGN §3;
// ir.QuotientCode). append and qkv_append both store through it.
func (l *lowering) kvCode(x, sc ir.Expr) ir.Expr { return ir.QuotientCode(l.kvt, x, sc) }

// readKV is the read_kv role (TVM's debug_get_kv; prefix-cache offload):
// the rows of every kv head at slot position_map[i] go to row i of each
// pool's output in the variant's dtype; -1 skips the row (its output row
// is not written). An 8-bit cache's codes are dequantized: code value
// times the kv head's scale in f32, rounded once to the dtype.
func (l *lowering) readKV() ([]*ir.Kernel, *ir.Plan) {
	n := ir.R("n", ir.I32)
	var b blk
	l.forMapSlots(&b, func(x *blk, i, kvh, page, off ir.Expr) {
		scales := map[string]ir.Expr{}
		for _, p := range l.kvPools() {
			src := x.let(p.pages+"_row", l.rowIndex(page, kvh, off, p.d))
			dst := x.let(p.out+"_row", l.rowOf(i, kvh, p.d))
			value := func(d ir.Expr) ir.Expr { return ld(p.pages, l.kvt, add(src, i64(d))) }
			if l.v.Quantized() {
				sc := l.scaleOnce(x, scales, p, kvh)
				value = func(d ir.Expr) ir.Expr { return ir.Cvt(l.dt, mul(l.kvLoad(p.pages, add(src, i64(d))), sc)) }
			}
			x.spread("d", p.d, func(y *blk, d ir.Expr) { y.store(p.out, add(dst, i64(d)), value(d)) })
		}
	})
	b.add(&ir.Return{Value: i32(0)})
	params := append(append(l.pageParams(false), l.scaleParams()...), scalar("num_pages"),
		buf("position_map", ir.I32, false, "n"), scalar("n"))
	for _, p := range l.kvPools() {
		params = append(params, buf(p.out, l.dt, true, l.rowShape("n", p.d)...))
	}
	k := &ir.Kernel{Name: l.name("read_kv_work"), Role: ir.RoleReadKV, Params: params, Body: b.block()}
	p := &ir.Plan{Role: ir.RoleReadKV, Entry: l.name("read_kv"), Public: true, Params: params,
		Checks:   sizeChecks("n", mul(i64(n), i64c(l.KVH))),
		Validate: l.validateMap(), Skip: eq(n, i32(0)),
		Direct: []ir.Launch{{Kernel: k.Name, Items: mul(n, i32(l.KVH))}}}
	return []*ir.Kernel{k}, p
}

// copyPage is the copy_page role: slots 0..length-1 of src_page go to
// dst_page for every kv head and pool. Its checks are scalar, so a GPU
// launcher runs them on the host.
func (l *lowering) copyPage() ([]*ir.Kernel, *ir.Plan) {
	src, dst, length := ir.R("src_page", ir.I32), ir.R("dst_page", ir.I32), ir.R("length", ir.I32)
	var b blk
	item := ir.R("item", ir.I32)
	b.loop("item", i32(0), mul(length, i32(l.KVH)), ir.Parallel, ir.TagWork, func(w *blk) {
		slot := w.let("slot_at", div(item, i32(l.KVH)))
		kvh := w.let("kvh", rem(item, i32(l.KVH)))
		for _, p := range l.kvPools() {
			from := w.let(p.pages+"_from", l.rowIndex(src, kvh, slot, p.d))
			to := w.let(p.pages+"_to", l.rowIndex(dst, kvh, slot, p.d))
			w.spread("d", p.d, func(y *blk, d ir.Expr) {
				y.store(p.pages, add(to, i64(d)), ld(p.pages, l.kvt, add(from, i64(d))))
			})
		}
	})
	b.add(&ir.Return{Value: i32(0)})
	params := l.copyPageParams()
	k := &ir.Kernel{Name: l.name("copy_page_work"), Role: ir.RoleCopyPage, Params: params, Body: b.block()}
	p := &ir.Plan{Role: ir.RoleCopyPage, Entry: l.name("copy_page"), Public: true, Params: params,
		Checks: l.copyPageChecks(), Skip: eq(length, i32(0)),
		Direct: []ir.Launch{{Kernel: k.Name, Items: mul(length, i32(l.KVH))}}}
	return []*ir.Kernel{k}, p
}

// copyPageChecks are copy_page's input checks.
func (l *lowering) copyPageChecks() []ir.Check {
	src, dst, length, np := ir.R("src_page", ir.I32), ir.R("dst_page", ir.I32), ir.R("length", ir.I32), ir.R("num_pages", ir.I32)
	return []ir.Check{
		{Fail: lt(np, i32(0)), Code: ErrBadArgument},
		{Fail: or(or(lt(src, i32(0)), ge(src, np)), or(lt(dst, i32(0)), ge(dst, np))), Code: ErrBadPageID},
		{Fail: or(lt(length, i32(0)), gt(length, i32(l.PS))), Code: ErrBadLength},
	}
}

// compactCopy is the compact_copy role (TVM's _compact_kv_copy, run after
// a speculative tree is accepted): sequence b's copies are entries
// copy_indptr[b] .. copy_indptr[b+1] of copy_src and copy_dst (slots);
// each copies the rows of every kv head and pool from slot copy_src[j] to
// copy_dst[j]. One work item per (sequence, kv head) runs its copies in
// index order, each finished before the next reads, so an overlapping
// left shift is exact; sequences are independent. 8-bit codes move as
// stored. The entry validates copy_indptr like an indptr (BAD_KV_INDPTR)
// and every slot it names (BAD_SLOT: -1 is not a skip here).
func (l *lowering) compactCopy() ([]*ir.Kernel, *ir.Plan) {
	bs := ir.R("batch_size", ir.I32)
	var b blk
	item := ir.R("item", ir.I32)
	b.loop("item", i32(0), mul(bs, i32(l.KVH)), ir.Parallel, ir.TagWork, func(w *blk) {
		sb := w.let("sb", div(item, i32(l.KVH)))
		kvh := w.let("kvh", rem(item, i32(l.KVH)))
		// Clamped to the copies the ABI gives (copy_indptr[batch_size]):
		// a GPU kernel runs on unvalidated indptrs.
		lo := w.let("c_beg", maxE(ldi("copy_indptr", sb), i32(0)))
		hi := w.let("c_end", minE(ldi("copy_indptr", add(sb, i32(1))), ldi("copy_indptr", bs)))
		w.loop("cj", lo, hi, ir.Serial, ir.NoTag, func(x *blk) {
			cj := ir.R("cj", ir.I32)
			from := x.let("c_src", ldi("copy_src", cj))
			to := x.let("c_dst", ldi("copy_dst", cj))
			x.when(not(or(l.outsidePool(from), l.outsidePool(to))), func(y *blk) {
				for _, p := range l.kvPools() {
					fr := y.let(p.pages+"_from", l.rowIndex(div(from, i32(l.PS)), kvh, rem(from, i32(l.PS)), p.d))
					tr := y.let(p.pages+"_to", l.rowIndex(div(to, i32(l.PS)), kvh, rem(to, i32(l.PS)), p.d))
					y.spread("d", p.d, func(z *blk, d ir.Expr) {
						z.store(p.pages, add(tr, i64(d)), ld(p.pages, l.kvt, add(fr, i64(d))))
					})
				}
			})
		})
	})
	b.add(&ir.Return{Value: i32(0)})
	params := append(l.pageParams(true), scalar("num_pages"),
		buf("copy_indptr", ir.I32, false, "batch_size+1"),
		buf("copy_src", ir.I32, false, "total_copies"), buf("copy_dst", ir.I32, false, "total_copies"),
		scalar("batch_size"))
	k := &ir.Kernel{Name: l.name("compact_copy_work"), Role: ir.RoleCompactCopy, Params: params, Body: b.block()}
	var v blk
	v.when(gt(bs, i32(0)), func(t *blk) {
		t.fail(lt(ldi("copy_indptr", i32(0)), i32(0)), ErrBadKVIndptr)
		vi := ir.R("vi", ir.I32)
		t.loop("vi", i32(0), bs, ir.Serial, ir.TagValidate, func(u *blk) {
			u.fail(lt(ldi("copy_indptr", add(vi, i32(1))), ldi("copy_indptr", vi)), ErrBadKVIndptr)
		})
		// copy_indptr is ordered: its range holds every copy.
		vj := ir.R("vj", ir.I32)
		t.loop("vj", ldi("copy_indptr", i32(0)), ldi("copy_indptr", bs), ir.Serial, ir.TagValidate, func(u *blk) {
			u.fail(or(l.outsidePool(ldi("copy_src", vj)), l.outsidePool(ldi("copy_dst", vj))), ErrBadSlot)
		})
	})
	p := &ir.Plan{Role: ir.RoleCompactCopy, Entry: l.name("compact_copy"), Public: true, Params: params,
		Checks:   sizeChecks("batch_size", mul(i64(bs), i64c(l.KVH))),
		Validate: v.block(), Skip: eq(bs, i32(0)),
		Direct: []ir.Launch{{Kernel: k.Name, Items: mul(bs, i32(l.KVH))}}}
	return []*ir.Kernel{k}, p
}

// movePages is gather_pages (toPool false: page page_ids[i] of every pool
// → page i of its buffer) or scatter_pages (toPool true: the other way).
// A page is page_size * kv_heads contiguous rows in either layout, so the
// buffer holds whole pages as the pool stores them (8-bit pages as
// codes); one work item per (page, row). Every page id must be in
// 0..num_pages-1 (BAD_PAGE_ID); scatter also rejects an id named twice
// (BAD_PAGE_ID: two buffer pages would race for one pool page), a check
// over every earlier id, serial in n^2.
func (l *lowering) movePages(toPool bool) ([]*ir.Kernel, *ir.Plan) {
	role, name := ir.RoleGatherPages, "gather_pages"
	if toPool {
		role, name = ir.RoleScatterPages, "scatter_pages"
	}
	n, np := ir.R("n", ir.I32), ir.R("num_pages", ir.I32)
	rows := l.PS * l.KVH // rows per page
	bad := func(pg ir.Expr) ir.Expr { return or(lt(pg, i32(0)), ge(pg, np)) }
	var b blk
	item := ir.R("item", ir.I32)
	b.loop("item", i32(0), mul(n, i32(rows)), ir.Parallel, ir.TagWork, func(w *blk) {
		i := w.let("i", div(item, i32(rows)))
		r := w.let("r", rem(item, i32(rows)))
		pg := w.let("page", ldi("page_ids", i))
		w.when(not(bad(pg)), func(x *blk) {
			for _, p := range l.kvPools() {
				at := x.let(p.pages+"_row", mul(add(mul(i64(pg), i64c(rows)), i64(r)), i64c(p.d)))
				bi := x.let(p.buf+"_row", mul(add(mul(i64(i), i64c(rows)), i64(r)), i64c(p.d)))
				x.spread("d", p.d, func(y *blk, d ir.Expr) {
					if toPool {
						y.store(p.pages, add(at, i64(d)), ld(p.buf, l.kvt, add(bi, i64(d))))
					} else {
						y.store(p.buf, add(bi, i64(d)), ld(p.pages, l.kvt, add(at, i64(d))))
					}
				})
			}
		})
	})
	b.add(&ir.Return{Value: i32(0)})
	var bufs []*ir.Param
	for _, p := range l.kvPools() {
		bufs = append(bufs, buf(p.buf, l.kvt, !toPool, l.bufShape(p.d)...))
	}
	ids := []*ir.Param{buf("page_ids", ir.I32, false, "n"), scalar("n")}
	var params []*ir.Param
	if toPool {
		params = append(append(append(bufs, ids...), l.pageParams(true)...), scalar("num_pages"))
	} else {
		params = append(append(append(l.pageParams(false), scalar("num_pages")), ids...), bufs...)
	}
	k := &ir.Kernel{Name: l.name(name + "_work"), Role: role, Params: params, Body: b.block()}
	var v blk
	vi, vj := ir.R("vi", ir.I32), ir.R("vj", ir.I32)
	v.loop("vi", i32(0), n, ir.Serial, ir.TagValidate, func(t *blk) {
		id := t.let("v_page", ldi("page_ids", vi))
		t.fail(bad(id), ErrBadPageID)
		if toPool {
			t.loop("vj", i32(0), vi, ir.Serial, ir.NoTag, func(u *blk) {
				u.fail(eq(ldi("page_ids", vj), id), ErrBadPageID)
			})
		}
	})
	p := &ir.Plan{Role: role, Entry: l.name(name), Public: true, Params: params,
		Checks:   sizeChecks("n", mul(i64(n), i64c(rows))),
		Validate: v.block(), Skip: eq(n, i32(0)),
		Direct: []ir.Launch{{Kernel: k.Name, Items: mul(n, i32(rows))}}}
	return []*ir.Kernel{k}, p
}
