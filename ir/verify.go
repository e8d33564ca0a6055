package ir

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Verify checks the invariants of every kernel of m (see VerifyKernel) and
// that kernel names are unique. It returns the first violation.
func Verify(m *Module) error {
	if m == nil {
		return errors.New("nil module")
	}
	if n := m.Lanes; n != 0 && (n < 2 || n > MaxWarpLanes || n&(n-1) != 0) {
		return fmt.Errorf("module %s: lanes %d, want a power of two from 2 to %d", m.Name, n, MaxWarpLanes)
	}
	seen := map[string]bool{}
	for _, k := range m.Kernels {
		if k != nil {
			if seen[k.Name] {
				return fmt.Errorf("kernel %s: duplicate kernel name", k.Name)
			}
			seen[k.Name] = true
		}
		if err := VerifyKernel(k, m); err != nil {
			return err
		}
	}
	return nil
}

// MustVerify panics with "BUG: <pass>: <error>" when m breaks an invariant.
func MustVerify(pass string, m *Module) {
	if err := Verify(m); err != nil {
		panic("BUG: " + pass + ": " + err.Error())
	}
}

// VerifyKernel checks k's invariants and returns the first violation as
// "kernel NAME: message in `statement`":
//   - params have unique names and non-void types; every declared name is
//     an identifier (IsIdent; CheckNames checks the module-level names);
//   - every Ref, Load, Store, Assign and Free names a declaration in scope
//     (params, let, var, loop vars, alloc, malloc, call results; blocks nest
//     scopes) whose type matches Ref.T / Load.T / the stored value (a
//     storage-only element, f16 or bf16, may also be read and written as
//     its carrier's bits); a Ref to a buffer has the buffer's element type;
//   - no declaration redeclares a visible name (sibling blocks may reuse one);
//   - expressions are well typed: binary operands have equal types; the
//     operators + - * / % min max and ordered compares take ints or floats, << >> ints,
//     & | ^ bools or ints, == != also bools; neg and abs take ints or floats,
//     not bools or ints, the math functions floats; Select has a bool
//     condition and equal arms; Bitcast keeps the width; Load indices are
//     i32 or i64; integer constants fit their type;
//   - For bounds are i32, If conditions bool, Return values i32; a For's
//     Next has a bool condition and substitutes distinct scalars in scope
//     (not its own variable) by values of their types;
//   - Assign targets a Var; Free a Malloc; Alloc sizes are > 0;
//   - a Parallel For body holds no Return and no Parallel For and assigns
//     no var declared outside it; Continue appears only inside a For (it
//     targets the innermost one; in a parallel body it ends the work item);
//   - Threads, Spread and Lanes bodies likewise assign no outer var and do
//     not return; a Continue never targets a Spread or Lanes loop; a Spread
//     holds no Parallel loop and sits in no Threads or Lanes loop; a Lanes
//     loop runs 0 .. m.LaneWidth() directly inside a Spread loop;
//   - Barriers sit in a Threads loop or in a work item's own body (outside
//     any Spread); Shuffles and MMAs in a Threads or Lanes loop; a
//     shuffle's mask is below the lane width; MMA and LdMatrix (NVIDIA's
//     m16n8k16 and m8n8 fragments) only in modules of 32 lanes;
//   - Reduce bounds are i32 and its value an int or a float (Var is in
//     scope in the value only); MatMul operands are f32 arrays or buffers
//     (A and B may hold a storage type) large enough for the static shape, with
//     i32 extents;
//   - CallStmt names a kernel of m with as many params as args, scalar args
//     have the param's type and buffer args are Refs to buffers of the same
//     element type, or NULL (IsNullArg) for a param declared null (m == nil
//     skips these call checks).
//
// Range vars need no declaration; Range bounds are checked as expressions in
// the scope of the loop body's header (the loop var included).
func VerifyKernel(k *Kernel, m *Module) (err error) {
	if k == nil {
		return errors.New("nil kernel")
	}
	v := &verifier{m: m, k: k}
	defer func() {
		if r := recover(); r != nil {
			ve, ok := r.(verifyError)
			if !ok {
				panic(r)
			}
			err = errors.New(ve.msg)
		}
	}()
	v.kernel()
	return nil
}

