package cpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

// TestMergeTwinsKeepsResults lowers decode (decodeCases: f32, f16, bf16
// and 8-bit caches), runs the CPU pass table with and without merge-twins
// and interprets every level's decode work kernel
// on the same paged inputs (stagedDecodeArgs: a whole tile read in place,
// shorter tiles staged, a hidden page, an empty sequence): o and lse are
// bit for bit the same. With the pass the clones that read rows in place
// keep one row-offset array and its prefetch companion (K's and V's rows
// lie alike in their pools), without it two of each.
func TestMergeTwinsKeepsResults(t *testing.T) {
	for _, c := range decodeCases {
		for _, indices := range [][]int32{stagedIndices, tailHiddenIndices} {
			v := decodeVariant(c)
			what := fmt.Sprintf("decode %s, pages %v", c.name(), indices)
			direct := 0
			outs := passOutputs(t, what, "merge-twins", v, ir.RoleDecode, "t_decode_work", func() map[string]any { return stagedDecodeArgs(v, indices) }, func(k *ir.Kernel, with bool) {
				text := k.String()
				if !strings.Contains(text, "alloc koff:") {
					return
				}
				if !with {
					direct++
				}
				for _, arr := range []string{"voff", "voff_pf"} {
					if got := strings.Contains(text, "alloc "+arr+":"); got == with {
						t.Errorf("%s, %s: array %s: %v with merge-twins %v", what, k.Name, arr, got, with)
					}
				}
			})
			if direct == 0 {
				t.Fatalf("%s: no clone reads rows in place", what)
			}
			sameOutputs(t, "merge-twins "+what, outs, len(outs[0]), "without merge-twins", "with it")
		}
	}
}

// twinsText is a kernel whose arrays a and b are twins, with BETWEEN
// between their stores, b's index AT, and AFTER before their reads.
const twinsText = `module t prefix t

kernel t_k role decode level "x86-64" (x: i64* [64], y: i64* [64] out, n: i32) {
  for item in 0 .. 1 parallel @work {
    alloc a: i64[16]
    alloc b: i64[16]
    alloc c: i64[16]
    var v = 1:i64
    for j in 0 .. 16 serial {
      let p = x[j]
      let ra = ((p * 8:i64) + i64(j))
      store a[j] = (ra + x[0])
      BETWEEN
      let rb = ((p * 8:i64) + i64(j))
      store b[AT] = (rb + x[0])
    }
    for j in 0 .. 16 serial {
      AFTER
      store y[j] = (a[j] + b[(15 - j)])
    }
  }
  return 0
}
`

