package cpu_test

import (
	"fmt"
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
// positions), which reads the page table twice — once for the run it
// copies, once for the run a tile ahead that it prefetches — and
// prefetches every 64-byte line of that run's K and V rows.
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
		rowsPF int    // rows one staging iteration copies and prefetches
		lines  int    // 64-byte lines of one K (or V) row
	}{
		// f16 rows of head dim 128 are 256 bytes: 16-position decode tiles.
		{ps: 1, cache: "layout = NHD", rowsPF: 1, lines: 4},
		{ps: 4, cache: "layout = HND", rowsPF: 4, lines: 4},
		{ps: 16, cache: "table = block_table", rowsPF: 16, lines: 4},
		{ps: 256, cache: "layout = NHD", rowsPF: 16, lines: 4},
		// 8-bit codes: 32-position tiles.
		{ps: 16, cache: "kv_dtype = e4m3", rowsPF: 16, lines: 2},
		{ps: 64, cache: "kv_dtype = i8, layout = NHD", rowsPF: 32, lines: 2},
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
				lookups, prefetches := 0, 0
				ir.MapStmts(f.Body, func(s ir.Stmt) []ir.Stmt {
					if _, ok := s.(*ir.Prefetch); ok {
						prefetches++
					}
					return []ir.Stmt{s}
				})
				ir.MapExprs(f.Body, func(e ir.Expr) ir.Expr {
					if l, ok := e.(*ir.Load); ok && (l.Buf == "kv_indices" || l.Buf == "block_table") {
						lookups++
					}
					return e
				})
				if lookups != 2 {
					t.Errorf("%s: %s: the staging iteration reads the page table %d times, want 2 (its run and the run a tile ahead)", name, k.Name, lookups)
				}
				if want := 2 * c.rowsPF * c.lines; prefetches != want {
					t.Errorf("%s: %s: %d prefetches per staging iteration, want %d (%d rows of K and V, %d lines each)", name, k.Name, prefetches, want, c.rowsPF, c.lines)
				}
				return []ir.Stmt{s}
			})
		}
		if stages == 0 {
			t.Errorf("%s: no staging loop", name)
		}
	}
}
