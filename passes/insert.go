package passes

import (
	"errors"
	"fmt"
)

// Insert returns a copy of table with p placed just before the pass named
// before, or just after the pass named after (exactly one of the two is
// set). found is false, and the copy equals table, when table has no pass
// of that name. table itself is never modified, so a caller can extend a
// target's table without changing it for anyone else. The inserted copy of
// p is marked Inserted: RunTable reports its failures as its own.
func Insert(table []Pass, before, after string, p Pass) (out []Pass, found bool, err error) {
	if err := checkInsert(table, before, after, p); err != nil {
		return nil, false, err
	}
	p.Inserted = true
	anchor := before
	if anchor == "" {
		anchor = after
	}
	out = make([]Pass, 0, len(table)+1)
	for _, q := range table {
		if q.Name == anchor && before != "" {
			out, found = append(out, p), true
		}
		out = append(out, q)
		if q.Name == anchor && after != "" {
			out, found = append(out, p), true
		}
	}
	return out, found, nil
}

// checkInsert rejects an insertion that would make the table ambiguous or
// unrunnable.
func checkInsert(table []Pass, before, after string, p Pass) error {
	switch {
	case p.Name == "":
		return errors.New("pass has no name")
	case p.Run == nil:
		return fmt.Errorf("pass %s has no Run function", p.Name)
	case p.Name == "all" || p.Name == "lower":
		return fmt.Errorf("pass name %q is reserved (--print-after=all, the dump of the lowered module)", p.Name)
	case (before == "") == (after == ""):
		return fmt.Errorf("pass %s: set exactly one of Before and After (got before %q, after %q)", p.Name, before, after)
	case Find(table, p.Name) != nil:
		return fmt.Errorf("pass %s: the table already has a pass of that name", p.Name)
	}
	return nil
}

// Insertion adds Pass to a table just before the pass named Before or just
// after the pass named After (exactly one of the two is set). A user pass
// has no ordering rules of its own beyond its place unless Constraints
// declares them: each names Pass on one side and a pass of the table on
// the other, and holds wherever the table has both (targets.PassTable
// checks them with the target's own after every insertion).
type Insertion struct {
	Before, After string
	Pass          Pass
	Constraints   []Constraint
}

func (in Insertion) String() string {
	if in.Before != "" {
		return fmt.Sprintf("pass %s before %s", in.Pass.Name, in.Before)
	}
	return fmt.Sprintf("pass %s after %s", in.Pass.Name, in.After)
}

// Apply is Insert of in, after checking that each of in's constraints
// names in.Pass on one side.
func (in Insertion) Apply(table []Pass) (out []Pass, found bool, err error) {
	for _, c := range in.Constraints {
		if c.Before != in.Pass.Name && c.After != in.Pass.Name {
			return nil, false, fmt.Errorf("pass %s: constraint %s before %s does not name it", in.Pass.Name, c.Before, c.After)
		}
	}
	return Insert(table, in.Before, in.After, in.Pass)
}
