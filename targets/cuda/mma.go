package cuda

import (
	"fmt"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets/gpu"
)

// Tensor-core shape: mma.sync m16n8k16 (PTX ISA, "Matrix fragments for
// mma.m16n8k16"): A is 16 x 16, B 16 x 8, C and D 16 x 8, per warp.
const (
	mmaM, mmaN, mmaK = 16, 8, 16
)

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

// NarrowOperands narrows the operands of the matmuls tensor cores can
// take: those whose shapes fit (M = 16, N a multiple of 8, K a multiple of
// 16) and whose B operand holds only values of a tensor-core dtype (every
// store into it converts an element of that dtype to f32, or stores 0).
// That array is narrowed to the dtype (its stores keep the loaded element
// unconverted), and so is A when it qualifies too; an A that holds
// computed f32 values (P) stays f32. A B operand of 8-bit KV codes
// (HalfExact) is narrowed to the codes, one byte each, when the kernel's
// query dtype (its q or q_nope argument) is one tensor cores take. The
// matmuls read the narrowed arrays widened until use-mma rewrites them.
func NarrowOperands(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		stores := gpu.ArrayStores(k.Body)
		reads := gpu.ArrayReads(k.Body)
		var plans []*gpu.MatrixPlan
		qt := gpu.QueryType(k)
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if mm, ok := s.(*ir.MatMul); ok {
				if p := gpu.PlanMatrix(mm, Layer.Matrix[0], stores, reads, qt); p != nil {
					plans = append(plans, p)
				}
			}
			return []ir.Stmt{s}
		})
		narrow := gpu.Narrowed(plans)
		if len(narrow) == 0 {
			return k.Body, nil
		}
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			switch x := s.(type) {
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

// UseMMA maps the matmuls whose operands narrow-operands narrowed onto
// tensor cores: B of a tensor-core dtype, or of 8-bit codes converted
// exactly in registers to the kernel's query dtype; A of the same dtype,
// or f32 values (P) split into a high and a low half-precision part, two
// mmas, so P·V keeps about twice the dtype's precision. Each n-tile of 8
// output columns is one spread iteration whose lanes hold the PTX
// fragments, reading and writing C around the mmas (acc-registers keeps
// an accumulating C in registers instead). A zeroskip matmul (or one whose
// k extent is not all of K) checks its B fragments first and, when the
// warp finds a non-finite element, computes its accumulators exactly
// instead (gpu.FiniteGuard), so a hidden position's NaN cannot become
// 0·NaN inside the mma. Other matmuls are left to simt-matmul.
func UseMMA(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		elems := passes.ElemTypes(k)
		local := map[string]bool{}
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if a, ok := s.(*ir.Alloc); ok {
				local[a.Name] = true
			}
			return []ir.Stmt{s}
		})
		reads := gpu.ArrayReads(k.Body)
		qt := gpu.QueryType(k)
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if mm, ok := s.(*ir.MatMul); ok {
				if p := narrowedMMA(mm, elems, local, reads, qt); p != nil {
					return p.lower()
				}
			}
			return []ir.Stmt{s}
		}), nil
	})
}

// narrowedMMA is the tensor-core plan of a matmul whose operands
// narrow-operands narrowed (B a local array of a tensor-core dtype or of
// 8-bit codes, gpu.PlanMatrix's conditions), or nil.
func narrowedMMA(mm *ir.MatMul, elems map[string]ir.Type, local map[string]bool, reads map[string]int, query ir.Type) *mmaPlan {
	if mm.M != mmaM || mm.N%mmaN != 0 || mm.K%mmaK != 0 || mm.A == mm.B || !local[mm.B] || reads[mm.B] > 0 {
		return nil
	}
	b := elems[mm.B]
	r := ir.StorageOf(b)
	if r == nil || !(r.TensorCore || r.HalfExact) {
		return nil
	}
	in := b
	if !r.TensorCore {
		if q := ir.StorageOf(query); q == nil || !q.TensorCore {
			return nil
		}
		in = query
	}
	return &mmaPlan{mm: mm, in: in, b: b, aNarrow: local[mm.A] && elems[mm.A] == in && reads[mm.A] == 0}
}

