package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/attnc/attnc/cpurt"
)

// fmaAccs is the number of independent FMA chains for a level: enough to
// cover FMA latency times FMA pipes (4 x 2 on current x86 cores needs 8)
// with room to spare, while the chains and the two operands stay in
// registers.
func fmaAccs(l Level) int {
	if l.Regs >= 32 {
		return 24
	}
	return 12
}

// yardLib is the yardstick library built for one vector level.
type yardLib struct {
	level Level
	accs  int
	lib   *cpurt.Lib
}

// buildYardLib writes the yardstick IR for l into dir and compiles it with
// opt -O3 and llc -O3 at -mcpu=l.MCPU.
func buildYardLib(l Level, dir string) (*yardLib, error) {
	accs := fmaAccs(l)
	ll := filepath.Join(dir, "yardstick-"+l.MCPU+".ll")
	if err := os.WriteFile(ll, []byte(yardstickIR(l, accs)), 0o644); err != nil {
		return nil, err
	}
	so := filepath.Join(dir, "yardstick-"+l.MCPU+".so")
	if err := cpurt.BuildSharedFor(ll, so, []string{"-mcpu=" + l.MCPU}); err != nil {
		return nil, err
	}
	lib, err := cpurt.Open(so)
	if err != nil {
		return nil, err
	}
	return &yardLib{level: l, accs: accs, lib: lib}, nil
}

func (y *yardLib) close() { y.lib.Close() }

// onThreads runs f(0) .. f(n-1) at once, each on its own locked OS thread,
// and returns the wall time from their common release to the last return
// and the threads' mean CPU time (time they ran, not time they waited for
// a core; 0 where the thread CPU clock is not read).
func onThreads(n int, f func(t int) error) (wall, cpu float64, err error) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, n)
	cpus := make([]float64, n)
	ready.Add(n)
	done.Add(n)
	for t := range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ready.Done()
			<-start
			c0 := threadCPU()
			errs[t] = f(t)
			cpus[t] = threadCPU() - c0
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	done.Wait()
	wall = time.Since(t0).Seconds()
	for _, c := range cpus {
		cpu += c / float64(n)
	}
	return wall, cpu, errors.Join(errs...)
}

// slots is one cache line per thread for the yardsticks' results.
type slots struct{ b *cpurt.Buffer }

func newSlots(n int) slots        { return slots{cpurt.NewBuffer(64 * n)} }
func (s slots) ptr(t int) int64   { return s.b.Ptr() + int64(64*t) }
func (s slots) i64(t int) int64   { return int64(le64(s.b.U8()[64*t:])) }
func (s slots) f32(t int) float32 { return math.Float32frombits(uint32(le64(s.b.U8()[64*t:]))) }
func (s slots) free()             { s.b.Free() }
func le64(b []byte) uint64        { return *(*uint64)(unsafe.Pointer(&b[0])) }
func wordsOf(b *cpurt.Buffer) []int64 {
	return unsafe.Slice((*int64)(unsafe.Pointer(&b.U8()[0])), b.Len()/8)
}

// readBuffer is a buffer the read yardsticks scan: n bytes of nonzero
// words (no shared zero pages), with each thread's share and its expected
// sum, so that a run that skipped bytes is caught.
type readBuffer struct {
	buf     *cpurt.Buffer
	threads int
	chunk   int64   // bytes each thread reads (a multiple of the read step)
	want    []int64 // each thread's wrapping word sum
}

// newReadBuffer maps n bytes (rounded down to whole read steps per
// thread) and fills them on threads goroutines.
func newReadBuffer(n int64, threads int, step int) (*readBuffer, error) {
	chunk := n / int64(threads) / int64(step) * int64(step)
	if chunk <= 0 {
		return nil, fmt.Errorf("a %d-byte buffer is less than one %d-byte step per thread", n, step)
	}
	rb := &readBuffer{buf: cpurt.NewBuffer(int(chunk) * threads), threads: threads, chunk: chunk, want: make([]int64, threads)}
	words := wordsOf(rb.buf)
	per := int(chunk / 8)
	onThreads(threads, func(t int) error {
		var sum int64
		for i := t * per; i < (t+1)*per; i++ {
			w := int64(uint64(i+1) * 0x9E3779B97F4A7C15)
			words[i] = w
			sum += w
		}
		rb.want[t] = sum
		return nil
	})
	return rb, nil
}

