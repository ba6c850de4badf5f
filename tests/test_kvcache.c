/* test_kvcache.c - the cache policies through the whole model (stories260K):
 * paged == contiguous and flash == naive (logits and greedy text), a
 * streaming cache that never evicts == contiguous, streaming runs in
 * constant memory, and F16 / Q8_0 K/V stay close to F32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kvant.h"

static kvant_model *g_model;
enum { N = 96 };
static int32_t g_ids[N];
static int g_V;

static int setup(void **state) {
    (void)state;
    kvant_status st;
    kvant_model_params mp = {.n_threads = 2};
    g_model = kvant_model_open(shared_path("models/stories260K.gguf"), &mp, &st);
    if (!g_model) return -1;
    kvant_model_info in;
    kvant_model_get_info(g_model, &in);
    g_V = in.vocab_size;
    /* a real text prefix: greedy continuation from BOS, computed once */
    kvant_seq *s = kvant_seq_new(g_model, N, &st);
    float *lg = malloc(sizeof(float) * g_V);
    g_ids[0] = 1;
    for (int i = 0; i + 1 < N; i++) {
        kvant_forward(s, &g_ids[i], 1, lg, false, &st);
        int b = 0;
        for (int v = 1; v < g_V; v++) if (lg[v] > lg[b]) b = v;
        g_ids[i + 1] = b;
    }
    free(lg);
    kvant_seq_free(s);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kvant_model_free(g_model);
    return 0;
}

/* logits of g_ids: first `batch` tokens as one batch, the rest one by one */
static float *run(kvant_seq_params p, int batch) {
    kvant_status st;
    p.n_ctx = p.n_ctx ? p.n_ctx : N;
    kvant_seq *s = kvant_seq_new_ex(g_model, &p, &st);
    if (!s) fail_msg("%s", st.msg);
    float *lg = malloc(sizeof(float) * g_V * N);
    assert_int_equal(kvant_forward(s, g_ids, batch, lg, true, &st), KVANT_OK);
    for (int i = batch; i < N; i++)
        assert_int_equal(kvant_forward(s, &g_ids[i], 1, lg + (size_t)i * g_V, false, &st), KVANT_OK);
    kvant_seq_free(s);
    return lg;
}

