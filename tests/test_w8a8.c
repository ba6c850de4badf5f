/* test_w8a8.c - the stored W8A8 type (kernels/w8a8.h) and its packed form
 * (kernels/repack_w8a8.c):
 *  1. the type's row functions: dequant(quant(x)) within half a step, the
 *     row-major _ref dot equals kern_i8_gemm_ref on the same integers
 *     (the conversion-at-load path of compress/int8.h) bit for bit;
 *  2. pack / unpack round-trips every row (K not a multiple of 4 too);
 *  3. every tier's kern_matmul_packed is bit-identical to the packed ref
 *     and to the row-major _ref dot for T = 1..9, N with a partial group,
 *     threaded or not; kern_matmul_packed_n equals separate calls;
 *  4. the AVX-512 VNNI tile compiled for AVX2 with vpdpbusd emulated is
 *     bit-identical to the packed ref.
 * Some rows hold +-127 only and some activations are all at +-max, the
 * integer extremes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/int8.h"
#include "kernels/kernels.h"
#include "kernels/repack.h"
#include "kernels/w8a8.h"

static uint64_t g_rng = 0x13198a2e03707344ull;
static float frand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static uint8_t *make_weights(int64_t N, int64_t K) {
    const size_t rb = kern_row_bytes(KT_W8A8, K);
    uint8_t *W = malloc(rb * (size_t)N);
    float *row = malloc(sizeof(float) * (size_t)K);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) row[k] = n % 5 == 0 ? (frand() < 0 ? -1.0f : 1.0f) : frand() * (1.0f + (float)(n % 3));
        kern_type_get(KT_W8A8)->from_float_ref(row, W + (size_t)n * rb, K);
    }
    free(row);
    return W;
}

static void fill_x(float *x, int64_t n, bool flat) {
    for (int64_t i = 0; i < n; i++) x[i] = flat ? (frand() < 0 ? -2.5f : 2.5f) : frand() * 3.0f;
}

static void test_row_functions(void **state) {
    (void)state;
    const int64_t K = 172;
    assert_int_equal(kern_row_bytes(KT_W8A8, K), 4 + K);
    assert_string_equal(kern_type_name(KT_W8A8), "W8A8");
    float x[172], y[172], a[172];
    uint8_t row[4 + 172];
    fill_x(x, K, false);
    fill_x(a, K, false);
    kern_type_get(KT_W8A8)->from_float_ref(x, row, K);
    kern_type_get(KT_W8A8)->to_float(row, y, K);
    float s;
    memcpy(&s, row, 4);
    for (int k = 0; k < K; k++) assert_true(fabsf(y[k] - x[k]) <= s * 0.5f * 1.0001f);
    /* the _ref dot == kern_i8_gemm_ref of the same integers (padded to Kp) */
    const int64_t Kp = kern_i8_kpad(K);
    int8_t wq[256] = {0}, xq[256];
    float sx, d, g;
    memcpy(wq, row + 4, (size_t)K);
    kern_i8_quant_rows(a, 1, K, Kp, xq, &sx, NULL);
    kern_type_get(KT_W8A8)->vec_dot_ref(K, &d, row, a);
    kern_i8_gemm_ref(xq, &sx, 1, wq, &s, &g, 1, Kp, false);
    assert_memory_equal(&d, &g, 4);
}

enum { TMAX = 9 };

