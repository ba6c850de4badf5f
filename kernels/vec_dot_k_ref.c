/* vec_dot_k_ref.c - reference dot products of K-quant weight rows with
 * Q8_K activation rows (the spec the SIMD tiers match).
 *
 * Per super-block of 256, with w = (d * sc[s]) * q - dmin * mn[s] and
 * a = dy * q8:
 *   sum_e w_e a_e = d*dy * sum_s sc[s] * sum_{e in s} q_e q8_e
 *                 - dmin*dy * sum_s mn[s] * sum_{e in s} q8_e
 * Both sums are exact int32 (below); the second uses the Q8_K block's
 * bsums (sums of 16 q8).  Each super-block's two integers are scaled in
 * float and super-blocks are summed in float, as ggml's generic kernels do.
 * Integer range: |q| <= 32 (Q6_K), |sc| <= 128, |q8| <= 127, 256 terms:
 * |isum| <= 256 * 32 * 127 * 128 < 2^28, well inside int32 (its conversion
 * to float rounds by at most 2^-24 relative). */
#include "kernels/quants.h"

/* the dot of one unpacked weight block with one Q8_K block; sub and
 * has_min are constants at each call, so each type gets its own loop */
static inline float dot_kblock(const kern_kblock *u, const block_q8_K *y, const int sub, const bool has_min) {
    int32_t isum = 0, msum = 0;
    for (int s = 0; s < QK_K / sub; s++) {
        int32_t qq = 0;
        for (int e = s * sub; e < (s + 1) * sub; e++) qq += u->q[e] * y->qs[e];
        isum += u->sc[s] * qq;
        if (has_min) {
            int32_t q8sum = 0; /* sum of the q8 of sub-block s from the 16-element bsums */
            for (int g = s * sub / 16; g < (s + 1) * sub / 16; g++) q8sum += y->bsums[g];
            msum += u->mn[s] * q8sum;
        }
    }
    const float dall = y->d * u->d;
    if (!has_min) return dall * (float)isum;
    return dall * (float)isum - y->d * u->dmin * (float)msum;
}

/* One function per weight type: unpack each block, dot it, sum in order. */
#define KQ_VEC_DOT(name, block_t, unpack, sub, has_min)                        \
    void name(int64_t n, float *s, const void *vx, const void *vy) {           \
        const block_t *x = vx;                                                 \
        const block_q8_K *y = vy;                                              \
        kern_kblock u;                                                         \
        float sum = 0.0f;                                                      \
        for (int64_t b = 0; b < n / QK_K; b++) {                               \
            unpack(&x[b], &u);                                                 \
            sum += dot_kblock(&u, &y[b], sub, has_min);                        \
        }                                                                      \
        *s = sum;                                                              \
    }

KQ_VEC_DOT(kern_vec_dot_q2_k_q8_k_ref, block_q2_K, kern_unpack_q2_k, 16, true)
KQ_VEC_DOT(kern_vec_dot_q3_k_q8_k_ref, block_q3_K, kern_unpack_q3_k, 16, false)
KQ_VEC_DOT(kern_vec_dot_q4_k_q8_k_ref, block_q4_K, kern_unpack_q4_k, 32, true)
KQ_VEC_DOT(kern_vec_dot_q5_k_q8_k_ref, block_q5_K, kern_unpack_q5_k, 32, true)
KQ_VEC_DOT(kern_vec_dot_q6_k_q8_k_ref, block_q6_K, kern_unpack_q6_k, 16, false)
