package conformance

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"slices"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/reference"
)

// moveCase is one case of the page kernels that move rows and pages
// (read_kv, gather_pages, scatter_pages, compact_copy): the status it must
// return (0: the outputs equal the reference's model), whether only an
// entry that validates its tables can return it (a bad slot or page id in
// device memory: a GPU kernel skips it instead) and how it breaks a valid
// call: its int32 arrays by argument name and its scalars.
type moveCase struct {
	name    string
	st      int32
	cpuOnly bool
	brk     func(a map[string][]int32, vals map[string]int64)
	// every: read_kv over a pool holding every byte value.
	every bool
}

// judge compares a case's outputs (the buffers named in want, each with
// its model) and status.
func judge(r *Result, c moveCase, st int32, err error, cb *caseBuffers, want map[string][]byte, same func(name string, got, want []byte) string) {
	r.Pass = err == nil && st == c.st
	r.Note = fmt.Sprintf("status %d (want %d)", st, c.st)
	if err != nil {
		r.Note = err.Error()
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if d := same(name, cb.byName[name].U8(), want[name]); d != "" {
			r.Pass = false
			r.Note += d
		}
	}
}

// randomBytes are n random bytes: an output's contents before the call,
// which a skipped row or a failed call must leave.
func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	rng.Read(b)
	return b
}

// runPageMoves checks read_kv, gather_pages, scatter_pages and
// compact_copy, whichever the suite has.
func (s *Suite) runPageMoves(rng *rand.Rand) []Result {
	var out []Result
	run := func(role ir.Role, cases []moveCase, call func(c moveCase) Result) {
		if _, ok := s.Entries[role]; !ok {
			return
		}
		for _, c := range cases {
			if c.cpuOnly && !s.checksTables {
				continue
			}
			r := call(c)
			r.Variant, r.Kernel, r.Case = s.V.Name, s.Entries[role].Symbol, c.name
			out = append(out, r)
		}
	}
	run(ir.RoleReadKV, s.readKVCases(), func(c moveCase) Result { return s.runReadKV(rng, c) })
	for _, scatter := range []bool{false, true} {
		role := ir.RoleGatherPages
		if scatter {
			role = ir.RoleScatterPages
		}
		run(role, s.movePagesCases(scatter), func(c moveCase) Result { return s.runMovePages(rng, c, scatter) })
	}
	run(ir.RoleCompactCopy, s.compactCopyCases(), func(c moveCase) Result { return s.runCompactCopy(rng, c) })
	return out
}

// scalarCases are the bad scalars every kernel with a count and a pool
// rejects on every target: a negative count or num_pages (BAD_ARGUMENT),
// a count whose items pass 2^31-1 (TOO_LARGE; when rows per count > 1),
// and a huge num_pages, which is a valid pool whose first pages are the
// real ones.
func scalarCases(prefix, count string, rows int) []moveCase {
	set := func(name string, x int64) func(map[string][]int32, map[string]int64) {
		return func(_ map[string][]int32, vals map[string]int64) { vals[name] = x }
	}
	cs := []moveCase{
		{name: prefix + ": num_pages INT32_MAX (a large pool)", brk: set("num_pages", i32max)},
		{name: prefix + ": " + count + " -1", st: lower.ErrBadArgument, brk: set(count, -1)},
		{name: prefix + ": " + count + " INT32_MIN", st: lower.ErrBadArgument, brk: set(count, i32min)},
		{name: prefix + ": num_pages -1", st: lower.ErrBadArgument, brk: set("num_pages", -1)},
		{name: prefix + ": num_pages INT32_MIN", st: lower.ErrBadArgument, brk: set("num_pages", i32min)},
	}
	if rows > 1 {
		cs = append(cs, moveCase{name: prefix + ": " + count + " INT32_MAX", st: lower.ErrTooLarge, brk: set(count, i32max)})
	}
	return cs
}

// setAt returns a break that sets entry i of array name to x.
func setAt(name string, i int, x int32) func(map[string][]int32, map[string]int64) {
	return func(a map[string][]int32, _ map[string]int64) { a[name][i] = x }
}

