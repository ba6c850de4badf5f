/* int8.c - the public INT8 API (include/kvant_compress.h): LLM.int8, SmoothQuant
 * W8A8 and the outlier report, over compress/int8.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "compress/int8.h"
#include "format/gguf.h"
#include "kernels/w8a8.h"

struct kvant_int8 {
    kvant_model *km;
    model *folded;          /* owned clone with scales folded in, or NULL */
    const model *m;         /* folded or the base model */
    int8_model *q;
    int8_ctx **ctxs;        /* handed to sequences; freed with the handle */
    int n_ctxs, cap_ctxs;
    float alpha;
    double smin, smax;
    int n_outl;             /* LLM.int8's hidden dims found at calibration (stored form) */
    int32_t *outl;
};

kvant_int8_params kvant_int8_default(void) {
    return (kvant_int8_params){.mode = KVANT_INT8_W8A8, .threshold = 6.0f, .alpha = 0.5f, .calib_tokens = 4096,
                               .calib_ctx = 512, .inject_scale = 1.0f};
}

kvant_outlier_params kvant_outlier_default(void) {
    return (kvant_outlier_params){.threshold = 6.0f, .min_layers = 0.25, .min_tokens = 0.06, .max_tokens = 4096,
                                  .ctx = 512};
}

/* Runs up to max_tokens of text through model m (the base model's
 * tokenizer and threads) in chunks of ctx tokens (BOS first, as kvant ppl
 * does), with the calibration tap on. */
static kvant_code run_text(kvant_model *km, const model *m, const char *text, size_t len, int max_tokens, int ctx,
                           model_tap_fn tap, void *user, void (*progress)(void *, int, int), void *puser,
                           kvant_status *st) {
    if (len > (size_t)INT32_MAX / 2) return core_fail(st, KVANT_ERR_ARG, "calibration text too long");
    if (ctx < 2) return core_fail(st, KVANT_ERR_ARG, "calibration chunk of %d tokens too small", ctx);
    int n;
    int32_t *toks = kvant_tokenize_all(km, text, len, true, &n, st);
    if (!toks) return st->code;
    if (n < 2) {
        free(toks);
        return core_fail(st, KVANT_ERR_ARG, "calibration text has no tokens");
    }
    if (max_tokens > 0 && n > max_tokens) n = max_tokens;
    kvant_seq *s = kvant_seq_new(km, ctx, st);
    kvant_code rc = s ? KVANT_OK : st->code;
    if (s) {
        s->m = m;
        s->work->tap = tap;
        s->work->hook_user = user;
    }
    const int bos = tok_bos(m->tok), total = (n + ctx - 1) / ctx;
    for (int c = 0; rc == KVANT_OK && c < total; c++) {
        const int lo = c * ctx, cnt = n - lo < ctx ? n - lo : ctx;
        if (bos >= 0) toks[lo] = bos;
        kvant_seq_reset(s);
        rc = kvant_forward(s, toks + lo, cnt, NULL, false, st);
        if (progress) progress(puser, c + 1, total);
    }
    kvant_seq_free(s);
    free(toks);
    return rc;
}

typedef struct {
    void (*fn)(void *, const char *, int, int);
    void *user;
} calib_progress;

static void calib_cb(void *u, int done, int total) {
    const calib_progress *p = u;
    if (p->fn) p->fn(p->user, "calibration", done, total);
}

