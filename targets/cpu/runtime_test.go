package cpu

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	llvmgen "github.com/attnc/attnc/codegen/llvm"
	"github.com/attnc/attnc/internal/lltest"
	"github.com/attnc/attnc/ir"
)

// build emits m for the default architecture (runtime included) and
// compiles it with the C driver.
func build(t *testing.T, tc *lltest.Toolchain, m *ir.Module, driver string) *lltest.Built {
	t.Helper()
	ll, err := emitLL(m, Arches[0])
	if err != nil {
		t.Fatalf("emitLL: %v", err)
	}
	return tc.Build(t, ll, driver)
}

func parallelModule() *ir.Module {
	i, j := lltest.I32("i"), lltest.I32("j")
	fill := lltest.Kernel("fill", []*ir.Param{lltest.Buf("out", ir.F32), lltest.Scalar("n", ir.I32), lltest.Scalar("scale", ir.F32), lltest.Buf("iout", ir.I32)},
		lltest.Let("base", ir.Int(3)),
		lltest.Var("v", ir.Float(2.5)),
		lltest.Set("v", lltest.Mul(lltest.F32("v"), ir.Float(2))), // 5.0, read by value at loop start
		&ir.Alloc{Name: "shared", T: ir.I32, Size: 1},
		lltest.Store("shared", ir.Int(0), ir.Int(11)),
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Parallel,
			&ir.Alloc{Name: "tmp", T: ir.F32, Size: 4},
			lltest.Loop("j", ir.Int(0), ir.Int(4), ir.Serial,
				lltest.Store("tmp", j, lltest.Mul(ir.Cvt(ir.F32, lltest.Add(i, j)), lltest.F32("scale")))),
			lltest.Let("s", lltest.Add(ir.Ld("tmp", ir.F32, ir.Int(0)), ir.Ld("tmp", ir.F32, ir.Int(3)))),
			lltest.If(ir.Bin(ir.Eq, ir.Bin(ir.Rem, i, ir.Int(10)), ir.Int(0)),
				lltest.Blk(lltest.Store("out", i, ir.Float(-1)), &ir.Continue{}), nil),
			lltest.Var("w", ir.Float(0)),
			lltest.Loop("j", ir.Int(0), ir.Int(8), ir.Vector,
				lltest.If(ir.Bin(ir.Eq, j, ir.Int(5)), lltest.Blk(&ir.Continue{}), nil),
				lltest.Set("w", lltest.Add(lltest.F32("w"), ir.Float(1)))),
			lltest.Store("out", i, lltest.Add(lltest.Add(lltest.Add(lltest.F32("s"), ir.Cvt(ir.F32, lltest.I32("base"))), lltest.F32("v")), lltest.F32("w")))),
		// lo != 0; the body reads an outer local array
		lltest.Loop("i", ir.Int(5), lltest.I32("n"), ir.Parallel,
			lltest.Store("iout", i, lltest.Add(lltest.Mul(i, lltest.I32("base")), ir.Ld("shared", ir.I32, ir.Int(0))))),
		lltest.Ret(ir.Int(0)))
	return lltest.Module("par", fill)
}

