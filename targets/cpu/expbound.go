package cpu

import (
	"math"
	"sort"

	"github.com/attnc/attnc/ir"
)

// ExpBound writes exp(s - m) as exp(min(s - m, 0)) where s is an element
// of a row and m is at least the max of that row, the online softmax's
// weights: the same value for every s and m (s - m is <= 0 or NaN there),
// stated so that vector-exp computes it without the overflow half of the
// polynomial exp (PolyExpNonPos: no clamp above, no 2^128 step, no +inf
// select, NaN carried through the arithmetic rather than selected).
//
// The proof is structural. Inside one block (a tile's row, prefill), a
//
//	reduce M = max over J in LO .. HI of select(J < E, A[B + J], -inf)
//
// (or of A[B + J] alone), lets N = max(X, M) (either order, chained), and
// then a loop
//
//	for J2 in LO .. HI { if J2 < E { let S = A[B + J2]; store A[B + J2] = f(exp(S - N)) } [else ...] }
//
// whose iteration J2 reads element B + J2 before it writes it (B + J2 is
// one element per J2), and whose else branch (J2 >= E) writes A only at
// B + J2: S is then one of the elements the max saw, so S <= M <= N
// unless one of them is NaN. B, LO, HI and E neither load nor call
// (their values change only with the names they mention). Between the
// reduce and the loop no statement may write A or assign any variable,
// and no let may rename a name the facts mention.
//
// Decode's update runs a loop per phase over the rows (lower's
// Tiling.DecodePhases): the max reaches the exp through an array. A row
// loop
//
//	for R in RLO .. RHI { [if C {] ... N (a max as above, B mentioning R) ...; store T[R] = N [}] }
//
// (serial, spread or vector) whose iterations write T only at that store
// (T[R]: one element per row), never write A and all run to the end (no
// continue, return or assignment), where nothing in the loop defines R
// again or a name the fact or C mention, and C, RLO and RHI neither load
// nor call, leaves the array fact "T[r] >= every A[B(r) + J], J < E, for
// every r in RLO .. RHI with C(r)". A later loop over the same rows under
// the same guard, with no write of A or T, no assignment and no renamed
// name in between, reads the fact back: in its iteration R2, `let N2 =
// T[R2]` (R2 not defined again before it) is a max of row R2, B(R2), as
// above. Buffers of different names are different memory (the kernels'
// buffers are noalias), as the one-block proof assumes too.
func (mc *Machine) ExpBound(m *ir.Module) (*ir.Module, error) {
	return mc.mapClones(m, "exp-bound", func(k *ir.Kernel, _ *Level) *ir.Kernel {
		c := *k
		c.Body, _ = expBoundBlock(k.Body, nil)
		return &c
	})
}

// maxFact says that the let or reduce it is filed under is at least every
// A[Base + J] for J in Lo .. Hi with J < E (E nil: all of them).
type maxFact struct {
	A         string
	J         string
	Base      ir.Expr
	Lo, Hi, E ir.Expr
	names     map[string]bool // the names Base, Lo, Hi and E mention
}

// rowFact says that array T holds maxes (see ExpBound). Its point form
// (!loop) says T[Idx] is at least fact f's elements, Idx the name's
// value now; its loop form says T[r] is at least f's elements with Idx
// = r, for every r in Lo .. Hi where Cond (nil: true) holds with Idx = r.
type rowFact struct {
	T      string
	Idx    string
	loop   bool
	Lo, Hi ir.Expr
	Cond   ir.Expr
	f      *maxFact
	names  map[string]bool // the names whose new definition breaks the fact
}

// exprNames is the set of names es mention (nil entries skipped).
func exprNames(es ...ir.Expr) map[string]bool {
	names := map[string]bool{}
	for _, x := range es {
		if x != nil {
			ir.VisitExpr(x, func(y ir.Expr) {
				if ref, ok := y.(*ir.Ref); ok {
					names[ref.Name] = true
				}
			})
		}
	}
	return names
}

