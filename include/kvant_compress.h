/* kvant_compress.h - making a model smaller: llama.cpp-style quantization,
 * kvant's PTQ types (absmax / zero-point, GPTQ), pruning (magnitude, Wanda,
 * SparseGPT, structured, N:M and the 2:4 compressed formats), INT8
 * inference (LLM.int8, SmoothQuant W8A8), outlier analysis, and synthetic
 * models at real shapes for benchmarks. */
#ifndef KVANT_PUBLIC_COMPRESS_H
#define KVANT_PUBLIC_COMPRESS_H

#include "kvant_infer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tools: synthetic models and quantization ------------------------------ */
/* A file type: the type of most matrices plus llama.cpp's rules for the
 * rest (the _S / _M mixes).  Values are llama.cpp's general.file_type. */
typedef enum {
    KVANT_FTYPE_F32 = 0, KVANT_FTYPE_F16 = 1, KVANT_FTYPE_Q4_0 = 2, KVANT_FTYPE_Q4_1 = 3,
    KVANT_FTYPE_Q8_0 = 7, KVANT_FTYPE_Q5_0 = 8, KVANT_FTYPE_Q5_1 = 9, KVANT_FTYPE_Q2_K = 10,
    KVANT_FTYPE_Q3_K_S = 11, KVANT_FTYPE_Q4_K_S = 14, KVANT_FTYPE_Q4_K_M = 15, KVANT_FTYPE_Q5_K_S = 16,
    KVANT_FTYPE_Q5_K_M = 17, KVANT_FTYPE_Q6_K = 18, KVANT_FTYPE_BF16 = 32,
} kvant_ftype;
/* The i-th file type kvant can write (*out) and its name ("Q4_K_M");
 * NULL past the end. */
const char *kvant_ftype_list(int i, kvant_ftype *out);
/* Its name, or NULL for a value that is none of the above. */
const char *kvant_ftype_name(kvant_ftype t);

typedef struct {
    const char *shape;      /* kvant_synth_shape(i) names: "tinyllama-1.1b", ... */
    const char *out_path;
    kvant_ftype type;       /* default F32 */
    bool pure;              /* every matrix in `type` (no llama.cpp mix rules) */
    uint64_t seed;
    int n_threads;          /* 0: all CPUs */
    bool quiet;             /* no progress on stderr */
    int n_ctx;              /* > 0: declared context length instead of the shape's */
    int n_layers;           /* > 0: only the first n_layers of the shape's (the file says so) */
} kvant_synth_params;
/* Writes a GGUF with random weights at a real model's shape, marked
 * synthetic in its metadata. */
kvant_code kvant_synth(const kvant_synth_params *p, kvant_status *st);
/* i-th shape name and a description of it; NULL past the end */
const char *kvant_synth_shape(int i, const char **what);

typedef struct {
    kvant_ftype type;
    bool pure;
    int n_threads;
    bool quiet;
} kvant_quantize_params;
/* Quantizes a GGUF model the way llama.cpp's quantize tool does. */
kvant_code kvant_quantize(const char *in_path, const char *out_path, const kvant_quantize_params *p,
                          kvant_status *st);

/* ---- PTQ: absmax / zero-point INT-n quantization ----------------------------- */
typedef enum { KVANT_PTQ_ABSMAX = 0, KVANT_PTQ_ZEROPOINT } kvant_ptq_scheme;
typedef enum { KVANT_PTQ_CHANNEL = 0, KVANT_PTQ_TENSOR, KVANT_PTQ_GROUP } kvant_ptq_granularity;
typedef enum { KVANT_PTQ_CLIP_NONE = 0, KVANT_PTQ_CLIP_MSE } kvant_ptq_clip;
typedef enum { KVANT_PTQ_FALLBACK_CHANNEL = 0, KVANT_PTQ_FALLBACK_F16, KVANT_PTQ_FALLBACK_F32 } kvant_ptq_fallback;
typedef struct {
    kvant_ptq_scheme scheme;
    kvant_ptq_granularity granularity; /* one scale per row (default), tensor, or group */
    int group;              /* KVANT_PTQ_GROUP: elements per group (files: 32, 64, 128; fake quant: any) */
    int bits;               /* 2..8 */
    kvant_ptq_clip clip;    /* MSE: per-group clip ratio minimizing squared error */
    const char *calib_path; /* NULL, or a text: its activations weight the clipping error */
    int calib_tokens;       /* tokens of it (0: 16384) */
    bool gptq;              /* with calib_path: GPTQ error compensation (inverse-Hessian updates) */
    kvant_ptq_fallback fallback; /* rows fitting no group: per channel, or kept F16 / F32 */
    const char *keep;       /* NULL, or comma-separated name substrings kept F16 */
    const char *tensor_bits;/* NULL, or "SUBSTR=B,...": other bit widths for some tensors */
    int n_threads;          /* 0: all CPUs */
    bool quiet;             /* no per-tensor lines on stderr */
} kvant_ptq_params;

