package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	llvmgen "github.com/attnc/attnc/codegen/llvm"
	"github.com/attnc/attnc/ir"
)

// prefillTileKernel is a prefill-like KV tile of 40 rows (6-row blocks and
// a tail of 4), 48 positions (3, 6 or 12 vectors: whole and partial column
// blocks) and head dim 32: S = Q·Kᵀ, the row max and sum of the scores, and
// acc += P·V with zeroskip, every extent dynamic. Only the parts inside
// the extents are copied out (C outside them is unspecified).
const prefillTileKernel = `module t prefix t%s

kernel t_k_%s role prefill level "%s" (q: f32* [1280], k: f32* [1536], v: f32* [1536], p: f32* [1920], o: f32* [1280] out, s: f32* [1920] out, mx: f32* [40] out, sm: f32* [40] out, m: i32, n: i32) {
  for item in 0 .. 1 parallel @work {
    alloc qs: f32[1280]
    alloc kb: f32[1536]
    alloc vb: f32[1536]
    alloc sc: f32[1920]
    alloc ps: f32[1920]
    alloc acc: f32[1280]
    for i in 0 .. 1280 spread {
      store qs[i] = q[i]
      store acc[i] = 0.25:f32
    }
    for i in 0 .. 1536 spread {
      store kb[i] = k[i]
      store vb[i] = v[i]
    }
    for i in 0 .. 1920 spread {
      store ps[i] = p[i]
    }
    for kt in 0 .. 1 serial @kv_tile {
      matmul sc[40, 48] = qs[40, 32] * kb^T[48, 32] extent(m, n, 32)
      for r in 0 .. 40 spread {
        if (r < m) {
          reduce mt = max over j in 0 .. 48 of select((j < n), sc[((r * 48) + j)], -inf:f32)
          reduce st = add over j in 0 .. 48 of select((j < n), ps[((r * 48) + j)], 0.0:f32)
          store mx[r] = mt
          store sm[r] = st
          for j in 0 .. 48 spread {
            if (j < n) {
              store s[((r * 48) + j)] = sc[((r * 48) + j)]
            }
          }
        }
      }
      matmul acc[40, 32] += ps[40, 48] * vb[48, 32] zeroskip extent(m, 32, n)
    }
    for r in 0 .. 40 spread {
      if (r < m) {
        for d in 0 .. 32 spread {
          store o[((r * 32) + d)] = acc[((r * 32) + d)]
        }
      }
    }
  }
  return 0
}
`

// levelsUnderTest are every CPU level of both triples.
var levelsUnderTest = []struct{ triple, level string }{
	{"", "x86-64"}, {"", "x86-64-v3"}, {"", "x86-64-v4"}, {"aarch64-unknown-linux-gnu", "neon"},
}

func parseTileKernel(t *testing.T, triple, level string) *ir.Module {
	t.Helper()
	tl := ""
	if triple != "" {
		tl = fmt.Sprintf(" triple %q", triple)
	}
	m, err := ir.Parse(fmt.Sprintf(prefillTileKernel, tl, strings.ReplaceAll(level, "-", "_"), level))
	if err != nil {
		t.Fatal(err)
	}
	ir.MustVerify("parse", m)
	return m
}

