package conformance

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/reference"
)

// The bad-input matrix: corruptions of a valid two-sequence case, with the
// INT32 extremes of every class (decreasing and huge indptrs, INT32_MAX and
// INT32_MIN lengths, negative and huge page ids and sizes, a call with more
// than 2^31-1 work items), each with the status it must return and outputs
// that must stay untouched. Every buffer is a guarded cpurt.Buffer, so a
// read or write outside it faults instead of passing.

const (
	i32max = math.MaxInt32
	i32min = math.MinInt32
)

// BadInput is a corruption of a valid case and the status it must produce.
type BadInput struct {
	Name   string
	Status int32
	// Prefill marks a corruption of qo_indptr or of the query layout, which
	// only the prefill entry takes.
	Prefill bool
	// Scalar marks a corruption of scalar arguments only, which the CUDA
	// launchers check on the host as well.
	Scalar bool
	Break  func(bc *BadCase)
}

// BadCase is the case a BadInput corrupts: the variant, the scalar
// arguments and the buffers by name.
type BadCase struct {
	V *ir.Variant
	// Tiling is the work-item shape of the target the entries are for.
	Tiling lower.Tiling
	Vals   map[string]int64
	cb     *caseBuffers
}

// I32 views buffer name as int32.
func (bc *BadCase) I32(name string) []int32 { return bc.cb.byName[name].I32() }

// Replace gives argument name a new guarded buffer holding xs.
func (bc *BadCase) Replace(name string, xs []int32) { bc.cb.add(name, cpurt.I32Buffer(xs)) }

func setElem(name string, i int, x int32) func(*BadCase) {
	return func(bc *BadCase) { bc.I32(name)[i] = x }
}

func setScalar(name string, x int64) func(*BadCase) {
	return func(bc *BadCase) { bc.Vals[name] = x }
}

// badCaseSpec is the valid case every bad input starts from: two sequences
// of 3 and 2 pages (kv_indptr 0, 3, 5), with 3 and 2 queries (prefill) or
// one each (decode).
func badCaseSpec(v *ir.Variant, role ir.Role) reference.CaseSpec {
	ps := v.PageSize
	q := []int{3, 2}
	if role == ir.RoleDecode {
		q = []int{1, 1}
	}
	return reference.CaseSpec{Name: "bad input", QLens: q, KVLens: []int{2*ps + 1, ps + 1}}
}

