package cpu

import "github.com/attnc/attnc/ir"

// VectorLoops writes the elementwise vector loops of each level's clone
// as explicit vector code of the level's width L: a loop `for j in lo ..
// hi vector` (no tag) whose trip count is a constant multiple of L, and
// whose body computes each element from loads at j (base + j, base not
// changing with j) and values that do not change with j, becomes a
// serial loop over blocks of L elements whose statements work lane by
// lane. The loop vectorizer writes most such loops the same way, but not
// reliably: when a loop's first load is available before it, LLVM 14's
// GVN moves that load into a split backedge (load PRE), a loop the
// vectorizer does not understand. Decode's softmax exp, reading back the
// scores the tile's vector max just loaded, lost its vectors that way
// wherever an item has one row (MHA, a GQA group of one): 64 scalar exp
// polynomials a tile. Explicit vectors leave nothing to that.
//
// A body qualifies when every statement is a let, a var declared in the
// body, an assignment to such a var, a store at base + j, or an if whose
// branches only assign load-free values to the body's vars (written as
// selects); when every load of an array the body stores to reads the
// element the stores write (the same base), and when j appears only in
// those unit-stride indices. Other loops are left to LLVM as they were.
func (mc *Machine) VectorLoops(m *ir.Module) (*ir.Module, error) {
	return mc.mapClones(m, "vector-loops", func(k *ir.Kernel, l *Level) *ir.Kernel {
		if l.Lanes < 2 {
			return k
		}
		c := *k
		c.Body = ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if f, ok := s.(*ir.For); ok {
				if v := vectorLoop(f, l.Lanes); v != nil {
					return []ir.Stmt{v}
				}
			}
			return []ir.Stmt{s}
		})
		return &c
	})
}

// vectorLoop is f as a serial loop over blocks of L lanes, or nil when f
// does not qualify (VectorLoops).
func vectorLoop(f *ir.For, L int) *ir.For {
	lo, okLo := f.Lo.(*ir.Const)
	hi, okHi := f.Hi.(*ir.Const)
	if f.Kind != ir.Vector || f.Tag != ir.NoTag || !okLo || !okHi {
		return nil
	}
	n := hi.Int - lo.Int
	if n < int64(L) || n%int64(L) != 0 {
		return nil
	}
	j0 := ir.R(f.Var+"_v0", ir.I32)
	v := &lanes{j: f.Var, j0: j0, L: L, varying: map[string]ir.Type{}, vars: map[string]bool{}}
	if !v.sameElements(f.Body) {
		return nil
	}
	body, ok := v.block(f.Body)
	if !ok {
		return nil
	}
	b := f.Var + "_vb"
	stmts := append([]ir.Stmt{&ir.Let{Name: j0.Name, Value: addE(i32c(int(lo.Int)), mulE(ir.R(b, ir.I32), L))}}, body...)
	return &ir.For{Var: b, Lo: i32c(0), Hi: i32c(int(n) / L), Kind: ir.Serial, Body: &ir.Block{Stmts: stmts}}
}

// lanes rewrites one loop body lane by lane: j is the loop's variable, j0
// the first element of the block, varying the names whose values change
// with j (with their vector types), vars the body's own vars.
type lanes struct {
	j       string
	j0      ir.Expr
	L       int
	varying map[string]ir.Type
	vars    map[string]bool
}

// sameElements reports whether every load of an array that b stores to
// reads, as every store to it writes, base + j with one base: then each
// lane reads only what its own element's statements wrote.
func (v *lanes) sameElements(b *ir.Block) bool {
	bases := map[string]ir.Expr{}
	ok := true
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if st, isStore := s.(*ir.Store); isStore {
			base, unit := unitStride(st.Index, v.j)
			if !unit {
				ok = false
				return []ir.Stmt{s}
			}
			if prev, seen := bases[st.Buf]; seen && !sameExpr(prev, base) {
				ok = false
			}
			bases[st.Buf] = base
		}
		return []ir.Stmt{s}
	})
	if !ok {
		return false
	}
	ir.MapExprs(b, func(e ir.Expr) ir.Expr {
		if ld, isLoad := e.(*ir.Load); isLoad {
			if want, stored := bases[ld.Buf]; stored {
				base, unit := unitStride(ld.Index, v.j)
				if !unit || !sameExpr(base, want) {
					ok = false
				}
			}
		}
		return e
	})
	return ok
}

// changes reports whether e's value changes with j.
func (v *lanes) changes(e ir.Expr) bool {
	found := false
	ir.VisitExpr(e, func(n ir.Expr) {
		if r, ok := n.(*ir.Ref); ok {
			if _, vary := v.varying[r.Name]; vary || r.Name == v.j {
				found = true
			}
		}
	})
	return found
}

// block rewrites the body's statements, or reports that one does not
// qualify.
func (v *lanes) block(b *ir.Block) ([]ir.Stmt, bool) {
	var out []ir.Stmt
	for _, s := range b.Stmts {
		switch x := s.(type) {
		case *ir.Let:
			if !v.changes(x.Value) {
				out = append(out, x)
				continue
			}
			e, ok := v.expr(x.Value)
			if !ok {
				return nil, false
			}
			v.varying[x.Name] = e.Type()
			out = append(out, &ir.Let{Name: x.Name, Value: e})
		case *ir.Var:
			e, ok := v.value(x.Init)
			if !ok {
				return nil, false
			}
			v.varying[x.Name] = e.Type()
			v.vars[x.Name] = true
			out = append(out, &ir.Var{Name: x.Name, Init: e})
		case *ir.Assign:
			e, ok := v.assigned(x.Name, x.Value)
			if !ok {
				return nil, false
			}
			out = append(out, &ir.Assign{Name: x.Name, Value: e})
		case *ir.Store:
			base, unit := unitStride(x.Index, v.j)
			e, ok := v.value(x.Value)
			if !unit || v.changes(base) || !ok || e.Type().Elem() == ir.Bool {
				return nil, false
			}
			out = append(out, &ir.Store{Buf: x.Buf, Index: addE(base, v.j0), Value: e})
		case *ir.If:
			sel, ok := v.ifSelects(x)
			if !ok {
				return nil, false
			}
			out = append(out, sel...)
		default:
			return nil, false
		}
	}
	return out, true
}