func (s *Suite) readKVCases() []moveCase {
	cs := []moveCase{
		{name: "read_kv rows (some skipped)"},
		{name: "read_kv: every stored value", every: true},
		{name: "read_kv: slot outside the pool", st: lower.ErrBadSlot, cpuOnly: true, brk: func(a map[string][]int32, vals map[string]int64) {
			a["position_map"][6] = int32(vals["num_pages"] * int64(s.V.PageSize))
		}},
		{name: "read_kv: slot -2", st: lower.ErrBadSlot, cpuOnly: true, brk: setAt("position_map", 0, -2)},
		{name: "read_kv: slot INT32_MAX", st: lower.ErrBadSlot, cpuOnly: true, brk: setAt("position_map", 1, i32max)},
		{name: "read_kv: slot INT32_MIN", st: lower.ErrBadSlot, cpuOnly: true, brk: setAt("position_map", 3, i32min)},
	}
	return append(cs, scalarCases("read_kv", "n", s.V.KVHeads)...)
}

// runReadKV reads n = 7 slots (every third -1) of a random pool, or, for
// "every stored value", every slot of a pool holding every byte value
// (every 8-bit code, NaN included, or f16/bf16/f32 bit patterns), and
// compares each output element with the reference's value rounded to f32
// and then to the dtype (NaN matches NaN).
func (s *Suite) runReadKV(rng *rand.Rand, c moveCase) Result {
	v := s.V
	pa := s.pools()
	every := c.every
	numPages := max(5, (7+v.PageSize-1)/v.PageSize)
	if every {
		numPages = max(5, (256/(v.KVHeads*min(pa[0].d, pa[1].d))+v.PageSize)/v.PageSize)
	}
	pool := s.randomPool(rng, numPages)
	slots := numPages * v.PageSize
	n := 7
	if every {
		n = slots
		for i := range pool.k {
			pool.k[i] = byte(i)
		}
		for i := range pool.v {
			pool.v[i] = byte(i * 7)
		}
	}
	perm := rng.Perm(slots)
	pm := make([]int32, n)
	for i := range pm {
		pm[i] = int32(perm[i])
		if i%3 == 2 && !every {
			pm[i] = -1
		}
	}
	ks, vs := s.appendScales(rng)
	a := map[string][]int32{"position_map": pm}
	vals := map[string]int64{"n": int64(n), "num_pages": int64(numPages)}
	if c.brk != nil {
		c.brk(a, vals)
	}
	size := reference.Size(v.DType)
	cb := &caseBuffers{vals: vals}
	defer cb.free()
	kp := cb.add(pa[0].pages, cpurt.U8Buffer(pool.k))
	vp := cb.add(pa[1].pages, cpurt.U8Buffer(pool.v))
	s.addPoolScales(cb, ks, vs)
	cb.add("position_map", cpurt.I32Buffer(pm))
	want := map[string][]byte{}
	for p, sc := range map[int][]float32{0: ks, 1: vs} {
		before := randomBytes(rng, n*v.KVHeads*pa[p].d*size)
		cb.add(pa[p].out, cpurt.U8Buffer(before))
		w := bytes.Clone(before)
		if c.st == 0 {
			pool := map[int][]byte{0: pool.k, 1: pool.v}[p]
			for row, xs := range reference.ReadKV(v, pool, pa[p].d, pm, sc) {
				for j, x := range xs {
					copy(w[(row*pa[p].d+j)*size:], reference.ReadKVBytes(v, x))
				}
			}
		}
		want[pa[p].out] = w
	}
	st, err := s.run(ir.RoleReadKV, cb)
	var r Result
	judge(&r, c, st, err, cb, want, func(name string, got, want []byte) string {
		for i := 0; i < len(want); i += size {
			if !reference.SameOrNaN(v.DType, got[i:i+size], want[i:i+size]) {
				return fmt.Sprintf("; %s: element %d is %x, want %x", name, i/size, got[i:i+size], want[i:i+size])
			}
		}
		return ""
	})
	if !bytes.Equal(kp.U8(), pool.k) || !bytes.Equal(vp.U8(), pool.v) {
		r.Pass, r.Note = false, r.Note+"; read_kv wrote its pools"
	}
	return r
}

