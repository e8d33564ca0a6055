package cpu

import (
	"fmt"

	"github.com/attnc/attnc/ir"
)

// Assemble builds the CPU entry kernel of every plan and appends it to the
// module: the scalar checks, the validation of every buffer the entry can
// read, the skip test, the hand-over to another role, the limits, then the
// work kernels (each runs its items on the thread pool) — through f32
// scratch and the merge when the split rule asks for chunks
// (rt.num_threads gives the workers). An entry returns the first nonzero
// status of its work kernels (NO_MEMORY when a kernel cannot get its
// workers' scratch) and runs no launch after it, having freed its own
// scratch; it returns NO_MEMORY with its buffers untouched.
func Assemble(m *ir.Module) (*ir.Module, error) {
	out := *m
	out.Kernels = append([]*ir.Kernel(nil), m.Kernels...)
	for _, p := range m.Plans {
		k, err := entryKernel(m, p)
		if err != nil {
			return nil, fmt.Errorf("plan %s: %w", p.Role, err)
		}
		out.Kernels = append(out.Kernels, k)
	}
	return &out, nil
}

func entryKernel(m *ir.Module, p *ir.Plan) (*ir.Kernel, error) {
	var body []ir.Stmt
	ret := func(code int) ir.Stmt { return &ir.Return{Value: ir.Int(int64(code))} }
	when := func(c ir.Expr, then ...ir.Stmt) ir.Stmt { return &ir.If{Cond: c, Then: &ir.Block{Stmts: then}} }
	for _, c := range p.Checks {
		body = append(body, when(c.Fail, ret(c.Code)))
	}
	if p.Validate != nil {
		body = append(body, ir.CloneBlock(p.Validate).Stmts...)
	}
	if p.Skip != nil {
		body = append(body, when(p.Skip, ret(0)))
	}
	if h := p.Handoff; h != nil {
		to := m.Plan(h.Role)
		if to == nil {
			return nil, fmt.Errorf("hands over to role %s, which has no plan", h.Role)
		}
		call, err := callByName(ir.Launch{Kernel: to.Entry}, to.Params, p.Params, "st")
		if err != nil {
			return nil, err
		}
		body = append(body, when(h.When, call, &ir.Return{Value: ir.R("st", ir.I32)}))
	}
	for _, c := range p.Limits {
		body = append(body, when(c.Fail, ret(c.Code)))
	}
	scope := append([]*ir.Param(nil), p.Params...)
	outputs := map[string]bool{}
	for _, pr := range p.Params {
		if pr.Buffer {
			outputs[pr.Name] = true
		}
	}
	// run calls the launches in order, each only while the ones before
	// returned 0, leaving the first nonzero status (a work kernel's
	// NO_MEMORY) in statusVar. A work kernel acquires all its scratch before
	// its first item, so a failing launch has written nothing; every launch
	// but the last writes only the plan's scratch (checked here), so a
	// failing call leaves the entry's buffers untouched.
	run := func(ls []ir.Launch, scope []*ir.Param, statusVar string) ([]ir.Stmt, error) {
		out := []ir.Stmt{&ir.Var{Name: statusVar, Init: ir.Int(0)}}
		for i, l := range ls {
			k := m.Kernel(l.Kernel)
			if k == nil {
				return nil, fmt.Errorf("launches unknown kernel %s", l.Kernel)
			}
			if err := checkWrites(withoutNull(k.Body, l), k.Name, outputs, i == len(ls)-1); err != nil {
				return nil, err
			}
			res := fmt.Sprintf("%s%d", statusVar, i)
			c, err := callByName(l, k.Params, scope, res)
			if err != nil {
				return nil, err
			}
			step := []ir.Stmt{c, &ir.Assign{Name: statusVar, Value: ir.R(res, ir.I32)}}
			if i == 0 {
				out = append(out, step...)
			} else {
				out = append(out, when(ir.Bin(ir.Eq, ir.R(statusVar, ir.I32), ir.Int(0)), step...))
			}
		}
		return out, nil
	}
	retStatus := func(v string) ir.Stmt { return &ir.Return{Value: ir.R(v, ir.I32)} }
	direct, err := run(p.Direct, scope, directStatus)
	if err != nil {
		return nil, err
	}
	if s := p.Split; s != nil {
		body = append(body, &ir.CallStmt{Result: ir.PlanThreads, Fn: "rt.num_threads"},
			&ir.Let{Name: ir.PlanSplits, Value: s.Splits})
		body = append(body, when(ir.Bin(ir.Le, ir.R(ir.PlanSplits, ir.I32), ir.Int(1)), append(direct, retStatus(directStatus))...))
		splitScope := append(scope, &ir.Param{Name: ir.PlanSplits, Elem: ir.I32})
		// The scratch comes first: a failed allocation returns NO_MEMORY
		// before any launch.
		for _, sc := range s.Scratch {
			body = append(body, &ir.Malloc{Name: sc.Name, T: sc.T, Size: sc.Size})
			splitScope = append(splitScope, &ir.Param{Name: sc.Name, Buffer: true, Elem: sc.T})
		}
		launches, err := run(s.Launches, splitScope, splitStatus)
		if err != nil {
			return nil, err
		}
		body = append(body, launches...)
		for _, sc := range s.Scratch {
			body = append(body, &ir.Free{Name: sc.Name})
		}
		body = append(body, retStatus(splitStatus))
	} else {
		body = append(body, direct...)
		body = append(body, retStatus(directStatus))
	}
	return &ir.Kernel{Name: p.Entry, Role: p.Role, Entry: p.Public, Params: p.Params, Body: &ir.Block{Stmts: body}}, nil
}

