package gpu

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// RingStages is the depth of the shared-memory ring PipelineKV stages K/V
// tiles into when the block fits (see Layer.RingSlots): tile kt lives in slot
// kt % RingStages, and the copies of tile kt+1 are in flight while tile kt
// is computed.
const RingStages = 2

// PipelineKV stages each work item's K/V tiles with cp.async into a ring
// of RingStages shared-memory slots, so that the global-memory latency of
// tile kt+1 hides behind tile kt's tensor-core work (FlashAttention-2's
// and FlashInfer's shape). The KV tile loop
//
//	for kt in lo .. hi @kv_tile { [skip test] ... stage(kt) ... compute(kt) }
//
// becomes
//
//	if lo < hi && !skip(lo) { stage(lo) -> slot lo % 2 }; async.commit
//	for kt in lo .. hi @kv_tile {
//	  if kt+1 < hi && !skip(kt+1) { stage(kt+1) -> slot (kt+1) % 2 }
//	  async.commit; async.wait 1; barrier
//	  [skip test] ... compute(kt) on slot kt % 2
//	}
//
// where stage is the @stage spread of the tile body (with the lets it
// needs, kt substituted) and every 16-byte copy in it from a buffer into a
// staged array becomes a cp.async; its other stores (zeros for positions
// past the end or on hidden pages, RoPE-rotated rows, the kvis flags)
// stay ordinary stores into the same slot. The arrays the stage writes are
// doubled and every access to them inside the tile loop is offset by its
// slot. A skip test is the tile body's leading `if c { continue }`, so a
// skipped tile (outside a window, past the causal diagonal) is never
// fetched. Kernels whose stage does not fit this shape (two stage loops
// that differ, staged arrays used outside the tile loop, a stage that
// reads what the tile body writes) keep their synchronous staging. When
// Layer.RingSlots says the doubled tiles would cost the block its second
// resident block per SM, the ring has one slot and the wait is for every
// group (wait 0).
func (l *Layer) PipelineKV(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		params := map[string]bool{}
		for _, p := range k.Params {
			if p.Buffer {
				params[p.Name] = true
			}
		}
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Kind != ir.Parallel {
				return []ir.Stmt{s}
			}
			c := *f
			c.Body = l.pipelineItem(f.Body, params)
			return []ir.Stmt{&c}
		}), nil
	})
}

