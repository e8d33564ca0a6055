package cpu

import (
	"strings"

	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/enum"
	"github.com/llir/llvm/ir/types"
	"github.com/llir/llvm/ir/value"
)

// The thread pool of a module: parallel_for's workers outlive the call
// that starts them, so a call pays a wake-up (a few microseconds, nothing
// while they still spin) instead of a pthread_create and pthread_join per
// worker (about 55 µs each on a 2-core Zen 5 VM: a 256-token decode took
// twice as long on 2 threads as on 1).
//
//	%<prefix>.pool_t                poolFields
//	@<prefix>.pool                  internal global %<prefix>.pool_t (zeroed)
//	i32  @<prefix>.pool_take()      the pool for this call: online CPUs, or 0 when busy
//	void @<prefix>.pool_run(i8* state, i32 workers, i32 threads)
//	i8*  @<prefix>.pool_main(i8* seen)     a worker thread's body
//	void @<prefix>.pool_fini()      in @llvm.global_dtors: stops and joins the workers
//
// One call at a time uses the pool: pool_take claims it with a
// compare-and-swap of busy, and a call that finds it busy (another
// application thread in a kernel of the same module at once) starts and
// joins its own threads as before. The pool remembers the process id its
// workers were started in: after a fork the child's first call makes a new
// pool (the parent's threads do not exist there). A call publishes its shared state
// under the mutex with a new generation number, `want` open places and
// `want` pending, and wakes the workers; a worker that takes an open place
// (under the mutex) runs parallel_for's worker loop on it and counts
// pending down. The caller works too; when its worker loop returns every
// item has been taken, so it closes the places no worker took yet and
// counts them off pending, then waits for pending to reach 0: only for
// workers running items, never for one that has yet to wake (a sleeping
// worker, or one whose CPU runs another thread, made a 0.12 ms decode
// take 0.6 ms in a quarter of the calls). Waiting workers and the waiting
// caller spin for poolSpins pauses before they sleep on a condition variable (not at all when the
// call has more threads than online CPUs), so calls in quick succession —
// a decode per layer — find them awake. dlclose and exit run pool_fini,
// which stops and joins the workers while no call holds the pool.

// poolFields are the pool's fields. The mutex and condition variables are
// opaque 64-byte blocks: glibc's and musl's pthread_mutex_t and
// pthread_cond_t fit (40–48 bytes), and all zeros is their static
// initializer on both.
var poolFields = []types.Type{
	types.I32,                             // 0 busy: 1 while a call (or pool_fini) holds the pool
	types.I32,                             // 1 pid the workers were started in (0: none yet)
	types.I32,                             // 2 cpus: online CPUs, read at the first claim
	types.I32,                             // 3 workers started
	types.I32,                             // 4 gen: generation of the published call
	types.I32,                             // 5 open: places of the published call no worker took yet
	types.I32,                             // 6 pending: places open or taken by a worker not done yet
	types.I32,                             // 7 stop: pool_fini's request to exit
	types.I32,                             // 8 spin: pauses a waiting worker spins before it sleeps
	i8p,                                   // 9 job: the published call's parallel_for state
	types.NewArray(64, types.I8),          // 10 mutex
	types.NewArray(64, types.I8),          // 11 wake: the workers wait on it for a new generation
	types.NewArray(64, types.I8),          // 12 done: the caller waits on it for pending = 0
	types.NewArray(MaxThreads, types.I64), // 13 the workers' pthread ids
}

// poolSpins is how many pauses a waiting worker or caller spins before it
// sleeps: 16384 pauses are 0.3–0.7 ms on current x86-64 cores (a pause
// takes 40–140 cycles).
const poolSpins = 1 << 14

// poolYieldEvery is how many pauses a spinning thread makes between
// sched_yield calls (about 1.5 µs on Zen 5, where a pause is ~24 ns). The
// scheduler may put a worker on the caller's CPU (the other CPU busy, or
// a wake-up kept near its waker); without the yield the spinner held that
// CPU for the whole spin while the thread it waited for could not run: a
// 2-thread decode of 0.12 ms took 0.6 ms in a quarter of the calls. A yield
// with nothing else runnable on the CPU returns at once.
const poolYieldEvery = 64

