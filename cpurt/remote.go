package cpurt

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

//go:embed remote/runner.c
var runnerSource []byte

// Remote is a shared library of another architecture loaded into a runner
// process (remote/runner.c, compiled with the target's C compiler) that runs
// in the target's emulator, such as qemu-aarch64. Go cannot dlopen such a
// library, so Remote forwards calls and memory to the runner over a pipe:
// memory comes from Alloc (guard-paged like Buffer, inside the runner) and
// moves with Write and Read; Call passes addresses of that memory. A kernel
// that faults kills the runner, and every later request reports how it
// ended. Remote is safe for concurrent use; requests run one at a time.
type Remote struct {
	path string

	mu     sync.Mutex
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *lockedBuffer
	err    error // set once the runner is gone
}

// lockedBuffer collects the runner's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 1<<16 {
		l.b.Write(p)
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(l.b.String())
}

var (
	runnerMu    sync.Mutex
	runnerPaths = map[string]string{} // triple -> compiled runner
)

// runner returns the runner program for the toolchain's target, compiled
// once per process into a directory named after its source and compiler.
func (tc *Toolchain) runner() (string, error) {
	runnerMu.Lock()
	defer runnerMu.Unlock()
	if p, ok := runnerPaths[tc.Triple]; ok {
		return p, nil
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", tc.Triple, tc.CC)
	h.Write(runnerSource)
	dir := filepath.Join(os.TempDir(), "attnc-runner-"+hex.EncodeToString(h.Sum(nil))[:16])
	exe := filepath.Join(dir, "runner")
	if st, err := os.Stat(exe); err != nil || st.Mode()&0o111 == 0 {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		tmp, err := os.MkdirTemp(dir, "build-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(tmp)
		src := filepath.Join(tmp, "runner.c")
		if err := os.WriteFile(src, runnerSource, 0o644); err != nil {
			return "", err
		}
		out := filepath.Join(tmp, "runner")
		if err := runSteps("runner.c", [][]string{{tc.CC, "-O2", "-Wall", "-o", out, src, "-ldl"}}); err != nil {
			return "", err
		}
		if err := os.Rename(out, exe); err != nil { // atomic: concurrent processes race harmlessly
			return "", err
		}
	}
	runnerPaths[tc.Triple] = exe
	return exe, nil
}

// OpenRemote starts a runner for the toolchain's target that loads soPath
// (built by tc.BuildShared).
func (tc *Toolchain) OpenRemote(soPath string) (*Remote, error) {
	exe, err := tc.runner()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(soPath)
	if err != nil {
		return nil, err
	}
	args := append(append([]string(nil), tc.Emulator...), exe, abs)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = filepath.Dir(abs) // where an emulator's core dump of a crashed kernel lands
	r := &Remote{path: soPath, cmd: cmd, stderr: &lockedBuffer{}}
	cmd.Stderr = r.stderr
	if r.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	r.out = bufio.NewReaderSize(stdout, 1<<16)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cpurt: starting %s: %v", strings.Join(args, " "), err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.status("dlopen " + soPath); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

// request sends op with its operands and reads the reply's status.
func (r *Remote) request(what string, msg []byte) error {
	if r.err != nil {
		return r.err
	}
	if _, err := r.in.Write(msg); err != nil {
		return r.died(what, err)
	}
	return r.status(what)
}

// status reads a reply's status byte (and message, on error).
func (r *Remote) status(what string) error {
	var s [1]byte
	if _, err := io.ReadFull(r.out, s[:]); err != nil {
		return r.died(what, err)
	}
	if s[0] == 0 {
		return nil
	}
	var n [4]byte
	if _, err := io.ReadFull(r.out, n[:]); err != nil {
		return r.died(what, err)
	}
	m := make([]byte, binary.LittleEndian.Uint32(n[:]))
	if _, err := io.ReadFull(r.out, m); err != nil {
		return r.died(what, err)
	}
	return fmt.Errorf("cpurt: %s: %s: %s", r.path, what, m)
}

// died records that the runner is gone (a kernel crashed it, or it failed)
// and returns the error every later request gets.
func (r *Remote) died(what string, err error) error {
	if r.err == nil {
		r.in.Close()
		werr := r.cmd.Wait()
		msg := fmt.Sprintf("cpurt: %s: the runner died during %s", r.path, what)
		if werr != nil {
			msg += ": " + werr.Error()
		} else {
			msg += ": " + err.Error()
		}
		if s := r.stderr.String(); s != "" {
			msg += "\n" + s
		}
		r.err = errors.New(msg)
	}
	return r.err
}

func (r *Remote) read(p []byte, what string) error {
	if _, err := io.ReadFull(r.out, p); err != nil {
		return r.died(what, err)
	}
	return nil
}

func u64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

// Alloc returns the address of n new bytes of the runner's memory, zeroed,
// ending exactly at a guard page.
func (r *Remote) Alloc(n int) (int64, error) {
	if n < 0 {
		return 0, fmt.Errorf("cpurt: remote alloc of %d bytes", n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	what := fmt.Sprintf("alloc(%d)", n)
	if err := r.request(what, u64([]byte{'A'}, uint64(n))); err != nil {
		return 0, err
	}
	var a [8]byte
	if err := r.read(a[:], what); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(a[:])), nil
}

// Write copies data to addr, which must lie inside one allocation.
func (r *Remote) Write(addr int64, data []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := u64(u64([]byte{'W'}, uint64(addr)), uint64(len(data)))
	return r.request(fmt.Sprintf("write(%#x, %d bytes)", addr, len(data)), append(msg, data...))
}

// Read copies len(dst) bytes from addr, inside one allocation.
func (r *Remote) Read(dst []byte, addr int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	what := fmt.Sprintf("read(%#x, %d bytes)", addr, len(dst))
	if err := r.request(what, u64(u64([]byte{'R'}, uint64(addr)), uint64(len(dst)))); err != nil {
		return err
	}
	return r.read(dst, what)
}

// Free releases an allocation.
func (r *Remote) Free(addr int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.request(fmt.Sprintf("free(%#x)", addr), u64([]byte{'F'}, uint64(addr)))
}

// call sends a call request of kind 0 (int32_t), 1 (void), 2 (const char *)
// or 3 (int32_t, args[0] the floating-point control register to call in).
func (r *Remote) call(kind byte, sym string, args []int64) error {
	if len(args) > MaxArgs {
		return fmt.Errorf("cpurt: %s: %d arguments, at most %d", sym, len(args), MaxArgs)
	}
	if len(sym) >= 1024 {
		return fmt.Errorf("cpurt: symbol name of %d bytes", len(sym))
	}
	msg := []byte{'C', kind}
	msg = binary.LittleEndian.AppendUint16(msg, uint16(len(sym)))
	msg = append(msg, sym...)
	msg = append(msg, byte(len(args)))
	for _, a := range args {
		msg = u64(msg, uint64(a))
	}
	return r.request("call "+sym, msg)
}

// Call calls the int32_t-returning function sym with args (addresses of
// runner memory, 32-bit integers as their values).
func (r *Remote) Call(sym string, args ...int64) (int32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.callInt(0, sym, args)
}

// CallFPEnv is Call with the runner thread's floating-point control
// register (aarch64: FPCR) set to env for the call and restored after;
// threads the library starts during the call inherit env. An error where
// the runner is not aarch64's.
func (r *Remote) CallFPEnv(sym string, env uint32, args ...int64) (int32, error) {
	if len(args) >= MaxArgs {
		return 0, fmt.Errorf("cpurt: %s: %d arguments, at most %d with an environment", sym, len(args), MaxArgs-1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.callInt(3, sym, append([]int64{int64(env)}, args...))
}

// callInt sends an int32_t call request of kind 0 or 3 and reads its
// result.
func (r *Remote) callInt(kind byte, sym string, args []int64) (int32, error) {
	if err := r.call(kind, sym, args); err != nil {
		return 0, err
	}
	var v [4]byte
	if err := r.read(v[:], "call "+sym); err != nil {
		return 0, err
	}
	return int32(binary.LittleEndian.Uint32(v[:])), nil
}

// CallVoid calls the void function sym.
func (r *Remote) CallVoid(sym string, args ...int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.call(1, sym, args)
}

// CallStr calls `const char *sym(int32_t code)` and returns the string; a
// failure or a NULL result is described in the returned text.
func (r *Remote) CallStr(sym string, code int32) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call(2, sym, []int64{int64(code)}); err != nil {
		return err.Error()
	}
	var h [5]byte
	if err := r.read(h[:], "call "+sym); err != nil {
		return err.Error()
	}
	s := make([]byte, binary.LittleEndian.Uint32(h[1:]))
	if err := r.read(s, "call "+sym); err != nil {
		return err.Error()
	}
	if h[0] == 0 {
		return fmt.Sprintf("<%s(%d) returned NULL>", sym, code)
	}
	return string(s)
}

// Close ends the runner. Closing twice is harmless; Close reports a runner
// that had died.
func (r *Remote) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		if errors.Is(r.err, errClosed) {
			return nil
		}
		return r.err
	}
	r.stop()
	return nil
}

var errClosed = errors.New("cpurt: remote library is closed")

// stop asks the runner to quit and waits for it.
func (r *Remote) stop() {
	r.in.Write([]byte{'Q'}) //nolint:errcheck // it may be gone already
	r.in.Close()
	r.cmd.Wait() //nolint:errcheck // a quit runner exits 0; nothing to report otherwise
	r.err = fmt.Errorf("%w: %s", errClosed, r.path)
}
