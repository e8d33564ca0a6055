package cpurt

import (
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
