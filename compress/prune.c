/* prune.c - the per-matrix pruning core (compress/prune.h).
 *
 * Scores (R rows, K columns, W[r][j]):
 *   magnitude  |W_rj|
 *   Wanda      |W_rj| * ||X_j||_2          (Sun et al. 2023), no update
 *   SparseGPT  W_rj^2 / [U]_jj^2 at the time column j is reached, with the
 *              optimal compensation of the not-yet-processed columns
 *              (Frantar & Alistarh 2023), U the upper Cholesky factor of
 *              H^-1, H = 2 X X^T + damp I.
 * Unstructured magnitude / Wanda remove the floor(K * sparsity) lowest per
 * row (or over the whole matrix with layerwise); N:M removes the m - n
 * lowest of every m consecutive weights of a row.  SparseGPT chooses
 * unstructured masks per block of columns over all rows (adaptive mask
 * selection, as the paper's code), N:M masks per group when the column
 * walk reaches the group.  Everything SparseGPT computes is in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/prune.h"

bool prune_stats_init(prune_stats *s, int64_t K, bool want_xx) {
    memset(s, 0, sizeof *s);
    s->K = K;
    s->sumsq = calloc((size_t)K, sizeof *s->sumsq);
    if (want_xx) s->xx = calloc((size_t)K * (size_t)K, sizeof *s->xx);
    if (!s->sumsq || (want_xx && !s->xx)) {
        prune_stats_free(s);
        return false;
    }
    return true;
}

void prune_stats_free(prune_stats *s) {
    free(s->sumsq);
    free(s->xx);
    s->sumsq = s->xx = NULL;
}

/* xx: only the upper triangle (j >= i) is accumulated; prune_matrix mirrors it */
void prune_stats_add(prune_stats *s, const float *x, int T) {
    const int64_t K = s->K;
    double xd[K > 0 ? K : 1];
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * K;
        for (int64_t j = 0; j < K; j++) {
            xd[j] = xt[j];
            s->sumsq[j] += xd[j] * xd[j];
        }
        if (s->xx)
            for (int64_t i = 0; i < K; i++) {
                const double xi = xd[i];
                if (xi == 0.0) continue;
                double *row = s->xx + (size_t)i * K;
                for (int64_t j = i; j < K; j++) row[j] += xi * xd[j];
            }
    }
    s->T += T;
}

/* ---- selection helpers ------------------------------------------------------------- */
typedef struct {
    double s;
    int64_t i;
} scored;

static int cmp_scored(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->s < y->s) return -1;
    if (x->s > y->s) return 1;
    return x->i < y->i ? -1 : x->i > y->i; /* ties: lower index first (deterministic) */
}

/* marks in mask the `count` lowest of the n scores sc (indices idx[] into mask) */
static void mark_lowest(scored *sc, int64_t n, int64_t count, uint8_t *mask) {
    qsort(sc, (size_t)n, sizeof *sc, cmp_scored);
    for (int64_t k = 0; k < count && k < n; k++) mask[sc[k].i] = 1;
}

/* in a group of m scores at s[0..m), marks the m - n lowest in mask[0..m) */
static void mark_group(const double *s, int m, int n, uint8_t *mask) {
    int order[64];
    for (int i = 0; i < m; i++) order[i] = i;
    for (int i = 1; i < m; i++) { /* insertion sort, stable: ties keep the lower index first */
        int v = order[i], k = i;
        while (k > 0 && s[order[k - 1]] > s[v]) { order[k] = order[k - 1]; k--; }
        order[k] = v;
    }
    for (int i = 0; i < m - n; i++) mask[order[i]] = 1;
}

