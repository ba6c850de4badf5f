/* test_sample.c - the sampling chain: greedy, seeds, top-k, top-p, min-p,
 * temperature, repetition penalty, presence / frequency penalties, logit
 * bias; draw frequencies against the exact probabilities; the bias and
 * penalties against a hand computation and against the reference path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kvant.h"
#include "sample/sample.h"

static sample_params P(float temp, int k, float p, float minp, uint64_t seed) {
    return (sample_params){temp, k, p, minp, 1.0f, 64, seed};
}

static void test_greedy(void **state) {
    (void)state;
    float l[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
    sample_params p = P(0, 0, 1, 0, 1);
    sampler *s = sampler_new(&p, 5, NULL);
    assert_int_equal(sampler_sample(s, l), 1); /* tie: lowest id */
    sampler_free(s);
}

/* counts draws over n trials from logits log(probs) */
static void draw(const sample_params *p, const float *probs, int V, int n, int *counts) {
    sampler *s = sampler_new(p, V, NULL);
    assert_non_null(s);
    float l[16];
    memset(counts, 0, sizeof(int) * V);
    for (int i = 0; i < n; i++) {
        for (int v = 0; v < V; v++) l[v] = logf(probs[v]);
        counts[sampler_sample(s, l)]++;
    }
    sampler_free(s);
}

/* With n = 40000 draws, a frequency's standard deviation is at most
 * sqrt(0.25 / n) = 0.0025; 0.015 is 6 sigma (and the seed is fixed). */
static void test_frequencies(void **state) {
    (void)state;
    const float probs[4] = {0.5f, 0.3f, 0.15f, 0.05f};
    int c[4];
    const int n = 40000;
    sample_params p = P(1, 0, 1, 0, 42);
    draw(&p, probs, 4, n, c);
    for (int v = 0; v < 4; v++) assert_float_equal((float)c[v] / n, probs[v], 0.015f);

    /* top-k 2: renormalized over {0, 1}: 0.625, 0.375 */
    p = P(1, 2, 1, 0, 7);
    draw(&p, probs, 4, n, c);
    assert_int_equal(c[2] + c[3], 0);
    assert_float_equal((float)c[0] / n, 0.625f, 0.015f);

    /* top-p 0.75: smallest prefix with mass >= 0.75 is {0, 1} */
    p = P(1, 0, 0.75f, 0, 9);
    draw(&p, probs, 4, n, c);
    assert_int_equal(c[2] + c[3], 0);
    assert_true(c[1] > 0);

    /* min-p 0.25: keep p >= 0.125 -> {0, 1, 2} */
    p = P(1, 0, 1, 0.25f, 11);
    draw(&p, probs, 4, n, c);
    assert_int_equal(c[3], 0);
    assert_true(c[2] > 0);
    assert_float_equal((float)c[2] / n, 0.15f / 0.95f, 0.015f);

    /* temperature 0.5 squares the odds: p ~ probs^2 */
    p = P(0.5f, 0, 1, 0, 13);
    draw(&p, probs, 4, n, c);
    const float z = 0.25f + 0.09f + 0.0225f + 0.0025f;
    assert_float_equal((float)c[0] / n, 0.25f / z, 0.015f);
    assert_float_equal((float)c[1] / n, 0.09f / z, 0.015f);
}

static void test_seed_reproducible(void **state) {
    (void)state;
    const float probs[8] = {0.2f, 0.2f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f};
    int seq[3][64];
    const uint64_t seeds[3] = {5, 5, 6};
    for (int r = 0; r < 3; r++) {
        sample_params p = P(1, 0, 1, 0, seeds[r]);
        sampler *s = sampler_new(&p, 8, NULL);
        for (int i = 0; i < 64; i++) {
            float l[8];
            for (int v = 0; v < 8; v++) l[v] = logf(probs[v]);
            seq[r][i] = sampler_sample(s, l);
        }
        sampler_free(s);
    }
    assert_memory_equal(seq[0], seq[1], sizeof seq[0]);
    assert_memory_not_equal(seq[0], seq[2], sizeof seq[0]);
}

