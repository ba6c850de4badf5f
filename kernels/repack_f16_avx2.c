/* repack_f16_avx2.c - the AVX2 tile of packed F16 groups (kernels/repack_f16.c):
 * per k, one vcvtph2ps gives 8 rows' weights, a broadcast gives the
 * activation, one FMA advances 8 outputs' chains.  G groups x C activation
 * rows of chains are in flight; each lane is the spec's fmaf chain. */
#include <immintrin.h>

#include "kernels/repack.h"

#define AI static inline __attribute__((always_inline))

/* G groups x C activation rows (G = 8 with C = 1, or G <= 2 with C <= 6): at
 * most 12 chains, so they stay in registers */
AI void tile(int64_t K, const int G, const int C, float *y, size_t ldy, const uint16_t *w, const float *a, size_t ba) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0, acc5 = acc0, acc6 = acc0,
           acc7 = acc0;
    const size_t gs = (size_t)K * KERN_PACK_ROWS; /* halves per group */
#define W(g) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + (size_t)(g) * gs + (size_t)k * 8)))
#define A(c) _mm256_broadcast_ss(a + (size_t)(c) * ba + (size_t)k)
#define F(acc, wv, av) acc = _mm256_fmadd_ps(wv, av, acc)
    if (G == 8) { /* C == 1 */
        for (int64_t k = 0; k < K; k++) {
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

static void tile_f16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const float *a, size_t ba) {
#define CASE_C(GG)                                                   \
    switch (C) {                                                     \
    case 1: tile(K, GG, 1, y, ldy, w, a, ba); break;                 \
    case 2: tile(K, GG, 2, y, ldy, w, a, ba); break;                 \
    case 3: tile(K, GG, 3, y, ldy, w, a, ba); break;                 \
    case 4: tile(K, GG, 4, y, ldy, w, a, ba); break;                 \
    case 5: tile(K, GG, 5, y, ldy, w, a, ba); break;                 \
    default: tile(K, GG, 6, y, ldy, w, a, ba); break;                \
    }
    if (G == 8 && C == 1) tile(K, 8, 1, y, ldy, w, a, ba);
    else if (G == 2) { CASE_C(2) }
    else if (G == 1) { CASE_C(1) }
    else /* other shapes: group by group */
        for (int g = 0; g < G; g++) tile_f16(K, 1, C, y + (size_t)g * 8, ldy, w + (size_t)g * (size_t)K * KERN_PACK_ROWS, a, ba);
#undef CASE_C
}

kern_pack_f16_tile_fn kern_pack_f16_tile_avx2(void) { return tile_f16; }
