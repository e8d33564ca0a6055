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
// cost. Every library is still linked and loaded per suite. Likewise each
// distinct emulated GPU library (the same .cu, the same link arguments) is
// compiled once (HostLibraries) and copied for every suite that loads it.
func TestMain(m *testing.M) {
	c, err := cpurt.NewObjectCache()
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
		fmt.Fprintf(os.Stderr, "conformance: %d CPU library builds compiled %d distinct objects\n", builds, objects)
	}
	if builds, n := libs.Stats(); builds > 0 {
		fmt.Fprintf(os.Stderr, "conformance: %d emulated library builds compiled %d distinct libraries\n", builds, n)
	}
	c.Remove()
	libs.Remove()
	os.Exit(code)
}
