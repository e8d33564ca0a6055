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

// TestAMXGridInterp: the interpreter's rt.amx_mm32 covers its whole grid
// — 2 × 3 blocks at nonzero offsets, K = 64 (2 steps) — each element the
// exact dot product (small integers: every sum is exact in f32), or C's
// -1 plus it with acc, and writes nothing outside it, nor anything for
// an empty grid.
func TestAMXGridInterp(t *testing.T) {
	const src = `module t prefix t

kernel t_k role prefill (a: i32* [2080], b: i32* [3104], c: f32* [9000] out, mb: i32, nb: i32, acc: i32) {
  for item in 0 .. 1 parallel @work {
    call rt.amx_mm32(a, 32, 32, b, 5, 96, c, 7, 100, 2, mb, nb, acc)
  }
  return 0
}
`
	m, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	const M, N, K = 64, 96, 64 // K in bf16 elements: 32 pairs a row
	bf := func(v int) uint32 { return math.Float32bits(float32(v)) >> 16 }
	av := func(r, k int) int { return (r*7+k*3)%9 - 4 }
	bv := func(k, n int) int { return (k*5+n*11)%7 - 3 }
	a, b := make([]int32, 2080), make([]int32, 3104)
	for r := range M {
		for p := range K / 2 {
			a[32+r*32+p] = int32(bf(av(r, 2*p)) | bf(av(r, 2*p+1))<<16)
		}
	}
	for p := range K / 2 {
		for n := range N {
			b[5+p*96+n] = int32(bf(bv(2*p, n)) | bf(bv(2*p+1, n))<<16)
		}
	}
	for _, g := range []struct{ mb, nb, acc int32 }{{2, 3, 0}, {0, 3, 0}, {2, 0, 0}, {2, 3, 1}, {0, 3, 1}} {
		c := make([]float32, 9000)
		for i := range c {
			c[i] = -1
		}
		args := map[string]any{"a": a, "b": b, "c": c, "mb": g.mb, "nb": g.nb, "acc": g.acc}
		if st, err := Run(m, "t_k", args); err != nil || st != 0 {
			t.Fatalf("grid %v: status %d, %v", g, st, err)
		}
		for i, got := range c {
			want := float32(-1)
			if r, n := (i-7)/100, (i-7)%100; i >= 7 && r < 32*int(g.mb) && n < 32*int(g.nb) {
				s := 0
				for k := range K {
					s += av(r, k) * bv(k, n)
				}
				want = float32(s) - float32(g.acc)
			}
			if got != want {
				t.Fatalf("grid %v: c[%d] = %v, want %v", g, i, got, want)
			}
		}
	}
}
