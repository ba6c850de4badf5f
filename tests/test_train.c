/* test_train.c - the training path.
 *
 * Gradient checks: every op's backward (double path) against central
 * finite differences in double precision, on L = sum(out * R) for a fixed
 * random R.  Step h = 1e-5: truncation error ~ h^2 * |f'''| ~ 1e-10, and
 * round-off ~ 1e-16 * |L| / h ~ 1e-11, so a correct gradient agrees to
 * ~1e-9 relative; the bound 1e-6 (max abs error / max |gradient|) leaves
 * margin and still fails on any wrong term (those give O(1) errors).
 * The same bound holds for the whole model (tiny config, tied and
 * separate classifier, CE and distillation losses).
 *
 * The float path (AVX2 matmuls through transposes) against the double
 * path: loss and gradients to 1e-4 relative (float accumulation over at
 * most a few hundred terms: ~1e-6 each, compounding through 2 layers).
 * The float forward against kvant's inference forward on stories260K:
 * logits to 2e-3 absolute (logits are O(10); the two differ only in the
 * order of float sums and flash attention's online softmax). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "format/gguf.h"
#include "api/api.h"
#include "train/convert.h"
#include "train/train.h"

static uint64_t rng = 88172645463325252ULL;
static double drand(void) { /* uniform [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}
static void fill(double *x, size_t n, double s) { for (size_t i = 0; i < n; i++) x[i] = s * drand(); }

/* max |a - n| / max |n| over a tensor whose analytic gradient is a and numeric gradient is computed from f */
static double check_grad(double *x, size_t n, const double *analytic, double (*f)(void), const char *what) {
    const double h = 1e-5;
    double maxerr = 0, maxg = 0;
    for (size_t i = 0; i < n; i++) {
        const double x0 = x[i];
        x[i] = x0 + h; const double fp = f();
        x[i] = x0 - h; const double fm = f();
        x[i] = x0;
        const double num = (fp - fm) / (2 * h);
        maxerr = fmax(maxerr, fabs(num - analytic[i]));
        maxg = fmax(maxg, fabs(num));
    }
    const double rel = maxerr / fmax(maxg, 1e-12);
    printf("  grad check %-28s n=%-6zu max|g|=%.3e rel err=%.2e\n", what, n, maxg, rel);
    assert_true(maxg > 1e-8); /* a gradient that is all zero checks nothing */
    assert_true(rel < 1e-6);
    return rel;
}
static double dot(const double *a, const double *b, size_t n) { double s = 0; for (size_t i = 0; i < n; i++) s += a[i] * b[i]; return s; }

/* ---- per op ---------------------------------------------------------------- */
enum { N = 6, I = 5, O = 7 };
static double X[64 * 64], W[64 * 64], Y[64 * 64], Rr[64 * 64], RS[64], X2[64 * 64], X3[64 * 64], ATT[4096], DP[64];

static double f_matmul(void) { trk_matmul_d(NULL, Y, X, W, N, O, I); return dot(Y, Rr, N * O); }
static void test_op_matmul(void **s) {
    fill(X, N * I, 1); fill(W, O * I, 1); fill(Rr, N * O, 1);
    double dx[N * I] = {0}, dw[O * I] = {0};
    trk_matmul_bwd_d(NULL, dx, dw, Rr, X, W, N, O, I);
    check_grad(X, N * I, dx, f_matmul, "linear dx");
    check_grad(W, O * I, dw, f_matmul, "linear dw");
}

static double f_rms(void) { trk_rmsnorm_d(Y, RS, X, W, N, I, 1e-5); return dot(Y, Rr, N * I); }
static void test_op_rmsnorm(void **s) {
    fill(X, N * I, 1); fill(W, I, 1); fill(Rr, N * I, 1);
    double dx[N * I] = {0}, dw[I] = {0};
    f_rms();
    trk_rmsnorm_bwd_d(dx, dw, Rr, X, RS, W, N, I);
    check_grad(X, N * I, dx, f_rms, "rmsnorm dx");
    check_grad(W, I, dw, f_rms, "rmsnorm dw");
}

