package ir

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Parse reads a module in the text form that Print emits (see print.go).
// Names are resolved against their block scope, which gives every Ref and
// Load its type; errors read "line:col: message". Parse checks expression
// typing as it builds nodes but does not run Verify.
func Parse(src string) (m *Module, err error) {
	p, err := newParser(src)
	if err != nil {
		return nil, err
	}
	defer p.recover(&err)
	m = p.module()
	p.expectEOF()
	return m, nil
}

// ParseKernel reads one kernel in the text form (as Kernel.String prints it).
func ParseKernel(src string) (k *Kernel, err error) {
	p, err := newParser(src)
	if err != nil {
		return nil, err
	}
	defer p.recover(&err)
	k = p.kernel()
	p.expectEOF()
	return k, nil
}

// ParseExpr reads one expression; scope gives the type of every name it may
// use (for a buffer, its element type).
func ParseExpr(src string, scope map[string]Type) (e Expr, err error) {
	p, err := newParser(src)
	if err != nil {
		return nil, err
	}
	defer p.recover(&err)
	s := map[string]decl{}
	for n, t := range scope {
		s[n] = decl{kind: dAny, t: t}
	}
	p.scopes = append(p.scopes, s)
	e = p.expr()
	p.expectEOF()
	return e, nil
}

// ---- lexer ----

type tokKind uint8

const (
	tEOF tokKind = iota
	tIdent
	tInt   // digits
	tFloat // digits with a fraction or exponent
	tString
	tAt // @name (text without the @)
	tPunct
)

type token struct {
	kind      tokKind
	text      string
	line, col int
	off, end  int // byte span in the source
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of input"
	case tString:
		return "string " + t.text
	case tAt:
		return "@" + t.text
	}
	return strconv.Quote(t.text)
}

type parseError struct{ msg string }

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }

var puncts2 = []string{"..", "==", "!=", "<=", ">=", "<<", ">>"}

const puncts1 = "()[]{},:=<>+-*/%&|^."

func lex(src string) ([]token, error) {
	var toks []token
	line, lineStart := 1, 0
	for i := 0; i < len(src); {
		c := src[i]
		if c == '\n' {
			line++
			i++
			lineStart = i
			continue
		}
		if c == ' ' || c == '\t' || c == '\r' {
			i++
			continue
		}
		if c == '/' && i+1 < len(src) && src[i+1] == '/' {
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		}
		t := token{line: line, col: i - lineStart + 1, off: i}
		j := i + 1
		switch {
		case isIdentStart(c):
			for j < len(src) && isIdentChar(src[j]) {
				j++
			}
			t.kind = tIdent
		case isDigit(c):
			for j < len(src) && isDigit(src[j]) {
				j++
			}
			t.kind = tInt
			if j+1 < len(src) && src[j] == '.' && isDigit(src[j+1]) {
				j++
				for j < len(src) && isDigit(src[j]) {
					j++
				}
				t.kind = tFloat
			}
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				k := j + 1
				if k < len(src) && (src[k] == '+' || src[k] == '-') {
					k++
				}
				if k < len(src) && isDigit(src[k]) {
					for k < len(src) && isDigit(src[k]) {
						k++
					}
					j = k
					t.kind = tFloat
				}
			}
		case c == '@':
			for j < len(src) && (isIdentChar(src[j]) || src[j] == '.' || src[j] == '-') {
				j++
			}
			if j == i+1 {
				return nil, fmt.Errorf("%d:%d: expected a name after @", t.line, t.col)
			}
			t.kind = tAt
			t.text = src[i+1 : j]
		case c == '"':
			for j < len(src) && src[j] != '"' && src[j] != '\n' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(src) || src[j] != '"' {
				return nil, fmt.Errorf("%d:%d: unterminated string", t.line, t.col)
			}
			j++
			s, err := strconv.Unquote(src[i:j])
			if err != nil {
				return nil, fmt.Errorf("%d:%d: bad string literal", t.line, t.col)
			}
			t.kind = tString
			t.text = s
		default:
			t.kind = tPunct
			j = i
			for _, p := range puncts2 {
				if strings.HasPrefix(src[i:], p) {
					j = i + 2
				}
			}
			if j == i {
				if !strings.ContainsRune(puncts1, rune(c)) {
					return nil, fmt.Errorf("%d:%d: unexpected character %q", t.line, t.col, rune(c))
				}
				j = i + 1
			}
		}
		if t.kind != tAt && t.kind != tString {
			t.text = src[i:j]
		}
		t.end = j
		toks = append(toks, t)
		i = j
	}
	toks = append(toks, token{kind: tEOF, line: line, col: len(src) - lineStart + 1, off: len(src), end: len(src)})
	return toks, nil
}

