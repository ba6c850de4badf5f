/* test_repack.c - weights packed in groups of 8 rows (kernels/repack.h), every
 * packed type (Q8_0, Q4_0, Q2_K .. Q6_K, F16, the 2:4 S24_Q8 and S24_F16) through the same
 * entry points:
 *  1. pack / unpack round-trips every row, missing rows of the last group are zero;
 *  2. every tier's kern_matmul_packed is bit-identical to kern_matmul_packed_ref
 *     for T = 1..9 (each tile width and the tails), N with a partial group,
 *     threaded and not, and a T = 1 call equals that row of a batched call;
 *  3. the packed ref equals the spec written out once more here (integer
 *     dot per block, fmaf in block order; F16: one fmaf chain in k order)
 *     on a few outputs;
 *  4. the AVX2 Q8_K activation quantizer gives the _ref bytes;
 *  5. kern_matmul_packed vs kern_matmul_ref (dequantized weights, float
 *     activations): the bound of the activation rounding and summation;
 *  6. the AVX-512 VNNI tile of every type, compiled for AVX2 with vpdpbusd
 *     emulated (tests/repack_avx512_emulated.c), is bit-identical to the
 *     packed ref, and so is the real one on an AVX-512 CPU (where 2. also
 *     runs it at the avx512 tier). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/kernels.h"
#include "kernels/quants.h"
#include "kernels/repack.h"
#include "kernels/sparse24.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

enum { NTYPES = 13 };
static const int TYPES[NTYPES] = {KT_Q8_0, KT_Q4_0, KT_Q4_1, KT_Q5_0, KT_Q5_1, KT_Q2_K,
                                  KT_Q3_K, KT_Q4_K, KT_Q5_K, KT_Q6_K, KT_F16, KT_S24_Q8,
                                  KT_S24_F16};
/* 32-element types with a block minimum m (x = q d + m; Q8_1 activations) */
static bool has_m(int t) { return t == KT_Q4_1 || t == KT_Q5_1; }
/* Q4_1, Q5_0, Q5_1 */
static bool is_legacy45(int t) { return t == KT_Q4_1 || t == KT_Q5_0 || t == KT_Q5_1; }
static bool is_k(int t) { return t == KT_Q2_K || t == KT_Q3_K || t == KT_Q4_K || t == KT_Q5_K || t == KT_Q6_K; }
/* K-quants with sub-block minimums */
static bool has_min(int t) { return t == KT_Q2_K || t == KT_Q4_K || t == KT_Q5_K; }
/* packed bytes per row and super-block beyond the file's: the unpacked 12 scale bytes */
static size_t extra_bytes(int t) { return t == KT_Q3_K || t == KT_Q4_K || t == KT_Q5_K ? 4 : 0; }
/* one super-block in the integer view */
static void unpack_k(int t, const uint8_t *row, int64_t b, kern_kblock *u) {
    switch (t) {
    case KT_Q2_K: kern_unpack_q2_k((const block_q2_K *)row + b, u); break;
    case KT_Q3_K: kern_unpack_q3_k((const block_q3_K *)row + b, u); break;
    case KT_Q4_K: kern_unpack_q4_k((const block_q4_K *)row + b, u); break;
    case KT_Q5_K: kern_unpack_q5_k((const block_q5_K *)row + b, u); break;
    default: kern_unpack_q6_k((const block_q6_K *)row + b, u); break;
    }
}
/* K scaled to the type's block: K-quants take 256-element super-blocks, S24_Q8 64-element blocks */
static int64_t kdim(int t, int64_t k32) { return is_k(t) ? k32 * 8 : t == KT_S24_Q8 ? k32 * 2 : k32; }

/* N x K weights of type t from random floats; Q8_0 rows also get a few
 * -128 bytes; every fifth K-quant row gets the extreme integers of the
 * overflow bounds in its first block (Q4_1: q = 15; Q5_0, Q5_1: q = 31;
 * Q4_K: sc = m = 63, q = 15; Q5_K:
 * q = 31; Q6_K: sc = -128 and 127, q = 0 i.e. -32; Q3_K: sc = -32 and 31,
 * q = -4; Q2_K: sc = m = 15, q = 3) */
