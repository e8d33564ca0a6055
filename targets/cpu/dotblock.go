package cpu

import (
	"fmt"

	"github.com/attnc/attnc/ir"
)

// dotBlocks reports whether block-matmul writes mm as dot-product blocks:
// Q·Kᵀ of a decode tile (B transposed, fewer than BlockMinRows rows, too
// few for packing B to pay), with K a whole number of vectors, read to its
// end, and B a local array (f32, or a storage type its loads widen) that
// holds every row of N — or B's rows read at row offsets (BRows: K rows
// straight from the pages), each a whole row of K elements.
func dotBlocks(mm *ir.MatMul, allocs map[string]*ir.Alloc, lanes int) bool {
	if !mm.TransB || mm.M >= BlockMinRows || lanes < 2 || mm.N%lanes != 0 || mm.K%lanes != 0 {
		return false
	}
	if c, ok := ir.IsConst(mm.KExt); !ok || c.Int != int64(mm.K) {
		return false
	}
	if mm.BRows != "" {
		return true
	}
	a, ok := allocs[mm.B]
	return ok && (a.T == ir.F32 || a.T.IsStorageOnly()) && a.Size >= mm.N*mm.K
}

// dotBlockedMatMul writes C[m, n] (+)= Σ_k A[m, k]·B[n, k] (B stored [N,
// K], not packed) as dot-product blocks of R rows of C by L/R columns
// (dotBlockRows): L vector accumulators over k in vectors of L lanes —
// per step one vector of each of the R rows of A and of each of the L/R
// rows of B, each accumulator fed by one multiply-add, so every vector of
// B loaded serves R rows — then a transpose-add tree (L−1 pairs of
// shuffles and an add) that leaves the block's L dot products in one
// vector, row after row, stored as R pieces of L/R lanes. Against a dot
// product that ends in its own horizontal sum, it spends about 3 vector
// operations per result instead of 2·log2(L), and never a scalar store.
// C outside the extents' blocks is unspecified, as with the
// micro-kernels. With fold (not 0: foldsDot), B's loads are divided by
// fold and each block's result vector multiplied by it (codescale.go).
// With pair (pairWiden) and K a whole number of 2L, each step reads 2L
// elements of each B row as one (widenPair) and runs the multiply-adds
// of its two halves in turn: each accumulator takes the same products in
// the same order. With ap (not "": dotPairsFits), the blocks run on
// vdpbf16ps: A's rows from ap as bf16 pairs ([M, K/2] i32, packPairs),
// B's rows (bf16) read as pairs in place, each step 2L elements.
func dotBlockedMatMul(mm *ir.MatMul, bElem ir.Type, L int, fold float64, pair bool, ap string) []ir.Stmt {
	R := dotBlockRows(mm.M, L, codes(bElem))
	return blockLoop("db_m", mm.M, R, mm.MExt, func(m0 ir.Expr, _ int) []ir.Stmt {
		return blockLoop("db_nb", mm.N, L/R, mm.NExt, func(n0 ir.Expr, _ int) []ir.Stmt {
			return dotKernel(mm, bElem, L, R, m0, n0, fold, pair && mm.K%(2*L) == 0, ap)
		})
	})
}

// dotBlockRows is how many rows of C a dot-product block of L
// accumulators covers for a matmul of M rows: the largest power of two
// that divides M, at most L/4 (so each row's piece of the result is at
// least 4 lanes wide) — or, when B holds 8-bit codes (wide: each vector
// of B costs several operations to widen, against one load of A), at most
// L/2, so a decode tile's GQA group of 4 rows widens each K vector once
// at 8 lanes (x86-64-v3) too, not twice. The pieces then are 2 lanes
// wide. Each accumulator sums the same products in the same lanes and
// the tree adds its lanes in the same order whatever R is, so R does
// not change a result's bits.
func dotBlockRows(M, L int, wide bool) int {
	most := L / 4
	if wide {
		most = L / 2
	}
	R := 1
	for 2*R <= most && M%(2*R) == 0 {
		R *= 2
	}
	return R
}

