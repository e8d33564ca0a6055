package cstyle

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/attnc/attnc/ir"
)

// The printer is a table of op -> text (below) plus a Dialect's settings;
// everything GPU-specific in the kernels' structure (blocks, threads,
// shared memory, shuffles) was decided by lowering and passes before.

// cTypes maps IR types to C types; storage-only types (f16, bf16) print
// as their carrier's type (the dtype table).
var cTypes = func() map[ir.Type]string {
	m := map[ir.Type]string{
		ir.Bool: "bool", ir.I16: "int16_t", ir.I32: "int32_t", ir.I64: "int64_t", ir.U8: "uint8_t",
		ir.F32: "float", ir.F64: "double",
	}
	for _, r := range ir.DTypes {
		if r.Type.IsStorageOnly() {
			m[r.Type] = m[r.Carrier]
		}
	}
	return m
}()

// binOps are printf formats for binary operators (min/max are helpers).
var binOps = map[ir.BinOp]string{
	ir.Add: "(%s + %s)", ir.Sub: "(%s - %s)", ir.Mul: "(%s * %s)", ir.Div: "(%s / %s)", ir.Rem: "(%s %% %s)",
	ir.Shr: "(%s >> %s)", ir.Xor: "(%s ^ %s)", ir.Lt: "(%s < %s)", ir.Le: "(%s <= %s)",
	ir.Gt: "(%s > %s)", ir.Ge: "(%s >= %s)", ir.Eq: "(%s == %s)", ir.Ne: "(%s != %s)",
	ir.Min: "attnc_min(%s, %s)", ir.Max: "attnc_max(%s, %s)",
}

// boolOps are the logical forms of And/Or (both sides evaluated, as in the IR).
var boolOps = map[ir.BinOp]string{ir.And: "(%s & %s)", ir.Or: "(%s | %s)", ir.Xor: "(%s != %s)"}

// intOps are the integer forms of And/Or and the wrapping left shift.
var intOps = map[ir.BinOp]string{ir.And: "(%s & %s)", ir.Or: "(%s | %s)"}

// wrapOps are i32 and i64 + - *, which wrap in the IR (the prelude's
// helpers; the name takes the width: attnc_add_i32, attnc_mul_i64). i16
// and u8 operands promote to int, whose results cannot overflow.
var wrapOps = map[ir.BinOp]string{ir.Add: "attnc_add_%s(%s, %s)", ir.Sub: "attnc_sub_%s(%s, %s)", ir.Mul: "attnc_mul_%s(%s, %s)"}

// wrapWidth is the suffix of the wrapping helpers for t: i32, i64, or ""
// for a type whose C arithmetic cannot overflow.
func wrapWidth(t ir.Type) string {
	switch t {
	case ir.I32:
		return "i32"
	case ir.I64:
		return "i64"
	}
	return ""
}

// PreludeNames are the functions the op table calls that a dialect's
// Prelude must define (for f32; the bit casts between f32 and i32), besides
// the names its Dialect fields print.
var PreludeNames = func() []string {
	names := []string{"attnc_f32_as_i32", "attnc_i32_as_f32"}
	for _, op := range []ir.UnOp{ir.Exp, ir.Log, ir.Tanh, ir.Sqrt, ir.Abs, ir.Floor, ir.Exp2, ir.Sin, ir.Cos} {
		names = append(names, floatFns[op])
	}
	return names
}()

// floatFns are the prelude's float functions.
var floatFns = map[ir.UnOp]string{
	ir.Exp: "attnc_exp", ir.Log: "attnc_log", ir.Tanh: "attnc_tanh", ir.Sqrt: "attnc_sqrt", ir.Abs: "attnc_fabs",
	ir.Floor: "attnc_floor", ir.Exp2: "attnc_exp2", ir.Sin: "attnc_sin", ir.Cos: "attnc_cos",
}