// substFact is f with the name from renamed to to.
func substFact(f *maxFact, from, to string) *maxFact {
	sub := map[string]ir.Expr{from: ir.R(to, ir.I32)}
	g := *f
	g.Base = ir.Subst(f.Base, sub)
	g.Lo, g.Hi = ir.Subst(f.Lo, sub), ir.Subst(f.Hi, sub)
	if f.E != nil {
		g.E = ir.Subst(f.E, sub)
	}
	g.names = exprNames(g.Base, g.Lo, g.Hi, g.E)
	return &g
}

// expBoundBlock is b with its softmax exps bounded, given the row facts
// that hold on entry (seed), and the row facts that hold at its end.
func expBoundBlock(b *ir.Block, seed map[string]*rowFact) (*ir.Block, map[string]*rowFact) {
	if b == nil {
		return nil, nil
	}
	out := &ir.Block{Stmts: append([]ir.Stmt(nil), b.Stmts...)}
	facts := map[string]*maxFact{}
	rows := map[string]*rowFact{}
	for k, r := range seed {
		rows[k] = r
	}
	for i, s := range out.Stmts {
		switch x := s.(type) {
		case *ir.Block:
			out.Stmts[i], _ = expBoundBlock(x, nil)
		case *ir.For:
			c := *x
			if f := boundLoop(x, facts); f != nil {
				c = *f
			}
			if body := rowFactLoop(&c, rows); body != nil {
				c.Body = body
			} else {
				c.Body, _ = expBoundBlock(c.Body, nil)
			}
			out.Stmts[i] = &c
		case *ir.If:
			c := *x
			c.Then, _ = expBoundBlock(x.Then, nil)
			c.Else, _ = expBoundBlock(x.Else, nil)
			out.Stmts[i] = &c
		}
		// What s does to the facts: a reduce or a let adds one, and so
		// does a store of a max (a row fact) and a loop of them; a write
		// of a fact's array, any assignment, or a name defined again
		// removes them.
		var stored *maxFact
		if st, ok := s.(*ir.Store); ok {
			if n, ok := st.Value.(*ir.Ref); ok {
				stored = facts[n.Name]
			}
		}
		var loopFact *rowFact
		if f, ok := s.(*ir.For); ok {
			loopFact = maxLoopFact(f)
		}
		killFacts(facts, rows, s)
		switch x := s.(type) {
		case *ir.Reduce:
			if f := maxReduceFact(x); f != nil {
				facts[x.Name] = f
			}
		case *ir.Let:
			if bin, ok := x.Value.(*ir.Binary); ok && bin.Op == ir.Max && bin.Type() == ir.F32 {
				for _, side := range []ir.Expr{bin.X, bin.Y} {
					if r, ok := side.(*ir.Ref); ok && facts[r.Name] != nil {
						facts[x.Name] = facts[r.Name]
						break
					}
				}
			}
			// let N2 = T[Idx] under T's point fact.
			if ld, ok := x.Value.(*ir.Load); ok && ld.T == ir.F32 {
				if r := rows[ld.Buf]; r != nil && !r.loop && isRef(ld.Index, r.Idx) && x.Name != r.Idx && !r.f.names[x.Name] {
					facts[x.Name] = r.f
				}
			}
		case *ir.Store:
			if idx, ok := x.Index.(*ir.Ref); ok && stored != nil && stored.A != x.Buf && x.Value.Type() == ir.F32 {
				names := exprNames(stored.Base, stored.Lo, stored.Hi, stored.E)
				names[idx.Name] = true
				rows[x.Buf] = &rowFact{T: x.Buf, Idx: idx.Name, f: stored, names: names}
			}
		case *ir.For:
			if loopFact != nil {
				rows[loopFact.T] = loopFact
			}
		}
	}
	return out, rows
}

// rowLoopKind reports whether a loop of kind k runs all its iterations
// in the work item, to completion before the next statement.
func rowLoopKind(k ir.LoopKind) bool {
	return k == ir.Serial || k == ir.Spread || k == ir.Vector
}

