/* smooth.c - SmoothQuant (Xiao et al. 2023): per-input-channel scales that
 * move activation outliers into the weights, folded into the preceding
 * RMSNorm so the model computes the same function:
 *   y = W . (g * r(x)) = (W diag(s)) . ((g / s) * r(x)),  r = RMS normalization.
 * Inputs that follow a norm are smoothed into it (wq/wk/wv after attn_norm,
 * gate/up after ffn_norm); wo's input optionally through wv's output rows,
 * per KV head (attention mixes V rows with weights summing to 1, so a
 * per-channel scale of V passes through unchanged); w_down has nothing
 * linear in front of it (SwiGLU) and stays unsmoothed.  Contract in
 * compress/int8.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/int8.h"

/* column-wise max |W[n][j]| into wmax (K), max-accumulating */
static void col_absmax(const model_mat *W, float *wmax, float *row) {
    const kern_type_traits *tt = kern_type_get(W->type);
    const size_t rb = kern_row_bytes(W->type, W->cols);
    for (int64_t n = 0; n < W->rows; n++) {
        tt->to_float((const uint8_t *)W->data + (size_t)n * rb, row, W->cols);
        for (int64_t j = 0; j < W->cols; j++)
            if (fabsf(row[j]) > wmax[j]) wmax[j] = fabsf(row[j]);
    }
}

void smooth_weight_max(const model *m, float *wmax_attn, float *wmax_ffn) {
    const int C = m->cfg.dim;
    float *row = malloc(sizeof(float) * (size_t)C);
    CORE_ASSERT(row);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_layer *L = &m->layers[l];
        float *wa = wmax_attn + (size_t)l * C, *wf = wmax_ffn + (size_t)l * C;
        memset(wa, 0, sizeof(float) * (size_t)C);
        memset(wf, 0, sizeof(float) * (size_t)C);
        col_absmax(&L->wq, wa, row);
        col_absmax(&L->wk, wa, row);
        col_absmax(&L->wv, wa, row);
        col_absmax(&L->w_gate, wf, row);
        col_absmax(&L->w_up, wf, row);
    }
    free(row);
}

void smooth_wo_max(const model *m, float *wmax_wo) {
    const int QD = m->cfg.n_heads * m->cfg.head_dim;
    float *row = malloc(sizeof(float) * (size_t)QD);
    CORE_ASSERT(row);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        float *w = wmax_wo + (size_t)l * QD;
        memset(w, 0, sizeof(float) * (size_t)QD);
        col_absmax(&m->layers[l].wo, w, row);
    }
    free(row);
}

void smooth_scales_wo(const model_config *c, const float *amax, const float *wmax, float alpha, float *s) {
    const int D = c->head_dim, group = c->n_heads / c->n_kv_heads;
    for (int g = 0; g < c->n_kv_heads; g++)
        for (int d = 0; d < D; d++) {
            float a = 0, w = 0;
            for (int h = g * group; h < (g + 1) * group; h++) {
                a = fmaxf(a, amax[h * D + d]);
                w = fmaxf(w, wmax[h * D + d]);
            }
            smooth_scales(&a, &w, 1, alpha, &s[g * D + d]);
        }
}

void smooth_scales(const float *amax, const float *wmax, int n, float alpha, float *s) {
    for (int j = 0; j < n; j++) {
        double v = 1.0;
        if (amax[j] > 0 && wmax[j] > 0) v = pow(amax[j], alpha) / pow(wmax[j], 1.0 - alpha);
        v = v < 1e-5 ? 1e-5 : v > 1e5 ? 1e5 : v;
        s[j] = (float)v;
    }
}

/* dst (rows, cols) F32 = W with column j multiplied by s[j] (s NULL: 1)
 * and row n divided by rdiv[n] (NULL: 1) */
