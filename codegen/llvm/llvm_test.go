package llvm

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"github.com/attnc/attnc/internal/needtool"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// ---- kernel-IR construction helpers ----

func blk(ss ...ir.Stmt) *ir.Block { return &ir.Block{Stmts: ss} }

func buf(name string, t ir.Type) *ir.Param { return &ir.Param{Name: name, Buffer: true, Elem: t} }

func scalar(name string, t ir.Type) *ir.Param { return &ir.Param{Name: name, Elem: t} }

func i32(name string) *ir.Ref { return ir.R(name, ir.I32) }

func f32(name string) *ir.Ref { return ir.R(name, ir.F32) }

func loop(v string, lo, hi ir.Expr, kind ir.LoopKind, body ...ir.Stmt) *ir.For {
	return &ir.For{Var: v, Lo: lo, Hi: hi, Kind: kind, Body: blk(body...)}
}

func store(b string, idx, v ir.Expr) *ir.Store { return &ir.Store{Buf: b, Index: idx, Value: v} }

func let(n string, v ir.Expr) *ir.Let { return &ir.Let{Name: n, Value: v} }

func vr(n string, v ir.Expr) *ir.Var { return &ir.Var{Name: n, Init: v} }

func set(n string, v ir.Expr) *ir.Assign { return &ir.Assign{Name: n, Value: v} }

func ret(v ir.Expr) *ir.Return { return &ir.Return{Value: v} }

func ifs(c ir.Expr, then *ir.Block, els *ir.Block) *ir.If {
	return &ir.If{Cond: c, Then: then, Else: els}
}

func add(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Add, x, y) }
func mul(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Mul, x, y) }

func kernel(name string, params []*ir.Param, body ...ir.Stmt) *ir.Kernel {
	return &ir.Kernel{Name: name, Params: params, Body: blk(body...)}
}

func module(name string, ks ...*ir.Kernel) *ir.Module {
	return &ir.Module{
		Name: name, Prefix: name, Kernels: ks,
		Errors: []ir.ErrorCode{
			{Code: -1, Name: "bad_input", Msg: "bad input"},
			{Code: -3, Name: "no_memory", Msg: "out of memory"},
		},
	}
}

// ---- toolchain ----

type toolchain struct {
	opt, llc, gcc string
	mcpu          string
	// mattr is -mattr for opt and llc: "+f16c" where the host converts
	// half natively but is not x86-64-v3 as a whole (a VM may hide lzcnt),
	// so half widening is still native rather than a libgcc call that gcc's
	// runtime does not define (__gnu_h2f_ieee).
	mattr string
}

// cpuArgs returns the -mcpu (and -mattr) flags for this host.
func (tc *toolchain) cpuArgs() []string {
	args := []string{"-mcpu=" + tc.mcpu}
	if tc.mattr != "" {
		args = append(args, "-mattr="+tc.mattr)
	}
	return args
}

// hostHasFlag reports whether /proc/cpuinfo lists flag.
func hostHasFlag(flag string) bool {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "flags") {
			return slices.Contains(strings.Fields(line), flag)
		}
	}
	return false
}

func findTool(name string) string {
	for _, dir := range []string{"/usr/lib/llvm-14/bin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

// cpuMcpu is x86-64-v3 when this CPU can run it, else x86-64.
func cpuMcpu() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "x86-64"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "flags") {
			continue
		}
		fields := map[string]bool{}
		for _, f := range strings.Fields(line) {
			fields[f] = true
		}
		for _, need := range []string{"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"} {
			if !fields[need] {
				return "x86-64"
			}
		}
		return "x86-64-v3"
	}
	return "x86-64"
}

func needToolchain(t *testing.T) *toolchain {
	t.Helper()
	tc := &toolchain{opt: findTool("opt"), llc: findTool("llc"), gcc: findTool("gcc"), mcpu: cpuMcpu()}
	if tc.mcpu == "x86-64" && hostHasFlag("f16c") {
		tc.mattr = "+f16c"
	}
	var missing []string
	for _, tool := range []struct{ name, path string }{{"opt", tc.opt}, {"llc", tc.llc}, {"gcc", tc.gcc}} {
		if tool.path == "" {
			missing = append(missing, tool.name)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("LLVM 14 opt/llc and gcc are needed to compile and run generated code; missing: %s", strings.Join(missing, ", "))
		needtool.Check(t, errors.New(msg))
	}
	return tc
}

func runCmd(t *testing.T, dir, name string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, o.String(), e.String())
	}
	return o.String(), e.String()
}

type built struct {
	dir     string
	ll      string // emitted IR
	optLL   string // opt -O3 output
	remarks string // opt's -pass-remarks=loop-vectorize output
	exe     string
}

// build emits m, verifies and optimizes it, compiles it to an object and
// links it with the C driver.
func (tc *toolchain) build(t *testing.T, m *ir.Module, driver string) *built {
	t.Helper()
	ll, err := Emit(m)
	if err != nil {
		t.Fatalf("Emit: %v", err)
	}
	dir := t.TempDir()
	b := &built{dir: dir, ll: ll}
	if err := os.WriteFile(filepath.Join(dir, "k.ll"), []byte(ll), 0o644); err != nil {
		t.Fatal(err)
	}
	runCmd(t, dir, tc.opt, "-verify", "-disable-output", "k.ll")
	_, b.remarks = runCmd(t, dir, tc.opt, append(append([]string{"-O3"}, tc.cpuArgs()...), "-pass-remarks=loop-vectorize", "-S", "k.ll", "-o", "k.opt.ll")...)
	opt, err := os.ReadFile(filepath.Join(dir, "k.opt.ll"))
	if err != nil {
		t.Fatal(err)
	}
	b.optLL = string(opt)
	runCmd(t, dir, tc.llc, append(append([]string{"-O3"}, tc.cpuArgs()...), "-filetype=obj", "-relocation-model=pic", "k.opt.ll", "-o", "k.o")...)
	if driver != "" {
		src := "#include <stdio.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n#include <math.h>\n#include <unistd.h>\n" + driver
		if err := os.WriteFile(filepath.Join(dir, "main.c"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		runCmd(t, dir, tc.gcc, "-O1", "-o", "prog", "main.c", "k.o", "-lm", "-lpthread")
		b.exe = filepath.Join(dir, "prog")
	}
	return b
}

func (b *built) run(t *testing.T) string {
	t.Helper()
	out, _ := runCmd(t, b.dir, b.exe)
	return out
}

// results parses driver output lines "key value".
func results(t *testing.T, out string) map[string]string {
	t.Helper()
	r := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("bad driver line %q", line)
		}
		r[k] = v
	}
	return r
}

