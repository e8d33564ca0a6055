package gpu

import (
	"github.com/attnc/attnc/ir"
)

// Register-resident accumulators. The P·V matmul accumulates into an array
// C (acc[16, N]) across the KV tile loop; held in shared memory, every tile
// reads and writes all of it twice (matrix instruction in and out) plus
// once for the rescale by exp(m_old - m_new). KeepAccInRegisters keeps C
// in the matrix instruction's accumulator registers instead, as
// FlashAttention-2 does: a Private array whose elements each thread owns in
// the target's fragment layout (Fragment). Inside the loop the matrix
// instruction reads and writes the registers, and every other statement
// that touches C must be a row nest (for row spread 0..16 { lets, ifs, for
// d spread 0..N { C[row*N + d] and stores of element (row, d) } }), which
// is rewritten onto the fragment layout. When the work item's other
// statements touching C are row nests too (the zeroing, the normalized
// store of o), their column loops run on the registers, what they do per
// row stays a row nest, and C is gone from shared memory; otherwise C is
// loaded into the registers before the loop and stored back after it. A
// loop with any other access to C keeps C in shared memory.

// MaxAccRegisters caps the accumulator registers a thread may hold (f32
// elements of C per thread, 4 per n-tile its warp runs): value head dims up
// to 512 with 4 warps, MLA's 512-wide latent included (deepseek_v3_mla:
// 254 registers on sm_80/sm_90 with ptxas 11.8, no spills; its shared
// memory drops from 123200 to 90432 bytes, 2 blocks per SM on sm_90).
const MaxAccRegisters = 64

// Fragment is where a matrix instruction leaves its accumulator: an M x N
// tile of C per warp, Regs elements per lane, element c of a lane at row
// Row(lane, c) and column n0 + Col(lane, c) of the n-tile starting at
// column n0.
type Fragment struct {
	M, N, Regs int
	Row, Col   func(lane, c ir.Expr) ir.Expr
}

// AccRegs is a matmul's accumulator kept in registers.
type AccRegs struct {
	name  string // the Private array
	tiles int    // n-tiles of the fragment's N columns
	per   int    // elements per thread: Regs per n-tile the thread's warp runs
	l     *Layer
	f     *Fragment
}

// Name is the Private array that holds the accumulator.
func (a *AccRegs) Name() string { return a.name }

// Names the fragment loops bind.
const (
	fragWarp = "aw" // the warp's spread iteration (= warp index after map-threads)
	fragIter = "ai" // the warp's n-tile: nt = aw + warps*ai
	fragElem = "ac" // the lane's accumulator element 0..3
)

// newAccRegs returns the register plan for C of an accumulating matmul of
// the fragment's shape, or nil when C is too wide.
func (ctx *accCtx) newAccRegs(mm *ir.MatMul) *AccRegs {
	if !mm.Accumulate || mm.M != ctx.f.M || mm.N%ctx.f.N != 0 {
		return nil
	}
	tiles := mm.N / ctx.f.N
	warps := ctx.l.Warps()
	per := (tiles + warps - 1) / warps * ctx.f.Regs
	if per > MaxAccRegisters {
		return nil
	}
	return &AccRegs{name: mm.C + "_reg", tiles: tiles, per: per, l: ctx.l, f: ctx.f}
}

// accCtx is the layer and fragment layout a register plan is made for.
type accCtx struct {
	l *Layer
	f *Fragment
}

// At is the Private array's element c (an expression 0..Regs-1) of the
// lane in the current fragment loop iteration: slot*(per) + ai*Regs + c,
// slot the thread that owns it (map-threads runs spread iteration aw on
// warp aw, so slot = aw*lanes + lane).
func (a *AccRegs) At(c ir.Expr) ir.Expr {
	slot := add(mul(ir.R(fragWarp, ir.I32), i32(a.l.Lanes)), ir.R("lane", ir.I32))
	return add(mul(slot, i32(a.per)), add(mul(ir.R(fragIter, ir.I32), i32(a.f.Regs)), c))
}

