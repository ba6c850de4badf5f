/* llama.c - the llama-family forward pass (RMSNorm, RoPE, GQA attention,
 * SwiGLU), for a batch of T tokens of one sequence.  Reads top to bottom
 * like the paper; shapes use the letters defined in model.h.  K/V go
 * through a kv_store (contiguous, paged or streaming); attention reads
 * them through a view with the naive or the flash kernel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/kernels.h"
#include "model/model.h"

model_work *model_work_new(const model *m, int max_T, int n_ctx, model_attn attn, kvant_status *st) {
    const model_config *c = &m->cfg;
    const int nth = core_pool_size(m->pool);
    const size_t T = (size_t)max_T, qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    int64_t kmax = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
    if ((int64_t)qd > kmax) kmax = (int64_t)qd;
    const kern_attn_dims dims = {max_T, c->n_heads, c->n_kv_heads, c->head_dim, 0, 0};
    const size_t attn_bytes = attn == MODEL_ATTN_NAIVE ? kern_attn_naive_scratch_bytes(&dims, n_ctx)
                                                       : kern_attn_flash_scratch_bytes(&dims);
    model_work *w = calloc(1, sizeof *w);
    if (!w) goto oom;
    w->max_T = max_T;
    w->n_ctx = n_ctx;
    w->attn = attn;
    w->x = malloc(T * c->dim * sizeof(float));
    w->xb = malloc(T * (size_t)(c->dim > (int)qd ? c->dim : (int)qd) * sizeof(float));
    w->xb2 = malloc(T * qd * sizeof(float));
    w->q = malloc(T * qd * sizeof(float));
    w->k = malloc(T * kvd * sizeof(float));
    w->v = malloc(T * kvd * sizeof(float));
    w->hb = malloc(T * c->hidden_dim * sizeof(float));
    w->hb2 = malloc(T * c->hidden_dim * sizeof(float));
    w->attn_scratch = malloc((size_t)nth * attn_bytes);
    w->mm = malloc(kern_matmul_scratch_bytes(max_T, kmax));
    w->sink_mass = calloc((size_t)c->n_layers, sizeof(double));
    w->sink_head = malloc((size_t)c->n_heads * sizeof(float));
    if (!w->x || !w->xb || !w->xb2 || !w->q || !w->k || !w->v || !w->hb || !w->hb2 || !w->attn_scratch || !w->mm ||
        !w->sink_mass || !w->sink_head)
        goto oom;
    return w;
oom:
    model_work_free(w);
    core_fail(st, KVANT_ERR_NOMEM, "cannot allocate work buffers for batches of %d tokens", max_T);
    return NULL;
}

void model_work_free(model_work *w) {
    if (!w) return;
    free(w->x); free(w->xb); free(w->xb2); free(w->q); free(w->k); free(w->v);
    free(w->hb); free(w->hb2); free(w->attn_scratch); free(w->mm); free(w->sink_mass); free(w->sink_head);
    free(w);
}

/* y[T][rows] = x[T][cols] . W^T  (the linear layer `id` of layer l) */
static void matmul(const model *m, model_work *w, int l, model_mm_id id, const model_mat *W, const float *x, float *y,
                   int T) {
    if (w->tap && id != MODEL_MM_WK && id != MODEL_MM_WV && id != MODEL_MM_UP)
        w->tap(w->hook_user, l, id, x, T, (int)W->cols);
    if (w->mm_hook && w->mm_hook(w->hook_user, l, id, W, x, y, T)) return;
    kern_matmul(m->pool, w->mm, W->data, W->type, x, y, T, W->rows, W->cols);
}

/* one chunk of T <= max_T tokens at cache indices pos0 .. pos0+T-1 (room
 * already reserved) */
