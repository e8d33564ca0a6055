package ir

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The kernel-IR text form, printed by Print and read back by Parse:
//
//	module NAME prefix PREFIX
//	error -1 NAME "message"
//	def mask(q_pos: i32, kv_pos: i32): bool = (kv_pos <= q_pos)
//	kernel NAME role ROLE [entry] (p: f16* [total_q, 32, 128] out null, n: i32) {
//	  let x = (a + b)
//	  var m = -inf:f32
//	  m = max(m, x)
//	  alloc acc: f32[1024]          (or alloc shared acc, alloc heap acc)
//	  malloc w: f32[n]
//	  free w
//	  store acc[i] = 0:f32
//	  for i in 0 .. n parallel @kv_tile [kv_pos = lo .. hi] { ... }
//	  for item in 0 .. n parallel @work run 8 { ... }   (For.Run)
//	  if (x < y) @mask { ... } else { ... }
//	  continue
//	  call st = other(a, b)
//	  return 0
//	}
//
// Expressions: integer constants print bare when i32 (`5`) and with a type
// suffix otherwise (`5:i64`); floats always carry their type (`0.5:f32`,
// `-inf:f32`, `nan:f32`); bools are true/false. Binary operators are fully
// parenthesised infix, except min/max which print as calls. Unary ops print as
// calls (`neg(x)`, `exp(x)`), a NULL test as `nonnull(buf)`, conversions as `f32(x)`, bitcasts as
// `bitcast.i32(x)`, loads as `buf[i]`, selects as `select(c, x, y)` and
// high-level calls as `@softcap.f32(x, c)`.
//
// Vectors (CPU schedules): types print as f32x16, constants as
// `0.5:f32x16`, a vector load as `buf[i]:f32x16`, a broadcast as
// `f32x16(x)`; `muladd(x, y, z)`, `shuffle(x, y, [0, 1, 16, 17])`,
// `prefetch buf[i]` (into L2; `prefetch_l1 buf[i]` into L1); a scheduled
// clone is `kernel NAME role R level "x86-64-v4" (...)`.
// A GPU module whose warps are not of 32 lanes says so: `module NAME prefix P lanes 64`.

// String prints m in the text form.
func (m *Module) String() string {
	var p printer
	p.module(m)
	return p.sb.String()
}

// String prints k in the text form.
func (k *Kernel) String() string {
	var p printer
	p.kernel(k)
	return p.sb.String()
}

// ExprString prints e in the text form.
func ExprString(e Expr) string {
	var sb strings.Builder
	writeExpr(&sb, e)
	return sb.String()
}

// StmtString prints s in the text form at indent 0.
func StmtString(s Stmt) string {
	var p printer
	p.stmt(s)
	return p.sb.String()
}

type printer struct {
	sb     strings.Builder
	indent int
	bufs   []map[string]Type // element types of the buffers in scope
}

func (p *printer) elem(name string) (Type, bool) {
	for i := len(p.bufs) - 1; i >= 0; i-- {
		if t, ok := p.bufs[i][name]; ok {
			return t, true
		}
	}
	return Void, false
}

func (p *printer) declBuf(name string, t Type) {
	if len(p.bufs) == 0 {
		p.bufs = append(p.bufs, map[string]Type{})
	}
	p.bufs[len(p.bufs)-1][name] = t
}

func (p *printer) ex(e Expr) string {
	var sb strings.Builder
	writeExprIn(&sb, e, p.elem)
	return sb.String()
}

func (p *printer) exs(es []Expr) string { return exprListIn(es, p.elem) }

func (p *printer) line(format string, args ...any) {
	p.sb.WriteString(strings.Repeat("  ", p.indent))
	fmt.Fprintf(&p.sb, format, args...)
	p.sb.WriteByte('\n')
}

