// Package frontend parses .attn specs (participle/v2) and validates them into
// ir.Variant. It imports ir only; it must not import passes, codegen or
// registry.
//
// Parsing has two phases. The grammar (grammar.go) turns the text into a
// syntax tree; it knows line structure (one setting per line, a line may
// continue after a comma, an operator or an open parenthesis) but not which
// names or values are valid. The checker (check.go, expr.go) then validates
// every setting, fills in defaults and types the expressions. Every error is
// an *ir.PosError that prints as file:line:col: message; a syntax error is
// reported before any semantic error. Parse returns the first semantic
// error in source order; ParseEach checks each variant on its own and
// returns every error of every variant (attnc check prints them all). A
// misspelt setting is reported at its own position with the nearest
// setting name. A file with no variant is an error. ReadSpec reads only
// regular files. Limits: a spec is at most 256 KiB and MaxTokens (32768)
// tokens (comments and white space do not count), and holds at most
// MaxVariants (8) variants; parentheses or runs of prefix operators nest
// at most 100 deep; a mask or score expression has at most MaxExprOps
// (256) operators and function calls. Within them any spec checks in a few
// seconds and compiles to outputs of a few MiB (a test in package attnc
// holds the worst such specs to that); past them the error names the place.
//
// Defaults where a spec is silent: dtype f16; cache paged(page_size = 16,
// layout = HND, table = csr); mask causal; kv heads = qo heads; head_dim
// v = qk; scale 1/sqrt(head_dim qk); kernels prefill, decode, merge_state;
// rope theta 10000 and style normal. RoPE llama3 fills factor = 8,
// low_freq = 1, high_freq = 4, original_max = 8192 (Llama 3.1's values);
// yarn requires factor and original_max and fills beta_fast = 32,
// beta_slow = 1; factors fills attn_factor = 1. `rope inline(table, ...)`
// (Style RopeTable) takes only pairs and rotary_dim. Rope.Params holds
// every numeric argument, theta included, after defaults.
package frontend
