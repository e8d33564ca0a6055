package lltest

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// GrabCase is one line of targets/cpu/testdata/grabs.table: the items Want
// of parallel_for's grab at item Next of N items on T threads with runs of
// Run items.
type GrabCase struct{ N, T, Run, Next, Want int }

// GrabCases reads the grab table at path (the CPU runtime's rule, worked
// by hand; both the generated rule and bench's paged scan are checked
// against it): lines of five integers, then a comment; # starts a comment
// line.
func GrabCases(t *testing.T, path string) []GrabCase {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cs []GrabCase
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 5 {
			t.Fatalf("%s:%d: want n t run next want, got %q", path, i+1, line)
		}
		var v [5]int
		for k := range v {
			if v[k], err = strconv.Atoi(f[k]); err != nil {
				t.Fatalf("%s:%d: %v", path, i+1, err)
			}
		}
		cs = append(cs, GrabCase{N: v[0], T: v[1], Run: v[2], Next: v[3], Want: v[4]})
	}
	if len(cs) == 0 {
		t.Fatalf("%s: no grabs", path)
	}
	return cs
}
