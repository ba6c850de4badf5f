/* load_gguf.c - llama-family models from GGUF (v2/v3).
 *
 * Config from the `<arch>.*` keys, weights as views into the mapping.
 * Every tensor's shape is checked against the config and its type against
 * what kvant can compute, so the forward pass never reads out of bounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "model/model.h"

/* architectures with the llama tensor layout (adjacent-pair RoPE) */
static const char *const k_llama_archs[] = {"llama", "mistral"};

static bool get_int(const gguf_ctx *g, const char *arch, const char *key, int *out) {
    char full[256];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    uint32_t v;
    if (!gguf_get_u32(g, full, &v) || v > INT32_MAX) return false;
    *out = (int)v;
    return true;
}

static bool get_float(const gguf_ctx *g, const char *arch, const char *key, float *out) {
    char full[256];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return gguf_get_f32(g, full, out);
}

/* Looks up `name`; checks shape (ne0 = cols, ne1 = rows) and that kvant can
 * compute with its type.  Missing + !required: returns OK with out->data NULL. */
static kvant_code get_mat(model *m, const char *name, int64_t rows, int64_t cols, bool required, model_mat *out,
                          kvant_status *st) {
    const char *path = gguf_path(m->gguf);
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    memset(out, 0, sizeof *out);
    if (!t) return required ? core_fail(st, KVANT_ERR_FORMAT, "%s: tensor '%s' is missing", path, name) : KVANT_OK;
    const int64_t want_rows = rows;
    const int64_t got_rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (t->ne[0] != cols || got_rows != want_rows)
        return core_fail(st, KVANT_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]", path,
                         name, (long long)t->ne[0], (long long)got_rows, (long long)cols, (long long)want_rows);
    const kern_type_traits *tt = kern_type_get(t->type);
    if (!tt || !tt->to_float || !tt->vec_dot_ref)
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which kvant cannot compute with yet",
                         path, name, kern_type_name(t->type));
    *out = (model_mat){t->data, t->type, rows, cols, NULL};
    return KVANT_OK;
}

/* A norm vector as F32: a view when stored as F32, else converted into
 * m->owned (one allocation, sized for all norms before loading). */
static kvant_code get_norm(model *m, const char *name, int64_t n, size_t *owned_used, const float **out,
                           kvant_status *st) {
    model_mat v;
    kvant_code rc = get_mat(m, name, 1, n, true, &v, st);
    if (rc) return rc;
    if (v.type == KT_F32) {
        *out = v.data;
        return KVANT_OK;
    }
    float *dst = m->owned + *owned_used;
    kern_type_get(v.type)->to_float(v.data, dst, n);
    *owned_used += (size_t)n;
    *out = dst;
    return KVANT_OK;
}

static kvant_code read_config(model *m, const char *arch, kvant_status *st) {
    const gguf_ctx *g = m->gguf;
    const char *path = gguf_path(g);
    model_config *c = &m->cfg;
    memset(c, 0, sizeof *c);
    if (!get_int(g, arch, "embedding_length", &c->dim) || !get_int(g, arch, "block_count", &c->n_layers) ||
        !get_int(g, arch, "feed_forward_length", &c->hidden_dim) ||
        !get_int(g, arch, "attention.head_count", &c->n_heads))
        return core_fail(st, KVANT_ERR_FORMAT, "%s: missing one of %s.embedding_length, block_count, "
                         "feed_forward_length, attention.head_count", path, arch);
    if (!get_int(g, arch, "attention.head_count_kv", &c->n_kv_heads)) c->n_kv_heads = c->n_heads;
    if (!get_int(g, arch, "context_length", &c->n_ctx_train)) c->n_ctx_train = 2048;
    if (!get_float(g, arch, "attention.layer_norm_rms_epsilon", &c->norm_eps)) c->norm_eps = 1e-5f;
    if (!get_float(g, arch, "rope.freq_base", &c->rope_base)) c->rope_base = 10000.0f;
    if (!get_int(g, arch, "attention.key_length", &c->head_dim)) c->head_dim = c->n_heads > 0 ? c->dim / c->n_heads : 0;
    if (!get_int(g, arch, "rope.dimension_count", &c->rope_dim)) c->rope_dim = c->head_dim;
    int vl = 0;
    if (!get_int(g, arch, "attention.value_length", &vl)) vl = c->head_dim;
    if (vl != c->head_dim)
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: key length %d != value length %d", path, c->head_dim, vl);
    c->rope_neox = false;
    const gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb) return core_fail(st, KVANT_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", path);
    c->vocab_size = emb->ne[1] > INT32_MAX ? 0 : (int)emb->ne[1];
    return model_check_config(c, path, st);
}

