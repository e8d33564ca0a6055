package cpu

import (
	"fmt"

	"github.com/attnc/attnc/ir"
)

// P·V on the matrix unit (x86-64-amx). The weights P are f32 values that
// bf16 does not hold, so each is split into three bf16 parts whose sum is
// the weight exactly (24 significant bits, 8 a part; CUDA's use-mma splits
// P into three bf16 parts too: gpu.MatrixPlan.Parts), and the product runs
// on bf16 pairs over 3K/2 pair steps instead of K/2:
//
//	A' [M, 3K/2]: pair k < K is (p0[m,k], p1[m,k]); pair K+i is
//	              (p2[m,2i], p2[m,2i+1])
//	B' [3K/2, N]: pair row k < K is (v[k,n], v[k,n]); pair row K+i is
//	              (v[2i,n], v[2i+1,n])
//
// so that A'·B' = Σ_k (p0+p1+p2)[m,k]·v[k,n] = P·V, with V's values exact
// bf16 (a bf16 cache staged into f32). The parts are truncations: p0 is
// the weight's top 8 significant bits, p1 the top 8 of what is left (the
// difference is exact: Sterbenz), p2 the last 8, exactly, as long as
// every part is a normal bf16 — true for every weight of at least 2^-103
// (or 0). TDPBF16PS (and vdpbf16ps) read denormal inputs as zero and
// flush denormal results, so a tile takes the f32 micro-kernels instead
// when a weight is not finite (NaN reaches the output as IEEE arithmetic
// gives it) or is nonzero and below splitTiny, or when a V value is not
// finite (a hidden position's weight -0 times an inf or NaN V would be
// NaN, where zeroskip adds nothing: DESIGN §3) or is nonzero and below
// splitTiny (its products could be flushed).
//
// On AVX512-BF16 without AMX the split does not pay: vdpbf16ps issues at
// the FMA's rate with twice its products, and the three parts take three
// products per weight and position where f32 takes one multiply-add, plus
// the packing (2048-token causal bf16 prefill, 1 thread, Zen 5: 1.31× the
// time with f32 P·V, 2026-12-03). So only x86-64-amx takes it; splitPVDot
// turns it on at the vdpbf16ps levels for the tests.

// splitPVDot makes the vdpbf16ps levels without AMX run split P·V too
// (tests only).
var splitPVDot = false

// splitTiny is the f32 bits of 2^-100: a nonzero weight or V value below
// it sends its tile to the f32 micro-kernels.
const splitTiny = (127 - 100) << 23

// splitPVFits reports whether level l runs matmul mm as split P·V: a
// product with B as is (not transposed) whose B is a local array of exact
// bf16 values (exact: bf16Exact) and whose A is a local f32 array, K a
// multiple of 32, N of the level's lanes; at an AMX level on whole
// rt.amx_qk32 blocks of the 3K bf16 steps, elsewhere only with
// splitPVDot.
func splitPVFits(mm *ir.MatMul, exact map[string]bool, allocs map[string]*ir.Alloc, l Level) bool {
	if !l.DotBF16 || mm.TransB || mm.BRows != "" || !exact[mm.B] || mm.K%32 != 0 || mm.N%l.Lanes != 0 {
		return false
	}
	if a, ok := allocs[mm.A]; !ok || a.T != ir.F32 || a.Size < mm.M*mm.K {
		return false
	}
	if l.AMX {
		return amxBlockFits(l, mm.M, mm.N, 3*mm.K)
	}
	return splitPVDot
}

// splitNames are the arrays of one split P·V: A' and B' (i32 pairs) and
// the product (f32 [M, N]) before it is added to C.
type splitNames struct{ a, b, c string }

// splitBad is 1 in the lanes of i32 vector x (f32 bits) that keep a tile
// off the split product: not finite, or nonzero and below splitTiny.
func splitBad(x ir.Expr, L int) ir.Expr {
	vi := ir.Vec(ir.I32, L)
	a := ir.Bin(ir.And, x, &ir.Const{T: vi, Int: 0x7FFFFFFF})
	tiny := ir.Bin(ir.And, ir.Bin(ir.Gt, a, &ir.Const{T: vi}), ir.Bin(ir.Lt, a, &ir.Const{T: vi, Int: splitTiny}))
	huge := ir.Bin(ir.Ge, a, &ir.Const{T: vi, Int: 0x7F800000})
	return ir.Sel(ir.Bin(ir.Or, tiny, huge), &ir.Const{T: vi, Int: 1}, &ir.Const{T: vi})
}

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

