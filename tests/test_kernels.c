/* test_kernels.c - every fast kernel against its _ref, and the scalar
 * conversions.  Tolerances are derived next to each check. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/kernels.h"
#include "kernels/quants.h"

static uint64_t rng = 88172645463325252ULL;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) / 8388608.0 - 1.0);
}
static void fill(float *x, size_t n, float scale) { for (size_t i = 0; i < n; i++) x[i] = frand() * scale; }

/* ---- half / bfloat16 ---------------------------------------------------------- */
static void test_fp16_roundtrip_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = kern_fp16_to_fp32((uint16_t)h);
        if (isnan(f)) { assert_true(isnan(kern_fp16_to_fp32(kern_fp32_to_fp16(f)))); continue; }
        assert_int_equal(kern_fp32_to_fp16(f), h);
    }
    /* known values: 1.0 = 0x3c00, smallest subnormal 2^-24 = 0x0001, max 65504 = 0x7bff */
    assert_int_equal(kern_fp32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(kern_fp32_to_fp16(5.9604644775390625e-8f), 0x0001);
    assert_int_equal(kern_fp32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(kern_fp32_to_fp16(65520.0f), 0x7c00);    /* rounds to inf */
    assert_int_equal(kern_fp32_to_fp16(1.0f + 1.0f / 2048), 0x3c00); /* tie -> even */
    assert_int_equal(kern_fp32_to_fp16(1.0f + 3.0f / 2048), 0x3c02); /* tie -> even (up) */
    assert_int_equal(kern_fp32_to_fp16(-2.0f), 0xc000);
}

static void test_bf16(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = kern_bf16_to_fp32((uint16_t)h);
        if (isnan(f)) continue;
        assert_int_equal(kern_fp32_to_bf16(f), h);
    }
    assert_int_equal(kern_fp32_to_bf16(1.0f), 0x3f80);
    /* 1 + 2^-8 is a tie between 0x3f80 and 0x3f81: even wins */
    assert_int_equal(kern_fp32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
    assert_int_equal(kern_fp32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
}

/* ---- quantization round trips -------------------------------------------------
 * Bound per block of 32: the quantization step s (Q8_0: amax/127, Q4_0:
 * amax/8, Q5_0: amax/16, Q4_1: (max-min)/15, Q5_1: (max-min)/31).  Rounding
 * to nearest costs s/2; the symmetric 4/5-bit types clamp the top level
 * (q = 16 -> 15, 32 -> 31), costing one full step s.  Storing d and m in
 * fp16 adds at most 2^-11 relative to each, times up to 31 levels:
 * 2^-11 * 32 * s + 2^-11 * |m| <= 2^-6 * s + 2^-11 * amax.  Below 2^-14, fp16 is
 * subnormal with a fixed absolute error of 2^-25 per stored value; times
 * up to 128 levels that adds 2^-18. */
static void roundtrip(int type, float scale) {
    const kern_type_traits *tt = kern_type_get(type);
    enum { N = 32 * 64 };
    float x[N], y[N];
    fill(x, N, scale);
    x[5] = 0; x[40] = scale * 3; /* an outlier in the second block */
    uint8_t buf[N * 4];
    tt->from_float_ref(x, buf, N);
    tt->to_float(buf, y, N);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0, mn = INFINITY, mx = -INFINITY;
        for (int j = 0; j < 32; j++) {
            const float v = x[b * 32 + j];
            amax = fmaxf(amax, fabsf(v));
            mn = fminf(mn, v);
            mx = fmaxf(mx, v);
        }
        float step, k;
        switch (type) {
        case KT_Q8_0: case KT_Q8_1: step = amax / 127; k = 0.5f; break;
        case KT_Q4_0: step = amax / 8; k = 1.0f; break;
        case KT_Q5_0: step = amax / 16; k = 1.0f; break;
        case KT_Q4_1: step = (mx - mn) / 15; k = 0.5f; break;
        case KT_Q5_1: step = (mx - mn) / 31; k = 0.5f; break;
        case KT_F16: step = 0; k = 0; break;
        case KT_BF16: step = 0; k = 0; break;
        default: step = 0; k = 0;
        }
        const float rel = type == KT_F16 ? 1.0f / 2048 : type == KT_BF16 ? 1.0f / 256 : 1.0f / 2048;
        const float bound = k * step + step / 64 + rel * amax + (type == KT_BF16 ? 0.0f : 0x1p-18f);
        for (int j = 0; j < 32; j++) {
            const float e = fabsf(x[b * 32 + j] - y[b * 32 + j]);
            if (e > bound) fail_msg("%s block %d elem %d: |%g - %g| = %g > bound %g", tt->name, b, j, x[b * 32 + j],
                                    y[b * 32 + j], e, bound);
        }
    }
}

static void test_quant_roundtrip(void **state) {
    (void)state;
    const int types[] = {KT_F16, KT_BF16, KT_Q8_0, KT_Q8_1, KT_Q4_0, KT_Q4_1, KT_Q5_0, KT_Q5_1};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        roundtrip(types[i], 1.0f);
        roundtrip(types[i], 1e-3f);
    }
}

