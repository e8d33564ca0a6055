package ir

import (
	"errors"
	"fmt"
	"math"
)

// Run interprets kernel of m (after Verify(m)) with args, keyed by param
// name, and returns its status. It is the reference semantics of the kernel
// IR, as the LLVM backend executes it:
//   - a buffer arg is a []float32 (f32), []float64 (f64), []int32 (i32),
//     []int64 (i64), []uint16 (i16, f16, bf16 bit patterns; []int16 also for
//     i16), []byte (u8), []bool (bool) or nil; stores write through to it;
//   - a scalar arg is an int32 (any Go integer for integer params, float32 or
//     float64 for float params, bool for bool);
//   - integers wrap; Div and Rem truncate toward zero, x / 0 = x % 0 = 0, and
//     MIN / -1 = MIN, MIN % -1 = 0 (see IntDiv); shifts fail on an amount
//     outside [0, width); u8 and bool are unsigned (udiv, lshr, unsigned
//     compares), the rest signed;
//   - f32 arithmetic rounds to float32 after every op, f64 in float64;
//     f16/bf16 values compute in f32 and round back (nearest even); math
//     functions compute in float64 and round to the operand type;
//   - min(x, y) = x < y ? x : y, max(x, y) = x > y ? x : y; float compares
//     are ordered except != (true with NaN); neg and abs only touch the sign;
//   - Convert float→int truncates toward zero (NaN or out of range is an
//     error), int→float rounds to nearest even, u8/bool zero-extend, narrowing
//     truncates, →bool is != 0 (true for NaN); Bitcast keeps the bits;
//   - And/Or and Select evaluate all operands; For evaluates Lo and Hi once;
//     Parallel, Spread and Vector loops run serially in order; Continue ends
//     the iteration of the innermost For; Alloc and Malloc give zeroed arrays;
//   - Threads and Lanes loops run their iterations as threads that meet at
//     Barriers (the group) and Shuffles and MMAs (each warp of the module's LaneWidth), as on a
//     GPU (see spmd.go); a Barrier outside them is a no-op (a work item run
//     as one thread); Reduce folds in order; MatMul sums over k in order,
//     sets C outside the extents to NaN and rejects a nonzero A beyond the
//     k extent;
//     a kernel that falls off its end returns 0; CallStmt recurses;
//   - an out-of-bounds Load or Store, a null buffer, a use after Free or a
//     high-level Call (legalize first) is an error naming the buffer.
//
// Run never panics.
func Run(m *Module, kernel string, args map[string]any) (status int32, err error) {
	defer catch(&err)
	if err := Verify(m); err != nil {
		return 0, err
	}
	k := m.Kernel(kernel)
	if k == nil {
		return 0, fmt.Errorf("run: no kernel %s", kernel)
	}
	f := &frame{m: m, k: k, env: map[string]*binding{}}
	for _, p := range k.Params {
		a, ok := args[p.Name]
		if !ok {
			return 0, fmt.Errorf("run %s: missing arg %s", kernel, p.Name)
		}
		if p.Buffer {
			b, err := newBuffer(p.Name, p.Elem, a)
			if err != nil {
				return 0, fmt.Errorf("run %s: %v", kernel, err)
			}
			f.env[p.Name] = &binding{buf: b}
			continue
		}
		v, err := anyToVal(a, p.Elem)
		if err != nil {
			return 0, fmt.Errorf("run %s: arg %s: %v", kernel, p.Name, err)
		}
		f.env[p.Name] = &binding{v: v}
	}
	for name := range args {
		if k.Param(name) == nil {
			return 0, fmt.Errorf("run %s: unknown arg %s", kernel, name)
		}
	}
	_, status = f.block(k.Body)
	return status, nil
}

// EvalExpr evaluates e with the values of its names in env: int32 (i32),
// int64 (i64), float32 (f32), float64 (f64), bool, uint8 (u8), uint16 (i16,
// f16 and bf16 bit patterns), or a slice as in Run for buffers that e loads
// from. The result has the Go type that stands for e.Type() in that list.
func EvalExpr(e Expr, env map[string]any) (res any, err error) {
	defer catch(&err)
	var msg string
	VisitExpr(e, func(n Expr) {
		if m := nodeRule(n); m != "" && msg == "" {
			msg = m
		}
	})
	if msg != "" {
		return nil, errors.New(msg)
	}
	f := &frame{env: map[string]*binding{}}
	for name, x := range env {
		if b, err := newBuffer(name, Void, x); err == nil {
			f.env[name] = &binding{buf: b}
		} else {
			f.env[name] = &binding{raw: x}
		}
	}
	return valToAny(e.Type(), f.eval(e)), nil
}