/* ---- magnitude / Wanda ------------------------------------------------------------- */
static kvant_code prune_scored(float *W, int64_t R, int64_t K, const double *colw, const prune_opts *o,
                               uint8_t *mask, kvant_status *st) {
    const int64_t n = R * K;
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < K; j++) s[r * K + j] = fabs((double)W[r * K + j]) * (colw ? colw[j] : 1.0);
    memset(mask, 0, (size_t)n);
    if (o->nm_group) {
        for (int64_t g = 0; g < n; g += o->nm_group) mark_group(s + g, o->nm_group, o->nm_keep, mask + g);
    } else if (o->layerwise) {
        scored *sc = malloc((size_t)n * sizeof *sc);
        if (!sc) { free(s); return core_fail(st, KVANT_ERR_NOMEM, "out of memory"); }
        for (int64_t i = 0; i < n; i++) sc[i] = (scored){s[i], i};
        mark_lowest(sc, n, (int64_t)floor((double)n * o->sparsity), mask);
        free(sc);
    } else {
        scored *sc = malloc((size_t)K * sizeof *sc);
        if (!sc) { free(s); return core_fail(st, KVANT_ERR_NOMEM, "out of memory"); }
        const int64_t count = (int64_t)floor((double)K * o->sparsity);
        for (int64_t r = 0; r < R; r++) {
            for (int64_t j = 0; j < K; j++) sc[j] = (scored){s[r * K + j], j};
            mark_lowest(sc, K, count, mask + r * K);
        }
        free(sc);
    }
    for (int64_t i = 0; i < n; i++)
        if (mask[i]) W[i] = 0.0f;
    free(s);
    return KVANT_OK;
}

/* ---- SparseGPT -------------------------------------------------------------------------- */
/* lower Cholesky factor in place (A = L L^T, upper part left untouched);
 * false if A is not positive definite */
static bool cholesky_lower(double *A, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        double d = A[j * n + j];
        for (int64_t k = 0; k < j; k++) d -= A[j * n + k] * A[j * n + k];
        if (!(d > 0.0)) return false;
        d = sqrt(d);
        A[j * n + j] = d;
        for (int64_t i = j + 1; i < n; i++) {
            double v = A[i * n + j];
            const double *ai = A + i * n, *aj = A + j * n;
            for (int64_t k = 0; k < j; k++) v -= ai[k] * aj[k];
            A[i * n + j] = v / d;
        }
    }
    return true;
}

/* U (upper, U^T U = H^-1) from H (n x n, symmetric positive definite);
 * H is overwritten.  false when H (or H^-1) is not positive definite. */
static bool hinv_cholesky_upper(double *H, double *U, int64_t n) {
    if (!cholesky_lower(H, n)) return false;
    /* Linv (lower) into U's storage: L Linv = I, column by column */
    double *Li = U;
    memset(Li, 0, (size_t)n * (size_t)n * sizeof *Li);
    for (int64_t j = 0; j < n; j++) {
        Li[j * n + j] = 1.0 / H[j * n + j];
        for (int64_t i = j + 1; i < n; i++) {
            double v = 0.0;
            for (int64_t k = j; k < i; k++) v -= H[i * n + k] * Li[k * n + j];
            Li[i * n + j] = v / H[i * n + i];
        }
    }
    /* H^-1 = Linv^T Linv into H (full symmetric) */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i; j < n; j++) {
            double v = 0.0;
            for (int64_t k = j; k < n; k++) v += Li[k * n + i] * Li[k * n + j];
            H[i * n + j] = H[j * n + i] = v;
        }
    if (!cholesky_lower(H, n)) return false;
    /* U = L^T */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) U[i * n + j] = j >= i ? H[j * n + i] : 0.0;
    return true;
}

typedef struct {
    double *Wd;          /* [R][K] */
    const double *U;     /* [K][K] */
    const uint8_t *pre;  /* [R][K] masks chosen before the walk (unstructured / fixed), or NULL */
    uint8_t *mask;       /* [R][K] out */
    int64_t R, K, i1, i2;
    int nm_keep, nm_group;
    double *err;         /* [R][bs] */
    int bs;
} sgpt_job;

/* one block of columns [i1, i2) for rows [lo, hi): prune + compensate
 * inside the block, then the trailing update of columns i2.. */
