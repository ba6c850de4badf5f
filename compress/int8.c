/* int8.c - LLM.int8 mixed-precision matmul and W8A8 over the INT8 GEMM
 * (kernels/int8.h); contract in compress/int8.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/int8.h"
#include "kernels/kernels.h"

typedef struct {
    const model_mat *W;
    int8_mat *M;
    float *rows;        /* (threads, K) */
} conv_job;

static void conv_task(void *ctx, int ith, int nth) {
    const conv_job *j = ctx;
    const kern_type_traits *tt = kern_type_get(j->W->type);
    const size_t rb = kern_row_bytes(j->W->type, j->W->cols);
    float *row = j->rows + (size_t)ith * j->M->K;
    int64_t lo, hi;
    core_split(j->M->N, ith, nth, &lo, &hi);
    for (int64_t n = lo; n < hi; n++) {
        tt->to_float((const uint8_t *)j->W->data + (size_t)n * rb, row, j->M->K);
        kern_i8_quant_rows(row, 1, j->M->K, j->M->Kp, j->M->q + (size_t)n * j->M->Kp, &j->M->s[n], NULL);
    }
}

kvant_code int8_mat_init(int8_mat *M, const model_mat *W, core_pool *pool, kvant_status *st) {
    memset(M, 0, sizeof *M);
    const kern_type_traits *tt = kern_type_get(W->type);
    if (!tt || !tt->to_float) return core_fail(st, KVANT_ERR_UNSUPPORTED, "int8: cannot read weight type %d", W->type);
    M->N = W->rows;
    M->K = W->cols;
    M->Kp = kern_i8_kpad(W->cols);
    M->orig = *W;
    M->q = malloc((size_t)M->N * (size_t)M->Kp);
    M->s = malloc(sizeof(float) * (size_t)M->N);
    const int nth = pool ? core_pool_size(pool) : 1;
    float *row = malloc(sizeof(float) * (size_t)M->K * (size_t)nth);
    if (!M->q || !M->s || !row) {
        free(row);
        int8_mat_free(M);
        return core_fail(st, KVANT_ERR_NOMEM, "int8: out of memory for a %lld x %lld matrix", (long long)W->rows,
                         (long long)W->cols);
    }
    conv_job j = {W, M, row};
    if (pool) core_pool_run(pool, conv_task, &j);
    else conv_task(&j, 0, 1);
    free(row);
    return KVANT_OK;
}

void int8_mat_free(int8_mat *M) {
    if (!M) return;
    free(M->q);
    free(M->s);
    M->q = NULL;
    M->s = NULL;
}

int8_scratch *int8_scratch_new(int max_T, int64_t max_K, int64_t max_N, kvant_status *st) {
    int8_scratch *s = calloc(1, sizeof *s);
    if (s) {
        s->max_T = max_T;
        s->max_K = max_K;
        s->max_N = max_N;
        s->xq = malloc((size_t)max_T * (size_t)kern_i8_kpad(max_K));
        s->sx = malloc(sizeof(float) * (size_t)max_T);
        s->skip = malloc((size_t)max_K);
        s->oidx = malloc(sizeof(int32_t) * (size_t)max_K);
        s->xo = malloc(sizeof(float) * (size_t)max_T * INT8_OUTLIER_CHUNK);
        s->wo = malloc(sizeof(float) * (size_t)max_N * INT8_OUTLIER_CHUNK);
        s->row = malloc(sizeof(float) * (size_t)max_K);
        if (s->xq && s->sx && s->skip && s->oidx && s->xo && s->wo && s->row) return s;
    }
    int8_scratch_free(s);
    core_fail(st, KVANT_ERR_NOMEM, "int8: out of memory for matmul scratch");
    return NULL;
}

void int8_scratch_free(int8_scratch *s) {
    if (!s) return;
    free(s->xq); free(s->sx); free(s->skip); free(s->oidx); free(s->xo); free(s->wo); free(s->row);
    free(s);
}

/* W[n][j] for all n (any computable type: the block holding j is decoded;
 * per-row types, which have no addressable blocks, decode the row into row) */
