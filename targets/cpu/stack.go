package cpu

import "github.com/attnc/attnc/ir"

// FrameAllowance is the stack a call needs beyond its local arrays: the
// register spills and call frames of the kernel (the entry's
// floating-point wrapper, wrapEntries, included), of the runtime
// (parallel_for, the worker) and of libc (malloc, pthread_create, sysconf).
// The conformance tests run every example's entries on a thread with
// exactly StackBytes of stack, so an allowance that is too small fails
// them.
const FrameAllowance = 16 << 10

// StackBytes bounds the stack one call of kernel name of m (after the pass
// pipeline) needs on the calling thread: FrameAllowance plus its local
// arrays that stay on the stack (heap-scratch moves the large ones to the
// heap) outside parallel loops, plus the most that one parallel loop's
// body (the caller runs work items too) or one kernel it calls adds.
// Worker threads are created with the system's default stack.
func StackBytes(m *ir.Module, name string) int64 {
	return FrameAllowance + stackArrays(m, name, map[string]bool{})
}

// stackArrays is the bytes of stack arrays of kernel name and, at most, of
// its deepest parallel body or callee.
func stackArrays(m *ir.Module, name string, seen map[string]bool) int64 {
	k := m.Kernel(name)
	if k == nil || seen[name] {
		return 0
	}
	seen[name] = true
	defer delete(seen, name)
	var own, deepest int64
	var walk func(b *ir.Block, sum *int64)
	walk = func(b *ir.Block, sum *int64) {
		if b == nil {
			return
		}
		for _, s := range b.Stmts {
			switch x := s.(type) {
			case *ir.Alloc:
				if !x.Heap && !x.Shared {
					*sum += int64(x.Size) * elemBytes(x.T)
				}
			case *ir.Block:
				walk(x, sum)
			case *ir.If:
				walk(x.Then, sum)
				walk(x.Else, sum)
			case *ir.For:
				if x.Kind == ir.Parallel {
					var body int64
					walk(x.Body, &body)
					deepest = max(deepest, body)
				} else {
					walk(x.Body, sum)
				}
			case *ir.CallStmt:
				deepest = max(deepest, stackArrays(m, x.Fn, seen))
			}
		}
	}
	walk(k.Body, &own)
	return own + deepest
}

// elemBytes is the bytes of one element of an array of t as it is stored
// (f16 and bf16 as their 16-bit carriers; bool as a byte).
func elemBytes(t ir.Type) int64 {
	if t.IsStorageOnly() {
		t = ir.StorageOf(t).Carrier
	}
	if t == ir.Bool {
		return 1
	}
	return int64(t.Bits() / 8)
}
