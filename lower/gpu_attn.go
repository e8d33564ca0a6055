package lower

import (
	"github.com/attnc/attnc/ir"
)

// gpuPlan is the shape of one GPU attention kernel.
type gpuPlan struct {
	GB      int  // qo heads of the group per block (groups over 16 heads split)
	HT      int  // head tiles per group: ceil(G / GB)
	QT      int  // query rows per work item
	R       int  // (head, query) rows per block; padded to 16 for mma
	valid   int  // rows that map to a (head, query) pair: G * QT
	mma     bool // Q·Kᵀ and P·V on tensor cores (f16/bf16 storage, <= 16 rows)
	AK      int  // accumulator registers per thread
	decode  bool
	split   bool
	smem    int
	sharedF []sharedArray
}

type sharedArray struct {
	name string
	t    ir.Type
	size int
}

func (l *lowering) gpuPlanFor(decode, split bool) gpuPlan {
	p := gpuPlan{QT: l.gpuQT(decode), decode: decode, split: split, GB: min(l.G, GPURows)}
	p.HT = (l.G + p.GB - 1) / p.GB
	p.valid = p.GB * p.QT
	p.R = p.valid
	// Tensor cores need f16/bf16, at most 16 rows, and head dims in whole
	// k-steps (16) and n-tiles per warp (32); 16-byte staging follows.
	// Inline RoPE stays on the SIMT path so rotated rows keep f32 precision.
	p.mma = l.dt != ir.F32 && p.valid <= GPURows && l.D%16 == 0 && l.DV%32 == 0 && l.v.Rope == nil &&
		segsFit(l.qSegs(), 8) && segsFit(l.kSegs(), 8) && segsFit(l.vSegs(), 8)
	KT := GPUKVTile
	if p.mma {
		p.R = GPURows
		p.AK = l.DV / 32 * 4
		p.sharedF = []sharedArray{{"qh", ir.I16, p.R * l.D}, {"kh", ir.I16, KT * l.D}, {"vh", ir.I16, KT * l.DV}}
		for _, part := range l.pParts() {
			p.sharedF = append(p.sharedF, sharedArray{part, ir.I16, p.R * KT})
		}
	} else {
		p.AK = (p.R*l.DV + GPUThreads - 1) / GPUThreads
		p.sharedF = []sharedArray{{"qs", ir.F32, p.R * l.D}, {"kb", ir.F32, KT * l.D}, {"vb", ir.F32, KT * l.DV}}
	}
	if p.mma {
		// kv_seen[j] != 0: some row of the block sees position j (see zeroUnseenV).
		p.sharedF = append(p.sharedF, sharedArray{"kv_seen", ir.I32, KT})
	}
	p.sharedF = append(p.sharedF, sharedArray{"sc", ir.F32, p.R * KT}, sharedArray{"mx", ir.F32, p.R},
		sharedArray{"den", ir.F32, p.R}, sharedArray{"alpha", ir.F32, p.R})
	if l.v.Rope != nil {
		p.sharedF = append(p.sharedF, sharedArray{"rope_turns", ir.I64, l.rotDim() / 2})
	}
	for _, a := range p.sharedF {
		p.smem += (a.size*a.t.Bits()/8 + 15) &^ 15
	}
	return p
}

// stageOne stages vw elements of src starting at srcIdx into dst[e...]:
// one element through conv, or (mma, vw = 8) a 16-byte copy of the raw bits.
func (l *lowering) stageOne(dst string, e ir.Expr, src string, srcIdx ir.Expr, vw int, conv func(ir.Expr) ir.Expr) ir.Stmt {
	if vw > 1 {
		return &ir.Copy{Dst: dst, DstIndex: e, Src: src, SrcIndex: srcIdx, N: vw}
	}
	return &ir.Store{Buf: dst, Index: e, Value: conv(ld(src, l.dt, srcIdx))}
}

