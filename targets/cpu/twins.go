package cpu

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// MergeTwins makes each pair of local arrays that provably hold the same
// values one array: decode's row offsets of K and of V read in place
// (Tiling.DecodeDirect) over pools of one geometry, and their prefetch
// companions (prefetch-kv), are stored with the same values at the same
// indices, row by row. One array halves the staging's stores — four i64
// stores a row (koff, koff_pf, voff, voff_pf) and two more a row for the
// next tile's offsets, all scalar — and the products read V's rows at
// K's offsets. With one array f16 decode (32/8 heads, head dim 128,
// pages of 16) took 3.0–3.9% less time in cache, bf16 at x86-64-v4-bf16
// 5.3–5.9% (Zen 4, 1 thread, builds alternated, 6 and 4 pairs).
//
// Arrays a and b (Allocs of one block, the same element type and size)
// are twins (twins) when every store to b follows, in the same block, a
// store to a at an index of the same text and of a value of the same
// text, both with the block's lets before them written out (those that
// neither load nor read a variable), while nothing between the two
// stores reads a or b, writes a, b or a buffer the two expressions load,
// assigns a variable or defines a name again; every store to a has its
// store to b; nothing but stores writes either and nothing but loads
// reads them (passes.Accesses, loadsOnly); no nested block allocates
// either name again.
// From its first store on, b then holds a's values at every read; before
// it, both are uninitialized. The merge drops b's stores and its Alloc
// and reads a where b was read.
func MergeTwins(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		vars := map[string]bool{}
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if v, ok := s.(*ir.Var); ok {
				vars[v.Name] = true
			}
			return []ir.Stmt{s}
		})
		return mergeTwinsBlock(k.Body, vars), nil
	})
}

// mergeTwinsBlock merges the twin arrays allocated in b (and, through
// its nested blocks, those allocated there); vars are the kernel's
// variables. An array whose name a nested block allocates again stays as
// it is.
func mergeTwinsBlock(b *ir.Block, vars map[string]bool) *ir.Block {
	out := &ir.Block{Stmts: make([]ir.Stmt, len(b.Stmts))}
	for i, s := range b.Stmts {
		out.Stmts[i] = mergeTwinsNested(s, vars)
	}
	again := map[string]int{}
	ir.MapStmts(out, func(s ir.Stmt) []ir.Stmt {
		if a, ok := s.(*ir.Alloc); ok {
			again[a.Name]++
		}
		return []ir.Stmt{s}
	})
	var allocs []*ir.Alloc
	for _, s := range out.Stmts {
		if a, ok := s.(*ir.Alloc); ok {
			allocs = append(allocs, a)
		}
	}
	merged := map[string]bool{}
	for i, a := range allocs {
		if merged[a.Name] || again[a.Name] > 1 {
			continue
		}
		for _, c := range allocs[i+1:] {
			if merged[c.Name] || again[c.Name] > 1 || !sameAlloc(a, c) || !twins(out, a.Name, c.Name, vars) {
				continue
			}
			out = mergeInto(out, a.Name, c.Name)
			merged[c.Name] = true
		}
	}
	return out
}

// mergeTwinsNested is s with MergeTwins applied to its nested blocks.
func mergeTwinsNested(s ir.Stmt, vars map[string]bool) ir.Stmt {
	switch x := s.(type) {
	case *ir.For:
		c := *x
		c.Body = mergeTwinsBlock(x.Body, vars)
		return &c
	case *ir.If:
		c := *x
		c.Then = mergeTwinsBlock(x.Then, vars)
		if x.Else != nil {
			c.Else = mergeTwinsBlock(x.Else, vars)
		}
		return &c
	case *ir.Block:
		return mergeTwinsBlock(x, vars)
	}
	return s
}

// sameAlloc says whether a and c are arrays of one kind: the same
// element type, size and placement.
func sameAlloc(a, c *ir.Alloc) bool {
	x, y := *a, *c
	x.Name, y.Name = "", ""
	return ir.StmtString(&x) == ir.StmtString(&y)
}

// mergeInto is b (the block that allocates both) with array t merged
// into a: t's stores and Alloc dropped, its loads reading a.
func mergeInto(b *ir.Block, a, t string) *ir.Block {
	out := ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Store:
			if x.Buf == t {
				return nil
			}
		case *ir.Alloc:
			if x.Name == t {
				return nil
			}
		}
		return []ir.Stmt{s}
	})
	return ir.MapStmtExprs(out, func(e ir.Expr) ir.Expr {
		return ir.MapExpr(e, func(x ir.Expr) ir.Expr {
			if l, ok := x.(*ir.Load); ok && l.Buf == t {
				c := *l
				c.Buf = a
				return &c
			}
			return x
		})
	})
}

