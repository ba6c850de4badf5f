/* repack_avx2.c - the AVX2 tile of the packed 8-row groups (kernels/repack.h).
 *
 * One register holds 4 k-positions of the group's 8 rows (32 bytes); the
 * matching 4 activation bytes are broadcast to every lane, so one
 * vpmaddubsw + vpmaddwd gives each row's dot over those 4 positions in its
 * own 32-bit lane.  After a block the 8 lanes hold the 8 rows' exact
 * integer dots, converted and scaled with one cvt + mul + fma per
 * activation row: the arithmetic of the spec, lane by lane, so every
 * output is bit-identical to kern_matmul_packed_ref.
 *   Q8_0: |w| times y with w's sign (activations lie in [-127, 127]).
 *   Q4_0: nibbles q in [0, 15] times y, summed in int16 over the whole
 *         block (8 pair sums of at most 2 * 15 * 127: |sum| <= 30480),
 *         then minus 8 * (sum of the block's y): exact.
 * Up to 4 activation rows share each weight load. */
#include <immintrin.h>
#include <string.h>

#include "kernels/quants.h"
#include "kernels/repack.h"

#define AI static inline __attribute__((always_inline))

AI __m256i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* activation row c's qs of block b */
#define AQS(c, b) (a + (size_t)(c) * ba + (size_t)(b) * sizeof(block_q8_0) + offsetof(block_q8_0, qs))

AI void tile_q8(int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                const float *ad, size_t bn) {
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++, w += 272) {
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
        __m256i s[4];
        for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * j));
            const __m256i u = _mm256_sign_epi8(q, q); /* |q|, exact as unsigned even for -128 */
            for (int c = 0; c < C; c++) {
                const __m256i p = _mm256_maddubs_epi16(u, _mm256_sign_epi8(bcast4(AQS(c, b) + 4 * j), q));
                s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(p, ones));
            }
        }
        for (int c = 0; c < C; c++) {
            const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(ad[(size_t)c * bn + (size_t)b]));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), d, acc[c]);
        }
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

AI void tile_q4(int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                const float *ad, const int32_t *as, size_t bn) {
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; b++, w += 144) {
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
        __m256i s[4];
        for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * j));
            const __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            for (int c = 0; c < C; c++) {
                s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(lo, bcast4(AQS(c, b) + 4 * j)));
                s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(hi, bcast4(AQS(c, b) + 16 + 4 * j)));
            }
        }
        for (int c = 0; c < C; c++) {
            const size_t k = (size_t)c * bn + (size_t)b;
            const __m256i i32 = _mm256_sub_epi32(_mm256_madd_epi16(s[c], ones), _mm256_set1_epi32(8 * as[k]));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), _mm256_mul_ps(dw, _mm256_set1_ps(ad[k])), acc[c]);
        }
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

static void tile_q8_0(int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                      const float *ad, const int32_t *as, size_t bn) {
    (void)as;
    switch (C) {
    case 1: tile_q8(nb, 1, y, ldy, w, a, ba, ad, bn); break;
    case 2: tile_q8(nb, 2, y, ldy, w, a, ba, ad, bn); break;
    case 3: tile_q8(nb, 3, y, ldy, w, a, ba, ad, bn); break;
    default: tile_q8(nb, 4, y, ldy, w, a, ba, ad, bn); break;
    }
}

static void tile_q4_0(int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                      const float *ad, const int32_t *as, size_t bn) {
    switch (C) {
    case 1: tile_q4(nb, 1, y, ldy, w, a, ba, ad, as, bn); break;
    case 2: tile_q4(nb, 2, y, ldy, w, a, ba, ad, as, bn); break;
    case 3: tile_q4(nb, 3, y, ldy, w, a, ba, ad, as, bn); break;
    default: tile_q4(nb, 4, y, ldy, w, a, ba, ad, as, bn); break;
    }
}

kern_pack_tile_fn kern_pack_tile_avx2(int wtype) {
    return wtype == KT_Q8_0 ? tile_q8_0 : wtype == KT_Q4_0 ? tile_q4_0 : NULL;
}
