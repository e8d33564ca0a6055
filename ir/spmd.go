package ir

import (
	"fmt"
	"math"
)

// The interpreter runs GPU constructs the way the CUDA emulator does:
// every thread of a Threads loop (or lane of a Lanes loop) is a goroutine
// with its own frame, and exactly one runs at a time, up to its next
// synchronization point — a Barrier (the whole group), a Shuffle or an MMA
// (its warp: Module.LaneWidth lanes, 32 unless the module says). When every unfinished thread waits, the scheduler
// completes the warp exchanges whose lanes all arrived, else releases the
// barrier if every thread reached it; anything else (a barrier some thread
// skipped, a shuffle some lane of the warp did not reach, two different
// operations) is an error. Threads run in order 0, 1, ... between
// synchronization points, in reverse order every other round, so a missing
// barrier shows in the results.

// syncKind is what a thread waits for.
type syncKind uint8

const (
	syncNone syncKind = iota
	syncBarrier
	syncShuffle
	syncMMA
	syncLdMatrix
	syncDone
)

var syncNames = [...]string{"", "barrier", "shfl_xor", "mma or mfma", "ldmatrix", "the end"}

// spmdThread is one thread (or lane) of an SPMD group.
type spmdThread struct {
	g      *spmdGroup
	id     int
	resume chan struct{}
	wait   syncKind
	// shuffle: value and mask posted, result received
	val, res val
	mask     int
	// mma: the lane's fragments (by address: d is written back)
	mma *mmaFrag
	// ldmatrix: the lane's row and what it receives
	ldm *ldmFrag
	err error
}

// mmaFrag is one lane's part of an m16n8k16 mma.
type mmaFrag struct {
	in   Type
	amd  bool // MFMA 16x16x16 (a and b: two registers each), else mma.m16n8k16
	a    [4]uint32
	b    [2]uint32
	d    [4]float32
	dOut *buffer
}

// spmdGroup is the threads of one Threads or Lanes loop.
type spmdGroup struct {
	threads []*spmdThread
	yielded chan *spmdThread
	abort   chan struct{}
}

// abortSignal unwinds a thread goroutine when its group fails.
type abortSignal struct{}

// sync blocks the calling thread at a synchronization point until the
// scheduler completes it.
func (t *spmdThread) sync(k syncKind) {
	t.wait = k
	t.g.yielded <- t
	select {
	case <-t.resume:
	case <-t.g.abort:
		panic(abortSignal{})
	}
}

// spmd runs s (a Threads or Lanes loop) with one thread per iteration.
func (f *frame) spmd(s *For) {
	lo, hi := int64(f.eval(s.Lo)), int64(f.eval(s.Hi))
	n := int(hi - lo)
	if n <= 0 {
		return
	}
	width := f.m.LaneWidth()
	if n%width != 0 {
		f.fail("%s loop %s: %d threads, want a multiple of %d", s.Kind, s.Var, n, width)
	}
	g := &spmdGroup{yielded: make(chan *spmdThread), abort: make(chan struct{})}
	for i := 0; i < n; i++ {
		t := &spmdThread{g: g, id: i, resume: make(chan struct{})}
		g.threads = append(g.threads, t)
		env := make(map[string]*binding, len(f.env)+1)
		for k, v := range f.env {
			env[k] = v
		}
		env[s.Var] = &binding{v: val(lo + int64(i))}
		tf := &frame{m: f.m, k: f.k, env: env, depth: f.depth, thr: t}
		go func() {
			defer func() {
				if r := recover(); r != nil {
					switch x := r.(type) {
					case abortSignal:
						return
					case interpError:
						t.err = x.err
					default:
						t.err = fmt.Errorf("BUG: interp: %v", r)
					}
				}
				t.wait = syncDone
				g.yielded <- t
			}()
			select {
			case <-t.resume:
			case <-g.abort:
				return
			}
			if fl, _ := tf.block(s.Body); fl == flowReturn {
				f.fail("return inside a %s loop", s.Kind)
			}
		}()
	}
	defer close(g.abort)
	runnable := append([]*spmdThread(nil), g.threads...)
	for round := 0; ; round++ {
		if round%2 == 1 {
			for i, j := 0, len(runnable)-1; i < j; i, j = i+1, j-1 {
				runnable[i], runnable[j] = runnable[j], runnable[i]
			}
		}
		for _, t := range runnable {
			t.resume <- struct{}{}
			<-g.yielded
			if t.err != nil {
				panic(interpError{fmt.Errorf("thread %d: %w", t.id, t.err)})
			}
		}
		runnable = runnable[:0]
		done := 0
		for _, t := range g.threads {
			if t.wait == syncDone {
				done++
			}
		}
		if done == n {
			return
		}
		// Warp exchanges whose lanes all arrived.
		for w := 0; w < n; w += width {
			lanes := g.threads[w : w+width]
			op := lanes[0].wait
			if op != syncShuffle && op != syncMMA && op != syncLdMatrix {
				continue
			}
			for _, l := range lanes {
				if l.wait != op {
					f.fail("%s: lane %d of warp %d is at %s, lane %d at %s: warp operations must be uniform",
						s.Var, lanes[0].id, w/width, syncNames[op], l.id, syncNames[l.wait])
				}
			}
			switch op {
			case syncShuffle:
				for _, l := range lanes {
					l.res = lanes[(l.id-w)^l.mask].val
				}
			case syncLdMatrix:
				f.ldmatrix(lanes)
			default:
				if lanes[0].mma.amd {
					f.mfma(lanes)
				} else {
					f.mma(lanes)
				}
			}
			for _, l := range lanes {
				l.wait = syncNone
				runnable = append(runnable, l)
			}
		}
		if len(runnable) > 0 {
			continue
		}
		for _, t := range g.threads {
			if t.wait != syncBarrier {
				f.fail("%s: thread %d is at %s while others wait at a barrier: every thread must reach every barrier",
					s.Var, t.id, syncNames[t.wait])
			}
		}
		for _, t := range g.threads {
			t.wait = syncNone
			runnable = append(runnable, t)
		}
	}
}

