package cpu

import (
	"flag"
	"math"
	"math/rand"
	"testing"

	"github.com/attnc/attnc/internal/passtest"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

var update = flag.Bool("update", false, "rewrite the after sections of testdata/*.txt and testdata/tiny.ll.golden")

// long runs the cases the default go test ./... leaves out to keep within
// ten minutes (prefillLong); CI's long pass (.ci/run) sets it.
var long = flag.Bool("long", false, "run every case, not only the default run's (prefillLong too)")

func TestTableOrder(t *testing.T) {
	if err := passes.CheckOrder(Table, Constraints); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range passes.Neutral {
		names = append(names, p.Name)
	}
	for _, n := range names {
		if passes.Find(Table, n) == nil {
			t.Errorf("the cpu table lacks the neutral pass %s", n)
		}
	}
}

func TestBeforeAfter(t *testing.T) {
	passtest.Run(t, "testdata/*.txt", Table, *update)
	v3, err := LevelTable("x86-64-v3")
	if err != nil {
		t.Fatal(err)
	}
	passtest.Run(t, "testdata/v3/*.txt", v3, *update)
	arm, err := NewMachine("aarch64-unknown-linux-gnu")
	if err != nil {
		t.Fatal(err)
	}
	passtest.Run(t, "testdata/aarch64/*.txt", arm.Table(), *update)
}

// tileKernel runs a score matmul, a max reduce per row and a zeroskip P·V
// matmul whose P holds zeros against NaN V rows.
const tileKernel = `module t prefix t

kernel t_k role prefill (q: f32* [8], k: f32* [16], v: f32* [16], p: f32* [8], o: f32* [8] out, s: f32* [8] out, m: f32* [2] out, n: i32) {
  for item in 0 .. 1 parallel @work {
    alloc qs: f32[8]
    alloc kb: f32[16]
    alloc vb: f32[16]
    alloc sc: f32[8]
    alloc ps: f32[8]
    alloc acc: f32[8]
    for i in 0 .. 8 spread {
      store qs[i] = q[i]
      store ps[i] = p[i]
      store acc[i] = 1.0:f32
    }
    for i in 0 .. 16 spread {
      store kb[i] = k[i]
      store vb[i] = v[i]
    }
    matmul sc[2, 4] = qs[2, 4] * kb^T[4, 4] extent(2, 4, 4)
    for r in 0 .. 2 spread {
      reduce mt = max over j in 0 .. 4 of select((j < n), sc[((r * 4) + j)], -inf:f32)
      store m[r] = mt
    }
    matmul acc[2, 4] += ps[2, 4] * vb[4, 4] zeroskip extent(2, 4, n)
    for i in 0 .. 8 spread {
      store o[i] = acc[i]
      store s[i] = sc[i]
    }
  }
  return 0
}
`

// TestLowerTilesTwoAccumulating lowers two accumulating products in one
// block (lower-tiles' row updates, each on its own zeroed row mm_row) and
// checks that the result verifies and computes what the interpreter
// computes before: the row array is declared per row loop, not once per
// block, where a second product would declare it again.
func TestLowerTilesTwoAccumulating(t *testing.T) {
	m, err := ir.Parse(`module t prefix t

kernel t_k role prefill (a: f32* [8], b: f32* [16], o: f32* [8] out) {
  for item in 0 .. 1 parallel @work {
    alloc as: f32[8]
    alloc bs: f32[16]
    alloc acc: f32[8]
    for i in 0 .. 8 spread {
      store as[i] = a[i]
      store acc[i] = 0.5:f32
    }
    for i in 0 .. 16 spread {
      store bs[i] = b[i]
    }
    matmul acc[2, 4] += as[2, 4] * bs[4, 4] extent(2, 4, 4)
    matmul acc[2, 4] += as[2, 4] * bs[4, 4] extent(2, 4, 4)
    for i in 0 .. 8 spread {
      store o[i] = acc[i]
    }
  }
  return 0
}
`)
	if err != nil {
		t.Fatal(err)
	}
	lowered, err := LowerTiles(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := ir.Verify(lowered); err != nil {
		t.Fatalf("lower-tiles' output does not verify: %v", err)
	}
	rng := rand.New(rand.NewSource(3))
	a, b := make([]float32, 8), make([]float32, 16)
	for i := range a {
		a[i] = rng.Float32() - 0.5
	}
	for i := range b {
		b[i] = rng.Float32() - 0.5
	}
	var outs [2][]float32
	for i, mod := range []*ir.Module{m, lowered} {
		outs[i] = make([]float32, 8)
		if st, err := ir.Run(mod, "t_k", map[string]any{"a": a, "b": b, "o": outs[i]}); err != nil || st != 0 {
			t.Fatalf("status %d, %v", st, err)
		}
	}
	for i := range outs[0] {
		if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
			t.Errorf("o[%d] = %v before, %v after", i, outs[0][i], outs[1][i])
		}
	}
}

// TestLowerTilesKeepsResults runs the kernel in the interpreter before and
// after lower-tiles and vectorize: every output is bit for bit the same,
// and the NaN V rows that P zeroes never reach o.
func TestLowerTilesKeepsResults(t *testing.T) {
	m, err := ir.Parse(tileKernel)
	if err != nil {
		t.Fatal(err)
	}
	lowered, err := LowerTiles(m)
	if err != nil {
		t.Fatal(err)
	}
	if lowered, err = Vectorize(lowered); err != nil {
		t.Fatal(err)
	}
	ir.MustVerify("vectorize", lowered)
	rng := rand.New(rand.NewSource(1))
	for _, n := range []int32{0, 1, 3, 4} {
		args := func() map[string]any {
			q, k, v, p := make([]float32, 8), make([]float32, 16), make([]float32, 16), make([]float32, 8)
			for i := range q {
				q[i], p[i] = rng.Float32()-0.5, rng.Float32()
			}
			for i := range k {
				k[i], v[i] = rng.Float32()-0.5, rng.Float32()-0.5
			}
			// Positions n.. of P are 0 and their V rows NaN: masked.
			for j := int(n); j < 4; j++ {
				p[j], p[4+j] = 0, 0
				for d := 0; d < 4; d++ {
					v[j*4+d] = float32(math.NaN())
				}
			}
			return map[string]any{"q": q, "k": k, "v": v, "p": p, "o": make([]float32, 8), "s": make([]float32, 8), "m": make([]float32, 2), "n": n}
		}
		a := args()
		b := map[string]any{}
		for name, x := range a {
			if f, ok := x.([]float32); ok {
				b[name] = append([]float32(nil), f...)
			} else {
				b[name] = x
			}
		}
		for _, run := range []struct {
			m    *ir.Module
			args map[string]any
		}{{m, a}, {lowered, b}} {
			if st, err := ir.Run(run.m, "t_k", run.args); err != nil || st != 0 {
				t.Fatalf("n=%d: status %d, %v", n, st, err)
			}
		}
		for _, name := range []string{"o", "s", "m"} {
			x, y := a[name].([]float32), b[name].([]float32)
			for i := range x {
				if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
					t.Errorf("n=%d: %s[%d] = %v before, %v after", n, name, i, x[i], y[i])
				}
				if name == "o" && math.IsNaN(float64(y[i])) {
					t.Errorf("n=%d: o[%d] is NaN: a masked NaN V row reached the output", n, i)
				}
			}
		}
	}
}

