/* repack_f16_avx2.c - the AVX2 tiles of packed F16 and BF16 groups
 * (kernels/repack_f16.c): per k, one vcvtph2ps (F16) or vpmovzxwd + vpslld
 * (BF16, exact) gives 8 rows' weights, a broadcast gives the activation, one
 * FMA advances 8 outputs' chains.  G groups x C activation rows of chains
 * are in flight; each lane is the spec's fmaf chain. */
#include <immintrin.h>

#include "kernels/repack.h"

#define AI static inline __attribute__((always_inline))

/* Decode (C = 1) reads the 8 groups once from memory, 8 streams per thread;
 * the hardware prefetchers alone left the Intel Xeon of bench/tier_speed.md
 * waiting on them (tinyllama-1.1b F16 tg32, 2 threads: 9.6-10.2 t/s without,
 * 11.8 with a T0 prefetch 1024 bytes ahead; 2048 gave 11.0-11.1, an added
 * L2 prefetch 8192 ahead 11.0-11.5).  Where kern_prefetch_l2 (Zen 4) the
 * prefetch goes to L2 (T1) instead: 8 groups x 1024 bytes of lines in
 * flight outnumber the L1's miss buffers, and on Zen 4 (family 25 model
 * 17) T1 decoded F16 at 16.5-17.2 t/s against 14.8-15.9 with T0, BF16 at
 * 16.5-17.1 against 14.5-14.9 (alternating kvant bench tg32; kvant-kernels,
 * one thread: 27-29 GB/s against 19-20).  Prefill reuses each group from
 * cache. */
#define F16_PF 1024

/* 8 rows' element k as floats */
AI __m256 wload(const bool bf, const uint16_t *p) {
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (bf) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* G groups x C activation rows (G = 8 with C = 1, or G <= 2 with C <= 6): at
 * most 12 chains, so they stay in registers */
AI void tile(const bool bf, int64_t K, const int G, const int C, float *y, size_t ldy, const uint16_t *w,
             const float *a, size_t ba) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0, acc5 = acc0, acc6 = acc0,
           acc7 = acc0;
    const size_t gs = (size_t)K * KERN_PACK_ROWS; /* halves per group */
#define W(g) wload(bf, w + (size_t)(g) * gs + (size_t)k * 8)
#define A(c) _mm256_broadcast_ss(a + (size_t)(c) * ba + (size_t)k)
#define F(acc, wv, av) acc = _mm256_fmadd_ps(wv, av, acc)
    if (G == 8) { /* C == 1 */
        const bool l2 = kern_prefetch_l2();
        for (int64_t k = 0; k < K; k++) {
            if ((k & 3) == 0) /* a new line of every group's stream (4 k x 8 rows x 2 bytes) */
                for (int g = 0; g < 8; g++) {
                    const char *p = (const char *)(w + (size_t)g * gs + (size_t)k * 8) + F16_PF;
                    if (l2) _mm_prefetch(p, _MM_HINT_T1);
                    else _mm_prefetch(p, _MM_HINT_T0);
                }
            const __m256 av = A(0);
            F(acc0, W(0), av); F(acc1, W(1), av); F(acc2, W(2), av); F(acc3, W(3), av);
            F(acc4, W(4), av); F(acc5, W(5), av); F(acc6, W(6), av); F(acc7, W(7), av);
        }
        __m256 r[8] = {acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7};
        for (int g = 0; g < 8; g++) _mm256_storeu_ps(y + (size_t)g * 8, r[g]);
        return;
    }
    /* G <= 2, C <= 6: 12 chains, a[c] * w[g] -> acc[g][c] */
    __m256 b0 = acc0, b1 = acc0, b2 = acc0, b3 = acc0, b4 = acc0, b5 = acc0, b6 = acc0, b7 = acc0, b8 = acc0,
           b9 = acc0, b10 = acc0, b11 = acc0;
    for (int64_t k = 0; k < K; k++) {
        const __m256 w0 = W(0), w1 = G > 1 ? W(1) : w0;
#define COL(c, x0, x1)                       \
    if (C > c) {                             \
        const __m256 av = A(c);              \
        F(x0, w0, av);                       \
        if (G > 1) F(x1, w1, av);            \
    }
        COL(0, b0, b6) COL(1, b1, b7) COL(2, b2, b8) COL(3, b3, b9) COL(4, b4, b10) COL(5, b5, b11)
#undef COL
    }
#undef W
#undef A
#undef F
    __m256 r[12] = {b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11};
    for (int g = 0; g < G; g++)
        for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy + (size_t)g * 8, r[6 * g + c]);
}

/* any G x C (the driver gives G = 8 with C = 1, or G <= 2 with C <= 6) */
AI void tile_any(const bool bf, int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const float *a,
                 size_t ba) {
    const size_t gs = (size_t)K * KERN_PACK_ROWS;
    for (int c0 = 0; c0 < C; c0 += 6) {
        const int cc = C - c0 < 6 ? C - c0 : 6;
        float *yc = y + (size_t)c0 * ldy;
        const float *ac = a + (size_t)c0 * ba;
        int g = 0;
        if (cc == 1)
            for (; G - g >= 8; g += 8) tile(bf, K, 8, 1, yc + (size_t)g * 8, ldy, w + (size_t)g * gs, ac, ba);
#define CASE_C(GG)                                                                                   \
    switch (cc) {                                                                                    \
    case 1: tile(bf, K, GG, 1, yc + (size_t)g * 8, ldy, w + (size_t)g * gs, ac, ba); break;          \
    case 2: tile(bf, K, GG, 2, yc + (size_t)g * 8, ldy, w + (size_t)g * gs, ac, ba); break;          \
    case 3: tile(bf, K, GG, 3, yc + (size_t)g * 8, ldy, w + (size_t)g * gs, ac, ba); break;          \
    case 4: tile(bf, K, GG, 4, yc + (size_t)g * 8, ldy, w + (size_t)g * gs, ac, ba); break;          \
    case 5: tile(bf, K, GG, 5, yc + (size_t)g * 8, ldy, w + (size_t)g * gs, ac, ba); break;          \
    default: tile(bf, K, GG, 6, yc + (size_t)g * 8, ldy, w + (size_t)g * gs, ac, ba); break;         \
    }
        for (; G - g >= 2; g += 2) { CASE_C(2) }
        if (G - g == 1) { CASE_C(1) }
#undef CASE_C
    }
}

static void tile_f16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const float *a, size_t ba) {
    tile_any(false, K, G, C, y, ldy, w, a, ba);
}
static void tile_bf16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const float *a, size_t ba) {
    tile_any(true, K, G, C, y, ldy, w, a, ba);
}

kern_pack_f16_tile_fn kern_pack_f16_tile_avx2(void) { return tile_f16; }
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx2(void) { return tile_bf16; }
