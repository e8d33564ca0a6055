package cpu

import (
	"github.com/attnc/attnc/ir"
	"github.com/llir/llvm/ir/types"
)

// mxcsrDAZ is MXCSR's denormals-are-zero bit (6): with it set, SSE and
// AVX arithmetic reads f32 subnormal operands as zero.
const mxcsrDAZ = 6

// defineFPDAZ: i32 @<prefix>.fp_daz() (rt.fp_daz) is MXCSR's DAZ bit of
// the calling thread, stored by stmxcsr (the llvm.x86.sse.stmxcsr
// intrinsic) into a stack slot: 1 when the thread reads denormal f32
// operands as zero. Kernels ask where a faster path passes values through
// f32 subnormals (bitsWiden's finite tiles); a caller's environment can
// set DAZ (PyTorch's set_flush_denormal(True), a library linked with
// -ffast-math's crtfastmath.o), and the pool's workers inherit the
// environment of the thread that started them.
func (e *runtimeEmitter) defineFPDAZ() {
	b := e.fpDAZ.NewBlock("entry")
	slot := named(b.NewAlloca(types.I32), "mxcsr")
	slot.Align = 4
	st := e.decl("llvm.x86.sse.stmxcsr", types.Void, i8p)
	b.NewCall(st, b.NewBitCast(slot, i8p))
	v := named(b.NewLoad(types.I32, slot), "csr")
	v.Align = 4
	bit := named(b.NewAnd(b.NewLShr(v, llI32(mxcsrDAZ)), llI32(1)), "daz")
	b.NewRet(bit)
}

// callsRoutine reports whether a kernel of m calls the runtime routine fn
// (callsAny on each kernel's body).
func callsRoutine(m *ir.Module, fn string) bool {
	if m == nil {
		return false
	}
	for _, k := range m.Kernels {
		if k != nil && callsAny(k.Body, map[string]bool{fn: true}) {
			return true
		}
	}
	return false
}
