package cpurt

import (
	"github.com/attnc/attnc/internal/needtool"
	_ "github.com/attnc/attnc/internal/testgc"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// needTools skips the test when the LLVM 14 tools are missing, except in CI
// (CI=true), where their absence is a failure.
func needTools(t *testing.T) {
	t.Helper()
	needtool.Check(t, Tools())
}

var (
	soOnce sync.Once
	soPath string
	soErr  error
	soDir  string
)

// testLib builds testdata/add.ll once per test binary.
func testLib(t *testing.T) *Lib {
	t.Helper()
	needTools(t)
	soOnce.Do(func() {
		soDir, soErr = os.MkdirTemp("", "cpurt-test-")
		if soErr != nil {
			return
		}
		soPath = filepath.Join(soDir, "add.so")
		soErr = BuildShared("testdata/add.ll", soPath)
	})
	if soErr != nil {
		t.Fatal(soErr)
	}
	l, err := Open(soPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestMain(m *testing.M) {
	code := m.Run()
	if soDir != "" {
		os.RemoveAll(soDir)
	}
	os.Exit(code)
}

func TestCallAdd(t *testing.T) {
	l := testLib(t)
	xs := []int32{1, 2, 3, 4, 5, -7, 100}
	b := I32Buffer(xs)
	defer b.Free()
	got, err := l.Call("add", b.Ptr(), int64(len(xs)))
	if err != nil {
		t.Fatal(err)
	}
	if got != 108 {
		t.Fatalf("add = %d, want 108", got)
	}
	if got, _ := l.Call("add", 0, 0); got != 0 {
		t.Fatalf("add(NULL, 0) = %d, want 0", got)
	}
}

// TestCallTimed: CallTimed returns Call's status and a time within the
// wall time Go measures around it (the C clock reads sit inside the call).
func TestCallTimed(t *testing.T) {
	t.Parallel()
	l := testLib(t)
	xs := make([]int32, 1<<20)
	for i := range xs {
		xs[i] = int32(i % 7)
	}
	b := I32Buffer(xs)
	defer b.Free()
	want, err := l.Call("add", b.Ptr(), int64(len(xs)))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	got, sec, err := l.CallTimed("add", b.Ptr(), int64(len(xs)))
	wall := time.Since(t0).Seconds()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("CallTimed status %d, Call's %d", got, want)
	}
	if sec <= 0 || sec > wall {
		t.Errorf("CallTimed time %g s, want in (0, %g] (Go's wall time around it)", sec, wall)
	}
	if _, _, err := l.CallTimed("no_such_symbol"); err == nil {
		t.Error("CallTimed of a missing symbol: no error")
	}
}

func TestCallStackArgs(t *testing.T) {
	l := testLib(t)
	p := I32Buffer([]int32{1000})
	defer p.Free()
	args := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, -10, p.Ptr()}
	want := int32(1000)
	for i := 0; i < 10; i++ {
		want += int32(i+1) * int32(args[i])
	}
	got, err := l.Call("many", args...)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("many = %d, want %d", got, want)
	}
	if _, err := l.Call("many", make([]int64, MaxArgs+1)...); err == nil {
		t.Fatal("25 arguments: no error")
	}
}

func TestCallFloatsStatusAndStrings(t *testing.T) {
	l := testLib(t)
	x := F32Buffer([]float32{1, -2.5, 3})
	y := NewBuffer(12)
	defer x.Free()
	defer y.Free()
	if rc, err := l.Call("scale", x.Ptr(), y.Ptr(), 3); err != nil || rc != 0 {
		t.Fatalf("scale = %d, %v", rc, err)
	}
	if got := y.F32(); got[0] != 2 || got[1] != -5 || got[2] != 6 {
		t.Fatalf("scale wrote %v", got)
	}
	if rc, _ := l.Call("scale", x.Ptr(), y.Ptr(), -1); rc != -1 {
		t.Fatalf("scale(n=-1) = %d, want -1", rc)
	}
	if s := l.CallStr("t_strerror", -1); s != "bad input" {
		t.Fatalf("strerror(-1) = %q", s)
	}
	if s := l.CallStr("t_strerror", 0); s != "ok" {
		t.Fatalf("strerror(0) = %q", s)
	}
	if err := l.CallVoid("t_set_num_threads", 7); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.Call("t_get_num_threads"); n != 7 {
		t.Fatalf("num threads = %d, want 7", n)
	}
	if _, err := l.Call("no_such_symbol"); err == nil || !strings.Contains(err.Error(), "no_such_symbol") {
		t.Fatalf("missing symbol error = %v", err)
	}
}

