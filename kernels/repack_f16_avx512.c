/* repack_f16_avx512.c - the AVX-512 tiles of packed F16 and BF16 groups
 * (kernels/repack_f16.c).  A zmm holds element k of two groups (16 outputs:
 * the two 16-byte rows of halves joined by one vinserti128, then vcvtph2ps,
 * or for BF16 vpmovzxwd + vpslld, exact); a broadcast activation and one
 * FMA advance 16 outputs' chains.  Lanes are different outputs, each lane
 * the spec's fmaf chain in k order, so the outputs are the AVX2 tile's and
 * the ref's bits.  An odd group left over runs in a ymm (the same FMA).
 * Prefill: 2 pairs x 12 activation rows (24 chains, the weights converted
 * once per 12 rows; ~1.9x the AVX2 tile).  C = 1 runs 8 pairs (16 groups,
 * 8 chains); the driver decodes with the AVX2 tile instead, which measured
 * faster (kernels/repack_f16.c shape_of), so C = 1 here serves the prefill
 * tails. */
#include <immintrin.h>

#include "kernels/repack.h"

#define AI static inline __attribute__((always_inline))

/* element k of the groups at p and p + gs (halves) as 16 floats */
AI __m512 wpair(const bool bf, const uint16_t *p, size_t gs) {
    const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
                                              _mm_loadu_si128((const __m128i *)(p + gs)), 1);
    if (bf) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}
/* one group's element k as 8 floats */
AI __m256 wone(const bool bf, const uint16_t *p) {
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (bf) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* NP (<= 8) pairs of groups (+ one group if ODD) x C (<= 12) activation rows:
 * NP * C + ODD * C chains (<= 26 live; fixed-size arrays, fully unrolled, so
 * they are registers) */
#define UNROLL _Pragma("GCC unroll 16")
AI void tile(const bool bf, int64_t K, const int NP, const bool ODD, const int C, float *y, size_t ldy,
             const uint16_t *w, const float *a, size_t ba) {
    const size_t gs = (size_t)K * KERN_PACK_ROWS; /* halves per group */
    __m512 acc[8][12];
    __m256 acch[12];
    UNROLL for (int p = 0; p < NP; p++) UNROLL for (int c = 0; c < C; c++) acc[p][c] = _mm512_setzero_ps();
    UNROLL for (int c = 0; c < C; c++) acch[c] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const uint16_t *wk = w + (size_t)k * KERN_PACK_ROWS;
        __m512 wv[8];
        UNROLL for (int p = 0; p < NP; p++) wv[p] = wpair(bf, wk + 2 * (size_t)p * gs, gs);
        __m256 wh = _mm256_setzero_ps();
        if (ODD) wh = wone(bf, wk + 2 * (size_t)NP * gs);
        UNROLL for (int c = 0; c < C; c++) {
            const float ac = a[(size_t)c * ba + (size_t)k];
            const __m512 av = _mm512_set1_ps(ac);
            UNROLL for (int p = 0; p < NP; p++) acc[p][c] = _mm512_fmadd_ps(wv[p], av, acc[p][c]);
            if (ODD) acch[c] = _mm256_fmadd_ps(wh, _mm256_set1_ps(ac), acch[c]);
        }
    }
    UNROLL for (int c = 0; c < C; c++) {
        UNROLL for (int p = 0; p < NP; p++) _mm512_storeu_ps(y + (size_t)c * ldy + (size_t)p * 16, acc[p][c]);
        if (ODD) _mm256_storeu_ps(y + (size_t)c * ldy + (size_t)NP * 16, acch[c]);
    }
}
#undef UNROLL