// TestPrefillRows checks the prefill items' rows and the query rows they
// hold: 256 rows for GQA groups of 4 or more heads at head dims up to 128
// (a group of 7 rounded up to 448, whole 32-row blocks), 128 for MHA,
// groups of 2 and 3 and wider heads (MLA's 512/64).
func TestPrefillRows(t *testing.T) {
	for _, c := range []struct {
		qo, kv, dqk, dv int
		rows, qt        int
	}{
		{32, 8, 128, 128, 256, 64}, {32, 4, 128, 128, 256, 32}, {28, 4, 128, 128, 256, 64},
		{64, 4, 64, 64, 256, 16}, {32, 32, 128, 128, 128, 128}, {32, 16, 128, 128, 128, 64},
		{24, 8, 128, 128, 128, 64}, {32, 8, 256, 256, 128, 32}, {16, 1, 576, 512, 128, 8},
	} {
		v := &ir.Variant{QOHeads: c.qo, KVHeads: c.kv, HeadDimQK: c.dqk, HeadDimV: c.dv, DType: ir.DTBF16, KVDType: ir.DTBF16}
		tl := (Target{}).Tiling(v)
		if tl.Rows != c.rows || tl.QTile(v.GroupSize()) != c.qt {
			t.Errorf("%d/%d heads, d %d/%d: %d rows, %d query rows an item; want %d, %d", c.qo, c.kv, c.dqk, c.dv, tl.Rows, tl.QTile(v.GroupSize()), c.rows, c.qt)
		}
	}
}

// TestDecodeTileRows checks that a decode tile takes 64 K rows where they
// fit in TileKBytes (f32 at head dim 128, f16 and bf16 up to 256, 8-bit
// codes up to 512, short rows), else 32 (f32 at 256), else 16 (f32 at
// 576, MLA's 576-wide f16 rows).
func TestDecodeTileRows(t *testing.T) {
	for _, c := range []struct {
		dt, kv ir.DType
		d      int
		want   int
	}{
		{ir.DTF32, ir.DTF32, 128, 64}, {ir.DTF16, ir.DTF16, 128, 64}, {ir.DTBF16, ir.DTBF16, 128, 64},
		{ir.DTF16, ir.DTE4M3, 128, 64}, {ir.DTF16, ir.DTI8, 128, 64}, {ir.DTF16, ir.DTE4M3, 256, 64},
		{ir.DTF16, ir.DTE4M3, 512, 64}, {ir.DTF16, ir.DTE4M3, 576, 32}, {ir.DTF16, ir.DTF16, 192, 64},
		{ir.DTF16, ir.DTF16, 256, 64}, {ir.DTF32, ir.DTF32, 256, 32}, {ir.DTF16, ir.DTF16, 576, 16},
		{ir.DTF32, ir.DTF32, 64, 64}, {ir.DTF16, ir.DTF16, 64, 64}, {ir.DTF16, ir.DTF16, 32, 64},
		{ir.DTF32, ir.DTF32, 576, 16},
	} {
		v := &ir.Variant{DType: c.dt, KVDType: c.kv, HeadDimQK: c.d, HeadDimV: c.d}
		if got := (Target{}).Tiling(v).DecodeKVTile; got != c.want {
			t.Errorf("%s/%s d%d: decode tile %d rows, want %d", c.dt.Type(), c.kv.Type(), c.d, got, c.want)
		}
	}
}
