package cpu

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// TileKBytes is the most bytes of K rows a CPU decode tile reads, and so
// how far ahead PrefetchKV reaches: 64 rows of f32 at head dim 128. A
// staging loop runs in a burst between a tile's products, so rows a few
// iterations ahead arrive too late; the same rows of the next tile have a
// whole tile's work to come in. Each tile pays its softmax steps (the
// group's max, exp, sum and rescale) once for all its rows, so longer
// tiles cost fewer instructions per row.
const TileKBytes = 32768

// TileRows is how many K rows of rowBytes bytes a decode tile takes: the
// most of TileMaxRows, 32 and 16 (the vector lanes of a dot-product
// block's keys) that fit in TileKBytes, and 16 where none does — 64 for
// f32 rows up to head dim 128, f16 and bf16 up to 256, 8-bit codes up to
// 512; 32 for f32 at 256; 16 for MLA's 576-wide bf16 rows. Measured on
// Zen 5 (thread CPU time, A B B A): f16 and bf16 at head dim 128 ran 9–15%
// faster at 32 rows than at 16, and 7–10% faster again at 64; 128 was no
// faster; 8-bit codes 3–9% faster at 64 than at 32 in cache, about the
// same cold. f32 rows (then limited to 16 KiB, 16 rows: at 32 or 64 rows
// Zen 5 ran 13% slower in cache, 4% faster cold) measured on Zen 4
// (`attnc bench --threads 2`, alternating builds): at head dim 128, 64
// rows took 5–9% less time cold (8 × 4096) and in L3 (4 × 256), 19–21%
// less at 1 thread (1 × 128 in L2, 1 × 512 in L3); f16 at head dim 256
// 4–7% less cold; f32 at 256 the same at 16, 32 and 64 rows.
func TileRows(rowBytes int) int {
	for _, n := range []int{TileMaxRows, 32} {
		if n*rowBytes <= TileKBytes {
			return n
		}
	}
	return 16
}

// TileMaxRows is the longest decode tile, in rows.
const TileMaxRows = 64