// stageRope is stageOne at element d of a row whose element k sits at
// src[index(k)], rotated at pos when pos is not nil (SIMT path only).
func (l *lowering) stageRope(dst string, e ir.Expr, src string, pos, d ir.Expr, index func(ir.Expr) ir.Expr, vw int, conv func(ir.Expr) ir.Expr) *ir.Block {
	var b blk
	if pos == nil {
		b.add(l.stageOne(dst, e, src, index(d), vw, conv))
		return b.block()
	}
	l.stageRow(&b, dst, e, pos, d, func(k ir.Expr) ir.Expr { return tof32(ld(src, l.dt, index(k))) }, true)
	return b.block()
}

// zeros stores vw zeros at dst[e...].
func zeros(dst string, e ir.Expr, vw int, zero ir.Expr) *ir.Block {
	var b blk
	for k := 0; k < vw; k++ {
		b.store(dst, add(e, i32(k)), zero)
	}
	return b.block()
}

// pack2 packs two 16-bit patterns into one mma operand register, the first
// in the low half.
func pack2(lo, hi ir.Expr) ir.Expr {
	return ir.Bin(ir.Or, ir.Bin(ir.And, ir.Cvt(ir.I32, lo), i32(0xffff)), ir.Bin(ir.Shl, ir.Cvt(ir.I32, hi), i32(16)))
}

// halfBits narrows f32 to the storage half type's bits.
func (l *lowering) halfBits(x ir.Expr) ir.Expr {
	if l.dt == ir.BF16 {
		return ir.F32ToBF16(x)
	}
	return ir.F32ToF16(x)
}

// halfValue widens the storage half type's bits to f32.
func (l *lowering) halfValue(h ir.Expr) ir.Expr {
	if l.dt == ir.BF16 {
		return ir.BF16ToF32(h)
	}
	return ir.F16ToF32(h)
}

// pParts names the shared arrays that hold P for the tensor cores, split
// into half-precision parts whose sum is P to about f32 precision: P·V then
// rounds once, in f32, like the CPU kernels, so f16/bf16 outputs stay within
// half an ulp (one part alone would round each weight to 2^-11 (f16) or
// 2^-8 (bf16) relative). Each part after the first holds what the ones
// before left: f16 needs two (the rest is below 2^-22 of P), bf16 three
// (2^-27).
func (l *lowering) pParts() []string {
	if l.dt == ir.BF16 {
		return []string{"ph", "pm", "pl"}
	}
	return []string{"ph", "pl"}
}

// splitP stores weight p of element i as its half-precision parts.
func (l *lowering) splitP(b *blk, i, p ir.Expr) {
	parts := l.pParts()
	rest := p
	for k, part := range parts {
		h := b.let(part+"_bits", l.halfBits(rest))
		b.store(part, i, h)
		if k+1 < len(parts) {
			// Exact: rest and its rounding are within a factor 2 (Sterbenz).
			rest = b.let(part+"_rest", sub(rest, l.halfValue(h)))
		}
	}
}

