package conformance

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// serialTests are the package's tests that do not call t.Parallel, and
// why. Every other test calls it first: the package's run is most of
// `go test ./...`'s time, and a test left serial holds the whole package
// to its own parallelism — one that runs a single library or a single
// child process keeps one core busy while the other waits (37% of the
// package's wall time ran on one core, 2026-12-05).
var serialTests = map[string]string{
	"TestFuzzChild": "FuzzKernels' child process: it runs alone there and speaks over stdout",
	// The AMX emulator is one SIGILL handler for the whole process: every
	// library built with it installs its own copy when it loads, and the
	// last one installed takes every library's tile instructions (with
	// its own per-thread tile state), so these load one library at a time
	// and run while no other test does.
	"TestAMXPrefillEmulated":    amxEmulatorSerial,
	"TestAMXPrefillF16Emulated": amxEmulatorSerial + "; it also turns cpu.AMXHalfProducts, a process-wide switch, on while it builds",
	"TestAMXGroupsEmulated":     amxEmulatorSerial,
	"TestAMXExamplesEmulated":   amxEmulatorSerial,
	"TestAMXRepeatedPage":       amxEmulatorSerial + "; it also turns cpu.AMXHalfProducts on",
}

const amxEmulatorSerial = "loads libraries with the AMX emulator's SIGILL handler"

// TestTopLevelTestsRunInParallel checks that every Test function of the
// package's test files calls t.Parallel() as its first statement, unless
// serialTests names it.
func TestTopLevelTestsRunInParallel(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	fset := token.NewFileSet()
	seen := 0
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			seen++
			if _, ok := serialTests[fn.Name.Name]; ok {
				continue
			}
			if !callsParallelFirst(fn) {
				t.Errorf("%s: %s does not call t.Parallel() first (or add it to serialTests, saying why)", fset.Position(fn.Pos()), fn.Name.Name)
			}
		}
	}
	if seen < 10 {
		t.Fatalf("found only %d tests: is the working directory the package's?", seen)
	}
}

// callsParallelFirst reports whether fn's first statement is
// <param>.Parallel() on its one parameter.
func callsParallelFirst(fn *ast.FuncDecl) bool {
	params := fn.Type.Params.List
	if len(params) != 1 || len(params[0].Names) != 1 || fn.Body == nil || len(fn.Body.List) == 0 {
		return false
	}
	es, ok := fn.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok || len(call.Args) != 0 {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Parallel" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == params[0].Names[0].Name
}
