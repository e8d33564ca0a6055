package reference

import (
	"math"
	"testing"

	"github.com/attnc/attnc/ir"
)

// TestQKVAppendByHand checks the model on a token worked out by hand: one
// q, k and v head of two elements, qk_norm (eps 0, offset 0 and 1) and a
// rotation of one radian per position (θ^0 = 1 for the only pair) at
// position 1; v passes unchanged.
func TestQKVAppendByHand(t *testing.T) {
	v := &ir.Variant{QOHeads: 1, KVHeads: 1, HeadDimQK: 2, HeadDimV: 2,
		Rope:   &ir.Rope{Theta: 10000, AtAppend: true},
		QKNorm: &ir.QKNorm{Eps: 0, Offset: 1}}
	qkv := []float32{3, 4, 0, -2, 5, 6}
	rows := QKVAppend(v, qkv, []int32{1}, []float32{0, 1}, []float32{1, 0}, nil)
	rot := func(x, y float64) []float64 {
		return []float64{x*math.Cos(1) - y*math.Sin(1), y*math.Cos(1) + x*math.Sin(1)}
	}
	// q: rms = sqrt((9 + 16) / 2); weights (1 + 0, 1 + 1).
	r := math.Sqrt(12.5)
	wantQ := rot(3/r*1, 4/r*2)
	// k: rms = sqrt(4 / 2); weights (1 + 1, 1 + 0).
	wantK := rot(0, -2/math.Sqrt(2)*1)
	for i := range 2 {
		if math.Abs(rows.Q[i]-wantQ[i]) > 1e-15 || math.Abs(rows.K[i]-wantK[i]) > 1e-15 {
			t.Errorf("element %d: q %v, k %v; want %v, %v", i, rows.Q[i], rows.K[i], wantQ[i], wantK[i])
		}
	}
	if rows.V[0] != 5 || rows.V[1] != 6 {
		t.Errorf("v %v, want [5 6]", rows.V)
	}
	// The magnitude of a rotated pair is its norm, for both elements.
	if m := math.Hypot(3/r, 8/r); math.Abs(rows.QMag[0]-m) > 1e-15 || rows.QMag[0] != rows.QMag[1] {
		t.Errorf("q magnitudes %v, want %v twice", rows.QMag, m)
	}
	// Without qk_norm and rope the rows pass through; offset 0 scales by w.
	v.Rope, v.QKNorm = nil, nil
	if rows := QKVAppend(v, qkv, []int32{7}, nil, nil, nil); rows.Q[0] != 3 || rows.Q[1] != 4 || rows.K[1] != -2 {
		t.Errorf("plain: q %v, k %v", rows.Q, rows.K)
	}
	v.QKNorm = &ir.QKNorm{Eps: 0}
	if rows := QKVAppend(v, qkv, []int32{0}, []float32{0, 1}, []float32{1, 1}, nil); rows.Q[0] != 0 || math.Abs(rows.Q[1]-4/r) > 1e-15 {
		t.Errorf("offset 0: q %v, want [0 %v]", rows.Q, 4/r)
	}
}
