/* sparse24_avx512.c - AVX-512 (F/BW/VL/DQ/VNNI) kernels of the 2:4 sparse
 * types (layouts and _ref spec in kernels/sparse24.h / sparse24.c).
 *
 *  - S24_F16 x F32: one block (16 kept values, 32 activations) per zmm
 *    step: vcvtph2ps widens the 16 halves, and ONE two-source vpermt2ps
 *    over the block's 32 activations (two zmm) picks the 16 that meet
 *    them.  Its index is 16*(k/8) + 4*grp[k%8] + pos_k: the idx word
 *    broadcast, shifted per lane by 2k (vpsrlvd) and merged with the
 *    constant base by one vpternlogd ((m & 3) | base); vpermt2ps reads
 *    only the low 5 bits.  No AVX2-style 2 x vpermilps + blend per 8.
 *  - S24_Q8 x S24_A8: the AVX2 byte gather (two in-lane vpshufb + blend)
 *    on two blocks per zmm, and the integer dot is one VNNI vpdpbusd
 *    (|w| x sign(a, w)) instead of vpmaddubsw + vpmaddwd; sums are exact
 *    int32 as in _ref (no saturation: vpdpbusd widens to 32 bits).  The
 *    256-bit form of one block per step left the Intel Xeon's 2:4 decode
 *    short of its dense Q8_0 (fewer instructions per weight byte here).
 * Equality contract as the AVX2 file: float results differ from _ref only
 * by summation order (bound: tests/test_sparse24.c); gemm tiles (R x C
 * sub-tiles, R <= 4, C <= 2) accumulate each output exactly as vec_dot
 * (the 1 x 1 tile) does, so gemm outputs are bit-identical to vec_dot.
 * Needs only the flags CMake gives *_avx512.c (no VBMI / VBMI2).
 * Dimension letters: n elements per row; a tile has R weight rows, C
 * activation rows. */
#include <immintrin.h>
#include <stddef.h>

#include "kernels/sparse24.h"
#include "kernels/tiers.h"

#define INLINE static inline __attribute__((always_inline))

/* ---- S24_F16 x F32 ------------------------------------------------------------ */
/* x: R rows of n/32 blocks, bx bytes apart; a: C rows of n floats, ba bytes apart.
 * Per output two 16-lane accumulators, even blocks (acc[0]) and odd (acc[1]);
 * s = reduce_add(acc0 + acc1). */
INLINE void f16_block(const int R, const int C, int64_t b, const void *x, size_t bx, const void *a, size_t ba,
                      __m512 (*acc)[2][2], const int h) {
    const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    /* 16*(k/8) + 4*grp[k%8], grp = 0,0,2,2,1,1,3,3 */
    const __m512i base = _mm512_setr_epi32(0, 0, 8, 8, 4, 4, 12, 12, 16, 16, 24, 24, 20, 20, 28, 28);
    const __m512i three = _mm512_set1_epi32(3);
    __m512 w[4];
    __m512i ix[4];
    for (int r = 0; r < R; r++) {
        const block_s24_f16 *xb = (const block_s24_f16 *)((const uint8_t *)x + r * bx) + b;
        w[r] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)xb->v));
        const __m512i m = _mm512_srlv_epi32(_mm512_set1_epi32(*(const int32_t *)&xb->idx), sh);
        ix[r] = _mm512_ternarylogic_epi32(m, three, base, 0xEA); /* (m & 3) | base */
    }
    for (int c = 0; c < C; c++) {
        const float *ac = (const float *)((const uint8_t *)a + c * ba) + b * QK_S24_F16;
        const __m512 a0 = _mm512_loadu_ps(ac), a1 = _mm512_loadu_ps(ac + 16);
        for (int r = 0; r < R; r++)
            acc[r][c][h] = _mm512_fmadd_ps(w[r], _mm512_permutex2var_ps(a0, ix[r], a1), acc[r][c][h]);
    }
}

INLINE void tile_f16(int64_t n, const int R, const int C, float *y, size_t ldy, const void *x, size_t bx,
                     const void *a, size_t ba) {
    __m512 acc[4][2][2];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c][0] = acc[r][c][1] = _mm512_setzero_ps();
    const int64_t nb = n / QK_S24_F16;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        if (C == 1) kern_s24_prefetch(x, bx, R, (size_t)b * sizeof(block_s24_f16));
        f16_block(R, C, b, x, bx, a, ba, acc, 0);
        f16_block(R, C, b + 1, x, bx, a, ba, acc, 1);
    }
    if (b < nb) f16_block(R, C, b, x, bx, a, ba, acc, 0);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) y[c * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][c][0], acc[r][c][1]));
}