// guardedBody is a loop body's guard and guarded block: the condition
// and then-block of a body that is one if without an else, or nil and
// the body itself.
func guardedBody(body *ir.Block) (ir.Expr, *ir.Block) {
	if body != nil && len(body.Stmts) == 1 {
		if iff, ok := body.Stmts[0].(*ir.If); ok && (iff.Else == nil || len(iff.Else.Stmts) == 0) {
			return iff.Cond, iff.Then
		}
	}
	return nil, body
}

// maxLoopFact is the row fact of a loop that stores a max into T[R] for
// each of its rows R (the loop form, see ExpBound), or nil.
func maxLoopFact(f *ir.For) *rowFact {
	if !rowLoopKind(f.Kind) || f.Body == nil {
		return nil
	}
	cond, inner := guardedBody(f.Body)
	if !loadFree(cond, f.Lo, f.Hi) {
		return nil
	}
	_, end := expBoundBlock(inner, nil)
	var r *rowFact
	for _, t := range sortedKeys(end) {
		if e := end[t]; !e.loop && e.Idx == f.Var {
			r = e
			break
		}
	}
	if r == nil {
		return nil
	}
	// The loop writes T only at that store and A nowhere, leaves no
	// iteration early, and defines none of the names the fact and the
	// guard mention (its own variable included: a shadow would make T's
	// index another name).
	names := exprNames(r.f.Base, r.f.Lo, r.f.Hi, r.f.E, cond)
	tStores, bad := 0, false
	ir.MapStmts(f.Body, func(t ir.Stmt) []ir.Stmt {
		switch x := t.(type) {
		case *ir.Store:
			if x.Buf == r.f.A {
				bad = true
			}
			if x.Buf == r.T {
				tStores++
			}
		case *ir.Let:
			bad = bad || names[x.Name] || x.Name == f.Var
		case *ir.Var:
			bad = bad || names[x.Name] || x.Name == f.Var
		case *ir.Reduce:
			bad = bad || names[x.Name] || names[x.Var] || x.Name == f.Var || x.Var == f.Var
		case *ir.For:
			bad = bad || names[x.Var] || x.Var == f.Var
		case *ir.Block, *ir.If:
		default:
			// Continue, Return, Assign, MatMul, Copy, calls: refused.
			bad = true
		}
		return []ir.Stmt{t}
	})
	if bad || tStores != 1 {
		return nil
	}
	for n := range exprNames(f.Lo, f.Hi) {
		names[n] = true
	}
	delete(names, f.Var)
	return &rowFact{T: r.T, Idx: f.Var, loop: true, Lo: f.Lo, Hi: f.Hi, Cond: cond, f: r.f, names: names}
}

// rowFactLoop is the body of loop c with its exps bounded under the loop
// row facts in rows whose rows and guard it repeats (their point forms
// hold in its iterations), or nil when none does.
func rowFactLoop(c *ir.For, rows map[string]*rowFact) *ir.Block {
	if !rowLoopKind(c.Kind) || c.Body == nil {
		return nil
	}
	cond, _ := guardedBody(c.Body)
	body, guarded := map[string]*rowFact{}, map[string]*rowFact{}
	for _, t := range sortedKeys(rows) {
		r := rows[t]
		if !r.loop || r.names[c.Var] || !sameExpr(r.Lo, c.Lo) || !sameExpr(r.Hi, c.Hi) {
			continue
		}
		f := substFact(r.f, r.Idx, c.Var)
		names := exprNames(f.Base, f.Lo, f.Hi, f.E)
		names[c.Var] = true
		point := &rowFact{T: t, Idx: c.Var, f: f, names: names}
		switch {
		case r.Cond == nil:
			body[t] = point
		case cond != nil && sameExpr(ir.Subst(r.Cond, map[string]ir.Expr{r.Idx: ir.R(c.Var, ir.I32)}), cond):
			guarded[t] = point
		}
	}
	if len(body) == 0 && len(guarded) == 0 {
		return nil
	}
	if len(guarded) == 0 {
		b, _ := expBoundBlock(c.Body, body)
		return b
	}
	// The body is one if (guardedBody): its then-block holds both kinds.
	for t, r := range body {
		guarded[t] = r
	}
	iff := *c.Body.Stmts[0].(*ir.If)
	iff.Then, _ = expBoundBlock(iff.Then, guarded)
	iff.Else, _ = expBoundBlock(iff.Else, body)
	return &ir.Block{Stmts: []ir.Stmt{&iff}}
}

