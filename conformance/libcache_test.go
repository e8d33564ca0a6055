package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/targets"
)

// TestLibCacheShared: two host library caches sharing a directory (two
// test processes of one run) build a library once — the second copies the
// first's — other files or link arguments build anew, and only finished
// libraries stay in the directory.
func TestLibCacheShared(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := &LibCache{dir: dir, shared: true, libs: map[string]*cachedLib{}}
	second := &LibCache{dir: dir, shared: true, libs: map[string]*cachedLib{}}
	// The compiler each cache's target names (HostBuildIdentity).
	identity := map[*LibCache]string{first: "g++ x", second: "g++ x"}
	files := []targets.Artifact{{Name: "v.cu", Data: []byte("kernel")}}
	builds := 0
	get := func(c *LibCache, files []targets.Artifact, link []string, content string) {
		t.Helper()
		out := t.TempDir()
		hl, err := c.hostLibrary(c.key("cuda", identity[c], files, link), out, func() (targets.HostLibrary, error) {
			builds++
			p := filepath.Join(out, "v.emu.so")
			return targets.HostLibrary{Path: p}, os.WriteFile(p, []byte(content), 0o755)
		})
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(hl.Path); err != nil || string(b) != content {
			t.Fatalf("library %s holds %q, %v; want %q", hl.Path, b, err, content)
		}
	}
	get(first, files, nil, "lib A")
	get(second, files, nil, "lib A")
	get(second, files, nil, "lib A")
	if builds != 1 || first.Found() != 0 || second.Found() != 1 {
		t.Errorf("%d builds, found %d and %d; want 1 build, found 0 and 1", builds, first.Found(), second.Found())
	}
	get(second, []targets.Artifact{{Name: "v.cu", Data: []byte("kernel 2")}}, nil, "lib B")
	get(second, files, []string{"-Wl,--wrap=malloc"}, "lib C")
	other := &LibCache{dir: dir, shared: true, libs: map[string]*cachedLib{}}
	identity[other] = "g++ y"
	get(other, files, nil, "lib D")
	if builds != 4 {
		t.Errorf("other files, link arguments or compiler: %d builds in all, want 4", builds)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".so") {
			t.Errorf("%s left in the cache directory", e.Name())
		}
	}
	if len(ents) != 4 {
		t.Errorf("%d files in the cache directory, want 4 libraries", len(ents))
	}
}
