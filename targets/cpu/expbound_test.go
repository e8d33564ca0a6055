package cpu

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// expBoundSrc is a tile row's softmax the way prefill lowers it: a max
// reduce over the row, the new max, and the loop that writes the weights;
// BETWEEN is put between the max and the loop, IDX is the loop's index.
const expBoundSrc = `module e prefix e

kernel e_k role prefill level "x86-64" (x: f32* [n], mx: f32* [4], o: f32* [64] out, n: i32) {
  alloc sc: f32[64]
  for row in 0 .. 4 serial {
    for j in 0 .. 16 serial {
      store sc[((row * 16) + j)] = x[((row * 16) + j)]
    }
    let kv_n = min(16, n)
    reduce m_tile = max over j in 0 .. 16 of select((j < kv_n), sc[((row * 16) + j)], -inf:f32)
    let m_old = mx[row]
    let m_new = max(m_old, m_tile)
BETWEEN
    for j in 0 .. 16 spread {
      if (j < kv_n) {
        let s_j = sc[IDX]
        store sc[IDX] = select((s_j == -inf:f32), -0.0:f32, exp((s_j - m_new)))
      } else {
        store sc[((row * 16) + j)] = 0.0:f32
      }
    }
    for j in 0 .. 16 serial {
      store o[((row * 16) + j)] = sc[((row * 16) + j)]
    }
  }
  return 0
}
`

