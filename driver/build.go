package driver

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets"
)

// Options configures Build.
type Options struct {
	Targets []string // default: targets.Default (cpu)
	// Triple is the triple of the target that takes one (targets.Triples:
	// the cpu target; "" is its default, which it lists first).
	Triple string
	// CPULevels restricts the CPU levels the cpu target clones its work
	// kernels for (targets.Options.CPULevels: level names, "host"); nil
	// clones every level of the triple.
	CPULevels []string
	Passes    passes.Options
	// Tables overrides a target's pass table (default: targets.PassTable
	// of the target, no insertions); the driver checks it against the
	// target's constraints.
	Tables map[string][]passes.Pass
}

// table is the pass table Build runs for t, its order checked against
// t's constraints.
func (o Options) table(t targets.Target) ([]passes.Pass, error) {
	if tb, ok := o.Tables[t.Name()]; ok {
		return tb, targets.CheckTable(t, tb)
	}
	table, _, err := targets.PassTable(t, nil)
	return table, err
}

// targetOptions are the per-build settings the targets read.
func (o Options) targetOptions() targets.Options {
	return targets.Options{Triple: o.Triple, CPULevels: o.CPULevels}
}

// Ran lists the names of the passes of table that a run with po executes,
// in order: every pass except the optional ones po skips.
func Ran(table []passes.Pass, po passes.Options) []string {
	var names []string
	for _, p := range table {
		if po.Skip[p.Name] && !p.Required {
			continue
		}
		names = append(names, p.Name)
	}
	return names
}

// Artifact is one generated file.
type Artifact = targets.Artifact

// Output is what a build produced, in a fixed order.
type Output struct {
	Artifacts []Artifact
	Manifest  *registry.Manifest
	Variants  []*ir.Variant
	// Compiled holds every variant scheduled for every target, by variant
	// name and then target name.
	Compiled map[string]map[string]*Compiled
	// Final holds the modules after every pass, by target and then
	// variant name: what the artifacts and the manifest were made from.
	Final map[string]map[string]*ir.Module
}

// Compiled is one variant scheduled for one target.
type Compiled struct {
	V      *ir.Variant
	Target targets.Target
	Table  []passes.Pass // the passes that ran, in order
	// Lowered is the target-neutral module lowering built (with the
	// target's tiling); Final is the module after assembly and every pass.
	Lowered, Final *ir.Module
}

// Select says what serves a call of shape s on this target.
func (c *Compiled) Select(s registry.Shape) (registry.Selection, error) {
	return c.Target.Select(c.V, c.Final, s)
}

// ParseSpecs reads every spec file and returns its variants in order,
// rejecting variant names that repeat across files, also when they differ
// only in case (they become upper-case macros and include guards, and file
// names on case-insensitive file systems).
func ParseSpecs(paths []string) ([]*ir.Variant, error) {
	var all []*ir.Variant
	seen := map[string]*ir.Variant{}
	for _, p := range paths {
		vs, err := frontend.ParseFile(p)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			key := strings.ToLower(v.Name)
			if first, ok := seen[key]; ok && first.Name == v.Name {
				return nil, ir.Errorf(v.Pos, "variant %s already defined at %s", v.Name, first.Pos)
			} else if ok {
				return nil, ir.Errorf(v.Pos, "variant %s collides with %s (defined at %s): names must differ in more than case, since they name C macros and include guards", v.Name, first.Name, first.Pos)
			}
			seen[key] = v
			all = append(all, v)
		}
	}
	return all, nil
}

