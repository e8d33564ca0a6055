package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/emutest"
	"github.com/attnc/attnc/internal/needtool"
)

// asyncKernels are hand-written kernels for the cp.async and ldmatrix
// helpers: the emulator tests run them, TestAsyncPTX compiles them to PTX
// and assembles them with ptxas.
const asyncKernels = `
/* ---- cp.async ---- */
/* Each thread stages its 16-byte chunk of in with cp.async and reads back
   its neighbour's. mode 0: wait, barrier, read (correct); 1: no wait; 2: no
   barrier between the wait and the read. */
ATTNC_DEV void stage_body(const float *in, float *out, int mode) {
  ATTNC_DYN_SMEM(sm);
  float *s = (float *)sm;
  int t = attnc_tid(), n = attnc_nthreads(), b = attnc_bid();
  attnc_cp_async16(s + 4 * t, in + 4 * (b * n + t));
  attnc_cp_async_commit();
  if (mode != 1) attnc_cp_async_wait<0>();
  if (mode != 2) attnc_sync();
  const float *r = s + 4 * ((t + 1) % n);
  for (int i = 0; i < 4; i++) out[4 * (b * n + t) + i] = r[i];
}
ATTNC_KERNEL void k_stage(const float *in, float *out, int mode) { stage_body(in, out, mode); }

/* Sums tiles of 4*n floats through a ring of 3 shared-memory stages, two
   tiles in flight while one is read (each thread reads its neighbour's
   chunk). After the commit of iteration i, i+3 groups exist and tile i is
   group i+1, so wait_group 2 is the loosest correct wait; pending = 3 is the
   off-by-one bug. */
ATTNC_DEV void ring_body(const float *in, float *out, int tiles, int pending) {
  ATTNC_DYN_SMEM(sm);
  float *stage = (float *)sm;
  int t = attnc_tid(), n = attnc_nthreads(), b = attnc_bid();
  const float *base = in + (size_t)b * tiles * n * 4;
  for (int s = 0; s < 2; s++) {
    if (s < tiles) attnc_cp_async16(stage + 4 * (s * n + t), base + 4 * (s * n + t));
    attnc_cp_async_commit();
  }
  float acc = 0.0f;
  for (int i = 0; i < tiles; i++) {
    int next = i + 2;
    if (next < tiles) attnc_cp_async16(stage + 4 * ((next % 3) * n + t), base + 4 * (next * n + t));
    attnc_cp_async_commit();
    if (pending == 1) attnc_cp_async_wait<1>();
    else if (pending == 2) attnc_cp_async_wait<2>();
    else attnc_cp_async_wait<3>();
    attnc_sync();
    const float *r = stage + 4 * ((i % 3) * n + (t + 1) % n);
    acc += r[0] + r[1] + r[2] + r[3];
    attnc_sync(); /* the stage is refilled two iterations later */
  }
  out[b * n + t] = acc;
}
ATTNC_KERNEL void k_ring(const float *in, float *out, int tiles, int pending) { ring_body(in, out, tiles, pending); }

/* Thread t copies bytes 16t .. 16t+15 of src: min(16, nbytes - 16t) of them
   (at least 0), zero-filled; chunks past nbytes read nothing. */
ATTNC_KERNEL void k_zfill(const unsigned char *src, int nbytes, unsigned char *out) {
  ATTNC_DYN_SMEM(sm);
  int t = attnc_tid();
  int k = nbytes - 16 * t;
  k = k < 0 ? 0 : k > 16 ? 16 : k;
  attnc_cp_async16_zfill(sm + 16 * t, src + 16 * t, k);
  attnc_cp_async_wait_all();
  for (int i = 0; i < 16; i++) out[16 * t + i] = sm[16 * t + i];
}

/* ---- ldmatrix ---- */
/* Each warp copies 32 rows of 8 halves (16 bytes each) into shared memory,
   lane l passes the address of row slot[l], and every lane writes the
   registers it receives. kind: log2(num) + 3 * trans. Lanes whose address
   is not used pass a bogus one when bogus is set. */
ATTNC_KERNEL void k_ldsm(const uint16_t *rows, const int32_t *slot, int32_t *out, int kind, int bogus) {
  ATTNC_DYN_SMEM(sm);
  int tid = attnc_tid(), w = tid / 32, lane = tid % 32;
  uint16_t *s = (uint16_t *)sm + w * 256;
  const uint16_t *g = rows + (attnc_bid() * (attnc_nthreads() / 32) + w) * 256;
  for (int i = 0; i < 8; i++) s[lane * 8 + i] = g[lane * 8 + i];
  attnc_sync();
  int num = 1 << (kind % 3), used = lane < 8 * num;
  const void *p = (bogus && !used) ? (const void *)(uintptr_t)1 : (const void *)(s + 8 * slot[lane]);
  int32_t r[4] = {0x7eadbeef, 0x7eadbeef, 0x7eadbeef, 0x7eadbeef};
  switch (kind) {
    case 0: attnc_ldmatrix_x1(r, p); break;
    case 1: attnc_ldmatrix_x2(r, p); break;
    case 2: attnc_ldmatrix_x4(r, p); break;
    case 3: attnc_ldmatrix_x1_trans(r, p); break;
    case 4: attnc_ldmatrix_x2_trans(r, p); break;
    default: attnc_ldmatrix_x4_trans(r, p); break;
  }
  int32_t *o = out + 4 * (attnc_bid() * attnc_nthreads() + tid);
  for (int i = 0; i < 4; i++) o[i] = r[i];
}

/* One 16x16 by 16x8 tile per warp (as mma_tile in the emulator tests),
   staged with cp.async and loaded with ldmatrix. A is row-major 16x16; B is
   given as (k, n) row-major 16x8 and as its transpose Bt, (n, k) 8x16.
   mode 0: B from Bt with ldmatrix_x2; 1: B from B with ldmatrix_x2_trans;
   2: as 0, but A's address pattern swaps its matrices 1 and 2 (the rows
   8-15 and the columns 8-15 of the tile). */
ATTNC_DEV void ldsm_mma_tile(const uint16_t *A, const uint16_t *B, const uint16_t *Bt, const float *C, float *D,
                             int bf16, int mode) {
  ATTNC_DYN_SMEM(sm);
  int tid = attnc_tid(), w = tid / 32, lane = tid % 32, g = lane >> 2, t = lane % 4;
  int tile = attnc_bid() * (attnc_nthreads() / 32) + w;
  uint16_t *sa = (uint16_t *)sm + w * 512; /* A: 256 halves, B: 128, Bt: 128 */
  uint16_t *sb = sa + 256, *sbt = sb + 128;
  attnc_cp_async16(sa + 8 * lane, A + tile * 256 + 8 * lane);
  if (lane < 16) attnc_cp_async16(sb + 8 * lane, B + tile * 128 + 8 * lane);
  else attnc_cp_async16(sbt + 8 * (lane - 16), Bt + tile * 128 + 8 * (lane - 16));
  attnc_cp_async_commit();
  attnc_cp_async_wait<0>();
  attnc_sync();
  int32_t af[4], bf[2];
  if (mode == 2) attnc_ldmatrix_x4(af, sa + 16 * (lane % 8 + 8 * (lane / 16)) + 8 * ((lane / 8) % 2));
  else attnc_ldmatrix_x4(af, sa + 16 * (lane % 16) + 8 * (lane / 16));
  if (mode == 1) attnc_ldmatrix_x2_trans(bf, sb + 8 * (lane % 16));
  else attnc_ldmatrix_x2(bf, sbt + 16 * (lane % 8) + 8 * ((lane / 8) % 2));
  const float *c = C + tile * 128;
  float *d = D + tile * 128;
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  if (bf16) attnc_mma_bf16(acc, af, bf);
  else attnc_mma_f16(acc, af, bf);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
ATTNC_KERNEL void k_ldsm_mma_f16(const uint16_t *A, const uint16_t *B, const uint16_t *Bt, const float *C, float *D,
                                 int mode) {
  ldsm_mma_tile(A, B, Bt, C, D, 0, mode);
}
ATTNC_KERNEL void k_ldsm_mma_bf16(const uint16_t *A, const uint16_t *B, const uint16_t *Bt, const float *C, float *D,
                                  int mode) {
  ldsm_mma_tile(A, B, Bt, C, D, 1, mode);
}

/* Misuse the emulator must reject. */
ATTNC_KERNEL void k_async_bad(const float *in, int which) {
  ATTNC_DYN_SMEM(sm);
  int lane = attnc_tid() % 32;
  int32_t r[4];
  switch (which) {
    case 0: attnc_cp_async16(sm + 4, in); break;              /* misaligned destination */
    case 1: attnc_cp_async16((void *)in, in); break;          /* destination in global memory */
    case 2: attnc_cp_async16(sm, in + 1); break;              /* misaligned source */
    case 3: attnc_cp_async16_zfill(sm, in, 17); break;        /* src_bytes > 16 */
    case 4: attnc_cp_async16(sm + 128, in); break;            /* past the 128 bytes of shared memory */
    case 5: attnc_ldmatrix_x4(r, sm + 16 * lane + 8); break;  /* misaligned row */
    case 6: attnc_ldmatrix_x2(r, sm + 16 * lane); break;      /* lanes 8..15 reach past 128 bytes */
    case 7: if (lane < 16) attnc_ldmatrix_x1(r, sm); break;   /* half the warp */
  }
  attnc_cp_async_wait_all();
}

#ifndef ATTNC_NO_HOST
extern "C" int launch_stage(const float *in, float *out, int n, int grid, int mode, void *stream) {
  ATTNC_LAUNCH(k_stage, grid, n, 16 * n, stream, in, out, mode);
  return attnc_last_error();
}
extern "C" int launch_ring(const float *in, float *out, int n, int grid, int tiles, int pending, void *stream) {
  ATTNC_LAUNCH(k_ring, grid, n, 3 * 16 * n, stream, in, out, tiles, pending);
  return attnc_last_error();
}
extern "C" int launch_zfill(const unsigned char *src, int nbytes, unsigned char *out, int n, void *stream) {
  ATTNC_LAUNCH(k_zfill, 1, n, 16 * n, stream, src, nbytes, out);
  return attnc_last_error();
}
extern "C" int launch_ldsm(const uint16_t *rows, const int32_t *slot, int32_t *out, int kind, int bogus, int warps,
                           int grid, void *stream) {
  ATTNC_LAUNCH(k_ldsm, grid, 32 * warps, 512 * warps, stream, rows, slot, out, kind, bogus);
  return attnc_last_error();
}
extern "C" int launch_ldsm_mma(const uint16_t *A, const uint16_t *B, const uint16_t *Bt, const float *C, float *D,
                               int bf16, int mode, int warps, int grid, void *stream) {
  if (bf16) ATTNC_LAUNCH(k_ldsm_mma_bf16, grid, 32 * warps, 1024 * warps, stream, A, B, Bt, C, D, mode);
  else ATTNC_LAUNCH(k_ldsm_mma_f16, grid, 32 * warps, 1024 * warps, stream, A, B, Bt, C, D, mode);
  return attnc_last_error();
}
extern "C" int launch_async_bad(const float *in, int which, void *stream) {
  ATTNC_LAUNCH(k_async_bad, 1, 32, 128, stream, in, which);
  return attnc_last_error();
}
#endif
#ifdef ATTNC_EMULATE
extern "C" const char *emu_message(int32_t unused) { (void)unused; return attnc_emu_last_message(); }
#endif
`

