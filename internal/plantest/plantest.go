// Package plantest runs a GPU module's plans in the IR interpreter as a
// host launcher does, against the float64 reference: the test of a GPU
// target's schedule without a GPU or an emulator. Tests only.
package plantest

import (
	"encoding/binary"
	"fmt"
	"math/rand"

	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// storage is xs in a variant's storage dtype, as the interpreter takes
// buffers: []float32 for f32, bit patterns for f16 and bf16.
func storage(dt ir.DType, xs []float32) any {
	if dt == ir.DTF32 {
		return append([]float32(nil), xs...)
	}
	b := reference.Encode(dt, xs)
	out := make([]uint16, len(xs))
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return out
}

// floats decodes an interpreter output buffer of a storage dtype.
func floats(dt ir.DType, x any) []float32 {
	if dt == ir.DTF32 {
		return x.([]float32)
	}
	u := x.([]uint16)
	b := make([]byte, 2*len(u))
	for i, h := range u {
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	return reference.Decode(dt, b)
}

// RunPlans launches m's plans in the interpreter as a GPU launcher does
// (prefill; decode direct, then split into 3 chunks and merged) on cases
// with NaN-poisoned unused slots, and compares with the float64 reference.
// It returns what went wrong.
func RunPlans(v *ir.Variant, m *ir.Module) []string {
	var bad []string
	rng := rand.New(rand.NewSource(3))
	run := func(role ir.Role, spec reference.CaseSpec, splits int) {
		cs := reference.NewCase(v, rng, spec)
		args := map[string]any{
			"q":         storage(v.DType, cs.Q),
			"k_pages":   storage(v.DType, cs.KPages),
			"v_pages":   storage(v.DType, cs.VPages),
			"num_pages": int32(cs.NumPages), "batch_size": int32(cs.Batch),
		}
		if v.Table == ir.BlockTable {
			table, mb, lens := cs.BlockTable()
			args["block_table"], args["max_blocks"], args["kv_lens"] = table, int32(mb), lens
		} else {
			indptr, indices, last := cs.CSR(v.PageSize)
			args["kv_indptr"], args["kv_indices"], args["kv_last_page_len"] = indptr, indices, last
		}
		rows := cs.TotalQ() * v.QOHeads
		o, lse := storage(v.DType, make([]float32, rows*v.HeadDimV)), make([]float32, rows)
		args["o"], args["lse"] = o, lse
		if role == ir.RolePrefill {
			args["qo_indptr"] = cs.QOIndptr()
		}
		p := m.Plan(role)
		launch := func(l ir.Launch, extra map[string]any) bool {
			k := m.Kernel(l.Kernel)
			a := map[string]any{}
			for _, pr := range k.Params {
				x, ok := extra[pr.Name]
				if !ok {
					x = args[pr.Name]
				}
				if b, ok := l.BindOf(pr.Name); ok {
					x = nil // NULL
					if b.Value != nil {
						c, ok := b.Value.(*ir.Const)
						if !ok {
							bad = append(bad, fmt.Sprintf("%s %s: binds %s to %s, not a constant", spec.Name, k.Name, pr.Name, ir.ExprString(b.Value)))
							return false
						}
						x = int32(c.Int)
					}
				}
				a[pr.Name] = x
			}
			if st, err := ir.Run(m, k.Name, a); err != nil || st != 0 {
				bad = append(bad, fmt.Sprintf("%s %s: status %d, %v", spec.Name, k.Name, st, err))
				return false
			}
			return true
		}
		ls, extra := p.Direct, map[string]any(nil)
		if splits > 1 {
			ls, extra = p.Split.Launches, map[string]any{
				"splits":   int32(splits),
				"part_o":   make([]float32, splits*rows*v.HeadDimV),
				"part_lse": make([]float32, splits*rows),
			}
		}
		for _, l := range ls {
			if !launch(l, extra) {
				return
			}
		}
		wantO, wantLSE, mag := reference.AttentionMag(v, cs)
		if v.DType == ir.DTF32 {
			if e, i, ok := reference.Compare(o.([]float32), wantO, conformance.Tolerance); !ok {
				bad = append(bad, fmt.Sprintf("%s (%s, %d splits): o[%d] off by %.3g (tolerance %g)", spec.Name, role, splits, i, e, conformance.Tolerance))
			}
		} else if e, i, ok := reference.CompareULP(v.DType, floats(v.DType, o), wantO, mag); !ok {
			bad = append(bad, fmt.Sprintf("%s (%s, %d splits): o[%d] off by %.3g ulp (want within half an ulp)", spec.Name, role, splits, i, e))
		}
		if e, i, ok := reference.Compare(lse, wantLSE, 1e-5); !ok {
			bad = append(bad, fmt.Sprintf("%s (%s, %d splits): lse[%d] off by %.3g", spec.Name, role, splits, i, e))
		}
	}
	run(ir.RolePrefill, reference.CaseSpec{Name: "ragged", QLens: []int{5, 9}, KVLens: []int{40, 70}, NaNFill: true}, 1)
	run(ir.RoleDecode, reference.CaseSpec{Name: "decode", QLens: []int{1, 1}, KVLens: []int{33, 70}, NaNFill: true}, 1)
	run(ir.RoleDecode, reference.CaseSpec{Name: "split", QLens: []int{1, 1}, KVLens: []int{33, 100}, NaNFill: true}, 3)
	return bad
}

// Mutate is a copy of m whose kernel bodies f rewrites (ir.MapStmts): a
// broken schedule that a test expects RunPlans to catch.
func Mutate(m *ir.Module, f func(ir.Stmt) []ir.Stmt) *ir.Module {
	out := *m
	out.Kernels = nil
	for _, k := range m.Kernels {
		nk := *k
		nk.Body = ir.MapStmts(k.Body, f)
		out.Kernels = append(out.Kernels, &nk)
	}
	return &out
}
