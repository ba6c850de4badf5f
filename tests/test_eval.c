/* test_eval.c - perplexity and KL divergence.
 * Ground truth: llama.cpp's perplexity tool on stories260K.gguf and the
 * TinyStories subset (reference/README.md): c=512, first 100 chunks,
 * PPL = 3.8666 +/- 0.04454. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "eval/eval.h"
#include "kvant.h"

static void test_metrics(void **state) {
    (void)state;
    float u[4] = {1, 1, 1, 1};
    assert_float_equal(eval_nll(u, 4, 2), log(4.0), 1e-12);
    float a[3] = {2.0f, 0.5f, -1.0f};
    assert_float_equal(eval_kl(a, a, 3), 0.0, 1e-12);
    /* p = softmax(log .8, log .2), q = (.5, .5): KL = .8 ln 1.6 + .2 ln .4 */
    float p[2] = {logf(0.8f), logf(0.2f)}, q[2] = {0, 0};
    assert_float_equal(eval_kl(p, q, 2), 0.8 * log(1.6) + 0.2 * log(0.4), 1e-6);
    assert_int_equal(eval_argmax(a, 3), 0);
    double v[5] = {5, 1, 4, 2, 3};
    assert_float_equal(eval_quantile(v, 5, 0.5), 3.0, 1e-12);
    assert_float_equal(eval_quantile(v, 5, 1.0), 5.0, 1e-12);
    assert_float_equal(eval_quantile(v, 5, 0.99), 4.96, 1e-12);
    eval_stats s = {0};
    for (int i = 1; i <= 4; i++) eval_stats_add(&s, i);
    assert_float_equal(s.mean, 2.5, 1e-12);
    assert_float_equal(eval_stats_var(&s), 5.0 / 3.0, 1e-12);
}

static kvant_model *open(const char *rel) {
    kvant_status st;
    kvant_model_params mp = {.n_threads = 2};
    kvant_model *m = kvant_model_open(shared_path(rel), &mp, &st);
    if (!m) fail_msg("%s", st.msg);
    return m;
}

static void test_ppl_matches_llamacpp(void **state) {
    (void)state;
    size_t n;
    char *text = read_file(shared_path("corpora/tinystories_val_subset.txt"), &n);
    kvant_model *m = open("models/stories260K.gguf");
    kvant_ppl_params p = {.n_ctx = 512, .n_chunks = 100};
    kvant_ppl_result r;
    kvant_status st;
    assert_int_equal(kvant_perplexity(m, text, n, &p, &r, &st), KVANT_OK);
    print_message("PPL = %.4f +/- %.5f over %lld tokens (llama.cpp: 3.8666 +/- 0.04454)\n", r.ppl, r.ppl_err,
                  (long long)r.n_scored);
    assert_int_equal(r.n_chunks, 100);
    assert_int_equal(r.n_scored, 100 * 255);
    assert_float_equal(r.ppl, 3.8666, 0.00005 + 1e-9);
    assert_float_equal(r.ppl_err, 0.04454, 0.000005 + 1e-9);
    kvant_model_free(m);
    free(text);
}

/* sliding windows score every token after the first exactly once; more
 * overlap means more context per scored token */
static void test_sliding_and_kl(void **state) {
    (void)state;
    size_t n;
    char *text = read_file(shared_path("corpora/tinystories_val_subset.txt"), &n);
    n = 6000; /* a short prefix: ~1500 tokens */
    kvant_model *m = open("models/stories260K.gguf"), *q = open("reference/llamacpp/stories260K-Q8_0.gguf");
    kvant_status st;
    kvant_ppl_result r, r2;
    kvant_ppl_params p = {.n_ctx = 128, .stride = 32};
    assert_int_equal(kvant_perplexity(m, text, n, &p, &r, &st), KVANT_OK);
    assert_int_equal(r.n_scored, r.n_text_tokens - 1);
    p.stride = 120;
    assert_int_equal(kvant_perplexity(m, text, n, &p, &r2, &st), KVANT_OK);
    assert_int_equal(r2.n_scored, r2.n_text_tokens - 1);
    /* more context per scored token on average: lower perplexity */
    print_message("sliding c=128: stride 32 PPL %.4f, stride 120 PPL %.4f\n", r.ppl, r2.ppl);
    assert_true(r.ppl < r2.ppl);

    p.stride = 128; /* windows that do not overlap are refused */
    assert_int_equal(kvant_perplexity(m, text, n, &p, &r2, &st), KVANT_ERR_ARG);

    /* a model against itself: KL 0, same top everywhere, ratio 1 */
    kvant_ppl_params k = {.n_ctx = 128, .kl_base = m};
    assert_int_equal(kvant_perplexity(m, text, n, &k, &r, &st), KVANT_OK);
    assert_true(r.has_kl);
    assert_float_equal(r.kl_mean, 0.0, 1e-9);
    assert_float_equal(r.same_top, 1.0, 0);
    assert_float_equal(r.ppl_ratio, 1.0, 1e-12);
    /* Q8_0 against F32: small but non-zero KL (llama.cpp: 3.1e-4 on 35 tokens) */
    assert_int_equal(kvant_perplexity(q, text, n, &k, &r, &st), KVANT_OK);
    print_message("Q8_0 vs F32: KL mean %.3g p99 %.3g, same top %.4f, PPL ratio %.5f\n", r.kl_mean, r.kl_p99,
                  r.same_top, r.ppl_ratio);
    assert_true(r.kl_mean > 1e-6 && r.kl_mean < 3e-3);
    assert_true(r.kl_p99 >= r.kl_mean && r.kl_max >= r.kl_p99);
    assert_true(r.same_top > 0.95);
    assert_true(fabs(r.ppl_ratio - 1) < 0.01);
    kvant_model_free(m);
    kvant_model_free(q);
    free(text);
}

static void test_ppl_cli_errors(void **state) {
    (void)state;
    char cmd[8192];
    int rc;
    snprintf(cmd, sizeof cmd, "%s ppl -m %s 2>/dev/null", KVANT_BIN, shared_path("models/stories260K.gguf"));
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 2); /* no -f */
    snprintf(cmd, sizeof cmd, "%s ppl -m %s -f /nonexistent.txt 2>/dev/null", KVANT_BIN,
             shared_path("models/stories260K.gguf"));
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 2);
    char m[2048];
    snprintf(m, sizeof m, "%s", shared_path("models/stories260K.gguf"));
    snprintf(cmd, sizeof cmd, "%s ppl -m %s -f %s -c 64 --chunks 3 --json 2>/dev/null", KVANT_BIN, m,
             shared_path("corpora/tinystories_val_subset.txt"));
    char *out = run_capture(cmd, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"ppl\": "));
    assert_non_null(strstr(out, "\"chunks\": 3"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_ppl_matches_llamacpp),
        cmocka_unit_test(test_sliding_and_kl),
        cmocka_unit_test(test_ppl_cli_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
