package gpu

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// StageCodes keeps a work item's arrays that hold only 8-bit KV codes
// (every store converts a code loaded from the cache to f32, or stores 0)
// as the codes themselves, one byte an element in shared memory: the
// staging stores become byte copies (which widen-copies groups) and every
// read converts the code to f32 in registers, exactly (the dtype table's
// Widen, after legalize-dtype). It runs after the target's operand
// narrowing (CUDA's narrow-operands), which takes the tensor-core
// operands, and simt-matmul, whose reads of the arrays are then explicit
// loads.
func StageCodes(m *ir.Module) (*ir.Module, error) {
	return stageAs(m, func(r *ir.DTypeInfo) bool { return r.KVOnly })
}

// StageStored keeps a work item's arrays that hold only elements of one
// storage dtype — f16, bf16 or an 8-bit code: every store converts an
// element loaded as that dtype to f32, or stores 0 — as that dtype in
// shared memory, converted to f32 where read: half the shared memory of
// f32 staging for half-precision K/V tiles, a quarter for codes. A target
// without a matrix rewrite (whose matmuls all run as SIMT dot products)
// runs it where StageCodes would run.
func StageStored(m *ir.Module) (*ir.Module, error) {
	return stageAs(m, func(*ir.DTypeInfo) bool { return true })
}

// stageAs narrows the f32 arrays that hold only elements of a storage
// dtype keep accepts to that dtype: stores keep the loaded element, reads
// convert it.
func stageAs(m *ir.Module, keep func(*ir.DTypeInfo) bool) (*ir.Module, error) {
	return passes.MapKernels(m, func(k *ir.Kernel) (*ir.Block, error) {
		stores := ArrayStores(k.Body)
		codes := map[string]ir.Type{}
		ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if a, ok := s.(*ir.Alloc); ok && a.T == ir.F32 {
				if t := NarrowType(stores[a.Name]); t != ir.Void && keep(ir.StorageOf(t)) {
					codes[a.Name] = t
				}
			}
			return []ir.Stmt{s}
		})
		if len(codes) == 0 {
			return k.Body, nil
		}
		body := ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			switch x := s.(type) {
			case *ir.Alloc:
				if t, ok := codes[x.Name]; ok {
					c := *x
					c.T = t
					return []ir.Stmt{&c}
				}
			case *ir.Store:
				if t, ok := codes[x.Buf]; ok {
					return []ir.Stmt{&ir.Store{Buf: x.Buf, Index: x.Index, Value: NarrowValue(x.Value, t)}}
				}
			}
			return []ir.Stmt{s}
		})
		return ir.MapExprs(body, func(e ir.Expr) ir.Expr {
			if l, ok := e.(*ir.Load); ok && l.T == ir.F32 {
				if t, ok := codes[l.Buf]; ok {
					return ir.Cvt(ir.F32, ir.Ld(l.Buf, t, l.Index))
				}
			}
			return e
		}), nil
	})
}
