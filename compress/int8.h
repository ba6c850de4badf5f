/* compress/int8.h - INT8 inference without retraining: activation outlier
 * analysis, LLM.int8 mixed-precision matmul, SmoothQuant scale folding and
 * W8A8 (INT8 weights per output channel x INT8 activations per token).
 *
 * Dimension letters as in model/model.h: T tokens, C = dim, F = hidden,
 * H*D attention width; for one matrix N output rows, K inputs, Kp = K
 * padded (kernels/int8.h).
 *
 * Everything here works through the forward pass's hooks (model_work.tap
 * and model_work.mm_hook); model/llama.c is not changed.  The classifier
 * (MODEL_MM_OUTPUT) is never quantized: as in LLM.int8 and SmoothQuant's
 * own setups it stays in the model's type. */
#ifndef KVANT_COMPRESS_INT8_H
#define KVANT_COMPRESS_INT8_H

#include "core/core.h"
#include "kernels/int8.h"
#include "model/model.h"

/* ---- one matrix in the INT8 layout ---------------------------------------- */
typedef struct {
    int64_t N, K, Kp;
    int8_t *q;          /* (N, Kp) per-row absmax INT8, zero-padded */
    float *s;           /* (N) row scales: w ~ q * s */
    model_mat orig;     /* the weights it came from (a view, not owned):
                           LLM.int8 reads its outlier columns from here */
} int8_mat;

/* Converts W (any computable type) once, rows split across pool (NULL:
 * this thread); st on allocation failure. */
kvant_code int8_mat_init(int8_mat *M, const model_mat *W, core_pool *pool, kvant_status *st);
void int8_mat_free(int8_mat *M);

/* Scratch for int8_matmul with up to max_T rows, K <= max_K, N <= max_N;
 * allocated once (per sequence), nothing is allocated per call. */
#define INT8_OUTLIER_CHUNK 64 /* outlier columns handled per pass */
typedef struct {
    int max_T;
    int64_t max_K, max_N;
    int8_t *xq;         /* (max_T, Kp) */
    float *sx;          /* (max_T) */
    uint8_t *skip;      /* (max_K) outlier flags */
    int32_t *oidx;      /* (max_K) outlier column indices */
    int n_out;          /* outlier columns of the last quantized x */
    float *xo;          /* (max_T, CHUNK) outlier activations */
    float *wo;          /* (max_N, CHUNK) outlier weight columns */
    float *row;         /* (max_K) one decoded weight row (per-row weight types) */
} int8_scratch;
int8_scratch *int8_scratch_new(int max_T, int64_t max_K, int64_t max_N, kvant_status *st);
void int8_scratch_free(int8_scratch *s);

/* y[T][N] = x[T][K] . W^T:
 *   threshold <= 0: W8A8, x quantized per row (absmax INT8), INT8 GEMM;
 *   threshold > 0:  LLM.int8, columns k of x with some |x[t][k]| >=
 *                   threshold are left out of the INT8 part (and of its
 *                   row scales) and computed in F32 from the original
 *                   weights; the two parts are summed.  With no such
 *                   column the result is bit-identical to W8A8.
 * reuse: x is the same input as the previous call (same T): its
 * quantization (and outlier set) in sc is used again.
 * Returns the number of outlier columns. */
int int8_matmul(core_pool *pool, int8_scratch *sc, const int8_mat *M, const float *x, float *y, int T,
                float threshold, bool reuse);

/* ---- a whole model's linear layers ------------------------------------------ */
typedef enum { INT8_OFF, INT8_W8A8, INT8_MIXED } int8_mode;

typedef struct {
    const model *m;     /* the model (possibly a smoothed clone) whose matrices these are */
    int8_mode mode;
    float threshold;    /* INT8_MIXED */
    int n_layers;
    int8_mat *mats;     /* (n_layers, 7) in model_mm_id order WQ..DOWN; NULL when INT8_OFF */
    int64_t max_K, max_N;
    /* counters (summed over all contexts; not thread-safe, rough) */
    int64_t n_calls, n_outlier_cols;
} int8_model;

int8_model *int8_model_new(const model *m, int8_mode mode, float threshold, kvant_status *st);
void int8_model_free(int8_model *q);

/* Per-sequence state for the matmul hook (model_mm_fn): user = this. */
typedef struct {
    const int8_model *q;
    int8_scratch *sc;
    int key_layer, key_group;   /* which input sc holds (reuse by wk/wv, up) */
    const float *key_x;
    int key_T;
    int64_t *n_calls, *n_outlier_cols;
} int8_ctx;
int8_ctx *int8_ctx_new(const int8_model *q, int max_T, kvant_status *st);
void int8_ctx_free(int8_ctx *c);
bool int8_mm_hook(void *user, int layer, model_mm_id mm, const model_mat *W, const float *x, float *y, int T);

