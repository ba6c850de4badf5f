/* train/ - a training path in the spirit of llm.c: FP32 parameters,
 * forward pass that keeps its activations, a hand-written backward pass for
 * every op of the llama family (embedding, RMSNorm, linear, RoPE, causal
 * GQA attention, SwiGLU, classifier, cross-entropy / distillation loss),
 * AdamW with global-norm clipping and a cosine schedule, fake quantization
 * with the straight-through estimator (QAT), and data windows.
 *
 * Every op and the whole model exist twice, for R = float (training) and
 * R = double (the gradient checks: central finite differences need the
 * precision), from one source (train/tmpl.h); the suffix _f / _d names
 * the type.  the ops know nothing of files: train/convert.c turns models
 * and GGUFs into train_model and back, and train/loop.c is kvant_train (the
 * loop behind kvant train / distill / qat, include/kvant_train.h).
 *
 * Dimension letters: B sequences, T positions, N = B*T tokens, C = dim,
 * F = hidden, H / Hkv query / KV heads, D head dim, QD = H*D, KVD = Hkv*D,
 * V vocabulary, L layers. */
#ifndef KVANT_TRAIN_H
#define KVANT_TRAIN_H

#include "compress/ptq.h"
#include "core/core.h"
#include "format/gguf.h"

typedef struct {
    int dim, hidden, n_layers, n_heads, n_kv_heads, head_dim, vocab, ctx;
    int rope_dim;
    float rope_base;
    bool rope_neox;
    float norm_eps;
    bool tied;          /* classifier = token embedding */
} train_config;

/* Parameter layout: element offsets into one array (layer-major per
 * tensor kind: wq of layer l is at wq + l*QD*C). */
typedef struct {
    size_t tok_embd;    /* (V, C) */
    size_t attn_norm;   /* (L, C) */
    size_t wq;          /* (L, QD, C) */
    size_t wk, wv;      /* (L, KVD, C) */
    size_t wo;          /* (L, C, QD) */
    size_t ffn_norm;    /* (L, C) */
    size_t gate, up;    /* (L, F, C) */
    size_t down;        /* (L, C, F) */
    size_t out_norm;    /* (C) */
    size_t output;      /* (V, C); == tok_embd when tied */
    size_t n;           /* elements in all */
} train_layout;

/* Activation layout for B x T tokens: element offsets into one array. */
typedef struct {
    int B, T;
    size_t x;           /* (L+1, N, C) residual stream entering each layer; [L] = final */
    size_t xmid;        /* (L, N, C) after the attention block */
    size_t xn1, xn2;    /* (L, N, C) normed inputs of attention / FFN */
    size_t rs1, rs2;    /* (L, N) their 1/rms */
    size_t q;           /* (L, N, QD) after RoPE */
    size_t k, v;        /* (L, N, KVD) (k after RoPE) */
    size_t att;         /* (L, B, H, T, T) attention probabilities */
    size_t ao;          /* (L, N, QD) attention output */
    size_t g, u, h;     /* (L, N, F) gate, up, silu(gate)*up */
    size_t xnf, rsf;    /* (N, C), (N) final norm */
    size_t logits;      /* (N, V); the backward pass turns it into dlogits */
    size_t cs, sn;      /* (T, rope_dim/2) RoPE tables */
    /* backward scratch */
    size_t dx, dxn;     /* (N, C) */
    size_t dq, dao;     /* (N, QD) */
    size_t dk, dv;      /* (N, KVD) */
    size_t dg, du, dh;  /* (N, F) */
    size_t dp;          /* (nth, T) attention row scratch per thread */
    size_t n;
} train_acts;

int train_config_check(const train_config *c, kvant_status *st); /* KVANT_OK or ARG */
void train_layout_make(const train_config *c, train_layout *lay);
void train_acts_make(const train_config *c, int B, int T, int nth, train_acts *a);

