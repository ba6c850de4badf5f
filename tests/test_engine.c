/* test_engine.c - the serving engine (sched/, api/engine.c) and the batched
 * forward pass under it, on stories260K:
 *  - model_forward_batch: each segment's logits equal the same tokens run
 *    alone, bit for bit (see test_batch_forward for why exact);
 *  - the same greedy request gives the same tokens alone, among 4, 16 and 64
 *    concurrent requests, under forced preemption (a tiny pool), and as the
 *    plain kvant_seq path gives them;
 *  - cancellation frees blocks at once; n > 1 samples share the prompt's
 *    blocks; a prefix-cache hit is counted and changes nothing; logprobs;
 *    errors (empty prompt, too long, bad token, queue full);
 *  - a second thread submitting while the loop steps and waits. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "api/api.h"
#include "kernels/types.h"
#include "kvant.h"
#include "model/model.h"
#include "sched/sched.h"

#define NREQ 64
#define MAXP 80
#define MAXG 48

static kvant_model *g_m;
static int V;
/* the requests: prompt lengths 1..MAXP, generated lengths 8..MAXG */
static int32_t g_prompt[NREQ][MAXP];
static int g_np[NREQ], g_ng[NREQ];
static int32_t g_ref[NREQ][MAXG]; /* greedy tokens through kvant_seq */

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* the plain single-sequence path: prefill, then argmax token by token */
static void greedy_seq(const int32_t *prompt, int np, int ng, int32_t *out) {
    kvant_status st;
    kvant_seq *s = kvant_seq_new(g_m, 512, &st);
    assert_non_null(s);
    float *lg = malloc(sizeof(float) * V);
    assert_int_equal(kvant_forward(s, prompt, np, lg, false, &st), KVANT_OK);
    for (int i = 0; i < ng; i++) {
        out[i] = argmax(lg, V);
        if (i + 1 < ng) assert_int_equal(kvant_forward(s, &out[i], 1, lg, false, &st), KVANT_OK);
    }
    free(lg);
    kvant_seq_free(s);
}

static int setup(void **state) {
    kvant_status st;
    kvant_model_params mp = {.n_threads = 1}; /* tiny model: threads would only spin */
    g_m = kvant_model_open(shared_path("models/stories260K.gguf"), &mp, &st);
    if (!g_m) fail_msg("open: %s", st.msg);
    kvant_model_info in;
    kvant_model_get_info(g_m, &in);
    V = in.vocab_size;
    /* real text for the first prompts (so the model says something sensible),
     * random tokens for the rest; a few share a long prefix */
    const char *texts[] = {"Once upon a time", "Lily and Ben went to the park. They saw a big dog.",
                           "The little bird", "One day, a girl named Sue found a box"};
    for (int r = 0; r < NREQ; r++) {
        if (r < 4) {
            g_np[r] = kvant_tokenize(g_m, texts[r], strlen(texts[r]), true, g_prompt[r], MAXP);
            assert_true(g_np[r] > 0);
        } else {
            g_np[r] = 1 + (int)(rnd() % MAXP);
            g_prompt[r][0] = 1;
            for (int i = 1; i < g_np[r]; i++) g_prompt[r][i] = 3 + (int32_t)(rnd() % (uint32_t)(V - 3));
            if (r % 8 == 5 && g_np[r] > 40) memcpy(g_prompt[r], g_prompt[4], 40 * sizeof(int32_t));
        }
        g_ng[r] = 8 + (int)(rnd() % (MAXG - 7));
        greedy_seq(g_prompt[r], g_np[r], g_ng[r], g_ref[r]);
    }
    (void)state;
    return 0;
}

static int teardown(void **state) {
    kvant_model_free(g_m);
    (void)state;
    return 0;
}

/* ---- the batched forward pass ------------------------------------------------ */

/* Five sequences at different positions in one batch (three decode tokens,
 * a prompt chunk continuing a cache, a fresh prompt) give the same logits
 * as each run alone (one of them with its prompt in two chunks).  Tolerance 0: every row of a matmul gets the bits vec_dot
 * gives it whatever the batch (kernels/matmul.c), RMSNorm/RoPE are per row,
 * and a row's attention reads only its own cache through the same kernel in
 * the same order (attn_flash.c: a row's result does not depend on the rows
 * beside it, tiles start at fixed positions and past-causal scores are exact
 * zeros).  So any difference is a bug, not rounding. */
