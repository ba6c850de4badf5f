/* synth.c - synthetic models at real shapes, for benchmarks.
 *
 * Random weights (fixed seed, deterministic whatever the thread count),
 * a dummy SentencePiece vocabulary (control tokens, the 256 byte tokens,
 * then filler pieces) of the model's size, and metadata that says plainly
 * the file is synthetic.  Throughput does not depend on weight values; the
 * values are scaled so activations stay finite (uniform, std
 * 1/sqrt(fan-in); norms near 1, biases small).
 *
 * Each shape is written in its own GGUF architecture (llama, qwen2, qwen3,
 * qwen3moe, gemma3, phi3) with the keys and tensor names llama.cpp's loader
 * reads (src/models/<arch>.cpp) and the extra tensors its converter writes
 * (Llama 3's rope_freqs, Phi-3's rope_factors_long/short), so one file runs
 * in both programs.  The shapes before llama3.2-1b write the same bytes as
 * before the families were added. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"
#include "compress/synth.h"
#include "kernels/types.h"

/* Hyperparameters from each model's published config.json (HF). */
static const synth_shape k_shapes[] = {
    /* name, arch,          dim  hidden layers heads kv  vocab    ctx */
    {"tiny", "llama",        128,   384,  2,    4,   2,    512,    512, .rope_base = 10000, .norm_eps = 1e-5f,
     .what = "a 2-layer toy for tests"},
    {"stories15M", "llama",  288,   768,  6,    6,   6,  32000,    256, .rope_base = 10000, .norm_eps = 1e-5f,
     .what = "llama2.c stories15M"},
    {"stories110M", "llama", 768,  2048, 12,   12,  12,  32000,   2048, .rope_base = 10000, .norm_eps = 1e-5f,
     .what = "llama2.c stories110M"},
    {"tinyllama-1.1b", "llama", 2048, 5632, 22, 32,  4,  32000,   2048, .rope_base = 10000, .norm_eps = 1e-5f,
     .what = "TinyLlama 1.1B"},
    {"llama2-7b", "llama",  4096, 11008, 32,   32,  32,  32000,   4096, .rope_base = 10000, .norm_eps = 1e-5f,
     .what = "Llama 2 7B"},
    {"llama3.2-1b", "llama", 2048, 8192, 16,   32,   8, 128256, 131072, .head_dim = 64, .rope_base = 500000,
     .norm_eps = 1e-5f, .tied = true, .rope_scaling = SYNTH_ROPE_LLAMA3, .rope_factor = 32, .rope_low = 1,
     .rope_high = 4, .rope_orig_ctx = 8192,
     .what = "Llama 3.2 1B (llama, GQA 32/8, llama3 rope_freqs, tied)"},
    {"qwen2.5-0.5b", "qwen2", 896, 4864, 24,   14,   2, 151936,  32768, .rope_base = 1e6f, .norm_eps = 1e-6f,
     .tied = true, .what = "Qwen2.5 0.5B (qwen2, q/k/v biases, GQA 14/2, tied)"},
    {"qwen3-0.6b", "qwen3", 1024,  3072, 28,   16,   8, 151936,  40960, .head_dim = 128, .rope_base = 1e6f,
     .norm_eps = 1e-6f, .tied = true, .what = "Qwen3 0.6B (qwen3, q/k norms, 16 x 128 heads, tied)"},
    {"qwen3-30b-a3b", "qwen3moe", 2048, 6144, 48, 32,   4, 151936,  40960, .head_dim = 128, .rope_base = 1e6f,
     .norm_eps = 1e-6f, .n_expert = 128, .n_expert_used = 8, .expert_hidden = 768,
     .what = "Qwen3 30B-A3B (qwen3moe, 128 experts, 8 used; --layers)"},
    {"gemma3-1b", "gemma3", 1152,  6912, 26,    4,   1, 262144,  32768, .head_dim = 256, .rope_base = 1e6f,
     .norm_eps = 1e-6f, .tied = true, .swa_window = 512, .swa_pattern = 6, .rope_base_swa = 10000,
     .what = "Gemma 3 1B (gemma3, MQA, 5:1 sliding window 512, tied)"},
    {"phi4-mini", "phi3",   3072,  8192, 32,   24,   8, 200064, 131072, .rope_dim = 96, .rope_base = 10000,
     .norm_eps = 1e-5f, .tied = true, .swa_window = 262144, .rope_scaling = SYNTH_ROPE_LONGROPE,
     .rope_orig_ctx = 4096,
     .what = "Phi-4-mini (phi3, fused qkv/gate-up, rotary 96/128, tied)"},
};