// nanCount counts NaNs in xs.
func nanCount(xs []float32) int {
	n := 0
	for _, x := range xs {
		if x != x {
			n++
		}
	}
	return n
}

func TestEmuCpAsyncStage(t *testing.T) {
	l := emuLib(t, asyncKernels)
	const n, grid = 64, 3
	in := cpurt.F32Buffer(seq(4 * n * grid))
	out := cpurt.NewBuffer(4 * 4 * n * grid)
	defer func() { in.Free(); out.Free() }()
	for _, c := range []struct {
		mode int64
		name string
	}{{0, "wait, barrier, read"}, {1, "no wait"}, {2, "no barrier after the wait"}} {
		for i := range out.F32() {
			out.F32()[i] = -1
		}
		if rc := emutest.Call(t, l, "launch_stage", in.Ptr(), out.Ptr(), n, grid, c.mode, 0); rc != 0 {
			t.Fatalf("%s: launch_stage = %d: %s", c.name, rc, l.CallStr("emu_message", 0))
		}
		bad := 0
		for b := 0; b < grid; b++ {
			for th := 0; th < n; th++ {
				for i := 0; i < 4; i++ {
					want := in.F32()[4*(b*n+(th+1)%n)+i]
					if got := out.F32()[4*(b*n+th)+i]; got != want {
						bad++
					}
				}
			}
		}
		switch {
		case c.mode == 0 && bad != 0:
			t.Errorf("%s: %d wrong values", c.name, bad)
		case c.mode != 0 && bad == 0:
			t.Errorf("%s: every value right, want the missing synchronization caught", c.name)
		case c.mode != 0:
			t.Logf("%s: caught (%d of %d values wrong, %d NaN)", c.name, bad, 4*n*grid, nanCount(out.F32()))
		}
	}
}

