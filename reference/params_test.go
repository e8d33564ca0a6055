package reference

import (
	"testing"

	"github.com/attnc/attnc/ir"
)

// TestEvalParams: a param read gives the row-major element inside the
// shape and 0 outside it (so two reads outside compare equal), for i32
// and f32 params.
func TestEvalParams(t *testing.T) {
	qPos, kvPos, batch := ir.R("q_pos", ir.I32), ir.R("kv_pos", ir.I32), ir.R("batch", ir.I32)
	doc := func(i ir.Expr) ir.Expr { return &ir.ParamRead{Name: "doc", Index: []ir.Expr{batch, i}, T: ir.I32} }
	same := ir.Bin(ir.Eq, doc(qPos), doc(kvPos))
	w := &ir.ParamRead{Name: "w", Index: []ir.Expr{ir.Bin(ir.Sub, qPos, kvPos)}, T: ir.F32}
	env := func(q, kv, b int64) *Env {
		return &Env{QPos: q, KVPos: kv, Batch: b, Params: map[string]*ParamValue{
			// doc [2, 4]: row 0 = 0 0 1 1, row 1 = 5 6 6 7
			"doc": {Dims: []int64{2, 4}, Data: []float64{0, 0, 1, 1, 5, 6, 6, 7}},
			"w":   {Dims: []int64{3}, Data: []float64{0.5, -1.25, 2}},
		}}
	}
	for _, c := range []struct {
		q, kv, b int64
		same     bool
		w        float64
	}{
		{1, 0, 0, true, -1.25},
		{2, 1, 0, false, -1.25},
		{3, 2, 0, true, -1.25},
		{2, 1, 1, true, -1.25},
		{3, 2, 1, false, -1.25},
		{2, 2, 1, true, 0.5},
		{6, 5, 0, true, -1.25}, // both past max_len: 0 == 0
		{5, 2, 0, false, 0},    // doc[0, 5] = 0 != doc[0, 2] = 1; w[3] outside
		{1, 3, 1, false, 0},    // w[-2] outside
		{1, 0, 2, true, -1.25}, // batch 2 outside: 0 == 0
	} {
		e := env(c.q, c.kv, c.b)
		if got := EvalBool(same, e); got != c.same {
			t.Errorf("q %d kv %d b %d: doc equal %v, want %v", c.q, c.kv, c.b, got, c.same)
		}
		if got := EvalFloat(w, e); got != c.w {
			t.Errorf("q %d kv %d: w %v, want %v", c.q, c.kv, got, c.w)
		}
	}
	// Without a case (Visible), every param is empty: 0 at every index.
	if got := EvalFloat(w, &Env{QPos: 1}); got != 0 {
		t.Errorf("w without params %v, want 0", got)
	}
}
