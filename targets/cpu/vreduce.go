package cpu

import (
	"fmt"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// VectorReduce writes the f32 reduce statements of KV tiles (the @kv_tile
// loops that hold a tile matmul: prefill's, and decode's, whose few rows
// each reduce a tile's scores) of each level's clone as explicit vector
// code of the level's width: a
// vector running value over whole L-lane blocks, a shuffle tree to one
// lane, and, when the value is guarded (select(VAR < e, x, identity)), the
// blocks wholly below e only and a scalar loop over the rest below e. The
// loop vectorizer cannot vectorize a float max (its select form needs
// no-NaN flags the kernels must not have), so without this the softmax
// max is a serial scalar chain. A maxnum reduce (ir.ReduceMaxNum: the
// softmax's tile max) combines with a > b ? a : b, one vmaxps on x86-64
// (a NaN element dropped), where max's NaN-propagating form takes two
// compares, an or of their masks and a blend: on Zen 5 those mask
// operations, not the loads, bounded prefill's max phase (2048-token
// causal prefill, 1 thread: 4% less time in bf16 at x86-64-v4-bf16, 10% at
// x86-64-amx without its tiles). A reduce over a range that is not static
// and a multiple of L, or whose value is not a lane-by-lane function of
// unit-stride loads and loop-invariant values, is left for lower-tiles.
func (mc *Machine) VectorReduce(m *ir.Module) (*ir.Module, error) {
	return mc.mapClones(m, "vector-reduce", func(k *ir.Kernel, l *Level) *ir.Kernel {
		c := *k
		c.Body = ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Tag != ir.TagKVTile || l.Lanes < 2 || !holdsMatMul(f.Body) {
				return []ir.Stmt{s}
			}
			t := *f
			t.Body = ir.MapStmts(f.Body, func(s ir.Stmt) []ir.Stmt {
				if r, ok := s.(*ir.Reduce); ok {
					if v := vectorReduce(r, l.Lanes); v != nil {
						return v
					}
				}
				return []ir.Stmt{s}
			})
			return []ir.Stmt{&t}
		})
		return &c
	})
}

// holdsMatMul reports whether b holds a matmul.
func holdsMatMul(b *ir.Block) bool {
	found := false
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if _, ok := s.(*ir.MatMul); ok {
			found = true
		}
		return []ir.Stmt{s}
	})
	return found
}

// vectorReduce is r as vector code of L lanes, or nil.
func vectorReduce(r *ir.Reduce, L int) []ir.Stmt {
	t := r.Value.Type()
	lo, okLo := r.Lo.(*ir.Const)
	hi, okHi := r.Hi.(*ir.Const)
	if t != ir.F32 || !okLo || !okHi || (hi.Int-lo.Int)%int64(L) != 0 || hi.Int-lo.Int < int64(L) {
		return nil
	}
	id := r.Op.Identity(t)
	value := r.Value
	var bound ir.Expr // the guard's e: only VAR < e counts
	if s, ok := value.(*ir.Select); ok {
		if c, ok := s.Y.(*ir.Const); ok && c.T == t && c.Float == id.Float {
			if b, ok := s.Cond.(*ir.Binary); ok && b.Op == ir.Lt {
				if v, ok := b.X.(*ir.Ref); ok && v.Name == r.Var && !passes.Uses(b.Y, r.Var) {
					value, bound = s.X, b.Y
				}
			}
		}
	}
	j0 := ir.R(r.Name+"_j0", ir.I32)
	vx, ok := vectorOf(value, r.Var, j0, L)
	if !ok {
		return nil
	}
	vt := ir.Vec(t, L)
	combine := func(a, b ir.Expr) ir.Expr { return ir.Bin(r.Op.BinOp(), a, b) }
	if r.Op == ir.ReduceMaxNum {
		// a > b ? a : b: one vmaxps / fmax, which drops a NaN b where Max
		// compares, tests both operands for NaN and selects twice.
		combine = func(a, b ir.Expr) ir.Expr { return ir.Sel(ir.Bin(ir.Gt, a, b), a, b) }
	}
	nb := int(hi.Int-lo.Int) / L
	var blocks ir.Expr = i32c(nb)
	if bound != nil {
		// The blocks wholly below the bound: clamp((e - lo) / L, 0, nb).
		blocks = ir.Bin(ir.Min, i32c(nb), ir.Bin(ir.Max, i32c(0), ir.Bin(ir.Div, addE(bound, i32c(-int(lo.Int))), i32c(L))))
	}
	acc := r.Name + "_vacc"
	b := r.Name + "_vb"
	out := []ir.Stmt{
		&ir.Var{Name: acc, Init: &ir.Const{T: vt, Float: id.Float}},
		&ir.For{Var: b, Lo: i32c(0), Hi: blocks, Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
			&ir.Let{Name: j0.Name, Value: addE(r.Lo, mulE(ir.R(b, ir.I32), L))},
			&ir.Assign{Name: acc, Value: combine(ir.R(acc, vt), vx)},
		}}},
	}
	if nb == 1 && bound != nil {
		// One block (a decode tile of L rows): an if on the bound, not a
		// loop of 0 or 1 iterations, whose trip count LLVM computes and
		// unrolls for (the same operations in the same order).
		out[1] = &ir.If{Cond: ir.Bin(ir.Le, addE(r.Lo, i32c(L)), bound), Then: &ir.Block{Stmts: []ir.Stmt{
			&ir.Let{Name: j0.Name, Value: r.Lo},
			&ir.Assign{Name: acc, Value: combine(ir.R(acc, vt), vx)},
		}}}
		blocks = ir.Sel(ir.Bin(ir.Le, addE(r.Lo, i32c(L)), bound), i32c(1), i32c(0))
	}
	// The shuffle tree: halves combined until one lane is left.
	var cur ir.Expr = ir.R(acc, vt)
	for n, step := L, 0; n > 1; n, step = n/2, step+1 {
		lowHalf, highHalf := make([]int, n/2), make([]int, n/2)
		for i := range lowHalf {
			lowHalf[i], highHalf[i] = i, n/2+i
		}
		name := fmt.Sprintf("%s_h%d", r.Name, step)
		out = append(out, &ir.Let{Name: name, Value: combine(&ir.VShuffle{X: cur, Y: cur, Mask: lowHalf}, &ir.VShuffle{X: cur, Y: cur, Mask: highHalf})})
		cur = ir.R(name, ir.Vec(t, n/2))
	}
	if bound == nil {
		return append(out, &ir.Let{Name: r.Name, Value: cur})
	}
	// The positions below the bound past the whole blocks, one by one.
	rest := r.Name + "_acc"
	restAcc := ir.R(rest, t)
	return append(out,
		&ir.Var{Name: rest, Init: cur},
		&ir.For{Var: r.Var, Lo: addE(r.Lo, mulE(blocks, L)), Hi: ir.Bin(ir.Min, r.Hi, bound), Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
			&ir.Assign{Name: rest, Value: combine(restAcc, value)},
		}}},
		&ir.Let{Name: r.Name, Value: restAcc})
}

