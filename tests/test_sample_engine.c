/* test_sample_engine.c - the presence / frequency penalties and the logit
 * bias through the serving engine (include/kvant_infer.h -> api/engine.c ->
 * sched/ -> sample/), on stories260K:
 *  - a request sampled with them gives the tokens a kvant_sampler with the
 *    same settings gives on the plain kvant_seq path (prompt accepted before
 *    the first sample, so only generated tokens are counted), alone, among
 *    other requests, and under preemption (a pool too small for all of
 *    them: a recomputed sequence keeps its counts);
 *  - sample i of n > 1 is the plain path seeded seed + i;
 *  - the penalties change the greedy output, a bias of -100 bans a token
 *    greedy picks and +100 forces one;
 *  - the caller's bias array may go right after submit (the engine copies);
 *  - a bias token outside the vocabulary is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kvant.h"

static kvant_model *g_m;
static int V;
static int32_t g_prompt[8][64];
static int g_np[8];

enum { NG = 40 };

static kvant_sampling penalized(uint64_t seed, const kvant_logit_bias *lb, int n_lb) {
    kvant_sampling s = kvant_sampling_default();
    s.temperature = 1.0f;
    s.top_k = 0;
    s.top_p = 1.0f;
    s.min_p = 0;
    s.presence_penalty = 0.8f;
    s.frequency_penalty = 0.6f;
    s.logit_bias = lb;
    s.n_logit_bias = n_lb;
    s.seed = seed;
    return s;
}

/* runs requests to the end: tokens[r][0..NG) per request (ignore_eos) */
static kvant_engine_stats run(const kvant_engine_params *p, const kvant_request *q, int n_req,
                              int32_t tokens[][NG], int n_samples) {
    kvant_status st;
    kvant_engine *e = kvant_engine_new(g_m, p, &st);
    assert_non_null(e);
    int64_t id[8] = {0};
    for (int r = 0; r < n_req; r++) {
        id[r] = kvant_engine_submit(e, g_prompt[r], g_np[r], &q[r], &st);
        if (id[r] <= 0) fail_msg("submit: %s", st.msg);
    }
    int got[8][4] = {{0}}, open = n_req * n_samples;
    kvant_event ev[64];
    while (open) {
        const int k = kvant_engine_step(e, ev, 64, &st);
        assert_true(k >= 0);
        for (int i = 0; i < k; i++) {
            int r = 0;
            while (id[r] != ev[i].id) r++;
            if (ev[i].token >= 0) tokens[r * n_samples + ev[i].index][got[r][ev[i].index]++] = ev[i].token;
            if (ev[i].finish) {
                assert_int_equal(ev[i].finish, KVANT_FINISH_LENGTH);
                open--;
            }
        }
    }
    kvant_engine_stats s;
    kvant_engine_get_stats(e, &s);
    kvant_engine_free(e);
    return s;
}

static int setup(void **state) {
    (void)state;
    kvant_status st;
    kvant_model_params mp = {.n_threads = 1};
    g_m = kvant_model_open(shared_path("models/stories260K.gguf"), &mp, &st);
    if (!g_m) fail_msg("open: %s", st.msg);
    kvant_model_info in;
    kvant_model_get_info(g_m, &in);
    V = in.vocab_size;
    const char *texts[8] = {"Once upon a time", "The little dog", "Tom and Sue went to the park.", "One day, a bird",
                            "Lily had a red ball", "The sun was hot and the sky was blue", "A big truck",
                            "Max liked cake"};
    for (int r = 0; r < 8; r++) g_np[r] = kvant_tokenize(g_m, texts[r], strlen(texts[r]), true, g_prompt[r], 64);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kvant_model_free(g_m);
    return 0;
}

/* engine == plain path, alone and batched with 7 others, with and without
 * preemption */
static void test_engine_matches_plain(void **state) {
    (void)state;
    kvant_logit_bias lb[3] = {{13, 2.0f}, {29, -100.0f}, {50, -3.0f}};
    kvant_request q[8];
    int32_t want[8][NG], got[8][NG];
    for (int r = 0; r < 8; r++) {
        q[r] = (kvant_request){.sampling = penalized(100 + (uint64_t)r, lb, r % 2 ? 3 : 0), .max_tokens = NG,
                               .ignore_eos = true};
        plain_sampled(g_m, g_prompt[r], g_np[r], NG, &q[r].sampling, -1, want[r]); /* NG tokens, EOS too */
    }
    kvant_engine_params p = kvant_engine_default();
    p.max_ctx = 128;
    run(&p, q, 1, got, 1);
    assert_memory_equal(got[0], want[0], sizeof want[0]);
    run(&p, q, 8, got, 1);
    for (int r = 0; r < 8; r++) assert_memory_equal(got[r], want[r], sizeof want[r]);
    /* 6 blocks of 16 tokens for 8 requests of up to ~50 tokens: preemption */
    p.block_size = 16;
    p.max_ctx = 96;
    p.kv_mem_mib = 6 * 10240 / 1048576.0 + 1e-9; /* a block: 2 x 5 layers x 16 x 32 F16 values */
    const kvant_engine_stats s = run(&p, q, 8, got, 1);
    print_message("preemptions: %d\n", s.preempted_total);
    assert_true(s.preempted_total > 0);
    for (int r = 0; r < 8; r++) assert_memory_equal(got[r], want[r], sizeof want[r]);
    /* the generated tokens never include the banned one */
    for (int r = 1; r < 8; r += 2)
        for (int i = 0; i < NG; i++) assert_int_not_equal(got[r][i], 29);
}

