package passes

import (
	"fmt"
	"math"
	"slices"

	"github.com/attnc/attnc/ir"
)

// ClassifyTiles derives, for every KV tile loop (@kv_tile with position
// Ranges) that holds a per-element mask (`if ... @mask` statements whose
// conditions say "hidden": the Def's mask and the data masks), two
// tile-level conditions by interval analysis of each condition over the
// tile's ranges (a comparison that reads memory, such as a tree's
// intervals or a custom mask's bits, may hold or fail anywhere):
//
//	tile_skip: one of them hides every position of the tile -> the tile is skipped
//	tile_full: those it can bound hide no position of the tile -> the body without them runs
//
// and rewrites the tile body as
//
//	if tile_skip { continue }
//	if tile_full { body without those ifs } else { body }
//
// An if that may hide anywhere (a custom mask) stays in both bodies; a
// tree's "positions before the tree see everything" bounds, so the tiles
// before a tree drop its test.
//
// Statements tagged @hidden (an `if`, a `for`, or a matmul's zero skip)
// only act on positions the mask hides — they keep a hidden position's
// possibly garbage K/V out of the result by selecting instead of
// multiplying by zero — so the fully visible copy drops them too when it
// has dropped every @mask if, and so does a tile whose mask folded to
// "nothing hidden" (no @mask left): fully visible tiles keep their fast
// path.
//
// When the analysis cannot bound a condition (an unknown variable or an
// operator without interval rules) its if stays; when it can bound none,
// the loop is left as it is.
func ClassifyTiles(m *ir.Module) (*ir.Module, error) {
	return mapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Tag != ir.TagKVTile || len(f.Ranges) == 0 {
				return []ir.Stmt{s}
			}
			return []ir.Stmt{classifyTile(f)}
		}), nil
	})
}

func classifyTile(f *ir.For) *ir.For {
	conds := maskConds(f.Body)
	if len(conds) == 0 {
		nf := *f
		nf.Body = dropTagged(f.Body, ir.TagHidden)
		return &nf
	}
	env := &ienv{vars: map[string]ival{}}
	for _, r := range f.Ranges {
		env.vars[r.Var] = ival{lo: r.Lo, hi: r.Hi, mag: rangeMag(r.Var)}
	}
	// Each @mask if on its own: the tile is skipped when one of them hides
	// every position; the fully visible copy drops the ifs that can be
	// shown to hide nothing in the tile (tile_full: all of them hide
	// nothing) and keeps those that may hide anywhere (a custom mask's
	// bits), so that a data mask beside the Def's mask does not cost the
	// Def's fully visible tiles their copy.
	var skip, full ir.Expr = ir.BoolConst(false), ir.BoolConst(true)
	drop := make([]bool, len(conds))
	analysed, dropAll := false, true
	for i, c := range conds {
		hidden, ok := boolInterval(c, env)
		if !ok {
			dropAll = false
			continue
		}
		analysed = true
		skip = ir.Bin(ir.Or, skip, hidden.must)
		shows := SimplifyExpr(ir.Un(ir.Not, hidden.may))
		if ir.IsFalse(shows) {
			dropAll = false
			continue
		}
		drop[i] = true
		full = ir.Bin(ir.And, full, shows)
	}
	if !analysed {
		return f
	}
	skip, full = SimplifyExpr(skip), SimplifyExpr(full)
	stmts := env.lets
	if !ir.IsFalse(skip) {
		stmts = append(stmts, &ir.Let{Name: "tile_skip", Value: skip},
			&ir.If{Cond: ir.R("tile_skip", ir.Bool), Then: &ir.Block{Stmts: []ir.Stmt{&ir.Continue{}}}})
	}
	unmasked := dropMasks(ir.CloneBlock(f.Body), drop)
	if dropAll {
		unmasked = dropTagged(unmasked, ir.TagHidden)
	}
	switch {
	case !slices.Contains(drop, true):
		stmts = append(stmts, f.Body.Stmts...)
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

// dropMasks removes from b the @mask ifs whose entry in drop is set (in
// maskConds' order).
func dropMasks(b *ir.Block, drop []bool) *ir.Block {
	i := 0
	return ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if x, ok := s.(*ir.If); ok && x.Tag == ir.TagMask {
			i++
			if drop[i-1] {
				return nil
			}
		}
		return []ir.Stmt{s}
	})
}

// dropTagged removes every if and for tagged tag from b, and the zero
// skip of every matmul tagged tag.
func dropTagged(b *ir.Block, tag ir.Tag) *ir.Block {
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
		case *ir.MatMul:
			if x.Tag == tag {
				mm := *x
				mm.ZeroSkip, mm.Tag = false, ir.NoTag
				return []ir.Stmt{&mm}
			}
		}
		return []ir.Stmt{s}
	})
}

// maskConds are the conditions under which b's @mask ifs hide a
// position (the Def's mask, the data masks), in the order MapStmts visits
// them.
func maskConds(b *ir.Block) []ir.Expr {
	var conds []ir.Expr
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if i, ok := s.(*ir.If); ok && i.Tag == ir.TagMask {
			conds = append(conds, i.Cond)
		}
		return []ir.Stmt{s}
	})
	return conds
}

