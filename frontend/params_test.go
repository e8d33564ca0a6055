package frontend

import (
	"reflect"
	"testing"

	"github.com/attnc/attnc/ir"
)

// TestParams checks the param lines and reads the checker builds: shapes
// with literal, head, batch and runtime dims; reads with one index per
// dimension; an i32 read used as a bool is `!= 0`.
func TestParams(t *testing.T) {
	src := `variant p {
  heads qo = 4, kv = 2
  head_dim 64
  param doc i32[batch, max_len]
  param slopes f32[qo_heads]
  param keep i32[kv_heads, 3, max_len]
  mask expr(kv_pos <= q_pos && doc[batch, q_pos] == doc[batch, kv_pos] && !keep[head / 2, 1, kv_pos])
  score score - slopes[head] * (q_pos - kv_pos)
}
`
	vs, err := Parse("p.attn", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	v := vs[0]
	want := []*ir.ParamDecl{
		{Name: "doc", T: ir.I32, Dims: []ir.ParamDim{{Name: "batch"}, {Name: "max_len"}}, Pos: ir.Pos{File: "p.attn", Line: 4, Col: 3}},
		{Name: "slopes", T: ir.F32, Dims: []ir.ParamDim{{Name: "qo_heads"}}, Pos: ir.Pos{File: "p.attn", Line: 5, Col: 3}},
		{Name: "keep", T: ir.I32, Dims: []ir.ParamDim{{Name: "kv_heads"}, {Size: 3}, {Name: "max_len"}}, Pos: ir.Pos{File: "p.attn", Line: 6, Col: 3}},
	}
	if !reflect.DeepEqual(v.Params, want) {
		t.Errorf("params %+v, want %+v", v.Params, want)
	}
	if got := v.ParamDimNames(); !reflect.DeepEqual(got, []string{"max_len"}) {
		t.Errorf("runtime dims %v, want [max_len]", got)
	}
	head, batch := ir.R("head", ir.I32), ir.R("batch", ir.I32)
	doc := func(i ir.Expr) ir.Expr { return &ir.ParamRead{Name: "doc", Index: []ir.Expr{batch, i}, T: ir.I32} }
	keep := &ir.ParamRead{Name: "keep", Index: []ir.Expr{ir.Bin(ir.Div, head, ir.Int(2)), ir.Int(1), kvPos}, T: ir.I32}
	wantMask := ir.Bin(ir.And, ir.Bin(ir.And, ir.Bin(ir.Le, kvPos, qPos), ir.Bin(ir.Eq, doc(qPos), doc(kvPos))),
		ir.Un(ir.Not, ir.Bin(ir.Ne, keep, ir.Int(0))))
	if got := v.Masks[0].Expr; ir.ExprString(got) != ir.ExprString(wantMask) {
		t.Errorf("mask %s, want %s", ir.ExprString(got), ir.ExprString(wantMask))
	}
	slopes := &ir.ParamRead{Name: "slopes", Index: []ir.Expr{head}, T: ir.F32}
	wantScore := ir.Bin(ir.Sub, score, ir.Bin(ir.Mul, slopes, &ir.Convert{To: ir.F32, X: ir.Bin(ir.Sub, qPos, kvPos)}))
	if got := v.Score; ir.ExprString(got) != ir.ExprString(wantScore) {
		t.Errorf("score %s, want %s", ir.ExprString(got), ir.ExprString(wantScore))
	}
}