static void sgpt_rows(sgpt_job *j, int64_t lo, int64_t hi) {
    const int64_t K = j->K, i1 = j->i1, i2 = j->i2;
    const double *U = j->U;
    for (int64_t r = lo; r < hi; r++) {
        double *w = j->Wd + r * K, *e = j->err + r * j->bs;
        uint8_t *mk = j->mask + r * K;
        for (int64_t q = i1; q < i2; q++) {
            if (j->nm_group && !j->pre && (q - i1) % j->nm_group == 0) {
                double s[64];
                for (int c = 0; c < j->nm_group; c++) {
                    const double u = U[(q + c) * K + q + c];
                    s[c] = w[q + c] * w[q + c] / (u * u);
                }
                mark_group(s, j->nm_group, j->nm_keep, mk + q);
            }
            const bool drop = j->pre ? j->pre[r * K + q] : mk[q];
            mk[q] = drop;
            const double wq = w[q], d = U[q * K + q];
            const double eq = drop ? wq / d : 0.0;
            if (drop) w[q] = 0.0;
            e[q - i1] = eq;
            if (eq != 0.0) {
                const double *uq = U + q * K;
                for (int64_t c = q + 1; c < i2; c++) w[c] -= eq * uq[c];
            }
        }
        /* W[:, i2:] -= Err1 . U[i1:i2, i2:] */
        for (int64_t q = i1; q < i2; q++) {
            const double eq = e[q - i1];
            if (eq == 0.0) continue;
            const double *uq = U + q * K;
            for (int64_t c = i2; c < K; c++) w[c] -= eq * uq[c];
        }
    }
}

static void sgpt_task(void *ctx, int ith, int nth) {
    sgpt_job *j = ctx;
    int64_t lo, hi;
    core_split(j->R, ith, nth, &lo, &hi);
    sgpt_rows(j, lo, hi);
}

static kvant_code prune_sparsegpt(float *W, int64_t R, int64_t K, const prune_stats *stats, const prune_opts *o,
                                  uint8_t *mask, const uint8_t *fixed, kvant_status *st) {
    const size_t KK = (size_t)K * (size_t)K;
    double *H = malloc(KK * sizeof *H), *U = malloc(KK * sizeof *U), *Wd = malloc((size_t)(R * K) * sizeof *Wd);
    const int bs = o->block > 0 ? o->block : 128;
    double *err = malloc((size_t)R * (size_t)bs * sizeof *err);
    uint8_t *pre = fixed ? NULL : malloc((size_t)(R * K));
    kvant_code rc = KVANT_OK;
    if (!H || !U || !Wd || !err || (!fixed && !pre)) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); goto done; }
    if (o->nm_group && bs % o->nm_group) { rc = core_fail(st, KVANT_ERR_ARG, "block %d not a multiple of the group %d", bs, o->nm_group); goto done; }
    for (int64_t i = 0; i < R * K; i++) Wd[i] = W[i];
    memset(mask, 0, (size_t)(R * K));
    double damp_frac = o->damp > 0 ? o->damp : 0.01;
    for (int attempt = 0;; attempt++) {
        double mean = 0.0;
        for (int64_t i = 0; i < K; i++)
            for (int64_t j = i; j < K; j++) H[i * K + j] = H[j * K + i] = 2.0 * stats->xx[i * K + j];
        for (int64_t i = 0; i < K; i++) {
            if (H[i * K + i] == 0.0) { /* dead input: never seen non-zero; its weights do nothing */
                H[i * K + i] = 1.0;
                for (int64_t r = 0; r < R; r++) Wd[r * K + i] = 0.0;
            }
            mean += H[i * K + i];
        }
        mean /= (double)K;
        for (int64_t i = 0; i < K; i++) H[i * K + i] += damp_frac * mean;
        if (hinv_cholesky_upper(H, U, K)) break;
        if (attempt == 4) { rc = core_fail(st, KVANT_ERR_ARG, "SparseGPT: H is not positive definite even with damp %g", damp_frac); goto done; }
        damp_frac *= 10.0;
    }
    for (int64_t i1 = 0; i1 < K; i1 += bs) {
        const int64_t i2 = i1 + bs < K ? i1 + bs : K, cnt = i2 - i1;
        const uint8_t *premask = fixed;
        if (!fixed && !o->nm_group) { /* adaptive mask: the lowest w^2/U_qq^2 over the block, all rows */
            scored *sc = malloc((size_t)(R * cnt) * sizeof *sc);
            if (!sc) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); goto done; }
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < cnt; c++) {
                    const double w = Wd[r * K + i1 + c], u = U[(i1 + c) * K + i1 + c];
                    sc[r * cnt + c] = (scored){w * w / (u * u), r * K + i1 + c};
                }
            for (int64_t r = 0; r < R; r++) memset(pre + r * K + i1, 0, (size_t)cnt);
            mark_lowest(sc, R * cnt, (int64_t)floor((double)(R * cnt) * o->sparsity), pre);
            free(sc);
            premask = pre;
        }
        sgpt_job j = {Wd, U, premask, mask, R, K, i1, i2, o->nm_keep, o->nm_group, err, bs};
        if (o->pool && (double)R * (double)K * (double)cnt > 1e6) core_pool_run(o->pool, sgpt_task, &j);
        else sgpt_rows(&j, 0, R);
    }
    for (int64_t i = 0; i < R * K; i++) W[i] = mask[i] ? 0.0f : (float)Wd[i];
