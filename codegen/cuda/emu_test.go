package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/attnc/attnc/internal/emutest"
	"github.com/attnc/attnc/internal/needtool"

	"github.com/attnc/attnc/cpurt"
	_ "github.com/attnc/attnc/internal/testgc"
)

// testKernels are hand-written kernels that use only the prelude names. The
// emulator tests run them on the CPU; prelude_test.go compiles them to PTX.
const testKernels = `
/* ---- shared memory and barriers ---- */
ATTNC_DEV void rev_body(const float *in, float *out, int n, int bar) {
  ATTNC_DYN_SMEM(sm);
  float *s = (float *)sm;
  int t = attnc_tid(), base = attnc_bid() * n;
  s[t] = in[base + t];
  if (bar) attnc_sync();
  out[base + t] = s[n - 1 - t];
}
ATTNC_KERNEL void k_rev(const float *in, float *out, int n) { rev_body(in, out, n, 1); }
ATTNC_KERNEL void k_rev_nobar(const float *in, float *out, int n) { rev_body(in, out, n, 0); }

/* Tree reduction in shared memory: each step reads what another thread wrote in the step before. */
ATTNC_DEV void tree_body(const float *in, float *out, int bar) {
  ATTNC_DYN_SMEM(sm);
  float *s = (float *)sm;
  int t = attnc_tid(), n = attnc_nthreads(), b = attnc_bid();
  s[t] = in[b * n + t];
  attnc_sync();
  for (int h = n / 2; h > 0; h /= 2) {
    if (t < h) s[t] += s[t + h];
    if (bar) attnc_sync();
  }
  if (t == 0) out[b] = s[0];
}
ATTNC_KERNEL void k_tree(const float *in, float *out) { tree_body(in, out, 1); }
ATTNC_KERNEL void k_tree_nobar(const float *in, float *out) { tree_body(in, out, 0); }

ATTNC_KERNEL void k_uninit(float *out) {
  ATTNC_DYN_SMEM(sm);
  out[attnc_bid() * attnc_nthreads() + attnc_tid()] = ((const float *)sm)[attnc_tid()];
}

ATTNC_KERNEL void k_ids(int32_t *out) {
  int i = attnc_bid() * attnc_nthreads() + attnc_tid();
  out[4 * i + 0] = attnc_tid();
  out[4 * i + 1] = attnc_bid();
  out[4 * i + 2] = attnc_nblocks();
  out[4 * i + 3] = attnc_nthreads();
}

ATTNC_KERNEL void k_fill(float *out, int bytes) {
  ATTNC_DYN_SMEM(sm);
  int t = attnc_tid(), n = attnc_nthreads();
  for (int i = t; i < bytes; i += n) sm[i] = (unsigned char)(i * 7);
  attnc_sync();
  if (t == 0) {
    uint32_t s = 0;
    for (int i = 0; i < bytes; i++) s += sm[i];
    out[0] = (float)s;
  }
}

/* ---- warp shuffles ---- */
ATTNC_KERNEL void k_warpsum(const float *x, float *out, int32_t *iout, float *bcast) {
  int i = attnc_bid() * attnc_nthreads() + attnc_tid();
  float v = x[i];
  int32_t iv = (int32_t)x[i];
  for (int m = 16; m >= 1; m >>= 1) {
    v += attnc_shfl_xor_f32(v, m);
    iv += attnc_shfl_xor_i32(iv, m);
  }
  out[i] = v;
  iout[i] = iv;
  bcast[i] = attnc_shfl_idx_f32(x[i], 5) + (float)attnc_shfl_idx_i32(attnc_tid(), 31);
}

ATTNC_KERNEL void k_divergent(float *out) {
  int t = attnc_tid();
  if (t < attnc_nthreads() / 2) attnc_sync();
  out[t] = 1.0f;
}

ATTNC_KERNEL void k_divergent_shfl(float *out) {
  int t = attnc_tid();
  float v = (float)t;
  if ((t & 31) < 16) v = attnc_shfl_xor_f32(v, 1);
  out[t] = v;
}

ATTNC_KERNEL void k_mixed_shfl(float *out) {
  int t = attnc_tid();
  float v = (float)t;
  if ((t & 31) < 16) v = attnc_shfl_xor_f32(v, 1);
  else v = attnc_shfl_idx_f32(v, 0);
  out[t] = v;
}

/* ---- tensor-core mma: one 16x16 by 16x8 tile per warp ---- */
ATTNC_DEV int32_t pack2(uint16_t lo, uint16_t hi) { return (int32_t)((uint32_t)lo | ((uint32_t)hi << 16)); }

/* Fragments per PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type". */
ATTNC_DEV void mma_tile(const uint16_t *A, const uint16_t *B, const float *C, float *D, int bf16, int bug) {
  int tid = attnc_tid();
  int tile = attnc_bid() * (attnc_nthreads() / 32) + tid / 32;
  int lane = tid % 32, g = lane >> 2, t = lane % 4;
  const uint16_t *a = A + tile * 256; /* 16x16 row-major */
  const uint16_t *b = B + tile * 128; /* 16x8 (k, n) row-major */
  const float *c = C + tile * 128;    /* 16x8 */
  float *d = D + tile * 128;
  int32_t af[4], bf[2];
  af[0] = pack2(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]);
  af[1] = pack2(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]);
  af[2] = pack2(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]);
  af[3] = pack2(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9]);
  if (bug) { /* a2,a3 and a4,a5 swapped */
    int32_t x = af[1];
    af[1] = af[2];
    af[2] = x;
  }
  bf[0] = pack2(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]);
  bf[1] = pack2(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g]);
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  if (bf16) attnc_mma_bf16(acc, af, bf);
  else attnc_mma_f16(acc, af, bf);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
ATTNC_KERNEL void k_mma_f16(const uint16_t *A, const uint16_t *B, const float *C, float *D) { mma_tile(A, B, C, D, 0, 0); }
ATTNC_KERNEL void k_mma_bf16(const uint16_t *A, const uint16_t *B, const float *C, float *D) { mma_tile(A, B, C, D, 1, 0); }
ATTNC_KERNEL void k_mma_f16_bug(const uint16_t *A, const uint16_t *B, const float *C, float *D) { mma_tile(A, B, C, D, 0, 1); }

/* ---- math and conversions ---- */
#define NMATH 12
ATTNC_KERNEL void k_math(const float *x, float *out, int n) {
  for (int i = attnc_bid() * attnc_nthreads() + attnc_tid(); i < n; i += attnc_nblocks() * attnc_nthreads()) {
    float v = x[i];
    float *o = out + i * NMATH;
    o[0] = attnc_exp(v);
    o[1] = attnc_log(v);
    o[2] = attnc_exp2(v);
    o[3] = attnc_tanh(v);
    o[4] = attnc_sqrt(v);
    o[5] = attnc_floor(v);
    o[6] = attnc_sin(v);
    o[7] = attnc_cos(v);
    o[8] = attnc_fabs(v);
    o[9] = attnc_fmax(v, 0.5f);
    o[10] = attnc_fmin(v, 0.5f);
    o[11] = attnc_fma(v, 3.0f, attnc_i32_as_f32(attnc_f32_as_i32(1.25f)));
  }
}

ATTNC_KERNEL void k_cvt(const uint16_t *h, float *from_f16, float *from_bf16, const float *f, uint16_t *to_f16,
                        uint16_t *to_bf16, int32_t *pk_f16, int32_t *pk_bf16, int n) {
  for (int i = attnc_bid() * attnc_nthreads() + attnc_tid(); i < n; i += attnc_nblocks() * attnc_nthreads()) {
    from_f16[i] = attnc_f16_to_f32(h[i]);
    from_bf16[i] = attnc_bf16_to_f32(h[i]);
    to_f16[i] = attnc_f32_to_f16(f[i]);
    to_bf16[i] = attnc_f32_to_bf16(f[i]);
    float hi = f[(i + 1) % n];
    pk_f16[i] = attnc_pack_f16x2(f[i], hi);
    pk_bf16[i] = attnc_pack_bf16x2(f[i], hi);
  }
}

/* ---- load: shared memory rotation with barriers and shuffles ---- */
ATTNC_KERNEL void k_work(const float *in, float *out, int iters) {
  ATTNC_DYN_SMEM(sm);
  float *s = (float *)sm;
  int t = attnc_tid(), n = attnc_nthreads(), b = attnc_bid();
  float v = in[b * n + t];
  for (int it = 0; it < iters; it++) {
    s[t] = v;
    attnc_sync();
    v = s[(t + 1) % n];
    float w = v;
    for (int m = 16; m >= 1; m >>= 1) w += attnc_shfl_xor_f32(w, m);
    v += 0.0f * w;
    attnc_sync();
  }
  out[b * n + t] = v;
}

#ifndef ATTNC_NO_HOST
extern "C" int launch_rev(const float *in, float *out, int n, int grid, int bar, void *stream) {
  if (bar) ATTNC_LAUNCH(k_rev, grid, n, n * sizeof(float), stream, in, out, n);
  else ATTNC_LAUNCH(k_rev_nobar, grid, n, n * sizeof(float), stream, in, out, n);
  return attnc_last_error();
}
extern "C" int launch_tree(const float *in, float *out, int n, int grid, int bar, void *stream) {
  if (bar) ATTNC_LAUNCH(k_tree, grid, n, n * sizeof(float), stream, in, out);
  else ATTNC_LAUNCH(k_tree_nobar, grid, n, n * sizeof(float), stream, in, out);
  return attnc_last_error();
}
extern "C" int launch_uninit(float *out, int n, int grid, void *stream) {
  ATTNC_LAUNCH(k_uninit, grid, n, n * sizeof(float), stream, out);
  return attnc_last_error();
}
extern "C" int launch_ids(int32_t *out, int n, int grid, void *stream) {
  ATTNC_LAUNCH(k_ids, grid, n, 0, stream, out);
  return attnc_last_error();
}
extern "C" int launch_fill(float *out, int bytes, int optin, void *stream) {
  if (optin) {
    int e = attnc_set_smem((const void *)k_fill, bytes);
    if (e) {
      attnc_last_error(); /* the failed call is also the last error: clear it */
      return 1000 + e;
    }
  }
  ATTNC_LAUNCH(k_fill, 1, 128, bytes, stream, out, bytes);
  return attnc_last_error();
}
extern "C" int launch_warpsum(const float *x, float *out, int32_t *iout, float *bcast, int n, int grid, void *stream) {
  ATTNC_LAUNCH(k_warpsum, grid, n, 0, stream, x, out, iout, bcast);
  return attnc_last_error();
}
extern "C" int launch_divergent(float *out, int n, int which, void *stream) {
  if (which == 0) ATTNC_LAUNCH(k_divergent, 1, n, 0, stream, out);
  else if (which == 1) ATTNC_LAUNCH(k_divergent_shfl, 1, n, 0, stream, out);
  else ATTNC_LAUNCH(k_mixed_shfl, 1, n, 0, stream, out);
  return attnc_last_error();
}
extern "C" int launch_mma(const uint16_t *A, const uint16_t *B, const float *C, float *D, int kind, int warps, int grid,
                          void *stream) {
  if (kind == 0) ATTNC_LAUNCH(k_mma_f16, grid, 32 * warps, 0, stream, A, B, C, D);
  else if (kind == 1) ATTNC_LAUNCH(k_mma_bf16, grid, 32 * warps, 0, stream, A, B, C, D);
  else ATTNC_LAUNCH(k_mma_f16_bug, grid, 32 * warps, 0, stream, A, B, C, D);
  return attnc_last_error();
}
extern "C" int launch_math(const float *x, float *out, int n, void *stream) {
  ATTNC_LAUNCH(k_math, 2, 64, 0, stream, x, out, n);
  return attnc_last_error();
}
extern "C" int launch_cvt(const uint16_t *h, float *a, float *b, const float *f, uint16_t *c, uint16_t *d, int32_t *e,
                          int32_t *g, int n, void *stream) {
  ATTNC_LAUNCH(k_cvt, 8, 128, 0, stream, h, a, b, f, c, d, e, g, n);
  return attnc_last_error();
}
extern "C" int launch_work(const float *in, float *out, int n, int grid, int iters, void *stream) {
  ATTNC_LAUNCH(k_work, grid, n, n * sizeof(float), stream, in, out, iters);
  return attnc_last_error();
}
/* Through device scratch: reverse in into scratch, then back into out. */
extern "C" int launch_scratch(const float *in, float *out, float *raw, int n, void *stream) {
  void *p = 0;
  if (attnc_alloc(&p, n * sizeof(float), stream)) return -1;
  ATTNC_LAUNCH(k_rev, 1, n, n * sizeof(float), stream, (const float *)p, raw, n); /* unwritten scratch */
  ATTNC_LAUNCH(k_rev, 1, n, n * sizeof(float), stream, in, (float *)p, n);
  ATTNC_LAUNCH(k_rev, 1, n, n * sizeof(float), stream, (const float *)p, out, n);
  int e = attnc_last_error();
  if (attnc_free(p, stream)) return -2;
  return e;
}
extern "C" int num_sms(void) { return attnc_num_sms(); }
#endif
#ifdef ATTNC_EMULATE
extern "C" const char *emu_message(int32_t unused) { (void)unused; return attnc_emu_last_message(); }
#endif
`