// val is a value in canonical form: integers sign-extended to 64 bits (u8
// and bool zero-extended), floats as their IEEE bits (f16/bf16 in the low 16).
type val uint64

type interpError struct{ err error }

func catch(err *error) {
	if r := recover(); r != nil {
		if ie, ok := r.(interpError); ok {
			*err = ie.err
			return
		}
		*err = fmt.Errorf("BUG: interp: %v", r)
	}
}

type buffer struct {
	name  string
	data  any  // typed slice of a param, or []val for alloc/malloc
	t     Type // element type (Void for one the caller binds untyped)
	freed bool
}

func newBuffer(name string, t Type, x any) (*buffer, error) {
	b := &buffer{name: name, data: x, t: t}
	var ok bool
	switch x.(type) {
	case nil:
		return b, nil
	case []float32:
		ok = t == F32
	case []float64:
		ok = t == F64
	case []int32:
		ok = t == I32
	case []int64:
		ok = t == I64
	case []uint16:
		ok = t == I16 || t.IsStorageOnly() && t.Bits() == 16
	case []int16:
		ok = t == I16
	case []byte:
		ok = t == U8 || t.IsStorageOnly() && t.Bits() == 8
	case []bool:
		ok = t == Bool
	default:
		return nil, fmt.Errorf("arg %s: %T is not a buffer", name, x)
	}
	if !ok && t != Void {
		return nil, fmt.Errorf("arg %s: %T cannot hold %s elements", name, x, t)
	}
	return b, nil
}

func (b *buffer) len() int64 {
	switch s := b.data.(type) {
	case []val:
		return int64(len(s))
	case []float32:
		return int64(len(s))
	case []float64:
		return int64(len(s))
	case []int32:
		return int64(len(s))
	case []int64:
		return int64(len(s))
	case []uint16:
		return int64(len(s))
	case []int16:
		return int64(len(s))
	case []byte:
		return int64(len(s))
	case []bool:
		return int64(len(s))
	}
	return 0
}

func (f *frame) check(b *buffer, what string, i int64) {
	switch {
	case b.freed:
		f.fail("%s %s[%d]: buffer used after free", what, b.name, i)
	case b.data == nil:
		f.fail("%s %s[%d]: null buffer", what, b.name, i)
	case i < 0 || i >= b.len():
		f.fail("%s %s[%d]: index out of range (len %d)", what, b.name, i, b.len())
	}
}

func (f *frame) load(b *buffer, i int64, t Type) val {
	f.check(b, "load", i)
	switch s := b.data.(type) {
	case []val:
		return s[i]
	case []float32:
		return val(math.Float32bits(s[i]))
	case []float64:
		return val(math.Float64bits(s[i]))
	case []int32:
		return val(int64(s[i]))
	case []int64:
		return val(s[i])
	case []uint16:
		if t == I16 {
			return val(int64(int16(s[i])))
		}
		return val(s[i])
	case []int16:
		return val(int64(s[i]))
	case []byte:
		if t == I8 {
			return val(int64(int8(s[i])))
		}
		return val(s[i])
	case []bool:
		return b2v(s[i])
	}
	return 0
}

func (f *frame) store(b *buffer, i int64, v val) {
	f.check(b, "store", i)
	switch s := b.data.(type) {
	case []val:
		s[i] = v
	case []float32:
		s[i] = math.Float32frombits(uint32(v))
	case []float64:
		s[i] = math.Float64frombits(uint64(v))
	case []int32:
		s[i] = int32(v)
	case []int64:
		s[i] = int64(v)
	case []uint16:
		s[i] = uint16(v)
	case []int16:
		s[i] = int16(v)
	case []byte:
		s[i] = byte(v)
	case []bool:
		s[i] = v != 0
	}
}

type binding struct {
	v   val
	vec []val // the lanes of a vector value
	buf *buffer
	raw any // EvalExpr: a Go value converted at each use
}

type frame struct {
	m     *Module
	k     *Kernel // nil in EvalExpr
	env   map[string]*binding
	depth int
	thr   *spmdThread // the thread or lane this frame runs as, in a Threads or Lanes loop
}