static void test_pack_and_tiers(void **state) {
    (void)state;
    const int64_t Ns[] = {8, 21}, Ks[] = {172, 256, 1001};
    core_pool *pool = core_pool_new(2);
    const kern_tier best = kern_best_tier();
    for (int ni = 0; ni < 2; ni++)
        for (int ki = 0; ki < 3; ki++) {
            const int64_t N = Ns[ni], K = Ks[ki];
            const size_t rb = kern_row_bytes(KT_W8A8, K);
            assert_true(kern_pack_supported(KT_W8A8) && kern_pack_fits(KT_W8A8, K));
            uint8_t *W = make_weights(N, K), *P = malloc(kern_pack_bytes(KT_W8A8, N, K)), *row = malloc(rb);
            kern_pack(W, KT_W8A8, N, K, P, 0, 1);
            kern_pack(W, KT_W8A8, N, K, P, 1, (N + 7) / 8);
            for (int64_t n = 0; n < N; n++) {
                kern_unpack_row(P, KT_W8A8, N, K, n, row);
                assert_memory_equal(row, W + (size_t)n * rb, rb);
            }
            float *x = malloc(sizeof(float) * TMAX * (size_t)K), *yr = malloc(sizeof(float) * TMAX * (size_t)N),
                  *y = malloc(sizeof(float) * TMAX * (size_t)N);
            fill_x(x, TMAX * K, ki == 1);
            kern_matmul_packed_ref(P, KT_W8A8, x, yr, TMAX, N, K);
            for (int t = 0; t < TMAX; t++)
                for (int64_t n = 0; n < N; n++) {
                    float d;
                    kern_type_get(KT_W8A8)->vec_dot_ref(K, &d, W + (size_t)n * rb, x + (size_t)t * (size_t)K);
                    if (memcmp(&d, &yr[t * N + n], 4))
                        fail_msg("packed ref [%d][%d] %.9g != row _ref %.9g", t, (int)n, yr[t * N + n], d);
                }
            void *scratch = malloc(kern_matmul_scratch_bytes(TMAX, K));
            for (int tier = KERN_TIER_REF; tier <= (int)best; tier++) {
                assert_true(kern_set_tier((kern_tier)tier));
                for (int T = 1; T <= TMAX; T++)
                    for (int threaded = 0; threaded < 2; threaded++) {
                        memset(y, 0xff, sizeof(float) * TMAX * (size_t)N);
                        kern_matmul_packed(threaded ? pool : NULL, scratch, P, KT_W8A8, x, y, T, N, K);
                        if (memcmp(y, yr, sizeof(float) * (size_t)T * (size_t)N))
                            fail_msg("W8A8 tier %s T=%d N=%d K=%d: not bit-identical to the packed ref",
                                     kern_tier_name((kern_tier)tier), T, (int)N, (int)K);
                    }
            }
            kern_set_tier(best);
            /* Q, K, V in one call */
            kern_packed_out out[2] = {{P, N, y}, {P, N, y + 4 * N}};
            kern_matmul_packed_n(pool, scratch, KT_W8A8, out, 2, x, 4, K);
            assert_memory_equal(y, yr, sizeof(float) * 4 * (size_t)N);
            assert_memory_equal(y + 4 * N, yr, sizeof(float) * 4 * (size_t)N);
            free(W); free(P); free(row); free(x); free(yr); free(y); free(scratch);
        }
    core_pool_free(pool);
}

#if defined(__x86_64__) || defined(_M_X64)
kern_pack_w8a8_tile_fn kern_pack_w8a8_tile_avx512_emulated(void);
#endif

static void test_tile_avx512_emulated(void **state) {
    (void)state;
#if defined(__x86_64__) || defined(_M_X64)
    if (kern_best_tier() < KERN_TIER_AVX2) skip();
    const int64_t N = 21, Ks[] = {172, 1001};
    for (int ki = 0; ki < 2; ki++) {
        const int64_t K = Ks[ki];
        uint8_t *W = make_weights(N, K), *P = malloc(kern_pack_bytes(KT_W8A8, N, K));
        kern_pack(W, KT_W8A8, N, K, P, 0, (N + 7) / 8);
        float *x = malloc(sizeof(float) * TMAX * (size_t)K), *yr = malloc(sizeof(float) * TMAX * (size_t)N),
              *y = malloc(sizeof(float) * TMAX * (size_t)N);
        fill_x(x, TMAX * K, ki == 0);
        kern_matmul_packed_ref(P, KT_W8A8, x, yr, TMAX, N, K);
        for (int T = 1; T <= TMAX; T++) {
            kern_matmul_packed_w8a8_tile(kern_pack_w8a8_tile_avx512_emulated(), P, x, y, T, N, K, NULL);
            if (memcmp(y, yr, sizeof(float) * (size_t)T * (size_t)N))
                fail_msg("W8A8 emulated AVX-512 tile T=%d K=%d: not bit-identical to the packed ref", T, (int)K);
        }
        free(W); free(P); free(x); free(yr); free(y);
    }
#else
    skip();
#endif
}

