package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/lltest"
	"github.com/attnc/attnc/ir"
)

// splitPVText is prefill's P·V as the tile loop writes it for a bf16 or
// f16 cache (VT): V staged into an f32 array, the row rescale loop, then
// the zeroskip product over 64 positions.
const splitPVText = `module t prefix t

kernel t_k_%s role prefill level "%s" (v: VT* [2048], p: f32* [S], o: f32* [Q] out, m: i32, n: i32) {
  for item in 0 .. 1 parallel @work {
    alloc vb: f32[2048]
    alloc ps: f32[S]
    alloc acc: f32[Q]
    alloc al: f32[ROWS]
    for i in 0 .. Q spread {
      store acc[i] = 0.25:f32
    }
    for i in 0 .. 2048 spread {
      store vb[i] = f32(v[i])
    }
    for i in 0 .. S spread {
      store ps[i] = p[i]
    }
    for kt in 0 .. 1 serial @kv_tile {
      for r in 0 .. ROWS spread {
        store al[r] = ((f32(r) * 0.125:f32) + 0.5:f32)
      }
      for r in 0 .. ROWS spread {
        if (r < m) {
          let a = al[r]
          for d in 0 .. 32 spread {
            store acc[((r * 32) + d)] = (acc[((r * 32) + d)] * a)
          }
        }
      }
      matmul acc[ROWS, 32] += ps[ROWS, 64] * vb[64, 32] zeroskip extent(m, 32, n)
    }
    for r in 0 .. ROWS spread {
      if (r < m) {
        for d in 0 .. 32 spread {
          store o[((r * 32) + d)] = acc[((r * 32) + d)]
        }
      }
    }
  }
  return 0
}
`

// splitPVTile parses splitPVText with V of vt at level with rows rows
// and runs block-matmul, lower-tiles and vectorize on it, split products
// on at the vdpbf16ps levels (splitPVDot).
func splitPVTile(t *testing.T, vt, level string, rows int) (before, after *ir.Module) {
	t.Helper()
	text := strings.NewReplacer("VT*", vt+"*", "ROWS", fmt.Sprint(rows), "Q]", fmt.Sprint(rows*32, "]"), "Q spread", fmt.Sprint(rows*32, " spread"),
		"S]", fmt.Sprint(rows*64, "]"), "S spread", fmt.Sprint(rows*64, " spread")).Replace(splitPVText)
	before, err := ir.Parse(fmt.Sprintf(text, strings.ReplaceAll(level, "-", "_"), level))
	if err != nil {
		t.Fatal(err)
	}
	ir.MustVerify("parse", before)
	return before, scheduleSplit(t, before, level)
}

// scheduleSplit is scheduleTile with split products on at the vdpbf16ps
// levels (splitPVDot).
func scheduleSplit(t *testing.T, m *ir.Module, level string) *ir.Module {
	t.Helper()
	mc, err := NewMachine("")
	if err != nil {
		t.Fatal(err)
	}
	defer func(on bool) { splitPVDot = on }(splitPVDot)
	splitPVDot = true
	return scheduleTile(t, mc, m, level)
}

