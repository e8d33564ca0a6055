package cpu

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// FullTiles gives the fully visible KV tiles of prefill and decode a
// constant extent. classify-tiles splits a KV tile loop's body into
//
//	let tile_full = C
//	if tile_full { A } else { B }
//
// where A is B without the per-element mask, and A (like B) starts with
//
//	let kv_lo = L
//	let kv_n = min(T, X)      (X: kv_len - kv_lo, the positions left)
//
// so every loop of A — staging, the score and softmax rows, the reduce
// tails, the products' contraction — runs to kv_n, a bound the compiler
// cannot see. FullTiles sends A only the tiles of all T positions:
//
//	let tile_full = C & (T <= X[kv_lo := L])
//	if tile_full { A[kv_n := T] } else { B }
//
// and A's kv_n becomes the constant T, so opt folds its trip counts (no
// runtime checks of the vector loops' widths, no tails, the products'
// contraction a constant). A fully visible tile of fewer positions (the last
// tile of a sequence, when an item's queries all see it) runs B instead,
// whose mask hides nothing there: B is A with statements that act only on
// hidden positions (the @mask if, @hidden ones), so it computes the same
// values in the same order. Outputs are bit-identical; B is not copied, so
// the kernel does not grow.
//
// Prefill and decode work kernels. In decode every tile but a
// sequence's last is whole (TileRows positions), so nearly every tile
// takes A with the constant extent: x86-64-v4 instructions per (position,
// kv head) row of the bench's decode (scripts/stepcount.c) f16 224.9 →
// 195.9, bf16 238.6 → 212.3, e4m3 242.3 → 223.3, e5m2 214.6 → 196.8, i8
// 205.1 → 185.1 (the phase loops' width checks and tails, and the dot
// blocks' row clamps, go). An earlier version of whole decode tiles
// copied the tile body (a third more .ll); this one copies nothing, and
// the .ll shrinks.
func FullTiles(m *ir.Module) (*ir.Module, error) {
	out := *m
	out.Kernels = nil
	for _, k := range m.Kernels {
		if (k.Role != ir.RolePrefill && k.Role != ir.RoleDecode) || k.Entry {
			out.Kernels = append(out.Kernels, k)
			continue
		}
		nk := *k
		nk.Body = ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Tag != ir.TagKVTile {
				return []ir.Stmt{s}
			}
			nf := *f
			nf.Body = fullTileBody(f.Body)
			return []ir.Stmt{&nf}
		})
		out.Kernels = append(out.Kernels, &nk)
	}
	return &out, nil
}

// fullTileBody rewrites a KV tile body's `let tile_full = C; if tile_full
// {A} else {B}` as FullTiles says, or returns b as it is when it has no
// such pair or A does not start with the kv_lo and kv_n lets.
func fullTileBody(b *ir.Block) *ir.Block {
	for i := 0; i+1 < len(b.Stmts); i++ {
		let, ok := b.Stmts[i].(*ir.Let)
		if !ok || let.Name != "tile_full" {
			continue
		}
		br, ok := b.Stmts[i+1].(*ir.If)
		if !ok || br.Else == nil || !isRef(br.Cond, "tile_full") {
			return b
		}
		lo, n, ok := tileExtentLets(br.Then)
		if !ok {
			return b
		}
		t, x := n.Value.(*ir.Binary).X, n.Value.(*ir.Binary).Y
		left := ir.MapExpr(x, func(e ir.Expr) ir.Expr {
			if isRef(e, "kv_lo") {
				return cloneExpr(lo.Value)
			}
			return e
		})
		then := &ir.Block{Stmts: append([]ir.Stmt(nil), br.Then.Stmts...)}
		for j, s := range then.Stmts {
			if s == ir.Stmt(n) {
				then.Stmts[j] = &ir.Let{Name: "kv_n", Value: cloneExpr(t)}
			}
		}
		nb := &ir.Block{Stmts: append([]ir.Stmt(nil), b.Stmts...)}
		nb.Stmts[i] = &ir.Let{Name: "tile_full", Value: passes.SimplifyExpr(ir.Bin(ir.And, let.Value, ir.Bin(ir.Le, cloneExpr(t), left)))}
		nbr := *br
		nbr.Then = then
		nb.Stmts[i+1] = &nbr
		return nb
	}
	return b
}

// tileExtentLets finds A's leading `let kv_lo = L` and the `let kv_n =
// min(T, X)` after it (T a constant, X free of kv_n), with no other
// statement defining either name in between.
func tileExtentLets(a *ir.Block) (lo, n *ir.Let, ok bool) {
	if len(a.Stmts) < 2 {
		return nil, nil, false
	}
	lo, ok = a.Stmts[0].(*ir.Let)
	if !ok || lo.Name != "kv_lo" {
		return nil, nil, false
	}
	n, ok = a.Stmts[1].(*ir.Let)
	if !ok || n.Name != "kv_n" {
		return nil, nil, false
	}
	mn, ok := n.Value.(*ir.Binary)
	if !ok || mn.Op != ir.Min {
		return nil, nil, false
	}
	if c, isC := mn.X.(*ir.Const); !isC || c.T != ir.I32 || c.Int <= 0 {
		return nil, nil, false
	}
	return lo, n, true
}

func cloneExpr(e ir.Expr) ir.Expr { return ir.MapExpr(e, func(x ir.Expr) ir.Expr { return x }) }
