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
// The kernel computes a 32×32 block of C = A·Bᵀ from bf16 pairs in the
// layouts packPairs and packPairsTransposed write (x86-64-v4-bf16's
// vdpbf16ps operands are already what the tiles read):
//
//	A pairs: [M, K/2] i32, row m's pair k at a[m·lda + k] (lda in bytes)
//	B pairs: [K/2, N] i32, pair row k's column n at b[k·ldb + n]
//	C:       [M, N] f32, written (not accumulated): c[m·ldc + n]
//
// Tiles: tmm0..tmm3 the four 16×16 f32 accumulators (rows 0-15 / 16-31 ×
// columns 0-15 / 16-31), tmm4 and tmm5 A's two 16-row × 16-pair blocks,
// tmm6 and tmm7 B's two 16-pair-row × 16-column blocks. One K step (16
// pairs, 32 bf16) is four TILELOADD and four TDPBF16PS. TDPBF16PS reads
// denormal inputs as zero, as vdpbf16ps does: the callers' denormal flags
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

// newAMXQKBlock is rt.amx_qk32 (ir.RuntimeRoutines) at level l, not yet
// in a module:
//
//	i32 @name(i32* a, i32 aoff, i32 lda, i32* b, i32 boff, i32 ldb, float* c, i32 coff, i32 ldc, i32 steps)
//
// offsets and strides in elements, steps = K/amxKStep ≥ 1; returns 0.
func newAMXQKBlock(name string, l Level) *lir.Func {
	i32p, f32p := types.NewPointer(types.I32), types.NewPointer(types.Float)
	pa, paoff, plda := lir.NewParam("a", i32p), lir.NewParam("aoff", types.I32), lir.NewParam("lda", types.I32)
	pb, pboff, pldb := lir.NewParam("b", i32p), lir.NewParam("boff", types.I32), lir.NewParam("ldb", types.I32)
	pc, pcoff, pldc := lir.NewParam("c", f32p), lir.NewParam("coff", types.I32), lir.NewParam("ldc", types.I32)
	psteps := lir.NewParam("steps", types.I32)
	f := lir.NewFunc(name, types.I32, pa, paoff, plda, pb, pboff, pldb, pc, pcoff, pldc, psteps)
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
	entry := f.NewBlock("entry")
	loop := f.NewBlock("step")
	exit := f.NewBlock("store")

	cfg := entry.NewAlloca(types.NewArray(8, types.I64))
	cfg.Align = 64
	cfg.SetName("tilecfg")
	for i, w := range amxTileConfig() {
		p := entry.NewGetElementPtr(cfg.ElemType, cfg, i64c(0), i64c(int64(i)))
		entry.NewStore(constant.NewInt(types.I64, int64(w)), p)
	}
	cfgp := entry.NewBitCast(cfg, i8p)
	entry.NewCall(asm("ldtilecfg ($0)\n\ttilezero %tmm0\n\ttilezero %tmm1\n\ttilezero %tmm2\n\ttilezero %tmm3", "r,", i8p), cfgp)
	// Byte pointers and strides (4-byte elements).
	bytes := func(b *lir.Block, p value.Value, off value.Value) value.Value {
		return b.NewGetElementPtr(types.I8, b.NewBitCast(p, i8p), b.NewMul(b.NewSExt(off, types.I64), i64c(4)))
	}
	stride := func(b *lir.Block, ld value.Value) value.Value { return b.NewMul(b.NewSExt(ld, types.I64), i64c(4)) }
	aBase, bBase := bytes(entry, pa, paoff), bytes(entry, pb, pboff)
	lda, ldb := stride(entry, plda), stride(entry, pldb)
	a16 := entry.NewMul(lda, i64c(16)) // A's row 16
	b16 := entry.NewMul(ldb, i64c(16)) // B's pair row 16
	steps := entry.NewSExt(psteps, types.I64)
	entry.NewBr(loop)

	s := lir.NewPhi(lir.NewIncoming(i64c(0), entry))
	s.SetName("s")
	loop.Insts = append(loop.Insts, s)
	// Step s reads A's pairs 16s..16s+15 (bytes 64s of each row) and B's
	// pair rows 16s..16s+15.
	a0 := loop.NewGetElementPtr(types.I8, aBase, loop.NewMul(s, i64c(64)))
	a1 := loop.NewGetElementPtr(types.I8, a0, a16)
	b0 := loop.NewGetElementPtr(types.I8, bBase, loop.NewMul(s, b16))
	b1 := loop.NewGetElementPtr(types.I8, b0, i64c(64))
	loop.NewCall(asm("tileloadd ($0,$1,1), %tmm4\n\ttileloadd ($2,$1,1), %tmm5\n\t"+
		"tileloadd ($3,$4,1), %tmm6\n\ttileloadd ($5,$4,1), %tmm7\n\t"+
		"tdpbf16ps %tmm6, %tmm4, %tmm0\n\ttdpbf16ps %tmm7, %tmm4, %tmm1\n\t"+
		"tdpbf16ps %tmm6, %tmm5, %tmm2\n\ttdpbf16ps %tmm7, %tmm5, %tmm3",
		"r,r,r,r,r,r,", i8p, types.I64, i8p, i8p, types.I64, i8p), a0, lda, a1, b0, ldb, b1)
	next := loop.NewAdd(s, i64c(1))
	s.Incs = append(s.Incs, lir.NewIncoming(next, loop))
	more := loop.NewICmp(enum.IPredSLT, next, steps)
	loop.NewCondBr(more, loop, exit)

	cBase := bytes(exit, pc, pcoff)
	ldc := stride(exit, pldc)
	c01 := exit.NewGetElementPtr(types.I8, cBase, i64c(64))
	c10 := exit.NewGetElementPtr(types.I8, cBase, exit.NewMul(ldc, i64c(16)))
	c11 := exit.NewGetElementPtr(types.I8, c10, i64c(64))
	exit.NewCall(asm("tilestored %tmm0, ($0,$4,1)\n\ttilestored %tmm1, ($1,$4,1)\n\t"+
		"tilestored %tmm2, ($2,$4,1)\n\ttilestored %tmm3, ($3,$4,1)\n\ttilerelease",
		"r,r,r,r,r,", i8p, i8p, i8p, i8p, types.I64), cBase, c01, c10, c11, ldc)
	exit.NewRet(constant.NewInt(types.I32, 0))
	return f
}

