/* sparse24_avx2.c - AVX2 (+FMA, F16C) kernels of the 2:4 sparse types
 * (layouts and _ref spec in kernels/sparse24.h / sparse24.c).
 *
 * Instead of expanding the weights to dense, the kernels gather the
 * activations that meet the kept weights:
 *  - S24_F16 x F32: 8 kept values (4 groups = 16 activations) per step;
 *    the slots are ordered so that in-lane vpermilps does the gather:
 *    vpermilps(a[0..8)) gives groups 0 | 1 per 128-bit lane, vpermilps
 *    (a[8..16)) groups 2 | 3, one blend takes lanes 2,3,6,7 from the second
 *    (slot groups 0,0,2,2,1,1,3,3).  vpermilps reads only the low 2 bits
 *    of each index lane, so the index is the idx word shifted per lane,
 *    nothing more.  (vpermps, lane-crossing, is ~4x slower on Zen 3.)
 *  - S24_Q8 x S24_A8: 32 kept int8 values (64 activations) per step; the
 *    activations are stored by 128-bit lanes as the weights need them, so
 *    two vpshufb pick the bytes (index = 4*group + position from the idx
 *    words with a permute, a variable shift, an AND and an add), one
 *    blend, then the usual vpmaddubsw / vpmaddwd integer dot; dwords 0-3
 *    belong to the first half of the activations, 4-7 to the second, each
 *    scaled by d_w * d_a (d_a stored as 4 + 4 floats).
 *    Exact integer sums as _ref when the activation bytes are in
 *    [-127, 127] (every Q8_0 quantizer here guarantees it).
 * Float results differ from _ref only by summation order (bound: tests/
 * test_sparse24.c).  gemm tiles (kern_gemm_fn) run as 2 x 2 sub-tiles;
 * vec_dot is the 1 x 1 tile, so gemm outputs are bit-identical to it.
 * Dimension letters: n elements per row; a tile has R weight rows, C
 * activation rows. */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/avx2_common.h"
#include "kernels/quants.h"
#include "kernels/sparse24.h"
#include "kernels/tiers.h"

#define INLINE static inline __attribute__((always_inline))

/* ---- S24_F16 x F32 ------------------------------------------------------------ */
/* x: R rows of n/32 blocks, bx bytes apart; a: C rows of n floats, ba bytes apart.
 * Per output, four 8-lane accumulators: slots 0-7 and 8-15 of even blocks
 * (acc[0], acc[1]) and of odd blocks (acc[2], acc[3]), so four FMA chains
 * run in parallel; s = hsum((acc0 + acc1) + (acc2 + acc3)). */
INLINE void f16_block(const int R, const int C, int64_t b, const void *x, size_t bx, const void *a, size_t ba,
                      __m256 (*acc)[2][4], const int h) {
    const __m256i sh0 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i sh1 = _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30);
    __m256 w0[2], w1[2];
    __m256i i0[2], i1[2];
    for (int r = 0; r < R; r++) {
        const block_s24_f16 *xb = (const block_s24_f16 *)((const uint8_t *)x + r * bx) + b;
        w0[r] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)xb->v));
        w1[r] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(xb->v + 8)));
        const __m256i m = _mm256_set1_epi32(*(const int32_t *)&xb->idx);
        i0[r] = _mm256_srlv_epi32(m, sh0);
        i1[r] = _mm256_srlv_epi32(m, sh1);
    }
    for (int c = 0; c < C; c++) {
        const float *ac = (const float *)((const uint8_t *)a + c * ba) + b * QK_S24_F16;
        const __m256 a0 = _mm256_loadu_ps(ac), a1 = _mm256_loadu_ps(ac + 8);
        const __m256 a2 = _mm256_loadu_ps(ac + 16), a3 = _mm256_loadu_ps(ac + 24);
        for (int r = 0; r < R; r++) {
            const __m256 g0 = _mm256_blend_ps(_mm256_permutevar_ps(a0, i0[r]), _mm256_permutevar_ps(a1, i0[r]), 0xCC);
            const __m256 g1 = _mm256_blend_ps(_mm256_permutevar_ps(a2, i1[r]), _mm256_permutevar_ps(a3, i1[r]), 0xCC);
            acc[r][c][h] = _mm256_fmadd_ps(w0[r], g0, acc[r][c][h]);
            acc[r][c][h + 1] = _mm256_fmadd_ps(w1[r], g1, acc[r][c][h + 1]);
        }
    }
}

INLINE void tile_f16(int64_t n, const int R, const int C, float *y, size_t ldy, const void *x, size_t bx,
                     const void *a, size_t ba) {
    __m256 acc[2][2][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            for (int k = 0; k < 4; k++) acc[r][c][k] = _mm256_setzero_ps();
    const int64_t nb = n / QK_S24_F16;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        if (C == 1) kern_s24_prefetch(x, bx, R, (size_t)b * sizeof(block_s24_f16));
        f16_block(R, C, b, x, bx, a, ba, acc, 0);
        f16_block(R, C, b + 1, x, bx, a, ba, acc, 2);
    }
    if (b < nb) f16_block(R, C, b, x, bx, a, ba, acc, 0);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            y[c * ldy + r] = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[r][c][0], acc[r][c][1]),
                                                   _mm256_add_ps(acc[r][c][2], acc[r][c][3])));
}

