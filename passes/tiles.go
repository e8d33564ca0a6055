package passes

import (
	"github.com/attnc/attnc/ir"
)

// Helpers that target schedule passes share: matmul and reduce statements
// written as loops, and guard folding.

// DotOrder says how MatMulLoops nests a product's loops.
type DotOrder int

const (
	// RowsThenK runs, for each row m, the contraction k outside the
	// output columns n when B is not transposed (a row of B scaled by
	// A[m, k] is added to C's row: a zero A element skips the whole row),
	// and a dot product over k (innermost, DotKind) when it is.
	RowsThenK DotOrder = iota
	// DotPerElement gives every output element (m, n) its own dot product
	// over k (a serial loop of dotKind) inside spreads that run to the
	// static M and N, the extents as a guard: a perfect (m, n) nest for
	// targets that need static shapes.
	DotPerElement
)

// MatMulLoops writes mm as spread loops over its extents. dotKind is the
// kind of the innermost loop of a dot product (vector on a CPU). bElem is
// the element type of B's array (f32, or a storage type the loads widen).
func MatMulLoops(mm *ir.MatMul, bElem ir.Type, order DotOrder, dotKind ir.LoopKind) []ir.Stmt {
	return MatMulLoopsOf(mm, ir.F32, bElem, order, dotKind)
}

// MatMulLoopsOf is MatMulLoops for an A of element type aElem too (f32 or
// a storage type, widened where read).
func MatMulLoopsOf(mm *ir.MatMul, aElem, bElem ir.Type, order DotOrder, dotKind ir.LoopKind) []ir.Stmt {
	i32 := func(v int) ir.Expr { return ir.Int(int64(v)) }
	m, n, k := ir.R("mm_m", ir.I32), ir.R("mm_n", ir.I32), ir.R("mm_k", ir.I32)
	aAt := func(k ir.Expr) ir.Expr {
		return LoadF32(mm.A, aElem, 1, ir.Bin(ir.Add, ir.Bin(ir.Mul, m, i32(mm.K)), k))
	}
	bAt := func(k ir.Expr) ir.Expr {
		if mm.TransB {
			if r := mm.RotB; r != nil {
				return rotatedB(mm, r, bElem, n, k)
			}
			return LoadF32(mm.B, bElem, 1, mm.BAt(n, k))
		}
		return LoadF32(mm.B, bElem, 1, mm.BAt(k, n))
	}
	cAt := ir.Bin(ir.Add, ir.Bin(ir.Mul, m, i32(mm.N)), n)
	prod := func(a, b ir.Expr) ir.Expr {
		if mm.ZeroSkip {
			return ir.Sel(ir.IsNegZero(a), ir.Float(0), ir.Bin(ir.Mul, a, b))
		}
		return ir.Bin(ir.Mul, a, b)
	}
	loop := func(v string, hi ir.Expr, kind ir.LoopKind, body ...ir.Stmt) *ir.For {
		return &ir.For{Var: v, Lo: i32(0), Hi: hi, Kind: kind, Body: &ir.Block{Stmts: body}}
	}
	if order == RowsThenK && !mm.TransB {
		// The row updates run on C itself, or, when the matmul
		// accumulates, on a row mm_row started from zero and added to C
		// once per row: as for the dot products below, C's sum over a KV
		// sequence is then one addition per call, not one per product.
		// mm_row is declared in the row loop's body, so two such
		// matmuls in one block do not declare it twice.
		var out []ir.Stmt
		dst, dstAt := mm.C, ir.Expr(cAt)
		if mm.Accumulate {
			dst, dstAt = "mm_row", n
		} else {
			out = append(out, loop("mm_m", mm.MExt, ir.Spread, loop("mm_n", mm.NExt, ir.Spread,
				&ir.Store{Buf: mm.C, Index: cAt, Value: ir.Float(0)})))
		}
		a := ir.R("mm_a", ir.F32)
		row := ir.Stmt(loop("mm_n", mm.NExt, ir.Spread,
			&ir.Store{Buf: dst, Index: dstAt, Value: ir.Bin(ir.Add, ir.Ld(dst, ir.F32, dstAt), ir.Bin(ir.Mul, a, bAt(k)))}))
		if mm.ZeroSkip {
			// Skip, don't multiply: a -0 A element (a hidden position's
			// weight) adds nothing, even against NaN or infinite B elements.
			row = &ir.If{Cond: ir.Un(ir.Not, ir.IsNegZero(a)), Then: &ir.Block{Stmts: []ir.Stmt{row}}}
		}
		updates := loop("mm_k", mm.KExt, ir.Serial, &ir.Let{Name: "mm_a", Value: aAt(k)}, row)
		if !mm.Accumulate {
			return append(out, loop("mm_m", mm.MExt, ir.Spread, updates))
		}
		return append(out, loop("mm_m", mm.MExt, ir.Spread,
			&ir.Alloc{Name: dst, T: ir.F32, Size: mm.N},
			loop("mm_n", mm.NExt, ir.Spread, &ir.Store{Buf: dst, Index: dstAt, Value: ir.Float(0)}),
			updates,
			loop("mm_n", mm.NExt, ir.Spread, &ir.Store{Buf: mm.C, Index: cAt,
				Value: ir.Bin(ir.Add, ir.Ld(mm.C, ir.F32, cAt), ir.Ld(dst, ir.F32, dstAt))})))
	}
	// The dot product starts from zero and an accumulating matmul adds C
	// once, at the store: C's running sum is then one chain of additions
	// per call (a KV tile), not one per product. Over a KV sequence that
	// repeats the same terms (a page named many times) the per-product
	// chain drifts with its length, each addition rounding alike.
	dot := ir.R("mm_dot", ir.F32)
	var sum ir.Expr = dot
	if mm.Accumulate {
		sum = ir.Bin(ir.Add, ir.Ld(mm.C, ir.F32, cAt), dot)
	}
	elem := []ir.Stmt{
		&ir.Var{Name: "mm_dot", Init: ir.Float(0)},
		loop("mm_k", mm.KExt, dotKind, &ir.Assign{Name: "mm_dot", Value: ir.Bin(ir.Add, dot, prod(aAt(k), bAt(k)))}),
		&ir.Store{Buf: mm.C, Index: cAt, Value: sum},
	}
	if order == DotPerElement {
		guard := ir.Bin(ir.And, ir.Bin(ir.Lt, m, mm.MExt), ir.Bin(ir.Lt, n, mm.NExt))
		return []ir.Stmt{loop("mm_m", i32(mm.M), ir.Spread, loop("mm_n", i32(mm.N), ir.Spread,
			&ir.If{Cond: guard, Then: &ir.Block{Stmts: elem}}))}
	}
	return []ir.Stmt{loop("mm_m", mm.MExt, ir.Spread, loop("mm_n", mm.NExt, ir.Spread, elem...))}
}