static void weight_column(const model_mat *W, int64_t j, float *out, size_t stride, float *row) {
    const float *f = W->data;
    if (W->type == KT_F32) {
        for (int64_t n = 0; n < W->rows; n++) out[n * stride] = f[n * W->cols + j];
        return;
    }
    const kern_type_traits *tt = kern_type_get(W->type);
    const size_t rb = kern_row_bytes(W->type, W->cols);
    if (tt->row_bytes) {
        for (int64_t n = 0; n < W->rows; n++) {
            tt->to_float((const uint8_t *)W->data + (size_t)n * rb, row, W->cols);
            out[n * stride] = row[j];
        }
        return;
    }
    const int64_t bs = tt->block_size, b = j / bs;
    float blk[256];
    CORE_ASSERT(bs <= 256);
    for (int64_t n = 0; n < W->rows; n++) {
        tt->to_float((const uint8_t *)W->data + (size_t)n * rb + (size_t)b * tt->type_size, blk, bs);
        out[n * stride] = blk[j - b * bs];
    }
}

typedef struct {
    const float *xo, *wo;
    float *y;
    int T, nc;
    int64_t N;
} outl_job;

/* y[t][n] += sum_i xo[t][i] * wo[n][i]  (F32, the outlier columns) */
static void outl_task(void *ctx, int ith, int nth) {
    const outl_job *j = ctx;
    int64_t lo, hi;
    core_split(j->N, ith, nth, &lo, &hi);
    for (int t = 0; t < j->T; t++) {
        const float *xt = j->xo + (size_t)t * INT8_OUTLIER_CHUNK;
        float *yt = j->y + (size_t)t * j->N;
        for (int64_t n = lo; n < hi; n++) {
            const float *wn = j->wo + (size_t)n * INT8_OUTLIER_CHUNK;
            float s = 0.0f;
            for (int i = 0; i < j->nc; i++) s += xt[i] * wn[i];
            yt[n] += s;
        }
    }
}

typedef struct {
    const float *x;
    int T;
    int64_t K, Kp;
    int8_t *xq;
    float *sx;
    const uint8_t *skip;
} quant_job;

static void quant_task(void *ctx, int ith, int nth) {
    const quant_job *j = ctx;
    int64_t lo, hi;
    core_split(j->T, ith, nth, &lo, &hi);
    if (lo < hi)
        kern_i8_quant_rows(j->x + (size_t)lo * j->K, (int)(hi - lo), j->K, j->Kp, j->xq + (size_t)lo * j->Kp,
                           j->sx + lo, j->skip);
}

int int8_matmul(core_pool *pool, int8_scratch *sc, const int8_mat *M, const float *x, float *y, int T,
                float threshold, bool reuse) {
    CORE_ASSERT(T <= sc->max_T && M->K <= sc->max_K && M->N <= sc->max_N);
    const int64_t K = M->K;
    if (!reuse) {
        sc->n_out = 0;
        if (threshold > 0) {
            memset(sc->skip, 0, (size_t)K);
            for (int t = 0; t < T; t++)
                for (int64_t k = 0; k < K; k++)
                    if (fabsf(x[(size_t)t * K + k]) >= threshold) sc->skip[k] = 1;
            for (int64_t k = 0; k < K; k++)
                if (sc->skip[k]) sc->oidx[sc->n_out++] = (int32_t)k;
        }
        quant_job qj = {x, T, K, M->Kp, sc->xq, sc->sx, sc->n_out ? sc->skip : NULL};
        if (pool && T > 1 && (double)T * (double)K >= KERN_MT_MIN_WORK) core_pool_run(pool, quant_task, &qj);
        else quant_task(&qj, 0, 1);
    }
    kern_i8_gemm(pool, sc->xq, sc->sx, T, M->q, M->s, y, M->N, M->Kp, false);
    for (int c0 = 0; c0 < sc->n_out; c0 += INT8_OUTLIER_CHUNK) {
        const int nc = sc->n_out - c0 < INT8_OUTLIER_CHUNK ? sc->n_out - c0 : INT8_OUTLIER_CHUNK;
        for (int i = 0; i < nc; i++) {
            const int64_t k = sc->oidx[c0 + i];
            for (int t = 0; t < T; t++) sc->xo[(size_t)t * INT8_OUTLIER_CHUNK + i] = x[(size_t)t * K + k];
            weight_column(&M->orig, k, sc->wo + i, INT8_OUTLIER_CHUNK, sc->row);
        }
        outl_job j = {sc->xo, sc->wo, y, T, nc, M->N};
        if (pool && (double)T * (double)M->N * nc >= KERN_MT_MIN_WORK) core_pool_run(pool, outl_task, &j);
        else outl_task(&j, 0, 1);
    }
    return sc->n_out;
}

