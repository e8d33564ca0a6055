package frontend

import (
	"errors"
	"math"
	"os"
	"regexp"
	"testing"

	"github.com/attnc/attnc/ir"
)

// errorPrefix is how every error must start.
var errorPrefix = regexp.MustCompile(`^fuzz\.attn:[1-9][0-9]*:[1-9][0-9]*: \S`)

// FuzzParse checks that Parse never panics, that every error is a located
// *ir.PosError, and that every accepted variant is well-formed.
func FuzzParse(f *testing.F) {
	for _, name := range exampleFiles {
		src, err := os.ReadFile(examplePath(name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	for _, c := range readErrorCases(f) {
		f.Add([]byte(c.src))
	}
	f.Add([]byte("variant x { heads qo = 1\n head_dim 2 }"))
	f.Add([]byte("variant x {\n heads qo = 2\n head_dim 2\n mask expr(!(q_pos % 3 == -kv_pos) || batch > head)\n score -max(score, 1e-3) / abs(q_pos - 2)\n}\n"))
	f.Add([]byte("variant \xff {"))
	f.Add([]byte("variant x {\n heads qo = 2\n head_dim 2\n param d i32[batch, n]\n param w f32[qo_heads, 3]\n mask expr(d[batch, q_pos] == d[batch, kv_pos] && !d[0, 1])\n score score * w[head, kv_pos % 3]\n}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		vs, err := Parse("fuzz.attn", src)
		if err != nil {
			var pe *ir.PosError
			if !errors.As(err, &pe) || !errorPrefix.MatchString(err.Error()) {
				t.Fatalf("bad error %T %q", err, err)
			}
			if vs != nil {
				t.Fatalf("variants returned with an error")
			}
			return
		}
		for _, v := range vs {
			checkVariant(t, v)
		}
	})
}

// checkVariant checks the invariants every accepted variant must hold.
func checkVariant(t *testing.T, v *ir.Variant) {
	if v.QOHeads <= 0 || v.KVHeads <= 0 || v.QOHeads%v.KVHeads != 0 || v.HeadDimQK <= 0 || v.HeadDimV <= 0 {
		t.Fatalf("%s: bad shape %d/%d %d/%d", v.Name, v.QOHeads, v.KVHeads, v.HeadDimQK, v.HeadDimV)
	}
	if !ir.ValidPageSize(v.PageSize) || !(v.Scale > 0) || math.IsInf(v.Scale, 0) || len(v.Masks) == 0 || len(v.Kernels) == 0 {
		t.Fatalf("%s: bad variant %+v", v.Name, v)
	}
	if v.MLA != nil && !v.ScaleExplicit {
		t.Fatalf("%s: mla without scale", v.Name)
	}
	for _, m := range v.Masks {
		if (m.Kind == ir.MaskExpr) != (m.Expr != nil) || m.Expr != nil && m.Expr.Type() != ir.Bool || m.Left < 0 {
			t.Fatalf("%s: bad mask clause %+v", v.Name, m)
		}
	}
	if v.Score != nil && v.Score.Type() != ir.F32 {
		t.Fatalf("%s: score has type %s", v.Name, v.Score.Type())
	}
	checkParams(t, v)
	if v.Sinks != nil && v.Sinks.Kind == ir.SinkTokens && v.Sinks.Tokens < 1 {
		t.Fatalf("%s: bad sinks %+v", v.Name, v.Sinks)
	}
}

// checkParams checks an accepted variant's params: f32 or i32, one to
// MaxParamDims dims each positive or named, every one read, and every
// read naming a declared param with one i32 index per dimension.
func checkParams(t *testing.T, v *ir.Variant) {
	read := map[string]bool{}
	check := func(e ir.Expr) {
		if e == nil {
			return
		}
		ir.VisitExpr(e, func(x ir.Expr) {
			r, ok := x.(*ir.ParamRead)
			if !ok {
				return
			}
			p := v.Param(r.Name)
			if p == nil || len(r.Index) != len(p.Dims) || r.T != p.T {
				t.Fatalf("%s: bad param read %s", v.Name, ir.ExprString(r))
			}
			for _, i := range r.Index {
				if i.Type() != ir.I32 {
					t.Fatalf("%s: param index of type %s", v.Name, i.Type())
				}
			}
			read[r.Name] = true
		})
	}
	for _, m := range v.Masks {
		check(m.Expr)
	}
	check(v.Score)
	for _, p := range v.Params {
		if p.T != ir.F32 && p.T != ir.I32 || len(p.Dims) == 0 || len(p.Dims) > MaxParamDims || !read[p.Name] {
			t.Fatalf("%s: bad param %+v", v.Name, p)
		}
		for _, d := range p.Dims {
			if d.Name == "" && d.Size < 1 {
				t.Fatalf("%s: param %s dim %d", v.Name, p.Name, d.Size)
			}
		}
	}
}