// poolRuntimeDecls are the external functions the pool calls.
var poolRuntimeDecls = []string{"getpid", "pthread_mutex_lock", "pthread_mutex_unlock", "pthread_cond_wait", "pthread_cond_broadcast", "sched_yield"}

// poolFuncs are the pool's functions and its global.
type poolFuncs struct {
	typ   *types.StructType // %<prefix>.pool_t
	state *lir.Global
	take  *lir.Func
	run   *lir.Func
	main  *lir.Func
	fini  *lir.Func
	dtors *lir.Global
}

func (e *runtimeEmitter) declarePool(newFn func(string, types.Type, bool, ...*lir.Param) *lir.Func) {
	p := e.prefix
	for _, n := range []string{p + ".pool", p + ".pool_take", p + ".pool_run", p + ".pool_main", p + ".pool_fini"} {
		e.reserve(n)
	}
	typ := types.NewStruct(poolFields...)
	typ.SetName(p + ".pool_t")
	e.mod.TypeDefs = append(e.mod.TypeDefs, typ)
	g := lir.NewGlobalDef(p+".pool", constant.NewZeroInitializer(typ))
	g.Linkage = enum.LinkageInternal
	g.Align = 64
	e.mod.Globals = append(e.mod.Globals, g)
	e.pool = poolFuncs{
		typ:   typ,
		state: g,
		take:  newFn(p+".pool_take", types.I32, true),
		run:   newFn(p+".pool_run", types.Void, true, lir.NewParam("arg", i8p), lir.NewParam("nw", types.I32), lir.NewParam("t", types.I32)),
		main:  newFn(p+".pool_main", i8p, true, lir.NewParam("arg", i8p)),
		fini:  newFn(p+".pool_fini", types.Void, true),
	}
	// @llvm.global_dtors: one entry per module; appending linkage merges
	// them when modules are linked together.
	entryT := types.NewStruct(types.I32, types.NewPointer(types.NewFunc(types.Void)), i8p)
	arr := constant.NewArray(types.NewArray(1, entryT), constant.NewStruct(entryT,
		llI32(65535), e.pool.fini, constant.NewNull(i8p)))
	d := lir.NewGlobalDef("llvm.global_dtors", arr)
	d.Linkage = enum.LinkageAppending
	e.mod.Globals = append(e.mod.Globals, d)
	e.pool.dtors = d
}

func (e *runtimeEmitter) definePool() {
	e.definePoolTake()
	e.definePoolRun()
	e.definePoolMain()
	e.definePoolFini()
}

// poolField returns a pointer to field k of the pool, unnamed (a function
// takes the same field more than once).
func (e *runtimeEmitter) poolField(b *lir.Block, k int64) *lir.InstGetElementPtr {
	return b.NewGetElementPtr(e.pool.typ, e.pool.state, llI32(0), llI32(k))
}

// poolSync returns a pointer to the pool's mutex (10), wake (11) or done
// (12) block.
func (e *runtimeEmitter) poolSync(b *lir.Block, k int64) *lir.InstGetElementPtr {
	return b.NewGetElementPtr(e.pool.typ, e.pool.state, llI32(0), llI32(k), llI32(0))
}

func (e *runtimeEmitter) atomicLoad(b *lir.Block, p value.Value, ord enum.AtomicOrdering, name string) *lir.InstLoad {
	l := named(b.NewLoad(types.I32, p), name)
	l.Atomic, l.Ordering, l.Align = true, ord, 4
	return l
}

func (e *runtimeEmitter) atomicStore(b *lir.Block, v, p value.Value, ord enum.AtomicOrdering) {
	s := b.NewStore(v, p)
	s.Atomic, s.Ordering, s.Align = true, ord, 4
}

func (e *runtimeEmitter) lock(b *lir.Block) {
	b.NewCall(e.decl("pthread_mutex_lock", types.I32, i8p), e.poolSync(b, 10))
}

func (e *runtimeEmitter) unlock(b *lir.Block) {
	b.NewCall(e.decl("pthread_mutex_unlock", types.I32, i8p), e.poolSync(b, 10))
}

func (e *runtimeEmitter) broadcast(b *lir.Block, k int64) {
	b.NewCall(e.decl("pthread_cond_broadcast", types.I32, i8p), e.poolSync(b, k))
}

