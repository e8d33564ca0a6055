package driver

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/dirsnap"
)

// oldSet fills dir with an earlier build's files and a file of the user's.
func oldSet(t *testing.T, dir string) {
	t.Helper()
	for name, data := range map[string]string{
		"a.h": "old a.h", "a.ll": "old a.ll", "b.h": "old b.h", "b.ll": "old b.ll",
		"manifest.json": "old manifest", "notes.txt": "the user's own file",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// newSet is a build's new artifacts for oldSet's directory.
func newSet() *Output {
	return &Output{Artifacts: []Artifact{
		{Name: "a.h", Data: []byte("new a.h")}, {Name: "a.ll", Data: []byte("new a.ll")},
		{Name: "b.h", Data: []byte("new b.h")}, {Name: "b.ll", Data: []byte("new b.ll")},
		{Name: "c.h", Data: []byte("new c.h")},
		{Name: "manifest.json", Data: []byte("new manifest")},
	}}
}

// TestWriteFailureLeavesOldSet makes the n-th rename of a commit fail, for
// every n: the directory must stay byte for byte as it was, no staging
// directory left over. Then a write without failures replaces the set and
// leaves the user's file. Also with hard links failing (a file system
// without them), where the old files are moved aside instead.
func TestWriteFailureLeavesOldSet(t *testing.T) {
	defer func(r, l func(string, string) error) { renameFile, linkFile = r, l }(renameFile, linkFile)
	for _, noLinks := range []bool{false, true} {
		linkFile = os.Link
		if noLinks {
			linkFile = func(string, string) error { return errors.New("no hard links here") }
		}
		writeFailures(t)
	}
}

// writeFailures is TestWriteFailureLeavesOldSet with linkFile as set.
func writeFailures(t *testing.T) {
	for n := 1; n <= len(newSet().Artifacts); n++ {
		dir := t.TempDir()
		oldSet(t, dir)
		before := dirsnap.Read(t, dir)
		calls := 0
		renameFile = func(from, to string) error {
			if calls++; calls == n {
				return errors.New("injected rename failure")
			}
			return os.Rename(from, to)
		}
		var log bytes.Buffer
		if err := newSet().Write(dir, &log); err == nil || !strings.Contains(err.Error(), "injected") {
			t.Fatalf("rename %d fails: Write returned %v", n, err)
		}
		if after := dirsnap.Read(t, dir); !maps.Equal(before, after) {
			t.Errorf("rename %d fails: the directory changed\nbefore %v\nafter  %v", n, before, after)
		}
		if log.Len() != 0 {
			t.Errorf("rename %d fails: logged %q", n, log.String())
		}
	}
	renameFile = os.Rename
	dir := t.TempDir()
	oldSet(t, dir)
	var log bytes.Buffer
	if err := newSet().Write(dir, &log); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a.h": "new a.h", "a.ll": "new a.ll", "b.h": "new b.h", "b.ll": "new b.ll",
		"c.h": "new c.h", "manifest.json": "new manifest", "notes.txt": "the user's own file"}
	if got := dirsnap.Read(t, dir); !maps.Equal(got, want) {
		t.Errorf("after a good write: %v, want %v", got, want)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 6 || lines[5] != "wrote "+filepath.Join(dir, "manifest.json") {
		t.Errorf("log %q: want six lines, manifest.json last", log.String())
	}
}

// TestWriteDirectoryInTheWay: a directory where a file goes fails the
// write before any file of the set changes.
func TestWriteDirectoryInTheWay(t *testing.T) {
	dir := t.TempDir()
	oldSet(t, dir)
	if err := os.Mkdir(filepath.Join(dir, "c.h"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c.h", "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := dirsnap.Read(t, dir)
	err := newSet().Write(dir, nil)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "c.h")) {
		t.Fatalf("Write returned %v, want an error naming c.h", err)
	}
	if after := dirsnap.Read(t, dir); !maps.Equal(before, after) {
		t.Errorf("the directory changed\nbefore %v\nafter  %v", before, after)
	}
}

// TestWriteReplacesSymlinks: a symlink planted at an output path is
// replaced by the new file, and its target is not written.
func TestWriteReplacesSymlinks(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	victim := filepath.Join(elsewhere, "victim")
	if err := os.WriteFile(victim, []byte("not attnc's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "a.h")); err != nil {
		t.Fatal(err)
	}
	// A dangling link too: writing through it would create the file.
	if err := os.Symlink(filepath.Join(elsewhere, "created"), filepath.Join(dir, "manifest.json")); err != nil {
		t.Fatal(err)
	}
	if err := newSet().Write(dir, nil); err != nil {
		t.Fatal(err)
	}
	if got := dirsnap.Read(t, elsewhere); !maps.Equal(got, map[string]string{"victim": "not attnc's"}) {
		t.Errorf("the write went through a symlink: %v", got)
	}
	got := dirsnap.Read(t, dir)
	if got["a.h"] != "new a.h" || got["manifest.json"] != "new manifest" {
		t.Errorf("outputs %v", got)
	}
	if names := slices.Sorted(maps.Keys(got)); len(names) != 6 {
		t.Errorf("files %v", names)
	}
}
