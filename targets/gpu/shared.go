package gpu

import (
	"fmt"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// StageShared decides what a block shares: every array a work item
// declares outside its spread loops is visible to all of the item's
// iterations, so it becomes one shared-memory array per block, declared at
// the top of the work item. Then it puts barriers between the item's own
// statements (spread phases, and the loads and stores the whole block runs)
// wherever one writes a buffer or array another reads or writes: before
// such a statement, at the end of a loop body that accessed memory (the
// next iteration), before a continue, and at the end of the work item (the
// next item reuses the arrays).
func StageShared(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		var err error
		body := ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Kind != ir.Parallel || err != nil {
				return []ir.Stmt{s}
			}
			c := *f
			var shared []ir.Stmt
			seen := map[string]bool{}
			rest := hoistAllocs(f.Body, &shared, seen, &err)
			sync := &syncer{private: privateArrays(rest)}
			stmts := sync.block(rest.Stmts)
			stmts = append(stmts, sync.flush()...)
			c.Body = &ir.Block{Stmts: append(shared, stmts...)}
			return []ir.Stmt{&c}
		})
		return body, err
	})
}

// hoistAllocs removes the allocs of a work item's own statements (outside
// spreads) into shared, marked shared.
func hoistAllocs(b *ir.Block, shared *[]ir.Stmt, seen map[string]bool, err *error) *ir.Block {
	out := &ir.Block{}
	for _, s := range b.Stmts {
		switch x := s.(type) {
		case *ir.Alloc:
			if x.Private {
				break // registers of the item's threads (map-threads)
			}
			if seen[x.Name] {
				*err = fmt.Errorf("work item declares array %s twice", x.Name)
			}
			seen[x.Name] = true
			c := *x
			c.Shared = true
			*shared = append(*shared, &c)
			continue
		case *ir.For:
			if x.Kind != ir.Spread && x.Kind != ir.Lanes {
				c := *x
				c.Body = hoistAllocs(x.Body, shared, seen, err)
				s = &c
			}
		case *ir.If:
			c := *x
			c.Then = hoistAllocs(x.Then, shared, seen, err)
			if x.Else != nil {
				c.Else = hoistAllocs(x.Else, shared, seen, err)
			}
			s = &c
		case *ir.Block:
			s = hoistAllocs(x, shared, seen, err)
		}
		out.Stmts = append(out.Stmts, s)
	}
	return out
}

// syncer tracks what the block accessed since its last barrier; private
// arrays (each thread its own elements) need none.
type syncer struct {
	reads, writes map[string]bool
	private       map[string]bool
}

// privateArrays names the Private allocs of b.
func privateArrays(b *ir.Block) map[string]bool {
	out := map[string]bool{}
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if a, ok := s.(*ir.Alloc); ok && a.Private {
			out[a.Name] = true
		}
		return []ir.Stmt{s}
	})
	return out
}

func (y *syncer) dirty() bool { return len(y.reads)+len(y.writes) > 0 }

func (y *syncer) flush() []ir.Stmt {
	if !y.dirty() {
		return nil
	}
	y.reads, y.writes = nil, nil
	return []ir.Stmt{&ir.Barrier{}}
}

// conflicts reports whether accesses (r, w) conflict with the pending ones.
func (y *syncer) conflicts(r, w map[string]bool) bool {
	for n := range w {
		if y.private[n] {
			continue
		}
		if y.reads[n] || y.writes[n] {
			return true
		}
	}
	for n := range r {
		if y.writes[n] {
			return true
		}
	}
	return false
}

func (y *syncer) note(r, w map[string]bool) {
	if y.reads == nil {
		y.reads, y.writes = map[string]bool{}, map[string]bool{}
	}
	for n := range r {
		if !y.private[n] {
			y.reads[n] = true
		}
	}
	for n := range w {
		if !y.private[n] {
			y.writes[n] = true
		}
	}
}

func (y *syncer) copy() *syncer {
	c := &syncer{private: y.private}
	c.note(y.reads, y.writes)
	return c
}

// block places barriers among a work item's own statements.
func (y *syncer) block(stmts []ir.Stmt) []ir.Stmt {
	var out []ir.Stmt
	for _, s := range stmts {
		switch x := s.(type) {
		case *ir.If:
			r, w := passes.Accesses(&ir.Block{Stmts: []ir.Stmt{&ir.Let{Name: "_", Value: x.Cond}}})
			if y.conflicts(r, w) {
				out = append(out, y.flush()...)
			}
			y.note(r, w)
			c := *x
			then := y.copy()
			c.Then = &ir.Block{Stmts: then.block(x.Then.Stmts)}
			els := y.copy()
			if x.Else != nil {
				c.Else = &ir.Block{Stmts: els.block(x.Else.Stmts)}
			}
			y.reads, y.writes = nil, nil
			y.note(then.reads, then.writes)
			y.note(els.reads, els.writes)
			out = append(out, &c)
		case *ir.For:
			if x.Kind == ir.Spread || x.Kind == ir.Lanes {
				out = append(out, y.access(s)...)
				continue
			}
			r, w := passes.Accesses(s)
			if len(r)+len(w) == 0 {
				out = append(out, s)
				continue
			}
			// A loop over phases starts and ends each iteration synced.
			out = append(out, y.flush()...)
			c := *x
			inner := &syncer{private: y.private}
			body := inner.block(x.Body.Stmts)
			c.Body = &ir.Block{Stmts: append(body, inner.flush()...)}
			out = append(out, &c)
		case *ir.Block:
			out = append(out, &ir.Block{Stmts: y.block(x.Stmts)})
		case *ir.Continue:
			out = append(out, y.flush()...)
			out = append(out, s)
		case *ir.Barrier:
			y.reads, y.writes = nil, nil
			out = append(out, s)
		default:
			out = append(out, y.access(s)...)
		}
	}
	return out
}

// access places a barrier before s when it conflicts with what ran since
// the last one.
func (y *syncer) access(s ir.Stmt) []ir.Stmt {
	r, w := passes.Accesses(s)
	var out []ir.Stmt
	if y.conflicts(r, w) {
		out = y.flush()
	}
	y.note(r, w)
	return append(out, s)
}
