/* ropedecode.c: two builds of a decode entry under inline RoPE (or one
   without it), timed side by side in one process on the same pages: the
   bench's decode shape (f16, 32/8 heads, head dim 128, page 16, HND pages
   shuffled over POOLSETS disjoint page sets, each call reading the next),
   one query per sequence at position kv_len - 1, k_rope_pos_offset 0.

     gcc -O2 -o ropedecode scripts/ropedecode.c -ldl
     attnc build --shared a.attn -o a; attnc build --shared b.attn -o b
     ./ropedecode a/v.so b/v.so v BATCH KVLEN POOLSETS ROUNDS [THREADS]

   PREFIX_decode(q, q_rope_position, k_rope_pos_offset, k_pages, v_pages,
   num_pages, kv_indptr, kv_indices, kv_last_page_len, batch_size, o, lse)
   of each library runs once per round, A B then B A; it prints each one's
   median, quartile and best wall time per call and the median per (position,
   kv head) row and thread. NOROPE_A=SYMBOL or NOROPE_B=SYMBOL calls that
   library's SYMBOL without the two RoPE arguments instead (a variant
   without RoPE, for the cost of the rotation; its thread count is set
   through its own PREFIX_set_num_threads). In cache: BATCH 1, KVLEN 4096,
   POOLSETS 1; from memory: 8 4096 2. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int32_t (*dec_fn)(const void *, const int32_t *, const int32_t *, const void *, const void *, int32_t,
                          const int32_t *, const int32_t *, const int32_t *, int32_t, void *, float *);
typedef int32_t (*dec0_fn)(const void *, const void *, const void *, int32_t, const int32_t *, const int32_t *,
                           const int32_t *, int32_t, void *, float *);
typedef void (*thr_fn)(int32_t);

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
	if (argc < 8) {
		fprintf(stderr, "usage: ropedecode LIB_A LIB_B PREFIX BATCH KVLEN POOLSETS ROUNDS [THREADS]\n");
		return 2;
	}
	const char *pre = argv[3];
	int B = atoi(argv[4]), L = atoi(argv[5]), S = atoi(argv[6]), R = atoi(argv[7]);
	int thr = argc > 8 ? atoi(argv[8]) : 1;
	void *f[2];
	int norope[2];
	char name[256];
	for (int i = 0; i < 2; i++) {
		void *h = dlopen(argv[1 + i], RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			fprintf(stderr, "%s\n", dlerror());
			return 1;
		}
		const char *sym = getenv(i ? "NOROPE_B" : "NOROPE_A");
		norope[i] = sym != NULL;
		if (sym)
			snprintf(name, sizeof name, "%s", sym);
		else
			snprintf(name, sizeof name, "%s_decode", pre);
		f[i] = dlsym(h, name);
		if (!f[i]) {
			fprintf(stderr, "%s: no %s\n", argv[1 + i], name);
			return 1;
		}
		/* PREFIX_set_num_threads, PREFIX from the entry's name. */
		char *cut = strstr(name, "_decode");
		if (cut)
			strcpy(cut, "_set_num_threads");
		thr_fn set = (thr_fn)dlsym(h, name);
		if (set)
			set(thr);
	}
	int P = (L + 15) / 16;
	long np = (long)B * P * S, rowel = 8L * 16 * 128;
	uint16_t *k = malloc(np * rowel * 2), *v = malloc(np * rowel * 2);
	for (long i = 0; i < np * rowel; i++) {
		k[i] = 0x3c00 ^ ((i * 2654435761u) >> 20 & 0x3ff);
		v[i] = 0x3800 ^ ((i * 40503u) >> 18 & 0x3ff);
	}
	int32_t *perm = malloc(np * 4);
	for (long i = 0; i < np; i++)
		perm[i] = i;
	srand(1);
	for (long i = np - 1; i > 0; i--) {
		long j = rand() % (i + 1);
		int32_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	uint16_t *q = malloc(B * 32 * 128 * 2);
	for (int i = 0; i < B * 32 * 128; i++)
		q[i] = 0x3c00 ^ (i * 7 & 0x3ff);
	int32_t *qp = malloc(B * 4), *ko = calloc(B, 4), *ind = malloc((B + 1) * 4), *last = malloc(B * 4);
	for (int b = 0; b < B; b++) {
		qp[b] = L - 1;
		ind[b] = b * P;
		last[b] = L - (P - 1) * 16;
	}
	ind[B] = B * P;
	uint16_t *o = malloc(B * 32 * 128 * 2);
	float *lse = malloc(B * 32 * 4);
	double *t[2] = {malloc(R * 8), malloc(R * 8)};
	for (int r = 0; r < R; r++)
		for (int ab = 0; ab < 2; ab++) {
			int i = (r & 1) ? 1 - ab : ab;
			int32_t *idx = perm + (long)((r * 2 + ab) % S) * B * P;
			double t0 = now();
			int rc = norope[i] ? ((dec0_fn)f[i])(q, k, v, (int32_t)np, ind, idx, last, B, o, lse)
			                   : ((dec_fn)f[i])(q, qp, ko, k, v, (int32_t)np, ind, idx, last, B, o, lse);
			t[i][r] = now() - t0;
			if (rc) {
				fprintf(stderr, "%c: status %d\n", "AB"[i], rc);
				return 1;
			}
		}
	for (int i = 0; i < 2; i++) {
		qsort(t[i], R, 8, cmp);
		printf("%c: median %.3f ms  p25 %.3f  min %.3f  ns/row %.2f\n", "AB"[i], t[i][R / 2] * 1e3, t[i][R / 4] * 1e3,
		       t[i][0] * 1e3, t[i][R / 2] * 1e9 / ((double)B * L * 8 / thr));
	}
	return 0;
}