// shuffle is the calling lane's shfl_xor of x.
func (f *frame) shuffle(x val, mask int) val {
	if f.thr == nil {
		f.fail("shfl_xor outside a threads or lanes loop")
	}
	if n := f.m.LaneWidth(); mask <= 0 || mask >= n {
		f.fail("shfl_xor mask %d, want 1..%d", mask, n-1)
	}
	f.thr.val, f.thr.mask = x, mask
	f.thr.sync(syncShuffle)
	return f.thr.res
}

// fragmentLanes fails unless the warps have the 32 lanes mma's and
// ldmatrix's fragment layouts are defined for.
func (f *frame) fragmentLanes(op string) {
	if n := f.m.LaneWidth(); n != DefaultLanes {
		f.fail("%s: its fragments are laid out over %d lanes, the warps have %d", op, DefaultLanes, n)
	}
}

// barrier waits for every thread of the group.
func (f *frame) barrier() {
	if f.thr != nil {
		f.thr.sync(syncBarrier)
	}
	// Outside a threads loop a work item runs as one thread: nothing to wait for.
}

// mmaStmt posts the lane's fragments and waits for the warp.
func (f *frame) mmaStmt(s *MMA) {
	if f.thr == nil {
		f.fail("mma outside a threads or lanes loop")
	}
	f.fragmentLanes("mma")
	fr := &mmaFrag{in: s.In}
	a, b, d := f.buffer(s.A), f.buffer(s.B), f.buffer(s.D)
	for i := 0; i < 4; i++ {
		fr.a[i] = uint32(f.load(a, int64(i), I32))
		fr.d[i] = math.Float32frombits(uint32(f.load(d, int64(i), F32)))
	}
	for i := 0; i < 2; i++ {
		fr.b[i] = uint32(f.load(b, int64(i), I32))
	}
	fr.dOut = d
	f.thr.mma = fr
	f.thr.sync(syncMMA)
	for i := 0; i < 4; i++ {
		f.store(d, int64(i), val(math.Float32bits(fr.d[i])))
	}
}

// mfmaStmt posts the lane's MFMA fragments and waits for the warp.
func (f *frame) mfmaStmt(s *MFMA) {
	if f.thr == nil {
		f.fail("mfma outside a threads or lanes loop")
	}
	if n := f.m.LaneWidth(); n != MFMALanes {
		f.fail("mfma: its fragments are laid out over %d lanes, the warps have %d", MFMALanes, n)
	}
	fr := &mmaFrag{in: s.In, amd: true}
	a, b, d := f.buffer(s.A), f.buffer(s.B), f.buffer(s.D)
	for i := 0; i < 2; i++ {
		fr.a[i] = uint32(f.load(a, int64(i), I32))
		fr.b[i] = uint32(f.load(b, int64(i), I32))
	}
	for i := 0; i < 4; i++ {
		fr.d[i] = math.Float32frombits(uint32(f.load(d, int64(i), F32)))
	}
	fr.dOut = d
	f.thr.mma = fr
	f.thr.sync(syncMMA)
	for i := 0; i < 4; i++ {
		f.store(d, int64(i), val(math.Float32bits(fr.d[i])))
	}
}

// mfma computes D += A x B for one 64-lane warp in the layout of AMD's
// v_mfma_f32_16x16x16_{f16,bf16} (the MFMA statement's comment): with
// j = lane % 16 and g = lane / 16, element r of a lane's A is A[j][4g+r],
// of its B B[4g+r][j], and d[r] is D[4g+r][j]. Products and sums run in
// float64 and round once per element, as the emulator does.
func (f *frame) mfma(lanes []*spmdThread) {
	in := lanes[0].mma.in
	half := func(regs [4]uint32, r int) float64 {
		h := regs[r>>1] & 0xffff
		if r&1 == 1 {
			h = regs[r>>1] >> 16
		}
		return toF64(in, val(h))
	}
	A := func(row, k int) float64 { return half(lanes[row+16*(k>>2)].mma.a, k&3) }
	B := func(k, col int) float64 {
		var regs [4]uint32
		copy(regs[:2], lanes[col+16*(k>>2)].mma.b[:])
		return half(regs, k&3)
	}
	out := make([][4]float32, len(lanes))
	for l := range lanes {
		j, g := l&15, l>>4
		for r := 0; r < 4; r++ {
			s := float64(lanes[l].mma.d[r])
			for k := 0; k < 16; k++ {
				s += A(4*g+r, k) * B(k, j)
			}
			out[l][r] = float32(s)
		}
	}
	for l, ln := range lanes {
		ln.mma.d = out[l]
	}
}

