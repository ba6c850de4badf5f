/* tmpl.h - the ops and the model's forward/backward, written once for a
 * real type R.  Included by train/ops.c with R = float, S = f, TRAIN_FAST = 1
 * (matmuls through kern_matmul's AVX2 tiles, via transposes in the
 * backward pass) and with R = double, S = d, TRAIN_FAST = 0 (plain loops:
 * the spec the gradient checks test).
 *
 * Letters as in train.h.  Every backward function ADDS into its outputs. */

#define TCAT_(a, b) a##_##b
#define TCAT(a, b) TCAT_(a, b)
#define FN(name) TCAT(name, S)

static void FN(run)(const train_exec *ex, core_task_fn fn, void *ctx) {
    if (ex && ex->pool) core_pool_run(ex->pool, fn, ctx);
    else fn(ctx, 0, 1);
}

/* ---- linear: y (N, O) = x (N, I) . w (O, I)^T ------------------------------ */
#if TRAIN_FAST
void FN(trk_matmul)(const train_exec *ex, R *y, const R *x, const R *w, int N, int O, int I) {
    kern_matmul(ex->pool, ex->mm, w, KT_F32, x, y, N, O, I);
}
#else
typedef struct { R *y; const R *x, *w; int N, O, I; } FN(mm_job);
static void FN(mm_task)(void *ctx, int ith, int nth) {
    const FN(mm_job) *j = ctx;
    int64_t lo, hi;
    core_split(j->N, ith, nth, &lo, &hi);
    for (int64_t n = lo; n < hi; n++)
        for (int o = 0; o < j->O; o++) {
            R s = 0;
            for (int i = 0; i < j->I; i++) s += j->x[n * j->I + i] * j->w[(size_t)o * j->I + i];
            j->y[n * j->O + o] = s;
        }
}
void FN(trk_matmul)(const train_exec *ex, R *y, const R *x, const R *w, int N, int O, int I) {
    FN(mm_job) j = {y, x, w, N, O, I};
    FN(run)(ex, FN(mm_task), &j);
}
#endif

/* dx (N, I) += dy (N, O) . w (O, I);   dw (O, I) += dy^T (O, N) . x (N, I)
 * (dx or dw NULL: not wanted) */
