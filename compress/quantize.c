/* quantize.c - llama.cpp-compatible quantization of GGUF files.
 *
 * Type choice follows llama.cpp's llama_tensor_get_type for the file types
 * kvant offers (legacy types, Q*_K_S / Q*_K_M mixes, Q6_K, F16, BF16):
 * output.weight (or a tied token_embd) goes to Q6_K unless the target is
 * Q8_0; Q4_K_M / Q5_K_M give attn_v and ffn_down Q6_K on the layers
 * use_more_bits() picks; Q4_K_S gives the first layers' attn_v / ffn_down
 * Q5_K; rows that do not divide a type's block fall back.  Fused attn_qkv
 * counts as attn_v (llama.cpp's category_is_attn_v); the experts' router
 * (ffn_gate_inp) is never quantized; an ffn_*_exps tensor's layer is the one
 * in its name; 8-expert models (Mixtral) get attn_v and attn_k in Q8_0 and
 * attn_output in Q5_K for the K mixes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "compress/compress.h"
#include "kernels/types.h"

static const quant_ftype k_ftypes[] = {
    {"F32", 0, KT_F32, MIX_NONE},     {"F16", 1, KT_F16, MIX_NONE},     {"BF16", 32, KT_BF16, MIX_NONE},
    {"Q8_0", 7, KT_Q8_0, MIX_NONE},   {"Q4_0", 2, KT_Q4_0, MIX_NONE},   {"Q4_1", 3, KT_Q4_1, MIX_NONE},
    {"Q5_0", 8, KT_Q5_0, MIX_NONE},   {"Q5_1", 9, KT_Q5_1, MIX_NONE},   {"Q2_K", 10, KT_Q2_K, MIX_NONE},
    {"Q3_K_S", 11, KT_Q3_K, MIX_K_S}, {"Q4_K_S", 14, KT_Q4_K, MIX_K_S}, {"Q4_K_M", 15, KT_Q4_K, MIX_K_M},
    {"Q5_K_S", 16, KT_Q5_K, MIX_K_S}, {"Q5_K_M", 17, KT_Q5_K, MIX_K_M}, {"Q6_K", 18, KT_Q6_K, MIX_NONE},
};

const quant_ftype *quant_ftype_list(int *n) {
    *n = (int)(sizeof k_ftypes / sizeof *k_ftypes);
    return k_ftypes;
}

const quant_ftype *quant_ftype_of(int ftype) {
    for (size_t i = 0; i < sizeof k_ftypes / sizeof *k_ftypes; i++)
        if (k_ftypes[i].ftype == ftype && kern_type_get(k_ftypes[i].base_type)->from_float_ref) return &k_ftypes[i];
    return NULL;
}

const quant_ftype *quant_ftype_find(const char *name) {
    for (size_t i = 0; i < sizeof k_ftypes / sizeof *k_ftypes; i++)
        if (!strcasecmp(name, k_ftypes[i].name)) return &k_ftypes[i];
    return NULL;
}

static bool is_quantized(int t) { return t != KT_F32 && t != KT_F16 && t != KT_BF16; }

/* llama.cpp: the first and last eighth of the layers, and every third between */
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* llama.cpp's fallback for rows that do not divide the block size */
static int fallback(quant_chooser *qc, const char *name, int64_t ncols, int type, int src_type, char *note,
                    size_t cap) {
    const kern_type_traits *tt = kern_type_get(type);
    if (ncols % tt->block_size == 0) return type;
    int fb;
    switch (type) {
    case KT_Q2_K: case KT_Q3_K: fb = KT_Q4_0; break;
    case KT_Q4_K: fb = KT_Q5_0; break;
    case KT_Q5_K: fb = KT_Q5_1; break;
    case KT_Q6_K: fb = KT_Q8_0; break;
    default: fb = src_type; break; /* legacy 32-blocks: keep the source type */
    }
    if (ncols % kern_type_get(fb)->block_size) fb = KT_F16;
    if (fb == src_type || (fb == KT_F16 && src_type == KT_F32)) fb = src_type;
    qc->n_fallback++;
    snprintf(note, cap, "%s: %lld columns do not divide %s's block of %lld; using %s", name, (long long)ncols,
             tt->name, (long long)tt->block_size, kern_type_name(fb));
    return fb;
}

