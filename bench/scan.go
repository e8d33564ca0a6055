package bench

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
)

// scanTries are the prefetches the paged-read scan tries: none, and 1, 2
// and 4 pages of an item ahead, into L1 and into L2 (the kernels' own
// prefetches fill L2: codegen/llvm).
var scanTries = []ScanTry{{Ahead: 0}, {Ahead: 1}, {Ahead: 2}, {Ahead: 4}, {Ahead: 1, L2: true}, {Ahead: 2, L2: true}, {Ahead: 4, L2: true}}

// scanPrefetches are yard_scan's prefetch instructions: into L1
// (locality 3, prefetcht0) and into L2 (locality 2, prefetcht1), each
// with its helpers' name suffix and its branch's label.
var scanPrefetches = []struct {
	suffix, level string
	locality      int
}{{"", "l1", 3}, {"_l2", "l2", 2}}

// PagedScan is a decode case's paged-read yardstick: a plain scan
// (yard_scan) of exactly the bytes the case's calls read — the same K and
// V pools, page tables and page sets in the same rotation, each (sequence,
// kv head) item's visible rows page by page in page-table order, K then V
// blocks in the case's layout and storage dtype — on the kernels' thread
// count, items taken from a shared counter in grabs of consecutive items
// (scanGrains, scanGrab) as the decode takes its work items (and split
// into chunks of pages as the decode splits: with more than one kv head
// when it has fewer sequences than threads, chunk by chunk; with one, when
// it has fewer items). It sums every byte it reads, checked against the
// same sum in Go; it keeps the prefetch (distance and cache level) with
// the best median rate. The scan is the decode's memory-side limit: what
// reading its pages costs with no compute at all.
type PagedScan struct {
	Ahead  int       `json:"ahead"`   // the best prefetch distance, in pages of an item (0: none)
	L2     bool      `json:"l2"`      // the best prefetch fills L2 (prefetcht1), not L1
	M      Measure   `json:"m"`       // at Ahead: Amount the case's kv_bytes, per call
	Rate   Stats     `json:"rate"`    // GB/s
	TimeMS Stats     `json:"time_ms"` // per call
	Tried  []ScanTry `json:"tried"`   // every prefetch tried, the best included
	Items  int       `json:"items"`   // work items per call
	Splits int       `json:"splits"`  // chunks per (sequence, kv head)
	Visits int       `json:"visits"`  // (page, kv head) blocks per call, each read in K and V
}

// ScanTry is the paged-read scan at one prefetch distance and cache level;
// the tries' repetitions are interleaved, so a load change hits them
// alike.
type ScanTry struct {
	Ahead int     `json:"ahead"`
	L2    bool    `json:"l2"`
	M     Measure `json:"m"`
	Rate  Stats   `json:"rate"` // GB/s
}

// poolGeom is where a kv head's rows lie in a page pool: row r of head h
// of page p starts at p*pageBytes + h*headStride + r*rowStride and holds
// rowBytes bytes.
type poolGeom struct{ pageBytes, headStride, rowStride, rowBytes int64 }

// pagedScan is a decode workload's scan plan: items of {visit lo, visit
// hi, kv head} and visits of {page table index, first row, rows}.
type pagedScan struct {
	w      *poolWorkload
	geo    [2]poolGeom
	items  []int64
	visits []int64
	splits int
	run    int // items per grab run: a sequence's kv heads (of one chunk)
	bytes  int64
	bufs   struct{ geo, items, visits, next *cpurt.Buffer }
	want   map[int]int64 // per page set
}

