package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
)

// decodePairsText is decode's Q·Kᵀ over a bf16 pool as the lowering
// writes it with Tiling.DecodeDirect: bf16 Q staged into an f32 array
// (QCONV: exact, or scaled), K rows read in place at row offsets (a
// scattered order), a GQA group of 4 rows at head dim 128 against up to 64
// positions.
const decodePairsText = `module t prefix t

kernel t_d_%s role decode level "%s" (q: bf16* [512], k: bf16* [8192], s: f32* [256] out, n: i32) {
  for item in 0 .. 1 parallel @work {
    alloc qs: f32[512]
    alloc sc: f32[256]
    alloc koff: i64[64]
    for i in 0 .. 512 spread {
      store qs[i] = QCONV
    }
    for kt in 0 .. 1 serial @kv_tile {
      for j in 0 .. 64 spread {
        store koff[j] = (i64(((j * 37) %% 64)) * 128:i64)
      }
      matmul sc[4, 64] = qs[4, 128] * k^T[64, 128] rows(koff) extent(4, n, 128)
      for r in 0 .. 4 spread {
        for j in 0 .. 64 spread {
          if (j < n) {
            store s[((r * 64) + j)] = sc[((r * 64) + j)]
          }
        }
      }
    }
  }
  return 0
}
`

func decodePairsTile(t *testing.T, level, qconv string) *ir.Module {
	t.Helper()
	text := strings.Replace(decodePairsText, "QCONV", qconv, 1)
	return scheduleText(t, fmt.Sprintf(text, strings.ReplaceAll(level, "-", "_"), level), level)
}

