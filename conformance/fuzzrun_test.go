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
	cputarget "github.com/attnc/attnc/targets/cpu"
)

// What FuzzKernels allocates at most; a case whose documented reads need
// more is skipped.
const (
	fuzzCapElems = 1 << 20 // entries of an int32 array, bytes of custom_mask
	fuzzCapRows  = 4096    // query rows
	fuzzCapPages = 4096    // pool pages
	fuzzCapWork  = 1 << 18 // sum of q_len x kv_len of a valid case
	// fuzzExactLen is the longest kv_len whose outputs are compared with the
	// reference: the f32 tolerance is made for the conformance matrix's
	// lengths, and f32 sums over hundreds of thousands of positions drift
	// past it. Longer valid cases still run (status, no fault, rows no
	// sequence owns untouched, finite outputs).
	fuzzExactLen = 4096
)

// rules is what the documented validation order (docs/abi.md "Validation
// order", lower/table.go) says of a case: its status, how many elements of
// each array the validation and (when valid) the computation read, and,
// when valid, each sequence's lengths, first query row and page ids.
type rules struct {
	status      int32
	beyond      string           // an array the rules read past what the test allocated
	need        map[string]int64 // arrays, "q_rows" and "pages"
	qLen, kvLen []int
	qRow        []int
	pages       [][]int
}

func (r *rules) touch(name string, idx int64) {
	r.need[name] = max(r.need[name], idx+1)
}