// scanGeoms gives the K and V pools' geometry of w's variant.
func scanGeoms(w *poolWorkload) ([2]poolGeom, error) {
	v := w.s.V
	var g [2]poolGeom
	if len(w.pools) != 2 {
		return g, fmt.Errorf("paged scan: %d page pools, want K and V", len(w.pools))
	}
	elem := int64(v.KVDType.Info().Bits / 8)
	heads, ps := int64(v.KVHeads), int64(v.PageSize)
	for i, name := range w.poolNames {
		var d int64
		switch name {
		case "k_pages":
			d = int64(v.HeadDimQK)
		case "v_pages":
			d = int64(v.HeadDimV)
		case "ckv_pages":
			d = int64(v.MLA.KVLoraRank)
		case "kpe_pages":
			d = int64(v.MLA.RopeDim)
		default:
			return g, fmt.Errorf("paged scan: unknown page pool %s", name)
		}
		rb := d * elem
		g[i] = poolGeom{pageBytes: ps * heads * rb, rowBytes: rb}
		if v.Layout == ir.NHD { // [page_size, kv_heads, d]
			g[i].headStride, g[i].rowStride = rb, heads*rb
		} else { // HND: [kv_heads, page_size, d]
			g[i].headStride, g[i].rowStride = ps*rb, rb
		}
		if n := int64(w.pools[i].Len()); n != g[i].pageBytes*int64(w.poolPages) {
			return g, fmt.Errorf("paged scan: %s holds %d bytes, not %d pages of %d", name, n, w.poolPages, g[i].pageBytes)
		}
	}
	return g, nil
}

// newPagedScan plans the scan of decode workload w (before dropCase) on
// threads threads.
func newPagedScan(w *poolWorkload, threads int) (*pagedScan, error) {
	g, err := scanGeoms(w)
	if err != nil {
		return nil, err
	}
	v, c := w.s.V, w.c
	sc := &pagedScan{w: w, geo: g, splits: 1, run: v.KVHeads, want: map[int]int64{}}
	// The page table index of sequence b's page i: CSR's kv_indices run
	// over the sequences in order, vLLM's block table has maxBlocks a row.
	maxBlocks, first := 1, make([]int, len(c.Pages)+1)
	for b, pages := range c.Pages {
		maxBlocks = max(maxBlocks, len(pages))
		first[b+1] = first[b] + len(pages)
	}
	index := func(b, i int) int64 {
		if w.table == "block_table" {
			return int64(b*maxBlocks + i)
		}
		return int64(first[b] + i)
	}
	// Per sequence, its visits (page table index, first row, rows).
	ps := v.PageSize
	seqVisits := make([][][3]int64, len(c.Pages))
	most := 0
	for b, pages := range c.Pages {
		kvLen := c.KVLens[b]
		for _, sp := range visibleSpans(v, kvLen-1, kvLen) {
			for row := sp[0]; row < sp[1]; {
				i := row / ps
				end := min(sp[1], (i+1)*ps)
				if i >= len(pages) || pages[i] < 0 {
					return nil, fmt.Errorf("paged scan: sequence %d has no page for row %d", b, row)
				}
				seqVisits[b] = append(seqVisits[b], [3]int64{index(b, i), int64(row - i*ps), int64(end - row)})
				sc.bytes += int64(end-row) * (g[0].rowBytes + g[1].rowBytes)
				row = end
			}
		}
		most = max(most, len(seqVisits[b]))
	}
	sc.bytes *= int64(v.KVHeads)
	// Items: (sequence, kv head), split into chunks when there are fewer
	// sequences than threads (the CPU's plan_splits over the batch: enough
	// chunks to give every thread work, no more than the pages), chunk by
	// chunk, each chunk's sequence a run of items as in the kernel; with
	// one kv head, when there are fewer items than threads, each item's
	// chunks adjacent (lower's splitBySequence).
	bySeq := v.KVHeads > 1
	units := len(c.Pages)
	if !bySeq {
		units = len(c.Pages) * v.KVHeads
	}
	if units < threads {
		sc.splits = max(1, min((threads+units-1)/max(units, 1), most))
	}
	add := func(k, b, h int) {
		n := len(seqVisits[b])
		lo, hi := k*n/sc.splits, (k+1)*n/sc.splits
		at := int64(len(sc.visits) / 3)
		for _, x := range seqVisits[b][lo:hi] {
			sc.visits = append(sc.visits, x[:]...)
		}
		sc.items = append(sc.items, at, at+int64(hi-lo), int64(h))
	}
	if bySeq {
		for k := range sc.splits {
			for b := range c.Pages {
				for h := range v.KVHeads {
					add(k, b, h)
				}
			}
		}
	} else {
		for b := range c.Pages {
			for h := range v.KVHeads {
				for k := range sc.splits {
					add(k, b, h)
				}
			}
		}
		if sc.splits > 1 {
			sc.run = 1 // split decode's loop has no runs there
		}
	}
	if len(sc.visits) == 0 {
		sc.visits = []int64{0, 0, 0} // a buffer to point at
	}
	sc.bufs.geo = cpurt.NewBuffer(8 * 8)
	geo := wordsOf(sc.bufs.geo)
	for i, x := range g {
		copy(geo[4*i:], []int64{x.pageBytes, x.headStride, x.rowStride, x.rowBytes})
	}
	sc.bufs.items = i64Buffer(sc.items)
	sc.bufs.visits = i64Buffer(sc.visits)
	sc.bufs.next = cpurt.NewBuffer(64)
	return sc, nil
}

