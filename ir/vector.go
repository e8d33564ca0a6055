package ir

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"strings"
)

// Vector values, which CPU schedule passes produce and codegen/llvm prints
// one to one (<16 x float>, shufflevector, llvm.fmuladd, llvm.prefetch);
// lowering and the GPU targets never see them.
//
// A vector type is a scalar element type with a power-of-two lane count
// from 2 to 64, written ELEMxN (f32x16, i32x8, i16x16, boolx4). On
// vectors:
//   - a constant of vector type is that value in every lane;
//   - Binary, Unary, Select and Bitcast work lane by lane (a Select's
//     condition is a bool, the same for every lane, or a bool vector of the
//     arms' lane count; a compare yields a bool vector); a Bitcast that
//     changes the lane count (the same total width, no bool lanes) joins
//     its operand's lanes' bits, lane 0 lowest, and cuts them into the
//     result's lanes (LLVM's bitcast on a little-endian target: two
//     adjacent bf16 elements read as one i32);
//   - Convert of a vector converts each lane (same lane count); Convert of
//     a scalar to a vector type converts it to the element type and
//     broadcasts it;
//   - a Load of vector type T reads T.Lanes() consecutive elements from
//     Index on; a Store of a vector value writes them;
//   - MulAdd is x*y+z, VShuffle picks lanes of two vectors, Prefetch hints
//     that an element will be read soon, DotBF16 adds the products of bf16
//     pairs (AVX512-BF16's vdpbf16ps).

// laneShift is where a vector type keeps log2 of its lane count.
const laneShift = 4

// MaxLanes is the most lanes a vector type has.
const MaxLanes = 64

// Vec is the vector type of n lanes of scalar t; Vec(t, 1) is t. It panics
// on a lane count that is not a power of two in 1..MaxLanes or on a vector
// element.
func Vec(t Type, n int) Type {
	if n == 1 {
		return t
	}
	if n < 2 || n > MaxLanes || n&(n-1) != 0 || t.IsVector() || t == Void {
		panic(fmt.Sprintf("BUG: ir.Vec(%s, %d): want a scalar type and a power-of-two lane count up to %d", t, n, MaxLanes))
	}
	return t | Type(bits.TrailingZeros(uint(n)))<<laneShift
}

// Lanes is the lane count of a vector type, 1 for a scalar.
func (t Type) Lanes() int { return 1 << (t >> laneShift) }

// Elem is the element type of a vector type, t itself for a scalar.
func (t Type) Elem() Type { return t & (1<<laneShift - 1) }

// IsVector reports whether t is a vector type.
func (t Type) IsVector() bool { return t>>laneShift != 0 }

