/* test_repack_ptq.c - kvant's PTQ types (absmax / zero-point, 2..8 bits,
 * per tensor, per channel, groups of 32/64/128) in the packed layout
 * (kernels/repack_ptq.c), every one of the 70 through the entry points of
 * kernels/repack.h:
 *  1. pack / unpack round-trips every row to the file's bytes; missing rows
 *     of the last group are zero; the packed matrix takes the file's bytes;
 *     per-row types pack only rows of a multiple of 32 elements;
 *  2. the packed ref equals the spec written out here from the file's
 *     layout (per 32 elements (u - z) . a in int32, fmaf in order);
 *  3. every tier's kern_matmul_packed is bit-identical to the packed ref for
 *     T = 1..9, N with a partial group, threaded or not, and one row alone
 *     equals its row of a batch; kern_matmul_packed_n too;
 *  4. the AVX-512 VNNI tile compiled for AVX2 with vpdpbusd emulated
 *     (tests/repack_avx512_emulated.c) is bit-identical to the packed ref;
 *  5. packed vs kern_matmul_ref (dequantized weights, float activations):
 *     within the bound of the activation rounding.
 * Weights include rows whose codes are all 2^b - 1 or all 0 with z = 0
 * and activations all +-127, the integer bounds of the AVX2 tile. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/kernels.h"
#include "kernels/ptq.h"
#include "kernels/quants.h"
#include "kernels/repack.h"

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static int G_of(int t) {
    int s = 0, b = 2, g = 0;
    kern_ptq_decode(t, &s, &b, &g);
    return kern_ptq_group(g);
}

/* N x K weights of PTQ type t; every 5th row has all codes at 2^b - 1 (and
 * z = 0), every 7th all codes 0 (z = 0; absmax: u - z = -2^(b-1)) */
static uint8_t *make_weights(int t, int64_t N, int64_t K) {
    int s = 0, b = 2, g = 0;
    kern_ptq_decode(t, &s, &b, &g);
    const int G = kern_ptq_group(g) ? kern_ptq_group(g) : (int)K;
    const size_t rb = kern_row_bytes(t, K), hb = KERN_PTQ_HDR(s), fb = hb + kern_ptq_packed_bytes(G, b);
    uint8_t *W = malloc(rb * (size_t)N);
    float *row = malloc(sizeof(float) * (size_t)K);
    uint8_t *u = malloc((size_t)G);
    for (int64_t n = 0; n < N; n++) {
        uint8_t *wr = W + (size_t)n * rb;
        for (int64_t k = 0; k < K; k++) row[k] = frand() * (1.0f + (float)(n % 3)) + (s ? 0.3f : 0.0f);
        kern_type_get(t)->from_float_ref(row, wr, K); /* one row (what per-row types' ref takes) */
        const int fill = n % 5 == 0 ? (1 << b) - 1 : n % 7 == 0 ? 0 : -1;
        if (fill >= 0)
            for (int64_t sb = 0; sb < K / G; sb++) {
                uint8_t *blk = wr + (size_t)sb * fb;
                if (s == KERN_PTQ_ZEROPOINT) blk[2] = 0;
                memset(u, fill, (size_t)G);
                kern_ptq_pack(u, G, b, blk + hb);
            }
    }
    free(u);
    free(row);
    return W;
}

