package conformance

import (
	"fmt"
	"os"
	"testing"

	"github.com/attnc/attnc/cpurt"
)

// TestMain compiles each distinct kernel IR once for the whole package:
// tests build the same variant with the same passes (TestExamples and
// TestSmallStacks every example), and opt and llc are most of a suite's
// cost. The object cache is the run's (cpurt.RunObjectCache): other
// packages of the same `go test` run build some of the same IR (cli and
// driver the examples at the host level). Every library is still linked and loaded per suite. Likewise each
// distinct emulated GPU library (the same .cu, the same link arguments) is
// compiled once (HostLibraries) and copied for every suite that loads it.
func TestMain(m *testing.M) {
	c, err := cpurt.RunObjectCache()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: object cache:", err)
		os.Exit(2)
	}
	cpurt.Objects = c
	libs, err := NewLibCache()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: host library cache:", err)
		os.Exit(2)
	}
	HostLibraries = libs
	code := m.Run()
	if builds, objects := c.Stats(); builds > 0 {
		fmt.Fprintf(os.Stderr, "conformance: %d CPU library builds used %d distinct objects, %d of them compiled by another package of the run\n", builds, objects, c.Found())
	}
	if builds, n := libs.Stats(); builds > 0 {
		fmt.Fprintf(os.Stderr, "conformance: %d emulated library builds compiled %d distinct libraries\n", builds, n)
	}
	c.Remove()
	libs.Remove()
	os.Exit(code)
}
