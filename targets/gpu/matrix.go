package gpu

import (
	"fmt"

	"github.com/attnc/attnc/ir"
)

// What a matrix-core rewrite (CUDA's use-mma, HIP's use-mfma) decides the
// same way whatever the instruction: which matmuls it takes, which
// operand arrays it narrows, how an f32 A is split into half-precision
// parts, and how a skipping matmul keeps hidden positions out
// (FiniteGuard). The fragment layouts are the targets' own.

// MatrixPlan is a matmul a matrix rewrite takes.
type MatrixPlan struct {
	MM *ir.MatMul
	// In is the matrix instruction's input dtype (f16 or bf16); B is what
	// the B array holds: In, or 8-bit codes converted to In in registers.
	In, B ir.Type
	// ANarrow says A holds values of In (else f32, split into parts).
	ANarrow bool
}

// QueryType is the element type of kernel k's queries (its q or q_nope
// argument), or Void.
func QueryType(k *ir.Kernel) ir.Type {
	for _, name := range []string{"q", "q_nope"} {
		if p := k.Param(name); p != nil {
			return p.Elem
		}
	}
	return ir.Void
}

// ArrayReads counts the loads of each buffer outside matmul statements.
func ArrayReads(b *ir.Block) map[string]int {
	out := map[string]int{}
	ir.MapStmtExprs(b, func(e ir.Expr) ir.Expr {
		ir.VisitExpr(e, func(n ir.Expr) {
			if l, ok := n.(*ir.Load); ok {
				out[l.Buf]++
			}
		})
		return e
	})
	return out
}

// PlanMatrix says whether a matrix instruction of shape s takes mm: M is
// s.M, N and K multiples of s.N and s.K, and B holds only values of a
// matrix-core dtype (every store converts an element of it to f32, or
// stores 0) and is read nowhere else — or 8-bit codes, when the kernel's
// queries are of a matrix-core dtype to convert them to. A qualifies as
// narrow when it holds only values of that dtype too. stores are
// ArrayStores, reads ArrayReads of the kernel.
func PlanMatrix(mm *ir.MatMul, s MatrixShape, stores map[string][]ir.Expr, reads map[string]int, query ir.Type) *MatrixPlan {
	if mm.M != s.M || mm.N%s.N != 0 || mm.K%s.K != 0 || mm.A == mm.B || mm.RotB != nil {
		return nil
	}
	b := NarrowType(stores[mm.B])
	if b == ir.Void || reads[mm.B] > 0 {
		return nil
	}
	in := b
	if !ir.StorageOf(b).TensorCore {
		// 8-bit codes: f16/bf16 queries take the matrix cores after an
		// exact conversion; f32 queries keep f32 arithmetic (simt).
		if r := ir.StorageOf(query); r == nil || !r.TensorCore {
			return nil
		}
		in = query
	}
	a := NarrowType(stores[mm.A])
	return &MatrixPlan{MM: mm, In: in, B: b, ANarrow: a == in && reads[mm.A] == 0}
}

// Narrowed are the element types the plans' operand arrays take: B's
// dtype, and A's where it is narrow.
func Narrowed(plans []*MatrixPlan) map[string]ir.Type {
	out := map[string]ir.Type{}
	for _, p := range plans {
		out[p.MM.B] = p.B
		if p.ANarrow {
			out[p.MM.A] = p.In
		}
	}
	return out
}

// AF32 reads A's element idx as f32.
func (p *MatrixPlan) AF32(idx ir.Expr) ir.Expr {
	if p.ANarrow {
		return ir.Cvt(ir.F32, ir.Ld(p.MM.A, p.In, idx))
	}
	return ir.Ld(p.MM.A, ir.F32, idx)
}

// BIndex is the index of B's element (k, n) (B stored [N, K] when TransB).
func (p *MatrixPlan) BIndex(k, n ir.Expr) ir.Expr {
	if p.MM.TransB {
		return add(mul(n, i32(p.MM.K)), k)
	}
	return add(mul(k, i32(p.MM.N)), n)
}

// Raw is the bits of a narrow array's element as In's carrier.
func (p *MatrixPlan) Raw(arr string, idx ir.Expr) ir.Expr {
	return &ir.Bitcast{To: ir.StorageOf(p.In).Carrier, X: ir.Ld(arr, p.In, idx)}
}