#define C_CASES(NP, ODD)                                                                           \
    switch (cc) {                                                                                  \
    case 1: tile(bf, K, NP, ODD, 1, yg, ldy, wg, ac, ba); break;                                   \
    case 2: tile(bf, K, NP, ODD, 2, yg, ldy, wg, ac, ba); break;                                   \
    case 3: tile(bf, K, NP, ODD, 3, yg, ldy, wg, ac, ba); break;                                   \
    case 4: tile(bf, K, NP, ODD, 4, yg, ldy, wg, ac, ba); break;                                   \
    case 5: tile(bf, K, NP, ODD, 5, yg, ldy, wg, ac, ba); break;                                   \
    case 6: tile(bf, K, NP, ODD, 6, yg, ldy, wg, ac, ba); break;                                   \
    case 7: tile(bf, K, NP, ODD, 7, yg, ldy, wg, ac, ba); break;                                   \
    case 8: tile(bf, K, NP, ODD, 8, yg, ldy, wg, ac, ba); break;                                   \
    case 9: tile(bf, K, NP, ODD, 9, yg, ldy, wg, ac, ba); break;                                   \
    case 10: tile(bf, K, NP, ODD, 10, yg, ldy, wg, ac, ba); break;                                 \
    case 11: tile(bf, K, NP, ODD, 11, yg, ldy, wg, ac, ba); break;                                 \
    default: tile(bf, K, NP, ODD, 12, yg, ldy, wg, ac, ba); break;                                 \
    }

/* any G x C: decode (C = 1) in blocks of 16 groups, then pairs; prefill in
 * blocks of 4 groups x <= 12 rows, then a pair, then a single group */
AI void tile_any(const bool bf, int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const float *a,
                 size_t ba) {
    const size_t gs = (size_t)K * KERN_PACK_ROWS;
    if (C == 1) {
        int g = 0;
        for (; G - g >= 16; g += 16) tile(bf, K, 8, false, 1, y + (size_t)g * 8, ldy, w + (size_t)g * gs, a, ba);
        float *yg = y + (size_t)g * 8;
        const uint16_t *wg = w + (size_t)g * gs;
        switch (G - g) {
        case 0: break;
        case 1: tile(bf, K, 0, true, 1, yg, ldy, wg, a, ba); break;
        case 2: tile(bf, K, 1, false, 1, yg, ldy, wg, a, ba); break;
        case 3: tile(bf, K, 1, true, 1, yg, ldy, wg, a, ba); break;
        case 4: tile(bf, K, 2, false, 1, yg, ldy, wg, a, ba); break;
        case 5: tile(bf, K, 2, true, 1, yg, ldy, wg, a, ba); break;
        case 6: tile(bf, K, 3, false, 1, yg, ldy, wg, a, ba); break;
        case 7: tile(bf, K, 3, true, 1, yg, ldy, wg, a, ba); break;
        case 8: tile(bf, K, 4, false, 1, yg, ldy, wg, a, ba); break;
        case 9: tile(bf, K, 4, true, 1, yg, ldy, wg, a, ba); break;
        case 10: tile(bf, K, 5, false, 1, yg, ldy, wg, a, ba); break;
        case 11: tile(bf, K, 5, true, 1, yg, ldy, wg, a, ba); break;
        case 12: tile(bf, K, 6, false, 1, yg, ldy, wg, a, ba); break;
        case 13: tile(bf, K, 6, true, 1, yg, ldy, wg, a, ba); break;
        case 14: tile(bf, K, 7, false, 1, yg, ldy, wg, a, ba); break;
        default: tile(bf, K, 7, true, 1, yg, ldy, wg, a, ba); break;
        }
        return;
    }
    for (int c0 = 0; c0 < C; c0 += 12) {
        const int cc = C - c0 < 12 ? C - c0 : 12;
        const float *ac = a + (size_t)c0 * ba;
        int g = 0;
        for (; G - g >= 4; g += 4) {
            float *yg = y + (size_t)c0 * ldy + (size_t)g * 8;
            const uint16_t *wg = w + (size_t)g * gs;
            C_CASES(2, false)
        }
        float *yg = y + (size_t)c0 * ldy + (size_t)g * 8;
        const uint16_t *wg = w + (size_t)g * gs;
        if (G - g == 3) { C_CASES(1, true) }
        else if (G - g == 2) { C_CASES(1, false) }
        else if (G - g == 1) { C_CASES(0, true) }
    }
}
#undef C_CASES

static void tile_f16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const float *a, size_t ba) {
    tile_any(false, K, G, C, y, ldy, w, a, ba);
}
static void tile_bf16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const float *a, size_t ba) {
    tile_any(true, K, G, C, y, ldy, w, a, ba);
}

kern_pack_f16_tile_fn kern_pack_f16_tile_avx512(void) { return tile_f16; }
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx512(void) { return tile_bf16; }
