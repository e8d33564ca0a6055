/* decodemodel.c: a C model of CPU decode's memory side, against the paged
   scan and (optionally) two builds of a generated f16 decode, all in one
   run on the same pools.

   The workload is `attnc bench`'s decode shape: 8 sequences of 4096
   positions, 8 kv heads, head dim 128, f16 pages of 16 positions in HND
   layout, pages shuffled over a pool of four page sets (512 MiB, each call
   reads the next set: cold), items (sequence, kv head) taken from a shared
   counter by THREADS threads. Per call it times:

     scanN   every byte of the item's K then V blocks, page by page, with a
             prefetch of the blocks N pages ahead (0: none) — the yardstick
             (scanNl2: the prefetches fill L2, prefetcht1, as in `attnc
             bench`'s paged scan and the kernels);
     rows    a per-row model: each K row's Q·K for 2 query rows, then each
             V row's P·V, with the 4 lines of the same row a 64-row tile
             ahead prefetched before each row's loads (in cache about the
             generated kernel's time per row);
     pv      the generated kernel's loop shapes (Q·K in dot blocks of 4
             keys whose steps prefetch the next tile's K lines in address
             order; P·V in two passes of 64 columns prefetching
             row-strided), V's prefetches in P·V;
     qk      the same loops with V's prefetches beside K's in Q·K
             (targets/cpu pairRows);
     none    the same loops without software prefetch;
     fma     decode's least arithmetic over the same reads: each K row
             widened once and multiplied into the 4 query rows of the
             bench shape's GQA group, each V row likewise, into register
             accumulators (no reduction, softmax or staging), with a
             prefetch into L2 of each line a tile ahead beside its loads;
     fmax    fma with EXTRA (default 20) more multiply-adds per K row,
             spread (about the generated f16 kernel's arithmetic in
             cache);
     fmag    the same multiply-adds gathered after each tile's K pass,
             with no prefetch among them (the kernel's softmax steps);
     fmav2   fmax with V read in two passes of half rows (P·V's passes);
     fmak4   fmax with K read as dot blocks: 4 rows a column step at a
             time, the next tile's 4 rows prefetched in address order;
     fmak4l1 fmak4 with the next block's rows also prefetched into L1;
     fmaall  fmak4's K, then BURST (800) multiply-adds, then fmav2's V;
     pageN   decode's least arithmetic a page at a time, prefetched as
             scanN is (pageNl2: into L2) but spread evenly: each row of
             the page, K's and V's, widened once and multiplied into the
             group's 4 query rows (PAGEG: 1, 2, or 0 for none), beside it
             the same row's lines N pages ahead (page_item) — a bound for
             any decode that does the group's multiply-adds;
     A, B    LIB_A's and LIB_B's PREFIX_decode on the same pools (f16
             variant, 32/8 heads, head dim 128, page 16: `attnc bench`'s
             decode f16), each twice per round, each timed call after an
             untimed one on another page set (its workers awake, as in
             back-to-back calls). On Zen 4 (2026-12-05) A2 still ran 3–4%
             slower than A, the same library, in every run: compare two
             builds by their A/A2 and B/B2 pairs over several runs.

   Every mode runs once per round, rounds interleaved so a change of load
   hits them alike; it prints each one's median and best, its rate, its
   time per (position, kv head) row and thread, and its ratio to the best
   scan. INCACHE=1 reads two pages per sequence again and again (the
   arithmetic alone).

   gcc -O2 -march=x86-64-v4 -o decodemodel scripts/decodemodel.c -lpthread -ldl
   ./decodemodel THREADS ROUNDS [INCACHE [LIB_A LIB_B PREFIX]]

   With -DCODES=1 the pools hold i8 codes (`attnc bench`'s decode f16/i8:
   f16 queries, LIB_A and LIB_B's entries take k_scale and v_scale, passed
   as 1/16), every mode widening them as the kernels do (vpmovsxbd,
   vcvtdq2ps). The modes modelled on the f16 kernel's loops (rows, pv, qk,
   none, fma*) keep their f16 shapes there and mean little.

   Measured on Zen 5 (2026-12-03, docs/benchmarks.md): at 2 threads qk
   took 4–15% less than pv; rows read at 0.78–0.95 of the scan, the
   generated kernel at 0.57–0.84 in the same runs. On Zen 4 (2026-12-05,
   twelve runs at 2 threads): fma read at 0.95–1.25 of scan4l2, the f16
   kernel at 0.58–0.92; in cache (1 thread) fma took 5.0 ms a call, the
   kernel 6.4–6.8, 6.1–6.2 after that session's two changes. The next
   session (2026-12-05, same machine, 2 threads): when the host's other
   guests left the memory alone, the kernel read as fast as fma and fmax
   (4.4–4.5 ms a call, 0.91–0.94 of scan2l2); when they loaded it, fma
   and fmax still took 4.2–4.7 ms, the kernel 5.1–6.3. The models place
   that loss in the kernel's access pattern, not its arithmetic (in cache
   it costs about what fmax does): from memory fmak4 took 8–16% longer
   than fmax (3% in cache), fmag 4–10% (the same in cache), fmav2 5–8%
   (6–7% in cache) and fmaall 15–19%; fmak4l1 5–11% less than fmak4. The
   kernel with fmak4l1's L1 prefetches in address order (targets/cpu
   nextBlock) took 5–16% less time under load, the same in cache; row-
   strided, 6–10% more than that (docs/benchmarks.md). On Zen 5
   (2026-12-06, 2 threads, docs/benchmarks.md session 35), i8: page1 and
   page2 read at 0.71–0.75 of the best scan (21.9–22.5 ns a row a thread
   against 15.8–16.7; 10.3–11.8 in cache), the generated i8 kernel at
   0.61–0.80 (14.2–15.3 in cache); with PAGEG 2 at 0.82–0.85 (9.6 in
   cache), 1 at 0.84–0.88 (7.8), 0 at 1.04–1.08; f16: page1 and page2 at
   0.95–0.96, the f16 kernel at 0.94–0.95. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* CODES=1 (-DCODES=1): i8 pages, the bench's decode f16/i8 (f16 queries,
   per-tensor scales); the default, f16 pages. */
