/* prune_file.c - pruning whole GGUF models (prune_file in compress/prune.h).
 *
 * Calibration: the calib text is tokenized with the model's tokenizer and
 * its LAST calib_tokens tokens are cut into sequences of calib_ctx (first
 * token of each replaced by BOS, as the perplexity tool does), so the
 * evaluation chunks at the start of the same file are not seen.  The
 * model's calibration tap (model/model.h) gives the input of every linear
 * layer; four inputs per layer are distinct (q/k/v share one, gate/up
 * another): ATTN_IN, ATTN_OUT (wo), FFN_IN, FFN_DOWN.
 * One-shot (default): one pass over the dense model gathers every layer's
 * statistics.  Sequential: before layer l is pruned its inputs are
 * recollected with layers 0..l-1 already pruned (SparseGPT's and Wanda's
 * procedure); the pruned layers are kept as F32 copies meanwhile.
 *
 * Structured (target ffn): neuron f of a layer scores
 * ||X_down[:, f]||_2 * ||W_down[:, f]||_2 (the size of its contribution to
 * the FFN output); the lowest fraction are removed from gate/up (rows) and
 * down (columns).  Structured (target heads): KV group g (a KV head and its
 * H/Hkv query heads) scores sum over the group's query-head columns c of
 * wo of ||X_wo[:, c]||^2 * ||W_o[:, c]||^2; the lowest groups are removed
 * from wq (rows), wk / wv (rows), wo (columns).  The same count is removed
 * in every layer (GGUF keeps one head count / FFN length), so the config
 * keys feed_forward_length, attention.head_count(_kv), key_length and
 * value_length are rewritten. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"
#include "compress/prune.h"
#include "kernels/sparse24.h"
#include "kernels/types.h"
#include "model/model.h"

enum { SLOT_ATTN_IN, SLOT_ATTN_OUT, SLOT_FFN_IN, SLOT_FFN_DOWN, N_SLOTS };

/* the seven matrices of a layer, in the order they are written */
static const struct {
    const char *suffix;
    int slot;
} k_mats[] = {{"attn_q", SLOT_ATTN_IN},  {"attn_k", SLOT_ATTN_IN},  {"attn_v", SLOT_ATTN_IN},
              {"attn_output", SLOT_ATTN_OUT}, {"ffn_gate", SLOT_FFN_IN}, {"ffn_up", SLOT_FFN_IN},
              {"ffn_down", SLOT_FFN_DOWN}};
enum { N_MATS = 7 };

static model_mat *layer_mat(model_layer *L, int i) {
    model_mat *v[N_MATS] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return v[i];
}

/* ---- calibration ------------------------------------------------------------------------ */
typedef struct {
    prune_stats *s;   /* [n_layers * N_SLOTS] */
    int only_layer;   /* -1: all */
} calib_tap;

static void tap_fn(void *user, int layer, model_mm_id mm, const float *x, int T, int cols) {
    calib_tap *c = user;
    if (layer < 0 || (c->only_layer >= 0 && layer != c->only_layer)) return;
    int slot;
    switch (mm) {
    case MODEL_MM_WQ: slot = SLOT_ATTN_IN; break;
    case MODEL_MM_WO: slot = SLOT_ATTN_OUT; break;
    case MODEL_MM_GATE: slot = SLOT_FFN_IN; break;
    case MODEL_MM_DOWN: slot = SLOT_FFN_DOWN; break;
    default: return;
    }
    prune_stats *s = &c->s[layer * N_SLOTS + slot];
    if (s->K == cols) prune_stats_add(s, x, T);
}

