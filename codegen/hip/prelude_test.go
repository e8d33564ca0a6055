package hip

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/emutest"
	"github.com/attnc/attnc/internal/needtool"
	_ "github.com/attnc/attnc/internal/testgc"
)

// testKernels are hand-written kernels that use only the HIP prelude's
// names. The emulator tests run them on the CPU with 64-lane warps; the
// gfx942 tests compile them with clang.
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

ATTNC_KERNEL void k_ids(int32_t *out) {
  int i = attnc_bid() * attnc_nthreads() + attnc_tid();
  out[4 * i + 0] = attnc_tid();
  out[4 * i + 1] = attnc_bid();
  out[4 * i + 2] = attnc_nblocks();
  out[4 * i + 3] = attnc_nthreads();
}

/* ---- wavefront shuffles: butterfly over all 64 lanes, then broadcasts ---- */
ATTNC_KERNEL void k_wavesum(const float *x, float *out, int32_t *iout, float *bcast) {
  int i = attnc_bid() * attnc_nthreads() + attnc_tid();
  float v = x[i];
  int32_t iv = (int32_t)x[i];
  for (int m = 32; m >= 1; m >>= 1) {
    v += attnc_shfl_xor_f32(v, m);
    iv += attnc_shfl_xor_i32(iv, m);
  }
  out[i] = v;
  iout[i] = iv;
  bcast[i] = attnc_shfl_idx_f32(x[i], 37) + (float)attnc_shfl_idx_i32(attnc_tid(), 63);
}

/* A 32-lane butterfly (CUDA's) leaves two half sums in a 64-lane wavefront. */
ATTNC_KERNEL void k_halfsum(const float *x, float *out) {
  int i = attnc_bid() * attnc_nthreads() + attnc_tid();
  float v = x[i];
  for (int m = 16; m >= 1; m >>= 1) v += attnc_shfl_xor_f32(v, m);
  out[i] = v;
}

/* ---- MFMA 16x16x16: one tile per wavefront ---- */
ATTNC_DEV int32_t pack2(uint16_t lo, uint16_t hi) { return (int32_t)((uint32_t)lo | ((uint32_t)hi << 16)); }

/* A 16x16 (m, k) and B 16x16 (k, n) row-major, C and D 16x16. With
   j = lane % 16 and g = lane / 16 a lane holds A[j][4g+r], B[4g+r][j] and
   D[4g+r][j], r = 0..3. */
ATTNC_DEV void mfma_tile(const uint16_t *A, const uint16_t *B, const float *C, float *D, int bf16, int bug) {
  int tid = attnc_tid();
  int tile = attnc_bid() * (attnc_nthreads() / 64) + tid / 64;
  int lane = tid % 64, j = lane % 16, g = lane / 16;
  const uint16_t *a = A + tile * 256, *b = B + tile * 256;
  const float *c = C + tile * 256;
  float *d = D + tile * 256;
  int32_t af[2], bf[2];
  af[0] = pack2(a[j * 16 + 4 * g], a[j * 16 + 4 * g + 1]);
  af[1] = pack2(a[j * 16 + 4 * g + 2], a[j * 16 + 4 * g + 3]);
  if (bug) { /* NVIDIA's habit: k pairs 2t, 2t+1 instead of runs of four */
    af[0] = pack2(a[j * 16 + 2 * g], a[j * 16 + 2 * g + 1]);
    af[1] = pack2(a[j * 16 + 2 * g + 8], a[j * 16 + 2 * g + 9]);
  }
  bf[0] = pack2(b[(4 * g) * 16 + j], b[(4 * g + 1) * 16 + j]);
  bf[1] = pack2(b[(4 * g + 2) * 16 + j], b[(4 * g + 3) * 16 + j]);
  float acc[4];
  for (int r = 0; r < 4; r++) acc[r] = c[(4 * g + r) * 16 + j];
  if (bf16) attnc_mfma_bf16(acc, af, bf);
  else attnc_mfma_f16(acc, af, bf);
  for (int r = 0; r < 4; r++) d[(4 * g + r) * 16 + j] = acc[r];
}
ATTNC_KERNEL void k_mfma_f16(const uint16_t *A, const uint16_t *B, const float *C, float *D) { mfma_tile(A, B, C, D, 0, 0); }
ATTNC_KERNEL void k_mfma_bf16(const uint16_t *A, const uint16_t *B, const float *C, float *D) { mfma_tile(A, B, C, D, 1, 0); }
ATTNC_KERNEL void k_mfma_f16_bug(const uint16_t *A, const uint16_t *B, const float *C, float *D) { mfma_tile(A, B, C, D, 0, 1); }

