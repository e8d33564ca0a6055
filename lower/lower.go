package lower

import (
	"fmt"
	"math"

	"github.com/attnc/attnc/ir"
)

var negInfV = math.Inf(-1)

// Status codes every generated module returns (DESIGN §4: 0 ok, negative bad input).
const (
	ErrBadArgument = -1 - iota
	ErrBadQOIndptr
	ErrBadKVIndptr
	ErrBadLastPageLen
	ErrBadPageID
	ErrQLenExceedsKVLen
	ErrNoMemory
)

// ErrTooLarge rejects a call that needs more than MaxItems work items.
const ErrTooLarge = -13

// Errors is the status table of every module.
var Errors = []ir.ErrorCode{
	{Code: ErrBadArgument, Name: "bad_argument", Msg: "a size argument (batch_size, num_pages, max_blocks or n) is negative"},
	{Code: ErrBadQOIndptr, Name: "bad_qo_indptr", Msg: "qo_indptr must start at or above 0, be non-decreasing and give each sequence at most 2^30 tokens"},
	{Code: ErrBadKVIndptr, Name: "bad_kv_indptr", Msg: "kv_indptr must start at or above 0 and be non-decreasing"},
	{Code: ErrBadLastPageLen, Name: "bad_last_page_len", Msg: "kv_last_page_len must be in 1..page_size for a sequence with pages"},
	{Code: ErrBadPageID, Name: "bad_page_id", Msg: "a page id is neither -1 nor in 0..num_pages-1"},
	{Code: ErrQLenExceedsKVLen, Name: "q_len_exceeds_kv_len", Msg: "a sequence has more query tokens than cached tokens (q_len > kv_len)"},
	{Code: ErrNoMemory, Name: "no_memory", Msg: "scratch memory allocation failed"},
	{Code: ErrBadKVLen, Name: "bad_kv_len", Msg: "a sequence's kv_len must be in 0..2^30 (block tables: kv_lens in 0..max_blocks*page_size)"},
	{Code: ErrBadSlot, Name: "bad_slot", Msg: "a position_map slot is outside 0..num_pages*page_size-1 and not -1"},
	{Code: ErrBadLength, Name: "bad_length", Msg: "copy_page length must be in 0..page_size"},
	{Code: ErrBadMaskIndptr, Name: "bad_mask_indptr", Msg: "tree_order_indptr must start at or above 0, be non-decreasing and give each sequence q_len of the total_q rows; mask_indptr likewise with enough bytes for q_len*kv_len bits"},
	{Code: ErrTooLarge, Name: "too_large", Msg: "the call needs more than 2^31-1 work items (batch_size x kv_heads x query tiles, or n x heads): split it"},
}

// KVTile is the number of KV positions a tile covers, whatever the page size:
// a tile may span many small pages or part of a large one.
const KVTile = 64

// HeadTile is how many qo heads of a GQA group a CPU work item serves: the
// whole group up to 16 heads (so a K/V tile is loaded once for all of
// them), else the largest divisor of the group not above 16, which keeps a
// work item's stack arrays small and gives wide groups (MQA, MLA's 128
// heads) parallelism.
func HeadTile(g int) int {
	for d := min(g, 16); d > 1; d-- {
		if g%d == 0 {
			return d
		}
	}
	return 1
}

// QTile is the number of query rows per work item for group size g (use
// HeadTile(G)), chosen so that a work item holds about 64 (row, head) pairs.
func QTile(g int) int {
	if g >= 64 {
		return 1
	}
	return 64 / g
}

// Unsupported reports the first feature of v that this version cannot
// generate kernels for, as file:line:col: not supported yet: <feature>.
func Unsupported(v *ir.Variant) error {
	if v.MLA != nil && v.Rope != nil {
		return ir.Errorf(v.Rope.Pos, "not supported yet: rope inline with mla (MLA's rope part arrives rotated in q_pe and kpe_pages)")
	}
	if v.MLA != nil {
		for _, k := range v.Kernels {
			if k.Role == ir.RoleAppend || k.Role == ir.RoleCopyPage {
				return ir.Errorf(k.Pos, "not supported yet: kernel %s with mla", k.Role)
			}
		}
	}
	for _, k := range v.Kernels {
		switch k.Role {
		case ir.RolePrefill, ir.RoleDecode, ir.RoleMergeState, ir.RoleAppend, ir.RoleCopyPage:
		default:
			return ir.Errorf(k.Pos, "not supported yet: kernel %s", k.Role)
		}
	}
	if !ir.ValidPageSize(v.PageSize) {
		return ir.Errorf(v.CachePos, "page_size %d is not valid: use a power of two from 1 to 256", v.PageSize)
	}
	return nil
}