// TestSplitPVShape: at x86-64-v4-bf16 with splitPVDot, the P·V of a bf16
// V packs P's three parts and V's pairs, checks both, and runs dotbf16
// over 96 pair steps, keeping the f32 micro-kernels as the fallback; at
// x86-64-v4-bf16 without splitPVDot, and at x86-64-amx with 40 rows (not
// whole 32-row tile blocks), P·V stays f32; at x86-64-amx with 64 rows
// it runs on the tiles, accumulating into C after the rows whose scale is
// not 1 are rescaled.
func TestSplitPVShape(t *testing.T) {
	_, after := splitPVTile(t, "bf16", bf16Level, prefillRows)
	text := after.String()
	for _, want := range []string{"alloc ps_sp: i32[3840]", "alloc vb_sp: i32[3072]", "alloc acc_sp: f32[1280]",
		"if ((ps_spbad | vb_spbad) != 0)", "dotbf16(", "for bm_k in 0 .. 96 serial"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	mc, _ := NewMachine("")
	for _, level := range []string{bf16Level, "x86-64-amx"} {
		before, _ := splitPVTile(t, "bf16", level, prefillRows)
		got, err := mc.BlockMatMul(before)
		if err != nil {
			t.Fatal(err)
		}
		if s := got.String(); strings.Contains(s, "_sp") {
			t.Errorf("%s: P·V split %s", level, map[bool]string{true: "without splitPVDot", false: "on 40 rows"}[level == bf16Level])
		}
	}
	_, amx := splitPVTile(t, "bf16", "x86-64-amx", 64)
	if s := amx.String(); !strings.Contains(s, "call rt.amx_mm32(ps_sp, 0, 96, vb_sp, 0, 32, acc, 0, 32, 6, min(2, ((m + 31) / 32)), 1, 1)") ||
		!strings.Contains(s, "if (sp_a != 1.0:f32)") || strings.Contains(s, "acc_sp") {
		t.Errorf("x86-64-amx, 64 rows: no split P·V accumulating on the tiles (rows rescaled unless by 1):\n%s", s)
	}
}

// TestSplitPVKeepsResults runs the tile over bf16 and over f16 V in the
// interpreter after the passes at x86-64-v4-bf16 with splitPVDot (dotbf16
// as vdpbf16ps computes it: denormal inputs and sums flushed), and at
// x86-64-amx on 64 rows (rt.amx_mm32 as TDPBF16PS computes it,
// accumulating into C after the rescale; a bf16 V staged as bf16): on random
// weights (some hidden, -0) over finite V, the split product; on V rows
// that P hides holding NaN and inf, a weight of 1.3·2^-110 against large
// V values (2^120; 2^15 for f16), a NaN weight, the f32 fallback. Every
// output is within f32 accumulation's bound of the exact sum, or NaN
// where the exact sum is.
func TestSplitPVKeepsResults(t *testing.T) {
	for _, vt := range []string{"bf16", "f16"} {
		testSplitPV(t, vt, bf16Level, prefillRows, "dotbf16(")
		testSplitPV(t, vt, "x86-64-amx", 64, "rt.amx_mm32(")
	}
}

func testSplitPV(t *testing.T, vt, level string, rows int, product string) {
	before, after := splitPVTile(t, vt, level, rows)
	if !strings.Contains(after.String(), product) {
		t.Fatalf("%s at %s: no split P·V", vt, level)
	}
	name := before.Kernels[0].Name
	rng := rand.New(rand.NewSource(11))
	bits, value := bf16Bits, bf16Value
	if vt == "f16" {
		bits = func(x float32) uint16 { return f16BitsOf(float64(x)) }
		value = f16ValueOf
	}
	for _, tc := range []string{"random", "hidden nan", "tiny weight", "nan weight", "wide weights"} {
		for _, ext := range [][2]int{{40, 64}, {37, 50}, {1, 1}, {13, 64}} {
			mr, n := ext[0], ext[1]
			v, p := make([]uint16, 2048), make([]float32, rows*64)
			for i := range v {
				v[i] = bits(float32(rng.NormFloat64()))
			}
			for r := range rows {
				for j := range 64 {
					switch {
					case j >= n:
					case (j+r)%7 == 3:
						p[r*64+j] = float32(math.Copysign(0, -1))
					case tc == "wide weights":
						p[r*64+j] = float32(rng.Float64() * math.Exp2(-float64(rng.Intn(100))))
					default:
						p[r*64+j] = rng.Float32()
					}
				}
			}
			switch tc {
			case "hidden nan":
				// Position 5 hidden in every row, its V NaN and inf.
				for r := range rows {
					p[r*64+5] = float32(math.Copysign(0, -1))
				}
				for d := range 32 {
					v[5*32+d] = bits(float32(math.Inf(1 - 2*(d%2))))
				}
				v[5*32+7] = bits(float32(math.NaN()))
			case "tiny weight":
				p[0*64+0] = 0x1.5p-110
				for d := range 32 {
					v[0*32+d] = bits(0x1p120)
					if vt == "f16" {
						v[0*32+d] = bits(0x1p15)
					}
				}
			case "nan weight":
				p[0*64+0] = float32(math.NaN())
			}
			args := func() map[string]any {
				return map[string]any{"v": append([]uint16(nil), v...), "p": append([]float32(nil), p...),
					"o": make([]float32, rows*32), "m": int32(mr), "n": int32(n)}
			}
			got := args()
			if st, err := ir.Run(after, name, got); err != nil || st != 0 {
				t.Fatalf("%s at %s, %s: status %d, %v", vt, level, tc, st, err)
			}
			o := got["o"].([]float32)
			for r := range mr {
				a := float64(float32(r)*0.125 + 0.5)
				for d := range 32 {
					exact, mag := 0.25*a, 0.25*a
					for j := range n {
						w := float64(p[r*64+j])
						if w == 0 && math.Signbit(w) {
							continue // hidden: skipped
						}
						exact += w * value(v[j*32+d])
						mag += math.Abs(w * value(v[j*32+d]))
					}
					g := float64(o[r*32+d])
					if math.IsNaN(exact) {
						if !math.IsNaN(g) {
							t.Errorf("%s at %s, %s m=%d n=%d: o[%d, %d] = %v, want NaN", vt, level, tc, mr, n, r, d, g)
						}
						continue
					}
					if math.IsNaN(g) || math.Abs(g-exact) > 80*0x1p-24*mag {
						t.Errorf("%s at %s, %s m=%d n=%d: o[%d, %d] = %v, exact %v (bound %g)", vt, level, tc, mr, n, r, d, g, exact, 80*0x1p-24*mag)
					}
				}
			}
		}
	}
}

// TestSplitPairs evaluates the packing of each plan (bf16 P·V 3×1, f16
// P·V 3×2, f16 Q·Kᵀ 2×2) in the interpreter: the pair products of A' and
// B' sum, position by position, to A·B exactly (every part a bf16, every
// value its parts' sum: weights of at least 2^-100, 0, -0, the largest
// f32; f16 values down to 2^-24), and the flags catch NaN, inf and
// nonzero values below 2^-100 in either operand, and nothing else.
func TestSplitPairs(t *testing.T) {
	const rows, K, N = 3, 64, 32
	mm := &ir.MatMul{C: "c", A: "a", B: "b", M: rows, N: N, K: K, MExt: ir.Int(rows), NExt: ir.Int(N), KExt: ir.Int(K)}
	run := func(p splitPlan, a, b []float32) (ap, bp []uint32, badA, badB int32) {
		S := p.steps(K)
		body := []ir.Stmt{&ir.Alloc{Name: "ap", T: ir.I32, Size: rows * S}, &ir.Alloc{Name: "bp", T: ir.I32, Size: S * N}}
		body = append(body, splitPairsA(mm, p, "ap", "bada", 16)...)
		body = append(body, splitPairsB(mm, p, "b", ir.F32, "bp", "badb", 16)...)
		body = append(body, lltest.Store("fl", ir.Int(0), lltest.I32("bada")), lltest.Store("fl", ir.Int(1), lltest.I32("badb")))
		for i := range rows * S {
			body = append(body, lltest.Store("ao", ir.Int(int64(i)), ir.Ld("ap", ir.I32, ir.Int(int64(i)))))
		}
		for i := range S * N {
			body = append(body, lltest.Store("bo", ir.Int(int64(i)), ir.Ld("bp", ir.I32, ir.Int(int64(i)))))
		}
		body = append(body, lltest.Ret(ir.Int(0)))
		k := lltest.Kernel("f", []*ir.Param{lltest.Buf("a", ir.F32), lltest.Buf("b", ir.F32), lltest.Buf("ao", ir.I32), lltest.Buf("bo", ir.I32), lltest.Buf("fl", ir.I32)}, body...)
		m := lltest.Module("f", k)
		ir.MustVerify("split", m)
		ao, bo, fl := make([]int32, rows*S), make([]int32, S*N), make([]int32, 2)
		if st, err := ir.Run(m, "f", map[string]any{"a": a, "b": b, "ao": ao, "bo": bo, "fl": fl}); err != nil || st != 0 {
			t.Fatalf("status %d, %v", st, err)
		}
		for _, x := range ao {
			ap = append(ap, uint32(x))
		}
		for _, x := range bo {
			bp = append(bp, uint32(x))
		}
		return ap, bp, fl[0], fl[1]
	}
	half := func(rng *rand.Rand) float32 {
		return float32(roundF16(rng.NormFloat64() * math.Exp2(float64(rng.Intn(40)-24))))
	}
	rng := rand.New(rand.NewSource(4))
	for _, pl := range [][2]int{{3, 1}, {3, 2}, {2, 2}} {
		p := newSplitPlan(pl[0], pl[1])
		a, b := make([]float32, rows*K), make([]float32, K*N)
		for i := range a {
			switch {
			case p.pa == 2:
				a[i] = half(rng)
			case i%9 == 0:
				a[i] = 0x1p-100
			case i%9 == 1:
				a[i] = float32(math.Copysign(0, -1))
			case i%9 == 2:
				a[i] = -math.MaxFloat32
			default:
				a[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.Intn(120)-90)))
			}
		}
		for i := range b {
			if p.pb == 2 {
				b[i] = half(rng)
			} else {
				b[i] = math.Float32frombits(math.Float32bits(float32(rng.NormFloat64())) &^ 0xFFFF)
			}
		}
		ap, bp, badA, badB := run(p, a, b)
		if badA != 0 || badB != 0 {
			t.Errorf("%v: good operands flagged: A %d, B %d", pl, badA, badB)
		}
		S := p.steps(K)
		for m := range rows {
			for n := range N {
				var got, want, mag float64
				for s := range S {
					x, y := ap[m*S+s], bp[s*N+n]
					got += bf16Value(uint16(x))*bf16Value(uint16(y)) + bf16Value(uint16(x>>16))*bf16Value(uint16(y>>16))
				}
				for k := range K {
					want += float64(a[m*K+k]) * float64(b[k*N+n])
					mag += math.Abs(float64(a[m*K+k]) * float64(b[k*N+n]))
				}
				if math.Abs(got-want) > 0x1p-45*mag {
					t.Errorf("%v: (A'·B')[%d, %d] = %g, A·B %g", pl, m, n, got, want)
				}
			}
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1)), 0x1p-101, -0x1p-120, math.Float32frombits(1)} {
			a2, b2 := append([]float32(nil), a...), append([]float32(nil), b...)
			a2[77], b2[1001] = bad, bad
			if _, _, ba, bb := run(p, a2, b2); ba != 1 || bb != 1 {
				t.Errorf("%v, %g: flags A %d, B %d, want 1 and 1", pl, bad, ba, bb)
			}
		}
	}
}