// loop runs body once per (warp, n-tile) the warp owns, with lane and nt
// bound: for aw spread 0..warps { for lane lanes { for ai { let nt; if nt
// < tiles { body } } } }.
func (a *AccRegs) Loop(body []ir.Stmt) ir.Stmt {
	warps := a.l.Warps()
	nt := add(ir.R(fragWarp, ir.I32), mul(ir.R(fragIter, ir.I32), i32(warps)))
	iter := &ir.For{Var: fragIter, Lo: i32(0), Hi: i32(a.per / a.f.Regs), Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
		&ir.Let{Name: "nt", Value: nt},
		&ir.If{Cond: ir.Bin(ir.Lt, ir.R("nt", ir.I32), i32(a.tiles)), Then: &ir.Block{Stmts: body}},
	}}}
	lanes := &ir.For{Var: "lane", Lo: i32(0), Hi: i32(a.l.Lanes), Kind: ir.Lanes, Body: &ir.Block{Stmts: []ir.Stmt{iter}}}
	return &ir.For{Var: fragWarp, Lo: i32(0), Hi: i32(warps), Kind: ir.Spread, Body: &ir.Block{Stmts: []ir.Stmt{lanes}}}
}

// elems runs body per accumulator element of the lane, with row and col
// bound to its row and column of C (the fragment's layout).
func (a *AccRegs) elems(row, col string, body []ir.Stmt) []ir.Stmt {
	lane, c := ir.R("lane", ir.I32), ir.R(fragElem, ir.I32)
	stmts := []ir.Stmt{
		&ir.Let{Name: row, Value: a.f.Row(lane, c)},
		&ir.Let{Name: col, Value: add(mul(ir.R("nt", ir.I32), i32(a.f.N)), a.f.Col(lane, c))},
	}
	return []ir.Stmt{&ir.For{Var: fragElem, Lo: i32(0), Hi: i32(a.f.Regs), Kind: ir.Serial,
		Body: &ir.Block{Stmts: append(stmts, body...)}}}
}

// copyLoop moves C to the registers (in) or back (out).
func (a *AccRegs) copyLoop(mm *ir.MatMul, in bool) ir.Stmt {
	cIdx := add(mul(ir.R("acc_row", ir.I32), i32(mm.N)), ir.R("acc_col", ir.I32))
	reg := a.At(ir.R(fragElem, ir.I32))
	st := &ir.Store{Buf: mm.C, Index: cIdx, Value: ir.Ld(a.name, ir.F32, reg)}
	if in {
		st = &ir.Store{Buf: a.name, Index: reg, Value: ir.Ld(mm.C, ir.F32, cIdx)}
	}
	return a.Loop(a.elems("acc_row", "acc_col", []ir.Stmt{st}))
}

// KeepAccInRegisters rewrites the KV tile loops of body whose accumulating
// matmuls (one per tile kind classify-tiles made) have a register plan in
// the fragment layout f (see above), recording the plan on their
// MatrixPlans (Reg); loops it cannot
// rewrite are left as they are. Where every other statement of the work
// item that touches C is a row nest too (the zeroing before the loop, the
// normalizing store after it), those run on the registers as well and C
// leaves shared memory; else C is loaded into the registers before the
// loop and stored back after it.
func (l *Layer) KeepAccInRegisters(body *ir.Block, byMM map[*ir.MatMul]*MatrixPlan, f *Fragment) *ir.Block {
	c := &accCtx{l: l, f: f}
	body = ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok && f.Kind == ir.Parallel {
			if item := c.accInItem(f, byMM); item != nil {
				return []ir.Stmt{item}
			}
		}
		return []ir.Stmt{s}
	})
	return ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		f, ok := s.(*ir.For)
		if !ok || f.Tag != ir.TagKVTile {
			return []ir.Stmt{s}
		}
		loop, a, plans := c.accInLoop(f, byMM)
		if loop == nil || plans[0].Reg != nil {
			return []ir.Stmt{s} // not possible, or done with its item
		}
		for _, p := range plans {
			p.Reg = a
		}
		return []ir.Stmt{
			&ir.Alloc{Name: a.name, T: ir.F32, Size: a.l.BlockThreads * a.per, Private: true},
			a.copyLoop(p0(plans).MM, true),
			loop,
			a.copyLoop(p0(plans).MM, false),
		}
	})
}

func p0(plans []*MatrixPlan) *MatrixPlan { return plans[0] }