// PrefetchKV makes each iteration of a staging loop (TagStage, from 0 to
// its bound) fetch ahead the pool rows that iteration j+n reads, n
// iterations covering the TileRows of the widest row the loop stages (a
// decode tile's worth), in this tile or, when the loop's range on j says
// how many iterations the item has left (the lowering's page runs up to
// kv_rest-1), in a later one: the iteration's lets and guards are
// repeated for j+n (the page index read only when that run exists, the
// page only when the guards hold: -1 pages are never touched), and a run
// loop (the rows of one page run) is unrolled over every row of the run —
// one page-table lookup, then the run's rows.
//
// A copy loop over a constant extent becomes one prefetch per 64-byte
// line of the row it reads, at the head of the iteration. A staging
// iteration that records row offsets instead of copying (Tiling.
// DecodeDirect: the products read the rows in the pool at
// buf[off[r] + c]) records, beside each offset off[jr], the offset of the
// row a tile ahead in a companion array off_pf (slot (jr+n) mod its
// length; a row whose run does not exist or whose page fails the guards
// leaves the row's own offset there), and every product load
// buf[off[r] + c] that starts one of its row's 64-byte lines is followed
// by a prefetch of a line of the next tile's rows in off_pf: the next
// tile's lines stream in as the current tile's products consume their
// own, instead of a burst of a whole tile's prefetches that fills the
// miss buffers while the arithmetic waits. For rows of at most seqLines
// lines, the prefetches walk each K and V block of the next tile line by
// line, in address order, whatever order the products read the current
// one in (seqGroup): a group of n loads of n rows at one column (a dot
// block's step) prefetches n lines of one row — of n/lines rows when a
// row has fewer lines than the group has rows (seqGroupShort: 8-bit codes
// at head dim 128, 2 lines a row). Row-strided prefetches (one line of
// each of 4 rows, then the next line of each) left more of the reads to
// wait: in address order, f16 and bf16 decode took 6–9% less CPU time (1
// thread, 8 × 4096, 16-row tiles, against the same kernels with
// row-strided prefetches). P·V's loop over rows (rowPass) prefetches
// row-strided, each load's line of the next tile's row beside it: with
// 64-row tiles the address order (the block's next lines, the pass's
// share of them) ran no faster — f16 the same, bf16 7% slower cold — for
// 8.5% more instructions per row. Over rows of at most pairLines lines
// (8-bit codes at head dim 128) P·V prefetches nothing: the dot blocks'
// K prefetches are each followed by the same line of the next tile's V
// row (pairRows).
//
// Over 8-bit codes (2-line rows) the same spread covers every line of
// the next tile (TestSpreadPrefetchesCoverNextTile), and on a cold pool
// the whole difference to the same decode in cache sits at the prefetch
// instructions themselves (perf: the instruction after the first
// prefetch of a dot-block step and of a P·V row), not at the products'
// loads nor the finite-codes check's: the prefetches wait, most likely
// for the core's miss buffers. Measured without a gain (process CPU time,
// A B B A, cold 512 MiB pool, 32-row tiles; session 12, Zen 5): prefetching two
// tiles ahead, prefetcht1/t2 instead of t0, and K in address order;
// prefetching every other line (leaving the rest to the hardware
// prefetchers) or only a page run's first rows took 20% and 40% longer.
//
// The prefetches fill L2, not L1 (codegen/llvm emits locality 2,
// prefetcht1): on Zen 4, with 64-row tiles, that took 17-25% less time
// than prefetcht0 for f32, f16 and bf16 decode from memory (8 × 4096,
// 2 threads) and 5-8% less for 8-bit codes. A dot block's step also
// prefetches into L1 (Prefetch.L1) the lines of the next block's rows of
// its own tile, which the prefetches a tile ahead left in L2 (nextBlock;
// rows of 4 or more lines, f32, f16 and bf16 at head dim 128).
//
// A kernel with a product load of another form (or inside a vector loop)
// prefetches its recorded rows at the head of the staging iteration, as
// copies.
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
		// Only decode spreads its prefetches over the products' loads:
		// a prefill tile's P·V reads each V row once per block of query
		// rows (about 20 times), so a prefetch beside each load would be
		// repeated as often, in the micro-kernels' inner loop. Prefill
		// reading in place (Tiling.PrefillDirect) prefetches its recorded
		// rows at the head of the staging iteration, as copies.
		var sp *spread
		if k.Role == ir.RoleDecode {
			sp = newSpread(k, offs, elemBytes)
		}
		body := ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
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
			pf := &pfBlock{elemBytes: elemBytes, rows: offs, spread: sp}
			body, n := pf.block(f.Body, map[string]ir.Expr{f.Var: ahead}, "_pf")
			if n == 0 {
				return []ir.Stmt{s}
			}
			exists := ir.Bin(ir.Lt, ahead, f.Hi)
			for _, r := range f.Ranges {
				if r.Var == f.Var {
					exists = ir.Bin(ir.Le, ahead, r.Hi)
				}
			}
			recorded := pf.recorded
			look := &ir.If{Cond: exists, Then: body, Else: pf.nextItem(f)}
			c := *f
			if recorded == 0 {
				c.Body = &ir.Block{Stmts: append([]ir.Stmt{look}, f.Body.Stmts...)}
				return []ir.Stmt{&c}
			}
			// The row's own offset first, the row a tile ahead over it
			// where that row exists.
			own := ir.MapStmts(f.Body, func(s ir.Stmt) []ir.Stmt {
				if st, ok := s.(*ir.Store); ok && sp.pf[st.Buf] != "" {
					return []ir.Stmt{s, &ir.Store{Buf: sp.pf[st.Buf], Index: st.Index, Value: st.Value}}
				}
				return []ir.Stmt{s}
			})
			c.Body = &ir.Block{Stmts: append(own.Stmts, look)}
			return []ir.Stmt{&c}
		})
		if sp == nil {
			return body, nil
		}
		return sp.products(body, elemBytes, nil), nil
	})
}

// nextItem is what an iteration of staging loop f fetches when the
// iteration a tile ahead does not exist in its item (its last tile's):
// where the lowering names the thread's next item (ir.For.Next: a
// decode's next kv head of the same sequence, whose first tile is this
// item's), the same iteration of that item's first tile — its rows'
// offsets into the companion arrays, or its lines prefetched —, when the
// next item exists and has that iteration; nil otherwise. Without it
// every item's first tile started cold: gpt-oss-20b's sliding decode
// (window 128: items of two tiles) took 21–23% less time with it (Zen 5,
// 1 thread, 64 sequences; 11–16% at 2 threads over 8).
func (pf *pfBlock) nextItem(f *ir.For) *ir.Block {
	if f.Next == nil {
		return nil
	}
	sub := map[string]ir.Expr{}
	for _, b := range f.Next.Subst {
		sub[b.Name] = b.Value
	}
	within := map[string]ir.Expr{}
	maps.Copy(within, sub)
	body, n := pf.block(f.Body, sub, "_nx")
	if n == 0 {
		return nil
	}
	cond := f.Next.When
	for _, r := range f.Ranges {
		if r.Var == f.Var {
			cond = ir.Bin(ir.And, cond, ir.Bin(ir.Le, ir.R(f.Var, ir.I32), ir.Subst(r.Hi, within)))
		}
	}
	return &ir.Block{Stmts: []ir.Stmt{&ir.If{Cond: cond, Then: body}}}
}

