/* ptq.c - the PTQ quantizer (compress/ptq.h): ranges, MSE clipping, codes,
 * fake quantization, and matrices written into kvant's PTQ types. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "compress/ptq.h"
#include "kernels/ptq.h"

/* clipping search: r = 1, 1 - PTQ_CLIP_STEP, ... down to PTQ_CLIP_MIN */
#define PTQ_CLIP_STEPS 36
#define PTQ_CLIP_STEP 0.02f
/* zero-point: a grid of (min ratio, max ratio), 1 .. 0.4 */
#define PTQ_CLIP_STEPS_2D 16
#define PTQ_CLIP_STEP_2D 0.04f

bool ptq_spec_valid(const ptq_spec *s) {
    return s && (s->scheme == PTQ_ABSMAX || s->scheme == PTQ_ZEROPOINT) && s->bits >= 2 && s->bits <= 8 &&
           (s->gran == PTQ_TENSOR || s->gran == PTQ_CHANNEL || (s->gran == PTQ_GROUP && s->group >= 1)) &&
           (s->clip == PTQ_CLIP_NONE || s->clip == PTQ_CLIP_MSE);
}

const char *ptq_spec_name(const ptq_spec *s, char *buf, size_t cap) {
    char g[32];
    if (s->gran == PTQ_GROUP) snprintf(g, sizeof g, "g%d", s->group);
    else snprintf(g, sizeof g, "%s", s->gran == PTQ_TENSOR ? "tensor" : "channel");
    snprintf(buf, cap, "%s%d-%s%s", s->scheme == PTQ_ABSMAX ? "absmax" : "zp", s->bits, g,
             s->clip == PTQ_CLIP_MSE ? "-mse" : "");
    return buf;
}

/* ---- ranges, codes, errors ------------------------------------------------------- */
static float f16_round(float v) { return kern_fp16_to_fp32(kern_fp32_to_fp16(v)); }

/* (scale, zero) for the range [lo, hi] (lo <= 0 <= hi) */
static ptq_qp qp_from_range(const ptq_spec *s, float lo, float hi) {
    ptq_qp qp;
    if (s->scheme == PTQ_ABSMAX) {
        const float amax = fmaxf(-lo, hi);
        qp.scale = f16_round(amax / (float)((1 << (s->bits - 1)) - 1));
        qp.zero = 1 << (s->bits - 1);
        return qp;
    }
    const int umax = (1 << s->bits) - 1;
    qp.scale = f16_round((hi - lo) / (float)umax);
    int z = qp.scale > 0.0f ? (int)lrintf(-lo / qp.scale) : 0;
    qp.zero = z < 0 ? 0 : z > umax ? umax : z;
    return qp;
}

/* weighted squared error; imp[k] weighs element j where k runs 0..period-1
 * cyclically (period: the row length, so per-tensor groups spanning rows
 * reuse the per-column importance) */
static double error_(const ptq_spec *s, ptq_qp qp, const float *x, int64_t n, const float *imp, int64_t period) {
    const int umax = (1 << s->bits) - 1;
    const float id = qp.scale != 0.0f ? 1.0f / qp.scale : 0.0f;
    double e = 0.0;
    int64_t k = 0;
    for (int64_t j = 0; j < n; j++) {
        int q = (int)lrintf(x[j] * id) + qp.zero;
        q = q < 0 ? 0 : q > umax ? umax : q;
        const float diff = x[j] - qp.scale * (float)(q - qp.zero);
        e += (double)(imp ? imp[k] : 1.0f) * (double)diff * diff;
        if (++k == period) k = 0;
    }
    return e;
}

double ptq_error(const ptq_spec *s, ptq_qp qp, const float *x, int64_t n, const float *imp) {
    return error_(s, qp, x, n, imp, n);
}

/* Least-squares refits of the scale with the zero point fixed: codes for
 * qp, then d = sum w x (u - z) / sum w (u - z)^2 (F16-rounded), twice;
 * returns the best of qp and its refits, *e its error. */