func (p *printer) module(m *Module) {
	head := fmt.Sprintf("module %s prefix %s", m.Name, m.Prefix)
	if m.Lanes != 0 {
		head += fmt.Sprintf(" lanes %d", m.Lanes)
	}
	p.line("%s", head)
	for _, e := range m.Errors {
		p.line("error %d %s %s", e.Code, e.Name, strconv.Quote(e.Msg))
	}
	for _, d := range m.Defs {
		var ps []string
		for _, pr := range d.Params {
			ps = append(ps, ParamString(pr))
		}
		uses := ""
		if len(d.Uses) > 0 {
			var us []string
			for _, u := range d.Uses {
				us = append(us, ParamString(u))
			}
			uses = " uses(" + strings.Join(us, ", ") + ")"
		}
		p.line("def %s(%s)%s: %s = %s", d.Name, strings.Join(ps, ", "), uses, d.Body.Type(), ExprString(d.Body))
	}
	for _, k := range m.Kernels {
		p.sb.WriteByte('\n')
		p.kernel(k)
	}
}

// ParamString prints one parameter.
func ParamString(pr *Param) string {
	var sb strings.Builder
	sb.WriteString(pr.Name)
	sb.WriteString(": ")
	sb.WriteString(pr.Elem.String())
	if pr.Buffer {
		sb.WriteString("* [")
		sb.WriteString(strings.Join(pr.Shape, ", "))
		sb.WriteString("]")
		if pr.Output {
			sb.WriteString(" out")
		}
		if pr.Null {
			sb.WriteString(" null")
		}
	}
	return sb.String()
}

func (p *printer) kernel(k *Kernel) {
	var ps []string
	p.bufs = []map[string]Type{{}}
	for _, pr := range k.Params {
		ps = append(ps, ParamString(pr))
		if pr.Buffer {
			p.declBuf(pr.Name, pr.Elem)
		}
	}
	entry := ""
	if k.Entry {
		entry = " entry"
	}
	if k.Level != "" {
		entry += " level " + strconv.Quote(k.Level)
	}
	p.line("kernel %s role %s%s (%s) {", k.Name, k.Role, entry, strings.Join(ps, ", "))
	p.block(k.Body)
	p.line("}")
}

func (p *printer) block(b *Block) {
	p.indent++
	p.bufs = append(p.bufs, map[string]Type{})
	for _, s := range b.Stmts {
		p.stmt(s)
	}
	p.bufs = p.bufs[:len(p.bufs)-1]
	p.indent--
}