type declKind uint8

const (
	dParam  declKind = iota // scalar param
	dBuffer                 // buffer param
	dLet
	dVar
	dLoop
	dAlloc
	dMalloc
	dResult // CallStmt result
	dAny    // ParseExpr scope entry: scalar or buffer
)

// decl is what a name in scope stands for.
type decl struct {
	kind declKind
	t    Type // value type, or element type of a buffer
	par  int  // enclosing region loops (parallel, threads, spread, lanes) at the declaration
	size int  // elements of an alloc (0: unknown)
}

func (d decl) isBuffer() bool {
	return d.kind == dBuffer || d.kind == dAlloc || d.kind == dMalloc || d.kind == dAny
}

func intRange(t Type) (lo, hi int64) {
	switch t {
	case I16:
		return -1 << 15, 1<<15 - 1
	case I32:
		return -1 << 31, 1<<31 - 1
	case U8:
		return 0, 255
	case I8:
		return -1 << 7, 1<<7 - 1
	}
	return -1 << 63, 1<<63 - 1
}

// nodeRule checks the typing rule of e's own node (its children are assumed
// checked) and returns a description of the violation, or "".
func nodeRule(e Expr) string {
	switch e := e.(type) {
	case nil:
		return "missing expression"
	case *Const:
		switch {
		case e.T == Void:
			return "constant of type void"
		case e.T == Bool && e.Int != 0 && e.Int != 1:
			return fmt.Sprintf("bool constant %d, want 0 or 1", e.Int)
		case e.T.IsInt():
			if lo, hi := intRange(e.T.Elem()); e.Int < lo || e.Int > hi {
				return fmt.Sprintf("constant %d out of range for %s", e.Int, e.T)
			}
		}
	case *Binary:
		if e.X == nil || e.Y == nil {
			return fmt.Sprintf("operator %s: missing operand", e.Op)
		}
		x, y := e.X.Type(), e.Y.Type()
		if x != y {
			return fmt.Sprintf("type mismatch: %s %s %s", x, e.Op, y)
		}
		var ok bool
		switch {
		case e.Op <= Max:
			ok = x.IsInt() || x.IsFloat()
		case e.Op == Shl || e.Op == Shr:
			ok = x.IsInt()
		case e.Op <= Xor: // And, Or, Xor
			ok = x.Elem() == Bool || x.IsInt()
		case e.Op == Eq || e.Op == Ne:
			ok = x.Elem() == Bool || x.IsInt() || x.IsFloat()
		default: // ordered comparisons
			ok = x.IsInt() || x.IsFloat()
		}
		if !ok {
			return fmt.Sprintf("operator %s does not apply to %s", e.Op, x)
		}
	case *Unary:
		if e.X == nil {
			return fmt.Sprintf("%s: missing operand", e.Op)
		}
		x := e.X.Type()
		var ok bool
		switch e.Op {
		case Neg, Abs:
			ok = x.IsInt() || x.IsFloat()
		case Not:
			ok = x.Elem() == Bool || x.IsInt()
		default:
			ok = x.IsFloat()
		}
		if !ok {
			return fmt.Sprintf("%s does not apply to %s", e.Op, x)
		}
	case *Select:
		if e.Cond == nil || e.X == nil || e.Y == nil {
			return "select: missing operand"
		}
		if c := e.Cond.Type(); c.Elem() != Bool {
			return fmt.Sprintf("select condition is %s, want bool", c)
		}
		if x, y := e.X.Type(), e.Y.Type(); x != y || x == Void {
			return fmt.Sprintf("select arms have types %s and %s, want equal", x, y)
		}
	case *Convert:
		if e.X == nil {
			return "convert: missing operand"
		}
		if e.To == Void || e.X.Type() == Void {
			return fmt.Sprintf("convert from %s to %s", e.X.Type(), e.To)
		}
	case *Bitcast:
		if e.X == nil {
			return "bitcast: missing operand"
		}
		if x := e.X.Type(); x.Bits() != e.To.Bits() || x == Void {
			return fmt.Sprintf("bitcast from %s to %s changes width (%d to %d bits)", x, e.To, x.Bits(), e.To.Bits())
		}
	case *Load:
		if e.Index == nil {
			return fmt.Sprintf("load %s: missing index", e.Buf)
		}
		if t := e.Index.Type(); t != I32 && t != I64 {
			return fmt.Sprintf("index of %s is %s, want i32 or i64", e.Buf, t)
		}
	case *Guarded:
		if e.Cond == nil || e.X == nil {
			return "guarded: missing operand"
		}
		if c := e.Cond.Type(); c != Bool {
			return fmt.Sprintf("guarded condition is %s, want bool", c)
		}
		if _, ok := e.X.(*Load); !ok {
			return fmt.Sprintf("guarded reads %T, want a load", e.X)
		}
	case *ParamRead:
		return fmt.Sprintf("param %s read in a kernel (lowering turns it into a guarded load)", e.Name)
	case *MulAdd, *VShuffle, *DotBF16:
		return vectorRule(e)
	case *Call:
		if e.Fn == "" {
			return "call without a function name"
		}
		if e.T == Void {
			return fmt.Sprintf("call @%s has type void", e.Fn)
		}
		for _, a := range e.Args {
			if a == nil {
				return fmt.Sprintf("call @%s: missing argument", e.Fn)
			}
		}
	}
	return vectorRule(e)
}

