/* test_synth_shapes.c - `kvant synth` at the new families' shapes.
 *
 * Each shape is written at 1-2 layers with a 512-token vocabulary (and 8 of
 * qwen3moe's experts) so the files stay ~100 MB at most, read back with the
 * GGUF reader, and checked against what llama.cpp's loader expects
 * (src/models/<arch>.cpp, llama-arch.cpp): the architecture, its keys, and
 * the exact set of tensor names and shapes.  The expected numbers below are
 * the published config.json values, written here again rather than taken
 * from the shape table under test.  Files are deleted once checked.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "compress/compress.h"
#include "compress/synth.h"
#include "format/gguf.h"
#include "kernels/types.h"
#include "model/model.h"

#define VOCAB 512

static bool str_is(gguf_str s, const char *c) { return s.len == strlen(c) && memcmp(s.data, c, s.len) == 0; }

typedef struct {
    char name[64];
    int n_dims;
    int64_t ne[3];
} want_t;

typedef struct {
    want_t t[512];
    int n;
} want_list;

static void want(want_list *w, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2, const char *name, int layer) {
    assert_true(w->n < 512);
    want_t *t = &w->t[w->n++];
    if (layer < 0) snprintf(t->name, sizeof t->name, "%s", name); /* a global tensor */
    else snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, name);
    t->n_dims = n_dims;
    t->ne[0] = ne0; t->ne[1] = ne1; t->ne[2] = ne2;
}

static gguf_ctx *synth(const char *shape, int layers, const char *type, int n_expert, char *path, size_t cap) {
    snprintf(path, cap, "%s/synth-shape-%s.gguf", KVANT_TEST_TMP, shape);
    const quant_ftype *ft = quant_ftype_find(type);
    if (!ft) fail_msg("no file type %s", type);
    synth_params p = {.shape = shape, .out_path = path, .ftype = ft->ftype, .seed = 7, .n_threads = 2,
                      .quiet = true, .n_layers = layers, .n_vocab = VOCAB, .n_expert = n_expert};
    kvant_status st = {0};
    if (synth_write(&p, &st) != KVANT_OK) fail_msg("synth %s: %s", shape, st.msg);
    gguf_ctx *g = gguf_open(path, &st);
    if (!g) fail_msg("gguf_open(%s): %s", path, st.msg);
    return g;
}

static void key_u32(const gguf_ctx *g, const char *arch, const char *suffix, uint32_t v) {
    char key[128];
    uint32_t got;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_get_u32(g, key, &got)) fail_msg("%s missing", key);
    if (got != v) fail_msg("%s = %u, want %u", key, got, v);
}

static void key_f32(const gguf_ctx *g, const char *arch, const char *suffix, float v) {
    char key[128];
    float got;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_get_f32(g, key, &got)) fail_msg("%s missing", key);
    if (fabsf(got - v) > 1e-6f * fabsf(v)) fail_msg("%s = %g, want %g", key, got, v);
}

static void key_absent(const gguf_ctx *g, const char *arch, const char *suffix) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_find(g, key)) fail_msg("%s present", key);
}

/* What every shape shares: architecture, synthetic marks, the cut recorded,
 * the common hyperparameters, the dummy vocabulary. */
