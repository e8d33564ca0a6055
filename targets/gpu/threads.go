package gpu

import (
	"fmt"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// MapThreads runs each work item on one block of l.BlockThreads threads: the
// item's own statements (outside spreads) run on every thread, stores among
// them on thread 0 only; a spread loop whose body holds a lanes loop runs
// one iteration per warp; any other spread loop, its perfectly nested inner
// spreads flattened with it, is strided over the block's threads. Inner
// spreads that cannot be nested perfectly (after sinking lets, fusing
// sibling loops and moving invariant branches inside) run serially in the
// thread that runs their outer iteration. Shared arrays stay outside the
// threads loop.
func (l *Layer) MapThreads(m *ir.Module) (*ir.Module, error) {
	return l.withLanes(m, l.mapThreads)
}

func (l *Layer) mapThreads(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		var err error
		body := ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Kind != ir.Parallel || err != nil {
				return []ir.Stmt{s}
			}
			var shared, rest []ir.Stmt
			for _, st := range f.Body.Stmts {
				if a, ok := st.(*ir.Alloc); ok && a.Shared {
					shared = append(shared, st)
				} else {
					rest = append(rest, st)
				}
			}
			t := ir.R("t", ir.I32)
			mp := &mapper{l: l, t: t}
			inner := []ir.Stmt{
				&ir.Let{Name: "warp", Value: ir.Bin(ir.Div, t, i32(l.Lanes))},
			}
			inner = append(inner, mp.item(rest)...)
			inner = privatize(inner, mp)
			if mp.err != nil {
				err = mp.err
			}
			c := *f
			c.Body = &ir.Block{Stmts: append(shared, &ir.For{Var: "t", Lo: i32(0), Hi: i32(l.BlockThreads), Kind: ir.Threads,
				Body: &ir.Block{Stmts: inner}})}
			return []ir.Stmt{&c}
		})
		return body, err
	})
}

type mapper struct {
	l   *Layer
	t   ir.Expr
	n   int // phases mapped, for unique names
	err error
}

func (mp *mapper) fail(format string, args ...any) {
	if mp.err == nil {
		mp.err = fmt.Errorf(format, args...)
	}
}

// item maps a work item's own statements.
func (mp *mapper) item(stmts []ir.Stmt) []ir.Stmt {
	var out []ir.Stmt
	for _, s := range stmts {
		switch x := s.(type) {
		case *ir.For:
			switch x.Kind {
			case ir.Spread:
				out = append(out, mp.phase(x))
			case ir.Lanes:
				mp.fail("lanes loop %s outside a spread loop", x.Var)
			default:
				c := *x
				c.Body = &ir.Block{Stmts: mp.item(x.Body.Stmts)}
				out = append(out, &c)
			}
		case *ir.If:
			c := *x
			c.Then = &ir.Block{Stmts: mp.item(x.Then.Stmts)}
			if x.Else != nil {
				c.Else = &ir.Block{Stmts: mp.item(x.Else.Stmts)}
			}
			out = append(out, &c)
		case *ir.Block:
			out = append(out, &ir.Block{Stmts: mp.item(x.Stmts)})
		case *ir.Store, *ir.Copy:
			out = append(out, &ir.If{Cond: ir.Bin(ir.Eq, mp.t, i32(0)), Then: &ir.Block{Stmts: []ir.Stmt{s}}})
		case *ir.Reduce:
			out = append(out, passes.ReduceLoop(x, ir.Serial)...)
		case *ir.MatMul:
			mp.fail("matmul %s left for map-threads (a matrix rewrite or simt-matmul must run first)", x.C)
		default:
			out = append(out, s)
		}
	}
	return out
}

// holdsLanes reports whether b holds a lanes loop among its own
// statements.
func holdsLanes(b *ir.Block) bool {
	for _, s := range b.Stmts {
		if f, ok := s.(*ir.For); ok && f.Kind == ir.Lanes {
			return true
		}
	}
	return false
}