// needTool returns the tool's path, or skips the test (fails it when
// CI=true) when the tool is missing.
func needTool(t testing.TB, what string, find func() (string, error)) string {
	t.Helper()
	p, err := find()
	if err != nil {
		needtool.Check(t, fmt.Errorf("%s not found: %w", what, err))
	}
	return p
}

// libs are the emulator libraries of this test binary.
var libs = emutest.Libs{Prefix: "attnc-emu-test-", Ext: ".cu", Compile: CompileEmulated}

func TestMain(m *testing.M) {
	code := m.Run()
	libs.Close()
	os.Exit(code)
}

// emuLib compiles Prelude+src for the emulator once per (src, flags) and
// returns the loaded library.
func emuLib(t testing.TB, src string, extra ...string) *cpurt.Lib {
	t.Helper()
	needTool(t, "g++", GXX)
	return libs.Get(t, Prelude+src, extra...)
}

func seq(n int) []float32 {
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(i) + 0.5
	}
	return xs
}

func TestEmuBlockReverse(t *testing.T) {
	l := emuLib(t, testKernels)
	const n, grid = 128, 3
	in := cpurt.F32Buffer(seq(n * grid))
	defer in.Free()
	for _, bar := range []int64{1, 0} {
		out := cpurt.NewBuffer(4 * n * grid)
		if rc := emutest.Call(t, l, "launch_rev", in.Ptr(), out.Ptr(), n, grid, bar, 0); rc != 0 {
			t.Fatalf("bar=%d: launch_rev = %d: %s", bar, rc, l.CallStr("emu_message", 0))
		}
		wrong := 0
		for b := 0; b < grid; b++ {
			for i := 0; i < n; i++ {
				if out.F32()[b*n+i] != in.F32()[b*n+n-1-i] {
					wrong++
				}
			}
		}
		out.Free()
		if bar == 1 && wrong != 0 {
			t.Errorf("with the barrier: %d wrong outputs", wrong)
		}
		if bar == 0 && wrong == 0 {
			t.Errorf("without the barrier the output is still right: the emulator missed the missing barrier")
		}
		t.Logf("bar=%d: %d of %d outputs wrong", bar, wrong, n*grid)
	}
}