// Lower builds the kernel-IR module of v: one entry kernel per listed role
// (plus the decode kernel prefill dispatches to), the mask/score/dispatch
// Defs and the status table.
func Lower(v *ir.Variant) (*ir.Module, error) {
	if err := Unsupported(v); err != nil {
		return nil, err
	}
	l := &lowering{v: v, dt: v.DType.Type(), H: v.QOHeads, KVH: v.KVHeads, G: v.GroupSize(),
		D: v.HeadDimQK, DV: v.HeadDimV, PS: v.PageSize, p: v.Name}
	m := &ir.Module{Name: v.Name, Prefix: v.Name, Errors: Errors}
	m.Defs = []*ir.Def{MaskDef(v), ScoreDef(v), PlanSplitsDef()}
	needDecode := v.HasRole(ir.RoleDecode) || v.HasRole(ir.RolePrefill)
	if v.HasRole(ir.RolePrefill) {
		m.Kernels = append(m.Kernels, l.prefill(v.HasRole(ir.RoleDecode)))
	}
	if needDecode {
		m.Kernels = append(m.Kernels, l.decode(v.HasRole(ir.RoleDecode)))
	}
	if v.HasRole(ir.RoleMergeState) {
		m.Kernels = append(m.Kernels, l.mergeState())
	}
	if v.HasRole(ir.RoleAppend) {
		m.Kernels = append(m.Kernels, l.appendKernel(l.name("append"), false))
	}
	if v.HasRole(ir.RoleCopyPage) {
		m.Kernels = append(m.Kernels, l.copyPageKernel(l.name("copy_page"), false))
	}
	return m, nil
}

type lowering struct {
	v                *ir.Variant
	dt               ir.Type
	H, KVH, G, D, DV int
	PS               int
	p                string
}

func scalar(name string) *ir.Param { return &ir.Param{Name: name, Elem: ir.I32} }

func buf(name string, t ir.Type, out bool, shape ...string) *ir.Param {
	return &ir.Param{Name: name, Buffer: true, Elem: t, Shape: shape, Output: out}
}

func itoa(n int) string { return fmt.Sprint(n) }

func (l *lowering) pageShape(d int) []string {
	if l.v.Layout == ir.NHD {
		return []string{"num_pages", itoa(l.PS), itoa(l.KVH), itoa(d)}
	}
	return []string{"num_pages", itoa(l.KVH), itoa(l.PS), itoa(d)}
}

// cacheParams are the paged-cache arguments shared by prefill and decode.
func (l *lowering) cacheParams() []*ir.Param {
	return append(append(l.pageParams(false), scalar("num_pages")), append(l.tableParams(), scalar("batch_size"))...)
}

// outParams are the learned sinks (when the variant has them) and the
// outputs.
func (l *lowering) outParams(rows string) []*ir.Param {
	lse := buf("lse", ir.F32, true, rows, itoa(l.H))
	lse.Null = true
	out := []*ir.Param{buf("o", l.dt, true, rows, itoa(l.H), itoa(l.DV)), lse}
	if l.learnedSinks() {
		out = append([]*ir.Param{buf("sinks", ir.F32, false, itoa(l.H))}, out...)
	}
	return out
}

func (l *lowering) learnedSinks() bool { return l.v.Sinks != nil && l.v.Sinks.Kind == ir.SinkLearned }

