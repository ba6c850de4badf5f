/* test_repack_f16.c - F16 weights packed in groups of 8 rows (kernels/repack_f16.c):
 *  1. pack / unpack round-trips every row, missing rows of the last group are zero;
 *  2. every tier's kern_matmul_packed_f16 is bit-identical to the packed ref for
 *     T = 1..9, N with a partial group and with 64+ rows (the decode tile of 8
 *     groups), threaded and not; a row alone equals that row of a batch;
 *  3. the ref equals the spec written out here (F16-rounded activations, one
 *     fmaf chain in k order);
 *  4. vs kern_matmul_ref (float activations): the F16 rounding of the
 *     activations and the summation order bound the difference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/kernels.h"
#include "kernels/repack.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static uint16_t *make_weights(int64_t N, int64_t K) {
    uint16_t *W = malloc(sizeof(uint16_t) * (size_t)(N * K));
    for (int64_t i = 0; i < N * K; i++) W[i] = kern_fp32_to_fp16(frand());
    return W;
}

static void test_roundtrip(void **state) {
    (void)state;
    const int64_t Ns[] = {8, 13, 70}, K = 40;
    for (int ni = 0; ni < 3; ni++) {
        const int64_t N = Ns[ni], G = (N + 7) / 8;
        uint16_t *W = make_weights(N, K), *P = malloc(kern_pack_f16_bytes(N, K)), row[40];
        assert_int_equal(kern_pack_f16_bytes(N, K), (size_t)(G * 8 * K * 2));
        kern_pack_f16(W, N, K, P, 0, G / 2);
        kern_pack_f16(W, N, K, P, G / 2, G);
        for (int64_t n = 0; n < G * 8; n++) {
            kern_unpack_f16_row(P, K, n, row);
            if (n < N) assert_memory_equal(row, W + n * K, sizeof row);
            else
                for (int k = 0; k < K; k++) assert_int_equal(row[k], 0);
        }
        free(W); free(P);
    }
}

static void test_tiers_bit_identical(void **state) {
    (void)state;
    enum { TMAX = 9 };
    const int64_t Ns[] = {8, 21, 136}, Ks[] = {8, 44, 256};
    core_pool *pool = core_pool_new(2);
    const kern_tier best = kern_best_tier();
    for (int ni = 0; ni < 3; ni++)
        for (int ki = 0; ki < 3; ki++) {
            const int64_t N = Ns[ni], K = Ks[ki];
            uint16_t *W = make_weights(N, K), *P = malloc(kern_pack_f16_bytes(N, K));
            kern_pack_f16(W, N, K, P, 0, (N + 7) / 8);
            float *x = malloc(sizeof(float) * TMAX * K), *yr = malloc(sizeof(float) * TMAX * N),
                  *y = malloc(sizeof(float) * TMAX * N), *y1 = malloc(sizeof(float) * N);
            for (int i = 0; i < TMAX * K; i++) x[i] = frand() * 4.0f;
            void *scratch = malloc(kern_matmul_scratch_bytes(TMAX, K));
            for (int T = 1; T <= TMAX; T++) {
                kern_matmul_packed_f16_ref(P, x, yr, T, N, K);
                for (int t = 0; t < T; t += 2) /* the spec */
                    for (int64_t n = 0; n < N; n += 3) {
                        float acc = 0.0f;
                        for (int64_t k = 0; k < K; k++)
                            acc = fmaf(kern_fp16_to_fp32(W[n * K + k]),
                                       kern_fp16_to_fp32(kern_fp32_to_fp16(x[t * K + k])), acc);
                        if (memcmp(&acc, &yr[t * N + n], 4))
                            fail_msg("packed F16 ref != spec at [%d][%d]: %.9g vs %.9g", t, (int)n, yr[t * N + n], acc);
                    }
                for (int tier = KERN_TIER_REF; tier <= (int)best; tier++) {
                    assert_true(kern_set_tier((kern_tier)tier));
                    for (int threaded = 0; threaded < 2; threaded++) {
                        memset(y, 0xff, sizeof(float) * TMAX * N);
                        kern_matmul_packed_f16(threaded ? pool : NULL, scratch, P, x, y, T, N, K);
                        if (memcmp(y, yr, sizeof(float) * (size_t)T * (size_t)N))
                            fail_msg("tier %s T=%d N=%d K=%d: not bit-identical to the packed F16 ref",
                                     kern_tier_name((kern_tier)tier), T, (int)N, (int)K);
                    }
                    kern_matmul_packed_f16(pool, scratch, P, x + (T - 1) * K, y1, 1, N, K);
                    assert_memory_equal(y1, yr + (size_t)(T - 1) * (size_t)N, sizeof(float) * (size_t)N);
                }
                kern_set_tier(best);
            }
            free(W); free(P); free(x); free(yr); free(y); free(y1); free(scratch);
        }
    core_pool_free(pool);
}

/* vs kern_matmul_ref on the same F16 weights with float activations.  The
 * activation rounding to F16 is at most 2^-11 |a| per element (normal
 * range), so |dy| <= 2^-11 sum|w a| + 2 (K + 2) 2^-24 sum|w a| (the two
 * summation orders). */
static void test_vs_matmul_ref(void **state) {
    (void)state;
    enum { N = 45, K = 192, T = 5 };
    core_pool *pool = core_pool_new(2);
    uint16_t *W = make_weights(N, K), *P = malloc(kern_pack_f16_bytes(N, K));
    kern_pack_f16(W, N, K, P, 0, (N + 7) / 8);
    float *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N), *yr = malloc(sizeof(float) * T * N);
    for (int i = 0; i < T * K; i++) x[i] = frand() * 2.0f;
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    kern_matmul_packed_f16(pool, scratch, P, x, y, T, N, K);
    kern_matmul_ref(W, KT_F16, x, yr, T, N, K);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double swa = 0;
            for (int k = 0; k < K; k++) swa += fabs(kern_fp16_to_fp32(W[n * K + k]) * x[t * K + k]);
            const double tol = ldexp(1.0, -11) * swa * 1.01 + 2.0 * (K + 2) * ldexp(1.0, -24) * swa;
            if (fabs(y[t * N + n] - yr[t * N + n]) > tol)
                fail_msg("y[%d][%d] %.9g vs ref %.9g (tol %.3g)", t, n, y[t * N + n], yr[t * N + n], tol);
        }
    free(W); free(P); free(x); free(y); free(yr); free(scratch);
    core_pool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_tiers_bit_identical),
        cmocka_unit_test(test_vs_matmul_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
