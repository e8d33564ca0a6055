package cpu

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
)

// tilingSwitch is a test of one of the CPU tiling's switches, which change
// how a kernel is scheduled and never what it computes
// (TestDecodeDirectKeepsResults, TestDecodeStageStoredKeepsResults,
// TestPrefillDirectKeepsResults, ...): v's kernel of its one role is
// lowered with the switch (at) off and on, and each way must write bit for
// bit the same o and lse.
type tilingSwitch struct {
	name string
	v    *ir.Variant
	at   func(*lower.Tiling) *bool
	// defaultOn says the CPU tiling has the switch on: the test fails
	// when it does not.
	defaultOn bool
	// args are fresh inputs of v's work kernel for one run.
	args func() map[string]any
	// neutralShows and scheduledShows, when set, say whether the switch
	// shows in the module after the target-neutral passes, and after the
	// CPU pass table: each must say so exactly when it is on.
	neutralShows, scheduledShows func(*ir.Module) bool
	// as0 and as1 name the ways, off and on, in failures.
	as0, as1 string
}

// run lowers s.v both ways, runs the target-neutral passes (which leave
// the matmuls to the interpreter, whose products widen a stored B and
// read B at row offsets themselves) and interprets the neutral work
// kernel, then runs the CPU pass table and interprets every level's clone
// of it, each on s.args(); the interpreter fails a read or prefetch
// outside the buffers. The neutral module and the three level clones of
// each way must agree bit for bit (sameOutputs).
func (s tilingSwitch) run(t *testing.T) {
	t.Helper()
	role := s.v.Kernels[0].Role
	work := "t_" + string(role) + "_work"
	tiling := Target{}.Tiling(s.v)
	if s.defaultOn && !*s.at(&tiling) {
		t.Fatalf("%s: the CPU tiling has the switch (%s) off", s.name, s.as1)
	}
	var outs [2]map[string]map[string]any
	for i, on := range []bool{false, true} {
		what := s.name + " " + [2]string{s.as0, s.as1}[i]
		tl := tiling
		*s.at(&tl) = on
		m, err := lower.Lower(s.v, tl)
		if err != nil {
			t.Fatal(err)
		}
		outs[i] = map[string]map[string]any{}
		neutral, err := passes.RunTable(passes.Neutral, m, passes.Options{VerifyEach: true})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		args := s.args()
		if st, err := runDirect(neutral, work, args); err != nil || st != 0 {
			t.Fatalf("%s neutral: status %d, %v", what, st, err)
		}
		outs[i]["neutral"] = args
		if s.neutralShows != nil && s.neutralShows(neutral) != on {
			t.Fatalf("%s: the switch shows in the neutral module: %v", what, !on)
		}
		if m, err = passes.RunTable(Table, m, passes.Options{VerifyEach: true}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if s.scheduledShows != nil && s.scheduledShows(m) != on {
			t.Fatalf("%s: the switch shows in the scheduled module: %v", what, !on)
		}
		for _, k := range m.Kernels {
			if k.Role != role || !strings.HasPrefix(k.Name, work) || k.Level == "" {
				continue
			}
			args := s.args()
			if st, err := runDirect(m, k.Name, args); err != nil || st != 0 {
				t.Fatalf("%s %s: status %d, %v", what, k.Name, st, err)
			}
			outs[i][k.Name] = args
		}
	}
	sameOutputs(t, s.name, outs, 4, s.as0, s.as1)
}

// sameOutputs checks that the two runs (kernels each: the neutral module
// and the level clones) wrote bit-identical o and lse; as0 and as1 name
// the runs.
func sameOutputs(t *testing.T, name string, outs [2]map[string]map[string]any, kernels int, as0, as1 string) {
	t.Helper()
	if len(outs[0]) != kernels || len(outs[1]) != kernels {
		t.Fatalf("%s: ran %d and %d kernels, want %d each", name, len(outs[0]), len(outs[1]), kernels)
	}
	for k, a := range outs[0] {
		b := outs[1][k]
		for _, buf := range []string{"o", "lse"} {
			x, y := bitsOf(a[buf]), bitsOf(b[buf])
			for j := range x {
				if x[j] != y[j] {
					t.Fatalf("%s %s: %s[%d] %s %#x, %s %#x", name, k, buf, j, as0, x[j], as1, y[j])
				}
			}
		}
	}
}

// passOutputs lowers v, runs the CPU pass table without the pass named
// pass (outs[0]) and with it (outs[1]), and interprets every level clone
// of role whose name starts with prefix on args() each; check, when not
// nil, sees each clone before it runs, and whether the pass ran. It fails
// the test when no clone ran.
func passOutputs(t *testing.T, what, pass string, v *ir.Variant, role ir.Role, prefix string, args func() map[string]any, check func(k *ir.Kernel, with bool)) [2]map[string]map[string]any {
	t.Helper()
	without := withoutPass(Table, pass)
	if len(without) != len(Table)-1 {
		t.Fatalf("the CPU table has no %s pass", pass)
	}
	var outs [2]map[string]map[string]any
	for i, table := range [][]passes.Pass{without, Table} {
		m, err := lower.Lower(v, Target{}.Tiling(v))
		if err != nil {
			t.Fatal(err)
		}
		if m, err = passes.RunTable(table, m, passes.Options{VerifyEach: true}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		outs[i] = map[string]map[string]any{}
		for _, k := range m.Kernels {
			if k.Role != role || !strings.HasPrefix(k.Name, prefix) || k.Level == "" {
				continue
			}
			if check != nil {
				check(k, i == 1)
			}
			a := args()
			if st, err := runDirect(m, k.Name, a); err != nil || st != 0 {
				t.Fatalf("%s %s: status %d, %v", what, k.Name, st, err)
			}
			outs[i][k.Name] = a
		}
	}
	if len(outs[0]) == 0 {
		t.Fatalf("%s: no level clones", what)
	}
	return outs
}

// decodeCase is a decode variant's dtype and cache storage.
type decodeCase struct {
	dt, kv ir.DType
	scale  ir.KVScale
}

func (c decodeCase) name() string { return c.dt.String() + "/" + c.kv.String() }

// decodeCases are the decode switch tests' caches: f32, f16 and bf16,
// and the 8-bit codes with per-tensor and per-head scales.
var decodeCases = []decodeCase{
	{ir.DTF32, ir.DTF32, ir.KVScaleNone}, {ir.DTF16, ir.DTF16, ir.KVScaleNone}, {ir.DTBF16, ir.DTBF16, ir.KVScaleNone},
	{ir.DTF16, ir.DTE4M3, ir.KVScalePerTensor}, {ir.DTBF16, ir.DTE5M2, ir.KVScalePerHead},
	{ir.DTF16, ir.DTI8, ir.KVScalePerTensor},
}

// decodeVariant is the decode-only variant of c: 8 qo heads over 2 kv
// heads, head dim 16, pages of 4, causal.
func decodeVariant(c decodeCase) *ir.Variant {
	return &ir.Variant{Name: "t", QOHeads: 8, KVHeads: 2, HeadDimQK: 16, HeadDimV: 16, DType: c.dt, KVDType: c.kv, KVScale: c.scale,
		PageSize: 4, Scale: 0.25, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: []ir.KernelRef{{Role: ir.RoleDecode}}}
}

// stagedDecodeArgs are fixed random decode inputs for v: 3 sequences of
// 0, 5 and 93 positions over 4-position pages (a whole 64-position decode
// tile and a partial one), one page hidden (-1), with the page table
// indices (2 pages, then 24, from a pool of 32; nil: stagedIndices).
func stagedDecodeArgs(v *ir.Variant, indices []int32) map[string]any {
	rng := rand.New(rand.NewSource(7))
	const pages, bs = 32, 3
	elems := func(dt ir.DType, n int) any {
		switch dt {
		case ir.DTF16, ir.DTBF16:
			out := make([]uint16, n)
			for i := range out {
				e := 14 + rng.Intn(3) // f16: 2^-1 .. 2^1
				if dt == ir.DTBF16 {
					out[i] = uint16(rng.Intn(2)<<15 | (126+rng.Intn(3))<<7 | rng.Intn(1<<7))
					continue
				}
				out[i] = uint16(rng.Intn(2)<<15 | e<<10 | rng.Intn(1<<10))
			}
			return out
		case ir.DTF32:
			out := make([]float32, n)
			for i := range out {
				out[i] = float32(rng.Intn(2)*2-1) * (0.5 + 1.5*rng.Float32())
			}
			return out
		case ir.DTI8:
			out := make([]byte, n)
			rng.Read(out)
			return out
		}
		out := make([]byte, n) // finite fp8 codes of either sign
		for i := range out {
			out[i] = byte(rng.Intn(2)<<7 | rng.Intn(0x78))
		}
		return out
	}
	row := v.KVHeads * v.PageSize * v.HeadDimQK
	if indices == nil {
		indices = stagedIndices
	}
	a := map[string]any{
		"q":                elems(v.DType, bs*v.QOHeads*v.HeadDimQK),
		"k_pages":          elems(v.KVDType, pages*row),
		"v_pages":          elems(v.KVDType, pages*row),
		"num_pages":        int32(pages),
		"kv_indptr":        []int32{0, 0, 2, int32(len(indices))},
		"kv_indices":       indices,
		"kv_last_page_len": []int32{4, 1, 1},
		"batch_size":       int32(bs),
		"lse":              make([]float32, bs*v.QOHeads),
	}
	if v.DType == ir.DTF32 {
		a["o"] = make([]float32, bs*v.QOHeads*v.HeadDimV)
	} else {
		a["o"] = make([]uint16, bs*v.QOHeads*v.HeadDimV)
	}
	if v.Quantized() {
		ks, vs := make([]float32, v.ScaleLen()), make([]float32, v.ScaleLen())
		for i := range ks {
			ks[i], vs[i] = 0.01+rng.Float32()/8, 0.01+rng.Float32()/8
		}
		a["k_scale"], a["v_scale"] = ks, vs
	}
	return a
}

// stagedIndices is the page table of stagedDecodeArgs: the third
// sequence's first tile holds the hidden page.
var stagedIndices = []int32{3, 9, 0, 14, 5, -1, 12, 7, 1, 11, 2, 15, 18, 4, 21, 16, 25, 10, 23, 6, 19, 28, 13, 17, 27, 20}

// tailHiddenIndices is a page table of stagedDecodeArgs whose third
// sequence reads a whole first tile in place (every page valid), then
// holds a hidden page and one past the pool (num_pages) in its last tile.
var tailHiddenIndices = []int32{3, 9, 0, 14, 5, 12, 7, 1, 11, 2, 15, 18, 4, 21, 16, 25, 10, 23, 6, 19, -1, 28, 13, 32, 27, 20}

// validIndices is stagedIndices with every page valid.
var validIndices = []int32{3, 9, 0, 14, 5, 8, 12, 7, 1, 11, 2, 15, 18, 4, 21, 16, 25, 10, 23, 6, 19, 28, 13, 17, 27, 20}

// bitsOf is the bits of each element of an f32 or 16-bit output.
func bitsOf(x any) []uint32 {
	var out []uint32
	switch s := x.(type) {
	case []float32:
		for _, f := range s {
			out = append(out, math.Float32bits(f))
		}
	case []uint16:
		for _, h := range s {
			out = append(out, uint32(h))
		}
	}
	return out
}

// runDirect is ir.Run of kernel name with the arguments decode's direct
// launch binds added where args lacks them: a work kernel that also serves
// the split launch (lower.Tiling.DecodeOneKernel) takes NULL partial
// buffers and splits = 1 there.
func runDirect(m *ir.Module, name string, args map[string]any) (int32, error) {
	if k := m.Kernel(name); k != nil && k.Param("part_o") != nil {
		if _, ok := args["part_o"]; !ok {
			args["part_o"], args["part_lse"], args["splits"] = nil, nil, int32(1)
		}
	}
	return ir.Run(m, name, args)
}
