package cpu

import (
	"fmt"
	"slices"
	"strings"

	"github.com/attnc/attnc/ir"
)

// Multiversion clones every work kernel (a kernel whose items run on the
// thread pool: it holds a parallel loop) once per CPU level of the
// machine's architecture (x86-64, x86-64-v3, x86-64-v4; NEON on aarch64),
// and at a DotBF16 level (x86-64-v4-bf16) only the work kernels whose
// prefill Q·Kᵀ that level runs on bf16 pairs (hasBF16Product): the
// clone of level L is named <kernel><L.Suffix> and carries L as its Level,
// so codegen compiles it for L (target-cpu and target-features) and the
// schedule passes after this one specialise it (block-matmul fits its
// micro-kernels to L, native-widen uses L's half conversion). A kernel
// that calls work kernels (an entry) asks the runtime for the level at its
// start (rt.cpu_level: CPUID at the first call, or $ATTNC_CPU_LEVEL; the
// runtime numbers the module's levels, moduleLevels), returns CPU_LEVEL
// when the variable is refused, and calls the callee's clone of that
// level, or of the best level below it without a Vendor (fallsTo: a
// kernel without an x86-64-amx clone runs x86-64-v4 there, not
// x86-64-v4-bf16). A machine restricted to some levels (NewMachine's
// levels: attnc build --cpu-levels) clones each work kernel at the level
// fallsTo picks for each of them among those it can be cloned at (keep):
// the entries then refuse (CPU_LEVEL) a CPU below every kernel's lowest
// clone, and run the best clone at or below the CPU's level otherwise.
func (mc *Machine) Multiversion(m *ir.Module) (*ir.Module, error) {
	return mc.multiversion(m, mc.keep)
}

// keep are the levels of levels (indexes into the architecture's,
// ascending) a kernel that can be cloned at them is cloned at: all of
// them, or on a restricted machine the one fallsTo picks for each level
// built.
func (mc *Machine) keep(levels []int) []int {
	if mc.built == nil {
		return levels
	}
	var out []int
	for _, i := range mc.built {
		if b := fallsTo(mc.Arch.Levels, levels, i); !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

// MultiversionAt is Multiversion with one clone of each work kernel: of
// the level fallsTo picks for level i among those it would be cloned at
// (a kernel without a bf16 product takes x86-64-v4 where i is
// x86-64-v4-bf16 or x86-64-amx): the
// Multiversion of the machine restricted to level i. Tests that run the
// level their machine picks build with it, one clone instead of three or
// four. The entries return CPU_LEVEL below the highest level cloned,
// whether the CPU is below it or ATTNC_CPU_LEVEL names a lower one.
func (mc *Machine) MultiversionAt(i int) func(*ir.Module) (*ir.Module, error) {
	at := &Machine{Arch: mc.Arch, built: []int{i}}
	return at.Multiversion
}

// multiversion clones each work kernel at the levels keep takes of those
// it can be cloned at (indexes into the architecture's levels, ascending).
func (mc *Machine) multiversion(m *ir.Module, keep func([]int) []int) (*ir.Module, error) {
	all := mc.Arch.Levels
	// at lists, for each cloned kernel, the indexes in all of the levels
	// it is cloned at, ascending; lo is the highest index of a kernel's
	// lowest clone, below which the entries refuse to run.
	at := map[string][]int{}
	lo := 0
	for _, k := range m.Kernels {
		if k.Level != "" || !hasParallel(k.Body) {
			continue
		}
		var can []int
		for i, l := range all {
			if l.DotBF16 && !hasBF16Product(k, l) || l.AMX && !amxTiles {
				continue
			}
			can = append(can, i)
		}
		at[k.Name] = keep(can)
		lo = max(lo, at[k.Name][0])
	}
	out := *m
	out.Kernels = nil
	for _, k := range m.Kernels {
		for _, i := range at[k.Name] {
			l := all[i]
			c := *k
			c.Name, c.Level = k.Name+l.Suffix, l.Name
			c.Body = renameCalls(ir.CloneBlock(k.Body), at, all, i)
			out.Kernels = append(out.Kernels, &c)
		}
	}
	// index maps a level of all that has clones to its index among the
	// module's levels (moduleLevels: the runtime's numbering).
	index := map[int]int{}
	for j, l := range mc.moduleLevels(&out) {
		index[slices.IndexFunc(all, func(a Level) bool { return a.Name == l.Name })] = j
	}
	for _, k := range m.Kernels {
		if at[k.Name] != nil {
			continue
		}
		if !callsAny(k.Body, at) {
			out.Kernels = append(out.Kernels, k)
			continue
		}
		e := *k
		e.Body = &ir.Block{Stmts: append([]ir.Stmt{
			&ir.CallStmt{Result: levelVar, Fn: "rt.cpu_level"},
			&ir.If{Cond: ir.Bin(ir.Lt, ir.R(levelVar, ir.I32), ir.Int(int64(index[lo]))),
				Then: &ir.Block{Stmts: []ir.Stmt{&ir.Return{Value: ir.Int(ir.StatusCPULevel)}}}},
		}, dispatch(k.Body, at, all, index).Stmts...)}
		out.Kernels = append(out.Kernels, &e)
	}
	if err := ir.Verify(&out); err != nil {
		return nil, fmt.Errorf("multiversion: %w", err)
	}
	return &out, nil
}

// clonedAt reports whether some kernel is cloned at level index i.
func clonedAt(at map[string][]int, i int) bool {
	for _, is := range at {
		if slices.Contains(is, i) {
			return true
		}
	}
	return false
}

// moduleLevels are the levels of the architecture that module m's clones
// and runtime know, baseline first: the levels some kernel is cloned at
// (every level but a DotBF16 one no kernel has a product for, unless the
// build restricted the levels), or for a module without clones the levels
// a kernel without a bf16 product would be cloned at (keep). The runtime
// numbers them in this order (rt.cpu_level), and a module without a bf16
// product is the same as before that level existed.
func (mc *Machine) moduleLevels(m *ir.Module) []Level {
	var out []Level
	for _, l := range mc.Arch.Levels {
		if m != nil && slices.ContainsFunc(m.Kernels, func(k *ir.Kernel) bool { return k != nil && k.Level == l.Name }) {
			out = append(out, l)
		}
	}
	if len(out) > 0 {
		return out
	}
	var plain []int
	for i, l := range mc.Arch.Levels {
		if !l.DotBF16 {
			plain = append(plain, i)
		}
	}
	for _, i := range mc.keep(plain) {
		out = append(out, mc.Arch.Levels[i])
	}
	return out
}

// floorLevel is the index among the module's levels (levels, moduleLevels)
// of the lowest level every cloned kernel of m has a clone at: 0 unless
// the build restricted the levels. The entries refuse a level below it.
func floorLevel(m *ir.Module, levels []Level) int {
	lowest := map[string]int{}
	if m == nil {
		return 0
	}
	for _, k := range m.Kernels {
		if k == nil || k.Level == "" {
			continue
		}
		j := slices.IndexFunc(levels, func(l Level) bool { return l.Name == k.Level })
		if j < 0 {
			continue
		}
		base := strings.TrimSuffix(k.Name, levels[j].Suffix)
		if cur, ok := lowest[base]; !ok || j < cur {
			lowest[base] = j
		}
	}
	floor := 0
	for _, j := range lowest {
		floor = max(floor, j)
	}
	return floor
}

// fallsTo is the level of levels (ascending indexes into all) a kernel
// cloned at them runs at level i: i itself, else the highest below it
// whose level has no Vendor (a level that pays only on some vendors'
// CPUs is never a fallback: the CPUs of the levels above it may not be
// that vendor's); the lowest is the last resort.
func fallsTo(all []Level, levels []int, i int) int {
	best := levels[0]
	for _, j := range levels {
		if j == i || j < i && all[j].Vendor == "" {
			best = j
		}
	}
	return best
}

// levelVar holds an entry's CPU level.
const levelVar = "cpu_level"

// renameCalls points the calls of a clone of level index i at the
// callees' clones of the same level, or of the level below it fallsTo
// picks among those they are cloned at.
func renameCalls(b *ir.Block, at map[string][]int, all []Level, i int) *ir.Block {
	return ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if c, ok := s.(*ir.CallStmt); ok && at[c.Fn] != nil {
			n := *c
			n.Fn += all[fallsTo(all, at[c.Fn], i)].Suffix
			return []ir.Stmt{&n}
		}
		return []ir.Stmt{s}
	})
}