#if TRAIN_FAST
/* dst (cols, rows) = src (rows, cols)^T, or dst += src (add: rows = 1, cols = n); threads split src rows */
typedef struct { R *dst; const R *src; int rows, cols; bool add; } FN(tr_job);
static void FN(tr_task)(void *ctx, int ith, int nth) {
    const FN(tr_job) *j = ctx;
    enum { BS = 32 };
    int64_t lo, hi;
    if (j->add) {
        core_split(j->cols, ith, nth, &lo, &hi);
        for (int64_t i = lo; i < hi; i++) j->dst[i] += j->src[i];
        return;
    }
    core_split((j->rows + BS - 1) / BS, ith, nth, &lo, &hi);
    for (int r0 = (int)lo * BS; r0 < hi * BS && r0 < j->rows; r0 += BS)
        for (int c0 = 0; c0 < j->cols; c0 += BS)
            for (int r = r0; r < r0 + BS && r < j->rows; r++)
                for (int c = c0; c < c0 + BS && c < j->cols; c++)
                    j->dst[(size_t)c * j->rows + r] = j->src[(size_t)r * j->cols + c];
}
static void FN(transpose)(const train_exec *ex, R *dst, const R *src, int rows, int cols) {
    FN(tr_job) j = {dst, src, rows, cols, false};
    if ((double)rows * cols < KERN_MT_MIN_WORK) FN(tr_task)(&j, 0, 1);
    else FN(run)(ex, FN(tr_task), &j);
}
static void FN(add_to)(const train_exec *ex, R *dst, const R *src, size_t n) {
    FN(tr_job) j = {dst, src, 1, (int)n, true};
    if ((double)n < KERN_MT_MIN_WORK) FN(tr_task)(&j, 0, 1);
    else FN(run)(ex, FN(tr_task), &j);
}
void FN(trk_matmul_bwd)(const train_exec *ex, R *dx, R *dw, const R *dy, const R *x, const R *w, int N, int O, int I) {
    R *t1 = ex->t1, *t2 = ex->t2, *tmp = ex->tmp;
    if (dx) { /* dx = dy . w  =  dy (N rows of O) against w^T (I rows of O) */
        FN(transpose)(ex, t1, w, O, I);
        kern_matmul(ex->pool, ex->mm, t1, KT_F32, dy, tmp, N, I, O);
        FN(add_to)(ex, dx, tmp, (size_t)N * I);
    }
    if (dw) { /* dw = dy^T . x  =  dy^T (O rows of N) against x^T (I rows of N) */
        FN(transpose)(ex, t1, x, N, I);
        FN(transpose)(ex, t2, dy, N, O);
        kern_matmul(ex->pool, ex->mm, t1, KT_F32, t2, tmp, O, I, N);
        FN(add_to)(ex, dw, tmp, (size_t)O * I);
    }
}
#else
typedef struct { R *dx, *dw; const R *dy, *x, *w; int N, O, I; } FN(mmb_job);
static void FN(mmb_task)(void *ctx, int ith, int nth) {
    const FN(mmb_job) *j = ctx;
    const int N = j->N, O = j->O, I = j->I;
    int64_t lo, hi;
    if (j->dx) {
        core_split(N, ith, nth, &lo, &hi);
        for (int64_t n = lo; n < hi; n++)
            for (int o = 0; o < O; o++) {
                const R a = j->dy[n * O + o];
                for (int i = 0; i < I; i++) j->dx[n * I + i] += a * j->w[(size_t)o * I + i];
            }
    }
    if (j->dw) {
        core_split(O, ith, nth, &lo, &hi);
        for (int64_t o = lo; o < hi; o++)
            for (int n = 0; n < N; n++) {
                const R a = j->dy[(size_t)n * O + o];
                for (int i = 0; i < I; i++) j->dw[o * I + i] += a * j->x[(size_t)n * I + i];
            }
    }
}
void FN(trk_matmul_bwd)(const train_exec *ex, R *dx, R *dw, const R *dy, const R *x, const R *w, int N, int O, int I) {
    FN(mmb_job) j = {dx, dw, dy, x, w, N, O, I};
    FN(run)(ex, FN(mmb_task), &j);
}
#endif

/* ---- RMSNorm: y (N, C) = x / sqrt(mean(x^2) + eps) * w;  rs (N) = 1/rms --- */
void FN(trk_rmsnorm)(R *y, R *rs, const R *x, const R *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        const R *xr = x + (size_t)n * C;
        R ss = 0;
        for (int i = 0; i < C; i++) ss += xr[i] * xr[i];
        const R r = (R)1 / (R)sqrt((double)(ss / (R)C + (R)eps));
        rs[n] = r;
        for (int i = 0; i < C; i++) y[(size_t)n * C + i] = w[i] * (r * xr[i]);
    }
}
/* dw += sum_n dy x r;  dx += r (dy w) - x r^3 mean(dy w x) */
void FN(trk_rmsnorm_bwd)(R *dx, R *dw, const R *dy, const R *x, const R *rs, const R *w, int N, int C) {
    for (int n = 0; n < N; n++) {
        const R *xr = x + (size_t)n * C, *dyr = dy + (size_t)n * C;
        const R r = rs[n];
        R dot = 0;
        for (int i = 0; i < C; i++) {
            dot += dyr[i] * w[i] * xr[i];
            dw[i] += dyr[i] * xr[i] * r;
        }
        const R c = dot * r * r * r / (R)C;
        for (int i = 0; i < C; i++) dx[(size_t)n * C + i] += r * dyr[i] * w[i] - c * xr[i];
    }
}

