package ir_test

import (
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/targets"
	_ "github.com/attnc/attnc/targets/cpu"
	_ "github.com/attnc/attnc/targets/cuda"
)

// TestLoweredRoundTrip prints, parses and reprints real lowered modules
// (prefill, decode, merge_state, prefill_ragged; without RoPE, and with
// RoPE from a table and from factors, whose turns are computed in f64),
// before and after every pass of every target's table, and verifies each.
func TestLoweredRoundTrip(t *testing.T) {
	for _, rope := range []*ir.Rope{nil,
		{Style: ir.RopeTable, RotaryDim: 32, Pairs: ir.RopeInterleaved, Params: map[string]float64{}},
		{Style: ir.RopeFactors, Theta: 10000, Params: map[string]float64{"theta": 10000, "attn_factor": 1.19}},
	} {
		roundTripLowered(t, rope)
	}
}

func roundTripLowered(t *testing.T, rope *ir.Rope) {
	v := &ir.Variant{Name: "rt", QOHeads: 8, KVHeads: 2, HeadDimQK: 64, HeadDimV: 64, DType: ir.DTBF16,
		PageSize: 16, Scale: 0.125, Masks: []ir.MaskClause{{Kind: ir.MaskWindow, Left: 20}},
		Sinks:   &ir.Sinks{Kind: ir.SinkTokens, Tokens: 4},
		Score:   &ir.Call{Fn: "softcap", Args: []ir.Expr{ir.R("score", ir.F32), ir.Float(30)}, T: ir.F32},
		Rope:    rope,
		Kernels: []ir.KernelRef{{Role: ir.RolePrefill}, {Role: ir.RoleDecode}, {Role: ir.RoleMergeState}, {Role: ir.RolePrefillRagged}}}
	check := func(stage string, m *ir.Module) {
		if err := ir.Verify(m); err != nil {
			t.Fatalf("%s: verify: %v", stage, err)
		}
		text := m.String()
		back, err := ir.Parse(text)
		if err != nil {
			t.Fatalf("%s: parse: %v", stage, err)
		}
		if got := back.String(); got != text {
			t.Fatalf("%s: round trip differs:\n%s", stage, got)
		}
	}
	for _, tg := range targets.All() {
		m, err := lower.Lower(v, tg.Tiling(v))
		if err != nil {
			t.Fatal(err)
		}
		check(tg.Name()+" lower", m)
		if m, err = tg.Assemble(m); err != nil {
			t.Fatal(err)
		}
		check(tg.Name()+" assemble", m)
		for _, p := range tg.Passes() {
			if m, err = p.Run(m); err != nil {
				t.Fatalf("%s: %s: %v", tg.Name(), p.Name, err)
			}
			check(tg.Name()+" "+p.Name, m)
		}
	}
}
