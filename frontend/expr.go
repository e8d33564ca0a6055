package frontend

import (
	"strings"

	"github.com/alecthomas/participle/v2/lexer"

	"github.com/attnc/attnc/ir"
)

// val is a typed expression; the zero val (e == nil) means an error was
// reported. The checker tracks types itself because ir.Binary.Type walks
// down left operands, which would make long operator chains quadratic.
type val struct {
	e ir.Expr
	t ir.Type
}

// asBool turns an i32 param read into its truth value (!= 0); any other
// value is returned as it is.
func asBool(v val) val {
	if _, ok := v.e.(*ir.ParamRead); ok && v.t == ir.I32 {
		return val{ir.Bin(ir.Ne, v.e, ir.Int(0)), ir.Bool}
	}
	return v
}

// cvt converts v to t unless it already has type t.
func cvt(t ir.Type, v val) val {
	if v.t == t {
		return v
	}
	return val{&ir.Convert{To: t, X: v.e}, t}
}

// scope says which identifiers an expression may use.
type scope struct {
	kind    string   // "mask" or "score", for messages
	names   []string // known identifiers, in message order
	qoHeads int      // for alibi_slope
	params  []*ir.ParamDecl
	ops     int // operators and calls converted so far
}

// MaxExprOps bounds the operators and function calls of one mask or score
// expression. The kernels evaluate the expression in every kernel, at
// every CPU level and in both tile classes, so its size multiplies into the
// output: at this limit a spec of MaxVariants variants still compiles in a
// few seconds into outputs of a few MiB each.
const MaxExprOps = 256

// count records one operator or call at p, and reports the first one past
// MaxExprOps.
func (c *checker) count(s *scope, p lexer.Position) {
	if s.ops++; s.ops == MaxExprOps+1 {
		c.errorf(p, "%s expression has more than %d operators and function calls; the limit is %d", s.kind, MaxExprOps, MaxExprOps)
	}
}

// maskExpr converts a mask expression, which must be a bool.
func (c *checker) maskExpr(e *orExpr, v *ir.Variant) ir.Expr {
	x := c.orE(e, &scope{kind: "mask", names: []string{"q_pos", "kv_pos", "head", "batch"}, params: v.Params})
	x = asBool(x)
	if x.e != nil && x.t != ir.Bool {
		c.errorf(e.Pos, "mask expression must be a bool, got %s", x.t)
		return nil
	}
	return x.e
}

// scoreExpr converts a score expression, which must be a number, to f32. The
// identity (`score score`) gives nil.
func (c *checker) scoreExpr(e *orExpr, v *ir.Variant) ir.Expr {
	x := c.orE(e, &scope{kind: "score", names: []string{"score", "q_pos", "kv_pos", "head", "batch"}, qoHeads: v.QOHeads, params: v.Params})
	if x.e == nil {
		return nil
	}
	if x.t == ir.Bool {
		c.errorf(e.Pos, "score expression must be a number, got bool")
		return nil
	}
	if r, ok := x.e.(*ir.Ref); ok && r.Name == "score" {
		return nil
	}
	return cvt(ir.F32, x).e
}

// binOps maps operator spellings to IR operators.
var binOps = map[string]ir.BinOp{
	"||": ir.Or, "&&": ir.And,
	"==": ir.Eq, "!=": ir.Ne, "<": ir.Lt, "<=": ir.Le, ">": ir.Gt, ">=": ir.Ge,
	"+": ir.Add, "-": ir.Sub, "*": ir.Mul, "/": ir.Div, "%": ir.Rem,
}

// orE converts a || chain; it and the levels below fold their operand lists
// left to right.
func (c *checker) orE(e *orExpr, s *scope) val {
	if e == nil {
		return val{}
	}
	x := c.andE(e.Left, s)
	for _, r := range e.Rest {
		if r == nil {
			return val{}
		}
		c.count(s, r.Pos)
		x = c.binary(r.Pos, r.Op, x, c.andE(r.Right, s))
	}
	return x
}

// andE converts a && chain.
func (c *checker) andE(e *andExpr, s *scope) val {
	if e == nil {
		return val{}
	}
	x := c.cmpE(e.Left, s)
	for _, r := range e.Rest {
		if r == nil {
			return val{}
		}
		c.count(s, r.Pos)
		x = c.binary(r.Pos, r.Op, x, c.cmpE(r.Right, s))
	}
	return x
}

// cmpE converts a comparison chain.
func (c *checker) cmpE(e *cmpExpr, s *scope) val {
	if e == nil {
		return val{}
	}
	x := c.addE(e.Left, s)
	for _, r := range e.Rest {
		if r == nil {
			return val{}
		}
		c.count(s, r.Pos)
		x = c.binary(r.Pos, r.Op, x, c.addE(r.Right, s))
	}
	return x
}