kvant_int8 *kvant_int8_new(kvant_model *km, const kvant_int8_params *p, kvant_status *st) {
    const model *base = km->m;
    const model_config *c = &base->cfg;
    /* the INT8 matmul hook sees the seven dense matrices; experts would stay in their type unannounced */
    if (model_require(base, MODEL_FEAT_EXPERTS, "INT8 inference (W8A8, LLM.int8, SmoothQuant)", st)) return NULL;
    int8_mode mode;
    switch (p->mode) {
    case KVANT_INT8_W8A8: mode = INT8_W8A8; break;
    case KVANT_INT8_MIXED: mode = INT8_MIXED; break;
    case KVANT_INT8_NONE: mode = INT8_OFF; break;
    default: core_fail(st, KVANT_ERR_ARG, "INT8 mode %d is none of kvant_int8_mode", (int)p->mode); return NULL;
    }
    if (mode == INT8_MIXED && !(p->threshold > 0)) {
        core_fail(st, KVANT_ERR_ARG, "LLM.int8 threshold must be > 0");
        return NULL;
    }
    if (p->smooth && (!(p->alpha >= 0) || p->alpha > 1)) {
        core_fail(st, KVANT_ERR_ARG, "SmoothQuant alpha %g outside [0, 1]", p->alpha);
        return NULL;
    }
    if (p->smooth && !p->calib_text) {
        core_fail(st, KVANT_ERR_ARG, "SmoothQuant needs a calibration text");
        return NULL;
    }
    if (p->n_inject > 0 && !(p->inject_scale > 0)) {
        core_fail(st, KVANT_ERR_ARG, "inject scale must be > 0");
        return NULL;
    }
    for (int i = 0; i < p->n_inject; i++)
        if (p->inject_dims[i] < 0 || p->inject_dims[i] >= c->dim) {
            core_fail(st, KVANT_ERR_ARG, "inject dimension %d outside 0..%d", p->inject_dims[i], c->dim - 1);
            return NULL;
        }
    kvant_int8 *q = calloc(1, sizeof *q);
    const size_t LC = (size_t)c->n_layers * (size_t)c->dim;
    float *s_inj = malloc(sizeof(float) * LC), *sa = malloc(sizeof(float) * LC), *sf = malloc(sizeof(float) * LC);
    float *wa = malloc(sizeof(float) * LC), *wf = malloc(sizeof(float) * LC);
    model *inj = NULL;
    float *wo = NULL, *sv = NULL;
    int8_stats *stats = NULL;
    if (!q || !s_inj || !sa || !sf || !wa || !wf) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    q->km = km;
    q->m = base;
    q->alpha = p->alpha;
    q->smin = q->smax = 1.0;
    for (size_t i = 0; i < LC; i++) s_inj[i] = 1.0f;
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0; i < p->n_inject; i++) s_inj[(size_t)l * c->dim + p->inject_dims[i]] = 1.0f / p->inject_scale;
    /* synthetic outliers first: norm * scale, columns / scale */
    if (p->n_inject > 0 && !(inj = smooth_fold(base, s_inj, s_inj, NULL, st))) goto fail;
    const model *cur = inj ? inj : base;
    if (p->smooth) {
        stats = int8_stats_new(c, INFINITY, 0, st);
        if (!stats) goto fail;
        calib_progress cp = {p->progress, p->user};
        if (run_text(km, cur, p->calib_text, p->calib_len, p->calib_tokens > 0 ? p->calib_tokens : 4096,
                     p->calib_ctx > 0 ? p->calib_ctx : 512, int8_stats_tap, stats, calib_cb, &cp, st))
            goto fail;
        smooth_weight_max(cur, wa, wf);
        smooth_scales(stats->maxabs[INT8_SITE_ATTN_IN], wa, (int)LC, p->alpha, sa);
        smooth_scales(stats->maxabs[INT8_SITE_FFN_IN], wf, (int)LC, p->alpha, sf);
        q->smin = INFINITY;
        q->smax = 0;
        for (size_t i = 0; i < LC; i++) {
            q->smin = fmin(q->smin, fmin(sa[i], sf[i]));
            q->smax = fmax(q->smax, fmax(sa[i], sf[i]));
            sa[i] *= s_inj[i];
            sf[i] *= s_inj[i];
        }
        if (p->smooth_wo) {
            /* wv's rows are divided by s: a v bias would have to be too */
            if (model_require(base, MODEL_FEAT_BIAS, "SmoothQuant --smooth-wo", st)) goto fail;
            const int QD = c->n_heads * c->head_dim, KVD = c->n_kv_heads * c->head_dim;
            if (!(wo = malloc(sizeof(float) * (size_t)c->n_layers * QD)) ||
                !(sv = malloc(sizeof(float) * (size_t)c->n_layers * KVD))) {
                core_fail(st, KVANT_ERR_NOMEM, "out of memory");
                goto fail;
            }
            smooth_wo_max(cur, wo);
            for (int l = 0; l < c->n_layers; l++)
                smooth_scales_wo(c, stats->maxabs[INT8_SITE_WO_IN] + (size_t)l * QD, wo + (size_t)l * QD, p->alpha,
                                 sv + (size_t)l * KVD);
            for (size_t i = 0; i < (size_t)c->n_layers * KVD; i++) {
                q->smin = fmin(q->smin, sv[i]);
                q->smax = fmax(q->smax, sv[i]);
            }
        }
        if (!(q->folded = smooth_fold(base, sa, sf, sv, st))) goto fail;
        q->m = q->folded;
    } else if (inj) {
        q->folded = inj;
        inj = NULL;
        q->m = q->folded;
    }
    /* LLM.int8 with a calibration text: the hidden dims meeting its outlier
     * criterion, the static set a stored file keeps in F16 (kvant_int8_save) */
    if (mode == INT8_MIXED && p->calib_text) {
        const kvant_outlier_params od = kvant_outlier_default();
        const int ntok = p->calib_tokens > 0 ? p->calib_tokens : 4096;
        int8_stats *os = int8_stats_new(c, p->threshold, ntok, st);
        if (!os) goto fail;
        calib_progress cp = {p->progress, p->user};
        kvant_code orc = run_text(km, q->m, p->calib_text, p->calib_len, ntok, p->calib_ctx > 0 ? p->calib_ctx : 512,
                                  int8_stats_tap, os, calib_cb, &cp, st);
        if (!orc && !(q->outl = malloc(sizeof(int32_t) * (size_t)c->dim))) orc = core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        for (int j = 0; !orc && j < c->dim; j++) {
            double ls, ts;
            if (int8_stats_outlier(os, j, od.min_layers, od.min_tokens, &ls, &ts)) q->outl[q->n_outl++] = j;
        }
        int8_stats_free(os);
        if (orc) goto fail;
    }
    if (p->progress) p->progress(p->user, "int8 weights", 0, 1);
    if (!(q->q = int8_model_new(q->m, mode, p->threshold, st))) goto fail;
    if (p->progress) p->progress(p->user, "int8 weights", 1, 1);
    smooth_model_free(inj);
    int8_stats_free(stats);
    free(s_inj); free(sa); free(sf); free(wa); free(wf); free(wo); free(sv);
    core_ok(st);
    return q;