static void test_repeat_penalty(void **state) {
    (void)state;
    sample_params p = P(0, 0, 1, 0, 1);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    sampler *s = sampler_new(&p, 4, NULL);
    float l[4] = {3.0f, 2.0f, -1.0f, 2.5f};
    sampler_accept(s, 0);
    sampler_accept(s, 2);
    sampler_accept(s, 2); /* window of 2: history {2, 2}; token 0 has left it */
    assert_int_equal(sampler_sample(s, l), 0);
    assert_float_equal(l[0], 3.0f, 0);
    assert_float_equal(l[2], -2.0f, 0); /* negative: multiplied, once */
    sampler_accept(s, 0);
    float m[4] = {3.0f, 2.0f, -1.0f, 2.5f};
    assert_int_equal(sampler_sample(s, m), 3); /* 3 / 2 = 1.5 < 2.5 */
    assert_float_equal(m[0], 1.5f, 0);
    sampler_free(s);
}

/* ---- a real vocabulary: the support against the chain written plainly ----------- */
enum { BV = 32000 };
static uint64_t g_rng = 12345;
static float rnd(void) { return sample_rng_float(&g_rng); }
typedef struct { float l; int id; } lc;
static int lc_desc(const void *a, const void *b) {
    const lc *x = a, *y = b;
    if (x->l != y->l) return x->l < y->l ? 1 : -1;
    return x->id - y->id;
}
static int int_asc(const void *a, const void *b) { return *(const int32_t *)a - *(const int32_t *)b; }

/* sort everything, top-k, top-p over what is left (double exps), min-p on
 * the prefix; ids ascending into out; *p_edge: the cumulative probability
 * where top-p stopped minus top_p (how close the cut was) */
