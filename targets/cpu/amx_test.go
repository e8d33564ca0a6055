package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/amxemu"
	"github.com/attnc/attnc/internal/lltest"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/enum"
)

// amxLevel is the x86-64 level with AMX tiles.
const amxLevel = "x86-64-amx"

// overrideFunc replaces the definition of the internal function @name in
// ll by one with body (the original stays, renamed @name.hw and unused):
// tests make a CPU without AMX look like one with it, which no product
// switch can.
func overrideFunc(t *testing.T, ll, name, ret, body string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^define internal ` + regexp.QuoteMeta(ret) + ` @` + regexp.QuoteMeta(name) + `\(\)`)
	if len(re.FindAllStringIndex(ll, -1)) != 1 {
		t.Fatalf("no single definition of @%s() in the .ll", name)
	}
	ll = re.ReplaceAllLiteralString(ll, "define internal "+ret+" @"+name+".hw()")
	return ll + fmt.Sprintf("\ndefine internal %s @%s() {\nentry:\n\t%s\n}\n", ret, name, body)
}

// TestCPULevelAMX runs <prefix>_cpu_level in fresh processes. Detection
// picks x86-64-amx where the CPU has AMX and the OS grants the tile state
// (when it refuses, x86-64-v4-bf16 on an AMD CPU, x86-64-v4 on another's),
// never elsewhere: here, and with detect_level overridden to report AMX
// and amx_permit to grant or refuse. Forced, a library with the clone
// runs it only where the CPU has AMX and the OS grants the tile state
// (overridden: granted runs 4, refused the level below, 3), and refuses
// it (-1, NULL) on a CPU without AMX; a library without the clone runs
// x86-64-v4 (no level falls back to x86-64-v4-bf16: fallsTo) wherever the
// CPU runs that.
func TestCPULevelAMX(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" {
		t.Skip("the levels tested are x86-64's")
	}
	tc := lltest.NeedToolchain(t)
	lvl := levelProbe()
	clone := func(l string) *ir.Kernel {
		return &ir.Kernel{Name: "k" + strings.ReplaceAll("_"+l, "-", "_"), Role: ir.RoleDecode, Level: l, Body: lltest.Blk(lltest.Ret(ir.Int(0)))}
	}
	driver := levelProbeDriver
	flags := lltest.CPUInfoFlags()
	v4 := flags["avx512f"] && flags["avx512bw"] && flags["avx512dq"] && flags["avx512vl"] && flags["avx512cd"] && flags["avx2"] && flags["fma"]
	hasBF16 := v4 && flags["avx512_bf16"]
	hasAMX := hasBF16 && flags["amx_tile"] && flags["amx_bf16"]
	// Detection takes x86-64-v4-bf16 on AMD's CPUs only (Vendor), and
	// x86-64-v4 elsewhere, also when the tile state is refused.
	amd := hostVendor(t) == vendorAMD
	bf16Auto, bf16AutoIndex := "x86-64-v4", 2
	if amd {
		bf16Auto, bf16AutoIndex = bf16Level, 3
	}
	os.Unsetenv(LevelEnv)
	run := func(exe string, env ...string) map[string]string {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", env, err)
		}
		return lltest.Results(t, string(out))
	}
	want := func(what string, r map[string]string, name string, index int) {
		t.Helper()
		if r["name"] != name || r["index"] != fmt.Sprint(index) {
			t.Errorf("%s: %v, want %s (%d)", what, r, name, index)
		}
	}
	forced := LevelEnv + "=" + amxLevel
	for _, c := range []struct {
		name   string
		clones []string
	}{{"amx+bf16", []string{bf16Level, amxLevel}}, {"bf16", []string{bf16Level}}, {"none", nil}} {
		ks := []*ir.Kernel{lvl}
		// A library with DotBF16 clones has k's clones at every level
		// below too (multiversion; the runtime numbers the levels of
		// the module's clones).
		if len(c.clones) > 0 {
			ks = append(ks, clone("x86-64"), clone("x86-64-v3"), clone("x86-64-v4"))
		}
		for _, l := range c.clones {
			ks = append(ks, clone(l))
		}
		m := lltest.Module("lvl", ks...)
		ll, err := emitLL(m, Arches[0])
		if err != nil {
			t.Fatal(err)
		}
		withAMX := len(c.clones) == 2
		if strings.Contains(ll, ".amx_permit") != withAMX {
			t.Errorf("%s: the .ll has amx_permit: %v", c.name, !withAMX)
		}
		exe := tc.Build(t, ll, driver).Exe
		if r := run(exe); withAMX && hasAMX {
			// Granted on Linux >= 5.16 with AMX.
			want(c.name+", detected on an AMX CPU", r, amxLevel, 4)
		} else if r["name"] == amxLevel || r["index"] == "4" {
			t.Errorf("%s: detection picked %s: %v", c.name, amxLevel, r)
		} else if len(c.clones) > 0 && hasBF16 {
			want(c.name+", detected", r, bf16Auto, bf16AutoIndex)
		}
		r := run(exe, forced)
		switch {
		case withAMX && hasAMX:
			// Granted on Linux >= 5.16 with AMX.
			want(c.name+", forced on an AMX CPU", r, amxLevel, 4)
		case withAMX:
			want(c.name+", forced on a CPU without AMX", r, "(null)", -1)
		case v4:
			// Without the clone, with a bf16 clone or without: no
			// level falls back to x86-64-v4-bf16 (fallsTo), since AMX
			// CPUs are Intel's, where vdpbf16ps does not pay.
			want(c.name+", forced, no clone", r, "x86-64-v4", 2)
		}
		if !withAMX {
			continue
		}
		// detect_level overridden to report AMX (index 4); amx_permit to
		// grant or refuse the tile state.
		for _, granted := range []bool{true, false} {
			fake := overrideFunc(t, ll, "lvl.detect_level", "i32", "ret i32 4")
			fake = overrideFunc(t, fake, "lvl.amx_permit", "i1", fmt.Sprintf("ret i1 %v", granted))
			exe := tc.Build(t, fake, driver).Exe
			if granted {
				want("detect says AMX, granted, not forced", run(exe), amxLevel, 4)
				want("detect says AMX, granted, empty", run(exe, LevelEnv+"="), amxLevel, 4)
				want("detect says AMX, granted, forced", run(exe, forced), amxLevel, 4)
			} else {
				want("detect says AMX, refused, not forced", run(exe), bf16Auto, bf16AutoIndex)
				want("detect says AMX, refused, empty", run(exe, LevelEnv+"="), bf16Auto, bf16AutoIndex)
				want("detect says AMX, refused, forced", run(exe, forced), bf16Level, 3)
			}
			want("detect says AMX, forced x86-64-v4", run(exe, LevelEnv+"=x86-64-v4"), "x86-64-v4", 2)
		}
	}
}

// amxLevelOf is the x86-64-amx level.
func amxLevelOf(t *testing.T) Level {
	t.Helper()
	for _, l := range x86Levels {
		if l.Name == amxLevel {
			return l
		}
	}
	t.Fatal("no x86-64-amx level")
	return Level{}
}

// amxBlockDriver packs random exact-bf16 A [M, K] and B [N, K] into pairs
// itself (A [M, K/2], B [K/2, N]: the tile layouts), runs amx_mm over the
// 32×32 blocks from two threads at once (each one call over a grid: 2 × 2
// blocks and 2 × 1), and checks each output element
// bit for bit against the emulator's independent model (NaN as NaN) and,
// where finite, against a float64 dot product within (K+2)·2^-24·Σ|a·b|.
// Mode 1 puts denormals, signed zeros and large and tiny exponents in A
// and B (the model flushes denormals as TDPBF16PS does); mode 2 has the
// calls accumulate (acc 1) into a C of random values: the model sums the
// product from zero and adds it to C once, the reference starts from C.
const amxBlockDriver = `
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
void amxemu_install(void);
long amxemu_count_dp(void);
void model_dpbf16ps(int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb, float *C, int ldc);
long amxemu_count(void);
int32_t amx_mm(int32_t *a, int32_t aoff, int32_t lda, int32_t *b, int32_t boff, int32_t ldb, float *c, int32_t coff, int32_t ldc, int32_t steps, int32_t mblocks, int32_t nblocks, int32_t acc);
enum { M = 64, N = 96, K = 96 };
static uint16_t A[M * K], B[N * K];
static int32_t AP[M * K / 2], BP[K / 2 * N];
static float C[M * N];
static float C0[M * N]; /* C's values before an accumulating call */
static int accm;        /* mode 2: the calls accumulate into C */
static uint64_t st = 88172645463325252ull;
static uint64_t rnd(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return st; }
static float bf(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t gen(int mode) {
  uint64_t r = rnd();
  uint16_t sign = (uint16_t)((r >> 9) & 1) << 15, man = (uint16_t)((r >> 20) & 0x7f);
  if (mode == 1) {
    switch (r % 8) {
    case 0: return sign | man;                                          /* denormal or zero */
    case 1: return sign;                                                /* signed zero */
    case 2: return sign | (uint16_t)((150 + (r >> 30) % 20) << 7) | man; /* large */
    case 3: return sign | (uint16_t)((10 + (r >> 30) % 20) << 7) | man;  /* tiny */
    }
  }
  return sign | (uint16_t)((120 + (r >> 30) % 10) << 7) | man;
}
/* Each thread one call: all rows, columns n0 .. n0 + 32·nb. */
typedef struct { int n0, nb; } job;
static void *run(void *arg) {
  job *j = arg;
  amx_mm(AP, 0, K / 2, BP, j->n0, N, C, j->n0, N, K / 32, M / 32, j->nb, accm);
  return NULL;
}
int main(int argc, char **argv) {
  int mode = atoi(argv[1]);
  accm = mode == 2;
  if (accm) mode = 0;
  amxemu_install();
  for (int i = 0; i < M * K; i++) A[i] = gen(mode);
  for (int i = 0; i < N * K; i++) B[i] = gen(mode);
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K / 2; k++) AP[m * (K / 2) + k] = (int32_t)(A[m * K + 2 * k] | ((uint32_t)A[m * K + 2 * k + 1] << 16));
  for (int k = 0; k < K / 2; k++)
    for (int n = 0; n < N; n++) BP[k * N + n] = (int32_t)(B[n * K + 2 * k] | ((uint32_t)B[n * K + 2 * k + 1] << 16));
  /* Written: C starts as NaN bits; accumulated: as values of about the
     products' size, which the model starts from too. */
  static float W[M * N];
  memset(C, 0xff, sizeof C);
  if (accm)
    for (int i = 0; i < M * N; i++) C[i] = C0[i] = bf(gen(0)) * 8.0f + bf(gen(0));
  /* An empty grid runs no AMX instruction (not even LDTILECFG). */
  amx_mm(AP, 0, K / 2, BP, 0, N, C, 0, N, K / 32, 0, N / 32, accm);
  amx_mm(AP, 0, K / 2, BP, 0, N, C, 0, N, K / 32, M / 32, -1, accm);
  long empty = amxemu_count();
  job js[2] = {{0, 2}, {64, 1}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, run, &js[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  /* The model, one 16-pair step at a time as the tiles accumulate. */
  static uint16_t BT[K / 2 * 2 * N];
  for (int k = 0; k < K / 2; k++)
    for (int n = 0; n < N; n++) BT[k * 2 * N + 2 * n] = B[n * K + 2 * k], BT[k * 2 * N + 2 * n + 1] = B[n * K + 2 * k + 1];
  for (int s = 0; s < K / 32; s++) model_dpbf16ps(M, N, 16, A + 32 * s, K, BT + 16 * s * 2 * N, 2 * N, W, N);
  if (accm) /* the product, summed from zero, joins C once */
    for (int i = 0; i < M * N; i++) W[i] = C0[i] + W[i];
  int bad = 0, far = 0;
  double worst = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      float got = C[m * N + n], want = W[m * N + n];
      if (!(isnan(got) && isnan(want)) && memcmp(&got, &want, 4) != 0) {
        if (bad < 5) fprintf(stderr, "C[%d][%d] = %a, model %a\n", m, n, got, want);
        bad++;
      }
      double ref = C0[m * N + n], mag = fabs(ref);
      for (int k = 0; k < K; k++) {
        double p = (double)bf(A[m * K + k]) * (double)bf(B[n * K + k]);
        if (fpclassify(bf(A[m * K + k])) == FP_SUBNORMAL || fpclassify(bf(B[n * K + k])) == FP_SUBNORMAL) p = 0;
        ref += p, mag += fabs(p);
      }
      double tol = (K + 2) * ldexp(1, -24) * mag;
      if (mag < ldexp(1, -100)) tol += ldexp(1, -120); /* products the FMAs flush: mode 1 only */
      if (isfinite(ref) && fabs(got - ref) > tol) {
        if (far < 5) fprintf(stderr, "C[%d][%d] = %a, float64 %a, allowance %g\n", m, n, got, ref, tol);
        far++;
      }
      if (mag > 0 && isfinite(ref) && fabs(got - ref) / mag > worst) worst = fabs(got - ref) / mag;
    }
  printf("tdpbf16ps %ld\ninsts %ld\nempty %ld\nmismatches %d\nbeyond %d\nworst %g\n", amxemu_count_dp(), amxemu_count(), empty, bad, far, worst);
  return 0;
}
`

// TestAMXBlockEmulated compiles the x86-64-amx block routine
// (newAMXBlocks) with opt and llc (LLVM 14) and runs its machine code
// under the tests' AMX emulator (internal/amxemu): the outputs equal the
// emulator's independent TDPBF16PS model bit for bit and a float64
// reference within the accumulation allowance, for ordinary and edge
// (denormal, signed zero, large, tiny) bf16 inputs, from two threads,
// writing C and accumulating into it. It also checks the assembly (one K
// step: 4 tileloadd and 4 tdpbf16ps; C's block: 4 tileloadd or 4
// tilezero; one ldtilecfg and one tilerelease) and the instructions the emulator ran:
// the configuration loaded once per call, none for an empty grid.
// Emulated only: this is not a run on AMX hardware.
func TestAMXBlockEmulated(t *testing.T) {
	amxemu.SkipOnAMXHardware(t)
	t.Parallel()
	if runtime.GOARCH != "amd64" {
		t.Skip("AMX is x86-64's")
	}
	tc := lltest.NeedToolchain(t)
	mod := lir.NewModule()
	mod.TargetTriple, mod.DataLayout = Arches[0].Triple, Arches[0].DataLayout
	f := newAMXBlocks("amx_mm", amxLevelOf(t))
	f.Linkage, f.Parent = enum.LinkageNone, mod // the test's driver calls it
	mod.Funcs = append(mod.Funcs, f)
	dir := t.TempDir()
	ll := filepath.Join(dir, "k.ll")
	if err := os.WriteFile(ll, []byte(mod.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	emu, err := amxemu.WriteSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.c"), []byte(amxBlockDriver), 0o644); err != nil {
		t.Fatal(err)
	}
	model, err := filepath.Abs("../../internal/amxemu/testdata/model.c")
	if err != nil {
		t.Fatal(err)
	}
	lltest.RunCmd(t, dir, tc.Opt, "-O3", "-S", "k.ll", "-o", "k.opt.ll")
	lltest.RunCmd(t, dir, tc.LLC, "-O3", "-filetype=obj", "-relocation-model=pic", "k.opt.ll", "-o", "k.o")
	lltest.RunCmd(t, dir, tc.LLC, "-O3", "-relocation-model=pic", "k.opt.ll", "-o", "k.s")
	lltest.RunCmd(t, dir, tc.GCC, "-O2", "-o", "prog", "main.c", emu, model, "k.o", "-lm", "-lpthread")
	asm, err := os.ReadFile(filepath.Join(dir, "k.s"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(asm), "tileloadd"); n != 4 {
		t.Errorf("assembly has %d tileloadd, want 4 (one K step)", n)
	}
	if n := strings.Count(string(asm), "tilezero"); n != 4 {
		t.Errorf("assembly has %d tilezero, want 4 (one C block)", n)
	}
	if n := strings.Count(string(asm), "tilestored"); n != 8 {
		t.Errorf("assembly has %d tilestored, want 8 (a block over C's, and one to the stack block before each tile's rows join C's)", n)
	}
	if n := strings.Count(string(asm), "tdpbf16ps"); n != 4 {
		t.Errorf("assembly has %d tdpbf16ps, want 4", n)
	}
	for _, op := range []string{"ldtilecfg", "tilerelease"} {
		if n := strings.Count(string(asm), op); n != 1 {
			t.Errorf("assembly has %d %s, want 1 (once per call)", n, op)
		}
	}
	for mode, name := range []string{"ordinary", "edge", "accumulating"} {
		out, _ := lltest.RunCmd(t, dir, filepath.Join(dir, "prog"), fmt.Sprint(mode))
		r := lltest.Results(t, out)
		// 2 blocks of rows × 3 of columns × 3 K steps × 4 TDPBF16PS;
		// per call one LDTILECFG and one TILERELEASE, per block 4
		// TILEZERO and 4 TILESTORED (over C's block, or accumulating to
		// the stack block), per K step 4 TILELOADD (2 + 4·32 and
		// 2 + 2·32).
		if r["tdpbf16ps"] != "72" || r["insts"] != "196" || r["empty"] != "0" || r["mismatches"] != "0" || r["beyond"] != "0" {
			t.Errorf("%s: %v", name, r)
		}
		t.Logf("%s inputs: %v", name, r)
	}
}

// TestAMXBlockInProcess loads the block kernel, linked with the emulator
// (installed by the library's constructor), into this Go test process
// through cpurt, as the conformance harness loads kernel libraries, and
// checks a 64×64×64 Q·Kᵀ against float64 within (K+2)·2^-24·Σ|a·b|: the
// SIGILL handler works beside the Go runtime, for in-process harnesses.
// On a CPU with AMX the process asks Linux for the tile state first (as
// detection does) and the tiles run in hardware instead.
func TestAMXBlockInProcess(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("AMX is x86-64's")
	}
	tc, err := cpurt.ToolchainFor(DefaultTriple)
	needtool.Check(t, err)
	needtool.Check(t, cpurt.Tools())
	mod := lir.NewModule()
	mod.TargetTriple, mod.DataLayout = Arches[0].Triple, Arches[0].DataLayout
	f := newAMXBlocks("amx_mm", amxLevelOf(t))
	f.Linkage, f.Parent = enum.LinkageNone, mod
	mod.Funcs = append(mod.Funcs, f)
	dir := t.TempDir()
	ll, so := filepath.Join(dir, "k.ll"), filepath.Join(dir, "k.so")
	if err := os.WriteFile(ll, []byte(mod.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	emu, err := amxemu.WriteSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	tc.Link = []string{"-fPIC", "-DAMXEMU_CONSTRUCTOR", emu}
	if err := tc.BuildShared(ll, so); err != nil {
		t.Fatal(err)
	}
	lib, err := cpurt.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	const M, N, K = 64, 64, 64
	rng := rand.New(rand.NewSource(5))
	a, b := make([]float32, M*K), make([]float32, N*K)
	bf := func() float32 { return math.Float32frombits(math.Float32bits(float32(rng.NormFloat64())) &^ 0xFFFF) }
	for i := range a {
		a[i] = bf()
	}
	for i := range b {
		b[i] = bf()
	}
	ap, bp, c := cpurt.NewBuffer(M*K*2), cpurt.NewBuffer(N*K*2), cpurt.NewBuffer(M*N*4)
	defer ap.Free()
	defer bp.Free()
	defer c.Free()
	hi := func(x float32) int32 { return int32(math.Float32bits(x) >> 16) }
	for m := range M {
		for k := range K / 2 {
			ap.I32()[m*K/2+k] = hi(a[m*K+2*k]) | hi(a[m*K+2*k+1])<<16
		}
	}
	for k := range K / 2 {
		for n := range N {
			bp.I32()[k*N+n] = hi(b[n*K+2*k]) | hi(b[n*K+2*k+1])<<16
		}
	}
	hardware := amxemu.OnAMXHardware()
	if hardware && (hostCPUID.amxPermit == nil || !hostCPUID.amxPermit()) {
		t.Fatal("this CPU has AMX but Linux refuses the tile state")
	}
	if _, err := lib.Call("amx_mm", ap.Ptr(), 0, K/2, bp.Ptr(), 0, N, c.Ptr(), 0, N, K/32, M/32, N/32, 0); err != nil {
		t.Fatal(err)
	}
	dps, err := lib.Call("amxemu_count_dp")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int32{false: 4 * 4 * 2, true: 0}[hardware]; dps != want {
		t.Errorf("%d TDPBF16PS emulated, want %d (AMX hardware: %v)", dps, want, hardware)
	}
	worst := 0.0
	for m := range M {
		for n := range N {
			ref, mag := 0.0, 0.0
			for k := range K {
				p := float64(a[m*K+k]) * float64(b[n*K+k])
				ref, mag = ref+p, mag+math.Abs(p)
			}
			got := float64(c.F32()[m*N+n])
			if d := math.Abs(got - ref); d > (K+2)*0x1p-24*mag {
				t.Fatalf("C[%d][%d] = %g, float64 %g", m, n, got, ref)
			} else if d/mag > worst {
				worst = d / mag
			}
		}
	}
	t.Logf("%d TDPBF16PS emulated in-process (AMX hardware: %v); worst |error|/Σ|a·b| %.3g", dps, hardware, worst)
}
