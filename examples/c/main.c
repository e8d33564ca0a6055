/* The worked example: Llama 3 8B's prefill (32 query heads over 8 KV heads,
   head_dim 128, f16 cache in 16-token pages, causal) on two sequences.
   Build: make (make/attnc.mk) or cmake (cmake/Attnc.cmake); see README.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama3_8b.h"

enum { QO = 32, KV = 8, D = 128, PS = 16 };

/* f16 travels as uint16_t bit patterns; gcc >= 12 converts via _Float16. */
static uint16_t to_f16(float x) { _Float16 h = (_Float16)x; uint16_t b; memcpy(&b, &h, 2); return b; }
static float from_f16(uint16_t b) { _Float16 h; memcpy(&h, &b, 2); return (float)h; }

static uint16_t *randn(size_t n) {
  uint16_t *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = to_f16((float)rand() / RAND_MAX - 0.5f);
  return p;
}

int main(void) {
  /* Two sequences. Sequence 0 caches 20 tokens in pages 3 and 0 (the last
     page holds 4) and brings 3 new query tokens; sequence 1 caches 16 tokens
     in page 1 and brings 1. The new tokens are already in the cache. */
  int32_t qo_indptr[] = {0, 3, 4};
  int32_t kv_indptr[] = {0, 2, 3};
  int32_t kv_indices[] = {3, 0, 1};
  int32_t kv_last_page_len[] = {4, 16};
  int32_t batch = 2, total_q = 4, num_pages = 4;

  uint16_t *q = randn((size_t)total_q * QO * D);
  uint16_t *k_pages = randn((size_t)num_pages * KV * PS * D); /* HND layout */
  uint16_t *v_pages = randn((size_t)num_pages * KV * PS * D);
  uint16_t *o = malloc((size_t)total_q * QO * D * sizeof *o);
  float *lse = malloc((size_t)total_q * QO * sizeof *lse); /* or pass NULL */

  int32_t st = llama3_8b_prefill(q, qo_indptr, k_pages, v_pages, num_pages,
                                 kv_indptr, kv_indices, kv_last_page_len, batch, o, lse);
  if (st != LLAMA3_8B_OK) {
    fprintf(stderr, "llama3_8b_prefill: %s\n", llama3_8b_strerror(st));
    return 1;
  }
  printf("llama3_8b_prefill: %s\n", llama3_8b_strerror(st));
  for (int t = 0; t < total_q; t++)
    printf("token %d: o[head 0][0..3] = %7.3f %7.3f %7.3f %7.3f  lse[head 0] = %.3f\n", t,
           from_f16(o[(size_t)t * QO * D + 0]), from_f16(o[(size_t)t * QO * D + 1]),
           from_f16(o[(size_t)t * QO * D + 2]), from_f16(o[(size_t)t * QO * D + 3]), lse[t * QO]);
  free(q); free(k_pages); free(v_pages); free(o); free(lse);
  return 0;
}
