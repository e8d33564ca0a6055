package lower

import (
	"fmt"
	"math"

	"github.com/attnc/attnc/ir"
)

var negInfV = math.Inf(-1)

// Status codes, named here for the lowering code and its tests; the
// numbers and messages live in one table, ir.Statuses.
const (
	ErrBadArgument      = ir.StatusBadArgument
	ErrBadQOIndptr      = ir.StatusBadQOIndptr
	ErrBadKVIndptr      = ir.StatusBadKVIndptr
	ErrBadLastPageLen   = ir.StatusBadLastPageLen
	ErrBadPageID        = ir.StatusBadPageID
	ErrQLenExceedsKVLen = ir.StatusQLenExceedsKVLen
	ErrNoMemory         = ir.StatusNoMemory
	ErrBadKVLen         = ir.StatusBadKVLen
	ErrBadSlot          = ir.StatusBadSlot
	ErrBadLength        = ir.StatusBadLength
	ErrBadMaskIndptr    = ir.StatusBadMaskIndptr
	ErrTooLarge         = ir.StatusTooLarge
)

// Tiling is a target's choice of work-item shape: plain sizes, no mapping
// to hardware. The skeleton is the same for every tiling.
type Tiling struct {
	// KVTile is the number of KV positions a tile covers, whatever the
	// page size: a tile may span many small pages or part of a large one.
	KVTile int
	// DecodeKVTile, when not 0, is KVTile for the decode kernels (direct
	// and split): a decode tile feeds a GQA group's few rows, so the best
	// tile for it need not be prefill's.
	DecodeKVTile int
	// Rows is the number of (head, query) rows a work item holds at most.
	Rows int
	// PadRows makes arrays and loops span all Rows rows even when fewer
	// map to heads and queries (static shapes for tensor cores), with the
	// unused rows guarded.
	PadRows bool
	// MaxHeads caps the qo heads of a GQA group one item serves.
	MaxHeads int
	// DecodeMaxHeads, when not 0, is MaxHeads for the decode kernels
	// (direct and split): a decode item's rows are its heads alone, so a
	// wide group (MLA's 128 heads) can share each K/V tile among more of
	// them than a prefill item, whose rows are heads × queries.
	DecodeMaxHeads int
	// DecodeStageStored makes the decode kernels stage K and V rows as the
	// cache stores them (f16, bf16 bits or 8-bit codes, copied) where the
	// staging would only widen them (no RoPE on K, no MLA segments): the
	// tile's products widen B as they read it, so the scratch is the size
	// of the cached rows and the copy converts nothing.
	DecodeStageStored bool
	// PageRuns makes the K/V staging walk a tile page run by page run:
	// one page-table lookup and validity check per page (per tile when
	// the page holds it), the rows of a run copied from the page's base;
	// off, every position looks its page up.
	PageRuns bool
	// DecodeDirect (with PageRuns) makes the decode kernels read K and V
	// rows straight from the pages: the staging walk records each row's
	// pool offset (MatMul.BRows) instead of copying it, and the tile's
	// products read the rows there, widening them as they read. A tile
	// with a page the table hides or that lies outside the pool is
	// staged as before (copied, hidden rows zeroed) and runs the products
	// on the copies; so is K under inline RoPE (rotated as staged) and a
	// K row of MLA's two segments (its V, the latent alone, is read in
	// place).
	DecodeDirect bool
	// RopeInPlace makes inline RoPE stage a query or K row as a plain
	// copy (the loop every unrotated row gets, which a CPU vectorizes and
	// prefetch-kv prefetches) and then rotate its pairs in the f32 tile
	// where they landed: no strided narrow loads from the cache (an
	// interleaved f16 pair loop that LLVM scalarizes), the same values.
	// Off, each pair is read from its source and rotated as it is stored:
	// no second pass over the tile, which a GPU's threads would have to
	// meet at a barrier for.
	RopeInPlace bool
	// DecodeRopeRelative makes the decode kernels' inline RoPE (schedule
	// and factors styles) rotate by angles relative to each KV tile's
	// first position p0: the queries by pos_q - p0 once per tile, each K
	// row by its offset j in the tile, with cos and sin from a table of
	// the tile's offsets computed once per call (before the work
	// kernel's parallel loop). The scores are the same
	// rotations' (R(a)q · R(b)k depends on b - a only) while a K row,
	// which each kv head's item rotates again, takes table loads instead
	// of evaluating cos and sin. A tree's own keys, which rotate at their
	// queries' positions, evaluate them as before.
	DecodeRopeRelative bool
	// DecodeRopeInDot (with DecodeRopeRelative and DecodeDirect) makes
	// decode read K rows under inline RoPE (either pairing) in place
	// too: Q·Kᵀ turns each row by its offset's angles from the kernel's
	// table as it reads it (ir.RotB) instead of the staging copying and
	// turning the tile first. A tile with a hidden or outside page, or
	// with a tree's own keys (which turn at their queries' positions), is
	// staged and turned as before.
	DecodeRopeInDot bool
	// PrefillDirect (with PageRuns) makes the prefill kernel read K and V
	// rows straight from the pages as DecodeDirect does for decode, where
	// the cache is f32 (its staging would be a plain copy): the packing
	// of K for the products and P·V read the pool rows at the recorded
	// offsets. A tile with a hidden or outside page, K under inline RoPE
	// and a K row of MLA's two segments are staged as before.
	PrefillDirect bool
	// PrefillAlphaLoop makes the prefill kernels' online-softmax update
	// compute each row's rescale factor alpha = exp(m_old - m_new), its
	// denominator and its max in a loop of its own over the tile's rows,
	// after the loop that takes each row's max, exp and sum: the same
	// arithmetic, in a loop with no inner loop that a CPU vectorizes
	// across rows (a vector exp per L rows instead of a scalar exp per
	// row).
	PrefillAlphaLoop bool
	// DecodePhases makes the decode kernels' online-softmax update run
	// in three loops over the item's rows, one per phase: each row's new
	// max (kept in alpha), then each row's exp and sum (kept in tsum),
	// then alpha = exp(m_old - m_new), the denominator and the max as
	// PrefillAlphaLoop's loop computes them. The same arithmetic in the
	// same order for each row: a decode item's few rows (a GQA group)
	// are independent chains of dependent steps (a reduce tree, the exp,
	// another reduce tree, the scalar exp), and short loops of
	// independent iterations let a CPU overlap the rows' chains instead
	// of running one row's whole chain after another's.
	DecodePhases bool
	// PrefillPhases is DecodePhases for the prefill kernels, with
	// PrefillAlphaLoop: each row's new max in a loop of its own over the
	// tile's rows, then each row's exp and sum. A prefill tile's rows
	// (about 128) are as independent as a GQA group's, and the row loop's
	// chain — a reduce tree, the max, the exp, another reduce tree — is
	// longer than a CPU's window holds two of.
	PrefillPhases bool
	// SplitBySequence makes decode split its sequences' KV into chunks
	// whenever there are fewer sequences than threads (@plan_splits over
	// the batch rather than the (sequence, kv head, head tile) items), and
	// numbers the split kernel's items chunk-major: item = sp × items +
	// (sequence, kv head, head tile), each sequence's items one run of the
	// parallel loop. Each thread then reads its own chunk of positions
	// for every kv head of a sequence, where unsplit threads would read
	// the kv heads of one sequence, whose blocks share pages, side by side
	// (a CPU's threads read such pages slower: f16 decode of 1 × 8192
	// positions took 1.6× the time of 2 × 4096 on 2 threads). Only with
	// more than one kv head: one kv head's items (head tiles) read the
	// same rows.
	SplitBySequence bool
	// DecodeOneKernel makes decode's direct and split-KV launches run one
	// work kernel, decode_work, where they ran two (decode_work and
	// decode_split_work, the same item body but for its stores): the
	// kernel takes o and lse and the partial buffers, all of them
	// nullable, and the plan binds them per launch (ir.Launch.Bind) —
	// the direct launch NULL partial buffers and splits = 1, the split
	// one NULL o and lse —, each result stored under `if NotNull(...)`.
	// Half the decode code to compile (a CPU module's largest part).
	DecodeOneKernel bool
	// DecodeNextItem marks decode's staging loops with the item its
	// thread runs next (ir.For.Next), where that is known: in a run of a
	// sequence's kv heads (ir.For.Run) the next kv head's item, which
	// walks the same pages and tiles; its first tile is this item's
	// first (kv_first, recorded as the item's first tile runs). A
	// look-ahead past an item's last tile (prefetch-kv) then has the next
	// item's first tile to fetch instead of nothing.
	DecodeNextItem bool
	// DecodeWindowTiles starts a decode item's tile walk, where its mask
	// puts a floor under the positions it sees (kvFloor: a window, a
	// chunk), at the floor's page run — the floor rounded down to
	// min(page size, KVTile) — rather than at the multiple of KVTile
	// below it: the tiles are kv_base + kt·KVTile. A window of 128
	// positions that starts on a page run reads two whole tiles, where a
	// walk from a multiple of 64 read three (two partial, through the
	// masked body) unless the window started on one. Page runs (PageRuns)
	// start on a run boundary still, so a run stays on one page.
	DecodeWindowTiles bool
	// RowQuantum, when not 0, makes a prefill item's rows (its heads ×
	// query rows) a multiple of it where Rows is not one already: the
	// fewest query rows at or above Rows/heads that make one, if that
	// keeps the item within 2·Rows (a GQA group of 7 heads: 224 rows, not
	// 7 × 18 = 126; of 3: 192). A CPU's matrix tiles (AMX: 32 × 32
	// blocks) take whole blocks of rows only.
	RowQuantum int
}

