// Package llvm is an op → LLVM IR builder: it prints a legalized
// kernel-IR module as self-contained LLVM 14 IR through llir/llvm, one op
// → builder switch, for the Target it is handed — a triple, a data layout,
// per-kernel function attributes and a Runtime, all plain inputs. It knows
// no machine: the CPU levels, the CPUID dispatch, the thread pool, strerror
// and the architectures (triples and data layouts) are the CPU target's
// (targets/cpu), which drives it and adds the runtime. It imports ir only;
// it must not import frontend, passes, registry or a target package.
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
//     `void @<kernel>.par<N>(i8* ctx, i32 i, i8* scratch)` (BodyType) and
//     run through the runtime's ParallelFor. The body's heap arrays (Alloc
//     with Heap) sit at fixed offsets of scratch (HeapLayout), one block
//     per worker thread; when the pool cannot allocate the blocks it runs
//     no item and the kernel returns NO_MEMORY as for Malloc. A continue
//     that targets the parallel loop itself ends that work item. Return,
//     nested parallel loops, assignments to outer vars, malloc and free of
//     outer buffers inside a parallel body are errors.
//   - `call rt.NAME` calls the runtime's function NAME (Runtime.Func).
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

// Target is what the builder is told about the machine it prints for: it
// knows no machine itself. The target package that drives it (targets/cpu)
// chooses the triple, the data layout and each kernel's attributes, and
// adds its runtime.
type Target struct {
	Triple     string // LLVM target triple of the module
	DataLayout string // LLVM data layout of the triple
	// Attrs are more function attributes of a kernel, by kernel name (the
	// CPU target: its level's "target-cpu" and "target-features"), given
	// to the kernel and to every function outlined from it, after nounwind.
	Attrs map[string][]Attr
	// Runtime is the code the target defines around the kernels (a thread
	// pool, status messages); nil for none, and then a parallel loop or a
	// `call rt.NAME` is an error.
	Runtime Runtime
}

// Attr is one function attribute: "key"="value".
type Attr struct{ Key, Value string }

// Runtime is the code a target adds to every module around the kernels.
// Its methods report a problem with Builder.Fail.
type Runtime interface {
	// Declare reserves the runtime's symbols and makes its globals and
	// functions, before the kernels are built.
	Declare(b *Builder)
	// Func is the function a `call rt.NAME` statement calls: i32 (), or
	// nil when the runtime has no such function.
	Func(name string) *lir.Func
	// ParallelFor is the function a parallel loop runs its outlined body
	// through (see BodyType): i32 (i32 n, BodyType body, i8* ctx, i64
	// scratch, i32 run), scratch being the bytes of heap arrays each worker
	// needs (HeapLayout, aligned to HeapAlign) and run the loop's
	// ir.For.Run (at least 1: consecutive items that belong together); 0
	// when every item ran, nonzero when no item ran because the scratch
	// could not be had. nil when the runtime has no pool.
	ParallelFor() *lir.Func
	// Define writes the bodies once the kernels are built and returns the
	// runtime's functions in the order they follow the kernels.
	Define(b *Builder) []*lir.Func
}

// BodyType is the type of a parallel loop's outlined body: void (i8* ctx,
// i32 index, i8* scratch), scratch being the worker's block of heap arrays.
var BodyType = types.NewPointer(types.NewFunc(types.Void, i8p, types.I32, i8p))

// Builder is the module being built, as a Runtime sees it.
type Builder struct{ e *emitter }

// Module is the LLVM module the kernels are printed into.
func (b *Builder) Module() *lir.Module { return b.e.mod }

// IR is the kernel-IR module being printed.
func (b *Builder) IR() *ir.Module { return b.e.m }

// KernelFunc is the function of kernel name (built before the runtime is
// defined), or nil when the module has no such kernel.
func (b *Builder) KernelFunc(name string) *lir.Func {
	if kf := b.e.byName[name]; kf != nil {
		return kf.fn
	}
	return nil
}

// Prefix is the module's symbol prefix (its name when it has none).
func (b *Builder) Prefix() string { return b.e.prefix }

// Reserve claims a global symbol name; a name claimed twice fails the
// build (kernel names must not collide with the runtime's or with libc's).
func (b *Builder) Reserve(name string) { b.e.reserve(name) }

// Decl is the declaration of an external function or intrinsic, made on
// first use; declarations follow the defined functions, sorted by name.
func (b *Builder) Decl(name string, ret types.Type, params ...types.Type) *lir.Func {
	return b.e.decl(name, ret, params...)
}

// Fail stops the build with an error.
func (b *Builder) Fail(format string, args ...any) { b.e.fail(format, args...) }

// NoMemoryError is the name of the module error whose code a kernel returns
// when malloc fails (-1 when the module has no such error).
const NoMemoryError = "no_memory"

// emitError is the panic payload of e.fail; Emit turns it into an error.
type emitError struct{ msg string }

func (e *emitError) Error() string { return e.msg }

// Emit prints m as LLVM 14 IR text for target t. The output is
// deterministic byte for byte.
func Emit(m *ir.Module, t Target) (out string, err error) {
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
		return "", fmt.Errorf("llvm: target %q has no triple or data layout", t.Triple)
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
	nPar     int         // parallel loops outlined so far (names .par0, .par1, ...)
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

	pool *lir.Func // the runtime's ParallelFor, nil without one
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

// declNames are the external functions the kernels may call; kernel names
// must not collide with them.
var declNames = []string{"malloc", "free", "tanhf", "tanh"}

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
	rt := e.target.Runtime
	if rt != nil {
		rt.Declare(&Builder{e})
		e.pool = rt.ParallelFor()
	}

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
	var runtime []*lir.Func
	if rt != nil {
		runtime = rt.Define(&Builder{e})
	}

	// Final function order: kernels each followed by their outlined parallel
	// bodies, the runtime's functions, then external declarations sorted by
	// name.
	var funcs []*lir.Func
	for _, kf := range e.kernels {
		funcs = append(funcs, kf.fn)
		funcs = append(funcs, kf.outlined...)
	}
	funcs = append(funcs, runtime...)
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
	f.FuncAttrs = append(f.FuncAttrs, e.attrs(k)...)
	return f
}

// attrs are the attributes the target gives kernel k and the functions
// outlined from it.
func (e *emitter) attrs(k *ir.Kernel) []lir.FuncAttribute {
	var out []lir.FuncAttribute
	for _, a := range e.target.Attrs[k.Name] {
		out = append(out, lir.AttrPair{Key: a.Key, Value: a.Value})
	}
	return out
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