func TestEmuCpAsyncRing(t *testing.T) {
	l := emuLib(t, asyncKernels)
	const n, grid, tiles = 32, 2, 7
	r := rand.New(rand.NewSource(3))
	xs := make([]float32, grid*tiles*n*4)
	for i := range xs {
		xs[i] = float32(r.Intn(64) - 32)
	}
	in := cpurt.F32Buffer(xs)
	out := cpurt.NewBuffer(4 * n * grid)
	defer func() { in.Free(); out.Free() }()
	want := make([]float32, n*grid) // sums of small integers: exact in f32
	for b := 0; b < grid; b++ {
		for th := 0; th < n; th++ {
			for i := 0; i < tiles; i++ {
				for k := 0; k < 4; k++ {
					want[b*n+th] += xs[((b*tiles+i)*n+(th+1)%n)*4+k]
				}
			}
		}
	}
	for _, pending := range []int64{1, 2, 3} {
		if rc := emutest.Call(t, l, "launch_ring", in.Ptr(), out.Ptr(), n, grid, tiles, pending, 0); rc != 0 {
			t.Fatalf("wait_group %d: launch_ring = %d: %s", pending, rc, l.CallStr("emu_message", 0))
		}
		bad := 0
		for i, w := range want {
			if out.F32()[i] != w {
				bad++
			}
		}
		if pending <= 2 && bad != 0 {
			t.Errorf("wait_group %d (correct): %d of %d sums wrong", pending, bad, len(want))
		}
		if pending == 3 {
			if bad == 0 {
				t.Errorf("wait_group 3 (one group too many pending): every sum right, want it caught")
			} else {
				t.Logf("wait_group 3: caught (%d of %d sums wrong, %d NaN)", bad, len(want), nanCount(out.F32()))
			}
		}
	}
}

