// Package testgc sets the garbage collector's target of the test binary
// that imports it (a blank import from a _test.go file) to Percent, unless
// the environment sets GOGC. The test binaries build and check many
// variants, most of whose allocations die young: with Go's default (100)
// a fifth or more of their Go CPU time went to collection. It imports only
// the standard library; only tests import it.
package testgc

import (
	"os"
	"runtime/debug"
)

// Percent is the test binaries' GOGC. Measured alone on a 2-core Zen 5
// (go test -count=1, user+sys CPU seconds at GOGC 100 / 200 / 400):
// targets/cpu 121–126 / 101–106 / 89, the attnc package 78 / 61–65 / 64,
// conformance 642 / 616 at 100 / 200. The binaries' peak heap stays
// around a GiB.
const Percent = 400

func init() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(Percent)
	}
}
