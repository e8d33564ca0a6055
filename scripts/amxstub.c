/* amxstub.c: rt.amx_mm32 without the tiles, for scripts/amxstub.sh. It
   writes +0 where the routine writes its blocks (the bytes TILESTORED
   stores; accumulating, as the routine does since 2026-12-06, it writes
   each 16x16 tile's +0s to a 1 KiB stack block and adds its rows to C's)
   and counts the TDPBF16PS the routine would issue; at exit it prints
   the count. Linked into an x86-64-amx build whose calls of the
   routine scripts/amxstub.sh redirects here, the kernel runs everything
   the level runs besides the tile products, on any CPU with AVX512-BF16:
   staging, packing, softmax, the products' row updates. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static long amx_dp;

int32_t amx_stub(int32_t *a, int32_t aoff, int32_t lda, int32_t *b, int32_t boff, int32_t ldb, float *c, int32_t coff,
                 int32_t ldc, int32_t steps, int32_t mblocks, int32_t nblocks, int32_t acc) {
  (void)a, (void)aoff, (void)lda, (void)b, (void)boff, (void)ldb;
  if (mblocks < 1 || nblocks < 1)
    return 0;
  if (acc) {
    float tile[16][16] __attribute__((aligned(64)));
    for (long j = 0; j < 2L * nblocks; j++)
      for (long i = 0; i < 2L * mblocks; i++) {
        __asm__ volatile("" ::: "memory"); /* TILESTORED writes the block anew */
        memset(tile, 0, sizeof tile);
        __asm__ volatile("" ::: "memory");
        for (long m = 0; m < 16; m++) {
          float *row = c + coff + (16 * i + m) * ldc + 16 * j;
          for (long n = 0; n < 16; n++) row[n] += tile[m][n]; /* not foldable: -0 + +0 is +0 */
        }
      }
  } else
    for (long m = 0; m < 32L * mblocks; m++) memset(c + coff + m * ldc, 0, sizeof(float) * 32 * (size_t)nblocks);
  __atomic_add_fetch(&amx_dp, (long)mblocks * nblocks * steps * 4, __ATOMIC_RELAXED);
  return 0;
}

__attribute__((destructor)) static void report(void) { fprintf(stderr, "amxstub: %ld TDPBF16PS\n", amx_dp); }