// TestDecodePairsShape: at x86-64-v4-bf16, decode's Q·Kᵀ over a bf16
// pool packs Q's pairs and their flag once, before the KV tile loop, and
// runs dot-product blocks of dotbf16 on K's rows read as pairs in place
// (4 steps of 2 × 16 elements, 16 dotbf16 each), keeping the f32 blocks
// for a flagged Q. x86-64-v4 writes none of it but the array's
// declaration, and a Q that is not exact bf16 none at all.
func TestDecodePairsShape(t *testing.T) {
	after := decodePairsTile(t, bf16Level, "f32(q[i])")
	text := after.String()
	for _, want := range []string{"alloc qs_qp: i32[256]", "var qs_qpbad = ", "bitcast.i32x16(k[", "if (qs_qpbad != 0)"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	if i, j := strings.Index(text, "var qs_qpbad"), strings.Index(text, "for kt in"); i < 0 || j < 0 || i > j {
		t.Errorf("Q's pairs are not packed before the KV tile loop")
	}
	steps := 0
	loopProducts(after.Kernels[0].Body, "db_k", func(f *ir.For, dots, fmas int) {
		if dots > 0 {
			steps++
			if c, ok := ir.IsConst(f.Hi); fmas != 0 || dots != 16 || !ok || c.Int != 4 {
				t.Errorf("a bf16 step holds %d dotbf16 and %d muladd over %s steps, want 16 and none over 4", dots, fmas, ir.ExprString(f.Hi))
			}
		}
	})
	if steps == 0 {
		t.Errorf("no dotbf16 contraction loop:\n%s", text)
	}
	// x86-64-v4 declares the pairs' array too (STACK_BYTES does not
	// depend on the levels built) but neither packs nor reads it.
	if s := decodePairsTile(t, "x86-64-v4", "f32(q[i])").String(); strings.Contains(s, "dotbf16") || strings.Contains(s, "qs_qpbad") ||
		!strings.Contains(s, "alloc qs_qp: i32[256]") {
		t.Errorf("x86-64-v4 runs bf16 pairs, or declares no array for them:\n%s", s)
	}
	if s := decodePairsTile(t, bf16Level, "(f32(q[i]) * 0.1:f32)").String(); strings.Contains(s, "dotbf16") {
		t.Errorf("a Q that is not exact bf16 runs on bf16 pairs")
	}
}

// TestDecodePairsKeepsResults runs the tile in the interpreter after the
// schedule at x86-64-v4-bf16 (ir.DotBF16 as vdpbf16ps computes it, K's
// pairs read through the lane-regrouping bitcast) and checks every score
// against the exact dot product: within the f32 blocks' rounding bound
// plus, on the pairs, qPairsLimit's K · 2^-94 for denormal K elements
// that vdpbf16ps reads as zero. A denormal or a huge Q value must take the
// f32 blocks, which keep a denormal's product: the bound then has no
// absolute term, and a pairs run would miss it.
func TestDecodePairsKeepsResults(t *testing.T) {
	after := decodePairsTile(t, bf16Level, "f32(q[i])")
	rng := rand.New(rand.NewSource(9))
	for _, tc := range []struct {
		name  string
		n     int
		fused bool // whether the case may take the pairs' absolute error
		edit  func(q, k []uint16)
	}{
		{"random", 64, true, nil},
		{"random cut", 37, true, nil},
		{"denormal k", 64, true, func(q, k []uint16) {
			k[5*128+7] = 0x0003
			q[2*128+7] = bf16Bits(0x1p31)
		}},
		{"denormal q", 64, false, func(q, k []uint16) {
			for d := range 128 {
				q[1*128+d] = bf16Bits(float32(rng.Float64() * 0x1p-20))
			}
			q[1*128+9] = 0x8005 // -5·2^-133
			k[11*128+9] = bf16Bits(0x1p120)
		}},
		{"huge q", 64, false, func(q, k []uint16) {
			// Position 3's only nonzero product is 2^40 · 7·2^-133.
			for d := range 128 {
				k[3*128+d] = 0
			}
			q[0*128+4] = bf16Bits(0x1p40)
			k[3*128+4] = 0x0007
		}},
	} {
		q, k := make([]uint16, 512), make([]uint16, 8192)
		for i := range q {
			q[i] = bf16Bits(float32(rng.NormFloat64()))
		}
		for i := range k {
			k[i] = bf16Bits(float32(rng.NormFloat64()))
		}
		if tc.edit != nil {
			tc.edit(q, k)
		}
		args := map[string]any{"q": q, "k": k, "s": make([]float32, 256), "n": int32(tc.n)}
		if st, err := ir.Run(after, after.Kernels[0].Name, args); err != nil || st != 0 {
			t.Fatalf("%s: status %d, %v", tc.name, st, err)
		}
		s := args["s"].([]float32)
		for r := range 4 {
			for j := range tc.n {
				row := (j * 37) % 64
				var exact, mag float64
				for d := range 128 {
					p := bf16Value(q[r*128+d]) * bf16Value(k[row*128+d])
					exact += p
					mag += math.Abs(p)
				}
				bound := 128 * 0x1p-24 * mag
				if tc.fused {
					bound += 128 * 0x1p-94
				}
				// Written as !(err <= bound), so that a NaN score fails.
				if got := float64(s[r*64+j]); !(math.Abs(got-exact) <= bound) {
					t.Errorf("%s: score[%d, %d] = %g, exact %g (bound %g)", tc.name, r, j, got, exact, bound)
				}
			}
		}
	}
}

// TestQPairsFlag evaluates packPairs' flag with qPairsLimit in the
// interpreter: zeros, normals from 2^-126 up to 2^32 less an ulp leave it
// 0; a denormal, 2^32 or more, an infinity or a NaN anywhere sets it.
func TestQPairsFlag(t *testing.T) {
	fine := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0x1p-126, -0x1p-126, 0x1.fffffep31, -0x1.fep31, 3}
	bad := []uint32{0x00010000, 0x807F0000, math.Float32bits(0x1p32), math.Float32bits(-0x1p40), 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FFFFF}
	vals := make([]float32, 128)
	for i := range vals {
		vals[i] = fine[i%len(fine)]
	}
	if got := packFlag(t, vals, qPairsLimit); got != 0 {
		t.Errorf("no bad value: flag %d", got)
	}
	for i, b := range bad {
		v := append([]float32(nil), vals...)
		v[(37*i+5)%128] = math.Float32frombits(b)
		if got := packFlag(t, v, qPairsLimit); got != 1 {
			t.Errorf("%#x at %d: flag %d", b, (37*i+5)%128, got)
		}
	}
}

// decodeBF16Args are stagedDecodeArgs for bf16 v with q, K and V
// values of either sign between 2^-8 and 2^0 (all 7 mantissa bits random),
// so that a score's 128 products span 16 binades and their f32 sum rounds:
// two summation orders then give different bits.
func decodeBF16Args(v *ir.Variant) map[string]any {
	a := stagedDecodeArgs(v, nil)
	rng := rand.New(rand.NewSource(11))
	for _, name := range []string{"q", "k_pages", "v_pages"} {
		xs := a[name].([]uint16)
		for i := range xs {
			xs[i] = uint16(rng.Intn(2)<<15 | (119+rng.Intn(9))<<7 | rng.Intn(1<<7))
		}
	}
	return a
}

// decodeBF16At128 is the bf16 decode variant at head dim 128 (pages of
// 4, 8 qo heads over 2 kv heads), lowered with the CPU tiling.
func decodeBF16At128(t *testing.T) (*ir.Variant, *ir.Module) {
	t.Helper()
	v := decodeVariant(decodeCase{ir.DTBF16, ir.DTBF16, ir.KVScaleNone})
	v.HeadDimQK, v.HeadDimV = 128, 128
	m, err := lower.Lower(v, Target{}.Tiling(v))
	if err != nil {
		t.Fatal(err)
	}
	return v, m
}

