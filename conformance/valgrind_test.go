package conformance

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/internal/needtool"
)

// TestValgrind runs the worked C example (examples/c/main.c)
// and a driver of bad inputs with exact-size heap buffers
// (testdata/valgrind_bad.c) under valgrind's memcheck, linked against
// llama3_8b's generated kernels: any invalid read or write, use of
// uninitialised memory or definite leak fails the test, and every call must
// return its documented status.
func TestValgrind(t *testing.T) {
	t.Parallel()
	needTools(t)
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		err = errors.New("valgrind not found in PATH (apt-get install valgrind)")
	}
	needtool.Check(t, err)
	dir := t.TempDir()
	vs, err := driver.ParseSpecs([]string{"../examples/llama3_8b.attn"})
	if err != nil {
		t.Fatal(err)
	}
	// The levels valgrind runs: 3.19 has no AVX-512, and its CPUID says
	// so, so the entries pick x86-64-v3 (or x86-64) under it; an
	// x86-64-v4 clone would be compiled and never run.
	out, err := driver.Build(vs, driver.Options{CPULevels: []string{"x86-64", "x86-64-v3"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Write(filepath.Join(dir, "out"), nil); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "libk.so")
	if err := cpurt.BuildShared(filepath.Join(dir, "out", "llama3_8b.ll"), so); err != nil {
		t.Fatal(err)
	}
	mainC, err := os.ReadFile("../examples/c/main.c")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := os.ReadFile("testdata/valgrind_bad.c")
	if err != nil {
		t.Fatal(err)
	}
	for _, prog := range []struct {
		name, src string
		want      []string
	}{
		{"readme", string(mainC), []string{"llama3_8b_prefill: ok", "token 3: "}},
		{"bad", string(bad), []string{
			"valid_1_thread 0", "valid_4_threads 0", "hidden_page 0", "num_pages_1 -5", "page_id_max -5", "page_id_min -5",
			"kv_indptr_decreasing -3", "kv_indptr_max -9", "kv_indptr_min -3", "kv_indptr_all_max -6",
			"qo_indptr_max -2", "qo_indptr_min -2", "last_page_len_max -4", "batch_min -1", "num_pages_min -1",
			"split_decode 0", "threads_clamped 1", "merge_valid 0", "merge_n_max -13", "merge_n_min -1",
		}},
	} {
		src := filepath.Join(dir, prog.name+".c")
		exe := filepath.Join(dir, prog.name)
		if err := os.WriteFile(src, []byte(prog.src), 0o644); err != nil {
			t.Fatal(err)
		}
		cc := exec.Command("gcc", "-O1", "-g", "-I", filepath.Join(dir, "out"), "-o", exe, src, so, "-Wl,-rpath,"+dir, "-lm", "-lpthread")
		cc.Dir = dir
		if b, err := cc.CombinedOutput(); err != nil {
			t.Fatalf("gcc %s: %v\n%s", prog.name, err, b)
		}
		leaks := "--errors-for-leak-kinds=definite"
		cmd := exec.Command(vg, "--error-exitcode=99", "--leak-check=full", leaks, "--track-origins=yes", exe)
		cmd.Dir = dir
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil {
			t.Errorf("valgrind %s: %v\n%s", prog.name, err, stderr.String())
			continue
		}
		for _, w := range prog.want {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", prog.name, w, stdout.String())
			}
		}
		if s := stderr.String(); !strings.Contains(s, "ERROR SUMMARY: 0 errors") {
			t.Errorf("valgrind %s:\n%s", prog.name, s)
		}
	}
}
