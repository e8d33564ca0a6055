// Package gpu is the GPU schedule layer the GPU targets share: work items
// on blocks of threads (map-threads), warps for reductions with butterfly
// shuffles (map-warps), the item's arrays in shared memory with barriers
// between phases (stage-shared), K/V tiles staged asynchronously into a
// shared-memory ring (pipeline-kv), 16-byte staging copies (widen-copies),
// 8-bit KV codes staged as bytes (stage-codes) and the matmuls left to
// SIMT dot products (simt-matmul). A Layer value parameterises them by
// what differs between GPUs — the lane width of a warp (32 or 64), the
// block size, the matrix instructions, the ring's occupancy rule — and the
// lane-dependent passes set the module's lane width (ir.Module.Lanes).
// Matrix-core rewrites and memory layouts tied to one vendor's
// instructions stay in that target's package.
//
// gpu imports ir and passes; it must not import a target, codegen, lower
// or driver.
package gpu
