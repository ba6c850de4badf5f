/* llama.c - the llama-family forward pass (RMSNorm, RoPE, GQA attention,
 * SwiGLU), for a batch of T tokens from one or several sequences
 * (segments).  Reads top to bottom
 * like the paper; shapes use the letters defined in model.h.  K/V go
 * through a kv_store (contiguous, paged or streaming); attention reads
 * them through a view with the naive or the flash kernel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/kernels.h"
#include "kernels/repack.h"
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
    w->attn_bytes = attn_bytes;
    w->attn_scratch = malloc((size_t)nth * attn_bytes);
    w->mm = malloc(kern_matmul_scratch_bytes(max_T, kmax));
    w->sink_mass = calloc((size_t)c->n_layers, sizeof(double));
    w->sink_head = malloc((size_t)c->n_heads * sizeof(float));
    w->pos = malloc(T * sizeof(int));
    w->seg_row = malloc(T * sizeof(int));
    w->seg_list = malloc(T * sizeof(int));
    w->row_seg = malloc(T * sizeof(int));
    if (!w->row_seg || !w->pos || !w->seg_row || !w->seg_list || !w->x || !w->xb || !w->xb2 || !w->q || !w->k || !w->v || !w->hb || !w->hb2 || !w->attn_scratch || !w->mm ||
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
    free(w->pos); free(w->seg_row); free(w->seg_list); free(w->row_seg);
    free(w);
}

/* y[T][rows] = x[T][cols] . W^T  (the linear layer `id` of layer l) */
static void matmul(const model *m, model_work *w, int l, model_mm_id id, const model_mat *W, const float *x, float *y,
                   int T) {
    if (w->tap && id != MODEL_MM_WK && id != MODEL_MM_WV && id != MODEL_MM_UP)
        w->tap(w->hook_user, l, id, x, T, (int)W->cols);
    if (w->mm_hook && w->mm_hook(w->hook_user, l, id, W, x, y, T)) return;
    if (W->packed) kern_matmul_packed(m->pool, w->mm, W->packed, W->type, x, y, T, W->rows, W->cols);
    else kern_matmul(m->pool, w->mm, W->data, W->type, x, y, T, W->rows, W->cols);
}

/* Several linear layers of one input (Q, K, V; gate, up): one packed call
 * when they are all packed with one type and no hook watches (activations
 * quantized once, one pool run; the same bits as one call each), else one
 * matmul() each. */
static void matmul_n(const model *m, model_work *w, int l, const model_mm_id *id, const model_mat *const *W,
                     const float *x, float *const *y, int n, int T) {
    bool fuse = !w->tap && !w->mm_hook && n <= KERN_PACK_MAX_OUT;
    for (int i = 0; i < n && fuse; i++) fuse = W[i]->packed && W[i]->type == W[0]->type && W[i]->cols == W[0]->cols;
    if (!fuse) {
        for (int i = 0; i < n; i++) matmul(m, w, l, id[i], W[i], x, y[i], T);
        return;
    }
    kern_packed_out out[KERN_PACK_MAX_OUT];
    for (int i = 0; i < n; i++) out[i] = (kern_packed_out){W[i]->packed, W[i]->rows, y[i]};
    kern_matmul_packed_n(m->pool, w->mm, W[0]->type, out, n, x, T, W[0]->cols);
}

/* Attention of every segment's rows over its own cache, layer l (rows
 * already written to the caches).  Single-token (decode) segments run as
 * one parallel job, a whole segment per thread, instead of one job each:
 * a step with many decoders would otherwise pay a thread-pool round trip
 * per sequence per layer.  Longer segments, and single-token ones when
 * there are fewer of them than threads (one sequence decoding), split
 * their heads across the threads inside the kernel.  Either way each row is computed by one thread in the
 * kernel's fixed order, so results do not depend on the grouping. */
typedef struct {
    const model *m;
    model_work *w;
    const model_segment *seg;
    const int *rows;          /* first row of each segment */
    const int *list;          /* the single-token segments */
    int n_list, layer;
    const kern_rope_params *rope;
    _Atomic int next;         /* the next unclaimed entry of list */
} attn_job;