// validateRules states the documented rules for an attention entry,
// independently of the kernels: scalars, every indptr whole, per-sequence
// lengths and block-table rows, CSR page ids, then the work-item count.
func validateRules(v *ir.Variant, fc fuzzCase) (r rules) {
	r.need = map[string]int64{}
	a, sc := fc.Arrays, fc.Scalars
	prefill := fc.Role != ir.RoleDecode
	ragged := fc.Role == ir.RolePrefillRagged
	bs, np := sc["batch_size"], sc["num_pages"]
	ps := int64(v.PageSize)
	type beyond struct{}
	defer func() {
		if x := recover(); x != nil {
			if _, ok := x.(beyond); !ok {
				panic(x)
			}
		}
	}()
	// at reads element i as the rules say the kernel may; past the array
	// the test allocated, the case cannot be run (r.beyond).
	at := func(name string, i int64) int64 {
		r.touch(name, i)
		if i < 0 || i >= int64(len(a[name])) {
			r.beyond = name
			panic(beyond{})
		}
		return int64(a[name][i])
	}
	table := v.InlineRope() != nil && v.Rope.Style == ir.RopeTable
	rp := sc["rope_positions"]
	if bs < 0 || !ragged && (np < 0 || v.Table == ir.BlockTable && sc["max_blocks"] < 0) || table && rp < 0 {
		r.status = lower.ErrBadArgument
		return r
	}
	for _, d := range v.ParamDimNames() { // a param's named dims
		if sc[d] < 0 {
			r.status = lower.ErrBadArgument
			return r
		}
	}
	if bs == 0 {
		return r
	}
	type ip struct {
		name string
		code int32
	}
	var ips []ip
	if prefill {
		ips = append(ips, ip{"qo_indptr", lower.ErrBadQOIndptr})
	}
	switch {
	case ragged:
		ips = append(ips, ip{"kv_token_indptr", lower.ErrBadKVIndptr})
	case v.Table == ir.CSR:
		ips = append(ips, ip{"kv_indptr", lower.ErrBadKVIndptr})
	}
	hasMask := func(k ir.MaskKind) bool {
		for _, m := range v.Masks {
			if m.Kind == k {
				return true
			}
		}
		return false
	}
	if hasMask(ir.MaskTree) {
		ips = append(ips, ip{"tree_order_indptr", lower.ErrBadMaskIndptr})
	}
	if hasMask(ir.MaskCustom) {
		ips = append(ips, ip{"mask_indptr", lower.ErrBadMaskIndptr})
	}
	for _, p := range ips {
		if at(p.name, 0) < 0 {
			r.status = p.code
			return r
		}
	}
	for b := int64(0); b < bs; b++ {
		for _, p := range ips {
			if at(p.name, b+1) < at(p.name, b) {
				r.status = p.code
				return r
			}
		}
	}
	rows := bs
	if prefill {
		rows = at("qo_indptr", bs)
	}
	if hasMask(ir.MaskTree) && at("tree_order_indptr", bs) > rows {
		r.status = lower.ErrBadMaskIndptr
		return r
	}
	for b := int64(0); b < bs; b++ {
		qLen, qRow := int64(1), b
		if prefill {
			qRow = at("qo_indptr", b)
			qLen = at("qo_indptr", b+1) - qRow
			if qLen > lower.MaxSeqLen {
				r.status = lower.ErrBadQOIndptr
				return r
			}
		}
		var kvLen int64
		var pages []int
		switch {
		case ragged:
			if kvLen = at("kv_token_indptr", b+1) - at("kv_token_indptr", b); kvLen > lower.MaxSeqLen {
				r.status = lower.ErrBadKVLen
				return r
			}
		case v.Table == ir.BlockTable:
			mb := sc["max_blocks"]
			kvLen = at("kv_lens", b)
			if kvLen < 0 || kvLen > lower.MaxSeqLen || kvLen > mb*ps {
				r.status = lower.ErrBadKVLen
				return r
			}
			for j := int64(0); j < (kvLen+ps-1)/ps; j++ {
				id := at("block_table", b*mb+j)
				if id < -1 || id >= np {
					r.status = lower.ErrBadPageID
					return r
				}
				pages = append(pages, int(id))
			}
		default:
			n := at("kv_indptr", b+1) - at("kv_indptr", b)
			last := at("kv_last_page_len", b)
			if n > 0 && (last < 1 || last > ps) {
				r.status = lower.ErrBadLastPageLen
				return r
			}
			if n > 0 {
				kvLen = (n-1)*ps + last
			}
			if kvLen > lower.MaxSeqLen {
				r.status = lower.ErrBadKVLen
				return r
			}
		}
		if qLen > kvLen {
			r.status = lower.ErrQLenExceedsKVLen
			return r
		}
		if hasMask(ir.MaskTree) && at("tree_order_indptr", b+1)-at("tree_order_indptr", b) != qLen {
			r.status = lower.ErrBadMaskIndptr
			return r
		}
		if hasMask(ir.MaskCustom) && at("mask_indptr", b+1)-at("mask_indptr", b) < (qLen*kvLen+7)/8 {
			r.status = lower.ErrBadMaskIndptr
			return r
		}
		if table {
			// Every rotated position in 0..rope_positions-1: the queries',
			// then the keys' (a tree's own keys rotate at their queries').
			for i := range qLen {
				if p := at("q_rope_position", qRow+i); p < 0 || p >= rp {
					r.status = lower.ErrBadArgument
					return r
				}
			}
			keys := kvLen
			if hasMask(ir.MaskTree) {
				keys -= qLen
			}
			if off := int64(0); keys > 0 {
				if off = at("k_rope_pos_offset", b); off < 0 || off+keys-1 >= rp {
					r.status = lower.ErrBadArgument
					return r
				}
			}
		}
		r.qLen, r.kvLen, r.qRow = append(r.qLen, int(qLen)), append(r.kvLen, int(kvLen)), append(r.qRow, int(qRow))
		r.pages = append(r.pages, pages)
	}
	if !ragged && v.Table == ir.CSR {
		for j := at("kv_indptr", 0); j < at("kv_indptr", bs); j++ {
			if id := at("kv_indices", j); id < -1 || id >= np {
				r.status = lower.ErrBadPageID
				return r
			}
		}
		for b := int64(0); b < bs; b++ {
			for j := at("kv_indptr", b); j < at("kv_indptr", b+1); j++ {
				r.pages[b] = append(r.pages[b], int(a["kv_indices"][j]))
			}
		}
	}
	// Prefill whose every sequence is one query row laid out as decode's
	// hands over to decode before its own limit (ir.Handoff), and decode
	// items serve their own head tiles (Tiling.DecodeHeads).
	handoff := fc.Role == ir.RolePrefill
	for b := range r.qLen {
		handoff = handoff && r.qLen[b] == 1 && r.qRow[b] == b
	}
	t := cputarget.Target{}.Tiling(v)
	heads := t.DecodeHeads(v.GroupSize())
	if prefill && !handoff {
		heads = t.Heads(v.GroupSize())
	}
	units := min(bs*int64(v.KVHeads*v.GroupSize()/heads), lower.MaxItems+1)
	if prefill && !handoff {
		qt, maxQT := int64(t.QTile(v.GroupSize())), int64(0)
		for _, q := range r.qLen {
			maxQT = max(maxQT, (int64(q)+qt-1)/qt)
		}
		units *= maxQT
	}
	if units > lower.MaxItems {
		r.status = lower.ErrTooLarge
		return r
	}
	// Valid: what the computation reads.
	for b := range r.qLen {
		r.touch("q_rows", int64(r.qRow[b]+r.qLen[b]-1))
		if hasMask(ir.MaskTree) {
			r.touch("tree_order", 2*(int64(a["tree_order_indptr"][b])+int64(r.qLen[b]))-1)
		}
		if hasMask(ir.MaskCustom) {
			r.touch("custom_mask", int64(a["mask_indptr"][b])+(int64(r.qLen[b])*int64(r.kvLen[b])+7)/8-1)
		}
		for _, id := range r.pages[b] {
			r.touch("pages", int64(id))
		}
		if ragged && r.kvLen[b] > 0 {
			r.touch("kv_rows", int64(a["kv_token_indptr"][b+1])-1)
		}
		if v.Rope != nil {
			r.touch("k_rope_pos_offset", int64(b))
		}
	}
	if table {
		r.touch("rope_rows", rp-1)
	}
	return r
}

