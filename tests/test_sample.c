/* test_sample.c - the sampling chain: greedy, seeds, top-k, top-p, min-p,
 * temperature, repetition penalty; draw frequencies against the exact
 * probabilities. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
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
    static float l[BV];
    const float head[4] = {0.4f, 0.2f, 0.1f, 0.1f};
    const sample_params ps[3] = {P(1, 0, 1, 0, 7), P(0.5f, 0, 1, 0, 7), P(1, 0, 0.75f, 0, 7)};
    for (int k = 0; k < 3; k++) {
        sampler *s = sampler_new(&ps[k], BV, NULL);
        int c[5] = {0};
        const int n = 20000;
        for (int d = 0; d < n; d++) {
            for (int i = 0; i < BV; i++) l[i] = logf(i < 4 ? head[i] : 0.2f / (BV - 4));
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

static void test_bad_params(void **state) {
    (void)state;
    kvant_status st;
    sample_params p = P(1, 0, 0, 0, 1); /* top_p 0 */
    assert_null(sampler_new(&p, 4, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    p = P(1, 0, 1, 0, 1);
    assert_null(sampler_new(&p, 0, &st));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_frequencies),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_repeat_penalty),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_support_large_vocab),
        cmocka_unit_test(test_frequencies_large_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