func (e *runtimeEmitter) condWait(b *lir.Block, k int64) {
	b.NewCall(e.decl("pthread_cond_wait", types.I32, i8p, i8p), e.poolSync(b, k), e.poolSync(b, 10))
}

// pause is the spin-wait hint: x86's pause, aarch64's yield.
func (e *runtimeEmitter) pause(b *lir.Block) {
	if strings.HasPrefix(e.arch.Triple, "x86_64") {
		b.NewCall(e.decl("llvm.x86.sse2.pause", types.Void))
		return
	}
	b.NewCall(e.decl("llvm.aarch64.hint", types.Void, types.I32), llI32(1))
}

// spinUntil builds, from block from, a loop of at most limit pauses that
// leaves to done as soon as ready (built in the loop's block by cond)
// holds, and to out after limit pauses (one at least); every
// poolYieldEvery pauses it yields the CPU.
func (e *runtimeEmitter) spinUntil(f *lir.Func, from *lir.Block, limit value.Value, name string,
	cond func(b *lir.Block) value.Value, done, out *lir.Block) {
	head := f.NewBlock(name + ".spin")
	step := f.NewBlock(name + ".pause")
	from.NewBr(head)
	k := named(lir.NewPhi(lir.NewIncoming(llI32(0), from)), name+".k")
	k.Type()
	head.Insts = append(head.Insts, k)
	ok := cond(head)
	more := named(head.NewICmp(enum.IPredSLT, k, limit), name+".more")
	head.NewCondBr(ok, done, step)
	e.pause(step)
	k1 := named(step.NewAdd(k, llI32(1)), name+".k1")
	low := named(step.NewAnd(k1, llI32(poolYieldEvery-1)), name+".low")
	due := named(step.NewICmp(enum.IPredEQ, low, llI32(0)), name+".due")
	yield := f.NewBlock(name + ".yield")
	next := f.NewBlock(name + ".next")
	step.NewCondBr(due, yield, next)
	yield.NewCall(e.decl("sched_yield", types.I32))
	yield.NewBr(next)
	k.Incs = append(k.Incs, lir.NewIncoming(k1, next))
	next.NewCondBr(more, head, out)
}

// claimPool emits busy's compare-and-swap 0 → 1 (acquire) in b and
// returns whether it succeeded.
func (e *runtimeEmitter) claimPool(b *lir.Block) value.Value {
	x := named(b.NewCmpXchg(e.poolField(b, 0), llI32(0), llI32(1),
		enum.AtomicOrderingAcquire, enum.AtomicOrderingMonotonic), "x")
	return named(b.NewExtractValue(x, 1), "got")
}

// samePid emits getpid() == the pool's pid in b.
func (e *runtimeEmitter) samePid(b *lir.Block) value.Value {
	pid := named(b.NewCall(e.decl("getpid", types.I32)), "pid")
	old := named(b.NewLoad(types.I32, e.poolField(b, 1)), "old")
	return named(b.NewICmp(enum.IPredEQ, pid, old), "same")
}

// definePoolTake: claim the pool (busy 0 → 1) or return 0. The first
// claim reads the online CPUs. A pool with workers made in another process
// (before a fork: the child has none of them) is reset: no workers, fresh
// mutex and condition variables. Without workers there is nothing to check
// (no getpid).
func (e *runtimeEmitter) definePoolTake() {
	f := e.pool.take
	entry := f.NewBlock("entry")
	mine := f.NewBlock("mine")
	first := f.NewBlock("first")
	known := f.NewBlock("known")
	check := f.NewBlock("check")
	reset := f.NewBlock("reset")
	ready := f.NewBlock("ready")
	busy := f.NewBlock("busy")
	got := e.claimPool(entry)
	entry.NewCondBr(got, mine, busy)
	busy.NewRet(llI32(0))
	c := named(mine.NewLoad(types.I32, e.poolField(mine, 2)), "c")
	unknown := named(mine.NewICmp(enum.IPredEQ, c, llI32(0)), "unknown")
	mine.NewCondBr(unknown, first, known)
	first.NewStore(named(first.NewCall(e.onlineCPUs), "online"), e.poolField(first, 2))
	first.NewBr(known)
	w := named(known.NewLoad(types.I32, e.poolField(known, 3)), "w")
	some := named(known.NewICmp(enum.IPredSGT, w, llI32(0)), "some")
	known.NewCondBr(some, check, ready)
	same := e.samePid(check)
	check.NewCondBr(same, ready, reset)
	memset := e.decl("llvm.memset.p0i8.i64", types.Void, i8p, types.I8, types.I64, types.I1)
	for _, k := range []int64{10, 11, 12} {
		reset.NewCall(memset, e.poolSync(reset, k), constant.NewInt(types.I8, 0), llI64(64), constant.False)
	}
	reset.NewStore(llI32(0), e.poolField(reset, 3))
	reset.NewBr(ready)
	ready.NewRet(named(ready.NewLoad(types.I32, e.poolField(ready, 2)), "cpus"))
}