// roundF16 is x rounded to the nearest f16 value (ties to even; x within
// f16's range).
func roundF16(x float64) float64 {
	if x == 0 {
		return x
	}
	_, e := math.Frexp(x) // |x| in [2^(e-1), 2^e)
	q := math.Exp2(float64(max(e-1, -14) - 10))
	return math.RoundToEven(x/q) * q
}

// f16ValueOf is the value of f16 bits h.
func f16ValueOf(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&0x1F), float64(h&0x3FF)
	switch e {
	case 0:
		return sign * m * 0x1p-24
	case 31:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * (1 + m/1024) * math.Exp2(float64(e-15))
}

// f16BitsOf is x rounded to f16 bits (ties to even; beyond the largest
// f16, inf).
func f16BitsOf(x float64) uint16 {
	var sign uint16
	if math.Signbit(x) {
		sign, x = 0x8000, -x
	}
	switch {
	case math.IsNaN(x):
		return 0x7E00
	case x == 0:
		return sign
	}
	r := roundF16(x)
	if r > 65504 {
		return sign | 0x7C00
	}
	if r < 0x1p-14 {
		return sign | uint16(r*0x1p24)
	}
	_, e := math.Frexp(r)
	return sign | uint16(e-1+15)<<10 | uint16(r/math.Exp2(float64(e-1))*1024-1024)
}