static ptq_qp refine_(const ptq_spec *s, ptq_qp qp, const float *x, int64_t n, const float *imp, int64_t period,
                      double *e) {
    ptq_qp best = qp;
    double best_e = error_(s, qp, x, n, imp, period);
    const int umax = (1 << s->bits) - 1;
    for (int it = 0; it < 2; it++) {
        const float id = qp.scale != 0.0f ? 1.0f / qp.scale : 0.0f;
        double num = 0.0, den = 0.0;
        int64_t k = 0;
        for (int64_t j = 0; j < n; j++) {
            int q = (int)lrintf(x[j] * id) + qp.zero;
            q = q < 0 ? 0 : q > umax ? umax : q;
            const double w = imp ? imp[k] : 1.0, v = q - qp.zero;
            num += w * x[j] * v;
            den += w * v * v;
            if (++k == period) k = 0;
        }
        if (den <= 0.0 || num <= 0.0) break;
        qp.scale = f16_round((float)(num / den));
        const double err = error_(s, qp, x, n, imp, period);
        if (err < best_e) { best_e = err; best = qp; }
        else break;
    }
    *e = best_e;
    return best;
}

/* Plain range, or (PTQ_CLIP_MSE) the best clipped range: absmax shrinks
 * max|x| by r, zero-point shrinks min and max by independent ratios; every
 * candidate is refined by refine_. */
static ptq_qp choose_(const ptq_spec *s, const float *x, int64_t n, const float *imp, int64_t period) {
    float lo = 0.0f, hi = 0.0f;
    for (int64_t j = 0; j < n; j++) { lo = fminf(lo, x[j]); hi = fmaxf(hi, x[j]); }
    ptq_qp best = qp_from_range(s, lo, hi);
    if (s->clip != PTQ_CLIP_MSE || best.scale == 0.0f) return best;
    double best_e;
    best = refine_(s, best, x, n, imp, period, &best_e);
    const int n2 = s->scheme == PTQ_ZEROPOINT ? PTQ_CLIP_STEPS_2D : 1;
    const float step2 = s->scheme == PTQ_ZEROPOINT ? PTQ_CLIP_STEP_2D : 0.0f;
    const int n1 = s->scheme == PTQ_ZEROPOINT ? PTQ_CLIP_STEPS_2D : PTQ_CLIP_STEPS;
    const float step1 = s->scheme == PTQ_ZEROPOINT ? PTQ_CLIP_STEP_2D : PTQ_CLIP_STEP;
    for (int i = 0; i < n1; i++)
        for (int k = 0; k < n2; k++) {
            if (i == 0 && k == 0) continue;
            const float r1 = 1.0f - step1 * (float)i, r2 = s->scheme == PTQ_ZEROPOINT ? 1.0f - step2 * (float)k : r1;
            const ptq_qp qp = qp_from_range(s, lo * r1, hi * r2);
            if (qp.scale == 0.0f) continue;
            double e;
            const ptq_qp q2 = refine_(s, qp, x, n, imp, period, &e);
            if (e < best_e) { best_e = e; best = q2; }
        }
    return best;
}

ptq_qp ptq_choose(const ptq_spec *s, const float *x, int64_t n, const float *imp) {
    return choose_(s, x, n, imp, n);
}

void ptq_codes(const ptq_spec *s, ptq_qp qp, const float *x, int64_t n, uint8_t *u) {
    kern_ptq_codes(x, n, s->bits, qp.scale, qp.zero, u);
}

/* ---- matrices ----------------------------------------------------------------------- */
int64_t ptq_groups_per_row(const ptq_spec *s, int64_t cols) {
    return s->gran == PTQ_GROUP ? (cols + s->group - 1) / s->group : 1;
}

int64_t ptq_n_qp(const ptq_spec *s, int64_t rows, int64_t cols) {
    return s->gran == PTQ_TENSOR ? 1 : rows * ptq_groups_per_row(s, cols);
}