// finish turns a row's running denominator lv and max m into the factor
// that normalizes its accumulator and its lse. A learned sink (per head,
// sink = true) joins the denominator without a value: lse = log(sum +
// exp(sink)); a row with nothing visible then has o = 0 and lse = sink.
func (l *lowering) finish(b *blk, lv, m, head ir.Expr, sink bool) (inv, lse ir.Expr) {
	live := gt(lv, f32(0))
	if !sink || !l.learnedSinks() {
		return b.let("inv", sel(live, ir.Bin(ir.Div, f32(1), lv), f32(0))),
			b.let("lse_v", sel(live, add(m, ir.Un(ir.Log, lv)), negInf()))
	}
	sk := b.let("sink", ld("sinks", ir.F32, head))
	mf := b.let("m_fin", sel(live, maxE(m, sk), sk))
	e1 := b.let("e_row", sel(live, ir.Un(ir.Exp, sub(m, mf)), f32(0)))
	dn := b.let("den_fin", add(mul(lv, e1), ir.Un(ir.Exp, sub(sk, mf))))
	return b.let("inv", ir.Bin(ir.Div, e1, dn)), b.let("lse_v", add(mf, ir.Un(ir.Log, dn)))
}

// userLSE converts a natural-log lse, which the kernels keep internally
// (split-KV partials included), to the variant's lse base as it is stored
// to the caller's lse: lse / ln 2 for base 2, as FlashInfer and TVM return.
// One rounding of the final value; -inf and NaN pass through.
func (l *lowering) userLSE(lse ir.Expr) ir.Expr {
	if l.v.LSEBase == ir.LSEBase2 {
		return mul(lse, f32(math.Log2E))
	}
	return lse
}

// validateCache validates an attention entry's inputs in the order the
// comment in table.go gives (scalars, indptrs, per-sequence lengths and
// masks, page ids) before any data is read. Sequence b's q_len is the
// qo_indptr difference (prefill) or 1 (decode); each runs per sequence
// after its checks, for reductions such as the longest query.
func (l *lowering) validateCache(b *blk, prefill bool, each func(t *blk, vb *ir.Ref, qLen, kvLen ir.Expr)) {
	bs := ir.R("batch_size", ir.I32)
	b.fail(lt(bs, i32(0)), ErrBadArgument)
	b.fail(lt(ir.R("num_pages", ir.I32), i32(0)), ErrBadArgument)
	l.validateTableScalars(b)
	l.validateIndptrs(b, prefill)
	b.loop("vs", i32(0), bs, ir.Serial, "validate", func(t *blk) {
		vb := ir.R("vs", ir.I32)
		var qLen ir.Expr = i32(1)
		if prefill {
			// qo_indptr is ordered: the difference cannot wrap.
			qLen = t.let("v_q_len", sub(ldi("qo_indptr", add(vb, i32(1))), ldi("qo_indptr", vb)))
			t.fail(gt(qLen, i32(MaxSeqLen)), ErrBadQOIndptr)
		}
		kvLen := l.validateTable(t, vb)
		if !l.v.NonCausal() { // mask none: cross attention takes any q_len and kv_len
			t.fail(gt(qLen, kvLen), ErrQLenExceedsKVLen)
		}
		l.validateMasks(t, vb, qLen, kvLen)
		each(t, vb, qLen, kvLen)
	})
	l.validatePageIDs(b)
}

// rowIndex is the element offset of (page, kv head, slot) in a page pool of
// head dim d, as i64.
func (l *lowering) rowIndex(page, kvh, slot ir.Expr, d int) ir.Expr {
	var r ir.Expr
	if l.v.Layout == ir.NHD {
		r = add(mul(add(mul(i64(page), ir.IntT(ir.I64, int64(l.PS))), i64(slot)), ir.IntT(ir.I64, int64(l.KVH))), i64(kvh))
	} else {
		r = add(mul(add(mul(i64(page), ir.IntT(ir.I64, int64(l.KVH))), i64(kvh)), ir.IntT(ir.I64, int64(l.PS))), i64(slot))
	}
	return mul(r, ir.IntT(ir.I64, int64(d)))
}

// tileWork describes one work item of the online-softmax skeleton: which
// sequence and kv head, which query rows, which KV tiles, and where the
// normalized result goes.
type tileWork struct {
	qt           int     // query rows per item (compile-time bound)
	b, kvh       ir.Expr // sequence, kv head
	qRow0        ir.Expr // first query row (index into q / o rows)
	rows         ir.Expr // rows in this item (<= qt)
	qPos0        ir.Expr // position of the first row
	kvBeg, kvLen ir.Expr // page-table offset and cached length
	tileLo       ir.Expr // first KV tile
	tileHi       ir.Expr // end KV tile (exclusive)
	store        func(b *blk, row, head ir.Expr, acc func(dv ir.Expr) ir.Expr, inv, lse ir.Expr)
	partial      bool    // a split-KV chunk: learned sinks join at the merge
	qBase        ir.Expr // position of the sequence's first query token
	qSeqRow      ir.Expr // row of the sequence's first query token
	ht           ir.Expr // head tile: heads ht*HeadTile(G) .. of the group
}

