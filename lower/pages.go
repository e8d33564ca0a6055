package lower

import "github.com/attnc/attnc/ir"

// Page kernels: append writes new K/V rows into their slots, copy_page
// copies the first length slots of a page (every kv head, K and V); a
// row's head dims are a spread loop.

func (l *lowering) appendParams() []*ir.Param {
	return append([]*ir.Param{
		buf("k", l.dt, false, "n", itoa(l.KVH), itoa(l.D)),
		buf("v", l.dt, false, "n", itoa(l.KVH), itoa(l.DV)),
		buf("position_map", ir.I32, false, "n"),
		scalar("n"),
	}, append(append(l.pageParams(true), l.scaleParams()...), scalar("num_pages"))...)
}

func (l *lowering) copyPageParams() []*ir.Param {
	return append(l.pageParams(true), scalar("num_pages"), scalar("src_page"), scalar("dst_page"), scalar("length"))
}

// appendKernel is the append role: row i of k and v (every kv head) goes
// to slot position_map[i]; -1 skips the row. The entry rejects any other
// slot outside the pool before writing anything; the work kernel itself
// skips such a slot (a GPU cannot report it). A quantized cache stores
// each element's code: x / scale in f32, narrowed by the dtype table
// (nearest even, saturated; DESIGN §3).
func (l *lowering) appendKernel() ([]*ir.Kernel, *ir.Plan) {
	n, np := ir.R("n", ir.I32), ir.R("num_pages", ir.I32)
	// The pool's slot count in i64: num_pages * page_size may pass 2^31.
	pool := mul(i64(np), i64c(l.PS))
	pm := func(i ir.Expr) ir.Expr { return ldi("position_map", i) }
	bad := func(slot ir.Expr) ir.Expr { return or(lt(slot, i32(-1)), ge(i64(slot), pool)) }
	var b blk
	item := ir.R("item", ir.I32)
	b.loop("item", i32(0), mul(n, i32(l.KVH)), ir.Parallel, ir.TagWork, func(w *blk) {
		i := w.let("i", div(item, i32(l.KVH)))
		kvh := w.let("kvh", rem(item, i32(l.KVH)))
		slot := w.let("slot_at", pm(i))
		w.when(and(ge(slot, i32(0)), not(bad(slot))), func(x *blk) {
			page := x.let("page", div(slot, i32(l.PS)))
			off := x.let("off", rem(slot, i32(l.PS)))
			for _, kv := range []struct {
				src, dst, scale string
				d               int
			}{{"k", "k_pages", "k_scale", l.D}, {"v", "v_pages", "v_scale", l.DV}} {
				src := x.let(kv.src+"_row", mul(i64(add(mul(i, i32(l.KVH)), kvh)), ir.IntT(ir.I64, int64(kv.d))))
				dst := x.let(kv.dst+"_row", l.rowIndex(page, kvh, off, kv.d))
				value := func(d ir.Expr) ir.Expr { return ld(kv.src, l.dt, add(src, i64(d))) }
				if l.v.Quantized() {
					sc := x.let(kv.scale+"_v", l.kvScale(kv.scale, kvh))
					value = func(d ir.Expr) ir.Expr {
						return ir.Cvt(l.kvt, div(tof32(ld(kv.src, l.dt, add(src, i64(d)))), sc))
					}
				}
				x.spread("d", kv.d, func(y *blk, d ir.Expr) { y.store(kv.dst, add(dst, i64(d)), value(d)) })
			}
		})
	})
	b.add(&ir.Return{Value: i32(0)})
	params := l.appendParams()
	k := &ir.Kernel{Name: l.name("append_work"), Role: ir.RoleAppend, Params: params, Body: b.block()}
	var v blk
	v.loop("vi", i32(0), n, ir.Serial, ir.TagValidate, func(t *blk) {
		t.fail(bad(pm(ir.R("vi", ir.I32))), ErrBadSlot)
	})
	p := &ir.Plan{Role: ir.RoleAppend, Entry: l.name("append"), Public: true, Params: params,
		Checks:   []ir.Check{{Fail: or(lt(n, i32(0)), lt(np, i32(0))), Code: ErrBadArgument}, tooLarge(mul(i64(n), i64c(l.KVH)))},
		Validate: v.block(), Skip: eq(n, i32(0)),
		Direct: []ir.Launch{{Kernel: k.Name, Items: mul(n, i32(l.KVH))}}}
	return []*ir.Kernel{k}, p
}

// copyPage is the copy_page role: slots 0..length-1 of src_page go to
// dst_page for every kv head, K and V. Its checks are scalar, so a GPU
// launcher runs them on the host.
func (l *lowering) copyPage() ([]*ir.Kernel, *ir.Plan) {
	src, dst, length := ir.R("src_page", ir.I32), ir.R("dst_page", ir.I32), ir.R("length", ir.I32)
	var b blk
	item := ir.R("item", ir.I32)
	b.loop("item", i32(0), mul(length, i32(l.KVH)), ir.Parallel, ir.TagWork, func(w *blk) {
		slot := w.let("slot_at", div(item, i32(l.KVH)))
		kvh := w.let("kvh", rem(item, i32(l.KVH)))
		for _, kv := range []struct {
			pages string
			d     int
		}{{"k_pages", l.D}, {"v_pages", l.DV}} {
			from := w.let(kv.pages+"_from", l.rowIndex(src, kvh, slot, kv.d))
			to := w.let(kv.pages+"_to", l.rowIndex(dst, kvh, slot, kv.d))
			w.spread("d", kv.d, func(y *blk, d ir.Expr) {
				y.store(kv.pages, add(to, i64(d)), ld(kv.pages, l.kvt, add(from, i64(d))))
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
