package cpu

import (
	"fmt"

	llvmgen "github.com/attnc/attnc/codegen/llvm"
	"github.com/attnc/attnc/ir"
)

// EmitLL prints the scheduled module m as LLVM 14 IR for architecture a:
// codegen/llvm builds the kernels for a's triple and data layout, each
// level's clone with that level's attributes, and this package's runtime
// (the thread pool, strerror, the CPU-level dispatch) around them.
func EmitLL(m *ir.Module, a Arch) (string, error) {
	t := llvmgen.Target{Triple: a.Triple, DataLayout: a.DataLayout, Runtime: &runtimeEmitter{arch: a}}
	if m != nil {
		for _, k := range m.Kernels {
			if k == nil || k.Level == "" {
				continue
			}
			l, err := a.Level(k.Level)
			if err != nil {
				return "", fmt.Errorf("llvm: kernel %s: %w", k.Name, err)
			}
			if t.Attrs == nil {
				t.Attrs = map[string][]llvmgen.Attr{}
			}
			t.Attrs[k.Name] = l.attrs()
		}
	}
	return llvmgen.Emit(m, t)
}
