package conformance

import (
	"bytes"
	"fmt"
	"math/rand"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// runFuzzQKV runs qkv_append with fuzzed n, num_pages, position_map and
// positions (and, with a table rope, rope_positions): the status append's
// rules give (n or num_pages negative, or a table's rope_positions:
// BAD_ARGUMENT; n * kv_heads items past the limit: TOO_LARGE; a slot
// neither -1 nor in the pool: BAD_SLOT; then, with a table, a position
// outside 0..rope_positions-1: BAD_ARGUMENT), every output untouched on a
// bad status; on success q_out within the rounding bound of
// reference.QKVAppend for every token, each element of a written (slot, kv
// head) holding the K value (within the bound) and the V value (as append
// stores it) of one of the tokens naming that slot (tokens naming one slot
// race, element by element), and every other byte of the pools untouched.
func runFuzzQKV(s *Suite, fc fuzzCase) fuzzResult {
	v := s.V
	sc := fc.Scalars
	d, H, KVH := v.HeadDimQK, v.QOHeads, v.KVHeads
	n, np := sc["n"], sc["num_pages"]
	st32, need := slotRules(v, fc)
	table := v.Rope != nil && v.Rope.AtAppend && v.Rope.Style == ir.RopeTable
	rp := sc["rope_positions"]
	pages := max(1, min(max(np, need), fuzzCapPages))
	if need > pages {
		return fuzzResult{Skip: true, Pass: true}
	}
	// A table's rows: rope_positions of them, capped (a valid case whose
	// table the cap cuts is skipped).
	var ropeRows int64
	if table {
		half := int64(v.Rope.Dim(d) / 2)
		ropeRows = max(0, min(rp, fuzzCapElems/half))
		if st32 == 0 && ropeRows < rp {
			return fuzzResult{Skip: true, Pass: true}
		}
	}
	rng := rand.New(rand.NewSource(fc.Seed))
	pool := s.randomPool(rng, int(pages))
	pm, pos := fc.Arrays["position_map"], fc.Arrays["positions"]
	rows := len(pm) // the arrays hold the original count, n at most
	in := s.randomQKV(rng, rows, 0)
	in.positions = pos
	if table {
		half := v.Rope.Dim(d) / 2
		in.rope = reference.RopeSource{RopePositions: int32(rp),
			RopeCos: make([]float32, ropeRows*int64(half)), RopeSin: make([]float32, ropeRows*int64(half))}
		for k := range in.rope.RopeCos {
			in.rope.RopeCos[k], in.rope.RopeSin[k] = rng.Float32()*3-1.5, rng.Float32()*3-1.5
		}
	}
	ks, vs := s.appendScales(rng)
	cb := &caseBuffers{vals: map[string]int64{}}
	defer cb.free()
	for k, x := range sc {
		cb.vals[k] = x
	}
	in.add(cb, s)
	cb.add("position_map", cpurt.I32Buffer(pm))
	kp := cb.add("k_pages", cpurt.U8Buffer(pool.k))
	vp := cb.add("v_pages", cpurt.U8Buffer(pool.v))
	s.addPoolScales(cb, ks, vs)
	qo := cb.add("q_out", s.enc(nanSlice(max(rows, 1)*H*d)))
	qBefore := bytes.Clone(qo.U8())
	st, err := s.run(ir.RoleQKVAppend, cb)
	res := fuzzResult{Status: st}
	switch {
	case err != nil:
		res.Msg = err.Error()
		return res
	case st != st32:
		res.Msg = fmt.Sprintf("status %d, the documented rules give %d", st, st32)
		return res
	case st != 0:
		res.Pass = bytes.Equal(kp.U8(), pool.k) && bytes.Equal(vp.U8(), pool.v) && bytes.Equal(qo.U8(), qBefore)
		if !res.Pass {
			res.Msg = fmt.Sprintf("status %d but an output was written", st)
		}
		return res
	}
	// The reference sees the n tokens the kernel reads: a mutation that
	// lowers n leaves the arrays' later tokens, whose positions need not
	// lie in a table's rows.
	want := reference.QKVAppend(v, in.qkv[:int(n)*(H+2*KVH)*d], in.positions[:n], in.qw, in.kw, &in.rope)
	var w qkvWorst
	m := int(n) * H * d
	gotQ := s.dec(qo)
	okQ := w.note(v.DType, gotQ[:m], want.Q[:m], want.QMag[:m]) && bytes.Equal(qo.U8()[m*reference.Size(v.DType):], qBefore[m*reference.Size(v.DType):])
	// Per (slot, kv head): the rows of one of the tokens naming the slot.
	rowsOf := map[int32][]int{}
	for i, slot := range pm[:n] {
		if slot >= 0 {
			rowsOf[slot] = append(rowsOf[slot], i)
		}
	}
	wantK, wantV := bytes.Clone(pool.k), bytes.Clone(pool.v)
	gotK, gotV := kp.U8(), vp.U8()
	okRows := true
	size := reference.Size(v.KVDType)
	for slot, toks := range rowsOf {
		for h := range KVH {
			a, b := s.rowSpan(int(slot)/v.PageSize, h, int(slot)%v.PageSize, d)
			// Per element, the K value (within the bound) and the V value
			// (as append stores it) of one of the tokens naming the slot:
			// they race (docs/semantics.md), each element on its own.
			for j := range d {
				okK, okV := false, false
				got := gotK[a+j*size : a+(j+1)*size]
				for _, i := range toks {
					at := (i*KVH+h)*d + j
					if v.Quantized() {
						okK = okK || codeWithin(v.KVDType, got[0], want.K[at], reference.HalfAllowance*want.KMag[at], ks[h%len(ks)])
						okV = okV || gotV[a+j] == reference.Quantize(v.KVDType, float32(want.V[at]), vs[h%len(vs)])
						continue
					}
					okK = okK || AllowanceUsed(v.DType, reference.Decode(v.DType, got), want.K[at:at+1], want.KMag[at:at+1]) <= 1
					okV = okV || bytes.Equal(gotV[a+j*size:a+(j+1)*size], reference.Encode(v.DType, []float32{float32(want.V[at])}))
				}
				okRows = okRows && okK && okV
			}
			copy(wantK[a:b], gotK[a:b])
			copy(wantV[a:b], gotV[a:b])
		}
	}
	rest := bytes.Equal(gotK, wantK) && bytes.Equal(gotV, wantV)
	res.Pass = okQ && okRows && rest
	if !res.Pass {
		res.Msg = fmt.Sprintf("qkv_append of %d tokens: q_out ok %v, cached rows ok %v, other pool bytes untouched %v", n, okQ, okRows, rest)
	}
	return res
}
