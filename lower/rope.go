package lower

import (
	"math"

	"github.com/attnc/attnc/ir"
)

// Inline RoPE: the cache holds un-rotated K; queries and keys are rotated
// as they are staged (rope at_append rotates the same way in qkv_append,
// before the rows are stored, and the attention kernels rotate nothing).
// The angles' source is one piece — ropeSourceParams
// (the runtime arguments it reads), ropeTable and fillRopeTable (the
// per-item table it needs), ropeCosSin (cos and sin of pair i at a
// position), ropeChecks, validateRopePositions and validateAppendPositions
// (what a plan checks before anything is read: the attention entries for
// rope inline, qkv_append for rope at_append) — so that every kernel that
// rotates uses the same angles: schedule styles (normal, llama3, yarn) as constant turns,
// `style = factors` as turns computed per item from rope_factors, and
// `table` as loads of rope_cos/rope_sin. With R = rotary_dim, pair i < R/2 — (x[i], x[i+R/2])
// for pairs = half ("rotate_half"), (x[2i], x[2i+1]) for pairs =
// interleaved — turns by angle pos * f_i; dims R.. pass through. The angle
// is computed exactly modulo one turn in 64-bit fixed point — turns_i =
// frac(f_i / 2π) · 2^64 is a constant and pos · turns_i wraps — so precision
// does not decay with the position, on CPU and GPU alike; only the final
// cos and sin run in f32 (turnCosSin). Rows rotate a pair at a time
// (rotateRow): cos and sin once a pair, in loops that vectorize.

// RopeBaseFreqs is θ^(-2i/R), i < R/2 for R = r.Dim(d): the frequencies
// before any rescaling (style factors divides them by rope_factors[i]).
func RopeBaseFreqs(r *ir.Rope, d int) []float64 {
	rd := r.Dim(d)
	out := make([]float64, rd/2)
	for i := range out {
		out[i] = math.Pow(r.Theta, -2*float64(i)/float64(rd))
	}
	return out
}

// RopeFreqs is f_i, i < R/2 for R = r.Dim(d), in radians per position, for
// style normal (θ^(-2i/R)), llama3 (Llama 3.1's rescaling by factor,
// low_freq, high_freq, original_max) and yarn (HF's
// _compute_yarn_parameters: the ramp between interpolated and extrapolated
// frequencies over the beta_fast..beta_slow correction range, rounded to
// whole dims unless truncate = false).
func RopeFreqs(r *ir.Rope, d int) []float64 {
	p := r.Params
	rd := r.Dim(d)
	out := RopeBaseFreqs(r, d)
	switch r.Style {
	case ir.RopeLlama3:
		factor, lo, hi, orig := p["factor"], p["low_freq"], p["high_freq"], p["original_max"]
		loWave, hiWave := orig/lo, orig/hi
		for i, f := range out {
			wave := 2 * math.Pi / f
			switch {
			case wave < hiWave:
			case wave > loWave:
				out[i] = f / factor
			default:
				smooth := (orig/wave - lo) / (hi - lo)
				out[i] = (1-smooth)*f/factor + smooth*f
			}
		}
	case ir.RopeYarn:
		factor, orig := p["factor"], p["original_max"]
		corr := func(rot float64) float64 {
			return float64(rd) * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(r.Theta))
		}
		low, high := corr(p["beta_fast"]), corr(p["beta_slow"])
		if !r.Untruncated {
			low, high = math.Floor(low), math.Ceil(high)
		}
		low, high = math.Max(low, 0), math.Min(high, float64(rd-1))
		if low == high {
			high += 0.001
		}
		for i, f := range out {
			ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
			extra := 1 - ramp
			out[i] = f/factor*(1-extra) + f*extra
		}
	}
	return out
}

