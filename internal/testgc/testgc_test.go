package testgc

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestInitSetsPercent: importing the package leaves the collector at
// Percent unless GOGC is set.
func TestInitSetsPercent(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		t.Skip("GOGC is set: the environment's setting stands")
	}
	got := debug.SetGCPercent(Percent)
	if got != Percent {
		t.Errorf("GC percent after init = %d, want %d", got, Percent)
	}
}
