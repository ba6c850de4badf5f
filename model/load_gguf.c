/* load_gguf.c - models from GGUF (v2/v3), every architecture of model/arch.c.
 *
 * Config from the architecture's row and the `{arch}.*` keys, weights as
 * views into the mapping (fused tensors as row views: phi3's attn_qkv and
 * doubled ffn_up, the experts of a 3-D ffn_*_exps tensor).  Every tensor's
 * shape is checked against the config and its type against what kvant can
 * compute, so the forward pass never reads out of bounds.  At the end, a
 * tensor nothing used or an `{arch}.*` key nothing read (and not on
 * arch.c's ignore list) refuses the file: kvant never runs a model with a
 * part of it silently dropped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "model/model.h"

/* what the loader has consumed, for the final used-or-ignored check */
typedef struct {
    model *m;
    const char *arch;
    const char *path;
    bool *used_tensor;        /* [n_tensors] */
    const char *used_key[64]; /* full key names read (pointers into the gguf) */
    int n_used_key;
    size_t owned_used, owned_cap; /* floats of m->owned handed out */
} loader;

/* ---- keys ------------------------------------------------------------------ */
static const char *key_name(loader *ld, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", ld->arch, suffix);
    return buf;
}

static void mark_key(loader *ld, const char *full) {
    const int64_t n = gguf_n_kv(ld->m->gguf);
    for (int64_t i = 0; i < n; i++)
        if (!strcmp(gguf_kv_key(ld->m->gguf, i), full)) {
            if (ld->n_used_key < (int)(sizeof ld->used_key / sizeof *ld->used_key))
                ld->used_key[ld->n_used_key++] = gguf_kv_key(ld->m->gguf, i);
            return;
        }
}

static bool get_int(loader *ld, const char *suffix, int *out) {
    char full[256];
    uint32_t v;
    if (!gguf_get_u32(ld->m->gguf, key_name(ld, suffix, full, sizeof full), &v) || v > INT32_MAX) return false;
    mark_key(ld, full);
    *out = (int)v;
    return true;
}

static bool get_float(loader *ld, const char *suffix, float *out) {
    char full[256];
    if (!gguf_get_f32(ld->m->gguf, key_name(ld, suffix, full, sizeof full), out)) return false;
    mark_key(ld, full);
    return true;
}

static bool get_str(loader *ld, const char *suffix, char *out, size_t cap) {
    char full[256];
    gguf_str s;
    if (!gguf_get_str(ld->m->gguf, key_name(ld, suffix, full, sizeof full), &s)) return false;
    mark_key(ld, full);
    snprintf(out, cap, "%.*s", (int)(s.len < cap - 1 ? s.len : cap - 1), s.data);
    return true;
}

/* ---- tensors ---------------------------------------------------------------- */
static const gguf_tensor *find(loader *ld, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(ld->m->gguf, name);
    if (t) ld->used_tensor[t - gguf_tensor_at(ld->m->gguf, 0)] = true;
    return t;
}

/* an LLM_INT8 matrix's companions (kernels/w8a8.h): NAME.outlier_cols, I32
 * [n], distinct indices < cols; NAME.outliers, F16 [n, rows] */
static kvant_code get_outliers(loader *ld, const char *name, int64_t rows, int64_t cols, model_mat *out,
                               kvant_status *st) {
    char cn[320], wn[320];
    snprintf(cn, sizeof cn, "%s.outlier_cols", name);
    snprintf(wn, sizeof wn, "%s.outliers", name);
    const gguf_tensor *c = find(ld, cn), *w = find(ld, wn);
    if (!c || !w)
        return core_fail(st, KVANT_ERR_FORMAT, "%s: LLM_INT8 tensor '%s' needs '%s' and '%s'", ld->path, name, cn, wn);
    const int64_t n = c->ne[0];
    if (c->type != KT_I32 || c->n_dims != 1 || n < 1 || n > cols || w->type != KT_F16 || w->n_dims != 2 ||
        w->ne[0] != n || w->ne[1] != rows)
        return core_fail(st, KVANT_ERR_FORMAT, "%s: '%s' must be I32 [n] and '%s' F16 [n, %lld] with 1 <= n <= %lld",
                         ld->path, cn, wn, (long long)rows, (long long)cols);
    const int32_t *idx = c->data;
    uint8_t *seen = calloc((size_t)cols, 1);
    if (!seen) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        int32_t v;
        memcpy(&v, idx + i, 4);
        if (v < 0 || v >= cols || seen[v]) {
            free(seen);
            return core_fail(st, KVANT_ERR_FORMAT, "%s: '%s' holds %d: not a distinct column below %lld", ld->path, cn,
                             (int)v, (long long)cols);
        }
        seen[v] = 1;
    }
    free(seen);
    if ((uintptr_t)idx % 4 || (uintptr_t)w->data % 2)
        return core_fail(st, KVANT_ERR_FORMAT, "%s: '%s' / '%s' are not aligned", ld->path, cn, wn);
    out->outl = (kern_outliers){(int)n, idx, w->data};
    return KVANT_OK;
}

