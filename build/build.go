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

// Options configures Build.
type Options struct {
	Targets []string // default: cpu
	Passes  passes.Options
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
}

// Variant is one compiled variant.
type Variant struct {
	V       *ir.Variant
	Lowered *ir.Module // before passes: the manifest's argument dtypes
	Final   *ir.Module // after the pipeline
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

// Compile lowers v and runs the pass pipeline.
func Compile(v *ir.Variant, po passes.Options) (*Variant, error) {
	m, err := lower.Lower(v)
	if err != nil {
		return nil, err
	}
	final, err := passes.Run(m, po)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", v.Pos, v.Name, err)
	}
	return &Variant{V: v, Lowered: m, Final: final}, nil
}

// CompileGPU lowers v with the CUDA schedule and runs the pass pipeline
// over its device kernels.
func CompileGPU(v *ir.Variant, po passes.Options) (*lower.GPUModule, error) {
	gm, err := lower.LowerGPU(v)
	if err != nil {
		return nil, err
	}
	final, err := passes.Run(gm.Module, po)
	if err != nil {
		return nil, fmt.Errorf("%s: %s (cuda): %w", v.Pos, v.Name, err)
	}
	return &lower.GPUModule{Module: final, Launchers: gm.Launchers, Lowered: gm.Module}, nil
}

// cudaManifest lists a variant's CUDA launchers (entries) and device
// kernels with their launch rules.
func cudaManifest(v *ir.Variant, gm *lower.GPUModule) []registry.KernelManifest {
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
	for _, k := range gm.Lowered.Kernels { // storage dtypes, not the legalized i16
		out = append(out, registry.KernelManifest{Variant: v.Name, Role: string(k.Role), Symbol: k.Name, Entry: false,
			Target: "cuda", File: v.Name + ".cu", Args: registry.ArgsOf(k.Params), Returns: "void (__global__)",
			Constraints: registry.Constraints(v),
			Launch:      map[string]any{"block": cuda.BlockSize(k), "smem": cuda.SharedBytes(k)}})
	}
	return out
}

// Build compiles the variants for the targets and returns the artifacts.
func Build(vs []*ir.Variant, opt Options) (*Output, error) {
	targets := opt.Targets
	if len(targets) == 0 {
		targets = []string{"cpu"}
	}
	for _, t := range targets {
		if !contains(Targets, t) {
			return nil, fmt.Errorf("unknown target %q (known: %s)", t, strings.Join(Targets, ", "))
		}
	}
	out := &Output{Manifest: &registry.Manifest{ABI: registry.ABI, LSEBase: "e"}, Variants: vs, Lowered: map[string]*ir.Module{}}
	for _, v := range vs {
		cv, err := Compile(v, opt.Passes)
		if err != nil {
			return nil, err
		}
		out.Lowered[v.Name] = cv.Lowered
		out.Manifest.Variants = append(out.Manifest.Variants, registry.VariantEntry(v, cv.Lowered))
		var launchers []ir.Launcher
		for _, t := range targets {
			switch t {
			case "cpu":
				ll, err := llvmgen.Emit(cv.Final)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: llvm: %w", v.Pos, v.Name, err)
				}
				out.Artifacts = append(out.Artifacts, Artifact{Name: v.Name + ".ll", Data: []byte(ll)})
				for _, k := range cv.Lowered.Kernels {
					out.Manifest.Kernels = append(out.Manifest.Kernels, registry.KernelManifest{
						Variant: v.Name, Role: string(k.Role), Symbol: k.Name, Entry: k.Entry, Target: "cpu",
						File: v.Name + ".ll", Args: registry.Args(k), Returns: "i32 status",
						Constraints: registry.Constraints(v), StackBytes: llvmgen.StackBytes(cv.Final, k.Name),
					})
				}
			case "cuda":
				gm, err := CompileGPU(v, opt.Passes)
				if err != nil {
					return nil, err
				}
				cu, err := cuda.Emit(gm.Module, gm.Launchers)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %w", v.Pos, v.Name, err)
				}
				out.Artifacts = append(out.Artifacts, Artifact{Name: v.Name + ".cu", Data: []byte(cu)})
				out.Manifest.Kernels = append(out.Manifest.Kernels, cudaManifest(v, gm)...)
				launchers = gm.Launchers
			}
		}
		out.Artifacts = append(out.Artifacts, Artifact{Name: v.Name + ".h", Data: []byte(Header(v, cv.Lowered, launchers, stackBytes(cv.Final)))})
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