func TestBuildError(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	ll := filepath.Join(dir, "bad.ll")
	os.WriteFile(ll, []byte("define i32 @f() {\n  ret i64 0\n}\n"), 0o644)
	err := BuildShared(ll, filepath.Join(dir, "bad.so"))
	if err == nil || !strings.Contains(err.Error(), "opt") || !strings.Contains(err.Error(), "bad.ll") {
		t.Fatalf("BuildShared of invalid IR: %v", err)
	}
}

func TestBuffer(t *testing.T) {
	for _, n := range []int{0, 1, 6, 4096, 4100, 12288} {
		b := NewBuffer(n)
		if b.Len() != n || len(b.U8()) != n || len(b.F32()) != n/4 || len(b.U16()) != n/2 {
			t.Fatalf("NewBuffer(%d): lengths %d %d %d", n, len(b.U8()), len(b.F32()), len(b.U16()))
		}
		if end := uintptr(b.Ptr()) + uintptr(n); end%uintptr(os.Getpagesize()) != 0 {
			t.Fatalf("NewBuffer(%d): data ends at %#x, not a page boundary", n, end)
		}
		for i := range b.U8() {
			if b.U8()[i] != 0 {
				t.Fatalf("NewBuffer(%d) not zeroed", n)
			}
			b.U8()[i] = byte(i)
		}
		if !faults(uintptr(b.Ptr()) + uintptr(n)) {
			t.Fatalf("NewBuffer(%d): reading one byte past the end did not fault", n)
		}
		ps := os.Getpagesize()
		if !faults(uintptr(b.Ptr()) + uintptr(n) - uintptr((n+ps-1)/ps*ps) - 1) {
			t.Fatalf("NewBuffer(%d): reading before the first page did not fault", n)
		}
		b.Free()
		b.Free()
		if b.Ptr() != 0 {
			t.Fatal("freed buffer has an address")
		}
	}
	var nilBuf *Buffer
	if nilBuf.Ptr() != 0 || nilBuf.F32() != nil {
		t.Fatal("nil buffer is not NULL")
	}
}

// faults reports whether reading the byte at addr faults.
func faults(addr uintptr) (fault bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() { fault = recover() != nil }()
	p := *(**byte)(unsafe.Pointer(&addr))
	_ = *p
	return false
}

// TestKernelOverreadCrashes checks, in a child process, that a kernel reading
// one element past its buffer dies rather than passing.
func TestKernelOverreadCrashes(t *testing.T) {
	if os.Getenv("CPURT_OVERREAD_CHILD") == "1" {
		l := testLib(t)
		b := I32Buffer([]int32{1, 2, 3, 4})
		l.Call("add", b.Ptr(), 5)
		t.Fatal("over-read returned")
	}
	needTools(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelOverreadCrashes$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CPURT_OVERREAD_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child survived an over-read:\n%s", out)
	}
	if !strings.Contains(string(out), "SIGSEGV") {
		t.Fatalf("child failed without SIGSEGV: %v\n%s", err, out)
	}
}

func TestToolsMissing(t *testing.T) {
	dir := t.TempDir()
	old := llvmDirs
	llvmDirs = []string{dir}
	defer func() { llvmDirs = old }()
	t.Setenv("PATH", dir)
	err := Tools()
	if err == nil {
		t.Fatal("Tools() = nil with an empty PATH")
	}
	for _, w := range []string{"opt (LLVM 14) not found", "llc (LLVM 14) not found", "gcc not found", "llvm-14"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Tools() error %q lacks %q", err, w)
		}
	}
	// A wrong LLVM version is named as such.
	fake := filepath.Join(dir, "opt")
	os.WriteFile(fake, []byte("#!/bin/sh\necho 'Ubuntu LLVM version 17.0.1'\n"), 0o755)
	if err := Tools(); err == nil || !strings.Contains(err.Error(), "is not LLVM 14: Ubuntu LLVM version 17.0.1") {
		t.Errorf("Tools() with LLVM 17 opt: %v", err)
	}
}

func TestCPUFlags(t *testing.T) {
	t.Setenv("ATTNC_MCPU", "")
	if f := CPUFlags(); len(f) != 0 {
		t.Fatalf("CPUFlags() = %v, want none (the .ll carries its CPU levels)", f)
	}
	t.Setenv("ATTNC_MCPU", "skylake")
	if f := CPUFlags(); f[0] != "-mcpu=skylake" {
		t.Fatalf("CPUFlags() with ATTNC_MCPU = %v", f)
	}
}
