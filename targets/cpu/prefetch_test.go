package cpu_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets/cpu"
)

// TestStagingLooksPagesUpOncePerRun compiles decode variants through the
// CPU table up to prefetch-kv and checks every decode work clone's staging
// loop: one iteration per page run (min(page size, decode tile)
// positions), which reads the page table three times — once for the run
// it records, once for the run a tile ahead, once for the same run of the
// next kv head's first tile (ir.For.Next, where no run a tile ahead
// exists) — records the offsets of every K and V row of the run ahead (or
// the next kv head's) in the companion arrays (koff_pf, voff_pf), over
// its own rows' offsets there, and prefetches nothing itself; the
// products prefetch instead: every prefetch reads a companion array of a
// row-offset array that a product load of the same pool reads (a
// prefetch into L1, the row-offset array itself), K and V both. (Which
// rows and lines: TestSpreadPrefetchesCoverNextTile and
// TestDotBlocksPrefetchNextBlockIntoL1.)
func TestStagingLooksPagesUpOncePerRun(t *testing.T) {
	var table []passes.Pass
	for i, p := range cpu.Table {
		if p.Name == "prefetch-kv" {
			table = cpu.Table[:i+1]
		}
	}
	for _, c := range []struct {
		ps     int
		cache  string // the cache's extra settings
		rowsPF int    // rows one staging iteration records and looks ahead
	}{
		// f16 rows of head dim 128 are 256 bytes: 64-position decode
		// tiles; a run is min(page size, tile) rows.
		{ps: 1, cache: "layout = NHD", rowsPF: 1},
		{ps: 4, cache: "layout = HND", rowsPF: 4},
		{ps: 16, cache: "table = block_table", rowsPF: 16},
		{ps: 256, cache: "layout = NHD", rowsPF: 64},
		// 8-bit codes: 64-position tiles too.
		{ps: 16, cache: "kv_dtype = e4m3", rowsPF: 16},
		{ps: 64, cache: "kv_dtype = i8, layout = NHD", rowsPF: 64},
	} {
		name := fmt.Sprintf("ps%d %s", c.ps, c.cache)
		src := fmt.Sprintf("variant v {\n heads qo = 8, kv = 2\n head_dim 128\n dtype f16\n cache paged(page_size = %d, %s)\n kernels decode\n}\n", c.ps, c.cache)
		vs, err := frontend.Parse("v.attn", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		comp, err := driver.Compile(vs[0], cpu.Target{}, driver.Options{Tables: map[string][]passes.Pass{"cpu": table}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		stages := 0
		for _, k := range comp.Final.Kernels {
			if k.Level == "" || k.Role != ir.RoleDecode {
				continue
			}
			ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
				f, ok := s.(*ir.For)
				if !ok || f.Tag != ir.TagStage {
					return []ir.Stmt{s}
				}
				if lo, ok := ir.IsConst(f.Lo); !ok || lo.Int != 0 {
					return []ir.Stmt{s} // the zeros past the tile's end
				}
				stages++
				lookups, prefetches, records := 0, 0, 0
				ir.MapStmts(f.Body, func(s ir.Stmt) []ir.Stmt {
					switch x := s.(type) {
					case *ir.Prefetch:
						prefetches++
					case *ir.Store:
						if x.Buf == "koff_pf" || x.Buf == "voff_pf" {
							records++
						}
					}
					return []ir.Stmt{s}
				})
				ir.MapExprs(f.Body, func(e ir.Expr) ir.Expr {
					if l, ok := e.(*ir.Load); ok && (l.Buf == "kv_indices" || l.Buf == "block_table") {
						lookups++
					}
					return e
				})
				if lookups != 3 {
					t.Errorf("%s: %s: the staging iteration reads the page table %d times, want 3 (its run, the run a tile ahead, the next kv head's)", name, k.Name, lookups)
				}
				if prefetches != 0 {
					t.Errorf("%s: %s: %d prefetches in the staging iteration, want none (the products prefetch)", name, k.Name, prefetches)
				}
				// The run ahead and the next kv head's unrolled, and the
				// iteration's own K and V row offsets (in its run loop)
				// under them.
				if want := 4*c.rowsPF + 2; records != want {
					t.Errorf("%s: %s: the staging iteration records %d companion offsets, want %d (%d rows ahead of K and V, as many of the next kv head's, then its own K and V row)", name, k.Name, records, want, c.rowsPF)
				}
				return []ir.Stmt{s}
			})
			loads := map[string]bool{}
			ir.MapExprs(k.Body, func(e ir.Expr) ir.Expr {
				if l, ok := e.(*ir.Load); ok && (l.Buf == "k_pages" || l.Buf == "v_pages") {
					loads[l.Buf+"["+ir.ExprString(l.Index)+"]"] = true
				}
				return e
			})
			pfs := map[string]int{}
			ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
				p, ok := s.(*ir.Prefetch)
				if !ok {
					return []ir.Stmt{s}
				}
				at := ir.ExprString(p.Index)
				paired := false
				for _, a := range []string{"koff", "voff"} {
					// A prefetch into L1 (the next dot block's rows of
					// this tile) reads the row-offset array itself.
					arr := a + "_pf["
					if p.L1 {
						arr = a + "["
					}
					if strings.Contains(at, arr) {
						for l := range loads {
							paired = paired || strings.HasPrefix(l, p.Buf+"[") && strings.Contains(l, a+"[")
						}
					}
				}
				if !paired {
					t.Errorf("%s: %s: prefetch %s[%s] pairs no product load of a row offset", name, k.Name, p.Buf, at)
				}
				pfs[p.Buf]++
				return []ir.Stmt{s}
			})
			if pfs["k_pages"] == 0 || pfs["v_pages"] == 0 {
				t.Errorf("%s: %s: the products prefetch K %d and V %d times, want both", name, k.Name, pfs["k_pages"], pfs["v_pages"])
			}
		}
		if stages == 0 {
			t.Errorf("%s: no staging loop", name)
		}
	}
}
