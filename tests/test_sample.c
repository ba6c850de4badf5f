/* test_sample.c - the sampling chain: greedy, seeds, top-k, top-p, min-p,
 * temperature, repetition penalty; draw frequencies against the exact
 * probabilities. */
#include <math.h>
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
