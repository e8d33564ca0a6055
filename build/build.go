package build

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/attnc/attnc/codegen/cuda"
	llvmgen "github.com/attnc/attnc/codegen/llvm"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/registry"
)

// Targets are the code generators Build knows.
var Targets = []string{"cpu", "cuda"}

// PassTable returns a copy of target's pass table: the passes its lowered
// modules go through, in order. Today cpu and cuda share passes.Table.
// Callers may extend the copy (passes.Insert) without changing the table
// for anyone else.
func PassTable(target string) ([]passes.Pass, error) {
	if !contains(Targets, target) {
		return nil, fmt.Errorf("unknown target %q (known: %s)", target, strings.Join(Targets, ", "))
	}
	return append([]passes.Pass(nil), passes.Table...), nil
}

// mustPassTable is PassTable of a known target.
func mustPassTable(target string) []passes.Pass {
	t, err := PassTable(target)
	if err != nil {
		panic(err)
	}
	return t
}

// Options configures Build.
type Options struct {
	Targets []string // default: cpu
	// Triple is the cpu target's triple (default x86_64-unknown-linux-gnu;
	// llvmgen.Targets lists the known ones).
	Triple string
	Passes passes.Options
	// Tables overrides a target's pass table (default: PassTable(target)).
	Tables map[string][]passes.Pass
}

// table is the pass table Build runs for target.
func (o Options) table(target string) ([]passes.Pass, error) {
	if t, ok := o.Tables[target]; ok {
		return t, nil
	}
	return PassTable(target)
}

// pipelineOptions are o.Passes for one table: a --print-after pass that
// only another target's table has prints nothing here.
func (o Options) pipelineOptions(table []passes.Pass) passes.Options {
	po := o.Passes
	if po.PrintAfter != "" && po.PrintAfter != "all" && passes.Find(table, po.PrintAfter) == nil {
		po.PrintAfter = ""
	}
	return po
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
type Artifact struct {
	Name string
	Data []byte
}

// Output is what a build produced, in a fixed order.
type Output struct {
	Artifacts []Artifact
	Manifest  *registry.Manifest
	Variants  []*ir.Variant
	Lowered   map[string]*ir.Module // by variant name, before passes
	// Final holds the modules after every pass, by target and then
	// variant name: what the artifacts and the manifest were made from.
	Final map[string]map[string]*ir.Module
}

// Variant is one compiled variant.
type Variant struct {
	V       *ir.Variant
	Lowered *ir.Module // before passes: the manifest's argument dtypes
	Final   *ir.Module // after the pipeline
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

// Compile lowers v and runs the cpu pass table.
func Compile(v *ir.Variant, po passes.Options) (*Variant, error) {
	return CompileWith(v, mustPassTable("cpu"), po)
}

// CompileWith lowers v and runs the given pass table.
func CompileWith(v *ir.Variant, table []passes.Pass, po passes.Options) (*Variant, error) {
	m, err := lower.Lower(v)
	if err != nil {
		return nil, err
	}
	final, err := passes.RunTable(table, m, po)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", v.Pos, v.Name, err)
	}
	return &Variant{V: v, Lowered: m, Final: final}, nil
}

// CompileGPU lowers v with the CUDA schedule and runs the cuda pass table
// over its device kernels.
func CompileGPU(v *ir.Variant, po passes.Options) (*lower.GPUModule, error) {
	return CompileGPUWith(v, mustPassTable("cuda"), po)
}

// CompileGPUWith lowers v with the CUDA schedule and runs the given pass
// table over its device kernels.
func CompileGPUWith(v *ir.Variant, table []passes.Pass, po passes.Options) (*lower.GPUModule, error) {
	gm, err := lower.LowerGPU(v)
	if err != nil {
		return nil, err
	}
	final, err := passes.RunTable(table, gm.Module, po)
	if err != nil {
		return nil, fmt.Errorf("%s: %s (cuda): %w", v.Pos, v.Name, err)
	}
	return &lower.GPUModule{Module: final, Launchers: gm.Launchers, Lowered: gm.Module}, nil
}

// kernelArgs are the manifest arguments of the final kernel k: its
// parameters with the storage dtypes of the lowered kernel of the same name
// (legalization carries f16/bf16 as i16 bits). A pass that changes the
// parameters of a lowered kernel changes its ABI and is an error.
func kernelArgs(lowered *ir.Module, k *ir.Kernel) ([]registry.Arg, error) {
	lk := lowered.Kernel(k.Name)
	if lk == nil {
		return registry.ArgsOf(k.Params), nil
	}
	same := len(lk.Params) == len(k.Params)
	for i := 0; same && i < len(k.Params); i++ {
		a, b := lk.Params[i], k.Params[i]
		same = a.Name == b.Name && a.Buffer == b.Buffer && a.Output == b.Output && a.Null == b.Null
	}
	if !same {
		return nil, fmt.Errorf("kernel %s: the passes changed its parameters (%s -> %s); passes must keep a kernel's ABI",
			k.Name, paramNames(lk.Params), paramNames(k.Params))
	}
	return registry.ArgsOf(lk.Params), nil
}

func paramNames(ps []*ir.Param) string {
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	return "(" + strings.Join(names, ", ") + ")"
}

// cpuManifest lists a variant's CPU kernels, from the module after every
// pass.
func cpuManifest(v *ir.Variant, cv *Variant) ([]registry.KernelManifest, error) {
	var out []registry.KernelManifest
	for _, k := range cv.Final.Kernels {
		args, err := kernelArgs(cv.Lowered, k)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", v.Pos, v.Name, err)
		}
		out = append(out, registry.KernelManifest{
			Variant: v.Name, Role: string(k.Role), Symbol: k.Name, Entry: k.Entry, Target: "cpu",
			File: v.Name + ".ll", Args: args, Returns: "i32 status",
			Constraints: registry.Constraints(v),
		})
	}
	return out, nil
}

