// Package python_test runs the Python package's tests (python/tests, the
// attnc package over ctypes and its FlashInfer wrappers) from `go test`, so
// the one test command covers them. It builds this checkout's attnc into a
// temporary folder for them (ATTNC_BIN) and streams unittest's output.
// Without /usr/bin/python3 and numpy, or LLVM 14, it skips with the reason,
// and in CI (CI set) it fails. It imports cpurt and internal/needtool only.
package python_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	cudagen "github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
	_ "github.com/attnc/attnc/internal/testgc"
)

// pythonBin is the interpreter the tests run under: Debian's, whose
// python3-numpy and python3-torch packages .ci/run installs.
const pythonBin = "/usr/bin/python3"

// pythonWithNumpy reports why the interpreter cannot run the tests, or nil.
func pythonWithNumpy() error {
	if _, err := os.Stat(pythonBin); err != nil {
		return fmt.Errorf("%s not found (apt-get install python3 python3-numpy)", pythonBin)
	}
	out, err := exec.Command(pythonBin, "-c", "import numpy").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s cannot import numpy (apt-get install python3-numpy): %v: %s", pythonBin, err, bytes.TrimSpace(out))
	}
	return nil
}

// pythonAll runs every test file; CI's long pass (.ci/run) sets it.
var pythonAll = flag.Bool("python.all", false, "run every python/tests file, not only those outside pythonLong")

// pythonLong are the test files the default run leaves to -python.all
// (CI's long pass), the costliest for what they add to the others:
// FlashInfer's documented examples run unchanged at their own shapes (64
// query heads of 128, 32 layers; the wrappers, their plan arguments and
// the MLA wrapper run at small shapes in test_flashinfer.py and
// test_flashinfer_ragged_mla.py) and the small decoder served end to end
// (append, prefill, decode, copy_page and reuse of poisoned pages, which
// test_core.py, test_page_moves.py and the conformance engine simulation
// check piece by piece).
var pythonLong = []string{"test_flashinfer_examples.py", "test_model.py"}

// pythonLongTests are the test methods (module.Class.method) of the other
// files that the default run skips too, each marked @ref.long in its file
// (ATTNC_PYTHON_ALL=1, which -python.all sets, runs them): the variant
// argument of the paged prefill wrapper (the ragged wrapper's runs by
// default), the ragged and MLA wrappers on the CUDA emulator (the prefill
// wrapper's runs by default; each is an emulated library's g++ compile)
// and f16 MLA (f32 and bf16 MLA run by default).
var pythonLongTests = []string{
	"test_flashinfer.PrefillTest.test_variant_argument",
	"test_cuda_emu.EmulatedFlashInferTest.test_ragged_and_mla_wrappers_with_cuda_variants",
	"test_flashinfer_ragged_mla.MLATest.test_f16_noncausal_numpy_lse_base_e",
}

// hostLevels is the ATTNC_CPU_LEVELS the Python tests build with (attnc
// build --cpu-levels): no Python test is about the CPU levels, so the
// libraries hold the clones of the level this machine's entries run only
// (one opt and llc compile of each work kernel instead of three or four):
// host, or the level $ATTNC_CPU_LEVEL forces; a value given in the
// environment is kept.
func hostLevels() string {
	if l := os.Getenv("ATTNC_CPU_LEVELS"); l != "" {
		return l
	}
	if l := os.Getenv("ATTNC_CPU_LEVEL"); l != "" {
		return l
	}
	return "host"
}

func TestPythonPackage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the Python package loads Linux shared libraries")
	}
	needtool.Check(t, pythonWithNumpy())
	needtool.Check(t, cpurt.Tools())
	if os.Getenv("CI") != "" {
		// CI installs python3-torch: the FlashInfer examples and the torch
		// paths must run there, not skip.
		if out, err := exec.Command(pythonBin, "-c", "import torch").CombinedOutput(); err != nil {
			t.Fatalf("CI needs python3-torch: %v: %s", err, bytes.TrimSpace(out))
		}
	}
	bin := filepath.Join(t.TempDir(), "attnc")
	// -buildvcs=false: the binary, and so the compile cache's key, depends
	// on the sources only, not on the commit.
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "../cmd/attnc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/attnc: %v\n%s", err, out)
	}
	all, err := filepath.Glob(filepath.Join("tests", "test_*.py"))
	if err != nil || len(all) == 0 {
		t.Fatalf("no python/tests/test_*.py: %v", err)
	}
	var files []string
	for _, f := range all {
		if *pythonAll || !slices.Contains(pythonLong, filepath.Base(f)) {
			files = append(files, f)
		}
	}
	for _, f := range pythonLong {
		if !slices.Contains(all, filepath.Join("tests", f)) {
			t.Errorf("pythonLong names %s, which python/tests does not have", f)
		}
	}
	if len(files) < len(all) {
		t.Logf("%d of %d test files; %v run with -python.all (CI's long pass)", len(files), len(all), pythonLong)
	}
	// The suite is mostly single-threaded work (compiles on first use,
	// numpy references): run it as one unittest process per CPU, up to 4,
	// the test files spread over them by their measured cost.
	groups := make([][]string, min(max(runtime.NumCPU(), 1), 4, len(files)))
	load := make([]int, len(groups))
	sort.Slice(files, func(i, j int) bool { return fileCost(files[i]) > fileCost(files[j]) })
	for _, f := range files {
		g := 0
		for i := range load {
			if load[i] < load[g] {
				g = i
			}
		}
		groups[g] = append(groups[g], strings.TrimSuffix(filepath.Base(f), ".py"))
		load[g] += fileCost(f)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(groups))
	writers := make([]*testWriter, len(groups))
	for i, mods := range groups {
		cmd := exec.Command(pythonBin, append([]string{"-m", "unittest", "-v"}, mods...)...)
		cmd.Dir = "tests"
		cmd.Env = append(os.Environ(), "ATTNC_BIN="+bin, "PYTHONPATH=..", "PYTHONDONTWRITEBYTECODE=1", "ATTNC_CPU_LEVELS="+hostLevels())
		if *pythonAll {
			cmd.Env = append(cmd.Env, "ATTNC_PYTHON_ALL=1")
		}
		w := &testWriter{t: t, prefix: fmt.Sprintf("[%d] ", i)}
		cmd.Stdout, cmd.Stderr = w, w
		writers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cmd.Run()
		}()
	}
	wg.Wait()
	t.Logf("python tests took %.1f s in %d processes", time.Since(start).Seconds(), len(groups))
	for i, w := range writers {
		w.flush()
		var ee *exec.ExitError
		if errors.As(errs[i], &ee) {
			t.Errorf("python -m unittest %s failed (exit %d); output above", strings.Join(groups[i], " "), ee.ExitCode())
		} else if errs[i] != nil {
			t.Error(errs[i])
		} else if !bytes.Contains(w.all.Bytes(), []byte("\nOK")) {
			t.Errorf("python -m unittest %s did not report OK", strings.Join(groups[i], " "))
		}
	}
}