// accInItem rewrites a work item whose KV tile loops and every other
// statement touching their accumulator C can run on registers, dropping
// C; it returns nil when some statement cannot.
func (ctx *accCtx) accInItem(item *ir.For, byMM map[*ir.MatMul]*MatrixPlan) ir.Stmt {
	var a *AccRegs
	var mm *ir.MatMul
	var plans []*MatrixPlan
	loops := map[int]ir.Stmt{}
	for i, st := range item.Body.Stmts {
		f, ok := st.(*ir.For)
		if !ok || f.Tag != ir.TagKVTile {
			continue
		}
		loop, la, lp := ctx.accInLoop(f, byMM)
		if loop == nil || (a != nil && la.name != a.name) {
			return nil
		}
		a, mm, plans = la, lp[0].MM, append(plans, lp...)
		loops[i] = loop
	}
	if a == nil {
		return nil
	}
	var out []ir.Stmt
	for i, st := range item.Body.Stmts {
		if loop, ok := loops[i]; ok {
			out = append(out, loop)
			continue
		}
		if al, ok := st.(*ir.Alloc); ok && al.Name == mm.C {
			out = append(out, &ir.Alloc{Name: a.name, T: ir.F32, Size: a.l.BlockThreads * a.per, Private: true})
			continue
		}
		if !touches(st, mm.C) {
			out = append(out, st)
			continue
		}
		rows, frag := a.splitRowNest(st, mm)
		if frag == nil {
			return nil
		}
		out = append(out, rows, frag)
	}
	// C must be gone: its alloc replaced, every access but the planned
	// matmuls' (which lower onto the registers) rewritten.
	c := *item
	c.Body = ir.MapStmts(&ir.Block{Stmts: out}, func(st ir.Stmt) []ir.Stmt {
		if x, ok := st.(*ir.MatMul); ok && byMM[x] != nil && byMM[x].MM.C == mm.C {
			return nil
		}
		return []ir.Stmt{st}
	})
	if touches(&c, mm.C) {
		return nil
	}
	c.Body = &ir.Block{Stmts: out}
	for _, p := range plans {
		p.Reg = a
	}
	return &c
}

// accInLoop rewrites one KV tile loop onto the register plan of its
// accumulating matmuls, or returns nil loop.
func (ctx *accCtx) accInLoop(f *ir.For, byMM map[*ir.MatMul]*MatrixPlan) (ir.Stmt, *AccRegs, []*MatrixPlan) {
	var first *ir.MatMul
	ir.MapStmts(f.Body, func(st ir.Stmt) []ir.Stmt {
		if mm, ok := st.(*ir.MatMul); ok && first == nil && byMM[mm] != nil && mm.Accumulate {
			first = mm
		}
		return []ir.Stmt{st}
	})
	if first == nil {
		return nil, nil, nil
	}
	a := ctx.newAccRegs(first)
	if a == nil {
		return nil, nil, nil
	}
	var plans []*MatrixPlan
	var rewrite func([]ir.Stmt) ([]ir.Stmt, bool)
	rewrite = func(stmts []ir.Stmt) ([]ir.Stmt, bool) {
		var out []ir.Stmt
		for _, st := range stmts {
			if !touches(st, first.C) {
				out = append(out, st)
				continue
			}
			switch x := st.(type) {
			case *ir.MatMul:
				p := byMM[x]
				if p == nil || !x.Accumulate || x.C != first.C || x.M != first.M || x.N != first.N ||
					x.A == first.C || x.B == first.C {
					return nil, false
				}
				plans = append(plans, p)
				out = append(out, st)
			case *ir.If:
				if exprTouches(x.Cond, first.C) {
					return nil, false
				}
				c := *x
				then, ok := rewrite(x.Then.Stmts)
				if !ok {
					return nil, false
				}
				c.Then = &ir.Block{Stmts: then}
				if x.Else != nil {
					els, ok := rewrite(x.Else.Stmts)
					if !ok {
						return nil, false
					}
					c.Else = &ir.Block{Stmts: els}
				}
				out = append(out, &c)
			case *ir.Block:
				inner, ok := rewrite(x.Stmts)
				if !ok {
					return nil, false
				}
				out = append(out, &ir.Block{Stmts: inner})
			default:
				conv := a.rowNest(st, first)
				if conv == nil {
					return nil, false
				}
				out = append(out, conv)
			}
		}
		return out, true
	}
	stmts, ok := rewrite(f.Body.Stmts)
	if !ok {
		return nil, nil, nil
	}
	loop := *f
	loop.Body = &ir.Block{Stmts: stmts}
	return &loop, a, plans
}