func expBoundModule(t *testing.T, between, idx string) *ir.Module {
	t.Helper()
	src := strings.NewReplacer("BETWEEN", between, "IDX", idx).Replace(expBoundSrc)
	m, err := ir.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestExpBound checks that exp-bound writes the softmax's exp(s - m) as
// exp(min(s - m, 0)) where the max reduce covers the elements the loop
// reads, and leaves it where it does not: a store to the row, an
// assignment or a different index between them, and that the rewritten
// kernel computes the same weights bit for bit (the interpreter, then
// vector-exp's polynomials) on rows holding ±inf, NaN, -0, equal and
// widely spread scores, with the old max above and below the row's.
func TestExpBound(t *testing.T) {
	bounded := "exp(min((s_j - m_new), 0.0:f32))"
	for _, c := range []struct {
		between, idx string
		want         bool
	}{
		{"", "((row * 16) + j)", true},
		{"    let z = 1", "(j + (row * 16))", true},
		{"    store sc[(row * 16)] = 5.0:f32", "((row * 16) + j)", false},
		{"    var w = 0\n    w = 1", "((row * 16) + j)", false},
		{"", "((row * 16) + (j / 2))", false},
		{"", "(((row + 1) * 16) + j)", false},
		{"", "j", false},
	} {
		m := expBoundModule(t, c.between, c.idx)
		after, err := defaultMachine.ExpBound(m)
		if err != nil {
			t.Fatal(err)
		}
		ir.MustVerify("exp-bound", after)
		if got := strings.Contains(after.String(), bounded); got != c.want {
			t.Errorf("between %q, index %s: bounded %v, want %v:\n%s", c.between, c.idx, got, c.want, after)
		}
	}

	x, maxes := expBoundInputs()
	for _, mxs := range maxes {
		for _, n := range []int32{16, 11} {
			var outs [][]float32
			for _, bound := range []bool{false, true} {
				m := expBoundModule(t, "", "((row * 16) + j)")
				var err error
				if bound {
					if m, err = defaultMachine.ExpBound(m); err != nil {
						t.Fatal(err)
					}
				}
				for _, run := range []func(*ir.Module) *ir.Module{
					func(m *ir.Module) *ir.Module { return m },
					func(m *ir.Module) *ir.Module {
						v, err := VectorExp(m)
						if err != nil {
							t.Fatal(err)
						}
						return v
					},
				} {
					o := make([]float32, 64)
					if st, err := ir.Run(run(m), "e_k", map[string]any{"x": x, "mx": mxs, "o": o, "n": n}); err != nil || st != 0 {
						t.Fatalf("status %d, %v", st, err)
					}
					outs = append(outs, o)
				}
			}
			sameBounded(t, outs, len(x), func(i int) string { return fmt.Sprintf("max %v, n %d, x[%d] = %v", mxs, n, i, x[i]) })
		}
	}
}

// TestExpBoundKeepsResults lowers f32 prefill (prefillCases: GQA over
// pages of 4, and with -long MHA and pages of 32) and decode (decodeCases: f32, f16, bf16 and 8-bit caches, with
// its loop per phase), runs the CPU pass table with and without
// exp-bound, and interprets every level's prefill or decode kernel on the
// same paged inputs: o and lse bit for bit the same, and the bounded exp
// in every level's kernel.
func TestExpBoundKeepsResults(t *testing.T) {
	bounded := regexp.MustCompile(`vexp[0-9]+_hi = select\(\(vexp[0-9]+_x > 0\.0:f32\)`)
	// outputs interprets every level's work kernel of role (named
	// prefix...) with and without exp-bound on args() each: the bounded
	// exp is in exactly the second set.
	outputs := func(what string, v *ir.Variant, role ir.Role, prefix string, args func() map[string]any) [2]map[string]map[string]any {
		t.Helper()
		return passOutputs(t, what, "exp-bound", v, role, prefix, args, func(k *ir.Kernel, with bool) {
			if got := bounded.MatchString(k.String()); got != with {
				t.Fatalf("%s, %s: the bounded exp is there: %v", what, k.Name, got)
			}
		})
	}
	for _, c := range prefillCases() {
		v := &ir.Variant{Name: "t", QOHeads: c.qo, KVHeads: c.kv, HeadDimQK: 32, HeadDimV: 32, DType: ir.DTF32, KVDType: ir.DTF32,
			PageSize: c.ps, Scale: 0.25, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: []ir.KernelRef{{Role: ir.RolePrefill}}}
		what := fmt.Sprintf("%d/%d heads, page %d", c.qo, c.kv, c.ps)
		outs := outputs(what, v, ir.RolePrefill, "t_prefill_work", func() map[string]any { return directPrefillArgs(v) })
		sameOutputs(t, "exp-bound", outs, len(outs[0]), "without exp-bound", "with it")
	}
	for _, c := range decodeCases {
		v := decodeVariant(c)
		outs := outputs("decode "+c.name(), v, ir.RoleDecode, "t_decode_work", func() map[string]any { return stagedDecodeArgs(v, nil) })
		sameOutputs(t, "exp-bound decode "+c.name(), outs, len(outs[0]), "without exp-bound", "with it")
	}
}

// expBoundRowsSrc is a tile's softmax the way decode lowers it (a loop
// per phase over the rows, lower's Tiling.DecodePhases): the max loop
// stores each row's new max in alpha[row], the exp loop reads it back.
// INSIDE goes into the max loop before its store, BETWEEN between the
// loops; KIND is the max loop's kind, GUARD2 the exp loop's guard, RHI2
// its rows' end and AIDX the index it reads alpha at.
const expBoundRowsSrc = `module e prefix e

kernel e_k role decode level "x86-64" (x: f32* [n], mx: f32* [4], o: f32* [64] out, n: i32, nr: i32) {
  alloc sc: f32[64]
  alloc alpha: f32[4]
  for row in 0 .. 4 serial {
    for j in 0 .. 16 serial {
      store sc[((row * 16) + j)] = x[((row * 16) + j)]
    }
  }
  let kv_n = min(16, n)
  for row in 0 .. 4 KIND {
    if (row < nr) {
      reduce m_tile = max over j in 0 .. 16 of select((j < kv_n), sc[((row * 16) + j)], -inf:f32)
      let m_old = mx[row]
      let m_new = max(m_old, m_tile)
INSIDE
      store alpha[row] = m_new
    }
  }
BETWEEN
  for row in 0 .. RHI2 spread {
    if GUARD2 {
      let m_new = alpha[AIDX]
      for j in 0 .. 16 spread {
        if (j < kv_n) {
          let s_j = sc[((row * 16) + j)]
          store sc[((row * 16) + j)] = select((s_j == -inf:f32), -0.0:f32, exp((s_j - m_new)))
        } else {
          store sc[((row * 16) + j)] = 0.0:f32
        }
      }
    }
  }
  for row in 0 .. 4 serial {
    for j in 0 .. 16 serial {
      store o[((row * 16) + j)] = sc[((row * 16) + j)]
    }
  }
  return 0
}
`

// rowsShape is what expBoundRowsSrc's placeholders become.
type rowsShape struct{ inside, between, kind, guard2, rhi2, aidx string }

func (s rowsShape) module(t *testing.T) *ir.Module {
	t.Helper()
	or := func(x, def string) string {
		if x == "" {
			return def
		}
		return x
	}
	src := strings.NewReplacer("INSIDE", s.inside, "BETWEEN", s.between, "KIND", or(s.kind, "spread"),
		"GUARD2", or(s.guard2, "(row < nr)"), "RHI2", or(s.rhi2, "4"), "AIDX", or(s.aidx, "row")).Replace(expBoundRowsSrc)
	m, err := ir.Parse(src)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return m
}

// TestExpBoundRows checks exp-bound on decode's shape, the max reaching
// the exp loop through alpha[row]: it bounds the exp when the max loop
// writes alpha[row] once per row and nothing writes alpha or the scores
// before the exp loop reads it back over the same rows under the same
// guard, and refuses when any of that does not hold: alpha or the scores
// written between the loops or in the max loop, an assignment between
// them, a max loop that may skip a row's store (continue), another guard, row range or alpha index in the exp loop, a
// guard that loads. Then it runs the bounded and unbounded kernels (the
// interpreter, then vector-exp's polynomials) on rows holding ±inf, NaN,
// -0, equal and widely spread scores, the old max above and below the
// row's, all rows or three: the same weights bit for bit (NaN for NaN).
func TestExpBoundRows(t *testing.T) {
	bounded := "exp(min((s_j - m_new), 0.0:f32))"
	for _, c := range []struct {
		s    rowsShape
		want bool
	}{
		{rowsShape{}, true},
		{rowsShape{between: "  let z = 1"}, true},
		{rowsShape{inside: "      let z = m_new"}, true},
		{rowsShape{kind: "serial"}, true},
		{rowsShape{between: "  store alpha[0] = -100.0:f32"}, false},
		{rowsShape{between: "  store sc[17] = 100.0:f32"}, false},
		{rowsShape{between: "  var w = 0\n  w = 1"}, false},
		{rowsShape{inside: "      store alpha[0] = -100.0:f32"}, false},
		{rowsShape{inside: "      store sc[(row * 16)] = 100.0:f32"}, false},
		{rowsShape{inside: "      store sc[(((row + 1) % 4) * 16)] = 100.0:f32"}, false},
		{rowsShape{inside: "      if (row == 2) {\n        continue\n      }", kind: "serial"}, false},
		{rowsShape{guard2: "(row < 4)"}, false},
		{rowsShape{rhi2: "3", guard2: "(row < nr)"}, false},
		{rowsShape{aidx: "0"}, false},
		{rowsShape{aidx: "((row + 1) % 4)"}, false},
	} {
		m := c.s.module(t)
		after, err := defaultMachine.ExpBound(m)
		if err != nil {
			t.Fatal(err)
		}
		ir.MustVerify("exp-bound", after)
		if got := strings.Contains(after.String(), bounded); got != c.want {
			t.Errorf("%+v: bounded %v, want %v:\n%s", c.s, got, c.want, after)
		}
	}
	// A guard that loads may change between the loops.
	m := rowsShape{}.module(t)
	src := strings.ReplaceAll(m.String(), "(row < nr)", "(x[row] < 100.0:f32)")
	if lm, err := ir.Parse(src); err != nil {
		t.Fatal(err)
	} else if after, err := defaultMachine.ExpBound(lm); err != nil {
		t.Fatal(err)
	} else if strings.Contains(after.String(), bounded) {
		t.Errorf("a guard that loads: bounded:\n%s", after)
	}

	x, maxes := expBoundInputs()
	for _, mxs := range maxes {
		for _, n := range []int32{16, 11} {
			for _, nr := range []int32{4, 3} {
				var outs [][]float32
				for _, bound := range []bool{false, true} {
					m := rowsShape{}.module(t)
					if bound {
						var err error
						if m, err = defaultMachine.ExpBound(m); err != nil {
							t.Fatal(err)
						}
						if !strings.Contains(m.String(), bounded) {
							t.Fatalf("not bounded:\n%s", m)
						}
					}
					for _, vec := range []bool{false, true} {
						run := m
						if vec {
							var err error
							if run, err = VectorExp(m); err != nil {
								t.Fatal(err)
							}
						}
						o := make([]float32, 64)
						if st, err := ir.Run(run, "e_k", map[string]any{"x": x, "mx": mxs, "o": o, "n": n, "nr": nr}); err != nil || st != 0 {
							t.Fatalf("status %d, %v", st, err)
						}
						outs = append(outs, o)
					}
				}
				sameBounded(t, outs, len(x), func(i int) string {
					return fmt.Sprintf("max %v, n %d, rows %d, x[%d] = %v", mxs, n, nr, i, x[i])
				})
			}
		}
	}
}

// sameBounded compares the first n elements of outs — exact exp and
// polynomial exp without exp-bound, then the same two with it — bit for
// bit (a NaN only needs to stay NaN); where names element i.
func sameBounded(t *testing.T, outs [][]float32, n int, where func(i int) string) {
	t.Helper()
	for i := range n {
		for _, p := range [][2]int{{0, 2}, {1, 3}} {
			a, b := outs[p[0]][i], outs[p[1]][i]
			if math.Float32bits(a) != math.Float32bits(b) && !(a != a && b != b) {
				t.Errorf("%s: %v unbounded, %v bounded", where(i), a, b)
			}
		}
	}
}

// expBoundInputs are the interpreter tests' scores (4 rows of 16: ±0,
// values around exp's underflow, ±inf, NaN, a row of -inf) and the old
// maxes they run under (-inf, below and above the rows' own).
func expBoundInputs() (x []float32, maxes [][]float32) {
	inf, nan, nz := float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1))
	x = []float32{
		0, nz, 0, nz, -1, 2, 3, -100, -87.3, -87.4, -88, 1e-30, -1e-30, 0.5, 0.25, 0,
		1, 2, inf, 3, -inf, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf,
		1, nan, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, -200,
	}
	return x, [][]float32{{-inf, -inf, -inf, -inf}, {5, 5, 5, 5}, {-3, 1e30, 0, nz}}
}

// withoutPass is table less the passes named name.
func withoutPass(table []passes.Pass, name string) []passes.Pass {
	var out []passes.Pass
	for _, p := range table {
		if p.Name != name {
			out = append(out, p)
		}
	}
	return out
}