func (s *Suite) movePagesCases(scatter bool) []moveCase {
	name := "gather_pages"
	if scatter {
		name = "scatter_pages"
	}
	cs := []moveCase{
		{name: name + " pages"},
		{name: name + ": page id num_pages", st: lower.ErrBadPageID, cpuOnly: true, brk: func(a map[string][]int32, vals map[string]int64) {
			a["page_ids"][2] = int32(vals["num_pages"])
		}},
		{name: name + ": page id -1", st: lower.ErrBadPageID, cpuOnly: true, brk: setAt("page_ids", 0, -1)},
		{name: name + ": page id INT32_MAX", st: lower.ErrBadPageID, cpuOnly: true, brk: setAt("page_ids", 1, i32max)},
		{name: name + ": page id INT32_MIN", st: lower.ErrBadPageID, cpuOnly: true, brk: setAt("page_ids", 2, i32min)},
	}
	twice := func(a map[string][]int32, _ map[string]int64) { a["page_ids"][2] = a["page_ids"][0] }
	if scatter {
		cs = append(cs, moveCase{name: name + ": a page id twice", st: lower.ErrBadPageID, cpuOnly: true, brk: twice})
	} else {
		cs = append(cs, moveCase{name: name + ": a page id twice (valid)", brk: twice})
	}
	return append(cs, scalarCases(name, "n", s.V.PageSize*s.V.KVHeads)...)
}

// runMovePages moves n = 3 pages of a 5-page pool to (gather) or from
// (scatter) random buffers and compares buffers and pools with the
// reference's byte model.
func (s *Suite) runMovePages(rng *rand.Rand, c moveCase, scatter bool) Result {
	v := s.V
	pa := s.pools()
	pool := s.randomPool(rng, 5)
	ids := make([]int32, 3)
	for i, p := range rng.Perm(5)[:3] {
		ids[i] = int32(p)
	}
	a := map[string][]int32{"page_ids": ids}
	vals := map[string]int64{"n": 3, "num_pages": 5}
	if c.brk != nil {
		c.brk(a, vals)
	}
	cb := &caseBuffers{vals: vals}
	defer cb.free()
	role := ir.RoleGatherPages
	if scatter {
		role = ir.RoleScatterPages
	}
	want := map[string][]byte{}
	for p, pl := range [][]byte{pool.k, pool.v} {
		bufBytes := randomBytes(rng, 3*reference.PageBytes(v, pa[p].d))
		cb.add(pa[p].pages, cpurt.U8Buffer(pl))
		cb.add(pa[p].buf, cpurt.U8Buffer(bufBytes))
		wp, wb := bytes.Clone(pl), bytes.Clone(bufBytes)
		if c.st == 0 {
			if scatter {
				reference.ScatterPages(v, wp, pa[p].d, ids, bufBytes)
			} else {
				wb = reference.GatherPages(v, pl, pa[p].d, ids)
			}
		}
		want[pa[p].pages], want[pa[p].buf] = wp, wb
	}
	cb.add("page_ids", cpurt.I32Buffer(ids))
	st, err := s.run(role, cb)
	var r Result
	judge(&r, c, st, err, cb, want, func(name string, got, want []byte) string { return firstDiff(name, got, want) })
	return r
}

