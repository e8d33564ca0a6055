package cpurt

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/needtool"
)

// TestObjectCache builds testdata/add.ll three times with the cache set
// (twice from copies at other paths, once more with other -mcpu flags) and
// a changed IR once: the same IR and settings reuse one object, other
// flags or other IR compile anew, and every library built works.
func TestObjectCache(t *testing.T) {
	needtool.Check(t, Tools())
	tc, err := ToolchainFor(HostTriple())
	needtool.Check(t, err)
	c, err := NewObjectCache()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove()
	saved := Objects
	Objects = c
	defer func() { Objects = saved }()

	src, err := os.ReadFile("testdata/add.ll")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := func(name string, ir string, tc *Toolchain) {
		t.Helper()
		buildAdd(t, tc, dir, name, ir)
	}
	build("a", string(src), tc)
	build("b", string(src), tc)
	if b, n := c.Stats(); n != 1 || b != 2 {
		t.Fatalf("the same IR built twice: %d builds made %d objects, want 2 and 1", b, n)
	}
	other := *tc
	other.MCPU = []string{"-mcpu=x86-64"}
	build("c", string(src), &other)
	if _, n := c.Stats(); n != 2 {
		t.Fatalf("other -mcpu flags: %d objects, want 2", n)
	}
	build("d", strings.Replace(string(src), "define", "; changed\ndefine", 1), tc)
	if _, n := c.Stats(); n != 3 {
		t.Fatalf("changed IR: %d objects, want 3", n)
	}
}

// TestRunObjectCache: two caches sharing a directory (two test binaries of
// one run) compile an IR once — the second finds the first's object and
// its library works — other IR compiles anew, and a run directory is
// removed once its go command has exited, never while it runs.
func TestRunObjectCache(t *testing.T) {
	needtool.Check(t, Tools())
	tc, err := ToolchainFor(HostTriple())
	needtool.Check(t, err)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv(RunCacheEnv, "")

	// A run whose go command is gone (no such process), and one of this
	// process (alive, started when /proc says).
	dead := filepath.Join(tmp, runDirPrefix+"999999999-1")
	start, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(tmp, fmt.Sprintf("%s%d-%s", runDirPrefix, os.Getpid(), start))
	for _, d := range []string{dead, live} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	removeStaleRunDirs()
	if _, err := os.Stat(dead); err == nil {
		t.Errorf("%s (no such process) was not removed", dead)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("%s (a live process) was removed: %v", live, err)
	}

	c, err := RunObjectCache()
	if err != nil {
		t.Fatal(err)
	}
	if !c.shared || !strings.HasPrefix(c.dir, filepath.Join(tmp, runDirPrefix)) {
		t.Logf("not run by go test (%s): a cache of this process's own", c.dir)
	}
	c.Remove()
	// $ATTNC_TEST_CACHE (CI's, for all its go test commands) is the
	// directory instead.
	own := t.TempDir()
	t.Setenv(RunCacheEnv, own)
	if c, err := RunObjectCache(); err != nil || !c.shared || c.dir != filepath.Join(own, "objects") {
		t.Errorf("with $%s=%s: %+v, %v; want a shared cache in its objects folder", RunCacheEnv, own, c, err)
	}
	first := &ObjectCache{dir: t.TempDir(), shared: true, objs: map[string]*cachedObject{}}
	second := &ObjectCache{dir: first.dir, shared: true, objs: map[string]*cachedObject{}}
	src, err := os.ReadFile("testdata/add.ll")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := func(c *ObjectCache, name, ir string) {
		t.Helper()
		saved := Objects
		Objects = c
		defer func() { Objects = saved }()
		buildAdd(t, tc, dir, name, ir)
	}
	build(first, "a", string(src))
	build(second, "b", string(src))
	if first.Found() != 0 || second.Found() != 1 {
		t.Errorf("found compiled by the other: first %d, second %d; want 0 and 1", first.Found(), second.Found())
	}
	build(second, "c", strings.Replace(string(src), "define", "; changed\ndefine", 1))
	if _, n := second.Stats(); n != 2 || second.Found() != 1 {
		t.Errorf("changed IR: %d objects, %d found; want 2 and 1", n, second.Found())
	}
	ents, err := os.ReadDir(first.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".o") {
			t.Errorf("%s left in the cache directory", e.Name())
		}
	}
	if len(ents) != 2 {
		t.Errorf("%d files in the cache directory, want 2 objects", len(ents))
	}
}

// buildAdd writes ir (testdata/add.ll or a variant of it) to dir/name.ll,
// builds it with tc (through the current Objects) and checks that its
// add sums 1, 2, 3 to 6.
func buildAdd(t *testing.T, tc *Toolchain, dir, name, ir string) {
	t.Helper()
	ll := filepath.Join(dir, name+".ll")
	if err := os.WriteFile(ll, []byte(ir), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, name+".so")
	if err := tc.BuildShared(ll, so); err != nil {
		t.Fatal(err)
	}
	l, err := Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := I32Buffer([]int32{1, 2, 3})
	defer b.Free()
	if got, err := l.Call("add", b.Ptr(), 3); err != nil || got != 6 {
		t.Fatalf("%s: add = %d, %v; want 6", name, got, err)
	}
}