// TestSplitQKKeepsResults runs prefill's Q·Kᵀ tile (bf16TileText) over
// f16 Q and K in the interpreter after the passes at x86-64-v4-bf16 with
// splitPVDot — the split product (2×2 parts) — on random f16 values,
// subnormal ones included, and on a K holding inf and NaN (the f32
// fallback): every score within f32 accumulation's bound of the exact dot
// product, or the exact non-finite value. Q's pairs are packed once, before
// the KV tile loop.
func TestSplitQKKeepsResults(t *testing.T) {
	rows := prefillRows
	m := parseBF16Tile(t, bf16Level, rows)
	text := strings.ReplaceAll(m.String(), "bf16*", "f16*")
	text = strings.ReplaceAll(text, "bf16(", "f16(")
	m, err := ir.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	after := scheduleSplit(t, m, bf16Level)
	s := after.String()
	if !strings.Contains(s, "dotbf16(") || !strings.Contains(s, "kb_sp") {
		t.Fatalf("no split Q·Kᵀ:\n%s", s)
	}
	// Q is packed once, before the KV tile loop.
	if kt := strings.Index(s, "for kt in"); kt < 0 || !strings.Contains(s[:kt], "store qs_sp[") || strings.Contains(s[kt:], "store qs_sp[") {
		t.Errorf("Q's split pairs are not packed once, before the KV tile loop:\n%s", s)
	}
	rng := rand.New(rand.NewSource(6))
	for _, tc := range []string{"random", "subnormal", "inf k"} {
		for _, ext := range [][2]int{{40, 48}, {37, 33}, {1, 1}} {
			mr, n := ext[0], ext[1]
			q, k := make([]uint16, rows*32), make([]uint16, 1536)
			for i := range q {
				q[i] = f16BitsOf(rng.NormFloat64() * 4)
			}
			for i := range k {
				k[i] = f16BitsOf(rng.NormFloat64())
			}
			switch tc {
			case "subnormal":
				for i := 0; i < len(q); i += 5 {
					q[i] = uint16(rng.Intn(1024)) | uint16(rng.Intn(2))<<15
				}
			case "inf k":
				k[3*32+4], k[7*32+9] = 0x7C00, 0x7E00
			}
			args := map[string]any{"q": q, "k": k, "s": make([]float32, rows*48), "m": int32(mr), "n": int32(n)}
			if st, err := ir.Run(after, after.Kernels[0].Name, args); err != nil || st != 0 {
				t.Fatalf("%s: status %d, %v", tc, st, err)
			}
			sc := args["s"].([]float32)
			for r := range mr {
				for j := range n {
					var exact, mag float64
					for d := range 32 {
						p := f16ValueOf(q[r*32+d]) * f16ValueOf(k[j*32+d])
						exact += p
						mag += math.Abs(p)
					}
					got := float64(sc[r*48+j])
					switch {
					case math.IsNaN(exact) || math.IsInf(exact, 0):
						if !(math.IsNaN(exact) && math.IsNaN(got)) && got != exact {
							t.Errorf("%s m=%d n=%d: score[%d, %d] = %g, exact %g", tc, mr, n, r, j, got, exact)
						}
					case math.IsNaN(got) || math.Abs(got-exact) > 32*0x1p-24*mag:
						t.Errorf("%s m=%d n=%d: score[%d, %d] = %g, exact %g (bound %g)", tc, mr, n, r, j, got, exact, 32*0x1p-24*mag)
					}
				}
			}
		}
	}
}