// The vars holding the status of an entry's launches (the call results are
// these names with the launch's index appended).
const (
	directStatus = "work_status"
	splitStatus  = "split_status"
)

// withoutNull is the body of a kernel as launch l runs it: without the
// statements under `if NotNull(buf)` of a buffer l passes NULL (their
// else branches, if any, in their place).
func withoutNull(body *ir.Block, l ir.Launch) *ir.Block {
	return ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.If); ok {
			if nn, ok := f.Cond.(*ir.NotNull); ok {
				if b, ok := l.BindOf(nn.Buf); ok && b.Value == nil {
					if f.Else == nil {
						return nil
					}
					return f.Else.Stmts
				}
			}
		}
		return []ir.Stmt{s}
	})
}

// checkWrites checks that work kernel name, whose body as a launch runs
// it is body, writes the entry's buffers (names) only inside its last
// parallel loop, whose items run once the loop has all its scratch, and,
// unless it is the last launch, not at all: a failure after a write could
// not leave them untouched.
func checkWrites(body *ir.Block, name string, names map[string]bool, last bool) error {
	stores := func(b *ir.Block) (n int, buf string) {
		ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
			if st, ok := s.(*ir.Store); ok && names[st.Buf] {
				if n == 0 {
					buf = st.Buf
				}
				n++
			}
			return []ir.Stmt{s}
		})
		return n, buf
	}
	var lastPar *ir.For
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok && f.Kind == ir.Parallel {
			lastPar = f
		}
		return []ir.Stmt{s}
	})
	total, buf := stores(body)
	switch {
	case total == 0:
		return nil
	case !last:
		return fmt.Errorf("launch %s writes buffer %s before the last launch: a later one failing would leave it written", name, buf)
	case lastPar == nil:
		return fmt.Errorf("launch %s writes buffer %s outside a parallel loop", name, buf)
	}
	if inside, _ := stores(lastPar.Body); inside != total {
		return fmt.Errorf("launch %s writes buffer %s outside its last parallel loop: its scratch could still fail after the write", name, buf)
	}
	return nil
}

// callByName calls launch l's kernel, binding each of its params as l's
// Bind says (NULL or a value), else to the name of the same name in
// scope.
func callByName(l ir.Launch, params, scope []*ir.Param, result string) (ir.Stmt, error) {
	fn := l.Kernel
	byName := map[string]*ir.Param{}
	for _, p := range scope {
		byName[p.Name] = p
	}
	var args []ir.Expr
	for _, p := range params {
		if b, ok := l.BindOf(p.Name); ok {
			switch {
			case b.Value == nil && p.Buffer && p.Null:
				args = append(args, ir.NullArg())
			case b.Value != nil && !p.Buffer && b.Value.Type() == p.Elem:
				args = append(args, b.Value)
			default:
				return nil, fmt.Errorf("%s: launch binds parameter %s to what it cannot take", fn, p.Name)
			}
			continue
		}
		s, ok := byName[p.Name]
		if !ok || s.Buffer != p.Buffer || s.Elem != p.Elem {
			return nil, fmt.Errorf("%s: no argument for parameter %s", fn, p.Name)
		}
		args = append(args, ir.R(p.Name, p.Elem))
	}
	return &ir.CallStmt{Result: result, Fn: fn, Args: args}, nil
}
