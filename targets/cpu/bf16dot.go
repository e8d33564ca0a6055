package cpu

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// bf16Exact lists the f32 arrays of body that hold exact bf16 values
// only: every statement that writes one is a store of an f32 conversion
// of a bf16 value (a staged bf16 Q or K element) or of a constant that
// bf16 represents exactly (the zeros of padding rows and hidden pages).
// Their elements convert to bf16 without a rounding.
func bf16Exact(body *ir.Block) map[string]bool {
	return exactArrays(body, isBF16Value)
}

// exactArrays lists the f32 arrays of body that only statements storing a
// value for which exact reports true write.
func exactArrays(body *ir.Block, exact func(ir.Expr) bool) map[string]bool {
	out := map[string]bool{}
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if a, ok := s.(*ir.Alloc); ok && a.T == ir.F32 {
			out[a.Name] = true
		}
		return []ir.Stmt{s}
	})
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Store:
			if !exact(x.Value) {
				delete(out, x.Buf)
			}
		case *ir.Block, *ir.For, *ir.If:
			// their statements are visited on their own
		default:
			_, writes := passes.Accesses(s)
			for n := range writes {
				delete(out, n)
			}
		}
		return []ir.Stmt{s}
	})
	return out
}

// isBF16Value reports whether scalar f32 value e is always an exact bf16
// value: an f32 conversion of a bf16 expression, or a constant whose f32
// bits have a zero low half.
func isBF16Value(e ir.Expr) bool {
	switch x := e.(type) {
	case *ir.Convert:
		return x.To == ir.F32 && x.X.Type() == ir.BF16
	case *ir.Const:
		return x.T == ir.F32 && math.Float32bits(float32(x.Float))&0xFFFF == 0 && float64(float32(x.Float)) == x.Float
	}
	return false
}

// dotBF16Fits reports whether level l runs matmul mm on vdpbf16ps:
// prefill's Q·Kᵀ (B transposed, at least BlockMinRows rows) whose A and
// B are local arrays of exact bf16 values, with whole vectors of columns
// and whole L×L blocks of bf16 pairs along K, neither accumulating nor
// skipping zeros.
func dotBF16Fits(mm *ir.MatMul, exact map[string]bool, l Level) bool {
	L := l.Lanes
	if !l.DotBF16 || !mm.TransB || mm.M < BlockMinRows || mm.Accumulate || mm.ZeroSkip {
		return false
	}
	if !exact[mm.A] || !exact[mm.B] || mm.N%L != 0 || mm.K%(2*L) != 0 {
		return false
	}
	c, ok := mm.KExt.(*ir.Const)
	return ok && c.Int == int64(mm.K)
}

// dotPairsFits reports whether level l runs decode's Q·Kᵀ dot-product
// blocks (dotBlocks) for mm on vdpbf16ps: K rows read in place from a
// bf16 pool (BRows), whose elements already are the pairs vdpbf16ps
// takes, A a local array of exact bf16 values, K a whole number of 2L
// elements. A's pairs are packed once per item (hoistPairs) with a flag
// (packPairs' limit, qPairsLimit) that sends the item to the f32 blocks
// when a value of A is denormal, infinite, NaN or not below 2^32. Not at
// an AMX level: decode has no tiles, and that level runs this one's
// clone.
func dotPairsFits(mm *ir.MatMul, exact map[string]bool, elems map[string]ir.Type, l Level) bool {
	return decodePairs && l.DotBF16 && !l.AMX && mm.TransB && mm.BRows != "" && mm.RotB == nil && elems[mm.B] == ir.BF16 &&
		exact[mm.A] && mm.K%(2*l.Lanes) == 0 && mm.M < BlockMinRows
}

// decodePairs turns dotPairsFits on; tests compare against it off.
var decodePairs = true

// qPairsLimit is the largest f32 bits (sign cleared) an A value of a
// decode Q·Kᵀ on vdpbf16ps (dotPairsFits) may have: 2^32 less an ulp.
// vdpbf16ps reads a denormal K element as zero and flushes a denormal
// product or sum; with every A value zero or in 2^-126 .. 2^32 (A's own
// denormals are refused), each such term is below 2^32 · 2^-126 = 2^-94,
// so a score of K terms moves by less than K · 2^-94 (2^-84 at MLA's 576)
// besides the f32 rounding the FMA blocks have too: an absolute error
// that the score scale and exp turn into a relative weight error below
// 2^-40 for any scale under 2^44.
const qPairsLimit = 0x4F7FFFFF

