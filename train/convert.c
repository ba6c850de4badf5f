/* convert.c - train_model <-> kvant models and GGUF files: initialization
 * from a loaded model (any weight type, dequantized), checkpoints written
 * as GGUF (F32, loadable by run/ppl), the optimizer state's side file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "model/model.h"
#include "train/convert.h"

train_config train_config_of(const model *m) {
    const model_config *c = &m->cfg;
    return (train_config){.dim = c->dim, .hidden = c->hidden_dim, .n_layers = c->n_layers, .n_heads = c->n_heads,
                          .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim, .vocab = c->vocab_size,
                          .ctx = c->n_ctx_train, .rope_dim = c->rope_dim, .rope_base = c->rope_base,
                          .rope_neox = c->rope_neox, .norm_eps = c->norm_eps, .tied = m->tied_output};
}

static void deq(const model_mat *w, float *dst) {
    kern_rows_to_float(w->type, w->data, w->rows, w->cols, dst);
}

train_model *train_model_from(const model *m, kvant_status *st) {
    /* the training forward/backward pass is the Llama-2 layout (train/tmpl.h) */
    if (model_require(m, MODEL_FEAT_ALL, "training (train, qat, distill)", st)) return NULL;
    const train_config c = train_config_of(m);
    train_model *t = train_model_new(&c, st);
    if (!t) return NULL;
    const train_layout *y = &t->lay;
    const size_t C = c.dim, F = c.hidden, QD = (size_t)c.n_heads * c.head_dim, KVD = (size_t)c.n_kv_heads * c.head_dim;
    deq(&m->tok_embd, t->p + y->tok_embd);
    if (!c.tied) deq(&m->output, t->p + y->output);
    memcpy(t->p + y->out_norm, m->out_norm, sizeof(float) * C);
    for (int l = 0; l < c.n_layers; l++) {
        const model_layer *L = &m->layers[l];
        memcpy(t->p + y->attn_norm + l * C, L->attn_norm, sizeof(float) * C);
        memcpy(t->p + y->ffn_norm + l * C, L->ffn_norm, sizeof(float) * C);
        deq(&L->wq, t->p + y->wq + l * QD * C);
        deq(&L->wk, t->p + y->wk + l * KVD * C);
        deq(&L->wv, t->p + y->wv + l * KVD * C);
        deq(&L->wo, t->p + y->wo + l * C * QD);
        deq(&L->w_gate, t->p + y->gate + l * F * C);
        deq(&L->w_up, t->p + y->up + l * F * C);
        deq(&L->w_down, t->p + y->down + l * C * F);
    }
    return t;
}

static kvant_code add_f32(gguf_writer *w, const char *name, const float *data, int64_t cols, int64_t rows,
                          kvant_status *st) {
    const int64_t ne[2] = {cols, rows};
    return gguf_writer_add_tensor(w, name, KT_F32, rows > 1 ? 2 : 1, ne, data, st);
}

kvant_code train_model_save(const train_model *t, const float *P, const model *tok_src, const char *name,
                            const char *path, const train_save_hook *hook, kvant_status *st) {
    if (!tok_src->gguf)
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "the tokenizer must come from a GGUF model (not a llama2.c file)");
    const train_config *c = &t->cfg;
    const train_layout *y = &t->lay;
    if (!P) P = t->p;
    gguf_writer *w = gguf_writer_new();
    if (!w) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_str(w, "general.name", name);
    gguf_writer_add_u32(w, "general.file_type", 0);
    gguf_writer_add_u32(w, "llama.context_length", (uint32_t)c->ctx);
    gguf_writer_add_u32(w, "llama.embedding_length", (uint32_t)c->dim);
    gguf_writer_add_u32(w, "llama.block_count", (uint32_t)c->n_layers);
    gguf_writer_add_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden);
    gguf_writer_add_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads);
    gguf_writer_add_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    gguf_writer_add_u32(w, "llama.attention.key_length", (uint32_t)c->head_dim);
    gguf_writer_add_u32(w, "llama.attention.value_length", (uint32_t)c->head_dim);
    gguf_writer_add_u32(w, "llama.rope.dimension_count", (uint32_t)c->rope_dim);
    gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", c->norm_eps);
    gguf_writer_add_f32(w, "llama.rope.freq_base", c->rope_base);
    gguf_writer_add_u32(w, "llama.vocab_size", (uint32_t)c->vocab);
    const int64_t nkv = gguf_n_kv(tok_src->gguf);
    for (int64_t i = 0; i < nkv; i++) {
        const char *key = gguf_kv_key(tok_src->gguf, i);
        if (!strncmp(key, "tokenizer.", 10)) gguf_writer_add_value(w, key, gguf_kv_value(tok_src->gguf, i));
    }
    if (hook && hook->meta) hook->meta(hook->user, w);
    const size_t C = c->dim, F = c->hidden, QD = (size_t)c->n_heads * c->head_dim, KVD = (size_t)c->n_kv_heads * c->head_dim;
    kvant_code rc = KVANT_OK;
    char nm[96];