func i64Buffer(xs []int64) *cpurt.Buffer {
	b := cpurt.NewBuffer(8 * max(1, len(xs)))
	copy(wordsOf(b), xs)
	return b
}

func (sc *pagedScan) free() {
	for _, b := range []*cpurt.Buffer{sc.bufs.geo, sc.bufs.items, sc.bufs.visits, sc.bufs.next} {
		if b != nil {
			b.Free()
		}
	}
}

func (sc *pagedScan) nItems() int { return len(sc.items) / 3 }

// runSum is yard_run's sum of a run of bytes: its whole little-endian
// 8-byte words and its remaining bytes, wrapping.
func runSum(b []byte) int64 {
	var s uint64
	n := len(b) / 8 * 8
	for i := 0; i < n; i += 8 {
		s += binary.LittleEndian.Uint64(b[i:])
	}
	for _, x := range b[n:] {
		s += uint64(x)
	}
	return int64(s)
}

// blockSum is yard_block's sum of rows rows of head head from row first of
// page page, in pool bytes p of geometry g.
func blockSum(p []byte, g poolGeom, page, head, first, rows int64) int64 {
	base := page*g.pageBytes + head*g.headStride + first*g.rowStride
	if g.rowStride == g.rowBytes {
		return runSum(p[base : base+rows*g.rowBytes])
	}
	var s int64
	for r := range rows {
		o := base + r*g.rowStride
		s += runSum(p[o : o+g.rowBytes])
	}
	return s
}

// wantSum is the sum every scan of page set set must give, computed in Go
// from the pools' bytes on threads goroutines (once per set).
func (sc *pagedScan) wantSum(set, threads int) int64 {
	if s, ok := sc.want[set]; ok {
		return s
	}
	table := sc.w.tables[set%len(sc.w.tables)].I32()
	n := sc.nItems()
	sums := make([]int64, threads)
	onThreads(threads, func(t int) error {
		for it := t * n / threads; it < (t+1)*n/threads; it++ {
			lo, hi, head := sc.items[3*it], sc.items[3*it+1], sc.items[3*it+2]
			for j := lo; j < hi; j++ {
				page := int64(table[sc.visits[3*j]])
				for k, pool := range sc.w.pools {
					sums[t] += blockSum(pool.U8(), sc.geo[k], page, head, sc.visits[3*j+1], sc.visits[3*j+2])
				}
			}
		}
		return nil
	})
	var s int64
	for _, x := range sums {
		s += x
	}
	sc.want[set] = s
	return s
}

// scanGrains are the scan's grab sizes, the kernels' parallel_for rule
// (targets/cpu grabsPerThread), with threads capped at the items as
// there: grain = max(1, items / (4 * threads)); rgrain, whole runs of run
// items (a sequence's kv heads), run · max(1, grain / run), taken while at
// least round = threads · run items are left, when run > 1 and every
// thread can have a run (items / threads >= run; round 0 otherwise).
func scanGrains(items, threads, run int) (grain, rgrain, round int64) {
	t := max(1, min(threads, items))
	share := items / (4 * t)
	grain = int64(max(1, share))
	if run > 1 && items/t >= run {
		return grain, int64(run * max(1, share/run)), int64(t * run)
	}
	return grain, grain, 0
}

// scanGrab is the items of the scan's grab at item next: yard_scan's
// choice between scanGrains' sizes.
func scanGrab(items, threads, run, next int) int64 {
	grain, rgrain, round := scanGrains(items, threads, run)
	rest := int64(items - next)
	g := grain
	if round > 0 && rest >= round {
		g = rgrain
	}
	return min(g, rest)
}