// codes reports whether t is an 8-bit code type (e4m3, e5m2, i8), whose
// widening costs more than a load.
func codes(t ir.Type) bool {
	r := ir.StorageOf(t)
	return t.IsStorageOnly() && r != nil && r.Bits == 8
}

// dotKernel is C[m0 .. m0+R, n0 .. n0+L/R] (+)= the dot products of A's
// rows m0 .. m0+R with B's rows n0 .. n0+L/R (B's loads divided by fold
// and the result multiplied by it, when fold is not 0; with pair, steps of
// 2L elements; with ap, on bf16 pairs: dotBlockedMatMul). A fold above
// 2^64 (FiniteBitsWiden's 2^120) is split: A's loads are multiplied by
// dotFoldA and the result by the rest (codescale.go).
func dotKernel(mm *ir.MatMul, bElem ir.Type, L, R int, m0, n0 ir.Expr, fold float64, pair bool, ap string) []ir.Stmt {
	if ap != "" {
		return pairsDotKernel(mm, L, R, m0, n0, ap)
	}
	if mm.RotB != nil {
		return rotDotKernel(mm, bElem, L, R, m0, n0)
	}
	db := newDotBlock(mm, L, R, m0, n0)
	out := db.accumulators()
	// res: what the result is multiplied by, fold or, above 2^64, the
	// part of it that A's loads do not take (dotFoldA).
	res := fold
	if fold > dotFoldA {
		db.aScale, res = dotFoldA, fold/dotFoldA
	}
	// steps: the vectors of L elements one iteration takes (2 with pair).
	steps := 1
	if pair {
		steps = 2
	}
	// stepAt is one iteration's statements at k = kb; first, the first
	// one's (dotBlock.feed).
	stepAt := func(kb ir.Expr, first bool) []ir.Stmt {
		var step []ir.Stmt
		for c := 0; c < db.C && pair; c++ {
			step = append(step, widenPair(fmt.Sprintf("db_w%d", c), fmt.Sprintf("db_b%d_0", c), fmt.Sprintf("db_b%d_1", c), mm.B, bElem, L, bAt(mm, db.row(c), mm.K, kb), fold)...)
		}
		for h := 0; h < steps; h++ {
			k0 := kb
			if h > 0 {
				k0 = addE(kb, i32c(h*L))
			}
			a := func(r int) string { return fmt.Sprintf("db_a%d", r) }
			b := func(c int) string { return fmt.Sprintf("db_b%d", c) }
			if pair {
				a = func(r int) string { return fmt.Sprintf("db_a%d_%d", r, h) }
				b = func(c int) string { return fmt.Sprintf("db_b%d_%d", c, h) }
			}
			var loads []ir.Stmt
			for c := 0; c < db.C && !pair; c++ {
				loads = append(loads, &ir.Let{Name: b(c), Value: loadScaled(mm.B, bElem, L, bAt(mm, db.row(c), mm.K, k0), fold)})
			}
			step = db.feed(step, k0, a, b, first && h == 0, loads)
		}
		return step
	}
	out = append(out, &ir.Block{Stmts: stepAt(i32c(0), true)})
	out = append(out, &ir.For{Var: "db_k", Lo: i32c(1), Hi: i32c(mm.K / (steps * L)), Kind: ir.Serial, Body: &ir.Block{Stmts: stepAt(mulE(ir.R("db_k", ir.I32), steps*L), false)}})
	return append(out, db.store(res)...)
}

// dotBlock is one dot-product block of a matmul: R rows of A from m0 by C
// = L/R rows of B from n0, an accumulator vector for each of the L (row,
// key) pairs in transposeAddColumns' slot order.
type dotBlock struct {
	mm      *ir.MatMul
	L, R, C int
	m0, n0  ir.Expr
	lane    []int
	vt      ir.Type
	// aScale, when not 0, multiplies each load of A (a folded code
	// scale above 2^64: dotFoldA).
	aScale float64
}

func newDotBlock(mm *ir.MatMul, L, R int, m0, n0 ir.Expr) *dotBlock {
	return &dotBlock{mm: mm, L: L, R: R, C: L / R, m0: m0, n0: n0, lane: transposeAddColumns(L), vt: ir.Vec(ir.F32, L)}
}

