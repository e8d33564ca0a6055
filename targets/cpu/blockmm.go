package cpu

import (
	"fmt"
	"math"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// BlockMinRows is the fewest static rows a Q·Kᵀ matmul needs for
// block-matmul to pack K and run the micro-kernels: the prefill work
// items' tiles (about 64 rows). Decode items' tiles (a GQA group's few
// heads) would spend more on packing than they gain; they get dot-product
// blocks (dotBlockedMatMul) instead. P·V needs no packing and takes the
// micro-kernels at any row count.
const BlockMinRows = 32

// microShape is a register block: MR rows of C by NR vectors of L lanes,
// MR·NR accumulators that stay in registers across the contraction.
type microShape struct {
	L, MR, NR int
	// Pair: B holds 8-bit codes read two vectors at a time (pairWiden).
	Pair bool
	// ZeroFlags names the i32 array a zeroskip micro-kernel flags A's
	// columns in (splitZeroSkip), or is "".
	ZeroFlags string
}

// microShapeFor fits the register block to a level: NR vectors of B per
// step (each loaded once, feeding MR multiply-adds) and MR broadcasts of A
// (each feeding NR), with the accumulators, the B vectors and a broadcast
// within the level's vector registers: 6×4 vectors with 32 registers
// (AVX-512, NEON), 6×2 with 16 (AVX2, SSE2).
func microShapeFor(l Level, vectors int) microShape {
	nr := max(1, min(l.Regs/8, vectors))
	mr := max(1, min(8, (l.Regs-nr-2)/nr))
	return microShape{L: l.Lanes, MR: mr, NR: nr}
}

// BlockMatMul writes the tile matmuls of each CPU level's clone — P·V of
// every tile, Q·Kᵀ of tiles with at least BlockMinRows static rows
// (prefill) — as register-blocked micro-kernels in vector IR, fitted to
// the clone's level (microShapeFor), and Q·Kᵀ of the smaller (decode)
// tiles as dot-product blocks (dotBlockedMatMul). In a micro-kernel, for
// each block of NR·L columns and MR rows of C, MR·NR vector accumulators
// (loaded from C when the matmul accumulates) take, for each k < KExt, NR
// vector loads of B's row k and MR broadcasts of A[m, k], then are stored
// once. A matmul with B transposed (Q·Kᵀ) first packs B into an
// array laid out [K, N] (16×16, 8×8 or 4×4 blocks transposed with
// shuffles), declared beside B's, so both products run the same
// outer-product kernel. With zeroskip a -0 A element (a hidden
// position's weight) leaves the accumulators as they are (a select around
// the multiply-add, never a multiply by zero), so NaN or infinite B rows
// it weights cannot reach C; A is scanned for -0 first (negZeroScan), and
// a tile with none runs the kernel without the selects; in prefill's
// tiles, one with some flags A's columns per block of rows first
// (splitZeroSkip) and runs the selects only at columns where some of the
// block's rows are -0, and nothing where all are. Blocks of rows at or past MExt and of columns at or past NExt
// are skipped; the last block that starts before an extent computes its
// whole static width (C outside the extents is unspecified). Matmuls whose
// N (or, transposed, K) is not a multiple of the level's lanes, or whose
// transposed B is not a local array, are left for lower-tiles.
func (mc *Machine) BlockMatMul(m *ir.Module) (*ir.Module, error) {
	return mc.mapClones(m, "block-matmul", func(k *ir.Kernel, l *Level) *ir.Kernel {
		c := *k
		c.Body = blockKernel(k.Body, passes.ElemTypes(k), *l)
		return &c
	})
}

// blockKernel rewrites the matmuls of one clone's body; elems are its
// buffers' and arrays' element types.
func blockKernel(body *ir.Block, elems map[string]ir.Type, l Level) *ir.Block {
	allocs := map[string]*ir.Alloc{}
	names := map[string]bool{}
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Alloc:
			allocs[x.Name] = x
			names[x.Name] = true
		case *ir.Let:
			names[x.Name] = true
		case *ir.Var:
			names[x.Name] = true
		}
		return []ir.Stmt{s}
	})
	// packed names the array each transposed B is packed into, by
	// packKey: B's array, or, for B's rows read at row offsets (BRows:
	// prefill's K rows in the pool), the offsets' array, beside whose
	// declaration the packed array goes.
	packed := map[string]string{}
	blocks := func(mm *ir.MatMul) bool {
		if l.Lanes < 2 || mm.N%l.Lanes != 0 || mm.RotB != nil {
			return false
		}
		if !mm.TransB {
			return true
		}
		if mm.M < BlockMinRows || mm.K%l.Lanes != 0 {
			return false
		}
		if mm.BRows != "" {
			_, ok := allocs[mm.BRows]
			c, whole := ir.IsConst(mm.KExt)
			return ok && elems[mm.B] == ir.F32 && whole && c.Int == int64(mm.K)
		}
		a, ok := allocs[mm.B]
		return ok && a.T == ir.F32 && a.Size >= mm.N*mm.K
	}
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if mm, ok := s.(*ir.MatMul); ok && blocks(mm) && mm.TransB && packed[packKey(mm)] == "" {
			name := mm.B + "_t"
			for i := 2; names[name]; i++ {
				name = fmt.Sprintf("%s_t%d", mm.B, i)
			}
			names[name] = true
			packed[packKey(mm)] = name
		}
		return []ir.Stmt{s}
	})
	// size is each packed array's size: the largest [K, N] packed into it.
	size := map[string]int{}
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if mm, ok := s.(*ir.MatMul); ok && blocks(mm) && mm.TransB {
			p := packed[packKey(mm)]
			size[p] = max(size[p], mm.N*mm.K)
		}
		return []ir.Stmt{s}
	})
	// On a DotBF16 level, the matmuls dotBF16Fits takes also get their
	// operands as bf16 pairs (arrays named here, sized like packed's).
	// anyExact: the arrays of exact bf16 values, which a DotBF16 level
	// reads as pairs (exact) and every level sizes decode's Q pairs by.
	anyExact := bf16Exact(body)
	exact := map[string]bool{}
	if l.DotBF16 {
		exact = anyExact
	}
	fits := func(mm *ir.MatMul) bool { return blocks(mm) && dotBF16Fits(mm, exact, l) }
	pairs := map[string]string{}
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if mm, ok := s.(*ir.MatMul); ok && fits(mm) {
			for _, x := range []string{mm.A, mm.B} {
				if pairs[x] == "" {
					name := x + "_bp"
					for i := 2; names[name]; i++ {
						name = fmt.Sprintf("%s_bp%d", x, i)
					}
					names[name] = true
					pairs[x] = name
				}
			}
			size[pairs[mm.A]] = max(size[pairs[mm.A]], mm.M*mm.K/2)
			size[pairs[mm.B]] = max(size[pairs[mm.B]], mm.N*mm.K/2)
		}
		return []ir.Stmt{s}
	})
	// On an AMX level, the products splitFits takes (splitOf) get
	// their operands as split pairs and, accumulating off the tiles
	// (splitPVDot), their product an array of its own (named here, sized
	// like packed's).
	exactHalf := map[string]bool{}
	if l.DotBF16 {
		exactHalf = halfExact(body)
	}
	splitOf := func(mm *ir.MatMul) (splitPlan, bool) {
		if !blocks(mm) {
			return splitPlan{}, false
		}
		return splitFits(mm, exact, exactHalf, allocs, codeScale(elems[mm.B], l), l)
	}
	splitA, splitB, splitC := map[string]string{}, map[string]string{}, map[string]string{}
	fresh := func(base string) string {
		name := base
		for i := 2; names[name]; i++ {
			name = fmt.Sprintf("%s%d", base, i)
		}
		names[name] = true
		return name
	}
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		mm, ok := s.(*ir.MatMul)
		if !ok {
			return []ir.Stmt{s}
		}
		if p, ok := splitOf(mm); ok {
			if splitA[mm.A] == "" {
				splitA[mm.A] = fresh(mm.A + "_sp")
			}
			if splitB[mm.B] == "" {
				splitB[mm.B] = fresh(mm.B + "_sp")
			}
			steps := p.steps(mm.K)
			size[splitA[mm.A]] = max(size[splitA[mm.A]], mm.M*steps)
			size[splitB[mm.B]] = max(size[splitB[mm.B]], steps*mm.N)
			if mm.Accumulate && !splitAccumulates(mm, p, l) {
				if splitC[mm.C] == "" {
					splitC[mm.C] = fresh(mm.C + "_sp")
				}
				size[splitC[mm.C]] = max(size[splitC[mm.C]], mm.M*mm.N)
			}
		}
		return []ir.Stmt{s}
	})
	// Decode's Q·Kᵀ on vdpbf16ps (dotPairsFits): A's pairs in an array
	// of their own (K's are the pool's rows), declared at every level
	// that could run them at 16 lanes (unused below x86-64-v4-bf16), so
	// that the header's STACK_BYTES does not depend on the triple.
	qPairs := func(mm *ir.MatMul) bool {
		return dotBlocks(mm, allocs, l.Lanes) && dotPairsFits(mm, exact, elems, l)
	}
	pairsAt16 := Level{Lanes: 16, DotBF16: true}
	aPairs := map[string]string{}
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if mm, ok := s.(*ir.MatMul); ok && dotBlocks(mm, allocs, 16) && dotPairsFits(mm, anyExact, elems, pairsAt16) {
			if aPairs[mm.A] == "" {
				aPairs[mm.A] = fresh(mm.A + "_qp")
			}
			size[aPairs[mm.A]] = max(size[aPairs[mm.A]], mm.M*mm.K/2)
		}
		return []ir.Stmt{s}
	})
	den := func(x string) string { return pairs[x] + "den" }
	hoisted := map[*ir.MatMul]bool{}
	if len(pairs) > 0 {
		body = hoistPairs(body, fits, func(mm *ir.MatMul) []ir.Stmt {
			return packPairs(mm.A, pairs[mm.A], den(mm.A), mm.M, mm.K, l.Lanes, 0)
		}, hoisted)
	}
	qHoisted := map[*ir.MatMul]bool{}
	if len(aPairs) > 0 {
		body = hoistPairs(body, qPairs, func(mm *ir.MatMul) []ir.Stmt {
			return packPairs(mm.A, aPairs[mm.A], aPairs[mm.A]+"bad", mm.M, mm.K, l.Lanes, qPairsLimit)
		}, qHoisted)
	}
	// A split Q·Kᵀ's A (the staged Q) is packed once per item too, every
	// row of it (the rows past the item's are zeros).
	splitHoisted := map[*ir.MatMul]bool{}
	if len(splitA) > 0 {
		splitQK := func(mm *ir.MatMul) bool {
			_, ok := splitOf(mm)
			return ok && mm.TransB
		}
		body = hoistPairs(body, splitQK, func(mm *ir.MatMul) []ir.Stmt {
			p, _ := splitOf(mm)
			all := *mm
			all.MExt = i32c(mm.M)
			return splitPairsA(&all, p, splitA[mm.A], splitA[mm.A]+"bad", l.Lanes)
		}, splitHoisted)
	}
	// At an AMX level the staged K and V tiles the tiles' packers read
	// stay bf16 (narrow.go).
	narrow := narrowTiles(body, allocs, exact, func(mm *ir.MatMul) bool {
		if fits(mm) {
			return amxBlockFits(l, mm.M, mm.N, mm.K)
		}
		p, ok := splitOf(mm)
		return ok && p.pb == 1 && !mm.TransB
	}, l)
	scales := map[*ir.MatMul]string{}
	body = fuseRowScales(body, blocks, scales)
	// Code scales folded out of the inner loops (codescale.go): the
	// f16-valued arrays a Q·Kᵀ's A may be, and the scaled copies of the
	// A of the P·V products that fold theirs (named here, sized like
	// packed's).
	half := halfExact(body)
	fin := finiteProducts(body)
	bElemOf := func(mm *ir.MatMul) ir.Type {
		if narrow[mm.B] {
			return ir.BF16
		}
		return elems[mm.B]
	}
	scaledA := map[string]string{}
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		mm, ok := s.(*ir.MatMul)
		if !ok {
			return []ir.Stmt{s}
		}
		fold, _ := productWidening(bElemOf(mm), fin[mm], l)
		if !dotBlocks(mm, allocs, l.Lanes) && blocks(mm) && foldsPV(mm, fold, allocs, l.Lanes) {
			if scaledA[mm.A] == "" {
				name := mm.A + "_cs"
				for i := 2; names[name]; i++ {
					name = fmt.Sprintf("%s_cs%d", mm.A, i)
				}
				names[name] = true
				scaledA[mm.A] = name
			}
			size[scaledA[mm.A]] = max(size[scaledA[mm.A]], mm.M*mm.K)
		}
		return []ir.Stmt{s}
	})
	// The column flags of zeroskip P·V products (splitZeroSkip), beside
	// their A's declaration: declared at every level (unused below
	// AVX-512), so that the stack a call needs, which the header states,
	// does not depend on the triple or the levels built.
	zflags := map[string]string{}
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if mm, ok := s.(*ir.MatMul); ok && splitsZeroSkip(mm, 16) && mm.K%l.Lanes == 0 && blocks(mm) && !dotBlocks(mm, allocs, l.Lanes) {
			if zflags[mm.A] == "" {
				name := mm.A + "_zf"
				for i := 2; names[name]; i++ {
					name = fmt.Sprintf("%s_zf%d", mm.A, i)
				}
				names[name] = true
				zflags[mm.A] = name
			}
			size[zflags[mm.A]] = max(size[zflags[mm.A]], mm.K)
		}
		return []ir.Stmt{s}
	})
	return ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Alloc:
			out := []ir.Stmt{narrowStmt(x, narrow)}
			if p := zflags[x.Name]; p != "" {
				out = append(out, &ir.Alloc{Name: p, T: ir.I32, Size: size[p]})
			}
			if p := packed[x.Name]; p != "" {
				out = append(out, &ir.Alloc{Name: p, T: ir.F32, Size: size[p]})
			}
			for _, p := range []string{pairs[x.Name], aPairs[x.Name]} {
				if p != "" {
					out = append(out, &ir.Alloc{Name: p, T: ir.I32, Size: size[p]})
				}
			}
			if p := scaledA[x.Name]; p != "" {
				out = append(out, &ir.Alloc{Name: p, T: ir.F32, Size: size[p]})
			}
			for _, p := range []string{splitA[x.Name], splitB[x.Name]} {
				if p != "" {
					out = append(out, &ir.Alloc{Name: p, T: ir.I32, Size: size[p]})
				}
			}
			if p := splitC[x.Name]; p != "" {
				out = append(out, &ir.Alloc{Name: p, T: ir.F32, Size: size[p]})
			}
			return out
		case *ir.Store:
			return []ir.Stmt{narrowStmt(x, narrow)}
		case *ir.MatMul:
			bElem := bElemOf(x)
			fold, pair := productWidening(bElem, fin[x], l)
			if x.RotB != nil {
				// Rows turned as read: dot-product blocks whose steps
				// turn whole vectors (rotDotKernel), else lower-tiles'
				// loops.
				if dotBlocks(x, allocs, l.Lanes) && rotBlocks(x.RotB, l.Lanes) {
					return dotBlockedMatMul(x, bElem, l.Lanes, 0, false, "")
				}
				return []ir.Stmt{s}
			}
			if dotBlocks(x, allocs, l.Lanes) {
				if !foldsDot(x, fold, half) {
					fold = 0
				}
				f32 := dotBlockedMatMul(x, bElem, l.Lanes, fold, pair, "")
				if !qPairs(x) {
					return f32
				}
				// On bf16 pairs, unless A's flag sends the item to the
				// f32 blocks (qPairsLimit).
				var dot []ir.Stmt
				bad := aPairs[x.A] + "bad"
				if !qHoisted[x] {
					dot = packPairs(x.A, aPairs[x.A], bad, x.M, x.K, l.Lanes, qPairsLimit)
				}
				dot = append(dot, &ir.If{Cond: ir.Bin(ir.Ne, ir.R(bad, ir.I32), i32c(0)),
					Then: &ir.Block{Stmts: f32}, Else: &ir.Block{Stmts: dotBlockedMatMul(x, bElem, l.Lanes, 0, false, aPairs[x.A])}})
				return []ir.Stmt{&ir.Block{Stmts: dot}}
			}
			if !blocks(x) {
				return []ir.Stmt{s}
			}
			sh := microShapeFor(l, x.N/l.Lanes)
			sh.Pair = pair && !x.TransB
			b := x.B
			var out []ir.Stmt
			if x.TransB || !foldsPV(x, fold, allocs, l.Lanes) {
				fold = 0
			}
			// mk is the matmul the micro-kernels compute: with a folded
			// code scale, A read from its copy scaled by fold.
			mk := x
			if fold != 0 {
				c := *x
				c.A = scaledA[x.A]
				mk = &c
				out = append(out, scaleCopy(c.A, x.A, x.M*x.K, l.Lanes, fold)...)
			}
			if x.TransB {
				out = append(out, packTransposed(x, packed[packKey(x)], bElem, l.Lanes)...)
				b, bElem = packed[packKey(x)], ir.F32
			}
			// pre: the statements before the micro-kernels (B packed
			// transposed, A scaled), which a split product reads too.
			pre := len(out)
			if x.ZeroSkip && x.K%l.Lanes == 0 {
				// Most tiles hide nothing: scan A for -0 first and run
				// the selects only where some element is.
				// In prefill's tiles the selects run only at the
				// columns of a block of rows that mix -0 and other
				// weights (splitZeroSkip).
				zs := sh
				if splitsZeroSkip(x, l.Lanes) {
					zs.ZeroFlags = zflags[x.A]
				}
				plain := *mk
				plain.ZeroSkip = false
				scan, hides := negZeroScan(x, l.Lanes)
				out = append(append(out, scan...), &ir.If{Cond: hides,
					Then: &ir.Block{Stmts: blockedMatMul(mk, b, bElem, zs, scales[x], fold)},
					Else: &ir.Block{Stmts: blockedMatMul(&plain, b, bElem, sh, scales[x], fold)}})
			} else {
				out = append(out, blockedMatMul(mk, b, bElem, sh, scales[x], fold)...)
			}
			if p, ok := splitOf(x); ok {
				nm := splitNames{a: splitA[x.A], b: splitB[x.B], c: splitC[x.C]}
				split := splitProduct(x, p, nm, b, bElem, sh, l, scales[x], out[pre:], splitHoisted[x])
				return []ir.Stmt{&ir.Block{Stmts: append(out[:pre:pre], split...)}}
			}
			if !fits(x) {
				return out
			}
			// bf16 pairs on vdpbf16ps, unless an operand holds a
			// denormal, which vdpbf16ps would read as zero: then the
			// f32 micro-kernels above.
			var dot []ir.Stmt
			if !hoisted[x] {
				dot = append(dot, packPairs(x.A, pairs[x.A], den(x.A), x.M, x.K, l.Lanes, 0)...)
			}
			dot = append(dot, packPairsTransposed(x, pairs[x.B], den(x.B), l.Lanes, narrow[x.B])...)
			dot = append(dot, &ir.If{Cond: ir.Bin(ir.Ne, ir.Bin(ir.Or, ir.R(den(x.A), ir.I32), ir.R(den(x.B), ir.I32)), i32c(0)),
				Then: &ir.Block{Stmts: out}, Else: &ir.Block{Stmts: pairsMatMul(x, pairs[x.A], pairs[x.B], sh, l)}})
			return []ir.Stmt{&ir.Block{Stmts: dot}}
		}
		return []ir.Stmt{s}
	})
}