// twinStore is a store to a waiting for its store to b: its index and
// value as text with the block's lets written out, and the buffers and
// names those read.
type twinStore struct {
	index, value string
	loads, names map[string]bool
}

// twins says whether arrays a and b of block scope hold the same values
// wherever either is read (MergeTwins); vars are the kernel's variables.
// A let is written out only where its value neither loads nor reads a
// variable (written out, such a value would be read again at the store,
// after writes the let did not see) and is at most twinsExpandMax nodes
// long; other lets stay names.
func twins(scope *ir.Block, a, b string, vars map[string]bool) bool {
	stores := 0
	ok := true
	var walk func(blk *ir.Block)
	walk = func(blk *ir.Block) {
		lets, size := map[string]ir.Expr{}, map[string]int{}
		expand := func(e ir.Expr) ir.Expr {
			return ir.MapExpr(e, func(x ir.Expr) ir.Expr {
				if r, isRef := x.(*ir.Ref); isRef {
					if v, isLet := lets[r.Name]; isLet {
						return v
					}
				}
				return x
			})
		}
		var pending []twinStore
		for _, s := range blk.Stmts {
			if !ok {
				return
			}
			reads, writes := passes.Accesses(s)
			st, isStore := s.(*ir.Store)
			if !isStore && !compound(s) && (writes[a] || writes[b] || (reads[a] || reads[b]) && !loadsOnly(s)) {
				ok = false // a write by another statement, or a read mergeInto would not rename
				return
			}
			if isStore && (st.Buf == a || st.Buf == b) {
				stores++
				idx, val := expand(st.Index), expand(st.Value)
				if st.Buf == a {
					ts := twinStore{index: ir.ExprString(idx), value: ir.ExprString(val), loads: map[string]bool{}, names: map[string]bool{}}
					for _, e := range []ir.Expr{idx, val} {
						ir.VisitExpr(e, func(n ir.Expr) {
							switch y := n.(type) {
							case *ir.Load:
								ts.loads[y.Buf] = true
							case *ir.Ref:
								ts.names[y.Name] = true
							}
						})
					}
					if ts.loads[a] || ts.loads[b] {
						ok = false
						return
					}
					pending = append(pending, ts)
					continue
				}
				if len(pending) == 0 || pending[0].index != ir.ExprString(idx) || pending[0].value != ir.ExprString(val) {
					ok = false
					return
				}
				pending = pending[1:]
				continue
			}
			if len(pending) > 0 {
				// Between a store to a and its twin: no read of a or b,
				// no write of what the pending stores read, no assignment,
				// no name defined again, no nested statement.
				switch x := s.(type) {
				case *ir.Let:
					for _, p := range pending {
						if p.names[x.Name] {
							ok = false
						}
					}
				case *ir.Store:
					for _, p := range pending {
						if p.loads[x.Buf] {
							ok = false
						}
					}
				default:
					ok = false
				}
				if reads[a] || reads[b] {
					ok = false
				}
				if !ok {
					return
				}
			}
			if l, isLet := s.(*ir.Let); isLet {
				// Its own value walked, not the written-out one: the lets
				// it names count their written-out sizes.
				n, pure := 0, true
				ir.VisitExpr(l.Value, func(e ir.Expr) {
					n++
					switch y := e.(type) {
					case *ir.Load:
						pure = false
					case *ir.Ref:
						pure = pure && !vars[y.Name]
						n += size[y.Name]
					}
				})
				delete(lets, l.Name)
				delete(size, l.Name)
				if pure && n <= twinsExpandMax {
					lets[l.Name], size[l.Name] = expand(l.Value), n
				}
			}
			switch x := s.(type) {
			case *ir.For:
				walk(x.Body)
			case *ir.If:
				walk(x.Then)
				if x.Else != nil {
					walk(x.Else)
				}
			case *ir.Block:
				walk(x)
			}
		}
		if len(pending) > 0 {
			ok = false
		}
	}
	walk(scope)
	return ok && stores > 0
}

// twinsExpandMax is the most nodes a let twins writes out may have:
// longer ones stay names, so that chains of lets that name each other
// more than once cannot grow the compared text exponentially (decode's
// row offsets have 15).
const twinsExpandMax = 64

// loadsOnly says whether every array s reads it reads through a load in
// its expressions, which mergeInto renames: not a Copy's source, a
// MatMul's operands or rows, a tensor-core statement's fragments.
func loadsOnly(s ir.Stmt) bool {
	switch s.(type) {
	case *ir.Store, *ir.Let, *ir.Var, *ir.Assign, *ir.Prefetch, *ir.Alloc, *ir.Return, *ir.Continue:
		return true
	}
	return false
}

// compound says whether s holds statements (a loop, an if, a block),
// which twins walks on their own.
func compound(s ir.Stmt) bool {
	switch s.(type) {
	case *ir.For, *ir.If, *ir.Block:
		return true
	}
	return false
}