// splitRowNest splits a row nest over C into the nest without its column
// loops (what it does per row: the softmax state, the lse) and the column
// loops on the fragment layout (the registers), or returns nil frag when
// s is not such a nest.
func (a *AccRegs) splitRowNest(s ir.Stmt, mm *ir.MatMul) (rows, frag ir.Stmt) {
	f, ok := s.(*ir.For)
	if !ok || f.Kind != ir.Spread || !isConst(f.Lo, 0) || !isConst(f.Hi, mm.M) {
		return nil, nil
	}
	n := &nestRewrite{c: mm.C, reg: a.name, row: f.Var, width: mm.N, at: a.At(ir.R(fragElem, ir.I32)), dropRowWork: true}
	body, ok := n.outer(f.Body.Stmts)
	if !ok || n.col == "" {
		return nil, nil
	}
	col := n.col
	rowBody := ir.MapStmts(f.Body, func(st ir.Stmt) []ir.Stmt {
		if x, ok := st.(*ir.For); ok && x.Var == col && touches(x, mm.C) {
			return nil
		}
		return []ir.Stmt{st}
	})
	r := *f
	r.Body = rowBody
	frag = a.Loop(a.elems(n.row, n.col, body))
	// The row part runs first: it must not write what the column loops
	// read, nor read what they write, and nothing may leave the nest early.
	rowLoads, rowStores, rowExits := accesses(&r)
	fragLoads, fragStores, _ := accesses(frag)
	if rowExits || overlaps(rowStores, fragLoads) || overlaps(fragStores, rowLoads) {
		return nil, nil
	}
	return &r, frag
}

// accesses lists the buffers s loads and stores, and whether it holds a
// continue or return.
func accesses(s ir.Stmt) (loads, stores map[string]bool, exits bool) {
	loads, stores = map[string]bool{}, map[string]bool{}
	b := &ir.Block{Stmts: []ir.Stmt{s}}
	ir.MapStmts(b, func(st ir.Stmt) []ir.Stmt {
		switch x := st.(type) {
		case *ir.Store:
			stores[x.Buf] = true
		case *ir.Continue, *ir.Return:
			exits = true
		}
		return []ir.Stmt{st}
	})
	ir.MapStmtExprs(b, func(e ir.Expr) ir.Expr {
		ir.VisitExpr(e, func(x ir.Expr) {
			if l, ok := x.(*ir.Load); ok {
				loads[l.Buf] = true
			}
		})
		return e
	})
	return loads, stores, exits
}

func overlaps(a, b map[string]bool) bool {
	for n := range a {
		if b[n] {
			return true
		}
	}
	return false
}

// rowNest rewrites a row nest over C onto the fragment layout, or returns
// nil when s is not one.
func (a *AccRegs) rowNest(s ir.Stmt, mm *ir.MatMul) ir.Stmt {
	f, ok := s.(*ir.For)
	if !ok || f.Kind != ir.Spread || !isConst(f.Lo, 0) || !isConst(f.Hi, mm.M) {
		return nil
	}
	n := &nestRewrite{c: mm.C, reg: a.name, row: f.Var, width: mm.N, at: a.At(ir.R(fragElem, ir.I32))}
	body, ok := n.outer(f.Body.Stmts)
	if !ok || n.col == "" {
		return nil
	}
	return a.Loop(a.elems(n.row, n.col, body))
}

// nestRewrite rewrites the statements of one row nest.
type nestRewrite struct {
	c, reg   string  // C and its register array
	row, col string  // the nest's row and column variables
	width    int     // C's row length
	at       ir.Expr // the register element of (row, col)
	// dropRowWork drops the statements outside the column loops that do
	// not touch C (splitRowNest keeps them in the row nest) instead of
	// refusing them.
	dropRowWork bool
}

// outer rewrites the statements around the column loop: lets and ifs that
// do not touch C, and the column loops, whose bodies are inlined.
func (n *nestRewrite) outer(stmts []ir.Stmt) ([]ir.Stmt, bool) {
	var out []ir.Stmt
	for _, s := range stmts {
		if _, isLet := s.(*ir.Let); !isLet && n.dropRowWork && !touches(s, n.c) {
			continue
		}
		switch x := s.(type) {
		case *ir.Let:
			if touches(x, n.c) {
				return nil, false
			}
			out = append(out, x)
		case *ir.If:
			if exprTouches(x.Cond, n.c) {
				return nil, false
			}
			c := *x
			then, ok := n.outer(x.Then.Stmts)
			if !ok {
				return nil, false
			}
			c.Then = &ir.Block{Stmts: then}
			if x.Else != nil {
				els, ok := n.outer(x.Else.Stmts)
				if !ok {
					return nil, false
				}
				c.Else = &ir.Block{Stmts: els}
			}
			out = append(out, &c)
		case *ir.For:
			if x.Kind != ir.Spread || !isConst(x.Lo, 0) || !isConst(x.Hi, n.width) || (n.col != "" && n.col != x.Var) {
				return nil, false
			}
			n.col = x.Var
			inner, ok := n.inner(x.Body.Stmts)
			if !ok {
				return nil, false
			}
			out = append(out, inner...)
		default:
			return nil, false
		}
	}
	return out, true
}

