package cpurt

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// llvmDirs are searched, in order, for LLVM 14's opt and llc before PATH.
var llvmDirs = []string{"/usr/lib/llvm-14/bin", "/usr/bin"}

var versionCache sync.Map // tool path -> toolVersionOf

// toolVersionOf is a tool's --version output and, when it is not LLVM 14
// or does not run, the error.
type toolVersionOf struct {
	out string
	err error
}

// findLLVM returns the path of an LLVM 14 build of tool (opt or llc).
func findLLVM(tool string) (string, error) {
	var cands []string
	for _, d := range llvmDirs {
		cands = append(cands, filepath.Join(d, tool))
	}
	for _, n := range []string{tool + "-14", tool} {
		if p, err := exec.LookPath(n); err == nil {
			cands = append(cands, p)
		}
	}
	var tried []string
	for _, p := range cands {
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			continue
		}
		if err := checkVersion(p); err != nil {
			tried = append(tried, err.Error())
			continue
		}
		return p, nil
	}
	msg := fmt.Sprintf("%s (LLVM 14) not found in %s or PATH; install llvm-14", tool, strings.Join(llvmDirs, ", "))
	if len(tried) > 0 {
		msg += " (" + strings.Join(tried, "; ") + ")"
	}
	return "", fmt.Errorf("%s", msg)
}

func checkVersion(p string) error {
	_, err := toolVersion(p)
	return err
}

// versionLine is the line of a tool's --version output that names the
// LLVM version, else its first line.
func versionLine(out string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "LLVM version") {
			line = strings.TrimSpace(l)
		}
	}
	return line
}

// toolVersion is the --version output of the LLVM 14 tool at p, run once
// per path.
func toolVersion(p string) (string, error) {
	if v, ok := versionCache.Load(p); ok {
		tv := v.(toolVersionOf)
		return tv.out, tv.err
	}
	out, err := exec.Command(p, "--version").CombinedOutput()
	if err == nil && !bytes.Contains(out, []byte("LLVM version 14.")) {
		err = fmt.Errorf("%s is not LLVM 14: %s", p, versionLine(string(out)))
	} else if err != nil {
		err = fmt.Errorf("%s --version: %v", p, err)
	}
	versionCache.Store(p, toolVersionOf{string(out), err})
	return string(out), err
}

// Tools checks that opt and llc (LLVM 14) and gcc are installed; with
// $ATTNC_REPLAY_OBJECTS set (replay.go), that gcc is and the directory
// exists, since opt and llc do not run. The error names every missing
// tool.
func Tools() error {
	var missing []string
	if dir := replayDir(); dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			missing = append(missing, fmt.Sprintf("%s=%s is not a directory of recorded objects", ReplayObjectsEnv, dir))
		}
	} else {
		for _, t := range []string{"opt", "llc"} {
			if _, err := findLLVM(t); err != nil {
				missing = append(missing, err.Error())
			}
		}
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		missing = append(missing, "gcc not found in PATH")
	}
	if len(missing) > 0 {
		return fmt.Errorf("cpurt: missing tools: %s", strings.Join(missing, "; "))
	}
	return nil
}

// CPUFlags are the -mcpu flags given to opt and llc: none, since the .ll
// carries a clone of its work kernels per CPU level (each compiled for its
// own level whatever -mcpu says) and picks the best the CPU runs at the
// first call; the entries and the runtime then compile for the triple's
// baseline. The environment variable ATTNC_MCPU sets one (-mcpu=VALUE).
func CPUFlags() []string {
	if m := os.Getenv("ATTNC_MCPU"); m != "" {
		return []string{"-mcpu=" + m}
	}
	return nil
}

// BuildShared compiles the LLVM IR file llPath into the shared library
// soPath: opt -O3, llc -O3 -relocation-model=pic, gcc -shared -lm -lpthread,
// with CPUFlags. Intermediate files live in a temporary directory. Errors
// carry the failing tool's stderr.
func BuildShared(llPath, soPath string) error {
	return BuildSharedFor(llPath, soPath, CPUFlags())
}

// BuildSharedFor is BuildShared with the given -mcpu/-mattr flags for opt
// and llc instead of CPUFlags (the bench's machine yardsticks are built for
// the widest vector ISA the host has). The object is recorded or replayed
// as $ATTNC_RECORD_OBJECTS and $ATTNC_REPLAY_OBJECTS say (replay.go).
func BuildSharedFor(llPath, soPath string, mcpu []string) error {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return fmt.Errorf("cpurt: gcc not found in PATH")
	}
	tmp, err := os.MkdirTemp("", "attnc-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	obj := filepath.Join(tmp, "k.o")
	if err := produceObject("", mcpu, llPath, obj); err != nil {
		return err
	}
	return runSteps(llPath, [][]string{{gcc, "-shared", "-o", soPath, obj, "-lm", "-lpthread"}})
}
