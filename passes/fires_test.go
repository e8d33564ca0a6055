package passes_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/reference"
)

// TestClassifyTilesFires lowers every example (as the CPU tiles it) and
// runs inline-defs, simplify and classify-tiles, then evaluates the tile
// conditions classify-tiles wrote on every (query tile, KV tile) pair of a
// prefill and every KV tile of a decode, against the reference's own
// visibility rule: a skipped tile must hide everything, an unmasked one
// show everything, and where the mask hides whole tiles some must be
// skipped, where it shows whole tiles some must run without the mask.
// Where the @mask Def shows every position, classify-tiles must have
// nothing to do. A misspelt tag, a lost Range or a mask the interval
// analysis no longer understands fails here.
//
// A mask that reads a param (packed_docs) depends on data the pass never
// sees: a tile counts as hidden or visible only when it is so under every
// filling of the params tried (zeros, documents of 37 positions, random
// small values), and such a mask is not required to run any tile unmasked
// (DESIGN §3.1: no tile is declared full on a param's account), only to
// skip the tiles its other clauses hide. So is a data mask (tree, custom),
// judged under a chain, a tree of singletons and a random tree (custom:
// all bits set, none set, random bits), with the queries at the end of a
// longer cache in prefill too: a tree's decode must run its tiles before
// the tree without the mask (every tile but the last), and no tile may be
// skipped or run unmasked on the data's account.
func TestClassifyTilesFires(t *testing.T) {
	files, _ := filepath.Glob("../examples/*.attn")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	tiling := lower.Tiling{KVTile: 64, Rows: 64, MaxHeads: 16}
	for _, f := range files {
		vs, err := frontend.ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if lower.Unsupported(v) != nil {
				continue
			}
			t.Run(v.Name, func(t *testing.T) {
				m, err := lower.Lower(v, tiling)
				if err != nil {
					t.Fatal(err)
				}
				masks := !ir.IsTrue(m.Def("mask").Body) || dataMask(v)
				fillings := paramFillings(v)
				for _, p := range []passes.Pass{passes.InlineDefsPass, passes.SimplifyPass, passes.ClassifyTilesPass} {
					if m, err = p.Run(m); err != nil {
						t.Fatal(err)
					}
				}
				for _, role := range []ir.Role{ir.RolePrefill, ir.RoleDecode} {
					k := m.Kernel(v.Name + "_" + string(role) + "_work")
					if k == nil && !v.HasRole(role) {
						continue // no hand-over to decode on this tiling
					}
					tile := kvTile(k.Body)
					if tile == nil {
						t.Fatalf("%s has no @kv_tile loop", k.Name)
					}
					lets := map[string]ir.Expr{}
					var bounds []*ir.Let // the bounds the analysis named (tile_b*)
					for _, s := range tile.Body.Stmts {
						if l, ok := s.(*ir.Let); ok && (l.Name == "tile_skip" || l.Name == "tile_full") {
							lets[l.Name] = l.Value
						} else if ok {
							bounds = append(bounds, l)
						}
					}
					if !masks {
						if len(lets) > 0 {
							t.Errorf("%s: mask shows everything, yet classify-tiles wrote %v", k.Name, keys(lets))
						}
						continue
					}
					// Every (query tile, KV tile) of a 512-token prefill, or
					// every KV tile of a decode at position 16383 (past the
					// examples' windows), classified by the pass and by the
					// reference's visibility rule.
					const L = 512
					qt, gb := tiling.QTile(v.GroupSize()), tiling.Heads(v.GroupSize())
					qPos := func(q int) (pos0, rows int) { return q * qt, qt }
					qTiles, kvLen, qLen := L/qt, L, L
					if dataMask(v) && role != ir.RoleDecode {
						// A tree (or a custom mask's rows) after a prefix.
						qLen = L / 4
						qTiles, qPos = qLen/qt, func(q int) (int, int) { return kvLen - qLen + q*qt, qt }
					}
					if role == ir.RoleDecode {
						kvLen, qLen = 16384, 1
						qTiles, qPos = 1, func(int) (int, int) { return kvLen - 1, 1 }
					}
					if dataMask(v) {
						fillings = dataFillings(v, qLen, kvLen)
					}
					var skipped, full, hidden, visible int
					for q := 0; q < qTiles; q++ {
						pos0, rows := qPos(q)
						for kt := 0; kt*tiling.KVTile < kvLen; kt++ {
							env := map[string]any{"kt": int32(kt), "kv_len": int32(kvLen), "q_len": int32(qLen), "q_pos0": int32(pos0),
								"rows": int32(rows), "head0": int32(0), "b": int32(0)}
							for _, l := range bounds {
								x, err := ir.EvalExpr(l.Value, env)
								if err != nil {
									t.Fatalf("%s: let %s: %v", k.Name, l.Name, err)
								}
								env[l.Name] = x
							}
							allHidden, allVisible := true, true
							for qp := pos0; qp < pos0+rows; qp++ {
								for kv := kt * tiling.KVTile; kv < min((kt+1)*tiling.KVTile, kvLen); kv++ {
									for h := 0; h < gb; h++ {
										for _, c := range fillings {
											vis := reference.VisibleRow(v, c, 0, h, qp-(kvLen-qLen), qp, kv)
											allHidden = allHidden && !vis
											allVisible = allVisible && vis
										}
									}
								}
							}
							if allHidden {
								hidden++
							}
							if allVisible {
								visible++
							}
							// A tile_full the pass folded away is true when
							// it dropped the mask from the tile, false when
							// it left the masked body alone.
							skip, fullTile := eval(t, lets["tile_skip"], env, false), eval(t, lets["tile_full"], env, !hasMaskIf(tile.Body))
							if skip && !allHidden || fullTile && !allVisible {
								t.Fatalf("%s: kv tile %d for query rows %d..%d: skip %v, full %v, but the reference shows some and hides some",
									k.Name, kt, pos0, pos0+rows-1, skip, fullTile)
							}
							if skip {
								skipped++
							} else if fullTile {
								full++
							}
						}
					}
					t.Logf("%s: %d of %d hidden tiles skipped, %d of %d visible tiles without the mask", k.Name, skipped, hidden, full, visible)
					if hidden > 0 && skipped == 0 && !dataMask(v) || visible > 0 && full == 0 && !readsParam(v) && !dataMask(v) || dataMaskKind(v, ir.MaskTree) && role == ir.RoleDecode && full == 0 {
						t.Errorf("%s: classify-tiles did not fire: %d of %d hidden tiles skipped, %d of %d visible tiles without the mask",
							k.Name, skipped, hidden, full, visible)
					}
				}
			})
		}
	}
}

