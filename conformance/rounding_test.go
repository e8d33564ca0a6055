package conformance

import (
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/reference"
)

// misround is a pass, run before legalize-dtype, that changes how every
// f32 value stored to o is converted to the storage half type: bits maps
// the f32 value's bits before the (round-to-nearest-even) conversion.
func misround(name string, bits func(dt ir.Type, u ir.Expr) ir.Expr) passes.Pass {
	return passes.Pass{Name: name, Desc: "test mutation of o's conversion", Run: func(m *ir.Module) (*ir.Module, error) {
		out := *m
		out.Kernels = nil
		for _, k := range m.Kernels {
			nk := *k
			nk.Body = ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
				st, ok := s.(*ir.Store)
				if !ok || st.Buf != "o" {
					return []ir.Stmt{s}
				}
				c, ok := st.Value.(*ir.Convert)
				if !ok || (c.To != ir.F16 && c.To != ir.BF16) {
					return []ir.Stmt{s}
				}
				x := &ir.Bitcast{To: ir.F32, X: bits(c.To, &ir.Bitcast{To: ir.I32, X: c.X})}
				return []ir.Stmt{&ir.Store{Buf: st.Buf, Index: st.Index, Value: ir.Cvt(c.To, x)}}
			})
			out.Kernels = append(out.Kernels, &nk)
		}
		return &out, nil
	}}
}

// dropped is how many low f32 mantissa bits the storage type lacks.
func dropped(dt ir.Type) int64 {
	if dt == ir.BF16 {
		return 16
	}
	return 13
}

// withPass is the pass table base with p inserted before legalize-dtype.
func withPass(base []passes.Pass, p passes.Pass) []passes.Pass {
	var table []passes.Pass
	for _, q := range base {
		if q.Name == "legalize-dtype" {
			table = append(table, p)
		}
		table = append(table, q)
	}
	return table
}

// TestHalfComparisonCatchesMisrounding builds f16 and bf16 kernels whose
// final conversion of o is broken on purpose — truncated toward zero (the
// f32 bits the half type lacks cleared first) or one ulp up (one half ulp
// added to the bits first) — and checks that the conformance comparison
// (half an ulp plus reference.HalfAllowance) fails them, while the
// unbroken kernels pass. Both mutations are one or two ulps off, well
// inside the relative tolerances used before (2e-3 f16, 1e-2 bf16). The
// libraries clone the CPU level this machine runs only (hostLevelTable):
// the comparison is the subject, not the levels, and the conversion of o
// is the same pass whatever the level.
func TestHalfComparisonCatchesMisrounding(t *testing.T) {
	t.Parallel()
	needTools(t)
	host, err := hostLevelTable()
	if err != nil {
		t.Fatal(err)
	}
	mutations := []struct {
		name  string
		pass  *passes.Pass
		fails bool
	}{
		{"round to nearest even", nil, false},
		{"truncate", func() *passes.Pass {
			p := misround("truncate-o", func(dt ir.Type, u ir.Expr) ir.Expr {
				return ir.Bin(ir.And, u, ir.Int(^(int64(1)<<dropped(dt) - 1)))
			})
			return &p
		}(), true},
		{"one ulp up", func() *passes.Pass {
			p := misround("ulp-up-o", func(dt ir.Type, u ir.Expr) ir.Expr {
				return ir.Bin(ir.Add, u, ir.Int(int64(1)<<dropped(dt)))
			})
			return &p
		}(), true},
	}
	for _, src := range []string{
		`variant round_f16 { heads qo = 4, kv = 2
		  head_dim 64
		  dtype f16
		  cache paged(page_size = 16) }`,
		`variant round_bf16 { heads qo = 4, kv = 2
		  head_dim 64
		  dtype bf16
		  cache paged(page_size = 8)
		  mask window(left = 20) }`,
	} {
		v := spec(t, src)
		for _, mu := range mutations {
			table := host
			if mu.pass != nil {
				table = withPass(host, *mu.pass)
			}
			s, err := BuildWith(v, t.TempDir(), Options{Passes: table})
			if err != nil {
				t.Fatalf("%s %s: %v", v.Name, mu.name, err)
			}
			for i, c := range []reference.CaseSpec{Matrix(v)[1], DecodeMatrix(v)[0]} {
				role := ir.RolePrefill
				if i == 1 {
					role = ir.RoleDecode
				}
				r := s.RunAttention(role, c, 5, 2)
				if r.Pass == mu.fails {
					t.Errorf("%s, %s: pass = %v, want %v: %s", v.Name, mu.name, r.Pass, !mu.fails, r)
				}
				t.Logf("%s, %s: %s", v.Name, mu.name, r)
			}
			s.Lib.Close()
		}
	}
}
