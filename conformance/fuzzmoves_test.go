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

// genFuzzMoves fills fc's scalars and arrays for read_kv, gather_pages,
// scatter_pages and compact_copy from exactly 7 bytes of r (as many as an
// attention case of two sequences, so the seeds' mutations land on the
// arguments): a valid call of a few rows, pages or copies (scatter's page
// ids may repeat: that is its bad input). compact_copy's sequences copy
// among disjoint slots (slot % batch_size is the sequence), so a valid
// unmutated call has one result.
func genFuzzMoves(r *byteReader, v *ir.Variant, fc fuzzCase) {
	ps := v.PageSize
	var b [7]int
	for i := range b {
		b[i] = int(r.byte())
	}
	switch fc.Role {
	case ir.RoleReadKV:
		n, np := b[0]%6, 2+b[1]%3
		pm := make([]int32, n)
		for i := range pm {
			pm[i] = int32(b[2+i]%(np*ps+1)) - 1
		}
		fc.Scalars["n"], fc.Scalars["num_pages"] = int64(n), int64(np)
		fc.Arrays["position_map"] = pm
	case ir.RoleGatherPages, ir.RoleScatterPages:
		n, np := b[0]%5, 2+b[1]%4
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(b[2+i] % np)
		}
		fc.Scalars["n"], fc.Scalars["num_pages"] = int64(n), int64(np)
		fc.Arrays["page_ids"] = ids
	case ir.RoleCompactCopy:
		bs := b[0] % 4
		np := bs + 1 + b[1]%3
		per := max(1, np*ps/max(bs, 1))
		rng := rand.New(rand.NewSource(int64(b[4]<<16 | b[5]<<8 | b[6])))
		indptr := []int32{int32(b[2] % 2)}
		src, dst := make([]int32, indptr[0]), make([]int32, indptr[0])
		for q := range bs {
			for range 1 + (b[3]>>(2*q))&3 {
				src = append(src, int32(rng.Intn(per)*bs+q))
				dst = append(dst, int32(rng.Intn(per)*bs+q))
			}
			indptr = append(indptr, int32(len(src)))
		}
		fc.Scalars["batch_size"], fc.Scalars["num_pages"] = int64(bs), int64(np)
		fc.Arrays["copy_indptr"], fc.Arrays["copy_src"], fc.Arrays["copy_dst"] = indptr, src, dst
	}
}

// moveRules states DESIGN §3.2 and docs/abi.md for read_kv, gather_pages,
// scatter_pages and compact_copy independently of the kernels: the
// status, and for a valid call the pool pages it reads or writes (need).
// compact_copy's arrays are read as far as its rules read them: past what
// the test allocated, beyond names the array.
func moveRules(v *ir.Variant, fc fuzzCase) (st int32, need int64, beyond string) {
	sc, a := fc.Scalars, fc.Arrays
	ps, np := int64(v.PageSize), sc["num_pages"]
	kvh := int64(v.KVHeads)
	switch fc.Role {
	case ir.RoleReadKV:
		n := sc["n"]
		switch {
		case n < 0 || np < 0:
			return lower.ErrBadArgument, 0, ""
		case n*kvh > lower.MaxItems:
			return lower.ErrTooLarge, 0, ""
		}
		for _, slot := range a["position_map"][:n] {
			if slot < -1 || int64(slot) >= np*ps {
				return lower.ErrBadSlot, 0, ""
			}
			need = max(need, int64(slot)/ps+1)
		}
	case ir.RoleGatherPages, ir.RoleScatterPages:
		n := sc["n"]
		switch {
		case n < 0 || np < 0:
			return lower.ErrBadArgument, 0, ""
		case n*ps*kvh > lower.MaxItems:
			return lower.ErrTooLarge, 0, ""
		}
		ids := a["page_ids"][:n]
		for i, id := range ids {
			if id < 0 || int64(id) >= np || fc.Role == ir.RoleScatterPages && slices.Contains(ids[:i], id) {
				return lower.ErrBadPageID, 0, ""
			}
			need = max(need, int64(id)+1)
		}
	case ir.RoleCompactCopy:
		bs := sc["batch_size"]
		switch {
		case bs < 0 || np < 0:
			return lower.ErrBadArgument, 0, ""
		case bs*kvh > lower.MaxItems:
			return lower.ErrTooLarge, 0, ""
		case bs == 0:
			return 0, 0, ""
		}
		ip := a["copy_indptr"]
		if ip[0] < 0 {
			return lower.ErrBadKVIndptr, 0, ""
		}
		for b := range bs {
			if ip[b+1] < ip[b] {
				return lower.ErrBadKVIndptr, 0, ""
			}
		}
		if int64(ip[bs]) > int64(len(a["copy_src"])) {
			return 0, 0, "copy_src"
		}
		for j := ip[0]; j < ip[bs]; j++ {
			for _, slot := range []int32{a["copy_src"][j], a["copy_dst"][j]} {
				if slot < 0 || int64(slot) >= np*ps {
					return lower.ErrBadSlot, 0, ""
				}
				need = max(need, int64(slot)/ps+1)
			}
		}
	}
	return 0, need, ""
}

