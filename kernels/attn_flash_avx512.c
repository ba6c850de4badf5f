/* attn_flash_avx512.c - kern_attn_flash's two products (scores Q.K^T and
 * P.V) with 512-bit registers, BIT-IDENTICAL to the AVX2 table
 * (kernels/attn_flash_avx2.c); the other members (max, exp2, scale,
 * conversions) are the AVX2 ones (attn_flash.c builds the table).
 *
 * Why it pays: a decoding head (1 query row, or G rows with GQA) does a
 * handful of FMAs per cached position, and at the AVX2 tier every K and V
 * row of halves costs as many F16 -> F32 conversions as FMAs; with 512-bit
 * registers one vcvtph2ps and one FMA cover two rows.
 *
 * How the bits stay those of AVX2:
 *   scores  the chain of kernels/attn_flash.h is 8 lanes per score (lane i
 *           sums q[d] k[d] over d = i mod 8), so a zmm holds TWO keys' 8
 *           lanes (low half key j, high half key j + 1) and the query's 8
 *           floats broadcast to both halves; the FMAs are the same per
 *           lane, and the lanes are summed in the AVX2 tree's order
 *           (reduce8's pairs, then pairs of pairs, then the two halves)
 *           by pairsum rounds on whole zmm registers.
 *   pv      each output element is one FMA chain over j in order; 16
 *           elements per zmm instead of 8 per ymm, or 8 rows per block
 *           instead of 4, changes nothing.
 * Measured and not taken (Zen 4, family 25 model 17, 2026-12-07): the
 * queries stored twice per 8 elements so that a query chunk is one load,
 * not a broadcast, and the tree on in-lane shuffles: from L1 8-row scores
 * 2.68 against 2.27 G zmm FMA/s, 1 row 1.44 against 1.35, same bits; the
 * decode kernel and the prefill at depth level (bench/depth_speed.md).
 * Compiled with the AVX-512 flags (F, BW, VL, DQ); used at the avx512
 * tier only, and there on Zen 4 (a zmm operation in two halves) for P.V
 * alone: its scores are the AVX2 table's (kernels/attn_flash.c, pick_ops). */
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernels/attn_flash.h"
#include "kernels/attn_flash_simd.h"

/* 16 floats of one row from element c */
AI __m512 ld16(const void *row, int c, const bool f16) {
    return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + c)))
               : _mm512_loadu_ps((const float *)row + c);
}
/* elements c .. c+7 of rows a (low half) and b (high half) */
AI __m512 ld_pair(const void *a, const void *b, int c, const bool f16) {
    if (f16) {
        const __m128i x = _mm_loadu_si128((const __m128i *)((const uint16_t *)a + c));
        const __m128i y = _mm_loadu_si128((const __m128i *)((const uint16_t *)b + c));
        return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(x), y, 1));
    }
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps((const float *)a + c)),
                              _mm256_loadu_ps((const float *)b + c), 1);
}

/* each element at an even index plus the odd one after it: the 8 sums of
 * a's 16 elements, then b's */
AI __m512 pairsum(__m512 a, __m512 b) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return _mm512_add_ps(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b));
}

/* S[rb][2 kp + h] for RB rows x KP key pairs (RB * KP <= 16 accumulators,
 * half the register file: a K pair loaded and converted once feeds RB
 * FMAs, a query chunk KP): key 2 kp + h of the block is K[2 kp + h] */