fail:
    smooth_model_free(inj);
    int8_stats_free(stats);
    free(s_inj); free(sa); free(sf); free(wa); free(wf); free(wo); free(sv);
    kvant_int8_free(q);
    return NULL;
}

void kvant_int8_free(kvant_int8 *q) {
    if (!q) return;
    for (int i = 0; i < q->n_ctxs; i++) int8_ctx_free(q->ctxs[i]);
    free(q->ctxs);
    int8_model_free(q->q);
    smooth_model_free(q->folded);
    free(q->outl);
    free(q);
}

kvant_code kvant_seq_use_int8(kvant_seq *s, kvant_int8 *q, kvant_status *st) {
    if (s->m->cfg.dim != q->m->cfg.dim || s->m->tok != q->m->tok)
        return core_fail(st, KVANT_ERR_ARG, "the INT8 setup was made for another model");
    s->m = q->m;
    if (q->q->mode == INT8_OFF) return KVANT_OK;
    if (q->n_ctxs == q->cap_ctxs) {
        const int cap = q->cap_ctxs ? 2 * q->cap_ctxs : 4;
        int8_ctx **n = realloc(q->ctxs, sizeof *n * (size_t)cap);
        if (!n) return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        q->ctxs = n;
        q->cap_ctxs = cap;
    }
    int8_ctx *ctx = int8_ctx_new(q->q, s->work->max_T, st);
    if (!ctx) return st->code;
    q->ctxs[q->n_ctxs++] = ctx;
    s->work->mm_hook = int8_mm_hook;
    s->work->hook_user = ctx;
    return KVANT_OK;
}

void kvant_int8_get_stats(const kvant_int8 *q, kvant_int8_stats *o) {
    memset(o, 0, sizeof *o);
    o->matmuls = q->q->n_calls;
    o->outlier_cols = q->q->n_outlier_cols;
    if (q->q->mats)
        for (int i = 0; i < q->q->n_layers * 7; i++)
            o->int8_bytes += (size_t)(q->q->mats[i].N * q->q->mats[i].Kp) + sizeof(float) * (size_t)q->q->mats[i].N;
    o->alpha = q->alpha;
    o->scale_min = q->smin;
    o->scale_max = q->smax;
}