typedef struct {
    double bpw;             /* bits per weight over all tensors (8 * bytes / elements) */
    double quant_bpw;       /* over the quantized matrices only */
    size_t bytes;           /* tensor bytes written */
    int n_quantized, n_fallback, n_kept;
    double seconds;
} kvant_ptq_report;

/* Quantizes a GGUF llama model to kvant's PTQ types; every 2-D weight matrix
 * (not the norms) is quantized, rows that do not divide the group size fall
 * back (fitting group, per channel, or kept) and are reported.  r may be NULL. */
kvant_code kvant_ptq_quantize(const char *in_path, const char *out_path, const kvant_ptq_params *p,
                              kvant_ptq_report *r, kvant_status *st);
/* Fake quantization of a rows x cols float matrix in place (dequant(quant(x))),
 * for experiments from outside the library. */
kvant_code kvant_ptq_fake_quant(const kvant_ptq_params *p, float *x, int64_t rows, int64_t cols, kvant_status *st);

/* ---- pruning ------------------------------------------------------------------ */
typedef enum { KVANT_PRUNE_MAGNITUDE = 0, KVANT_PRUNE_WANDA, KVANT_PRUNE_SPARSEGPT, KVANT_PRUNE_STRUCTURED } kvant_prune_method;
typedef enum { KVANT_PRUNE_FFN = 0, KVANT_PRUNE_HEADS } kvant_prune_target;
typedef enum { KVANT_PRUNE_DENSE = 0, KVANT_PRUNE_SPARSE24_F16, KVANT_PRUNE_SPARSE24_Q8 } kvant_prune_format;
typedef struct {
    kvant_prune_method method;
    float sparsity;         /* fraction removed (unstructured; structured: of FFN neurons / KV groups) */
    int nm_keep, nm_group;  /* N:M: keep nm_keep of every nm_group (2:4, 4:8; 0, 0: unstructured) */
    bool layerwise;         /* magnitude / Wanda: rank over the whole matrix instead of per row */
    const char *calib_path; /* calibration text (wanda, sparsegpt, structured) */
    int calib_tokens;       /* taken from the END of the text; 0: 16384 */
    int calib_ctx;          /* calibration sequence length; 0: 512 */
    bool sequential;        /* recollect each layer's inputs through the pruned layers before it */
    int block;              /* SparseGPT column block; 0: 128 */
    kvant_prune_target target;  /* structured: FFN neurons or heads (KV groups) */
    kvant_prune_format format;  /* dense (zeros stored) or a 2:4 compressed type (needs 2:4) */
    int n_threads;
    bool quiet;             /* no per-layer report on stderr */
} kvant_prune_params;
/* Prunes a GGUF llama model's layer matrices and writes a loadable GGUF. */
kvant_code kvant_prune(const char *in_path, const char *out_path, const kvant_prune_params *p, kvant_status *st);

/* ---- INT8 inference: outliers, LLM.int8, SmoothQuant W8A8 ----------------------
 * A kvant_int8 is a way of running a model's linear layers (wq..w_down; the
 * classifier stays in the model's type): weights are converted once to INT8
 * per output channel, activations are quantized per token at each matmul.
 *   KVANT_INT8_W8A8   INT8 x INT8 GEMM for everything;
 *   KVANT_INT8_MIXED  LLM.int8: input columns with some |x| >= threshold in
 *                     the batch are computed in F32 from the original
 *                     weights, the rest in INT8;
 *   KVANT_INT8_NONE   no quantization: only the function-preserving
 *                     transforms below.
 * Transforms (before quantization): synthetic outliers (inject_*) and
 * SmoothQuant (smooth: per-channel scales from calibration on calib_text,
 * folded into attn_norm / ffn_norm and the wq/wk/wv, gate/up columns). */
typedef struct kvant_int8 kvant_int8;
typedef enum { KVANT_INT8_W8A8 = 0, KVANT_INT8_MIXED, KVANT_INT8_NONE } kvant_int8_mode;
typedef struct {
    kvant_int8_mode mode;
    float threshold;        /* mixed: outlier magnitude (default 6.0) */
    bool smooth;            /* SmoothQuant */
    float alpha;            /* migration strength in [0, 1] (default 0.5) */
    bool smooth_wo;         /* smooth: also wo's input, through wv's output rows per KV head */
    const char *calib_text; /* smooth: calibration text (required) */
    size_t calib_len;
    int calib_tokens;       /* calibration tokens at most (default 4096) */
    int calib_ctx;          /* tokens per calibration chunk, BOS first (default 512) */
    const int *inject_dims; /* synthetic outliers: these hidden dims are multiplied by */
    int n_inject;           /* inject_scale at every attn/ffn norm and the matching weight */
    float inject_scale;     /* columns divided by it (the model's function is unchanged) */
    void (*progress)(void *user, const char *what, int done, int total);
    void *user;
} kvant_int8_params;
kvant_int8_params kvant_int8_default(void);
/* Builds the setup for m (calibration runs here); m must outlive it. */
kvant_int8 *kvant_int8_new(kvant_model *m, const kvant_int8_params *p, kvant_status *st);
/* Every sequence given to kvant_seq_use_int8 must be freed first. */
void kvant_int8_free(kvant_int8 *q);
/* Writes a GGUF that runs q without conversion: in_path (the GGUF m was
 * opened from) with every layer's seven matrices in the stored W8A8 type
 * (1100: F32 scale per row + int8, kernels/w8a8.h) and, after SmoothQuant,
 * the folded norms; the classifier and embeddings stay as they are;
 * kvant.int8.* metadata.  LLM.int8 (KVANT_INT8_MIXED, built with a
 * calib_text): the hidden dims meeting the outlier criterion there
 * (kvant_outlier_default's shares at p->threshold) stay F16 columns of
 * wq/wk/wv/gate/up (type LLM_INT8 with NAME.outlier_cols / NAME.outliers),
 * the rest W8A8 (kernels/w8a8.h). */