func (rb *readBuffer) bytes() int64 { return rb.chunk * int64(rb.threads) }

func (rb *readBuffer) free() { rb.buf.Free() }

// read scans the buffer once, each thread its share, and checks every
// thread's sum.
func (y *yardLib) read(rb *readBuffer, out slots) (float64, error) {
	sec, _, err := onThreads(rb.threads, func(t int) error {
		return y.lib.CallVoid("yard_read", rb.buf.Ptr()+int64(t)*rb.chunk, rb.chunk, out.ptr(t))
	})
	if err != nil {
		return 0, err
	}
	for t := range rb.threads {
		if got := out.i64(t); got != rb.want[t] {
			return 0, fmt.Errorf("stream read: thread %d summed %#x, want %#x", t, got, rb.want[t])
		}
	}
	return sec, nil
}

// blockOrder is an order of a read buffer's blocks, split between the
// threads, with the sum each thread's blocks must give.
type blockOrder struct {
	block   int64
	offsets *cpurt.Buffer // i64 byte offsets into the buffer
	bounds  []int         // thread t reads offsets [bounds[t], bounds[t+1])
	want    []int64
}

// newBlockOrder cuts rb into blocks of block bytes (a multiple of the read
// step) and shuffles them; seed < 0 keeps them in address order (with
// blocks dividing the threads' shares, each thread reads its own share
// front to back).
func newBlockOrder(rb *readBuffer, block int64, seed int64) (*blockOrder, error) {
	total := rb.bytes()
	n := int(total / block)
	if n < rb.threads {
		return nil, fmt.Errorf("%d-byte blocks: fewer than one per thread in %d bytes", block, total)
	}
	bo := &blockOrder{block: block, offsets: cpurt.NewBuffer(8 * n), want: make([]int64, rb.threads)}
	offs := wordsOf(bo.offsets)
	for i := range offs {
		offs[i] = int64(i) * block
	}
	if seed >= 0 {
		for i, p := range rand.New(rand.NewSource(seed)).Perm(n) {
			offs[i] = int64(p) * block
		}
	}
	words := wordsOf(rb.buf)
	for t := range rb.threads {
		lo, hi := t*n/rb.threads, (t+1)*n/rb.threads
		bo.bounds = append(bo.bounds, lo)
		for _, off := range offs[lo:hi] {
			for _, w := range words[off/8 : (off+block)/8] {
				bo.want[t] += w
			}
		}
	}
	bo.bounds = append(bo.bounds, n)
	return bo, nil
}

func (bo *blockOrder) bytes() int64 { return int64(bo.bounds[len(bo.bounds)-1]) * bo.block }

func (bo *blockOrder) free() { bo.offsets.Free() }

// readBlocks reads every block once in the shuffled order, each thread its
// share, and checks every thread's sum.
func (y *yardLib) readBlocks(rb *readBuffer, bo *blockOrder, ahead int, out slots) (float64, error) {
	sec, _, err := onThreads(rb.threads, func(t int) error {
		lo, hi := bo.bounds[t], bo.bounds[t+1]
		return y.lib.CallVoid("yard_read_blocks", rb.buf.Ptr(), bo.offsets.Ptr()+8*int64(lo), int64(hi-lo), bo.block, int64(ahead), out.ptr(t))
	})
	if err != nil {
		return 0, err
	}
	for t := range rb.threads {
		if got := out.i64(t); got != bo.want[t] {
			return 0, fmt.Errorf("scattered read: thread %d summed %#x, want %#x", t, got, bo.want[t])
		}
	}
	return sec, nil
}

// fmaParams is {a, b} of acc = acc*a + b: the chains converge to b/(1-a)
// = 1 and stay finite for any number of iterations.
var fmaParams = [2]float32{0.999, 0.001}