int quant_choose_type(quant_chooser *qc, const char *name, int n_dims, const int64_t *ne, int src_type, char *note,
                      size_t cap) {
    if (note && cap) note[0] = 0;
    /* only matrices named *weight, never norms or the experts' router (llama.cpp's tensor_allows_quantization) */
    if (n_dims < 2 || !ends_with(name, "weight") || strstr(name, "_norm.weight") || strstr(name, "ffn_gate_inp.weight"))
        return src_type;
    const quant_ftype *ft = qc->ft;
    int t = ft->base_type;
    if (qc->pure || !is_quantized(t)) return fallback(qc, name, ne[0], t, src_type, note, cap);

    const bool is_output = !strcmp(name, "output.weight") || (qc->tied_output && !strcmp(name, "token_embd.weight"));
    const bool moe8 = qc->n_expert == 8;
    if (is_output) {
        if (ne[0] % kern_type_get(t)->block_size) t = KT_Q8_0;
        else if (t != KT_Q8_0) t = KT_Q6_K;
    } else if (strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight")) {
        const int n = qc->n_attn_v > 0 ? qc->n_attn_v : qc->n_layers;
        if (t == KT_Q2_K) t = qc->n_gqa >= 4 ? KT_Q4_K : KT_Q3_K;
        else if (ft->mix == MIX_K_M && (t == KT_Q4_K || t == KT_Q5_K) && use_more_bits(qc->i_attn_v, n))
            t = KT_Q6_K;
        else if (ft->mix == MIX_K_S && t == KT_Q4_K && qc->i_attn_v < 4) t = KT_Q5_K;
        if (moe8) t = KT_Q8_0; /* llama.cpp: ~128 MB on the 8-expert model */
        qc->i_attn_v++;
    } else if (strstr(name, "attn_k.weight")) {
        if (moe8) t = KT_Q8_0;
    } else if (strstr(name, "ffn_down")) {
        int i = qc->i_ffn_down;
        const int n = qc->n_layers;
        if (qc->n_expert > 1 && sscanf(name, "blk.%d.", &i) != 1) i = qc->i_ffn_down; /* experts: the name's layer */
        if (t == KT_Q2_K) t = KT_Q3_K;
        else if (ft->mix == MIX_K_M && (t == KT_Q4_K || t == KT_Q5_K) && use_more_bits(i, n)) t = KT_Q6_K;
        else if (ft->mix == MIX_K_S && t == KT_Q4_K && i < n / 8) t = KT_Q5_K;
        qc->i_ffn_down++;
    } else if (strstr(name, "attn_output.weight")) {
        if (moe8) {
            if (t == KT_Q2_K || (ft->mix != MIX_NONE && (t == KT_Q3_K || t == KT_Q4_K))) t = KT_Q5_K;
        } else if (t == KT_Q2_K) {
            t = KT_Q3_K;
        }
    }
    return fallback(qc, name, ne[0], t, src_type, note, cap);
}

/* ---- row conversion on the pool -------------------------------------------- */
typedef struct {
    kern_from_float_fn quant;
    const float *src;
    uint8_t *out;
    int64_t n_rows, row_len;
    size_t row_bytes;
} rows_job;

static void rows_task(void *ctx, int ith, int nth) {
    const rows_job *j = ctx;
    int64_t lo, hi;
    core_split(j->n_rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) j->quant(j->src + r * j->row_len, j->out + (size_t)r * j->row_bytes, j->row_len);
}

void quant_rows(core_pool *pool, int type, const float *src, void *out, int64_t n_rows, int64_t row_len) {
    const kern_type_traits *tt = kern_type_get(type);
    CORE_ASSERT(tt && tt->from_float_ref);
    rows_job j = {tt->from_float_ref, src, out, n_rows, row_len, kern_row_bytes(type, row_len)};
    core_pool_run(pool, rows_task, &j);
}

/* ---- whole files ---------------------------------------------------------------- */
static int get_u32(const gguf_ctx *g, const char *arch, const char *key, int dflt) {
    char full[256];
    uint32_t v;
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return gguf_get_u32(g, full, &v) ? (int)v : dflt;
}

