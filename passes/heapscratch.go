package passes

import "github.com/attnc/attnc/ir"

// HeapScratchMin is the size in bytes above which heap-scratch moves a work
// item's local array off the stack. Smaller arrays (per-row statistics, a
// tile's scores) stay on the stack, where the optimizer knows they alias
// nothing; the stack a call needs then stays far below 64 KiB whatever the
// head dims.
const HeapScratchMin = 1024

// HeapScratch marks every local array of more than HeapScratchMin bytes
// declared in a parallel loop's body (outside any threads loop; shared
// arrays are GPU memory and stay as they are) as heap scratch. The CPU
// backend then allocates each loop's heap arrays once per worker thread
// and call — every worker's block at once, before any item runs — reuses
// them across the worker's items, and frees them when the loop ends; a
// call that cannot get them returns NO_MEMORY having written nothing.
// The calling thread's stack then holds only small arrays, so kernels run
// on the small stacks of thread pools and language runtimes.
func HeapScratch(m *ir.Module) (*ir.Module, error) {
	return mapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		return heapBlock(k.Body, false), nil
	})
}

// heapBlock rewrites b; inPar says b is (inside) a parallel loop's body.
func heapBlock(b *ir.Block, inPar bool) *ir.Block {
	if b == nil {
		return nil
	}
	out := &ir.Block{Stmts: make([]ir.Stmt, 0, len(b.Stmts))}
	for _, s := range b.Stmts {
		out.Stmts = append(out.Stmts, heapStmt(s, inPar))
	}
	return out
}

func heapStmt(s ir.Stmt, inPar bool) ir.Stmt {
	switch x := s.(type) {
	case *ir.Alloc:
		if inPar && !x.Shared && !x.Heap && x.Size*x.T.Bits()/8 > HeapScratchMin {
			a := *x
			a.Heap = true
			return &a
		}
	case *ir.Block:
		return heapBlock(x, inPar)
	case *ir.For:
		if x.Kind == ir.Threads {
			return s // GPU: per-thread registers
		}
		f := *x
		f.Body = heapBlock(x.Body, inPar || x.Kind == ir.Parallel)
		return &f
	case *ir.If:
		i := *x
		i.Then = heapBlock(x.Then, inPar)
		i.Else = heapBlock(x.Else, inPar)
		return &i
	}
	return s
}
