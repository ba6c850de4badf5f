/* test_families.c - every model family kvant runs, against llama.cpp.
 *
 * Oracle: ../shared/reference/arch, small synthetic files of eight families
 * written by llama.cpp's own gguf-py (not by kvant) and llama.cpp's logits
 * for 96 ids as one causal batch (its exact F32 path).  Each family must
 * land within NMSE 1e-6 with the same argmax at >= 99% of positions, with
 * the flash and the naive attention kernels.  Then the equivalences that
 * the serving engine relies on, on every family (sliding windows, experts,
 * soft-caps included): decoding token by token gives the same bits as the
 * batch, a paged cache with small blocks the same bits as the contiguous
 * one.  Last, what must be refused: a key or tensor kvant would ignore. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "format/gguf.h"
#include "kvant.h"

static const char *const k_families[] = {"llama3", "qwen2", "qwen3", "qwen3moe",
                                         "gemma2", "gemma3", "mixtral", "phi3"};
#define N_FAM (int)(sizeof k_families / sizeof *k_families)
#define N_IDS 96

static int read_ids(int32_t *ids) {
    char *txt = read_file(shared_path("reference/arch/ids.txt"), NULL);
    int n = 0;
    for (char *p = txt; *p && n < N_IDS;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) { p++; continue; }
        ids[n++] = (int32_t)v;
        p = end;
    }
    free(txt);
    return n;
}

static kvant_model *open_family(const char *fam, int threads) {
    char rel[128];
    snprintf(rel, sizeof rel, "reference/arch/%s.gguf", fam);
    kvant_status st;
    kvant_model_params p = {.n_threads = threads};
    kvant_model *m = kvant_model_open(shared_path(rel), &p, &st);
    if (!m) fail_msg("open %s: %s", rel, st.msg);
    return m;
}

/* logits of the ids as one batch (or one token at a time) through a cache of the given kind */
static float *run(kvant_model *m, const int32_t *ids, int n, kvant_attn attn, kvant_cache kv, kvant_kv_type kv_type,
                  int block, bool one_by_one) {
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    kvant_seq_params sp = kvant_seq_default();
    sp.n_ctx = n;
    sp.attn = attn;
    sp.kv = kv;
    sp.kv_type = kv_type;
    sp.block_size = block;
    kvant_status st;
    kvant_seq *s = kvant_seq_new_ex(m, &sp, &st);
    if (!s) fail_msg("seq: %s", st.msg);
    float *out = malloc(sizeof(float) * (size_t)n * in.vocab_size);
    if (one_by_one) {
        for (int i = 0; i < n; i++)
            if (kvant_forward(s, ids + i, 1, out + (size_t)i * in.vocab_size, false, &st)) fail_msg("%s", st.msg);
    } else if (kvant_forward(s, ids, n, out, true, &st)) {
        fail_msg("forward: %s", st.msg);
    }
    kvant_seq_free(s);
    return out;
}