func checkInt(t *testing.T, r map[string]string, key string, want int64) {
	t.Helper()
	got, err := strconv.ParseInt(r[key], 10, 64)
	if err != nil {
		t.Errorf("%s: bad value %q", key, r[key])
		return
	}
	if got != want {
		t.Errorf("%s = %d, want %d", key, got, want)
	}
}

func checkFloat(t *testing.T, r map[string]string, key string, want float64) {
	t.Helper()
	got, err := strconv.ParseFloat(r[key], 64)
	if strings.HasSuffix(r[key], "nan") { // glibc prints -nan
		got, err = math.NaN(), nil
	}
	if err != nil {
		t.Errorf("%s: bad value %q", key, r[key])
		return
	}
	switch {
	case math.IsNaN(want):
		if !math.IsNaN(got) {
			t.Errorf("%s = %v, want NaN", key, got)
		}
	case math.IsInf(want, 0):
		if got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	default:
		if math.Abs(got-want) > 2e-6*math.Abs(want)+1e-12 {
			t.Errorf("%s = %.9g, want %.9g", key, got, want)
		}
	}
}

// ---- tests ----

func TestArithmetic(t *testing.T) {
	t.Parallel()
	tc := needToolchain(t)
	a, b, x := i32("a"), i32("b"), f32("x")
	var stmts []ir.Stmt
	ni, nf, nd, nl := 0, 0, 0, 0
	oi := func(e ir.Expr) { stmts = append(stmts, store("oi", ir.Int(int64(ni)), e)); ni++ }
	of := func(e ir.Expr) { stmts = append(stmts, store("of", ir.Int(int64(nf)), e)); nf++ }
	od := func(e ir.Expr) { stmts = append(stmts, store("od", ir.Int(int64(nd)), e)); nd++ }
	ol := func(e ir.Expr) { stmts = append(stmts, store("ol", ir.Int(int64(nl)), e)); nl++ }
	b2i := func(e ir.Expr) ir.Expr { return ir.Cvt(ir.I32, e) }
	u8 := ir.R("u", ir.U8)

	// integers: a = -7, b = 2
	for _, op := range []ir.BinOp{ir.Add, ir.Sub, ir.Mul, ir.Div, ir.Rem, ir.Min, ir.Max, ir.Shl, ir.Shr, ir.And, ir.Or, ir.Xor} {
		oi(ir.Bin(op, a, b))
	}
	oi(ir.Un(ir.Neg, a))
	oi(ir.Un(ir.Not, a))
	oi(ir.Un(ir.Abs, a))
	for _, op := range []ir.BinOp{ir.Lt, ir.Le, ir.Gt, ir.Ge, ir.Eq, ir.Ne} {
		oi(b2i(ir.Bin(op, a, b)))
	}
	oi(ir.Sel(ir.Bin(ir.Lt, a, b), ir.Int(100), ir.Int(200)))
	oi(ir.Bin(ir.Rem, ir.Un(ir.Neg, a), ir.Un(ir.Neg, b)))              // 7 % -2
	oi(ir.Bin(ir.Div, ir.Un(ir.Neg, a), ir.Un(ir.Neg, b)))              // 7 / -2
	oi(ir.Bin(ir.Rem, a, ir.Un(ir.Neg, b)))                             // -7 % -2
	oi(ir.Cvt(ir.I32, x))                                               // fptosi -2.75
	oi(&ir.Bitcast{To: ir.I32, X: x})                                   // bits of -2.75
	oi(&ir.Bitcast{To: ir.I32, X: ir.Float(1)})                         // 0x3f800000
	stmts = append(stmts, let("u", ir.Cvt(ir.U8, add(a, ir.Int(207))))) // 200
	oi(ir.Cvt(ir.I32, u8))
	oi(ir.Cvt(ir.I32, ir.Bin(ir.Div, u8, ir.IntT(ir.U8, 3))))
	oi(ir.Cvt(ir.I32, ir.Bin(ir.Shr, u8, ir.IntT(ir.U8, 1))))
	oi(b2i(ir.Bin(ir.Gt, u8, ir.IntT(ir.U8, 100))))
	oi(ir.Cvt(ir.I32, ir.Cvt(ir.I16, a)))
	oi(b2i(ir.Bin(ir.And, ir.Bin(ir.Lt, a, b), ir.Bin(ir.Gt, a, b))))
	oi(b2i(ir.Bin(ir.Or, ir.Bin(ir.Lt, a, b), ir.Bin(ir.Gt, a, b))))
	oi(b2i(ir.Bin(ir.Xor, ir.BoolConst(true), ir.Bin(ir.Lt, a, b))))
	oi(b2i(ir.Un(ir.Not, ir.Bin(ir.Lt, a, b))))
	nan := &ir.Const{T: ir.F32, Float: math.NaN()}
	oi(b2i(ir.Bin(ir.Ne, nan, nan)))
	oi(b2i(ir.Bin(ir.Eq, nan, nan)))
	oi(b2i(ir.Bin(ir.Lt, nan, x)))
	oi(b2i(ir.Cvt(ir.Bool, x)))
	oi(ir.Cvt(ir.I32, ir.Cvt(ir.Bool, a)))
	oi(ir.Cvt(ir.I32, ir.Bin(ir.Max, ir.IntT(ir.U8, 3), u8))) // unsigned max: 200

	// floats: x = -2.75
	of(add(x, ir.Float(1.5)))
	of(ir.Bin(ir.Min, x, ir.Float(0.5)))
	of(ir.Bin(ir.Max, x, ir.Float(0.5)))
	for _, op := range []ir.UnOp{ir.Exp, ir.Tanh, ir.Floor, ir.Exp2, ir.Sin, ir.Cos, ir.Neg, ir.Abs} {
		of(ir.Un(op, x))
	}
	of(ir.Un(ir.Sqrt, ir.Un(ir.Abs, x)))
	of(ir.Un(ir.Log, ir.Un(ir.Abs, x)))
	of(ir.Bin(ir.Div, ir.Cvt(ir.F32, a), ir.Cvt(ir.F32, b)))
	of(&ir.Bitcast{To: ir.F32, X: ir.Int(0x40490FDB)})
	of(ir.Cvt(ir.F32, u8))
	of(ir.Bin(ir.Div, x, ir.Float(0)))
	of(ir.Un(ir.Exp, add(ir.Float(math.Inf(-1)), x)))
	of(ir.Bin(ir.Max, ir.Float(math.Inf(-1)), x))
	of(ir.Float(0.1))
	of(ir.Bin(ir.Sub, ir.Float(1e-30), x))
	of(ir.Bin(ir.Rem, x, ir.Float(2)))
	of(ir.Cvt(ir.F32, ir.Bin(ir.Div, ir.Cvt(ir.F64, x), &ir.Const{T: ir.F64, Float: 3})))

	// doubles and i64
	od(mul(ir.Cvt(ir.F64, x), &ir.Const{T: ir.F64, Float: 2}))
	od(ir.Un(ir.Tanh, ir.Cvt(ir.F64, x)))
	od(ir.Un(ir.Exp, ir.Cvt(ir.F64, x)))
	od(&ir.Const{T: ir.F64, Float: 0.1})
	l := mul(ir.Cvt(ir.I64, a), ir.IntT(ir.I64, 1000000000000))
	ol(l)
	ol(ir.Bin(ir.Div, l, ir.Cvt(ir.I64, b)))
	ol(ir.Cvt(ir.I64, u8))
	ol(ir.Bin(ir.Shr, l, ir.IntT(ir.I64, 3)))
	ol(&ir.Bitcast{To: ir.I64, X: &ir.Const{T: ir.F64, Float: math.Copysign(0, -1)}})

	// f16 buffers travel as i16: copy bits and flip the sign bit
	stmts = append(stmts,
		store("hout", ir.Int(0), ir.Ld("h", ir.I16, ir.Int(0))),
		store("hout", ir.Int(1), ir.Bin(ir.Xor, ir.Ld("h", ir.I16, ir.Int(1)), ir.IntT(ir.I16, -32768))),
		ret(ir.Int(0)))

	k := kernel("arith", []*ir.Param{buf("oi", ir.I32), buf("of", ir.F32), buf("od", ir.F64), buf("ol", ir.I64),
		scalar("a", ir.I32), scalar("b", ir.I32), scalar("x", ir.F32), buf("h", ir.F16), buf("hout", ir.I16)}, stmts...)
	driver := fmt.Sprintf(`
int32_t arith(int32_t*, float*, double*, int64_t*, int32_t, int32_t, float, uint16_t*, int16_t*);
int main(void) {
	int32_t oi[%d]; float of[%d]; double od[%d]; int64_t ol[%d];
	uint16_t h[2] = {0x3c00, 0x4000}; int16_t hout[2] = {0, 0};
	int st = arith(oi, of, od, ol, -7, 2, -2.75f, h, hout);
	printf("status %%d\n", st);
	for (int i = 0; i < %d; i++) printf("i%%d %%d\n", i, oi[i]);
	for (int i = 0; i < %d; i++) printf("f%%d %%.9g\n", i, of[i]);
	for (int i = 0; i < %d; i++) printf("d%%d %%.17g\n", i, od[i]);
	for (int i = 0; i < %d; i++) printf("l%%d %%lld\n", i, (long long)ol[i]);
	printf("h0 %%d\nh1 %%d\n", (uint16_t)hout[0], (uint16_t)hout[1]);
	return 0;
}
`, ni, nf, nd, nl, ni, nf, nd, nl)
	bl := tc.build(t, module("arith", k), driver)
	r := results(t, bl.run(t))
	checkInt(t, r, "status", 0)
	wantI := []int64{-5, -9, -14, -3, -1, -7, 2, -28, -2, 0, -5, -5, 7, 6, 7,
		1, 1, 0, 0, 0, 1, 100, 1, -3, -1, -2, int64(int32(math.Float32bits(-2.75))), 0x3f800000,
		200, 66, 100, 1, -7, 0, 1, 0, 0, 1, 0, 0, 1, 1, 200}
	if len(wantI) != ni {
		t.Fatalf("test bug: %d int expectations for %d stores", len(wantI), ni)
	}
	for i, w := range wantI {
		checkInt(t, r, fmt.Sprintf("i%d", i), w)
	}
	x64 := float64(float32(-2.75))
	f := func(v float64) float64 { return float64(float32(v)) }
	wantF := []float64{-1.25, -2.75, 0.5, f(math.Exp(x64)), f(math.Tanh(x64)), -3, f(math.Exp2(x64)), f(math.Sin(x64)), f(math.Cos(x64)),
		2.75, 2.75, f(math.Sqrt(2.75)), f(math.Log(2.75)), -3.5, f(math.Pi), 200, math.Inf(-1), 0, -2.75, f(0.1), 2.75, -0.75, f(-2.75 / 3)}
	if len(wantF) != nf {
		t.Fatalf("test bug: %d float expectations for %d stores", len(wantF), nf)
	}
	for i, w := range wantF {
		checkFloat(t, r, fmt.Sprintf("f%d", i), w)
	}
	if r["f19"] != "0.100000001" {
		t.Errorf("f32 constant 0.1 printed as %s, want 0.100000001", r["f19"])
	}
	checkFloat(t, r, "d0", -5.5)
	checkFloat(t, r, "d1", math.Tanh(x64))
	checkFloat(t, r, "d2", math.Exp(x64))
	if r["d3"] != "0.10000000000000001" {
		t.Errorf("f64 constant 0.1 printed as %s", r["d3"])
	}
	checkInt(t, r, "l0", -7000000000000)
	checkInt(t, r, "l1", -3500000000000)
	checkInt(t, r, "l2", 200)
	checkInt(t, r, "l3", -875000000000)
	checkInt(t, r, "l4", math.MinInt64)
	checkInt(t, r, "h0", 0x3c00)
	checkInt(t, r, "h1", 0xc000)
	if !strings.Contains(bl.ll, "call float @tanhf(") || !strings.Contains(bl.ll, "@llvm.exp.f32(") {
		t.Errorf("tanh/exp are not emitted as tanhf and llvm.exp.f32")
	}
}