// phase maps one spread loop of the work item onto the block.
func (mp *mapper) phase(f *ir.For) ir.Stmt {
	mp.n++
	if holdsLanes(f.Body) {
		return mp.warpPhase(f)
	}
	// Collect the perfect nest: each level's body a single spread.
	type level struct {
		v      string
		lo, n  ir.Expr
		static int // extent when constant, else 0
	}
	var levels []level
	cur := f
	for {
		n := ir.Bin(ir.Sub, cur.Hi, cur.Lo)
		ext := 0
		if c, ok := passes.SimplifyExpr(n).(*ir.Const); ok {
			ext = int(c.Int)
		}
		levels = append(levels, level{v: cur.Var, lo: cur.Lo, n: n, static: ext})
		next := perfect(cur.Body)
		if next == nil || ext == 0 {
			cur.Body = serialize(cur.Body)
			break
		}
		if _, ok := next.Hi.(*ir.Const); !ok {
			cur.Body = serialize(&ir.Block{Stmts: []ir.Stmt{next}})
			break
		}
		cur.Body = &ir.Block{Stmts: []ir.Stmt{next}}
		cur = next
	}
	body := serialize(cur.Body)
	// Flatten: e in [0, total); level i gets (e / inner_i) % n_i.
	var total ir.Expr = i32(1)
	allStatic := true
	for _, l := range levels {
		total = ir.Bin(ir.Mul, total, l.n)
		allStatic = allStatic && l.static > 0
	}
	total = passes.SimplifyExpr(total)
	e := ir.R(fmt.Sprintf("e%d", mp.n), ir.I32)
	var binds []ir.Stmt
	inner := 1
	for i := len(levels) - 1; i >= 0; i-- {
		l := levels[i]
		var idx ir.Expr = e
		if inner > 1 {
			idx = ir.Bin(ir.Div, idx, i32(inner))
		}
		if i > 0 {
			idx = ir.Bin(ir.Rem, idx, i32(l.static))
		}
		binds = append([]ir.Stmt{&ir.Let{Name: l.v, Value: passes.SimplifyExpr(add(l.lo, idx))}}, binds...)
		inner *= max(l.static, 1)
	}
	k := ir.R(e.Name+"_k", ir.I32)
	var trips ir.Expr
	guard := true
	if c, ok := total.(*ir.Const); ok && allStatic {
		trips = i32((int(c.Int) + mp.l.BlockThreads - 1) / mp.l.BlockThreads)
		guard = int(c.Int)%mp.l.BlockThreads != 0
	} else {
		trips = ir.Bin(ir.Div, add(total, i32(mp.l.BlockThreads-1)), i32(mp.l.BlockThreads))
	}
	stmts := append(binds, body.Stmts...)
	var loopBody []ir.Stmt
	loopBody = append(loopBody, &ir.Let{Name: e.Name, Value: add(mp.t, mul(k, i32(mp.l.BlockThreads)))})
	if guard {
		loopBody = append(loopBody, &ir.If{Cond: ir.Bin(ir.Lt, e, total), Then: &ir.Block{Stmts: stmts}})
	} else {
		loopBody = append(loopBody, stmts...)
	}
	return &ir.For{Var: k.Name, Lo: i32(0), Hi: trips, Kind: ir.Serial, Tag: ir.TagPhase, Body: &ir.Block{Stmts: loopBody}}
}

// warpPhase runs one spread iteration per warp; the lanes loop becomes the
// lane index.
func (mp *mapper) warpPhase(f *ir.For) ir.Stmt {
	k := ir.R(f.Var+"_w", ir.I32)
	n := ir.Bin(ir.Sub, f.Hi, f.Lo)
	warps := mp.l.Warps()
	trips := passes.SimplifyExpr(ir.Bin(ir.Div, add(n, i32(warps-1)), i32(warps)))
	var body []ir.Stmt
	for _, s := range f.Body.Stmts {
		if l, ok := s.(*ir.For); ok && l.Kind == ir.Lanes {
			body = append(body, &ir.Let{Name: l.Var, Value: ir.Bin(ir.Rem, mp.t, i32(mp.l.Lanes))})
			body = append(body, l.Body.Stmts...)
			continue
		}
		body = append(body, s)
	}
	v := &ir.Let{Name: f.Var, Value: add(f.Lo, add(ir.R("warp", ir.I32), mul(k, i32(warps))))}
	return &ir.For{Var: k.Name, Lo: i32(0), Hi: trips, Kind: ir.Serial, Tag: ir.TagPhase, Body: &ir.Block{Stmts: []ir.Stmt{
		v, &ir.If{Cond: ir.Bin(ir.Lt, ir.R(f.Var, ir.I32), f.Hi), Then: &ir.Block{Stmts: body}}}}}
}