static uint8_t *make_weights(int t, int64_t N, int64_t K) {
    const size_t rb = kern_row_bytes(t, K);
    uint8_t *W = malloc(rb * (size_t)N);
    float *row = malloc(sizeof(float) * (size_t)K);
    for (int64_t n = 0; n < N; n++) {
        uint8_t *wr = W + (size_t)n * rb;
        for (int64_t k = 0; k < K; k++) row[k] = frand() * (1.0f + (float)(n % 3));
        kern_type_get(t)->from_float_ref(row, wr, K);
        if (t == KT_Q8_0) ((block_q8_0 *)wr)[0].qs[n % 32] = -128;
        if (t == KT_S24_Q8) ((block_s24_q8 *)wr)[0].q[n % 32] = -128;
        if (n % 5 == 0 && t == KT_Q4_1) memset(((block_q4_1 *)wr)->qs, 0xff, QK4_1 / 2); /* q = 15 */
        if (n % 5 == 0 && t == KT_Q5_0) { /* q = 31 */
            memset(((block_q5_0 *)wr)->qs, 0xff, QK5_0 / 2);
            memset(((block_q5_0 *)wr)->qh, 0xff, 4);
        }
        if (n % 5 == 0 && t == KT_Q5_1) {
            memset(((block_q5_1 *)wr)->qs, 0xff, QK5_1 / 2);
            memset(((block_q5_1 *)wr)->qh, 0xff, 4);
        }
        if (n % 5 == 0 && t == KT_Q4_K) {
            block_q4_K *b = (block_q4_K *)wr;
            memset(b->scales, 0xff, sizeof b->scales);
            memset(b->qs, 0xff, sizeof b->qs);
        }
        if (n % 5 == 0 && t == KT_Q5_K) {
            block_q5_K *b = (block_q5_K *)wr;
            memset(b->scales, 0xff, sizeof b->scales);
            memset(b->qs, 0xff, sizeof b->qs);
            memset(b->qh, 0xff, sizeof b->qh);
        }
        if (n % 5 == 0 && t == KT_Q2_K) {
            block_q2_K *b = (block_q2_K *)wr;
            memset(b->scales, 0xff, sizeof b->scales);
            memset(b->qs, 0xff, sizeof b->qs);
        }
        if (n % 5 == 0 && t == KT_Q3_K) {
            block_q3_K *b = (block_q3_K *)wr;
            /* 6-bit v = sc + 32: v = 0 (sc -32) for even j, 63 (sc 31) for odd j */
            memset(b->scales, 0, sizeof b->scales);
            for (int j = 1; j < 16; j += 2) {
                b->scales[j % 8] |= (uint8_t)(15 << (j < 8 ? 0 : 4));
                b->scales[8 + j % 4] |= (uint8_t)(3 << (2 * (j / 4)));
            }
            memset(b->qs, 0, sizeof b->qs);
            memset(b->hmask, 0, sizeof b->hmask);
        }
        if (n % 5 == 0 && t == KT_Q6_K) {
            block_q6_K *b = (block_q6_K *)wr;
            for (int s = 0; s < 16; s++) b->scales[s] = s % 2 ? 127 : -128;
            memset(b->ql, 0, sizeof b->ql);
            memset(b->qh, 0, sizeof b->qh);
        }
        /* every fifth row + 2: the other end of the 16-element-sub-block
         * codes (Q6_K: q = 63, sc = 127 and -128; Q3_K: q = 7 i.e. +3, sc = 31
         * and -32; Q2_K: q = 3 with sc = 15, m = 0) */
        if (n % 5 == 2 && t == KT_Q6_K) {
            block_q6_K *b = (block_q6_K *)wr;
            for (int s = 0; s < 16; s++) b->scales[s] = s % 2 ? -128 : 127;
            memset(b->ql, 0xff, sizeof b->ql);
            memset(b->qh, 0xff, sizeof b->qh);
        }
        if (n % 5 == 2 && t == KT_Q3_K) {
            block_q3_K *b = (block_q3_K *)wr;
            memset(b->scales, 0, sizeof b->scales); /* as above, odd and even swapped */
            for (int j = 0; j < 16; j += 2) {
                b->scales[j % 8] |= (uint8_t)(15 << (j < 8 ? 0 : 4));
                b->scales[8 + j % 4] |= (uint8_t)(3 << (2 * (j / 4)));
            }
            memset(b->qs, 0xff, sizeof b->qs);
            memset(b->hmask, 0xff, sizeof b->hmask);
        }
        if (n % 5 == 2 && t == KT_Q2_K) {
            block_q2_K *b = (block_q2_K *)wr;
            memset(b->scales, 0x0f, sizeof b->scales);
            memset(b->qs, 0xff, sizeof b->qs);
        }
    }
    free(row);
    return W;
}

