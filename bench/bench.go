// Package bench measures generated attention kernels against the limits of
// the machine they run on, measured in the same run, so that its numbers
// are ratios that carry from one machine to another rather than absolute
// rates.
//
// The CPU bench (RunCPU, `attnc bench`) first measures the machine's
// yardsticks on the kernels' thread count, with microbenchmarks compiled
// by LLVM 14 for the widest vector level the CPU has (yardstick_ir.go):
//
//   - stream read: a read-only reduction over a buffer of max(1 GiB,
//     8 x LLC), contiguous, then in page-sized blocks in a random order
//     (without and with a prefetch of the next block);
//   - fp32 FMA peak: register-resident FMA chains, enough of them to cover
//     the FMA latency on every pipe, at every vector level with FMA;
//   - the core clock, from a chain of dependent integer multiplies,
//     reported only where a chain of dependent adds agrees (x86-64).
//
// Then it times each case, one call per repetition, and reports medians,
// quartiles and extremes:
//
//   - decode (default 8 sequences of 4096 tokens): the K+V bytes the
//     queries see, as stored, per second, against the stream read and
//     against the case's paged-read scan (scan.go: exactly the bytes the
//     case reads, in its order and on its threads, with no compute; its
//     memory-side limit), beside the time its multiply-adds take at the
//     FMA peak (its arithmetic's limit). The pages live in a pool of at
//     least 1 GiB and every call reads another disjoint page set, so that
//     no cache serves them;
//   - prefill (one sequence, default q_len = kv_len = 2048): FLOP/s, the
//     visible (query, kv) pairs x 2 x (d_qk + d_v) x qo_heads (causal:
//     2·2·d·L(L+1)/2·heads), against the FMA peak.
//
// The cases are the built-in shapes (BuiltinPlan: issue 10's decode f32,
// f16, bf16 and prefill f32, bf16, built from spec text) or the decode and
// prefill entries of given variants (SpecPlan). The GPU path (RunDevice)
// times CUDA launchers against a device-to-device copy (device.go).
//
// The package imports conformance, cpurt (cgo), frontend, lower and
// reference; cmd/attnc only imports it.
package bench
