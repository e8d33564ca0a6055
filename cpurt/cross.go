package cpurt

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// Toolchain is how this machine compiles and runs generated IR for one
// target triple: the C compiler that links the shared library and, for a
// foreign architecture, the user-mode emulator that runs it.
type Toolchain struct {
	Triple string
	CC     string   // C compiler and linker (gcc, or a cross gcc)
	MCPU   []string // -mcpu flag for opt and llc; none: the triple's baseline (NEON on aarch64)
	// Emulator runs a program of the target (with its arguments after
	// these); nil when the target is this machine's own.
	Emulator []string
	// Sysroot holds the target's C libraries (the emulator's -L); "" for
	// the host.
	Sysroot string
	// Link are more arguments of BuildShared's link step, before the
	// libraries: objects or C sources to link with the kernels, linker
	// flags (tests link an allocation shim with -Wl,--wrap=malloc).
	Link []string
}

// crossTargets are the triples this package can build for, with the Debian
// package names of their tools.
var crossTargets = []struct {
	triple, goarch      string
	cc, qemu, sysroot   string
	loader              string // the dynamic loader inside sysroot
	ccPackage, qemuPkgs string
}{
	{triple: "x86_64-unknown-linux-gnu", goarch: "amd64", cc: "x86_64-linux-gnu-gcc", qemu: "qemu-x86_64",
		sysroot: "/usr/x86_64-linux-gnu", loader: "lib/ld-linux-x86-64.so.2", ccPackage: "gcc-x86-64-linux-gnu", qemuPkgs: "qemu-user"},
	{triple: "aarch64-unknown-linux-gnu", goarch: "arm64", cc: "aarch64-linux-gnu-gcc", qemu: "qemu-aarch64",
		sysroot: "/usr/aarch64-linux-gnu", loader: "lib/ld-linux-aarch64.so.1", ccPackage: "gcc-aarch64-linux-gnu", qemuPkgs: "qemu-user"},
}

// HostTriple is the triple of this machine's own target, or "" when it is
// none of the known ones.
func HostTriple() string {
	for _, c := range crossTargets {
		if c.goarch == runtime.GOARCH && runtime.GOOS == "linux" {
			return c.triple
		}
	}
	return ""
}

// Triples are the target triples ToolchainFor knows.
func Triples() []string {
	var ts []string
	for _, c := range crossTargets {
		ts = append(ts, c.triple)
	}
	return ts
}

// ToolchainFor returns the toolchain of triple ("" is the host's) after
// checking that every tool it needs is installed: LLVM 14 opt and llc, the
// C compiler, and for a foreign triple the emulator and the target's C
// libraries. The error names each missing tool and the package providing it.
func ToolchainFor(triple string) (*Toolchain, error) {
	if triple == "" {
		triple = HostTriple()
	}
	for _, c := range crossTargets {
		if c.triple != triple {
			continue
		}
		if triple == HostTriple() {
			if err := Tools(); err != nil {
				return nil, err
			}
			return &Toolchain{Triple: triple, CC: "gcc", MCPU: CPUFlags()}, nil
		}
		var missing []string
		if replayDir() == "" {
			for _, t := range []string{"opt", "llc"} {
				if _, err := findLLVM(t); err != nil {
					missing = append(missing, err.Error())
				}
			}
		}
		tc := &Toolchain{Triple: triple, Sysroot: c.sysroot}
		if p, err := exec.LookPath(c.cc); err == nil {
			tc.CC = p
		} else {
			missing = append(missing, fmt.Sprintf("%s not found in PATH (Debian: apt-get install %s)", c.cc, c.ccPackage))
		}
		if p, err := exec.LookPath(c.qemu); err == nil {
			tc.Emulator = []string{p, "-L", c.sysroot}
		} else {
			missing = append(missing, fmt.Sprintf("%s not found in PATH (Debian: apt-get install %s)", c.qemu, c.qemuPkgs))
		}
		if _, err := os.Stat(filepath.Join(c.sysroot, c.loader)); err != nil {
			missing = append(missing, fmt.Sprintf("the %s C libraries are not in %s (Debian: apt-get install %s)", triple, c.sysroot, c.ccPackage))
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("cpurt: missing tools for %s: %s", triple, strings.Join(missing, "; "))
		}
		return tc, nil
	}
	return nil, fmt.Errorf("cpurt: unknown target triple %q (known: %s)", triple, strings.Join(Triples(), ", "))
}

// Foreign reports whether the toolchain's programs run in an emulator.
func (tc *Toolchain) Foreign() bool { return len(tc.Emulator) > 0 }

