package gpu

import "github.com/attnc/attnc/ir"

// Reindex rewrites the element index of every load, store, copy (both
// sides) and ldmatrix source through at(array, index); at returns the
// index unchanged for arrays it leaves alone. Layouts (the CUDA
// target's swizzle-shared) and PipelineKV move arrays in shared memory with it.
func Reindex(b *ir.Block, at func(name string, idx ir.Expr) ir.Expr) *ir.Block {
	b = ir.MapExprs(b, func(e ir.Expr) ir.Expr {
		if l, ok := e.(*ir.Load); ok {
			if idx := at(l.Buf, l.Index); idx != l.Index {
				c := *l
				c.Index = idx
				return &c
			}
		}
		return e
	})
	return ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Store:
			return []ir.Stmt{&ir.Store{Buf: x.Buf, Index: at(x.Buf, x.Index), Value: x.Value}}
		case *ir.Copy:
			c := *x
			c.DstIndex, c.SrcIndex = at(x.Dst, x.DstIndex), at(x.Src, x.SrcIndex)
			return []ir.Stmt{&c}
		case *ir.LdMatrix:
			c := *x
			c.Index = at(x.Src, x.Index)
			return []ir.Stmt{&c}
		}
		return []ir.Stmt{s}
	})
}
