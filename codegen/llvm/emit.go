// Package llvm prints a legalized kernel-IR module as self-contained LLVM 14
// IR through llir/llvm: one op → builder switch. It imports ir only; it must
// not import frontend, passes or registry.
//
// Emit expects the module that the legalization passes produce: no f16/bf16
// values in expressions (buffers may still be declared f16/bf16 and are
// carried as i16*) except f16 bits bitcast from i16 and widened to f32 at
// once (fpext, the CPU's native conversion), no ir.Call expressions.
// Anything else is reported as an error, never a panic. Vector values
// print one to one (see vector.go).
//
// Semantics beyond the kernel IR's own documentation:
//   - A kernel that falls off the end of its body returns 0.
//   - For evaluates Lo and Hi once, before the first iteration.
//   - u8 and bool are unsigned: division, remainder, >> and comparisons on
//     them use the unsigned instructions (udiv, urem, lshr, icmp ult...);
//     float→u8 uses fptoui. Every other integer type is signed.
//   - Convert to bool is "!= 0" (icmp ne / fcmp une).
//   - Float constants are emitted exactly; an f32 constant that is not
//     representable as float is rounded to nearest float first.
//   - Malloc allocates max(Size*elem, 1) bytes, so a zero-sized request is
//     not mistaken for an allocation failure. On failure the kernel frees
//     the buffers it malloc'd earlier (and has not freed) and returns the
//     code of the module error named "no_memory", else -1.
//   - Parallel For: the body is outlined into an internal
//     `void @<kernel>.par<N>(i8* ctx, i32 i, i8* scratch)` and run through
//     the module's runtime `@<prefix>.parallel_for`. The body's heap arrays
//     (Alloc with Heap) sit at fixed offsets of scratch, one block per
//     worker thread: parallel_for mallocs every worker's block (and the
//     thread ids) at once before any item runs, and when that fails it
//     runs none and the kernel returns NO_MEMORY as for Malloc. A continue that targets the parallel loop
//     itself ends that work item. Return, nested parallel loops,
//     assignments to outer vars, malloc and free of outer buffers inside a
//     parallel body are errors.
//
// Emit prints for x86-64 Linux; EmitFor prints the same IR for another
// target of Targets (aarch64 Linux): only the triple and data layout differ.
//
// The runtime emitted into every module links against libc and libpthread
// only (libm for tanh): <prefix>_set_num_threads (clamped to ThreadLimit),
// <prefix>_get_num_threads,
// <prefix>_strerror and the internal thread pool entry <prefix>.parallel_for.
package llvm

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/attnc/attnc/ir"
	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/enum"
	"github.com/llir/llvm/ir/types"
	"github.com/llir/llvm/ir/value"
)

// Target is a CPU the emitted module is for: its LLVM target triple and
// data layout (LLVM 14's for that triple). The IR is otherwise the same for
// every target: scalar loops that opt -O3 vectorizes for the target's SIMD
// (AVX2 or SSE on x86-64, NEON on aarch64), libc and pthread calls whose C
// types have the same LLVM types on every listed target.
type Target struct {
	Triple     string
	DataLayout string
	// Levels are its CPU levels, baseline first (see Level).
	Levels []Level
}

// Targets are the CPU targets Emit knows; the first is the default.
var Targets = []Target{
	{Triple: "x86_64-unknown-linux-gnu", DataLayout: "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128", Levels: x86Levels},
	{Triple: "aarch64-unknown-linux-gnu", DataLayout: "e-m:e-i8:8:32-i16:16:32-i64:64-i128:128-n32:64-S128", Levels: aarch64Levels},
}

// DefaultTriple is the triple of the default target, Targets[0].
const DefaultTriple = "x86_64-unknown-linux-gnu"

// LookupTarget returns the target of triple ("" is DefaultTriple), or an
// error naming the known triples.
func LookupTarget(triple string) (Target, error) {
	if triple == "" {
		triple = DefaultTriple
	}
	var known []string
	for _, t := range Targets {
		if t.Triple == triple {
			return t, nil
		}
		known = append(known, t.Triple)
	}
	return Target{}, fmt.Errorf("unknown target triple %q (known: %s)", triple, strings.Join(known, ", "))
}

// NoMemoryError is the name of the module error whose code a kernel returns
// when malloc fails (-1 when the module has no such error).
const NoMemoryError = "no_memory"

// emitError is the panic payload of e.fail; Emit turns it into an error.
type emitError struct{ msg string }

func (e *emitError) Error() string { return e.msg }

// Emit prints m as LLVM 14 IR text for the default target. The output is
// deterministic byte for byte.
func Emit(m *ir.Module) (string, error) { return EmitFor(m, Targets[0]) }

// EmitFor prints m as LLVM 14 IR text for target t.
func EmitFor(m *ir.Module, t Target) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			if ee, ok := r.(*emitError); ok {
				err = ee
				return
			}
			err = fmt.Errorf("llvm: internal error: %v", r)
		}
	}()
	if m == nil {
		return "", fmt.Errorf("llvm: nil module")
	}
	if t.Triple == "" || t.DataLayout == "" {
		return "", fmt.Errorf("llvm: target %+v has no triple or data layout", t)
	}
	e := newEmitter(m)
	e.target = t
	e.module()
	return e.mod.String(), nil
}

