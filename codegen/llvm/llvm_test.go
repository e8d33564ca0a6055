package llvm

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/lltest"
	"github.com/attnc/attnc/ir"
	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/types"
)

// testTarget is the target the builder's tests hand it: this machine's
// x86-64 triple and data layout, written out here, with no runtime.
var testTarget = Target{Triple: "x86_64-unknown-linux-gnu", DataLayout: "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"}

// poolRuntime is a runtime of one function, a declared thread pool
// (<prefix>_pool), which is enough to print parallel loops.
type poolRuntime struct{ pool *lir.Func }

func (r *poolRuntime) Declare(b *Builder) {
	name := b.Prefix() + "_pool"
	b.Reserve(name)
	r.pool = lir.NewFunc(name, types.I32, lir.NewParam("n", types.I32), lir.NewParam("body", BodyType),
		lir.NewParam("ctx", types.NewPointer(types.I8)), lir.NewParam("scratch", types.I64), lir.NewParam("run", types.I32))
	r.pool.Parent = b.Module()
}
func (r *poolRuntime) Func(string) *lir.Func         { return nil }
func (r *poolRuntime) ParallelFor() *lir.Func        { return r.pool }
func (r *poolRuntime) Define(b *Builder) []*lir.Func { return []*lir.Func{r.pool} }

// poolTarget is testTarget with a poolRuntime.
var poolTarget = Target{Triple: testTarget.Triple, DataLayout: testTarget.DataLayout, Runtime: &poolRuntime{}}

// build emits m for testTarget and compiles it with the C driver.
func build(t *testing.T, tc *lltest.Toolchain, m *ir.Module, driver string) *lltest.Built {
	t.Helper()
	ll, err := Emit(m, testTarget)
	if err != nil {
		t.Fatalf("Emit: %v", err)
	}
	return tc.Build(t, ll, driver)
}

