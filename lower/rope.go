package lower

import (
	"math"

	"github.com/attnc/attnc/ir"
)

// Inline RoPE: the cache holds un-rotated K; queries and keys are rotated
// as they are staged, pair (x[i], x[i + d/2]) by angle pos * f_i
// ("rotate_half"). The angle is computed exactly modulo one turn in 64-bit
// fixed point — turns_i = frac(f_i / 2π) · 2^64 is a constant and pos ·
// turns_i wraps — so precision does not decay with the position, on CPU and
// GPU alike; only the final sin/cos run in f32.

// RopeFreqs is f_i, i < d/2, in radians per position, for style normal
// (θ^(-2i/d)), llama3 (Llama 3.1's rescaling by factor, low_freq,
// high_freq, original_max) and yarn (the YaRN ramp between interpolated and
// extrapolated frequencies over beta_fast..beta_slow rotations).
func RopeFreqs(r *ir.Rope, d int) []float64 {
	p := r.Params
	out := make([]float64, d/2)
	for i := range out {
		out[i] = math.Pow(r.Theta, -2*float64(i)/float64(d))
	}
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
			return float64(d) * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(r.Theta))
		}
		low := math.Max(math.Floor(corr(p["beta_fast"])), 0)
		high := math.Min(math.Ceil(corr(p["beta_slow"])), float64(d-1))
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

// RopeScale is the factor YaRN applies to rotated q and k (1 otherwise):
// attn_factor when given, else the ratio of mscale terms (DeepSeek), else
// 0.1·ln(factor) + 1.
func RopeScale(r *ir.Rope) float64 {
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
	m, ok1 := p["mscale"]
	all, ok2 := p["mscale_all_dim"]
	if ok1 && ok2 {
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

// ropeTable appends the turns table, a local i64 array named rope_turns
// (GPU kernels declare it with their shared arrays and fill it from thread
// 0 before a barrier).
func (l *lowering) ropeTable(b *blk) {
	b.add(&ir.Alloc{Name: "rope_turns", T: ir.I64, Size: l.D / 2})
}

// fillRopeTable stores the turn constants.
func (l *lowering) fillRopeTable(b *blk) {
	for i, t := range ropeTurns(l.v.Rope, l.D) {
		b.store("rope_turns", i32(i), ir.IntT(ir.I64, t))
	}
}

// ropeCosSin binds cos and sin (times RopeScale) of pair i's angle at pos.
func (l *lowering) ropeCosSin(b *blk, pos, i ir.Expr) (c, s ir.Expr) {
	prod := ir.Bin(ir.Mul, i64(pos), ld("rope_turns", ir.I64, i))
	turn24 := ir.Bin(ir.And, ir.Bin(ir.Shr, prod, ir.IntT(ir.I64, 40)), ir.IntT(ir.I64, 0xffffff))
	ang := b.let("rope_ang", mul(tof32(ir.Cvt(ir.I32, turn24)), f32(float64(float32(2*math.Pi/(1<<24))))))
	scale := f32(float64(float32(RopeScale(l.v.Rope))))
	return b.let("rope_c", mul(ir.Un(ir.Cos, ang), scale)), b.let("rope_s", mul(ir.Un(ir.Sin, ang), scale))
}

// ropeElem is element d of the rotated row whose element k is at(k).
func (l *lowering) ropeElem(b *blk, pos, d ir.Expr, at func(ir.Expr) ir.Expr) ir.Expr {
	half := l.D / 2
	first := b.let("rope_first", lt(d, i32(half)))
	i := b.let("rope_i", sel(first, d, sub(d, i32(half))))
	c, s := l.ropeCosSin(b, pos, i)
	x := b.let("rope_x", at(d))
	other := b.let("rope_o", at(sel(first, add(d, i32(half)), sub(d, i32(half)))))
	// (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
	return sel(first, sub(mul(x, c), mul(other, s)), add(mul(x, c), mul(other, s)))
}

// stageRow stores row element d of src (via at) into dst[idx], rotated at
// pos when the variant has inline RoPE.
func (l *lowering) stageRow(b *blk, dst string, idx, pos, d ir.Expr, at func(ir.Expr) ir.Expr, rope bool) {
	if rope && l.v.Rope != nil {
		b.store(dst, idx, l.ropeElem(b, pos, d, at))
		return
	}
	b.store(dst, idx, at(d))
}

func (l *lowering) ropeParams(rows string) []*ir.Param {
	if l.v.Rope == nil {
		return nil
	}
	return []*ir.Param{buf("q_rope_position", ir.I32, false, rows), buf("k_rope_pos_offset", ir.I32, false, "batch_size")}
}

// qRopePos is query row qrow's rotation position (nil without RoPE).
func (l *lowering) qRopePos(b *blk, qrow ir.Expr) ir.Expr {
	if l.v.Rope == nil {
		return nil
	}
	return ldi("q_rope_position", qrow)
}

// kRopePos is the rotation position of cache position pos in sequence sb.
func (l *lowering) kRopePos(b *blk, pos, sb ir.Expr) ir.Expr {
	if l.v.Rope == nil {
		return nil
	}
	return add(pos, ldi("k_rope_pos_offset", sb))
}
