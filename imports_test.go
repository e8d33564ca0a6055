package attnc_test

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// allowedImports is the package table of docs/architecture.md as import
// arrows (like Go's go/build/deps_test.go): for each package of the module
// (path relative to the module, "" is the attnc package itself, "x/*" any
// package directly under x) the module's packages it may import. A target
// is a package under targets/ and reaches the rest of attnc through
// package targets' interfaces: nothing above the seam (driver, cli,
// conformance, bench, registry, attnc) imports codegen/* or a target
// package, except the blank imports that register the targets
// (checkRegistration).
var allowedImports = map[string][]string{
	"ir":                {},
	"frontend":          {"ir"},
	"lower":             {"ir"},
	"passes":            {"ir"},
	"registry":          {"ir"},
	"reference":         {"ir"},
	"cpurt":             {"ir"},
	"codegen/llvm":      {"ir"},
	"codegen/cstyle":    {"ir"},
	"codegen/cuda":      {"ir", "codegen/cstyle"},
	"codegen/cuda/sass": {},
	"codegen/hip":       {"ir", "codegen/cstyle", "codegen/cuda", "codegen/hip/isa"},
	"codegen/hip/isa":   {},
	"targets":           {"ir", "lower", "passes", "registry"},
	// The GPU schedule layer GPU targets instantiate (lane width, block,
	// matrix shapes): not a target, so targets may share it.
	"targets/gpu":      {"ir", "passes"},
	"targets/gpu/host": {"ir", "registry", "targets", "codegen/cstyle"},
	// A target: the neutral compiler, the seam, a code generator (its
	// own, or one it is a dialect of) and the CPU runtime tools its
	// harness builds libraries with; never another target.
	"targets/*":         {"ir", "lower", "passes", "registry", "targets", "cpurt", "codegen/*", "codegen/cuda/sass", "codegen/hip/isa", "targets/gpu", "targets/gpu/host"},
	"driver":            {"frontend", "ir", "lower", "passes", "registry", "targets"},
	"conformance":       {"cpurt", "driver", "frontend", "ir", "lower", "passes", "reference", "registry", "targets"},
	"bench":             {"conformance", "cpurt", "driver", "frontend", "ir", "lower", "passes", "reference", "registry", "targets"},
	"":                  {"driver", "frontend", "ir", "lower", "passes", "registry", "targets", "targets/*"},
	"cli":               {"", "bench", "conformance", "cpurt", "driver", "frontend", "ir", "lower", "passes", "registry", "targets"},
	"cmd/attnc":         {"cli"},
	"internal/passtest": {"ir", "passes"},
	"internal/lltest":   {"ir", "internal/needtool"},
	"internal/emutest":  {"cpurt"},
	// The tests' AMX emulator reads the CPU's flags as lltest does.
	"internal/amxemu":   {"internal/lltest"},
	"internal/plantest": {"conformance", "ir", "reference"},
	// The CUDA toolchain's outputs for the tests of driver and cli, which
	// assemble the same examples: it wraps the target's hooks.
	"internal/toolcache":  {"codegen/cuda", "codegen/cuda/sass", "cpurt", "targets/cuda"},
	"internal/*":          {},
	"examples/custompass": {"", "cli", "ir", "passes"},
	"python":              {},
}

const module = "github.com/attnc/attnc"

// rel is p relative to the module ("" for the module's root package); ok
// is false outside the module.
func rel(p string) (string, bool) {
	if p == module {
		return "", true
	}
	r, ok := strings.CutPrefix(p, module+"/")
	return r, ok
}

// rowOf is the allowedImports key that governs package p.
func rowOf(p string) (string, bool) {
	if _, ok := allowedImports[p]; ok {
		return p, true
	}
	if d := path.Dir(p); p != "" && d != "." {
		if _, ok := allowedImports[d+"/*"]; ok {
			return d + "/*", true
		}
	}
	return "", false
}