static model_mat scaled_copy(const model_mat *W, const float *s, const float *rdiv, float *dst) {
    const kern_type_traits *tt = kern_type_get(W->type);
    const size_t rb = kern_row_bytes(W->type, W->cols);
    for (int64_t n = 0; n < W->rows; n++) {
        float *row = dst + (size_t)n * W->cols;
        tt->to_float((const uint8_t *)W->data + (size_t)n * rb, row, W->cols);
        if (s)
            for (int64_t j = 0; j < W->cols; j++) row[j] *= s[j];
        if (rdiv)
            for (int64_t j = 0; j < W->cols; j++) row[j] /= rdiv[n];
    }
    return (model_mat){dst, KT_F32, W->rows, W->cols, NULL};
}

static const float *scaled_norm(const float *g, const float *s, int C, float *dst) {
    for (int j = 0; j < C; j++) dst[j] = g[j] / s[j];
    return dst;
}

model *smooth_fold(const model *src, const float *s_attn, const float *s_ffn, const float *s_v, kvant_status *st) {
    const model_config *c = &src->cfg;
    const int64_t C = c->dim, F = c->hidden_dim, QD = (int64_t)c->n_heads * c->head_dim,
                  KVD = (int64_t)c->n_kv_heads * c->head_dim;
    uint64_t per_layer = 0, total;
    if (s_attn) per_layer += (uint64_t)C + (uint64_t)(QD + 2 * KVD) * (uint64_t)C;
    if (s_ffn) per_layer += (uint64_t)C + 2 * (uint64_t)F * (uint64_t)C;
    if (s_v) per_layer += (uint64_t)(s_attn ? 0 : KVD * C) + (uint64_t)(C * QD) + (uint64_t)QD; /* wv, wo, scales */
    model *d = malloc(sizeof *d);
    if (!d || !core_mul_ok(per_layer, (uint64_t)c->n_layers * sizeof(float), &total) || total > SIZE_MAX / 2) {
        free(d);
        core_fail(st, KVANT_ERR_NOMEM, "smooth: model too large to fold");
        return NULL;
    }
    *d = *src;
    d->gguf = NULL; /* the clone owns only layers[] and owned; src keeps the rest */
    memset(&d->map, 0, sizeof d->map);
    d->layers = malloc(sizeof(model_layer) * (size_t)c->n_layers);
    d->owned = malloc(total ? (size_t)total : 1);
    if (!d->layers || !d->owned) {
        smooth_model_free(d);
        core_fail(st, KVANT_ERR_NOMEM, "smooth: out of memory for the folded weights");
        return NULL;
    }
    memcpy(d->layers, src->layers, sizeof(model_layer) * (size_t)c->n_layers);
    float *p = d->owned;
    for (int l = 0; l < c->n_layers; l++) {
        model_layer *L = &d->layers[l];
        if (s_attn) {
            const float *s = s_attn + (size_t)l * C;
            L->attn_norm = scaled_norm(L->attn_norm, s, (int)C, p), p += C;
            L->wq = scaled_copy(&L->wq, s, NULL, p), p += QD * C;
            L->wk = scaled_copy(&L->wk, s, NULL, p), p += KVD * C;
            L->wv = scaled_copy(&L->wv, s, s_v ? s_v + (size_t)l * KVD : NULL, p), p += KVD * C;
        } else if (s_v) {
            L->wv = scaled_copy(&L->wv, NULL, s_v + (size_t)l * KVD, p), p += KVD * C;
        }
        if (s_v) { /* wo's column h*D + d times its KV group's scale */
            const int D = c->head_dim, group = c->n_heads / c->n_kv_heads;
            float *cs = p;
            p += QD;
            for (int64_t j = 0; j < QD; j++) cs[j] = s_v[(size_t)l * KVD + (j / D) / group * D + j % D];
            L->wo = scaled_copy(&L->wo, cs, NULL, p), p += C * QD;
        }
        if (s_ffn) {
            const float *s = s_ffn + (size_t)l * C;
            L->ffn_norm = scaled_norm(L->ffn_norm, s, (int)C, p), p += C;
            L->w_gate = scaled_copy(&L->w_gate, s, NULL, p), p += F * C;
            L->w_up = scaled_copy(&L->w_up, s, NULL, p), p += F * C;
        }
    }
    core_ok(st);
    return d;
}

void smooth_model_free(model *m) {
    if (!m) return;
    free(m->layers);
    free(m->owned);
    free(m);
}