AI void score_block(const int RB, const int KP, int Dp, const float *Q, int ldq, const void *const *K, float *S,
                    int lds, const bool f16, int pf) {
    __m512 acc[16];
    for (int i = 0; i < RB * KP; i++) acc[i] = _mm512_setzero_ps();
    for (int k = 0; k < 2 * KP; k++) pf_row(K[k], pf, Dp * (f16 ? 2 : 4));
    for (int d = 0; d < Dp; d += 8) {
        __m512 kv[8];
        for (int kp = 0; kp < KP; kp++) kv[kp] = ld_pair(K[2 * kp], K[2 * kp + 1], d, f16);
        for (int rb = 0; rb < RB; rb++) {
            const __m512 q = _mm512_broadcast_f32x8(_mm256_loadu_ps(Q + (size_t)rb * ldq + d));
            for (int kp = 0; kp < KP; kp++) acc[rb * KP + kp] = _mm512_fmadd_ps(q, kv[kp], acc[rb * KP + kp]);
        }
    }
    /* The tree of kernels/attn_flash.h on 512-bit registers: pairsum(A, B)
     * adds each even element to the odd one after it, A's 8 sums then B's.
     * Three rounds over 8 accumulators (16 scores' 8 lanes) leave the 16
     * scores in order, summed as reduce8 sums them: (l0 + l1), then
     * (l0 + l1) + (l2 + l3), then L + H; half the shuffles of reduce8 on
     * the 256-bit halves.  Score i of the block (i = 2 (rb KP + kp) + h)
     * is row i / (2 KP), column i % (2 KP). */
    for (int g = 0; g < RB * KP; g += 8) {
        __m512 x[8];
        for (int m = 0; m < 8; m++) x[m] = g + m < RB * KP ? acc[g + m] : _mm512_setzero_ps();
        for (int w = 8; w > 1; w /= 2)
            for (int m = 0; m < w / 2; m++) x[m] = pairsum(x[2 * m], x[2 * m + 1]);
        const int s0 = 2 * g; /* the first score of x[0] */
        if (2 * KP >= 16) { /* 16 columns of one row */
            _mm512_storeu_ps(S + (size_t)(s0 / (2 * KP)) * lds + s0 % (2 * KP), x[0]);
        } else if (2 * KP == 8) { /* 8 columns of two rows (one when RB KP = 4) */
            _mm256_storeu_ps(S + (size_t)(s0 / 8) * lds, _mm512_castps512_ps256(x[0]));
            if (g + 4 < RB * KP) _mm256_storeu_ps(S + (size_t)(s0 / 8 + 1) * lds, _mm512_extractf32x8_ps(x[0], 1));
        } else { /* KP = 2: 4 columns of four rows */
            for (int k = 0; k < 4; k++) {
                const __m128 r4 = k == 0 ? _mm512_castps512_ps128(x[0])
                                  : k == 1 ? _mm512_extractf32x4_ps(x[0], 1)
                                  : k == 2 ? _mm512_extractf32x4_ps(x[0], 2)
                                           : _mm512_extractf32x4_ps(x[0], 3);
                if (g + 2 * k < RB * KP) _mm_storeu_ps(S + (size_t)(s0 / 4 + k) * lds, r4);
            }
        }
    }
}

AI void scores_body(int R, int Dp, int nc, const float *Q, int ldq, const void *const *K, float *S, int lds,
                    const bool f16, int pf) {
    /* 8, 4, 2 or 1 rows; nc is a multiple of 8.  The keys' lines are asked
     * for (pf) in the first pass over them. */
    for (int r = 0; r < R;) {
        const float *q = Q + (size_t)r * ldq;
        float *s = S + (size_t)r * lds;
        if (R - r >= 8) {
            for (int j = 0; j < nc; j += 4) score_block(8, 2, Dp, q, ldq, K + j, s + j, lds, f16, r ? 0 : pf);
            r += 8;
        } else if (R - r >= 4) {
            for (int j = 0; j < nc; j += 8) score_block(4, 4, Dp, q, ldq, K + j, s + j, lds, f16, r ? 0 : pf);
            r += 4;
        } else if (R - r >= 2) {
            int j = 0;
            for (; j + 16 <= nc; j += 16) score_block(2, 8, Dp, q, ldq, K + j, s + j, lds, f16, r ? 0 : pf);
            for (; j < nc; j += 8) score_block(2, 4, Dp, q, ldq, K + j, s + j, lds, f16, r ? 0 : pf);
            r += 2;
        } else { /* one row: 16 keys at a time (8 chains in flight), then 8 */
            int j = 0;
            for (; j + 16 <= nc; j += 16) score_block(1, 8, Dp, q, ldq, K + j, s + j, lds, f16, r ? 0 : pf);
            for (; j < nc; j += 8) score_block(1, 4, Dp, q, ldq, K + j, s + j, lds, f16, r ? 0 : pf);
            r += 1;
        }
    }
}