static void against_llamacpp(kvant_attn attn) {
    const char *attn_name = attn == KVANT_ATTN_FLASH ? "flash" : "naive";
    int32_t ids[N_IDS];
    assert_int_equal(read_ids(ids), N_IDS);
    for (int f = 0; f < N_FAM; f++) {
        kvant_model *m = open_family(k_families[f], 2);
        kvant_model_info in;
        kvant_model_get_info(m, &in);
        assert_int_equal(in.vocab_size, 512);
        /* F32 K/V as llama.cpp's reference run (F16 K/V: llama3 at NMSE 2.6e-6) */
        float *got = run(m, ids, N_IDS, attn, KVANT_CACHE_PAGED, KVANT_KV_F32, 0, false);
        char rel[128];
        snprintf(rel, sizeof rel, "reference/arch/%s.logits.f32", k_families[f]);
        size_t size;
        float *ref = (float *)read_file(shared_path(rel), &size);
        assert_int_equal(size, sizeof(float) * N_IDS * 512);
        double num = 0, den = 0;
        int same = 0, ties = 0;
        for (int t = 0; t < N_IDS; t++) {
            int a = 0, b = 0;
            for (int v = 0; v < 512; v++) {
                const double x = ref[t * 512 + v], y = got[t * 512 + v];
                num += (x - y) * (x - y), den += x * x;
                if (ref[t * 512 + v] > ref[t * 512 + a]) a = v;
                if (got[t * 512 + v] > got[t * 512 + b]) b = v;
            }
            same += a == b;
            /* a different argmax where llama.cpp's own top two are within 1e-5 relative: a tie
             * that rounding decides (gemma2 has one at position 42: 5.564040 vs 5.564010) */
            if (a != b) {
                const float gap = ref[t * 512 + a] - ref[t * 512 + b];
                if (gap <= 1e-5f * fabsf(ref[t * 512 + a])) ties++;
                print_message("  position %d: llama.cpp picks %d (%.6f), kvant %d (llama.cpp gives it %.6f)\n", t, a,
                              ref[t * 512 + a], b, ref[t * 512 + b]);
            }
        }
        const double nmse = num / den;
        print_message("%-9s (%s, %s attention) NMSE %.2e, argmax equal at %d/%d (%d near-ties)\n", k_families[f],
                      in.arch, attn_name, nmse, same, N_IDS, ties);
        if (!(nmse <= 1e-6)) fail_msg("%s: NMSE %.3e > 1e-6", k_families[f], nmse);
        /* >= 99% equal; a position that differs only by a near-tie of the reference is not a miss */
        if ((same + ties) * 100 < 99 * N_IDS)
            fail_msg("%s: argmax equal at only %d of %d (%d near-ties)", k_families[f], same, N_IDS, ties);
        free(ref);
        free(got);
        kvant_model_free(m);
    }
}

static void test_flash_vs_llamacpp(void **state) { (void)state; against_llamacpp(KVANT_ATTN_FLASH); }
static void test_naive_vs_llamacpp(void **state) { (void)state; against_llamacpp(KVANT_ATTN_NAIVE); }

/* What the engine assumes of every family: a row's logits are the same bits
 * whether its token is decoded alone or sits in a prefill batch (preempted
 * sequences are recomputed by prefill), and whatever the paged cache's block
 * size.  The sliding windows (32) and tiles (64) fall inside the 96 tokens. */
static void test_decode_equals_batch(void **state) {
    (void)state;
    int32_t ids[N_IDS];
    assert_int_equal(read_ids(ids), N_IDS);
    for (int f = 0; f < N_FAM; f++) {
        for (int threads = 1; threads <= 2; threads++) {
            kvant_model *m = open_family(k_families[f], threads);
            float *batch = run(m, ids, N_IDS, KVANT_ATTN_FLASH, KVANT_CACHE_PAGED, KVANT_KV_F16, 0, false);
            float *dec = run(m, ids, N_IDS, KVANT_ATTN_FLASH, KVANT_CACHE_PAGED, KVANT_KV_F16, 0, true);
            float *small = run(m, ids, N_IDS, KVANT_ATTN_FLASH, KVANT_CACHE_PAGED, KVANT_KV_F16, 4, false);
            float *contig = run(m, ids, N_IDS, KVANT_ATTN_FLASH, KVANT_CACHE_CONTIGUOUS, KVANT_KV_F16, 0, true);
            for (int i = 0; i < N_IDS * 512; i++) {
                if (batch[i] != dec[i]) fail_msg("%s: decode differs from the batch at %d", k_families[f], i);
                if (batch[i] != small[i]) fail_msg("%s: 4-token blocks differ at %d", k_families[f], i);
                if (batch[i] != contig[i]) fail_msg("%s: contiguous cache differs at %d", k_families[f], i);
            }
            free(batch), free(dec), free(small), free(contig);
            kvant_model_free(m);
        }
    }
}