// definePoolRun: with the pool held, start workers up to nw (keeping those
// that started when pthread_create fails), publish state arg to
// min(nw, workers) of them, run the worker loop in the calling thread,
// wait for them, and release the pool.
func (e *runtimeEmitter) definePoolRun() {
	f := e.pool.run
	arg, nw, t := f.Params[0], f.Params[1], f.Params[2]
	entry := f.NewBlock("entry")
	growCond := f.NewBlock("grow.cond")
	growBody := f.NewBlock("grow.body")
	growNext := f.NewBlock("grow.next")
	grown := f.NewBlock("grown")
	publish := f.NewBlock("publish")
	solo := f.NewBlock("solo")
	wait := f.NewBlock("wait")
	sleep := f.NewBlock("sleep")
	sleepWait := f.NewBlock("sleep.wait")
	woke := f.NewBlock("woke")
	release := f.NewBlock("release")

	have := named(entry.NewLoad(types.I32, e.poolField(entry, 3)), "have")
	gen0 := named(entry.NewLoad(types.I32, e.poolField(entry, 4)), "gen0")
	// The first workers' process: pool_take resets a pool whose workers
	// belong to another.
	none := named(entry.NewICmp(enum.IPredEQ, have, llI32(0)), "none")
	wanted := named(entry.NewICmp(enum.IPredSGT, nw, llI32(0)), "wanted")
	starting := named(entry.NewAnd(none, wanted), "starting")
	stamp := f.NewBlock("stamp")
	entry.NewCondBr(starting, stamp, growCond)
	stamp.NewStore(named(stamp.NewCall(e.decl("getpid", types.I32)), "pid"), e.poolField(stamp, 1))
	stamp.NewBr(growCond)
	k := named(lir.NewPhi(lir.NewIncoming(have, entry), lir.NewIncoming(have, stamp)), "k")
	k.Type()
	growCond.Insts = append(growCond.Insts, k)
	kmore := named(growCond.NewICmp(enum.IPredSLT, k, nw), "kmore")
	growCond.NewCondBr(kmore, growBody, grown)
	// The new worker's argument: the generation it has seen (the current
	// one, not yet published over).
	slot := named(growBody.NewGetElementPtr(e.pool.typ, e.pool.state, llI32(0), llI32(13), k), "slot")
	g64 := named(growBody.NewZExt(gen0, types.I64), "g64")
	warg := named(growBody.NewIntToPtr(g64, i8p), "warg")
	create := e.decl("pthread_create", types.I32, types.NewPointer(types.I64), i8p,
		types.NewPointer(types.NewFunc(i8p, i8p)), i8p)
	rc := named(growBody.NewCall(create, slot, constant.NewNull(i8p), e.pool.main, warg), "rc")
	created := named(growBody.NewICmp(enum.IPredEQ, rc, llI32(0)), "created")
	growBody.NewCondBr(created, growNext, grown)
	k1 := named(growNext.NewAdd(k, llI32(1)), "k1")
	growNext.NewBr(growCond)
	k.Incs = append(k.Incs, lir.NewIncoming(k1, growNext))

	workers := named(lir.NewPhi(lir.NewIncoming(k, growCond), lir.NewIncoming(k, growBody)), "workers")
	workers.Type()
	grown.Insts = append(grown.Insts, workers)
	grown.NewStore(workers, e.poolField(grown, 3))
	few := named(grown.NewICmp(enum.IPredSLT, workers, nw), "few")
	want := named(grown.NewSelect(few, workers, nw), "want")
	any := named(grown.NewICmp(enum.IPredSGT, want, llI32(0)), "any")
	grown.NewCondBr(any, publish, solo)
	solo.NewCall(e.worker, arg)
	solo.NewBr(release)

	cpus := named(publish.NewLoad(types.I32, e.poolField(publish, 2)), "cpus")
	fits := named(publish.NewICmp(enum.IPredSLE, t, cpus), "fits")
	spin := named(publish.NewSelect(fits, llI32(poolSpins), llI32(0)), "spin")
	e.lock(publish)
	publish.NewStore(arg, e.poolField(publish, 9))
	publish.NewStore(want, e.poolField(publish, 5))
	e.atomicStore(publish, want, e.poolField(publish, 6), enum.AtomicOrderingMonotonic)
	e.atomicStore(publish, spin, e.poolField(publish, 8), enum.AtomicOrderingMonotonic)
	gen1 := named(publish.NewAdd(gen0, llI32(1)), "gen1")
	e.atomicStore(publish, gen1, e.poolField(publish, 4), enum.AtomicOrderingRelease)
	e.broadcast(publish, 11)
	e.unlock(publish)
	publish.NewCall(e.worker, arg)
	// Every item is taken: close the open places and count them off.
	e.lock(publish)
	left := named(publish.NewLoad(types.I32, e.poolField(publish, 5)), "left.open")
	publish.NewStore(llI32(0), e.poolField(publish, 5))
	e.unlock(publish)
	publish.NewAtomicRMW(enum.AtomicOpSub, e.poolField(publish, 6), left, enum.AtomicOrderingAcquireRelease)
	publish.NewBr(wait)

	// Wait for pending = 0: spin, then sleep on done.
	e.spinUntil(f, wait, spin, "wait", func(b *lir.Block) value.Value {
		p := e.atomicLoad(b, e.poolField(b, 6), enum.AtomicOrderingAcquire, "pending")
		return named(b.NewICmp(enum.IPredEQ, p, llI32(0)), "finished")
	}, release, sleep)
	e.lock(sleep)
	sleep.NewBr(sleepWait)
	p := e.atomicLoad(sleepWait, e.poolField(sleepWait, 6), enum.AtomicOrderingAcquire, "left")
	allDone := named(sleepWait.NewICmp(enum.IPredEQ, p, llI32(0)), "all.done")
	sleepBody := f.NewBlock("sleep.body")
	sleepWait.NewCondBr(allDone, woke, sleepBody)
	e.condWait(sleepBody, 12)
	sleepBody.NewBr(sleepWait)
	e.unlock(woke)
	woke.NewBr(release)
	e.atomicStore(release, llI32(0), e.poolField(release, 0), enum.AtomicOrderingRelease)
	release.NewRet(nil)
}