// pad returns xs grown (with fill) or cut to n entries, n capped.
func pad(xs []int32, n int64, fill int32) []int32 {
	n = max(0, min(n, fuzzCapElems))
	out := make([]int32, n)
	for i := range out {
		out[i] = fill
	}
	copy(out, xs)
	return out
}

// runFuzzCase runs fc on s's kernels with guarded buffers sized as the ABI
// trusts them (capped), and judges the outcome.
func runFuzzCase(s *Suite, fc fuzzCase) fuzzResult {
	switch fc.Role {
	case ir.RolePrefill, ir.RoleDecode, ir.RolePrefillRagged:
		return runFuzzAttention(s, fc)
	case ir.RoleAppend, ir.RoleCopyPage:
		return runFuzzPages(s, fc)
	case ir.RoleQKVAppend:
		return runFuzzQKV(s, fc)
	case ir.RoleMergeState:
		return runFuzzMerge(s, fc)
	case ir.RoleReadKV, ir.RoleGatherPages, ir.RoleScatterPages, ir.RoleCompactCopy:
		return runFuzzMoves(s, fc)
	}
	return fuzzResult{Msg: "unknown role " + string(fc.Role)}
}

func runFuzzAttention(s *Suite, fc fuzzCase) fuzzResult {
	v := s.V
	a, sc := fc.Arrays, fc.Scalars
	prefill := fc.Role != ir.RoleDecode
	ragged := fc.Role == ir.RolePrefillRagged
	bs := sc["batch_size"]
	ps := v.PageSize
	// The ABI's shapes, from the (mutated) metadata.
	lastOf := func(name string, orig int64) int64 {
		if bs > 0 && len(a[name]) > int(bs) {
			return int64(a[name][bs])
		}
		return orig
	}
	rows := int64(max(bs, 0))
	if prefill {
		rows = lastOf("qo_indptr", 0)
	}
	rows = max(0, min(rows, fuzzCapRows))
	// prefill_ragged's K/V rows: kv_token_indptr[batch_size] of them.
	kvRows := max(0, min(lastOf("kv_token_indptr", 0), fuzzCapRows))
	switch {
	case ragged:
	case v.Table == ir.CSR:
		a["kv_indices"] = pad(a["kv_indices"], max(lastOf("kv_indptr", 0), int64(len(a["kv_indices"]))), 0)
	default:
		a["block_table"] = pad(a["block_table"], max(max(bs, 0)*sc["max_blocks"], int64(len(a["block_table"]))), -1)
	}
	if _, ok := a["tree_order"]; ok {
		a["tree_order"] = pad(a["tree_order"], 2*rows, 0)
	}
	if _, ok := a["q_rope_position"]; ok {
		a["q_rope_position"] = pad(a["q_rope_position"], rows, 0)
		a["k_rope_pos_offset"] = pad(a["k_rope_pos_offset"], max(bs, 0), 0)
	}
	// A RoPE table's rows: rope_positions of them, capped.
	half := 0
	if v.InlineRope() != nil && v.Rope.Style == ir.RopeTable {
		half = v.Rope.Dim(v.HeadDimQK) / 2
	}
	ropeRows := int64(0)
	if half > 0 {
		ropeRows = max(0, min(sc["rope_positions"], fuzzCapElems/int64(half)))
	}
	var custom []byte
	if _, ok := a["mask_indptr"]; ok {
		custom = make([]byte, max(0, min(lastOf("mask_indptr", 0), fuzzCapElems)))
		rand.New(rand.NewSource(fc.Seed)).Read(custom)
	}
	r := validateRules(v, fc)
	if r.beyond != "" {
		return fuzzResult{Skip: true, Pass: true, Msg: "the documented reads of " + r.beyond + " pass what the test allocates"}
	}
	pages := max(1, min(max(sc["num_pages"], r.need["pages"]), fuzzCapPages))
	work := 0
	for b := range r.qLen {
		work += r.qLen[b] * r.kvLen[b]
	}
	for name, n := range r.need {
		var have int64
		switch name {
		case "q_rows":
			have = rows
		case "kv_rows":
			have = kvRows
		case "pages":
			have = pages
		case "custom_mask":
			have = int64(len(custom))
		case "rope_rows":
			have = ropeRows
		default:
			have = int64(len(a[name]))
		}
		if n > have || work > fuzzCapWork {
			return fuzzResult{Skip: true, Pass: true, Msg: fmt.Sprintf("%s needs %d, the test allocates %d", name, n, have)}
		}
	}

	// Data: q rows, pools (NaN wherever no sequence reads), learned sinks.
	rng := rand.New(rand.NewSource(fc.Seed))
	uniform := func(n int) []float32 {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = reference.Round(v.DType, rng.Float32()*2-1)
		}
		return xs
	}
	q := uniform(int(rows) * v.QOHeads * v.HeadDimQK)
	slots := int(pages) * v.KVHeads * ps
	var kp, vp, ks, vs []float32
	if v.Quantized() {
		// Code values (the reference scales them exactly) and random
		// positive scales: keys about [-1, 1], values over 2^±4.
		r := reference.CodeRange(v.KVDType)
		codes := func(n int) []float32 {
			xs := make([]float32, n)
			for i := range xs {
				xs[i] = reference.Round(v.KVDType, (rng.Float32()*2-1)*r)
			}
			return xs
		}
		kp, vp = codes(slots*v.HeadDimQK), codes(slots*v.HeadDimV)
		ks, vs = make([]float32, v.ScaleLen()), make([]float32, v.ScaleLen())
		vMag := float32(math.Ldexp(1, rng.Intn(9)-4))
		for i := range ks {
			ks[i] = (0.75 + rng.Float32()/2) / r
			vs[i] = vMag * (0.75 + rng.Float32()/2) / r
		}
	} else {
		kp, vp = uniform(slots*v.HeadDimQK), uniform(slots*v.HeadDimV)
	}
	// prefill_ragged's rows: the dtype's values, NaN and +inf in the rows
	// no sequence names.
	var rk, rv []float32
	if ragged {
		rk, rv = uniform(int(kvRows)*v.KVHeads*v.HeadDimQK), uniform(int(kvRows)*v.KVHeads*v.HeadDimV)
		named := make([]bool, kvRows)
		for b := range r.qLen {
			if r.status != 0 {
				break
			}
			for j := a["kv_token_indptr"][b]; j < a["kv_token_indptr"][b+1]; j++ {
				named[j] = true
			}
		}
		for j, ok := range named {
			if ok {
				continue
			}
			for i := j * v.KVHeads * v.HeadDimQK; i < (j+1)*v.KVHeads*v.HeadDimQK; i++ {
				rk[i] = float32(math.NaN())
			}
			for i := j * v.KVHeads * v.HeadDimV; i < (j+1)*v.KVHeads*v.HeadDimV; i++ {
				rv[i] = float32(math.Inf(1))
			}
		}
	}
	var unreadK, unreadV []int // element indices no sequence reads
	read := map[[2]int]bool{}
	for b := range r.qLen {
		if r.status != 0 || ragged {
			break // the kernel reads no data, or no pages
		}
		for pos := range r.kvLen[b] {
			if id := r.pages[b][pos/ps]; id >= 0 {
				read[[2]int{id, pos % ps}] = true
			}
		}
	}
	for p := range int(pages) {
		for slot := range ps {
			if read[[2]int{p, slot}] {
				continue
			}
			for h := range v.KVHeads {
				for d := range v.HeadDimQK {
					i := reference.PageIndex(v, p, h, slot, d, v.HeadDimQK)
					kp[i] = float32(math.NaN())
					unreadK = append(unreadK, i)
				}
				for d := range v.HeadDimV {
					i := reference.PageIndex(v, p, h, slot, d, v.HeadDimV)
					vp[i] = float32(math.Inf(1))
					unreadV = append(unreadV, i)
				}
			}
		}
	}
	var sinks []float32
	if v.Sinks != nil && v.Sinks.Kind == ir.SinkLearned {
		sinks = uniform(v.QOHeads)
	}
	var ropeCos, ropeSin []float32
	if half > 0 {
		ropeCos, ropeSin = uniform(int(ropeRows)*half), uniform(int(ropeRows)*half)
	}

	cb := &caseBuffers{vals: map[string]int64{}}
	defer cb.free()
	for k, x := range sc {
		cb.vals[k] = x
	}
	for k, xs := range a {
		cb.add(k, cpurt.I32Buffer(xs))
	}
	cb.add("q", s.enc(q))
	kb, vb := cb.add("k_pages", s.encKV(kp)), cb.add("v_pages", s.encKV(vp))
	if ragged {
		cb.add("k", s.enc(rk))
		cb.add("v", s.enc(rv))
	}
	if v.Quantized() {
		// Unread rows hold the codes that poison a sum: NaN for fp8 keys,
		// +inf (e5m2) or NaN (e4m3) values, and int8's -128, which append
		// never writes.
		pk, pv := byte(0x7f), byte(0xff)
		switch v.KVDType {
		case ir.DTE5M2:
			pv = 0x7c
		case ir.DTI8:
			pk, pv = 0x80, 0x80
		}
		for _, i := range unreadK {
			kb.U8()[i] = pk
		}
		for _, i := range unreadV {
			vb.U8()[i] = pv
		}
		cb.add("k_scale", cpurt.F32Buffer(ks))
		cb.add("v_scale", cpurt.F32Buffer(vs))
	}
	if custom != nil {
		cb.add("custom_mask", cpurt.U8Buffer(custom))
	}
	if sinks != nil {
		cb.add("sinks", cpurt.F32Buffer(sinks))
	}
	if half > 0 {
		cb.add("rope_cos", cpurt.F32Buffer(ropeCos))
		cb.add("rope_sin", cpurt.F32Buffer(ropeSin))
	}
	params, big := fuzzParamBuffers(v, fc, r, cb)
	if big != "" {
		return fuzzResult{Skip: true, Pass: true, Msg: "param " + big + " is larger than the test maps"}
	}
	cb.o = cb.add("o", s.enc(nanSlice(int(rows)*v.QOHeads*v.HeadDimV)))
	cb.lse = cb.add("lse", cpurt.F32Buffer(nanSlice(int(rows)*v.QOHeads)))
	oBefore, lseBefore := bytes.Clone(cb.o.U8()), bytes.Clone(cb.lse.U8())
	if err := s.SetThreads(1 + int(fc.Seed&3)); err != nil {
		return fuzzResult{Msg: err.Error()}
	}
	st, err := s.run(fc.Role, cb)
	res := fuzzResult{Status: st}
	switch {
	case err != nil:
		res.Msg = err.Error()
	case st != r.status:
		res.Msg = fmt.Sprintf("status %d (%s), the documented rules give %d", st, s.strerror(st), r.status)
	case st != 0:
		res.Pass = bytes.Equal(oBefore, cb.o.U8()) && bytes.Equal(lseBefore, cb.lse.U8())
		if !res.Pass {
			res.Msg = fmt.Sprintf("status %d but the outputs were written", st)
		}
	default:
		rope := fuzzRope{cos: ropeCos, sin: ropeSin, positions: int32(sc["rope_positions"])}
		res.Pass, res.Msg = checkAttention(s, r, fc, a, q, kp, vp, ks, vs, rk, rv, sinks, custom, rope, params, int(pages), cb, oBefore, lseBefore)
	}
	return res
}

