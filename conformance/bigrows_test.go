package conformance

import (
	"math/rand"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// TestRowsPast2To31 runs prefill on query rows whose (row, head) index
// passes 2^31: qo_indptr = {R, R+3} with R x 32 heads > 2^31, q and o
// mapped sparsely (about 128 GB each, only the rows used are touched). Row
// offsets computed in i32 wrap there (before the buffer: a fault, or onto
// other rows); the outputs must equal the reference.
func TestRowsPast2To31(t *testing.T) {
	t.Parallel()
	needTools(t)
	v := spec(t, `variant rows31 { heads qo = 32, kv = 32
	  head_dim 16
	  dtype f32
	  cache paged(page_size = 16) }`)
	s, err := buildHostLevel(v, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Lib.Close()
	const R = 1<<26 + 5 // R * 32 = 2^31 + 160
	c := reference.NewCase(v, rand.New(rand.NewSource(2)), reference.CaseSpec{QLens: []int{3}, KVLens: []int{20}, NaNFill: true})
	wantO, wantL := reference.Attention(v, c)
	rowQ, rowO, rows := v.QOHeads*v.HeadDimQK, v.QOHeads*v.HeadDimV, R+3
	sparse := func(n int) *cpurt.Buffer {
		b, err := cpurt.NewSparseBuffer(n)
		needtool.Check(t, err) // the system must allow a large MAP_NORESERVE mapping
		return b
	}
	cb := &caseBuffers{vals: map[string]int64{"batch_size": 1, "num_pages": int64(c.NumPages)}}
	defer cb.free()
	q := cb.add("q", sparse(4*rows*rowQ))
	copy(q.F32()[R*rowQ:], c.Q)
	cb.o = cb.add("o", sparse(4*rows*rowO))
	cb.lse = cb.add("lse", sparse(4*rows*v.QOHeads))
	poisonF32(cb.o.F32()[R*rowO:])
	poisonF32(cb.lse.F32()[R*v.QOHeads:])
	cb.add("qo_indptr", cpurt.I32Buffer([]int32{R, R + 3}))
	cb.add("k_pages", cpurt.F32Buffer(c.KPages))
	cb.add("v_pages", cpurt.F32Buffer(c.VPages))
	indptr, indices, last := c.CSR(v.PageSize)
	cb.add("kv_indptr", cpurt.I32Buffer(indptr))
	cb.add("kv_indices", cpurt.I32Buffer(indices))
	cb.add("kv_last_page_len", cpurt.I32Buffer(last))
	for _, threads := range []int{1, 3} {
		if err := s.SetThreads(threads); err != nil {
			t.Fatal(err)
		}
		st, err := s.run(ir.RolePrefill, cb)
		if err != nil || st != 0 {
			t.Fatalf("threads %d: status %d, %v", threads, st, err)
		}
		if e, i, ok := reference.Compare(cb.o.F32()[R*rowO:], wantO, Tolerance); !ok {
			t.Errorf("threads %d: o[row %d + ...][%d]: error %g", threads, R, i, e)
		}
		if e, i, ok := reference.Compare(cb.lse.F32()[R*v.QOHeads:], wantL, Tolerance); !ok {
			t.Errorf("threads %d: lse[row %d + ...][%d]: error %g", threads, R, i, e)
		}
		poisonF32(cb.o.F32()[R*rowO:])
		poisonF32(cb.lse.F32()[R*v.QOHeads:])
	}
}