func i32c(v int) ir.Expr { return ir.Int(int64(v)) }

// packKey is the name packed keeps a transposed B's packed array under:
// B's array, or its row offsets' array when B is read through them.
func packKey(mm *ir.MatMul) string {
	if mm.BRows != "" {
		return mm.BRows
	}
	return mm.B
}

// add, mul and ceilDivE build i32 arithmetic, folded when both sides are
// constants (or one side is a neutral constant).
func addE(x, y ir.Expr) ir.Expr {
	cx, okx := x.(*ir.Const)
	cy, oky := y.(*ir.Const)
	switch {
	case okx && oky:
		return i32c(int(cx.Int + cy.Int))
	case oky && cy.Int == 0:
		return x
	case okx && cx.Int == 0:
		return y
	}
	return ir.Bin(ir.Add, x, y)
}

func mulE(x ir.Expr, n int) ir.Expr {
	if c, ok := x.(*ir.Const); ok {
		return i32c(int(c.Int) * n)
	}
	if n == 1 {
		return x
	}
	return ir.Bin(ir.Mul, x, i32c(n))
}

// blocksBefore is how many blocks of size n start before ext, at most
// most: min(most, ceil(ext / n)).
func blocksBefore(ext ir.Expr, n, most int) ir.Expr {
	if c, ok := ext.(*ir.Const); ok {
		return i32c(min(most, (int(c.Int)+n-1)/n))
	}
	return ir.Bin(ir.Min, i32c(most), ir.Bin(ir.Div, ir.Bin(ir.Add, ext, i32c(n-1)), i32c(n)))
}