// cudaManifest lists a variant's CUDA launchers (entries) and device
// kernels (after every pass) with their launch rules.
func cudaManifest(v *ir.Variant, gm *lower.GPUModule) ([]registry.KernelManifest, error) {
	var out []registry.KernelManifest
	for _, l := range gm.Launchers {
		args := registry.ArgsOf(l.Params)
		args = append(args, registry.Arg{Name: "stream", Kind: "scalar", DType: "cudaStream_t"})
		var steps []map[string]any
		for _, ln := range l.Direct {
			steps = append(steps, map[string]any{"kernel": ln.Kernel, "grid": ln.Grid, "block": ln.Block, "smem": ln.Smem})
		}
		launch := map[string]any{"direct": steps}
		if len(l.Split) > 0 {
			var split []map[string]any
			for _, ln := range l.Split {
				split = append(split, map[string]any{"kernel": ln.Kernel, "grid": ln.Grid, "block": ln.Block, "smem": ln.Smem})
			}
			launch["split"] = split
			launch["splits"] = "plan_splits(items = " + l.Direct[0].Grid + ", threads = 2 * SMs, max_tiles = 1 << 20); > 1 -> split launches with f32 scratch"
		}
		out = append(out, registry.KernelManifest{Variant: v.Name, Role: string(l.Role), Symbol: l.Name, Entry: true,
			Target: "cuda", File: v.Name + ".cu", Args: args, Returns: "i32 status", Constraints: registry.Constraints(v), Launch: launch})
	}
	for _, k := range gm.Module.Kernels {
		args, err := kernelArgs(gm.Lowered, k) // storage dtypes, not the legalized i16
		if err != nil {
			return nil, fmt.Errorf("%s: %s (cuda): %w", v.Pos, v.Name, err)
		}
		out = append(out, registry.KernelManifest{Variant: v.Name, Role: string(k.Role), Symbol: k.Name, Entry: false,
			Target: "cuda", File: v.Name + ".cu", Args: args, Returns: "void (__global__)",
			Constraints: registry.Constraints(v),
			Launch:      map[string]any{"block": cuda.BlockSize(k), "smem": cuda.SharedBytes(k)}})
	}
	return out, nil
}