// fma runs iters iterations of the FMA chains on threads threads, checks
// that every result is finite and returns the wall and mean thread CPU
// seconds.
func (y *yardLib) fma(threads int, iters int64, params *cpurt.Buffer, out slots) (wall, cpu float64, err error) {
	wall, cpu, err = onThreads(threads, func(t int) error {
		return y.lib.CallVoid("yard_fma", iters, params.Ptr(), out.ptr(t))
	})
	if err != nil {
		return 0, 0, err
	}
	for t := range threads {
		if x := out.f32(t); math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return 0, 0, fmt.Errorf("fma: thread %d ended with %v", t, x)
		}
	}
	return wall, cpu, nil
}

// fmaFlops is the work of one yard_fma call per thread: 2 flops per lane
// per chain per iteration.
func (y *yardLib) fmaFlops(iters int64) float64 {
	return 2 * float64(y.level.VectorBytes/4) * float64(y.accs) * float64(iters)
}

// clockMul is the multiplier of the clock chains: odd, so that the
// multiply chain's product never collapses to zero.
const clockMul = int64(-7046029254386353131) // 0x9E3779B97F4A7C15

// clock runs iters iterations of the dependent multiply chain (fn
// "yard_clock") or add chain ("yard_clock_add") on threads threads, checks
// every thread's result and returns the wall and mean thread CPU seconds.
func (y *yardLib) clock(fn string, threads int, iters int64, out slots) (wall, cpu float64, err error) {
	wall, cpu, err = onThreads(threads, func(t int) error {
		return y.lib.CallVoid(fn, iters, int64(t+1), clockMul, out.ptr(t))
	})
	if err != nil {
		return 0, 0, err
	}
	for t := range threads {
		if got, want := out.i64(t), clockWant(fn, int64(t+1), iters*clockOps); got != want {
			return 0, 0, fmt.Errorf("clock %s: thread %d ended with %#x, want %#x", fn, t, got, want)
		}
	}
	return wall, cpu, nil
}

// clockWant is what n steps of the chain fn give from x: x*clockMul^n or
// x + n*clockMul, wrapping.
func clockWant(fn string, x, n int64) int64 {
	if fn == "yard_clock_add" {
		return x + n*clockMul
	}
	m := clockMul
	r, b := uint64(x), uint64(m)
	for ; n > 0; n >>= 1 {
		if n&1 == 1 {
			r *= b
		}
		b *= b
	}
	return int64(r)
}

// calibrate returns the iteration count that makes run take about target
// seconds, starting from iters0 and growing until a run takes at least
// a millisecond (so that the estimate is not timer noise).
func calibrate(iters0 int64, target float64, run func(iters int64) (float64, error)) (int64, error) {
	iters := iters0
	for {
		sec, err := run(iters)
		if err != nil {
			return 0, err
		}
		if sec >= 1e-3 || iters >= 1<<40 {
			return max(1, int64(float64(iters)*target/max(sec, 1e-9))), nil
		}
		iters *= 8
	}
}

// YardOptions are the machine yardsticks' settings.
type YardOptions struct {
	Threads     int    // threads of each yardstick (the kernels' count)
	StreamBytes int64  // read buffer size; 0: max(1 GiB, 8 x LLC), reduced to half the available memory
	BlockBytes  int64  // scattered read block (default 32 KiB: one 16-token page of 8 KV heads x 128 16-bit values)
	Budget      Budget // repetitions of each yardstick
	Seed        int64  // block order
	Dir         string // where the yardstick libraries are built
	Machine     *Machine
}

