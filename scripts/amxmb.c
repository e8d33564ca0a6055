// amxmb.c: rt.amx_mm32's tile loop (targets/cpu/amx.go) in variants,
// timed on one core of a CPU with AMX-BF16 and AMX-TILE, at the shapes
// prefill calls it with (Q·Kᵀ: 128 x 64 x 128; split P·V: 128 x 128 x
// 192) and a long K. Prints ns per TDPBF16PS (and cycles at the GHz given
// as the first argument). `amxmb GHZ check` runs each variant once and
// compares its C with v0's instead: on the tiles where Linux grants them,
// else under internal/amxemu's emulator when linked with it
// (-DAMXEMU_CONSTRUCTOR), so it checks them on any x86-64 CPU.
//
//   gcc -O2 -mamx-tile -mamx-bf16 -o amxmb scripts/amxmb.c
//
// Emerald Rapids (2026-12-04, one core, two runs): v3 (products only)
// 7.3-8.0 ns per product; v0 14-17; v1 12.3-16.0 (3-15% below v0, so the
// routine issues products between its loads); v2 shows the four
// TILESTORED per block cost about half of Q·Kᵀ's time, and v7 (stores
// into one L1-resident 4 KiB block) 30% less than v0 there. 2x1 and 1x2
// blocks with alternating accumulators (stores overlapping the next
// block's products) ran 5-50% slower than v0: 1.5 loads per product.
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
typedef struct { uint8_t palette, start; uint8_t r0[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg_t;
static cfg_t cfg;
static void config(void) { _tile_loadconfig(&cfg); }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
// V0: rt.amx_mm32 before 2026-12-04: per block zero, steps x (4 loads, 4 TDP), 4 stores; config per call.
static void mm_v0(const char *a, long lda, const char *b, long ldb, char *c, long ldc, int steps, int mb, int nb, int cfgcall) {
  if (cfgcall) config();
  for (int j = 0; j < nb; j++)
    for (int i = 0; i < mb; i++) {
      const char *ar = a + (long)i * 32 * lda; const char *bc = b + j * 128; char *cb = c + (long)i * 32 * ldc + j * 128;
      _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
      for (int s = 0; s < steps; s++) {
        _tile_loadd(4, ar + s * 64, lda); _tile_loadd(5, ar + 16 * lda + s * 64, lda);
        _tile_loadd(6, bc + (long)s * 16 * ldb, ldb); _tile_loadd(7, bc + (long)s * 16 * ldb + 64, ldb);
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, cb, ldc); _tile_stored(1, cb + 64, ldc); _tile_stored(2, cb + 16 * ldc, ldc); _tile_stored(3, cb + 16 * ldc + 64, ldc);
    }
  if (cfgcall) _tile_release();
}
// V1: rt.amx_mm32 (targets/cpu/amx.go): loads interleaved with the products.
static void mm_v1(const char *a, long lda, const char *b, long ldb, char *c, long ldc, int steps, int mb, int nb, int cfgcall) {
  if (cfgcall) config();
  for (int j = 0; j < nb; j++)
    for (int i = 0; i < mb; i++) {
      const char *ar = a + (long)i * 32 * lda; const char *bc = b + j * 128; char *cb = c + (long)i * 32 * ldc + j * 128;
      _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
      for (int s = 0; s < steps; s++) {
        _tile_loadd(4, ar + s * 64, lda); _tile_loadd(6, bc + (long)s * 16 * ldb, ldb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, bc + (long)s * 16 * ldb + 64, ldb);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, ar + 16 * lda + s * 64, lda);
        _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, cb, ldc); _tile_stored(1, cb + 64, ldc); _tile_stored(2, cb + 16 * ldc, ldc); _tile_stored(3, cb + 16 * ldc + 64, ldc);
    }
  if (cfgcall) _tile_release();
}
// V2: V0 without the stores (what the stores cost).
static void mm_v2(const char *a, long lda, const char *b, long ldb, char *c, long ldc, int steps, int mb, int nb, int cfgcall) {
  if (cfgcall) config();
  for (int j = 0; j < nb; j++)
    for (int i = 0; i < mb; i++) {
      const char *ar = a + (long)i * 32 * lda; const char *bc = b + j * 128;
      _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
      for (int s = 0; s < steps; s++) {
        _tile_loadd(4, ar + s * 64, lda); _tile_loadd(5, ar + 16 * lda + s * 64, lda);
        _tile_loadd(6, bc + (long)s * 16 * ldb, ldb); _tile_loadd(7, bc + (long)s * 16 * ldb + 64, ldb);
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
      }
    }
  (void)c, (void)ldc;
  if (cfgcall) _tile_release();
}
// V3: products only, operands held in tiles (the unit's own rate).
static void mm_v3(const char *a, long lda, const char *b, long ldb, char *c, long ldc, int steps, int mb, int nb, int cfgcall) {
  if (cfgcall) config();
  _tile_loadd(4, a, lda); _tile_loadd(5, a + 16 * lda, lda); _tile_loadd(6, b, ldb); _tile_loadd(7, b + 64, ldb);
  for (int j = 0; j < nb; j++)
    for (int i = 0; i < mb; i++) {
      _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
      for (int s = 0; s < steps; s++) {
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
      }
    }
  (void)c, (void)ldc;
  if (cfgcall) _tile_release();
}
// V7: V1 (interleaved) storing every block into one 4 KiB scratch (L1).
static char scratch[4096] __attribute__((aligned(64)));
static void mm_v7(const char *a, long lda, const char *b, long ldb, char *c, long ldc, int steps, int mb, int nb, int cfgcall) {
  if (cfgcall) config();
  for (int j = 0; j < nb; j++)
    for (int i = 0; i < mb; i++) {
      const char *ar = a + (long)i * 32 * lda; const char *bc = b + j * 128; char *cb = scratch;
      _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
      for (int s = 0; s < steps; s++) {
        _tile_loadd(4, ar + s * 64, lda); _tile_loadd(6, bc + (long)s * 16 * ldb, ldb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, bc + (long)s * 16 * ldb + 64, ldb);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, ar + 16 * lda + s * 64, lda);
        _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, cb, 128); _tile_stored(1, cb + 64, 128); _tile_stored(2, cb + 2048, 128); _tile_stored(3, cb + 2048 + 64, 128);
    }
  (void)c, (void)ldc;
  if (cfgcall) _tile_release();
}
typedef void (*mm_t)(const char *, long, const char *, long, char *, long, int, int, int, int);
int main(int argc, char **argv) {
  int check = argc > 2 && strcmp(argv[2], "check") == 0;
  // check mode runs the tiles in hardware where Linux grants them, else
  // under the emulator linked in.
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) && !check) { perror("arch_prctl"); return 1; }
  memset(&cfg, 0, sizeof cfg); cfg.palette = 1;
  for (int t = 0; t < 8; t++) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
  double ghz = argc > 1 ? atof(argv[1]) : 0;
  struct { const char *name; int m, n, k; } shapes[] = {{"qk 128x64x128", 128, 64, 128}, {"pv 128x128x192", 128, 128, 192}, {"big 128x128x1024", 128, 128, 1024}};
  mm_t fns[] = {mm_v0, mm_v1, mm_v2, mm_v3, mm_v7};
  const char *names[] = {"v0 loads first", "v1 interleaved", "v2 no stores", "v3 in tiles", "v7 L1 scratch"};
  int nv = 5;
  for (int sh = 0; sh < 3; sh++) {
    int M = shapes[sh].m, N = shapes[sh].n, K = shapes[sh].k;
    long lda = K * 2, ldb = N * 4, ldc = N * 4;
    char *a = aligned_alloc(64, M * lda), *b = aligned_alloc(64, (K / 2) * ldb), *c = aligned_alloc(64, M * ldc);
    for (long i = 0; i < M * lda / 2; i++) ((uint16_t *)a)[i] = 0x3f80 + (i & 7);
    for (long i = 0; i < (K / 2) * ldb / 2; i++) ((uint16_t *)b)[i] = 0x3f80 + (i & 5);
    long tdp = (long)(M / 32) * (N / 32) * (K / 32) * 4;
    if (check) {
      char *ref = aligned_alloc(64, M * ldc);
      for (int v = 0; v < nv; v++) {
        if (v >= 2) continue; // v2 stores nothing, v3 reuses one step, v7 writes its scratch
        memset(c, 0xff, M * ldc);
        fns[v](a, lda, b, ldb, c, ldc, K / 32, M / 32, N / 32, 1);
        if (v == 0) memcpy(ref, c, M * ldc);
        else printf("%s %s: %s\n", shapes[sh].name, names[v], memcmp(ref, c, M * ldc) ? "DIFFERS" : "same");
      }
      free(ref);
      continue;
    }
    for (int cfgcall = 1; cfgcall >= 1; cfgcall--)
      for (int v = 0; v < nv; v++) {
        if (!cfgcall) config();
        int reps = 20000;
        for (int r = 0; r < 1000; r++) fns[v](a, lda, b, ldb, c, ldc, K / 32, M / 32, N / 32, cfgcall);
        double best = 1e9;
        for (int t = 0; t < 5; t++) {
          double t0 = now();
          for (int r = 0; r < reps; r++) fns[v](a, lda, b, ldb, c, ldc, K / 32, M / 32, N / 32, cfgcall);
          double dt = (now() - t0) / reps; if (dt < best) best = dt;
        }
        if (!cfgcall) _tile_release();
        printf("%-18s %-15s cfg/call=%d  %8.3f us/call  %6.2f ns/TDP  %6.1f cycles/TDP at %.2f GHz  %7.0f GFLOP/s\n", shapes[sh].name, names[v], cfgcall,
               best * 1e6, best * 1e9 / tdp, best * 1e9 * ghz / tdp, ghz, 2.0 * M * N * K / best / 1e9);
      }
    free(a); free(b); free(c);
  }
  return 0;
}
