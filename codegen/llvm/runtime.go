package llvm

import (
	"fmt"
	"math"

	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/enum"
	"github.com/llir/llvm/ir/types"
	"github.com/llir/llvm/ir/value"
)

// scNProcessorsOnln is _SC_NPROCESSORS_ONLN in glibc, the same on x86-64
// and aarch64 Linux.
const scNProcessorsOnln = 84

// The runtime of every module:
//
//	@<prefix>.num_threads                 internal global i32 (0: default)
//	void @<prefix>_set_num_threads(i32)   n <= 0 resets to the default
//	i32  @<prefix>_get_num_threads()      default: sysconf(_SC_NPROCESSORS_ONLN), at least 1
//	i8*  @<prefix>_strerror(i32)          message of a status code
//	void @<prefix>.parallel_for(i32 n, void (i8*, i32)* fn, i8* ctx)
//	i8*  @<prefix>.worker(i8* state)      pthread body of parallel_for

var (
	bodyFnType = types.NewPointer(types.NewFunc(types.Void, i8p, types.I32))
	// pfState is parallel_for's shared state: {next, n, fn, ctx}.
	pfState = types.NewStruct(types.I32, types.I32, bodyFnType, i8p)
)

func (e *emitter) declareRuntime() {
	p := e.prefix
	for _, n := range []string{p + ".num_threads", p + "_set_num_threads", p + "_get_num_threads",
		p + "_strerror", p + ".parallel_for", p + ".worker"} {
		e.reserve(n)
	}
	e.numThreads = lir.NewGlobalDef(p+".num_threads", constant.NewInt(types.I32, 0))
	e.numThreads.Linkage = enum.LinkageInternal
	e.numThreads.Align = 4
	e.mod.Globals = append(e.mod.Globals, e.numThreads)

	newFn := func(name string, ret types.Type, internal bool, params ...*lir.Param) *lir.Func {
		f := lir.NewFunc(name, ret, params...)
		f.Parent = e.mod
		f.FuncAttrs = append(f.FuncAttrs, enum.FuncAttrNoUnwind)
		if internal {
			f.Linkage = enum.LinkageInternal
		}
		return f
	}
	e.setThreads = newFn(p+"_set_num_threads", types.Void, false, lir.NewParam("n", types.I32))
	e.getThreads = newFn(p+"_get_num_threads", types.I32, false)
	e.strerror = newFn(p+"_strerror", i8p, false, lir.NewParam("code", types.I32))
	e.parallelFor = newFn(p+".parallel_for", types.Void, true,
		lir.NewParam("n", types.I32), lir.NewParam("fn", bodyFnType), lir.NewParam("ctx", i8p))
	e.worker = newFn(p+".worker", i8p, true, lir.NewParam("arg", i8p))
}

func (e *emitter) defineRuntime() {
	e.defineSetThreads()
	e.defineGetThreads()
	e.defineStrerror()
	e.defineParallelFor()
	e.defineWorker()
}

func i32c(v int64) *constant.Int { return constant.NewInt(types.I32, v) }
func i64c(v int64) *constant.Int { return constant.NewInt(types.I64, v) }

func named[T interface{ SetName(string) }](v T, name string) T {
	v.SetName(name)
	return v
}

func (e *emitter) defineSetThreads() {
	f := e.setThreads
	b := f.NewBlock("entry")
	n := f.Params[0]
	pos := named(b.NewICmp(enum.IPredSGT, n, i32c(0)), "pos")
	v := named(b.NewSelect(pos, n, i32c(0)), "v")
	st := b.NewStore(v, e.numThreads)
	st.Atomic, st.Ordering, st.Align = true, enum.AtomicOrderingMonotonic, 4
	b.NewRet(nil)
}

func (e *emitter) defineGetThreads() {
	f := e.getThreads
	entry := f.NewBlock("entry")
	user := f.NewBlock("user")
	online := f.NewBlock("online")
	n := named(entry.NewLoad(types.I32, e.numThreads), "n")
	n.Atomic, n.Ordering, n.Align = true, enum.AtomicOrderingMonotonic, 4
	set := named(entry.NewICmp(enum.IPredSGT, n, i32c(0)), "set")
	entry.NewCondBr(set, user, online)
	user.NewRet(n)
	c := named(online.NewCall(e.decl("sysconf", types.I64, types.I32), i32c(scNProcessorsOnln)), "cpus")
	ok := named(online.NewICmp(enum.IPredSGT, c, i64c(0)), "ok")
	c1 := named(online.NewSelect(ok, c, i64c(1)), "cpus1")
	big := named(online.NewICmp(enum.IPredSGT, c1, i64c(math.MaxInt32)), "big")
	c2 := named(online.NewSelect(big, i64c(math.MaxInt32), c1), "cpus2")
	online.NewRet(named(online.NewTrunc(c2, types.I32), "r"))
}

