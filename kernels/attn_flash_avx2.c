/* attn_flash_avx2.c - kern_attn_flash's inner loops with AVX2 + FMA + F16C
 * (the table contract is in kernels/attn_flash.h).  Compiled with -mavx2
 * -mfma -mf16c; attn_flash.c uses it only when the active kernel tier is
 * avx2 or above (dispatch.c checks the CPU).
 *
 * Letters: R query rows, D head dim, Dp = D rounded up to 8, nc tile
 * columns (a multiple of 8).  The two products are register-blocked as
 * small GEMMs: 4 rows x 16 columns = 8 accumulators, each K / V load
 * feeding 4 FMAs.  They differ from the C table only in rounding (FMA, and
 * the same exp2 polynomial evaluated with FMA). */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "kernels/attn_flash.h"
#include "kernels/avx2_common.h"
#include "kernels/quants.h"

static inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* S[r][j] = sum_d Q[r][d] * Kt[d][j] */
static void scores_avx2(int R, int D, int nc, const float *Q, int ldq, const float *Kt, int ldk, float *S,
                        int lds) {
    int r = 0;
    for (; r + 4 <= R; r += 4) {
        const float *q0 = Q + (size_t)r * ldq, *q1 = q0 + ldq, *q2 = q1 + ldq, *q3 = q2 + ldq;
        float *s0 = S + (size_t)r * lds, *s1 = s0 + lds, *s2 = s1 + lds, *s3 = s2 + lds;
        int j = 0;
        for (; j + 16 <= nc; j += 16) {
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;
            __m256 a20 = a00, a21 = a00, a30 = a00, a31 = a00;
            const float *k = Kt + j;
            for (int d = 0; d < D; d++, k += ldk) {
                const __m256 k0 = _mm256_loadu_ps(k), k1 = _mm256_loadu_ps(k + 8);
                __m256 b = _mm256_broadcast_ss(q0 + d);
                a00 = _mm256_fmadd_ps(b, k0, a00); a01 = _mm256_fmadd_ps(b, k1, a01);
                b = _mm256_broadcast_ss(q1 + d);
                a10 = _mm256_fmadd_ps(b, k0, a10); a11 = _mm256_fmadd_ps(b, k1, a11);
                b = _mm256_broadcast_ss(q2 + d);
                a20 = _mm256_fmadd_ps(b, k0, a20); a21 = _mm256_fmadd_ps(b, k1, a21);
                b = _mm256_broadcast_ss(q3 + d);
                a30 = _mm256_fmadd_ps(b, k0, a30); a31 = _mm256_fmadd_ps(b, k1, a31);
            }
            _mm256_storeu_ps(s0 + j, a00); _mm256_storeu_ps(s0 + j + 8, a01);
            _mm256_storeu_ps(s1 + j, a10); _mm256_storeu_ps(s1 + j + 8, a11);
            _mm256_storeu_ps(s2 + j, a20); _mm256_storeu_ps(s2 + j + 8, a21);
            _mm256_storeu_ps(s3 + j, a30); _mm256_storeu_ps(s3 + j + 8, a31);
        }
        for (; j < nc; j += 8) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            const float *k = Kt + j;
            for (int d = 0; d < D; d++, k += ldk) {
                const __m256 k0 = _mm256_loadu_ps(k);
                a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(q0 + d), k0, a0);
                a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(q1 + d), k0, a1);
                a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(q2 + d), k0, a2);
                a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(q3 + d), k0, a3);
            }
            _mm256_storeu_ps(s0 + j, a0); _mm256_storeu_ps(s1 + j, a1);
            _mm256_storeu_ps(s2 + j, a2); _mm256_storeu_ps(s3 + j, a3);
        }
    }
    for (; r < R; r++) {
        const float *q0 = Q + (size_t)r * ldq;
        float *s0 = S + (size_t)r * lds;
        int j = 0;
        for (; j + 32 <= nc; j += 32) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            const float *k = Kt + j;
            for (int d = 0; d < D; d++, k += ldk) {
                const __m256 b = _mm256_broadcast_ss(q0 + d);
                a0 = _mm256_fmadd_ps(b, _mm256_loadu_ps(k), a0);
                a1 = _mm256_fmadd_ps(b, _mm256_loadu_ps(k + 8), a1);
                a2 = _mm256_fmadd_ps(b, _mm256_loadu_ps(k + 16), a2);
                a3 = _mm256_fmadd_ps(b, _mm256_loadu_ps(k + 24), a3);
            }
            _mm256_storeu_ps(s0 + j, a0); _mm256_storeu_ps(s0 + j + 8, a1);
            _mm256_storeu_ps(s0 + j + 16, a2); _mm256_storeu_ps(s0 + j + 24, a3);
        }
        for (; j < nc; j += 8) {
            __m256 a0 = _mm256_setzero_ps();
            const float *k = Kt + j;
            for (int d = 0; d < D; d++, k += ldk) a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(q0 + d), _mm256_loadu_ps(k), a0);
            _mm256_storeu_ps(s0 + j, a0);
        }
    }
}