func TestParallelFor(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	driver := `
int32_t fill(float*, int32_t, float, int32_t*);
void par_set_num_threads(int32_t);
int32_t par_get_num_threads(void);
int main(void) {
	enum { N = 1000 };
	static float out[N]; static int32_t iout[N];
	int threads[3] = {1, 4, 0};
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	printf("online %ld\n", online < 1 ? 1 : online);
	for (int r = 0; r < 3; r++) {
		par_set_num_threads(threads[r]);
		for (int i = 0; i < N; i++) { out[i] = NAN; iout[i] = -7; }
		int st = fill(out, N, 0.5f, iout);
		double sum = 0; long isum = 0;
		for (int i = 0; i < N; i++) { sum += out[i]; isum += iout[i]; }
		printf("threads%d %d\nstatus%d %d\nsum%d %.17g\nisum%d %ld\n", r, par_get_num_threads(), r, st, r, sum, r, isum);
		printf("out%d ", r);
		for (int i = 0; i < N; i++) printf(i ? ",%g" : "%g", out[i]);
		printf("\niout%d ", r);
		for (int i = 0; i < N; i++) printf(i ? ",%d" : "%d", iout[i]);
		printf("\n");
	}
	par_set_num_threads(3);
	for (int i = 0; i < 4; i++) out[i] = 42;
	fill(out, 0, 0.5f, iout);
	printf("n0 %g\n", out[0]);
	fill(out, 1, 0.5f, iout);
	printf("n1 %g\n", out[0]);
	par_set_num_threads(-5);
	printf("reset %d\n", par_get_num_threads());
	par_set_num_threads(40000);
	printf("clamped %d\n", par_get_num_threads());
	int st = fill(out, N, 0.5f, iout);
	printf("clamped_status %d\n", st);
	return 0;
}
`
	bl := build(t, tc, parallelModule(), driver)
	r := lltest.Results(t, bl.Run(t))
	var wantOut []string
	var wantSum float64
	var wantISum int64
	wantIout := []string{}
	for i := 0; i < 1000; i++ {
		v := -1.0
		if i%10 != 0 {
			v = float64(i)*0.5 + float64(i+3)*0.5 + 3 + 5 + 7
		}
		wantSum += v
		wantOut = append(wantOut, strconv.FormatFloat(v, 'g', 6, 64))
		iv := int64(-7)
		if i >= 5 {
			iv = int64(i*3 + 11)
		}
		wantISum += iv
		wantIout = append(wantIout, strconv.FormatInt(iv, 10))
	}
	online, _ := strconv.Atoi(r["online"])
	for run, threads := range []int{1, 4, online} {
		lltest.CheckInt(t, r, fmt.Sprintf("threads%d", run), int64(threads))
		lltest.CheckInt(t, r, fmt.Sprintf("status%d", run), 0)
		lltest.CheckFloat(t, r, fmt.Sprintf("sum%d", run), wantSum)
		lltest.CheckInt(t, r, fmt.Sprintf("isum%d", run), wantISum)
		if got := r[fmt.Sprintf("out%d", run)]; got != strings.Join(wantOut, ",") {
			t.Errorf("run %d (threads %d): out = %.200s...", run, threads, got)
		}
		if got := r[fmt.Sprintf("iout%d", run)]; got != strings.Join(wantIout, ",") {
			t.Errorf("run %d (threads %d): iout = %.200s...", run, threads, got)
		}
	}
	lltest.CheckFloat(t, r, "n0", 42)
	lltest.CheckFloat(t, r, "n1", -1)
	lltest.CheckInt(t, r, "reset", int64(online))
	lltest.CheckInt(t, r, "clamped", int64(ThreadLimit(online)))
	lltest.CheckInt(t, r, "clamped_status", 0)
	// Each loop's body captures buffers (out; iout and the kernel's array
	// shared), so its outlined function loads their pointers from the
	// context and calls a body that takes them as noalias parameters.
	for _, s := range []string{"define internal void @fill.par0(i8* %ctx, i32 %idx, i8* noalias %scratch)", "define internal void @fill.par1(",
		"define internal void @fill.par0.body(i8* %ctx, i32 %idx, float* noalias %buf0.out)",
		"define internal void @fill.par1.body(i8* %ctx, i32 %idx, i32* noalias %buf0.iout, i32* noalias %buf1.shared)",
		"call i32 @par.parallel_for(", "@pthread_create(", "atomicrmw add"} {
		if !strings.Contains(bl.LL, s) {
			t.Errorf("emitted IR lacks %q", s)
		}
	}
	// Allocas of the outlined body sit in its entry block.
	body := lltest.FuncBody(bl.LL, "fill.par0.body")
	entry, _, _ := strings.Cut(body, "\n\n")
	if !strings.Contains(entry, "%tmp = alloca float, i32 4") {
		t.Errorf("alloc tmp is not in the entry block of fill.par0.body:\n%s", body)
	}
}