/* `name` as `rows` rows of `cols` (ne0 = cols; a 3-D tensor's rows run over
 * ne1 x ne2); kvant must compute with its type.  Missing + !required: OK
 * with out->data NULL. */
static kvant_code get_mat(loader *ld, const char *name, int64_t rows, int64_t cols, bool required, model_mat *out,
                          kvant_status *st) {
    const gguf_tensor *t = find(ld, name);
    memset(out, 0, sizeof *out);
    if (!t) return required ? core_fail(st, KVANT_ERR_FORMAT, "%s: tensor '%s' is missing", ld->path, name) : KVANT_OK;
    const int64_t got_rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (t->ne[0] != cols || got_rows != rows)
        return core_fail(st, KVANT_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                         ld->path, name, (long long)t->ne[0], (long long)got_rows, (long long)cols, (long long)rows);
    const kern_type_traits *tt = kern_type_get(t->type);
    if (!tt || !tt->to_float || !tt->vec_dot_ref)
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which kvant cannot compute with yet",
                         ld->path, name, kern_type_name(t->type));
    *out = (model_mat){t->data, t->type, rows, cols, NULL, {0}};
    if (t->type == KT_LLM_INT8) return get_outliers(ld, name, rows, cols, out, st);
    return KVANT_OK;
}

/* rows [r0, r0 + n) of w, as a matrix of its own (an LLM_INT8 matrix's
 * outlier weights are per row too: the view takes its rows' of them) */
static model_mat row_view(const model_mat *w, int64_t r0, int64_t n) {
    model_mat v = {(const uint8_t *)w->data + (size_t)r0 * kern_row_bytes(w->type, w->cols), w->type, n, w->cols,
                   NULL, w->outl};
    if (v.outl.n) v.outl.w += (size_t)r0 * (size_t)v.outl.n;
    return v;
}

/* A vector (norm, bias, rope factors) of n floats: a view when stored as
 * F32, else converted into m->owned.  Missing + !required: *out = NULL. */
static kvant_code get_vec(loader *ld, const char *name, int64_t n, bool required, const float **out,
                          kvant_status *st) {
    model_mat v;
    *out = NULL;
    kvant_code rc = get_mat(ld, name, 1, n, required, &v, st);
    if (rc || !v.data) return rc;
    if (v.type == KT_F32) {
        *out = v.data;
        return KVANT_OK;
    }
    if (ld->owned_used + (size_t)n > ld->owned_cap)
        return core_fail(st, KVANT_ERR_FORMAT, "%s: more converted vectors than the loader sized for", ld->path);
    float *dst = ld->m->owned + ld->owned_used;
    kern_type_get(v.type)->to_float(v.data, dst, n);
    ld->owned_used += (size_t)n;
    *out = dst;
    return KVANT_OK;
}