static void scores_rows_avx512(int R, int Dp, int nc, const float *Q, int ldq, const float *const *K, float *S,
                               int lds, int pf) {
    scores_body(R, Dp, nc, Q, ldq, (const void *const *)K, S, lds, false, pf);
}
static void scores_rows_f16_avx512(int R, int Dp, int nc, const float *Q, int ldq, const uint16_t *const *K, float *S,
                                   int lds, int pf) {
    scores_body(R, Dp, nc, Q, ldq, (const void *const *)K, S, lds, true, pf);
}

/* A[r][c] += sum_j P[r][j] V[j][c], each element one FMA chain over j */
AI void pv_body(int R, int Dp, int n, const float *P, int ldp, const void *const *V, float *A, int lda, const bool f16,
               int pf) {
    const int rb = Dp * (f16 ? 2 : 4); /* a V row's bytes, asked for in the first block's first column pass */
    int r = 0;
    /* 8 rows x 32 columns (GQA: a KV head's 8 query rows): 16 chains, each
     * V load converted once for 8 rows, half the conversions of two 4-row
     * passes */
    for (; r + 8 <= R && Dp >= 32; r += 8) {
        const float *p[8];
        float *o[8];
        for (int i = 0; i < 8; i++) p[i] = P + (size_t)(r + i) * ldp, o[i] = A + (size_t)(r + i) * lda;
        int c = 0;
        for (; c + 32 <= Dp; c += 32) {
            __m512 a[8][2];
            for (int i = 0; i < 8; i++) a[i][0] = _mm512_loadu_ps(o[i] + c), a[i][1] = _mm512_loadu_ps(o[i] + c + 16);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                const __m512 v0 = ld16(V[j], c, f16), v1 = ld16(V[j], c + 16, f16);
                for (int i = 0; i < 8; i++) {
                    const __m512 b = _mm512_set1_ps(p[i][j]);
                    a[i][0] = _mm512_fmadd_ps(b, v0, a[i][0]);
                    a[i][1] = _mm512_fmadd_ps(b, v1, a[i][1]);
                }
            }
            for (int i = 0; i < 8; i++) _mm512_storeu_ps(o[i] + c, a[i][0]), _mm512_storeu_ps(o[i] + c + 16, a[i][1]);
        }
        for (; c + 16 <= Dp; c += 16) {
            __m512 a[8];
            for (int i = 0; i < 8; i++) a[i] = _mm512_loadu_ps(o[i] + c);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                const __m512 v0 = ld16(V[j], c, f16);
                for (int i = 0; i < 8; i++) a[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[i][j]), v0, a[i]);
            }
            for (int i = 0; i < 8; i++) _mm512_storeu_ps(o[i] + c, a[i]);
        }
        for (; c < Dp; c += 8) { /* Dp is a multiple of 8 */
            __m256 a[8];
            for (int i = 0; i < 8; i++) a[i] = _mm256_loadu_ps(o[i] + c);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                const __m256 v0 = ld8(V[j], c, f16);
                for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(_mm256_set1_ps(p[i][j]), v0, a[i]);
            }
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(o[i] + c, a[i]);
        }
    }
    for (; r + 4 <= R; r += 4) {
        const float *p0 = P + (size_t)r * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
        float *o0 = A + (size_t)r * lda, *o1 = o0 + lda, *o2 = o1 + lda, *o3 = o2 + lda;
        int c = 0;
        for (; c + 64 <= Dp; c += 64) { /* 4 rows x 64 columns: 16 chains, each V load feeds 4 FMAs */
            __m512 a[4][4];
            float *o[4] = {o0, o1, o2, o3};
            const float *p[4] = {p0, p1, p2, p3};
            for (int i = 0; i < 4; i++)
                for (int k = 0; k < 4; k++) a[i][k] = _mm512_loadu_ps(o[i] + c + 16 * k);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                __m512 v[4];
                for (int k = 0; k < 4; k++) v[k] = ld16(V[j], c + 16 * k, f16);
                for (int i = 0; i < 4; i++) {
                    const __m512 b = _mm512_set1_ps(p[i][j]);
                    for (int k = 0; k < 4; k++) a[i][k] = _mm512_fmadd_ps(b, v[k], a[i][k]);
                }
            }
            for (int i = 0; i < 4; i++)
                for (int k = 0; k < 4; k++) _mm512_storeu_ps(o[i] + c + 16 * k, a[i][k]);
        }
        for (; c + 32 <= Dp; c += 32) {
            __m512 a00 = _mm512_loadu_ps(o0 + c), a01 = _mm512_loadu_ps(o0 + c + 16);
            __m512 a10 = _mm512_loadu_ps(o1 + c), a11 = _mm512_loadu_ps(o1 + c + 16);
            __m512 a20 = _mm512_loadu_ps(o2 + c), a21 = _mm512_loadu_ps(o2 + c + 16);
            __m512 a30 = _mm512_loadu_ps(o3 + c), a31 = _mm512_loadu_ps(o3 + c + 16);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                const __m512 v0 = ld16(V[j], c, f16), v1 = ld16(V[j], c + 16, f16);
                __m512 b = _mm512_set1_ps(p0[j]);
                a00 = _mm512_fmadd_ps(b, v0, a00); a01 = _mm512_fmadd_ps(b, v1, a01);
                b = _mm512_set1_ps(p1[j]);
                a10 = _mm512_fmadd_ps(b, v0, a10); a11 = _mm512_fmadd_ps(b, v1, a11);
                b = _mm512_set1_ps(p2[j]);
                a20 = _mm512_fmadd_ps(b, v0, a20); a21 = _mm512_fmadd_ps(b, v1, a21);
                b = _mm512_set1_ps(p3[j]);
                a30 = _mm512_fmadd_ps(b, v0, a30); a31 = _mm512_fmadd_ps(b, v1, a31);
            }
            _mm512_storeu_ps(o0 + c, a00); _mm512_storeu_ps(o0 + c + 16, a01);
            _mm512_storeu_ps(o1 + c, a10); _mm512_storeu_ps(o1 + c + 16, a11);
            _mm512_storeu_ps(o2 + c, a20); _mm512_storeu_ps(o2 + c + 16, a21);
            _mm512_storeu_ps(o3 + c, a30); _mm512_storeu_ps(o3 + c + 16, a31);
        }
        for (; c + 16 <= Dp; c += 16) {
            __m512 a0 = _mm512_loadu_ps(o0 + c), a1 = _mm512_loadu_ps(o1 + c);
            __m512 a2 = _mm512_loadu_ps(o2 + c), a3 = _mm512_loadu_ps(o3 + c);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                const __m512 v0 = ld16(V[j], c, f16);
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(p0[j]), v0, a0);
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(p1[j]), v0, a1);
                a2 = _mm512_fmadd_ps(_mm512_set1_ps(p2[j]), v0, a2);
                a3 = _mm512_fmadd_ps(_mm512_set1_ps(p3[j]), v0, a3);
            }
            _mm512_storeu_ps(o0 + c, a0); _mm512_storeu_ps(o1 + c, a1);
            _mm512_storeu_ps(o2 + c, a2); _mm512_storeu_ps(o3 + c, a3);
        }
        for (; c < Dp; c += 8) { /* Dp is a multiple of 8 */
            __m256 a0 = _mm256_loadu_ps(o0 + c), a1 = _mm256_loadu_ps(o1 + c);
            __m256 a2 = _mm256_loadu_ps(o2 + c), a3 = _mm256_loadu_ps(o3 + c);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                const __m256 v0 = ld8(V[j], c, f16);
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(p0[j]), v0, a0);
                a1 = _mm256_fmadd_ps(_mm256_set1_ps(p1[j]), v0, a1);
                a2 = _mm256_fmadd_ps(_mm256_set1_ps(p2[j]), v0, a2);
                a3 = _mm256_fmadd_ps(_mm256_set1_ps(p3[j]), v0, a3);
            }
            _mm256_storeu_ps(o0 + c, a0); _mm256_storeu_ps(o1 + c, a1);
            _mm256_storeu_ps(o2 + c, a2); _mm256_storeu_ps(o3 + c, a3);
        }
    }
    for (; r < R; r++) {
        const float *p0 = P + (size_t)r * ldp;
        float *o0 = A + (size_t)r * lda;
        int c = 0;
        for (; c + 128 <= Dp; c += 128) { /* one pass over V for 128 columns: 8 chains in flight */
            __m512 a[8];
            for (int i = 0; i < 8; i++) a[i] = _mm512_loadu_ps(o0 + c + 16 * i);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                const __m512 b = _mm512_set1_ps(p0[j]);
                for (int i = 0; i < 8; i++) a[i] = _mm512_fmadd_ps(b, ld16(V[j], c + 16 * i, f16), a[i]);
            }
            for (int i = 0; i < 8; i++) _mm512_storeu_ps(o0 + c + 16 * i, a[i]);
        }
        for (; c + 64 <= Dp; c += 64) {
            __m512 a[4];
            for (int i = 0; i < 4; i++) a[i] = _mm512_loadu_ps(o0 + c + 16 * i);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                const __m512 b = _mm512_set1_ps(p0[j]);
                for (int i = 0; i < 4; i++) a[i] = _mm512_fmadd_ps(b, ld16(V[j], c + 16 * i, f16), a[i]);
            }
            for (int i = 0; i < 4; i++) _mm512_storeu_ps(o0 + c + 16 * i, a[i]);
        }
        for (; c + 16 <= Dp; c += 16) {
            __m512 a0 = _mm512_loadu_ps(o0 + c);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(p0[j]), ld16(V[j], c, f16), a0);
            }
            _mm512_storeu_ps(o0 + c, a0);
        }
        for (; c < Dp; c += 8) {
            __m256 a0 = _mm256_loadu_ps(o0 + c);
            for (int j = 0; j < n; j++) {
                if (c == 0 && r == 0) pf_row(V[j], pf, rb);
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(p0[j]), ld8(V[j], c, f16), a0);
            }
            _mm256_storeu_ps(o0 + c, a0);
        }
    }
}

static void pv_avx512(int R, int Dp, int n, const float *P, int ldp, const float *const *V, float *A, int lda, int pf) {
    pv_body(R, Dp, n, P, ldp, (const void *const *)V, A, lda, false, pf);
}
static void pv_f16_avx512(int R, int Dp, int n, const float *P, int ldp, const uint16_t *const *V, float *A, int lda,
                          int pf) {
    pv_body(R, Dp, n, P, ldp, (const void *const *)V, A, lda, true, pf);
}

void attn_flash_avx512_install(attn_flash_ops *ops) {
    ops->scores_rows = scores_rows_avx512;
    ops->scores_rows_f16 = scores_rows_f16_avx512;
    ops->pv = pv_avx512;
    ops->pv_f16 = pv_f16_avx512;
}
#else
typedef int attn_flash_avx512_unused; /* not an x86-64 AVX-512 build: nothing here */
#endif
