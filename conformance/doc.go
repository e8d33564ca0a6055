// Package conformance runs generated CPU kernels against the float64
// reference on random paged caches (shared prefixes, empty sequences, NaN
// poisoned tails and unused pages, several thread counts) and on bad inputs,
// and reports per kernel and case the max error and pass/fail. It backs the
// kernel tests and `attnc verify`.
//
// It may import every attnc package except cmd.
package conformance
