package ir

import (
	"math"
	"strings"
	"testing"
)

func TestEvalExpr(t *testing.T) {
	nan32 := float32(math.NaN())
	env := map[string]any{"a": int32(-7), "x": float32(0.1), "y": nan32, "big": int32(math.MaxInt32),
		"l": int64(math.MinInt64), "u": uint8(200), "h": uint16(0x3555), "buf": []float32{1, 2, 3}}
	scope := map[string]Type{"a": I32, "x": F32, "y": F32, "big": I32, "l": I64, "u": U8, "h": F16, "buf": F32}
	for _, tc := range []struct {
		src  string
		want any
	}{
		{"(a / 2)", int32(-3)},
		{"(a % 2)", int32(-1)},
		{"(7 / -2)", int32(-3)},
		{"(7 % -2)", int32(1)},
		{"(-7 % 2)", int32(-1)},
		{"(a / 0)", int32(0)}, // DESIGN §3: by zero gives 0, never a trap
		{"(a % 0)", int32(0)},
		{"(-2147483648 / -1)", int32(math.MinInt32)}, // wraps, as in Go
		{"(-2147483648 % -1)", int32(0)},
		{"(a / -1)", int32(7)},
		{"(l / 0:i64)", int64(0)},
		{"(-9223372036854775808:i64 / -1:i64)", int64(math.MinInt64)},
		{"(u / 0:u8)", uint8(0)},
		{"(u % 0:u8)", uint8(0)},
		{"(big + 1)", int32(math.MinInt32)},
		{"(big * 2)", int32(-2)},
		{"(l - 1:i64)", int64(math.MaxInt64)},
		{"(-8 >> 1)", int32(-4)},
		{"(1 << 31)", int32(math.MinInt32)},
		{"(u + 100:u8)", uint8(44)},
		{"(u >> 1:u8)", uint8(100)},
		{"(u / 3:u8)", uint8(66)},
		{"(u > 100:u8)", true},
		{"(32767:i16 + 1:i16)", uint16(0x8000)},
		{"(-32768:i16 >> 15:i16)", uint16(0xFFFF)},
		{"min(a, 3)", int32(-7)},
		{"max(a, 3)", int32(3)},
		{"abs(-2147483648)", int32(math.MinInt32)},
		{"neg(a)", int32(7)},
		{"not(5)", int32(-6)},
		{"not(true)", false},
		{"(true ^ true)", false},
		{"((a < 0) & (a > -10))", true},
		{"select((a < 0), 1, 2)", int32(1)},
		// A guarded load reads only when its guard holds: buf[7] is
		// outside buf and is never read.
		{"guarded((a < 0), buf[2])", float32(3)},
		{"guarded((a > 0), buf[7])", float32(0)},
		{"guarded(false, buf[-1])", float32(0)},
		{"x", float32(0.1)},
		{"0.1:f32", float32(0.1)},
		{"(x + 0.2:f32)", float32(0.1) + float32(0.2)},
		{"(16777216.0:f32 + 1.0:f32)", float32(16777216)},
		{"(16777216.0:f64 + 1.0:f64)", float64(16777217)},
		{"(1.0:f32 / 3.0:f32)", float32(1.0 / 3.0)},
		{"(7.5:f32 % 2.0:f32)", float32(1.5)},
		{"(y < 1.0:f32)", false},
		{"(y >= y)", false},
		{"(y == y)", false},
		{"(y != y)", true},
		// Float min and max propagate NaN from either side (ir.Max).
		{"min(y, 1.0:f32)", nan32},
		{"min(1.0:f32, y)", nan32},
		{"max(y, 1.0:f32)", nan32},
		{"max(1.0:f32, y)", nan32},
		{"max(-inf:f32, y)", nan32},
		{"max(y, inf:f32)", nan32},
		{"max(-inf:f32, -1.0:f32)", float32(-1)},
		{"min(inf:f32, -1.0:f32)", float32(-1)},
		{"max(f64(y), 1.0:f64)", math.NaN()},
		{"max(1.0:f32, 2.0:f32)", float32(2)},
		{"exp(1.0:f32)", float32(math.E)},
		{"sqrt(2.0:f64)", math.Sqrt2},
		{"tanh(0.5:f32)", float32(math.Tanh(0.5))},
		{"floor(-1.5:f32)", float32(-2)},
		{"exp2(10.0:f32)", float32(1024)},
		{"abs(-inf:f32)", float32(math.Inf(1))},
		{"i32(2.7:f32)", int32(2)},
		{"i32(-2.7:f32)", int32(-2)},
		{"u8(255.9:f32)", uint8(255)},
		{"f32(16777217)", float32(16777216)},
		{"i32(u)", int32(200)},
		{"i32(true)", int32(1)},
		{"u8(-1)", uint8(255)},
		{"i16(70000)", uint16(4464)},
		{"i64(a)", int64(-7)},
		{"bool(2)", true},
		{"bool(nan:f32)", true},
		{"bool(-0.0:f32)", false},
		{"f64(x)", float64(float32(0.1))},
		{"f16(1.0:f32)", uint16(0x3C00)},
		{"f16(65504.0:f32)", uint16(0x7BFF)},
		{"f16(65520.0:f32)", uint16(0x7C00)},
		{"f16(0.1:f32)", uint16(0x2E66)},
		{"f16(5.960464477539063e-08:f64)", uint16(0x0001)},  // 2^-24
		{"f16(2.9802322387695312e-08:f64)", uint16(0x0000)}, // 2^-25 ties to even
		{"f16(8.940696716308594e-08:f64)", uint16(0x0002)},  // 1.5 * 2^-24
		{"f16(-inf:f32)", uint16(0xFC00)},
		{"f32(h)", float32(0.333251953125)},
		{"f32((h + h))", float32(0.66650390625)},
		{"bf16(1.0:f32)", uint16(0x3F80)},
		{"bf16(1.00390625:f32)", uint16(0x3F80)}, // 1 + 2^-8 ties to even
		{"bf16(1.01171875:f32)", uint16(0x3F82)}, // 1 + 3 * 2^-8
		{"f32(bf16(3.0:f32))", float32(3)},
		{"i32(f16(-2.0:f32))", int32(-2)},
		{"bitcast.i32(1.0:f32)", int32(0x3F800000)},
		{"bitcast.i16(h)", uint16(0x3555)},
		{"bitcast.f16(-1:i16)", uint16(0xFFFF)},
		{"bitcast.f64(l)", math.Copysign(0, -1)},
		{"neg(0.0:f32)", float32(math.Copysign(0, -1))},
		{"buf[2]", float32(3)},
		{"buf[1:i64]", float32(2)},
	} {
		e, err := ParseExpr(tc.src, scope)
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		got, err := EvalExpr(e, env)
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		if f, ok := got.(float32); ok && f == 0 {
			if w, _ := tc.want.(float32); math.Signbit(float64(f)) != math.Signbit(float64(w)) {
				t.Errorf("%s = %v, want %v (sign of zero)", tc.src, got, tc.want)
			}
		}
		if w, ok := tc.want.(float32); ok && w != w {
			if f, ok := got.(float32); !ok || f == f {
				t.Errorf("%s = %#v, want NaN", tc.src, got)
			}
			continue
		}
		if w, ok := tc.want.(float64); ok && w != w {
			if f, ok := got.(float64); !ok || f == f {
				t.Errorf("%s = %#v, want NaN", tc.src, got)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s = %#v, want %#v", tc.src, got, tc.want)
		}
	}
}

func TestEvalExprErrors(t *testing.T) {
	env := map[string]any{"buf": []float32{1, 2}, "n": int32(2)}
	scope := map[string]Type{"buf": F32, "n": I32}
	for _, tc := range []struct{ src, want string }{
		{"(n << 32)", "shift amount 32 out of range for i32"},
		{"i32(nan:f32)", "convert nan to i32"},
		{"i32(3e+09:f32)", "out of range"},
		{"u8(-1.0:f32)", "out of range"},
		{"buf[n]", "load buf[2]: index out of range (len 2)"},
		{"buf[-1]", "load buf[-1]: index out of range"},
		{"select(true, 1.0:f32, buf[5])", "load buf[5]"},  // both arms evaluated
		{"((n > 5) & (buf[9] > 0.0:f32))", "load buf[9]"}, // no short circuit
		{"@softcap.f32(1.0:f32, 2.0:f32)", "call @softcap cannot be interpreted"},
		{"n", ""},
	} {
		e, err := ParseExpr(tc.src, scope)
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		_, err = EvalExpr(e, env)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.src, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.src, err, tc.want)
		}
	}
	if _, err := EvalExpr(R("zz", I32), env); err == nil || !strings.Contains(err.Error(), "unknown name zz") {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := EvalExpr(Bin(Add, Int(1), Float(1)), env); err == nil || !strings.Contains(err.Error(), "type mismatch") {
		t.Errorf("ill-typed: %v", err)
	}
}