type verifyError struct{ msg string }

type verifier struct {
	m      *Module
	k      *Kernel
	scopes []map[string]decl
	kinds  []LoopKind // kinds of the enclosing For statements, outermost first
	par    int        // enclosing Parallel For statements
	thr    int        // enclosing Threads For statements
	spr    int        // enclosing Spread For statements
	lanes  int        // enclosing Lanes For statements
	region int        // enclosing region loops: parallel, threads, spread, lanes
	cur    Stmt       // statement being checked, for messages
}

// regionName names the innermost loop whose body may not assign outer vars.
func (v *verifier) regionName() string {
	for i := len(v.kinds) - 1; i >= 0; i-- {
		switch v.kinds[i] {
		case Parallel, Threads, Spread, Lanes:
			return v.kinds[i].String()
		}
	}
	return "parallel"
}

func (v *verifier) fail(format string, args ...any) {
	msg := fmt.Sprintf("kernel %s: ", v.k.Name) + fmt.Sprintf(format, args...)
	if v.cur != nil {
		if s := stmtHead(v.cur); s != "" {
			msg += " in `" + s + "`"
		}
	}
	panic(verifyError{msg})
}

// stmtHead is the first line of s's text form ("" if s cannot be printed).
func stmtHead(s Stmt) (head string) {
	defer func() {
		if recover() != nil {
			head = ""
		}
	}()
	head, _, _ = strings.Cut(StmtString(s), "\n")
	return strings.TrimSpace(head)
}

func (v *verifier) lookup(name string) (decl, bool) {
	for i := len(v.scopes) - 1; i >= 0; i-- {
		if d, ok := v.scopes[i][name]; ok {
			return d, true
		}
	}
	return decl{}, false
}

func (v *verifier) declare(name string, kind declKind, t Type) {
	if name == "" {
		v.fail("declaration without a name")
	}
	if !IsIdent(name) {
		v.fail("%s %q is not an identifier", declKindNames[kind], name)
	}
	if d, ok := v.lookup(name); ok {
		v.fail("redeclaration of %s (already a %s in scope)", name, declKindNames[d.kind])
	}
	if t == Void {
		v.fail("%s %s has type void", declKindNames[kind], name)
	}
	v.scopes[len(v.scopes)-1][name] = decl{kind: kind, t: t, par: v.region}
}

func (v *verifier) kernel() {
	ps := map[string]decl{}
	v.scopes = []map[string]decl{ps}
	for _, p := range v.k.Params {
		switch {
		case p == nil:
			v.fail("nil param")
		case p.Name == "":
			v.fail("param without a name")
		case !IsIdent(p.Name):
			v.fail("param %q is not an identifier", p.Name)
		case p.Elem == Void:
			v.fail("param %s has type void", p.Name)
		}
		if _, dup := ps[p.Name]; dup {
			v.fail("duplicate param %s", p.Name)
		}
		kind := dParam
		if p.Buffer {
			kind = dBuffer
		}
		ps[p.Name] = decl{kind: kind, t: p.Elem}
	}
	if v.k.Body == nil {
		v.fail("missing body")
	}
	v.block(v.k.Body)
}

