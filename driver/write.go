package driver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ManifestName is the file a build writes last: while it is in place, the
// files it describes are in place too.
const ManifestName = "manifest.json"

// renameFile moves a staged file over its target and linkFile keeps an old
// one; a test replaces them to make a rename fail, or to have a file
// system without hard links.
var renameFile, linkFile = os.Rename, os.Link

// Staging is a set of output files being written for a directory: they go
// into a fresh directory inside it (same file system, so a rename moves
// them) and replace their targets only when Commit is called, as a whole or
// not at all. Files of the directory that the set does not name are left
// alone.
type Staging struct {
	dir, tmp string
	names    []string
}

// Stage creates dir (and its parents) when missing and a fresh staging
// directory inside it. Call Abort when done (after Commit it does nothing).
func Stage(dir string) (*Staging, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// MkdirTemp makes a new directory (mkdir fails on anything already
	// there, a symlink included), so nothing below follows a link that
	// the build did not create.
	tmp, err := os.MkdirTemp(dir, ".attnc-staging-")
	if err != nil {
		return nil, err
	}
	return &Staging{dir: dir, tmp: tmp}, nil
}

// checkName refuses names that are not one plain file name.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".attnc-staging-") {
		return fmt.Errorf("bad output file name %q", name)
	}
	return nil
}

// Path is where the file name is staged, for a tool that writes it itself
// (then call Add).
func (s *Staging) Path(name string) string { return filepath.Join(s.tmp, name) }

// Write stages data as the file name. The file is created new (O_EXCL:
// never through a symlink).
func (s *Staging) Write(name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	f, err := os.OpenFile(s.Path(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(s.dir, name), err)
	}
	s.Add(name)
	return nil
}

// Add records a file a tool wrote at Path(name).
func (s *Staging) Add(name string) {
	if !slices.Contains(s.names, name) {
		s.names = append(s.names, name)
	}
}

// Abort removes the staging directory and whatever is in it; the target
// directory is as it was.
func (s *Staging) Abort() {
	if s.tmp != "" {
		os.RemoveAll(s.tmp)
		s.tmp = ""
	}
}

// order is the commit order: every file in name order, manifest.json last.
func (s *Staging) order() []string {
	names := slices.Clone(s.names)
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == ManifestName:
			return 1
		case b == ManifestName:
			return -1
		}
		return strings.Compare(a, b)
	})
	return names
}

// Commit moves every staged file over its target in the directory,
// manifest.json last, and logs "wrote <path>" for each to log when it is
// not nil. A rename replaces a symlink at the target, never writes through
// it. Before the first rename, every target that exists is kept in the
// staging directory (a hard link; where the file system has none, the file
// itself is moved there); when a rename fails, the old files are put back
// and the new ones removed, so the directory holds the old set or the new
// one, never a mix. A directory in the way is refused before anything
// changes.
func (s *Staging) Commit(log io.Writer) (err error) {
	if s.tmp == "" {
		return errors.New("build: commit of an aborted staging directory")
	}
	defer s.Abort()
	names := s.order()
	old := filepath.Join(s.tmp, ".old")
	if err := os.Mkdir(old, 0o755); err != nil {
		return err
	}
	existed := map[string]bool{}
	placed := 0 // names[:placed] are renamed into the directory
	defer func() {
		if err == nil {
			return
		}
		// Put the old set back: a backup that is a hard link of a file
		// still in place renames onto itself, which changes nothing.
		for i, n := range names {
			target := filepath.Join(s.dir, n)
			if existed[n] {
				os.Rename(filepath.Join(old, n), target)
			} else if i < placed {
				os.Remove(target)
			}
		}
	}()
	for _, n := range names {
		target := filepath.Join(s.dir, n)
		fi, err := os.Lstat(target)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return err
		case fi.IsDir():
			return fmt.Errorf("%s is a directory; attnc writes a file there", target)
		}
		// link(2) does not follow a symlink: the backup is the link.
		if lerr := linkFile(target, filepath.Join(old, n)); lerr != nil {
			if err := os.Rename(target, filepath.Join(old, n)); err != nil {
				return fmt.Errorf("%s: keeping the old file until the new set is in place: %w", target, err)
			}
		}
		existed[n] = true
	}
	for _, n := range names {
		if err := renameFile(s.Path(n), filepath.Join(s.dir, n)); err != nil {
			return err
		}
		placed++
	}
	if log != nil {
		for _, n := range names {
			fmt.Fprintf(log, "wrote %s\n", filepath.Join(s.dir, n))
		}
	}
	return nil
}

// WriteArtifacts writes files into dir (created if missing) as one set:
// see Staging. It logs "wrote <path>" for each file to log when it is not
// nil.
func WriteArtifacts(dir string, files []Artifact, log io.Writer) error {
	s, err := Stage(dir)
	if err != nil {
		return err
	}
	defer s.Abort()
	for _, a := range files {
		if err := s.Write(a.Name, a.Data); err != nil {
			return err
		}
	}
	return s.Commit(log)
}