static int plain_support(const float *l, const sample_params *p, int32_t *out, double *p_edge) {
    static lc c[BV];
    for (int i = 0; i < BV; i++) c[i] = (lc){l[i], i};
    qsort(c, BV, sizeof *c, lc_desc);
    int n = p->top_k > 0 && p->top_k < BV ? p->top_k : BV;
    *p_edge = 1;
    if (p->top_p < 1) {
        double sum = 0, cum = 0;
        for (int i = 0; i < n; i++) sum += exp((double)c[i].l - c[0].l);
        for (int i = 0; i < n; i++) {
            cum += exp((double)c[i].l - c[0].l) / sum;
            if (cum >= p->top_p) {
                *p_edge = fmin(cum - p->top_p, p->top_p - (cum - exp((double)c[i].l - c[0].l) / sum));
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0) {
        int keep = 1;
        while (keep < n && c[keep].l >= (float)(c[0].l + log((double)p->min_p))) keep++;
        n = keep;
    }
    for (int i = 0; i < n; i++) out[i] = c[i].id;
    qsort(out, (size_t)n, sizeof *out, int_asc);
    return n;
}

static void test_support_large_vocab(void **state) {
    (void)state;
    static float l[BV], l2[BV];
    static int32_t want[BV], got[BV];
    const sample_params ps[] = {P(1, 0, 1, 0, 1),     P(0.8f, 40, 1, 0, 1),   P(1, 0, 0.9f, 0, 1),
                                P(1, 0, 0.5f, 0, 1),  P(0.7f, 40, 0.95f, 0, 1), P(1, 0, 1, 0.05f, 1),
                                P(1, 100, 0.9f, 0.1f, 1), P(1, 0, 0.999f, 0, 1), P(1, 1, 1, 0, 1)};
    int checked = 0;
    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++)
        for (int trial = 0; trial < 4; trial++) {
            /* logits of a peaked, a flat and a heavy-tailed shape, with ties and -inf */
            for (int i = 0; i < BV; i++) {
                const float u = rnd();
                l[i] = trial == 0 ? 12 * u * u * u : trial == 1 ? u : trial == 2 ? -logf(1e-6f + u) * 3 : (float)(int)(u * 20);
            }
            l[7] = -INFINITY;
            double edge;
            const int nw = plain_support(l, &ps[k], want, &edge);
            sampler *s = sampler_new(&ps[k], BV, NULL);
            memcpy(l2, l, sizeof l);
            const int ng = sampler_support(s, l2, got);
            qsort(got, (size_t)ng, sizeof *got, int_asc);
            if (edge < 1e-5) { /* top-p cut within float rounding of a token: either set is right */
                sampler_free(s);
                continue;
            }
            checked++;
            if (ng != nw || memcmp(got, want, sizeof(int32_t) * (size_t)nw))
                fail_msg("params %zu trial %d: support of %d tokens, the plain chain's %d", k, trial, ng, nw);
            /* every draw lands in the support */
            for (int d = 0; d < 50; d++) {
                memcpy(l2, l, sizeof l);
                const int32_t t = sampler_sample(s, l2);
                if (!bsearch(&t, want, (size_t)nw, sizeof *want, int_asc)) fail_msg("params %zu: drew %d outside", k, t);
            }
            sampler_free(s);
        }
    print_message("support: %d of 36 cases checked (the rest cut top-p within 1e-5 of a token)\n", checked);
    assert_true(checked >= 24);
}

/* frequencies at V = 32000: tokens 0..3 carry 0.4, 0.2, 0.1, 0.1 of the mass
 * (the other 31996 share 0.2 evenly), temperature 1 and 0.5, top-p 0.75 */
static void test_frequencies_large_vocab(void **state) {
    (void)state;
    static float l[BV], l0[BV];
    const float head[4] = {0.4f, 0.2f, 0.1f, 0.1f};
    const sample_params ps[3] = {P(1, 0, 1, 0, 7), P(0.5f, 0, 1, 0, 7), P(1, 0, 0.75f, 0, 7)};
    /* the logits once (the sampler works in place, so each draw gets a copy:
     * 20000 x 32000 logf per case took most of the ASan leg's 273 s) */
    for (int i = 0; i < BV; i++) l0[i] = logf(i < 4 ? head[i] : 0.2f / (BV - 4));
    for (int k = 0; k < 3; k++) {
        sampler *s = sampler_new(&ps[k], BV, NULL);
        int c[5] = {0};
        const int n = 20000;
        for (int d = 0; d < n; d++) {
            memcpy(l, l0, sizeof l);
            const int32_t t = sampler_sample(s, l);
            c[t < 4 ? t : 4]++;
        }
        double p[5], z = 0;
        for (int i = 0; i < 5; i++) {
            const double q = i < 4 ? head[i] : 0.2;
            p[i] = k == 1 ? (i < 4 ? q * q : (BV - 4) * pow(0.2 / (BV - 4), 2)) : k == 2 ? (i < 3 ? q : i == 3 ? q : 0) : q;
            z += p[i];
        }
        /* top-p 0.75: 0.4 + 0.2 + 0.1 = 0.7 < 0.75, so tokens 0..3 (the 4th: 0.8) */
        for (int i = 0; i < 5; i++) assert_float_equal((float)c[i] / n, (float)(p[i] / z), 0.02f);
        sampler_free(s);
    }
}

/* Presence / frequency penalties and logit bias, by hand (every value is
 * exact in binary).  logits {1, 0.5, 2, 3, 0}; prompt {4}; generated
 * {0, 0, 2}; presence 0.5, frequency 0.25; bias +1.5 on token 1, -100 on 3:
 *   token 0: 1 - (0.25 * 2 + 0.5)   = 0      (generated twice)
 *   token 1: 0.5 + 1.5              = 2      (biased; greedy's pick)
 *   token 2: 2 - (0.25 * 1 + 0.5)   = 1.25   (generated once)
 *   token 3: 3 - 100                = -97    (the raw argmax, banned)
 *   token 4: 0                               (in the prompt only: OpenAI
 *                                             counts generated tokens)
 * With a repetition penalty of 2 as well (over prompt + generated, after
 * the bias, before presence / frequency): token 0: 1 / 2 - 1 = -0.5,
 * token 2: 2 / 2 - 0.75 = 0.25, token 4: 0 * 2 = 0. */
static void test_penalties_and_bias_by_hand(void **state) {
    (void)state;
    const sample_bias bias[2] = {{1, 1.5f}, {3, -100.0f}};
    const int32_t ctx[1] = {4}, gen[3] = {0, 0, 2};
    const float want[2][5] = {{0.0f, 2.0f, 1.25f, -97.0f, 0.0f}, {-0.5f, 2.0f, 0.25f, -97.0f, 0.0f}};
    for (int rep = 0; rep < 2; rep++) {
        sample_params p = P(0, 0, 1, 0, 1);
        p.presence_penalty = 0.5f;
        p.frequency_penalty = 0.25f;
        p.bias = bias;
        p.n_bias = 2;
        p.repeat_penalty = rep ? 2.0f : 1.0f;
        sampler *s = sampler_new(&p, 5, NULL);
        assert_non_null(s);
        sampler_accept_prompt(s, ctx[0]);
        for (int i = 0; i < 3; i++) sampler_accept(s, gen[i]);
        float l[5] = {1.0f, 0.5f, 2.0f, 3.0f, 0.0f}, r[5], g[5];
        memcpy(r, l, sizeof l);
        memcpy(g, l, sizeof l);
        int32_t ids[5];
        sampler_support(s, l, ids); /* adjusts l in place */
        sample_adjust_ref(&p, r, 5, ctx, 1, gen, 3);
        for (int v = 0; v < 5; v++) {
            assert_float_equal(l[v], want[rep][v], 0);
            assert_float_equal(r[v], want[rep][v], 0);
        }
        assert_int_equal(sampler_sample(s, g), 1); /* greedy after the bias and penalties */
        sampler_free(s);
    }
}

/* The sampler's counts kept token by token against the reference recomputed
 * from the whole history, bit for bit, over random streams and settings
 * (negative penalties too: OpenAI's range is [-2, 2]). */
static void test_penalties_match_ref(void **state) {
    (void)state;
    enum { V = 48, NCTX = 20, NGEN = 60 };
    uint64_t rng = 99;
    for (int trial = 0; trial < 20; trial++) {
        sample_bias bias[6];
        for (int i = 0; i < 6; i++)
            bias[i] = (sample_bias){(int32_t)(sample_rng_next(&rng) % V), 200 * sample_rng_float(&rng) - 100};
        sample_params p = P(0, 0, 1, 0, 1);
        p.presence_penalty = 4 * sample_rng_float(&rng) - 2;
        p.frequency_penalty = 4 * sample_rng_float(&rng) - 2;
        p.repeat_penalty = trial % 2 ? 1.3f : 1.0f;
        p.repeat_last_n = 16;
        p.bias = bias;
        p.n_bias = trial % 3 ? 6 : 0;
        sampler *s = sampler_new(&p, V, NULL);
        assert_non_null(s);
        int32_t ctx[NCTX], gen[NGEN];
        for (int i = 0; i < NCTX; i++) sampler_accept_prompt(s, ctx[i] = (int32_t)(sample_rng_next(&rng) % 12));
        for (int i = 0; i < NGEN; i++) {
            float l[V], r[V];
            for (int v = 0; v < V; v++) l[v] = r[v] = 10 * sample_rng_float(&rng) - 5;
            int32_t ids[V];
            sampler_support(s, l, ids);
            sample_adjust_ref(&p, r, V, ctx, NCTX, gen, i);
            assert_memory_equal(l, r, sizeof l);
            sampler_accept(s, gen[i] = (int32_t)(sample_rng_next(&rng) % 16)); /* repeats likely */
        }
        sampler_free(s);
    }
}

/* bias -100 bans the greedy pick; +100 forces a token even when sampling at
 * temperature 1 from a flat distribution */
static void test_logit_bias_ban_force(void **state) {
    (void)state;
    const sample_bias ban = {2, -100.0f}, force = {5, 100.0f};
    sample_params p = P(0, 0, 1, 0, 1);
    p.bias = &ban;
    p.n_bias = 1;
    sampler *s = sampler_new(&p, 8, NULL);
    float l[8] = {0, 1, 9, 3, 0, 0, 0, 0};
    assert_int_equal(sampler_sample(s, l), 3);
    sampler_free(s);
    p = P(1, 0, 1, 0, 3);
    p.bias = &force;
    p.n_bias = 1;
    s = sampler_new(&p, 8, NULL);
    for (int d = 0; d < 1000; d++) {
        float f[8] = {0};
        assert_int_equal(sampler_sample(s, f), 5);
    }
    sampler_free(s);
}

/* the public sampler: tokens accepted before the first sample are the
 * prompt (presence / frequency do not count them), after it generated */
static void test_public_sampler_counts_generated(void **state) {
    (void)state;
    const kvant_logit_bias lb = {0, 0.5f};
    kvant_sampling ks = {.temperature = 0, .top_p = 1, .repeat_penalty = 1, .repeat_last_n = 64,
                         .presence_penalty = 1.0f, .frequency_penalty = 0.5f, .logit_bias = &lb, .n_logit_bias = 1};
    kvant_status st;
    kvant_sampler *s = kvant_sampler_new(&ks, 4, &st);
    assert_non_null(s);
    kvant_sampler_accept(s, 1); /* prompt */
    kvant_sampler_accept(s, 1);
    float l[4] = {1.0f, 2.0f, 0.0f, 0.0f};
    assert_int_equal(kvant_sampler_sample(s, l), 1); /* 1.5 vs 2: the prompt's 1s are not penalized */
    kvant_sampler_accept(s, 1);                       /* generated: -1.5 */
    float m[4] = {1.0f, 2.0f, 0.0f, 0.0f};
    assert_int_equal(kvant_sampler_sample(s, m), 0);
    assert_float_equal(m[1], 0.5f, 0);
    assert_float_equal(m[0], 1.5f, 0);
    kvant_sampler_free(s);
    /* a bias token outside the vocabulary is refused */
    const kvant_logit_bias out = {4, 1.0f};
    ks.logit_bias = &out;
    assert_null(kvant_sampler_new(&ks, 4, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
}

static void test_bad_params(void **state) {
    (void)state;
    kvant_status st;
    sample_params p = P(1, 0, 0, 0, 1); /* top_p 0 */
    assert_null(sampler_new(&p, 4, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    p = P(1, 0, 1, 0, 1);
    assert_null(sampler_new(&p, 0, &st));
    p.presence_penalty = NAN;
    assert_null(sampler_new(&p, 4, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    p.presence_penalty = 0;
    const sample_bias b = {-1, 1.0f}, inf = {1, INFINITY};
    p.bias = &b;
    p.n_bias = 1;
    assert_null(sampler_new(&p, 4, &st));
    p.bias = &inf;
    assert_null(sampler_new(&p, 4, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_frequencies),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_repeat_penalty),
        cmocka_unit_test(test_penalties_and_bias_by_hand),
        cmocka_unit_test(test_penalties_match_ref),
        cmocka_unit_test(test_logit_bias_ban_force),
        cmocka_unit_test(test_public_sampler_counts_generated),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_support_large_vocab),
        cmocka_unit_test(test_frequencies_large_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