func (v *verifier) block(b *Block) {
	v.scopes = append(v.scopes, map[string]decl{})
	for _, s := range b.Stmts {
		v.stmt(s)
	}
	v.scopes = v.scopes[:len(v.scopes)-1]
}

func (v *verifier) buffer(name, what string) decl {
	d, ok := v.lookup(name)
	if !ok {
		v.fail("%s unknown buffer %s", what, name)
	}
	if !d.isBuffer() {
		v.fail("%s %s, which is a %s, not a buffer", what, name, declKindNames[d.kind])
	}
	return d
}

func (v *verifier) stmt(s Stmt) {
	v.cur = s
	switch s := s.(type) {
	case *Block:
		if s == nil {
			v.fail("nil block")
		}
		v.block(s)
	case *Let:
		v.expr(s.Value)
		v.declare(s.Name, dLet, s.Value.Type())
	case *Var:
		v.expr(s.Init)
		v.declare(s.Name, dVar, s.Init.Type())
	case *Assign:
		d, ok := v.lookup(s.Name)
		if !ok {
			v.fail("assign to undeclared %s", s.Name)
		}
		if d.kind != dVar {
			v.fail("assign to %s %s, want a var", declKindNames[d.kind], s.Name)
		}
		if d.par < v.region {
			v.fail("%s loop body assigns var %s declared outside it", v.regionName(), s.Name)
		}
		v.expr(s.Value)
		if t := s.Value.Type(); t != d.t {
			v.fail("assign %s to %s var %s: type mismatch", t, d.t, s.Name)
		}
	case *Alloc:
		if s.Size <= 0 {
			v.fail("alloc %s: size %d, want > 0", s.Name, s.Size)
		}
		if s.Shared && (v.par != 1 || v.thr != 0 || v.spr != 0) {
			v.fail("shared alloc %s must be in a parallel loop, outside its threads loop", s.Name)
		}
		if s.Heap && (v.par != 1 || v.thr != 0 || s.Shared) {
			v.fail("heap alloc %s must be in a parallel loop, outside any threads loop, and not shared", s.Name)
		}
		v.declare(s.Name, dAlloc, s.T)
		v.scopes[len(v.scopes)-1][s.Name] = decl{kind: dAlloc, t: s.T, par: v.region, size: s.Size}
	case *Copy:
		v.expr(s.DstIndex)
		v.expr(s.SrcIndex)
		d, src := v.buffer(s.Dst, "copy to"), v.buffer(s.Src, "copy from")
		if d.t.Bits() != src.t.Bits() {
			v.fail("copy between %s and %s elements", d.t, src.t)
		}
		if s.N <= 0 {
			v.fail("copy of %d elements", s.N)
		}
		if s.Async && (s.N*d.t.Bits() != 128 || d.kind != dAlloc || src.kind == dAlloc) {
			v.fail("copy.async %s = %s x %d: want 16 bytes from a buffer into a local (shared) array", s.Dst, s.Src, s.N)
		}
		for _, i := range []Expr{s.DstIndex, s.SrcIndex} {
			if t := i.Type(); t != I32 && t != I64 {
				v.fail("copy index is %s, want i32 or i64", t)
			}
		}
	case *AsyncCommit:
	case *AsyncWait:
		if s.Pending < 0 {
			v.fail("async.wait %d: want a pending group count >= 0", s.Pending)
		}
	case *LdMatrix:
		v.expr(s.Index)
		if v.thr == 0 && v.lanes == 0 {
			v.fail("ldmatrix outside a threads or lanes loop")
		}
		v.fragmentLanes("ldmatrix")
		if s.N != 1 && s.N != 2 && s.N != 4 {
			v.fail("ldmatrix.x%d, want x1, x2 or x4", s.N)
		}
		if d := v.buffer(s.Dst, "ldmatrix into"); d.t != I32 || d.kind != dAlloc || d.size < s.N {
			v.fail("ldmatrix into %s: want a local i32 array of at least %d elements", s.Dst, s.N)
		}
		if d := v.buffer(s.Src, "ldmatrix from"); d.t.Bits() != 16 || d.kind != dAlloc {
			v.fail("ldmatrix from %s: want a local (shared) array of 16-bit elements, not %s", s.Src, d.t)
		}
		if t := s.Index.Type(); t != I32 {
			v.fail("ldmatrix index is %s, want i32", t)
		}
	case *Barrier:
		if v.spr > 0 || v.lanes > 0 || (v.thr == 0 && v.par == 0) {
			v.fail("barrier outside a threads loop or a work item's own body")
		}
	case *Reduce:
		v.expr(s.Lo)
		v.expr(s.Hi)
		if s.Lo.Type() != I32 || s.Hi.Type() != I32 {
			v.fail("reduce %s: bounds are %s and %s, want i32", s.Name, s.Lo.Type(), s.Hi.Type())
		}
		v.scopes = append(v.scopes, map[string]decl{})
		v.declare(s.Var, dLoop, I32)
		v.expr(s.Value)
		v.scopes = v.scopes[:len(v.scopes)-1]
		if t := s.Value.Type(); !t.IsInt() && !t.IsFloat() || t.IsVector() {
			v.fail("reduce %s of %s, want an int or a float", s.Name, t)
		}
		v.declare(s.Name, dLet, s.Value.Type())
	case *MatMul:
		v.matmul(s)
	case *MMA:
		if v.thr == 0 && v.lanes == 0 {
			v.fail("mma outside a threads or lanes loop")
		}
		v.fragmentLanes("mma")
		if r := StorageOf(s.In); r == nil || !r.TensorCore {
			v.fail("mma input type %s is not a tensor-core dtype", s.In)
		}
		for _, x := range []struct {
			name string
			t    Type
		}{{s.D, F32}, {s.A, I32}, {s.B, I32}} {
			if d := v.buffer(x.name, "mma operand"); d.t != x.t {
				v.fail("mma operand %s has %s elements, want %s", x.name, d.t, x.t)
			}
		}
	case *MFMA:
		if v.thr == 0 && v.lanes == 0 {
			v.fail("mfma outside a threads or lanes loop")
		}
		if n := v.m.LaneWidth(); n != MFMALanes {
			v.fail("mfma: its fragments are laid out over %d lanes, the module's warps have %d", MFMALanes, n)
		}
		if r := StorageOf(s.In); r == nil || !r.TensorCore {
			v.fail("mfma input type %s is not a matrix-core dtype", s.In)
		}
		for _, x := range []struct {
			name string
			t    Type
			size int
		}{{s.D, F32, 4}, {s.A, I32, 2}, {s.B, I32, 2}} {
			if d := v.buffer(x.name, "mfma operand"); d.t != x.t || d.kind != dAlloc || d.size < x.size {
				v.fail("mfma operand %s: want a local %s array of at least %d elements", x.name, x.t, x.size)
			}
		}
	case *Malloc:
		v.expr(s.Size)
		if t := s.Size.Type(); t != I32 && t != I64 {
			v.fail("malloc %s: size is %s, want i32 or i64", s.Name, t)
		}
		v.declare(s.Name, dMalloc, s.T)
	case *Free:
		d, ok := v.lookup(s.Name)
		if !ok {
			v.fail("free of unknown buffer %s", s.Name)
		}
		if d.kind != dMalloc {
			v.fail("free of %s %s, want a malloc", declKindNames[d.kind], s.Name)
		}
	case *Store:
		d := v.buffer(s.Buf, "store to")
		v.expr(s.Index)
		if t := s.Index.Type(); t != I32 && t != I64 {
			v.fail("index of %s is %s, want i32 or i64", s.Buf, t)
		}
		v.expr(s.Value)
		if t := s.Value.Type(); !accessType(d.t, t) {
			v.fail("store %s into %s buffer %s: type mismatch", t, d.t, s.Buf)
		}
	case *Prefetch:
		v.buffer(s.Buf, "prefetch of")
		v.expr(s.Index)
		if t := s.Index.Type(); t != I32 && t != I64 {
			v.fail("index of %s is %s, want i32 or i64", s.Buf, t)
		}
	case *For:
		v.forStmt(s)
	case *If:
		v.expr(s.Cond)
		if t := s.Cond.Type(); t != Bool {
			v.fail("if condition is %s, want bool", t)
		}
		if s.Then == nil {
			v.fail("if without a then block")
		}
		v.block(s.Then)
		if s.Else != nil {
			v.cur = s
			v.block(s.Else)
		}
	case *Return:
		if v.par > 0 {
			v.fail("return inside a parallel loop")
		}
		if v.region > 0 {
			v.fail("return inside a %s loop", v.regionName())
		}
		v.expr(s.Value)
		if t := s.Value.Type(); t != I32 {
			v.fail("return value is %s, want i32", t)
		}
	case *Continue:
		if len(v.kinds) == 0 {
			v.fail("continue outside a for loop")
		}
		if k := v.kinds[len(v.kinds)-1]; k == Spread || k == Lanes {
			v.fail("continue aimed at a %s loop", k)
		}
	case *CallStmt:
		v.call(s)
	case nil:
		v.fail("nil statement")
	default:
		v.fail("unknown statement %T", s)
	}
}

