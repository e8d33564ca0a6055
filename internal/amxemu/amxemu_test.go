package amxemu

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/needtool"
)

// buildSelfTest compiles testdata/selftest.c (AMX intrinsics) with
// clang-19, the emulator and the independent model (testdata/model.c) with
// gcc, and links them.
func buildSelfTest(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"clang-19", "gcc"} {
		_, err := exec.LookPath(tool)
		needtool.Check(t, err)
	}
	dir := t.TempDir()
	emu, err := WriteSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "selftest")
	steps := [][]string{
		{"clang-19", "-O2", "-Wall", "-mamx-tile", "-mamx-bf16", "-mamx-int8", "-c", "testdata/selftest.c", "-o", filepath.Join(dir, "selftest.o")},
		{"gcc", "-O2", "-Wall", "-c", emu, "-o", filepath.Join(dir, "amxemu.o")},
		{"gcc", "-O2", "-Wall", "-ffp-contract=off", "-c", "testdata/model.c", "-o", filepath.Join(dir, "model.o")},
		{"gcc", "-o", exe, filepath.Join(dir, "selftest.o"), filepath.Join(dir, "amxemu.o"), filepath.Join(dir, "model.o"), "-lm", "-lpthread"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	return exe
}

// TestEmulatorMatchesModel runs clang-compiled AMX intrinsics (tile loads
// with row strides, TILELOADDT1, three TDPBF16PS into one accumulator,
// TILEZERO, TILESTORED, STTILECFG, TILERELEASE; full and partial tile
// shapes; four threads at once) under the emulator and compares every
// output bit for bit (NaN as NaN) with an independent scalar model, on
// ordinary values and on denormals, ±inf, NaN, signed zeros and products
// that overflow or underflow f32.
func TestEmulatorMatchesModel(t *testing.T) {
	SkipOnAMXHardware(t)
	exe := buildSelfTest(t)
	out, err := exec.Command(exe, "run").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", exe, err, out)
	}
	m := regexp.MustCompile(`cases (\d+), emulated instructions (\d+) \(tdpbf16ps (\d+)\), mismatches 0`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("unexpected output:\n%s", out)
	}
	var cases, insts, dps int
	fmt.Sscan(m[1], &cases)
	fmt.Sscan(m[2], &insts)
	fmt.Sscan(m[3], &dps)
	// Each case runs 16 AMX instructions, 3 of them TDPBF16PS.
	if cases == 0 || insts != 16*cases || dps != 3*cases {
		t.Fatalf("%d cases ran %d AMX instructions (%d TDPBF16PS), want %d (%d)", cases, insts, dps, 16*cases, 3*cases)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

// TestEmulatorAbortsOnUnknown: an instruction the emulator lacks (AMX-INT8's
// TDPBSSD) and a tile load with no configuration abort the process with a
// message naming the bytes; neither is skipped.
func TestEmulatorAbortsOnUnknown(t *testing.T) {
	SkipOnAMXHardware(t)
	exe := buildSelfTest(t)
	for mode, want := range map[string]string{
		"int8":  "amxemu: SIGILL on an instruction the AMX emulator does not implement",
		"nocfg": "amxemu: tile instruction with tiles not configured (#UD)",
	} {
		out, err := exec.Command(exe, mode).CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) || strings.Contains(string(out), " ran") {
			t.Errorf("mode %s: err %v, output:\n%s\nwant an abort with %q", mode, err, out, want)
		}
	}
}