/* ---- RoPE -------------------------------------------------------------------
 * cs, sn (T, rope_dim/2): cos/sin of t * base^(-2i/rope_dim).  trk_rope
 * rotates x (B*T, nh*D) in place (position = row mod T); inverse rotates
 * back, which is also the backward pass (a rotation's transpose). */
void FN(trk_rope_tables)(R *cs, R *sn, int T, int rope_dim, double base) {
    const int half = rope_dim / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const double a = (double)t / pow(base, (double)(2 * i) / (double)rope_dim);
            cs[(size_t)t * half + i] = (R)cos(a);
            sn[(size_t)t * half + i] = (R)sin(a);
        }
}
void FN(trk_rope)(R *x, const R *cs, const R *sn, int B, int T, int nh, int D, int rope_dim, bool neox,
                  bool inverse) {
    const int half = rope_dim / 2;
    for (int n = 0; n < B * T; n++) {
        const R *c = cs + (size_t)(n % T) * half, *s = sn + (size_t)(n % T) * half;
        for (int h = 0; h < nh; h++) {
            R *xh = x + ((size_t)n * nh + h) * D;
            for (int i = 0; i < half; i++) {
                const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                const R x0 = xh[i0], x1 = xh[i1], si = inverse ? -s[i] : s[i];
                xh[i0] = x0 * c[i] - x1 * si;
                xh[i1] = x0 * si + x1 * c[i];
            }
        }
    }
}

/* ---- causal attention with GQA ----------------------------------------------
 * q (B*T, H*D), k, v (B*T, Hkv*D); head h reads KV head h / (H/Hkv).
 * att (B, H, T, T): row t holds softmax_s<=t(q_t . k_s / sqrt(D)).
 * out (B*T, H*D) = att . v */
typedef struct {
    R *out, *att, *dq, *dk, *dv, *dp;
    const R *q, *k, *v, *dout;
    int B, T, H, Hkv, D;
} FN(att_job);
static void FN(att_task)(void *ctx, int ith, int nth) {
    const FN(att_job) *j = ctx;
    const int T = j->T, H = j->H, Hkv = j->Hkv, D = j->D, QD = H * D, KVD = Hkv * D;
    const R scale = (R)1 / (R)sqrt((double)D);
    int64_t lo, hi;
    core_split((int64_t)j->B * H, ith, nth, &lo, &hi);
    for (int64_t bh = lo; bh < hi; bh++) {
        const int b = (int)(bh / H), h = (int)(bh % H), hk = h / (H / Hkv);
        for (int t = 0; t < T; t++) {
            const R *qt = j->q + ((size_t)b * T + t) * QD + (size_t)h * D;
            R *a = j->att + (((size_t)b * H + h) * T + t) * T;
            R mx = -INFINITY;
            for (int s = 0; s <= t; s++) {
                const R *ks = j->k + ((size_t)b * T + s) * KVD + (size_t)hk * D;
                R d = 0;
                for (int i = 0; i < D; i++) d += qt[i] * ks[i];
                a[s] = d * scale;
                if (a[s] > mx) mx = a[s];
            }
            R sum = 0;
            for (int s = 0; s <= t; s++) {
                a[s] = REXP(a[s] - mx);
                sum += a[s];
            }
            const R inv = (R)1 / sum;
            for (int s = 0; s <= t; s++) a[s] *= inv;
            for (int s = t + 1; s < T; s++) a[s] = 0;
            R *o = j->out + ((size_t)b * T + t) * QD + (size_t)h * D;
            for (int i = 0; i < D; i++) o[i] = 0;
            for (int s = 0; s <= t; s++) {
                const R *vs = j->v + ((size_t)b * T + s) * KVD + (size_t)hk * D;
                for (int i = 0; i < D; i++) o[i] += a[s] * vs[i];
            }
        }
    }
}
void FN(trk_attention)(const train_exec *ex, R *out, R *att, const R *q, const R *k, const R *v, int B, int T, int H,
                       int Hkv, int D) {
    FN(att_job) j = {.out = out, .att = att, .q = q, .k = k, .v = v, .B = B, .T = T, .H = H, .Hkv = Hkv, .D = D};
    FN(run)(ex, FN(att_task), &j);
}
/* threads own (b, KV head) pairs, so dk/dv rows are written by one thread;
 * dp: (nth, T) scratch */
