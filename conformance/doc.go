// Package conformance runs generated kernels — CPU, CUDA on the emulator,
// or CUDA on a GPU — against the float64 reference on random paged caches
// (shared prefixes, empty sequences, hidden pages, NaN-poisoned tails and
// unused pages, several thread counts) and on bad inputs, and reports per
// kernel and case the max error and pass/fail. It backs the kernel tests,
// `attnc verify` and `attnc bench`.
//
// It may import every attnc package except cmd.
package conformance
