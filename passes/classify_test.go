package passes

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

// tileKernel is a miniature attention tile walk: out[q][kv] = 1 where the
// mask shows kv to q, count[0] = tiles whose body ran.
const tileKernel = `module t prefix t
def mask(q_pos: i32, kv_pos: i32, head: i32, batch: i32): bool = %s

kernel t_k role prefill (out: i32* [n], count: i32* [1], nq: i32, nk: i32) {
  for qt in 0 .. ((nq + 3) / 4) serial {
    let q_lo = (qt * 4)
    let q_hi = (min((q_lo + 4), nq) - 1)
    for kt in 0 .. ((nk + 3) / 4) serial @kv_tile [kv_pos = (kt * 4) .. (min(((kt * 4) + 4), nk) - 1), q_pos = q_lo .. q_hi, head = 0 .. 0, b = 0 .. 0] {
      store count[0] = (count[0] + 1)
      for qi in q_lo .. (q_hi + 1) serial {
        for kj in (kt * 4) .. min(((kt * 4) + 4), nk) serial {
          let q_pos = qi
          let kv_pos = kj
          var s = 1
          if not(@mask.bool(q_pos, kv_pos, 0, 0)) @mask {
            s = 0
          }
          store out[((qi * nk) + kj)] = s
        }
      }
    }
  }
  return 0
}
`

// TestClassifyTilesPreservesResults runs the tile walk in the interpreter
// before and after classify-tiles for several masks and shapes: results
// must be identical, and masks with hidden regions must skip tiles.
func TestClassifyTilesPreservesResults(t *testing.T) {
	cases := []struct {
		name, mask string
		skips      bool
	}{
		{"causal", "(kv_pos <= q_pos)", true},
		{"window", "((kv_pos <= q_pos) & ((q_pos - kv_pos) <= 5))", true},
		{"none", "true", false},
		{"chunked", "((kv_pos <= q_pos) & ((q_pos / 8) == (kv_pos / 8)))", true},
		{"abs-min-max", "((abs((q_pos - kv_pos)) <= 6) & (min(q_pos, 9) >= max(kv_pos, 2)))", true},
		{"neq", "((q_pos != kv_pos) | (kv_pos < 3))", false},
		{"unbounded", "((kv_pos * kv_pos) <= q_pos)", false},
	}
	for _, c := range cases {
		m, err := ir.Parse(fmt.Sprintf(tileKernel, c.mask))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		base, _ := InlineDefs(m)
		base, _ = Simplify(base)
		opt, err := ClassifyTiles(base)
		if err != nil {
			t.Fatal(err)
		}
		opt, _ = Simplify(opt)
		ir.MustVerify("classify-tiles", opt)
		for _, shape := range [][2]int{{13, 21}, {4, 4}, {1, 9}, {17, 17}} {
			nq, nk := shape[0], shape[1]
			run := func(m *ir.Module) ([]int32, int32) {
				out, count := make([]int32, nq*nk), make([]int32, 1)
				if _, err := ir.Run(m, "t_k", map[string]any{"out": out, "count": count, "nq": int32(nq), "nk": int32(nk)}); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				return out, count[0]
			}
			want, tilesBefore := run(base)
			got, tilesAfter := run(opt)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s %v: out[%d] = %d after classify-tiles, %d before", c.name, shape, i, got[i], want[i])
				}
			}
			if tilesAfter > tilesBefore {
				t.Fatalf("%s %v: %d tiles ran after, %d before", c.name, shape, tilesAfter, tilesBefore)
			}
			if shape == [2]int{13, 21} && c.skips != (tilesAfter < tilesBefore) {
				t.Errorf("%s: tiles %d -> %d, want skipping = %v", c.name, tilesBefore, tilesAfter, c.skips)
			}
		}
	}
}

