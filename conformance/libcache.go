package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/attnc/attnc/targets"
)

// HostLibraries, when set, is the cache BuildFor keeps the host libraries
// of emulated GPU targets in (a harness whose library runs the kernels on
// an emulator compiled for the CPU, not on the CPU runtime): a test
// package that builds the same variant for the same target in several
// tests (TestCUDAEmulatedMatrix and TestDevicePathMatchesHost the same
// cudaMatrix variants) compiles it once. Every suite still loads its own
// copy of the library. nil, the default, builds every time; CPU libraries
// share their objects through cpurt.Objects instead.
var HostLibraries *LibCache

// LibCache holds host libraries by the SHA-256 of the target, the link
// arguments and the name and content of every file the target's code
// generator wrote, in a directory of its own.
type LibCache struct {
	dir    string
	mu     sync.Mutex
	libs   map[string]*cachedLib
	builds int // BuildFor calls that asked for a library
}

// cachedLib is one library, built once: waiters for the same key share
// the build and its error.
type cachedLib struct {
	once sync.Once
	path string
	err  error
}

// NewLibCache makes an empty cache in a new temporary directory.
func NewLibCache() (*LibCache, error) {
	dir, err := os.MkdirTemp("", "attnc-hostlibs-")
	if err != nil {
		return nil, err
	}
	return &LibCache{dir: dir, libs: map[string]*cachedLib{}}, nil
}

// Stats are the builds that asked the cache for a library and the
// distinct libraries built for them so far.
func (c *LibCache) Stats() (builds, libs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.builds, len(c.libs)
}

// Remove deletes the cache's directory.
func (c *LibCache) Remove() error { return os.RemoveAll(c.dir) }

// libKey is the cache key of a library of target built from files with
// the link arguments link.
func libKey(target string, files []targets.Artifact, link []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00", target, len(link))
	for _, l := range link {
		fmt.Fprintf(h, "%s\x00", l)
	}
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%d\x00", f.Name, len(f.Data))
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hostLibrary is build's library, built on first use of key, copied into
// dir (a copy: the dynamic loader shares one mapping, and so one state,
// per file).
func (c *LibCache) hostLibrary(key, dir string, build func() (targets.HostLibrary, error)) (targets.HostLibrary, error) {
	c.mu.Lock()
	c.builds++
	l, ok := c.libs[key]
	if !ok {
		l = &cachedLib{path: filepath.Join(c.dir, key+".so")}
		c.libs[key] = l
	}
	c.mu.Unlock()
	var first bool
	var hl targets.HostLibrary
	l.once.Do(func() {
		first = true
		hl, l.err = build()
		if l.err == nil && hl.Runner != "" {
			l.err = fmt.Errorf("conformance: the host library cache holds in-process libraries only (%s runs in a %s runner)", hl.Path, hl.Runner)
		}
		if l.err == nil {
			l.err = copyFile(hl.Path, l.path)
		}
	})
	if l.err != nil || first {
		return hl, l.err
	}
	out := filepath.Join(dir, "cached-"+key[:16]+".so")
	if err := copyFile(l.path, out); err != nil {
		return targets.HostLibrary{}, err
	}
	return targets.HostLibrary{Path: out}, nil
}

// copyFile copies the file src to dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
