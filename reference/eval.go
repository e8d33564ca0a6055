package reference

import (
	"fmt"
	"math"

	"github.com/attnc/attnc/ir"
)

// Env binds the variables that score and mask expressions may read. Score is
// the scaled score; Head is the qo head.
type Env struct {
	Score                    float64
	QPos, KVPos, Head, Batch int64
	QOHeads                  int // for alibi_slope(h) with one argument
	// Params are the param tensors a ParamRead reads, by name; nil reads
	// every param as an empty tensor (0 at every index).
	Params map[string]*ParamValue
}

// ParamValue is a param tensor: its shape and its row-major values (i32
// values exactly as floats).
type ParamValue struct {
	Dims []int64
	Data []float64
	// At, when set, gives the value at a flat index instead of Data (a
	// tensor too large to hold, of which a test writes only what is read).
	At func(flat int64) float64
}

// read is the element at idx, 0 when an index lies outside the shape.
func (p *ParamValue) read(idx []int64) float64 {
	if len(idx) != len(p.Dims) {
		panic(fmt.Sprintf("reference: param of %d dims read with %d indices", len(p.Dims), len(idx)))
	}
	flat := int64(0)
	for k, i := range idx {
		if i < 0 || i >= p.Dims[k] {
			return 0
		}
		flat = flat*p.Dims[k] + i
	}
	if p.At != nil {
		return p.At(flat)
	}
	return p.Data[flat]
}

// value is an evaluated expression: floats in F, ints and bools in I.
type value struct {
	I int64
	F float64
}

// EvalFloat evaluates a float expression in float64.
func EvalFloat(e ir.Expr, env *Env) float64 {
	if !e.Type().IsFloat() {
		panic(fmt.Sprintf("reference: EvalFloat of a %s expression", e.Type()))
	}
	return eval(e, env).F
}

// EvalBool evaluates a bool expression.
func EvalBool(e ir.Expr, env *Env) bool {
	if e.Type() != ir.Bool {
		panic(fmt.Sprintf("reference: EvalBool of a %s expression", e.Type()))
	}
	return eval(e, env).I != 0
}

// EvalInt evaluates an integer expression.
func EvalInt(e ir.Expr, env *Env) int64 {
	if !e.Type().IsInt() && e.Type() != ir.Bool {
		panic(fmt.Sprintf("reference: EvalInt of a %s expression", e.Type()))
	}
	return eval(e, env).I
}

// wrap truncates x to integer type t as two's complement (u8 zero-extends).
func wrap(t ir.Type, x int64) int64 {
	switch t {
	case ir.Bool:
		if x != 0 {
			return 1
		}
		return 0
	case ir.U8:
		return int64(uint8(x))
	case ir.I16:
		return int64(int16(x))
	case ir.I32:
		return int64(int32(x))
	}
	return x
}