enum { RB = 2, RT = 3, RH = 2, RD = 6, RDIM = 4 };
static double CS[RT * RDIM], SN[RT * RDIM];
static bool neox;
static double f_rope(void) {
    memcpy(Y, X, sizeof(double) * RB * RT * RH * RD);
    trk_rope_d(Y, CS, SN, RB, RT, RH, RD, RDIM, neox, false);
    return dot(Y, Rr, RB * RT * RH * RD);
}
static void test_op_rope(void **s) {
    const int n = RB * RT * RH * RD;
    trk_rope_tables_d(CS, SN, RT, RDIM, 10000.0);
    for (int nx = 0; nx < 2; nx++) {
        neox = nx;
        fill(X, n, 1); fill(Rr, n, 1);
        double dx[RB * RT * RH * RD];
        memcpy(dx, Rr, sizeof dx);
        trk_rope_d(dx, CS, SN, RB, RT, RH, RD, RDIM, neox, true);
        check_grad(X, n, dx, f_rope, neox ? "rope (neox) dx" : "rope (adjacent pairs) dx");
    }
    /* position 0 is the identity, and the float rope matches kern_rope's convention at pos 2 */
    float xf[RD], xk[RD], csf[RT * RDIM], snf[RT * RDIM];
    trk_rope_tables_f(csf, snf, RT, RDIM, 10000.0);
    for (int i = 0; i < RD; i++) xf[i] = xk[i] = (float)drand();
    float row[RT * RD] = {0};
    memcpy(row + 2 * RD, xf, sizeof xf);
    trk_rope_f(row, csf, snf, 1, RT, 1, RD, RDIM, false, false);
    const kern_rope_params rp = {RDIM, 10000.0f, false};
    kern_rope_ref(xk, 1, RD, 2, &rp);
    for (int i = 0; i < RD; i++) assert_float_equal(row[2 * RD + i], xk[i], 1e-6);
}

enum { AB = 2, AT = 4, AH = 4, AHK = 2, AD = 3 };
static double f_att(void) {
    trk_attention_d(NULL, Y, ATT, X, X2, X3, AB, AT, AH, AHK, AD);
    return dot(Y, Rr, AB * AT * AH * AD);
}
static void test_op_attention(void **s) {
    const int nq = AB * AT * AH * AD, nk = AB * AT * AHK * AD;
    fill(X, nq, 1); fill(X2, nk, 1); fill(X3, nk, 1); fill(Rr, nq, 1);
    double dq[AB * AT * AH * AD] = {0}, dk[AB * AT * AHK * AD] = {0}, dv[AB * AT * AHK * AD] = {0};
    f_att();
    trk_attention_bwd_d(NULL, dq, dk, dv, DP, Rr, ATT, X, X2, X3, AB, AT, AH, AHK, AD);
    check_grad(X, nq, dq, f_att, "attention (GQA) dq");
    check_grad(X2, nk, dk, f_att, "attention (GQA) dk");
    check_grad(X3, nk, dv, f_att, "attention (GQA) dv");
}

static double f_swiglu(void) { trk_swiglu_d(Y, X, X2, N * I); return dot(Y, Rr, N * I); }
static void test_op_swiglu(void **s) {
    fill(X, N * I, 2); fill(X2, N * I, 1); fill(Rr, N * I, 1);
    double dg[N * I] = {0}, du[N * I] = {0};
    trk_swiglu_bwd_d(dg, du, Rr, X, X2, N * I);
    check_grad(X, N * I, dg, f_swiglu, "swiglu dgate");
    check_grad(X2, N * I, du, f_swiglu, "swiglu dup");
}