// RopeScale is the factor YaRN and style factors apply to cos and sin (1
// otherwise), as HF's attention_factor: attn_factor when given (style
// factors: default 1), else the ratio of mscale terms when mscale and
// mscale_all_dim are both nonzero (DeepSeek; HF treats 0 as absent), else
// 0.1·ln(factor) + 1.
func RopeScale(r *ir.Rope) float64 {
	if r.Style == ir.RopeFactors {
		if a, ok := r.Params["attn_factor"]; ok {
			return a
		}
		return 1
	}
	if r.Style != ir.RopeYarn {
		return 1
	}
	p := r.Params
	if a, ok := p["attn_factor"]; ok {
		return a
	}
	ms := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	if m, all := p["mscale"], p["mscale_all_dim"]; m != 0 && all != 0 {
		return ms(p["factor"], m) / ms(p["factor"], all)
	}
	return ms(p["factor"], 1)
}

// ropeTurns are the 64-bit fixed-point turns per position of each pair.
func ropeTurns(r *ir.Rope, d int) []int64 {
	var out []int64
	for _, f := range RopeFreqs(r, d) {
		t := f / (2 * math.Pi)
		t -= math.Floor(t)
		// t·2^64 in two exact halves, so no bits are lost to float rounding.
		hi := math.Floor(t * (1 << 32))
		lo := math.Round((t*(1<<32) - hi) * (1 << 32))
		out = append(out, int64(uint64(hi)<<32+uint64(lo)))
	}
	return out
}

// rotDim is the number of rotated dims.
func (l *lowering) rotDim() int { return l.v.Rope.Dim(l.D) }

// ropeSourceParams are the runtime arguments the angles come from, in
// DESIGN §4 order: rope_cos, rope_sin f32[rope_positions, R/2] and the
// scalar rope_positions for a table, rope_factors f32[R/2] for style
// factors, none for the schedule styles.
func (l *lowering) ropeSourceParams() []*ir.Param {
	if l.v.Rope == nil {
		return nil
	}
	half := itoa(l.rotDim() / 2)
	switch l.v.Rope.Style {
	case ir.RopeTable:
		return []*ir.Param{buf("rope_cos", ir.F32, false, "rope_positions", half),
			buf("rope_sin", ir.F32, false, "rope_positions", half), scalar("rope_positions")}
	case ir.RopeFactors:
		return []*ir.Param{buf("rope_factors", ir.F32, false, half)}
	}
	return nil
}

// ropeTable appends the per-item table the angles need: a local i64 array
// rope_turns of 64-bit fixed-point turns per position, and for style
// factors a local f32 array rope_amp of each pair's factor on cos and sin
// (GPU kernels declare them with their shared arrays). A table source
// needs none.
func (l *lowering) ropeTable(b *blk) {
	switch l.v.Rope.Style {
	case ir.RopeTable:
		return
	case ir.RopeFactors:
		b.add(&ir.Alloc{Name: "rope_amp", T: ir.F32, Size: l.rotDim() / 2})
	}
	b.add(&ir.Alloc{Name: "rope_turns", T: ir.I64, Size: l.rotDim() / 2})
}

