package passes

import (
	"slices"

	"github.com/attnc/attnc/ir"
)

// Simplify folds integer and boolean constants, applies identities (x+0,
// x*1, x*0 on ints, true&&x, ...), propagates constant lets, resolves ifs
// and selects on constant conditions and drops loops that cannot run.
func Simplify(m *ir.Module) (*ir.Module, error) {
	return mapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		return simplifyBlock(k.Body, map[string]ir.Expr{}), nil
	})
}

// SimplifyExpr folds e.
func SimplifyExpr(e ir.Expr) ir.Expr { return ir.MapExpr(e, fold) }

func simplifyBlock(b *ir.Block, consts map[string]ir.Expr) *ir.Block {
	out := &ir.Block{}
	local := map[string]ir.Expr{}
	for k, v := range consts {
		local[k] = v
	}
	ex := func(e ir.Expr) ir.Expr {
		if len(local) > 0 {
			e = ir.Subst(e, local)
		}
		return SimplifyExpr(e)
	}
	for _, s := range b.Stmts {
		switch x := s.(type) {
		case *ir.Let:
			v := ex(x.Value)
			if _, ok := v.(*ir.Const); ok {
				local[x.Name] = v
				continue
			}
			delete(local, x.Name)
			out.Stmts = append(out.Stmts, &ir.Let{Name: x.Name, Value: v})
		case *ir.Var:
			delete(local, x.Name)
			out.Stmts = append(out.Stmts, &ir.Var{Name: x.Name, Init: ex(x.Init)})
		case *ir.Assign:
			out.Stmts = append(out.Stmts, &ir.Assign{Name: x.Name, Value: ex(x.Value)})
		case *ir.Store:
			out.Stmts = append(out.Stmts, &ir.Store{Buf: x.Buf, Index: ex(x.Index), Value: ex(x.Value)})
		case *ir.Prefetch:
			out.Stmts = append(out.Stmts, &ir.Prefetch{Buf: x.Buf, Index: ex(x.Index), L1: x.L1})
		case *ir.Malloc:
			out.Stmts = append(out.Stmts, &ir.Malloc{Name: x.Name, T: x.T, Size: ex(x.Size)})
		case *ir.Copy:
			c := *x
			c.DstIndex, c.SrcIndex = ex(x.DstIndex), ex(x.SrcIndex)
			out.Stmts = append(out.Stmts, &c)
		case *ir.LdMatrix:
			c := *x
			c.Index = ex(x.Index)
			out.Stmts = append(out.Stmts, &c)
		case *ir.MatMul:
			c := *x
			c.MExt, c.NExt, c.KExt = ex(x.MExt), ex(x.NExt), ex(x.KExt)
			out.Stmts = append(out.Stmts, &c)
		case *ir.Reduce:
			inner := copyMap(local)
			delete(inner, x.Var)
			val := SimplifyExpr(ir.Subst(x.Value, inner))
			delete(local, x.Name)
			out.Stmts = append(out.Stmts, &ir.Reduce{Name: x.Name, Op: x.Op, Var: x.Var, Lo: ex(x.Lo), Hi: ex(x.Hi), Value: val})
		case *ir.Return:
			out.Stmts = append(out.Stmts, &ir.Return{Value: ex(x.Value)})
			return out // the rest of the block is dead
		case *ir.Continue:
			out.Stmts = append(out.Stmts, x)
			return out
		case *ir.CallStmt:
			args := make([]ir.Expr, len(x.Args))
			for i, a := range x.Args {
				args[i] = ex(a)
			}
			if x.Result != "" {
				delete(local, x.Result)
			}
			out.Stmts = append(out.Stmts, &ir.CallStmt{Result: x.Result, Fn: x.Fn, Args: args})
		case *ir.Block:
			nb := simplifyBlock(x, local)
			if len(nb.Stmts) > 0 {
				out.Stmts = append(out.Stmts, nb)
			}
		case *ir.For:
			lo, hi := ex(x.Lo), ex(x.Hi)
			if cl, ok := lo.(*ir.Const); ok {
				if ch, ok := hi.(*ir.Const); ok && ch.Int <= cl.Int {
					continue
				}
			}
			inner := copyMap(local)
			delete(inner, x.Var)
			f := &ir.For{Var: x.Var, Lo: lo, Hi: hi, Kind: x.Kind, Tag: x.Tag, Run: x.Run, Body: simplifyBlock(x.Body, inner)}
			for _, r := range x.Ranges {
				f.Ranges = append(f.Ranges, ir.Range{Var: r.Var, Lo: SimplifyExpr(ir.Subst(r.Lo, inner)), Hi: SimplifyExpr(ir.Subst(r.Hi, inner))})
			}
			f.Next = x.Next.Map(func(e ir.Expr) ir.Expr { return SimplifyExpr(ir.Subst(e, inner)) })
			if f.Next != nil {
				// A name propagated as a constant is gone, and so are its uses.
				f.Next.Subst = slices.DeleteFunc(f.Next.Subst, func(b ir.Rebind) bool { _, gone := inner[b.Name]; return gone })
			}
			out.Stmts = append(out.Stmts, f)
		case *ir.If:
			c := ex(x.Cond)
			if ir.IsTrue(c) || ir.IsFalse(c) {
				br := x.Then
				if ir.IsFalse(c) {
					br = x.Else
				}
				if br != nil {
					nb := simplifyBlock(br, local)
					if len(nb.Stmts) > 0 {
						out.Stmts = append(out.Stmts, nb)
					}
				}
				continue
			}
			then := simplifyBlock(x.Then, local)
			var els *ir.Block
			if x.Else != nil {
				els = simplifyBlock(x.Else, local)
				if len(els.Stmts) == 0 {
					els = nil
				}
			}
			if len(then.Stmts) == 0 && els == nil {
				continue
			}
			out.Stmts = append(out.Stmts, &ir.If{Cond: c, Then: then, Else: els, Tag: x.Tag})
		default:
			out.Stmts = append(out.Stmts, s)
		}
	}
	return out
}