func (db *dotBlock) acc(s int) string { return fmt.Sprintf("db_c%d", s) }

// accumulators declares the block's accumulators, +0.
func (db *dotBlock) accumulators() []ir.Stmt {
	var out []ir.Stmt
	for s := 0; s < db.L; s++ {
		out = append(out, &ir.Var{Name: db.acc(s), Init: &ir.Const{T: db.vt}})
	}
	return out
}

// row is B's row of the block's column c: with BRows, the block's last
// columns may lie past NExt (C there is unspecified), where no row offset
// is set: they read the last row instead.
func (db *dotBlock) row(c int) ir.Expr {
	r := addE(db.n0, i32c(c))
	if db.mm.BRows != "" {
		r = ir.Bin(ir.Min, r, addE(db.mm.NExt, i32c(-1)))
	}
	return r
}

// feed appends to step the loads of A's vectors at column k (named a(r)),
// then loads (B's vectors, named b(c), or nothing when step has them),
// then one multiply-add of a(r)·b(c) into each accumulator. With first,
// the block's first products: each is a multiply (the accumulators start
// at +0, and a·b + 0 differs from a·b only in the sign of a zero product —
// the score a lane then sums is a zero of either sign, which no later
// step tells apart: it enters the softmax only through differences, exp
// and max with other scores), so the block's copies of each B vector for
// the destructive multiply-add against zero go.
func (db *dotBlock) feed(step []ir.Stmt, k ir.Expr, a, b func(int) string, first bool, loads []ir.Stmt) []ir.Stmt {
	vt := db.vt
	for r := 0; r < db.R; r++ {
		var av ir.Expr = ir.Ld(db.mm.A, vt, addE(mulE(addE(db.m0, i32c(r)), db.mm.K), k))
		if db.aScale != 0 {
			av = ir.Bin(ir.Mul, av, ir.Splat(ir.Float(db.aScale), db.L))
		}
		step = append(step, &ir.Let{Name: a(r), Value: av})
	}
	step = append(step, loads...)
	for s := 0; s < db.L; s++ {
		r, c := db.lane[s]/db.C, db.lane[s]%db.C
		var v ir.Expr = &ir.MulAdd{X: ir.R(a(r), vt), Y: ir.R(b(c), vt), Z: ir.R(db.acc(s), vt)}
		if first {
			v = ir.Bin(ir.Mul, ir.R(a(r), vt), ir.R(b(c), vt))
		}
		step = append(step, &ir.Assign{Name: db.acc(s), Value: v})
	}
	return step
}

// store sums the accumulators into the block's results (transposeAddStore).
func (db *dotBlock) store(fold float64) []ir.Stmt {
	vecs := make([]ir.Expr, db.L)
	for s := range vecs {
		vecs[s] = ir.R(db.acc(s), db.vt)
	}
	return transposeAddStore(db.mm, vecs, db.L, db.R, db.m0, db.n0, fold)
}

// rotBlocks reports whether rotDotKernel turns r's rows in vectors of
// lanes elements: each half a whole number of them for rotate-half pairs,
// the rotated dims for interleaved ones (whole pairs in each vector).
func rotBlocks(r *ir.RotB, lanes int) bool {
	if r.Pairs == ir.RopeInterleaved {
		return lanes%2 == 0 && 2*r.Half%lanes == 0
	}
	return r.Half%lanes == 0
}

