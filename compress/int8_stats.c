/* int8_stats.c - activation magnitude statistics at the inputs of every
 * linear layer (the calibration tap) and LLM.int8's outlier criterion. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/int8.h"

const char *int8_site_name(int site) {
    static const char *names[] = {"attn_in", "wo_in", "ffn_in", "down_in"};
    return site >= 0 && site < INT8_SITE_COUNT ? names[site] : "?";
}

int8_stats *int8_stats_new(const model_config *c, float threshold, int64_t max_tokens, kvant_status *st) {
    int8_stats *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->n_layers = c->n_layers;
    s->dims[INT8_SITE_ATTN_IN] = c->dim;
    s->dims[INT8_SITE_WO_IN] = c->n_heads * c->head_dim;
    s->dims[INT8_SITE_FFN_IN] = c->dim;
    s->dims[INT8_SITE_DOWN_IN] = c->hidden_dim;
    s->threshold = threshold;
    s->max_tokens = max_tokens;
    for (int i = 0; i < INT8_SITE_COUNT; i++) {
        const size_t n = (size_t)c->n_layers * (size_t)s->dims[i];
        s->maxabs[i] = calloc(n, sizeof(float));
        s->sumabs[i] = calloc(n, sizeof(double));
        s->n_over[i] = calloc(n, sizeof(int64_t));
        if (!s->maxabs[i] || !s->sumabs[i] || !s->n_over[i]) goto oom;
    }
    s->hit = calloc((size_t)(max_tokens > 0 ? max_tokens : 1) * (size_t)c->dim, 1);
    if (!s->hit) goto oom;
    return s;
oom:
    int8_stats_free(s);
    core_fail(st, KVANT_ERR_NOMEM, "out of memory for activation statistics");
    return NULL;
}

void int8_stats_free(int8_stats *s) {
    if (!s) return;
    for (int i = 0; i < INT8_SITE_COUNT; i++) {
        free(s->maxabs[i]);
        free(s->sumabs[i]);
        free(s->n_over[i]);
    }
    free(s->hit);
    free(s);
}

void int8_stats_tap(void *user, int layer, model_mm_id mm, const float *x, int T, int cols) {
    int8_stats *s = user;
    int site;
    switch (mm) {
    case MODEL_MM_WQ: site = INT8_SITE_ATTN_IN; break;
    case MODEL_MM_WO: site = INT8_SITE_WO_IN; break;
    case MODEL_MM_GATE: site = INT8_SITE_FFN_IN; break;
    case MODEL_MM_DOWN: site = INT8_SITE_DOWN_IN; break;
    default: return; /* classifier, or a repeated input */
    }
    if (layer < 0 || layer >= s->n_layers || cols != s->dims[site]) return;
    if (layer == 0 && site == INT8_SITE_ATTN_IN) {
        s->tok_base = s->n_tokens;
        s->n_tokens += T;
    }
    const size_t off = (size_t)layer * (size_t)cols;
    float *mx = s->maxabs[site] + off;
    double *sum = s->sumabs[site] + off;
    int64_t *over = s->n_over[site] + off;
    const bool hidden = site == INT8_SITE_ATTN_IN || site == INT8_SITE_FFN_IN;
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * cols;
        const int64_t ti = s->tok_base + t;
        uint8_t *hit = hidden && ti < s->max_tokens ? s->hit + (size_t)ti * cols : NULL;
        for (int j = 0; j < cols; j++) {
            const float a = fabsf(xt[j]);
            if (a > mx[j]) mx[j] = a;
            sum[j] += a;
            if (a >= s->threshold) {
                over[j]++;
                if (hit) hit[j] = 1;
            }
        }
    }
}

bool int8_stats_outlier(const int8_stats *s, int j, double min_layers, double min_tokens, double *layer_share,
                        double *token_share) {
    const int C = s->dims[INT8_SITE_ATTN_IN];
    int sites = 0;
    for (int l = 0; l < s->n_layers; l++) {
        sites += s->n_over[INT8_SITE_ATTN_IN][(size_t)l * C + j] > 0;
        sites += s->n_over[INT8_SITE_FFN_IN][(size_t)l * C + j] > 0;
    }
    const int64_t nt = s->n_tokens < s->max_tokens ? s->n_tokens : s->max_tokens;
    int64_t toks = 0;
    for (int64_t t = 0; t < nt; t++) toks += s->hit[(size_t)t * C + j];
    const double ls = (double)sites / (2.0 * s->n_layers), ts = nt ? (double)toks / (double)nt : 0.0;
    if (layer_share) *layer_share = ls;
    if (token_share) *token_share = ts;
    return sites > 0 && ls >= min_layers && ts >= min_tokens;
}