/* ---- S24_Q8 x S24_A8 ----------------------------------------------------------- */
INLINE void tile_q8(int64_t n, const int R, const int C, float *y, size_t ldy, const void *x, size_t bx,
                    const void *a, size_t ba) {
    const __m256i perm = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m256i three = _mm256_set1_epi8(3);
    const __m256i off = _mm256_setr_epi8(0, 0, 4, 4, 8, 8, 12, 12, 0, 0, 4, 4, 8, 8, 12, 12,
                                         0, 0, 4, 4, 8, 8, 12, 12, 0, 0, 4, 4, 8, 8, 12, 12);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2][2];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
    const int64_t nb = n / QK_S24_Q8;
    for (int64_t b = 0; b < nb; b++) {
        if (C == 1 && (b & 1) == 0) kern_s24_prefetch(x, bx, R, (size_t)b * sizeof(block_s24_q8));
        __m256i wabs[2], wq[2], idx[2];
        float dw[2];
        for (int r = 0; r < R; r++) {
            const block_s24_q8 *xb = (const block_s24_q8 *)((const uint8_t *)x + r * bx) + b;
            dw[r] = _cvtsh_ss(xb->d);
            wq[r] = _mm256_loadu_si256((const __m256i *)xb->q);
            wabs[r] = _mm256_sign_epi8(wq[r], wq[r]);
            const __m256i m = _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)xb->idx)), perm);
            idx[r] = _mm256_add_epi8(_mm256_and_si256(_mm256_srlv_epi32(m, sh), three), off);
        }
        for (int c = 0; c < C; c++) {
            const block_s24_a8 *ab = (const block_s24_a8 *)((const uint8_t *)a + c * ba) + b;
            const __m256i X = _mm256_loadu_si256((const __m256i *)ab->x), Y = _mm256_loadu_si256((const __m256i *)ab->y);
            const __m256 da = _mm256_loadu_ps(ab->d);
            for (int r = 0; r < R; r++) {
                const __m256i g = _mm256_blend_epi32(_mm256_shuffle_epi8(X, idx[r]), _mm256_shuffle_epi8(Y, idx[r]), 0xCC);
                const __m256i p16 = _mm256_maddubs_epi16(wabs[r], _mm256_sign_epi8(g, wq[r]));
                const __m256i p32 = _mm256_madd_epi16(p16, ones);
                const __m256 sc = _mm256_mul_ps(_mm256_set1_ps(dw[r]), da);
                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), sc, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) y[c * ldy + r] = hsum_ps(acc[r][c]);
}

/* entry points: vec_dot = the 1 x 1 tile; gemm = 2 x 2 sub-tiles */
#define ENTRIES(name, TILE)                                                                                   \
    static void vec_dot_##name(int64_t n, float *s, const void *x, const void *y) {                          \
        TILE(n, 1, 1, s, 1, x, 0, y, 0);                                                                     \
    }                                                                                                         \
    static void gemm_##name(int64_t n, int nr, int nc, float *y, size_t ldy, const void *x, size_t bx,       \
                            const void *a, size_t ba) {                                                       \
        for (int r0 = 0; r0 < nr; r0 += 2)                                                                    \
            for (int c0 = 0; c0 < nc; c0 += 2) {                                                              \
                const uint8_t *xr = (const uint8_t *)x + (size_t)r0 * bx;                                     \
                const uint8_t *ac = (const uint8_t *)a + (size_t)c0 * ba;                                     \
                float *yt = y + (size_t)c0 * ldy + r0;                                                        \
                const int R = nr - r0 >= 2 ? 2 : 1, C = nc - c0 >= 2 ? 2 : 1;                                 \
                if (R == 2 && C == 2) TILE(n, 2, 2, yt, ldy, xr, bx, ac, ba);                                 \
                else if (R == 2) TILE(n, 2, 1, yt, ldy, xr, bx, ac, ba);                                      \
                else if (C == 2) TILE(n, 1, 2, yt, ldy, xr, bx, ac, ba);                                      \
                else TILE(n, 1, 1, yt, ldy, xr, bx, ac, ba);                                                  \
            }                                                                                                 \
    }

ENTRIES(s24_f16, tile_f16)
ENTRIES(s24_q8, tile_q8)

/* ---- S24_A8 activations: x n floats -> blocks of 64 ------------------------------ */
static void quant_s24_a8(const float *x, void *vy, int64_t n) {
    block_s24_a8 *y = vy;
    for (int64_t b = 0; b < n / QK_S24_Q8; b++, x += QK_S24_Q8)
        for (int h = 0; h < 2; h++) {
            int8_t q[32];
            const float d = quant_block_q8(x + 32 * h, q, NULL);
            for (int k = 0; k < 4; k++) y[b].d[4 * h + k] = d;
            memcpy(y[b].x + 16 * h, q, 16);
            memcpy(y[b].y + 16 * h, q + 16, 16);
        }
}

void kern_sparse24_avx2_install(kern_type_ops *f16, kern_type_ops *q8, kern_type_ops *a8) {
    a8->from_float = quant_s24_a8;
    f16->vec_dot = vec_dot_s24_f16;
    f16->gemm = gemm_s24_f16;
    q8->vec_dot = vec_dot_s24_q8;
    q8->gemm = gemm_s24_q8;
}
