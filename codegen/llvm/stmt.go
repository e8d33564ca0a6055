package llvm

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/attnc/attnc/ir"
	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/enum"
	"github.com/llir/llvm/ir/types"
	"github.com/llir/llvm/ir/value"
)

type bindKind uint8

const (
	bindValue bindKind = iota // an SSA value (param, let, loop var, call result)
	bindVar                   // a mutable scalar: v is its alloca
	bindBuf                   // a buffer or local array: v points at element 0
)

type binding struct {
	kind   bindKind
	t      ir.Type     // value type, or the loaded element type of a buffer
	v      value.Value // the value, the var's alloca or the element pointer
	param  bool        // buffer parameter of the kernel
	malloc bool        // buffer malloc'd by this function
	outer  bool        // captured from outside a parallel loop (read-only)
}

type loopCtx struct {
	latch *lir.Block // nil: the outlined parallel loop itself (continue returns)
	used  bool
}

// fnState emits one LLVM function: a kernel or an outlined parallel body.
type fnState struct {
	e    *emitter
	kf   *kernelFn
	fn   *lir.Func
	what string // "kernel foo", for messages

	entry   *lir.Block
	nAlloca int        // allocas at the head of entry
	cur     *lir.Block // nil when the current point is unreachable
	names   map[string]bool
	scopes  []map[string]*binding
	loops   []*loopCtx
	fast    bool // inside a vector loop: reassoc contract on fadd/fsub/fmul
	par     bool // outlined parallel body

	// heapArg is an outlined body's pointer to each of its heap arrays.
	heapArg map[*ir.Alloc]value.Value
	// live are the buffers malloc'd so far and not freed (element
	// pointers), released on every early NO_MEMORY return.
	live []*binding
}

func newFnState(e *emitter, kf *kernelFn, fn *lir.Func, what string) *fnState {
	return &fnState{e: e, kf: kf, fn: fn, what: what, names: map[string]bool{}}
}

func (f *fnState) fail(format string, args ...any) {
	f.e.fail("%s: %s", f.what, fmt.Sprintf(format, args...))
}

func (f *fnState) start() {
	f.entry = f.newBlock("entry")
	f.place(f.entry)
}

// fresh returns a local name derived from base that is unused in the
// function (values and labels share one namespace).
func (f *fnState) fresh(base string) string {
	if base == "" {
		base = "v"
	}
	if _, err := strconv.ParseUint(base, 10, 64); err == nil {
		base = "v" + base
	}
	name := base
	for k := 1; f.names[name]; k++ {
		name = base + "." + strconv.Itoa(k)
	}
	f.names[name] = true
	return name
}

func (f *fnState) newBlock(name string) *lir.Block {
	return lir.NewBlock(f.fresh(name))
}

// place appends b to the function and makes it the current block.
func (f *fnState) place(b *lir.Block) {
	b.Parent = f.fn
	f.fn.Blocks = append(f.fn.Blocks, b)
	f.cur = b
}

// alloca inserts an alloca at the head of the entry block, so that every
// alloca is static (never inside a loop) and mem2reg can promote it.
func (f *fnState) alloca(t types.Type, n value.Value, name string) *lir.InstAlloca {
	a := lir.NewAlloca(t)
	a.NElems = n
	a.SetName(f.fresh(name))
	insts := f.entry.Insts
	insts = append(insts, nil)
	copy(insts[f.nAlloca+1:], insts[f.nAlloca:])
	insts[f.nAlloca] = a
	f.entry.Insts = insts
	f.nAlloca++
	return a
}

// nameValue names v after an IR name when v is a fresh unnamed instruction.
func (f *fnState) nameValue(v value.Value, name string) {
	if _, ok := v.(lir.Instruction); !ok {
		return
	}
	if n, ok := v.(interface {
		IsUnnamed() bool
		SetName(string)
	}); ok && n.IsUnnamed() {
		n.SetName(f.fresh(name))
	}
}

// ---- scopes ----

func (f *fnState) push() map[string]*binding {
	s := map[string]*binding{}
	f.scopes = append(f.scopes, s)
	return s
}

// pop leaves the innermost scope; buffers malloc'd in it are no longer
// released by an early NO_MEMORY return.
func (f *fnState) pop() {
	s := f.scopes[len(f.scopes)-1]
	f.scopes = f.scopes[:len(f.scopes)-1]
	live := f.live[:0:0]
	for _, b := range f.live {
		inner := false
		for _, x := range s {
			inner = inner || x == b
		}
		if !inner {
			live = append(live, b)
		}
	}
	f.live = live
}