// fileCost is a test file's rough cost in seconds of CPU on first use
// (compiles included), for spreading the files over processes.
func fileCost(path string) int {
	switch filepath.Base(path) {
	case "test_flashinfer.py":
		return 65
	case "test_flashinfer_examples.py":
		return 60
	case "test_model.py":
		return 40
	case "test_flashinfer_ragged_mla.py":
		return 35
	case "test_core.py":
		return 30
	case "test_cuda_emu.py":
		return 20
	}
	return 20
}

// testWriter streams the child's output into the test log, a line at a
// time, and keeps all of it.
type testWriter struct {
	t       *testing.T
	prefix  string
	mu      sync.Mutex
	all     bytes.Buffer
	pending []byte
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.pending = append(w.pending, p...)
	for {
		i := bytes.IndexByte(w.pending, '\n')
		if i < 0 {
			break
		}
		if line := w.pending[:i]; len(bytes.TrimSpace(line)) > 0 {
			w.t.Log(w.prefix + string(line))
		}
		w.pending = w.pending[i+1:]
	}
	return len(p), nil
}

func (w *testWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(bytes.TrimSpace(w.pending)) > 0 {
		w.t.Log(w.prefix + string(w.pending))
	}
	w.pending = nil
}

// TestPythonLongTestsListed: every pythonLongTests entry names a method
// of its module's class that @ref.long marks, and no other method has the
// mark: the list says exactly what the default run skips.
func TestPythonLongTestsListed(t *testing.T) {
	marked := map[string]bool{}
	files, err := filepath.Glob(filepath.Join("tests", "test_*.py"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		mod, class := strings.TrimSuffix(filepath.Base(f), ".py"), ""
		lines := strings.Split(string(src), "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "class ") {
				class = strings.TrimPrefix(l, "class ")
				class = class[:strings.IndexAny(class, "(:")]
			}
			if strings.HasPrefix(strings.TrimSpace(l), "@ref.long(") && i+1 < len(lines) {
				def := strings.TrimSpace(lines[i+1])
				if !strings.HasPrefix(def, "def ") {
					t.Errorf("%s:%d: @ref.long does not mark a method", f, i+1)
					continue
				}
				marked[mod+"."+class+"."+def[4:strings.Index(def, "(")]] = true
			}
		}
	}
	for _, n := range pythonLongTests {
		if !marked[n] {
			t.Errorf("pythonLongTests names %s, which no @ref.long marks", n)
		}
		delete(marked, n)
	}
	for n := range marked {
		t.Errorf("@ref.long marks %s, which pythonLongTests does not list", n)
	}
}

// TestEmulatorFlagsMatchGo: the Python package's EMU_FLAGS (its
// cuda-emu build) are codegen/cuda's EmulatedFlags, which the Go side's
// emulated libraries are built and tested with.
func TestEmulatorFlagsMatchGo(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("attnc", "_build.py"))
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "EMU_FLAGS = ["
	var line string
	for _, l := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(l, prefix) {
			line = l
		}
	}
	if line == "" || !strings.HasSuffix(line, "]") {
		t.Fatalf("_build.py: no one-line %q...] assignment", prefix)
	}
	var got []string
	for _, f := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, prefix), "]"), ",") {
		got = append(got, strings.Trim(strings.TrimSpace(f), `"`))
	}
	if !slices.Equal(got, cudagen.EmulatedFlags) {
		t.Errorf("_build.py EMU_FLAGS = %q, codegen/cuda EmulatedFlags = %q", got, cudagen.EmulatedFlags)
	}
}