static void test_roundtrip(void **state) {
    (void)state;
    const int64_t Ns[] = {8, 13, 172};
    for (int ti = 0; ti < NTYPES; ti++)
        for (int ni = 0; ni < 3; ni++) {
            const int t = TYPES[ti];
            const int64_t N = Ns[ni], K = kdim(t, 96);
            const size_t rb = kern_row_bytes(t, K);
            uint8_t *W = make_weights(t, N, K), *P = malloc(kern_pack_bytes(t, N, K)), *row = malloc(rb);
            /* the file's size, except Q3_K's, Q4_K's and Q5_K's unpacked scales */
            assert_int_equal(kern_pack_bytes(t, N, K), ((N + 7) / 8) * 8 * (rb + (size_t)K / QK_K * extra_bytes(t)));
            const int64_t G = (N + 7) / 8;
            kern_pack(W, t, N, K, P, 0, G / 2); /* two ranges, as two threads would */
            kern_pack(W, t, N, K, P, G / 2, G);
            for (int64_t n = 0; n < N; n++) {
                kern_unpack_row(P, t, G * 8, K, n, row);
                assert_memory_equal(row, W + (size_t)n * rb, rb);
            }
            for (int64_t n = N; n < G * 8; n++) { /* padding rows: d = 0, q = 0, scales 0 */
                kern_unpack_row(P, t, G * 8, K, n, row);
                if (t == KT_Q3_K) { /* a zero 6-bit scale is stored as 32: check the values */
                    float *v = malloc(sizeof(float) * (size_t)K);
                    kern_type_get(t)->to_float(row, v, K);
                    for (int64_t k = 0; k < K; k++) assert_true(v[k] == 0.0f);
                    free(v);
                } else
                    for (size_t i = 0; i < rb; i++) assert_int_equal(row[i], 0);
            }
            free(W); free(P); free(row);
        }
}

/* the spec once more, independently of repack.c: original rows, fmaf per block */
static float spec_dot(int t, const uint8_t *wrow, const block_q8_0 *a, int64_t K) {
    float acc = 0.0f;
    if (t == KT_F16) { /* a: the F16-rounded activations; one fmaf chain in k order */
        for (int64_t k = 0; k < K; k++)
            acc = fmaf(kern_fp16_to_fp32(((const uint16_t *)wrow)[k]), kern_fp16_to_fp32(((const uint16_t *)a)[k]), acc);
        return acc;
    }
    if (t == KT_S24_F16) { /* a: the F32 inputs; eight fmaf chains (column group mod 4, kept slot parity) */
        const float *af = (const float *)a;
        float A[4][2] = {{0}};
        for (int64_t i = 0; i < K / 4; i++) { /* column group i: slots of its two kept values in the file */
            const block_s24_f16 *w = (const block_s24_f16 *)wrow + i / 8;
            const int g = (int)(i % 8);
            for (int sl = 0; sl < 16; sl++) {
                if (4 * (sl / 8) + kern_s24f16_grp[sl % 8] != g) continue; /* slots sl, sl + 1: lower position first */
                const int e = sl % 2;
                A[i % 4][e] = fmaf(kern_fp16_to_fp32(w->v[sl]), af[4 * i + ((w->idx >> (2 * sl)) & 3)], A[i % 4][e]);
            }
        }
        return ((A[0][0] + A[0][1]) + (A[1][0] + A[1][1])) + ((A[2][0] + A[2][1]) + (A[3][0] + A[3][1]));
    }
    if (t == KT_S24_Q8) { /* a: S24_A8 rows; per half block the exact dot, fmaf */
        const block_s24_a8 *a8 = (const block_s24_a8 *)a;
        for (int64_t b = 0; b < K / QK_S24_Q8; b++) {
            const block_s24_q8 *w = (const block_s24_q8 *)wrow + b;
            for (int h = 0; h < 2; h++) {
                int32_t i = 0;
                for (int k = 16 * h; k < 16 * h + 16; k++) i += w->q[k] * kern_s24a8_at(&a8[b], 4 * (k / 2) + kern_s24q8_pos(w, k));
                acc = fmaf((float)i, kern_fp16_to_fp32(w->d) * a8[b].d[4 * h], acc);
            }
        }
        return acc;
    }
    if (is_k(t)) { /* a: Q8_K rows; sub-block sums of a from qs, not bsums */
        const block_q8_K *ak = (const block_q8_K *)a;
        for (int64_t b = 0; b < K / QK_K; b++) {
            kern_kblock u;
            unpack_k(t, wrow, b, &u);
            int32_t I = 0, M = 0;
            for (int s = 0; s < QK_K / u.sub; s++) {
                int32_t qa = 0, sa = 0;
                for (int e = s * u.sub; e < (s + 1) * u.sub; e++) {
                    qa += u.q[e] * ak[b].qs[e];
                    sa += ak[b].qs[e];
                }
                I += u.sc[s] * qa;
                M += u.mn[s] * sa;
            }
            acc = fmaf((float)I, u.d * ak[b].d, acc);
            if (has_min(t)) acc = fmaf((float)M, -(u.dmin * ak[b].d), acc);
        }
        return acc;
    }
    if (has_m(t)) { /* a: Q8_1 rows; x = q d + m: fmaf of the integer dot, then fmaf(m, s_a) */
        const block_q8_1 *a1 = (const block_q8_1 *)a;
        for (int64_t b = 0; b < K / 32; b++) {
            const uint8_t *qs;
            uint32_t qh = 0;
            kern_half d, m;
            if (t == KT_Q4_1) {
                const block_q4_1 *w = (const block_q4_1 *)wrow + b;
                d = w->d, m = w->m, qs = w->qs;
            } else {
                const block_q5_1 *w = (const block_q5_1 *)wrow + b;
                d = w->d, m = w->m, qs = w->qs;
                memcpy(&qh, w->qh, 4);
            }
            int32_t isum = 0;
            for (int i = 0; i < 16; i++) {
                const int q0 = (qs[i] & 15) | (int)((qh >> i) & 1) << 4, q1 = (qs[i] >> 4) | (int)((qh >> (16 + i)) & 1) << 4;
                isum += q0 * a1[b].qs[i] + q1 * a1[b].qs[i + 16];
            }
            acc = fmaf((float)isum, kern_fp16_to_fp32(d) * kern_fp16_to_fp32(a1[b].d), acc);
            acc = fmaf(kern_fp16_to_fp32(m), kern_fp16_to_fp32(a1[b].s), acc);
        }
        return acc;
    }
    for (int64_t b = 0; b < K / 32; b++) {
        int32_t isum = 0;
        float dw;
        if (t == KT_Q5_0) {
            const block_q5_0 *w = (const block_q5_0 *)wrow + b;
            uint32_t qh;
            memcpy(&qh, w->qh, 4);
            for (int i = 0; i < 16; i++)
                isum += (((w->qs[i] & 15) | (int)((qh >> i) & 1) << 4) - 16) * a[b].qs[i] +
                        (((w->qs[i] >> 4) | (int)((qh >> (16 + i)) & 1) << 4) - 16) * a[b].qs[i + 16];
            dw = kern_fp16_to_fp32(w->d);
        } else if (t == KT_Q8_0) {
            const block_q8_0 *w = (const block_q8_0 *)wrow + b;
            for (int i = 0; i < 32; i++) isum += w->qs[i] * a[b].qs[i];
            dw = kern_fp16_to_fp32(w->d);
        } else {
            const block_q4_0 *w = (const block_q4_0 *)wrow + b;
            for (int i = 0; i < 16; i++)
                isum += ((w->qs[i] & 15) - 8) * a[b].qs[i] + ((w->qs[i] >> 4) - 8) * a[b].qs[i + 16];
            dw = kern_fp16_to_fp32(w->d);
        }
        acc = fmaf((float)isum, dw * kern_fp16_to_fp32(a[b].d), acc);
    }
    return acc;
}