func TestSerialReduction(t *testing.T) {
	t.Parallel()
	tc := needToolchain(t)
	i := i32("i")
	k := kernel("sum", []*ir.Param{buf("x", ir.F32), scalar("n", ir.I32), buf("out", ir.F32), buf("iout", ir.I32)},
		vr("acc", ir.Float(0)),
		vr("c", ir.Int(0)),
		loop("i", ir.Int(0), i32("n"), ir.Serial,
			set("acc", add(f32("acc"), ir.Ld("x", ir.F32, i))),
			set("c", add(i32("c"), mul(i, i)))),
		store("out", ir.Int(0), f32("acc")),
		store("iout", ir.Int(0), i32("c")),
		ret(ir.Int(0)))
	driver := `
int32_t sum(float*, int32_t, float*, int32_t*);
int main(void) {
	float x[100], out[1]; int32_t iout[1];
	for (int i = 0; i < 100; i++) x[i] = 0.5f * i;
	int st = sum(x, 100, out, iout);
	printf("status %d\nsum %.9g\nsq %d\n", st, out[0], iout[0]);
	return 0;
}
`
	bl := tc.build(t, module("red", k), driver)
	r := results(t, bl.run(t))
	checkInt(t, r, "status", 0)
	checkFloat(t, r, "sum", 2475)
	checkInt(t, r, "sq", 328350)
	if strings.Contains(bl.ll, "reassoc") {
		t.Errorf("serial loop got fast-math flags:\n%s", bl.ll)
	}
}