static void test_roundtrip(void **state) {
    (void)state;
    const int64_t Ns[] = {8, 13};
    for (int t = KERN_PTQ_FIRST; t < KERN_PTQ_FIRST + KERN_PTQ_COUNT; t++) {
        assert_true(kern_pack_supported(t));
        if (!G_of(t)) { /* per-row: rows of a multiple of 32 only (stories260K's ffn_down has 172) */
            assert_false(kern_pack_fits(t, 172));
            assert_true(kern_pack_fits(t, 96));
        } else assert_false(kern_pack_fits(t, G_of(t) / 2));
        for (int ni = 0; ni < 2; ni++) {
            const int64_t N = Ns[ni], K = 256;
            assert_true(kern_pack_fits(t, K));
            const size_t rb = kern_row_bytes(t, K);
            uint8_t *W = make_weights(t, N, K), *row = malloc(rb);
            /* the packed matrix is the file's bytes, rounded up to whole groups of 8 rows */
            assert_int_equal(kern_pack_bytes(t, N, K), (size_t)((N + 7) / 8) * 8 * rb);
            uint8_t *P = malloc(kern_pack_bytes(t, N, K));
            const int64_t Gn = (N + 7) / 8;
            kern_pack(W, t, N, K, P, 0, Gn / 2); /* two ranges, as two threads would */
            kern_pack(W, t, N, K, P, Gn / 2, Gn);
            for (int64_t n = 0; n < N; n++) {
                kern_unpack_row(P, t, N, K, n, row);
                if (memcmp(row, W + (size_t)n * rb, rb)) fail_msg("%s row %d: unpack != file", kern_type_name(t), (int)n);
            }
            if (N % 8) { /* rows 13..15 of the last group: all zero, their outputs 0 */
                float x[256], y[13];
                for (int k = 0; k < 256; k++) x[k] = frand();
                kern_matmul_packed_ref(P, t, x, y, 1, N, K);
                for (int n = 0; n < N; n++) assert_true(isfinite(y[n]));
            }
            free(W); free(P); free(row);
        }
    }
}

/* the spec from the file's layout: per 32 elements the exact integer (u - z) . a,
 * then fmaf((float)i, d_w * d_a, acc) in order */
static float spec_dot(int t, const uint8_t *wrow, const block_q8_0 *a, int64_t K) {
    int s = 0, b = 2, g = 0;
    kern_ptq_decode(t, &s, &b, &g);
    const int G = kern_ptq_group(g) ? kern_ptq_group(g) : (int)K;
    const size_t hb = KERN_PTQ_HDR(s), fb = hb + kern_ptq_packed_bytes(G, b);
    uint8_t *u = malloc((size_t)G);
    float acc = 0.0f;
    for (int64_t sb = 0; sb < K / G; sb++) {
        const uint8_t *blk = wrow + (size_t)sb * fb;
        kern_half h;
        memcpy(&h, blk, 2);
        const float d = kern_fp16_to_fp32(h);
        const int z = s == KERN_PTQ_ZEROPOINT ? blk[2] : 1 << (b - 1);
        kern_ptq_unpack(blk + hb, G, b, u);
        for (int e0 = 0; e0 < G; e0 += 32) {
            const block_q8_0 *ab = a + (sb * G + e0) / 32;
            int32_t i = 0;
            for (int e = 0; e < 32; e++) i += ((int)u[e0 + e] - z) * ab->qs[e];
            acc = fmaf((float)i, d * kern_fp16_to_fp32(ab->d), acc);
        }
    }
    free(u);
    return acc;
}

enum { TMAX = 9 };

static void fill_x(float *x, int64_t n, bool flat) {
    for (int64_t i = 0; i < n; i++) x[i] = flat ? (frand() < 0 ? -3.0f : 3.0f) : frand() * 3.0f;
}