// Compile lowers v with target t's tiling, assembles its entries and runs
// its pass table (opt.Tables may override it), bound to the build's
// options when t is a targets.Binder (the CPU: the machine of the triple). A pass that changes the
// parameters of a kernel or an entry is an error: they are the ABI.
func Compile(v *ir.Variant, t targets.Target, opt Options) (*Compiled, error) {
	table, err := opt.table(t)
	if err != nil {
		return nil, err
	}
	if b, ok := t.(targets.Binder); ok {
		bound, err := b.Bind(table, opt.targetOptions())
		if err != nil {
			return nil, fmt.Errorf("%s: %s (%s): %w", v.Pos, v.Name, t.Name(), err)
		}
		table = bound
	}
	m, err := lower.Lower(v, t.Tiling(v))
	if err != nil {
		return nil, err
	}
	a, err := t.Assemble(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %s (%s): %w", v.Pos, v.Name, t.Name(), err)
	}
	po := opt.Passes
	po.Target = t.Name()
	final, err := passes.RunTable(table, a, po)
	if err != nil {
		return nil, fmt.Errorf("%s: %s (%s): %w", v.Pos, v.Name, t.Name(), err)
	}
	if err := passes.CheckModule(final); err != nil {
		return nil, fmt.Errorf("%s: %s (%s): after the passes: %w", v.Pos, v.Name, t.Name(), err)
	}
	// A pass that changed an ABI is named for that before the verifier
	// reports what follows from it (an entry's call that no longer fits).
	if err := sameABI(a, final); err != nil {
		return nil, fmt.Errorf("%s: %s (%s): %w", v.Pos, v.Name, t.Name(), err)
	}
	// Both targets print only verified IR: a name no declaration defines
	// fails here on CUDA as it fails in the CPU emitter.
	if err := ir.Verify(final); err != nil {
		return nil, fmt.Errorf("%s: %s (%s): the kernel IR after the passes is invalid (VerifyEach names the pass that broke it): %w", v.Pos, v.Name, t.Name(), err)
	}
	return &Compiled{V: v, Target: t, Table: table, Lowered: m, Final: final}, nil
}

// CompileFor is Compile for a target named by name.
func CompileFor(v *ir.Variant, name string, opt Options) (*Compiled, error) {
	t, err := targets.Lookup(name)
	if err != nil {
		return nil, err
	}
	return Compile(v, t, opt)
}

// sameABI checks that the passes kept the ABI of the assembled module:
// the same plans (role, entry symbol, parameters), so that the header and
// the manifest describe the entries the assembly made; every entry kernel
// (or, for an entry printed from its plan, every kernel it launches) still
// defined, so that the .ll or .cu defines what they describe; and the parameters of every kernel kept.
func sameABI(before, after *ir.Module) error {
	if len(before.Plans) != len(after.Plans) {
		return fmt.Errorf("the passes changed the entries (%d plans -> %d); passes must keep the entries", len(before.Plans), len(after.Plans))
	}
	for i, p := range after.Plans {
		old := before.Plans[i]
		if p.Role != old.Role || p.Entry != old.Entry || p.Public != old.Public || !sameParams(old.Params, p.Params) {
			return fmt.Errorf("entry %s: the passes changed it (%s %s%s -> %s %s%s); passes must keep the entries",
				old.Entry, old.Role, old.Entry, paramNames(old.Params), p.Role, p.Entry, paramNames(p.Params))
		}
		if before.Kernel(p.Entry) != nil {
			// The entry is a kernel (cpu): it must stay, and what it
			// runs are its calls, which ir.Verify resolves.
			if after.Kernel(p.Entry) == nil {
				return fmt.Errorf("entry %s: the passes removed its kernel; the header and manifest declare it", p.Entry)
			}
			continue
		}
		// The entry is printed from the plan (cuda's host launcher): the
		// kernels it launches must stay. A plan that is not public gets
		// no launcher (a role only another entry hands over to), so its
		// kernels may go.
		if !p.Public {
			continue
		}
		for _, l := range ir.PlanLaunches(p) {
			if after.Kernel(l.Kernel) == nil {
				return fmt.Errorf("entry %s launches kernel %s, which the passes removed", p.Entry, l.Kernel)
			}
		}
	}
	for _, k := range after.Kernels {
		old := before.Kernel(k.Name)
		if old == nil {
			continue
		}
		if !sameParams(old.Params, k.Params) {
			return fmt.Errorf("kernel %s: the passes changed its parameters (%s -> %s); passes must keep a kernel's ABI",
				k.Name, paramNames(old.Params), paramNames(k.Params))
		}
	}
	return nil
}