// assigned is value, lane by lane, for the body's var name.
func (v *lanes) assigned(name string, value ir.Expr) (ir.Expr, bool) {
	if !v.vars[name] {
		return nil, false // a var of the enclosing code: a loop-carried value
	}
	e, ok := v.value(value)
	if !ok || e.Type() != v.varying[name] {
		return nil, false
	}
	return e, true
}

// ifSelects writes an if whose branches only assign the body's vars as
// selects: each lane keeps its var's value where its branch does not run.
// Both branches' values are computed for every lane, so they must not
// load (a load the condition guards may be out of bounds).
func (v *lanes) ifSelects(x *ir.If) ([]ir.Stmt, bool) {
	cond, ok := v.cond(x.Cond)
	if !ok {
		return nil, false
	}
	var out []ir.Stmt
	for _, br := range []struct {
		b    *ir.Block
		then bool
	}{{x.Then, true}, {x.Else, false}} {
		if br.b == nil {
			continue
		}
		for _, s := range br.b.Stmts {
			a, ok := s.(*ir.Assign)
			if !ok || loads(a.Value) {
				return nil, false
			}
			e, ok := v.assigned(a.Name, a.Value)
			if !ok {
				return nil, false
			}
			keep := ir.R(a.Name, e.Type())
			if br.then {
				out = append(out, &ir.Assign{Name: a.Name, Value: ir.Sel(cond, e, keep)})
			} else {
				out = append(out, &ir.Assign{Name: a.Name, Value: ir.Sel(cond, keep, e)})
			}
		}
	}
	return out, true
}

// cond is a select's or an if's condition c: a bool vector where it
// changes with j, else c itself (a scalar condition selects for every
// lane alike).
func (v *lanes) cond(c ir.Expr) (ir.Expr, bool) {
	if v.changes(c) {
		return v.expr(c)
	}
	return c, true
}

// loads reports whether e reads memory.
func loads(e ir.Expr) bool {
	found := false
	ir.VisitExpr(e, func(n ir.Expr) {
		if _, ok := n.(*ir.Load); ok {
			found = true
		}
	})
	return found
}

// value is e lane by lane, broadcast when it does not change with j.
func (v *lanes) value(e ir.Expr) (ir.Expr, bool) {
	if v.changes(e) {
		return v.expr(e)
	}
	t := e.Type()
	if t.IsVector() || t == ir.Bool || t.IsStorageOnly() {
		return nil, false
	}
	return ir.Splat(e, v.L), true
}

// expr is e, which changes with j or is an operand of an expression that
// does, lane by lane.
func (v *lanes) expr(e ir.Expr) (ir.Expr, bool) {
	if !v.changes(e) {
		return v.value(e)
	}
	t := e.Type()
	if t.IsVector() || t.IsStorageOnly() {
		return nil, false
	}
	switch x := e.(type) {
	case *ir.Ref:
		vt, ok := v.varying[x.Name]
		return ir.R(x.Name, vt), ok // j itself as a value: not written
	case *ir.Load:
		base, unit := unitStride(x.Index, v.j)
		if !unit || v.changes(base) || x.T == ir.Bool {
			return nil, false
		}
		return ir.Ld(x.Buf, ir.Vec(x.T, v.L), addE(base, v.j0)), true
	case *ir.Binary:
		if (x.Op == ir.Div || x.Op == ir.Rem) && x.X.Type().IsInt() {
			return nil, false // no vector integer division in codegen
		}
		a, ok1 := v.expr(x.X)
		b, ok2 := v.expr(x.Y)
		return ir.Bin(x.Op, a, b), ok1 && ok2
	case *ir.Unary:
		switch {
		case x.Op == ir.Neg || x.Op == ir.Not:
		case (x.Op == ir.Abs || x.Op == ir.Sqrt || x.Op == ir.Floor) && !t.IsInt():
		default:
			return nil, false // exp, log, tanh, ...: libm per lane
		}
		a, ok := v.expr(x.X)
		return &ir.Unary{Op: x.Op, X: a}, ok
	case *ir.Select:
		cond, ok := v.cond(x.Cond)
		a, ok1 := v.expr(x.X)
		b, ok2 := v.expr(x.Y)
		return ir.Sel(cond, a, b), ok && ok1 && ok2
	case *ir.Convert:
		if x.X.Type().IsStorageOnly() || x.X.Type() == ir.Bool || x.To == ir.Bool {
			return nil, false
		}
		a, ok := v.expr(x.X)
		return &ir.Convert{To: ir.Vec(x.To, v.L), X: a}, ok
	case *ir.Bitcast:
		if x.X.Type().IsVector() || x.To.IsStorageOnly() || x.X.Type().IsStorageOnly() {
			return nil, false
		}
		a, ok := v.expr(x.X)
		return &ir.Bitcast{To: ir.Vec(x.To, v.L), X: a}, ok
	case *ir.MulAdd:
		a, ok1 := v.expr(x.X)
		b, ok2 := v.expr(x.Y)
		c, ok3 := v.expr(x.Z)
		return &ir.MulAdd{X: a, Y: b, Z: c}, ok1 && ok2 && ok3
	}
	return nil, false
}