// Helpers are emitted after the dialect's prelude: the functions the op
// table calls — typed min/max with the IR's semantics (x < y ? x : y; a NaN
// operand gives NaN for floats), integer division that never traps, and
// i32 arithmetic that wraps — for kernels and for host launchers (the
// split rule). They are written with __host__ __device__, which the
// prelude must define, and the fixed-width integer types.
const Helpers = `// min/max with the IR's semantics, for kernels and for host launchers
// (the split rule).
#define ATTNC_HD_MINMAX(T) \
  static __host__ __device__ inline T attnc_min(T a, T b) { return a < b ? a : b; } \
  static __host__ __device__ inline T attnc_max(T a, T b) { return a > b ? a : b; }
ATTNC_HD_MINMAX(int32_t)
ATTNC_HD_MINMAX(int64_t)
// Floats propagate NaN from either side (not fmaxf, which drops it).
#define ATTNC_HD_FMINMAX(T) \
  static __host__ __device__ inline T attnc_min(T a, T b) { return a != a ? a : a < b ? a : b; } \
  static __host__ __device__ inline T attnc_max(T a, T b) { return a != a ? a : a > b ? a : b; }
ATTNC_HD_FMINMAX(float)
ATTNC_HD_FMINMAX(double)
// Integer / and % with the IR's semantics (DESIGN §3): truncate toward zero,
// x / 0 = x % 0 = 0, MIN / -1 = MIN, MIN % -1 = 0; never a trap.
#define ATTNC_HD_DIV(T, U) \
  static __host__ __device__ inline T attnc_div(T a, T b) { \
    return b == 0 ? (T)0 : b == (T)-1 ? (T)((U)0 - (U)a) : (T)(a / b); } \
  static __host__ __device__ inline T attnc_rem(T a, T b) { \
    return (b == 0 || b == (T)-1) ? (T)0 : (T)(a % b); }
// i32 + - * and negation wrap, as the IR says (C++ signed overflow is
// undefined, and compilers use that: kv_pos + 2147483617 >= 0 folded to
// true); unsigned arithmetic wraps and compiles to the same instructions.
static __host__ __device__ inline int32_t attnc_add_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
static __host__ __device__ inline int32_t attnc_sub_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
static __host__ __device__ inline int32_t attnc_mul_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a * (uint32_t)b); }
static __host__ __device__ inline int32_t attnc_neg_i32(int32_t a) { return (int32_t)(0u - (uint32_t)a); }
// i64 the same (RoPE's fixed-point angle pos * turns wraps by design).
static __host__ __device__ inline int64_t attnc_add_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static __host__ __device__ inline int64_t attnc_sub_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static __host__ __device__ inline int64_t attnc_mul_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static __host__ __device__ inline int64_t attnc_neg_i64(int64_t a) { return (int64_t)(0ull - (uint64_t)a); }
// |a| as a call, so that nested abs prints its operand once (abs(MIN) = MIN).
static __host__ __device__ inline int32_t attnc_abs_i32(int32_t a) { return attnc_max(a, attnc_neg_i32(a)); }
ATTNC_HD_DIV(int32_t, uint32_t)
ATTNC_HD_DIV(int64_t, uint64_t)
ATTNC_HD_DIV(int16_t, uint16_t)
ATTNC_HD_DIV(uint8_t, uint8_t)
`

// Host says how host launchers are written: their symbols, and the C
// expressions a target chose for its worker count and grid-stride grids.
type Host struct {
	Launcher        func(*ir.Plan) string // the launcher symbol of a plan
	Threads         string                // C expression of ir.PlanThreads
	GridStrideGrid  string                // C expression: the grid of a launch whose item count is not known on the host
	ThreadsPerBlock int                   // the block size every work kernel must have
	// MinBlocks, when set, is each kernel's minBlocksPerMultiprocessor:
	// kernels are printed with __launch_bounds__(block, MinBlocks(k)).
	MinBlocks func(*ir.Kernel) int
	// ArgsAtUse, when set, says which parameters of kernel k are read from
	// the argument segment where they are used (Dialect.ArgAtUse, which
	// must be set), and how; parameters it does not name are held.
	ArgsAtUse func(k *ir.Kernel) map[string]ArgRead
}

// ArgRead is how a kernel parameter is read where it is used.
type ArgRead uint8

const (
	// ArgEachUse: every use reads it.
	ArgEachUse ArgRead = iota + 1
	// ArgPerPhase: a phase loop (tag phase) outside the KV tile loops that
	// uses it reads it once, at its start, into a local its uses read;
	// other uses read it each.
	ArgPerPhase
)

// Emit prints the source of a legalized GPU module in dialect d: its
// kernels and, from its plans, a host launcher per public entry.
func Emit(m *ir.Module, d *Dialect, h Host) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: %v", strings.ToLower(d.Name), r)
		}
	}()
	var sb strings.Builder
	fmt.Fprintf(&sb, "// %s%s: generated by attnc (ABI 1). Do not edit.\n", m.Prefix, d.Ext)
	sb.WriteString(d.About)
	sb.WriteString(d.Prelude)
	sb.WriteString(Helpers)
	for _, k := range m.Kernels {
		p := &printer{d: d, sb: &sb, m: m, bound: map[string]bool{}}
		if h.MinBlocks != nil {
			p.minBlocks = h.MinBlocks(k)
		}
		if h.ArgsAtUse != nil {
			if p.atUse = h.ArgsAtUse(k); len(p.atUse) > 0 && d.ArgAtUse == "" {
				return "", fmt.Errorf("%s: kernel %s reads parameters at their uses, which the dialect cannot print", strings.ToLower(d.Name), k.Name)
			}
		}
		p.kernel(k)
	}
	fmt.Fprintf(&sb, "\n#ifndef %s\n", d.HostGuard)
	for _, def := range hostDefs(m) {
		var ps []string
		for _, pr := range def.Params {
			ps = append(ps, d.paramDecl(pr))
		}
		fmt.Fprintf(&sb, "\n// %s: the module's Def, as the plans evaluate it on the host.\nstatic inline %s %s_%s(%s) {\n  return %s;\n}\n",
			def.Name, d.ctype(def.Body.Type()), m.Prefix, def.Name, strings.Join(ps, ", "), (&printer{d: d, m: m, host: true}).expr(def.Body))
	}
	for _, p := range m.Plans {
		if p.Public {
			launcher(&sb, m, p, d, h)
		}
	}
	fmt.Fprintf(&sb, "\n#endif // %s\n", d.HostGuard)
	return sb.String(), nil
}