// amxBlockFits reports whether level l runs an M×N×K Q·Kᵀ (dotBF16Fits)
// on whole rt.amx_qk32 blocks.
func amxBlockFits(l Level, m, n, k int) bool {
	return l.AMX && m%amxBlock == 0 && n%amxBlock == 0 && k%amxKStep == 0 && k > 0
}

// pairsMatMul is mm (dotBF16Fits) on the bf16 pairs ap and bp: on an AMX
// level, where amxBlockFits, rt.amx_qk32 on each 32×32 block that starts
// before the M and N extents (as the vdpbf16ps micro-kernels, a block
// that reaches past an extent writes C there too); elsewhere vdpbf16ps
// (dotBF16MatMul).
func pairsMatMul(mm *ir.MatMul, ap, bp string, sh microShape, l Level) []ir.Stmt {
	if !amxBlockFits(l, mm.M, mm.N, mm.K) {
		return dotBF16MatMul(mm, ap, bp, sh)
	}
	return blockLoop("am_nb", mm.N, amxBlock, mm.NExt, func(n0 ir.Expr, _ int) []ir.Stmt {
		return blockLoop("am_mb", mm.M, amxBlock, mm.MExt, func(m0 ir.Expr, _ int) []ir.Stmt {
			return []ir.Stmt{&ir.CallStmt{Fn: "rt.amx_qk32", Args: []ir.Expr{
				ir.R(ap, ir.I32), mulE(m0, mm.K/2), i32c(mm.K / 2),
				ir.R(bp, ir.I32), n0, i32c(mm.N),
				ir.R(mm.C, ir.F32), addE(mulE(m0, mm.N), n0), i32c(mm.N),
				i32c(mm.K / amxKStep)}}}
		})
	})
}