/* A[r][c] += sum_j P[r][j] * V[j][c] */
/* rows of floats, or of halves (f16) converted in registers: the same FMAs */
#define AI static inline __attribute__((always_inline))
AI __m256 ld8(const void *row, int c, const bool f16) {
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + c)))
               : _mm256_loadu_ps((const float *)row + c);
}
AI void pv_body(int R, int Dp, int n, const float *P, int ldp, const void *const *V, float *A, int lda, const bool f16) {
    int r = 0;
    for (; r + 4 <= R; r += 4) {
        const float *p0 = P + (size_t)r * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
        float *o0 = A + (size_t)r * lda, *o1 = o0 + lda, *o2 = o1 + lda, *o3 = o2 + lda;
        int c = 0;
        for (; c + 16 <= Dp; c += 16) {
            __m256 a00 = _mm256_loadu_ps(o0 + c), a01 = _mm256_loadu_ps(o0 + c + 8);
            __m256 a10 = _mm256_loadu_ps(o1 + c), a11 = _mm256_loadu_ps(o1 + c + 8);
            __m256 a20 = _mm256_loadu_ps(o2 + c), a21 = _mm256_loadu_ps(o2 + c + 8);
            __m256 a30 = _mm256_loadu_ps(o3 + c), a31 = _mm256_loadu_ps(o3 + c + 8);
            for (int j = 0; j < n; j++) {
                const __m256 v0 = ld8(V[j], c, f16), v1 = ld8(V[j], c + 8, f16);
                __m256 b = _mm256_broadcast_ss(p0 + j);
                a00 = _mm256_fmadd_ps(b, v0, a00); a01 = _mm256_fmadd_ps(b, v1, a01);
                b = _mm256_broadcast_ss(p1 + j);
                a10 = _mm256_fmadd_ps(b, v0, a10); a11 = _mm256_fmadd_ps(b, v1, a11);
                b = _mm256_broadcast_ss(p2 + j);
                a20 = _mm256_fmadd_ps(b, v0, a20); a21 = _mm256_fmadd_ps(b, v1, a21);
                b = _mm256_broadcast_ss(p3 + j);
                a30 = _mm256_fmadd_ps(b, v0, a30); a31 = _mm256_fmadd_ps(b, v1, a31);
            }
            _mm256_storeu_ps(o0 + c, a00); _mm256_storeu_ps(o0 + c + 8, a01);
            _mm256_storeu_ps(o1 + c, a10); _mm256_storeu_ps(o1 + c + 8, a11);
            _mm256_storeu_ps(o2 + c, a20); _mm256_storeu_ps(o2 + c + 8, a21);
            _mm256_storeu_ps(o3 + c, a30); _mm256_storeu_ps(o3 + c + 8, a31);
        }
        for (; c < Dp; c += 8) {
            __m256 a0 = _mm256_loadu_ps(o0 + c), a1 = _mm256_loadu_ps(o1 + c);
            __m256 a2 = _mm256_loadu_ps(o2 + c), a3 = _mm256_loadu_ps(o3 + c);
            for (int j = 0; j < n; j++) {
                const __m256 v0 = ld8(V[j], c, f16);
                a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + j), v0, a0);
                a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(p1 + j), v0, a1);
                a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(p2 + j), v0, a2);
                a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(p3 + j), v0, a3);
            }
            _mm256_storeu_ps(o0 + c, a0); _mm256_storeu_ps(o1 + c, a1);
            _mm256_storeu_ps(o2 + c, a2); _mm256_storeu_ps(o3 + c, a3);
        }
    }
    for (; r < R; r++) {
        const float *p0 = P + (size_t)r * ldp;
        float *o0 = A + (size_t)r * lda;
        int c = 0;
        for (; c + 32 <= Dp; c += 32) {
            __m256 a0 = _mm256_loadu_ps(o0 + c), a1 = _mm256_loadu_ps(o0 + c + 8);
            __m256 a2 = _mm256_loadu_ps(o0 + c + 16), a3 = _mm256_loadu_ps(o0 + c + 24);
            for (int j = 0; j < n; j++) {
                const __m256 b = _mm256_broadcast_ss(p0 + j);
                a0 = _mm256_fmadd_ps(b, ld8(V[j], c, f16), a0);
                a1 = _mm256_fmadd_ps(b, ld8(V[j], c + 8, f16), a1);
                a2 = _mm256_fmadd_ps(b, ld8(V[j], c + 16, f16), a2);
                a3 = _mm256_fmadd_ps(b, ld8(V[j], c + 24, f16), a3);
            }
            _mm256_storeu_ps(o0 + c, a0); _mm256_storeu_ps(o0 + c + 8, a1);
            _mm256_storeu_ps(o0 + c + 16, a2); _mm256_storeu_ps(o0 + c + 24, a3);
        }
        for (; c < Dp; c += 8) {
            __m256 a0 = _mm256_loadu_ps(o0 + c);
            for (int j = 0; j < n; j++) a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + j), ld8(V[j], c, f16), a0);
            _mm256_storeu_ps(o0 + c, a0);
        }
    }
}