void ptq_quantize_matrix(const ptq_spec *s, const float *x, int64_t rows, int64_t cols, const float *imp,
                         uint8_t *u, ptq_qp *qp) {
    if (s->gran == PTQ_TENSOR) {
        qp[0] = choose_(s, x, rows * cols, imp, cols);
        if (u) kern_ptq_codes(x, rows * cols, s->bits, qp[0].scale, qp[0].zero, u);
        return;
    }
    const int64_t G = s->gran == PTQ_GROUP ? s->group : cols, ng = ptq_groups_per_row(s, cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < ng; g++) {
            const int64_t c0 = g * G, n = cols - c0 < G ? cols - c0 : G;
            const float *xg = x + r * cols + c0;
            ptq_qp *q = &qp[r * ng + g];
            *q = choose_(s, xg, n, imp ? imp + c0 : NULL, n);
            if (u) kern_ptq_codes(xg, n, s->bits, q->scale, q->zero, u + r * cols + c0);
        }
}

void ptq_fake_quant(const ptq_spec *s, const float *x, float *y, int64_t rows, int64_t cols, const float *imp,
                    uint8_t *mask) {
    const int64_t nqp = ptq_n_qp(s, rows, cols), G = s->gran == PTQ_GROUP ? s->group : cols;
    const int64_t ng = ptq_groups_per_row(s, cols);
    ptq_qp one, *qp = nqp == 1 ? &one : malloc((size_t)nqp * sizeof *qp);
    CORE_ASSERT(qp);
    ptq_quantize_matrix(s, x, rows, cols, imp, NULL, qp);
    const int umax = (1 << s->bits) - 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const ptq_qp q = s->gran == PTQ_TENSOR ? qp[0] : qp[r * ng + c / G];
            const float id = q.scale != 0.0f ? 1.0f / q.scale : 0.0f;
            const int64_t i = r * cols + c;
            int v = (int)lrintf(x[i] * id) + q.zero;
            if (mask) mask[i] = v >= 0 && v <= umax;
            v = v < 0 ? 0 : v > umax ? umax : v;
            y[i] = q.scale * (float)(v - q.zero);
        }
    if (qp != &one) free(qp);
}

/* ---- storage types ---------------------------------------------------------------- */
bool ptq_type_spec(int type, ptq_spec *out) {
    int sc, b, g;
    if (!kern_ptq_decode(type, &sc, &b, &g)) return false;
    *out = (ptq_spec){.scheme = (ptq_scheme)sc, .bits = b,
                      .gran = g == KERN_PTQ_TENSOR ? PTQ_TENSOR : g == KERN_PTQ_CHANNEL ? PTQ_CHANNEL : PTQ_GROUP,
                      .group = kern_ptq_group(g), .clip = PTQ_CLIP_NONE};
    return true;
}

static int gran_index(int G) { return G == 32 ? KERN_PTQ_G32 : G == 64 ? KERN_PTQ_G64 : G == 128 ? KERN_PTQ_G128 : -1; }

int ptq_storage_type(const ptq_spec *s, int64_t cols, ptq_spec *used, char *note, size_t cap) {
    if (note && cap) note[0] = 0;
    if (!ptq_spec_valid(s)) return -1;
    ptq_spec u = *s;
    int g;
    if (s->gran == PTQ_TENSOR) g = KERN_PTQ_TENSOR;
    else if (s->gran == PTQ_CHANNEL) g = KERN_PTQ_CHANNEL;
    else {
        g = gran_index(s->group);
        if (g < 0) return -1;
        if (cols % s->group) {
            int G = s->group / 2;
            while (G >= 32 && cols % G) G /= 2;
            if (G >= 32) {
                g = gran_index(G);
                u.group = G;
                if (note) snprintf(note, cap, "%lld columns do not divide group %d; using group %d", (long long)cols, s->group, G);
            } else {
                g = KERN_PTQ_CHANNEL;
                u.gran = PTQ_CHANNEL;
                u.group = 0;
                if (note)
                    snprintf(note, cap, "%lld columns fit no group of 32/64/128; using per-channel", (long long)cols);
            }
        }
    }
    if (used) *used = u;
    return KERN_PTQ_TYPE((int)s->scheme, s->bits, g);
}

