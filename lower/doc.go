// Package lower turns a validated ir.Variant into kernel-IR modules: the
// page table (CSR or block table) and page walk, page size and layout,
// row segments (MLA), query/KV tiling, GQA grouping (a K/V tile loaded once
// serves every qo head of its group), RoPE staging and the online-softmax
// skeleton. Lower builds the CPU schedule (work items on a thread pool,
// vector loops); LowerGPU builds the CUDA schedule from the same pieces
// (blocks, threads and barriers, shared-memory staging, warp-shuffle row
// statistics, m16n8k16 tensor-core fragments, split-KV launches). The
// variant's mask and score transform become Defs (@mask, @score) that
// passes inline, classify by interval analysis and legalize; data masks
// (tree, custom) join them as one visibility condition.
//
// lower imports ir only; it must not import passes, codegen or registry.
package lower
