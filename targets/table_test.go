package targets_test

import (
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets"
	"github.com/attnc/attnc/targets/cpu"
	"github.com/attnc/attnc/targets/cuda"
)

var user = passes.Pass{Name: "user", Run: func(m *ir.Module) (*ir.Module, error) { return m, nil }}

// An insertion's constraints are checked with the target's wherever the
// table is built; a violation names both passes.
func TestPassTableChecksInsertions(t *testing.T) {
	mustPrecede := []passes.Constraint{{Before: "user", After: "lower-tiles", Why: "lower-tiles reads what it writes"}}
	if _, _, err := targets.PassTable(cpu.Target{}, []passes.Insertion{{After: "vectorize", Pass: user, Constraints: mustPrecede}}); err == nil ||
		!strings.Contains(err.Error(), "user must run before lower-tiles: lower-tiles reads what it writes") {
		t.Errorf("user after vectorize, constrained before lower-tiles: %v", err)
	}
	table, applied, err := targets.PassTable(cpu.Target{}, []passes.Insertion{{Before: "lower-tiles", Pass: user, Constraints: mustPrecede}})
	if err != nil || !applied[0] || passes.Find(table, "user") == nil {
		t.Errorf("user before lower-tiles: applied %v, %v", applied, err)
	}
	if len(cpu.Table) == len(table) {
		t.Error("PassTable changed the target's own table")
	}
	// On a table without the constrained pass (cuda has no lower-tiles)
	// the constraint does not apply; without the anchor nothing is
	// inserted.
	if _, applied, err := targets.PassTable(cuda.Target{}, []passes.Insertion{{After: "simplify", Pass: user, Constraints: mustPrecede}}); err != nil || !applied[0] {
		t.Errorf("cuda: %v, %v", applied, err)
	}
	if _, applied, err := targets.PassTable(cuda.Target{}, []passes.Insertion{{After: "vectorize", Pass: user}}); err != nil || applied[0] {
		t.Errorf("cuda without the anchor: %v, %v", applied, err)
	}
}

// swapped is the CPU target with a constraint its table breaks.
type swapped struct{ cpu.Target }

func (swapped) Constraints() []passes.Constraint {
	return []passes.Constraint{{Before: "vectorize", After: "lower-tiles", Why: "swapped"}}
}

// A target's own table is checked against its constraints when a table is
// built from it, and so is a table given to the driver (CheckTable).
func TestPassTableChecksTheTarget(t *testing.T) {
	if _, _, err := targets.PassTable(swapped{}, nil); err == nil || !strings.Contains(err.Error(), "vectorize must run before lower-tiles") {
		t.Errorf("a table breaking its constraint: %v", err)
	}
	table := append([]passes.Pass(nil), cpu.Table...)
	i, j := index(table, "lower-tiles"), index(table, "vectorize")
	table[i], table[j] = table[j], table[i]
	if err := targets.CheckTable(cpu.Target{}, table); err == nil || !strings.Contains(err.Error(), "lower-tiles must run before vectorize") {
		t.Errorf("lower-tiles and vectorize swapped: %v", err)
	}
	if err := targets.CheckTable(cpu.Target{}, cpu.Table[:index(cpu.Table, "lower-tiles")+1]); err != nil {
		t.Errorf("a prefix of the table: %v", err)
	}
}

func index(table []passes.Pass, name string) int {
	for i, p := range table {
		if p.Name == name {
			return i
		}
	}
	return -1
}
