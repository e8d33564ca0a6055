package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
)

// buildAttnc builds cmd/attnc into a temporary directory.
func buildAttnc(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	needtool.Check(t, err)
	bin := filepath.Join(t.TempDir(), "attnc")
	if out, err := exec.Command(gobin, "build", "-o", bin, "../cmd/attnc").CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/attnc: %v\n%s", err, out)
	}
	return bin
}

// readmeExampleOutput is the output README.md shows for the worked C
// example: the text block after the line "`./main` prints:".
func readmeExampleOutput(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "`./main` prints:\n\n```text\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("README.md has no ```text block after \"`./main` prints:\"")
	}
	return block
}

// runExample runs the built example and compares its output with the
// README's.
func runExample(t *testing.T, exe string) {
	t.Helper()
	cmd := exec.Command(exe)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", exe, err, e.String())
	}
	t.Logf("%s prints:\n%s", exe, o.String())
	if want := readmeExampleOutput(t); o.String() != want {
		t.Errorf("%s prints:\n%s\nthe README shows:\n%s", exe, o.String(), want)
	}
}

// TestCMakeExample configures and builds examples/c with CMake through
// cmake/Attnc.cmake (attnc_add_kernels: attnc build, opt and llc, the
// headers on the library's include path), runs it and checks that it
// prints what the README shows. The kernels are this machine's level's
// only (ATTNC_BUILD_FLAGS=--cpu-levels=host: a third of the compile).
func TestCMakeExample(t *testing.T) {
	t.Parallel() // external tools only: runs beside TestMakeExample
	cm, err := exec.LookPath("cmake")
	if err != nil {
		err = errors.New("cmake not found in PATH (apt-get install cmake)")
	}
	needtool.Check(t, err)
	needtool.Check(t, cpurt.Tools())
	bin := buildAttnc(t)
	src, err := filepath.Abs("../examples/c")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-S", src, "-B", dir, "-DATTNC_EXECUTABLE=" + bin, "-DATTNC_BUILD_FLAGS=" + hostLevels()},
		{"--build", dir},
	} {
		out, err := exec.Command(cm, args...).CombinedOutput()
		t.Logf("cmake %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatalf("cmake %s: %v", strings.Join(args, " "), err)
		}
	}
	for _, f := range []string{"llama3_kernels/llama3_8b.h", "llama3_kernels/llama3_8b.o", "llama3_kernels/manifest.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("attnc_add_kernels wrote no %s: %v", f, err)
		}
	}
	runExample(t, filepath.Join(dir, "main"))
}

// TestMakeExample builds examples/c with its Makefile (make/attnc.mk) in a
// temporary directory, runs it and checks the README's output; a second
// make does nothing, and the build wrote its depfile. The kernels are this
// machine's level's only (ATTNC_FLAGS=--cpu-levels=host).
func TestMakeExample(t *testing.T) {
	t.Parallel() // external tools only: runs beside TestCMakeExample
	mk, err := exec.LookPath("make")
	needtool.Check(t, err)
	needtool.Check(t, cpurt.Tools())
	bin := buildAttnc(t)
	makefile, err := filepath.Abs("../examples/c/Makefile")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func(args ...string) string {
		cmd := exec.Command(mk, append([]string{"-f", makefile, "ATTNC=" + bin, "ATTNC_FLAGS=" + hostLevels()}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Logf("make:\n%s", run())
	runExample(t, filepath.Join(dir, "main"))
	if out := run(); !strings.Contains(out, "'main' is up to date") {
		t.Errorf("a second make rebuilt something:\n%s", out)
	}
	spec, _ := filepath.Abs("../examples/llama3_8b.attn")
	if d, err := os.ReadFile(filepath.Join(dir, "out", "attnc.d")); err != nil || !strings.Contains(string(d), spec+":") {
		t.Errorf("out/attnc.d does not name %s (%v):\n%s", spec, err, d)
	}
}