// spread is a kernel's plan for prefetching its recorded rows from the
// products: pf names each row-offset array's companion, size its length.
type spread struct {
	offs map[string]rowRead
	pf   map[string]string
	size map[string]int
	// pairK and pairV are the row-offset arrays that only dot blocks
	// read (K) and that only P·V's row passes read (V), when pairRows
	// pairs them: each prefetch of pairK's next-tile line is followed by
	// the same line of pairV's, whose own loads then prefetch nothing.
	pairK, pairV string
}

// newSpread is the spread plan of k, or nil when some product load of a
// row-offset array is not of the form buf[off[r] + c], sits in a vector
// loop, or the array is no local array of known length.
func newSpread(k *ir.Kernel, offs map[string]rowRead, elemBytes map[string]int) *spread {
	if len(offs) == 0 {
		return nil
	}
	sp := &spread{offs: offs, pf: map[string]string{}, size: map[string]int{}}
	names := map[string]bool{}
	for _, p := range k.Params {
		names[p.Name] = true
	}
	ok := true
	var walk func(b *ir.Block, inVector bool)
	walk = func(b *ir.Block, inVector bool) {
		for _, s := range b.Stmts {
			switch x := s.(type) {
			case *ir.Alloc:
				names[x.Name] = true
				if _, isOff := offs[x.Name]; isOff {
					sp.size[x.Name] = x.Size
				}
			case *ir.Let:
				names[x.Name] = true
			case *ir.Var:
				names[x.Name] = true
			case *ir.For:
				names[x.Var] = true
				walk(x.Body, inVector || x.Kind == ir.Vector)
				continue
			case *ir.If:
				walk(x.Then, inVector)
				if x.Else != nil {
					walk(x.Else, inVector)
				}
				continue
			case *ir.Block:
				walk(x, inVector)
				continue
			}
			for _, e := range stmtExprs(s) {
				ir.VisitExpr(e, func(n ir.Expr) {
					l, isLoad := n.(*ir.Load)
					if !isLoad {
						return
					}
					if _, isOff := offs[l.Buf]; isOff {
						return // the index of a row read, checked there
					}
					uses := false
					ir.VisitExpr(l.Index, func(m ir.Expr) {
						if r, isLoad := m.(*ir.Load); isLoad {
							if _, isOff := offs[r.Buf]; isOff {
								uses = true
							}
						}
					})
					if !uses {
						return
					}
					if _, _, match := rowLoad(l, offs); !match || inVector {
						ok = false
					}
				})
			}
		}
	}
	walk(k.Body, false)
	if !ok {
		return nil
	}
	for _, a := range slices.Sorted(maps.Keys(offs)) {
		if sp.size[a] <= 0 {
			return nil
		}
		name := a + "_pf"
		for names[name] {
			name += "_"
		}
		names[name] = true
		sp.pf[a] = name
	}
	sp.pairRows(k, elemBytes)
	return sp
}

// pairLines is the most 64-byte lines a row may have for pairRows to
// move V's prefetches into Q·K: 8-bit codes at head dim 128 (2 lines)
// gained, f16 and bf16 at 128 (4 lines) did not, f32 (8 lines) lost.
// Measured on Zen 5 (`attnc bench`, 2 threads, two sets of 4 runs of
// each build alternated; decode 8 × 4096, 32/8 heads, page 16): the
// median ratio to the paged scan over e4m3 0.43 → 0.52 and 0.44 → 0.48,
// over i8 0.46 → 0.56 and 0.45 → 0.55, over e5m2 0.45 → 0.50 (time 9–16%
// less); f16 0.65 → 0.69 and bf16 0.65 → 0.67 within the runs' spread,
// and 3–8% more CPU time at 1 thread; f32 15–21% more CPU time at 1
// thread.
const pairLines = 2