// rotDotKernel is dotKernel for a B whose rows turn as they are read
// (ir.RotB): each step over the rotated dims takes a vector of each half
// of a B row at once — columns h·L.. and Half + h·L.. —, the pair's
// cosines and sines from the row's entries in the tables, turns both
// (x·c - y·s, y·c + x·s, each product rounded: as multiply-adds it ran
// 5% slower, f16 at head dim 128 on Zen 5) and feeds both to the
// accumulators with A's matching vectors; the dims past 2·Half run as
// dotKernel's steps. Each accumulator lane sums its products in the order
// h, Half + h, h + L, ... — not dotKernel's: the result may differ from a
// staged, turned row's in the last bits.
func rotDotKernel(mm *ir.MatMul, bElem ir.Type, L, R int, m0, n0 ir.Expr) []ir.Stmt {
	if mm.RotB.Pairs == ir.RopeInterleaved {
		return interleavedRotDotKernel(mm, bElem, L, R, m0, n0)
	}
	db := newDotBlock(mm, L, R, m0, n0)
	vt, H := db.vt, mm.RotB.Half
	out := db.accumulators()
	turnAt := func(k ir.Expr, first bool) []ir.Stmt {
		var step []ir.Stmt
		for c := 0; c < db.C; c++ {
			x, y := fmt.Sprintf("db_x%d", c), fmt.Sprintf("db_y%d", c)
			cs, sn := fmt.Sprintf("db_cos%d", c), fmt.Sprintf("db_sin%d", c)
			at := addE(mulE(db.row(c), H), k)
			step = append(step,
				&ir.Let{Name: x, Value: loadScaled(mm.B, bElem, L, bAt(mm, db.row(c), mm.K, k), 0)},
				&ir.Let{Name: y, Value: loadScaled(mm.B, bElem, L, bAt(mm, db.row(c), mm.K, addE(k, i32c(H))), 0)},
				&ir.Let{Name: cs, Value: ir.Ld(mm.RotB.Cos, vt, at)},
				&ir.Let{Name: sn, Value: ir.Ld(mm.RotB.Sin, vt, at)},
				&ir.Let{Name: fmt.Sprintf("db_b%d_0", c), Value: ir.Bin(ir.Sub,
					ir.Bin(ir.Mul, ir.R(x, vt), ir.R(cs, vt)), ir.Bin(ir.Mul, ir.R(y, vt), ir.R(sn, vt)))},
				&ir.Let{Name: fmt.Sprintf("db_b%d_1", c), Value: ir.Bin(ir.Add,
					ir.Bin(ir.Mul, ir.R(y, vt), ir.R(cs, vt)), ir.Bin(ir.Mul, ir.R(x, vt), ir.R(sn, vt)))})
		}
		for h, kk := range []ir.Expr{k, addE(k, i32c(H))} {
			a := func(r int) string { return fmt.Sprintf("db_a%d_%d", r, h) }
			b := func(c int) string { return fmt.Sprintf("db_b%d_%d", c, h) }
			step = db.feed(step, kk, a, b, first && h == 0, nil)
		}
		return step
	}
	out = append(out, &ir.Block{Stmts: turnAt(i32c(0), true)})
	if H > L {
		out = append(out, &ir.For{Var: "db_k", Lo: i32c(1), Hi: i32c(H / L), Kind: ir.Serial, Body: &ir.Block{Stmts: turnAt(mulE(ir.R("db_k", ir.I32), L), false)}})
	}
	out = append(out, db.unturned(bElem, 2*H)...)
	return append(out, db.store(0)...)
}

// unturned is a RotB block's steps over B's dims from the rotated ones'
// end on (none when they reach K), dotKernel's: one vector of each of
// the block's B rows, widened as loaded, against A's.
func (db *dotBlock) unturned(bElem ir.Type, from int) []ir.Stmt {
	mm, L := db.mm, db.L
	if mm.K <= from {
		return nil
	}
	k := mulE(ir.R("db_k", ir.I32), L)
	var loads []ir.Stmt
	for c := 0; c < db.C; c++ {
		loads = append(loads, &ir.Let{Name: fmt.Sprintf("db_b%d", c), Value: loadScaled(mm.B, bElem, L, bAt(mm, db.row(c), mm.K, k), 0)})
	}
	step := db.feed(nil, k, func(r int) string { return fmt.Sprintf("db_a%d", r) }, func(c int) string { return fmt.Sprintf("db_b%d", c) }, false, loads)
	return []ir.Stmt{&ir.For{Var: "db_k", Lo: i32c(from / L), Hi: i32c(mm.K / L), Kind: ir.Serial, Body: &ir.Block{Stmts: step}}}
}

