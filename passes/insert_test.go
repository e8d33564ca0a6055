package passes

import (
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

func names(t []Pass) string {
	var s []string
	for _, p := range t {
		s = append(s, p.Name)
	}
	return strings.Join(s, ",")
}

func TestInsert(t *testing.T) {
	id := func(m *ir.Module) (*ir.Module, error) { return m, nil }
	base := []Pass{{Name: "a", Run: id}, {Name: "b", Run: id}}
	before := names(base)
	cases := []struct {
		before, after string
		p             Pass
		want          string
		found         bool
		err           string
	}{
		{before: "b", p: Pass{Name: "x", Run: id}, want: "a,x,b", found: true},
		{after: "b", p: Pass{Name: "x", Run: id}, want: "a,b,x", found: true},
		{before: "a", p: Pass{Name: "x", Run: id}, want: "x,a,b", found: true},
		{after: "nope", p: Pass{Name: "x", Run: id}, want: "a,b"},
		{before: "a", after: "b", p: Pass{Name: "x", Run: id}, err: "exactly one"},
		{p: Pass{Name: "x", Run: id}, err: "exactly one"},
		{before: "a", p: Pass{Name: "a", Run: id}, err: "already has"},
		{before: "a", p: Pass{Name: "x"}, err: "no Run"},
		{before: "a", p: Pass{Run: id}, err: "no name"},
		{before: "a", p: Pass{Name: "all", Run: id}, err: "reserved"},
	}
	for _, c := range cases {
		out, found, err := Insert(base, c.before, c.after, c.p)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: error %v, want %q", c, err, c.err)
			}
			continue
		}
		if err != nil || found != c.found || names(out) != c.want {
			t.Errorf("before %q after %q: got %s found=%v err=%v, want %s found=%v", c.before, c.after, names(out), found, err, c.want, c.found)
		}
	}
	if names(base) != before {
		t.Errorf("Insert modified its input table: %s", names(base))
	}
}
