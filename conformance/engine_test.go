package conformance

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
	"github.com/attnc/attnc/registry"
)

var engineLong = flag.Bool("engine.long", false, "play the engine simulation for many more steps")

// engineSpecs are window + sinks variants of several dtypes, page sizes
// and page tables, with the page kernels an engine needs.
var engineSpecs = []string{
	`variant eng_f16_ps16 { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  mask window(left = 40)
	  sinks tokens(4)
	  kernels prefill, decode, append, copy_page, compact_copy, gather_pages, scatter_pages }`,
	`variant eng_bf16_ps4 { heads qo = 8, kv = 2
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 4, layout = NHD)
	  mask window(left = 15)
	  sinks tokens(4)
	  kernels prefill, decode, append, copy_page, compact_copy, gather_pages, scatter_pages }`,
	`variant eng_f32_ps1_bt { heads qo = 4, kv = 4
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 1, table = block_table)
	  mask window(left = 20)
	  sinks tokens(2)
	  kernels prefill, decode, append, copy_page, compact_copy, gather_pages, scatter_pages }`,
	// Qwen3's path: K/V and q through qkv_append (qk_norm, rope at_append),
	// the attention kernels over the rotated cache.
	`variant eng_qwen3_f16_ps8 { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 8)
	  mask window(left = 30)
	  sinks tokens(4)
	  qk_norm rms(eps = 1e-6)
	  rope at_append(theta = 1000000)
	  kernels prefill, decode, qkv_append, copy_page, compact_copy, gather_pages, scatter_pages }`,
}

// TestEngineSimulation plays an inference engine's page manager through
// many steps, modelled on TVM's paged KV-cache tests
// (tests/python/relax/test_runtime_builtin_paged_attention_kv_cache*.py):
// ragged and chunked prefill, decode (split-KV at some thread counts), fork
// with shared prefixes, copy-on-write through the generated copy_page,
// popn, removal, speculative trees accepted through the generated
// compact_copy, pages moved out through gather_pages and back into other
// pages through scatter_pages — all K/V written by the generated append
// kernel (or, for a Qwen3-like variant, by qkv_append with qk_norm and
// rope at_append, whose q_out rows are the step's queries) — and,
// after every step, reclaiming the pages registry.ReclaimableRange says no
// query can see again. Reclaimed pages are filled with NaN/Inf and reused
// LIFO for other sequences; the table keeps naming them, or (second run)
// holds -1. Every step's outputs are checked against the float64 reference
// over the dense history of each sequence (never through the pages), and
// every cached position that is still visible is checked byte for byte.
func TestEngineSimulation(t *testing.T) {
	t.Parallel()
	needTools(t)
	for i, src := range engineSpecs {
		v := spec(t, src)
		for _, target := range []string{"cpu", "cuda"} {
			// The CUDA emulator plays the first variant by default,
			// every one with -cuda.all (CI's long pass).
			if target == "cuda" && i > 0 && !*cudaAll {
				continue
			}
			t.Run(v.Name+"/"+target, func(t *testing.T) {
				t.Parallel()
				var s *Suite
				var err error
				if target == "cpu" {
					s, err = buildHostLevel(v, t.TempDir())
				} else {
					needEmu(t)
					s, err = BuildCUDA(v, t.TempDir())
				}
				if err != nil {
					t.Fatal(err)
				}
				defer s.Lib.Close()
				for i, mode := range []reclaimMode{reclaimNamed, reclaimHidden} {
					e := newEngine(t, s, mode, int64(17+i))
					e.play(*engineLong)
					e.free()
					t.Logf("%s on %s, reclaimed pages %s: %s", v.Name, target, mode, e.stats)
				}
			})
		}
	}
}

// reclaimMode says what the table holds for a reclaimed page.
type reclaimMode int

const (
	reclaimNamed  reclaimMode = iota // the page id stays (its page may hold anything)
	reclaimHidden                    // -1
)

func (m reclaimMode) String() string {
	if m == reclaimHidden {
		return "as -1"
	}
	return "named"
}

// maxPop is the most tokens the engine may pop from a sequence: it
// reclaims only what no query at kv_len - maxPop or later can see.
const maxPop = 3

// engineStats counts what a run did, for the test log.
type engineStats struct {
	steps, calls, decodeCalls, rows, appends, cows, forks, pops, removes int
	reclaimed, reused, trees, compacted, moved                           int
	maxULP, maxMag                                                       float64
}