// hasBF16Product reports whether k's body holds a matmul level l runs on
// vdpbf16ps (on AMX tiles at an AMX level), on bf16 pairs or split
// (splitFits), or decode's Q·Kᵀ on pairs (dotPairsFits): the kernels
// multiversion clones at a DotBF16 level. At an AMX level only a kernel
// with a product on exact bf16 pairs on whole tile blocks (bf16 prefill's
// Q·Kᵀ) is cloned, unless AMXHalfProducts is on: f16's products, split
// into bf16 parts, ran 1.2-1.7x the time of x86-64-v4's f32 products on
// the AMX CPU measured (an Emerald Rapids, 2026-12-04, docs/benchmarks.md).
func hasBF16Product(k *ir.Kernel, l Level) bool {
	if !l.DotBF16 {
		return false
	}
	body, elems := k.Body, passes.ElemTypes(k)
	exact, half := bf16Exact(body), halfExact(body)
	allocs := map[string]*ir.Alloc{}
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if a, ok := s.(*ir.Alloc); ok {
			allocs[a.Name] = a
		}
		return []ir.Stmt{s}
	})
	found, pairsOnTiles := false, false
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		mm, ok := s.(*ir.MatMul)
		if !ok {
			return []ir.Stmt{s}
		}
		pairs, onTiles := dotBF16Fits(mm, exact, l), amxBlockFits(l, mm.M, mm.N, mm.K)
		pairsOnTiles = pairsOnTiles || pairs && onTiles
		if _, split := splitFits(mm, exact, half, allocs, 0, l); split || pairs && (!l.AMX || onTiles) {
			found = true
		}
		if dotBlocks(mm, allocs, l.Lanes) && dotPairsFits(mm, exact, elems, l) {
			found = true
		}
		return []ir.Stmt{s}
	})
	if l.AMX && !pairsOnTiles && !amxHalfProducts.Load() {
		return false
	}
	return found
}

// amxHalfProducts: AMXHalfProducts.
var amxHalfProducts atomic.Bool

// AMXHalfProducts sets whether x86-64-amx clones the kernels whose only
// tile products are split ones (f16 prefill: Q·Kᵀ in 2x2 bf16 parts, P·V
// in 3x2; hasBF16Product) and returns the function that restores the
// previous setting. Off by default (slower than x86-64-v4 where measured);
// the tests turn it on to keep that path correct under the AMX emulator.
func AMXHalfProducts(on bool) (restore func()) {
	old := amxHalfProducts.Swap(on)
	return func() { amxHalfProducts.Store(old) }
}

// denormBias, added (wrapping) to an f32's bits without the sign, leaves
// a zero at denormBias, a denormal above it and a normal, infinite or NaN
// value negative: the largest such sum over a tile is above denormBias
// exactly when the tile holds a denormal.
const denormBias = 0x7F800000

// bf16DotNames are the arrays and vars of one DotBF16 rewrite of a
// kernel: each bf16-exact A's pairs and its denormal flag, each B's
// pairs, transposed.
type bf16DotNames struct {
	aPairs, aDen, bPairs map[string]string
	// hoisted: the matmuls whose A is packed before the statement that
	// holds them (A is not written from there on), instead of at each.
	hoisted map[*ir.MatMul]bool
}

