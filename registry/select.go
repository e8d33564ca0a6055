package registry

import (
	"fmt"
	"math"

	"github.com/attnc/attnc/ir"
)

// Shape is a call's shape.
type Shape struct {
	QLens, KVLens []int
	// Batch, when > 0, is the number of sequences, all with the one length
	// QLens and KVLens then hold: a batch too large to list.
	Batch   int
	Threads int // CPU worker threads
	SMs     int // GPU multiprocessors
	// DecodeLayout says q rows are laid out one per sequence (q[b]), as the
	// decode entry and the prefill entry's decode dispatch require. Select
	// lays rows out packed in sequence order, which for one-token
	// sequences is that layout.
	DecodeLayout bool
}

// Selection is what serves a call.
type Selection struct {
	Target   string
	Role     ir.Role // the entry that does the work: prefill or decode
	Symbol   string  // that entry's symbol
	Splits   int     // KV chunks per work item; > 1 adds a merge
	Items    int     // work items of the launches that run (CPU); 0 when unknown
	Merge    bool    // chunks are merged with the merge_state update
	Launches []LaunchSelection
	// Grids says the launches have a grid, block and shared memory (a GPU
	// target's: Host.Launch filled them); else the work items run on
	// worker threads and Items counts them.
	Grids bool
	// TooLarge says the call needs more work items than the parallel
	// loops count (a limit of the plan fails with TOO_LARGE): the entry
	// returns that status without computing anything (Items is 0).
	TooLarge bool
}

// LaunchSelection is one work-kernel launch of a selection.
type LaunchSelection struct {
	Kernel string
	Items  int  // work items; 0 with ItemsKnown false
	Known  bool // Items could be computed on the host
	Grid   int  // GPU: blocks
	Block  int  // GPU: threads per block
	Smem   int  // GPU: dynamic shared memory bytes
}

// Host says how a target's entry evaluates a plan.
type Host struct {
	Target  string
	Threads int  // the value of ir.PlanThreads
	Lengths bool // the entry reads the sequences' lengths (else SeqValue.Host stand-ins)
	// Launch completes a launch's target part (grid, block, shared
	// memory); nil leaves them 0.
	Launch func(l *LaunchSelection)
}

// Select says what serves a call of shape s to the module's entries on a
// host: decode when every sequence has one query token and the module has
// a public decode entry, prefill otherwise (and prefill hands over to
// decode when its plan says so and the host can tell). Every number comes
// from evaluating the module's plans with the IR interpreter: the very
// expressions the entries compile.
func Select(v *ir.Variant, m *ir.Module, s Shape, h Host) (Selection, error) {
	if len(s.QLens) != len(s.KVLens) {
		return Selection{}, fmt.Errorf("shape: %d q lengths but %d kv lengths", len(s.QLens), len(s.KVLens))
	}
	n := len(s.QLens)
	if s.Batch > 0 {
		if n != 1 {
			return Selection{}, fmt.Errorf("shape: a batch of %d needs one q and one kv length, got %d", s.Batch, n)
		}
		n = s.Batch
	}
	single := n > 0
	for i, q := range s.QLens {
		if q > s.KVLens[i] && !v.NonCausal() { // mask none: cross attention takes any lengths
			return Selection{}, fmt.Errorf("shape: sequence %d has q_len %d > kv_len %d", i, q, s.KVLens[i])
		}
		single = single && q == 1
	}
	p := m.Plan(ir.RolePrefill)
	if d := m.Plan(ir.RoleDecode); d != nil && (p == nil || single && d.Public) {
		p = d
	}
	if p == nil {
		return Selection{}, fmt.Errorf("module %s has no prefill or decode plan", m.Name)
	}
	env := map[string]any{"batch_size": int32(n), ir.PlanThreads: int32(h.Threads)}
	seq := func(p *ir.Plan) error {
		for _, sv := range p.Seq {
			v, known, err := seqValue(sv, s, h.Lengths, env)
			if err != nil {
				return err
			}
			if known {
				env[sv.Name] = v
			} else {
				delete(env, sv.Name)
			}
		}
		return nil
	}
	if err := seq(p); err != nil {
		return Selection{}, err
	}
	if hd := p.Handoff; hd != nil {
		if to := m.Plan(hd.Role); to != nil {
			if ok, known := evalBool(m, hd.When, env); known && ok {
				p = to
				if err := seq(p); err != nil {
					return Selection{}, err
				}
			}
		}
	}
	sel := Selection{Target: h.Target, Role: p.Role, Symbol: p.Entry, Splits: 1, Grids: h.Launch != nil}
	for _, c := range append(append([]ir.Check(nil), p.Checks...), p.Limits...) {
		if fail, known := evalBool(m, c.Fail, env); known && fail && c.Code == ir.StatusTooLarge {
			sel.TooLarge = true
			return sel, nil
		}
	}
	launches := p.Direct
	if sp := p.Split; sp != nil {
		n, known := evalInt(m, sp.Splits, env)
		if !known {
			return Selection{}, fmt.Errorf("%s: the split rule %s cannot be evaluated on this host", p.Entry, ir.ExprString(sp.Splits))
		}
		if n > 1 {
			sel.Splits, sel.Merge = n, true
			env[ir.PlanSplits] = int32(n)
			launches = sp.Launches
		}
	}
	known := true
	for i, l := range launches {
		ls := LaunchSelection{Kernel: l.Kernel}
		ls.Items, ls.Known = evalInt(m, l.Items, env)
		if h.Launch != nil {
			h.Launch(&ls)
		}
		sel.Launches = append(sel.Launches, ls)
		// The work items are the first launch's (a merge follows).
		if i == 0 {
			sel.Items, known = ls.Items, ls.Known
		}
	}
	if !known {
		sel.Items = 0
	}
	return sel, nil
}

