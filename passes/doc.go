// Package passes owns the pass type, the pipeline runner (RunTable: a
// verifier after each pass when asked, printing or dumping the IR after
// any of them, user insertions) and the target-neutral passes every
// target's table runs: inline-defs, simplify, classify-tiles (interval
// analysis of the mask over a tile's position ranges), expand-calls and
// legalize-dtype; plus helpers that targets' schedule passes share
// (matmul and reduce statements as loops, guard folding, access sets).
// Each pass is a pure function from module to module. The tables
// themselves belong to the targets (package targets and its subpackages).
//
// passes imports ir only; it must not import frontend, codegen, registry,
// lower or a target.
package passes