#define NS 5
static void test_batch_forward(void **state) {
    (void)state;
    kvant_status st;
    kvant_model_params mp = {.n_threads = 2}; /* 2 threads: decode segments are spread over them */
    kvant_model *km = kvant_model_open(shared_path("models/stories260K.gguf"), &mp, &st);
    assert_non_null(km);
    const model *m = km->m;
    const int pre[NS] = {20, 7, 0, 33, 5};   /* tokens already cached */
    const int n[NS] = {1, 13, 30, 1, 1};     /* tokens in the batch */
    const model_logits want[NS] = {MODEL_LOGITS_LAST, MODEL_LOGITS_ALL, MODEL_LOGITS_LAST, MODEL_LOGITS_LAST,
                                   MODEL_LOGITS_NONE};
    kv_store *kv_b[NS], *kv_a[NS];
    model_work *w = model_work_new(m, 64, 128, MODEL_ATTN_FLASH, &st);
    assert_non_null(w);
    model_segment seg[NS];
    int rows = 0;
    for (int s = 0; s < NS; s++) {
        kv_b[s] = kv_contiguous_new(m->cfg.n_layers, 128, m->cfg.n_kv_heads * m->cfg.head_dim, KT_F32, &st);
        kv_a[s] = kv_contiguous_new(m->cfg.n_layers, 128, m->cfg.n_kv_heads * m->cfg.head_dim, KT_F32, &st);
        assert_non_null(kv_b[s]);
        assert_non_null(kv_a[s]);
        const int32_t *toks = g_prompt[10 + s];
        if (pre[s]) {
            assert_int_equal(model_forward(m, w, kv_b[s], g_prompt[20 + s], pre[s], NULL, false, &st), KVANT_OK);
            assert_int_equal(model_forward(m, w, kv_a[s], g_prompt[20 + s], pre[s], NULL, false, &st), KVANT_OK);
        }
        seg[s] = (model_segment){kv_b[s], toks, n[s], want[s]};
        rows += want[s] == MODEL_LOGITS_ALL ? n[s] : want[s] == MODEL_LOGITS_LAST;
    }
    assert_int_equal(model_batch_logit_rows(seg, NS), rows);
    float *lb = calloc((size_t)rows * V, sizeof(float));
    float *la = calloc((size_t)30 * V, sizeof(float));
    assert_int_equal(model_forward_batch(m, w, seg, NS, lb, &st), KVANT_OK);
    int row = 0;
    for (int s = 0; s < NS; s++) {
        assert_int_equal(kv_b[s]->n_pos, pre[s] + n[s]);
        const bool all = want[s] == MODEL_LOGITS_ALL;
        /* alone, and in two chunks for the ALL segment (chunking is batching too) */
        if (all) {
            assert_int_equal(model_forward(m, w, kv_a[s], seg[s].tokens, 5, la, true, &st), KVANT_OK);
            assert_int_equal(model_forward(m, w, kv_a[s], seg[s].tokens + 5, n[s] - 5, la + (size_t)5 * V, true, &st),
                             KVANT_OK);
        } else {
            assert_int_equal(model_forward(m, w, kv_a[s], seg[s].tokens, n[s], la, false, &st), KVANT_OK);
        }
        const int nr = all ? n[s] : want[s] == MODEL_LOGITS_LAST;
        for (size_t i = 0; i < (size_t)nr * V; i++)
            if (la[i] != lb[(size_t)row * V + i])
                fail_msg("segment %d row %d logit %d: batched %g alone %g", s, (int)(i / V), (int)(i % V),
                         lb[(size_t)row * V + i], la[i]);
        row += nr;
    }
    /* bad batches are refused before anything is computed */
    model_segment dup[2] = {{kv_b[0], g_prompt[0], 1, MODEL_LOGITS_NONE}, {kv_b[0], g_prompt[0], 1, MODEL_LOGITS_NONE}};
    assert_int_equal(model_forward_batch(m, w, dup, 2, NULL, &st), KVANT_ERR_ARG);
    model_segment big = {kv_b[1], g_prompt[0], 65, MODEL_LOGITS_NONE};
    int32_t many[65] = {0};
    big.tokens = many;
    assert_int_equal(model_forward_batch(m, w, &big, 1, NULL, &st), KVANT_ERR_ARG);
    assert_int_equal(kv_b[1]->n_pos, pre[1] + n[1]);
    for (int s = 0; s < NS; s++) kv_free(kv_b[s]), kv_free(kv_a[s]);
    model_work_free(w);
    kvant_model_free(km);
    free(lb);
    free(la);
}