func TestEmuCpAsyncZeroFill(t *testing.T) {
	l := emuLib(t, asyncKernels)
	const n = 16
	// 112 bytes ending at a guard page: the chunks from byte 112 on lie in
	// it, so reading any of them would fault.
	src := cpurt.NewBuffer(112)
	for i := range src.U8() {
		src.U8()[i] = byte(i + 1)
	}
	out := cpurt.NewBuffer(16 * n)
	defer func() { src.Free(); out.Free() }()
	for _, nbytes := range []int{112, 100, 1, 0} {
		for i := range out.U8() {
			out.U8()[i] = 0xAA
		}
		if rc := emutest.Call(t, l, "launch_zfill", src.Ptr(), int64(nbytes), out.Ptr(), n, 0); rc != 0 {
			t.Fatalf("nbytes %d: launch_zfill = %d: %s", nbytes, rc, l.CallStr("emu_message", 0))
		}
		for i, got := range out.U8() {
			want := byte(0)
			if i < nbytes {
				want = byte(i + 1)
			}
			if got != want {
				t.Fatalf("nbytes %d: byte %d = %#x, want %#x", nbytes, i, got, want)
			}
		}
	}
}

// ldsmWant computes, from the PTX ISA's rule (not the emulator), the
// registers lane receives from ldmatrix with num matrices, trans or not,
// when lane l of the warp passes the address of row slot[l] of rows (32
// rows of 8 halves).
func ldsmWant(rows []uint16, slot []int32, lane, num int, trans bool) [4]int32 {
	w := [4]int32{0x7eadbeef, 0x7eadbeef, 0x7eadbeef, 0x7eadbeef}
	elem := func(m, row, col int) uint32 { return uint32(rows[int(slot[8*m+row])*8+col]) }
	g, t := lane/4, lane%4
	for m := 0; m < num; m++ {
		var lo, hi uint32
		if trans {
			lo, hi = elem(m, 2*t, g), elem(m, 2*t+1, g)
		} else {
			lo, hi = elem(m, g, 2*t), elem(m, g, 2*t+1)
		}
		w[m] = int32(lo | hi<<16)
	}
	return w
}