// Expr prints a kernel expression as dialect d writes it.
func (d *Dialect) Expr(e ir.Expr) string { return (&printer{d: d}).expr(e) }

// ctype is the C type of IR type t in dialect d.
func (d *Dialect) ctype(t ir.Type) string {
	if c, ok := d.Types[t]; ok {
		return c
	}
	return cTypes[t]
}

// hostDefs are the Defs the plans call.
func hostDefs(m *ir.Module) []*ir.Def {
	used := map[string]bool{}
	visit := func(e ir.Expr) {
		if e == nil {
			return
		}
		ir.VisitExpr(e, func(n ir.Expr) {
			if c, ok := n.(*ir.Call); ok {
				used[c.Fn] = true
			}
		})
	}
	for _, p := range m.Plans {
		if s := p.Split; s != nil {
			visit(s.Splits)
		}
	}
	var out []*ir.Def
	for _, d := range m.Defs {
		if used[d.Name] {
			out = append(out, d)
		}
	}
	return out
}

type printer struct {
	d         *Dialect
	sb        *strings.Builder
	m         *ir.Module
	k         *ir.Kernel
	indent    int
	smem      int                // bytes of dynamic shared memory carved so far
	host      bool               // printing host code
	minBlocks int                // __launch_bounds__ minimum blocks per SM (0: no bounds)
	atUse     map[string]ArgRead // parameters read from the argument segment where used
	bound     map[string]bool    // those a phase loop being printed has read into its local
	inTile    int                // KV tile loops around the statement being printed
}

// ArgOffsets are the byte offsets of k's parameters in its argument
// segment: in order, each at a multiple of its size — buffers are 8-byte
// pointers, scalars their type's bytes — as the AMDGPU kernel ABI lays
// out explicit arguments (and C lays out a struct of them).
func ArgOffsets(k *ir.Kernel) []int {
	var offs []int
	at := 0
	for _, pr := range k.Params {
		size := 8
		if !pr.Buffer {
			size = max(1, pr.Elem.Bits()/8)
		}
		at = (at + size - 1) / size * size
		offs = append(offs, at)
		at += size
	}
	return offs
}

// name prints a reference to the kernel variable, buffer or parameter n:
// a parameter read at its uses is the local its phase loop read it into
// (argLocal), or elsewhere a read of its own (Dialect.ArgAtUse).
func (p *printer) name(n string) string {
	if p.atUse[n] == 0 || p.host {
		return n
	}
	if p.bound[n] {
		return argLocal + n
	}
	return p.argRead(n)
}

// argLocal prefixes the local a phase loop reads a parameter into.
const argLocal = "attnc_arg_"

// argRead prints the read of parameter n from the argument segment.
func (p *printer) argRead(n string) string {
	i := slices.IndexFunc(p.k.Params, func(pr *ir.Param) bool { return pr.Name == n })
	return fmt.Sprintf(p.d.ArgAtUse, p.argType(p.k.Params[i]), ArgOffsets(p.k)[i], n)
}

// argType is parameter pr's C type without restrict.
func (p *printer) argType(pr *ir.Param) string {
	t := p.d.ctype(pr.Elem)
	if pr.Buffer {
		t += "*"
		if !pr.Output {
			t = "const " + t
		}
	}
	return t
}

// Mentions are the names statement s (its expressions and nested
// statements) reads or writes: variables, buffers and arrays.
func Mentions(s ir.Stmt) map[string]bool {
	names := map[string]bool{}
	body := &ir.Block{Stmts: []ir.Stmt{s}}
	ir.MapStmtExprs(body, func(e ir.Expr) ir.Expr {
		ir.VisitExpr(e, func(n ir.Expr) {
			switch x := n.(type) {
			case *ir.Ref:
				names[x.Name] = true
			case *ir.Load:
				names[x.Buf] = true
			case *ir.NotNull:
				names[x.Buf] = true
			}
		})
		return e
	})
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Store:
			names[x.Buf] = true
		case *ir.Copy:
			names[x.Dst], names[x.Src] = true, true
		case *ir.LdMatrix:
			names[x.Src] = true
		case *ir.Prefetch:
			names[x.Buf] = true
		case *ir.Assign:
			names[x.Name] = true
		}
		return []ir.Stmt{s}
	})
	return names
}

