package gpu

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// Register-resident accumulators. The P·V matmul accumulates into an array
// C (acc[16, N]) across the KV tile loop; held in shared memory, every tile
// reads and writes all of it twice (mma in, mma out) plus once for the
// rescale by exp(m_old - m_new). AccRegisters keeps C in the mma
// accumulator registers instead, as FlashAttention-2 does: a Private array
// whose elements each thread owns in the fragment layout. Inside the loop
// each tile's fragment (fd, summed from zero by its matrix instructions)
// is added to the registers (FragmentStore), and every other statement that
// touches C must be a row nest (for row spread 0..16 { lets, ifs, for d
// spread 0..N { C[row*N + d] and stores of element (row, d) } }), which is
// rewritten onto the fragment layout. When the work item's other
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
// column n0 (nt*N).
type Fragment struct {
	M, N, Regs int
	Row, Col   func(lane, c ir.Expr) ir.Expr
}

// AccRegisters is the pass that keeps the accumulator C of the fragment
// loops a target's matrix rewrite wrote for accumulating matmuls (in the
// layout f) in registers across their KV tile loops (see above).
func (l *Layer) AccRegisters(f *Fragment) func(*ir.Module) (*ir.Module, error) {
	ctx := &accCtx{l: l, f: f}
	return func(m *ir.Module) (*ir.Module, error) {
		return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
			return ctx.keepAccInRegisters(k.Body), nil
		})
	}
}

// accCtx is the layer and fragment layout the register plans are made for.
type accCtx struct {
	l *Layer
	f *Fragment
}

// fragLoop is a fragment loop a matrix rewrite wrote for a matmul: for nt
// in 0 .. N/f.N spread { for lane lanes { ...; fd[c] = 0; ks loop of
// matrix instructions; C[...] = C[...] + fd[c], or C[...] = fd[c] when it
// does not accumulate (FragmentStore) } }, C of f.M rows.
type fragLoop struct {
	loop       *ir.For
	c          string // the matmul's C
	n          int    // C's columns
	accumulate bool   // fd is added to C (else stored over it)
}

// fragmentOf returns the fragment loop s is, or nil.
func (ctx *accCtx) fragmentOf(s ir.Stmt) *fragLoop {
	f, ok := s.(*ir.For)
	if !ok || f.Var != "nt" || f.Kind != ir.Spread || !isConst(f.Lo, 0) || len(f.Body.Stmts) != 1 {
		return nil
	}
	hi, ok := f.Hi.(*ir.Const)
	if !ok {
		return nil
	}
	lanes, ok := f.Body.Stmts[0].(*ir.For)
	if !ok || lanes.Kind != ir.Lanes {
		return nil
	}
	fl := &fragLoop{loop: f, n: int(hi.Int) * ctx.f.N}
	for _, st := range lanes.Body.Stmts {
		if x, _, ok := fragmentAdd(st); ok {
			fl.c, fl.accumulate = x.Buf, true
			continue
		}
		x, ok := st.(*ir.Store)
		if !ok {
			continue
		}
		if l, ok := x.Value.(*ir.Load); ok && l.Buf == "fd" && x.Buf != "fd" {
			fl.c = x.Buf
		}
	}
	if fl.c == "" {
		return nil
	}
	return fl
}

// FragmentStore is the store of the lane's accumulator register fd[c]
// into C's element idx after a fragment loop's k steps: C[idx] = fd[c], or
// C[idx] + fd[c] for an accumulating matmul, whose fd starts from zero.
func FragmentStore(mm *ir.MatMul, idx ir.Expr, c int) ir.Stmt {
	var v ir.Expr = ir.Ld("fd", ir.F32, i32(c))
	if mm.Accumulate {
		v = ir.Bin(ir.Add, ir.Ld(mm.C, ir.F32, idx), v)
	}
	return &ir.Store{Buf: mm.C, Index: idx, Value: v}
}

