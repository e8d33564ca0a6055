package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Compiling a generated .cu for a GPU of this machine with NVIDIA's nvcc
// (attnc verify --gpu, attnc bench --gpu).

// FindNVCC locates nvcc: $ATTNC_NVCC if set, else nvcc on PATH, else
// $CUDA_HOME/bin/nvcc or /usr/local/cuda/bin/nvcc.
func FindNVCC() (string, error) {
	if p := os.Getenv("ATTNC_NVCC"); p != "" {
		return exec.LookPath(p)
	}
	if p, err := exec.LookPath("nvcc"); err == nil {
		return p, nil
	}
	var dirs []string
	if h := os.Getenv("CUDA_HOME"); h != "" {
		dirs = append(dirs, h)
	}
	for _, d := range append(dirs, "/usr/local/cuda") {
		p := filepath.Join(d, "bin", "nvcc")
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("cuda: nvcc not found (install the CUDA toolkit, put nvcc on PATH, or set ATTNC_NVCC)")
}

// NVCCArchs are the -arch values CompileNVCC tries in order: $ATTNC_CUDA_ARCH
// alone if set, else native (the GPUs of this machine, CUDA 11.6 or newer)
// and then sm_90 for an nvcc that does not know native.
func NVCCArchs() []string {
	if a := os.Getenv("ATTNC_CUDA_ARCH"); a != "" {
		return []string{a}
	}
	return []string{"native", "sm_90"}
}

// CompileNVCC compiles the generated CUDA source cuPath into the shared
// library soPath:
//
//	nvcc -O3 -arch=<arch> -shared -Xcompiler -fPIC -o soPath cuPath
//
// with the first architecture of NVCCArchs that nvcc accepts. The error
// carries nvcc's output. When $ATTNC_NVCC_CACHE names a directory, a
// library compiled before from the same source by the same nvcc with the
// same architectures is copied from it instead (NVCCCacheName; one cache
// directory serves one nvcc). scripts/gpu-check.sh sets it and fills it
// with its own parallel compiles, so that verify and bench compile no
// variant again.
func CompileNVCC(nvcc, cuPath, soPath string) error {
	cache, key := os.Getenv("ATTNC_NVCC_CACHE"), ""
	if cache != "" {
		src, err := os.ReadFile(cuPath)
		if err != nil {
			return err
		}
		key = filepath.Join(cache, NVCCCacheName(src))
		if copyFile(key, soPath) == nil {
			return nil
		}
	}
	var errs []error
	for _, arch := range NVCCArchs() {
		args := []string{"-O3", "-arch=" + arch, "-shared", "-Xcompiler", "-fPIC", "-o", soPath, cuPath}
		out, err := exec.Command(nvcc, args...).CombinedOutput()
		if err == nil {
			if key != "" && os.MkdirAll(cache, 0o755) == nil {
				copyFile(soPath, key) //nolint:errcheck // the cache is an optimization
			}
			return nil
		}
		errs = append(errs, fmt.Errorf("%s %s: %v\n%s", nvcc, strings.Join(args, " "), err, strings.TrimSpace(string(out))))
		// Only an architecture nvcc does not know is worth another try.
		if !strings.Contains(string(out), "arch") && !strings.Contains(string(out), "native") {
			break
		}
	}
	return fmt.Errorf("cuda: nvcc failed: %w", errors.Join(errs...))
}

// NVCCCacheName is the file name, in $ATTNC_NVCC_CACHE, of the library
// nvcc compiles from the CUDA source src: the source's SHA-256 in hex, a
// dash, the NVCCArchs joined by commas, ".so" (scripts/gpu-check.sh names
// its compiles the same way: sha256sum and the same -arch list).
func NVCCCacheName(src []byte) string {
	sum := sha256.Sum256(src)
	return hex.EncodeToString(sum[:]) + "-" + strings.Join(NVCCArchs(), ",") + ".so"
}

// copyFile copies src to dst through a temporary file renamed into place.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".attnc-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
