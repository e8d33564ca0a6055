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
}

func (p *printer) line(format string, args ...any) {
	p.sb.WriteString(strings.Repeat("  ", p.indent))
	fmt.Fprintf(&p.sb, format, args...)
	p.sb.WriteByte('\n')
}

func (p *printer) module(m *Module) {
	p.line("module %s prefix %s", m.Name, m.Prefix)
	for _, e := range m.Errors {
		p.line("error %d %s %s", e.Code, e.Name, strconv.Quote(e.Msg))
	}
	for _, d := range m.Defs {
		var ps []string
		for _, pr := range d.Params {
			ps = append(ps, ParamString(pr))
		}
		p.line("def %s(%s): %s = %s", d.Name, strings.Join(ps, ", "), d.Body.Type(), ExprString(d.Body))
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
	for _, pr := range k.Params {
		ps = append(ps, ParamString(pr))
	}
	entry := ""
	if k.Entry {
		entry = " entry"
	}
	p.line("kernel %s role %s%s (%s) {", k.Name, k.Role, entry, strings.Join(ps, ", "))
	p.block(k.Body)
	p.line("}")
}

func (p *printer) block(b *Block) {
	p.indent++
	for _, s := range b.Stmts {
		p.stmt(s)
	}
	p.indent--
}

func (p *printer) stmt(s Stmt) {
	switch s := s.(type) {
	case *Block:
		p.line("{")
		p.block(s)
		p.line("}")
	case *Let:
		p.line("let %s = %s", s.Name, ExprString(s.Value))
	case *Var:
		p.line("var %s = %s", s.Name, ExprString(s.Init))
	case *Assign:
		p.line("%s = %s", s.Name, ExprString(s.Value))
	case *Alloc:
		kind := ""
		switch {
		case s.Shared:
			kind = "shared "
		case s.Heap:
			kind = "heap "
		}
		p.line("alloc %s%s: %s[%d]", kind, s.Name, s.T, s.Size)
	case *Barrier:
		p.line("barrier")
	case *Copy:
		p.line("copy %s[%s] = %s[%s] x %d", s.Dst, ExprString(s.DstIndex), s.Src, ExprString(s.SrcIndex), s.N)
	case *MMA:
		p.line("mma.%s %s, %s, %s", s.In, s.D, s.A, s.B)
	case *Malloc:
		p.line("malloc %s: %s[%s]", s.Name, s.T, ExprString(s.Size))
	case *Free:
		p.line("free %s", s.Name)
	case *Store:
		p.line("store %s[%s] = %s", s.Buf, ExprString(s.Index), ExprString(s.Value))
	case *For:
		var sb strings.Builder
		fmt.Fprintf(&sb, "for %s in %s .. %s %s", s.Var, ExprString(s.Lo), ExprString(s.Hi), s.Kind)
		if s.Tag != "" {
			sb.WriteString(" @" + s.Tag)
		}
		if len(s.Ranges) > 0 {
			var rs []string
			for _, r := range s.Ranges {
				rs = append(rs, fmt.Sprintf("%s = %s .. %s", r.Var, ExprString(r.Lo), ExprString(r.Hi)))
			}
			sb.WriteString(" [" + strings.Join(rs, ", ") + "]")
		}
		p.line("%s {", sb.String())
		p.block(s.Body)
		p.line("}")
	case *If:
		tag := ""
		if s.Tag != "" {
			tag = " @" + s.Tag
		}
		p.line("if %s%s {", ExprString(s.Cond), tag)
		p.block(s.Then)
		if s.Else != nil && len(s.Else.Stmts) > 0 {
			p.line("} else {")
			p.block(s.Else)
		}
		p.line("}")
	case *Return:
		p.line("return %s", ExprString(s.Value))
	case *Continue:
		p.line("continue")
	case *CallStmt:
		res := ""
		if s.Result != "" {
			res = s.Result + " = "
		}
		p.line("call %s%s(%s)", res, s.Fn, exprList(s.Args))
	default:
		panic(fmt.Sprintf("BUG: print: unknown stmt %T", s))
	}
}

func exprList(es []Expr) string {
	var parts []string
	for _, e := range es {
		parts = append(parts, ExprString(e))
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

func writeExpr(sb *strings.Builder, e Expr) {
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
		writeExpr(sb, e.X)
		sb.WriteString(", " + strconv.Itoa(e.Mask) + ")")
	case *Binary:
		if e.Op.IsCall() {
			sb.WriteString(e.Op.String() + "(")
			writeExpr(sb, e.X)
			sb.WriteString(", ")
			writeExpr(sb, e.Y)
			sb.WriteString(")")
			return
		}
		sb.WriteString("(")
		writeExpr(sb, e.X)
		sb.WriteString(" " + e.Op.String() + " ")
		writeExpr(sb, e.Y)
		sb.WriteString(")")
	case *Unary:
		sb.WriteString(e.Op.String() + "(")
		writeExpr(sb, e.X)
		sb.WriteString(")")
	case *Select:
		sb.WriteString("select(")
		writeExpr(sb, e.Cond)
		sb.WriteString(", ")
		writeExpr(sb, e.X)
		sb.WriteString(", ")
		writeExpr(sb, e.Y)
		sb.WriteString(")")
	case *Convert:
		sb.WriteString(e.To.String() + "(")
		writeExpr(sb, e.X)
		sb.WriteString(")")
	case *Bitcast:
		sb.WriteString("bitcast." + e.To.String() + "(")
		writeExpr(sb, e.X)
		sb.WriteString(")")
	case *Load:
		sb.WriteString(e.Buf + "[")
		writeExpr(sb, e.Index)
		sb.WriteString("]")
	case *Call:
		sb.WriteString("@" + e.Fn + "." + e.T.String() + "(" + exprList(e.Args) + ")")
	default:
		panic(fmt.Sprintf("BUG: print: unknown expr %T", e))
	}
}
