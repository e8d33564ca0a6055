package ir

// Expr is a side-effect-free kernel-IR expression. Every Expr has a static
// Type.
type Expr interface {
	Type() Type
	isExpr()
}

// Const is a literal. Integers and bools live in Int (bool: 0 or 1), floats in
// Float.
type Const struct {
	T     Type
	Int   int64
	Float float64
}

// Ref reads a parameter, loop variable, let or var by name.
type Ref struct {
	Name string
	T    Type
}

// BinOp is a binary operator.
type BinOp uint8

const (
	Add BinOp = iota
	Sub
	Mul
	Div // integer division truncates toward zero
	Rem
	// Min and Max on floats propagate NaN: when either operand is NaN the
	// result is NaN (IEEE 754-2019 minimum/maximum, not C's fminf/fmaxf,
	// which drop it), so a NaN score reaches a reduce's result on every
	// backend. Otherwise Min is x < y ? x : y and Max is x > y ? x : y.
	Min
	Max
	Shl
	Shr // arithmetic
	And // logical on bool, bitwise on ints
	Or
	Xor
	Lt
	Le
	Gt
	Ge
	Eq
	Ne
)

var binOpNames = [...]string{"+", "-", "*", "/", "%", "min", "max", "<<", ">>", "&", "|", "^", "<", "<=", ">", ">=", "==", "!="}

func (o BinOp) String() string { return binOpNames[o] }

// IsCompare reports whether o yields a Bool.
func (o BinOp) IsCompare() bool { return o >= Lt }

// IsCall reports whether o prints as a call (min, max) rather than infix.
func (o BinOp) IsCall() bool { return o == Min || o == Max }

// Binary is X op Y; both operands have the same type.
type Binary struct {
	Op   BinOp
	X, Y Expr
}

// UnOp is a unary operator or math function.
type UnOp uint8

const (
	Neg UnOp = iota
	Not
	Exp
	Log
	Tanh
	Sqrt
	Abs
	Floor
	Exp2
	Sin
	Cos
)

var unOpNames = [...]string{"neg", "not", "exp", "log", "tanh", "sqrt", "abs", "floor", "exp2", "sin", "cos"}

func (o UnOp) String() string { return unOpNames[o] }

// Unary is op(X).
type Unary struct {
	Op UnOp
	X  Expr
}

// Select is Cond ? X : Y.
type Select struct {
	Cond, X, Y Expr
}

// Convert is a value-preserving numeric conversion of X to To (float<->int
// truncates toward zero; int widening sign-extends, except u8 which zero-extends).
type Convert struct {
	To Type
	X  Expr
}

// Bitcast reinterprets X's bits as To (same width; a vector's lane count
// may change, see vector.go).
type Bitcast struct {
	To Type
	X  Expr
}

// Load reads element Index (in elements, i64 or i32) of buffer or local array
// Buf whose element type is T.
type Load struct {
	Buf   string
	Index Expr
	T     Type
}

// Call is a high-level function that a legalization pass expands before
// codegen (softcap, alibi_slope, ...). Backends reject any Call they do not
// know.
type Call struct {
	Fn   string
	Args []Expr
	T    Type
}

// Shuffle reads X from the lane whose index is this lane's XOR Mask within
// the warp (GPU butterfly shuffle). Every lane of the warp must execute it.
type Shuffle struct {
	X    Expr
	Mask int
}

func (s *Shuffle) Type() Type { return s.X.Type() }
func (*Shuffle) isExpr()      {}

// NotNull is true when the buffer parameter Buf was passed as a non-NULL
// pointer (for optional outputs such as lse).
type NotNull struct {
	Buf string
}

func (*NotNull) Type() Type { return Bool }
func (*NotNull) isExpr()    {}

func (c *Const) Type() Type   { return c.T }
func (r *Ref) Type() Type     { return r.T }
func (s *Select) Type() Type  { return s.X.Type() }
func (c *Convert) Type() Type { return c.To }
func (b *Bitcast) Type() Type { return b.To }
func (l *Load) Type() Type    { return l.T }
func (c *Call) Type() Type    { return c.T }
func (u *Unary) Type() Type {
	t := u.X.Type() // once: calling it twice per level is exponential in depth
	if u.Op == Not && t.Elem() == Bool {
		return t
	}
	return t
}
func (b *Binary) Type() Type {
	if b.X == nil {
		if b.Op.IsCompare() {
			return Bool
		}
		return Void
	}
	t := b.X.Type()
	if b.Op.IsCompare() {
		return Vec(Bool, t.Lanes())
	}
	return t
}

func (*Const) isExpr()   {}
func (*Ref) isExpr()     {}
func (*Binary) isExpr()  {}
func (*Unary) isExpr()   {}
func (*Select) isExpr()  {}
func (*Convert) isExpr() {}
func (*Bitcast) isExpr() {}
func (*Load) isExpr()    {}
func (*Call) isExpr()    {}

// Int returns an i32 constant.
func Int(v int64) *Const { return &Const{T: I32, Int: v} }

// IntT returns an integer constant of type t.
func IntT(t Type, v int64) *Const { return &Const{T: t, Int: v} }

// Float returns an f32 constant.
func Float(v float64) *Const { return &Const{T: F32, Float: v} }

// BoolConst returns a bool constant.
func BoolConst(b bool) *Const {
	if b {
		return &Const{T: Bool, Int: 1}
	}
	return &Const{T: Bool}
}

// R is a Ref constructor.
func R(name string, t Type) *Ref { return &Ref{Name: name, T: t} }

// Bin is a Binary constructor.
func Bin(op BinOp, x, y Expr) *Binary { return &Binary{Op: op, X: x, Y: y} }

// Un is a Unary constructor.
func Un(op UnOp, x Expr) *Unary { return &Unary{Op: op, X: x} }

// Sel is a Select constructor.
func Sel(c, x, y Expr) *Select { return &Select{Cond: c, X: x, Y: y} }

// Cvt is a Convert constructor that returns x itself when it already has type t.
func Cvt(t Type, x Expr) Expr {
	if x.Type() == t {
		return x
	}
	return &Convert{To: t, X: x}
}

// Ld is a Load constructor.
func Ld(buf string, t Type, idx Expr) *Load { return &Load{Buf: buf, Index: idx, T: t} }

// IsConst reports whether e is a constant and returns it.
func IsConst(e Expr) (*Const, bool) { c, ok := e.(*Const); return c, ok }

// IsTrue reports whether e is the constant true.
func IsTrue(e Expr) bool { c, ok := e.(*Const); return ok && c.T == Bool && c.Int != 0 }

// IsFalse reports whether e is the constant false.
func IsFalse(e Expr) bool { c, ok := e.(*Const); return ok && c.T == Bool && c.Int == 0 }

// Guarded is X when Cond holds and the zero of X's type otherwise; X is
// not evaluated (its loads touch no memory) unless Cond holds. It is how
// a kernel reads a `param` tensor: Cond is the bounds check of the index,
// X the load.
type Guarded struct {
	Cond, X Expr
}

func (g *Guarded) Type() Type { return g.X.Type() }
func (*Guarded) isExpr()      {}

// ParamRead is `NAME[e1, e2, ...]` in a spec's mask or score expression:
// a read of the `param` tensor NAME at one integer index per dimension,
// 0 outside the declared shape. It lives only in ir.Variant expressions;
// lowering turns it into a Guarded load with the index in i64.
type ParamRead struct {
	Name  string
	Index []Expr
	T     Type
}

func (p *ParamRead) Type() Type { return p.T }
func (*ParamRead) isExpr()      {}
