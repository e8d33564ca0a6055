package cpu

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
)

// TestCodeScaleKeepsResults: decode over an e4m3 cache with the
// widening's 2^8 folded out of the products' loops (codescale.go) gives
// every output bit the products gave with it inside, at every level clone
// (the interpreter): f16 queries (the Q·Kᵀ result scaled, the P·V weights
// scaled) and f32 and bf16 ones (the P·V weights only: their Q·Kᵀ could
// leave f32's range in one form). The inputs hold every e4m3 code —
// subnormals, ±448, ±0, NaN in one K page and one V page (the tiles that
// keep the NaN select) — and queries with subnormals, ±65504, zeros, in
// one head an infinity and, for bf16 and f32, in another ±3e36 (hugeRow:
// folding their Q·Kᵀ too fails the test there); a hidden page forces one
// copied tile. The test checks the fold fired where it should, so it
// cannot pass by folding nothing. The same outputs, bit for bit, come with
// the finite tiles' codes widened through f32 bits at x86-64-v4 (bitsWiden:
// value / 2^120, folded likewise; the Q·Kᵀ blocks of f16 queries scale A
// by dotFoldA), folded and not, against the half path unfolded.
func TestCodeScaleKeepsResults(t *testing.T) {
	defer func() { foldCodeScales, finiteBits, ir.InterpDAZ = true, true, 0 }()
	type config struct{ fold, bits, daz bool }
	for _, dt := range []ir.DType{ir.DTF16, ir.DTF32, ir.DTBF16} {
		v := decodeVariant(decodeCase{dt, ir.DTE4M3, ir.KVScalePerTensor})
		name := dt.String() + "/e4m3"
		m0, err := lower.Lower(v, Target{}.Tiling(v))
		if err != nil {
			t.Fatal(err)
		}
		var base map[string]map[string]any
		// daz: rt.fp_daz says the thread reads denormals as zero, so the
		// tiles take the exact path.
		for _, c := range []config{{false, false, false}, {true, false, false}, {false, true, false}, {true, true, false}, {true, true, true}} {
			fold := c.fold
			foldCodeScales, finiteBits, ir.InterpDAZ = c.fold, c.bits, int32(b2i(c.daz))
			m, err := passes.RunTable(Table, m0, passes.Options{VerifyEach: true})
			if err != nil {
				t.Fatalf("%s %+v: %v", name, c, err)
			}
			// Each decode work kernel's native-half clones (x86-64-v3,
			// -v4) fold P·V; only f16 queries fold Q·Kᵀ.
			clones := 0
			for _, k := range m.Kernels {
				if k.Role != ir.RoleDecode || !strings.Contains(k.Name, "_work_x86_64_v") {
					continue
				}
				clones++
				text := k.String()
				if got := strings.Contains(text, "alloc sc_cs: f32["); got != fold {
					t.Fatalf("%s fold=%v %s: P·V weights scaled: %v", name, fold, k.Name, got)
				}
				if got, want := strings.Contains(text, "db_res"), fold && dt == ir.DTF16; got != want {
					t.Fatalf("%s fold=%v %s: Q·Kᵀ result scaled: %v, want %v", name, fold, k.Name, got, want)
				}
				// The f32-bits widening's 2^120 (its multiply, or its
				// fold's), only in the AVX-512 clone with it on; A scaled
				// by 2^64 there where Q·Kᵀ folds.
				v4 := strings.HasSuffix(k.Name, "_x86_64_v4")
				if got, want := strings.Contains(text, strconv.FormatFloat(0x1p120, 'g', -1, 64)), c.bits && v4; got != want {
					t.Fatalf("%s %+v %s: 2^120 in the kernel: %v, want %v", name, c, k.Name, got, want)
				}
				// The f32-bits tiles only where the thread reads
				// denormals (rt.fp_daz, finite-codes).
				if got, want := strings.Contains(text, "rt.fp_daz"), c.bits && v4; got != want {
					t.Fatalf("%s %+v %s: asks rt.fp_daz: %v, want %v", name, c, k.Name, got, want)
				}
				if got, want := strings.Contains(text, strconv.FormatFloat(dotFoldA, 'g', -1, 64)), c.bits && v4 && fold && dt == ir.DTF16; got != want {
					t.Fatalf("%s %+v %s: Q·Kᵀ A scaled by 2^64: %v, want %v", name, c, k.Name, got, want)
				}
			}
			if clones == 0 {
				t.Fatalf("%s: no native-half decode clones", name)
			}
			out := map[string]map[string]any{}
			runSpecialDecodes(t, fmt.Sprintf("%s %+v", name, c), m, v, out)
			if base == nil {
				base = out
				continue
			}
			sameOutputs(t, name, [2]map[string]map[string]any{base, out}, 3, "half, unfolded", fmt.Sprintf("%+v", c))
		}
	}
}