static kvant_code run_calib(model *m, const int32_t *toks, int n_tok, int ctx, calib_tap *ct, kvant_status *st) {
    const model_config *c = &m->cfg;
    model_work *w = model_work_new(m, ctx, ctx, MODEL_ATTN_FLASH, st);
    if (!w) return st->code;
    kv_store *kv = kv_contiguous_new(c->n_layers, ctx, c->n_kv_heads * c->head_dim, KT_F32, st);
    if (!kv) { model_work_free(w); return st->code; }
    w->tap = tap_fn;
    w->hook_user = ct;
    int32_t *seq = malloc((size_t)ctx * sizeof *seq);
    kvant_code rc = seq ? KVANT_OK : core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    const int bos = tok_bos(m->tok);
    for (int i = 0; rc == KVANT_OK && i < n_tok; i += ctx) {
        const int n = n_tok - i < ctx ? n_tok - i : ctx;
        memcpy(seq, toks + i, (size_t)n * sizeof *seq);
        if (bos >= 0) seq[0] = bos;
        kv_clear(kv);
        rc = model_forward(m, w, kv, seq, n, NULL, false, st);
    }
    free(seq);
    kv_free(kv);
    model_work_free(w);
    return rc;
}

/* ---- helpers ------------------------------------------------------------------------------ */
static kvant_code mat_to_f32(const model_mat *M, float *out, kvant_status *st) {
    if (!kern_rows_to_float(M->type, M->data, M->rows, M->cols, out))
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "cannot convert type %s", kern_type_name(M->type));
    return KVANT_OK;
}

/* the type a pruned matrix of `cols` columns is written in; note says why on fallback */
static int out_type(const prune_params *p, int src, int64_t cols, const char *name, char *note, size_t cap) {
    note[0] = 0;
    if (p->format == PRUNE_DENSE) return src;
    const bool q8 = p->format == PRUNE_SPARSE24_Q8;
    const int t = q8 ? KT_S24_Q8 : KT_S24_F16;
    const int64_t bs = kern_type_get(t)->block_size;
    if (cols % bs == 0) return t;
    int fb = q8 && cols % 32 == 0 ? KT_Q8_0 : src;
    snprintf(note, cap, "%s: %lld columns do not divide %s's block of %lld; kept dense as %s", name, (long long)cols,
             kern_type_name(t), (long long)bs, kern_type_name(fb));
    return fb;
}

static kvant_code add_converted(gguf_writer *w, core_pool *pool, const char *name, int type, int n_dims,
                                const int64_t *ne, const float *f32, void **buf, size_t *cap, kvant_status *st) {
    const int64_t rows = ne[1] * ne[2] * ne[3];
    if (type == KT_F32) return gguf_writer_add_tensor(w, name, type, n_dims, ne, f32, st);
    const kern_type_traits *tt = kern_type_get(type);
    if (!tt || !tt->from_float_ref) return core_fail(st, KVANT_ERR_UNSUPPORTED, "cannot write type %s", kern_type_name(type));
    const size_t bytes = kern_row_bytes(type, ne[0]) * (size_t)rows;
    if (bytes > *cap) {
        free(*buf);
        *buf = malloc(bytes);
        *cap = *buf ? bytes : 0;
        if (!*buf) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    }
    quant_rows(pool, type, f32, *buf, rows, ne[0]);
    return gguf_writer_add_tensor(w, name, type, n_dims, ne, *buf, st);
}

static bool is_layer_matrix(const char *name) {
    if (strncmp(name, "blk.", 4)) return false;
    const char *dot = strchr(name + 4, '.');
    if (!dot) return false;
    for (int i = 0; i < N_MATS; i++) {
        const size_t n = strlen(k_mats[i].suffix);
        if (!strncmp(dot + 1, k_mats[i].suffix, n) && !strcmp(dot + 1 + n, ".weight")) return true;
    }
    return false;
}

static const char *method_name(prune_method m) {
    static const char *n[] = {"magnitude", "wanda", "sparsegpt", "structured"};
    return (int)m >= 0 && m <= PRUNE_STRUCTURED ? n[m] : "?";
}
static const char *target_name(prune_target t) { return t == PRUNE_HEADS ? "heads" : "ffn"; }
static const char *format_name(prune_format f) {
    return f == PRUNE_SPARSE24_Q8 ? "sparse24-q8" : f == PRUNE_SPARSE24_F16 ? "sparse24-f16" : "dense";
}