/* ---- outlier report -------------------------------------------------------------- */
kvant_code kvant_outliers(kvant_model *km, const char *text, size_t len, const kvant_outlier_params *p,
                          kvant_outlier_report *r, kvant_status *st) {
    memset(r, 0, sizeof *r);
    const model *m = p->transform ? p->transform->m : km->m;
    const model_config *c = &m->cfg;
    if (p->transform && p->transform->km != km) return core_fail(st, KVANT_ERR_ARG, "transform made for another model");
    if (model_require(m, MODEL_FEAT_EXPERTS, "outlier analysis", st)) return st->code;
    const int max_tokens = p->max_tokens > 0 ? p->max_tokens : 4096;
    int8_stats *s = int8_stats_new(c, p->threshold, max_tokens, st);
    if (!s) return st->code;
    kvant_code rc = run_text(km, m, text, len, max_tokens, p->ctx > 0 ? p->ctx : 512, int8_stats_tap, s, p->progress,
                             p->user, st);
    if (rc == KVANT_OK) {
        r->n_layers = c->n_layers;
        r->dim = c->dim;
        r->n_tokens = s->n_tokens;
        for (int i = 0; i < KVANT_N_SITES; i++) {
            const size_t n = (size_t)c->n_layers * (size_t)s->dims[i];
            r->site_name[i] = int8_site_name(i);
            r->site_dim[i] = s->dims[i];
            r->max_abs[i] = malloc(sizeof(float) * n);
            r->mean_abs[i] = malloc(sizeof(float) * n);
            r->share_over[i] = malloc(sizeof(float) * n);
            if (!r->max_abs[i] || !r->mean_abs[i] || !r->share_over[i]) continue;
            for (size_t k = 0; k < n; k++) {
                r->max_abs[i][k] = s->maxabs[i][k];
                r->mean_abs[i][k] = s->n_tokens ? (float)(s->sumabs[i][k] / (double)s->n_tokens) : 0.0f;
                r->share_over[i][k] = s->n_tokens ? (float)((double)s->n_over[i][k] / (double)s->n_tokens) : 0.0f;
            }
        }
        r->layer_share = malloc(sizeof(double) * (size_t)c->dim);
        r->token_share = malloc(sizeof(double) * (size_t)c->dim);
        r->is_outlier = malloc(sizeof(bool) * (size_t)c->dim);
        bool ok = r->layer_share && r->token_share && r->is_outlier;
        for (int i = 0; i < KVANT_N_SITES; i++) ok = ok && r->max_abs[i] && r->mean_abs[i] && r->share_over[i];
        if (!ok) {
            rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory");
            kvant_outlier_report_free(r);
        } else {
            for (int j = 0; j < c->dim; j++) {
                r->is_outlier[j] =
                    int8_stats_outlier(s, j, p->min_layers, p->min_tokens, &r->layer_share[j], &r->token_share[j]);
                r->n_outliers += r->is_outlier[j];
            }
        }
    }
    int8_stats_free(s);
    return rc;
}

void kvant_outlier_report_free(kvant_outlier_report *r) {
    for (int i = 0; i < KVANT_N_SITES; i++) {
        free(r->max_abs[i]);
        free(r->mean_abs[i]);
        free(r->share_over[i]);
    }
    free(r->layer_share);
    free(r->token_share);
    free(r->is_outlier);
    memset(r, 0, sizeof *r);
}

/* ---- a stored W8A8 file --------------------------------------------------------
 * The input GGUF's metadata and tensors, with each layer's seven matrices as
 * W8A8 rows (the int8_mat bytes: the scale, then the K int8 of the row) and,
 * after SmoothQuant, the folded norms (and wv rows / wo columns: they are in
 * the int8 matrices already).  Everything else is copied as it is. */
