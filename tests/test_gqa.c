/* test_gqa.c - MHA, GQA and MQA through the whole model, on synthetic GGUF
 * files written with kvant's GGUF writer.
 *
 * A GQA model with Hkv KV heads is mathematically the MHA model whose K and
 * V projections repeat each KV head's rows for every query head in its
 * group.  So: write the grouped model and its expanded MHA twin from the
 * same random weights; their logits must agree to float rounding (1e-5),
 * which fails if a query head reads the wrong KV head. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "format/gguf.h"
#include "kernels/types.h"
#include "kvant.h"

enum { C = 32, F = 48, L = 2, H = 4, D = 8, V = 40 };

static uint64_t rng;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) / 8388608.0 - 1.0);
}

static void add(gguf_writer *w, const char *name, int64_t ne0, int64_t ne1, const float *data) {
    const int64_t ne[2] = {ne0, ne1};
    kvant_status st;
    if (gguf_writer_add_tensor(w, name, KT_F32, ne1 > 1 ? 2 : 1, ne, data, &st)) fail_msg("%s", st.msg);
}

/* Writes a model with `hkv` KV heads; when expand_to_mha, the K/V rows of
 * each KV head are repeated for the H / hkv query heads of its group and
 * the file declares H KV heads.  Same seed: same weights. */
static void write_model(const char *path, int hkv, bool expand_to_mha) {
    rng = 0x1234567ULL;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_str(w, "general.name", "synthetic gqa test");
    gguf_writer_add_u32(w, "llama.context_length", 64);
    gguf_writer_add_u32(w, "llama.embedding_length", C);
    gguf_writer_add_u32(w, "llama.block_count", L);
    gguf_writer_add_u32(w, "llama.feed_forward_length", F);
    gguf_writer_add_u32(w, "llama.attention.head_count", H);
    gguf_writer_add_u32(w, "llama.attention.head_count_kv", expand_to_mha ? H : hkv);
    gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    /* a small SentencePiece vocabulary: <unk> <s> </s>, then letters */
    const char *toks[V];
    char store[V][8];
    float scores[V];
    int32_t types[V];
    for (int i = 0; i < V; i++) {
        if (i < 3) toks[i] = (const char *[]){"<unk>", "<s>", "</s>"}[i];
        else { snprintf(store[i], sizeof store[i], "%c", 'A' + i); toks[i] = store[i]; }
        scores[i] = -(float)i;
        types[i] = i < 3 ? (i == 0 ? 2 : 3) : 1;
    }
    gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, V);
    gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, V);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, V);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);

    float *buf = malloc(sizeof(float) * V * C * 2), *exp = malloc(sizeof(float) * H * D * C);
    for (int i = 0; i < V * C; i++) buf[i] = frand();
    add(w, "token_embd.weight", C, V, buf);
    for (int i = 0; i < C; i++) buf[i] = 1.0f + 0.1f * frand();
    add(w, "output_norm.weight", C, 1, buf);
    for (int i = 0; i < V * C; i++) buf[i] = 0.3f * frand();
    add(w, "output.weight", C, V, buf);
    char name[64];
    for (int l = 0; l < L; l++) {
#define T(suffix, ne0, ne1, scale)                                               \
        for (int i = 0; i < (ne0) * (ne1); i++) buf[i] = (scale) * frand();      \
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);
        T("attn_norm", C, 1, 0.1f) for (int i = 0; i < C; i++) buf[i] += 1.0f; add(w, name, C, 1, buf);
        T("attn_q", C, H * D, 0.4f) add(w, name, C, H * D, buf);
        for (int kv = 0; kv < 2; kv++) {
            T(kv ? "attn_v" : "attn_k", C, hkv * D, 0.4f)
            if (!expand_to_mha) { add(w, name, C, hkv * D, buf); continue; }
            /* query head h reads KV head h / (H / hkv): repeat its D rows */
            for (int h = 0; h < H; h++)
                memcpy(exp + (size_t)h * D * C, buf + (size_t)(h / (H / hkv)) * D * C, sizeof(float) * D * C);
            add(w, name, C, H * D, exp);
        }
        T("attn_output", H * D, C, 0.3f) add(w, name, H * D, C, buf);
        T("ffn_norm", C, 1, 0.1f) for (int i = 0; i < C; i++) buf[i] += 1.0f; add(w, name, C, 1, buf);
        T("ffn_gate", C, F, 0.3f) add(w, name, C, F, buf);
        T("ffn_down", F, C, 0.3f) add(w, name, F, C, buf);
        T("ffn_up", C, F, 0.3f) add(w, name, C, F, buf);
#undef T
    }
    kvant_status st;
    if (gguf_writer_write_file(w, path, &st)) fail_msg("%s", st.msg);
    gguf_writer_free(w);
    free(buf);
    free(exp);
}

static float *logits_of(const char *path, int n_kv_expected) {
    kvant_status st;
    kvant_model_params p = {.n_threads = 2};
    kvant_model *m = kvant_model_open(path, &p, &st);
    if (!m) fail_msg("%s", st.msg);
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    assert_int_equal(in.n_kv_heads, n_kv_expected);
    const int32_t ids[12] = {1, 5, 9, 3, 22, 39, 7, 7, 14, 30, 11, 4};
    float *lg = malloc(sizeof(float) * 12 * V), *step = malloc(sizeof(float) * V);
    kvant_seq *s = kvant_seq_new(m, 32, &st), *t = kvant_seq_new(m, 32, &st);
    assert_int_equal(kvant_forward(s, ids, 12, lg, true, &st), KVANT_OK);
    for (int i = 0; i < 12; i++) { /* cached decoding agrees with the batch for every layout */
        assert_int_equal(kvant_forward(t, &ids[i], 1, step, false, &st), KVANT_OK);
        for (int v = 0; v < V; v++) assert_float_equal(step[v], lg[i * V + v], 1e-5f);
    }
    free(step);
    kvant_seq_free(s);
    kvant_seq_free(t);
    kvant_model_free(m);
    return lg;
}

static void check_group(int hkv) {
    char grouped[512], expanded[512];
    snprintf(grouped, sizeof grouped, "%s/gqa-%d.gguf", KVANT_TEST_TMP, hkv);
    snprintf(expanded, sizeof expanded, "%s/gqa-%d-as-mha.gguf", KVANT_TEST_TMP, hkv);
    write_model(grouped, hkv, false);
    write_model(expanded, hkv, true);
    float *a = logits_of(grouped, hkv), *b = logits_of(expanded, H);
    double worst = 0, mag = 0;
    for (int i = 0; i < 12 * V; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        mag = fmax(mag, fabs((double)b[i]));
    }
    print_message("Hkv=%d vs expanded MHA: max |diff| %.3g (max |logit| %.3g)\n", hkv, worst, mag);
    assert_true(mag > 0.1);
    assert_true(worst <= 1e-5);
    free(a);
    free(b);
}

static void test_mqa_equals_expanded_mha(void **state) { (void)state; check_group(1); }
static void test_gqa_equals_expanded_mha(void **state) { (void)state; check_group(2); }
static void test_mha_runs(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/mha.gguf", KVANT_TEST_TMP);
    write_model(path, H, false);
    free(logits_of(path, H));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mqa_equals_expanded_mha),
        cmocka_unit_test(test_gqa_equals_expanded_mha),
        cmocka_unit_test(test_mha_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
