// Package build is the driver behind `attnc build`: it parses specs, lowers
// each variant, runs the pass pipeline, prints every requested target and
// writes the artifacts (<variant>.ll, <variant>.h, manifest.json)
// deterministically. It may import every other attnc package except the
// library API (the module root), cli and conformance, which import it.
package build
