/* test_int8.c - INT8 inference: the INT8 GEMM tiers against _ref, the
 * activation quantizer, LLM.int8 against plain absmax INT8 on activations
 * with injected outlier columns, the outlier criterion, SmoothQuant's
 * folding (same function in F32), and W8A8 / LLM.int8 on stories260K. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "format/gguf.h"
#include "kernels/types.h"
#include "kernels/w8a8.h"
#include "compress/int8.h"
#include "kernels/int8.h"
#include "kvant.h"

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static uint64_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static float frand(void) { return (float)((rnd() >> 40) / 8388608.0 - 1.0); } /* uniform [-1, 1) */
static float gauss(void) {
    float s = 0;
    for (int i = 0; i < 12; i++) s += 0.5f * (frand() + 1.0f);
    return s - 6.0f; /* Irwin-Hall: mean 0, variance 1 */
}

/* ---- GEMM tiers ---------------------------------------------------------------------
 * The integer sums are exact in every tier (bytes in [-127, 127], |sum| <
 * 2^31) and the float epilogue is shared code, so every tier must equal
 * _ref BIT FOR BIT: the tolerance is zero. */
static void test_gemm_tiers(void **state) {
    (void)state;
    static const int shapes[][3] = {{1, 1, 64}, {1, 7, 64}, {3, 5, 128}, {4, 4, 64}, {5, 9, 192},
                                    {17, 13, 320}, {64, 33, 2048}, {70, 8, 5632}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int T = shapes[si][0], N = shapes[si][1], Kp = shapes[si][2];
        int8_t *xq = malloc((size_t)T * Kp), *wq = malloc((size_t)N * Kp);
        float *sx = malloc(sizeof(float) * T), *sw = malloc(sizeof(float) * N);
        float *y0 = malloc(sizeof(float) * T * N), *y1 = malloc(sizeof(float) * T * N);
        for (int i = 0; i < T * Kp; i++) xq[i] = (int8_t)((int)(rnd() % 255) - 127);
        for (int i = 0; i < N * Kp; i++) wq[i] = (int8_t)((int)(rnd() % 255) - 127);
        /* extremes: a row of +-127 everywhere (largest sums) */
        for (int k = 0; k < Kp; k++) xq[k] = (k & 1) ? 127 : -127, wq[k] = (k & 1) ? 127 : -127;
        for (int t = 0; t < T; t++) sx[t] = 0.01f + 0.001f * t;
        for (int n = 0; n < N; n++) sw[n] = 0.02f + 0.0003f * n;
        kern_i8_gemm_ref(xq, sx, T, wq, sw, y0, N, Kp, false);
        for (int tier = 0; tier < KERN_TIER_COUNT; tier++) {
            kern_i8_tile_fn tile = kern_i8_tile_for((kern_tier)tier);
            if (!tile) {
                if (si == 0) printf("  tier %s: not on this CPU, skipped\n", kern_tier_name((kern_tier)tier));
                continue;
            }
            kern_i8_gemm_with(tile, xq, sx, T, wq, sw, y1, N, Kp, false);
            if (memcmp(y0, y1, sizeof(float) * T * N))
                fail_msg("tier %s differs from _ref at T=%d N=%d Kp=%d", kern_tier_name((kern_tier)tier), T, N, Kp);
            /* accumulate adds onto y */
            kern_i8_gemm_with(tile, xq, sx, T, wq, sw, y1, N, Kp, true);
            for (int i = 0; i < T * N; i++) assert_true(y1[i] == y0[i] + y0[i]);
        }
        /* the threaded driver with the active tier */
        core_pool *pool = core_pool_new(2);
        kern_i8_gemm(pool, xq, sx, T, wq, sw, y1, N, Kp, false);
        assert_memory_equal(y0, y1, sizeof(float) * T * N);
        core_pool_free(pool);
        free(xq); free(wq); free(sx); free(sw); free(y0); free(y1);
    }
    /* int32 sums are exact: the largest dot of a 5632-long row, 5632 * 127^2 */
    int8_t a[5632], b[5632];
    memset(a, 127, sizeof a);
    memset(b, 127, sizeof b);
    int32_t out;
    for (int tier = 0; tier < KERN_TIER_COUNT; tier++) {
        kern_i8_tile_fn tile = kern_i8_tile_for((kern_tier)tier);
        if (!tile) continue;
        tile(5632, 1, 1, &out, 1, a, 5632, b, 5632);
        assert_int_equal(out, 5632 * 127 * 127);
    }
}

