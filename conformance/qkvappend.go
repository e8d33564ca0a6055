package conformance

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"slices"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/reference"
)

// qkvInputs are a qkv_append call's inputs: qkv rows of the variant's
// dtype, positions, the qk_norm weights, and the angles' source of a
// table or factors rope.
type qkvInputs struct {
	qkv       []float32
	positions []int32
	qw, kw    []float32
	rope      reference.RopeSource
}

// qkvTableTop bounds the positions of a table rope's tokens: the table
// holds every row up to the highest, and a table's rows are any values,
// so positions near 2^20 would only make it large.
const qkvTableTop = 4096

// randomQKV draws n tokens of qkv (uniform in [-1, 1], rounded to the
// dtype), positions near pos0 (each within 64 of it, never negative; for
// a table near min(pos0, qkvTableTop)), qk_norm weights uniform in
// [-1, 1.5] and, for a table or factors rope at append,
// reference.RandomRopeSource covering the positions.
func (s *Suite) randomQKV(rng *rand.Rand, n, pos0 int) qkvInputs {
	v := s.V
	d := v.HeadDimQK
	in := qkvInputs{qkv: make([]float32, n*(v.QOHeads+2*v.KVHeads)*d)}
	for i := range in.qkv {
		in.qkv[i] = reference.Round(v.DType, rng.Float32()*2-1)
	}
	table := v.Rope != nil && v.Rope.Style == ir.RopeTable
	if table {
		pos0 = min(pos0, qkvTableTop)
	}
	top := int32(-1)
	for range n {
		in.positions = append(in.positions, int32(max(0, pos0-rng.Intn(64))))
		top = max(top, in.positions[len(in.positions)-1])
	}
	for range d {
		in.qw = append(in.qw, rng.Float32()*2.5-1)
		in.kw = append(in.kw, rng.Float32()*2.5-1)
	}
	if v.Rope != nil && v.Rope.AtAppend {
		in.rope = reference.RandomRopeSource(v, rng, top)
	}
	return in
}

// add puts the inputs into cb under qkv_append's argument names.
func (in qkvInputs) add(cb *caseBuffers, s *Suite) {
	cb.add("qkv", s.enc(in.qkv))
	cb.add("positions", cpurt.I32Buffer(in.positions))
	cb.add("q_norm_weight", cpurt.F32Buffer(in.qw))
	cb.add("k_norm_weight", cpurt.F32Buffer(in.kw))
	if in.rope.RopeCos != nil {
		cb.add("rope_cos", cpurt.F32Buffer(in.rope.RopeCos))
		cb.add("rope_sin", cpurt.F32Buffer(in.rope.RopeSin))
		cb.vals["rope_positions"] = int64(in.rope.RopePositions)
	}
	if in.rope.RopeFactors != nil {
		cb.add("rope_factors", cpurt.F32Buffer(in.rope.RopeFactors))
	}
}

// qkvWorst is the worst error of a run's checked outputs: the largest
// share of the allowance used (AllowanceUsed) and the largest error in
// ulps of the dtype (relative for f32), over q_out and the cached K rows.
type qkvWorst struct{ allowance, ulps float64 }

func (w *qkvWorst) note(dt ir.DType, got []float32, want, mag []float64) bool {
	used := AllowanceUsed(dt, got, want, mag)
	w.allowance = max(w.allowance, used)
	for i, x := range want {
		e := math.Abs(float64(got[i]) - x)
		if dt == ir.DTF32 {
			e /= math.Max(1, math.Abs(x))
		} else {
			e /= reference.ULP(dt, x)
		}
		w.ulps = max(w.ulps, e)
	}
	return used <= 1
}

// codeWithin reports whether an 8-bit cache's code c is one the kernel may
// store for the exact value x under scale sc: the code of some f32 value
// within allow of x (the kernel's f32 arithmetic), quantized as append
// does. Codes are monotone in the value, so c must lie between the codes
// of x - allow and x + allow.
func codeWithin(dt ir.DType, c uint8, x, allow float64, sc float32) bool {
	lo := reference.CodeValue(dt, reference.CodeOf(dt, (x-allow)/float64(sc)))
	hi := reference.CodeValue(dt, reference.CodeOf(dt, (x+allow)/float64(sc)))
	got := reference.CodeValue(dt, c)
	return got >= lo && got <= hi
}

