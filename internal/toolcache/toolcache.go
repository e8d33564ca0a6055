// Package toolcache keeps the CUDA toolchain's outputs for tests: clang's
// PTX of a .cu and what ptxas and cuobjdump make of a PTX file (the
// kernels' registers, stack, shared memory and opcodes, and the cubin), in
// the run's cache directory (cpurt.RunCacheDir), so that the test packages
// of one `go test` run (driver and cli assemble the same examples) run
// each tool once per distinct input. Entries are keyed by the input's
// bytes, the architecture, the tools' paths and --version output and the
// flags, and written under a temporary name and renamed into place; a
// failed run is never kept.
package toolcache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	cudagen "github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/cpurt"
	cudatarget "github.com/attnc/attnc/targets/cuda"
)

// Cache is one process's view of the run's CUDA toolchain cache.
type Cache struct {
	dir    string
	shared bool
	mu     sync.Mutex
	once   map[string]*sync.Once // per key: one run of the tool in this process
	runs   int                   // tool runs this process made for the cache
}

// Install points targets/cuda's CompilePTX and Assemble at the run's
// cache and returns the function that restores them (and removes the
// cache's directory when it is this process's own).
func Install() (func(), error) {
	dir, shared, err := cpurt.RunCacheDir("cuda")
	if err != nil {
		return nil, err
	}
	c := &Cache{dir: dir, shared: shared, once: map[string]*sync.Once{}}
	ptx, asm := cudatarget.CompilePTX, cudatarget.Assemble
	cudatarget.CompilePTX, cudatarget.Assemble = c.CompilePTX, c.Assemble
	return func() {
		cudatarget.CompilePTX, cudatarget.Assemble = ptx, asm
		if !shared {
			os.RemoveAll(dir)
		}
	}, nil
}

// Runs is how many tool runs (clang, or ptxas and cuobjdump) this process
// made for the cache: the entries it did not find made by another.
func (c *Cache) Runs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs
}

var versions sync.Map // tool path -> its --version output

func version(tool string) string {
	if v, ok := versions.Load(tool); ok {
		return v.(string)
	}
	out, err := exec.Command(tool, "--version").CombinedOutput()
	v := fmt.Sprintf("%s\x00%s\x00%v", tool, out, err)
	versions.Store(tool, v)
	return v
}

func key(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d\x00", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// get makes the entry's files with build (given their temporary paths, in
// the order of names) unless the cache has them, and returns their paths
// in the cache. In one process a key is built once at a time.
func (c *Cache) get(k string, names []string, build func(tmp []string) error) ([]string, error) {
	paths := makePaths(c.dir, k, names)
	c.mu.Lock()
	o, ok := c.once[k]
	if !ok {
		o = &sync.Once{}
		c.once[k] = o
	}
	c.mu.Unlock()
	var err error
	o.Do(func() {
		if have(paths) {
			return
		}
		tmp := makePaths(c.dir, k+fmt.Sprintf(".%d.tmp", os.Getpid()), names)
		defer func() {
			for _, p := range tmp {
				os.Remove(p)
			}
		}()
		c.mu.Lock()
		c.runs++
		c.mu.Unlock()
		if err = build(tmp); err != nil {
			return
		}
		for i := range tmp {
			if err = os.Rename(tmp[i], paths[i]); err != nil {
				return
			}
		}
	})
	if err != nil {
		// Not kept: the next caller runs the tool again and gets its error.
		c.mu.Lock()
		delete(c.once, k)
		c.mu.Unlock()
		return nil, err
	}
	if !have(paths) {
		return nil, fmt.Errorf("toolcache: %s: the entry's files are missing", k)
	}
	return paths, nil
}

func makePaths(dir, k string, names []string) []string {
	var ps []string
	for _, n := range names {
		ps = append(ps, filepath.Join(dir, k+"."+n))
	}
	return ps
}

func have(paths []string) bool {
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// CompilePTX is codegen/cuda.CompilePTX through the cache.
func (c *Cache) CompilePTX(cuPath, ptxPath, arch string) error {
	src, err := os.ReadFile(cuPath)
	if err != nil {
		return err
	}
	flags, err := cudagen.PTXFlags(arch)
	if err != nil {
		return err
	}
	clang, err := cudagen.ClangCUDA()
	if err != nil {
		return err
	}
	k := key([]byte("ptx"), src, []byte(arch), []byte(strings.Join(flags, "\x00")), []byte(version(clang)))
	paths, err := c.get(k, []string{"ptx"}, func(tmp []string) error {
		// The PTX does not name the .cu (no debug info): the same
		// source at another path gives the same PTX.
		return cudagen.CompilePTX(cuPath, tmp[0], arch)
	})
	if err != nil {
		return err
	}
	return copyFile(paths[0], ptxPath)
}

// Assemble is sass.Assemble through the cache.
func (c *Cache) Assemble(t sass.Tools, ptxPath, arch, cubinPath string) ([]sass.Kernel, error) {
	ptx, err := os.ReadFile(ptxPath)
	if err != nil {
		return nil, err
	}
	k := key([]byte("sass"), ptx, []byte(arch), []byte(version(t.PTXAS)), []byte(version(t.Cuobjdump)))
	paths, err := c.get(k, []string{"cubin", "json"}, func(tmp []string) error {
		ks, err := sass.Assemble(t, ptxPath, arch, tmp[0])
		if err != nil {
			return err
		}
		b, err := json.Marshal(ks)
		if err != nil {
			return err
		}
		return os.WriteFile(tmp[1], b, 0o644)
	})
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(paths[1])
	if err != nil {
		return nil, err
	}
	var ks []sass.Kernel
	if err := json.Unmarshal(b, &ks); err != nil {
		return nil, err
	}
	return ks, copyFile(paths[0], cubinPath)
}
