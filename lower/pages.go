package lower

import "github.com/attnc/attnc/ir"

// Page kernels: append writes new K/V rows into their slots, copy_page
// copies the first length slots of a page (every kv head, K and V). CPU and
// GPU kernels are built by the same code and differ only in how a row's
// head dims are spread (a vector loop, or the block's threads).

// Status codes of the page kernels.
const (
	ErrBadSlot   = -10
	ErrBadLength = -11
)

func (l *lowering) appendParams() []*ir.Param {
	return append([]*ir.Param{
		buf("k", l.dt, false, "n", itoa(l.KVH), itoa(l.D)),
		buf("v", l.dt, false, "n", itoa(l.KVH), itoa(l.DV)),
		buf("position_map", ir.I32, false, "n"),
		scalar("n"),
	}, append(l.pageParams(true), scalar("num_pages"))...)
}

func (l *lowering) copyPageParams() []*ir.Param {
	return append(l.pageParams(true), scalar("num_pages"), scalar("src_page"), scalar("dst_page"), scalar("length"))
}

// rowLoop spreads body over the d elements of a row.
type rowLoop func(b *blk, d int, body func(*blk, ir.Expr))

func cpuRow(b *blk, d int, body func(*blk, ir.Expr)) {
	b.loop("d", i32(0), i32(d), ir.Vector, "", func(x *blk) { body(x, ir.R("d", ir.I32)) })
}

func gpuRow(b *blk, d int, body func(*blk, ir.Expr)) {
	b.loop("dk", i32(0), i32((d+GPUThreads-1)/GPUThreads), ir.Serial, "", func(x *blk) {
		e := x.let("dd", add(ir.R("t", ir.I32), mul(ir.R("dk", ir.I32), i32(GPUThreads))))
		x.when(lt(e, i32(d)), func(y *blk) { body(y, e) })
	})
}

// workItems appends the parallel loop over n items; on the GPU its body
// runs on a block's threads.
func workItems(b *blk, n ir.Expr, gpu bool, body func(*blk)) {
	b.loop("item", i32(0), n, ir.Parallel, "work", func(w *blk) {
		if !gpu {
			body(w)
			return
		}
		w.loop("t", i32(0), i32(GPUThreads), ir.Threads, "", body)
	})
}

// appendKernel writes row i of k and v (every kv head) to slot
// position_map[i]; -1 skips the row. The CPU kernel rejects any other slot
// outside the pool before writing anything; the GPU kernel skips it.
func (l *lowering) appendKernel(name string, gpu bool) *ir.Kernel {
	var b blk
	// The pool's slot count in i64: num_pages * page_size may pass 2^31.
	n, pool := ir.R("n", ir.I32), mul(i64(ir.R("num_pages", ir.I32)), i64c(l.PS))
	pm := func(i ir.Expr) ir.Expr { return ldi("position_map", i) }
	bad := func(slot ir.Expr) ir.Expr { return or(lt(slot, i32(-1)), ge(i64(slot), pool)) }
	row := l.rowOf(gpu)
	if !gpu {
		b.fail(or(lt(n, i32(0)), lt(ir.R("num_pages", ir.I32), i32(0))), ErrBadArgument)
		failTooLarge(&b, mul(i64(n), i64c(l.KVH)))
		b.loop("vi", i32(0), n, ir.Serial, "validate", func(t *blk) {
			t.fail(bad(pm(ir.R("vi", ir.I32))), ErrBadSlot)
		})
	}
	item := ir.R("item", ir.I32)
	workItems(&b, mul(n, i32(l.KVH)), gpu, func(w *blk) {
		i := w.let("i", div(item, i32(l.KVH)))
		kvh := w.let("kvh", rem(item, i32(l.KVH)))
		slot := w.let("slot_at", pm(i))
		w.when(and(ge(slot, i32(0)), not(bad(slot))), func(x *blk) {
			page := x.let("page", div(slot, i32(l.PS)))
			off := x.let("off", rem(slot, i32(l.PS)))
			for _, kv := range []struct {
				src, dst string
				d        int
			}{{"k", "k_pages", l.D}, {"v", "v_pages", l.DV}} {
				src := x.let(kv.src+"_row", mul(i64(add(mul(i, i32(l.KVH)), kvh)), ir.IntT(ir.I64, int64(kv.d))))
				dst := x.let(kv.dst+"_row", l.rowIndex(page, kvh, off, kv.d))
				row(x, kv.d, func(y *blk, d ir.Expr) {
					y.store(kv.dst, add(dst, i64(d)), ld(kv.src, l.dt, add(src, i64(d))))
				})
			}
		})
	})
	b.add(&ir.Return{Value: i32(0)})
	return &ir.Kernel{Name: name, Role: ir.RoleAppend, Entry: !gpu, Params: l.appendParams(), Body: b.block()}
}

// copyPageKernel copies slots 0..length-1 of src_page to dst_page for every
// kv head, K and V. The CPU kernel checks the page ids and the length; the
// GPU launcher checks them on the host.
func (l *lowering) copyPageKernel(name string, gpu bool) *ir.Kernel {
	var b blk
	src, dst, length := ir.R("src_page", ir.I32), ir.R("dst_page", ir.I32), ir.R("length", ir.I32)
	if !gpu {
		for _, c := range l.copyPageChecks() {
			b.fail(c.Fail, c.Code)
		}
	}
	row := l.rowOf(gpu)
	item := ir.R("item", ir.I32)
	workItems(&b, mul(length, i32(l.KVH)), gpu, func(w *blk) {
		slot := w.let("slot_at", div(item, i32(l.KVH)))
		kvh := w.let("kvh", rem(item, i32(l.KVH)))
		for _, kv := range []struct {
			pages string
			d     int
		}{{"k_pages", l.D}, {"v_pages", l.DV}} {
			from := w.let(kv.pages+"_from", l.rowIndex(src, kvh, slot, kv.d))
			to := w.let(kv.pages+"_to", l.rowIndex(dst, kvh, slot, kv.d))
			row(w, kv.d, func(y *blk, d ir.Expr) {
				y.store(kv.pages, add(to, i64(d)), ld(kv.pages, l.dt, add(from, i64(d))))
			})
		}
	})
	b.add(&ir.Return{Value: i32(0)})
	return &ir.Kernel{Name: name, Role: ir.RoleCopyPage, Entry: !gpu, Params: l.copyPageParams(), Body: b.block()}
}

// copyPageChecks are copy_page's input checks (scalars only, so the GPU
// launcher runs them on the host).
func (l *lowering) copyPageChecks() []ir.Check {
	src, dst, length, np := ir.R("src_page", ir.I32), ir.R("dst_page", ir.I32), ir.R("length", ir.I32), ir.R("num_pages", ir.I32)
	return []ir.Check{
		{Fail: lt(np, i32(0)), Code: ErrBadArgument},
		{Fail: or(or(lt(src, i32(0)), ge(src, np)), or(lt(dst, i32(0)), ge(dst, np))), Code: ErrBadPageID},
		{Fail: or(lt(length, i32(0)), gt(length, i32(l.PS))), Code: ErrBadLength},
	}
}

func (l *lowering) rowOf(gpu bool) rowLoop {
	if gpu {
		return gpuRow
	}
	return cpuRow
}