static void common(const gguf_ctx *g, const char *arch, int layers, int layers_of, int C, int F, int H, int Hkv,
                   int rope_dim, float eps, float base, int vocab_of) {
    gguf_str s;
    assert_true(gguf_get_str(g, "general.architecture", &s));
    if (!str_is(s, arch)) fail_msg("architecture %.*s, want %s", (int)s.len, s.data, arch);
    bool syn = false;
    assert_true(gguf_get_bool(g, "kvant.synthetic", &syn) && syn);
    assert_true(gguf_get_str(g, "general.description", &s));
    assert_true(s.len > 9 && !memcmp(s.data, "SYNTHETIC", 9));
    char cut[64];
    snprintf(cut, sizeof cut, "first %d of its %d layers", layers, layers_of);
    bool found = false;
    for (uint64_t i = 0; i + strlen(cut) <= s.len; i++) found |= !memcmp(s.data + i, cut, strlen(cut));
    if (!found) fail_msg("description '%.*s' does not say '%s'", (int)s.len, s.data, cut);
    uint32_t v;
    assert_true(gguf_get_u32(g, "kvant.synthetic_layers_of", &v));
    assert_int_equal(v, layers_of);
    assert_true(gguf_get_u32(g, "kvant.synthetic_vocab_of", &v));
    assert_int_equal(v, vocab_of);
    key_u32(g, arch, "block_count", layers);
    key_u32(g, arch, "embedding_length", C);
    key_u32(g, arch, "feed_forward_length", F);
    key_u32(g, arch, "attention.head_count", H);
    key_u32(g, arch, "attention.head_count_kv", Hkv);
    key_u32(g, arch, "rope.dimension_count", rope_dim);
    key_f32(g, arch, "attention.layer_norm_rms_epsilon", eps);
    key_f32(g, arch, "rope.freq_base", base);
    const gguf_value *toks = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_STRING);
    assert_non_null(toks);
    assert_int_equal(toks->arr.n, VOCAB);
}

/* The file holds exactly the wanted tensors; 1-D ones (norms, biases, RoPE
 * factors) and routers in F32, every other matrix in `mat_type`. */
static void tensors(const gguf_ctx *g, const want_list *w, int mat_type) {
    for (int i = 0; i < w->n; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, w->t[i].name);
        if (!t) fail_msg("tensor %s missing", w->t[i].name);
        if (t->n_dims != w->t[i].n_dims) fail_msg("%s: %d dims, want %d", t->name, t->n_dims, w->t[i].n_dims);
        for (int d = 0; d < 3; d++)
            if (t->ne[d] != w->t[i].ne[d])
                fail_msg("%s: ne[%d] = %lld, want %lld", t->name, d, (long long)t->ne[d], (long long)w->t[i].ne[d]);
        const int type = t->n_dims == 1 || strstr(t->name, "ffn_gate_inp") ? KT_F32 : mat_type;
        if (t->type != type) fail_msg("%s is %s, want %s", t->name, kern_type_name(t->type), kern_type_name(type));
    }
    if (gguf_n_tensors(g) != w->n) {
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            bool known = false;
            for (int j = 0; j < w->n; j++) known |= !strcmp(w->t[j].name, gguf_tensor_at(g, i)->name);
            if (!known) print_message("unexpected tensor %s\n", gguf_tensor_at(g, i)->name);
        }
        fail_msg("%lld tensors, want %d", (long long)gguf_n_tensors(g), w->n);
    }
}

static void done(gguf_ctx *g, const char *path) {
    gguf_close(g);
    unlink(path);
}

/* the tensors a llama-like layer has: norms, q/k/v/o, gate/down/up */
static void dense_layer(want_list *w, int l, int C, int F, int q_rows, int kv_rows) {
    want(w, 1, C, 1, 1, "attn_norm.weight", l);
    want(w, 2, C, q_rows, 1, "attn_q.weight", l);
    want(w, 2, C, kv_rows, 1, "attn_k.weight", l);
    want(w, 2, C, kv_rows, 1, "attn_v.weight", l);
    want(w, 2, q_rows, C, 1, "attn_output.weight", l);
    want(w, 1, C, 1, 1, "ffn_norm.weight", l);
    want(w, 2, C, F, 1, "ffn_gate.weight", l);
    want(w, 2, F, C, 1, "ffn_down.weight", l);
    want(w, 2, C, F, 1, "ffn_up.weight", l);
}

/* Llama 3.2 1B: llama3 rope_freqs (factor 32, low 1, high 4, original
 * context 8192, base 500000, head dim 64), tied output. */