#ifndef CODES
#define CODES 0
#endif
#if CODES
typedef uint8_t elem;
enum { ESZ = 1 };
/* widen16: 16 elements at p as f32 (the kernels' i8 widening). */
static inline __m512 widen16(const void *p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p))); }
#else
typedef uint16_t elem;
enum { ESZ = 2 };
static inline __m512 widen16(const void *p) { return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)p)); }
#endif
enum { LPR = 128 * ESZ / 64 }; /* cache lines a row of head dim 128 */

enum { BURST = 800 }; /* fmaall's multiply-adds between a tile's K and V passes */
enum { KV = 8, D = 128, PS = 16, B = 8, L = 4096, PAGES = L / PS, SETS = 4, TILE = 64, G = 2, QO = 32 };
enum { SCAN, ROWS, PV, QK, NONE, FMA, FMAX, FMAG, FMAV2, FMAK4, FMAK4L1, FMAALL, PAGE, LIB };

typedef int32_t (*dec_fn)(void *, void *, void *, int32_t, int32_t *, int32_t *, int32_t *, int32_t, void *, float *);
typedef int32_t (*dec8_fn)(void *, void *, void *, float *, float *, int32_t, int32_t *, int32_t *, int32_t *, int32_t, void *, float *);
typedef void (*thr_fn)(int32_t);

static elem *kp, *vp;
static int32_t *tbl; /* [SETS][B][PAGES] */
static atomic_int next;
static int mode, dist, l2, set;
static int pageg = QO / KV; /* PAGEG: page_item's query rows */
static int extra = 20; /* EXTRA: fmax's and fmag's multiply-adds beyond fma's, per K row */
static double sink[64 * 8];
static float qv[G * D] __attribute__((aligned(64)));
static float qg[QO / KV * D] __attribute__((aligned(64))); /* fma_item's group of query rows */
static pthread_barrier_t bar_s, bar_e;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
static inline const elem *row(const elem *pool, const int32_t *t, int h, int pos) {
  return pool + (((size_t)t[pos / PS] * KV + h) * PS + pos % PS) * D;
}
static inline void pf4(const void *p) {
  for (int i = 0; i < 4; i++) _mm_prefetch((const char *)p + 64 * i, _MM_HINT_T0);
}

