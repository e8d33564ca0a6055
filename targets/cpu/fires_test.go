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

// eachLevelClone compiles every example for both triples through the CPU
// table up to and including the pass named last, and calls f with each
// level clone of the result (the kernels a CPU level runs).
func eachLevelClone(t *testing.T, last string, f func(v *ir.Variant, k *ir.Kernel)) {
	t.Helper()
	files, _ := filepath.Glob("../../examples/*.attn")
	vs, err := driver.ParseSpecs(files)
	if err != nil || len(vs) == 0 {
		t.Fatalf("examples: %d variants, %v", len(vs), err)
	}
	table := []passes.Pass(nil)
	for i, p := range cpu.Table {
		if p.Name == last {
			table = cpu.Table[:i+1]
		}
	}
	if table == nil {
		t.Fatalf("no pass %q in the CPU table", last)
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
				if k.Level != "" {
					f(v, k)
				}
			}
		}
	}
}

// TestBlockMatMulFires compiles every example for both triples through
// the CPU table up to block-matmul: every tile matmul of every level's
// clone must have become micro-kernels or dot-product blocks (a shape
// block-matmul leaves for lower-tiles would run at a fraction of the
// speed, silently), every prefill work clone must have its contraction
// loops and every decode work clone its dot-product blocks — or, with
// items of at least BlockMinRows heads (MLA's 128 heads, 64 an item:
// cpu.MLADecodeHeads), the micro-kernels' contraction loops.
func TestBlockMatMulFires(t *testing.T) {
	eachLevelClone(t, "block-matmul", func(v *ir.Variant, k *ir.Kernel) {
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
		if k.Role == ir.RoleDecode && strings.Contains(k.Name, "_work") {
			wide := cpu.Target{}.Tiling(v).DecodeHeads(v.GroupSize()) >= cpu.BlockMinRows
			if wide && loops == 0 {
				t.Errorf("%s %s: no micro-kernel", v.Name, k.Name)
			}
			if !wide && dots == 0 {
				t.Errorf("%s %s: no dot-product block", v.Name, k.Name)
			}
		}
	})
}

// TestExpBoundFires compiles every example for both triples through the
// CPU table up to exp-bound: in every level clone, every softmax weight
// exp(s_j - m_new) must have become exp(min(s_j - m_new, 0)) (a lowering
// change that broke exp-bound's pattern would leave the full polynomial,
// silently slower), and every prefill and decode work clone must have
// one. Prefill's proof is the row's max in the same block; decode's
// update runs a loop per phase over the group's rows (Tiling.
// DecodePhases), the max reaching the exp loop through alpha[row].
func TestExpBoundFires(t *testing.T) {
	seen := map[ir.Role]int{}
	eachLevelClone(t, "exp-bound", func(v *ir.Variant, k *ir.Kernel) {
		text := k.String()
		if strings.Contains(text, "exp((s_j - m_new))") {
			t.Errorf("%s %s: a softmax weight's exp left unbounded", v.Name, k.Name)
		}
		if (k.Role == ir.RolePrefill || k.Role == ir.RoleDecode) && strings.Contains(k.Name, "_work") {
			seen[k.Role]++
			if !strings.Contains(text, "exp(min((s_j - m_new), 0.0:f32))") {
				t.Errorf("%s %s: no bounded exp", v.Name, k.Name)
			}
		}
	})
	if seen[ir.RolePrefill] == 0 || seen[ir.RoleDecode] == 0 {
		t.Errorf("work clones checked: %v, want prefill and decode", seen)
	}
}