/* ---- copies: "async" copies complete at once, zfill zero-fills ---- */
ATTNC_KERNEL void k_copy(const float *in, float *out, int src_bytes) {
  ATTNC_DYN_SMEM(sm);
  int t = attnc_tid();
  attnc_cp_async16(sm + 16 * t, in + 4 * t);
  attnc_cp_async16_zfill(sm + 16 * (attnc_nthreads() + t), in + 4 * t, src_bytes);
  attnc_cp_async_commit();
  attnc_cp_async_wait<0>();
  attnc_cp_async_wait_all();
  attnc_sync();
  int n = attnc_nthreads();
  for (int e = 0; e < 4; e++) {
    out[4 * t + e] = ((const float *)sm)[4 * (n - 1 - t) + e];
    out[4 * (n + t) + e] = ((const float *)sm)[4 * (n + t) + e];
  }
}

/* ---- math and conversions (compiled, for gfx942) ---- */
ATTNC_KERNEL void k_math(const float *x, float *out, const uint16_t *h, int n) {
  for (int i = attnc_bid() * attnc_nthreads() + attnc_tid(); i < n; i += attnc_nblocks() * attnc_nthreads()) {
    float v = x[i];
    float *o = out + i * 16;
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
    o[12] = attnc_f16_to_f32(h[i]) + attnc_bf16_to_f32(h[i]);
    o[13] = (float)(attnc_f32_to_f16(v) + attnc_f32_to_bf16(v));
    o[14] = (float)(attnc_pack_f16x2(v, 1.0f) ^ attnc_pack_bf16x2(v, 2.0f));
  }
}

ATTNC_KERNEL void __launch_bounds__(256, 2) k_bounded(float *out) { out[attnc_tid()] = 1.0f; }

/* ---- parameters read where they are used ---- */
ATTNC_KERNEL void k_args(const float *__restrict__ a, int32_t n, float *__restrict__ out) {
  for (int32_t i = attnc_tid(); i < ATTNC_ARG(int32_t, 8, n); i += 64)
    ATTNC_ARG(float *, 16, out)[i] = 2.0f * ATTNC_ARG(const float *, 0, a)[i];
}