// message returns a pointer to a NUL-terminated copy of s.
func (e *emitter) message(s string) constant.Constant {
	name := fmt.Sprintf("%s.msg.%d", e.prefix, len(e.msgs))
	e.reserve(name)
	init := constant.NewCharArrayFromString(s + "\x00")
	g := e.mod.NewGlobalDef(name, init)
	g.Linkage = enum.LinkagePrivate
	g.UnnamedAddr = enum.UnnamedAddrUnnamedAddr
	g.Immutable = true
	e.msgs = append(e.msgs, g)
	gep := constant.NewGetElementPtr(init.Typ, g, i64c(0), i64c(0))
	gep.InBounds = true
	return gep
}

func (e *emitter) defineStrerror() {
	type entry struct {
		code int64
		msg  string
	}
	var entries []entry
	seen := map[int64]bool{}
	hasOK := false
	for _, ec := range e.m.Errors {
		if ec.Code == 0 {
			hasOK = true
		}
	}
	if !hasOK {
		entries = append(entries, entry{0, "ok"})
		seen[0] = true
	}
	for _, ec := range e.m.Errors {
		c := int64(ec.Code)
		if c < math.MinInt32 || c > math.MaxInt32 {
			e.fail("error %s: code %d does not fit in i32", ec.Name, ec.Code)
		}
		if seen[c] {
			e.fail("error %s: code %d is used twice", ec.Name, ec.Code)
		}
		seen[c] = true
		entries = append(entries, entry{c, ec.Msg})
	}
	f := e.strerror
	b := f.NewBlock("entry")
	unknown := f.NewBlock("unknown")
	var cases []*lir.Case
	for i, en := range entries {
		cb := f.NewBlock(fmt.Sprintf("code.%d", i))
		cb.NewRet(e.message(en.msg))
		cases = append(cases, lir.NewCase(i32c(en.code), cb))
	}
	unknown.NewRet(e.message("unknown status"))
	b.NewSwitch(f.Params[0], unknown, cases...)
}