func (f *frame) fail(format string, args ...any) {
	err := fmt.Errorf(format, args...)
	if f.k != nil {
		err = fmt.Errorf("kernel %s: %w", f.k.Name, err)
	}
	panic(interpError{err})
}

type flow uint8

const (
	flowNext flow = iota
	flowContinue
	flowReturn
)

type undo struct {
	name string
	prev *binding
}

func (f *frame) bind(u *[]undo, name string, b *binding) {
	*u = append(*u, undo{name, f.env[name]})
	f.env[name] = b
}

func (f *frame) restore(u []undo) {
	for i := len(u) - 1; i >= 0; i-- {
		if u[i].prev == nil {
			delete(f.env, u[i].name)
		} else {
			f.env[u[i].name] = u[i].prev
		}
	}
}

func (f *frame) block(b *Block) (flow, int32) {
	var u []undo
	for _, s := range b.Stmts {
		if fl, r := f.stmt(s, &u); fl != flowNext {
			f.restore(u)
			return fl, r
		}
	}
	f.restore(u)
	return flowNext, 0
}

func (f *frame) lookup(name string) *binding {
	b := f.env[name]
	if b == nil {
		f.fail("unknown name %s", name)
	}
	return b
}

func (f *frame) buffer(name string) *buffer {
	b := f.lookup(name)
	if b.buf == nil {
		f.fail("%s is not a buffer", name)
	}
	return b.buf
}

func (f *frame) index(e Expr) int64 { return int64(f.eval(e)) }

func (f *frame) stmt(s Stmt, u *[]undo) (flow, int32) {
	switch s := s.(type) {
	case *Block:
		return f.block(s)
	case *Let:
		f.bind(u, s.Name, f.value(s.Value))
	case *Var:
		f.bind(u, s.Name, f.value(s.Init))
	case *Assign:
		b := f.value(s.Value)
		dst := f.lookup(s.Name)
		dst.v, dst.vec = b.v, b.vec
	case *Alloc:
		f.bind(u, s.Name, &binding{buf: &buffer{name: s.Name, data: make([]val, s.Size), t: s.T}})
	case *Malloc:
		n := int64(f.eval(s.Size))
		if n < 0 || n > 1<<28 {
			f.fail("malloc %s: bad size %d", s.Name, n)
		}
		f.bind(u, s.Name, &binding{buf: &buffer{name: s.Name, data: make([]val, n), t: s.T}})
	case *Free:
		b := f.buffer(s.Name)
		if b.freed {
			f.fail("free %s: double free", s.Name)
		}
		b.freed = true
	case *Store:
		b := f.buffer(s.Buf)
		i := f.index(s.Index)
		if s.Value.Type().IsVector() {
			for k, x := range f.evalVec(s.Value) {
				f.store(b, i+int64(k), x)
			}
			break
		}
		f.store(b, i, f.eval(s.Value))
	case *Prefetch:
		f.check(f.buffer(s.Buf), "prefetch", f.index(s.Index))
	case *Copy:
		dst, src := f.buffer(s.Dst), f.buffer(s.Src)
		di, si := f.index(s.DstIndex), f.index(s.SrcIndex)
		for k := int64(0); k < int64(s.N); k++ {
			f.store(dst, di+k, f.load(src, si+k, I16)) // the type only matters for 16-bit bits
		}
	case *For:
		if s.Kind == Threads || s.Kind == Lanes {
			f.spmd(s)
			return flowNext, 0
		}
		lo, hi := int64(f.eval(s.Lo)), int64(f.eval(s.Hi))
		iv := &binding{}
		var lu []undo
		f.bind(&lu, s.Var, iv)
		for i := lo; i < hi; i++ {
			iv.v = val(i)
			if fl, r := f.block(s.Body); fl == flowReturn {
				f.restore(lu)
				return fl, r
			}
		}
		f.restore(lu)
	case *Reduce:
		f.bind(u, s.Name, &binding{v: f.reduce(s)})
	case *AsyncCommit, *AsyncWait:
		// Async copies complete when issued here (the CUDA emulator models
		// them as in flight until their wait).
	case *LdMatrix:
		f.ldmatrixStmt(s)
	case *Barrier:
		f.barrier()
	case *MMA:
		f.mmaStmt(s)
	case *MFMA:
		f.mfmaStmt(s)
	case *MatMul:
		f.matmul(s)
	case *If:
		if f.eval(s.Cond) != 0 {
			return f.block(s.Then)
		} else if s.Else != nil {
			return f.block(s.Else)
		}
	case *Return:
		return flowReturn, int32(f.eval(s.Value))
	case *Continue:
		return flowContinue, 0
	case *CallStmt:
		r := f.call(s)
		if s.Result != "" {
			f.bind(u, s.Result, &binding{v: val(int64(r))})
		}
	default:
		f.fail("unknown statement %T", s)
	}
	return flowNext, 0
}

