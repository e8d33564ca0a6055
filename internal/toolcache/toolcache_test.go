package toolcache

import (
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	cudagen "github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/internal/needtool"
	cudatarget "github.com/attnc/attnc/targets/cuda"
)

const kernel = `ATTNC_KERNEL void k_add(const float *a, float *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] += a[i];
}
`

// TestCacheRunsToolsOnce: the same .cu at two paths compiles to PTX once
// and the same PTX assembles once, with the outputs of the tools' own
// runs; another source or architecture runs the tools again; a second
// process's view of the directory finds every entry.
func TestCacheRunsToolsOnce(t *testing.T) {
	_, err := cudagen.ClangCUDA()
	needtool.Check(t, err)
	tools, err := sass.FindTools()
	needtool.Check(t, err)
	dir := t.TempDir()
	c := &Cache{dir: t.TempDir(), once: map[string]*sync.Once{}}
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(cudagen.Prelude+src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	a, b := write("a.cu", kernel), write("b.cu", kernel)
	// The tools' own outputs, without the cache.
	direct := filepath.Join(dir, "direct.ptx")
	if err := cudagen.CompilePTX(a, direct, "sm_80"); err != nil {
		t.Fatal(err)
	}
	want, err := sass.Assemble(tools, direct, "sm_80", filepath.Join(dir, "direct.cubin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cu := range []string{a, b} {
		ptx := cu + ".ptx"
		if err := c.CompilePTX(cu, ptx, "sm_80"); err != nil {
			t.Fatal(err)
		}
		if read(ptx) != read(direct) {
			t.Errorf("%s: the cached PTX differs from clang's", cu)
		}
		ks, err := c.Assemble(tools, ptx, "sm_80", cu+".cubin")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ks, want) {
			t.Errorf("%s: cached kernels %+v, want %+v", cu, ks, want)
		}
		if read(cu+".cubin") != read(filepath.Join(dir, "direct.cubin")) {
			t.Errorf("%s: the cached cubin differs from ptxas's", cu)
		}
	}
	if n := c.Runs(); n != 2 {
		t.Errorf("%d tool runs for one source and one PTX, want 2", n)
	}
	if err := c.CompilePTX(a, a+".90.ptx", "sm_90"); err != nil {
		t.Fatal(err)
	}
	other := write("c.cu", kernel+"// another source\n")
	if err := c.CompilePTX(other, other+".ptx", "sm_80"); err != nil {
		t.Fatal(err)
	}
	if n := c.Runs(); n != 4 {
		t.Errorf("another architecture and another source: %d tool runs, want 4", n)
	}
	second := &Cache{dir: c.dir, shared: true, once: map[string]*sync.Once{}}
	if err := second.CompilePTX(b, b+".again.ptx", "sm_90"); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Assemble(tools, a+".ptx", "sm_80", b+".again.cubin"); err != nil {
		t.Fatal(err)
	}
	if n := second.Runs(); n != 0 {
		t.Errorf("a second process ran the tools %d times, want 0", n)
	}
	// A failure is not kept.
	if err := c.CompilePTX(write("bad.cu", "this is not C++"), filepath.Join(dir, "bad.ptx"), "sm_80"); err == nil {
		t.Error("a bad source compiled")
	}
	restore, err := Install()
	if err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(cudatarget.CompilePTX).Pointer() == reflect.ValueOf(cudagen.CompilePTX).Pointer() {
		t.Error("Install left targets/cuda.CompilePTX as it was")
	}
	restore()
	if reflect.ValueOf(cudatarget.CompilePTX).Pointer() != reflect.ValueOf(cudagen.CompilePTX).Pointer() {
		t.Error("restore did not put targets/cuda.CompilePTX back")
	}
}
