// Package conformance runs generated kernels — CPU, CUDA on the emulator,
// or CUDA on a GPU — against the float64 reference on random paged caches
// (shared prefixes, empty sequences, hidden pages, NaN-poisoned tails and
// unused pages, several thread counts) and on bad inputs, and reports per
// kernel and case the max error and pass/fail. It backs the kernel tests,
// `attnc verify` and `attnc bench`. It builds and loads a variant's library
// through its target's harness (targets.Harness, DeviceHarness: BuildFor,
// BuildDeviceFor) and asks the target, not its name, for the runtime
// (messages, threads, CPU levels, stack); the matrices run over the
// registered targets with a harness.
//
// It must not import cli, cmd, codegen or a target package (its tests
// blank-import the targets in targets_test.go).
package conformance