/* writes rows of codes u with their parameters qp in type ts's layout */
static void write_rows(const ptq_spec *ts_, const uint8_t *u, const ptq_qp *qp, int64_t rows, int64_t cols, void *out) {
    const ptq_spec ts = *ts_;
    const int type = KERN_PTQ_TYPE((int)ts.scheme, ts.bits,
                                   ts.gran == PTQ_TENSOR ? KERN_PTQ_TENSOR : ts.gran == PTQ_CHANNEL ? KERN_PTQ_CHANNEL : gran_index(ts.group));
    const size_t rb = kern_row_bytes(type, cols);
    const int64_t ng = ptq_groups_per_row(&ts, cols);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *o = (uint8_t *)out + (size_t)r * rb;
        if (ts.gran != PTQ_GROUP) {
            const ptq_qp q = qp[ts.gran == PTQ_TENSOR ? 0 : r];
            kern_ptq_write(o, ts.scheme, ts.bits, q.scale, q.zero, u + r * cols, cols);
            continue;
        }
        for (int64_t g = 0; g < ng; g++) {
            const ptq_qp q = qp[r * ng + g];
            o += kern_ptq_write(o, ts.scheme, ts.bits, q.scale, q.zero, u + r * cols + g * ts.group, ts.group);
        }
    }
}

kvant_code ptq_quantize_tensor(const ptq_spec *s, int type, const float *x, int64_t rows, int64_t cols,
                               const float *imp, void *out, kvant_status *st) {
    const kern_type_traits *tt = kern_type_get(type);
    if (!tt) return core_fail(st, KVANT_ERR_ARG, "unknown tensor type %d", type);
    const size_t rb = kern_row_bytes(type, cols);
    if (!rb) return core_fail(st, KVANT_ERR_ARG, "%s cannot hold rows of %lld", tt->name, (long long)cols);
    ptq_spec ts;
    if (!ptq_type_spec(type, &ts)) {
        if (!tt->from_float_ref) return core_fail(st, KVANT_ERR_UNSUPPORTED, "kvant cannot write %s", tt->name);
        for (int64_t r = 0; r < rows; r++) tt->from_float_ref(x + r * cols, (uint8_t *)out + (size_t)r * rb, cols);
        return KVANT_OK;
    }
    ts.clip = s ? s->clip : PTQ_CLIP_NONE;
    const int64_t nqp = ptq_n_qp(&ts, rows, cols);
    ptq_qp *qp = malloc((size_t)nqp * sizeof *qp);
    uint8_t *u = malloc((size_t)(rows * cols));
    if (!qp || !u) {
        free(qp);
        free(u);
        return core_fail(st, KVANT_ERR_NOMEM, "out of memory quantizing %lld x %lld", (long long)rows, (long long)cols);
    }
    ptq_quantize_matrix(&ts, x, rows, cols, imp, u, qp);
    write_rows(&ts, u, qp, rows, cols, out);
    free(qp);
    free(u);
    return KVANT_OK;
}

/* ---- GPTQ ----------------------------------------------------------------------------
 * Frantar et al. 2022: columns are quantized left to right; each column's
 * rounding error, scaled by the inverse Hessian's Cholesky factor, is moved
 * onto the columns not yet quantized.  Group parameters are chosen when the
 * group's first column is reached (from the updated weights). */

/* in place: a (n x n, row-major, symmetric positive definite) -> its lower
 * Cholesky factor L (upper part left as is); false if not positive definite */
static bool cholesky(double *a, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        double d = a[j * n + j];
        for (int64_t k = 0; k < j; k++) d -= a[j * n + k] * a[j * n + k];
        if (!(d > 0.0)) return false;
        d = sqrt(d);
        a[j * n + j] = d;
        for (int64_t i = j + 1; i < n; i++) {
            double v = a[i * n + j];
            for (int64_t k = 0; k < j; k++) v -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = v / d;
        }
    }
    return true;
}