// inner rewrites the column loop's body: lets, ifs and stores of C, whose
// every access to C is at (row, col).
func (n *nestRewrite) inner(stmts []ir.Stmt) ([]ir.Stmt, bool) {
	var out []ir.Stmt
	ok := true
	expr := func(e ir.Expr) ir.Expr {
		return ir.MapExpr(e, func(x ir.Expr) ir.Expr {
			if l, isLd := x.(*ir.Load); isLd && l.Buf == n.c {
				if !n.here(l.Index) {
					ok = false
				}
				return ir.Ld(n.reg, l.T, n.at)
			}
			return x
		})
	}
	for _, s := range stmts {
		switch x := s.(type) {
		case *ir.Let:
			out = append(out, &ir.Let{Name: x.Name, Value: expr(x.Value)})
		case *ir.Store:
			if x.Buf != n.c {
				// Another buffer's element (row, col): once per element
				// on the fragment layout as in the nest.
				if exprTouches(x.Index, n.c) {
					return nil, false
				}
				out = append(out, &ir.Store{Buf: x.Buf, Index: x.Index, Value: expr(x.Value)})
				continue
			}
			if !n.here(x.Index) {
				return nil, false
			}
			out = append(out, &ir.Store{Buf: n.reg, Index: n.at, Value: expr(x.Value)})
		case *ir.If:
			c := *x
			c.Cond = expr(x.Cond)
			then, thenOK := n.inner(x.Then.Stmts)
			if !thenOK {
				return nil, false
			}
			c.Then = &ir.Block{Stmts: then}
			if x.Else != nil {
				els, elseOK := n.inner(x.Else.Stmts)
				if !elseOK {
					return nil, false
				}
				c.Else = &ir.Block{Stmts: els}
			}
			out = append(out, &c)
		default:
			return nil, false
		}
	}
	return out, ok
}

// here reports whether idx is row*width + col.
func (n *nestRewrite) here(idx ir.Expr) bool {
	b, ok := idx.(*ir.Binary)
	if !ok || b.Op != ir.Add {
		return false
	}
	m, ok := b.X.(*ir.Binary)
	if !ok || m.Op != ir.Mul || !isRef(m.X, n.row) || !isConst(m.Y, n.width) {
		return false
	}
	return isRef(b.Y, n.col)
}

func isConst(e ir.Expr, v int) bool {
	c, ok := e.(*ir.Const)
	return ok && c.Int == int64(v)
}

func isRef(e ir.Expr, name string) bool {
	r, ok := e.(*ir.Ref)
	return ok && r.Name == name
}

// touches reports whether s (and what it holds) reads or writes buffer
// name.
func touches(s ir.Stmt, name string) bool {
	found := false
	ir.MapStmts(&ir.Block{Stmts: []ir.Stmt{s}}, func(st ir.Stmt) []ir.Stmt {
		switch x := st.(type) {
		case *ir.Store:
			found = found || x.Buf == name
		case *ir.MatMul:
			found = found || x.A == name || x.B == name || x.C == name
		case *ir.Copy:
			found = found || x.Dst == name || x.Src == name
		case *ir.LdMatrix:
			found = found || x.Dst == name || x.Src == name
		case *ir.MMA:
			found = found || x.A == name || x.B == name || x.D == name
		}
		return []ir.Stmt{st}
	})
	if found {
		return true
	}
	ir.MapStmtExprs(&ir.Block{Stmts: []ir.Stmt{s}}, func(e ir.Expr) ir.Expr {
		found = found || exprTouches(e, name)
		return e
	})
	return found
}

// exprTouches reports whether e loads from buffer name.
func exprTouches(e ir.Expr, name string) bool {
	found := false
	ir.VisitExpr(e, func(x ir.Expr) {
		if l, ok := x.(*ir.Load); ok && l.Buf == name {
			found = true
		}
	})
	return found
}