type mmaPlan struct {
	mm      *ir.MatMul
	in      ir.Type // the tensor-core dtype
	b       ir.Type // what B holds: in, or 8-bit codes converted to in
	aNarrow bool    // A holds values of in (else f32, split hi + lo)
}

func i32(v int) ir.Expr { return ir.Int(int64(v)) }

func add(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Add, x, y) }
func mul(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Mul, x, y) }

// pack2 packs two 16-bit patterns into one mma operand register, the first
// in the low half (PTX: the lower-indexed element in the low bits).
var pack2 = gpu.Pack2

// aF32 reads A's element idx as f32.
func (p *mmaPlan) aF32(idx ir.Expr) ir.Expr {
	if p.aNarrow {
		return ir.Cvt(ir.F32, ir.Ld(p.mm.A, p.in, idx))
	}
	return ir.Ld(p.mm.A, ir.F32, idx)
}

// lower writes the matmul as per-warp fragment code.
func (p *mmaPlan) lower() []ir.Stmt {
	mm := p.mm
	r := ir.StorageOf(p.in)
	var out []ir.Stmt
	bIdx := func(k, n ir.Expr) ir.Expr {
		if mm.TransB {
			return add(mul(n, i32(mm.K)), k)
		}
		return add(mul(k, i32(mm.N)), n)
	}
	var guard *gpu.FiniteGuard
	if mp := (&gpu.MatrixPlan{MM: mm, In: p.in, B: p.b, ANarrow: p.aNarrow}); mp.GuardsB() {
		guard = &gpu.FiniteGuard{P: mp, F: mmaFragment, Lanes: Layer.Lanes, Acc: "fd"}
	}
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
	// fd starts from zero; an accumulating matmul adds it to C after the
	// k steps (gpu.FragmentStore): C's sum over a KV sequence is then one
	// f32 addition a tile, not a chain through every matrix instruction.
	for c := 0; c < 4; c++ {
		body = append(body, &ir.Store{Buf: "fd", Index: i32(c), Value: ir.Float(0)})
	}
	ks := ir.R("ks", ir.I32)
	c0 := ir.R("c0", ir.I32)
	raw := func(arr string, idx ir.Expr) ir.Expr { return &ir.Bitcast{To: r.Carrier, X: ir.Ld(arr, p.in, idx)} }
	bAt := func(k, n ir.Expr) ir.Expr { return raw(mm.B, bIdx(k, n)) }
	if p.b != p.in {
		// An 8-bit code converted in registers, exactly.
		bAt = func(k, n ir.Expr) ir.Expr {
			code := &ir.Bitcast{To: ir.StorageOf(p.b).Carrier, X: ir.Ld(mm.B, p.b, bIdx(k, n))}
			return ir.CodeToHalf(p.b, p.in, code)
		}
	}
	n := add(n0, gid)
	kLoop := []ir.Stmt{&ir.Let{Name: "c0", Value: add(mul(ks, i32(mmaK)), mul(tig, i32(2)))}}
	k0 := mul(ks, i32(mmaK))
	if p.b == p.in {
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
			&ir.Store{Buf: "fb", Index: i32(0), Value: pack2(bAt(c0, n), bAt(add(c0, i32(1)), n))},
			&ir.Store{Buf: "fb", Index: i32(1), Value: pack2(bAt(add(c0, i32(8)), n), bAt(add(c0, i32(9)), n))})
	}
	fill := kLoop
	// The lane's eight A elements: (row, column) of register i/2, low
	// half first (PTX fragment layout for A).
	g8 := add(gid, i32(8))
	at := func(col int) ir.Expr { return add(c0, i32(col)) }
	elems := [8][2]ir.Expr{{gid, at(0)}, {gid, at(1)}, {g8, at(0)}, {g8, at(1)}, {gid, at(8)}, {gid, at(9)}, {g8, at(8)}, {g8, at(9)}}
	// A narrow A is one part; an f32 A is split into parts in the dtype
	// whose sum is the element to about f32 precision (see pParts), so
	// that the product rounds once, in f32.
	nParts := 1
	if !p.aNarrow {
		nParts = pParts(r)
	}
	parts := make([][]ir.Expr, nParts)
	for k := range parts {
		parts[k] = make([]ir.Expr, 8)
	}
	for i, e := range elems {
		idx := add(mul(e[0], i32(mm.K)), e[1])
		if p.aNarrow {
			parts[0][i] = raw(mm.A, idx)
			continue
		}
		// Part k holds what parts 0..k-1 left of the element; each
		// remainder is exact (x and its rounding are within a factor 2:
		// Sterbenz).
		x := fmt.Sprintf("a%d", i)
		rest := x
		kLoop = append(kLoop, &ir.Let{Name: x, Value: ir.Ld(mm.A, ir.F32, idx)})
		for k := range parts {
			part := fmt.Sprintf("%s_p%d", x, k)
			kLoop = append(kLoop, &ir.Let{Name: part, Value: r.Narrow(ir.R(rest, ir.F32))})
			parts[k][i] = ir.R(part, r.Carrier)
			if k+1 < len(parts) {
				next := fmt.Sprintf("%s_r%d", x, k)
				kLoop = append(kLoop, &ir.Let{Name: next, Value: ir.Bin(ir.Sub, ir.R(rest, ir.F32), r.Widen(ir.R(part, r.Carrier)))})
				rest = next
			}
		}
	}
	step := func(v []ir.Expr) []ir.Stmt {
		var out []ir.Stmt
		if p.aNarrow {
			// The four 8x8 quarters of A's 16 x 16 tile by one ldmatrix.x4:
			// lane l names row l%16 at column k0 + 8*(l/16), so matrices
			// 0..3 are a0..a3 of the fragment.
			idx := add(mul(ir.Bin(ir.Rem, lane, i32(16)), i32(mm.K)), add(k0, mul(ir.Bin(ir.Div, lane, i32(16)), i32(8))))
			out = append(out, &ir.LdMatrix{Dst: "fa", Src: mm.A, N: 4, Index: idx})
		} else {
			for reg := 0; reg < 4; reg++ {
				out = append(out, &ir.Store{Buf: "fa", Index: i32(reg), Value: pack2(v[2*reg], v[2*reg+1])})
			}
		}
		return append(out, &ir.MMA{D: "fd", A: "fa", B: "fb", In: p.in})
	}
	// One mma per part, the smallest first.
	for k := len(parts) - 1; k >= 0; k-- {
		kLoop = append(kLoop, step(parts[k])...)
	}
	ksLoop := &ir.For{Var: "ks", Lo: i32(0), Hi: i32(mm.K / mmaK), Kind: ir.Serial, Body: &ir.Block{Stmts: kLoop}}
	if guard != nil {
		body = append(body, guard.Guard(fill, []ir.Expr{ir.Ld("fb", ir.I32, i32(0)), ir.Ld("fb", ir.I32, i32(1))}, ksLoop, lane, n0)...)
	} else {
		body = append(body, ksLoop)
	}
	for c := 0; c < 4; c++ {
		body = append(body, gpu.FragmentStore(mm, cAt(c), c))
	}
	lanes := &ir.For{Var: "lane", Lo: i32(0), Hi: i32(Layer.Lanes), Kind: ir.Lanes, Body: &ir.Block{Stmts: body}}
	out = append(out, &ir.For{Var: "nt", Lo: i32(0), Hi: i32(mm.N / mmaN), Kind: ir.Spread, Body: &ir.Block{Stmts: []ir.Stmt{lanes}}})
	return out
}

// pParts is how many parts of tensor-core dtype r an f32 A element is
// split into: enough that their sum holds about 22 significant bits (f16:
// two parts of 11, the rest below 2^-22 of the element; bf16: three of
// 8), so f16/bf16 outputs of P·V stay within half an ulp.
func pParts(r *ir.DTypeInfo) int {
	n := 1
	for n*(r.MantBits+1) < 22 {
		n++
	}
	return n
}
