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
// cost. Every library is still linked and loaded per suite.
func TestMain(m *testing.M) {
	c, err := cpurt.NewObjectCache()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: object cache:", err)
		os.Exit(2)
	}
	cpurt.Objects = c
	code := m.Run()
	if builds, objects := c.Stats(); builds > 0 {
		fmt.Fprintf(os.Stderr, "conformance: %d CPU library builds compiled %d distinct objects\n", builds, objects)
	}
	c.Remove()
	os.Exit(code)
}
