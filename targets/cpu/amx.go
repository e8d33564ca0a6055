package cpu

import (
	"encoding/binary"

	"github.com/attnc/attnc/ir"

	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/enum"
	"github.com/llir/llvm/ir/types"
	"github.com/llir/llvm/ir/value"
)

// AMX tile micro-kernel (x86-64-amx). llir/llvm v0.3.6 has no x86_amx
// type and LLVM 14's AMX intrinsics need it, so the tile code is inline
// assembly with explicit tmm registers: one asm statement per step, each
// with a memory clobber, and no call between the LDTILECFG at the start
// and the TILERELEASE at the end. The tile configuration is a 64-byte
// stack buffer (palette 1) written with constant stores.
//
// The routine computes a grid of 32×32 blocks of C = A·Bᵀ from bf16 pairs
// in the layouts packPairs and packPairsTransposed write (x86-64-v4-bf16's
// vdpbf16ps operands are already what the tiles read):
//
//	A pairs: [M, K/2] i32, row m's pair k at a[m·lda + k] (lda in bytes)
//	B pairs: [K/2, N] i32, pair row k's column n at b[k·ldb + n]
//	C:       [M, N] f32, written, or accumulated into (acc): c[m·ldc + n]
//
// Tiles: tmm0..tmm3 the four 16×16 f32 accumulators (rows 0-15 / 16-31 ×
// columns 0-15 / 16-31), tmm4 and tmm5 A's two 16-row × 16-pair blocks,
// tmm6 and tmm7 B's two 16-pair-row × 16-column blocks. One K step (16
// pairs, 32 bf16) is four TILELOADD and four TDPBF16PS, each product right
// after the loads it needs (A0 B0, C00, B1, C01, A1, C10, C11: on an
// Emerald Rapids 3-15% less time per product than four loads first,
// scripts/amxmb.c). The configuration
// is loaded once per call, not per block: LDTILECFG and TILERELEASE are
// among AMX's slowest instructions (they reset the whole tile state), and
// a product's blocks all use the same shapes. TDPBF16PS reads denormal
// inputs as zero, as vdpbf16ps does: the callers' denormal flags
// (packPairs' den) send such tiles to the f32 micro-kernels.

// amxTiles is the off switch of x86-64-amx's clones: with it false no
// module has an x86-64-amx clone (its .ll only names the level) and
// ATTNC_CPU_LEVEL=x86-64-amx runs the best level below (x86-64-v4-bf16's
// rule for a library without its clone).
const amxTiles = true

// amxBlock is the kernel's M and N block; amxKStep the bf16 elements of K
// one step reads (16 pairs: a tile row of 64 bytes).
const (
	amxBlock = 32
	amxKStep = 32
)

// amxTileConfig is the LDTILECFG image: palette 1, tmm0..tmm7 16 rows of
// 64 bytes each.
func amxTileConfig() [8]uint64 {
	var b [64]byte
	b[0] = 1
	for t := range 8 {
		binary.LittleEndian.PutUint16(b[16+2*t:], 64)
		b[48+t] = 16
	}
	var w [8]uint64
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return w
}