/* ---- S24_Q8 x S24_A8 ----------------------------------------------------------- */
/* Two blocks per zmm: block b in the low 256 bits, b + 1 in the high (each
 * 128-bit lane is the AVX2 lane layout, so vpshufb stays in-lane).  AVX-512
 * has no vpsignb: the weights' signs go onto the gathered activations by a
 * masked subtract (vpmovb2m, then 0 - g where w < 0; w = 0 has |w| = 0).
 * Per output one 16-lane accumulator; lanes 0-3 / 4-7 hold block b's two
 * halves' integer sums, 8-11 / 12-15 block b + 1's, each scaled by
 * d_w * d_a.  An odd last block runs the same steps in a ymm (tail). */
INLINE void q8_pair(const int R, const int C, int64_t b, const void *x, size_t bx, const void *a, size_t ba,
                    __m512 (*acc)[2]) {
    const __m512i perm = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
    const __m512i three = _mm512_set1_epi8(3);
    const __m512i off = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 4, 4, 8, 8, 12, 12, 0, 0, 4, 4, 8, 8, 12, 12));
    __m512i wabs[4], idx[4];
    __mmask64 neg[4];
    __m512 dw[4];
    for (int r = 0; r < R; r++) {
        const block_s24_q8 *x0 = (const block_s24_q8 *)((const uint8_t *)x + r * bx) + b, *x1 = x0 + 1;
        const __m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x0->q)),
                                              _mm256_loadu_si256((const __m256i *)x1->q), 1);
        wabs[r] = _mm512_abs_epi8(wq);
        neg[r] = _mm512_movepi8_mask(wq);
        dw[r] = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)x0->d)),
                                                        _mm_set1_epi16((short)x1->d), 1));
        const __m128i w4 = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)x0->idx),
                                              _mm_loadl_epi64((const __m128i *)x1->idx));
        const __m512i m = _mm512_srlv_epi32(_mm512_permutexvar_epi32(perm, _mm512_castsi128_si512(w4)), sh);
        idx[r] = _mm512_ternarylogic_epi32(m, three, off, 0xEA); /* (m & 3) | off, per byte */
    }
    for (int c = 0; c < C; c++) {
        const block_s24_a8 *a0 = (const block_s24_a8 *)((const uint8_t *)a + c * ba) + b, *a1 = a0 + 1;
        const __m512i X = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a0->x)),
                                             _mm256_loadu_si256((const __m256i *)a1->x), 1);
        const __m512i Y = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a0->y)),
                                             _mm256_loadu_si256((const __m256i *)a1->y), 1);
        const __m512 da = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(a0->d)), _mm256_loadu_ps(a1->d), 1);
        for (int r = 0; r < R; r++) {
            const __m512i g = _mm512_mask_blend_epi32(0xCCCC, _mm512_shuffle_epi8(X, idx[r]), _mm512_shuffle_epi8(Y, idx[r]));
            const __m512i sg = _mm512_mask_sub_epi8(g, neg[r], _mm512_setzero_si512(), g);
            const __m512i p32 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wabs[r], sg);
            acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p32), _mm512_mul_ps(dw[r], da), acc[r][c]);
        }
    }
}

/* the odd last block: the steps of q8_pair on one block in a ymm */
INLINE void q8_one(const int R, const int C, int64_t b, const void *x, size_t bx, const void *a, size_t ba,
                   __m256 (*acc)[2]) {
    const __m256i perm = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m256i three = _mm256_set1_epi8(3);
    const __m256i off = _mm256_setr_epi8(0, 0, 4, 4, 8, 8, 12, 12, 0, 0, 4, 4, 8, 8, 12, 12,
                                         0, 0, 4, 4, 8, 8, 12, 12, 0, 0, 4, 4, 8, 8, 12, 12);
    __m256i wabs[4], wq[4], idx[4];
    __m256 dw[4];
    for (int r = 0; r < R; r++) {
        const block_s24_q8 *xb = (const block_s24_q8 *)((const uint8_t *)x + r * bx) + b;
        dw[r] = _mm256_cvtph_ps(_mm_set1_epi16((short)xb->d));
        wq[r] = _mm256_loadu_si256((const __m256i *)xb->q);
        wabs[r] = _mm256_abs_epi8(wq[r]);
        const __m256i m = _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)xb->idx)), perm);
        idx[r] = _mm256_ternarylogic_epi32(_mm256_srlv_epi32(m, sh), three, off, 0xEA);
    }
    for (int c = 0; c < C; c++) {
        const block_s24_a8 *ab = (const block_s24_a8 *)((const uint8_t *)a + c * ba) + b;
        const __m256i X = _mm256_loadu_si256((const __m256i *)ab->x), Y = _mm256_loadu_si256((const __m256i *)ab->y);
        const __m256 da = _mm256_loadu_ps(ab->d);
        for (int r = 0; r < R; r++) {
            const __m256i g = _mm256_blend_epi32(_mm256_shuffle_epi8(X, idx[r]), _mm256_shuffle_epi8(Y, idx[r]), 0xCC);
            const __m256i p32 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wabs[r], _mm256_sign_epi8(g, wq[r]));
            acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_mul_ps(dw[r], da), acc[r][c]);
        }
    }
}