// TestTwins runs twins on twinsText's arrays a and b: merged when
// nothing between their stores touches what they mean, left apart when
// something does or the stores differ.
func TestTwins(t *testing.T) {
	for _, c := range []struct {
		between, at, after string
		want               bool
	}{
		{"", "j", "", true},
		{"store c[j] = ra", "j", "", true},     // another array
		{"let q = 2", "j", "", true},           // a name the stores do not read
		{"", "(15 - j)", "", false},            // another index
		{"store x[0] = 0:i64", "j", "", false}, // writes what the values load
		{"store y[j] = 0:i64", "j", "", true},  // writes a buffer nothing here loads
		{"v = 2:i64", "j", "", false},          // an assignment
		{"store c[j] = a[j]", "j", "", false},  // reads a between
		{"store a[j] = 0:i64", "j", "", false}, // a second store to a
		{"store b[j] = ra", "j", "", false},    // b's twin comes first, then a stray one
		{"let p = 2:i64", "j", "", false},      // p defined again
		{"", "j", "alloc a: i64[16]", false},   // a nested alloc of a: the reads after are another array's
	} {
		src := strings.NewReplacer("BETWEEN", c.between, "AT", c.at, "AFTER", c.after).Replace(twinsText)
		m, err := ir.Parse(src)
		if err != nil {
			t.Fatalf("%q: %v", c.between, err)
		}
		var item *ir.Block
		ir.MapStmts(m.Kernels[0].Body, func(s ir.Stmt) []ir.Stmt {
			if f, ok := s.(*ir.For); ok && f.Kind == ir.Parallel {
				item = f.Body
			}
			return []ir.Stmt{s}
		})
		if got := twins(item, "a", "b", map[string]bool{"v": true}); got != c.want && c.after == "" {
			t.Errorf("between %q, b at %s: twins %v, want %v", c.between, c.at, got, c.want)
		}
		out, err := MergeTwins(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := !strings.Contains(out.Kernels[0].String(), "alloc b:"); got != c.want {
			t.Errorf("between %q, b at %s, %q after: merged %v, want %v", c.between, c.at, c.after, got, c.want)
		}
	}
}

// TestTwinsLetOfVar: a let that reads a variable keeps the value it had
// where it stood, so it is not written out at a later store: after the
// variable changes, a store of the same text stores another value.
func TestTwinsLetOfVar(t *testing.T) {
	const src = `module t prefix t

kernel t_k role decode level "x86-64" (y: i64* [64] out) {
  for item in 0 .. 1 parallel @work {
    alloc a: i64[16]
    alloc b: i64[16]
    var v = 1:i64
    for j in 0 .. 16 serial {
      let ra = (v + i64(j))
      v = (v + 1:i64)
      store a[j] = ra
      store b[j] = (v + i64(j))
    }
    for j in 0 .. 16 serial {
      store y[j] = (a[j] - b[j])
    }
  }
  return 0
}
`
	if mergedB(t, src) {
		t.Error("a and b merged: a's value is v before the assignment, b's after")
	}
}

// mergedB is whether MergeTwins merged array b of the kernel in src away.
func mergedB(t *testing.T, src string) bool {
	t.Helper()
	m, err := ir.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := MergeTwins(m)
	if err != nil {
		t.Fatal(err)
	}
	return !strings.Contains(out.Kernels[0].String(), "alloc b:")
}

// TestTwinsLetChain: lets that each name the one before twice would
// double the written-out text at every step (2^40 nodes here); past
// twinsExpandMax they stay names, so the proof ends at once and still
// merges the twins, whose stores name the same last let.
func TestTwinsLetChain(t *testing.T) {
	var chain strings.Builder
	chain.WriteString("      let l0 = i64(j)\n")
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&chain, "      let l%d = (l%d + l%d)\n", i, i-1, i-1)
	}
	src := `module t prefix t

kernel t_k role decode level "x86-64" (y: i64* [64] out) {
  for item in 0 .. 1 parallel @work {
    alloc a: i64[16]
    alloc b: i64[16]
    for j in 0 .. 16 serial {
` + chain.String() + `      store a[j] = l40
      store b[j] = l40
    }
    for j in 0 .. 16 serial {
      store y[j] = (a[j] - b[j])
    }
  }
  return 0
}
`
	if !mergedB(t, src) {
		t.Error("a and b not merged")
	}
}

// TestTwinsMatMulRows: a matmul that reads b as its row offsets names b
// in a field, not a load, which merging would leave pointing at an array
// that is gone: the two stay apart.
func TestTwinsMatMulRows(t *testing.T) {
	const src = `module t prefix t

kernel t_k role decode level "x86-64" (qs: f32* [512], k: f32* [8192], s: f32* [256] out, n: i32) {
  for item in 0 .. 1 parallel @work {
    alloc sc: f32[256]
    alloc a: i64[64]
    alloc b: i64[64]
    for j in 0 .. 64 serial {
      let r = (i64(j) * 128:i64)
      store a[j] = r
      store b[j] = r
    }
    matmul sc[4, 64] = qs[4, 128] * k^T[64, 128] rows(b) extent(4, n, 128)
    for j in 0 .. 64 serial {
      store s[j] = (sc[j] + f32(a[j]))
    }
  }
  return 0
}
`
	if mergedB(t, src) {
		t.Error("b merged away while the matmul reads it as its rows")
	}
	if !mergedB(t, strings.Replace(src, "rows(b)", "", 1)) {
		t.Error("a and b not merged without the matmul's rows")
	}
}