func (p *printer) line(format string, args ...any) {
	p.sb.WriteString(strings.Repeat("  ", p.indent))
	fmt.Fprintf(p.sb, format, args...)
	p.sb.WriteByte('\n')
}

func (d *Dialect) paramDecl(pr *ir.Param) string {
	if pr.Buffer {
		c := "const "
		if pr.Output {
			c = ""
		}
		return fmt.Sprintf("%s%s* %s %s", c, d.ctype(pr.Elem), d.Restrict, pr.Name)
	}
	return d.ctype(pr.Elem) + " " + pr.Name
}

func (p *printer) kernel(k *ir.Kernel) {
	p.k = k
	var ps []string
	for _, pr := range k.Params {
		ps = append(ps, p.d.paramDecl(pr))
	}
	fmt.Fprintf(p.sb, "\n// %s: %s kernel; block = %d threads, dynamic shared memory = %d bytes.\n", k.Name, k.Role, BlockSize(k), SharedBytes(k))
	bounds := ""
	if p.minBlocks > 0 {
		bounds = p.d.LaunchBounds(BlockSize(k), p.minBlocks)
	}
	fmt.Fprintf(p.sb, "%s void %s%s(%s) {\n", p.d.Kernel, bounds, k.Name, strings.Join(ps, ", "))
	p.indent = 1
	if SharedBytes(k) > 0 {
		p.line(p.d.DynamicShared, sharedBase)
	}
	p.block(k.Body)
	p.sb.WriteString("}\n")
}

// sharedBase is the name of a kernel's pointer to its dynamic shared memory.
const sharedBase = "attnc_smem"

func (p *printer) block(b *ir.Block) {
	for _, s := range b.Stmts {
		p.stmt(s)
	}
}

func (p *printer) stmt(s ir.Stmt) {
	switch s := s.(type) {
	case *ir.Block:
		p.line("{")
		p.indent++
		p.block(s)
		p.indent--
		p.line("}")
	case *ir.Let:
		p.line("const %s %s = %s;", p.d.ctype(s.Value.Type()), s.Name, p.expr(s.Value))
	case *ir.Var:
		p.line("%s %s = %s;", p.d.ctype(s.Init.Type()), s.Name, p.expr(s.Init))
	case *ir.Assign:
		p.line("%s = %s;", s.Name, p.expr(s.Value))
	case *ir.Alloc:
		if s.Heap {
			panic(fmt.Sprintf("alloc heap %s: heap scratch is CPU only (heap-scratch leaves GPU kernels alone)", s.Name))
		}
		if s.Shared {
			p.line("%s* %s = (%s*)(%s + %d);", p.d.ctype(s.T), s.Name, p.d.ctype(s.T), sharedBase, p.smem)
			p.smem += align16(s.Size * s.T.Bits() / 8)
		} else {
			p.line("%s %s[%d];", p.d.ctype(s.T), s.Name, s.Size)
		}
	case *ir.Store:
		p.line("%s[%s] = %s;", p.name(s.Buf), p.expr(s.Index), p.expr(s.Value))
	case *ir.For:
		p.forStmt(s)
	case *ir.If:
		p.line("if %s {", p.cond(s.Cond))
		p.indent++
		p.block(s.Then)
		p.indent--
		if s.Else != nil && len(s.Else.Stmts) > 0 {
			p.line("} else {")
			p.indent++
			p.block(s.Else)
			p.indent--
		}
		p.line("}")
	case *ir.Return:
		p.line("return;")
	case *ir.Continue:
		p.line("continue;")
	case *ir.Barrier:
		p.line("%s", p.d.Barrier)
	case *ir.Copy:
		dst, src := p.expr(s.DstIndex), p.expr(s.SrcIndex)
		if s.Async {
			// 16 bytes from global into shared memory, complete at the
			// async wait that covers its group.
			p.line(p.d.AsyncCopy16, p.name(s.Dst)+" + "+dst, p.name(s.Src)+" + "+src)
			return
		}
		if s.N*p.elemBits(s.Src)/8 == 16 {
			// One 128-bit access; lowering guarantees 16-byte alignment.
			p.line("*(%s*)(%s + %s) = *(const %s*)(%s + %s);", p.d.Vec16, p.name(s.Dst), dst, p.d.Vec16, p.name(s.Src), src)
			return
		}
		p.line("for (int32_t c_ = 0; c_ < %d; ++c_) %s[%s + c_] = %s[%s + c_];", s.N, p.name(s.Dst), dst, p.name(s.Src), src)
	case *ir.MFMA:
		if p.d.MFMA == "" {
			panic(fmt.Sprintf("mfma has no %s form", p.d.Name))
		}
		p.line(p.d.MFMA, s.In, s.D, s.A, s.B)
	case *ir.MMA:
		p.line(p.d.MMA, s.In, s.D, s.A, s.B)
	case *ir.AsyncCommit:
		p.line("%s", p.d.AsyncCommit)
	case *ir.AsyncWait:
		p.line(p.d.AsyncWait, s.Pending)
	case *ir.LdMatrix:
		p.line("%s", p.d.LdMatrix(s.N, s.Trans, s.Dst, s.Src+" + "+p.expr(s.Index)))
	default:
		panic(fmt.Sprintf("statement %T has no %s form", s, p.d.Name))
	}
}

