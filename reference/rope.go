package reference

import (
	"math"

	"github.com/attnc/attnc/ir"
)

// ropeFreq is f_i of DESIGN §3's inline RoPE, in float64: θ^(-2i/d), then
// Llama 3.1's wavelength-based rescaling, or YaRN's ramp between the
// interpolated (f/factor) and extrapolated (f) frequencies.
func ropeFreq(r *ir.Rope, i, d int) float64 {
	p := r.Params
	f := 1 / math.Pow(r.Theta, float64(2*i)/float64(d))
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
			return float64(d) * math.Log(p["original_max"]/(n*2*math.Pi)) / (2 * math.Log(r.Theta))
		}
		lo := math.Max(math.Floor(dimFor(p["beta_fast"])), 0)
		hi := math.Min(math.Ceil(dimFor(p["beta_slow"])), float64(d-1))
		if hi == lo {
			hi += 0.001
		}
		ramp := math.Min(1, math.Max(0, (float64(i)-lo)/(hi-lo)))
		keep := 1 - ramp // share of the extrapolated (unscaled) frequency
		return keep*f + (1-keep)*f/p["factor"]
	}
	return f
}

// ropeAttnScale is YaRN's factor on rotated q and k (1 for other styles).
func ropeAttnScale(r *ir.Rope) float64 {
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
	if m, ok := p["mscale"]; ok {
		if all, ok := p["mscale_all_dim"]; ok {
			return mscale(m) / mscale(all)
		}
	}
	return mscale(1)
}

// rotate returns x (d values) rotated at position pos: pair (x[i],
// x[i+d/2]) turns by pos·f_i.
func rotate(r *ir.Rope, x []float64, pos int) []float64 {
	d := len(x)
	out := make([]float64, d)
	s := ropeAttnScale(r)
	for i := 0; i < d/2; i++ {
		a := float64(pos) * ropeFreq(r, i, d)
		c, sn := math.Cos(a)*s, math.Sin(a)*s
		out[i] = x[i]*c - x[i+d/2]*sn
		out[i+d/2] = x[i+d/2]*c + x[i]*sn
	}
	return out
}