static void test_tiers_bit_identical(void **state) {
    (void)state;
    enum { TMAX = 9 };
    /* N = 136: 17 groups, so each of 2 threads gets F16's 8-group decode tile */
    const int64_t Ns[] = {8, 21, 136}, Ks[] = {32, 160, 512};
    core_pool *pool = core_pool_new(2);
    const kern_tier best = kern_best_tier();
    for (int ti = 0; ti < NTYPES; ti++)
        for (int ni = 0; ni < 3; ni++)
            for (int ki = 0; ki < 3; ki++) {
                const int t = TYPES[ti];
                /* K-quants: 256, 1280, 4096 would be slow in the ref; 256, 512, 768 */
                const int64_t N = Ns[ni], K = is_k(t) ? 256 * (ki + 1) : kdim(t, Ks[ki]);
                uint8_t *W = make_weights(t, N, K), *P = malloc(kern_pack_bytes(t, N, K));
                kern_pack(W, t, N, K, P, 0, (N + 7) / 8);
                float *x = malloc(sizeof(float) * TMAX * K), *yr = malloc(sizeof(float) * TMAX * N),
                      *y = malloc(sizeof(float) * TMAX * N), *y1 = malloc(sizeof(float) * N);
                /* the last K-quant shape: activations of one magnitude, so every
                 * q is +-127 (the int16 bounds of the tiles at their limit) */
                const bool flat = (is_k(t) || is_legacy45(t)) && ki == 2;
                for (int i = 0; i < TMAX * K; i++) x[i] = flat ? (frand() < 0 ? -3.0f : 3.0f) : frand() * 3.0f;
                void *scratch = malloc(kern_matmul_scratch_bytes(TMAX, K));
                for (int T = 1; T <= TMAX; T++) {
                    kern_matmul_packed_ref(P, t, x, yr, T, N, K);
                    /* the spec, on a few outputs */
                    const int at = kern_type_get(t)->vec_dot_type;
                    block_q8_0 *aq = malloc(kern_row_bytes(at, K));
                    for (int tt = 0; tt < T; tt += 3) {
                        kern_type_get(at)->from_float_ref(x + tt * K, aq, K);
                        for (int64_t n = 0; n < N; n += 5) {
                            const float s = spec_dot(t, W + (size_t)n * kern_row_bytes(t, K), aq, K);
                            if (memcmp(&s, &yr[tt * N + n], 4))
                                fail_msg("%s packed ref != spec at [%d][%d]: %.9g vs %.9g", kern_type_name(t), tt,
                                         (int)n, yr[tt * N + n], s);
                        }
                    }
                    free(aq);
                    for (int tier = KERN_TIER_REF; tier <= (int)best; tier++) {
                        assert_true(kern_set_tier((kern_tier)tier));
                        for (int threaded = 0; threaded < 2; threaded++) {
                            memset(y, 0xff, sizeof(float) * TMAX * N);
                            kern_matmul_packed(threaded ? pool : NULL, scratch, P, t, x, y, T, N, K);
                            if (memcmp(y, yr, sizeof(float) * (size_t)T * (size_t)N))
                                fail_msg("%s tier %s T=%d N=%d K=%d: not bit-identical to the packed ref",
                                         kern_type_name(t), kern_tier_name((kern_tier)tier), T, (int)N, (int)K);
                        }
                        /* one row alone == that row of the batch */
                        kern_matmul_packed(pool, scratch, P, t, x + (T - 1) * K, y1, 1, N, K);
                        assert_memory_equal(y1, yr + (size_t)(T - 1) * (size_t)N, sizeof(float) * (size_t)N);
                    }
                    kern_set_tier(best);
                }
                free(W); free(P); free(x); free(yr); free(y); free(y1); free(scratch);
            }
    core_pool_free(pool);
}