/* ---- the serving engine on sliding-window families ------------------------------
 * gemma2 / gemma3 run with their local layers in a second pool whose blocks
 * leave a sequence with the window.  Several requests at once (shared
 * prefixes, so the prefix cache of both pools is used), with a roomy pool and
 * with a tight one that forces preemption and recomputation: every greedy
 * output equals the single-sequence contiguous cache's. */
static void greedy_alone(kvant_model *m, const int32_t *prompt, int n, int gen, int32_t *out) {
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    kvant_seq_params sp = kvant_seq_default();
    sp.n_ctx = n + gen;
    sp.kv = KVANT_CACHE_CONTIGUOUS;
    kvant_status st;
    kvant_seq *s = kvant_seq_new_ex(m, &sp, &st);
    assert_non_null(s);
    float *lg = malloc(sizeof(float) * in.vocab_size);
    assert_int_equal(kvant_forward(s, prompt, n, lg, false, &st), KVANT_OK);
    for (int g = 0; g < gen; g++) {
        int b = 0;
        for (int v = 1; v < in.vocab_size; v++) b = lg[v] > lg[b] ? v : b;
        out[g] = b;
        if (g + 1 < gen) assert_int_equal(kvant_forward(s, &out[g], 1, lg, false, &st), KVANT_OK);
    }
    free(lg);
    kvant_seq_free(s);
}

static void engine_matches(const char *fam, double kv_mib, bool same_length) {
    enum { R = 6, GEN = 30 };
    kvant_model *m = open_family(fam, 2);
    int32_t ids[N_IDS], prompt[R][N_IDS], want[R][GEN], got[R][GEN];
    int n_prompt[R], n_got[R] = {0};
    assert_int_equal(read_ids(ids), N_IDS);
    for (int r = 0; r < R; r++) { /* prompts of 40 .. 90 tokens (or all 40) sharing the first 39 */
        n_prompt[r] = same_length ? 40 : 40 + r * 10;
        memcpy(prompt[r], ids, sizeof(int32_t) * (size_t)n_prompt[r]);
        if (r % 2) prompt[r][n_prompt[r] - 1] = 3 + r;
        greedy_alone(m, prompt[r], n_prompt[r], GEN, want[r]);
    }
    kvant_engine_params ep = kvant_engine_default();
    ep.max_seqs = 4;
    ep.max_batch_tokens = 48;
    ep.max_ctx = 128;
    ep.block_size = 8;
    ep.kv_mem_mib = kv_mib;
    kvant_status st;
    kvant_engine *e = kvant_engine_new(m, &ep, &st);
    if (!e) fail_msg("%s engine: %s", fam, st.msg);
    int64_t id[R];
    for (int r = 0; r < R; r++) {
        kvant_request rq = {.sampling = kvant_sampling_default(), .max_tokens = GEN, .ignore_eos = true};
        rq.sampling.temperature = 0;
        id[r] = kvant_engine_submit(e, prompt[r], n_prompt[r], &rq, &st);
        if (id[r] <= 0) fail_msg("%s submit %d: %s", fam, r, st.msg);
    }
    kvant_event ev[64];
    for (int done = 0, steps = 0; done < R && steps < 10000; steps++) {
        const int n = kvant_engine_step(e, ev, 64, &st);
        assert_true(n >= 0);
        for (int i = 0; i < n; i++) {
            int r = 0;
            while (id[r] != ev[i].id) r++;
            if (ev[i].token >= 0) got[r][n_got[r]++] = ev[i].token;
            if (ev[i].finish != KVANT_FINISH_NONE) done++;
        }
    }
    kvant_engine_stats es;
    kvant_engine_get_stats(e, &es);
    print_message("%s engine (KV %.2f MiB, %lld global blocks): %lld preempted, %lld prefix-hit tokens\n", fam, kv_mib, (long long)es.blocks_total,
                  (long long)es.preempted_total, (long long)es.prefix_hit_tokens);
    if (kv_mib > 0) assert_true(es.preempted_total > 0); /* the tight pool did what it is for */
    assert_true(es.swa_blocks_total > 0 && es.swa_blocks_used == 0); /* the local pool, empty once all finished */
    for (int r = 0; r < R; r++) {
        assert_int_equal(n_got[r], GEN);
        for (int g = 0; g < GEN; g++)
            if (got[r][g] != want[r][g]) fail_msg("%s request %d token %d: %d, alone %d", fam, r, g, got[r][g], want[r][g]);
    }
    kvant_engine_free(e);
    kvant_model_free(m);
}