// BuildShared compiles the LLVM IR file llPath into the shared library
// soPath for the toolchain's target: opt -O3 and llc -O3
// -relocation-model=pic with -mtriple, then the target's gcc -shared (with
// Link) -lm -lpthread. Errors carry the failing tool's output. With
// Objects set, the object of IR compiled before with the same settings is
// reused. The object is recorded or replayed as $ATTNC_RECORD_OBJECTS and
// $ATTNC_REPLAY_OBJECTS say (replay.go); a replayed one bypasses Objects.
func (tc *Toolchain) BuildShared(llPath, soPath string) error {
	tmp, err := os.MkdirTemp("", "attnc-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	obj := filepath.Join(tmp, "k.o")
	switch {
	case replayDir() != "":
		err = produceObject(tc.mtriple(), tc.MCPU, llPath, obj)
	case Objects != nil:
		// An object another process compiled (a shared run cache) is
		// recorded here too.
		if obj, err = Objects.compile(tc, llPath); err == nil {
			err = recordObject(tc.mtriple(), tc.MCPU, llPath, obj)
		}
	default:
		err = tc.compileObject(llPath, obj)
	}
	if err != nil {
		return err
	}
	return runSteps(llPath, [][]string{append(append([]string{tc.CC, "-shared", "-o", soPath, obj}, tc.Link...), "-lm", "-lpthread")})
}

// mtriple is the -mtriple flag of the toolchain's opt and llc.
func (tc *Toolchain) mtriple() string { return "-mtriple=" + tc.Triple }

// compileObject runs opt -O3 and llc -O3 on llPath into the object file
// obj, for the toolchain's triple and MCPU (produceObject: recorded or
// replayed as the environment says).
func (tc *Toolchain) compileObject(llPath, obj string) error {
	return produceObject(tc.mtriple(), tc.MCPU, llPath, obj)
}

// objectSteps are the opt and llc commands that compile llPath into obj
// (through obj+".bc"), with the tools' paths.
func (tc *Toolchain) objectSteps(llPath, obj string) ([][]string, error) {
	return resolveTools(objectArgs(tc.mtriple(), tc.MCPU, llPath, obj))
}

// Objects, when set, is the cache Toolchain.BuildShared keeps its objects
// in: a test package that builds the same IR in several tests (the same
// example in two suites, a library linked once plainly and once with an
// allocation shim) runs opt and llc on it once; with RunObjectCache, so do
// the test packages of one `go test` run (conformance and cli build the
// same examples). nil, the default, compiles every time.
var Objects *ObjectCache

// ObjectCache holds compiled objects, in a directory, by the SHA-256 of
// the IR's text and of the commands that compile it: the opt and llc
// command lines (triple, -mcpu flags and all, the file names left out)
// and the tools' --version output.
type ObjectCache struct {
	dir    string
	shared bool // another process may use dir at the same time (RunObjectCache)
	mu     sync.Mutex
	objs   map[string]*cachedObject
	builds int // BuildShared calls that asked for an object
	hits   int // of them, objects found compiled on disk (by another process)
}

// cachedObject is one object, compiled once: waiters for the same key
// share the compile and its error.
type cachedObject struct {
	once sync.Once
	path string
	err  error
}

// NewObjectCache makes an empty cache in a new temporary directory, for
// this process only.
func NewObjectCache() (*ObjectCache, error) {
	dir, err := os.MkdirTemp("", "attnc-objects-")
	if err != nil {
		return nil, err
	}
	return &ObjectCache{dir: dir, objs: map[string]*cachedObject{}}, nil
}

// Stats are the builds that asked the cache for an object and the
// distinct objects they used so far (compiled by this process, or found
// compiled by another one sharing the directory).
func (c *ObjectCache) Stats() (builds, objects int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.builds, len(c.objs)
}

// Found is how many of the distinct objects this process used were
// compiled by another process sharing the cache's directory.
func (c *ObjectCache) Found() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}

// Remove deletes the cache's directory; a run-shared cache
// (RunObjectCache), which other test processes of the run may still use,
// is left for the next run to remove.
func (c *ObjectCache) Remove() error {
	if c.shared {
		return nil
	}
	return os.RemoveAll(c.dir)
}

// objectKey is the cache key of llPath's object for tc: the SHA-256 of
// the IR and of the compile commands with the files named by their role,
// and of each tool's --version output.
func (tc *Toolchain) objectKey(src []byte) (string, error) {
	steps, err := tc.objectSteps("IN.ll", "OUT.o")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00", len(src))
	h.Write(src)
	for _, s := range steps {
		v, err := toolVersion(s[0])
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "\x00%s\x00%s", strings.Join(s, "\x00"), v)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// compile is the path of llPath's object for tc, compiled on first use.
func (c *ObjectCache) compile(tc *Toolchain, llPath string) (string, error) {
	src, err := os.ReadFile(llPath)
	if err != nil {
		return "", err
	}
	key, err := tc.objectKey(src)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	c.builds++
	o, ok := c.objs[key]
	if !ok {
		o = &cachedObject{path: filepath.Join(c.dir, key+".o")}
		c.objs[key] = o
	}
	c.mu.Unlock()
	o.once.Do(func() {
		if !c.shared {
			o.err = tc.compileObject(llPath, o.path)
			return
		}
		// Another test process of the run may have compiled it, or be
		// compiling it now: compile under a name of this process's own
		// and rename it into place, so that a reader never sees half an
		// object (two processes that both compile it write the same
		// bytes; the second rename replaces the first's file).
		if st, err := os.Stat(o.path); err == nil && st.Mode().IsRegular() {
			c.mu.Lock()
			c.hits++
			c.mu.Unlock()
			return
		}
		f, err := os.CreateTemp(c.dir, key[:16]+"-*.tmp")
		if err != nil {
			o.err = err
			return
		}
		tmp := f.Name()
		f.Close()
		defer os.Remove(tmp)
		if o.err = tc.compileObject(llPath, tmp); o.err == nil {
			o.err = os.Rename(tmp, o.path)
		}
	})
	return o.path, o.err
}

// runSteps runs each command in turn, stopping at the first failure.
func runSteps(what string, steps [][]string) error {
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		var out bytes.Buffer
		cmd.Stderr = &out
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("cpurt: %s failed on %s: %v\n%s", filepath.Base(s[0]), what, err, strings.TrimSpace(out.String()))
		}
	}
	return nil
}
