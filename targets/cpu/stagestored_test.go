package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"regexp"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
)

// TestDecodeStageStoredKeepsResults lowers decode with K and V tiles
// staged as the cache stores them (Tiling.DecodeStageStored: the products
// widen B as they read it) and as f32 (the copy widens), runs the
// target-neutral passes (matmuls left to the interpreter) and the CPU
// pass table on both and interprets the neutral and every level's decode
// kernel on the same paged inputs — f16, bf16 and 8-bit caches, a hidden
// (-1) page, an empty sequence and a partial last tile: o and lse are bit
// for bit the same, so staging as stored changes where the widening
// happens, not what the kernel computes.
func TestDecodeStageStoredKeepsResults(t *testing.T) {
	for _, c := range []struct {
		dt, kv ir.DType
		scale  ir.KVScale
	}{
		{ir.DTF16, ir.DTF16, ir.KVScaleNone}, {ir.DTBF16, ir.DTBF16, ir.KVScaleNone},
		{ir.DTF16, ir.DTE4M3, ir.KVScalePerTensor}, {ir.DTBF16, ir.DTE5M2, ir.KVScalePerHead},
		{ir.DTF16, ir.DTI8, ir.KVScalePerTensor},
	} {
		v := &ir.Variant{Name: "t", QOHeads: 8, KVHeads: 2, HeadDimQK: 16, HeadDimV: 16, DType: c.dt, KVDType: c.kv, KVScale: c.scale,
			PageSize: 4, Scale: 0.25, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: []ir.KernelRef{{Role: ir.RoleDecode}}}
		name := c.dt.String() + "/" + c.kv.String()
		tiling := Target{}.Tiling(v)
		var outs [2]map[string]map[string]any
		for i, stored := range []bool{false, true} {
			tl := tiling
			tl.DecodeStageStored = stored
			m, err := lower.Lower(v, tl)
			if err != nil {
				t.Fatal(err)
			}
			outs[i] = map[string]map[string]any{}
			// The target-neutral passes leave the matmuls to the
			// interpreter, which widens a stored B itself.
			neutral, err := passes.RunTable(passes.Neutral, m, passes.Options{VerifyEach: true})
			if err != nil {
				t.Fatalf("%s stored=%v: %v", name, stored, err)
			}
			args := stagedDecodeArgs(v, nil)
			if st, err := ir.Run(neutral, "t_decode_work", args); err != nil || st != 0 {
				t.Fatalf("%s stored=%v neutral: status %d, %v", name, stored, st, err)
			}
			outs[i]["neutral"] = args
			if m, err = passes.RunTable(Table, m, passes.Options{VerifyEach: true}); err != nil {
				t.Fatalf("%s stored=%v: %v", name, stored, err)
			}
			text := m.String()
			want := regexp.MustCompile(`alloc (heap )?kb: ` + c.kv.Type().String() + `\[`)
			if stored != want.MatchString(text) {
				t.Fatalf("%s stored=%v: %s in the scheduled module is %v", name, stored, want, !stored)
			}
			runLevelDecodes(t, fmt.Sprintf("%s stored=%v", name, stored), m, v, nil, outs[i])
		}
		sameDecodeOutputs(t, name, outs, 4, "staged as f32", "as stored")
	}
}

// runLevelDecodes runs every level clone of m's decode work kernel on
// stagedDecodeArgs(v, indices) in the interpreter and records its arguments (the
// outputs included) in outs by kernel name; what names the module in
// failures.
func runLevelDecodes(t *testing.T, what string, m *ir.Module, v *ir.Variant, indices []int32, outs map[string]map[string]any) {
	t.Helper()
	for _, k := range m.Kernels {
		if k.Role != ir.RoleDecode || !strings.HasPrefix(k.Name, "t_decode_work") || k.Level == "" {
			continue
		}
		args := stagedDecodeArgs(v, indices)
		if st, err := ir.Run(m, k.Name, args); err != nil || st != 0 {
			t.Fatalf("%s %s: status %d, %v", what, k.Name, st, err)
		}
		outs[k.Name] = args
	}
}

// sameDecodeOutputs checks that the two runs (kernels each: the level
// clones runLevelDecodes ran) wrote bit-identical o and lse; as names the
// runs.
func sameDecodeOutputs(t *testing.T, name string, outs [2]map[string]map[string]any, kernels int, as0, as1 string) {
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

// stagedDecodeArgs are fixed random decode inputs for v: 3 sequences of
// 0, 5 and 37 positions over 4-position pages, one page hidden (-1), with
// the page table indices (2 pages, then 10; nil: stagedIndices).
func stagedDecodeArgs(v *ir.Variant, indices []int32) map[string]any {
	rng := rand.New(rand.NewSource(7))
	const pages, bs = 16, 3
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
		"kv_indptr":        []int32{0, 0, 2, 12},
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
var stagedIndices = []int32{3, 9, 0, 14, 5, -1, 12, 7, 1, 11, 2, 15}

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
