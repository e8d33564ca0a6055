// Package dirsnap reads a directory tree into a map for tests that check
// what a command left on disk (all-or-nothing output, symlinks not
// followed). It imports the standard library only.
package dirsnap

import (
	"os"
	"path/filepath"
	"testing"
)

// Read returns every entry under dir (hidden ones included) by its path
// relative to dir: regular files by content, symlinks as "-> target",
// directories as "dir".
func Read(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case rel == ".":
		case d.Type()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "-> " + l
		case d.IsDir():
			out[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
