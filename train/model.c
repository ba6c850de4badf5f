/* model.c - layouts, the float model (one allocation: parameters,
 * gradients, AdamW moments), seeded init, the execution scratch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "train/train.h"

int train_config_check(const train_config *c, kvant_status *st) {
    if (c->dim < 1 || c->hidden < 1 || c->n_layers < 1 || c->n_heads < 1 || c->n_kv_heads < 1 || c->vocab < 2 ||
        c->ctx < 1 || c->head_dim < 1)
        return core_fail(st, KVANT_ERR_ARG, "config: every size must be positive");
    if (c->dim > 65536 || c->hidden > 262144 || c->n_layers > 256 || c->n_heads > 1024 || c->vocab > 1 << 20 ||
        c->ctx > 1 << 16 || c->head_dim > 1024)
        return core_fail(st, KVANT_ERR_ARG, "config: a size is too large");
    if (c->n_heads % c->n_kv_heads)
        return core_fail(st, KVANT_ERR_ARG, "config: heads (%d) must be a multiple of kv_heads (%d)", c->n_heads,
                         c->n_kv_heads);
    if (c->rope_dim < 2 || c->rope_dim > c->head_dim || c->rope_dim % 2)
        return core_fail(st, KVANT_ERR_ARG, "config: rope_dim %d must be even and <= head_dim %d", c->rope_dim,
                         c->head_dim);
    core_ok(st);
    return KVANT_OK;
}

void train_layout_make(const train_config *c, train_layout *lay) {
    const size_t C = c->dim, F = c->hidden, L = c->n_layers, QD = (size_t)c->n_heads * c->head_dim,
                 KVD = (size_t)c->n_kv_heads * c->head_dim, V = c->vocab;
    size_t o = 0;
    lay->tok_embd = o; o += V * C;
    lay->attn_norm = o; o += L * C;
    lay->wq = o; o += L * QD * C;
    lay->wk = o; o += L * KVD * C;
    lay->wv = o; o += L * KVD * C;
    lay->wo = o; o += L * C * QD;
    lay->ffn_norm = o; o += L * C;
    lay->gate = o; o += L * F * C;
    lay->up = o; o += L * F * C;
    lay->down = o; o += L * C * F;
    lay->out_norm = o; o += C;
    if (c->tied) lay->output = lay->tok_embd;
    else { lay->output = o; o += V * C; }
    lay->n = o;
}

void train_acts_make(const train_config *c, int B, int T, int nth, train_acts *a) {
    const size_t N = (size_t)B * T, C = c->dim, F = c->hidden, L = c->n_layers, H = c->n_heads,
                 QD = H * c->head_dim, KVD = (size_t)c->n_kv_heads * c->head_dim, V = c->vocab;
    size_t o = 0;
    a->B = B; a->T = T;
    a->x = o; o += (L + 1) * N * C;
    a->xmid = o; o += L * N * C;
    a->xn1 = o; o += L * N * C;
    a->xn2 = o; o += L * N * C;
    a->rs1 = o; o += L * N;
    a->rs2 = o; o += L * N;
    a->q = o; o += L * N * QD;
    a->k = o; o += L * N * KVD;
    a->v = o; o += L * N * KVD;
    a->att = o; o += L * B * H * T * T;
    a->ao = o; o += L * N * QD;
    a->g = o; o += L * N * F;
    a->u = o; o += L * N * F;
    a->h = o; o += L * N * F;
    a->xnf = o; o += N * C;
    a->rsf = o; o += N;
    a->logits = o; o += N * V;
    a->cs = o; o += (size_t)T * (c->rope_dim / 2);
    a->sn = o; o += (size_t)T * (c->rope_dim / 2);
    a->dx = o; o += N * C;
    a->dxn = o; o += N * C;
    a->dq = o; o += N * QD;
    a->dao = o; o += N * QD;
    a->dk = o; o += N * KVD;
    a->dv = o; o += N * KVD;
    a->dg = o; o += N * F;
    a->du = o; o += N * F;
    a->dh = o; o += N * F;
    a->dp = o; o += (size_t)nth * T;
    a->n = o;
}

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

train_exec *train_exec_new(const train_config *c, int N, core_pool *pool, kvant_status *st) {
    /* matmul shapes: (N, O) = (N, I) . (O, I)^T with I <= K, O <= W; the
     * backward pass also multiplies (O rows of N) and (N rows of O) */
    const size_t QD = (size_t)c->n_heads * c->head_dim, Nz = (size_t)N;
    const size_t K = max3(c->dim, c->hidden, QD), W = max3(K, c->vocab, 1);
    const size_t n_mm = Nz * W + 64;            /* kern_matmul scratch: the rows it gets, as floats */
    const size_t n_t1 = (W > Nz ? W : Nz) * K;  /* w^T or x^T */
    const size_t n_t2 = Nz * W;                 /* dy^T */
    const size_t n_tmp = (W > Nz ? W : Nz) * K; /* dx or dw before adding */
    train_exec *e = calloc(1, sizeof *e);
    if (!e || !(e->mem = malloc(sizeof(float) * (n_mm + n_t1 + n_t2 + n_tmp)))) {
        free(e);
        core_fail(st, KVANT_ERR_NOMEM, "cannot allocate training scratch");
        return NULL;
    }
    e->pool = pool;
    e->mm = e->mem;
    e->t1 = e->mm + n_mm;
    e->t2 = e->t1 + n_t1;
    e->tmp = e->t2 + n_t2;
    return e;
}
void train_exec_free(train_exec *e) {
    if (!e) return;
    free(e->mem);
    free(e);
}