static void test_quant_known_bytes(void **state) {
    (void)state;
    /* Q8_0 of 0..31: amax 31, d = 31/127, q_j = round(j * 127/31) */
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)j;
    block_q8_0 b;
    kern_quant_q8_0_ref(x, &b, 32);
    assert_int_equal(b.d, kern_fp32_to_fp16(31.0f / 127));
    for (int j = 0; j < 32; j++) assert_int_equal(b.qs[j], (int)roundf(j * 127.0f / 31));
    /* Q4_0 of 0..31: max 31, d = -31/8; q = (int)(x / d + 8.5) clamped at 15 */
    block_q4_0 c;
    kern_quant_q4_0_ref(x, &c, 32);
    assert_int_equal(c.d, kern_fp32_to_fp16(-31.0f / 8));
    assert_int_equal(c.qs[0] & 0x0f, 8);      /* x = 0  -> 8 */
    assert_int_equal(c.qs[15] >> 4, 0);       /* x = 31 -> 0 */
    float y[32];
    kern_dequant_q4_0_ref(&c, y, 32);
    assert_float_equal(y[0], 0.0f, 0.0f);
    assert_float_equal(y[31], 8 * kern_fp16_to_fp32(kern_fp32_to_fp16(31.0f / 8)), 1e-6f);
}

static void test_type_table(void **state) {
    (void)state;
    assert_int_equal(kern_row_bytes(KT_F32, 64), 256);
    assert_int_equal(kern_row_bytes(KT_F16, 64), 128);
    assert_int_equal(kern_row_bytes(KT_Q4_0, 64), 36);
    assert_int_equal(kern_row_bytes(KT_Q4_1, 64), 40);
    assert_int_equal(kern_row_bytes(KT_Q5_0, 64), 44);
    assert_int_equal(kern_row_bytes(KT_Q5_1, 64), 48);
    assert_int_equal(kern_row_bytes(KT_Q8_0, 64), 68);
    assert_int_equal(kern_row_bytes(KT_Q4_K, 256), 144);
    assert_int_equal(kern_row_bytes(KT_Q6_K, 256), 210);
    assert_int_equal(kern_row_bytes(KT_Q4_0, 33), 0); /* not a multiple of the block */
    assert_null(kern_type_get(4));                    /* ggml's removed Q4_2 */
    assert_null(kern_type_get(12345));
    assert_string_equal(kern_type_name(KT_BF16), "BF16");
}

/* ---- matmul: fast vs ref ---------------------------------------------------------
 * The reference multiplies the dequantized rows with float activations; the
 * fast path first rounds the activations to the weight type's vec_dot_type.
 * Bound = activation rounding + summation order:
 *  - Q8_0/Q8_1 activations: per block of 32, |dx| <= d/2 + 127 |d - d16|
 *    with d = amax/127 and |d - d16| <= 2^-11 d, so |dx| <= amax_b (1/254 + 1/16);
 *    contributes sum_b |dx|_b * sum_{k in b} |w_k|.
 *  - F16 activations: |dx| <= 2^-11 |x| (and 2^-25 below 2^-14); BF16: 2^-8 |x|.
 *  - order: each of the two sums is within K eps sum|x w| of the exact value.
 * (Q8 rows: the fp16 scale is the scale actually used, so the 1/16 term is
 * a loose cover for its rounding.) */