func TestArithmetic(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	a, b, x := lltest.I32("a"), lltest.I32("b"), lltest.F32("x")
	var stmts []ir.Stmt
	ni, nf, nd, nl := 0, 0, 0, 0
	oi := func(e ir.Expr) { stmts = append(stmts, lltest.Store("oi", ir.Int(int64(ni)), e)); ni++ }
	of := func(e ir.Expr) { stmts = append(stmts, lltest.Store("of", ir.Int(int64(nf)), e)); nf++ }
	od := func(e ir.Expr) { stmts = append(stmts, lltest.Store("od", ir.Int(int64(nd)), e)); nd++ }
	ol := func(e ir.Expr) { stmts = append(stmts, lltest.Store("ol", ir.Int(int64(nl)), e)); nl++ }
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
	oi(ir.Bin(ir.Rem, ir.Un(ir.Neg, a), ir.Un(ir.Neg, b)))                            // 7 % -2
	oi(ir.Bin(ir.Div, ir.Un(ir.Neg, a), ir.Un(ir.Neg, b)))                            // 7 / -2
	oi(ir.Bin(ir.Rem, a, ir.Un(ir.Neg, b)))                                           // -7 % -2
	oi(ir.Cvt(ir.I32, x))                                                             // fptosi -2.75
	oi(&ir.Bitcast{To: ir.I32, X: x})                                                 // bits of -2.75
	oi(&ir.Bitcast{To: ir.I32, X: ir.Float(1)})                                       // 0x3f800000
	stmts = append(stmts, lltest.Let("u", ir.Cvt(ir.U8, lltest.Add(a, ir.Int(207))))) // 200
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
	of(lltest.Add(x, ir.Float(1.5)))
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
	of(ir.Un(ir.Exp, lltest.Add(ir.Float(math.Inf(-1)), x)))
	of(ir.Bin(ir.Max, ir.Float(math.Inf(-1)), x))
	of(ir.Float(0.1))
	of(ir.Bin(ir.Sub, ir.Float(1e-30), x))
	of(ir.Bin(ir.Rem, x, ir.Float(2)))
	of(ir.Cvt(ir.F32, ir.Bin(ir.Div, ir.Cvt(ir.F64, x), &ir.Const{T: ir.F64, Float: 3})))

	// doubles and i64
	od(lltest.Mul(ir.Cvt(ir.F64, x), &ir.Const{T: ir.F64, Float: 2}))
	od(ir.Un(ir.Tanh, ir.Cvt(ir.F64, x)))
	od(ir.Un(ir.Exp, ir.Cvt(ir.F64, x)))
	od(&ir.Const{T: ir.F64, Float: 0.1})
	l := lltest.Mul(ir.Cvt(ir.I64, a), ir.IntT(ir.I64, 1000000000000))
	ol(l)
	ol(ir.Bin(ir.Div, l, ir.Cvt(ir.I64, b)))
	ol(ir.Cvt(ir.I64, u8))
	ol(ir.Bin(ir.Shr, l, ir.IntT(ir.I64, 3)))
	ol(&ir.Bitcast{To: ir.I64, X: &ir.Const{T: ir.F64, Float: math.Copysign(0, -1)}})

	// f16 buffers travel as i16: copy bits and flip the sign bit
	stmts = append(stmts,
		lltest.Store("hout", ir.Int(0), ir.Ld("h", ir.I16, ir.Int(0))),
		lltest.Store("hout", ir.Int(1), ir.Bin(ir.Xor, ir.Ld("h", ir.I16, ir.Int(1)), ir.IntT(ir.I16, -32768))),
		lltest.Ret(ir.Int(0)))

	k := lltest.Kernel("arith", []*ir.Param{lltest.Buf("oi", ir.I32), lltest.Buf("of", ir.F32), lltest.Buf("od", ir.F64), lltest.Buf("ol", ir.I64),
		lltest.Scalar("a", ir.I32), lltest.Scalar("b", ir.I32), lltest.Scalar("x", ir.F32), lltest.Buf("h", ir.F16), lltest.Buf("hout", ir.I16)}, stmts...)
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
	bl := build(t, tc, lltest.Module("arith", k), driver)
	r := lltest.Results(t, bl.Run(t))
	lltest.CheckInt(t, r, "status", 0)
	wantI := []int64{-5, -9, -14, -3, -1, -7, 2, -28, -2, 0, -5, -5, 7, 6, 7,
		1, 1, 0, 0, 0, 1, 100, 1, -3, -1, -2, int64(int32(math.Float32bits(-2.75))), 0x3f800000,
		200, 66, 100, 1, -7, 0, 1, 0, 0, 1, 0, 0, 1, 1, 200}
	if len(wantI) != ni {
		t.Fatalf("test bug: %d int expectations for %d stores", len(wantI), ni)
	}
	for i, w := range wantI {
		lltest.CheckInt(t, r, fmt.Sprintf("i%d", i), w)
	}
	x64 := float64(float32(-2.75))
	f := func(v float64) float64 { return float64(float32(v)) }
	wantF := []float64{-1.25, -2.75, 0.5, f(math.Exp(x64)), f(math.Tanh(x64)), -3, f(math.Exp2(x64)), f(math.Sin(x64)), f(math.Cos(x64)),
		2.75, 2.75, f(math.Sqrt(2.75)), f(math.Log(2.75)), -3.5, f(math.Pi), 200, math.Inf(-1), 0, -2.75, f(0.1), 2.75, -0.75, f(-2.75 / 3)}
	if len(wantF) != nf {
		t.Fatalf("test bug: %d float expectations for %d stores", len(wantF), nf)
	}
	for i, w := range wantF {
		lltest.CheckFloat(t, r, fmt.Sprintf("f%d", i), w)
	}
	if r["f19"] != "0.100000001" {
		t.Errorf("f32 constant 0.1 printed as %s, want 0.100000001", r["f19"])
	}
	lltest.CheckFloat(t, r, "d0", -5.5)
	lltest.CheckFloat(t, r, "d1", math.Tanh(x64))
	lltest.CheckFloat(t, r, "d2", math.Exp(x64))
	if r["d3"] != "0.10000000000000001" {
		t.Errorf("f64 constant 0.1 printed as %s", r["d3"])
	}
	lltest.CheckInt(t, r, "l0", -7000000000000)
	lltest.CheckInt(t, r, "l1", -3500000000000)
	lltest.CheckInt(t, r, "l2", 200)
	lltest.CheckInt(t, r, "l3", -875000000000)
	lltest.CheckInt(t, r, "l4", math.MinInt64)
	lltest.CheckInt(t, r, "h0", 0x3c00)
	lltest.CheckInt(t, r, "h1", 0xc000)
	if !strings.Contains(bl.LL, "call float @tanhf(") || !strings.Contains(bl.LL, "@llvm.exp.f32(") {
		t.Errorf("tanh/exp are not emitted as tanhf and llvm.exp.f32")
	}
}