kvant_code model_load_gguf(model *m, const char *path, kvant_status *st) {
    m->gguf = gguf_open(path, st);
    if (!m->gguf) return st->code;
    snprintf(m->file_format, sizeof m->file_format, "GGUF v%u", gguf_version(m->gguf));

    gguf_str s;
    char arch[64] = "";
    if (!gguf_get_str(m->gguf, "general.architecture", &s))
        return core_fail(st, KVANT_ERR_FORMAT, "%s: no general.architecture key (vocabulary-only file?)", path);
    snprintf(arch, sizeof arch, "%.*s", (int)(s.len < 63 ? s.len : 63), s.data);
    bool known = false;
    for (size_t i = 0; i < sizeof k_llama_archs / sizeof *k_llama_archs; i++) known |= !strcmp(arch, k_llama_archs[i]);
    if (!known) return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (llama family only)", path, arch);
    if (gguf_get_str(m->gguf, "general.name", &s))
        snprintf(m->name, sizeof m->name, "%.*s", (int)(s.len < 127 ? s.len : 127), s.data);
    else {
        const char *slash = strrchr(path, '/');
        snprintf(m->name, sizeof m->name, "%s", slash ? slash + 1 : path);
    }

    kvant_code rc = read_config(m, arch, st);
    if (rc) return rc;
    const model_config *c = &m->cfg;
    const int64_t C = c->dim, F = c->hidden_dim, QD = (int64_t)c->n_heads * c->head_dim,
                  KVD = (int64_t)c->n_kv_heads * c->head_dim, V = c->vocab_size;

    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    m->owned = malloc((size_t)(2 * c->n_layers + 1) * (size_t)C * sizeof(float));
    if (!m->layers || !m->owned) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    size_t owned_used = 0;

    if ((rc = get_mat(m, "token_embd.weight", V, C, true, &m->tok_embd, st))) return rc;
    if ((rc = get_norm(m, "output_norm.weight", C, &owned_used, &m->out_norm, st))) return rc;
    if ((rc = get_mat(m, "output.weight", V, C, false, &m->output, st))) return rc;
    m->tied_output = m->output.data == NULL;
    if (m->tied_output) m->output = m->tok_embd;

    char name[96];
#define LAYER_MAT(field, suffix, rows, cols)                                        \
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);                     \
    if ((rc = get_mat(m, name, rows, cols, true, &L->field, st))) return rc;
    for (int l = 0; l < c->n_layers; l++) {
        model_layer *L = &m->layers[l];
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        if ((rc = get_norm(m, name, C, &owned_used, &L->attn_norm, st))) return rc;
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        if ((rc = get_norm(m, name, C, &owned_used, &L->ffn_norm, st))) return rc;
        LAYER_MAT(wq, "attn_q", QD, C)
        LAYER_MAT(wk, "attn_k", KVD, C)
        LAYER_MAT(wv, "attn_v", KVD, C)
        LAYER_MAT(wo, "attn_output", C, QD)
        LAYER_MAT(w_gate, "ffn_gate", F, C)
        LAYER_MAT(w_up, "ffn_up", F, C)
        LAYER_MAT(w_down, "ffn_down", C, F)
    }
#undef LAYER_MAT

    /* every stored tensor, for `kvant info` */
    const int64_t nt = gguf_n_tensors(m->gguf);
    m->tensors = calloc((size_t)(nt > 0 ? nt : 1), sizeof *m->tensors);
    if (!m->tensors) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
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
    if (!m->tok) return st->code;
    if (tok_n_vocab(m->tok) != c->vocab_size)
        core_log(KVANT_LOG_WARN, "%s: vocabulary has %d tokens, embedding has %d rows", path, tok_n_vocab(m->tok),
                 c->vocab_size);
    return KVANT_OK;
}
