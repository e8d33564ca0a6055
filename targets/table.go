package targets

import (
	"fmt"

	"github.com/attnc/attnc/passes"
)

// PassTable returns a copy of t's pass table with the insertions applied
// in order, each where the table has its anchor (applied[i] says whether
// ins[i] was), and the order checked whenever the table is built: the
// target's table against its Constraints, and after every insertion the
// table so far against those and the insertions' own Constraints — an
// insertion that puts a pass before one it must follow is an error naming
// both. It is the one way the driver, the command line and the attnc
// package get a table; callers may extend the copy.
func PassTable(t Target, ins []passes.Insertion) (table []passes.Pass, applied []bool, err error) {
	base := t.Passes()
	cs := t.Constraints()
	if err := passes.CheckOrder(base, cs); err != nil {
		return nil, nil, fmt.Errorf("target %s: its pass table: %w", t.Name(), err)
	}
	table = append([]passes.Pass(nil), base...)
	cs = append([]passes.Constraint(nil), cs...)
	applied = make([]bool, len(ins))
	for i, in := range ins {
		out, ok, err := in.Apply(table)
		if err != nil {
			return nil, nil, fmt.Errorf("insert %s: %w", in, err)
		}
		if !ok {
			continue
		}
		table, applied[i] = out, true
		cs = append(cs, in.Constraints...)
		if err := passes.CheckPresent(table, cs); err != nil {
			return nil, nil, fmt.Errorf("insert %s: %s's pass table: %w", in, t.Name(), err)
		}
	}
	return table, applied, nil
}

// CheckTable checks a table built from t's (a prefix of it, or one with
// passes inserted) against t's Constraints: those between passes it has
// must hold.
func CheckTable(t Target, table []passes.Pass) error {
	if err := passes.CheckPresent(table, t.Constraints()); err != nil {
		return fmt.Errorf("target %s: the pass table: %w", t.Name(), err)
	}
	return nil
}
