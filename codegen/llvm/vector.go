package llvm

import (
	"fmt"

	"github.com/attnc/attnc/ir"
	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/types"
	"github.com/llir/llvm/ir/value"
)

// Vector values print one to one: an ELEMxN type is <N x elem>, a vector
// constant a constant vector, a broadcast insertelement + shufflevector,
// a vector load or store one unaligned access of the whole vector, MulAdd
// llvm.fmuladd, VShuffle shufflevector (extractelement for one lane),
// Prefetch llvm.prefetch (read, into L2 and the outer levels: locality 2,
// prefetcht1 on x86-64, PLDL2KEEP on AArch64; an L1 prefetch locality 3,
// prefetcht0, PLDL1KEEP).

// scalarConst is the constant of scalar type t with c's value.
func scalarConst(t ir.Type, c *ir.Const) constant.Constant {
	if isFloat(t) {
		return newFloatConst(t, c.Float)
	}
	return intConst(t, c.Int).(constant.Constant)
}

// splatConst is vector constant c: its value in every lane.
func (e *emitter) splatConst(c *ir.Const) value.Value {
	if c.T.Elem().IsStorageOnly() {
		e.fail("constant %s: %s vectors must be legalized before LLVM codegen", ir.ExprString(c), c.T)
	}
	vt := e.valueType(c.T, "constant").(*types.VectorType)
	el := scalarConst(c.T.Elem(), c)
	elems := make([]constant.Constant, c.T.Lanes())
	for i := range elems {
		elems[i] = el
	}
	return constant.NewVector(vt, elems...)
}

// intConstOf is integer (or bool) n of type t, splat for a vector type.
func (e *emitter) intConstOf(t ir.Type, n int64) value.Value {
	if t.IsVector() {
		return e.splatConst(&ir.Const{T: t, Int: n})
	}
	return intConst(t, n)
}

// zeroOf is the float 0 of type t, splat for a vector type.
func (e *emitter) zeroOf(t ir.Type) value.Value {
	if t.IsVector() {
		return e.splatConst(&ir.Const{T: t})
	}
	return newFloatConst(t, 0)
}

// splat broadcasts scalar v to vector type t.
func (f *fnState) splat(v value.Value, t ir.Type) value.Value {
	vt := f.e.valueType(t, "broadcast").(*types.VectorType)
	one := f.cur.NewInsertElement(constant.NewUndef(vt), v, i32c(0))
	mask := make([]constant.Constant, t.Lanes())
	for i := range mask {
		mask[i] = i32c(0)
	}
	return f.cur.NewShuffleVector(one, constant.NewUndef(vt), constant.NewVector(types.NewVector(uint64(t.Lanes()), types.I32), mask...))
}

// vectorLoad loads a vector of type t from element pointer p (aligned as
// an element).
func (f *fnState) vectorLoad(p value.Value, t ir.Type) value.Value {
	vt := f.e.valueType(t, "vector load")
	vp := f.cur.NewBitCast(p, types.NewPointer(vt))
	ld := f.cur.NewLoad(vt, vp)
	ld.Align = lir.Align(elemBytes(t.Elem()))
	return ld
}

// vectorStore stores vector v of type t at element pointer p.
func (f *fnState) vectorStore(v, p value.Value, t ir.Type) {
	vt := f.e.valueType(t, "vector store")
	vp := f.cur.NewBitCast(p, types.NewPointer(vt))
	st := f.cur.NewStore(v, vp)
	st.Align = lir.Align(elemBytes(t.Elem()))
}

// overloadSuffix is an intrinsic's type suffix: f32, v16f32, v8i32.
func overloadSuffix(t types.Type) string {
	switch t := t.(type) {
	case *types.VectorType:
		return fmt.Sprintf("v%d%s", t.Len, overloadSuffix(t.ElemType))
	case *types.FloatType:
		switch t.Kind {
		case types.FloatKindHalf:
			return "f16"
		case types.FloatKindDouble:
			return "f64"
		}
		return "f32"
	case *types.IntType:
		return fmt.Sprintf("i%d", t.BitSize)
	}
	return t.String()
}

