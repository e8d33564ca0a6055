// Package amxemu owns the tests' software AMX emulator: csrc/amxemu.c, a C
// SIGILL handler that runs Intel AMX-TILE and AMX-BF16 instructions
// (LDTILECFG, STTILECFG, TILELOADD, TILELOADDT1, TILESTORED, TILEZERO,
// TILERELEASE, TDPBF16PS) on per-thread emulated tile state, so that the
// x86-64-amx clones attnc generates run, bit for bit as the SDM specifies
// them, on a CPU without AMX. Tests link the source into a host program or
// a kernel library (with -DAMXEMU_CONSTRUCTOR it installs itself when the
// library loads). Emulated runs are never a test on AMX hardware. It
// imports only the standard library; only tests use it.
package amxemu

import (
	_ "embed"
	"os"
	"path/filepath"
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