/* ---- structured ----------------------------------------------------------------------------- */
typedef struct {
    int F2, H2, Hkv2;       /* new sizes */
    int *ffn_keep;          /* [n_layers][F2] kept neuron indices, ascending */
    int *kv_keep;           /* [n_layers][Hkv2] kept KV groups, ascending */
} structured_plan;

static int cmp_desc_score(const void *a, const void *b) {
    const double *x = a, *y = b; /* {score, index}: higher score first, then lower index */
    if (x[0] != y[0]) return x[0] < y[0] ? 1 : -1;
    return x[1] < y[1] ? -1 : 1;
}
static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* keeps the n_keep highest of n scores; writes their indices ascending */
static void keep_top(const double *score, int n, int n_keep, int *keep) {
    double *p = malloc((size_t)n * 2 * sizeof *p);
    CORE_ASSERT(p);
    for (int i = 0; i < n; i++) { p[2 * i] = score[i]; p[2 * i + 1] = i; }
    qsort(p, (size_t)n, 2 * sizeof *p, cmp_desc_score);
    for (int i = 0; i < n_keep; i++) keep[i] = (int)p[2 * i + 1];
    qsort(keep, (size_t)n_keep, sizeof *keep, cmp_int);
    free(p);
}

static kvant_code plan_structured(model *m, const prune_params *p, const prune_stats *stats, structured_plan *pl,
                                  float *tmp, kvant_status *st) {
    const model_config *c = &m->cfg;
    const int L = c->n_layers, F = c->hidden_dim, H = c->n_heads, Hkv = c->n_kv_heads, D = c->head_dim, C = c->dim;
    const bool ffn = p->target == PRUNE_FFN;
    pl->F2 = F;
    pl->H2 = H;
    pl->Hkv2 = Hkv;
    if (ffn) pl->F2 = F - (int)floor(F * (double)p->sparsity);
    else pl->Hkv2 = Hkv - (int)floor(Hkv * (double)p->sparsity + 1e-9);
    if (pl->F2 < 1 || pl->Hkv2 < 1) return core_fail(st, KVANT_ERR_ARG, "sparsity %g would remove everything", p->sparsity);
    pl->H2 = pl->Hkv2 * (H / Hkv);
    pl->ffn_keep = malloc((size_t)L * pl->F2 * sizeof(int));
    pl->kv_keep = malloc((size_t)L * pl->Hkv2 * sizeof(int));
    double *score = malloc((size_t)(F > Hkv ? F : Hkv) * sizeof *score);
    if (!pl->ffn_keep || !pl->kv_keep || !score) { free(score); return core_fail(st, KVANT_ERR_NOMEM, "out of memory"); }
    for (int l = 0; l < L; l++) {
        model_layer *Ly = &m->layers[l];
        if (ffn) {
            kvant_code rc = mat_to_f32(&Ly->w_down, tmp, st); /* (C, F) */
            if (rc) { free(score); return rc; }
            const prune_stats *s = &stats[l * N_SLOTS + SLOT_FFN_DOWN];
            for (int f = 0; f < F; f++) {
                double wn = 0;
                for (int r = 0; r < C; r++) wn += (double)tmp[(size_t)r * F + f] * tmp[(size_t)r * F + f];
                score[f] = sqrt(s->sumsq[f]) * sqrt(wn);
            }
            keep_top(score, F, pl->F2, pl->ffn_keep + (size_t)l * pl->F2);
        } else {
            kvant_code rc = mat_to_f32(&Ly->wo, tmp, st); /* (C, H*D) */
            if (rc) { free(score); return rc; }
            const prune_stats *s = &stats[l * N_SLOTS + SLOT_ATTN_OUT];
            const int QD = H * D, G = H / Hkv;
            for (int g = 0; g < Hkv; g++) {
                double sc = 0;
                for (int col = g * G * D; col < (g + 1) * G * D; col++) {
                    double wn = 0;
                    for (int r = 0; r < C; r++) wn += (double)tmp[(size_t)r * QD + col] * tmp[(size_t)r * QD + col];
                    sc += s->sumsq[col] * wn;
                }
                score[g] = sc;
            }
            keep_top(score, Hkv, pl->Hkv2, pl->kv_keep + (size_t)l * pl->Hkv2);
        }
        if (ffn) for (int i = 0; i < pl->Hkv2; i++) pl->kv_keep[(size_t)l * pl->Hkv2 + i] = i;
        else for (int i = 0; i < pl->F2; i++) pl->ffn_keep[(size_t)l * pl->F2 + i] = i;
    }
    free(score);
    return KVANT_OK;
}