// reduce folds s.Value over s.Var in order, starting from the identity.
func (f *frame) reduce(s *Reduce) val {
	t := s.Value.Type()
	acc := f.eval(s.Op.Identity(t))
	lo, hi := int64(f.eval(s.Lo)), int64(f.eval(s.Hi))
	iv := &binding{}
	var u []undo
	f.bind(&u, s.Var, iv)
	for i := lo; i < hi; i++ {
		iv.v = val(i)
		acc = f.binary(s.Op.BinOp(), t, acc, f.eval(s.Value))
	}
	f.restore(u)
	return acc
}

// matmul runs a MatMul in f32 (A and B widened from a storage type), summing
// over k in order. C elements of the static shape outside the extents
// become NaN (they are unspecified), and a nonzero A element beyond the k
// extent is an error.
func (f *frame) matmul(s *MatMul) {
	ext := func(e Expr, n int, what string) int64 {
		x := int64(f.eval(e))
		if x > int64(n) {
			f.fail("matmul %s: %s extent %d exceeds the static size %d", s.C, what, x, n)
		}
		return max(x, 0)
	}
	me, ne, ke := ext(s.MExt, s.M, "m"), ext(s.NExt, s.N, "n"), ext(s.KExt, s.K, "k")
	c, a, b := f.buffer(s.C), f.buffer(s.A), f.buffer(s.B)
	var rows *buffer
	if s.BRows != "" {
		rows = f.buffer(s.BRows)
	}
	get := func(buf *buffer, i int64) float32 { return math.Float32frombits(uint32(f.load(buf, i, F32))) }
	// An operand as stored (f16, bf16, 8-bit codes): each element widened.
	widened := func(op *buffer) func(*buffer, int64) float32 {
		if !op.t.IsStorageOnly() {
			return get
		}
		return func(buf *buffer, i int64) float32 {
			x := f.load(buf, i, op.t)
			if op.t == I8 {
				x = wrap(I8, int64(x)) // legalize-dtype stores i8 codes as u8 bits
			}
			return math.Float32frombits(uint32(f.convert(F32, op.t, x)))
		}
	}
	getA, getB := widened(a), widened(b)
	for m := int64(0); m < me; m++ {
		for k := ke; k < int64(s.K); k++ {
			if x := getA(a, m*int64(s.K)+k); x != 0 {
				f.fail("matmul %s: %s[%d, %d] = %g beyond the k extent %d must be 0", s.C, s.A, m, k, x, ke)
			}
		}
	}
	nan := val(math.Float32bits(float32(math.NaN())))
	for m := int64(0); m < int64(s.M); m++ {
		for n := int64(0); n < int64(s.N); n++ {
			ci := m*int64(s.N) + n
			if m >= me || n >= ne {
				f.store(c, ci, nan)
				continue
			}
			var sum float32
			for k := int64(0); k < ke; k++ {
				x := getA(a, m*int64(s.K)+k)
				bi := k*int64(s.N) + n
				if s.TransB {
					bi = n*int64(s.K) + k
				}
				if s.BRows != "" {
					r, c := k, n
					if s.TransB {
						r, c = n, k
					}
					bi = int64(f.load(rows, r, I64)) + c
				}
				if s.ZeroSkip && math.Float32bits(x) == 1<<31 {
					continue
				}
				y := getB(b, bi)
				if r := s.RotB; r != nil {
					pk, i := r.Pair(int(k))
					// The pair's element: the row's offset moved by pk - k.
					py := getB(b, bi+int64(pk)-k)
					c, sn := get(f.buffer(r.Cos), n*int64(r.Half)+int64(i)), get(f.buffer(r.Sin), n*int64(r.Half)+int64(i))
					y = r.Rotated(int(k), y, py, c, sn)
				}
				sum += float32(x * y) // rounded: no fused multiply-add
			}
			if s.Accumulate {
				sum = get(c, ci) + sum // C once, after the product (MatMul)
			}
			f.store(c, ci, val(math.Float32bits(sum)))
		}
	}
}