// Build compiles the variants for the targets and returns the artifacts.
// The artifacts and the manifest are made from the modules after every
// pass of each target's table.
func Build(vs []*ir.Variant, opt Options) (*Output, error) {
	targets := opt.Targets
	if len(targets) == 0 {
		targets = []string{"cpu"}
	}
	tables := map[string][]passes.Pass{}
	man := &registry.Manifest{ABI: registry.ABI, LSEBase: "e", Targets: map[string]registry.TargetManifest{}}
	for _, t := range append([]string{"cpu"}, targets...) {
		if !contains(Targets, t) {
			return nil, fmt.Errorf("unknown target %q (known: %s)", t, strings.Join(Targets, ", "))
		}
		table, err := opt.table(t)
		if err != nil {
			return nil, err
		}
		tables[t] = table
	}
	cpuTarget, err := llvmgen.LookupTarget(opt.Triple)
	if err != nil {
		return nil, err
	}
	if opt.Triple != "" && !contains(targets, "cpu") {
		return nil, fmt.Errorf("triple %s applies to the cpu target, which is not among the targets (%s)", opt.Triple, strings.Join(targets, ", "))
	}
	for _, t := range targets {
		tm := registry.TargetManifest{Passes: Ran(tables[t], opt.Passes)}
		if t == "cpu" {
			tm.Triple = cpuTarget.Triple
		}
		man.Targets[t] = tm
	}
	out := &Output{Manifest: man, Variants: vs, Lowered: map[string]*ir.Module{}, Final: map[string]map[string]*ir.Module{}}
	final := func(target, variant string, m *ir.Module) {
		if out.Final[target] == nil {
			out.Final[target] = map[string]*ir.Module{}
		}
		out.Final[target][variant] = m
	}
	for _, v := range vs {
		// The cpu pipeline always runs: the header and the variant's
		// manifest entry come from it.
		cv, err := CompileWith(v, tables["cpu"], opt.pipelineOptions(tables["cpu"]))
		if err != nil {
			return nil, err
		}
		out.Lowered[v.Name] = cv.Lowered
		out.Manifest.Variants = append(out.Manifest.Variants, registry.VariantEntry(v, cv.Final))
		var launchers []ir.Launcher
		for _, t := range targets {
			switch t {
			case "cpu":
				ll, err := llvmgen.EmitFor(cv.Final, cpuTarget)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: llvm: %w", v.Pos, v.Name, err)
				}
				out.Artifacts = append(out.Artifacts, Artifact{Name: v.Name + ".ll", Data: []byte(ll)})
				ks, err := cpuManifest(v, cv)
				if err != nil {
					return nil, err
				}
				out.Manifest.Kernels = append(out.Manifest.Kernels, ks...)
				final(t, v.Name, cv.Final)
			case "cuda":
				gm, err := CompileGPUWith(v, tables["cuda"], opt.pipelineOptions(tables["cuda"]))
				if err != nil {
					return nil, err
				}
				cu, err := cuda.Emit(gm.Module, gm.Launchers)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %w", v.Pos, v.Name, err)
				}
				out.Artifacts = append(out.Artifacts, Artifact{Name: v.Name + ".cu", Data: []byte(cu)})
				ks, err := cudaManifest(v, gm)
				if err != nil {
					return nil, err
				}
				out.Manifest.Kernels = append(out.Manifest.Kernels, ks...)
				launchers = gm.Launchers
				final(t, v.Name, gm.Module)
			}
		}
		out.Artifacts = append(out.Artifacts, Artifact{Name: v.Name + ".h", Data: []byte(Header(v, cv.Lowered, launchers))})
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

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
