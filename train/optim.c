/* optim.c - AdamW with global-norm clipping, the learning-rate schedule. */
#include <math.h>
#include <string.h>

#include "train/train.h"

train_opt train_opt_default(void) {
    return (train_opt){.lr = 1e-3f, .min_lr = 1e-4f, .warmup = 0, .total_steps = 1000, .beta1 = 0.9f,
                       .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .clip = 1.0f};
}

/* linear warm-up to lr over `warmup` steps, then cosine down to min_lr at total_steps */
float train_lr(const train_opt *o, int64_t step) {
    if (o->warmup > 0 && step < o->warmup) return o->lr * (float)(step + 1) / (float)o->warmup;
    if (step >= o->total_steps) return o->min_lr;
    const double span = o->total_steps - o->warmup > 0 ? o->total_steps - o->warmup : 1;
    const double r = (double)(step - o->warmup) / span;
    return (float)(o->min_lr + 0.5 * (o->lr - o->min_lr) * (1 + cos(M_PI * r)));
}

typedef struct {
    train_model *m;
    const train_opt *o;
    const uint8_t *mask;
    float lr, gscale, b1c, b2c;
    double part[64];
    int phase;  /* 0: sum of squares, 1: update */
} adam_job;

static bool is_norm(const train_model *m, size_t i) {
    const train_layout *y = &m->lay;
    const size_t LC = (size_t)m->cfg.n_layers * m->cfg.dim;
    return (i >= y->attn_norm && i < y->attn_norm + LC) || (i >= y->ffn_norm && i < y->ffn_norm + LC) ||
           (i >= y->out_norm && i < y->out_norm + (size_t)m->cfg.dim);
}

static void adam_task(void *ctx, int ith, int nth) {
    adam_job *j = ctx;
    train_model *m = j->m;
    int64_t lo, hi;
    core_split((int64_t)m->n, ith, nth, &lo, &hi);
    if (j->phase == 0) {
        double s = 0;
        for (int64_t i = lo; i < hi; i++) {
            if (j->mask && !j->mask[i]) m->g[i] = 0;
            s += (double)m->g[i] * m->g[i];
        }
        j->part[ith] = s;
        return;
    }
    const train_opt *o = j->o;
    for (int64_t i = lo; i < hi; i++) {
        const float g = m->g[i] * j->gscale;
        m->m[i] = o->beta1 * m->m[i] + (1 - o->beta1) * g;
        m->v[i] = o->beta2 * m->v[i] + (1 - o->beta2) * g * g;
        const float mh = m->m[i] / j->b1c, vh = m->v[i] / j->b2c;
        const float wd = is_norm(m, (size_t)i) ? 0.0f : o->weight_decay;
        m->p[i] -= j->lr * (mh / (sqrtf(vh) + o->eps) + wd * m->p[i]);
    }
}

float train_adamw(const train_exec *ex, train_model *m, const train_opt *o, float lr, const uint8_t *mask) {
    adam_job j = {.m = m, .o = o, .mask = mask, .lr = lr};
    const int nth = ex && ex->pool ? core_pool_size(ex->pool) : 1;
    CORE_ASSERT(nth <= 64);
    if (ex && ex->pool) core_pool_run(ex->pool, adam_task, &j);
    else adam_task(&j, 0, 1);
    double ss = 0;
    for (int i = 0; i < nth; i++) ss += j.part[i];
    const float norm = (float)sqrt(ss);
    j.gscale = o->clip > 0 && norm > o->clip ? o->clip / norm : 1.0f;
    m->step++;
    j.b1c = 1 - powf(o->beta1, (float)m->step);
    j.b2c = 1 - powf(o->beta2, (float)m->step);
    j.phase = 1;
    if (ex && ex->pool) core_pool_run(ex->pool, adam_task, &j);
    else adam_task(&j, 0, 1);
    return norm;
}