// mma computes D += A x B for one warp, PTX ISA "Matrix Fragments for
// mma.m16n8k16 with floating point type": groupID = lane >> 2,
// threadID_in_group = lane % 4; A (16 x 16, row-major) element i of a lane
// (register i/2, low half for even i) is at row groupID (+8 for i in 2, 3,
// 6, 7), column 2*threadID_in_group + i%2 (+8 for i >= 4); B (16 x 8)
// element i at k = 2*threadID_in_group + i%2 (+8 for i >= 2), n = groupID;
// C and D element i at row groupID (+8 for i >= 2), column
// 2*threadID_in_group + i%2. Products and sums run in float64 and round
// once per element, as the emulator does.
func (f *frame) mma(lanes []*spmdThread) {
	in := lanes[0].mma.in
	half := func(reg uint32, hi bool) float64 {
		h := reg & 0xffff
		if hi {
			h = reg >> 16
		}
		return toF64(in, val(h))
	}
	A := func(row, k int) float64 {
		src := (row&7)*4 + (k&7)>>1
		i := (k>>3)<<2 | (row>>3)<<1 | k&1
		return half(lanes[src].mma.a[i>>1], i&1 == 1)
	}
	B := func(k, col int) float64 {
		src := col*4 + (k&7)>>1
		i := (k>>3)<<1 | k&1
		return half(lanes[src].mma.b[i>>1], i&1 == 1)
	}
	out := make([][4]float32, len(lanes))
	for l := range lanes {
		g, t := l>>2, l&3
		for i := 0; i < 4; i++ {
			row, col := g, t*2+i&1
			if i >= 2 {
				row += 8
			}
			s := float64(lanes[l].mma.d[i])
			for k := 0; k < 16; k++ {
				s += A(row, k) * B(k, col)
			}
			out[l][i] = float32(s)
		}
	}
	for l, ln := range lanes {
		ln.mma.d = out[l]
	}
}

// ldmFrag is one lane's part of an ldmatrix: the row it names and the
// registers it receives.
type ldmFrag struct {
	n     int
	trans bool
	src   *buffer
	row   int64
	out   [4]uint32
}

// ldmatrixStmt posts the lane's row address and waits for the warp.
func (f *frame) ldmatrixStmt(s *LdMatrix) {
	if f.thr == nil {
		f.fail("ldmatrix outside a threads or lanes loop")
	}
	f.fragmentLanes("ldmatrix")
	fr := &ldmFrag{n: s.N, trans: s.Trans, src: f.buffer(s.Src), row: f.index(s.Index)}
	if f.thr.id%f.m.LaneWidth() < 8*s.N { // the other lanes' addresses are ignored
		if fr.row%8 != 0 {
			f.fail("ldmatrix row %s[%d] is not 16-byte aligned", s.Src, fr.row)
		}
		f.check(fr.src, "ldmatrix", fr.row)
		f.check(fr.src, "ldmatrix", fr.row+7)
	}
	f.thr.ldm = fr
	f.thr.sync(syncLdMatrix)
	dst := f.buffer(s.Dst)
	for i := 0; i < s.N; i++ {
		f.store(dst, int64(i), val(int64(int32(fr.out[i]))))
	}
}

// ldmatrix hands out the fragments of one warp's ldmatrix, PTX ISA
// "Warp-level matrix load instruction: ldmatrix": lanes 8i .. 8i+7 name
// rows 0..7 of matrix i; lane l receives row l/4, columns 2*(l%4) and
// 2*(l%4)+1 of each matrix (the first in the low half), or with .trans
// rows 2*(l%4) and 2*(l%4)+1 of column l/4.
func (f *frame) ldmatrix(lanes []*spmdThread) {
	n, trans := lanes[0].ldm.n, lanes[0].ldm.trans
	for _, l := range lanes {
		if l.ldm.n != n || l.ldm.trans != trans {
			f.fail("ldmatrix: lanes disagree on the shape (x%d%v vs x%d%v)", n, trans, l.ldm.n, l.ldm.trans)
		}
	}
	elem := func(m, row, col int) uint32 {
		src := lanes[8*m+row].ldm
		return uint32(f.load(src.src, src.row+int64(col), I16)) & 0xffff
	}
	for l, ln := range lanes {
		for m := 0; m < n; m++ {
			var lo, hi uint32
			if trans {
				lo, hi = elem(m, 2*(l%4), l/4), elem(m, 2*(l%4)+1, l/4)
			} else {
				lo, hi = elem(m, l/4, 2*(l%4)), elem(m, l/4, 2*(l%4)+1)
			}
			ln.ldm.out[m] = lo | hi<<16
		}
	}
}
