package cli

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnc/attnc/internal/dirsnap"
)

const (
	specA = "variant a {\n  heads qo = 4\n  head_dim 32\n}\n"
	specB = "variant b {\n  heads qo = 4, kv = 2\n  head_dim 32\n}\n"
)

// TestBuildOutputIsAllOrNothing: a build that fails after compiling (a
// directory where one of its files goes) or on a bad second spec leaves
// the output directory byte for byte as the last good build left it, the
// user's own files included.
func TestBuildOutputIsAllOrNothing(t *testing.T) {
	out := t.TempDir()
	a := writeSpec(t, "a.attn", specA)
	mustRun(t, "build", a, "-o", out)
	if err := os.WriteFile(filepath.Join(out, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(out, "b.ll", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := dirsnap.Read(t, out)
	if _, ok := before["a.ll"]; !ok {
		t.Fatalf("the first build wrote %v", before)
	}
	// The new a differs from the old one: its files would change.
	a2 := writeSpec(t, "a.attn", strings.Replace(specA, "head_dim 32", "head_dim 64", 1))
	b := writeSpec(t, "b.attn", specB)
	_, e, code := runCLI(t, "build", a2, b, "-o", out)
	if code != 1 || !strings.Contains(e, filepath.Join(out, "b.ll")+" is a directory") {
		t.Errorf("build over a directory at b.ll: exit %d, stderr %q", code, e)
	}
	if after := dirsnap.Read(t, out); !maps.Equal(before, after) {
		t.Errorf("a failed build changed the output directory\nbefore %v\nafter  %v", before, after)
	}
	bad := writeSpec(t, "bad.attn", "variant c {\n  heads qo = 4, kv = 3\n  head_dim 32\n}\n")
	if _, e, code := runCLI(t, "build", a2, bad, "-o", out); code != 1 || !strings.Contains(e, "kv heads (3) must divide") {
		t.Errorf("build with a bad second spec: exit %d, stderr %q", code, e)
	}
	if after := dirsnap.Read(t, out); !maps.Equal(before, after) {
		t.Errorf("a failed build changed the output directory")
	}
}

// TestBuildDoesNotFollowSymlinks: a symlink planted at an output path is
// replaced by the file; the file it pointed to is untouched.
func TestBuildDoesNotFollowSymlinks(t *testing.T) {
	out, elsewhere := t.TempDir(), t.TempDir()
	victim := filepath.Join(elsewhere, "victim.txt")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a.h", "a.ll", "manifest.json"} {
		if err := os.Symlink(victim, filepath.Join(out, n)); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(t, "build", writeSpec(t, "a.attn", specA), "-o", out)
	if got := dirsnap.Read(t, elsewhere); !maps.Equal(got, map[string]string{"victim.txt": "precious"}) {
		t.Errorf("the build wrote through a symlink: %v", got)
	}
	for n, data := range dirsnap.Read(t, out) {
		if strings.HasPrefix(data, "-> ") || strings.HasPrefix(n, ".") {
			t.Errorf("%s left in the output: %s", n, data)
		}
	}
}

// TestCheckReportsEveryVariant: check reports ok for every good variant of
// a file and every error of every bad one, each at its own position.
func TestCheckReportsEveryVariant(t *testing.T) {
	p := writeSpec(t, "m.attn", `variant a {
  heads qo = 4
  head_dim 32
}
variant b {
  heads qo = 8, kv = 3
  head_dims 64
}
variant c {
  heads qo = 4
  head_dim 32
  cache paged(page_size = 3)
}
variant d {
  heads qo = 2
  head_dim 16
}
`)
	o, e, code := runCLI(t, "check", p)
	if code != 1 || o != "ok a\nok d\n" {
		t.Errorf("exit %d, stdout %q; want 1 and ok a, ok d", code, o)
	}
	want := p + ":6:22: kv heads (3) must divide qo heads (8)\n" +
		p + ":7:3: unknown setting \"head_dims\" (did you mean head_dim?)\n" +
		p + ":12:27: page_size 3 is not valid: use a power of two from 1 to 256 (1, 2, 4, ..., 256)\n"
	if e != want {
		t.Errorf("stderr\n%s\nwant\n%s", e, want)
	}
}

// TestCheckRefusesFIFO: a named pipe is refused at once, not read (which
// would wait for a writer forever).
func TestCheckRefusesFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe.attn")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	type result struct {
		e    string
		code int
	}
	done := make(chan result, 1)
	go func() {
		_, e, code := runCLI(t, "check", fifo, llama3)
		done <- result{e, code}
	}()
	select {
	case r := <-done:
		want := "attnc check: " + fifo + ": not a regular file (a named pipe); a spec is read from a regular file\n"
		if r.code != 1 || r.e != want {
			t.Errorf("exit %d, stderr %q; want 1 and %q", r.code, r.e, want)
		}
	case <-time.After(20 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("attnc check of a named pipe still blocked after 20 s")
	}
}

// TestEmptySpecIsAnError: a spec without a variant is an error for build
// (which writes nothing) and check.
func TestEmptySpecIsAnError(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	for _, src := range []string{"", "// only a comment\n"} {
		p := writeSpec(t, "empty.attn", src)
		want := p + ":1:1: the spec has no variant (write variant NAME { ... }; see the examples directory)\n"
		for _, args := range [][]string{{"build", p, "-o", out}, {"check", p}} {
			if o, e, code := runCLI(t, args...); code != 1 || e != want {
				t.Errorf("%s of %q: exit %d, stdout %q, stderr %q; want 1 and %q", args[0], src, code, o, e, want)
			}
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("build of an empty spec wrote %v", dirsnap.Read(t, out))
		}
	}
}

// TestErrorPrefix: an error located in a spec prints as file:line:col:
// message, every other as "attnc <command>: message".
func TestErrorPrefix(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.attn")
	bad := writeSpec(t, "bad.attn", "variant x {\n  heads qo = 0\n  head_dim 8\n}\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"build", missing, "-o", dir}, "attnc build: open " + missing + ": no such file or directory\n"},
		{[]string{"check", missing}, "attnc check: open " + missing + ": no such file or directory\n"},
		{[]string{"explain", missing}, "attnc explain: open " + missing + ": no such file or directory\n"},
		{[]string{"build", llama3, "-o", dir, "--print-after", "nosuch"}, "attnc build: --print-after: no pass named \"nosuch\""},
		{[]string{"explain", llama3, "--kv-len", "8", "--sms", "-1", "--target", "cuda"}, "attnc explain: --sms -1 is out of range"},
		{[]string{"nosuch"}, "attnc: unknown command \"nosuch\" for \"attnc\""},
		{[]string{"explain", llama3, "--q-len", "5", "--kv-len", "3"}, "attnc explain: select llama3_8b (cpu): shape: sequence 0 has q_len 5 > kv_len 3\n"},
		{[]string{"build", bad, "-o", dir}, bad + ":2:14: qo heads must be positive, got 0\n"},
		{[]string{"check", bad}, bad + ":2:14: qo heads must be positive, got 0\n"},
	} {
		_, e, code := runCLI(t, tc.args...)
		if code != 1 || !strings.HasPrefix(e, tc.want) {
			t.Errorf("attnc %s: exit %d, stderr %q; want exit 1 and a stderr starting %q", strings.Join(tc.args, " "), code, e, tc.want)
		}
	}
}

// TestBenchShapeFlags: the built-in shape follows the spec language's
// rules (page_size a power of two up to 256, kv heads dividing qo heads,
// the head_dim the kernels serve), refused before anything is built or
// measured: nothing on stdout.
func TestBenchShapeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--page-size", "24"}, "(--qo-heads 32 --kv-heads 8 --head-dim 128 --page-size 24): page_size 24 is not valid: use a power of two from 1 to 256 (1, 2, 4, ..., 256)"},
		{[]string{"--page-size", "512"}, "page_size 512 is not valid"},
		{[]string{"--kv-heads", "3"}, "kv heads (3) must divide qo heads (32)"},
		{[]string{"--qo-heads", "1000", "--kv-heads", "8"}, "qo heads 1000 is larger than the kernels serve: at most 256"},
		{[]string{"--head-dim", "1000"}, "head_dim 1000 is larger than the kernels serve: at most 512"},
		{[]string{"--head-dim", "0", "--page-size", "3"}, "head_dim must be positive, got 0; page_size 3 is not valid"},
	} {
		args := append([]string{"bench", "--reps", "1", "--stream-mib", "1", "--decode", "f32", "--prefill", ""}, tc.args...)
		start := time.Now()
		o, e, code := runCLI(t, args...)
		if code != 1 || !strings.HasPrefix(e, "attnc bench: the built-in shape (") || !strings.Contains(e, tc.want) || o != "" {
			t.Errorf("attnc %s: exit %d, stdout %q, stderr %q; want exit 1, nothing measured and %q", strings.Join(args, " "), code, o, e, tc.want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("attnc %s: took %v", strings.Join(args, " "), d)
		}
	}
}

// TestBenchAllocationFailure: a K/V pool the system will not map (here an
// address-space limit, as ulimit -v sets) fails the case with an error,
// exit status 1, not an internal error (status 2). The bench runs in a
// child process (this test binary) under the limit.
func TestBenchAllocationFailure(t *testing.T) {
	if os.Getenv("ATTNC_ALLOC_CHILD") == "1" {
		return
	}
	needTools(t, true)
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchAllocationFailureChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ATTNC_ALLOC_CHILD=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 1 || !strings.Contains(e.String(), "attnc bench: decode f32: cpurt: cannot allocate a ") || strings.Contains(e.String(), "internal error") {
		t.Errorf("exit %d, want 1 and the allocation failure\nstdout:\n%s\nstderr:\n%s", code, o.String(), e.String())
	}
}

// TestBenchAllocationFailureChild is TestBenchAllocationFailure's child:
// it limits its address space to what it uses plus 768 MiB and runs a
// bench whose pool needs 1 GiB.
func TestBenchAllocationFailureChild(t *testing.T) {
	if os.Getenv("ATTNC_ALLOC_CHILD") != "1" {
		t.Skip("run by TestBenchAllocationFailure")
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var vmKB uint64
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmSize:" {
			vmKB, _ = strconv.ParseUint(f[1], 10, 64)
		}
	}
	if vmKB == 0 {
		t.Fatal("no VmSize in /proc/self/status")
	}
	lim := vmKB<<10 + 768<<20
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: lim, Max: lim}); err != nil {
		t.Fatal(err)
	}
	code := Run([]string{"bench", "--decode", "f32", "--prefill", "", "--qo-heads", "4", "--kv-heads", "2", "--head-dim", "32",
		"--page-size", "4", "--stream-mib", "8", "--pool-mib", "1024", "--batch", "2", "--kv-len", "100",
		"--threads", "2", "--reps", "1", hostLevels()}, os.Stdout, os.Stderr)
	os.Exit(code)
}
