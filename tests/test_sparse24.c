/* test_sparse24.c - the 2:4 sparse types S24_F16 / S24_Q8 (kernels/sparse24.h):
 * layouts round-trip, from_float keeps the 2 largest of 4, the _ref dot
 * equals a dense dot on the decompressed weights, every tier equals _ref
 * (tolerance below), gemm tiles are bit-identical to vec_dot, and the
 * model's matmul on the compressed weights equals kern_matmul_ref. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/kernels.h"
#include "kernels/quants.h"
#include "kernels/sparse24.h"

static uint64_t g_rng = 88172645463325252ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* a row that satisfies 2:4: in each group two random positions are zeroed */
static void sparse_row(float *x, int64_t n) {
    for (int64_t g = 0; g < n; g += 4) {
        for (int i = 0; i < 4; i++) x[g + i] = frand();
        int a = (int)((frand() + 1.0f) * 2.0f) & 3, b = (a + 1 + ((int)((frand() + 1.0f) * 1.5f) % 3)) & 3;
        x[g + a] = 0.0f;
        x[g + b] = 0.0f;
    }
}

static void test_table(void **state) {
    (void)state;
    const kern_type_traits *f = kern_type_get(KT_S24_F16), *q = kern_type_get(KT_S24_Q8);
    assert_non_null(f);
    assert_non_null(q);
    assert_string_equal(f->name, "S24_F16");
    assert_string_equal(q->name, "S24_Q8");
    assert_int_equal(kern_row_bytes(KT_S24_F16, 2048), 2048 / 32 * 36);
    assert_int_equal(kern_row_bytes(KT_S24_Q8, 2048), 2048 / 64 * 42);
    assert_int_equal(kern_row_bytes(KT_S24_Q8, 96), 0);
    assert_int_equal(f->vec_dot_type, KT_F32);
    assert_int_equal(q->vec_dot_type, KT_S24_A8);
    assert_string_equal(kern_type_get(KT_S24_A8)->name, "S24_A8");
    assert_null(kern_type_get(1160));
    assert_null(kern_type_get(KT_KVANT_END));
    for (int t = 0; t < KERN_TIER_COUNT; t++) {
        const kern_type_ops *o = kern_ops_tier(KT_S24_F16, (kern_tier)t);
        if (o) assert_non_null(o->vec_dot);
    }
    /* where the CPU has AVX-512, that tier runs its own kernels (not the AVX2 ones it inherits) */
    const kern_type_ops *o2 = kern_ops_tier(KT_S24_F16, KERN_TIER_AVX2), *o5 = kern_ops_tier(KT_S24_F16, KERN_TIER_AVX512);
    if (o2 && o5) assert_true(o2->vec_dot != o5->vec_dot && o2->gemm != o5->gemm);
    o2 = kern_ops_tier(KT_S24_Q8, KERN_TIER_AVX2), o5 = kern_ops_tier(KT_S24_Q8, KERN_TIER_AVX512);
    if (o2 && o5) assert_true(o2->vec_dot != o5->vec_dot && o2->gemm != o5->gemm);
    /* the activation quantizer of every tier writes _ref's bytes (ties included) */
    enum { N = 256 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = frand() * 5.0f;
    x[3] = 0.5f * (5.0f / 127.0f) * 3.0f; /* a few exact ties after scaling are likely at 1.5 d */
    for (int i = 64; i < 96; i++) x[i] = 0.0f; /* an all-zero half */
    block_s24_a8 ref[N / 64], got[N / 64];
    kern_quant_s24_a8_ref(x, ref, N);
    for (int t = 0; t < KERN_TIER_COUNT; t++) {
        const kern_type_ops *o = kern_ops_tier(KT_S24_A8, (kern_tier)t);
        if (!o) continue;
        memset(got, 0x55, sizeof got);
        o->from_float(x, got, N);
        assert_memory_equal(ref, got, sizeof ref);
    }
}

static void test_roundtrip(void **state) {
    (void)state;
    enum { N = 256 };
    float x[N], y[N];
    sparse_row(x, N);
    block_s24_f16 bf[N / QK_S24_F16];
    kern_quant_s24_f16_ref(x, bf, N);
    kern_dequant_s24_f16_ref(bf, y, N);
    for (int i = 0; i < N; i++) assert_true(y[i] == kern_fp16_to_fp32(kern_fp32_to_fp16(x[i])));
    block_s24_q8 bq[N / QK_S24_Q8];
    kern_quant_s24_q8_ref(x, bq, N);
    kern_dequant_s24_q8_ref(bq, y, N);
    for (int b = 0; b < N / QK_S24_Q8; b++) {
        const float d = kern_fp16_to_fp32(bq[b].d);
        for (int i = 0; i < QK_S24_Q8; i++) {
            const float xv = x[b * QK_S24_Q8 + i], yv = y[b * QK_S24_Q8 + i];
            if (xv == 0.0f) assert_true(yv == 0.0f);
            /* rounding to q (d/2) plus the scale's own F16 rounding (|q| <= 127 times d 2^-11) */
            else assert_true(fabsf(xv - yv) <= d * (0.5f + 127.0f / 2048.0f) * 1.001f);
        }
    }
    /* a dense row: the 2 largest |x| of each group survive */
    for (int i = 0; i < N; i++) x[i] = frand();
    kern_quant_s24_f16_ref(x, bf, N);
    kern_dequant_s24_f16_ref(bf, y, N);
    for (int g = 0; g < N; g += 4) {
        int nz = 0;
        for (int i = 0; i < 4; i++) {
            if (y[g + i] == 0.0f) continue;
            nz++;
            int larger = 0;
            for (int k = 0; k < 4; k++) larger += fabsf(x[g + k]) > fabsf(x[g + i]);
            assert_true(larger <= 1);
        }
        assert_int_equal(nz, 2);
    }
}

/* dense reference: float sum of dequantized weights times dequantized
 * activations, in double */
static double dense_dot(const float *w, const float *a, int64_t n, double *abs_sum) {
    double s = 0, as = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)w[i] * a[i];
        as += fabs((double)w[i] * a[i]);
    }
    *abs_sum = as;
    return s;
}

