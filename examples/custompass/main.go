// Command custompass is attnc with one extra pass, built without forking
// attnc (go build ./examples/custompass): before inline-defs, it narrows
// every variant's mask to a 1024-token window.
package main

import (
	"github.com/attnc/attnc"
	"github.com/attnc/attnc/cli"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

func main() {
	cli.Main(cli.WithPasses(attnc.Insertion{Before: "inline-defs", Pass: passes.Pass{
		Name: "local-1024", Desc: "narrow every mask to q_pos - kv_pos < 1024", Run: local1024,
	}}))
}

// local1024 ANDs q_pos - kv_pos < 1024 into the @mask Def.
func local1024(m *ir.Module) (*ir.Module, error) {
	d := m.Def("mask")
	near := ir.Bin(ir.Lt, ir.Bin(ir.Sub, ir.R("q_pos", ir.I32), ir.R("kv_pos", ir.I32)), ir.Int(1024))
	return m.WithDef(&ir.Def{Name: d.Name, Params: d.Params, Body: ir.Bin(ir.And, d.Body, near)}), nil
}