static void forward_chunk(const model *m, model_work *w, kv_store *kv, const int32_t *tokens, int T,
                          float *logits, bool all_logits) {
    const model_config *c = &m->cfg;
    const int C = c->dim, F = c->hidden_dim, D = c->head_dim;
    const int QD = c->n_heads * D, KVD = c->n_kv_heads * D;
    const int pos0 = kv->n_pos;
    const kern_type_traits *et = kern_type_get(m->tok_embd.type);
    const size_t erow = kern_row_bytes(m->tok_embd.type, C);
    const kern_rope_params rope = {c->rope_dim, c->rope_base, c->rope_neox};
    const kern_from_float_fn to_row = kern_ops(kv->type)->from_float; /* float K/V row -> cache type */

    /* token embeddings: x[t] = E[token_t] */
    for (int t = 0; t < T; t++)
        et->to_float((const uint8_t *)m->tok_embd.data + (size_t)tokens[t] * erow, w->x + (size_t)t * C, C);

    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->layers[l];

        /* attention block: x += Wo . attn(rope(Wq xn), rope(Wk xn), Wv xn) */
        for (int t = 0; t < T; t++)
            kern_rmsnorm(w->xb + (size_t)t * C, w->x + (size_t)t * C, L->attn_norm, C, c->norm_eps);
        matmul(m, w, l, MODEL_MM_WQ, &L->wq, w->xb, w->q, T);   /* (T, H*D)   */
        matmul(m, w, l, MODEL_MM_WK, &L->wk, w->xb, w->k, T);   /* (T, Hkv*D) */
        matmul(m, w, l, MODEL_MM_WV, &L->wv, w->xb, w->v, T);   /* (T, Hkv*D) */
        for (int t = 0; t < T; t++) {
            kern_rope(w->q + (size_t)t * QD, c->n_heads, D, pos0 + t, &rope);
            if (!kv->rope_on_read) kern_rope(w->k + (size_t)t * KVD, c->n_kv_heads, D, pos0 + t, &rope);
            uint8_t *krow, *vrow;
            kv_row(kv, l, pos0 + t, &krow, &vrow);
            to_row(w->k + (size_t)t * KVD, krow, KVD);
            to_row(w->v + (size_t)t * KVD, vrow, KVD);
        }
        kern_kv_view view;
        kv_view(kv, l, pos0 + T, &view);
        if (kv->rope_on_read) view.rope_k = &rope;
        const kern_attn_dims dims = {T, c->n_heads, c->n_kv_heads, D, pos0, 0};
        if (w->attn == MODEL_ATTN_FLASH) {
            kern_attn_flash(m->pool, w->attn_scratch, w->q, &view, w->xb2, &dims);
        } else {
            kern_attn_naive(m->pool, w->attn_scratch, w->q, &view, w->xb2, &dims, w->sink_n ? w->sink_head : NULL,
                            w->sink_n);
            if (w->sink_n)
                for (int h = 0; h < c->n_heads; h++) w->sink_mass[l] += w->sink_head[h];
        }
        matmul(m, w, l, MODEL_MM_WO, &L->wo, w->xb2, w->xb, T);  /* (T, C) */
        for (size_t i = 0; i < (size_t)T * C; i++) w->x[i] += w->xb[i];

        /* feed-forward block: x += W_down . (silu(W_gate xn) * W_up xn) */
        for (int t = 0; t < T; t++)
            kern_rmsnorm(w->xb + (size_t)t * C, w->x + (size_t)t * C, L->ffn_norm, C, c->norm_eps);
        matmul(m, w, l, MODEL_MM_GATE, &L->w_gate, w->xb, w->hb, T);  /* (T, F) */
        matmul(m, w, l, MODEL_MM_UP, &L->w_up, w->xb, w->hb2, T);   /* (T, F) */
        kern_swiglu(w->hb, w->hb, w->hb2, (int64_t)T * F);
        matmul(m, w, l, MODEL_MM_DOWN, &L->w_down, w->hb, w->xb, T);  /* (T, C) */
        for (size_t i = 0; i < (size_t)T * C; i++) w->x[i] += w->xb[i];
    }
    if (w->sink_n) w->sink_queries += (int64_t)T * c->n_heads;
    kv_commit(kv, tokens, T);

    if (!logits) return;
    /* final norm and classifier: all rows, or only the last one */
    const int first = all_logits ? 0 : T - 1, nrows = T - first;
    for (int t = first; t < T; t++)
        kern_rmsnorm(w->xb + (size_t)(t - first) * C, w->x + (size_t)t * C, m->out_norm, C, c->norm_eps);
    matmul(m, w, -1, MODEL_MM_OUTPUT, &m->output, w->xb, logits, nrows);  /* (nrows, V) */
}

kvant_code model_forward(const model *m, model_work *w, kv_store *kv, const int32_t *tokens, int n,
                         float *logits, bool all_logits, kvant_status *st) {
    const model_config *c = &m->cfg;
    if (n <= 0) return core_fail(st, KVANT_ERR_ARG, "forward: empty batch");
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return core_fail(st, KVANT_ERR_ARG, "token id %d out of range [0, %d)", tokens[i], c->vocab_size);
    const int chunk = w->max_T < kv->max_chunk ? w->max_T : kv->max_chunk;
    for (int done = 0; done < n;) {
        const int T = n - done < chunk ? n - done : chunk;
        kvant_code rc = kv_reserve(kv, T, st);
        if (rc) return rc;
        if (kv->n_pos + T > w->n_ctx)
            return core_fail(st, KVANT_ERR_FULL, "context full: %d cached + %d new tokens > %d positions", kv->n_pos,
                             T, w->n_ctx);
        const bool last = done + T == n;
        float *out = NULL;
        if (logits && all_logits) out = logits + (size_t)done * c->vocab_size;
        else if (logits && last) out = logits;
        forward_chunk(m, w, kv, tokens + done, T, out, all_logits);
        done += T;
    }
    core_ok(st);
    return KVANT_OK;
}