static void test_llama32(void **state) {
    (void)state;
    char path[2048];
    gguf_ctx *g = synth("llama3.2-1b", 1, "Q8_0", 0, path, sizeof path);
    common(g, "llama", 1, 16, 2048, 8192, 32, 8, 64, 1e-5f, 500000.0f, 128256);
    key_u32(g, "llama", "context_length", 131072);
    key_u32(g, "llama", "attention.key_length", 64);
    want_list *w = calloc(1, sizeof *w);
    want(w, 2, 2048, VOCAB, 1, "token_embd.weight", -1);
    want(w, 1, 2048, 1, 1, "output_norm.weight", -1);
    want(w, 1, 32, 1, 1, "rope_freqs.weight", -1);
    dense_layer(w, 0, 2048, 8192, 2048, 512);
    tensors(g, w, KT_Q8_0);
    /* pair i rotates at 500000^(-i/32): wavelength 2 pi 500000^(i/32) is
     * below 8192/4 for i <= 14 (factor 1), above 8192/1 for i >= 18 (32) */
    const gguf_tensor *f = gguf_find_tensor(g, "rope_freqs.weight");
    const float *v = f->data;
    for (int i = 0; i < 32; i++) {
        if (i <= 14) assert_true(v[i] == 1.0f);
        else if (i >= 18) assert_true(v[i] == 32.0f);
        else assert_true(v[i] > v[i - 1] && v[i] < 32.0f);
    }
    free(w);
    done(g, path);
}

/* Qwen2.5 0.5B: q/k/v biases, 14 heads of 64 over 2 KV heads, tied. */
static void test_qwen25(void **state) {
    (void)state;
    char path[2048];
    gguf_ctx *g = synth("qwen2.5-0.5b", 2, "F32", 0, path, sizeof path);
    common(g, "qwen2", 2, 24, 896, 4864, 14, 2, 64, 1e-6f, 1e6f, 151936);
    key_u32(g, "qwen2", "context_length", 32768);
    key_absent(g, "qwen2", "attention.key_length"); /* no head_dim in its config */
    want_list *w = calloc(1, sizeof *w);
    want(w, 2, 896, VOCAB, 1, "token_embd.weight", -1);
    want(w, 1, 896, 1, 1, "output_norm.weight", -1);
    for (int l = 0; l < 2; l++) {
        dense_layer(w, l, 896, 4864, 896, 128);
        want(w, 1, 896, 1, 1, "attn_q.bias", l);
        want(w, 1, 128, 1, 1, "attn_k.bias", l);
        want(w, 1, 128, 1, 1, "attn_v.bias", l);
    }
    tensors(g, w, KT_F32);
    free(w);
    done(g, path);
}

/* Qwen3 0.6B: q/k norms over head_dim 128, 16 x 128 = 2048 != 1024. */
static void test_qwen3(void **state) {
    (void)state;
    char path[2048];
    gguf_ctx *g = synth("qwen3-0.6b", 2, "Q8_0", 0, path, sizeof path);
    common(g, "qwen3", 2, 28, 1024, 3072, 16, 8, 128, 1e-6f, 1e6f, 151936);
    key_u32(g, "qwen3", "context_length", 40960);
    key_u32(g, "qwen3", "attention.key_length", 128);
    key_u32(g, "qwen3", "attention.value_length", 128);
    want_list *w = calloc(1, sizeof *w);
    want(w, 2, 1024, VOCAB, 1, "token_embd.weight", -1);
    want(w, 1, 1024, 1, 1, "output_norm.weight", -1);
    for (int l = 0; l < 2; l++) {
        dense_layer(w, l, 1024, 3072, 2048, 1024);
        want(w, 1, 128, 1, 1, "attn_q_norm.weight", l);
        want(w, 1, 128, 1, 1, "attn_k_norm.weight", l);
    }
    tensors(g, w, KT_Q8_0);
    free(w);
    done(g, path);
}

/* Qwen3 30B-A3B: 128 experts of 768 (8 here), 8 used, router, 3-D expert
 * tensors (ne = cols, rows, experts), q/k norms, untied output. */