// sortedKeys is m's keys in order.
func sortedKeys(m map[string]*rowFact) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// killFacts removes the facts and row facts statement s may break.
func killFacts(facts map[string]*maxFact, rows map[string]*rowFact, s ir.Stmt) {
	if len(facts) == 0 && len(rows) == 0 {
		return
	}
	clearAll := false
	defined := map[string]bool{}
	written := map[string]bool{}
	ir.MapStmts(&ir.Block{Stmts: []ir.Stmt{s}}, func(t ir.Stmt) []ir.Stmt {
		switch x := t.(type) {
		case *ir.Let:
			defined[x.Name] = true
		case *ir.Var:
			defined[x.Name] = true
		case *ir.Reduce:
			defined[x.Name] = true
			defined[x.Var] = true
		case *ir.For:
			defined[x.Var] = true
		case *ir.Store:
			written[x.Buf] = true
		case *ir.Block, *ir.If, *ir.Continue, *ir.Return:
		default:
			// Assign, MatMul, Copy, calls, GPU statements: anything.
			clearAll = true
		}
		return []ir.Stmt{t}
	})
	anyDefined := func(names map[string]bool) bool {
		for n := range names {
			if defined[n] {
				return true
			}
		}
		return false
	}
	for name, f := range facts {
		if clearAll || written[f.A] || defined[name] || anyDefined(f.names) {
			delete(facts, name)
		}
	}
	for t, r := range rows {
		if clearAll || written[t] || written[r.f.A] || anyDefined(r.names) {
			delete(rows, t)
		}
	}
}

// maxReduceFact is the fact of a float max reduce over A[B + J] (guarded
// by J < E or not), or nil.
func maxReduceFact(r *ir.Reduce) *maxFact {
	if !r.Op.IsMax() || r.Value.Type() != ir.F32 {
		return nil
	}
	v, e := r.Value, ir.Expr(nil)
	if sel, ok := v.(*ir.Select); ok {
		lt, ok := sel.Cond.(*ir.Binary)
		id, isConst := sel.Y.(*ir.Const)
		if !ok || lt.Op != ir.Lt || !isRef(lt.X, r.Var) || mentions(lt.Y, r.Var) || !isConst || !math.IsInf(id.Float, -1) {
			return nil
		}
		v, e = sel.X, lt.Y
	}
	ld, ok := v.(*ir.Load)
	if !ok {
		return nil
	}
	base := unitOffset(ld.Index, r.Var)
	if base == nil || mentions(r.Lo, r.Var) || mentions(r.Hi, r.Var) || !loadFree(base, r.Lo, r.Hi, e) {
		return nil
	}
	f := &maxFact{A: ld.Buf, J: r.Var, Base: base, Lo: r.Lo, Hi: r.Hi, E: e, names: map[string]bool{}}
	for _, x := range []ir.Expr{base, r.Lo, r.Hi, e} {
		if x != nil {
			ir.VisitExpr(x, func(y ir.Expr) {
				if ref, ok := y.(*ir.Ref); ok {
					f.names[ref.Name] = true
				}
			})
		}
	}
	return f
}