// pipelineItem rewrites the KV tile loop among a work item's own
// statements.
func (l *Layer) pipelineItem(body *ir.Block, params map[string]bool) *ir.Block {
	allocs := map[string]*ir.Alloc{}
	itemAllocs(body, allocs)
	idx := -1
	for i, s := range body.Stmts {
		if f, ok := s.(*ir.For); ok && f.Tag == ir.TagKVTile && f.Kind == ir.Serial {
			if idx >= 0 {
				return body // two tile loops: leave them
			}
			idx = i
		}
	}
	if idx < 0 {
		return body
	}
	tile := body.Stmts[idx].(*ir.For)
	st := findStage(tile)
	if st == nil {
		return body
	}
	_, written := passes.Accesses(st.loop)
	ring := map[string]*ir.Alloc{}
	for n := range written {
		a := allocs[n]
		if a == nil {
			return body // the stage writes something other than item arrays
		}
		ring[n] = a
	}
	// The staged arrays live in the tile loop only, and the stage reads
	// nothing the tile body writes (it moves one iteration earlier).
	for i, s := range body.Stmts {
		if i == idx {
			continue
		}
		if _, isAlloc := s.(*ir.Alloc); isAlloc {
			continue
		}
		r, w := passes.Accesses(s)
		for n := range ring {
			if r[n] || w[n] {
				return body
			}
		}
	}
	rest := removeStage(tile.Body)
	sr, _ := passes.Accesses(st.loop)
	_, bw := passes.Accesses(rest)
	for n := range sr {
		if bw[n] && ring[n] == nil {
			return body
		}
	}
	ringBytes := 0
	for _, a := range ring {
		ringBytes += align16(a.Size * a.T.Bits() / 8)
	}
	stages := RingStages
	if l.RingSlots != nil {
		stages = l.RingSlots(itemSmem(allocs), ringBytes)
	}
	kt := tile.Var
	ktR := ir.R(kt, ir.I32)
	slot := func(t ir.Expr) ir.Expr {
		if stages == 1 {
			return i32(0)
		}
		return ir.Bin(ir.And, t, i32(stages-1))
	}
	// stageAt is the stage of tile t (kt substituted), into t's slot,
	// its 16-byte buffer copies made asynchronous.
	stageAt := func(t ir.Expr) *ir.Block {
		sub := map[string]ir.Expr{kt: t}
		var stmts []ir.Stmt
		for _, l := range st.lets {
			stmts = append(stmts, &ir.Let{Name: l.Name, Value: ir.Subst(l.Value, sub)})
		}
		loop := ir.MapExprs(&ir.Block{Stmts: []ir.Stmt{st.loop}}, func(e ir.Expr) ir.Expr {
			if r, ok := e.(*ir.Ref); ok && r.Name == kt {
				return t
			}
			return e
		})
		loop = offsetRing(loop, ring, slot(t))
		loop = ir.MapStmts(loop, func(s ir.Stmt) []ir.Stmt {
			if c, ok := s.(*ir.Copy); ok && ring[c.Dst] != nil && params[c.Src] && c.N*ring[c.Dst].T.Bits() == 128 {
				a := *c
				a.Async = true
				return []ir.Stmt{&a}
			}
			return []ir.Stmt{s}
		})
		return &ir.Block{Stmts: append(stmts, loop.Stmts...)}
	}
	// fetch stages tile t when cond holds and t is not skipped. The skip
	// test's lets are evaluated for t under new names (substituting them
	// into one expression would copy each shared bound once per use).
	fetch := func(t, cond ir.Expr, suffix string) []ir.Stmt {
		var pre []ir.Stmt
		if st.skip != nil {
			sub := map[string]ir.Expr{kt: t}
			for _, l := range st.skipLets {
				name := l.Name + suffix
				pre = append(pre, &ir.Let{Name: name, Value: ir.Subst(l.Value, sub)})
				sub[l.Name] = ir.R(name, l.Value.Type())
			}
			cond = ir.Bin(ir.And, cond, ir.Un(ir.Not, ir.Subst(st.skip, sub)))
		}
		return append(pre, &ir.If{Cond: cond, Then: stageAt(t)})
	}
	next := add(ktR, i32(1))
	var head []ir.Stmt
	if stages > 1 {
		head = append(append(head, fetch(next, ir.Bin(ir.Lt, next, tile.Hi), "_next")...), &ir.AsyncCommit{}, &ir.AsyncWait{Pending: 1})
	} else {
		head = append(append(head, fetch(ktR, ir.BoolConst(true), "_this")...), &ir.AsyncCommit{}, &ir.AsyncWait{Pending: 0})
	}
	head = append(head, &ir.Barrier{})
	nt := *tile
	nt.Body = &ir.Block{Stmts: append(head, offsetRing(rest, ring, slot(ktR)).Stmts...)}
	var out []ir.Stmt
	for i, s := range body.Stmts {
		if a, ok := s.(*ir.Alloc); ok && ring[a.Name] != nil && stages > 1 {
			c := *a
			c.Size *= stages
			s = &c
		}
		if i == idx {
			if stages > 1 {
				out = append(append(out, fetch(tile.Lo, ir.Bin(ir.Lt, tile.Lo, tile.Hi), "_first")...), &ir.AsyncCommit{})
			}
			s = &nt
		}
		out = append(out, s)
	}
	return &ir.Block{Stmts: out}
}

// stageInfo is a tile body's stage loop, the lets it needs (in order) and
// the tile's skip condition (nil when it has none).
type stageInfo struct {
	loop *ir.For
	lets []*ir.Let
	skip ir.Expr
	// skipLets are the tile body's leading lets that skip reads, directly
	// or through one another, in order.
	skipLets []*ir.Let
}

// findStage finds the tile body's @stage spread; every copy of it (the
// tile classes classify-tiles made) must be the same, with the same lets.
func findStage(tile *ir.For) *stageInfo {
	var found *stageInfo
	same := true
	var walk func(b *ir.Block, lets []*ir.Let)
	walk = func(b *ir.Block, lets []*ir.Let) {
		lets = append([]*ir.Let(nil), lets...)
		for _, s := range b.Stmts {
			switch x := s.(type) {
			case *ir.Let:
				lets = append(lets, x)
			case *ir.For:
				if x.Tag == ir.TagStage && x.Kind == ir.Spread {
					si := &stageInfo{loop: x, lets: neededLets(x, lets)}
					if found == nil {
						found = si
					} else if stageText(found) != stageText(si) {
						same = false
					}
					continue
				}
				walk(x.Body, lets)
			case *ir.If:
				walk(x.Then, lets)
				if x.Else != nil {
					walk(x.Else, lets)
				}
			case *ir.Block:
				walk(x, lets)
			}
		}
	}
	walk(tile.Body, nil)
	if found == nil || !same {
		return nil
	}
	// The skip test: a leading `let c = E; if c { continue }`.
	var lets []*ir.Let
	for _, s := range tile.Body.Stmts {
		if l, ok := s.(*ir.Let); ok {
			lets = append(lets, l)
			continue
		}
		if x, ok := s.(*ir.If); ok && x.Else == nil && len(x.Then.Stmts) == 1 {
			if _, ok := x.Then.Stmts[0].(*ir.Continue); ok {
				found.skip, found.skipLets = x.Cond, usedLets(x.Cond, lets)
			}
		}
		break
	}
	return found
}

