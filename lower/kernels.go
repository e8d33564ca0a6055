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
	return &ir.Def{Name: "mask", Params: []*ir.Param{scalar("q_pos"), scalar("kv_pos"), scalar("head"), scalar("batch")}, Uses: paramUses(v, vis), Body: ParamLoads(v, vis)}
}

// ParamLoads rewrites every param read of e (ir.ParamRead) as a guarded
// load of the param's buffer: the index, row-major over the declared
// shape, is computed in i64 and the load runs only when every index lies
// in its dimension; outside the shape the read gives 0.
func ParamLoads(v *ir.Variant, e ir.Expr) ir.Expr {
	return ir.MapExpr(e, func(x ir.Expr) ir.Expr {
		r, ok := x.(*ir.ParamRead)
		if !ok {
			return x
		}
		p := v.Param(r.Name)
		var in ir.Expr
		var flat ir.Expr
		for k, d := range p.Dims {
			size := ParamDimSize(v, d)
			ik := r.Index[k]
			ok := and(ge(ik, i32(0)), lt(ik, size))
			if in == nil {
				in, flat = ok, i64(ik)
			} else {
				in, flat = and(in, ok), add(mul(flat, i64(size)), i64(ik))
			}
		}
		return &ir.Guarded{Cond: in, X: ld(p.Name, p.T, flat)}
	})
}

// paramUses are the kernel arguments that the param reads of e need: each
// param's buffer and the scalars its dims name (batch_size included).
func paramUses(v *ir.Variant, e ir.Expr) []*ir.Param {
	read := map[string]bool{}
	ir.VisitExpr(e, func(x ir.Expr) {
		if r, ok := x.(*ir.ParamRead); ok {
			read[r.Name] = true
		}
	})
	var out []*ir.Param
	seen := map[string]bool{}
	for _, p := range v.Params {
		if !read[p.Name] {
			continue
		}
		out = append(out, buf(p.Name, p.T, false, paramShape(v, p)...))
		for _, d := range p.Dims {
			n := d.Name
			if n == "batch" {
				n = "batch_size"
			}
			if (d.Runtime() || n == "batch_size") && !seen[n] {
				seen[n] = true
				out = append(out, scalar(n))
			}
		}
	}
	return out
}

// paramShape is param p's symbolic shape as the argument lists give it.
func paramShape(v *ir.Variant, p *ir.ParamDecl) []string {
	shape := make([]string, len(p.Dims))
	for k, d := range p.Dims {
		switch d.Name {
		case "":
			shape[k] = itoa(d.Size)
		case "qo_heads":
			shape[k] = itoa(v.QOHeads)
		case "kv_heads":
			shape[k] = itoa(v.KVHeads)
		case "batch":
			shape[k] = "batch_size"
		default:
			shape[k] = d.Name
		}
	}
	return shape
}

// ParamDimSize is dimension d of a param as an i32 expression: a
// literal, the variant's head counts, batch_size, or the dim's own i32
// argument.
func ParamDimSize(v *ir.Variant, d ir.ParamDim) ir.Expr {
	switch d.Name {
	case "":
		return i32(d.Size)
	case "qo_heads":
		return i32(v.QOHeads)
	case "kv_heads":
		return i32(v.KVHeads)
	case "batch":
		return ir.R("batch_size", ir.I32)
	}
	return ir.R(d.Name, ir.I32)
}

// ScoreReadsBatch reports whether v's score expression reads batch, which
// the @score Def then takes as a fifth parameter.
func ScoreReadsBatch(v *ir.Variant) bool {
	found := false
	if v.Score != nil {
		ir.VisitExpr(v.Score, func(e ir.Expr) {
			if r, ok := e.(*ir.Ref); ok && r.Name == "batch" {
				found = true
			}
		})
	}
	return found
}

