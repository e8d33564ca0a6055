package cuda

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/attnc/attnc/codegen/cstyle"
	"github.com/attnc/attnc/ir"
)

var updateGolden = flag.Lookup("update")

func TestExprTable(t *testing.T) {
	x, y := ir.R("x", ir.I32), ir.R("y", ir.I32)
	f := ir.R("f", ir.F32)
	cases := map[string]ir.Expr{
		"attnc_add_i32(x, y)":                    ir.Bin(ir.Add, x, y), // i32 wraps
		"attnc_mul_i32(x, y)":                    ir.Bin(ir.Mul, x, y),
		"attnc_sub_i64(l, l)":                    ir.Bin(ir.Sub, ir.R("l", ir.I64), ir.R("l", ir.I64)), // i64 wraps too
		"attnc_mul_i64(l, ((int64_t)3LL))":       ir.Bin(ir.Mul, ir.R("l", ir.I64), ir.IntT(ir.I64, 3)),
		"attnc_neg_i64(l)":                       ir.Un(ir.Neg, ir.R("l", ir.I64)),
		"attnc_max(l, attnc_neg_i64(l))":         ir.Un(ir.Abs, ir.R("l", ir.I64)),
		"(s + s)":                                ir.Bin(ir.Add, ir.R("s", ir.I16), ir.R("s", ir.I16)), // promotes to int
		"attnc_div(x, y)":                        ir.Bin(ir.Div, x, y),                                 // by zero: 0
		"(x / ((int32_t)4))":                     ir.Bin(ir.Div, x, ir.Int(4)),
		"attnc_rem(x, ((int32_t)-1))":            ir.Bin(ir.Rem, x, ir.Int(-1)),
		"attnc_neg_i32(x)":                       ir.Un(ir.Neg, x),
		"attnc_min(x, y)":                        ir.Bin(ir.Min, x, y),
		"((int32_t)((uint32_t)x << y))":          ir.Bin(ir.Shl, x, y),
		"((x < y) & (y < x))":                    ir.Bin(ir.And, ir.Bin(ir.Lt, x, y), ir.Bin(ir.Lt, y, x)),
		"attnc_exp(f)":                           ir.Un(ir.Exp, f),
		"attnc_abs_i32(x)":                       ir.Un(ir.Abs, x),
		"0x1.8p+00f":                             ir.Float(1.5),
		"attnc_i32_as_f32((int32_t)0xff800000u)": ir.Float(float64(float32(negInf()))),
		"(-2147483647 - 1)":                      ir.Int(-1 << 31),
		"((int64_t)7LL)":                         ir.IntT(ir.I64, 7),
		"attnc_shfl_xor_f32(f, 16)":              &ir.Shuffle{X: f, Mask: 16},
		"attnc_f32_as_i32(f)":                    &ir.Bitcast{To: ir.I32, X: f},
		"(lse != 0)":                             &ir.NotNull{Buf: "lse"},
		"((float)x)":                             ir.Cvt(ir.F32, x),
	}
	for want, e := range cases {
		if got := Dialect.Expr(e); got != want {
			t.Errorf("%s: got %s, want %s", ir.ExprString(e), got, want)
		}
	}
}

// testHost writes launchers as the CUDA target does.
var testHost = Host{
	Launcher:        func(p *ir.Plan) string { return p.Entry + "_launch" },
	Threads:         "2 * attnc_num_sms()",
	GridStrideGrid:  "4 * attnc_num_sms()",
	ThreadsPerBlock: 128,
}

func negInf() float64 { return -1 / zero() }
func zero() float64   { return 0 }

// TestRejectsUnlegalized checks that a call left for legalization is an
// error, not text.
func TestRejectsUnlegalized(t *testing.T) {
	m := &ir.Module{Name: "m", Prefix: "m", Kernels: []*ir.Kernel{{Name: "k", Params: []*ir.Param{{Name: "o", Buffer: true, Elem: ir.F32, Output: true}},
		Body: &ir.Block{Stmts: []ir.Stmt{&ir.Store{Buf: "o", Index: ir.Int(0), Value: &ir.Call{Fn: "softcap", Args: []ir.Expr{ir.Float(1), ir.Float(2)}, T: ir.F32}}}}}}}
	if _, err := Emit(m, testHost); err == nil || !strings.Contains(err.Error(), "no CUDA form") {
		t.Fatalf("got %v", err)
	}
}

// TestGolden pins the printed form of a small hand-written GPU kernel:
// parallel loop -> grid-stride blocks, threads loop -> thread id, shared
// arrays carved from dynamic shared memory, barrier, shuffle, mma.
func TestGolden(t *testing.T) {
	src := `module g prefix g

kernel g_k role decode (x: f32* [n] out, n: i32) {
  for item in 0 .. n parallel @work {
    alloc shared buf: f32[128]
    alloc shared h: i16[8]
    for t in 0 .. 128 threads {
      alloc fa: i32[4]
      alloc fb: i32[2]
      alloc fd: f32[4]
      store buf[t] = x[item]
      barrier
      var s = buf[((t + 1) % 128)]
      s = (s + shfl_xor(s, 1))
      mma.f16 fd, fa, fb
      if (t == 0) {
        store x[item] = s
      }
    }
  }
  return 0
}
`
	m, err := ir.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	ir.MustVerify("test", m)
	n := ir.R("n", ir.I32)
	m.Plans = []*ir.Plan{{Role: ir.RoleDecode, Entry: "g_k", Public: true, Params: m.Kernels[0].Params,
		Checks: []ir.Check{{Fail: ir.Bin(ir.Lt, n, ir.Int(0)), Code: -1}}, Skip: ir.Bin(ir.Eq, n, ir.Int(0)),
		Direct: []ir.Launch{{Kernel: "g_k", Items: n}}}}
	got, err := Emit(m, testHost)
	if err != nil {
		t.Fatal(err)
	}
	// Only the part after the shared prelude is pinned.
	got = got[strings.Index(got, "ATTNC_KERNEL void g_k"):]
	const path = "testdata/small.cu.golden"
	if updateGolden != nil && updateGolden.Value.String() == "true" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("printed CUDA differs from %s (go test ./codegen/cuda -update, then review):\n%s", path, got)
	}
	if cstyle.SharedBytes(m.Kernels[0]) != 512+16 || cstyle.BlockSize(m.Kernels[0]) != 128 {
		t.Errorf("shared %d block %d", cstyle.SharedBytes(m.Kernels[0]), cstyle.BlockSize(m.Kernels[0]))
	}
}
