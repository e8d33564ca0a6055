package cpu

import (
	"fmt"
	"math"

	llvmgen "github.com/attnc/attnc/codegen/llvm"
	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/enum"
	"github.com/llir/llvm/ir/types"
	"github.com/llir/llvm/ir/value"
)

// scNProcessorsOnln is _SC_NPROCESSORS_ONLN in glibc, the same on x86-64
// and aarch64 Linux.
const scNProcessorsOnln = 84

// The thread limit: set_num_threads(n) clamps n to ThreadLimit(online
// CPUs) = min(MaxThreads, max(MinThreadLimit, ThreadsPerCPU x online CPUs)),
// and the default (all online CPUs) to MaxThreads. The floor lets a small
// machine still run what depends on the thread count (split-KV decode).
const (
	MaxThreads     = 1024
	ThreadsPerCPU  = 4
	MinThreadLimit = 64
)

// ThreadLimit is the most threads set_num_threads accepts on a machine with
// cpus online CPUs.
func ThreadLimit(cpus int) int {
	return min(MaxThreads, max(MinThreadLimit, ThreadsPerCPU*cpus))
}

// The runtime of every module:
//
//	@<prefix>.num_threads                 internal global i32 (0: default)
//	void @<prefix>_set_num_threads(i32)   n <= 0 resets to the default; else n clamped
//	i32  @<prefix>_get_num_threads()      default: online CPUs, 1..MaxThreads
//	i8*  @<prefix>_strerror(i32)          message of a status code
//	i32  @<prefix>.parallel_for(i32 n, void (i8*, i32, i8*)* fn, i8* ctx, i64 scratch, i32 run)
//	i32  @<prefix>.grab(i32 n, i32 t, i32 run, i32 next)   items of the grab at next
//	i8*  @<prefix>.worker(i8* state)      the item loop of every thread of parallel_for
//	     @<prefix>.pool ...                   its persistent workers (pool.go)
//
// parallel_for keeps its bookkeeping off the caller's stack beyond a few
// words: the thread ids are malloc'd, with the workers' scratch, in the one
// allocation the loop makes before any item runs.

var (
	bodyFnType = llvmgen.BodyType
	// pfState is parallel_for's shared state: {next, n, fn, ctx, scratch
	// bytes per worker, next scratch block, first scratch block, run,
	// threads}.
	pfState = types.NewStruct(types.I32, types.I32, bodyFnType, i8p, types.I64, types.I32, i8p, types.I32, types.I32)
)

// runtimeEmitter writes the CPU runtime into a module codegen/llvm builds
// (llvmgen.Runtime): the thread pool, strerror and the CPU-level dispatch
// of arch. One serves one Emit.
type runtimeEmitter struct {
	arch Arch // with the module's levels (moduleLevels)
	// absent are the architecture's levels the module lacks (a DotBF16
	// level no kernel is cloned at), each with the index among arch's
	// levels of the best level below it without a Vendor (fallsTo):
	// ATTNC_CPU_LEVEL may still name them, and runs that level.
	absent []absentLevel
	// floor is the index among arch's levels of the lowest level every
	// cloned kernel has a clone at (floorLevel): rt.cpu_level refuses the
	// levels below it, as the entries do (0 unless the build restricted
	// the levels).
	floor int
	// vendorBelow maps the index among arch's levels of each level with
	// a Vendor to the level detection takes on another vendor's CPU
	// (vendorFallbacks); a level missing from it runs wherever its bits
	// are.
	vendorBelow map[int]int
	b           *llvmgen.Builder
	mod         *lir.Module
	prefix      string

	numThreads  *lir.Global
	getThreads  *lir.Func
	setThreads  *lir.Func
	strerror    *lir.Func
	parallelFor *lir.Func
	grab        *lir.Func
	worker      *lir.Func
	onlineCPUs  *lir.Func
	msgs        int // messages made so far

	// CPU levels (levels.go)
	levelCache  *lir.Global
	cpuLevel    *lir.Func
	levelName   *lir.Func
	detectLevel *lir.Func
	amxPermit   *lir.Func // nil without an AMX level
	amxMM       *lir.Func // rt.amx_mm32; nil without an AMX level
	fpDAZ       *lir.Func // rt.fp_daz; nil unless daz
	// daz: the module calls rt.fp_daz (x86-64 only).
	daz bool

	pool poolFuncs // parallel_for's thread pool (pool.go)
}