static void test_quant_rows(void **state) {
    (void)state;
    enum { T = 3, K = 70, KP = 128 };
    float x[T * K];
    for (int i = 0; i < T * K; i++) x[i] = 3.0f * frand();
    for (int k = 0; k < K; k++) x[2 * K + k] = 0.0f; /* a zero row */
    x[5] = -7.5f;                                     /* row 0's absmax, negative */
    int8_t q[T * KP];
    float s[T];
    memset(q, 0x55, sizeof q);
    kern_i8_quant_rows(x, T, K, KP, q, s, NULL);
    assert_true(s[0] == 7.5f / 127.0f);
    assert_int_equal(q[5], -127);
    assert_true(s[2] == 0.0f);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < KP; k++) {
            const int v = q[t * KP + k];
            assert_true(v >= -127 && v <= 127);
            if (k >= K || t == 2) assert_int_equal(v, 0); /* padding and zero rows */
            /* round to nearest: |x - q s| <= s / 2 (+ float rounding of x * 127 / amax) */
            if (k < K) assert_true(fabsf(x[t * K + k] - v * s[t]) <= 0.5f * s[t] * 1.0001f + 1e-12f);
        }
    /* skipped columns: left out of the scale and stored as 0 */
    uint8_t skip[K] = {0};
    skip[5] = 1;
    kern_i8_quant_rows(x, 1, K, KP, q, s, skip);
    assert_int_equal(q[5], 0);
    float amax = 0;
    for (int k = 0; k < K; k++)
        if (k != 5) amax = fmaxf(amax, fabsf(x[k]));
    assert_true(s[0] == amax / 127.0f);
}

/* ---- LLM.int8 vs plain absmax INT8 -----------------------------------------------------
 * X (T x K) ~ N(0, 1) with 4 injected outlier columns of magnitude ~60
 * (what LLM.int8 sees from 6.7B parameters up); W (N x K) ~ N(0, 0.05).
 * Plain INT8: each row's scale is set by its outlier, so the ordinary
 * values (|x| ~ 1, step 60/127 ~ 0.5) lose almost all precision.  Mixed:
 * the outlier columns go through F32, the rest has step ~4/127. */
