package cpu

import (
	"path/filepath"
	"runtime"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/targets"
)

// The CPU target's optional hooks (package targets): the triple option and
// its levels, the worker threads of a call, and the harness that links the
// .ll into a library of this machine or of a foreign triple's emulator.

// Triples implements targets.Triples: the architectures' triples, the default
// first.
func (Target) Triples() []string {
	var ts []string
	for _, t := range Arches {
		ts = append(ts, t.Triple)
	}
	return ts
}

// CheckTriple implements targets.Triples.
func (Target) CheckTriple(triple string) error {
	_, err := LookupArch(triple)
	return err
}

// Levels implements targets.Triples: the CPU levels of triple, baseline
// first.
func (Target) Levels(triple string) ([]string, error) {
	t, err := LookupArch(triple)
	if err != nil {
		return nil, err
	}
	return t.LevelNames(), nil
}

// CheckLevels implements targets.Triples: the levels of triple that
// levels names, baseline first, "host" resolved (Arch.ResolveLevels).
func (Target) CheckLevels(triple string, levels []string) ([]string, error) {
	mc, err := NewMachine(triple, levels...)
	if err != nil {
		return nil, err
	}
	if levels == nil {
		return nil, nil
	}
	return mc.Built(), nil
}

// Workers implements targets.WorkerCount: the worker threads of the pool,
// by default one per CPU of this machine.
func (Target) Workers() targets.Workers {
	return targets.Workers{Flag: "threads", Max: MaxThreads, Why: "the kernels use at most this many threads",
		Default: min(runtime.NumCPU(), MaxThreads)}
}

// HarnessTools implements targets.Harness: LLVM 14 and the C toolchain of
// the triple (with its emulator for a foreign one).
func (Target) HarnessTools(opt targets.Options) error {
	if _, err := LookupArch(opt.Triple); err != nil {
		return err
	}
	_, err := cpurt.ToolchainFor(canonicalTriple(opt.Triple))
	return err
}

// canonicalTriple is triple with "" replaced by the default.
func canonicalTriple(triple string) string {
	if triple == "" {
		return DefaultTriple
	}
	return triple
}

// HostLibrary implements targets.Harness: the .ll linked into a shared
// library with the triple's toolchain; a foreign triple's library runs in
// its emulator.
func (Target) HostLibrary(v *ir.Variant, m *ir.Module, dir string, opt targets.Options, link []string) (targets.HostLibrary, error) {
	triple := canonicalTriple(opt.Triple)
	if _, err := LookupArch(triple); err != nil {
		return targets.HostLibrary{}, err
	}
	tc, err := cpurt.ToolchainFor(triple)
	if err != nil {
		return targets.HostLibrary{}, err
	}
	so := filepath.Join(dir, v.Name+".so")
	tc.Link = link
	if err := tc.BuildShared(filepath.Join(dir, v.Name+".ll"), so); err != nil {
		return targets.HostLibrary{}, err
	}
	lib := targets.HostLibrary{Path: so}
	if tc.Foreign() {
		lib.Runner = triple
	}
	return lib, nil
}

// Entries implements targets.Harness: the entry kernels of the public
// plans.
func (Target) Entries(m *ir.Module) []targets.Entry {
	var es []targets.Entry
	for _, p := range m.Plans {
		if p.Public {
			es = append(es, targets.Entry{Role: p.Role, Symbol: p.Entry, Params: p.Params, ChecksTables: true})
		}
	}
	return es
}

// RuntimeSymbols implements targets.HostRuntime: what codegen/llvm's
// runtime defines in every .ll.
func (Target) RuntimeSymbols(prefix string) targets.RuntimeSymbols {
	return targets.RuntimeSymbols{Strerror: prefix + "_strerror", SetThreads: prefix + "_set_num_threads",
		Level: prefix + "_cpu_level", LevelEnv: LevelEnv}
}

// StackBytes implements targets.HostRuntime.
func (Target) StackBytes(m *ir.Module, kernel string) int64 { return StackBytes(m, kernel) }

var (
	_ targets.Triples     = Target{}
	_ targets.WorkerCount = Target{}
	_ targets.Harness     = Target{}
	_ targets.HostRuntime = Target{}
)