// packPairs writes the rows of f32 array src ([rows, K], exact bf16
// values) into dst as bf16 pairs ([rows, K/2] i32: element k of a row in
// the low half, k+1 in the high half) and sets the i32 var den to 1 when
// one of them is denormal — or, with limit not 0, when the f32 bits of
// one of them without the sign are above limit (inf and NaN included):
// per row, K/(2L) steps of two vector loads, an even/odd shuffle into
// pairs and one vector store.
func packPairs(src, dst, den string, rows, K, L int, limit int64) []ir.Stmt {
	vf, vi := ir.Vec(ir.F32, L), ir.Vec(ir.I32, L)
	r, c := ir.R("bp_r", ir.I32), ir.R("bp_c", ir.I32)
	at := addE(mulE(r, K), mulE(c, 2*L))
	even, odd := make([]int, L), make([]int, L)
	for i := range L {
		even[i], odd[i] = 2*i, 2*i+1
	}
	mx, big := den+"_mx", den+"_big"
	var body []ir.Stmt
	for h := range 2 {
		x := fmt.Sprintf("bp_x%d", h)
		body = append(body, &ir.Let{Name: x, Value: &ir.Bitcast{To: vi, X: ir.Ld(src, vf, addE(at, i32c(h*L)))}})
		body = append(body, &ir.Assign{Name: mx, Value: ir.Bin(ir.Max, ir.R(mx, vi), denormKey(ir.R(x, vi), L))})
		if limit != 0 {
			abs := ir.Bin(ir.And, ir.R(x, vi), &ir.Const{T: vi, Int: 0x7FFFFFFF})
			body = append(body, &ir.Assign{Name: big, Value: ir.Bin(ir.Max, ir.R(big, vi), abs)})
		}
	}
	x0, x1 := ir.R("bp_x0", vi), ir.R("bp_x1", vi)
	lo := ir.Bin(ir.And, ir.Bin(ir.Shr, &ir.VShuffle{X: x0, Y: x1, Mask: even}, &ir.Const{T: vi, Int: 16}), &ir.Const{T: vi, Int: 0xFFFF})
	hi := ir.Bin(ir.And, &ir.VShuffle{X: x0, Y: x1, Mask: odd}, &ir.Const{T: vi, Int: -0x10000})
	body = append(body, &ir.Store{Buf: dst, Index: addE(mulE(r, K/2), mulE(c, L)), Value: ir.Bin(ir.Or, lo, hi)})
	out := []ir.Stmt{&ir.Var{Name: mx, Init: &ir.Const{T: vi}}}
	if limit != 0 {
		out = append(out, &ir.Var{Name: big, Init: &ir.Const{T: vi}})
	}
	out = append(out, &ir.For{Var: "bp_r", Lo: i32c(0), Hi: i32c(rows), Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
		&ir.For{Var: "bp_c", Lo: i32c(0), Hi: i32c(K / (2 * L)), Kind: ir.Serial, Body: &ir.Block{Stmts: body}}}}})
	if limit == 0 {
		return append(out, denormFlag(den, mx, L)...)
	}
	out = append(append(out, denormFlag(den+"_den", mx, L)...), flagAbove(den+"_hi", big, L, limit)...)
	return append(out, &ir.Var{Name: den, Init: ir.Bin(ir.Or, ir.R(den+"_den", ir.I32), ir.R(den+"_hi", ir.I32))})
}

// denormKey is x's f32 bits (i32 lanes) without the sign plus denormBias.
func denormKey(x ir.Expr, L int) ir.Expr {
	vi := ir.Vec(ir.I32, L)
	return ir.Bin(ir.Add, ir.Bin(ir.And, x, &ir.Const{T: vi, Int: 0x7FFFFFFF}), &ir.Const{T: vi, Int: denormBias})
}

// denormFlag declares i32 var den: 1 when a lane of the i32 vector var mx
// (denormKey's largest values) is above denormBias, else 0.
func denormFlag(den, mx string, L int) []ir.Stmt { return flagAbove(den, mx, L, denormBias) }

// flagAbove declares i32 var flag: 1 when a lane of the i32 vector var mx
// is above limit, else 0.
func flagAbove(flag, mx string, L int, limit int64) []ir.Stmt {
	out, v := laneTree(mx, ir.Max, L)
	return append(out, &ir.Var{Name: flag, Init: ir.Sel(ir.Bin(ir.Gt, v, ir.Int(limit)), i32c(1), i32c(0))})
}

// laneTree folds the lanes of the i32 vector var mx with op (Max or Min)
// over halves of the vector down to one lane: the lets (named mx_<lanes>)
// and the i32 result.
func laneTree(mx string, op ir.BinOp, L int) ([]ir.Stmt, ir.Expr) {
	var v ir.Expr = ir.R(mx, ir.Vec(ir.I32, L))
	var out []ir.Stmt
	for n := L; n > 1; n /= 2 {
		lo, hi := make([]int, n/2), make([]int, n/2)
		for i := range n / 2 {
			lo[i], hi[i] = i, n/2+i
		}
		name := fmt.Sprintf("%s_%d", mx, n/2)
		out = append(out, &ir.Let{Name: name, Value: ir.Bin(op, &ir.VShuffle{X: v, Y: v, Mask: lo}, &ir.VShuffle{X: v, Y: v, Mask: hi})})
		v = ir.R(name, ir.Vec(ir.I32, n/2))
	}
	return out, v
}

