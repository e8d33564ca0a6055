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
	if v.Sinks != nil && v.Sinks.Kind == ir.SinkTokens && v.Sinks.Tokens < 1 {
		t.Fatalf("%s: bad sinks %+v", v.Name, v.Sinks)
	}
}