static double max_diff(const float *a, const float *b) {
    double m = 0;
    for (int i = 0; i < N * g_V; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_paged_equals_contiguous(void **state) {
    (void)state;
    kvant_seq_params c = kvant_seq_default();
    c.kv = KVANT_CACHE_CONTIGUOUS;
    float *ref = run(c, 40);
    const int sizes[] = {1, 7, 16, 64};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        kvant_seq_params p = kvant_seq_default();
        p.kv = KVANT_CACHE_PAGED;
        p.block_size = sizes[i];
        float *lg = run(p, 40);
        const double d = max_diff(lg, ref);
        print_message("paged block %2d vs contiguous: max |diff| %.3g\n", sizes[i], d);
        assert_true(d <= 1e-6);
        free(lg);
    }
    free(ref);
}

static void test_flash_equals_naive(void **state) {
    (void)state;
    kvant_seq_params a = kvant_seq_default(), b = kvant_seq_default();
    /* F32 K/V: the bound is F32 rounding; F16 storage turns those ulps into
     * F16 ulps of the next layer's K/V (relative 2e-4, each kernel as far from F32) */
    a.kv_type = b.kv_type = KVANT_KV_F32;
    a.attn = KVANT_ATTN_FLASH;
    b.attn = KVANT_ATTN_NAIVE;
    for (int paged = 0; paged <= 1; paged++) {
        a.kv = b.kv = paged ? KVANT_CACHE_PAGED : KVANT_CACHE_CONTIGUOUS;
        float *fa = run(a, 50), *na = run(b, 50);
        /* relative to the logits' scale: max |flash - naive| / max |naive|
         * (the two kernels round differently, e.g. online vs two-pass
         * softmax; 5 layers carry those ulps into the logits) */
        double worst = 0, scale = 0;
        for (int i = 0; i < N * g_V; i++) {
            worst = fmax(worst, fabs((double)fa[i] - na[i]));
            scale = fmax(scale, fabs(na[i]));
        }
        print_message("flash vs naive (%s): max |diff| %.3g, relative to max |logit| %.3g\n",
                      paged ? "paged" : "contiguous", worst, worst / scale);
        assert_true(worst / scale <= 1e-5);
        free(fa);
        free(na);
    }
}

/* sink + window >= N never evicts: K rotated on read == rotated on write */
static void test_streaming_without_eviction(void **state) {
    (void)state;
    kvant_seq_params c = kvant_seq_default(), s = kvant_seq_default();
    /* F32 K/V: the streaming cache stores K before RoPE, the others after, so in
     * F16 the two round different values (max |diff| ~0.02, each as far from F32) */
    c.kv_type = s.kv_type = KVANT_KV_F32;
    s.sink = 4;
    s.window = N;
    float *ref = run(c, 30), *lg = run(s, 30);
    const double d = max_diff(lg, ref);
    print_message("streaming (no eviction) vs contiguous: max |diff| %.3g\n", d);
    assert_true(d <= 1e-5);
    free(ref);
    free(lg);
}

/* streaming: thousands of tokens through a 4 + 28 cache; memory constant,
 * positions bounded, logits finite */
static void test_streaming_constant_memory(void **state) {
    (void)state;
    kvant_status st;
    kvant_seq_params p = kvant_seq_default();
    p.sink = 4;
    p.window = 28;
    kvant_seq *s = kvant_seq_new_ex(g_model, &p, &st);
    assert_non_null(s);
    float *lg = malloc(sizeof(float) * g_V);
    const size_t cap = kvant_seq_kv_capacity_bytes(s);
    int32_t tok = 1;
    for (int i = 0; i < 3000; i++) {
        assert_int_equal(kvant_forward(s, &tok, 1, lg, false, &st), KVANT_OK);
        assert_true(kvant_seq_pos(s) <= 32);
        assert_true(isfinite(lg[0]));
        int b = 0;
        for (int v = 1; v < g_V; v++) if (lg[v] > lg[b]) b = v;
        tok = b;
    }
    assert_int_equal(kvant_seq_pos(s), 32);
    assert_int_equal(kvant_seq_evicted(s), 3000 - 32);
    assert_int_equal(kvant_seq_kv_capacity_bytes(s), cap);
    /* a batch longer than the window runs in window-sized chunks */
    int32_t many[40] = {0};
    assert_int_equal(kvant_forward(s, many, 40, NULL, false, &st), KVANT_OK);
    assert_int_equal(kvant_seq_pos(s), 32);
    free(lg);
    kvant_seq_free(s);
}

/* F16 and Q8_0 K/V: KL from F32 and top-1 agreement (figures for the issue) */
static void test_kv_quantization(void **state) {
    (void)state;
    kvant_seq_params p = kvant_seq_default();
    p.kv_type = KVANT_KV_F32; /* the reference (the default is F16 now) */
    float *ref = run(p, 48);
    const kvant_kv_type types[] = {KVANT_KV_F16, KVANT_KV_Q8_0};
    const char *type_names[] = {"f16", "q8_0"};
    const double max_kl[] = {1e-5, 1e-2};
    for (int t = 0; t < 2; t++) {
        p.kv_type = types[t];
        float *lg = run(p, 48);
        double kl = 0;
        int same = 0;
        for (int i = 0; i < N; i++) {
            const float *a = ref + (size_t)i * g_V, *b = lg + (size_t)i * g_V;
            double ma = a[0], mb = b[0];
            int ia = 0, ib = 0;
            for (int v = 1; v < g_V; v++) {
                if (a[v] > ma) { ma = a[v]; ia = v; }
                if (b[v] > mb) { mb = b[v]; ib = v; }
            }
            double za = 0, zb = 0;
            for (int v = 0; v < g_V; v++) { za += exp(a[v] - ma); zb += exp(b[v] - mb); }
            for (int v = 0; v < g_V; v++) {
                const double lp = a[v] - ma - log(za), lq = b[v] - mb - log(zb);
                kl += exp(lp) * (lp - lq);
            }
            same += ia == ib;
        }
        print_message("KV %s vs f32: mean KL %.3g, top-1 %d/%d\n", type_names[t], kl / N, same, N);
        assert_true(kl / N <= max_kl[t]);
        assert_true(same >= N - 3);
        free(lg);
    }
    p.kv_type = (kvant_kv_type)99; /* no such KV type */
    kvant_status st;
    assert_null(kvant_seq_new_ex(g_model, &p, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    free(ref);
}

static int32_t argmax_of(const float *x) {
    int b = 0;
    for (int v = 1; v < g_V; v++) if (x[v] > x[b]) b = v;
    return b;
}

/* a second request with the same prompt prefix prefills only the uncached
 * tail, and gets the same logits as a fresh computation */
static void test_prefix_cache_reuse(void **state) {
    (void)state;
    kvant_status st;
    kvant_kv_pool_params pp = {.kv_type = KVANT_KV_F32, .block_size = 16, .n_blocks = 64, .max_ctx = 128,
                               .max_seqs = 4, .prefix_cache = true};
    kvant_kv_pool *pool = kvant_kv_pool_new(g_model, &pp, &st);
    assert_non_null(pool);
    kvant_seq_params sp = kvant_seq_default();
    sp.pool = pool;
    float *a = malloc(sizeof(float) * g_V), *b = malloc(sizeof(float) * g_V), *ref = malloc(sizeof(float) * g_V);
    kvant_seq *s1 = kvant_seq_new_ex(g_model, &sp, &st);
    assert_int_equal(kvant_seq_prefill_cached(s1, g_ids, 70), 0); /* nothing cached yet */
    assert_int_equal(kvant_forward(s1, g_ids, 70, a, false, &st), KVANT_OK);
    kvant_seq_free(s1);
    /* same first 50 tokens, then different: 3 full blocks (48 tokens) reused */
    int32_t p2[70];
    memcpy(p2, g_ids, sizeof p2);
    for (int i = 50; i < 70; i++) p2[i] = (g_ids[i] + 7) % g_V;
    kvant_seq *s2 = kvant_seq_new_ex(g_model, &sp, &st);
    const int cached = kvant_seq_prefill_cached(s2, p2, 70);
    assert_int_equal(cached, 48);
    assert_int_equal(kvant_forward(s2, p2 + cached, 70 - cached, b, false, &st), KVANT_OK);
    kvant_kv_stats ks;
    kvant_seq_kv_stats(s2, &ks);
    assert_int_equal(ks.prefix_hit_tokens, 48);
    kvant_seq_params cp = kvant_seq_default();
    cp.kv = KVANT_CACHE_CONTIGUOUS;
    cp.kv_type = KVANT_KV_F32; /* as the pool's */
    cp.n_ctx = 128;
    kvant_seq *c = kvant_seq_new_ex(g_model, &cp, &st);
    assert_int_equal(kvant_forward(c, p2, 70, ref, false, &st), KVANT_OK);
    for (int v = 0; v < g_V; v++) assert_float_equal(b[v], ref[v], 1e-6);
    kvant_seq_free(c);
    kvant_seq_free(s2);
    free(a); free(b); free(ref);
    kvant_kv_pool_free(pool);
}

/* fork after a shared prompt: each branch continues exactly as it would alone */
static void test_fork_divergent(void **state) {
    (void)state;
    kvant_status st;
    kvant_kv_pool_params pp = {.kv_type = KVANT_KV_F32, .block_size = 16, .n_blocks = 64, .max_ctx = 128, .max_seqs = 4};
    kvant_kv_pool *pool = kvant_kv_pool_new(g_model, &pp, &st);
    kvant_seq_params sp = kvant_seq_default();
    sp.pool = pool;
    float *lg = malloc(sizeof(float) * g_V);
    int32_t out[2][24], alone[2][24];
    for (int branch = 0; branch < 2; branch++) { /* alone: prompt of 21 tokens + a branch token */
        kvant_seq *s = kvant_seq_new_ex(g_model, &sp, &st);
        assert_int_equal(kvant_forward(s, g_ids, 21, lg, false, &st), KVANT_OK);
        int32_t t = 300 + branch; /* divergent first token */
        for (int i = 0; i < 24; i++) {
            assert_int_equal(kvant_forward(s, &t, 1, lg, false, &st), KVANT_OK);
            t = alone[branch][i] = argmax_of(lg);
        }
        kvant_seq_free(s);
    }
    kvant_seq *parent = kvant_seq_new_ex(g_model, &sp, &st);
    assert_int_equal(kvant_forward(parent, g_ids, 21, lg, false, &st), KVANT_OK); /* last block half full */
    kvant_seq *child = kvant_seq_fork(parent, &st);
    assert_non_null(child);
    kvant_seq *br[2] = {parent, child};
    int32_t t[2] = {300, 301};
    for (int i = 0; i < 24; i++)
        for (int b = 0; b < 2; b++) { /* interleaved: each write into the shared block must copy it */
            assert_int_equal(kvant_forward(br[b], &t[b], 1, lg, false, &st), KVANT_OK);
            t[b] = out[b][i] = argmax_of(lg);
        }
    assert_memory_equal(out[0], alone[0], sizeof out[0]);
    assert_memory_equal(out[1], alone[1], sizeof out[1]);
    kvant_kv_stats ks;
    kvant_seq_kv_stats(child, &ks);
    assert_true(ks.cow_copies >= 1);
    kvant_seq_free(child);
    kvant_seq_free(parent);
    free(lg);
    kvant_kv_pool_free(pool);
}

/* kvant_seq_truncate (kvant bench -d): contiguous keeps exactly n, paged
 * whole blocks; after a cut the cache answers as if the forgotten tokens
 * had never been there: logits equal a sequence that only ever saw the
 * kept prefix (to float rounding of other batch splits), and the paged
 * pool has its blocks back.  A streaming cache refuses and is unchanged. */
static void test_truncate(void **state) {
    (void)state;
    kvant_status st;
    float *x = malloc(sizeof(float) * g_V), *y = malloc(sizeof(float) * g_V);
    for (int paged = 0; paged < 2; paged++) {
        kvant_seq_params p = kvant_seq_default();
        p.kv = paged ? KVANT_CACHE_PAGED : KVANT_CACHE_CONTIGUOUS;
        p.kv_type = KVANT_KV_F32;
        p.block_size = 16;
        p.n_ctx = N;
        kvant_seq *s = kvant_seq_new_ex(g_model, &p, &st), *fresh = kvant_seq_new_ex(g_model, &p, &st);
        assert_non_null(s);
        assert_int_equal(kvant_forward(s, g_ids, 70, NULL, false, &st), KVANT_OK);
        const size_t bytes70 = kvant_seq_kv_bytes(s);
        assert_int_equal(kvant_seq_truncate(s, 90), 70); /* more than it holds: all kept */
        const int kept = kvant_seq_truncate(s, 41);
        assert_int_equal(kept, paged ? 32 : 41);
        assert_int_equal(kvant_seq_pos(s), kept);
        assert_true(kvant_seq_kv_bytes(s) < bytes70);
        assert_int_equal(kvant_seq_truncate(s, -1), -1);
        /* continue with other tokens than the forgotten ones */
        assert_int_equal(kvant_forward(s, g_ids + 50, 12, x, false, &st), KVANT_OK);
        assert_int_equal(kvant_forward(fresh, g_ids, kept, NULL, false, &st), KVANT_OK);
        assert_int_equal(kvant_forward(fresh, g_ids + 50, 12, y, false, &st), KVANT_OK);
        for (int v = 0; v < g_V; v++) assert_float_equal(x[v], y[v], 1e-4);
        assert_int_equal(kvant_seq_truncate(s, 0), 0);
        assert_int_equal(kvant_seq_pos(s), 0);
        kvant_seq_free(s);
        kvant_seq_free(fresh);
    }
    kvant_seq_params sp = kvant_seq_default();
    sp.sink = 4;
    sp.window = 28;
    kvant_seq *s = kvant_seq_new_ex(g_model, &sp, &st);
    assert_non_null(s);
    assert_int_equal(kvant_forward(s, g_ids, 20, NULL, false, &st), KVANT_OK);
    assert_int_equal(kvant_seq_truncate(s, 10), -1);
    assert_int_equal(kvant_seq_pos(s), 20);
    kvant_seq_free(s);
    free(x); free(y);
}

/* out of blocks: a clear KVANT_ERR_FULL, and the other sequence's cache is
 * untouched (its next logits equal a fresh computation) */
static void test_out_of_blocks(void **state) {
    (void)state;
    kvant_status st;
    kvant_kv_pool_params pp = {.kv_type = KVANT_KV_F32, .block_size = 8, .n_blocks = 10, .max_ctx = 96, .max_seqs = 4};
    kvant_kv_pool *pool = kvant_kv_pool_new(g_model, &pp, &st);
    kvant_seq_params sp = kvant_seq_default();
    sp.pool = pool;
    kvant_seq *a = kvant_seq_new_ex(g_model, &sp, &st), *b = kvant_seq_new_ex(g_model, &sp, &st);
    assert_int_equal(kvant_forward(a, g_ids, 40, NULL, false, &st), KVANT_OK); /* 5 blocks */
    assert_int_equal(kvant_forward(b, g_ids + 10, 48, NULL, false, &st), KVANT_ERR_FULL); /* needs 6 */
    assert_non_null(strstr(st.msg, "blocks"));
    float *x = malloc(sizeof(float) * g_V), *y = malloc(sizeof(float) * g_V);
    assert_int_equal(kvant_forward(a, &g_ids[40], 1, x, false, &st), KVANT_OK);
    kvant_seq_params cp = kvant_seq_default();
    cp.kv = KVANT_CACHE_CONTIGUOUS;
    cp.kv_type = KVANT_KV_F32; /* as the pool's */
    cp.n_ctx = 64;
    kvant_seq *c = kvant_seq_new_ex(g_model, &cp, &st);
    assert_int_equal(kvant_forward(c, g_ids, 41, y, false, &st), KVANT_OK);
    for (int v = 0; v < g_V; v++) assert_float_equal(x[v], y[v], 1e-6);
    kvant_seq_free(c);
    kvant_seq_free(a);
    kvant_seq_free(b);
    free(x); free(y);
    kvant_kv_pool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paged_equals_contiguous),
        cmocka_unit_test(test_flash_equals_naive),
        cmocka_unit_test(test_streaming_without_eviction),
        cmocka_unit_test(test_streaming_constant_memory),
        cmocka_unit_test(test_kv_quantization),
        cmocka_unit_test(test_prefix_cache_reuse),
        cmocka_unit_test(test_fork_divergent),
        cmocka_unit_test(test_out_of_blocks),
        cmocka_unit_test(test_truncate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
