package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

// tileKernelText is a KV tile of ROWS rows — 40 like prefill's (6-row blocks
// and a tail of 4), or 4 like a decode GQA group's — 48 positions (3, 6 or
// 12 vectors: whole and partial column blocks) and head dim 32: S = Q·Kᵀ,
// the row max and sum of the scores, and acc += P·V with zeroskip, every
// extent dynamic. Only the parts inside the extents are copied out (C
// outside them is unspecified).
const tileKernelText = `module t prefix t

kernel t_k_%s role prefill level "%s" (q: f32* [Q], k: f32* [1536], v: f32* [1536], p: f32* [S], o: f32* [Q] out, s: f32* [S] out, mx: f32* [ROWS] out, sm: f32* [ROWS] out, m: i32, n: i32) {
  for item in 0 .. 1 parallel @work {
    alloc qs: f32[Q]
    alloc kb: f32[1536]
    alloc vb: f32[1536]
    alloc sc: f32[S]
    alloc ps: f32[S]
    alloc acc: f32[Q]
    alloc al: f32[ROWS]
    for i in 0 .. Q spread {
      store qs[i] = q[i]
      store acc[i] = 0.25:f32
    }
    for i in 0 .. 1536 spread {
      store kb[i] = k[i]
      store vb[i] = v[i]
    }
    for i in 0 .. S spread {
      store ps[i] = p[i]
    }
    for kt in 0 .. 1 serial @kv_tile {
      matmul sc[ROWS, 48] = qs[ROWS, 32] * kb^T[48, 32] extent(m, n, 32)
      for r in 0 .. ROWS spread {
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
      for r in 0 .. ROWS spread {
        store al[r] = ((f32(r) * 0.125:f32) + 0.5:f32)
      }
      for r in 0 .. ROWS spread {
        if (r < m) {
          let a = al[r]
          for d in 0 .. 32 spread {
            store acc[((r * 32) + d)] = (acc[((r * 32) + d)] * a)
          }
        }
      }
      matmul acc[ROWS, 32] += ps[ROWS, 48] * vb[48, 32] zeroskip extent(m, 32, n)
    }
    for r in 0 .. ROWS spread {
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

// prefillRows and decodeRows are the row counts of tileKernelText's two uses.
const prefillRows, decodeRows = 40, 4

func parseTileKernel(t *testing.T, level string, rows int) *ir.Module {
	t.Helper()
	return parseTileText(t, tileKernelText, level, rows)
}

// parseTileText is parseTileKernel of a variant of tileKernelText.
func parseTileText(t *testing.T, text, level string, rows int) *ir.Module {
	t.Helper()
	text = strings.NewReplacer("ROWS", fmt.Sprint(rows), "Q]", fmt.Sprint(rows*32, "]"), "Q spread", fmt.Sprint(rows*32, " spread"),
		"S]", fmt.Sprint(rows*48, "]"), "S spread", fmt.Sprint(rows*48, " spread")).Replace(text)
	m, err := ir.Parse(fmt.Sprintf(text, strings.ReplaceAll(level, "-", "_"), level))
	if err != nil {
		t.Fatal(err)
	}
	ir.MustVerify("parse", m)
	return m
}

// TestBlockMatMulKeepsResults runs the tile, with prefill's rows (packed
// K, micro-kernels) and with decode's (dot-product blocks for Q·Kᵀ,
// micro-kernels for P·V), in the interpreter as written and after
// vector-reduce, block-matmul, lower-tiles and vectorize, at every level,
// for extents that cut blocks and vectors anywhere: the results agree to
// f32 rounding (each maximum exactly the largest of its row's scores), and
// V rows that P hides (-0 weights) — NaN, and infinite — never reach o.
func TestBlockMatMulKeepsResults(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	const pv = "      matmul acc[ROWS, 32] += ps[ROWS, 48] * vb[48, 32] zeroskip extent(m, 32, n)\n"
	for _, c := range []struct {
		rows int
		pair bool
	}{{prefillRows, false}, {decodeRows, false}, {decodeRows, true}} {
		rows := c.rows
		for _, lv := range levelsUnderTest {
			mc, err := NewMachine(lv.triple)
			if err != nil {
				t.Fatal(err)
			}
			var m *ir.Module
			if c.pair {
				// A decode tile's P·V as directOr writes it: the same
				// product in both branches of an If (here both read vb).
				if !strings.Contains(tileKernelText, pv) {
					t.Fatal("tileKernelText has no P·V line to pair")
				}
				text := strings.Replace(tileKernelText, pv, "      if (n > 20) {\n  "+pv+"      } else {\n  "+pv+"      }\n", 1)
				m = parseTileText(t, text, lv.level, rows)
			} else {
				m = parseTileKernel(t, lv.level, rows)
			}
			after := m
			for _, p := range []func(*ir.Module) (*ir.Module, error){mc.VectorReduce, mc.BlockMatMul, LowerTiles, Vectorize} {
				if after, err = p(after); err != nil {
					t.Fatal(err)
				}
				ir.MustVerify(lv.level, after)
			}
			if strings.Contains(after.String(), "matmul") {
				t.Errorf("%d rows, %s: a matmul is left for lower-tiles", rows, lv.level)
			}
			if !strings.Contains(m.String(), "* a)") {
				t.Fatal("the tile has no rescale loop")
			}
			if strings.Contains(after.String(), "* a)") {
				t.Errorf("%d rows (if pair: %v), %s: the rescale loop is not folded into P·V", rows, c.pair, lv.level)
			}
			name := m.Kernels[0].Name
			for _, ext := range [][2]int{{40, 48}, {1, 1}, {7, 17}, {36, 32}, {37, 47}, {40, 5}, {6, 16}, {0, 0}, {3, 31}, {2, 33}} {
				mr, n := min(ext[0], rows), ext[1]
				keepResults(t, rng, m, after, name, lv.level, rows, mr, n)
			}
		}
	}
}

// keepResults runs the tile before and after the passes on one set of
// inputs and extents (mr rows, n positions) and compares the outputs.
func keepResults(t *testing.T, rng *rand.Rand, m, after *ir.Module, name, level string, rows, mr, n int) {
	t.Helper()
	q, k, v, p := make([]float32, rows*32), make([]float32, 1536), make([]float32, 1536), make([]float32, rows*48)
	for i := range q {
		q[i] = rng.Float32() - 0.5
	}
	for i := range k {
		k[i], v[i] = rng.Float32()-0.5, rng.Float32()-0.5
	}
	for r := 0; r < rows; r++ {
		for j := 0; j < 48; j++ {
			switch {
			case j < n && (j%5 != 2 || r >= mr) && (j+r)%7 != 3:
				p[r*48+j] = rng.Float32()
			case j < n:
				// A hidden position's weight: in every row below mr at
				// every fifth position (whose V rows are NaN and
				// infinite; the rows from mr on, which are not
				// compared, weight them, so a block of rows across mr
				// mixes both there), and in some rows only at others
				// (finite V rows), so that row blocks mix hidden and
				// visible weights in one column, as a causal diagonal
				// tile does.
				p[r*48+j] = float32(math.Copysign(0, -1))
			}
		}
	}
	// V rows whose weights are all zero: beyond n (the contract has A = 0
	// there) and every fifth position below it, hidden (-0: skipped).
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
			"o": make([]float32, rows*32), "s": make([]float32, rows*48), "mx": make([]float32, rows), "sm": make([]float32, rows),
			"m": int32(mr), "n": int32(n)}
	}
	want, got := args(), args()
	if st, err := ir.Run(m, name, want); err != nil || st != 0 {
		t.Fatalf("%s: before: status %d, %v", level, st, err)
	}
	if st, err := ir.Run(after, name, got); err != nil || st != 0 {
		t.Fatalf("%s: after: status %d, %v", level, st, err)
	}
	// The maxima are exact: each is the largest of the row's scores as
	// this kernel computed them (which may round differently from the
	// interpreter's, in another order of the sums).
	gs, gmx := got["s"].([]float32), got["mx"].([]float32)
	for r := 0; r < mr; r++ {
		top := float32(math.Inf(-1))
		for j := 0; j < n; j++ {
			top = max(top, gs[r*48+j])
		}
		if gmx[r] != top {
			t.Errorf("%d rows, %s m=%d n=%d: mx[%d] = %v, the largest score is %v", rows, level, mr, n, r, gmx[r], top)
		}
	}
	for _, out := range []string{"o", "s", "mx", "sm"} {
		w, g := want[out].([]float32), got[out].([]float32)
		for i := range w {
			wi, gi := float64(w[i]), float64(g[i])
			tol := 1e-5 * math.Max(1, math.Abs(wi))
			if math.IsNaN(gi) || math.IsInf(gi, 0) || math.Abs(wi-gi) > tol {
				t.Errorf("%d rows, %s m=%d n=%d: %s[%d] = %v, want %v", rows, level, mr, n, out, i, gi, wi)
				break
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
		mc, err := NewMachine(lv.triple)
		if err != nil {
			t.Fatal(err)
		}
		tile := parseTileKernel(t, lv.level, prefillRows)
		l, err := mc.Level(tile.Kernels[0])
		if err != nil {
			t.Fatal(err)
		}
		m, err := mc.BlockMatMul(tile)
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
			steps := stepBodies(f.Body.Stmts)
			if len(steps) == 0 {
				t.Errorf("%s: a contraction loop without multiply-adds", lv.level)
			}
			for _, step := range steps {
				checkStep(t, lv.level, vt, step)
			}
			return []ir.Stmt{s}
		})
		if loops == 0 {
			t.Errorf("%s: no contraction loop", lv.level)
		}
		sh := microShapeFor(*l, 64/l.Lanes)
		if sh.MR < 6 || sh.MR*sh.NR+sh.NR+1 > l.Regs {
			t.Errorf("%s: register block %d×%d vectors for %d registers: want at least 6 rows, within the registers", lv.level, sh.MR, sh.NR, l.Regs)
		}
	}
}

// stepBodies is the steps of a contraction loop's body: the body itself,
// or, under splitZeroSkip's column flags, the blocks of its Ifs that
// compute (the step without the selects and the step with them).
func stepBodies(body []ir.Stmt) [][]ir.Stmt {
	var out [][]ir.Stmt
	for _, s := range body {
		if _, ok := s.(*ir.Assign); ok {
			return [][]ir.Stmt{body}
		}
	}
	for _, s := range body {
		if f, ok := s.(*ir.If); ok {
			for _, b := range []*ir.Block{f.Then, f.Else} {
				if b != nil {
					out = append(out, stepBodies(b.Stmts)...)
				}
			}
		}
	}
	return out
}

// checkStep checks one step of a contraction loop: MR·NR multiply-adds of
// vt on NR vector loads of B, each load feeding at least 4 of them.
func checkStep(t *testing.T, level string, vt ir.Type, step []ir.Stmt) {
	t.Helper()
	fmas, loads := 0, map[string]int{}
	used := map[string]int{}
	for _, st := range step {
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
					t.Errorf("%s: multiply-add of %s, want %s", level, ma.Type(), vt)
				}
				fmas++
				if r, ok := ma.Y.(*ir.Ref); ok {
					used[r.Name]++
				}
			})
		}
	}
	if len(loads) == 0 || fmas != len(loads)*(fmas/len(loads)) {
		t.Errorf("%s: %d multiply-adds on %d loads", level, fmas, len(loads))
	}
	for name := range loads {
		// The tail block of 4 rows (40 = 6·6 + 4) feeds 4.
		if used[name] < 4 {
			t.Errorf("%s: load %s feeds %d multiply-adds", level, name, used[name])
		}
	}
}

// TestRowBlocks checks the row blocks of the micro-kernels: every row in
// exactly one block, at most mr rows each, the fewest blocks, and sizes
// differing by at most one (no block of a row or two after full ones).
func TestRowBlocks(t *testing.T) {
	for m := 1; m <= 200; m++ {
		for _, mr := range []int{1, 2, 4, 6, 8} {
			segs := rowBlocks(m, mr)
			at, blocks, lo, hi := 0, 0, mr, 0
			for _, sg := range segs {
				if sg.at != at || sg.mr < 1 || sg.mr > mr || sg.rows%sg.mr != 0 && len(segs) > 1 {
					t.Fatalf("rowBlocks(%d, %d) = %v", m, mr, segs)
				}
				at += sg.rows
				blocks += (sg.rows + sg.mr - 1) / sg.mr
				lo, hi = min(lo, min(sg.mr, sg.rows)), max(hi, sg.mr)
			}
			if at != m || blocks != (m+mr-1)/mr || hi-lo > 1 {
				t.Errorf("rowBlocks(%d, %d) = %v: %d rows in %d blocks of %d..%d", m, mr, segs, at, blocks, lo, hi)
			}
		}
	}
}