func (f *fnState) bind(name string, b *binding) {
	if name == "" {
		f.fail("declaration without a name")
	}
	f.scopes[len(f.scopes)-1][name] = b
}

func (f *fnState) lookup(name string) *binding {
	for i := len(f.scopes) - 1; i >= 0; i-- {
		if b, ok := f.scopes[i][name]; ok {
			return b
		}
	}
	return nil
}

func (f *fnState) mustLookup(name, use string) *binding {
	b := f.lookup(name)
	if b == nil {
		f.fail("%s: undefined name %q", use, name)
	}
	return b
}

func (f *fnState) buffer(name, use string) *binding {
	b := f.mustLookup(name, use)
	if b.kind != bindBuf {
		f.fail("%s: %q is not a buffer or local array", use, name)
	}
	return b
}

// ---- statements ----

// block emits b's statements; statements after a return or continue are
// unreachable and not emitted.
func (f *fnState) block(b *ir.Block, scope bool) {
	if b == nil {
		return
	}
	if scope {
		f.push()
		defer f.pop()
	}
	for _, s := range b.Stmts {
		if f.cur == nil {
			return
		}
		f.stmt(s)
	}
}

func (f *fnState) stmt(s ir.Stmt) {
	switch s := s.(type) {
	case nil:
		f.fail("nil statement")
	case *ir.Block:
		f.block(s, true)
	case *ir.Let:
		v, t := f.expr(s.Value)
		f.nameValue(v, s.Name)
		f.bind(s.Name, &binding{kind: bindValue, t: t, v: v})
	case *ir.Var:
		v, t := f.expr(s.Init)
		a := f.alloca(f.e.valueType(t, "var "+s.Name), nil, s.Name)
		f.cur.NewStore(v, a)
		f.bind(s.Name, &binding{kind: bindVar, t: t, v: a})
	case *ir.Assign:
		b := f.mustLookup(s.Name, "assignment")
		if b.outer {
			f.fail("assignment to %q, declared outside the parallel loop, inside the parallel loop", s.Name)
		}
		if b.kind != bindVar {
			f.fail("assignment to %q, which is not a var", s.Name)
		}
		v, t := f.expr(s.Value)
		if t != b.t {
			f.fail("assignment of a %s value to var %q of type %s", t, s.Name, b.t)
		}
		f.cur.NewStore(v, b.v)
	case *ir.Alloc:
		if s.Size < 0 || s.Size > 1<<31-1 {
			f.fail("alloc %s: invalid size %d", s.Name, s.Size)
		}
		t := storageType(s.T)
		lt := f.e.valueType(t, "alloc "+s.Name)
		if s.Heap {
			a, ok := f.heapArg[s]
			if !ok {
				f.fail("alloc heap %s outside a parallel loop's body", s.Name)
			}
			f.bind(s.Name, &binding{kind: bindBuf, t: t, v: a})
			break
		}
		a := f.alloca(lt, constant.NewInt(types.I32, int64(s.Size)), s.Name)
		f.bind(s.Name, &binding{kind: bindBuf, t: t, v: a})
	case *ir.Malloc:
		f.malloc(s)
	case *ir.Free:
		b := f.buffer(s.Name, "free")
		if !b.malloc || b.outer {
			f.fail("free %s: not a buffer malloc'd in this function", s.Name)
		}
		f.free(b)
		for i, l := range f.live {
			if l == b {
				f.live = append(f.live[:i:i], f.live[i+1:]...)
				break
			}
		}
	case *ir.Store:
		b := f.buffer(s.Buf, "store")
		idx := f.index(s.Index, "store "+s.Buf)
		v, t := f.expr(s.Value)
		if t.Elem() != b.t {
			f.fail("store of a %s value into %s, whose elements are %s", t, s.Buf, b.t)
		}
		p := f.cur.NewGetElementPtr(f.e.valueType(b.t, s.Buf), b.v, idx)
		p.InBounds = true
		if t.IsVector() {
			f.vectorStore(v, p, t)
			break
		}
		f.cur.NewStore(v, p)
	case *ir.Prefetch:
		f.prefetch(s)
	case *ir.For:
		f.forLoop(s)
	case *ir.If:
		f.ifStmt(s)
	case *ir.Return:
		if f.par {
			f.fail("return inside a parallel loop")
		}
		v, t := f.expr(s.Value)
		if t != ir.I32 {
			f.fail("return of a %s value; kernels return i32", t)
		}
		f.cur.NewRet(v)
		f.cur = nil
	case *ir.Continue:
		if len(f.loops) == 0 {
			f.fail("continue outside a loop")
		}
		l := f.loops[len(f.loops)-1]
		if l.latch == nil {
			f.cur.NewRet(nil)
		} else {
			f.cur.NewBr(l.latch)
			l.used = true
		}
		f.cur = nil
	case *ir.CallStmt:
		f.call(s)
	default:
		f.fail("unsupported statement %T", s)
	}
}

