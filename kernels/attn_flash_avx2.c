/* attn_flash_avx2.c - kern_attn_flash's inner loops with AVX2 + FMA + F16C
 * (the table contract is in kernels/attn_flash.h).  Compiled with -mavx2
 * -mfma -mf16c; attn_flash.c uses it only when the active kernel tier is
 * avx2 or above (dispatch.c checks the CPU).
 *
 * Letters: R query rows, D head dim, Dp = D rounded up to 8, nc tile
 * columns (a multiple of 8).  The two products are register-blocked as
 * small GEMMs (8 accumulators).  They differ from the C table only in
 * rounding (FMA, and the same exp2 polynomial evaluated with FMA). */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "kernels/attn_flash.h"
#include "kernels/attn_flash_simd.h"
#include "kernels/avx2_common.h"
#include "kernels/quants.h"

static inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* A[r][c] += sum_j P[r][j] * V[j][c] */
/* rows of floats, or of halves (f16) converted in registers: the same FMAs */
AI void pv_body(int R, int Dp, int n, const float *P, int ldp, const void *const *V, float *A, int lda, const bool f16,
               int pf) {
    const int rb = Dp * (f16 ? 2 : 4); /* a V row's bytes, asked for in the first block's first column pass */
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
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
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
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
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
        for (; c + 64 <= Dp; c += 64) { /* one pass over V for a 64-wide head (each output: the same FMAs in j order) */
            __m256 a[8];
            for (int i = 0; i < 8; i++) a[i] = _mm256_loadu_ps(o0 + c + 8 * i);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                const __m256 b = _mm256_broadcast_ss(p0 + j);
                for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(b, ld8(V[j], c + 8 * i, f16), a[i]);
            }
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(o0 + c + 8 * i, a[i]);
        }
        for (; c + 32 <= Dp; c += 32) {
            __m256 a0 = _mm256_loadu_ps(o0 + c), a1 = _mm256_loadu_ps(o0 + c + 8);
            __m256 a2 = _mm256_loadu_ps(o0 + c + 16), a3 = _mm256_loadu_ps(o0 + c + 24);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
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
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + j), ld8(V[j], c, f16), a0);
            }
            _mm256_storeu_ps(o0 + c, a0);
        }
    }
}

static void pv_avx2(int R, int Dp, int n, const float *P, int ldp, const float *const *V, float *A, int lda, int pf) {
    pv_body(R, Dp, n, P, ldp, (const void *const *)V, A, lda, false, pf);
}
static void pv_f16_avx2(int R, int Dp, int n, const float *P, int ldp, const uint16_t *const *V, float *A, int lda,
                        int pf) {
    pv_body(R, Dp, n, P, ldp, (const void *const *)V, A, lda, true, pf);
}

/* S[r][j]: the chain of kernels/attn_flash.h, per block of RB rows x KB
 * keys (RB * KB = 8 accumulators, each a score's 8 lanes); one load of a
 * K row (converted once when F16) feeds RB FMAs, one of a Q row KB.  The
 * 8 accumulators are reduced together: hadd pairs lanes (0+1, 2+3, ..),
 * the second hadd the pairs, and the two 128-bit halves are added last,
 * which is the table's tree for every accumulator (reduce8 in
 * kernels/attn_flash_simd.h). */
AI void score_block(const int RB, const int KB, int Dp, const float *Q, int ldq, const void *const *K, float *S,
                    int lds, const bool f16, int pf) {
    __m256 acc[8];
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    for (int kb = 0; kb < KB; kb++) pf_row(K[kb], pf, Dp * (f16 ? 2 : 4));
    for (int d = 0; d < Dp; d += 8) {
        if (RB == 1) {
            const __m256 q = _mm256_loadu_ps(Q + d);
            for (int kb = 0; kb < 8; kb++) acc[kb] = _mm256_fmadd_ps(q, ld8(K[kb], d, f16), acc[kb]);
            continue;
        }
        __m256 kv[4];
        for (int kb = 0; kb < KB; kb++) kv[kb] = ld8(K[kb], d, f16);
        for (int rb = 0; rb < RB; rb++) {
            const __m256 q = _mm256_loadu_ps(Q + (size_t)rb * ldq + d);
            for (int kb = 0; kb < KB; kb++) acc[rb * KB + kb] = _mm256_fmadd_ps(q, kv[kb], acc[rb * KB + kb]);
        }
    }
    const __m256 r = reduce8(acc);
    if (RB == 1) {
        _mm256_storeu_ps(S, r);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, r);
    for (int rb = 0; rb < RB; rb++)
        for (int kb = 0; kb < KB; kb++) S[(size_t)rb * lds + kb] = t[rb * KB + kb];
}
AI void scores_body(int R, int Dp, int nc, const float *Q, int ldq, const void *const *K, float *S, int lds,
                    const bool f16, int pf) {
    /* 8, 4, 2 or 1 rows; nc is a multiple of 8.  The keys' lines are asked
     * for (pf) in the first pass over them. */
    for (int r = 0; r < R;) {
        const float *q = Q + (size_t)r * ldq;
        float *s = S + (size_t)r * lds;
        if (R - r >= 8) {
            for (int j = 0; j < nc; j++) score_block(8, 1, Dp, q, ldq, K + j, s + j, lds, f16, r ? 0 : pf);
            r += 8;
        } else if (R - r >= 4) {
            for (int j = 0; j < nc; j += 2) score_block(4, 2, Dp, q, ldq, K + j, s + j, lds, f16, r ? 0 : pf);
            r += 4;
        } else if (R - r >= 2) {
            for (int j = 0; j < nc; j += 4) score_block(2, 4, Dp, q, ldq, K + j, s + j, lds, f16, r ? 0 : pf);
            r += 2;
        } else {
            for (int j = 0; j < nc; j += 8) score_block(1, 8, Dp, q, ldq, K + j, s + j, lds, f16, r ? 0 : pf);
            r += 1;
        }
    }
}

static void scores_rows_avx2(int R, int Dp, int nc, const float *Q, int ldq, const float *const *K, float *S, int lds,
                             int pf) {
    scores_body(R, Dp, nc, Q, ldq, (const void *const *)K, S, lds, false, pf);
}
static void scores_rows_f16_avx2(int R, int Dp, int nc, const float *Q, int ldq, const uint16_t *const *K, float *S,
                                 int lds, int pf) {
    scores_body(R, Dp, nc, Q, ldq, (const void *const *)K, S, lds, true, pf);
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

const attn_flash_ops attn_flash_ops_avx2 = {.scores_rows = scores_rows_avx2, .pv = pv_avx2,
                                            .row_max = row_max_avx2, .row_exp2 = row_exp2_avx2,
                                            .row_scale = row_scale_avx2, .pv_f16 = pv_f16_avx2,
                                            .scores_rows_f16 = scores_rows_f16_avx2, .f16_to_f32 = f16_to_f32_avx2,
                                            .q8_0_to_f32 = q8_0_to_f32_avx2};
#else
typedef int attn_flash_avx2_unused; /* not an x86-64 AVX2 build: nothing here */
#endif