func (s engineStats) String() string {
	return fmt.Sprintf("%d steps (%d attention calls, %d through decode, %d query rows), %d appends, %d copy-on-write, %d forks, %d popn, %d removals, %d pages reclaimed, %d reused, %d trees accepted (%d rows compacted), %d pages moved out and back; max o error %.3g (f16/bf16: ulp; f32: relative), %.2f*2^-24 mag beyond rounding",
		s.steps, s.calls, s.decodeCalls, s.rows, s.appends, s.cows, s.forks, s.pops, s.removes, s.reclaimed, s.reused, s.trees, s.compacted, s.moved, s.maxULP, s.maxMag)
}

// seqState is one sequence: its table entries and its dense history.
type seqState struct {
	pages     []int  // page ids in position order; -1 for a page reclaimed as -1
	reclaimed []bool // page given back (no reference held)
	k, v      [][]float32
	// from is the earliest position a query of this sequence may still
	// come at (the largest from given to ReclaimableRange); popn stops there.
	from int
}

func (q *seqState) kvLen() int { return len(q.k) }

type engine struct {
	t     *testing.T
	s     *Suite
	v     *ir.Variant
	mode  reclaimMode
	rng   *rand.Rand
	size  int // storage bytes per element
	nPage int
	kPool *cpurt.Buffer
	vPool *cpurt.Buffer
	// poisonK, poisonV are one page of NaN/Inf in storage bytes.
	poisonK, poisonV []byte
	ref              []int // references to each page
	freeList         []int // LIFO: the most recently freed page is reused first
	wasReclaimed     []bool
	seqs             map[int]*seqState
	nextID           int
	stats            engineStats
	// qw, kw are qkv_append's qk_norm weights; stepQ, when not nil, is the
	// q_out rows of the last qkv_append (the next attention's queries).
	qw, kw []float32
	stepQ  []float32
}

func newEngine(t *testing.T, s *Suite, mode reclaimMode, seed int64) *engine {
	v := s.V
	ps := v.PageSize
	// Enough pages for 8 sequences of window + chunk + slack, far fewer
	// than they would need without reclaiming.
	perSeq := (registry.ReclaimRuleOf(v).WindowLeft+maxPop+registry.ReclaimRuleOf(v).SinkTokens+64)/ps + 4
	e := &engine{t: t, s: s, v: v, mode: mode, rng: rand.New(rand.NewSource(seed)), size: reference.Size(v.DType),
		nPage: 8*perSeq + 8, seqs: map[int]*seqState{}}
	poison := func(d int) []byte {
		xs := make([]float32, v.KVHeads*ps*d)
		for i := range xs {
			xs[i] = float32(math.NaN())
			switch i % 5 {
			case 1:
				xs[i] = float32(math.Inf(1))
			case 3:
				xs[i] = float32(math.Inf(-1))
			}
		}
		return reference.Encode(v.DType, xs)
	}
	e.poisonK, e.poisonV = poison(v.HeadDimQK), poison(v.HeadDimV)
	e.kPool = cpurt.NewBuffer(e.nPage * len(e.poisonK))
	e.vPool = cpurt.NewBuffer(e.nPage * len(e.poisonV))
	e.ref = make([]int, e.nPage)
	e.wasReclaimed = make([]bool, e.nPage)
	for p := e.nPage - 1; p >= 0; p-- {
		e.poisonPage(p)
		e.freeList = append(e.freeList, p)
	}
	return e
}

func (e *engine) free() {
	e.kPool.Free()
	e.vPool.Free()
}

func (e *engine) fatalf(format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf("%s, reclaimed %s, step %d: %s", e.s.Target, e.mode, e.stats.steps, fmt.Sprintf(format, args...))
}

// poisonPage fills page p (every kv head and slot, K and V) with NaN/Inf.
func (e *engine) poisonPage(p int) {
	copy(e.kPool.U8()[p*len(e.poisonK):], e.poisonK)
	copy(e.vPool.U8()[p*len(e.poisonV):], e.poisonV)
}

func (e *engine) alloc() int {
	if len(e.freeList) == 0 {
		e.fatalf("page pool of %d pages exhausted", e.nPage)
	}
	p := e.freeList[len(e.freeList)-1]
	e.freeList = e.freeList[:len(e.freeList)-1]
	if e.wasReclaimed[p] {
		e.stats.reused++
		e.wasReclaimed[p] = false
	}
	e.ref[p] = 1
	return p
}

// release drops one reference to page p; the last one frees it, filled
// with NaN/Inf.
func (e *engine) release(p int, reclaimed bool) {
	if e.ref[p] <= 0 {
		e.fatalf("page %d released with %d references", p, e.ref[p])
	}
	e.ref[p]--
	if e.ref[p] == 0 {
		e.poisonPage(p)
		e.wasReclaimed[p] = reclaimed
		e.freeList = append(e.freeList, p)
	}
}