/* rows r of src (R x K) for r in keep[0..n): dst (n x K) */
static void take_rows(const float *src, int64_t K, const int *keep, int n, int unit, float *dst) {
    for (int i = 0; i < n; i++)
        for (int u = 0; u < unit; u++)
            memcpy(dst + ((size_t)i * unit + u) * K, src + ((size_t)keep[i] * unit + u) * K, (size_t)K * sizeof *dst);
}
/* columns: dst (R x n*unit) */
static void take_cols(const float *src, int64_t R, int64_t K, const int *keep, int n, int unit, float *dst) {
    const int64_t K2 = (int64_t)n * unit;
    for (int64_t r = 0; r < R; r++)
        for (int i = 0; i < n; i++)
            memcpy(dst + r * K2 + (int64_t)i * unit, src + r * K + (int64_t)keep[i] * unit, (size_t)unit * sizeof *dst);
}

/* ---- the file -------------------------------------------------------------------------------- */
kvant_code prune_file(const char *in_path, const char *out_path, const prune_params *p, kvant_status *st) {
    const bool structured = p->method == PRUNE_STRUCTURED;
    const bool need_calib = p->method != PRUNE_MAGNITUDE;
    const bool need_xx = p->method == PRUNE_SPARSEGPT;
    const bool sparse_fmt = p->format != PRUNE_DENSE;
    if (p->format != PRUNE_DENSE && p->format != PRUNE_SPARSE24_F16 && p->format != PRUNE_SPARSE24_Q8)
        return core_fail(st, KVANT_ERR_ARG, "format %d is none of dense, sparse24-f16, sparse24-q8", (int)p->format);
    if (sparse_fmt && !(p->nm_keep == 2 && p->nm_group == 4))
        return core_fail(st, KVANT_ERR_ARG, "the sparse24 formats need --pattern 2:4");
    if (structured && p->target != PRUNE_FFN && p->target != PRUNE_HEADS)
        return core_fail(st, KVANT_ERR_ARG, "structured pruning's target %d is none of ffn, heads", (int)p->target);
    if (structured && (p->nm_group || sparse_fmt))
        return core_fail(st, KVANT_ERR_ARG, "structured pruning has no N:M pattern or sparse format");
    if (need_calib && !p->calib_path) return core_fail(st, KVANT_ERR_ARG, "%s needs calibration text (--calib)", method_name(p->method));
    if (!p->nm_group && !(p->sparsity >= 0.0f && p->sparsity < 1.0f))
        return core_fail(st, KVANT_ERR_ARG, "sparsity %g not in [0, 1)", p->sparsity);

    model *m = model_open(in_path, NULL, p->n_threads, st);
    if (!m) return st->code;
    if (!m->gguf) { model_close(m); return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: pruning needs a GGUF model", in_path); }
    /* pruning rewrites the seven separate matrices of a dense layer by name */
    if (model_require(m, MODEL_FEAT_EXPERTS | MODEL_FEAT_FUSED, "pruning", st)) { model_close(m); return st->code; }
    const model_config *c = &m->cfg;
    const int L = c->n_layers;
    const double t0 = core_time_ms();
    kvant_code rc = KVANT_OK;
    prune_stats *stats = calloc((size_t)L * N_SLOTS, sizeof *stats);
    int32_t *toks = NULL;
    int n_calib = 0;
    float *fbuf = NULL, *fbuf2 = NULL;
    void *qbuf = NULL;
    size_t qcap = 0;
    float **installed = NULL; /* sequential: pruned F32 layer matrices installed in m */
    gguf_writer *w = gguf_writer_new();
    core_pool *pool = core_pool_new(p->n_threads > 0 ? p->n_threads : core_cpu_count());
    structured_plan plan = {0};
    if (!stats || !w || !pool) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); goto done; }

    /* largest matrix, for the float buffers */
    int64_t maxn = 0;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < N_MATS; i++) {
            const model_mat *M = layer_mat(&m->layers[l], i);
            if (M->rows * M->cols > maxn) maxn = M->rows * M->cols;
        }
    fbuf = malloc((size_t)maxn * sizeof *fbuf);
    fbuf2 = malloc((size_t)maxn * sizeof *fbuf2);
    if (!fbuf || !fbuf2) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); goto done; }

    if (need_calib) {
        for (int l = 0; l < L; l++) {
            const int64_t K[N_SLOTS] = {c->dim, (int64_t)c->n_heads * c->head_dim, c->dim, c->hidden_dim};
            for (int s = 0; s < N_SLOTS; s++)
                if (!prune_stats_init(&stats[l * N_SLOTS + s], K[s], need_xx)) {
                    rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory for calibration statistics");
                    goto done;
                }
        }
        size_t len;
        char *text = core_read_file(p->calib_path, &len, st);
        if (!text) { rc = st->code; goto done; }
        if (len > (size_t)INT32_MAX / 8) { free(text); rc = core_fail(st, KVANT_ERR_ARG, "%s: text too long", p->calib_path); goto done; }
        int cap = (int)len + 16;
        toks = malloc((size_t)cap * sizeof *toks);
        int nt = toks ? tok_encode(m->tok, text, len, false, false, toks, cap) : -1;
        if (nt < -1) { /* byte fallback can give more tokens than bytes: -(needed) */
            free(toks);
            cap = -nt;
            toks = malloc((size_t)cap * sizeof *toks);
            nt = toks ? tok_encode(m->tok, text, len, false, false, toks, cap) : -1;
        }
        free(text);
        if (nt <= 1) { rc = core_fail(st, KVANT_ERR_ARG, "cannot tokenize %s", p->calib_path); goto done; }
        const int want = p->calib_tokens > 0 ? p->calib_tokens : 16384;
        n_calib = want < nt ? want : nt;
        memmove(toks, toks + (nt - n_calib), (size_t)n_calib * sizeof *toks);
        if (!p->quiet)
            fprintf(stderr, "calibration: last %d of %d tokens of %s, sequences of %d%s\n", n_calib, nt, p->calib_path,
                    p->calib_ctx > 0 ? p->calib_ctx : 512, p->sequential ? ", sequential" : "");
        if (!p->sequential || structured) {
            calib_tap ct = {stats, -1};
            if ((rc = run_calib(m, toks, n_calib, p->calib_ctx > 0 ? p->calib_ctx : 512, &ct, st))) goto done;
        }
    }
    if (structured && (rc = plan_structured(m, p, stats, &plan, fbuf, st))) goto done;

    /* metadata */
    gguf_str arch_s;
    char arch[64] = "llama", key[128];
    if (gguf_get_str(m->gguf, "general.architecture", &arch_s))
        snprintf(arch, sizeof arch, "%.*s", (int)(arch_s.len < 63 ? arch_s.len : 63), arch_s.data);
    for (int64_t i = 0; i < gguf_n_kv(m->gguf); i++) {
        const char *k = gguf_kv_key(m->gguf, i);
        if (!strcmp(k, "general.alignment") || !strncmp(k, "kvant.prune.", 12)) continue;
        if (structured) {
            const char *sub = !strncmp(k, arch, strlen(arch)) && k[strlen(arch)] == '.' ? k + strlen(arch) + 1 : "";
            if (!strcmp(sub, "feed_forward_length") || !strcmp(sub, "attention.head_count") ||
                !strcmp(sub, "attention.head_count_kv") || !strcmp(sub, "attention.key_length") ||
                !strcmp(sub, "attention.value_length"))
                continue;
        }
        gguf_writer_add_value(w, k, gguf_kv_value(m->gguf, i));
    }
    if (structured) {
#define SETK(sub, v) snprintf(key, sizeof key, "%s.%s", arch, sub), gguf_writer_add_u32(w, key, (uint32_t)(v))
        SETK("feed_forward_length", plan.F2);
        SETK("attention.head_count", plan.H2);
        SETK("attention.head_count_kv", plan.Hkv2);
        SETK("attention.key_length", c->head_dim);
        SETK("attention.value_length", c->head_dim);
#undef SETK
        gguf_writer_add_str(w, "kvant.prune.target", target_name(p->target));
    }
    gguf_writer_add_str(w, "kvant.prune.method", method_name(p->method));
    gguf_writer_add_f32(w, "kvant.prune.sparsity", p->nm_group ? 1.0f - (float)p->nm_keep / p->nm_group : p->sparsity);
    char pat[32];
    if (p->nm_group) snprintf(pat, sizeof pat, "%d:%d", p->nm_keep, p->nm_group);
    else snprintf(pat, sizeof pat, "%s", structured ? "structured" : "unstructured");
    gguf_writer_add_str(w, "kvant.prune.pattern", pat);
    if (need_calib) gguf_writer_add_u32(w, "kvant.prune.calib_tokens", (uint32_t)n_calib);
    if (sparse_fmt) gguf_writer_add_str(w, "kvant.sparse.format", format_name(p->format));

    /* every tensor that is not a layer matrix, as it is */
    for (int64_t i = 0; rc == KVANT_OK && i < gguf_n_tensors(m->gguf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        if (!is_layer_matrix(t->name)) rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, st);
    }
    if (p->sequential && !structured && need_calib) {
        installed = calloc((size_t)L * N_MATS, sizeof *installed);
        if (!installed) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); goto done; }
    }

    prune_opts o = {.method = p->method, .sparsity = p->sparsity, .nm_keep = p->nm_keep, .nm_group = p->nm_group,
                    .layerwise = p->layerwise, .block = p->block, .pool = pool};
    int n_fallback = 0;
    double tot_zero = 0, tot_n = 0;
    for (int l = 0; rc == KVANT_OK && l < L; l++) {
        model_layer *Ly = &m->layers[l];
        if (installed) { /* this layer's inputs through the already-pruned layers */
            calib_tap ct = {stats, l};
            if ((rc = run_calib(m, toks, n_calib, p->calib_ctx > 0 ? p->calib_ctx : 512, &ct, st))) break;
        }
        char line[512];
        int lp = snprintf(line, sizeof line, "layer %3d:", l);
        double lz = 0, ln = 0;
        for (int i = 0; rc == KVANT_OK && i < N_MATS; i++) {
            model_mat *M = layer_mat(Ly, i);
            char name[96], note[256] = "";
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, k_mats[i].suffix);
            const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
            if ((rc = mat_to_f32(M, fbuf, st))) break;
            int64_t R = M->rows, K = M->cols;
            float *out = fbuf;
            if (structured) {
                const int *fk = plan.ffn_keep + (size_t)l * plan.F2, *gk = plan.kv_keep + (size_t)l * plan.Hkv2;
                const int G = c->n_heads / c->n_kv_heads, D = c->head_dim;
                switch (i) {
                case 0: take_rows(fbuf, K, gk, plan.Hkv2, G * D, fbuf2); R = (int64_t)plan.H2 * D; break;
                case 1: case 2: take_rows(fbuf, K, gk, plan.Hkv2, D, fbuf2); R = (int64_t)plan.Hkv2 * D; break;
                case 3: take_cols(fbuf, R, K, gk, plan.Hkv2, G * D, fbuf2); K = (int64_t)plan.H2 * D; break;
                case 4: case 5: take_rows(fbuf, K, fk, plan.F2, 1, fbuf2); R = plan.F2; break;
                default: take_cols(fbuf, R, K, fk, plan.F2, 1, fbuf2); K = plan.F2; break;
                }
                out = fbuf2;
            } else {
                const prune_stats *s = need_calib ? &stats[l * N_SLOTS + k_mats[i].slot] : NULL;
                prune_opts oi = o;
                if (o.nm_group && K % o.nm_group) { /* the same sparsity in the largest N:M that fits, else unstructured */
                    int n = o.nm_keep, g = o.nm_group;
                    while (g % 2 == 0 && n % 2 == 0 && K % g) { g /= 2; n /= 2; }
                    if (K % g == 0) { oi.nm_keep = n; oi.nm_group = g; }
                    else { oi.nm_group = 0; oi.sparsity = 1.0f - (float)o.nm_keep / (float)o.nm_group; }
                    n_fallback++;
                    if (!p->quiet)
                        fprintf(stderr, "note: %s: %lld columns do not divide the group of %d; pruned %s%d:%d\n", name,
                                (long long)K, o.nm_group, oi.nm_group ? "" : "unstructured instead of ",
                                oi.nm_group ? oi.nm_keep : o.nm_keep, oi.nm_group ? oi.nm_group : o.nm_group);
                }
                if ((rc = prune_matrix(fbuf, R, K, s, &oi, NULL, NULL, st))) {
                    char msg[sizeof st->msg];
                    snprintf(msg, sizeof msg, "%s", st->msg);
                    core_fail(st, rc, "%s: %s", name, msg);
                    break;
                }
            }
            const int64_t ne[4] = {K, R, 1, 1};
            int type = out_type(p, t->type, K, name, note, sizeof note);
            if (kern_type_get(type)->block_size > 1 && K % kern_type_get(type)->block_size) type = KT_F32;
            if (note[0]) {
                n_fallback++;
                if (!p->quiet) fprintf(stderr, "note: %s\n", note);
            }
            const double z = prune_zero_fraction(out, R * K);
            lz += z * (double)(R * K);
            ln += (double)(R * K);
            if (lp < (int)sizeof line - 32) lp += snprintf(line + lp, sizeof line - lp, " %s %5.1f%%", k_mats[i].suffix, 100 * z);
            rc = add_converted(w, pool, name, type, 2, ne, out, &qbuf, &qcap, st);
            if (rc == KVANT_OK && installed) {
                float *keep = malloc((size_t)(R * K) * sizeof *keep);
                if (!keep) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); break; }
                memcpy(keep, out, (size_t)(R * K) * sizeof *keep);
                installed[l * N_MATS + i] = keep;
                *M = (model_mat){keep, KT_F32, R, K, NULL};
            }
        }
        if (installed) /* this layer's statistics are spent */
            for (int s = 0; s < N_SLOTS; s++) prune_stats_free(&stats[l * N_SLOTS + s]);
        tot_zero += lz;
        tot_n += ln;
        if (rc == KVANT_OK && !p->quiet) fprintf(stderr, "%s | layer %5.1f%%\n", line, ln > 0 ? 100 * lz / ln : 0.0);
    }
    if (rc == KVANT_OK) rc = gguf_writer_write_file(w, out_path, st);
    if (rc == KVANT_OK && !p->quiet) {
        fprintf(stderr, "pruned %s -> %s: %s %s", in_path, out_path, method_name(p->method), structured ? target_name(p->target) : pat);
        if (structured)
            fprintf(stderr, " (%s: FFN %d -> %d, heads %d -> %d, KV heads %d -> %d)", target_name(p->target), c->hidden_dim, plan.F2,
                    c->n_heads, plan.H2, c->n_kv_heads, plan.Hkv2);
        else fprintf(stderr, ", layer matrices %.2f%% zeros", tot_n > 0 ? 100 * tot_zero / tot_n : 0.0);
        fprintf(stderr, ", %d fallback(s), %.1f s\n", n_fallback, (core_time_ms() - t0) / 1e3);
    }
done:
    if (installed) {
        for (int i = 0; i < L * N_MATS; i++) free(installed[i]);
        free(installed);
    }
    if (stats)
        for (int i = 0; i < L * N_SLOTS; i++) prune_stats_free(&stats[i]);
    free(stats);
    free(toks);
    free(fbuf);
    free(fbuf2);
    free(qbuf);
    free(plan.ffn_keep);
    free(plan.kv_keep);
    gguf_writer_free(w);
    core_pool_free(pool);
    model_close(m);
    return rc;
}