// rotatedB is element (n, k) of a transposed B turned by r (ir.RotB), as
// an expression: both of the pair's elements and the angle's cosine and
// sine are read at indices clamped into the row and the tables (the
// selects evaluate both sides), and the one the column needs is selected.
func rotatedB(mm *ir.MatMul, r *ir.RotB, bElem ir.Type, n, k ir.Expr) ir.Expr {
	i32 := func(v int) ir.Expr { return ir.Int(int64(v)) }
	rotated := ir.Bin(ir.Lt, k, i32(2*r.Half))
	// lo: k is its pair's first element (RotB's a); partner: the pair's
	// other; i: the pair's angle in the tables' row.
	var lo, partner, i ir.Expr
	if r.Pairs == ir.RopeInterleaved {
		lo = ir.Bin(ir.Eq, ir.Bin(ir.And, k, i32(1)), i32(0))
		partner = ir.Sel(rotated, ir.Bin(ir.Xor, k, i32(1)), k)
		i = ir.Sel(rotated, ir.Bin(ir.Shr, k, i32(1)), i32(0))
	} else {
		lo = ir.Bin(ir.Lt, k, i32(r.Half))
		partner = ir.Sel(lo, ir.Bin(ir.Add, k, i32(r.Half)), ir.Sel(rotated, ir.Bin(ir.Sub, k, i32(r.Half)), k))
		i = ir.Sel(lo, k, ir.Sel(rotated, ir.Bin(ir.Sub, k, i32(r.Half)), i32(0)))
	}
	at := ir.Bin(ir.Add, ir.Bin(ir.Mul, n, i32(r.Half)), i)
	x, y := LoadF32(mm.B, bElem, 1, mm.BAt(n, k)), LoadF32(mm.B, bElem, 1, mm.BAt(n, partner))
	c, s := ir.Ld(r.Cos, ir.F32, at), ir.Ld(r.Sin, ir.F32, at)
	turned := ir.Sel(lo, ir.Bin(ir.Sub, ir.Bin(ir.Mul, x, c), ir.Bin(ir.Mul, y, s)),
		ir.Bin(ir.Add, ir.Bin(ir.Mul, x, c), ir.Bin(ir.Mul, y, s)))
	return ir.Sel(rotated, turned, x)
}