// runSpecialDecodes interprets every level clone of m's decode work
// kernel on stagedDecodeArgs with the special codes and queries of
// TestCodeScaleKeepsResults written in, and records the arguments (the
// outputs included) in outs by kernel name.
func runSpecialDecodes(t *testing.T, what string, m *ir.Module, v *ir.Variant, outs map[string]map[string]any) {
	t.Helper()
	for _, k := range m.Kernels {
		if k.Role != ir.RoleDecode || !strings.HasPrefix(k.Name, "t_decode_work") || k.Level == "" {
			continue
		}
		args := stagedDecodeArgs(v, nil)
		specialCodes(v, args)
		if st, err := runDirect(m, k.Name, args); err != nil || st != 0 {
			t.Fatalf("%s %s: status %d, %v", what, k.Name, st, err)
		}
		outs[k.Name] = args
	}
}

// specialCodes writes every e4m3 code into the K and V pages (NaN only in
// page 12 of K and page 7 of V) and special values into the queries.
func specialCodes(v *ir.Variant, a map[string]any) {
	row := v.KVHeads * v.PageSize * v.HeadDimQK
	for b, buf := range []string{"k_pages", "v_pages"} {
		nanPage := []int{12, 7}[b]
		codes := a[buf].([]byte)
		for i := range codes {
			c := byte(i*37 + b*11)
			if c&0x7f == 0x7f && i/row != nanPage {
				c ^= 0x01 // ±448's neighbour ±416 instead of NaN
			}
			codes[i] = c
		}
		codes[nanPage*row+5] = 0x7f | byte(b)<<7
	}
	// Elements 0 and 1 of every K row hold 448, for hugeRow.
	k := a["k_pages"].([]byte)
	for r := 0; r < len(k); r += v.HeadDimQK {
		k[r], k[r+1] = 0x7e, 0x7e
	}
	// Query specials every few elements, an infinity in head 5 of
	// sequence 2 (its rows turn NaN; the others keep theirs).
	d := v.HeadDimQK
	switch q := a["q"].(type) {
	case []uint16:
		sp := []uint16{0x0001, 0x83ff, 0x7bff, 0xfbff, 0x0000, 0x8000, 0x0400, 0x3c01}
		if v.DType == ir.DTBF16 {
			sp = []uint16{0x0001, 0x807f, 0x7f7f, 0xff7f, 0x0000, 0x8000, 0x0080, 0x3f81}
		}
		for i := range q {
			if i%3 == 0 {
				q[i] = sp[(i/3)%len(sp)]
			}
		}
		inf := uint16(0x7c00)
		if v.DType == ir.DTBF16 {
			inf = 0x7f80
		}
		q[(2*v.QOHeads+5)*d+3] = inf
		if v.DType == ir.DTF16 {
			// Head 6 of sequence 1: f16's smallest subnormal, 2^-24,
			// everywhere. Its products with K's small codes (2^-33 for
			// the smallest subnormal code) count in scores of about
			// 2^-15; against the f32-bits widening's value / 2^120 they
			// would be f32 subnormals or zero unless the dot blocks
			// scale A (dotFoldA).
			for c := 0; c < d; c++ {
				q[(v.QOHeads+6)*d+c] = 0x0001
			}
		}
		if v.DType == ir.DTBF16 {
			hugeRow(v, func(i int, neg bool) {
				if i < 0 {
					q[-i] = 0
					return
				}
				q[i] = 0x7c10 | uint16(b2i(neg))<<15
			})
		}
	case []float32:
		sp := []float32{1e-45, -1.1754942e-38, 1e30, -1e30, 0, float32(math.Copysign(0, -1)), 65504, 1 + 1.0/(1<<23)}
		for i := range q {
			if i%3 == 0 {
				q[i] = sp[(i/3)%len(sp)]
			}
		}
		q[(2*v.QOHeads+5)*d+3] = float32(math.Inf(1))
		hugeRow(v, func(i int, neg bool) {
			if i < 0 {
				q[-i] = 0
				return
			}
			q[i] = float32(math.Copysign(3e36, float64(1-2*b2i(neg))))
		})
	}
}

// hugeRow sets head 4 of sequence 1 (no hidden page: every tile read in
// place) of a bf16 or f32 query to 3e36, −3e36, then zeros (set(index,
// negative); a negative index: a zero).
// Against K rows that start with 448, 448 (specialCodes), the products
// overflow to +inf and −inf, and the score is NaN; a Q·Kᵀ folded for such
// a query (q·(448/2^8) − q·(448/2^8), then ·2^8) would give 0: the case
// that keeps bf16 and f32 queries out of foldsDot.
func hugeRow(v *ir.Variant, set func(i int, neg bool)) {
	d := v.HeadDimQK
	set((v.QOHeads+4)*d, false)
	set((v.QOHeads+4)*d+1, true)
	for c := 2; c < d; c++ {
		set(-((v.QOHeads+4)*d + c), false)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