// TestIntervalSoundness checks the interval rules against brute force:
// for random small ranges, `must` holding implies the mask holds at every
// point and `may` failing implies it holds at none.
func TestIntervalSoundness(t *testing.T) {
	masks := []string{
		"(kv_pos <= q_pos)", "((q_pos - kv_pos) < 3)", "((q_pos / 4) == (kv_pos / 4))",
		"((q_pos % 4) == 0)", "(abs((q_pos - kv_pos)) > 2)", "(not((kv_pos >= 5)) | (q_pos == 7))",
		"((((q_pos * 2) - kv_pos) >= (0 - 3)) & (max(q_pos, kv_pos) <= 9))", "((kv_pos * -2) < (q_pos - 4))",
		// i32 wraps (the kernels' and the interpreter's semantics): near
		// 2^31 the i64 bounds no longer describe the values.
		"((kv_pos + 2147483617) >= 0)", "((q_pos * 1073741824) > kv_pos)", "((q_pos - 2147483647) < kv_pos)",
		"(neg(kv_pos) < 5)", "(abs(q_pos) >= 0)", "(((kv_pos + 2147483640) / 2) > q_pos)",
	}
	scope := map[string]ir.Type{"q_pos": ir.I32, "kv_pos": ir.I32}
	analysed := 0
	defer func() {
		if analysed < 7 {
			t.Errorf("only %d of %d masks were analysable", analysed, len(masks))
		}
	}()
	for _, src := range masks {
		e, err := ir.ParseExpr(src, scope)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		env := &ienv{vars: map[string]ival{
			"q_pos":  {lo: ir.R("qa", ir.I32), hi: ir.R("qb", ir.I32), mag: -math.MinInt32},
			"kv_pos": {lo: ir.R("ka", ir.I32), hi: ir.R("kb", ir.I32), mag: -math.MinInt32},
		}}
		bv, ok := boolInterval(e, env)
		if !ok {
			continue // not analysable: ClassifyTiles leaves such loops alone
		}
		analysed++
		for _, base := range []int{0, 1 << 30, math.MaxInt32 - 12, math.MinInt32 + 3} {
			for qa := base - 3; qa <= base+9 && qa <= math.MaxInt32-4; qa += 2 {
				for qb := qa; qb <= qa+4; qb++ {
					for ka := base - 2; ka <= base+10 && ka <= math.MaxInt32-3; ka += 3 {
						for kb := ka; kb <= ka+3; kb++ {
							vals := map[string]any{"qa": int32(qa), "qb": int32(qb), "ka": int32(ka), "kb": int32(kb)}
							for _, s := range env.lets { // the bounds the analysis named
								l := s.(*ir.Let)
								v, err := ir.EvalExpr(l.Value, vals)
								if err != nil {
									t.Fatalf("%s: let %s: %v", src, l.Name, err)
								}
								vals[l.Name] = v
							}
							may, _ := ir.EvalExpr(bv.may, vals)
							must, _ := ir.EvalExpr(bv.must, vals)
							anyTrue, all := false, true
							for q := qa; q <= qb; q++ {
								for k := ka; k <= kb; k++ {
									r, err := ir.EvalExpr(e, map[string]any{"q_pos": int32(q), "kv_pos": int32(k)})
									if err != nil {
										t.Fatal(err)
									}
									anyTrue = anyTrue || r.(bool)
									all = all && r.(bool)
								}
							}
							if must.(bool) && !all || !may.(bool) && anyTrue {
								t.Fatalf("%s on q[%d,%d] kv[%d,%d]: may=%v must=%v, truth any=%v all=%v", src, qa, qb, ka, kb, may, must, anyTrue, all)
							}
						}
					}
				}
			}
		}
	}
}

// hiddenKernel is tileKernel with a @hidden statement: it counts the
// hidden (query, position) pairs it meets, which only partially masked
// tiles hold.
const hiddenKernel = `module t prefix t
def mask(q_pos: i32, kv_pos: i32, head: i32, batch: i32): bool = %s

kernel t_k role prefill (hid: i32* [1], nq: i32, nk: i32) {
  for qt in 0 .. ((nq + 3) / 4) serial {
    let q_lo = (qt * 4)
    let q_hi = (min((q_lo + 4), nq) - 1)
    for kt in 0 .. ((nk + 3) / 4) serial @kv_tile [kv_pos = (kt * 4) .. (min(((kt * 4) + 4), nk) - 1), q_pos = q_lo .. q_hi, head = 0 .. 0, b = 0 .. 0] {
      for qi in q_lo .. (q_hi + 1) serial {
        for kj in (kt * 4) .. min(((kt * 4) + 4), nk) serial {
          let q_pos = qi
          let kv_pos = kj
          var s = 1
          if not(@mask.bool(q_pos, kv_pos, 0, 0)) @mask {
            s = 0
          }
          if (s == 0) @hidden {
            store hid[0] = (hid[0] + 1)
          }
        }
      }
    }
  }
  return 0
}
`

