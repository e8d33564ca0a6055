package cpu

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
)

// expULPBound is the error PolyExp must stay within where exp(x) is a
// normal f32, in ulps of the f32 result, against float64 exp: compiled at
// every CPU level (with and without fused multiply-add) and in the
// interpreter.
const expULPBound = 2.0

// expInputs are every stride-th f32 bit pattern from -105 to 90 (193: about 11
// million, every binade of both signs), and the edges: ±0, ±inf, NaN, the
// neighbours of ExpMinArg and ExpMaxArg and of the arguments where n
// steps, the smallest and largest magnitudes.
func expInputs(stride uint32) []float32 {
	xs := strideFloats(stride, 90, -105)
	edges := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32, 1e-30, -1e-30, 1, -1,
		88.72283935546875, -87.3365478515625, -103.972076, -103.97208, -104, 88, 89}
	for _, e := range []float32{ExpMinArg, ExpMaxArg} {
		for d := int32(-4); d <= 4; d++ {
			edges = append(edges, math.Float32frombits(uint32(int32(math.Float32bits(e))+d)))
		}
	}
	for n := -126; n <= 128; n++ { // where round(x·log2 e) steps
		h := float32((float64(n) - 0.5) * math.Ln2)
		for d := int32(-2); d <= 2; d++ {
			edges = append(edges, math.Float32frombits(uint32(int32(math.Float32bits(h))+d)))
		}
	}
	return append(xs, edges...)
}

// strideFloats are every stride-th f32 bit pattern from ±0 to each of
// lims (its sign's zero up to it).
func strideFloats(stride uint32, lims ...float32) []float32 {
	var xs []float32
	for _, lim := range lims {
		top := math.Float32bits(lim)
		for b := top & 0x80000000; b <= top; b += stride {
			xs = append(xs, math.Float32frombits(b))
		}
	}
	return xs
}

// expErr checks y = PolyExp(x) and returns its error in ulps (0 outside
// the normal range, where it must be exact: 0 below, +inf above, NaN).
func expErr(x, y float32) (float64, error) {
	want := math.Exp(float64(x))
	switch {
	case math.IsNaN(float64(x)):
		if !math.IsNaN(float64(y)) {
			return 0, fmt.Errorf("exp(NaN) = %v", y)
		}
		return 0, nil
	case x < ExpMinArg:
		if y != 0 || want >= 0x1p-126 {
			return 0, fmt.Errorf("exp(%v) = %v, want 0 (exact %g, below FLT_MIN)", x, y, want)
		}
		return 0, nil
	case x > ExpMaxArg:
		if !math.IsInf(float64(y), 1) || want <= math.MaxFloat32 {
			return 0, fmt.Errorf("exp(%v) = %v, want +inf (exact %g)", x, y, want)
		}
		return 0, nil
	}
	if want < 0x1p-126 {
		return 0, fmt.Errorf("exp(%v) = %g is below FLT_MIN inside the range", x, want)
	}
	_, e := math.Frexp(want) // want = f·2^e, f in [0.5, 1): an f32 ulp is 2^(e-24)
	return math.Abs(float64(y)-want) / math.Ldexp(1, e-24), nil
}

// expModule is one kernel per level of the host's target computing
// o[i] = exp(x[i]) in a vector loop.
func expModule(tg Arch) *ir.Module { return unaryModule(tg, "exp") }

// unaryModule is one kernel per level of the host's target computing
// o[i] = fn(x[i]) in a vector loop.
func unaryModule(tg Arch, fn string) *ir.Module {
	var src strings.Builder
	src.WriteString("module e prefix e\n")
	for _, l := range tg.Levels {
		fmt.Fprintf(&src, `
kernel e%s role decode level %q (x: f32* [n], o: f32* [n] out, n: i32) {
  for i in 0 .. n vector {
    store o[i] = %s(x[i])
  }
  return 0
}
`, l.Suffix, l.Name, fn)
	}
	m, err := ir.Parse(src.String())
	if err != nil {
		panic(err)
	}
	return m
}

// TestPolyExpError compiles VectorExp's exp for every CPU level this CPU
// runs and checks it against float64 exp over expInputs: within
// expULPBound ulps where the result is normal, exactly 0, +inf and NaN at
// the edges. The interpreter's evaluation (products rounded) is checked on
// a sparser sample.
func TestPolyExpError(t *testing.T) {
	t.Parallel()
	checkPolyError(t, "exp", []string{"@llvm.exp", "expf"}, expInputs(193), expInputs(9973), expErr, expULPBound)
}