// vectorOf is e evaluated at v = j0 + lane for L lanes: loop-invariant
// parts broadcast, loads at unit stride in v as vector loads, arithmetic,
// compares and selects lane by lane. It fails on anything else (v itself,
// strided loads, calls, transcendental functions).
func vectorOf(e ir.Expr, v string, j0 ir.Expr, L int) (ir.Expr, bool) {
	if !passes.Uses(e, v) {
		if e.Type() == ir.Bool || e.Type().IsVector() {
			return nil, false
		}
		return ir.Splat(e, L), true
	}
	switch x := e.(type) {
	case *ir.Load:
		base, ok := unitStride(x.Index, v)
		if !ok || x.T.IsVector() || x.T.IsStorageOnly() {
			return nil, false
		}
		return ir.Ld(x.Buf, ir.Vec(x.T, L), addE(base, j0)), true
	case *ir.Binary:
		a, ok1 := vectorOf(x.X, v, j0, L)
		b, ok2 := vectorOf(x.Y, v, j0, L)
		if !ok1 || !ok2 || x.Op == ir.Div && x.X.Type().IsInt() || x.Op == ir.Rem || x.Op == ir.Shl || x.Op == ir.Shr {
			return nil, false
		}
		return ir.Bin(x.Op, a, b), true
	case *ir.Select:
		cond := x.Cond
		if passes.Uses(cond, v) {
			c, ok := vectorOf(cond, v, j0, L)
			if !ok {
				return nil, false
			}
			cond = c
		}
		a, ok1 := vectorOf(x.X, v, j0, L)
		b, ok2 := vectorOf(x.Y, v, j0, L)
		if !ok1 || !ok2 {
			return nil, false
		}
		return ir.Sel(cond, a, b), true
	}
	return nil, false
}

// unitStride returns base when idx is base + v (base not using v).
func unitStride(idx ir.Expr, v string) (ir.Expr, bool) {
	if r, ok := idx.(*ir.Ref); ok && r.Name == v {
		return i32c(0), true
	}
	b, ok := idx.(*ir.Binary)
	if !ok || b.Op != ir.Add || b.Type() != ir.I32 {
		return nil, false
	}
	if !passes.Uses(b.Y, v) {
		if base, ok := unitStride(b.X, v); ok {
			return addE(base, b.Y), true
		}
	}
	if !passes.Uses(b.X, v) {
		if base, ok := unitStride(b.Y, v); ok {
			return addE(b.X, base), true
		}
	}
	return nil, false
}
