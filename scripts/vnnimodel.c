/* vnnimodel.c: would AVX512-VNNI (vpdpbusd) make i8 decode's Q·Kᵀ
   cheaper than widening K to f32? A C model, in cache, of one (position,
   kv head) row's Q·Kᵀ for the bench shape's GQA group (4 query heads,
   head dim 128, i8 codes), three ways:

     fma    the generated kernel's dot block (targets/cpu dotblock.go):
            4 rows × 4 heads, each K vector widened once (vpmovsxbd,
            vcvtdq2ps) and multiplied into the 4 heads' f32 queries, then
            the transpose-add tree that leaves the 16 dot products in
            one vector;
     vnni   16 rows transposed so that dword lane r holds 4 codes of row
            r (16×16 dword transposes, codes xor 0x80: unsigned), the
            query as NDIG signed base-256 digits of a fixed-point integer
            (NDIG × 8 − 1 bits relative to the head's largest |q|; a query
            in f32 has 24 bits relative to each element, so NDIG 3 loses
            bits on small elements and 4 is the least that keeps a
            score's error below f32 accumulation's), each digit's 4
            bytes broadcast into vpdpbusd; scores come out in lanes,
            row after row, with no tree; per head, the digits' i32 sums
            converted and added with their weights;
     vnni0  vnni without the transposes (the codes read as if stored
            transposed): vpdpbusd's own cost.

   It also times register-resident chains of vpdpbusd and of vfmadd231ps
   (20 each), the two units' instruction rates. The vnni scores are
   checked against exact integer dot products (the fixed-point query's);
   the model does not check the fma scores' order in the vector.

     clang-19 -O3 -march=x86-64-v4 -mavx512vnni -DNDIG=4 -o vnnimodel scripts/vnnimodel.c -lm
     ./vnnimodel

   (gcc 12 copies every vpdpbusd accumulator through another register and
   runs the vnni blocks 1.3-1.5x slower: time the model with clang.)

   Measured on Zen 5 (2026-12-06, docs/benchmarks.md, session 35, two
   runs, clang-19): vpdpbusd issues at the multiply-add's rate (0.15 ns
   each); fma 6.2-6.5 ns a row, vnni 6.3-7.2 with NDIG 4 (5.0-5.5 with
   NDIG 3), vnni0 5.5-5.8 (4.2-4.3). Four digits make vpdpbusd's 64
   products an instruction 16 of the query's, the multiply-add's own
   count, so VNNI saves only the widening and the tree, and the
   transposes and a broadcast per instruction cost as much. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef NDIG
#define NDIG 4
#endif
#define D 128
#define G 4
#define ROWS 1024 /* 128 KiB of codes: in L2 */

static int8_t K[ROWS * D] __attribute__((aligned(64)));
static float q[G * D] __attribute__((aligned(64)));
static float sf[G * ROWS] __attribute__((aligned(64)));
static float sv[G * ROWS] __attribute__((aligned(64)));
static int32_t kt[32 * 16] __attribute__((aligned(64)));
/* qd[h][dig][i]: digit dig of head h's fixed-point query, dword i (4 codes). */
static int32_t qd[G * NDIG * (D / 4)] __attribute__((aligned(64)));
static int64_t qi[G * D]; /* the fixed-point query */
static float qw[G * NDIG], qc[G];
static volatile float sink; /* keeps every block's scores live */

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + 1e-9 * t.tv_nsec;
}

static __attribute__((noinline)) void fma_block(void) {
	for (int r0 = 0; r0 < ROWS; r0 += 4) {
		__m512 acc[16];
		for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
		for (int v = 0; v < D / 16; v++) {
			__m512 kv[4];
			for (int r = 0; r < 4; r++)
				kv[r] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(K + (r0 + r) * D + 16 * v))));
			for (int h = 0; h < 4; h++) {
				__m512 a = _mm512_load_ps(q + h * D + 16 * v);
				for (int r = 0; r < 4; r++) acc[h * 4 + r] = _mm512_fmadd_ps(a, kv[r], acc[h * 4 + r]);
			}
		}
		__m512 t8[8], t4[4], t2[2];
		for (int j = 0; j < 8; j++)
			t8[j] = _mm512_add_ps(_mm512_unpacklo_ps(acc[2 * j], acc[2 * j + 1]), _mm512_unpackhi_ps(acc[2 * j], acc[2 * j + 1]));
		for (int j = 0; j < 4; j++) {
			__m512d a = _mm512_castps_pd(t8[2 * j]), b = _mm512_castps_pd(t8[2 * j + 1]);
			t4[j] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
		}
		for (int j = 0; j < 2; j++)
			t2[j] = _mm512_add_ps(_mm512_shuffle_f32x4(t4[2 * j], t4[2 * j + 1], 0x88), _mm512_shuffle_f32x4(t4[2 * j], t4[2 * j + 1], 0xdd));
		_mm512_store_ps(sf + r0 * 4, _mm512_add_ps(_mm512_shuffle_f32x4(t2[0], t2[1], 0x88), _mm512_shuffle_f32x4(t2[0], t2[1], 0xdd)));
	}
}