/* Phi-4-mini-instruct's rope_scaling.long_factor (config.json); its
 * short_factor is all 1.0.  One factor per rotated pair (rope_dim / 2). */
static const float k_phi4_long_factor[48] = {
    1.0f,        1.118320672f, 1.250641126f, 1.398617824f, 1.564103225f, 1.74916897f,  1.956131817f, 2.187582649f,
    2.446418898f, 2.735880826f, 3.059592084f, 3.421605075f, 3.826451687f, 4.279200023f, 4.785517845f, 5.351743533f,
    5.984965424f, 6.693110555f, 7.485043894f, 8.370679318f, 9.36110372f,  10.4687158f,  11.70738129f, 13.09260651f,
    14.64173252f, 16.37415215f, 18.31155283f, 20.47818807f, 22.90118105f, 25.61086418f, 28.64115884f, 32.03f,
    32.1f,        32.13f,       32.23f,       32.6f,        32.61f,       32.64f,       32.66f,       32.7f,
    32.71f,       32.93f,       32.97f,       33.28f,       33.49f,       33.5f,        44.16f,       47.77f,
};

const synth_shape *synth_shapes(int *n) {
    *n = (int)(sizeof k_shapes / sizeof *k_shapes);
    return k_shapes;
}

/* ---- random fill on the pool: row r of tensor `salt` from its own stream ---- */
typedef struct {
    float *dst;
    int64_t rows, cols;
    uint64_t seed;
    float scale, offset;
} fill_job;

static void fill_task(void *ctx, int ith, int nth) {
    const fill_job *j = ctx;
    int64_t lo, hi;
    core_split(j->rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        uint64_t s = core_mix64(j->seed ^ core_mix64((uint64_t)r)) | 1;
        float *row = j->dst + r * j->cols;
        for (int64_t c = 0; c < j->cols; c++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            const float u = (float)(s >> 40) * (2.0f / 16777216.0f) - 1.0f; /* uniform [-1, 1) */
            row[c] = j->offset + j->scale * u;
        }
    }
}

/* ---- the vocabulary ---------------------------------------------------------- */
static void add_vocab(gguf_writer *w, int n_vocab) {
    char **toks = malloc(sizeof(char *) * (size_t)n_vocab);
    float *scores = malloc(sizeof(float) * (size_t)n_vocab);
    int32_t *types = malloc(sizeof(int32_t) * (size_t)n_vocab);
    for (int i = 0; i < n_vocab; i++) {
        char buf[32];
        if (i == 0) snprintf(buf, sizeof buf, "<unk>");
        else if (i == 1) snprintf(buf, sizeof buf, "<s>");
        else if (i == 2) snprintf(buf, sizeof buf, "</s>");
        else if (i < 3 + 256) snprintf(buf, sizeof buf, "<0x%02X>", (unsigned)(i - 3));
        else snprintf(buf, sizeof buf, "\xe2\x96\x81t%d", i); /* "▁t<i>" */
        toks[i] = strdup(buf);
        scores[i] = i < 3 + 256 ? 0.0f : -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 3 + 256 ? 6 : 1;
    }
    gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)n_vocab);
    gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, (uint64_t)n_vocab);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)n_vocab);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    for (int i = 0; i < n_vocab; i++) free(toks[i]);
    free(toks);
    free(scores);
    free(types);
}

/* ---- the tensor list --------------------------------------------------------- */
typedef struct {
    char name[64];
    int n_dims;
    int64_t ne[3];           /* ggml order: ne[0] = row length */
    float scale, offset;     /* random: offset + scale * U[-1, 1) */
    const float *data;       /* or exactly these ne[0] values (1-D) */
} spec;