type kernelFn struct {
	k        *ir.Kernel
	fn       *lir.Func
	outlined []*lir.Func // parallel bodies, in order
}

type emitter struct {
	m      *ir.Module
	mod    *lir.Module
	target Target
	prefix string

	kernels   []*kernelFn
	byName    map[string]*kernelFn
	globals   map[string]bool // every global symbol name in use
	decls     map[string]*lir.Func
	noMemCode int64

	// runtime
	numThreads  *lir.Global
	getThreads  *lir.Func
	setThreads  *lir.Func
	strerror    *lir.Func
	parallelFor *lir.Func
	worker      *lir.Func
	onlineCPUs  *lir.Func
	msgs        []*lir.Global

	// CPU levels (levels.go)
	levelCache  *lir.Global
	cpuLevel    *lir.Func
	levelName   *lir.Func
	detectLevel *lir.Func
}

func newEmitter(m *ir.Module) *emitter {
	return &emitter{
		m:       m,
		mod:     lir.NewModule(),
		byName:  map[string]*kernelFn{},
		globals: map[string]bool{},
		decls:   map[string]*lir.Func{},
	}
}

func (e *emitter) fail(format string, args ...any) {
	panic(&emitError{msg: "llvm: " + fmt.Sprintf(format, args...)})
}

// declNames are the external functions a module may declare; kernel names
// must not collide with them.
var declNames = []string{"malloc", "free", "sysconf", "pthread_create", "pthread_join", "tanhf", "tanh", "getenv", "strcmp"}

func (e *emitter) reserve(name string) {
	if name == "" {
		e.fail("empty symbol name")
	}
	if e.globals[name] {
		e.fail("symbol %q is defined twice (kernel names must not collide with each other, with the runtime or with libc)", name)
	}
	e.globals[name] = true
}

func (e *emitter) module() {
	m := e.m
	e.prefix = m.Prefix
	if e.prefix == "" {
		e.prefix = m.Name
	}
	if e.prefix == "" {
		e.fail("module has neither a prefix nor a name")
	}
	e.mod.TargetTriple = e.target.Triple
	e.mod.DataLayout = e.target.DataLayout
	if m.Name != "" {
		e.mod.SourceFilename = m.Name
	}
	e.noMemCode = -1
	for _, ec := range m.Errors {
		if ec.Name == NoMemoryError {
			e.noMemCode = int64(ec.Code)
			break
		}
	}
	for _, n := range declNames {
		e.reserve(n)
	}
	e.declareRuntime()

	// Declare every kernel first so that CallStmt may call any of them.
	for _, k := range m.Kernels {
		if k == nil {
			e.fail("nil kernel in module %q", m.Name)
		}
		if strings.HasPrefix(k.Name, "llvm.") {
			e.fail("kernel %q: names starting with \"llvm.\" are reserved", k.Name)
		}
		e.reserve(k.Name)
		kf := &kernelFn{k: k, fn: e.kernelDecl(k)}
		e.kernels = append(e.kernels, kf)
		e.byName[k.Name] = kf
	}
	for _, kf := range e.kernels {
		e.kernelBody(kf)
	}
	e.defineRuntime()

	// Final function order: kernels each followed by their outlined parallel
	// bodies, the runtime, then external declarations sorted by name.
	var funcs []*lir.Func
	for _, kf := range e.kernels {
		funcs = append(funcs, kf.fn)
		funcs = append(funcs, kf.outlined...)
	}
	funcs = append(funcs, e.setThreads, e.getThreads, e.strerror, e.parallelFor, e.worker, e.onlineCPUs,
		e.cpuLevel, e.levelName, e.detectLevel)
	var names []string
	for n := range e.decls {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		funcs = append(funcs, e.decls[n])
	}
	e.mod.Funcs = funcs
}

// decl returns the declaration of an external function or intrinsic,
// creating it on first use.
func (e *emitter) decl(name string, ret types.Type, params ...types.Type) *lir.Func {
	if f, ok := e.decls[name]; ok {
		return f
	}
	var ps []*lir.Param
	for _, p := range params {
		ps = append(ps, lir.NewParam("", p))
	}
	f := lir.NewFunc(name, ret, ps...)
	f.Parent = e.mod
	e.decls[name] = f
	return f
}

// ---- types ----

var i8p = types.NewPointer(types.I8)

// valueType maps an expression type to its LLVM type: a vector type to
// <N x elem>, f16 (the source of a native widening) to half.
func (e *emitter) valueType(t ir.Type, what string) types.Type {
	if t.IsVector() {
		return types.NewVector(uint64(t.Lanes()), e.valueType(t.Elem(), what))
	}
	switch t {
	case ir.F16:
		return types.Half
	case ir.Bool:
		return types.I1
	case ir.U8:
		return types.I8
	case ir.I16:
		return types.I16
	case ir.I32:
		return types.I32
	case ir.I64:
		return types.I64
	case ir.F32:
		return types.Float
	case ir.F64:
		return types.Double
	}
	if t.IsStorageOnly() {
		e.fail("%s: type %s must be legalized to %s before LLVM codegen", what, t, ir.StorageOf(t).Carrier)
	}
	e.fail("%s: invalid type %s", what, typeName(t))
	return nil
}

