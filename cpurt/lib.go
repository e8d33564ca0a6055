package cpurt

/*
#cgo LDFLAGS: -ldl -lpthread
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

typedef int32_t (*fn24)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
	int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
	int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
	int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);

static int32_t call24(void *f, const int64_t *a) {
	return ((fn24)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
		a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15],
		a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23]);
}

static void callvoid24(void *f, const int64_t *a) {
	typedef void (*vfn24)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
		int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
		int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
		int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
	((vfn24)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
		a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15],
		a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23]);
}

// onstack runs call24 on a new thread whose stack is `stack` bytes.
typedef struct { void *f; const int64_t *a; int32_t r; } onstack_t;

static void *onstack_main(void *p) {
	onstack_t *o = (onstack_t *)p;
	o->r = call24(o->f, o->a);
	return NULL;
}

static int callonstack(void *f, const int64_t *a, size_t stack, int32_t *r) {
	pthread_attr_t at;
	pthread_t th;
	onstack_t o = {f, a, 0};
	int e = pthread_attr_init(&at);
	if (e != 0) return e;
	e = pthread_attr_setstacksize(&at, stack);
	if (e == 0) e = pthread_create(&th, &at, onstack_main, &o);
	pthread_attr_destroy(&at);
	if (e != 0) return e;
	e = pthread_join(th, NULL);
	*r = o.r;
	return e;
}

// callfpenv runs call24 with the thread's floating-point control set to
// env (x86-64: MXCSR) and restores it after: threads the call starts
// inherit env. Elsewhere it reports -1 in *ok and does not call.
#if defined(__x86_64__)
#include <xmmintrin.h>
static int32_t callfpenv(void *f, const int64_t *a, unsigned env, int *ok) {
	unsigned save = _mm_getcsr();
	_mm_setcsr(env);
	int32_t r = call24(f, a);
	_mm_setcsr(save);
	*ok = 1;
	return r;
}
#else
static int32_t callfpenv(void *f, const int64_t *a, unsigned env, int *ok) {
	(void)f; (void)a; (void)env;
	*ok = -1;
	return 0;
}
#endif
#include <time.h>
static int32_t calltimed(void *f, const int64_t *a, int64_t *ns) {
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int32_t r = call24(f, a);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	*ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
	return r;
}
static const char *callstr(void *f, int32_t code) {
	return ((const char *(*)(int32_t))f)(code);
}

static const char *lasterr(void) { return dlerror(); }
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// MaxArgs is the most arguments Call passes.
const MaxArgs = 24

// Lib is a shared library opened with dlopen.
type Lib struct {
	path   string
	mu     sync.Mutex
	handle unsafe.Pointer
	syms   map[string]unsafe.Pointer
}

// Open loads the shared library soPath (RTLD_NOW | RTLD_LOCAL). dlopen
// returns the already loaded copy when the same path is open, so rebuild into
// a fresh path rather than over an open library.
func Open(soPath string) (*Lib, error) {
	cs := C.CString(soPath)
	defer C.free(unsafe.Pointer(cs))
	h := C.dlopen(cs, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		return nil, fmt.Errorf("cpurt: dlopen %s: %s", soPath, C.GoString(C.lasterr()))
	}
	return &Lib{path: soPath, handle: h, syms: map[string]unsafe.Pointer{}}, nil
}

// Sym returns the address of the symbol name.
func (l *Lib) Sym(name string) (unsafe.Pointer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handle == nil {
		return nil, fmt.Errorf("cpurt: %s: library is closed", l.path)
	}
	if p, ok := l.syms[name]; ok {
		return p, nil
	}
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	C.lasterr() // clear
	p := C.dlsym(l.handle, cs)
	if p == nil {
		return nil, fmt.Errorf("cpurt: %s: symbol %s: %s", l.path, name, C.GoString(C.lasterr()))
	}
	l.syms[name] = p
	return p, nil
}

// fnArgs is sym's address and args packed for call24 and its kin.
func (l *Lib) fnArgs(sym string, args []int64) (unsafe.Pointer, *[MaxArgs]C.int64_t, error) {
	f, err := l.Sym(sym)
	if err != nil {
		return nil, nil, err
	}
	a, err := packArgs(sym, args)
	if err != nil {
		return nil, nil, err
	}
	return f, a, nil
}

func packArgs(sym string, args []int64) (*[MaxArgs]C.int64_t, error) {
	if len(args) > MaxArgs {
		return nil, fmt.Errorf("cpurt: %s: %d arguments, at most %d", sym, len(args), MaxArgs)
	}
	var a [MaxArgs]C.int64_t
	for i, v := range args {
		a[i] = C.int64_t(v)
	}
	return &a, nil
}

// Call calls the int32_t-returning function sym with args (pointers as
// addresses, 32-bit integers as their values); unused arguments are 0.
func (l *Lib) Call(sym string, args ...int64) (int32, error) {
	f, a, err := l.fnArgs(sym, args)
	if err != nil {
		return 0, err
	}
	return int32(C.call24(f, &a[0])), nil
}

// CallTimed is Call, also returning the call's wall time in seconds,
// read with CLOCK_MONOTONIC in C just before and after it: the time
// excludes the Go runtime's entry into and exit from C.
func (l *Lib) CallTimed(sym string, args ...int64) (int32, float64, error) {
	f, a, err := l.fnArgs(sym, args)
	if err != nil {
		return 0, 0, err
	}
	var ns C.int64_t
	r := C.calltimed(f, &a[0], &ns)
	return int32(r), float64(ns) * 1e-9, nil
}

// CallOnStack is Call on a new thread whose stack is stack bytes (see
// pthread_attr_setstacksize: at least PTHREAD_STACK_MIN, 16 KiB on Linux),
// so that a kernel needing more stack than it claims faults.
func (l *Lib) CallOnStack(sym string, stack int, args ...int64) (int32, error) {
	f, a, err := l.fnArgs(sym, args)
	if err != nil {
		return 0, err
	}
	var r C.int32_t
	if e := C.callonstack(f, &a[0], C.size_t(stack), &r); e != 0 {
		return 0, fmt.Errorf("cpurt: %s on a %d-byte stack: pthread error %d", sym, stack, int(e))
	}
	return int32(r), nil
}

// MXCSRFlushDenormals is x86-64's MXCSR at its default (every exception
// masked, round to nearest) with DAZ (denormal operands read as zero, bit
// 6) and FTZ (denormal results flushed to zero, bit 15) set: what PyTorch's
// set_flush_denormal(True) and a library linked with -ffast-math's
// crtfastmath.o leave in a thread.
const MXCSRFlushDenormals = 0x1f80 | 1<<6 | 1<<15

// CallFPEnv is Call with the calling thread's floating-point control
// register (x86-64: MXCSR) set to env for the call and restored after;
// threads the library starts during the call (its thread pool's workers,
// on the first call that needs them) inherit env. An error on other
// architectures.
func (l *Lib) CallFPEnv(sym string, env uint32, args ...int64) (int32, error) {
	f, a, err := l.fnArgs(sym, args)
	if err != nil {
		return 0, err
	}
	var ok C.int
	r := C.callfpenv(f, &a[0], C.unsigned(env), &ok)
	if ok != 1 {
		return 0, fmt.Errorf("cpurt: %s: setting the floating-point environment is implemented on x86-64 only", sym)
	}
	return int32(r), nil
}

// CallVoid calls the void function sym (such as <prefix>_set_num_threads).
func (l *Lib) CallVoid(sym string, args ...int64) error {
	f, a, err := l.fnArgs(sym, args)
	if err != nil {
		return err
	}
	C.callvoid24(f, &a[0])
	return nil
}

// CallStr calls `const char *sym(int32_t code)` (such as <prefix>_strerror)
// and returns the string; a missing symbol or a NULL result is described in
// the returned text.
func (l *Lib) CallStr(sym string, code int32) string {
	f, err := l.Sym(sym)
	if err != nil {
		return err.Error()
	}
	s := C.callstr(f, C.int32_t(code))
	if s == nil {
		return fmt.Sprintf("<%s(%d) returned NULL>", sym, code)
	}
	return C.GoString(s)
}

// Close unloads the library. Closing twice is harmless.
func (l *Lib) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handle == nil {
		return nil
	}
	h := l.handle
	l.handle, l.syms = nil, nil
	if C.dlclose(h) != 0 {
		return fmt.Errorf("cpurt: dlclose %s: %s", l.path, C.GoString(C.lasterr()))
	}
	return nil
}