// interleavedRotDotKernel is rotDotKernel for interleaved pairs (B's
// elements 2i and 2i + 1 turn together): each step over the rotated dims
// takes one vector x of a B row, whose lanes hold whole pairs, and turns
// it as x·c + swap(x)·s, with swap(x) the vector of each lane's partner,
// c the pairs' cosines, each repeated for both lanes, and s their sines
// negated for each pair's first lane (x[2i]·c - x[2i+1]·s, x[2i+1]·c +
// x[2i]·s, each product rounded as RotB's: a product with -s is the
// negated product with s); the half vectors of the tables' cosines and
// sines spread over the lanes by shuffles. The dims past 2·Half run as
// dotKernel's steps. Each accumulator lane sums its products in the
// order k, k + L, ..., one vector a step.
func interleavedRotDotKernel(mm *ir.MatMul, bElem ir.Type, L, R int, m0, n0 ir.Expr) []ir.Stmt {
	db := newDotBlock(mm, L, R, m0, n0)
	vt, ht, H := db.vt, ir.Vec(ir.F32, L/2), mm.RotB.Half
	dup, swap, sign := make([]int, L), make([]int, L), make([]int, L)
	for l := range L {
		dup[l], swap[l] = l/2, l^1
		sign[l] = l / 2
		if l%2 == 1 {
			sign[l] += L / 2
		}
	}
	a := func(r int) string { return fmt.Sprintf("db_a%d", r) }
	b := func(c int) string { return fmt.Sprintf("db_b%d", c) }
	out := db.accumulators()
	// turnAt is the step over the rotated dims from column s·L.
	turnAt := func(s ir.Expr, first bool) []ir.Stmt {
		var step []ir.Stmt
		k := mulE(s, L)
		for c := 0; c < db.C; c++ {
			x, cs, sn := fmt.Sprintf("db_x%d", c), fmt.Sprintf("db_cos%d", c), fmt.Sprintf("db_sin%d", c)
			at := addE(mulE(db.row(c), H), mulE(s, L/2))
			step = append(step,
				&ir.Let{Name: x, Value: loadScaled(mm.B, bElem, L, bAt(mm, db.row(c), mm.K, k), 0)},
				&ir.Let{Name: cs, Value: ir.Ld(mm.RotB.Cos, ht, at)},
				&ir.Let{Name: sn, Value: ir.Ld(mm.RotB.Sin, ht, at)},
				&ir.Let{Name: b(c), Value: ir.Bin(ir.Add,
					ir.Bin(ir.Mul, ir.R(x, vt), &ir.VShuffle{X: ir.R(cs, ht), Y: ir.R(cs, ht), Mask: dup}),
					ir.Bin(ir.Mul, &ir.VShuffle{X: ir.R(x, vt), Y: ir.R(x, vt), Mask: swap},
						&ir.VShuffle{X: ir.Bin(ir.Mul, ir.R(sn, ht), ir.Splat(ir.Float(-1), L/2)), Y: ir.R(sn, ht), Mask: sign}))})
		}
		return db.feed(step, k, a, b, first, nil)
	}
	out = append(out, &ir.Block{Stmts: turnAt(i32c(0), true)})
	if 2*H > L {
		out = append(out, &ir.For{Var: "db_k", Lo: i32c(1), Hi: i32c(2 * H / L), Kind: ir.Serial, Body: &ir.Block{Stmts: turnAt(ir.R("db_k", ir.I32), false)}})
	}
	out = append(out, db.unturned(bElem, 2*H)...)
	return append(out, db.store(0)...)
}