static void test_qwen3moe(void **state) {
    (void)state;
    char path[2048];
    gguf_ctx *g = synth("qwen3-30b-a3b", 1, "Q8_0", 8, path, sizeof path);
    common(g, "qwen3moe", 1, 48, 2048, 6144, 32, 4, 128, 1e-6f, 1e6f, 151936);
    key_u32(g, "qwen3moe", "attention.key_length", 128);
    key_u32(g, "qwen3moe", "expert_count", 8);
    key_u32(g, "qwen3moe", "expert_used_count", 8);
    key_u32(g, "qwen3moe", "expert_feed_forward_length", 768);
    uint32_t v;
    assert_true(gguf_get_u32(g, "kvant.synthetic_experts_of", &v));
    assert_int_equal(v, 128);
    want_list *w = calloc(1, sizeof *w);
    want(w, 2, 2048, VOCAB, 1, "token_embd.weight", -1);
    want(w, 1, 2048, 1, 1, "output_norm.weight", -1);
    want(w, 2, 2048, VOCAB, 1, "output.weight", -1);
    want(w, 1, 2048, 1, 1, "attn_norm.weight", 0);
    want(w, 2, 2048, 4096, 1, "attn_q.weight", 0);
    want(w, 2, 2048, 512, 1, "attn_k.weight", 0);
    want(w, 2, 2048, 512, 1, "attn_v.weight", 0);
    want(w, 2, 4096, 2048, 1, "attn_output.weight", 0);
    want(w, 1, 128, 1, 1, "attn_q_norm.weight", 0);
    want(w, 1, 128, 1, 1, "attn_k_norm.weight", 0);
    want(w, 1, 2048, 1, 1, "ffn_norm.weight", 0);
    want(w, 2, 2048, 8, 1, "ffn_gate_inp.weight", 0);
    want(w, 3, 2048, 768, 8, "ffn_gate_exps.weight", 0);
    want(w, 3, 768, 2048, 8, "ffn_down_exps.weight", 0);
    want(w, 3, 2048, 768, 8, "ffn_up_exps.weight", 0);
    tensors(g, w, KT_Q8_0);
    free(w);
    done(g, path);
}

/* Gemma 3 1B: MQA with head_dim 256, window 512 on 5 of every 6 layers,
 * rope bases 1e6 / 1e4, q/k norms, post-attention and post-FFN norms. */
static void test_gemma3(void **state) {
    (void)state;
    char path[2048];
    gguf_ctx *g = synth("gemma3-1b", 1, "F32", 0, path, sizeof path);
    common(g, "gemma3", 1, 26, 1152, 6912, 4, 1, 256, 1e-6f, 1e6f, 262144);
    key_u32(g, "gemma3", "context_length", 32768);
    key_u32(g, "gemma3", "attention.key_length", 256);
    key_u32(g, "gemma3", "attention.value_length", 256);
    key_u32(g, "gemma3", "attention.sliding_window", 512);
    key_u32(g, "gemma3", "attention.sliding_window_pattern", 6);
    key_f32(g, "gemma3", "rope.freq_base_swa", 10000.0f);
    want_list *w = calloc(1, sizeof *w);
    want(w, 2, 1152, VOCAB, 1, "token_embd.weight", -1);
    want(w, 1, 1152, 1, 1, "output_norm.weight", -1);
    dense_layer(w, 0, 1152, 6912, 1024, 256);
    want(w, 1, 1152, 1, 1, "post_attention_norm.weight", 0);
    want(w, 1, 1152, 1, 1, "post_ffw_norm.weight", 0);
    want(w, 1, 256, 1, 1, "attn_q_norm.weight", 0);
    want(w, 1, 256, 1, 1, "attn_k_norm.weight", 0);
    tensors(g, w, KT_F32);
    /* norms are stored as llama.cpp's converter writes them, (1 + w): near 1 */
    const float *n = gguf_find_tensor(g, "blk.0.post_ffw_norm.weight")->data;
    for (int i = 0; i < 1152; i++) assert_true(n[i] > 0.9f && n[i] < 1.1f);
    free(w);
    done(g, path);
}

/* Phi-4-mini: fused qkv (24 + 2 x 8 heads of 128), fused gate|up (2 x 8192),
 * partial rotary 96, longrope factors (48 = 96 / 2), original context 4096. */