// BRaw is the bits of B's element (k, n) as In's carrier: as stored, or an
// 8-bit code converted exactly in registers.
func (p *MatrixPlan) BRaw(k, n ir.Expr) ir.Expr {
	if p.B == p.In {
		return p.Raw(p.MM.B, p.BIndex(k, n))
	}
	code := &ir.Bitcast{To: ir.StorageOf(p.B).Carrier, X: ir.Ld(p.MM.B, p.B, p.BIndex(k, n))}
	return ir.CodeToHalf(p.B, p.In, code)
}

// Parts is how many parts of In an f32 A element is split into: one for a
// narrow A; else enough that their sum holds about 22 significant bits
// (f16: two parts of 11, the rest below 2^-22 of the element; bf16: three
// of 8), so f16/bf16 outputs of P·V stay within half an ulp.
func (p *MatrixPlan) Parts() int {
	if p.ANarrow {
		return 1
	}
	r := ir.StorageOf(p.In)
	n := 1
	for n*(r.MantBits+1) < 22 {
		n++
	}
	return n
}

// SplitA reads A's elements at idxs into Parts() parts each (as In's
// carrier bits): parts[k][i] is part k of element i. For an f32 A the
// lets that compute them are returned (element i is named prefix+i): part
// k holds what parts 0..k-1 left of the element, each remainder exact (x
// and its rounding are within a factor 2: Sterbenz).
func (p *MatrixPlan) SplitA(prefix string, idxs []ir.Expr) (lets []ir.Stmt, parts [][]ir.Expr) {
	r := ir.StorageOf(p.In)
	parts = make([][]ir.Expr, p.Parts())
	for k := range parts {
		parts[k] = make([]ir.Expr, len(idxs))
	}
	for i, idx := range idxs {
		if p.ANarrow {
			parts[0][i] = p.Raw(p.MM.A, idx)
			continue
		}
		x := fmt.Sprintf("%s%d", prefix, i)
		rest := x
		lets = append(lets, &ir.Let{Name: x, Value: ir.Ld(p.MM.A, ir.F32, idx)})
		for k := range parts {
			part := fmt.Sprintf("%s_p%d", x, k)
			lets = append(lets, &ir.Let{Name: part, Value: r.Narrow(ir.R(rest, ir.F32))})
			parts[k][i] = ir.R(part, r.Carrier)
			if k+1 < len(parts) {
				next := fmt.Sprintf("%s_r%d", x, k)
				lets = append(lets, &ir.Let{Name: next, Value: ir.Bin(ir.Sub, ir.R(rest, ir.F32), r.Widen(ir.R(part, r.Carrier)))})
				rest = next
			}
		}
	}
	return lets, parts
}

// Pack2 packs two 16-bit patterns into one matrix operand register, the
// first in the low half.
func Pack2(lo, hi ir.Expr) ir.Expr {
	return ir.Bin(ir.Or, ir.Bin(ir.And, ir.Cvt(ir.I32, lo), i32(0xffff)), ir.Bin(ir.Shl, ir.Cvt(ir.I32, hi), i32(16)))
}

// Hidden positions inside a matrix instruction. P·V weighs each V row by a
// whole column of P, so a V row that some rows of the block see and others
// hide (weight -0) would reach the hiding rows as 0·NaN inside the
// instruction. A matmul that skips (zeroskip, or a k extent that is not all
// of K) therefore first loads its B fragments once to check them: while
// every B element of the warp's n-tile is finite, the matrix instructions
// are exact (a zero weight times a finite value adds nothing) and run as
// before; when one is not (a vote of the warp's lanes), the warp computes
// its accumulator elements instead as one dot product each over k < KExt
// in f32, skipping -0 weights: hidden positions never reach C and a
// visible position's NaN or inf does, as IEEE arithmetic gives it (no
// half-precision parts of the weight).

// GuardsB reports whether the matmul skips weights (zeroskip) or runs
// past its k extent: its fragment loop then checks B (FiniteGuard).
func (p *MatrixPlan) GuardsB() bool {
	kx, ok := p.MM.KExt.(*ir.Const)
	return p.MM.ZeroSkip || !ok || int(kx.Int) != p.MM.K
}