// gpuAttention builds one attention kernel: a block per work item walks
// KV tiles in phases separated by barriers — stage K/V into shared memory
// (the page walk), score (Q·Kᵀ on tensor cores or SIMT, then @score and
// @mask per element), row statistics (warp-shuffle max and sum: the
// online-softmax update), accumulate (P·V into per-thread registers) —
// then normalizes and stores.
func (l *lowering) gpuAttention(name string, params []*ir.Param, decode, split bool) *ir.Kernel {
	G, D, DV, KT, NT := l.G, l.D, l.DV, GPUKVTile, GPUThreads
	p := l.gpuPlanFor(decode, split)
	QT, R := p.QT, p.R
	var b blk
	bs := ir.R("batch_size", ir.I32)
	item := ir.R("item", ir.I32)
	var nItems ir.Expr
	if decode {
		nItems = mul(bs, i32(l.KVH*p.HT))
		if split {
			nItems = mul(nItems, ir.R("splits", ir.I32))
		}
	} else {
		// Every thread scans the query lengths (uniform, cheap) to size the
		// grid-stride loop. The device cannot report bad input: lengths are
		// clamped to 0..MaxSeqLen and the item count to MaxItems, in i64,
		// so that nothing wraps (validate tables on the host).
		b.vr("max_qt", i32(0))
		b.loop("vs", i32(0), bs, ir.Serial, "", func(t *blk) {
			vs := ir.R("vs", ir.I32)
			qLen := minE(maxE(sub(i64(ldi("qo_indptr", add(vs, i32(1)))), i64(ldi("qo_indptr", vs))), i64c(0)), i64c(MaxSeqLen))
			t.set("max_qt", maxE(ir.R("max_qt", ir.I32), ceilDiv(ir.Cvt(ir.I32, qLen), QT)))
		})
		units := minE(mul(i64(bs), i64c(l.KVH*p.HT)), i64c(MaxItems+1))
		nItems = ir.Cvt(ir.I32, minE(mul(units, i64(ir.R("max_qt", ir.I32))), i64c(MaxItems)))
	}
	b.loop("item", i32(0), nItems, ir.Parallel, "work", func(w *blk) {
		var sb, kvh, qBeg, qLen, qLo, sp ir.Expr
		rest := ir.Expr(item)
		if split {
			sp = w.let("sp", rem(item, ir.R("splits", ir.I32)))
			rest = w.let("rest", div(item, ir.R("splits", ir.I32)))
		}
		// ht picks which GB heads of the group this block serves.
		var ht ir.Expr
		if decode {
			ht = w.let("ht", rem(rest, i32(p.HT)))
			rest = w.let("rest_h", div(rest, i32(p.HT)))
			kvh = w.let("kvh", rem(rest, i32(l.KVH)))
			sb = w.let("b", div(rest, i32(l.KVH)))
			qBeg, qLen, qLo = sb, i32(1), i32(0)
		} else {
			maxQT := ir.R("max_qt", ir.I32)
			qt := w.let("qt", rem(item, maxQT))
			rest2 := w.let("rest", div(item, maxQT))
			ht = w.let("ht", rem(rest2, i32(p.HT)))
			rest2 = w.let("rest_h", div(rest2, i32(p.HT)))
			kvh = w.let("kvh", rem(rest2, i32(l.KVH)))
			sb = w.let("b", div(rest2, i32(l.KVH)))
			qBeg = w.let("q_beg", ldi("qo_indptr", sb))
			qLen = w.let("q_len", sub(ldi("qo_indptr", add(sb, i32(1))), qBeg))
			qLo = w.let("q_lo", mul(qt, i32(QT)))
		}
		kvBeg, kvLen := l.seqPages(w, sb, "", true)
		rows := w.let("rows", maxE(minE(i32(QT), sub(qLen, qLo)), i32(0)))
		qPos0 := w.let("q_pos0", add(sub(kvLen, qLen), qLo))
		nt := w.let("n_tiles", ceilDiv(kvLen, KT))
		tileLo, tileHi := ir.Expr(i32(0)), ir.Expr(nt)
		if split {
			per := w.let("per", div(add(nt, sub(ir.R("splits", ir.I32), i32(1))), ir.R("splits", ir.I32)))
			tileLo = w.let("t_lo", minE(mul(sp, per), nt))
			tileHi = w.let("t_hi", minE(add(tileLo, per), nt))
		}
		for _, a := range p.sharedF {
			w.add(&ir.Alloc{Name: a.name, T: a.t, Size: a.size, Shared: true})
		}
		w.loop("t", i32(0), i32(NT), ir.Threads, "", func(x *blk) {
			t := ir.R("t", ir.I32)
			// rowParts maps a block row to its group head and query row, and
			// says whether it is a real (head, query) pair.
			// g is the head's index in the whole group.
			rowParts := func(y *blk, row ir.Expr) (g, r, ok ir.Expr) {
				g, r = y.let("g", add(mul(ht, i32(p.GB)), div(row, i32(QT)))), y.let("r", rem(row, i32(QT)))
				ok = lt(r, rows)
				if p.valid < R {
					ok = and(lt(row, i32(p.valid)), ok)
				}
				if p.HT*p.GB > G {
					ok = and(lt(g, i32(G)), ok)
				}
				return g, r, y.let("row_ok", ok)
			}
			// qIndex is element d of segment sg's part of query (g, r).
			qIndex := func(sg segment, g, r, d ir.Expr) ir.Expr {
				return add(mul(rowHead(add(add(qBeg, qLo), r), l.H, add(mul(kvh, i32(G)), g)), ir.IntT(ir.I64, int64(sg.w))), i64(d))
			}
			qBuf, kBuf, vBuf := "qs", "kb", "vb"
			stageVal := func(v ir.Expr) ir.Expr { return tof32(v) }
			zero := ir.Expr(f32(0))
			if p.mma {
				qBuf, kBuf, vBuf = "qh", "kh", "vh"
				stageVal = func(v ir.Expr) ir.Expr { return &ir.Bitcast{To: ir.I16, X: v} }
				zero = ir.IntT(ir.I16, 0)
			}
			if l.v.Rope != nil {
				x.when(eq(t, i32(0)), func(y *blk) { l.fillRopeTable(y) })
				x.add(&ir.Barrier{})
			}
			// Stage Q: in the storage type's bits for mma, 16 bytes per copy.
			vw := 1
			if p.mma {
				vw = 8
			}
			strided(x, "eq", R*D/vw, func(y *blk, c ir.Expr) {
				e := y.let("e0", mul(c, i32(vw)))
				row := y.let("row", div(e, i32(D)))
				g, r, ok := rowParts(y, row)
				d := y.let("d", rem(e, i32(D)))
				y.add(&ir.If{Cond: ok,
					Then: segsAt(l.qSegs(), d, func(z *blk, sg segment, local ir.Expr) {
						z.add(l.stageRope(qBuf, e, sg.buf, l.qRopePos(z, add(add(qBeg, qLo), r)), local,
							func(k ir.Expr) ir.Expr { return qIndex(sg, g, r, k) }, vw, stageVal).Stmts...)
					}),
					Else: zeros(qBuf, e, vw, zero)})
			})
			strided(x, "er", R, func(y *blk, e ir.Expr) {
				y.store("mx", e, negInf())
				y.store("den", e, f32(0))
			})
			x.alloc("acc", ir.F32, p.AK)
			x.loop("ak", i32(0), i32(p.AK), ir.Serial, "", func(y *blk) { y.store("acc", ir.R("ak", ir.I32), f32(0)) })
			warp := x.let("warp", div(t, i32(32)))
			lane := x.let("lane", rem(t, i32(32)))
			gid := x.let("gid", div(lane, i32(4)))
			tig := x.let("tig", rem(lane, i32(4)))
			if p.mma {
				x.alloc("fa", ir.I32, 4)
				x.alloc("fb", ir.I32, 2)
				x.alloc("fd", ir.F32, 4)
			}
			x.add(&ir.Barrier{})
			kt := ir.R("kt", ir.I32)
			tile := x.loop("kt", tileLo, tileHi, ir.Serial, "kv_tile", func(y *blk) {
				kvLo := y.let("kv_lo", mul(kt, i32(KT)))
				kvN := y.let("kv_n", minE(i32(KT), sub(kvLen, kvLo)))
				// Stage K and V (the page walk); zeros past the tile's end
				// and for page ids outside the pool, which are never read.
				stage := func(buf string, segs []segment, d int) {
					strided(y, "e"+buf, KT*d/vw, func(z *blk, c ir.Expr) {
						e := z.let("e0", mul(c, i32(vw)))
						j := z.let("j", div(e, i32(d)))
						dd := z.let("dd", rem(e, i32(d)))
						z.vr("staged", ir.BoolConst(false))
						z.when(lt(j, kvN), func(u *blk) {
							pos := u.let("kv_at", add(kvLo, j))
							page := u.let("page", l.pageAt(kvBeg, pos))
							slot := u.let("slot", ir.Bin(ir.And, pos, i32(l.PS-1)))
							u.when(and(ge(page, i32(0)), lt(page, ir.R("num_pages", ir.I32))), func(x2 *blk) {
								var kp ir.Expr
								if buf == kBuf { // V is not rotated
									kp = l.kRopePos(x2, pos, sb, sub(kvLen, qLen), qBeg)
								}
								x2.add(segsAt(segs, dd, func(x3 *blk, sg segment, local ir.Expr) {
									rowAt := x3.let("row_at", l.rowIndex(page, kvh, slot, sg.w))
									x3.add(l.stageRope(buf, e, sg.buf, kp, local, func(k ir.Expr) ir.Expr { return add(rowAt, i64(k)) }, vw, stageVal).Stmts...)
								}).Stmts...)
								x2.set("staged", ir.BoolConst(true))
							})
						})
						z.add(&ir.If{Cond: not(ir.R("staged", ir.Bool)), Then: zeros(buf, e, vw, zero)})
					})
				}
				stage(kBuf, l.kSegs(), D)
				stage(vBuf, l.vSegs(), DV)
				if p.mma {
					y.add(&ir.If{Tag: l.hiddenTag(), Cond: lt(t, i32(KT)), Then: &ir.Block{Stmts: []ir.Stmt{
						&ir.Store{Buf: "kv_seen", Index: t, Value: i32(0)}}}})
				}
				y.add(&ir.Barrier{})
				// scoreAt finishes the score of (row, j) from its dot
				// product: scale, @score, @mask; -inf for padding.
				scoreAt := func(z *blk, row, j ir.Expr, dot func(*blk) ir.Expr) {
					g, r, ok := rowParts(z, row)
					head := z.let("head", add(mul(kvh, i32(G)), g))
					qPos := z.let("q_pos", add(qPos0, r))
					kvPos := z.let("kv_pos", add(kvLo, j))
					z.vr("s", negInf())
					z.when(and(ok, lt(j, kvN)), func(u *blk) {
						scaled := mul(dot(u), f32(float64(float32(l.v.Scale))))
						u.set("s", &ir.Call{Fn: "score", Args: []ir.Expr{scaled, qPos, kvPos, head}, T: ir.F32})
						u.add(&ir.If{Tag: "mask", Cond: not(&ir.Call{Fn: "mask", Args: []ir.Expr{qPos, kvPos, head, sb}, T: ir.Bool}),
							Then: &ir.Block{Stmts: []ir.Stmt{&ir.Assign{Name: "s", Value: negInf()}}}})
						hideUnless(u, l.dataVisible(u, sb, qPos, kvPos, sub(kvLen, qLen), kvLen))
						if l.hidesBlocks() { // a -1 block hides its positions
							u.when(lt(l.pageAt(kvBeg, kvPos), i32(0)), func(x2 *blk) { x2.set("s", negInf()) })
						}
					})
					z.store("sc", add(mul(row, i32(KT)), j), ir.R("s", ir.F32))
					if p.mma { // every writer stores the same 1
						z.add(&ir.If{Tag: l.hiddenTag(), Cond: gt(ir.R("s", ir.F32), negInf()), Then: &ir.Block{Stmts: []ir.Stmt{
							&ir.Store{Buf: "kv_seen", Index: j, Value: i32(1)}}}})
					}
				}
				if p.mma {
					l.mmaScores(y, gid, tig, warp, scoreAt)
				} else {
					strided(y, "es", R*KT, func(z *blk, e ir.Expr) {
						row := z.let("row", div(e, i32(KT)))
						j := z.let("j", rem(e, i32(KT)))
						scoreAt(z, row, j, func(u *blk) ir.Expr {
							u.vr("dot", f32(0))
							d := ir.R("d", ir.I32)
							u.loop("d", i32(0), i32(D), ir.Serial, "", func(x2 *blk) {
								x2.set("dot", add(ir.R("dot", ir.F32), mul(ld("qs", ir.F32, add(mul(row, i32(D)), d)), ld("kb", ir.F32, add(mul(j, i32(D)), d)))))
							})
							return ir.R("dot", ir.F32)
						})
					})
				}
				y.add(&ir.Barrier{})
				l.gpuRowStats(y, R, KT, warp, lane, p.mma)
				if p.mma {
					l.zeroUnseenV(y, vw)
				}
				y.add(&ir.Barrier{})
				if p.mma {
					l.mmaAccumulate(y, gid, tig, warp)
				} else {
					// Thread t owns acc elements t + k*NT of the R x DV output.
					y.loop("ak", i32(0), i32(p.AK), ir.Serial, "", func(z *blk) {
						ak := ir.R("ak", ir.I32)
						e := z.let("e", add(t, mul(ak, i32(NT))))
						z.when(lt(e, i32(R*DV)), func(u *blk) {
							row := u.let("row", div(e, i32(DV)))
							dv := u.let("dv", rem(e, i32(DV)))
							u.vr("a", mul(ld("acc", ir.F32, ak), ld("alpha", ir.F32, row)))
							j := ir.R("j", ir.I32)
							u.loop("j", i32(0), kvN, ir.Serial, "", func(x2 *blk) {
								l.skipHidden(x2, ld("sc", ir.F32, add(mul(row, i32(KT)), j)))
								x2.set("a", add(ir.R("a", ir.F32), mul(ld("sc", ir.F32, add(mul(row, i32(KT)), j)), ld("vb", ir.F32, add(mul(j, i32(DV)), dv)))))
							})
							u.store("acc", ak, ir.R("a", ir.F32))
						})
					})
				}
				y.add(&ir.Barrier{})
			})
			tile.Ranges = []ir.Range{
				{Var: "kv_pos", Lo: mul(kt, i32(KT)), Hi: sub(minE(add(mul(kt, i32(KT)), i32(KT)), kvLen), i32(1))},
				{Var: "q_pos", Lo: qPos0, Hi: sub(add(qPos0, rows), i32(1))},
				{Var: "head", Lo: add(mul(kvh, i32(G)), mul(ht, i32(p.GB))), Hi: minE(add(add(mul(kvh, i32(G)), mul(ht, i32(p.GB))), i32(p.GB-1)), add(mul(kvh, i32(G)), i32(G-1)))},
				{Var: "b", Lo: sb, Hi: sb},
			}
			// Normalize and store one accumulator element of (row, dv).
			storeOut := func(z *blk, ak, row, dv ir.Expr) {
				g, r, ok := rowParts(z, row)
				z.when(ok, func(u *blk) {
					head := u.let("head", add(mul(kvh, i32(G)), g))
					inv, _ := l.finish(u, u.let("lv", ld("den", ir.F32, row)), ld("mx", ir.F32, row), head, !split)
					val := mul(ld("acc", ir.F32, ak), inv)
					if split {
						flat := u.let("pflat", add(mul(add(mul(sp, bs), sb), i32(l.H)), add(mul(kvh, i32(G)), g)))
						u.store("part_o", add(mul(i64(flat), ir.IntT(ir.I64, int64(DV))), i64(dv)), val)
					} else {
						flat := u.let("oflat", rowHead(add(add(qBeg, qLo), r), l.H, add(mul(kvh, i32(G)), g)))
						u.store("o", add(mul(flat, ir.IntT(ir.I64, int64(DV))), i64(dv)), ir.Cvt(l.dt, val))
					}
				})
			}
			if p.mma {
				l.mmaFragments(x, gid, tig, warp, func(z *blk, ak, row, col ir.Expr) { storeOut(z, ak, row, col) })
			} else {
				x.loop("ak", i32(0), i32(p.AK), ir.Serial, "", func(y *blk) {
					ak := ir.R("ak", ir.I32)
					e := y.let("e", add(t, mul(ak, i32(NT))))
					y.when(lt(e, i32(R*DV)), func(z *blk) {
						storeOut(z, ak, z.let("row", div(e, i32(DV))), z.let("dv", rem(e, i32(DV))))
					})
				})
			}
			strided(x, "el", R, func(y *blk, e ir.Expr) {
				g, r, ok := rowParts(y, e)
				y.when(ok, func(z *blk) {
					head := z.let("head", add(mul(kvh, i32(G)), g))
					_, lse := l.finish(z, z.let("lv", ld("den", ir.F32, e)), ld("mx", ir.F32, e), head, !split)
					if split {
						z.store("part_lse", add(mul(add(mul(sp, bs), sb), i32(l.H)), add(mul(kvh, i32(G)), g)), lse)
						return
					}
					z.when(&ir.NotNull{Buf: "lse"}, func(u *blk) {
						u.store("lse", rowHead(add(add(qBeg, qLo), r), l.H, add(mul(kvh, i32(G)), g)), l.userLSE(lse))
					})
				})
			})
			// The block's next work item reuses the shared arrays.
			x.add(&ir.Barrier{})
		})
	})
	b.add(&ir.Return{Value: i32(0)})
	return &ir.Kernel{Name: name, Role: roleOf(decode), Params: params, Body: b.block()}
}

