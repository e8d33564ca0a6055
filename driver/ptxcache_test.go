package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/attnc/attnc/codegen/cuda"
	cudatarget "github.com/attnc/attnc/targets/cuda"
)

// TestMain compiles each CUDA source to PTX once per architecture for all
// of the package's tests (TestCUDAToPTX and TestSASS compile the same
// examples): the CUDA target's CompilePTX keeps the PTX by the source's
// content hash.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "attnc-ptx-cache-")
	if err != nil {
		panic(err)
	}
	cache := &ptxCache{dir: dir, done: map[string]string{}}
	cudatarget.CompilePTX = cache.compile
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type ptxCache struct {
	dir  string
	mu   sync.Mutex
	done map[string]string // sha256(source) + arch -> cached PTX
}

func (c *ptxCache) compile(cuPath, ptxPath, arch string) error {
	src, err := os.ReadFile(cuPath)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(src)
	key := hex.EncodeToString(sum[:]) + "." + arch
	c.mu.Lock()
	cached, ok := c.done[key]
	c.mu.Unlock()
	if !ok {
		cached = filepath.Join(c.dir, key+".ptx")
		if err := cuda.CompilePTX(cuPath, cached, arch); err != nil {
			return err
		}
		c.mu.Lock()
		c.done[key] = cached
		c.mu.Unlock()
	}
	ptx, err := os.ReadFile(cached)
	if err != nil {
		return err
	}
	return os.WriteFile(ptxPath, ptx, 0o644)
}