// scan runs the scan once over page set set on threads threads with
// prefetch distance ahead (into L2 when l2) and checks the sum of the
// bytes it read.
func (y *yardLib) scan(sc *pagedScan, set, threads, ahead int, l2 bool, out slots) (float64, error) {
	want := sc.wantSum(set, threads)
	table := sc.w.tables[set%len(sc.w.tables)]
	wordsOf(sc.bufs.next)[0] = 0
	grain, rgrain, round := scanGrains(sc.nItems(), threads, sc.run)
	sec, _, err := onThreads(threads, func(t int) error {
		return y.lib.CallVoid("yard_scan", sc.w.pools[0].Ptr(), sc.w.pools[1].Ptr(), table.Ptr(), sc.bufs.geo.Ptr(),
			sc.bufs.visits.Ptr(), sc.bufs.items.Ptr(), int64(sc.nItems()), sc.bufs.next.Ptr(), int64(ahead), out.ptr(t), grain, rgrain, round, b2i(l2))
	})
	if err != nil {
		return 0, err
	}
	var got int64
	for t := range threads {
		got += out.i64(t)
	}
	if got != want {
		return 0, fmt.Errorf("paged scan: page set %d, %d pages ahead: the threads summed %#x, want %#x", set, ahead, got, want)
	}
	return sec, nil
}

// measureScan times the scan with every prefetch of scanTries and, when
// decode is not nil, the decode whose bytes it reads: each round calls the
// decode twice, then the scan once per prefetch, every call on the next
// page set (after one untimed call of each on the last set), so that a
// change in the machine's memory load between rounds hits the decode and
// its yardstick alike. A round's first decode call finds the kernels'
// workers asleep after the previous round's scans (first); its second
// finds them spinning, as back-to-back calls do (warm), which the scan,
// a memory-side limit, is compared with. Rounds run as budget b allows:
// exactly Reps, or until the timed calls have taken its Seconds (twice
// that with a decode: the decode's time and the scan's), at least
// MinReps. The scan keeps the prefetch with the best median rate.
func (y *yardLib) measureScan(sc *pagedScan, threads int, b Budget, decode func(set int) (float64, error)) (_ *PagedScan, warm, first []float64, _ error) {
	out := newSlots(threads)
	defer out.free()
	last := len(sc.w.tables) - 1
	if _, err := y.scan(sc, last, threads, 1, false, out); err != nil {
		return nil, nil, nil, err
	}
	limit := b.Seconds
	if decode != nil {
		if _, err := decode(last); err != nil {
			return nil, nil, nil, err
		}
		limit *= 2
	}
	r := &PagedScan{Items: sc.nItems(), Splits: sc.splits, Visits: len(sc.visits) / 3}
	if len(sc.items) == 0 {
		r.Visits = 0
	}
	for _, t := range scanTries {
		r.Tried = append(r.Tried, ScanTry{Ahead: t.Ahead, L2: t.L2, M: Measure{Amount: float64(sc.bytes)}})
	}
	total, start, call := 0.0, time.Now(), 0
	for round := 0; ; round++ {
		if b.Reps > 0 {
			if round == b.Reps {
				break
			}
		} else if round >= MaxReps || (round >= MinReps && (total >= limit || time.Since(start).Seconds() >= 3*limit+1)) {
			break
		}
		if decode != nil {
			var sec [2]float64
			for i := range sec {
				var err error
				if sec[i], err = decode(call); err != nil {
					return nil, nil, nil, err
				}
				call++
			}
			total += sec[1]
			first, warm = append(first, sec[0]), append(warm, sec[1])
		}
		for i := range r.Tried {
			sec, err := y.scan(sc, call, threads, r.Tried[i].Ahead, r.Tried[i].L2, out)
			if err != nil {
				return nil, nil, nil, err
			}
			call++
			total += sec
			r.Tried[i].M.Seconds = append(r.Tried[i].M.Seconds, sec)
		}
	}
	best := 0
	for i := range r.Tried {
		r.Tried[i].Rate = r.Tried[i].M.Rate()
		if r.Tried[i].Rate.Median > r.Tried[best].Rate.Median {
			best = i
		}
	}
	r.Ahead, r.L2, r.M, r.Rate = r.Tried[best].Ahead, r.Tried[best].L2, r.Tried[best].M, r.Tried[best].Rate
	r.TimeMS = r.M.TimeMS()
	return r, warm, first, nil
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
