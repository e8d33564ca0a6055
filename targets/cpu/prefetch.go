package cpu

import (
	"fmt"
	"strconv"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// TileKBytes is about how many bytes of K rows a CPU decode tile stages
// and how far ahead PrefetchKV reaches: 16 rows of f16 at head dim 128.
// A staging loop runs in a burst between a tile's products, so rows a few
// iterations ahead arrive too late; the same rows of the next tile have a
// whole tile's work to come in. Over 8-bit
// codes the same bytes are 32 rows, which halves the per-tile softmax
// and product overheads per row.
const TileKBytes = 4096

// TileRows is how many K rows of rowBytes bytes make TileKBytes, as a
// power of two from 16 (the vector lanes of a dot-product block's keys;
// f32 rows at head dim 128 stay at 16) to 32.
func TileRows(rowBytes int) int {
	n := 16
	for n < 32 && (2*n)*rowBytes <= TileKBytes {
		n *= 2
	}
	return n
}

// PrefetchKV makes each iteration of a staging loop (TagStage, from 0 to
// its bound) prefetch the pool rows that iteration j+n copies, n
// iterations covering the TileRows of the widest row the loop copies (a
// decode tile's worth), in this tile or, when the loop's range on j says
// how many iterations the item has left (the lowering's page runs up to
// kv_rest-1), in a later one: the iteration's lets and guards are
// repeated for j+n (the page index read only when that run exists, the
// page only when the guards hold: -1 pages are never touched), each copy
// loop over a constant extent becomes one prefetch per 64-byte line of
// the row it reads, and a run loop (the rows of one page run) is unrolled
// over every row of the run — one page-table lookup, then the run's
// lines. A staging iteration that records row offsets instead of copying
// (Tiling.DecodeDirect: the products read the rows in the pool) prefetches
// the rows whose offsets the iteration j+n records, as it would copies.
// Scattered pages defeat the hardware prefetcher.
func PrefetchKV(m *ir.Module) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		elemBytes := map[string]int{}
		for _, p := range k.Params {
			if p.Buffer && !p.Output {
				elemBytes[p.Name] = max(1, p.Elem.Bits()/8)
			}
		}
		offs := rowOffsetArrays(k, elemBytes)
		return ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			f, ok := s.(*ir.For)
			if !ok || f.Tag != ir.TagStage {
				return []ir.Stmt{s}
			}
			if c, ok := ir.IsConst(f.Lo); !ok || c.Int != 0 {
				return []ir.Stmt{s}
			}
			// An iteration that copies a page run of r rows looks a tile
			// ahead in TileRows/r iterations (at least one).
			rows := max(1, runRows(f.Body, elemBytes, offs))
			ahead := ir.Bin(ir.Add, ir.R(f.Var, ir.I32), ir.Int(int64(max(1, TileRows(rowBytes(f.Body, elemBytes, offs))/rows))))
			body, n := prefetchBlock(f.Body, map[string]ir.Expr{f.Var: ahead}, elemBytes, offs, "_pf")
			if n == 0 {
				return []ir.Stmt{s}
			}
			exists := ir.Bin(ir.Lt, ahead, f.Hi)
			for _, r := range f.Ranges {
				if r.Var == f.Var {
					exists = ir.Bin(ir.Le, ahead, r.Hi)
				}
			}
			c := *f
			c.Body = &ir.Block{Stmts: append([]ir.Stmt{&ir.If{Cond: exists, Then: body}}, f.Body.Stmts...)}
			return []ir.Stmt{&c}
		}), nil
	})
}

// rowBytes is the most bytes one copy loop in b (or its ifs, or a run
// loop's body) reads from a param: a staged row.
func rowBytes(b *ir.Block, elemBytes map[string]int, rows map[string]rowRead) int {
	n := 0
	for _, s := range b.Stmts {
		switch x := s.(type) {
		case *ir.Store:
			if r, ok := rows[x.Buf]; ok {
				n = max(n, int(r.n)*elemBytes[r.buf])
			}
		case *ir.If:
			n = max(n, rowBytes(x.Then, elemBytes, rows))
		case *ir.For:
			if src, extent := copyRead(x, elemBytes); src != nil {
				n = max(n, int(extent)*elemBytes[src.Buf])
			} else if runExtent(x) > 0 {
				n = max(n, rowBytes(x.Body, elemBytes, rows))
			}
		}
	}
	return n
}

// runRows is how many rows one iteration of a staging loop whose body is
// b copies: the static extent of the run loop (a loop over rows that
// holds copy loops; the lowering's page runs) it holds, 1 when its copy
// loops are its own (a row per iteration), 0 when it copies nothing.
func runRows(b *ir.Block, elemBytes map[string]int, rows map[string]rowRead) int {
	for _, s := range b.Stmts {
		switch x := s.(type) {
		case *ir.Store:
			if _, ok := rows[x.Buf]; ok {
				return 1
			}
		case *ir.If:
			if n := runRows(x.Then, elemBytes, rows); n > 0 {
				return n
			}
		case *ir.For:
			if src, _ := copyRead(x, elemBytes); src != nil {
				return 1
			}
			if e := runExtent(x); e > 0 {
				if n := runRows(x.Body, elemBytes, rows); n > 0 {
					return int(e) * n
				}
			}
		}
	}
	return 0
}

// runExtent is the static extent of a loop from 0 whose bound is a
// constant or, once vectorize folded a guard into it, min(constant, e):
// the rows a run loop may copy; 0 for any other loop.
func runExtent(f *ir.For) int64 {
	if lo, ok := ir.IsConst(f.Lo); !ok || lo.Int != 0 {
		return 0
	}
	if c, ok := ir.IsConst(f.Hi); ok {
		return c.Int
	}
	if b, ok := f.Hi.(*ir.Binary); ok && b.Op == ir.Min {
		if c, ok := ir.IsConst(b.X); ok {
			return c.Int
		}
	}
	return 0
}

