package llvm

import (
	"github.com/attnc/attnc/ir"
	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/enum"
	"github.com/llir/llvm/ir/types"
	"github.com/llir/llvm/ir/value"
)

// isFloat reports whether t (or a vector's element) is f32 or f64; f16
// appears only as the source of a native widening (see Emit).
func isFloat(t ir.Type) bool { e := t.Elem(); return e == ir.F32 || e == ir.F64 || e == ir.F16 }

// unsigned reports whether integer operations on t are unsigned.
func unsigned(t ir.Type) bool { e := t.Elem(); return e == ir.U8 || e == ir.Bool }

// fastMath are the flags of fadd/fsub/fmul inside vector loops: enough for
// the loop vectorizer to reorder reductions and for FMA contraction, never
// nnan/ninf (the kernels rely on -inf).
var fastMath = []enum.FastMathFlag{enum.FastMathFlagReassoc, enum.FastMathFlagContract}

// expr emits e and returns its value and kernel-IR type.
func (f *fnState) expr(e ir.Expr) (value.Value, ir.Type) {
	switch x := e.(type) {
	case nil:
		f.fail("missing expression")
	case *ir.Const:
		if x.T.IsVector() {
			return f.e.splatConst(x), x.T
		}
		switch {
		case x.T == ir.Bool || x.T.IsInt():
			return intConst(x.T, x.Int), x.T
		case x.T == ir.F32 || x.T == ir.F64:
			return newFloatConst(x.T, x.Float), x.T
		case x.T.IsStorageOnly():
			f.fail("constant %s: type %s must be legalized to %s before LLVM codegen", exprString(x), x.T, ir.StorageOf(x.T).Carrier)
		}
		f.e.valueType(x.T, "constant "+exprString(x))
	case *ir.Ref:
		b := f.mustLookup(x.Name, "reference")
		switch b.kind {
		case bindBuf:
			f.fail("buffer %q used as a value", x.Name)
		case bindVar:
			if x.T != b.t {
				f.fail("reference to %q as %s, declared %s", x.Name, typeName(x.T), b.t)
			}
			return f.cur.NewLoad(f.e.valueType(b.t, x.Name), b.v), b.t
		}
		if x.T != b.t {
			f.fail("reference to %q as %s, declared %s", x.Name, typeName(x.T), b.t)
		}
		return b.v, b.t
	case *ir.NotNull:
		b := f.buffer(x.Buf, "nonnull")
		null := constant.NewNull(b.v.Type().(*types.PointerType))
		return f.cur.NewICmp(enum.IPredNE, b.v, null), ir.Bool
	case *ir.Binary:
		return f.binary(x)
	case *ir.Unary:
		return f.unary(x)
	case *ir.Select:
		c, ct := f.expr(x.Cond)
		if ct.Elem() != ir.Bool {
			f.fail("select condition has type %s in %s", ct, exprString(x))
		}
		a, at := f.expr(x.X)
		b, bt := f.expr(x.Y)
		if at != bt {
			f.fail("select arms have types %s and %s in %s", at, bt, exprString(x))
		}
		return f.cur.NewSelect(c, a, b), at
	case *ir.Convert:
		return f.convert(x)
	case *ir.Bitcast:
		v, t := f.expr(x.X)
		if t == x.To {
			return v, t
		}
		to := f.e.valueType(x.To, "bitcast")
		if t.Bits() != x.To.Bits() || t == ir.Bool || x.To == ir.Bool {
			f.fail("bitcast between %s and %s, which differ in width", t, typeName(x.To))
		}
		if t.IsInt() && x.To.IsInt() && t.Lanes() == x.To.Lanes() {
			return v, x.To
		}
		return f.cur.NewBitCast(v, to), x.To
	case *ir.Load:
		b := f.buffer(x.Buf, "load")
		if x.T.Elem() != b.t {
			f.fail("load of %s from %s, whose elements are %s", typeName(x.T), x.Buf, b.t)
		}
		idx := f.index(x.Index, "load "+x.Buf)
		lt := f.e.valueType(b.t, x.Buf)
		p := f.cur.NewGetElementPtr(lt, b.v, idx)
		p.InBounds = true
		if x.T.IsVector() {
			return f.vectorLoad(p, x.T), x.T
		}
		return f.cur.NewLoad(lt, p), b.t
	case *ir.Guarded:
		return f.guarded(x)
	case *ir.MulAdd:
		return f.mulAdd(x)
	case *ir.VShuffle:
		return f.shuffle(x)
	case *ir.DotBF16:
		return f.dotBF16(x)
	case *ir.Call:
		f.fail("call @%s must be expanded by legalization before LLVM codegen", x.Fn)
	default:
		f.fail("unsupported expression %T", e)
	}
	panic("unreachable")
}