// TestParallelBuffersNoAlias compiles a parallel loop whose items read one
// buffer and write another in a vector loop: the outlined body knows the
// buffers apart (noalias parameters, alias scopes once inlined), so opt
// vectorizes the loop without a run-time overlap check and a scalar copy
// for when they overlap; and the results are right. (Loaded from the
// context in the body, the pointers were unknown objects: opt checked
// them at run time.)
func TestParallelBuffersNoAlias(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	i, j := lltest.I32("i"), lltest.I32("j")
	at := lltest.Add(lltest.Mul(i, ir.Int(64)), j)
	k := lltest.Kernel("cp", []*ir.Param{lltest.Buf("in", ir.F32), lltest.Buf("out", ir.F32), lltest.Scalar("n", ir.I32)},
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Parallel,
			lltest.Loop("j", ir.Int(0), ir.Int(64), ir.Vector,
				lltest.Store("out", at, lltest.Add(lltest.Mul(ir.Ld("in", ir.F32, at), ir.Float(2)), ir.Ld("out", ir.F32, at))))),
		lltest.Ret(ir.Int(0)))
	driver := `
int32_t cp(float*, float*, int32_t);
int main(void) {
	enum { N = 64 * 37 };
	static float in[N], out[N];
	for (int i = 0; i < N; i++) { in[i] = i; out[i] = 0.5f; }
	int st = cp(in, out, N / 64);
	double sum = 0;
	for (int i = 0; i < N; i++) sum += out[i];
	printf("status %d\nsum %.17g\n", st, sum);
	return 0;
}
`
	bl := build(t, tc, lltest.Module("na", k), driver)
	r := lltest.Results(t, bl.Run(t))
	lltest.CheckInt(t, r, "status", 0)
	n := 64 * 37
	lltest.CheckFloat(t, r, "sum", float64(n*(n-1))+0.5*float64(n))
	if !strings.Contains(bl.OptLL, "wide.load") {
		t.Errorf("opt did not vectorize the copy loop:\n%s", bl.OptLL)
	}
	if strings.Contains(bl.OptLL, "memcheck") || strings.Contains(bl.OptLL, "found.conflict") {
		t.Errorf("opt checks the buffers for overlap at run time:\n%s", bl.OptLL)
	}
}