/* ---- config ----------------------------------------------------------------- */
static kvant_code read_config(loader *ld, const model_arch *A, kvant_status *st) {
    const gguf_ctx *g = ld->m->gguf;
    const char *path = ld->path;
    model_config *c = &ld->m->cfg;
    memset(c, 0, sizeof *c);
    snprintf(c->arch, sizeof c->arch, "%s", A->name);
    if (!get_int(ld, "embedding_length", &c->dim) || !get_int(ld, "block_count", &c->n_layers) ||
        !get_int(ld, "attention.head_count", &c->n_heads))
        return core_fail(st, KVANT_ERR_FORMAT, "%s: missing (or per-layer, which kvant does not run) one of "
                         "%s.embedding_length, block_count, attention.head_count", path, ld->arch);
    const bool ff = get_int(ld, "feed_forward_length", &c->hidden_dim);
    if (!get_int(ld, "attention.head_count_kv", &c->n_kv_heads)) c->n_kv_heads = c->n_heads;
    if (!get_int(ld, "context_length", &c->n_ctx_train)) c->n_ctx_train = 2048;
    if (!get_float(ld, "attention.layer_norm_rms_epsilon", &c->norm_eps)) c->norm_eps = 1e-5f;
    if (!get_float(ld, "rope.freq_base", &c->rope_base)) c->rope_base = 10000.0f;
    if (!get_int(ld, "attention.key_length", &c->head_dim)) c->head_dim = c->n_heads > 0 ? c->dim / c->n_heads : 0;
    if (!get_int(ld, "rope.dimension_count", &c->rope_dim)) c->rope_dim = c->head_dim;
    int vl = 0;
    char full[256];
    if (!gguf_get_u32(g, key_name(ld, "attention.value_length", full, sizeof full), (uint32_t *)&vl)) vl = c->head_dim;
    if (vl != c->head_dim)
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: key length %d != value length %d", path, c->head_dim, vl);
    bool causal = true;
    if (gguf_get_bool(g, key_name(ld, "attention.causal", full, sizeof full), &causal) && !causal)
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: non-causal attention is not supported", path);
    model_config_set_defaults(c);
    c->rope_neox = A->neox;
    c->act = A->act;
    if (A->embd_sqrt) c->embd_scale = sqrtf((float)c->dim);

    /* RoPE scaling: linear (factor), as llama.cpp reads it; others refused */
    char type[32] = "linear";
    get_str(ld, "rope.scaling.type", type, sizeof type);
    float factor = 0.0f;
    if (!get_float(ld, "rope.scaling.factor", &factor)) get_float(ld, "rope.scale_linear", &factor);
    if (!strcmp(type, "linear") || !strcmp(type, "none")) {
        if (!strcmp(type, "linear") && factor != 0.0f) c->rope_scale = 1.0f / factor;
    } else if (!(strcmp(type, "longrope") == 0 && !strcmp(A->name, "phi3"))) {
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: RoPE scaling '%s' is not supported (none, linear%s)", path,
                         type, !strcmp(A->name, "phi3") ? ", longrope" : "");
    }

    float f;
    if (get_float(ld, "rope.scaling.attn_factor", &f) && f > 0) c->rope_mscale = f;

    /* sliding-window attention and soft-capping */
    int window = 0;
    const bool has_window = get_int(ld, "attention.sliding_window", &window);
    if (!strcmp(A->name, "gemma2")) {
        c->swa_window = has_window ? window : 4096;
        c->attn_softcap = 50.0f, c->final_softcap = 30.0f; /* llama.cpp's defaults when the keys are absent */
        get_float(ld, "attn_logit_softcapping", &c->attn_softcap);
        get_float(ld, "final_logit_softcapping", &c->final_softcap);
    } else if (!strcmp(A->name, "gemma3")) {
        c->swa_window = has_window ? window : 0;
        get_float(ld, "final_logit_softcapping", &c->final_softcap);
    } else if (has_window && window > 0 && !strcmp(A->name, "phi3")) {
        core_log(KVANT_LOG_WARN, "%s: phi3 sliding window %d not applied (as llama.cpp: its converters write it "
                 "for models trained without it)", path, window);
    } else if (has_window && window > 0) {
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: sliding-window attention on %s is not supported", path,
                         A->name);
    }
    /* embeddings' pooling: llama.cpp's enum (0 none and 1 mean both pool by the mean here) */
    int pool = 1;
    get_int(ld, "pooling_type", &pool);
    if (pool == 0 || pool == 1) c->pooling = MODEL_POOL_MEAN;
    else if (pool == 2) c->pooling = MODEL_POOL_CLS;
    else if (pool == 3) c->pooling = MODEL_POOL_LAST;
    else return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: pooling type %d is not supported (mean, cls, last)", path, pool);
    c->rope_base_swa = !strcmp(A->name, "gemma3") ? 10000.0f : c->rope_base; /* llama.cpp's gemma3 default */
    get_float(ld, "rope.freq_base_swa", &c->rope_base_swa);
    /* gemma: 1/sqrt(n_embd / n_head) for the 27B models (46 / 62 layers), else 1/sqrt(head_dim) */
    if ((!strcmp(A->name, "gemma2") && c->n_layers == 46) || (!strcmp(A->name, "gemma3") && c->n_layers == 62))
        c->attn_scale = 1.0f / sqrtf((float)(c->dim / c->n_heads));

    /* experts */
    if (get_int(ld, "expert_count", &c->n_expert) && c->n_expert > 0) {
        if (!A->moe) return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: experts in architecture %s are not supported",
                                      path, A->name);
        if (!get_int(ld, "expert_used_count", &c->n_expert_used))
            return core_fail(st, KVANT_ERR_FORMAT, "%s: %s.expert_count without expert_used_count", path, ld->arch);
        if (!get_int(ld, "expert_feed_forward_length", &c->expert_hidden)) c->expert_hidden = c->hidden_dim;
        uint32_t gating = 1;
        if (gguf_get_u32(g, key_name(ld, "expert_gating_func", full, sizeof full), &gating) && gating != 1)
            return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: expert gating function %u (only softmax, 1)", path,
                             gating);
        if (!ff) c->hidden_dim = c->expert_hidden;
        if (get_float(ld, "expert_weights_scale", &f) && f != 0.0f) c->expert_scale = f;
    } else {
        c->n_expert = 0;
        get_int(ld, "expert_used_count", &c->n_expert_used);
        c->n_expert_used = 0;
        if (!ff) return core_fail(st, KVANT_ERR_FORMAT, "%s: missing %s.feed_forward_length", path, ld->arch);
    }
    const gguf_tensor *emb = find(ld, "token_embd.weight");
    if (!emb) return core_fail(st, KVANT_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", path);
    c->vocab_size = emb->ne[1] > INT32_MAX ? 0 : (int)emb->ne[1];
    return model_check_config(c, path, st);
}