static double scan_item(const int32_t *t, int h) {
  __m512i acc = _mm512_setzero_si512();
  for (int p = 0; p < PAGES; p++) {
    if (dist && p + dist < PAGES)
      for (int i = 0; i < PS * D * ESZ; i += 64) {
        if (l2) {
          _mm_prefetch((const char *)row(kp, t, h, (p + dist) * PS) + i, _MM_HINT_T1);
          _mm_prefetch((const char *)row(vp, t, h, (p + dist) * PS) + i, _MM_HINT_T1);
        } else {
          _mm_prefetch((const char *)row(kp, t, h, (p + dist) * PS) + i, _MM_HINT_T0);
          _mm_prefetch((const char *)row(vp, t, h, (p + dist) * PS) + i, _MM_HINT_T0);
        }
      }
    const __m512i *a = (const __m512i *)row(kp, t, h, p * PS), *b = (const __m512i *)row(vp, t, h, p * PS);
    for (int i = 0; i < PS * D * ESZ / 64; i++) acc = _mm512_add_epi64(acc, _mm512_load_si512(a + i));
    for (int i = 0; i < PS * D * ESZ / 64; i++) acc = _mm512_add_epi64(acc, _mm512_load_si512(b + i));
  }
  return (double)_mm512_reduce_add_epi64(acc);
}

static double rows_item(const int32_t *t, int h) {
  float s[TILE] __attribute__((aligned(64)));
  float o[G][D] __attribute__((aligned(64)));
  memset(o, 0, sizeof o);
  for (int t0 = 0; t0 < L; t0 += TILE) {
    int ahead = t0 + TILE < L;
    for (int r = 0; r < TILE; r++) {
      if (ahead) pf4(row(kp, t, h, t0 + r + TILE));
      const elem *k = row(kp, t, h, t0 + r);
      __m512 a0 = _mm512_setzero_ps(), a1 = a0;
      for (int c = 0; c < D; c += 16) {
        __m512 x = widen16(k + c);
        a0 = _mm512_fmadd_ps(x, _mm512_load_ps(qv + c), a0);
        a1 = _mm512_fmadd_ps(x, _mm512_load_ps(qv + D + c), a1);
      }
      s[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) * 1e-3f;
    }
    for (int r = 0; r < TILE; r++) {
      if (ahead) pf4(row(vp, t, h, t0 + r + TILE));
      const elem *v = row(vp, t, h, t0 + r);
      __m512 p = _mm512_set1_ps(s[r]);
      for (int c = 0; c < D; c += 16) {
        __m512 x = widen16(v + c);
        _mm512_store_ps(o[0] + c, _mm512_fmadd_ps(p, x, _mm512_load_ps(o[0] + c)));
        _mm512_store_ps(o[1] + c, _mm512_fmadd_ps(p, x, _mm512_load_ps(o[1] + c)));
      }
    }
  }
  return o[0][0] + o[1][D - 1];
}

/* blocks_item: the generated kernel's loop shapes; mode PV, QK or NONE
   places the prefetches. */
static double blocks_item(const int32_t *t, int h) {
  float s[TILE] __attribute__((aligned(64)));
  float o[G][D] __attribute__((aligned(64)));
  memset(o, 0, sizeof o);
  for (int t0 = 0; t0 < L; t0 += TILE) {
    int ahead = t0 + TILE < L && mode != NONE;
    for (int r0 = 0; r0 < TILE; r0 += 4) {
      const elem *k[4];
      for (int i = 0; i < 4; i++) k[i] = row(kp, t, h, t0 + r0 + i);
      __m512 a[4][2];
      for (int i = 0; i < 4; i++) a[i][0] = a[i][1] = _mm512_setzero_ps();
      for (int c = 0; c < D; c += 16) {
        if (ahead && c % 32 == 0) { /* a step at a line start: one row's 4 lines */
          int pos = t0 + r0 + c / 32 + TILE;
          pf4(row(kp, t, h, pos));
          if (mode == QK) pf4(row(vp, t, h, pos));
        }
        __m512 q0 = _mm512_load_ps(qv + c), q1 = _mm512_load_ps(qv + D + c);
        for (int i = 0; i < 4; i++) {
          __m512 x = widen16(k[i] + c);
          a[i][0] = _mm512_fmadd_ps(x, q0, a[i][0]);
          a[i][1] = _mm512_fmadd_ps(x, q1, a[i][1]);
        }
      }
      for (int i = 0; i < 4; i++) s[r0 + i] = _mm512_reduce_add_ps(_mm512_add_ps(a[i][0], a[i][1])) * 1e-3f;
    }
    for (int pass = 0; pass < 2; pass++)
      for (int r = 0; r < TILE; r++) {
        const elem *v = row(vp, t, h, t0 + r);
        const char *nv = ahead && mode == PV ? (const char *)row(vp, t, h, t0 + r + TILE) : 0;
        __m512 p = _mm512_set1_ps(s[r]);
        for (int c = pass * 64; c < pass * 64 + 64; c += 16) {
          if (nv && c % (64 / ESZ) == 0) _mm_prefetch(nv + c * ESZ, _MM_HINT_T0);
          __m512 x = widen16(v + c);
          _mm512_store_ps(o[0] + c, _mm512_fmadd_ps(p, x, _mm512_load_ps(o[0] + c)));
          _mm512_store_ps(o[1] + c, _mm512_fmadd_ps(p, x, _mm512_load_ps(o[1] + c)));
        }
      }
  }
  return o[0][0] + o[1][D - 1];
}

