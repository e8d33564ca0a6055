// Package targets is the seam between the target-neutral compiler (lower,
// the neutral passes, plans) and the code generators. A Target is
// registered once, in one table; the driver, the CLI, conformance and bench
// iterate the table and ask each target through its optional hooks
// (hooks.go) for what it offers, so adding a target is a new package that
// calls Register from its init and one blank import in the attnc package
// (targets.go), the way database/sql drivers register. PassTable is the
// one way to a target's pass table, its order checked.
//
// targets imports ir, lower (for Tiling), passes and registry; it must not
// import a target package, codegen, driver or frontend.
package targets

import (
	"fmt"
	"sort"
	"strings"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/registry"
)

// Target schedules the neutral module of a variant and prints it.
type Target interface {
	// Name is what --target and the manifest call it.
	Name() string
	// Files says in a few words what Emit writes (for help texts).
	Files() string
	// Tiling is the work-item shape its schedule wants for v.
	Tiling(v *ir.Variant) lower.Tiling
	// Passes is its pass table, in order: the neutral passes and its own.
	Passes() []passes.Pass
	// Constraints are the ordering rules of its table, with reasons.
	Constraints() []passes.Constraint
	// Assemble builds what the target's entries need from the module's
	// plans before the passes run (the CPU adds entry kernels; a GPU
	// target prints host launchers from the plans instead and returns m).
	Assemble(m *ir.Module) (*ir.Module, error)
	// Emit prints the scheduled module (after every pass).
	Emit(v *ir.Variant, m *ir.Module, opt Options) ([]Artifact, error)
	// Runtime declares in <variant>.h the functions besides the entry
	// points that its artifact defines (the CPU: the status messages and
	// the worker-thread controls); "" when it defines none.
	Runtime(m *ir.Module) string
	// Header declares the entry points in <variant>.h.
	Header(v *ir.Variant, m *ir.Module) string
	// Section is the target's section of manifest.json (build adds the
	// passes that ran); it rejects options the target cannot honour.
	Section(opt Options) (registry.TargetManifest, error)
	// Manifest lists its kernels for manifest.json, computed from the
	// scheduled module.
	Manifest(v *ir.Variant, m *ir.Module, opt Options) []registry.KernelManifest
	// Select says what serves a call of that shape, evaluating the plans
	// of the scheduled module.
	Select(v *ir.Variant, m *ir.Module, s registry.Shape) (registry.Selection, error)
}

// Binder is a target whose own passes depend on the build's options (the
// CPU's on the triple: its levels). The driver binds the table it runs,
// the target's or one a user extended, once per compile: Bind returns it
// with the target's own passes bound to opt, the neutral and inserted
// passes as they are; it rejects options the target cannot honour.
type Binder interface {
	Bind(table []passes.Pass, opt Options) ([]passes.Pass, error)
}

// Options are the per-build settings a target may read.
type Options struct {
	Triple string // CPU: the target triple ("" = the default)
	// CPULevels (CPU) restricts the CPU levels the work kernels are
	// cloned for to these names of the triple's levels (Triples.Levels;
	// "host": the best level of the machine that builds); nil clones
	// every level. The target resolves and validates them
	// (Triples.CheckLevels).
	CPULevels []string
}

// Artifact is one generated file.
type Artifact struct {
	Name string
	Data []byte
}

var table = map[string]Target{}

// Register adds t to the table; a second target of the same name panics.
func Register(t Target) {
	if _, dup := table[t.Name()]; dup {
		panic("target: " + t.Name() + " registered twice")
	}
	table[t.Name()] = t
}

// Lookup finds a registered target.
func Lookup(name string) (Target, error) {
	t, ok := table[name]
	if !ok {
		return nil, fmt.Errorf("unknown target %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return t, nil
}

// Names lists the registered targets, sorted.
func Names() []string {
	var out []string
	for n := range table {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// All returns the registered targets in name order.
func All() []Target {
	var out []Target
	for _, n := range Names() {
		out = append(out, table[n])
	}
	return out
}

// CType is the C type of a buffer element or scalar in headers and
// launchers (storage dtypes from the dtype table).
func CType(t ir.Type) string {
	if r := ir.StorageOf(t); r != nil {
		return r.CType
	}
	switch t {
	case ir.F64:
		return "double"
	case ir.I16:
		return "uint16_t"
	case ir.U8:
		return "uint8_t"
	case ir.I64:
		return "int64_t"
	}
	return "int32_t"
}

// CParams renders a C parameter list with shape comments, one parameter a
// line; extra (e.g. "void *stream") is appended when not empty.
func CParams(params []*ir.Param, extra string) string {
	var sb strings.Builder
	for i, p := range params {
		sep := ","
		if i == len(params)-1 && extra == "" {
			sep = ""
		}
		if p.Buffer {
			cst := "const "
			if p.Output {
				cst = ""
			}
			note := ""
			if p.Null {
				note = ", may be NULL"
			}
			fmt.Fprintf(&sb, "\n    %s%s *%s%s /* %s[%s]%s */", cst, CType(p.Elem), p.Name, sep, p.Elem, strings.Join(p.Shape, ", "), note)
		} else {
			fmt.Fprintf(&sb, "\n    %s %s%s", CType(p.Elem), p.Name, sep)
		}
	}
	if extra != "" {
		sb.WriteString("\n    " + extra)
	}
	return sb.String()
}

// Default is the target a build that names none compiles for.
const Default = "cpu"
