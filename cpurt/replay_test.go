package cpurt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/needtool"
)

// TestRecordReplayObjects records the objects of testdata/add.ll built
// three ways (Toolchain.BuildShared through an object cache and without
// one, and BuildSharedFor with other -mcpu flags), then replays them with
// opt and llc replaced by programs that fail if run: the libraries link
// from the recorded objects (from copies of the IR at other paths, and
// bypassing the object cache) and work, while IR or flags nobody recorded
// fail with an error that names the file and says how to record it.
func TestRecordReplayObjects(t *testing.T) {
	needtool.Check(t, Tools())
	tc, err := ToolchainFor(HostTriple())
	needtool.Check(t, err)
	src, err := os.ReadFile("testdata/add.ll")
	if err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(t.TempDir(), "objects")
	t.Setenv(ReplayObjectsEnv, "")
	t.Setenv(RecordObjectsEnv, rec)
	dir := t.TempDir()
	buildAdd(t, tc, dir, "plain", string(src))
	c, err := NewObjectCache()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove()
	saved := Objects
	Objects = c
	buildAdd(t, tc, dir, "cached", strings.Replace(string(src), "define", "; cached\ndefine", 1))
	Objects = saved
	ll := filepath.Join(dir, "for.ll")
	if err := os.WriteFile(ll, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := BuildSharedFor(ll, filepath.Join(dir, "for.so"), []string{"-mcpu=x86-64"}); err != nil {
		t.Fatal(err)
	}
	objs, _ := filepath.Glob(filepath.Join(rec, "*.o"))
	if len(objs) != 3 {
		t.Fatalf("recorded %d objects, want 3 (two IRs through the toolchain, one with other flags): %v", len(objs), objs)
	}
	if v, err := os.ReadFile(filepath.Join(rec, "VERSIONS")); err != nil || !strings.Contains(string(v), "LLVM version 14") {
		t.Errorf("VERSIONS: %q, %v", v, err)
	}

	// Replay: opt and llc are programs that fail when they run.
	fake := t.TempDir()
	for _, tool := range []string{"opt", "llc"} {
		script := "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'LLVM version 14.0.6'; exit 0; }\necho " + tool + " ran >&2\nexit 1\n"
		if err := os.WriteFile(filepath.Join(fake, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	oldDirs := llvmDirs
	llvmDirs = []string{fake}
	defer func() { llvmDirs = oldDirs }()
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(RecordObjectsEnv, "")
	t.Setenv(ReplayObjectsEnv, rec)
	if err := Tools(); err != nil {
		t.Fatalf("Tools() while replaying: %v", err)
	}
	other := t.TempDir()
	buildAdd(t, tc, other, "again", string(src))
	c2, err := NewObjectCache()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Remove()
	Objects = c2
	buildAdd(t, tc, other, "cached_again", strings.Replace(string(src), "define", "; cached\ndefine", 1))
	Objects = saved
	if b, _ := c2.Stats(); b != 0 {
		t.Errorf("a replayed build asked the object cache %d times, want 0", b)
	}
	ll2 := filepath.Join(other, "for.ll")
	if err := os.WriteFile(ll2, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := BuildSharedFor(ll2, filepath.Join(other, "for.so"), []string{"-mcpu=x86-64"}); err != nil {
		t.Fatalf("replayed BuildSharedFor: %v", err)
	}
	l, err := Open(filepath.Join(other, "for.so"))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()

	// What was not recorded: other IR, other flags.
	changed := filepath.Join(other, "changed.ll")
	if err := os.WriteFile(changed, []byte(strings.Replace(string(src), "define", "; changed\ndefine", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, build := range map[string]func() error{
		"other IR":    func() error { return tc.BuildShared(changed, filepath.Join(other, "changed.so")) },
		"other flags": func() error { return BuildSharedFor(ll2, filepath.Join(other, "v3.so"), []string{"-mcpu=x86-64-v3"}) },
	} {
		err := build()
		if err == nil {
			t.Errorf("%s: built while replaying objects nobody recorded", name)
			continue
		}
		for _, w := range []string{"holds no object for", RecordObjectsEnv + "=" + rec} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", name, err, w)
			}
		}
		if strings.Contains(err.Error(), " ran") {
			t.Errorf("%s: opt or llc ran while replaying: %v", name, err)
		}
	}
	t.Setenv(ReplayObjectsEnv, filepath.Join(rec, "missing"))
	if err := Tools(); err == nil || !strings.Contains(err.Error(), "not a directory of recorded objects") {
		t.Errorf("Tools() replaying from a missing directory: %v", err)
	}
}