/* layer l is a sliding-window layer: the file's per-layer pattern (a bool
 * array) or the period n (local when l % n < n - 1), as llama.cpp's
 * set_swa_pattern */
static bool layer_is_swa(loader *ld, const model_arch *A, int l) {
    char full[256];
    key_name(ld, "attention.sliding_window_pattern", full, sizeof full);
    const gguf_value *arr = gguf_get_arr(ld->m->gguf, full, GGUF_BOOL);
    if (arr) {
        mark_key(ld, full);
        return (uint64_t)l < arr->arr.n && gguf_arr_i64(arr, (uint64_t)l) != 0;
    }
    uint32_t n = (uint32_t)A->swa_pattern;
    if (gguf_get_u32(ld->m->gguf, full, &n)) mark_key(ld, full);
    return n > 0 && (uint32_t)l % n < n - 1;
}

/* ---- one layer ----------------------------------------------------------------- */
static kvant_code load_layer(loader *ld, const model_arch *A, int l, model_mat *experts, kvant_status *st) {
    model *m = ld->m;
    const model_config *c = &m->cfg;
    model_layer *L = &m->layers[l];
    const int64_t C = c->dim, F = c->hidden_dim, D = c->head_dim, QD = (int64_t)c->n_heads * D,
                  KVD = (int64_t)c->n_kv_heads * D;
    char name[96];
    kvant_code rc;
#define T(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
    if ((rc = get_vec(ld, T("attn_norm.weight"), C, true, &L->attn_norm, st))) return rc;

    /* attention: fused attn_qkv (rows q, k, v) or separate; optional biases */
    model_mat qkv;
    if ((rc = get_mat(ld, T("attn_qkv.weight"), QD + 2 * KVD, C, false, &qkv, st))) return rc;
    if (qkv.data) {
        m->fused = true;
        L->wq = row_view(&qkv, 0, QD), L->wk = row_view(&qkv, QD, KVD), L->wv = row_view(&qkv, QD + KVD, KVD);
        const float *b;
        if ((rc = get_vec(ld, T("attn_qkv.bias"), QD + 2 * KVD, false, &b, st))) return rc;
        if (b) L->bq = b, L->bk = b + QD, L->bv = b + QD + KVD;
    } else {
        if ((rc = get_mat(ld, T("attn_q.weight"), QD, C, true, &L->wq, st))) return rc;
        if ((rc = get_mat(ld, T("attn_k.weight"), KVD, C, true, &L->wk, st))) return rc;
        if ((rc = get_mat(ld, T("attn_v.weight"), KVD, C, true, &L->wv, st))) return rc;
        if ((rc = get_vec(ld, T("attn_q.bias"), QD, A->need_bias, &L->bq, st))) return rc;
        if ((rc = get_vec(ld, T("attn_k.bias"), KVD, A->need_bias, &L->bk, st))) return rc;
        if ((rc = get_vec(ld, T("attn_v.bias"), KVD, A->need_bias, &L->bv, st))) return rc;
    }
    if ((rc = get_vec(ld, T("attn_q_norm.weight"), D, A->need_qk_norm, &L->q_norm, st))) return rc;
    if ((rc = get_vec(ld, T("attn_k_norm.weight"), D, A->need_qk_norm, &L->k_norm, st))) return rc;
    if (!L->q_norm != !L->k_norm)
        return core_fail(st, KVANT_ERR_FORMAT, "%s: layer %d has only one of attn_q_norm / attn_k_norm", ld->path, l);
    if ((rc = get_mat(ld, T("attn_output.weight"), C, QD, true, &L->wo, st))) return rc;
    if ((rc = get_vec(ld, T("attn_output.bias"), C, false, &L->bo, st))) return rc;
    if ((rc = get_vec(ld, T("post_attention_norm.weight"), C, A->need_post_norms, &L->post_attn_norm, st))) return rc;

    /* feed-forward: dense (separate gate/up, or phi3's ffn_up holding gate then up) or experts */
    if ((rc = get_vec(ld, T("ffn_norm.weight"), C, true, &L->ffn_norm, st))) return rc;
    if (c->n_expert > 0) {
        const int64_t E = c->n_expert, Fe = c->expert_hidden;
        model_mat g3, u3, d3;
        if ((rc = get_mat(ld, T("ffn_gate_inp.weight"), E, C, true, &L->router, st))) return rc;
        if ((rc = get_mat(ld, T("ffn_gate_exps.weight"), E * Fe, C, true, &g3, st))) return rc;
        if ((rc = get_mat(ld, T("ffn_up_exps.weight"), E * Fe, C, true, &u3, st))) return rc;
        if ((rc = get_mat(ld, T("ffn_down_exps.weight"), E * C, Fe, true, &d3, st))) return rc;
        L->gate_exps = experts, L->up_exps = experts + E, L->down_exps = experts + 2 * E;
        for (int64_t e = 0; e < E; e++) {
            L->gate_exps[e] = row_view(&g3, e * Fe, Fe);
            L->up_exps[e] = row_view(&u3, e * Fe, Fe);
            L->down_exps[e] = row_view(&d3, e * C, C);
        }
    } else {
        if ((rc = get_mat(ld, T("ffn_gate.weight"), F, C, false, &L->w_gate, st))) return rc;
        if (L->w_gate.data) {
            if ((rc = get_mat(ld, T("ffn_up.weight"), F, C, true, &L->w_up, st))) return rc;
        } else { /* fused: ffn_up [2F] = gate rows, then up rows */
            model_mat gu;
            snprintf(name, sizeof name, "blk.%d.ffn_up.weight", l);
            const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
            if (!t || t->ne[1] * t->ne[2] * t->ne[3] != 2 * F)
                return core_fail(st, KVANT_ERR_FORMAT, "%s: layer %d has no ffn_gate and no fused ffn_up of %lld rows",
                                 ld->path, l, (long long)(2 * F));
            if ((rc = get_mat(ld, name, 2 * F, C, true, &gu, st))) return rc;
            L->w_gate = row_view(&gu, 0, F), L->w_up = row_view(&gu, F, F);
            m->fused = true;
        }
        if ((rc = get_mat(ld, T("ffn_down.weight"), C, F, true, &L->w_down, st))) return rc;
    }
    if ((rc = get_vec(ld, T("post_ffw_norm.weight"), C, A->need_post_norms, &L->post_ffn_norm, st))) return rc;

    /* the layer's attention span and RoPE base */
    const bool swa = c->swa_window > 0 && layer_is_swa(ld, A, l);
    L->swa_window = swa ? c->swa_window : 0;
    L->rope_base = swa ? c->rope_base_swa : c->rope_base;
    L->rope_scale = swa && !strcmp(A->name, "gemma3") ? 1.0f : c->rope_scale; /* gemma3's local layers: unscaled */
#undef T
    return KVANT_OK;
}