// index emits an element index as i64.
func (f *fnState) index(e ir.Expr, use string) value.Value {
	v, t := f.expr(e)
	if c, ok := v.(*constant.Int); ok && t != ir.Bool && c.X.IsInt64() {
		x := c.X.Int64()
		if t == ir.U8 {
			x = int64(uint8(x))
		}
		return constant.NewInt(types.I64, x)
	}
	switch t {
	case ir.I64:
		return v
	case ir.I32, ir.I16:
		return f.cur.NewSExt(v, types.I64)
	case ir.U8, ir.Bool:
		return f.cur.NewZExt(v, types.I64)
	}
	f.fail("%s: index has type %s, want an integer", use, t)
	return nil
}

// intDivRem emits the IR's integer / or % (ir.IntDiv, ir.IntRem): it
// truncates toward zero, x / 0 = x % 0 = 0, MIN / -1 = MIN and MIN % -1 = 0,
// and never executes a division that traps (LLVM's sdiv by 0 or of MIN by -1
// is undefined behaviour). A constant divisor other than 0 and -1 needs no
// guard.
func (f *fnState) intDivRem(op ir.BinOp, a, b value.Value, t ir.Type) value.Value {
	c := f.cur
	div := func(a, d value.Value) value.Value {
		switch {
		case op == ir.Div && unsigned(t):
			return c.NewUDiv(a, d)
		case op == ir.Div:
			return c.NewSDiv(a, d)
		case unsigned(t):
			return c.NewURem(a, d)
		}
		return c.NewSRem(a, d)
	}
	if k, ok := b.(*constant.Int); ok && k.X.Sign() != 0 && (unsigned(t) || !k.X.IsInt64() || k.X.Int64() != -1) {
		return div(a, b)
	}
	zero, one := intConst(t, 0), intConst(t, 1)
	isZero := c.NewICmp(enum.IPredEQ, b, zero)
	bad := value.Value(isZero)
	var isM1 value.Value
	if !unsigned(t) {
		isM1 = c.NewICmp(enum.IPredEQ, b, intConst(t, -1))
		bad = c.NewOr(isZero, isM1)
	}
	// Dividing by 1 instead is harmless: x % 1 = 0 is already the answer
	// for both guarded cases of %, and / picks its answer below.
	q := div(a, c.NewSelect(bad, one, b))
	if op == ir.Rem {
		return q
	}
	if isM1 != nil {
		q = c.NewSelect(isM1, c.NewSub(zero, a), q)
	}
	return c.NewSelect(isZero, zero, q)
}

func (f *fnState) fmf(flags *[]enum.FastMathFlag, t ir.Type) {
	// Explicit vector code is written in the order it must run (the vector
	// exp's rounding by adding 1.5*2^23 must not be reassociated away).
	if f.fast && !t.IsVector() {
		*flags = append([]enum.FastMathFlag(nil), fastMath...)
	}
}