// TestVectorLoop checks that a vector-kind dot product is vectorized by
// opt -O3 (the fadd/fmul carry reassoc contract) while the same loop as a
// serial loop keeps strict FP order, and that a vector softmax-style loop
// keeps -inf semantics.
func TestVectorLoop(t *testing.T) {
	t.Parallel()
	tc := needToolchain(t)
	i := i32("i")
	dot := func(name string, kind ir.LoopKind) *ir.Kernel {
		return kernel(name, []*ir.Param{buf("a", ir.F32), buf("b", ir.F32), scalar("n", ir.I32), buf("out", ir.F32)},
			vr("acc", ir.Float(0)),
			loop("i", ir.Int(0), i32("n"), kind,
				set("acc", add(f32("acc"), mul(ir.Ld("a", ir.F32, i), ir.Ld("b", ir.F32, i))))),
			store("out", ir.Int(0), f32("acc")),
			ret(ir.Int(0)))
	}
	negInf := ir.Float(math.Inf(-1))
	soft := kernel("soft", []*ir.Param{buf("a", ir.F32), scalar("n", ir.I32), buf("out", ir.F32)},
		vr("m", negInf),
		loop("i", ir.Int(0), i32("n"), ir.Vector,
			set("m", ir.Bin(ir.Max, f32("m"), ir.Ld("a", ir.F32, i)))),
		vr("s", ir.Float(0)),
		loop("i", ir.Int(0), i32("n"), ir.Vector,
			set("s", add(f32("s"), ir.Un(ir.Exp, ir.Bin(ir.Sub, ir.Ld("a", ir.F32, i), f32("m")))))),
		store("out", ir.Int(0), f32("m")),
		store("out", ir.Int(1), f32("s")),
		store("out", ir.Int(2), ir.Un(ir.Log, f32("s"))),
		ret(ir.Int(0)))
	driver := `
int32_t dot(float*, float*, int32_t, float*);
int32_t dot_serial(float*, float*, int32_t, float*);
int32_t soft(float*, int32_t, float*);
int main(void) {
	enum { N = 1003 };
	static float a[N], b[N];
	float out[3];
	for (int i = 0; i < N; i++) { a[i] = (float)(i % 7); b[i] = (float)(i % 5) - 2.0f; }
	dot(a, b, N, out); printf("dot %.9g\n", out[0]);
	dot_serial(a, b, N, out); printf("dot_serial %.9g\n", out[0]);
	dot(a, b, 0, out); printf("dot0 %.9g\n", out[0]);
	for (int i = 0; i < N; i++) a[i] = -INFINITY;
	soft(a, N, out); printf("allinf_m %.9g\nallinf_s %.9g\n", out[0], out[1]);
	for (int i = 0; i < N; i++) a[i] = (i % 3 == 0) ? -INFINITY : 0.0f;
	soft(a, N, out); printf("m %.9g\ns %.9g\nlse %.9g\n", out[0], out[1], out[2]);
	return 0;
}
`
	bl := tc.build(t, module("vec", dot("dot", ir.Vector), dot("dot_serial", ir.Serial), soft), driver)
	var want float64
	for j := 0; j < 1003; j++ {
		want += float64(j%7) * float64(j%5-2)
	}
	r := results(t, bl.run(t))
	checkFloat(t, r, "dot", want)
	checkFloat(t, r, "dot_serial", want)
	checkFloat(t, r, "dot0", 0)
	checkFloat(t, r, "allinf_m", math.Inf(-1))
	checkFloat(t, r, "allinf_s", math.NaN()) // exp(-inf - -inf) = exp(nan)
	checkFloat(t, r, "m", 0)
	checkFloat(t, r, "s", 668)
	checkFloat(t, r, "lse", math.Log(668))

	if !strings.Contains(bl.ll, "fadd reassoc contract float") || !strings.Contains(bl.ll, "fmul reassoc contract float") {
		t.Errorf("vector loop arithmetic lacks reassoc contract:\n%s", bl.ll)
	}
	for _, bad := range []string{"nnan", "ninf", " fast "} {
		if strings.Contains(bl.ll, bad) {
			t.Errorf("emitted IR contains %q", bad)
		}
	}
	// The vector dot product must be vectorized.
	width := "<8 x float>" // AVX: x86-64-v3, or +f16c, which implies AVX
	if tc.mcpu != "x86-64-v3" && tc.mattr == "" {
		width = "<4 x float>"
	}
	if !strings.Contains(bl.remarks, "vectorized loop") && !strings.Contains(bl.optLL, width) {
		t.Errorf("vector loop not vectorized; remarks:\n%s", bl.remarks)
	}
	if !strings.Contains(bl.optLL, width) {
		t.Errorf("optimized IR has no %s", width)
	}
	// dot_serial must stay scalar: only the vector kernels' loops vectorize.
	body := funcBody(bl.optLL, "dot_serial")
	if body == "" || strings.Contains(body, "x float>") {
		t.Errorf("serial loop was vectorized (or not found):\n%s", body)
	}
	if body := funcBody(bl.optLL, "dot"); !strings.Contains(body, width) {
		t.Errorf("dot has no %s after opt:\n%s", width, body)
	}
}

// funcBody returns the text of function name in an .ll file.
func funcBody(ll, name string) string {
	re := regexp.MustCompile(`(?m)^define [^\n]*@` + regexp.QuoteMeta(name) + `\(`)
	loc := re.FindStringIndex(ll)
	if loc == nil {
		return ""
	}
	rest := ll[loc[0]:]
	if end := strings.Index(rest, "\n}\n"); end >= 0 {
		return rest[:end+3]
	}
	return rest
}