func (f *frame) call(s *CallStmt) int32 {
	if s.Fn == "rt.num_threads" {
		return InterpThreads
	}
	if s.Fn == "rt.cpu_level" {
		return InterpCPULevel
	}
	if s.Fn == "rt.fp_daz" {
		return InterpDAZ
	}
	if s.Fn == "rt.amx_mm32" {
		f.amxMM32(s)
		return 0
	}
	k := f.m.Kernel(s.Fn)
	if f.depth >= 200 {
		f.fail("call %s: recursion too deep", s.Fn)
	}
	g := &frame{m: f.m, k: k, env: map[string]*binding{}, depth: f.depth + 1}
	for i, p := range k.Params {
		if p.Buffer && IsNullArg(s.Args[i]) {
			g.env[p.Name] = &binding{buf: &buffer{name: p.Name, t: p.Elem}}
		} else if p.Buffer {
			g.env[p.Name] = &binding{buf: f.buffer(s.Args[i].(*Ref).Name)}
		} else {
			g.env[p.Name] = &binding{v: f.eval(s.Args[i])}
		}
	}
	_, r := g.block(k.Body)
	return r
}

// InterpThreads is what rt.num_threads returns in the interpreter.
var InterpThreads int32 = 1

// InterpCPULevel is what rt.cpu_level returns in the interpreter (the
// baseline level).
var InterpCPULevel int32

// InterpDAZ is what rt.fp_daz returns in the interpreter, whose f32
// arithmetic keeps subnormals (0).
var InterpDAZ int32

func b2v(b bool) val {
	if b {
		return 1
	}
	return 0
}

// value evaluates e into a binding: a scalar or a vector's lanes.
func (f *frame) value(e Expr) *binding {
	if e.Type().IsVector() {
		return &binding{vec: f.evalVec(e)}
	}
	return &binding{v: f.eval(e)}
}

func (f *frame) eval(e Expr) val {
	if t := e.Type(); t.IsVector() {
		f.fail("vector %s used as a scalar", t)
	}
	switch e := e.(type) {
	case *MulAdd, *VShuffle, *DotBF16:
		return f.evalVec(e)[0]
	case *Const:
		switch {
		case e.T == Bool:
			return b2v(e.Int != 0)
		case e.T.IsInt():
			return wrap(e.T, e.Int)
		}
		return fromF64(e.T, e.Float)
	case *Ref:
		b := f.lookup(e.Name)
		switch {
		case b.buf != nil:
			f.fail("buffer %s used as a value", e.Name)
		case b.raw != nil:
			v, err := anyToVal(b.raw, e.T)
			if err != nil {
				f.fail("%s: %v", e.Name, err)
			}
			return v
		}
		return b.v
	case *Binary:
		return f.binary(e.Op, e.X.Type(), f.eval(e.X), f.eval(e.Y))
	case *Unary:
		return f.unary(e.Op, e.X.Type(), f.eval(e.X))
	case *Select:
		c, x, y := f.eval(e.Cond), f.eval(e.X), f.eval(e.Y)
		if c != 0 {
			return x
		}
		return y
	case *Convert:
		return f.convert(e.To, e.X.Type(), f.eval(e.X))
	case *Bitcast:
		if e.X.Type().IsVector() { // a vector's lanes joined (regroup)
			return f.evalVec(e)[0]
		}
		bits := uint64(f.eval(e.X))
		if w := e.To.Bits(); w < 64 {
			bits &= 1<<w - 1
		}
		if e.To.IsFloat() {
			return val(bits)
		}
		return wrap(e.To, int64(bits))
	case *Load:
		b := f.buffer(e.Buf)
		return f.load(b, f.index(e.Index), e.T)
	case *Guarded:
		if f.eval(e.Cond) == 0 {
			return 0
		}
		return f.eval(e.X)
	case *NotNull:
		return b2v(f.buffer(e.Buf).data != nil)
	case *Shuffle:
		return f.shuffle(f.eval(e.X), e.Mask)
	case *Call:
		f.fail("call @%s cannot be interpreted (legalize it first)", e.Fn)
	}
	f.fail("unknown expression %T", e)
	return 0
}

