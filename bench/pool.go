package bench

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"

	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// poolWorkload is a CPU entry with its arguments in place, its K/V pages
// in a pool of poolPages pages and one page table per disjoint page set
// over it: call i reads the pages of table i mod len(tables), so that with
// a pool far larger than the last-level cache no cache serves a call's
// pages.
//
// The pool tiles a reference case's pages (pool page q holds the case's
// page q mod the case's page count), so every call computes attention over
// the case's values, which caseFor describes for the reference.
type poolWorkload struct {
	s    *conformance.Suite
	role ir.Role
	c    *reference.Case

	vals   map[string]int64
	bufs   []*cpurt.Buffer // every buffer to free
	o      *cpurt.Buffer
	table  string          // kv_indices (CSR) or block_table
	tables []*cpurt.Buffer // one page table per page set
	sets   [][]int         // sets[r][p]: the pool page of the case's page p in set r
	// pools are the page pools by name (every *_pages argument), in name
	// order: K before V (k_pages, v_pages; MLA's ckv_pages, kpe_pages).
	pools     []*cpurt.Buffer
	poolNames []string

	casePages  int   // the case's page count
	poolPages  int   // pool pages (num_pages)
	pageBytes  int64 // bytes of one page over every page pool (K and V, or ckv and kpe)
	tokenBytes int64 // pageBytes per token
	kvBytes    int64 // K+V bytes of the rows the call's queries see, as stored
	flops      float64
	exact      bool // flops and kvBytes count the visible rows exactly

	// huge is "advised" when the pools were advised MADV_HUGEPAGE before
	// their first write, why not when that failed, "" without a pool.
	huge string
}

// workloadShape is a call: per sequence, new query tokens and cached
// tokens.
type workloadShape struct{ qLens, kvLens []int }

func decodeCall(batch, kvLen int) workloadShape {
	s := workloadShape{}
	for range batch {
		s.qLens = append(s.qLens, 1)
		s.kvLens = append(s.kvLens, kvLen)
	}
	return s
}

func prefillCall(qLen int) workloadShape {
	return workloadShape{qLens: []int{qLen}, kvLens: []int{qLen}}
}

// newPoolWorkload lays out a random case of shape sh for the suite's role
// entry and, when minPool exceeds the case's own pages, a pool of at least
// minPool bytes and twice the case's pages. memAvail (0: unknown) bounds
// the pool. The fill runs on threads goroutines.
func newPoolWorkload(s *conformance.Suite, role ir.Role, sh workloadShape, minPool, memAvail int64, threads int, seed int64) (w *poolWorkload, err error) {
	v := s.V
	if _, ok := s.Entries[role]; !ok {
		return nil, fmt.Errorf("%s has no %s entry", v.Name, role)
	}
	rng := rand.New(rand.NewSource(seed))
	c := reference.NewCase(v, rng, reference.CaseSpec{Name: "bench", QLens: sh.qLens, KVLens: sh.kvLens})
	vals, byName := s.CaseArgs(c)
	w = &poolWorkload{s: s, role: role, c: c, vals: vals, o: byName["o"], casePages: c.NumPages}
	var names []string
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		w.bufs = append(w.bufs, byName[name])
	}
	built := w
	defer func() {
		if err != nil {
			built.free()
		}
	}()
	// Runs before the free above: a buffer the system will not map (the
	// pool) becomes err, and what was mapped is freed.
	defer cpurt.RecoverAlloc(&err)

	// The page pools: every buffer argument named *_pages.
	var pageNames []string
	perPage := map[string]int{}
	for _, name := range names {
		if !strings.HasSuffix(name, "_pages") {
			continue
		}
		n := byName[name].Len()
		if c.NumPages == 0 || n%c.NumPages != 0 {
			return nil, fmt.Errorf("%s: %d bytes is not a whole number of %d pages", name, n, c.NumPages)
		}
		pageNames = append(pageNames, name)
		perPage[name] = n / c.NumPages
		w.pageBytes += int64(n / c.NumPages)
	}
	if len(pageNames) == 0 {
		return nil, fmt.Errorf("%s %s: no *_pages argument", v.Name, role)
	}
	w.tokenBytes = w.pageBytes / int64(v.PageSize)
	switch {
	case byName["kv_indices"] != nil:
		w.table = "kv_indices"
	case byName["block_table"] != nil:
		w.table = "block_table"
	default:
		return nil, fmt.Errorf("%s %s: no kv_indices or block_table argument", v.Name, role)
	}

	// What one call reads and computes.
	w.exact = true
	for b := range sh.qLens {
		rows, ok := visiblePairs(v, sh.qLens[b], sh.kvLens[b])
		w.exact = w.exact && ok
		w.flops += 2 * float64(v.HeadDimQK+v.HeadDimV) * float64(v.QOHeads) * float64(rows)
		last, _ := visibleRows(v, sh.kvLens[b]-1, sh.kvLens[b]) // decode: the one query's rows
		if role == ir.RoleDecode {
			w.kvBytes += last * w.tokenBytes
		}
	}
	if role != ir.RoleDecode { // prefill: the cached rows, each read at least once
		for b := range sh.kvLens {
			w.kvBytes += int64(sh.kvLens[b]) * w.tokenBytes
		}
	}

	// The pool.
	w.poolPages = c.NumPages
	pools := map[string]*cpurt.Buffer{}
	if caseBytes := int64(c.NumPages) * w.pageBytes; minPool > caseBytes {
		pages := max((minPool+w.pageBytes-1)/w.pageBytes, 2*int64(c.NumPages))
		if pages > math.MaxInt32 {
			return nil, fmt.Errorf("a pool of %d pages exceeds num_pages' int32", pages)
		}
		if need := pages * w.pageBytes; memAvail > 0 && need > memAvail*3/4 {
			return nil, fmt.Errorf("a K/V pool of %d MiB does not fit in 3/4 of the %d MiB of available memory", need>>20, memAvail>>20)
		}
		w.poolPages = int(pages)
		for _, name := range pageNames {
			pool := cpurt.NewBuffer(w.poolPages * perPage[name])
			w.bufs = append(w.bufs, pool)
			// Engines' K/V pools are large allocations that a THP "always"
			// host maps on huge pages; advise it so that the pools (the
			// kernel's and the paged scan's) walk the same page size
			// whatever the host's THP mode is.
			w.huge = "advised"
			if err := pool.AdviseHugePages(); err != nil {
				w.huge = "not advised (" + err.Error() + ")"
			}
			tile(pool.U8(), byName[name].U8(), threads)
			w.vals[name] = pool.Ptr()
			pools[name] = pool
			byName[name].Free() // the pool holds its pages now
		}
		w.vals["num_pages"] = int64(w.poolPages)
	}
	for _, name := range pageNames {
		pool := byName[name]
		if pools[name] != nil {
			pool = pools[name]
		}
		w.pools, w.poolNames = append(w.pools, pool), append(w.poolNames, name)
	}
	perm := rng.Perm(w.poolPages)
	if w.poolPages == c.NumPages {
		perm = make([]int, c.NumPages) // one set: the case's own pages
		for i := range perm {
			perm[i] = i
		}
	}
	caseTable := byName[w.table].I32()
	for r := 0; (r+1)*c.NumPages <= w.poolPages; r++ {
		set := perm[r*c.NumPages : (r+1)*c.NumPages]
		t := make([]int32, len(caseTable))
		for i, p := range caseTable {
			t[i] = p
			if p >= 0 && int(p) < c.NumPages {
				t[i] = int32(set[p])
			}
		}
		buf := cpurt.I32Buffer(t)
		w.bufs = append(w.bufs, buf)
		w.tables = append(w.tables, buf)
		w.sets = append(w.sets, set)
	}
	return w, nil
}