static void test_tiers_bit_identical(void **state) {
    (void)state;
    const int64_t N = 21, Ks[] = {128, 384};
    core_pool *pool = core_pool_new(2);
    const kern_tier best = kern_best_tier();
    for (int t = KERN_PTQ_FIRST; t < KERN_PTQ_FIRST + KERN_PTQ_COUNT; t++)
        for (int ki = 0; ki < 2; ki++) {
            const int64_t K = Ks[ki];
            if (!kern_pack_fits(t, K)) continue; /* G128 with K = 384 fits; every other too */
            uint8_t *W = make_weights(t, N, K), *P = malloc(kern_pack_bytes(t, N, K));
            kern_pack(W, t, N, K, P, 0, (N + 7) / 8);
            float *x = malloc(sizeof(float) * TMAX * K), *yr = malloc(sizeof(float) * TMAX * N),
                  *y = malloc(sizeof(float) * TMAX * N), *y1 = malloc(sizeof(float) * N);
            fill_x(x, TMAX * K, ki == 1); /* the second shape: every activation q at +-127 */
            void *scratch = malloc(kern_matmul_scratch_bytes(TMAX, K));
            kern_matmul_packed_ref(P, t, x, yr, TMAX, N, K);
            /* the spec, on some outputs */
            block_q8_0 *aq = malloc(kern_row_bytes(KT_Q8_0, K));
            for (int tt = 0; tt < TMAX; tt += 4) {
                kern_type_get(KT_Q8_0)->from_float_ref(x + tt * K, aq, K);
                for (int64_t n = 0; n < N; n += 2) {
                    const float s = spec_dot(t, W + (size_t)n * kern_row_bytes(t, K), aq, K);
                    if (memcmp(&s, &yr[tt * N + n], 4))
                        fail_msg("%s packed ref != spec at [%d][%d]: %.9g vs %.9g", kern_type_name(t), tt, (int)n,
                                 yr[tt * N + n], s);
                }
            }
            free(aq);
            for (int tier = KERN_TIER_REF; tier <= (int)best; tier++) {
                assert_true(kern_set_tier((kern_tier)tier));
                for (int T = 1; T <= TMAX; T++)
                    for (int threaded = 0; threaded < 2; threaded++) {
                        memset(y, 0xff, sizeof(float) * TMAX * N);
                        kern_matmul_packed(threaded ? pool : NULL, scratch, P, t, x, y, T, N, K);
                        if (memcmp(y, yr, sizeof(float) * (size_t)T * (size_t)N))
                            fail_msg("%s tier %s T=%d K=%d: not bit-identical to the packed ref", kern_type_name(t),
                                     kern_tier_name((kern_tier)tier), T, (int)K);
                    }
                kern_matmul_packed(pool, scratch, P, t, x + 4 * K, y1, 1, N, K);
                assert_memory_equal(y1, yr + 4 * N, sizeof(float) * (size_t)N);
            }
            kern_set_tier(best);
            free(W); free(P); free(x); free(yr); free(y); free(y1); free(scratch);
        }
    core_pool_free(pool);
}

/* Q, K, V of one PTQ type in one call: each equals its own call */
static void test_packed_n(void **state) {
    (void)state;
    core_pool *pool = core_pool_new(2);
    const int types[] = {KERN_PTQ_TYPE(KERN_PTQ_ZEROPOINT, 4, KERN_PTQ_G32), KERN_PTQ_TYPE(KERN_PTQ_ABSMAX, 3, KERN_PTQ_G128),
                         KERN_PTQ_TYPE(KERN_PTQ_ABSMAX, 8, KERN_PTQ_CHANNEL)};
    const int64_t Ns[3] = {64, 21, 136}, K = 256;
    for (int ti = 0; ti < 3; ti++) {
        const int t = types[ti];
        uint8_t *P[3];
        float *x = malloc(sizeof(float) * 5 * K), *y[3], *y1 = malloc(sizeof(float) * 5 * 136);
        fill_x(x, 5 * K, false);
        kern_packed_out out[3];
        for (int i = 0; i < 3; i++) {
            uint8_t *W = make_weights(t, Ns[i], K);
            P[i] = malloc(kern_pack_bytes(t, Ns[i], K));
            kern_pack(W, t, Ns[i], K, P[i], 0, (Ns[i] + 7) / 8);
            free(W);
            y[i] = malloc(sizeof(float) * 5 * (size_t)Ns[i]);
            out[i] = (kern_packed_out){P[i], Ns[i], y[i]};
        }
        void *scratch = malloc(kern_matmul_scratch_bytes(5, K));
        for (int T = 1; T <= 5; T += 4) {
            kern_matmul_packed_n(pool, scratch, t, out, 3, x, T, K);
            for (int i = 0; i < 3; i++) {
                kern_matmul_packed(pool, scratch, P[i], t, x, y1, T, Ns[i], K);
                assert_memory_equal(y1, y[i], sizeof(float) * (size_t)T * (size_t)Ns[i]);
            }
        }
        for (int i = 0; i < 3; i++) { free(P[i]); free(y[i]); }
        free(x); free(y1); free(scratch);
    }
    core_pool_free(pool);
}