func TestEmuLdmatrixLaneByLane(t *testing.T) {
	l := emuLib(t, asyncKernels)
	const warps, grid = 2, 2
	r := rand.New(rand.NewSource(5))
	rows := make([]uint16, grid*warps*256)
	for i := range rows {
		rows[i] = uint16(r.Intn(1 << 16))
	}
	slot := make([]int32, 32) // a permutation: lane l passes row slot[l]
	for i, p := range r.Perm(32) {
		slot[i] = int32(p)
	}
	rb, sb, ob := cpurt.U16Buffer(rows), cpurt.I32Buffer(slot), cpurt.NewBuffer(4*4*32*warps*grid)
	defer func() { rb.Free(); sb.Free(); ob.Free() }()
	for kind := 0; kind < 6; kind++ {
		num, trans := 1<<(kind%3), kind >= 3
		name := fmt.Sprintf("x%d", num)
		if trans {
			name += "_trans"
		}
		for _, bogus := range []int64{0, 1} {
			if bogus == 1 && num == 4 {
				continue // every lane's address is used
			}
			if rc := emutest.Call(t, l, "launch_ldsm", rb.Ptr(), sb.Ptr(), ob.Ptr(), int64(kind), bogus, warps, grid, 0); rc != 0 {
				t.Fatalf("%s: launch_ldsm = %d: %s", name, rc, l.CallStr("emu_message", 0))
			}
			for wi := 0; wi < warps*grid; wi++ {
				for lane := 0; lane < 32; lane++ {
					want := ldsmWant(rows[wi*256:(wi+1)*256], slot, lane, num, trans)
					got := ob.I32()[4*(wi*32+lane) : 4*(wi*32+lane)+4]
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("%s (unused addresses bogus: %d), warp %d lane %d: r[%d] = %#08x, want %#08x",
								name, bogus, wi, lane, i, uint32(got[i]), uint32(want[i]))
						}
					}
				}
			}
		}
	}
}