// definePoolMain: a worker thread. Its argument is the generation it has
// seen. Loop: wait (spin, then sleep on wake) for a generation other than
// the one seen or for stop; under the mutex read the generation and the
// call's state, and take one of its open places if any is left; exit on
// stop; with a place, run the worker loop on the state and count pending
// down, waking the caller when it reaches 0.
func (e *runtimeEmitter) definePoolMain() {
	f := e.pool.main
	entry := f.NewBlock("entry")
	loop := f.NewBlock("loop")
	locked := f.NewBlock("locked")
	check := f.NewBlock("check")
	sleep := f.NewBlock("sleep")
	take := f.NewBlock("take")
	exit := f.NewBlock("exit")
	run := f.NewBlock("run")
	last := f.NewBlock("last")

	g64 := named(entry.NewPtrToInt(f.Params[0], types.I64), "g64")
	gen0 := named(entry.NewTrunc(g64, types.I32), "gen0")
	spin0 := e.atomicLoad(entry, e.poolField(entry, 8), enum.AtomicOrderingMonotonic, "spin0")
	entry.NewBr(loop)

	seen := named(lir.NewPhi(lir.NewIncoming(gen0, entry)), "seen")
	seen.Type()
	spin := named(lir.NewPhi(lir.NewIncoming(spin0, entry)), "spin")
	spin.Type()
	loop.Insts = append(loop.Insts, seen, spin)
	spinFrom := f.NewBlock("spin.from")
	loop.NewBr(spinFrom)
	e.spinUntil(f, spinFrom, spin, "idle", func(b *lir.Block) value.Value {
		g := e.atomicLoad(b, e.poolField(b, 4), enum.AtomicOrderingAcquire, "gen")
		return named(b.NewICmp(enum.IPredNE, g, seen), "new")
	}, locked, locked)
	e.lock(locked)
	locked.NewBr(check)
	g := e.atomicLoad(check, e.poolField(check, 4), enum.AtomicOrderingMonotonic, "g")
	stop := named(check.NewLoad(types.I32, e.poolField(check, 7)), "stop")
	isNew := named(check.NewICmp(enum.IPredNE, g, seen), "is.new")
	stopping := named(check.NewICmp(enum.IPredNE, stop, llI32(0)), "stopping")
	wake := named(check.NewOr(isNew, stopping), "wake")
	check.NewCondBr(wake, take, sleep)
	e.condWait(sleep, 11)
	sleep.NewBr(check)

	job := named(take.NewLoad(i8p, e.poolField(take, 9)), "job")
	open := named(take.NewLoad(types.I32, e.poolField(take, 5)), "open")
	spinNext := e.atomicLoad(take, e.poolField(take, 8), enum.AtomicOrderingMonotonic, "spin.next")
	// A place is left only in the generation just read: the caller
	// closes them (under the mutex) before it returns.
	mineJob := named(take.NewICmp(enum.IPredSGT, open, llI32(0)), "mine")
	open1 := named(take.NewSub(open, llI32(1)), "open1")
	openNext := named(take.NewSelect(mineJob, open1, open), "open.next")
	take.NewStore(openNext, e.poolField(take, 5))
	e.unlock(take)
	runOrLoop := f.NewBlock("dispatch")
	take.NewCondBr(stopping, exit, runOrLoop)
	runOrLoop.NewCondBr(mineJob, run, loop)
	exit.NewRet(constant.NewNull(i8p))

	run.NewCall(e.worker, job)
	old := named(run.NewAtomicRMW(enum.AtomicOpSub, e.poolField(run, 6), llI32(1), enum.AtomicOrderingAcquireRelease), "old")
	isLast := named(run.NewICmp(enum.IPredEQ, old, llI32(1)), "is.last")
	run.NewCondBr(isLast, last, loop)
	e.lock(last)
	e.broadcast(last, 12)
	e.unlock(last)
	last.NewBr(loop)
	seen.Incs = append(seen.Incs, lir.NewIncoming(g, runOrLoop), lir.NewIncoming(g, run), lir.NewIncoming(g, last))
	spin.Incs = append(spin.Incs, lir.NewIncoming(spinNext, runOrLoop), lir.NewIncoming(spinNext, run), lir.NewIncoming(spinNext, last))
}