/* burn: n more multiply-adds (in 4 chains) on acc[0..3], no memory
   access: arithmetic added to a mode without changing its reads. */
static inline __attribute__((always_inline)) void burn(__m512 *acc, int n) {
  __m512 e0 = acc[0], e1 = acc[1], e2 = acc[2], e3 = acc[3], m = _mm512_set1_ps(0.999f);
  for (int i = 0; i < n; i += 4) {
    e0 = _mm512_fmadd_ps(e0, m, m);
    e1 = _mm512_fmadd_ps(e1, m, m);
    e2 = _mm512_fmadd_ps(e2, m, m);
    e3 = _mm512_fmadd_ps(e3, m, m);
  }
  acc[0] = e0, acc[1] = e1, acc[2] = e2, acc[3] = e3;
}

/* fma_item: decode's least arithmetic over the same reads — each K row
   converted once and multiplied into every query row of the group
   (QO/KV), each V row likewise, into register accumulators: no
   reduction, no softmax, no staging — with a prefetch into L2 of the
   line a tile ahead before each line's loads (the generated kernel's
   prefetch). */
/* fma_rows: fma_item's pass over one tile's rows of pool, each row's
   lines multiplied into acc, the same lines of the rows a tile ahead
   prefetched beside them (ahead). */
static inline __attribute__((always_inline)) void fma_rows(const elem *pool, const int32_t *t, int h, int t0, int ahead,
                                                           __m512 acc[8], int ex) {
  for (int r = 0; r < TILE; r++) {
    if (ex) burn(acc, ex);
    const char *x0 = (const char *)row(pool, t, h, t0 + r), *nx = ahead ? (const char *)row(pool, t, h, t0 + r + TILE) : 0;
#pragma GCC unroll 8
    for (int c = 0; c < D; c += 16) {
      if (nx && c % (64 / ESZ) == 0) _mm_prefetch(nx + c * ESZ, _MM_HINT_T1);
      __m512 x = widen16(x0 + c * ESZ);
#pragma GCC unroll 4
      for (int g = 0; g < QO / KV; g++) acc[c / 16] = _mm512_fmadd_ps(x, _mm512_load_ps(qg + g * D + c), acc[c / 16]);
    }
  }
}

/* fma_half: V's rows in two passes of half a row each, the same half of
   the rows a tile ahead prefetched beside its loads (the kernel's P·V). */
static inline __attribute__((always_inline)) void fma_half(const elem *pool, const int32_t *t, int h, int t0, int ahead,
                                                           __m512 acc[8]) {
  for (int half = 0; half < 2; half++)
    for (int r = 0; r < TILE; r++) {
      const char *x0 = (const char *)row(pool, t, h, t0 + r) + half * D / 2 * ESZ,
                 *nx = ahead ? (const char *)row(pool, t, h, t0 + r + TILE) + half * D / 2 * ESZ : 0;
#pragma GCC unroll 4
      for (int c = 0; c < D / 2; c += 16) {
        if (nx && c % (64 / ESZ) == 0) _mm_prefetch(nx + c * ESZ, _MM_HINT_T1);
        __m512 x = widen16(x0 + c * ESZ);
#pragma GCC unroll 4
        for (int g = 0; g < QO / KV; g++)
          acc[half * 4 + c / 16] = _mm512_fmadd_ps(x, _mm512_load_ps(qg + g * D + half * D / 2 + c), acc[half * 4 + c / 16]);
      }
    }
}