// checkAttention compares each sequence's rows with the reference and
// checks that rows no sequence owns are untouched.
func checkAttention(s *Suite, r rules, fc fuzzCase, a map[string][]int32, q, kp, vp, ks, vs, rk, rv, sinks []float32, custom []byte, rope fuzzRope, params map[string]func(int64) float64, pages int, cb *caseBuffers, oBefore, lseBefore []byte) (bool, string) {
	v := s.V
	rowQ, rowO := v.QOHeads*v.HeadDimQK, v.QOHeads*v.HeadDimV
	c := &reference.Case{Name: "fuzz", Batch: len(r.qLen), QLens: r.qLen, KVLens: r.kvLen, Pages: r.pages, NumPages: pages,
		KPages: kp, VPages: vp, KScale: ks, VScale: vs, Sinks: sinks, CustomMask: custom, MaskIndptr: a["mask_indptr"],
		TreeOrder: a["tree_order"], TreeIndptr: a["tree_order_indptr"]}
	if fc.Role == ir.RolePrefillRagged {
		c.KVTokenIndptr, c.RaggedK, c.RaggedV = a["kv_token_indptr"][:len(r.qLen)+1], rk, rv
	}
	for b := range r.qLen {
		c.Q = append(c.Q, q[r.qRow[b]*rowQ:(r.qRow[b]+r.qLen[b])*rowQ]...)
		if v.Rope != nil {
			c.QRopePos = append(c.QRopePos, a["q_rope_position"][r.qRow[b]:r.qRow[b]+r.qLen[b]]...)
		}
	}
	if len(v.Params) > 0 {
		c.ParamDims, c.ParamAt = map[string]int{}, params
		for _, d := range v.ParamDimNames() {
			c.ParamDims[d] = int(fc.Scalars[d])
		}
	}
	if v.Rope != nil {
		c.KRopeOffset = a["k_rope_pos_offset"][:len(r.qLen)]
		c.RopeCos, c.RopeSin, c.RopePositions = rope.cos, rope.sin, rope.positions
	}
	var wantO, wantL, mag []float64
	if len(r.qLen) > 0 {
		// (With no sequence there is nothing to compare, and the case's
		// rows before the first sequence, kv_token_indptr[0] of them, may
		// be more than the test lays out.)
		wantO, wantL, mag = reference.AttentionMag(v, c)
	}
	gotO, gotL := s.dec(cb.o), cb.lse.F32()
	owned := map[int]bool{}
	row := 0
	exact := true
	for _, kv := range r.kvLen {
		exact = exact && kv <= fuzzExactLen
	}
	for b := range r.qLen {
		for i := range r.qLen[b] {
			k := r.qRow[b] + i
			owned[k] = true
			if !exact {
				for j, x := range gotO[k*rowO : (k+1)*rowO] {
					if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
						return false, fmt.Sprintf("o row %d (sequence %d) [%d] = %v", k, b, j, x)
					}
				}
				continue
			}
			if e, j, ok := CompareOut(v.DType, gotO[k*rowO:(k+1)*rowO], wantO[(row+i)*rowO:(row+i+1)*rowO], mag[(row+i)*rowO:(row+i+1)*rowO]); !ok {
				at := (row+i)*rowO + j
				return false, fmt.Sprintf("o row %d (sequence %d) [%d]: error %g (got %v, want %v, mag %g: %.3g units of 2^-24 mag beyond rounding)",
					k, b, j, e, gotO[k*rowO+j], wantO[at], mag[at], reference.MagErr(v.DType, gotO[k*rowO+j:k*rowO+j+1], wantO[at:at+1], mag[at:at+1]))
			}
			if e, j, ok := reference.Compare(gotL[k*v.QOHeads:(k+1)*v.QOHeads], wantL[(row+i)*v.QOHeads:(row+i+1)*v.QOHeads], Tolerance); !ok {
				return false, fmt.Sprintf("lse row %d (sequence %d) [%d]: error %g", k, b, j, e)
			}
		}
		row += r.qLen[b]
	}
	size := reference.Size(v.DType)
	for k := range len(gotL) / v.QOHeads {
		if owned[k] {
			continue
		}
		if !bytes.Equal(cb.o.U8()[k*rowO*size:(k+1)*rowO*size], oBefore[k*rowO*size:(k+1)*rowO*size]) ||
			!bytes.Equal(cb.lse.U8()[k*v.QOHeads*4:(k+1)*v.QOHeads*4], lseBefore[k*v.QOHeads*4:(k+1)*v.QOHeads*4]) {
			return false, fmt.Sprintf("row %d belongs to no sequence but was written", k)
		}
	}
	return true, ""
}

