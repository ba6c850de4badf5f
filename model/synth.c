/* synth.c - synthetic llama models at real shapes, for benchmarks.
 *
 * Random weights (fixed seed, deterministic whatever the thread count),
 * a dummy SentencePiece vocabulary (control tokens, the 256 byte tokens,
 * then filler pieces), and metadata that says plainly the file is
 * synthetic.  Throughput does not depend on weight values; the values are
 * scaled so activations stay finite (uniform, std 1/sqrt(fan-in)). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"
#include "kernels/types.h"
#include "model/model.h"

static const model_synth_shape k_shapes[] = {
    /* name            dim   hidden layers heads kv  vocab  ctx */
    {"tiny",            128,   384,  2,    4,   2,   512,  512, "a 2-layer toy for tests"},
    {"stories15M",      288,   768,  6,    6,   6, 32000,  256, "llama2.c stories15M"},
    {"stories110M",     768,  2048, 12,   12,  12, 32000, 2048, "llama2.c stories110M"},
    {"tinyllama-1.1b", 2048,  5632, 22,   32,   4, 32000, 2048, "TinyLlama 1.1B"},
    {"llama2-7b",      4096, 11008, 32,   32,  32, 32000, 4096, "Llama 2 7B"},
};

const model_synth_shape *model_synth_shapes(int *n) {
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
        else if (i < 3 + 256) snprintf(buf, sizeof buf, "<0x%02X>", i - 3);
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

kvant_code model_synth(const model_synth_params *p, kvant_status *st) {
    const model_synth_shape *sh = NULL;
    for (size_t i = 0; i < sizeof k_shapes / sizeof *k_shapes; i++)
        if (!strcmp(p->shape, k_shapes[i].name)) sh = &k_shapes[i];
    if (!sh) return core_fail(st, KVANT_ERR_ARG, "unknown shape '%s'", p->shape);
    const quant_ftype *ft = quant_ftype_find(p->ftype ? p->ftype : "F32");
    if (!ft) return core_fail(st, KVANT_ERR_ARG, "unknown type '%s'", p->ftype);
    if (!kern_type_get(ft->base_type)->from_float_ref)
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "kvant cannot write %s yet", ft->name);

    const int C = sh->dim, F = sh->hidden, L = sh->n_layers, H = sh->n_heads, Hkv = sh->n_kv_heads, V = sh->vocab;
    const int D = C / H;
    gguf_writer *w = gguf_writer_new();
    core_pool *pool = core_pool_new(p->n_threads > 0 ? p->n_threads : core_cpu_count());
    float *f32 = malloc(sizeof(float) * (size_t)V * C > sizeof(float) * (size_t)F * C ? sizeof(float) * (size_t)V * C
                                                                                      : sizeof(float) * (size_t)F * C);
    void *q = malloc(sizeof(float) * (size_t)(V > F ? V : F) * C);
    if (!w || !pool || !f32 || !q) {
        gguf_writer_free(w); core_pool_free(pool); free(f32); free(q);
        return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    }
    char desc[256];
    snprintf(desc, sizeof desc, "SYNTHETIC: random weights (seed %llu) at the shape of %s; for throughput only",
             (unsigned long long)p->seed, sh->what);
    gguf_writer_add_str(w, "general.architecture", "llama");
    char name[128];
    snprintf(name, sizeof name, "synthetic-%s", sh->name);
    gguf_writer_add_str(w, "general.name", name);
    gguf_writer_add_str(w, "general.description", desc);
    gguf_writer_add_bool(w, "kvant.synthetic", true);
    gguf_writer_add_u64(w, "kvant.synthetic.seed", p->seed);
    gguf_writer_add_u32(w, "general.quantization_version", 2);
    gguf_writer_add_u32(w, "general.file_type", (uint32_t)ft->ftype);
    gguf_writer_add_u32(w, "llama.context_length", (uint32_t)(p->n_ctx > 0 ? p->n_ctx : sh->n_ctx));
    gguf_writer_add_u32(w, "llama.embedding_length", (uint32_t)C);
    gguf_writer_add_u32(w, "llama.block_count", (uint32_t)L);
    gguf_writer_add_u32(w, "llama.feed_forward_length", (uint32_t)F);
    gguf_writer_add_u32(w, "llama.attention.head_count", (uint32_t)H);
    gguf_writer_add_u32(w, "llama.attention.head_count_kv", (uint32_t)Hkv);
    gguf_writer_add_u32(w, "llama.rope.dimension_count", (uint32_t)D);
    gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f);
    gguf_writer_add_u32(w, "llama.vocab_size", (uint32_t)V);
    add_vocab(w, V);

    quant_chooser qc = {.ft = ft, .pure = p->pure, .n_layers = L, .n_gqa = H / Hkv, .tied_output = false};
    /* tensors in llama.cpp's order: embedding, output norm, output, then per layer */
    typedef struct { char name[64]; int64_t cols, rows; float scale, offset; } spec;
    const int n_spec = 3 + 9 * L;
    spec *specs = malloc(sizeof(spec) * (size_t)n_spec);
    int k = 0;
    specs[k++] = (spec){"token_embd.weight", C, V, 1.0f, 0};
    specs[k++] = (spec){"output_norm.weight", C, 1, 0.05f, 1.0f};
    specs[k++] = (spec){"output.weight", C, V, sqrtf(3.0f / C), 0};
    for (int l = 0; l < L; l++) {
        const struct { const char *s; int64_t cols, rows; float scale, offset; } lay[9] = {
            {"attn_norm", C, 1, 0.05f, 1.0f}, {"attn_q", C, (int64_t)H * D, sqrtf(3.0f / C), 0},
            {"attn_k", C, (int64_t)Hkv * D, sqrtf(3.0f / C), 0}, {"attn_v", C, (int64_t)Hkv * D, sqrtf(3.0f / C), 0},
            {"attn_output", (int64_t)H * D, C, sqrtf(3.0f / C), 0}, {"ffn_norm", C, 1, 0.05f, 1.0f},
            {"ffn_gate", C, F, sqrtf(3.0f / C), 0}, {"ffn_down", F, C, sqrtf(3.0f / F), 0},
            {"ffn_up", C, F, sqrtf(3.0f / C), 0}};
        for (int i = 0; i < 9; i++) {
            snprintf(specs[k].name, sizeof specs[k].name, "blk.%d.%s.weight", l, lay[i].s);
            specs[k].cols = lay[i].cols; specs[k].rows = lay[i].rows;
            specs[k].scale = lay[i].scale; specs[k].offset = lay[i].offset;
            k++;
        }
    }
    kvant_code rc = KVANT_OK;
    double bytes = 0;
    for (int i = 0; i < n_spec && rc == KVANT_OK; i++) {
        const spec *s = &specs[i];
        fill_job fj = {f32, s->rows, s->cols, core_mix64(p->seed * 1000003ULL + (uint64_t)i), s->scale, s->offset};
        core_pool_run(pool, fill_task, &fj);
        const int64_t ne[2] = {s->cols, s->rows};
        const int n_dims = s->rows > 1 ? 2 : 1;
        char note[256];
        const int type = quant_choose_type(&qc, s->name, n_dims, ne, KT_F32, note, sizeof note);
        const void *data = f32;
        if (!kern_type_get(type)->from_float_ref) {
            rc = core_fail(st, KVANT_ERR_UNSUPPORTED, "tensor '%s' needs type %s, which kvant cannot write yet", s->name,
                           kern_type_name(type));
            break;
        }
        if (type != KT_F32) {
            quant_rows(pool, type, f32, q, s->rows, s->cols);
            data = q;
        }
        rc = gguf_writer_add_tensor(w, s->name, type, n_dims, ne, data, st);
        bytes += (double)kern_row_bytes(type, s->cols) * (double)s->rows;
        if (!p->quiet)
            fprintf(stderr, "[%4d/%4d] %-28s %-5s%s%s\n", i + 1, n_spec, s->name, kern_type_name(type),
                    note[0] ? "  note: " : "", note);
    }
    if (rc == KVANT_OK) rc = gguf_writer_write_file(w, p->out_path, st);
    if (rc == KVANT_OK && !p->quiet)
        fprintf(stderr, "wrote %s: SYNTHETIC %s, %s, %.1f MiB of weights\n", p->out_path, sh->name, ft->name,
                bytes / 1048576.0);
    free(specs);
    free(f32);
    free(q);
    core_pool_free(pool);
    gguf_writer_free(w);
    return rc;
}
