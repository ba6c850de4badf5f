/* qat.c - fake quantization with held scales and the straight-through
 * estimator's mask (definitions in train.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

static bool quantized(const train_fq_params *p, const train_mat *t) {
    if (!strcmp(t->kind, "tok_embd")) return p->embd;
    if (!strcmp(t->kind, "output")) return p->output;
    return true;
}

train_fq *train_fq_new(const train_model *m, const train_fq_params *p, kvant_status *st) {
    if (p->bits < 2 || p->bits > 8) {
        core_fail(st, KVANT_ERR_ARG, "bits must be 2..8, not %d", p->bits);
        return NULL;
    }
    size_t ng = 0;
    train_mat t;
    for (int i = 0; train_model_mat(m, i, &t); i++) {
        if (!quantized(p, &t)) continue;
        const int G = p->group > 0 ? p->group : t.cols;
        if (t.cols % G) {
            core_fail(st, KVANT_ERR_ARG, "group size %d does not divide the rows (%d) of %s", G, t.cols, t.kind);
            return NULL;
        }
        ng += (size_t)t.rows * (t.cols / G);
    }
    train_fq *f = calloc(1, sizeof *f);
    if (!f || !(f->scale = malloc(sizeof(float) * (ng + 1))) || !(f->zero = malloc(sizeof(float) * (ng + 1)))) {
        train_fq_free(f);
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    f->p = *p;
    f->n_groups = ng;
    const int b = p->bits;
    size_t gi = 0;
    for (int i = 0; train_model_mat(m, i, &t); i++) {
        if (!quantized(p, &t)) continue;
        const int G = p->group > 0 ? p->group : t.cols;
        for (size_t g0 = 0; g0 < (size_t)t.rows * t.cols; g0 += G, gi++) {
            const float *w = m->p + t.off + g0;
            float mn = w[0], mx = w[0], am = 0;
            for (int k = 0; k < G; k++) {
                mn = w[k] < mn ? w[k] : mn;
                mx = w[k] > mx ? w[k] : mx;
                am = fabsf(w[k]) > am ? fabsf(w[k]) : am;
            }
            if (p->scheme == TRAIN_FQ_ABSMAX) {
                f->scale[gi] = am > 0 ? am / (float)((1 << (b - 1)) - 1) : 1.0f;
                f->zero[gi] = 0;
            } else {
                mn = mn > 0 ? 0 : mn; /* the range holds 0 (exact zeros stay zero) */
                mx = mx < 0 ? 0 : mx;
                const float s = mx > mn ? (mx - mn) / (float)((1 << b) - 1) : 1.0f;
                f->scale[gi] = s;
                f->zero[gi] = roundf(-mn / s);
            }
        }
    }
    core_ok(st);
    return f;
}

void train_fq_free(train_fq *f) {
    if (!f) return;
    free(f->scale);
    free(f->zero);
    free(f);
}

void train_fq_apply(const train_exec *ex, const train_fq *f, const train_model *m, float *Wq, uint8_t *mask) {
    (void)ex;
    memcpy(Wq, m->p, sizeof(float) * m->n);
    if (mask) memset(mask, 1, m->n);
    const int b = f->p.bits;
    const float qlo = f->p.scheme == TRAIN_FQ_ABSMAX ? -(float)(1 << (b - 1)) : 0.0f;
    const float qhi = f->p.scheme == TRAIN_FQ_ABSMAX ? (float)((1 << (b - 1)) - 1) : (float)((1 << b) - 1);
    size_t gi = 0;
    train_mat t;
    for (int i = 0; train_model_mat(m, i, &t); i++) {
        if (!quantized(&f->p, &t)) continue;
        const int G = f->p.group > 0 ? f->p.group : t.cols;
        for (size_t g0 = 0; g0 < (size_t)t.rows * t.cols; g0 += G, gi++) {
            const float s = f->scale[gi], z = f->zero[gi];
            const float *w = m->p + t.off + g0;
            float *o = Wq + t.off + g0;
            for (int k = 0; k < G; k++) {
                float q = roundf(w[k] / s) + z;
                if (q < qlo || q > qhi) {
                    q = q < qlo ? qlo : qhi;
                    if (mask) mask[t.off + g0 + k] = 0;
                }
                o[k] = s * (q - z);
            }
        }
    }
}
