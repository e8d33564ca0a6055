package cpu_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets/cpu"
)

// TestBlockMatMulFires compiles every example for both triples through
// the CPU table up to block-matmul: every tile matmul of every level's
// clone must have become micro-kernels or dot-product blocks (a shape
// block-matmul leaves for lower-tiles would run at a fraction of the
// speed, silently), every prefill work clone must have its contraction
// loops and every decode work clone its dot-product blocks.
func TestBlockMatMulFires(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.attn")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	vs, err := driver.ParseSpecs(files)
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
			c, err := driver.Compile(v, cpu.Target{}, driver.Options{Triple: triple, Tables: map[string][]passes.Pass{"cpu": table}})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range c.Final.Kernels {
				if k.Level == "" {
					continue
				}
				loops, dots := 0, 0
				ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
					switch x := s.(type) {
					case *ir.MatMul:
						t.Errorf("%s %s: matmul %s[%d, %d] (K %d) left as is", v.Name, k.Name, x.C, x.M, x.N, x.K)
					case *ir.For:
						switch x.Var {
						case "bm_k":
							loops++
						case "db_k":
							dots++
						}
					}
					return []ir.Stmt{s}
				})
				if k.Role == ir.RolePrefill && loops == 0 {
					t.Errorf("%s %s: no micro-kernel", v.Name, k.Name)
				}
				if k.Role == ir.RoleDecode && strings.Contains(k.Name, "_work") && dots == 0 {
					t.Errorf("%s %s: no dot-product block", v.Name, k.Name)
				}
			}
		}
	}
}

// TestExpBoundFires compiles every example for both triples through the
// CPU table up to exp-bound: in every level clone, every softmax weight
// exp(s_j - m_new) must have become exp(min(s_j - m_new, 0)) (a lowering
// change that broke exp-bound's pattern would leave the full polynomial,
// silently slower), and every prefill and decode work clone must have one.
func TestExpBoundFires(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.attn")
	vs, err := driver.ParseSpecs(files)
	if err != nil || len(vs) == 0 {
		t.Fatalf("examples: %d variants, %v", len(vs), err)
	}
	var table = cpu.Table
	for i, p := range cpu.Table {
		if p.Name == "exp-bound" {
			table = cpu.Table[:i+1]
		}
	}
	for _, triple := range []string{"", "aarch64-unknown-linux-gnu"} {
		for _, v := range vs {
			if lower.Unsupported(v) != nil {
				continue
			}
			c, err := driver.Compile(v, cpu.Target{}, driver.Options{Triple: triple, Tables: map[string][]passes.Pass{"cpu": table}})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range c.Final.Kernels {
				if k.Level == "" {
					continue
				}
				text := k.String()
				if strings.Contains(text, "exp((s_j - m_new))") {
					t.Errorf("%s %s: a softmax weight's exp left unbounded", v.Name, k.Name)
				}
				work := (k.Role == ir.RolePrefill || k.Role == ir.RoleDecode) && strings.Contains(k.Name, "_work")
				if work && !strings.Contains(text, "exp(min((s_j - m_new), 0.0:f32))") {
					t.Errorf("%s %s: no bounded exp", v.Name, k.Name)
				}
			}
		}
	}
}