const interpSrc = `module t prefix t

kernel sum role decode (x: f32* [n], out: f32* [1] out, n: i32) {
  var s = 0.0:f32
  for i in 0 .. n serial {
    s = (s + x[i])
  }
  store out[0] = s
  return 0
}

kernel squares role prefill (o: i32* [n] out, n: i32) {
  for i in 0 .. n parallel @work {
    alloc tmp: i32[2]
    store tmp[1] = (tmp[1] + i)
    if ((i % 3) == 2) {
      continue
    }
    store o[i] = (tmp[1] * tmp[1])
  }
  return 0
}

kernel early role decode (n: i32) {
  for i in 0 .. 100 serial {
    if (i == n) {
      return (i + 10)
    }
  }
}

kernel caller role decode entry (x: f32* [n], out: f32* [1] out, n: i32) {
  call st = sum(x, out, n)
  call r = early(n)
  malloc w: f32[n]
  store w[0] = (out[0] * 2.0:f32)
  store out[0] = w[0]
  free w
  return (st + r)
}

kernel uaf role decode (n: i32) {
  malloc w: i32[4]
  free w
  store w[0] = n
  return 0
}

kernel copy role copy_page (src: f16* [n], dst: f16* [n] out, b: bf16* [n] out, n: i32) {
  for i in 0 .. n vector {
    store dst[i] = src[i]
    store b[i] = bf16(f32(src[i]))
  }
  return 0
}
`