// splitPairsA writes rows m < mm.MExt of A ([M, K] f32) into dst as A'
// pairs and leaves i32 var bad 1 when one of their weights keeps the tile
// off the split product: per row, K/(2L) steps of two vector loads, three
// parts each, two stores of (p0, p1) pairs and one of (p2, p2) pairs.
func splitPairsA(mm *ir.MatMul, dst, bad string, L int) []ir.Stmt {
	vf, vi := ir.Vec(ir.F32, L), ir.Vec(ir.I32, L)
	K, kp := mm.K, 3*mm.K/2
	r, c := ir.R("sp_r", ir.I32), ir.R("sp_c", ir.I32)
	even, odd := make([]int, L), make([]int, L)
	for i := range L {
		even[i], odd[i] = 2*i, 2*i+1
	}
	mx := bad + "_mx"
	name := func(s string, h int) string { return fmt.Sprintf("sp_%s%d", s, h) }
	ref := func(s string, h int, t ir.Type) ir.Expr { return ir.R(name(s, h), t) }
	var body []ir.Stmt
	for h := range 2 {
		at := addE(addE(mulE(r, K), mulE(c, 2*L)), i32c(h*L))
		body = append(body,
			&ir.Let{Name: name("x", h), Value: &ir.Bitcast{To: vi, X: ir.Ld(mm.A, vf, at)}},
			&ir.Assign{Name: mx, Value: ir.Bin(ir.Max, ir.R(mx, vi), splitBad(ref("x", h, vi), L))},
			// p0: the top 8 bits; r1 = x - p0 exactly.
			&ir.Let{Name: name("p0", h), Value: highHalf(ref("x", h, vi), L)},
			&ir.Let{Name: name("r1", h), Value: ir.Bin(ir.Sub, &ir.Bitcast{To: vf, X: ref("x", h, vi)}, &ir.Bitcast{To: vf, X: ref("p0", h, vi)})},
			&ir.Let{Name: name("p1", h), Value: highHalf(&ir.Bitcast{To: vi, X: ref("r1", h, vf)}, L)},
			// p2 = r1 - p1 exactly: at most 8 bits left, a bf16.
			&ir.Let{Name: name("p2", h), Value: &ir.Bitcast{To: vi, X: ir.Bin(ir.Sub, ref("r1", h, vf), &ir.Bitcast{To: vf, X: ref("p1", h, vi)})}},
			&ir.Store{Buf: dst, Index: addE(addE(mulE(r, kp), mulE(c, 2*L)), i32c(h*L)),
				Value: ir.Bin(ir.Or, lowHalf(ref("p0", h, vi), L), ref("p1", h, vi))})
	}
	p20, p21 := ref("p2", 0, vi), ref("p2", 1, vi)
	body = append(body, &ir.Store{Buf: dst, Index: addE(addE(mulE(r, kp), i32c(K)), mulE(c, L)),
		Value: ir.Bin(ir.Or, lowHalf(&ir.VShuffle{X: p20, Y: p21, Mask: even}, L), highHalf(&ir.VShuffle{X: p20, Y: p21, Mask: odd}, L))})
	return append([]ir.Stmt{&ir.Var{Name: mx, Init: &ir.Const{T: vi}},
		&ir.For{Var: "sp_r", Lo: i32c(0), Hi: mm.MExt, Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
			&ir.For{Var: "sp_c", Lo: i32c(0), Hi: i32c(K / (2 * L)), Kind: ir.Serial, Body: &ir.Block{Stmts: body}}}}}},
		flagAbove(bad, mx, L, 0)...)
}

