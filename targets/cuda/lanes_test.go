package cuda_test

import (
	"strings"
	"testing"

	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/internal/plantest"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets/cuda"
	"github.com/attnc/attnc/targets/gpu"
)

// laneTarget is the CUDA target (assembly) scheduled by the GPU layer
// alone — no tensor cores, no swizzle — with the given layer, on KV tiles
// of 64 positions, so that a reduce over a tile gives every lane of a
// 64-lane warp a part.
type laneTarget struct {
	cuda.Target
	layer *gpu.Layer
}

func (t laneTarget) Tiling(v *ir.Variant) lower.Tiling {
	tl := t.Target.Tiling(v)
	tl.KVTile = 64
	return tl
}

// Constraints are the rules of its table: the neutral ones and the
// layer's (the table builder checks them, and CUDA's name passes this
// table does not have).
func (t laneTarget) Constraints() []passes.Constraint {
	return append(append([]passes.Constraint(nil), passes.NeutralConstraints...), gpu.Constraints...)
}

func (t laneTarget) Passes() []passes.Pass {
	l := t.layer
	return []passes.Pass{
		passes.InlineDefsPass, passes.SimplifyPass, passes.ClassifyTilesPass, passes.ExpandCallsPass,
		{Name: "simt-matmul", Required: true, Run: gpu.SIMTMatMul},
		{Name: "stage-codes", Run: gpu.StageCodes},
		{Name: "widen-copies", Run: gpu.WidenCopies},
		{Name: "pipeline-kv", Run: l.PipelineKV},
		{Name: "map-warps", Required: true, Run: l.MapWarps},
		{Name: "stage-shared", Required: true, Run: gpu.StageShared},
		{Name: "map-threads", Required: true, Run: l.MapThreads},
		passes.LegalizeDTypePass, passes.LateSimplifyPass,
	}
}

// TestInterpretLaneWidth64 schedules small variants with the GPU layer at
// 32 and at 64 lanes (AMD's wavefront) and runs both in the IR
// interpreter against the float64 reference: warps of 64 lanes — lanes
// loops to 64, lane-strided reductions, six butterfly shuffles (mask 32
// the first), warp phases over two warps of a 128-thread block — give the
// same results. The 64-lane module read as a 32-lane one must fail.
func TestInterpretLaneWidth64(t *testing.T) {
	for _, src := range []string{
		`variant lw_f16 { heads qo = 4, kv = 2
		  head_dim 16
		  dtype f16
		  cache paged(page_size = 4)
		  mask causal }`,
		`variant lw_f32 { heads qo = 2, kv = 1
		  head_dim 8
		  dtype f32
		  cache paged(page_size = 8, layout = NHD)
		  mask window(left = 9)
		  sinks tokens(2) }`,
	} {
		vs, err := frontend.Parse("lanes.attn", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		v := vs[0]
		t.Run(v.Name, func(t *testing.T) {
			for _, lanes := range []int{32, 64} {
				l := &gpu.Layer{Lanes: lanes, BlockThreads: 128}
				tg := laneTarget{layer: l}
				if err := passes.CheckOrder(tg.Passes(), tg.Constraints()); err != nil {
					t.Fatal(err)
				}
				c, err := driver.Compile(v, tg, driver.Options{Passes: passes.Options{VerifyEach: true}})
				if err != nil {
					t.Fatal(err)
				}
				if got := c.Final.LaneWidth(); got != lanes {
					t.Fatalf("%d lanes: the module's lane width is %d", lanes, got)
				}
				text := c.Final.String()
				if lanes == 64 && !strings.Contains(text, "shfl_xor(") || strings.Contains(text, "mma.") {
					t.Fatalf("%d lanes: no shuffles, or a tensor-core op, in the schedule", lanes)
				}
				if wide := strings.Contains(text, ", 32)"); wide != (lanes == 64) {
					t.Errorf("%d lanes: a shuffle with mask 32 present: %v", lanes, wide)
				}
				for _, b := range plantest.RunPlans(v, c.Final) {
					t.Errorf("%d lanes: %s", lanes, b)
				}
				if lanes == 64 {
					narrow := *c.Final
					narrow.SetLaneWidth(32)
					if len(plantest.RunPlans(v, &narrow)) == 0 {
						t.Errorf("the 64-lane schedule still runs as 32 lanes")
					}
				}
			}
		})
	}
}

// TestLayerRejects checks that a layer whose warps do not divide its
// block, or of a lane count no GPU has, schedules nothing.
func TestLayerRejects(t *testing.T) {
	m := &ir.Module{Name: "m", Prefix: "m"}
	for _, l := range []*gpu.Layer{{Lanes: 48, BlockThreads: 96}, {Lanes: 64, BlockThreads: 96}, {Lanes: 128, BlockThreads: 128}} {
		if _, err := l.MapThreads(m); err == nil {
			t.Errorf("%d lanes, %d threads: no error", l.Lanes, l.BlockThreads)
		}
	}
}