func (s *Suite) compactCopyCases() []moveCase {
	cs := []moveCase{
		{name: "compact_copy: accepted trees, a left shift, an empty sequence"},
		{name: "compact_copy: copy_indptr[0] -1", st: lower.ErrBadKVIndptr, cpuOnly: true, brk: setAt("copy_indptr", 0, -1)},
		{name: "compact_copy: copy_indptr decreasing", st: lower.ErrBadKVIndptr, cpuOnly: true, brk: func(a map[string][]int32, _ map[string]int64) {
			a["copy_indptr"][2] = a["copy_indptr"][1] - 1
		}},
		{name: "compact_copy: copy_indptr INT32_MIN", st: lower.ErrBadKVIndptr, cpuOnly: true, brk: setAt("copy_indptr", 3, i32min)},
		{name: "compact_copy: src outside the pool", st: lower.ErrBadSlot, cpuOnly: true, brk: func(a map[string][]int32, vals map[string]int64) {
			a["copy_src"][5] = int32(vals["num_pages"] * int64(s.V.PageSize))
		}},
		{name: "compact_copy: dst -1", st: lower.ErrBadSlot, cpuOnly: true, brk: setAt("copy_dst", 9, -1)},
		{name: "compact_copy: src INT32_MAX", st: lower.ErrBadSlot, cpuOnly: true, brk: setAt("copy_src", 1, i32max)},
		{name: "compact_copy: dst INT32_MIN", st: lower.ErrBadSlot, cpuOnly: true, brk: setAt("copy_dst", 14, i32min)},
	}
	return append(cs, scalarCases("compact_copy", "batch_size", s.V.KVHeads)...)
}

// runCompactCopy runs four sequences over disjoint slots of a random pool:
// an accepted tree (positions 2, 5, 6 of 8 move to 1, 2, 3: a later copy
// overwrites a slot an earlier one read), a left shift by one over 8
// positions (each copy reads the slot the next one writes), an empty
// sequence and 6 random copies (a slot onto itself included). The first
// entry of copy_src and copy_dst is before copy_indptr[0] and holds
// INT32_MIN: it is never read.
func (s *Suite) runCompactCopy(rng *rand.Rand, c moveCase) Result {
	v := s.V
	pa := s.pools()
	numPages := max(5, (8+8+5+v.PageSize-1)/v.PageSize)
	pool := s.randomPool(rng, numPages)
	perm := rng.Perm(numPages * v.PageSize)
	seq := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(perm[0])
			perm = perm[1:]
		}
		return out
	}
	src, dst := []int32{i32min}, []int32{i32min}
	indptr := []int32{1}
	tree := seq(8)
	for k, p := range []int{2, 5, 6} {
		src, dst = append(src, tree[p]), append(dst, tree[k+1])
	}
	indptr = append(indptr, int32(len(src)))
	shift := seq(8)
	for k := range 7 {
		src, dst = append(src, shift[k+1]), append(dst, shift[k])
	}
	indptr = append(indptr, int32(len(src)), int32(len(src)))
	own := seq(5)
	for range 5 {
		src, dst = append(src, own[rng.Intn(5)]), append(dst, own[rng.Intn(5)])
	}
	src, dst = append(src, own[3]), append(dst, own[3])
	indptr = append(indptr, int32(len(src)))
	a := map[string][]int32{"copy_indptr": indptr, "copy_src": src, "copy_dst": dst}
	vals := map[string]int64{"batch_size": 4, "num_pages": int64(numPages)}
	if c.brk != nil {
		c.brk(a, vals)
	}
	cb := &caseBuffers{vals: vals}
	defer cb.free()
	want := map[string][]byte{}
	for p, pl := range [][]byte{pool.k, pool.v} {
		cb.add(pa[p].pages, cpurt.U8Buffer(pl))
		w := bytes.Clone(pl)
		if c.st == 0 {
			reference.CompactCopy(v, w, pa[p].d, indptr, src, dst)
		}
		want[pa[p].pages] = w
	}
	cb.add("copy_indptr", cpurt.I32Buffer(indptr))
	cb.add("copy_src", cpurt.I32Buffer(src))
	cb.add("copy_dst", cpurt.I32Buffer(dst))
	st, err := s.run(ir.RoleCompactCopy, cb)
	var r Result
	judge(&r, c, st, err, cb, want, func(name string, got, want []byte) string { return firstDiff(name, got, want) })
	return r
}
