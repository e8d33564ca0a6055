package cpurt

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/needtool"
)

// remoteLib builds testdata/add.ll for aarch64 and opens it in a runner
// under the emulator.
func remoteLib(t *testing.T) *Remote {
	t.Helper()
	tc, err := ToolchainFor("aarch64-unknown-linux-gnu")
	needtool.Check(t, err)
	if !tc.Foreign() {
		t.Skip("this machine is aarch64: no emulator involved")
	}
	so := filepath.Join(t.TempDir(), "add.so")
	if err := tc.BuildShared("testdata/add.ll", so); err != nil {
		t.Fatal(err)
	}
	r, err := tc.OpenRemote(so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// put allocates runner memory holding data.
func put(t *testing.T, r *Remote, data []byte) int64 {
	t.Helper()
	p, err := r.Alloc(len(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Write(p, data); err != nil {
		t.Fatal(err)
	}
	return p
}

func le32(xs ...uint32) []byte {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

// TestRemoteCalls runs the hand-written kernels of TestCallAdd and friends
// on aarch64 under the emulator: memory round trips, i32 arguments in
// registers and on the stack, statuses, strings and void calls.
func TestRemoteCalls(t *testing.T) {
	r := remoteLib(t)
	xs := le32(1, 2, 3, 4, 5, uint32(0xfffffff9) /* -7 */, 100)
	p := put(t, r, xs)
	if got, err := r.Call("add", p, 7); err != nil || got != 108 {
		t.Fatalf("add = %d, %v; want 108", got, err)
	}
	q := put(t, r, le32(1000))
	args := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, -10, q}
	want := int32(1000)
	for i := 0; i < 10; i++ {
		want += int32(i+1) * int32(args[i])
	}
	if got, err := r.Call("many", args...); err != nil || got != want {
		t.Fatalf("many = %d, %v; want %d (arguments past x7 travel on the stack)", got, err, want)
	}
	x := put(t, r, le32(math.Float32bits(1), math.Float32bits(-2.5), math.Float32bits(3)))
	y, err := r.Alloc(12)
	if err != nil {
		t.Fatal(err)
	}
	if rc, err := r.Call("scale", x, y, 3); err != nil || rc != 0 {
		t.Fatalf("scale = %d, %v", rc, err)
	}
	out := make([]byte, 12)
	if err := r.Read(out, y); err != nil {
		t.Fatal(err)
	}
	for i, w := range []float32{2, -5, 6} {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])); got != w {
			t.Errorf("scale wrote y[%d] = %v, want %v", i, got, w)
		}
	}
	if rc, _ := r.Call("scale", x, y, -1); rc != -1 {
		t.Errorf("scale(n=-1) = %d, want -1", rc)
	}
	if s := r.CallStr("t_strerror", -1); s != "bad input" {
		t.Errorf("strerror(-1) = %q", s)
	}
	if err := r.CallVoid("t_set_num_threads", 7); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Call("t_get_num_threads"); n != 7 {
		t.Errorf("num threads = %d, want 7", n)
	}
	if _, err := r.Call("no_such_symbol"); err == nil || !strings.Contains(err.Error(), "no_such_symbol") {
		t.Errorf("missing symbol: %v", err)
	}
	if err := r.Write(y+8, make([]byte, 8)); err == nil || !strings.Contains(err.Error(), "outside any allocation") {
		t.Errorf("write past an allocation: %v", err)
	}
	if err := r.Read(make([]byte, 13), y); err == nil {
		t.Error("read past an allocation: no error")
	}
	if err := r.Free(y); err != nil {
		t.Fatal(err)
	}
	if err := r.Free(y); err == nil {
		t.Error("double free: no error")
	}
	// The runner still serves after the refused requests.
	if got, err := r.Call("add", p, 7); err != nil || got != 108 {
		t.Fatalf("add after errors = %d, %v", got, err)
	}
}

// TestRemoteOverreadKillsRunner checks that a kernel reading past its
// buffer faults on the runner's guard page and that the error says so.
func TestRemoteOverreadKillsRunner(t *testing.T) {
	r := remoteLib(t)
	p := put(t, r, le32(1, 2, 3, 4))
	_, err := r.Call("add", p, 5)
	if err == nil || !strings.Contains(err.Error(), "runner died during call add") {
		t.Fatalf("over-read: %v", err)
	}
	if _, err2 := r.Alloc(4); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("a request after the crash: %v", err2)
	}
	if cerr := r.Close(); cerr == nil {
		t.Error("Close after a crash reports nothing")
	}
	t.Logf("%v", err)
}

func TestToolchainErrors(t *testing.T) {
	if _, err := ToolchainFor("riscv64-unknown-linux-gnu"); err == nil || !strings.Contains(err.Error(), "aarch64-unknown-linux-gnu") {
		t.Errorf("unknown triple: %v", err)
	}
	dir := t.TempDir()
	old := llvmDirs
	llvmDirs = []string{dir}
	defer func() { llvmDirs = old }()
	t.Setenv("PATH", dir)
	_, err := ToolchainFor("aarch64-unknown-linux-gnu")
	if HostTriple() == "aarch64-unknown-linux-gnu" {
		return
	}
	for _, w := range []string{"opt (LLVM 14) not found", "aarch64-linux-gnu-gcc not found", "apt-get install gcc-aarch64-linux-gnu", "qemu-aarch64 not found", "apt-get install qemu-user"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("ToolchainFor with an empty PATH: %v, want it to mention %q", err, w)
		}
	}
}
