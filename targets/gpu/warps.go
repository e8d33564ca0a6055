package gpu

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// MapWarps gives each iteration of a spread loop whose body reduces one
// warp: `for v spread { body }` becomes `for v spread { for lane in 0 ..
// l.Lanes lanes { body' } }`, where each reduce of the body is a lane-strided
// partial folded by butterfly shuffles (every lane ends with the result),
// spreads nested in the body are strided over the lanes, and a store
// outside them is made by lane 0 alone.
func (l *Layer) MapWarps(m *ir.Module) (*ir.Module, error) {
	return l.withLanes(m, l.mapWarps)
}

func (l *Layer) mapWarps(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		var err error
		body := ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Kind != ir.Spread || !reducesDirectly(f.Body) {
				return []ir.Stmt{s}
			}
			c := *f
			lane := ir.R("lane", ir.I32)
			c.Body = &ir.Block{Stmts: []ir.Stmt{&ir.For{Var: "lane", Lo: i32(0), Hi: i32(l.Lanes), Kind: ir.Lanes,
				Body: l.warpBody(f.Body, lane)}}}
			return []ir.Stmt{&c}
		})
		return body, err
	})
}

// reducesDirectly reports whether b holds a Reduce outside nested loops.
func reducesDirectly(b *ir.Block) bool {
	for _, s := range b.Stmts {
		switch x := s.(type) {
		case *ir.Reduce:
			return true
		case *ir.If:
			if reducesDirectly(x.Then) || x.Else != nil && reducesDirectly(x.Else) {
				return true
			}
		case *ir.Block:
			if reducesDirectly(x) {
				return true
			}
		}
	}
	return false
}

// warpBody rewrites a spread body for the lanes of one warp.
func (l *Layer) warpBody(b *ir.Block, lane ir.Expr) *ir.Block {
	out := &ir.Block{}
	for _, s := range b.Stmts {
		switch x := s.(type) {
		case *ir.Reduce:
			out.Stmts = append(out.Stmts, l.laneReduce(x, lane)...)
		case *ir.For:
			if x.Kind == ir.Spread {
				out.Stmts = append(out.Stmts, l.laneStrided(x.Var, x.Lo, x.Hi, lane, serialize(x.Body)))
				continue
			}
			c := *x
			c.Body = l.warpBody(x.Body, lane)
			out.Stmts = append(out.Stmts, &c)
		case *ir.If:
			c := *x
			c.Then = l.warpBody(x.Then, lane)
			if x.Else != nil {
				c.Else = l.warpBody(x.Else, lane)
			}
			out.Stmts = append(out.Stmts, &c)
		case *ir.Block:
			out.Stmts = append(out.Stmts, l.warpBody(x, lane))
		case *ir.Store, *ir.Copy:
			out.Stmts = append(out.Stmts, &ir.If{Cond: ir.Bin(ir.Eq, lane, i32(0)), Then: &ir.Block{Stmts: []ir.Stmt{s}}})
		default:
			out.Stmts = append(out.Stmts, s)
		}
	}
	return out
}

// laneStrided runs body for v in [lo, hi), lane + Lanes*k for k = 0, 1,
// ...: `for v_k in 0 .. ceil((hi-lo)/Lanes) serial { let v = lo + lane +
// v_k*Lanes; if v < hi { body } }`.
func (l *Layer) laneStrided(v string, lo, hi, lane ir.Expr, body *ir.Block) ir.Stmt {
	k := ir.R(v+"_k", ir.I32)
	n := ir.Bin(ir.Sub, hi, lo)
	trips := ir.Bin(ir.Div, add(n, i32(l.Lanes-1)), i32(l.Lanes))
	at := add(lo, add(lane, mul(k, i32(l.Lanes))))
	return &ir.For{Var: k.Name, Lo: i32(0), Hi: trips, Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
		&ir.Let{Name: v, Value: at},
		&ir.If{Cond: ir.Bin(ir.Lt, ir.R(v, ir.I32), hi), Then: body},
	}}}
}

// laneReduce folds a reduce over the warp: each lane folds its strided
// share, then log2(Lanes) butterfly shuffles combine the lanes.
func (l *Layer) laneReduce(r *ir.Reduce, lane ir.Expr) []ir.Stmt {
	t := r.Value.Type()
	acc := r.Name + "_part"
	accR := ir.R(acc, t)
	op := r.Op.BinOp()
	out := []ir.Stmt{
		&ir.Var{Name: acc, Init: r.Op.Identity(t)},
		l.laneStrided(r.Var, r.Lo, r.Hi, lane, &ir.Block{Stmts: []ir.Stmt{&ir.Assign{Name: acc, Value: ir.Bin(op, accR, r.Value)}}}),
	}
	for s := l.Lanes / 2; s >= 1; s /= 2 {
		out = append(out, &ir.Assign{Name: acc, Value: ir.Bin(op, accR, &ir.Shuffle{X: accR, Mask: s})})
	}
	return append(out, &ir.Let{Name: r.Name, Value: accR})
}

// serialize turns the spread loops of b into serial loops (a lane runs
// them alone).
func serialize(b *ir.Block) *ir.Block {
	return ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok && f.Kind == ir.Spread {
			c := *f
			c.Kind = ir.Serial
			return []ir.Stmt{&c}
		}
		return []ir.Stmt{s}
	})
}