/* kern_matmul_packed_n (Q, K, V or gate, up in one call): each output is
 * bit-identical to its own kern_matmul_packed, for every type, 1 and 2
 * threads, decode and batches, matrices of different heights (one with a
 * partial last group) */
static void test_packed_n(void **state) {
    (void)state;
    core_pool *pool = core_pool_new(2);
    const int64_t Ns[3] = {64, 21, 136};
    for (int ti = 0; ti < NTYPES; ti++) {
        const int t = TYPES[ti];
        const int64_t K = is_k(t) ? 512 : 256;
        uint8_t *P[3];
        float *x = malloc(sizeof(float) * 9 * K), *y[3], *y1 = malloc(sizeof(float) * 9 * 136);
        for (int i = 0; i < 9 * K; i++) x[i] = frand() * 2.0f;
        kern_packed_out out[3];
        for (int i = 0; i < 3; i++) {
            uint8_t *W = make_weights(t, Ns[i], K);
            P[i] = malloc(kern_pack_bytes(t, Ns[i], K));
            kern_pack(W, t, Ns[i], K, P[i], 0, (Ns[i] + 7) / 8);
            free(W);
            y[i] = malloc(sizeof(float) * 9 * (size_t)Ns[i]);
            out[i] = (kern_packed_out){P[i], Ns[i], y[i]};
        }
        void *scratch = malloc(kern_matmul_scratch_bytes(9, K));
        for (int T = 1; T <= 9; T += 4)
            for (int threaded = 0; threaded < 2; threaded++)
                for (int n = 1; n <= 3; n++) {
                    kern_matmul_packed_n(threaded ? pool : NULL, scratch, t, out, n, x, T, K);
                    for (int i = 0; i < n; i++) {
                        kern_matmul_packed(threaded ? pool : NULL, scratch, P[i], t, x, y1, T, Ns[i], K);
                        if (memcmp(y1, y[i], sizeof(float) * (size_t)T * (size_t)Ns[i]))
                            fail_msg("%s T=%d threads=%d: matrix %d of %d in one call != its own call",
                                     kern_type_name(t), T, threaded + 1, i, n);
                    }
                }
        for (int i = 0; i < 3; i++) { free(P[i]); free(y[i]); }
        free(x); free(y1); free(scratch);
    }
    core_pool_free(pool);
}

/* decode (T = 1) over enough row groups that threads take chunks of
 * several, with a partial last group: bit-identical to the packed ref at
 * every tier, 1 and 2 threads */