/* transpose16 leaves in out[c] lane r the dword c of in[r]. */
static inline __attribute__((always_inline)) void transpose16(__m512i *a, __m512i *out) {
	__m512i b[16], c[16], d[16];
	for (int j = 0; j < 8; j++) {
		b[2 * j] = _mm512_unpacklo_epi32(a[2 * j], a[2 * j + 1]);
		b[2 * j + 1] = _mm512_unpackhi_epi32(a[2 * j], a[2 * j + 1]);
	}
	/* b[2j] lane (4l + m): rows 2j, 2j+1 interleaved: dwords 4l+{0,0,1,1} */
	for (int j = 0; j < 4; j++) {
		c[4 * j + 0] = _mm512_unpacklo_epi64(b[4 * j], b[4 * j + 2]);
		c[4 * j + 1] = _mm512_unpackhi_epi64(b[4 * j], b[4 * j + 2]);
		c[4 * j + 2] = _mm512_unpacklo_epi64(b[4 * j + 1], b[4 * j + 3]);
		c[4 * j + 3] = _mm512_unpackhi_epi64(b[4 * j + 1], b[4 * j + 3]);
	}
	/* c[4j + m] lane (4l + r'): row 4j + r', dword 4l + m */
	for (int j = 0; j < 2; j++)
		for (int m = 0; m < 4; m++) {
			d[8 * j + m] = _mm512_shuffle_i32x4(c[8 * j + m], c[8 * j + 4 + m], 0x88);
			d[8 * j + 4 + m] = _mm512_shuffle_i32x4(c[8 * j + m], c[8 * j + 4 + m], 0xdd);
		}
	/* d[8j + m] lane 4g + r': row 4(2j + g%2) + r', dword 4(2(g/2)) + m; d[8j+4+m]: dword 4(2(g/2)+1) + m */
	for (int m = 0; m < 8; m++) {
		__m512i lo = _mm512_shuffle_i32x4(d[m], d[8 + m], 0x88);
		__m512i hi = _mm512_shuffle_i32x4(d[m], d[8 + m], 0xdd);
		/* lo: rows 0..15 of dword m; hi: of dword 8 + m */
		out[m] = lo;
		out[8 + m] = hi;
	}
}

static __attribute__((noinline)) void vnni_block(int transpose) {
	const __m512i x80 = _mm512_set1_epi8((char)0x80);
	for (int r0 = 0; r0 < ROWS; r0 += 16) {
		if (transpose)
			for (int half = 0; half < 2; half++) {
				__m512i a[16], o[16];
				for (int r = 0; r < 16; r++) a[r] = _mm512_xor_si512(_mm512_load_si512(K + (r0 + r) * D + 64 * half), x80);
				transpose16(a, o);
				for (int c = 0; c < 16; c++) _mm512_store_si512(kt + 16 * (16 * half + c), o[c]);
			}
		__m512i acc[G * NDIG];
		for (int j = 0; j < G * NDIG; j++) acc[j] = _mm512_setzero_si512();
		for (int i = 0; i < 32; i++) {
			__m512i kv = transpose ? _mm512_load_si512(kt + 16 * i) : _mm512_xor_si512(_mm512_load_si512(K + r0 * D + 64 * i), x80);
			for (int j = 0; j < G * NDIG; j++) acc[j] = _mm512_dpbusd_epi32(acc[j], kv, _mm512_set1_epi32(qd[j * 32 + i]));
		}
		for (int h = 0; h < G; h++) {
			__m512 s = _mm512_set1_ps(qc[h]);
			for (int d = 0; d < NDIG; d++) s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h * NDIG + d]), _mm512_set1_ps(qw[h * NDIG + d]), s);
			_mm512_store_ps(sv + h * ROWS + r0, s);
		}
	}
}
static __attribute__((noinline)) void vnni_t(void) { vnni_block(1); }
static __attribute__((noinline)) void vnni_0(void) { vnni_block(0); }

