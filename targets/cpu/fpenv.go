package cpu

import (
	"strings"

	"github.com/attnc/attnc/ir"
	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/enum"
	"github.com/llir/llvm/ir/types"
	"github.com/llir/llvm/ir/value"
)

// The kernels own their floating-point environment: every public entry
// (ir.Kernel.Entry) is a wrapper that saves the calling thread's control
// register (x86-64: MXCSR; aarch64: FPCR), sets the IEEE default — round
// to nearest even, denormal operands read and results kept as they are,
// every exception masked (no trap) — calls the entry's body, <entry>.inner
// (internal, noinline: no floating-point operation of the body can move
// across the switch), and restores the caller's register before it
// returns, flags included (the flags the kernels raised are not left
// behind). Threads a call starts (the pool's workers, started by the first
// call that needs them; a busy pool's own threads) inherit the default and
// run nothing but kernels. So a caller with DAZ and FTZ set (PyTorch's
// set_flush_denormal(True), a library linked with -ffast-math), another
// rounding mode, or exceptions unmasked (feenableexcept) gets the bits a
// caller in the default environment gets: before, f32 and bf16 subnormal
// inputs were read as zero under DAZ, another rounding mode changed every
// sum, an unmasked invalid-operation exception trapped on the softmax's
// hidden positions, and the workers kept whatever environment the thread
// that started them had.

// mxcsrDefault is MXCSR's power-on value: every exception masked, round to
// nearest even, neither DAZ nor FTZ.
const mxcsrDefault = 0x1f80

// fpEnvInner is the name of entry's body under its wrapper.
func fpEnvInner(entry string) string { return entry + ".inner" }

// publicEntries are the public entry kernels of m (ir.Kernel.Entry), in
// order.
func publicEntries(m *ir.Module) []*ir.Kernel {
	var out []*ir.Kernel
	if m == nil {
		return nil
	}
	for _, k := range m.Kernels {
		if k != nil && k.Entry && k.Level == "" {
			out = append(out, k)
		}
	}
	return out
}

// wrapEntries renames each public entry's function to <entry>.inner
// (internal, noinline) and returns, in the same order, the wrappers that
// take their names: save the caller's floating-point control register,
// set the default, call the body, restore, return its status.
func (e *runtimeEmitter) wrapEntries() []*lir.Func {
	x86 := strings.HasPrefix(e.arch.Triple, "x86_64")
	var out []*lir.Func
	for _, k := range publicEntries(e.b.IR()) {
		inner := e.b.KernelFunc(k.Name)
		if inner == nil {
			e.fail("entry %s: no function to wrap", k.Name)
		}
		params := make([]*lir.Param, len(inner.Params))
		args := make([]value.Value, len(inner.Params))
		for i, p := range inner.Params {
			q := lir.NewParam(p.Name(), p.Typ)
			q.Attrs = append(q.Attrs, p.Attrs...)
			params[i], args[i] = q, q
		}
		w := lir.NewFunc(k.Name, inner.Sig.RetType, params...)
		w.Parent = e.mod
		w.FuncAttrs = append(w.FuncAttrs, inner.FuncAttrs...)
		inner.SetName(fpEnvInner(k.Name))
		inner.Linkage = enum.LinkageInternal
		inner.FuncAttrs = append(inner.FuncAttrs, enum.FuncAttrNoInline)
		b := w.NewBlock("entry")
		var restore func()
		if x86 {
			slot := func(name string) *lir.InstAlloca {
				a := named(b.NewAlloca(types.I32), name)
				a.Align = 4
				return a
			}
			saved, clean := slot("mxcsr.caller"), slot("mxcsr.kernels")
			b.NewStore(llI32(mxcsrDefault), clean).Align = 4
			st := e.decl("llvm.x86.sse.stmxcsr", types.Void, i8p)
			ld := e.decl("llvm.x86.sse.ldmxcsr", types.Void, i8p)
			savedP := b.NewBitCast(saved, i8p)
			b.NewCall(st, savedP)
			b.NewCall(ld, b.NewBitCast(clean, i8p))
			restore = func() { b.NewCall(ld, savedP) }
		} else {
			get := lir.NewInlineAsm(types.NewPointer(types.NewFunc(types.I64)), "mrs $0, fpcr", "=r")
			get.SideEffect = true
			set := lir.NewInlineAsm(types.NewPointer(types.NewFunc(types.Void, types.I64)), "msr fpcr, $0", "r")
			set.SideEffect = true
			saved := named(b.NewCall(get), "fpcr.caller")
			b.NewCall(set, constant.NewInt(types.I64, 0))
			restore = func() { b.NewCall(set, saved) }
		}
		st := named(b.NewCall(inner, args...), "status")
		restore()
		b.NewRet(st)
		out = append(out, w)
	}
	return out
}

// mxcsrDAZ is MXCSR's denormals-are-zero bit (6): with it set, SSE and
// AVX arithmetic reads f32 subnormal operands as zero.
const mxcsrDAZ = 6

// defineFPDAZ: i32 @<prefix>.fp_daz() (rt.fp_daz) is MXCSR's DAZ bit of
// the calling thread, stored by stmxcsr (the llvm.x86.sse.stmxcsr
// intrinsic) into a stack slot: 1 when the thread reads denormal f32
// operands as zero. Kernels ask where a faster path passes values through
// f32 subnormals (bitsWiden's finite tiles). Since the entries set the
// default environment themselves (wrapEntries) no kernel thread has DAZ
// set, so it reads 0 there; it stays as the guard of those paths'
// assumption.
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