kvant_code ptq_gptq_tensor(const ptq_spec *s, int type, const float *x, int64_t rows, int64_t cols, const double *H,
                           void *out, kvant_status *st) {
    ptq_spec ts;
    if (!H || !ptq_type_spec(type, &ts)) return ptq_quantize_tensor(s, type, x, rows, cols, NULL, out, st);
    ts.clip = s ? s->clip : PTQ_CLIP_NONE;
    const int64_t n = cols, nqp = ptq_n_qp(&ts, rows, cols), ng = ptq_groups_per_row(&ts, cols);
    const int64_t G = ts.gran == PTQ_GROUP ? ts.group : cols;
    double *h = malloc((size_t)(n * n) * sizeof *h), *linv = calloc((size_t)(n * n), sizeof *linv);
    float *w = malloc((size_t)(rows * cols) * sizeof *w), *imp = malloc((size_t)n * sizeof *imp);
    ptq_qp *qp = malloc((size_t)nqp * sizeof *qp);
    uint8_t *u = malloc((size_t)(rows * cols));
    kvant_code rc = KVANT_OK;
    if (!h || !linv || !w || !imp || !qp || !u) { rc = core_fail(st, KVANT_ERR_NOMEM, "GPTQ: out of memory"); goto done; }
    memcpy(h, H, (size_t)(n * n) * sizeof *h);
    memcpy(w, x, (size_t)(rows * cols) * sizeof *w);
    double mean = 0.0;
    for (int64_t j = 0; j < n; j++) mean += h[j * n + j];
    mean /= (double)n;
    for (int64_t j = 0; j < n; j++) {
        if (h[j * n + j] <= 0.0) { /* a dead input: its weights do not matter */
            h[j * n + j] = 1.0;
            for (int64_t r = 0; r < rows; r++) w[r * cols + j] = 0.0f;
        }
        imp[j] = (float)h[j * n + j];
        h[j * n + j] += 0.01 * mean + 1e-12; /* dampening */
    }
    /* Hinv = L^-T L^-1; then its upper Cholesky factor U (Hinv = U^T U) */
    if (!cholesky(h, n)) { rc = core_fail(st, KVANT_ERR_ARG, "GPTQ: Hessian not positive definite"); goto done; }
    for (int64_t i = 0; i < n; i++) { /* linv = L^-1 (lower), forward substitution */
        linv[i * n + i] = 1.0 / h[i * n + i];
        for (int64_t j = 0; j < i; j++) {
            double v = 0.0;
            for (int64_t k = j; k < i; k++) v += h[i * n + k] * linv[k * n + j];
            linv[i * n + j] = -v / h[i * n + i];
        }
    }
    for (int64_t i = 0; i < n; i++) /* h = Hinv = linv^T linv (full) */
        for (int64_t j = 0; j <= i; j++) {
            double v = 0.0;
            for (int64_t k = i; k < n; k++) v += linv[k * n + i] * linv[k * n + j];
            h[i * n + j] = h[j * n + i] = v;
        }
    if (!cholesky(h, n)) { rc = core_fail(st, KVANT_ERR_ARG, "GPTQ: inverse Hessian not positive definite"); goto done; }
    /* U[j][k] = L[k][j]: read h[k * n + j] for k >= j */
    if (ts.gran == PTQ_TENSOR) qp[0] = choose_(&ts, w, rows * cols, imp, cols);
    const int umax = (1 << ts.bits) - 1;
    for (int64_t j = 0; j < n; j++) {
        if (ts.gran != PTQ_TENSOR && j % G == 0) {
            const int64_t len = cols - j < G ? cols - j : G;
            for (int64_t r = 0; r < rows; r++) qp[r * ng + j / G] = choose_(&ts, w + r * cols + j, len, imp + j, len);
        }
        const double ujj = h[j * n + j];
        for (int64_t r = 0; r < rows; r++) {
            const ptq_qp q = ts.gran == PTQ_TENSOR ? qp[0] : qp[r * ng + j / G];
            const float id = q.scale != 0.0f ? 1.0f / q.scale : 0.0f;
            float *wr = w + r * cols;
            int v = (int)lrintf(wr[j] * id) + q.zero;
            v = v < 0 ? 0 : v > umax ? umax : v;
            u[r * cols + j] = (uint8_t)v;
            const double e = ((double)wr[j] - (double)q.scale * (v - q.zero)) / ujj;
            for (int64_t k = j + 1; k < n; k++) wr[k] -= (float)(e * h[k * n + j]);
        }
    }
    write_rows(&ts, u, qp, rows, cols, out);
done:
    free(h); free(linv); free(w); free(imp); free(qp); free(u);
    return rc;
}