func (p *printer) forStmt(s *ir.For) {
	if s.Tag == ir.TagKVTile {
		p.inTile++
		defer func() { p.inTile-- }()
	}
	if s.Tag == ir.TagPhase && len(p.atUse) > 0 && !p.host && p.inTile == 0 {
		// A phase outside the KV tile loops reads the parameters it uses
		// once, at its start: one read per work item, held only through
		// the phase. Inside a tile loop, where the registers are scarcest,
		// each use reads its own.
		used := Mentions(s)
		var read []*ir.Param
		for _, pr := range p.k.Params {
			if used[pr.Name] && p.atUse[pr.Name] == ArgPerPhase && !p.bound[pr.Name] {
				read = append(read, pr)
			}
		}
		if len(read) > 0 {
			p.line("{")
			p.indent++
			for _, pr := range read {
				p.line("%s const %s%s = %s;", p.argType(pr), argLocal, pr.Name, p.argRead(pr.Name))
				p.bound[pr.Name] = true
			}
			p.forStmt(s)
			for _, pr := range read {
				delete(p.bound, pr.Name)
			}
			p.indent--
			p.line("}")
			return
		}
	}
	lo, hi := p.expr(s.Lo), p.expr(s.Hi)
	switch s.Kind {
	case ir.Parallel:
		// One block per iteration, grid-stride so any grid size works.
		p.line("for (int32_t %s = %s + %s, %s_end = %s; %s < %s_end; %s += %s) {", s.Var, lo, p.d.BlockIndex, s.Var, hi, s.Var, s.Var, s.Var, p.d.GridBlocks)
	case ir.Spread, ir.Lanes:
		panic(fmt.Sprintf("%s loop %s has no %s form (map-threads maps them)", s.Kind, s.Var, p.d.Name))
	case ir.Threads:
		p.line("{")
		p.indent++
		p.line("const int32_t %s = %s;", s.Var, p.d.ThreadIndex)
		p.block(s.Body)
		p.indent--
		p.line("}")
		return
	default:
		if p.indexesRegisters(s) {
			// A register array indexed by the loop variable stays in
			// registers only when the loop is unrolled.
			p.line("#pragma unroll")
		} else if s.Tag == ir.TagPhase && p.d.PhaseLoop != "" {
			p.line("%s", p.d.PhaseLoop)
		}
		p.line("for (int32_t %s = %s, %s_end = %s; %s < %s_end; ++%s) {", s.Var, lo, s.Var, hi, s.Var, s.Var, s.Var)
	}
	p.indent++
	p.block(s.Body)
	p.indent--
	p.line("}")
}

// indexesRegisters reports whether serial loop s has constant bounds and
// its body indexes a thread-local array (not shared memory) by its
// variable.
func (p *printer) indexesRegisters(s *ir.For) bool {
	_, lo := s.Lo.(*ir.Const)
	_, hi := s.Hi.(*ir.Const)
	if !lo || !hi {
		return false
	}
	local := map[string]bool{}
	ir.MapStmts(p.k.Body, func(st ir.Stmt) []ir.Stmt {
		if a, ok := st.(*ir.Alloc); ok && !a.Shared {
			local[a.Name] = true
		}
		return []ir.Stmt{st}
	})
	uses := func(e ir.Expr) bool {
		found := false
		ir.VisitExpr(e, func(x ir.Expr) {
			if r, ok := x.(*ir.Ref); ok && r.Name == s.Var {
				found = true
			}
		})
		return found
	}
	found := false
	ir.MapStmts(s.Body, func(st ir.Stmt) []ir.Stmt {
		if x, ok := st.(*ir.Store); ok && local[x.Buf] && uses(x.Index) {
			found = true
		}
		return []ir.Stmt{st}
	})
	ir.MapStmtExprs(s.Body, func(e ir.Expr) ir.Expr {
		ir.VisitExpr(e, func(x ir.Expr) {
			if l, ok := x.(*ir.Load); ok && local[l.Buf] && uses(l.Index) {
				found = true
			}
		})
		return e
	})
	return found
}