// slotRules states the rules of append and qkv_append (DESIGN §3.2):
// n or num_pages negative is BAD_ARGUMENT, n * kv_heads items past the
// limit TOO_LARGE, a position_map entry neither -1 (skipped) nor a slot of
// the pool BAD_SLOT; need is the pool pages a valid call writes.
func slotRules(v *ir.Variant, fc fuzzCase) (st int32, need int64) {
	n, np, ps := fc.Scalars["n"], fc.Scalars["num_pages"], int64(v.PageSize)
	// qkv_append with rope at_append from a table: rope_positions < 0 is
	// a scalar check, every position is checked against it after the slots.
	table := v.Rope != nil && v.Rope.AtAppend && v.Rope.Style == ir.RopeTable
	rp := fc.Scalars["rope_positions"]
	switch {
	case n < 0 || np < 0 || table && rp < 0:
		return lower.ErrBadArgument, 0
	case n*int64(v.KVHeads) > lower.MaxItems:
		return lower.ErrTooLarge, 0
	}
	for _, slot := range fc.Arrays["position_map"][:n] {
		if slot < -1 || int64(slot) >= np*ps {
			return lower.ErrBadSlot, 0
		}
		need = max(need, int64(slot)/ps+1)
	}
	if table {
		for _, p := range fc.Arrays["positions"][:n] {
			if p < 0 || int64(p) >= rp {
				return lower.ErrBadArgument, 0
			}
		}
	}
	return 0, need
}