// defineParallelFor: t = min(threads, n); t <= 1 runs the items inline;
// otherwise t-1 pthreads and the caller share the items through an atomic
// counter. A failed pthread_create leaves the remaining work to the threads
// already running (the caller included).
func (e *emitter) defineParallelFor() {
	f := e.parallelFor
	n, fn, ctx := f.Params[0], f.Params[1], f.Params[2]
	entry := f.NewBlock("entry")
	serCond := f.NewBlock("serial.cond")
	serBody := f.NewBlock("serial.body")
	threads := f.NewBlock("threads")
	createCond := f.NewBlock("create.cond")
	createBody := f.NewBlock("create.body")
	createNext := f.NewBlock("create.next")
	work := f.NewBlock("work")
	joinCond := f.NewBlock("join.cond")
	joinBody := f.NewBlock("join.body")
	done := f.NewBlock("done")

	st := named(entry.NewAlloca(pfState), "state")
	nt := named(entry.NewCall(e.getThreads), "nt")
	lt := named(entry.NewICmp(enum.IPredSLT, nt, n), "lt")
	t := named(entry.NewSelect(lt, nt, n), "t")
	multi := named(entry.NewICmp(enum.IPredSGT, t, i32c(1)), "multi")
	entry.NewCondBr(multi, threads, serCond)

	// Inline: for i in 0..n: fn(ctx, i).
	i := named(lir.NewPhi(lir.NewIncoming(i32c(0), entry)), "i")
	i.Type()
	serCond.Insts = append(serCond.Insts, i)
	more := named(serCond.NewICmp(enum.IPredSLT, i, n), "more")
	serCond.NewCondBr(more, serBody, done)
	serBody.NewCall(fn, ctx, i)
	inext := named(serBody.NewAdd(i, i32c(1)), "i.next")
	inext.OverflowFlags = []enum.OverflowFlag{enum.OverflowFlagNSW}
	serBody.NewBr(serCond)
	i.Incs = append(i.Incs, lir.NewIncoming(inext, serBody))

	// Threads: shared state, t-1 workers.
	field := func(b *lir.Block, base value.Value, k int64, name string) *lir.InstGetElementPtr {
		return named(b.NewGetElementPtr(pfState, base, i32c(0), i32c(k)), name)
	}
	threads.NewStore(i32c(0), field(threads, st, 0, "next.p"))
	threads.NewStore(n, field(threads, st, 1, "n.p"))
	threads.NewStore(fn, field(threads, st, 2, "fn.p"))
	threads.NewStore(ctx, field(threads, st, 3, "ctx.p"))
	arg := named(threads.NewBitCast(st, i8p), "arg")
	nw := named(threads.NewSub(t, i32c(1)), "nw")
	tids := named(threads.NewAlloca(types.I64), "tids")
	tids.NElems = nw
	threads.NewBr(createCond)

	k := named(lir.NewPhi(lir.NewIncoming(i32c(0), threads)), "k")
	k.Type()
	createCond.Insts = append(createCond.Insts, k)
	kmore := named(createCond.NewICmp(enum.IPredSLT, k, nw), "kmore")
	createCond.NewCondBr(kmore, createBody, work)
	slot := named(createBody.NewGetElementPtr(types.I64, tids, k), "slot")
	create := e.decl("pthread_create", types.I32, types.NewPointer(types.I64), i8p,
		types.NewPointer(types.NewFunc(i8p, i8p)), i8p)
	rc := named(createBody.NewCall(create, slot, constant.NewNull(i8p), e.worker, arg), "rc")
	created := named(createBody.NewICmp(enum.IPredEQ, rc, i32c(0)), "created")
	createBody.NewCondBr(created, createNext, work)
	knext := named(createNext.NewAdd(k, i32c(1)), "k.next")
	knext.OverflowFlags = []enum.OverflowFlag{enum.OverflowFlagNSW}
	createNext.NewBr(createCond)
	k.Incs = append(k.Incs, lir.NewIncoming(knext, createNext))

	// The caller works too, then joins the k workers it started.
	work.NewCall(e.worker, arg)
	work.NewBr(joinCond)
	j := named(lir.NewPhi(lir.NewIncoming(i32c(0), work)), "j")
	j.Type()
	joinCond.Insts = append(joinCond.Insts, j)
	jmore := named(joinCond.NewICmp(enum.IPredSLT, j, k), "jmore")
	joinCond.NewCondBr(jmore, joinBody, done)
	tslot := named(joinBody.NewGetElementPtr(types.I64, tids, j), "tslot")
	tid := named(joinBody.NewLoad(types.I64, tslot), "tid")
	join := e.decl("pthread_join", types.I32, types.I64, types.NewPointer(i8p))
	joinBody.NewCall(join, tid, constant.NewNull(types.NewPointer(i8p)))
	jnext := named(joinBody.NewAdd(j, i32c(1)), "j.next")
	jnext.OverflowFlags = []enum.OverflowFlag{enum.OverflowFlagNSW}
	joinBody.NewBr(joinCond)
	j.Incs = append(j.Incs, lir.NewIncoming(jnext, joinBody))

	done.NewRet(nil)
}

// defineWorker: loop { i = atomicrmw add next, 1; if i >= n (unsigned) stop;
// fn(ctx, i) }.
func (e *emitter) defineWorker() {
	f := e.worker
	entry := f.NewBlock("entry")
	loop := f.NewBlock("loop")
	body := f.NewBlock("body")
	exit := f.NewBlock("exit")
	st := named(entry.NewBitCast(f.Params[0], types.NewPointer(pfState)), "st")
	field := func(k int64, name string) *lir.InstGetElementPtr {
		return named(entry.NewGetElementPtr(pfState, st, i32c(0), i32c(k)), name)
	}
	next := field(0, "next.p")
	n := named(entry.NewLoad(types.I32, field(1, "n.p")), "n")
	fn := named(entry.NewLoad(bodyFnType, field(2, "fn.p")), "fn")
	ctx := named(entry.NewLoad(i8p, field(3, "ctx.p")), "ctx")
	entry.NewBr(loop)
	i := named(loop.NewAtomicRMW(enum.AtomicOpAdd, next, i32c(1), enum.AtomicOrderingMonotonic), "i")
	stop := named(loop.NewICmp(enum.IPredUGE, i, n), "stop")
	loop.NewCondBr(stop, exit, body)
	body.NewCall(fn, ctx, i)
	body.NewBr(loop)
	exit.NewRet(constant.NewNull(i8p))
}
