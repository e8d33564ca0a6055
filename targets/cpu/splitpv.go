package cpu

import (
	"fmt"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// Split products on the matrix unit (x86-64-amx): prefill's products
// whose operands bf16 does not hold run on bf16 pairs all the same, each
// operand value split into bf16 parts that sum to it exactly — one for an
// exact bf16 value, two for an f16 value (11 significant bits: the top 8,
// then the last 3), three for any f32 value (24 bits, 8 a part: the
// softmax weights P; CUDA's use-mma splits P into three bf16 parts too,
// gpu.MatrixPlan.Parts). A product of a values of pa parts and b values of
// pb parts is the sum of pa·pb terms a_i·b_j per position k; the terms go
// two to a bf16 pair, and an odd one left over pairs over positions k and
// k+1 (splitPlan):
//
//	bf16 P·V (3×1): (p0, p1)·(v, v) per k, (p2[k], p2[k+1])·(v[k], v[k+1])
//	f16 P·V (3×2):  (p0, p0)·(vh, vl), (p1, p1)·(vh, vl), (p2, p2)·(vh, vl)
//	f16 Q·Kᵀ (2×2): (qh, qh)·(kh, kl), (ql, ql)·(kh, kl)
//
// A' [M, S] holds A's pairs, S pair steps a row: term pair t at t·K + k,
// the left-over term at T·K + k/2 (T pairs); B' [S, N] B's, B read as
// [K, N] rows (Q·Kᵀ's K tile transposed first, as the f32 micro-kernels
// read it). rt.amx_mm32 (vdpbf16ps elsewhere) then runs A'·B' over 2S bf16
// steps instead of K. The parts are truncations: part 0 is the value's top
// 8 significant bits, part 1 the top 8 of what is left (the difference is
// exact: Sterbenz), part 2 the rest, exactly, as long as every part is a
// normal bf16 — true for 0 and every value of at least 2^-103 (f16 values
// are at least 2^-24). TDPBF16PS (and vdpbf16ps) read denormal inputs as
// zero and flush denormal results, so a tile takes the f32 micro-kernels
// instead when an operand value is not finite (an inf part leaves a NaN
// remainder; a hidden position's weight -0 times an inf or NaN V would be
// NaN, where zeroskip adds nothing: DESIGN §3) or is nonzero and below
// splitTiny (its parts or products could be flushed).
//
// On AVX512-BF16 without AMX the split does not pay: vdpbf16ps issues at
// the FMA's rate with twice its products, and the three parts take three
// products per weight and position where f32 takes one multiply-add, plus
// the packing (2048-token causal bf16 prefill, 1 thread, Zen 5: 1.31× the
// time with f32 P·V, 2026-12-03). So only x86-64-amx takes it; splitPVDot
// turns it on at the vdpbf16ps levels for the tests.

// splitPVDot makes the vdpbf16ps levels without AMX run split products
// too (tests only).
var splitPVDot = false

// splitTiny is the f32 bits of 2^-100: a nonzero operand value below it
// sends its tile to the f32 micro-kernels.
const splitTiny = (127 - 100) << 23

// splitPlan is how a split product pairs its terms: A's values in pa
// parts, B's in pb; pairs lists the term pairs ({i1, j1}, {i2, j2}: a_i1·b_j1
// in a pair's low half, a_i2·b_j2 in its high half), tail the left-over
// term {i, j} (nil when pa·pb is even).
type splitPlan struct {
	pa, pb int
	pairs  [][2][2]int
	tail   []int
}

// newSplitPlan pairs the pa·pb terms in order, i-major.
func newSplitPlan(pa, pb int) splitPlan {
	var terms [][2]int
	for i := range pa {
		for j := range pb {
			terms = append(terms, [2]int{i, j})
		}
	}
	p := splitPlan{pa: pa, pb: pb}
	for len(terms) >= 2 {
		p.pairs = append(p.pairs, [2][2]int{terms[0], terms[1]})
		terms = terms[2:]
	}
	if len(terms) == 1 {
		p.tail = terms[0][:]
	}
	return p
}

// steps is the pair steps of a row of A' for K positions.
func (p splitPlan) steps(K int) int {
	if p.tail != nil {
		return len(p.pairs)*K + K/2
	}
	return len(p.pairs) * K
}

// splitParts is the bf16 parts a value of array x takes: 1 for exact bf16
// values, 2 for f16 values, else 3.
func splitParts(x string, exact, half map[string]bool) int {
	switch {
	case exact[x]:
		return 1
	case half[x]:
		return 2
	}
	return 3
}

// splitFits says how level l runs matmul mm as a split product, if it
// does: prefill's P·V (B as is, not at row offsets) over B of exact bf16
// or f16 values, A any local f32 array; prefill's Q·Kᵀ (B transposed, a
// local array, at least BlockMinRows rows) over A and B of exact f16
// values (bf16 ones take dotBF16Fits' pairs); K a multiple of 32, N of the
// level's lanes, no code scale folded; at an AMX level on whole
// rt.amx_mm32 blocks, elsewhere only with splitPVDot.
func splitFits(mm *ir.MatMul, exact, half map[string]bool, allocs map[string]*ir.Alloc, fold float64, l Level) (splitPlan, bool) {
	if !l.DotBF16 || mm.BRows != "" || fold != 0 || mm.K%32 != 0 || mm.N%l.Lanes != 0 {
		return splitPlan{}, false
	}
	if a, ok := allocs[mm.A]; !ok || a.T != ir.F32 || a.Size < mm.M*mm.K {
		return splitPlan{}, false
	}
	if b, ok := allocs[mm.B]; !ok || b.T != ir.F32 || b.Size < mm.N*mm.K {
		return splitPlan{}, false
	}
	pa, pb := splitParts(mm.A, exact, half), splitParts(mm.B, exact, half)
	if pb > 2 || pa*pb == 1 || mm.TransB && (pa > 2 || mm.M < BlockMinRows || mm.Accumulate || mm.ZeroSkip) {
		return splitPlan{}, false
	}
	if c, ok := mm.KExt.(*ir.Const); mm.TransB && (!ok || c.Int != int64(mm.K)) {
		return splitPlan{}, false
	}
	p := newSplitPlan(pa, pb)
	if l.AMX {
		return p, amxBlockFits(l, mm.M, mm.N, 2*p.steps(mm.K))
	}
	return p, splitPVDot
}

// splitNames are the arrays of one split product: A' and B' (i32 pairs)
// and, for an accumulating product, the product (f32 [M, N]) before it
// is added to C.
type splitNames struct{ a, b, c string }

// splitLoBad is the limit of splitVector's low key a + 0x7FFFFFFF (a an
// f32's bits without the sign; the sum wraps): the key is -2^31 + a - 1
// for a nonzero a, in the order of the values, and 0x7FFFFFFF for a zero,
// above every other, so a tile holds a nonzero value below splitTiny
// exactly when the keys' signed minimum is below splitLoBad.
const splitLoBad = -(1 << 31) + splitTiny - 1

// splitHiBad is the largest f32 bits without the sign of a finite value:
// a tile holds an inf or a NaN exactly when the largest is above it.
const splitHiBad = 0x7F7FFFFF

// lowHalf is the top 16 bits of each lane of i32 vector x moved to the
// low half (the high half zero): a bf16's bits as the low part of a pair.
func lowHalf(x ir.Expr, L int) ir.Expr {
	vi := ir.Vec(ir.I32, L)
	return ir.Bin(ir.And, ir.Bin(ir.Shr, x, &ir.Const{T: vi, Int: 16}), &ir.Const{T: vi, Int: 0xFFFF})
}

// highHalf is x with its low 16 bits cleared (a truncation to bf16).
func highHalf(x ir.Expr, L int) ir.Expr {
	return ir.Bin(ir.And, x, &ir.Const{T: ir.Vec(ir.I32, L), Int: -0x10000})
}

// splitLets splits the f32 bits of i32 vector x into n bf16 parts (f32
// bits with a zero low half), as lets named prefix+"p0" ...; the parts sum
// to x exactly when x is exact bf16 (n = 1), f16 (n = 2) or any normal f32
// value of at least 2^-103 (n = 3).
func splitLets(prefix string, x ir.Expr, n, L int) ([]ir.Stmt, []ir.Expr) {
	vf, vi := ir.Vec(ir.F32, L), ir.Vec(ir.I32, L)
	if n == 1 {
		return nil, []ir.Expr{x}
	}
	var lets []ir.Stmt
	var parts []ir.Expr
	rest := x
	for k := range n {
		name := fmt.Sprintf("%sp%d", prefix, k)
		if k == n-1 {
			// What is left fits a bf16 exactly.
			lets = append(lets, &ir.Let{Name: name, Value: rest})
		} else {
			lets = append(lets, &ir.Let{Name: name, Value: highHalf(rest, L)})
			r := fmt.Sprintf("%sr%d", prefix, k+1)
			lets = append(lets, &ir.Let{Name: r, Value: &ir.Bitcast{To: vi, X: ir.Bin(ir.Sub, &ir.Bitcast{To: vf, X: rest}, &ir.Bitcast{To: vf, X: ir.R(name, vi)})}})
			rest = ir.R(r, vi)
		}
		parts = append(parts, ir.R(name, vi))
	}
	return lets, parts
}

// pairOf is the pair of bf16 parts lo (low half) and hi (high half).
func pairOf(lo, hi ir.Expr, L int) ir.Expr {
	return ir.Bin(ir.Or, lowHalf(lo, L), highHalf(hi, L))
}

// splitVector loads f32 vector ld as i32 bits named x, folds its lanes
// into the flag vector vars mx (the largest bits without the sign) and
// mx_lo (the smallest low key, splitLoBad's), integer arithmetic rather
// than compares into masks, and splits it into n parts (splitLets, lets
// named prefix...): the statements and the parts.
func splitVector(x string, ld ir.Expr, mx, prefix string, n, L int) ([]ir.Stmt, []ir.Expr) {
	vi := ir.Vec(ir.I32, L)
	abs := ir.Bin(ir.And, ir.R(x, vi), &ir.Const{T: vi, Int: 0x7FFFFFFF})
	out := []ir.Stmt{
		&ir.Let{Name: x, Value: &ir.Bitcast{To: vi, X: ld}},
		&ir.Let{Name: x + "_abs", Value: abs},
		&ir.Assign{Name: mx, Value: ir.Bin(ir.Max, ir.R(mx, vi), ir.R(x+"_abs", vi))},
		&ir.Assign{Name: mx + "_lo", Value: ir.Bin(ir.Min, ir.R(mx+"_lo", vi), ir.Bin(ir.Add, ir.R(x+"_abs", vi), &ir.Const{T: vi, Int: 0x7FFFFFFF}))},
	}
	lets, parts := splitLets(prefix, ir.R(x, vi), n, L)
	return append(out, lets...), parts
}

// splitLoops runs body in loops over v0 in 0 .. hi0 and v1 in 0 .. hi1,
// with the flag vector vars mx and mx_lo (splitVector's) at their
// identities before them and i32 var bad set after: 1 when a value was not
// finite (the largest bits above splitHiBad) or nonzero below splitTiny
// (the smallest key below splitLoBad), else 0.
func splitLoops(v0 string, hi0 ir.Expr, v1 string, hi1 int, body []ir.Stmt, mx, bad string, L int) []ir.Stmt {
	vi := ir.Vec(ir.I32, L)
	out := []ir.Stmt{
		&ir.Var{Name: mx, Init: &ir.Const{T: vi}},
		&ir.Var{Name: mx + "_lo", Init: &ir.Const{T: vi, Int: 0x7FFFFFFF}},
		&ir.For{Var: v0, Lo: i32c(0), Hi: hi0, Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
			&ir.For{Var: v1, Lo: i32c(0), Hi: i32c(hi1), Kind: ir.Serial, Body: &ir.Block{Stmts: body}}}}},
	}
	hiTree, hi := laneTree(mx, ir.Max, L)
	loTree, lo := laneTree(mx+"_lo", ir.Min, L)
	out = append(append(out, hiTree...), loTree...)
	return append(out, &ir.Var{Name: bad, Init: ir.Sel(ir.Bin(ir.Or, ir.Bin(ir.Gt, hi, ir.Int(splitHiBad)), ir.Bin(ir.Lt, lo, ir.Int(splitLoBad))), i32c(1), i32c(0))})
}

