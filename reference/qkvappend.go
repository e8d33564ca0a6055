package reference

import (
	"math"

	"github.com/attnc/attnc/ir"
)

// QKVRows are qkv_append's exact outputs in float64, before their one
// rounding: Q [n, qo_heads, d] (q_out), K and V [n, kv_heads, d] (the
// rows the cache stores at position_map[t]), and, for each element of Q
// and K, the magnitude the kernel's f32 arithmetic works at (the norm of
// the rotated pair the element belongs to, times the rotation's amplitude
// when above 1; the element itself past rotary_dim): the kernel's error
// before rounding is a few units of 2^-24 of it.
type QKVRows struct {
	Q, K, V    []float64
	QMag, KMag []float64
}

// QKVAppend is qkv_append (DESIGN §3.1, §3.2) in float64 for n tokens of
// qkv [n, qo_heads + 2*kv_heads, d] (q heads, then k, then v): every q
// and k head is normed when the variant has qk_norm — x / sqrt(mean(x^2)
// + eps) * (offset + w), weights qw for q heads and kw for k heads — and
// then rotated at positions[t] when it has rope at_append (a table or
// factors rope takes its angles from src, independently of the kernels'
// fixed-point turns: the reference's f64 angle pos · f_i, or the table's
// cos and sin as given); v heads pass unchanged.
func QKVAppend(v *ir.Variant, qkv []float32, positions []int32, qw, kw []float32, src *RopeSource) QKVRows {
	d, H, KVH := v.HeadDimQK, v.QOHeads, v.KVHeads
	n := len(qkv) / ((H + 2*KVH) * d)
	var out QKVRows
	row := func(t, h int, w []float32) (x, mag []float64) {
		x = make([]float64, d)
		for j, e := range qkv[(t*(H+2*KVH)+h)*d:][:d] {
			x[j] = float64(e)
		}
		if nm := v.QKNorm; nm != nil {
			ss := 0.0
			for _, e := range x {
				ss += e * e
			}
			r := math.Sqrt(ss/float64(d) + nm.Eps)
			for j := range x {
				x[j] = x[j] / r * (nm.Offset + float64(w[j]))
			}
		}
		mag = make([]float64, d)
		for j, e := range x {
			mag[j] = math.Abs(e)
		}
		if r := v.Rope; r != nil && r.AtAppend {
			rd, pos := r.Dim(d), int(positions[t])
			for i := range rd / 2 {
				a, b := i, i+rd/2
				if r.Pairs == ir.RopeInterleaved {
					a, b = 2*i, 2*i+1
				}
				// The rotation's amplitude: the attention factor, or a
				// table's hypot(cos, sin) at the pair and position.
				amp := math.Abs(ropeAttnScale(r))
				if r.Style == ir.RopeTable {
					amp = math.Hypot(ropeCosSin(r, src, i, rd, pos))
				}
				m := math.Hypot(x[a], x[b]) * math.Max(1, amp)
				mag[a], mag[b] = m, m
			}
			x = rotate(r, src, x, pos)
		}
		return x, mag
	}
	for t := range n {
		for h := range H {
			x, m := row(t, h, qw)
			out.Q, out.QMag = append(out.Q, x...), append(out.QMag, m...)
		}
		for h := range KVH {
			x, m := row(t, H+h, kw)
			out.K, out.KMag = append(out.K, x...), append(out.KMag, m...)
		}
		for h := range KVH {
			for _, e := range qkv[(t*(H+2*KVH)+H+KVH+h)*d:][:d] {
				out.V = append(out.V, float64(e))
			}
		}
	}
	return out
}