/* units times 20 register-resident chains of each instruction (more than
   either's latency × issue rate), each from its own start value so that
   no compiler merges them. */
static void units(void) {
	__m512i a0 = _mm512_set1_epi32(1), a1 = _mm512_set1_epi32(2), a2 = _mm512_set1_epi32(3), a3 = _mm512_set1_epi32(4), a4 = _mm512_set1_epi32(5), a5 = _mm512_set1_epi32(6), a6 = _mm512_set1_epi32(7), a7 = _mm512_set1_epi32(8), a8 = _mm512_set1_epi32(9), a9 = _mm512_set1_epi32(10), a10 = _mm512_set1_epi32(11), a11 = _mm512_set1_epi32(12), a12 = _mm512_set1_epi32(13), a13 = _mm512_set1_epi32(14), a14 = _mm512_set1_epi32(15), a15 = _mm512_set1_epi32(16), a16 = _mm512_set1_epi32(17), a17 = _mm512_set1_epi32(18), a18 = _mm512_set1_epi32(19), a19 = _mm512_set1_epi32(20);
	__m512 f0 = _mm512_set1_ps(1), f1 = _mm512_set1_ps(2), f2 = _mm512_set1_ps(3), f3 = _mm512_set1_ps(4), f4 = _mm512_set1_ps(5), f5 = _mm512_set1_ps(6), f6 = _mm512_set1_ps(7), f7 = _mm512_set1_ps(8), f8 = _mm512_set1_ps(9), f9 = _mm512_set1_ps(10), f10 = _mm512_set1_ps(11), f11 = _mm512_set1_ps(12), f12 = _mm512_set1_ps(13), f13 = _mm512_set1_ps(14), f14 = _mm512_set1_ps(15), f15 = _mm512_set1_ps(16), f16 = _mm512_set1_ps(17), f17 = _mm512_set1_ps(18), f18 = _mm512_set1_ps(19), f19 = _mm512_set1_ps(20);
	const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(5);
	const __m512 u = _mm512_set1_ps(0.9999f), w = _mm512_set1_ps(0.0001f);
	const long n = 30000000;
#define DP(a) a = _mm512_dpbusd_epi32(a, x, y)
#define FM(f) f = _mm512_fmadd_ps(f, u, w)
	double t = now();
	for (long k = 0; k < n; k++) {
		DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7); DP(a8); DP(a9); DP(a10); DP(a11); DP(a12); DP(a13); DP(a14); DP(a15); DP(a16); DP(a17); DP(a18); DP(a19);
		__asm__ volatile("" : "+v"(a0), "+v"(a9));
	}
	double tdp = now() - t;
	t = now();
	for (long k = 0; k < n; k++) {
		FM(f0); FM(f1); FM(f2); FM(f3); FM(f4); FM(f5); FM(f6); FM(f7); FM(f8); FM(f9); FM(f10); FM(f11); FM(f12); FM(f13); FM(f14); FM(f15); FM(f16); FM(f17); FM(f18); FM(f19);
		__asm__ volatile("" : "+v"(f0), "+v"(f9));
	}
	double tfm = now() - t;
	long long si = _mm512_reduce_add_epi32(a0) + _mm512_reduce_add_epi32(a1) + _mm512_reduce_add_epi32(a2) + _mm512_reduce_add_epi32(a3) + _mm512_reduce_add_epi32(a4) + _mm512_reduce_add_epi32(a5) + _mm512_reduce_add_epi32(a6) + _mm512_reduce_add_epi32(a7) + _mm512_reduce_add_epi32(a8) + _mm512_reduce_add_epi32(a9) + _mm512_reduce_add_epi32(a10) + _mm512_reduce_add_epi32(a11) + _mm512_reduce_add_epi32(a12) + _mm512_reduce_add_epi32(a13) + _mm512_reduce_add_epi32(a14) + _mm512_reduce_add_epi32(a15) + _mm512_reduce_add_epi32(a16) + _mm512_reduce_add_epi32(a17) + _mm512_reduce_add_epi32(a18) + _mm512_reduce_add_epi32(a19);
	double sf2 = _mm512_reduce_add_ps(f0) + _mm512_reduce_add_ps(f1) + _mm512_reduce_add_ps(f2) + _mm512_reduce_add_ps(f3) + _mm512_reduce_add_ps(f4) + _mm512_reduce_add_ps(f5) + _mm512_reduce_add_ps(f6) + _mm512_reduce_add_ps(f7) + _mm512_reduce_add_ps(f8) + _mm512_reduce_add_ps(f9) + _mm512_reduce_add_ps(f10) + _mm512_reduce_add_ps(f11) + _mm512_reduce_add_ps(f12) + _mm512_reduce_add_ps(f13) + _mm512_reduce_add_ps(f14) + _mm512_reduce_add_ps(f15) + _mm512_reduce_add_ps(f16) + _mm512_reduce_add_ps(f17) + _mm512_reduce_add_ps(f18) + _mm512_reduce_add_ps(f19);
	printf("units: vpdpbusd %.3f ns, vfmadd231ps %.3f ns an instruction (20 chains; sums %lld %g)\n", tdp / n / 20 * 1e9,
	       tfm / n / 20 * 1e9, si, sf2);
}