// BadInputs lists the input errors every attention entry must reject, for
// the variant's page table and masks.
func BadInputs(v *ir.Variant) []BadInput {
	ps := int32(v.PageSize)
	out := []BadInput{
		{Name: "batch_size -1", Status: lower.ErrBadArgument, Scalar: true, Break: setScalar("batch_size", -1)},
		{Name: "batch_size INT32_MIN", Status: lower.ErrBadArgument, Scalar: true, Break: setScalar("batch_size", i32min)},
		{Name: "num_pages -1", Status: lower.ErrBadArgument, Scalar: true, Break: setScalar("num_pages", -1)},
		{Name: "num_pages INT32_MIN", Status: lower.ErrBadArgument, Scalar: true, Break: setScalar("num_pages", i32min)},
		{Name: "decreasing qo_indptr", Status: lower.ErrBadQOIndptr, Prefill: true, Break: setElem("qo_indptr", 1, -1)},
		{Name: "qo_indptr[0] INT32_MIN", Status: lower.ErrBadQOIndptr, Prefill: true, Break: setElem("qo_indptr", 0, i32min)},
		{Name: "qo_indptr[1] INT32_MAX, then decreasing", Status: lower.ErrBadQOIndptr, Prefill: true, Break: setElem("qo_indptr", 1, i32max)},
		{Name: "qo_indptr[2] INT32_MAX (q_len > 2^30)", Status: lower.ErrBadQOIndptr, Prefill: true, Break: setElem("qo_indptr", 2, i32max)},
		{Name: "q_len > kv_len", Status: lower.ErrQLenExceedsKVLen, Prefill: true, Break: func(bc *BadCase) {
			// Sequence 0 (kv_len = 2*page_size+1) gets one query more than it caches.
			qo := bc.I32("qo_indptr")
			qo[1], qo[2] = 2*ps+2, 2*ps+2
		}},
		{Name: "more than 2^31-1 work items", Status: lower.ErrTooLarge, Prefill: true, Break: tooManyItems},
	}
	if v.Table == ir.BlockTable {
		out = append(out, []BadInput{
			{Name: "page id >= num_pages", Status: lower.ErrBadPageID, Break: setScalar("num_pages", 1)},
			{Name: "page id -2", Status: lower.ErrBadPageID, Break: setElem("block_table", 0, -2)},
			{Name: "page id INT32_MIN", Status: lower.ErrBadPageID, Break: setElem("block_table", 1, i32min)},
			{Name: "page id INT32_MAX", Status: lower.ErrBadPageID, Break: setElem("block_table", 4, i32max)},
			{Name: "kv_len beyond the table", Status: lower.ErrBadKVLen, Break: func(bc *BadCase) {
				bc.I32("kv_lens")[1] = int32(bc.Vals["max_blocks"])*ps + 1
			}},
			{Name: "kv_lens -1", Status: lower.ErrBadKVLen, Break: setElem("kv_lens", 0, -1)},
			{Name: "kv_lens INT32_MIN", Status: lower.ErrBadKVLen, Break: setElem("kv_lens", 1, i32min)},
			{Name: "kv_lens INT32_MAX", Status: lower.ErrBadKVLen, Break: setElem("kv_lens", 0, i32max)},
			{Name: "max_blocks -1", Status: lower.ErrBadArgument, Scalar: true, Break: setScalar("max_blocks", -1)},
			{Name: "max_blocks INT32_MIN", Status: lower.ErrBadArgument, Scalar: true, Break: setScalar("max_blocks", i32min)},
		}...)
	} else {
		out = append(out, []BadInput{
			{Name: "page id >= num_pages", Status: lower.ErrBadPageID, Break: setScalar("num_pages", 1)},
			{Name: "page id -3", Status: lower.ErrBadPageID, Break: setElem("kv_indices", 0, -3)},
			{Name: "page id -2", Status: lower.ErrBadPageID, Break: setElem("kv_indices", 3, -2)},
			{Name: "page id INT32_MIN", Status: lower.ErrBadPageID, Break: setElem("kv_indices", 2, i32min)},
			{Name: "page id INT32_MAX", Status: lower.ErrBadPageID, Break: setElem("kv_indices", 4, i32max)},
			{Name: "decreasing kv_indptr", Status: lower.ErrBadKVIndptr, Break: setElem("kv_indptr", 1, -1)},
			{Name: "kv_indptr[0] INT32_MIN", Status: lower.ErrBadKVIndptr, Break: setElem("kv_indptr", 0, i32min)},
			{Name: "kv_indptr[1] INT32_MIN", Status: lower.ErrBadKVIndptr, Break: setElem("kv_indptr", 1, i32min)},
			{Name: "kv_indptr[1] INT32_MAX, then decreasing", Status: lower.ErrBadKVIndptr, Break: setElem("kv_indptr", 1, i32max)},
			// 2^31-4 pages: the length is rejected before any kv_indices
			// entry past the 5 real ones is read.
			{Name: "kv_indptr[2] INT32_MAX (kv_len > 2^30)", Status: lower.ErrBadKVLen, Break: setElem("kv_indptr", 2, i32max)},
			{Name: "kv_len 2^30+1", Status: lower.ErrBadKVLen, Break: func(bc *BadCase) {
				bc.I32("kv_indptr")[2] = 3 + (1<<30)/ps + 1
				bc.I32("kv_last_page_len")[1] = 1
			}},
			// Empty sequences starting at INT32_MAX: nothing to read.
			{Name: "kv_indptr all INT32_MAX", Status: lower.ErrQLenExceedsKVLen, Break: func(bc *BadCase) {
				for i := range bc.I32("kv_indptr") {
					bc.I32("kv_indptr")[i] = i32max
				}
			}},
			{Name: "last_page_len 0", Status: lower.ErrBadLastPageLen, Break: setElem("kv_last_page_len", 0, 0)},
			{Name: "last_page_len > page_size", Status: lower.ErrBadLastPageLen, Break: setElem("kv_last_page_len", 0, 1<<20)},
			{Name: "last_page_len INT32_MAX", Status: lower.ErrBadLastPageLen, Break: setElem("kv_last_page_len", 1, i32max)},
			{Name: "last_page_len INT32_MIN", Status: lower.ErrBadLastPageLen, Break: setElem("kv_last_page_len", 0, i32min)},
		}...)
	}
	for _, m := range v.Masks {
		switch m.Kind {
		case ir.MaskTree:
			out = append(out, []BadInput{
				{Name: "tree_order_indptr one row short", Status: lower.ErrBadMaskIndptr, Break: func(bc *BadCase) { bc.I32("tree_order_indptr")[1]-- }},
				{Name: "tree_order_indptr[0] INT32_MIN", Status: lower.ErrBadMaskIndptr, Break: setElem("tree_order_indptr", 0, i32min)},
				{Name: "tree_order_indptr[2] INT32_MAX", Status: lower.ErrBadMaskIndptr, Break: setElem("tree_order_indptr", 2, i32max)},
				{Name: "tree rows past total_q", Status: lower.ErrBadMaskIndptr, Break: func(bc *BadCase) {
					ti := bc.I32("tree_order_indptr")
					shift := ti[len(ti)-1]
					for i := range ti {
						ti[i] += shift
					}
				}},
			}...)
		case ir.MaskCustom:
			out = append(out, []BadInput{
				{Name: "mask_indptr too few bytes", Status: lower.ErrBadMaskIndptr, Break: func(bc *BadCase) {
					mi := bc.I32("mask_indptr")
					mi[1] = mi[0]
				}},
				{Name: "mask_indptr[0] -1", Status: lower.ErrBadMaskIndptr, Break: setElem("mask_indptr", 0, -1)},
				{Name: "mask_indptr[1] INT32_MIN", Status: lower.ErrBadMaskIndptr, Break: setElem("mask_indptr", 1, i32min)},
			}...)
		}
	}
	if v.NonCausal() {
		// mask none takes any q_len and kv_len (cross attention).
		kept := out[:0]
		for _, b := range out {
			if b.Status != lower.ErrQLenExceedsKVLen {
				kept = append(kept, b)
			}
		}
		out = kept
	}
	return out
}