func TestNestedLoopsContinue(t *testing.T) {
	t.Parallel()
	tc := needToolchain(t)
	i, j := i32("i"), i32("j")
	eq := func(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Eq, x, y) }
	rem := func(x ir.Expr, n int64) ir.Expr { return ir.Bin(ir.Rem, x, ir.Int(n)) }
	cont := blk(&ir.Continue{})
	k := kernel("nest", []*ir.Param{scalar("n", ir.I32), buf("out", ir.I32)},
		vr("acc", ir.Int(0)),
		loop("i", ir.Int(0), i32("n"), ir.Serial,
			ifs(eq(rem(i, 3), ir.Int(0)), cont, nil),
			loop("j", ir.Int(0), i, ir.Serial,
				ifs(eq(rem(j, 2), ir.Int(1)), cont, blk(set("acc", add(i32("acc"), j)))),
				set("acc", add(i32("acc"), mul(i, j)))),
			ifs(eq(i, ir.Int(7)), cont, nil),
			set("acc", add(i32("acc"), ir.Int(1000)))),
		store("out", ir.Int(0), i32("acc")),
		// hi is evaluated once: the body's stores to out[1] do not change the trip count
		store("out", ir.Int(1), ir.Int(3)),
		vr("trips", ir.Int(0)),
		loop("i", ir.Int(0), ir.Ld("out", ir.I32, ir.Int(1)), ir.Serial,
			store("out", ir.Int(1), ir.Int(100)),
			set("trips", add(i32("trips"), ir.Int(1)))),
		store("out", ir.Int(2), i32("trips")),
		// an empty range and a reversed one run zero times
		loop("i", ir.Int(5), ir.Int(5), ir.Serial, store("out", ir.Int(3), ir.Int(-1))),
		loop("i", ir.Int(5), ir.Int(-5), ir.Vector, store("out", ir.Int(3), ir.Int(-1))),
		// return from inside nested loops
		loop("i", ir.Int(0), i32("n"), ir.Serial,
			loop("j", ir.Int(0), i32("n"), ir.Serial,
				ifs(eq(add(i, j), ir.Int(9)), blk(ifs(ir.Bin(ir.Gt, i, ir.Int(2)), blk(ret(add(mul(i, ir.Int(100)), j))), nil)), nil))),
		ret(ir.Int(-1)))
	driver := `
int32_t nest(int32_t, int32_t*);
int main(void) {
	int32_t out[4] = {0, 0, 0, 7};
	int st = nest(10, out);
	printf("status %d\nacc %d\ntrips %d\nempty %d\n", st, out[0], out[2], out[3]);
	st = nest(2, out);
	printf("status2 %d\n", st);
	return 0;
}
`
	var acc int64
	for i := 0; i < 10; i++ {
		if i%3 == 0 {
			continue
		}
		for j := 0; j < i; j++ {
			if j%2 == 1 {
				continue
			}
			acc += int64(j)
			acc += int64(i * j)
		}
		if i == 7 {
			continue
		}
		acc += 1000
	}
	bl := tc.build(t, module("nest", k), driver)
	r := results(t, bl.run(t))
	checkInt(t, r, "acc", acc)
	checkInt(t, r, "trips", 3)
	checkInt(t, r, "empty", 7)
	checkInt(t, r, "status", 306) // i=3, j=6
	checkInt(t, r, "status2", -1)
}

func parallelModule() *ir.Module {
	i, j := i32("i"), i32("j")
	fill := kernel("fill", []*ir.Param{buf("out", ir.F32), scalar("n", ir.I32), scalar("scale", ir.F32), buf("iout", ir.I32)},
		let("base", ir.Int(3)),
		vr("v", ir.Float(2.5)),
		set("v", mul(f32("v"), ir.Float(2))), // 5.0, read by value at loop start
		&ir.Alloc{Name: "shared", T: ir.I32, Size: 1},
		store("shared", ir.Int(0), ir.Int(11)),
		loop("i", ir.Int(0), i32("n"), ir.Parallel,
			&ir.Alloc{Name: "tmp", T: ir.F32, Size: 4},
			loop("j", ir.Int(0), ir.Int(4), ir.Serial,
				store("tmp", j, mul(ir.Cvt(ir.F32, add(i, j)), f32("scale")))),
			let("s", add(ir.Ld("tmp", ir.F32, ir.Int(0)), ir.Ld("tmp", ir.F32, ir.Int(3)))),
			ifs(ir.Bin(ir.Eq, ir.Bin(ir.Rem, i, ir.Int(10)), ir.Int(0)),
				blk(store("out", i, ir.Float(-1)), &ir.Continue{}), nil),
			vr("w", ir.Float(0)),
			loop("j", ir.Int(0), ir.Int(8), ir.Vector,
				ifs(ir.Bin(ir.Eq, j, ir.Int(5)), blk(&ir.Continue{}), nil),
				set("w", add(f32("w"), ir.Float(1)))),
			store("out", i, add(add(add(f32("s"), ir.Cvt(ir.F32, i32("base"))), f32("v")), f32("w")))),
		// lo != 0; the body reads an outer local array
		loop("i", ir.Int(5), i32("n"), ir.Parallel,
			store("iout", i, add(mul(i, i32("base")), ir.Ld("shared", ir.I32, ir.Int(0))))),
		ret(ir.Int(0)))
	return module("par", fill)
}