/* n = 3 forked samples: sample i is the plain path seeded seed + i, each
 * counting its own tokens */
static void test_forks(void **state) {
    (void)state;
    kvant_request q = {.sampling = penalized(7, NULL, 0), .max_tokens = NG, .n = 3, .ignore_eos = true};
    int32_t got[3][NG], want[NG];
    kvant_engine_params p = kvant_engine_default();
    p.max_ctx = 128;
    run(&p, &q, 1, got, 3);
    for (int i = 0; i < 3; i++) {
        kvant_sampling sp = q.sampling;
        sp.seed += (uint64_t)i;
        plain_sampled(g_m, g_prompt[0], g_np[0], NG, &sp, -1, want);
        assert_memory_equal(got[i], want, sizeof want);
    }
}

/* greedy: the penalties change the output (the model repeats itself
 * without them), -100 bans greedy's first pick, +100 forces a token; the
 * bias array is gone before the engine steps */
static void test_greedy_effects(void **state) {
    (void)state;
    kvant_engine_params p = kvant_engine_default();
    p.max_ctx = 128;
    kvant_request q = {.sampling = kvant_sampling_default(), .max_tokens = NG, .ignore_eos = true};
    q.sampling.temperature = 0;
    int32_t base[1][NG], pen[1][NG], ban[1][NG], force[1][NG];
    run(&p, &q, 1, base, 1);
    kvant_request qp = q;
    qp.sampling.frequency_penalty = 1.5f;
    qp.sampling.presence_penalty = 1.0f;
    run(&p, &qp, 1, pen, 1);
    assert_memory_not_equal(base[0], pen[0], sizeof base[0]);
    int distinct_base = 0, distinct_pen = 0;
    for (int i = 0; i < NG; i++) {
        bool b = true, c = true;
        for (int j = 0; j < i; j++) b &= base[0][j] != base[0][i], c &= pen[0][j] != pen[0][i];
        distinct_base += b, distinct_pen += c;
    }
    print_message("distinct tokens in %d greedy: %d, penalized: %d\n", NG, distinct_base, distinct_pen);
    assert_true(distinct_pen > distinct_base);
    kvant_logit_bias *lb = malloc(sizeof *lb);
    *lb = (kvant_logit_bias){base[0][0], -100.0f};
    kvant_request qb = q;
    qb.sampling.logit_bias = lb;
    qb.sampling.n_logit_bias = 1;
    kvant_status st;
    kvant_engine *e = kvant_engine_new(g_m, &p, &st);
    const int64_t id = kvant_engine_submit(e, g_prompt[0], g_np[0], &qb, &st);
    assert_true(id > 0);
    free(lb); /* copied at submit */
    kvant_event ev[8];
    int n = 0;
    for (bool fin = false; !fin;) {
        const int k = kvant_engine_step(e, ev, 8, &st);
        for (int i = 0; i < k; i++) {
            if (ev[i].token >= 0) ban[0][n++] = ev[i].token;
            fin |= ev[i].finish != KVANT_FINISH_NONE;
        }
    }
    kvant_engine_free(e);
    assert_int_equal(n, NG);
    for (int i = 0; i < NG; i++) assert_int_not_equal(ban[0][i], base[0][0]);
    kvant_logit_bias fb = {77, 100.0f};
    kvant_request qf = q;
    qf.sampling.logit_bias = &fb;
    qf.sampling.n_logit_bias = 1;
    run(&p, &qf, 1, force, 1);
    for (int i = 0; i < NG; i++) assert_int_equal(force[0][i], 77);
    /* outside the vocabulary: refused */
    fb.token = V;
    e = kvant_engine_new(g_m, &p, &st);
    assert_int_equal(kvant_engine_submit(e, g_prompt[0], g_np[0], &qf, &st), -1);
    assert_int_equal(st.code, KVANT_ERR_ARG);
    kvant_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_matches_plain),
        cmocka_unit_test(test_forks),
        cmocka_unit_test(test_greedy_effects),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