enum { LV = 9 };
static train_loss_spec LS;
static int32_t TG[N];
static double f_loss(void) { memcpy(Y, X, sizeof(double) * N * LV); return trk_loss_d(NULL, Y, &LS, N, LV, false); }
static void test_op_loss(void **s) {
    for (int n = 0; n < N; n++) TG[n] = n == 2 ? -1 : (n * 5) % LV;
    fill(X, N * LV, 3);
    fill(X2, N * LV, 3);
    const struct { const void *teacher; double alpha, temp; const char *name; } cases[] = {
        {NULL, 1, 1, "cross-entropy dlogits"},
        {X2, 0.3, 1, "distill T=1 dlogits"},
        {X2, 0.5, 2, "distill T=2 dlogits"},
        {X2, 0.0, 4, "distill T=4 (KL only)"}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        LS = (train_loss_spec){TG, cases[c].teacher, cases[c].alpha, cases[c].temp};
        double g[N * LV];
        memcpy(g, X, sizeof g);
        trk_loss_d(NULL, g, &LS, N, LV, true);
        check_grad(X, N * LV, g, f_loss, cases[c].name);
    }
    /* KL of a distribution with itself is 0: loss = alpha * CE */
    LS = (train_loss_spec){TG, X, 0.25, 2};
    memcpy(Y, X, sizeof(double) * N * LV);
    const double l1 = trk_loss_d(NULL, Y, &LS, N, LV, false);
    LS = (train_loss_spec){TG, NULL, 1, 1};
    memcpy(Y, X, sizeof(double) * N * LV);
    assert_float_equal(l1, 0.25 * trk_loss_d(NULL, Y, &LS, N, LV, false), 1e-12);
}

/* ---- whole model: tiny random config ------------------------------------------ */
static train_config tiny(bool tied) {
    return (train_config){.dim = 16, .hidden = 24, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 4,
                          .vocab = 32, .ctx = 8, .rope_dim = 4, .rope_base = 10000, .norm_eps = 1e-5f, .tied = tied};
}
static train_config MC;
static train_layout ML;
static train_acts MA;
static double *MP, *MAct;
static int32_t MIN[16], MTG[16];
static train_loss_spec MLS;
static double f_model(void) { return train_forward_d(NULL, &MC, &ML, &MA, MP, MAct, MIN, &MLS, false); }

static void model_check(bool tied, bool distill) {
    MC = tiny(tied);
    train_layout_make(&MC, &ML);
    train_acts_make(&MC, 2, 8, 1, &MA);
    MP = malloc(sizeof(double) * ML.n);
    double *G = calloc(ML.n, sizeof(double));
    MAct = malloc(sizeof(double) * MA.n);
    double *teacher = malloc(sizeof(double) * 16 * MC.vocab);
    fill(MP, ML.n, 0.3);
    for (int i = 0; i < MC.dim; i++) MP[ML.out_norm + i] += 1;
    for (int i = 0; i < MC.dim * MC.n_layers; i++) { MP[ML.attn_norm + i] += 1; MP[ML.ffn_norm + i] += 1; }
    fill(teacher, 16 * MC.vocab, 2);
    for (int i = 0; i < 16; i++) { MIN[i] = (i * 7 + 3) % MC.vocab; MTG[i] = (i * 11 + 5) % MC.vocab; }
    MLS = (train_loss_spec){MTG, distill ? teacher : NULL, 0.5, 2};
    const double loss = train_forward_d(NULL, &MC, &ML, &MA, MP, MAct, MIN, &MLS, true);
    assert_true(loss > 0);
    train_backward_d(NULL, &MC, &ML, &MA, MP, G, MAct, MIN);
    char what[64];
    snprintf(what, sizeof what, "model (%s%s) all params", tied ? "tied" : "separate", distill ? ", distill" : "");
    check_grad(MP, ML.n, G, f_model, what);
    free(MP); free(G); free(MAct); free(teacher);
}
static void test_model_grad(void **s) {
    model_check(false, false);
    model_check(true, false);
    model_check(false, true);
}

