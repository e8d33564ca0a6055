// Package amxemu owns the tests' software AMX emulator: csrc/amxemu.c, a C
// SIGILL handler that runs Intel AMX-TILE and AMX-BF16 instructions
// (LDTILECFG, STTILECFG, TILELOADD, TILELOADDT1, TILESTORED, TILEZERO,
// TILERELEASE, TDPBF16PS) on per-thread emulated tile state, so that the
// x86-64-amx clones attnc generates run, bit for bit as the SDM specifies
// them, on a CPU without AMX. Tests link the source into a host program or
// a kernel library (with -DAMXEMU_CONSTRUCTOR it installs itself when the
// library loads). Emulated runs are never a test on AMX hardware. It
// imports only the standard library and internal/lltest; only tests use
// it.
package amxemu

import (
	_ "embed"
	"os"
	"path/filepath"
	"testing"

	"github.com/attnc/attnc/internal/lltest"
)

//go:embed csrc/amxemu.c
var source []byte

// Source is amxemu.c.
func Source() []byte { return append([]byte(nil), source...) }

// WriteSource writes amxemu.c into dir and returns its path.
func WriteSource(dir string) (string, error) {
	p := filepath.Join(dir, "amxemu.c")
	return p, os.WriteFile(p, source, 0o644)
}

// OnAMXHardware reports whether this CPU has AMX-TILE (per /proc/cpuinfo).
func OnAMXHardware() bool { return lltest.CPUInfoFlags()["amx_tile"] }

// SkipOnAMXHardware skips an emulated test on a CPU with AMX: there
// LDTILECFG runs in hardware (Linux arms only the tile data, not the
// configuration, until a process asks for it), so the first tile data
// instruction reaches the emulator unconfigured and it aborts. The code
// such a test emulates runs for real there (the conformance matrix at
// x86-64-amx, TestCPULevelAMX).
func SkipOnAMXHardware(t testing.TB) {
	t.Helper()
	if OnAMXHardware() {
		t.Skip("this CPU has AMX: the emulator cannot run beside it (LDTILECFG runs in hardware); the tiles run for real in the conformance matrix")
	}
}