// A missing barrier in a tree reduction reads partial sums of the next
// level; reverse order alone would run it correctly, alternating phases do
// not.
func TestEmuTreeReduction(t *testing.T) {
	l := emuLib(t, testKernels)
	const n, grid = 128, 4
	in := cpurt.F32Buffer(seq(n * grid))
	defer in.Free()
	for _, bar := range []int64{1, 0} {
		out := cpurt.NewBuffer(4 * grid)
		if rc := emutest.Call(t, l, "launch_tree", in.Ptr(), out.Ptr(), n, grid, bar, 0); rc != 0 {
			t.Fatalf("launch_tree = %d: %s", rc, l.CallStr("emu_message", 0))
		}
		wrong := 0
		for b := 0; b < grid; b++ {
			var want float32
			for i := 0; i < n; i++ {
				want += in.F32()[b*n+i]
			}
			if out.F32()[b] != want {
				wrong++
			}
		}
		out.Free()
		if bar == 1 && wrong != 0 {
			t.Errorf("with barriers: %d wrong sums", wrong)
		}
		if bar == 0 && wrong == 0 {
			t.Errorf("without barriers every sum is right: the emulator missed the missing barriers")
		}
	}
}

func TestEmuSharedMemoryStartsAsNaN(t *testing.T) {
	l := emuLib(t, testKernels)
	const n, grid = 64, 2
	out := cpurt.NewBuffer(4 * n * grid)
	defer out.Free()
	if rc := emutest.Call(t, l, "launch_uninit", out.Ptr(), n, grid, 0); rc != 0 {
		t.Fatalf("launch_uninit = %d", rc)
	}
	for i, v := range out.F32() {
		if math.Float32bits(v) != 0xffffffff {
			t.Fatalf("out[%d] = %#x, want the 0xFF fill", i, math.Float32bits(v))
		}
	}
}

