/* int8_bench.c - kvant_int8_bench: the INT8 GEMM (W8A8, LLM.int8) against
 * kvant's F32 matmul at one layer shape, same data, same threads, same run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvant_compress.h"
#include "compress/int8.h"
#include "kernels/kernels.h"

static uint64_t xs(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static float gauss(uint64_t *s) {
    float v = 0;
    for (int i = 0; i < 4; i++) v += (float)((xs(s) >> 40) / 16777216.0);
    return (v - 2.0f) * 1.7320508f; /* sum of 4 uniforms, variance 1 */
}

static double rel_rms(const float *y, const float *ref, size_t n) {
    double a = 0, b = 0;
    for (size_t i = 0; i < n; i++) {
        a += (double)(y[i] - ref[i]) * (y[i] - ref[i]);
        b += (double)ref[i] * ref[i];
    }
    return b > 0 ? sqrt(a / b) : 0;
}

kvant_code kvant_int8_bench(const kvant_int8_bench_params *p, kvant_int8_bench_result *r, kvant_status *st) {
    memset(r, 0, sizeof *r);
    const int T = p->T, reps = p->reps > 0 ? p->reps : 3;
    const int64_t N = p->N, K = p->K;
    if (T < 1 || N < 1 || K < 1 || T > 65536 || N > (1 << 20) || K > (1 << 17))
        return core_fail(st, KVANT_ERR_ARG, "bad shape T=%d N=%lld K=%lld", T, (long long)N, (long long)K);
    if (p->n_outliers < 0 || p->n_outliers > K) return core_fail(st, KVANT_ERR_ARG, "outliers must be in 0..K");
    const int nth = p->n_threads > 0 ? p->n_threads : core_cpu_count();
    core_pool *pool = core_pool_new(nth);
    float *w = malloc(sizeof(float) * (size_t)N * K), *x = malloc(sizeof(float) * (size_t)T * K);
    float *xo = malloc(sizeof(float) * (size_t)T * K);
    float *y0 = malloc(sizeof(float) * (size_t)T * N), *y1 = malloc(sizeof(float) * (size_t)T * N);
    float *y2 = malloc(sizeof(float) * (size_t)T * N);
    void *w16 = malloc(kern_row_bytes(KT_F16, K) * (size_t)N);
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    int8_scratch *sc = int8_scratch_new(T, K, N, st);
    int8_mat M = {0};
    kvant_code rc = KVANT_OK;
    if (!pool || !w || !x || !xo || !y0 || !y1 || !y2 || !w16 || !scratch || !sc) {
        rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory for the benchmark");
        goto done;
    }
    uint64_t seed = p->seed ? p->seed : 0x1234567;
    const float ws = 1.0f / sqrtf((float)K);
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = ws * gauss(&seed);
    for (size_t i = 0; i < (size_t)T * K; i++) x[i] = fmaxf(-5.0f, fminf(5.0f, gauss(&seed)));
    memcpy(xo, x, sizeof(float) * (size_t)T * K);
    for (int i = 0; i < p->n_outliers; i++) {
        const int64_t col = (int64_t)((i * 2654435761u) % (uint64_t)K);
        for (int t = 0; t < T; t++) xo[(size_t)t * K + col] = (t & 1 ? 1.0f : -1.0f) * (15.0f + 10.0f * fabsf(gauss(&seed)));
    }
    for (int64_t n = 0; n < N; n++)
        kern_ops(KT_F16)->from_float(w + (size_t)n * K, (uint8_t *)w16 + kern_row_bytes(KT_F16, K) * (size_t)n, K);
    const model_mat W = {w, KT_F32, N, K, NULL};
    if ((rc = int8_mat_init(&M, &W, pool, st))) goto done;
    const float thr = p->threshold > 0 ? p->threshold : 6.0f;
    r->tier = kern_tier_name(kern_active_tier());
    double best[5] = {INFINITY, INFINITY, INFINITY, INFINITY, INFINITY};
    for (int it = 0; it < reps; it++) {
        double t0 = core_time_ms();
        kern_matmul(pool, scratch, w, KT_F32, x, y0, T, N, K);
        double t1 = core_time_ms();
        int8_matmul(pool, sc, &M, x, y1, T, 0.0f, false);
        double t2 = core_time_ms();
        int8_matmul(pool, sc, &M, x, y1, T, 0.0f, true); /* reuse: GEMM alone */
        double t3 = core_time_ms();
        int8_matmul(pool, sc, &M, xo, y2, T, thr, false);
        double t4 = core_time_ms();
        kern_matmul(pool, scratch, w16, KT_F16, x, y2, T, N, K);
        double t5 = core_time_ms();
        int8_matmul(pool, sc, &M, xo, y2, T, thr, false); /* y2: LLM.int8's result again */
        best[0] = fmin(best[0], t1 - t0);
        best[1] = fmin(best[1], t2 - t1);
        best[2] = fmin(best[2], t3 - t2);
        best[3] = fmin(best[3], t4 - t3);
        best[4] = fmin(best[4], t5 - t4);
    }
    r->f32_ms = best[0];
    r->w8a8_ms = best[1];
    r->gemm_ms = best[2];
    r->mixed_ms = best[3];
    r->f16_ms = best[4];
    r->w8a8_err = rel_rms(y1, y0, (size_t)T * N);
    /* errors on the outlier input: F32 reference, plain W8A8, LLM.int8 */
    kern_matmul(pool, scratch, w, KT_F32, xo, y0, T, N, K);
    r->mixed_err = rel_rms(y2, y0, (size_t)T * N);
    int8_matmul(pool, sc, &M, xo, y1, T, 0.0f, false);
    r->w8a8_err_outl = rel_rms(y1, y0, (size_t)T * N);
done:
    int8_mat_free(&M);
    int8_scratch_free(sc);
    free(w16);
    free(w); free(x); free(xo); free(y0); free(y1); free(y2); free(scratch);
    core_pool_free(pool);
    return rc;
}