static void test_decode_many_groups(void **state) {
    (void)state;
    enum { N = 1001 };
    core_pool *pool = core_pool_new(2);
    const kern_tier best = kern_best_tier();
    for (int ti = 0; ti < NTYPES; ti++) {
        const int t = TYPES[ti];
        const int64_t K = is_k(t) ? 256 : kdim(t, 96);
        uint8_t *W = make_weights(t, N, K), *P = malloc(kern_pack_bytes(t, N, K));
        kern_pack(W, t, N, K, P, 0, (N + 7) / 8);
        float *x = malloc(sizeof(float) * K), *y = malloc(sizeof(float) * N), *yr = malloc(sizeof(float) * N);
        for (int i = 0; i < K; i++) x[i] = frand() * 2.0f;
        void *scratch = malloc(kern_matmul_scratch_bytes(1, K));
        kern_matmul_packed_ref(P, t, x, yr, 1, N, K);
        for (int tier = KERN_TIER_REF; tier <= (int)best; tier++) {
            assert_true(kern_set_tier((kern_tier)tier));
            for (int threaded = 0; threaded < 2; threaded++) {
                memset(y, 0xff, sizeof(float) * N);
                kern_matmul_packed(threaded ? pool : NULL, scratch, P, t, x, y, 1, N, K);
                if (memcmp(y, yr, sizeof(float) * N))
                    fail_msg("%s tier %s threads %d: decode over %d rows != the packed ref", kern_type_name(t),
                             kern_tier_name((kern_tier)tier), threaded + 1, N);
            }
        }
        kern_set_tier(best);
        free(W); free(P); free(x); free(y); free(yr); free(scratch);
    }
    core_pool_free(pool);
}

/* packed (threaded, best tier) vs kern_matmul_ref.  Bound per output, with
 * amax = max |x|, the activation rounding error per element is at most
 * amax / 254 (Q8_0, Q8_K and S24_A8: d <= amax / 127, round to nearest; the
 * integer dots are exact, so that error passes through unchanged), so
 *   |dy| <= sum|w| * amax / 254 + 4 (K + 2) 2^-24 sum|w a|
 * (the second term: float summation in two different orders).  F16
 * activations are rounded to F16 instead: at most 2^-11 |a| per element
 * (normal range), so the first term is 2^-11 sum|w a|. */
static void test_vs_matmul_ref(void **state) {
    (void)state;
    enum { N = 37, K = 256, T = 6 };
    core_pool *pool = core_pool_new(2);
    for (int ti = 0; ti < NTYPES; ti++) {
        const int t = TYPES[ti];
        uint8_t *W = make_weights(t, N, K), *P = malloc(kern_pack_bytes(t, N, K));
        /* |terms| the float arithmetic rounds: with minimums (Q2_K, Q4_K, Q5_K)
         * the two products per super-block are d sc q and dmin m (not w) */
        float *wm = malloc(sizeof(float) * N * K);
        float *mb = calloc((size_t)N * K, sizeof(float)); /* Q4_1, Q5_1: each element's block m */
        for (int n = 0; n < N && has_m(t); n++)
            for (int b = 0; b < K / 32; b++) {
                const uint8_t *wr = W + (size_t)n * kern_row_bytes(t, K);
                const kern_half m = t == KT_Q4_1 ? ((const block_q4_1 *)wr)[b].m : ((const block_q5_1 *)wr)[b].m;
                for (int e = 0; e < 32; e++) mb[n * K + b * 32 + e] = kern_fp16_to_fp32(m);
            }
        for (int n = 0; n < N; n++)
            for (int b = 0; b < K / QK_K; b++) {
                if (!has_min(t)) break;
                kern_kblock u;
                unpack_k(t, W + (size_t)n * kern_row_bytes(t, K), b, &u);
                for (int e = 0; e < QK_K; e++)
                    wm[n * K + b * QK_K + e] =
                        fabsf(u.d * (float)u.sc[e / u.sub] * u.q[e]) + fabsf(u.dmin * (float)u.mn[e / u.sub]);
            }
        kern_pack(W, t, N, K, P, 0, (N + 7) / 8);
        float *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N), *yr = malloc(sizeof(float) * T * N),
              *wd = malloc(sizeof(float) * N * K);
        for (int i = 0; i < T * K; i++) x[i] = frand() * 2.0f;
        for (int n = 0; n < N; n++) kern_type_get(t)->to_float(W + (size_t)n * kern_row_bytes(t, K), wd + n * K, K);
        void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
        kern_matmul_packed(pool, scratch, P, t, x, y, T, N, K);
        kern_matmul_ref(W, t, x, yr, T, N, K);
        for (int tt = 0; tt < T; tt++) {
            float amax = 0;
            for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[tt * K + k]));
            for (int n = 0; n < N; n++) {
                double sw = 0, swa = 0, sm = 0;
                for (int k = 0; k < K; k++) {
                    const double xk = fabs(x[tt * K + k]), m = fabs(mb[n * K + k]);
                    sw += fabs(wd[n * K + k]);
                    /* rounded terms: d sc q and dmin m (K-quants), q d and m (Q4_1, Q5_1) */
                    swa += (has_min(t) ? wm[n * K + k] : has_m(t) ? fabs(wd[n * K + k] - mb[n * K + k]) + m
                                                                  : fabs(wd[n * K + k])) * xk;
                    /* Q8_1's s_a = d_a sum(q_a) is stored as F16: 2^-11 relative of
                     * |s_a| <= sum |x| + 32 amax / 254 per block, 2^-25 absolute below
                     * F16's normal range */
                    sm += m * (xk + amax / 254.0) * ldexp(1.0, -11) + (k % 32 == 0 ? m * ldexp(1.0, -25) : 0);
                }
                const double act = t == KT_F16 ? ldexp(1.0, -11) * swa : t == KT_S24_F16 ? 0.0 /* F32 inputs */
                                                                                         : sw * amax / 254.0;
                const double tol = (act + sm) * 1.01 + 4.0 * (K + 2) * ldexp(1.0, -24) * swa;
                if (fabs(y[tt * N + n] - yr[tt * N + n]) > tol)
                    fail_msg("%s: y[%d][%d] %.9g vs ref %.9g (tol %.3g)", kern_type_name(t), tt, n, y[tt * N + n],
                             yr[tt * N + n], tol);
            }
        }
        free(W); free(P); free(x); free(y); free(yr); free(wd); free(wm); free(mb); free(scratch);
    }
    core_pool_free(pool);
}