// splitPairsA writes rows m < mm.MExt of A ([M, K] f32) into dst as A'
// pairs of plan p and leaves i32 var bad 1 when one of the values keeps
// the tile off the split product: per row, K/(2L) steps of two vector
// loads, their parts, and a store per term pair and vector (and one for
// the left-over term's pairs of both vectors).
func splitPairsA(mm *ir.MatMul, p splitPlan, dst, bad string, L int) []ir.Stmt {
	vf := ir.Vec(ir.F32, L)
	K, S := mm.K, p.steps(mm.K)
	r, c := ir.R("sp_r", ir.I32), ir.R("sp_c", ir.I32)
	mx := bad + "_mx"
	var body []ir.Stmt
	var parts [2][]ir.Expr
	for h := range 2 {
		ld := ir.Ld(mm.A, vf, addE(addE(mulE(r, K), mulE(c, 2*L)), i32c(h*L)))
		stmts, ps := splitVector(fmt.Sprintf("sp_x%d", h), ld, mx, fmt.Sprintf("sp_a%d", h), p.pa, L)
		body = append(body, stmts...)
		parts[h] = ps
		for t, tp := range p.pairs {
			body = append(body, &ir.Store{Buf: dst, Index: addE(addE(mulE(r, S), i32c(t*K)), addE(mulE(c, 2*L), i32c(h*L))),
				Value: pairOf(ps[tp[0][0]], ps[tp[1][0]], L)})
		}
	}
	if p.tail != nil {
		even, odd := make([]int, L), make([]int, L)
		for i := range L {
			even[i], odd[i] = 2*i, 2*i+1
		}
		x0, x1 := parts[0][p.tail[0]], parts[1][p.tail[0]]
		body = append(body, &ir.Store{Buf: dst, Index: addE(addE(mulE(r, S), i32c(len(p.pairs)*K)), mulE(c, L)),
			Value: pairOf(&ir.VShuffle{X: x0, Y: x1, Mask: even}, &ir.VShuffle{X: x0, Y: x1, Mask: odd}, L)})
	}
	return splitLoops("sp_r", mm.MExt, "sp_c", K/(2*L), body, mx, bad, L)
}