// tile fills dst with repeated copies of src, split over threads
// goroutines.
func tile(dst, src []byte, threads int) {
	n := len(dst)
	threads = max(1, threads)
	onThreads(threads, func(t int) error {
		lo, hi := t*n/threads, (t+1)*n/threads
		for off := lo; off < hi; {
			k := copy(dst[off:hi], src[off%len(src):])
			off += k
		}
		return nil
	})
}

// call runs the entry on page set r mod PageSets and fails on a nonzero
// status.
func (w *poolWorkload) call(r int) error {
	w.vals[w.table] = w.tables[r%len(w.tables)].Ptr()
	st, err := w.s.Call(w.role, w.vals)
	if err != nil {
		return err
	}
	return w.status(st)
}

// status fails on the entry's nonzero status st.
func (w *poolWorkload) status(st int32) error {
	if st != 0 {
		return fmt.Errorf("%s returned %d (%s)", w.s.Entries[w.role].Symbol, st, w.s.Lib.CallStr(w.s.Prefix+"_strerror", st))
	}
	return nil
}

// timedCall is call(r)'s wall time, measured in C around the entry
// (conformance.Suite.CallTimed): the Go runtime's return from C can wait
// for a CPU (its scheduler hands the caller's P to another thread during a
// long C call), which is no part of the kernel's time.
func (w *poolWorkload) timedCall(r int) (float64, error) {
	w.vals[w.table] = w.tables[r%len(w.tables)].Ptr()
	st, sec, err := w.s.CallTimed(w.role, w.vals)
	if err != nil {
		return sec, err
	}
	return sec, w.status(st)
}

// dropCase releases the reference case's values (caseFor needs them).
func (w *poolWorkload) dropCase() { w.c = nil }

// caseFor is the reference case that call(r) computes: the case's values
// with each page id replaced by the case page its pool page holds.
func (w *poolWorkload) caseFor(r int) *reference.Case {
	c := *w.c
	set := w.sets[r%len(w.sets)]
	c.Pages = make([][]int, len(w.c.Pages))
	for b, pages := range w.c.Pages {
		for _, p := range pages {
			if p >= 0 {
				p = set[p] % w.casePages
			}
			c.Pages[b] = append(c.Pages[b], p)
		}
	}
	return &c
}

// checkOutput fails when o holds a NaN or an infinity: a benchmark of a
// kernel that computes garbage is worth nothing.
func (w *poolWorkload) checkOutput() error {
	for i, x := range reference.Decode(w.s.V.DType, w.o.U8()) {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("output o[%d] = %v after the timed calls", i, x)
		}
	}
	return nil
}

// measure times the entry once per repetition (after one untimed call on
// the last page set), each repetition on the next page set, then checks
// the output.
func (w *poolWorkload) measure(b Budget) ([]float64, error) {
	if err := w.call(len(w.tables) - 1); err != nil {
		return nil, err
	}
	secs, err := b.repeat(w.timedCall)
	if err != nil {
		return secs, err
	}
	return secs, w.checkOutput()
}

func (w *poolWorkload) free() {
	for _, b := range w.bufs {
		b.Free()
	}
	w.bufs, w.tables = nil, nil
}
