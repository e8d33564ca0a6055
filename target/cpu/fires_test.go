package cpu_test

import (
	"path/filepath"
	"testing"

	"github.com/attnc/attnc/build"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/target/cpu"
)

// TestBlockMatMulFires compiles every example for both triples through
// the CPU table up to block-matmul: every prefill tile matmul of every
// level's clone must have become micro-kernels (a shape block-matmul
// leaves for lower-tiles would run at a fraction of the speed, silently),
// and every prefill work clone must have its contraction loops.
func TestBlockMatMulFires(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.attn")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	vs, err := build.ParseSpecs(files)
	if err != nil {
		t.Fatal(err)
	}
	var table = cpu.Table
	for i, p := range cpu.Table {
		if p.Name == "block-matmul" {
			table = cpu.Table[:i+1]
		}
	}
	for _, triple := range []string{"", "aarch64-unknown-linux-gnu"} {
		for _, v := range vs {
			if lower.Unsupported(v) != nil {
				continue
			}
			c, err := build.Compile(v, cpu.Target{}, build.Options{Triple: triple, Tables: map[string][]passes.Pass{"cpu": table}})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range c.Final.Kernels {
				if k.Level == "" {
					continue
				}
				loops := 0
				ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
					switch x := s.(type) {
					case *ir.MatMul:
						if x.M >= cpu.BlockMinRows {
							t.Errorf("%s %s: matmul %s[%d, %d] (K %d) left as is", v.Name, k.Name, x.C, x.M, x.N, x.K)
						}
					case *ir.For:
						if x.Var == "bm_k" {
							loops++
						}
					}
					return []ir.Stmt{s}
				})
				if k.Role == ir.RolePrefill && loops == 0 {
					t.Errorf("%s %s: no micro-kernel", v.Name, k.Name)
				}
			}
		}
	}
}
