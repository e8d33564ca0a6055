package ir

import (
	"strings"
	"testing"
)

// vmod wraps body in kernel "k" (params buf: f32*, ib: i32*, n: i32) next
// to a kernel "callee" (buf: f32*, n: i32).
func vmod(body ...Stmt) *Module {
	return &Module{Name: "v", Prefix: "v", Kernels: []*Kernel{
		{Name: "k", Params: []*Param{{Name: "buf", Buffer: true, Elem: F32}, {Name: "ib", Buffer: true, Elem: I32}, {Name: "n", Elem: I32}},
			Body: &Block{Stmts: body}},
		{Name: "callee", Params: []*Param{{Name: "buf", Buffer: true, Elem: F32}, {Name: "n", Elem: I32}},
			Body: &Block{Stmts: []Stmt{&Return{Value: Int(0)}}}},
	}}
}

func blk(s ...Stmt) *Block { return &Block{Stmts: s} }

func loop(v string, kind LoopKind, body ...Stmt) *For {
	return &For{Var: v, Lo: Int(0), Hi: R("n", I32), Kind: kind, Body: blk(body...)}
}

func TestVerifyValid(t *testing.T) {
	n := R("n", I32)
	for name, m := range map[string]*Module{
		"test module": testModule(),
		"sibling blocks reuse names": vmod(blk(&Let{Name: "x", Value: Int(1)}), blk(&Let{Name: "x", Value: Float(1)}),
			loop("i", Serial), loop("i", Parallel)),
		"continue in parallel body":      vmod(loop("i", Parallel, &If{Cond: Bin(Lt, R("i", I32), n), Then: blk(&Continue{})})),
		"continue in serial in parallel": vmod(loop("i", Parallel, loop("j", Serial, &Continue{}))),
		"inner var assigned in parallel": vmod(loop("i", Parallel, &Var{Name: "s", Init: Int(0)},
			loop("j", Serial, &Assign{Name: "s", Value: R("j", I32)}))),
		"undeclared range var": vmod(&For{Var: "t", Lo: Int(0), Hi: n, Ranges: []Range{{Var: "kv_pos", Lo: R("t", I32), Hi: n}}, Body: blk()}),
		"buffer ref, i64 index": vmod(&CallStmt{Fn: "callee", Args: []Expr{R("buf", F32), n}},
			&Store{Buf: "buf", Index: IntT(I64, 0), Value: Ld("buf", F32, Cvt(I64, n))}),
		"bitcast f32 to i32":            vmod(&Let{Name: "b", Value: &Bitcast{To: I32, X: Float(1)}}),
		"heap alloc in a parallel body": vmod(loop("i", Parallel, loop("j", Serial, &Alloc{Name: "a", T: F32, Size: 512, Heap: true}))),
		"next substitutes a let, a var and a param": vmod(&Let{Name: "h", Value: Int(0)}, &Var{Name: "f", Init: Int(-1)},
			&For{Var: "j", Lo: Int(0), Hi: n, Kind: Serial, Tag: TagStage, Next: &Next{When: Bin(Lt, R("h", I32), n),
				Subst: []Rebind{{Name: "h", Value: Bin(Add, R("h", I32), Int(1))}, {Name: "f", Value: Int(0)}, {Name: "n", Value: R("f", I32)}}}, Body: blk()}),
	} {
		if err := Verify(m); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestVerifyBroken(t *testing.T) {
	n, one, f1 := R("n", I32), Int(1), Float(1)
	let := func(name string, e Expr) Stmt { return &Let{Name: name, Value: e} }
	for _, tc := range []struct {
		want string
		body []Stmt
	}{
		{"unknown name y", []Stmt{let("x", R("y", I32))}},
		{"heap alloc a must be in a parallel loop", []Stmt{&Alloc{Name: "a", T: F32, Size: 512, Heap: true}}},
		{"heap alloc a must be in a parallel loop", []Stmt{loop("i", Parallel, &For{Var: "t", Lo: Int(0), Hi: Int(128), Kind: Threads,
			Body: blk(&Alloc{Name: "a", T: F32, Size: 4, Heap: true})})}},
		{"for i: run 4 (a positive run belongs to a parallel loop)", []Stmt{&For{Var: "i", Lo: one, Hi: n, Kind: Serial, Run: 4, Body: blk()}}},
		{"for i: run -1", []Stmt{&For{Var: "i", Lo: one, Hi: n, Kind: Parallel, Run: -1, Body: blk()}}},
		{"redeclaration of x", []Stmt{let("x", one), let("x", one)}},
		{"redeclaration of n", []Stmt{blk(let("n", one))}},
		{"redeclaration of i", []Stmt{loop("i", Serial, let("i", one))}},
		{"ref n has type f32, declared i32", []Stmt{let("x", R("n", F32))}},
		{"load buf has type i32, buffer element is f32", []Stmt{let("x", Ld("buf", I32, one))}},
		{"load from unknown buffer zz", []Stmt{let("x", Ld("zz", F32, one))}},
		{"load from n, which is a param, not a buffer", []Stmt{let("x", Ld("n", I32, one))}},
		{"store i32 into f32 buffer buf: type mismatch", []Stmt{&Store{Buf: "buf", Index: one, Value: one}}},
		{"store to unknown buffer zz", []Stmt{&Store{Buf: "zz", Index: one, Value: one}}},
		{"type mismatch: i32 + f32", []Stmt{let("x", Bin(Add, one, f1))}},
		{"operator + does not apply to bool", []Stmt{let("x", Bin(Add, BoolConst(true), BoolConst(true)))}},
		{"operator & does not apply to f32", []Stmt{let("x", Bin(And, f1, f1))}},
		{"operator < does not apply to bool", []Stmt{let("x", Bin(Lt, BoolConst(true), BoolConst(true)))}},
		{"not does not apply to f32", []Stmt{let("x", Un(Not, f1))}},
		{"exp does not apply to i32", []Stmt{let("x", Un(Exp, one))}},
		{"select condition is i32, want bool", []Stmt{let("x", Sel(one, one, one))}},
		{"select arms have types i32 and f32", []Stmt{let("x", Sel(BoolConst(true), one, f1))}},
		{"if condition is i32, want bool", []Stmt{&If{Cond: one, Then: blk()}}},
		{"for i: lo is i64, want i32", []Stmt{&For{Var: "i", Lo: IntT(I64, 0), Hi: n, Body: blk()}}},
		{"for i: hi is f32, want i32", []Stmt{&For{Var: "i", Lo: one, Hi: f1, Body: blk()}}},
		{"index of buf is f32, want i32 or i64", []Stmt{let("x", Ld("buf", F32, f1))}},
		{"index of ib is bool, want i32 or i64", []Stmt{&Store{Buf: "ib", Index: BoolConst(true), Value: one}}},
		{"assign to let x, want a var", []Stmt{let("x", one), &Assign{Name: "x", Value: one}}},
		{"assign to param n, want a var", []Stmt{&Assign{Name: "n", Value: one}}},
		{"assign to loop var i, want a var", []Stmt{loop("i", Serial, &Assign{Name: "i", Value: one})}},
		{"assign f32 to i32 var x: type mismatch", []Stmt{&Var{Name: "x", Init: one}, &Assign{Name: "x", Value: f1}}},
		{"assign to undeclared zz", []Stmt{&Assign{Name: "zz", Value: one}}},
		{"return inside a parallel loop", []Stmt{loop("i", Parallel, &Return{Value: one})}},
		{"return inside a parallel loop", []Stmt{loop("i", Parallel, loop("j", Serial, &If{Cond: BoolConst(true), Then: blk(&Return{Value: one})}))}},
		{"nested parallel loop j", []Stmt{loop("i", Parallel, loop("k", Serial, loop("j", Parallel)))}},
		{"parallel loop body assigns var s declared outside it", []Stmt{&Var{Name: "s", Init: one}, loop("i", Parallel, &Assign{Name: "s", Value: one})}},
		{"continue outside a for loop", []Stmt{&If{Cond: BoolConst(true), Then: blk(&Continue{})}}},
		{"call to unknown kernel nope", []Stmt{&CallStmt{Fn: "nope"}}},
		{"call callee: 1 args, kernel takes 2 params", []Stmt{&CallStmt{Fn: "callee", Args: []Expr{R("buf", F32)}}}},
		{"call callee: arg 1 for param n is f32, want i32", []Stmt{&CallStmt{Fn: "callee", Args: []Expr{R("buf", F32), f1}}}},
		{"call callee: arg 0 for buffer param buf is not a buffer name", []Stmt{&CallStmt{Fn: "callee", Args: []Expr{f1, n}}}},
		{"call callee: arg 0 is NULL for buffer param buf, which is not declared null", []Stmt{&CallStmt{Fn: "callee", Args: []Expr{NullArg(), n}}}},
		{"return value is f32, want i32", []Stmt{&Return{Value: f1}}},
		{"bitcast from f32 to i16 changes width (32 to 16 bits)", []Stmt{let("x", &Bitcast{To: I16, X: f1})}},
		{"alloc a: size 0, want > 0", []Stmt{&Alloc{Name: "a", T: F32}}},
		{"free of let x, want a malloc", []Stmt{let("x", one), &Free{Name: "x"}}},
		{"constant 4294967296 out of range for i32", []Stmt{let("x", Int(1<<32))}},
		{"missing expression", []Stmt{let("x", Bin(Add, one, nil))}},
		{"malloc w: size is f32, want i32 or i64", []Stmt{&Malloc{Name: "w", T: F32, Size: f1}}},
		{"for j: next condition is i32, want bool", []Stmt{nextLoop(one)}},
		{"for j: next substitutes zz, which is no scalar in scope", []Stmt{nextLoop(BoolConst(true), Rebind{Name: "zz", Value: one})}},
		{"for j: next substitutes buf, which is no scalar in scope", []Stmt{nextLoop(BoolConst(true), Rebind{Name: "buf", Value: one})}},
		{"for j: next substitutes j, which is no scalar in scope", []Stmt{nextLoop(BoolConst(true), Rebind{Name: "j", Value: one})}},
		{"for j: next substitutes n twice", []Stmt{nextLoop(BoolConst(true), Rebind{Name: "n", Value: one}, Rebind{Name: "n", Value: one})}},
		{"for j: next substitutes n (i32) by a f32", []Stmt{nextLoop(BoolConst(true), Rebind{Name: "n", Value: f1})}},
		{"unknown name y", []Stmt{nextLoop(Bin(Lt, R("y", I32), one))}},
	} {
		err := Verify(vmod(tc.body...))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "kernel k: ") {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
}

// nextLoop is a staging loop j whose next item is when / subst.
func nextLoop(when Expr, subst ...Rebind) *For {
	return &For{Var: "j", Lo: Int(0), Hi: R("n", I32), Kind: Serial, Tag: TagStage, Next: &Next{When: when, Subst: subst}, Body: blk()}
}

func TestVerifyModuleRules(t *testing.T) {
	m := vmod()
	m.Kernels[0].Params = append(m.Kernels[0].Params, &Param{Name: "n", Elem: I32})
	if err := Verify(m); err == nil || err.Error() != "kernel k: duplicate param n" {
		t.Errorf("duplicate param: got %v", err)
	}
	m = vmod()
	m.Kernels = append(m.Kernels, m.Kernels[1])
	if err := Verify(m); err == nil || !strings.Contains(err.Error(), "kernel callee: duplicate kernel name") {
		t.Errorf("duplicate kernel: got %v", err)
	}
	m = vmod(&Let{Name: "x", Value: Bin(Add, Int(1), Float(1))})
	err := Verify(m)
	want := "kernel k: type mismatch: i32 + f32 in `let x = (1 + 1.0:f32)`"
	if err == nil || err.Error() != want {
		t.Errorf("context: got %v, want %s", err, want)
	}
	func() {
		defer func() {
			if r := recover(); r != "BUG: mypass: "+want {
				t.Errorf("MustVerify panic: %v", r)
			}
		}()
		MustVerify("mypass", m)
	}()
	MustVerify("ok", vmod())
}

func TestWithDef(t *testing.T) {
	m := &Module{Name: "m", Defs: []*Def{
		{Name: "mask", Params: []*Param{{Name: "q_pos", Elem: I32}}, Body: BoolConst(true)},
		{Name: "score", Body: Float(1)},
	}}
	d := &Def{Name: "mask", Params: m.Defs[0].Params, Body: Bin(Ge, R("q_pos", I32), Int(3))}
	n := m.WithDef(d)
	if n.Def("mask") != d || n.Def("score") != m.Defs[1] || len(n.Defs) != 2 {
		t.Errorf("WithDef did not replace the mask Def in place: %v", n.Defs)
	}
	if !IsTrue(m.Def("mask").Body) {
		t.Error("WithDef modified its receiver")
	}
	extra := n.WithDef(&Def{Name: "extra", Body: Int(1)})
	if len(extra.Defs) != 3 || extra.Defs[2].Name != "extra" || len(n.Defs) != 2 {
		t.Errorf("WithDef of a new name: %d defs", len(extra.Defs))
	}
}