// ReduceLoop writes r as a running var over a loop of the given kind: var
// NAME_acc = identity; for VAR in LO .. HI { NAME_acc = op(NAME_acc, VALUE) };
// let NAME = NAME_acc. A value select(VAR < e, x, identity) becomes x over
// VAR < min(HI, e) (the guard folded into the bound).
func ReduceLoop(r *ir.Reduce, kind ir.LoopKind) []ir.Stmt {
	t := r.Value.Type()
	id := r.Op.Identity(t)
	hi, val := r.Hi, r.Value
	if s, ok := val.(*ir.Select); ok {
		if c, ok := s.Y.(*ir.Const); ok && constEqual(c, id) {
			if e, rest, ok := guardOn(s.Cond, r.Var); ok && rest == nil {
				hi, val = ir.Bin(ir.Min, hi, e), s.X
			}
		}
	}
	accName := r.Name + "_acc"
	acc := ir.R(accName, t)
	return []ir.Stmt{
		&ir.Var{Name: accName, Init: id},
		&ir.For{Var: r.Var, Lo: r.Lo, Hi: hi, Kind: kind, Body: &ir.Block{Stmts: []ir.Stmt{
			&ir.Assign{Name: accName, Value: ir.Bin(r.Op.BinOp(), acc, val)}}}},
		&ir.Let{Name: r.Name, Value: acc},
	}
}

func constEqual(a, b *ir.Const) bool {
	if a.T != b.T {
		return false
	}
	if a.T.IsFloat() {
		return a.Float == b.Float
	}
	return a.Int == b.Int
}

// guardOn recognizes a loop guard on v: cond is v < e, or (v < e) & rest
// with rest not nil; e must not use v.
func guardOn(cond ir.Expr, v string) (e, rest ir.Expr, ok bool) {
	b, isBin := cond.(*ir.Binary)
	if !isBin {
		return nil, nil, false
	}
	if b.Op == ir.And && b.X.Type() == ir.Bool {
		if e, r, ok := guardOn(b.X, v); ok && r == nil {
			return e, b.Y, true
		}
		return nil, nil, false
	}
	if b.Op != ir.Lt {
		return nil, nil, false
	}
	if r, isRef := b.X.(*ir.Ref); !isRef || r.Name != v || Uses(b.Y, v) {
		return nil, nil, false
	}
	return b.Y, nil, true
}

// Uses reports whether e refers to name.
func Uses(e ir.Expr, name string) bool {
	found := false
	ir.VisitExpr(e, func(n ir.Expr) {
		if r, ok := n.(*ir.Ref); ok && r.Name == name {
			found = true
		}
	})
	return found
}

