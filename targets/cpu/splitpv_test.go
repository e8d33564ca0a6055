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

// splitPVText is prefill's P·V as the tile loop writes it for a bf16
// cache: V staged from bf16 into an f32 array, the row rescale loop, then
// the zeroskip product over 64 positions.
const splitPVText = `module t prefix t

kernel t_k_%s role prefill level "%s" (v: bf16* [2048], p: f32* [S], o: f32* [Q] out, m: i32, n: i32) {
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

// splitPVTile parses splitPVText at level with rows rows and runs
// block-matmul, lower-tiles and vectorize on it, split P·V on at the
// vdpbf16ps levels (splitPVDot).
func splitPVTile(t *testing.T, level string, rows int) (before, after *ir.Module) {
	t.Helper()
	text := strings.NewReplacer("ROWS", fmt.Sprint(rows), "Q]", fmt.Sprint(rows*32, "]"), "Q spread", fmt.Sprint(rows*32, " spread"),
		"S]", fmt.Sprint(rows*64, "]"), "S spread", fmt.Sprint(rows*64, " spread")).Replace(splitPVText)
	before, err := ir.Parse(fmt.Sprintf(text, strings.ReplaceAll(level, "-", "_"), level))
	if err != nil {
		t.Fatal(err)
	}
	ir.MustVerify("parse", before)
	mc, err := NewMachine("")
	if err != nil {
		t.Fatal(err)
	}
	defer func(on bool) { splitPVDot = on }(splitPVDot)
	splitPVDot = true
	return before, scheduleTile(t, mc, before, level)
}

// TestSplitPVShape: at x86-64-v4-bf16 with splitPVDot, the P·V of a bf16
// V packs P's three parts and V's pairs, checks both, and runs dotbf16
// over 96 pair steps, keeping the f32 micro-kernels as the fallback; at
// x86-64-v4-bf16 without splitPVDot, and at x86-64-amx with 40 rows (not
// whole 32-row tile blocks), P·V stays f32.
func TestSplitPVShape(t *testing.T) {
	_, after := splitPVTile(t, bf16Level, prefillRows)
	text := after.String()
	for _, want := range []string{"alloc ps_sp: i32[3840]", "alloc vb_sp: i32[3072]", "alloc acc_sp: f32[1280]",
		"if ((ps_spbad | vb_spbad) != 0)", "dotbf16(", "for bm_k in 0 .. 96 serial"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	mc, _ := NewMachine("")
	for _, level := range []string{bf16Level, "x86-64-amx"} {
		before, _ := splitPVTile(t, level, prefillRows)
		got, err := mc.BlockMatMul(before)
		if err != nil {
			t.Fatal(err)
		}
		if s := got.String(); strings.Contains(s, "_sp") {
			t.Errorf("%s: P·V split %s", level, map[bool]string{true: "without splitPVDot", false: "on 40 rows"}[level == bf16Level])
		}
	}
	_, amx := splitPVTile(t, "x86-64-amx", 64)
	if s := amx.String(); !strings.Contains(s, "call rt.amx_qk32(ps_sp, (am_mb0 * 96), 96, vb_sp, 0, 32, acc_sp, (am_mb0 * 32), 32, 6)") {
		t.Errorf("x86-64-amx, 64 rows: no split P·V on the tiles:\n%s", s)
	}
}

// TestSplitPVKeepsResults runs the tile in the interpreter before and
// after the passes at x86-64-v4-bf16 with splitPVDot (dotbf16 as
// vdpbf16ps computes it: denormal inputs and sums flushed): on random
// weights (some hidden, -0) over finite V, the split product; on V rows
// that P hides holding NaN and inf, a weight of 1.3·2^-110 against V values of
// 2^120, a NaN weight, the f32 fallback. Every output is within f32
// accumulation's bound of the exact sum, or NaN where the exact sum is.
func TestSplitPVKeepsResults(t *testing.T) {
	rows := prefillRows
	before, after := splitPVTile(t, bf16Level, rows)
	name := before.Kernels[0].Name
	rng := rand.New(rand.NewSource(11))
	for _, tc := range []string{"random", "hidden nan", "tiny weight", "nan weight", "wide weights"} {
		for _, ext := range [][2]int{{40, 64}, {37, 50}, {1, 1}, {13, 64}} {
			mr, n := ext[0], ext[1]
			v, p := make([]uint16, 2048), make([]float32, rows*64)
			for i := range v {
				v[i] = bf16Bits(float32(rng.NormFloat64()))
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
					v[5*32+d] = bf16Bits(float32(math.Inf(1 - 2*(d%2))))
				}
				v[5*32+7] = 0x7FC0
			case "tiny weight":
				p[0*64+0] = 0x1.5p-110
				for d := range 32 {
					v[0*32+d] = bf16Bits(0x1p120)
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
				t.Fatalf("%s: status %d, %v", tc, st, err)
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
						exact += w * bf16Value(v[j*32+d])
						mag += math.Abs(w * bf16Value(v[j*32+d]))
					}
					g := float64(o[r*32+d])
					if math.IsNaN(exact) {
						if !math.IsNaN(g) {
							t.Errorf("%s m=%d n=%d: o[%d, %d] = %v, want NaN", tc, mr, n, r, d, g)
						}
						continue
					}
					if math.Abs(g-exact) > 80*0x1p-24*mag {
						t.Errorf("%s m=%d n=%d: o[%d, %d] = %v, exact %v (bound %g)", tc, mr, n, r, d, g, exact, 80*0x1p-24*mag)
					}
				}
			}
		}
	}
}

// TestSplitPairs evaluates the packing in the interpreter: every weight
// of at least 2^-100 (and 0, -0) is the exact sum of its three parts in
// A', V's pairs are (v, v) and (v[2i], v[2i+1]), and the flags catch NaN,
// inf and nonzero values below 2^-100 in either operand, and nothing else.
func TestSplitPairs(t *testing.T) {
	const rows, K, N = 3, 64, 32
	mm := &ir.MatMul{C: "c", A: "a", B: "b", M: rows, N: N, K: K, MExt: ir.Int(rows), NExt: ir.Int(N), KExt: ir.Int(K)}
	run := func(a, b []float32) (ap, bp []uint32, badA, badB int32) {
		body := []ir.Stmt{&ir.Alloc{Name: "ap", T: ir.I32, Size: rows * 3 * K / 2}, &ir.Alloc{Name: "bp", T: ir.I32, Size: 3 * K / 2 * N}}
		body = append(body, splitPairsA(mm, "ap", "bada", 16)...)
		body = append(body, splitPairsB(mm, "bp", "badb", 16)...)
		body = append(body, lltest.Store("fl", ir.Int(0), lltest.I32("bada")), lltest.Store("fl", ir.Int(1), lltest.I32("badb")))
		for i := range rows * 3 * K / 2 {
			body = append(body, lltest.Store("ao", ir.Int(int64(i)), ir.Ld("ap", ir.I32, ir.Int(int64(i)))))
		}
		for i := range 3 * K / 2 * N {
			body = append(body, lltest.Store("bo", ir.Int(int64(i)), ir.Ld("bp", ir.I32, ir.Int(int64(i)))))
		}
		body = append(body, lltest.Ret(ir.Int(0)))
		k := lltest.Kernel("f", []*ir.Param{lltest.Buf("a", ir.F32), lltest.Buf("b", ir.F32), lltest.Buf("ao", ir.I32), lltest.Buf("bo", ir.I32), lltest.Buf("fl", ir.I32)}, body...)
		m := lltest.Module("f", k)
		ir.MustVerify("split", m)
		ao, bo, fl := make([]int32, rows*3*K/2), make([]int32, 3*K/2*N), make([]int32, 2)
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
	rng := rand.New(rand.NewSource(4))
	a, b := make([]float32, rows*K), make([]float32, K*N)
	for i := range a {
		switch i % 9 {
		case 0:
			a[i] = 0x1p-100
		case 1:
			a[i] = float32(math.Copysign(0, -1))
		case 2:
			a[i] = -math.MaxFloat32
		default:
			a[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.Intn(120)-90)))
		}
	}
	for i := range b {
		b[i] = math.Float32frombits(math.Float32bits(float32(rng.NormFloat64())) &^ 0xFFFF)
	}
	ap, bp, badA, badB := run(a, b)
	if badA != 0 || badB != 0 {
		t.Errorf("good operands flagged: A %d, B %d", badA, badB)
	}
	part := func(x uint32, high bool) float64 {
		if high {
			return bf16Value(uint16(x >> 16))
		}
		return bf16Value(uint16(x))
	}
	for r := range rows {
		for k := range K {
			p01 := ap[r*3*K/2+k]
			p2 := ap[r*3*K/2+K+k/2]
			sum := part(p01, false) + part(p01, true) + part(p2, k%2 == 1)
			if sum != float64(a[r*K+k]) {
				t.Errorf("A[%d, %d] = %g: parts sum to %g", r, k, a[r*K+k], sum)
			}
		}
	}
	for k := range K {
		for n := range N {
			v := float64(b[k*N+n])
			if x := bp[k*N+n]; part(x, false) != v || part(x, true) != v {
				t.Errorf("B' pair row %d column %d = %#x, want (%g, %g)", k, n, x, v, v)
			}
			if x := bp[(K+k/2)*N+n]; part(x, k%2 == 1) != v {
				t.Errorf("B' pair row %d column %d = %#x, want %g in its %v half", K+k/2, n, x, v, k%2 == 1)
			}
		}
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1)), 0x1p-101, -0x1p-120, math.Float32frombits(1)} {
		a2, b2 := append([]float32(nil), a...), append([]float32(nil), b...)
		a2[77], b2[1001] = bad, bad
		if _, _, ba, bb := run(a2, b2); ba != 1 || bb != 1 {
			t.Errorf("%g: flags A %d, B %d, want 1 and 1", bad, ba, bb)
		}
	}
}