// Yardsticks are the machine's limits measured in the same run as the
// kernels, on the same thread count.
type Yardsticks struct {
	Threads     int     `json:"threads"`
	ReadLevel   Level   `json:"read_level"`   // the level the read loops are compiled for (the widest)
	StreamBytes int64   `json:"stream_bytes"` // read buffer size
	StreamNote  string  `json:"stream_note,omitempty"`
	Read        Measure `json:"read"` // contiguous read of StreamBytes: GB/s
	// ReadPrefetch reads the same bytes front to back in BlockBytes
	// blocks, each block's loads prefetching the next block: GB/s. (The
	// ratios stay against Read, the classic STREAM-style read.)
	ReadPrefetch Measure `json:"read_prefetch"`
	BlockBytes   int64   `json:"block_bytes"`
	Blocks       Measure `json:"blocks"` // the same bytes in BlockBytes blocks in a random order: GB/s
	// BlocksPrefetch reads the blocks in the same order, each block's loads
	// prefetching the next block (the hardware prefetchers do not cross
	// 4 KiB pages, and scattered pages defeat them): GB/s.
	BlocksPrefetch Measure `json:"blocks_prefetch"`
	// FMA is the fp32 FMA throughput at every level with fused
	// multiply-add (fmaLevels), widest first.
	FMA []FMAResult `json:"fma"`
	// Clock is the core clock from a chain of dependent 64-bit integer
	// multiplies on every thread (mulLatency cycles each on every x86-64
	// core since Nehalem and K10, Zen 5 and Golden Cove included; no core
	// eliminates or folds one), over each thread's CPU time (so that time
	// waiting for a core on a loaded machine does not count): cycles per
	// thread per second, in GHz (x86-64 on Linux only; no samples
	// elsewhere).
	Clock Measure `json:"clock"`
	// ClockAdds is the same from a chain of dependent register-to-register
	// adds (1 cycle each where no add is eliminated): adds per thread per
	// second, in GHz. It checks Clock: where the two disagree (ClockAgrees)
	// one of the chains does not run at its nominal latency on this core,
	// and the bench reports no clock and no flop/cycle rather than a wrong
	// one.
	ClockAdds Measure `json:"clock_adds"`
	// Summary holds the medians the ratios use.
	Summary YardSummary `json:"summary"`
}

// YardSummary is the yardsticks' medians.
type YardSummary struct {
	ReadGBps           float64 `json:"stream_read_gbps"`
	ReadPrefetchGBps   float64 `json:"stream_read_prefetch_gbps"`
	BlocksGBps         float64 `json:"scattered_read_gbps"`
	BlocksPrefetchGBps float64 `json:"scattered_read_prefetch_gbps"`
	FMAPeakGFLOPS      float64 `json:"fma_peak_gflops"`
	FMAPeakMCPU        string  `json:"fma_peak_mcpu"`
	ClockGHz           float64 `json:"clock_ghz,omitempty"`                  // Clock's median, when ClockAgrees
	FlopsPerCycle      float64 `json:"flops_per_cycle_per_thread,omitempty"` // best over best (FlopsPerCycle)
}

// FMAResult is one level's FMA loop: Chains independent accumulators of
// VectorBytes/4 lanes, Iters iterations per thread per repetition.
type FMAResult struct {
	Level  Level   `json:"level"`
	Chains int     `json:"chains"`
	Iters  int64   `json:"iters"`
	M      Measure `json:"m"` // flops on all threads over wall time: GFLOP/s
	// CPU is one thread's flops over its mean CPU time (no time waiting
	// for a core): GFLOP/s per thread, for FlopsPerCycle.
	CPU Measure `json:"cpu"`
}

// Peak is the best level's FMA result (by median rate).
func (y *Yardsticks) Peak() *FMAResult {
	var best *FMAResult
	for i := range y.FMA {
		if best == nil || y.FMA[i].M.Rate().Median > best.M.Rate().Median {
			best = &y.FMA[i]
		}
	}
	return best
}

// clockTolerance is how far the multiply and add chains' clocks may differ
// (as a ratio) and still agree: a core that ran either at another latency
// than its nominal one (an add eliminated at rename, a 4- or 5-cycle
// multiply) is off by a factor of 4/3 or more.
const clockTolerance = 0.1

// ClockAgrees reports whether the multiply chain's and the add chain's
// clocks agree, fastest against fastest, within clockTolerance: the clock
// is reported only then.
func (y *Yardsticks) ClockAgrees() bool {
	return clockAgrees(y.Clock.Rate().Max, y.ClockAdds.Rate().Max)
}

func clockAgrees(mul, add float64) bool {
	return mul > 0 && add > 0 && math.Abs(mul/add-1) <= clockTolerance
}

// FlopsPerCycle is the peak level's flops per cycle per thread: its best
// per-thread rate over CPU time at the best measured clock (0 without a
// clock). Best of both: other load, a hypervisor's steal time or an
// interrupt only ever slow a repetition down, and medians measured at
// different moments of a loaded machine do not divide cleanly.
func (y *Yardsticks) FlopsPerCycle() float64 {
	p, c := y.Peak(), y.Clock.Rate().Max
	if p == nil || c == 0 || !y.ClockAgrees() {
		return 0
	}
	return p.CPU.Rate().Max / c
}