// FiniteGuard guards the matrix instructions of a fragment loop: fragment
// F, accumulator registers in Acc (F.Regs f32), warps of Lanes lanes.
type FiniteGuard struct {
	P     *MatrixPlan
	F     *Fragment
	Lanes int
	Acc   string
}

// nfVar is the lane's running "some B element is not finite" flag.
const nfVar = "b_nonfinite"

// Guard returns the statements that replace ksLoop, the loop of matrix
// instructions over k steps "ks" (ks from 0 to ksSteps): a first pass of
// the loop's B loads alone (fill, which leaves B's registers in regs, each
// two packed elements of In) folds the flag, an element being not finite
// when its exponent bits are all set; butterfly shuffles vote over the
// warp; then either ksLoop or the exact dot products, accumulated into the
// registers over k < KExt. n0 is the n-tile's
// first column.
func (g *FiniteGuard) Guard(fill []ir.Stmt, regs []ir.Expr, ksLoop *ir.For, lane, n0 ir.Expr) []ir.Stmt {
	r := ir.StorageOf(g.P.In)
	exp := int64((1<<r.ExpBits - 1) << r.MantBits)
	var nf ir.Expr = ir.R(nfVar, ir.I32)
	for _, x := range regs {
		for _, m := range []int64{exp, exp << 16} {
			mask := ir.Int(int64(int32(uint32(m))))
			nf = ir.Bin(ir.Or, nf, ir.Sel(ir.Bin(ir.Eq, ir.Bin(ir.And, x, mask), mask), i32(1), i32(0)))
		}
	}
	check := &ir.For{Var: ksLoop.Var, Lo: ksLoop.Lo, Hi: ksLoop.Hi, Kind: ir.Serial,
		Body: &ir.Block{Stmts: append(ir.CloneBlock(&ir.Block{Stmts: fill}).Stmts, &ir.Assign{Name: nfVar, Value: nf})}}
	out := []ir.Stmt{&ir.Var{Name: nfVar, Init: i32(0)}, check}
	vote := ir.Expr(ir.R(nfVar, ir.I32))
	for m, i := 1, 0; m < g.Lanes; m, i = m*2, i+1 {
		name := fmt.Sprintf("b_vote%d", i)
		out = append(out, &ir.Let{Name: name, Value: ir.Bin(ir.Or, vote, &ir.Shuffle{X: vote, Mask: m})})
		vote = ir.R(name, ir.I32)
	}
	mm := g.P.MM
	k := ir.R("ex_k", ir.I32)
	var exact, step []ir.Stmt
	for c := 0; c < g.F.Regs; c++ {
		row, col := fmt.Sprintf("ex_row%d", c), fmt.Sprintf("ex_col%d", c)
		a, b := fmt.Sprintf("ex_a%d", c), fmt.Sprintf("ex_b%d", c)
		exact = append(exact,
			&ir.Let{Name: row, Value: g.F.Row(lane, i32(c))},
			&ir.Let{Name: col, Value: add(n0, g.F.Col(lane, i32(c)))})
		acc := ir.Ld(g.Acc, ir.F32, i32(c))
		var next ir.Expr = ir.Bin(ir.Add, acc, ir.Bin(ir.Mul, ir.R(a, ir.F32), ir.R(b, ir.F32)))
		if mm.ZeroSkip {
			next = ir.Sel(ir.IsNegZero(ir.R(a, ir.F32)), acc, next)
		}
		step = append(step,
			&ir.Let{Name: a, Value: g.P.AF32(add(mul(ir.R(row, ir.I32), i32(mm.K)), k))},
			&ir.Let{Name: b, Value: r.Widen(g.P.BRaw(k, ir.R(col, ir.I32)))},
			&ir.Store{Buf: g.Acc, Index: i32(c), Value: next})
	}
	exact = append(exact, &ir.For{Var: "ex_k", Lo: i32(0), Hi: mm.KExt, Kind: ir.Serial, Body: &ir.Block{Stmts: step}})
	return append(out, &ir.If{Cond: ir.Bin(ir.Ne, vote, i32(0)), Then: &ir.Block{Stmts: exact},
		Else: &ir.Block{Stmts: []ir.Stmt{ksLoop}}})
}