kvant_code kvant_int8_save(const kvant_int8 *q, const char *in_path, const char *out_path, kvant_status *st);
/* The sequence's forward passes use q from now on (a fresh sequence of
 * q's model, or reset it first).  A kvant_seq_fork of it does not inherit
 * the INT8 matmuls: call this on the fork too. */
kvant_code kvant_seq_use_int8(kvant_seq *s, kvant_int8 *q, kvant_status *st);
typedef struct {
    int64_t matmuls;        /* activation quantizations so far */
    int64_t outlier_cols;   /* mixed: outlier columns summed over them */
    size_t int8_bytes;      /* INT8 weights + scales */
    float alpha;            /* as used */
    double scale_min, scale_max; /* SmoothQuant scales (1, 1 without smoothing) */
} kvant_int8_stats;
void kvant_int8_get_stats(const kvant_int8 *q, kvant_int8_stats *out);

/* Activation magnitudes at the inputs of every linear layer (kvant outliers).
 * Sites: 0 attn_in (wq/wk/wv, C dims), 1 wo_in (H*D), 2 ffn_in (gate/up, C),
 * 3 down_in (F).  LLM.int8's criterion for a hidden dimension j (attn_in and
 * ffn_in, 2 * n_layers sites): |x| >= threshold at >= min_layers of the
 * sites and in >= min_tokens of the tokens (a token counts when any site
 * reached it there). */
typedef struct {
    float threshold;        /* default 6.0 */
    double min_layers;      /* default 0.25 */
    double min_tokens;      /* default 0.06 */
    int max_tokens;         /* tokens of text to run (default 4096) */
    int ctx;                /* tokens per chunk, BOS first (default 512) */
    kvant_int8 *transform;  /* NULL, or run the model with this setup's transforms
                               (KVANT_INT8_NONE: synthetic outliers, smoothing) */
    void (*progress)(void *user, int done, int total);
    void *user;
} kvant_outlier_params;
kvant_outlier_params kvant_outlier_default(void);
#define KVANT_N_SITES 4
typedef struct {
    int n_layers, dim;
    int64_t n_tokens;
    const char *site_name[KVANT_N_SITES];
    int site_dim[KVANT_N_SITES];
    float *max_abs[KVANT_N_SITES];   /* (n_layers, site_dim) */
    float *mean_abs[KVANT_N_SITES];  /* (n_layers, site_dim) */
    float *share_over[KVANT_N_SITES];/* (n_layers, site_dim) share of tokens >= threshold */
    double *layer_share, *token_share; /* (dim) the criterion's two shares */
    bool *is_outlier;       /* (dim) */
    int n_outliers;
} kvant_outlier_report;
kvant_code kvant_outliers(kvant_model *m, const char *text, size_t len, const kvant_outlier_params *p,
                          kvant_outlier_report *r, kvant_status *st);
void kvant_outlier_report_free(kvant_outlier_report *r);

/* INT8 GEMM benchmark (kvant bench-int8): y = x W^T with random data at one
 * layer shape, timed in the same run as kvant's F32 matmul (kern_matmul
 * with F32 weights) on the same threads; best of `reps` calls each. */
typedef struct {
    int T, N, K;            /* tokens, output rows, inputs */
    int reps;               /* default 3 */
    int n_threads;          /* 0: all CPUs */
    int n_outliers;         /* LLM.int8: input columns made outliers (|x| ~ 20) */
    float threshold;        /* LLM.int8 threshold (default 6) */
    uint64_t seed;
} kvant_int8_bench_params;
typedef struct {
    double f32_ms;          /* kern_matmul, F32 weights */
    double f16_ms;          /* kern_matmul, the same weights in F16 (as tinyllama ships) */
    double w8a8_ms;         /* activation quantization + INT8 GEMM */
    double gemm_ms;         /* INT8 GEMM alone */
    double mixed_ms;        /* LLM.int8 with n_outliers outlier columns */
    double w8a8_err, mixed_err; /* relative RMS error vs the F32 result (mixed: on the outlier input) */
    double w8a8_err_outl;   /* plain W8A8 on the outlier input */
    const char *tier;       /* INT8 tile used */
} kvant_int8_bench_result;
kvant_code kvant_int8_bench(const kvant_int8_bench_params *p, kvant_int8_bench_result *r, kvant_status *st);

#ifdef __cplusplus
}
#endif
#endif