/* ---- engine helpers -------------------------------------------------------------- */

typedef struct {
    int64_t id;
    int n_tok;
    int32_t tok[MAXG + 1];
    kvant_finish fin;
    int n_cached;
} result;

static kvant_request greedy_req(int max_tokens) {
    kvant_request r = {0};
    r.sampling = kvant_sampling_default();
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
}

/* steps until every request in res[0..n) finished (one sample each) */
static void drive(kvant_engine *e, result *res, int n) {
    kvant_event ev[256];
    kvant_status st;
    int open = n;
    for (int guard = 0; open > 0; guard++) {
        assert_true(guard < 100000);
        const int k = kvant_engine_step(e, ev, 256, &st);
        if (k < 0) fail_msg("step: %s", st.msg);
        for (int i = 0; i < k; i++) {
            int r = 0;
            while (r < n && res[r].id != ev[i].id) r++;
            assert_true(r < n);
            assert_int_equal(ev[i].index, 0);
            assert_int_equal(res[r].fin, KVANT_FINISH_NONE);
            if (ev[i].token >= 0) {
                assert_true(res[r].n_tok < MAXG);
                res[r].tok[res[r].n_tok++] = ev[i].token;
                assert_int_equal(ev[i].n_generated, res[r].n_tok);
            }
            res[r].n_cached = ev[i].n_cached;
            if (ev[i].finish) res[r].fin = ev[i].finish, open--;
        }
    }
}

static void check_same(const result *res, int r) {
    assert_int_equal(res->fin, KVANT_FINISH_LENGTH);
    assert_int_equal(res->n_tok, g_ng[r]);
    for (int i = 0; i < g_ng[r]; i++)
        if (res->tok[i] != g_ref[r][i])
            fail_msg("request %d token %d: engine %d, alone %d", r, i, res->tok[i], g_ref[r][i]);
}

/* requests 0..n-1 submitted at once (or one per step when staggered) */
static kvant_engine_stats run_set(kvant_engine_params p, int n, bool staggered) {
    kvant_status st;
    kvant_engine *e = kvant_engine_new(g_m, &p, &st);
    if (!e) fail_msg("engine: %s", st.msg);
    result *res = calloc((size_t)n, sizeof *res);
    if (!staggered) {
        for (int r = 0; r < n; r++) {
            kvant_request q = greedy_req(g_ng[r]);
            res[r].id = kvant_engine_submit(e, g_prompt[r], g_np[r], &q, &st);
            if (res[r].id <= 0) fail_msg("submit %d: %s", r, st.msg);
        }
        drive(e, res, n);
    } else {
        /* a new request joins every other step while the others run */
        kvant_event ev[256];
        int next = 0, open = n;
        for (int guard = 0; open > 0; guard++) {
            assert_true(guard < 100000);
            if (next < n && guard % 2 == 0) {
                kvant_request q = greedy_req(g_ng[next]);
                res[next].id = kvant_engine_submit(e, g_prompt[next], g_np[next], &q, &st);
                assert_true(res[next].id > 0);
                next++;
            }
            const int k = kvant_engine_step(e, ev, 256, &st);
            assert_true(k >= 0);
            for (int i = 0; i < k; i++) {
                int r = 0;
                while (r < next && res[r].id != ev[i].id) r++;
                assert_true(r < next);
                if (ev[i].token >= 0) res[r].tok[res[r].n_tok++] = ev[i].token;
                if (ev[i].finish) res[r].fin = ev[i].finish, open--;
            }
        }
    }
    for (int r = 0; r < n; r++) check_same(&res[r], r);
    kvant_engine_stats s;
    kvant_engine_get_stats(e, &s);
    assert_int_equal(s.running, 0);
    assert_int_equal(s.waiting, 0);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.blocks_used + s.blocks_free + s.blocks_cached, s.blocks_total);
    free(res);
    kvant_engine_free(e);
    return s;
}