// next checks a For's Next: a bool condition, and substitutions of
// distinct scalar names in scope (lets, vars, scalar parameters, outer
// loop variables; not s's own) by values of their types.
func (v *verifier) next(s *For) {
	v.expr(s.Next.When)
	if t := s.Next.When.Type(); t != Bool {
		v.fail("for %s: next condition is %s, want bool", s.Var, t)
	}
	seen := map[string]bool{}
	for _, x := range s.Next.Subst {
		d, ok := v.lookup(x.Name)
		if !ok || d.isBuffer() || d.kind == dLoop && x.Name == s.Var {
			v.fail("for %s: next substitutes %s, which is no scalar in scope", s.Var, x.Name)
		}
		if seen[x.Name] {
			v.fail("for %s: next substitutes %s twice", s.Var, x.Name)
		}
		seen[x.Name] = true
		v.expr(x.Value)
		if t := x.Value.Type(); t != d.t {
			v.fail("for %s: next substitutes %s (%s) by a %s", s.Var, x.Name, d.t, t)
		}
	}
}

func (v *verifier) forStmt(s *For) {
	v.expr(s.Lo)
	v.expr(s.Hi)
	if t := s.Lo.Type(); t != I32 {
		v.fail("for %s: lo is %s, want i32", s.Var, t)
	}
	if t := s.Hi.Type(); t != I32 {
		v.fail("for %s: hi is %s, want i32", s.Var, t)
	}
	if s.Kind > Lanes {
		v.fail("for %s: unknown loop kind %d", s.Var, s.Kind)
	}
	if s.Kind == Lanes {
		if c, ok := s.Lo.(*Const); !ok || c.Int != 0 {
			v.fail("lanes loop %s must start at 0", s.Var)
		}
		if c, ok := s.Hi.(*Const); !ok || c.Int != int64(v.m.LaneWidth()) {
			v.fail("lanes loop %s must run to %d", s.Var, v.m.LaneWidth())
		}
		if len(v.kinds) == 0 || v.kinds[len(v.kinds)-1] != Spread || v.lanes > 0 || v.thr > 0 {
			v.fail("lanes loop %s must sit directly in a spread loop, outside other lanes and threads loops", s.Var)
		}
	}
	if s.Kind == Spread && (v.lanes > 0 || v.thr > 0) {
		v.fail("spread loop %s inside a %s loop", s.Var, v.regionName())
	}
	if s.Kind == Parallel && v.spr > 0 {
		v.fail("parallel loop %s inside a spread loop", s.Var)
	}
	if s.Kind == Threads {
		if c, ok := s.Lo.(*Const); !ok || c.Int != 0 {
			v.fail("threads loop %s must start at 0", s.Var)
		}
		if c, ok := s.Hi.(*Const); !ok || c.Int <= 0 || c.Int%32 != 0 {
			v.fail("threads loop %s must run to a constant multiple of 32 (the block size)", s.Var)
		}
		if v.par != 1 || v.thr != 0 {
			v.fail("threads loop %s must sit inside one parallel loop and no other threads loop", s.Var)
		}
	}
	if s.Kind == Parallel && v.par > 0 {
		v.fail("nested parallel loop %s", s.Var)
	}
	if s.Body == nil {
		v.fail("for %s without a body", s.Var)
	}
	if s.Run < 0 || s.Run > math.MaxInt32 || s.Run > 1 && s.Kind != Parallel {
		v.fail("for %s: run %d (a positive run belongs to a parallel loop)", s.Var, s.Run)
	}
	v.kinds = append(v.kinds, s.Kind)
	counter := map[LoopKind]*int{Parallel: &v.par, Threads: &v.thr, Spread: &v.spr, Lanes: &v.lanes}[s.Kind]
	if counter != nil {
		*counter++
		v.region++
	}
	v.scopes = append(v.scopes, map[string]decl{})
	v.declare(s.Var, dLoop, I32)
	for _, r := range s.Ranges {
		v.expr(r.Lo)
		v.expr(r.Hi)
	}
	if s.Next != nil {
		v.next(s)
	}
	v.block(s.Body)
	v.scopes = v.scopes[:len(v.scopes)-1]
	v.kinds = v.kinds[:len(v.kinds)-1]
	if counter != nil {
		*counter--
		v.region--
	}
}

