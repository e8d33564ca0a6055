// Package attnc is the attnc compiler as a library: Compile turns .attn spec
// source into exactly the files `attnc build` writes (<variant>.ll,
// <variant>.cu, <variant>.h, manifest.json), through the same code path.
//
// A program extends the compiler without forking it: Options.Insert places
// its own passes (passes.Pass, a pure function from kernel-IR module to
// module) before or after a named pass of every target's pass table, for
// that one Compile call only; nothing global changes, so calls with
// different insertions may run concurrently. Pass names are API: the pass
// that inlines the @mask and @score Defs is "inline-defs", and a pass placed
// before it may rewrite those Defs (ir.Module.WithDef and the ir
// constructors). The manifest lists, per target, every pass that ran.
// Package cli builds a whole attnc command line with extra passes.
//
// attnc may import every attnc package except cli and cmd.
package attnc

import (
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"sort"
	"strings"

	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets"
)

// Targets are the targets Compile knows: cpu (LLVM IR, <variant>.ll) and
// cuda (CUDA C++, <variant>.cu), the registered targets of package targets.
func Targets() []string { return targets.Names() }

// Insertion adds Pass to the pass table of every target that has a pass
// named Before (Pass runs just before it) or After (just after it). Exactly
// one of Before and After is set, and at least one target's table must have
// that pass. Constraints (optional) are the ordering rules Pass needs
// beyond its place, each naming Pass and a pass of the table: an insertion
// that breaks one of them or one of the target's is an error naming both
// passes.
type Insertion = passes.Insertion

// CommandGCPercent is the garbage collector's target percentage the attnc
// command runs under when the environment sets no GOGC: a build allocates
// many short-lived IR and LLVM text values, and at Go's default (100) the
// collector took about a third of the CPU time of the largest specs
// TestCompileBounded builds. At 200 those builds take 10–15% less CPU
// time for 20–30% more peak memory (nested: 490 → 600–650 MiB, within the
// 1 GiB budget). A program that embeds the library keeps its own setting.
const CommandGCPercent = 200

// Options configures Compile. The zero value builds the cpu target with the
// standard pass tables.
type Options struct {
	Targets []string // targets to generate (default: cpu); see Targets
	// Triple is the cpu target's LLVM triple: x86_64-unknown-linux-gnu
	// (the default) or aarch64-unknown-linux-gnu. The IR differs only in
	// its triple and data layout; the manifest records it.
	Triple string
	// CPULevels restricts the CPU levels the cpu target clones its work
	// kernels for (nil: every level of the triple, the entries picking
	// the best one the CPU runs): level names of the triple
	// (x86-64, x86-64-v3, x86-64-v4, x86-64-v4-bf16, x86-64-amx; neon),
	// or "host" for the best level of the machine that compiles. Kernels
	// a level would not change (a DotBF16 level without a bf16 product)
	// take the best level below it. On a CPU below every kernel's lowest
	// clone the entries return CPU_LEVEL and <prefix>_cpu_level() NULL;
	// the manifest lists the levels (targets.cpu.levels). An unknown name
	// is an error.
	CPULevels []string
	Insert    []Insertion // user passes, applied in order

	VerifyEach bool      // run the kernel-IR verifier after every pass (a failure is an error naming the pass)
	PrintAfter string    // "all" or a pass name: print the kernel IR after it to Log
	DumpDir    string    // when set, write the IR after lowering and after every pass there
	Log        io.Writer // where PrintAfter prints (default os.Stderr)
}

// Result is what Compile produced.
type Result struct {
	// Files are the artifacts `attnc build` writes, by file name:
	// <variant>.ll (cpu), <variant>.cu (cuda), <variant>.h and
	// manifest.json. They are deterministic byte for byte.
	Files map[string][]byte
	// Manifest is manifest.json as a value.
	Manifest *registry.Manifest
	// Variants are the compiled variants in spec order.
	Variants []*ir.Variant

	final map[string]map[string]*ir.Module // target -> variant -> module after every pass
}

// Compile parses the spec src (its errors name filename as
// file:line:col: message), checks, lowers and compiles every variant in it
// for opt.Targets, running each target's pass table with opt.Insert.
func Compile(filename string, src []byte, opt Options) (*Result, error) {
	vs, err := frontend.Parse(filename, src)
	if err != nil {
		return nil, err
	}
	return CompileVariants(vs, opt)
}

// CompileFiles is Compile over spec files, as `attnc build SPEC...` reads
// them; variant names must be unique across the files.
func CompileFiles(paths []string, opt Options) (*Result, error) {
	vs, err := driver.ParseSpecs(paths)
	if err != nil {
		return nil, err
	}
	return CompileVariants(vs, opt)
}