// ival is an integer interval [lo, hi] whose bounds are IR expressions.
// The kernel computes the bounded expression in i32, where it may wrap.
// mag bounds |value| statically: while it stays within i32 nothing can
// wrap and the bounds are computed in i32 as the kernel computes; beyond
// (large constants in a mask expression), the bounds are computed in i64,
// exactly, and fits (nil: always) holds when no value of the expression left
// the i32 range, so that the bounds are the kernel's. Where fits fails, the
// comparison above it is unknown (may, not must) for the tile.
type ival struct {
	lo, hi, fits ir.Expr
	mag          int64
}

// ienv is the analysis state of one tile: the intervals of the range
// variables, and the lets that name bounds used more than once. A rule that
// reads an operand's bound twice (abs, a wide result's fits check) binds it
// to a let first, so the tile conditions stay linear in the size of the
// mask expression however deeply it nests (a tree copy would double at
// every nested abs).
type ienv struct {
	vars map[string]ival
	lets []ir.Stmt
}

// bind returns x, or a reference to a new let holding x unless x is a
// constant or a reference already.
func (env *ienv) bind(x ir.Expr) ir.Expr {
	switch x.(type) {
	case *ir.Const, *ir.Ref:
		return x
	}
	name := fmt.Sprintf("tile_b%d", len(env.lets))
	env.lets = append(env.lets, &ir.Let{Name: name, Value: SimplifyExpr(x)})
	return ir.R(name, x.Type())
}

// bval bounds a boolean: may (true for some point) and must (true for all).
type bval struct{ may, must ir.Expr }

func ib(op ir.BinOp, x, y ir.Expr) ir.Expr { return ir.Bin(op, x, y) }

// rangeMag bounds |value| of a tile's range variable: positions lie in
// 0..ir.MaxSeqLen-1 (the kernels reject longer sequences, and q_pos < 0
// needs mask none, which has nothing to classify), heads below
// ir.MaxHeads; anything else is an i32.
func rangeMag(name string) int64 {
	switch name {
	case "q_pos", "kv_pos":
		return ir.MaxSeqLen - 1
	case "head":
		return ir.MaxHeads
	}
	return -math.MinInt32
}

// satAdd and satMul are + and * saturating at 2^62.
func satAdd(x, y int64) int64 { return min(x+y, 1<<62) }

func satMul(x, y int64) int64 {
	if x != 0 && y > (1<<62)/x {
		return 1 << 62
	}
	return x * y
}

// wide is x as i64 (constants stay constants).
func wide(x ir.Expr) ir.Expr {
	if c, ok := x.(*ir.Const); ok && c.T == ir.I32 {
		return ir.IntT(ir.I64, c.Int)
	}
	return ir.Cvt(ir.I64, x)
}

// both is the conjunction of two fits conditions (nil is true).
func both(x, y ir.Expr) ir.Expr {
	switch {
	case x == nil:
		return y
	case y == nil:
		return x
	}
	return ib(ir.And, x, y)
}

// narrow reports whether every bound is i32 (no operand went wide).
func narrow(xs ...ir.Expr) bool {
	for _, x := range xs {
		if x.Type() != ir.I32 {
			return false
		}
	}
	return true
}

// result builds an operation's interval from bound builders: in i32 when
// the operands are and mag proves no wrap, else in i64 with a fits check
// when mag does not prove the range.
func result(env *ienv, mag int64, fits ir.Expr, bounds func(conv func(ir.Expr) ir.Expr) (lo, hi ir.Expr), operands ...ir.Expr) (ival, bool) {
	if mag <= math.MaxInt32 && narrow(operands...) {
		lo, hi := bounds(func(x ir.Expr) ir.Expr { return x })
		return ival{lo, hi, fits, mag}, true
	}
	lo, hi := bounds(wide)
	if mag > math.MaxInt32 {
		lo, hi = env.bind(lo), env.bind(hi)
		in := ib(ir.And, ib(ir.Ge, lo, ir.IntT(ir.I64, math.MinInt32)), ib(ir.Le, hi, ir.IntT(ir.I64, math.MaxInt32)))
		fits = both(fits, in)
	}
	return ival{lo, hi, fits, mag}, true
}