/* float path (fast matmuls) == double path (spec) */
static void test_float_vs_double(void **s) {
    train_config c = tiny(false);
    c.dim = 64; c.hidden = 96; c.head_dim = 16; c.rope_dim = 16; c.vocab = 80;
    const int B = 8, T = 128; /* N = 1024: the threaded transposes run too */
    c.ctx = T;
    train_model *m = train_model_new(&c, NULL);
    train_model_init(m, 7);
    for (size_t i = 0; i < m->n; i++) m->p[i] += 0.05f * (float)drand();
    core_pool *pool = core_pool_new(2);
    train_exec *ex = train_exec_new(&c, B * T, pool, NULL);
    train_acts a;
    train_acts_make(&c, B, T, 2, &a);
    float *Af = malloc(sizeof(float) * a.n);
    double *Ad = malloc(sizeof(double) * a.n), *Pd = malloc(sizeof(double) * m->n), *Gd = calloc(m->n, sizeof(double));
    for (size_t i = 0; i < m->n; i++) Pd[i] = m->p[i];
    int32_t in[1024], tg[1024];
    for (int i = 0; i < B * T; i++) { in[i] = (i * 13 + 1 + i / 7) % c.vocab; tg[i] = (i * 17 + 2 + i / 5) % c.vocab; }
    train_loss_spec ls = {tg, NULL, 1, 1};
    const double lf = train_forward_f(ex, &c, &m->lay, &a, m->p, Af, in, &ls, true);
    train_backward_f(ex, &c, &m->lay, &a, m->p, m->g, Af, in);
    const double ld = train_forward_d(NULL, &c, &m->lay, &a, Pd, Ad, in, &ls, true);
    train_backward_d(NULL, &c, &m->lay, &a, Pd, Gd, Ad, in);
    double maxerr = 0, maxg = 0;
    for (size_t i = 0; i < m->n; i++) { maxerr = fmax(maxerr, fabs(m->g[i] - Gd[i])); maxg = fmax(maxg, fabs(Gd[i])); }
    printf("  float vs double: loss %.7f vs %.7f, grad rel err %.2e\n", lf, ld, maxerr / maxg);
    assert_true(fabs(lf - ld) < 1e-4 * ld);
    assert_true(maxerr / maxg < 1e-4);
    free(Af); free(Ad); free(Pd); free(Gd);
    train_exec_free(ex);
    core_pool_free(pool);
    train_model_free(m);
}

/* the training forward == kvant's inference forward on stories260K; a
 * checkpoint written as GGUF loads back to the same logits */
static void test_matches_inference(void **s) {
    kvant_status st;
    kvant_model *km = kvant_model_open(shared_path("models/stories260K.gguf"), NULL, &st);
    assert_non_null(km);
    const char *text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
    int32_t ids[64];
    const int n = kvant_tokenize(km, text, strlen(text), true, ids, 64);
    assert_true(n > 8 && n <= 64);
    train_model *tm = train_model_from(km->m, &st);
    assert_non_null(tm);
    const int V = tm->cfg.vocab;
    core_pool *pool = core_pool_new(2);
    train_exec *ex = train_exec_new(&tm->cfg, n, pool, &st);
    train_acts a;
    train_acts_make(&tm->cfg, 1, n, 2, &a);
    float *A = malloc(sizeof(float) * a.n), *ref = malloc(sizeof(float) * (size_t)n * V);
    train_forward_f(ex, &tm->cfg, &tm->lay, &a, tm->p, A, ids, NULL, false);
    /* F32 K/V, as the training forward computes (F16 K/V: max |logit diff| 1.3e-2) */
    kvant_seq_params sp = kvant_seq_default();
    sp.kv_type = KVANT_KV_F32;
    kvant_seq *seq = kvant_seq_new_ex(km, &sp, &st);
    assert_int_equal(kvant_forward(seq, ids, n, ref, true, &st), KVANT_OK);
    double maxd = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) maxd = fmax(maxd, fabs(A[a.logits + i] - ref[i]));
    printf("  stories260K: %d tokens, max |logit diff| train vs inference %.2e\n", n, maxd);
    assert_true(maxd < 2e-3);
    /* round trip through a GGUF checkpoint */
    const char *path = tmp_path("train_roundtrip.gguf");
    assert_int_equal(train_model_save(tm, NULL, km->m, "roundtrip", path, NULL, &st), KVANT_OK);
    kvant_model *k2 = kvant_model_open(path, NULL, &st);
    assert_non_null(k2);
    kvant_seq *s2 = kvant_seq_new_ex(k2, &sp, &st);
    float *ref2 = malloc(sizeof(float) * (size_t)n * V);
    assert_int_equal(kvant_forward(s2, ids, n, ref2, true, &st), KVANT_OK);
    for (size_t i = 0; i < (size_t)n * V; i++) assert_true(ref2[i] == ref[i]);
    kvant_seq_free(s2); kvant_model_free(k2); free(ref2);
    kvant_seq_free(seq);
    free(A); free(ref);
    train_exec_free(ex);
    core_pool_free(pool);
    train_model_free(tm);
    kvant_model_free(km);
}