func align16(n int) int { return (n + 15) &^ 15 }

// elemBits is the element width of a buffer parameter or array of the
// kernel being printed.
func (p *printer) elemBits(name string) int {
	if pr := p.k.Param(name); pr != nil {
		return pr.Elem.Bits()
	}
	bits := 0
	ir.MapStmts(p.k.Body, func(s ir.Stmt) []ir.Stmt {
		if a, ok := s.(*ir.Alloc); ok && a.Name == name {
			bits = a.T.Bits()
		}
		return []ir.Stmt{s}
	})
	return bits
}

// BlockSize is the threads-loop size of a GPU kernel (1 if it has none).
func BlockSize(k *ir.Kernel) int {
	n := 1
	ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok && f.Kind == ir.Threads {
			if c, ok := f.Hi.(*ir.Const); ok {
				n = int(c.Int)
			}
		}
		return []ir.Stmt{s}
	})
	return n
}

// SharedBytes is the dynamic shared memory a GPU kernel carves (16-byte
// aligned arrays, in statement order).
func SharedBytes(k *ir.Kernel) int {
	n := 0
	ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
		if a, ok := s.(*ir.Alloc); ok && a.Shared {
			n += align16(a.Size * a.T.Bits() / 8)
		}
		return []ir.Stmt{s}
	})
	return n
}

// cond prints an if condition with exactly one pair of parentheses.
func (p *printer) cond(e ir.Expr) string {
	s := p.expr(e)
	if b, ok := e.(*ir.Binary); ok && !b.Op.IsCall() {
		return s // already "(x op y)"
	}
	return "(" + s + ")"
}

func (p *printer) expr(e ir.Expr) string {
	switch e := e.(type) {
	case *ir.Const:
		return p.constText(e)
	case *ir.Ref:
		return p.name(e.Name)
	case *ir.NotNull:
		return "(" + p.name(e.Buf) + " != 0)"
	case *ir.Load:
		return p.name(e.Buf) + "[" + p.expr(e.Index) + "]"
	case *ir.Binary:
		x, y := p.expr(e.X), p.expr(e.Y)
		t := e.X.Type()
		if t == ir.Bool {
			if f, ok := boolOps[e.Op]; ok {
				return fmt.Sprintf(f, x, y)
			}
		}
		if e.Op == ir.Shl {
			// Shift as unsigned so that bits may move into the sign.
			u := map[ir.Type]string{ir.I64: "uint64_t", ir.I16: "uint16_t", ir.U8: "uint8_t"}[t]
			if u == "" {
				u = "uint32_t"
			}
			return fmt.Sprintf("((%s)((%s)%s << %s))", p.d.ctype(t), u, x, y)
		}
		if f, ok := intOps[e.Op]; ok && t != ir.Bool {
			return fmt.Sprintf(f, x, y)
		}
		if f, ok := wrapOps[e.Op]; ok && wrapWidth(t) != "" {
			return fmt.Sprintf(f, wrapWidth(t), x, y)
		}
		if (e.Op == ir.Div || e.Op == ir.Rem) && t.IsInt() && !safeDivisor(e.Y) {
			return fmt.Sprintf("attnc_%s(%s, %s)", map[ir.BinOp]string{ir.Div: "div", ir.Rem: "rem"}[e.Op], x, y)
		}
		if f, ok := binOps[e.Op]; ok {
			return fmt.Sprintf(f, x, y)
		}
	case *ir.Unary:
		x := p.expr(e.X)
		switch e.Op {
		case ir.Neg:
			if w := wrapWidth(e.X.Type()); w != "" {
				return "attnc_neg_" + w + "(" + x + ")"
			}
			return "(-" + x + ")"
		case ir.Not:
			if e.X.Type() == ir.Bool {
				return "(!" + x + ")"
			}
			return "(~" + x + ")"
		case ir.Abs:
			if e.X.Type() == ir.I32 {
				return "attnc_abs_i32(" + x + ")"
			}
			if e.X.Type() == ir.I64 {
				return fmt.Sprintf("attnc_max(%s, attnc_neg_i64(%s))", x, x)
			}
			if !e.X.Type().IsFloat() {
				return fmt.Sprintf("attnc_max(%s, -%s)", x, x)
			}
		}
		if f, ok := floatFns[e.Op]; ok && e.X.Type() == ir.F32 {
			return f + "(" + x + ")"
		}
	case *ir.Select:
		return fmt.Sprintf("(%s ? %s : %s)", p.expr(e.Cond), p.expr(e.X), p.expr(e.Y))
	case *ir.Guarded:
		// A guarded load: ?: evaluates the load only when the guard holds.
		return fmt.Sprintf("(%s ? %s : (%s)0)", p.expr(e.Cond), p.expr(e.X), p.d.ctype(e.X.Type()))
	case *ir.Convert:
		return fmt.Sprintf("((%s)%s)", p.d.ctype(e.To), p.expr(e.X))
	case *ir.Bitcast:
		switch {
		case e.To == ir.I32 && e.X.Type() == ir.F32:
			return "attnc_f32_as_i32(" + p.expr(e.X) + ")"
		case e.To == ir.F32 && e.X.Type() == ir.I32:
			return "attnc_i32_as_f32(" + p.expr(e.X) + ")"
		}
	case *ir.Call:
		if p.host && p.m.Def(e.Fn) != nil {
			var args []string
			for _, a := range e.Args {
				args = append(args, p.expr(a))
			}
			return fmt.Sprintf("%s_%s(%s)", p.m.Prefix, e.Fn, strings.Join(args, ", "))
		}
	case *ir.Shuffle:
		if f, ok := p.d.ShuffleXor[e.X.Type()]; ok {
			return fmt.Sprintf(f, p.expr(e.X), e.Mask)
		}
	}
	panic(fmt.Sprintf("expression %s has no %s form", ir.ExprString(e), p.d.Name))
}

