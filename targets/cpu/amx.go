package cpu

import (
	"encoding/binary"

	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/enum"
	"github.com/llir/llvm/ir/types"
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

// amxTiles is the off switch of x86-64-amx's clones: false until
// block-matmul runs prefill's Q·Kᵀ on defineAMXQKBlock (its call from the
// kernel IR is not there yet). Until then no module has an x86-64-amx
// clone: its .ll only names the level, and ATTNC_CPU_LEVEL=x86-64-amx runs
// the best level below it (x86-64-v4-bf16's rule for a library without
// its clone), since an x86-64-amx clone would be x86-64-v4-bf16's code.
const amxTiles = false

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

// defineAMXQKBlock adds to mod the internal function
//
//	void @name(i32* a, i64 lda, i32* b, i64 ldb, float* c, i64 ldc, i64 steps)
//
// (strides in bytes; steps = K/amxKStep ≥ 1) with level l's attributes.
func defineAMXQKBlock(mod *lir.Module, name string, l Level) *lir.Func {
	i32p, f32p := types.NewPointer(types.I32), types.NewPointer(types.Float)
	pa, plda := lir.NewParam("a", i32p), lir.NewParam("lda", types.I64)
	pb, pldb := lir.NewParam("b", i32p), lir.NewParam("ldb", types.I64)
	pc, pldc := lir.NewParam("c", f32p), lir.NewParam("ldc", types.I64)
	psteps := lir.NewParam("steps", types.I64)
	f := mod.NewFunc(name, types.Void, pa, plda, pb, pldb, pc, pldc, psteps)
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
	// Row 16 of A and column 16 of B, in bytes.
	aBase := entry.NewBitCast(pa, i8p)
	bBase := entry.NewBitCast(pb, i8p)
	a16 := entry.NewMul(plda, i64c(16))
	entry.NewBr(loop)

	s := lir.NewPhi(lir.NewIncoming(i64c(0), entry))
	s.SetName("s")
	loop.Insts = append(loop.Insts, s)
	// Step s reads A's pairs 16s..16s+15 (bytes 64s of each row) and B's
	// pair rows 16s..16s+15.
	aOff := loop.NewMul(s, i64c(64))
	a0 := loop.NewGetElementPtr(types.I8, aBase, aOff)
	a1 := loop.NewGetElementPtr(types.I8, a0, a16)
	bOff := loop.NewMul(s, loop.NewMul(pldb, i64c(16)))
	b0 := loop.NewGetElementPtr(types.I8, bBase, bOff)
	b1 := loop.NewGetElementPtr(types.I8, b0, i64c(64))
	loop.NewCall(asm("tileloadd ($0,$1,1), %tmm4\n\ttileloadd ($2,$1,1), %tmm5\n\t"+
		"tileloadd ($3,$4,1), %tmm6\n\ttileloadd ($5,$4,1), %tmm7\n\t"+
		"tdpbf16ps %tmm6, %tmm4, %tmm0\n\ttdpbf16ps %tmm7, %tmm4, %tmm1\n\t"+
		"tdpbf16ps %tmm6, %tmm5, %tmm2\n\ttdpbf16ps %tmm7, %tmm5, %tmm3",
		"r,r,r,r,r,r,", i8p, types.I64, i8p, i8p, types.I64, i8p), a0, plda, a1, b0, pldb, b1)
	next := loop.NewAdd(s, i64c(1))
	s.Incs = append(s.Incs, lir.NewIncoming(next, loop))
	more := loop.NewICmp(enum.IPredSLT, next, psteps)
	loop.NewCondBr(more, loop, exit)

	cBase := exit.NewBitCast(pc, i8p)
	c01 := exit.NewGetElementPtr(types.I8, cBase, i64c(64))
	c10 := exit.NewGetElementPtr(types.I8, cBase, exit.NewMul(pldc, i64c(16)))
	c11 := exit.NewGetElementPtr(types.I8, c10, i64c(64))
	exit.NewCall(asm("tilestored %tmm0, ($0,$4,1)\n\ttilestored %tmm1, ($1,$4,1)\n\t"+
		"tilestored %tmm2, ($2,$4,1)\n\ttilestored %tmm3, ($3,$4,1)\n\ttilerelease",
		"r,r,r,r,r,", i8p, i8p, i8p, i8p, types.I64), cBase, c01, c10, c11, pldc)
	exit.NewRet(nil)
	return f
}