// matmul checks a MatMul's operands: f32 local arrays or buffers (B may
// hold a storage type, f16 to 8-bit codes, that the product widens) large
// enough for their static shapes, positive shapes, i32 extents.
func (v *verifier) matmul(s *MatMul) {
	if s.M <= 0 || s.N <= 0 || s.K <= 0 {
		v.fail("matmul %s: shape %d x %d x %d, want positive sizes", s.C, s.M, s.N, s.K)
	}
	for _, x := range []struct {
		name string
		n    int
	}{{s.C, s.M * s.N}, {s.A, s.M * s.K}, {s.B, s.K * s.N}} {
		d := v.buffer(x.name, "matmul operand")
		if x.name == s.B && s.BRows != "" {
			// Rows at offsets: B is a buffer of any size (the pool).
			x.n = 0
		}
		if d.t != F32 && !(x.name != s.C && d.t.IsStorageOnly()) {
			v.fail("matmul operand %s has %s elements, want f32 (A, B: or a storage type, widened)", x.name, d.t)
		}
		if d.size > 0 && d.size < x.n {
			v.fail("matmul operand %s holds %d elements, the shape needs %d", x.name, d.size, x.n)
		}
	}
	for _, e := range []Expr{s.MExt, s.NExt, s.KExt} {
		v.expr(e)
		if t := e.Type(); t != I32 {
			v.fail("matmul %s: extent is %s, want i32", s.C, t)
		}
	}
	if s.BRows != "" {
		rows := s.K
		if s.TransB {
			rows = s.N
		}
		d := v.buffer(s.BRows, "matmul row offsets")
		if d.t != I64 {
			v.fail("matmul %s: row offsets %s have %s elements, want i64", s.C, s.BRows, d.t)
		}
		if d.size > 0 && d.size < rows {
			v.fail("matmul %s: row offsets %s hold %d elements, B has %d rows", s.C, s.BRows, d.size, rows)
		}
	}
	if r := s.RotB; r != nil {
		if r.Pairs != RopeHalf && r.Pairs != RopeInterleaved {
			v.fail("matmul %s: rot pairs %d are neither half nor interleaved", s.C, int(r.Pairs))
		}
		if !s.TransB || r.Half <= 0 || 2*r.Half > s.K {
			v.fail("matmul %s: rot needs B transposed and 0 < 2*half <= K, have half %d, K %d, transposed %v", s.C, r.Half, s.K, s.TransB)
		}
		for _, name := range []string{r.Cos, r.Sin} {
			d := v.buffer(name, "matmul rotation table")
			if d.t != F32 {
				v.fail("matmul %s: rotation table %s has %s elements, want f32", s.C, name, d.t)
			}
			if d.size > 0 && d.size < s.N*r.Half {
				v.fail("matmul %s: rotation table %s holds %d elements, B's %d rows need %d", s.C, name, d.size, s.N, s.N*r.Half)
			}
		}
	}
}