/* What the local pool saves: after 96 tokens, gemma3's 4 local layers (window
 * 32, blocks of 8) hold at most 32 + 8 positions each, the 2 global ones all
 * 96; with KVANT_SWA_TRIM=0 every layer holds every position. */
static size_t kv_after(const char *fam, int *swa_used) {
    kvant_model *m = open_family(fam, 1);
    int32_t ids[N_IDS];
    assert_int_equal(read_ids(ids), N_IDS);
    kvant_seq_params sp = kvant_seq_default();
    sp.n_ctx = N_IDS;
    sp.block_size = 8;
    kvant_status st;
    kvant_seq *s = kvant_seq_new_ex(m, &sp, &st);
    assert_non_null(s);
    for (int i = 0; i < N_IDS; i++) assert_int_equal(kvant_forward(s, ids + i, 1, NULL, false, &st), KVANT_OK);
    kvant_kv_stats ks;
    kvant_seq_kv_stats(s, &ks);
    *swa_used = (int)ks.swa_blocks_used;
    const size_t bytes = kvant_seq_kv_bytes(s);
    kvant_seq_free(s);
    kvant_model_free(m);
    return bytes;
}

static void test_swa_memory(void **state) {
    (void)state;
    int used;
    const size_t row = 2 * 64 * sizeof(uint16_t); /* K + V of one position of one layer: 1 KV head x 64, F16 */
    const size_t trimmed = kv_after("gemma3", &used);
    print_message("gemma3 after 96 tokens: %zu bytes of KV, %d local blocks in use\n", trimmed, used);
    assert_true(used >= 4 && used <= (32 + 8) / 8 + 1);
    assert_true(trimmed <= row * (2 * 96 + 4 * (32 + 8)) && trimmed >= row * (2 * 96 + 4 * 31));
    setenv("KVANT_SWA_TRIM", "0", 1);
    const size_t full = kv_after("gemma3", &used);
    unsetenv("KVANT_SWA_TRIM");
    assert_int_equal(used, 0);
    assert_int_equal(full, row * 6 * 96);
}

static void test_engine_sliding_window(void **state) {
    (void)state;
    engine_matches("gemma3", 0, false); /* enough for everyone */
    engine_matches("gemma2", 0, false);
    engine_matches("gemma3", 0.17, true); /* a tight pool: 4 sequences growing 30 tokens each preempt
                                             (F16 K/V: half of the 0.34 MiB this was at F32) */
}

/* ---- refusals: a copy of a family file with one thing added ---------------- */
static const char *copy_with(const char *fam, const char *extra_key, const char *extra_tensor, const char *out) {
    char rel[128];
    snprintf(rel, sizeof rel, "reference/arch/%s.gguf", fam);
    kvant_status st;
    gguf_ctx *g = gguf_open(shared_path(rel), &st);
    assert_non_null(g);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) gguf_writer_add_value(w, gguf_kv_key(g, i), gguf_kv_value(g, i));
    if (extra_key) gguf_writer_add_u32(w, extra_key, 7);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        assert_int_equal(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &st), KVANT_OK);
    }
    if (extra_tensor) {
        const float v[4] = {1, 2, 3, 4};
        const int64_t ne[4] = {4, 1, 1, 1};
        assert_int_equal(gguf_writer_add_tensor(w, extra_tensor, 0, 1, ne, v, &st), KVANT_OK);
    }
    const char *path = tmp_path(out);
    assert_int_equal(gguf_writer_write_file(w, path, &st), KVANT_OK);
    gguf_writer_free(w);
    gguf_close(g);
    return path;
}