// intInterval bounds an i32 expression over env.
func intInterval(e ir.Expr, env *ienv) (ival, bool) {
	switch x := e.(type) {
	case *ir.Const:
		if x.T != ir.I32 {
			return ival{}, false
		}
		return ival{lo: x, hi: x, mag: max(x.Int, -x.Int)}, true
	case *ir.Ref:
		v, ok := env.vars[x.Name]
		return v, ok
	case *ir.Unary:
		a, ok := intInterval(x.X, env)
		if !ok {
			return ival{}, false
		}
		switch x.Op {
		case ir.Neg: // -MIN wraps: mag 2^31 makes it checked
			return result(env, satAdd(a.mag, 1), a.fits, func(c func(ir.Expr) ir.Expr) (ir.Expr, ir.Expr) {
				return ir.Un(ir.Neg, c(a.hi)), ir.Un(ir.Neg, c(a.lo))
			}, a.lo, a.hi)
		case ir.Abs: // reads each bound twice: bind them
			a.lo, a.hi = env.bind(a.lo), env.bind(a.hi)
			return result(env, satAdd(a.mag, 1), a.fits, func(c func(ir.Expr) ir.Expr) (ir.Expr, ir.Expr) {
				lo, hi := c(a.lo), c(a.hi)
				zero := c(ir.Int(0))
				l := ir.Sel(ib(ir.Ge, lo, zero), lo, ir.Sel(ib(ir.Le, hi, zero), ir.Un(ir.Neg, hi), zero))
				return l, ib(ir.Max, ir.Un(ir.Neg, lo), hi)
			}, a.lo, a.hi)
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
		fits := both(a.fits, b.fits)
		ops := []ir.Expr{a.lo, a.hi, b.lo, b.hi}
		switch x.Op {
		case ir.Add:
			return result(env, satAdd(a.mag, b.mag), fits, func(c func(ir.Expr) ir.Expr) (ir.Expr, ir.Expr) {
				return ib(ir.Add, c(a.lo), c(b.lo)), ib(ir.Add, c(a.hi), c(b.hi))
			}, ops...)
		case ir.Sub:
			return result(env, satAdd(a.mag, b.mag), fits, func(c func(ir.Expr) ir.Expr) (ir.Expr, ir.Expr) {
				return ib(ir.Sub, c(a.lo), c(b.hi)), ib(ir.Sub, c(a.hi), c(b.lo))
			}, ops...)
		case ir.Min, ir.Max: // cannot leave the operands' range
			return result(env, max(a.mag, b.mag), fits, func(c func(ir.Expr) ir.Expr) (ir.Expr, ir.Expr) {
				return ib(x.Op, c(a.lo), c(b.lo)), ib(x.Op, c(a.hi), c(b.hi))
			}, ops...)
		case ir.Mul, ir.Div:
			// By a constant: monotonic (division truncates toward zero,
			// which is monotonic non-decreasing for a positive divisor).
			k, ok := x.Y.(*ir.Const)
			if !ok || (x.Op == ir.Div && k.Int <= 0) {
				if x.Op == ir.Mul {
					if c2, ok := x.X.(*ir.Const); ok {
						return intInterval(ir.Bin(ir.Mul, x.Y, c2), env)
					}
				}
				return ival{}, false
			}
			mag := a.mag // |x / k| <= |x|
			if x.Op == ir.Mul {
				mag = satMul(a.mag, max(k.Int, -k.Int))
			}
			return result(env, mag, a.fits, func(c func(ir.Expr) ir.Expr) (ir.Expr, ir.Expr) {
				lo, hi := c(a.lo), c(a.hi)
				if k.Int < 0 {
					lo, hi = hi, lo
				}
				return ib(x.Op, lo, c(k)), ib(x.Op, hi, c(k))
			}, a.lo, a.hi)
		}
	}
	return ival{}, false
}

// boolInterval bounds a bool expression over env.
func boolInterval(e ir.Expr, env *ienv) (bval, bool) {
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
		if x.Op != ir.And && x.Op != ir.Or && readsMemory(x) {
			// A load (a param read, a data mask's tree or bits) is
			// runtime data: the comparison may hold or fail anywhere in
			// the tile, so the tile is neither skipped nor full on its
			// account.
			return bval{may: ir.BoolConst(true), must: ir.BoolConst(false)}, true
		}
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
		bv, ok := compareInterval(x.Op, a, b)
		if fits := both(a.fits, b.fits); ok && fits != nil {
			// Where a side may have wrapped in i32, the tile is unknown.
			bv = bval{ib(ir.Or, bv.may, ir.Un(ir.Not, fits)), ib(ir.And, bv.must, fits)}
		}
		return bv, ok
	}
	return bval{}, false
}

// compareInterval bounds a op b over intervals a and b (compared in i64
// when a bound is).
func compareInterval(op ir.BinOp, a, b ival) (bval, bool) {
	if a.lo.Type() != ir.I32 || a.hi.Type() != ir.I32 || b.lo.Type() != ir.I32 || b.hi.Type() != ir.I32 {
		a.lo, a.hi, b.lo, b.hi = wide(a.lo), wide(a.hi), wide(b.lo), wide(b.hi)
	}
	switch op {
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
		if op == ir.Eq {
			return bval{overlap, single}, true
		}
		return bval{ir.Un(ir.Not, single), ir.Un(ir.Not, overlap)}, true
	}
	return bval{}, false
}

// readsMemory reports whether e holds a load or a guarded load (a param
// read).
func readsMemory(e ir.Expr) bool {
	found := false
	ir.VisitExpr(e, func(x ir.Expr) {
		switch x.(type) {
		case *ir.Guarded, *ir.Load:
			found = true
		}
	})
	return found
}