// fillRopeTable stores the turns: constants for the schedule styles (GPU
// kernels store them from thread 0 before a barrier), computed from
// rope_factors for style factors in a spread over the pairs.
//
// Style factors: turns_i = frac(f_i / 2π)·2^64 with f_i / 2π =
// (θ^(-2i/R) / 2π) / rope_factors[i], one f64 division of an f64 constant
// by the widened factor (correctly rounded, as the constant path's f64
// f_i is). x - trunc(x) is exact in f64, and its product with 2^63 is an
// integer in (-2^63, 2^63) up to bits below 2^-63 turn, so the i64
// conversion is exact and doubling it (a shift, wrapping) gives the turns
// modulo 2^64: pos · turns_i then wraps to the angle as exactly as in the
// constant path (|x| >= 2^62 is a whole number of turns in f64: 0). A
// factor that makes f_i infinite or NaN (0, NaN) makes the pair's
// rope_amp NaN, so the rotation gives NaN as pos · f_i does in f64.
func (l *lowering) fillRopeTable(b *blk) {
	switch l.v.Rope.Style {
	case ir.RopeTable:
		return
	case ir.RopeFactors:
		base := RopeBaseFreqs(l.v.Rope, l.D)
		amp := f32(float64(float32(RopeScale(l.v.Rope))))
		b.spread("rope_p", len(base), func(u *blk, i ir.Expr) {
			// The constant of pair i, picked by a select chain over the pairs.
			var c ir.Expr = f64c(base[0] / (2 * math.Pi))
			for k := 1; k < len(base); k++ {
				c = sel(eq(i, i32(k)), f64c(base[k]/(2*math.Pi)), c)
			}
			x := u.let("rope_x64", ir.Bin(ir.Div, c, ir.Cvt(ir.F64, ld("rope_factors", ir.F32, i))))
			inRange := and(lt(x, f64c(1<<62)), gt(x, f64c(-(1<<62))))
			frac := sel(inRange, sub(x, ir.Cvt(ir.F64, i64(x))), f64c(0))
			half := ir.Cvt(ir.I64, mul(frac, f64c(1<<63)))
			u.store("rope_turns", i, ir.Bin(ir.Shl, half, ir.IntT(ir.I64, 1)))
			u.store("rope_amp", i, sel(ne(sub(x, x), f64c(0)), nan(), amp))
		})
		return
	}
	for i, t := range ropeTurns(l.v.Rope, l.D) {
		b.store("rope_turns", i32(i), ir.IntT(ir.I64, t))
	}
}

// f64c is an f64 constant.
func f64c(v float64) *ir.Const { return &ir.Const{T: ir.F64, Float: v} }

// ropeCosSin binds cos and sin of pair i's angle at pos (an i32 or i64
// expression that validateRopePositions has checked for a table source),
// times RopeScale (style factors: times the pair's rope_amp).
func (l *lowering) ropeCosSin(b *blk, pos, i ir.Expr) (c, s ir.Expr) {
	if l.v.Rope.Style == ir.RopeTable {
		at := b.let("rope_at", add(mul(i64(pos), i64c(l.rotDim()/2)), i64(i)))
		return b.let("rope_c", ld("rope_cos", ir.F32, at)), b.let("rope_s", ld("rope_sin", ir.F32, at))
	}
	prod := ir.Bin(ir.Mul, i64(pos), ld("rope_turns", ir.I64, i))
	turn24 := ir.Bin(ir.And, ir.Bin(ir.Shr, prod, ir.IntT(ir.I64, 40)), ir.IntT(ir.I64, 0xffffff))
	cos, sin := turnCosSin(b, b.let("rope_t", ir.Cvt(ir.I32, turn24)))
	var scale ir.Expr = f32(float64(float32(RopeScale(l.v.Rope))))
	if l.v.Rope.Style == ir.RopeFactors {
		scale = b.let("rope_a", ld("rope_amp", ir.F32, i))
	}
	return b.let("rope_c", mul(cos, scale)), b.let("rope_s", mul(sin, scale))
}

// Minimax coefficients of sin and cos on [-π/4, π/4] (Cephes' sinf and
// cosf, within about one f32 ulp there).
const (
	sinC3, sinC5, sinC7 = -1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4
	cosC4, cosC6, cosC8 = 4.166664568298827e-2, -1.388731625493765e-3, 2.443315711809948e-5
)