static void FN(attb_task)(void *ctx, int ith, int nth) {
    const FN(att_job) *j = ctx;
    const int T = j->T, H = j->H, Hkv = j->Hkv, D = j->D, QD = H * D, KVD = Hkv * D, G = H / Hkv;
    const R scale = (R)1 / (R)sqrt((double)D);
    R *dp = j->dp + (size_t)ith * T;
    int64_t lo, hi;
    core_split((int64_t)j->B * Hkv, ith, nth, &lo, &hi);
    for (int64_t bk = lo; bk < hi; bk++) {
        const int b = (int)(bk / Hkv), hk = (int)(bk % Hkv);
        for (int h = hk * G; h < (hk + 1) * G; h++)
            for (int t = 0; t < T; t++) {
                const size_t qo = ((size_t)b * T + t) * QD + (size_t)h * D;
                const R *a = j->att + (((size_t)b * H + h) * T + t) * T, *dot = j->dout + qo;
                R sum = 0;
                for (int s = 0; s <= t; s++) {
                    const size_t ko = ((size_t)b * T + s) * KVD + (size_t)hk * D;
                    R d = 0;
                    for (int i = 0; i < D; i++) {
                        d += dot[i] * j->v[ko + i];
                        j->dv[ko + i] += a[s] * dot[i];
                    }
                    dp[s] = d;
                    sum += a[s] * d;
                }
                for (int s = 0; s <= t; s++) {
                    const size_t ko = ((size_t)b * T + s) * KVD + (size_t)hk * D;
                    const R ds = a[s] * (dp[s] - sum) * scale;
                    for (int i = 0; i < D; i++) {
                        j->dq[qo + i] += ds * j->k[ko + i];
                        j->dk[ko + i] += ds * j->q[qo + i];
                    }
                }
            }
    }
}
void FN(trk_attention_bwd)(const train_exec *ex, R *dq, R *dk, R *dv, R *dp, const R *dout, const R *att, const R *q,
                           const R *k, const R *v, int B, int T, int H, int Hkv, int D) {
    FN(att_job) j = {.att = (R *)att, .dq = dq, .dk = dk, .dv = dv, .dp = dp, .q = q, .k = k, .v = v,
                     .dout = dout, .B = B, .T = T, .H = H, .Hkv = Hkv, .D = D};
    FN(run)(ex, FN(attb_task), &j);
}

/* ---- SwiGLU: h = silu(g) * u ------------------------------------------------ */
void FN(trk_swiglu)(R *h, const R *g, const R *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = g[i] / ((R)1 + REXP(-g[i])) * u[i];
}
void FN(trk_swiglu_bwd)(R *dg, R *du, const R *dh, const R *g, const R *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const R sg = (R)1 / ((R)1 + REXP(-g[i])), silu = g[i] * sg;
        du[i] += dh[i] * silu;
        dg[i] += dh[i] * u[i] * sg * ((R)1 + g[i] * ((R)1 - sg));
    }
}