static kvant_engine_params small_params(void) {
    kvant_engine_params p = kvant_engine_default();
    p.max_ctx = 256;
    p.max_batch_tokens = 96; /* prompts up to 80 tokens: chunked when several arrive */
    return p;
}

/* ---- engine tests -------------------------------------------------------------------- */

static void test_alone_equals_seq_path(void **state) {
    (void)state;
    for (int r = 0; r < 8; r++) {
        kvant_status st;
        kvant_engine_params p = small_params();
        kvant_engine *e = kvant_engine_new(g_m, &p, &st);
        assert_non_null(e);
        result res = {0};
        kvant_request q = greedy_req(g_ng[r]);
        res.id = kvant_engine_submit(e, g_prompt[r], g_np[r], &q, &st);
        assert_true(res.id > 0);
        drive(e, &res, 1);
        check_same(&res, r);
        kvant_engine_free(e);
    }
}

static void test_concurrent_1_4_16_64(void **state) {
    (void)state;
    const int ns[4] = {1, 4, 16, 64};
    for (int i = 0; i < 4; i++) {
        kvant_engine_stats s = run_set(small_params(), ns[i], false);
        assert_int_equal(s.preempted_total, 0);
        if (ns[i] >= 16) assert_true(s.last_batch_tokens >= 1);
    }
    /* requests joining while others decode, and no prefix cache */
    kvant_engine_params p = small_params();
    p.prefix_cache = false;
    run_set(p, 16, true);
    /* the budget as small as the sequence count: long prompts in many chunks */
    p = small_params();
    p.max_seqs = 16;
    p.max_batch_tokens = 16;
    run_set(p, 16, false);
    /* adaptive prompt chunks (whatever sizes the clock picks, the tokens are
     * the same; the budget stays within [16, max_batch_tokens]) */
    p = small_params();
    p.target_step_ms = 0.05;
    kvant_engine_stats s = run_set(p, 16, true);
    assert_in_range(s.chunk_budget, 16, 96);
}

/* The chunk-budget rule against a machine whose step costs d + c * chunk
 * (+ attention growing with the prompt's progress): from 64 it settles
 * within a few steps near SCHED_AIM x target and no step past the first
 * two exceeds the target; it moves at most x2 or /2 a step; and it stays in
 * [16, max] (decode alone over the target, unknown decode time). */
static double step_cost(double d, double c, double grow, int done, int chunk) {
    return d + c * chunk * (1.0 + grow * (done + chunk / 2.0) / 2000.0);
}
static void test_chunk_budget_rule(void **state) {
    (void)state;
    const double ds[] = {5, 17, 60}, cs[] = {0.05, 0.5, 2.0}, grows[] = {0, 0.5};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int g = 0; g < 2; g++) {
                const double d = ds[a], c = cs[b], target = 150;
                int budget = 64, done = 0;
                for (int step = 0; step < 40 && done < 2000; step++) {
                    const int chunk = budget < 2000 - done ? budget : 2000 - done;
                    const double ms = step_cost(d, c, grows[g], done, chunk);
                    if (step >= 2 && chunk == budget && budget > 16 && budget < 4096)
                        if (ms > target) fail_msg("d=%g c=%g grow=%g step %d: %.1f ms > target", d, c, grows[g], step, ms);
                    const int nb = sched_next_chunk_budget(budget, chunk, ms, d, target, 4096);
                    assert_true(nb <= 2 * budget && nb >= budget / 2 - 1);
                    assert_in_range(nb, 16, 4096);
                    budget = nb;
                    done += chunk;
                }
                /* linear cost: settled at SCHED_AIM * target within a few percent */
                if (grows[g] == 0 && (SCHED_AIM * target - d) / c >= 32 && (SCHED_AIM * target - d) / c <= 2048) {
                    const double ms = step_cost(d, c, 0, 0, budget);
                    assert_true(fabs(ms - SCHED_AIM * target) <= 0.05 * target);
                }
            }
    /* a step over the target shrinks the budget, at most by half */
    assert_int_equal(sched_next_chunk_budget(256, 256, 600, 0, 150, 512), 128);
    assert_int_equal(sched_next_chunk_budget(20, 20, 1000, 0, 150, 512), 16);
    assert_int_equal(sched_next_chunk_budget(400, 400, 10, 5, 150, 512), 512);
}

