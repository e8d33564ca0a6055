package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

// maxNumTile is a KV tile with the same guarded row reduce as max and as
// maxnum, over x (2 rows of 48, the first n of each counting).
const maxNumTile = `module t prefix t

kernel t_k_x86_64_v4 role prefill level "x86-64-v4" (x: f32* [96], mx: f32* [2] out, mn: f32* [2] out, n: i32) {
  for item in 0 .. 1 parallel @work {
    alloc sc: f32[96]
    alloc one: f32[1]
    alloc acc: f32[96]
    for i in 0 .. 96 spread {
      store sc[i] = x[i]
    }
    store one[0] = 1.0:f32
    for kt in 0 .. 1 serial @kv_tile {
      matmul acc[96, 1] = sc[96, 1] * one[1, 1] extent(96, 1, 1)
      for r in 0 .. 2 spread {
        reduce a = max over j in 0 .. 48 of select((j < n), sc[((r * 48) + j)], -inf:f32)
        reduce b = maxnum over j in 0 .. 48 of select((j < n), sc[((r * 48) + j)], -inf:f32)
        store mx[r] = a
        store mn[r] = b
      }
    }
  }
  return 0
}
`

// TestVectorReduceMaxNum: vector-reduce writes a maxnum reduce with a >
// b ? a : b (no max(), which is NaN-propagating's four instructions) and
// max with max(); on rows without NaN both give the interpreter's result
// before the pass, bit for bit (-inf elements, the guard's tail, an
// all-hidden row); on a row with a NaN, max still gives NaN and maxnum
// gives NaN or the largest element that is not NaN (ir.ReduceMaxNum).
func TestVectorReduceMaxNum(t *testing.T) {
	m, err := ir.Parse(maxNumTile)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := NewMachine("")
	if err != nil {
		t.Fatal(err)
	}
	after, err := mc.VectorReduce(m)
	if err != nil {
		t.Fatal(err)
	}
	ir.MustVerify("vector-reduce", after)
	text := after.String()
	for _, want := range []string{"b_vacc = select((b_vacc > ", "a_vacc = max(a_vacc, "} {
		if !strings.Contains(text, want) {
			t.Errorf("vector-reduce wrote no %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "b_vacc = max(") || strings.Contains(text, "reduce ") {
		t.Errorf("maxnum combined with max(), or a reduce left:\n%s", text)
	}
	rng := rand.New(rand.NewSource(3))
	nan, ninf := float32(math.NaN()), float32(math.Inf(-1))
	for c, tc := range []struct {
		n    int32
		edit func(x []float32)
	}{
		{48, func([]float32) {}},
		{37, func([]float32) {}}, // 2 whole blocks and a tail of 5
		{48, func(x []float32) { // -inf elements, one row all -inf
			for i := range 48 {
				x[i] = ninf
			}
			x[60], x[95] = ninf, ninf
		}},
		{0, func([]float32) {}},
		{48, func(x []float32) { x[7], x[48+40] = nan, nan }},  // a block's NaN
		{45, func(x []float32) { x[20], x[48+46] = nan, nan }}, // a NaN past n is hidden
		{47, func(x []float32) { x[46], x[48+5] = nan, nan }},  // a NaN in the tail
	} {
		x := make([]float32, 96)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 100)
		}
		tc.edit(x)
		run := func(mod *ir.Module) (mx, mn []float32) {
			args := map[string]any{"x": append([]float32(nil), x...), "mx": make([]float32, 2), "mn": make([]float32, 2), "n": tc.n}
			if st, err := ir.Run(mod, "t_k_x86_64_v4", args); err != nil || st != 0 {
				t.Fatalf("case %d: status %d, %v", c, st, err)
			}
			return args["mx"].([]float32), args["mn"].([]float32)
		}
		bx, bn := run(m)
		ax, an := run(after)
		for r := range 2 {
			what := fmt.Sprintf("case %d row %d", c, r)
			// The reference: the largest visible element that is not NaN.
			want, hasNaN := ninf, false
			for j := 0; j < int(tc.n); j++ {
				v := x[r*48+j]
				if v != v {
					hasNaN = true
				} else if v > want {
					want = v
				}
			}
			if !hasNaN {
				for _, got := range []float32{bx[r], bn[r], ax[r], an[r]} {
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Errorf("%s: max %v / maxnum %v before, %v / %v after, want %v", what, bx[r], bn[r], ax[r], an[r], want)
					}
				}
				continue
			}
			if bx[r] == bx[r] || bn[r] == bn[r] || ax[r] == ax[r] {
				t.Errorf("%s (a NaN): max before %v, maxnum before %v (the interpreter propagates), max after %v: want NaN", what, bx[r], bn[r], ax[r])
			}
			if an[r] == an[r] && an[r] != want {
				t.Errorf("%s (a NaN): maxnum after the pass %v, want NaN or %v", what, an[r], want)
			}
		}
	}
}