// CompileVariants compiles variants that were already parsed and checked.
// A failing user pass (an error, a panic, a module without kernels or
// bodies, names that are not identifiers, invalid IR under VerifyEach, an
// entry removed) is an error naming the pass or the entry; anything else
// that goes wrong inside is returned as an internal error, never a panic.
func CompileVariants(vs []*ir.Variant, opt Options) (r *Result, err error) {
	defer func() {
		if x := recover(); x != nil {
			r, err = nil, fmt.Errorf("attnc: internal error (a bug in attnc): %v\n%s", x, debug.Stack())
		}
	}()
	tables, err := PassTables(opt.Insert)
	if err != nil {
		return nil, err
	}
	if err := checkPrintAfter(tables, opt.PrintAfter); err != nil {
		return nil, err
	}
	out, err := driver.Build(vs, driver.Options{
		Targets:   opt.Targets,
		Triple:    opt.Triple,
		CPULevels: opt.CPULevels,
		Tables:    tables,
		Passes: passes.Options{
			VerifyEach: opt.VerifyEach,
			PrintAfter: opt.PrintAfter,
			Out:        opt.Log,
			DumpDir:    opt.DumpDir,
		},
	})
	if err != nil {
		return nil, err
	}
	r = &Result{Files: map[string][]byte{}, Manifest: out.Manifest, Variants: out.Variants, final: out.Final}
	for _, a := range out.Artifacts {
		r.Files[a.Name] = a.Data
	}
	return r, nil
}

// PassTables returns the pass table of every target (see Targets) with the
// insertions applied in order (targets.PassTable). It is an error when an
// insertion is malformed, names a pass no table has, or breaks an ordering
// constraint (the target's or its own).
func PassTables(insert []Insertion) (map[string][]passes.Pass, error) {
	tables := map[string][]passes.Pass{}
	found := make([]bool, len(insert))
	for _, t := range targets.All() {
		table, applied, err := targets.PassTable(t, insert)
		if err != nil {
			return nil, fmt.Errorf("attnc: %w", err)
		}
		tables[t.Name()] = table
		for i, ok := range applied {
			found[i] = found[i] || ok
		}
	}
	for i, in := range insert {
		if !found[i] {
			anchor := in.Before + in.After
			return nil, fmt.Errorf("attnc: insert %s: no target's pass table has a pass named %q (passes: %s)",
				in, anchor, strings.Join(allPassNames(tables), ", "))
		}
	}
	return tables, nil
}

// PassTable is target's table of PassTables(insert).
func PassTable(name string, insert []Insertion) ([]passes.Pass, error) {
	tables, err := PassTables(insert)
	if err != nil {
		return nil, err
	}
	t, ok := tables[name]
	if !ok {
		return nil, fmt.Errorf("attnc: unknown target %q (known: %s)", name, strings.Join(targets.Names(), ", "))
	}
	return t, nil
}

// allPassNames lists every pass name of the tables once, in table order.
func allPassNames(tables map[string][]passes.Pass) []string {
	var names []string
	for _, t := range targets.Names() {
		for _, p := range tables[t] {
			if !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
	}
	return names
}

// checkPrintAfter rejects a PrintAfter value that names no pass of any
// table, before any work is done.
func checkPrintAfter(tables map[string][]passes.Pass, name string) error {
	if name == "" || name == "all" {
		return nil
	}
	names := allPassNames(tables)
	if slices.Contains(names, name) {
		return nil
	}
	return fmt.Errorf("--print-after: no pass named %q (use all or one of: %s)", name, strings.Join(names, ", "))
}

// Names returns the names of r.Files in sorted order.
func (r *Result) Names() []string {
	names := make([]string, 0, len(r.Files))
	for n := range r.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Write stores r.Files in dir (created if missing) as one set: they are
// written into a fresh directory inside dir and then renamed over their
// targets, manifest.json last, so a failure leaves dir as it was (other
// files in dir are never touched, and a symlink at a target is replaced,
// not written through). It logs "wrote <path>" for each file to log when
// it is not nil.
func (r *Result) Write(dir string, log io.Writer) error {
	files := make([]driver.Artifact, 0, len(r.Files))
	for _, n := range r.Names() {
		files = append(files, driver.Artifact{Name: n, Data: r.Files[n]})
	}
	return driver.WriteArtifacts(dir, files, log)
}

// Module returns variant's kernel-IR module for target after every pass,
// or nil when r has none (the target was not built).
func (r *Result) Module(target, variant string) *ir.Module {
	return r.final[target][variant]
}

// Select says which kernel serves a call of the given shape to variant's
// kernels for target, and how it splits the work. It evaluates the
// plans of the compiled module, after every pass, as that target's entry
// evaluates them (cpu: work items and splits for s.Threads; cuda: grids,
// blocks, shared memory and splits for s.SMs multiprocessors). target is a
// target r was built for. The shape must be within CheckShape's bounds.
func (r *Result) Select(variant, tgt string, s registry.Shape) (registry.Selection, error) {
	var v *ir.Variant
	for _, x := range r.Variants {
		if x.Name == variant {
			v = x
		}
	}
	if v == nil {
		return registry.Selection{}, fmt.Errorf("attnc: select: no variant %q", variant)
	}
	t, err := targets.Lookup(tgt)
	if err != nil {
		return registry.Selection{}, fmt.Errorf("attnc: select: %w", err)
	}
	m := r.Module(tgt, variant)
	if m == nil {
		return registry.Selection{}, fmt.Errorf("attnc: select: %s was not built for target %s", variant, tgt)
	}
	if err := CheckShape(tgt, s); err != nil {
		return registry.Selection{}, fmt.Errorf("attnc: select %s (%s): %w", variant, tgt, err)
	}
	sel, err := t.Select(v, m, s)
	if err != nil {
		return registry.Selection{}, fmt.Errorf("attnc: select %s (%s): %w", variant, tgt, err)
	}
	return sel, nil
}