// Declare implements llvmgen.Runtime.
func (e *runtimeEmitter) Declare(b *llvmgen.Builder) {
	e.b, e.mod, e.prefix = b, b.Module(), b.Prefix()
	for _, n := range runtimeDecls {
		e.reserve(n)
	}
	for _, n := range poolRuntimeDecls {
		e.reserve(n)
	}
	e.declareRuntime()
	for _, k := range publicEntries(b.IR()) {
		e.reserve(fpEnvInner(k.Name))
	}
}

// runtimeDecls are the external functions the runtime calls besides the
// builder's; kernel names must not collide with them.
var runtimeDecls = []string{"sysconf", "pthread_create", "pthread_join", "getenv", "strcmp"}

// Func implements llvmgen.Runtime: rt.num_threads and rt.cpu_level.
func (e *runtimeEmitter) Func(name string) *lir.Func {
	switch name {
	case "num_threads":
		return e.getThreads
	case "cpu_level":
		return e.cpuLevel
	case "amx_mm32":
		return e.amxMM
	case "fp_daz":
		return e.fpDAZ
	}
	return nil
}

// ParallelFor implements llvmgen.Runtime.
func (e *runtimeEmitter) ParallelFor() *lir.Func { return e.parallelFor }

// Define implements llvmgen.Runtime.
func (e *runtimeEmitter) Define(*llvmgen.Builder) []*lir.Func {
	e.defineRuntime()
	fs := []*lir.Func{e.setThreads, e.getThreads, e.strerror, e.parallelFor, e.grab, e.worker, e.onlineCPUs,
		e.cpuLevel, e.levelName, e.detectLevel, e.pool.take, e.pool.run, e.pool.main, e.pool.fini}
	if e.amxPermit != nil {
		fs = append(fs, e.amxPermit, e.amxMM)
	}
	if e.fpDAZ != nil {
		fs = append(fs, e.fpDAZ)
	}
	return append(fs, e.wrapEntries()...)
}

func (e *runtimeEmitter) reserve(name string) { e.b.Reserve(name) }

func (e *runtimeEmitter) decl(name string, ret types.Type, params ...types.Type) *lir.Func {
	return e.b.Decl(name, ret, params...)
}

func (e *runtimeEmitter) fail(format string, args ...any) { e.b.Fail(format, args...) }

var i8p = types.NewPointer(types.I8)