// turnCosSin binds cos and sin of the angle t·2π/2^24, t an i32 in
// [0, 2^24) (24-bit turns), in plain f32 arithmetic that vectorizes with
// the loop around it (a libm call per lane would not) and gives the same
// bits on every target. The reduction is exact, in integers: k, the
// nearest quarter turn, and the rest f = t - k·2^22, |f| <= 2^21, which
// converts to f32 exactly; x = f·(2π/2^24) rounds once into [-π/4, π/4],
// where the polynomials hold; the quarter turns swap and negate the pair.
func turnCosSin(b *blk, t ir.Expr) (cos, sin ir.Expr) {
	k := b.let("rope_k", ir.Bin(ir.Shr, add(t, i32(1<<21)), i32(22)))
	x := b.let("rope_x", mul(tof32(sub(t, ir.Bin(ir.Shl, k, i32(22)))), f32(float64(float32(2*math.Pi/(1<<24))))))
	z := b.let("rope_z", mul(x, x))
	sx := b.let("rope_sx", add(mul(mul(add(mul(add(mul(f32(sinC7), z), f32(sinC5)), z), f32(sinC3)), z), x), x))
	cx := b.let("rope_cx", add(sub(mul(mul(add(mul(add(mul(f32(cosC8), z), f32(cosC6)), z), f32(cosC4)), z), z), mul(f32(0.5), z)), f32(1)))
	// Quarter k mod 4: (cos, sin) = (cx, sx), (-sx, cx), (-cx, -sx), (sx, -cx).
	odd := b.let("rope_odd", ne(ir.Bin(ir.And, k, i32(1)), i32(0)))
	c0, s0 := sel(odd, sx, cx), sel(odd, cx, sx)
	cNeg := ne(ir.Bin(ir.And, add(k, i32(1)), i32(2)), i32(0))
	sNeg := ne(ir.Bin(ir.And, k, i32(2)), i32(0))
	return sel(cNeg, ir.Un(ir.Neg, c0), c0), sel(sNeg, ir.Un(ir.Neg, s0), s0)
}

// ropeChecks are the scalar checks of the angles' arguments when rope r
// (the attention kernels' InlineRope, or qkv_append's atAppendRope) reads
// a table: a negative rope_positions is a bad argument.
func ropeChecks(r *ir.Rope) []ir.Check {
	if r == nil || r.Style != ir.RopeTable {
		return nil
	}
	return []ir.Check{{Fail: lt(ir.R("rope_positions", ir.I32), i32(0)), Code: ErrBadArgument}}
}

// validateRopePositions checks, for a table source, that every position
// sequence vb rotates lies in 0..rope_positions-1 before any table is
// read: its queries' q_rope_position[qBeg..qBeg+qLen) and its keys'
// kv_pos + k_rope_pos_offset[vb] for kv_pos in 0..kvLen-1 (in i64; with
// `mask tree` the tree's own last qLen keys rotate at their queries'
// positions instead, so only the kvLen - qLen keys before the tree). Keys
// the kernel may skip (hidden pages, positions outside a window) count
// too: the range is the sequence's.
func (l *lowering) validateRopePositions(t *blk, vb, qBeg, qLen, kvLen ir.Expr) {
	if r := l.v.InlineRope(); r == nil || r.Style != ir.RopeTable {
		return
	}
	t.loop("vr", i32(0), qLen, ir.Serial, ir.TagValidate, func(u *blk) {
		u.fail(ropePosOutside(ldi("q_rope_position", add(qBeg, ir.R("vr", ir.I32)))), ErrBadArgument)
	})
	keys := kvLen
	if l.hasMask(ir.MaskTree) {
		keys = sub(kvLen, qLen)
	}
	t.when(gt(keys, i32(0)), func(u *blk) {
		off := u.let("v_rope_off", i64(ldi("k_rope_pos_offset", vb)))
		last := add(off, i64(sub(keys, i32(1))))
		u.fail(or(lt(off, i64c(0)), ge(last, i64(ir.R("rope_positions", ir.I32)))), ErrBadArgument)
	})
}

// validateAppendPositions checks, for qkv_append with a table source,
// that every token's positions[t], t < n, lies in 0..rope_positions-1
// before any table is read (every token's q is rotated, a skipped slot's
// too).
func (l *lowering) validateAppendPositions(v *blk) {
	if r := l.atAppendRope(); r == nil || r.Style != ir.RopeTable {
		return
	}
	v.loop("vp", i32(0), ir.R("n", ir.I32), ir.Serial, ir.TagValidate, func(t *blk) {
		t.fail(ropePosOutside(ldi("positions", ir.R("vp", ir.I32))), ErrBadArgument)
	})
}

