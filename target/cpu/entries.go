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
// (rt.num_threads gives the workers).
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
		call, err := callByName(to.Entry, to.Params, p.Params, "st")
		if err != nil {
			return nil, err
		}
		body = append(body, when(h.When, call, &ir.Return{Value: ir.R("st", ir.I32)}))
	}
	for _, c := range p.Limits {
		body = append(body, when(c.Fail, ret(c.Code)))
	}
	scope := append([]*ir.Param(nil), p.Params...)
	calls := func(ls []ir.Launch, scope []*ir.Param) ([]ir.Stmt, error) {
		var out []ir.Stmt
		for _, l := range ls {
			k := m.Kernel(l.Kernel)
			if k == nil {
				return nil, fmt.Errorf("launches unknown kernel %s", l.Kernel)
			}
			c, err := callByName(k.Name, k.Params, scope, "")
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
		return out, nil
	}
	direct, err := calls(p.Direct, scope)
	if err != nil {
		return nil, err
	}
	if s := p.Split; s != nil {
		body = append(body, &ir.CallStmt{Result: ir.PlanThreads, Fn: "rt.num_threads"},
			&ir.Let{Name: ir.PlanSplits, Value: s.Splits})
		body = append(body, when(ir.Bin(ir.Le, ir.R(ir.PlanSplits, ir.I32), ir.Int(1)), append(direct, ret(0))...))
		splitScope := append(scope, &ir.Param{Name: ir.PlanSplits, Elem: ir.I32})
		for _, sc := range s.Scratch {
			body = append(body, &ir.Malloc{Name: sc.Name, T: sc.T, Size: sc.Size})
			splitScope = append(splitScope, &ir.Param{Name: sc.Name, Buffer: true, Elem: sc.T})
		}
		launches, err := calls(s.Launches, splitScope)
		if err != nil {
			return nil, err
		}
		body = append(body, launches...)
		for _, sc := range s.Scratch {
			body = append(body, &ir.Free{Name: sc.Name})
		}
	} else {
		body = append(body, direct...)
	}
	body = append(body, ret(0))
	return &ir.Kernel{Name: p.Entry, Role: p.Role, Entry: p.Public, Params: p.Params, Body: &ir.Block{Stmts: body}}, nil
}

// callByName calls fn, binding each of its params to the name of the
// same name in scope.
func callByName(fn string, params, scope []*ir.Param, result string) (ir.Stmt, error) {
	byName := map[string]*ir.Param{}
	for _, p := range scope {
		byName[p.Name] = p
	}
	var args []ir.Expr
	for _, p := range params {
		s, ok := byName[p.Name]
		if !ok || s.Buffer != p.Buffer || s.Elem != p.Elem {
			return nil, fmt.Errorf("%s: no argument for parameter %s", fn, p.Name)
		}
		args = append(args, ir.R(p.Name, p.Elem))
	}
	return &ir.CallStmt{Result: result, Fn: fn, Args: args}, nil
}