static double rel_err(const float *y, const double *ref, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += (y[i] - ref[i]) * (y[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

static void test_mixed_vs_plain(void **state) {
    (void)state;
    enum { T = 48, K = 256, N = 96 };
    float *x = malloc(sizeof(float) * T * K), *w = malloc(sizeof(float) * N * K);
    float *yp = malloc(sizeof(float) * T * N), *ym = malloc(sizeof(float) * T * N);
    double *yr = malloc(sizeof(double) * T * N);
    for (int i = 0; i < T * K; i++) x[i] = gauss();
    for (int i = 0; i < N * K; i++) w[i] = 0.05f * gauss();
    /* keep ordinary values below the threshold so only injected columns qualify */
    for (int i = 0; i < T * K; i++) x[i] = fmaxf(-5.5f, fminf(5.5f, x[i]));
    const model_mat W = {.data = w, .type = KT_F32, .rows = N, .cols = K};
    int8_mat M;
    assert_int_equal(int8_mat_init(&M, &W, NULL, NULL), KVANT_OK);
    int8_scratch *sc = int8_scratch_new(T, K, N, NULL);
    assert_non_null(sc);

    /* no column crosses 6.0: mixed == plain, bit for bit */
    assert_int_equal(int8_matmul(NULL, sc, &M, x, yp, T, 0.0f, false), 0);
    assert_int_equal(int8_matmul(NULL, sc, &M, x, ym, T, 6.0f, false), 0);
    assert_memory_equal(yp, ym, sizeof(float) * T * N);

    const int cols[] = {7, 100, 101, 250};
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < T; t++) x[t * K + cols[i]] = (t % 3 ? 1.0f : -1.0f) * (40.0f + 20.0f * fabsf(frand()));
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)x[t * K + k] * w[n * K + k];
            yr[t * N + n] = s;
        }
    core_pool *pool = core_pool_new(2);
    assert_int_equal(int8_matmul(pool, sc, &M, x, yp, T, 0.0f, false), 0);
    assert_int_equal(int8_matmul(pool, sc, &M, x, ym, T, 6.0f, false), 4);
    const double ep = rel_err(yp, yr, T * N), em = rel_err(ym, yr, T * N);
    printf("  relative error: plain INT8 %.5f, LLM.int8 %.5f (%.1fx lower)\n", ep, em, ep / em);
    assert_true(em < ep / 10);
    assert_true(em < 0.01);
    /* reuse: the same quantized input gives the same result */
    float *y2 = malloc(sizeof(float) * T * N);
    int8_matmul(pool, sc, &M, x, y2, T, 6.0f, true);
    assert_memory_equal(ym, y2, sizeof(float) * T * N);
    core_pool_free(pool);
    int8_scratch_free(sc);
    int8_mat_free(&M);
    free(x); free(w); free(yp); free(ym); free(yr); free(y2);
}

/* ---- the outlier criterion on synthetic activations ----------------------------------
 * 8 layers (16 hidden sites), 200 tokens, C = 32.
 *   dim 5:  |x| = 9 in every site for 10% of tokens          -> outlier
 *   dim 9:  |x| = 9 in ONE layer for all tokens (2/16 sites)  -> fails 25% of layers
 *   dim 12: |x| = 9 in every site for 2% of tokens            -> fails 6% of tokens
 *   dim 20: |x| = 5.9 everywhere                              -> below the threshold */
static void test_outlier_criterion(void **state) {
    (void)state;
    const model_config c = {.dim = 32, .hidden_dim = 48, .n_layers = 8, .n_heads = 4, .n_kv_heads = 4, .head_dim = 8};
    int8_stats *s = int8_stats_new(&c, 6.0f, 1000, NULL);
    assert_non_null(s);
    enum { T = 100 };
    float *x = malloc(sizeof(float) * T * 48);
    for (int batch = 0; batch < 2; batch++)
        for (int l = 0; l < 8; l++)
            for (int mm = MODEL_MM_WQ; mm <= MODEL_MM_DOWN; mm++) {
                const int cols = mm == MODEL_MM_DOWN ? 48 : 32;
                for (int t = 0; t < T; t++)
                    for (int j = 0; j < cols; j++) {
                        float v = frand();
                        const int ti = batch * T + t;
                        const bool hid = mm == MODEL_MM_WQ || mm == MODEL_MM_GATE;
                        if (hid && j == 5 && ti % 10 == 0) v = 9;
                        if (hid && j == 9 && l == 3) v = -9;
                        if (hid && j == 12 && ti % 50 == 0) v = 9;
                        if (j == 20) v = 5.9f;
                        x[t * cols + j] = v;
                    }
                int8_stats_tap(s, l, (model_mm_id)mm, x, T, cols);
            }
    assert_int_equal(s->n_tokens, 200);
    double ls, ts;
    assert_true(int8_stats_outlier(s, 5, 0.25, 0.06, &ls, &ts));
    assert_true(ls == 1.0 && fabs(ts - 0.10) < 1e-12);
    assert_false(int8_stats_outlier(s, 9, 0.25, 0.06, &ls, &ts));
    assert_true(fabs(ls - 2.0 / 16) < 1e-12 && ts == 1.0);
    assert_false(int8_stats_outlier(s, 12, 0.25, 0.06, &ls, &ts));
    assert_true(fabs(ts - 0.02) < 1e-12);
    assert_false(int8_stats_outlier(s, 20, 0.25, 0.06, &ls, &ts));
    for (int j = 0; j < 32; j++)
        if (j != 5) assert_false(int8_stats_outlier(s, j, 0.25, 0.06, NULL, NULL));
    /* looser flags admit dim 12 too */
    assert_true(int8_stats_outlier(s, 12, 0.25, 0.01, NULL, NULL));
    assert_true(s->maxabs[INT8_SITE_ATTN_IN][3 * 32 + 9] == 9.0f);
    free(x);
    int8_stats_free(s);
}