// boundLoop is loop f with its softmax exps bounded, or nil when f is not
// the loop of a fact (see ExpBound).
func boundLoop(f *ir.For, facts map[string]*maxFact) *ir.For {
	if len(facts) == 0 || f.Body == nil || len(f.Body.Stmts) != 1 {
		return nil
	}
	iff, ok := f.Body.Stmts[0].(*ir.If)
	if !ok || iff.Then == nil || len(iff.Then.Stmts) != 2 {
		return nil
	}
	ld, ok1 := iff.Then.Stmts[0].(*ir.Let)
	st, ok2 := iff.Then.Stmts[1].(*ir.Store)
	if !ok1 || !ok2 {
		return nil
	}
	load, ok := ld.Value.(*ir.Load)
	if !ok || load.Buf != st.Buf || load.T != ir.F32 || ir.ExprString(load.Index) != ir.ExprString(st.Index) || mentionsLoad(st.Value, st.Buf) {
		return nil
	}
	base := unitOffset(load.Index, f.Var)
	if base == nil {
		return nil
	}
	lt, ok := iff.Cond.(*ir.Binary)
	if !ok || lt.Op != ir.Lt || !isRef(lt.X, f.Var) {
		return nil
	}
	// The else branch (J2 >= E) may write A at B + J2 only.
	if iff.Else != nil {
		bad := false
		ir.MapStmts(iff.Else, func(t ir.Stmt) []ir.Stmt {
			switch x := t.(type) {
			case *ir.Store:
				if x.Buf == st.Buf {
					if b := unitOffset(x.Index, f.Var); b == nil || !sameExpr(b, base) {
						bad = true
					}
				}
			case *ir.Let, *ir.Block, *ir.If:
			default:
				bad = true
			}
			return []ir.Stmt{t}
		})
		if bad {
			return nil
		}
	}
	same := sameExpr
	bounded := false
	val := ir.MapExpr(st.Value, func(e ir.Expr) ir.Expr {
		u, ok := e.(*ir.Unary)
		if !ok || u.Op != ir.Exp || u.Type() != ir.F32 {
			return e
		}
		sub, ok := u.X.(*ir.Binary)
		if !ok || sub.Op != ir.Sub || !isRef(sub.X, ld.Name) {
			return e
		}
		n, ok := sub.Y.(*ir.Ref)
		if !ok {
			return e
		}
		fact := facts[n.Name]
		if fact == nil || fact.A != load.Buf || fact.E == nil || !same(fact.E, lt.Y) || !same(fact.Lo, f.Lo) || !same(fact.Hi, f.Hi) ||
			!same(ir.Subst(fact.Base, map[string]ir.Expr{fact.J: ir.R(f.Var, ir.I32)}), base) {
			return e
		}
		bounded = true
		return &ir.Unary{Op: ir.Exp, X: ir.Bin(ir.Min, sub, ir.Float(0))}
	})
	if !bounded {
		return nil
	}
	c := *f
	then := &ir.Block{Stmts: []ir.Stmt{ld, &ir.Store{Buf: st.Buf, Index: st.Index, Value: val}}}
	c.Body = &ir.Block{Stmts: []ir.Stmt{&ir.If{Cond: iff.Cond, Then: then, Else: iff.Else, Tag: iff.Tag}}}
	return &c
}

// unitOffset is B when e is B + j (or j + B) with B free of j, else nil.
func unitOffset(e ir.Expr, j string) ir.Expr {
	add, ok := e.(*ir.Binary)
	if !ok || add.Op != ir.Add {
		return nil
	}
	switch {
	case isRef(add.Y, j) && !mentions(add.X, j):
		return add.X
	case isRef(add.X, j) && !mentions(add.Y, j):
		return add.Y
	}
	return nil
}

// loadFree reports whether es (nil entries skipped) neither load nor
// call: their values then change only with the names they mention, which
// the facts track, not with memory.
func loadFree(es ...ir.Expr) bool {
	ok := true
	for _, e := range es {
		if e != nil {
			ir.VisitExpr(e, func(x ir.Expr) {
				switch x.(type) {
				case *ir.Load, *ir.Call:
					ok = false
				}
			})
		}
	}
	return ok
}

// mentions reports whether e refers to name.
func mentions(e ir.Expr, name string) bool {
	found := false
	ir.VisitExpr(e, func(x ir.Expr) {
		if isRef(x, name) {
			found = true
		}
	})
	return found
}

// mentionsLoad reports whether e loads from buf.
func mentionsLoad(e ir.Expr, buf string) bool {
	found := false
	ir.VisitExpr(e, func(x ir.Expr) {
		if l, ok := x.(*ir.Load); ok && l.Buf == buf {
			found = true
		}
	})
	return found
}
