/* attnc remote runner: loads a generated kernel library (argv[1]) and
 * serves calls and memory requests on stdin/stdout, so that a process of
 * another architecture (an x86-64 Go test driving qemu-aarch64) can run
 * kernels it cannot dlopen itself. Package cpurt embeds this file, builds
 * it with the target's C compiler and speaks its protocol (cpurt.Remote).
 *
 * Protocol: little-endian; each request is one opcode byte and its
 * operands; each reply starts with a status byte, 0 ok or 1 error followed
 * by u32 length and a message.
 *   'A' u64 n                   -> u64 addr   map n bytes (guard pages both sides)
 *   'W' u64 addr u64 n bytes[n] ->            copy into an allocation
 *   'R' u64 addr u64 n          -> bytes[n]   copy out of an allocation
 *   'F' u64 addr                ->            unmap an allocation
 *   'C' u8 kind u16 len name[len] u8 nargs i64 args[nargs]
 *                               -> kind 0: i32 result; 1: nothing;
 *                                  2: u8 nonnull, u32 len, bytes (const char *)
 *   'Q'                         -> (exits 0)
 * The library is opened before the first request; the runner first writes
 * the status of dlopen.
 *
 * Calls go through a trampoline passing 24 int64 arguments. On AAPCS64
 * (Linux) and x86-64 SysV this is right for every function whose
 * parameters are pointers or 32-bit integers: an i32 parameter reads the low
 * half of its register, or of its 8-byte stack slot.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int64_t i64;
typedef int32_t (*fn24)(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64,
                        i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64);
typedef void (*vfn24)(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64,
                      i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64);
typedef const char *(*strfn)(int32_t);

enum { MAX_ARGS = 24 };

static void die(const char *what) {
  fprintf(stderr, "attnc runner: %s\n", what);
  exit(3);
}

static void readn(void *p, size_t n) {
  char *c = p;
  while (n > 0) {
    ssize_t r = read(0, c, n);
    if (r <= 0) die("stdin closed");
    c += r;
    n -= (size_t)r;
  }
}

static void writen(const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t r = write(1, c, n);
    if (r <= 0) die("stdout closed");
    c += r;
    n -= (size_t)r;
  }
}

static uint64_t read_u64(void) { uint64_t v; readn(&v, 8); return v; }

static void ok(void) { uint8_t s = 0; writen(&s, 1); }

static void fail(const char *msg) {
  uint8_t s = 1;
  uint32_t n = (uint32_t)strlen(msg);
  writen(&s, 1);
  writen(&n, 4);
  writen(msg, n);
}

/* An allocation: n usable bytes ending at a PROT_NONE page, after one. */
struct alloc { char *base; size_t total; uint64_t addr, n; };
static struct alloc *allocs;
static size_t nallocs, capallocs;
static size_t pagesize;

static struct alloc *find(uint64_t addr, uint64_t n) {
  for (size_t i = 0; i < nallocs; i++) {
    struct alloc *a = &allocs[i];
    if (addr >= a->addr && n <= a->n && addr - a->addr <= a->n - n) return a;
  }
  return NULL;
}

static void do_alloc(void) {
  uint64_t n = read_u64();
  if (n > ((uint64_t)1 << 40)) { fail("allocation too large"); return; }
  size_t data = (size_t)((n + pagesize - 1) / pagesize) * pagesize;
  size_t total = data + 2 * pagesize;
  char *base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) { fail("mmap failed"); return; }
  if (data > 0 && mprotect(base + pagesize, data, PROT_READ | PROT_WRITE) != 0) {
    munmap(base, total);
    fail("mprotect failed");
    return;
  }
  if (nallocs == capallocs) {
    capallocs = capallocs ? 2 * capallocs : 64;
    allocs = realloc(allocs, capallocs * sizeof *allocs);
    if (!allocs) die("out of memory");
  }
  uint64_t addr = (uint64_t)(uintptr_t)(base + pagesize + data - n);
  allocs[nallocs++] = (struct alloc){base, total, addr, n};
  ok();
  writen(&addr, 8);
}

