/* Self-test of the AMX emulator: AMX intrinsics compiled by clang-19
 * (-mamx-tile -mamx-bf16) run under amxemu and are compared bit for bit
 * (NaN as NaN) with model.c on random and edge inputs: denormals, ±inf,
 * NaN, signed zeros, products that overflow or underflow f32. Modes:
 *   run    the comparisons, on two threads at once (exit 0: all equal)
 *   int8   runs TDPBSSD, which the emulator lacks: must abort
 *   nocfg  runs TILELOADD with no tile configuration: must abort */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void amxemu_install(void);
long amxemu_count(void);
long amxemu_count_dp(void);
void model_dpbf16ps(int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb, float *C, int ldc);

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((packed)) tilecfg;

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* edge_bf16: a bf16 from a mix of classes. */
static uint16_t edge_bf16(uint64_t *s) {
  uint64_t r = next(s);
  uint16_t sign = (uint16_t)((r >> 8) & 1) << 15;
  uint16_t man = (uint16_t)((r >> 16) & 0x7f);
  switch (r % 16) {
  case 0: return sign | man; /* denormal or zero */
  case 1: return sign; /* signed zero */
  case 2: return sign | 0x7f80; /* inf */
  case 3: return sign | 0x7f80 | (man ? man : 1); /* NaN */
  case 4: return sign | (uint16_t)((250 + (r >> 24) % 5) << 7) | man; /* huge: products overflow */
  case 5: return sign | (uint16_t)((1 + (r >> 24) % 6) << 7) | man; /* tiny: products underflow */
  case 6: return (uint16_t)(r >> 32); /* any bits */
  default: return sign | (uint16_t)((120 + (r >> 24) % 14) << 7) | man; /* ordinary */
  }
}