// RunQKVAppend checks qkv_append against the float64 reference
// (reference.QKVAppend): q_out for every token, skipped ones included,
// within the dtype's rounding bound; the cached K rows too (8-bit codes:
// the code of a value within that bound), the V rows byte for byte as
// append stores them, and every other byte of the pools untouched. Bad
// inputs (slots, n, num_pages; with a table rope rope_positions and
// positions outside the table) must return their status with the pools
// and q_out untouched (bad slots and positions on the CPU only: a GPU
// kernel skips them, which the emulators check for a position). pos0
// places the tokens' positions (within 64 below it).
func (s *Suite) RunQKVAppend(seed int64, pos0 int) []Result {
	var out []Result
	v := s.V
	d, H, KVH, ps := v.HeadDimQK, v.QOHeads, v.KVHeads, v.PageSize
	rng := rand.New(rand.NewSource(seed))
	type qkvCase struct {
		name    string
		st      int32
		cpuOnly bool
		brk     func(pm []int32, vals map[string]int64)
		// pos breaks the inputs' positions (a table rope's cases).
		pos func(in *qkvInputs)
		// gpuSkip: on a target whose launchers cannot read positions, the
		// kernel skips token 1 (its position outside the table): status 0,
		// its q_out row and slot untouched, every other token written.
		gpuSkip bool
	}
	cases := []qkvCase{
		{name: fmt.Sprintf("qkv_append rows near position %d (some slots -1)", pos0)},
		{name: "qkv_append: num_pages INT32_MAX (a large pool)", brk: func(pm []int32, vals map[string]int64) { vals["num_pages"] = i32max }},
		{name: "qkv_append: slot outside the pool", st: lower.ErrBadSlot, cpuOnly: true, brk: func(pm []int32, vals map[string]int64) {
			pm[len(pm)-1] = int32(vals["num_pages"]) * int32(ps)
		}},
		{name: "qkv_append: slot -2", st: lower.ErrBadSlot, cpuOnly: true, brk: func(pm []int32, vals map[string]int64) { pm[0] = -2 }},
		{name: "qkv_append: slot INT32_MAX", st: lower.ErrBadSlot, cpuOnly: true, brk: func(pm []int32, vals map[string]int64) { pm[1] = i32max }},
		{name: "qkv_append: slot INT32_MIN", st: lower.ErrBadSlot, cpuOnly: true, brk: func(pm []int32, vals map[string]int64) { pm[3] = i32min }},
		{name: "qkv_append: n -1", st: lower.ErrBadArgument, brk: func(pm []int32, vals map[string]int64) { vals["n"] = -1 }},
		{name: "qkv_append: n INT32_MIN", st: lower.ErrBadArgument, brk: func(pm []int32, vals map[string]int64) { vals["n"] = i32min }},
		{name: "qkv_append: num_pages -1", st: lower.ErrBadArgument, brk: func(pm []int32, vals map[string]int64) { vals["num_pages"] = -1 }},
	}
	if KVH > 1 { // n * kv_heads items pass 2^31-1
		cases = append(cases, qkvCase{name: "qkv_append: n INT32_MAX", st: lower.ErrTooLarge, brk: func(pm []int32, vals map[string]int64) { vals["n"] = i32max }})
	}
	if v.Rope != nil && v.Rope.AtAppend && v.Rope.Style == ir.RopeTable {
		// rope_positions negative: a scalar check (GPU launchers too); a
		// position outside 0..rope_positions-1: the validation's.
		setRP := func(x int32) func(in *qkvInputs) { return func(in *qkvInputs) { in.rope.RopePositions = x } }
		cases = append(cases,
			qkvCase{name: "qkv_append: rope_positions -1", st: lower.ErrBadArgument, pos: setRP(-1)},
			qkvCase{name: "qkv_append: rope_positions INT32_MIN", st: lower.ErrBadArgument, pos: setRP(i32min)},
			qkvCase{name: "qkv_append: n 0, rope_positions -1", st: lower.ErrBadArgument, pos: setRP(-1),
				brk: func(pm []int32, vals map[string]int64) { vals["n"] = 0 }},
			qkvCase{name: "qkv_append: rope_positions 0", st: lower.ErrBadArgument, cpuOnly: true, pos: setRP(0)},
			qkvCase{name: "qkv_append: a position = rope_positions (a token with slot -1)", st: lower.ErrBadArgument, cpuOnly: true, pos: func(in *qkvInputs) {
				in.positions[2] = in.rope.RopePositions
			}},
			qkvCase{name: "qkv_append: last position -1", st: lower.ErrBadArgument, cpuOnly: true, pos: func(in *qkvInputs) {
				in.positions[len(in.positions)-1] = -1
			}},
			qkvCase{name: "qkv_append: a position INT32_MAX", st: lower.ErrBadArgument, cpuOnly: true, pos: func(in *qkvInputs) {
				in.positions[0] = i32max
			}},
			qkvCase{name: "qkv_append: a position = rope_positions (GPU: the token skipped)", gpuSkip: true, pos: func(in *qkvInputs) {
				in.positions[1] = in.rope.RopePositions
			}},
		)
	}
	for _, c := range cases {
		if c.cpuOnly && !s.checksTables || c.gpuSkip && s.checksTables {
			continue
		}
		r := Result{Variant: v.Name, Kernel: s.Entries[ir.RoleQKVAppend].Symbol, Case: c.name, DType: v.DType}
		n := 7
		ks, vs := s.appendScales(rng)
		pool := s.randomPool(rng, max(5, (n+ps-1)/ps)) // at least n slots
		perm := rng.Perm(pool.numPages * ps)
		pm := make([]int32, n)
		for i := range pm {
			pm[i] = int32(perm[i])
			if i%3 == 2 {
				pm[i] = -1
			}
		}
		in := s.randomQKV(rng, n, pos0)
		vals := map[string]int64{"n": int64(n), "num_pages": int64(pool.numPages)}
		if c.brk != nil {
			c.brk(pm, vals)
		}
		if c.pos != nil {
			c.pos(&in)
		}
		cb := &caseBuffers{vals: vals}
		in.add(cb, s)
		cb.add("position_map", cpurt.I32Buffer(pm))
		kp := cb.add("k_pages", cpurt.U8Buffer(pool.k))
		vp := cb.add("v_pages", cpurt.U8Buffer(pool.v))
		s.addPoolScales(cb, ks, vs)
		qPoison := nanSlice(n * H * d)
		qo := cb.add("q_out", s.enc(qPoison))
		qBefore := bytes.Clone(qo.U8())
		st, err := s.run(ir.RoleQKVAppend, cb)
		switch {
		case err != nil:
			r.Note = err.Error()
		case st != c.st:
			r.Note = fmt.Sprintf("status %d (want %d)", st, c.st)
		case c.st != 0:
			r.Pass = bytes.Equal(kp.U8(), pool.k) && bytes.Equal(vp.U8(), pool.v) && bytes.Equal(qo.U8(), qBefore)
			r.Note = fmt.Sprintf("status %d (want %d), outputs untouched: %v", st, c.st, r.Pass)
		default:
			skip := -1
			if c.gpuSkip {
				skip = 1
			}
			r.Pass, r.Note = s.checkQKV(in, pm, skip, ks, vs, pool, kp.U8(), vp.U8(), s.dec(qo), &r)
		}
		cb.free()
		out = append(out, r)
	}
	return out
}