/* Tolerances: both _ref and every tier compute the same products of the
 * same numbers (F16 x F32; Q8: exact int32 group sums times d_w * d_a) and
 * differ only in float rounding of products and summation order, so
 * |s - exact| <= (n_terms + 2) * 2^-24 * sum|terms| for each; we allow
 * twice that between any two of them. */
enum { NR = 6, NA = 5 }; /* weight rows, activation rows: gemm tiles of 4 x 2 and their remainders */
static void check_type(int type, int64_t n) {
    const kern_type_traits *tt = kern_type_get(type);
    const int at = tt->vec_dot_type;
    float *xr = malloc(sizeof(float) * n * NR), *a = malloc(sizeof(float) * n * NA), *wd = malloc(sizeof(float) * n),
          *ad = malloc(sizeof(float) * n);
    const size_t wrb = kern_row_bytes(type, n), arb = kern_row_bytes(at, n);
    uint8_t *w = malloc(wrb * NR), *aq = malloc(arb * NA);
    for (int r = 0; r < NR; r++) sparse_row(xr + r * n, n);
    for (int64_t i = 0; i < n * NA; i++) a[i] = frand() * 3.0f;
    for (int r = 0; r < NR; r++) tt->from_float_ref(xr + r * n, w + r * wrb, n);
    for (int c = 0; c < NA; c++) kern_type_get(at)->from_float_ref(a + c * n, aq + c * arb, n);
    const double tol_f = 2.0 * (double)(n + 2) * ldexp(1.0, -24);
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NA; c++) {
            tt->to_float(w + r * wrb, wd, n);
            kern_type_get(at)->to_float(aq + c * arb, ad, n);
            double as;
            const double exact = dense_dot(wd, ad, n, &as);
            float s_ref;
            tt->vec_dot_ref(n, &s_ref, w + r * wrb, aq + c * arb);
            assert_true(fabs(s_ref - exact) <= tol_f * as + 1e-30);
            for (int tier = 0; tier < KERN_TIER_COUNT; tier++) {
                const kern_type_ops *o = kern_ops_tier(type, (kern_tier)tier);
                if (!o) continue;
                float s;
                o->vec_dot(n, &s, w + r * wrb, aq + c * arb);
                if (fabs(s - s_ref) > 2 * tol_f * as + 1e-30)
                    fail_msg("%s tier %s: vec_dot %.9g vs ref %.9g (tol %.3g)", tt->name, kern_tier_name((kern_tier)tier),
                             s, s_ref, 2 * tol_f * as);
            }
        }
    /* gemm tiles: bit-identical to the same tier's vec_dot */
    for (int tier = 0; tier < KERN_TIER_COUNT; tier++) {
        const kern_type_ops *o = kern_ops_tier(type, (kern_tier)tier);
        if (!o || !o->gemm) continue;
        for (int nr = 1; nr <= NR; nr++)
            for (int nc = 1; nc <= NA; nc++) {
                float y[NR * NA];
                o->gemm(n, nr, nc, y, NR, w, wrb, aq, arb);
                for (int r = 0; r < nr; r++)
                    for (int c = 0; c < nc; c++) {
                        float s;
                        o->vec_dot(n, &s, w + r * wrb, aq + c * arb);
                        assert_memory_equal(&s, &y[c * NR + r], sizeof s);
                    }
            }
    }
    free(xr); free(a); free(wd); free(ad); free(w); free(aq);
}

