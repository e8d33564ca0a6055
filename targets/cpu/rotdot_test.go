package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

// rotDotText is decode's Q·Kᵀ under inline RoPE as the lowering writes it
// with Tiling.DecodeRopeInDot: f16 K rows read in place at row offsets (a
// scattered order) and turned as read by the tables' angles (HALF pairs,
// rotate-half or with PAIRS interleaved, the dims past 2·HALF as they
// are), a GQA group of 4 rows at head dim 128 against up to 64 positions.
const rotDotText = `module t prefix t

kernel t_d_%s role decode level "%s" (q: f32* [512], k: f16* [8192], cs: f32* [4096], sn: f32* [4096], s: f32* [256] out, n: i32) {
  for item in 0 .. 1 parallel @work {
    alloc qs: f32[512]
    alloc sc: f32[256]
    alloc koff: i64[64]
    alloc jc: f32[4096]
    alloc js: f32[4096]
    for i in 0 .. 512 spread {
      store qs[i] = q[i]
    }
    for i in 0 .. 4096 spread {
      store jc[i] = cs[i]
      store js[i] = sn[i]
    }
    for kt in 0 .. 1 serial @kv_tile {
      for j in 0 .. 64 spread {
        store koff[j] = (i64(((j * 37) %% 64)) * 128:i64)
      }
      matmul sc[4, 64] = qs[4, 128] * k^T[64, 128] rows(koff) rot(jc, js, %d%s) extent(4, n, 128)
      for r in 0 .. 4 spread {
        for j in 0 .. 64 spread {
          if (j < n) {
            store s[((r * 64) + j)] = sc[((r * 64) + j)]
          }
        }
      }
    }
  }
  return 0
}
`

// rotDotTile is the tile scheduled at level, or as parsed (the
// interpreter's own ir.RotB) for level "".
func rotDotTile(t *testing.T, level string, half int, pairs ir.RopePairs) *ir.Module {
	t.Helper()
	opt := ""
	if pairs != ir.RopeHalf {
		opt = ", " + pairs.String()
	}
	m, err := ir.Parse(fmt.Sprintf(rotDotText, strings.ReplaceAll(level, "-", "_"), level, half, opt))
	if err != nil {
		t.Fatal(err)
	}
	ir.MustVerify("parse", m)
	if level == "" {
		return m
	}
	mc, err := NewMachine("")
	if err != nil {
		t.Fatal(err)
	}
	return scheduleTile(t, mc, m, level)
}

// TestRotDotKeepsResults schedules the tile at the x86-64 levels (4, 8
// and 16 lanes) with rotate-half and interleaved pairs whose rotated dims
// are whole vectors (rotDotKernel's dot blocks) and some that are not
// (lower-tiles' loops), or leaves the matmul
// to the interpreter's ir.RotB, runs it in the interpreter and checks every score against the float64 dot product of
// the query row with the key row turned in float64: within the rounding
// of the f32 turn (3 roundings on each element) and the f32 sum. A block
// that reads a wrong half, a wrong table row or another key's angles
// misses by far more; an unturned key fails too (the angles are large).
func TestRotDotKeepsResults(t *testing.T) {
	rng := rand.New(rand.NewSource(17))
	const il = ir.RopeInterleaved
	for _, tc := range []struct {
		level  string
		half   int
		pairs  ir.RopePairs
		blocks bool // rotDotKernel's dot blocks, not lower-tiles' loops
	}{
		{"x86-64", 64, 0, true}, {"x86-64-v3", 64, 0, true}, {"x86-64-v4", 64, 0, true},
		{"x86-64-v4", 32, 0, true}, {"x86-64-v4", 8, 0, false}, {"x86-64-v3", 12, 0, false}, {"", 64, 0, false},
		{"x86-64", 64, il, true}, {"x86-64-v3", 64, il, true}, {"x86-64-v4", 64, il, true},
		{"x86-64-v4", 32, il, true}, {"x86-64-v4", 8, il, true}, {"x86-64-v4", 4, il, false},
		{"x86-64-v3", 6, il, false}, {"x86-64", 2, il, true}, {"", 64, il, false}, {"", 24, il, false},
	} {
		name := fmt.Sprintf("%s half %d %s", tc.level, tc.half, tc.pairs)
		after := rotDotTile(t, tc.level, tc.half, tc.pairs)
		text := after.String()
		if got := strings.Contains(text, "db_cos0"); got != tc.blocks {
			t.Errorf("%s: turned in dot blocks: %v, want %v", name, got, tc.blocks)
		}
		if strings.Contains(text, "matmul ") != (tc.level == "") {
			t.Errorf("%s: a matmul is left after the schedule", name)
		}
		q, k := make([]float32, 512), make([]uint16, 8192)
		cs, sn := make([]float32, 4096), make([]float32, 4096)
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
		for i := range k {
			k[i] = f16BitsOf(rng.NormFloat64())
		}
		for i := range cs {
			a := rng.Float64() * 2 * math.Pi
			cs[i], sn[i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
		for _, n := range []int{64, 37} {
			args := map[string]any{"q": q, "k": k, "cs": cs, "sn": sn, "s": make([]float32, 256), "n": int32(n)}
			if st, err := ir.Run(after, after.Kernels[0].Name, args); err != nil || st != 0 {
				t.Fatalf("%s: status %d, %v", name, st, err)
			}
			s := args["s"].([]float32)
			for r := range 4 {
				for j := range n {
					row := (j * 37) % 64
					kv := func(d int) float64 { return f16ValueOf(k[row*128+d]) }
					var exact, mag float64
					for d := range 128 {
						x := kv(d)
						if d < 2*tc.half {
							i, sign, pair := d%tc.half, -1.0, d+tc.half
							if d >= tc.half {
								sign, pair = 1, d-tc.half
							}
							if tc.pairs == il {
								i, sign, pair = d/2, -1.0, d+1
								if d%2 == 1 {
									sign, pair = 1, d-1
								}
							}
							c, s := float64(cs[j*tc.half+i]), float64(sn[j*tc.half+i])
							x = x*c + sign*kv(pair)*s
							mag += math.Abs(float64(q[r*128+d])) * (math.Abs(kv(d)*c) + math.Abs(kv(pair)*s))
						} else {
							mag += math.Abs(float64(q[r*128+d]) * x)
						}
						exact += float64(q[r*128+d]) * x
					}
					bound := (128 + 3) * 0x1p-24 * mag
					// Written as !(err <= bound), so that a NaN score fails.
					if got := float64(s[r*64+j]); !(math.Abs(got-exact) <= bound) {
						t.Errorf("%s, n %d: score[%d, %d] = %g, exact %g (bound %g)", name, n, r, j, got, exact, bound)
					}
				}
			}
		}
	}
}
