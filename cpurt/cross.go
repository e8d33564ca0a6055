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
		for _, t := range []string{"opt", "llc"} {
			if _, err := findLLVM(t); err != nil {
				missing = append(missing, err.Error())
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
// reused.
func (tc *Toolchain) BuildShared(llPath, soPath string) error {
	tmp, err := os.MkdirTemp("", "attnc-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	obj := filepath.Join(tmp, "k.o")
	if Objects != nil {
		obj, err = Objects.compile(tc, llPath)
	} else {
		err = tc.compileObject(llPath, obj)
	}
	if err != nil {
		return err
	}
	return runSteps(llPath, [][]string{append(append([]string{tc.CC, "-shared", "-o", soPath, obj}, tc.Link...), "-lm", "-lpthread")})
}

// compileObject runs opt -O3 and llc -O3 on llPath into the object file
// obj, for the toolchain's triple and MCPU.
func (tc *Toolchain) compileObject(llPath, obj string) error {
	opt, err := findLLVM("opt")
	if err != nil {
		return err
	}
	llc, err := findLLVM("llc")
	if err != nil {
		return err
	}
	bc := obj + ".bc"
	defer os.Remove(bc)
	mtriple := "-mtriple=" + tc.Triple
	return runSteps(llPath, [][]string{
		append(append([]string{opt, "-O3", mtriple}, tc.MCPU...), llPath, "-o", bc),
		append(append([]string{llc, "-O3", mtriple}, tc.MCPU...), "-relocation-model=pic", "-filetype=obj", bc, "-o", obj),
	})
}

// Objects, when set, is the cache Toolchain.BuildShared keeps its objects
// in: a test package that builds the same IR in several tests (the same
// example in two suites, a library linked once plainly and once with an
// allocation shim) runs opt and llc on it once. nil, the default,
// compiles every time.
var Objects *ObjectCache

// ObjectCache holds compiled objects by the SHA-256 of the IR's text, the
// triple and the -mcpu flags, in a directory of its own.
type ObjectCache struct {
	dir    string
	mu     sync.Mutex
	objs   map[string]*cachedObject
	builds int // BuildShared calls that asked for an object
}

// cachedObject is one object, compiled once: waiters for the same key
// share the compile and its error.
type cachedObject struct {
	once sync.Once
	path string
	err  error
}

// NewObjectCache makes an empty cache in a new temporary directory.
func NewObjectCache() (*ObjectCache, error) {
	dir, err := os.MkdirTemp("", "attnc-objects-")
	if err != nil {
		return nil, err
	}
	return &ObjectCache{dir: dir, objs: map[string]*cachedObject{}}, nil
}

// Stats are the builds that asked the cache for an object and the
// distinct objects compiled for them so far.
func (c *ObjectCache) Stats() (builds, objects int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.builds, len(c.objs)
}

// Remove deletes the cache's directory.
func (c *ObjectCache) Remove() error { return os.RemoveAll(c.dir) }

// compile is the path of llPath's object for tc, compiled on first use.
func (c *ObjectCache) compile(tc *Toolchain, llPath string) (string, error) {
	src, err := os.ReadFile(llPath)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(src)
	fmt.Fprintf(h, "\x00%s\x00%s", tc.Triple, strings.Join(tc.MCPU, "\x00"))
	key := hex.EncodeToString(h.Sum(nil))
	c.mu.Lock()
	c.builds++
	o, ok := c.objs[key]
	if !ok {
		o = &cachedObject{path: filepath.Join(c.dir, key+".o")}
		c.objs[key] = o
	}
	c.mu.Unlock()
	o.once.Do(func() { o.err = tc.compileObject(llPath, o.path) })
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