/* The loss on top of the logits.  targets[n] < 0: position not scored.
 * teacher: NULL, or teacher logits (N, V) for distillation:
 *   loss = alpha * CE(z, y) + (1 - alpha) * temp^2 * KL(softmax(zt/temp) || softmax(z/temp))
 * (alpha = 1 without a teacher).  The loss is the mean over scored tokens. */
typedef struct {
    const int32_t *targets;
    const void *teacher;  /* R* (N, V) */
    double alpha, temp;
} train_loss_spec;

/* How ops run: the thread pool (NULL: the calling thread) and, for the
 * float path, scratch for the matmuls (train_exec_new sizes it for N
 * tokens; the double path needs none: ex may be NULL or have NULL scratch). */
typedef struct {
    core_pool *pool;
    float *mm, *t1, *t2, *tmp;
    float *mem;
} train_exec;
train_exec *train_exec_new(const train_config *c, int N, core_pool *pool, kvant_status *st);
void train_exec_free(train_exec *e);

/* ---- the generic ops (train/tmpl.h), R = float (_f) or double (_d) -------
 * Shapes are in the argument names' comments; backward functions ADD into
 * the gradients of their inputs and parameters (dx, dw), so a tensor used
 * twice (residuals, tied weights) just accumulates. */
#define TRAIN_DECLARE(R, S)                                                                                        \
    void trk_matmul_##S(const train_exec *ex, R *y, const R *x, const R *w, int N, int O, int I);                         \
    void trk_matmul_bwd_##S(const train_exec *ex, R *dx, R *dw, const R *dy, const R *x, const R *w, int N, int O, int I); \
    void trk_rmsnorm_##S(R *y, R *rs, const R *x, const R *w, int N, int C, double eps);                          \
    void trk_rmsnorm_bwd_##S(R *dx, R *dw, const R *dy, const R *x, const R *rs, const R *w, int N, int C);       \
    void trk_rope_tables_##S(R *cs, R *sn, int T, int rope_dim, double base);                                     \
    void trk_rope_##S(R *x, const R *cs, const R *sn, int B, int T, int nh, int D, int rope_dim, bool neox,      \
                      bool inverse);                                                                              \
    void trk_attention_##S(const train_exec *ex, R *out, R *att, const R *q, const R *k, const R *v, int B, int T, int H,  \
                           int Hkv, int D);                                                                       \
    void trk_attention_bwd_##S(const train_exec *ex, R *dq, R *dk, R *dv, R *dp, const R *dout, const R *att, const R *q,  \
                               const R *k, const R *v, int B, int T, int H, int Hkv, int D);                      \
    void trk_swiglu_##S(R *h, const R *g, const R *u, int64_t n);                                                 \
    void trk_swiglu_bwd_##S(R *dg, R *du, const R *dh, const R *g, const R *u, int64_t n);                        \
    double trk_loss_##S(const train_exec *ex, R *logits, const train_loss_spec *ls, int N, int V, bool grad);            \
    double train_forward_##S(const train_exec *ex, const train_config *c, const train_layout *lay, const train_acts *a,    \
                             const R *P, R *A, const int32_t *inputs, const train_loss_spec *ls, bool grad);       \
    void train_backward_##S(const train_exec *ex, const train_config *c, const train_layout *lay, const train_acts *a,      \
                            const R *P, R *G, R *A, const int32_t *inputs);
TRAIN_DECLARE(float, f)
TRAIN_DECLARE(double, d)
/* train_forward: runs inputs (B*T tokens, row-major (B, T)) through the
 * model P into A; returns the loss when ls and ls->targets are given (0
 * otherwise); with grad, A's logits become dloss/dlogits for
 * train_backward, which ADDS dloss/dP into G (zero G first). */

/* ---- a float model: parameters, gradients and AdamW moments -------------- */
typedef struct {
    train_config cfg;
    train_layout lay;
    size_t n;           /* parameters */
    float *mem;         /* one allocation: p | g | m | v */
    float *p, *g, *m, *v;
    int64_t step;       /* optimizer steps taken */
} train_model;