/* prepare makes head h's fixed-point query (NDIG*8 bits, relative to its
   largest |q|) and its signed base-256 digits, weights and correction. */
static void prepare(void) {
	for (int h = 0; h < G; h++) {
		float m = 0;
		for (int i = 0; i < D; i++) m = fabsf(q[h * D + i]) > m ? fabsf(q[h * D + i]) : m;
		/* the fixed point's step: balanced digits reach 127·(256^NDIG − 1)/255,
		   short of 2^(8·NDIG − 1) */
		double unit = m / (double)(1LL << (8 * NDIG - 2));
		int64_t sum = 0;
		for (int i = 0; i < D; i++) {
			int64_t v = llrint(q[h * D + i] / unit);
			qi[h * D + i] = v;
			int64_t rest = v;
			for (int d = 0; d < NDIG; d++) { /* balanced digits in [-128, 127] */
				int64_t dig = ((rest + 128) & 255) - 128;
				rest = (rest - dig) >> 8;
				((int8_t *)qd)[((h * NDIG + d) * 32 + i / 4) * 4 + i % 4] = (int8_t)dig;
				if (d == NDIG - 1 && rest != 0) abort();
			}
			sum += v;
		}
		for (int d = 0; d < NDIG; d++) qw[h * NDIG + d] = (float)(unit * (double)(1LL << (8 * d)));
		qc[h] = (float)(-128.0 * unit * (double)sum); /* the codes were stored +128 (xor 0x80) */
	}
}

static void check(void) {
	vnni_t();
	double worst = 0;
	for (int h = 0; h < G; h++)
		for (int r = 0; r < ROWS; r++) {
			int64_t exact = 0;
			for (int i = 0; i < D; i++) exact += qi[h * D + i] * K[r * D + i];
			double unit = qw[h * NDIG];
			double e = fabs(sv[h * ROWS + r] - unit * (double)exact) / (unit * (1LL << (8 * NDIG - 2)) * 127 * D);
			worst = e > worst ? e : worst;
		}
	printf("vnni scores against the exact fixed-point dot products: worst error %.3g of max|q|·127·D\n", worst);
}

int main(void) {
	srand(1);
	for (int i = 0; i < ROWS * D; i++) K[i] = (int8_t)(rand() % 255 - 127);
	for (int i = 0; i < G * D; i++) q[i] = (float)(rand() % 65536) / 32768 - 1;
	prepare();
	check();
	units();
	void (*f[3])(void) = {fma_block, vnni_t, vnni_0};
	const char *name[3] = {"fma (widen, tree)", "vnni (transposed)", "vnni0 (no transpose)"};
	double best[3] = {1e9, 1e9, 1e9};
	for (int rep = 0; rep < 5; rep++)
		for (int m = 0; m < 3; m++) {
			const int it = 10000;
			f[m]();
			double t = now();
			for (int k = 0; k < it; k++) {
				f[m]();
				sink = sf[k % (G * ROWS)] + sv[k % (G * ROWS)];
			}
			t = (now() - t) / it / ROWS * 1e9;
			best[m] = t < best[m] ? t : best[m];
		}
	for (int m = 0; m < 3; m++) printf("%-22s %6.2f ns a row (best of 5), NDIG %d\n", name[m], best[m], NDIG);
	return 0;
}