/* ---- a model's linear layers --------------------------------------------------- */
static const model_mat *layer_mat(const model_layer *L, int id) {
    switch (id) {
    case MODEL_MM_WQ: return &L->wq;
    case MODEL_MM_WK: return &L->wk;
    case MODEL_MM_WV: return &L->wv;
    case MODEL_MM_WO: return &L->wo;
    case MODEL_MM_GATE: return &L->w_gate;
    case MODEL_MM_UP: return &L->w_up;
    default: return &L->w_down;
    }
}

int8_model *int8_model_new(const model *m, int8_mode mode, float threshold, kvant_status *st) {
    int8_model *q = calloc(1, sizeof *q);
    if (!q) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    q->m = m;
    q->mode = mode;
    q->threshold = threshold;
    q->n_layers = m->cfg.n_layers;
    if (mode == INT8_OFF) return q;
    q->mats = calloc((size_t)q->n_layers * 7, sizeof *q->mats);
    if (!q->mats) {
        int8_model_free(q);
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (int l = 0; l < q->n_layers; l++)
        for (int id = 0; id < 7; id++) {
            int8_mat *M = &q->mats[l * 7 + id];
            if (int8_mat_init(M, layer_mat(&m->layers[l], id), m->pool, st)) {
                int8_model_free(q);
                return NULL;
            }
            if (M->K > q->max_K) q->max_K = M->K;
            if (M->N > q->max_N) q->max_N = M->N;
        }
    core_ok(st);
    return q;
}

void int8_model_free(int8_model *q) {
    if (!q) return;
    if (q->mats)
        for (int i = 0; i < q->n_layers * 7; i++) int8_mat_free(&q->mats[i]);
    free(q->mats);
    free(q);
}

int8_ctx *int8_ctx_new(const int8_model *q, int max_T, kvant_status *st) {
    int8_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->q = q;
    c->key_layer = -1;
    c->n_calls = (int64_t *)&q->n_calls;
    c->n_outlier_cols = (int64_t *)&q->n_outlier_cols;
    if (q->mode != INT8_OFF && !(c->sc = int8_scratch_new(max_T, q->max_K, q->max_N, st))) {
        free(c);
        return NULL;
    }
    return c;
}

void int8_ctx_free(int8_ctx *c) {
    if (!c) return;
    int8_scratch_free(c->sc);
    free(c);
}

static int mm_group(int id) {
    return id <= MODEL_MM_WV ? 0 : id == MODEL_MM_WO ? 1 : id <= MODEL_MM_UP ? 2 : 3;
}

bool int8_mm_hook(void *user, int layer, model_mm_id id, const model_mat *W, const float *x, float *y, int T) {
    int8_ctx *c = user;
    const int8_model *q = c->q;
    if (q->mode == INT8_OFF || layer < 0 || id >= MODEL_MM_OUTPUT || T > c->sc->max_T) return false;
    const int g = mm_group(id);
    /* wk/wv reuse wq's quantized input, up reuses gate's */
    const bool first = id == MODEL_MM_WQ || id == MODEL_MM_WO || id == MODEL_MM_GATE || id == MODEL_MM_DOWN;
    const bool reuse = !first && c->key_layer == layer && c->key_group == g && c->key_x == x && c->key_T == T;
    const int8_mat *M = &q->mats[layer * 7 + id];
    const int n_out = int8_matmul(q->m->pool, c->sc, M, x, y, T, q->mode == INT8_MIXED ? q->threshold : 0.0f, reuse);
    c->key_layer = layer;
    c->key_group = g;
    c->key_x = x;
    c->key_T = T;
    if (!reuse) {
        (*c->n_calls)++;
        *c->n_outlier_cols += n_out;
    }
    return true;
}