// attend appends the shared online-softmax skeleton for one work item: load
// the group's query rows, walk KV tiles (each K/V tile loaded once for all
// qo heads of the group), score, transform, mask, update the running max,
// sum and accumulator, then normalize and store.
func (l *lowering) attend(b *blk, w tileWork) {
	G, QT, D, DV, KT := HeadTile(l.G), w.qt, l.D, l.DV, KVTile
	// head0 is the first qo head of the work item; g counts from it.
	head0 := mul(w.kvh, i32(l.G))
	if c, ok := w.ht.(*ir.Const); !ok || c.Int != 0 {
		head0 = add(head0, mul(w.ht, i32(G)))
	}
	b.alloc("qs", ir.F32, G*QT*D)
	b.alloc("acc", ir.F32, G*QT*DV)
	b.alloc("mx", ir.F32, G*QT)
	b.alloc("den", ir.F32, G*QT)
	b.alloc("kb", ir.F32, KT*D)
	b.alloc("vb", ir.F32, KT*DV)
	b.alloc("sc", ir.F32, KT)
	if l.v.Rope != nil {
		l.ropeTable(b)
		l.fillRopeTable(b)
	}
	if l.hidesBlocks() {
		b.alloc("kvis", ir.I32, KT)
	}
	g, r, d, j := ir.R("g", ir.I32), ir.R("r", ir.I32), ir.R("d", ir.I32), ir.R("j", ir.I32)
	rowOf := func() ir.Expr { return add(mul(g, i32(QT)), r) }
	// Load and convert the group's query rows; reset the running state.
	b.loop("g", i32(0), i32(G), ir.Serial, "", func(t *blk) {
		t.loop("r", i32(0), w.rows, ir.Serial, "", func(u *blk) {
			row := u.let("row", rowOf())
			qflat := u.let("qflat", rowHead(add(w.qRow0, r), l.H, add(head0, g)))
			for _, sg := range l.qSegs() {
				qrow := u.let("qrow"+segName(sg), mul(qflat, ir.IntT(ir.I64, int64(sg.w))))
				u.loop("d", i32(0), i32(sg.w), ir.Vector, "", func(x *blk) {
					l.stageRow(x, "qs", add(mul(row, i32(D)), plus(d, sg.off)), l.qRopePos(x, add(w.qRow0, r)), d,
						func(k ir.Expr) ir.Expr { return tof32(ld(sg.buf, l.dt, add(qrow, i64(k)))) }, true)
				})
			}
			u.store("mx", row, negInf())
			u.store("den", row, f32(0))
			u.loop("d", i32(0), i32(DV), ir.Vector, "", func(x *blk) {
				x.store("acc", add(mul(row, i32(DV)), d), f32(0))
			})
		})
	})
	kt := ir.R("kt", ir.I32)
	tile := b.loop("kt", w.tileLo, w.tileHi, ir.Serial, "kv_tile", func(t *blk) {
		kvLo := t.let("kv_lo", mul(kt, i32(KT)))
		kvN := t.let("kv_n", minE(i32(KT), sub(w.kvLen, kvLo)))
		// Page-table walk: each position finds its page, so a tile may
		// span pages of any power-of-two size.
		t.loop("j", i32(0), kvN, ir.Serial, "kv_load", func(u *blk) {
			pos := u.let("kv_at", add(kvLo, j))
			page := u.let("page", l.pageAt(w.kvBeg, pos))
			slot := u.let("slot", ir.Bin(ir.And, pos, i32(l.PS-1)))
			load := func(x *blk) {
				for _, sg := range l.kSegs() {
					krow := x.let("krow"+segName(sg), l.rowIndex(page, w.kvh, slot, sg.w))
					x.loop("d", i32(0), i32(sg.w), ir.Vector, "", func(y *blk) {
						l.stageRow(y, "kb", add(mul(j, i32(D)), plus(d, sg.off)), l.kRopePos(y, pos, w.b, w.qBase, w.qSeqRow), d,
							func(k ir.Expr) ir.Expr { return tof32(ld(sg.buf, l.dt, add(krow, i64(k)))) }, true)
					})
				}
				for _, sg := range l.vSegs() {
					vrow := x.let("vrow"+segName(sg), l.rowIndex(page, w.kvh, slot, sg.w))
					x.loop("d", i32(0), i32(sg.w), ir.Vector, "", func(y *blk) {
						y.store("vb", add(mul(j, i32(DV)), plus(d, sg.off)), tof32(ld(sg.buf, l.dt, add(vrow, i64(d)))))
					})
				}
			}
			if !l.hidesBlocks() {
				load(u)
				return
			}
			// A -1 block is never read: zeros, and its positions masked.
			hidden := lt(page, i32(0))
			u.store("kvis", j, sel(hidden, i32(0), i32(1)))
			u.add(&ir.If{Cond: hidden, Then: func() *ir.Block {
				var x blk
				x.loop("d", i32(0), i32(D), ir.Vector, "", func(y *blk) { y.store("kb", add(mul(j, i32(D)), d), f32(0)) })
				x.loop("d", i32(0), i32(DV), ir.Vector, "", func(y *blk) { y.store("vb", add(mul(j, i32(DV)), d), f32(0)) })
				return x.block()
			}(), Else: func() *ir.Block {
				var x blk
				load(&x)
				return x.block()
			}()})
		})
		t.loop("g", i32(0), i32(G), ir.Serial, "", func(u *blk) {
			u.loop("r", i32(0), w.rows, ir.Serial, "q_row", func(x *blk) {
				head := x.let("head", add(head0, g))
				qPos := x.let("q_pos", add(w.qPos0, r))
				row := x.let("row", rowOf())
				x.loop("j", i32(0), kvN, ir.Serial, "score", func(y *blk) {
					kvPos := y.let("kv_pos", add(kvLo, j))
					y.vr("dot", f32(0))
					y.loop("d", i32(0), i32(D), ir.Vector, "", func(z *blk) {
						z.set("dot", add(ir.R("dot", ir.F32), mul(ld("qs", ir.F32, add(mul(row, i32(D)), d)), ld("kb", ir.F32, add(mul(j, i32(D)), d)))))
					})
					scaled := mul(ir.R("dot", ir.F32), f32(float64(float32(l.v.Scale))))
					y.vr("s", &ir.Call{Fn: "score", Args: []ir.Expr{scaled, qPos, kvPos, head}, T: ir.F32})
					y.add(&ir.If{Tag: "mask", Cond: not(&ir.Call{Fn: "mask", Args: []ir.Expr{qPos, kvPos, head, w.b}, T: ir.Bool}),
						Then: &ir.Block{Stmts: []ir.Stmt{&ir.Assign{Name: "s", Value: negInf()}}}})
					hideUnless(y, l.dataVisible(y, w.b, qPos, kvPos, w.qBase, w.kvLen))
					if l.hidesBlocks() {
						y.when(eq(ld("kvis", ir.I32, j), i32(0)), func(z *blk) { z.set("s", negInf()) })
					}
					y.store("sc", j, ir.R("s", ir.F32))
				})
				l.softmaxUpdate(x, row, kvN)
			})
		})
	})
	// The position ranges of this tile, for classify-tiles.
	tile.Ranges = []ir.Range{
		{Var: "kv_pos", Lo: mul(kt, i32(KT)), Hi: sub(minE(add(mul(kt, i32(KT)), i32(KT)), w.kvLen), i32(1))},
		{Var: "q_pos", Lo: w.qPos0, Hi: sub(add(w.qPos0, w.rows), i32(1))},
		{Var: "head", Lo: head0, Hi: add(head0, i32(G-1))},
		{Var: refName(w.b), Lo: w.b, Hi: w.b},
	}
	// Normalize and store.
	b.loop("g", i32(0), i32(G), ir.Serial, "", func(t *blk) {
		t.loop("r", i32(0), w.rows, ir.Serial, "", func(u *blk) {
			row := u.let("row", rowOf())
			head := u.let("head", add(head0, g))
			inv, lse := l.finish(u, u.let("lv", ld("den", ir.F32, row)), ld("mx", ir.F32, row), head, !w.partial)
			w.store(u, add(w.qRow0, r), head, func(dv ir.Expr) ir.Expr {
				return ld("acc", ir.F32, add(mul(row, i32(DV)), dv))
			}, inv, lse)
		})
	})
}