// TestBlockMatMulKeepsResults runs the tile in the interpreter as written
// and after vector-reduce, block-matmul, lower-tiles and vectorize, at
// every level, for extents that cut blocks and vectors anywhere: the
// results agree (the maxima exactly, the sums to f32 rounding), and V rows
// that P zeroes — NaN, and infinite — never reach o.
func TestBlockMatMulKeepsResults(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, lv := range levelsUnderTest {
		m := parseTileKernel(t, lv.triple, lv.level)
		after := m
		var err error
		for _, p := range []func(*ir.Module) (*ir.Module, error){VectorReduce, BlockMatMul, LowerTiles, Vectorize} {
			if after, err = p(after); err != nil {
				t.Fatal(err)
			}
			ir.MustVerify(lv.level, after)
		}
		name := m.Kernels[0].Name
		for _, ext := range [][2]int32{{40, 48}, {1, 1}, {7, 17}, {36, 32}, {37, 47}, {40, 5}, {6, 16}, {0, 0}} {
			rows, n := int(ext[0]), int(ext[1])
			q, k, v, p := make([]float32, 1280), make([]float32, 1536), make([]float32, 1536), make([]float32, 1920)
			for i := range q {
				q[i] = rng.Float32() - 0.5
			}
			for i := range k {
				k[i], v[i] = rng.Float32()-0.5, rng.Float32()-0.5
			}
			for r := 0; r < 40; r++ {
				for j := 0; j < 48; j++ {
					if j < n && j%5 != 2 {
						p[r*48+j] = rng.Float32()
					}
				}
			}
			// V rows whose weights are all zero: beyond n (the contract
			// has A = 0 there) and every fifth position below it.
			for j := 0; j < 48; j++ {
				if j >= n || j%5 == 2 {
					for d := 0; d < 32; d++ {
						v[j*32+d] = float32(math.NaN())
						if d%2 == 1 {
							v[j*32+d] = float32(math.Inf(1 - 2*(j%2)))
						}
					}
				}
			}
			args := func() map[string]any {
				return map[string]any{"q": append([]float32(nil), q...), "k": append([]float32(nil), k...),
					"v": append([]float32(nil), v...), "p": append([]float32(nil), p...),
					"o": make([]float32, 1280), "s": make([]float32, 1920), "mx": make([]float32, 40), "sm": make([]float32, 40),
					"m": ext[0], "n": ext[1]}
			}
			want, got := args(), args()
			if st, err := ir.Run(m, name, want); err != nil || st != 0 {
				t.Fatalf("%s: before: status %d, %v", lv.level, st, err)
			}
			if st, err := ir.Run(after, name, got); err != nil || st != 0 {
				t.Fatalf("%s: after: status %d, %v", lv.level, st, err)
			}
			for _, out := range []string{"o", "s", "mx", "sm"} {
				w, g := want[out].([]float32), got[out].([]float32)
				for i := range w {
					wi, gi := float64(w[i]), float64(g[i])
					tol := 1e-5 * math.Max(1, math.Abs(wi))
					if out == "mx" {
						tol = 0
					}
					if math.IsNaN(gi) || math.IsInf(gi, 0) || math.Abs(wi-gi) > tol {
						t.Errorf("%s m=%d n=%d: %s[%d] = %v, want %v", lv.level, rows, n, out, i, gi, wi)
						break
					}
				}
			}
		}
	}
}

// TestBlockMatMulShape checks what block-matmul writes at each level: no
// matmul of the prefill tile is left, the contraction loops hold MR·NR
// multiply-adds of the level's lanes on NR vector loads of B, each load
// feeding at least 6 of them, and Q·Kᵀ packs K once, before its loop.
func TestBlockMatMulShape(t *testing.T) {
	for _, lv := range levelsUnderTest {
		l, err := llvmgen.LookupLevel(lv.triple, lv.level)
		if err != nil {
			t.Fatal(err)
		}
		m, err := BlockMatMul(parseTileKernel(t, lv.triple, lv.level))
		if err != nil {
			t.Fatal(err)
		}
		text := m.String()
		if strings.Contains(text, "matmul") {
			t.Errorf("%s: a matmul is left:\n%s", lv.level, text)
		}
		if !strings.Contains(text, "alloc kb_t: f32[1536]") {
			t.Errorf("%s: no packed K array", lv.level)
		}
		vt := ir.Vec(ir.F32, l.Lanes)
		loops := 0
		ir.MapStmts(m.Kernels[0].Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Var != "bm_k" {
				return []ir.Stmt{s}
			}
			loops++
			fmas, loads := 0, map[string]int{}
			used := map[string]int{}
			for _, st := range f.Body.Stmts {
				switch x := st.(type) {
				case *ir.Let:
					if ld, ok := x.Value.(*ir.Load); ok && ld.T == vt {
						loads[x.Name] = 0
					}
				case *ir.Assign:
					ir.VisitExpr(x.Value, func(e ir.Expr) {
						ma, ok := e.(*ir.MulAdd)
						if !ok {
							return
						}
						if ma.Type() != vt {
							t.Errorf("%s: multiply-add of %s, want %s", lv.level, ma.Type(), vt)
						}
						fmas++
						if r, ok := ma.Y.(*ir.Ref); ok {
							used[r.Name]++
						}
					})
				}
			}
			if len(loads) == 0 || fmas != len(loads)*(fmas/len(loads)) {
				t.Errorf("%s: %d multiply-adds on %d loads", lv.level, fmas, len(loads))
			}
			for name := range loads {
				// The tail block of 4 rows (40 = 6·6 + 4) feeds 4.
				if used[name] < 4 {
					t.Errorf("%s: load %s feeds %d multiply-adds", lv.level, name, used[name])
				}
			}
			return []ir.Stmt{s}
		})
		if loops == 0 {
			t.Errorf("%s: no contraction loop", lv.level)
		}
		sh := microShapeFor(l, 64/l.Lanes)
		if sh.MR < 6 || sh.MR*sh.NR+sh.NR+1 > l.Regs {
			t.Errorf("%s: register block %d×%d vectors for %d registers: want at least 6 rows, within the registers", lv.level, sh.MR, sh.NR, l.Regs)
		}
	}
}