func TestEmuThreadAndBlockIDs(t *testing.T) {
	l := emuLib(t, testKernels)
	const n, grid = 96, 7
	out := cpurt.NewBuffer(4 * 4 * n * grid)
	defer out.Free()
	if rc := emutest.Call(t, l, "launch_ids", out.Ptr(), n, grid, 0); rc != 0 {
		t.Fatalf("launch_ids = %d", rc)
	}
	ids := out.I32()
	for b := 0; b < grid; b++ {
		for i := 0; i < n; i++ {
			got := ids[4*(b*n+i) : 4*(b*n+i)+4]
			if got[0] != int32(i) || got[1] != int32(b) || got[2] != grid || got[3] != n {
				t.Fatalf("block %d thread %d: (tid, bid, nblocks, nthreads) = %v", b, i, got)
			}
		}
	}
}

func TestEmuWarpShuffle(t *testing.T) {
	l := emuLib(t, testKernels)
	const n, grid = 128, 2 // 4 warps per block
	r := rand.New(rand.NewSource(1))
	xs := make([]float32, n*grid)
	for i := range xs {
		xs[i] = float32(r.Intn(2001) - 1000)
	}
	x := cpurt.F32Buffer(xs)
	out, iout, bc := cpurt.NewBuffer(4*n*grid), cpurt.NewBuffer(4*n*grid), cpurt.NewBuffer(4*n*grid)
	defer func() { x.Free(); out.Free(); iout.Free(); bc.Free() }()
	if rc := emutest.Call(t, l, "launch_warpsum", x.Ptr(), out.Ptr(), iout.Ptr(), bc.Ptr(), n, grid, 0); rc != 0 {
		t.Fatalf("launch_warpsum = %d: %s", rc, l.CallStr("emu_message", 0))
	}
	for w := 0; w < n*grid/32; w++ {
		var sum float64
		for l := 0; l < 32; l++ {
			sum += float64(xs[w*32+l])
		}
		for lane := 0; lane < 32; lane++ {
			i := w*32 + lane
			if float64(out.F32()[i]) != sum || float64(iout.I32()[i]) != sum {
				t.Fatalf("warp %d lane %d: sum %v / %v, want %v", w, lane, out.F32()[i], iout.I32()[i], sum)
			}
			want := xs[w*32+5] + float32((w%(n/32))*32+31)
			if bc.F32()[i] != want {
				t.Fatalf("warp %d lane %d: broadcast %v, want %v", w, lane, bc.F32()[i], want)
			}
		}
	}
}

// ---- half precision references ----

func f16ToF64(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e, m := int(h>>10)&0x1f, float64(h&0x3ff)
	switch e {
	case 0:
		return s * math.Ldexp(m, -24)
	case 31:
		if m == 0 {
			return math.Inf(int(s))
		}
		return math.NaN()
	}
	return s * math.Ldexp(1+m/1024, e-15)
}

func bf16ToF64(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }

// f32ToF16Ref rounds to nearest even by searching the table of all finite
// halves.
func f32ToF16Ref(x float32) uint16 {
	if x != x {
		return 0x7e00
	}
	var sign uint16
	a := float64(x)
	if math.Signbit(a) {
		sign, a = 0x8000, -a
	}
	if a >= 65520 {
		return sign | 0x7c00
	}
	// largest h in [0, 0x7bff] with value <= a
	h := sort.Search(0x7c00, func(h int) bool { return f16ToF64(uint16(h)) > a }) - 1
	lo := f16ToF64(uint16(h))
	hi := 65536.0
	if h < 0x7bff {
		hi = f16ToF64(uint16(h + 1))
	}
	switch dl, dh := a-lo, hi-a; {
	case dh < dl, dh == dl && h&1 == 1:
		h++
	}
	return sign | uint16(h)
}

func f32ToBF16Ref(x float32) uint16 {
	if x != x {
		return 0x7fc0
	}
	b := math.Float32bits(x)
	lo := uint16(b >> 16)
	a := math.Abs(float64(x))
	dl := a - math.Abs(bf16ToF64(lo))
	dh := math.Abs(bf16ToF64(lo+1)) - a
	if lo&0x7fff == 0x7f7f { // next is inf: the midpoint is 2^128 - 2^119
		dh = math.Ldexp(1, 128) - a
	}
	if dh < dl || (dh == dl && lo&1 == 1) {
		lo++
	}
	return lo
}