func (f *fnState) binary(x *ir.Binary) (value.Value, ir.Type) {
	a, t := f.expr(x.X)
	b, bt := f.expr(x.Y)
	if t != bt {
		f.fail("operands of %s have types %s and %s in %s", x.Op, t, bt, exprString(x))
	}
	fl, in, bo := isFloat(t), t.IsInt(), t.Elem() == ir.Bool
	bad := func() {
		f.fail("operator %s is not defined on %s in %s", x.Op, t, exprString(x))
	}
	c := f.cur
	switch x.Op {
	case ir.Add, ir.Sub, ir.Mul:
		switch {
		case fl:
			switch x.Op {
			case ir.Add:
				i := c.NewFAdd(a, b)
				f.fmf(&i.FastMathFlags, t)
				return i, t
			case ir.Sub:
				i := c.NewFSub(a, b)
				f.fmf(&i.FastMathFlags, t)
				return i, t
			default:
				i := c.NewFMul(a, b)
				f.fmf(&i.FastMathFlags, t)
				return i, t
			}
		case in:
			switch x.Op {
			case ir.Add:
				return c.NewAdd(a, b), t
			case ir.Sub:
				return c.NewSub(a, b), t
			default:
				return c.NewMul(a, b), t
			}
		}
	case ir.Div, ir.Rem:
		switch {
		case fl && x.Op == ir.Div:
			return c.NewFDiv(a, b), t
		case fl:
			return c.NewFRem(a, b), t
		case in && !t.IsVector():
			return f.intDivRem(x.Op, a, b, t), t
		}
	case ir.Min, ir.Max:
		if fl || in || bo {
			op := ir.Lt
			if x.Op == ir.Max {
				op = ir.Gt
			}
			r := c.NewSelect(f.compare(op, a, b, t), a, b)
			if fl {
				// NaN propagates (ir.Max): the select already gives a NaN
				// b; a NaN a is kept by a second select.
				return c.NewSelect(c.NewFCmp(enum.FPredUNO, a, a), a, r), t
			}
			return r, t
		}
	case ir.Shl:
		if in {
			return c.NewShl(a, b), t
		}
	case ir.Shr:
		if in && unsigned(t) {
			return c.NewLShr(a, b), t
		}
		if in {
			return c.NewAShr(a, b), t
		}
	case ir.And, ir.Or, ir.Xor:
		if in || bo {
			switch x.Op {
			case ir.And:
				return c.NewAnd(a, b), t
			case ir.Or:
				return c.NewOr(a, b), t
			default:
				return c.NewXor(a, b), t
			}
		}
	case ir.Lt, ir.Le, ir.Gt, ir.Ge, ir.Eq, ir.Ne:
		if fl || in || bo {
			return f.compare(x.Op, a, b, t), ir.Vec(ir.Bool, t.Lanes())
		}
	default:
		f.fail("unknown binary operator %d", x.Op)
	}
	bad()
	return nil, 0
}

var (
	fpreds = map[ir.BinOp]enum.FPred{
		ir.Lt: enum.FPredOLT, ir.Le: enum.FPredOLE, ir.Gt: enum.FPredOGT,
		ir.Ge: enum.FPredOGE, ir.Eq: enum.FPredOEQ, ir.Ne: enum.FPredUNE,
	}
	spreds = map[ir.BinOp]enum.IPred{
		ir.Lt: enum.IPredSLT, ir.Le: enum.IPredSLE, ir.Gt: enum.IPredSGT,
		ir.Ge: enum.IPredSGE, ir.Eq: enum.IPredEQ, ir.Ne: enum.IPredNE,
	}
	upreds = map[ir.BinOp]enum.IPred{
		ir.Lt: enum.IPredULT, ir.Le: enum.IPredULE, ir.Gt: enum.IPredUGT,
		ir.Ge: enum.IPredUGE, ir.Eq: enum.IPredEQ, ir.Ne: enum.IPredNE,
	}
)

// compare emits a comparison: ordered fcmp (une for !=), signed icmp, or
// unsigned icmp for u8 and bool.
func (f *fnState) compare(op ir.BinOp, a, b value.Value, t ir.Type) value.Value {
	switch {
	case isFloat(t):
		return f.cur.NewFCmp(fpreds[op], a, b)
	case unsigned(t):
		return f.cur.NewICmp(upreds[op], a, b)
	}
	return f.cur.NewICmp(spreds[op], a, b)
}

var intrinsics = map[ir.UnOp]string{
	ir.Exp: "exp", ir.Log: "log", ir.Sqrt: "sqrt", ir.Abs: "fabs",
	ir.Floor: "floor", ir.Exp2: "exp2", ir.Sin: "sin", ir.Cos: "cos",
}

func (f *fnState) unary(x *ir.Unary) (value.Value, ir.Type) {
	v, t := f.expr(x.X)
	c := f.cur
	fl, in := isFloat(t), t.IsInt()
	k := func(n int64) value.Value { return f.e.intConstOf(t, n) }
	switch x.Op {
	case ir.Neg:
		if fl {
			return c.NewFNeg(v), t
		}
		if in {
			return c.NewSub(k(0), v), t
		}
	case ir.Not:
		if t.Elem() == ir.Bool {
			return c.NewXor(v, k(1)), t
		}
		if in {
			return c.NewXor(v, k(-1)), t
		}
	case ir.Abs:
		if in {
			if unsigned(t) {
				return v, t
			}
			neg := c.NewICmp(enum.IPredSLT, v, k(0))
			return c.NewSelect(neg, c.NewSub(k(0), v), v), t
		}
		if fl {
			return f.mathCall(x.Op, v, t), t
		}
	case ir.Exp, ir.Log, ir.Tanh, ir.Sqrt, ir.Floor, ir.Exp2, ir.Sin, ir.Cos:
		if fl {
			return f.mathCall(x.Op, v, t), t
		}
	default:
		f.fail("unknown unary operator %d", x.Op)
	}
	f.fail("%s is not defined on %s in %s", x.Op, t, exprString(x))
	return nil, 0
}

