// Package host is the host side the GPU targets share: a GPU target prints
// host launchers from the plans (codegen/cstyle), so its module keeps only
// the kernels a public plan launches (Assemble); the header declares the
// launchers, the manifest lists them with their plans and then the device
// kernels with their launch settings, and Select evaluates the plans as a
// launcher does, with its worker count and grids. A Target value holds
// what differs between GPU targets (name, file, stream type, the grid of a
// grid-stride launch, the launch bounds a target states).
//
// host imports ir, registry, targets and codegen/cstyle (the kernels'
// block size and shared memory, what a launcher can evaluate); it must not
// import a target package, lower's users above targets, or driver.
package host

import (
	"fmt"
	"strings"

	"github.com/attnc/attnc/codegen/cstyle"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets"
)

// Target is one GPU target's host side.
type Target struct {
	Name     string // "cuda": the manifest's and Select's target
	Language string // "CUDA": the header's comments
	Ext      string // ".cu"
	// Stream is the C type the header names for the stream argument
	// ("cudaStream_t"); the launcher takes it as void *.
	Stream string
	// Units is what the GPU's parallel units are called in the manifest's
	// rules ("SMs", "CUs"); DefaultUnits is how many Select assumes when the
	// shape gives none.
	Units        string
	DefaultUnits int
	// ThreadsPerUnit is the worker count of the split rule per unit (the
	// launcher's ir.PlanThreads is ThreadsPerUnit x units).
	ThreadsPerUnit int
	// GridStrideBlocks is the grid per unit of a launch whose item count
	// depends on device memory: the kernel strides its items over it.
	GridStrideBlocks int
	// BlockThreads is the block size of every work kernel.
	BlockThreads int
	// Bounds fills a kernel's launch bounds and the occupancy they
	// guarantee; nil states none.
	Bounds func(k *ir.Kernel, lm *registry.LaunchManifest)
}

// Launcher is the host launcher symbol of a plan's entry.
func Launcher(p *ir.Plan) string { return p.Entry + "_launch" }

// Assemble keeps the kernels a public plan launches (a GPU prefill never
// hands over to decode: the launcher cannot read the query lengths).
func Assemble(m *ir.Module) (*ir.Module, error) {
	used := map[string]bool{}
	for _, p := range m.Plans {
		if !p.Public {
			continue
		}
		for _, l := range p.Direct {
			used[l.Kernel] = true
		}
		if s := p.Split; s != nil {
			for _, l := range s.Launches {
				used[l.Kernel] = true
			}
		}
	}
	out := *m
	out.Kernels = nil
	for _, k := range m.Kernels {
		if used[k.Name] {
			out.Kernels = append(out.Kernels, k)
		}
	}
	return &out, nil
}

// Printer is what codegen/cstyle needs to write t's launchers: the worker
// count and the grid-stride grid as C expressions over num_sms, the
// prelude's unit count (attnc_num_sms()).
func (t *Target) Printer(minBlocks func(*ir.Kernel) int) cstyle.Host {
	return cstyle.Host{
		Launcher:        Launcher,
		Threads:         fmt.Sprintf("%d * attnc_num_sms()", t.ThreadsPerUnit),
		GridStrideGrid:  fmt.Sprintf("%d * attnc_num_sms()", t.GridStrideBlocks),
		ThreadsPerBlock: t.BlockThreads,
		MinBlocks:       minBlocks,
	}
}

// Header declares the public launchers.
func (t *Target) Header(v *ir.Variant, m *ir.Module) string {
	var sb strings.Builder
	for _, p := range m.Plans {
		if p.Public {
			fmt.Fprintf(&sb, "\n/* %s on %s (device pointers; stream is a %s). */\nint32_t %s(%s);\n",
				p.Role, t.Language, t.Stream, Launcher(p), targets.CParams(p.Params, "void *stream"))
		}
	}
	return sb.String()
}

// launchOf renders a plan launch with its grid rule, block and shared
// memory (from the scheduled kernel).
func (t *Target) launchOf(m *ir.Module, p *ir.Plan) func(ir.Launch) registry.LaunchManifest {
	return func(l ir.Launch) registry.LaunchManifest {
		lm := registry.LaunchManifest{Kernel: l.Kernel, Items: ir.ExprString(l.Items), Grid: "items", Block: t.BlockThreads}
		if !cstyle.HostKnown(p, l.Items) {
			lm.Grid = fmt.Sprintf("%d * %s (grid-stride: the item count depends on device memory)", t.GridStrideBlocks, t.Units)
		}
		if k := m.Kernel(l.Kernel); k != nil {
			lm.Smem = cstyle.SharedBytes(k)
			if t.Bounds != nil {
				t.Bounds(k, &lm)
			}
		}
		return lm
	}
}