/* the AVX2 Q8_K quantizer gives kern_quant_q8_k_ref's bytes: random rows,
 * ties of |x| with either sign first, an all-zero block, a constant block,
 * a NaN, an inf and a block too small for a finite iscale */
static void test_quant_q8_k(void **state) {
    (void)state;
#if defined(__x86_64__) || defined(_M_X64)
    if (kern_best_tier() < KERN_TIER_AVX2) skip();
    enum { NB = 24, K = NB * QK_K };
    float *x = malloc(sizeof(float) * K);
    block_q8_K *a = malloc(sizeof(block_q8_K) * NB), *b = malloc(sizeof(block_q8_K) * NB);
    /* 2000 x 15 random blocks: a quantizer whose products are rounded
     * differently (an FMA where _ref rounds x * iscale first) differs on
     * ~0.07% of blocks; this many see ~20 of them */
    for (int rep = 0; rep < 2000; rep++) {
        for (int i = 0; i < K; i++) x[i] = frand() * (float)(1 + rep % 7) * (rep % 3 ? 1.0f : 1e-3f);
        for (int i = 0; i < QK_K; i++) x[i] = 0.0f;                      /* block 0: zero */
        for (int i = QK_K; i < 2 * QK_K; i++) x[i] = 0.7f;               /* block 1: constant */
        x[2 * QK_K + 5] = -9.0f, x[2 * QK_K + 100] = 9.0f;               /* block 2: tie, negative first */
        x[3 * QK_K + 7] = 9.0f, x[3 * QK_K + 200] = -9.0f;               /* block 3: tie, positive first */
        for (int i = 4 * QK_K; i < 5 * QK_K; i++) x[i] = (float)(i % 255 - 127) / 127.0f * 2.5f;
        for (int i = 5 * QK_K; i < 6 * QK_K; i++) x[i] = (float)(i % 17 - 8) * 0.5f; /* many ties of |x| */
        x[6 * QK_K + 3] = NAN;
        x[7 * QK_K + 9] = -INFINITY;
        for (int i = 8 * QK_K; i < 9 * QK_K; i++) x[i] *= 1e-38f;
        kern_quant_q8_k_ref(x, a, K);
        memset(b, 0x55, sizeof(block_q8_K) * NB);
        kern_pack_quant_q8_k_avx2(x, b, K);
        assert_memory_equal(a, b, sizeof(block_q8_K) * NB);
    }
    free(x); free(a); free(b);
#else
    skip();
#endif
}

#if defined(__x86_64__) || defined(_M_X64)
kern_pack_tile_fn kern_pack_tile_avx512_emulated(int wtype);
kern_pack_dec_fn kern_pack_dec_avx512_emulated(int wtype, int *ng);
#endif