// pairRows sets sp.pairK and sp.pairV: when the kernel has exactly two
// row-offset arrays, one (K) whose product loads all sit outside P·V's
// row passes (rowPassOf: the dot blocks' steps) and one (V) whose loads
// all sit directly in row passes, over buffers of the same element bytes,
// rows of the same length, at most pairLines lines, and companion arrays
// of the same length, the dot blocks prefetch the next tile's V lines
// beside its K lines and P·V prefetches nothing: the next tile's V has
// the rest of the tile's work, the softmax and P·V included, to come in,
// and P·V's loads run without prefetches between them. (A C model of
// f16 decode — the same loops, in cache 26 ns a row — took 9–15% less
// time at 2 threads with V's prefetches in Q·K rather than in P·V, 5%
// less at 1; the generated f16 kernel did not follow it, see pairLines.)
func (sp *spread) pairRows(k *ir.Kernel, elemBytes map[string]int) {
	if len(sp.offs) != 2 {
		return
	}
	const inDot, inPass = 1, 2
	where := map[string]int{}
	note := func(e ir.Expr, pass bool) {
		ir.VisitExpr(e, func(n ir.Expr) {
			l, ok := n.(*ir.Load)
			if !ok {
				return
			}
			if off, _, match := rowLoad(l, sp.offs); match {
				if pass {
					where[off.Buf] |= inPass
				} else {
					where[off.Buf] |= inDot
				}
			}
		})
	}
	var walk func(b *ir.Block, rp *rowPass)
	walk = func(b *ir.Block, rp *rowPass) {
		for _, s := range b.Stmts {
			switch x := s.(type) {
			case *ir.For:
				if x.Tag != ir.TagStage {
					walk(x.Body, sp.rowPassOf(x, elemBytes))
				}
				continue
			case *ir.If:
				walk(x.Then, nil)
				if x.Else != nil {
					walk(x.Else, nil)
				}
				continue
			case *ir.Block:
				walk(x, nil)
				continue
			}
			for _, e := range stmtExprs(s) {
				note(e, rp != nil)
			}
		}
	}
	walk(k.Body, nil)
	var kOff, vOff string
	for _, a := range slices.Sorted(maps.Keys(sp.offs)) {
		switch where[a] {
		case inDot:
			kOff = a
		case inPass:
			vOff = a
		}
	}
	if kOff == "" || vOff == "" {
		return
	}
	kr, vr := sp.offs[kOff], sp.offs[vOff]
	if elemBytes[kr.buf] != elemBytes[vr.buf] || kr.n != vr.n || sp.size[kOff] != sp.size[vOff] || kr.n*int64(elemBytes[kr.buf]) > pairLines*64 {
		return
	}
	sp.pairK, sp.pairV = kOff, vOff
}

// withPartner follows each prefetch of a line of pairK's next-tile row
// (buf[pf[r] + c]) by the same line of pairV's.
func (sp *spread) withPartner(stmts []ir.Stmt) []ir.Stmt {
	if sp.pairK == "" {
		return stmts
	}
	var out []ir.Stmt
	for _, s := range stmts {
		out = append(out, s)
		p, ok := s.(*ir.Prefetch)
		if !ok {
			continue
		}
		b, ok := p.Index.(*ir.Binary)
		if !ok || b.Op != ir.Add {
			continue
		}
		if l, ok := b.X.(*ir.Load); ok && l.Buf == sp.pf[sp.pairK] && p.Buf == sp.offs[sp.pairK].buf {
			out = append(out, &ir.Prefetch{Buf: sp.offs[sp.pairV].buf, Index: ir.Bin(ir.Add, ir.Ld(sp.pf[sp.pairV], l.T, l.Index), b.Y)})
		}
	}
	return out
}

// stmtExprs are the expressions a statement holds directly.
func stmtExprs(s ir.Stmt) []ir.Expr {
	switch x := s.(type) {
	case *ir.Let:
		return []ir.Expr{x.Value}
	case *ir.Var:
		return []ir.Expr{x.Init}
	case *ir.Assign:
		return []ir.Expr{x.Value}
	case *ir.Store:
		return []ir.Expr{x.Index, x.Value}
	case *ir.Prefetch:
		return []ir.Expr{x.Index}
	case *ir.For:
		return []ir.Expr{x.Lo, x.Hi}
	case *ir.If:
		return []ir.Expr{x.Cond}
	}
	var out []ir.Expr
	ir.MapStmtExprs(&ir.Block{Stmts: []ir.Stmt{s}}, func(e ir.Expr) ir.Expr {
		out = append(out, e)
		return e
	})
	return out
}

// rowLoad matches a product load buf[off[r] + c] of row-offset array off:
// off's load and the column c.
func rowLoad(l *ir.Load, offs map[string]rowRead) (*ir.Load, ir.Expr, bool) {
	b, ok := l.Index.(*ir.Binary)
	if !ok || b.Op != ir.Add {
		return nil, nil, false
	}
	for _, xy := range [][2]ir.Expr{{b.X, b.Y}, {b.Y, b.X}} {
		r, ok := xy[0].(*ir.Load)
		if !ok {
			continue
		}
		if rr, isOff := offs[r.Buf]; isOff && rr.buf == l.Buf && !usesLoad(xy[1], offs) {
			return r, xy[1], true
		}
	}
	return nil, nil, false
}

// usesLoad says whether e loads a row-offset array.
func usesLoad(e ir.Expr, offs map[string]rowRead) bool {
	found := false
	ir.VisitExpr(e, func(n ir.Expr) {
		if l, ok := n.(*ir.Load); ok {
			if _, isOff := offs[l.Buf]; isOff {
				found = true
			}
		}
	})
	return found
}