static void check_matmul(int type, int T, int64_t N, int64_t K, int threads) {
    const kern_type_traits *tt = kern_type_get(type);
    float *wf = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * T * K);
    float *y = malloc(sizeof(float) * T * N), *yr = malloc(sizeof(float) * T * N);
    uint8_t *w = malloc(kern_row_bytes(type, K) * N);
    fill(wf, (size_t)(N * K), 0.5f);
    fill(x, (size_t)(T * K), 1.0f);
    for (int64_t r = 0; r < N; r++) tt->from_float_ref(wf + r * K, w + r * kern_row_bytes(type, K), K);
    core_pool *pool = core_pool_new(threads);
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    kern_matmul(pool, scratch, w, type, x, y, T, N, K);
    kern_matmul_ref(w, type, x, yr, T, N, K);
    float *row = malloc(sizeof(float) * K);
    const int at = tt->vec_dot_type;
    for (int64_t n = 0; n < N; n++) {
        tt->to_float(w + n * kern_row_bytes(type, K), row, K);
        for (int t = 0; t < T; t++) {
            const float *xt = x + t * K;
            double mag = 0, act = 0;
            for (int64_t k = 0; k < K; k++) mag += fabs((double)xt[k] * row[k]);
            if (at == KT_Q8_0 || at == KT_Q8_1) {
                for (int64_t b = 0; b < K / 32; b++) {
                    double amax = 0, wsum = 0;
                    for (int k = 0; k < 32; k++) {
                        amax = fmax(amax, fabs(xt[b * 32 + k]));
                        wsum += fabs(row[b * 32 + k]);
                    }
                    act += amax * (1.0 / 254 + 1.0 / 16) * wsum;
                }
            } else if (at == KT_F16) act = 0x1p-11 * mag + 0x1p-25 * K;
            else if (at == KT_BF16) act = 0x1p-8 * mag;
            const double bound = act + 2.0 * K * FLT_EPSILON * mag;
            const double e = fabs((double)y[t * N + n] - yr[t * N + n]);
            if (e > bound) fail_msg("%s T=%d N=%lld K=%lld: y[%d][%lld] %g vs ref %g (bound %g)", tt->name, T,
                                    (long long)N, (long long)K, t, (long long)n, y[t * N + n], yr[t * N + n], bound);
        }
    }
    free(row); free(scratch); core_pool_free(pool);
    free(wf); free(x); free(y); free(yr); free(w);
}

static void test_matmul_all_types(void **state) {
    (void)state;
    const int types[] = {KT_F32, KT_F16, KT_BF16, KT_Q8_0, KT_Q4_0, KT_Q4_1, KT_Q5_0, KT_Q5_1};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        check_matmul(types[i], 1, 37, 64, 1);   /* decode shape, rows not a multiple of 16 */
        check_matmul(types[i], 7, 50, 96, 3);   /* prefill shape, threads */
        check_matmul(types[i], 3, 5, 256, 2);   /* fewer rows than a block */
        check_matmul(types[i], 5, 203, 128, 3); /* above KERN_MT_MIN_WORK: runs on the pool */
    }
    check_matmul(KT_F32, 2, 11, 13, 2);         /* K not a multiple of 8 */
}

/* ---- elementwise -------------------------------------------------------------------
 * Same operations, different summation order (RMSNorm) or 1/sum vs division
 * (softmax): a few ulps; 1e-6 relative + 1e-7 absolute covers them. */