// splitPairsB writes src ([K, N] of srcElem, widened as loaded: B, or
// Q·Kᵀ's K tile transposed) into dst as B' pairs of plan p and leaves i32
// var bad 1 when one of its values keeps the tile off the split product:
// per pair of rows and vector of columns, two loads, their parts, and a
// store per row and term pair (and one for the left-over term).
func splitPairsB(mm *ir.MatMul, p splitPlan, src string, srcElem ir.Type, dst, bad string, L int) []ir.Stmt {
	K, N := mm.K, mm.N
	k, n := ir.R("sp_k", ir.I32), ir.R("sp_n", ir.I32)
	mx := bad + "_mx"
	var body []ir.Stmt
	var parts [2][]ir.Expr
	for h := range 2 {
		row := addE(mulE(k, 2), i32c(h))
		stmts, ps := splitVector(fmt.Sprintf("sp_v%d", h), passes.LoadF32(src, srcElem, L, addE(mulE(row, N), mulE(n, L))), mx, fmt.Sprintf("sp_b%d", h), p.pb, L)
		body = append(body, stmts...)
		parts[h] = ps
		for t, tp := range p.pairs {
			body = append(body, &ir.Store{Buf: dst, Index: addE(mulE(addE(row, i32c(t*K)), N), mulE(n, L)),
				Value: pairOf(ps[tp[0][1]], ps[tp[1][1]], L)})
		}
	}
	if p.tail != nil {
		body = append(body, &ir.Store{Buf: dst, Index: addE(mulE(addE(k, i32c(len(p.pairs)*K)), N), mulE(n, L)),
			Value: pairOf(parts[0][p.tail[1]], parts[1][p.tail[1]], L)})
	}
	return splitLoops("sp_k", i32c(K/2), "sp_n", N/L, body, mx, bad, L)
}