func elemBytes(t ir.Type) int64 {
	if t == ir.Bool {
		return 1
	}
	return int64(t.Bits() / 8)
}

func (f *fnState) malloc(s *ir.Malloc) {
	if f.par {
		f.fail("malloc %s inside a parallel loop (a failure could not be reported)", s.Name)
	}
	t := storageType(s.T)
	lt := f.e.valueType(t, "malloc "+s.Name)
	n := f.index(s.Size, "malloc "+s.Name)
	eb := elemBytes(t)
	// A negative size or one whose byte count overflows is a failed
	// allocation; zero bytes allocate one so that NULL means failure.
	tooBig := f.cur.NewICmp(enum.IPredUGT, n, constant.NewInt(types.I64, math.MaxInt64/eb))
	bytes := f.cur.NewMul(n, constant.NewInt(types.I64, eb))
	zero := f.cur.NewICmp(enum.IPredEQ, bytes, constant.NewInt(types.I64, 0))
	bytes1 := f.cur.NewSelect(zero, constant.NewInt(types.I64, 1), bytes)
	fail := f.newBlock(s.Name + ".nomem")
	call := f.newBlock(s.Name + ".malloc")
	ok := f.newBlock(s.Name + ".ok")
	f.cur.NewCondBr(tooBig, fail, call)
	f.place(call)
	raw := call.NewCall(f.e.decl("malloc", i8p, types.I64), bytes1)
	raw.SetName(f.fresh(s.Name + ".raw"))
	isNull := call.NewICmp(enum.IPredEQ, raw, constant.NewNull(i8p))
	call.NewCondBr(isNull, fail, ok)
	f.place(fail)
	f.failNoMemory()
	f.place(ok)
	p := ok.NewBitCast(raw, types.NewPointer(lt))
	p.SetName(f.fresh(s.Name))
	b := &binding{kind: bindBuf, t: t, v: p, malloc: true}
	f.bind(s.Name, b)
	f.live = append(f.live, b)
}

// free releases malloc'd buffer b.
func (f *fnState) free(b *binding) {
	p := f.cur.NewBitCast(b.v, i8p)
	f.cur.NewCall(f.e.decl("free", types.Void, i8p), p)
}

// failNoMemory ends the current block: it frees every buffer malloc'd and
// not yet freed, then returns NO_MEMORY.
func (f *fnState) failNoMemory() {
	for _, b := range f.live {
		f.free(b)
	}
	f.cur.NewRet(constant.NewInt(types.I32, f.e.noMemCode))
	f.cur = nil
}

func (f *fnState) forLoop(s *ir.For) {
	if s.Body == nil {
		f.fail("loop %s has no body", s.Var)
	}
	lo, lt := f.expr(s.Lo)
	hi, ht := f.expr(s.Hi)
	if lt != ir.I32 || ht != ir.I32 {
		f.fail("loop %s: bounds must be i32, have %s and %s", s.Var, lt, ht)
	}
	switch s.Kind {
	case ir.Serial, ir.Vector:
	case ir.Parallel:
		f.parallel(s, lo, hi)
		return
	default:
		f.fail("loop %s: unknown loop kind %d", s.Var, s.Kind)
	}
	pre := f.cur
	cond := f.newBlock(s.Var + ".cond")
	body := f.newBlock(s.Var + ".body")
	inc := f.newBlock(s.Var + ".inc")
	end := f.newBlock(s.Var + ".end")
	pre.NewBr(cond)
	f.place(cond)
	phi := lir.NewPhi(lir.NewIncoming(lo, pre))
	phi.Type()
	phi.SetName(f.fresh(s.Var))
	cond.Insts = append(cond.Insts, phi)
	c := cond.NewICmp(enum.IPredSLT, phi, hi)
	cond.NewCondBr(c, body, end)

	f.place(body)
	f.push()
	f.bind(s.Var, &binding{kind: bindValue, t: ir.I32, v: phi})
	l := &loopCtx{latch: inc}
	f.loops = append(f.loops, l)
	fast := f.fast
	if s.Kind == ir.Vector {
		f.fast = true
	}
	f.block(s.Body, false)
	f.fast = fast
	f.loops = f.loops[:len(f.loops)-1]
	f.pop()
	if f.cur != nil {
		f.cur.NewBr(inc)
		l.used = true
	}
	if l.used {
		f.place(inc)
		next := inc.NewAdd(phi, constant.NewInt(types.I32, 1))
		next.OverflowFlags = []enum.OverflowFlag{enum.OverflowFlagNSW}
		next.SetName(f.fresh(s.Var + ".next"))
		inc.NewBr(cond)
		phi.Incs = append(phi.Incs, lir.NewIncoming(next, inc))
	}
	f.place(end)
}

