package passes_test

import (
	"testing"

	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
)

// TestClassifyTilesParamMask: a mask that reads a param is runtime data
// for classify-tiles. No tile is declared full (every tile keeps the
// mask), and a tile is skipped only on account of the mask's other
// clauses: tile_skip never reads the param, and with a causal clause it
// still skips the tiles past the query. (TestParamMatrix in conformance
// runs such masks, where a skip or a full tile on the param's account
// would give a wrong answer.)
func TestClassifyTilesParamMask(t *testing.T) {
	cases := []struct {
		mask               string
		wantSkip, wantFull bool
	}{
		{"expr(kv_pos <= q_pos && doc[batch, q_pos] == doc[batch, kv_pos])", true, false},
		{"expr(doc[batch, kv_pos] != 0)", false, false},
		{"expr(doc[batch, kv_pos])", false, false},
		// kv_pos < 5 shows a tile whatever doc holds: full on its account.
		{"window(left = 100), expr(kv_pos < 5 || doc[batch, kv_pos / 64] == 1)", true, true},
	}
	tiling := lower.Tiling{KVTile: 64, Rows: 64, MaxHeads: 16}
	for _, c := range cases {
		src := "variant pm {\n heads qo = 4, kv = 2\n head_dim 64\n param doc i32[batch, max_len]\n mask " + c.mask + "\n}\n"
		vs, err := frontend.Parse("pm.attn", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		v := vs[0]
		m, err := lower.Lower(v, tiling)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []passes.Pass{passes.InlineDefsPass, passes.SimplifyPass, passes.ClassifyTilesPass} {
			if m, err = p.Run(m); err != nil {
				t.Fatal(err)
			}
		}
		for _, role := range []ir.Role{ir.RolePrefill, ir.RoleDecode} {
			k := m.Kernel(v.Name + "_" + string(role) + "_work")
			tile := kvTile(k.Body)
			if tile == nil {
				t.Fatalf("%s: %s has no @kv_tile loop", c.mask, k.Name)
			}
			var skip, full ir.Expr
			for _, s := range tile.Body.Stmts {
				if x, ok := s.(*ir.Let); ok && x.Name == "tile_full" {
					full = x.Value
				} else if ok && x.Name == "tile_skip" {
					skip = x.Value
				}
			}
			for _, e := range []ir.Expr{skip, full} {
				if e == nil {
					continue
				}
				ir.VisitExpr(e, func(e ir.Expr) {
					switch x := e.(type) {
					case *ir.Guarded, *ir.Load:
						t.Errorf("%s: %s: a tile condition reads memory: %s", c.mask, k.Name, ir.ExprString(x))
					}
				})
			}
			if (skip != nil) != c.wantSkip || (full != nil) != c.wantFull {
				t.Errorf("%s: %s: tile_skip %v, tile_full %v; want %v, %v", c.mask, k.Name, skip != nil, full != nil, c.wantSkip, c.wantFull)
			}
			if !hasMaskIf(tile.Body) {
				t.Errorf("%s: %s: the mask is gone from the tile", c.mask, k.Name)
			}
		}
	}
}

// hasMaskIf reports whether b holds an if tagged @mask.
func hasMaskIf(b *ir.Block) bool {
	found := false
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if i, ok := s.(*ir.If); ok && i.Tag == ir.TagMask {
			found = true
		}
		return []ir.Stmt{s}
	})
	return found
}