// tooManyItems makes a valid-looking call that needs more than 2^31-1
// prefill work items: sequence 0 has 2^16 queries over 2^16 cached tokens
// (all in page 0), and enough empty sequences follow that batch x kv heads
// x head tiles x query tiles passes 2^31. Computed in i32 the count wraps
// and the call returns 0 having computed nothing. Only sequence 0's table
// row is ever read, so the block table holds just that row.
func tooManyItems(bc *BadCase) {
	v := bc.V
	t := bc.Tiling
	units := v.KVHeads * v.GroupSize() / t.Heads(v.GroupSize())
	const n = 1 << 16
	qt := t.QTile(v.GroupSize())
	tiles := (n + qt - 1) / qt
	batch := (1<<31)/(units*tiles) + 1
	ps := v.PageSize
	pages := (n + ps - 1) / ps
	fill := func(first, rest int32) []int32 {
		xs := make([]int32, batch+1)
		for i := 1; i < len(xs); i++ {
			xs[i] = rest
		}
		xs[0] = first
		return xs
	}
	bc.Vals["batch_size"] = int64(batch)
	bc.Replace("qo_indptr", fill(0, n))
	if v.Table == ir.BlockTable {
		bc.Vals["max_blocks"] = int64(pages)
		bc.Replace("block_table", make([]int32, pages))
		bc.Replace("kv_lens", fill(n, 0)[:batch])
	} else {
		bc.Replace("kv_indptr", fill(0, int32(pages)))
		bc.Replace("kv_indices", make([]int32, pages))
		bc.Replace("kv_last_page_len", fill(int32(n-(pages-1)*ps), 0)[:batch])
	}
	if _, ok := bc.cb.byName["tree_order_indptr"]; ok {
		bc.Replace("tree_order_indptr", fill(0, n))
	}
	if _, ok := bc.cb.byName["mask_indptr"]; ok {
		bc.Replace("mask_indptr", fill(0, n/8*n))
	}
}

