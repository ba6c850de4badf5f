/* loop.c - kvant_train: the training loop behind `kvant train`,
 * `kvant distill` and `kvant qat`.  Everything is allocated before the
 * first step (model + moments, activations, teacher, fake-quant buffers);
 * a step allocates nothing. */
#include <math.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kvant_train.h"
#include "train/convert.h"
#include "train/train.h"

kvant_train_params kvant_train_default(void) {
    return (kvant_train_params){.temp = 2.0f, .alpha = 0.5f, .steps = 1000, .batch = 8, .ctx = 128,
                                .eval_every = 100, .lr = 1e-3f, .min_lr = -1, .weight_decay = 0.1f, .clip = 1.0f,
                                .warmup = -1, .seed = 1337};
}

/* "dim=32,layers=4,heads=4,kv_heads=2,hidden=86" over defaults */
static kvant_code parse_config(const char *s, int vocab, int ctx, train_config *c, kvant_status *st) {
    *c = (train_config){.vocab = vocab, .ctx = ctx, .rope_base = 10000.0f, .norm_eps = 1e-5f};
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *kv = strtok(buf, ", "); kv; kv = strtok(NULL, ", ")) {
        char *eq = strchr(kv, '=');
        if (!eq) return core_fail(st, KVANT_ERR_ARG, "config: '%s' is not key=value", kv);
        *eq = 0;
        char *end;
        const double v = strtod(eq + 1, &end);
        if (*end || end == eq + 1) return core_fail(st, KVANT_ERR_ARG, "config: bad value for '%s'", kv);
        if (!strcmp(kv, "dim")) c->dim = (int)v;
        else if (!strcmp(kv, "hidden")) c->hidden = (int)v;
        else if (!strcmp(kv, "layers")) c->n_layers = (int)v;
        else if (!strcmp(kv, "heads")) c->n_heads = (int)v;
        else if (!strcmp(kv, "kv_heads")) c->n_kv_heads = (int)v;
        else if (!strcmp(kv, "head_dim")) c->head_dim = (int)v;
        else if (!strcmp(kv, "ctx")) c->ctx = (int)v;
        else if (!strcmp(kv, "rope_base")) c->rope_base = (float)v;
        else if (!strcmp(kv, "tied")) c->tied = v != 0;
        else return core_fail(st, KVANT_ERR_ARG, "config: unknown key '%s' (dim, hidden, layers, heads, kv_heads, "
                              "head_dim, ctx, rope_base, tied)", kv);
    }
    if (!c->n_kv_heads) c->n_kv_heads = c->n_heads;
    if (!c->head_dim && c->n_heads > 0) c->head_dim = c->dim / c->n_heads;
    if (!c->hidden && c->dim > 0) c->hidden = (8 * c->dim / 3 + 31) / 32 * 32;
    c->rope_dim = c->head_dim;
    return train_config_check(c, st);
}

static int32_t *tokenize(const model *m, const char *text, size_t len, int64_t *n, kvant_status *st) {
    if (len > (size_t)INT32_MAX / 4) { core_fail(st, KVANT_ERR_ARG, "tokenizer: text too long"); return NULL; }
    int cap = (int)(len + 16);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
    if (!t) { core_fail(st, KVANT_ERR_NOMEM, "out of memory"); return NULL; }
    int k = tok_encode(m->tok, text, len, true, false, t, cap);
    if (k < 0 && k != INT_MIN) { /* byte fallback can give more tokens than bytes: -(needed) */
        free(t);
        cap = -k;
        if (!(t = malloc(sizeof(int32_t) * (size_t)cap))) { core_fail(st, KVANT_ERR_NOMEM, "out of memory"); return NULL; }
        k = tok_encode(m->tok, text, len, true, false, t, cap);
    }
    if (k < 0) { free(t); core_fail(st, KVANT_ERR_NOMEM, "tokenizer: out of memory"); return NULL; }
    *n = k;
    return t;
}

typedef struct {
    const kvant_train_params *p;
    train_model *m;
    train_exec *ex;
    train_acts a;
    float *A;                   /* student activations */
    train_model *teacher;
    train_exec *tex;
    train_acts ta;
    float *TA;
    train_fq *fq;
    float *Wq;                  /* QAT: fake-quantized weights the forward sees */
    uint8_t *mask;
    int32_t *in, *tg;
    train_data data;
} run;

/* the weights the forward pass uses */
static const float *weights(run *r) {
    if (!r->fq) return r->m->p;
    train_fq_apply(r->ex, r->fq, r->m, r->Wq, r->mask);
    return r->Wq;
}