func TestSerialReduction(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	i := lltest.I32("i")
	k := lltest.Kernel("sum", []*ir.Param{lltest.Buf("x", ir.F32), lltest.Scalar("n", ir.I32), lltest.Buf("out", ir.F32), lltest.Buf("iout", ir.I32)},
		lltest.Var("acc", ir.Float(0)),
		lltest.Var("c", ir.Int(0)),
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Serial,
			lltest.Set("acc", lltest.Add(lltest.F32("acc"), ir.Ld("x", ir.F32, i))),
			lltest.Set("c", lltest.Add(lltest.I32("c"), lltest.Mul(i, i)))),
		lltest.Store("out", ir.Int(0), lltest.F32("acc")),
		lltest.Store("iout", ir.Int(0), lltest.I32("c")),
		lltest.Ret(ir.Int(0)))
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
	bl := build(t, tc, lltest.Module("red", k), driver)
	r := lltest.Results(t, bl.Run(t))
	lltest.CheckInt(t, r, "status", 0)
	lltest.CheckFloat(t, r, "sum", 2475)
	lltest.CheckInt(t, r, "sq", 328350)
	if strings.Contains(bl.LL, "reassoc") {
		t.Errorf("serial loop got fast-math flags:\n%s", bl.LL)
	}
}

// TestVectorLoop checks that a vector-kind dot product is vectorized by
// opt -O3 (the fadd/fmul carry reassoc contract) while the same loop as a
// serial loop keeps strict FP order, and that a vector softmax-style loop
// keeps -inf semantics.
func TestVectorLoop(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	i := lltest.I32("i")
	dot := func(name string, kind ir.LoopKind) *ir.Kernel {
		return lltest.Kernel(name, []*ir.Param{lltest.Buf("a", ir.F32), lltest.Buf("b", ir.F32), lltest.Scalar("n", ir.I32), lltest.Buf("out", ir.F32)},
			lltest.Var("acc", ir.Float(0)),
			lltest.Loop("i", ir.Int(0), lltest.I32("n"), kind,
				lltest.Set("acc", lltest.Add(lltest.F32("acc"), lltest.Mul(ir.Ld("a", ir.F32, i), ir.Ld("b", ir.F32, i))))),
			lltest.Store("out", ir.Int(0), lltest.F32("acc")),
			lltest.Ret(ir.Int(0)))
	}
	negInf := ir.Float(math.Inf(-1))
	soft := lltest.Kernel("soft", []*ir.Param{lltest.Buf("a", ir.F32), lltest.Scalar("n", ir.I32), lltest.Buf("out", ir.F32)},
		lltest.Var("m", negInf),
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Vector,
			lltest.Set("m", ir.Bin(ir.Max, lltest.F32("m"), ir.Ld("a", ir.F32, i)))),
		lltest.Var("s", ir.Float(0)),
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Vector,
			lltest.Set("s", lltest.Add(lltest.F32("s"), ir.Un(ir.Exp, ir.Bin(ir.Sub, ir.Ld("a", ir.F32, i), lltest.F32("m")))))),
		lltest.Store("out", ir.Int(0), lltest.F32("m")),
		lltest.Store("out", ir.Int(1), lltest.F32("s")),
		lltest.Store("out", ir.Int(2), ir.Un(ir.Log, lltest.F32("s"))),
		lltest.Ret(ir.Int(0)))
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
	bl := build(t, tc, lltest.Module("vec", dot("dot", ir.Vector), dot("dot_serial", ir.Serial), soft), driver)
	var want float64
	for j := 0; j < 1003; j++ {
		want += float64(j%7) * float64(j%5-2)
	}
	r := lltest.Results(t, bl.Run(t))
	lltest.CheckFloat(t, r, "dot", want)
	lltest.CheckFloat(t, r, "dot_serial", want)
	lltest.CheckFloat(t, r, "dot0", 0)
	lltest.CheckFloat(t, r, "allinf_m", math.Inf(-1))
	lltest.CheckFloat(t, r, "allinf_s", math.NaN()) // exp(-inf - -inf) = exp(nan)
	lltest.CheckFloat(t, r, "m", 0)
	lltest.CheckFloat(t, r, "s", 668)
	lltest.CheckFloat(t, r, "lse", math.Log(668))

	if !strings.Contains(bl.LL, "fadd reassoc contract float") || !strings.Contains(bl.LL, "fmul reassoc contract float") {
		t.Errorf("vector loop arithmetic lacks reassoc contract:\n%s", bl.LL)
	}
	for _, bad := range []string{"nnan", "ninf", " fast "} {
		if strings.Contains(bl.LL, bad) {
			t.Errorf("emitted IR contains %q", bad)
		}
	}
	// The vector dot product must be vectorized.
	width := "<8 x float>" // AVX: x86-64-v3, or +f16c, which implies AVX
	if tc.MCPU != "x86-64-v3" && tc.MAttr == "" {
		width = "<4 x float>"
	}
	if !strings.Contains(bl.Remarks, "vectorized loop") && !strings.Contains(bl.OptLL, width) {
		t.Errorf("vector loop not vectorized; remarks:\n%s", bl.Remarks)
	}
	if !strings.Contains(bl.OptLL, width) {
		t.Errorf("optimized IR has no %s", width)
	}
	// dot_serial must stay scalar: only the vector kernels' loops vectorize.
	body := lltest.FuncBody(bl.OptLL, "dot_serial")
	if body == "" || strings.Contains(body, "x float>") {
		t.Errorf("serial loop was vectorized (or not found):\n%s", body)
	}
	if body := lltest.FuncBody(bl.OptLL, "dot"); !strings.Contains(body, width) {
		t.Errorf("dot has no %s after opt:\n%s", width, body)
	}
}