typedef struct {
    spec *s;
    int n, cap;
    bool oom;
} spec_list;

static spec *add(spec_list *l, const char *name, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2, float scale,
                 float offset) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        spec *p = realloc(l->s, sizeof *p * (size_t)cap);
        if (!p) { l->oom = true; return NULL; }
        l->s = p;
        l->cap = cap;
    }
    spec *t = &l->s[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0; t->ne[1] = ne1; t->ne[2] = ne2;
    t->scale = scale; t->offset = offset;
    return t;
}
/* a matrix (rows x cols; E of them when E > 1) filled to std 1/sqrt(fan-in) */
static void add_mat(spec_list *l, const char *name, int64_t cols, int64_t rows, int64_t E) {
    add(l, name, E > 1 ? 3 : 2, cols, rows, E, sqrtf(3.0f / (float)cols), 0);
}
static void add_norm(spec_list *l, const char *name, int64_t n) {
    add(l, name, 1, n, 1, 1, 0.05f, 1.0f); /* near 1: Gemma's stored (1 + w) too */
}
static void add_bias(spec_list *l, const char *name, int64_t n) { add(l, name, 1, n, 1, 1, 0.02f, 0); }
static void add_values(spec_list *l, const char *name, const float *v, int64_t n) {
    spec *t = add(l, name, 1, n, 1, 1, 0, 0);
    if (t) t->data = v;
}
static const char *blk(char *buf, int layer, const char *what) {
    snprintf(buf, 64, "blk.%d.%s", layer, what);
    return buf;
}

/* Llama 3.1/3.2 frequency factors as llama.cpp's converter computes them
 * (conversion/llama.py): pair i turns at base^(-2i/D), wavelength 2 pi over
 * that; wavelengths under orig_ctx / high keep 1, over orig_ctx / low get
 * `factor`, the band between is smoothed. */
static void llama3_rope_freqs(const synth_shape *sh, int D, float *out) {
    const double lo_wl = sh->rope_orig_ctx / sh->rope_low, hi_wl = sh->rope_orig_ctx / sh->rope_high;
    for (int i = 0; i < D / 2; i++) {
        const double freq = 1.0 / pow(sh->rope_base, (2.0 * i) / D), wl = 2 * 3.14159265358979323846 / freq;
        if (wl < hi_wl) out[i] = 1.0f;
        else if (wl > lo_wl) out[i] = sh->rope_factor;
        else {
            const double smooth = (sh->rope_orig_ctx / wl - sh->rope_low) / (sh->rope_high - sh->rope_low);
            out[i] = (float)(1.0 / ((1 - smooth) / sh->rope_factor + smooth));
        }
    }
}