train_model *train_model_new(const train_config *c, kvant_status *st) {
    if (train_config_check(c, st)) return NULL;
    train_model *m = calloc(1, sizeof *m);
    if (!m) goto oom;
    m->cfg = *c;
    train_layout_make(c, &m->lay);
    m->n = m->lay.n;
    m->mem = calloc(4 * m->n, sizeof(float));
    if (!m->mem) goto oom;
    m->p = m->mem;
    m->g = m->p + m->n;
    m->m = m->g + m->n;
    m->v = m->m + m->n;
    core_ok(st);
    return m;
oom:
    free(m);
    core_fail(st, KVANT_ERR_NOMEM, "cannot allocate a model of this size");
    return NULL;
}
void train_model_free(train_model *m) {
    if (!m) return;
    free(m->mem);
    free(m);
}

bool train_model_mat(const train_model *m, int i, train_mat *out) {
    const train_config *c = &m->cfg;
    const int C = c->dim, F = c->hidden, QD = c->n_heads * c->head_dim, KVD = c->n_kv_heads * c->head_dim;
    const train_layout *y = &m->lay;
    if (i == 0) { *out = (train_mat){"tok_embd", -1, y->tok_embd, c->vocab, C}; return true; }
    i--;
    if (i < 7 * c->n_layers) {
        const int l = i / 7;
        switch (i % 7) {
        case 0: *out = (train_mat){"wq", l, y->wq + (size_t)l * QD * C, QD, C}; break;
        case 1: *out = (train_mat){"wk", l, y->wk + (size_t)l * KVD * C, KVD, C}; break;
        case 2: *out = (train_mat){"wv", l, y->wv + (size_t)l * KVD * C, KVD, C}; break;
        case 3: *out = (train_mat){"wo", l, y->wo + (size_t)l * C * QD, C, QD}; break;
        case 4: *out = (train_mat){"gate", l, y->gate + (size_t)l * F * C, F, C}; break;
        case 5: *out = (train_mat){"up", l, y->up + (size_t)l * F * C, F, C}; break;
        default: *out = (train_mat){"down", l, y->down + (size_t)l * C * F, C, F}; break;
        }
        return true;
    }
    i -= 7 * c->n_layers;
    if (i == 0 && !c->tied) { *out = (train_mat){"output", -1, y->output, c->vocab, C}; return true; }
    return false;
}

void train_model_init(train_model *m, uint64_t seed) {
    const train_config *c = &m->cfg;
    const train_layout *y = &m->lay;
    for (size_t i = 0; i < m->n; i++) m->p[i] = 0;
    train_mat t;
    for (int i = 0; train_model_mat(m, i, &t); i++) {
        const bool resid = !strcmp(t.kind, "wo") || !strcmp(t.kind, "down");
        const float std = 0.02f * (resid ? 1.0f / sqrtf(2.0f * c->n_layers) : 1.0f);
        uint64_t s = core_mix64(seed * 1000003ULL + (uint64_t)i) | 1;
        for (size_t k = 0; k < (size_t)t.rows * t.cols; k += 2) { /* Box-Muller */
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            const double u1 = ((s >> 11) + 0.5) / 9007199254740992.0;
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            const double u2 = (s >> 11) / 9007199254740992.0;
            const double r = sqrt(-2 * log(u1));
            m->p[t.off + k] = (float)(std * r * cos(2 * M_PI * u2));
            if (k + 1 < (size_t)t.rows * t.cols) m->p[t.off + k + 1] = (float)(std * r * sin(2 * M_PI * u2));
        }
    }
    for (size_t i = 0; i < (size_t)c->n_layers * c->dim; i++) m->p[y->attn_norm + i] = m->p[y->ffn_norm + i] = 1;
    for (int i = 0; i < c->dim; i++) m->p[y->out_norm + i] = 1;
    m->step = 0;
}