kvant_code quant_file(const char *in_path, const char *out_path, const quant_params *p, kvant_status *st) {
    const quant_ftype *ft = quant_ftype_of(p->ftype);
    if (!ft) return core_fail(st, KVANT_ERR_ARG, "file type %d is none kvant writes", p->ftype);
    if (!kern_type_get(ft->base_type)->from_float_ref)
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "kvant cannot write %s yet", ft->name);
    gguf_ctx *g = gguf_open(in_path, st);
    if (!g) return st->code;
    gguf_str arch_s;
    char arch[64];
    if (!gguf_get_str(g, "general.architecture", &arch_s)) {
        gguf_close(g);
        return core_fail(st, KVANT_ERR_FORMAT, "%s: no general.architecture (not a model file?)", in_path);
    }
    snprintf(arch, sizeof arch, "%.*s", (int)(arch_s.len < 63 ? arch_s.len : 63), arch_s.data);
    if (gguf_n_tensors(g) == 0) {
        gguf_close(g);
        return core_fail(st, KVANT_ERR_FORMAT, "%s: no tensors to quantize (vocabulary-only file?)", in_path);
    }
    const int n_heads = get_u32(g, arch, "attention.head_count", 1);
    quant_chooser qc = {.ft = ft, .pure = p->pure, .n_layers = get_u32(g, arch, "block_count", 1),
                        .n_gqa = n_heads / get_u32(g, arch, "attention.head_count_kv", n_heads),
                        .tied_output = !gguf_find_tensor(g, "output.weight"),
                        .n_expert = get_u32(g, arch, "expert_count", 0)};
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const char *tn = gguf_tensor_at(g, i)->name;
        qc.n_attn_v += strstr(tn, "attn_v.weight") || strstr(tn, "attn_qkv.weight");
    }

    gguf_writer *w = gguf_writer_new();
    core_pool *pool = core_pool_new(p->n_threads > 0 ? p->n_threads : core_cpu_count());
    kvant_code rc = w && pool ? KVANT_OK : core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    /* metadata: everything but the keys this tool sets */
    for (int64_t i = 0; rc == KVANT_OK && i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        if (!strcmp(key, "general.file_type") || !strcmp(key, "general.quantization_version") ||
            !strcmp(key, "general.alignment"))
            continue;
        gguf_writer_add_value(w, key, gguf_kv_value(g, i));
    }
    if (rc == KVANT_OK) {
        gguf_writer_add_u32(w, "general.quantization_version", 2);
        gguf_writer_add_u32(w, "general.file_type", (uint32_t)ft->ftype);
    }
    float *f32 = NULL;
    size_t f32_cap = 0;
    void *qbuf = NULL;
    size_t q_cap = 0, bytes_in = 0, bytes_out = 0;
    double n_elems = 0;
    const double t0 = core_time_ms();
    const int64_t nt = gguf_n_tensors(g);
    for (int64_t i = 0; rc == KVANT_OK && i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        const kern_type_traits *src = kern_type_get(t->type);
        const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3], n = t->ne[0] * rows;
        char note[256];
        int type = quant_choose_type(&qc, t->name, t->n_dims, t->ne, t->type, note, sizeof note);
        const void *data = t->data;
        if (type != t->type) {
            if (!kern_type_get(type)->from_float_ref) {
                rc = core_fail(st, KVANT_ERR_UNSUPPORTED, "tensor '%s' needs type %s, which kvant cannot write yet",
                               t->name, kern_type_name(type));
                break;
            }
            if (!src->to_float) {
                rc = core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: tensor '%s' is %s, which kvant cannot convert", in_path,
                               t->name, src->name);
                break;
            }
            const size_t out_bytes = kern_row_bytes(type, t->ne[0]) * (size_t)rows;
            if ((size_t)n > f32_cap) { free(f32); f32 = malloc((size_t)n * sizeof *f32); f32_cap = (size_t)n; }
            if (out_bytes > q_cap) { free(qbuf); qbuf = malloc(out_bytes); q_cap = out_bytes; }
            if (!f32 || !qbuf) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory at tensor '%s'", t->name); break; }
            kern_rows_to_float(t->type, t->data, rows, t->ne[0], f32);
            quant_rows(pool, type, f32, qbuf, rows, t->ne[0]);
            data = qbuf;
        }
        rc = gguf_writer_add_tensor(w, t->name, type, t->n_dims, t->ne, data, st);
        bytes_in += t->nbytes;
        n_elems += (double)n;
        bytes_out += kern_row_bytes(type, t->ne[0]) * (size_t)rows;
        if (!p->quiet) {
            fprintf(stderr, "[%4lld/%4lld] %-32s %-5s -> %-5s %10.2f MiB%s%s\n", (long long)i + 1, (long long)nt,
                    t->name, src->name, kern_type_name(type), kern_row_bytes(type, t->ne[0]) * (double)rows / 1048576,
                    note[0] ? "  note: " : "", note[0] ? note : "");
        }
    }
    free(f32);
    free(qbuf);
    if (rc == KVANT_OK) rc = gguf_writer_write_file(w, out_path, st);
    if (rc == KVANT_OK && !p->quiet)
        fprintf(stderr, "quantized %s -> %s (%s): %.2f MiB -> %.2f MiB (%.2f bits/weight avg), %d fallback(s), %.1f s\n",
                in_path, out_path, ft->name, bytes_in / 1048576.0, bytes_out / 1048576.0, n_elems > 0 ? bytes_out * 8.0 / n_elems : 0.0, qc.n_fallback,
                (core_time_ms() - t0) / 1e3);
    gguf_writer_free(w);
    core_pool_free(pool);
    gguf_close(g);
    return rc;
}