INLINE void tile_q8(int64_t n, const int R, const int C, float *y, size_t ldy, const void *x, size_t bx,
                    const void *a, size_t ba) {
    __m512 acc[4][2];
    __m256 tail[4][2];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            acc[r][c] = _mm512_setzero_ps();
            tail[r][c] = _mm256_setzero_ps();
        }
    const int64_t nb = n / QK_S24_Q8;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        if (C == 1) kern_s24_prefetch(x, bx, R, (size_t)b * sizeof(block_s24_q8));
        q8_pair(R, C, b, x, bx, a, ba, acc);
    }
    if (b < nb) q8_one(R, C, b, x, bx, a, ba, tail);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm512_castps512_ps256(acc[r][c]),
                                                         _mm512_extractf32x8_ps(acc[r][c], 1)), tail[r][c]);
            __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
            v = _mm_add_ps(v, _mm_movehl_ps(v, v));
            v = _mm_add_ss(v, _mm_movehdup_ps(v));
            y[c * ldy + r] = _mm_cvtss_f32(v);
        }
}

/* entry points: vec_dot = the 1 x 1 tile; gemm = sub-tiles of up to 4 rows x 2 activation rows */
#define TILE_RC(TILE, R, C, ...)                                                                             \
    switch (R * 4 + C) {                                                                                      \
    case 4 * 4 + 2: TILE(n, 4, 2, __VA_ARGS__); break;                                                        \
    case 4 * 4 + 1: TILE(n, 4, 1, __VA_ARGS__); break;                                                        \
    case 3 * 4 + 2: TILE(n, 3, 2, __VA_ARGS__); break;                                                        \
    case 3 * 4 + 1: TILE(n, 3, 1, __VA_ARGS__); break;                                                        \
    case 2 * 4 + 2: TILE(n, 2, 2, __VA_ARGS__); break;                                                        \
    case 2 * 4 + 1: TILE(n, 2, 1, __VA_ARGS__); break;                                                        \
    case 1 * 4 + 2: TILE(n, 1, 2, __VA_ARGS__); break;                                                        \
    default: TILE(n, 1, 1, __VA_ARGS__); break;                                                               \
    }

#define ENTRIES(name, TILE)                                                                                   \
    static void vec_dot_##name(int64_t n, float *s, const void *x, const void *y) {                          \
        TILE(n, 1, 1, s, 1, x, 0, y, 0);                                                                     \
    }                                                                                                         \
    static void gemm_##name(int64_t n, int nr, int nc, float *y, size_t ldy, const void *x, size_t bx,       \
                            const void *a, size_t ba) {                                                       \
        for (int r0 = 0; r0 < nr; r0 += 4)                                                                    \
            for (int c0 = 0; c0 < nc; c0 += 2) {                                                              \
                const uint8_t *xr = (const uint8_t *)x + (size_t)r0 * bx;                                     \
                const uint8_t *ac = (const uint8_t *)a + (size_t)c0 * ba;                                     \
                float *yt = y + (size_t)c0 * ldy + r0;                                                        \
                const int R = nr - r0 >= 4 ? 4 : nr - r0, C = nc - c0 >= 2 ? 2 : 1;                           \
                TILE_RC(TILE, R, C, yt, ldy, xr, bx, ac, ba)                                                  \
            }                                                                                                 \
    }

ENTRIES(s24_f16, tile_f16)
ENTRIES(s24_q8, tile_q8)

/* S24_A8 activations keep the AVX2 tier's quantizer (bit-identical to _ref). */
void kern_sparse24_avx512_install(kern_type_ops *f16, kern_type_ops *q8) {
    f16->vec_dot = vec_dot_s24_f16;
    f16->gemm = gemm_s24_f16;
    q8->vec_dot = vec_dot_s24_q8;
    q8->gemm = gemm_s24_q8;
}
