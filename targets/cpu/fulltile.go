package cpu

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// FullTiles versions each decode KV tile on being whole: in the @kv_tile
// loops of decode kernels (the public decode and the split one), the
// statements after `let kv_n = min(KT, e)` (the tile's position count,
// KT static) become `if kv_n == KT { the same with kv_n = KT } else { as
// they were }`. Every tile of a sequence but its last is whole, and there
// the extents of the score, softmax and P·V loops, the reduces' guards
// and tails and the matmuls' extents are constants, which LLVM folds: no
// loop bound, guard or tail is computed per tile. The arithmetic is the
// same, in the same order: the output is bit-identical. Where
// classify-tiles split the tile on `if tile_full` (no position masked),
// only that branch is versioned: the masked tiles (a window's edges) are
// few, and each version is another copy of the tile's code. Prefill's
// tiles (bigger bodies, a few dozen per work item) are left as they are.
func FullTiles(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		if k.Level == "" || k.Role != ir.RoleDecode {
			return k.Body, nil
		}
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Tag != ir.TagKVTile {
				return []ir.Stmt{s}
			}
			t := *f
			t.Body = versionFull(f.Body)
			return []ir.Stmt{&t}
		}), nil
	})
}

// versionFull rewrites the blocks of b (not entering loops: the tile's
// own statements) at their `let kv_n = min(KT, e)`.
func versionFull(b *ir.Block) *ir.Block {
	if b == nil {
		return nil
	}
	out := &ir.Block{}
	for i, s := range b.Stmts {
		switch x := s.(type) {
		case *ir.Let:
			if kt, ok := tileCount(x); ok && i+1 < len(b.Stmts) && !redefines(b.Stmts[i+1:], x.Name) {
				rest := &ir.Block{Stmts: b.Stmts[i+1:]}
				full := ir.MapExprs(rest, func(e ir.Expr) ir.Expr {
					if r, ok := e.(*ir.Ref); ok && r.Name == x.Name {
						return kt
					}
					return passes.SimplifyExpr(e)
				})
				out.Stmts = append(out.Stmts, x, &ir.If{Cond: ir.Bin(ir.Eq, ir.R(x.Name, ir.I32), kt),
					Then: full, Else: ir.CloneBlock(rest)})
				return out
			}
		case *ir.Block:
			s = versionFull(x)
		case *ir.If:
			c := *x
			c.Then = versionFull(x.Then)
			if r, ok := x.Cond.(*ir.Ref); !ok || r.Name != "tile_full" {
				c.Else = versionFull(x.Else)
			}
			s = &c
		}
		out.Stmts = append(out.Stmts, s)
	}
	return out
}

// tileCount is KT when l is `let kv_n = min(KT, e)` with KT a constant
// i32 above 1.
func tileCount(l *ir.Let) (*ir.Const, bool) {
	if l.Name != "kv_n" {
		return nil, false
	}
	b, ok := l.Value.(*ir.Binary)
	if !ok || b.Op != ir.Min {
		return nil, false
	}
	c, ok := b.X.(*ir.Const)
	if !ok || c.T != ir.I32 || c.Int < 2 {
		return nil, false
	}
	return c, true
}

// redefines reports whether stmts (and their blocks) declare name again.
func redefines(stmts []ir.Stmt, name string) bool {
	found := false
	ir.MapStmts(&ir.Block{Stmts: stmts}, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Let:
			found = found || x.Name == name
		case *ir.Var:
			found = found || x.Name == name
		case *ir.For:
			found = found || x.Var == name
		case *ir.Reduce:
			found = found || x.Name == name || x.Var == name
		}
		return []ir.Stmt{s}
	})
	return found
}