// sameParams reports whether two parameter lists are the same ABI.
func sameParams(x, y []*ir.Param) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		a, b := x[i], y[i]
		if a == nil || b == nil || a.Name != b.Name || a.Buffer != b.Buffer || a.Elem != b.Elem || a.Output != b.Output || a.Null != b.Null {
			return false
		}
	}
	return true
}

func paramNames(ps []*ir.Param) string {
	var names []string
	for _, p := range ps {
		if p == nil {
			names = append(names, "<nil>")
			continue
		}
		names = append(names, p.Name)
	}
	return "(" + strings.Join(names, ", ") + ")"
}

// Build compiles the variants (at least one) for the targets and returns
// the artifacts.
// The artifacts and the manifest are made from the modules after every
// pass of each target's table.
func Build(vs []*ir.Variant, opt Options) (*Output, error) {
	if len(vs) == 0 {
		return nil, fmt.Errorf("no variant to build: a spec needs at least one variant NAME { ... }")
	}
	names := opt.Targets
	if len(names) == 0 {
		names = []string{targets.Default}
	}
	var ts []targets.Target
	for _, n := range names {
		t, err := targets.Lookup(n)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	topt := opt.targetOptions()
	if err := targets.CheckOptions(ts, topt); err != nil {
		return nil, err
	}
	man := &registry.Manifest{ABI: registry.ABI, LSEBase: registry.BuildLSEBase(vs), Targets: map[string]registry.TargetManifest{}}
	for _, t := range ts {
		sec, err := t.Section(topt)
		if err != nil {
			return nil, err
		}
		table, err := opt.table(t)
		if err != nil {
			return nil, err
		}
		sec.Passes = Ran(table, opt.Passes)
		man.Targets[t.Name()] = sec
	}
	out := &Output{Manifest: man, Variants: vs, Compiled: map[string]map[string]*Compiled{}, Final: map[string]map[string]*ir.Module{}}
	for _, v := range vs {
		if err := lower.Unsupported(v); err != nil {
			return nil, err
		}
		out.Compiled[v.Name] = map[string]*Compiled{}
		var runtime, entries []string
		var first *Compiled
		for _, t := range ts {
			c, err := Compile(v, t, opt)
			if err != nil {
				return nil, err
			}
			out.Compiled[v.Name][t.Name()] = c
			if out.Final[t.Name()] == nil {
				out.Final[t.Name()] = map[string]*ir.Module{}
			}
			out.Final[t.Name()][v.Name] = c.Final
			if first == nil {
				first = c
			}
			files, err := t.Emit(v, c.Final, topt)
			if err != nil {
				return nil, err
			}
			out.Artifacts = append(out.Artifacts, files...)
			out.Manifest.Kernels = append(out.Manifest.Kernels, t.Manifest(v, c.Final, topt)...)
			runtime = append(runtime, t.Runtime(c.Final))
			entries = append(entries, t.Header(v, c.Final))
		}
		out.Manifest.Variants = append(out.Manifest.Variants, registry.VariantEntry(v, first.Final))
		out.Artifacts = append(out.Artifacts, Artifact{Name: v.Name + ".h", Data: []byte(Header(v, first.Final, append(runtime, entries...)))})
	}
	mj, err := out.Manifest.Marshal()
	if err != nil {
		return nil, err
	}
	out.Artifacts = append(out.Artifacts, Artifact{Name: "manifest.json", Data: mj})
	sort.SliceStable(out.Artifacts, func(i, j int) bool { return out.Artifacts[i].Name < out.Artifacts[j].Name })
	return out, nil
}

// Write stores the artifacts in dir as one set (WriteArtifacts).
func (o *Output) Write(dir string, log io.Writer) error {
	return WriteArtifacts(dir, o.Artifacts, log)
}
