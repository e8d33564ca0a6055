package passes

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

var update = flag.Bool("update", false, "rewrite the after sections of testdata/*.txt")

func TestPassOrder(t *testing.T) {
	if err := CheckOrder(Neutral, NeutralConstraints); err != nil {
		t.Error(err)
	}
	swapped := append([]Pass(nil), Neutral...)
	swapped[0], swapped[2] = swapped[2], swapped[0]
	if err := CheckOrder(swapped, NeutralConstraints); err == nil {
		t.Error("CheckOrder accepts classify-tiles before inline-defs")
	}
	if err := CheckOrder(Neutral, []Constraint{{"inline-defs", "no-such-pass", "typo"}}); err == nil {
		t.Error("CheckOrder accepts a constraint naming an unknown pass")
	}
}

// TestBeforeAfter runs each testdata/*.txt case: the passes named on its
// first line (`passes: a, b`) applied to the `-- before --` module must
// print exactly the `-- after --` module. -update rewrites the after part,
// which a reviewer then reads.
func TestBeforeAfter(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text := string(data)
			head, rest, _ := strings.Cut(text, "-- before --\n")
			before, after, _ := strings.Cut(rest, "-- after --\n")
			var names []string
			for _, line := range strings.Split(head, "\n") {
				if n, ok := strings.CutPrefix(line, "passes:"); ok {
					for _, s := range strings.Split(n, ",") {
						names = append(names, strings.TrimSpace(s))
					}
				}
			}
			m, err := ir.Parse(before)
			if err != nil {
				t.Fatalf("before: %v", err)
			}
			for _, n := range names {
				p := Find(Neutral, n)
				if p == nil {
					t.Fatalf("unknown pass %q", n)
				}
				if m, err = p.Run(m); err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				ir.MustVerify(n, m)
			}
			got := m.String()
			if *update {
				if err := os.WriteFile(f, []byte(head+"-- before --\n"+before+"-- after --\n"+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != after {
				t.Errorf("after %v:\n%s\nwant:\n%s", names, got, after)
			}
		})
	}
}