// packPairsTransposed writes B (f32 [N, K], exact bf16 values; bf16
// with bf16Src) into dst as bf16 pairs laid out [K/2, N] (i32: element
// (k/2, n) holds B[n, k] low and B[n, k+1] high) for the blocks of L rows
// that start before NExt, and declares the i32 var den (packPairs'): L
// rows of L pairs loaded and paired (a bf16 row's 2L elements loaded as
// the L pairs they are), transposed with log2(L) rounds of shuffles,
// stored as L vectors.
func packPairsTransposed(mm *ir.MatMul, dst, den string, L int, bf16Src bool) []ir.Stmt {
	vf, vi := ir.Vec(ir.F32, L), ir.Vec(ir.I32, L)
	even, odd := make([]int, L), make([]int, L)
	for i := range L {
		even[i], odd[i] = 2*i, 2*i+1
	}
	lo, hi := make([]int, L), make([]int, L)
	for i := 0; i < L/2; i++ {
		lo[2*i], lo[2*i+1] = i, L+i
		hi[2*i], hi[2*i+1] = L/2+i, L+L/2+i
	}
	mx := den + "_mx"
	loop := blockLoop("bp_jb", mm.N, L, mm.NExt, func(j0 ir.Expr, _ int) []ir.Stmt {
		c := ir.R("bp_c", ir.I32)
		name := func(round, i int) string { return fmt.Sprintf("bp_t%d_%d", round, i) }
		var body []ir.Stmt
		for i := range L {
			at := addE(mulE(addE(j0, i32c(i)), mm.K), mulE(c, 2*L))
			if bf16Src {
				// The pairs as loaded; each half checked as the f32
				// bits it widens to.
				x := ir.R(name(0, i), vi)
				body = append(body, &ir.Let{Name: name(0, i), Value: &ir.Bitcast{To: vi, X: ir.Ld(mm.B, ir.Vec(ir.BF16, 2*L), at)}},
					&ir.Assign{Name: mx, Value: ir.Bin(ir.Max, ir.R(mx, vi), denormKey(ir.Bin(ir.Shl, x, &ir.Const{T: vi, Int: 16}), L))},
					&ir.Assign{Name: mx, Value: ir.Bin(ir.Max, ir.R(mx, vi), denormKey(ir.Bin(ir.And, x, &ir.Const{T: vi, Int: -0x10000}), L))})
				continue
			}
			var xs [2]ir.Expr
			for h := range 2 {
				x := fmt.Sprintf("bp_x%d_%d", i, h)
				body = append(body, &ir.Let{Name: x, Value: &ir.Bitcast{To: vi, X: ir.Ld(mm.B, vf, addE(at, i32c(h*L)))}})
				body = append(body, &ir.Assign{Name: mx, Value: ir.Bin(ir.Max, ir.R(mx, vi), denormKey(ir.R(x, vi), L))})
				xs[h] = ir.R(x, vi)
			}
			pl := ir.Bin(ir.And, ir.Bin(ir.Shr, &ir.VShuffle{X: xs[0], Y: xs[1], Mask: even}, &ir.Const{T: vi, Int: 16}), &ir.Const{T: vi, Int: 0xFFFF})
			ph := ir.Bin(ir.And, &ir.VShuffle{X: xs[0], Y: xs[1], Mask: odd}, &ir.Const{T: vi, Int: -0x10000})
			body = append(body, &ir.Let{Name: name(0, i), Value: ir.Bin(ir.Or, pl, ph)})
		}
		round := 0
		for n := L; n > 1; n /= 2 {
			for i := 0; i < L/2; i++ {
				x, y := ir.R(name(round, i), vi), ir.R(name(round, i+L/2), vi)
				body = append(body,
					&ir.Let{Name: name(round+1, 2*i), Value: &ir.VShuffle{X: x, Y: y, Mask: append([]int(nil), lo...)}},
					&ir.Let{Name: name(round+1, 2*i+1), Value: &ir.VShuffle{X: x, Y: y, Mask: append([]int(nil), hi...)}})
			}
			round++
		}
		for r := range L {
			body = append(body, &ir.Store{Buf: dst, Index: addE(mulE(addE(mulE(c, L), i32c(r)), mm.N), j0), Value: ir.R(name(round, r), vi)})
		}
		return []ir.Stmt{&ir.For{Var: "bp_c", Lo: i32c(0), Hi: i32c(mm.K / (2 * L)), Kind: ir.Serial, Body: &ir.Block{Stmts: body}}}
	})
	out := append([]ir.Stmt{&ir.Var{Name: mx, Init: &ir.Const{T: vi}}}, loop...)
	return append(out, denormFlag(den, mx, L)...)
}