// checkPolyError compiles VectorExp's rewrite of fn (a vector loop
// o[i] = fn(x[i]), one kernel per level) and checks that none of calls is
// left, then runs it at every CPU level this CPU runs on xs, and the
// interpreter on few: errOf gives each result's error in ulps (or an
// error for a wrong special value), and the worst must stay within bound.
func checkPolyError(t *testing.T, fn string, calls []string, xs, few []float32, errOf func(x, y float32) (float64, error), bound float64) {
	t.Helper()
	tc, tg := hostToolchain(t)
	m, err := VectorExp(unaryModule(tg, fn))
	if err != nil {
		t.Fatal(err)
	}
	ll, err := emitLL(m, tg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		if strings.Contains(ll, c) {
			t.Fatalf("a %s call is left", c)
		}
	}
	check := func(name string, xs, ys []float32) {
		t.Helper()
		worst, at := 0.0, float32(0)
		for i, y := range ys {
			e, err := errOf(xs[i], y)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if e > worst {
				worst, at = e, xs[i]
			}
		}
		t.Logf("%s: %d inputs, max error %.3f ulp (at x = %v)", name, len(xs), worst, at)
		if worst > bound {
			t.Errorf("%s: %s(%v) is %.3f ulp off, above the bound %g", name, fn, at, worst, bound)
		}
	}
	lib := openLL(t, tc, ll)
	defer lib.Close()
	best := lib.CallStr("e_cpu_level", 0)
	xb := cpurt.F32Buffer(xs)
	defer xb.Free()
	ob := cpurt.NewBuffer(4 * len(xs))
	defer ob.Free()
	for _, l := range tg.Levels {
		st, err := lib.Call("e"+l.Suffix, xb.Ptr(), ob.Ptr(), int64(len(xs)))
		if err != nil || st != 0 {
			t.Fatalf("%s: status %d, %v", l.Name, st, err)
		}
		check(l.Name, xs, ob.F32())
		if l.Name == best {
			break // the levels above would not run here
		}
	}
	// The interpreter, on the first kernel.
	out := make([]float32, len(few))
	if st, err := ir.Run(m, m.Kernels[0].Name, map[string]any{"x": few, "o": out, "n": int32(len(few))}); err != nil || st != 0 {
		t.Fatalf("interpreter: status %d, %v", st, err)
	}
	check("interpreter", few, out)
}

// TestVectorExpAlphaBranch checks the branch VectorExp writes for a
// scalar select(c, exp(x), 1) (the online softmax's alpha): taken in a
// serial loop, not in a vector loop, and bit for bit the select's value
// (run in the interpreter against the same expression in a vector loop,
// which keeps the select) for arguments 0 and -0 (the exp skipped),
// -inf, +inf, NaN, tiny, negative and c false.
func TestVectorExpAlphaBranch(t *testing.T) {
	m, err := ir.Parse(`module e prefix e

kernel e_k role decode level "x86-64" (x: f32* [n], y: f32* [n], o1: f32* [n] out, o2: f32* [n] out, n: i32) {
  for i in 0 .. n serial {
    let m_new = max(x[i], y[i])
    let a = select(not((m_new == -inf:f32)), exp((x[i] - m_new)), 1.0:f32)
    store o1[i] = a
  }
  for i in 0 .. n vector {
    let m_new = max(x[i], y[i])
    let a = select(not((m_new == -inf:f32)), exp((x[i] - m_new)), 1.0:f32)
    store o2[i] = a
  }
  return 0
}
`)
	if err != nil {
		t.Fatal(err)
	}
	after, err := VectorExp(m)
	if err != nil {
		t.Fatal(err)
	}
	ir.MustVerify("vector-exp", after)
	text := after.String()
	if strings.Count(text, "if (not((m_new == -inf:f32)) &") != 1 {
		t.Fatalf("want the serial loop's alpha (only) as a branch:\n%s", text)
	}
	inf, nan, nz := float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1))
	pairs := [][2]float32{{0, 0}, {nz, 0}, {0, nz}, {nz, nz}, {1.5, 1.5}, {-3, -3}, {-3, 2}, {2, -3}, {-inf, -inf}, {-inf, 1},
		{1, -inf}, {inf, inf}, {inf, 1}, {1, inf}, {nan, 1}, {1, nan}, {-100, 0}, {-87.5, 0}, {1e-30, 0}, {-1e-30, 0}, {-0.25, 0.5}}
	n := len(pairs)
	x, y := make([]float32, n), make([]float32, n)
	for i, p := range pairs {
		x[i], y[i] = p[0], p[1]
	}
	o1, o2 := make([]float32, n), make([]float32, n)
	if st, err := ir.Run(after, "e_k", map[string]any{"x": x, "y": y, "o1": o1, "o2": o2, "n": int32(n)}); err != nil || st != 0 {
		t.Fatalf("status %d, %v", st, err)
	}
	for i := range pairs {
		if math.Float32bits(o1[i]) != math.Float32bits(o2[i]) {
			t.Errorf("x=%v y=%v: branch gives %v, select %v", x[i], y[i], o1[i], o2[i])
		}
	}
	if o1[0] != 1 || o1[4] != 1 || o1[8] != 1 {
		t.Errorf("alpha of an unmoved max (or a dead row) is %v %v %v, want 1", o1[0], o1[4], o1[8])
	}
}