// TestHeapScratch runs a parallel loop whose arrays live in heap scratch
// (one block per worker, reused across its items): the results are right at
// every thread count, the arrays are not allocas, and when the workers'
// scratch cannot be had (the driver's malloc refuses the one allocation of
// every worker's block) the kernel returns NO_MEMORY, having written
// nothing and freed its own malloc'd buffer.
func TestHeapScratch(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	i, j := lltest.I32("i"), lltest.I32("j")
	k := lltest.Kernel("hs", []*ir.Param{lltest.Buf("out", ir.F32), lltest.Scalar("n", ir.I32)},
		&ir.Malloc{Name: "w", T: ir.F32, Size: ir.Int(3)},
		lltest.Store("w", ir.Int(0), ir.Float(0.5)),
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Parallel,
			&ir.Alloc{Name: "a", T: ir.F32, Size: 300, Heap: true},
			&ir.Alloc{Name: "b", T: ir.I64, Size: 5, Heap: true},
			&ir.Alloc{Name: "c", T: ir.F32, Size: 4},
			lltest.Loop("j", ir.Int(0), ir.Int(300), ir.Serial, lltest.Store("a", j, ir.Cvt(ir.F32, lltest.Add(i, j)))),
			lltest.Store("b", ir.Int(4), ir.IntT(ir.I64, 1)),
			lltest.Store("c", ir.Int(0), ir.Cvt(ir.F32, ir.Ld("b", ir.I64, ir.Int(4)))),
			lltest.Store("out", i, lltest.Add(lltest.Add(ir.Ld("a", ir.F32, ir.Int(299)), ir.Ld("c", ir.F32, ir.Int(0))), ir.Ld("w", ir.F32, ir.Int(0))))),
		&ir.Free{Name: "w"},
		lltest.Ret(ir.Int(0)))
	m := lltest.Module("hs", k)
	m.Errors = []ir.ErrorCode{{Code: -7, Name: llvmgen.NoMemoryError, Msg: "no memory"}}
	driver := `
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
static size_t refuse; static void *w; static int wfreed;
void *malloc(size_t n) {
	if (refuse && n >= refuse) return NULL; /* parallel_for asks for every worker's block at once */
	void *p = __libc_malloc(n);
	if (n == 12) { w = p; wfreed = 0; } /* the kernel's w: 3 floats */
	return p;
}
void free(void *p) { if (p && p == w) wfreed = 1; __libc_free(p); }
int32_t hs(float*, int32_t);
void hs_set_num_threads(int32_t);
int main(void) {
	enum { N = 100 };
	static float out[N];
	int threads[3] = {1, 3, 8};
	for (int r = 0; r < 3; r++) {
		hs_set_num_threads(threads[r]);
		for (int i = 0; i < N; i++) out[i] = -1;
		int st = hs(out, N);
		double sum = 0;
		for (int i = 0; i < N; i++) sum += out[i];
		printf("status%d %d\nsum%d %.17g\n", r, st, r, sum);
	}
	refuse = 1280; /* one worker's block: a (1200 bytes, aligned to 1216) and b (40, to 64) */
	hs_set_num_threads(3);
	for (int i = 0; i < N; i++) out[i] = -1;
	int st = hs(out, N);
	int untouched = 1;
	for (int i = 0; i < N; i++) untouched &= out[i] == -1;
	printf("nomem %d\nwfreed %d\nuntouched %d\n", st, wfreed, untouched);
	return 0;
}
`
	bl := build(t, tc, m, driver)
	r := lltest.Results(t, bl.Run(t))
	want := 0.0
	for i := range 100 {
		want += float64(i+299) + 1 + 0.5
	}
	for run := range 3 {
		lltest.CheckInt(t, r, fmt.Sprintf("status%d", run), 0)
		lltest.CheckFloat(t, r, fmt.Sprintf("sum%d", run), want)
	}
	lltest.CheckInt(t, r, "nomem", -7)
	lltest.CheckInt(t, r, "untouched", 1)
	lltest.CheckInt(t, r, "wfreed", 1) // the NO_MEMORY return frees what the kernel malloc'd
	body := lltest.FuncBody(bl.LL, "hs.par0.body")
	if strings.Contains(body, "%a = alloca") || strings.Contains(body, "%b = alloca") || !strings.Contains(body, "%c = alloca") {
		t.Errorf("heap arrays a, b must not be allocas, c must:\n%s", body)
	}
	if !strings.Contains(bl.LL, "call i32 @hs.parallel_for(i32 %") || !strings.Contains(bl.LL, "i64 1280, i32 1)") {
		t.Errorf("parallel_for does not get the 1280-byte scratch size:\n%s", lltest.FuncBody(bl.LL, "hs"))
	}
}

func TestStrerror(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	m := lltest.Module("se", lltest.Kernel("nop", nil, lltest.Ret(ir.Int(0))))
	m.Errors = append(m.Errors, ir.ErrorCode{Code: -9, Name: "quoted", Msg: "a \"quoted\" message\\with\tescapes"})
	driver := `
int32_t nop(void);
const char *se_strerror(int32_t);
int main(void) {
	int codes[] = {0, -1, -3, -9, 42, -2};
	for (int i = 0; i < 6; i++) printf("c%d [%s]\n", codes[i], se_strerror(codes[i]));
	printf("nop %d\n", nop());
	return 0;
}
`
	r := lltest.Results(t, build(t, tc, m, driver).Run(t))
	want := map[string]string{"c0": "[ok]", "c-1": "[bad input]", "c-3": "[out of memory]",
		"c-9": "[a \"quoted\" message\\with\tescapes]", "c42": "[unknown status]", "c-2": "[unknown status]", "nop": "0"}
	for k, w := range want {
		if r[k] != w {
			t.Errorf("%s = %q, want %q", k, r[k], w)
		}
	}
}