// startsBefore is the condition that a block starting at static offset at
// starts before ext.
func startsBefore(at int, ext ir.Expr) ir.Expr {
	if c, ok := ext.(*ir.Const); ok {
		return ir.BoolConst(int64(at) < c.Int)
	}
	return ir.Bin(ir.Lt, i32c(at), ext)
}

// blockLoop covers [0, total) in blocks of size n that start before ext: a
// serial loop over the whole blocks, then the partial block at the end
// (total % n, when total is not a multiple of n). body writes one block
// at offset off with width w.
func blockLoop(v string, total, n int, ext ir.Expr, body func(off ir.Expr, w int) []ir.Stmt) []ir.Stmt {
	var out []ir.Stmt
	if whole := total / n; whole > 0 {
		hi := blocksBefore(ext, n, whole)
		if c, ok := hi.(*ir.Const); !ok || c.Int > 0 {
			if c, ok := hi.(*ir.Const); ok && c.Int == 1 {
				out = append(out, &ir.Block{Stmts: body(i32c(0), n)})
			} else {
				off := v + "0"
				inner := append([]ir.Stmt{&ir.Let{Name: off, Value: mulE(ir.R(v, ir.I32), n)}}, body(ir.R(off, ir.I32), n)...)
				out = append(out, &ir.For{Var: v, Lo: i32c(0), Hi: hi, Kind: ir.Serial, Body: &ir.Block{Stmts: inner}})
			}
		}
	}
	if rest := total % n; rest > 0 {
		at := total - rest
		cond := startsBefore(at, ext)
		if !ir.IsFalse(cond) {
			blk := &ir.Block{Stmts: body(i32c(at), rest)}
			if ir.IsTrue(cond) {
				out = append(out, blk)
			} else {
				out = append(out, &ir.If{Cond: cond, Then: blk})
			}
		}
	}
	return out
}