// wrap truncates x to t's width in canonical form.
func wrap(t Type, x int64) val {
	switch t {
	case Bool:
		return val(x & 1)
	case U8:
		return val(uint8(x))
	case I16:
		return val(int64(int16(x)))
	case I32:
		return val(int64(int32(x)))
	case I8:
		return val(int64(int8(x)))
	}
	return val(x)
}

// smallFloat gives the exponent and mantissa widths of a storage-only
// float type (the dtype table's layout).
func smallFloat(t Type) (ebits, mbits int) {
	r := StorageOf(t)
	return r.ExpBits, r.MantBits
}

// toF64 returns the float value of canonical v of float type t (exact).
func toF64(t Type, v val) float64 {
	switch t {
	case F32:
		return float64(math.Float32frombits(uint32(v)))
	case F64:
		return math.Float64frombits(uint64(v))
	case E4M3, E5M2:
		return codeValue(t, uint8(v))
	}
	eb, mb := smallFloat(t)
	h := uint64(v)
	sign := h >> (eb + mb) & 1
	e := int(h >> mb & (1<<eb - 1))
	m := h & (1<<mb - 1)
	bias := 1<<(eb-1) - 1
	var x float64
	switch {
	case e == 1<<eb-1 && m == 0:
		x = math.Inf(1)
	case e == 1<<eb-1:
		return math.Float64frombits(sign<<63 | 0x7FF<<52 | 1<<51 | m<<(52-mb))
	case e == 0:
		x = math.Ldexp(float64(m), 1-bias-mb)
	default:
		x = math.Ldexp(float64(m|1<<mb), e-bias-mb)
	}
	if sign != 0 {
		x = -x
	}
	return x
}

// fromF64 rounds x to float type t (nearest even) in canonical form.
func fromF64(t Type, x float64) val {
	switch t {
	case F32:
		return val(math.Float32bits(float32(x)))
	case F64:
		return val(math.Float64bits(x))
	case E4M3, E5M2:
		return val(codeOf(t, float32(x)))
	}
	eb, mb := smallFloat(t)
	bits := math.Float64bits(x)
	sign := bits >> 63 << (eb + mb)
	inf := sign | (1<<eb-1)<<mb
	switch {
	case math.IsNaN(x):
		return val(inf | 1<<(mb-1) | bits&(1<<52-1)>>(52-mb))
	case math.IsInf(x, 0):
		return val(inf)
	case x == 0:
		return val(sign)
	}
	a := math.Abs(x)
	bias := 1<<(eb-1) - 1
	_, exp := math.Frexp(a)
	e := max(exp-1, 1-bias)
	n := uint64(math.RoundToEven(math.Ldexp(a, mb-e))) // < 2^(mb+1) + 1
	if n >= 1<<(mb+1) {
		n >>= 1
		e++
	}
	switch {
	case e > bias:
		return val(inf)
	case n < 1<<mb:
		return val(sign | n)
	}
	return val(sign | uint64(e+bias)<<mb | (n - 1<<mb))
}

// IntDiv is the IR's integer division on values already in their type's
// range (DESIGN §3): it truncates toward zero, x / 0 = 0, and MIN / -1
// overflows to -MIN, which wraps back to MIN in the operand type. It never
// traps; every backend and the reference compute the same.
func IntDiv(x, y int64) int64 {
	switch y {
	case 0:
		return 0
	case -1:
		return -x // MIN of i32 becomes 2^31, which wraps to MIN
	}
	return x / y
}

// IntRem is the remainder matching IntDiv: x % 0 = 0 and x % -1 = 0;
// otherwise it has the sign of x (truncated division).
func IntRem(x, y int64) int64 {
	if y == 0 || y == -1 {
		return 0
	}
	return x % y
}

func farith[F float32 | float64](op BinOp, x, y F) (F, bool) {
	switch op {
	case Add:
		return x + y, true
	case Sub:
		return x - y, true
	case Mul:
		return x * y, true
	case Div:
		return x / y, true
	case Rem:
		return F(math.Mod(float64(x), float64(y))), true
	case Min:
		if x < y || x != x {
			return x, true
		}
		return y, true
	case Max:
		if x > y || x != x {
			return x, true
		}
		return y, true
	}
	return 0, false
}