// call runs role's entry with vals, failing the test on a bad status.
func (e *engine) call(role ir.Role, vals map[string]int64) {
	e.t.Helper()
	st, err := e.s.callEntry(role, vals)
	if err != nil || st != 0 {
		e.fatalf("%s: status %d, %v", role, st, err)
	}
}

// randRows draws n rows of d values per kv head, rounded to the dtype.
func (e *engine) randRows(n, d int) [][]float32 {
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = make([]float32, e.v.KVHeads*d)
		for j := range rows[i] {
			rows[i][j] = reference.Round(e.v.DType, 2*e.rng.Float32()-1)
		}
	}
	return rows
}

// reserve makes room for sequence q to grow by n tokens: a shared,
// partially filled last page is copied first (copy-on-write through the
// copy_page kernel), new pages come from the free list. It returns the
// slot of each new position.
func (e *engine) reserve(q *seqState, n int) []int32 {
	ps := e.v.PageSize
	at := q.kvLen()
	if at%ps != 0 {
		last := at / ps
		if p := q.pages[last]; e.ref[p] > 1 {
			np := e.alloc()
			e.call(ir.RoleCopyPage, map[string]int64{"k_pages": e.kPool.Ptr(), "v_pages": e.vPool.Ptr(),
				"num_pages": int64(e.nPage), "src_page": int64(p), "dst_page": int64(np), "length": int64(at % ps)})
			e.release(p, false)
			q.pages[last] = np
			e.stats.cows++
		}
	}
	slots := make([]int32, n)
	for i := range slots {
		pos := at + i
		if pos/ps == len(q.pages) {
			q.pages = append(q.pages, e.alloc())
			q.reclaimed = append(q.reclaimed, false)
		}
		slots[i] = int32(q.pages[pos/ps]*ps + pos%ps)
	}
	return slots
}

// appendKV writes rows through the generated append kernel, with a few -1
// rows in between that it must skip; a variant with qkv_append writes
// them through it instead (qkvAppendKV), the tokens at positions.
func (e *engine) appendKV(slots, positions []int32, k, v [][]float32) {
	if _, ok := e.s.Entries[ir.RoleQKVAppend]; ok {
		e.qkvAppendKV(slots, positions, k, v)
		return
	}
	var pm []int32
	var kf, vf []float32
	junk := e.randRows(1, e.v.HeadDimQK)[0]
	junkV := e.randRows(1, e.v.HeadDimV)[0]
	for i := range slots {
		if e.rng.Intn(8) == 0 {
			pm = append(pm, -1)
			kf, vf = append(kf, junk...), append(vf, junkV...)
		}
		pm = append(pm, slots[i])
		kf, vf = append(kf, k[i]...), append(vf, v[i]...)
	}
	cb := &caseBuffers{vals: map[string]int64{"n": int64(len(pm)), "num_pages": int64(e.nPage),
		"k_pages": e.kPool.Ptr(), "v_pages": e.vPool.Ptr()}}
	defer cb.free()
	cb.add("k", e.s.enc(kf))
	cb.add("v", e.s.enc(vf))
	cb.add("position_map", cpurt.I32Buffer(pm))
	e.call(ir.RoleAppend, cb.vals)
	e.stats.appends++
}

