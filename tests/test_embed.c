/* test_embed.c - embeddings: kvant_embed (the pooled, L2-normalized final
 * hidden state) and the engine's embed requests, which must give the same
 * bits as kvant_embed alone whatever else the batch holds, however the prompt
 * is chunked, and after preemption. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvant.h"
#include "testutil.h"

static const char *const TEXTS[] = {
    "Once upon a time, there was a little girl named Lily.",
    "The dog ran to the park and played with a big red ball all day long.",
    "Tom and Sue went to the shop. They wanted to buy some sweets, but the shop was closed, so they went home.",
    "A cat.",
};
#define N_TEXTS 4

static kvant_model *open_model(int *dim) {
    kvant_status st;
    kvant_model *m = kvant_model_open(NULL, NULL, &st); /* the built-in stories260K */
    if (!m) fail_msg("%s", st.msg);
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    assert_string_equal(in.pooling, "mean");
    *dim = in.dim;
    return m;
}

static int tokens_of(kvant_model *m, const char *text, int32_t *t, int cap) {
    const int n = kvant_tokenize(m, text, strlen(text), true, t, cap);
    assert_true(n > 0);
    return n;
}

/* alone: unit length, deterministic, different texts differ, and the mean
 * (the engine's results are held to these below) */
static void test_embed_alone(void **state) {
    (void)state;
    int dim;
    kvant_model *m = open_model(&dim);
    kvant_status st;
    kvant_seq *s = kvant_seq_new(m, 0, &st);
    assert_non_null(s);
    float *a = malloc(sizeof(float) * (size_t)dim), *b = malloc(sizeof(float) * (size_t)dim),
          *c = malloc(sizeof(float) * (size_t)dim);
    int32_t t[256];
    int n = tokens_of(m, TEXTS[0], t, 256);
    assert_int_equal(kvant_embed(s, t, n, a, &st), KVANT_OK);
    assert_int_equal(kvant_embed(s, t, n, b, &st), KVANT_OK); /* the sequence is reset first */
    assert_memory_equal(a, b, sizeof(float) * (size_t)dim);
    double norm = 0;
    for (int j = 0; j < dim; j++) norm += (double)a[j] * a[j];
    assert_true(fabs(norm - 1.0) < 1e-5);
    n = tokens_of(m, TEXTS[1], t, 256);
    assert_int_equal(kvant_embed(s, t, n, c, &st), KVANT_OK);
    double dot = 0;
    for (int j = 0; j < dim; j++) dot += (double)a[j] * c[j];
    assert_true(dot < 0.9999);
    assert_int_equal(kvant_embed(s, t, 0, c, &st), KVANT_ERR_ARG);
    free(a), free(b), free(c);
    kvant_seq_free(s);
    kvant_model_free(m);
}

/* runs the texts as embed requests next to two generating requests in an
 * engine with the given batch budget and pool; each embedding must equal
 * the one kvant_embed gives alone, bit for bit */