/* fma_k4: K's rows in blocks of 4 read a column step at a time, each
   step's 4 loads at one column of the 4 rows (the kernel's dot blocks),
   the next tile's 4 rows prefetched in address order, 2 lines a step
   (targets/cpu seqGroup); l1: with prefetches into L1 of the next
   block's 4 rows (of this tile, in L2 by then), also 2 lines a step in
   address order. */
static inline __attribute__((always_inline)) void fma_k4(const elem *pool, const int32_t *t, int h, int t0, int ahead,
                                                         __m512 acc[8], int ex, int l1) {
  for (int r = 0; r < TILE; r += 4) {
    if (ex) burn(acc + 4, 4 * ex);
    const char *x[4], *nx[4], *nb[4];
    for (int j = 0; j < 4; j++) {
      x[j] = (const char *)row(pool, t, h, t0 + r + j);
      nx[j] = ahead ? (const char *)row(pool, t, h, t0 + r + j + TILE) : 0;
      nb[j] = (const char *)row(pool, t, h, t0 + (r + 4 < TILE ? r + 4 + j : TILE - 1));
    }
#pragma GCC unroll 8
    for (int c = 0; c < D; c += 16) {
      for (int i = 0; i < LPR / 2; i++) { /* the block's 4 rows' lines, LPR/2 a step */
        int l = c / 16 * (LPR / 2) + i;
        if (ahead) _mm_prefetch(nx[l / LPR] + (l % LPR) * 64, _MM_HINT_T1);
        if (l1) _mm_prefetch(nb[l / LPR] + (l % LPR) * 64, _MM_HINT_T0);
      }
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        __m512 v = widen16(x[j] + c * ESZ);
#pragma GCC unroll 4
        for (int g = 0; g < QO / KV; g++) acc[j] = _mm512_fmadd_ps(v, _mm512_load_ps(qg + g * D + c), acc[j]);
      }
    }
  }
}

/* fma_body: one item of an fma mode: K by rows (k4 0) or dot blocks (1;
   2 with fma_k4's L1 prefetch), xk multiply-adds more per K row, burst
   more after each tile's K pass, V by rows (v2 0) or half rows (1). Each
   mode is its own function (fma_modes), so that no mode's registers spill
   for another's. */
static inline __attribute__((always_inline)) double fma_body(const int32_t *t, int h, int k4, int xk, int burst, int v2) {
  __m512 a[8], b[8];
  for (int i = 0; i < 8; i++) a[i] = b[i] = _mm512_setzero_ps();
  for (int t0 = 0; t0 < L; t0 += TILE) {
    int ahead = t0 + TILE < L;
    if (k4)
      fma_k4(kp, t, h, t0, ahead, a, xk, k4 == 2);
    else
      fma_rows(kp, t, h, t0, ahead, a, xk);
    if (burst) burn(a + 4, burst);
    if (v2)
      fma_half(vp, t, h, t0, ahead, b);
    else
      fma_rows(vp, t, h, t0, ahead, b, 0);
  }
  __m512 s = _mm512_setzero_ps();
  for (int i = 0; i < 8; i++) s = _mm512_add_ps(s, _mm512_add_ps(a[i], b[i]));
  return _mm512_reduce_add_ps(s);
}

static __attribute__((noinline)) double fma_plain(const int32_t *t, int h) { return fma_body(t, h, 0, 0, 0, 0); }
static __attribute__((noinline)) double fma_x(const int32_t *t, int h) { return fma_body(t, h, 0, extra, 0, 0); }
static __attribute__((noinline)) double fma_g(const int32_t *t, int h) { return fma_body(t, h, 0, 0, extra * TILE, 0); }
static __attribute__((noinline)) double fma_v2(const int32_t *t, int h) { return fma_body(t, h, 0, extra, 0, 1); }
static __attribute__((noinline)) double fma_k4x(const int32_t *t, int h) { return fma_body(t, h, 1, extra, 0, 0); }
static __attribute__((noinline)) double fma_k4l1(const int32_t *t, int h) { return fma_body(t, h, 2, extra, 0, 0); }
static __attribute__((noinline)) double fma_all(const int32_t *t, int h) { return fma_body(t, h, 1, 0, BURST, 1); }