func TestNestedLoopsContinue(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	i, j := lltest.I32("i"), lltest.I32("j")
	eq := func(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Eq, x, y) }
	rem := func(x ir.Expr, n int64) ir.Expr { return ir.Bin(ir.Rem, x, ir.Int(n)) }
	cont := lltest.Blk(&ir.Continue{})
	k := lltest.Kernel("nest", []*ir.Param{lltest.Scalar("n", ir.I32), lltest.Buf("out", ir.I32)},
		lltest.Var("acc", ir.Int(0)),
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Serial,
			lltest.If(eq(rem(i, 3), ir.Int(0)), cont, nil),
			lltest.Loop("j", ir.Int(0), i, ir.Serial,
				lltest.If(eq(rem(j, 2), ir.Int(1)), cont, lltest.Blk(lltest.Set("acc", lltest.Add(lltest.I32("acc"), j)))),
				lltest.Set("acc", lltest.Add(lltest.I32("acc"), lltest.Mul(i, j)))),
			lltest.If(eq(i, ir.Int(7)), cont, nil),
			lltest.Set("acc", lltest.Add(lltest.I32("acc"), ir.Int(1000)))),
		lltest.Store("out", ir.Int(0), lltest.I32("acc")),
		// hi is evaluated once: the body's stores to out[1] do not change the trip count
		lltest.Store("out", ir.Int(1), ir.Int(3)),
		lltest.Var("trips", ir.Int(0)),
		lltest.Loop("i", ir.Int(0), ir.Ld("out", ir.I32, ir.Int(1)), ir.Serial,
			lltest.Store("out", ir.Int(1), ir.Int(100)),
			lltest.Set("trips", lltest.Add(lltest.I32("trips"), ir.Int(1)))),
		lltest.Store("out", ir.Int(2), lltest.I32("trips")),
		// an empty range and a reversed one run zero times
		lltest.Loop("i", ir.Int(5), ir.Int(5), ir.Serial, lltest.Store("out", ir.Int(3), ir.Int(-1))),
		lltest.Loop("i", ir.Int(5), ir.Int(-5), ir.Vector, lltest.Store("out", ir.Int(3), ir.Int(-1))),
		// return from inside nested loops
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Serial,
			lltest.Loop("j", ir.Int(0), lltest.I32("n"), ir.Serial,
				lltest.If(eq(lltest.Add(i, j), ir.Int(9)), lltest.Blk(lltest.If(ir.Bin(ir.Gt, i, ir.Int(2)), lltest.Blk(lltest.Ret(lltest.Add(lltest.Mul(i, ir.Int(100)), j))), nil)), nil))),
		lltest.Ret(ir.Int(-1)))
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
	bl := build(t, tc, lltest.Module("nest", k), driver)
	r := lltest.Results(t, bl.Run(t))
	lltest.CheckInt(t, r, "acc", acc)
	lltest.CheckInt(t, r, "trips", 3)
	lltest.CheckInt(t, r, "empty", 7)
	lltest.CheckInt(t, r, "status", 306) // i=3, j=6
	lltest.CheckInt(t, r, "status2", -1)
}

