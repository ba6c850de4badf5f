/* int8_avx512.c - the AVX-512 VNNI INT8 tile (contract: kernels/int8.h).
 * Compiled with -mavx512f/bw/vl/dq/vnni; kern_i8_tile_for returns it only
 * when dispatch.c found AVX-512 F/BW/VL/DQ + VNNI (and the OS saves ZMM).
 * NOT RUN on the development machine (AMD Zen 3 has no AVX-512): only
 * compiled there; tests/test_int8.c checks it against _ref on any CPU
 * that has it.
 *
 * 64 products per vpdpbusd (unsigned x signed bytes, 4-byte groups summed
 * into int32 lanes, no saturation of the int32 accumulate): x's sign moves
 * to w (masked 0 - w where x < 0), |x| is the unsigned operand.  Bytes lie
 * in [-127, 127], so the integer sums are exact and equal _ref bit for
 * bit.  Tiles are 4 weight rows x 4 activation rows: 16 zmm accumulators. */
#include <immintrin.h>

#include "kernels/int8.h"

static inline __m512i mac64(__m512i acc, __m512i ax, __mmask64 neg, __m512i w) {
    const __m512i ws = _mm512_mask_sub_epi8(w, neg, _mm512_setzero_si512(), w);
    return _mm512_dpbusd_epi32(acc, ax, ws);
}

static void tile_4x4(int64_t Kp, int32_t *out, size_t ldo, const int8_t *w, size_t ldw, const int8_t *x, size_t ldx) {
    __m512i acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_si512();
    for (int64_t k = 0; k < Kp; k += 64) {
        __m512i ax[4];
        __mmask64 neg[4];
        for (int c = 0; c < 4; c++) {
            const __m512i xv = _mm512_loadu_si512((const void *)(x + c * ldx + k));
            ax[c] = _mm512_abs_epi8(xv);
            neg[c] = _mm512_movepi8_mask(xv);
        }
        for (int r = 0; r < 4; r++) {
            const __m512i wv = _mm512_loadu_si512((const void *)(w + r * ldw + k));
            for (int c = 0; c < 4; c++) acc[r][c] = mac64(acc[r][c], ax[c], neg[c], wv);
        }
    }
    for (int c = 0; c < 4; c++)
        for (int r = 0; r < 4; r++) out[c * ldo + r] = _mm512_reduce_add_epi32(acc[r][c]);
}

static int32_t dot_1x1(int64_t Kp, const int8_t *w, const int8_t *x) {
    __m512i acc = _mm512_setzero_si512();
    for (int64_t k = 0; k < Kp; k += 64) {
        const __m512i xv = _mm512_loadu_si512((const void *)(x + k));
        acc = mac64(acc, _mm512_abs_epi8(xv), _mm512_movepi8_mask(xv), _mm512_loadu_si512((const void *)(w + k)));
    }
    return _mm512_reduce_add_epi32(acc);
}

void kern_i8_tile_avx512(int64_t Kp, int nr, int nc, int32_t *out, size_t ldo, const int8_t *w, size_t ldw,
                         const int8_t *x, size_t ldx) {
    if (nr == 4 && nc == 4) {
        tile_4x4(Kp, out, ldo, w, ldw, x, ldx);
        return;
    }
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++) out[c * ldo + r] = dot_1x1(Kp, w + r * ldw, x + c * ldx);
}