// splitProduct is mm (splitFits: plan p) as a split product where its
// operands allow it, else f32 (the statements that compute mm in f32
// arithmetic): A' packed from A (unless packedA: hoisted, its flag set
// there) and B' from src (B as [K, N] rows) and both checked, then the
// pair product — into C; accumulating, C's rows first multiplied by
// scale[row] (with a scale array), into C on the tiles
// (splitAccumulates), else into nm.c, whose rows are then added to C.
// On the tiles the blocks' rows past mm.MExt take the A' rows there
// (stale pairs) into C's rows there, which no one reads.
func splitProduct(mm *ir.MatMul, p splitPlan, nm splitNames, src string, srcElem ir.Type, sh microShape, l Level, scale string, f32 []ir.Stmt, packedA bool) []ir.Stmt {
	L := l.Lanes
	badA, badB := nm.a+"bad", nm.b+"bad"
	var out []ir.Stmt
	if !packedA {
		out = splitPairsA(mm, p, nm.a, badA, L)
	}
	out = append(out, splitPairsB(mm, p, src, srcElem, nm.b, badB, L)...)
	steps := p.steps(mm.K)
	prod := *mm
	prod.K, prod.KExt = 2*steps, i32c(2*steps)
	prod.TransB, prod.Accumulate, prod.ZeroSkip = false, false, false
	var pairs []ir.Stmt
	switch {
	case splitAccumulates(mm, p, l):
		// C's rows, each first multiplied by scale[row] unless that is
		// 1 (the softmax's rescale: 1 for the rows whose max the tile
		// left alone, most of them once a row has seen a few tiles),
		// then the tiles' product, summed from zero, added to them
		// (rt.amx_mm32's acc).
		prod.Accumulate = true
		if scale != "" {
			pairs = append(pairs, rescaleRows(mm, scale, L))
		}
		return append(out, &ir.If{Cond: ir.Bin(ir.Ne, ir.Bin(ir.Or, ir.R(badA, ir.I32), ir.R(badB, ir.I32)), i32c(0)),
			Then: &ir.Block{Stmts: f32}, Else: &ir.Block{Stmts: append(pairs, pairsMatMul(&prod, nm.a, nm.b, sh, l)...)}})
	case mm.Accumulate:
		prod.C = nm.c
	}
	pairs = pairsMatMul(&prod, nm.a, nm.b, sh, l)
	if mm.Accumulate {
		// C += the product, row by row.
		vf := ir.Vec(ir.F32, L)
		m, n := ir.R("sp_m", ir.I32), ir.R("sp_j", ir.I32)
		at := addE(mulE(m, mm.N), mulE(n, L))
		acc := ir.Ld(mm.C, vf, at)
		var v ir.Expr = ir.Bin(ir.Add, acc, ir.Ld(nm.c, vf, at))
		if scale != "" {
			v = &ir.MulAdd{X: acc, Y: ir.Splat(ir.Ld(scale, ir.F32, m), L), Z: ir.Ld(nm.c, vf, at)}
		}
		pairs = append(pairs, &ir.For{Var: "sp_m", Lo: i32c(0), Hi: mm.MExt, Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
			&ir.For{Var: "sp_j", Lo: i32c(0), Hi: i32c(mm.N / L), Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
				&ir.Store{Buf: mm.C, Index: at, Value: v}}}}}}})
	}
	return append(out, &ir.If{Cond: ir.Bin(ir.Ne, ir.Bin(ir.Or, ir.R(badA, ir.I32), ir.R(badB, ir.I32)), i32c(0)),
		Then: &ir.Block{Stmts: f32}, Else: &ir.Block{Stmts: pairs}})
}