func TestMallocFree(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	i := lltest.I32("i")
	mf := lltest.Kernel("mf", []*ir.Param{lltest.Scalar("n", ir.I32), lltest.Buf("out", ir.F32)},
		&ir.Malloc{Name: "w", T: ir.F32, Size: lltest.I32("n")},
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Serial, lltest.Store("w", i, ir.Cvt(ir.F32, i))),
		lltest.Var("s", ir.Float(0)),
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Serial, lltest.Set("s", lltest.Add(lltest.F32("s"), ir.Ld("w", ir.F32, i)))),
		&ir.Free{Name: "w"},
		lltest.Store("out", ir.Int(0), lltest.F32("s")),
		lltest.Ret(ir.Int(0)))
	oom := lltest.Kernel("oom", []*ir.Param{lltest.Scalar("n", ir.I32)},
		&ir.Malloc{Name: "big", T: ir.F64, Size: lltest.Mul(ir.Cvt(ir.I64, lltest.I32("n")), ir.IntT(ir.I64, 1<<40))},
		&ir.Free{Name: "big"},
		lltest.Ret(ir.Int(0)))
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
	bl := build(t, tc, lltest.Module("mem", mf, oom), driver)
	r := lltest.Results(t, bl.Run(t))
	lltest.CheckInt(t, r, "status", 0)
	lltest.CheckFloat(t, r, "sum", 499500)
	lltest.CheckInt(t, r, "status0", 0)
	lltest.CheckFloat(t, r, "sum0", 0)
	lltest.CheckInt(t, r, "oom", -3)
	lltest.CheckInt(t, r, "overflow", -3)
	lltest.CheckInt(t, r, "negative", -3)
	lltest.CheckInt(t, r, "small", 0)

	// Without a no_memory error the status is -1.
	m := &ir.Module{Name: "m2", Prefix: "m2", Kernels: []*ir.Kernel{oom}}
	ll, err := Emit(m, testTarget)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ll, "ret i32 -1") {
		t.Errorf("malloc failure does not return -1 without a no_memory error")
	}
}