static void attend_segment(const model *m, model_work *w, core_pool *pool, void *scratch, int l,
                           const model_segment *sg, int r0, const kern_rope_params *rope) {
    const model_config *c = &m->cfg;
    const int D = c->head_dim, QD = c->n_heads * D;
    kv_store *kv = sg->kv;
    const int n = sg->n, pos0 = kv->n_pos;
    /* the segment's queries attend to its own cache 0 .. pos0+n-1 */
    kern_kv_view view;
    kv_view(kv, l, pos0 + n, &view);
    if (kv->rope_on_read) view.rope_k = rope;
    const kern_attn_dims dims = {n, c->n_heads, c->n_kv_heads, D, pos0, 0};
    const float *q = w->q + (size_t)r0 * QD;
    float *out = w->xb2 + (size_t)r0 * QD;
    if (w->attn == MODEL_ATTN_FLASH) {
        kern_attn_flash(pool, scratch, q, &view, out, &dims);
    } else {
        kern_attn_naive(pool, scratch, q, &view, out, &dims, w->sink_n ? w->sink_head : NULL, w->sink_n);
        if (w->sink_n)
            for (int h = 0; h < c->n_heads; h++) w->sink_mass[l] += w->sink_head[h];
    }
}

/* threads claim the sequences one at a time: their contexts differ, so a
 * fixed share would leave one thread waiting on the other */