/* loss over the batch in r->in / r->tg; with grad, gradients into r->m->g */
static double step_loss(run *r, const float *P, bool grad) {
    const train_config *c = &r->m->cfg;
    train_loss_spec ls = {r->tg, NULL, 1, 1};
    if (r->teacher) {
        train_forward_f(r->tex, &r->teacher->cfg, &r->teacher->lay, &r->ta, r->teacher->p, r->TA, r->in, NULL, false);
        ls.teacher = r->TA + r->ta.logits;
        ls.alpha = r->p->alpha;
        ls.temp = r->p->temp;
    }
    const double loss = train_forward_f(r->ex, c, &r->m->lay, &r->a, P, r->A, r->in, &ls, grad);
    if (grad) {
        memset(r->m->g, 0, sizeof(float) * r->m->n);
        train_backward_f(r->ex, c, &r->m->lay, &r->a, P, r->m->g, r->A, r->in);
    }
    return loss;
}

/* mean next-token cross-entropy over non-overlapping validation windows */
static double val_loss(run *r, const float *P) {
    const int B = r->a.B, T = r->a.T;
    const int max_w = r->p->eval_windows > 0 ? r->p->eval_windows : 64;
    int64_t nw = (r->data.n_val - 1) / T;
    if (nw > max_w) nw = max_w;
    if (nw < 1) return NAN;
    double sum = 0;
    int64_t cnt = 0;
    train_model *keep_teacher = r->teacher;
    r->teacher = NULL; /* plain CE */
    for (int64_t w0 = 0; w0 < nw; w0 += B) {
        int rows = 0;
        for (int b = 0; b < B; b++) {
            const int64_t w = w0 + b;
            for (int t = 0; t < T; t++) {
                if (w < nw) {
                    r->in[b * T + t] = r->data.val[w * T + t];
                    r->tg[b * T + t] = r->data.val[w * T + t + 1];
                } else {
                    r->in[b * T + t] = 0;
                    r->tg[b * T + t] = -1;
                }
            }
            rows += w < nw;
        }
        sum += step_loss(r, P, false) * rows * T;
        cnt += (int64_t)rows * T;
    }
    r->teacher = keep_teacher;
    return sum / (double)cnt;
}

static void run_free(run *r) {
    train_model_free(r->m);
    train_exec_free(r->ex);
    free(r->A);
    train_model_free(r->teacher);
    train_exec_free(r->tex);
    free(r->TA);
    train_fq_free(r->fq);
    free(r->Wq);
    free(r->mask);
    free(r->in);
    free(r->tg);
    free(r->data.train);
    free(r->data.val);
}

/* ---- iterative pruning ------------------------------------------------------ */
static int cmp_abs(const void *a, const void *b) {
    const float x = fabsf(*(const float *)a), y = fabsf(*(const float *)b);
    return x < y ? -1 : x > y;
}
/* masks the `frac` smallest |w| of every row of the layer matrices (masks
 * only grow: a pruned weight is 0 and sorts first); zeroes them and their
 * AdamW moments; returns the sparsity reached over those matrices */
static double prune_round(run *r, double frac, float *row_scratch) {
    train_model *m = r->m;
    train_mat t;
    size_t n = 0, z = 0;
    for (int i = 0; train_model_mat(m, i, &t); i++) {
        if (t.layer < 0) continue;
        const int k = (int)(frac * t.cols + 0.5);
        for (int row = 0; row < t.rows; row++) {
            float *w = m->p + t.off + (size_t)row * t.cols;
            uint8_t *mk = r->mask + t.off + (size_t)row * t.cols;
            memcpy(row_scratch, w, sizeof(float) * t.cols);
            qsort(row_scratch, (size_t)t.cols, sizeof(float), cmp_abs);
            const float thr = k > 0 ? fabsf(row_scratch[k - 1]) : -1.0f;
            int removed = 0;
            for (int c = 0; c < t.cols; c++) /* exactly k: ties at the threshold go first-come */
                if (!mk[c] || (fabsf(w[c]) <= thr && removed < k)) {
                    mk[c] = 0;
                    removed++;
                }
            for (int c = 0; c < t.cols; c++)
                if (!mk[c]) {
                    const size_t o = t.off + (size_t)row * t.cols + c;
                    m->p[o] = m->m[o] = m->v[o] = 0;
                    z++;
                }
            n += (size_t)t.cols;
        }
    }
    return n ? (double)z / (double)n : 0;
}