// blockedMatMul writes mm as micro-kernels of shape sh, reading B (or its
// packed transpose) from b laid out [K, N]; with a scale array (not ""),
// the accumulators loaded from C are first multiplied by scale[row]
// (fuseRowScales).
func blockedMatMul(mm *ir.MatMul, b string, bElem ir.Type, sh microShape, scale string, fold float64) []ir.Stmt {
	L := sh.L
	return blockLoop("bm_nb", mm.N, sh.NR*L, mm.NExt, func(n0 ir.Expr, nw int) []ir.Stmt {
		var out []ir.Stmt
		for i, sg := range rowBlocks(mm.M, sh.MR) {
			v := "bm_mb"
			if i > 0 {
				v = fmt.Sprintf("bm_mb%d", i)
			}
			// The segment's blocks that start before MExt, counted
			// from its first row.
			ext := mm.MExt
			if sg.at > 0 {
				if c, ok := ext.(*ir.Const); ok {
					ext = i32c(int(c.Int) - sg.at)
				} else {
					ext = ir.Bin(ir.Sub, ext, i32c(sg.at))
				}
			}
			blk := blockLoop(v, sg.rows, sg.mr, ext, func(m0 ir.Expr, mr int) []ir.Stmt {
				return microKernel(mm, b, bElem, L, addE(m0, i32c(sg.at)), n0, mr, nw/L, scale, fold, sh.Pair && b == mm.B, sh.ZeroFlags)
			})
			cond := startsBefore(sg.at, mm.MExt)
			switch {
			case ir.IsFalse(cond):
			case ir.IsTrue(cond) || sg.at == 0:
				out = append(out, blk...)
			default:
				out = append(out, &ir.If{Cond: cond, Then: &ir.Block{Stmts: blk}})
			}
		}
		return out
	})
}