/* ---- on stories260K ----------------------------------------------------------------- */
static kvant_model *open_model(void) {
    kvant_status st;
    kvant_model_params mp = {.n_threads = 2};
    kvant_model *m = kvant_model_open(shared_path("models/stories260K.gguf"), &mp, &st);
    if (!m) fail_msg("%s", st.msg);
    return m;
}

static double g_rms; /* RMS logit difference of the last max_logit_diff */
static float max_logit_diff(kvant_model *m, kvant_int8 *a, kvant_int8 *b, const int32_t *toks, int n, float *amax) {
    kvant_status st;
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    const size_t V = (size_t)in.vocab_size;
    float *la = malloc(sizeof(float) * V * n), *lb = malloc(sizeof(float) * V * n);
    /* F32 K/V: the bounds below are F32 rounding (F16 K/V turns the fold's ulps
     * into F16 ulps: max |logit diff| 0.021) */
    kvant_seq_params sp = kvant_seq_default();
    sp.n_ctx = n;
    sp.kv_type = KVANT_KV_F32;
    kvant_seq *sa = kvant_seq_new_ex(m, &sp, &st), *sb = kvant_seq_new_ex(m, &sp, &st);
    assert_non_null(sa);
    assert_non_null(sb);
    if (a) assert_int_equal(kvant_seq_use_int8(sa, a, &st), KVANT_OK);
    if (b) assert_int_equal(kvant_seq_use_int8(sb, b, &st), KVANT_OK);
    assert_int_equal(kvant_forward(sa, toks, n, la, true, &st), KVANT_OK);
    assert_int_equal(kvant_forward(sb, toks, n, lb, true, &st), KVANT_OK);
    float d = 0, mx = 0;
    double ss = 0;
    for (size_t i = 0; i < V * n; i++) {
        ss += (double)(la[i] - lb[i]) * (la[i] - lb[i]);
        d = fmaxf(d, fabsf(la[i] - lb[i]));
        mx = fmaxf(mx, fabsf(la[i]));
    }
    if (amax) *amax = mx;
    g_rms = sqrt(ss / (double)(V * n));
    kvant_seq_free(sa);
    kvant_seq_free(sb);
    free(la);
    free(lb);
    return d;
}

/* SmoothQuant's folding (and the synthetic-outlier transform, its
 * inverse) change only rounding: g/s and W*s are each one rounded
 * product (relative error 2^-24), so every product in the model moves by
 * ~2 ulp and the logits (|l| ~ 10-20, 5 layers, sums of <= 172 terms) by
 * far less than 1e-3.  Measured: ~1e-5; the bound keeps 100x headroom. */
