package cuda

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets/gpu"
)

// Tensor-core shape: mma.sync m16n8k16 (PTX ISA, "Matrix fragments for
// mma.m16n8k16"): A is 16 x 16, B 16 x 8, C and D 16 x 8, per warp.
const (
	mmaM, mmaN, mmaK = 16, 8, 16
)

// UseMMA maps matmul statements onto tensor cores when their shapes fit
// (M = 16, N a multiple of 8, K a multiple of 16) and their B operand
// holds only values of a tensor-core dtype (every store into it converts
// an element of that dtype to f32, or stores 0): that array is narrowed to
// the dtype, and so is A when it qualifies too; an A that holds computed
// f32 values (P) is split into a high and a low half-precision part, two
// mmas, so P·V keeps about twice the dtype's precision. A B operand of
// 8-bit KV codes (HalfExact) is staged as the codes, one byte each, and
// converted exactly in registers to the kernel's query dtype (its q or
// q_nope argument) when tensor cores take that. Each n-tile of 8
// output columns is one spread iteration whose lanes hold the PTX
// fragments. A zeroskip matmul (or one whose k extent is not all of K)
// first zeroes the B rows that no A row in use reaches, so a NaN there
// cannot become 0·NaN inside the mma. Other matmuls are left to
// simt-matmul.
func UseMMA(m *ir.Module) (*ir.Module, error) {
	shape := Layer.Matrix[0]
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		stores := gpu.ArrayStores(k.Body)
		reads := gpu.ArrayReads(k.Body)
		var plans []*gpu.MatrixPlan
		qt := gpu.QueryType(k)
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if mm, ok := s.(*ir.MatMul); ok {
				if p := gpu.PlanMatrix(mm, shape, stores, reads, qt); p != nil {
					plans = append(plans, p)
				}
			}
			return []ir.Stmt{s}
		})
		if len(plans) == 0 {
			return k.Body, nil
		}
		narrow := gpu.Narrowed(plans)
		byMM := map[*ir.MatMul]*gpu.MatrixPlan{}
		for _, p := range plans {
			byMM[p.MM] = p
		}
		body := Layer.KeepAccInRegisters(k.Body, byMM, mmaFragment)
		return ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
			switch x := s.(type) {
			case *ir.MatMul:
				if p := byMM[x]; p != nil {
					return lowerMMA(p)
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

// mmaFragment is where mma.m16n8k16 leaves its accumulator (PTX ISA
// "Matrix Fragments for mma.m16n8k16"): element c of lane l at row
// l/4 + 8*(c/2), column 2*(l%4) + c%2 of the 8-column n-tile.
var mmaFragment = &gpu.Fragment{M: mmaM, N: mmaN, Regs: 4,
	Row: func(lane, c ir.Expr) ir.Expr {
		return add(ir.Bin(ir.Div, lane, i32(4)), mul(ir.Bin(ir.Div, c, i32(2)), i32(8)))
	},
	Col: func(lane, c ir.Expr) ir.Expr {
		return add(mul(ir.Bin(ir.Rem, lane, i32(4)), i32(2)), ir.Bin(ir.Rem, c, i32(2)))
	},
}

func i32(v int) ir.Expr { return ir.Int(int64(v)) }

func add(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Add, x, y) }
func mul(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Mul, x, y) }