static void test_tiles_direct(void **state) {
    (void)state;
#if defined(__x86_64__) || defined(_M_X64)
    if (kern_best_tier() < KERN_TIER_AVX2) skip();
    enum { TMAX = 9 };
    /* on an AVX-512 CPU the real tile too, through the same one-thread driver */
    const bool real = kern_best_tier() >= KERN_TIER_AVX512;
    int n_tiles = 0;
    for (int ti = 0; ti < NTYPES; ti++) {
        const int t = TYPES[ti];
        if (t == KT_F16) continue;
        /* the emulated and the real AVX-512 tile, and the AVX2 one (with its decode runs: the avx2 tier's) */
        const kern_pack_tile_fn tiles[3] = {kern_pack_tile_avx512_emulated(t), real ? kern_pack_tile_avx512(t) : NULL,
                                            kern_pack_tile_avx2(t)};
        /* the decode runs of several groups, where a type has them (Q8_0, the legacy 4/5-bit ones, 2:4,
         * Q2_K / Q3_K / Q4_K;
         * at the avx2 tier Q8_0, the legacy ones and S24_F16) */
        int ngs[3] = {0, 0, 0};
        const kern_pack_dec_fn decs[3] = {kern_pack_dec_avx512_emulated(t, &ngs[0]),
                                          real ? kern_pack_dec_avx512(t, &ngs[1]) : NULL, kern_pack_dec_avx2(t, &ngs[2])};
        const bool has_dec2 =
            t == KT_Q8_0 || t == KT_Q4_0 || t == KT_Q4_1 || t == KT_Q5_0 || t == KT_Q5_1 || t == KT_S24_Q8 || t == KT_S24_F16;
        assert_true((decs[2] != NULL) == has_dec2);
        assert_true(!has_dec2 || ngs[2] > 1);
        const bool has_dec = t == KT_Q8_0 || t == KT_Q4_0 || t == KT_Q4_1 || t == KT_Q5_0 || t == KT_Q5_1 ||
                             t == KT_S24_Q8 || t == KT_S24_F16 || t == KT_Q2_K || t == KT_Q3_K || t == KT_Q4_K;
        assert_non_null(tiles[0]);
        if (real) assert_non_null(tiles[1]); /* the real tile serves the same types */
        assert_true((decs[0] != NULL) == has_dec);
        if (real && !kern_zmm_halved()) assert_true((decs[1] != NULL) == has_dec);
        n_tiles++;
        for (int ki = 0; ki < 3; ki++)
            for (int ni = 0; ni < 3; ni++) {
                /* one full group; two full groups and a partial one; 9 full groups (decode runs of 8 or 4,
                 * then one group alone) and a partial one */
                const int64_t N = (int64_t[]){8, 21, 77}[ni], K = is_k(t) ? 256 * (ki + 1) : kdim(t, (int64_t[]){32, 160, 512}[ki]);
                uint8_t *W = make_weights(t, N, K), *P = malloc(kern_pack_bytes(t, N, K));
                kern_pack(W, t, N, K, P, 0, (N + 7) / 8);
                float *x = malloc(sizeof(float) * TMAX * K), *yr = malloc(sizeof(float) * TMAX * N),
                      *y = malloc(sizeof(float) * TMAX * N);
                const bool flat = ki == 2; /* every activation q at +-127: the integer sums at their bounds */
                for (int i = 0; i < TMAX * K; i++) x[i] = flat ? (frand() < 0 ? -3.0f : 3.0f) : frand() * 3.0f;
                for (int T = 1; T <= TMAX; T++) { /* tile widths C = 1..4 and the tails */
                    kern_matmul_packed_ref(P, t, x, yr, T, N, K);
                    for (int r = 0; r < 3; r++) {
                        if (!tiles[r]) continue;
                        memset(y, 0xff, sizeof(float) * TMAX * N);
                        kern_matmul_packed_tile(tiles[r], decs[r], ngs[r], P, t, x, y, T, N, K);
                        if (memcmp(y, yr, sizeof(float) * (size_t)T * (size_t)N))
                            fail_msg("%s %s tile T=%d N=%d K=%d: not bit-identical to the packed ref", kern_type_name(t),
                                     (const char *[]){"emulated AVX-512", "real AVX-512", "AVX2"}[r], T, (int)N, (int)K);
                    }
                }
                free(W); free(P); free(x); free(yr); free(y);
            }
    }
    assert_int_equal(n_tiles, 12); /* Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K .. Q6_K, S24_Q8, S24_F16 */
#else
    skip();
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_quant_q8_k),
        cmocka_unit_test(test_tiers_bit_identical),
        cmocka_unit_test(test_vs_matmul_ref),
        cmocka_unit_test(test_packed_n),
        cmocka_unit_test(test_decode_many_groups),
        cmocka_unit_test(test_tiles_direct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
