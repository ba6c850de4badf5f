/* llama.c - the forward pass of every architecture kvant runs (RMSNorm,
 * RoPE, MHA/GQA/MQA attention, a GLU feed-forward or routed experts), for
 * a batch of T tokens from one or several sequences (segments).  Reads top
 * to bottom like the paper; what the families add is a guarded step each
 * (biases, q/k norms, post-norms, soft-caps, sliding windows; model/arch.c
 * says which family has what).  Shapes use the letters of model.h, plus
 * E experts of which K are used per token, F_e wide.  K/V go through a
 * kv_store (contiguous, paged or streaming); attention reads them through
 * a view with the naive or the flash kernel. */
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
    if (c->expert_hidden > kmax) kmax = c->expert_hidden;
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
    if (c->n_expert > 0) {
        const size_t E = (size_t)c->n_expert, K = (size_t)c->n_expert_used, Fe = (size_t)c->expert_hidden;
        w->moe_logits = malloc(T * E * sizeof(float));
        w->moe_sel = malloc(T * K * sizeof(int32_t));
        w->moe_wt = malloc(T * K * sizeof(float));
        w->moe_rows = malloc(T * K * sizeof(int32_t));
        w->moe_count = malloc((E + 1) * sizeof(int32_t));
        w->moe_x = malloc(T * (size_t)c->dim * sizeof(float));
        w->moe_g = malloc(T * Fe * sizeof(float));
        w->moe_u = malloc(T * Fe * sizeof(float));
        w->moe_acc = malloc(T * K * (size_t)c->dim * sizeof(float));
        if (!w->moe_logits || !w->moe_sel || !w->moe_wt || !w->moe_rows || !w->moe_count || !w->moe_x || !w->moe_g ||
            !w->moe_u || !w->moe_acc)
            goto oom;
    }
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
    free(w->moe_logits); free(w->moe_sel); free(w->moe_wt); free(w->moe_rows); free(w->moe_count);
    free(w->moe_x); free(w->moe_g); free(w->moe_u); free(w->moe_acc);
    free(w);
}

/* y[T][rows] = x[T][cols] . W^T  (the linear layer `id` of layer l) */
static void matmul(const model *m, model_work *w, int l, model_mm_id id, const model_mat *W, const float *x, float *y,
                   int T) {
    if (w->tap && id <= MODEL_MM_OUTPUT && id != MODEL_MM_WK && id != MODEL_MM_WV && id != MODEL_MM_UP)
        w->tap(w->hook_user, l, id, x, T, (int)W->cols);
    if (w->mm_hook && w->mm_hook(w->hook_user, l, id, W, x, y, T)) return;
    if (W->outl.n) kern_matmul_packed_outl(m->pool, w->mm, W->packed, x, y, T, W->rows, W->cols, &W->outl);
    else if (W->packed) kern_matmul_packed(m->pool, w->mm, W->packed, W->type, x, y, T, W->rows, W->cols);
    else kern_matmul(m->pool, w->mm, W->data, W->type, x, y, T, W->rows, W->cols);
}

/* Several linear layers of one input (Q, K, V; gate, up): one packed call
 * when they are all packed with one type and no hook watches (activations
 * quantized once, one pool run; the same bits as one call each), else one
 * matmul() each. */
