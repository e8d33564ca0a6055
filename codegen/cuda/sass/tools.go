// Package sass assembles PTX with NVIDIA's ptxas and reads the machine code
// (SASS) back with cuobjdump: per kernel, the registers, stack frame, spills
// and static shared memory that `ptxas -v` reports, the instruction counts
// by opcode, and the occupancy a launch gets on sm_80 and sm_90 (computed
// from the per-SM limits, see Occupancy). It is how attnc checks the CUDA
// kernels' machine code without a GPU (attnc sass, driver's TestSASS).
//
// It imports only the standard library; it must not import frontend,
// passes, lower, registry or build (those call it, with PTX they compiled).
package sass

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
)

// Tools are the NVIDIA programs the package runs.
type Tools struct {
	PTXAS     string // ptxas, CUDA 11.8 or newer (sm_90 and PTX ISA 7.8)
	Cuobjdump string // cuobjdump from the same toolkit
	Release   string // "11.8": the toolkit release ptxas reports
}

// ToolsDir is the folder scripts/fetch-ptxas.sh unpacks the tools into
// (their bin/ folder is searched): $ATTNC_CUDA_TOOLS_DIR, else
// <user cache dir>/attnc/cuda-tools (${XDG_CACHE_HOME:-$HOME/.cache}/attnc/cuda-tools
// on Linux). It is "" when neither is known.
func ToolsDir() string {
	if d := os.Getenv("ATTNC_CUDA_TOOLS_DIR"); d != "" {
		return d
	}
	if c, err := os.UserCacheDir(); err == nil {
		return filepath.Join(c, "attnc", "cuda-tools")
	}
	return ""
}

var found struct {
	once  sync.Once
	tools Tools
	err   error
}

// FindTools locates ptxas and cuobjdump, each from the first of: its
// variable ($ATTNC_PTXAS, $ATTNC_CUOBJDUMP), ToolsDir()/bin, PATH,
// $CUDA_HOME/bin, /usr/local/cuda/bin. ptxas must report CUDA release 11.8
// or newer. The result is computed once per process.
func FindTools() (Tools, error) {
	found.once.Do(func() { found.tools, found.err = findTools() })
	return found.tools, found.err
}

const fetchHint = "run scripts/fetch-ptxas.sh (Debian: unpacks CUDA 11.8's ptxas and cuobjdump from non-free into " +
	"~/.cache/attnc/cuda-tools), or set ATTNC_PTXAS and ATTNC_CUOBJDUMP"

func findTools() (Tools, error) {
	var t Tools
	var errs []error
	var err error
	if t.PTXAS, err = findTool("ptxas", "ATTNC_PTXAS"); err != nil {
		errs = append(errs, err)
	} else if t.Release, err = checkRelease(t.PTXAS); err != nil {
		errs = append(errs, err)
	}
	if t.Cuobjdump, err = findTool("cuobjdump", "ATTNC_CUOBJDUMP"); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return Tools{}, fmt.Errorf("sass: %w (%s)", errors.Join(errs...), fetchHint)
	}
	return t, nil
}

func findTool(name, env string) (string, error) {
	if p := os.Getenv(env); p != "" {
		q, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("$%s=%s: %v", env, p, err)
		}
		return q, nil
	}
	var dirs []string
	if d := ToolsDir(); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	var more []string
	if h := os.Getenv("CUDA_HOME"); h != "" {
		more = append(more, filepath.Join(h, "bin"))
	}
	more = append(more, "/usr/local/cuda/bin")
	for _, d := range more {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found ($%s, %s, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)", name, env,
		filepath.Join(ToolsDir(), "bin"))
}

var releaseRE = regexp.MustCompile(`release (\d+)\.(\d+)`)

// checkRelease returns ptxas's CUDA release ("11.8"), or an error when it
// is older than 11.8 (the first to assemble sm_90 and PTX ISA 7.8, which
// clang-19 writes).
func checkRelease(ptxas string) (string, error) {
	out, err := exec.Command(ptxas, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", ptxas, err, bytes.TrimSpace(out))
	}
	m := releaseRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s --version names no CUDA release: %s", ptxas, bytes.TrimSpace(out))
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	if major < 11 || major == 11 && minor < 8 {
		return "", fmt.Errorf("%s is CUDA %d.%d; sm_90 and PTX ISA 7.8 need CUDA 11.8 or newer", ptxas, major, minor)
	}
	return fmt.Sprintf("%d.%d", major, minor), nil
}
