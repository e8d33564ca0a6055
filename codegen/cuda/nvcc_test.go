package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CompileNVCC passes the documented flags and falls back to sm_90 when
// nvcc does not know -arch=native (a fake nvcc records its arguments).
func TestCompileNVCCFallsBackToSM90(t *testing.T) {
	t.Setenv("ATTNC_CUDA_ARCH", "")
	t.Setenv("ATTNC_NVCC_CACHE", "")
	dir := t.TempDir()
	log := filepath.Join(dir, "args.log")
	fake := filepath.Join(dir, "nvcc")
	script := `#!/bin/sh
echo "$@" >> ` + log + `
case "$*" in
*-arch=native*) echo "nvcc fatal   : Value 'native' is not defined for option 'gpu-architecture'" >&2; exit 1;;
esac
while [ $# -gt 0 ]; do if [ "$1" = -o ]; then : > "$2"; fi; shift; done
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "v.so")
	if err := CompileNVCC(fake, "v.cu", so); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(so); err != nil {
		t.Errorf("no output: %v", err)
	}
	b, _ := os.ReadFile(log)
	want := "-O3 -arch=native -shared -Xcompiler -fPIC -o " + so + " v.cu\n-O3 -arch=sm_90 -shared -Xcompiler -fPIC -o " + so + " v.cu\n"
	if string(b) != want {
		t.Errorf("nvcc calls:\n%s\nwant:\n%s", b, want)
	}

	// A compile error is not retried and is reported with nvcc's output.
	bad := filepath.Join(dir, "bad-nvcc")
	os.WriteFile(bad, []byte("#!/bin/sh\necho 'v.cu(3): error: expected a \";\"' >&2\nexit 2\n"), 0o755)
	err := CompileNVCC(bad, "v.cu", so)
	if err == nil || !strings.Contains(err.Error(), `expected a ";"`) || strings.Count(err.Error(), "-arch=") != 1 {
		t.Errorf("compile error: %v", err)
	}
}

// With $ATTNC_NVCC_CACHE, the same source is compiled once.
func TestCompileNVCCCache(t *testing.T) {
	t.Setenv("ATTNC_CUDA_ARCH", "sm_90")
	dir := t.TempDir()
	t.Setenv("ATTNC_NVCC_CACHE", filepath.Join(dir, "cache"))
	log := filepath.Join(dir, "calls.log")
	fake := filepath.Join(dir, "nvcc")
	script := "#!/bin/sh\necho x >> " + log + "\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then echo lib > \"$2\"; fi; shift; done\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cu := filepath.Join(dir, "v.cu")
	os.WriteFile(cu, []byte("// one\n"), 0o644)
	for i, so := range []string{"a.so", "b.so"} {
		if err := CompileNVCC(fake, cu, filepath.Join(dir, so)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, so)); err != nil || string(b) != "lib\n" {
			t.Errorf("compile %d: %q, %v", i, b, err)
		}
	}
	// scripts/gpu-check.sh fills the cache under these names: sha256sum's
	// digest of the source, a dash, the -arch list.
	if sum, err := exec.Command("sha256sum", cu).Output(); err == nil {
		want := strings.Fields(string(sum))[0] + "-sm_90.so"
		if b, err := os.ReadFile(filepath.Join(dir, "cache", want)); err != nil || string(b) != "lib\n" {
			t.Errorf("the cache has no %s (what gpu-check.sh would name it): %q, %v", want, b, err)
		}
	} else {
		t.Logf("sha256sum: %v: the name gpu-check.sh gives is not checked", err)
	}
	os.WriteFile(cu, []byte("// two\n"), 0o644)
	if err := CompileNVCC(fake, cu, filepath.Join(dir, "c.so")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(log); string(b) != "x\nx\n" {
		t.Errorf("nvcc ran %d times for two sources, want 2", strings.Count(string(b), "x"))
	}
}

func TestFindNVCCNamesTheFix(t *testing.T) {
	t.Setenv("ATTNC_NVCC", "")
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CUDA_HOME", t.TempDir())
	if p, err := FindNVCC(); err == nil {
		t.Skipf("nvcc found at %s", p)
	} else if !strings.Contains(err.Error(), "nvcc not found") {
		t.Errorf("FindNVCC: %v", err)
	}
}