static void test_preemption(void **state) {
    (void)state;
    /* 12 blocks of 16 tokens for 16 requests of up to 128 tokens each */
    kvant_engine_params p = small_params();
    p.block_size = 16;
    p.max_ctx = 192;
    p.kv_mem_mib = 0.0001; /* below one block: refused */
    kvant_status st;
    assert_null(kvant_engine_new(g_m, &p, &st));
    /* a block is 2 * 5 layers * 16 * 32 F16 values (the default KV type) = 10240 bytes */
    p.kv_mem_mib = 12 * 10240 / 1048576.0 + 1e-9;
    kvant_engine_stats s = run_set(p, 16, false);
    assert_int_equal(s.blocks_total, 12);
    assert_true(s.preempted_total > 0);
    print_message("preemption: %d preemptions, %lld steps\n", s.preempted_total, (long long)s.steps);
    p.prefix_cache = false;
    s = run_set(p, 16, true);
    assert_true(s.preempted_total > 0);

    /* a pool that holds exactly one whole sequence, and n = 3 samples of it:
     * the samples take turns (preempting each other) and all finish */
    kvant_engine *e = kvant_engine_new(g_m, &p, &st);
    assert_non_null(e);
    int32_t prompt[176];
    for (int i = 0; i < 176; i++) prompt[i] = g_prompt[4][i % MAXP];
    kvant_request q = greedy_req(16); /* 192 tokens = 12 blocks; the prompt's 11 + 3 > 12 */
    q.sampling.temperature = 1.0f;
    q.n = 3;
    const int64_t id = kvant_engine_submit(e, prompt, 176, &q, &st);
    assert_true(id > 0);
    kvant_event ev[16];
    int fin = 0, toks[3] = {0};
    for (int guard = 0; fin < 3; guard++) {
        assert_true(guard < 5000);
        const int k = kvant_engine_step(e, ev, 16, &st);
        assert_true(k >= 0);
        for (int i = 0; i < k; i++) {
            if (ev[i].token >= 0) toks[ev[i].index]++;
            if (ev[i].finish) {
                assert_int_equal(ev[i].finish, KVANT_FINISH_LENGTH);
                fin++;
            }
        }
    }
    for (int j = 0; j < 3; j++) assert_int_equal(toks[j], 16);
    kvant_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 0);
    kvant_engine_free(e);
}

static void test_cancel_frees_blocks(void **state) {
    (void)state;
    kvant_status st;
    kvant_engine_params p = small_params();
    p.prefix_cache = false;
    kvant_engine *e = kvant_engine_new(g_m, &p, &st);
    int64_t id[4];
    for (int r = 0; r < 4; r++) {
        kvant_request q = greedy_req(40);
        id[r] = kvant_engine_submit(e, g_prompt[40 + r], g_np[40 + r], &q, &st);
        assert_true(id[r] > 0);
    }
    kvant_event ev[64];
    for (int i = 0; i < 3; i++) assert_true(kvant_engine_step(e, ev, 64, &st) >= 0);
    kvant_engine_stats a, b;
    kvant_engine_get_stats(e, &a);
    assert_int_equal(a.running, 4);
    assert_true(a.blocks_used > 0);
    kvant_engine_cancel(e, id[1]);
    kvant_engine_cancel(e, 12345); /* unknown: no-op */
    kvant_engine_get_stats(e, &b);
    assert_int_equal(b.running, 3);
    assert_true(b.blocks_used < a.blocks_used);
    assert_int_equal(b.blocks_used + b.blocks_free + b.blocks_cached, b.blocks_total);
    /* the cancellation is reported, once */
    int k = kvant_engine_step(e, ev, 64, &st), seen = 0;
    for (int i = 0; i < k; i++)
        if (ev[i].id == id[1]) {
            assert_int_equal(ev[i].finish, KVANT_FINISH_CANCELLED);
            assert_int_equal(ev[i].token, -1);
            seen++;
        }
    assert_int_equal(seen, 1);
    /* cancel everything, including a request still waiting */
    kvant_request q = greedy_req(10);
    const int64_t late = kvant_engine_submit(e, g_prompt[0], g_np[0], &q, &st);
    for (int r = 0; r < 4; r++) kvant_engine_cancel(e, id[r]);
    kvant_engine_cancel(e, late);
    kvant_engine_get_stats(e, &b);
    assert_int_equal(b.running + b.waiting, 0);
    assert_int_equal(b.blocks_used, 0);
    k = kvant_engine_step(e, ev, 64, &st);
    assert_int_equal(k, 4); /* id[0], id[2], id[3], late */
    for (int i = 0; i < k; i++) assert_int_equal(ev[i].finish, KVANT_FINISH_CANCELLED);
    assert_false(kvant_engine_wait(e, 1));
    kvant_engine_free(e);
}

