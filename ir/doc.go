// Package ir owns attnc's two intermediate forms: ir.Variant, the validated
// description of an attention variant that the frontend produces, and the
// kernel IR (Module, Kernel, Stmt, Expr) that lowering builds, passes rewrite
// and backends print. The kernel IR has exactly one text form (String, Print)
// and a parser for it (Parse), so pass tests are {before, after} strings, and a
// verifier (Verify) that runs after every pass.
//
// ir imports only the standard library; it must not import frontend, passes,
// codegen or registry.
package ir