static void matmul_n(const model *m, model_work *w, int l, const model_mm_id *id, const model_mat *const *W,
                     const float *x, float *const *y, int n, int T) {
    bool fuse = !w->tap && !w->mm_hook && n <= KERN_PACK_MAX_OUT;
    for (int i = 0; i < n && fuse; i++)
        fuse = W[i]->packed && !W[i]->outl.n && W[i]->type == W[0]->type && W[i]->cols == W[0]->cols;
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

/* the layer's attention shape: its window, the family's scale and soft-cap */
static kern_attn_dims layer_dims(const model *m, int l, int T, int q_pos0) {
    const model_config *c = &m->cfg;
    return (kern_attn_dims){.T = T, .H = c->n_heads, .Hkv = c->n_kv_heads, .D = c->head_dim, .q_pos0 = q_pos0,
                            .scale = c->attn_scale, .softcap = c->attn_softcap, .window = m->layers[l].swa_window};
}

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
    const kern_attn_dims dims = layer_dims(m, l, n, pos0);
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
 *   ROWS_POST    xb[t] = RMSNorm(xb[t]) (gemma's post-attention / post-FFN norms), + bias first if any
 *   ROWS_QKV     biases, per-head q/k RMSNorm, RoPE on q[t] and k[t], K and V
 *                rows into the row's cache
 *   ROWS_GLU     hb[t] = act(hb[t]) * hb2[t] (SiLU or tanh-GELU) */
typedef enum { ROWS_NORM, ROWS_POST, ROWS_QKV, ROWS_GLU } rows_stage;
typedef struct {
    const model *m;
    model_work *w;
    const model_segment *seg;
    rows_stage stage;
    int T, layer;
    bool resid;
    const float *norm, *bias;
    const kern_rope_params *rope;
} rows_job;

static void add_bias(float *x, const float *b, int n) {
    for (int i = 0; i < n; i++) x[i] += b[i];
}

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
    case ROWS_POST:
        for (int t = t0; t < t1; t++) {
            float *xb = w->xb + (size_t)t * C;
            if (j->bias) add_bias(xb, j->bias, C);
            if (j->norm) kern_rmsnorm(xb, xb, j->norm, C, c->norm_eps);
        }
        break;
    case ROWS_QKV: {
        const model_layer *L = &j->m->layers[j->layer];
        for (int t = t0; t < t1; t++) {
            kv_store *kv = j->seg[w->row_seg[t]].kv;
            const kern_from_float_fn to_row = kern_ops(kv->type)->from_float; /* float K/V row -> cache type */
            float *q = w->q + (size_t)t * QD, *k = w->k + (size_t)t * KVD;
            if (L->bq) add_bias(q, L->bq, QD), add_bias(k, L->bk, KVD), add_bias(w->v + (size_t)t * KVD, L->bv, KVD);
            if (L->q_norm) { /* each head normalized over its D dims */
                for (int h = 0; h < c->n_heads; h++) kern_rmsnorm(q + (size_t)h * D, q + (size_t)h * D, L->q_norm, D, c->norm_eps);
                for (int h = 0; h < c->n_kv_heads; h++) kern_rmsnorm(k + (size_t)h * D, k + (size_t)h * D, L->k_norm, D, c->norm_eps);
            }
            kern_rope(q, c->n_heads, D, w->pos[t], j->rope);
            if (!kv->rope_on_read) kern_rope(k, c->n_kv_heads, D, w->pos[t], j->rope);
            uint8_t *krow, *vrow;
            const size_t hs = kv_row(kv, j->layer, w->pos[t], &krow, &vrow);
            kv_write_row(kv, to_row, w->k + (size_t)t * KVD, krow, D, hs);
            kv_write_row(kv, to_row, w->v + (size_t)t * KVD, vrow, D, hs);
        }
        break;
    }
    case ROWS_GLU: {
        const size_t F = (size_t)c->hidden_dim;
        float *h = w->hb + (size_t)t0 * F, *u = w->hb2 + (size_t)t0 * F;
        if (c->act == MODEL_ACT_GELU_TANH) kern_geglu(h, h, u, (int64_t)(t1 - t0) * (int64_t)F);
        else kern_swiglu(h, h, u, (int64_t)(t1 - t0) * (int64_t)F);
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

/* xb = RMSNorm(xb + bias) with either part optional; nothing when both are NULL */
static void rows_post(const model *m, model_work *w, int T, const float *bias, const float *norm) {
    if (!bias && !norm) return;
    const rows_job j = {.m = m, .w = w, .stage = ROWS_POST, .T = T, .norm = norm, .bias = bias};
    rows_run(&j);
}

/* ---- routed experts (qwen3moe, Mixtral) --------------------------------------
 * xb (T, C) -> xb: per token the router's softmax over E experts, the top K
 * (largest first), their weights renormalized to sum 1 (llama.cpp clamps the
 * sum at 6.1e-5) and scaled; each expert's SwiGLU FFN over the tokens routed
 * to it, gathered into one matmul (its weights read once per step); then
 * per token the K outputs x weight, summed in selection order.  A row's bits
 * do not depend on the other rows (every matmul row is its own vec_dot). */
static void moe_route(const model *m, model_work *w, int l, int T) {
    const model_config *c = &m->cfg;
    const int E = c->n_expert, K = c->n_expert_used;
    matmul(m, w, l, MODEL_MM_ROUTER, &m->layers[l].router, w->xb, w->moe_logits, T); /* (T, E) */
    for (int t = 0; t < T; t++) {
        float *p = w->moe_logits + (size_t)t * E;
        kern_softmax_ref(p, E);
        int32_t *sel = w->moe_sel + (size_t)t * K;
        float *wt = w->moe_wt + (size_t)t * K, sum = 0.0f;
        for (int k = 0; k < K; k++) { /* the k-th largest, lowest index first among equals */
            int best = -1;
            for (int e = 0; e < E; e++) {
                bool taken = false;
                for (int i = 0; i < k && !taken; i++) taken = sel[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[k] = best;
            wt[k] = p[best];
            sum += p[best];
        }
        const float div = sum > 6.103515625e-5f ? sum : 6.103515625e-5f;
        for (int k = 0; k < K; k++) wt[k] = wt[k] / div * c->expert_scale;
    }
}

static void moe_ffn(const model *m, model_work *w, int l, int T) {
    const model_config *c = &m->cfg;
    const model_layer *L = &m->layers[l];
    const int E = c->n_expert, K = c->n_expert_used, C = c->dim, Fe = c->expert_hidden;
    moe_route(m, w, l, T);
    /* counting sort of the T*K (token, slot) pairs by expert */
    int32_t *cnt = w->moe_count;
    for (int e = 0; e <= E; e++) cnt[e] = 0;
    for (int i = 0; i < T * K; i++) cnt[w->moe_sel[i] + 1]++;
    for (int e = 0; e < E; e++) cnt[e + 1] += cnt[e];
    for (int i = 0; i < T * K; i++) w->moe_rows[cnt[w->moe_sel[i]]++] = i; /* cnt[e] becomes the end of e's run */
    for (int e = 0, r0 = 0; e < E; r0 = cnt[e], e++) {
        const int n = cnt[e] - r0;
        if (n == 0) continue; /* no token chose it: its weights are not read */
        const int32_t *rows = w->moe_rows + r0;
        for (int i = 0; i < n; i++)
            memcpy(w->moe_x + (size_t)i * C, w->xb + (size_t)(rows[i] / K) * C, (size_t)C * sizeof(float));
        const model_mm_id id[2] = {MODEL_MM_EXPERT, MODEL_MM_EXPERT};
        const model_mat *gu[2] = {&L->gate_exps[e], &L->up_exps[e]};
        float *y[2] = {w->moe_g, w->moe_u};
        matmul_n(m, w, l, id, gu, w->moe_x, y, 2, n);
        kern_swiglu(w->moe_g, w->moe_g, w->moe_u, (int64_t)n * Fe);
        matmul(m, w, l, MODEL_MM_EXPERT, &L->down_exps[e], w->moe_g, w->moe_x, n); /* (n, C) */
        for (int i = 0; i < n; i++) {
            const float a = w->moe_wt[rows[i]], *src = w->moe_x + (size_t)i * C;
            float *dst = w->moe_acc + (size_t)rows[i] * C;
            for (int d = 0; d < C; d++) dst[d] = src[d] * a;
        }
    }
    for (int t = 0; t < T; t++) { /* slot 0 + slot 1 + ... in selection order */
        float *out = w->xb + (size_t)t * C;
        const float *a = w->moe_acc + (size_t)t * K * C;
        memcpy(out, a, (size_t)C * sizeof(float));
        for (int k = 1; k < K; k++)
            for (int d = 0; d < C; d++) out[d] += a[(size_t)k * C + d];
    }
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

    /* token embeddings: x[t] = E[token_t] (x sqrt(C) for gemma); row t is
     * token j of segment s at cache index pos[t] = kv_s->n_pos + j */
    for (int s = 0, t = 0; s < n_seg; s++)
        for (int j = 0; j < seg[s].n; j++, t++) {
            float *x = w->x + (size_t)t * C;
            et->to_float((const uint8_t *)m->tok_embd.data + (size_t)seg[s].tokens[j] * erow, x, C);
            if (c->embd_scale != 1.0f)
                for (int i = 0; i < C; i++) x[i] *= c->embd_scale;
            w->pos[t] = seg[s].kv->n_pos + j;
            w->row_seg[t] = s;
        }

    rows_norm(m, w, T, false, m->layers[0].attn_norm); /* xb = RMSNorm(x) for layer 0's attention */
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        const kern_rope_params rope = {c->rope_dim, L->rope_base, c->rope_neox, m->rope_freqs, L->rope_scale,
                                       c->rope_mscale};

        /* attention block: x += post_norm(Wo . attn(rope(qnorm(Wq xn + bq)), rope(knorm(Wk xn + bk)), Wv xn + bv)) */
        const model_mm_id qkv_id[3] = {MODEL_MM_WQ, MODEL_MM_WK, MODEL_MM_WV};
        const model_mat *qkv_w[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_y[3] = {w->q, w->k, w->v};                    /* (T, H*D), (T, Hkv*D), (T, Hkv*D) */
        matmul_n(m, w, l, qkv_id, qkv_w, w->xb, qkv_y, 3, T);
        const rows_job qkv = {.m = m, .w = w, .seg = seg, .stage = ROWS_QKV, .T = T, .layer = l, .rope = &rope};
        rows_run(&qkv);
        attention(m, w, l, seg, n_seg, &rope);
        matmul(m, w, l, MODEL_MM_WO, &L->wo, w->xb2, w->xb, T);  /* (T, C) */
        rows_post(m, w, T, L->bo, L->post_attn_norm);
        rows_norm(m, w, T, true, L->ffn_norm);                     /* x += ...; xb = RMSNorm(x) */

        /* feed-forward block: x += post_norm(W_down . (act(W_gate xn) * W_up xn)), or the routed experts' */
        if (c->n_expert > 0) {
            moe_ffn(m, w, l, T);
        } else {
            const model_mm_id glu_id[2] = {MODEL_MM_GATE, MODEL_MM_UP};
            const model_mat *glu_w[2] = {&L->w_gate, &L->w_up};
            float *glu_y[2] = {w->hb, w->hb2};                     /* (T, F) each */
            matmul_n(m, w, l, glu_id, glu_w, w->xb, glu_y, 2, T);
            const rows_job glu = {.m = m, .w = w, .stage = ROWS_GLU, .T = T};
            rows_run(&glu);
            matmul(m, w, l, MODEL_MM_DOWN, &L->w_down, w->hb, w->xb, T);  /* (T, C) */
        }
        rows_post(m, w, T, NULL, L->post_ffn_norm);
        /* x += ...; and the next layer's attention input */
        rows_norm(m, w, T, true, l + 1 < c->n_layers ? m->layers[l + 1].attn_norm : NULL);
    }
    if (w->sink_n) w->sink_queries += (int64_t)T * c->n_heads;
    for (int s = 0; s < n_seg; s++) kv_commit(seg[s].kv, seg[s].tokens, seg[s].n);

    /* embeddings: the final norm of every row a segment pools (position order) */
    for (int s = 0, r0 = 0; s < n_seg; r0 += seg[s].n, s++) {
        double *e = seg[s].embd;
        if (!e) continue;
        const int pos0 = seg[s].kv->n_pos - seg[s].n; /* committed above */
        for (int i = 0; i < seg[s].n; i++) {
            if (c->pooling == MODEL_POOL_CLS && pos0 + i != 0) continue;
            if (c->pooling == MODEL_POOL_LAST && i != seg[s].n - 1) continue;
            float *h = w->xb; /* scratch: the logits below overwrite it */
            kern_rmsnorm(h, w->x + (size_t)(r0 + i) * C, m->out_norm, C, c->norm_eps);
            const double keep = c->pooling == MODEL_POOL_MEAN ? 1.0 : 0.0;
            for (int j = 0; j < C; j++) e[j] = keep * e[j] + h[j];
        }
    }

    if (!logits) return;
    /* final norm and classifier over the rows that want logits, packed in
     * segment order: all rows of a MODEL_LOGITS_ALL segment, the last row
     * of a MODEL_LOGITS_LAST one; soft-capped for gemma2 */
    int nrows = 0;
    for (int s = 0, r0 = 0; s < n_seg; r0 += seg[s].n, s++) {
        const int first = seg[s].logits == MODEL_LOGITS_ALL ? r0 : r0 + seg[s].n - 1;
        if (seg[s].logits == MODEL_LOGITS_NONE) continue;
        for (int t = first; t < r0 + seg[s].n; t++, nrows++)
            kern_rmsnorm(w->xb + (size_t)nrows * C, w->x + (size_t)t * C, m->out_norm, C, c->norm_eps);
    }
    if (!nrows) return;
    matmul(m, w, -1, MODEL_MM_OUTPUT, &m->output, w->xb, logits, nrows);  /* (nrows, V) */
    if (c->final_softcap > 0.0f) kern_softcap(logits, (int64_t)nrows * c->vocab_size, c->final_softcap);
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
void model_embd_finish(const model *m, const double *acc, int n, float *out) {
    const int C = m->cfg.dim;
    const double div = m->cfg.pooling == MODEL_POOL_MEAN && n > 0 ? (double)n : 1.0;
    double ss = 0;
    for (int j = 0; j < C; j++) ss += (acc[j] / div) * (acc[j] / div);
    const double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
    for (int j = 0; j < C; j++) out[j] = (float)(acc[j] / div * inv);
}

kvant_code model_embed(const model *m, model_work *w, kv_store *kv, const int32_t *tokens, int n, float *out,
                       kvant_status *st) {
    if (n <= 0) return core_fail(st, KVANT_ERR_ARG, "embedding of an empty input");
    if (kv->n_pos != 0) return core_fail(st, KVANT_ERR_ARG, "embedding: the cache must be empty");
    double *acc = calloc((size_t)m->cfg.dim, sizeof *acc);
    if (!acc) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    const int chunk = w->max_T < kv->max_chunk ? w->max_T : kv->max_chunk;
    kvant_code rc = KVANT_OK;
    for (int done = 0; done < n && rc == KVANT_OK;) {
        const int T = n - done < chunk ? n - done : chunk;
        const model_segment seg = {kv, tokens + done, T, MODEL_LOGITS_NONE, acc};
        rc = model_forward_batch(m, w, &seg, 1, NULL, st);
        done += T;
    }
    if (rc == KVANT_OK) model_embd_finish(m, acc, n, out);
    free(acc);
    return rc;
}

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