// dispatch turns each call of a cloned kernel into a choice of its clones
// by the entry's level: the level fallsTo picks among those it is cloned
// at, best first (the entry has refused levels below every kernel's
// lowest clone). index numbers the
// levels of all as the runtime does (moduleLevels). A call's result stays
// visible after the choice: it becomes a var that each clone's call sets.
func dispatch(b *ir.Block, at map[string][]int, all []Level, index map[int]int) *ir.Block {
	return ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		c, ok := s.(*ir.CallStmt)
		if !ok || at[c.Fn] == nil {
			return []ir.Stmt{s}
		}
		call := func(l Level) *ir.Block {
			n := *c
			n.Fn += l.Suffix
			n.Args = append([]ir.Expr(nil), c.Args...)
			if c.Result == "" {
				return &ir.Block{Stmts: []ir.Stmt{&n}}
			}
			n.Result = c.Result + l.Suffix
			return &ir.Block{Stmts: []ir.Stmt{&n, &ir.Assign{Name: c.Result, Value: ir.R(n.Result, ir.I32)}}}
		}
		levels := at[c.Fn]
		tail := call(all[levels[0]])
		for _, i := range levels[1:] {
			// A level with a Vendor runs only when chosen (fallsTo).
			op := ir.Ge
			if all[i].Vendor != "" {
				op = ir.Eq
			}
			cond := ir.Bin(op, ir.R(levelVar, ir.I32), ir.Int(int64(index[i])))
			tail = &ir.Block{Stmts: []ir.Stmt{&ir.If{Cond: cond, Then: call(all[i]), Else: tail}}}
		}
		if c.Result != "" {
			return append([]ir.Stmt{&ir.Var{Name: c.Result, Init: ir.Int(0)}}, tail.Stmts...)
		}
		return tail.Stmts
	})
}

// hasParallel reports whether b holds a parallel loop.
func hasParallel(b *ir.Block) bool {
	found := false
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok && f.Kind == ir.Parallel {
			found = true
		}
		return []ir.Stmt{s}
	})
	return found
}

// callsAny reports whether b calls a kernel of names.
func callsAny[V any](b *ir.Block, names map[string]V) bool {
	found := false
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if c, ok := s.(*ir.CallStmt); ok {
			if _, ok := names[c.Fn]; ok {
				found = true
			}
		}
		return []ir.Stmt{s}
	})
	return found
}
