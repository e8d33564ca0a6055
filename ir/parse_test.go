package ir

import (
	"math"
	"strings"
	"testing"
)

// testModule builds a verified module that uses every Stmt and Expr kind.
func testModule() *Module {
	n, i := R("n", I32), R("i", I32)
	x, fl := R("x", F32), R("fl", Bool)
	var body []Stmt
	let := func(name string, e Expr) { body = append(body, &Let{Name: name, Value: e}) }
	for op := Add; op <= Ne; op++ {
		let("i_"+opName(op), Bin(op, n, Int(3)))
	}
	let("x", Convert32(Ld("q", F16, Int(0))))
	for op := Add; op <= Max; op++ {
		let("f_"+opName(op), Bin(op, x, Float(0.5)))
	}
	for op := Lt; op <= Ne; op++ {
		let("f_"+opName(op), Bin(op, x, Float(math.Inf(-1))))
	}
	let("fl", Bin(Lt, n, Int(0)))
	for op := And; op <= Xor; op++ {
		let("b_"+opName(op), Bin(op, fl, BoolConst(true)))
	}
	let("b_eq", Bin(Eq, fl, BoolConst(false)))
	let("u_not", Un(Not, fl))
	let("u_inot", Un(Not, n))
	let("u_neg", Un(Neg, n))
	let("u_abs", Un(Abs, n))
	for op := Neg; op <= Cos; op++ {
		if op != Not {
			let("uf_"+op.String(), Un(op, x))
		}
	}
	consts := []*Const{IntT(I64, 5), IntT(I64, math.MinInt64), IntT(I16, -7), IntT(U8, 255), Int(-2147483648),
		{T: F32, Float: math.Copysign(0, -1)}, {T: F32, Float: math.NaN()}, {T: F32, Float: math.Inf(1)},
		{T: F64, Float: 1e6}, {T: F64, Float: 1e-7}, Float(0.1), {T: F64, Float: 123456789.25},
		{T: F16, Float: 0.5}, {T: BF16, Float: -2}, {T: F64, Float: 5e-324}}
	for j, c := range consts {
		let("c"+string(rune('a'+j)), c)
	}
	let("sel", Sel(fl, x, Float(1)))
	let("cv", Cvt(I64, n))
	let("cvb", Cvt(Bool, n))
	let("bc", &Bitcast{To: I32, X: x})
	let("bc16", &Bitcast{To: I16, X: Ld("q", F16, R("cv", I64))})
	let("bcb", &Bitcast{To: BF16, X: R("bc16", I16)})
	let("sc", &Call{Fn: "softcap", Args: []Expr{x, Float(50)}, T: F32})
	let("sl", &Call{Fn: "alibi_slope", Args: []Expr{n}, T: F32})
	body = append(body,
		&Var{Name: "acc", Init: Float(math.Inf(-1))},
		&Assign{Name: "acc", Value: Bin(Max, R("acc", F32), x)},
		&Alloc{Name: "tile", T: F32, Size: 64},
		&Malloc{Name: "w", T: F16, Size: Bin(Mul, n, Int(2))},
		&Store{Buf: "w", Index: Int(0), Value: Ld("q", F16, Int(1))},
		&Free{Name: "w"},
		&Block{Stmts: []Stmt{&Let{Name: "inner", Value: Int(1)}}},
		&Block{Stmts: []Stmt{&Let{Name: "inner", Value: Int(2)}}},
		&For{Var: "i", Lo: Int(0), Hi: n, Kind: Parallel, Tag: TagWork, Body: &Block{Stmts: []Stmt{
			&If{Cond: Bin(Ge, i, Int(7)), Then: &Block{Stmts: []Stmt{&Continue{}}}},
			&Alloc{Name: "row", T: F32, Size: 4},
			&For{Var: "j", Lo: Int(0), Hi: Int(4), Kind: Vector, Body: &Block{Stmts: []Stmt{
				&Store{Buf: "row", Index: R("j", I32), Value: Float(0)},
			}}},
			&For{Var: "t", Lo: i, Hi: n, Kind: Serial, Tag: TagKVTile,
				Ranges: []Range{{Var: "kv_pos", Lo: Bin(Mul, R("t", I32), Int(16)), Hi: Bin(Add, R("t", I32), Int(15))}, {Var: "q_pos", Lo: i, Hi: i}},
				Body: &Block{Stmts: []Stmt{
					&If{Cond: Bin(Lt, R("t", I32), Int(2)), Tag: TagMask, Then: &Block{Stmts: []Stmt{&Continue{}}},
						Else: &Block{Stmts: []Stmt{&Store{Buf: "o", Index: R("t", I32), Value: Ld("row", F32, Int(0))}}}},
				}}},
		}}},
		&If{Cond: fl, Then: &Block{Stmts: []Stmt{&Return{Value: Int(-1)}}}},
		&CallStmt{Result: "st", Fn: "helper", Args: []Expr{R("q", F16), n}},
		&CallStmt{Fn: "helper", Args: []Expr{R("q", F16), Int(0)}},
		&Return{Value: R("st", I32)},
	)
	main := &Kernel{Name: "k_main", Role: RolePrefill, Entry: true, Params: []*Param{
		{Name: "q", Buffer: true, Elem: F16, Shape: []string{"total_q", "32", "128"}},
		{Name: "o", Buffer: true, Elem: F32, Shape: []string{"total_q"}, Output: true},
		{Name: "lse", Buffer: true, Elem: F32, Shape: []string{"batch_size+1", "max(a, b)"}, Output: true, Null: true},
		{Name: "flags", Buffer: true, Elem: U8},
		{Name: "n", Elem: I32},
		{Name: "scale", Elem: F32},
	}, Body: &Block{Stmts: body}}
	helper := &Kernel{Name: "helper", Role: RoleDecode, Params: []*Param{
		{Name: "q", Buffer: true, Elem: F16, Shape: []string{"n"}},
		{Name: "n", Elem: I32},
	}, Body: &Block{Stmts: []Stmt{&Return{Value: Bin(Mul, R("n", I32), Int(2))}}}}
	return &Module{Name: "test", Prefix: "tst", Kernels: []*Kernel{main, helper}, Errors: []ErrorCode{
		{Code: -1, Name: "bad_input", Msg: "bad \"input\"\n\ttab"}, {Code: -2, Name: "no_memory", Msg: "out of memory"},
	}}
}