// zeroUnseenV zeroes the staged V rows of positions no row of the block
// sees (kv_seen[j] == 0). On tensor cores P·V multiplies a whole 16-row P
// tile by V, so a zero weight cannot keep a hidden position's NaN or Inf
// out of the sum (0 * NaN = NaN); DESIGN §3 lets such positions hold any
// bits. It runs in the row-statistics phase, which does not touch vh;
// tagged @hidden, classify-tiles drops it from fully visible tiles.
func (l *lowering) zeroUnseenV(b *blk, vw int) {
	DV := l.DV
	f := strided(b, "ez", GPUKVTile*DV/vw, func(x *blk, c ir.Expr) {
		e := x.let("e0", mul(c, i32(vw)))
		x.add(&ir.If{Cond: eq(ldi("kv_seen", div(e, i32(DV))), i32(0)), Then: zeros("vh", e, vw, ir.IntT(ir.I16, 0))})
	})
	f.Tag = l.hiddenTag()
}

// mmaScores computes the 16 x 32 score tile on tensor cores: warp w owns
// kv columns 8w..8w+7 and walks the head dim 16 at a time (m16n8k16), A =
// Q rows from qh, B = K rows from kh, both in the storage half type; then
// each lane finishes the four scores its accumulator fragment holds.
func (l *lowering) mmaScores(b *blk, gid, tig, warp ir.Expr, scoreAt func(*blk, ir.Expr, ir.Expr, func(*blk) ir.Expr)) {
	D := l.D
	n0 := b.let("n0", mul(warp, i32(8)))
	for c := 0; c < 4; c++ {
		b.store("fd", i32(c), f32(0))
	}
	kk := ir.R("kk", ir.I32)
	b.loop("kk", i32(0), i32(D/16), ir.Serial, "", func(x *blk) {
		c0 := x.let("c0", add(mul(kk, i32(16)), mul(tig, i32(2))))
		qAt := func(row ir.Expr, col ir.Expr) ir.Expr { return ld("qh", ir.I16, add(mul(row, i32(D)), col)) }
		kAt := func(n ir.Expr, col ir.Expr) ir.Expr { return ld("kh", ir.I16, add(mul(n, i32(D)), col)) }
		g8 := add(gid, i32(8))
		x.store("fa", i32(0), pack2(qAt(gid, c0), qAt(gid, add(c0, i32(1)))))
		x.store("fa", i32(1), pack2(qAt(g8, c0), qAt(g8, add(c0, i32(1)))))
		x.store("fa", i32(2), pack2(qAt(gid, add(c0, i32(8))), qAt(gid, add(c0, i32(9)))))
		x.store("fa", i32(3), pack2(qAt(g8, add(c0, i32(8))), qAt(g8, add(c0, i32(9)))))
		n := add(n0, gid)
		x.store("fb", i32(0), pack2(kAt(n, c0), kAt(n, add(c0, i32(1)))))
		x.store("fb", i32(1), pack2(kAt(n, add(c0, i32(8))), kAt(n, add(c0, i32(9)))))
		x.add(&ir.MMA{D: "fd", A: "fa", B: "fb", In: l.dt})
	})
	for c := 0; c < 4; c++ {
		c := c
		b.add(&ir.Block{Stmts: func() []ir.Stmt {
			var x blk
			row := x.let("row", add(gid, i32(8*(c/2))))
			j := x.let("j", add(n0, add(mul(tig, i32(2)), i32(c%2))))
			scoreAt(&x, row, j, func(*blk) ir.Expr { return ld("fd", ir.F32, i32(c)) })
			return x.s
		}()})
	}
}