kvant_code synth_write(const synth_params *p, kvant_status *st) {
    const synth_shape *sh = NULL;
    for (size_t i = 0; i < sizeof k_shapes / sizeof *k_shapes; i++)
        if (!strcmp(p->shape, k_shapes[i].name)) sh = &k_shapes[i];
    if (!sh) return core_fail(st, KVANT_ERR_ARG, "unknown shape '%s'", p->shape);
    const quant_ftype *ft = quant_ftype_of(p->ftype);
    if (!ft) return core_fail(st, KVANT_ERR_ARG, "file type %d is none kvant writes", p->ftype);
    if (!kern_type_get(ft->base_type)->from_float_ref)
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "kvant cannot write %s yet", ft->name);
    if (p->n_layers < 0 || p->n_layers > sh->n_layers)
        return core_fail(st, KVANT_ERR_ARG, "--layers %d: %s has %d layers", p->n_layers, sh->name, sh->n_layers);
    if (p->n_vocab && p->n_vocab < 260)
        return core_fail(st, KVANT_ERR_ARG, "vocabulary of %d: the dummy vocabulary needs at least 260", p->n_vocab);
    if (p->n_expert && (!sh->n_expert || p->n_expert < sh->n_expert_used))
        return core_fail(st, KVANT_ERR_ARG, "%d experts: %s %s", p->n_expert, sh->name,
                         sh->n_expert ? "uses more per token" : "has no experts");

    const char *A = sh->arch;
    const bool phi3 = !strcmp(A, "phi3"), gemma3 = !strcmp(A, "gemma3"), moe = sh->n_expert > 0;
    const bool bias = !strcmp(A, "qwen2"), qk_norm = gemma3 || !strcmp(A, "qwen3") || !strcmp(A, "qwen3moe");
    const int C = sh->dim, F = sh->hidden, H = sh->n_heads, Hkv = sh->n_kv_heads;
    const int L = p->n_layers ? p->n_layers : sh->n_layers, V = p->n_vocab ? p->n_vocab : sh->vocab;
    const int E = p->n_expert ? p->n_expert : sh->n_expert, Fe = sh->expert_hidden;
    const int D = sh->head_dim ? sh->head_dim : C / H, R = sh->rope_dim ? sh->rope_dim : D;

    /* tensors in llama.cpp's order: embedding, output norm, output, rope factors, then per layer */
    spec_list l = {0};
    float rope_freqs[256], ones[256];
    add(&l, "token_embd.weight", 2, C, V, 1, 1.0f, 0);
    add_norm(&l, "output_norm.weight", C);
    if (!sh->tied) add_mat(&l, "output.weight", C, V, 1);
    if (sh->rope_scaling == SYNTH_ROPE_LLAMA3) {
        llama3_rope_freqs(sh, R, rope_freqs);
        add_values(&l, "rope_freqs.weight", rope_freqs, R / 2);
    } else if (sh->rope_scaling == SYNTH_ROPE_LONGROPE) {
        CORE_ASSERT(R / 2 == (int)(sizeof k_phi4_long_factor / sizeof *k_phi4_long_factor));
        for (int i = 0; i < R / 2; i++) ones[i] = 1.0f;
        add_values(&l, "rope_factors_long.weight", k_phi4_long_factor, R / 2);
        add_values(&l, "rope_factors_short.weight", ones, R / 2);
    }
    for (int i = 0; i < L; i++) {
        char nb[64];
        add_norm(&l, blk(nb, i, "attn_norm.weight"), C);
        if (phi3) {
            add_mat(&l, blk(nb, i, "attn_qkv.weight"), C, (int64_t)H * D + 2 * (int64_t)Hkv * D, 1);
        } else {
            add_mat(&l, blk(nb, i, "attn_q.weight"), C, (int64_t)H * D, 1);
            if (bias) add_bias(&l, blk(nb, i, "attn_q.bias"), (int64_t)H * D);
            add_mat(&l, blk(nb, i, "attn_k.weight"), C, (int64_t)Hkv * D, 1);
            if (bias) add_bias(&l, blk(nb, i, "attn_k.bias"), (int64_t)Hkv * D);
            add_mat(&l, blk(nb, i, "attn_v.weight"), C, (int64_t)Hkv * D, 1);
            if (bias) add_bias(&l, blk(nb, i, "attn_v.bias"), (int64_t)Hkv * D);
        }
        add_mat(&l, blk(nb, i, "attn_output.weight"), (int64_t)H * D, C, 1);
        if (gemma3) add_norm(&l, blk(nb, i, "post_attention_norm.weight"), C);
        if (qk_norm) {
            add_norm(&l, blk(nb, i, "attn_q_norm.weight"), D);
            add_norm(&l, blk(nb, i, "attn_k_norm.weight"), D);
        }
        add_norm(&l, blk(nb, i, "ffn_norm.weight"), C);
        if (moe) {
            add_mat(&l, blk(nb, i, "ffn_gate_inp.weight"), C, E, 1);
            add_mat(&l, blk(nb, i, "ffn_gate_exps.weight"), C, Fe, E);
            add_mat(&l, blk(nb, i, "ffn_down_exps.weight"), Fe, C, E);
            add_mat(&l, blk(nb, i, "ffn_up_exps.weight"), C, Fe, E);
        } else if (phi3) {
            add_mat(&l, blk(nb, i, "ffn_down.weight"), F, C, 1);
            add_mat(&l, blk(nb, i, "ffn_up.weight"), C, 2 * (int64_t)F, 1); /* gate rows, then up rows */
        } else {
            add_mat(&l, blk(nb, i, "ffn_gate.weight"), C, F, 1);
            add_mat(&l, blk(nb, i, "ffn_down.weight"), F, C, 1);
            add_mat(&l, blk(nb, i, "ffn_up.weight"), C, F, 1);
        }
        if (gemma3) add_norm(&l, blk(nb, i, "post_ffw_norm.weight"), C);
    }
    int64_t max_elems = 0;
    for (int i = 0; i < l.n; i++) {
        const int64_t n = l.s[i].ne[0] * l.s[i].ne[1] * l.s[i].ne[2];
        if (n > max_elems) max_elems = n;
    }

    gguf_writer *w = gguf_writer_new();
    core_pool *pool = core_pool_new(p->n_threads > 0 ? p->n_threads : core_cpu_count());
    float *f32 = l.oom ? NULL : malloc(sizeof(float) * (size_t)max_elems);
    void *q = NULL;            /* quantized rows: grown to the largest tensor that needs it */
    size_t q_cap = 0;
    if (!w || !pool || !f32) {
        gguf_writer_free(w); core_pool_free(pool); free(f32); free(q); free(l.s);
        return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    }
    char desc[384], cut[160] = "";
    int o = 0;
    if (L != sh->n_layers) o += snprintf(cut + o, sizeof cut - (size_t)o, ", first %d of its %d layers", L, sh->n_layers);
    if (V != sh->vocab) o += snprintf(cut + o, sizeof cut - (size_t)o, ", vocabulary cut to %d of %d", V, sh->vocab);
    if (E != sh->n_expert) snprintf(cut + o, sizeof cut - (size_t)o, ", %d of its %d experts", E, sh->n_expert);
    snprintf(desc, sizeof desc, "SYNTHETIC: random weights (seed %llu) at the shape of %s%s; for throughput only",
             (unsigned long long)p->seed, sh->what, cut);
    gguf_writer_add_str(w, "general.architecture", A);
    char name[128], key[128];
    snprintf(name, sizeof name, "synthetic-%s", sh->name);
    gguf_writer_add_str(w, "general.name", name);
    gguf_writer_add_str(w, "general.description", desc);
    gguf_writer_add_bool(w, "kvant.synthetic", true);
    gguf_writer_add_u64(w, "kvant.synthetic.seed", p->seed);
    if (L != sh->n_layers) gguf_writer_add_u32(w, "kvant.synthetic_layers_of", (uint32_t)sh->n_layers);
    if (V != sh->vocab) gguf_writer_add_u32(w, "kvant.synthetic_vocab_of", (uint32_t)sh->vocab);
    if (E != sh->n_expert) gguf_writer_add_u32(w, "kvant.synthetic_experts_of", (uint32_t)sh->n_expert);
    gguf_writer_add_u32(w, "general.quantization_version", 2);
    gguf_writer_add_u32(w, "general.file_type", (uint32_t)ft->ftype);
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", A, suffix), key)
    gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)(p->n_ctx > 0 ? p->n_ctx : sh->n_ctx));
    gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)C);
    gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)L);
    gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)F);
    gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)H);
    gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)Hkv);
    gguf_writer_add_u32(w, KEY("rope.dimension_count"), (uint32_t)R);
    gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), sh->norm_eps);
    gguf_writer_add_f32(w, KEY("rope.freq_base"), sh->rope_base);
    gguf_writer_add_u32(w, KEY("vocab_size"), (uint32_t)V);
    if (sh->head_dim) {
        gguf_writer_add_u32(w, KEY("attention.key_length"), (uint32_t)D);
        gguf_writer_add_u32(w, KEY("attention.value_length"), (uint32_t)D);
    }
    if (moe) {
        gguf_writer_add_u32(w, KEY("expert_count"), (uint32_t)E);
        gguf_writer_add_u32(w, KEY("expert_used_count"), (uint32_t)sh->n_expert_used);
        gguf_writer_add_u32(w, KEY("expert_feed_forward_length"), (uint32_t)Fe);
    }
    if (sh->swa_window) gguf_writer_add_u32(w, KEY("attention.sliding_window"), (uint32_t)sh->swa_window);
    if (sh->swa_pattern) {
        gguf_writer_add_u32(w, KEY("attention.sliding_window_pattern"), (uint32_t)sh->swa_pattern);
        gguf_writer_add_f32(w, KEY("rope.freq_base_swa"), sh->rope_base_swa);
    }
    if (sh->rope_scaling == SYNTH_ROPE_LONGROPE) {
        /* as llama.cpp's phi3 converter: no scaling type key, the original
         * context, and the attention factor sqrt(1 + ln(s) / ln(orig)) for
         * s = the config's context / the original (whatever --ctx declares) */
        const double s = (double)sh->n_ctx / sh->rope_orig_ctx;
        gguf_writer_add_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)sh->rope_orig_ctx);
        gguf_writer_add_f32(w, KEY("rope.scaling.attn_factor"),
                            s > 1 ? (float)sqrt(1 + log(s) / log((double)sh->rope_orig_ctx)) : 1.0f);
    }
