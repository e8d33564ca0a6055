package cpu

import (
	"fmt"
	"slices"

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
	floor := floorLevel(m, ra.Levels)
	rt := &runtimeEmitter{arch: ra, absent: absentLevels(a.Levels, ra.Levels, floor), floor: floor,
		vendorBelow: vendorFallbacks(a.Levels, ra.Levels), daz: callsRoutine(m, "rt.fp_daz")}
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
// with the index in module of the level fallsTo picks for it among the
// module's levels below it from floor up (a build restricted to some
// levels refuses the levels below floor; -1 when none is left).
func absentLevels(all, module []Level, floor int) []absentLevel {
	var out []absentLevel
	next := 0
	var below []int // indexes in all of module's levels from floor up, so far
	for i, l := range all {
		if next < len(module) && module[next].Name == l.Name {
			if next >= floor {
				below = append(below, i)
			}
			next++
			continue
		}
		pick := -1
		if len(below) > 0 {
			pick = floor + slices.Index(below, fallsTo(all, below, i))
		}
		out = append(out, absentLevel{name: l.Name, below: pick})
	}
	return out
}

// vendorFallbacks maps the index in module of each level with a Vendor to
// the index of the level detection takes instead on another vendor's CPU:
// the module's level right before it, when that is the level right before
// it in all too (the one the Vendor rule was measured against). A level
// without such a neighbour in module (a build restricted to it) runs on
// every CPU that has its bits.
func vendorFallbacks(all, module []Level) map[int]int {
	out := map[int]int{}
	for i, l := range module {
		if l.Vendor == "" || i == 0 {
			continue
		}
		j := slices.IndexFunc(all, func(a Level) bool { return a.Name == l.Name })
		if j > 0 && all[j-1].Name == module[i-1].Name && all[j-1].Vendor == "" {
			out[i] = i - 1
		}
	}
	return out
}