// splitAccumulates reports whether split product mm (plan p) at level l
// accumulates into C on the tiles (rt.amx_mm32's acc) rather than into
// an array of its own that is then added to C.
func splitAccumulates(mm *ir.MatMul, p splitPlan, l Level) bool {
	return mm.Accumulate && amxBlockFits(l, mm.M, mm.N, 2*p.steps(mm.K))
}

// rescaleRows multiplies C's rows m < mm.MExt by scale[m], skipping the
// rows whose scale is 1 (C unchanged).
func rescaleRows(mm *ir.MatMul, scale string, L int) ir.Stmt {
	vf := ir.Vec(ir.F32, L)
	m, n := ir.R("sp_m", ir.I32), ir.R("sp_j", ir.I32)
	at := addE(mulE(m, mm.N), mulE(n, L))
	a := ir.R("sp_a", ir.F32)
	row := &ir.For{Var: "sp_j", Lo: i32c(0), Hi: i32c(mm.N / L), Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
		&ir.Store{Buf: mm.C, Index: at, Value: ir.Bin(ir.Mul, ir.Ld(mm.C, vf, at), ir.Splat(a, L))}}}}
	return &ir.For{Var: "sp_m", Lo: i32c(0), Hi: mm.MExt, Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
		&ir.Let{Name: "sp_a", Value: ir.Ld(scale, ir.F32, m)},
		&ir.If{Cond: ir.Bin(ir.Ne, a, &ir.Const{T: ir.F32, Float: 1}), Then: &ir.Block{Stmts: []ir.Stmt{row}}}}}}
}