// products declares each companion array beside its row-offset array and
// follows the product loads buf[off[r] + c] that start a 64-byte line of
// their row (lineStart) by a prefetch of a line of the next tile's rows
// in off_pf (seqGroup): after a run of lets, one if per
// condition over the run's prefetches. rp is the row pass of the loop
// whose body b is (rowPassOf), or nil.
func (sp *spread) products(b *ir.Block, elemBytes map[string]int, rp *rowPass) *ir.Block {
	out := &ir.Block{}
	var always []ir.Stmt
	conds := map[string]*ir.If{}
	var order []string
	groups := map[string][]pfLine{}
	flush := func() {
		if t := sp.seqGroup(groups[""]); t != nil {
			always = t
		}
		always = append(always, nextBlock(groups[""])...)
		out.Stmts = append(out.Stmts, sp.withPartner(always)...)
		for _, key := range order {
			if t := sp.seqGroup(groups[key]); t != nil {
				conds[key].Then.Stmts = t
			}
			conds[key].Then.Stmts = append(conds[key].Then.Stmts, nextBlock(groups[key])...)
			conds[key].Then.Stmts = sp.withPartner(conds[key].Then.Stmts)
			out.Stmts = append(out.Stmts, conds[key])
		}
		always, conds, order, groups = nil, map[string]*ir.If{}, nil, map[string][]pfLine{}
	}
	for _, s := range b.Stmts {
		if _, ok := s.(*ir.Let); !ok {
			flush()
		}
		switch x := s.(type) {
		case *ir.Alloc:
			out.Stmts = append(out.Stmts, s)
			if name := sp.pf[x.Name]; name != "" {
				c := *x
				c.Name = name
				out.Stmts = append(out.Stmts, &c)
			}
			continue
		case *ir.For:
			c := *x
			if x.Tag != ir.TagStage {
				c.Body = sp.products(x.Body, elemBytes, sp.rowPassOf(x, elemBytes))
			}
			out.Stmts = append(out.Stmts, &c)
			continue
		case *ir.If:
			c := *x
			c.Then = sp.products(x.Then, elemBytes, nil)
			if x.Else != nil {
				c.Else = sp.products(x.Else, elemBytes, nil)
			}
			out.Stmts = append(out.Stmts, &c)
			continue
		case *ir.Block:
			out.Stmts = append(out.Stmts, sp.products(x, elemBytes, nil))
			continue
		}
		out.Stmts = append(out.Stmts, s)
		for _, e := range stmtExprs(s) {
			ir.VisitExpr(e, func(n ir.Expr) {
				l, ok := n.(*ir.Load)
				if !ok {
					return
				}
				off, col, ok := rowLoad(l, sp.offs)
				if !ok || off.Buf == sp.pairV {
					return
				}
				eb := int64(elemBytes[l.Buf])
				cond := lineStart(col, eb, int64(l.T.Lanes())*eb)
				if cond == nil {
					return
				}
				pl := pfLine{buf: l.Buf, off: off, col: col, eb: eb, rows: int64(sp.size[off.Buf])}
				if rb := sp.offs[off.Buf].n * eb; rb%64 == 0 {
					pl.lines = rb / 64
				}
				p := &ir.Prefetch{Buf: l.Buf, Index: ir.Bin(ir.Add, ir.Ld(sp.pf[off.Buf], off.T, off.Index), col)}
				if ir.IsTrue(cond) {
					always = append(always, p)
					if rp == nil {
						groups[""] = append(groups[""], pl)
					}
					return
				}
				key := ir.ExprString(cond)
				if conds[key] == nil {
					conds[key] = &ir.If{Cond: cond, Then: &ir.Block{}}
					order = append(order, key)
				}
				conds[key].Then.Stmts = append(conds[key].Then.Stmts, p)
				if rp == nil {
					groups[key] = append(groups[key], pl)
				}
			})
		}
		if _, ok := s.(*ir.Let); !ok {
			flush()
		}
	}
	flush()
	return out
}

// pfLine is a product load buf[off[r] + c] that starts a line of its
// row: off's load, the column, the element bytes, the row's 64-byte lines
// (0 unless the row is a whole number of them) and the rows of a tile
// (the row-offset array's length).
type pfLine struct {
	buf         string
	off         *ir.Load
	col         ir.Expr
	eb          int64
	lines, rows int64
}

// seqLines is the most 64-byte lines a row may have for seqGroup to
// reorder its dot blocks' prefetches: f16 and bf16 rows at head dim 128
// (4 lines) gained; f32's at head dim 128 (8 lines) ran no faster with
// K's in address order, so they keep the row-strided order. Rows of 4
// lines or fewer of any type (f32 at head dim 64, 8-bit codes at 128) are
// reordered. 8-bit decode measured the same in either order on a cold
// pool, so its order follows the instruction count: K's address order
// (seqGroupShort) reads each companion offset once for both its lines
// (x86-64-v4 dot block of 4 e4m3 rows: 386 → 360 instructions). P·V
// prefetches row-strided at every type (rowPass): line c of the next
// tile's row r beside the load of line c of row r is one offset load with
// no row or line arithmetic.
const seqLines = 4

