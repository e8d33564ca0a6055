// Package lower turns a validated ir.Variant into a kernel-IR module: the
// page-table walk, page size and layout, the query/KV tiling, GQA grouping
// (a K/V tile loaded once serves every qo head of its group) and the one
// online-softmax skeleton that prefill, decode and split-KV decode share.
// The variant's mask and score transform become Defs (@mask, @score) that
// passes inline, classify by interval analysis and legalize.
//
// lower imports ir only; it must not import passes, codegen or registry.
package lower
