/* Calls llama3_8b's entries under valgrind with exact-size heap buffers:
   valid calls (threads 1, 4 and a split-KV decode on 64 threads) and bad
   inputs with INT32 extremes. Any read or write outside a buffer is a
   valgrind error; each call prints "<name> <status>". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "out/llama3_8b.h"

enum { QO = 32, KV = 8, D = 128, PS = 16 };

static uint16_t *f16s(size_t n) { /* small values as f16 bits: 0.0 .. ~0.1 */
  uint16_t *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (uint16_t)(0x2000 + (i * 7919) % 0x0800);
  return p;
}

static int32_t *i32s(int n, const int32_t *xs) {
  int32_t *p = malloc((n > 0 ? n : 1) * sizeof *p);
  memcpy(p, xs, n * sizeof *p);
  return p;
}

/* One prefill call on a fresh exact-size copy of the table. */
static void prefill(const char *name, int batch, const int32_t *qo, const int32_t *ind, int nind,
                    const int32_t *ip, const int32_t *last, int num_pages, int total_q) {
  uint16_t *q = f16s((size_t)total_q * QO * D);
  uint16_t *k = f16s((size_t)5 * KV * PS * D), *v = f16s((size_t)5 * KV * PS * D);
  uint16_t *o = malloc((size_t)total_q * QO * D * 2);
  float *lse = malloc((size_t)total_q * QO * 4);
  int b1 = batch > 0 ? batch + 1 : 1;
  int32_t *qo_ = i32s(b1, qo), *ip_ = i32s(b1, ip), *ind_ = i32s(nind, ind), *last_ = i32s(batch > 0 ? batch : 1, last);
  int32_t st = llama3_8b_prefill(q, qo_, k, v, num_pages, ip_, ind_, last_, batch, o, lse);
  printf("%s %d\n", name, st);
  free(q); free(k); free(v); free(o); free(lse); free(qo_); free(ip_); free(ind_); free(last_);
}

int main(void) {
  const int32_t MAX = 2147483647, MIN = -2147483647 - 1;
  int32_t qo[] = {0, 3, 5}, ip[] = {0, 3, 5}, ind[] = {4, 0, 2, 1, 3}, last[] = {1, 1};
  llama3_8b_set_num_threads(1);
  prefill("valid_1_thread", 2, qo, ind, 5, ip, last, 5, 5);
  llama3_8b_set_num_threads(4);
  prefill("valid_4_threads", 2, qo, ind, 5, ip, last, 5, 5);
  int32_t hidden[] = {4, -1, 2, 1, 3};
  prefill("hidden_page", 2, qo, hidden, 5, ip, last, 5, 5);
  prefill("num_pages_1", 2, qo, ind, 5, ip, last, 1, 5);
  int32_t big_id[] = {4, 0, 2, 1, MAX}, min_id[] = {MIN, 0, 2, 1, 3};
  prefill("page_id_max", 2, qo, big_id, 5, ip, last, 5, 5);
  prefill("page_id_min", 2, qo, min_id, 5, ip, last, 5, 5);
  int32_t dec_ip[] = {0, 5, 3}, huge_ip[] = {0, 3, MAX}, min_ip[] = {0, MIN, 5}, max_ip[] = {MAX, MAX, MAX};
  prefill("kv_indptr_decreasing", 2, qo, ind, 5, dec_ip, last, 5, 5);
  prefill("kv_indptr_max", 2, qo, ind, 5, huge_ip, last, 5, 5);
  prefill("kv_indptr_min", 2, qo, ind, 5, min_ip, last, 5, 5);
  prefill("kv_indptr_all_max", 2, qo, ind, 5, max_ip, last, 5, 5);
  int32_t qo_max[] = {0, 3, MAX}, qo_min[] = {MIN, 3, 5};
  prefill("qo_indptr_max", 2, qo_max, ind, 5, ip, last, 5, 5);
  prefill("qo_indptr_min", 2, qo_min, ind, 5, ip, last, 5, 5);
  int32_t last_max[] = {1, MAX};
  prefill("last_page_len_max", 2, qo, ind, 5, ip, last_max, 5, 5);
  prefill("batch_min", MIN, qo, ind, 5, ip, last, 5, 5);
  prefill("num_pages_min", 2, qo, ind, 5, ip, last, MIN, 5);

  /* Split-KV decode: one sequence of 600 tokens (38 pages) on 64 threads. */
  llama3_8b_set_num_threads(64);
  {
    int np = 38;
    int32_t dip[] = {0, np}, dlast[] = {600 - (np - 1) * PS};
    int32_t *dind = malloc(np * sizeof *dind);
    for (int i = 0; i < np; i++) dind[i] = i % 5;
    uint16_t *q = f16s(QO * D), *k = f16s((size_t)5 * KV * PS * D), *v = f16s((size_t)5 * KV * PS * D);
    uint16_t *o = malloc(QO * D * 2);
    float *lse = malloc(QO * 4);
    int32_t *dip_ = i32s(2, dip), *dlast_ = i32s(1, dlast);
    printf("split_decode %d\n", llama3_8b_decode(q, k, v, 5, dip_, dind, dlast_, 1, o, lse));
    free(q); free(k); free(v); free(o); free(lse); free(dind); free(dip_); free(dlast_);
  }
  /* More threads than allowed are clamped; merge_state's size extremes. */
  llama3_8b_set_num_threads(40000);
  printf("threads_clamped %d\n", llama3_8b_get_num_threads() <= 1024);
  {
    uint16_t *v = f16s(QO * D), *vo = f16s(QO * D);
    float *s = calloc(QO, 4), *so = calloc(QO, 4);
    printf("merge_valid %d\n", llama3_8b_merge_state(v, s, vo, so, 1));
    printf("merge_n_max %d\n", llama3_8b_merge_state(v, s, vo, so, MAX));
    printf("merge_n_min %d\n", llama3_8b_merge_state(v, s, vo, so, MIN));
    free(v); free(vo); free(s); free(so);
  }
  return 0;
}