// seqGroup is the prefetches of a group of product loads of n rows at one
// column (a dot block's step over its rows) in address order: with m =
// lines/n, the step at line L of its rows prefetches lines (L mod m)·n ..
// (L mod m)·n + n-1 of the next tile's row L/m of the n, instead of line
// L of each of the n rows; over a tile the group's steps still cover every
// line of the n rows once. nil unless the group is n >= 2 loads of n rows
// of one buffer at one column, with a multiple of n lines per row.
func (sp *spread) seqGroup(g []pfLine) []ir.Stmt {
	n := int64(len(g))
	if n >= 2 && g[0].lines >= 1 && g[0].lines < n && n%g[0].lines == 0 {
		return sp.seqGroupShort(g)
	}
	if n < 2 || g[0].lines < n || g[0].lines > seqLines || g[0].lines%n != 0 {
		return nil
	}
	if !oneColumn(g) {
		return nil
	}
	return addressOrder(g, sp.pf[g[0].off.Buf], false)
}

// addressOrder is the prefetches seqGroup places at group g's step (n
// loads of n rows at one column, rows of a multiple of n lines): the
// step at line L of its rows prefetches lines (L mod m)·n … (L mod m)·n +
// n-1 of its row L/m, m = lines/n, the row's offset read from array offs
// (the companion for the same row of the next tile; the row-offset array
// itself for a row of this tile); into L1 if l1.
func addressOrder(g []pfLine, offs string, l1 bool) []ir.Stmt {
	n := int64(len(g))
	m := g[0].lines / n
	t := g[0].col.Type()
	c := func(v int64) ir.Expr { return ir.IntT(t, v) }
	line := ir.Bin(ir.Div, ir.Bin(ir.Mul, g[0].col, c(g[0].eb)), c(64))
	pf := ir.Ld(offs, g[0].off.T, groupRow(g, ir.Bin(ir.Div, line, c(m))))
	first := ir.Bin(ir.Mul, ir.Bin(ir.Rem, line, c(m)), c(n))
	var out []ir.Stmt
	for i := range n {
		at := ir.Bin(ir.Mul, ir.Bin(ir.Add, first, c(i)), c(64/g[0].eb))
		out = append(out, &ir.Prefetch{Buf: g[0].buf, Index: ir.Bin(ir.Add, pf, at), L1: l1})
	}
	return out
}

// nextBlock is the prefetches into L1, in address order, of the rows of
// the next dot block of the same tile beside group g's loads (a dot
// block's step: n loads of n rows at one column, rows of a multiple of n
// lines, each row index min(x + i, last) for i = 0 … n-1): the next
// block's rows min(x + n + i, last), clamped to the row-offset array too,
// are rows the products read, their offsets recorded (the tile's last
// block, with no block after it, fetches its last row again). The
// prefetches a tile ahead leave a tile's lines in L2 (codegen/llvm:
// locality 2); a dot block reads 4 rows at once, a line of each at a
// time, and that pattern took longer from memory than reading the rows
// one after another, most when the memory was loaded (scripts/
// decodemodel.c, fmak4 against fmax and fmak4l1). Measured on Zen 4
// (docs/benchmarks.md, Machine D session 29; 8 × 4096 from memory, 2
// threads, 32/8 heads, head dim 128): f16 and bf16 decode 5-16% less time
// under the host's memory load (`attnc bench` ratio to the paged scan
// 0.77-0.82 → 0.86-0.89 for f16, 0.76-0.85 → 0.86-0.91 for bf16), f32
// (8-line rows, whose next tile's prefetches stay row-strided) a median
// 0.94 → 1.04 of six runs; in cache within 1% (f32 in L3 0-3% slower).
// The same prefetches row-strided (line L of each next row) ran 6-10%
// slower than in address order. nil for any other group, and for 8-bit
// codes (not measured; at x86-64 and x86-64-v3 their 2-line rows come in
// dot blocks of 2 keys).
func nextBlock(g []pfLine) []ir.Stmt {
	n := int64(len(g))
	if n < 2 || !oneColumn(g) {
		return nil
	}
	var last string
	next := make([]pfLine, len(g))
	for i, x := range g {
		mn, ok := x.off.Index.(*ir.Binary)
		if !ok || mn.Op != ir.Min || x.eb < 2 || x.lines != g[0].lines || x.lines < n || x.lines%n != 0 || x.rows < 1 {
			return nil
		}
		if i == 0 {
			last = ir.ExprString(mn.Y)
		} else if ir.ExprString(mn.Y) != last {
			return nil
		}
		t := mn.X.Type()
		off := *x.off
		off.Index = ir.Bin(ir.Min, ir.Bin(ir.Min, ir.Bin(ir.Add, mn.X, ir.IntT(t, n)), mn.Y), ir.IntT(t, x.rows-1))
		next[i] = x
		next[i].off = &off
	}
	return addressOrder(next, g[0].off.Buf, true)
}

