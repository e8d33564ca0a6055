package ir

import (
	"math"
	"math/rand"
	"testing"
)

// TestAMXBlockStep: the interpreter's rt.amx_mm32 step is a 32×32×32
// bf16 product within (32+2)·2^-24·Σ|a·b| of float64, accumulates into
// c, and reads a denormal input as zero (TDPBF16PS's DAZ).
func TestAMXBlockStep(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	bf := func() uint32 { return math.Float32bits(float32(rng.NormFloat64())) >> 16 }
	val := func(h uint32) float64 { return float64(math.Float32frombits(h << 16)) }
	var a [32][16]uint32
	var b [16][32]uint32
	var c [32][32]float32
	for m := range a {
		for k := range a[m] {
			a[m][k] = bf() | bf()<<16
		}
	}
	for k := range b {
		for n := range b[k] {
			b[k][n] = bf() | bf()<<16
		}
	}
	for m := range c {
		for n := range c[m] {
			c[m][n] = float32(m - n)
		}
	}
	a[3][7] = 0x0001<<16 | a[3][7]&0xFFFF // a denormal high half: read as 0
	b[7][5] = 0x7F80<<16 | b[7][5]&0xFFFF // +inf: inf·0 would be NaN
	AMXBlockStep(&c, &a, &b)
	for m := range c {
		for n := range c[m] {
			ref, mag := float64(m-n), math.Abs(float64(m-n))
			for k := range 16 {
				for h := range 2 {
					x, y := val(a[m][k]>>(16*h)&0xFFFF), val(b[k][n]>>(16*h)&0xFFFF)
					if math.Abs(x) < 0x1p-126 || math.Abs(y) < 0x1p-126 {
						x = 0 // DAZ
					}
					if x == 0 && math.IsInf(y, 0) {
						continue // DAZ made it 0·inf: checked below
					}
					ref += x * y
					mag += math.Abs(x * y)
				}
			}
			got := float64(c[m][n])
			switch {
			case m == 3 && n == 5:
				if !math.IsNaN(got) {
					t.Errorf("c[3][5] = %g: a denormal times inf must be 0·inf = NaN", got)
				}
			case math.IsInf(ref, 0) || math.IsNaN(ref):
				if got != ref && !(math.IsNaN(got) && math.IsNaN(ref)) {
					t.Errorf("c[%d][%d] = %g, want %g", m, n, got, ref)
				}
			case math.Abs(got-ref) > 34*0x1p-24*mag:
				t.Errorf("c[%d][%d] = %g, float64 %g", m, n, got, ref)
			}
		}
	}
}
