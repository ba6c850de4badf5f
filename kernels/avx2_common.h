/* kernels/avx2_common.h - small AVX2 helpers shared by the *_avx2.c kernel
 * files (include it only from files compiled with -mavx2 -mfma -mf16c). */
#ifndef KVANT_KERNELS_AVX2_COMMON_H
#define KVANT_KERNELS_AVX2_COMMON_H

#include <immintrin.h>
#include <stdint.h>

/* sum of the 8 lanes, in a fixed order (callers rely on it being the same
 * in every file: batched and single-row results are compared bit for bit) */
static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* roundf, exactly: truncate, then step away from zero where |remainder| >= 0.5
 * (truncation and remainder are exact for |v| < 2^23) */
static inline __m256 round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f)); /* +-1 with v's sign */
    return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(r, _mm256_set1_ps(0.5f), _CMP_GE_OQ), step));
}

/* One block of 32 floats -> 32 int8 = round(x * id) into q; returns d and
 * (through sum, if not NULL) the sum of the q.  d = amax / 127 as the _ref
 * Q8_0 quantizer (the same bytes). */
static inline float quant_block_q8(const float *x, int8_t *q, int *sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), amax); /* a NaN lane loses, as in fmaxf */
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127, id = d ? 1.0f / d : 0.0f;
    const __m256 mul = _mm256_set1_ps(id);
    __m256i i[4];
    for (int k = 0; k < 4; k++) i[k] = _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[k], mul)));
    if (sum) *sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
    /* |q| <= 127, so the saturating packs are exact; they interleave 128-bit lanes, the permute undoes it */
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    return d;
}

#endif