static void test_elementwise(void **state) {
    (void)state;
    enum { K = 200 };
    float x[K], w[K], a[K], b[K], u[K];
    fill(x, K, 3.0f); fill(w, K, 1.0f); fill(u, K, 2.0f);
    kern_rmsnorm(a, x, w, K, 1e-5f);
    kern_rmsnorm_ref(b, x, w, K, 1e-5f);
    for (int i = 0; i < K; i++) assert_float_equal(a[i], b[i], 1e-6f * fabsf(b[i]) + 1e-7f);
    /* rmsnorm of a constant vector c with unit weights is c/|c| = 1 (eps tiny) */
    for (int i = 0; i < K; i++) { a[i] = 2.5f; w[i] = 1.0f; }
    kern_rmsnorm(a, a, w, K, 1e-12f);
    for (int i = 0; i < K; i++) assert_float_equal(a[i], 1.0f, 1e-6f);

    memcpy(a, x, sizeof x); memcpy(b, x, sizeof x);
    kern_softmax(a, K);
    kern_softmax_ref(b, K);
    float sum = 0;
    for (int i = 0; i < K; i++) { assert_float_equal(a[i], b[i], 1e-6f * b[i] + 1e-9f); sum += a[i]; }
    assert_float_equal(sum, 1.0f, 1e-5f);

    kern_swiglu(a, x, u, K);
    kern_swiglu_ref(b, x, u, K);
    for (int i = 0; i < K; i++) assert_float_equal(a[i], b[i], 1e-6f * fabsf(b[i]) + 1e-7f);
    /* every tier, gates over libm expf's whole range (and past it), K with a tail */
    {
        enum { KS = 1003 };
        static float g[KS], uu[KS], hf[KS], hr[KS];
        for (int i = 0; i < KS; i++) {
            g[i] = (float)(i - KS / 2) * 0.2f; /* -100.2 .. 100.2 */
            uu[i] = 1.0f + (float)(i % 7) * 0.25f;
        }
        g[0] = -1e30f; g[1] = 1e30f; g[2] = 0.0f;
        kern_swiglu_ref(hr, g, uu, KS);
        const kern_tier best = kern_best_tier();
        for (int t = KERN_TIER_REF; t <= (int)best; t++) {
            assert_true(kern_set_tier((kern_tier)t));
            kern_swiglu(hf, g, uu, KS);
            for (int i = 0; i < KS; i++)
                if (!(fabsf(hf[i] - hr[i]) <= 2e-6f * fabsf(hr[i]) + 1e-30f))
                    fail_msg("swiglu tier %s g=%g: %.9g vs ref %.9g", kern_tier_name((kern_tier)t), g[i], hf[i], hr[i]);
        }
        kern_set_tier(best);
        /* exp and sum (sampling): x - m over (-90, 10], scales 1 and 1 / 0.7, -inf -> 0 */
        static float ex[KS], ey[KS], er[KS];
        for (int i = 0; i < KS; i++) ex[i] = (float)(i % 101) - 90.0f + 0.37f * (float)(i % 7);
        ex[5] = -INFINITY;
        for (int sc = 0; sc < 2; sc++) {
            const float s = sc ? 1.0f / 0.7f : 1.0f, m = 10.0f;
            const double tr = kern_exp_sum_ref(er, ex, KS, m, s);
            for (int t = KERN_TIER_REF; t <= (int)best; t++) {
                assert_true(kern_set_tier((kern_tier)t));
                const double tf = kern_exp_sum(ey, ex, KS - 3, m, s); /* a tail */
                double want = 0;
                for (int i = 0; i < KS - 3; i++) {
                    want += er[i];
                    if (!(fabsf(ey[i] - er[i]) <= 2e-6f * er[i] + 1e-37f))
                        fail_msg("exp_sum tier %s x=%g: %.9g vs ref %.9g", kern_tier_name((kern_tier)t), ex[i], ey[i], er[i]);
                }
                assert_true(ey[5] == 0.0f);
                assert_true(fabs(tf - want) <= 1e-6 * want);
                if (t == KERN_TIER_REF) assert_true(fabs(tr - want - er[KS - 1] - er[KS - 2] - er[KS - 3]) <= 1e-9 * tr);
            }
            kern_set_tier(best);
        }
    }
}

/* RoPE: fast (frequencies cached per call) vs ref, both orderings, partial
 * rope_dim; then properties: position 0 is the identity and rotation keeps
 * each rotated pair's norm. */