static void test_smooth_fold_f32(void **state) {
    (void)state;
    kvant_model *m = open_model();
    size_t len;
    char *text = read_file(shared_path("corpora/tinystories_val_subset.txt"), &len);
    int32_t toks[2048];
    assert_true(kvant_tokenize(m, text, 2000, true, toks, 2048) > 128);
    const int n = 128;
    kvant_status st;
    kvant_int8_params p = kvant_int8_default();
    p.mode = KVANT_INT8_NONE;
    p.smooth = true;
    p.alpha = 0.5f;
    p.calib_text = text + 300000;
    p.calib_len = 20000;
    p.calib_tokens = 1024;
    kvant_int8 *sq = kvant_int8_new(m, &p, &st);
    if (!sq) fail_msg("%s", st.msg);
    kvant_int8_stats s;
    kvant_int8_get_stats(sq, &s);
    assert_true(s.scale_max > 1.5 || s.scale_min < 0.67); /* the fold is not a no-op */
    float amax;
    float d = max_logit_diff(m, NULL, sq, toks, n, &amax);
    printf("  smoothing folded (scales %.3g..%.3g): max |logit diff| %.3g (max |logit| %.3g)\n", s.scale_min,
           s.scale_max, d, amax);
    assert_true(d < 1e-3f);
    /* wo's input too, per KV head through wv's rows (stories260K has GQA:
     * 8 query heads on 4 KV heads, so the group sharing is exercised) */
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    assert_true(in.n_heads > in.n_kv_heads);
    p.smooth_wo = true;
    kvant_int8 *sqo = kvant_int8_new(m, &p, &st);
    if (!sqo) fail_msg("%s", st.msg);
    kvant_int8_get_stats(sqo, &s);
    d = max_logit_diff(m, NULL, sqo, toks, n, &amax);
    printf("  with wo smoothed too (scales %.3g..%.3g): max |logit diff| %.3g\n", s.scale_min, s.scale_max, d);
    assert_true(d < 1e-3f);
    kvant_int8_free(sqo);
    /* synthetic outliers (x20 on 3 dims): also the same function */
    kvant_int8_params pi = kvant_int8_default();
    pi.mode = KVANT_INT8_NONE;
    const int dims[] = {1, 30, 63};
    pi.inject_dims = dims;
    pi.n_inject = 3;
    pi.inject_scale = 20;
    kvant_int8 *inj = kvant_int8_new(m, &pi, &st);
    assert_non_null(inj);
    d = max_logit_diff(m, NULL, inj, toks, n, NULL);
    printf("  synthetic outliers folded: max |logit diff| %.3g\n", d);
    assert_true(d < 1e-3f);

    /* the injected dims are found by the outlier report; without them none of them is */
    kvant_outlier_params op = kvant_outlier_default();
    op.max_tokens = 1024;
    op.transform = inj;
    kvant_outlier_report r;
    assert_int_equal(kvant_outliers(m, text, 20000, &op, &r, &st), KVANT_OK);
    assert_int_equal(r.n_tokens, 1024);
    for (int i = 0; i < 3; i++) assert_true(r.is_outlier[dims[i]]);
    printf("  with synthetic outliers: %d dims meet the criterion\n", r.n_outliers);
    kvant_outlier_report_free(&r);
    op.transform = NULL;
    assert_int_equal(kvant_outliers(m, text, 20000, &op, &r, &st), KVANT_OK);
    printf("  stories260K as is: %d dims meet the criterion\n", r.n_outliers);
    for (int i = 0; i < 3; i++) assert_false(r.is_outlier[dims[i]] && r.max_abs[0][dims[i]] < 6.0f);
    kvant_outlier_report_free(&r);

    kvant_int8_free(inj);
    kvant_int8_free(sq);
    kvant_model_free(m);
    free(text);
}

/* Perplexity over 4 chunks of 256: W8A8, LLM.int8 and SmoothQuant W8A8
 * stay within 2% of F32 (measured at c=512 x 100 chunks: within 0.2%).
 * With synthetic outliers (x20 on 2 hidden dims), logits against F32
 * over 256 tokens: plain W8A8's RMS error grows (every row's scale is set
 * by an outlier), LLM.int8 and SmoothQuant W8A8 stay below a third of it. */
static double ppl_of(kvant_model *m, const char *text, size_t len, kvant_int8 *q) {
    kvant_ppl_params p = {.n_ctx = 256, .n_chunks = 4, .int8 = q};
    kvant_ppl_result r;
    kvant_status st;
    if (kvant_perplexity(m, text, len, &p, &r, &st)) fail_msg("%s", st.msg);
    return r.ppl;
}