static float edge_f32(uint64_t *s) {
  uint64_t r = next(s);
  uint32_t sign = (uint32_t)((r >> 8) & 1) << 31, man = (uint32_t)(r >> 20) & 0x7fffff, u;
  switch (r % 12) {
  case 0: u = sign | man; break; /* denormal */
  case 1: u = sign; break;
  case 2: u = sign | 0x7f800000u; break;
  case 3: u = sign | 0x7fc00000u | man; break;
  case 4: u = (uint32_t)(r >> 32); break;
  default: u = sign | ((uint32_t)(120 + (r >> 40) % 14) << 23) | man;
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static int same(float a, float b) {
  if (isnan(a) && isnan(b)) return 1;
  uint32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  return x == y;
}

enum { LDA = 40, LDB = 36, LDC = 20 }; /* strides (elements) wider than a tile row */

typedef struct {
  uint64_t seed;
  int edge;
  int fails;
  long cases;
} job;

/* one: C (M x N) += three A·B products (each K pairs) on tiles 0 (C), 1-2
 * (A, B), 3-4 (A', B'), 5-6 (streamed A'', B''), checked with the model;
 * tile 7 is zeroed and stored (it must read as zeros) and the stored
 * configuration must equal the loaded one. */
static int one(job *j, int M, int N, int K) {
  static __thread uint16_t A[3][16 * LDA], B[3][16 * LDB];
  static __thread float C[16 * LDC + 64], want[16 * LDC + 64], Z[16 * LDC + 64];
  uint64_t *s = &j->seed;
  for (int p = 0; p < 3; p++) {
    for (int i = 0; i < 16 * LDA; i++) A[p][i] = j->edge ? edge_bf16(s) : (uint16_t)(0x3c00 + next(s) % 0x700 + ((next(s) & 1) << 15));
    for (int i = 0; i < 16 * LDB; i++) B[p][i] = j->edge ? edge_bf16(s) : (uint16_t)(0x3c00 + next(s) % 0x700 + ((next(s) & 1) << 15));
  }
  for (int i = 0; i < 16 * LDC + 64; i++) C[i] = want[i] = j->edge ? edge_f32(s) : (float)(int)(next(s) % 64) * 0.25f;
  for (int i = 0; i < 16 * LDC + 64; i++) Z[i] = 1.0f;
  tilecfg cfg, back;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  cfg.rows[0] = (uint8_t)M, cfg.colsb[0] = (uint16_t)(4 * N);
  for (int t = 1; t < 7; t += 2) {
    cfg.rows[t] = (uint8_t)M, cfg.colsb[t] = (uint16_t)(4 * K); /* A: M x K pairs */
    cfg.rows[t + 1] = (uint8_t)K, cfg.colsb[t + 1] = (uint16_t)(4 * N); /* B: K x N pairs */
  }
  cfg.rows[7] = (uint8_t)M, cfg.colsb[7] = (uint16_t)(4 * N);
  _tile_loadconfig(&cfg);
  _tile_loadd(0, C, LDC * 4);
  _tile_loadd(1, A[0], LDA * 2);
  _tile_loadd(2, B[0], LDB * 2);
  _tile_loadd(3, A[1], LDA * 2);
  _tile_loadd(4, B[1], LDB * 2);
  _tile_stream_loadd(5, A[2], LDA * 2);
  _tile_stream_loadd(6, B[2], LDB * 2);
  _tile_dpbf16ps(0, 1, 2);
  _tile_dpbf16ps(0, 3, 4);
  _tile_dpbf16ps(0, 5, 6);
  _tile_stored(0, C, LDC * 4);
  _tile_zero(7);
  _tile_stored(7, Z, LDC * 4);
  _tile_storeconfig(&back);
  _tile_release();
  for (int p = 0; p < 3; p++) model_dpbf16ps(M, N, K, A[p], LDA, B[p], LDB, want, LDC);
  int bad = 0;
  if (memcmp(&cfg, &back, sizeof cfg) != 0) {
    fprintf(stderr, "STTILECFG differs from the configuration loaded\n");
    bad++;
  }
  for (int i = 0; i < 16 * LDC + 64; i++) {
    int inTile = i < M * LDC && i % LDC < N;
    float z = inTile ? 0.0f : 1.0f;
    if (!same(C[i], want[i])) {
      if (bad < 5) fprintf(stderr, "M=%d N=%d K=%d edge=%d C[%d][%d]: emulated %a, model %a\n", M, N, K, j->edge, i / LDC, i % LDC, C[i], want[i]);
      bad++;
    }
    if (!same(Z[i], z)) {
      if (bad < 5) fprintf(stderr, "TILEZERO/TILESTORED Z[%d] = %a, want %a\n", i, Z[i], z);
      bad++;
    }
  }
  return bad;
}

static void *worker(void *arg) {
  job *j = arg;
  static const int shapes[][3] = {{16, 16, 16}, {16, 16, 16}, {5, 6, 3}, {1, 1, 1}, {16, 3, 16}, {7, 16, 9}, {16, 16, 1}};
  for (int rep = 0; rep < 40; rep++)
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      j->fails += one(j, shapes[i][0], shapes[i][1], shapes[i][2]);
      j->cases++;
    }
  return NULL;
}

int main(int argc, char **argv) {
  amxemu_install();
  const char *mode = argc > 1 ? argv[1] : "run";
  if (strcmp(mode, "int8") == 0) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 3; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);
    _tile_dpbssd(0, 1, 2);
    printf("TDPBSSD ran\n");
    return 0;
  }
  if (strcmp(mode, "nocfg") == 0) {
    static char buf[1024];
    _tile_loadd(0, buf, 64);
    printf("TILELOADD ran without a configuration\n");
    return 0;
  }
  job jobs[4] = {{0x9e3779b97f4a7c15ull, 0, 0, 0}, {0x2545f4914f6cdd1dull, 1, 0, 0}, {0x1234567887654321ull, 1, 0, 0}, {7, 0, 0, 0}};
  pthread_t th[4];
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, worker, &jobs[i]);
  int fails = 0;
  long cases = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    fails += jobs[i].fails;
    cases += jobs[i].cases;
  }
  printf("cases %ld, emulated instructions %ld (tdpbf16ps %ld), mismatches %d\n", cases, amxemu_count(), amxemu_count_dp(), fails);
  return fails != 0;
}
