package cpu

import (
	"math"

	"github.com/attnc/attnc/ir"
)

// ExpBound writes exp(s - m) as exp(min(s - m, 0)) where s is an element
// of a row and m is at least the max of that row, the online softmax's
// weights: the same value for every s and m (s - m is <= 0 or NaN there),
// stated so that vector-exp computes it without the overflow half of the
// polynomial exp (PolyExpNonPos: no clamp above, no 2^128 step, no +inf
// select, NaN carried through the arithmetic rather than selected).
//
// The proof is structural, inside one block (a tile's row): a
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
// unless one of them is NaN. Between the reduce and the loop no
// statement may write A or assign any variable, and no let may rename a
// name the facts mention.
func (mc *Machine) ExpBound(m *ir.Module) (*ir.Module, error) {
	return mc.mapClones(m, "exp-bound", func(k *ir.Kernel, _ *Level) *ir.Kernel {
		c := *k
		c.Body = expBoundBlock(k.Body)
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

func expBoundBlock(b *ir.Block) *ir.Block {
	if b == nil {
		return nil
	}
	out := &ir.Block{Stmts: append([]ir.Stmt(nil), b.Stmts...)}
	facts := map[string]*maxFact{}
	for i, s := range out.Stmts {
		switch x := s.(type) {
		case *ir.Block:
			out.Stmts[i] = expBoundBlock(x)
		case *ir.For:
			c := *x
			if f := boundLoop(x, facts); f != nil {
				c = *f
			}
			c.Body = expBoundBlock(c.Body)
			out.Stmts[i] = &c
		case *ir.If:
			c := *x
			c.Then, c.Else = expBoundBlock(x.Then), expBoundBlock(x.Else)
			out.Stmts[i] = &c
		}
		// What s does to the facts: a reduce or a let adds one; a write
		// of a fact's array, any assignment, or a name defined again
		// removes them.
		killFacts(facts, s)
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
		}
	}
	return out
}

// killFacts removes the facts statement s may break.
func killFacts(facts map[string]*maxFact, s ir.Stmt) {
	if len(facts) == 0 {
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
	for name, f := range facts {
		if clearAll || written[f.A] || defined[name] {
			delete(facts, name)
			continue
		}
		for n := range f.names {
			if defined[n] {
				delete(facts, name)
				break
			}
		}
	}
}

// maxReduceFact is the fact of a float max reduce over A[B + J] (guarded
// by J < E or not), or nil.
func maxReduceFact(r *ir.Reduce) *maxFact {
	if r.Op != ir.ReduceMax || r.Value.Type() != ir.F32 {
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
	if base == nil || mentions(r.Lo, r.Var) || mentions(r.Hi, r.Var) {
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