func TestParallelFor(t *testing.T) {
	t.Parallel()
	tc := needToolchain(t)
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
	bl := tc.build(t, parallelModule(), driver)
	r := results(t, bl.run(t))
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
		checkInt(t, r, fmt.Sprintf("threads%d", run), int64(threads))
		checkInt(t, r, fmt.Sprintf("status%d", run), 0)
		checkFloat(t, r, fmt.Sprintf("sum%d", run), wantSum)
		checkInt(t, r, fmt.Sprintf("isum%d", run), wantISum)
		if got := r[fmt.Sprintf("out%d", run)]; got != strings.Join(wantOut, ",") {
			t.Errorf("run %d (threads %d): out = %.200s...", run, threads, got)
		}
		if got := r[fmt.Sprintf("iout%d", run)]; got != strings.Join(wantIout, ",") {
			t.Errorf("run %d (threads %d): iout = %.200s...", run, threads, got)
		}
	}
	checkFloat(t, r, "n0", 42)
	checkFloat(t, r, "n1", -1)
	checkInt(t, r, "reset", int64(online))
	checkInt(t, r, "clamped", int64(ThreadLimit(online)))
	checkInt(t, r, "clamped_status", 0)
	for _, s := range []string{"define internal void @fill.par0(i8* %ctx, i32 %idx, i8* noalias %scratch)", "define internal void @fill.par1(",
		"call i32 @par.parallel_for(", "@pthread_create(", "atomicrmw add"} {
		if !strings.Contains(bl.ll, s) {
			t.Errorf("emitted IR lacks %q", s)
		}
	}
	// Allocas of the outlined body sit in its entry block.
	body := funcBody(bl.ll, "fill.par0")
	entry, _, _ := strings.Cut(body, "\n\n")
	if !strings.Contains(entry, "%tmp = alloca float, i32 4") {
		t.Errorf("alloc tmp is not in the entry block of fill.par0:\n%s", body)
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
	tc := needToolchain(t)
	i, j := i32("i"), i32("j")
	k := kernel("hs", []*ir.Param{buf("out", ir.F32), scalar("n", ir.I32)},
		&ir.Malloc{Name: "w", T: ir.F32, Size: ir.Int(3)},
		store("w", ir.Int(0), ir.Float(0.5)),
		loop("i", ir.Int(0), i32("n"), ir.Parallel,
			&ir.Alloc{Name: "a", T: ir.F32, Size: 300, Heap: true},
			&ir.Alloc{Name: "b", T: ir.I64, Size: 5, Heap: true},
			&ir.Alloc{Name: "c", T: ir.F32, Size: 4},
			loop("j", ir.Int(0), ir.Int(300), ir.Serial, store("a", j, ir.Cvt(ir.F32, add(i, j)))),
			store("b", ir.Int(4), ir.IntT(ir.I64, 1)),
			store("c", ir.Int(0), ir.Cvt(ir.F32, ir.Ld("b", ir.I64, ir.Int(4)))),
			store("out", i, add(add(ir.Ld("a", ir.F32, ir.Int(299)), ir.Ld("c", ir.F32, ir.Int(0))), ir.Ld("w", ir.F32, ir.Int(0))))),
		&ir.Free{Name: "w"},
		ret(ir.Int(0)))
	m := module("hs", k)
	m.Errors = []ir.ErrorCode{{Code: -7, Name: NoMemoryError, Msg: "no memory"}}
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
	bl := tc.build(t, m, driver)
	r := results(t, bl.run(t))
	want := 0.0
	for i := range 100 {
		want += float64(i+299) + 1 + 0.5
	}
	for run := range 3 {
		checkInt(t, r, fmt.Sprintf("status%d", run), 0)
		checkFloat(t, r, fmt.Sprintf("sum%d", run), want)
	}
	checkInt(t, r, "nomem", -7)
	checkInt(t, r, "untouched", 1)
	checkInt(t, r, "wfreed", 1) // the NO_MEMORY return frees what the kernel malloc'd
	body := funcBody(bl.ll, "hs.par0.body")
	if strings.Contains(body, "%a = alloca") || strings.Contains(body, "%b = alloca") || !strings.Contains(body, "%c = alloca") {
		t.Errorf("heap arrays a, b must not be allocas, c must:\n%s", body)
	}
	if !strings.Contains(bl.ll, "call i32 @hs.parallel_for(i32 %") || !strings.Contains(bl.ll, "i64 1280)") {
		t.Errorf("parallel_for does not get the 1280-byte scratch size:\n%s", funcBody(bl.ll, "hs"))
	}
}

func TestMallocFree(t *testing.T) {
	t.Parallel()
	tc := needToolchain(t)
	i := i32("i")
	mf := kernel("mf", []*ir.Param{scalar("n", ir.I32), buf("out", ir.F32)},
		&ir.Malloc{Name: "w", T: ir.F32, Size: i32("n")},
		loop("i", ir.Int(0), i32("n"), ir.Serial, store("w", i, ir.Cvt(ir.F32, i))),
		vr("s", ir.Float(0)),
		loop("i", ir.Int(0), i32("n"), ir.Serial, set("s", add(f32("s"), ir.Ld("w", ir.F32, i)))),
		&ir.Free{Name: "w"},
		store("out", ir.Int(0), f32("s")),
		ret(ir.Int(0)))
	oom := kernel("oom", []*ir.Param{scalar("n", ir.I32)},
		&ir.Malloc{Name: "big", T: ir.F64, Size: mul(ir.Cvt(ir.I64, i32("n")), ir.IntT(ir.I64, 1<<40))},
		&ir.Free{Name: "big"},
		ret(ir.Int(0)))
	driver := `
int32_t mf(int32_t, float*);
int32_t oom(int32_t);
int main(void) {
	float out[1] = {0};
	int st = mf(1000, out);
	printf("status %d\nsum %.9g\n", st, out[0]);
	st = mf(0, out);
	printf("status0 %d\nsum0 %.9g\n", st, out[0]);
	printf("oom %d\n", oom(1 << 22));
	printf("overflow %d\n", oom(1 << 21));
	printf("negative %d\n", oom(-1));
	printf("small %d\n", oom(0));
	return 0;
}
`
	bl := tc.build(t, module("mem", mf, oom), driver)
	r := results(t, bl.run(t))
	checkInt(t, r, "status", 0)
	checkFloat(t, r, "sum", 499500)
	checkInt(t, r, "status0", 0)
	checkFloat(t, r, "sum0", 0)
	checkInt(t, r, "oom", -3)
	checkInt(t, r, "overflow", -3)
	checkInt(t, r, "negative", -3)
	checkInt(t, r, "small", 0)

	// Without a no_memory error the status is -1.
	m := &ir.Module{Name: "m2", Prefix: "m2", Kernels: []*ir.Kernel{oom}}
	ll, err := Emit(m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ll, "ret i32 -1") {
		t.Errorf("malloc failure does not return -1 without a no_memory error")
	}
}

func TestStrerror(t *testing.T) {
	t.Parallel()
	tc := needToolchain(t)
	m := module("se", kernel("nop", nil, ret(ir.Int(0))))
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
	r := results(t, tc.build(t, m, driver).run(t))
	want := map[string]string{"c0": "[ok]", "c-1": "[bad input]", "c-3": "[out of memory]",
		"c-9": "[a \"quoted\" message\\with\tescapes]", "c42": "[unknown status]", "c-2": "[unknown status]", "nop": "0"}
	for k, w := range want {
		if r[k] != w {
			t.Errorf("%s = %q, want %q", k, r[k], w)
		}
	}
}