// seqValue folds sv over the shape's sequences, or evaluates its host
// stand-in when the entry cannot read lengths.
func seqValue(sv ir.SeqValue, s Shape, lengths bool, env map[string]any) (v int32, known bool, err error) {
	if !lengths {
		if sv.Host == nil {
			return 0, false, nil
		}
		x, err := ir.EvalExpr(sv.Host, env)
		if err != nil {
			return 0, false, err
		}
		return x.(int32), true, nil
	}
	acc := int64(sv.Op.Identity(ir.I32).Int)
	qBeg := int64(0)
	for b, q := range s.QLens {
		x, err := ir.EvalExpr(sv.Of, map[string]any{ir.SeqB: int32(b), ir.SeqQBeg: int32(qBeg), ir.SeqQLen: int32(q), ir.SeqKVLen: int32(s.KVLens[b])})
		if err != nil {
			return 0, false, fmt.Errorf("seq value %s: %w", sv.Name, err)
		}
		y := int64(x.(int32))
		if sv.Op == ir.ReduceMax {
			acc = max(acc, y)
		} else {
			acc += y
		}
		qBeg += int64(q)
	}
	if s.Batch > 1 && sv.Op != ir.ReduceMax {
		// Every sequence of a uniform batch adds the same (its q_beg
		// differs; a sum over q_beg is not supported).
		acc *= int64(s.Batch)
	}
	return int32(min(max(acc, math.MinInt32), math.MaxInt32)), true, nil
}

// inline replaces calls of the module's Defs by their bodies.
func inline(m *ir.Module, e ir.Expr) ir.Expr {
	return ir.MapExpr(e, func(n ir.Expr) ir.Expr {
		c, ok := n.(*ir.Call)
		if !ok {
			return n
		}
		d := m.Def(c.Fn)
		if d == nil || len(d.Params) != len(c.Args) {
			return n
		}
		sub := map[string]ir.Expr{}
		for i, p := range d.Params {
			sub[p.Name] = c.Args[i]
		}
		return ir.Subst(d.Body, sub)
	})
}

// known reports whether every name e uses is bound in env.
func known(e ir.Expr, env map[string]any) bool {
	ok := true
	ir.VisitExpr(e, func(n ir.Expr) {
		if r, isRef := n.(*ir.Ref); isRef {
			if _, bound := env[r.Name]; !bound {
				ok = false
			}
		}
	})
	return ok
}

func evalInt(m *ir.Module, e ir.Expr, env map[string]any) (int, bool) {
	e = inline(m, e)
	if !known(e, env) {
		return 0, false
	}
	v, err := ir.EvalExpr(e, env)
	if err != nil {
		return 0, false
	}
	return int(v.(int32)), true
}

func evalBool(m *ir.Module, e ir.Expr, env map[string]any) (bool, bool) {
	e = inline(m, e)
	if !known(e, env) {
		return false, false
	}
	v, err := ir.EvalExpr(e, env)
	if err != nil {
		return false, false
	}
	return v.(bool), true
}