static void test_ppl_int8(void **state) {
    (void)state;
    kvant_model *m = open_model();
    size_t len;
    char *text = read_file(shared_path("corpora/tinystories_val_subset.txt"), &len);
    const size_t eval_len = 8000;
    kvant_status st;
    int32_t toks[4096];
    assert_true(kvant_tokenize(m, text, eval_len, true, toks, 4096) > 256);
    const double f32 = ppl_of(m, text, eval_len, NULL);
    const int dims[] = {3, 17};
    double ppl[3], rms[2][3];
    for (int inject = 0; inject < 2; inject++) {
        const kvant_int8_mode modes[] = {KVANT_INT8_W8A8, KVANT_INT8_MIXED, KVANT_INT8_W8A8};
        for (int k = 0; k < 3; k++) {
            kvant_int8_params p = kvant_int8_default();
            p.mode = modes[k];
            p.smooth = k == 2;
            p.calib_text = text + 300000;
            p.calib_len = 20000;
            p.calib_tokens = 1024;
            if (inject) {
                p.inject_dims = dims;
                p.n_inject = 2;
                p.inject_scale = 20;
            }
            kvant_int8 *q = kvant_int8_new(m, &p, &st);
            if (!q) fail_msg("%s", st.msg);
            if (!inject) ppl[k] = ppl_of(m, text, eval_len, q);
            max_logit_diff(m, NULL, q, toks, 256, NULL);
            rms[inject][k] = g_rms;
            kvant_int8_free(q);
        }
        printf("  %s: RMS logit error vs F32: W8A8 %.4f  LLM.int8 %.4f  SmoothQuant W8A8 %.4f\n",
               inject ? "synthetic outliers" : "stories260K", rms[inject][0], rms[inject][1], rms[inject][2]);
    }
    printf("  PPL: F32 %.4f  W8A8 %.4f  LLM.int8 %.4f  SmoothQuant W8A8 %.4f\n", f32, ppl[0], ppl[1], ppl[2]);
    for (int k = 0; k < 3; k++) assert_true(fabs(ppl[k] / f32 - 1) < 0.02);
    assert_true(rms[1][0] > 2 * rms[0][0]);
    assert_true(rms[1][1] < rms[1][0] / 3);
    assert_true(rms[1][2] < rms[1][0] / 3);
    kvant_model_free(m);
    free(text);
}

/* ---- the commands: exit codes and output that says the right thing ---------------- */
/* logits of every position of toks on m (with q's INT8 matmuls when q) */
static float *logits_of(kvant_model *m, kvant_int8 *q, const int32_t *toks, int n) {
    kvant_status st;
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    float *l = malloc(sizeof(float) * (size_t)in.vocab_size * (size_t)n);
    kvant_seq_params sp = kvant_seq_default();
    sp.n_ctx = n;
    kvant_seq *s = kvant_seq_new_ex(m, &sp, &st);
    assert_non_null(s);
    if (q) assert_int_equal(kvant_seq_use_int8(s, q, &st), KVANT_OK);
    assert_int_equal(kvant_forward(s, toks, n, l, true, &st), KVANT_OK);
    kvant_seq_free(s);
    return l;
}

/* A stored W8A8 file (kvant_int8_save, GGUF type 1100) computes exactly what
 * the conversion at load does: the same int8 rows and scales, the same
 * per-token activation quantization and epilogue (kernels/w8a8.h), packed
 * tiles instead of kern_i8_gemm.  Plain W8A8 and SmoothQuant (norms stored
 * folded), logits bit-identical.  LLM.int8 without a calibration text has no
 * outlier set to store and is refused. */