// runDecodeClones interprets every level clone of m's decode work kernel
// on decodeBF16Args, by level.
func runDecodeClones(t *testing.T, v *ir.Variant, m *ir.Module) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, k := range m.Kernels {
		if k.Role != ir.RoleDecode || !strings.HasPrefix(k.Name, "t_decode_work") || k.Level == "" {
			continue
		}
		args := decodeBF16Args(v)
		if st, err := runDirect(m, k.Name, args); err != nil || st != 0 {
			t.Fatalf("%s: status %d, %v", k.Name, st, err)
		}
		out[k.Level] = args
	}
	return out
}

// TestDecodeEvenOddKeepsResults: bf16 decode at head dim 128, whose P·V
// micro-kernels widen V's rows read in place 2L elements at a time into
// even and odd columns (evenOddBF16), gives every clone's o and lse bit
// for bit as with a widening load per vector; the inputs make sums round
// (decodeBF16Args), so an order that changed would show. The test checks
// the even/odd loads were written at every level.
func TestDecodeEvenOddKeepsResults(t *testing.T) {
	defer func() { evenOddBF16 = true }()
	v, m0 := decodeBF16At128(t)
	var outs [2]map[string]map[string]any
	for i, on := range []bool{false, true} {
		evenOddBF16 = on
		m, err := passes.RunTable(Table, m0, passes.Options{VerifyEach: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range m.Kernels {
			if k.Role == ir.RoleDecode && strings.HasPrefix(k.Name, "t_decode_work") && k.Level != "" {
				if got := strings.Contains(k.String(), "let bm_w0 = bitcast.i32x"); got != on {
					t.Fatalf("%s evenOdd=%v: even/odd loads written: %v", k.Name, on, got)
				}
			}
		}
		outs[i] = runDecodeClones(t, v, m)
	}
	sameOutputs(t, "bf16 head dim 128", outs, 4, "a widening load per vector", "even and odd columns")
}

// TestDecodePairsNearF32 runs the same decode's x86-64-v4-bf16 clone,
// whose Q·Kᵀ runs on vdpbf16ps (decodePairs: the head dim summed in
// pairs), against its x86-64-v4 clone (f32 multiply-adds): each o within
// one bf16 ulp (the scores differ by f32 roundings, which can move a
// rounding of o by one) and each lse within 2^-16 relative, and not the
// same bits throughout (the pairs ran). With decodePairs off, the
// module has no x86-64-v4-bf16 decode clone.
func TestDecodePairsNearF32(t *testing.T) {
	defer func() { decodePairs = true }()
	v, m0 := decodeBF16At128(t)
	m, err := passes.RunTable(Table, m0, passes.Options{VerifyEach: true})
	if err != nil {
		t.Fatal(err)
	}
	outs := runDecodeClones(t, v, m)
	got, want := outs[bf16Level], outs["x86-64-v4"]
	if got == nil || want == nil || len(outs) != 4 {
		t.Fatalf("decode clones at %d levels, want x86-64, -v3, -v4 and %s", len(outs), bf16Level)
	}
	wo, gO := want["o"].([]uint16), got["o"].([]uint16)
	wl, gl := want["lse"].([]float32), got["lse"].([]float32)
	differs := false
	for i := range wo {
		a, b := int32(int16(wo[i]^0x8000)), int32(int16(gO[i]^0x8000)) // ordered as the values
		if d := a - b; d > 1 || d < -1 {
			t.Errorf("o[%d] %#x, x86-64-v4 %#x", i, gO[i], wo[i])
		}
		differs = differs || a != b
	}
	for i := range wl {
		if d := math.Abs(float64(gl[i] - wl[i])); !(d <= math.Abs(float64(wl[i]))*0x1p-16) && gl[i] != wl[i] {
			t.Errorf("lse[%d] %g, x86-64-v4 %g", i, gl[i], wl[i])
		}
		differs = differs || gl[i] != wl[i]
	}
	if !differs {
		t.Errorf("%s: the bits of x86-64-v4 throughout: did its Q·Kᵀ run on pairs?", bf16Level)
	}
	decodePairs = false
	if m, err = passes.RunTable(Table, m0, passes.Options{VerifyEach: true}); err != nil {
		t.Fatal(err)
	}
	if outs := runDecodeClones(t, v, m); outs[bf16Level] != nil {
		t.Errorf("decodePairs off: an %s decode clone", bf16Level)
	}
}