static void test_rope(void **state) {
    (void)state;
    enum { H = 3, D = 16 };
    for (int neox = 0; neox <= 1; neox++)
        for (int rd = 8; rd <= D; rd += 8) {
            const kern_rope_params p = {rd, 10000.0f, neox};
            for (int pos = 0; pos < 600; pos += 37) {
                float x[H * D], a[H * D], b[H * D];
                fill(x, H * D, 1.0f);
                memcpy(a, x, sizeof x); memcpy(b, x, sizeof x);
                kern_rope(a, H, D, pos, &p);
                kern_rope_ref(b, H, D, pos, &p);
                for (int i = 0; i < H * D; i++) assert_float_equal(a[i], b[i], 0.0f); /* same arithmetic */
                for (int h = 0; h < H; h++) {
                    for (int i = rd; i < D; i++) assert_float_equal(a[h * D + i], x[h * D + i], 0.0f);
                    for (int i = 0; i < rd / 2; i++) {
                        const int i0 = neox ? i : 2 * i, i1 = neox ? i + rd / 2 : 2 * i + 1;
                        const float n0 = hypotf(x[h * D + i0], x[h * D + i1]), n1 = hypotf(a[h * D + i0], a[h * D + i1]);
                        assert_float_equal(n0, n1, 1e-5f);
                        if (pos == 0) assert_float_equal(a[h * D + i0], x[h * D + i0], 0.0f);
                    }
                }
            }
        }
    /* pair 0 at position 1 rotates by exactly 1 radian */
    float v[2] = {1.0f, 0.0f};
    const kern_rope_params p = {2, 10000.0f, false};
    kern_rope(v, 1, 2, 1, &p);
    assert_float_equal(v[0], cosf(1.0f), 1e-7f);
    assert_float_equal(v[1], sinf(1.0f), 1e-7f);
}

static void task_count(void *ctx, int ith, int nth) {
    int *hits = ctx;
    __atomic_fetch_add(&hits[ith], 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&hits[63], nth, __ATOMIC_SEQ_CST);
}

static void test_pool(void **state) {
    (void)state;
    core_pool *p = core_pool_new(4);
    int hits[64] = {0};
    for (int r = 0; r < 100; r++) core_pool_run(p, task_count, hits);
    for (int i = 0; i < 4; i++) assert_int_equal(hits[i], 100);
    assert_int_equal(hits[63], 4 * 4 * 100);
    /* resting between jobs (core_pool_rest, kvant bench --vs): every job
     * still runs once on each thread, two pools taking turns */
    core_pool *q = core_pool_new(3);
    int qh[64] = {0};
    for (int r = 0; r < 50; r++) {
        core_pool_run(p, task_count, hits);
        core_pool_rest(p);
        core_pool_run(q, task_count, qh);
        if (r & 1) core_pool_rest(q);
    }
    for (int i = 0; i < 4; i++) assert_int_equal(hits[i], 150);
    for (int i = 0; i < 3; i++) assert_int_equal(qh[i], 50);
    assert_int_equal(qh[3], 0);
    core_pool_rest(q); /* a resting pool is freed as any other */
    core_pool_free(q);
    core_pool_free(p);
    int64_t lo, hi, total = 0;
    for (int i = 0; i < 3; i++) { core_split(10, i, 3, &lo, &hi); total += hi - lo; }
    assert_int_equal(total, 10);
}

/* core_chunk_guided: 4 threads cover [0, n) exactly once, each claim but
 * the last a multiple of align and at least min, claims shrinking */
typedef struct {
    _Atomic int64_t next;
    int64_t n, min, align;
    _Atomic int hits[1000];
    _Atomic int bad;
} guided_job;

static void task_guided(void *ctx, int ith, int nth) {
    guided_job *j = ctx;
    (void)ith;
    int64_t prev = INT64_MAX;
    for (int64_t lo, hi; core_chunk_guided(&j->next, j->n, nth, j->min, j->align, &lo, &hi);) {
        const int64_t k = hi - lo;
        if (lo % j->align || (hi < j->n && (k % j->align || k < j->min)) || k > prev) atomic_fetch_add(&j->bad, 1);
        prev = k; /* one thread's claims come later, from less left: not larger */
        for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&j->hits[i], 1);
    }
}

static void test_chunk_guided(void **state) {
    (void)state;
    core_pool *p = core_pool_new(4);
    const int64_t ns[] = {1, 7, 64, 999, 1000}, mins[] = {1, 2, 8}, aligns[] = {1, 8};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2; c++) {
                static guided_job j;
                memset(&j, 0, sizeof j);
                j.n = ns[a], j.min = mins[b], j.align = aligns[c];
                core_pool_run(p, task_guided, &j);
                assert_int_equal(atomic_load(&j.bad), 0);
                for (int64_t i = 0; i < 1000; i++) assert_int_equal(atomic_load(&j.hits[i]), i < j.n ? 1 : 0);
            }
    core_pool_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_roundtrip_exhaustive),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_quant_roundtrip),
        cmocka_unit_test(test_quant_known_bytes),
        cmocka_unit_test(test_matmul_all_types),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_chunk_guided),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