// addE converts a + - chain.
func (c *checker) addE(e *addExpr, s *scope) val {
	if e == nil {
		return val{}
	}
	x := c.mulE(e.Left, s)
	for _, r := range e.Rest {
		if r == nil {
			return val{}
		}
		c.count(s, r.Pos)
		x = c.binary(r.Pos, r.Op, x, c.mulE(r.Right, s))
	}
	return x
}

// mulE converts a * / % chain.
func (c *checker) mulE(e *mulExpr, s *scope) val {
	if e == nil {
		return val{}
	}
	x := c.unaryE(e.Left, s)
	for _, r := range e.Rest {
		if r == nil {
			return val{}
		}
		c.count(s, r.Pos)
		x = c.binary(r.Pos, r.Op, x, c.unaryE(r.Right, s))
	}
	return x
}

// binary types x op y: && and || take bools; == and != take two bools or
// two numbers; the rest take numbers. Mixed int and float operands meet in
// f32.
func (c *checker) binary(p lexer.Position, op string, x, y val) val {
	bop, known := binOps[op]
	if x.e == nil || y.e == nil || !known {
		return val{}
	}
	if bop == ir.And || bop == ir.Or || (bop == ir.Eq || bop == ir.Ne) && (x.t == ir.Bool) != (y.t == ir.Bool) {
		x, y = asBool(x), asBool(y)
	}
	switch {
	case bop == ir.And || bop == ir.Or:
		if x.t != ir.Bool || y.t != ir.Bool {
			c.errorf(p, "operator %s needs bool operands, got %s and %s", op, x.t, y.t)
			return val{}
		}
		return val{ir.Bin(bop, x.e, y.e), ir.Bool}
	case (bop == ir.Eq || bop == ir.Ne) && x.t == ir.Bool && y.t == ir.Bool:
		return val{ir.Bin(bop, x.e, y.e), ir.Bool}
	case x.t == ir.Bool || y.t == ir.Bool:
		c.errorf(p, "operator %s needs numeric operands, got %s and %s", op, x.t, y.t)
		return val{}
	}
	x, y = promote(x, y)
	// Integer / and % by zero give 0 (DESIGN §3), even by a literal 0.
	if bop.IsCompare() {
		return val{ir.Bin(bop, x.e, y.e), ir.Bool}
	}
	return val{ir.Bin(bop, x.e, y.e), x.t}
}

// promote converts the int side of a mixed int/float pair to f32.
func promote(x, y val) (val, val) {
	if x.t != y.t {
		return cvt(ir.F32, x), cvt(ir.F32, y)
	}
	return x, y
}

// unaryE types -x (numbers; literals fold) and !x (bools).
func (c *checker) unaryE(e *unaryExpr, s *scope) val {
	if e == nil {
		return val{}
	}
	if e.Prim != nil {
		return c.primaryE(e.Prim, s)
	}
	if e.X == nil {
		return val{}
	}
	if p := e.X.Prim; e.Op == "-" && p != nil && p.Int != nil {
		// A negative literal: -2147483648 fits although 2147483648 does not.
		if n, ok := c.parseInt(e.Pos, "-"+*p.Int); ok {
			return val{ir.Int(n), ir.I32}
		}
		return val{}
	}
	c.count(s, e.Pos)
	x := c.unaryE(e.X, s)
	if e.Op == "!" {
		x = asBool(x)
	}
	switch {
	case x.e == nil:
	case e.Op == "!" && x.t == ir.Bool:
		return val{ir.Un(ir.Not, x.e), ir.Bool}
	case e.Op == "!":
		c.errorf(e.Pos, "operator ! needs a bool, got %s", x.t)
	case x.t == ir.Bool:
		c.errorf(e.Pos, "operator - needs a number, got bool")
	default:
		if k, ok := ir.IsConst(x.e); ok && x.t == ir.I32 {
			return val{ir.Int(-k.Int), ir.I32}
		} else if ok {
			return val{ir.Float(-k.Float), ir.F32}
		}
		return val{ir.Un(ir.Neg, x.e), x.t}
	}
	return val{}
}

// primaryE types literals, identifiers, calls and parentheses.
func (c *checker) primaryE(p *primary, s *scope) val {
	switch {
	case p.Int != nil:
		if n, ok := c.parseInt(p.Pos, *p.Int); ok {
			return val{ir.Int(n), ir.I32}
		}
	case p.Float != nil:
		if f, ok := c.parseFloat(p.Pos, *p.Float); ok {
			return val{ir.Float(f), ir.F32}
		}
	case p.Name != nil && p.Call != nil:
		c.count(s, p.Pos)
		return c.call(p.Pos, *p.Name, p.Call.Args, s)
	case p.Name != nil && p.Index != nil:
		c.count(s, p.Pos)
		return c.paramRead(p.Pos, *p.Name, p.Index, s)
	case p.Name != nil:
		if pd := findParam(s.params, *p.Name); pd != nil {
			c.errorf(p.Pos, "param %s is a tensor: index it with one integer expression per dimension (%s[%s])", pd.Name, pd.Name, strings.Repeat("i, ", len(pd.Dims)-1)+"i")
			return val{}
		}
		for _, n := range s.names {
			if n == *p.Name {
				if n == "score" {
					return val{ir.R(n, ir.F32), ir.F32}
				}
				return val{ir.R(n, ir.I32), ir.I32}
			}
		}
		c.errorf(p.Pos, "unknown identifier %q in %s expression (known: %s)", *p.Name, s.kind, strings.Join(s.names, ", "))
	case p.Paren != nil:
		return c.orE(p.Paren, s)
	}
	return val{}
}

