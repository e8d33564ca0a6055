package reference

import (
	"fmt"
	"math"
	"math/rand"

	"github.com/attnc/attnc/ir"
)

// ropeFreq is f_i, i < R/2, of DESIGN §3's inline RoPE over R = rotary_dim
// rotated dims, in float64: θ^(-2i/R), then Llama 3.1's wavelength-based
// rescaling, or YaRN's ramp between the interpolated (f/factor) and
// extrapolated (f) frequencies over the correction range of HF's
// _compute_yarn_parameters (floor/ceil unless truncate = false, clamped to
// [0, R-1]).
func ropeFreq(r *ir.Rope, i, rdim int) float64 {
	p := r.Params
	f := 1 / math.Pow(r.Theta, float64(2*i)/float64(rdim))
	switch r.Style {
	case ir.RopeLlama3:
		wavelen := 2 * math.Pi / f
		lowWavelen := p["original_max"] / p["low_freq"]
		highWavelen := p["original_max"] / p["high_freq"]
		if wavelen < highWavelen {
			return f
		}
		if wavelen > lowWavelen {
			return f / p["factor"]
		}
		smooth := (p["original_max"]/wavelen - p["low_freq"]) / (p["high_freq"] - p["low_freq"])
		return (1-smooth)*f/p["factor"] + smooth*f
	case ir.RopeYarn:
		// The dimension where a frequency completes n rotations over
		// original_max positions.
		dimFor := func(n float64) float64 {
			return float64(rdim) * math.Log(p["original_max"]/(n*2*math.Pi)) / (2 * math.Log(r.Theta))
		}
		lo, hi := dimFor(p["beta_fast"]), dimFor(p["beta_slow"])
		if !r.Untruncated {
			lo, hi = math.Floor(lo), math.Ceil(hi)
		}
		lo, hi = math.Max(lo, 0), math.Min(hi, float64(rdim-1))
		if hi == lo {
			hi += 0.001
		}
		ramp := math.Min(1, math.Max(0, (float64(i)-lo)/(hi-lo)))
		keep := 1 - ramp // share of the extrapolated (unscaled) frequency
		return keep*f + (1-keep)*f/p["factor"]
	}
	return f
}

// ropeAttnScale is YaRN's factor on cos and sin (1 for other styles):
// attn_factor when given, else mscale(factor, mscale) / mscale(factor,
// mscale_all_dim) when both are given and nonzero (a zero counts as
// absent, as in HF), else mscale(factor, 1).
func ropeAttnScale(r *ir.Rope) float64 {
	if r.Style == ir.RopeFactors {
		if v, ok := r.Params["attn_factor"]; ok {
			return v
		}
		return 1
	}
	if r.Style != ir.RopeYarn {
		return 1
	}
	p := r.Params
	if v, ok := p["attn_factor"]; ok {
		return v
	}
	mscale := func(m float64) float64 {
		if p["factor"] <= 1 {
			return 1
		}
		return 0.1*m*math.Log(p["factor"]) + 1
	}
	if m, all := p["mscale"], p["mscale_all_dim"]; m != 0 && all != 0 {
		return mscale(m) / mscale(all)
	}
	return mscale(1)
}

// RopeSource is what the angles of a `table` or `style = factors` rope
// (inline or at_append) come from at run time: RopeCos and RopeSin
// [rope_positions, R/2], the cos and sin of pair i at position p
// (RopePositions rows), or RopeFactors [R/2], the per-pair divisors of
// θ^(-2i/R). The schedule styles need none.
type RopeSource struct {
	RopeCos, RopeSin []float32
	RopePositions    int32
	RopeFactors      []float32
}

// RandomRopeSource draws the angles' runtime arguments of v's rope: for a
// table, rows of cos and sin of random angles with random amplitudes in
// [0.5, 1.5] (any values are valid; the amplitude checks they are used
// as given) covering positions 0..top and up to 3 more; for style
// factors, factors in [0.6, 55] (HF longrope's range), log-uniform; for
// the schedule styles nothing.
func RandomRopeSource(v *ir.Variant, rng *rand.Rand, top int32) RopeSource {
	var src RopeSource
	half := v.Rope.Dim(v.HeadDimQK) / 2
	switch v.Rope.Style {
	case ir.RopeTable:
		src.RopePositions = top + 1 + int32(rng.Intn(4))
		n := int(src.RopePositions) * half
		src.RopeCos, src.RopeSin = make([]float32, n), make([]float32, n)
		for k := range n {
			a, th := 0.5+rng.Float64(), 2*math.Pi*rng.Float64()
			src.RopeCos[k], src.RopeSin[k] = float32(a*math.Cos(th)), float32(a*math.Sin(th))
		}
	case ir.RopeFactors:
		src.RopeFactors = make([]float32, half)
		for i := range src.RopeFactors {
			src.RopeFactors[i] = float32(math.Exp(-0.5 + 4.5*rng.Float64()))
		}
	}
	return src
}

// ropeCosSin is cos and sin of pair i at position pos, times the
// attention factor: for a table c's RopeCos[pos, i] and RopeSin[pos, i]
// (a position outside 0..RopePositions-1 panics: the kernels refuse it),
// for `style = factors` the angle pos · θ^(-2i/R) / RopeFactors[i], for
// the other styles pos · f_i.
func ropeCosSin(r *ir.Rope, c *RopeSource, i, rdim, pos int) (float64, float64) {
	if r.Style == ir.RopeTable {
		if pos < 0 || pos >= int(c.RopePositions) {
			panic(fmt.Sprintf("reference: rope position %d outside 0..%d", pos, c.RopePositions-1))
		}
		at := pos*(rdim/2) + i
		return float64(c.RopeCos[at]), float64(c.RopeSin[at])
	}
	f := ropeFreq(r, i, rdim)
	if r.Style == ir.RopeFactors {
		f = 1 / math.Pow(r.Theta, float64(2*i)/float64(rdim)) / float64(c.RopeFactors[i])
	}
	a := float64(pos) * f
	s := ropeAttnScale(r)
	return math.Cos(a) * s, math.Sin(a) * s
}

// rotate returns x (d values) rotated at position pos: with R = rotary_dim,
// pair i < R/2 — (x[i], x[i+R/2]) for pairs = half, (x[2i], x[2i+1]) for
// pairs = interleaved — turns by pos·f_i (or by c's table or factors);
// x[R:] passes through unchanged.
func rotate(r *ir.Rope, c *RopeSource, x []float64, pos int) []float64 {
	d := len(x)
	rdim := r.Dim(d)
	out := append([]float64(nil), x...)
	for i := 0; i < rdim/2; i++ {
		cs, sn := ropeCosSin(r, c, i, rdim, pos)
		j, k := i, i+rdim/2
		if r.Pairs == ir.RopeInterleaved {
			j, k = 2*i, 2*i+1
		}
		out[j] = x[j]*cs - x[k]*sn
		out[k] = x[k]*cs + x[j]*sn
	}
	return out
}