static void test_n_samples_share_prompt(void **state) {
    (void)state;
    kvant_status st;
    kvant_engine_params p = small_params();
    p.prefix_cache = false;
    kvant_engine *e = kvant_engine_new(g_m, &p, &st);
    int32_t prompt[64];
    memcpy(prompt, g_prompt[4], sizeof prompt);
    for (int i = g_np[4]; i < 64; i++) prompt[i] = 5 + i;
    kvant_request q = greedy_req(30);
    q.sampling.temperature = 1.0f;
    q.sampling.top_k = 0;
    q.sampling.top_p = 1.0f;
    q.sampling.min_p = 0;
    q.sampling.seed = 7;
    q.n = 4;
    const int64_t id = kvant_engine_submit(e, prompt, 64, &q, &st);
    assert_true(id > 0);
    int32_t toks[4][30];
    int nt[4] = {0}, fin = 0, max_used = 0;
    kvant_event ev[64];
    while (fin < 4) {
        const int k = kvant_engine_step(e, ev, 64, &st);
        assert_true(k >= 0);
        kvant_engine_stats s;
        kvant_engine_get_stats(e, &s);
        if (s.blocks_used > max_used) max_used = (int)s.blocks_used;
        for (int i = 0; i < k; i++) {
            assert_int_equal(ev[i].id, id);
            assert_in_range(ev[i].index, 0, 3);
            if (ev[i].token >= 0) toks[ev[i].index][nt[ev[i].index]++] = ev[i].token;
            if (ev[i].finish) fin++;
        }
    }
    for (int j = 0; j < 4; j++) assert_int_equal(nt[j], 30);
    /* 64 prompt tokens = 4 blocks, shared; each sample adds 30 tokens = 2
     * blocks of its own.  Unshared it would be 4 * 6 = 24. */
    assert_true(max_used <= 4 + 4 * 2);
    /* the samples differ (temperature 1 over 512 tokens, 30 draws) */
    assert_true(memcmp(toks[0], toks[1], sizeof toks[0]) || memcmp(toks[2], toks[3], sizeof toks[0]));
    /* sample 0 equals the same request with n = 1 (same seed) */
    q.n = 1;
    const int64_t id1 = kvant_engine_submit(e, prompt, 64, &q, &st);
    int n1 = 0;
    for (bool done = false; !done;) {
        const int k = kvant_engine_step(e, ev, 64, &st);
        for (int i = 0; i < k; i++) {
            assert_int_equal(ev[i].id, id1);
            if (ev[i].token >= 0) assert_int_equal(ev[i].token, toks[0][n1++]);
            done = done || ev[i].finish;
        }
    }
    assert_int_equal(n1, 30);
    kvant_engine_free(e);
}

static void test_prefix_cache_hit(void **state) {
    (void)state;
    kvant_status st;
    kvant_engine *e = kvant_engine_new(g_m, &(kvant_engine_params){.max_ctx = 256, .prefix_cache = true}, &st);
    assert_non_null(e);
    int r = 4;
    while (g_np[r] < 40) r++;
    result a = {0}, b = {0};
    kvant_request q = greedy_req(g_ng[r]);
    a.id = kvant_engine_submit(e, g_prompt[r], g_np[r], &q, &st);
    drive(e, &a, 1);
    check_same(&a, r);
    assert_int_equal(a.n_cached, 0);
    b.id = kvant_engine_submit(e, g_prompt[r], g_np[r], &q, &st);
    drive(e, &b, 1);
    check_same(&b, r);
    assert_int_equal(b.n_cached, (g_np[r] - 1) / 16 * 16);
    kvant_engine_stats s;
    kvant_engine_get_stats(e, &s);
    assert_int_equal(s.prefix_hit_tokens, b.n_cached);
    assert_true(s.blocks_cached > 0);
    kvant_engine_free(e);
}