/* AdamW against its formula; the schedule's corners; a tiny model learns */
static void test_adamw_and_schedule(void **s) {
    train_config c = tiny(false);
    train_model *m = train_model_new(&c, NULL);
    train_model_init(m, 1);
    train_opt o = train_opt_default();
    o.clip = 0; o.weight_decay = 0.1f; o.lr = 0.01f;
    const size_t i = m->lay.wq + 3, k = m->lay.attn_norm + 2;
    const float p0 = m->p[i], pk = m->p[k];
    for (size_t j = 0; j < m->n; j++) m->g[j] = 0.5f;
    train_adamw(NULL, m, &o, o.lr, NULL);
    /* step 1: mhat = g, vhat = g^2 -> update lr * (g/(|g|+eps) + wd p); norms get no decay */
    assert_float_equal(m->p[i], p0 - 0.01f * (1.0f + 0.1f * p0), 1e-6);
    assert_float_equal(m->p[k], pk - 0.01f, 1e-6);
    /* clipping: norm reported before clipping */
    for (size_t j = 0; j < m->n; j++) m->g[j] = 1.0f;
    o.clip = 1.0f;
    assert_float_equal(train_adamw(NULL, m, &o, 0, NULL), sqrtf((float)m->n), 1e-2);
    o = train_opt_default();
    o.lr = 1; o.min_lr = 0.1f; o.warmup = 10; o.total_steps = 110;
    assert_float_equal(train_lr(&o, 0), 0.1, 1e-6);
    assert_float_equal(train_lr(&o, 9), 1.0, 1e-6);
    assert_float_equal(train_lr(&o, 10), 1.0, 1e-6);
    assert_float_equal(train_lr(&o, 60), 0.55, 1e-6);
    assert_float_equal(train_lr(&o, 110), 0.1, 1e-6);
    /* learning: a fixed batch's loss falls far below log(V) */
    train_model_init(m, 2);
    m->step = 0;
    memset(m->m, 0, sizeof(float) * m->n * 2);
    train_exec *ex = train_exec_new(&c, 16, NULL, NULL);
    train_acts a;
    train_acts_make(&c, 2, 8, 1, &a);
    float *A = malloc(sizeof(float) * a.n);
    int32_t in[16], tg[16];
    for (int j = 0; j < 16; j++) { in[j] = (j * 5) % 32; tg[j] = (j * 5 + 5) % 32; }
    train_loss_spec ls = {tg, NULL, 1, 1};
    o = train_opt_default();
    o.lr = 3e-2f; o.weight_decay = 0;
    double loss = 0, first = 0;
    for (int step = 0; step < 150; step++) {
        memset(m->g, 0, sizeof(float) * m->n);
        loss = train_forward_f(ex, &c, &m->lay, &a, m->p, A, in, &ls, true);
        if (!step) first = loss;
        train_backward_f(ex, &c, &m->lay, &a, m->p, m->g, A, in);
        train_adamw(ex, m, &o, o.lr, NULL);
    }
    printf("  tiny model on a fixed batch: loss %.3f -> %.4f\n", first, loss);
    assert_true(first > 3.0 && loss < 0.05);
    free(A);
    train_exec_free(ex);
    train_model_free(m);
}

/* fake quantization = the PTQ tool's (ptq_fake_quant) at the PTQ init;
 * the STE mask drops a weight pushed past the clamp */