func TestEmuConversions(t *testing.T) {
	l := emuLib(t, testKernels)
	const n = 1 << 16
	hs := make([]uint16, n)
	for i := range hs {
		hs[i] = uint16(i)
	}
	// floats: halves, exact midpoints between halves, random bits, specials
	r := rand.New(rand.NewSource(2))
	fs := make([]float32, n)
	for i := range fs {
		switch i % 4 {
		case 0:
			fs[i] = float32(f16ToF64(uint16(r.Intn(0x7c00)) | uint16(r.Intn(2))<<15))
		case 1:
			h := uint16(r.Intn(0x7bff))
			fs[i] = float32((f16ToF64(h) + f16ToF64(h+1)) / 2)
		case 2:
			fs[i] = math.Float32frombits(r.Uint32())
		case 3:
			fs[i] = math.Float32frombits(uint32(r.Intn(1<<23)) | uint32(96+r.Intn(64))<<23)
		}
	}
	specials := []float32{0, float32(math.Copysign(0, -1)), 65504, 65519.99, 65520, -65520, 1e-8, 2.9802322e-08,
		2.9802326e-08, 5.9604645e-08, 6.1035156e-05, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		3.3961776e38, 3.4028235e38, 1.0039062, 1.0117188}
	copy(fs, specials)
	hb, fb := cpurt.U16Buffer(hs), cpurt.F32Buffer(fs)
	o16, obf := cpurt.NewBuffer(4*n), cpurt.NewBuffer(4*n)
	to16, tobf := cpurt.NewBuffer(2*n), cpurt.NewBuffer(2*n)
	pk16, pkbf := cpurt.NewBuffer(4*n), cpurt.NewBuffer(4*n)
	defer func() {
		for _, b := range []*cpurt.Buffer{hb, fb, o16, obf, to16, tobf, pk16, pkbf} {
			b.Free()
		}
	}()
	if rc := emutest.Call(t, l, "launch_cvt", hb.Ptr(), o16.Ptr(), obf.Ptr(), fb.Ptr(), to16.Ptr(), tobf.Ptr(), pk16.Ptr(),
		pkbf.Ptr(), n, 0); rc != 0 {
		t.Fatalf("launch_cvt = %d", rc)
	}
	same := func(got float32, want float64) bool {
		if want != want {
			return got != got
		}
		return math.Float32bits(got) == math.Float32bits(float32(want))
	}
	for i := 0; i < n; i++ {
		if !same(o16.F32()[i], f16ToF64(uint16(i))) {
			t.Fatalf("f16 %#04x -> %v, want %v", i, o16.F32()[i], f16ToF64(uint16(i)))
		}
		if !same(obf.F32()[i], bf16ToF64(uint16(i))) {
			t.Fatalf("bf16 %#04x -> %v, want %v", i, obf.F32()[i], bf16ToF64(uint16(i)))
		}
	}
	isNaN16 := func(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }
	isNaNbf := func(h uint16) bool { return h&0x7f80 == 0x7f80 && h&0x7f != 0 }
	for i, f := range fs {
		got, want := to16.U16()[i], f32ToF16Ref(f)
		if got != want && !(isNaN16(got) && isNaN16(want)) {
			t.Fatalf("f32 %v (%#08x) -> f16 %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
		got, want = tobf.U16()[i], f32ToBF16Ref(f)
		if got != want && !(isNaNbf(got) && isNaNbf(want)) {
			t.Fatalf("f32 %v (%#08x) -> bf16 %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
		j := (i + 1) % n
		if p := uint32(pk16.I32()[i]); p != uint32(to16.U16()[i])|uint32(to16.U16()[j])<<16 {
			t.Fatalf("pack_f16x2(%v, %v) = %#08x", f, fs[j], p)
		}
		if p := uint32(pkbf.I32()[i]); p != uint32(tobf.U16()[i])|uint32(tobf.U16()[j])<<16 {
			t.Fatalf("pack_bf16x2(%v, %v) = %#08x", f, fs[j], p)
		}
	}
}

// randHalf returns a random f16 or bf16 bit pattern with magnitude in
// [1/8, 4).
func randHalf(r *rand.Rand, bf16 bool) uint16 {
	s := uint16(r.Intn(2)) << 15
	if bf16 {
		return s | uint16(124+r.Intn(4))<<7 | uint16(r.Intn(128))
	}
	return s | uint16(12+r.Intn(4))<<10 | uint16(r.Intn(1024))
}

// runMMA runs kind (0 f16, 1 bf16, 2 f16 with swapped fragments) on random
// tiles and returns the largest error against a float64 matmul.
func runMMA(t *testing.T, l *cpurt.Lib, kind int, seed int64) float64 {
	const warps, grid = 2, 2
	tiles := warps * grid
	bf16 := kind == 1
	r := rand.New(rand.NewSource(seed))
	A, B := make([]uint16, tiles*256), make([]uint16, tiles*128)
	C := make([]float32, tiles*128)
	for i := range A {
		A[i] = randHalf(r, bf16)
	}
	for i := range B {
		B[i] = randHalf(r, bf16)
	}
	for i := range C {
		C[i] = float32(r.Intn(64)-32) / 8
	}
	ab, bb, cb, db := cpurt.U16Buffer(A), cpurt.U16Buffer(B), cpurt.F32Buffer(C), cpurt.NewBuffer(4*tiles*128)
	defer func() { ab.Free(); bb.Free(); cb.Free(); db.Free() }()
	if rc := emutest.Call(t, l, "launch_mma", ab.Ptr(), bb.Ptr(), cb.Ptr(), db.Ptr(), int64(kind), warps, grid, 0); rc != 0 {
		t.Fatalf("launch_mma(%d) = %d: %s", kind, rc, l.CallStr("emu_message", 0))
	}
	conv := f16ToF64
	if bf16 {
		conv = bf16ToF64
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
			}
		}
	}
	return worst
}

func TestEmuMMA(t *testing.T) {
	l := emuLib(t, testKernels)
	for kind, name := range []string{"f16", "bf16"} {
		for seed := int64(1); seed <= 3; seed++ {
			if e := runMMA(t, l, kind, seed); e > 1e-3 {
				t.Errorf("%s seed %d: error %g against the float64 matmul", name, seed, e)
			}
		}
	}
	// A kernel that loads a2,a3 where a4,a5 belong must not pass.
	if e := runMMA(t, l, 2, 1); e <= 1e-3 {
		t.Errorf("swapped A fragments: error %g, want the comparison to fail", e)
	} else {
		t.Logf("swapped A fragments: error %.3g (caught)", e)
	}
}

func TestEmuDivergenceFails(t *testing.T) {
	l := emuLib(t, testKernels)
	out := cpurt.NewBuffer(4 * 128)
	defer out.Free()
	cases := []struct {
		name   string
		which  int64
		n      int64
		expect []string
	}{
		{"half the threads at attnc_sync", 0, 128, []string{"deadlock", "attnc_sync", "returned"}},
		{"half the lanes in a shuffle", 1, 64, []string{"deadlock", "attnc_shfl_xor", "returned"}},
		{"lanes in different shuffles", 2, 64, []string{"different warp operations"}},
	}
	for _, c := range cases {
		rc := emutest.Call(t, l, "launch_divergent", out.Ptr(), c.n, c.which, 0)
		msg := l.CallStr("emu_message", 0)
		if rc == 0 {
			t.Errorf("%s: attnc_last_error() = 0, want a failure", c.name)
			continue
		}
		for _, s := range c.expect {
			if !strings.Contains(msg, s) {
				t.Errorf("%s: message %q lacks %q", c.name, msg, s)
			}
		}
		t.Logf("%s: error %d: %s", c.name, rc, msg)
	}
	// Partial warp: 48 threads shuffle.
	x, o1, o2, o3 := cpurt.NewBuffer(4*48), cpurt.NewBuffer(4*48), cpurt.NewBuffer(4*48), cpurt.NewBuffer(4*48)
	defer func() { x.Free(); o1.Free(); o2.Free(); o3.Free() }()
	if rc := emutest.Call(t, l, "launch_warpsum", x.Ptr(), o1.Ptr(), o2.Ptr(), o3.Ptr(), 48, 1, 0); rc == 0 {
		t.Errorf("shuffle in a 48-thread block: no error")
	} else if msg := l.CallStr("emu_message", 0); !strings.Contains(msg, "partial warp") {
		t.Errorf("partial warp message: %q", msg)
	}
	// The error was consumed and the library still works.
	in := cpurt.F32Buffer(seq(64))
	defer in.Free()
	if rc := emutest.Call(t, l, "launch_rev", in.Ptr(), out.Ptr(), 64, 1, 1, 0); rc != 0 {
		t.Errorf("launch after failures = %d", rc)
	}
}

func TestEmuSharedMemoryLimit(t *testing.T) {
	l := emuLib(t, testKernels)
	out := cpurt.NewBuffer(4)
	defer out.Free()
	sum := func(bytes int) float32 {
		var s uint32
		for i := 0; i < bytes; i++ {
			s += uint32(byte(i * 7))
		}
		return float32(s)
	}
	// The limit is a per-kernel attribute that outlives launches (the library
	// is shared between tests): set it back to the default first.
	if rc := emutest.Call(t, l, "launch_fill", out.Ptr(), 48*1024, 1, 0); rc != 0 || out.F32()[0] != sum(48*1024) {
		t.Errorf("48 KiB: rc %d, sum %v want %v", rc, out.F32()[0], sum(48*1024))
	}
	if rc := emutest.Call(t, l, "launch_fill", out.Ptr(), 64*1024, 0, 0); rc == 0 {
		t.Errorf("64 KiB without attnc_set_smem: no error")
	}
	if rc := emutest.Call(t, l, "launch_fill", out.Ptr(), 100*1024, 1, 0); rc != 0 || out.F32()[0] != sum(100*1024) {
		t.Errorf("100 KiB after attnc_set_smem: rc %d, sum %v want %v", rc, out.F32()[0], sum(100*1024))
	}
	if rc := emutest.Call(t, l, "launch_fill", out.Ptr(), 300*1024, 1, 0); rc < 1000 {
		t.Errorf("attnc_set_smem(300 KiB): rc %d, want its error", rc)
	}
	if rc := emutest.Call(t, l, "launch_fill", out.Ptr(), 100*1024, 0, 0); rc != 0 {
		t.Errorf("100 KiB after an earlier opt-in: rc %d", rc)
	}
}

func TestEmuHostAPI(t *testing.T) {
	l := emuLib(t, testKernels)
	if n := emutest.Call(t, l, "num_sms"); n != 4 {
		t.Errorf("attnc_num_sms() = %d, want 4", n)
	}
	const n = 256
	in := cpurt.F32Buffer(seq(n))
	out, raw := cpurt.NewBuffer(4*n), cpurt.NewBuffer(4*n)
	defer func() { in.Free(); out.Free(); raw.Free() }()
	if rc := emutest.Call(t, l, "launch_scratch", in.Ptr(), out.Ptr(), raw.Ptr(), n, 0); rc != 0 {
		t.Fatalf("launch_scratch = %d", rc)
	}
	for i := 0; i < n; i++ {
		if out.F32()[i] != in.F32()[i] {
			t.Fatalf("out[%d] = %v, want %v", i, out.F32()[i], in.F32()[i])
		}
		if math.Float32bits(raw.F32()[i]) != 0xffffffff {
			t.Fatalf("unwritten scratch[%d] = %#x, want the 0xFF fill", i, math.Float32bits(raw.F32()[i]))
		}
	}
}

func TestEmuMath(t *testing.T) {
	l := emuLib(t, testKernels)
	xs := []float32{float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()), 0, float32(math.Copysign(0, -1)),
		1e-30, 1e-3, 0.25, 0.5, 1, 2.5, -3, -0.7, 10, -10, 88, -100, 1000.5, 12345.678, -54321}
	n := len(xs)
	x := cpurt.F32Buffer(xs)
	out := cpurt.NewBuffer(4 * n * 12)
	defer func() { x.Free(); out.Free() }()
	if rc := emutest.Call(t, l, "launch_math", x.Ptr(), out.Ptr(), int64(n), 0); rc != 0 {
		t.Fatalf("launch_math = %d", rc)
	}
	fns := []struct {
		name string
		f    func(float64) float64
	}{
		{"exp", math.Exp}, {"log", math.Log}, {"exp2", math.Exp2}, {"tanh", math.Tanh}, {"sqrt", math.Sqrt},
		{"floor", math.Floor}, {"sin", math.Sin}, {"cos", math.Cos}, {"fabs", math.Abs},
		{"fmax", func(v float64) float64 { return math.Max(v, 0.5) }},
		{"fmin", func(v float64) float64 { return math.Min(v, 0.5) }},
		{"fma", func(v float64) float64 { return v*3 + 1.25 }},
	}
	for i, v := range xs {
		for j, fn := range fns {
			got := float64(out.F32()[i*12+j])
			want := float64(float32(fn.f(float64(v))))
			if fn.name == "fmax" || fn.name == "fmin" {
				if v != v { // fmaxf(NaN, 0.5) = 0.5
					want = 0.5
				}
			}
			switch {
			case want != want:
				if got == got {
					t.Errorf("%s(%v) = %v, want NaN", fn.name, v, got)
				}
			case math.IsInf(want, 0) || want == 0:
				if got != want || math.Signbit(got) != math.Signbit(want) && fn.name != "sin" && fn.name != "tanh" {
					t.Errorf("%s(%v) = %v, want %v", fn.name, v, got, want)
				}
			default:
				if math.Abs(got-want) > 2e-7*math.Max(1, math.Abs(want)) {
					t.Errorf("%s(%v) = %v, want %v", fn.name, v, got, want)
				}
			}
		}
	}
	// The specials the kernels rely on.
	if got := out.F32()[0*12+0]; got != 0 {
		t.Errorf("exp(-inf) = %v", got)
	}
	if got := out.F32()[3*12+1]; !math.IsInf(float64(got), -1) {
		t.Errorf("log(0) = %v", got)
	}
}

func TestEmuSpeed(t *testing.T) {
	l := emuLib(t, testKernels)
	const n, grid, iters = 128, 64, 4
	in := cpurt.F32Buffer(seq(n * grid))
	out := cpurt.NewBuffer(4 * n * grid)
	defer func() { in.Free(); out.Free() }()
	emutest.Call(t, l, "launch_work", in.Ptr(), out.Ptr(), n, grid, 1, 0) // warm up: threads, stacks
	start := time.Now()
	rc := emutest.Call(t, l, "launch_work", in.Ptr(), out.Ptr(), n, grid, iters, 0)
	el := time.Since(start)
	if rc != 0 {
		t.Fatalf("launch_work = %d: %s", rc, l.CallStr("emu_message", 0))
	}
	for b := 0; b < grid; b++ {
		for i := 0; i < n; i++ {
			if want := in.F32()[b*n+(i+iters)%n]; out.F32()[b*n+i] != want {
				t.Fatalf("block %d thread %d: %v, want %v", b, i, out.F32()[b*n+i], want)
			}
		}
	}
	t.Logf("%d blocks x %d threads, %d barriers and %d shuffles per thread: %v", grid, n, 2*iters, 5*iters, el)
	if el > 500*time.Millisecond {
		t.Errorf("took %v, want well under a second", el)
	}
}

// The ucontext fallback (used off x86-64) runs the same kernels.
func TestEmuUcontextFallback(t *testing.T) {
	l := emuLib(t, testKernels, "-DATTNC_EMU_UCONTEXT")
	const n, grid = 128, 3
	in := cpurt.F32Buffer(seq(n * grid))
	out := cpurt.NewBuffer(4 * n * grid)
	defer func() { in.Free(); out.Free() }()
	if rc := emutest.Call(t, l, "launch_work", in.Ptr(), out.Ptr(), n, grid, 3, 0); rc != 0 {
		t.Fatalf("launch_work = %d", rc)
	}
	for i := 0; i < n*grid; i++ {
		b, j := i/n, i%n
		if want := in.F32()[b*n+(j+3)%n]; out.F32()[i] != want {
			t.Fatalf("out[%d] = %v, want %v", i, out.F32()[i], want)
		}
	}
	if e := runMMA(t, l, 1, 7); e > 1e-3 {
		t.Errorf("bf16 mma error %g", e)
	}
	if rc := emutest.Call(t, l, "launch_divergent", out.Ptr(), 64, 0, 0); rc == 0 {
		t.Errorf("divergent barrier not reported")
	}
}

func TestEmuDir(t *testing.T) {
	dir, err := EmuDir()
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(dir) {
		t.Errorf("EmuDir() = %q, not absolute", dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, EmuHeaderName))
	if err != nil || string(b) != string(EmuHeader()) {
		t.Errorf("%s/%s differs from the embedded header (%v)", dir, EmuHeaderName, err)
	}
	tmp := t.TempDir()
	if err := WriteEmuHeader(tmp); err != nil {
		t.Fatal(err)
	}
	if err := WriteEmuHeader(tmp); err != nil { // again: unchanged
		t.Fatal(err)
	}
	b, err = os.ReadFile(filepath.Join(tmp, EmuHeaderName))
	if err != nil || string(b) != string(EmuHeader()) {
		t.Errorf("WriteEmuHeader wrote something else (%v)", err)
	}
	ents, _ := os.ReadDir(tmp)
	if len(ents) != 1 {
		t.Errorf("WriteEmuHeader left %d files", len(ents))
	}
}

func TestCompileEmulatedReportsErrors(t *testing.T) {
	needTool(t, "g++", GXX)
	dir := t.TempDir()
	cu := filepath.Join(dir, "bad.cu")
	os.WriteFile(cu, []byte(Prelude+"ATTNC_KERNEL void k(float *o) { o[0] = attnc_no_such_function(); }\n"), 0o644)
	err := CompileEmulated(cu, filepath.Join(dir, "bad.so"))
	if err == nil || !strings.Contains(err.Error(), "attnc_no_such_function") {
		t.Errorf("CompileEmulated error = %v, want the compiler's message", err)
	}
}

// Launches from several goroutines at once share the library's schedulers
// and stay correct.
func TestEmuConcurrentLaunches(t *testing.T) {
	l := emuLib(t, testKernels)
	const n, grid, iters, callers = 64, 16, 5, 4
	in := cpurt.F32Buffer(seq(n * grid))
	defer in.Free()
	var wg sync.WaitGroup
	errs := make(chan string, callers)
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := cpurt.NewBuffer(4 * n * grid)
			defer out.Free()
			for rep := 0; rep < 5; rep++ {
				if rc, err := l.Call("launch_work", in.Ptr(), out.Ptr(), n, grid, iters, 0); err != nil || rc != 0 {
					errs <- fmt.Sprintf("launch_work = %d, %v", rc, err)
					return
				}
				for i := 0; i < n*grid; i++ {
					b, j := i/n, i%n
					if want := in.F32()[b*n+(j+iters)%n]; out.F32()[i] != want {
						errs <- fmt.Sprintf("out[%d] = %v, want %v", i, out.F32()[i], want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