// streamBytes picks the read buffer size: max(1 GiB, 8 x LLC), at most
// half the available memory.
func streamBytes(m *Machine) (int64, string) {
	want := max(int64(1)<<30, 8*m.LLCBytes)
	if m.MemAvail > 0 && want > m.MemAvail/2 {
		got := m.MemAvail / 2 >> 20 << 20
		return got, fmt.Sprintf("reduced from %d MiB to half the available memory", want>>20)
	}
	return want, ""
}

// fmaLevels are the levels whose FMA throughput is measured: those with
// fused multiply-add (a level without it, x86-64's SSE2, runs separate
// multiplies and adds, which is not what kernels run on an FMA machine),
// or the best level when none has it.
func fmaLevels(levels []Level) []Level {
	var ls []Level
	for _, l := range levels {
		if l.FMA || !levels[0].FMA {
			ls = append(ls, l)
		}
	}
	return ls
}

// MeasureYardsticks builds the yardstick libraries and measures the read
// bandwidth (contiguous and in random blocks, with the widest loads), the
// FMA throughput at every level with FMA and the clock, each o.Budget
// times on o.Threads threads.
func MeasureYardsticks(o YardOptions) (*Yardsticks, error) {
	y, lib, err := measureYardsticks(o)
	if lib != nil {
		lib.close()
	}
	return y, err
}

