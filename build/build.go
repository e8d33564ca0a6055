package build

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/target"

	// The registered targets: one line each.
	_ "github.com/attnc/attnc/target/cpu"
	_ "github.com/attnc/attnc/target/cuda"
)

// Options configures Build.
type Options struct {
	Targets []string // default: cpu
	Passes  passes.Options
	Target  target.Options
	// Insert adds passes to every target's table that has the named pass.
	Insert []passes.Insertion
}

// Artifact is one generated file.
type Artifact = target.Artifact

// Output is what a build produced, in a fixed order.
type Output struct {
	Artifacts []Artifact
	Manifest  *registry.Manifest
	Variants  []*ir.Variant
	// Compiled holds every variant's scheduled module per target:
	// Compiled[variant][target].
	Compiled map[string]map[string]*Compiled
}

// Compiled is one variant scheduled for one target.
type Compiled struct {
	V      *ir.Variant
	Target target.Target
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
// rejecting duplicate variant names across files.
func ParseSpecs(paths []string) ([]*ir.Variant, error) {
	var all []*ir.Variant
	seen := map[string]ir.Pos{}
	for _, p := range paths {
		vs, err := frontend.ParseFile(p)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			if first, ok := seen[v.Name]; ok {
				return nil, ir.Errorf(v.Pos, "variant %s already defined at %s", v.Name, first)
			}
			seen[v.Name] = v.Pos
			all = append(all, v)
		}
	}
	return all, nil
}

// Table is target t's pass table with the insertions applied.
func Table(t target.Target, ins []passes.Insertion) ([]passes.Pass, error) {
	return passes.Insert(t.Passes(), ins)
}

// Compile lowers v with target t's tiling, assembles its entries and runs
// its pass table.
func Compile(v *ir.Variant, t target.Target, opt Options) (*Compiled, error) {
	table, err := Table(t, opt.Insert)
	if err != nil {
		return nil, err
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
	return &Compiled{V: v, Target: t, Table: table, Lowered: m, Final: final}, nil
}

// CompileFor is Compile for a target named by name.
func CompileFor(v *ir.Variant, name string, opt Options) (*Compiled, error) {
	t, err := target.Lookup(name)
	if err != nil {
		return nil, err
	}
	return Compile(v, t, opt)
}

// Build compiles the variants for the targets and returns the artifacts.
func Build(vs []*ir.Variant, opt Options) (*Output, error) {
	names := opt.Targets
	if len(names) == 0 {
		names = []string{"cpu"}
	}
	var ts []target.Target
	for _, n := range names {
		t, err := target.Lookup(n)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	out := &Output{Manifest: &registry.Manifest{ABI: registry.ABI, LSEBase: "e"}, Variants: vs,
		Compiled: map[string]map[string]*Compiled{}}
	for _, v := range vs {
		if err := lower.Unsupported(v); err != nil {
			return nil, err
		}
		out.Compiled[v.Name] = map[string]*Compiled{}
		var header []string
		var first *Compiled
		for _, t := range ts {
			c, err := Compile(v, t, opt)
			if err != nil {
				return nil, err
			}
			out.Compiled[v.Name][t.Name()] = c
			if first == nil {
				first = c
			}
			files, err := t.Emit(v, c.Final, opt.Target)
			if err != nil {
				return nil, err
			}
			out.Artifacts = append(out.Artifacts, files...)
			ks := t.Manifest(v, c.Final, opt.Target)
			var ran []string
			for _, p := range c.Table {
				ran = append(ran, p.Name)
			}
			for i := range ks {
				ks[i].Passes = ran
			}
			out.Manifest.Kernels = append(out.Manifest.Kernels, ks...)
			header = append(header, t.Header(v, c.Final))
		}
		out.Manifest.Variants = append(out.Manifest.Variants, registry.VariantEntry(v, first.Final))
		out.Artifacts = append(out.Artifacts, Artifact{Name: v.Name + ".h", Data: []byte(Header(v, first.Final, header))})
	}
	mj, err := out.Manifest.Marshal()
	if err != nil {
		return nil, err
	}
	out.Artifacts = append(out.Artifacts, Artifact{Name: "manifest.json", Data: mj})
	sort.SliceStable(out.Artifacts, func(i, j int) bool { return out.Artifacts[i].Name < out.Artifacts[j].Name })
	return out, nil
}

// Write stores the artifacts in dir.
func (o *Output) Write(dir string, log io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, a := range o.Artifacts {
		p := filepath.Join(dir, a.Name)
		if err := os.WriteFile(p, a.Data, 0o644); err != nil {
			return err
		}
		if log != nil {
			fmt.Fprintf(log, "wrote %s\n", p)
		}
	}
	return nil
}