// rowSegment is rows rows of C from row at, in blocks of mr rows.
type rowSegment struct{ at, rows, mr int }

// rowBlocks splits m rows into the fewest blocks of at most mr rows, as
// even as they come: blocks of one row more first, then the rest (128
// rows at mr 6: 18 blocks of 6, 4 of 5), so that no block is left with a
// row or two (too few accumulators to cover the multiply-add latency).
func rowBlocks(m, mr int) []rowSegment {
	if mr <= 1 || m <= 0 {
		return []rowSegment{{0, m, max(mr, 1)}}
	}
	nb := (m + mr - 1) / mr
	q, r := m/nb, m%nb
	var out []rowSegment
	if r > 0 {
		out = append(out, rowSegment{0, r * (q + 1), q + 1})
	}
	return append(out, rowSegment{r * (q + 1), (nb - r) * q, q})
}

// microKernel is C[m0 .. m0+mr, n0 .. n0+nr·L] (+)= A·B over k < KExt with
// mr·nr vector accumulators that start at zero; an accumulating product
// stores C + A·B (C's rows scaled by scale[row], with a scale array:
// C·scale + A·B in one multiply-add). With pair, B's vectors j and j+1
// (even j) are read as one (widenPair).
func microKernel(mm *ir.MatMul, b string, bElem ir.Type, L int, m0, n0 ir.Expr, mr, nr int, scale string, fold float64, pair bool, zf string) []ir.Stmt {
	vt := ir.Vec(ir.F32, L)
	acc := func(i, j int) string { return fmt.Sprintf("bm_c%d_%d", i, j) }
	cAt := func(i, j int) ir.Expr { return addE(mulE(addE(m0, i32c(i)), mm.N), addE(n0, i32c(j*L))) }
	// evenOdd: bf16 rows of B read in place, 2L at a time, widened by a
	// shift (the even columns) and a mask (the odd ones): one operation
	// per L elements instead of a widening load and a shift. The
	// accumulators of vectors j and j+1 (even j) then hold those 2L
	// columns' even and odd columns; C is split so as it is loaded and
	// interleaved back as it is stored. Every column takes the same
	// products in the same order: the results' bits do not change.
	evenOdd := evenOddBF16 && bElem == ir.BF16 && b == mm.B && nr%2 == 0 && !pair
	var out []ir.Stmt
	for i := 0; i < mr; i++ {
		for j := 0; j < nr; j++ {
			out = append(out, &ir.Var{Name: acc(i, j), Init: &ir.Const{T: vt}})
		}
	}
	k := ir.R("bm_k", ir.I32)
	var step []ir.Stmt
	for j := 0; j < nr; j++ {
		at := addE(mulE(k, mm.N), addE(n0, i32c(j*L)))
		if b == mm.B {
			at = bAt(mm, k, mm.N, addE(n0, i32c(j*L)))
		}
		if evenOdd {
			vi := ir.Vec(ir.I32, L)
			w := fmt.Sprintf("bm_w%d", j/2)
			step = append(step,
				&ir.Let{Name: w, Value: &ir.Bitcast{To: vi, X: ir.Ld(b, ir.Vec(ir.BF16, 2*L), at)}},
				&ir.Let{Name: fmt.Sprintf("bm_b%d", j), Value: &ir.Bitcast{To: vt, X: ir.Bin(ir.Shl, ir.R(w, vi), &ir.Const{T: vi, Int: 16})}},
				&ir.Let{Name: fmt.Sprintf("bm_b%d", j+1), Value: &ir.Bitcast{To: vt, X: ir.Bin(ir.And, ir.R(w, vi), &ir.Const{T: vi, Int: -0x10000})}})
			j++
			continue
		}
		if pair && j+1 < nr {
			step = append(step, widenPair(fmt.Sprintf("bm_w%d", j/2), fmt.Sprintf("bm_b%d", j), fmt.Sprintf("bm_b%d", j+1), b, bElem, L, at, fold)...)
			j++
			continue
		}
		step = append(step, &ir.Let{Name: fmt.Sprintf("bm_b%d", j), Value: loadScaled(b, bElem, L, at, fold)})
	}
	for i := 0; i < mr; i++ {
		a := fmt.Sprintf("bm_a%d", i)
		step = append(step, &ir.Let{Name: a, Value: ir.Splat(ir.Ld(mm.A, ir.F32, addE(mulE(addE(m0, i32c(i)), mm.K), k)), L)})
		z := fmt.Sprintf("bm_z%d", i)
		if mm.ZeroSkip {
			// Select, don't multiply: a -0 weight (a hidden position)
			// keeps the accumulators, even against NaN or infinite B
			// elements.
			// Not -0: nonzero (or NaN), or sign bit clear. Written
			// so (not as the negation of IsNegZero, which LLVM turns
			// into a select of the accumulator under the -0 test)
			// that the select below is a multiply-add under this
			// mask, vfmadd231ps {k} on AVX-512, not a multiply-add
			// into a copy and a blend.
			av := ir.R(a, vt)
			step = append(step, &ir.Let{Name: z, Value: ir.Bin(ir.Or, ir.Bin(ir.Ne, av, ir.Splat(ir.Float(0), L)),
				ir.Bin(ir.Gt, &ir.Bitcast{To: ir.Vec(ir.I32, L), X: av}, ir.Splat(ir.Int(-1), L)))})
		}
		for j := 0; j < nr; j++ {
			c := ir.R(acc(i, j), vt)
			var v ir.Expr = &ir.MulAdd{X: ir.R(a, vt), Y: ir.R(fmt.Sprintf("bm_b%d", j), vt), Z: c}
			if mm.ZeroSkip {
				v = ir.Sel(ir.R(z, ir.Vec(ir.Bool, L)), v, c)
			}
			step = append(step, &ir.Assign{Name: acc(i, j), Value: v})
		}
	}
	if body, ok := splitZeroSkip(mm, zf, L, m0, mr); ok {
		// The step without the selects, for the columns of A where
		// no row of the block is -0.
		plainMM := *mm
		plainMM.ZeroSkip = false
		plain := microKernel(&plainMM, b, bElem, L, m0, n0, mr, nr, scale, fold, pair, "")
		out = append(out, body...)
		step = splitStep(zf, kernelStep(plain), step)
	}
	out = append(out, &ir.For{Var: "bm_k", Lo: i32c(0), Hi: mm.KExt, Kind: ir.Serial, Body: &ir.Block{Stmts: step}})
	for i := 0; i < mr; i++ {
		for j := 0; j < nr; j++ {
			var v ir.Expr = ir.R(acc(i, j), vt)
			if evenOdd {
				v = &ir.VShuffle{X: ir.R(acc(i, j&^1), vt), Y: ir.R(acc(i, j|1), vt), Mask: interleaveMask(L, j&1)}
			}
			if mm.Accumulate {
				// C joins once, at the store: each FMA chain is this
				// call's K steps (a KV tile), not every tile of the
				// sequence, whose identical terms (a page a sequence
				// names many times) would round alike and drift with its
				// length.
				c := ir.Ld(mm.C, vt, cAt(i, j))
				if scale != "" {
					v = &ir.MulAdd{X: c, Y: ir.Splat(ir.Ld(scale, ir.F32, addE(m0, i32c(i))), L), Z: v}
				} else {
					v = ir.Bin(ir.Add, c, v)
				}
			}
			out = append(out, &ir.Store{Buf: mm.C, Index: cAt(i, j), Value: v})
		}
	}
	return out
}

