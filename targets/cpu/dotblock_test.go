package cpu

import (
	"fmt"
	"strings"
	"testing"
)

// TestTransposeAddRounds runs the transpose-add tree on lane labels: for
// every width, the last vector's lane t must hold every lane of the slot
// that transposeAddColumns gives column t, each exactly once, and every
// slot's lanes must be added in the same tree (the same lane pairs in
// the same rounds), which is what makes a result's bits independent of
// which slot a column sits in (dotBlockRows). Widths of 4 lanes or more
// must use only shuffles within 128-bit units until the units themselves
// are paired.
func TestTransposeAddRounds(t *testing.T) {
	for _, L := range []int{2, 4, 8, 16, 32} {
		rounds := transposeAddRounds(L)
		if want := log2(L); len(rounds) != want {
			t.Errorf("L=%d: %d rounds, want %d", L, len(rounds), want)
		}
		// vecs[s][lane]: the sum's shape, as text, of slot s's lanes.
		vecs := make([][]string, L)
		slot := make([][]int, L)
		for s := range vecs {
			vecs[s], slot[s] = make([]string, L), make([]int, L)
			for l := range L {
				vecs[s][l] = fmt.Sprint(l)
				slot[s][l] = s
			}
		}
		for r, m := range rounds {
			lo, hi := m[0], m[1]
			var next [][]string
			var nslot [][]int
			for i := 0; i < len(vecs); i += 2 {
				xy := append(append([]string(nil), vecs[i]...), vecs[i+1]...)
				xs := append(append([]int(nil), slot[i]...), slot[i+1]...)
				v, sl := make([]string, L), make([]int, L)
				for l := range L {
					if xs[lo[l]] != xs[hi[l]] {
						t.Fatalf("L=%d round %d lane %d adds slots %d and %d", L, r, l, xs[lo[l]], xs[hi[l]])
					}
					if L >= 4 && r < 2 && (lo[l]%L/4 != l/4 || hi[l]%L/4 != l/4) {
						t.Errorf("L=%d round %d lane %d reads lanes %d, %d outside its 128-bit unit", L, r, l, lo[l], hi[l])
					}
					v[l] = "(" + xy[lo[l]] + "+" + xy[hi[l]] + ")"
					sl[l] = xs[lo[l]]
				}
				next, nslot = append(next, v), append(nslot, sl)
			}
			vecs, slot = next, nslot
		}
		col := transposeAddColumns(L)
		shape := ""
		for l := range L {
			if col[slot[0][l]] != l {
				t.Errorf("L=%d: lane %d holds slot %d, whose column is %d", L, l, slot[0][l], col[slot[0][l]])
			}
			if l == 0 {
				shape = vecs[0][l]
			} else if vecs[0][l] != shape {
				t.Errorf("L=%d: lane %d sums %s, lane 0 %s", L, l, vecs[0][l], shape)
			}
		}
		seen := map[string]int{}
		for _, f := range strings.FieldsFunc(shape, func(c rune) bool { return c < '0' || c > '9' }) {
			seen[f]++
		}
		for l := range L {
			if n := seen[fmt.Sprint(l)]; n != 1 || len(seen) != L {
				t.Errorf("L=%d: tree %s adds lane %d %d times", L, shape, l, n)
			}
		}
	}
}

func log2(n int) int {
	k := 0
	for ; n > 1; n /= 2 {
		k++
	}
	return k
}