// lowerMMA writes the matmul as per-warp fragment code.
func lowerMMA(p *gpu.MatrixPlan) []ir.Stmt {
	mm := p.MM
	out := p.ZeroUnreached()
	lane := ir.R("lane", ir.I32)
	gid, tig, nt := ir.R("gid", ir.I32), ir.R("tig", ir.I32), ir.R("nt", ir.I32)
	n0 := ir.R("n0", ir.I32)
	var body []ir.Stmt
	let := func(name string, e ir.Expr) { body = append(body, &ir.Let{Name: name, Value: e}) }
	let("gid", ir.Bin(ir.Div, lane, i32(4)))
	let("tig", ir.Bin(ir.Rem, lane, i32(4)))
	let("n0", mul(nt, i32(mmaN)))
	body = append(body, &ir.Alloc{Name: "fa", T: ir.I32, Size: 4}, &ir.Alloc{Name: "fb", T: ir.I32, Size: 2},
		&ir.Alloc{Name: "fd", T: ir.F32, Size: 4})
	// Accumulator register c of the lane: row gid + 8*(c/2), column
	// n0 + 2*tig + c%2.
	cAt := func(c int) ir.Expr {
		return add(mul(add(gid, i32(8*(c/2))), i32(mm.N)), add(n0, add(mul(tig, i32(2)), i32(c%2))))
	}
	for c := 0; c < 4; c++ {
		var v ir.Expr = ir.Float(0)
		switch {
		case p.Reg != nil:
			v = ir.Ld(p.Reg.Name(), ir.F32, p.Reg.At(i32(c)))
		case mm.Accumulate:
			v = ir.Ld(mm.C, ir.F32, cAt(c))
		}
		body = append(body, &ir.Store{Buf: "fd", Index: i32(c), Value: v})
	}
	ks := ir.R("ks", ir.I32)
	c0 := ir.R("c0", ir.I32)
	bAt := p.BRaw
	n := add(n0, gid)
	kLoop := []ir.Stmt{&ir.Let{Name: "c0", Value: add(mul(ks, i32(mmaK)), mul(tig, i32(2)))}}
	k0 := mul(ks, i32(mmaK))
	if p.B == p.In {
		// B's two 8x8 halves (k0..k0+7, k0+8..k0+15) by ldmatrix from the
		// rows lanes 0..15 name: K stored [N, K] gives b0/b1 as they lie;
		// V stored [K, N] needs .trans.
		r16 := ir.Bin(ir.Rem, lane, i32(16))
		if mm.TransB {
			row := add(n0, ir.Bin(ir.Rem, lane, i32(8)))
			kLoop = append(kLoop, &ir.LdMatrix{Dst: "fb", Src: mm.B, N: 2,
				Index: add(mul(row, i32(mm.K)), add(k0, mul(ir.Bin(ir.Div, r16, i32(8)), i32(8))))})
		} else {
			kLoop = append(kLoop, &ir.LdMatrix{Dst: "fb", Src: mm.B, N: 2, Trans: true,
				Index: add(mul(add(k0, r16), i32(mm.N)), n0)})
		}
	} else {
		// 8-bit codes (ldmatrix moves 16-bit elements) and the scalar
		// schedule: two elements per register, converted where read.
		kLoop = append(kLoop,
			&ir.Store{Buf: "fb", Index: i32(0), Value: gpu.Pack2(bAt(c0, n), bAt(add(c0, i32(1)), n))},
			&ir.Store{Buf: "fb", Index: i32(1), Value: gpu.Pack2(bAt(add(c0, i32(8)), n), bAt(add(c0, i32(9)), n))})
	}
	// The lane's eight A elements: (row, column) of register i/2, low
	// half first (PTX fragment layout for A).
	g8 := add(gid, i32(8))
	at := func(col int) ir.Expr { return add(c0, i32(col)) }
	elems := [8][2]ir.Expr{{gid, at(0)}, {gid, at(1)}, {g8, at(0)}, {g8, at(1)}, {gid, at(8)}, {gid, at(9)}, {g8, at(8)}, {g8, at(9)}}
	// A narrow A is one part; an f32 A is split into parts in the dtype
	// whose sum is the element to about f32 precision (gpu.MatrixPlan's
	// Parts), so that the product rounds once, in f32.
	var idxs []ir.Expr
	for _, e := range elems {
		idxs = append(idxs, add(mul(e[0], i32(mm.K)), e[1]))
	}
	lets, parts := p.SplitA("a", idxs)
	kLoop = append(kLoop, lets...)
	step := func(v []ir.Expr) []ir.Stmt {
		var out []ir.Stmt
		if p.ANarrow {
			// The four 8x8 quarters of A's 16 x 16 tile by one ldmatrix.x4:
			// lane l names row l%16 at column k0 + 8*(l/16), so matrices
			// 0..3 are a0..a3 of the fragment.
			idx := add(mul(ir.Bin(ir.Rem, lane, i32(16)), i32(mm.K)), add(k0, mul(ir.Bin(ir.Div, lane, i32(16)), i32(8))))
			out = append(out, &ir.LdMatrix{Dst: "fa", Src: mm.A, N: 4, Index: idx})
		} else {
			for reg := 0; reg < 4; reg++ {
				out = append(out, &ir.Store{Buf: "fa", Index: i32(reg), Value: gpu.Pack2(v[2*reg], v[2*reg+1])})
			}
		}
		return append(out, &ir.MMA{D: "fd", A: "fa", B: "fb", In: p.In})
	}
	// One mma per part, the smallest first.
	for k := len(parts) - 1; k >= 0; k-- {
		kLoop = append(kLoop, step(parts[k])...)
	}
	body = append(body, &ir.For{Var: "ks", Lo: i32(0), Hi: i32(mm.K / mmaK), Kind: ir.Serial, Body: &ir.Block{Stmts: kLoop}})
	for c := 0; c < 4; c++ {
		if p.Reg != nil {
			body = append(body, &ir.Store{Buf: p.Reg.Name(), Index: p.Reg.At(i32(c)), Value: ir.Ld("fd", ir.F32, i32(c))})
			continue
		}
		body = append(body, &ir.Store{Buf: mm.C, Index: cAt(c), Value: ir.Ld("fd", ir.F32, i32(c))})
	}
	if p.Reg != nil {
		return append(out, p.Reg.Loop(body))
	}
	lanes := &ir.For{Var: "lane", Lo: i32(0), Hi: i32(Layer.Lanes), Kind: ir.Lanes, Body: &ir.Block{Stmts: body}}
	out = append(out, &ir.For{Var: "nt", Lo: i32(0), Hi: i32(mm.N / mmaN), Kind: ir.Spread, Body: &ir.Block{Stmts: []ir.Stmt{lanes}}})
	return out
}