// Manifest lists the launchers with their plans, then the device kernels
// with their launch settings.
func (t *Target) Manifest(v *ir.Variant, m *ir.Module) []registry.KernelManifest {
	var out []registry.KernelManifest
	file := v.Name + t.Ext
	for _, p := range m.Plans {
		if !p.Public {
			continue
		}
		args := append(registry.ArgsOf(p.Params), registry.Arg{Name: "stream", Kind: "scalar", DType: t.Stream})
		out = append(out, registry.KernelManifest{Variant: v.Name, Role: string(p.Role), Symbol: Launcher(p), Entry: true,
			Target: t.Name, File: file, Args: args, Returns: "i32 status", Constraints: registry.Constraints(v),
			Plan: registry.PlanOf(p, registry.PlanOptions{Threads: fmt.Sprintf("%d * %s", t.ThreadsPerUnit, t.Units),
				Launch: t.launchOf(m, p)})})
	}
	for _, k := range m.Kernels {
		lm := &registry.LaunchManifest{Block: cstyle.BlockSize(k), Smem: cstyle.SharedBytes(k)}
		if t.Bounds != nil {
			t.Bounds(k, lm)
		}
		out = append(out, registry.KernelManifest{Variant: v.Name, Role: string(k.Role), Symbol: k.Name,
			Target: t.Name, File: file, Args: registry.ArgsOf(k.Params), Returns: "void (__global__)",
			Constraints: registry.Constraints(v), Launch: lm})
	}
	return out
}

// Select says what the launcher does for a call of that shape: the plan
// evaluated as the host evaluates it (ThreadsPerUnit x units workers, no
// sequence lengths), with each launch's grid, block and shared memory.
func (t *Target) Select(v *ir.Variant, m *ir.Module, s registry.Shape) (registry.Selection, error) {
	units := s.SMs
	if units < 1 {
		units = t.DefaultUnits
	}
	sel, err := registry.Select(v, m, s, registry.Host{Target: t.Name, Threads: t.ThreadsPerUnit * units, Lengths: false,
		Launch: func(l *registry.LaunchSelection) {
			l.Grid = l.Items
			if !l.Known {
				l.Grid = t.GridStrideBlocks * units
			}
			if k := m.Kernel(l.Kernel); k != nil {
				l.Block, l.Smem = cstyle.BlockSize(k), cstyle.SharedBytes(k)
			}
		}})
	if p := m.Plan(sel.Role); err == nil && p != nil {
		sel.Symbol = Launcher(p) // the host entry point a caller calls
	}
	return sel, err
}

// HasTileLoop reports whether k walks KV tiles (an attention kernel, which
// the targets bound differently from the light ones).
func HasTileLoop(k *ir.Kernel) bool {
	found := false
	ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok && f.Tag == ir.TagKVTile {
			found = true
		}
		return []ir.Stmt{s}
	})
	return found
}

// Entries are the host launchers of m's public plans as a harness calls
// them: each with a trailing stream; they check their scalars on the host
// and trust the tables in device memory.
func Entries(m *ir.Module) []targets.Entry {
	var es []targets.Entry
	for _, p := range m.Plans {
		if p.Public {
			es = append(es, targets.Entry{Role: p.Role, Symbol: Launcher(p), Params: p.Params, Stream: true})
		}
	}
	return es
}

// Launches gathers, by symbol, the launch settings the manifest states for
// v's device kernels of target t (its entries excluded): what a
// machine-code check compares the assembled kernels with. A kernel
// without a launch block is an error, prefixed by cmd.
func Launches(cmd string, v *ir.Variant, kernels []registry.KernelManifest, t string) (map[string]*registry.KernelManifest, error) {
	out := map[string]*registry.KernelManifest{}
	for i, k := range kernels {
		if k.Variant != v.Name || k.Target != t || k.Entry {
			continue
		}
		if k.Launch == nil || k.Launch.Block <= 0 {
			return nil, fmt.Errorf("%s: manifest kernel %s has no launch block/smem", cmd, k.Symbol)
		}
		out[k.Symbol] = &kernels[i]
	}
	return out, nil
}