static void attn_task(void *ctx, int ith, int nth) {
    attn_job *j = ctx;
    void *scratch = (uint8_t *)j->w->attn_scratch + (size_t)ith * j->w->attn_bytes;
    (void)nth;
    for (int i; (i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_list;) {
        const int s = j->list[i];
        attend_segment(j->m, j->w, NULL, scratch, j->layer, &j->seg[s], j->rows[s], j->rope); /* NULL: this thread */
    }
}

static void attention(const model *m, model_work *w, int l, const model_segment *seg, int n_seg,
                      const kern_rope_params *rope) {
    int n_list = 0;
    for (int s = 0, r0 = 0; s < n_seg; r0 += seg[s].n, s++) {
        w->seg_row[s] = r0;
        if (seg[s].n == 1 && w->attn == MODEL_ATTN_FLASH) w->seg_list[n_list++] = s;
        else attend_segment(m, w, m->pool, w->attn_scratch, l, &seg[s], r0, rope);
    }
    if (n_list == 0) return;
    attn_job j = {m, w, seg, w->seg_row, w->seg_list, n_list, l, rope, 0};
    if (n_list < core_pool_size(m->pool)) /* fewer segments than threads: each splits its heads over the pool */
        for (int i = 0; i < n_list; i++)
            attend_segment(m, w, m->pool, w->attn_scratch, l, &seg[j.list[i]], j.rows[j.list[i]], rope);
    else core_pool_run(m->pool, attn_task, &j);
}

/* The per-row steps between the matmuls, split over the pool by rows when
 * the batch has several (a row's arithmetic does not depend on the thread
 * or on the other rows; one decoding sequence stays on the caller, where a
 * pool round trip would cost more than the work):
 *   ROWS_NORM    x[t] += xb[t] if resid, then xb[t] = RMSNorm(x[t]) if norm
 *   ROWS_QKV     RoPE on q[t] and k[t], K and V rows into the row's cache
 *   ROWS_SWIGLU  hb[t] = silu(hb[t]) * hb2[t] */
typedef enum { ROWS_NORM, ROWS_QKV, ROWS_SWIGLU } rows_stage;
typedef struct {
    const model *m;
    model_work *w;
    const model_segment *seg;
    rows_stage stage;
    int T, layer;
    bool resid;
    const float *norm;
    const kern_rope_params *rope;
} rows_job;

static void rows_do(const rows_job *j, int t0, int t1) {
    const model_config *c = &j->m->cfg;
    model_work *w = j->w;
    const int C = c->dim, D = c->head_dim, QD = c->n_heads * D, KVD = c->n_kv_heads * D;
    switch (j->stage) {
    case ROWS_NORM:
        for (int t = t0; t < t1; t++) {
            float *x = w->x + (size_t)t * C, *xb = w->xb + (size_t)t * C;
            if (j->resid)
                for (int i = 0; i < C; i++) x[i] += xb[i];
            if (j->norm) kern_rmsnorm(xb, x, j->norm, C, c->norm_eps);
        }
        break;
    case ROWS_QKV:
        for (int t = t0; t < t1; t++) {
            kv_store *kv = j->seg[w->row_seg[t]].kv;
            const kern_from_float_fn to_row = kern_ops(kv->type)->from_float; /* float K/V row -> cache type */
            kern_rope(w->q + (size_t)t * QD, c->n_heads, D, w->pos[t], j->rope);
            if (!kv->rope_on_read) kern_rope(w->k + (size_t)t * KVD, c->n_kv_heads, D, w->pos[t], j->rope);
            uint8_t *krow, *vrow;
            kv_row(kv, j->layer, w->pos[t], &krow, &vrow);
            kv_write_row(kv, to_row, w->k + (size_t)t * KVD, krow, D);
            kv_write_row(kv, to_row, w->v + (size_t)t * KVD, vrow, D);
        }
        break;
    case ROWS_SWIGLU: {
        const size_t F = (size_t)c->hidden_dim;
        kern_swiglu(w->hb + (size_t)t0 * F, w->hb + (size_t)t0 * F, w->hb2 + (size_t)t0 * F, (int64_t)(t1 - t0) * (int64_t)F);
        break;
    }
    }
}

static void rows_task(void *ctx, int ith, int nth) {
    const rows_job *j = ctx;
    int64_t lo, hi;
    core_split(j->T, ith, nth, &lo, &hi);
    rows_do(j, (int)lo, (int)hi);
}

static void rows_run(const rows_job *j) {
    if (j->T >= 2 && core_pool_size(j->m->pool) > 1) core_pool_run(j->m->pool, rows_task, (void *)j);
    else rows_do(j, 0, j->T);
}

static void rows_norm(const model *m, model_work *w, int T, bool resid, const float *norm) {
    const rows_job j = {.m = m, .w = w, .stage = ROWS_NORM, .T = T, .resid = resid, .norm = norm};
    rows_run(&j);
}

/* One pass over a batch of segments (model.h, model_forward_batch): every
 * matmul runs over all T = sum(n_i) rows at once (weights read once per
 * step), RMSNorm / RoPE per row at the row's own position, attention per
 * segment through the segment's own cache view.  Room is reserved already. */
static void forward_batch(const model *m, model_work *w, const model_segment *seg, int n_seg, int T, float *logits) {
    const model_config *c = &m->cfg;
    const int C = c->dim;
    const kern_type_traits *et = kern_type_get(m->tok_embd.type);
    const size_t erow = kern_row_bytes(m->tok_embd.type, C);
    const kern_rope_params rope = {c->rope_dim, c->rope_base, c->rope_neox};

    /* token embeddings: x[t] = E[token_t]; row t is token j of segment s at
     * cache index pos[t] = kv_s->n_pos + j */
    for (int s = 0, t = 0; s < n_seg; s++)
        for (int j = 0; j < seg[s].n; j++, t++) {
            et->to_float((const uint8_t *)m->tok_embd.data + (size_t)seg[s].tokens[j] * erow, w->x + (size_t)t * C,
                         C);
            w->pos[t] = seg[s].kv->n_pos + j;
            w->row_seg[t] = s;
        }

    rows_norm(m, w, T, false, m->layers[0].attn_norm); /* xb = RMSNorm(x) for layer 0's attention */
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->layers[l];

        /* attention block: x += Wo . attn(rope(Wq xn), rope(Wk xn), Wv xn) */
        const model_mm_id qkv_id[3] = {MODEL_MM_WQ, MODEL_MM_WK, MODEL_MM_WV};
        const model_mat *qkv_w[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_y[3] = {w->q, w->k, w->v};                    /* (T, H*D), (T, Hkv*D), (T, Hkv*D) */
        matmul_n(m, w, l, qkv_id, qkv_w, w->xb, qkv_y, 3, T);
        const rows_job qkv = {.m = m, .w = w, .seg = seg, .stage = ROWS_QKV, .T = T, .layer = l, .rope = &rope};
        rows_run(&qkv);
        attention(m, w, l, seg, n_seg, &rope);
        matmul(m, w, l, MODEL_MM_WO, &L->wo, w->xb2, w->xb, T);  /* (T, C) */
        rows_norm(m, w, T, true, L->ffn_norm);                     /* x += Wo ...; xb = RMSNorm(x) */

        /* feed-forward block: x += W_down . (silu(W_gate xn) * W_up xn) */
        const model_mm_id glu_id[2] = {MODEL_MM_GATE, MODEL_MM_UP};
        const model_mat *glu_w[2] = {&L->w_gate, &L->w_up};
        float *glu_y[2] = {w->hb, w->hb2};                         /* (T, F) each */
        matmul_n(m, w, l, glu_id, glu_w, w->xb, glu_y, 2, T);
        const rows_job glu = {.m = m, .w = w, .stage = ROWS_SWIGLU, .T = T};
        rows_run(&glu);
        matmul(m, w, l, MODEL_MM_DOWN, &L->w_down, w->hb, w->xb, T);  /* (T, C) */
        /* x += W_down ...; and the next layer's attention input */
        rows_norm(m, w, T, true, l + 1 < c->n_layers ? m->layers[l + 1].attn_norm : NULL);
    }
    if (w->sink_n) w->sink_queries += (int64_t)T * c->n_heads;
    for (int s = 0; s < n_seg; s++) kv_commit(seg[s].kv, seg[s].tokens, seg[s].n);

    if (!logits) return;
    /* final norm and classifier over the rows that want logits, packed in
     * segment order: all rows of a MODEL_LOGITS_ALL segment, the last row
     * of a MODEL_LOGITS_LAST one */
    int nrows = 0;
    for (int s = 0, r0 = 0; s < n_seg; r0 += seg[s].n, s++) {
        const int first = seg[s].logits == MODEL_LOGITS_ALL ? r0 : r0 + seg[s].n - 1;
        if (seg[s].logits == MODEL_LOGITS_NONE) continue;
        for (int t = first; t < r0 + seg[s].n; t++, nrows++)
            kern_rmsnorm(w->xb + (size_t)nrows * C, w->x + (size_t)t * C, m->out_norm, C, c->norm_eps);
    }
    if (nrows) matmul(m, w, -1, MODEL_MM_OUTPUT, &m->output, w->xb, logits, nrows);  /* (nrows, V) */
}

int model_batch_logit_rows(const model_segment *seg, int n_seg) {
    int rows = 0;
    for (int s = 0; s < n_seg; s++)
        rows += seg[s].logits == MODEL_LOGITS_ALL ? seg[s].n : seg[s].logits == MODEL_LOGITS_LAST ? 1 : 0;
    return rows;
}

kvant_code model_forward_batch(const model *m, model_work *w, const model_segment *seg, int n_seg, float *logits,
                               kvant_status *st) {
    const model_config *c = &m->cfg;
    int T = 0;
    for (int s = 0; s < n_seg; s++) {
        if (seg[s].n <= 0) return core_fail(st, KVANT_ERR_ARG, "forward: empty segment %d", s);
        for (int i = 0; i < seg[s].n; i++)
            if (seg[s].tokens[i] < 0 || seg[s].tokens[i] >= c->vocab_size)
                return core_fail(st, KVANT_ERR_ARG, "token id %d out of range [0, %d)", seg[s].tokens[i],
                                 c->vocab_size);
        for (int r = 0; r < s; r++)
            if (seg[r].kv == seg[s].kv) return core_fail(st, KVANT_ERR_ARG, "forward: a cache appears twice");
        if (seg[s].n > seg[s].kv->max_chunk)
            return core_fail(st, KVANT_ERR_ARG, "forward: segment of %d tokens > the cache's chunk limit %d",
                             seg[s].n, seg[s].kv->max_chunk);
        T += seg[s].n;
    }
    if (T <= 0) return core_fail(st, KVANT_ERR_ARG, "forward: empty batch");
    if (T > w->max_T) return core_fail(st, KVANT_ERR_ARG, "forward: %d tokens > the batch limit %d", T, w->max_T);
    for (int s = 0; s < n_seg; s++) {
        kv_store *kv = seg[s].kv;
        kvant_code rc = kv_reserve(kv, seg[s].n, st);
        if (rc) return rc;
        if (kv->n_pos + seg[s].n > w->n_ctx)
            return core_fail(st, KVANT_ERR_FULL, "context full: %d cached + %d new tokens > %d positions",
                             kv->n_pos, seg[s].n, w->n_ctx);
    }
    forward_batch(m, w, seg, n_seg, T, logits);
    core_ok(st);
    return KVANT_OK;
}

/* A single sequence is a batch of one segment, in chunks of at most max_T
 * (and the cache's max_chunk) tokens. */
kvant_code model_forward(const model *m, model_work *w, kv_store *kv, const int32_t *tokens, int n,
                         float *logits, bool all_logits, kvant_status *st) {
    const model_config *c = &m->cfg;
    if (n <= 0) return core_fail(st, KVANT_ERR_ARG, "forward: empty batch");
    const int chunk = w->max_T < kv->max_chunk ? w->max_T : kv->max_chunk;
    for (int done = 0; done < n;) {
        const int T = n - done < chunk ? n - done : chunk;
        const bool last = done + T == n;
        model_segment seg = {kv, tokens + done, T, MODEL_LOGITS_NONE};
        float *out = NULL;
        if (logits && all_logits) out = logits + (size_t)done * c->vocab_size, seg.logits = MODEL_LOGITS_ALL;
        else if (logits && last) out = logits, seg.logits = MODEL_LOGITS_LAST;
        kvant_code rc = model_forward_batch(m, w, &seg, 1, out, st);
        if (rc) return rc;
        done += T;
    }
    core_ok(st);
    return KVANT_OK;
}