// Convert32 converts to f32 (test shorthand).
func Convert32(e Expr) Expr { return Cvt(F32, e) }

func opName(op BinOp) string {
	return [...]string{"add", "sub", "mul", "div", "rem", "min", "max", "shl", "shr", "and", "or", "xor", "lt", "le", "gt", "ge", "eq", "ne"}[op]
}

func TestRoundTripBuiltModule(t *testing.T) {
	m := testModule()
	if err := Verify(m); err != nil {
		t.Fatalf("test module does not verify: %v", err)
	}
	text := m.String()
	m2, err := Parse(text)
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, text)
	}
	if got := m2.String(); got != text {
		t.Fatalf("round trip differs:\n--- printed\n%s\n--- reparsed\n%s", text, got)
	}
	if err := Verify(m2); err != nil {
		t.Fatalf("reparsed module does not verify: %v", err)
	}
	k, err := ParseKernel(m.Kernels[0].String())
	if err != nil {
		t.Fatal(err)
	}
	if k.String() != m.Kernels[0].String() {
		t.Fatal("ParseKernel round trip differs")
	}
	for _, want := range []string{"-9223372036854775808:i64", "-0.0:f32", "nan:f32", "inf:f32", "1e+06:f64", "1e-07:f64",
		"0.1:f32", "5e-324:f64", "0.5:f16", "-2.0:bf16", "-7:i16", "255:u8", "bitcast.bf16(bc16)", "@softcap.f32(x, 50.0:f32)",
		"for i in 0 .. n parallel @work {", "[kv_pos = (t * 16) .. (t + 15), q_pos = i .. i]", "if (t < 2) @mask {", "} else {",
		"call st = helper(q, n)", "lse: f32* [batch_size+1, max(a, b)] out null", `error -1 bad_input "bad \"input\"\n\ttab"`} {
		if !strings.Contains(text, want) {
			t.Errorf("printed module lacks %q", want)
		}
	}
}