func fcmp[F float32 | float64](op BinOp, x, y F) (bool, bool) {
	switch op {
	case Lt:
		return x < y, true
	case Le:
		return x <= y, true
	case Gt:
		return x > y, true
	case Ge:
		return x >= y, true
	case Eq:
		return x == y, true
	case Ne:
		return x != y, true
	}
	return false, false
}

func (f *frame) binary(op BinOp, t Type, a, b val) val {
	if t.IsFloat() {
		var r val
		ok := true
		if op.IsCompare() {
			var c bool
			if t == F64 {
				c, ok = fcmp(op, toF64(t, a), toF64(t, b))
			} else {
				c, ok = fcmp(op, float32(toF64(t, a)), float32(toF64(t, b)))
			}
			r = b2v(c)
		} else if t == F64 {
			var z float64
			z, ok = farith(op, toF64(t, a), toF64(t, b))
			r = fromF64(t, z)
		} else {
			var z float32
			z, ok = farith(op, float32(toF64(t, a)), float32(toF64(t, b)))
			r = fromF64(t, float64(z))
		}
		if !ok {
			f.fail("operator %s does not apply to %s", op, t)
		}
		return r
	}
	x, y := int64(a), int64(b)
	switch op {
	case Add:
		return wrap(t, x+y)
	case Sub:
		return wrap(t, x-y)
	case Mul:
		return wrap(t, x*y)
	case Div:
		return wrap(t, IntDiv(x, y))
	case Rem:
		return wrap(t, IntRem(x, y))
	case Min:
		if x < y {
			return a
		}
		return b
	case Max:
		if x > y {
			return a
		}
		return b
	case Shl, Shr:
		if y < 0 || y >= int64(t.Bits()) {
			f.fail("shift amount %d out of range for %s", y, t)
		}
		if op == Shl {
			return wrap(t, x<<y)
		}
		return wrap(t, x>>y) // u8 is zero-extended: a logical shift
	case And:
		return wrap(t, x&y)
	case Or:
		return wrap(t, x|y)
	case Xor:
		return wrap(t, x^y)
	case Lt:
		return b2v(x < y)
	case Le:
		return b2v(x <= y)
	case Gt:
		return b2v(x > y)
	case Ge:
		return b2v(x >= y)
	case Eq:
		return b2v(x == y)
	case Ne:
		return b2v(x != y)
	}
	f.fail("unknown operator %d", op)
	return 0
}

var mathFns = map[UnOp]func(float64) float64{
	Exp: math.Exp, Log: math.Log, Tanh: math.Tanh, Sqrt: math.Sqrt,
	Floor: math.Floor, Exp2: math.Exp2, Sin: math.Sin, Cos: math.Cos,
}

func (f *frame) unary(op UnOp, t Type, a val) val {
	if t.IsFloat() {
		sign := val(1) << (t.Bits() - 1)
		switch op {
		case Neg:
			return a ^ sign
		case Abs:
			return a &^ sign
		}
		fn := mathFns[op]
		if fn == nil {
			f.fail("%s does not apply to %s", op, t)
		}
		x := fn(toF64(t, a))
		if t != F64 {
			x = float64(float32(x))
		}
		return fromF64(t, x)
	}
	x := int64(a)
	switch op {
	case Neg:
		return wrap(t, -x)
	case Abs:
		if x < 0 {
			return wrap(t, -x)
		}
		return a
	case Not:
		if t == Bool {
			return a ^ 1
		}
		return wrap(t, ^x)
	}
	f.fail("%s does not apply to %s", op, t)
	return 0
}

func (f *frame) convert(to, from Type, a val) val {
	isInt := func(t Type) bool { return t.IsInt() || t == Bool }
	switch {
	case to == from:
		return a
	case to == Bool && from.IsFloat():
		return b2v(toF64(from, a) != 0)
	case to == Bool:
		return b2v(a != 0)
	case to == I8 && from.IsFloat():
		// A storage-only code narrows as the dtype table says (nearest
		// even, saturated, NaN to 0), not by truncation.
		return wrap(I8, int64(codeOf(I8, float32(toF64(from, a)))))
	case isInt(from) && isInt(to):
		return wrap(to, int64(a))
	case isInt(from):
		x := int64(a)
		switch to {
		case F32:
			return val(math.Float32bits(float32(x)))
		case F64:
			return val(math.Float64bits(float64(x)))
		}
		return fromF64(to, float64(x))
	case to.IsInt():
		x := toF64(from, a)
		if math.IsNaN(x) {
			f.fail("convert nan to %s", to)
		}
		tr := math.Trunc(x)
		lo, hi := intRange(to)
		if tr < float64(lo) || tr >= float64(hi)+1 {
			f.fail("convert %g to %s: out of range", x, to)
		}
		return wrap(to, int64(tr))
	}
	return fromF64(to, toF64(from, a))
}