// mmaFragments runs body for each accumulator register of the lane: the
// P·V output tile is 16 x DV, warp w owns the n-tiles w, w+4, ... of 8
// columns, and register 4i+c holds (row gid + 8*(c/2), column
// 8*(w + 4i) + 2*tig + c%2).
func (l *lowering) mmaFragments(b *blk, gid, tig, warp ir.Expr, body func(b *blk, ak, row, col ir.Expr)) {
	NTW := l.DV / 32
	ni := ir.R("ni", ir.I32)
	b.loop("ni", i32(0), i32(NTW), ir.Serial, "", func(x *blk) {
		nb := x.let("nb", mul(add(warp, mul(ni, i32(4))), i32(8)))
		for c := 0; c < 4; c++ {
			c := c
			x.add(&ir.Block{Stmts: func() []ir.Stmt {
				var y blk
				ak := y.let("ak", add(mul(ni, i32(4)), i32(c)))
				row := y.let("frow", add(gid, i32(8*(c/2))))
				col := y.let("fcol", add(nb, add(mul(tig, i32(2)), i32(c%2))))
				body(&y, ak, row, col)
				return y.s
			}()})
		}
	})
}

// mmaAccumulate rescales the lane's accumulator fragments by their rows'
// alpha and adds P·V on tensor cores: A = each half-precision part of P
// (16 x 32, see pParts), B = V rows of the tile (vh), 16 positions per mma.
func (l *lowering) mmaAccumulate(b *blk, gid, tig, warp ir.Expr) {
	DV, KT := l.DV, GPUKVTile
	l.mmaFragments(b, gid, tig, warp, func(x *blk, ak, row, col ir.Expr) {
		x.store("acc", ak, mul(ld("acc", ir.F32, ak), ld("alpha", ir.F32, row)))
	})
	ni := ir.R("ni", ir.I32)
	b.loop("ni", i32(0), i32(DV/32), ir.Serial, "", func(x *blk) {
		nb := x.let("nb", mul(add(warp, mul(ni, i32(4))), i32(8)))
		for c := 0; c < 4; c++ {
			x.store("fd", i32(c), ld("acc", ir.F32, add(mul(ni, i32(4)), i32(c))))
		}
		ks := ir.R("ks", ir.I32)
		x.loop("ks", i32(0), i32(KT/16), ir.Serial, "", func(y *blk) {
			c0 := y.let("c0", add(mul(ks, i32(16)), mul(tig, i32(2))))
			vAt := func(k ir.Expr) ir.Expr { return ld("vh", ir.I16, add(mul(k, i32(DV)), add(nb, gid))) }
			g8 := add(gid, i32(8))
			y.store("fb", i32(0), pack2(vAt(c0), vAt(add(c0, i32(1)))))
			y.store("fb", i32(1), pack2(vAt(add(c0, i32(8))), vAt(add(c0, i32(9)))))
			// One mma per part of P, the smallest first.
			parts := l.pParts()
			for k := len(parts) - 1; k >= 0; k-- {
				part := parts[k]
				pAt := func(row, col ir.Expr) ir.Expr { return ld(part, ir.I16, add(mul(row, i32(KT)), col)) }
				y.store("fa", i32(0), pack2(pAt(gid, c0), pAt(gid, add(c0, i32(1)))))
				y.store("fa", i32(1), pack2(pAt(g8, c0), pAt(g8, add(c0, i32(1)))))
				y.store("fa", i32(2), pack2(pAt(gid, add(c0, i32(8))), pAt(gid, add(c0, i32(9)))))
				y.store("fa", i32(3), pack2(pAt(g8, add(c0, i32(8))), pAt(g8, add(c0, i32(9)))))
				y.add(&ir.MMA{D: "fd", A: "fa", B: "fb", In: l.dt})
			}
		})
		for c := 0; c < 4; c++ {
			x.store("acc", add(mul(ni, i32(4)), i32(c)), ld("fd", ir.F32, i32(c)))
		}
	})
}