// copyPageRules states copy_page's: num_pages negative is BAD_ARGUMENT, a
// source or destination outside the pool BAD_PAGE_ID, a length outside
// 0..page_size BAD_LENGTH.
func copyPageRules(v *ir.Variant, fc fuzzCase) (st int32, need int64) {
	sc := fc.Scalars
	np, src, dst, length := sc["num_pages"], sc["src_page"], sc["dst_page"], sc["length"]
	switch {
	case np < 0:
		return lower.ErrBadArgument, 0
	case src < 0 || src >= np || dst < 0 || dst >= np:
		return lower.ErrBadPageID, 0
	case length < 0 || length > int64(v.PageSize):
		return lower.ErrBadLength, 0
	}
	return 0, max(src, dst) + 1
}

// runFuzzPages runs append or copy_page and checks the pool against the
// byte model (or untouched on a bad status).
func runFuzzPages(s *Suite, fc fuzzCase) fuzzResult {
	v := s.V
	sc := fc.Scalars
	pa := s.pools() // K and V, or MLA's ckv and kpe
	dk, dv := pa[0].d, pa[1].d
	np := sc["num_pages"]
	stated := slotRules
	if fc.Role == ir.RoleCopyPage {
		stated = copyPageRules
	}
	st32, need := stated(v, fc) // need: pool pages the call writes or reads
	pages := max(1, min(max(np, need), fuzzCapPages))
	if need > pages {
		return fuzzResult{Skip: true, Pass: true}
	}
	rng := rand.New(rand.NewSource(fc.Seed))
	pool := s.randomPool(rng, int(pages))
	want := pagePool{k: bytes.Clone(pool.k), v: bytes.Clone(pool.v)}
	size := reference.Size(v.KVDType) // of a stored element
	cb := &caseBuffers{vals: map[string]int64{}}
	defer cb.free()
	for k, x := range sc {
		cb.vals[k] = x
	}
	var dupes []func(k, v []byte) // fill the model's rows after the call
	if fc.Role == ir.RoleAppend {
		pm := fc.Arrays["position_map"]
		// The rows as the caller passes them, and as the cache must hold
		// them: the same bytes, or each element quantized with its kv
		// head's random positive scale (reference.Quantize, bit for bit).
		ks, vs := s.appendScales(rng)
		kNew, kStored := s.appendRows(rng, len(pm), dk, ks, nil)
		vNew, vStored := s.appendRows(rng, len(pm), dv, vs, nil)
		s.addPoolScales(cb, ks, vs)
		if st32 == 0 {
			// Rows naming the same slot race (docs/semantics.md): each
			// element of the slot's K and V rows is that element of one
			// of them, which one unspecified. The model takes, per
			// element, the kernel's if it is one of the candidates', else
			// the last row's.
			rowsOf := map[int32][]int{}
			for i, slot := range pm[:sc["n"]] {
				if slot >= 0 {
					rowsOf[slot] = append(rowsOf[slot], i)
				}
			}
			for slot, rows := range rowsOf {
				page, off := int(slot)/v.PageSize, int(slot)%v.PageSize
				for h := range v.KVHeads {
					kx, _ := s.rowSpan(page, h, off, dk)
					vx, _ := s.rowSpan(page, h, off, dv)
					kRow := func(i int) []byte { return kStored[(i*v.KVHeads+h)*dk*size:][:dk*size] }
					vRow := func(i int) []byte { return vStored[(i*v.KVHeads+h)*dv*size:][:dv*size] }
					dupes = append(dupes, func(k, vv []byte) {
						pickElems(want.k[kx:], k[kx:], rows, kRow, dk, size)
						pickElems(want.v[vx:], vv[vx:], rows, vRow, dv, size)
					})
				}
			}
		}
		cb.add(pa[0].in, cpurt.U8Buffer(kNew))
		cb.add(pa[1].in, cpurt.U8Buffer(vNew))
		cb.add("position_map", cpurt.I32Buffer(pm))
	} else if st32 == 0 {
		src, dst := int(sc["src_page"]), int(sc["dst_page"])
		for slot := range int(sc["length"]) {
			for h := range v.KVHeads {
				a, b := s.rowSpan(src, h, slot, dk)
				x, y := s.rowSpan(dst, h, slot, dk)
				copy(want.k[x:y], pool.k[a:b])
				a, b = s.rowSpan(src, h, slot, dv)
				x, y = s.rowSpan(dst, h, slot, dv)
				copy(want.v[x:y], pool.v[a:b])
			}
		}
	}
	kp := cb.add(pa[0].pages, cpurt.U8Buffer(pool.k))
	vp := cb.add(pa[1].pages, cpurt.U8Buffer(pool.v))
	st, err := s.run(fc.Role, cb)
	for _, d := range dupes {
		d(kp.U8(), vp.U8())
	}
	res := fuzzResult{Status: st}
	switch {
	case err != nil:
		res.Msg = err.Error()
	case st != st32:
		res.Msg = fmt.Sprintf("status %d, the documented rules give %d", st, st32)
	case !bytes.Equal(kp.U8(), want.k) || !bytes.Equal(vp.U8(), want.v):
		res.Msg = fmt.Sprintf("status %d: the pool differs from the model", st)
	default:
		res.Pass = true
	}
	return res
}