// qkvAppendKV is Qwen3's path: every token's q, k (the raw rows k) and v
// in one qkv row, a few -1 tokens in between, through qkv_append. q_out
// and the cached K rows must be within the rounding bound of
// reference.QKVAppend; then k takes the K rows as cached (normed and
// rotated: the history every later step and byte check sees) and the
// tokens' q_out rows become the next attention's queries.
func (e *engine) qkvAppendKV(slots, positions []int32, k, v [][]float32) {
	vr := e.v
	d, H, KVH := vr.HeadDimQK, vr.QOHeads, vr.KVHeads
	if e.qw == nil {
		for range d {
			e.qw, e.kw = append(e.qw, 2*e.rng.Float32()), append(e.kw, 2*e.rng.Float32())
		}
	}
	var pm, pos []int32
	var qkv []float32
	var tok []int // the qkv row of each of slots
	for i := range slots {
		if e.rng.Intn(8) == 0 {
			pm, pos = append(pm, -1), append(pos, int32(e.rng.Intn(1<<20)))
			qkv = append(qkv, e.randRows(1, (H+2*KVH)*d/KVH)[0]...)
		}
		tok = append(tok, len(pm))
		pm, pos = append(pm, slots[i]), append(pos, positions[i])
		qkv = append(qkv, e.randRows(1, H*d/KVH)[0]...)
		qkv = append(append(qkv, k[i]...), v[i]...)
	}
	n := len(pm)
	cb := &caseBuffers{vals: map[string]int64{"n": int64(n), "num_pages": int64(e.nPage),
		"k_pages": e.kPool.Ptr(), "v_pages": e.vPool.Ptr()}}
	defer cb.free()
	cb.add("qkv", e.s.enc(qkv))
	cb.add("positions", cpurt.I32Buffer(pos))
	cb.add("position_map", cpurt.I32Buffer(pm))
	cb.add("q_norm_weight", cpurt.F32Buffer(e.qw))
	cb.add("k_norm_weight", cpurt.F32Buffer(e.kw))
	qo := cb.add("q_out", e.s.enc(nanSlice(n*H*d)))
	e.call(ir.RoleQKVAppend, cb.vals)
	e.stats.appends++
	want := reference.QKVAppend(vr, qkv, pos, e.qw, e.kw, nil)
	gotQ := e.s.dec(qo)
	if used := AllowanceUsed(vr.DType, gotQ, want.Q, want.QMag); used > 1 {
		e.fatalf("qkv_append: q_out off the reference (allowance used %.3g)", used)
	}
	e.stepQ = e.stepQ[:0]
	for i, t := range tok {
		e.stepQ = append(e.stepQ, gotQ[t*H*d:(t+1)*H*d]...)
		slot := int(slots[i])
		for h := range KVH {
			a, b := e.s.rowSpan(slot/vr.PageSize, h, slot%vr.PageSize, d)
			got := reference.Decode(vr.DType, e.kPool.U8()[a:b])
			at := (t*KVH + h) * d
			if used := AllowanceUsed(vr.DType, got, want.K[at:at+d], want.KMag[at:at+d]); used > 1 {
				e.fatalf("qkv_append: token %d kv head %d: cached K off the reference (allowance used %.3g)", t, h, used)
			}
			copy(k[i][h*d:(h+1)*d], got)
		}
	}
}

// task is one sequence's part of a step: n new tokens, all of them queries.
type task struct{ id, n int }

// step appends every task's tokens (one append call), runs attention for
// their queries (prefill entry, or decode when every task has one token)
// and checks it against the dense reference; then it checks the cache and
// reclaims.
func (e *engine) step(tasks ...task) {
	e.t.Helper()
	e.stats.steps++
	var slots []int32
	var ks, vs [][]float32
	var positions []int32
	for _, tk := range tasks {
		q := e.seqs[tk.id]
		k, v := e.randRows(tk.n, e.v.HeadDimQK), e.randRows(tk.n, e.v.HeadDimV)
		for i := range tk.n {
			positions = append(positions, int32(q.kvLen()+i))
		}
		slots = append(slots, e.reserve(q, tk.n)...)
		q.k, q.v = append(q.k, k...), append(q.v, v...)
		ks, vs = append(ks, k...), append(vs, v...)
	}
	e.appendKV(slots, positions, ks, vs)
	e.checkCache()
	e.attend(tasks)
	for _, tk := range tasks {
		e.reclaim(e.seqs[tk.id])
	}
}