static const char *const k_mm_names[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

/* layer and matrix of "blk.L.NAME.weight", or false */
static bool layer_mat(const char *name, int n_layers, int *layer, int *mm, bool *norm_attn, bool *norm_ffn) {
    int l, off = 0;
    *mm = -1;
    *norm_attn = *norm_ffn = false;
    if (sscanf(name, "blk.%d.%n", &l, &off) != 1 || off == 0 || l < 0 || l >= n_layers) return false;
    const char *rest = name + off;
    *layer = l;
    for (int i = 0; i < 7; i++) {
        const size_t n = strlen(k_mm_names[i]);
        if (!strncmp(rest, k_mm_names[i], n) && !strcmp(rest + n, ".weight")) *mm = i;
    }
    *norm_attn = !strcmp(rest, "attn_norm.weight");
    *norm_ffn = !strcmp(rest, "ffn_norm.weight");
    return *mm >= 0 || *norm_attn || *norm_ffn;
}

/* layer l's matrix mm (model_mm_id order WQ..DOWN) */
static const model_mat *mm_of(const model *m, int l, int mm) {
    const model_layer *L = &m->layers[l];
    const model_mat *const all[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return all[mm];
}

/* t as LLM_INT8 rows from W's values (the int8 part quantized without the
 * outlier columns, which are 0 there) and its two companions */
static kvant_code add_llm_int8(gguf_writer *w, const gguf_tensor *t, const model_mat *W, const int32_t *cols, int n_o,
                               kvant_status *st) {
    const int64_t N = W->rows, K = W->cols;
    const size_t rb = kern_row_bytes(KT_LLM_INT8, K);
    const kern_type_traits *tt = kern_type_get(W->type);
    const size_t wrb = kern_row_bytes(W->type, K);
    uint8_t *rows = malloc(rb * (size_t)N), *skip = calloc((size_t)K, 1);
    uint16_t *ow = malloc(sizeof(uint16_t) * (size_t)N * (size_t)n_o);
    float *f = malloc(sizeof(float) * (size_t)K);
    kvant_code rc = KVANT_OK;
    if (!rows || !skip || !ow || !f || !tt || !tt->to_float || !rb) rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < n_o; i++) skip[cols[i]] = 1;
    for (int64_t n = 0; !rc && n < N; n++) {
        float s;
        tt->to_float((const uint8_t *)W->data + (size_t)n * wrb, f, K);
        kern_i8_quant_rows(f, 1, K, K, (int8_t *)rows + (size_t)n * rb + 4, &s, skip);
        memcpy(rows + (size_t)n * rb, &s, 4);
        for (int i = 0; i < n_o; i++) ow[(size_t)n * (size_t)n_o + (size_t)i] = kern_fp32_to_fp16(f[cols[i]]);
    }
    char cn[320], wn[320];
    snprintf(cn, sizeof cn, "%s.outlier_cols", t->name);
    snprintf(wn, sizeof wn, "%s.outliers", t->name);
    const int64_t ne_c[1] = {n_o}, ne_w[2] = {n_o, N};
    if (!rc) rc = gguf_writer_add_tensor(w, t->name, KT_LLM_INT8, 2, t->ne, rows, st);
    if (!rc) rc = gguf_writer_add_tensor(w, cn, KT_I32, 1, ne_c, cols, st);
    if (!rc) rc = gguf_writer_add_tensor(w, wn, KT_F16, 2, ne_w, ow, st);
    free(rows); free(skip); free(ow); free(f);
    return rc;
}

kvant_code kvant_int8_save(const kvant_int8 *q, const char *in_path, const char *out_path, kvant_status *st) {
    if (!q->q || q->q->mode == INT8_OFF)
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "no INT8 mode to save (W8A8 or LLM.int8)");
    const bool mixed = q->q->mode == INT8_MIXED;
    if (mixed && !q->outl)
        return core_fail(st, KVANT_ERR_ARG, "a stored LLM.int8 file needs a calibration text (its outlier columns "
                                             "are chosen there)");
    const model *m = q->m;
    const int L = m->cfg.n_layers;
    gguf_ctx *g = gguf_open(in_path, st);
    if (!g) return st->code;
    gguf_writer *w = gguf_writer_new();
    kvant_code rc = w ? KVANT_OK : core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    int *seen = calloc((size_t)L * 7, sizeof *seen);
    uint8_t *buf = NULL;
    size_t cap = 0;
    if (!rc && !seen) rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        if (!strcmp(key, "general.file_type") || !strcmp(key, "general.alignment") || !strncmp(key, "kvant.int8.", 11))
            continue;
        gguf_writer_add_value(w, key, gguf_kv_value(g, i));
    }
    for (int64_t i = 0; !rc && i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        int l = 0, mm = -1;
        bool na = false, nf = false;
        if (!layer_mat(t->name, L, &l, &mm, &na, &nf)) {
            rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, st);
            continue;
        }
        if (na || nf) { /* the folded norm (the same values without SmoothQuant) */
            const float *v = na ? m->layers[l].attn_norm : m->layers[l].ffn_norm;
            if (t->n_dims != 1 || t->ne[0] != m->cfg.dim || !v) {
                rc = core_fail(st, KVANT_ERR_FORMAT, "%s: not the model's norm of %d", t->name, m->cfg.dim);
                break;
            }
            rc = gguf_writer_add_tensor(w, t->name, KT_F32, 1, t->ne, v, st);
            continue;
        }
        const int8_mat *M = &q->q->mats[(size_t)l * 7 + (size_t)mm];
        if (t->n_dims != 2 || t->ne[0] != M->K || t->ne[1] != M->N) {
            rc = core_fail(st, KVANT_ERR_FORMAT, "%s: %lld x %lld does not match the model's matrix", t->name,
                           (long long)t->ne[1], (long long)t->ne[0]);
            break;
        }
        /* LLM.int8: the matrices reading the hidden state (wq, wk, wv, gate, up) keep its outlier dims in F16 */
        const bool outl = mixed && q->n_outl > 0 && mm != 3 && mm != 6;
        if (outl) {
            rc = add_llm_int8(w, t, mm_of(m, l, mm), q->outl, q->n_outl, st);
            seen[(size_t)l * 7 + (size_t)mm] = 1;
            continue;
        }
        const size_t rb = kern_row_bytes(KT_W8A8, M->K), need = rb * (size_t)M->N;
        if (!rb) {
            rc = core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: rows of %lld are too long for W8A8", t->name, (long long)M->K);
            break;
        }
        if (need > cap) {
            free(buf);
            cap = need;
            if (!(buf = malloc(cap))) {
                rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory");
                break;
            }
        }
        for (int64_t n = 0; n < M->N; n++) {
            memcpy(buf + (size_t)n * rb, &M->s[n], 4);
            memcpy(buf + (size_t)n * rb + 4, M->q + (size_t)n * (size_t)M->Kp, (size_t)M->K);
        }
        rc = gguf_writer_add_tensor(w, t->name, KT_W8A8, 2, t->ne, buf, st);
        seen[(size_t)l * 7 + (size_t)mm] = 1;
    }
    /* every layer's seven matrices must have been stored separately: a fused
     * tensor (attn_qkv, gate_up) would keep weights the norms no longer match */
    for (int i = 0; !rc && i < L * 7; i++)
        if (!seen[i])
            rc = core_fail(st, KVANT_ERR_UNSUPPORTED, "blk.%d.%s.weight not in %s (fused or missing): W8A8 files need "
                           "the seven matrices of every layer as separate tensors", i / 7, k_mm_names[i % 7], in_path);
    if (!rc) {
        gguf_writer_add_str(w, "kvant.int8.scheme", mixed ? "llm.int8" : "w8a8");
        if (mixed) {
            gguf_writer_add_f32(w, "kvant.int8.threshold", q->q->threshold);
            gguf_writer_add_arr(w, "kvant.int8.outlier_dims", GGUF_INT32, q->outl, (uint64_t)q->n_outl);
        }
        gguf_writer_add_bool(w, "kvant.int8.smoothquant", q->folded != NULL);
        if (q->folded) {
            gguf_writer_add_f32(w, "kvant.int8.alpha", q->alpha);
            gguf_writer_add_f32(w, "kvant.int8.scale_min", (float)q->smin);
            gguf_writer_add_f32(w, "kvant.int8.scale_max", (float)q->smax);
        }
        rc = gguf_writer_write_file(w, out_path, st);
    }
    free(buf);
    free(seen);
    gguf_writer_free(w);
    gguf_close(g);
    return rc;
}
