package registry

import (
	"reflect"
	"testing"

	"github.com/attnc/attnc/ir"
)

// TestParamConstraints: a variant's params reach the manifest's
// constraints as the spec declares them; a variant without params adds
// nothing.
func TestParamConstraints(t *testing.T) {
	v := &ir.Variant{QOHeads: 4, KVHeads: 2, Params: []*ir.ParamDecl{
		{Name: "doc", T: ir.I32, Dims: []ir.ParamDim{{Name: "batch"}, {Name: "max_len"}}},
		{Name: "tbl", T: ir.F32, Dims: []ir.ParamDim{{Name: "qo_heads"}, {Size: 7}}},
	}}
	want := []string{"doc i32[batch, max_len]", "tbl f32[qo_heads, 7]"}
	if got := Constraints(v)["params"]; !reflect.DeepEqual(got, want) {
		t.Errorf("params %v, want %v", got, want)
	}
	v.Params = nil
	if _, ok := Constraints(v)["params"]; ok {
		t.Error("a variant without params lists params")
	}
}