// FoldGuard splits `for v in lo .. hi { if (v < e) [& rest] { A } else { B } }`
// (the If is the whole body) into `for v in lo .. min(hi, e) { A, or if
// rest { A } else { B } }` and `for v in max(lo, e) .. hi { B }` (dropped
// without an Else). The first loop keeps f's Ranges (its variable still
// means what it meant); the second, which runs B, drops them. It returns
// nil when f has no such guard.
func FoldGuard(f *ir.For) []ir.Stmt {
	if len(f.Body.Stmts) != 1 {
		return nil
	}
	s, ok := f.Body.Stmts[0].(*ir.If)
	if !ok {
		return nil
	}
	e, rest, ok := guardOn(s.Cond, f.Var)
	if !ok {
		return nil
	}
	first := *f
	first.Hi = ir.Bin(ir.Min, f.Hi, e)
	first.Body = s.Then
	if rest != nil {
		first.Body = &ir.Block{Stmts: []ir.Stmt{&ir.If{Cond: rest, Then: s.Then, Else: s.Else, Tag: s.Tag}}}
	}
	out := []ir.Stmt{&first}
	if s.Else != nil && len(s.Else.Stmts) > 0 {
		second := *f
		second.Lo = ir.Bin(ir.Max, f.Lo, e)
		second.Ranges = nil
		second.Next = nil
		second.Body = ir.CloneBlock(s.Else)
		out = append(out, &second)
	}
	return out
}

// HasLoop reports whether b holds a For statement.
func HasLoop(b *ir.Block) bool {
	found := false
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if _, ok := s.(*ir.For); ok {
			found = true
		}
		return []ir.Stmt{s}
	})
	return found
}

// LoadF32 reads lanes consecutive elements of buf (element type elem)
// at idx as f32 (a vector for lanes > 1): a load, widened when elem is a
// storage type.
func LoadF32(buf string, elem ir.Type, lanes int, idx ir.Expr) ir.Expr {
	l := ir.Ld(buf, ir.Vec(elem, lanes), idx)
	if elem == ir.F32 {
		return l
	}
	return ir.Cvt(ir.Vec(ir.F32, lanes), l)
}

// ElemTypes maps k's buffer params and the arrays its body declares to
// their element types.
func ElemTypes(k *ir.Kernel) map[string]ir.Type {
	out := map[string]ir.Type{}
	for _, p := range k.Params {
		if p.Buffer {
			out[p.Name] = p.Elem
		}
	}
	ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Alloc:
			out[x.Name] = x.T
		case *ir.Malloc:
			out[x.Name] = x.T
		}
		return []ir.Stmt{s}
	})
	return out
}

// MapKernels applies f to every kernel body (for passes outside this
// package).
func MapKernels(m *ir.Module, f func(*ir.Kernel) (*ir.Block, error)) (*ir.Module, error) {
	return mapKernels(m, f)
}

// Accesses lists the buffers and arrays statement s (with everything
// nested in it) reads and writes.
func Accesses(s ir.Stmt) (reads, writes map[string]bool) {
	reads, writes = map[string]bool{}, map[string]bool{}
	ir.MapStmts(&ir.Block{Stmts: []ir.Stmt{s}}, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Store:
			writes[x.Buf] = true
		case *ir.Copy:
			writes[x.Dst] = true
			reads[x.Src] = true
		case *ir.MMA:
			reads[x.A], reads[x.B], reads[x.D], writes[x.D] = true, true, true, true
		case *ir.MFMA:
			reads[x.A], reads[x.B], reads[x.D], writes[x.D] = true, true, true, true
		case *ir.LdMatrix:
			reads[x.Src], writes[x.Dst] = true, true
		case *ir.MatMul:
			reads[x.A], reads[x.B], writes[x.C] = true, true, true
			if x.BRows != "" {
				reads[x.BRows] = true
			}
			if x.RotB != nil {
				reads[x.RotB.Cos], reads[x.RotB.Sin] = true, true
			}
			if x.Accumulate {
				reads[x.C] = true
			}
		case *ir.CallStmt:
			for _, a := range x.Args {
				if r, ok := a.(*ir.Ref); ok {
					reads[r.Name], writes[r.Name] = true, true
				}
			}
		case *ir.Free:
			writes[x.Name] = true
		}
		return []ir.Stmt{s}
	})
	ir.MapStmtExprs(&ir.Block{Stmts: []ir.Stmt{s}}, func(e ir.Expr) ir.Expr {
		ir.VisitExpr(e, func(n ir.Expr) {
			if l, ok := n.(*ir.Load); ok {
				reads[l.Buf] = true
			}
		})
		return e
	})
	return reads, writes
}
