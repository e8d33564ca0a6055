package cpu

import (
	"math"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// Staged tiles kept as bf16 (x86-64-amx). Prefill stages each K and V
// tile of a bf16 cache into f32 arrays, which the f32 micro-kernels read
// many times; on the tiles only the packers read them, and they take the
// values back to bf16 pairs. So at an AMX level block-matmul keeps those
// arrays as bf16 (narrowTiles): the staging copies the pool's bf16
// elements as they are (2 bytes each, no widening), K's pairs packer
// reads a row's bf16 elements as the pairs they are, V's widens as it
// loads, and the f32 fallbacks (a tile holding a value the tiles would
// flush) widen as they load. On an AMD EPYC (Zen 4), 2048-token causal
// bf16 prefill without the tiles (scripts/amxstub.sh), staging and
// packing took 35% of the level's time besides the tiles.

// narrowTiles lists the arrays level l keeps as bf16: at an AMX level,
// the local f32 arrays of exact bf16 values (exact) whose stores each
// store a bf16 element widened to f32 or +0, and which only matmuls read,
// as their B, each one onTiles takes (its B packed for the tiles).
func narrowTiles(body *ir.Block, allocs map[string]*ir.Alloc, exact map[string]bool, onTiles func(*ir.MatMul) bool, l Level) map[string]bool {
	out := map[string]bool{}
	if !l.AMX {
		return out
	}
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if mm, ok := s.(*ir.MatMul); ok && onTiles(mm) {
			if a, ok := allocs[mm.B]; ok && a.T == ir.F32 && exact[mm.B] {
				out[mm.B] = true
			}
		}
		return []ir.Stmt{s}
	})
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Block, *ir.For, *ir.If:
			// their statements are visited on their own; loads in their
			// bounds and conditions below
		case *ir.Store:
			if out[x.Buf] && narrowStore(x.Value) == nil {
				delete(out, x.Buf)
			}
		case *ir.MatMul:
			reads, writes := passes.Accesses(s)
			for n := range reads {
				if n != x.B || !onTiles(x) || x.A == x.B || x.C == x.B {
					delete(out, n)
				}
			}
			for n := range writes {
				delete(out, n)
			}
		default:
			reads, writes := passes.Accesses(s)
			for n := range reads {
				delete(out, n)
			}
			for n := range writes {
				delete(out, n)
			}
		}
		return []ir.Stmt{s}
	})
	// No expression may load one: its loads would read f32.
	ir.MapStmtExprs(body, func(e ir.Expr) ir.Expr {
		ir.VisitExpr(e, func(n ir.Expr) {
			if l, ok := n.(*ir.Load); ok {
				delete(out, l.Buf)
			}
		})
		return e
	})
	return out
}

// narrowStore is the bf16 value a store into a narrowed array stores in
// place of value: the bf16 element it widens, or bf16 +0 for f32 +0; nil
// for any other value.
func narrowStore(v ir.Expr) ir.Expr {
	switch x := v.(type) {
	case *ir.Convert:
		if x.To == ir.F32 && x.X.Type() == ir.BF16 {
			return x.X
		}
	case *ir.Const:
		if x.T == ir.F32 && x.Float == 0 && !math.Signbit(x.Float) {
			return &ir.Const{T: ir.BF16}
		}
	}
	return nil
}

// narrowStmt is s with the arrays of narrow declared and stored as bf16.
func narrowStmt(s ir.Stmt, narrow map[string]bool) ir.Stmt {
	switch x := s.(type) {
	case *ir.Alloc:
		if narrow[x.Name] {
			c := *x
			c.T = ir.BF16
			return &c
		}
	case *ir.Store:
		if narrow[x.Buf] {
			return &ir.Store{Buf: x.Buf, Index: x.Index, Value: narrowStore(x.Value)}
		}
	}
	return s
}