// ---- parser ----

type parser struct {
	src    string
	toks   []token
	pos    int
	scopes []map[string]decl
}

func newParser(src string) (*parser, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	return &parser{src: src, toks: toks}, nil
}

func (p *parser) recover(err *error) {
	if r := recover(); r != nil {
		pe, ok := r.(parseError)
		if !ok {
			panic(r)
		}
		*err = fmt.Errorf("%s", pe.msg)
	}
}

func (p *parser) failAt(t token, format string, args ...any) {
	panic(parseError{fmt.Sprintf("%d:%d: ", t.line, t.col) + fmt.Sprintf(format, args...)})
}

func (p *parser) peek() token { return p.toks[p.pos] }
func (p *parser) peekN(n int) token {
	if p.pos+n < len(p.toks) {
		return p.toks[p.pos+n]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tEOF {
		p.pos++
	}
	return t
}

func (t token) is(kind tokKind, text string) bool { return t.kind == kind && t.text == text }

func (p *parser) isPunct(s string) bool { return p.peek().is(tPunct, s) }
func (p *parser) isKw(s string) bool    { return p.peek().is(tIdent, s) }

func (p *parser) accept(s string) bool {
	if t := p.peek(); t.is(tPunct, s) || t.is(tIdent, s) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) expect(s string) token {
	t := p.next()
	if !t.is(tPunct, s) && !t.is(tIdent, s) {
		p.failAt(t, "expected %q, found %s", s, t)
	}
	return t
}

func (p *parser) expectEOF() {
	if t := p.peek(); t.kind != tEOF {
		p.failAt(t, "expected end of input, found %s", t)
	}
}

func (p *parser) ident() token {
	t := p.next()
	if t.kind != tIdent {
		p.failAt(t, "expected a name, found %s", t)
	}
	return t
}

func (p *parser) typ() Type {
	t := p.ident()
	ty, ok := TypeByName(t.text)
	if !ok {
		p.failAt(t, "unknown type %s", t.text)
	}
	return ty
}

// stringLit reads a quoted string.
func (p *parser) stringLit() string {
	t := p.next()
	if t.kind != tString {
		p.failAt(t, "expected a quoted string, found %s", t)
	}
	return t.text
}

func (p *parser) intLit(neg bool) int64 {
	t := p.next()
	if t.kind != tInt {
		p.failAt(t, "expected an integer, found %s", t)
	}
	s := t.text
	if neg {
		s = "-" + s
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		p.failAt(t, "integer %s out of range", s)
	}
	return v
}

func (p *parser) lookup(t token) decl {
	for i := len(p.scopes) - 1; i >= 0; i-- {
		if d, ok := p.scopes[i][t.text]; ok {
			return d
		}
	}
	p.failAt(t, "unknown name %s", t.text)
	return decl{}
}

func (p *parser) declare(name string, d decl) { p.scopes[len(p.scopes)-1][name] = d }
func (p *parser) push()                       { p.scopes = append(p.scopes, map[string]decl{}) }
func (p *parser) pop()                        { p.scopes = p.scopes[:len(p.scopes)-1] }

func (p *parser) module() *Module {
	p.expect("module")
	m := &Module{Name: p.ident().text}
	p.expect("prefix")
	m.Prefix = p.ident().text
	if p.accept("lanes") {
		m.SetLaneWidth(int(p.intLit(false)))
	}
	for p.accept("error") {
		neg := p.accept("-")
		code := p.intLit(neg)
		name := p.ident().text
		t := p.next()
		if t.kind != tString {
			p.failAt(t, "expected a quoted message, found %s", t)
		}
		m.Errors = append(m.Errors, ErrorCode{Code: int(code), Name: name, Msg: t.text})
	}
	for p.isKw("def") {
		m.Defs = append(m.Defs, p.def())
	}
	for p.isKw("kernel") {
		m.Kernels = append(m.Kernels, p.kernel())
	}
	return m
}

// def reads `def NAME(a: i32, ...): T = expr`, with `uses(b: T*, ...)`
// after the parameters when the body reads kernel arguments.
func (p *parser) def() *Def {
	p.expect("def")
	d := &Def{Name: p.ident().text}
	p.expect("(")
	p.scopes = []map[string]decl{{}}
	for !p.isPunct(")") {
		if len(d.Params) > 0 {
			p.expect(",")
		}
		d.Params = append(d.Params, p.param())
	}
	p.expect(")")
	if p.isKw("uses") {
		p.next()
		p.expect("(")
		for !p.isPunct(")") {
			if len(d.Uses) > 0 {
				p.expect(",")
			}
			d.Uses = append(d.Uses, p.param())
		}
		p.expect(")")
	}
	p.expect(":")
	tt := p.peek()
	t := p.typ()
	p.expect("=")
	d.Body = p.expr()
	if d.Body.Type() != t {
		p.failAt(tt, "def %s declared %s, body has type %s", d.Name, t, d.Body.Type())
	}
	p.scopes = nil
	return d
}

func (p *parser) kernel() *Kernel {
	p.expect("kernel")
	k := &Kernel{Name: p.ident().text}
	p.expect("role")
	if t := p.peek(); t.kind == tIdent && !(t.text == "entry" && p.peekN(1).is(tPunct, "(")) {
		k.Role = Role(p.next().text)
	}
	k.Entry = p.accept("entry")
	if p.isKw("level") && p.peekN(1).kind == tString {
		p.next()
		k.Level = p.stringLit()
	}
	p.expect("(")
	p.scopes = []map[string]decl{{}}
	for !p.isPunct(")") {
		if len(k.Params) > 0 {
			p.expect(",")
		}
		k.Params = append(k.Params, p.param())
	}
	p.expect(")")
	k.Body = p.block()
	p.scopes = nil
	return k
}

func (p *parser) param() *Param {
	nt := p.ident()
	pr := &Param{Name: nt.text}
	p.expect(":")
	pr.Elem = p.typ()
	if p.accept("*") {
		pr.Buffer = true
		pr.Shape = p.dims()
		pr.Output = p.accept("out")
		pr.Null = p.accept("null")
	}
	if _, dup := p.scopes[0][pr.Name]; dup {
		p.failAt(nt, "duplicate param %s", pr.Name)
	}
	kind := dParam
	if pr.Buffer {
		kind = dBuffer
	}
	p.declare(pr.Name, decl{kind: kind, t: pr.Elem})
	return pr
}

// dims reads `[d, ...]`; each dim is the source text between top-level commas.
func (p *parser) dims() []string {
	p.expect("[")
	var dims []string
	if p.accept("]") {
		return nil
	}
	for {
		first, depth := p.peek(), 0
		if p.isPunct(",") || p.isPunct("]") {
			p.failAt(first, "empty shape dimension")
		}
		last := first
		for {
			t := p.peek()
			if t.kind == tEOF {
				p.failAt(t, "unterminated shape")
			}
			if depth == 0 && (t.is(tPunct, ",") || t.is(tPunct, "]")) {
				break
			}
			switch {
			case t.is(tPunct, "("), t.is(tPunct, "["):
				depth++
			case t.is(tPunct, ")"), t.is(tPunct, "]"):
				depth--
			}
			last = p.next()
		}
		dims = append(dims, p.src[first.off:last.end])
		if p.accept("]") {
			return dims
		}
		p.expect(",")
	}
}

func (p *parser) block() *Block {
	p.expect("{")
	p.push()
	b := &Block{}
	for !p.isPunct("}") {
		b.Stmts = append(b.Stmts, p.stmt())
	}
	p.next()
	p.pop()
	return b
}

var declKindNames = [...]string{"param", "buffer", "let", "var", "loop var", "alloc", "malloc", "call result", "name"}

func (p *parser) stmt() Stmt {
	t := p.peek()
	if t.is(tPunct, "{") {
		return p.block()
	}
	if t.kind != tIdent {
		p.failAt(t, "expected a statement, found %s", t)
	}
	if p.peekN(1).is(tPunct, "=") {
		p.next()
		p.next()
		d := p.lookup(t)
		if d.kind != dVar {
			p.failAt(t, "cannot assign to %s %s", declKindNames[d.kind], t.text)
		}
		vt := p.peek()
		v := p.expr()
		if v.Type() != d.t {
			p.failAt(vt, "type mismatch: assigning %s to %s var %s", v.Type(), d.t, t.text)
		}
		return &Assign{Name: t.text, Value: v}
	}
	p.next()
	switch t.text {
	case "let", "var":
		name := p.ident().text
		p.expect("=")
		v := p.expr()
		if t.text == "let" {
			p.declare(name, decl{kind: dLet, t: v.Type()})
			return &Let{Name: name, Value: v}
		}
		p.declare(name, decl{kind: dVar, t: v.Type()})
		return &Var{Name: name, Init: v}
	case "alloc":
		shared := p.isKw("shared") && p.peekN(1).kind == tIdent
		heap := !shared && p.isKw("heap") && p.peekN(1).kind == tIdent
		private := !shared && !heap && p.isKw("private") && p.peekN(1).kind == tIdent
		if shared || heap || private {
			p.next()
		}
		name := p.ident().text
		p.expect(":")
		ty := p.typ()
		p.expect("[")
		n := p.intLit(false)
		p.expect("]")
		p.declare(name, decl{kind: dAlloc, t: ty})
		return &Alloc{Name: name, T: ty, Size: int(n), Shared: shared, Heap: heap, Private: private}
	case "barrier":
		return &Barrier{}
	case "reduce":
		return p.reduce()
	case "matmul":
		return p.matmul()
	case "copy":
		c := &Copy{}
		if p.accept(".") {
			if x := p.ident(); x.text != "async" {
				p.failAt(x, "expected copy.async, found copy.%s", x.text)
			}
			c.Async = true
		}
		c.Dst = p.ident().text
		p.expect("[")
		c.DstIndex = p.expr()
		p.expect("]")
		p.expect("=")
		c.Src = p.ident().text
		p.expect("[")
		c.SrcIndex = p.expr()
		p.expect("]")
		if x := p.ident(); x.text != "x" {
			p.failAt(x, "expected x N after a copy source, found %s", x.text)
		}
		c.N = int(p.intLit(false))
		return c
	case "async":
		p.expect(".")
		switch x := p.ident(); x.text {
		case "commit":
			return &AsyncCommit{}
		case "wait":
			return &AsyncWait{Pending: int(p.intLit(false))}
		default:
			p.failAt(x, "expected async.commit or async.wait N, found async.%s", x.text)
		}
	case "ldmatrix":
		p.expect(".")
		x := p.ident()
		s := &LdMatrix{}
		switch x.text {
		case "x1", "x2", "x4":
			s.N = int(x.text[1] - '0')
		default:
			p.failAt(x, "expected ldmatrix.x1, .x2 or .x4, found ldmatrix.%s", x.text)
		}
		if p.accept(".") {
			if y := p.ident(); y.text != "trans" {
				p.failAt(y, "expected ldmatrix.xN.trans, found .%s", y.text)
			}
			s.Trans = true
		}
		s.Dst = p.ident().text
		p.expect(",")
		s.Src = p.ident().text
		p.expect("[")
		s.Index = p.expr()
		p.expect("]")
		return s
	case "mma":
		p.expect(".")
		in := p.typ()
		s := &MMA{In: in, D: p.ident().text}
		p.expect(",")
		s.A = p.ident().text
		p.expect(",")
		s.B = p.ident().text
		return s
	case "mfma":
		p.expect(".")
		in := p.typ()
		s := &MFMA{In: in, D: p.ident().text}
		p.expect(",")
		s.A = p.ident().text
		p.expect(",")
		s.B = p.ident().text
		return s
	case "malloc":
		name := p.ident().text
		p.expect(":")
		ty := p.typ()
		p.expect("[")
		n := p.expr()
		p.expect("]")
		p.declare(name, decl{kind: dMalloc, t: ty})
		return &Malloc{Name: name, T: ty, Size: n}
	case "free":
		nt := p.ident()
		if d := p.lookup(nt); d.kind != dMalloc && d.kind != dAny {
			p.failAt(nt, "free of %s %s, want a malloc", declKindNames[d.kind], nt.text)
		}
		return &Free{Name: nt.text}
	case "store":
		nt := p.ident()
		d := p.bufferDecl(nt)
		p.expect("[")
		idx := p.expr()
		p.expect("]")
		p.expect("=")
		vt := p.peek()
		v := p.expr()
		if !accessType(d.t, v.Type()) {
			p.failAt(vt, "type mismatch: storing %s into %s buffer %s", v.Type(), d.t, nt.text)
		}
		return &Store{Buf: nt.text, Index: idx, Value: v}
	case "prefetch", "prefetch_l1":
		nt := p.ident()
		p.bufferDecl(nt)
		p.expect("[")
		it := p.peek()
		idx := p.expr()
		p.expect("]")
		if t := idx.Type(); t != I32 && t != I64 {
			p.failAt(it, "index of %s is %s, want i32 or i64", nt.text, t)
		}
		return &Prefetch{Buf: nt.text, Index: idx, L1: t.text == "prefetch_l1"}
	case "for":
		return p.forStmt()
	case "if":
		ct := p.peek()
		s := &If{Cond: p.expr()}
		if s.Cond.Type() != Bool {
			p.failAt(ct, "if condition is %s, want bool", s.Cond.Type())
		}
		s.Tag = p.tag()
		s.Then = p.block()
		if p.accept("else") {
			s.Else = p.block()
		}
		return s
	case "return":
		vt := p.peek()
		v := p.expr()
		if v.Type() != I32 {
			p.failAt(vt, "return value is %s, want i32", v.Type())
		}
		return &Return{Value: v}
	case "continue":
		return &Continue{}
	case "call":
		s := &CallStmt{}
		if p.peekN(1).is(tPunct, "=") {
			s.Result = p.ident().text
			p.next()
		}
		s.Fn = p.ident().text
		for p.accept(".") { // runtime routines: rt.num_threads
			s.Fn += "." + p.ident().text
		}
		s.Args = p.args()
		if s.Result != "" {
			p.declare(s.Result, decl{kind: dResult, t: I32})
		}
		return s
	}
	p.failAt(t, "unknown statement %s", t.text)
	return nil
}

func (p *parser) forStmt() *For {
	s := &For{Var: p.ident().text}
	p.expect("in")
	lt := p.peek()
	s.Lo = p.expr()
	p.expect("..")
	ht := p.peek()
	s.Hi = p.expr()
	if s.Lo.Type() != I32 {
		p.failAt(lt, "for %s: lo is %s, want i32", s.Var, s.Lo.Type())
	}
	if s.Hi.Type() != I32 {
		p.failAt(ht, "for %s: hi is %s, want i32", s.Var, s.Hi.Type())
	}
	kt := p.ident()
	kind, ok := LoopKindByName(kt.text)
	if !ok {
		p.failAt(kt, "unknown loop kind %s (want one of %s)", kt.text, strings.Join(loopKindNames[:], ", "))
	}
	s.Kind = kind
	s.Tag = p.tag()
	if p.accept("run") {
		s.Run = int(p.intLit(false))
	}
	p.push()
	p.declare(s.Var, decl{kind: dLoop, t: I32})
	if p.accept("[") {
		for {
			r := Range{Var: p.ident().text}
			p.expect("=")
			r.Lo = p.expr()
			p.expect("..")
			r.Hi = p.expr()
			s.Ranges = append(s.Ranges, r)
			if p.accept("]") {
				break
			}
			p.expect(",")
		}
	}
	if p.accept("next") {
		s.Next = &Next{}
		p.expect("[")
		for !p.accept("]") {
			if len(s.Next.Subst) > 0 {
				p.expect(",")
			}
			x := Rebind{Name: p.ident().text}
			p.expect("=")
			x.Value = p.expr()
			s.Next.Subst = append(s.Next.Subst, x)
		}
		p.expect("if")
		s.Next.When = p.expr()
	}
	s.Body = p.block()
	p.pop()
	return s
}

// tag reads an optional @tag.
func (p *parser) tag() Tag {
	if p.peek().kind != tAt {
		return NoTag
	}
	t := p.next()
	tag, ok := TagByName(t.text)
	if !ok {
		p.failAt(t, "unknown tag @%s (want one of @%s)", t.text, strings.Join(tagNames[1:], ", @"))
	}
	return tag
}

// reduce reads `reduce NAME = OP over VAR in LO .. HI of EXPR`.
func (p *parser) reduce() *Reduce {
	s := &Reduce{Name: p.ident().text}
	p.expect("=")
	ot := p.ident()
	switch ot.text {
	case "add":
		s.Op = ReduceAdd
	case "max":
		s.Op = ReduceMax
	case "maxnum":
		s.Op = ReduceMaxNum
	default:
		p.failAt(ot, "unknown reduction %s (want add, max or maxnum)", ot.text)
	}
	p.expect("over")
	s.Var = p.ident().text
	p.expect("in")
	s.Lo = p.expr()
	p.expect("..")
	s.Hi = p.expr()
	p.expect("of")
	p.push()
	p.declare(s.Var, decl{kind: dLoop, t: I32})
	vt := p.peek()
	s.Value = p.expr()
	p.pop()
	if t := s.Value.Type(); !t.IsInt() && !t.IsFloat() {
		p.failAt(vt, "reduce of %s, want an int or a float", t)
	}
	p.declare(s.Name, decl{kind: dLet, t: s.Value.Type()})
	return s
}

// matmul reads `matmul C[M, N] (=|+=) A[M, K] * B[K, N] [rows(R)]
// [rot(COS, SIN, HALF[, interleaved])] [zeroskip] extent(m, n, k) [@tag]`,
// or `* B^T[N, K]` for a transposed B; rows(R) reads B through the row
// offsets in R (MatMul.BRows), rot turns B's rows (MatMul.RotB:
// rotate-half pairs, or interleaved ones).
func (p *parser) matmul() *MatMul {
	s := &MatMul{}
	shape := func() (name token, a, b int) {
		name = p.ident()
		p.bufferDecl(name)
		p.expect("[")
		a = int(p.intLit(false))
		p.expect(",")
		b = int(p.intLit(false))
		p.expect("]")
		return name, a, b
	}
	ct, m, n := shape()
	s.C, s.M, s.N = ct.text, m, n
	if p.accept("+") {
		s.Accumulate = true
	}
	p.expect("=")
	at, am, k := shape()
	s.A, s.K = at.text, k
	if am != m {
		p.failAt(at, "matmul: A has %d rows, C has %d", am, m)
	}
	p.expect("*")
	bt := p.ident()
	p.bufferDecl(bt)
	s.B = bt.text
	if p.accept("^") {
		if x := p.ident(); x.text != "T" {
			p.failAt(x, "expected ^T, found ^%s", x.text)
		}
		s.TransB = true
	}
	p.expect("[")
	b0 := int(p.intLit(false))
	p.expect(",")
	b1 := int(p.intLit(false))
	p.expect("]")
	if wantR, wantC := k, n; s.TransB && (b0 != n || b1 != k) || !s.TransB && (b0 != wantR || b1 != wantC) {
		p.failAt(bt, "matmul: B shape [%d, %d] does not fit A [%d, %d] and C [%d, %d]", b0, b1, m, k, m, n)
	}
	if p.accept("rows") {
		p.expect("(")
		rt := p.ident()
		p.bufferDecl(rt)
		s.BRows = rt.text
		p.expect(")")
	}
	if p.accept("rot") {
		p.expect("(")
		ct := p.ident()
		p.bufferDecl(ct)
		p.expect(",")
		st := p.ident()
		p.bufferDecl(st)
		p.expect(",")
		s.RotB = &RotB{Cos: ct.text, Sin: st.text, Half: int(p.intLit(false))}
		if p.accept(",") {
			p.expect("interleaved")
			s.RotB.Pairs = RopeInterleaved
		}
		p.expect(")")
	}
	s.ZeroSkip = p.accept("zeroskip")
	p.expect("extent")
	ext := p.args()
	if len(ext) != 3 {
		p.failAt(bt, "matmul extent takes 3 values (m, n, k), got %d", len(ext))
	}
	s.MExt, s.NExt, s.KExt = ext[0], ext[1], ext[2]
	s.Tag = p.tag()
	return s
}

func (p *parser) bufferDecl(t token) decl {
	d := p.lookup(t)
	if !d.isBuffer() {
		p.failAt(t, "%s %s is not a buffer", declKindNames[d.kind], t.text)
	}
	return d
}

func (p *parser) args() []Expr {
	p.expect("(")
	var args []Expr
	for !p.isPunct(")") {
		if len(args) > 0 {
			p.expect(",")
		}
		args = append(args, p.expr())
	}
	p.next()
	return args
}

// check fails at t when e breaks a typing rule.
func (p *parser) check(t token, e Expr) Expr {
	if msg := nodeRule(e); msg != "" {
		p.failAt(t, "%s", msg)
	}
	return e
}

var binOpByText = func() map[string]BinOp {
	m := map[string]BinOp{}
	for i, n := range binOpNames {
		m[n] = BinOp(i)
	}
	return m
}()

var unOpByName = func() map[string]UnOp {
	m := map[string]UnOp{}
	for i, n := range unOpNames {
		m[n] = UnOp(i)
	}
	return m
}()

func (p *parser) expr() Expr {
	t := p.next()
	switch t.kind {
	case tPunct:
		switch t.text {
		case "(":
			x := p.expr()
			if p.accept(")") {
				return x
			}
			ot := p.next()
			op, ok := binOpByText[ot.text]
			if ot.kind != tPunct || !ok {
				p.failAt(ot, "expected a binary operator or \")\", found %s", ot)
			}
			y := p.expr()
			p.expect(")")
			return p.check(ot, &Binary{Op: op, X: x, Y: y})
		case "-":
			n := p.next()
			if n.kind == tInt || n.kind == tFloat || n.is(tIdent, "inf") || n.is(tIdent, "nan") {
				return p.number(n, true)
			}
			p.failAt(n, "expected a number after -, found %s", n)
		}
	case tInt, tFloat:
		return p.number(t, false)
	case tAt:
		i := strings.LastIndexByte(t.text, '.')
		if i <= 0 {
			p.failAt(t, "call @%s needs a result type suffix (@%s.f32)", t.text, t.text)
		}
		ty, ok := TypeByName(t.text[i+1:])
		if !ok {
			p.failAt(t, "unknown type %s", t.text[i+1:])
		}
		return p.check(t, &Call{Fn: t.text[:i], T: ty, Args: p.args()})
	case tIdent:
		return p.identExpr(t)
	}
	p.failAt(t, "expected an expression, found %s", t)
	return nil
}

func (p *parser) identExpr(t token) Expr {
	nt := p.peek()
	switch {
	case t.text == "true" || t.text == "false":
		return BoolConst(t.text == "true")
	case (t.text == "inf" || t.text == "nan") && nt.is(tPunct, ":"):
		return p.number(t, false)
	case t.text == "shfl_xor" && nt.is(tPunct, "("):
		p.next()
		x := p.expr()
		p.expect(",")
		m := p.intLit(false)
		p.expect(")")
		return &Shuffle{X: x, Mask: int(m)}
	case t.text == "shuffle" && nt.is(tPunct, "("):
		p.next()
		x := p.expr()
		p.expect(",")
		y := p.expr()
		p.expect(",")
		p.expect("[")
		var mask []int
		for !p.isPunct("]") {
			if len(mask) > 0 {
				p.expect(",")
			}
			mask = append(mask, int(p.intLit(false)))
		}
		p.next()
		p.expect(")")
		return p.check(t, &VShuffle{X: x, Y: y, Mask: mask})
	case t.text == "muladd" && nt.is(tPunct, "("):
		args := p.args()
		if len(args) != 3 {
			p.failAt(t, "muladd takes 3 arguments, got %d", len(args))
		}
		return p.check(t, &MulAdd{X: args[0], Y: args[1], Z: args[2]})
	case t.text == "dotbf16" && nt.is(tPunct, "("):
		args := p.args()
		if len(args) != 3 {
			p.failAt(t, "dotbf16 takes 3 arguments, got %d", len(args))
		}
		return p.check(t, &DotBF16{X: args[0], Y: args[1], Z: args[2]})
	case t.text == "nonnull" && nt.is(tPunct, "("):
		p.next()
		bt := p.ident()
		p.bufferDecl(bt)
		p.expect(")")
		return &NotNull{Buf: bt.text}
	case t.text == "bitcast" && nt.is(tPunct, "."):
		p.next()
		to := p.typ()
		args := p.args()
		if len(args) != 1 {
			p.failAt(t, "bitcast takes 1 argument, got %d", len(args))
		}
		return p.check(t, &Bitcast{To: to, X: args[0]})
	case nt.is(tPunct, "("):
		args := p.args()
		want := 1
		var e Expr
		if op, ok := unOpByName[t.text]; ok {
			if len(args) == 1 {
				e = &Unary{Op: op, X: args[0]}
			}
		} else if ty, ok := TypeByName(t.text); ok {
			if len(args) == 1 {
				e = &Convert{To: ty, X: args[0]}
			}
		} else if t.text == "min" || t.text == "max" {
			want = 2
			if len(args) == 2 {
				e = &Binary{Op: binOpByText[t.text], X: args[0], Y: args[1]}
			}
		} else if t.text == "select" {
			want = 3
			if len(args) == 3 {
				e = &Select{Cond: args[0], X: args[1], Y: args[2]}
			}
		} else if t.text == "guarded" {
			want = 2
			if len(args) == 2 {
				e = &Guarded{Cond: args[0], X: args[1]}
			}
		} else {
			p.failAt(t, "unknown function %s", t.text)
		}
		if e == nil {
			p.failAt(t, "%s takes %d arguments, got %d", t.text, want, len(args))
		}
		return p.check(t, e)
	case nt.is(tPunct, "["):
		d := p.bufferDecl(t)
		p.next()
		idx := p.expr()
		p.expect("]")
		ty := d.t
		if p.isPunct(":") && p.peekN(1).kind == tIdent {
			// buf[i]:T reads a storage-only element as its carrier bits.
			p.next()
			tt := p.peek()
			if ty = p.typ(); !accessType(d.t, ty) {
				p.failAt(tt, "cannot read %s elements of %s as %s", d.t, t.text, ty)
			}
		}
		return p.check(t, &Load{Buf: t.text, Index: idx, T: ty})
	}
	return &Ref{Name: t.text, T: p.lookup(t).t}
}

// number builds a constant from t (an int, float, inf or nan token) and its
// optional `:type` suffix.
func (p *parser) number(t token, neg bool) Expr {
	text := t.text
	if neg {
		text = "-" + text
	}
	ty := Void
	if p.accept(":") {
		ty = p.typ()
	}
	if t.kind == tInt && (ty == Void || ty.IsInt()) {
		if ty == Void {
			ty = I32
		}
		v, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			p.failAt(t, "integer %s out of range", text)
		}
		return p.check(t, IntT(ty, v))
	}
	if !ty.IsFloat() {
		if ty == Void {
			p.failAt(t, "float constant %s needs a type suffix (%s:f32)", text, text)
		}
		p.failAt(t, "constant %s cannot have type %s", text, ty)
	}
	var v float64
	switch t.text {
	case "inf":
		v = math.Inf(1)
		if neg {
			v = math.Inf(-1)
		}
	case "nan":
		v = math.NaN()
	default:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			p.failAt(t, "bad float constant %s", text)
		}
		v = f
	}
	return &Const{T: ty, Float: v}
}