func TestCallStmt(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	i := lltest.I32("i")
	helper := lltest.Kernel("helper", []*ir.Param{lltest.Buf("b", ir.I32), lltest.Scalar("n", ir.I32)},
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Serial, lltest.Store("b", i, lltest.Mul(i, ir.Int(2)))),
		lltest.Ret(lltest.Add(lltest.I32("n"), ir.Int(100))))
	caller := lltest.Kernel("caller", []*ir.Param{lltest.Buf("b", ir.I32), lltest.Scalar("n", ir.I32)},
		&ir.CallStmt{Result: "r", Fn: "helper", Args: []ir.Expr{lltest.I32("b"), lltest.I32("n")}},
		&ir.Alloc{Name: "tmp", T: ir.I32, Size: 4},
		&ir.CallStmt{Result: "r2", Fn: "helper", Args: []ir.Expr{lltest.I32("tmp"), ir.Int(4)}},
		&ir.CallStmt{Fn: "helper", Args: []ir.Expr{lltest.I32("tmp"), ir.Int(1)}},
		lltest.Store("b", lltest.I32("n"), lltest.Add(lltest.I32("r"), ir.Ld("tmp", ir.I32, ir.Int(3)))),
		lltest.Ret(lltest.I32("r2")))
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
	r := lltest.Results(t, build(t, tc, lltest.Module("call", helper, caller), driver).Run(t))
	lltest.CheckInt(t, r, "status", 104)
	for i := 0; i < 5; i++ {
		lltest.CheckInt(t, r, fmt.Sprintf("b%d", i), int64(2*i))
	}
	lltest.CheckInt(t, r, "b5", 105+6)
}