func copyMap(m map[string]ir.Expr) map[string]ir.Expr {
	c := make(map[string]ir.Expr, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// fold simplifies one node whose children are already simplified.
func fold(e ir.Expr) ir.Expr {
	switch x := e.(type) {
	case *ir.Binary:
		return foldBinary(x)
	case *ir.Unary:
		if x.Op == ir.Not {
			if c, ok := x.X.(*ir.Const); ok && c.T == ir.Bool {
				return ir.BoolConst(c.Int == 0)
			}
			if u, ok := x.X.(*ir.Unary); ok && u.Op == ir.Not && u.X.Type() == ir.Bool {
				return u.X
			}
		}
		if x.Op == ir.Neg {
			if c, ok := x.X.(*ir.Const); ok && c.T.IsInt() {
				return ir.IntT(c.T, wrap(c.T, -c.Int))
			}
		}
	case *ir.Select:
		if ir.IsTrue(x.Cond) {
			return x.X
		}
		if ir.IsFalse(x.Cond) {
			return x.Y
		}
	case *ir.Convert:
		if c, ok := x.X.(*ir.Const); ok && c.T.IsInt() && (x.To == ir.I32 || x.To == ir.I64) {
			return ir.IntT(x.To, wrap(x.To, c.Int))
		}
		if c, ok := x.X.(*ir.Const); ok && c.T.IsInt() && x.To == ir.F32 {
			return ir.Float(float64(float32(c.Int)))
		}
	}
	return e
}

func wrap(t ir.Type, v int64) int64 {
	if t == ir.I32 {
		return int64(int32(v))
	}
	return v
}

func foldBinary(x *ir.Binary) ir.Expr {
	cx, okx := x.X.(*ir.Const)
	cy, oky := x.Y.(*ir.Const)
	t := x.X.Type()
	if t == ir.Bool {
		switch x.Op {
		case ir.And:
			if okx {
				if cx.Int != 0 {
					return x.Y
				}
				return ir.BoolConst(false)
			}
			if oky {
				if cy.Int != 0 {
					return x.X
				}
				return ir.BoolConst(false)
			}
		case ir.Or:
			if okx {
				if cx.Int != 0 {
					return ir.BoolConst(true)
				}
				return x.Y
			}
			if oky {
				if cy.Int != 0 {
					return ir.BoolConst(true)
				}
				return x.X
			}
		}
		if okx && oky {
			switch x.Op {
			case ir.Eq:
				return ir.BoolConst(cx.Int == cy.Int)
			case ir.Ne:
				return ir.BoolConst(cx.Int != cy.Int)
			case ir.Xor:
				return ir.BoolConst(cx.Int != cy.Int)
			}
		}
		return x
	}
	if !(t == ir.I32 || t == ir.I64) {
		return x
	}
	if okx && oky {
		a, b := cx.Int, cy.Int
		switch x.Op {
		case ir.Add:
			return ir.IntT(t, wrap(t, a+b))
		case ir.Sub:
			return ir.IntT(t, wrap(t, a-b))
		case ir.Mul:
			return ir.IntT(t, wrap(t, a*b))
		case ir.Div:
			return ir.IntT(t, wrap(t, ir.IntDiv(a, b)))
		case ir.Rem:
			return ir.IntT(t, wrap(t, ir.IntRem(a, b)))
		case ir.Min:
			return ir.IntT(t, min(a, b))
		case ir.Max:
			return ir.IntT(t, max(a, b))
		case ir.Lt:
			return ir.BoolConst(a < b)
		case ir.Le:
			return ir.BoolConst(a <= b)
		case ir.Gt:
			return ir.BoolConst(a > b)
		case ir.Ge:
			return ir.BoolConst(a >= b)
		case ir.Eq:
			return ir.BoolConst(a == b)
		case ir.Ne:
			return ir.BoolConst(a != b)
		}
		return x
	}
	isC := func(c *ir.Const, ok bool, v int64) bool { return ok && c.Int == v }
	switch x.Op {
	case ir.Add:
		if isC(cx, okx, 0) {
			return x.Y
		}
		if isC(cy, oky, 0) {
			return x.X
		}
	case ir.Sub:
		if isC(cy, oky, 0) {
			return x.X
		}
	case ir.Mul:
		if isC(cx, okx, 1) {
			return x.Y
		}
		if isC(cy, oky, 1) {
			return x.X
		}
		if isC(cx, okx, 0) || isC(cy, oky, 0) {
			return ir.IntT(t, 0)
		}
	case ir.Div:
		if isC(cy, oky, 1) {
			return x.X
		}
	case ir.Shr, ir.Shl:
		if isC(cy, oky, 0) {
			return x.X
		}
	}
	return x
}
