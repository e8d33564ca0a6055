package passes

import (
	"github.com/attnc/attnc/ir"
)

// ClassifyTiles derives, for every KV tile loop (@kv_tile with position
// Ranges) that holds a per-element mask (an `if ... @mask` whose condition
// says "hidden"), two tile-level conditions by interval analysis of that
// condition over the tile's ranges:
//
//	tile_skip: every position of the tile is hidden  -> the tile is skipped
//	tile_full: no position of the tile is hidden      -> the unmasked body runs
//
// and rewrites the tile body as
//
//	if tile_skip { continue }
//	if tile_full { body without the mask } else { body }
//
// Statements tagged @hidden (an `if` or a `for`) only act on positions the
// mask hides — they keep a hidden position's possibly garbage K/V out of the
// result by selecting instead of multiplying by zero — so the fully visible
// copy drops them too, and so does a tile whose mask folded to "nothing
// hidden" (no @mask left): fully visible tiles keep their fast path.
//
// When the analysis cannot bound the condition (an unknown variable or an
// operator without interval rules) the loop is left as it is.
func ClassifyTiles(m *ir.Module) (*ir.Module, error) {
	return mapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Tag != "kv_tile" || len(f.Ranges) == 0 {
				return []ir.Stmt{s}
			}
			return []ir.Stmt{classifyTile(f)}
		}), nil
	})
}

func classifyTile(f *ir.For) *ir.For {
	mask := findMask(f.Body)
	if mask == nil {
		nf := *f
		nf.Body = dropTagged(f.Body, ir.HiddenTag)
		return &nf
	}
	env := map[string]ival{}
	for _, r := range f.Ranges {
		env[r.Var] = ival{r.Lo, r.Hi}
	}
	hidden, ok := boolInterval(mask.Cond, env)
	if !ok {
		return f
	}
	skip := SimplifyExpr(hidden.must)
	full := SimplifyExpr(ir.Un(ir.Not, hidden.may))
	var stmts []ir.Stmt
	if !ir.IsFalse(skip) {
		stmts = append(stmts, &ir.Let{Name: "tile_skip", Value: skip},
			&ir.If{Cond: ir.R("tile_skip", ir.Bool), Then: &ir.Block{Stmts: []ir.Stmt{&ir.Continue{}}}})
	}
	unmasked := dropTagged(dropTagged(ir.CloneBlock(f.Body), "mask"), ir.HiddenTag)
	switch {
	case ir.IsTrue(full):
		stmts = append(stmts, unmasked.Stmts...)
	case ir.IsFalse(full):
		stmts = append(stmts, f.Body.Stmts...)
	default:
		stmts = append(stmts, &ir.Let{Name: "tile_full", Value: full},
			&ir.If{Cond: ir.R("tile_full", ir.Bool), Then: unmasked, Else: f.Body})
	}
	nf := *f
	nf.Body = &ir.Block{Stmts: stmts}
	return &nf
}

// dropTagged removes every if and for tagged tag from b.
func dropTagged(b *ir.Block, tag string) *ir.Block {
	return ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.If:
			if x.Tag == tag {
				return nil
			}
		case *ir.For:
			if x.Tag == tag {
				return nil
			}
		}
		return []ir.Stmt{s}
	})
}

func findMask(b *ir.Block) *ir.If {
	var found *ir.If
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if i, ok := s.(*ir.If); ok && i.Tag == "mask" && found == nil {
			found = i
		}
		return []ir.Stmt{s}
	})
	return found
}

// ival is an integer interval [lo, hi] whose bounds are IR expressions.
type ival struct{ lo, hi ir.Expr }

// bval bounds a boolean: may (true for some point) and must (true for all).
type bval struct{ may, must ir.Expr }

func ib(op ir.BinOp, x, y ir.Expr) ir.Expr { return ir.Bin(op, x, y) }

