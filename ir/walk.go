package ir

// MapExpr rebuilds e bottom-up, replacing each node n by f(n) after its
// children were mapped. f returns its argument to keep a node.
func MapExpr(e Expr, f func(Expr) Expr) Expr {
	switch x := e.(type) {
	case *Binary:
		e = &Binary{Op: x.Op, X: MapExpr(x.X, f), Y: MapExpr(x.Y, f)}
	case *Unary:
		e = &Unary{Op: x.Op, X: MapExpr(x.X, f)}
	case *Select:
		e = &Select{Cond: MapExpr(x.Cond, f), X: MapExpr(x.X, f), Y: MapExpr(x.Y, f)}
	case *Convert:
		e = &Convert{To: x.To, X: MapExpr(x.X, f)}
	case *Bitcast:
		e = &Bitcast{To: x.To, X: MapExpr(x.X, f)}
	case *Load:
		e = &Load{Buf: x.Buf, Index: MapExpr(x.Index, f), T: x.T}
	case *Call:
		args := make([]Expr, len(x.Args))
		for i, a := range x.Args {
			args[i] = MapExpr(a, f)
		}
		e = &Call{Fn: x.Fn, Args: args, T: x.T}
	case *Shuffle:
		e = &Shuffle{X: MapExpr(x.X, f), Mask: x.Mask}
	case *Guarded:
		e = &Guarded{Cond: MapExpr(x.Cond, f), X: MapExpr(x.X, f)}
	case *ParamRead:
		idx := make([]Expr, len(x.Index))
		for i, a := range x.Index {
			idx[i] = MapExpr(a, f)
		}
		e = &ParamRead{Name: x.Name, Index: idx, T: x.T}
	case *MulAdd:
		e = &MulAdd{X: MapExpr(x.X, f), Y: MapExpr(x.Y, f), Z: MapExpr(x.Z, f)}
	case *DotBF16:
		e = &DotBF16{X: MapExpr(x.X, f), Y: MapExpr(x.Y, f), Z: MapExpr(x.Z, f)}
	case *VShuffle:
		e = &VShuffle{X: MapExpr(x.X, f), Y: MapExpr(x.Y, f), Mask: append([]int(nil), x.Mask...)}
	case *Const:
		c := *x
		e = &c
	case *Ref:
		r := *x
		e = &r
	}
	return f(e)
}

// VisitExpr calls f on every node of e, parents first.
func VisitExpr(e Expr, f func(Expr)) {
	f(e)
	switch x := e.(type) {
	case *Binary:
		VisitExpr(x.X, f)
		VisitExpr(x.Y, f)
	case *Unary:
		VisitExpr(x.X, f)
	case *Select:
		VisitExpr(x.Cond, f)
		VisitExpr(x.X, f)
		VisitExpr(x.Y, f)
	case *Convert:
		VisitExpr(x.X, f)
	case *Bitcast:
		VisitExpr(x.X, f)
	case *Load:
		VisitExpr(x.Index, f)
	case *Shuffle:
		VisitExpr(x.X, f)
	case *Guarded:
		VisitExpr(x.Cond, f)
		VisitExpr(x.X, f)
	case *ParamRead:
		for _, a := range x.Index {
			VisitExpr(a, f)
		}
	case *MulAdd:
		VisitExpr(x.X, f)
		VisitExpr(x.Y, f)
		VisitExpr(x.Z, f)
	case *VShuffle:
		VisitExpr(x.X, f)
		VisitExpr(x.Y, f)
	case *DotBF16:
		VisitExpr(x.X, f)
		VisitExpr(x.Y, f)
		VisitExpr(x.Z, f)
	case *Call:
		for _, a := range x.Args {
			VisitExpr(a, f)
		}
	}
}

// Subst replaces Refs named in m by the given expressions.
func Subst(e Expr, m map[string]Expr) Expr {
	return MapExpr(e, func(n Expr) Expr {
		if r, ok := n.(*Ref); ok {
			if v, ok := m[r.Name]; ok {
				return v
			}
		}
		return n
	})
}