// ropePosOutside is true for an i32 position a table cannot rotate at:
// outside 0..rope_positions-1 (a kernel that rotates at per-token
// positions fails BAD_ARGUMENT on it before reading any table).
func ropePosOutside(p ir.Expr) ir.Expr {
	return or(lt(p, i32(0)), ge(p, ir.R("rope_positions", ir.I32)))
}

// ropeCS gives cos and sin of pair i (in y): what rotatePairs turns by.
type ropeCS func(y *blk, i ir.Expr) (c, s ir.Expr)

// rotateRow hands each element d < w of the row whose element k is at(k)
// to put, rotated by cs (nil: as it is, one spread "d" over the row):
// rotatePairs, then one spread over the dims past rotary_dim, which pass
// through.
func (l *lowering) rotateRow(b *blk, w int, cs ropeCS, at func(ir.Expr) ir.Expr, put func(y *blk, d, val ir.Expr)) {
	if cs == nil {
		b.spread("d", w, func(y *blk, d ir.Expr) { put(y, d, at(d)) })
		return
	}
	l.rotatePairs(b, cs, at, put)
	if R := l.rotDim(); R < w {
		b.spread("d", w-R, func(y *blk, d ir.Expr) {
			dd := y.let("rope_pass", add(d, i32(R)))
			put(y, dd, at(dd))
		})
	}
}

// ropeAt is the cos and sin of pair i at pos (ropeCosSin); nil for a nil
// pos (no rotation).
func (l *lowering) ropeAt(pos ir.Expr) ropeCS {
	if pos == nil {
		return nil
	}
	return func(y *blk, i ir.Expr) (c, s ir.Expr) { return l.ropeCosSin(y, pos, i) }
}

// rotatePairs hands the rotated dims of the row whose element k is at(k)
// to put, pair i turned by cs(i)'s cos and sin. With R = rotary_dim, pair
// i < R/2 is (x1, x2) = (at(i), at(i + R/2)) for pairs = half, (at(2i),
// at(2i+1)) for pairs = interleaved, and turns to (x1 cos - x2 sin, x2 cos
// + x1 sin): one spread over the pairs, cos and sin once a pair, both
// elements' loads and stores side by side (consecutive, or stride 2: an
// interleaved group).
func (l *lowering) rotatePairs(b *blk, cs ropeCS, at func(ir.Expr) ir.Expr, put func(y *blk, d, val ir.Expr)) {
	R := l.rotDim()
	b.spread("rope_i", R/2, func(y *blk, i ir.Expr) {
		d1, d2 := i, add(i, i32(R/2))
		if l.v.Rope.Pairs == ir.RopeInterleaved {
			d1 = y.let("rope_d", ir.Bin(ir.Shl, i, i32(1)))
			d2 = add(d1, i32(1))
		}
		c, s := cs(y, i)
		x1, x2 := y.let("rope_x1", at(d1)), y.let("rope_x2", at(d2))
		put(y, d1, sub(mul(x1, c), mul(x2, s)))
		put(y, d2, add(mul(x2, c), mul(x1, s)))
	})
}

// stageRow stores the w elements of a row (at(d)) into the f32 array dst
// at idx(d), rotated by cs (nil: copied): copied, then its pairs rotated
// there (Tiling.RopeInPlace), or rotated as read (rotateRow).
func (l *lowering) stageRow(b *blk, dst string, w int, idx func(d ir.Expr) ir.Expr, cs ropeCS, at func(ir.Expr) ir.Expr) {
	put := func(y *blk, d, val ir.Expr) { y.store(dst, idx(d), val) }
	if cs != nil && l.t.RopeInPlace {
		l.rotateRow(b, w, nil, at, put)
		l.rotatePairs(b, cs, func(k ir.Expr) ir.Expr { return ld(dst, ir.F32, idx(k)) }, put)
		return
	}
	l.rotateRow(b, w, cs, at, put)
}

