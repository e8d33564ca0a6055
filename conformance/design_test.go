package conformance

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/ir"
)

// designArgRow is a row of DESIGN.md §4's argument table: its first cell,
// whose backquoted words are argument names.
var designArgRow = regexp.MustCompile("(?m)^\\| ([^|]*`[^|]*) \\|")

// quoted is a backquoted word.
var quoted = regexp.MustCompile("`([^`]+)`")

// designArgNames is every argument name DESIGN.md §4's table gives (the
// backquoted words of each row's first cell, `NAME` for a param's).
func designArgNames(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start := strings.Index(s, "\n## 4.")
	end := strings.Index(s, "\n## 5.")
	if start < 0 || end < start {
		t.Fatal("DESIGN.md has no §4 followed by §5")
	}
	names := map[string]bool{}
	for _, row := range designArgRow.FindAllStringSubmatch(s[start:end], -1) {
		for _, w := range quoted.FindAllStringSubmatch(row[1], -1) {
			names[w[1]] = true
		}
	}
	if len(names) < 20 {
		t.Fatalf("DESIGN.md §4's argument table gives %d names, want the whole table", len(names))
	}
	return names
}

// TestDesignNamesEveryArgument: every argument of every entry point, on
// every target, for the examples and the specs of the page-kernel,
// qkv_append, param and fuzz suites (every kernel role, cache kind and
// feature between them), is a row of DESIGN.md §4's argument table — the
// names the conformance suites bind by — apart from a variant's own param
// tensors and their named dims (the table's `NAME` row). The repository's
// copy of DESIGN.md once lacked the arguments of §3.1 and §3.2; this keeps
// the contract's table whole as kernels grow arguments.
func TestDesignNamesEveryArgument(t *testing.T) {
	t.Parallel()
	names := designArgNames(t)
	vs := exampleVariants(t)
	for _, list := range [][]string{pageKernelSpecs, qkvAppendSpecs, paramSpecs, fuzzSpecs} {
		for _, src := range list {
			vs = append(vs, spec(t, src))
		}
	}
	// Variant names must be unique in one build: build each on its own.
	roles := map[string]bool{}
	for _, v := range vs {
		out, err := driver.Build([]*ir.Variant{v}, driver.Options{Targets: []string{"cpu", "cuda", "hip"}, CPULevels: []string{"x86-64"}})
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		own := map[string]bool{}
		for _, p := range v.Params {
			own[p.Name] = true
		}
		for _, d := range v.ParamDimNames() {
			own[d] = true
		}
		for _, k := range out.Manifest.Kernels {
			if !k.Entry {
				continue
			}
			roles[k.Role] = true
			for _, a := range k.Args {
				if !names[a.Name] && !own[a.Name] {
					t.Errorf("%s: %s's %s entry %s takes %q, which DESIGN.md §4's argument table does not name", v.Name, k.Target, k.Role, k.Symbol, a.Name)
				}
			}
		}
	}
	var missing []string
	for _, r := range ir.Roles() {
		if !roles[string(r)] {
			missing = append(missing, string(r))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Errorf("no spec here has an entry of role %v: add one, so that its arguments are checked", missing)
	}
}