var handTexts = []string{
	`module llama prefix ll
error -1 bad_indptr "indptr must be non-decreasing"

kernel ll_decode role decode entry (q: f16* [batch_size, 32, 128], kv_indptr: i32* [batch_size+1], o: f16* [batch_size, 32, 128] out, lse: f32* [batch_size, 32] out null, batch_size: i32) {
  for item in 0 .. (batch_size * 8) parallel @work run 8 {
    let b = (item / 8)
    let kvh = (item % 8)
    let beg = kv_indptr[b]
    if (kv_indptr[(b + 1)] < beg) {
      continue
    }
    alloc acc: f32[128]
    var first = -1
    for pj in 0 .. 4 serial @stage [pj = 0 .. ((beg - first) - 1)] next [beg = first, kvh = (kvh + 1)] if ((kvh + 1) < 8) {
      store acc[(pj + kvh)] = 0.0:f32
    }
    var m = -inf:f32
    for t in 0 .. 4 serial @kv_tile [kv_pos = (t * 16) .. ((t * 16) + 15)] {
      let s = (f32(q[((item * 128) + t)]) * 0.088388346:f32)
      m = max(m, s)
      store acc[t] = exp((s - m))
    }
    store o[(item * 128)] = f16(acc[0])
  }
  return 0
}
`,
	`module tiny prefix t

kernel t_merge role merge_state (v: f32* [n, 8, 64] out, s: f32* [n, 8] out, n: i32) {
  for i in 0 .. (n * 8) serial {
    let a = s[i]
    let big = select((a > 1e+30:f32), true, (a != a))
    if big {
      store s[i] = 0.0:f32
    } else {
      store s[i] = (a + log(2.0:f32))
    }
  }
  return 0
}

kernel t_entry role append entry (v: f32* [n, 8, 64] out, s: f32* [n, 8] out, n: i32) {
  call st = t_merge(v, s, n)
  if (st != 0) {
    return st
  }
  malloc tmp: i64[(i64(n) * 2:i64)]
  store tmp[0:i64] = (5:i64 << 2:i64)
  free tmp
  return (i32(bitcast.u8(u8(true))) - 1)
}
`,
	`module scratch prefix s

kernel s_k role prefill (o: f32* [n] out, n: i32) {
  for item in 0 .. n parallel @work {
    alloc heap kb: f32[4096]
    alloc sc: f32[64]
    store kb[item] = 1.0:f32
    store sc[0] = kb[item]
    store o[item] = sc[0]
  }
  return 0
}
`,
	`module empty prefix e

kernel e_k role copy_page (src_page: i32, dst_page: i32) {
  {
    let x = (src_page % dst_page)
  }
  {
    let x = (-1 >> 1)
  }
  return 0
}
`,
}

func TestRoundTripHandTexts(t *testing.T) {
	for i, text := range handTexts {
		m, err := Parse(text)
		if err != nil {
			t.Errorf("text %d: %v", i, err)
			continue
		}
		if got := m.String(); got != text {
			t.Errorf("text %d round trip differs:\n%s", i, got)
		}
		if err := Verify(m); err != nil {
			t.Errorf("text %d: Verify: %v", i, err)
		}
	}
}

func TestParseComments(t *testing.T) {
	m, err := Parse("// header\nmodule m prefix p // trailing\n\nkernel k role r () {\n  return 0 // done\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "module m prefix p\n\nkernel k role r () {\n  return 0\n}\n"; m.String() != want {
		t.Fatalf("got\n%s", m.String())
	}
}