func TestRun(t *testing.T) {
	m, err := Parse(interpSrc)
	if err != nil {
		t.Fatal(err)
	}
	x := []float32{0.1, 0.2, 0.3, 1e8, -1e8, 0.7}
	var want float32
	for _, v := range x {
		want += v
	}
	out := []float32{0}
	if st, err := Run(m, "sum", map[string]any{"x": x, "out": out, "n": int32(len(x))}); err != nil || st != 0 || out[0] != want {
		t.Errorf("sum: st=%d err=%v out=%v, want %v", st, err, out[0], want)
	}

	o := make([]int32, 7)
	for i := range o {
		o[i] = -1
	}
	if _, err := Run(m, "squares", map[string]any{"o": o, "n": int32(7)}); err != nil {
		t.Fatal(err)
	}
	if w := []int32{0, 1, -1, 9, 16, -1, 36}; !equal(o, w) {
		t.Errorf("squares: %v, want %v", o, w)
	}

	if st, _ := Run(m, "early", map[string]any{"n": int32(4)}); st != 14 {
		t.Errorf("early return: %d, want 14", st)
	}
	if st, _ := Run(m, "early", map[string]any{"n": int32(-1)}); st != 0 {
		t.Errorf("falling off the end: %d, want 0", st)
	}

	out[0] = 0
	if st, err := Run(m, "caller", map[string]any{"x": x, "out": out, "n": int32(3)}); err != nil || st != 13 || out[0] != 2*(float32(0.1)+float32(0.2)+float32(0.3)) {
		t.Errorf("caller: st=%d err=%v out=%v", st, err, out[0])
	}

	src := []uint16{0x3C00, 0x7D01, 0xFC00, 0x8001}
	dst, b := make([]uint16, 4), make([]uint16, 4)
	if _, err := Run(m, "copy", map[string]any{"src": src, "dst": dst, "b": b, "n": int32(4)}); err != nil {
		t.Fatal(err)
	}
	if !equal(dst, src) {
		t.Errorf("f16 copy changed bits: %x", dst)
	}
	if b[0] != 0x3F80 || b[1]&0x7FC0 != 0x7FC0 || b[2] != 0xFF80 || b[3] != 0xB380 {
		t.Errorf("f16 -> bf16: %x", b)
	}

	for _, tc := range []struct {
		kernel string
		args   map[string]any
		want   string
	}{
		{"sum", map[string]any{"x": x, "out": out, "n": int32(7)}, "kernel sum: load x[6]: index out of range (len 6)"},
		{"sum", map[string]any{"x": x, "out": nil, "n": int32(1)}, "kernel sum: store out[0]: null buffer"},
		{"sum", map[string]any{"x": x, "out": out}, "missing arg n"},
		{"sum", map[string]any{"x": x, "out": out, "n": int32(1), "extra": 1}, "unknown arg extra"},
		{"sum", map[string]any{"x": []int32{1}, "out": out, "n": int32(1)}, "[]int32 cannot hold f32 elements"},
		{"sum", map[string]any{"x": x, "out": out, "n": 1.5}, "cannot use float64 as i32"},
		{"uaf", map[string]any{"n": int32(1)}, "kernel uaf: store w[0]: buffer used after free"},
		{"nope", nil, "no kernel nope"},
	} {
		_, err := Run(m, tc.kernel, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.kernel, err, tc.want)
		}
	}

	bad := vmod(&Let{Name: "x", Value: R("y", I32)})
	if _, err := Run(bad, "k", nil); err == nil || !strings.Contains(err.Error(), "unknown name y") {
		t.Errorf("Run must verify first: %v", err)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