extern "C" int launch_rev(const float *in, float *out, int n, int grid, int bar, void *stream) {
  if (bar) ATTNC_LAUNCH(k_rev, grid, n, n * sizeof(float), stream, in, out, n);
  else ATTNC_LAUNCH(k_rev_nobar, grid, n, n * sizeof(float), stream, in, out, n);
  return attnc_last_error();
}
extern "C" int launch_ids(int32_t *out, int n, int grid, void *stream) {
  ATTNC_LAUNCH(k_ids, grid, n, 0, stream, out);
  return attnc_last_error();
}
extern "C" int launch_wavesum(const float *x, float *out, int32_t *iout, float *bcast, int n, int grid, void *stream) {
  ATTNC_LAUNCH(k_wavesum, grid, n, 0, stream, x, out, iout, bcast);
  return attnc_last_error();
}
extern "C" int launch_halfsum(const float *x, float *out, int n, void *stream) {
  ATTNC_LAUNCH(k_halfsum, 1, n, 0, stream, x, out);
  return attnc_last_error();
}
extern "C" int launch_mfma(const uint16_t *A, const uint16_t *B, const float *C, float *D, int kind, int waves, int grid,
                           void *stream) {
  if (kind == 0) ATTNC_LAUNCH(k_mfma_f16, grid, 64 * waves, 0, stream, A, B, C, D);
  else if (kind == 1) ATTNC_LAUNCH(k_mfma_bf16, grid, 64 * waves, 0, stream, A, B, C, D);
  else ATTNC_LAUNCH(k_mfma_f16_bug, grid, 64 * waves, 0, stream, A, B, C, D);
  return attnc_last_error();
}
extern "C" int launch_copy(const float *in, float *out, int n, int src_bytes, void *stream) {
  ATTNC_LAUNCH(k_copy, 1, n, 32 * n, stream, in, out, src_bytes);
  return attnc_last_error();
}
extern "C" int launch_smem(const float *in, float *out, int n, int bytes, void *stream) {
  if (attnc_set_smem((const void *)k_rev, bytes) != 0) return 1000 + attnc_last_error();
  ATTNC_LAUNCH(k_rev, 1, n, bytes, stream, in, out, n);
  return attnc_last_error();
}
extern "C" int num_sms(void) { return attnc_num_sms(); }
#ifdef ATTNC_EMULATE
extern "C" const char *emu_message(int32_t unused) { (void)unused; return attnc_emu_last_message(); }
#endif
`

func needClang(t testing.TB) string {
	t.Helper()
	p, err := Clang()
	if err != nil {
		needtool.Check(t, fmt.Errorf("clang++-19 not found: %w", err))
	}
	return p
}

// compileISA writes Prelude+src into a temporary directory and compiles it
// for arch, returning the assembly.
func compileISA(t *testing.T, src, arch string) string {
	t.Helper()
	needClang(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "k.hip")
	if err := os.WriteFile(in, []byte(Prelude+src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "k.s")
	if _, err := CompileISA(in, out, arch); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var amdhsaKernelRE = regexp.MustCompile(`(?m)^\s*\.amdhsa_kernel\s+(\w+)`)

func TestPreludeGfx942(t *testing.T) {
	asm := compileISA(t, testKernels, "gfx942")
	for _, want := range []string{
		".amdgcn_target \"amdgcn-amd-amdhsa--gfx942\"",
		"v_mfma_f32_16x16x16_f16", "v_mfma_f32_16x16x16_bf16",
		"ds_bpermute_b32", "s_barrier",
		"v_exp_f32", "v_log_f32", "v_sin_f32", "v_cos_f32", "v_sqrt_f32",
		"v_cvt_f32_f16", "v_cvt_f16_f32",
		".wavefront_size: 64",
	} {
		if !strings.Contains(asm, want) {
			t.Errorf("assembly lacks %q", want)
		}
	}
	// Everything is defined: no calls (-nogpulib would leave them unresolved).
	for _, bad := range []string{"s_swappc_b64", "s_setpc_b64", "__ocml_", "__ockl_"} {
		if strings.Contains(asm, bad) {
			t.Errorf("assembly calls out (%s)", bad)
		}
	}
	kernels := map[string]bool{}
	for _, m := range amdhsaKernelRE.FindAllStringSubmatch(asm, -1) {
		kernels[m[1]] = true
	}
	for _, k := range regexp.MustCompile(`ATTNC_KERNEL void (?:__launch_bounds__\([^)]*\) )?(\w+)`).FindAllStringSubmatch(testKernels, -1) {
		if !kernels[k[1]] {
			t.Errorf("no kernel %s (extern \"C\" __global__) in the assembly", k[1])
		}
	}
	// ATTNC_ARG reads the argument segment at the offset it is given, as
	// a scalar load inside the loop (the compiler may not hoist it).
	body := regexp.MustCompile(`(?s)\nk_args:(.*?)\.Lfunc_end`).FindStringSubmatch(asm)
	if body == nil {
		t.Fatal("no code for k_args")
	}
	for _, want := range []string{`s_load_dwordx2 s\[\d+:\d+\], s\[\d+:\d+\], 0x0\n`, `s_load_dword s\d+, s\[\d+:\d+\], 0x8\n`,
		`s_load_dwordx2 s\[\d+:\d+\], s\[\d+:\d+\], 0x10\n`} {
		if !regexp.MustCompile(`(?s)\.LBB\d+_\d+:.*` + want).MatchString(body[1]) {
			t.Errorf("k_args: no %s in a loop block", want)
		}
	}
	// __launch_bounds__ has HIP's meaning: at most 256 work-items, at least
	// two waves per EU.
	if !regexp.MustCompile(`(?s)\.name:\s+k_bounded.*?\.max_flat_workgroup_size: 256`).MatchString(asm) &&
		!regexp.MustCompile(`(?s)\.max_flat_workgroup_size: 256.*?\.name:\s+k_bounded`).MatchString(asm) {
		t.Errorf("k_bounded: no .max_flat_workgroup_size: 256 in its metadata")
	}
}

// The host side compiles without HIP headers: the launchers call the
// prelude's hipLaunchKernel, and clang's kernel stubs find it too.
func TestPreludeHostSide(t *testing.T) {
	clang := needClang(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "k.hip")
	if err := os.WriteFile(in, []byte(Prelude+testKernels), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "k.ll")
	cmd := exec.Command(clang, "-x", "hip", "--offload-arch=gfx942", "-nogpulib", "-nogpuinc", "--cuda-host-only",
		"-O1", "-S", "-emit-llvm", "-o", out, in)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ll := string(b)
	for _, want := range []string{
		"@hipLaunchKernel(", "@hipFuncSetAttribute(", "@hipGetLastError(", "@hipDeviceGetAttribute(",
		" @launch_rev(", "@__hipRegisterFunction(",
	} {
		if !strings.Contains(ll, want) {
			t.Errorf("host IR lacks %q", want)
		}
	}
}

// ---- the emulator with 64-lane warps ----

// libs are the emulator libraries of this test binary.
var libs = emutest.Libs{Prefix: "attnc-hip-emu-test-", Ext: ".hip", Compile: CompileEmulated}

func TestMain(m *testing.M) {
	code := m.Run()
	libs.Close()
	os.Exit(code)
}

// emuLib compiles Prelude+src for the emulator once and returns the
// loaded library.
func emuLib(t testing.TB, src string) *cpurt.Lib {
	t.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		needtool.Check(t, fmt.Errorf("g++ not found: %w", err))
	}
	return libs.Get(t, Prelude+src)
}

func TestEmuBarrier(t *testing.T) {
	l := emuLib(t, testKernels)
	const n, grid = 128, 3
	xs := make([]float32, n*grid)
	for i := range xs {
		xs[i] = float32(i) + 0.5
	}
	in := cpurt.F32Buffer(xs)
	defer in.Free()
	for _, bar := range []int64{1, 0} {
		out := cpurt.NewBuffer(4 * n * grid)
		if rc := emutest.Call(t, l, "launch_rev", in.Ptr(), out.Ptr(), n, grid, bar, 0); rc != 0 {
			t.Fatalf("launch_rev = %d: %s", rc, l.CallStr("emu_message", 0))
		}
		wrong := 0
		for i, v := range out.F32() {
			if v != xs[i/n*n+n-1-i%n] {
				wrong++
			}
		}
		out.Free()
		if (bar == 1) != (wrong == 0) {
			t.Errorf("bar=%d: %d wrong outputs", bar, wrong)
		}
	}
}

func TestEmuIDs(t *testing.T) {
	l := emuLib(t, testKernels)
	const n, grid = 192, 5
	out := cpurt.NewBuffer(4 * 4 * n * grid)
	defer out.Free()
	if rc := emutest.Call(t, l, "launch_ids", out.Ptr(), n, grid, 0); rc != 0 {
		t.Fatalf("launch_ids = %d", rc)
	}
	ids := out.I32()
	for i := 0; i < n*grid; i++ {
		if got := ids[4*i : 4*i+4]; got[0] != int32(i%n) || got[1] != int32(i/n) || got[2] != grid || got[3] != n {
			t.Fatalf("work-item %d: (tid, bid, nblocks, nthreads) = %v", i, got)
		}
	}
}

// Shuffles span the 64 lanes of a wavefront: a butterfly from mask 32 sums
// all 64, one from mask 16 (a CUDA warp's) only its half, and an index
// shuffle reads lanes 37 and 63.
func TestEmuWave64Shuffle(t *testing.T) {
	l := emuLib(t, testKernels)
	const n, grid = 256, 2 // 4 wavefronts per block
	r := rand.New(rand.NewSource(1))
	xs := make([]float32, n*grid)
	for i := range xs {
		xs[i] = float32(r.Intn(2001) - 1000)
	}
	x := cpurt.F32Buffer(xs)
	out, iout, bc, half := cpurt.NewBuffer(4*n*grid), cpurt.NewBuffer(4*n*grid), cpurt.NewBuffer(4*n*grid), cpurt.NewBuffer(4*n)
	defer func() { x.Free(); out.Free(); iout.Free(); bc.Free(); half.Free() }()
	if rc := emutest.Call(t, l, "launch_wavesum", x.Ptr(), out.Ptr(), iout.Ptr(), bc.Ptr(), n, grid, 0); rc != 0 {
		t.Fatalf("launch_wavesum = %d: %s", rc, l.CallStr("emu_message", 0))
	}
	for w := 0; w < n*grid/64; w++ {
		var sum float64
		for l := 0; l < 64; l++ {
			sum += float64(xs[w*64+l])
		}
		for lane := 0; lane < 64; lane++ {
			i := w*64 + lane
			if float64(out.F32()[i]) != sum || float64(iout.I32()[i]) != sum {
				t.Fatalf("wavefront %d lane %d: sum %v / %v, want %v", w, lane, out.F32()[i], iout.I32()[i], sum)
			}
			if want := xs[w*64+37] + float32((w%(n/64))*64+63); bc.F32()[i] != want {
				t.Fatalf("wavefront %d lane %d: broadcast %v, want %v", w, lane, bc.F32()[i], want)
			}
		}
	}
	if rc := emutest.Call(t, l, "launch_halfsum", x.Ptr(), half.Ptr(), n, 0); rc != 0 {
		t.Fatalf("launch_halfsum = %d: %s", rc, l.CallStr("emu_message", 0))
	}
	for i := 0; i < n; i++ {
		var sum float32
		for l := i &^ 31; l < i&^31+32; l++ {
			sum += xs[l]
		}
		if half.F32()[i] != sum {
			t.Fatalf("lane %d: 32-lane butterfly gave %v, want the half-wavefront sum %v", i, half.F32()[i], sum)
		}
	}
}

// A wavefront operation in a block of 32 work-items (half a wavefront) fails
// the launch.
func TestEmuPartialWavefrontFails(t *testing.T) {
	l := emuLib(t, testKernels)
	x, out := cpurt.F32Buffer(make([]float32, 32)), cpurt.NewBuffer(4*32)
	defer func() { x.Free(); out.Free() }()
	os.Setenv("ATTNC_EMU_QUIET", "1")
	defer os.Unsetenv("ATTNC_EMU_QUIET")
	if rc := emutest.Call(t, l, "launch_halfsum", x.Ptr(), out.Ptr(), 32, 0); rc == 0 {
		t.Fatalf("a shuffle in a 32-thread block ran")
	}
	if msg := l.CallStr("emu_message", 0); !strings.Contains(msg, "need all 64 lanes") {
		t.Errorf("message %q", msg)
	}
}

func halfToF64(h uint16, bf16 bool) float64 {
	if bf16 {
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e, m := int(h>>10)&0x1f, float64(h&0x3ff)
	if e == 0 {
		return s * math.Ldexp(m, -24)
	}
	return s * math.Ldexp(1+m/1024, e-15)
}

// runMFMA runs kind (0 f16, 1 bf16, 2 f16 with NVIDIA-style A fragments) on
// random tiles and returns the largest error against a float64 matmul.
func runMFMA(t *testing.T, l *cpurt.Lib, kind int, seed int64) float64 {
	const waves, grid = 2, 2
	tiles := waves * grid
	bf16 := kind == 1
	r := rand.New(rand.NewSource(seed))
	rnd := func() uint16 {
		s := uint16(r.Intn(2)) << 15
		if bf16 {
			return s | uint16(124+r.Intn(4))<<7 | uint16(r.Intn(128))
		}
		return s | uint16(12+r.Intn(4))<<10 | uint16(r.Intn(1024))
	}
	A, B, C := make([]uint16, tiles*256), make([]uint16, tiles*256), make([]float32, tiles*256)
	for i := range A {
		A[i], B[i], C[i] = rnd(), rnd(), float32(r.Intn(64)-32)/8
	}
	ab, bb, cb, db := cpurt.U16Buffer(A), cpurt.U16Buffer(B), cpurt.F32Buffer(C), cpurt.NewBuffer(4*tiles*256)
	defer func() { ab.Free(); bb.Free(); cb.Free(); db.Free() }()
	if rc := emutest.Call(t, l, "launch_mfma", ab.Ptr(), bb.Ptr(), cb.Ptr(), db.Ptr(), int64(kind), waves, grid, 0); rc != 0 {
		t.Fatalf("launch_mfma(%d) = %d: %s", kind, rc, l.CallStr("emu_message", 0))
	}
	worst := 0.0
	for tile := 0; tile < tiles; tile++ {
		for i := 0; i < 16; i++ {
			for j := 0; j < 16; j++ {
				want := float64(C[tile*256+i*16+j])
				for k := 0; k < 16; k++ {
					want += halfToF64(A[tile*256+i*16+k], bf16) * halfToF64(B[tile*256+k*16+j], bf16)
				}
				got := float64(db.F32()[tile*256+i*16+j])
				worst = math.Max(worst, math.Abs(got-want)/math.Max(1, math.Abs(want)))
			}
		}
	}
	return worst
}

func TestEmuMFMA(t *testing.T) {
	l := emuLib(t, testKernels)
	for kind, name := range []string{"f16", "bf16"} {
		for seed := int64(1); seed <= 3; seed++ {
			if e := runMFMA(t, l, kind, seed); e > 1e-3 {
				t.Errorf("%s seed %d: error %g against the float64 matmul", name, seed, e)
			}
		}
	}
	if e := runMFMA(t, l, 2, 1); e <= 1e-3 {
		t.Errorf("NVIDIA-style A fragments: error %g, want the comparison to fail", e)
	}
}

// The copies complete when they return (no wait needed for the data, the
// barrier publishes it); zfill copies src_bytes and zeroes the rest; a
// block may use all 64 KiB of LDS and no more.
func TestEmuCopiesAndLDS(t *testing.T) {
	l := emuLib(t, testKernels)
	const n = 128
	xs := make([]float32, 4*n)
	for i := range xs {
		xs[i] = float32(i) + 0.25
	}
	in := cpurt.F32Buffer(xs)
	defer in.Free()
	for _, sb := range []int64{16, 8, 0} {
		out := cpurt.NewBuffer(4 * 8 * n)
		if rc := emutest.Call(t, l, "launch_copy", in.Ptr(), out.Ptr(), n, sb, 0); rc != 0 {
			t.Fatalf("launch_copy = %d: %s", rc, l.CallStr("emu_message", 0))
		}
		got := out.F32()
		for tt := 0; tt < n; tt++ {
			for e := 0; e < 4; e++ {
				if want := xs[4*(n-1-tt)+e]; got[4*tt+e] != want {
					t.Fatalf("src_bytes %d: copy[%d][%d] = %v, want %v", sb, tt, e, got[4*tt+e], want)
				}
				want := float32(0)
				if int64(4*e) < sb {
					want = xs[4*tt+e]
				}
				if got[4*(n+tt)+e] != want {
					t.Fatalf("src_bytes %d: zfill[%d][%d] = %v, want %v", sb, tt, e, got[4*(n+tt)+e], want)
				}
			}
		}
		out.Free()
	}
	out := cpurt.NewBuffer(4 * 64)
	defer out.Free()
	if rc := emutest.Call(t, l, "launch_smem", in.Ptr(), out.Ptr(), 64, 64<<10, 0); rc != 0 {
		t.Errorf("64 KiB of LDS: %d: %s", rc, l.CallStr("emu_message", 0))
	}
	os.Setenv("ATTNC_EMU_QUIET", "1")
	defer os.Unsetenv("ATTNC_EMU_QUIET")
	if rc := emutest.Call(t, l, "launch_smem", in.Ptr(), out.Ptr(), 64, 64<<10+16, 0); rc == 0 {
		t.Errorf("64 KiB + 16 bytes of LDS accepted")
	}
}

// The CUDA-only names are not there with 64-lane warps: a HIP kernel that
// used ldmatrix or mma.m16n8k16 does not compile for the emulator.
func TestEmuHasNoNVIDIANames(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		needtool.Check(t, fmt.Errorf("g++ not found: %w", err))
	}
	dir := t.TempDir()
	for _, name := range []string{"attnc_mma_f16", "attnc_ldmatrix_x4_trans"} { // one of each kind: a g++ run each
		src := fmt.Sprintf("ATTNC_KERNEL void k(void) { (void)&%s; }\n", name)
		in := filepath.Join(dir, name+".hip")
		if err := os.WriteFile(in, []byte(Prelude+src), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := CompileEmulated(in, filepath.Join(dir, name+".so")); err == nil {
			t.Errorf("%s is defined in the HIP emulator build", name)
		}
	}
}