/* page_item: decode's least arithmetic read a page at a time and
   prefetched as the scan is: each row of the page, K's and V's, widened
   once and multiplied into the group's 4 query rows (8 accumulators each
   for K and V, so no chain waits on another), and beside each row its
   lines in the page dist pages ahead, K's and V's, prefetched into L1 (l2:
   L2) — the scan's prefetch spread evenly over the arithmetic. K and V
   rows alternate, which no decode can do (P·V needs the tile's softmax):
   a bound, not a kernel. */
static inline __attribute__((always_inline)) double page_body(const int32_t *t, int h, int ng) {
  __m512 ak[8], av[8];
  for (int i = 0; i < 8; i++) ak[i] = av[i] = _mm512_setzero_ps();
  for (int p = 0; p < PAGES; p++) {
    int ahead = dist && p + dist < PAGES;
    for (int r = 0; r < PS; r++) {
      if (ahead) {
        const char *nk = (const char *)row(kp, t, h, (p + dist) * PS + r), *nv = (const char *)row(vp, t, h, (p + dist) * PS + r);
        for (int l = 0; l < LPR; l++) {
          if (l2) {
            _mm_prefetch(nk + 64 * l, _MM_HINT_T1);
            _mm_prefetch(nv + 64 * l, _MM_HINT_T1);
          } else {
            _mm_prefetch(nk + 64 * l, _MM_HINT_T0);
            _mm_prefetch(nv + 64 * l, _MM_HINT_T0);
          }
        }
      }
      const char *k = (const char *)row(kp, t, h, p * PS + r), *v = (const char *)row(vp, t, h, p * PS + r);
#pragma GCC unroll 8
      for (int c = 0; c < D; c += 16) {
        __m512 x = widen16(k + c * ESZ), y = widen16(v + c * ESZ);
#pragma GCC unroll 4
        for (int g = 0; g < ng; g++) {
          ak[(c / 16 + 2 * g) % 8] = _mm512_fmadd_ps(x, _mm512_load_ps(qg + g * D + c), ak[(c / 16 + 2 * g) % 8]);
          av[(c / 16 + 2 * g) % 8] = _mm512_fmadd_ps(y, _mm512_set1_ps(qg[g * D + r]), av[(c / 16 + 2 * g) % 8]);
        }
      }
    }
  }
  __m512 s = _mm512_setzero_ps();
  for (int i = 0; i < 8; i++) s = _mm512_add_ps(s, _mm512_add_ps(ak[i], av[i]));
  if (!ng) /* the widened rows still reach the result */
    for (int c = 0; c < D; c += 16) s = _mm512_add_ps(s, widen16((const char *)row(kp, t, h, 0) + c * ESZ));
  return _mm512_reduce_add_ps(s);
}
static __attribute__((noinline)) double page_g0(const int32_t *t, int h) { return page_body(t, h, 0); }
static __attribute__((noinline)) double page_g1(const int32_t *t, int h) { return page_body(t, h, 1); }
static __attribute__((noinline)) double page_g2(const int32_t *t, int h) { return page_body(t, h, 2); }
static __attribute__((noinline)) double page_g4(const int32_t *t, int h) { return page_body(t, h, 4); }
/* page_item: page_body with PAGEG query rows (1, 2 or 4; the bench's
   group, 4, by default; 0: the rows widened and not multiplied): how
   much arithmetic the scan's reads hide. */
static double page_item(const int32_t *t, int h) {
  switch (pageg) {
  case 0: return page_g0(t, h);
  case 1: return page_g1(t, h);
  case 2: return page_g2(t, h);
  default: return page_g4(t, h);
  }
}

static double fma_item(const int32_t *t, int h) {
  switch (mode) {
  case FMAX: return fma_x(t, h);
  case FMAG: return fma_g(t, h);
  case FMAV2: return fma_v2(t, h);
  case FMAK4: return fma_k4x(t, h);
  case FMAK4L1: return fma_k4l1(t, h);
  case FMAALL: return fma_all(t, h);
  default: return fma_plain(t, h);
  }
}