func (f *fnState) mulAdd(x *ir.MulAdd) (value.Value, ir.Type) {
	a, t := f.expr(x.X)
	b, bt := f.expr(x.Y)
	c, ct := f.expr(x.Z)
	if bt != t || ct != t || !isFloat(t) || t.Elem() == ir.F16 {
		f.fail("muladd of %s, %s, %s in %s", t, bt, ct, exprString(x))
	}
	lt := f.e.valueType(t, "muladd")
	fn := f.e.decl("llvm.fmuladd."+overloadSuffix(lt), lt, lt, lt, lt)
	return f.cur.NewCall(fn, a, b, c), t
}

// dotBF16 calls AVX512-BF16's vdpbf16ps for 4, 8 or 16 lanes (LLVM 14
// spells its bf16 pairs as i32 lanes); the function must carry
// "+avx512bf16" (and "+avx512vl" below 16 lanes) in its target-features.
func (f *fnState) dotBF16(x *ir.DotBF16) (value.Value, ir.Type) {
	a, at := f.expr(x.X)
	b, bt := f.expr(x.Y)
	c, ct := f.expr(x.Z)
	n := ct.Lanes()
	bits := map[int]int{4: 128, 8: 256, 16: 512}[n]
	if bits == 0 || ct.Elem() != ir.F32 || at != ir.Vec(ir.I32, n) || bt != at {
		f.fail("dotbf16 of %s, %s, %s in %s: want i32x4/8/16 pairs and f32 of the same lanes", at, bt, ct, exprString(x))
	}
	lt := f.e.valueType(ct, "dotbf16")
	it := f.e.valueType(at, "dotbf16")
	fn := f.e.decl(fmt.Sprintf("llvm.x86.avx512bf16.dpbf16ps.%d", bits), lt, lt, it, it)
	return f.cur.NewCall(fn, c, a, b), ct
}

func (f *fnState) shuffle(x *ir.VShuffle) (value.Value, ir.Type) {
	a, t := f.expr(x.X)
	b, bt := f.expr(x.Y)
	n := t.Lanes()
	if bt != t || !t.IsVector() {
		f.fail("shuffle of %s and %s in %s", t, bt, exprString(x))
	}
	for _, k := range x.Mask {
		if k < 0 || k >= 2*n {
			f.fail("shuffle lane %d outside 0..%d in %s", k, 2*n-1, exprString(x))
		}
	}
	if len(x.Mask) == 1 {
		k := x.Mask[0]
		src := a
		if k >= n {
			src, k = b, k-n
		}
		return f.cur.NewExtractElement(src, i32c(int64(k))), t.Elem()
	}
	mask := make([]constant.Constant, len(x.Mask))
	for i, k := range x.Mask {
		mask[i] = i32c(int64(k))
	}
	rt := ir.Vec(t.Elem(), len(x.Mask))
	return f.cur.NewShuffleVector(a, b, constant.NewVector(types.NewVector(uint64(len(mask)), types.I32), mask...)), rt
}

// prefetch emits llvm.prefetch(element pointer, read, locality 2, data),
// locality 3 for an L1 prefetch (ir.Prefetch.L1: a line a dot block reads
// next, already on its way to L2). Locality 2 fills L2, not L1: the CPU
// kernels prefetch a whole decode or prefill tile ahead (up to 64 KiB of
// K and V rows, more than an L1). On Zen 4 (attnc bench, 2 threads, 8 ×
// 4096 decode from memory) that took 17-25% less time than locality 3
// (prefetcht0) for every prefetch, the tile ahead's included, for f32,
// f16 and bf16 caches and 5-8% less for 8-bit codes; at 1 thread in L2
// and L3 within 3% (f32 in L3 10% less); 2048-token prefill the same.
// Most likely a prefetcht0 holds one of the core's few L1 miss buffers
// until its line arrives, and the lines it brings evict the current
// tile's. Not measured on Zen 5 or Intel's cores.
func (f *fnState) prefetch(s *ir.Prefetch) {
	b := f.buffer(s.Buf, "prefetch")
	idx := f.index(s.Index, "prefetch "+s.Buf)
	p := f.cur.NewGetElementPtr(f.e.valueType(b.t, s.Buf), b.v, idx)
	p.InBounds = true
	fn := f.e.decl("llvm.prefetch.p0i8", types.Void, i8p, types.I32, types.I32, types.I32)
	locality := int64(2)
	if s.L1 {
		locality = 3
	}
	f.cur.NewCall(fn, f.cur.NewBitCast(p, i8p), i32c(0), i32c(locality), i32c(1))
}

func i32c(v int64) *constant.Int { return constant.NewInt(types.I32, v) }
