package cpu

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

// narrowQKText is prefill's Q·Kᵀ over a bf16 cache at x86-64-amx on one
// 64 × 64 tile (K = 32: one tile step): Q and K staged into f32 arrays,
// the scores copied out. EXTRA is a statement the tests put in the tile.
const narrowQKText = `module t prefix t

kernel t_k role prefill level "x86-64-amx" (q: bf16* [2048], k: bf16* [2048], s: f32* [4096] out, m: i32, n: i32) {
  for item in 0 .. 1 parallel @work {
    alloc qs: f32[2048]
    alloc kb: f32[2048]
    alloc sc: f32[4096]
    for i in 0 .. 2048 spread {
      if (i < (m * 32)) {
        store qs[i] = f32(q[i])
      } else {
        store qs[i] = 0.0:f32
      }
    }
    for kt in 0 .. 1 serial @kv_tile {
      for i in 0 .. 2048 spread {
        if (i < (n * 32)) {
          store kb[i] = f32(k[i])
        } else {
          store kb[i] = 0.0:f32
        }
      }
      matmul sc[64, 64] = qs[64, 32] * kb^T[64, 32] extent(m, n, 32)
      EXTRA
      for r in 0 .. 64 spread {
        if (r < m) {
          for j in 0 .. 64 spread {
            if (j < n) {
              store s[((r * 64) + j)] = sc[((r * 64) + j)]
            }
          }
        }
      }
    }
  }
  return 0
}
`

// scheduleNarrowQK parses narrowQKText with extra in the tile and runs
// block-matmul, lower-tiles and vectorize at x86-64-amx.
func scheduleNarrowQK(t *testing.T, extra string) *ir.Module {
	t.Helper()
	return scheduleText(t, strings.Replace(narrowQKText, "EXTRA", extra, 1), "x86-64-amx")
}

// TestNarrowTilesShape: at x86-64-amx the staged K tile of a Q·Kᵀ on the
// tiles and the staged bf16 V tile of a split P·V are declared bf16 and
// staged without widening (zeros as bf16 zeros); the staged Q (its pairs
// packed once, outside the tile loop) stays f32, as does a K tile that
// something besides the product reads, a V tile of f16 values, and V at
// x86-64-v4-bf16 (split products there only with splitPVDot, and no
// narrowing).
func TestNarrowTilesShape(t *testing.T) {
	text := scheduleNarrowQK(t, "").String()
	for _, want := range []string{"alloc kb: bf16[2048]", "alloc qs: f32[2048]", "store kb[i] = k[i]", "store kb[i] = 0.0:bf16",
		"bitcast.i32x16(kb[", "call rt.amx_mm32("} {
		if !strings.Contains(text, want) {
			t.Errorf("Q·Kᵀ: no %q in:\n%s", want, text)
		}
	}
	if text := scheduleNarrowQK(t, "store s[0] = kb[0]").String(); !strings.Contains(text, "alloc kb: f32[2048]") {
		t.Errorf("Q·Kᵀ with K also read elsewhere: K narrowed:\n%s", text)
	}
	for _, c := range []struct {
		vt, level string
		rows      int
		want      string
	}{
		{"bf16", "x86-64-amx", 64, "alloc vb: bf16[2048]"},
		{"f16", "x86-64-amx", 64, "alloc vb: f32[2048]"},
		{"bf16", bf16Level, prefillRows, "alloc vb: f32[2048]"},
	} {
		if _, after := splitPVTile(t, c.vt, c.level, c.rows); !strings.Contains(after.String(), c.want) {
			t.Errorf("P·V over %s at %s: no %q in:\n%s", c.vt, c.level, c.want, after)
		}
	}
}

// TestNarrowQKKeepsResults runs the narrowed Q·Kᵀ in the interpreter
// (rt.amx_mm32 as TDPBF16PS computes it: denormal inputs flushed) on
// random bf16 Q and K and with a denormal K element at an even and at an
// odd position of a row (a pair's low and high half; the other rows'
// elements there 0) against a Q element of 2^126 there, where flushing
// would move the score far off: each score
// within (K+2)·2^-24·Σ|q·k| of the exact dot product, every extent.
func TestNarrowQKKeepsResults(t *testing.T) {
	m := scheduleNarrowQK(t, "")
	rng := rand.New(rand.NewSource(3))
	for _, tc := range []struct {
		name string
		at   int // the K element made denormal (-1: none)
	}{{"random", -1}, {"denormal low half", 6}, {"denormal high half", 7}} {
		for _, ext := range [][2]int{{64, 64}, {37, 50}, {1, 1}} {
			mr, n := ext[0], ext[1]
			q, k := make([]uint16, 2048), make([]uint16, 2048)
			for i := range q {
				q[i], k[i] = bf16Bits(float32(rng.NormFloat64())), bf16Bits(float32(rng.NormFloat64()))
			}
			if tc.at >= 0 {
				for r := range 64 {
					q[r*32+tc.at] = bf16Bits(0x1p126)
					k[r*32+tc.at] = 0
				}
				k[(n-1)*32+tc.at] = bf16Bits(float32(math.Ldexp(float64(1+rng.Intn(127)), -133)))
			}
			args := map[string]any{"q": q, "k": k, "s": make([]float32, 4096), "m": int32(mr), "n": int32(n)}
			if st, err := ir.Run(m, "t_k", args); err != nil || st != 0 {
				t.Fatalf("%s: status %d, %v", tc.name, st, err)
			}
			s := args["s"].([]float32)
			for r := range mr {
				for j := range n {
					exact, mag := 0.0, 0.0
					for d := range 32 {
						p := bf16Value(q[r*32+d]) * bf16Value(k[j*32+d])
						exact, mag = exact+p, mag+math.Abs(p)
					}
					if g := float64(s[r*64+j]); math.Abs(g-exact) > 34*0x1p-24*mag {
						t.Fatalf("%s m=%d n=%d: s[%d, %d] = %v, exact %v", tc.name, mr, n, r, j, g, exact)
					}
				}
			}
		}
	}
}
