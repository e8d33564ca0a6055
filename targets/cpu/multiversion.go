package cpu

import (
	"fmt"

	"github.com/attnc/attnc/ir"
)

// Multiversion clones every work kernel (a kernel whose items run on the
// thread pool: it holds a parallel loop) once per CPU level of the
// machine's architecture (x86-64, x86-64-v3, x86-64-v4; NEON on aarch64): the
// clone of level L is named <kernel><L.Suffix> and carries L as its Level,
// so codegen compiles it for L (target-cpu and target-features) and the
// schedule passes after this one may specialise it (native-widen uses L's
// half conversion; none fits the vector width to L yet). A kernel that calls work kernels
// (an entry) asks the runtime for the level at its start (rt.cpu_level:
// CPUID at the first call, or $ATTNC_CPU_LEVEL), returns CPU_LEVEL when
// the variable is refused, and calls the clone of that level.
func (mc *Machine) Multiversion(m *ir.Module) (*ir.Module, error) {
	return mc.multiversion(m, func(int) bool { return true })
}

// MultiversionAt is Multiversion with the clone of level i only, for tests
// that run one level (the one their machine picks): the entries return
// CPU_LEVEL on a CPU below it, or when ATTNC_CPU_LEVEL names a lower one.
func (mc *Machine) MultiversionAt(i int) func(*ir.Module) (*ir.Module, error) {
	return func(m *ir.Module) (*ir.Module, error) {
		return mc.multiversion(m, func(j int) bool { return j == i })
	}
}

// multiversion clones the work kernels at the levels keep takes (by index
// in the architecture's levels); an entry on a CPU below the lowest of them
// returns CPU_LEVEL.
func (mc *Machine) multiversion(m *ir.Module, keep func(int) bool) (*ir.Module, error) {
	t := mc.Arch
	// levels are the cloned levels with their indexes in the target's, lo
	// the lowest index.
	levels := map[int]Level{}
	lo := -1
	for i, l := range t.Levels {
		if keep(i) {
			levels[i] = l
			if lo < 0 {
				lo = i
			}
		}
	}
	if lo < 0 {
		return nil, fmt.Errorf("multiversion: no level of %s to clone", t.Triple)
	}
	out := *m
	out.Kernels = nil
	cloned := map[string]bool{}
	for _, k := range m.Kernels {
		if k.Level == "" && hasParallel(k.Body) {
			cloned[k.Name] = true
		}
	}
	for _, k := range m.Kernels {
		if !cloned[k.Name] {
			continue
		}
		for i, l := range t.Levels {
			if _, ok := levels[i]; !ok {
				continue
			}
			c := *k
			c.Name, c.Level = k.Name+l.Suffix, l.Name
			c.Body = renameCalls(ir.CloneBlock(k.Body), cloned, l.Suffix)
			out.Kernels = append(out.Kernels, &c)
		}
	}
	for _, k := range m.Kernels {
		if cloned[k.Name] {
			continue
		}
		if !callsAny(k.Body, cloned) {
			out.Kernels = append(out.Kernels, k)
			continue
		}
		e := *k
		e.Body = &ir.Block{Stmts: append([]ir.Stmt{
			&ir.CallStmt{Result: levelVar, Fn: "rt.cpu_level"},
			&ir.If{Cond: ir.Bin(ir.Lt, ir.R(levelVar, ir.I32), ir.Int(int64(lo))),
				Then: &ir.Block{Stmts: []ir.Stmt{&ir.Return{Value: ir.Int(ir.StatusCPULevel)}}}},
		}, dispatch(k.Body, cloned, lo, levels).Stmts...)}
		out.Kernels = append(out.Kernels, &e)
	}
	if err := ir.Verify(&out); err != nil {
		return nil, fmt.Errorf("multiversion: %w", err)
	}
	return &out, nil
}

// levelVar holds an entry's CPU level.
const levelVar = "cpu_level"

// renameCalls points the calls of a clone at the clones of the same level.
func renameCalls(b *ir.Block, cloned map[string]bool, suffix string) *ir.Block {
	return ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if c, ok := s.(*ir.CallStmt); ok && cloned[c.Fn] {
			n := *c
			n.Fn += suffix
			return []ir.Stmt{&n}
		}
		return []ir.Stmt{s}
	})
}

// dispatch turns each call of a cloned kernel into a choice of its clones
// by the entry's level: the best cloned level at or below it, best first
// (the entry has returned CPU_LEVEL below lo, the lowest cloned index). A
// call's result stays visible after the choice: it becomes a var that each
// clone's call sets.
func dispatch(b *ir.Block, cloned map[string]bool, lo int, levels map[int]Level) *ir.Block {
	return ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		c, ok := s.(*ir.CallStmt)
		if !ok || !cloned[c.Fn] {
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
		tail := call(levels[lo])
		for i := lo + 1; i <= maxIndex(levels); i++ {
			l, ok := levels[i]
			if !ok {
				continue
			}
			cond := ir.Bin(ir.Ge, ir.R(levelVar, ir.I32), ir.Int(int64(i)))
			tail = &ir.Block{Stmts: []ir.Stmt{&ir.If{Cond: cond, Then: call(l), Else: tail}}}
		}
		if c.Result != "" {
			return append([]ir.Stmt{&ir.Var{Name: c.Result, Init: ir.Int(0)}}, tail.Stmts...)
		}
		return tail.Stmts
	})
}

// maxIndex is the highest index of levels.
func maxIndex(levels map[int]Level) int {
	hi := -1
	for i := range levels {
		hi = max(hi, i)
	}
	return hi
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
func callsAny(b *ir.Block, names map[string]bool) bool {
	found := false
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if c, ok := s.(*ir.CallStmt); ok && names[c.Fn] {
			found = true
		}
		return []ir.Stmt{s}
	})
	return found
}
