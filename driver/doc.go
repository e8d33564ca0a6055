// Package driver is the compile driver behind `attnc build`: it parses specs, lowers
// each variant with every requested target's tiling, assembles the target's
// entries, runs its pass table, emits its files and writes the artifacts
// (<variant>.ll, <variant>.cu, <variant>.h, manifest.json)
// deterministically and as one set (WriteArtifacts, Staging: the library's
// Result.Write and `attnc build` share the writer). The targets are the ones registered in package
// targets; the blank imports in build.go are the one line each. It may
// import every other attnc package except the library API (the module
// root), cli and conformance, which import it.
package driver