// TestPolyExpNonPos compiles vector-exp's exp(min(x, 0)) (PolyExpNonPos,
// the softmax weights' exp after exp-bound) beside its exp(x) for every
// CPU level this CPU runs, and in the interpreter: over expInputs, bit
// for bit PolyExp's value where x <= 0, NaN for NaN, exactly 1 where x >
// 0 (min(x, 0) = 0).
func TestPolyExpNonPos(t *testing.T) {
	t.Parallel()
	tc, tg := hostToolchain(t)
	var src strings.Builder
	src.WriteString("module e prefix e\n")
	for _, l := range tg.Levels {
		fmt.Fprintf(&src, `
kernel e%s role decode level %q (x: f32* [n], o: f32* [n] out, o2: f32* [n] out, n: i32) {
  for i in 0 .. n vector {
    store o[i] = exp(x[i])
    store o2[i] = exp(min(x[i], 0.0:f32))
  }
  return 0
}
`, l.Suffix, l.Name)
	}
	m, err := ir.Parse(src.String())
	if err != nil {
		t.Fatal(err)
	}
	if m, err = VectorExp(m); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(m.String(), "_hi = select(("); got != 2*len(tg.Levels) {
		t.Fatalf("%d clamps above, want 2 per level", got)
	}
	if !strings.Contains(m.String(), "> 0.0:f32), 0.0:f32,") {
		t.Fatal("exp(min(x, 0)) is not PolyExpNonPos")
	}
	check := func(level string, xs, o, o2 []float32) {
		t.Helper()
		bad := 0
		for i, x := range xs {
			a, b := o[i], o2[i]
			ok := false
			switch {
			case x != x:
				ok = b != b
			case x > 0:
				ok = b == 1
			default:
				ok = math.Float32bits(a) == math.Float32bits(b)
			}
			if !ok {
				if bad++; bad <= 5 {
					t.Errorf("%s: x = %v (%#x): exp %v (%#x), exp(min(x, 0)) %v (%#x)", level, x, math.Float32bits(x), a, math.Float32bits(a), b, math.Float32bits(b))
				}
			}
		}
		t.Logf("%s: %d inputs, %d differ", level, len(xs), bad)
	}
	ll, err := emitLL(m, tg)
	if err != nil {
		t.Fatal(err)
	}
	lib := openLL(t, tc, ll)
	defer lib.Close()
	best := lib.CallStr("e_cpu_level", 0)
	xs := expInputs(193)
	xb := cpurt.F32Buffer(xs)
	defer xb.Free()
	ob, ob2 := cpurt.NewBuffer(4*len(xs)), cpurt.NewBuffer(4*len(xs))
	defer ob.Free()
	defer ob2.Free()
	for _, l := range tg.Levels {
		st, err := lib.Call("e"+l.Suffix, xb.Ptr(), ob.Ptr(), ob2.Ptr(), int64(len(xs)))
		if err != nil || st != 0 {
			t.Fatalf("%s: status %d, %v", l.Name, st, err)
		}
		check(l.Name, xs, ob.F32(), ob2.F32())
		if l.Name == best {
			break
		}
	}
	few := expInputs(9973)
	o, o2 := make([]float32, len(few)), make([]float32, len(few))
	if st, err := ir.Run(m, m.Kernels[0].Name, map[string]any{"x": few, "o": o, "o2": o2, "n": int32(len(few))}); err != nil || st != 0 {
		t.Fatalf("interpreter: status %d, %v", st, err)
	}
	check("interpreter", few, o, o2)
}

// openLL builds ll into a shared library with tc in a test directory and
// opens it.
func openLL(t *testing.T, tc *cpurt.Toolchain, ll string) *cpurt.Lib {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "e.ll"), []byte(ll), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "e.so")
	if err := tc.BuildShared(filepath.Join(dir, "e.ll"), so); err != nil {
		t.Fatal(err)
	}
	lib, err := cpurt.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// hostToolchain is this machine's CPU toolchain and architecture; it skips
// the test on a machine with no CPU target.
func hostToolchain(t *testing.T) (*cpurt.Toolchain, Arch) {
	t.Helper()
	host := cpurt.HostTriple()
	if host == "" {
		t.Skip("no CPU target for " + runtime.GOARCH)
	}
	tc, err := cpurt.ToolchainFor(host)
	needtool.Check(t, err)
	tg, err := LookupArch(host)
	if err != nil {
		t.Fatal(err)
	}
	return tc, tg
}
