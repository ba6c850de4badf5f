/* test_tools.c - `kvant quantize` and `kvant synth`.
 * Ground truth: llama.cpp's quantizer wrote the reference/llamacpp GGUFs from
 * the F32 files; kvant's quantizer must choose the same type for every
 * tensor and write the same bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "format/gguf.h"
#include "kernels/types.h"
#include "kvant.h"

static int kv_cli(const char *args) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s >/dev/null 2>&1", KVANT_BIN, args);
    int rc;
    free(run_capture(cmd, &rc));
    return rc;
}

/* every tensor of `got` has the type and bytes of the same-named tensor in `want` */
static void same_tensors(const char *got_path, const char *want_path) {
    kvant_status st;
    gguf_ctx *got = gguf_open(got_path, &st), *want = gguf_open(want_path, &st);
    assert_non_null(got);
    assert_non_null(want);
    assert_int_equal(gguf_n_tensors(got), gguf_n_tensors(want));
    for (int64_t i = 0; i < gguf_n_tensors(want); i++) {
        const gguf_tensor *w = gguf_tensor_at(want, i), *g = gguf_find_tensor(got, w->name);
        if (!g) fail_msg("%s: tensor %s missing", got_path, w->name);
        if (g->type != w->type)
            fail_msg("%s: %s is %s, llama.cpp wrote %s", got_path, w->name, kern_type_name(g->type), kern_type_name(w->type));
        assert_int_equal(g->nbytes, w->nbytes);
        if (memcmp(g->data, w->data, w->nbytes)) fail_msg("%s: %s bytes differ from llama.cpp's", got_path, w->name);
    }
    uint32_t ft_got, ft_want;
    assert_true(gguf_get_u32(got, "general.file_type", &ft_got));
    if (gguf_get_u32(want, "general.file_type", &ft_want)) assert_int_equal(ft_got, ft_want);
    gguf_close(got);
    gguf_close(want);
}

/* default (mixed) rules on the real model: output.weight Q8_0 (Q6_K does not
 * fit 64 columns), ffn_down kept F32 (172 columns) */
static void test_quantize_stories_like_llamacpp(void **state) {
    (void)state;
    const char *types[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"};
    char in[2048], args[8192], out[2048], want[2048];
    snprintf(in, sizeof in, "%s", shared_path("models/stories260K.gguf"));
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        snprintf(out, sizeof out, "%s/stories260K-%s.gguf", KVANT_TEST_TMP, types[i]);
        snprintf(args, sizeof args, "quantize -q %s %s %s", in, out, types[i]);
        assert_int_equal(kv_cli(args), 0);
        snprintf(want, sizeof want, "reference/llamacpp/stories260K-%s.gguf", types[i]);
        same_tensors(out, shared_path(want));
    }
}

/* --pure on the synthetic kq model: every matrix in the one type */
static void test_quantize_pure_like_llamacpp(void **state) {
    (void)state;
    const char *types[] = {"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"};
    char in[2048], args[8192], out[2048], want[2048];
    snprintf(in, sizeof in, "%s", shared_path("reference/llamacpp/kq-F32.gguf"));
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        snprintf(out, sizeof out, "%s/kq-%s.gguf", KVANT_TEST_TMP, types[i]);
        snprintf(args, sizeof args, "quantize -q --pure %s %s %s", in, out, types[i]);
        assert_int_equal(kv_cli(args), 0);
        snprintf(want, sizeof want, "reference/llamacpp/kq-%s.gguf", types[i]);
        same_tensors(out, shared_path(want));
    }
}

static void test_quantize_errors(void **state) {
    (void)state;
    char args[8192];
    snprintf(args, sizeof args, "quantize %s %s/x.gguf Q9_9", shared_path("models/stories260K.gguf"), KVANT_TEST_TMP);
    assert_int_equal(kv_cli(args), 2);
    snprintf(args, sizeof args, "quantize /nonexistent.gguf %s/x.gguf Q4_0", KVANT_TEST_TMP);
    assert_int_equal(kv_cli(args), 2);
    assert_int_equal(kv_cli("quantize onlyone"), 2);
    snprintf(args, sizeof args, "quantize %s %s/x.gguf Q4_0", shared_path("tokenizers/ggml-vocab-gpt-2.gguf"),
             KVANT_TEST_TMP);
    assert_int_equal(kv_cli(args), 1);
}

static float *logits(const char *path, const int32_t *ids, int n, int *V) {
    kvant_status st;
    kvant_model_params p = {.n_threads = 2};
    kvant_model *m = kvant_model_open(path, &p, &st);
    if (!m) fail_msg("%s", st.msg);
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    *V = in.vocab_size;
    float *lg = malloc(sizeof(float) * n * in.vocab_size);
    kvant_seq *s = kvant_seq_new(m, n, &st);
    assert_int_equal(kvant_forward(s, ids, n, lg, true, &st), KVANT_OK);
    kvant_seq_free(s);
    kvant_model_free(m);
    return lg;
}

/* synth: deterministic whatever the thread count, marked synthetic, loads,
 * runs; its Q8_0 twin stays close to it */
static void test_synth(void **state) {
    (void)state;
    char a[2048], b[2048], q[2048], args[8192];
    snprintf(a, sizeof a, "%s/synth-a.gguf", KVANT_TEST_TMP);
    snprintf(b, sizeof b, "%s/synth-b.gguf", KVANT_TEST_TMP);
    snprintf(q, sizeof q, "%s/synth-q8.gguf", KVANT_TEST_TMP);
    snprintf(args, sizeof args, "synth --shape tiny -o %s -t 1", a);
    assert_int_equal(kv_cli(args), 0);
    snprintf(args, sizeof args, "synth --shape tiny -o %s -t 3", b);
    assert_int_equal(kv_cli(args), 0);
    size_t na, nb;
    char *da = read_file(a, &na), *db = read_file(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    free(da);
    free(db);
    kvant_status st;
    gguf_ctx *g = gguf_open(a, &st);
    bool syn = false;
    assert_true(gguf_get_bool(g, "kvant.synthetic", &syn) && syn);
    gguf_str desc;
    assert_true(gguf_get_str(g, "general.description", &desc));
    assert_true(desc.len > 9 && !memcmp(desc.data, "SYNTHETIC", 9));
    gguf_close(g);
    snprintf(args, sizeof args, "synth --shape tiny -o %s --type Q8_0", q);
    assert_int_equal(kv_cli(args), 0);
    const int32_t ids[8] = {1, 300, 301, 302, 5, 77, 400, 9};
    int V;
    float *la = logits(a, ids, 8, &V), *lq = logits(q, ids, 8, &V);
    double num = 0, den = 0;
    for (int i = 0; i < 8 * V; i++) {
        assert_true(isfinite(la[i]));
        num += (la[i] - lq[i]) * (double)(la[i] - lq[i]);
        den += (double)la[i] * la[i];
    }
    print_message("synthetic tiny: Q8_0 vs F32 logits NMSE %.3g\n", num / den);
    assert_true(den > 0 && num / den < 1e-3); /* 8-bit weights: well under 0.1%% */
    free(la);
    free(lq);
    assert_int_equal(kv_cli("synth --shape nosuch -o /tmp/x.gguf"), 2);
    assert_int_equal(kv_cli("synth --shape tiny"), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantize_stories_like_llamacpp),
        cmocka_unit_test(test_quantize_pure_like_llamacpp),
        cmocka_unit_test(test_quantize_errors),
        cmocka_unit_test(test_synth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