#define ADD(nmstr, off, cols, rows, mm)                                                                           \
    if (!rc) {                                                                                                    \
        if (hook && hook->tensor && (mm))                                                                         \
            rc = hook->tensor(hook->user, w, nmstr, P + (off), (cols), (rows), st);                              \
        else                                                                                                      \
            rc = add_f32(w, nmstr, P + (off), (cols), (rows), st);                                               \
    }
    ADD("token_embd.weight", y->tok_embd, C, c->vocab, true)
    ADD("output_norm.weight", y->out_norm, C, 1, false)
    if (!c->tied) ADD("output.weight", y->output, C, c->vocab, true)
    for (int l = 0; l < c->n_layers && !rc; l++) {
#define LNAME(s) (snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, s), nm)
        ADD(LNAME("attn_norm"), y->attn_norm + l * C, C, 1, false)
        ADD(LNAME("attn_q"), y->wq + l * QD * C, C, QD, true)
        ADD(LNAME("attn_k"), y->wk + l * KVD * C, C, KVD, true)
        ADD(LNAME("attn_v"), y->wv + l * KVD * C, C, KVD, true)
        ADD(LNAME("attn_output"), y->wo + l * C * QD, QD, C, true)
        ADD(LNAME("ffn_norm"), y->ffn_norm + l * C, C, 1, false)
        ADD(LNAME("ffn_gate"), y->gate + l * F * C, C, F, true)
        ADD(LNAME("ffn_down"), y->down + l * C * F, F, C, true)
        ADD(LNAME("ffn_up"), y->up + l * F * C, C, F, true)
#undef LNAME
    }
#undef ADD
    if (!rc) rc = gguf_writer_write_file(w, path, st);
    gguf_writer_free(w);
    return rc;
}

/* ---- optimizer state: a GGUF side file with m, v and the step ---------------- */
kvant_code train_state_save(const train_model *t, const char *path, uint64_t rng, const train_fq *fq,
                            kvant_status *st) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    gguf_writer_add_str(w, "general.architecture", "kvant-train-state");
    gguf_writer_add_u64(w, "kvant.train.step", (uint64_t)t->step);
    gguf_writer_add_u64(w, "kvant.train.rng", rng);
    gguf_writer_add_u64(w, "kvant.train.n_params", (uint64_t)t->n);
    const int64_t ne[1] = {(int64_t)t->n};
    kvant_code rc = gguf_writer_add_tensor(w, "kvant.adam.m", KT_F32, 1, ne, t->m, st);
    if (!rc) rc = gguf_writer_add_tensor(w, "kvant.adam.v", KT_F32, 1, ne, t->v, st);
    if (!rc && fq) {
        float *buf = malloc(sizeof(float) * 2 * (fq->n_qp + 1));
        if (!buf) rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        else {
            for (size_t i = 0; i < fq->n_qp; i++) {
                buf[2 * i] = fq->qp[i].scale;
                buf[2 * i + 1] = (float)fq->qp[i].zero;
            }
            const int64_t ne2[2] = {2, (int64_t)fq->n_qp};
            rc = gguf_writer_add_tensor(w, "kvant.qat.qp", KT_F32, 2, ne2, buf, st);
            free(buf);
        }
    }
    if (!rc) rc = gguf_writer_write_file(w, path, st);
    gguf_writer_free(w);
    return rc;
}

kvant_code train_state_load(train_model *t, const char *path, uint64_t *rng, kvant_status *st) {
    gguf_ctx *g = gguf_open(path, st);
    if (!g) return st->code;
    int64_t step = 0, n = 0, r = 0;
    const gguf_tensor *m = gguf_find_tensor(g, "kvant.adam.m"), *v = gguf_find_tensor(g, "kvant.adam.v");
    kvant_code rc = KVANT_OK;
    if (!gguf_get_i64(g, "kvant.train.step", &step) || !gguf_get_i64(g, "kvant.train.n_params", &n) || !m || !v ||
        m->type != KT_F32 || v->type != KT_F32)
        rc = core_fail(st, KVANT_ERR_FORMAT, "%s: not a kvant training state", path);
    else if ((uint64_t)n != t->n || m->ne[0] != n || v->ne[0] != n || m->nbytes != t->n * 4 || v->nbytes != t->n * 4)
        rc = core_fail(st, KVANT_ERR_ARG, "%s: optimizer state is for %lld parameters, the model has %zu", path,
                       (long long)n, t->n);
    else {
        memcpy(t->m, m->data, t->n * 4);
        memcpy(t->v, v->data, t->n * 4);
        t->step = step;
        uint64_t rr = 0;
        const gguf_value *gv = gguf_find(g, "kvant.train.rng");
        if (gv && gv->type == GGUF_UINT64) rr = gv->u64;
        (void)r;
        *rng = rr;
    }
    gguf_close(g);
    return rc;
}

kvant_code train_state_load_fq(train_fq *fq, const char *path, kvant_status *st) {
    gguf_ctx *g = gguf_open(path, st);
    if (!g) return st->code;
    const gguf_tensor *t = gguf_find_tensor(g, "kvant.qat.qp");
    kvant_code rc = KVANT_OK;
    if (!t || t->type != KT_F32 || t->ne[0] != 2 || t->ne[1] != (int64_t)fq->n_qp || t->nbytes != fq->n_qp * 8)
        rc = core_fail(st, KVANT_ERR_FORMAT, "%s: no QAT scales for this model and spec", path);
    else {
        const float *d = t->data;
        for (size_t i = 0; i < fq->n_qp; i++) {
            fq->qp[i].scale = d[2 * i];
            fq->qp[i].zero = (int)d[2 * i + 1];
        }
    }
    gguf_close(g);
    return rc;
}
