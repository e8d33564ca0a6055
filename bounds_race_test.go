//go:build race

package attnc

// raceEnabled: the race detector slows the compiler several times, so
// TestCompileBounded skips its budget.
const raceEnabled = true