// stageKRow stages K row j of the tile that starts at cache position kvLo
// (position pos = kvLo + j of sequence sb) into kb: rotated at its
// position (stageRow), or, with ropeRel, copied and rotated by its angle
// relative to the tile's first position, p0 = kvLo + k_rope_pos_offset[sb]:
// j, from the kernel's table (ropeRelTable), or for a tree's own key (pos >=
// qBase) its query's position - p0, evaluated.
//
// A tree's rows are copied once, before the branch on the key's kind, so
// the copy stays the plain loop prefetch-kv finds (ropeRel is a CPU
// choice: the rows are turned in the tile, as Tiling.RopeInPlace does).
func (l *lowering) stageKRow(b *blk, sg segment, j, pos, kvLo, sb, qBase, qSeqRow ir.Expr, at func(ir.Expr) ir.Expr) {
	D := l.D
	idx := func(d ir.Expr) ir.Expr { return add(mul(j, i32(D)), plus(d, sg.off)) }
	if !l.ropeRel {
		l.stageRow(b, "kb", sg.w, idx, l.ropeAt(l.kRopePos(pos, sb, qBase, qSeqRow)), at)
		return
	}
	half := l.rotDim() / 2
	table := func(y *blk, i ir.Expr) (c, s ir.Expr) {
		at := y.let("rope_ji", add(mul(j, i32(half)), i))
		return y.let("rope_c", ld("rope_jc", ir.F32, at)), y.let("rope_s", ld("rope_js", ir.F32, at))
	}
	if !l.hasMask(ir.MaskTree) {
		l.stageRow(b, "kb", sg.w, idx, table, at)
		return
	}
	put := func(y *blk, d, val ir.Expr) { y.store("kb", idx(d), val) }
	inTile := func(k ir.Expr) ir.Expr { return ld("kb", ir.F32, idx(k)) }
	l.stageRow(b, "kb", sg.w, idx, nil, at)
	b.guarded(ge(pos, qBase), func(y *blk) {
		rel := y.let("rope_rel", sub(l.kRopePos(pos, sb, qBase, qSeqRow), ropeTileBase(kvLo, sb)))
		l.rotatePairs(y, l.ropeAt(rel), inTile, put)
	}, func(y *blk) { l.rotatePairs(y, table, inTile, put) })
}

// rotK is how decode's Q·Kᵀ turns K's rows read in place (ropeInDot): by
// the kernel's table of the tile's offsets (ropeRelTable), or nil.
func (l *lowering) rotK() *ir.RotB {
	if !l.ropeInDot {
		return nil
	}
	return &ir.RotB{Cos: "rope_jc", Sin: "rope_js", Half: l.rotDim() / 2, Pairs: l.v.Rope.Pairs}
}

// ropeTileBase is p0 = kvLo + k_rope_pos_offset[sb], the rotation position
// of a tile's first key (i64), to which ropeRel's angles are relative.
func ropeTileBase(kvLo, sb ir.Expr) ir.Expr {
	return add(i64(kvLo), i64(ldi("k_rope_pos_offset", sb)))
}

// ropeRelTable declares and fills (ropeRel) a work kernel's turns and its
// tables rope_jc, rope_js f32[KVTile, R/2] — cos and sin of pair i at
// offset j of a tile — once per call, before its parallel loop, whose
// items read them: every item's tiles have the same offsets, and filling
// the tables per item (KVTile·R/2 cos and sin) took ~18% of a
// sliding-window decode's work, whose items read two tiles. The tables
// are malloc'd (8 KiB each at 64 × 32), not the caller's stack; the
// kernel frees them before it returns.
func (l *lowering) ropeRelTable(w *blk) {
	KT, half := l.t.KVTile, l.rotDim()/2
	l.ropeTable(w)
	l.fillRopeTable(w)
	w.add(&ir.Malloc{Name: "rope_jc", T: ir.F32, Size: i64c(KT * half)},
		&ir.Malloc{Name: "rope_js", T: ir.F32, Size: i64c(KT * half)})
	w.loop("rope_j", i32(0), i32(KT), ir.Serial, ir.NoTag, func(x *blk) {
		j := ir.R("rope_j", ir.I32)
		x.spread("rope_i", half, func(y *blk, i ir.Expr) {
			c, s := l.ropeCosSin(y, j, i)
			at := add(mul(j, i32(half)), i)
			y.store("rope_jc", at, c)
			y.store("rope_js", at, s)
		})
	})
}