func TestErrors(t *testing.T) {
	i := lltest.I32("i")
	p := []*ir.Param{lltest.Buf("out", ir.F32), lltest.Scalar("n", ir.I32)}
	one := func(body ...ir.Stmt) *ir.Module { return lltest.Module("e", lltest.Kernel("k", p, body...)) }
	cases := []struct {
		name string
		m    *ir.Module
		want string
	}{
		{"call expr", one(lltest.Store("out", ir.Int(0), &ir.Call{Fn: "softcap", T: ir.F32, Args: []ir.Expr{ir.Float(1)}})), "@softcap"},
		{"f16 expr", one(lltest.Let("h", &ir.Const{T: ir.F16, Float: 1})), "f16 must be legalized"},
		{"undefined", one(lltest.Store("out", ir.Int(0), lltest.F32("nope"))), `undefined name "nope"`},
		{"type mismatch", one(lltest.Store("out", ir.Int(0), ir.Int(1))), "store of a i32 value into out"},
		{"operand mismatch", one(lltest.Let("x", ir.Bin(ir.Add, ir.Int(1), ir.Float(1)))), "operands of + have types i32 and f32"},
		{"float shift", one(lltest.Let("x", ir.Bin(ir.Shl, ir.Float(1), ir.Float(1)))), "operator << is not defined on f32"},
		{"int exp", one(lltest.Let("x", ir.Un(ir.Exp, ir.Int(1)))), "exp is not defined on i32"},
		{"return in parallel", one(lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Parallel, lltest.Ret(ir.Int(1)))), "return inside a parallel loop"},
		{"nested parallel", one(lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Parallel, lltest.Loop("j", ir.Int(0), lltest.I32("n"), ir.Parallel))), "nested inside a parallel loop"},
		{"assign outer var", one(lltest.Var("v", ir.Int(0)), lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Parallel, lltest.Set("v", i))), `assignment to "v", declared outside the parallel loop`},
		{"malloc in parallel", one(lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Parallel, &ir.Malloc{Name: "w", T: ir.F32, Size: ir.Int(4)})), "malloc w inside a parallel loop"},
		{"unknown kernel", one(&ir.CallStmt{Fn: "nope"}), `call to unknown kernel "nope"`},
		{"arg count", one(&ir.CallStmt{Fn: "k", Args: []ir.Expr{lltest.I32("out")}}), "1 arguments for 2 parameters"},
		{"continue outside", one(&ir.Continue{}), "continue outside a loop"},
		{"free param", one(&ir.Free{Name: "out"}), "not a buffer malloc'd"},
		{"i64 bounds", one(lltest.Loop("i", ir.Int(0), ir.IntT(ir.I64, 3), ir.Serial)), "bounds must be i32"},
		{"return f32", one(lltest.Ret(ir.Float(0))), "return of a f32 value"},
		{"buffer as value", one(lltest.Let("x", lltest.F32("out"))), `buffer "out" used as a value`},
		{"nil stmt", one(nil), "nil statement"},
		{"nil expr", one(lltest.Let("x", nil)), "missing expression"},
		{"bitcast width", one(lltest.Let("x", &ir.Bitcast{To: ir.I64, X: ir.Float(1)})), "differ in width"},
		{"dup kernel", lltest.Module("e", lltest.Kernel("k", nil), lltest.Kernel("k", nil)), `symbol "k" is defined twice`},
		{"runtime clash", lltest.Module("e", lltest.Kernel("e_pool", nil)), `symbol "e_pool" is defined twice`},
		{"unknown rt call", one(&ir.CallStmt{Result: "r", Fn: "rt.cpu_level"}), "runtime has no function cpu_level"},
		{"libc clash", lltest.Module("e", lltest.Kernel("malloc", nil)), `symbol "malloc" is defined twice`},
		{"no body", lltest.Module("e", &ir.Kernel{Name: "k"}), "has no body"},
		{"no prefix", &ir.Module{}, "neither a prefix nor a name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Emit(c.m, poolTarget)
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
	if _, err := Emit(nil, testTarget); err == nil {
		t.Errorf("Emit(nil, testTarget) succeeded")
	}
}

