package ir

import (
	"strings"
	"testing"
)

// gpuSrc stages a 16 x 16 f16 tile in shared memory with cp.async and
// reads it back with ldmatrix: x4 as use-mma reads A (lane l names row
// l%16 at column 8*(l/16)), x2.trans as it reads a V tile stored [K, N]
// (lane l names row l%16 at column 0).
const gpuSrc = `module g prefix g

kernel g_ldm role prefill (m: f16* [256], a: i32* [128] out, b: i32* [64] out) {
  for item in 0 .. 1 parallel @work {
    alloc shared sm: f16[256]
    for t in 0 .. 32 threads {
      copy.async sm[(t * 8)] = m[(t * 8)] x 8
      async.commit
      async.wait 0
      barrier
      alloc fa: i32[4]
      alloc fb: i32[2]
      ldmatrix.x4 fa, sm[(((t % 16) * 16) + ((t / 16) * 8))]
      ldmatrix.x2.trans fb, sm[((t % 16) * 16)]
      for i in 0 .. 4 serial {
        store a[((t * 4) + i)] = fa[i]
      }
      for i in 0 .. 2 serial {
        store b[((t * 2) + i)] = fb[i]
      }
    }
  }
  return 0
}
`

func TestGPUStatementsRoundTrip(t *testing.T) {
	m, err := Parse(gpuSrc)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.String(); got != gpuSrc {
		t.Errorf("round trip differs:\n%s", got)
	}
	if err := Verify(m); err != nil {
		t.Fatal(err)
	}
}

// The fragments ldmatrix hands out are the mma.m16n8k16 operand layouts
// of the PTX ISA: A register i of lane l holds A[gid + 8*(i%2)][2*tig +
// 8*(i/2)] (+1 in the high half), B register i holds B[2*tig + 8*i][gid]
// (and B[2*tig+8*i+1][gid]), with gid = l/4 and tig = l%4.
func TestLdMatrixFragments(t *testing.T) {
	m, err := Parse(gpuSrc)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]uint16, 256)
	for i := range src {
		src[i] = uint16(0x1000 + i) // element (row, col) = 0x1000 + 16*row + col
	}
	a, b := make([]int32, 128), make([]int32, 64)
	if _, err := Run(m, "g_ldm", map[string]any{"m": src, "a": a, "b": b}); err != nil {
		t.Fatal(err)
	}
	at := func(row, col int) uint32 { return uint32(src[16*row+col]) }
	pair := func(lo, hi uint32) int32 { return int32(lo | hi<<16) }
	for l := 0; l < 32; l++ {
		gid, tig := l/4, l%4
		for i := 0; i < 4; i++ {
			row, col := gid+8*(i%2), 2*tig+8*(i/2)
			if want := pair(at(row, col), at(row, col+1)); a[4*l+i] != want {
				t.Errorf("lane %d: A register %d = %#x, want %#x", l, i, a[4*l+i], want)
			}
		}
		for i := 0; i < 2; i++ {
			k := 2*tig + 8*i
			if want := pair(at(k, gid), at(k+1, gid)); b[2*l+i] != want {
				t.Errorf("lane %d: B register %d = %#x, want %#x", l, i, b[2*l+i], want)
			}
		}
	}
}

func TestGPUStatementErrors(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"copy.async sm[(t * 8)] = m[(t * 8)] x 8", "copy.async sm[(t * 8)] = m[(t * 8)] x 4", "want 16 bytes"},
		{"async.wait 0", "async.wait -1", "expected"},
		{"ldmatrix.x4 fa,", "ldmatrix.x3 fa,", "expected ldmatrix.x1"},
		{"ldmatrix.x2.trans fb,", "ldmatrix.x2.tran fb,", "expected ldmatrix.xN.trans"},
		{"ldmatrix.x4 fa, sm", "ldmatrix.x4 fb, sm", "want a local i32 array of at least 4"},
	} {
		src := strings.Replace(gpuSrc, c.from, c.to, 1)
		m, err := Parse(src)
		if err == nil {
			err = Verify(m)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.to, err, c.want)
		}
	}
	// Outside a threads or lanes loop ldmatrix has no warp.
	src := strings.Replace(gpuSrc, "    for t in 0 .. 32 threads {\n", "    {\n      let t = 0\n", 1)
	m, err := Parse(src)
	if err == nil {
		err = Verify(m)
	}
	if err == nil || !strings.Contains(err.Error(), "outside a threads or lanes loop") {
		t.Errorf("ldmatrix outside a warp: %v", err)
	}
	// A misaligned row is an error when the kernel runs.
	m, err = Parse(strings.Replace(gpuSrc, "sm[((t % 16) * 16)]", "sm[(((t % 16) * 16) + 1)]", 1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(m, "g_ldm", map[string]any{"m": make([]uint16, 256), "a": make([]int32, 128), "b": make([]int32, 64)})
	if err == nil || !strings.Contains(err.Error(), "not 16-byte aligned") {
		t.Errorf("misaligned ldmatrix row: %v", err)
	}
}

// A Private array prints and parses back as "alloc private".
func TestPrivateAllocRoundTrip(t *testing.T) {
	src := `module g prefix g

kernel g_priv role prefill (a: f32* [128] out) {
  for item in 0 .. 1 parallel @work {
    alloc private r: f32[128]
    for w in 0 .. 4 spread {
      for lane in 0 .. 32 lanes {
        store r[((w * 32) + lane)] = 1.0:f32
        store a[((w * 32) + lane)] = r[((w * 32) + lane)]
      }
    }
  }
  return 0
}
`
	m, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.String(); got != src {
		t.Errorf("round trip differs:\n%s", got)
	}
	var a *Alloc
	MapStmts(m.Kernels[0].Body, func(s Stmt) []Stmt {
		if x, ok := s.(*Alloc); ok {
			a = x
		}
		return []Stmt{s}
	})
	if a == nil || !a.Private || a.Shared || a.Heap {
		t.Errorf("alloc private parsed as %+v", a)
	}
}