// intInterval bounds an i32 expression over env.
func intInterval(e ir.Expr, env map[string]ival) (ival, bool) {
	switch x := e.(type) {
	case *ir.Const:
		if x.T != ir.I32 {
			return ival{}, false
		}
		return ival{x, x}, true
	case *ir.Ref:
		v, ok := env[x.Name]
		return v, ok
	case *ir.Unary:
		a, ok := intInterval(x.X, env)
		if !ok {
			return ival{}, false
		}
		switch x.Op {
		case ir.Neg:
			return ival{ir.Un(ir.Neg, a.hi), ir.Un(ir.Neg, a.lo)}, true
		case ir.Abs:
			zero := ir.Int(0)
			lo := ir.Sel(ib(ir.Ge, a.lo, zero), a.lo, ir.Sel(ib(ir.Le, a.hi, zero), ir.Un(ir.Neg, a.hi), zero))
			return ival{lo, ib(ir.Max, ir.Un(ir.Neg, a.lo), a.hi)}, true
		}
	case *ir.Binary:
		if x.X.Type() != ir.I32 {
			return ival{}, false
		}
		a, ok1 := intInterval(x.X, env)
		b, ok2 := intInterval(x.Y, env)
		if !ok1 || !ok2 {
			return ival{}, false
		}
		switch x.Op {
		case ir.Add:
			return ival{ib(ir.Add, a.lo, b.lo), ib(ir.Add, a.hi, b.hi)}, true
		case ir.Sub:
			return ival{ib(ir.Sub, a.lo, b.hi), ib(ir.Sub, a.hi, b.lo)}, true
		case ir.Min:
			return ival{ib(ir.Min, a.lo, b.lo), ib(ir.Min, a.hi, b.hi)}, true
		case ir.Max:
			return ival{ib(ir.Max, a.lo, b.lo), ib(ir.Max, a.hi, b.hi)}, true
		case ir.Mul, ir.Div:
			// By a constant: monotonic (division truncates toward zero,
			// which is monotonic non-decreasing for a positive divisor).
			c, ok := x.Y.(*ir.Const)
			if !ok || (x.Op == ir.Div && c.Int <= 0) {
				if x.Op == ir.Mul {
					if c2, ok := x.X.(*ir.Const); ok {
						return intInterval(ir.Bin(ir.Mul, x.Y, c2), env)
					}
				}
				return ival{}, false
			}
			if c.Int >= 0 {
				return ival{ib(x.Op, a.lo, c), ib(x.Op, a.hi, c)}, true
			}
			return ival{ib(x.Op, a.hi, c), ib(x.Op, a.lo, c)}, true
		}
	}
	return ival{}, false
}

// boolInterval bounds a bool expression over env.
func boolInterval(e ir.Expr, env map[string]ival) (bval, bool) {
	switch x := e.(type) {
	case *ir.Const:
		if x.T == ir.Bool {
			return bval{x, x}, true
		}
	case *ir.Unary:
		if x.Op == ir.Not {
			a, ok := boolInterval(x.X, env)
			if !ok {
				return bval{}, false
			}
			return bval{ir.Un(ir.Not, a.must), ir.Un(ir.Not, a.may)}, true
		}
	case *ir.Binary:
		if x.Op == ir.And || x.Op == ir.Or {
			a, ok1 := boolInterval(x.X, env)
			b, ok2 := boolInterval(x.Y, env)
			if !ok1 || !ok2 {
				return bval{}, false
			}
			return bval{ib(x.Op, a.may, b.may), ib(x.Op, a.must, b.must)}, true
		}
		if !x.Op.IsCompare() || x.X.Type() != ir.I32 {
			return bval{}, false
		}
		a, ok1 := intInterval(x.X, env)
		b, ok2 := intInterval(x.Y, env)
		if !ok1 || !ok2 {
			return bval{}, false
		}
		switch x.Op {
		case ir.Lt:
			return bval{ib(ir.Lt, a.lo, b.hi), ib(ir.Lt, a.hi, b.lo)}, true
		case ir.Le:
			return bval{ib(ir.Le, a.lo, b.hi), ib(ir.Le, a.hi, b.lo)}, true
		case ir.Gt:
			return bval{ib(ir.Gt, a.hi, b.lo), ib(ir.Gt, a.lo, b.hi)}, true
		case ir.Ge:
			return bval{ib(ir.Ge, a.hi, b.lo), ib(ir.Ge, a.lo, b.hi)}, true
		case ir.Eq, ir.Ne:
			// Equal somewhere iff the intervals overlap; equal everywhere
			// iff both are the same single point. != is the negation.
			overlap := ib(ir.And, ib(ir.Le, a.lo, b.hi), ib(ir.Le, b.lo, a.hi))
			single := ib(ir.And, ib(ir.And, ib(ir.Eq, a.lo, a.hi), ib(ir.Eq, b.lo, b.hi)), ib(ir.Eq, a.lo, b.lo))
			if x.Op == ir.Eq {
				return bval{overlap, single}, true
			}
			return bval{ir.Un(ir.Not, single), ir.Un(ir.Not, overlap)}, true
		}
	}
	return bval{}, false
}
