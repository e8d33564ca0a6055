package cpu

import (
	"fmt"

	llvmgen "github.com/attnc/attnc/codegen/llvm"
	"github.com/attnc/attnc/ir"
)

// Multiversion clones every work kernel (a kernel whose items run on the
// thread pool: it holds a parallel loop) once per CPU level of the
// module's triple (x86-64, x86-64-v3, x86-64-v4; NEON on aarch64): the
// clone of level L is named <kernel><L.Suffix> and carries L as its Level,
// so the schedule passes after this one fit it to L's vector width and
// registers and codegen compiles it for L. A kernel that calls work kernels
// (an entry) asks the runtime for the level at its start (rt.cpu_level:
// CPUID at the first call, or $ATTNC_CPU_LEVEL), returns CPU_LEVEL when
// the variable is refused, and calls the clone of that level.
func Multiversion(m *ir.Module) (*ir.Module, error) {
	t, err := llvmgen.LookupTarget(m.Triple)
	if err != nil {
		return nil, err
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
		for _, l := range t.Levels {
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
			&ir.If{Cond: ir.Bin(ir.Lt, ir.R(levelVar, ir.I32), ir.Int(0)),
				Then: &ir.Block{Stmts: []ir.Stmt{&ir.Return{Value: ir.Int(ir.StatusCPULevel)}}}},
		}, dispatch(k.Body, cloned, t.Levels).Stmts...)}
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
// by the entry's level, best level first.
func dispatch(b *ir.Block, cloned map[string]bool, levels []llvmgen.Level) *ir.Block {
	return ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		c, ok := s.(*ir.CallStmt)
		if !ok || !cloned[c.Fn] {
			return []ir.Stmt{s}
		}
		call := func(l llvmgen.Level) *ir.Block {
			n := *c
			n.Fn += l.Suffix
			n.Args = append([]ir.Expr(nil), c.Args...)
			return &ir.Block{Stmts: []ir.Stmt{&n}}
		}
		tail := call(levels[0])
		for i := 1; i < len(levels); i++ {
			tail = &ir.Block{Stmts: []ir.Stmt{&ir.If{Cond: ir.Bin(ir.Eq, ir.R(levelVar, ir.I32), ir.Int(int64(i))),
				Then: call(levels[i]), Else: tail}}}
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