// vectorTypeByName parses ELEMxN.
func vectorTypeByName(s string) (Type, bool) {
	i := strings.LastIndexByte(s, 'x')
	if i <= 0 {
		return Void, false
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 2 || n > MaxLanes || n&(n-1) != 0 || strconv.Itoa(n) != s[i+1:] {
		return Void, false
	}
	for e, name := range typeNames {
		if name == s[:i] && Type(e) != Void {
			return Vec(Type(e), n), true
		}
	}
	return Void, false
}

// MulAdd is X*Y+Z on floats (scalars or vectors of one type), with or
// without a rounding of the product: the target chooses (llvm.fmuladd).
// The interpreter rounds the product.
type MulAdd struct {
	X, Y, Z Expr
}

func (m *MulAdd) Type() Type { return m.X.Type() }
func (*MulAdd) isExpr()      {}

// VShuffle builds a vector from lanes of X and Y (two vectors of one
// type): lane i of the result is lane Mask[i] of X followed by Y (0 ..
// 2n-1 for n-lane operands). A mask of one lane yields a scalar. It prints
// as shuffle(x, y, [0, 1, 16, 17]).
type VShuffle struct {
	X, Y Expr
	Mask []int
}

func (s *VShuffle) Type() Type { return Vec(s.X.Type().Elem(), len(s.Mask)) }
func (*VShuffle) isExpr()      {}

// DotBF16 is Z plus the dot products of bf16 pairs: X and Y are i32
// vectors whose lanes each hold two bf16 values (the element at the lower
// address in the low 16 bits, as two adjacent bf16 elements read as one
// i32), Z an f32 vector of the same lane count. Lane i of the result is
// (Z[i] + xh·yh) + xl·yl, each product exact in f32 (bf16 × bf16 has 16
// significant bits), each addition rounded to nearest even; bf16 inputs
// below the smallest normal are read as zero and a result below it is
// flushed to zero (DAZ and FTZ, whatever the floating-point environment
// says). It is AVX512-BF16's vdpbf16ps; only a schedule for a CPU level
// that has it writes one.
type DotBF16 struct {
	X, Y, Z Expr
}

func (d *DotBF16) Type() Type { return d.Z.Type() }
func (*DotBF16) isExpr()      {}

// Prefetch hints that element Index of buffer Buf will be read soon (a
// software prefetch into the data cache); it reads nothing and never
// faults. Index must still address an element of the buffer. L1 asks for
// the line in the first-level cache (a line read within the next few
// hundred instructions, which a prefetch into L2 already brought near);
// without it the prefetch fills L2 and the levels beyond.
type Prefetch struct {
	Buf   string
	Index Expr
	L1    bool
}

func (*Prefetch) isStmt() {}

// Splat broadcasts scalar x to n lanes (x itself when n is 1).
func Splat(x Expr, n int) Expr {
	if n == 1 {
		return x
	}
	t := Vec(x.Type(), n)
	if c, ok := x.(*Const); ok {
		return &Const{T: t, Int: c.Int, Float: c.Float}
	}
	return &Convert{To: t, X: x}
}

// dotBF16Lane is one lane of DotBF16: ((z + xh·yh) + xl·yl), each
// product exact (bf16 × bf16 has 16 significant bits; its exponent range
// is twice f32's, so a product neither overflows nor underflows before it
// is added), each sum rounded to f32 once, bf16 and z denormal inputs read
// as zeros of their sign, a denormal sum flushed to a zero of its sign.
func dotBF16Lane(x, y uint32, z float32) float32 {
	daz := func(v float32) float32 {
		if v != 0 && math.Abs(float64(v)) < 0x1p-126 {
			return math.Float32frombits(math.Float32bits(v) & 0x80000000)
		}
		return v
	}
	bf := func(h uint32) float64 { return float64(daz(math.Float32frombits(h << 16))) }
	t := daz(z)
	for _, sh := range []uint32{16, 0} {
		p := bf(x>>sh&0xFFFF) * bf(y>>sh&0xFFFF) // exact in float64
		t = daz(roundSum32(t, p))
	}
	return t
}

// roundSum32 is f32 t plus float64 p (a bf16 product, exact) rounded once
// to f32 (nearest even; NaN for inf - inf).
func roundSum32(t float32, p float64) float32 {
	a := float64(t)
	if math.IsInf(a, 0) || math.IsInf(p, 0) || math.IsNaN(a) || math.IsNaN(p) || a == 0 || p == 0 {
		return float32(a + p) // exact in float64 before its one rounding
	}
	var s big.Float
	s.SetPrec(600).SetMode(big.ToNearestEven)
	s.Add(new(big.Float).SetPrec(600).SetFloat64(a), new(big.Float).SetPrec(600).SetFloat64(p))
	if s.Sign() == 0 {
		return 0 // x + (-x) is +0 in nearest even
	}
	f, _ := s.Float32()
	return f
}

// vectorRule checks the typing rules of nodes that involve vectors and
// returns a description of the violation, or "" (nodeRule runs it first).
func vectorRule(e Expr) string {
	switch e := e.(type) {
	case *Const:
		if e.T.IsVector() && e.T.Elem() == Bool {
			return "bool vector constants are not supported"
		}
	case *Select:
		c, x := e.Cond.Type(), e.X.Type()
		if c != Bool && c != Vec(Bool, x.Lanes()) {
			return fmt.Sprintf("select condition is %s, want bool or boolx%d", c, x.Lanes())
		}
	case *Convert:
		if e.X.Type().IsVector() && e.X.Type().Lanes() != e.To.Lanes() {
			return fmt.Sprintf("convert from %s to %s changes the lane count", e.X.Type(), e.To)
		}
	case *Bitcast:
		if x := e.X.Type(); x.Lanes() != e.To.Lanes() && (x.Elem() == Bool || e.To.Elem() == Bool) {
			return fmt.Sprintf("bitcast from %s to %s changes the lane count of bool lanes", x, e.To)
		}
	case *MulAdd:
		if e.X == nil || e.Y == nil || e.Z == nil {
			return "muladd: missing operand"
		}
		t := e.X.Type()
		if e.Y.Type() != t || e.Z.Type() != t || !t.IsFloat() {
			return fmt.Sprintf("muladd of %s, %s, %s: want one float type", t, e.Y.Type(), e.Z.Type())
		}
	case *DotBF16:
		if e.X == nil || e.Y == nil || e.Z == nil {
			return "dotbf16: missing operand"
		}
		x, y, z := e.X.Type(), e.Y.Type(), e.Z.Type()
		if !z.IsVector() || z.Elem() != F32 || x != Vec(I32, z.Lanes()) || y != x {
			return fmt.Sprintf("dotbf16 of %s, %s, %s: want two i32xN (bf16 pairs) and an f32xN", x, y, z)
		}
	case *VShuffle:
		if e.X == nil || e.Y == nil {
			return "shuffle: missing operand"
		}
		t := e.X.Type()
		if !t.IsVector() || e.Y.Type() != t {
			return fmt.Sprintf("shuffle of %s and %s: want two vectors of one type", t, e.Y.Type())
		}
		n := len(e.Mask)
		if n < 1 || n > MaxLanes || n&(n-1) != 0 {
			return fmt.Sprintf("shuffle mask of %d lanes: want a power of two up to %d", n, MaxLanes)
		}
		for _, i := range e.Mask {
			if i < 0 || i >= 2*t.Lanes() {
				return fmt.Sprintf("shuffle mask lane %d outside 0..%d", i, 2*t.Lanes()-1)
			}
		}
	}
	return ""
}

// ---- interpreter ----

// evalVec evaluates e lane by lane (one lane for a scalar).
func (f *frame) evalVec(e Expr) []val {
	t := e.Type()
	n := t.Lanes()
	switch e := e.(type) {
	case *MulAdd:
		x, y, z := f.evalVec(e.X), f.evalVec(e.Y), f.evalVec(e.Z)
		et := t.Elem()
		out := make([]val, n)
		for i := range out {
			out[i] = f.binary(Add, et, f.binary(Mul, et, x[i], y[i]), z[i])
		}
		return out
	case *DotBF16:
		x, y, z := f.evalVec(e.X), f.evalVec(e.Y), f.evalVec(e.Z)
		out := make([]val, n)
		for i := range out {
			out[i] = val(math.Float32bits(dotBF16Lane(uint32(x[i]), uint32(y[i]), math.Float32frombits(uint32(z[i])))))
		}
		return out
	case *Bitcast:
		if from := e.X.Type(); from.Lanes() != n {
			return f.regroup(f.evalVec(e.X), from.Elem(), t.Elem(), n)
		}
	case *VShuffle:
		x, y := f.evalVec(e.X), f.evalVec(e.Y)
		both := append(append([]val(nil), x...), y...)
		out := make([]val, n)
		for i, k := range e.Mask {
			out[i] = both[k]
		}
		return out
	}
	if n == 1 {
		return []val{f.eval(e)}
	}
	et := t.Elem()
	lanes := func(fn func(i int) val) []val {
		out := make([]val, n)
		for i := range out {
			out[i] = fn(i)
		}
		return out
	}
	switch e := e.(type) {
	case *Const:
		v := f.eval(&Const{T: et, Int: e.Int, Float: e.Float})
		return lanes(func(int) val { return v })
	case *Ref:
		b := f.lookup(e.Name)
		if b.vec == nil {
			f.fail("%s is not a vector", e.Name)
		}
		return b.vec
	case *Binary:
		xt := e.X.Type().Elem()
		x, y := f.evalVec(e.X), f.evalVec(e.Y)
		return lanes(func(i int) val { return f.binary(e.Op, xt, x[i], y[i]) })
	case *Unary:
		x := f.evalVec(e.X)
		return lanes(func(i int) val { return f.unary(e.Op, et, x[i]) })
	case *Select:
		c, x, y := f.evalVec(e.Cond), f.evalVec(e.X), f.evalVec(e.Y)
		return lanes(func(i int) val {
			if c[min(i, len(c)-1)] != 0 {
				return x[i]
			}
			return y[i]
		})
	case *Convert:
		from := e.X.Type().Elem()
		x := f.evalVec(e.X)
		return lanes(func(i int) val { return f.convert(et, from, x[min(i, len(x)-1)]) })
	case *Bitcast:
		x := f.evalVec(e.X)
		return lanes(func(i int) val { return f.bitcast(et, x[i]) })
	case *Load:
		b := f.buffer(e.Buf)
		at := f.index(e.Index)
		return lanes(func(i int) val { return f.load(b, at+int64(i), et) })
	}
	f.fail("expression %T cannot be a vector", e)
	return nil
}

// regroup is a Bitcast that changes the lane count: the bits of lanes x
// (of scalar type from) joined, lane 0 lowest, and cut into n lanes of
// scalar type to.
func (f *frame) regroup(x []val, from, to Type, n int) []val {
	fb, tb := from.Bits()/8, to.Bits()/8 // no bool lanes: whole bytes
	bytes := make([]byte, 0, fb*len(x))
	for _, v := range x {
		for b := range fb {
			bytes = append(bytes, byte(uint64(v)>>(8*b)))
		}
	}
	out := make([]val, n)
	for j := range out {
		var bits uint64
		for b := range tb {
			bits |= uint64(bytes[j*tb+b]) << (8 * b)
		}
		out[j] = f.bitcast(to, val(bits))
	}
	return out
}

// bitcast reinterprets canonical a's bits as scalar type to.
func (f *frame) bitcast(to Type, a val) val {
	bits := uint64(a)
	if w := to.Bits(); w < 64 {
		bits &= 1<<w - 1
	}
	if to.IsFloat() {
		return val(bits)
	}
	return wrap(to, int64(bits))
}

// Lanewise applies scalar expression builder f to x lane by lane: f of a
// scalar x, or, for a vector x of n lanes, f built on one lane with its
// constants, conversions and bitcasts widened to n lanes (every other
// node works lane by lane already). The dtype table's conversions are
// written for scalars; Lanewise gives their vector form.
func Lanewise(f func(Expr) Expr, x Expr) Expr {
	n := x.Type().Lanes()
	if n == 1 {
		return f(x)
	}
	const lane = "lanewise·x"
	return MapExpr(f(R(lane, x.Type().Elem())), func(e Expr) Expr {
		switch e := e.(type) {
		case *Ref:
			if e.Name == lane {
				return x
			}
		case *Const:
			if !e.T.IsVector() {
				return &Const{T: Vec(e.T, n), Int: e.Int, Float: e.Float}
			}
		case *Convert:
			if !e.To.IsVector() {
				return &Convert{To: Vec(e.To, n), X: e.X}
			}
		case *Bitcast:
			if !e.To.IsVector() {
				return &Bitcast{To: Vec(e.To, n), X: e.X}
			}
		}
		return e
	})
}

// IsNegZero is true where x (f32, or a vector of f32) is -0: its bits are
// exactly the sign bit. A zeroskip matmul skips such A elements (see
// MatMul).
func IsNegZero(x Expr) Expr {
	n := x.Type().Lanes()
	return Bin(Eq, &Bitcast{To: Vec(I32, n), X: x}, Splat(Int(math.MinInt32), n))
}

// NegZero is the f32 constant -0: the weight of a hidden position.
func NegZero() *Const { return &Const{T: F32, Float: math.Copysign(0, -1)} }

// AMXBlockStep is one K step of rt.amx_mm32: for each 16×16 quarter of
// the 32×32 f32 block c, TDPBF16PS (Intel SDM) of A's 16 rows × 16 bf16
// pairs and B's 16 pair rows × 16 columns: per element, the even and the
// odd products each accumulate from +0 over the 16 pairs in order (f32
// fused multiply-add), then c += (even + odd); every step reads denormal
// inputs as zero, flushes denormal results to zero and rounds to nearest
// even.
func AMXBlockStep(c *[32][32]float32, a *[32][16]uint32, b *[16][32]uint32) {
	flush := func(x float32) float32 {
		if u := math.Float32bits(x); u&0x7F800000 == 0 {
			return math.Float32frombits(u & 0x80000000)
		}
		return x
	}
	half := func(p uint32, hi bool) float32 {
		if hi {
			p >>= 16
		}
		return flush(math.Float32frombits(p << 16))
	}
	// fma of bf16 values: their product is exact in f32 unless it
	// overflows or is below the normal range, so one f32 addition rounds
	// the sum once (and a product below the normal range changes it only
	// where it would be flushed anyway).
	fma := func(x, y, z float32) float32 { return flush(float32(x*y) + flush(z)) }
	for m := range 32 {
		for n := range 32 {
			even, odd := float32(0), float32(0)
			for k := range 16 {
				even = fma(half(a[m][k], false), half(b[k][n], false), even)
				odd = fma(half(a[m][k], true), half(b[k][n], true), odd)
			}
			c[m][n] = flush(flush(c[m][n]) + flush(flush(even)+flush(odd)))
		}
	}
}