static int engine_round(int max_batch_tokens, double kv_mem_mib, const char *what) {
    int dim;
    kvant_model *m = open_model(&dim);
    kvant_status st;
    kvant_seq *s = kvant_seq_new(m, 0, &st);
    float want[N_TEXTS][64];
    assert_true(dim <= 64);
    int32_t t[N_TEXTS][256];
    int n[N_TEXTS];
    for (int i = 0; i < N_TEXTS; i++) {
        n[i] = tokens_of(m, TEXTS[i], t[i], 256);
        assert_int_equal(kvant_embed(s, t[i], n[i], want[i], &st), KVANT_OK);
    }
    kvant_seq_free(s);

    kvant_engine_params ep = kvant_engine_default();
    ep.max_batch_tokens = max_batch_tokens;
    ep.max_seqs = 8;
    ep.kv_mem_mib = kv_mem_mib;
    ep.max_ctx = 256;
    kvant_engine *e = kvant_engine_new(m, &ep, &st);
    if (!e) fail_msg("%s", st.msg);
    kvant_request gen = {.sampling = kvant_sampling_default(), .max_tokens = 96};
    gen.sampling.seed = 1;
    kvant_request emb = {.embed = true};
    int64_t ids[N_TEXTS], g1 = kvant_engine_submit(e, t[2], n[2], &gen, &st);
    assert_true(g1 > 0);
    for (int i = 0; i < N_TEXTS; i++) assert_true((ids[i] = kvant_engine_submit(e, t[i], n[i], &emb, &st)) > 0);
    const int64_t g2 = kvant_engine_submit(e, t[1], n[1], &gen, &st);
    assert_true(g2 > 0);
    int got = 0, gen_done = 0;
    kvant_event ev[64];
    for (int step = 0; step < 10000 && (got < N_TEXTS || gen_done < 2); step++) {
        const int k = kvant_engine_step(e, ev, 64, &st);
        assert_true(k >= 0);
        for (int i = 0; i < k; i++) {
            if (ev[i].id == g1 || ev[i].id == g2) {
                gen_done += ev[i].finish != KVANT_FINISH_NONE;
                continue;
            }
            int which = -1;
            for (int j = 0; j < N_TEXTS; j++) which = ids[j] == ev[i].id ? j : which;
            assert_true(which >= 0);
            assert_int_equal(ev[i].finish, KVANT_FINISH_EMBEDDING);
            assert_non_null(ev[i].embedding);
            assert_int_equal(ev[i].n_prompt, n[which]);
            assert_memory_equal(ev[i].embedding, want[which], sizeof(float) * (size_t)dim);
            got++;
        }
    }
    assert_int_equal(got, N_TEXTS);
    kvant_engine_stats es;
    kvant_engine_get_stats(e, &es);
    printf("%s: %d embeddings equal to kvant_embed alone bit for bit (%lld steps, %d preempted)\n", what, got,
           (long long)es.steps, es.preempted_total);
    assert_int_equal(es.blocks_used, 0);
    kvant_engine_free(e);
    kvant_model_free(m);
    return es.preempted_total;
}

static void test_engine_batching_invariance(void **state) {
    (void)state;
    engine_round(512, 0, "one step per prompt");
    engine_round(7, 0, "prompts in chunks of <= 7 tokens beside decoders");
}

static void test_engine_preemption(void **state) {
    (void)state;
    /* 10 blocks of 16 tokens x 5 layers x 4 KV heads x 8 dims x 2 (K, V) x 2 bytes */
    const int pre = engine_round(64, 10 * 16 * 5 * 4 * 8 * 2 * 2 / 1048576.0, "a pool of 10 blocks (preemption)");
    assert_true(pre > 0); /* the pool did force one */
}

static void test_engine_refuses(void **state) {
    (void)state;
    int dim;
    kvant_model *m = open_model(&dim);
    kvant_status st;
    kvant_engine *e = kvant_engine_new(m, NULL, &st);
    int32_t t[8] = {1, 2, 3};
    kvant_request r = {.embed = true, .n = 2};
    assert_true(kvant_engine_submit(e, t, 3, &r, &st) < 0);
    assert_int_equal(st.code, KVANT_ERR_ARG);
    r = (kvant_request){.embed = true, .max_tokens = 4};
    assert_true(kvant_engine_submit(e, t, 3, &r, &st) < 0);
    r = (kvant_request){.embed = true, .logprobs = 2};
    assert_true(kvant_engine_submit(e, t, 3, &r, &st) < 0);
    /* a cancelled embedding gives its one cancel event and nothing else */
    r = (kvant_request){.embed = true};
    const int64_t id = kvant_engine_submit(e, t, 3, &r, &st);
    assert_true(id > 0);
    kvant_engine_cancel(e, id);
    kvant_event ev[8];
    const int k = kvant_engine_step(e, ev, 8, &st);
    assert_int_equal(k, 1);
    assert_int_equal(ev[0].finish, KVANT_FINISH_CANCELLED);
    assert_null(ev[0].embedding);
    kvant_engine_free(e);
    kvant_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embed_alone),
        cmocka_unit_test(test_engine_batching_invariance),
        cmocka_unit_test(test_engine_preemption),
        cmocka_unit_test(test_engine_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
