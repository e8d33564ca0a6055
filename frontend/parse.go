package frontend

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"

	"github.com/attnc/attnc/ir"
)

// maxNesting bounds parenthesis nesting and runs of prefix operators, so
// that no input can exhaust the stack of the recursive-descent parser.
const maxNesting = 100

// maxSize bounds the length of a spec in bytes.
const maxSize = 256 << 10

// MaxTokens bounds the tokens of a spec: names, numbers, operators,
// parentheses and line ends (comments and other white space do not count).
// Lexing and parsing take several microseconds a token, so a spec of
// maxSize bytes of parentheses would take many seconds; a count by a cheap
// scan refuses it first.
const MaxTokens = 32 << 10

// Parse parses and validates the .attn spec src and returns its variants in
// source order. filename only labels positions. The error, if any, is an
// *ir.PosError: the syntax error, or else the first semantic error in
// source order. A spec without a variant is an error.
func Parse(filename string, src []byte) ([]*ir.Variant, error) {
	cs, err := ParseEach(filename, src)
	if err != nil {
		return nil, err
	}
	var vs []*ir.Variant
	var errs []*ir.PosError
	for _, c := range cs {
		vs = append(vs, c.Variant)
		errs = append(errs, c.Errs...)
	}
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, errs[0]
	}
	return vs, nil
}

// ParseEach parses the .attn spec src and checks each of its variants on
// its own: every variant, in source order, with the variant or every error
// found in it. err (an *ir.PosError) is an error of the whole file — a
// syntax error, a size or nesting limit, a file without a variant — and
// then there are no variants.
func ParseEach(filename string, src []byte) ([]Checked, error) {
	if len(src) > maxSize {
		return nil, tooLarge(filename, fmt.Sprintf("%d bytes", len(src)))
	}
	// A UTF-8 byte order mark (editors on Windows write one) is not part
	// of the spec; columns on line 1 count from after it.
	src = bytes.TrimPrefix(src, []byte("\xef\xbb\xbf"))
	if err := checkTokens(filename, src); err != nil {
		return nil, err
	}
	if err := checkNesting(filename, src); err != nil {
		return nil, err
	}
	ast, err := specParser.ParseBytes(filename, src)
	if err != nil {
		return nil, syntaxError(filename, src, err)
	}
	c := &checker{file: filename}
	cs := c.checkFile(ast)
	if len(c.errs) > 0 {
		return nil, c.errs[0]
	}
	return cs, nil
}

// ParseFile reads and parses the spec at path (ReadSpec, then Parse);
// positions carry path.
func ParseFile(path string) ([]*ir.Variant, error) {
	src, err := ReadSpec(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, src)
}

// ReadSpec reads the spec file at path. Anything but a regular file (a
// named pipe, a device, a directory) is refused at once, without reading
// it or waiting for a writer, with an error naming path. It reads at most
// maxSize+1 bytes, so a huge file fails fast with "too large" instead of
// being read whole.
func ReadSpec(path string) ([]byte, error) {
	// O_NONBLOCK: opening a named pipe does not wait for a writer; the
	// file is refused below before any read.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s); a spec is read from a regular file", path, fileKind(fi.Mode()))
	}
	if fi.Size() > maxSize {
		return nil, tooLarge(path, fmt.Sprintf("%d bytes", fi.Size()))
	}
	src, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(src) > maxSize {
		return nil, tooLarge(path, fmt.Sprintf("more than %d bytes", maxSize))
	}
	return src, nil
}

// fileKind names the type of a file that is not a regular one.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

// tooLarge is the error for a spec larger than maxSize.
func tooLarge(file, size string) error {
	return &ir.PosError{Pos: ir.Pos{File: file, Line: 1, Col: 1}, Msg: fmt.Sprintf("spec is too large (%s; the limit is %d)", size, maxSize)}
}

// checkTokens rejects a spec of more than MaxTokens tokens at the first
// token past the limit.
func checkTokens(filename string, src []byte) error {
	if n, line, col := scanTokens(src, MaxTokens); n > MaxTokens {
		return &ir.PosError{Pos: ir.Pos{File: filename, Line: line, Col: col},
			Msg: fmt.Sprintf("spec has more than %d tokens; the limit is %d (names, numbers, operators, parentheses and line ends; comments and white space do not count)", MaxTokens, MaxTokens)}
	}
	return nil
}