// runFuzzMoves runs read_kv, gather_pages, scatter_pages or compact_copy
// and checks every output against the reference's model, or untouched
// on a bad status.
func runFuzzMoves(s *Suite, fc fuzzCase) fuzzResult {
	v := s.V
	sc, a := fc.Scalars, fc.Arrays
	if fc.Role == ir.RoleCompactCopy && sc["batch_size"] > 0 {
		// The ABI's shape: copy_src and copy_dst hold
		// copy_indptr[batch_size] entries.
		if total := int64(a["copy_indptr"][min(sc["batch_size"], int64(len(a["copy_indptr"])-1))]); total > int64(len(a["copy_src"])) && total <= fuzzCapElems {
			a["copy_src"], a["copy_dst"] = pad(a["copy_src"], total, 0), pad(a["copy_dst"], total, 0)
		}
	}
	st32, need, beyond := moveRules(v, fc)
	if beyond != "" {
		return fuzzResult{Skip: true, Pass: true, Msg: "the documented reads of " + beyond + " pass what the test allocates"}
	}
	pages := max(1, min(max(sc["num_pages"], need), fuzzCapPages))
	if need > pages {
		return fuzzResult{Skip: true, Pass: true}
	}
	rng := rand.New(rand.NewSource(fc.Seed))
	pool := s.randomPool(rng, int(pages))
	pa := s.pools()
	pls := [][]byte{pool.k, pool.v}
	cb := &caseBuffers{vals: map[string]int64{}}
	defer cb.free()
	for k, x := range sc {
		cb.vals[k] = x
	}
	for k, x := range a {
		cb.add(k, cpurt.I32Buffer(x))
	}
	want := map[string][]byte{}
	for p := range pa {
		cb.add(pa[p].pages, cpurt.U8Buffer(pls[p]))
		want[pa[p].pages] = bytes.Clone(pls[p])
	}
	size := reference.Size(v.DType)
	exact := true // the model is the one result (compact_copy: no slot shared by two sequences)
	switch fc.Role {
	case ir.RoleReadKV:
		ks, vs := s.appendScales(rng)
		s.addPoolScales(cb, ks, vs)
		n := len(a["position_map"])
		for p, scl := range [][]float32{ks, vs} {
			before := randomBytes(rng, n*v.KVHeads*pa[p].d*size)
			cb.add(pa[p].out, cpurt.U8Buffer(before))
			w := bytes.Clone(before)
			if st32 == 0 {
				for row, xs := range reference.ReadKV(v, pls[p], pa[p].d, a["position_map"][:sc["n"]], scl) {
					for j, x := range xs {
						copy(w[(row*pa[p].d+j)*size:], reference.ReadKVBytes(v, x))
					}
				}
			}
			want[pa[p].out] = w
		}
	case ir.RoleGatherPages, ir.RoleScatterPages:
		n := len(a["page_ids"])
		for p := range pa {
			b := randomBytes(rng, n*reference.PageBytes(v, pa[p].d))
			cb.add(pa[p].buf, cpurt.U8Buffer(b))
			want[pa[p].buf] = bytes.Clone(b)
			if st32 != 0 {
				continue
			}
			ids := a["page_ids"][:sc["n"]]
			if fc.Role == ir.RoleScatterPages {
				reference.ScatterPages(v, want[pa[p].pages], pa[p].d, ids, b)
			} else {
				copy(want[pa[p].buf], reference.GatherPages(v, pls[p], pa[p].d, ids))
			}
		}
	case ir.RoleCompactCopy:
		if st32 == 0 && sc["batch_size"] > 0 {
			bs := sc["batch_size"]
			ip := a["copy_indptr"][:bs+1]
			owner := map[int32]int64{}
			for b := range bs {
				for j := ip[b]; j < ip[b+1]; j++ {
					for _, slot := range []int32{a["copy_src"][j], a["copy_dst"][j]} {
						if o, ok := owner[slot]; ok && o != b {
							exact = false
						}
						owner[slot] = b
					}
				}
			}
			for p := range pa {
				reference.CompactCopy(v, want[pa[p].pages], pa[p].d, ip, a["copy_src"], a["copy_dst"])
			}
		}
	}
	st, err := s.run(fc.Role, cb)
	res := fuzzResult{Status: st}
	switch {
	case err != nil:
		res.Msg = err.Error()
	case st != st32:
		res.Msg = fmt.Sprintf("status %d, the documented rules give %d", st, st32)
	case !exact:
		res.Pass = true // two sequences share a slot: they race, the result is not one model's
	default:
		res.Pass = true
		for _, name := range slices.Sorted(maps.Keys(want)) {
			got, w := cb.byName[name].U8(), want[name]
			same := bytes.Equal(got, w)
			if !same && fc.Role == ir.RoleReadKV && (name == pa[0].out || name == pa[1].out) {
				same = true
				for i := 0; i < len(w); i += size {
					same = same && reference.SameOrNaN(v.DType, got[i:i+size], w[i:i+size])
				}
			}
			if !same {
				res.Pass = false
				res.Msg = fmt.Sprintf("status %d: %s differs from the model%s", st, name, firstDiff(name, got, w))
				break
			}
		}
	}
	return res
}
