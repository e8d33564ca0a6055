package cpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/lltest"
)

// poolCheck is C that checks fill (parallelModule) against the values
// TestParallelFor derives: out[i] = -1 for i % 10 == 0, else
// 0.5·i + 0.5·(i + 3) + 15 = i + 16.5 (scale 0.5); iout[i] = 3i + 11 from
// i = 5, else untouched.
const poolCheck = `
static int fill_ok(int32_t (*fill)(float*, int32_t, float, int32_t*), int n) {
	float *out = malloc(sizeof(float) * n); int32_t *iout = malloc(sizeof(int32_t) * n);
	for (int i = 0; i < n; i++) { out[i] = NAN; iout[i] = -7; }
	int ok = fill(out, n, 0.5f, iout) == 0;
	for (int i = 0; i < n; i++) {
		float want = i % 10 == 0 ? -1.0f : (float)i * 0.5f + (float)(i + 3) * 0.5f + 15.0f;
		ok &= out[i] == want && iout[i] == (i >= 5 ? 3 * i + 11 : -7);
	}
	free(out); free(iout);
	return ok;
}
`

// TestPool runs parallel_for's thread pool: many calls reuse its workers
// (pthread_create is counted: one worker per thread beyond the caller, not
// one per call; a larger thread count adds the missing ones), two
// application threads calling at once are both right (the one that finds
// the pool busy starts its own threads), a forked
// child makes its own pool, and a library unloaded with dlclose stops its
// workers first (without pool_fini in @llvm.global_dtors they would spin in
// unmapped code and crash the process).
func TestPool(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	driver := poolCheck + `
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
int32_t fill(float*, int32_t, float, int32_t*);
void par_set_num_threads(int32_t);
static int creates;
int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*f)(void *), void *arg) {
	static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	if (!real) real = dlsym(RTLD_NEXT, "pthread_create");
	__atomic_add_fetch(&creates, 1, __ATOMIC_RELAXED);
	return real(t, a, f, arg);
}
static void *caller(void *arg) {
	int ok = 1;
	for (int r = 0; r < 100; r++) ok &= fill_ok(fill, 997);
	return (void *)(long)ok;
}
int main(void) {
	int ok = 1;
	par_set_num_threads(2);
	for (int r = 0; r < 50; r++) ok &= fill_ok(fill, 31 + r);
	printf("two %d\ncreates_two %d\n", ok, creates);
	par_set_num_threads(3);
	for (int r = 0; r < 200; r++) ok &= fill_ok(fill, 1000 + r);
	printf("reused %d\ncreates %d\n", ok, creates);
	par_set_num_threads(2);
	for (int r = 0; r < 50; r++) ok &= fill_ok(fill, 31);
	printf("fewer %d\ncreates_after %d\n", ok, creates);
	pthread_t a, b; void *ra, *rb;
	int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *) = dlsym(RTLD_NEXT, "pthread_create");
	create(&a, NULL, caller, NULL); create(&b, NULL, caller, NULL);
	pthread_join(a, &ra); pthread_join(b, &rb);
	printf("concurrent %d\n", (int)(long)ra & (int)(long)rb);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) _exit(fill_ok(fill, 5000) && fill_ok(fill, 77) ? 0 : 1);
	int status = -1;
	waitpid(pid, &status, 0);
	printf("child %d\nparent %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 100, fill_ok(fill, 4321));
	return 0;
}
`
	bl := build(t, tc, parallelModule(), driver)
	if !strings.Contains(bl.LL, "@llvm.global_dtors = appending global") || !strings.Contains(bl.LL, "@par.pool_fini") {
		t.Errorf("the module does not register pool_fini in @llvm.global_dtors")
	}
	r := lltest.Results(t, bl.Run(t))
	lltest.CheckInt(t, r, "two", 1)
	lltest.CheckInt(t, r, "creates_two", 1) // 2 threads: the caller and 1 worker, made once
	lltest.CheckInt(t, r, "reused", 1)
	lltest.CheckInt(t, r, "creates", 2) // 3 threads: one more worker
	lltest.CheckInt(t, r, "fewer", 1)
	lltest.CheckInt(t, r, "creates_after", 2)
	lltest.CheckInt(t, r, "concurrent", 1)
	lltest.CheckInt(t, r, "child", 0)
	lltest.CheckInt(t, r, "parent", 1)

	// dlclose: the same module as a shared library, loaded, called on 2
	// threads and unloaded, five times over; the workers spin right after
	// each call, when dlclose unmaps their code.
	dir := bl.Dir
	lltest.RunCmd(t, dir, tc.GCC, "-shared", "-o", "k.so", "k.o", "-lm", "-lpthread")
	src := "#include <stdio.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <math.h>\n#include <dlfcn.h>\n" + poolCheck + `
int main(int argc, char **argv) {
	int ok = 1;
	for (int r = 0; r < 5; r++) {
		void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
		if (!h) { printf("dlopen %s\n", dlerror()); return 1; }
		int32_t (*fill)(float*, int32_t, float, int32_t*) = (int32_t (*)(float*, int32_t, float, int32_t*))dlsym(h, "fill");
		void (*threads)(int32_t) = (void (*)(int32_t))dlsym(h, "par_set_num_threads");
		threads(2);
		for (int c = 0; c < 20; c++) ok &= fill_ok(fill, 500);
		ok &= dlclose(h) == 0;
		for (volatile int spin = 0; spin < 1000000; spin++) {}
	}
	printf("unloaded %d\n", ok);
	return 0;
}
`
	if err := os.WriteFile(filepath.Join(dir, "dl.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	lltest.RunCmd(t, dir, tc.GCC, "-O1", "-o", "dl", "dl.c", "-lm", "-lpthread", "-ldl")
	out, _ := lltest.RunCmd(t, dir, filepath.Join(dir, "dl"), filepath.Join(dir, "k.so"))
	r = lltest.Results(t, out)
	lltest.CheckInt(t, r, "unloaded", 1)
	if t.Failed() {
		t.Log(fmt.Sprint(r))
	}
}

// TestPoolCallerSkipsStalledWorker stalls the pool's worker before it
// can take a place in a call (the driver's pthread_mutex_lock holds a
// worker thread back while told to): the caller runs every item itself and
// returns, closing the place the worker did not take, instead of waiting
// for the worker (a pool that waits for every worker it published to hangs
// here until the alarm). Released, the worker finds the place closed and
// the calls after are right. Spinning threads yield the CPU (sched_yield is
// counted) when the machine has more than one.
func TestPoolCallerSkipsStalledWorker(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	driver := poolCheck + `
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>
int32_t fill(float*, int32_t, float, int32_t*);
void par_set_num_threads(int32_t);
static __thread int is_worker;
static volatile int stall, stalled, yields;
typedef struct { void *(*f)(void *); void *arg; } start_t;
static void *start(void *p) {
	start_t s = *(start_t *)p;
	free(p);
	is_worker = 1;
	return s.f(s.arg);
}
int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*f)(void *), void *arg) {
	static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	if (!real) real = dlsym(RTLD_NEXT, "pthread_create");
	start_t *s = malloc(sizeof *s);
	s->f = f; s->arg = arg;
	return real(t, a, start, s);
}
int pthread_mutex_lock(pthread_mutex_t *m) {
	static int (*real)(pthread_mutex_t *);
	if (!real) real = dlsym(RTLD_NEXT, "pthread_mutex_lock");
	if (is_worker && __atomic_load_n(&stall, __ATOMIC_ACQUIRE)) {
		__atomic_add_fetch(&stalled, 1, __ATOMIC_RELEASE);
		while (__atomic_load_n(&stall, __ATOMIC_ACQUIRE)) usleep(100);
	}
	return real(m);
}
int sched_yield(void) {
	static int (*real)(void);
	if (!real) real = dlsym(RTLD_NEXT, "sched_yield");
	__atomic_add_fetch(&yields, 1, __ATOMIC_RELAXED);
	return real();
}
static void hung(int sig) {
	(void)sig;
	static const char msg[] = "hung: the call waits for a worker that has not started\n";
	write(1, msg, sizeof msg - 1);
	_exit(3);
}
int main(void) {
	par_set_num_threads(2);
	int ok = fill_ok(fill, 997);
	__atomic_store_n(&stall, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 50000 && !__atomic_load_n(&stalled, __ATOMIC_ACQUIRE); i++) usleep(100);
	printf("stalled %d\n", __atomic_load_n(&stalled, __ATOMIC_ACQUIRE) > 0);
	fflush(stdout);
	signal(SIGALRM, hung);
	alarm(20);
	int alone = fill_ok(fill, 997);
	alarm(0);
	printf("alone %d\n", alone);
	__atomic_store_n(&stall, 0, __ATOMIC_RELEASE);
	for (int r = 0; r < 50; r++) ok &= fill_ok(fill, 31 + r);
	printf("after %d\n", ok);
	// The worker spins after the last call (16384 pauses): it yields.
	for (int i = 0; i < 50000 && !__atomic_load_n(&yields, __ATOMIC_RELAXED); i++) usleep(100);
	printf("yields %d\n", sysconf(_SC_NPROCESSORS_ONLN) < 2 || yields > 0);
	return 0;
}
`
	bl := build(t, tc, parallelModule(), driver)
	r := lltest.Results(t, bl.Run(t))
	lltest.CheckInt(t, r, "stalled", 1)
	lltest.CheckInt(t, r, "alone", 1)
	lltest.CheckInt(t, r, "after", 1)
	lltest.CheckInt(t, r, "yields", 1)
}

// TestGrab runs the runtime's grab rule (@par.grab, made external for the
// driver) over the hand-worked table testdata/grabs.table.
func TestGrab(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	ll, err := emitLL(parallelModule(), Arches[0])
	if err != nil {
		t.Fatal(err)
	}
	const def = "define internal i32 @par.grab("
	if !strings.Contains(ll, def) {
		t.Fatalf("the runtime defines no %q", def)
	}
	ll = strings.Replace(ll, def, "define i32 @par.grab(", 1)
	cases := lltest.GrabCases(t, filepath.Join("testdata", "grabs.table"))
	var calls strings.Builder
	for i, c := range cases {
		fmt.Fprintf(&calls, "\tprintf(\"grab%d %%d\\n\", grab(%d, %d, %d, %d));\n", i, c.N, c.T, c.Run, c.Next)
	}
	driver := "int32_t grab(int32_t, int32_t, int32_t, int32_t) __asm__(\"par.grab\");\nint main(void) {\n" + calls.String() + "\treturn 0;\n}\n"
	r := lltest.Results(t, tc.Build(t, ll, driver).Run(t))
	for i, c := range cases {
		lltest.CheckInt(t, r, fmt.Sprintf("grab%d", i), int64(c.Want))
	}
}
