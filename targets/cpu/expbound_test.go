package cpu

import (
	"math"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
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

	inf, nan, nz := float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1))
	x := []float32{
		0, nz, 0, nz, -1, 2, 3, -100, -87.3, -87.4, -88, 1e-30, -1e-30, 0.5, 0.25, 0,
		1, 2, inf, 3, -inf, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf,
		1, nan, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, -200,
	}
	for _, mxs := range [][]float32{{-inf, -inf, -inf, -inf}, {5, 5, 5, 5}, {-3, 1e30, 0, nz}} {
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
			// outs: exact, polynomial; then the same bounded.
			for i := range x {
				for _, p := range [][2]int{{0, 2}, {1, 3}} {
					a, b := outs[p[0]][i], outs[p[1]][i]
					if math.Float32bits(a) != math.Float32bits(b) && !(a != a && b != b) {
						t.Errorf("max %v, n %d, x[%d] = %v: %v unbounded, %v bounded", mxs, n, i, x[i], a, b)
					}
				}
			}
		}
	}
}

// TestExpBoundKeepsResults lowers f32 prefill (GQA and MHA, pages of 4
// and 32), runs the CPU pass table with and without exp-bound, and
// interprets every level's prefill kernel on the same paged inputs: o and
// lse bit for bit the same, and the bounded exp in every level's kernel.
func TestExpBoundKeepsResults(t *testing.T) {
	without := func(table []passes.Pass) []passes.Pass {
		var out []passes.Pass
		for _, p := range table {
			if p.Name != "exp-bound" {
				out = append(out, p)
			}
		}
		return out
	}
	for _, c := range []struct{ qo, kv, ps int }{{8, 2, 4}, {4, 4, 4}, {8, 2, 32}} {
		v := &ir.Variant{Name: "t", QOHeads: c.qo, KVHeads: c.kv, HeadDimQK: 32, HeadDimV: 32, DType: ir.DTF32, KVDType: ir.DTF32,
			PageSize: c.ps, Scale: 0.25, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: []ir.KernelRef{{Role: ir.RolePrefill}}}
		var outs [2]map[string]map[string]any
		for i, table := range [][]passes.Pass{without(Table), Table} {
			m, err := lower.Lower(v, Target{}.Tiling(v))
			if err != nil {
				t.Fatal(err)
			}
			if m, err = passes.RunTable(table, m, passes.Options{VerifyEach: true}); err != nil {
				t.Fatal(err)
			}
			outs[i] = map[string]map[string]any{}
			for _, k := range m.Kernels {
				if k.Role != ir.RolePrefill || !strings.HasPrefix(k.Name, "t_prefill_work") || k.Level == "" {
					continue
				}
				if got := strings.Contains(k.String(), "vexp0_hi = select((vexp0_x > 0.0:f32)"); got != (i == 1) {
					t.Fatalf("%d/%d heads, page %d, %s: the bounded exp is there: %v", c.qo, c.kv, c.ps, k.Name, got)
				}
				args := directPrefillArgs(v)
				if st, err := ir.Run(m, k.Name, args); err != nil || st != 0 {
					t.Fatalf("%s: status %d, %v", k.Name, st, err)
				}
				outs[i][k.Name] = args
			}
		}
		sameOutputs(t, "exp-bound", outs, len(outs[0]), "without exp-bound", "with it")
	}
}