// mathCall calls the llvm intrinsic for op, or libm's tanhf/tanh.
func (f *fnState) mathCall(op ir.UnOp, v value.Value, t ir.Type) value.Value {
	lt := f.e.valueType(t, op.String())
	var name string
	if op == ir.Tanh {
		if t.IsVector() {
			f.fail("tanh of a vector (%s) has no LLVM intrinsic", t)
		}
		name = "tanhf"
		if t == ir.F64 {
			name = "tanh"
		}
	} else {
		name = "llvm." + intrinsics[op] + "." + overloadSuffix(lt)
	}
	return f.cur.NewCall(f.e.decl(name, lt, lt), v)
}

func (f *fnState) convert(x *ir.Convert) (value.Value, ir.Type) {
	v, from := f.expr(x.X)
	return f.convertValue(v, from, x.To, exprString(x)), x.To
}

// convertValue converts v of type from to type to (what names the
// expression for messages).
func (f *fnState) convertValue(v value.Value, from, to ir.Type, what string) value.Value {
	if from == to {
		return v
	}
	if to.IsVector() && !from.IsVector() {
		// A broadcast: convert the scalar, then splat it.
		return f.splat(f.convertValue(v, from, to.Elem(), what), to)
	}
	lt := f.e.valueType(to, "conversion "+what)
	c := f.cur
	var r value.Value
	switch {
	case isFloat(from) && isFloat(to):
		if to.Elem().Bits() > from.Elem().Bits() {
			r = c.NewFPExt(v, lt)
		} else {
			r = c.NewFPTrunc(v, lt)
		}
	case isFloat(from) && to.Elem() == ir.Bool:
		r = c.NewFCmp(enum.FPredUNE, v, f.e.zeroOf(from))
	case isFloat(from) && to.Elem() == ir.U8:
		r = c.NewFPToUI(v, lt)
	case isFloat(from) && to.IsInt():
		r = c.NewFPToSI(v, lt)
	case isFloat(to):
		if unsigned(from) {
			r = c.NewUIToFP(v, lt)
		} else {
			r = c.NewSIToFP(v, lt)
		}
	case to.Elem() == ir.Bool:
		r = c.NewICmp(enum.IPredNE, v, f.e.intConstOf(from, 0))
	case from.Bits() < to.Bits():
		if unsigned(from) {
			r = c.NewZExt(v, lt)
		} else {
			r = c.NewSExt(v, lt)
		}
	case from.Bits() > to.Bits():
		r = c.NewTrunc(v, lt)
	default:
		r = v
	}
	return r
}

// guarded emits a guarded load: a branch around the load on the
// condition, and a phi of the loaded value and zero, so that no memory is
// touched when the condition fails (a param read outside its shape).
func (f *fnState) guarded(x *ir.Guarded) (value.Value, ir.Type) {
	c, ct := f.expr(x.Cond)
	if ct != ir.Bool {
		f.fail("guarded condition has type %s in %s", ct, exprString(x))
	}
	t := x.X.Type()
	if t.IsVector() || !(t == ir.F32 || t.IsInt()) {
		f.fail("guarded read of %s in %s: want a scalar f32 or integer", typeName(t), exprString(x))
	}
	from := f.cur
	read, end := f.newBlock("param.read"), f.newBlock("param.end")
	from.NewCondBr(c, read, end)
	f.place(read)
	v, _ := f.expr(x.X)
	last := f.cur
	last.NewBr(end)
	f.place(end)
	var zero value.Value
	if t == ir.F32 {
		zero = newFloatConst(t, 0)
	} else {
		zero = intConst(t, 0)
	}
	return end.NewPhi(lir.NewIncoming(v, last), lir.NewIncoming(zero, from)), t
}