// measureYardsticks is MeasureYardsticks, which also returns the library
// of the read level (the paged-read scans run it), open; nil on error.
func measureYardsticks(o YardOptions) (_ *Yardsticks, readLib *yardLib, _ error) {
	m := o.Machine
	if m == nil {
		m = ReadMachine()
	}
	if o.Threads < 1 {
		return nil, nil, fmt.Errorf("bench: yardsticks need at least one thread")
	}
	levels := m.Levels()
	if len(levels) == 0 {
		return nil, nil, fmt.Errorf("bench: no vector level for this machine")
	}
	y := &Yardsticks{Threads: o.Threads, ReadLevel: levels[0], BlockBytes: o.BlockBytes, StreamBytes: o.StreamBytes}
	if y.BlockBytes == 0 {
		y.BlockBytes = 32 << 10
	}
	if y.StreamBytes == 0 {
		y.StreamBytes, y.StreamNote = streamBytes(m)
	}
	if m.MemAvail > 0 && y.StreamBytes > m.MemAvail*3/4 {
		return nil, nil, fmt.Errorf("bench: a %d MiB stream read buffer does not fit in 3/4 of the %d MiB of available memory", y.StreamBytes>>20, m.MemAvail>>20)
	}
	libs := make([]*yardLib, 0, len(levels))
	defer func() {
		for _, l := range libs {
			if l != readLib {
				l.close()
			}
		}
	}()
	for _, l := range fmaLevels(levels) {
		lib, err := buildYardLib(l, o.Dir)
		if err != nil {
			return nil, nil, fmt.Errorf("bench: yardstick %s: %w", l.MCPU, err)
		}
		libs = append(libs, lib)
	}
	out := newSlots(o.Threads)
	defer out.free()

	// Reads, with the widest level's loads.
	step := readUnroll * levels[0].VectorBytes
	if y.BlockBytes%int64(step) != 0 || y.BlockBytes <= 0 {
		return nil, nil, fmt.Errorf("bench: scattered read block of %d bytes is not a multiple of %d", y.BlockBytes, step)
	}
	rb, err := newReadBuffer(y.StreamBytes/y.BlockBytes*y.BlockBytes, o.Threads, int(y.BlockBytes))
	if err != nil {
		return nil, nil, fmt.Errorf("bench: stream read: %w", err)
	}
	defer rb.free()
	y.StreamBytes = rb.bytes()
	if _, err := libs[0].read(rb, out); err != nil { // warm-up
		return nil, nil, err
	}
	y.Read.Amount = float64(rb.bytes())
	if y.Read.Seconds, err = o.Budget.repeat(func(int) (float64, error) { return libs[0].read(rb, out) }); err != nil {
		return nil, nil, err
	}
	seq, err := newBlockOrder(rb, y.BlockBytes, -1)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: stream read: %w", err)
	}
	defer seq.free()
	y.ReadPrefetch.Amount = float64(seq.bytes())
	if y.ReadPrefetch.Seconds, err = o.Budget.repeat(func(int) (float64, error) { return libs[0].readBlocks(rb, seq, 1, out) }); err != nil {
		return nil, nil, err
	}
	bo, err := newBlockOrder(rb, y.BlockBytes, max(o.Seed, 0))
	if err != nil {
		return nil, nil, fmt.Errorf("bench: scattered read: %w", err)
	}
	defer bo.free()
	y.Blocks.Amount = float64(bo.bytes())
	if y.Blocks.Seconds, err = o.Budget.repeat(func(int) (float64, error) { return libs[0].readBlocks(rb, bo, 0, out) }); err != nil {
		return nil, nil, err
	}
	y.BlocksPrefetch.Amount = y.Blocks.Amount
	if y.BlocksPrefetch.Seconds, err = o.Budget.repeat(func(int) (float64, error) { return libs[0].readBlocks(rb, bo, 1, out) }); err != nil {
		return nil, nil, err
	}

	// FMA at every level built; each repetition runs about 50 ms (less
	// when the budget is small).
	target := 0.05
	if o.Budget.Reps == 0 {
		target = min(target, max(o.Budget.Seconds/MinReps, 0.002))
	}
	params := cpurt.F32Buffer(fmaParams[:])
	defer params.Free()
	for _, lib := range libs {
		iters, err := calibrate(1<<12, target, func(n int64) (float64, error) {
			wall, _, err := lib.fma(o.Threads, n, params, out)
			return wall, err
		})
		if err != nil {
			return nil, nil, err
		}
		r := FMAResult{Level: lib.level, Chains: lib.accs, Iters: iters,
			M: Measure{Amount: lib.fmaFlops(iters) * float64(o.Threads)}, CPU: Measure{Amount: lib.fmaFlops(iters)}}
		if r.M.Seconds, err = o.Budget.repeat(func(int) (float64, error) {
			wall, cpu, err := lib.fma(o.Threads, iters, params, out)
			if cpu > 0 {
				r.CPU.Seconds = append(r.CPU.Seconds, cpu)
			}
			return wall, err
		}); err != nil {
			return nil, nil, err
		}
		y.FMA = append(y.FMA, r)
	}

	if levels[0].X86 {
		for _, c := range []struct {
			fn     string
			m      *Measure
			cycles int64
		}{{"yard_clock", &y.Clock, mulLatency}, {"yard_clock_add", &y.ClockAdds, 1}} {
			iters, err := calibrate(1<<10, target, func(n int64) (float64, error) {
				wall, _, err := libs[0].clock(c.fn, o.Threads, n, out)
				return wall, err
			})
			if err != nil {
				return nil, nil, err
			}
			c.m.Amount = float64(iters * clockOps * c.cycles)
			if _, err := o.Budget.repeat(func(int) (float64, error) {
				wall, cpu, err := libs[0].clock(c.fn, o.Threads, iters, out)
				if cpu > 0 {
					c.m.Seconds = append(c.m.Seconds, cpu)
				}
				return wall, err
			}); err != nil {
				return nil, nil, err
			}
		}
	}
	y.Summary = YardSummary{ReadGBps: y.Read.Rate().Median, ReadPrefetchGBps: y.ReadPrefetch.Rate().Median, BlocksGBps: y.Blocks.Rate().Median,
		BlocksPrefetchGBps: y.BlocksPrefetch.Rate().Median, FlopsPerCycle: y.FlopsPerCycle()}
	if y.ClockAgrees() {
		y.Summary.ClockGHz = y.Clock.Rate().Median
	}
	if p := y.Peak(); p != nil {
		y.Summary.FMAPeakGFLOPS, y.Summary.FMAPeakMCPU = p.M.Rate().Median, p.Level.MCPU
	}
	return y, libs[0], nil
}