// anyToVal converts a Go value to canonical form for type t.
func anyToVal(x any, t Type) (val, error) {
	var i int64
	switch v := x.(type) {
	case bool:
		if t == Bool {
			return b2v(v), nil
		}
	case float32:
		if t == F32 {
			return val(math.Float32bits(v)), nil
		}
		if t.IsFloat() {
			return fromF64(t, float64(v)), nil
		}
	case float64:
		if t.IsFloat() {
			return fromF64(t, v), nil
		}
	case uint16:
		switch {
		case t.IsStorageOnly() && t.Bits() == 16:
			return val(v), nil
		case t == I16:
			return val(int64(int16(v))), nil
		}
		i = int64(v)
	case int:
		i = int64(v)
	case int64:
		i = v
	case int32:
		i = int64(v)
	case int16:
		i = int64(v)
	case uint8:
		switch t {
		case E4M3, E5M2:
			return val(v), nil
		case I8:
			return val(int64(int8(v))), nil
		}
		i = int64(v)
	case int8:
		i = int64(v)
	}
	switch x.(type) {
	case int, int64, int32, int16, int8, uint8, uint16:
		if t.IsInt() {
			if lo, hi := intRange(t); i < lo || i > hi {
				return 0, fmt.Errorf("%d out of range for %s", i, t)
			}
			return val(i), nil
		}
	}
	return 0, fmt.Errorf("cannot use %T as %s", x, t)
}

// valToAny converts canonical v of type t to its Go value.
func valToAny(t Type, v val) any {
	if t.IsStorageOnly() && t.Bits() == 16 {
		return uint16(v)
	}
	switch t {
	case Bool:
		return v != 0
	case U8, E4M3, E5M2:
		return uint8(v)
	case I8:
		return int8(v)
	case I16:
		return uint16(v)
	case I32:
		return int32(v)
	case I64:
		return int64(v)
	case F32:
		return math.Float32frombits(uint32(v))
	case F64:
		return math.Float64frombits(uint64(v))
	}
	return nil
}

// amxMM32 is rt.amx_mm32: each block of the grid, steps of AMXBlockStep
// into a 32×32 accumulator that starts at zero, stored to C's block, or
// added to it (one f32 addition an element) when acc is nonzero.
func (f *frame) amxMM32(s *CallStmt) {
	a, b, c := f.buffer(s.Args[0].(*Ref).Name), f.buffer(s.Args[3].(*Ref).Name), f.buffer(s.Args[6].(*Ref).Name)
	arg := func(i int) int64 { return int64(f.eval(s.Args[i])) }
	aoff, lda, boff, ldb, coff, ldc, steps := arg(1), arg(2), arg(4), arg(5), arg(7), arg(8), arg(9)
	mblocks, nblocks, accumulate := arg(10), arg(11), arg(12) != 0
	for j := int64(0); j < nblocks; j++ {
		for i := int64(0); i < mblocks; i++ {
			var acc [32][32]float32
			var ap [32][16]uint32
			var bp [16][32]uint32
			ao, bo, co := aoff+32*i*lda, boff+32*j, coff+32*i*ldc+32*j
			for st := int64(0); st < steps; st++ {
				for m := range int64(32) {
					for k := range int64(16) {
						ap[m][k] = uint32(f.load(a, ao+m*lda+16*st+k, I32))
					}
				}
				for k := range int64(16) {
					for n := range int64(32) {
						bp[k][n] = uint32(f.load(b, bo+(16*st+k)*ldb+n, I32))
					}
				}
				AMXBlockStep(&acc, &ap, &bp)
			}
			for m := range int64(32) {
				for n := range int64(32) {
					v := acc[m][n]
					if accumulate {
						v += math.Float32frombits(uint32(f.load(c, co+m*ldc+n, F32)))
					}
					f.store(c, co+m*ldc+n, val(math.Float32bits(v)))
				}
			}
		}
	}
}