// dotBF16MatMul is mm (dotBF16Fits) on pairs: C[m0 .. m0+mr, n0 ..
// n0+nr·L] = A·B over the K/2 pairs with mr·nr f32 accumulators, each step
// nr vector loads of B's pairs and mr broadcasts of an A pair, each pair
// of vectors one DotBF16. ap and bp are the pair arrays.
func dotBF16MatMul(mm *ir.MatMul, ap, bp string, sh microShape) []ir.Stmt {
	L := sh.L
	vt, vi := ir.Vec(ir.F32, L), ir.Vec(ir.I32, L)
	return blockLoop("bm_nb", mm.N, sh.NR*L, mm.NExt, func(n0 ir.Expr, nw int) []ir.Stmt {
		return blockLoop("bm_mb", mm.M, sh.MR, mm.MExt, func(m0 ir.Expr, mr int) []ir.Stmt {
			nr := nw / L
			acc := func(i, j int) string { return fmt.Sprintf("bm_c%d_%d", i, j) }
			var out []ir.Stmt
			for i := range mr {
				for j := range nr {
					out = append(out, &ir.Var{Name: acc(i, j), Init: &ir.Const{T: vt}})
				}
			}
			k := ir.R("bm_k", ir.I32)
			var step []ir.Stmt
			for j := range nr {
				step = append(step, &ir.Let{Name: fmt.Sprintf("bm_b%d", j), Value: ir.Ld(bp, vi, addE(mulE(k, mm.N), addE(n0, i32c(j*L))))})
			}
			for i := range mr {
				a := fmt.Sprintf("bm_a%d", i)
				step = append(step, &ir.Let{Name: a, Value: ir.Splat(ir.Ld(ap, ir.I32, addE(mulE(addE(m0, i32c(i)), mm.K/2), k)), L)})
				for j := range nr {
					step = append(step, &ir.Assign{Name: acc(i, j), Value: &ir.DotBF16{X: ir.R(a, vi), Y: ir.R(fmt.Sprintf("bm_b%d", j), vi), Z: ir.R(acc(i, j), vt)}})
				}
			}
			out = append(out, &ir.For{Var: "bm_k", Lo: i32c(0), Hi: i32c(mm.K / 2), Kind: ir.Serial, Body: &ir.Block{Stmts: step}})
			for i := range mr {
				for j := range nr {
					at := addE(mulE(addE(m0, i32c(i)), mm.N), addE(n0, i32c(j*L)))
					out = append(out, &ir.Store{Buf: mm.C, Index: at, Value: ir.R(acc(i, j), vt)})
				}
			}
			return out
		})
	})
}

// hoistPairs packs the A of the matmuls fits takes once (the statements
// pack gives), before the statement that holds them, where A's alloc is
// in the same block, before it, and no statement from there on writes A
// (prefill's staged Q, before the KV tile loop): those matmuls go into
// hoisted. The others pack A
// where they are.
func hoistPairs(b *ir.Block, fits func(*ir.MatMul) bool, pack func(*ir.MatMul) []ir.Stmt, hoisted map[*ir.MatMul]bool) *ir.Block {
	if b == nil {
		return nil
	}
	out := &ir.Block{}
	allocs := map[string]bool{}
	// packed: the arrays packed in this block, unwritten from there on.
	packed := map[string]bool{}
	for i, s := range b.Stmts {
		if a, ok := s.(*ir.Alloc); ok {
			allocs[a.Name] = true
		}
		var mms []*ir.MatMul
		ir.MapStmts(&ir.Block{Stmts: []ir.Stmt{s}}, func(t ir.Stmt) []ir.Stmt {
			if mm, ok := t.(*ir.MatMul); ok && fits(mm) && allocs[mm.A] {
				mms = append(mms, mm)
			}
			return []ir.Stmt{t}
		})
		for _, mm := range mms {
			if packed[mm.A] || !unwrittenFrom(b.Stmts[i:], mm.A) {
				continue
			}
			packed[mm.A] = true
			out.Stmts = append(out.Stmts, pack(mm)...)
		}
		for _, mm := range mms {
			if packed[mm.A] {
				hoisted[mm] = true
			}
		}
		switch x := s.(type) {
		case *ir.Block:
			s = hoistPairs(x, fits, pack, hoisted)
		case *ir.For:
			c := *x
			c.Body = hoistPairs(x.Body, fits, pack, hoisted)
			s = &c
		case *ir.If:
			c := *x
			c.Then = hoistPairs(x.Then, fits, pack, hoisted)
			c.Else = hoistPairs(x.Else, fits, pack, hoisted)
			s = &c
		}
		out.Stmts = append(out.Stmts, s)
	}
	return out
}

// unwrittenFrom reports whether no statement of stmts writes array a.
func unwrittenFrom(stmts []ir.Stmt, a string) bool {
	for _, s := range stmts {
		if _, w := passes.Accesses(s); w[a] {
			return false
		}
	}
	return true
}