// TestClassifyTilesDropsHidden checks that @hidden statements leave fully
// visible tiles (and tiles whose mask folded away) and stay in partially
// masked ones: after classify-tiles they still see every hidden pair of
// every tile that runs (tiles wholly hidden are skipped).
func TestClassifyTilesDropsHidden(t *testing.T) {
	for _, c := range []struct {
		name, mask   string
		visible      func(q, kv int) bool
		split, keeps bool // a tile_full split; @hidden left anywhere
	}{
		{"causal", "(kv_pos <= q_pos)", func(q, kv int) bool { return kv <= q }, true, true},
		{"none", "true", func(q, kv int) bool { return true }, false, false},
		{"unbounded", "((kv_pos * kv_pos) <= q_pos)", func(q, kv int) bool { return kv*kv <= q }, false, true},
	} {
		m, err := ir.Parse(fmt.Sprintf(hiddenKernel, c.mask))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		base, _ := InlineDefs(m)
		base, _ = Simplify(base)
		opt, err := ClassifyTiles(base)
		if err != nil {
			t.Fatal(err)
		}
		ir.MustVerify("classify-tiles", opt)
		var full, partial *ir.Block
		ir.MapStmts(opt.Kernels[0].Body, func(s ir.Stmt) []ir.Stmt {
			if i, ok := s.(*ir.If); ok && ir.ExprString(i.Cond) == "tile_full" {
				full, partial = i.Then, i.Else
			}
			return []ir.Stmt{s}
		})
		text := opt.String()
		if got := full != nil; got != c.split {
			t.Fatalf("%s: tile_full split = %v, want %v\n%s", c.name, got, c.split, text)
		}
		if full != nil && (strings.Contains(blockText(full), "@hidden") || strings.Contains(blockText(full), "@mask")) {
			t.Errorf("%s: the fully visible copy keeps a @mask or @hidden statement:\n%s", c.name, blockText(full))
		}
		if partial != nil && !strings.Contains(blockText(partial), "@hidden") {
			t.Errorf("%s: the partially masked copy lost its @hidden statement:\n%s", c.name, blockText(partial))
		}
		if got := strings.Contains(text, "@hidden"); got != c.keeps {
			t.Errorf("%s: @hidden left in the module = %v, want %v\n%s", c.name, got, c.keeps, text)
		}
		for _, shape := range [][2]int{{13, 21}, {5, 5}, {30, 30}} {
			nq, nk := shape[0], shape[1]
			want := 0
			for q0 := 0; q0 < nq; q0 += 4 {
				for k0 := 0; k0 < nk; k0 += 4 {
					hidden, shown := 0, false
					for q := q0; q < min(q0+4, nq); q++ {
						for kv := k0; kv < min(k0+4, nk); kv++ {
							if c.visible(q, kv) {
								shown = true
							} else {
								hidden++
							}
						}
					}
					if shown {
						want += hidden
					}
				}
			}
			hid := make([]int32, 1)
			if _, err := ir.Run(opt, "t_k", map[string]any{"hid": hid, "nq": int32(nq), "nk": int32(nk)}); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if int(hid[0]) < want {
				t.Errorf("%s %v: @hidden saw %d hidden pairs in tiles that run, want %d", c.name, shape, hid[0], want)
			}
		}
	}
}

func blockText(b *ir.Block) string {
	m := &ir.Module{Name: "x", Prefix: "x", Kernels: []*ir.Kernel{{Name: "x", Body: b}}}
	return m.String()
}
