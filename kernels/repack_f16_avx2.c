/* repack_f16_avx2.c - the AVX2 tiles of packed F16 and BF16 groups
 * (kernels/repack_f16.c): per k, one vcvtph2ps (F16) or vpmovzxwd + vpslld
 * (BF16, exact) gives 8 rows' weights, a broadcast gives the activation, one
 * FMA advances 8 outputs' chains.  G groups x C activation rows of chains
 * are in flight; each lane is the spec's fmaf chain (BF16: its pairs, the
 * odd element first, under FTZ and DAZ). */
#include <immintrin.h>

#include "kernels/repack.h"
#include "kernels/repack_tile.h"

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
 * one thread: 27-29 GB/s against 19-20).  4 streams per thread, with or
 * without the prefetch, were level with 8 there (2026-12-07, 10
 * alternating rounds; bench/tier_speed.md).  Prefill reuses each group
 * from cache. */
#define F16_PF 1024

/* 8 rows' element k as floats */
AI __m256 wload(const bool bf, const uint16_t *p) {
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (bf) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* BF16 steps through K as the spec's pairs: element k + 1 before k (a zero
 * step, acc + 0 x 0, where k + 1 = K), FTZ and DAZ set by the caller */
#define K_ORDER(STEP, ZERO)                             \
    if (!bf)                                            \
        for (int64_t k = 0; k < K; k++) STEP(k)         \
    else {                                              \
        int64_t k = 0;                                  \
        for (; k + 1 < K; k += 2) { STEP(k + 1) STEP(k) } \
        if (k < K) { ZERO STEP(k) }                     \
    }

/* G groups x C activation rows (G = 8 with C = 1, or G <= 2 with C <= 6): at
 * most 12 chains, so they stay in registers */
AI void tile(const bool bf, int64_t K, const int G, const int C, float *y, size_t ldy, const uint16_t *w,
             const float *a, size_t ba) {
    const __m256 z = _mm256_setzero_ps();
    __m256 acc0 = z, acc1 = z, acc2 = z, acc3 = z, acc4 = z, acc5 = z, acc6 = z, acc7 = z;
    const size_t gs = (size_t)K * KERN_PACK_ROWS; /* halves per group */
#define W(g, k) wload(bf, w + (size_t)(g) * gs + (size_t)(k) * 8)
#define A(c, k) _mm256_broadcast_ss(a + (size_t)(c) * ba + (size_t)(k))
#define F(acc, wv, av) acc = _mm256_fmadd_ps(wv, av, acc)
#define Z(acc) acc = _mm256_add_ps(acc, z)
    if (G == 8) { /* C == 1 */
        const bool l2 = kern_prefetch_l2();
#define STEP8(k)                                                                                       \
    {                                                                                                  \
        if (((k) & 3) == 0) { /* a new line of every group's stream (4 k x 8 rows x 2 bytes); past */  \
            /* a group's end, the next run's (repack_tile.h dec_skip) */                                \
            const size_t nx = dec_skip((size_t)(k) * 16, 64, F16_PF, 2 * gs, 8);                       \
            for (int g = 0; g < 8; g++) {                                                              \
                const char *p = (const char *)(w + (size_t)g * gs + (size_t)(k) * 8) + F16_PF + nx;    \
                if (l2) _mm_prefetch(p, _MM_HINT_T1);                                                  \
                else _mm_prefetch(p, _MM_HINT_T0);                                                     \
            }                                                                                          \
        }                                                                                              \
        const __m256 av = A(0, k);                                                                     \
        F(acc0, W(0, k), av); F(acc1, W(1, k), av); F(acc2, W(2, k), av); F(acc3, W(3, k), av);        \
        F(acc4, W(4, k), av); F(acc5, W(5, k), av); F(acc6, W(6, k), av); F(acc7, W(7, k), av);        \
    }
#define ZERO8 { Z(acc0); Z(acc1); Z(acc2); Z(acc3); Z(acc4); Z(acc5); Z(acc6); Z(acc7); }
        K_ORDER(STEP8, ZERO8)
#undef STEP8
#undef ZERO8
        __m256 r[8] = {acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7};
        for (int g = 0; g < 8; g++) _mm256_storeu_ps(y + (size_t)g * 8, r[g]);
        return;
    }
    /* G <= 2, C <= 6: 12 chains, a[c] * w[g] -> acc[g][c] */
    __m256 b0 = z, b1 = z, b2 = z, b3 = z, b4 = z, b5 = z, b6 = z, b7 = z, b8 = z, b9 = z, b10 = z, b11 = z;
#define COL(c, x0, x1, k)                    \
    if (C > c) {                             \
        const __m256 av = A(c, k);           \
        F(x0, w0, av);                       \
        if (G > 1) F(x1, w1, av);            \
    }
#define STEP(k)                                                                                           \
    {                                                                                                     \
        const __m256 w0 = W(0, k), w1 = G > 1 ? W(1, k) : w0;                                            \
        COL(0, b0, b6, k) COL(1, b1, b7, k) COL(2, b2, b8, k) COL(3, b3, b9, k) COL(4, b4, b10, k)        \
        COL(5, b5, b11, k)                                                                                \
    }
#define ZERO { Z(b0); Z(b1); Z(b2); Z(b3); Z(b4); Z(b5); Z(b6); Z(b7); Z(b8); Z(b9); Z(b10); Z(b11); }
    K_ORDER(STEP, ZERO)
#undef STEP
#undef ZERO
#undef COL
#undef W
#undef A
#undef F
#undef Z
    __m256 r[12] = {b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11};
    for (int g = 0; g < G; g++)
        for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy + (size_t)g * 8, r[6 * g + c]);
}
#undef K_ORDER

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

static void tile_f16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const void *a, size_t ba) {
    tile_any(false, K, G, C, y, ldy, w, a, ba);
}
/* BF16: the spec's flushes are MXCSR's FTZ (bit 15) and DAZ (bit 6) for the call */
static void tile_bf16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const void *a, size_t ba) {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);
    tile_any(true, K, G, C, y, ldy, w, a, ba);
    _mm_setcsr(csr);
}

kern_pack_f16_tile_fn kern_pack_f16_tile_avx2(void) { return tile_f16; }
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx2(void) { return tile_bf16; }