/* RoPE frequency factors: Llama 3's rope_freqs, or phi3's long / short
 * factors (long when the context in use exceeds the original one; kvant
 * takes the trained context, as llama.cpp does at its default n_ctx) */
static kvant_code load_rope_factors(loader *ld, kvant_status *st) {
    model *m = ld->m;
    const int64_t half = m->cfg.rope_dim / 2;
    kvant_code rc;
    if ((rc = get_vec(ld, "rope_freqs.weight", half, false, &m->rope_freqs, st))) return rc;
    const float *lng, *shrt;
    if ((rc = get_vec(ld, "rope_factors_long.weight", half, false, &lng, st))) return rc;
    if ((rc = get_vec(ld, "rope_factors_short.weight", half, false, &shrt, st))) return rc;
    if (!lng && !shrt) return KVANT_OK;
    if (!lng || !shrt || m->rope_freqs)
        return core_fail(st, KVANT_ERR_FORMAT, "%s: rope factors need both long and short (and no rope_freqs)",
                         ld->path);
    int orig = m->cfg.n_ctx_train;
    get_int(ld, "rope.scaling.original_context_length", &orig);
    m->rope_freqs = m->cfg.n_ctx_train > orig ? lng : shrt;
    return KVANT_OK;
}

/* ---- used or ignored -------------------------------------------------------------- */
static kvant_code check_all_used(loader *ld, kvant_status *st) {
    const gguf_ctx *g = ld->m->gguf;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++)
        if (!ld->used_tensor[i])
            return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: tensor '%s' is not used by kvant's %s model (refusing "
                             "to run without it)", ld->path, gguf_tensor_at(g, i)->name, ld->arch);
    const size_t alen = strlen(ld->arch);
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *k = gguf_kv_key(g, i);
        if (strncmp(k, ld->arch, alen) || k[alen] != '.') continue;
        bool used = model_arch_key_ignored(k + alen + 1);
        for (int j = 0; j < ld->n_used_key && !used; j++) used = ld->used_key[j] == k;
        if (!used)
            return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: key '%s' is not supported by kvant (refusing to run "
                             "without it)", ld->path, k);
    }
    return KVANT_OK;
}