// safeDivisor reports whether integer division by y can use C's / and %
// directly: a constant other than 0 and -1.
func safeDivisor(y ir.Expr) bool {
	c, ok := y.(*ir.Const)
	return ok && c.Int != 0 && c.Int != -1
}

// constText prints a constant exactly: floats as hexadecimal literals,
// infinities and NaN through their bit patterns.
func (p *printer) constText(c *ir.Const) string {
	switch {
	case c.T == ir.Bool:
		if c.Int != 0 {
			return "true"
		}
		return "false"
	case c.T == ir.F32:
		f := float32(c.Float)
		if math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) {
			return fmt.Sprintf("attnc_i32_as_f32((int32_t)0x%08xu)", math.Float32bits(f))
		}
		return strconv.FormatFloat(float64(f), 'x', -1, 32) + "f"
	case c.T == ir.F64:
		return strconv.FormatFloat(c.Float, 'x', -1, 64)
	case c.T == ir.I64:
		if c.Int == math.MinInt64 {
			return "(-9223372036854775807LL - 1)"
		}
		return fmt.Sprintf("((int64_t)%dLL)", c.Int)
	case c.T == ir.I32 && c.Int == math.MinInt32:
		return "(-2147483647 - 1)"
	}
	return fmt.Sprintf("((%s)%d)", p.d.ctype(c.T), c.Int)
}

// hostNames are the names a launcher of plan p can evaluate: the entry's
// scalar parameters, the seq values with a host stand-in, the worker count
// and the split count.
func hostNames(p *ir.Plan) map[string]bool {
	names := map[string]bool{ir.PlanThreads: true, ir.PlanSplits: true}
	for _, pr := range p.Params {
		if !pr.Buffer {
			names[pr.Name] = true
		}
	}
	for _, s := range p.Seq {
		if s.Host != nil {
			names[s.Name] = true
		}
	}
	return names
}

// HostKnown reports whether a launcher of plan p can evaluate e (else a
// launch with that item count is grid-stride).
func HostKnown(p *ir.Plan, e ir.Expr) bool {
	names := hostNames(p)
	ok := true
	ir.VisitExpr(e, func(n ir.Expr) {
		if r, isRef := n.(*ir.Ref); isRef && !names[r.Name] {
			ok = false
		}
	})
	return ok
}

