package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/attnc/attnc/cpurt"
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
// arguments, the name and content of every file the target's code
// generator wrote and the compiler the target builds with (its
// targets.HostBuildIdentity: the emulator's g++ path, --version output,
// flags and header), in the run's cache directory (cpurt.RunCacheDir
// "hostlibs"), which other test packages of the run, or CI's other go
// test commands, may share: a library is written under a temporary name
// and renamed into place.
type LibCache struct {
	dir    string
	shared bool // other processes may use dir at the same time
	mu     sync.Mutex
	libs   map[string]*cachedLib
	builds int // BuildFor calls that asked for a library
	found  int // distinct libraries found built by another process
}

// cachedLib is one library, built once: waiters for the same key share
// the build and its error.
type cachedLib struct {
	once sync.Once
	path string
	err  error
}

// NewLibCache opens the run's host library cache (a new temporary
// directory when the test binary does not run under go test).
func NewLibCache() (*LibCache, error) {
	dir, shared, err := cpurt.RunCacheDir("hostlibs")
	if err != nil {
		return nil, err
	}
	return &LibCache{dir: dir, shared: shared, libs: map[string]*cachedLib{}}, nil
}

// Stats are the builds that asked the cache for a library and the
// distinct libraries they used so far (built by this process, or found
// built by another one sharing the directory).
func (c *LibCache) Stats() (builds, libs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.builds, len(c.libs)
}

// Found is how many of the distinct libraries this process used were
// built by another process sharing the cache's directory.
func (c *LibCache) Found() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.found
}

// Remove deletes the cache's directory; a shared one, which other test
// processes of the run may still use, is left for the next run to remove.
func (c *LibCache) Remove() error {
	if c.shared {
		return nil
	}
	return os.RemoveAll(c.dir)
}

// key is the cache key of a library of target built from files with the
// link arguments link by the compiler that identity names (the target's
// targets.HostBuildIdentity, or "").
func (c *LibCache) key(target, identity string, files []targets.Artifact, link []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", identity, target, len(link))
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
		if c.shared {
			if st, err := os.Stat(l.path); err == nil && st.Mode().IsRegular() {
				c.mu.Lock()
				c.found++
				c.mu.Unlock()
				return
			}
		}
		first = true
		hl, l.err = build()
		if l.err == nil && hl.Runner != "" {
			l.err = fmt.Errorf("conformance: the host library cache holds in-process libraries only (%s runs in a %s runner)", hl.Path, hl.Runner)
		}
		if l.err == nil {
			l.err = c.store(hl.Path, l.path)
		}
	})
	if l.err != nil || first {
		return hl, l.err
	}
	out := filepath.Join(dir, "cached-"+key[:16]+".so")
	if err := cpurt.CopyFile(l.path, out, 0o755); err != nil {
		return targets.HostLibrary{}, err
	}
	return targets.HostLibrary{Path: out}, nil
}

// store copies the library src into the cache as dst: under a temporary
// name, renamed into place, so that another process never loads half a
// library.
func (c *LibCache) store(src, dst string) error { return cpurt.StoreFile(src, dst, 0o755) }
