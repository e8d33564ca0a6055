package ir_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/targets"
	_ "github.com/attnc/attnc/targets/cpu"
	_ "github.com/attnc/attnc/targets/cuda"
)

// TestLoweredRoundTrip prints, parses and reprints real lowered modules
// (prefill, decode, merge_state, prefill_ragged, and qkv_append with
// qk_norm and rope at_append), before and after every
// pass of every target's table, and verifies each.
func TestLoweredRoundTrip(t *testing.T) {
	v := &ir.Variant{Name: "rt", QOHeads: 8, KVHeads: 2, HeadDimQK: 64, HeadDimV: 64, DType: ir.DTBF16, KVDType: ir.DTBF16,
		PageSize: 16, Scale: 0.125, Masks: []ir.MaskClause{{Kind: ir.MaskWindow, Left: 20}},
		Sinks:   &ir.Sinks{Kind: ir.SinkTokens, Tokens: 4},
		Score:   &ir.Call{Fn: "softcap", Args: []ir.Expr{ir.R("score", ir.F32), ir.Float(30)}, T: ir.F32},
		Kernels: []ir.KernelRef{{Role: ir.RolePrefill}, {Role: ir.RoleDecode}, {Role: ir.RoleMergeState}, {Role: ir.RolePrefillRagged}, {Role: ir.RoleQKVAppend}},
		Rope:    &ir.Rope{Theta: 1e6, AtAppend: true},
		QKNorm:  &ir.QKNorm{Eps: 1e-6, Offset: 1}}
	roundTripAllPasses(t, v)
}

// TestLoweredRoundTripRotInterleaved is TestLoweredRoundTrip for decode
// under inline RoPE of interleaved pairs, whose K rows the CPU's decode
// turns as it reads them (a matmul's rot(..., interleaved)).
func TestLoweredRoundTripRotInterleaved(t *testing.T) {
	v := &ir.Variant{Name: "rti", QOHeads: 4, KVHeads: 2, HeadDimQK: 64, HeadDimV: 64, DType: ir.DTF16, KVDType: ir.DTF16,
		PageSize: 16, Scale: 0.125, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}},
		Kernels: []ir.KernelRef{{Role: ir.RoleDecode}},
		Rope:    &ir.Rope{Theta: 10000, Pairs: ir.RopeInterleaved, RotaryDim: 32}}
	cpu, err := targets.Lookup("cpu")
	if err != nil {
		t.Fatal(err)
	}
	m, err := lower.Lower(v, cpu.Tiling(v))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.String(), ", 16, interleaved)") {
		t.Fatalf("the cpu lowering turns no K rows by interleaved pairs in a matmul:\n%s", m)
	}
	roundTripAllPasses(t, v)
}

// TestLoweredRoundTripParams is TestLoweredRoundTrip for a variant whose
// mask and score read param tensors (guarded loads in the kernels).
func TestLoweredRoundTripParams(t *testing.T) {
	batch, qPos, kvPos, head := ir.R("batch", ir.I32), ir.R("q_pos", ir.I32), ir.R("kv_pos", ir.I32), ir.R("head", ir.I32)
	doc := func(i ir.Expr) ir.Expr { return &ir.ParamRead{Name: "doc", Index: []ir.Expr{batch, i}, T: ir.I32} }
	v := &ir.Variant{Name: "rtp", QOHeads: 8, KVHeads: 2, HeadDimQK: 64, HeadDimV: 64, DType: ir.DTF16,
		PageSize: 16, Scale: 0.125,
		Params: []*ir.ParamDecl{
			{Name: "doc", T: ir.I32, Dims: []ir.ParamDim{{Name: "batch"}, {Name: "max_len"}}},
			{Name: "bias", T: ir.F32, Dims: []ir.ParamDim{{Name: "qo_heads"}, {Size: 7}}},
		},
		Masks:   []ir.MaskClause{{Kind: ir.MaskExpr, Expr: ir.Bin(ir.And, ir.Bin(ir.Le, kvPos, qPos), ir.Bin(ir.Eq, doc(qPos), doc(kvPos)))}},
		Score:   ir.Bin(ir.Add, ir.R("score", ir.F32), &ir.ParamRead{Name: "bias", Index: []ir.Expr{head, ir.Bin(ir.Rem, kvPos, ir.Int(9))}, T: ir.F32}),
		Kernels: []ir.KernelRef{{Role: ir.RolePrefill}, {Role: ir.RoleDecode}, {Role: ir.RolePrefillRagged}}}
	roundTripAllPasses(t, v)
}

// TestLoweredRoundTripRopeSources is TestLoweredRoundTrip for RoPE from
// a table and from factors, whose turns are computed in f64, inline and
// at append (qkv_append rotates). The default run takes the table inline
// and the factors at append (each source and each place once, both pair
// orders); -long (CI's long pass) adds ropeSourcesLong, the other two
// combinations.
func TestLoweredRoundTripRopeSources(t *testing.T) {
	ropes := []*ir.Rope{
		{Style: ir.RopeTable, RotaryDim: 32, Pairs: ir.RopeInterleaved, Params: map[string]float64{}},
		{Style: ir.RopeFactors, AtAppend: true, Theta: 10000, Pairs: ir.RopeInterleaved, Params: map[string]float64{"theta": 10000, "attn_factor": 1.19}},
	}
	if *long {
		ropes = append(ropes, ropeSourcesLong...)
	}
	for _, rope := range ropes {
		kernels := []ir.KernelRef{{Role: ir.RolePrefill}, {Role: ir.RoleDecode}, {Role: ir.RoleMergeState}, {Role: ir.RolePrefillRagged}}
		var norm *ir.QKNorm
		if rope.AtAppend {
			kernels, norm = append(kernels, ir.KernelRef{Role: ir.RoleQKVAppend}), &ir.QKNorm{Eps: 1e-6}
		}
		v := &ir.Variant{Name: "rt", QOHeads: 8, KVHeads: 2, HeadDimQK: 64, HeadDimV: 64, DType: ir.DTBF16, KVDType: ir.DTBF16,
			PageSize: 16, Scale: 0.125, Masks: []ir.MaskClause{{Kind: ir.MaskWindow, Left: 20}},
			Sinks:   &ir.Sinks{Kind: ir.SinkTokens, Tokens: 4},
			Score:   &ir.Call{Fn: "softcap", Args: []ir.Expr{ir.R("score", ir.F32), ir.Float(30)}, T: ir.F32},
			Rope:    rope,
			QKNorm:  norm,
			Kernels: kernels}
		roundTripAllPasses(t, v)
	}
}

// long runs the cases the default go test ./... leaves out to keep within
// ten minutes (ropeSourcesLong); CI's long pass (.ci/run) sets it.
var long = flag.Bool("long", false, "run every case, not only the default run's")

// ropeSourcesLong are the RoPE sources TestLoweredRoundTripRopeSources
// runs with -long only: the factors inline and the table at append.
var ropeSourcesLong = []*ir.Rope{
	{Style: ir.RopeFactors, Theta: 10000, Params: map[string]float64{"theta": 10000, "attn_factor": 1.19}},
	{Style: ir.RopeTable, AtAppend: true, RotaryDim: 32, Params: map[string]float64{}},
}

// roundTripAllPasses lowers v for every target and round-trips the module
// before and after every pass.
func roundTripAllPasses(t *testing.T, v *ir.Variant) {
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