train_model *train_model_new(const train_config *c, kvant_status *st);
void train_model_free(train_model *m);
/* seeded init: matrices ~ N(0, 0.02) (residual outputs wo/down scaled by
 * 1/sqrt(2L), as GPT-2/llm.c), norms 1 */
void train_model_init(train_model *m, uint64_t seed);
/* the 2-D tensors (for QAT, reports): i-th matrix, false past the end */
typedef struct {
    const char *kind;   /* "wq", "tok_embd", ... */
    int layer;          /* -1 for tok_embd / output */
    size_t off;         /* element offset */
    int rows, cols;
} train_mat;
bool train_model_mat(const train_model *m, int i, train_mat *out);

/* ---- optimizer -------------------------------------------------------------- */
typedef struct {
    float lr, min_lr;           /* peak and final learning rate */
    int warmup, total_steps;    /* linear warm-up, then cosine to min_lr at total_steps */
    float beta1, beta2, eps, weight_decay;
    float clip;                 /* global gradient-norm bound (<= 0: none) */
} train_opt;
train_opt train_opt_default(void);
float train_lr(const train_opt *o, int64_t step);
/* One AdamW step on m (bias-corrected; decay on matrices only, not on
 * norm gains) after clipping the gradient's global norm; returns the norm
 * before clipping.  mask: NULL, or per-parameter 0/1 (gradients where 0
 * are dropped: STE clipping, held pruning masks).  Threads on pool. */
float train_adamw(const train_exec *ex, train_model *m, const train_opt *o, float lr, const uint8_t *mask);

/* ---- fake quantization (QAT) ---------------------------------------------
 * The PTQ tool's quantizer (compress/ptq.h): every matrix (token embedding,
 * the layers' linears, the classifier), per group of a row / channel /
 * tensor, absmax or zero-point at b bits: x^ = scale * (u - zero), u in
 * [0, 2^b - 1].  Each matrix gets the spec the PTQ tool would store it in
 * (ptq_storage_type: rows that fit no group of 32/64/128 fall back to per
 * channel).  Scales and zero-points come from PTQ (ptq_choose on the
 * starting weights: round to nearest, optional MSE clipping) and are then
 * held; the straight-through estimator passes the gradient of x^ to x where
 * round(x / scale) + zero lies in [0, 2^b - 1] and drops it where the clamp
 * cut it. */
typedef struct {
    ptq_spec used;      /* as stored */
    int type;           /* PTQ storage type */
    size_t qp0;         /* first of its ptq_n_qp(used, rows, cols) parameter sets */
} train_fq_mat;

typedef struct {
    ptq_spec spec;
    int n_mats;
    train_fq_mat *mats;     /* train_model_mat order */
    ptq_qp *qp;
    size_t n_qp;
} train_fq;
train_fq *train_fq_new(const train_model *m, const ptq_spec *spec, kvant_status *st);
void train_fq_free(train_fq *f);
/* Wq = fakequant(m->p) for the matrices, a copy elsewhere; mask (n bytes,
 * may be NULL) = 1 where the STE passes the gradient */
void train_fq_apply(const train_exec *ex, const train_fq *f, const train_model *m, float *Wq, uint8_t *mask);
/* adds matrix i (train_model_mat order) of m->p to w in its PTQ type, with
 * the held scales: its dequantization equals train_fq_apply's values */
kvant_code train_fq_write(const train_fq *f, const train_model *m, int i, gguf_writer *w, const char *name,
                          kvant_status *st);

/* ---- data ------------------------------------------------------------------
 * Token windows: training tokens and validation tokens (the last 10% of the
 * text's bytes, from the first line start there).  Batches of B random
 * windows of T+1 tokens (xorshift, seeded). */
typedef struct {
    int32_t *train, *val;
    int64_t n_train, n_val;
    uint64_t rng;
} train_data;
/* byte offset where validation starts: 90% of len, moved to after the next '\n' */
size_t train_split_offset(const char *text, size_t len);
/* fills inputs/targets (B*T each) with random training windows */
void train_data_batch(train_data *d, int B, int T, int32_t *inputs, int32_t *targets);

#endif
