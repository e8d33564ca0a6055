// Package lower turns a validated ir.Variant into one target-neutral kernel-IR
// module: the page table (CSR or block table, or prefill_ragged's
// contiguous rows) and page walk, page size and layout, row segments (MLA),
// GQA grouping (a K/V tile staged once serves every qo head of the work
// item), RoPE staging (angles from a frequency schedule, from runtime
// factors or from cos/sin tables: rope.go), and the one attention skeleton (attend.go) that every
// role runs — prefill query tiles (over pages or ragged rows), decode items
// and split-KV chunks — plus merge_state, the page kernels and qkv_append
// (qk_norm, then the same RoPE rotation for rope at_append, then append's
// quantization into the cache). Work inside
// an item is written with spread loops, reduce and matmul statements with
// static bounds and guards; the target's schedule passes map them (CPU:
// vector loops; CUDA: threads, warps, shared memory, tensor cores). The only
// target input is a Tiling (tile sizes). Each role gets an ir.Plan: its
// checks, validation, work kernels with their item counts and the split-KV
// rule. The variant's mask and score transform become Defs (@mask, @score)
// that passes inline, classify by interval analysis and legalize; data masks
// (tree, custom) join them as one visibility condition.
//
// lower must not know warp sizes, thread counts, fragment layouts or which
// target it lowers for. It imports ir only; it must not import passes,
// codegen or registry.
package lower
