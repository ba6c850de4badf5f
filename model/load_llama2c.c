/* load_llama2c.c - llama2.c checkpoints (legacy v0 format).
 *
 * Layout: 7 x int32 header {dim, hidden_dim, n_layers, n_heads, n_kv_heads,
 * vocab_size, seq_len}; a negative vocab_size means the classifier is stored
 * separately (unshared).  Then float32 weights, each stacked over layers:
 * token_embedding (V,C), rms_att (L,C), wq (L,H*D,C), wk (L,Hkv*D,C),
 * wv (L,Hkv*D,C), wo (L,C,H*D), rms_ffn (L,C), w1 (L,F,C), w2 (L,C,F),
 * w3 (L,F,C), rms_final (C), freq_cis_real/imag (seq_len, D/2) each
 * (unused: RoPE is computed), and wcls (V,C) when unshared.
 * Every size is checked against the file before any pointer is formed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "model/model.h"

typedef struct {
    const uint8_t *base;
    uint64_t off, size;
    const char *path;
    kvant_status *st;
    bool ok;
} cursor;

/* takes n floats from the cursor; NULL (and a message) past the end */
static const float *take(cursor *c, uint64_t n, const char *what) {
    uint64_t bytes, end;
    if (!c->ok) return NULL;
    if (!core_mul_ok(n, 4, &bytes) || !core_add_ok(c->off, bytes, &end) || end > c->size) {
        core_fail(c->st, KVANT_ERR_FORMAT, "%s: truncated llama2.c checkpoint: %s needs bytes [%llu, %llu) of %llu",
                  c->path, what, (unsigned long long)c->off, (unsigned long long)(c->off + bytes),
                  (unsigned long long)c->size);
        c->ok = false;
        return NULL;
    }
    const float *p = (const float *)(c->base + c->off);
    c->off = end;
    return p;
}

static void add_tensor(model *m, const char *name, int64_t ne0, int64_t ne1) {
    model_tensor *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = KT_F32;
    t->n_dims = ne1 > 1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = t->ne[3] = 1;
    t->nbytes = (size_t)(ne0 * ne1) * 4;
}

static model_mat mat(const float *base, int64_t layer, int64_t rows, int64_t cols) {
    return (model_mat){base + layer * rows * cols, KT_F32, rows, cols, NULL};
}