// neededLets are the lets of scope that loop uses, directly or through
// other lets, in order.
func neededLets(loop *ir.For, scope []*ir.Let) []*ir.Let {
	need := map[string]bool{}
	mark := func(e ir.Expr) ir.Expr {
		ir.VisitExpr(e, func(n ir.Expr) {
			if r, ok := n.(*ir.Ref); ok {
				need[r.Name] = true
			}
		})
		return e
	}
	ir.MapStmtExprs(&ir.Block{Stmts: []ir.Stmt{loop}}, mark)
	var out []*ir.Let
	for i := len(scope) - 1; i >= 0; i-- {
		if need[scope[i].Name] {
			out = append([]*ir.Let{scope[i]}, out...)
			mark(scope[i].Value)
		}
	}
	return out
}

// usedLets are the lets that e reads, directly or through one another, in
// their order.
func usedLets(e ir.Expr, lets []*ir.Let) []*ir.Let {
	need := map[string]bool{}
	mark := func(e ir.Expr) {
		ir.VisitExpr(e, func(n ir.Expr) {
			if r, ok := n.(*ir.Ref); ok {
				need[r.Name] = true
			}
		})
	}
	mark(e)
	var out []*ir.Let
	for i := len(lets) - 1; i >= 0; i-- {
		if need[lets[i].Name] {
			out = append([]*ir.Let{lets[i]}, out...)
			mark(lets[i].Value)
		}
	}
	return out
}

func stageText(s *stageInfo) string {
	var stmts []ir.Stmt
	for _, l := range s.lets {
		stmts = append(stmts, l)
	}
	stmts = append(stmts, s.loop)
	return ir.StmtString(&ir.Block{Stmts: stmts})
}

// removeStage drops the @stage spreads of a tile body.
func removeStage(b *ir.Block) *ir.Block {
	return ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok && f.Tag == ir.TagStage && f.Kind == ir.Spread {
			return nil
		}
		return []ir.Stmt{s}
	})
}

// offsetRing moves every access to a ring array into the slot: index +
// slot * size.
func offsetRing(b *ir.Block, ring map[string]*ir.Alloc, slot ir.Expr) *ir.Block {
	if c, ok := slot.(*ir.Const); ok && c.Int == 0 {
		return b
	}
	off := func(name string, idx ir.Expr) ir.Expr {
		a := ring[name]
		if a == nil {
			return idx
		}
		o := mul(slot, i32(a.Size))
		if idx.Type() == ir.I64 {
			o = ir.Cvt(ir.I64, o)
		}
		return add(idx, o)
	}
	return Reindex(b, off)
}

// itemAllocs collects the arrays a work item declares outside its spread
// loops (those stage-shared puts in shared memory).
func itemAllocs(b *ir.Block, out map[string]*ir.Alloc) {
	for _, s := range b.Stmts {
		switch x := s.(type) {
		case *ir.Alloc:
			out[x.Name] = x
		case *ir.For:
			if x.Kind != ir.Spread && x.Kind != ir.Lanes {
				itemAllocs(x.Body, out)
			}
		case *ir.If:
			itemAllocs(x.Then, out)
			if x.Else != nil {
				itemAllocs(x.Else, out)
			}
		case *ir.Block:
			itemAllocs(x, out)
		}
	}
}

// itemSmem is the shared memory the arrays take (16-byte aligned each):
// those stage-shared hoists, not the private (register) ones.
func itemSmem(allocs map[string]*ir.Alloc) int {
	n := 0
	for _, a := range allocs {
		if !a.Private {
			n += align16(a.Size * a.T.Bits() / 8)
		}
	}
	return n
}

func align16(n int) int { return (n + 15) &^ 15 }