// seqGroupShort is seqGroup for rows with fewer lines than the group has
// rows: 8-bit codes at head dim 128 (2 lines, groups of 4 rows), and the
// dot blocks of one or two query rows, whose 16 or 8 keys a step outnumber
// the lines of f16, bf16 and f32 rows (MHA and GQA groups of 2). The
// group's n rows hold n·lines lines, and the step at line L of its rows
// prefetches lines L·n .. L·n + n-1 of them in address order, line f
// being line f mod lines of the group's row f/lines (rows 2L and 2L+1,
// both lines, at 2 lines and 4 rows; rows 4L .. 4L+3 at 4 lines and 16
// rows); over the group's lines steps they still cover every line of the
// n rows once, reading n/lines companion offsets a step. Row-strided, a
// 16-key block's steps prefetched line L of each of 16 rows, whose 16
// addresses LLVM kept live across the block's loop and spilled (MHA f16
// decode 2 × 4096 from memory on Zen 5, 1 thread: 7.8–8.2 → 7.2–7.5 ms,
// 0.86–0.88 → 0.93–0.97 of the paged scan). nil unless the n loads are
// of one buffer at one column, of n rows.
func (sp *spread) seqGroupShort(g []pfLine) []ir.Stmt {
	n, lines := int64(len(g)), g[0].lines
	if !oneColumn(g) {
		return nil
	}
	for _, x := range g {
		if x.lines != lines {
			return nil
		}
	}
	t := g[0].col.Type()
	c := func(v int64) ir.Expr { return ir.IntT(t, v) }
	line := ir.Bin(ir.Div, ir.Bin(ir.Mul, g[0].col, c(g[0].eb)), c(64))
	per := n / lines // rows per step
	var out []ir.Stmt
	for i := range n {
		// Row (L·n + i)/lines = L·per + i/lines of the group.
		row := groupRow(g, ir.Bin(ir.Add, ir.Bin(ir.Mul, line, c(per)), c(i/lines)))
		at := c((i % lines) * (64 / g[0].eb))
		out = append(out, &ir.Prefetch{Buf: g[0].buf, Index: ir.Bin(ir.Add, ir.Ld(sp.pf[g[0].off.Buf], g[0].off.T, row), at)})
	}
	return out
}

// oneColumn reports whether the group's loads are of one buffer at one
// column, each of another row (its own row offset).
func oneColumn(g []pfLine) bool {
	rows := map[string]bool{}
	for _, x := range g {
		if x.buf != g[0].buf || x.off.Buf != g[0].off.Buf || ir.ExprString(x.col) != ir.ExprString(g[0].col) {
			return false
		}
		rows[ir.ExprString(x.off.Index)] = true
	}
	return len(rows) == len(g)
}

// groupRow is the row offset index of the group's load pick (0 … n-1):
// min(x + pick, y) when the group's loads read rows min(x + i, y) in
// order (a dot block's keys: rowProgression), else a chain of selects,
// the last load's where pick is none of the others.
func groupRow(g []pfLine, pick ir.Expr) ir.Expr {
	if x, y, ok := rowProgression(g); ok {
		if pick.Type() != x.Type() {
			pick = ir.Cvt(x.Type(), pick)
		}
		return ir.Bin(ir.Min, ir.Bin(ir.Add, x, pick), y)
	}
	t := pick.Type()
	var row ir.Expr = g[len(g)-1].off.Index
	for i := len(g) - 2; i >= 0; i-- {
		row = ir.Sel(ir.Bin(ir.Eq, pick, ir.IntT(t, int64(i))), g[i].off.Index, row)
	}
	return row
}

// rowProgression reports whether load i of group g reads row min(x + i,
// y) for every i (row min(x, y) first), as a dot block's keys do
// (dotBlock.row), and returns x and y: then the row of a pick is
// arithmetic, where a chain of n-1 selects would pick it.
func rowProgression(g []pfLine) (x, y ir.Expr, ok bool) {
	for i, l := range g {
		mn, isMin := l.off.Index.(*ir.Binary)
		if !isMin || mn.Op != ir.Min {
			return nil, nil, false
		}
		base := mn.X
		if i > 0 {
			add, isAdd := mn.X.(*ir.Binary)
			if !isAdd || add.Op != ir.Add {
				return nil, nil, false
			}
			if c, isConst := ir.IsConst(add.Y); !isConst || c.Int != int64(i) {
				return nil, nil, false
			}
			base = add.X
		}
		if i == 0 {
			x, y = base, mn.Y
		} else if ir.ExprString(base) != ir.ExprString(x) || ir.ExprString(mn.Y) != ir.ExprString(y) {
			return nil, nil, false
		}
	}
	return x, y, x != nil
}