// findParam returns the param named name, or nil.
func findParam(ps []*ir.ParamDecl, name string) *ir.ParamDecl {
	for _, p := range ps {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// paramRead types NAME[e1, ...]: NAME a declared param, one integer index
// per dimension.
func (c *checker) paramRead(p lexer.Position, name string, ix *indexExprs, s *scope) val {
	pd := findParam(s.params, name)
	if pd == nil && c.badParams[name] {
		return val{} // its param line has an error
	}
	if pd == nil {
		var names []string
		for _, q := range s.params {
			names = append(names, q.Name)
		}
		if len(names) == 0 {
			c.errorf(p, "unknown param %q: declare it with a param line (param %s f32[DIM, ...])", name, name)
		} else {
			c.errorf(p, "unknown param %q (declared: %s)", name, strings.Join(names, ", "))
		}
		return val{}
	}
	if len(ix.Args) != len(pd.Dims) {
		c.errorf(ix.Pos, "param %s has %d dimension%s, indexed with %d", name, len(pd.Dims), plural(len(pd.Dims)), len(ix.Args))
		return val{}
	}
	idx := make([]ir.Expr, len(ix.Args))
	for i, a := range ix.Args {
		if a == nil {
			return val{}
		}
		x := c.orE(a, s)
		if x.e == nil {
			return val{}
		}
		if x.t != ir.I32 {
			c.errorf(a.Pos, "index %d of param %s must be an integer, got %s", i+1, name, x.t)
			return val{}
		}
		idx[i] = x.e
	}
	return val{&ir.ParamRead{Name: name, Index: idx, T: pd.T}, pd.T}
}

// plural is "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// funcs lists the callable functions and their arities, in message order.
var funcs = []struct {
	name  string
	arity int
}{
	{"min", 2}, {"max", 2}, {"abs", 1}, {"tanh", 1}, {"exp", 1}, {"log", 1}, {"sqrt", 1}, {"softcap", 2}, {"alibi_slope", 1},
}

// floatFuncs maps the f32 math functions to their IR operators.
var floatFuncs = map[string]ir.UnOp{"tanh": ir.Tanh, "exp": ir.Exp, "log": ir.Log, "sqrt": ir.Sqrt}

// call types a function call; every argument must be a number.
func (c *checker) call(p lexer.Position, name string, argASTs []*orExpr, s *scope) val {
	arity, known := -1, make([]string, len(funcs))
	for i, f := range funcs {
		known[i] = f.name
		if f.name == name {
			arity = f.arity
		}
	}
	if arity < 0 {
		c.errorf(p, "unknown function %q (known: %s)", name, strings.Join(known, ", "))
		return val{}
	}
	if len(argASTs) != arity {
		plural := "s"
		if arity == 1 {
			plural = ""
		}
		c.errorf(p, "%s takes %d argument%s, got %d", name, arity, plural, len(argASTs))
		return val{}
	}
	args := make([]val, arity)
	for i, a := range argASTs {
		if a == nil {
			return val{}
		}
		if args[i] = c.orE(a, s); args[i].e == nil {
			return val{}
		}
		if args[i].t == ir.Bool {
			c.errorf(a.Pos, "%s needs a number, got bool", name)
			return val{}
		}
	}
	switch name {
	case "min", "max":
		x, y := promote(args[0], args[1])
		if name == "min" {
			return val{ir.Bin(ir.Min, x.e, y.e), x.t}
		}
		return val{ir.Bin(ir.Max, x.e, y.e), x.t}
	case "abs":
		return val{ir.Un(ir.Abs, args[0].e), args[0].t}
	case "softcap":
		if k, ok := ir.IsConst(args[1].e); ok && k.Int <= 0 && k.Float <= 0 {
			c.errorf(argASTs[1].Pos, "softcap cap must be positive")
			return val{}
		}
		return val{&ir.Call{Fn: "softcap", Args: []ir.Expr{cvt(ir.F32, args[0]).e, cvt(ir.F32, args[1]).e}, T: ir.F32}, ir.F32}
	case "alibi_slope":
		if args[0].t != ir.I32 {
			c.errorf(argASTs[0].Pos, "alibi_slope needs an integer head, got %s", args[0].t)
			return val{}
		}
		return val{&ir.Call{Fn: "alibi_slope", Args: []ir.Expr{args[0].e, ir.Int(int64(s.qoHeads))}, T: ir.F32}, ir.F32}
	}
	return val{ir.Un(floatFuncs[name], cvt(ir.F32, args[0]).e), ir.F32}
}
