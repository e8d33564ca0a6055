package cuda

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets/gpu"
)

// swizzleChunk is the unit SwizzleShared permutes: 16 bytes, one ldmatrix
// row; 8 of them (128 bytes) cover the 32 banks of shared memory once.
const swizzleChunk = 8 // 16-bit elements

// SwizzleShared lays out every array that ldmatrix reads so that the
// eight 16-byte rows of one 8x8 matrix fall in different banks: element
// (row, col) of an array of rows of W 16-bit elements (W a multiple of 64)
// is stored at row*W + ((col/8) ^ (row%8))*8 + col%8, the XOR swizzle of
// CUTLASS and FlashAttention-2. Consecutive rows at the same column then
// hit eight different 16-byte chunks of a 128-byte line, so ldmatrix (and
// the 16-byte cp.async writes of a tile row) run without bank conflicts,
// where the plain layout (rows 256 bytes apart for d = 128) puts all eight
// rows in the same four banks. The row width is the constant factor of the
// row term of the ldmatrix addresses (use-mma writes them as row*W + col);
// every store, load, copy and ldmatrix of the array is rewritten, so the
// layout change is invisible to the kernel's results. An array with a copy
// that could straddle chunks is left alone.
func SwizzleShared(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		allocs := map[string]*ir.Alloc{}
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if a, ok := s.(*ir.Alloc); ok {
				if _, dup := allocs[a.Name]; dup {
					allocs[a.Name] = nil // declared twice: leave it
				} else {
					allocs[a.Name] = a
				}
			}
			return []ir.Stmt{s}
		})
		width := map[string]int{}
		bad := map[string]bool{}
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			l, ok := s.(*ir.LdMatrix)
			if !ok {
				return []ir.Stmt{s}
			}
			w := rowWidth(l.Index)
			if a := allocs[l.Src]; a == nil || w <= 0 || w%(8*swizzleChunk) != 0 || a.Size%w != 0 || a.T.Bits() != 16 {
				bad[l.Src] = true
			} else if old, seen := width[l.Src]; seen && old != w {
				bad[l.Src] = true
			} else {
				width[l.Src] = w
			}
			return []ir.Stmt{s}
		})
		env := gpu.LetValues(k.Body)
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if c, ok := s.(*ir.Copy); ok {
				for _, x := range []struct {
					name string
					idx  ir.Expr
				}{{c.Dst, c.DstIndex}, {c.Src, c.SrcIndex}} {
					if _, ok := width[x.name]; ok && (c.N != swizzleChunk || gpu.Multiple(x.idx, env)%swizzleChunk != 0) {
						bad[x.name] = true
					}
				}
			}
			return []ir.Stmt{s}
		})
		for n := range bad {
			delete(width, n)
		}
		if len(width) == 0 {
			return k.Body, nil
		}
		at := func(name string, idx ir.Expr) ir.Expr {
			w, ok := width[name]
			if !ok {
				return idx
			}
			return swizzled(idx, w)
		}
		return gpu.Reindex(k.Body, at), nil
	})
}

// rowWidth is W when idx is row*W + col (W a constant), else 0.
func rowWidth(idx ir.Expr) int {
	b, ok := idx.(*ir.Binary)
	if !ok || b.Op != ir.Add {
		return 0
	}
	m, ok := b.X.(*ir.Binary)
	if !ok || m.Op != ir.Mul {
		return 0
	}
	if c, ok := m.Y.(*ir.Const); ok && c.T == ir.I32 {
		return int(c.Int)
	}
	return 0
}

// swizzled is the swizzled position of element idx (i32) in rows of w:
// row*w + ((col/8) ^ (row%8))*8 + col%8.
func swizzled(idx ir.Expr, w int) ir.Expr {
	// Indices are never negative, so for a power of two w the row and
	// column are a shift and a mask.
	row, col := ir.Expr(ir.Bin(ir.Div, idx, i32(w))), ir.Expr(ir.Bin(ir.Rem, idx, i32(w)))
	if w&(w-1) == 0 {
		sh := 0
		for 1<<sh < w {
			sh++
		}
		row, col = ir.Bin(ir.Shr, idx, i32(sh)), ir.Bin(ir.And, idx, i32(w-1))
	}
	chunk := ir.Bin(ir.Xor, ir.Bin(ir.Shr, col, i32(3)), ir.Bin(ir.And, row, i32(7)))
	return add(mul(row, i32(w)), ir.Bin(ir.Or, ir.Bin(ir.Shl, chunk, i32(3)), ir.Bin(ir.And, col, i32(7))))
}