static void *worker(void *arg) {
  int id = (int)(long)arg;
  for (;;) {
    pthread_barrier_wait(&bar_s);
    if (mode < 0) return 0;
    double acc = 0;
    for (int it; (it = atomic_fetch_add(&next, 1)) < B * KV;) {
      const int32_t *t = tbl + ((size_t)set * B + it / KV) * PAGES;
      acc += mode == SCAN ? scan_item(t, it % KV)
             : mode == ROWS ? rows_item(t, it % KV)
             : mode == PAGE ? page_item(t, it % KV)
             : mode >= FMA && mode < LIB ? fma_item(t, it % KV)
                            : blocks_item(t, it % KV);
    }
    sink[id * 8] += acc;
    pthread_barrier_wait(&bar_e);
  }
}

/* call_lib calls a library's decode over the pools (an 8-bit cache's entry
   also takes k_scale and v_scale: 1/16 each). */
static int32_t call_lib(void *fn, void *q, size_t np, int32_t *indptr, int32_t *ind, int32_t *last, void *o, float *lse) {
  if (CODES) {
    float scale = 1.0f / 16;
    return ((dec8_fn)fn)(q, kp, vp, &scale, &scale, (int32_t)np, indptr, ind, last, B, o, lse);
  }
  return ((dec_fn)fn)(q, kp, vp, (int32_t)np, indptr, ind, last, B, o, lse);
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s THREADS ROUNDS [INCACHE [LIB_A LIB_B PREFIX]]\n", argv[0]);
    return 2;
  }
  if (getenv("EXTRA")) extra = atoi(getenv("EXTRA"));
  if (getenv("PAGEG")) pageg = atoi(getenv("PAGEG"));
  int nthreads = atoi(argv[1]), R = atoi(argv[2]), incache = argc > 3 && atoi(argv[3]);
  if (nthreads < 1 || nthreads > 64 || R < 1) return 2;
  size_t np = (size_t)SETS * B * PAGES, bytes = np * KV * PS * D * ESZ;
  kp = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  vp = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (kp == MAP_FAILED || vp == MAP_FAILED) return 1;
  madvise(kp, bytes, MADV_HUGEPAGE);
  madvise(vp, bytes, MADV_HUGEPAGE);
  srand(1);
  for (size_t i = 0; i < bytes / ESZ; i++) {
    kp[i] = (elem)(CODES ? rand() % 255 - 127 : 0x3800 ^ (rand() & 0x83ff));
    vp[i] = (elem)(CODES ? rand() % 255 - 127 : 0x3800 ^ (rand() & 0x83ff));
  }
  for (int i = 0; i < G * D; i++) qv[i] = (rand() % 2001 - 1000) / 1000.0f;
  for (int i = 0; i < QO / KV * D; i++) qg[i] = (rand() % 2001 - 1000) / 1000.0f;
  tbl = malloc(np * 4);
  for (size_t i = 0; i < np; i++) tbl[i] = (int32_t)i;
  for (size_t i = np - 1; i > 0; i--) {
    size_t j = (size_t)rand() % (i + 1);
    int32_t x = tbl[i];
    tbl[i] = tbl[j];
    tbl[j] = x;
  }
  if (incache)
    for (size_t i = 0; i < np; i++) tbl[i] = (int32_t)((i / PAGES) % B * 2 + i % 2);

  struct { const char *name; int mode, arg, l2; } cfg[] = {
      {"scan0", SCAN, 0, 0}, {"scan1", SCAN, 1, 0}, {"scan2", SCAN, 2, 0}, {"scan4", SCAN, 4, 0},
      {"scan1l2", SCAN, 1, 1}, {"scan2l2", SCAN, 2, 1}, {"scan4l2", SCAN, 4, 1},
      {"rows", ROWS, 0, 0}, {"pv", PV, 0, 0}, {"qk", QK, 0, 0}, {"none", NONE, 0, 0}, {"fma", FMA, 0, 0},
      {"fmax", FMAX, 0, 0}, {"fmag", FMAG, 0, 0}, {"fmav2", FMAV2, 0, 0}, {"fmak4", FMAK4, 0, 0},
      {"fmak4l1", FMAK4L1, 0, 0}, {"fmaall", FMAALL, 0, 0},
      {"page0", PAGE, 0, 0}, {"page1", PAGE, 1, 0}, {"page2", PAGE, 2, 0}, {"page4", PAGE, 4, 0},
      {"page1l2", PAGE, 1, 1}, {"page2l2", PAGE, 2, 1}, {"page4l2", PAGE, 4, 1},
      {"A", LIB, 0, 0}, {"B", LIB, 1, 0}, {"A2", LIB, 0, 0}, {"B2", LIB, 1, 0}};
  int nc = sizeof cfg / sizeof cfg[0];
  void *lib[2] = {0, 0};
  uint16_t *q = 0, *o = 0;
  float *lse = 0;
  int32_t indptr[B + 1], last[B];
  if (argc > 6) {
    for (int i = 0; i < 2; i++) {
      void *h = dlopen(argv[4 + i], RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
      }
      char s[256];
      snprintf(s, sizeof s, "%s_decode", argv[6]);
      lib[i] = dlsym(h, s);
      snprintf(s, sizeof s, "%s_set_num_threads", argv[6]);
      thr_fn tf = (thr_fn)dlsym(h, s);
      if (!lib[i] || !tf) {
        fprintf(stderr, "%s: no %s_decode or %s_set_num_threads\n", argv[4 + i], argv[6], argv[6]);
        return 1;
      }
      tf(nthreads);
    }
    q = malloc((size_t)B * QO * D * 2);
    o = malloc((size_t)B * QO * D * 2);
    lse = malloc(B * QO * 4);
    for (int i = 0; i < B * QO * D; i++) q[i] = 0x3c00 ^ (rand() & 0x83ff);
    for (int b = 0; b <= B; b++) indptr[b] = b * PAGES;
    for (int b = 0; b < B; b++) last[b] = PS;
  } else
    nc -= 4;

  pthread_barrier_init(&bar_s, 0, nthreads + 1);
  pthread_barrier_init(&bar_e, 0, nthreads + 1);
  pthread_t th[64];
  for (int i = 0; i < nthreads; i++) pthread_create(&th[i], 0, worker, (void *)(long)i);
  double *t = malloc(sizeof(double) * nc * R);
  for (int r = -1; r < R; r++) /* round -1 warms up */
    for (int c = 0; c < nc; c++) {
      mode = cfg[c].mode;
      dist = cfg[c].arg;
      l2 = cfg[c].l2;
      set = (r + 1 + c) % SETS;
      atomic_store(&next, 0);
      /* An untimed call first, on another page set: the timed one finds
         the library's workers awake, as back-to-back calls do. */
      if (mode == LIB && call_lib(lib[cfg[c].arg], q, np, indptr, tbl + (size_t)((set + SETS / 2) % SETS) * B * PAGES, last, o, lse)) {
        fprintf(stderr, "%s: status\n", cfg[c].name);
        return 1;
      }
      double t0 = now();
      if (mode == LIB) {
        if (call_lib(lib[cfg[c].arg], q, np, indptr, tbl + (size_t)set * B * PAGES, last, o, lse)) {
          fprintf(stderr, "%s: status\n", cfg[c].name);
          return 1;
        }
      } else {
        pthread_barrier_wait(&bar_s);
        pthread_barrier_wait(&bar_e);
      }
      if (r >= 0) t[c * R + r] = now() - t0;
    }
  double gb = (double)B * L * KV * 2 * D * ESZ / 1e9, scan = 1e9;
  for (int c = 0; c < nc; c++) {
    qsort(t + c * R, R, sizeof(double), cmpd);
    if (cfg[c].mode == SCAN && t[c * R + R / 2] < scan) scan = t[c * R + R / 2];
  }
  for (int c = 0; c < nc; c++) {
    double med = t[c * R + R / 2];
    printf("%-7s med %7.3f ms  best %7.3f ms  %5.1f GB/s  %5.1f ns/row/thread  %.2f of the scan\n", cfg[c].name, med * 1e3,
           t[c * R] * 1e3, gb / med, med * 1e9 / ((double)B * L * KV / nthreads), scan / med);
  }
  mode = -1;
  pthread_barrier_wait(&bar_s);
  return 0;
}