// fragmentAdd reports whether st is FragmentStore's accumulating store,
// C[idx] = C[idx] + fd[c], and returns it and c.
func fragmentAdd(st ir.Stmt) (x *ir.Store, c int, ok bool) {
	x, isStore := st.(*ir.Store)
	if !isStore || x.Buf == "fd" {
		return nil, 0, false
	}
	b, isBin := x.Value.(*ir.Binary)
	if !isBin || b.Op != ir.Add {
		return nil, 0, false
	}
	cl, okC := b.X.(*ir.Load)
	fl, okF := b.Y.(*ir.Load)
	if !okC || !okF || cl.Buf != x.Buf || fl.Buf != "fd" || ir.ExprString(cl.Index) != ir.ExprString(x.Index) {
		return nil, 0, false
	}
	k, isConst := fl.Index.(*ir.Const)
	if !isConst {
		return nil, 0, false
	}
	return x, int(k.Int), true
}

// onRegisters is fragment loop fl with its accumulator in the registers
// of a: fd is added to the lane's registers, the n-tiles run per warp
// (a.loop).
func (a *accRegs) onRegisters(fl *fragLoop) ir.Stmt {
	lanes := fl.loop.Body.Stmts[0].(*ir.For)
	var body []ir.Stmt
	for _, st := range lanes.Body.Stmts {
		if x, c, ok := fragmentAdd(st); ok && x.Buf == fl.c {
			reg := a.at(i32(c))
			body = append(body, &ir.Store{Buf: a.name, Index: reg,
				Value: ir.Bin(ir.Add, ir.Ld(a.name, ir.F32, reg), ir.Ld("fd", ir.F32, i32(c)))})
			continue
		}
		body = append(body, st)
	}
	return a.loop(body)
}

// accRegs is a matmul's accumulator kept in registers.
type accRegs struct {
	*accCtx
	name  string // the Private array
	tiles int    // n-tiles of the fragment's N columns
	per   int    // elements per thread: Regs per n-tile the thread's warp runs
}

// Names the fragment loops bind.
const (
	fragWarp = "aw" // the warp's spread iteration (= warp index after map-threads)
	fragIter = "ai" // the warp's n-tile: nt = aw + warps*ai
	fragElem = "ac" // the lane's accumulator element 0..3
)

// newAccRegs returns the register plan for C of an accumulating
// fragment loop, or nil when C is too wide.
func (ctx *accCtx) newAccRegs(fl *fragLoop) *accRegs {
	if !fl.accumulate || fl.n%ctx.f.N != 0 {
		return nil
	}
	tiles := fl.n / ctx.f.N
	warps := ctx.l.Warps()
	per := (tiles + warps - 1) / warps * ctx.f.Regs
	if per > MaxAccRegisters {
		return nil
	}
	return &accRegs{accCtx: ctx, name: fl.c + "_reg", tiles: tiles, per: per}
}

// at is the Private array's element c (an expression 0..Regs-1) of the
// lane in the current fragment loop iteration: slot*(per) + ai*Regs + c,
// slot the thread that owns it (map-threads runs spread iteration aw on
// warp aw, so slot = aw*lanes + lane).
func (a *accRegs) at(c ir.Expr) ir.Expr {
	slot := add(mul(ir.R(fragWarp, ir.I32), i32(a.l.Lanes)), ir.R("lane", ir.I32))
	return add(mul(slot, i32(a.per)), add(mul(ir.R(fragIter, ir.I32), i32(a.f.Regs)), c))
}