/* ---- loss over logits (N, V); see train_loss_spec ----------------------------- */
typedef struct {
    R *z;
    const train_loss_spec *ls;
    int N, V;
    bool grad;
    double inv_count;
    double part[64];
} FN(loss_job);
static void FN(loss_task)(void *ctx, int ith, int nth) {
    FN(loss_job) *j = ctx;
    const int V = j->V;
    const double a = j->ls->teacher ? j->ls->alpha : 1.0, Tm = j->ls->temp > 0 ? j->ls->temp : 1.0;
    int64_t lo, hi;
    core_split(j->N, ith, nth, &lo, &hi);
    double acc = 0;
    for (int64_t n = lo; n < hi; n++) {
        R *z = j->z + n * V;
        const int y = j->ls->targets[n];
        if (y < 0) {
            if (j->grad)
                for (int v = 0; v < V; v++) z[v] = 0;
            continue;
        }
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        for (int v = 0; v < V; v++) sum += REXP((R)(z[v] - mx));
        const double lse = mx + log(sum);
        acc += a * (lse - (double)z[y]);
        if (!j->ls->teacher) {
            if (j->grad) {
                for (int v = 0; v < V; v++) z[v] = (R)(a * REXP((R)(z[v] - lse)) * j->inv_count);
                z[y] -= (R)(a * j->inv_count);
            }
            continue;
        }
        /* distillation: KL(pt || ps) at temperature Tm */
        const R *zt = (const R *)j->ls->teacher + n * V;
        double mt = -INFINITY, ms = -INFINITY, st = 0, ss = 0;
        for (int v = 0; v < V; v++) {
            mt = zt[v] / Tm > mt ? zt[v] / Tm : mt;
            ms = z[v] / Tm > ms ? z[v] / Tm : ms;
        }
        for (int v = 0; v < V; v++) {
            st += REXP((R)(zt[v] / Tm - mt));
            ss += REXP((R)(z[v] / Tm - ms));
        }
        const double lt = mt + log(st), lss = ms + log(ss);
        double kl = 0;
        for (int v = 0; v < V; v++) {
            const double lpt = zt[v] / Tm - lt, lps = z[v] / Tm - lss, pt = REXP((R)lpt);
            kl += pt * (lpt - lps);
        }
        acc += (1 - a) * Tm * Tm * kl;
        if (j->grad) {
            for (int v = 0; v < V; v++) {
                const double p = REXP((R)(z[v] - lse)), pt = REXP((R)(zt[v] / Tm - lt)), ps = REXP((R)(z[v] / Tm - lss));
                z[v] = (R)((a * (p - (v == y)) + (1 - a) * Tm * (ps - pt)) * j->inv_count);
            }
        }
    }
    j->part[ith] = acc;
}
double FN(trk_loss)(const train_exec *ex, R *logits, const train_loss_spec *ls, int N, int V, bool grad) {
    int count = 0;
    for (int n = 0; n < N; n++) count += ls->targets[n] >= 0;
    if (!count) return 0;
    FN(loss_job) j = {.z = logits, .ls = ls, .N = N, .V = V, .grad = grad, .inv_count = 1.0 / count};
    const int nth = ex && ex->pool ? core_pool_size(ex->pool) : 1;
    CORE_ASSERT(nth <= 64);
    FN(run)(ex, FN(loss_task), &j);
    double s = 0;
    for (int i = 0; i < nth; i++) s += j.part[i];
    return s / count;
}