func refName(e ir.Expr) string {
	if r, ok := e.(*ir.Ref); ok {
		return r.Name
	}
	return "batch"
}

// softmaxUpdate folds the tile's scores sc[0..kvN) into row's running max,
// denominator and accumulator (online softmax). A row whose scores are all
// -inf so far keeps max -inf and adds nothing.
func (l *lowering) softmaxUpdate(b *blk, row, kvN ir.Expr) {
	DV := l.DV
	j, d := ir.R("j", ir.I32), ir.R("d", ir.I32)
	mOld := b.let("m_old", ld("mx", ir.F32, row))
	b.vr("m_new", mOld)
	mNew := ir.R("m_new", ir.F32)
	b.loop("j", i32(0), kvN, ir.Serial, "", func(t *blk) {
		t.set("m_new", maxE(mNew, ld("sc", ir.F32, j)))
	})
	b.when(gt(mNew, negInf()), func(t *blk) {
		alpha := t.let("alpha", ir.Un(ir.Exp, sub(mOld, mNew)))
		t.vr("psum", f32(0))
		t.loop("j", i32(0), kvN, ir.Serial, "", func(u *blk) {
			p := u.let("p", ir.Un(ir.Exp, sub(ld("sc", ir.F32, j), mNew)))
			u.store("sc", j, p)
			u.set("psum", add(ir.R("psum", ir.F32), p))
		})
		t.store("den", row, add(mul(ld("den", ir.F32, row), alpha), ir.R("psum", ir.F32)))
		t.store("mx", row, mNew)
		t.loop("d", i32(0), i32(DV), ir.Vector, "", func(u *blk) {
			i := add(mul(row, i32(DV)), d)
			u.store("acc", i, mul(ld("acc", ir.F32, i), alpha))
		})
		t.loop("j", i32(0), kvN, ir.Serial, "", func(u *blk) {
			p := u.let("p", ld("sc", ir.F32, j))
			l.skipHidden(u, p)
			u.loop("d", i32(0), i32(DV), ir.Vector, "", func(x *blk) {
				i := add(mul(row, i32(DV)), d)
				x.store("acc", i, add(ld("acc", ir.F32, i), mul(p, ld("vb", ir.F32, add(mul(j, i32(DV)), d)))))
			})
		})
	})
}