// transposeAddStore sums the L accumulator vectors vecs of a dot-product
// block (slot order transposeAddColumns) with the transpose-add tree into
// one vector, multiplies it by fold when fold is not 0, and stores (adds,
// with mm.Accumulate) its R pieces of L/R lanes into C's rows m0 ..
// m0+R at column n0.
func transposeAddStore(mm *ir.MatMul, vecs []ir.Expr, L, R int, m0, n0 ir.Expr, fold float64) []ir.Stmt {
	vt := ir.Vec(ir.F32, L)
	C := L / R
	var out []ir.Stmt
	for round, m := range transposeAddRounds(L) {
		lo, hi := m[0], m[1]
		next := make([]ir.Expr, len(vecs)/2)
		for i := range next {
			name := fmt.Sprintf("db_t%d_%d", round, i)
			x, y := vecs[2*i], vecs[2*i+1]
			out = append(out, &ir.Let{Name: name, Value: ir.Bin(ir.Add,
				&ir.VShuffle{X: x, Y: y, Mask: lo}, &ir.VShuffle{X: x, Y: y, Mask: hi})})
			next[i] = ir.R(name, vt)
		}
		vecs = next
	}
	if fold != 0 {
		out = append(out, &ir.Let{Name: "db_res", Value: ir.Bin(ir.Mul, vecs[0], ir.Splat(ir.Float(fold), L))})
		vecs[0] = ir.R("db_res", vt)
	}
	pt := ir.Vec(ir.F32, C)
	for r := 0; r < R; r++ {
		piece := vecs[0]
		if R > 1 {
			mask := make([]int, C)
			for c := range mask {
				mask[c] = r*C + c
			}
			piece = &ir.VShuffle{X: vecs[0], Y: vecs[0], Mask: mask}
		}
		at := addE(mulE(addE(m0, i32c(r)), mm.N), n0)
		if mm.Accumulate {
			piece = ir.Bin(ir.Add, ir.Ld(mm.C, pt, at), piece)
		}
		out = append(out, &ir.Store{Buf: mm.C, Index: at, Value: piece})
	}
	return out
}

// pairsDotKernel is dotKernel on vdpbf16ps: each step, for 2L elements
// of k, loads one i32 vector of A's pairs per row of A (from ap) and one
// of B's per row of B — 2L bf16 elements read as L i32 lanes, each the
// pair the lane multiplies — and runs one DotBF16 per accumulator; the
// same transpose-add tree then leaves the block's dot products in one
// vector.
func pairsDotKernel(mm *ir.MatMul, L, R int, m0, n0 ir.Expr, ap string) []ir.Stmt {
	db := newDotBlock(mm, L, R, m0, n0)
	vt, vi := db.vt, ir.Vec(ir.I32, L)
	out := db.accumulators()
	k := ir.R("db_k", ir.I32)
	var step []ir.Stmt
	for r := 0; r < R; r++ {
		at := addE(mulE(addE(m0, i32c(r)), mm.K/2), mulE(k, L))
		step = append(step, &ir.Let{Name: fmt.Sprintf("db_a%d", r), Value: ir.Ld(ap, vi, at)})
	}
	for c := 0; c < db.C; c++ {
		ld := ir.Ld(mm.B, ir.Vec(ir.BF16, 2*L), bAt(mm, db.row(c), mm.K, mulE(k, 2*L)))
		step = append(step, &ir.Let{Name: fmt.Sprintf("db_b%d", c), Value: &ir.Bitcast{To: vi, X: ld}})
	}
	for s := 0; s < L; s++ {
		r, c := db.lane[s]/db.C, db.lane[s]%db.C
		a, b := ir.R(fmt.Sprintf("db_a%d", r), vi), ir.R(fmt.Sprintf("db_b%d", c), vi)
		step = append(step, &ir.Assign{Name: db.acc(s), Value: &ir.DotBF16{X: a, Y: b, Z: ir.R(db.acc(s), vt)}})
	}
	out = append(out, &ir.For{Var: "db_k", Lo: i32c(0), Hi: i32c(mm.K / (2 * L)), Kind: ir.Serial, Body: &ir.Block{Stmts: step}})
	return append(out, db.store(0)...)
}