func TestDeterministic(t *testing.T) {
	a, err := emitLL(parallelModule(), Arches[0])
	if err != nil {
		t.Fatal(err)
	}
	m := parallelModule()
	b, err := emitLL(m, Arches[0])
	if err != nil {
		t.Fatal(err)
	}
	c, err := emitLL(m, Arches[0])
	if err != nil {
		t.Fatal(err)
	}
	if a != b || b != c {
		t.Fatalf("Emit is not deterministic")
	}
	// Concurrent Emits of one module share nothing mutable.
	outs := make(chan string, 4)
	for range 4 {
		go func() {
			s, err := emitLL(m, Arches[0])
			if err != nil {
				s = err.Error()
			}
			outs <- s
		}()
	}
	for range 4 {
		if s := <-outs; s != a {
			t.Fatalf("concurrent Emit differs")
		}
	}
}

func goldenModule() *ir.Module {
	i := lltest.I32("i")
	scale := lltest.Kernel("scale", []*ir.Param{lltest.Buf("x", ir.F32), lltest.Scalar("n", ir.I32), lltest.Scalar("s", ir.F32)},
		lltest.If(ir.Bin(ir.Lt, lltest.I32("n"), ir.Int(0)), lltest.Blk(lltest.Ret(ir.Int(-1))), nil),
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Vector,
			lltest.Store("x", i, lltest.Mul(ir.Ld("x", ir.F32, i), lltest.F32("s")))),
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Parallel,
			lltest.Store("x", i, ir.Bin(ir.Max, ir.Ld("x", ir.F32, i), ir.Float(math.Inf(-1))))),
		lltest.Ret(ir.Int(0)))
	return &ir.Module{Name: "tiny", Prefix: "tiny", Kernels: []*ir.Kernel{scale},
		Errors: []ir.ErrorCode{{Code: -1, Name: "bad_input", Msg: "bad input"}}}
}

func TestGolden(t *testing.T) {
	got, err := emitLL(goldenModule(), Arches[0])
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "tiny.ll.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./targets/cpu -update)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test ./targets/cpu -update and review the diff):\n%s", path, got)
	}
}

// TestCPULevel runs <prefix>_cpu_level in fresh processes: without
// ATTNC_CPU_LEVEL it names the best level CPUID and XGETBV allow (the one
// /proc/cpuinfo's flags imply), a level the CPU runs is taken, a name that
// is no level, or a level above the CPU's, is refused (NULL and -1 from
// rt.cpu_level), and an empty value means unset.
func TestCPULevel(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" {
		t.Skip("the levels tested are x86-64's")
	}
	tc := lltest.NeedToolchain(t)
	k := levelProbe()
	driver := levelProbeDriver
	bl := build(t, tc, lltest.Module("lvl", k), driver)
	run := func(env ...string) map[string]string {
		cmd := exec.Command(bl.Exe)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", env, err)
		}
		return lltest.Results(t, string(out))
	}
	flags := lltest.CPUInfoFlags()
	best, bestIdx := "x86-64", 0
	if flags["avx2"] && flags["fma"] && flags["f16c"] && flags["bmi2"] && flags["movbe"] {
		best, bestIdx = "x86-64-v3", 1
		if flags["avx512f"] && flags["avx512bw"] && flags["avx512dq"] && flags["avx512vl"] && flags["avx512cd"] {
			best, bestIdx = "x86-64-v4", 2
		}
	}
	os.Unsetenv(LevelEnv)
	for _, tc := range []struct {
		env   []string
		name  string
		index int64
	}{
		{nil, best, int64(bestIdx)},
		{[]string{LevelEnv + "="}, best, int64(bestIdx)},
		{[]string{LevelEnv + "=x86-64"}, "x86-64", 0},
		{[]string{LevelEnv + "=" + best}, best, int64(bestIdx)},
		{[]string{LevelEnv + "=avx9000"}, "(null)", -1},
		{[]string{LevelEnv + "=x86-64-v3 "}, "(null)", -1},
	} {
		r := run(tc.env...)
		if r["name"] != tc.name {
			t.Errorf("%v: name %s, want %s", tc.env, r["name"], tc.name)
		}
		lltest.CheckInt(t, r, "index", tc.index)
	}
	if bestIdx < 2 {
		r := run(LevelEnv + "=x86-64-v4")
		if r["name"] != "(null)" || r["index"] != "-1" {
			t.Errorf("a level above the CPU's was not refused: %v", r)
		}
	}
}