// scanTokens counts the tokens of src as the lexer splits them (a number
// or a name is one token, as is each operator and line end; comments and
// white space are none), stopping at token limit+1, whose line and column
// it returns.
func scanTokens(src []byte, limit int) (n, line, col int) {
	isWord := func(c byte) bool {
		return c == '_' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
	}
	line, lineStart := 1, 0
	for i := 0; i < len(src); {
		c := src[i]
		start := i
		switch {
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		case c == ' ' || c == '\t' || c == '\r':
			i++
			continue
		case c == '\n':
			i++
		case isWord(c):
			number := '0' <= c && c <= '9' || c == '.'
			for i < len(src) && (isWord(src[i]) || number && (src[i] == '+' || src[i] == '-') && (src[i-1] == 'e' || src[i-1] == 'E')) {
				i++
			}
		case i+1 < len(src) && twoCharOp(src[i], src[i+1]):
			i += 2
		default:
			i++
		}
		if n++; n > limit {
			return n, line, utf8.RuneCount(src[lineStart:start]) + 1
		}
		if c == '\n' {
			line, lineStart = line+1, i
		}
	}
	return n, 0, 0
}

// twoCharOp reports whether a, b is one of the lexer's two-character
// operators.
func twoCharOp(a, b byte) bool {
	switch string([]byte{a, b}) {
	case "&&", "||", "==", "!=", "<=", ">=":
		return true
	}
	return false
}

// checkNesting rejects inputs nested deeper than maxNesting before the
// recursive parser sees them.
func checkNesting(filename string, src []byte) error {
	toks, err := specParser.Lex(filename, bytes.NewReader(src))
	if err != nil {
		return syntaxError(filename, src, err)
	}
	depth, run := 0, 0
	for _, t := range toks {
		switch t.Value {
		case "(":
			depth++
		case ")":
			depth = max(depth-1, 0)
		}
		if t.Value == "-" || t.Value == "!" {
			run++
		} else if strings.TrimSpace(t.Value) != "" {
			run = 0
		}
		if depth > maxNesting || run > maxNesting {
			return &ir.PosError{Pos: position(filename, t.Pos), Msg: fmt.Sprintf("expression nested too deeply (more than %d levels)", maxNesting)}
		}
	}
	return nil
}

// position converts a participle position to an ir.Pos in file.
func position(file string, p lexer.Position) ir.Pos {
	return ir.Pos{File: file, Line: max(p.Line, 1), Col: max(p.Column, 1)}
}

// syntaxError turns a participle or lexer error into an *ir.PosError with a
// readable message.
func syntaxError(file string, src []byte, err error) error {
	var lerr *lexer.Error
	if errors.As(err, &lerr) {
		msg := "invalid character"
		if off := lerr.Pos.Offset; off >= 0 && off < len(src) {
			r, n := utf8.DecodeRune(src[off:])
			if r == utf8.RuneError && n <= 1 {
				msg = fmt.Sprintf("invalid byte %#02x", src[off])
			} else {
				msg = fmt.Sprintf("invalid character %q", r)
			}
		}
		return &ir.PosError{Pos: position(file, lerr.Pos), Msg: msg}
	}
	var uerr *participle.UnexpectedTokenError
	if errors.As(err, &uerr) {
		msg := "unexpected " + describeToken(uerr.Unexpected)
		if exp := expected(uerr.Message()); exp != "" {
			msg += ", expected " + exp
		} else {
			msg += `, expected "variant"`
		}
		return &ir.PosError{Pos: position(file, uerr.Unexpected.Pos), Msg: msg}
	}
	var perr participle.Error
	if errors.As(err, &perr) {
		return &ir.PosError{Pos: position(file, perr.Position()), Msg: perr.Message()}
	}
	return &ir.PosError{Pos: ir.Pos{File: file, Line: 1, Col: 1}, Msg: err.Error()}
}

// describeToken names a token for an error message.
func describeToken(t lexer.Token) string {
	switch {
	case t.EOF():
		return "end of file"
	case t.Value == "\n":
		return "end of line"
	}
	return fmt.Sprintf("%q", t.Value)
}

// expected extracts participle's "(expected X)" from msg and rewords X.
func expected(msg string) string {
	i := strings.Index(msg, " (expected ")
	if i < 0 {
		return ""
	}
	exp := strings.TrimSuffix(msg[i+len(" (expected "):], ")")
	if strings.Contains(exp, "<float>") || strings.Contains(exp, "<int>") {
		return "a value"
	}
	first, _, _ := strings.Cut(exp, " ")
	first = strings.TrimRight(first, "?*+")
	switch {
	case first == "NameAST" || first == "<ident>":
		return "a name"
	case first == "ClauseAST":
		return "a mask clause"
	case first == "ArgList" || first == "ArgExprs":
		return `"("`
	case first == "<nl>" || first == `"\n"`:
		return "end of line"
	case strings.HasSuffix(first, "Expr") || first == "Primary":
		return "an expression"
	case strings.HasSuffix(first, "AST") || strings.HasSuffix(first, "Stmt"):
		return "a value"
	}
	return first
}