// transposeAddRounds are the lo and hi shuffles (transposeAddMasks'
// form) of each round of the transpose-add tree over L-lane vectors. With
// 128-bit units (L a multiple of 4) the first two rounds stay within each
// unit — 32-bit then 64-bit interleaves, unpcklps/unpckhps and
// unpcklpd/unpckhpd, or zip1/zip2 — and the rest pair whole units, one
// vshuff64x2 (vperm2f128) each: no two-source lane permute and no index
// vector to load. Halving 256-bit halves first instead (transposeAddMasks
// from L/2 down) took vinsertf64x4, vshuff64x2, two vpermt2pd and two
// vpermt2ps with their index loads per AVX-512 block; with the unit-first
// tree f16 decode (32/8 heads, head dim 128) took 0.5–4.7% less time in
// cache on Zen 4 (1 thread, builds alternated, 6 pairs), the same at
// x86-64-v3. Other widths halve as transposeAddMasks does.
func transposeAddRounds(L int) [][2][]int {
	var rounds [][2][]int
	if L < 4 || L%4 != 0 {
		for b := L / 2; b >= 1; b /= 2 {
			lo, hi := transposeAddMasks(L, b)
			rounds = append(rounds, [2][]int{lo, hi})
		}
		return rounds
	}
	// Within each 128-bit unit of 4 lanes: 32-bit then 64-bit interleaves
	// (unpcklps/unpckhps, unpcklpd/unpckhpd).
	lo, hi := make([]int, L), make([]int, L)
	for t := range L {
		g, o := t/4*4, t%4
		src := g + o/2
		if o%2 == 1 {
			src += L
		}
		lo[t], hi[t] = src, src+2
	}
	rounds = append(rounds, [2][]int{lo, hi})
	lo, hi = transposeAddMasks(L, 2)
	rounds = append(rounds, [2][]int{lo, hi})
	// Across units: lo takes the even units of x then of y, hi the odd
	// ones, once per halving of the unit count.
	n := L / 4
	for u := n; u > 1; u /= 2 {
		lo, hi := make([]int, L), make([]int, L)
		for d := range n {
			src := 2 * (d % (n / 2)) * 4
			if d >= n/2 {
				src += L
			}
			for o := range 4 {
				lo[4*d+o], hi[4*d+o] = src+o, src+4+o
			}
		}
		rounds = append(rounds, [2][]int{lo, hi})
	}
	return rounds
}

// transposeAddMasks are the two shuffles of a transpose-add round that
// halves groups of 2b lanes: lane t of group g (t = g·2b + o) takes x's
// lanes g·2b+o and g·2b+b+o when o < b, else y's g·2b+o−b and g·2b+o, so
// the sum of the two shuffles holds, in each group, x's group reduced to b
// lanes and then y's.
func transposeAddMasks(L, b int) (lo, hi []int) {
	lo, hi = make([]int, L), make([]int, L)
	for t := 0; t < L; t++ {
		g, o := t/(2*b)*(2*b), t%(2*b)
		if o < b {
			lo[t], hi[t] = g+o, g+b+o
		} else {
			lo[t], hi[t] = L+g+o-b, L+g+o
		}
	}
	return lo, hi
}

// transposeAddColumns is, for each accumulator slot s of a transpose-add
// tree over L vectors (adjacent slots paired, round after round), the
// column whose dot product slot s must hold so that the tree's last
// vector has column t's in lane t: the inverse of the lane order the tree
// leaves, found by running it on slot labels.
func transposeAddColumns(L int) []int {
	vecs := make([][]int, L)
	for s := range vecs {
		vecs[s] = make([]int, L)
		for t := range vecs[s] {
			vecs[s][t] = s
		}
	}
	for _, m := range transposeAddRounds(L) {
		lo, hi := m[0], m[1]
		next := make([][]int, len(vecs)/2)
		for i := range next {
			xy := append(append([]int(nil), vecs[2*i]...), vecs[2*i+1]...)
			next[i] = make([]int, L)
			for t := range next[i] {
				if xy[lo[t]] != xy[hi[t]] {
					panic("cpu: transpose-add round adds lanes of two slots")
				}
				next[i][t] = xy[lo[t]]
			}
		}
		vecs = next
	}
	col := make([]int, L)
	for t, s := range vecs[0] {
		col[s] = t
	}
	return col
}

// bAt is the index of element (row r, column c) of B as stored, rows of
// w elements: r·w + c folded as the kernels write it, or, with row
// offsets (BRows: rows read straight from the pages), BRows[r] + c. A row
// offset is an i64 load that LLVM hoists out of the contraction loop, so
// each vector of B costs one address add.
func bAt(mm *ir.MatMul, r ir.Expr, w int, c ir.Expr) ir.Expr {
	if mm.BRows != "" {
		return mm.BAt(r, c)
	}
	return addE(mulE(r, w), c)
}
