package frontend

import (
	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// specLexer tokenizes .attn text. Newlines are tokens (settings are lines);
// comments and other white space are dropped.
var specLexer = lexer.MustSimple([]lexer.SimpleRule{
	{Name: "Comment", Pattern: `//[^\n]*`},
	{Name: "Float", Pattern: `\d+\.\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|\d+[eE][-+]?\d+`},
	{Name: "Int", Pattern: `\d+`},
	{Name: "Ident", Pattern: `[A-Za-z_][A-Za-z0-9_]*`},
	{Name: "Punct", Pattern: `&&|\|\||==|!=|<=|>=|[-+*/%<>!(),={}\[\]]`},
	{Name: "NL", Pattern: `\n`},
	{Name: "Space", Pattern: `[ \t\r]+`},
})

// specParser is the participle parser of a whole file. With no lookahead a
// branch that fails after its first token fails the parse, so an error is
// reported where it happens (`dtype 5` at the 5), not where the branch began.
var specParser = participle.MustBuild[fileAST](
	participle.Lexer(specLexer),
	participle.Elide("Comment", "Space"),
	participle.UseLookahead(0),
)

// fileAST is a whole .attn file.
type fileAST struct {
	Variants []*variantAST `parser:"( NL | @@ )*"`
}

// variantAST is `variant NAME { ... }`.
type variantAST struct {
	Pos   lexer.Position
	Name  *nameAST   `parser:"'variant' @@ NL* '{'"`
	Items []*itemAST `parser:"@@* '}'"`
}

// itemAST is a newline or a setting; a setting must follow a newline or "{".
type itemAST struct {
	NL   bool     `parser:"@NL"`
	Stmt *stmtAST `parser:"| @@"`
}

// stmtAST is one setting line.
type stmtAST struct {
	Args    *argsStmt    `parser:"@@"`
	MLA     *mlaStmt     `parser:"| @@"`
	Word    *wordStmt    `parser:"| @@"`
	Call    *callStmt    `parser:"| @@"`
	Mask    *maskStmt    `parser:"| @@"`
	Score   *scoreStmt   `parser:"| @@"`
	Scale   *scaleStmt   `parser:"| @@"`
	Kernels *kernelsStmt `parser:"| @@"`
	Param   *paramStmt   `parser:"| @@"`
	Unknown *unknownStmt `parser:"| @@"`
}

// argsStmt is `heads qo = N, kv = M`, `head_dim N` / `head_dim qk = N, v = M`
// or `lse base = B`.
type argsStmt struct {
	Pos  lexer.Position
	Kw   string    `parser:"@( 'heads' | 'head_dim' | 'lse' )"`
	Args []*argAST `parser:"@@ ( ',' NL* @@ )*"`
}

// mlaStmt is `mla(heads = H, kv_lora_rank = R, rope_dim = D)`.
type mlaStmt struct {
	Pos  lexer.Position
	Kw   string   `parser:"@'mla'"`
	Args *argList `parser:"@@"`
}

// wordStmt is `dtype NAME`.
type wordStmt struct {
	Pos  lexer.Position
	Kw   string   `parser:"@'dtype'"`
	Word *nameAST `parser:"@@"`
}

// callStmt is `cache NAME(args)`, `rope NAME(args)`, `sinks NAME(args)`
// or `qk_norm NAME(args)`; the argument list is optional.
type callStmt struct {
	Pos  lexer.Position
	Kw   string   `parser:"@( 'cache' | 'rope' | 'sinks' | 'qk_norm' )"`
	Name *nameAST `parser:"@@"`
	Args *argList `parser:"@@?"`
}

// maskStmt is `mask clause, clause, ...`.
type maskStmt struct {
	Pos     lexer.Position
	Kw      string       `parser:"@'mask'"`
	Clauses []*clauseAST `parser:"@@ ( ',' NL* @@ )*"`
}

// clauseAST is `expr(e)` or `NAME` or `NAME(args)`.
type clauseAST struct {
	Pos  lexer.Position
	Expr *orExpr  `parser:"'expr' '(' NL* @@ NL* ')'"`
	Name string   `parser:"| @Ident"`
	Args *argList `parser:"@@?"`
}

// scoreStmt is `score e`.
type scoreStmt struct {
	Pos  lexer.Position
	Kw   string  `parser:"@'score'"`
	Expr *orExpr `parser:"@@"`
}

// scaleStmt is `scale NUMBER`.
type scaleStmt struct {
	Pos lexer.Position
	Kw  string    `parser:"@'scale'"`
	Val *valueAST `parser:"@@"`
}

// kernelsStmt is `kernels NAME, NAME, ...`.
type kernelsStmt struct {
	Pos   lexer.Position
	Kw    string     `parser:"@'kernels'"`
	Names []*nameAST `parser:"@@ ( ',' NL* @@ )*"`
}

// paramStmt is `param NAME DTYPE[DIM, ...]`.
type paramStmt struct {
	Pos   lexer.Position
	Kw    string    `parser:"@'param'"`
	Name  *nameAST  `parser:"@@"`
	DType *nameAST  `parser:"@@"`
	Dims  []*dimAST `parser:"'[' ( @@ ( ',' @@ )* )? ']'"`
}

// dimAST is one dimension of a param: an integer literal or a name.
type dimAST struct {
	Pos  lexer.Position
	Int  *string `parser:"@Int"`
	Name *string `parser:"| @Ident"`
}

// unknownStmt swallows a line that starts with anything but a known keyword,
// so that the checker can say which settings exist.
type unknownStmt struct {
	Pos  lexer.Position
	Word string   `parser:"@!( 'heads' | 'head_dim' | 'lse' | 'mla' | 'dtype' | 'cache' | 'rope' | 'sinks' | 'mask' | 'score' | 'scale' | 'kernels' | 'qk_norm' | 'param' | '}' | NL )"`
	Rest []string `parser:"@( !( NL | '}' ) )*"`
}

// nameAST is an identifier with its position.
type nameAST struct {
	Pos  lexer.Position
	Name string `parser:"@Ident"`
}

// argList is `( arg, arg, ... )`, possibly empty.
type argList struct {
	Pos  lexer.Position
	Args []*argAST `parser:"'(' NL* ( @@ NL* ( ',' NL* @@ NL* )* )? ')'"`
}

// argAST is `key = value` or a positional value.
type argAST struct {
	Pos lexer.Position
	Key *string   `parser:"( (?= Ident '=') @Ident '=' )?"`
	Val *valueAST `parser:"@@"`
}

// valueAST is a number with an optional minus sign, or a name.
type valueAST struct {
	Pos   lexer.Position
	Neg   bool    `parser:"( @'-'?"`
	Float *string `parser:"( @Float"`
	Int   *string `parser:"| @Int ) )"`
	Word  *string `parser:"| @Ident"`
}

// Expressions, lowest precedence first: || && comparisons + - * / % unary.

// orExpr is a || b || ...
type orExpr struct {
	Pos  lexer.Position
	Left *andExpr  `parser:"@@"`
	Rest []*orRest `parser:"@@*"`
}

// orRest is `|| b`.
type orRest struct {
	Pos   lexer.Position
	Op    string   `parser:"@'||' NL*"`
	Right *andExpr `parser:"@@"`
}

// andExpr is a && b && ...
type andExpr struct {
	Left *cmpExpr   `parser:"@@"`
	Rest []*andRest `parser:"@@*"`
}

// andRest is `&& b`.
type andRest struct {
	Pos   lexer.Position
	Op    string   `parser:"@'&&' NL*"`
	Right *cmpExpr `parser:"@@"`
}

// cmpExpr is a comparison chain (each comparison needs operands of one kind).
type cmpExpr struct {
	Left *addExpr   `parser:"@@"`
	Rest []*cmpRest `parser:"@@*"`
}

// cmpRest is a comparison operator and its right operand.
type cmpRest struct {
	Pos   lexer.Position
	Op    string   `parser:"@( '==' | '!=' | '<=' | '>=' | '<' | '>' ) NL*"`
	Right *addExpr `parser:"@@"`
}

// addExpr is a + b - ...
type addExpr struct {
	Left *mulExpr   `parser:"@@"`
	Rest []*addRest `parser:"@@*"`
}

// addRest is + b or - b.
type addRest struct {
	Pos   lexer.Position
	Op    string   `parser:"@( '+' | '-' ) NL*"`
	Right *mulExpr `parser:"@@"`
}

// mulExpr is a * b / c % ...
type mulExpr struct {
	Left *unaryExpr `parser:"@@"`
	Rest []*mulRest `parser:"@@*"`
}

// mulRest is * b, / b or % b.
type mulRest struct {
	Pos   lexer.Position
	Op    string     `parser:"@( '*' | '/' | '%' ) NL*"`
	Right *unaryExpr `parser:"@@"`
}

// unaryExpr is -x, !x or a primary.
type unaryExpr struct {
	Pos  lexer.Position
	Op   string     `parser:"( @( '-' | '!' )"`
	X    *unaryExpr `parser:"@@ )"`
	Prim *primary   `parser:"| @@"`
}

// primary is a literal, an identifier, a call or a parenthesized expression.
type primary struct {
	Pos   lexer.Position
	Float *string     `parser:"@Float"`
	Int   *string     `parser:"| @Int"`
	Name  *string     `parser:"| @Ident"`
	Call  *argExprs   `parser:"( @@"`
	Index *indexExprs `parser:"| @@ )?"`
	Paren *orExpr     `parser:"| '(' NL* @@ NL* ')'"`
}

// indexExprs is a param read's index list, `[e1, e2, ...]`.
type indexExprs struct {
	Pos  lexer.Position
	Args []*orExpr `parser:"'[' NL* ( @@ NL* ( ',' NL* @@ NL* )* )? ']'"`
}

// argExprs is a call's argument list.
type argExprs struct {
	Args []*orExpr `parser:"'(' NL* ( @@ NL* ( ',' NL* @@ NL* )* )? ')'"`
}
