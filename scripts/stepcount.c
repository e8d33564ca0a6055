/* stepcount.c: the instructions one decode call of `attnc bench`'s built-in
   shape runs, counted exactly by single-stepping it under ptrace, at any CPU
   level (valgrind 3.19 has no AVX-512, and virtual machines often have no
   hardware counters: perf stat says <not supported>).

   The shape is the bench's decode: 32/8 heads, head dim 128, page 16, HND
   layout, an f16 or bf16 cache, or an 8-bit one with f16 queries and
   per-tensor scales (kv_dtype e4m3, e5m2 or i8: its entry also takes
   k_scale and v_scale, passed as 1/16; mode e writes fp8 codes of
   magnitude 2^-3..2^1 in either format, no NaN; mode i any byte) (a
   variant with `kernels decode`, built with attnc build --shared). One
   thread; pages in a scattered order.

     gcc -O1 -o stepcount scripts/stepcount.c -ldl
     ./stepcount out/bench_f16.so bench_f16 512 1        # f16 values
     ./stepcount out/bench_bf16.so bench_bf16 512 1 b    # bf16 values
     ./stepcount out/bench_e4m3.so bench_e4m3 512 1 e    # f16 queries, e4m3 (or e5m2) cache
     ./stepcount out/bench_i8.so bench_i8 512 1 i        # f16 queries, i8 cache
     HIST=ips.txt ./stepcount ...   # also every stepped address (and the
                                    # library's mappings) for a histogram

   Per (position, kv head) row without the per-item costs: the difference of
   two kv lengths' counts over the difference of their rows (8 kv heads per
   position). ATTNC_CPU_LEVEL forces a level as for any entry. About 30 s per
   million instructions. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <sys/user.h>
#include <unistd.h>
enum { QO = 32, KV = 8, D = 128, PS = 16 };
typedef int32_t (*dec_fn)(void *, void *, void *, int32_t, int32_t *, int32_t *, int32_t *, int32_t, void *, float *);
typedef int32_t (*dec8_fn)(void *, void *, void *, float *, float *, int32_t, int32_t *, int32_t *, int32_t *, int32_t, void *, float *);
typedef void (*thr_fn)(int32_t);
int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: stepcount LIB.so PREFIX KV_LEN BATCH [b|e|i]\n");
    return 2;
  }
  int kvlen = atoi(argv[3]), batch = atoi(argv[4]);
  char name[256];
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  snprintf(name, sizeof name, "%s_decode", argv[2]);
  dec_fn dec = (dec_fn)dlsym(h, name);
  snprintf(name, sizeof name, "%s_set_num_threads", argv[2]);
  thr_fn thr = (thr_fn)dlsym(h, name);
  if (!dec || !thr) { fprintf(stderr, "%s: no %s_decode or %s_set_num_threads\n", argv[1], argv[2], argv[2]); return 1; }
  thr(1);
  int pages = (kvlen + PS - 1) / PS, np = pages * batch;
  uint16_t *q = malloc((size_t)batch * QO * D * 2), *o = malloc((size_t)batch * QO * D * 2);
  uint16_t *k = malloc((size_t)np * KV * PS * D * 2), *v = malloc((size_t)np * KV * PS * D * 2);
  srand(1);
  for (size_t i = 0; i < (size_t)batch * QO * D; i++) q[i] = 0x3c00 ^ (rand() & 0x83ff); /* f16/bf16-ish small values */
  for (size_t i = 0; i < (size_t)np * KV * PS * D; i++) { k[i] = 0x3800 ^ (rand() & 0x83ff); v[i] = 0x3800 ^ (rand() & 0x83ff); }
  if (argc > 5 && argv[5][0] == 'b') { /* bf16: small values */
    for (size_t i = 0; i < (size_t)batch * QO * D; i++) q[i] = 0x3f00 ^ (rand() & 0x807f);
    for (size_t i = 0; i < (size_t)np * KV * PS * D; i++) { k[i] = 0x3e00 ^ (rand() & 0x807f); v[i] = 0x3e00 ^ (rand() & 0x807f); }
  }
  char mode = argc > 5 ? argv[5][0] : 0;
  int codes = mode == 'e' || mode == 'i';
  if (codes) { /* one byte per element: e4m3 codes of magnitude 2^-3..2^1 (no NaN), or i8 values */
    uint8_t *kb = (uint8_t *)k, *vb = (uint8_t *)v;
    for (size_t i = 0; i < (size_t)np * KV * PS * D; i++) {
      if (mode == 'e') { kb[i] = 0x20 + (rand() & 0x1f) + (rand() & 0x80); vb[i] = 0x20 + (rand() & 0x1f) + (rand() & 0x80); }
      else { kb[i] = rand() & 0xff; vb[i] = rand() & 0xff; }
    }
  }
  float scale = 1.0f / 16;
  dec8_fn dec8 = (dec8_fn)(void *)dec;
#define CALL() (codes ? dec8(q, k, v, &scale, &scale, np, indptr, ind, last, batch, o, lse) : dec(q, k, v, np, indptr, ind, last, batch, o, lse))
  int32_t *indptr = malloc((batch + 1) * 4), *ind = malloc(np * 4), *last = malloc(batch * 4);
  for (int b = 0; b <= batch; b++) indptr[b] = b * pages;
  for (int i = 0; i < np; i++) ind[i] = (i * 7919) % np;
  for (int b = 0; b < batch; b++) last[b] = kvlen - (pages - 1) * PS;
  float *lse = malloc(batch * QO * 4);
  int32_t st0 = CALL(); /* warm: lazy binding, level */
  if (st0 != 0) { fprintf(stderr, "%s_decode: status %d\n", argv[2], st0); return 1; }
  pid_t pid = fork();
  if (pid == 0) {
    ptrace(PTRACE_TRACEME, 0, 0, 0);
    raise(SIGSTOP);
    int32_t st = CALL();
    raise(SIGSTOP);
    _exit(st);
  }
  int status; long n = 0;
  FILE *hist = getenv("HIST") ? fopen(getenv("HIST"), "w") : NULL;
  if (hist) {
    char mp[64], line[512];
    const char *lib = strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1 : argv[1];
    snprintf(mp, sizeof mp, "/proc/%d/maps", pid);
    FILE *m = fopen(mp, "r");
    while (fgets(line, sizeof line, m))
      if (strstr(line, lib)) fprintf(hist, "MAP %s", line);
    fclose(m);
  }
  waitpid(pid, &status, 0); /* first stop */
  ptrace(PTRACE_SINGLESTEP, pid, 0, 0);
  for (;;) {
    waitpid(pid, &status, 0);
    if (!WIFSTOPPED(status)) break;
    if (WSTOPSIG(status) == SIGSTOP) break;
    n++;
    if (hist) { struct user_regs_struct r; ptrace(PTRACE_GETREGS, pid, 0, &r); fprintf(hist, "%llx\n", r.rip); }
    ptrace(PTRACE_SINGLESTEP, pid, 0, 0);
  }
  printf("%ld instructions, %.1f per (position, kv head) row\n", n, (double)n / ((double)kvlen * batch * KV));
  if (hist) fclose(hist);
  kill(pid, SIGKILL);
  return 0;
}