func TestCallStmt(t *testing.T) {
	t.Parallel()
	tc := needToolchain(t)
	i := i32("i")
	helper := kernel("helper", []*ir.Param{buf("b", ir.I32), scalar("n", ir.I32)},
		loop("i", ir.Int(0), i32("n"), ir.Serial, store("b", i, mul(i, ir.Int(2)))),
		ret(add(i32("n"), ir.Int(100))))
	caller := kernel("caller", []*ir.Param{buf("b", ir.I32), scalar("n", ir.I32)},
		&ir.CallStmt{Result: "r", Fn: "helper", Args: []ir.Expr{i32("b"), i32("n")}},
		&ir.Alloc{Name: "tmp", T: ir.I32, Size: 4},
		&ir.CallStmt{Result: "r2", Fn: "helper", Args: []ir.Expr{i32("tmp"), ir.Int(4)}},
		&ir.CallStmt{Fn: "helper", Args: []ir.Expr{i32("tmp"), ir.Int(1)}},
		store("b", i32("n"), add(i32("r"), ir.Ld("tmp", ir.I32, ir.Int(3)))),
		ret(i32("r2")))
	driver := `
int32_t caller(int32_t*, int32_t);
int main(void) {
	int32_t b[6] = {0};
	int st = caller(b, 5);
	printf("status %d\n", st);
	for (int i = 0; i < 6; i++) printf("b%d %d\n", i, b[i]);
	return 0;
}
`
	r := results(t, tc.build(t, module("call", helper, caller), driver).run(t))
	checkInt(t, r, "status", 104)
	for i := 0; i < 5; i++ {
		checkInt(t, r, fmt.Sprintf("b%d", i), int64(2*i))
	}
	checkInt(t, r, "b5", 105+6)
}

func TestDeterministic(t *testing.T) {
	a, err := Emit(parallelModule())
	if err != nil {
		t.Fatal(err)
	}
	m := parallelModule()
	b, err := Emit(m)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Emit(m)
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
			s, err := Emit(m)
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
	i := i32("i")
	scale := kernel("scale", []*ir.Param{buf("x", ir.F32), scalar("n", ir.I32), scalar("s", ir.F32)},
		ifs(ir.Bin(ir.Lt, i32("n"), ir.Int(0)), blk(ret(ir.Int(-1))), nil),
		loop("i", ir.Int(0), i32("n"), ir.Vector,
			store("x", i, mul(ir.Ld("x", ir.F32, i), f32("s")))),
		loop("i", ir.Int(0), i32("n"), ir.Parallel,
			store("x", i, ir.Bin(ir.Max, ir.Ld("x", ir.F32, i), ir.Float(math.Inf(-1))))),
		ret(ir.Int(0)))
	return &ir.Module{Name: "tiny", Prefix: "tiny", Kernels: []*ir.Kernel{scale},
		Errors: []ir.ErrorCode{{Code: -1, Name: "bad_input", Msg: "bad input"}}}
}

func TestGolden(t *testing.T) {
	got, err := Emit(goldenModule())
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
		t.Fatalf("%v (run go test ./codegen/llvm -update)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test ./codegen/llvm -update and review the diff):\n%s", path, got)
	}
}