// allows reports whether pattern (an allowedImports entry) matches p.
func allows(pattern, p string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/*"); ok {
		return p != dir && path.Dir(p) == dir
	}
	return pattern == p
}

// forbiddenImports returns one line per import arrow of pkgs (package ->
// its imports, module-relative) that allowedImports does not allow, and
// per package without a row.
func forbiddenImports(pkgs map[string][]string) []string {
	var bad []string
	for _, p := range sortedKeys(pkgs) {
		row, ok := rowOf(p)
		if !ok {
			bad = append(bad, "package "+show(p)+" has no row in allowedImports (imports_test.go): add the arrows it may have")
			continue
		}
		for _, imp := range pkgs[p] {
			if !slices.ContainsFunc(allowedImports[row], func(pat string) bool { return allows(pat, imp) }) {
				bad = append(bad, "forbidden import "+show(p)+" -> "+show(imp)+" (allowed: "+strings.Join(showAll(allowedImports[row]), ", ")+")")
			}
		}
	}
	return bad
}

func show(p string) string {
	if p == "" {
		return "attnc"
	}
	return p
}

func showAll(ps []string) []string {
	var out []string
	for _, p := range ps {
		out = append(out, show(p))
	}
	return out
}

func sortedKeys(m map[string][]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// modulePackages lists the module's packages with their imports of the
// module's packages (tests excluded), from go list.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		r, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		pkgs[r] = []string{}
		for _, imp := range p.Imports {
			if ri, ok := rel(imp); ok {
				pkgs[r] = append(pkgs[r], ri)
			}
		}
	}
	return pkgs
}

// TestImports checks every import arrow between the module's packages
// against allowedImports.
func TestImports(t *testing.T) {
	pkgs := modulePackages(t)
	for _, want := range []string{"", "ir", "driver", "targets", "targets/cpu", "targets/cuda", "cli"} {
		if _, ok := pkgs[want]; !ok {
			t.Fatalf("go list did not list package %s", show(want))
		}
	}
	for _, b := range forbiddenImports(pkgs) {
		t.Error(b)
	}
}

// The table rejects the arrows the seam forbids and names them.
func TestForbiddenImportsNamed(t *testing.T) {
	for _, c := range []struct{ from, to string }{
		{"driver", "codegen/cuda"}, {"driver", "targets/cpu"}, {"cli", "codegen/llvm"}, {"conformance", "targets/cuda"},
		{"bench", "codegen/cuda"}, {"registry", "lower"}, {"ir", "passes"}, {"targets", "targets/cpu"},
		{"targets/cuda", "targets/cpu"}, {"targets/hip", "driver"}, {"", "codegen/llvm"}, {"lower", "targets"},
	} {
		bad := forbiddenImports(map[string][]string{c.from: {c.to}})
		want := "forbidden import " + show(c.from) + " -> " + show(c.to)
		if len(bad) != 1 || !strings.HasPrefix(bad[0], want) {
			t.Errorf("%s -> %s: %v, want %q", show(c.from), show(c.to), bad, want)
		}
	}
	if bad := forbiddenImports(map[string][]string{"targets/hip": {"codegen/cuda", "targets", "ir"}}); len(bad) != 0 {
		t.Errorf("a new target's arrows: %v", bad)
	}
	if bad := forbiddenImports(map[string][]string{"newpkg": nil}); len(bad) != 1 || !strings.Contains(bad[0], "no row") {
		t.Errorf("a package without a row: %v", bad)
	}
}

// TestTargetRegistration: the attnc package imports the target packages
// only to register them — blank imports in targets.go — so the library
// API and the commands over it never reach into a target.
func TestTargetRegistration(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	registered := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			r, ok := rel(p)
			if !ok || !allows("targets/*", r) {
				continue
			}
			if f != "targets.go" || imp.Name == nil || imp.Name.Name != "_" {
				t.Errorf("%s: imports %s other than as a blank import in targets.go", fset.Position(imp.Pos()), r)
				continue
			}
			registered++
		}
	}
	if registered == 0 {
		t.Error("targets.go registers no target")
	}
}