// perfect rewrites a spread body into one inner spread loop with a
// constant extent, if it can: lets before a loop sink into it, sibling
// spread loops fuse into one over the concatenated range, a branch whose
// arms become spread loops moves inside one loop over the larger extent,
// and stores (or branches holding only stores) that share no buffer with
// the loops run in the first iteration. It returns nil when the body does
// not fit.
func perfect(b *ir.Block) *ir.For {
	var lets []ir.Stmt // every let so far: each loop gets its own copy
	var pending int    // lets since the last loop
	var loops []*ir.For
	var later []string // lets first declared after the first loop
	var movable []ir.Stmt
	for _, s := range b.Stmts {
		var l *ir.For
		switch x := s.(type) {
		case *ir.Let:
			lets = append(lets, x)
			pending++
			if len(loops) > 0 {
				later = append(later, x.Name)
			}
			continue
		case *ir.Store, *ir.Copy:
			movable = append(movable, x)
			continue
		case *ir.For:
			c, ok := x.Lo.(*ir.Const)
			if _, ok2 := x.Hi.(*ir.Const); x.Kind != ir.Spread || !ok || !ok2 || c.Int != 0 {
				return nil
			}
			cp := *x
			l = &cp
		case *ir.If:
			if onlyStores(x) {
				movable = append(movable, x)
				continue
			}
			then := perfect(x.Then)
			if then == nil {
				return nil
			}
			var els *ir.For
			if x.Else != nil && len(x.Else.Stmts) > 0 {
				if els = perfect(x.Else); els == nil {
					return nil
				}
			}
			l = branchLoop(x, then, els)
		default:
			return nil
		}
		if len(lets) > 0 {
			l.Body = &ir.Block{Stmts: append(append([]ir.Stmt(nil), lets...), l.Body.Stmts...)}
		}
		pending = 0
		loops = append(loops, l)
	}
	if len(loops) == 0 || pending > 0 {
		return nil
	}
	if len(movable) > 0 {
		// They run in the first loop's first iteration: after its lets,
		// so they may use them, but not lets of later loops, and they must
		// share nothing with the loops.
		var all []ir.Stmt
		for _, l := range loops {
			all = append(all, l)
		}
		lr, lw := passes.Accesses(&ir.Block{Stmts: all})
		for _, mv := range movable {
			r, w := passes.Accesses(mv)
			for n := range w {
				if lr[n] || lw[n] {
					return nil
				}
			}
			for n := range r {
				if lw[n] {
					return nil
				}
			}
			for _, n := range later {
				if stmtUses(mv, n) {
					return nil
				}
			}
		}
		l1 := loops[0]
		var head, tail []ir.Stmt
		for _, s := range l1.Body.Stmts {
			if _, ok := s.(*ir.Let); ok && len(tail) == 0 {
				head = append(head, s)
			} else {
				tail = append(tail, s)
			}
		}
		first := &ir.If{Cond: ir.Bin(ir.Eq, ir.R(l1.Var, ir.I32), i32(0)), Then: &ir.Block{Stmts: movable}}
		l1.Body = &ir.Block{Stmts: append(append(head, first), tail...)}
	}
	l := loops[0]
	for _, next := range loops[1:] {
		l = fuse(l, next)
	}
	return l
}

// onlyStores reports whether an if holds nothing but stores and ifs of
// stores.
func onlyStores(x *ir.If) bool {
	ok := true
	ir.MapStmts(&ir.Block{Stmts: []ir.Stmt{x}}, func(s ir.Stmt) []ir.Stmt {
		switch s.(type) {
		case *ir.Store, *ir.If, *ir.Block:
		default:
			ok = false
		}
		return []ir.Stmt{s}
	})
	return ok
}

// stmtUses reports whether s refers to name.
func stmtUses(s ir.Stmt, name string) bool {
	found := false
	ir.MapStmtExprs(&ir.Block{Stmts: []ir.Stmt{s}}, func(e ir.Expr) ir.Expr {
		if passes.Uses(e, name) {
			found = true
		}
		return e
	})
	return found
}

func extent(f *ir.For) int { return int(f.Hi.(*ir.Const).Int) }

// renamed is f's body with its loop variable renamed to v.
func renamed(f *ir.For, v string) *ir.Block {
	if f.Var == v {
		return f.Body
	}
	return ir.MapExprs(f.Body, func(e ir.Expr) ir.Expr {
		if r, ok := e.(*ir.Ref); ok && r.Name == f.Var {
			return ir.R(v, ir.I32)
		}
		return e
	})
}