static void test_fake_quant(void **s) {
    train_config c = tiny(false);
    c.dim = 64; c.hidden = 96; c.head_dim = 16; c.rope_dim = 16; /* rows of 64 and 96: groups 32 and 64 fit */
    train_model *m = train_model_new(&c, NULL);
    train_model_init(m, 3);
    float *Wq = malloc(sizeof(float) * m->n), *ref = malloc(sizeof(float) * m->n);
    uint8_t *mask = malloc(m->n), *rmask = malloc(m->n);
    for (int scheme = 0; scheme < 2; scheme++)
        for (int bits = 2; bits <= 4; bits++)
            for (int g = 0; g < 2; g++) {
                const ptq_spec spec = {scheme, bits, g ? PTQ_GROUP : PTQ_CHANNEL, g ? 32 : 0, PTQ_CLIP_NONE};
                train_fq *f = train_fq_new(m, &spec, NULL);
                assert_non_null(f);
                train_fq_apply(NULL, f, m, Wq, mask);
                train_mat t;
                for (int i = 0; train_model_mat(m, i, &t); i++) {
                    ptq_fake_quant(&f->mats[i].used, m->p + t.off, ref + t.off, t.rows, t.cols, NULL, rmask + t.off);
                    for (size_t k = 0; k < (size_t)t.rows * t.cols; k++) {
                        assert_true(Wq[t.off + k] == ref[t.off + k]);
                        assert_int_equal(mask[t.off + k], rmask[t.off + k]); /* PTQ's own rounding may clamp */
                    }
                }
                assert_true(Wq[m->lay.attn_norm] == m->p[m->lay.attn_norm]);
                m->p[m->lay.wq] += 100.0f;
                train_fq_apply(NULL, f, m, Wq, mask);
                assert_int_equal(mask[m->lay.wq], 0);
                m->p[m->lay.wq] -= 100.0f;
                train_fq_free(f);
            }
    free(Wq); free(ref); free(mask); free(rmask);
    train_model_free(m);
}

/* the commands: train from a config, stop and resume (bit-exact with an
 * uninterrupted run), distill, QAT steps 0 = the PTQ tool's file; all
 * checkpoints load in kvant ppl */