// RunBadInputs checks that the prefill and decode entries return each bad
// input's status and leave the outputs untouched. On CUDA only the scalar
// corruptions apply (the launchers check scalars on the host and trust the
// tables in device memory), plus a grid past 2^31-1 blocks.
func (s *Suite) RunBadInputs(seed int64) []Result {
	v := s.V
	var out []Result
	for _, role := range []ir.Role{ir.RolePrefill, ir.RoleDecode} {
		if _, ok := s.Entries[role]; !ok {
			continue
		}
		bads := BadInputs(v)
		if !s.checksTables {
			var scalar []BadInput
			for _, b := range bads {
				if b.Scalar {
					scalar = append(scalar, b)
				}
			}
			bads = scalar
			if role == ir.RoleDecode && v.KVHeads > 1 { // batch x kv heads blocks pass 2^31-1
				bads = append(bads, BadInput{Name: "batch_size INT32_MAX (grid > 2^31-1)", Status: lower.ErrTooLarge, Break: setScalar("batch_size", i32max)})
			}
		}
		for _, bad := range bads {
			if bad.Prefill && role != ir.RolePrefill {
				continue
			}
			out = append(out, s.runBad(role, bad, seed))
		}
	}
	return out
}

// runBad runs one bad input on role's entry.
func (s *Suite) runBad(role ir.Role, bad BadInput, seed int64) Result {
	v := s.V
	r := Result{Variant: v.Name, Kernel: s.Entries[role].Symbol, Case: "bad input: " + bad.Name, Threads: 1}
	c := reference.NewCase(v, rand.New(rand.NewSource(seed)), badCaseSpec(v, role))
	cb := s.buffers(c)
	defer cb.free()
	bad.Break(&BadCase{V: v, Tiling: s.tgt.Tiling(v), Vals: cb.vals, cb: cb})
	before := append([]byte(nil), cb.o.U8()...)
	beforeLSE := append([]byte(nil), cb.lse.U8()...)
	st, err := s.run(role, cb)
	untouched := bytes.Equal(before, cb.o.U8()) && bytes.Equal(beforeLSE, cb.lse.U8())
	r.Pass = err == nil && st == bad.Status && untouched
	r.Note = fmt.Sprintf("status %d (%s), want %d; outputs untouched: %v", st, s.strerror(st), bad.Status, untouched)
	if err != nil {
		r.Note = err.Error()
	}
	return r
}

// RunMergeStateBad checks merge_state's size extremes: n < 0 is
// BAD_ARGUMENT, n x heads past 2^31-1 TOO_LARGE (counted in i64, not
// wrapped); v and s stay untouched.
func (s *Suite) RunMergeStateBad(seed int64) []Result {
	v := s.V
	if _, ok := s.Entries[ir.RoleMergeState]; !ok {
		return nil
	}
	cases := []struct {
		name string
		n    int64
		st   int32
	}{{"merge_state: n -1", -1, lower.ErrBadArgument}, {"merge_state: n INT32_MIN", i32min, lower.ErrBadArgument}}
	if v.QOHeads > 1 {
		cases = append(cases, struct {
			name string
			n    int64
			st   int32
		}{"merge_state: n INT32_MAX", i32max, lower.ErrTooLarge})
	}
	rng := rand.New(rand.NewSource(seed))
	var out []Result
	for _, c := range cases {
		r := Result{Variant: v.Name, Kernel: s.Entries[ir.RoleMergeState].Symbol, Case: c.name}
		rows := v.QOHeads
		va, vb := make([]float32, rows*v.HeadDimV), make([]float32, rows*v.HeadDimV)
		sa, sb := make([]float32, rows), make([]float32, rows)
		for i := range va {
			va[i], vb[i] = rng.Float32(), rng.Float32()
		}
		cb := s.mergeArgs(va, sa, vb, sb, 1)
		cb.vals["n"] = c.n
		before := append(append([]byte(nil), cb.byName["v"].U8()...), cb.byName["s"].U8()...)
		st, err := s.run(ir.RoleMergeState, cb)
		after := append(append([]byte(nil), cb.byName["v"].U8()...), cb.byName["s"].U8()...)
		untouched := bytes.Equal(before, after)
		r.Pass = err == nil && st == c.st && untouched
		r.Note = fmt.Sprintf("status %d (want %d); outputs untouched: %v", st, c.st, untouched)
		if err != nil {
			r.Note = err.Error()
		}
		cb.free()
		out = append(out, r)
	}
	return out
}