// attend runs attention for tasks and compares it with the reference.
func (e *engine) attend(tasks []task) {
	e.t.Helper()
	v, ps := e.v, e.v.PageSize
	c := &reference.Case{Name: "engine step", Batch: len(tasks)}
	for _, tk := range tasks {
		q := e.seqs[tk.id]
		// Dense pages for the reference: positions in order, nothing shared.
		need := (q.kvLen() + ps - 1) / ps
		pages := make([]int, need)
		for j := range pages {
			pages[j] = c.NumPages + j
		}
		c.NumPages += need
		c.Pages = append(c.Pages, pages)
		c.QLens = append(c.QLens, tk.n)
		c.KVLens = append(c.KVLens, q.kvLen())
	}
	c.KPages = make([]float32, c.NumPages*v.KVHeads*ps*v.HeadDimQK)
	c.VPages = make([]float32, c.NumPages*v.KVHeads*ps*v.HeadDimV)
	for b, tk := range tasks {
		q := e.seqs[tk.id]
		for pos := range q.kvLen() {
			for h := range v.KVHeads {
				copy(c.KPages[reference.PageIndex(v, c.Pages[b][pos/ps], h, pos%ps, 0, v.HeadDimQK):][:v.HeadDimQK], q.k[pos][h*v.HeadDimQK:])
				copy(c.VPages[reference.PageIndex(v, c.Pages[b][pos/ps], h, pos%ps, 0, v.HeadDimV):][:v.HeadDimV], q.v[pos][h*v.HeadDimV:])
			}
		}
	}
	c.Q = make([]float32, c.TotalQ()*v.QOHeads*v.HeadDimQK)
	if e.stepQ != nil {
		// qkv_append's q_out of the step's tokens, which are its queries.
		copy(c.Q, e.stepQ)
	} else {
		for i := range c.Q {
			c.Q[i] = reference.Round(v.DType, 2*e.rng.Float32()-1)
		}
	}
	wantO, wantL, mag := reference.AttentionMag(v, c)

	cb := &caseBuffers{vals: map[string]int64{"k_pages": e.kPool.Ptr(), "v_pages": e.vPool.Ptr(),
		"num_pages": int64(e.nPage), "batch_size": int64(len(tasks))}}
	defer cb.free()
	cb.add("q", e.s.enc(c.Q))
	cb.add("qo_indptr", cpurt.I32Buffer(c.QOIndptr()))
	if v.Table == ir.BlockTable {
		maxBlocks := 1
		for _, tk := range tasks {
			maxBlocks = max(maxBlocks, len(e.seqs[tk.id].pages))
		}
		table := make([]int32, len(tasks)*maxBlocks)
		lens := make([]int32, len(tasks))
		for b, tk := range tasks {
			q := e.seqs[tk.id]
			for j := range maxBlocks {
				table[b*maxBlocks+j] = -1
				if j < len(q.pages) {
					table[b*maxBlocks+j] = int32(q.pages[j])
				}
			}
			lens[b] = int32(q.kvLen())
		}
		cb.add("block_table", cpurt.I32Buffer(table))
		cb.vals["max_blocks"] = int64(maxBlocks)
		cb.add("kv_lens", cpurt.I32Buffer(lens))
	} else {
		indptr := []int32{0}
		var indices, last []int32
		for _, tk := range tasks {
			q := e.seqs[tk.id]
			for _, p := range q.pages {
				indices = append(indices, int32(p))
			}
			indptr = append(indptr, int32(len(indices)))
			last = append(last, int32(q.kvLen()-(len(q.pages)-1)*ps))
		}
		cb.add("kv_indptr", cpurt.I32Buffer(indptr))
		cb.add("kv_indices", cpurt.I32Buffer(indices))
		cb.add("kv_last_page_len", cpurt.I32Buffer(last))
	}
	o := cb.add("o", e.s.enc(nanSlice(len(wantO))))
	lse := cb.add("lse", cpurt.F32Buffer(nanSlice(len(wantL))))
	if err := e.s.SetThreads(1 + e.rng.Intn(4)); err != nil {
		e.fatalf("%v", err)
	}
	role := ir.RolePrefill
	decode := true
	for _, tk := range tasks {
		decode = decode && tk.n == 1
	}
	if decode && e.rng.Intn(2) == 0 {
		role = ir.RoleDecode
		e.stats.decodeCalls++
	}
	e.call(role, cb.vals)
	e.stats.calls++
	e.stats.rows += c.TotalQ()
	got := e.s.dec(o)
	errO, idx, okO := CompareOut(v.DType, got, wantO, mag)
	_, idxL, okL := reference.Compare(lse.F32(), wantL, Tolerance)
	r := Result{MaxErr: errO, MagErr: reference.MagErr(v.DType, got, wantO, mag)}
	record("engine "+e.s.Target+" "+v.DType.String(), r)
	e.stats.maxULP = max(e.stats.maxULP, errO)
	e.stats.maxMag = max(e.stats.maxMag, r.MagErr)
	if !okO || !okL {
		e.fatalf("%s on %s: o[%d] = %v, want %v (error %.3g); lse[%d] = %v, want %v",
			role, e.describe(tasks), idx, got[idx], wantO[idx], errO, idxL, lse.F32()[idxL], wantL[idxL])
	}
}

// describe names a step's tasks and their sequences' lengths and tables.
func (e *engine) describe(tasks []task) string {
	var parts []string
	for _, tk := range tasks {
		q := e.seqs[tk.id]
		parts = append(parts, fmt.Sprintf("seq %d (+%d, kv_len %d, pages %v)", tk.id, tk.n, q.kvLen(), q.pages))
	}
	return strings.Join(parts, ", ")
}