func (p *printer) stmt(s Stmt) {
	switch s := s.(type) {
	case *Block:
		p.line("{")
		p.block(s)
		p.line("}")
	case *Let:
		p.line("let %s = %s", s.Name, p.ex(s.Value))
	case *Var:
		p.line("var %s = %s", s.Name, p.ex(s.Init))
	case *Assign:
		p.line("%s = %s", s.Name, p.ex(s.Value))
	case *Alloc:
		kind := ""
		switch {
		case s.Shared:
			kind = "shared "
		case s.Heap:
			kind = "heap "
		case s.Private:
			kind = "private "
		}
		p.line("alloc %s%s: %s[%d]", kind, s.Name, s.T, s.Size)
		p.declBuf(s.Name, s.T)
	case *Barrier:
		p.line("barrier")
	case *Copy:
		kw := "copy"
		if s.Async {
			kw = "copy.async"
		}
		p.line("%s %s[%s] = %s[%s] x %d", kw, s.Dst, p.ex(s.DstIndex), s.Src, p.ex(s.SrcIndex), s.N)
	case *AsyncCommit:
		p.line("async.commit")
	case *AsyncWait:
		p.line("async.wait %d", s.Pending)
	case *LdMatrix:
		tr := ""
		if s.Trans {
			tr = ".trans"
		}
		p.line("ldmatrix.x%d%s %s, %s[%s]", s.N, tr, s.Dst, s.Src, p.ex(s.Index))
	case *MMA:
		p.line("mma.%s %s, %s, %s", s.In, s.D, s.A, s.B)
	case *MFMA:
		p.line("mfma.%s %s, %s, %s", s.In, s.D, s.A, s.B)
	case *Reduce:
		p.line("reduce %s = %s over %s in %s .. %s of %s", s.Name, s.Op, s.Var, p.ex(s.Lo), p.ex(s.Hi), p.ex(s.Value))
	case *MatMul:
		op, bt, bshape, zs := "=", "", fmt.Sprintf("[%d, %d]", s.K, s.N), ""
		if s.Accumulate {
			op = "+="
		}
		if s.TransB {
			bt, bshape = "^T", fmt.Sprintf("[%d, %d]", s.N, s.K)
		}
		if s.BRows != "" {
			bshape += " rows(" + s.BRows + ")"
		}
		if s.RotB != nil {
			bshape += fmt.Sprintf(" rot(%s, %s, %d", s.RotB.Cos, s.RotB.Sin, s.RotB.Half)
			if s.RotB.Pairs != RopeHalf {
				bshape += ", " + s.RotB.Pairs.String()
			}
			bshape += ")"
		}
		if s.ZeroSkip {
			zs = " zeroskip"
		}
		tag := ""
		if s.Tag != NoTag {
			tag = " @" + s.Tag.String()
		}
		p.line("matmul %s[%d, %d] %s %s[%d, %d] * %s%s%s%s extent(%s)%s", s.C, s.M, s.N, op, s.A, s.M, s.K, s.B, bt, bshape, zs,
			p.exs([]Expr{s.MExt, s.NExt, s.KExt}), tag)
	case *Malloc:
		p.line("malloc %s: %s[%s]", s.Name, s.T, p.ex(s.Size))
		p.declBuf(s.Name, s.T)
	case *Free:
		p.line("free %s", s.Name)
	case *Store:
		p.line("store %s[%s] = %s", s.Buf, p.ex(s.Index), p.ex(s.Value))
	case *Prefetch:
		kw := "prefetch"
		if s.L1 {
			kw = "prefetch_l1"
		}
		p.line("%s %s[%s]", kw, s.Buf, p.ex(s.Index))
	case *For:
		var sb strings.Builder
		fmt.Fprintf(&sb, "for %s in %s .. %s %s", s.Var, p.ex(s.Lo), p.ex(s.Hi), s.Kind)
		if s.Tag != NoTag {
			sb.WriteString(" @" + s.Tag.String())
		}
		if s.Run != 0 {
			fmt.Fprintf(&sb, " run %d", s.Run)
		}
		if len(s.Ranges) > 0 {
			var rs []string
			for _, r := range s.Ranges {
				rs = append(rs, fmt.Sprintf("%s = %s .. %s", r.Var, p.ex(r.Lo), p.ex(r.Hi)))
			}
			sb.WriteString(" [" + strings.Join(rs, ", ") + "]")
		}
		if s.Next != nil {
			var ss []string
			for _, x := range s.Next.Subst {
				ss = append(ss, fmt.Sprintf("%s = %s", x.Name, p.ex(x.Value)))
			}
			fmt.Fprintf(&sb, " next [%s] if %s", strings.Join(ss, ", "), p.ex(s.Next.When))
		}
		p.line("%s {", sb.String())
		p.block(s.Body)
		p.line("}")
	case *If:
		tag := ""
		if s.Tag != NoTag {
			tag = " @" + s.Tag.String()
		}
		p.line("if %s%s {", p.ex(s.Cond), tag)
		p.block(s.Then)
		if s.Else != nil && len(s.Else.Stmts) > 0 {
			p.line("} else {")
			p.block(s.Else)
		}
		p.line("}")
	case *Return:
		p.line("return %s", p.ex(s.Value))
	case *Continue:
		p.line("continue")
	case *CallStmt:
		res := ""
		if s.Result != "" {
			res = s.Result + " = "
		}
		p.line("call %s%s(%s)", res, s.Fn, p.exs(s.Args))
	default:
		panic(fmt.Sprintf("BUG: print: unknown stmt %T", s))
	}
}

func exprListIn(es []Expr, elems func(string) (Type, bool)) string {
	var parts []string
	for _, e := range es {
		var sb strings.Builder
		writeExprIn(&sb, e, elems)
		parts = append(parts, sb.String())
	}
	return strings.Join(parts, ", ")
}

// FormatFloat prints a float constant's value: the shortest decimal that
// round-trips, or inf, -inf, nan.
func FormatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case math.IsNaN(v):
		return "nan"
	}
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return s
}