// launcher prints a host entry point: the plan's scalar checks and skip
// test, the split rule with the target's worker count, scratch, and the
// launches with their grids, blocks and shared memory, then the runtime's
// status. All scratch is allocated before the first launch: when an
// allocation fails the launcher frees what it allocated, clears the
// runtime's error and returns NO_MEMORY, having launched nothing.
func launcher(sb *strings.Builder, m *ir.Module, p *ir.Plan, d *Dialect, h Host) {
	var ps []string
	for _, pr := range p.Params {
		ps = append(ps, d.paramDecl(pr))
	}
	name := h.Launcher(p)
	fmt.Fprintf(sb, "\n// %s: the %s entry point.\n%s int32_t %s(%s, %s stream) {\n", name, p.Role, d.Entry, name, strings.Join(ps, ", "), d.Stream)
	hp := &printer{d: d, m: m, host: true}
	for _, c := range p.Checks {
		fmt.Fprintf(sb, "  if %s return %d;\n", hp.cond(c.Fail), c.Code)
	}
	if p.Skip != nil {
		fmt.Fprintf(sb, "  if %s return 0;\n", hp.cond(p.Skip))
	}
	for _, s := range p.Seq {
		if s.Host != nil {
			fmt.Fprintf(sb, "  const int32_t %s = %s; // the launcher cannot read lengths in device memory\n", s.Name, hp.expr(s.Host))
		}
	}
	for _, c := range p.Limits {
		if HostKnown(p, c.Fail) { // else the kernel clamps its item count
			fmt.Fprintf(sb, "  if %s return %d;\n", hp.cond(c.Fail), c.Code)
		}
	}
	launchFailed := ir.StatusLaunchFailed
	// launches prints the launches; cleanup (the scratch frees) runs
	// before a return between them.
	launches := func(ls []ir.Launch, scope map[string]bool, indent, cleanup string) {
		for _, l := range ls {
			k := m.Kernel(l.Kernel)
			if k == nil {
				panic(fmt.Sprintf("launcher %s launches unknown kernel %s", name, l.Kernel))
			}
			if b := BlockSize(k); b != h.ThreadsPerBlock {
				panic(fmt.Sprintf("launcher %s: kernel %s has %d threads per block, want %d", name, l.Kernel, b, h.ThreadsPerBlock))
			}
			var args []string
			for _, pr := range k.Params {
				if b, ok := l.BindOf(pr.Name); ok {
					if b.Value == nil {
						args = append(args, fmt.Sprintf("(%s *)0", d.ctype(pr.Elem)))
					} else {
						args = append(args, hp.expr(b.Value))
					}
					continue
				}
				if !scope[pr.Name] {
					panic(fmt.Sprintf("launcher %s: no argument for %s's parameter %s", name, l.Kernel, pr.Name))
				}
				args = append(args, pr.Name)
			}
			grid := h.GridStrideGrid
			if HostKnown(p, l.Items) {
				grid = hp.expr(l.Items)
			}
			smem := SharedBytes(k)
			fmt.Fprintf(sb, "%s{\n%s  const int32_t grid = %s;\n", indent, indent, grid)
			if smem > 0 {
				fail := fmt.Sprintf("return %d;", launchFailed)
				if cleanup != "" {
					fail = "{ " + cleanup + fail + " }"
				}
				fmt.Fprintf(sb, "%s  if (%s != 0) %s\n", indent, fmt.Sprintf(d.SetShared, l.Kernel, smem), fail)
			}
			fmt.Fprintf(sb, "%s  if (grid > 0) %s;\n%s}\n", indent, d.Launch(l.Kernel, "grid", h.ThreadsPerBlock, smem, "stream", strings.Join(args, ", ")), indent)
		}
	}
	scope := map[string]bool{}
	for _, pr := range p.Params {
		scope[pr.Name] = true
	}
	if s := p.Split; s != nil {
		fmt.Fprintf(sb, "  const int32_t %s = %s;\n", ir.PlanThreads, h.Threads)
		fmt.Fprintf(sb, "  const int32_t %s = %s;\n", ir.PlanSplits, hp.expr(s.Splits))
		fmt.Fprintf(sb, "  if (%s <= 1) {\n", ir.PlanSplits)
		launches(p.Direct, scope, "    ", "")
		sb.WriteString("  } else {\n")
		split := map[string]bool{ir.PlanSplits: true}
		for n := range scope {
			split[n] = true
		}
		for i, sc := range s.Scratch {
			fmt.Fprintf(sb, "    %s* %s = 0;\n", d.ctype(sc.T), sc.Name)
			var undo []string
			for _, prev := range s.Scratch[:i] {
				undo = append(undo, fmt.Sprintf(d.Free, prev.Name, "stream")+"; ")
			}
			// The failed allocation's error is the status: clear it, or the
			// next call would report it as its own launch failure.
			size := fmt.Sprintf("(size_t)(%s) * sizeof(%s)", hp.expr(sc.Size), d.ctype(sc.T))
			fmt.Fprintf(sb, "    if (%s != 0) { (void)%s; %sreturn %d; }\n",
				fmt.Sprintf(d.Alloc, sc.Name, size, "stream"), d.LastError, strings.Join(undo, ""), ir.StatusNoMemory)
			split[sc.Name] = true
		}
		var frees []string
		for _, sc := range s.Scratch {
			frees = append(frees, fmt.Sprintf(d.Free, sc.Name, "stream")+"; ")
		}
		launches(s.Launches, split, "    ", strings.Join(frees, ""))
		for _, sc := range s.Scratch {
			fmt.Fprintf(sb, "    %s;\n", fmt.Sprintf(d.Free, sc.Name, "stream"))
		}
		sb.WriteString("  }\n")
	} else {
		launches(p.Direct, scope, "  ", "")
	}
	fmt.Fprintf(sb, "  return %s != 0 ? %d : 0;\n}\n", d.LastError, launchFailed)
}