// checkCache compares every position a sequence can still see (its page
// not reclaimed) with its history, byte for byte.
func (e *engine) checkCache() {
	e.t.Helper()
	v, ps := e.v, e.v.PageSize
	ids := make([]int, 0, len(e.seqs))
	for id := range e.seqs {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		q := e.seqs[id]
		for pos := range q.kvLen() {
			if q.reclaimed[pos/ps] {
				continue
			}
			page := q.pages[pos/ps]
			for h := range v.KVHeads {
				a, b := e.s.rowSpan(page, h, pos%ps, v.HeadDimQK)
				if want := reference.Encode(v.DType, q.k[pos][h*v.HeadDimQK:][:v.HeadDimQK]); !bytes.Equal(e.kPool.U8()[a:b], want) {
					e.fatalf("seq %d position %d (page %d) kv head %d: cached K differs from its history", id, pos, page, h)
				}
				a, b = e.s.rowSpan(page, h, pos%ps, v.HeadDimV)
				if want := reference.Encode(v.DType, q.v[pos][h*v.HeadDimV:][:v.HeadDimV]); !bytes.Equal(e.vPool.U8()[a:b], want) {
					e.fatalf("seq %d position %d (page %d) kv head %d: cached V differs from its history", id, pos, page, h)
				}
			}
		}
	}
}

// reclaim gives back the pages of q that no query from kv_len - maxPop on
// can see (registry.ReclaimableRange).
func (e *engine) reclaim(q *seqState) {
	from := max(q.kvLen()-maxPop, q.from)
	lo, hi, err := registry.ReclaimableRange(e.v, from)
	if err != nil {
		e.fatalf("%v", err)
	}
	q.from = from
	for p := lo; p < hi; p++ {
		if q.reclaimed[p] {
			continue
		}
		q.reclaimed[p] = true
		e.release(q.pages[p], true)
		if e.mode == reclaimHidden {
			q.pages[p] = -1
		}
		e.stats.reclaimed++
	}
}

func (e *engine) add() int {
	id := e.nextID
	e.nextID++
	e.seqs[id] = &seqState{}
	return id
}

// fork starts a child of parent sharing its first pos positions (pages
// shared, the partial last one copied on the first write). A query of
// the child may come at pos, so pos must not be below the parent's
// reclaim point.
func (e *engine) fork(parent, pos int) int {
	p := e.seqs[parent]
	if pos < p.from || pos > p.kvLen() || pos < 1 {
		e.fatalf("fork of seq %d at %d outside [%d, %d]", parent, pos, p.from, p.kvLen())
	}
	id := e.add()
	q := e.seqs[id]
	n := (pos + e.v.PageSize - 1) / e.v.PageSize
	q.pages = append([]int(nil), p.pages[:n]...)
	q.reclaimed = append([]bool(nil), p.reclaimed[:n]...)
	for j, pg := range q.pages {
		if !q.reclaimed[j] {
			e.ref[pg]++
		}
	}
	q.k, q.v = append([][]float32(nil), p.k[:pos]...), append([][]float32(nil), p.v[:pos]...)
	q.from = p.from
	e.stats.forks++
	return id
}

// popn drops the last n tokens of a sequence (not below its reclaim point).
func (e *engine) popn(id, n int) {
	q := e.seqs[id]
	if q.kvLen()-n < q.from {
		e.fatalf("popn(%d, %d) below position %d", id, n, q.from)
	}
	q.k, q.v = q.k[:q.kvLen()-n], q.v[:q.kvLen()-n]
	keep := (q.kvLen() + e.v.PageSize - 1) / e.v.PageSize
	for j := keep; j < len(q.pages); j++ {
		if !q.reclaimed[j] {
			e.release(q.pages[j], false)
		}
	}
	q.pages, q.reclaimed = q.pages[:keep], q.reclaimed[:keep]
	e.stats.pops++
}

func (e *engine) remove(id int) {
	q := e.seqs[id]
	for j, p := range q.pages {
		if !q.reclaimed[j] {
			e.release(p, false)
		}
	}
	delete(e.seqs, id)
	e.stats.removes++
}

