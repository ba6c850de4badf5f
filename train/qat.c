/* qat.c - fake quantization with the PTQ tool's quantizer, held scales,
 * the straight-through estimator's mask, and the export in PTQ types. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ptq.h"
#include "kernels/types.h"
#include "train/train.h"

train_fq *train_fq_new(const train_model *m, const ptq_spec *spec, kvant_status *st) {
    if (!ptq_spec_valid(spec)) {
        core_fail(st, KVANT_ERR_ARG, "bad quantization spec (bits 2..8, group >= 1)");
        return NULL;
    }
    train_fq *f = calloc(1, sizeof *f);
    if (!f) goto oom;
    f->spec = *spec;
    train_mat t;
    while (train_model_mat(m, f->n_mats, &t)) f->n_mats++;
    if (!(f->mats = calloc((size_t)f->n_mats, sizeof *f->mats))) goto oom;
    for (int i = 0; i < f->n_mats; i++) {
        train_model_mat(m, i, &t);
        char note[256];
        train_fq_mat *fm = &f->mats[i];
        fm->type = ptq_storage_type(spec, t.cols, &fm->used, note, sizeof note);
        if (fm->type < 0) {
            train_fq_free(f);
            core_fail(st, KVANT_ERR_ARG, "no PTQ storage type for this spec (group sizes: 32, 64, 128)");
            return NULL;
        }
        fm->qp0 = f->n_qp;
        f->n_qp += (size_t)ptq_n_qp(&fm->used, t.rows, t.cols);
    }
    if (!(f->qp = malloc(sizeof(ptq_qp) * (f->n_qp + 1)))) goto oom;
    for (int i = 0; i < f->n_mats; i++) {
        train_model_mat(m, i, &t);
        ptq_quantize_matrix(&f->mats[i].used, m->p + t.off, t.rows, t.cols, NULL, NULL, f->qp + f->mats[i].qp0);
    }
    core_ok(st);
    return f;
oom:
    train_fq_free(f);
    core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    return NULL;
}

void train_fq_free(train_fq *f) {
    if (!f) return;
    free(f->mats);
    free(f->qp);
    free(f);
}

/* codes of one matrix under the held parameters (as ptq_fake_quant rounds);
 * y: dequantized values, u: codes, mask: STE (each may be NULL) */
static void quant_mat(const train_fq *f, int i, const train_mat *t, const float *x, float *y, uint8_t *u,
                      uint8_t *mask) {
    const train_fq_mat *fm = &f->mats[i];
    const ptq_spec *s = &fm->used;
    const int umax = (1 << s->bits) - 1;
    const int64_t G = s->gran == PTQ_GROUP ? s->group : t->cols, ng = ptq_groups_per_row(s, t->cols);
    const ptq_qp *qp = f->qp + fm->qp0;
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t c = 0; c < t->cols; c++) {
            const ptq_qp q = s->gran == PTQ_TENSOR ? qp[0] : qp[r * ng + c / G];
            const float id = q.scale != 0.0f ? 1.0f / q.scale : 0.0f;
            const int64_t k = r * t->cols + c;
            int v = (int)lrintf(x[k] * id) + q.zero;
            if (mask) mask[k] = v >= 0 && v <= umax;
            v = v < 0 ? 0 : v > umax ? umax : v;
            if (u) u[k] = (uint8_t)v;
            if (y) y[k] = q.scale * (float)(v - q.zero);
        }
}

void train_fq_apply(const train_exec *ex, const train_fq *f, const train_model *m, float *Wq, uint8_t *mask) {
    (void)ex;
    memcpy(Wq, m->p, sizeof(float) * m->n);
    if (mask) memset(mask, 1, m->n);
    train_mat t;
    for (int i = 0; i < f->n_mats && train_model_mat(m, i, &t); i++)
        quant_mat(f, i, &t, m->p + t.off, Wq + t.off, NULL, mask ? mask + t.off : NULL);
}

kvant_code train_fq_write(const train_fq *f, const train_model *m, int i, gguf_writer *w, const char *name,
                          kvant_status *st) {
    train_mat t;
    if (i < 0 || i >= f->n_mats || !train_model_mat(m, i, &t)) return core_fail(st, KVANT_ERR_ARG, "no matrix %d", i);
    const train_fq_mat *fm = &f->mats[i];
    const ptq_spec *s = &fm->used;
    const size_t rb = kern_row_bytes(fm->type, t.cols);
    uint8_t *u = malloc((size_t)t.rows * t.cols), *out = malloc(rb * (size_t)t.rows);
    if (!u || !out) {
        free(u);
        free(out);
        return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    }
    quant_mat(f, i, &t, m->p + t.off, NULL, u, NULL);
    const int64_t ng = ptq_groups_per_row(s, t.cols);
    const ptq_qp *qp = f->qp + fm->qp0;
    for (int64_t r = 0; r < t.rows; r++) {
        uint8_t *o = out + (size_t)r * rb;
        if (s->gran != PTQ_GROUP) {
            const ptq_qp q = qp[s->gran == PTQ_TENSOR ? 0 : r];
            kern_ptq_write(o, s->scheme, s->bits, q.scale, q.zero, u + r * t.cols, t.cols);
            continue;
        }
        for (int64_t g = 0; g < ng; g++) {
            const ptq_qp q = qp[r * ng + g];
            o += kern_ptq_write(o, s->scheme, s->bits, q.scale, q.zero, u + r * t.cols + g * s->group, s->group);
        }
    }
    const int64_t ne[2] = {t.cols, t.rows};
    kvant_code rc = gguf_writer_add_tensor(w, name, fm->type, 2, ne, out, st);
    free(u);
    free(out);
    return rc;
}
