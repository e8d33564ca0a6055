package ir

import (
	"math"
	"math/rand"
	"strings"
	"testing"
)

// mfmaSrc multiplies a 16 x 16 A by a 16 x 16 B (f16 bits, row-major)
// into C with one MFMA per 64-lane warp: lane l (j = l%16, g = l/16)
// packs A[j][4g..4g+3] and B[4g..4g+3][j] and gets D[4g+r][j] in d[r].
const mfmaSrc = `module g prefix g lanes 64

kernel g_mfma role prefill (a: f16* [256], b: f16* [256], c: f32* [256] out) {
  for item in 0 .. 1 parallel @work {
    for t in 0 .. 64 threads {
      let j = (t % 16)
      let g = (t / 16)
      alloc fa: i32[2]
      alloc fb: i32[2]
      alloc fd: f32[4]
      for r in 0 .. 2 serial {
        store fa[r] = ((i32(bitcast.i16(a[((j * 16) + ((g * 4) + (r * 2)))])) & 65535) | (i32(bitcast.i16(a[((j * 16) + (((g * 4) + (r * 2)) + 1))])) << 16))
        store fb[r] = ((i32(bitcast.i16(b[((((g * 4) + (r * 2)) * 16) + j)])) & 65535) | (i32(bitcast.i16(b[(((((g * 4) + (r * 2)) + 1) * 16) + j)])) << 16))
      }
      for r in 0 .. 4 serial {
        store fd[r] = 0.0:f32
      }
      mfma.f16 fd, fa, fb
      for r in 0 .. 4 serial {
        store c[((((g * 4) + r) * 16) + j)] = fd[r]
      }
    }
  }
  return 0
}
`

func TestMFMARoundTrip(t *testing.T) {
	m, err := Parse(mfmaSrc)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.String(); got != mfmaSrc {
		t.Errorf("round trip differs:\n%s", got)
	}
	if err := Verify(m); err != nil {
		t.Fatal(err)
	}
}

func f16Bits(x float64) uint16 {
	// Exact for the small integers and halves the test uses.
	b := math.Float32bits(float32(x))
	if x == 0 {
		return uint16(b >> 16)
	}
	sign := uint16(b>>16) & 0x8000
	e := int(b>>23&0xff) - 127 + 15
	return sign | uint16(e)<<10 | uint16(b>>13&0x3ff)
}

// The interpreter's MFMA is the 16x16x16 product in AMD's layout: C = A·B
// for random small-integer tiles, exactly; the same kernel with A's
// registers packed NVIDIA's way (k pairs, not runs of four) must not match.
func TestMFMAProduct(t *testing.T) {
	m, err := Parse(mfmaSrc)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(3))
	av, bv := make([]float64, 256), make([]float64, 256)
	a, b := make([]uint16, 256), make([]uint16, 256)
	for i := range a {
		av[i], bv[i] = float64(r.Intn(9)-4)/2, float64(r.Intn(9)-4)
		a[i], b[i] = f16Bits(av[i]), f16Bits(bv[i])
	}
	run := func(m *Module) []float32 {
		c := make([]float32, 256)
		if _, err := Run(m, "g_mfma", map[string]any{"a": a, "b": b, "c": c}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	wrong := func(c []float32) int {
		n := 0
		for i := 0; i < 16; i++ {
			for j := 0; j < 16; j++ {
				var want float64
				for k := 0; k < 16; k++ {
					want += av[16*i+k] * bv[16*k+j]
				}
				if float64(c[16*i+j]) != want {
					n++
				}
			}
		}
		return n
	}
	if n := wrong(run(m)); n != 0 {
		t.Errorf("%d of 256 products wrong", n)
	}
	// A alone read with NVIDIA's k pairs (2g, 2g+1 and 2g+8, 2g+9).
	lines := strings.Split(mfmaSrc, "\n")
	for i, l := range lines {
		if strings.Contains(l, "store fa[r]") {
			lines[i] = strings.ReplaceAll(l, "((g * 4) + (r * 2))", "((g * 2) + (r * 8))")
		}
	}
	nv, err := Parse(strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if wrong(run(nv)) == 0 {
		t.Errorf("NVIDIA-style fragments give the right product: the layout is not checked")
	}
}

func TestMFMAErrors(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"prefix g lanes 64", "prefix g", "laid out over 64 lanes"},
		{"mfma.f16 fd, fa, fb", "mfma.f32 fd, fa, fb", "not a matrix-core dtype"},
		{"alloc fa: i32[2]", "alloc fa: i32[1]", "at least 2 elements"},
		{"mfma.f16 fd, fa, fb", "mfma.f16 fa, fd, fb", "want a local f32 array"},
	} {
		src := strings.Replace(mfmaSrc, c.from, c.to, 1)
		if c.from == "prefix g lanes 64" {
			src = strings.Replace(src, "0 .. 64 threads", "0 .. 32 threads", 1)
		}
		m, err := Parse(src)
		if err == nil {
			err = Verify(m)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.to, err, c.want)
		}
	}
}