static void test_w8a8_file(void **state) {
    (void)state;
    kvant_model *m = open_model();
    size_t len;
    char *text = read_file(shared_path("corpora/tinystories_val_subset.txt"), &len);
    int32_t toks[2048];
    const int n = kvant_tokenize(m, text, 600, true, toks, 2048);
    assert_true(n > 64 && n < 512);
    kvant_status st;
    for (int smooth = 0; smooth < 2; smooth++) {
        kvant_int8_params p = kvant_int8_default();
        p.smooth = smooth;
        p.calib_text = text + 100000;
        p.calib_len = 20000;
        p.calib_tokens = 1024;
        kvant_int8 *q = kvant_int8_new(m, &p, &st);
        assert_non_null(q);
        char path[512];
        snprintf(path, sizeof path, "%s/w8a8-%d.gguf", KVANT_TEST_TMP, smooth);
        if (kvant_int8_save(q, shared_path("models/stories260K.gguf"), path, &st)) fail_msg("%s", st.msg);
        kvant_model_params mp = {.n_threads = 2};
        kvant_model *m2 = kvant_model_open(path, &mp, &st);
        if (!m2) fail_msg("%s", st.msg);
        kvant_model_info in;
        kvant_model_get_info(m, &in);
        float *a = logits_of(m, q, toks, n), *b = logits_of(m2, NULL, toks, n);
        if (memcmp(a, b, sizeof(float) * (size_t)in.vocab_size * (size_t)n))
            fail_msg("stored W8A8 file (smooth %d): logits differ from the conversion at load", smooth);
        free(a);
        free(b);
        kvant_model_free(m2);
        kvant_int8_free(q);
    }
    /* LLM.int8 without a calibration text has no outlier set to store */
    kvant_int8_params p = kvant_int8_default();
    p.mode = KVANT_INT8_MIXED;
    kvant_int8 *q = kvant_int8_new(m, &p, &st);
    assert_non_null(q);
    assert_int_equal(kvant_int8_save(q, shared_path("models/stories260K.gguf"), KVANT_TEST_TMP "/mixed.gguf", &st),
                     KVANT_ERR_ARG);
    kvant_int8_free(q);
    free(text);
    kvant_model_free(m);
}

/* Stored LLM.int8 (LLM_INT8 + F16 outlier columns) on stories260K with
 * three synthetic outlier dims x 40 (the function is unchanged, the
 * activations get LLM.int8's outliers): calibration finds exactly those
 * dims, the file stores them (kvant.int8.outlier_dims), and its logits stay
 * much closer to the F32 model's than a stored W8A8 file of the same
 * (injected) model, whose per-token scales the outliers blow up. */
