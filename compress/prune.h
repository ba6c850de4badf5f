/* compress/prune.h - pruning: magnitude, Wanda, SparseGPT (OBS) and
 * structured (FFN neurons, attention heads / KV groups), unstructured or
 * N:M semi-structured (2:4, 4:8), and the files they write.
 *
 * Dimension letters: R rows of a weight matrix (output features), K
 * columns (input features), T calibration tokens.  A weight matrix is
 * row-major W[R][K] (ggml's layout: ne[0] = K); its input x has K features.
 *
 * The per-matrix core (prune_matrix) is independent of files and models,
 * so a training loop can call it for iterative pruning: give it the
 * statistics of the matrix's inputs (prune_stats) and it zeroes weights in
 * place (SparseGPT also updates the kept ones) and returns the mask. */
#ifndef KVANT_COMPRESS_PRUNE_H
#define KVANT_COMPRESS_PRUNE_H

#include "core/core.h"

typedef enum { PRUNE_MAGNITUDE, PRUNE_WANDA, PRUNE_SPARSEGPT, PRUNE_STRUCTURED } prune_method;

/* Statistics of a matrix's inputs over T calibration tokens (rows x_t of K):
 *   sumsq[j] = sum_t x_t[j]^2           (Wanda: ||X_j||_2 = sqrt(sumsq[j]))
 *   xx[i*K+j] = sum_t x_t[i] x_t[j]     (SparseGPT: H = 2 xx, only needed there)
 * accumulated in double. */
typedef struct {
    int64_t K;
    int64_t T;
    double *sumsq;  /* [K] */
    double *xx;     /* [K*K] or NULL */
} prune_stats;

/* allocates zeroed stats for K features (with xx when want_xx); false on OOM */
bool prune_stats_init(prune_stats *s, int64_t K, bool want_xx);
void prune_stats_free(prune_stats *s);
/* adds T rows x[T][K] */
void prune_stats_add(prune_stats *s, const float *x, int T);

typedef struct {
    prune_method method;   /* MAGNITUDE, WANDA or SPARSEGPT (structured: see prune_file) */
    float sparsity;        /* unstructured: fraction of weights removed, 0..1 */
    int nm_keep, nm_group; /* N:M: keep nm_keep of every nm_group consecutive weights
                            * along K (2:4, 4:8); nm_group = 0: unstructured */
    bool layerwise;        /* magnitude / Wanda: rank over the whole matrix, not per row */
    int block;             /* SparseGPT column block (default 128 when 0) */
    float damp;            /* SparseGPT dampening, fraction of mean diag(H) (default 0.01 when 0) */
    core_pool *pool;       /* optional: SparseGPT splits rows across it */
} prune_opts;

/* Prunes W[R][K] (float, in place).  stats: NULL for magnitude; Wanda needs
 * sumsq, SparseGPT needs xx.  mask (optional, [R*K]): set to 1 where a weight
 * was removed.  fixed_mask (optional, SparseGPT only): prune exactly these
 * weights (1 = remove) and only compensate (used by tests and by iterative
 * pruning with a mask chosen elsewhere).  N:M needs K % nm_group == 0.
 * Errors: KVANT_ERR_ARG (bad options, missing stats), KVANT_ERR_NOMEM. */
kvant_code prune_matrix(float *W, int64_t R, int64_t K, const prune_stats *stats, const prune_opts *o,
                        uint8_t *mask, const uint8_t *fixed_mask, kvant_status *st);

/* true when every group of m consecutive weights along each row of W has at
 * least m - n zeros (the N:M pattern holds); K % m == 0 required */
bool prune_check_nm(const float *W, int64_t R, int64_t K, int n, int m);
/* fraction of exact zeros in W[0..n) */
double prune_zero_fraction(const float *W, int64_t n);

/* ---- files -------------------------------------------------------------------- */
typedef enum { PRUNE_FFN = 0, PRUNE_HEADS } prune_target;
typedef enum { PRUNE_DENSE = 0, PRUNE_SPARSE24_F16, PRUNE_SPARSE24_Q8 } prune_format;
typedef struct {
    prune_method method;
    float sparsity;          /* structured: fraction of FFN neurons / heads removed */
    int nm_keep, nm_group;   /* 0: unstructured */
    bool layerwise;
    const char *calib_path;  /* text file (Wanda, SparseGPT, structured) */
    int calib_tokens;        /* tokens taken from the END of the calib text (default 16384) */
    int calib_ctx;           /* sequence length for calibration (default 512) */
    bool sequential;         /* recollect each layer's inputs from the already-pruned layers */
    int block;               /* SparseGPT column block (0: 128) */
    prune_target target;     /* structured: FFN neurons or heads (KV groups) */
    prune_format format;     /* DENSE: the source type with zeros; SPARSE24_F16 / _Q8: the 2:4
                              * compressed types (needs 2:4) */
    int n_threads;
    bool quiet;
} prune_params;

/* Reads a llama-family GGUF, prunes every layer matrix (attn_q/k/v/output,
 * ffn_gate/up/down; never token_embd / output), writes a loadable GGUF
 * with kvant.prune.* metadata; per-layer sparsity on stderr unless quiet. */
kvant_code prune_file(const char *in_path, const char *out_path, const prune_params *p, kvant_status *st);

#endif
