package gpu

import (
	"fmt"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// Layer is a GPU target's instance of the generic schedule: the lane
// width of its warps (wavefronts), the block size of its work kernels, the
// matrix instructions it offers and its rule for the K/V ring. A target
// declares one value and lists the Layer's passes in its table, with the
// passes that are its own (matrix-core rewrites, layouts) among them.
type Layer struct {
	// Lanes is the lane count of a warp: 32 (NVIDIA) or 64 (AMD CDNA).
	Lanes int
	// BlockThreads is the block size of every work kernel, a multiple of
	// Lanes.
	BlockThreads int
	// Matrix lists the matrix instructions the target offers, for the
	// target's own rewrite to choose from (none: every matmul stays SIMT).
	Matrix []MatrixShape
	// RingSlots is the number of K/V ring slots PipelineKV gives a work
	// item whose shared arrays take smem bytes with one slot, ringBytes of
	// them the staged K/V tiles: RingStages when the target's occupancy
	// rule allows, else 1. Nil: always RingStages.
	RingSlots func(smem, ringBytes int) int
}

// MatrixShape is one matrix instruction of a warp: D (M x N, f32) += A (M
// x K) · B (K x N), with A and B of one of the In dtypes.
type MatrixShape struct {
	M, N, K int
	In      []ir.Type
}

// Warps is the number of warps in a block.
func (l *Layer) Warps() int { return l.BlockThreads / l.Lanes }

// check reports a layer that cannot schedule anything.
func (l *Layer) check() error {
	if l.Lanes < 2 || l.Lanes > ir.MaxWarpLanes || l.Lanes&(l.Lanes-1) != 0 {
		return fmt.Errorf("gpu layer: %d lanes, want a power of two from 2 to %d", l.Lanes, ir.MaxWarpLanes)
	}
	if l.BlockThreads <= 0 || l.BlockThreads%l.Lanes != 0 {
		return fmt.Errorf("gpu layer: blocks of %d threads, want a multiple of %d lanes", l.BlockThreads, l.Lanes)
	}
	return nil
}

// withLanes runs a lane-width dependent pass: the module's warps get the
// layer's lane count first, so that the verifier and the interpreter read
// the lanes loops and shuffles the pass writes with that width.
func (l *Layer) withLanes(m *ir.Module, run func(*ir.Module) (*ir.Module, error)) (*ir.Module, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	if w := m.LaneWidth(); w != l.Lanes && w != ir.DefaultLanes {
		return nil, fmt.Errorf("gpu layer: the module's warps have %d lanes, the layer's %d", w, l.Lanes)
	}
	c := *m
	c.SetLaneWidth(l.Lanes)
	return run(&c)
}

// SIMTMatMul writes the matmuls a matrix rewrite left as one dot product
// per output element (a serial loop) inside spreads over the static shape.
func SIMTMatMul(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		elems := passes.ElemTypes(k)
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if mm, ok := s.(*ir.MatMul); ok {
				return passes.MatMulLoopsOf(mm, elems[mm.A], elems[mm.B], passes.DotPerElement, ir.Serial)
			}
			return []ir.Stmt{s}
		}), nil
	})
}

func i32(v int) ir.Expr { return ir.Int(int64(v)) }

func add(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Add, x, y) }
func mul(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Mul, x, y) }