// loop runs body once per (warp, n-tile) the warp owns, with lane and nt
// bound: for aw spread 0..warps { for lane lanes { for ai { let nt; if nt
// < tiles { body } } } }.
func (a *accRegs) loop(body []ir.Stmt) ir.Stmt {
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
func (a *accRegs) elems(row, col string, body []ir.Stmt) []ir.Stmt {
	lane, c := ir.R("lane", ir.I32), ir.R(fragElem, ir.I32)
	stmts := []ir.Stmt{
		&ir.Let{Name: row, Value: a.f.Row(lane, c)},
		&ir.Let{Name: col, Value: add(mul(ir.R("nt", ir.I32), i32(a.f.N)), a.f.Col(lane, c))},
	}
	return []ir.Stmt{&ir.For{Var: fragElem, Lo: i32(0), Hi: i32(a.f.Regs), Kind: ir.Serial,
		Body: &ir.Block{Stmts: append(stmts, body...)}}}
}

// copyLoop moves C to the registers (in) or back (out).
func (a *accRegs) copyLoop(fl *fragLoop, in bool) ir.Stmt {
	cIdx := add(mul(ir.R("acc_row", ir.I32), i32(fl.n)), ir.R("acc_col", ir.I32))
	reg := a.at(ir.R(fragElem, ir.I32))
	st := &ir.Store{Buf: fl.c, Index: cIdx, Value: ir.Ld(a.name, ir.F32, reg)}
	if in {
		st = &ir.Store{Buf: a.name, Index: reg, Value: ir.Ld(fl.c, ir.F32, cIdx)}
	}
	return a.loop(a.elems("acc_row", "acc_col", []ir.Stmt{st}))
}

// keepAccInRegisters rewrites the KV tile loops of body whose accumulating
// fragment loops (one per tile kind classify-tiles made) have a register
// plan (see above); loops it cannot rewrite are left as they are. Where every other statement of the work
// item that touches C is a row nest too (the zeroing before the loop, the
// normalizing store after it), those run on the registers as well and C
// leaves shared memory; else C is loaded into the registers before the
// loop and stored back after it.
func (ctx *accCtx) keepAccInRegisters(body *ir.Block) *ir.Block {
	body = ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok && f.Kind == ir.Parallel {
			if item := ctx.accInItem(f); item != nil {
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
		loop, a, fl := ctx.accInLoop(f)
		if loop == nil {
			return []ir.Stmt{s} // not possible, or done with its item
		}
		return []ir.Stmt{
			&ir.Alloc{Name: a.name, T: ir.F32, Size: a.l.BlockThreads * a.per, Private: true},
			a.copyLoop(fl, true),
			loop,
			a.copyLoop(fl, false),
		}
	})
}

// accInItem rewrites a work item whose KV tile loops and every other
// statement touching their accumulator C can run on registers, dropping
// C; it returns nil when some statement cannot.
func (ctx *accCtx) accInItem(item *ir.For) ir.Stmt {
	var a *accRegs
	var fl *fragLoop
	loops := map[int]ir.Stmt{}
	for i, st := range item.Body.Stmts {
		f, ok := st.(*ir.For)
		if !ok || f.Tag != ir.TagKVTile {
			continue
		}
		loop, la, lf := ctx.accInLoop(f)
		if loop == nil || (a != nil && la.name != a.name) {
			return nil
		}
		a, fl = la, lf
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
		if al, ok := st.(*ir.Alloc); ok && al.Name == fl.c {
			out = append(out, &ir.Alloc{Name: a.name, T: ir.F32, Size: a.l.BlockThreads * a.per, Private: true})
			continue
		}
		rest, ok := a.rowNests([]ir.Stmt{st}, fl)
		if !ok {
			return nil
		}
		out = append(out, rest...)
	}
	// C must be gone: its alloc replaced, every access rewritten.
	c := *item
	c.Body = &ir.Block{Stmts: out}
	if touches(&c, fl.c) {
		return nil
	}
	return &c
}

// rowNests rewrites the statements of a work item outside its KV tile
// loops onto a's registers: those that do not touch C stay, a row nest
// that does becomes its row part and its fragment part (splitRowNest),
// and an if whose condition does not read C — one kernel serving two
// launches stores o or the partial state under `if nonnull(...)`
// (lower.Tiling.DecodeOneKernel) — is rewritten branch by branch. It
// reports false when some statement cannot run on the registers.
func (a *accRegs) rowNests(stmts []ir.Stmt, fl *fragLoop) ([]ir.Stmt, bool) {
	var out []ir.Stmt
	for _, st := range stmts {
		if !touches(st, fl.c) {
			out = append(out, st)
			continue
		}
		if x, ok := st.(*ir.If); ok && !exprTouches(x.Cond, fl.c) {
			then, ok := a.rowNests(x.Then.Stmts, fl)
			if !ok {
				return nil, false
			}
			y := *x
			y.Then = &ir.Block{Stmts: then}
			if x.Else != nil {
				els, ok := a.rowNests(x.Else.Stmts, fl)
				if !ok {
					return nil, false
				}
				y.Else = &ir.Block{Stmts: els}
			}
			out = append(out, &y)
			continue
		}
		rows, frag := a.splitRowNest(st, fl)
		if frag == nil {
			return nil, false
		}
		out = append(out, rows, frag)
	}
	return out, true
}

// accInLoop rewrites one KV tile loop onto the register plan of its
// accumulating fragment loops, or returns nil loop.
func (ctx *accCtx) accInLoop(f *ir.For) (ir.Stmt, *accRegs, *fragLoop) {
	var first *fragLoop
	ir.MapStmts(f.Body, func(st ir.Stmt) []ir.Stmt {
		if fl := ctx.fragmentOf(st); fl != nil && first == nil && fl.accumulate {
			first = fl
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
	var rewrite func([]ir.Stmt) ([]ir.Stmt, bool)
	rewrite = func(stmts []ir.Stmt) ([]ir.Stmt, bool) {
		var out []ir.Stmt
		for _, st := range stmts {
			if !touches(st, first.c) {
				out = append(out, st)
				continue
			}
			if fl := ctx.fragmentOf(st); fl != nil {
				if !fl.accumulate || fl.c != first.c || fl.n != first.n {
					return nil, false
				}
				// Its operands must not be C: only the fd moves touch it.
				conv := a.onRegisters(fl)
				if touches(conv, first.c) {
					return nil, false
				}
				out = append(out, conv)
				continue
			}
			switch x := st.(type) {
			case *ir.If:
				if exprTouches(x.Cond, first.c) {
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
	return &loop, a, first
}

// splitRowNest splits a row nest over C into the nest without its column
// loops (what it does per row: the softmax state, the lse) and the column
// loops on the fragment layout (the registers), or returns nil frag when
// s is not such a nest.
func (a *accRegs) splitRowNest(s ir.Stmt, fl *fragLoop) (rows, frag ir.Stmt) {
	f, ok := s.(*ir.For)
	if !ok || f.Kind != ir.Spread || !isConst(f.Lo, 0) || !isConst(f.Hi, a.f.M) {
		return nil, nil
	}
	n := &nestRewrite{c: fl.c, reg: a.name, row: f.Var, width: fl.n, at: a.at(ir.R(fragElem, ir.I32)), dropRowWork: true}
	body, ok := n.outer(f.Body.Stmts)
	if !ok || n.col == "" {
		return nil, nil
	}
	col := n.col
	rowBody := ir.MapStmts(f.Body, func(st ir.Stmt) []ir.Stmt {
		if x, ok := st.(*ir.For); ok && x.Var == col && touches(x, fl.c) {
			return nil
		}
		return []ir.Stmt{st}
	})
	r := *f
	r.Body = rowBody
	frag = a.loop(a.elems(n.row, n.col, body))
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
func (a *accRegs) rowNest(s ir.Stmt, fl *fragLoop) ir.Stmt {
	f, ok := s.(*ir.For)
	if !ok || f.Kind != ir.Spread || !isConst(f.Lo, 0) || !isConst(f.Hi, a.f.M) {
		return nil
	}
	n := &nestRewrite{c: fl.c, reg: a.name, row: f.Var, width: fl.n, at: a.at(ir.R(fragElem, ir.I32))}
	body, ok := n.outer(f.Body.Stmts)
	if !ok || n.col == "" {
		return nil
	}
	return a.loop(a.elems(n.row, n.col, body))
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