// ScoreDef states the score transform over score (already scaled), q_pos,
// kv_pos and head; the identity when the variant has none.
func ScoreDef(v *ir.Variant) *ir.Def {
	var body ir.Expr = ir.R("score", ir.F32)
	var uses []*ir.Param
	if v.Score != nil {
		body, uses = ParamLoads(v, ir.Cvt(ir.F32, v.Score)), paramUses(v, v.Score)
	}
	params := []*ir.Param{{Name: "score", Elem: ir.F32}, scalar("q_pos"), scalar("kv_pos"), scalar("head")}
	if ScoreReadsBatch(v) {
		params = append(params, scalar("batch"))
	}
	return &ir.Def{Name: "score", Params: params, Uses: uses, Body: body}
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

// mergeSplits is decode's merge step: it folds the split-KV chunks of each
// (sequence, qo head) row with the merge_state update, starting from the
// row's learned sink when the variant has one.
func (l *lowering) mergeSplits() *ir.Kernel {
	DV := l.DV
	params := []*ir.Param{
		buf("part_o", ir.F32, false, "splits", "batch_size", itoa(l.H), itoa(DV)),
		buf("part_lse", ir.F32, false, "splits", "batch_size", itoa(l.H)),
		scalar(ir.PlanSplits), scalar("batch_size"),
	}
	params = append(params, l.outParams("batch_size")...)
	var b blk
	row := ir.R("mrow", ir.I32)
	rowsPerSplit := mul(ir.R("batch_size", ir.I32), i32(l.H))
	b.loop("mrow", i32(0), rowsPerSplit, ir.Parallel, ir.TagWork, func(w *blk) {
		w.alloc("macc", ir.F32, DV)
		w.vr("mlse", l.mergeStart(row))
		w.spread("d", DV, func(x *blk, d ir.Expr) { x.store("macc", d, f32(0)) })
		w.loop("sp", i32(0), ir.R(ir.PlanSplits, ir.I32), ir.Serial, ir.NoTag, func(x *blk) {
			pflat := x.let("pflat", add(mul(ir.R("sp", ir.I32), rowsPerSplit), row))
			l.pairMergeBy(x, ir.R("mlse", ir.F32), ld("part_lse", ir.F32, pflat),
				func(d ir.Expr) ir.Expr { return ld("macc", ir.F32, d) },
				func(d ir.Expr) ir.Expr {
					return ld("part_o", ir.F32, add(mul(i64(pflat), ir.IntT(ir.I64, int64(DV))), i64(d)))
				},
				func(y *blk, d, val ir.Expr) { y.store("macc", d, val) },
				func(y *blk, val ir.Expr) { y.set("mlse", val) }, ir.LSEBaseE)
		})
		w.spread("d", DV, func(x *blk, d ir.Expr) {
			x.store("o", add(mul(i64(row), ir.IntT(ir.I64, int64(DV))), i64(d)), ir.Cvt(l.dt, ld("macc", ir.F32, d)))
		})
		w.when(&ir.NotNull{Buf: "lse"}, func(x *blk) { x.store("lse", row, l.userLSE(ir.R("mlse", ir.F32))) })
	})
	b.add(&ir.Return{Value: i32(0)})
	return &ir.Kernel{Name: l.name("decode_merge_work"), Role: ir.RoleMergeState, Params: params, Body: b.block()}
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
// b = (lb, vb), whose lse are in base, over the head dims d (a spread
// loop): weights base^(l - max) — exp, or exp2 for base 2, of the
// difference, so large lse values lose nothing to a conversion — that are
// exactly 0 for an empty side (whose values are never read into the sum),
// o = weighted mean, lse = max + log_base(sum of weights); two empty sides
// give o = 0, lse = -inf. A NaN or +inf lse on either side gives NaN in o
// and lse (DESIGN §3), so a bad state never passes for an empty one.
// Split-KV decode and merge_state share it.
func (l *lowering) pairMergeBy(b *blk, la, lb ir.Expr, va, vb func(d ir.Expr) ir.Expr, setV func(b *blk, d, val ir.Expr), setL func(*blk, ir.Expr), base ir.LSEBase) {
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
	b.spread("d", l.DV, func(t *blk, d ir.Expr) {
		ta := sel(gt(wa, f32(0)), mul(wa, va(d)), f32(0))
		tb := sel(gt(wb, f32(0)), mul(wb, vb(d)), f32(0))
		setV(t, d, sel(bad, nan(), mul(add(ta, tb), inv)))
	})
	setL(b, sel(bad, nan(), sel(gt(ws, f32(0)), add(m, logOf(ws)), negInf())))
}

// mergeState is the merge_state role: merges (v_other, s_other) into
// (v, s) in place, row by row, with the same pairwise update as split-KV
// decode.
func (l *lowering) mergeState() ([]*ir.Kernel, *ir.Plan) {
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
	row := ir.R("row", ir.I32)
	b.loop("row", i32(0), mul(n, i32(H)), ir.Parallel, ir.TagWork, func(t *blk) {
		base := t.let("base", mul(i64(row), ir.IntT(ir.I64, int64(DV))))
		at := func(d ir.Expr) ir.Expr { return add(base, i64(d)) }
		l.pairMergeBy(t, ld("s", ir.F32, row), ld("s_other", ir.F32, row),
			func(d ir.Expr) ir.Expr { return tof32(ld("v", l.dt, at(d))) },
			func(d ir.Expr) ir.Expr { return tof32(ld("v_other", l.dt, at(d))) },
			func(y *blk, d, val ir.Expr) { y.store("v", at(d), ir.Cvt(l.dt, val)) },
			func(y *blk, val ir.Expr) { y.store("s", row, val) }, l.v.LSEBase)
	})
	b.add(&ir.Return{Value: i32(0)})
	k := &ir.Kernel{Name: l.name("merge_state_work"), Role: ir.RoleMergeState, Params: params, Body: b.block()}
	p := &ir.Plan{Role: ir.RoleMergeState, Entry: l.name("merge_state"), Public: true, Params: params,
		Checks: []ir.Check{{Fail: lt(n, i32(0)), Code: ErrBadArgument}, tooLarge(mul(i64(n), i64c(H)))},
		Skip:   eq(n, i32(0)),
		Direct: []ir.Launch{{Kernel: k.Name, Items: mul(n, i32(H))}}}
	return []*ir.Kernel{k}, p
}