#if defined(__x86_64__) || defined(_M_X64)
kern_pack_ptq_tile_fn kern_pack_ptq_tile_avx512_emulated(int wtype);
#endif

static void test_tile_avx512_emulated(void **state) {
    (void)state;
#if defined(__x86_64__) || defined(_M_X64)
    if (kern_best_tier() < KERN_TIER_AVX2) skip();
    const int64_t N = 21, Ks[] = {128, 384};
    for (int t = KERN_PTQ_FIRST; t < KERN_PTQ_FIRST + KERN_PTQ_COUNT; t++) {
        const kern_pack_ptq_tile_fn tile = kern_pack_ptq_tile_avx512_emulated(t);
        assert_non_null(tile);
        for (int ki = 0; ki < 2; ki++) {
            const int64_t K = Ks[ki];
            uint8_t *W = make_weights(t, N, K), *P = malloc(kern_pack_bytes(t, N, K));
            kern_pack(W, t, N, K, P, 0, (N + 7) / 8);
            float *x = malloc(sizeof(float) * TMAX * K), *yr = malloc(sizeof(float) * TMAX * N),
                  *y = malloc(sizeof(float) * TMAX * N);
            fill_x(x, TMAX * K, ki == 1);
            kern_matmul_packed_ref(P, t, x, yr, TMAX, N, K);
            for (int T = 1; T <= TMAX; T += 2) {
                memset(y, 0xff, sizeof(float) * TMAX * N);
                kern_matmul_packed_ptq_tile(tile, P, t, x, y, T, N, K);
                if (memcmp(y, yr, sizeof(float) * (size_t)T * (size_t)N))
                    fail_msg("%s emulated AVX-512 tile T=%d K=%d: not bit-identical to the packed ref",
                             kern_type_name(t), T, (int)K);
            }
            free(W); free(P); free(x); free(yr); free(y);
        }
    }
#else
    skip();
#endif
}

/* packed (Q8_0 activations) vs the float matmul of the dequantized weights:
 * the activation rounding moves each product by at most |w| d_a / 2 */
static void test_vs_matmul_ref(void **state) {
    (void)state;
    const int64_t N = 16, K = 512;
    for (int t = KERN_PTQ_FIRST; t < KERN_PTQ_FIRST + KERN_PTQ_COUNT; t++) {
        uint8_t *W = make_weights(t, N, K), *P = malloc(kern_pack_bytes(t, N, K));
        kern_pack(W, t, N, K, P, 0, (N + 7) / 8);
        float *wf = malloc(sizeof(float) * (size_t)(N * K)), x[2 * 512], y[2 * 16];
        assert_true(kern_rows_to_float(t, W, N, K, wf));
        fill_x(x, 2 * K, false);
        kern_matmul_packed_ref(P, t, x, y, 2, N, K);
        for (int tt = 0; tt < 2; tt++)
            for (int64_t n = 0; n < N; n++) {
                double exact = 0, bound = 0;
                for (int64_t k = 0; k < K; k++) {
                    exact += (double)wf[n * K + k] * x[tt * K + k];
                    bound += fabs(wf[n * K + k]) * (3.0 / 127.0 / 2.0);
                }
                if (fabs(y[tt * N + n] - exact) > bound * 1.01 + 1e-4)
                    fail_msg("%s [%d][%d]: packed %.6g vs exact %.6g (bound %.3g)", kern_type_name(t), tt, (int)n,
                             y[tt * N + n], exact, bound);
            }
        free(W); free(P); free(wf);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_tiers_bit_identical),
        cmocka_unit_test(test_packed_n),
        cmocka_unit_test(test_tile_avx512_emulated),
        cmocka_unit_test(test_vs_matmul_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