func (v *verifier) call(s *CallStmt) {
	for _, a := range s.Args {
		v.expr(a)
	}
	if n, ok := RuntimeRoutines[s.Fn]; ok {
		if len(s.Args) != n {
			v.fail("call %s: %d args, routine takes %d", s.Fn, len(s.Args), n)
		}
		bufs := RuntimeBuffers[s.Fn]
		for i, a := range s.Args {
			r, ok := a.(*Ref)
			if ok {
				d, _ := v.lookup(r.Name)
				ok = d.isBuffer()
			}
			if slices.Contains(bufs, i) && !ok {
				v.fail("call %s: arg %d is not a buffer name", s.Fn, i)
			}
			if !slices.Contains(bufs, i) && a.Type() != I32 {
				v.fail("call %s: arg %d is %s, want i32", s.Fn, i, a.Type())
			}
		}
		if s.Result != "" {
			v.declare(s.Result, dResult, I32)
		}
		return
	}
	if v.m != nil {
		callee := v.m.Kernel(s.Fn)
		if callee == nil {
			v.fail("call to unknown kernel %s", s.Fn)
		}
		if len(s.Args) != len(callee.Params) {
			v.fail("call %s: %d args, kernel takes %d params", s.Fn, len(s.Args), len(callee.Params))
		}
		for i, p := range callee.Params {
			a := s.Args[i]
			if p.Buffer {
				if IsNullArg(a) {
					if !p.Null {
						v.fail("call %s: arg %d is NULL for buffer param %s, which is not declared null", s.Fn, i, p.Name)
					}
					continue
				}
				r, ok := a.(*Ref)
				if ok {
					d, _ := v.lookup(r.Name)
					ok = d.isBuffer()
				}
				if !ok {
					v.fail("call %s: arg %d for buffer param %s is not a buffer name", s.Fn, i, p.Name)
				}
			}
			if t := a.Type(); t != p.Elem {
				v.fail("call %s: arg %d for param %s is %s, want %s", s.Fn, i, p.Name, t, p.Elem)
			}
		}
	}
	if s.Result != "" {
		v.declare(s.Result, dResult, I32)
	}
}

