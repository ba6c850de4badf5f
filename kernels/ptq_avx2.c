/* ptq_avx2.c - AVX2 dot products of the 4-bit and 8-bit PTQ types
 * (kernels/ptq.h); the other widths keep the _ref kernels.
 *
 * Groups (x: G = 32/64/128 blocks, a: a Q8_0 row of n elements, n % G == 0):
 * per 32 elements, codes become signed w = u - c (c = 2^(b-1): 4 bits u - 8,
 * 8 bits u ^ 0x80), sum w*a by ggml's sign trick (maddubs(|w|, sign(a, w)),
 * at most 2 * 128 * 127 per int16 lane, no saturation), plus (c - z) * sum a
 * for zero-point; the int32 sums are exact, scaled by d * d_a in float.
 * Per-row types (x: one row, a: F32, any n): 32 elements at a time as
 * floats (u - z) * a with FMA, the tail in scalar; times d at the end. */
#include <immintrin.h>

#include "kernels/avx2_common.h"
#include "kernels/ptq.h"
#include "kernels/quants.h"

/* 32 signed codes (u - c) from 32 codes of b bits at p */
static inline __m256i load_w(const uint8_t *p, int bits) {
    if (bits == 8) return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p), _mm256_set1_epi8((char)0x80));
    const __m128i raw = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(raw, m), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m);
    const __m256i u = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
    return _mm256_sub_epi8(u, _mm256_set1_epi8(8));
}

static inline void dot_group(int scheme, int bits, int G, int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx;
    const block_q8_0 *a = vy;
    const int hdr = KERN_PTQ_HDR(scheme), c = 1 << (bits - 1);
    const size_t bb = (size_t)KERN_PTQ_BLOCK_BYTES(scheme, bits, G);
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i0 = 0; i0 < n; i0 += G, x += bb) {
        uint16_t h;
        memcpy(&h, x, 2);
        const float d = _cvtsh_ss(h);
        const int zc = scheme == KERN_PTQ_ZEROPOINT ? c - x[2] : 0;
        const uint8_t *p = x + hdr;
        for (int k = 0; k < G / 32; k++, a++, p += 32 * bits / 8) {
            const __m256i w = load_w(p, bits);
            const __m256i q = _mm256_loadu_si256((const __m256i *)a->qs);
            const __m256i dot16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
            __m256i sum = _mm256_madd_epi16(dot16, ones16);
            if (zc) {
                const __m256i sa = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
                sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(sa, _mm256_set1_epi32(zc)));
            }
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d * _cvtsh_ss(a->d)), acc);
        }
    }
    *s = hsum_ps(acc);
}

static inline void dot_row(int scheme, int bits, int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx;
    const float *a = vy;
    uint16_t h;
    memcpy(&h, x, 2);
    const float d = _cvtsh_ss(h);
    const int z = scheme == KERN_PTQ_ZEROPOINT ? x[2] : 1 << (bits - 1), c = 1 << (bits - 1);
    const uint8_t *p = x + KERN_PTQ_HDR(scheme);
    /* (u - z) = (u - c) + (c - z): w from load_w, then the constant */
    const __m256 zc = _mm256_set1_ps((float)(c - z));
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32, p += 32 * bits / 8) {
        const __m256i w = load_w(p, bits);
        const __m128i w0 = _mm256_castsi256_si128(w), w1 = _mm256_extracti128_si256(w, 1);
        const __m256 f0 = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(w0)), zc);
        const __m256 f1 = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(w0, 8))), zc);
        const __m256 f2 = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(w1)), zc);
        const __m256 f3 = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(w1, 8))), zc);
        acc0 = _mm256_fmadd_ps(f0, _mm256_loadu_ps(a + i), acc0);
        acc1 = _mm256_fmadd_ps(f1, _mm256_loadu_ps(a + i + 8), acc1);
        acc0 = _mm256_fmadd_ps(f2, _mm256_loadu_ps(a + i + 16), acc0);
        acc1 = _mm256_fmadd_ps(f3, _mm256_loadu_ps(a + i + 24), acc1);
    }
    float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    if (i < n) { /* tail: unpack the remaining codes (i is a multiple of 32: byte-aligned) */
        uint8_t u[32];
        kern_ptq_unpack(p, n - i, bits, u);
        for (int64_t j = 0; i + j < n; j++) sum += (float)((int)u[j] - z) * a[i + j];
    }
    *s = d * sum;
}

#define PTQ_AVX2_(S, B, G, g)                                                                             \
    static void vec_dot_##S##B##_##G(int64_t n, float *s, const void *x, const void *y) {                 \
        if ((g) >= KERN_PTQ_G32) dot_group(KERN_PTQ_SCHEME_##S, B, 8 << (g), n, s, x, y);                 \
        else dot_row(KERN_PTQ_SCHEME_##S, B, n, s, x, y);                                                 \
    }
#define PTQ_AVX2_BITS_(S, B) \
    PTQ_AVX2_(S, B, T, 0) PTQ_AVX2_(S, B, C, 1) PTQ_AVX2_(S, B, G32, 2) PTQ_AVX2_(S, B, G64, 3) PTQ_AVX2_(S, B, G128, 4)
PTQ_AVX2_BITS_(A, 4) PTQ_AVX2_BITS_(A, 8) PTQ_AVX2_BITS_(Z, 4) PTQ_AVX2_BITS_(Z, 8)

#define PTQ_SET_(S, B, G, g) ops[KERN_PTQ_T(S, B, G, g)].vec_dot = vec_dot_##S##B##_##G;
#define PTQ_SET_BITS_(S, B) PTQ_SET_(S, B, T, 0) PTQ_SET_(S, B, C, 1) PTQ_SET_(S, B, G32, 2) PTQ_SET_(S, B, G64, 3) PTQ_SET_(S, B, G128, 4)

void kern_ptq_avx2_install(kern_type_ops *ops) {
    PTQ_SET_BITS_(A, 4) PTQ_SET_BITS_(A, 8) PTQ_SET_BITS_(Z, 4) PTQ_SET_BITS_(Z, 8)
}