// evenOddBF16 turns microKernel's even/odd widening of bf16 rows on;
// tests compare against it off.
var evenOddBF16 = true

// interleaveMask is the half (0: lanes 0 .. L-1, 1: L .. 2L-1) of the
// interleaving of two L-lane vectors, even lanes from the first, odd from
// the second.
func interleaveMask(L, half int) []int {
	m := make([]int, L)
	for i := range m {
		c := half*L + i
		m[i] = c/2 + (c%2)*L
	}
	return m
}

// negZeroScan scans the rows of A below MExt (all K columns, whole
// vectors of L lanes: A is ±0 past KExt) for an element that is -0, the
// weight of a hidden position that a zeroskip matmul must skip: the
// smallest of their bits as i32, a vector running minimum folded by a
// shuffle tree, is the sign bit alone exactly then (a NaN's bits are
// larger). It returns the statements and the condition that one was
// found.
func negZeroScan(mm *ir.MatMul, L int) ([]ir.Stmt, ir.Expr) {
	vt := ir.Vec(ir.I32, L)
	r, kb := ir.R("bm_zr", ir.I32), ir.R("bm_zk", ir.I32)
	bits := &ir.Bitcast{To: vt, X: ir.Ld(mm.A, ir.Vec(ir.F32, L), addE(mulE(r, mm.K), mulE(kb, L)))}
	out := []ir.Stmt{
		&ir.Var{Name: "bm_nz", Init: ir.Splat(ir.Int(math.MaxInt32), L)},
		&ir.For{Var: "bm_zr", Lo: i32c(0), Hi: mm.MExt, Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
			&ir.For{Var: "bm_zk", Lo: i32c(0), Hi: i32c(mm.K / L), Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
				&ir.Assign{Name: "bm_nz", Value: ir.Bin(ir.Min, ir.R("bm_nz", vt), bits)}}}}}}},
	}
	var cur ir.Expr = ir.R("bm_nz", vt)
	for n, step := L, 0; n > 1; n, step = n/2, step+1 {
		lowHalf, highHalf := make([]int, n/2), make([]int, n/2)
		for i := range lowHalf {
			lowHalf[i], highHalf[i] = i, n/2+i
		}
		name := fmt.Sprintf("bm_nz_h%d", step)
		out = append(out, &ir.Let{Name: name, Value: ir.Bin(ir.Min, &ir.VShuffle{X: cur, Y: cur, Mask: lowHalf}, &ir.VShuffle{X: cur, Y: cur, Mask: highHalf})})
		cur = ir.R(name, ir.Vec(ir.I32, n/2))
	}
	return out, ir.Bin(ir.Eq, cur, ir.Int(math.MinInt32))
}

// packTransposed writes B (stored [N, K], elements of elem) into bt as
// [K, N] f32, in L×L blocks
// of the rows that start before NExt: L vector loads of B's rows, log2(L)
// rounds of interleaving shuffles (each round rotates the bits of an
// element's (row, lane) index by one, so log2(L) rounds swap row and
// lane), L vector stores. With row offsets (BRows: K rows read in the
// pool) each row is read at its offset, and a block's rows at or past
// NExt, whose offsets are not set, read the last row below NExt instead
// (their columns of C are unspecified).
func packTransposed(mm *ir.MatMul, bt string, elem ir.Type, L int) []ir.Stmt {
	vt := ir.Vec(ir.F32, L)
	lo, hi := make([]int, L), make([]int, L)
	for i := 0; i < L/2; i++ {
		lo[2*i], lo[2*i+1] = i, L+i
		hi[2*i], hi[2*i+1] = L/2+i, L+L/2+i
	}
	return blockLoop("bm_jb", mm.N, L, mm.NExt, func(j0 ir.Expr, _ int) []ir.Stmt {
		db := ir.R("bm_db", ir.I32)
		d0 := mulE(db, L)
		var body []ir.Stmt
		name := func(round, i int) string { return fmt.Sprintf("bm_t%d_%d", round, i) }
		for i := 0; i < L; i++ {
			row := addE(j0, i32c(i))
			if mm.BRows != "" {
				row = ir.Bin(ir.Min, row, addE(mm.NExt, i32c(-1)))
			}
			body = append(body, &ir.Let{Name: name(0, i), Value: passes.LoadF32(mm.B, elem, L, bAt(mm, row, mm.K, d0))})
		}
		round := 0
		for n := L; n > 1; n /= 2 {
			for i := 0; i < L/2; i++ {
				x, y := ir.R(name(round, i), vt), ir.R(name(round, i+L/2), vt)
				body = append(body,
					&ir.Let{Name: name(round+1, 2*i), Value: &ir.VShuffle{X: x, Y: y, Mask: append([]int(nil), lo...)}},
					&ir.Let{Name: name(round+1, 2*i+1), Value: &ir.VShuffle{X: x, Y: y, Mask: append([]int(nil), hi...)}})
			}
			round++
		}
		for c := 0; c < L; c++ {
			body = append(body, &ir.Store{Buf: bt, Index: addE(mulE(addE(d0, i32c(c)), mm.N), j0), Value: ir.R(name(round, c), vt)})
		}
		return []ir.Stmt{&ir.For{Var: "bm_db", Lo: i32c(0), Hi: i32c(mm.K / L), Kind: ir.Serial, Body: &ir.Block{Stmts: body}}}
	})
}