// checkQKV judges a valid qkv_append's outputs (see RunQKVAppend) and
// records its worst errors in r. Token skip (-1: none) must have been
// skipped: its q_out row left as the NaN it was, its slot untouched.
func (s *Suite) checkQKV(in qkvInputs, pm []int32, skip int, ks, vs []float32, pool pagePool, gotK, gotV []byte, gotQ []float32, r *Result) (bool, string) {
	v := s.V
	d, KVH, ps := v.HeadDimQK, v.KVHeads, v.PageSize
	okSkip := true
	if skip >= 0 {
		in.positions, pm = slices.Clone(in.positions), slices.Clone(pm)
		in.positions[skip], pm[skip] = 0, -1 // the reference's row is not compared
		row := v.QOHeads * d
		for _, x := range gotQ[skip*row : (skip+1)*row] {
			okSkip = okSkip && math.IsNaN(float64(x))
		}
		gotQ = slices.Concat(gotQ[:skip*row], gotQ[(skip+1)*row:])
	}
	want := reference.QKVAppend(v, in.qkv, in.positions, in.qw, in.kw, &in.rope)
	if skip >= 0 {
		row := v.QOHeads * d
		want.Q = slices.Concat(want.Q[:skip*row], want.Q[(skip+1)*row:])
		want.QMag = slices.Concat(want.QMag[:skip*row], want.QMag[(skip+1)*row:])
	}
	var w qkvWorst
	okQ := w.note(v.DType, gotQ, want.Q, want.QMag) && okSkip
	// The K rows written: judged, then copied into the model pool, so that
	// a byte compare checks that nothing else changed.
	wantK, wantV := bytes.Clone(pool.k), bytes.Clone(pool.v)
	okK, size := true, reference.Size(v.KVDType)
	for i, slot := range pm {
		if slot < 0 {
			continue
		}
		for h := range KVH {
			a, b := s.rowSpan(int(slot)/ps, h, int(slot)%ps, d)
			row := (i*KVH + h) * d
			ex, mag := want.K[row:row+d], want.KMag[row:row+d]
			if v.Quantized() {
				sc := ks[h%len(ks)]
				for j, c := range gotK[a:b] {
					okK = okK && codeWithin(v.KVDType, c, ex[j], reference.HalfAllowance*mag[j], sc)
				}
			} else {
				okK = w.note(v.DType, reference.Decode(v.DType, gotK[a:b]), ex, mag) && okK
			}
			copy(wantK[a:b], gotK[a:b])
			xs := make([]float32, d)
			for j := range xs {
				xs[j] = float32(want.V[row+j])
			}
			vb := reference.Encode(v.DType, xs)
			if v.Quantized() {
				vb = make([]byte, d)
				for j, x := range xs {
					vb[j] = reference.Quantize(v.KVDType, x, vs[h%len(vs)])
				}
			}
			copy(wantV[a:b], vb[:d*size])
		}
	}
	r.MaxErr, r.Allowance = w.ulps, w.allowance
	restK, restV := bytes.Equal(gotK, wantK), bytes.Equal(gotV, wantV)
	note := fmt.Sprintf("status 0 (want 0), q_out within bound %v, K rows %v, other K bytes %v, V %v; max err %.3g ulp, allowance %.3g%s",
		okQ, okK, restK, restV, w.ulps, w.allowance, firstDiff("v_pages", gotV, wantV))
	return okQ && okK && restK && restV, note
}

