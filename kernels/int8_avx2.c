/* int8_avx2.c - the AVX2 INT8 tile (contract: kernels/int8.h).
 * Compiled with -mavx2 -mfma -mf16c; used only when the CPU has AVX2.
 *
 * 32 products per step: vpsignb gives w the sign of x, vpmaddubsw multiplies
 * |x| (unsigned) by it and adds pairs to int16 (|.| <= 2 * 127 * 127 =
 * 32258, no saturation because bytes lie in [-127, 127]), vpmaddwd with
 * ones adds pairs to int32.  Full tiles are 4 weight rows x 2 activation
 * rows (8 accumulators); a 4x4 request runs as two of them.  Integer
 * sums are exact, so results equal kern_i8_tile_ref bit for bit. */
#include <immintrin.h>

#include "kernels/avx2_common.h"
#include "kernels/int8.h"

static inline __m256i mac32(__m256i acc, __m256i ax, __m256i x, __m256i w, __m256i ones) {
    const __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w, x));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
}

/* 4 weight rows x 2 activation rows */
static void tile_4x2(int64_t Kp, int32_t *out, size_t ldo, const int8_t *w, size_t ldw, const int8_t *x, size_t ldx) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i a00 = _mm256_setzero_si256(), a10 = a00, a20 = a00, a30 = a00;
    __m256i a01 = a00, a11 = a00, a21 = a00, a31 = a00;
    for (int64_t k = 0; k < Kp; k += 32) {
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(x + k));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(x + ldx + k));
        const __m256i ax0 = _mm256_abs_epi8(x0), ax1 = _mm256_abs_epi8(x1);
        __m256i wr = _mm256_loadu_si256((const __m256i *)(w + k));
        a00 = mac32(a00, ax0, x0, wr, ones);
        a01 = mac32(a01, ax1, x1, wr, ones);
        wr = _mm256_loadu_si256((const __m256i *)(w + ldw + k));
        a10 = mac32(a10, ax0, x0, wr, ones);
        a11 = mac32(a11, ax1, x1, wr, ones);
        wr = _mm256_loadu_si256((const __m256i *)(w + 2 * ldw + k));
        a20 = mac32(a20, ax0, x0, wr, ones);
        a21 = mac32(a21, ax1, x1, wr, ones);
        wr = _mm256_loadu_si256((const __m256i *)(w + 3 * ldw + k));
        a30 = mac32(a30, ax0, x0, wr, ones);
        a31 = mac32(a31, ax1, x1, wr, ones);
    }
    out[0] = hsum_epi32(a00), out[1] = hsum_epi32(a10), out[2] = hsum_epi32(a20), out[3] = hsum_epi32(a30);
    out[ldo + 0] = hsum_epi32(a01), out[ldo + 1] = hsum_epi32(a11), out[ldo + 2] = hsum_epi32(a21),
    out[ldo + 3] = hsum_epi32(a31);
}

static int32_t dot_1x1(int64_t Kp, const int8_t *w, const int8_t *x) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256();
    for (int64_t k = 0; k < Kp; k += 32) {
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(x + k));
        acc = mac32(acc, _mm256_abs_epi8(xv), xv, _mm256_loadu_si256((const __m256i *)(w + k)), ones);
    }
    return hsum_epi32(acc);
}

void kern_i8_tile_avx2(int64_t Kp, int nr, int nc, int32_t *out, size_t ldo, const int8_t *w, size_t ldw,
                       const int8_t *x, size_t ldx) {
    int c = 0;
    if (nr == 4)
        for (; c + 2 <= nc; c += 2) tile_4x2(Kp, out + c * ldo, ldo, w, ldw, x + c * ldx, ldx);
    for (; c < nc; c++)
        for (int r = 0; r < nr; r++) out[c * ldo + r] = dot_1x1(Kp, w + r * ldw, x + c * ldx);
}
