package hip

import (
	"fmt"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets/gpu"
)

// MFMA shape on CDNA3: v_mfma_f32_16x16x16_{f16,bf16} (ir.MFMA): A 16 x
// 16, B 16 x 16, C and D 16 x 16 f32, per 64-lane wavefront.
const mfmaM, mfmaN, mfmaK = 16, 16, 16

// UseMFMA maps matmul statements onto the matrix cores when their shapes
// fit (M = 16, N and K multiples of 16) and their B operand holds only
// values of an f16/bf16 dtype, or 8-bit codes with f16/bf16 queries
// (gpu.PlanMatrix, as CUDA's use-mma decides): B — and A when it holds
// only such values too — is narrowed to the dtype; an A of computed f32
// values (P) is split into half-precision parts, one MFMA each, so P·V
// keeps about f32 precision. Each n-tile of 16 output columns is one
// spread iteration whose 64 lanes hold the MFMA fragments, read from LDS
// element by element (CDNA3 has no ldmatrix), reading and writing C
// around the MFMAs (acc-registers keeps an accumulating C in registers
// instead). A skipping matmul (P·V) checks its B fragments first and, when
// the wavefront finds a non-finite element, computes its accumulators
// exactly instead (gpu.FiniteGuard). Other matmuls are left to simt-matmul.
//
// Its lanes loops and MFMAs span 64 lanes: it sets the module's lane width
// (as the layer's lane passes do).
func UseMFMA(m *ir.Module) (*ir.Module, error) {
	shape := Layer.Matrix[0]
	if w := m.LaneWidth(); w != Layer.Lanes && w != ir.DefaultLanes {
		return nil, fmt.Errorf("use-mfma: the module's warps have %d lanes, MFMA's %d", w, Layer.Lanes)
	}
	wide := *m
	wide.SetLaneWidth(Layer.Lanes)
	return passes.MapKernels(&wide, func(k *ir.Kernel) (*ir.Block, error) {
		stores := gpu.ArrayStores(k.Body)
		reads := gpu.ArrayReads(k.Body)
		qt := gpu.QueryType(k)
		byMM := map[*ir.MatMul]*gpu.MatrixPlan{}
		var plans []*gpu.MatrixPlan
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if mm, ok := s.(*ir.MatMul); ok {
				if p := gpu.PlanMatrix(mm, shape, stores, reads, qt); p != nil {
					byMM[mm] = p
					plans = append(plans, p)
				}
			}
			return []ir.Stmt{s}
		})
		if len(plans) == 0 {
			return k.Body, nil
		}
		narrow := gpu.Narrowed(plans)
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			switch x := s.(type) {
			case *ir.MatMul:
				if p := byMM[x]; p != nil {
					return lowerMFMA(p)
				}
			case *ir.Alloc:
				if t, ok := narrow[x.Name]; ok {
					c := *x
					c.T = t
					return []ir.Stmt{&c}
				}
			case *ir.Store:
				if t, ok := narrow[x.Buf]; ok {
					return []ir.Stmt{&ir.Store{Buf: x.Buf, Index: x.Index, Value: gpu.NarrowValue(x.Value, t)}}
				}
			}
			return []ir.Stmt{s}
		}), nil
	})
}

// mfmaFragment is where MFMA 16x16x16 leaves its accumulator (ir.MFMA):
// element c of lane l at row 4*(l/16) + c, column l%16 of the 16-column
// n-tile.
var mfmaFragment = &gpu.Fragment{M: mfmaM, N: mfmaN, Regs: 4,
	Row: func(lane, c ir.Expr) ir.Expr { return add(mul(ir.Bin(ir.Div, lane, i32(16)), i32(4)), c) },
	Col: func(lane, c ir.Expr) ir.Expr { return ir.Bin(ir.Rem, lane, i32(16)) },
}

func i32(v int) ir.Expr { return ir.Int(int64(v)) }

func add(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Add, x, y) }
func mul(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Mul, x, y) }