func TestErrors(t *testing.T) {
	i := i32("i")
	p := []*ir.Param{buf("out", ir.F32), scalar("n", ir.I32)}
	one := func(body ...ir.Stmt) *ir.Module { return module("e", kernel("k", p, body...)) }
	cases := []struct {
		name string
		m    *ir.Module
		want string
	}{
		{"call expr", one(store("out", ir.Int(0), &ir.Call{Fn: "softcap", T: ir.F32, Args: []ir.Expr{ir.Float(1)}})), "@softcap"},
		{"f16 expr", one(let("h", &ir.Const{T: ir.F16, Float: 1})), "f16 must be legalized"},
		{"undefined", one(store("out", ir.Int(0), f32("nope"))), `undefined name "nope"`},
		{"type mismatch", one(store("out", ir.Int(0), ir.Int(1))), "store of a i32 value into out"},
		{"operand mismatch", one(let("x", ir.Bin(ir.Add, ir.Int(1), ir.Float(1)))), "operands of + have types i32 and f32"},
		{"float shift", one(let("x", ir.Bin(ir.Shl, ir.Float(1), ir.Float(1)))), "operator << is not defined on f32"},
		{"int exp", one(let("x", ir.Un(ir.Exp, ir.Int(1)))), "exp is not defined on i32"},
		{"return in parallel", one(loop("i", ir.Int(0), i32("n"), ir.Parallel, ret(ir.Int(1)))), "return inside a parallel loop"},
		{"nested parallel", one(loop("i", ir.Int(0), i32("n"), ir.Parallel, loop("j", ir.Int(0), i32("n"), ir.Parallel))), "nested inside a parallel loop"},
		{"assign outer var", one(vr("v", ir.Int(0)), loop("i", ir.Int(0), i32("n"), ir.Parallel, set("v", i))), `assignment to "v", declared outside the parallel loop`},
		{"malloc in parallel", one(loop("i", ir.Int(0), i32("n"), ir.Parallel, &ir.Malloc{Name: "w", T: ir.F32, Size: ir.Int(4)})), "malloc w inside a parallel loop"},
		{"unknown kernel", one(&ir.CallStmt{Fn: "nope"}), `call to unknown kernel "nope"`},
		{"arg count", one(&ir.CallStmt{Fn: "k", Args: []ir.Expr{i32("out")}}), "1 arguments for 2 parameters"},
		{"continue outside", one(&ir.Continue{}), "continue outside a loop"},
		{"free param", one(&ir.Free{Name: "out"}), "not a buffer malloc'd"},
		{"i64 bounds", one(loop("i", ir.Int(0), ir.IntT(ir.I64, 3), ir.Serial)), "bounds must be i32"},
		{"return f32", one(ret(ir.Float(0))), "return of a f32 value"},
		{"buffer as value", one(let("x", f32("out"))), `buffer "out" used as a value`},
		{"nil stmt", one(nil), "nil statement"},
		{"nil expr", one(let("x", nil)), "missing expression"},
		{"bitcast width", one(let("x", &ir.Bitcast{To: ir.I64, X: ir.Float(1)})), "differ in width"},
		{"dup kernel", module("e", kernel("k", nil), kernel("k", nil)), `symbol "k" is defined twice`},
		{"runtime clash", module("e", kernel("e_strerror", nil)), `symbol "e_strerror" is defined twice`},
		{"libc clash", module("e", kernel("malloc", nil)), `symbol "malloc" is defined twice`},
		{"no body", module("e", &ir.Kernel{Name: "k"}), "has no body"},
		{"no prefix", &ir.Module{}, "neither a prefix nor a name"},
		{"dup code", &ir.Module{Name: "x", Errors: []ir.ErrorCode{{Code: -1, Name: "a"}, {Code: -1, Name: "b"}}}, "code -1 is used twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Emit(c.m)
			if err == nil {
				t.Fatalf("no error, want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
			if strings.Contains(err.Error(), "internal error") {
				t.Fatalf("internal error: %v", err)
			}
		})
	}
	if _, err := Emit(nil); err == nil {
		t.Errorf("Emit(nil) succeeded")
	}
}

// TestExplicitVectors compiles and runs explicit vector code: vector
// loads and stores, a broadcast, a vector var in a loop, muladd, a shuffle
// tree down to one lane, lane-wise compares and selects, f16 bits widened
// natively (fpext) and a prefetch.
func TestExplicitVectors(t *testing.T) {
	t.Parallel()
	tc := needToolchain(t)
	m, err := ir.Parse(`module vec prefix vec

kernel vdot role decode (x: f32* [8], y: f32* [8], h: f16* [4], n: i32, o: f32* [8] out) {
  prefetch y[4]
  var acc = 0.0:f32x4
  for c in 0 .. 2 serial {
    acc = muladd(x[(c * 4)]:f32x4, y[(c * 4)]:f32x4, acc)
  }
  let s2 = (acc + shuffle(acc, acc, [2, 3, 6, 7]))
  let s1 = (shuffle(s2, s2, [0]) + shuffle(s2, s2, [1]))
  store o[0] = f32x4((s1 * f32(n)))
  let m = (x[0]:f32x4 > 0.0:f32x4)
  store o[4] = select(m, f32x4(bitcast.f16x4(h[0]:i16x4)), -1.0:f32x4)
  return 0
}
`)
	if err != nil {
		t.Fatal(err)
	}
	driver := `
int32_t vdot(float*, float*, uint16_t*, int32_t, float*);
int main(void) {
	float x[8] = {1, -2, 3, 4, 5, 6, -7, 8}, y[8] = {0.5f, 1, 2, 3, 4, 5, 6, 7}, o[8];
	uint16_t h[4] = {0x3e00, 0xb400, 0x7bff, 0x0001};
	vdot(x, y, h, 2, o);
	for (int i = 0; i < 8; i++) printf("o%d %.9g\n", i, o[i]);
	return 0;
}
`
	bl := tc.build(t, module("vec", m.Kernels...), driver)
	r := results(t, bl.run(t))
	var dot float64
	x := []float64{1, -2, 3, 4, 5, 6, -7, 8}
	y := []float64{0.5, 1, 2, 3, 4, 5, 6, 7}
	for i := range x {
		dot += x[i] * y[i]
	}
	for i := 0; i < 4; i++ {
		checkFloat(t, r, fmt.Sprintf("o%d", i), 2*dot)
	}
	for i, w := range []float64{1.5, -1, 65504, math.Ldexp(1, -24)} {
		checkFloat(t, r, fmt.Sprintf("o%d", 4+i), w)
	}
	for _, want := range []string{"<4 x float>", "@llvm.fmuladd.v4f32", "shufflevector", "extractelement", "fpext <4 x half> ", "@llvm.prefetch.p0i8", "bitcast <4 x i16>"} {
		if !strings.Contains(bl.ll, want) {
			t.Errorf("emitted IR lacks %q:\n%s", want, bl.ll)
		}
	}
	if strings.Contains(bl.ll, "reassoc") {
		t.Errorf("explicit vector arithmetic got fast-math flags:\n%s", bl.ll)
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
	tc := needToolchain(t)
	k := kernel("lvl", []*ir.Param{buf("out", ir.I32)},
		&ir.CallStmt{Result: "l", Fn: "rt.cpu_level"},
		store("out", ir.Int(0), i32("l")),
		ret(ir.Int(0)))
	driver := `
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
	bl := tc.build(t, module("lvl", k), driver)
	run := func(env ...string) map[string]string {
		cmd := exec.Command(bl.exe)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", env, err)
		}
		return results(t, string(out))
	}
	flags := cpuinfoFlags()
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
		checkInt(t, r, "index", tc.index)
	}
	if bestIdx < 2 {
		r := run(LevelEnv + "=x86-64-v4")
		if r["name"] != "(null)" || r["index"] != "-1" {
			t.Errorf("a level above the CPU's was not refused: %v", r)
		}
	}
}

// cpuinfoFlags are the flags /proc/cpuinfo lists for the first CPU.
func cpuinfoFlags() map[string]bool {
	out := map[string]bool{}
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "flags") {
			for _, f := range strings.Fields(line) {
				out[f] = true
			}
			break
		}
	}
	return out
}

// TestLevelAttributes compiles a clone of every level of both targets with
// llc: the attributes name a CPU and features LLVM 14 knows (no warning),
// and the x86-64-v4 clone uses 512-bit registers for f32x16 arithmetic.
func TestLevelAttributes(t *testing.T) {
	t.Parallel()
	tc := needToolchain(t)
	for _, tg := range Targets {
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
		ll, err := EmitFor(module("lv", ks...), tg)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "k.ll"), []byte(ll), 0o644); err != nil {
			t.Fatal(err)
		}
		arch := strings.Split(tg.Triple, "-")[0]
		runCmd(t, dir, tc.opt, "-O3", "-mtriple="+tg.Triple, "k.ll", "-o", "k.bc")
		_, stderr := runCmd(t, dir, tc.llc, "-O3", "-mtriple="+tg.Triple, "k.bc", "-o", "k.s")
		if stderr != "" {
			t.Errorf("%s: llc warns: %s", arch, stderr)
		}
		asm, err := os.ReadFile(filepath.Join(dir, "k.s"))
		if err != nil {
			t.Fatal(err)
		}
		if arch == "x86_64" {
			v4 := funcBody(string(asm), "k_x86_64_v4")
			if !strings.Contains(string(asm), "zmm") {
				t.Errorf("the x86-64-v4 clone does not use zmm registers:\n%s", v4)
			}
			if !strings.Contains(string(asm), "vfmadd") {
				t.Errorf("no FMA instruction in the v3/v4 clones")
			}
		}
	}
}