// TestExplicitVectors compiles and runs explicit vector code: vector
// loads and stores, a broadcast, a vector var in a loop, muladd, a shuffle
// tree down to one lane, lane-wise compares and selects, f16 bits widened
// natively (fpext) and prefetches into L2 (locality 2) and L1 (3).
func TestExplicitVectors(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	m, err := ir.Parse(`module vec prefix vec

kernel vdot role decode (x: f32* [8], y: f32* [8], h: f16* [4], n: i32, o: f32* [8] out) {
  prefetch y[4]
  prefetch_l1 x[4]
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
	bl := build(t, tc, lltest.Module("vec", m.Kernels...), driver)
	r := lltest.Results(t, bl.Run(t))
	var dot float64
	x := []float64{1, -2, 3, 4, 5, 6, -7, 8}
	y := []float64{0.5, 1, 2, 3, 4, 5, 6, 7}
	for i := range x {
		dot += x[i] * y[i]
	}
	for i := 0; i < 4; i++ {
		lltest.CheckFloat(t, r, fmt.Sprintf("o%d", i), 2*dot)
	}
	for i, w := range []float64{1.5, -1, 65504, math.Ldexp(1, -24)} {
		lltest.CheckFloat(t, r, fmt.Sprintf("o%d", 4+i), w)
	}
	for _, want := range []string{"<4 x float>", "@llvm.fmuladd.v4f32", "shufflevector", "extractelement", "fpext <4 x half> ", "@llvm.prefetch.p0i8", "i32 0, i32 2, i32 1)", "i32 0, i32 3, i32 1)", "bitcast <4 x i16>"} {
		if !strings.Contains(bl.LL, want) {
			t.Errorf("emitted IR lacks %q:\n%s", want, bl.LL)
		}
	}
	if strings.Contains(bl.LL, "reassoc") {
		t.Errorf("explicit vector arithmetic got fast-math flags:\n%s", bl.LL)
	}
}

// TestNeutralTarget: the builder prints a kernel for whatever triple, data
// layout and attributes it is handed, with no level table and no runtime —
// here a triple no CPU target lists — and the outlined body of a parallel
// loop gets its kernel's attributes and calls the pool it is given.
func TestNeutralTarget(t *testing.T) {
	i := lltest.I32("i")
	k := lltest.Kernel("k", []*ir.Param{lltest.Buf("out", ir.F32), lltest.Scalar("n", ir.I32)},
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Serial, lltest.Store("out", i, ir.Cvt(ir.F32, i))),
		lltest.Ret(ir.Int(0)))
	tg := Target{Triple: "riscv64-unknown-linux-gnu", DataLayout: "e-m:e-p:64:64-i64:64-i128:128-n64-S128",
		Attrs: map[string][]Attr{"k": {{"target-cpu", "generic-rv64"}, {"target-features", "+m,+a,+f,+d"}}}}
	ll, err := Emit(lltest.Module("n", k), tg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`target datalayout = "e-m:e-p:64:64-i64:64-i128:128-n64-S128"` + "\n",
		`target triple = "riscv64-unknown-linux-gnu"` + "\n",
		`"target-cpu"="generic-rv64" "target-features"="+m,+a,+f,+d"`,
		"define i32 @k(float* noalias %out, i32 %n)",
	} {
		if !strings.Contains(ll, want) {
			t.Errorf("the module lacks %q:\n%s", want, ll)
		}
	}
	// Without a runtime the module defines the kernel and nothing else.
	if n := strings.Count(ll, "\ndefine "); n != 1 {
		t.Errorf("%d functions defined, want the kernel only:\n%s", n, ll)
	}
	for _, bad := range []string{"cpu_level", "strerror", "num_threads", "x86-64", "pthread", "x86_64"} {
		if strings.Contains(ll, bad) {
			t.Errorf("the module names %q, which the builder was not handed:\n%s", bad, ll)
		}
	}
	if _, err := Emit(lltest.Module("n", lltest.Kernel("k", nil, lltest.Loop("i", ir.Int(0), ir.Int(4), ir.Parallel), lltest.Ret(ir.Int(0)))), tg); err == nil ||
		!strings.Contains(err.Error(), "no thread pool") {
		t.Errorf("a parallel loop without a pool: %v, want an error saying the runtime has no thread pool", err)
	}

	tg.Runtime = &poolRuntime{}
	par := lltest.Kernel("k", []*ir.Param{lltest.Buf("out", ir.F32), lltest.Scalar("n", ir.I32)},
		lltest.Loop("i", ir.Int(0), lltest.I32("n"), ir.Parallel, lltest.Store("out", i, ir.Cvt(ir.F32, i))),
		lltest.Ret(ir.Int(0)))
	ll, err = Emit(lltest.Module("n", par), tg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"call i32 @n_pool(i32 ",
		"declare i32 @n_pool(i32 %n, void (i8*, i32, i8*)* %body, i8* %ctx, i64 %scratch, i32 %run)",
	} {
		if !strings.Contains(ll, want) {
			t.Errorf("the module lacks %q:\n%s", want, ll)
		}
	}
	attrs := ` nounwind "target-cpu"="generic-rv64" "target-features"="+m,+a,+f,+d" {`
	if !strings.Contains(ll, "define i32 @k(float* noalias %out, i32 %n)"+attrs) ||
		!strings.Contains(ll, "define internal void @k.par0(i8* %ctx, i32 %idx, i8* noalias %scratch)"+attrs) {
		t.Errorf("the kernel and its outlined body do not share the attributes handed for k:\n%s", ll)
	}
}