static void test_logprobs(void **state) {
    (void)state;
    kvant_status st;
    kvant_engine *e = kvant_engine_new(g_m, NULL, &st);
    kvant_request q = greedy_req(5);
    q.logprobs = 3;
    const int64_t id = kvant_engine_submit(e, g_prompt[0], g_np[0], &q, &st);
    assert_true(id > 0);
    kvant_event ev[8];
    int got = 0;
    for (bool done = false; !done;) {
        const int k = kvant_engine_step(e, ev, 8, &st);
        for (int i = 0; i < k; i++) {
            const kvant_event *x = &ev[i];
            assert_int_equal(x->n_top, 3);
            assert_int_equal(x->top_tokens[0], x->token); /* greedy: the most likely */
            assert_true(x->logprob <= 0 && x->logprob > -30);
            assert_true(x->logprob == x->top_logprobs[0]);
            assert_true(x->top_logprobs[0] >= x->top_logprobs[1] && x->top_logprobs[1] >= x->top_logprobs[2]);
            assert_true(expf(x->top_logprobs[0]) + expf(x->top_logprobs[1]) + expf(x->top_logprobs[2]) <= 1.0001f);
            assert_int_equal(x->token, g_ref[0][got++]);
            done = done || x->finish;
        }
    }
    kvant_engine_free(e);
}

/* Sampling (temperature 1, a seed) in the engine gives what a kvant_sampler
 * with the same settings gives on the plain path; without ignore_eos a
 * sample stops at the end-of-sequence token, which is not reported (finish
 * EOS, token -1) - stories260K ends its stories with BOS and practically
 * never samples EOS, so that branch is checked only if a seed meets it. */
static void test_sampling_and_eos(void **state) {
    (void)state;
    enum { N = 200 };
    int32_t ref[N];
    kvant_request q = greedy_req(N);
    q.ignore_eos = false;
    q.sampling.temperature = 1.0f;
    q.sampling.top_k = 0;
    q.sampling.top_p = 1.0f;
    q.sampling.min_p = 0;
    q.sampling.repeat_penalty = 1.1f;
    int want = N, eos_runs = 0;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        q.sampling.seed = seed;
        want = plain_sampled(g_m, g_prompt[0], g_np[0], N, &q.sampling, 2 /* EOS of stories260K */, ref);
        kvant_status st;
        kvant_engine *e = kvant_engine_new(g_m, &(kvant_engine_params){.max_ctx = 512}, &st);
        /* a neighbour request so the step batches two sequences */
        kvant_request other = greedy_req(N);
        assert_true(kvant_engine_submit(e, g_prompt[1], g_np[1], &other, &st) > 0);
        const int64_t id = kvant_engine_submit(e, g_prompt[0], g_np[0], &q, &st);
        assert_true(id > 0);
        kvant_event ev[8];
        int got = 0;
        kvant_finish fin = KVANT_FINISH_NONE;
        while (!fin) {
            const int k = kvant_engine_step(e, ev, 8, &st);
            for (int i = 0; i < k; i++) {
                if (ev[i].id != id) continue;
                if (ev[i].token >= 0) assert_int_equal(ev[i].token, ref[got++]);
                fin = ev[i].finish;
                if (fin == KVANT_FINISH_EOS) assert_int_equal(ev[i].token, -1);
            }
        }
        assert_int_equal(got, want);
        assert_int_equal(fin, want < N ? KVANT_FINISH_EOS : KVANT_FINISH_LENGTH);
        kvant_engine_free(e);
        eos_runs += want < N;
    }
    print_message("sampling: %d runs ended at EOS\n", eos_runs);
}

