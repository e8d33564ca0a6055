package cpu

import (
	"fmt"

	llvmgen "github.com/attnc/attnc/codegen/llvm"
	"github.com/attnc/attnc/ir"
)

// Emit prints the scheduled module m as LLVM 14 IR for the machine:
// codegen/llvm builds the kernels for its triple and data layout, each
// level's clone with that level's attributes, and this package's runtime
// (the thread pool, strerror, the CPU-level dispatch among the module's
// levels) around them.
func (mc *Machine) Emit(m *ir.Module) (string, error) {
	a := mc.Arch
	// The runtime knows the module's levels: a DotBF16 level only where
	// some kernel is cloned at it, and of a build restricted to some
	// levels only those it cloned at.
	ra := a
	ra.Levels = mc.moduleLevels(m)
	rt := &runtimeEmitter{arch: ra, absent: absentLevels(a.Levels, ra.Levels), floor: floorLevel(m, ra.Levels)}
	t := llvmgen.Target{Triple: a.Triple, DataLayout: a.DataLayout, Runtime: rt}
	if m != nil {
		for _, k := range m.Kernels {
			if k == nil || k.Level == "" {
				continue
			}
			l, err := mc.Level(k)
			if err != nil {
				return "", fmt.Errorf("llvm: %w", err)
			}
			if t.Attrs == nil {
				t.Attrs = map[string][]llvmgen.Attr{}
			}
			t.Attrs[k.Name] = l.attrs()
		}
	}
	return llvmgen.Emit(m, t)
}

// emitLL is the Emit of the machine of architecture a.
func emitLL(m *ir.Module, a Arch) (string, error) { return (&Machine{Arch: a}).Emit(m) }

// absentLevel is a level of the architecture that a module lacks, and the
// index among the module's levels of the best one below it.
type absentLevel struct {
	name  string
	below int
}

// absentLevels are the levels of all that module lacks, in order, each
// with the index in module of the last level before it in all.
func absentLevels(all, module []Level) []absentLevel {
	var out []absentLevel
	below := -1
	for _, l := range all {
		if below+1 < len(module) && module[below+1].Name == l.Name {
			below++
			continue
		}
		out = append(out, absentLevel{name: l.Name, below: below})
	}
	return out
}