// definePoolFini: when no call holds the pool and its threads belong to
// this process, ask them to stop, wake them and join them. The pool stays
// held afterwards, so a kernel called later (from another destructor)
// starts and joins its own threads.
func (e *runtimeEmitter) definePoolFini() {
	f := e.pool.fini
	entry := f.NewBlock("entry")
	mine := f.NewBlock("mine")
	stop := f.NewBlock("stop")
	joinCond := f.NewBlock("join.cond")
	joinBody := f.NewBlock("join.body")
	done := f.NewBlock("done")
	got := e.claimPool(entry)
	entry.NewCondBr(got, mine, done)
	same := e.samePid(mine)
	w := named(mine.NewLoad(types.I32, e.poolField(mine, 3)), "w")
	some := named(mine.NewICmp(enum.IPredSGT, w, llI32(0)), "some")
	both := named(mine.NewAnd(same, some), "both")
	mine.NewCondBr(both, stop, done)
	e.lock(stop)
	stop.NewStore(llI32(1), e.poolField(stop, 7))
	gen := named(stop.NewLoad(types.I32, e.poolField(stop, 4)), "gen")
	gen1 := named(stop.NewAdd(gen, llI32(1)), "gen1")
	e.atomicStore(stop, gen1, e.poolField(stop, 4), enum.AtomicOrderingRelease)
	e.broadcast(stop, 11)
	e.unlock(stop)
	e.joinThreads(stop, joinCond, joinBody, done, w, func(b *lir.Block, j value.Value) value.Value {
		return named(b.NewGetElementPtr(e.pool.typ, e.pool.state, llI32(0), llI32(13), j), "slot")
	})
	done.NewRet(nil)
}