/* ---- activation statistics (calibration tap) ------------------------------------
 * Sites are the four distinct linear-layer inputs of a layer. */
typedef enum { INT8_SITE_ATTN_IN, INT8_SITE_WO_IN, INT8_SITE_FFN_IN, INT8_SITE_DOWN_IN, INT8_SITE_COUNT } int8_site;
const char *int8_site_name(int site); /* "attn_in" (wq/wk/wv), "wo_in", "ffn_in" (gate/up), "down_in" */

typedef struct {
    int n_layers;
    int dims[INT8_SITE_COUNT];          /* C, H*D, C, F */
    float threshold;
    int64_t n_tokens, max_tokens;       /* tokens seen; capacity of the hit map */
    float *maxabs[INT8_SITE_COUNT];     /* (n_layers, dims) max |x| */
    double *sumabs[INT8_SITE_COUNT];    /* (n_layers, dims) sum |x| */
    int64_t *n_over[INT8_SITE_COUNT];   /* (n_layers, dims) tokens with |x| >= threshold */
    uint8_t *hit;                       /* (max_tokens, C) hidden dim j of token t reached the
                                           threshold at the attn_in or ffn_in of some layer */
    int64_t tok_base;                   /* first token of the batch being seen */
} int8_stats;

int8_stats *int8_stats_new(const model_config *c, float threshold, int64_t max_tokens, kvant_status *st);
void int8_stats_free(int8_stats *s);
/* model_tap_fn: user = the int8_stats; layer 0's attn_in starts a batch of T
 * new tokens (tokens past max_tokens are counted in the maxima only) */
void int8_stats_tap(void *user, int layer, model_mm_id mm, const float *x, int T, int cols);

/* LLM.int8's criterion for hidden dimension j (attn_in and ffn_in sites):
 * |x| >= threshold at >= min_layers of the 2 * n_layers sites, and in >=
 * min_tokens of the tokens (a token counts when any site reached it).
 * Writes the share of sites and of tokens; returns whether j qualifies. */
bool int8_stats_outlier(const int8_stats *s, int j, double min_layers, double min_tokens, double *layer_share,
                        double *token_share);

/* ---- SmoothQuant: per-input-channel scales folded into the norms ----------------- */
/* The maximum |W[n][j]| over the rows of the matrices sharing an input:
 * wmax_attn (n_layers, C) over wq, wk, wv; wmax_ffn (n_layers, C) over gate, up. */
void smooth_weight_max(const model *m, float *wmax_attn, float *wmax_ffn);
/* s_j = amax_j^alpha / wmax_j^(1-alpha), 1 where either is 0, clamped to
 * [1e-5, 1e5]; n values. */
void smooth_scales(const float *amax, const float *wmax, int n, float alpha, float *s);
/* The maximum |wo[n][j]| over rows, per input column j: (n_layers, H*D). */
void smooth_wo_max(const model *m, float *wmax_wo);
/* Per-head scales for wo's input, shared by the query heads of a KV group
 * (they read the same V channel): for KV head g and channel d,
 *   s[g*D + d] = (max_{h in g} amax[h*D + d])^alpha / (max_{h in g} wmax[h*D + d])^(1-alpha)
 * with smooth_scales' guards.  amax, wmax: (H*D); s: (Hkv*D). */
void smooth_scales_wo(const model_config *c, const float *amax, const float *wmax, float alpha, float *s);
/* A model computing the same function (in exact arithmetic) with the
 * scales folded in: attn_norm[l] / s_attn[l], wq/wk/wv columns * s_attn[l];
 * ffn_norm[l] / s_ffn[l], gate/up columns * s_ffn[l]; and (s_v) wv's output
 * rows / s_v[l] with wo's input column h*D + d * s_v[l][g(h)*D + d] (the
 * attention output of head h is a convex mix of V rows, so the scale passes
 * through it; g(h) = h / (H / Hkv)).  Scaled matrices become F32 copies;
 * everything else (tokenizer, threads, other weights) is shared with src,
 * which must outlive the clone.  s_attn / s_ffn are (n_layers, C), s_v
 * (n_layers, Hkv*D), each NULL for no scaling there.  Free with
 * smooth_model_free. */
model *smooth_fold(const model *src, const float *s_attn, const float *s_ffn, const float *s_v, kvant_status *st);
void smooth_model_free(model *m);

#endif
