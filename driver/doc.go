// Package driver is the compile driver behind `attnc build`: it parses specs, lowers
// each variant with every requested target's tiling, assembles the target's
// entries, runs its pass table, emits its files and writes the artifacts
// (<variant>.ll, <variant>.cu, <variant>.h, manifest.json)
// deterministically and as one set (WriteArtifacts, Staging: the library's
// Result.Write and `attnc build` share the writer). The targets are the ones registered in package
// targets (the attnc package's blank imports register the built-in ones;
// the driver's tests import them in targets_test.go), reached only through
// package targets: the driver imports no target package and no code
// generator. It must not import the library API (the module root), cli,
// conformance or bench, which import it.
package driver