// RunQKVThenAttention checks the composition rope at_append promises: for
// the case spec over the suite's variant (qkv_append, prefill and decode
// with rope at_append, an unquantized cache), qkv_append writes every
// cached token's K and V and the query tokens' q, prefill (or decode,
// one query per sequence) then runs over the written cache on q_out, and
// its o must equal the reference attention of inline, the same variant
// with rope inline and no qk_norm, on the unrotated (normed) q and k at
// the same positions.
func (s *Suite) RunQKVThenAttention(role ir.Role, spec reference.CaseSpec, seed int64) Result {
	v := s.V
	r := Result{Variant: v.Name, Kernel: s.Entries[role].Symbol, Case: "qkv_append then " + spec.Name, DType: v.DType}
	inline := *v
	rope := *v.Rope
	rope.AtAppend = false
	inline.Rope, inline.QKNorm = &rope, nil
	inline.Kernels = slices.DeleteFunc(slices.Clone(v.Kernels), func(k ir.KernelRef) bool { return k.Role == ir.RoleQKVAppend })
	rng := rand.New(rand.NewSource(seed))
	c := reference.NewCase(&inline, rng, spec)
	d, H, KVH, ps := v.HeadDimQK, v.QOHeads, v.KVHeads, v.PageSize
	// Every cached token of every sequence, its q heads the query's when it
	// is one of the sequence's last q_len tokens.
	n := 0
	for _, l := range c.KVLens {
		n += l
	}
	in := s.randomQKV(rng, n, 0)
	in.positions = in.positions[:0]
	in.rope = c.RopeSource // a table or factors: the inline reference's own
	pm := make([]int32, 0, n)
	qTok := make([]int, 0, c.TotalQ()) // token of each query row
	t := 0
	for b := range c.Batch {
		for p := range c.KVLens[b] {
			in.positions = append(in.positions, int32(p)+c.KRopeOffset[b])
			pm = append(pm, int32(c.Pages[b][p/ps]*ps+p%ps))
			if p >= c.KVLens[b]-c.QLens[b] {
				qTok = append(qTok, t)
			}
			t++
		}
	}
	// The reference's inputs: the normed, unrotated q and k (reference
	// .QKVAppend of the variant without rope), the V rows as given.
	noRope := *v
	noRope.Rope = nil
	norm := reference.QKVAppend(&noRope, in.qkv, in.positions, in.qw, in.kw, nil)
	for row, tok := range qTok {
		for h := range H {
			for j := range d {
				c.Q[(row*H+h)*d+j] = float32(norm.Q[(tok*H+h)*d+j])
			}
		}
		c.QRopePos[row] = in.positions[tok]
	}
	for tok, slot := range pm {
		for h := range KVH {
			for j := range d {
				at := reference.PageIndex(v, int(slot)/ps, h, int(slot)%ps, j, d)
				c.KPages[at] = float32(norm.K[(tok*KVH+h)*d+j])
				c.VPages[at] = float32(norm.V[(tok*KVH+h)*d+j])
			}
		}
	}
	wantO, wantL, mag := reference.AttentionMag(&inline, c)

	// qkv_append into a pool of NaN, then the attention over it.
	nanPool := s.encKV(nanSlice(len(c.KPages)))
	app := &caseBuffers{vals: map[string]int64{"n": int64(n), "num_pages": int64(c.NumPages)}}
	in.add(app, s)
	app.add("position_map", cpurt.I32Buffer(pm))
	kp := app.add("k_pages", nanPool)
	vp := app.add("v_pages", s.encKV(nanSlice(len(c.VPages))))
	qo := app.add("q_out", s.enc(nanSlice(n*H*d)))
	defer app.free()
	if st, err := s.run(ir.RoleQKVAppend, app); err != nil || st != 0 {
		r.Note = fmt.Sprintf("qkv_append: status %d %v", st, err)
		return r
	}
	cb := s.buffers(c)
	defer cb.free()
	copy(cb.byName["k_pages"].U8(), kp.U8())
	copy(cb.byName["v_pages"].U8(), vp.U8())
	q := cb.byName["q"].U8()
	rowBytes := H * d * reference.Size(v.DType)
	for row, tok := range qTok {
		copy(q[row*rowBytes:(row+1)*rowBytes], qo.U8()[tok*rowBytes:])
	}
	st, err := s.run(role, cb)
	if err != nil || st != 0 {
		r.Note = fmt.Sprintf("%s: status %d %v", role, st, err)
		return r
	}
	got := s.dec(cb.o)
	var idx int
	r.MaxErr, idx, r.Pass = CompareOut(v.DType, got, wantO, mag)
	r.Allowance = AllowanceUsed(v.DType, got, wantO, mag)
	var okL bool
	var idxL int
	r.LSEErr, idxL, okL = reference.Compare(cb.lse.F32(), wantL, Tolerance)
	r.Note = fmt.Sprintf("o max err %.3g, allowance %.3g", r.MaxErr, r.Allowance)
	if !r.Pass {
		r.Note += fmt.Sprintf("; o[%d] = %v, want %v", idx, got[max(idx, 0)], wantO[max(idx, 0)])
	}
	if !okL {
		r.Note += fmt.Sprintf("; lse[%d] = %v, want %v", idxL, cb.lse.F32()[max(idxL, 0)], wantL[max(idxL, 0)])
	}
	r.Pass = r.Pass && okL
	return r
}
