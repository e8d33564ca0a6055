package passes

import (
	"fmt"

	"github.com/attnc/attnc/ir"
)

// InlineDefs replaces every call of a module Def by the Def's body with its
// parameters substituted by the call's arguments.
func InlineDefs(m *ir.Module) (*ir.Module, error) {
	var firstErr error
	inline := func(e ir.Expr) ir.Expr {
		c, ok := e.(*ir.Call)
		if !ok {
			return e
		}
		d := m.Def(c.Fn)
		if d == nil {
			return e
		}
		if len(d.Params) != len(c.Args) && firstErr == nil {
			firstErr = fmt.Errorf("@%s takes %d arguments, called with %d", d.Name, len(d.Params), len(c.Args))
			return e
		}
		sub := map[string]ir.Expr{}
		for i, p := range d.Params {
			sub[p.Name] = c.Args[i]
		}
		return ir.Subst(d.Body, sub)
	}
	out, err := mapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		return ir.MapExprs(k.Body, inline), nil
	})
	if firstErr != nil {
		return nil, firstErr
	}
	return out, err
}