// storageType maps an element type to the IR type its values have once
// loaded: f16 and bf16 are carried as i16 bit patterns.
func storageType(t ir.Type) ir.Type {
	if t.IsStorageOnly() {
		return ir.StorageOf(t).Carrier
	}
	return t
}

func typeName(t ir.Type) string {
	if int(t) <= int(ir.F64) {
		return t.String()
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

func (e *emitter) kernelDecl(k *ir.Kernel) *lir.Func {
	seen := map[string]bool{}
	var ps []*lir.Param
	for _, p := range k.Params {
		if p == nil {
			e.fail("kernel %s: nil parameter", k.Name)
		}
		if p.Name == "" {
			e.fail("kernel %s: parameter without a name", k.Name)
		}
		if seen[p.Name] {
			e.fail("kernel %s: parameter %q declared twice", k.Name, p.Name)
		}
		seen[p.Name] = true
		what := fmt.Sprintf("kernel %s: parameter %s", k.Name, p.Name)
		t := e.valueType(storageType(p.Elem), what)
		var lp *lir.Param
		if p.Buffer {
			lp = lir.NewParam(p.Name, types.NewPointer(t))
			lp.Attrs = append(lp.Attrs, enum.ParamAttrNoAlias)
		} else {
			lp = lir.NewParam(p.Name, t)
		}
		ps = append(ps, lp)
	}
	f := lir.NewFunc(k.Name, types.I32, ps...)
	f.Parent = e.mod
	f.FuncAttrs = append(f.FuncAttrs, enum.FuncAttrNoUnwind)
	if k.Level != "" {
		f.FuncAttrs = append(f.FuncAttrs, e.levelAttrs(k.Level)...)
	}
	return f
}

func (e *emitter) kernelBody(kf *kernelFn) {
	k := kf.k
	if k.Body == nil {
		e.fail("kernel %s has no body", k.Name)
	}
	f := newFnState(e, kf, kf.fn, "kernel "+k.Name)
	for _, p := range kf.fn.Params {
		f.names[p.LocalName] = true
	}
	f.start()
	scope := f.push()
	for i, p := range k.Params {
		lp := kf.fn.Params[i]
		if p.Buffer {
			scope[p.Name] = &binding{kind: bindBuf, t: storageType(p.Elem), v: lp, param: true}
		} else {
			scope[p.Name] = &binding{kind: bindValue, t: storageType(p.Elem), v: lp}
		}
	}
	f.block(k.Body, false)
	if f.cur != nil {
		f.cur.NewRet(constant.NewInt(types.I32, 0))
	}
}

// ---- constants ----

// intConst returns an integer constant of type t holding v truncated to t's
// width (printed signed).
func intConst(t ir.Type, v int64) value.Value {
	switch t {
	case ir.Bool:
		if v != 0 {
			return constant.True
		}
		return constant.False
	case ir.U8:
		return constant.NewInt(types.I8, int64(int8(v)))
	case ir.I16:
		return constant.NewInt(types.I16, int64(int16(v)))
	case ir.I32:
		return constant.NewInt(types.I32, int64(int32(v)))
	}
	return constant.NewInt(types.I64, v)
}

// floatConst is an exact floating-point literal. llir's own constant.Float
// goes through big.Float; this prints finite values as the shortest decimal
// that round-trips and inf/nan as LLVM's double-width hex form.
type floatConst struct {
	typ *types.FloatType
	v   float64 // for float: exactly representable as float32
}

func newFloatConst(t ir.Type, v float64) *floatConst {
	if t == ir.F32 {
		return &floatConst{typ: types.Float, v: float64(float32(v))}
	}
	return &floatConst{typ: types.Double, v: v}
}

func (c *floatConst) String() string   { return c.typ.String() + " " + c.Ident() }
func (c *floatConst) Type() types.Type { return c.typ }
func (c *floatConst) IsConstant()      {}
func (c *floatConst) Ident() string {
	v := c.v
	if v != v { // NaN: the canonical quiet NaN
		return "0x7FF8000000000000"
	}
	if v > 1.7976931348623157e308 || v < -1.7976931348623157e308 {
		if v > 0 {
			return "0x7FF0000000000000"
		}
		return "0xFFF0000000000000"
	}
	return fmtFloat(v)
}

// fmtFloat prints a finite float64 in LLVM's decimal literal syntax
// ([-]d.d…e±dd), the shortest form that parses back to v exactly.
func fmtFloat(v float64) string {
	s := strconv.FormatFloat(v, 'e', -1, 64)
	mant, exp, ok := strings.Cut(s, "e")
	if !ok {
		return s
	}
	if !strings.Contains(mant, ".") {
		mant += ".0"
	}
	return mant + "e" + exp
}