// splitPairsB writes B ([K, N] f32, exact bf16 values) into dst as B'
// pairs and leaves i32 var bad 1 when one of its values keeps the tile off
// the split product: per pair of rows and vector of columns, two loads
// and three stores.
func splitPairsB(mm *ir.MatMul, dst, bad string, L int) []ir.Stmt {
	vf, vi := ir.Vec(ir.F32, L), ir.Vec(ir.I32, L)
	K, N := mm.K, mm.N
	k, n := ir.R("sp_k", ir.I32), ir.R("sp_n", ir.I32)
	mx := bad + "_mx"
	var body []ir.Stmt
	for h := range 2 {
		x := fmt.Sprintf("sp_v%d", h)
		row := addE(mulE(k, 2), i32c(h))
		body = append(body,
			&ir.Let{Name: x, Value: &ir.Bitcast{To: vi, X: ir.Ld(mm.B, vf, addE(mulE(row, N), mulE(n, L)))}},
			&ir.Assign{Name: mx, Value: ir.Bin(ir.Max, ir.R(mx, vi), splitBad(ir.R(x, vi), L))},
			&ir.Store{Buf: dst, Index: addE(mulE(row, N), mulE(n, L)), Value: ir.Bin(ir.Or, lowHalf(ir.R(x, vi), L), highHalf(ir.R(x, vi), L))})
	}
	v0, v1 := ir.R("sp_v0", vi), ir.R("sp_v1", vi)
	body = append(body, &ir.Store{Buf: dst, Index: addE(mulE(addE(k, i32c(K)), N), mulE(n, L)),
		Value: ir.Bin(ir.Or, lowHalf(v0, L), highHalf(v1, L))})
	return append([]ir.Stmt{&ir.Var{Name: mx, Init: &ir.Const{T: vi}},
		&ir.For{Var: "sp_k", Lo: i32c(0), Hi: i32c(K / 2), Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
			&ir.For{Var: "sp_n", Lo: i32c(0), Hi: i32c(N / L), Kind: ir.Serial, Body: &ir.Block{Stmts: body}}}}}},
		flagAbove(bad, mx, L, 0)...)
}

// splitPV is mm (splitPVFits) as split P·V where its A and B allow it,
// else f32 (the statements that compute mm in f32 arithmetic): A' and B'
// packed and checked, then the pair product into nm.c and its rows added
// to C (C's rows first multiplied by scale[row], with a scale array).
func splitPV(mm *ir.MatMul, nm splitNames, sh microShape, l Level, scale string, f32 []ir.Stmt) []ir.Stmt {
	L := l.Lanes
	badA, badB := nm.a+"bad", nm.b+"bad"
	out := splitPairsA(mm, nm.a, badA, L)
	out = append(out, splitPairsB(mm, nm.b, badB, L)...)
	prod := *mm
	prod.C, prod.K, prod.KExt = nm.c, 3*mm.K, i32c(3*mm.K)
	prod.Accumulate, prod.ZeroSkip = false, false
	pairs := pairsMatMul(&prod, nm.a, nm.b, sh, l)
	// C (+)= the product, row by row.
	vf := ir.Vec(ir.F32, L)
	m, n := ir.R("sp_m", ir.I32), ir.R("sp_j", ir.I32)
	at := addE(mulE(m, mm.N), mulE(n, L))
	var v ir.Expr = ir.Ld(nm.c, vf, at)
	if mm.Accumulate {
		acc := ir.Ld(mm.C, vf, at)
		if scale != "" {
			v = &ir.MulAdd{X: acc, Y: ir.Splat(ir.Ld(scale, ir.F32, m), L), Z: v}
		} else {
			v = ir.Bin(ir.Add, acc, v)
		}
	}
	pairs = append(pairs, &ir.For{Var: "sp_m", Lo: i32c(0), Hi: mm.MExt, Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
		&ir.For{Var: "sp_j", Lo: i32c(0), Hi: i32c(mm.N / L), Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
			&ir.Store{Buf: mm.C, Index: at, Value: v}}}}}}})
	return append(out, &ir.If{Cond: ir.Bin(ir.Ne, ir.Bin(ir.Or, ir.R(badA, ir.I32), ir.R(badB, ir.I32)), i32c(0)),
		Then: &ir.Block{Stmts: f32}, Else: &ir.Block{Stmts: pairs}})
}