static void expect_refused(const char *path, const char *needle) {
    kvant_status st;
    kvant_model_params p = {.n_threads = 1};
    kvant_model *m = kvant_model_open(path, &p, &st);
    if (m) fail_msg("%s was accepted; it must be refused (%s)", path, needle);
    if (!strstr(st.msg, needle)) fail_msg("message '%s' does not name '%s'", st.msg, needle);
}

static void test_refuses_what_it_would_ignore(void **state) {
    (void)state;
    /* the unchanged copy loads: the writer round trip is not what refuses */
    kvant_status st;
    kvant_model_params p = {.n_threads = 1};
    kvant_model *m = kvant_model_open(copy_with("qwen3", NULL, NULL, "fam_copy.gguf"), &p, &st);
    if (!m) fail_msg("the plain copy was refused: %s", st.msg);
    kvant_model_free(m);
    expect_refused(copy_with("qwen3", "qwen3.rope.dimension_sections", NULL, "fam_key.gguf"),
                   "qwen3.rope.dimension_sections");
    expect_refused(copy_with("gemma2", NULL, "blk.0.attn_q.bias_unknown", "fam_tensor.gguf"),
                   "blk.0.attn_q.bias_unknown");
    expect_refused(copy_with("llama3", "llama.expert_shared_count", NULL, "fam_shared.gguf"),
                   "llama.expert_shared_count");
    /* an architecture kvant does not run is named, with the ones it does */
    kvant_status st2;
    gguf_ctx *g = gguf_open(shared_path("reference/arch/phi3.gguf"), &st2);
    assert_non_null(g);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *k = gguf_kv_key(g, i);
        if (!strcmp(k, "general.architecture")) gguf_writer_add_str(w, k, "mamba");
        else gguf_writer_add_value(w, k, gguf_kv_value(g, i));
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &st2);
    }
    assert_int_equal(gguf_writer_write_file(w, tmp_path("fam_arch.gguf"), &st2), KVANT_OK);
    gguf_writer_free(w);
    gguf_close(g);
    expect_refused(tmp_path("fam_arch.gguf"), "'mamba' is not supported (kvant runs: llama");
}

/* kvant quantize applies llama.cpp's per-tensor rules to the new tensor kinds:
 * the router stays F32, fused attn_qkv counts as attn_v, experts take the
 * layer of their name, 8-expert models keep attn_k / attn_v in Q8_0.  The
 * expected types are what llama.cpp 34af94cd9's llama-quantize wrote for the
 * same files (kvant's output was byte-identical to it); the quantized model
 * then runs close to the F32 one. */
static void expect_types(const char *path, const char *const (*want)[2], int n) {
    kvant_status st;
    gguf_ctx *g = gguf_open(path, &st);
    assert_non_null(g);
    for (int i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, want[i][0]);
        if (!t) fail_msg("%s: no tensor %s", path, want[i][0]);
        if (atoi(want[i][1]) != t->type) fail_msg("%s: %s has type %d, llama.cpp gives %s", path, want[i][0], t->type, want[i][1]);
    }
    gguf_close(g);
}