func (v *verifier) expr(e Expr) {
	switch e := e.(type) {
	case *Ref:
		d, ok := v.lookup(e.Name)
		if !ok {
			v.fail("unknown name %s", e.Name)
		}
		if d.t != e.T {
			v.fail("ref %s has type %s, declared %s", e.Name, e.T, d.t)
		}
	case *NotNull:
		v.buffer(e.Buf, "nonnull of")
	case *Shuffle:
		v.expr(e.X)
		if v.thr == 0 && v.lanes == 0 {
			v.fail("shfl_xor outside a threads or lanes loop")
		}
		if n := v.m.LaneWidth(); e.Mask <= 0 || e.Mask >= n {
			v.fail("shfl_xor mask %d, want 1..%d", e.Mask, n-1)
		}
	case *Load:
		d := v.buffer(e.Buf, "load from")
		if !accessType(d.t, e.T) {
			v.fail("load %s has type %s, buffer element is %s", e.Buf, e.T, d.t)
		}
		v.expr(e.Index)
	case *Guarded:
		v.expr(e.Cond)
		v.expr(e.X)
	case *Binary:
		v.expr(e.X)
		v.expr(e.Y)
	case *Unary:
		v.expr(e.X)
	case *Select:
		v.expr(e.Cond)
		v.expr(e.X)
		v.expr(e.Y)
	case *Convert:
		v.expr(e.X)
	case *Bitcast:
		v.expr(e.X)
	case *MulAdd:
		v.expr(e.X)
		v.expr(e.Y)
		v.expr(e.Z)
	case *VShuffle:
		v.expr(e.X)
		v.expr(e.Y)
	case *DotBF16:
		v.expr(e.X)
		v.expr(e.Y)
		v.expr(e.Z)
	case *Call:
		for _, a := range e.Args {
			v.expr(a)
		}
	}
	if msg := nodeRule(e); msg != "" {
		v.fail("%s", msg)
	}
}

// fragmentLanes fails unless the module's warps have the 32 lanes the
// fragment layouts of mma (m16n8k16) and ldmatrix (m8n8) are defined for.
func (v *verifier) fragmentLanes(op string) {
	if n := v.m.LaneWidth(); n != DefaultLanes {
		v.fail("%s: its fragments are laid out over %d lanes, the module's warps have %d", op, DefaultLanes, n)
	}
}
