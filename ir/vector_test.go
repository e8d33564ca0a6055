package ir

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// vectorKernel sums x·y over 8 elements with f32x4 vectors: two muladds,
// a shuffle tree to one lane, a broadcast store and prefetches into L2
// and into L1.
const vectorKernel = `module v prefix v

kernel v_dot role decode level "neon" (x: f32* [8], y: f32* [8], h: f16* [4], o: f32* [4] out, w: f32* [4] out) {
  prefetch x[4]
  prefetch_l1 y[4]
  var acc = 0.0:f32x4
  for c in 0 .. 2 serial {
    acc = muladd(x[(c * 4)]:f32x4, y[(c * 4)]:f32x4, acc)
  }
  let hi = shuffle(acc, acc, [2, 3, 6, 7])
  let s2 = (acc + hi)
  let s1 = (shuffle(s2, s2, [0]) + shuffle(s2, s2, [1]))
  store o[0] = f32x4(s1)
  let m = (x[0]:f32x4 > 0.0:f32x4)
  store w[0] = select(m, f32x4(bitcast.f16x4(h[0]:i16x4)), -1.0:f32x4)
  return 0
}
`

func TestVectorRoundTripAndRun(t *testing.T) {
	m, err := Parse(vectorKernel)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.String(); got != vectorKernel {
		t.Fatalf("round trip differs:\n%s\nwant\n%s", got, vectorKernel)
	}
	if p := m.Kernels[0].Body.Stmts[1].(*Prefetch); !p.L1 || m.Kernels[0].Body.Stmts[0].(*Prefetch).L1 {
		t.Fatalf("prefetch_l1 parsed as L1 %v, prefetch as L1 %v", p.L1, m.Kernels[0].Body.Stmts[0].(*Prefetch).L1)
	}
	if m.Kernels[0].Level != "neon" {
		t.Fatalf("level %q", m.Kernels[0].Level)
	}
	x := []float32{1, -2, 3, 4, 5, 6, -7, 8}
	y := []float32{0.5, 1, 2, 3, 4, 5, 6, 7}
	// f16 bits of 1.5, -0.25, 65504, a NaN.
	h := []uint16{0x3e00, 0xb400, 0x7bff, 0x7e01}
	o, w := make([]float32, 4), make([]float32, 4)
	st, err := Run(m, "v_dot", map[string]any{"x": x, "y": y, "h": h, "o": o, "w": w})
	if err != nil || st != 0 {
		t.Fatalf("status %d, %v", st, err)
	}
	var want float32
	for i := range x {
		want += x[i] * y[i]
	}
	for i, g := range o {
		if g != want {
			t.Errorf("o[%d] = %v, want %v", i, g, want)
		}
	}
	wantW := []float32{1.5, -1, 65504, float32(math.NaN())}
	for i := range w {
		if g := w[i]; g != wantW[i] && !(math.IsNaN(float64(g)) && math.IsNaN(float64(wantW[i]))) {
			t.Errorf("w[%d] = %v, want %v", i, g, wantW[i])
		}
	}
}

func TestVectorTypes(t *testing.T) {
	for _, tc := range []struct {
		t     Type
		name  string
		lanes int
		bits  int
	}{{Vec(F32, 16), "f32x16", 16, 512}, {Vec(I16, 8), "i16x8", 8, 128}, {Vec(Bool, 4), "boolx4", 4, 4}, {F32, "f32", 1, 32}} {
		if tc.t.String() != tc.name || tc.t.Lanes() != tc.lanes || tc.t.Bits() != tc.bits {
			t.Errorf("%s: lanes %d bits %d", tc.t, tc.t.Lanes(), tc.t.Bits())
		}
		if back, ok := TypeByName(tc.name); !ok || back != tc.t {
			t.Errorf("TypeByName(%s) = %s, %v", tc.name, back, ok)
		}
	}
	for _, bad := range []string{"f32x3", "f32x128", "f32x", "x4", "voidx4", "f32x04"} {
		if _, ok := TypeByName(bad); ok {
			t.Errorf("TypeByName(%s) accepted", bad)
		}
	}
}

func TestVectorVerifyErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"let a = shuffle(x[0]:f32x4, x[0]:f32x4, [0, 8])", "shuffle mask lane 8"},
		{"let a = shuffle(x[0]:f32x4, x[0]:f32x4, [0, 1, 2])", "power of two"},
		{"let a = f32x8(x[0]:f32x4)", "changes the lane count"},
		{"let a = select((x[0]:f32x4 > 0.0:f32x4), x[0]:f32x8, x[0]:f32x8)", "want bool or boolx8"},
		{"let a = muladd(x[0]:f32x4, x[0]:f32x4, 1.0:f32)", "want one float type"},
		{"let a = bitcast.i16x4(x[0]:f32x4)", "changes width"},
		{"let a = (x[0]:f32x4 + x[0])", "type mismatch"},
	} {
		src := "module m prefix m\nkernel k role decode (x: f32* [8]) {\n  " + tc.body + "\n  return 0\n}\n"
		_, err := Parse(src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.body, err, tc.want)
		}
	}
}