// rowPass is a loop over a tile's rows whose iteration reads whole
// 64-byte lines of row off[v] (its product loads of that array, one row,
// v the loop's variable): P·V's pass over a range of V's columns, whose
// loads each prefetch their own line of the next tile's row (row-strided).
type rowPass struct {
	v   string
	off string
}

// rowPassOf is loop f's row pass, or nil: the lets directly in its body
// hold product loads of one row-offset array, all of row off[f.Var], of
// a whole number of lines together.
func (sp *spread) rowPassOf(f *ir.For, elemBytes map[string]int) *rowPass {
	var rp *rowPass
	bytes := int64(0)
	ok := true
	for _, s := range f.Body.Stmts {
		l, isLet := s.(*ir.Let)
		if !isLet {
			continue
		}
		ir.VisitExpr(l.Value, func(n ir.Expr) {
			ld, isLoad := n.(*ir.Load)
			if !isLoad {
				return
			}
			off, _, match := rowLoad(ld, sp.offs)
			if !match {
				return
			}
			r, isRef := off.Index.(*ir.Ref)
			if !isRef || r.Name != f.Var || (rp != nil && rp.off != off.Buf) {
				ok = false
				return
			}
			rp = &rowPass{v: f.Var, off: off.Buf}
			bytes += int64(ld.T.Lanes()) * int64(elemBytes[ld.Buf])
		})
	}
	if !ok || rp == nil || bytes%64 != 0 {
		return nil
	}
	return rp
}

// lineStart is the condition that a load of vb bytes at column c of
// elements of eb bytes starts within the first vb bytes of a 64-byte line
// of its row: true, false (nil) or a test of c.
func lineStart(c ir.Expr, eb, vb int64) ir.Expr {
	if vb >= 64 {
		return ir.BoolConst(true)
	}
	if k, ok := ir.IsConst(c); ok {
		if (k.Int*eb)&63 < vb {
			return ir.BoolConst(true)
		}
		return nil
	}
	at := c
	if eb != 1 {
		at = ir.Bin(ir.Mul, c, ir.IntT(c.Type(), eb))
	}
	return ir.Bin(ir.Lt, ir.Bin(ir.And, at, ir.IntT(c.Type(), 63)), ir.IntT(c.Type(), vb))
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

// pfBlock writes a staging iteration's block for the iteration a tile
// ahead (block). recorded counts the row offsets it records in companion
// arrays (spread) instead of prefetching their rows.
type pfBlock struct {
	elemBytes map[string]int
	rows      map[string]rowRead
	spread    *spread
	recorded  int
}

// block is b for another row: lets renamed with suffix (sub maps the old
// names to the new), ifs kept without their else, copy loops reading a
// param as prefetches, a stored row offset as the prefetches of its row
// or, with a spread plan, as a store of the offset into the companion
// array (at the slot mod the array's length), a run loop (runExtent)
// unrolled over its static extent — every row its page may hold, whatever
// the guard folded into its bound — every other statement dropped. n
// counts the prefetches and recorded offsets.
func (pf *pfBlock) block(b *ir.Block, sub map[string]ir.Expr, suffix string) (*ir.Block, int) {
	out := &ir.Block{}
	n := 0
	for _, s := range b.Stmts {
		switch x := s.(type) {
		case *ir.Store:
			if r, ok := pf.rows[x.Buf]; ok {
				row := ir.Subst(x.Value, sub)
				if pf.spread != nil {
					slot := ir.Subst(x.Index, sub)
					slot = ir.Bin(ir.Rem, slot, ir.IntT(slot.Type(), int64(pf.spread.size[x.Buf])))
					out.Stmts = append(out.Stmts, &ir.Store{Buf: pf.spread.pf[x.Buf], Index: slot, Value: row})
					pf.recorded++
					n++
					continue
				}
				for d := int64(0); d < r.n; d += int64(64 / pf.elemBytes[r.buf]) {
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
			then, k := pf.block(x.Then, sub, suffix)
			if k > 0 {
				out.Stmts = append(out.Stmts, &ir.If{Cond: ir.Subst(x.Cond, sub), Then: then})
				n += k
			}
		case *ir.For:
			if src, _ := copyRead(x, pf.elemBytes); src == nil && runRows(x.Body, pf.elemBytes, pf.rows) > 0 {
				for js := range runExtent(x) {
					inner := map[string]ir.Expr{x.Var: ir.Int(js)}
					for k, v := range sub {
						inner[k] = v
					}
					body, k := pf.block(x.Body, inner, fmt.Sprintf("%s%d", suffix, js))
					out.Stmts = append(out.Stmts, body.Stmts...)
					n += k
				}
				continue
			}
			ps := copyPrefetches(x, sub, pf.elemBytes)
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