static void do_write(void) {
  uint64_t addr = read_u64(), n = read_u64();
  struct alloc *a = find(addr, n);
  if (!a) {
    /* Drain the payload so that the stream stays in step. */
    char buf[4096];
    for (uint64_t left = n; left > 0;) {
      size_t k = left < sizeof buf ? (size_t)left : sizeof buf;
      readn(buf, k);
      left -= k;
    }
    fail("write outside any allocation");
    return;
  }
  readn((void *)(uintptr_t)addr, (size_t)n);
  ok();
}

static void do_read(void) {
  uint64_t addr = read_u64(), n = read_u64();
  if (!find(addr, n)) { fail("read outside any allocation"); return; }
  ok();
  writen((const void *)(uintptr_t)addr, (size_t)n);
}

static void do_free(void) {
  uint64_t addr = read_u64();
  for (size_t i = 0; i < nallocs; i++) {
    if (allocs[i].addr == addr) {
      munmap(allocs[i].base, allocs[i].total);
      allocs[i] = allocs[--nallocs];
      ok();
      return;
    }
  }
  fail("free of an unknown address");
}

static void do_call(void *lib) {
  uint8_t kind, nargs;
  uint16_t len;
  char name[1024];
  i64 a[MAX_ARGS] = {0};
  readn(&kind, 1);
  readn(&len, 2);
  if (len >= sizeof name) die("symbol name too long");
  readn(name, len);
  name[len] = 0;
  readn(&nargs, 1);
  if (nargs > MAX_ARGS) die("too many arguments");
  readn(a, (size_t)nargs * 8);
  dlerror();
  void *f = dlsym(lib, name);
  if (!f) {
    const char *e = dlerror();
    fail(e ? e : "symbol not found");
    return;
  }
  switch (kind) {
  case 0: {
    int32_t r = ((fn24)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                          a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23]);
    ok();
    writen(&r, 4);
    break;
  }
  case 1:
    ((vfn24)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
               a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23]);
    ok();
    break;
  case 3: {
    /* An int32_t function called with the thread's floating-point control
       register set to a[0] (aarch64: FPCR), its arguments a[1..], the
       register restored after. */
#if defined(__aarch64__)
    uint64_t save, env = (uint64_t)a[0];
    __asm__ volatile("mrs %0, fpcr" : "=r"(save));
    __asm__ volatile("msr fpcr, %0" : : "r"(env));
    int32_t r = ((fn24)f)(a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12],
                          a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23], 0);
    __asm__ volatile("msr fpcr, %0" : : "r"(save));
    ok();
    writen(&r, 4);
#else
    fail("a call in a chosen floating-point environment needs an aarch64 runner");
#endif
    break;
  }
  case 2: {
    const char *s = ((strfn)f)((int32_t)a[0]);
    uint8_t nonnull = s != NULL;
    uint32_t n = s ? (uint32_t)strlen(s) : 0;
    ok();
    writen(&nonnull, 1);
    writen(&n, 4);
    writen(s ? s : "", n);
    break;
  }
  default:
    fail("unknown call kind");
  }
}

int main(int argc, char **argv) {
  if (argc != 2) die("usage: runner LIBRARY.so");
  long ps = sysconf(_SC_PAGESIZE);
  pagesize = ps > 0 ? (size_t)ps : 4096;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    fail(e ? e : "dlopen failed");
    return 1;
  }
  ok();
  for (;;) {
    uint8_t op;
    ssize_t r = read(0, &op, 1);
    if (r == 0) return 0;
    if (r < 0) die("stdin error");
    switch (op) {
    case 'A': do_alloc(); break;
    case 'W': do_write(); break;
    case 'R': do_read(); break;
    case 'F': do_free(); break;
    case 'C': do_call(lib); break;
    case 'Q': return 0;
    default: die("unknown request");
    }
  }
}