static kvant_code load_opened(model *m, const char *path, kvant_status *st);

kvant_code model_load_gguf(model *m, const char *path, kvant_status *st) {
    m->gguf = gguf_open(path, st);
    if (!m->gguf) return st->code;
    return load_opened(m, path, st);
}

kvant_code model_load_gguf_mem(model *m, const uint8_t *data, size_t size, const char *name, kvant_status *st) {
    m->gguf = gguf_open_mem(data, size, name, st);
    if (!m->gguf) return st->code;
    m->builtin = true;
    return load_opened(m, name, st);
}

static kvant_code load_opened(model *m, const char *path, kvant_status *st) {
    snprintf(m->file_format, sizeof m->file_format, "GGUF v%u", gguf_version(m->gguf));

    gguf_str s;
    char arch[32] = "";
    if (!gguf_get_str(m->gguf, "general.architecture", &s))
        return core_fail(st, KVANT_ERR_FORMAT, "%s: no general.architecture key (vocabulary-only file?)", path);
    snprintf(arch, sizeof arch, "%.*s", (int)(s.len < 31 ? s.len : 31), s.data);
    const model_arch *A = model_arch_find(arch);
    if (!A) {
        char names[256];
        model_arch_names(names, sizeof names);
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (kvant runs: %s)", path,
                         arch, names);
    }
    if (gguf_get_str(m->gguf, "general.name", &s))
        snprintf(m->name, sizeof m->name, "%.*s", (int)(s.len < 127 ? s.len : 127), s.data);
    else {
        const char *slash = strrchr(path, '/');
        snprintf(m->name, sizeof m->name, "%s", slash ? slash + 1 : path);
    }

    loader ld = {.m = m, .arch = A->name, .path = path};
    ld.used_tensor = calloc((size_t)gguf_n_tensors(m->gguf) + 1, sizeof *ld.used_tensor);
    if (!ld.used_tensor) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    kvant_code rc = read_config(&ld, A, st);
    if (rc) goto done;
    const model_config *c = &m->cfg;
    const int64_t C = c->dim, V = c->vocab_size;
    const int64_t QD = (int64_t)c->n_heads * c->head_dim, KVD = (int64_t)c->n_kv_heads * c->head_dim;

    /* converted vectors: per layer 4 norms of C, 2 of D, biases of QD + 2 KVD, bo C; + output norm + rope
     * factors.  The config alone could ask for gigabytes (1024 layers of 65536 + ... floats) before any
     * tensor is seen, so the size is also capped by what the file holds: only a non-F32 tensor of one row
     * is converted, each at most once, so the floats of those tensors bound it (README, "Hostile files") */
    ld.owned_cap = (size_t)c->n_layers * (size_t)(5 * C + 2 * c->head_dim + QD + 2 * KVD) + (size_t)C +
                   3 * (size_t)c->rope_dim;
    size_t in_file = 0;
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        if (t->type != KT_F32 && t->ne[1] * t->ne[2] * t->ne[3] == 1) in_file += (size_t)t->ne[0];
    }
    if (in_file < ld.owned_cap) ld.owned_cap = in_file;
    /* the experts' matrix views: every layer's ffn_gate_exps must hold its E x expert_hidden rows first,
     * so that E x layers is paid for by tensor bytes in the file (whose extents are disjoint) */
    for (int l = 0; l < c->n_layers && c->n_expert > 0; l++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
        const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
        if (!t || t->ne[1] * t->ne[2] * t->ne[3] != (int64_t)c->n_expert * c->expert_hidden) {
            rc = core_fail(st, KVANT_ERR_FORMAT, "%s: tensor '%s' is missing or does not hold %d experts of %d rows",
                           path, name, c->n_expert, c->expert_hidden);
            goto done;
        }
    }
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    m->owned = malloc((ld.owned_cap ? ld.owned_cap : 1) * sizeof(float));
    if (c->n_expert > 0) m->expert_mats = calloc((size_t)c->n_layers * 3 * (size_t)c->n_expert, sizeof(model_mat));
    if (!m->layers || !m->owned || (c->n_expert > 0 && !m->expert_mats)) {
        rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        goto done;
    }

    if ((rc = get_mat(&ld, "token_embd.weight", V, C, true, &m->tok_embd, st))) goto done;
    if ((rc = get_vec(&ld, "output_norm.weight", C, true, &m->out_norm, st))) goto done;
    if ((rc = get_mat(&ld, "output.weight", V, C, false, &m->output, st))) goto done;
    m->tied_output = m->output.data == NULL;
    if (m->tied_output) m->output = m->tok_embd;
    if ((rc = load_rope_factors(&ld, st))) goto done;
    for (int l = 0; l < c->n_layers; l++) {
        if ((rc = load_layer(&ld, A, l, m->expert_mats ? m->expert_mats + (size_t)l * 3 * c->n_expert : NULL, st)))
            goto done;
    }
    if ((rc = check_all_used(&ld, st))) goto done;

    /* every stored tensor, for `kvant info` */
    const int64_t nt = gguf_n_tensors(m->gguf);
    m->tensors = calloc((size_t)(nt > 0 ? nt : 1), sizeof *m->tensors);
    if (!m->tensors) {
        rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        model_tensor *d = &m->tensors[m->n_tensors++];
        snprintf(d->name, sizeof d->name, "%s", t->name);
        d->type = t->type;
        d->n_dims = t->n_dims;
        memcpy(d->ne, t->ne, sizeof d->ne);
        d->nbytes = t->nbytes;
    }

    m->tok = tok_from_gguf(m->gguf, st);
    if (!m->tok) {
        rc = st->code;
        goto done;
    }
    if (tok_n_vocab(m->tok) != c->vocab_size)
        core_log(KVANT_LOG_WARN, "%s: vocabulary has %d tokens, embedding has %d rows", path, tok_n_vocab(m->tok),
                 c->vocab_size);
done:
    free(ld.used_tensor);
    return rc;
}