static void pv_avx2(int R, int Dp, int n, const float *P, int ldp, const float *const *V, float *A, int lda) {
    pv_body(R, Dp, n, P, ldp, (const void *const *)V, A, lda, false);
}
static void pv_f16_avx2(int R, int Dp, int n, const float *P, int ldp, const uint16_t *const *V, float *A, int lda) {
    pv_body(R, Dp, n, P, ldp, (const void *const *)V, A, lda, true);
}

/* Kt[d][j] = K[j][d]: 8 x 8 blocks transposed in registers */
AI float at(const void *row, int d, const bool f16) {
    return f16 ? _cvtsh_ss(((const uint16_t *)row)[d]) : ((const float *)row)[d];
}
AI void kt_body(const void *const *K, int n, int nc, int D, float *Kt, int ldk, const bool f16) {
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        int d = 0;
        for (; d + 8 <= D; d += 8) {
            const __m256 r0 = ld8(K[j], d, f16), r1 = ld8(K[j + 1], d, f16);
            const __m256 r2 = ld8(K[j + 2], d, f16), r3 = ld8(K[j + 3], d, f16);
            const __m256 r4 = ld8(K[j + 4], d, f16), r5 = ld8(K[j + 5], d, f16);
            const __m256 r6 = ld8(K[j + 6], d, f16), r7 = ld8(K[j + 7], d, f16);
            const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
            const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
            const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
            const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
            float *o = Kt + (size_t)d * ldk + j;
            _mm256_storeu_ps(o, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(o + ldk, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(o + 2 * (size_t)ldk, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(o + 3 * (size_t)ldk, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(o + 4 * (size_t)ldk, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(o + 5 * (size_t)ldk, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(o + 6 * (size_t)ldk, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(o + 7 * (size_t)ldk, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
        for (; d < D; d++)
            for (int i = 0; i < 8; i++) Kt[(size_t)d * ldk + j + i] = at(K[j + i], d, f16);
    }
    for (int d = 0; d < D; d++) {
        float *o = Kt + (size_t)d * ldk;
        for (int i = j; i < n; i++) o[i] = at(K[i], d, f16);
        for (int i = n; i < nc; i++) o[i] = 0.0f;
    }
}

static void kt_load_avx2(const float *const *K, int n, int nc, int D, float *Kt, int ldk) {
    kt_body((const void *const *)K, n, nc, D, Kt, ldk, false);
}
static void kt_load_f16_avx2(const uint16_t *const *K, int n, int nc, int D, float *Kt, int ldk) {
    kt_body((const void *const *)K, n, nc, D, Kt, ldk, true);
}

static float row_max_avx2(const float *s, int n) {
    int j = 0;
    float m = s[0];
    if (n >= 8) {
        __m256 v = _mm256_loadu_ps(s);
        for (j = 8; j + 8 <= n; j += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(s + j));
        m = hmax(v);
    }
    for (; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}

/* 2^x, x clamped to [-127, 0]: the Cephes exp2f polynomial of attn_flash.c */
static inline __m256 exp2_avx2(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-127.0f)); /* (NaN -> -127, as in C) */
    x = _mm256_min_ps(x, _mm256_setzero_ps());
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static float row_exp2_avx2(float *s, int nv, int nc, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < nc; j += 8) {
        __m256 e = exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
        if (j + 8 > nv) { /* keep lanes j + i < nv */
            const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(nv - j), lane);
            e = _mm256_and_ps(e, _mm256_castsi256_ps(keep));
        }
        _mm256_storeu_ps(s + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    return hsum_ps(sum);
}

static void row_scale_avx2(float *a, int n, float c) {
    const __m256 cv = _mm256_set1_ps(c);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(a + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), cv));
    for (; i < n; i++) a[i] *= c;
}

static void f16_to_f32_avx2(const uint16_t *x, float *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = _cvtsh_ss(x[i]);
}

static void q8_0_to_f32_avx2(const void *x, float *y, int nb) {
    const block_q8_0 *b = x;
    for (int i = 0; i < nb; i++, y += QK8_0) {
        const __m256 s = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        for (int k = 0; k < QK8_0; k += 8) {
            const __m128i q = _mm_loadl_epi64((const __m128i *)(b[i].qs + k));
            _mm256_storeu_ps(y + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), s));
        }
    }
}

const attn_flash_ops attn_flash_ops_avx2 = {.scores = scores_avx2, .pv = pv_avx2, .kt_load = kt_load_avx2,
                                            .row_max = row_max_avx2, .row_exp2 = row_exp2_avx2,
                                            .row_scale = row_scale_avx2, .pv_f16 = pv_f16_avx2,
                                            .kt_load_f16 = kt_load_f16_avx2, .f16_to_f32 = f16_to_f32_avx2,
                                            .q8_0_to_f32 = q8_0_to_f32_avx2};
#else
typedef int attn_flash_avx2_unused; /* not an x86-64 AVX2 build: nothing here */
#endif