// roundTo is x stored as float type t.
func roundTo(t ir.Type, x float64) float64 {
	switch t {
	case ir.F32:
		return float64(float32(x))
	case ir.F16:
		return float64(Round(ir.DTF16, float32(x)))
	case ir.BF16:
		return float64(Round(ir.DTBF16, float32(x)))
	}
	return x
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func eval(e ir.Expr, env *Env) value {
	switch e := e.(type) {
	case *ir.Const:
		if e.T.IsFloat() {
			return value{F: e.Float}
		}
		return value{I: e.Int}
	case *ir.Ref:
		switch e.Name {
		case "score":
			return value{F: env.Score}
		case "q_pos":
			return value{I: env.QPos}
		case "kv_pos":
			return value{I: env.KVPos}
		case "head":
			return value{I: env.Head}
		case "batch":
			return value{I: env.Batch}
		}
		panic(fmt.Sprintf("reference: unknown variable %q", e.Name))
	case *ir.Binary:
		return evalBinary(e, env)
	case *ir.Unary:
		return evalUnary(e, env)
	case *ir.Select:
		if eval(e.Cond, env).I != 0 {
			return eval(e.X, env)
		}
		return eval(e.Y, env)
	case *ir.Convert:
		x := eval(e.X, env)
		from := e.X.Type()
		switch {
		case from.IsFloat() && e.To.IsFloat():
			return value{F: roundTo(e.To, x.F)}
		case from.IsFloat() && e.To == ir.Bool:
			return value{I: b2i(x.F != 0)}
		case from.IsFloat():
			return value{I: wrap(e.To, int64(math.Trunc(x.F)))}
		case e.To.IsFloat():
			return value{F: roundTo(e.To, float64(x.I))}
		}
		return value{I: wrap(e.To, x.I)}
	case *ir.Bitcast:
		x := eval(e.X, env)
		switch {
		case e.X.Type() == ir.F32 && e.To == ir.I32:
			return value{I: int64(int32(math.Float32bits(float32(x.F))))}
		case e.X.Type() == ir.I32 && e.To == ir.F32:
			return value{F: float64(math.Float32frombits(uint32(x.I)))}
		case e.X.Type() == ir.F64 && e.To == ir.I64:
			return value{I: int64(math.Float64bits(x.F))}
		case e.X.Type() == ir.I64 && e.To == ir.F64:
			return value{F: math.Float64frombits(uint64(x.I))}
		case e.X.Type() == ir.F16 && e.To == ir.I16:
			return value{I: int64(int16(F16Bits(float32(x.F))))}
		case e.X.Type() == ir.BF16 && e.To == ir.I16:
			return value{I: int64(int16(BF16Bits(float32(x.F))))}
		case e.X.Type() == ir.I16 && e.To == ir.F16:
			return value{F: float64(F16Float(uint16(x.I)))}
		case e.X.Type() == ir.I16 && e.To == ir.BF16:
			return value{F: float64(BF16Float(uint16(x.I)))}
		}
		panic(fmt.Sprintf("reference: bitcast %s to %s", e.X.Type(), e.To))
	case *ir.Call:
		return evalCall(e, env)
	case *ir.ParamRead:
		if env.Params == nil {
			// No case (Visible): every param is an empty tensor.
			return value{}
		}
		p := env.Params[e.Name]
		if p == nil {
			panic("reference: param " + e.Name + " has no value")
		}
		idx := make([]int64, len(e.Index))
		for k, a := range e.Index {
			idx[k] = eval(a, env).I
		}
		x := p.read(idx)
		if e.T.IsFloat() {
			return value{F: x}
		}
		return value{I: int64(x)}
	case *ir.Load:
		panic("reference: load from " + e.Buf + " not supported by reference")
	}
	panic(fmt.Sprintf("reference: unknown expression %T", e))
}

func evalBinary(e *ir.Binary, env *Env) value {
	x, y := eval(e.X, env), eval(e.Y, env)
	t := e.X.Type()
	if t.IsFloat() {
		a, b := x.F, y.F
		switch e.Op {
		case ir.Add:
			return value{F: a + b}
		case ir.Sub:
			return value{F: a - b}
		case ir.Mul:
			return value{F: a * b}
		case ir.Div:
			return value{F: a / b}
		case ir.Rem:
			return value{F: math.Mod(a, b)}
		case ir.Min:
			return value{F: NaNMin(a, b)}
		case ir.Max:
			return value{F: NaNMax(a, b)}
		}
		if e.Op.IsCompare() {
			return value{I: b2i(compare(e.Op, a, b))}
		}
		panic(fmt.Sprintf("reference: %s on %s", e.Op, t))
	}
	a, b := x.I, y.I
	var r int64
	switch e.Op {
	case ir.Add:
		r = a + b
	case ir.Sub:
		r = a - b
	case ir.Mul:
		r = a * b
	case ir.Div:
		r = ir.IntDiv(a, b) // truncates toward zero; by zero gives 0 (DESIGN §3)
	case ir.Rem:
		r = ir.IntRem(a, b)
	case ir.Min:
		r = min(a, b)
	case ir.Max:
		r = max(a, b)
	case ir.Shl:
		r = a << uint64(b)
	case ir.Shr:
		r = a >> uint64(b)
	case ir.And:
		r = a & b
	case ir.Or:
		r = a | b
	case ir.Xor:
		r = a ^ b
	default:
		if e.Op.IsCompare() {
			return value{I: b2i(compare(e.Op, a, b))}
		}
	}
	return value{I: wrap(t, r)}
}

// compare applies comparison op (false on NaN except for !=).
func compare[T int64 | float64](op ir.BinOp, a, b T) bool {
	switch op {
	case ir.Lt:
		return a < b
	case ir.Le:
		return a <= b
	case ir.Gt:
		return a > b
	case ir.Ge:
		return a >= b
	case ir.Eq:
		return a == b
	}
	return a != b
}

func evalUnary(e *ir.Unary, env *Env) value {
	x := eval(e.X, env)
	t := e.X.Type()
	if !t.IsFloat() {
		switch e.Op {
		case ir.Neg:
			return value{I: wrap(t, -x.I)}
		case ir.Not:
			if t == ir.Bool {
				return value{I: 1 - x.I}
			}
			return value{I: wrap(t, ^x.I)}
		case ir.Abs:
			if x.I < 0 {
				return value{I: wrap(t, -x.I)}
			}
			return x
		}
		panic(fmt.Sprintf("reference: %s on %s", e.Op, t))
	}
	f := x.F
	switch e.Op {
	case ir.Neg:
		f = -f
	case ir.Exp:
		f = math.Exp(f)
	case ir.Log:
		f = math.Log(f)
	case ir.Tanh:
		f = math.Tanh(f)
	case ir.Sqrt:
		f = math.Sqrt(f)
	case ir.Abs:
		f = math.Abs(f)
	case ir.Floor:
		f = math.Floor(f)
	case ir.Exp2:
		f = math.Exp2(f)
	case ir.Sin:
		f = math.Sin(f)
	case ir.Cos:
		f = math.Cos(f)
	default:
		panic(fmt.Sprintf("reference: %s on %s", e.Op, t))
	}
	return value{F: f}
}

func evalCall(e *ir.Call, env *Env) value {
	arg := func(i int) float64 {
		v := eval(e.Args[i], env)
		if e.Args[i].Type().IsFloat() {
			return v.F
		}
		return float64(v.I)
	}
	switch e.Fn {
	case "softcap":
		if len(e.Args) == 2 {
			c := arg(1)
			return value{F: c * math.Tanh(arg(0)/c)}
		}
	case "alibi_slope":
		switch len(e.Args) {
		case 1:
			return value{F: AlibiSlope(int(arg(0)), env.QOHeads)}
		case 2:
			return value{F: AlibiSlope(int(arg(0)), int(arg(1)))}
		}
	default:
		panic(fmt.Sprintf("reference: call %s not supported by reference", e.Fn))
	}
	panic(fmt.Sprintf("reference: %s with %d arguments", e.Fn, len(e.Args)))
}

// AlibiSlope is the standard ALiBi slope of head h among n heads: with m the
// largest power of two <= n, heads h < m get 2^(-8(h+1)/m) and the rest
// 2^(-4(2(h-m)+1)/m), the interleaved slopes of the ALiBi paper and the
// Hugging Face implementation.
func AlibiSlope(h, n int) float64 {
	if n <= 0 || h < 0 || h >= n {
		panic(fmt.Sprintf("reference: alibi_slope(%d) of %d heads", h, n))
	}
	m := 1
	for m*2 <= n {
		m *= 2
	}
	if h < m {
		return math.Exp2(-8 * float64(h+1) / float64(m))
	}
	return math.Exp2(-4 * float64(2*(h-m)+1) / float64(m))
}
