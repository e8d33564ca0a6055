package cpu

import (
	"slices"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets"
)

// bindModule is a work kernel and the entry that calls it.
const bindModule = `module t prefix t

kernel t_work role decode (x: f32* [4] out, n: i32) {
  for item in 0 .. n parallel @work {
    store x[item] = 1.0:f32
  }
  return 0
}

kernel t_entry role decode entry (x: f32* [4] out, n: i32) {
  call t_work(x, n)
  return 0
}
`

// cloneLevels runs table's multiversion pass on bindModule and lists the
// levels of the clones it made.
func cloneLevels(t *testing.T, table []passes.Pass) []string {
	t.Helper()
	m, err := ir.Parse(bindModule)
	if err != nil {
		t.Fatal(err)
	}
	p := passes.Find(table, "multiversion")
	if p == nil {
		t.Fatal("no multiversion pass")
	}
	out, err := p.Run(m)
	if err != nil {
		t.Fatal(err)
	}
	var levels []string
	for _, k := range out.Kernels {
		if k.Level != "" {
			levels = append(levels, k.Level)
		}
	}
	return levels
}

// TestBind: a table bound to a triple runs that machine's passes — the
// clones are of its levels, a level table still clones only its level —
// whatever machine the table was made from, and a user's inserted pass
// keeps its own Run; an unknown triple is an error naming the known ones.
func TestBind(t *testing.T) {
	const arm = "aarch64-unknown-linux-gnu"
	if got := cloneLevels(t, Table); !slices.Equal(got, []string{"x86-64", "x86-64-v3", "x86-64-v4"}) {
		t.Errorf("Table clones %v", got)
	}
	v3, err := LevelTable("x86-64-v3")
	if err != nil {
		t.Fatal(err)
	}
	if got := cloneLevels(t, v3); !slices.Equal(got, []string{"x86-64-v3"}) {
		t.Errorf("LevelTable(x86-64-v3) clones %v", got)
	}
	if _, err := LevelTable("neon"); err == nil || !strings.Contains(err.Error(), `"neon" is not a CPU level of x86_64-unknown-linux-gnu (known: x86-64, x86-64-v3, x86-64-v4, x86-64-v4-bf16, x86-64-amx)`) {
		t.Errorf("LevelTable(neon) on x86-64: %v", err)
	}
	ran := false
	user := passes.Pass{Name: "user", Run: func(m *ir.Module) (*ir.Module, error) { ran = true; return m, nil }}
	withUser, ok, err := passes.Insert(Table, "", "multiversion", user)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	for _, c := range []struct {
		name   string
		table  []passes.Pass
		triple string
		want   []string
	}{
		{"table on aarch64", Table, arm, []string{"neon"}},
		{"aarch64 table on x86-64", mustMachine(t, arm).Table(), "", []string{"x86-64", "x86-64-v3", "x86-64-v4"}},
		{"v3 table on x86-64", v3, "", []string{"x86-64-v3"}},
		{"user table on aarch64", withUser, arm, []string{"neon"}},
	} {
		bound, err := Target{}.Bind(c.table, targets.Options{Triple: c.triple})
		if err != nil {
			t.Fatal(err)
		}
		if got := cloneLevels(t, bound); !slices.Equal(got, c.want) {
			t.Errorf("%s: clones %v, want %v", c.name, got, c.want)
		}
		if len(bound) != len(c.table) {
			t.Errorf("%s: %d passes bound from %d", c.name, len(bound), len(c.table))
		}
		for i := range bound {
			if bound[i].Name != c.table[i].Name || bound[i].Inserted != c.table[i].Inserted {
				t.Errorf("%s: pass %d is %s, was %s", c.name, i, bound[i].Name, c.table[i].Name)
			}
		}
	}
	bound, err := Target{}.Bind(withUser, targets.Options{Triple: arm})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := passes.Find(bound, "user").Run(nil); err != nil || !ran {
		t.Errorf("the inserted pass was replaced (ran %v, %v)", ran, err)
	}
	if _, err := (Target{}).Bind(Table, targets.Options{Triple: "riscv64-unknown-linux-gnu"}); err == nil ||
		!strings.Contains(err.Error(), `unknown target triple "riscv64-unknown-linux-gnu" (known: x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu)`) {
		t.Errorf("an unknown triple: %v", err)
	}
}

func mustMachine(t *testing.T, triple string) *Machine {
	t.Helper()
	mc, err := NewMachine(triple)
	if err != nil {
		t.Fatal(err)
	}
	return mc
}