// levelProbe is a kernel lvl(out) storing rt.cpu_level in out[0], which
// levelProbeDriver calls after <prefix>_cpu_level(): it prints the level's
// name and index (lltest.Results).
func levelProbe() *ir.Kernel {
	return lltest.Kernel("lvl", []*ir.Param{lltest.Buf("out", ir.I32)},
		&ir.CallStmt{Result: "l", Fn: "rt.cpu_level"},
		lltest.Store("out", ir.Int(0), lltest.I32("l")),
		lltest.Ret(ir.Int(0)))
}

const levelProbeDriver = `
int32_t lvl(int32_t*);
const char *lvl_cpu_level(void);
int main(void) {
	const char *n = lvl_cpu_level();
	int32_t l = -5;
	lvl(&l);
	printf("name %s\nindex %d\n", n ? n : "(null)", l);
	return 0;
}
`

// hostVendor is this machine's CPUID vendor (/proc/cpuinfo's vendor_id);
// the test is skipped without one.
func hostVendor(t *testing.T) string {
	t.Helper()
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "vendor_id" {
			if v = strings.TrimSpace(v); len(v) == 12 {
				return v
			}
		}
	}
	t.Skip("/proc/cpuinfo names no CPUID vendor")
	return ""
}

// TestCPULevelVendor: a level with a Vendor is detected on that vendor's
// CPUs only, the level below elsewhere, and ATTNC_CPU_LEVEL forces it on
// any CPU with its bits. The architecture here is x86-64 and x86-64-v3
// with a Vendor: this machine's, then another's.
func TestCPULevelVendor(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" {
		t.Skip("the levels tested are x86-64's")
	}
	flags := lltest.CPUInfoFlags()
	if !(flags["avx2"] && flags["fma"] && flags["f16c"] && flags["bmi2"] && flags["movbe"]) {
		t.Skip("this CPU does not run x86-64-v3")
	}
	host := hostVendor(t)
	other := map[string]string{"AuthenticAMD": "GenuineIntel"}[host]
	if other == "" {
		other = "AuthenticAMD"
	}
	tc := lltest.NeedToolchain(t)
	k := levelProbe()
	driver := levelProbeDriver
	for _, c := range []struct {
		vendor string
		want   string
	}{{host, "x86-64-v3"}, {other, "x86-64"}} {
		arch := Arches[0]
		arch.Levels = append([]Level(nil), x86Levels[:2]...)
		arch.Levels[1].Vendor = c.vendor
		ll, err := emitLL(lltest.Module("lvl", k), arch)
		if err != nil {
			t.Fatalf("emitLL: %v", err)
		}
		bl := tc.Build(t, ll, driver)
		for _, env := range [][]string{nil, {LevelEnv + "=x86-64-v3"}} {
			cmd := exec.Command(bl.Exe)
			cmd.Env = append(os.Environ(), LevelEnv+"=")
			cmd.Env = append(cmd.Env, env...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s %v: %v", c.vendor, env, err)
			}
			want := c.want
			if env != nil {
				want = "x86-64-v3"
			}
			if r := lltest.Results(t, string(out)); r["name"] != want {
				t.Errorf("x86-64-v3 for %s on a %s CPU, %v: %s, want %s", c.vendor, host, env, r["name"], want)
			}
		}
	}
}