// newAMXBlocks is rt.amx_mm32 (ir.RuntimeRoutines) at level l, not yet in
// a module:
//
//	i32 @name(i32* a, i32 aoff, i32 lda, i32* b, i32 boff, i32 ldb, float* c, i32 coff, i32 ldc, i32 steps, i32 mblocks, i32 nblocks, i32 acc)
//
// offsets and strides in elements, steps = K/amxKStep ≥ 1; block (i, j)
// of the mblocks × nblocks grid is rows 32i.., columns 32j.. (column
// blocks outer); no block when either count is below 1; returns 0. The
// accumulators start from zero (TILEZERO); with acc nonzero each block's
// product is then added to C's block (C += A·Bᵀ: the four tiles stored
// to a 1 KiB stack block one at a time, their rows added with one f32
// addition each) instead of stored over it. Started from C's block
// (TILELOADD), as they were, the tiles chained every step of every call
// into C: over a KV sequence that repeats the same terms (a page named
// many times) that one chain drifted past the conformance bound (f16,
// one 4-position page named 256 times: 17–19 units of 2^-24 mag,
// emulated).
func newAMXBlocks(name string, l Level) *lir.Func {
	i32p, f32p := types.NewPointer(types.I32), types.NewPointer(types.Float)
	pa, paoff, plda := lir.NewParam("a", i32p), lir.NewParam("aoff", types.I32), lir.NewParam("lda", types.I32)
	pb, pboff, pldb := lir.NewParam("b", i32p), lir.NewParam("boff", types.I32), lir.NewParam("ldb", types.I32)
	pc, pcoff, pldc := lir.NewParam("c", f32p), lir.NewParam("coff", types.I32), lir.NewParam("ldc", types.I32)
	psteps, pmb, pnb := lir.NewParam("steps", types.I32), lir.NewParam("mblocks", types.I32), lir.NewParam("nblocks", types.I32)
	pacc := lir.NewParam("acc", types.I32)
	f := lir.NewFunc(name, types.I32, pa, paoff, plda, pb, pboff, pldb, pc, pcoff, pldc, psteps, pmb, pnb, pacc)
	f.Linkage = enum.LinkageInternal
	f.FuncAttrs = append(f.FuncAttrs, enum.FuncAttrNoUnwind)
	for _, a := range l.attrs() {
		f.FuncAttrs = append(f.FuncAttrs, lir.AttrPair{Key: a.Key, Value: a.Value})
	}
	i8p := types.NewPointer(types.I8)
	i64c := func(v int64) *constant.Int { return constant.NewInt(types.I64, v) }
	asm := func(text, cons string, params ...types.Type) *lir.InlineAsm {
		a := lir.NewInlineAsm(types.NewPointer(types.NewFunc(types.Void, params...)), text, cons+"~{memory},~{dirflag},~{fpsr},~{flags}")
		a.SideEffect = true
		return a
	}
	phi := func(b *lir.Block, name string, from *lir.Block) *lir.InstPhi {
		p := lir.NewPhi(lir.NewIncoming(i64c(0), from))
		p.SetName(name)
		b.Insts = append(b.Insts, p)
		return p
	}
	entry := f.NewBlock("entry")
	config := f.NewBlock("config")
	colBlock := f.NewBlock("col_block")
	rowBlock := f.NewBlock("row_block")
	loop := f.NewBlock("step")
	stored := f.NewBlock("steps_done")
	add := f.NewBlock("add")
	store := f.NewBlock("store")
	next := f.NewBlock("row_next")
	colNext := f.NewBlock("col_next")
	release := f.NewBlock("release")
	done := f.NewBlock("done")

	// The configuration's stack slot is a static alloca (in the entry
	// block); it is written and loaded only when there is a block.
	cfg := entry.NewAlloca(types.NewArray(8, types.I64))
	cfg.Align = 64
	cfg.SetName("tilecfg")
	// The block an accumulating call stores a tile to: 16 rows of 16 f32.
	vec := types.NewVector(16, types.Float)
	sum := entry.NewAlloca(types.NewArray(16, vec))
	sum.Align = 64
	sum.SetName("tilesum")
	sum8 := entry.NewBitCast(sum, i8p)
	mblocks, nblocks := entry.NewSExt(pmb, types.I64), entry.NewSExt(pnb, types.I64)
	any := entry.NewAnd(entry.NewICmp(enum.IPredSGT, mblocks, i64c(0)), entry.NewICmp(enum.IPredSGT, nblocks, i64c(0)))
	entry.NewCondBr(any, config, done)

	for i, w := range amxTileConfig() {
		p := config.NewGetElementPtr(cfg.ElemType, cfg, i64c(0), i64c(int64(i)))
		config.NewStore(constant.NewInt(types.I64, int64(w)), p)
	}
	config.NewCall(asm("ldtilecfg ($0)", "r,", i8p), config.NewBitCast(cfg, i8p))
	// Byte pointers and strides (4-byte elements).
	bytes := func(b *lir.Block, p value.Value, off value.Value) value.Value {
		return b.NewGetElementPtr(types.I8, b.NewBitCast(p, i8p), b.NewMul(b.NewSExt(off, types.I64), i64c(4)))
	}
	stride := func(b *lir.Block, ld value.Value) value.Value { return b.NewMul(b.NewSExt(ld, types.I64), i64c(4)) }
	aBase, bBase, cBase := bytes(config, pa, paoff), bytes(config, pb, pboff), bytes(config, pc, pcoff)
	lda, ldb, ldc := stride(config, plda), stride(config, pldb), stride(config, pldc)
	a16 := config.NewMul(lda, i64c(16)) // A's row 16
	b16 := config.NewMul(ldb, i64c(16)) // B's pair row 16
	c16 := config.NewMul(ldc, i64c(16)) // C's row 16
	steps := config.NewSExt(psteps, types.I64)
	config.NewBr(colBlock)

	// Column block j: B's columns and C's columns 32j.. (128j bytes).
	j := phi(colBlock, "j", config)
	bCol := colBlock.NewGetElementPtr(types.I8, bBase, colBlock.NewMul(j, i64c(128)))
	cCol := colBlock.NewGetElementPtr(types.I8, cBase, colBlock.NewMul(j, i64c(128)))
	colBlock.NewBr(rowBlock)

	// Row block i: A's and C's rows 32i..; its accumulators start at 0.
	i := phi(rowBlock, "i", colBlock)
	aRow := rowBlock.NewGetElementPtr(types.I8, aBase, rowBlock.NewMul(i, rowBlock.NewMul(a16, i64c(2))))
	cBlk := rowBlock.NewGetElementPtr(types.I8, cCol, rowBlock.NewMul(i, rowBlock.NewMul(c16, i64c(2))))
	c01 := rowBlock.NewGetElementPtr(types.I8, cBlk, i64c(64))
	c10 := rowBlock.NewGetElementPtr(types.I8, cBlk, c16)
	c11 := rowBlock.NewGetElementPtr(types.I8, c10, i64c(64))
	rowBlock.NewCall(asm("tilezero %tmm0\n\ttilezero %tmm1\n\ttilezero %tmm2\n\ttilezero %tmm3", ""))
	rowBlock.NewBr(loop)

	// Step s reads A's pairs 16s..16s+15 (bytes 64s of each row) and B's
	// pair rows 16s..16s+15.
	s := phi(loop, "s", rowBlock)
	a0 := loop.NewGetElementPtr(types.I8, aRow, loop.NewMul(s, i64c(64)))
	a1 := loop.NewGetElementPtr(types.I8, a0, a16)
	b0 := loop.NewGetElementPtr(types.I8, bCol, loop.NewMul(s, b16))
	b1 := loop.NewGetElementPtr(types.I8, b0, i64c(64))
	loop.NewCall(asm("tileloadd ($0,$1,1), %tmm4\n\ttileloadd ($3,$4,1), %tmm6\n\t"+
		"tdpbf16ps %tmm6, %tmm4, %tmm0\n\ttileloadd ($5,$4,1), %tmm7\n\t"+
		"tdpbf16ps %tmm7, %tmm4, %tmm1\n\ttileloadd ($2,$1,1), %tmm5\n\t"+
		"tdpbf16ps %tmm6, %tmm5, %tmm2\n\ttdpbf16ps %tmm7, %tmm5, %tmm3",
		"r,r,r,r,r,r,", i8p, types.I64, i8p, i8p, types.I64, i8p), a0, lda, a1, b0, ldb, b1)
	sNext := loop.NewAdd(s, i64c(1))
	s.Incs = append(s.Incs, lir.NewIncoming(sNext, loop))
	loop.NewCondBr(loop.NewICmp(enum.IPredSLT, sNext, steps), loop, stored)

	// addRows adds the stack block's rows to the 16 rows of C at cq
	// (bytes, rows ldc apart), each with one f32 addition.
	addRows := func(b *lir.Block, cq value.Value) {
		for r := range int64(16) {
			row := b.NewBitCast(b.NewGetElementPtr(types.I8, cq, b.NewMul(ldc, i64c(r))), types.NewPointer(vec))
			c := b.NewLoad(vec, row)
			c.Align = 4
			t := b.NewLoad(vec, b.NewGetElementPtr(sum.ElemType, sum, i64c(0), i64c(r)))
			t.Align = 64
			b.NewStore(b.NewFAdd(c, t), row).Align = 4
		}
	}
	// Without acc the tiles are C's block; with it each tile goes to the
	// stack block and its 16 rows are added to C's. acc passes through an
	// empty asm statement here, so that LLVM does not see it as loop
	// invariant and unswitch the loops on it (one step loop each way).
	opaque := lir.NewInlineAsm(types.NewPointer(types.NewFunc(types.I32, types.I32)), "", "=r,0")
	opaque.SideEffect = true
	accHere := stored.NewCall(opaque, pacc)
	stored.NewCondBr(stored.NewICmp(enum.IPredNE, accHere, constant.NewInt(types.I32, 0)), add, store)
	add.NewCall(asm("tilestored %tmm0, ($0,$1,1)", "r,r,", i8p, types.I64), sum8, i64c(64))
	addRows(add, cBlk)
	add.NewCall(asm("tilestored %tmm1, ($0,$1,1)", "r,r,", i8p, types.I64), sum8, i64c(64))
	addRows(add, c01)
	add.NewCall(asm("tilestored %tmm2, ($0,$1,1)", "r,r,", i8p, types.I64), sum8, i64c(64))
	addRows(add, c10)
	add.NewCall(asm("tilestored %tmm3, ($0,$1,1)", "r,r,", i8p, types.I64), sum8, i64c(64))
	addRows(add, c11)
	add.NewBr(next)
	store.NewCall(asm("tilestored %tmm0, ($0,$4,1)\n\ttilestored %tmm1, ($1,$4,1)\n\t"+
		"tilestored %tmm2, ($2,$4,1)\n\ttilestored %tmm3, ($3,$4,1)",
		"r,r,r,r,r,", i8p, i8p, i8p, i8p, types.I64), cBlk, c01, c10, c11, ldc)
	store.NewBr(next)
	iNext := next.NewAdd(i, i64c(1))
	i.Incs = append(i.Incs, lir.NewIncoming(iNext, next))
	next.NewCondBr(next.NewICmp(enum.IPredSLT, iNext, mblocks), rowBlock, colNext)

	jNext := colNext.NewAdd(j, i64c(1))
	j.Incs = append(j.Incs, lir.NewIncoming(jNext, colNext))
	colNext.NewCondBr(colNext.NewICmp(enum.IPredSLT, jNext, nblocks), colBlock, release)

	release.NewCall(asm("tilerelease", ""))
	release.NewBr(done)
	done.NewRet(constant.NewInt(types.I32, 0))
	return f
}