static void test_quantize_rules(void **state) {
    (void)state;
    kvant_status st;
    kvant_quantize_params qp = {.type = KVANT_FTYPE_Q4_K_M, .quiet = true};
    char in[4096];
    snprintf(in, sizeof in, "%s", shared_path("reference/arch/qwen3moe.gguf"));
    assert_int_equal(kvant_quantize(in, tmp_path("fam_moe_q4km.gguf"), &qp, &st), KVANT_OK);
    static const char *const moe[][2] = {
        {"output.weight", "14"},          {"token_embd.weight", "12"},      {"blk.0.attn_k.weight", "8"},
        {"blk.0.attn_v.weight", "8"},     {"blk.0.attn_q.weight", "12"},    {"blk.0.attn_output.weight", "13"},
        {"blk.0.ffn_gate_inp.weight", "0"}, {"blk.0.ffn_down_exps.weight", "6"}, {"blk.1.ffn_down_exps.weight", "8"},
        {"blk.0.ffn_gate_exps.weight", "12"}, {"blk.1.ffn_up_exps.weight", "12"}, {"blk.0.attn_q_norm.weight", "0"},
    };
    expect_types(tmp_path("fam_moe_q4km.gguf"), moe, (int)(sizeof moe / sizeof *moe));
    snprintf(in, sizeof in, "%s", shared_path("reference/arch/phi3.gguf"));
    assert_int_equal(kvant_quantize(in, tmp_path("fam_phi3_q4km.gguf"), &qp, &st), KVANT_OK);
    static const char *const phi[][2] = {
        {"blk.0.attn_qkv.weight", "12"}, {"blk.1.attn_qkv.weight", "14"}, {"blk.0.ffn_down.weight", "12"},
        {"blk.1.ffn_down.weight", "14"}, {"blk.0.ffn_up.weight", "12"},   {"blk.0.attn_output.weight", "12"},
    };
    expect_types(tmp_path("fam_phi3_q4km.gguf"), phi, (int)(sizeof phi / sizeof *phi));
    /* Q8_0 copies run and stay near their F32 logits.  These random heavy-tailed weights
     * are far more sensitive than a trained model's (dense Q8_0: NMSE 1.6e-3 on qwen3), and
     * the MoE's router flips experts whose probabilities are near-equal (2.4e-2); a
     * broken expert path gives NMSE near 1, which is what the bound catches */
    qp.type = KVANT_FTYPE_Q8_0;
    snprintf(in, sizeof in, "%s", shared_path("reference/arch/qwen3moe.gguf"));
    assert_int_equal(kvant_quantize(in, tmp_path("fam_moe_q4km.gguf"), &qp, &st), KVANT_OK);
    snprintf(in, sizeof in, "%s", shared_path("reference/arch/phi3.gguf"));
    assert_int_equal(kvant_quantize(in, tmp_path("fam_phi3_q4km.gguf"), &qp, &st), KVANT_OK);
    int32_t ids[N_IDS];
    assert_int_equal(read_ids(ids), N_IDS);
    const char *fam[2] = {"qwen3moe", "phi3"}, *q[2] = {"fam_moe_q4km.gguf", "fam_phi3_q4km.gguf"}; /* now Q8_0 */
    for (int k = 0; k < 2; k++) {
        kvant_model *a = open_family(fam[k], 2);
        kvant_model_params p = {.n_threads = 2};
        kvant_model *b = kvant_model_open(tmp_path(q[k]), &p, &st);
        if (!b) fail_msg("%s: %s", q[k], st.msg);
        float *x = run(a, ids, N_IDS, KVANT_ATTN_FLASH, KVANT_CACHE_PAGED, KVANT_KV_F16, 0, false),
              *y = run(b, ids, N_IDS, KVANT_ATTN_FLASH, KVANT_CACHE_PAGED, KVANT_KV_F16, 0, false);
        double num = 0, den = 0;
        for (int i = 0; i < N_IDS * 512; i++) num += (x[i] - y[i]) * (double)(x[i] - y[i]), den += (double)x[i] * x[i];
        print_message("%s Q8_0 vs F32: NMSE %.2e\n", fam[k], num / den);
        assert_true(num / den < 0.1);
        free(x), free(y);
        kvant_model_free(a), kvant_model_free(b);
    }
}

/* Commands that handle only part of a family refuse it by name instead of
 * computing something else (prune and PTQ calibration rewrite the seven
 * separate dense matrices; INT8 hooks do not see experts; training is the
 * Llama-2 layout). */