done:
    free(H);
    free(U);
    free(Wd);
    free(err);
    free(pre);
    return rc;
}

kvant_code prune_matrix(float *W, int64_t R, int64_t K, const prune_stats *stats, const prune_opts *o, uint8_t *mask,
                        const uint8_t *fixed_mask, kvant_status *st) {
    if (R <= 0 || K <= 0) return core_fail(st, KVANT_ERR_ARG, "empty matrix");
    if (o->nm_group) {
        if (o->nm_group > 64 || o->nm_keep < 0 || o->nm_keep > o->nm_group)
            return core_fail(st, KVANT_ERR_ARG, "bad N:M pattern %d:%d", o->nm_keep, o->nm_group);
        if (K % o->nm_group)
            return core_fail(st, KVANT_ERR_ARG, "%lld columns are not a multiple of the N:M group %d", (long long)K,
                             o->nm_group);
    } else if (!(o->sparsity >= 0.0f && o->sparsity <= 1.0f))
        return core_fail(st, KVANT_ERR_ARG, "sparsity %g not in 0..1", o->sparsity);
    if (o->method != PRUNE_MAGNITUDE && (!stats || stats->K != K || !stats->sumsq))
        return core_fail(st, KVANT_ERR_ARG, "this method needs calibration statistics of the %lld inputs", (long long)K);
    uint8_t *own = NULL;
    if (!mask && !(own = mask = malloc((size_t)(R * K)))) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    kvant_code rc;
    switch (o->method) {
    case PRUNE_MAGNITUDE: rc = prune_scored(W, R, K, NULL, o, mask, st); break;
    case PRUNE_WANDA: {
        double *cw = malloc((size_t)K * sizeof *cw);
        if (!cw) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); break; }
        for (int64_t j = 0; j < K; j++) cw[j] = sqrt(stats->sumsq[j]);
        rc = prune_scored(W, R, K, cw, o, mask, st);
        free(cw);
        break;
    }
    case PRUNE_SPARSEGPT:
        rc = stats->xx ? prune_sparsegpt(W, R, K, stats, o, mask, fixed_mask, st)
                       : core_fail(st, KVANT_ERR_ARG, "SparseGPT needs the inputs' X X^T");
        break;
    default: rc = core_fail(st, KVANT_ERR_ARG, "prune_matrix: structured pruning works on whole models (prune_file)");
    }
    free(own);
    return rc;
}

bool prune_check_nm(const float *W, int64_t R, int64_t K, int n, int m) {
    if (m <= 0 || K % m) return false;
    for (int64_t g = 0; g < R * K; g += m) {
        int z = 0;
        for (int i = 0; i < m; i++) z += W[g + i] == 0.0f;
        if (z < m - n) return false;
    }
    return true;
}

double prune_zero_fraction(const float *W, int64_t n) {
    int64_t z = 0;
    for (int64_t i = 0; i < n; i++) z += W[i] == 0.0f;
    return n > 0 ? (double)z / (double)n : 0.0;
}