static void tensors_equal(const char *a, const char *b) {
    kvant_status st;
    gguf_ctx *ga = gguf_open(a, &st), *gb = gguf_open(b, &st);
    assert_non_null(ga);
    assert_non_null(gb);
    assert_int_equal(gguf_n_tensors(ga), gguf_n_tensors(gb));
    for (int64_t i = 0; i < gguf_n_tensors(ga); i++) {
        const gguf_tensor *x = gguf_tensor_at(ga, i), *y = gguf_find_tensor(gb, x->name);
        assert_non_null(y);
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->nbytes, y->nbytes);
        assert_memory_equal(x->data, y->data, x->nbytes);
    }
    gguf_close(ga);
    gguf_close(gb);
}
static double json_num(const char *json, const char *key) {
    const char *p = strstr(json, key);
    assert_non_null(p);
    return atof(p + strlen(key) + 3);
}
static void test_cli(void **s) {
    size_t len;
    char *text = read_file(shared_path("corpora/tinystories_val_subset.txt"), &len);
    FILE *f = fopen(tmp_path("train_small.txt"), "wb");
    fwrite(text, 1, 40000, f);
    fclose(f);
    free(text);
    char small[512], tokm[512], cmd[4096];
    snprintf(small, sizeof small, "%s", tmp_path("train_small.txt"));
    snprintf(tokm, sizeof tokm, "%s", shared_path("models/stories260K.gguf"));
    const char *cfg = "--config dim=16,layers=2,heads=4,kv_heads=2,hidden=32";
    const char *common = "--steps 8 --batch 2 --ctx 16 --eval-every 4 --eval-windows 8 -t 1 --json";
    int rc;
    char a[512], b[512], c[512];
    snprintf(a, sizeof a, "%s", tmp_path("train_a.gguf"));
    snprintf(b, sizeof b, "%s", tmp_path("train_b.gguf"));
    snprintf(c, sizeof c, "%s", tmp_path("train_c.gguf"));
    snprintf(cmd, sizeof cmd, "%s train %s --tokenizer-from %s -f %s %s -o %s 2>/dev/null", KVANT_BIN, cfg, tokm, small,
             common, a);
    char *out = run_capture(cmd, &rc);
    assert_int_equal(rc, 0);
    assert_true(json_num(out, "\"val_loss\"") < json_num(out, "\"init_val_loss\""));
    free(out);
    snprintf(cmd, sizeof cmd, "%s train %s --tokenizer-from %s -f %s %s --stop-at 3 -o %s 2>/dev/null", KVANT_BIN, cfg,
             tokm, small, common, b);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 0);
    snprintf(cmd, sizeof cmd, "%s train %s --tokenizer-from %s -f %s %s --resume %s -o %s 2>/dev/null", KVANT_BIN, cfg,
             tokm, small, common, b, c);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 0);
    tensors_equal(a, c); /* stop + resume == one run */
    snprintf(cmd, sizeof cmd, "%s ppl -m %s -f %s -c 16 --chunks 4 2>/dev/null", KVANT_BIN, c, small);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 0);
    /* distillation from stories260K */
    snprintf(cmd, sizeof cmd, "%s distill --teacher %s --student dim=16,layers=2,heads=4,kv_heads=2,hidden=32 "
             "-f %s %s --temp 2 --alpha 0.5 -o %s 2>/dev/null", KVANT_BIN, tokm, small, common, b);
    out = run_capture(cmd, &rc);
    assert_int_equal(rc, 0);
    assert_true(json_num(out, "\"val_loss\"") < json_num(out, "\"init_val_loss\""));
    free(out);
    /* QAT with 0 steps writes what the PTQ tool writes */
    snprintf(cmd, sizeof cmd, "%s qat -m %s -f %s --bits 3 --granularity group:32 --steps 0 -t 1 -o %s 2>/dev/null",
             KVANT_BIN, tokm, small, a);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 0);
    snprintf(cmd, sizeof cmd, "%s quantize %s %s --scheme zeropoint --bits 3 --granularity group:32 -q 2>/dev/null",
             KVANT_BIN, tokm, c);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 0);
    tensors_equal(a, c);
    /* QAT stopped and resumed (held scales restored) == one run */
    const char *qc = "--bits 2 --granularity group:32 --steps 4 --batch 2 --ctx 16 --eval-every 0 --eval-windows 2 -t 1";
    snprintf(cmd, sizeof cmd, "%s qat -m %s -f %s %s -o %s 2>/dev/null", KVANT_BIN, tokm, small, qc, a);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 0);
    snprintf(cmd, sizeof cmd, "%s qat -m %s -f %s %s --stop-at 2 -o %s 2>/dev/null", KVANT_BIN, tokm, small, qc, b);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 0);
    snprintf(cmd, sizeof cmd, "%s qat -m %s -f %s %s --resume %s.shadow.gguf -o %s 2>/dev/null", KVANT_BIN, tokm, small,
             qc, b, c);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 0);
    tensors_equal(a, c);
    /* usage errors */
    snprintf(cmd, sizeof cmd, "%s train -f %s -o %s 2>/dev/null", KVANT_BIN, small, a);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 2);
    snprintf(cmd, sizeof cmd, "%s qat -m %s -f %s --bits 9 -o %s 2>/dev/null", KVANT_BIN, tokm, small, a);
    free(run_capture(cmd, &rc));
    assert_int_equal(rc, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_matmul),     cmocka_unit_test(test_op_rmsnorm),
        cmocka_unit_test(test_op_rope),       cmocka_unit_test(test_op_attention),
        cmocka_unit_test(test_op_swiglu),     cmocka_unit_test(test_op_loss),
        cmocka_unit_test(test_model_grad),    cmocka_unit_test(test_float_vs_double),
        cmocka_unit_test(test_matches_inference), cmocka_unit_test(test_adamw_and_schedule),
        cmocka_unit_test(test_fake_quant),    cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