// runLdsmMMA runs one mode of ldsm_mma_tile on random tiles and returns the
// largest error against a float64 matmul.
func runLdsmMMA(t *testing.T, l *cpurt.Lib, bf16 bool, mode int, seed int64) float64 {
	const warps, grid = 2, 2
	tiles := warps * grid
	r := rand.New(rand.NewSource(seed))
	A, B, Bt := make([]uint16, tiles*256), make([]uint16, tiles*128), make([]uint16, tiles*128)
	C := make([]float32, tiles*128)
	for i := range A {
		A[i] = randHalf(r, bf16)
	}
	for i := range B {
		B[i] = randHalf(r, bf16)
	}
	for tile := 0; tile < tiles; tile++ {
		for k := 0; k < 16; k++ {
			for j := 0; j < 8; j++ {
				Bt[tile*128+j*16+k] = B[tile*128+k*8+j]
			}
		}
	}
	for i := range C {
		C[i] = float32(r.Intn(64)-32) / 8
	}
	ab, bb, btb, cb := cpurt.U16Buffer(A), cpurt.U16Buffer(B), cpurt.U16Buffer(Bt), cpurt.F32Buffer(C)
	db := cpurt.NewBuffer(4 * tiles * 128)
	defer func() { ab.Free(); bb.Free(); btb.Free(); cb.Free(); db.Free() }()
	isBF := int64(0)
	conv := f16ToF64
	if bf16 {
		isBF, conv = 1, bf16ToF64
	}
	if rc := emutest.Call(t, l, "launch_ldsm_mma", ab.Ptr(), bb.Ptr(), btb.Ptr(), cb.Ptr(), db.Ptr(), isBF, int64(mode), warps, grid, 0); rc != 0 {
		t.Fatalf("launch_ldsm_mma(bf16 %v, mode %d) = %d: %s", bf16, mode, rc, l.CallStr("emu_message", 0))
	}
	worst := 0.0
	for tile := 0; tile < tiles; tile++ {
		for i := 0; i < 16; i++ {
			for j := 0; j < 8; j++ {
				want := float64(C[tile*128+i*8+j])
				for k := 0; k < 16; k++ {
					want += conv(A[tile*256+i*16+k]) * conv(B[tile*128+k*8+j])
				}
				got := float64(db.F32()[tile*128+i*8+j])
				worst = math.Max(worst, math.Abs(got-want)/math.Max(1, math.Abs(want)))
				if got != got {
					worst = math.Inf(1)
				}
			}
		}
	}
	return worst
}

func TestEmuLdmatrixMMA(t *testing.T) {
	l := emuLib(t, asyncKernels)
	for _, bf16 := range []bool{false, true} {
		for mode, name := range []string{"B from Bt with ldmatrix_x2", "B with ldmatrix_x2_trans"} {
			for seed := int64(1); seed <= 2; seed++ {
				if e := runLdsmMMA(t, l, bf16, mode, seed); e > 1e-3 {
					t.Errorf("bf16 %v, %s, seed %d: error %g against the float64 matmul", bf16, name, seed, e)
				}
			}
		}
	}
	// A's fragments from the wrong matrices must not pass.
	if e := runLdsmMMA(t, l, false, 2, 1); e <= 1e-3 {
		t.Errorf("A's ldmatrix matrices 1 and 2 swapped: error %g, want the comparison to fail", e)
	} else {
		t.Logf("A's ldmatrix matrices 1 and 2 swapped: error %.3g (caught)", e)
	}
}