static void expect_cli_refusal(const char *args, const char *needle) {
    char cmd[20000];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", KVANT_BIN, args);
    int status;
    char *out = run_capture(cmd, &status);
    if (status != 1 || !strstr(out, needle)) fail_msg("'%s': exit %d, output '%s' (want exit 1 and '%s')", args, status, out, needle);
    free(out);
}

static void test_commands_refuse_what_they_cannot(void **state) {
    (void)state;
    char moe[4096], phi[4096], gem[4096], txt[4096], args[16384];
    snprintf(moe, sizeof moe, "%s", shared_path("reference/arch/qwen3moe.gguf"));
    snprintf(phi, sizeof phi, "%s", shared_path("reference/arch/phi3.gguf"));
    snprintf(gem, sizeof gem, "%s", shared_path("reference/arch/gemma2.gguf"));
    snprintf(txt, sizeof txt, "%s", shared_path("corpora/tinystories_val_subset.txt"));
    snprintf(args, sizeof args, "prune %s %s --method magnitude --sparsity 0.5", moe, tmp_path("fam_x.gguf"));
    expect_cli_refusal(args, "pruning does not support this qwen3moe model yet: it has routed experts");
    snprintf(args, sizeof args, "prune %s %s --method magnitude --sparsity 0.5", phi, tmp_path("fam_x.gguf"));
    expect_cli_refusal(args, "it has fused attn_qkv");
    snprintf(args, sizeof args, "quantize %s %s --scheme zeropoint --bits 4 --calib %s", moe, tmp_path("fam_x.gguf"), txt);
    expect_cli_refusal(args, "PTQ calibration (--calib, --gptq) does not support this qwen3moe");
    snprintf(args, sizeof args, "ppl -m %s -f %s -c 64 --chunks 1 --w8a8", moe, txt);
    expect_cli_refusal(args, "INT8 inference");
    snprintf(args, sizeof args, "train -m %s -f %s -o %s --steps 1", gem, txt, tmp_path("fam_x.gguf"));
    expect_cli_refusal(args, "training (train, qat, distill) does not support this gemma2 model");
}

/* info reports what each family adds */
static void test_info_fields(void **state) {
    (void)state;
    kvant_model_info in;
    kvant_model *m = open_family("gemma3", 1);
    kvant_model_get_info(m, &in);
    assert_string_equal(in.arch, "gemma3");
    assert_int_equal(in.swa_window, 32);
    assert_int_equal(in.n_swa_layers, 4); /* pattern 3 over 6 layers: 0, 1, 3, 4 */
    assert_true(in.qk_norm && in.post_norms && in.tied_output);
    assert_string_equal(in.activation, "gelu_tanh");
    assert_float_equal(in.rope_base_swa, 10000.0f, 0);
    kvant_model_free(m);
    m = open_family("qwen3moe", 1);
    kvant_model_get_info(m, &in);
    assert_int_equal(in.n_expert, 8);
    assert_int_equal(in.n_expert_used, 2);
    assert_int_equal(in.expert_hidden, 128);
    kvant_model_free(m);
    m = open_family("llama3", 1);
    kvant_model_get_info(m, &in);
    assert_true(in.rope_freqs && in.tied_output);
    kvant_model_free(m);
    m = open_family("gemma2", 1);
    kvant_model_get_info(m, &in);
    assert_float_equal(in.attn_softcap, 4.0f, 0);
    assert_float_equal(in.final_softcap, 6.0f, 0);
    assert_int_equal(in.n_swa_layers, 2); /* layers 0 and 2 of 4 */
    kvant_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flash_vs_llamacpp),
        cmocka_unit_test(test_naive_vs_llamacpp),
        cmocka_unit_test(test_decode_equals_batch),
        cmocka_unit_test(test_engine_sliding_window),
        cmocka_unit_test(test_swa_memory),
        cmocka_unit_test(test_refuses_what_it_would_ignore),
        cmocka_unit_test(test_info_fields),
        cmocka_unit_test(test_quantize_rules),
        cmocka_unit_test(test_commands_refuse_what_they_cannot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