/* ---- the model ---------------------------------------------------------------- */
double FN(train_forward)(const train_exec *ex, const train_config *c, const train_layout *lay, const train_acts *a,
                         const R *P, R *A, const int32_t *inputs, const train_loss_spec *ls, bool grad) {
    const int B = a->B, T = a->T, N = B * T, C = c->dim, F = c->hidden, D = c->head_dim;
    const int H = c->n_heads, Hkv = c->n_kv_heads, QD = H * D, KVD = Hkv * D, V = c->vocab;
    const size_t NC = (size_t)N * C;
    FN(trk_rope_tables)(A + a->cs, A + a->sn, T, c->rope_dim, c->rope_base);
    R *x0 = A + a->x;
    for (int n = 0; n < N; n++) /* embedding */
        memcpy(x0 + (size_t)n * C, P + lay->tok_embd + (size_t)inputs[n] * C, sizeof(R) * C);
    for (int l = 0; l < c->n_layers; l++) {
        R *X = A + a->x + l * NC, *Xn = X + NC, *xmid = A + a->xmid + l * NC;
        R *xn1 = A + a->xn1 + l * NC, *xn2 = A + a->xn2 + l * NC;
        R *q = A + a->q + (size_t)l * N * QD, *k = A + a->k + (size_t)l * N * KVD, *v = A + a->v + (size_t)l * N * KVD;
        R *ao = A + a->ao + (size_t)l * N * QD, *att = A + a->att + (size_t)l * B * H * T * T;
        R *g = A + a->g + (size_t)l * N * F, *u = A + a->u + (size_t)l * N * F, *h = A + a->h + (size_t)l * N * F;
        /* attention block */
        FN(trk_rmsnorm)(xn1, A + a->rs1 + (size_t)l * N, X, P + lay->attn_norm + (size_t)l * C, N, C, c->norm_eps);
        FN(trk_matmul)(ex, q, xn1, P + lay->wq + (size_t)l * QD * C, N, QD, C);
        FN(trk_matmul)(ex, k, xn1, P + lay->wk + (size_t)l * KVD * C, N, KVD, C);
        FN(trk_matmul)(ex, v, xn1, P + lay->wv + (size_t)l * KVD * C, N, KVD, C);
        FN(trk_rope)(q, A + a->cs, A + a->sn, B, T, H, D, c->rope_dim, c->rope_neox, false);
        FN(trk_rope)(k, A + a->cs, A + a->sn, B, T, Hkv, D, c->rope_dim, c->rope_neox, false);
        FN(trk_attention)(ex, ao, att, q, k, v, B, T, H, Hkv, D);
        FN(trk_matmul)(ex, xmid, ao, P + lay->wo + (size_t)l * C * QD, N, C, QD);
        for (size_t i = 0; i < NC; i++) xmid[i] += X[i];
        /* feed-forward block */
        FN(trk_rmsnorm)(xn2, A + a->rs2 + (size_t)l * N, xmid, P + lay->ffn_norm + (size_t)l * C, N, C, c->norm_eps);
        FN(trk_matmul)(ex, g, xn2, P + lay->gate + (size_t)l * F * C, N, F, C);
        FN(trk_matmul)(ex, u, xn2, P + lay->up + (size_t)l * F * C, N, F, C);
        FN(trk_swiglu)(h, g, u, (int64_t)N * F);
        FN(trk_matmul)(ex, Xn, h, P + lay->down + (size_t)l * C * F, N, C, F);
        for (size_t i = 0; i < NC; i++) Xn[i] += xmid[i];
    }
    FN(trk_rmsnorm)(A + a->xnf, A + a->rsf, A + a->x + (size_t)c->n_layers * NC, P + lay->out_norm, N, C,
                    c->norm_eps);
    FN(trk_matmul)(ex, A + a->logits, A + a->xnf, P + lay->output, N, V, C);
    if (!ls || !ls->targets) return 0;
    return FN(trk_loss)(ex, A + a->logits, ls, N, V, grad);
}