// TestBitcastRegroup runs bitcasts that change the lane count: bf16
// elements read in adjacent pairs as i32 lanes (the first in the low
// half, as vdpbf16ps takes them), and i32 lanes cut back into i16 ones
// (signed), into bytes, and a pair into a scalar.
func TestBitcastRegroup(t *testing.T) {
	src := `module m prefix m

kernel k role decode (h: bf16* [4], o: i32* [2] out, w: i16* [4] out, b: i8* [8] out, s: i32* [1] out) {
  let p = bitcast.i32x2(h[0]:bf16x4)
  store o[0] = p
  store w[0] = bitcast.i16x4(p)
  store b[0] = bitcast.i8x8(p)
  store s[0] = bitcast.i32(h[2]:bf16x2)
  return 0
}
`
	m, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	h := []uint16{0x3f80, 0xc000, 0x0001, 0xff80}
	o, w, b, sc := make([]int32, 2), make([]int16, 4), make([]byte, 8), make([]int32, 1)
	if st, err := Run(m, "k", map[string]any{"h": h, "o": o, "w": w, "b": b, "s": sc}); err != nil || st != 0 {
		t.Fatalf("status %d, %v", st, err)
	}
	if want := []int32{-0x40000000 + 0x3f80, -0x00800000 + 0x0001}; !slices.Equal(o, want) {
		t.Errorf("i32 pairs %#x, want %#x", o, want)
	}
	if want := []int16{0x3f80, -0x4000, 0x0001, -0x0080}; !slices.Equal(w, want) {
		t.Errorf("i16 lanes %#x, want %#x", w, want)
	}
	if want := []byte{0x80, 0x3f, 0x00, 0xc0, 0x01, 0x00, 0x80, 0xff}; !slices.Equal(b, want) {
		t.Errorf("bytes %#x, want %#x", b, want)
	}
	if want := int32(-0x00800000 + 0x0001); sc[0] != want {
		t.Errorf("scalar from a pair %#x, want %#x", sc[0], want)
	}
}

// TestDotBF16 parses, prints and runs dotbf16: lane i is (z + xh·yh) +
// xl·yl with exact products (2^64 · 2^127 is no infinity: added to -inf
// it gives -inf, not NaN, as vdpbf16ps does), denormal bf16 inputs and z
// read as zero and denormal sums flushed to zeros of their sign; operands
// of other types are refused.
func TestDotBF16(t *testing.T) {
	const src = `module d prefix d

kernel d role decode (x: i32* [4], y: i32* [4], z: f32* [4], o: f32* [4] out) {
  store o[0] = dotbf16(x[0]:i32x4, y[0]:i32x4, z[0]:f32x4)
  return 0
}
`
	m, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.String(); got != src {
		t.Fatalf("round trip differs:\n%s\nwant\n%s", got, src)
	}
	pair := func(hi, lo uint16) int32 { return int32(uint32(hi)<<16 | uint32(lo)) }
	const one, two, big, inf, neg, den = 0x3F80, 0x4000, 0x7F00, 0x7F80, 0xBF80, 0x0001 // 1, 2, 2^127, inf, -1, 2^-133
	x := []int32{pair(one, two), pair(inf, 0x5F80), pair(den, one), pair(0x0080, 0x8000)}
	y := []int32{pair(two, two), pair(neg, big), pair(big, 0x0040), pair(0x3F00, 0x0000)}
	z := []float32{0.5, 1, math.Float32frombits(0x00000001), 0}
	o := make([]float32, 4)
	if st, err := Run(m, "d", map[string]any{"x": x, "y": y, "z": z, "o": o}); err != nil || st != 0 {
		t.Fatalf("status %d, %v", st, err)
	}
	want := []float32{
		6.5,                   // (0.5 + 1·2) + 2·2
		float32(math.Inf(-1)), // (1 + inf·-1) + 2^64·2^127
		0,                     // den·2^127 reads 0; 1·(0x0040, denormal) reads 0; z denormal reads 0
		0,                     // 2^-126·0.5 = 2^-127 is denormal: flushed
	}
	for i := range want {
		if math.Float32bits(o[i]) != math.Float32bits(want[i]) {
			t.Errorf("lane %d: %v (%#08x), want %v", i, o[i], math.Float32bits(o[i]), want[i])
		}
	}
	for _, body := range []string{
		"let a = dotbf16(x[0]:f32x4, x[0]:f32x4, x[0]:f32x4)",
		"let a = dotbf16(bitcast.i32x4(x[0]:f32x4), bitcast.i32x4(x[0]:f32x4), x[0]:f32x8)",
	} {
		src := "module m prefix m\nkernel k role decode (x: f32* [8]) {\n  " + body + "\n  return 0\n}\n"
		if _, err := Parse(src); err == nil || !strings.Contains(err.Error(), "dotbf16 of") {
			t.Errorf("%s: error %v, want a dotbf16 type error", body, err)
		}
	}
}
