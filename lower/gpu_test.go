package lower

import (
	"testing"

	"github.com/attnc/attnc/ir"
)

func TestLowerGPUVerifies(t *testing.T) {
	for _, dt := range []ir.DType{ir.DTF32, ir.DTF16, ir.DTBF16} {
		v := testVariant()
		v.DType = dt
		gm, err := LowerGPU(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := ir.Verify(gm.Module); err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		if len(gm.Launchers) != 3 {
			t.Fatalf("launchers: %d", len(gm.Launchers))
		}
	}
}