func TestParseExpr(t *testing.T) {
	scope := map[string]Type{"a": I32, "x": F32, "buf": F16}
	for _, tc := range []struct {
		src  string
		want Type
	}{
		{"5", I32}, {"5:i64", I64}, {"0.5:f32", F32}, {"-inf:f32", F32}, {"nan:f32", F32}, {"true", Bool},
		{"-5", I32}, {"(a - -5)", I32}, {"min(a, 3)", I32}, {"buf[a]", F16}, {"f32(buf[(a + 1)])", F32},
		{"select((x < 1.0:f32), x, 2.0:f32)", F32}, {"(a <= 3)", Bool}, {"not((a == 1))", Bool},
		{"@softcap.f32(x, 30.0:f32)", F32}, {"bitcast.i16(buf[0])", I16}, {"((a))", I32},
	} {
		e, err := ParseExpr(tc.src, scope)
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		if e.Type() != tc.want {
			t.Errorf("%s: type %s, want %s", tc.src, e.Type(), tc.want)
		}
	}
	e, err := ParseExpr("-0.0:f32", nil)
	if c, ok := e.(*Const); err != nil || !ok || !math.Signbit(c.Float) {
		t.Errorf("-0.0:f32: got %#v, %v", e, err)
	}
	e, _ = ParseExpr("-9223372036854775808:i64", nil)
	if c := e.(*Const); c.Int != math.MinInt64 {
		t.Errorf("min i64: got %d", c.Int)
	}
}

func TestParseErrors(t *testing.T) {
	kern := func(body string) string {
		return "module m prefix p\n\nkernel k role r (b: f32* [n], n: i32) {\n" + body + "\n}\n"
	}
	for _, tc := range []struct{ src, want string }{
		{kern("  let x = (y + 1)"), "4:12: unknown name y"},
		{kern("  let x = (n + 1.0:f32)"), "4:14: type mismatch: i32 + f32"},
		{kern("  let x = $"), "4:11: unexpected character '$'"},
		{kern("  let x = (n + 1"), "5:1: expected \")\", found \"}\""},
		{kern("  let x = (n 1)"), "4:14: expected a binary operator"},
		{kern("  jump 3"), "4:3: unknown statement jump"},
		{kern("  alloc a: f33[4]"), "4:12: unknown type f33"},
		{kern("  let x = 0.5"), "4:11: float constant 0.5 needs a type suffix"},
		{kern("  let x = 1\n  x = 2"), "5:3: cannot assign to let x"},
		{kern("  var x = 1\n  x = 2.0:f32"), "5:7: type mismatch: assigning f32 to i32 var x"},
		{kern("  store b[0] = 1"), "4:16: type mismatch: storing i32 into f32 buffer b"},
		{kern("  let x = n[0]"), "4:11: param n is not a buffer"},
		{kern("  let x = foo(n)"), "4:11: unknown function foo"},
		{kern("  let x = min(n)"), "4:11: min takes 2 arguments, got 1"},
		{kern("  if n {\n  }"), "4:6: if condition is i32, want bool"},
		{kern("  for i in 0 .. n fast {\n  }"), "4:19: unknown loop kind fast"},
		{kern("  for i in 0 .. 4:i64 serial {\n  }"), "4:17: for i: hi is i64, want i32"},
		{kern("  let x = 4294967296"), "4:11: constant 4294967296 out of range for i32"},
		{kern("  let x = bitcast.i16(1)"), "4:11: bitcast from i32 to i16 changes width"},
		{kern("  {\n    let x = 1\n  }\n  return x"), "7:10: unknown name x"},
		{kern("  return 0.0:f32"), "4:10: return value is f32, want i32"},
		{`module m prefix p
error -1 e "unterminated`, "2:12: unterminated string"},
		{"module m prefix p\nkernel k role r (n: i32, n: i32) {\n}\n", "2:26: duplicate param n"},
		{"module m prefix p\nkernel k role r (n: i32) {\n}\n}", "4:1: expected end of input"},
		{"kernel k role r () {", "1:21: expected a statement, found end of input"},
	} {
		var err error
		if strings.HasPrefix(tc.src, "kernel") {
			_, err = ParseKernel(tc.src)
		} else {
			_, err = Parse(tc.src)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q):\n got  %v\n want %s", tc.src, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range handTexts {
		f.Add(s)
	}
	f.Add(testModule().String())
	f.Fuzz(func(t *testing.T, src string) {
		m, err := Parse(src)
		if err != nil {
			return
		}
		text := m.String()
		m2, err := Parse(text)
		if err != nil {
			t.Fatalf("reparse of printed module: %v\n%s", err, text)
		}
		if m2.String() != text {
			t.Fatalf("round trip differs:\n%s", text)
		}
		_ = Verify(m) // must not panic
	})
}