// fuseRowScales finds, in the blocks of body, each accumulating P·V
// matmul that block-matmul takes (prefill's, and decode's of any row
// count) that follows a loop scaling every row of its C by an array
// element of the row (the online softmax's rescale: for row < MExt,
// C[row, :] = C[row, :] · S[row]), drops the loop and records S for the
// matmul: its micro-kernels multiply the accumulators they load from C by
// S[row] instead (the same product, rounded once as before: the output is
// bit-identical), so C makes one trip through the registers per tile
// instead of two. The matmul may also be the pair `if direct { mm reading
// B in place } else { mm }` (a decode tile's P·V): then both take S.
func fuseRowScales(body *ir.Block, blocks func(*ir.MatMul) bool, scales map[*ir.MatMul]string) *ir.Block {
	if body == nil {
		return nil
	}
	out := &ir.Block{}
	for i, s := range body.Stmts {
		if i+1 < len(body.Stmts) {
			if mms := rescaledMatMuls(body.Stmts[i+1], blocks); mms != nil {
				sc := rowScaleOf(s, mms[0])
				for _, mm := range mms[1:] {
					if rowScaleOf(s, mm) != sc {
						sc = ""
					}
				}
				if sc != "" {
					for _, mm := range mms {
						scales[mm] = sc
					}
					continue
				}
			}
		}
		switch x := s.(type) {
		case *ir.Block:
			s = fuseRowScales(x, blocks, scales)
		case *ir.For:
			c := *x
			c.Body = fuseRowScales(x.Body, blocks, scales)
			s = &c
		case *ir.If:
			c := *x
			c.Then, c.Else = fuseRowScales(x.Then, blocks, scales), fuseRowScales(x.Else, blocks, scales)
			s = &c
		}
		out.Stmts = append(out.Stmts, s)
	}
	return out
}

// rescaledMatMuls is the matmuls of s that can take a row scale: s
// itself, an accumulating P·V matmul block-matmul takes, or both branches
// of an If that holds one such matmul in each (directOr's pair); else nil.
func rescaledMatMuls(s ir.Stmt, blocks func(*ir.MatMul) bool) []*ir.MatMul {
	ok := func(s ir.Stmt) *ir.MatMul {
		mm, is := s.(*ir.MatMul)
		if is && mm.Accumulate && !mm.TransB && blocks(mm) {
			return mm
		}
		return nil
	}
	if mm := ok(s); mm != nil {
		return []*ir.MatMul{mm}
	}
	f, is := s.(*ir.If)
	if !is || f.Then == nil || f.Else == nil || len(f.Then.Stmts) != 1 || len(f.Else.Stmts) != 1 {
		return nil
	}
	a, b := ok(f.Then.Stmts[0]), ok(f.Else.Stmts[0])
	if a == nil || b == nil || a.C != b.C || a.M != b.M || a.N != b.N || !sameExpr(a.MExt, b.MExt) {
		return nil
	}
	return []*ir.MatMul{a, b}
}

// rowScaleOf is S when s is
//
//	for row in 0 .. M spread { if row < MExt { let a = S[row]
//	  for d in 0 .. N spread { C[row*N + d] = C[row*N + d] * a } } }
//
// (the guard may be absent when MExt is M) for mm's C, M, N and MExt, and
// S an f32 array; else "".
func rowScaleOf(s ir.Stmt, mm *ir.MatMul) string {
	f, ok := s.(*ir.For)
	if !ok || f.Kind != ir.Spread || !isConstInt(f.Lo, 0) || !isConstInt(f.Hi, mm.M) || len(f.Body.Stmts) != 1 {
		return ""
	}
	row := f.Var
	body := f.Body
	if g, ok := body.Stmts[0].(*ir.If); ok {
		b, ok := g.Cond.(*ir.Binary)
		if !ok || b.Op != ir.Lt || !isRef(b.X, row) || !sameExpr(b.Y, mm.MExt) || g.Else != nil && len(g.Else.Stmts) > 0 {
			return ""
		}
		body = g.Then
	} else if !isConstInt(mm.MExt, mm.M) {
		return ""
	}
	if body == nil || len(body.Stmts) != 2 {
		return ""
	}
	a, ok := body.Stmts[0].(*ir.Let)
	if !ok {
		return ""
	}
	ld, ok := a.Value.(*ir.Load)
	if !ok || ld.T != ir.F32 || !isRef(ld.Index, row) || ld.Buf == mm.C {
		return ""
	}
	inner, ok := body.Stmts[1].(*ir.For)
	if !ok || inner.Kind != ir.Spread || !isConstInt(inner.Lo, 0) || !isConstInt(inner.Hi, mm.N) || inner.Body == nil || len(inner.Body.Stmts) != 1 {
		return ""
	}
	st, ok := inner.Body.Stmts[0].(*ir.Store)
	if !ok || st.Buf != mm.C {
		return ""
	}
	// C[row*N + d]
	want := ir.Bin(ir.Add, ir.Bin(ir.Mul, ir.R(row, ir.I32), i32c(mm.N)), ir.R(inner.Var, ir.I32))
	if !sameExpr(st.Index, want) {
		return ""
	}
	m, ok := st.Value.(*ir.Binary)
	if !ok || m.Op != ir.Mul || !isRef(m.Y, a.Name) {
		return ""
	}
	cl, ok := m.X.(*ir.Load)
	if !ok || cl.Buf != mm.C || cl.T != ir.F32 || !sameExpr(cl.Index, want) {
		return ""
	}
	return ld.Buf
}