// prefetchBlock is b for another row: lets renamed with suffix (sub maps
// the old names to the new), ifs kept without their else, copy loops
// reading a param as prefetches, a run loop (runExtent) unrolled over its
// static extent — every row its page may hold, whatever the guard folded
// into its bound — every other statement dropped. n counts the
// prefetches.
func prefetchBlock(b *ir.Block, sub map[string]ir.Expr, elemBytes map[string]int, rows map[string]rowRead, suffix string) (*ir.Block, int) {
	out := &ir.Block{}
	n := 0
	for _, s := range b.Stmts {
		switch x := s.(type) {
		case *ir.Store:
			if r, ok := rows[x.Buf]; ok {
				row := ir.Subst(x.Value, sub)
				for d := int64(0); d < r.n; d += int64(64 / elemBytes[r.buf]) {
					out.Stmts = append(out.Stmts, &ir.Prefetch{Buf: r.buf, Index: ir.Bin(ir.Add, row, ir.IntT(ir.I64, d))})
					n++
				}
			}
		case *ir.Let:
			name := x.Name + suffix
			v := ir.Subst(x.Value, sub)
			out.Stmts = append(out.Stmts, &ir.Let{Name: name, Value: v})
			sub[x.Name] = ir.R(name, v.Type())
		case *ir.If:
			then, k := prefetchBlock(x.Then, sub, elemBytes, rows, suffix)
			if k > 0 {
				out.Stmts = append(out.Stmts, &ir.If{Cond: ir.Subst(x.Cond, sub), Then: then})
				n += k
			}
		case *ir.For:
			if src, _ := copyRead(x, elemBytes); src == nil && runRows(x.Body, elemBytes, rows) > 0 {
				for js := range runExtent(x) {
					inner := map[string]ir.Expr{x.Var: ir.Int(js)}
					for k, v := range sub {
						inner[k] = v
					}
					body, k := prefetchBlock(x.Body, inner, elemBytes, rows, fmt.Sprintf("%s%d", suffix, js))
					out.Stmts = append(out.Stmts, body.Stmts...)
					n += k
				}
				continue
			}
			ps := copyPrefetches(x, sub, elemBytes)
			out.Stmts = append(out.Stmts, ps...)
			n += len(ps)
		}
	}
	return out, n
}

// copyPrefetches are the prefetches of the lines a copy loop reads
// (copyRead).
func copyPrefetches(f *ir.For, sub map[string]ir.Expr, elemBytes map[string]int) []ir.Stmt {
	src, extent := copyRead(f, elemBytes)
	if src == nil {
		return nil
	}
	step := int64(64 / elemBytes[src.Buf])
	var out []ir.Stmt
	for d := int64(0); d < extent; d += step {
		s := map[string]ir.Expr{f.Var: ir.Int(d)}
		for k, v := range sub {
			s[k] = v
		}
		out = append(out, &ir.Prefetch{Buf: src.Buf, Index: ir.Subst(src.Index, s)})
	}
	return out
}

// copyRead is, for a copy loop `for d in 0 .. N { store _[_] = f(P[idx(d)])
// }` with N constant and P a param, P's load and N; nil for any other
// statement.
func copyRead(f *ir.For, elemBytes map[string]int) (*ir.Load, int64) {
	lo, ok1 := ir.IsConst(f.Lo)
	hi, ok2 := ir.IsConst(f.Hi)
	if !ok1 || !ok2 || lo.Int != 0 || len(f.Body.Stmts) != 1 {
		return nil, 0
	}
	st, ok := f.Body.Stmts[0].(*ir.Store)
	if !ok {
		return nil, 0
	}
	var src *ir.Load
	ir.VisitExpr(st.Value, func(e ir.Expr) {
		if l, ok := e.(*ir.Load); ok && elemBytes[l.Buf] > 0 && src == nil {
			src = l
		}
	})
	if src == nil {
		return nil, 0
	}
	return src, hi.Int
}

// rowRead is a row of n elements of param buf that a product reads at
// an offset held in a row-offset array (MatMul.BRows, written out by
// block-matmul or lower-tiles as loads buf[arr[r] + c]).
type rowRead struct {
	buf string
	n   int64
}

// rowOffsetArrays finds k's row-offset arrays: i64 arrays whose elements
// index a param's loads, each a row of the param's last dimension (a
// pool's row). A staging loop that stores such an offset reads that row
// (in the products, not in the loop), so prefetch-kv prefetches it as it
// would a copy.
func rowOffsetArrays(k *ir.Kernel, elemBytes map[string]int) map[string]rowRead {
	width := map[string]int64{}
	for _, p := range k.Params {
		if p.Buffer && !p.Output && len(p.Shape) > 0 {
			if n, err := strconv.ParseInt(p.Shape[len(p.Shape)-1], 10, 64); err == nil && n > 0 {
				width[p.Name] = n
			}
		}
	}
	out := map[string]rowRead{}
	ir.MapStmtExprs(k.Body, func(e ir.Expr) ir.Expr {
		ir.VisitExpr(e, func(n ir.Expr) {
			l, ok := n.(*ir.Load)
			if !ok || elemBytes[l.Buf] == 0 || width[l.Buf] == 0 {
				return
			}
			ir.VisitExpr(l.Index, func(m ir.Expr) {
				if r, ok := m.(*ir.Load); ok && r.T == ir.I64 && elemBytes[r.Buf] == 0 {
					out[r.Buf] = rowRead{buf: l.Buf, n: width[l.Buf]}
				}
			})
		})
		return e
	})
	return out
}