static void test_dots(void **state) {
    (void)state;
    /* odd block counts (32: one F16 block; 96, 160, 192, 320) reach the tiles' odd-block tails */
    const int64_t ns[] = {64, 128, 192, 320, 2048, 5632};
    for (int i = 0; i < 6; i++) {
        check_type(KT_S24_F16, ns[i]);
        check_type(KT_S24_Q8, ns[i]);
    }
    const int64_t nf[] = {32, 96, 160};
    for (int i = 0; i < 3; i++) check_type(KT_S24_F16, nf[i]);
}

/* kern_matmul (fast, threaded, quantized activations) on compressed weights
 * vs kern_matmul_ref (dequantized weights, float activations).  Bound: the
 * activation rounding (S24_A8: |a - a_q| <= d/2 per element, d <= amax/127) plus
 * float summation: |dy| <= sum|w| * amax/254 + 4 (K+2) 2^-24 sum|w a|. */
static void test_matmul(void **state) {
    (void)state;
    enum { N = 24, K = 256, T = 5 };
    core_pool *pool = core_pool_new(2);
    float *Wf = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N),
          *yr = malloc(sizeof(float) * T * N), *wd = malloc(sizeof(float) * N * K);
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    for (int r = 0; r < N; r++) sparse_row(Wf + r * K, K);
    for (int i = 0; i < T * K; i++) x[i] = frand();
    const int types[] = {KT_S24_F16, KT_S24_Q8};
    for (int ti = 0; ti < 2; ti++) {
        const int type = types[ti];
        const size_t rb = kern_row_bytes(type, K);
        uint8_t *W = malloc(rb * N);
        for (int r = 0; r < N; r++) kern_type_get(type)->from_float_ref(Wf + r * K, W + r * rb, K);
        for (int r = 0; r < N; r++) kern_type_get(type)->to_float(W + r * rb, wd + r * K, K);
        for (int Tn = 1; Tn <= T; Tn += 4) {
            kern_matmul(pool, scratch, W, type, x, y, Tn, N, K);
            kern_matmul_ref(W, type, x, yr, Tn, N, K);
            for (int t = 0; t < Tn; t++) {
                float amax = 0;
                for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[t * K + k]));
                for (int n = 0; n < N; n++) {
                    double sw = 0, swa = 0;
                    for (int k = 0; k < K; k++) {
                        sw += fabs(wd[n * K + k]);
                        swa += fabs(wd[n * K + k] * x[t * K + k]);
                    }
                    const double tol = (type == KT_S24_Q8 ? sw * amax / 254.0 * 1.01 : 0.0) +
                                       4.0 * (K + 2) * ldexp(1.0, -24) * swa;
                    if (fabs(y[t * N + n] - yr[t * N + n]) > tol)
                        fail_msg("%s T=%d: y[%d][%d] %.9g vs ref %.9g", kern_type_name(type), Tn, t, n, y[t * N + n],
                                 yr[t * N + n]);
                }
            }
        }
        free(W);
    }
    free(Wf); free(x); free(y); free(yr); free(wd); free(scratch);
    core_pool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_dots),
        cmocka_unit_test(test_matmul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