func isConstInt(e ir.Expr, v int) bool {
	c, ok := e.(*ir.Const)
	return ok && c.T == ir.I32 && c.Int == int64(v)
}

func isRef(e ir.Expr, name string) bool {
	r, ok := e.(*ir.Ref)
	return ok && r.Name == name
}

// sameExpr compares two expressions by their printed form.
func sameExpr(a, b ir.Expr) bool { return ir.ExprString(a) == ir.ExprString(b) }

// splitZeroSkip writes, for a zeroskip micro-kernel of mr rows from m0,
// into the i32 array zf one flag per column k of A (whole vectors of L
// lanes): 0 where no row of the block is -0 at k, 2 where every row is,
// 1 where some are. A step at a column flagged 0 then runs the
// multiply-adds without the selects, and a step at one flagged 2 runs
// nothing: either way what the selects would give (a select keeps the
// accumulator exactly where its row's element is -0), so the outputs are
// bit-identical, while the mask compares, which run on fewer ports than
// the multiply-adds, are left to the columns that mix both (on a causal
// diagonal tile, the block's own few columns). It returns the statements
// and whether it applies.
func splitZeroSkip(mm *ir.MatMul, zf string, L int, m0 ir.Expr, mr int) ([]ir.Stmt, bool) {
	if !mm.ZeroSkip || zf == "" || L < 2 || mm.K%L != 0 {
		return nil, false
	}
	one, zero := ir.Splat(ir.Int(1), L), &ir.Const{T: ir.Vec(ir.I32, L)}
	k0 := mulE(ir.R("bm_zk", ir.I32), L)
	var anyV, allV ir.Expr
	for i := 0; i < mr; i++ {
		z := ir.IsNegZero(ir.Ld(mm.A, ir.Vec(ir.F32, L), addE(mulE(addE(m0, i32c(i)), mm.K), k0)))
		if i == 0 {
			anyV, allV = z, z
			continue
		}
		anyV, allV = ir.Bin(ir.Or, anyV, z), ir.Bin(ir.And, allV, z)
	}
	return []ir.Stmt{&ir.For{Var: "bm_zk", Lo: i32c(0), Hi: i32c(mm.K / L), Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
		&ir.Store{Buf: zf, Index: k0, Value: ir.Bin(ir.Add, ir.Sel(anyV, one, zero), ir.Sel(allV, one, zero))}}}}}, true
}

// splitsZeroSkip is whether a zeroskip P·V product's tiles that hold a -0
// weight flag A's columns per block of rows (splitZeroSkip) rather than
// run the selects at every column: prefill's tiles (at least BlockMinRows
// rows), whose -0 weights (a causal diagonal tile's) fill whole columns
// of most blocks of rows, at the AVX-512 levels (16 lanes), where each
// select's -0 test is two compares into mask registers and an or of
// them. A decode tile's few rows, and the narrower levels, keep the
// selects at every column (the flagged kernel holds both steps: at every
// level it would grow the examples' .ll by 3-9% instead of 2-5%).
func splitsZeroSkip(mm *ir.MatMul, L int) bool {
	return mm.ZeroSkip && !mm.TransB && mm.M >= BlockMinRows && L >= 16 && mm.K%L == 0
}

// kernelStep is the body of the k loop of a micro-kernel's statements.
func kernelStep(mk []ir.Stmt) []ir.Stmt {
	for _, s := range mk {
		if f, ok := s.(*ir.For); ok && f.Var == "bm_k" {
			return f.Body.Stmts
		}
	}
	panic("block-matmul: micro-kernel without its k loop")
}

// splitStep is the k loop's step under splitZeroSkip's flags in zf: plain
// at a column flagged 0, sel at one flagged 1.
func splitStep(zf string, plain, sel []ir.Stmt) []ir.Stmt {
	f := ir.R("bm_zf", ir.I32)
	return []ir.Stmt{&ir.Let{Name: "bm_zf", Value: ir.Ld(zf, ir.I32, ir.R("bm_k", ir.I32))},
		&ir.If{Cond: ir.Bin(ir.Eq, f, i32c(0)), Then: &ir.Block{Stmts: plain},
			Else: &ir.Block{Stmts: []ir.Stmt{&ir.If{Cond: ir.Bin(ir.Eq, f, i32c(1)), Then: &ir.Block{Stmts: sel}}}}}}
}

// productWidening is how level l's products read a B of element type
// bElem: the code scale block-matmul may fold out of them (codeScale, 0
// for none) and whether they widen two vectors at a time (pairWiden). In
// a finite-codes branch (finite) native-widen may widen B's codes with
// FiniteBitsWiden (bitsWiden): its scale is the one folded, and its
// loads are single vectors. The scaled copies of A that block-matmul
// declares and the products that read them both ask it.
func productWidening(bElem ir.Type, finite bool, l Level) (fold float64, pair bool) {
	if finite {
		return finiteCodeScale(bElem, l), pairWiden(bElem, l) && !bitsWiden(bElem, l)
	}
	return codeScale(bElem, l), pairWiden(bElem, l)
}

// finiteProducts are the matmuls of body in the Then branch of an if
// tagged finite (finite-codes: their B codes hold no NaN).
func finiteProducts(body *ir.Block) map[*ir.MatMul]bool {
	out := map[*ir.MatMul]bool{}
	var walk func(b *ir.Block, in bool)
	walk = func(b *ir.Block, in bool) {
		if b == nil {
			return
		}
		for _, s := range b.Stmts {
			switch x := s.(type) {
			case *ir.MatMul:
				if in {
					out[x] = true
				}
			case *ir.Block:
				walk(x, in)
			case *ir.For:
				walk(x.Body, in)
			case *ir.If:
				walk(x.Then, in || x.Tag == ir.TagFinite)
				walk(x.Else, in)
			}
		}
	}
	walk(body, false)
	return out
}
