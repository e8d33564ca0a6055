package hip_test

import (
	"strings"
	"testing"

	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/internal/plantest"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/targets/hip"
)

// TestInterpretHIPSchedule runs small variants' HIP-scheduled work
// kernels — workgroups of 256 work-items meeting at barriers, 64-lane
// wavefront shuffles, MFMA 16x16x16 fragments (f16, bf16; P split into
// parts; the P·V accumulator in registers), LDS — in the IR interpreter against the float64 reference. The
// same schedule with each MFMA's A and B swapped (D += B·A: the wrong
// product, in a layout that still verifies) must fail.
func TestInterpretHIPSchedule(t *testing.T) {
	for _, src := range []string{
		`variant hi_f16 { heads qo = 4, kv = 2
		  head_dim 16
		  dtype f16
		  cache paged(page_size = 4)
		  mask causal }`,
		`variant hi_f32 { heads qo = 2, kv = 1
		  head_dim 8
		  dtype f32
		  cache paged(page_size = 8, layout = NHD)
		  mask window(left = 9)
		  sinks tokens(2) }`,
		`variant hi_bf16_bt { heads qo = 2, kv = 2
		  head_dim 32
		  dtype bf16
		  cache paged(page_size = 2, table = block_table)
		  score softcap(score, 3.0) }`,
	} {
		vs, err := frontend.Parse("interp.attn", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		v := vs[0]
		t.Run(v.Name, func(t *testing.T) {
			c, err := driver.Compile(v, hip.Target{}, driver.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if c.Final.LaneWidth() != 64 {
				t.Fatalf("lane width %d", c.Final.LaneWidth())
			}
			for _, b := range plantest.RunPlans(v, c.Final) {
				t.Error(b)
			}
			text := c.Final.String()
			if v.DType == ir.DTF32 {
				if strings.Contains(text, "mfma.") {
					t.Errorf("an f32 variant on the matrix cores")
				}
				return
			}
			if !strings.Contains(text, "mfma."+v.DType.String()) {
				t.Fatalf("no mfma.%s in the schedule", v.DType)
			}
			if !strings.Contains(text, "_reg: f32[") {
				t.Errorf("the P·V accumulator is not in registers")
			}
			mutant := plantest.Mutate(c.Final, func(s ir.Stmt) []ir.Stmt {
				if m, ok := s.(*ir.MFMA); ok {
					return []ir.Stmt{&ir.MFMA{D: m.D, A: m.B, B: m.A, In: m.In}}
				}
				return []ir.Stmt{s}
			})
			if len(plantest.RunPlans(v, mutant)) == 0 {
				t.Errorf("the schedule with A and B of every MFMA swapped still matches the reference")
			}
		})
	}
}