#undef KEY
    add_vocab(w, V);

    quant_chooser qc = {.ft = ft, .pure = p->pure, .n_layers = L, .n_gqa = H / Hkv, .tied_output = sh->tied,
                        .n_expert = E, .n_attn_v = L};
    kvant_code rc = l.oom ? core_fail(st, KVANT_ERR_NOMEM, "out of memory") : KVANT_OK;
    double bytes = 0;
    for (int i = 0; i < l.n && rc == KVANT_OK; i++) {
        const spec *s = &l.s[i];
        const int64_t rows = s->ne[1] * s->ne[2];
        if (s->data) memcpy(f32, s->data, sizeof(float) * (size_t)s->ne[0]);
        else {
            fill_job fj = {f32, rows, s->ne[0], core_mix64(p->seed * 1000003ULL + (uint64_t)i), s->scale, s->offset};
            core_pool_run(pool, fill_task, &fj);
        }
        char note[256] = "";
        /* llama.cpp's choice, as kvant quantize makes it (the router stays F32, attn_qkv counts as attn_v) */
        const int type = quant_choose_type(&qc, s->name, s->n_dims, s->ne, KT_F32, note, sizeof note);
        const void *data = f32;
        if (!kern_type_get(type)->from_float_ref) {
            rc = core_fail(st, KVANT_ERR_UNSUPPORTED, "tensor '%s' needs type %s, which kvant cannot write yet", s->name,
                           kern_type_name(type));
            break;
        }
        if (type != KT_F32) {
            const size_t need = kern_row_bytes(type, s->ne[0]) * (size_t)rows;
            if (need > q_cap) {
                free(q);
                q_cap = need;
                if (!(q = malloc(q_cap))) {
                    rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory at tensor '%s'", s->name);
                    break;
                }
            }
            quant_rows(pool, type, f32, q, rows, s->ne[0]);
            data = q;
        }
        rc = gguf_writer_add_tensor(w, s->name, type, s->n_dims, s->ne, data, st);
        bytes += (double)kern_row_bytes(type, s->ne[0]) * (double)rows;
        if (!p->quiet)
            fprintf(stderr, "[%4d/%4d] %-32s %-5s%s%s\n", i + 1, l.n, s->name, kern_type_name(type),
                    note[0] ? "  note: " : "", note);
    }
    if (rc == KVANT_OK) rc = gguf_writer_write_file(w, p->out_path, st);
    if (rc == KVANT_OK && !p->quiet)
        fprintf(stderr, "wrote %s: SYNTHETIC %s (%s, %d layers), %s, %.1f MiB of weights\n", p->out_path, sh->name, A,
                L, ft->name, bytes / 1048576.0);
    free(l.s);
    free(f32);
    free(q);
    core_pool_free(pool);
    gguf_writer_free(w);
    return rc;
}