func TestEmuAsyncMisuseFails(t *testing.T) {
	l := emuLib(t, asyncKernels)
	in := cpurt.NewBuffer(64)
	defer in.Free()
	for which, want := range [][]string{
		{"attnc_cp_async16: shared destination", "is not 16-byte aligned"},
		{"attnc_cp_async16: destination", "outside the block's 128 bytes of dynamic shared memory"},
		{"attnc_cp_async16: global source", "is not 16-byte aligned"},
		{"attnc_cp_async16_zfill: src_bytes 17 outside 0..16"},
		{"attnc_cp_async16: destination", "outside the block's 128 bytes"},
		{"attnc_ldmatrix_x4: lane", "row address", "is not 16-byte aligned"},
		{"attnc_ldmatrix_x2: lane", "outside the block's 128 bytes"},
		{"deadlock", "attnc_ldmatrix_x1"},
	} {
		rc := emutest.Call(t, l, "launch_async_bad", in.Ptr(), int64(which), 0)
		msg := l.CallStr("emu_message", 0)
		if rc == 0 {
			t.Errorf("misuse %d: no failure, want one mentioning %q", which, want)
			continue
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("misuse %d: message %q lacks %q", which, msg, w)
			}
		}
		t.Logf("misuse %d: %s", which, msg)
	}
	// The library still works after the failures.
	out := cpurt.NewBuffer(4 * 4 * 32)
	in2 := cpurt.F32Buffer(seq(4 * 32))
	defer func() { out.Free(); in2.Free() }()
	if rc := emutest.Call(t, l, "launch_stage", in2.Ptr(), out.Ptr(), 32, 1, 0, 0); rc != 0 {
		t.Errorf("launch after failures = %d: %s", rc, l.CallStr("emu_message", 0))
	}
}

func TestAsyncPTX(t *testing.T) {
	for _, arch := range testArchs {
		t.Run(arch, func(t *testing.T) {
			ptx := compilePTX(t, asyncKernels, arch)
			for _, want := range []string{
				"cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group 0", "cp.async.wait_group 2",
				"cp.async.wait_all", "cvta.to.shared.u64",
				"ldmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
				"ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
				"ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
			} {
				if !strings.Contains(ptx, want) {
					t.Errorf("PTX lacks %q", want)
				}
			}
			if !regexp.MustCompile(`cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16, %r\d+;`).MatchString(ptx) {
				t.Errorf("PTX has no zero-filling cp.async (src-size operand)")
			}
			tools, err := sass.FindTools()
			needtool.Check(t, err)
			dir := t.TempDir()
			p := filepath.Join(dir, "k.ptx")
			if err := os.WriteFile(p, []byte(ptx), 0o644); err != nil {
				t.Fatal(err)
			}
			ks, err := sass.Assemble(tools, p, arch, filepath.Join(dir, "k.cubin"))
			if err != nil {
				t.Fatal(err)
			}
			by := map[string]sass.Kernel{}
			for _, k := range ks {
				by[k.Name] = k
			}
			for _, c := range []struct {
				kernel string
				family []string
			}{
				{"k_stage", []string{"LDGSTS", "LDGDEPBAR", "DEPBAR", "BAR"}},
				{"k_ring", []string{"LDGSTS", "LDGDEPBAR", "DEPBAR"}},
				{"k_zfill", []string{"LDGSTS", "LDGDEPBAR", "DEPBAR"}},
				{"k_ldsm", []string{"LDSM.M88", "LDSM.MT88"}},
				{"k_ldsm_mma_f16", []string{"LDGSTS", "LDSM.M88.4", "LDSM.M88.2", "HMMA"}},
				{"k_ldsm_mma_bf16", []string{"LDGSTS", "LDSM.M88.4", "HMMA"}},
			} {
				k, ok := by[c.kernel]
				if !ok {
					t.Errorf("no SASS for %s", c.kernel)
					continue
				}
				for _, f := range c.family {
					if k.Count(f) == 0 {
						t.Errorf("%s: no %s in the SASS:\n%v", c.kernel, f, k.Opcodes)
					}
				}
				if k.SpillStores != 0 || k.StackFrame != 0 {
					t.Errorf("%s: stack frame %d, spills %d", c.kernel, k.StackFrame, k.SpillStores)
				}
			}
			t.Logf("%s: %d kernels assembled; k_ldsm_mma_f16: %d registers, LDGSTS %d, LDSM %d, HMMA %d", arch,
				len(ks), by["k_ldsm_mma_f16"].Registers, by["k_ldsm_mma_f16"].Count("LDGSTS"),
				by["k_ldsm_mma_f16"].Count("LDSM"), by["k_ldsm_mma_f16"].Count("HMMA"))
		})
	}
}
