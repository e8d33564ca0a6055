package attnc_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/registry"
)

// tinySpec is a small GQA variant: 8 query heads over 2 KV heads.
const tinySpec = `variant tiny {
  heads    qo = 8, kv = 2
  head_dim 64
  dtype    f16
  cache    paged(page_size = 16)
  mask     causal
}
`

// Compile a spec for the CPU and the GPU and list what `attnc build` would
// write, and the CPU entry points the manifest records.
func ExampleCompile() {
	r, err := attnc.Compile("tiny.attn", []byte(tinySpec), attnc.Options{Targets: []string{"cpu", "cuda"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range r.Names() {
		fmt.Println(name)
	}
	for _, k := range r.Manifest.Kernels {
		if k.Target == "cpu" && k.Entry {
			fmt.Println(k.Symbol, len(k.Args), "args")
		}
	}
	// Output:
	// manifest.json
	// tiny.cu
	// tiny.h
	// tiny.ll
	// tiny_decode 10 args
	// tiny_merge_state 5 args
	// tiny_prefill 11 args
}

// A user pass placed before inline-defs rewrites the variant's @mask Def,
// here narrowing the causal mask to a 64-token window. Every target's table
// gets it; the manifest lists it among the passes that ran and shows the
// mask as it was inlined.
func ExampleInsertion() {
	window := passes.Pass{
		Name: "window-64",
		Desc: "narrow the mask to 64 tokens: q_pos - kv_pos <= 63",
		Run: func(m *ir.Module) (*ir.Module, error) {
			d := m.Def("mask")
			if d == nil {
				return m, nil
			}
			near := ir.Bin(ir.Le, ir.Bin(ir.Sub, ir.R("q_pos", ir.I32), ir.R("kv_pos", ir.I32)), ir.Int(63))
			return m.WithDef(&ir.Def{Name: d.Name, Params: d.Params, Body: ir.Bin(ir.And, d.Body, near)}), nil
		},
	}
	r, err := attnc.Compile("tiny.attn", []byte(tinySpec), attnc.Options{
		Insert: []attnc.Insertion{{Before: "inline-defs", Pass: window}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Join(r.Manifest.Targets["cpu"].Passes, " "))
	fmt.Println(r.Manifest.Variants[0].Rules["def mask"])
	// Output:
	// window-64 inline-defs simplify classify-tiles expand-calls full-tiles multiversion exp-bound vector-reduce finite-codes block-matmul lower-tiles vectorize prefetch-kv merge-twins vector-exp native-widen legalize-dtype late-simplify vector-loops heap-scratch
	// ((kv_pos <= q_pos) & ((q_pos - kv_pos) <= 63))
}

// Select answers which kernel serves a call, from the compiled module's own
// dispatch Defs: one sequence decoding over 4096 cached tokens on 8 threads
// has 2 (sequence, kv head) work items, so the decode splits each KV range
// into 4 chunks merged afterwards.
func ExampleResult_Select() {
	r, err := attnc.Compile("tiny.attn", []byte(tinySpec), attnc.Options{})
	if err != nil {
		log.Fatal(err)
	}
	s, err := r.Select("tiny", "cpu", registry.Shape{QLens: []int{1}, KVLens: []int{4096}, Threads: 8})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s, %d splits, %d work items, merge %v\n", s.Role, s.Symbol, s.Splits, s.Items, s.Merge)
	// Output:
	// decode: tiny_decode, 8 splits, 16 work items, merge true
}

// PassTable shows a target's table with insertions applied; the standard
// table is unchanged.
func ExamplePassTable() {
	stats := passes.Pass{Name: "stats", Desc: "count kernels", Run: func(m *ir.Module) (*ir.Module, error) { return m, nil }}
	table, err := attnc.PassTable("cpu", []attnc.Insertion{{After: "classify-tiles", Pass: stats}})
	if err != nil {
		log.Fatal(err)
	}
	var names []string
	for _, p := range table {
		names = append(names, p.Name)
	}
	fmt.Println(strings.Join(names, " "))
	fmt.Println(len(passes.Neutral), "target-neutral passes")
	// Output:
	// inline-defs simplify classify-tiles stats expand-calls full-tiles multiversion exp-bound vector-reduce finite-codes block-matmul lower-tiles vectorize prefetch-kv merge-twins vector-exp native-widen legalize-dtype late-simplify vector-loops heap-scratch
	// 6 target-neutral passes
}
