package cpu

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// LowerTiles writes every matmul and reduce statement as loops the
// vectorize pass can map: a matmul with B transposed (Q·Kᵀ) as a dot
// product per output element over a vector loop, one with B as is (P·V)
// as row updates C[m, :] += A[m, k] * B[k, :] that a zero A[m, k] skips
// (zeroskip); a reduce as a running var over a vector loop, a guard on its
// value folded into the loop bound.
func LowerTiles(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		elems := passes.ElemTypes(k)
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			switch x := s.(type) {
			case *ir.MatMul:
				return passes.MatMulLoops(x, elems[x.B], passes.RowsThenK, ir.Vector)
			case *ir.Reduce:
				return passes.ReduceLoop(x, ir.Vector)
			}
			return []ir.Stmt{s}
		}), nil
	})
}

// Vectorize maps spread loops onto the CPU: a guard `if v < e` that is a
// spread's whole body becomes its bound (the static extent a GPU needs is
// of no use here), then every spread that holds no other loop becomes a
// vector loop and the rest serial loops.
func Vectorize(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Kind != ir.Spread {
				return []ir.Stmt{s}
			}
			parts := passes.FoldGuard(f)
			if parts == nil {
				parts = []ir.Stmt{f}
			}
			for _, p := range parts {
				pf := p.(*ir.For)
				pf.Kind = ir.Serial
				if !passes.HasLoop(pf.Body) {
					pf.Kind = ir.Vector
				}
			}
			return parts
		}), nil
	})
}
