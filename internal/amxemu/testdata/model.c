/* Independent scalar model of TDPBF16PS for the emulator's self-test,
 * written from the SDM's operation and not from amxemu.c: bf16 and f32
 * handled as bit patterns, denormals flushed by their exponent field, one
 * output element at a time (n outer, k inner). f32 arithmetic only. */
#include <math.h>
#include <stdint.h>
#include <string.h>

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* flush: a value whose exponent field is 0 becomes zero of its sign. */
static float flush(float f) {
  uint32_t u = to_bits(f);
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  return from_bits(u);
}

static float widen(uint16_t h) { return flush(from_bits((uint32_t)h << 16)); }

/* model_dpbf16ps: C[m][n] (f32, row stride ldc floats) accumulates the M x
 * N product of A (M rows of 2K bf16, stride lda elements) and B (K rows of
 * 2N bf16, pairs interleaved as the tile holds them, stride ldb). */
void model_dpbf16ps(int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb, float *C, int ldc) {
  for (int m = 0; m < M; m++) {
    for (int n = 0; n < N; n++) {
      float even = 0.0f, odd = 0.0f;
      for (int k = 0; k < K; k++) {
        even = flush(fmaf(widen(A[m * lda + 2 * k]), widen(B[k * ldb + 2 * n]), even));
        odd = flush(fmaf(widen(A[m * lda + 2 * k + 1]), widen(B[k * ldb + 2 * n + 1]), odd));
      }
      float pair = flush(flush(even) + flush(odd));
      C[m * ldc + n] = flush(flush(C[m * ldc + n]) + pair);
    }
  }
}
