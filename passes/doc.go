// Package passes owns the ordered pass table that rewrites lowered kernel IR
// until a backend can print it, and the passes themselves: inline-defs,
// simplify, classify-tiles (interval analysis of the mask over a tile's
// position ranges), expand-calls and legalize-dtype. Each pass is a pure
// function from module to module; Pipeline runs them with a verifier after
// each when asked and can print or dump the IR after any of them.
//
// passes imports ir only; it must not import frontend, codegen or registry.
package passes