// HeadTile is how many qo heads of a GQA group of g heads a work item
// serves: the whole group up to max heads (so a K/V tile is loaded once
// for all of them), else the largest divisor of the group not above max,
// which keeps a work item's arrays small and gives wide groups (MQA,
// MLA's 128 heads) parallelism.
func HeadTile(g, max int) int {
	for d := min(g, max); d > 1; d-- {
		if g%d == 0 {
			return d
		}
	}
	return 1
}

// Heads is the qo heads per work item for group size g.
func (t Tiling) Heads(g int) int { return HeadTile(g, min(t.MaxHeads, t.Rows)) }

// DecodeHeads is the qo heads per decode work item for group size g:
// Heads, or up to DecodeMaxHeads where that is set.
func (t Tiling) DecodeHeads(g int) int {
	if t.DecodeMaxHeads > 0 {
		return HeadTile(g, t.DecodeMaxHeads)
	}
	return t.Heads(g)
}

// QTile is the query rows per prefill work item for group size g.
func (t Tiling) QTile(g int) int {
	h := t.Heads(g)
	qt := max(1, t.Rows/h)
	if q := t.RowQuantum; q > 1 && h*qt%q != 0 {
		step := q / gcd(h, q) // query rows per whole multiple of q rows
		if up := (qt + step - 1) / step * step; h*up <= 2*t.Rows {
			qt = up
		}
	}
	return qt
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Unsupported reports the first feature of v that this version cannot
// generate kernels for, as file:line:col: not supported yet: <feature>.
func Unsupported(v *ir.Variant) error {
	if v.MLA != nil && v.Rope != nil {
		mode := "inline"
		if v.Rope.AtAppend {
			mode = "at_append"
		}
		return ir.Errorf(v.Rope.Pos, "not supported yet: rope %s with mla (MLA's rope part arrives rotated in q_pe and kpe_pages)", mode)
	}
	if v.MLA != nil {
		for _, k := range v.Kernels {
			if k.Role == ir.RolePrefillRagged || k.Role == ir.RoleQKVAppend {
				return ir.Errorf(k.Pos, "not supported yet: kernel %s with mla", k.Role)
			}
		}
	}
	for _, k := range v.Kernels {
		switch k.Role {
		case ir.RolePrefill, ir.RoleDecode, ir.RoleMergeState, ir.RoleAppend, ir.RoleCopyPage,
			ir.RoleCompactCopy, ir.RoleReadKV, ir.RoleGatherPages, ir.RoleScatterPages, ir.RolePrefillRagged,
			ir.RoleQKVAppend:
		default:
			return ir.Errorf(k.Pos, "not supported yet: kernel %s", k.Role)
		}
	}
	if !ir.ValidPageSize(v.PageSize) {
		return ir.Errorf(v.CachePos, "page_size %d is not valid: use a power of two from 1 to 256", v.PageSize)
	}
	return nil
}

// Lower builds the target-neutral kernel-IR module of v with tiling t: the
// work kernels of every listed role (plus the decode kernels prefill hands
// over to), one plan per role saying how its entry runs them, the
// mask/score/dispatch Defs and the status table. Every target schedules
// this module with its own passes.
func Lower(v *ir.Variant, t Tiling) (*ir.Module, error) {
	if err := Unsupported(v); err != nil {
		return nil, err
	}
	if t.KVTile < 1 || t.Rows < 1 || t.MaxHeads < 1 || t.DecodeKVTile < 0 || t.DecodeMaxHeads < 0 {
		return nil, fmt.Errorf("lower: tiling %+v has an empty size", t)
	}
	l := &lowering{v: v, dt: v.DType.Type(), kvt: v.KVDType.Type(), H: v.QOHeads, KVH: v.KVHeads, G: v.GroupSize(),
		D: v.HeadDimQK, DV: v.HeadDimV, PS: v.PageSize, p: v.Name, t: t}
	l.pt = newPageTable(v.Table, pagePool{args: append(l.pageParams(false), l.scaleParams()...), ps: v.PageSize, row: l.rowIndex})
	l.GB = t.Heads(l.G)
	m := &ir.Module{Name: v.Name, Prefix: v.Name, Errors: ir.Statuses}
	m.Defs = []*ir.Def{MaskDef(v), ScoreDef(v), PlanSplitsDef()}
	add := func(ks []*ir.Kernel, p *ir.Plan) {
		m.Kernels = append(m.Kernels, ks...)
		m.Plans = append(m.Plans, p)
	}
	if v.HasRole(ir.RolePrefill) {
		lp := *l
		if t.PrefillDirect && t.PageRuns && l.kvt == ir.F32 {
			lp.directK = v.InlineRope() == nil && len(lp.kSegs()) == 1
			lp.directV = len(lp.vSegs()) == 1
		}
		add(lp.prefill())
	}
	if v.HasRole(ir.RoleDecode) || v.HasRole(ir.RolePrefill) {
		ld := *l
		if t.DecodeKVTile > 0 {
			ld.t.KVTile = t.DecodeKVTile
		}
		ld.GB = t.DecodeHeads(l.G)
		ld.stageStored = t.DecodeStageStored && l.kvt.IsStorageOnly() && v.InlineRope() == nil && v.MLA == nil
		ld.ropeRel = t.DecodeRopeRelative && v.InlineRope() != nil && v.Rope.Style != ir.RopeTable
		ld.ropeInDot = ld.ropeRel && t.DecodeRopeInDot
		if t.DecodeDirect && t.PageRuns {
			ld.directK = (v.InlineRope() == nil || ld.ropeInDot) && len(ld.kSegs()) == 1
			ld.directV = len(ld.vSegs()) == 1
		}
		add(ld.decode(v.HasRole(ir.RoleDecode)))
	}
	if v.HasRole(ir.RolePrefillRagged) {
		add(l.ragged().prefillRagged())
	}
	if v.HasRole(ir.RoleMergeState) {
		add(l.mergeState())
	}
	if v.HasRole(ir.RoleAppend) {
		add(l.appendKernel())
	}
	if v.HasRole(ir.RoleCopyPage) {
		add(l.copyPage())
	}
	if v.HasRole(ir.RoleCompactCopy) {
		add(l.compactCopy())
	}
	if v.HasRole(ir.RoleReadKV) {
		add(l.readKV())
	}
	if v.HasRole(ir.RoleGatherPages) {
		add(l.movePages(false))
	}
	if v.HasRole(ir.RoleScatterPages) {
		add(l.movePages(true))
	}
	if v.HasRole(ir.RoleQKVAppend) {
		add(l.qkvAppend())
	}
	return m, nil
}

type lowering struct {
	v                *ir.Variant
	dt               ir.Type // q, o and append inputs
	kvt              ir.Type // the cache's elements: dt or an 8-bit code
	H, KVH, G, D, DV int
	PS               int
	p                string
	t                Tiling
	pt               pageTable // the variant's page table
	GB               int       // qo heads per work item
	// ropeRel: inline RoPE by angles relative to each tile's first
	// position (Tiling.DecodeRopeRelative, decode kernels).
	ropeRel bool
	// ropeInDot: decode's Q·Kᵀ turns K's rows as it reads them in place
	// (Tiling.DecodeRopeInDot, where it applies).
	ropeInDot bool
	// stageStored: the K and V tiles hold the cache's elements as stored
	// (Tiling.DecodeStageStored, where it applies).
	stageStored bool
	// directK, directV: the tiles' products read K, V rows in the pool
	// at the offsets koff, voff (Tiling.DecodeDirect for decode,
	// Tiling.PrefillDirect for prefill, where they apply).
	directK, directV bool
}

func scalar(name string) *ir.Param { return &ir.Param{Name: name, Elem: ir.I32} }

func buf(name string, t ir.Type, out bool, shape ...string) *ir.Param {
	return &ir.Param{Name: name, Buffer: true, Elem: t, Shape: shape, Output: out}
}

func itoa(n int) string { return fmt.Sprint(n) }

func (l *lowering) name(role string) string { return l.p + "_" + role }

func (l *lowering) pageShape(d int) []string {
	if l.v.Layout == ir.NHD {
		return []string{"num_pages", itoa(l.PS), itoa(l.KVH), itoa(d)}
	}
	return []string{"num_pages", itoa(l.KVH), itoa(l.PS), itoa(d)}
}

// cacheParams are the K/V arguments of the attention roles: the table's
// (pools and page table, or ragged rows) and batch_size.
func (l *lowering) cacheParams() []*ir.Param {
	return append(l.pt.params(), scalar("batch_size"))
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
	// Not lv > 0: a NaN denominator (a NaN or +inf score) is live and
	// gives NaN o and lse, never the empty row's 0 and -inf.
	live := not(eq(lv, f32(0)))
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

// spread appends `for v in 0 .. n spread { body }`.
func (b *blk) spread(v string, n int, body func(*blk, ir.Expr)) {
	b.loop(v, i32(0), i32(n), ir.Spread, ir.NoTag, func(x *blk) { body(x, ir.R(v, ir.I32)) })
}

// guarded appends `if c { then } else { els }`; els may be nil.
func (b *blk) guarded(c ir.Expr, then, els func(*blk)) {
	var t, e blk
	then(&t)
	s := &ir.If{Cond: c, Then: t.block()}
	if els != nil {
		els(&e)
		s.Else = e.block()
	}
	b.add(s)
}