// branchLoop is `if c { for v in 0..a {A} } else { for w in 0..b {B} }`
// as `for v in 0..max(a,b) { if c { if v < a {A} } else { if v < b {B} } }`.
func branchLoop(x *ir.If, then, els *ir.For) *ir.For {
	n := extent(then)
	if els != nil {
		n = max(n, extent(els))
	}
	v := then.Var
	arm := func(f *ir.For) *ir.Block {
		body := renamed(f, v)
		if extent(f) < n {
			body = &ir.Block{Stmts: []ir.Stmt{&ir.If{Cond: ir.Bin(ir.Lt, ir.R(v, ir.I32), i32(extent(f))), Then: body}}}
		}
		return body
	}
	in := &ir.If{Cond: x.Cond, Then: arm(then), Tag: x.Tag}
	if els != nil {
		in.Else = arm(els)
	}
	return &ir.For{Var: v, Lo: i32(0), Hi: i32(n), Kind: ir.Spread, Tag: then.Tag, Body: &ir.Block{Stmts: []ir.Stmt{in}}}
}

// fuse runs a's iterations then b's as one loop over a's extent plus b's.
func fuse(a, b *ir.For) *ir.For {
	na := extent(a)
	v := a.Var
	bBody := renamed(b, v)
	bBody = &ir.Block{Stmts: append([]ir.Stmt{&ir.Let{Name: b.Var + "_f", Value: ir.Bin(ir.Sub, ir.R(v, ir.I32), i32(na))}},
		ir.MapExprs(bBody, func(e ir.Expr) ir.Expr {
			if r, ok := e.(*ir.Ref); ok && r.Name == v {
				return ir.R(b.Var+"_f", ir.I32)
			}
			return e
		}).Stmts...)}
	body := &ir.If{Cond: ir.Bin(ir.Lt, ir.R(v, ir.I32), i32(na)), Then: a.Body, Else: bBody}
	return &ir.For{Var: v, Lo: i32(0), Hi: i32(na + extent(b)), Kind: ir.Spread, Tag: a.Tag, Body: &ir.Block{Stmts: []ir.Stmt{body}}}
}

// privatize gives each thread its own elements of the item's Private
// arrays: an array of BlockThreads*N elements indexed slot*N + i, where
// slot is the thread (warp*Lanes + lane) that alone touches the element (the
// pass that made the array guarantees it), becomes a per-thread array of
// N elements indexed i (registers, once the indices are constants after
// unrolling).
func privatize(stmts []ir.Stmt, mp *mapper) []ir.Stmt {
	per := map[string]int{}
	b := ir.MapStmts(&ir.Block{Stmts: stmts}, func(s ir.Stmt) []ir.Stmt {
		a, ok := s.(*ir.Alloc)
		if !ok || !a.Private {
			return []ir.Stmt{s}
		}
		n := mp.l.BlockThreads
		if a.Size%n != 0 {
			mp.fail("private array %s of %d elements, not a multiple of %d threads", a.Name, a.Size, n)
			return []ir.Stmt{s}
		}
		per[a.Name] = a.Size / n
		return []ir.Stmt{&ir.Alloc{Name: a.Name, T: a.T, Size: a.Size / n}}
	})
	if len(per) == 0 {
		return stmts
	}
	local := func(name string, idx ir.Expr) ir.Expr {
		n := per[name]
		if bin, ok := idx.(*ir.Binary); ok && bin.Op == ir.Add {
			if m, ok := bin.X.(*ir.Binary); ok && m.Op == ir.Mul {
				if k, ok := m.Y.(*ir.Const); ok && int(k.Int) == n {
					return bin.Y
				}
			}
		}
		mp.fail("private array %s indexed by %s, want slot * %d + element", name, ir.ExprString(idx), n)
		return idx
	}
	b = ir.MapExprs(b, func(e ir.Expr) ir.Expr {
		if l, ok := e.(*ir.Load); ok {
			if _, p := per[l.Buf]; p {
				c := *l
				c.Index = local(l.Buf, l.Index)
				return &c
			}
		}
		return e
	})
	b = ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if x, ok := s.(*ir.Store); ok {
			if _, p := per[x.Buf]; p {
				return []ir.Stmt{&ir.Store{Buf: x.Buf, Index: local(x.Buf, x.Index), Value: x.Value}}
			}
		}
		return []ir.Stmt{s}
	})
	return b.Stmts
}