// live lists the sequences in id order.
func (e *engine) live() []int {
	var ids []int
	for id := range e.seqs {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// play runs TVM's operation mix as a script, then random steps.
func (e *engine) play(long bool) {
	// Ragged, chunked prefill of four sequences past the window.
	s0, s1, s2, s3 := e.add(), e.add(), e.add(), e.add()
	e.step(task{s0, 30}, task{s1, 7})
	e.step(task{s2, 50})
	e.step(task{s0, 45}, task{s1, 60}, task{s3, 19})
	e.step(task{s2, 50}, task{s3, 40})
	// Decode rounds.
	for range 6 {
		e.step(task{s0, 1}, task{s1, 1}, task{s2, 1}, task{s3, 1})
	}
	// Forks: at the parent's end, and mid-page inside its window.
	c0 := e.fork(s0, e.seqs[s0].kvLen())
	c1 := e.fork(s2, e.seqs[s2].kvLen()-2)
	e.step(task{c0, 12}, task{c1, 9})
	e.step(task{s0, 1}, task{c0, 1}, task{s2, 1}, task{c1, 1})
	// popn and appending again; a removal frees pages for the others.
	e.popn(s1, 2)
	e.popn(c1, 3)
	e.step(task{s1, 5}, task{c1, 1})
	e.remove(s3)
	s4 := e.add()
	e.step(task{s4, 33}, task{s1, 1}, task{c1, 24})
	for range 4 {
		e.step(task{s0, 1}, task{c0, 1}, task{s2, 1}, task{c1, 1}, task{s4, 1}, task{s1, 1})
	}
	// Speculative trees accepted in place, and pages moved out and back.
	e.treeStep(c0, 7)
	e.treeStep(s4, 1)
	e.moveOutAndBack(s2)
	e.step(task{s0, 1}, task{c0, 1}, task{s2, 1}, task{c1, 1}, task{s4, 1}, task{s1, 1})
	steps := 26
	if long {
		steps = 400
	}
	for range steps {
		e.randomStep()
	}
}

// randomStep draws one engine operation: mostly decode and chunked
// prefill over a random subset, sometimes a fork, popn, removal or a new
// sequence; sequences that grew long are removed.
func (e *engine) randomStep() {
	ids := e.live()
	for _, id := range ids {
		if e.seqs[id].kvLen() > 300 {
			e.remove(id)
		}
	}
	ids = e.live()
	switch r := e.rng.Intn(20); {
	case len(ids) == 0 || r < 2 && len(ids) < 8:
		id := e.add()
		e.step(task{id, 1 + e.rng.Intn(60)})
		return
	case r < 4 && len(ids) < 8 && e.seqs[ids[0]].kvLen() > 0:
		parent := ids[0] // the oldest: most of its pages are reclaimed
		if e.rng.Intn(2) == 0 {
			parent = ids[e.rng.Intn(len(ids))]
		}
		p := e.seqs[parent]
		if p.kvLen() == 0 {
			break
		}
		pos := max(p.from, 1) + e.rng.Intn(p.kvLen()-max(p.from, 1)+1)
		id := e.fork(parent, pos)
		e.step(task{id, 1 + e.rng.Intn(20)})
		return
	case r < 6:
		id := ids[e.rng.Intn(len(ids))]
		q := e.seqs[id]
		if n := min(q.kvLen()-q.from, 1+e.rng.Intn(maxPop)); n > 0 {
			e.popn(id, n)
		}
	case r < 7 && len(ids) > 3:
		e.remove(ids[e.rng.Intn(len(ids))])
		ids = e.live()
	case r < 9:
		e.treeStep(ids[e.rng.Intn(len(ids))], 1+e.rng.Intn(12))
		return
	case r < 10:
		e.moveOutAndBack(ids[e.rng.Intn(len(ids))])
	}
	// A step over a random non-empty subset; chunked prefill or decode.
	prefill := e.rng.Intn(3) == 0
	var tasks []task
	for _, id := range ids {
		if e.rng.Intn(3) == 0 {
			continue
		}
		n := 1
		if prefill {
			n = 1 + e.rng.Intn(40)
		}
		tasks = append(tasks, task{id, n})
	}
	if len(tasks) == 0 {
		tasks = append(tasks, task{ids[0], 1})
	}
	e.step(tasks...)
}

// slotOf is the slot of position pos of q.
func (e *engine) slotOf(q *seqState, pos int) int32 {
	ps := e.v.PageSize
	return int32(q.pages[pos/ps]*ps + pos%ps)
}

// treeStep appends a speculative tree of m tokens to sequence id and
// attends over them (as a prefill), then accepts a random path through
// the generated compact_copy, as TVM's engine does: accepted token k of
// the tree (k-th in position order, the first always) moves from its tree
// position to base + k, in one call together with an empty sequence, and
// the rest is dropped. The cache and the next steps must see the
// compacted history. Without compact_copy it is an ordinary step.
func (e *engine) treeStep(id, m int) {
	e.t.Helper()
	if _, ok := e.s.Entries[ir.RoleCompactCopy]; !ok {
		e.step(task{id, m})
		return
	}
	e.stats.steps++
	q := e.seqs[id]
	base := q.kvLen()
	k, v := e.randRows(m, e.v.HeadDimQK), e.randRows(m, e.v.HeadDimV)
	slots := e.reserve(q, m)
	q.k, q.v = append(q.k, k...), append(q.v, v...)
	positions := make([]int32, m)
	for i := range positions {
		positions[i] = int32(base + i)
	}
	e.appendKV(slots, positions, k, v)
	e.attend([]task{{id, m}})
	accepted := []int{0}
	for j := 1; j < m; j++ {
		if e.rng.Intn(2) == 0 {
			accepted = append(accepted, j)
		}
	}
	var src, dst []int32
	for kk, j := range accepted {
		if j != kk {
			src, dst = append(src, e.slotOf(q, base+j)), append(dst, e.slotOf(q, base+kk))
		}
	}
	indptr := []int32{0, 0, int32(len(src))} // an empty sequence, then this one
	cb := &caseBuffers{vals: map[string]int64{"k_pages": e.kPool.Ptr(), "v_pages": e.vPool.Ptr(),
		"num_pages": int64(e.nPage), "batch_size": 2}}
	defer cb.free()
	cb.add("copy_indptr", cpurt.I32Buffer(indptr))
	cb.add("copy_src", cpurt.I32Buffer(append(src, 0)))
	cb.add("copy_dst", cpurt.I32Buffer(append(dst, 0)))
	e.call(ir.RoleCompactCopy, cb.vals)
	e.stats.trees++
	e.stats.compacted += len(src)
	nk, nv := q.k[:base:base], q.v[:base:base]
	for _, j := range accepted {
		nk, nv = append(nk, q.k[base+j]), append(nv, q.v[base+j])
	}
	// Drop the rest as popn does (the tree is past the reclaim point).
	q.k, q.v = q.k[:base+len(accepted)], q.v[:base+len(accepted)]
	copy(q.k[base:], nk[base:])
	copy(q.v[base:], nv[base:])
	keep := (q.kvLen() + e.v.PageSize - 1) / e.v.PageSize
	for j := keep; j < len(q.pages); j++ {
		if !q.reclaimed[j] {
			e.release(q.pages[j], false)
		}
	}
	q.pages, q.reclaimed = q.pages[:keep], q.reclaimed[:keep]
	e.checkCache()
	e.reclaim(q)
}

// moveOutAndBack moves the pages sequence id alone holds out of the pool
// with the generated gather_pages (a transfer to another engine, or an
// offload), frees them (filled with NaN/Inf, as any freed page), takes
// other pages from the free list and moves the buffer into them with
// scatter_pages. The cache must then hold the sequence's history.
func (e *engine) moveOutAndBack(id int) {
	e.t.Helper()
	_, g := e.s.Entries[ir.RoleGatherPages]
	_, sc := e.s.Entries[ir.RoleScatterPages]
	if !g || !sc {
		return
	}
	q := e.seqs[id]
	var which []int
	var ids []int32
	for j, p := range q.pages {
		if !q.reclaimed[j] && e.ref[p] == 1 {
			which, ids = append(which, j), append(ids, int32(p))
		}
	}
	if len(ids) == 0 {
		return
	}
	kb := cpurt.NewBuffer(len(ids) * len(e.poisonK))
	vb := cpurt.NewBuffer(len(ids) * len(e.poisonV))
	defer kb.Free()
	defer vb.Free()
	move := func(role ir.Role, ids []int32) {
		cb := &caseBuffers{vals: map[string]int64{"k_pages": e.kPool.Ptr(), "v_pages": e.vPool.Ptr(),
			"num_pages": int64(e.nPage), "n": int64(len(ids)), "k_buf": kb.Ptr(), "v_buf": vb.Ptr()}}
		defer cb.free()
		cb.add("page_ids", cpurt.I32Buffer(ids))
		e.call(role, cb.vals)
	}
	move(ir.RoleGatherPages, ids)
	for _, p := range ids {
		e.release(int(p), false)
	}
	// Fresh pages: the free list is LIFO, so the pages come back in
	// reverse order (a page gets its own id back only in the middle).
	fresh := make([]int32, len(ids))
	for i := range fresh {
		fresh[i] = int32(e.alloc())
	}
	move(ir.RoleScatterPages, fresh)
	for i, j := range which {
		q.pages[j] = int(fresh[i])
	}
	e.stats.moved += len(ids)
	e.checkCache()
}