// pickElems writes to want the model of a slot's row of d elements of
// size bytes that the rows named by rows raced for: per element, got's
// bytes when one of the rows (row(i)) has them there, else the last row's.
func pickElems(want, got []byte, rows []int, row func(int) []byte, d, size int) {
	for j := range d {
		e := row(rows[len(rows)-1])[j*size : (j+1)*size]
		for _, i := range rows {
			if c := row(i)[j*size : (j+1)*size]; bytes.Equal(got[j*size:(j+1)*size], c) {
				e = c
			}
		}
		copy(want[j*size:], e)
	}
}

// runFuzzMerge runs merge_state on a random state of up to 3 rows with n
// mutated: the first n rows must merge, the rest stay untouched.
func runFuzzMerge(s *Suite, fc fuzzCase) fuzzResult {
	v := s.V
	n := fc.Scalars["n"]
	var want int32
	switch {
	case n < 0:
		want = lower.ErrBadArgument
	case n*int64(v.QOHeads) > lower.MaxItems:
		want = lower.ErrTooLarge
	}
	rows := 3 * v.QOHeads
	rng := rand.New(rand.NewSource(fc.Seed))
	va, vb := make([]float32, rows*v.HeadDimV), make([]float32, rows*v.HeadDimV)
	sa, sb := make([]float32, rows), make([]float32, rows)
	for i := range va {
		va[i], vb[i] = reference.Round(v.DType, rng.Float32()*2-1), reference.Round(v.DType, rng.Float32()*2-1)
	}
	for i := range sa {
		sa[i], sb[i] = rng.Float32()*8-4, rng.Float32()*8-4
	}
	cb := s.mergeArgs(va, sa, vb, sb, 3)
	defer cb.free()
	cb.vals["n"] = n
	before := append(bytes.Clone(cb.byName["v"].U8()), cb.byName["s"].U8()...)
	st, err := s.run(ir.RoleMergeState, cb)
	res := fuzzResult{Status: st}
	switch {
	case err != nil:
		res.Msg = err.Error()
	case st != want:
		res.Msg = fmt.Sprintf("status %d, the documented rules give %d", st, want)
	case st != 0:
		res.Pass = bytes.Equal(before, append(bytes.Clone(cb.byName["v"].U8()), cb.byName["s"].U8()...))
		if !res.Pass {
			res.Msg = fmt.Sprintf("status %d but v or s was written", st)
		}
	default:
		f64 := func(xs []float32) []float64 {
			o := make([]float64, len(xs))
			for i, x := range xs {
				o[i] = float64(x)
			}
			return o
		}
		m := int(n) * v.QOHeads
		wantV, wantS, mag := reference.MergeStateMag(v.LSEBase, f64(va[:m*v.HeadDimV]), f64(sa[:m]), f64(vb[:m*v.HeadDimV]), f64(sb[:m]))
		gotV, gotS := s.dec(cb.byName["v"]), cb.byName["s"].F32()
		_, _, okV := compareNaN(gotV[:m*v.HeadDimV], wantV, func(g []float32, w []float64) (float64, int, bool) {
			return CompareOut(v.DType, g, w, mag)
		})
		_, _, okS := compareNaN(gotS[:m], wantS, func(g []float32, w []float64) (float64, int, bool) {
			return reference.Compare(g, w, Tolerance)
		})
		size := reference.Size(v.DType)
		rest := bytes.Equal(cb.byName["v"].U8()[m*v.HeadDimV*size:], before[m*v.HeadDimV*size:rows*v.HeadDimV*size]) &&
			bytes.Equal(cb.byName["s"].U8()[m*4:], before[rows*v.HeadDimV*size+m*4:])
		res.Pass = okV && okS && rest
		if !res.Pass {
			res.Msg = fmt.Sprintf("merge of %d rows: v ok %v, s ok %v, rows past n untouched %v", n, okV, okS, rest)
		}
	}
	return res
}

// fuzzRope is a fuzz case's RoPE table: rope_positions rows of cos and sin.
type fuzzRope struct {
	cos, sin  []float32
	positions int32
}