/* QAT export: the PTQ tool's metadata and types, with the held scales */
static void qat_meta(void *user, gguf_writer *w) {
    const run *r = user;
    const ptq_params pp = {.spec = r->fq->spec, .fallback = PTQ_FALLBACK_CHANNEL};
    ptq_add_metadata(w, &pp, NULL);
    gguf_writer_add_u32(w, "kvant.qat.steps", (uint32_t)r->m->step);
}
static kvant_code qat_tensor(void *user, gguf_writer *w, const char *name, const float *data, int64_t cols,
                             int64_t rows, kvant_status *st) {
    const run *r = user;
    train_mat t;
    for (int i = 0; train_model_mat(r->m, i, &t); i++)
        if (data == r->Wq + t.off) return train_fq_write(r->fq, r->m, i, w, name, st);
    return core_fail(st, KVANT_ERR_ARG, "QAT export: '%s' is not a matrix of the model", name);
}

kvant_code kvant_train(const kvant_train_params *p, kvant_train_result *res, kvant_status *st) {
    memset(res, 0, sizeof *res);
    if (!p->text_path || !p->out_path) return core_fail(st, KVANT_ERR_ARG, "a text file and an output path are needed");
    if (!p->model == !p->config) return core_fail(st, KVANT_ERR_ARG, "give either a model or a config");
    if (p->config && !p->tokenizer_from)
        return core_fail(st, KVANT_ERR_ARG, "a config needs a model to take the tokenizer from");
    if (p->batch < 1 || p->ctx < 2 || p->steps < 0) return core_fail(st, KVANT_ERR_ARG, "bad batch, ctx or steps");
    const int nth = p->n_threads > 0 ? p->n_threads : core_cpu_count();
    run r = {.p = p};
    kvant_code rc = KVANT_OK;
    model *src = NULL, *tmodel = NULL;
    core_pool *pool = NULL;
    char *text = NULL;
    FILE *csv = NULL;
    const double t_start = core_time_ms();

    /* the model: a GGUF, or a config with the tokenizer of another model */
    src = model_open(p->model ? p->model : p->tokenizer_from, NULL, 1, st);
    if (!src) return st->code;
    if (p->model) {
        r.m = train_model_from(src, st);
    } else {
        train_config c;
        if ((rc = parse_config(p->config, src->cfg.vocab_size, p->ctx, &c, st))) goto done;
        r.m = train_model_new(&c, st);
        if (r.m) train_model_init(r.m, p->seed);
    }
    if (!r.m) { rc = st->code; goto done; }
    if (p->resume) {
        model *ck = model_open(p->resume, NULL, 1, st);
        if (!ck) { rc = st->code; goto done; }
        train_model *tm = train_model_from(ck, st);
        model_close(ck);
        if (!tm) { rc = st->code; goto done; }
        if (tm->n != r.m->n) {
            train_model_free(tm);
            rc = core_fail(st, KVANT_ERR_ARG, "%s does not have the model's shape", p->resume);
            goto done;
        }
        memcpy(r.m->p, tm->p, sizeof(float) * tm->n);
        train_model_free(tm);
        char sp[4096];
        snprintf(sp, sizeof sp, "%s.state", p->resume);
        if ((rc = train_state_load(r.m, sp, &r.data.rng, st))) goto done;
    }
    res->n_params = (int64_t)r.m->n;
    const int B = p->batch, T = p->ctx, N = B * T;
    if (!(pool = core_pool_new(nth))) { rc = core_fail(st, KVANT_ERR_NOMEM, "cannot start threads"); goto done; }
    if (!(r.ex = train_exec_new(&r.m->cfg, N, pool, st))) { rc = st->code; goto done; }
    train_acts_make(&r.m->cfg, B, T, nth, &r.a);
    r.A = malloc(sizeof(float) * r.a.n);
    r.in = malloc(sizeof(int32_t) * N);
    r.tg = malloc(sizeof(int32_t) * N);
    if (!r.A || !r.in || !r.tg) { rc = core_fail(st, KVANT_ERR_NOMEM, "cannot allocate activations"); goto done; }

    if (p->teacher) {
        if (!(tmodel = model_open(p->teacher, NULL, 1, st))) { rc = st->code; goto done; }
        if (tmodel->cfg.vocab_size != r.m->cfg.vocab) {
            rc = core_fail(st, KVANT_ERR_ARG, "teacher vocabulary %d != student vocabulary %d", tmodel->cfg.vocab_size,
                           r.m->cfg.vocab);
            goto done;
        }
        if (!(r.teacher = train_model_from(tmodel, st))) { rc = st->code; goto done; }
        if (!(r.tex = train_exec_new(&r.teacher->cfg, N, pool, st))) { rc = st->code; goto done; }
        train_acts_make(&r.teacher->cfg, B, T, nth, &r.ta);
        if (!(r.TA = malloc(sizeof(float) * r.ta.n))) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); goto done; }
    }
    if (p->prune_sparsity > 0 && p->qat_bits)
        { rc = core_fail(st, KVANT_ERR_ARG, "pruning and QAT at once is not supported"); goto done; }
    if (p->prune_sparsity > 0) {
        if (p->prune_sparsity >= 1 || p->prune_rounds < 1)
            { rc = core_fail(st, KVANT_ERR_ARG, "prune sparsity must be in (0, 1) and rounds >= 1"); goto done; }
        if (!(r.mask = malloc(r.m->n))) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); goto done; }
        memset(r.mask, 1, r.m->n);
    }
    if (p->qat_bits) {
        const ptq_spec spec = {p->qat_zeropoint ? PTQ_ZEROPOINT : PTQ_ABSMAX, p->qat_bits,
                               p->qat_group > 0 ? PTQ_GROUP : PTQ_CHANNEL, p->qat_group > 0 ? p->qat_group : 0,
                               p->qat_clip_mse ? PTQ_CLIP_MSE : PTQ_CLIP_NONE};
        if (!(r.fq = train_fq_new(r.m, &spec, st))) { rc = st->code; goto done; }
        if (p->resume) { /* the interrupted run's held scales, not new ones from the shadow weights */
            char sp[4096];
            snprintf(sp, sizeof sp, "%s.state", p->resume);
            if ((rc = train_state_load_fq(r.fq, sp, st))) goto done;
        }
        r.Wq = malloc(sizeof(float) * r.m->n);
        r.mask = malloc(r.m->n);
        if (!r.Wq || !r.mask) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); goto done; }
    }

    /* data */
    size_t len;
    if (!(text = core_read_file(p->text_path, &len, st))) { rc = st->code; goto done; }
    const size_t split = train_split_offset(text, len);
    if (!(r.data.train = tokenize(src, text, split, &r.data.n_train, st))) { rc = st->code; goto done; }
    if (!(r.data.val = tokenize(src, text + split, len - split, &r.data.n_val, st))) { rc = st->code; goto done; }
    res->n_train_tokens = r.data.n_train;
    res->n_val_tokens = r.data.n_val;
    if (r.data.n_train <= T + 1) { rc = core_fail(st, KVANT_ERR_ARG, "text too short for windows of %d tokens", T); goto done; }
    if (!p->resume) r.data.rng = p->seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < r.m->n; i++) r.m->g[i] = 0;

    if (p->log_csv && !(csv = fopen(p->log_csv, "w"))) { rc = core_fail(st, KVANT_ERR_IO, "cannot write %s", p->log_csv); goto done; }
    if (csv) fprintf(csv, "step,loss,val_loss,lr\n");

    /* forward-only speed: the same batch size and threads, plain CE, timed
     * now and every 10 steps on the step's batch; the ratio uses the
     * fastest of each (the machine may be shared: minima are the least
     * disturbed) */
    double fwd_min = INFINITY, step_min = INFINITY;
    {
        train_data tmp = r.data; /* the timing batch; a fresh run then skips it, a resumed one does not */
        train_data_batch(&tmp, B, T, r.in, r.tg);
        if (!p->resume) r.data.rng = tmp.rng;
        train_model *keep = r.teacher;
        r.teacher = NULL;
        step_loss(&r, r.m->p, false); /* warm-up */
        for (int i = 0; i < 3; i++) {
            const double t0 = core_time_ms();
            step_loss(&r, r.m->p, false);
            const double dt = core_time_ms() - t0;
            fwd_min = dt < fwd_min ? dt : fwd_min;
        }
        r.teacher = keep;
    }

    res->init_val_loss = val_loss(&r, weights(&r));
    if (csv) fprintf(csv, "%lld,,%.6f,\n", (long long)r.m->step, res->init_val_loss);
    train_opt o = train_opt_default();
    o.lr = p->lr;
    o.min_lr = p->min_lr >= 0 ? p->min_lr : p->lr / 10;
    o.warmup = p->warmup >= 0 ? p->warmup : p->steps / 20;
    o.total_steps = p->steps;
    o.weight_decay = p->weight_decay;
    o.clip = p->clip;
    double step_ms_sum = 0, last_sum = 0;
    int timed = 0, last_n = 0;
    const int64_t first_step = r.m->step;
    const int64_t stop = p->stop_at > 0 && p->stop_at < p->steps ? p->stop_at : p->steps;
    float *row_scratch = NULL;
    if (p->prune_sparsity > 0) {
        int maxc = r.m->cfg.dim > r.m->cfg.hidden ? r.m->cfg.dim : r.m->cfg.hidden;
        maxc = maxc > r.m->cfg.n_heads * r.m->cfg.head_dim ? maxc : r.m->cfg.n_heads * r.m->cfg.head_dim;
        if (!(row_scratch = malloc(sizeof(float) * (size_t)maxc))) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); goto done; }
    }
    const int64_t round_len = p->prune_sparsity > 0 ? (p->steps + p->prune_rounds - 1) / p->prune_rounds : 0;
    while (r.m->step < stop) {
        if (round_len && (r.m->step % round_len == 0 || r.m->step == first_step)) { /* next pruning round (all rounds up to now on resume) */
            const int k = (int)(r.m->step / round_len) + 1;
            const double f = p->prune_sparsity * (1 - pow(1 - (double)k / p->prune_rounds, 3));
            for (int j = 1; j <= k; j++)
                res->sparsity = prune_round(&r, p->prune_sparsity * (1 - pow(1 - (double)j / p->prune_rounds, 3)), row_scratch);
            core_log(KVANT_LOG_INFO, "pruning round %d/%d: %.1f%% of each row of the layer matrices masked (%.1f%% reached)",
                     k, p->prune_rounds, 100 * f, 100 * res->sparsity);
        }
        const double t0 = core_time_ms();
        train_data_batch(&r.data, B, T, r.in, r.tg);
        const float *P = weights(&r);
        const double loss = step_loss(&r, P, true);
        const float lr = train_lr(&o, r.m->step);
        const float gn = train_adamw(r.ex, r.m, &o, lr, r.mask);
        const double dt = core_time_ms() - t0;
        step_ms_sum += dt;
        step_min = dt < step_min ? dt : step_min;
        if (r.m->step % 10 == 0) {
            train_model *keep = r.teacher;
            r.teacher = NULL;
            const double t1 = core_time_ms();
            step_loss(&r, r.m->p, false);
            const double f = core_time_ms() - t1;
            fwd_min = f < fwd_min ? f : fwd_min;
            r.teacher = keep;
        }
        timed++;
        if (r.m->step > p->steps - 10) { last_sum += loss; last_n++; }
        double vl = NAN;
        if ((p->eval_every > 0 && r.m->step % p->eval_every == 0) || r.m->step == stop) vl = val_loss(&r, weights(&r));
        if (csv) {
            fprintf(csv, "%lld,%.6f,", (long long)r.m->step, loss);
            if (!isnan(vl)) fprintf(csv, "%.6f", vl);
            fprintf(csv, ",%.3e\n", lr);
        }
        if (p->progress) {
            const double per = step_ms_sum / timed;
            kvant_train_progress pr = {(int)r.m->step, p->steps, loss, vl, lr, gn, N / (per / 1000),
                                       per * (stop - r.m->step) / 1000};
            p->progress(p->user, &pr);
        }
    }
    (void)first_step;
    res->fwd_ms = fwd_min;
    res->fwd_tok_s = N / (fwd_min / 1000);
    if (timed) {
        res->step_ms = step_min;
        res->train_tok_s = N / (step_ms_sum / timed / 1000);
    }
    res->last_loss = last_n ? last_sum / last_n : NAN;
    free(row_scratch);
    const float *Pfinal = weights(&r);
    res->val_loss = val_loss(&r, Pfinal);
    res->val_ppl = exp(res->val_loss);

    /* checkpoint: the weights (QAT: the quantized values), and the optimizer state */
    const char *slash = strrchr(p->out_path, '/');
    train_save_hook hook = {.user = &r, .meta = r.fq ? qat_meta : NULL, .tensor = r.fq ? qat_tensor : NULL};
    if ((rc = train_model_save(r.m, Pfinal, src, slash ? slash + 1 : p->out_path, p->out_path, &hook, st))) goto done;
    {
        char sp[4096];
        snprintf(sp, sizeof sp, "%s.state", p->out_path);
        if (p->qat_bits) { /* the shadow weights too, to resume QAT */
            snprintf(sp, sizeof sp, "%s.shadow.gguf", p->out_path);
            if ((rc = train_model_save(r.m, NULL, src, "qat shadow weights", sp, NULL, st))) goto done;
            snprintf(sp, sizeof sp, "%s.shadow.gguf.state", p->out_path);
        }
        if ((rc = train_state_save(r.m, sp, r.data.rng, r.fq, st))) goto done;
    }
    res->seconds = (core_time_ms() - t_start) / 1000;
done:
    if (csv) fclose(csv);
    free(text);
    run_free(&r);
    core_pool_free(pool);
    model_close(tmodel);
    model_close(src);
    if (!rc) core_ok(st);
    return rc;
}