static void test_llm_int8_file(void **state) {
    (void)state;
    kvant_model *m = open_model();
    size_t len;
    char *text = read_file(shared_path("corpora/tinystories_val_subset.txt"), &len);
    int32_t toks[2048];
    const int n = kvant_tokenize(m, text, 600, true, toks, 2048);
    assert_true(n > 64 && n < 512);
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    const size_t V = (size_t)in.vocab_size;
    static const int dims[3] = {5, 17, 40};
    kvant_status st;
    float *base = logits_of(m, NULL, toks, n), err[2];
    for (int mixed = 0; mixed < 2; mixed++) {
        kvant_int8_params p = kvant_int8_default();
        p.mode = mixed ? KVANT_INT8_MIXED : KVANT_INT8_W8A8;
        p.inject_dims = dims;
        p.n_inject = 3;
        p.inject_scale = 40.0f;
        p.calib_text = text + 100000;
        p.calib_len = 20000;
        p.calib_tokens = 1024;
        kvant_int8 *q = kvant_int8_new(m, &p, &st);
        assert_non_null(q);
        char path[512];
        snprintf(path, sizeof path, "%s/llm-int8-%d.gguf", KVANT_TEST_TMP, mixed);
        if (kvant_int8_save(q, shared_path("models/stories260K.gguf"), path, &st)) fail_msg("%s", st.msg);
        kvant_int8_free(q);
        if (mixed) {
            gguf_ctx *g = gguf_open(path, &st);
            assert_non_null(g);
            const gguf_value *v = gguf_get_arr(g, "kvant.int8.outlier_dims", GGUF_INT32);
            assert_non_null(v);
            /* the injected dims, and at most a few of the model's own (ascending) */
            assert_true(v->arr.n >= 3 && v->arr.n <= 8);
            int found = 0;
            for (uint64_t i = 0; i < v->arr.n; i++) {
                int32_t d;
                memcpy(&d, v->arr.raw + 4 * i, 4);
                for (int k = 0; k < 3; k++) found += d == dims[k];
            }
            assert_int_equal(found, 3);
            const gguf_tensor *t = gguf_find_tensor(g, "blk.0.attn_q.weight");
            assert_non_null(t);
            assert_int_equal(t->type, KT_LLM_INT8);
            assert_non_null(gguf_find_tensor(g, "blk.0.ffn_up.weight.outliers"));
            assert_int_equal(gguf_find_tensor(g, "blk.0.ffn_down.weight")->type, KT_W8A8);
            gguf_close(g);
        }
        kvant_model_params mp = {.n_threads = 2};
        kvant_model *m2 = kvant_model_open(path, &mp, &st);
        if (!m2) fail_msg("%s", st.msg);
        float *l = logits_of(m2, NULL, toks, n);
        double ss = 0;
        for (size_t i = 0; i < V * (size_t)n; i++) ss += (double)(l[i] - base[i]) * (l[i] - base[i]);
        err[mixed] = (float)sqrt(ss / (double)(V * (size_t)n));
        free(l);
        kvant_model_free(m2);
    }
    printf("  RMS logit error vs F32 with 3 synthetic outlier dims x 40: stored W8A8 %.4f, stored LLM.int8 %.4f\n", err[0], err[1]);
    assert_true(err[1] * 4 < err[0]);
    free(base);
    free(text);
    kvant_model_free(m);
}

static void test_cli(void **state) {
    (void)state;
    char cmd[2048];
    int rc;
    char *out;
    const char *M = shared_path("models/stories260K.gguf");
    char model_path[1024];
    snprintf(model_path, sizeof model_path, "%s", M);
    const char *F = shared_path("corpora/tinystories_val_subset.txt");
    snprintf(cmd, sizeof cmd, "%s outliers -m %s --calib %s --tokens 512 --json --inject-outliers 7 2>/dev/null",
             KVANT_BIN, model_path, F);
    out = run_capture(cmd, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"tokens\": 512"));
    assert_non_null(strstr(out, "{\"dim\": 7, "));
    assert_non_null(strstr(strstr(out, "{\"dim\": 7, "), "\"outlier\": true}"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s ppl -m %s -f %s --smoothquant 2>/dev/null", KVANT_BIN, model_path, F);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 2); /* no --calib */
    snprintf(cmd, sizeof cmd, "%s ppl -m %s -f %s --alpha 2 --smoothquant 2>/dev/null", KVANT_BIN, model_path, F);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 2);
    snprintf(cmd, sizeof cmd, "%s ppl -m %s -f %s -c 128 --chunks 2 --int8-mixed --json 2>/dev/null", KVANT_BIN,
             model_path, F);
    out = run_capture(cmd, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"int8_mode\": \"mixed\""));
    free(out);
    snprintf(cmd, sizeof cmd, "%s bench-int8 --shape 64x128 -T 5 -r 1 --json 2>/dev/null", KVANT_BIN);
    out = run_capture(cmd, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"w8a8_speedup\""));
    free(out);
    snprintf(cmd, sizeof cmd, "%s bench-int8 --shape 64 2>/dev/null", KVANT_BIN);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_tiers),        cmocka_unit_test(test_quant_rows),
        cmocka_unit_test(test_mixed_vs_plain),    cmocka_unit_test(test_outlier_criterion),
        cmocka_unit_test(test_smooth_fold_f32),   cmocka_unit_test(test_ppl_int8),
        cmocka_unit_test(test_cli),               cmocka_unit_test(test_w8a8_file),
        cmocka_unit_test(test_llm_int8_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