// amxBlockFits reports whether level l runs an M×N×K Q·Kᵀ (dotBF16Fits)
// on whole rt.amx_mm32 blocks.
func amxBlockFits(l Level, m, n, k int) bool {
	return l.AMX && m%amxBlock == 0 && n%amxBlock == 0 && k%amxKStep == 0 && k > 0
}

// pairsMatMul is mm (dotBF16Fits) on the bf16 pairs ap and bp: on an AMX
// level, where amxBlockFits, one rt.amx_mm32 call over every 32×32 block
// that starts before the M and N extents (as the vdpbf16ps micro-kernels,
// a block that reaches past an extent writes C there too), adding to C
// when mm accumulates; elsewhere vdpbf16ps (dotBF16MatMul, which does
// not accumulate).
func pairsMatMul(mm *ir.MatMul, ap, bp string, sh microShape, l Level) []ir.Stmt {
	if !amxBlockFits(l, mm.M, mm.N, mm.K) {
		if mm.Accumulate {
			panic("cpu: an accumulating pairs product off the tiles")
		}
		return dotBF16MatMul(mm, ap, bp, sh)
	}
	acc := 0
	if mm.Accumulate {
		acc = 1
	}
	return []ir.Stmt{&ir.CallStmt{Fn: "rt.amx_mm32", Args: []ir.Expr{
		ir.R(ap, ir.I32), i32c(0), i32c(mm.K / 2),
		ir.R(bp, ir.I32), i32c(0), i32c(mm.N),
		ir.R(mm.C, ir.F32), i32c(0), i32c(mm.N),
		i32c(mm.K / amxKStep),
		blocksBefore(mm.MExt, amxBlock, mm.M/amxBlock), blocksBefore(mm.NExt, amxBlock, mm.N/amxBlock), i32c(acc)}}}
}