func (e *runtimeEmitter) declareRuntime() {
	p := e.prefix
	for _, n := range []string{p + ".num_threads", p + "_set_num_threads", p + "_get_num_threads",
		p + "_strerror", p + ".parallel_for", p + ".grab", p + ".worker", p + ".online_cpus"} {
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
	e.parallelFor = newFn(p+".parallel_for", types.I32, true,
		lir.NewParam("n", types.I32), lir.NewParam("fn", bodyFnType), lir.NewParam("ctx", i8p), lir.NewParam("scratch", types.I64),
		lir.NewParam("run", types.I32))
	e.grab = newFn(p+".grab", types.I32, true, lir.NewParam("n", types.I32), lir.NewParam("t", types.I32), lir.NewParam("run", types.I32),
		lir.NewParam("next", types.I32))
	e.worker = newFn(p+".worker", i8p, true, lir.NewParam("arg", i8p))
	e.onlineCPUs = newFn(p+".online_cpus", types.I32, true)
	e.declarePool(newFn)
	e.declareLevelRuntime()
}

func (e *runtimeEmitter) defineRuntime() {
	e.defineOnlineCPUs()
	e.defineSetThreads()
	e.defineGetThreads()
	e.defineStrerror()
	e.defineParallelFor()
	e.defineGrab()
	e.defineWorker()
	e.definePool()
	e.defineLevelRuntime()
	if e.fpDAZ != nil {
		e.defineFPDAZ()
	}
}

func llI32(v int64) *constant.Int { return constant.NewInt(types.I32, v) }
func llI64(v int64) *constant.Int { return constant.NewInt(types.I64, v) }

func named[T interface{ SetName(string) }](v T, name string) T {
	v.SetName(name)
	return v
}

// defineOnlineCPUs: sysconf(_SC_NPROCESSORS_ONLN) clamped to 1..MaxThreads.
func (e *runtimeEmitter) defineOnlineCPUs() {
	b := e.onlineCPUs.NewBlock("entry")
	c := named(b.NewCall(e.decl("sysconf", types.I64, types.I32), llI32(scNProcessorsOnln)), "cpus")
	ok := named(b.NewICmp(enum.IPredSGT, c, llI64(0)), "ok")
	c1 := named(b.NewSelect(ok, c, llI64(1)), "cpus1")
	big := named(b.NewICmp(enum.IPredSGT, c1, llI64(MaxThreads)), "big")
	c2 := named(b.NewSelect(big, llI64(MaxThreads), c1), "cpus2")
	b.NewRet(named(b.NewTrunc(c2, types.I32), "r"))
}

// defineSetThreads: n <= 0 stores 0 (the default); else min(n,
// ThreadLimit(online CPUs)).
func (e *runtimeEmitter) defineSetThreads() {
	f := e.setThreads
	b := f.NewBlock("entry")
	n := f.Params[0]
	cpus := named(b.NewCall(e.onlineCPUs), "cpus")
	lim := named(b.NewMul(cpus, llI32(ThreadsPerCPU)), "lim") // <= 4096
	small := named(b.NewICmp(enum.IPredSLT, lim, llI32(MinThreadLimit)), "small")
	lim0 := named(b.NewSelect(small, llI32(MinThreadLimit), lim), "lim0")
	big := named(b.NewICmp(enum.IPredSGT, lim0, llI32(MaxThreads)), "big")
	lim1 := named(b.NewSelect(big, llI32(MaxThreads), lim0), "lim1")
	over := named(b.NewICmp(enum.IPredSGT, n, lim1), "over")
	c := named(b.NewSelect(over, lim1, n), "c")
	pos := named(b.NewICmp(enum.IPredSGT, c, llI32(0)), "pos")
	v := named(b.NewSelect(pos, c, llI32(0)), "v")
	st := b.NewStore(v, e.numThreads)
	st.Atomic, st.Ordering, st.Align = true, enum.AtomicOrderingMonotonic, 4
	b.NewRet(nil)
}

func (e *runtimeEmitter) defineGetThreads() {
	f := e.getThreads
	entry := f.NewBlock("entry")
	user := f.NewBlock("user")
	online := f.NewBlock("online")
	n := named(entry.NewLoad(types.I32, e.numThreads), "n")
	n.Atomic, n.Ordering, n.Align = true, enum.AtomicOrderingMonotonic, 4
	set := named(entry.NewICmp(enum.IPredSGT, n, llI32(0)), "set")
	entry.NewCondBr(set, user, online)
	user.NewRet(n)
	online.NewRet(named(online.NewCall(e.onlineCPUs), "cpus"))
}

// message returns a pointer to a NUL-terminated copy of s.
func (e *runtimeEmitter) message(s string) constant.Constant {
	name := fmt.Sprintf("%s.msg.%d", e.prefix, e.msgs)
	e.reserve(name)
	init := constant.NewCharArrayFromString(s + "\x00")
	g := e.mod.NewGlobalDef(name, init)
	g.Linkage = enum.LinkagePrivate
	g.UnnamedAddr = enum.UnnamedAddrUnnamedAddr
	g.Immutable = true
	e.msgs++
	gep := constant.NewGetElementPtr(init.Typ, g, llI64(0), llI64(0))
	gep.InBounds = true
	return gep
}

func (e *runtimeEmitter) defineStrerror() {
	type entry struct {
		code int64
		msg  string
	}
	var entries []entry
	seen := map[int64]bool{}
	hasOK := false
	for _, ec := range e.b.IR().Errors {
		if ec.Code == 0 {
			hasOK = true
		}
	}
	if !hasOK {
		entries = append(entries, entry{0, "ok"})
		seen[0] = true
	}
	for _, ec := range e.b.IR().Errors {
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
		cases = append(cases, lir.NewCase(llI32(en.code), cb))
	}
	unknown.NewRet(e.message("unknown status"))
	b.NewSwitch(f.Params[0], unknown, cases...)
}

// defineParallelFor: with n <= 0 there is nothing to do. Otherwise t =
// min(threads, n) workers: t-1 threads and the caller share the items
// through an atomic counter in the shared state. The t-1 threads are the
// pool's (pool_run) when this call holds it, else pthreads of the call's
// own, created and joined here. Everything the loop needs
// is acquired before any item runs, in one malloc in the calling thread:
// t blocks of `scratch` bytes (one per worker, cache-line aligned) and the
// t-1 thread ids, so the caller's stack holds only a few words. When that
// allocation fails no item runs and it returns 1 (the kernel then returns
// NO_MEMORY, having written nothing); else 0, every item having run. A
// failed pthread_create leaves the remaining work to the threads already
// running (the caller included), each with its own block; the pool keeps
// the workers it could start.
func (e *runtimeEmitter) defineParallelFor() {
	f := e.parallelFor
	n, fn, ctx, scratch, run := f.Params[0], f.Params[1], f.Params[2], f.Params[3], f.Params[4]
	entry := f.NewBlock("entry")
	start := f.NewBlock("start")
	alloc := f.NewBlock("alloc")
	got := f.NewBlock("got")
	nomem := f.NewBlock("nomem")
	ready := f.NewBlock("ready")
	createCond := f.NewBlock("create.cond")
	createBody := f.NewBlock("create.body")
	createNext := f.NewBlock("create.next")
	work := f.NewBlock("work")
	joinCond := f.NewBlock("join.cond")
	joinBody := f.NewBlock("join.body")
	done := f.NewBlock("done")
	nothing := f.NewBlock("nothing")

	st := named(entry.NewAlloca(pfState), "state")
	some := named(entry.NewICmp(enum.IPredSGT, n, llI32(0)), "some")
	entry.NewCondBr(some, start, nothing)
	nothing.NewRet(llI32(0))

	field := func(b *lir.Block, base value.Value, k int64, name string) *lir.InstGetElementPtr {
		return named(b.NewGetElementPtr(pfState, base, llI32(0), llI32(k)), name)
	}
	start.NewStore(llI32(0), field(start, st, 0, "next.p"))
	start.NewStore(n, field(start, st, 1, "n.p"))
	start.NewStore(fn, field(start, st, 2, "fn.p"))
	start.NewStore(ctx, field(start, st, 3, "ctx.p"))
	start.NewStore(scratch, field(start, st, 4, "scratch.p"))
	start.NewStore(llI32(0), field(start, st, 5, "slot.p"))
	baseP := field(start, st, 6, "base.p")
	start.NewStore(constant.NewNull(i8p), baseP)
	arg := named(start.NewBitCast(st, i8p), "arg")
	// The thread count: with the pool held, the set count or the online
	// CPUs it read once; else get_num_threads.
	pc := named(start.NewCall(e.pool.take), "pool.cpus")
	pooled := named(start.NewICmp(enum.IPredSGT, pc, llI32(0)), "pooled")
	poolT := f.NewBlock("pool.threads")
	ownT := f.NewBlock("own.threads")
	threads := f.NewBlock("threads")
	start.NewCondBr(pooled, poolT, ownT)
	nset := e.atomicLoad(poolT, e.numThreads, enum.AtomicOrderingMonotonic, "nset")
	isSet := named(poolT.NewICmp(enum.IPredSGT, nset, llI32(0)), "is.set")
	ntPool := named(poolT.NewSelect(isSet, nset, pc), "nt.pool")
	poolT.NewBr(threads)
	ntOwn := named(ownT.NewCall(e.getThreads), "nt.own")
	ownT.NewBr(threads)
	nt := named(lir.NewPhi(lir.NewIncoming(ntPool, poolT), lir.NewIncoming(ntOwn, ownT)), "nt")
	nt.Type()
	threads.Insts = append(threads.Insts, nt)
	start = threads // the start of the loop goes on there
	lt := named(start.NewICmp(enum.IPredSLT, nt, n), "lt")
	t := named(start.NewSelect(lt, nt, n), "t")
	start.NewStore(run, field(start, st, 7, "run.p"))
	start.NewStore(t, field(start, st, 8, "t.p"))
	nw := named(start.NewSub(t, llI32(1)), "nw")
	multi := named(start.NewICmp(enum.IPredSGT, nw, llI32(0)), "multi")
	needScratch := named(start.NewICmp(enum.IPredSGT, scratch, llI64(0)), "need.scratch")
	need := named(start.NewOr(multi, needScratch), "need")
	start.NewCondBr(need, alloc, ready)

	// One block: t scratch blocks from a cache-line boundary, then the
	// thread ids. t <= MaxThreads and the scratch size is bounded at
	// emission, so the size does not overflow.
	t64 := named(alloc.NewSExt(t, types.I64), "t64")
	nw64 := named(alloc.NewSExt(nw, types.I64), "nw64")
	blocks := named(alloc.NewMul(t64, scratch), "blocks")
	tidBytes := named(alloc.NewMul(nw64, llI64(8)), "tid.bytes")
	used := named(alloc.NewAdd(blocks, tidBytes), "used")
	total := named(alloc.NewAdd(used, llI64(llvmgen.HeapAlign-1)), "total")
	raw := named(alloc.NewCall(e.decl("malloc", i8p, types.I64), total), "raw")
	isNull := named(alloc.NewICmp(enum.IPredEQ, raw, constant.NewNull(i8p)), "failed")
	alloc.NewCondBr(isNull, nomem, got)
	// Out of memory: release the pool if held, return 1.
	nomemHeld := f.NewBlock("nomem.held")
	nomemOwn := f.NewBlock("nomem.own")
	nomem.NewCondBr(pooled, nomemHeld, nomemOwn)
	e.atomicStore(nomemHeld, llI32(0), e.poolField(nomemHeld, 0), enum.AtomicOrderingRelease)
	nomemHeld.NewRet(llI32(1))
	nomemOwn.NewRet(llI32(1))
	addr := named(got.NewPtrToInt(raw, types.I64), "addr")
	up := named(got.NewAdd(addr, llI64(llvmgen.HeapAlign-1)), "up")
	alignedAddr := named(got.NewAnd(up, llI64(^int64(llvmgen.HeapAlign-1))), "aligned.addr")
	pad := named(got.NewSub(alignedAddr, addr), "pad")
	base := named(got.NewGetElementPtr(types.I8, raw, pad), "base")
	base.InBounds = true
	got.NewStore(base, baseP)
	tidsRaw := named(got.NewGetElementPtr(types.I8, base, blocks), "tids.raw")
	tidsRaw.InBounds = true
	tids := named(got.NewBitCast(tidsRaw, types.NewPointer(types.I64)), "tids")
	got.NewBr(ready)

	mem := named(lir.NewPhi(lir.NewIncoming(constant.NewNull(i8p), start), lir.NewIncoming(raw, got)), "mem")
	mem.Type()
	tidsAt := named(lir.NewPhi(lir.NewIncoming(constant.NewNull(types.NewPointer(types.I64)), start), lir.NewIncoming(tids, got)), "tids.at")
	tidsAt.Type()
	ready.Insts = append(ready.Insts, mem, tidsAt)
	// With the pool held its workers run the items (pool_run releases it);
	// else t-1 threads of the call's own.
	viaPool := f.NewBlock("via.pool")
	ready.NewCondBr(pooled, viaPool, createCond)
	viaPool.NewCall(e.pool.run, arg, nw, t)
	viaPool.NewBr(done)

	k := named(lir.NewPhi(lir.NewIncoming(llI32(0), ready)), "k")
	k.Type()
	createCond.Insts = append(createCond.Insts, k)
	kmore := named(createCond.NewICmp(enum.IPredSLT, k, nw), "kmore")
	createCond.NewCondBr(kmore, createBody, work)
	slot := named(createBody.NewGetElementPtr(types.I64, tidsAt, k), "slot")
	create := e.decl("pthread_create", types.I32, types.NewPointer(types.I64), i8p,
		types.NewPointer(types.NewFunc(i8p, i8p)), i8p)
	rc := named(createBody.NewCall(create, slot, constant.NewNull(i8p), e.worker, arg), "rc")
	created := named(createBody.NewICmp(enum.IPredEQ, rc, llI32(0)), "created")
	createBody.NewCondBr(created, createNext, work)
	knext := named(createNext.NewAdd(k, llI32(1)), "k.next")
	knext.OverflowFlags = []enum.OverflowFlag{enum.OverflowFlagNSW}
	createNext.NewBr(createCond)
	k.Incs = append(k.Incs, lir.NewIncoming(knext, createNext))

	// The caller works too, then joins the workers it started.
	started := named(lir.NewPhi(lir.NewIncoming(k, createCond), lir.NewIncoming(k, createBody)), "started")
	started.Type()
	work.Insts = append(work.Insts, started)
	work.NewCall(e.worker, arg)
	e.joinThreads(work, joinCond, joinBody, done, started, func(b *lir.Block, j value.Value) value.Value {
		return named(b.NewGetElementPtr(types.I64, tidsAt, j), "tslot")
	})

	done.NewCall(e.decl("free", types.Void, i8p), mem)
	done.NewRet(llI32(0))
}

// defineGrab: the items of the grab that starts at item next (< n) of n
// items on t threads (1 <= t <= n) with runs of run items: about a quarter
// of a thread's share (grabsPerThread) — in whole runs while every thread
// can still have one (a run > 1, n / t >= run and n - next >= t · run) —,
// at most n - next.
func (e *runtimeEmitter) defineGrab() {
	f := e.grab
	n, t, run, next := f.Params[0], f.Params[1], f.Params[2], f.Params[3]
	b := f.NewBlock("entry")
	share := named(b.NewSDiv(n, named(b.NewMul(t, llI32(grabsPerThread)), "grabs")), "share")
	many := named(b.NewICmp(enum.IPredSGT, share, llI32(1)), "many")
	grain := named(b.NewSelect(many, share, llI32(1)), "grain")
	isRun := named(b.NewICmp(enum.IPredSGT, run, llI32(1)), "is.run")
	run1 := named(b.NewSelect(isRun, run, llI32(1)), "run1") // no division by a run below 1
	runs := named(b.NewSDiv(share, run1), "runs")
	someRuns := named(b.NewICmp(enum.IPredSGT, runs, llI32(1)), "some.runs")
	runs1 := named(b.NewSelect(someRuns, runs, llI32(1)), "runs1")
	grainRuns := named(b.NewMul(run1, runs1), "grain.runs")
	perThread := named(b.NewSDiv(n, t), "per.thread")
	fits := named(b.NewICmp(enum.IPredSGE, perThread, run1), "run.fits")
	aligned := named(b.NewAnd(isRun, fits), "aligned")
	// t · run <= n where aligned; elsewhere its value is not used.
	round := named(b.NewMul(t, run1), "round")
	rest := named(b.NewSub(n, next), "rest")
	plenty := named(b.NewICmp(enum.IPredSGE, rest, round), "plenty")
	whole := named(b.NewAnd(aligned, plenty), "whole")
	g := named(b.NewSelect(whole, grainRuns, grain), "g")
	short := named(b.NewICmp(enum.IPredSLT, rest, g), "short")
	b.NewRet(named(b.NewSelect(short, rest, g), "take"))
}

// joinThreads emits, from block from, a loop over blocks cond and body
// that joins count threads, thread j's id at slot(body, j), then goes to
// done.
func (e *runtimeEmitter) joinThreads(from, cond, body, done *lir.Block, count value.Value, slot func(*lir.Block, value.Value) value.Value) {
	from.NewBr(cond)
	j := named(lir.NewPhi(lir.NewIncoming(llI32(0), from)), "j")
	j.Type()
	cond.Insts = append(cond.Insts, j)
	jmore := named(cond.NewICmp(enum.IPredSLT, j, count), "jmore")
	cond.NewCondBr(jmore, body, done)
	tid := named(body.NewLoad(types.I64, slot(body, j)), "tid")
	join := e.decl("pthread_join", types.I32, types.I64, types.NewPointer(i8p))
	body.NewCall(join, tid, constant.NewNull(types.NewPointer(i8p)))
	jnext := named(body.NewAdd(j, llI32(1)), "j.next")
	jnext.OverflowFlags = []enum.OverflowFlag{enum.OverflowFlagNSW}
	body.NewBr(cond)
	j.Incs = append(j.Incs, lir.NewIncoming(jnext, body))
}

// grabsPerThread is about how many grabs of consecutive items each of
// parallel_for's t threads makes: a grab is max(1, n / (t·4)) items, so a
// thread runs runs of neighbouring items (a decode's kv heads of one
// sequence) rather than every t-th item. Measured on Zen 5 (2 threads,
// f16 decode 8 × 4096, 32/8 heads: 64 items, grabs of 8): 6.23 → 3.93 ms,
// 0.68 → 1.07 of the paged scan, where one item per grab had both threads
// on adjacent kv heads of one sequence — the same pages — at once. With
// fewer items than 8 per thread the grab is one item, as before.
//
// A loop with a run r > 1 (ir.For.Run: a decode's kv heads of one
// sequence) grabs whole runs, r · max(1, share / r) items, while every
// thread can still have one (n / t >= r and at least t · r items left),
// then the quarter shares: with 1 to 4 sequences a thread a grab of
// n / (4t) items would be part of a sequence, and two threads would read
// one sequence's pages at once (2 threads, f16 decode 2 × 8192: grabs of 2
// items 2.40–2.56 ms, of 8 1.91–2.07 ms), while the last sequences split
// keeps an odd count balanced (3 × 4096 over e4m3: whole sequences to the
// end took 10–15% longer).
const grabsPerThread = 4

// defineWorker: scratch = the next of the blocks parallel_for allocated
// when the loop has heap arrays (at most t workers take one each); loop {
// i = next; if i >= n stop; g = grab(n, t, run, i); if compare-and-swap
// next i → i + g fails, retry with the value found; for j = i; j < i + g;
// j++ { fn(ctx, j, scratch) } }. next never passes n.
func (e *runtimeEmitter) defineWorker() {
	f := e.worker
	entry := f.NewBlock("entry")
	get := f.NewBlock("scratch.take")
	ready := f.NewBlock("ready")
	loop := f.NewBlock("loop")
	body := f.NewBlock("body")
	item := f.NewBlock("item")
	exit := f.NewBlock("exit")
	st := named(entry.NewBitCast(f.Params[0], types.NewPointer(pfState)), "st")
	field := func(k int64, name string) *lir.InstGetElementPtr {
		return named(entry.NewGetElementPtr(pfState, st, llI32(0), llI32(k)), name)
	}
	next := field(0, "next.p")
	n := named(entry.NewLoad(types.I32, field(1, "n.p")), "n")
	fn := named(entry.NewLoad(bodyFnType, field(2, "fn.p")), "fn")
	ctx := named(entry.NewLoad(i8p, field(3, "ctx.p")), "ctx")
	bytes := named(entry.NewLoad(types.I64, field(4, "scratch.p")), "bytes")
	slotP := field(5, "slot.p")
	base := named(entry.NewLoad(i8p, field(6, "base.p")), "base")
	run := named(entry.NewLoad(types.I32, field(7, "run.p")), "run")
	t := named(entry.NewLoad(types.I32, field(8, "t.p")), "t")
	need := named(entry.NewICmp(enum.IPredSGT, bytes, llI64(0)), "need")
	entry.NewCondBr(need, get, ready)
	s := named(get.NewAtomicRMW(enum.AtomicOpAdd, slotP, llI32(1), enum.AtomicOrderingMonotonic), "s")
	s64 := named(get.NewSExt(s, types.I64), "s64")
	off := named(get.NewMul(s64, bytes), "off")
	mine := named(get.NewGetElementPtr(types.I8, base, off), "mine")
	mine.InBounds = true
	get.NewBr(ready)
	scratch := named(lir.NewPhi(lir.NewIncoming(constant.NewNull(i8p), entry), lir.NewIncoming(mine, get)), "scratch")
	scratch.Type()
	ready.Insts = append(ready.Insts, scratch)
	ready.NewBr(loop)
	first := e.atomicLoad(loop, next, enum.AtomicOrderingMonotonic, "first")
	try := f.NewBlock("try")
	loop.NewBr(try)
	i := named(lir.NewPhi(lir.NewIncoming(first, loop)), "i")
	i.Type()
	try.Insts = append(try.Insts, i)
	stop := named(try.NewICmp(enum.IPredSGE, i, n), "stop")
	claim := f.NewBlock("claim")
	try.NewCondBr(stop, exit, claim)
	g := named(claim.NewCall(e.grab, n, t, run, i), "g")
	last := named(claim.NewAdd(i, g), "last")
	x := named(claim.NewCmpXchg(next, i, last, enum.AtomicOrderingMonotonic, enum.AtomicOrderingMonotonic), "x")
	found := named(claim.NewExtractValue(x, 0), "found")
	won := named(claim.NewExtractValue(x, 1), "won")
	claim.NewCondBr(won, body, try)
	i.Incs = append(i.Incs, lir.NewIncoming(found, claim))
	body.NewBr(item)
	j := named(lir.NewPhi(lir.NewIncoming(i, body)), "j")
	j.Type()
	item.Insts = append(item.Insts, j)
	item.NewCall(fn, ctx, j, scratch)
	jnext := named(item.NewAdd(j, llI32(1)), "j.next")
	more := named(item.NewICmp(enum.IPredULT, jnext, last), "more")
	item.NewCondBr(more, item, loop)
	j.Incs = append(j.Incs, lir.NewIncoming(jnext, item))
	exit.NewRet(constant.NewNull(i8p))
}