// skipHidden appends `if p == 0 { continue }` to a position loop of the
// accumulation: a position the mask hides has weight p = exp(-inf) = 0 and
// may hold any bits (DESIGN §3), so it is skipped, never multiplied (0 *
// NaN is NaN). Tagged @hidden, classify-tiles drops it from fully visible
// tiles; data masks (tree, custom) hide positions there too, so with them
// it stays everywhere.
func (l *lowering) skipHidden(b *blk, p ir.Expr) {
	b.add(&ir.If{Tag: l.hiddenTag(), Cond: eq(p, f32(0)), Then: &ir.Block{Stmts: []ir.Stmt{&ir.Continue{}}}})
}

// hiddenTag is the tag of statements that only act on positions the mask
// hides: ir.HiddenTag when the @mask Def decides every hidden position, ""
// (never dropped) when data masks hide positions in any tile.
func (l *lowering) hiddenTag() string {
	if l.hasMask(ir.MaskTree) || l.hasMask(ir.MaskCustom) {
		return ""
	}
	return ir.HiddenTag
}

// storeOut writes a normalized row to o (storage dtype) and lse (when not NULL).
func (l *lowering) storeOut(b *blk, qrow, head ir.Expr, acc func(ir.Expr) ir.Expr, inv, lse ir.Expr) {
	d := ir.R("d", ir.I32)
	flat := b.let("oflat", rowHead(qrow, l.H, head))
	b.loop("d", i32(0), i32(l.DV), ir.Vector, "", func(t *blk) {
		t.store("o", add(mul(flat, ir.IntT(ir.I64, int64(l.DV))), i64(d)), ir.Cvt(l.dt, mul(acc(d), inv)))
	})
	b.when(&ir.NotNull{Buf: "lse"}, func(t *blk) { t.store("lse", flat, l.userLSE(lse)) })
}