void FN(train_backward)(const train_exec *ex, const train_config *c, const train_layout *lay, const train_acts *a,
                        const R *P, R *G, R *A, const int32_t *inputs) {
    const int B = a->B, T = a->T, N = B * T, C = c->dim, F = c->hidden, D = c->head_dim;
    const int H = c->n_heads, Hkv = c->n_kv_heads, QD = H * D, KVD = Hkv * D, V = c->vocab;
    const size_t NC = (size_t)N * C;
    R *dx = A + a->dx, *dxn = A + a->dxn, *dq = A + a->dq, *dk = A + a->dk, *dv = A + a->dv, *dao = A + a->dao;
    R *dg = A + a->dg, *du = A + a->du, *dh = A + a->dh;
#define ZERO(ptr, cnt) memset((ptr), 0, sizeof(R) * (size_t)(cnt))
    /* classifier and final norm */
    ZERO(dxn, NC);
    FN(trk_matmul_bwd)(ex, dxn, G + lay->output, A + a->logits, A + a->xnf, P + lay->output, N, V, C);
    ZERO(dx, NC);
    FN(trk_rmsnorm_bwd)(dx, G + lay->out_norm, dxn, A + a->x + (size_t)c->n_layers * NC, A + a->rsf,
                        P + lay->out_norm, N, C);
    for (int l = c->n_layers - 1; l >= 0; l--) {
        const R *X = A + a->x + l * NC, *xmid = A + a->xmid + l * NC;
        const R *xn1 = A + a->xn1 + l * NC, *xn2 = A + a->xn2 + l * NC;
        const R *q = A + a->q + (size_t)l * N * QD, *k = A + a->k + (size_t)l * N * KVD;
        const R *v = A + a->v + (size_t)l * N * KVD;
        const R *ao = A + a->ao + (size_t)l * N * QD, *att = A + a->att + (size_t)l * B * H * T * T;
        const R *g = A + a->g + (size_t)l * N * F, *u = A + a->u + (size_t)l * N * F, *h = A + a->h + (size_t)l * N * F;
        /* feed-forward block; dx = d(x_{l+1}) = d(xmid) through the residual */
        ZERO(dh, (size_t)N * F);
        FN(trk_matmul_bwd)(ex, dh, G + lay->down + (size_t)l * C * F, dx, h, P + lay->down + (size_t)l * C * F, N, C, F);
        ZERO(dg, (size_t)N * F);
        ZERO(du, (size_t)N * F);
        FN(trk_swiglu_bwd)(dg, du, dh, g, u, (int64_t)N * F);
        ZERO(dxn, NC);
        FN(trk_matmul_bwd)(ex, dxn, G + lay->gate + (size_t)l * F * C, dg, xn2, P + lay->gate + (size_t)l * F * C, N, F, C);
        FN(trk_matmul_bwd)(ex, dxn, G + lay->up + (size_t)l * F * C, du, xn2, P + lay->up + (size_t)l * F * C, N, F, C);
        FN(trk_rmsnorm_bwd)(dx, G + lay->ffn_norm + (size_t)l * C, dxn, xmid, A + a->rs2 + (size_t)l * N,
                            P + lay->ffn_norm + (size_t)l * C, N, C);
        /* attention block; dx = d(xmid) = d(x_l) through the residual */
        ZERO(dao, (size_t)N * QD);
        FN(trk_matmul_bwd)(ex, dao, G + lay->wo + (size_t)l * C * QD, dx, ao, P + lay->wo + (size_t)l * C * QD, N, C, QD);
        ZERO(dq, (size_t)N * QD);
        ZERO(dk, (size_t)N * KVD);
        ZERO(dv, (size_t)N * KVD);
        FN(trk_attention_bwd)(ex, dq, dk, dv, A + a->dp, dao, att, q, k, v, B, T, H, Hkv, D);
        FN(trk_rope)(dq, A + a->cs, A + a->sn, B, T, H, D, c->rope_dim, c->rope_neox, true);
        FN(trk_rope)(dk, A + a->cs, A + a->sn, B, T, Hkv, D, c->rope_dim, c->rope_neox, true);
        ZERO(dxn, NC);
        FN(trk_matmul_bwd)(ex, dxn, G + lay->wq + (size_t)l * QD * C, dq, xn1, P + lay->wq + (size_t)l * QD * C, N, QD, C);
        FN(trk_matmul_bwd)(ex, dxn, G + lay->wk + (size_t)l * KVD * C, dk, xn1, P + lay->wk + (size_t)l * KVD * C, N, KVD, C);
        FN(trk_matmul_bwd)(ex, dxn, G + lay->wv + (size_t)l * KVD * C, dv, xn1, P + lay->wv + (size_t)l * KVD * C, N, KVD, C);
        FN(trk_rmsnorm_bwd)(dx, G + lay->attn_norm + (size_t)l * C, dxn, X, A + a->rs1 + (size_t)l * N,
                            P + lay->attn_norm + (size_t)l * C, N, C);
    }
    for (int n = 0; n < N; n++) { /* embedding */
        R *ge = G + lay->tok_embd + (size_t)inputs[n] * C;
        for (int i = 0; i < C; i++) ge[i] += dx[(size_t)n * C + i];
    }
#undef ZERO
}

#undef FN
#undef TCAT
#undef TCAT_