kvant_code model_load_llama2c(model *m, const char *path, const char *tokenizer_path, kvant_status *st) {
    kvant_code rc = core_map_file(path, &m->map, st);
    if (rc) return rc;
    if (m->map.size < 28)
        return core_fail(st, KVANT_ERR_FORMAT, "%s: not a GGUF file and too short (%zu bytes) for a llama2.c checkpoint",
                         path, m->map.size);
    int32_t h[7];
    memcpy(h, m->map.data, sizeof h);
    model_config *c = &m->cfg;
    const bool shared = h[5] > 0;
    *c = (model_config){.dim = h[0], .hidden_dim = h[1], .n_layers = h[2], .n_heads = h[3], .n_kv_heads = h[4],
                        .vocab_size = h[5] == INT32_MIN ? 0 : abs(h[5]), .n_ctx_train = h[6],
                        .rope_base = 10000.0f, .norm_eps = 1e-5f};
    if (c->n_heads <= 0 || c->dim <= 0 || c->dim % c->n_heads)
        return core_fail(st, KVANT_ERR_FORMAT, "%s: not a GGUF file, and not a valid llama2.c checkpoint "
                         "(dim %d, %d heads)", path, c->dim, c->n_heads);
    c->head_dim = c->dim / c->n_heads;
    c->rope_dim = c->head_dim;
    model_config_set_defaults(c);
    if ((rc = model_check_config(c, path, st))) return rc;

    const int64_t C = c->dim, F = c->hidden_dim, L = c->n_layers, V = c->vocab_size, D = c->head_dim;
    const int64_t QD = c->n_heads * D, KVD = c->n_kv_heads * D;
    cursor cur = {m->map.data, 28, m->map.size, path, st, true};
    const float *emb = take(&cur, V * C, "token_embedding_table");
    const float *rms_att = take(&cur, L * C, "rms_att_weight");
    const float *wq = take(&cur, L * QD * C, "wq");
    const float *wk = take(&cur, L * KVD * C, "wk");
    const float *wv = take(&cur, L * KVD * C, "wv");
    const float *wo = take(&cur, L * C * QD, "wo");
    const float *rms_ffn = take(&cur, L * C, "rms_ffn_weight");
    const float *w1 = take(&cur, L * F * C, "w1");
    const float *w2 = take(&cur, L * C * F, "w2");
    const float *w3 = take(&cur, L * F * C, "w3");
    const float *rms_final = take(&cur, C, "rms_final_weight");
    take(&cur, (int64_t)c->n_ctx_train * D / 2, "freq_cis_real");
    take(&cur, (int64_t)c->n_ctx_train * D / 2, "freq_cis_imag");
    const float *wcls = shared ? emb : take(&cur, V * C, "wcls");
    if (!cur.ok) return st->code;
    if (cur.off != cur.size)
        core_log(KVANT_LOG_WARN, "%s: %llu trailing bytes after the weights", path,
                 (unsigned long long)(cur.size - cur.off));

    m->layers = calloc((size_t)L, sizeof *m->layers);
    m->tensors = calloc((size_t)(9 * L + 3), sizeof *m->tensors);
    if (!m->layers || !m->tensors) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    m->tok_embd = mat(emb, 0, V, C);
    m->out_norm = rms_final;
    m->output = mat(wcls, 0, V, C);
    m->tied_output = shared;
    add_tensor(m, "token_embd.weight", C, V);
    char name[64];
    for (int64_t l = 0; l < L; l++) {
        model_layer *ly = &m->layers[l];
        ly->attn_norm = rms_att + l * C;
        ly->wq = mat(wq, l, QD, C);
        ly->wk = mat(wk, l, KVD, C);
        ly->wv = mat(wv, l, KVD, C);
        ly->wo = mat(wo, l, C, QD);
        ly->ffn_norm = rms_ffn + l * C;
        ly->w_gate = mat(w1, l, F, C);
        ly->w_down = mat(w2, l, C, F);
        ly->w_up = mat(w3, l, F, C);
        ly->rope_base = c->rope_base;
        ly->rope_scale = 1.0f;
        static const char *suffix[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                       "ffn_norm", "ffn_gate", "ffn_down", "ffn_up"};
        const int64_t shape[9][2] = {{C, 1}, {C, QD}, {C, KVD}, {C, KVD}, {QD, C}, {C, 1}, {C, F}, {F, C}, {C, F}};
        for (int i = 0; i < 9; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", (int)l, suffix[i]);
            add_tensor(m, name, shape[i][0], shape[i][1]);
        }
    }
    add_tensor(m, "output_norm.weight", C, 1);
    if (!shared) add_tensor(m, "output.weight", C, V);
    snprintf(m->file_format, sizeof m->file_format, "llama2.c v0");
    const char *slash = strrchr(path, '/');
    snprintf(m->name, sizeof m->name, "%s", slash ? slash + 1 : path);

    /* the vocabulary lives in a separate tokenizer.bin */
    char guess[4096];
    if (!tokenizer_path) {
        snprintf(guess, sizeof guess, "%.*stokenizer.bin", slash ? (int)(slash - path + 1) : 0, path);
        FILE *f = fopen(guess, "rb");
        if (!f)
            return core_fail(st, KVANT_ERR_ARG, "%s: llama2.c checkpoints carry no vocabulary; pass its tokenizer.bin "
                             "with -z (no %s found)", path, guess);
        fclose(f);
        tokenizer_path = guess;
    }
    m->tok = tok_from_llama2c(tokenizer_path, c->vocab_size, st);
    return m->tok ? KVANT_OK : st->code;
}