func (f *fnState) ifStmt(s *ir.If) {
	c, t := f.expr(s.Cond)
	if t != ir.Bool {
		f.fail("if condition has type %s, want bool", t)
	}
	base := "if"
	if s.Tag != ir.NoTag {
		base = s.Tag.String()
	}
	then := f.newBlock(base + ".then")
	end := f.newBlock(base + ".end")
	hasElse := s.Else != nil && len(s.Else.Stmts) > 0
	endUsed := false
	var els *lir.Block
	if hasElse {
		els = f.newBlock(base + ".else")
		f.cur.NewCondBr(c, then, els)
	} else {
		f.cur.NewCondBr(c, then, end)
		endUsed = true
	}
	f.place(then)
	f.block(s.Then, true)
	if f.cur != nil {
		f.cur.NewBr(end)
		endUsed = true
	}
	if hasElse {
		f.place(els)
		f.block(s.Else, true)
		if f.cur != nil {
			f.cur.NewBr(end)
			endUsed = true
		}
	}
	if endUsed {
		f.place(end)
	} else {
		f.cur = nil
	}
}

func (f *fnState) call(s *ir.CallStmt) {
	if name, ok := strings.CutPrefix(s.Fn, "rt."); ok {
		var rt *lir.Func
		if f.e.target.Runtime != nil {
			rt = f.e.target.Runtime.Func(name)
		}
		if rt == nil {
			f.fail("call %s: the target's runtime has no function %s", s.Fn, name)
		}
		if len(s.Args) != len(rt.Params) {
			f.fail("call %s: %d arguments for %d parameters", s.Fn, len(s.Args), len(rt.Params))
		}
		// Buffers (ir.RuntimeBuffers) pass their pointers, the rest i32s.
		var args []value.Value
		for i, a := range s.Args {
			if slices.Contains(ir.RuntimeBuffers[s.Fn], i) {
				b := f.buffer(a.(*ir.Ref).Name, "call "+s.Fn)
				if !b.v.Type().Equal(rt.Params[i].Typ) {
					f.fail("call %s: buffer argument %d is %s, want %s", s.Fn, i, b.v.Type(), rt.Params[i].Typ)
				}
				args = append(args, b.v)
				continue
			}
			v, _ := f.expr(a)
			args = append(args, v)
		}
		c := f.cur.NewCall(rt, args...)
		if s.Result != "" {
			c.SetName(f.fresh(s.Result))
			f.bind(s.Result, &binding{kind: bindValue, t: ir.I32, v: c})
		}
		return
	}
	kf := f.e.byName[s.Fn]
	if kf == nil {
		f.fail("call to unknown kernel %q", s.Fn)
	}
	ps := kf.k.Params
	if len(s.Args) != len(ps) {
		f.fail("call %s: %d arguments for %d parameters", s.Fn, len(s.Args), len(ps))
	}
	var args []value.Value
	for i, p := range ps {
		a := s.Args[i]
		if p.Buffer && ir.IsNullArg(a) {
			args = append(args, constant.NewNull(kf.fn.Params[i].Typ.(*types.PointerType)))
			continue
		}
		if p.Buffer {
			r, ok := a.(*ir.Ref)
			if !ok {
				f.fail("call %s: argument %d for buffer %s must name a buffer, have %s", s.Fn, i, p.Name, exprString(a))
			}
			b := f.buffer(r.Name, "call "+s.Fn)
			if b.t != storageType(p.Elem) {
				f.fail("call %s: buffer %s has %s elements, parameter %s wants %s", s.Fn, r.Name, b.t, p.Name, storageType(p.Elem))
			}
			args = append(args, b.v)
			continue
		}
		v, t := f.expr(a)
		if t != storageType(p.Elem) {
			f.fail("call %s: argument %d for %s has type %s, want %s", s.Fn, i, p.Name, t, storageType(p.Elem))
		}
		args = append(args, v)
	}
	c := f.cur.NewCall(kf.fn, args...)
	if s.Result != "" {
		c.SetName(f.fresh(s.Result))
		f.bind(s.Result, &binding{kind: bindValue, t: ir.I32, v: c})
	}
}

// exprString prints e in the kernel-IR text form without panicking.
func exprString(e ir.Expr) (s string) {
	defer func() {
		if recover() != nil {
			s = fmt.Sprintf("%T", e)
		}
	}()
	return ir.ExprString(e)
}
