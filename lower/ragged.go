package lower

import "github.com/attnc/attnc/ir"

// prefill_ragged: attention over K/V held contiguously, not in pages
// (FlashInfer's BatchPrefillWithRaggedKVCacheWrapper, TVM's
// _attention_prefill_ragged). k and v are T[total_kv, kv_heads, d], and
// sequence b's rows are kv_token_indptr[b] .. kv_token_indptr[b+1]: its
// kv_len is their count, so positions, masks, scores and RoPE are
// prefill's with that kv_len. The rows are one more pageTable, so the role
// runs the one attention skeleton.

// raggedRows is the K/V source of prefill_ragged: contiguous rows of the
// variant's dtype (never 8-bit codes: the new rows of a chunk, as append
// takes them), ragged by kv_token_indptr. Every position inside a
// sequence's range is readable; the range lies inside the rows
// kv_token_indptr[batch_size] counts once the indptr is ordered, which
// the entry checks (the ABI's shape k has those rows, as q has
// qo_indptr[batch_size]).
type raggedRows struct {
	dt         ir.Type
	kvh, d, dv int
}

func (r raggedRows) params() []*ir.Param {
	return []*ir.Param{
		buf("k", r.dt, false, "total_kv", itoa(r.kvh), itoa(r.d)),
		buf("v", r.dt, false, "total_kv", itoa(r.kvh), itoa(r.dv)),
		buf("kv_token_indptr", ir.I32, false, "batch_size+1"),
	}
}

func (raggedRows) checks() []ir.Check { return nil }

func (raggedRows) indptrs() []indptr { return []indptr{{"kv_token_indptr", ErrBadKVIndptr}} }

func (raggedRows) bufs() (k, v string) { return "k", "v" }

func (raggedRows) seqPages(b *blk, sb ir.Expr) (base, kvLen ir.Expr) {
	beg := ldi("kv_token_indptr", sb)
	base = b.let("kv_beg", i64(beg))
	n := maxE(sub(i64(ldi("kv_token_indptr", add(sb, i32(1)))), i64(beg)), i64c(0))
	return base, b.let("kv_len", ir.Cvt(ir.I32, minE(n, i64c(MaxSeqLen))))
}

// rowAt is row kv_beg + pos of k and v: always readable.
func (r raggedRows) rowAt(b *blk, base, pos ir.Expr) (ir.Expr, func(*blk) func(ir.Expr, ir.Expr, int) ir.Expr) {
	return nil, func(z *blk) func(ir.Expr, ir.Expr, int) ir.Expr {
		tok := z.let("kv_row", add(base, i64(pos)))
		return func(js, kvh ir.Expr, d int) ir.Expr {
			row := ir.Expr(tok)
			if js != nil {
				row = add(tok, i64(js))
			}
			return mul(add(mul(row, i64c(r.kvh)), i64(kvh)), i64c(d))
		}
	}
}

// pageRun is MaxSeqLen: the rows have no pages, one lookup serves a tile.
func (raggedRows) pageRun() int { return MaxSeqLen }

// validateSeq checks that sequence vb's row count (kv_token_indptr is
// ordered: the difference cannot wrap) is at most MaxSeqLen.
func (raggedRows) validateSeq(t *blk, vb *ir.Ref) ir.Expr {
	n := t.let("v_kv_len", sub(ldi("kv_token_indptr", add(vb, i32(1))), ldi("kv_token_indptr", vb)))
	t.fail(gt(n, i32(MaxSeqLen)), ErrBadKVLen)
	return n
}

// validatePageIDs does nothing: there are no pages.
func (raggedRows) validatePageIDs(*blk) {}

// ragged is l for prefill_ragged: its K/V source the ragged rows, which
// hold the variant's dtype whatever the cache stores (no scales).
func (l *lowering) ragged() *lowering {
	r := *l
	v := *l.v
	v.KVDType, v.KVScale = v.DType, ir.KVScaleNone
	r.v, r.kvt, r.stageStored = &v, l.dt, false
	r.pt = raggedRows{dt: l.dt, kvh: l.KVH, d: l.D, dv: l.DV}
	return &r
}

// prefillRagged is the prefill_ragged role: prefill's work items and
// validation over the ragged rows; it hands over to nothing (decode reads
// pages).
func (l *lowering) prefillRagged() ([]*ir.Kernel, *ir.Plan) {
	params := l.prefillParams()
	work := l.attentionKernel(l.name("prefill_ragged_work"), ir.RolePrefillRagged, params, attnItem{})
	maxQT := l.seqMaxQT()
	bs := ir.R("batch_size", ir.I32)
	var v blk
	v.vr(maxQT.Name, i32(0))
	l.validateCache(&v, true, func(t *blk, env map[string]ir.Expr) { foldSeq(t, maxQT, env) })
	p := &ir.Plan{Role: ir.RolePrefillRagged, Entry: l.name("prefill_ragged"), Public: true, Params: params,
		Checks: l.tableChecks(), Validate: v.block(), Seq: []ir.SeqValue{maxQT},
		Limits: []ir.Check{tooLarge(l.prefillItems64(bs, ir.R(maxQT.Name, ir.I32)))},
		Skip:   eq(bs, i32(0)),
		Direct: []ir.Launch{{Kernel: work.Name, Items: mul(mul(bs, i32(l.itemsPerSeq())), ir.R(maxQT.Name, ir.I32))}}}
	return []*ir.Kernel{work}, p
}