/* LLM.int8's stored form: int8 rows with the outlier columns 0 and left out
 * of the scales, F16 weights for those columns, activations with some large
 * values there.  Every tier (threaded or not) and the emulated VNNI tile are
 * bit-identical to the plain-C spec, which is close to the float matmul
 * (the outliers exact up to F16 weights, the rest at int8 precision
 * without them in the scales). */
static void test_outliers(void **state) {
    (void)state;
    const int64_t N = 21, K = 256;
    const int n_o = 5;
    const int32_t cols[5] = {3, 17, 64, 200, 255};
    uint8_t skip[256] = {0};
    for (int i = 0; i < n_o; i++) skip[cols[i]] = 1;
    const size_t rb = kern_row_bytes(KT_LLM_INT8, K);
    uint8_t *W = malloc(rb * (size_t)N);
    uint16_t wo[21 * 5];
    float *wf = malloc(sizeof(float) * (size_t)(N * K));
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) wf[n * K + k] = frand();
        float sw;
        int8_t q[256];
        kern_i8_quant_rows(wf + n * K, 1, K, K, q, &sw, skip);
        memcpy(W + (size_t)n * rb, &sw, 4);
        memcpy(W + (size_t)n * rb + 4, q, (size_t)K);
        for (int i = 0; i < n_o; i++) wo[n * n_o + i] = kern_fp32_to_fp16(wf[n * K + cols[i]]);
    }
    const kern_outliers o = {n_o, cols, wo};
    uint8_t *P = malloc(kern_pack_bytes(KT_LLM_INT8, N, K));
    kern_pack(W, KT_LLM_INT8, N, K, P, 0, (N + 7) / 8);
    float *x = malloc(sizeof(float) * TMAX * (size_t)K), yr[TMAX * 21], y[TMAX * 21];
    fill_x(x, TMAX * K, false);
    for (int t = 0; t < TMAX; t++)
        for (int i = 0; i < n_o; i++) x[t * K + cols[i]] = (t + i) % 2 ? 60.0f : -45.0f;
    kern_matmul_packed_w8a8_tile(NULL, P, x, yr, TMAX, N, K, &o);
    for (int t = 0; t < TMAX; t++)
        for (int64_t n = 0; n < N; n++) {
            double e = 0, b = 0;
            for (int64_t k = 0; k < K; k++) {
                e += (double)wf[n * K + k] * x[t * K + k];
                b += skip[k] ? fabs(x[t * K + k]) * 1e-3 : fabsf(wf[n * K + k]) * 3.0 / 127 + fabsf(x[t * K + k]) / 127;
            }
            if (fabs(yr[t * N + n] - e) > b) fail_msg("outliers [%d][%d]: %.6g vs exact %.6g (bound %.3g)", t, (int)n, yr[t * N + n], e, b);
        }
    core_pool *pool = core_pool_new(2);
    void *scratch = malloc(kern_matmul_scratch_bytes(TMAX, K));
    const kern_tier best = kern_best_tier();
    for (int tier = KERN_TIER_REF; tier <= (int)best; tier++) {
        assert_true(kern_set_tier((kern_tier)tier));
        for (int T = 1; T <= TMAX; T++)
            for (int threaded = 0; threaded < 2; threaded++) {
                memset(y, 0xff, sizeof y);
                kern_matmul_packed_outl(threaded ? pool : NULL, scratch, P, x, y, T, N, K, &o);
                if (memcmp(y, yr, sizeof(float) * (size_t)T * (size_t)N))
                    fail_msg("LLM_INT8 tier %s T=%d: not bit-identical to the spec", kern_tier_name((kern_tier)tier), T);
            }
    }
    kern_set_tier(best);
#if defined(__x86_64__) || defined(_M_X64)
    if (kern_best_tier() >= KERN_TIER_AVX2) {
        kern_matmul_packed_w8a8_tile(kern_pack_w8a8_tile_avx512_emulated(), P, x, y, TMAX, N, K, &o);
        assert_memory_equal(y, yr, sizeof(float) * TMAX * (size_t)N);
    }
#endif
    core_pool_free(pool);
    free(scratch); free(W); free(wf); free(P); free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_functions),
        cmocka_unit_test(test_pack_and_tiers),
        cmocka_unit_test(test_tile_avx512_emulated),
        cmocka_unit_test(test_outliers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