func writeExpr(sb *strings.Builder, e Expr) { writeExprIn(sb, e, noElems) }

func noElems(string) (Type, bool) { return Void, false }

// writeExprIn prints e; elems gives the element type of buffers in scope
// (to mark carrier reads), when known.
func writeExprIn(sb *strings.Builder, e Expr, elems func(string) (Type, bool)) {
	switch e := e.(type) {
	case *Const:
		switch {
		case e.T == Bool:
			if e.Int != 0 {
				sb.WriteString("true")
			} else {
				sb.WriteString("false")
			}
		case e.T.IsFloat():
			sb.WriteString(FormatFloat(e.Float))
			sb.WriteString(":" + e.T.String())
		case e.T == I32:
			sb.WriteString(strconv.FormatInt(e.Int, 10))
		default:
			sb.WriteString(strconv.FormatInt(e.Int, 10) + ":" + e.T.String())
		}
	case *Ref:
		sb.WriteString(e.Name)
	case *NotNull:
		sb.WriteString("nonnull(" + e.Buf + ")")
	case *Shuffle:
		sb.WriteString("shfl_xor(")
		writeExprIn(sb, e.X, elems)
		sb.WriteString(", " + strconv.Itoa(e.Mask) + ")")
	case *Binary:
		if e.Op.IsCall() {
			sb.WriteString(e.Op.String() + "(")
			writeExprIn(sb, e.X, elems)
			sb.WriteString(", ")
			writeExprIn(sb, e.Y, elems)
			sb.WriteString(")")
			return
		}
		sb.WriteString("(")
		writeExprIn(sb, e.X, elems)
		sb.WriteString(" " + e.Op.String() + " ")
		writeExprIn(sb, e.Y, elems)
		sb.WriteString(")")
	case *Unary:
		sb.WriteString(e.Op.String() + "(")
		writeExprIn(sb, e.X, elems)
		sb.WriteString(")")
	case *Select:
		sb.WriteString("select(")
		writeExprIn(sb, e.Cond, elems)
		sb.WriteString(", ")
		writeExprIn(sb, e.X, elems)
		sb.WriteString(", ")
		writeExprIn(sb, e.Y, elems)
		sb.WriteString(")")
	case *Convert:
		sb.WriteString(e.To.String() + "(")
		writeExprIn(sb, e.X, elems)
		sb.WriteString(")")
	case *Bitcast:
		sb.WriteString("bitcast." + e.To.String() + "(")
		writeExprIn(sb, e.X, elems)
		sb.WriteString(")")
	case *Load:
		sb.WriteString(e.Buf + "[")
		writeExprIn(sb, e.Index, elems)
		sb.WriteString("]")
		if t, ok := elems(e.Buf); ok && t != e.T {
			sb.WriteString(":" + e.T.String()) // carrier bits of a storage-only element
		}
	case *Guarded:
		sb.WriteString("guarded(")
		writeExprIn(sb, e.Cond, elems)
		sb.WriteString(", ")
		writeExprIn(sb, e.X, elems)
		sb.WriteString(")")
	case *ParamRead:
		sb.WriteString("param." + e.Name + "." + e.T.String() + "(" + exprListIn(e.Index, elems) + ")")
	case *Call:
		sb.WriteString("@" + e.Fn + "." + e.T.String() + "(" + exprListIn(e.Args, elems) + ")")
	case *MulAdd:
		sb.WriteString("muladd(" + exprListIn([]Expr{e.X, e.Y, e.Z}, elems) + ")")
	case *DotBF16:
		sb.WriteString("dotbf16(" + exprListIn([]Expr{e.X, e.Y, e.Z}, elems) + ")")
	case *VShuffle:
		sb.WriteString("shuffle(" + exprListIn([]Expr{e.X, e.Y}, elems) + ", [")
		for i, k := range e.Mask {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(strconv.Itoa(k))
		}
		sb.WriteString("])")
	default:
		panic(fmt.Sprintf("BUG: print: unknown expr %T", e))
	}
}
