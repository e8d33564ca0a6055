package conformance

import (
	"fmt"
	"os"
	"testing"

	"github.com/attnc/attnc/cpurt"
	_ "github.com/attnc/attnc/internal/testgc"
)

// TestMain compiles each distinct kernel IR once for the whole package:
// tests build the same variant with the same passes (TestExamples and
// TestSmallStacks every example), and opt and llc are most of a suite's
// cost. Every library is still linked and loaded per suite. Likewise each
// distinct emulated GPU library (the same .cu, the same link arguments) is
// compiled once (HostLibraries) and copied for every suite that loads it.
// Both caches are the run's (cpurt.RunCacheDir): the other packages of
// the same `go test` run (cli, bench, targets/cpu) share the objects, and
// CI's go test commands share both through $ATTNC_TEST_CACHE, so that its
// long passes find the default run's objects and libraries.
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
		fmt.Fprintf(os.Stderr, "conformance: %d CPU library builds used %d distinct objects, %d of them found compiled by another test process\n", builds, objects, c.Found())
	}
	if builds, n := libs.Stats(); builds > 0 {
		fmt.Fprintf(os.Stderr, "conformance: %d emulated library builds used %d distinct libraries, %d of them found built by another test process\n", builds, n, libs.Found())
	}
	c.Remove()
	libs.Remove()
	os.Exit(code)
}
