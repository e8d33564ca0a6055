// Package needtool holds the one rule for tests that need an external tool
// (LLVM 14, gcc/g++, clang-19, ptxas/cuobjdump): without it a test skips and says why, but
// in CI (CI set in the environment, as .ci/run does) it fails, so CI never
// passes by skipping. It imports only the standard library; only tests
// import it.
package needtool

import (
	"os"
	"testing"
)

// Check skips tb, or fails it in CI, when err (a tool lookup's error) is
// not nil.
func Check(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		tb.Fatalf("CI needs this tool: %v", err)
	}
	tb.Skipf("skipping: %v", err)
}