// TestLevelAttributes compiles a clone of every level of both targets with
// llc: the attributes name a CPU and features LLVM 14 knows (no warning),
// and the x86-64-v4 clone uses 512-bit registers for f32x16 arithmetic.
func TestLevelAttributes(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	for _, tg := range Arches {
		var ks []*ir.Kernel
		for _, l := range tg.Levels {
			m, err := ir.Parse(`module m prefix m
kernel k` + l.Suffix + ` role decode level "` + l.Name + `" (x: f32* [32], o: f32* [32] out) {
  store o[0] = muladd(x[0]:f32x16, x[16]:f32x16, o[0]:f32x16)
  return 0
}
`)
			if err != nil {
				t.Fatal(err)
			}
			ks = append(ks, m.Kernels[0])
		}
		ll, err := emitLL(lltest.Module("lv", ks...), tg)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "k.ll"), []byte(ll), 0o644); err != nil {
			t.Fatal(err)
		}
		arch := strings.Split(tg.Triple, "-")[0]
		lltest.RunCmd(t, dir, tc.Opt, "-O3", "-mtriple="+tg.Triple, "k.ll", "-o", "k.bc")
		_, stderr := lltest.RunCmd(t, dir, tc.LLC, "-O3", "-mtriple="+tg.Triple, "k.bc", "-o", "k.s")
		if stderr != "" {
			t.Errorf("%s: llc warns: %s", arch, stderr)
		}
		asm, err := os.ReadFile(filepath.Join(dir, "k.s"))
		if err != nil {
			t.Fatal(err)
		}
		if arch == "x86_64" {
			v4 := lltest.FuncBody(string(asm), "k_x86_64_v4")
			if !strings.Contains(string(asm), "zmm") {
				t.Errorf("the x86-64-v4 clone does not use zmm registers:\n%s", v4)
			}
			if !strings.Contains(string(asm), "vfmadd") {
				t.Errorf("no FMA instruction in the v3/v4 clones")
			}
		}
	}
}

// TestRuntimeErrors: the runtime's names and libc functions are reserved
// (a kernel of that name is an error, not a second definition), the status
// codes must be distinct, and a kernel's level must be one of the
// architecture's.
func TestRuntimeErrors(t *testing.T) {
	cases := []struct {
		name string
		m    *ir.Module
		a    Arch
		want string
	}{
		{"runtime clash", lltest.Module("e", lltest.Kernel("e_strerror", nil)), Arches[0], `symbol "e_strerror" is defined twice`},
		{"pool clash", lltest.Module("e", lltest.Kernel("e.parallel_for", nil)), Arches[0], `symbol "e.parallel_for" is defined twice`},
		{"libc clash", lltest.Module("e", lltest.Kernel("pthread_create", nil)), Arches[0], `symbol "pthread_create" is defined twice`},
		{"dup code", &ir.Module{Name: "x", Errors: []ir.ErrorCode{{Code: -1, Name: "a"}, {Code: -1, Name: "b"}}}, Arches[0], "code -1 is used twice"},
		{"foreign level", &ir.Module{Name: "x", Kernels: []*ir.Kernel{{Name: "k_neon", Level: "neon", Body: lltest.Blk()}}}, Arches[0],
			`kernel k_neon: level "neon" is not a level of x86_64-unknown-linux-gnu (known: x86-64, x86-64-v3, x86-64-v4, x86-64-v4-bf16, x86-64-amx)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := emitLL(c.m, c.a)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}