// eval evaluates a tile condition; a missing one (the analysis proved it
// constant and dropped it) has the value def.
func eval(t *testing.T, e ir.Expr, env map[string]any, def bool) bool {
	t.Helper()
	if e == nil {
		return def
	}
	v, err := ir.EvalExpr(e, env)
	if err != nil {
		t.Fatalf("%s: %v", ir.ExprString(e), err)
	}
	return v.(bool)
}

func kvTile(b *ir.Block) *ir.For {
	var tile *ir.For
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok && f.Tag == ir.TagKVTile && tile == nil {
			tile = f
		}
		return []ir.Stmt{s}
	})
	return tile
}

func keys(m map[string]ir.Expr) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// readsParam reports whether a mask clause of v reads a param tensor.
func readsParam(v *ir.Variant) bool {
	for _, m := range v.Masks {
		if m.Kind == ir.MaskExpr && ir.ReadsParams(m.Expr) {
			return true
		}
	}
	return false
}

// paramFillings are the param contents TestClassifyTilesFires judges
// visibility under: nil alone (no params: nothing to fill) or, for a
// variant with params, every tensor all zeros (every read 0), documents
// of 37 positions (value p / 37 at flat index p) and random values 0..2.
// Named dims are 16384 (past every position the test asks about), batch 1.
func paramFillings(v *ir.Variant) []*reference.Case {
	if len(v.Params) == 0 {
		return []*reference.Case{nil}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var out []*reference.Case
	for _, fill := range []func(i int) float64{
		func(int) float64 { return 0 },
		func(i int) float64 { return float64(i / 37) },
		func(int) float64 { return float64(rng.IntN(3)) },
	} {
		c := &reference.Case{Batch: 1, Params: map[string][]float64{}, ParamDims: map[string]int{}}
		for _, name := range v.ParamDimNames() {
			c.ParamDims[name] = 16384
		}
		for _, p := range v.Params {
			n := int64(1)
			for _, d := range c.ParamShape(v, p) {
				n *= d
			}
			data := make([]float64, n)
			for i := range data {
				data[i] = fill(i)
			}
			c.Params[p.Name] = data
		}
		out = append(out, c)
	}
	return out
}

// dataMask reports whether v has a data mask clause (tree, custom), whose
// visibility comes from the call's tree_order or custom_mask.
func dataMask(v *ir.Variant) bool {
	for _, m := range v.Masks {
		if m.Kind == ir.MaskTree || m.Kind == ir.MaskCustom {
			return true
		}
	}
	return false
}

// dataFillings are the data masks TestClassifyTilesFires judges a
// variant with a tree or custom mask under, for one sequence of qLen
// queries at the end of kvLen positions: a chain (each token the child
// of the one before: causal inside the tree), singletons (each token its
// own root: it sees itself alone) and a random tree (each token the child
// of an earlier one); custom bits all set, none set and random.
func dataFillings(v *ir.Variant, qLen, kvLen int) []*reference.Case {
	rng := rand.New(rand.NewPCG(3, 4))
	var out []*reference.Case
	for k := range 3 {
		c := &reference.Case{Batch: 1, QLens: []int{qLen}, KVLens: []int{kvLen}}
		if dataMaskKind(v, ir.MaskTree) {
			parent := make([]int, qLen)
			for i := range parent {
				parent[i] = [3]int{i - 1, -1, rng.IntN(max(i, 1)) - 1 + min(i, 1)}[k]
			}
			if qLen > 0 {
				parent[0] = -1
			}
			c.TreeOrder, c.TreeIndptr = reference.TreeIntervals(parent), []int32{0, int32(qLen)}
		}
		if dataMaskKind(v, ir.MaskCustom) {
			c.CustomMask, c.MaskIndptr = make([]byte, (qLen*kvLen+7)/8), []int32{0, 0}
			for i := range c.CustomMask {
				c.CustomMask[i] = [3]byte{0xff, 0, byte(rng.IntN(256))}[k]
			}
		}
		out = append(out, c)
	}
	return out
}

func dataMaskKind(v *ir.Variant, kind ir.MaskKind) bool {
	for _, m := range v.Masks {
		if m.Kind == kind {
			return true
		}
	}
	return false
}
