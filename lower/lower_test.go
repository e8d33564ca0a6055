package lower

import (
	"testing"

	"github.com/attnc/attnc/ir"
)

func testVariant() *ir.Variant {
	return &ir.Variant{Name: "t", QOHeads: 4, KVHeads: 2, HeadDimQK: 8, HeadDimV: 8, DType: ir.DTF32,
		PageSize: 4, Scale: 0.35, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}},
		Kernels: []ir.KernelRef{{Role: ir.RolePrefill}, {Role: ir.RoleDecode}, {Role: ir.RoleMergeState}}}
}

func TestLowerPrints(t *testing.T) {
	m, err := Lower(testVariant())
	if err != nil {
		t.Fatal(err)
	}
	t.Log(m.String())
}