static void test_phi4(void **state) {
    (void)state;
    char path[2048];
    gguf_ctx *g = synth("phi4-mini", 1, "Q8_0", 0, path, sizeof path);
    common(g, "phi3", 1, 32, 3072, 8192, 24, 8, 96, 1e-5f, 10000.0f, 200064);
    key_u32(g, "phi3", "context_length", 131072);
    key_u32(g, "phi3", "rope.scaling.original_context_length", 4096);
    key_u32(g, "phi3", "attention.sliding_window", 262144);
    key_f32(g, "phi3", "rope.scaling.attn_factor", (float)sqrt(17.0 / 12.0)); /* sqrt(1 + ln 32 / ln 4096) */
    key_absent(g, "phi3", "rope.scaling.type");
    want_list *w = calloc(1, sizeof *w);
    want(w, 2, 3072, VOCAB, 1, "token_embd.weight", -1);
    want(w, 1, 3072, 1, 1, "output_norm.weight", -1);
    want(w, 1, 48, 1, 1, "rope_factors_long.weight", -1);
    want(w, 1, 48, 1, 1, "rope_factors_short.weight", -1);
    want(w, 1, 3072, 1, 1, "attn_norm.weight", 0);
    want(w, 2, 3072, 5120, 1, "attn_qkv.weight", 0);
    want(w, 2, 3072, 3072, 1, "attn_output.weight", 0);
    want(w, 1, 3072, 1, 1, "ffn_norm.weight", 0);
    want(w, 2, 8192, 3072, 1, "ffn_down.weight", 0);
    want(w, 2, 3072, 16384, 1, "ffn_up.weight", 0);
    tensors(g, w, KT_Q8_0);
    const float *lf = gguf_find_tensor(g, "rope_factors_long.weight")->data;
    const float *sf = gguf_find_tensor(g, "rope_factors_short.weight")->data;
    assert_true(lf[0] == 1.0f && fabsf(lf[47] - 47.77f) < 1e-4f);
    for (int i = 0; i < 48; i++) assert_true(sf[i] == 1.0f);
    free(w);
    done(g, path);
}

/* Bad cuts are argument errors; the command line lists the shapes. */
static void test_synth_shape_args(void **state) {
    (void)state;
    kvant_status st = {0};
    synth_params p = {.shape = "gemma3-1b", .out_path = "/nonexistent/x.gguf", .quiet = true, .n_layers = 27};
    assert_int_equal(synth_write(&p, &st), KVANT_ERR_ARG);
    p = (synth_params){.shape = "qwen3-30b-a3b", .out_path = "/nonexistent/x.gguf", .quiet = true,
                       .n_layers = 1, .n_expert = 4};
    assert_int_equal(synth_write(&p, &st), KVANT_ERR_ARG);
    p = (synth_params){.shape = "qwen3-0.6b", .out_path = "/nonexistent/x.gguf", .quiet = true,
                       .n_layers = 1, .n_vocab = 100};
    assert_int_equal(synth_write(&p, &st), KVANT_ERR_ARG);

    char cmd[4096];
    int rc;
    snprintf(cmd, sizeof cmd, "%s synth --help", KVANT_BIN);
    char *out = run_capture(cmd, &rc);
    assert_int_equal(rc, 0);
    const char *names[] = {"llama3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b", "qwen3-30b-a3b", "gemma3-1b", "phi4-mini",
                           "--layers"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strstr(out, names[i])) fail_msg("synth --help does not mention %s", names[i]);
    free(out);
    snprintf(cmd, sizeof cmd, "%s synth --shape gemma3-1b --layers 27 -o %s/x.gguf >/dev/null 2>&1", KVANT_BIN,
             KVANT_TEST_TMP);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 2);
    snprintf(cmd, sizeof cmd, "%s synth --shape gemma3-1b --layers 0 -o %s/x.gguf >/dev/null 2>&1", KVANT_BIN,
             KVANT_TEST_TMP);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama32), cmocka_unit_test(test_qwen25),  cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_qwen3moe), cmocka_unit_test(test_gemma3), cmocka_unit_test(test_phi4),
        cmocka_unit_test(test_synth_shape_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