// rotateQueriesRel (ropeRel) writes the item's query rows' rotated dims
// into qs for the tile that starts at kvLo: each row's unrotated dims,
// kept in qs0, turned by its position - p0 (ropeTileBase). When the
// item's rows share one query token (oneToken: a decode item's GQA group),
// its cos and sin are evaluated once per tile into rope_qc, rope_qs, which
// every row reads.
func (l *lowering) rotateQueriesRel(t *blk, x itemVars, kvLo ir.Expr) {
	D, Rd := l.D, l.rotDim()
	p0 := t.let("rope_p0", ropeTileBase(kvLo, x.sb))
	var shared ropeCS
	if oneToken(x) {
		rel := t.let("rope_qrel", sub(i64(l.qRopePos(x.qRow0)), p0))
		t.spread("rope_i", Rd/2, func(y *blk, i ir.Expr) {
			c, s := l.ropeCosSin(y, rel, i)
			y.store("rope_qc", i, c)
			y.store("rope_qs", i, s)
		})
		shared = func(y *blk, i ir.Expr) (c, s ir.Expr) {
			return y.let("rope_c", ld("rope_qc", ir.F32, i)), y.let("rope_s", ld("rope_qs", ir.F32, i))
		}
	}
	t.spread("row", x.R, func(y *blk, row ir.Expr) {
		y.guarded(lt(row, x.nRows), func(u *blk) {
			r, _ := l.rowParts(u, row)
			cs := shared
			if cs == nil {
				cs = l.ropeAt(u.let("rope_rel", sub(i64(l.qRopePos(add(x.qRow0, r))), p0)))
			}
			l.rotatePairs(u, cs,
				func(k ir.Expr) ir.Expr { return ld("qs0", ir.F32, add(mul(row, i32(Rd)), k)) },
				func(z *blk, d, val ir.Expr) { z.store("qs", add(mul(row, i32(D)), d), val) })
		}, nil)
	})
}

// oneToken reports whether every row of item x belongs to one query token
// (a decode item: its rows are the heads of its GQA group).
func oneToken(x itemVars) bool {
	c, ok := x.rows.(*ir.Const)
	return ok && c.Int == 1
}

// ropeParams are an attention entry's RoPE arguments: the positions, then
// the angles' source (ropeSourceParams).
func (l *lowering) ropeParams(rows string) []*ir.Param {
	if l.v.InlineRope() == nil {
		return nil
	}
	return append([]*ir.Param{buf("q_rope_position", ir.I32, false, rows), buf("k_rope_pos_offset", ir.I32, false, "batch_size")},
		l.ropeSourceParams()...)
}

// qRopePos is query row qrow's rotation position (nil without RoPE).
func (l *lowering) qRopePos(qrow ir.Expr) ir.Expr {
	if l.v.InlineRope() == nil {
		return nil
	}
	return ldi("q_rope_position", qrow)
}

// kRopePos is the rotation position of cache position pos in sequence sb,
// whose first query token sits at position qBase and row qRow: with `mask
// tree` the tree's own keys (pos >= qBase) rotate at their queries'
// q_rope_position (depth-based positions), every other key at pos +
// k_rope_pos_offset[sb]. The sum is an i64: an offset near INT32_MAX from
// an untrusted request rotates at the position it names, not a wrapped one.
func (l *lowering) kRopePos(pos, sb, qBase, qRow ir.Expr) ir.Expr {
	if l.v.InlineRope() == nil {
		return nil
	}
	seq := add(i64(pos), i64(ldi("k_rope_pos_offset", sb)))
	if !l.hasMask(ir.MaskTree) {
		return seq
	}
	// Clamp the (unused) row of keys before the tree into the sequence's rows.
	tree := i64(ldi("q_rope_position", add(qRow, maxE(sub(pos, qBase), i32(0)))))
	return sel(ge(pos, qBase), tree, seq)
}