// MapStmts rewrites the statements of a block tree: f is called on every
// statement (after its nested blocks were rewritten) and returns the
// statements that replace it (nil deletes it).
func MapStmts(b *Block, f func(Stmt) []Stmt) *Block {
	if b == nil {
		return nil
	}
	out := &Block{}
	for _, s := range b.Stmts {
		switch x := s.(type) {
		case *Block:
			s = MapStmts(x, f)
		case *For:
			c := *x
			c.Body = MapStmts(x.Body, f)
			s = &c
		case *If:
			c := *x
			c.Then = MapStmts(x.Then, f)
			c.Else = MapStmts(x.Else, f)
			s = &c
		}
		out.Stmts = append(out.Stmts, f(s)...)
	}
	return out
}

// MapStmtExprs rewrites every expression held directly by statements of the
// tree (not nested blocks' structure) with g, through MapStmts.
func MapStmtExprs(b *Block, g func(Expr) Expr) *Block {
	return MapStmts(b, func(s Stmt) []Stmt {
		switch x := s.(type) {
		case *Let:
			return []Stmt{&Let{Name: x.Name, Value: g(x.Value)}}
		case *Var:
			return []Stmt{&Var{Name: x.Name, Init: g(x.Init)}}
		case *Assign:
			return []Stmt{&Assign{Name: x.Name, Value: g(x.Value)}}
		case *Store:
			return []Stmt{&Store{Buf: x.Buf, Index: g(x.Index), Value: g(x.Value)}}
		case *Prefetch:
			return []Stmt{&Prefetch{Buf: x.Buf, Index: g(x.Index), L1: x.L1}}
		case *Malloc:
			return []Stmt{&Malloc{Name: x.Name, T: x.T, Size: g(x.Size)}}
		case *Copy:
			c := *x
			c.DstIndex, c.SrcIndex = g(x.DstIndex), g(x.SrcIndex)
			return []Stmt{&c}
		case *LdMatrix:
			c := *x
			c.Index = g(x.Index)
			return []Stmt{&c}
		case *Return:
			return []Stmt{&Return{Value: g(x.Value)}}
		case *Reduce:
			return []Stmt{&Reduce{Name: x.Name, Op: x.Op, Var: x.Var, Lo: g(x.Lo), Hi: g(x.Hi), Value: g(x.Value)}}
		case *MatMul:
			c := *x
			c.MExt, c.NExt, c.KExt = g(x.MExt), g(x.NExt), g(x.KExt)
			return []Stmt{&c}
		case *CallStmt:
			args := make([]Expr, len(x.Args))
			for i, a := range x.Args {
				args[i] = g(a)
			}
			return []Stmt{&CallStmt{Result: x.Result, Fn: x.Fn, Args: args}}
		case *For:
			c := *x
			c.Lo, c.Hi = g(x.Lo), g(x.Hi)
			c.Ranges = nil
			for _, r := range x.Ranges {
				c.Ranges = append(c.Ranges, Range{Var: r.Var, Lo: g(r.Lo), Hi: g(r.Hi)})
			}
			c.Next = x.Next.Map(g)
			return []Stmt{&c}
		case *If:
			c := *x
			c.Cond = g(x.Cond)
			return []Stmt{&c}
		}
		return []Stmt{s}
	})
}

// MapExprs applies the node rewriter f (as in MapExpr) to every expression in
// the tree.
func MapExprs(b *Block, f func(Expr) Expr) *Block {
	return MapStmtExprs(b, func(e Expr) Expr { return MapExpr(e, f) })
}

// Map is n with f applied to its condition and values (nil for nil).
func (n *Next) Map(f func(Expr) Expr) *Next {
	if n == nil {
		return nil
	}
	c := &Next{When: f(n.When)}
	for _, x := range n.Subst {
		c.Subst = append(c.Subst, Rebind{Name: x.Name, Value: f(x.Value)})
	}
	return c
}

// CloneBlock deep-copies b.
func CloneBlock(b *Block) *Block {
	return MapExprs(b, func(e Expr) Expr { return e })
}