static void test_errors(void **state) {
    (void)state;
    kvant_status st;
    kvant_engine_params p = small_params();
    p.max_waiting = 2;
    kvant_engine *e = kvant_engine_new(g_m, &p, &st);
    kvant_request q = greedy_req(10);
    assert_int_equal(kvant_engine_submit(e, g_prompt[0], 0, &q, &st), -1);
    assert_int_equal(st.code, KVANT_ERR_ARG);
    q.max_tokens = 250;
    assert_int_equal(kvant_engine_submit(e, g_prompt[0], 10, &q, &st), -1); /* 10 + 250 > 256 */
    assert_int_equal(st.code, KVANT_ERR_ARG);
    q.max_tokens = 0;
    assert_int_equal(kvant_engine_submit(e, g_prompt[0], 10, &q, &st), -1);
    q.max_tokens = 10;
    const int32_t bad[2] = {1, 512};
    assert_int_equal(kvant_engine_submit(e, bad, 2, &q, &st), -1);
    assert_int_equal(st.code, KVANT_ERR_ARG);
    q.n = 65;
    assert_int_equal(kvant_engine_submit(e, g_prompt[0], 10, &q, &st), -1);
    q.n = 1;
    q.logprobs = KVANT_MAX_LOGPROBS + 1;
    assert_int_equal(kvant_engine_submit(e, g_prompt[0], 10, &q, &st), -1);
    q.logprobs = 0;
    assert_true(kvant_engine_submit(e, g_prompt[0], 10, &q, &st) > 0);
    assert_true(kvant_engine_submit(e, g_prompt[1], 10, &q, &st) > 0);
    assert_int_equal(kvant_engine_submit(e, g_prompt[2], 10, &q, &st), -1);
    assert_int_equal(st.code, KVANT_ERR_FULL);
    /* admission makes room in the queue */
    kvant_event ev[16];
    assert_true(kvant_engine_step(e, ev, 16, &st) >= 0);
    assert_true(kvant_engine_submit(e, g_prompt[2], 10, &q, &st) > 0);
    kvant_engine_free(e); /* with requests in flight */
    p.kv_type = (kvant_kv_type)99; /* no such KV type */
    assert_null(kvant_engine_new(g_m, &p, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
}

/* a client thread submits while the loop thread steps and waits */
typedef struct {
    kvant_engine *e;
    int64_t ids[8];
} client;

static void *client_main(void *arg) {
    client *c = arg;
    kvant_status st;
    for (int r = 0; r < 8; r++) {
        kvant_request q = greedy_req(g_ng[r]);
        c->ids[r] = kvant_engine_submit(c->e, g_prompt[r], g_np[r], &q, &st);
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    kvant_status st;
    kvant_engine_params p = small_params();
    client c = {kvant_engine_new(g_m, &p, &st), {0}};
    assert_false(kvant_engine_wait(c.e, 5)); /* idle: times out */
    pthread_t th;
    pthread_create(&th, NULL, client_main, &c);
    result res[8];
    memset(res, 0, sizeof res);
    int fin = 0;
    kvant_event ev[64];
    while (fin < 8) {
        if (!kvant_engine_wait(c.e, 2000)) break;
        const int k = kvant_engine_step(c.e, ev, 64, &st);
        assert_true(k >= 0);
        for (int i = 0; i < k; i++) {
            const int r = (int)ev[i].id - 1; /* ids are 1, 2, ... in submit order */
            assert_in_range(r, 0, 7);
            if (ev[i].token >= 0) res[r].tok[res[r].n_tok++] = ev[i].token;
            if (ev[i].finish) res[r].fin = ev[i].finish, fin++;
        }
    }
    pthread_join(th, NULL);
    assert_int_equal(fin, 8);
    for (int r = 0; r < 8; r++) {
        assert_int_equal(c.ids[r], r + 1);
        check_same(&res[r], r);
    }
    kvant_engine_free(c.e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_forward),
        cmocka_unit_test(test_alone_equals_seq_path),
        cmocka_unit_test(test_concurrent_1_4_16_64),
        cmocka_unit_test(test_chunk_budget_rule),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_cancel_frees_blocks),
        cmocka_unit_test(test_n_samples_share_prompt),
        cmocka_unit_test(test_prefix_cache_hit),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_sampling_and_eos),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