// lowerMFMA writes the matmul as per-wavefront MFMA fragment code: lane
// (j = lane % 16, g = lane / 16) of n-tile nt holds A[j][k0+4g+r],
// B[k0+4g+r][n0+j] and C[4g+r][n0+j] (ir.MFMA's layout).
func lowerMFMA(p *gpu.MatrixPlan) []ir.Stmt {
	mm := p.MM
	var out []ir.Stmt
	lane := ir.R("lane", ir.I32)
	var guard *gpu.FiniteGuard
	if p.GuardsB() {
		guard = &gpu.FiniteGuard{P: p, F: mfmaFragment, Lanes: Layer.Lanes, Acc: "fd"}
	}
	j, g, nt, n0 := ir.R("mj", ir.I32), ir.R("mg", ir.I32), ir.R("nt", ir.I32), ir.R("n0", ir.I32)
	body := []ir.Stmt{
		&ir.Let{Name: "mj", Value: ir.Bin(ir.Rem, lane, i32(16))},
		&ir.Let{Name: "mg", Value: ir.Bin(ir.Div, lane, i32(16))},
		&ir.Let{Name: "n0", Value: mul(nt, i32(mfmaN))},
		&ir.Alloc{Name: "fa", T: ir.I32, Size: 2}, &ir.Alloc{Name: "fb", T: ir.I32, Size: 2},
		&ir.Alloc{Name: "fd", T: ir.F32, Size: 4},
	}
	cAt := func(r int) ir.Expr { return add(mul(add(mul(g, i32(4)), i32(r)), i32(mm.N)), add(n0, j)) }
	// fd starts from zero; an accumulating matmul adds it to C after the
	// k steps (gpu.FragmentStore): C's sum over a KV sequence is then one
	// f32 addition a tile, not a chain through every matrix instruction.
	for r := 0; r < 4; r++ {
		body = append(body, &ir.Store{Buf: "fd", Index: i32(r), Value: ir.Float(0)})
	}
	c0 := ir.R("c0", ir.I32)
	kc := func(r int) ir.Expr { return add(c0, i32(r)) }
	n := add(n0, j)
	kLoop := []ir.Stmt{
		&ir.Let{Name: "c0", Value: add(mul(ir.R("ks", ir.I32), i32(mfmaK)), mul(g, i32(4)))},
		&ir.Store{Buf: "fb", Index: i32(0), Value: gpu.Pack2(p.BRaw(kc(0), n), p.BRaw(kc(1), n))},
		&ir.Store{Buf: "fb", Index: i32(1), Value: gpu.Pack2(p.BRaw(kc(2), n), p.BRaw(kc(3), n))},
	}
	fill := kLoop
	var idxs []ir.Expr
	for r := 0; r < 4; r++ {
		idxs = append(idxs, add(mul(j, i32(mm.K)), kc(r)))
	}
	lets, parts := p.SplitA("a", idxs)
	kLoop = append(kLoop, lets...)
	// One MFMA per part of A, the smallest first.
	for k := len(parts) - 1; k >= 0; k-- {
		v := parts[k]
		kLoop = append(kLoop,
			&ir.Store{Buf: "fa", Index: i32(0), Value: gpu.Pack2(v[0], v[1])},
			&ir.Store{Buf: "fa", Index: i32(1), Value: gpu.Pack2(v[2], v[3])},
			&ir.MFMA{D: "fd", A: "fa", B: "fb", In: p.In})
	}
	ks := &ir.For{Var: "ks", Lo: i32(0), Hi: i32(mm.K / mfmaK), Kind: ir.Serial, Body: &ir.Block{Stmts: kLoop}}
	if guard != nil {
		body = append(body, guard.Guard(fill, []ir.Expr{ir.Ld("fb", ir.I32, i32(0)), ir.Ld("fb", ir.I32, i32(1))}, ks, lane, n0)...)
	} else {
		body = append(body, ks)
	}
	for r := 0; r < 4; r++ {
		body = append(body, gpu.FragmentStore(mm, cAt(r), r))
	}
	lanes := &ir.For{Var: "lane", Lo: i32(0), Hi: i32(Layer.Lanes), Kind: ir.Lanes, Body: &ir.Block{Stmts: body}}
	return append(out, &ir.For{Var: "nt", Lo: i32(0), Hi: i32(mm.N / mfmaN), Kind: ir.Spread, Body: &ir.Block{Stmts: []ir.Stmt{lanes}}})
}
