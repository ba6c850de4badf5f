/* compress/ptq.h - post-training quantization: absmax and zero-point INT-n
 * (2..8 bits) per tensor, per channel or per group, with optional
 * MSE-optimal clipping; fake quantization for QAT; writing models in
 * kvant's PTQ tensor types (storage layouts: kernels/ptq.h).
 *
 * Conventions.  A matrix is `rows` rows of `cols` floats (ggml: ne[0] =
 * cols, the input dimension of a linear layer; a row is one output channel).
 * Every quantized value is x^ = scale * (u - zero) with an integer code u in
 * [0, 2^bits - 1]:
 *   absmax      zero = 2^(bits-1), scale = max|x| / (2^(bits-1) - 1)
 *               (codes 1 .. 2^bits - 1: symmetric, 0 unused)
 *   zero-point  scale = (max - min) / (2^bits - 1) over [min(x,0), max(x,0)],
 *               zero = round(-min / scale), an integer (0 is exact)
 * Scales are rounded to F16 before the codes are chosen, exactly as they
 * are stored, so fake quantization equals dequantization of the stored file.
 * Clipping (PTQ_CLIP_MSE) shrinks the range by a ratio r in [0.3, 1] chosen
 * per group to minimize sum_j imp_j (x_j - x^_j)^2 (imp: per-column
 * importance, e.g. E[a_j^2] of the layer's input from calibration; NULL:
 * 1).  Groups run along a row: group k of row r is x[r][kG .. kG+G). */
#ifndef KVANT_COMPRESS_PTQ_H
#define KVANT_COMPRESS_PTQ_H

#include "core/core.h"
#include "format/gguf.h"

typedef enum { PTQ_ABSMAX = 0, PTQ_ZEROPOINT = 1 } ptq_scheme;
typedef enum { PTQ_TENSOR = 0, PTQ_CHANNEL = 1, PTQ_GROUP = 2 } ptq_gran;
typedef enum { PTQ_CLIP_NONE = 0, PTQ_CLIP_MSE = 1 } ptq_clip;

typedef struct {
    ptq_scheme scheme;
    int bits;         /* 2..8 */
    ptq_gran gran;
    int group;        /* PTQ_GROUP: elements per group; storage types exist for 32, 64, 128,
                         fake quantization takes any G >= 1 (a row's last group may be short) */
    ptq_clip clip;
} ptq_spec;

/* one group's quantization parameters: x^ = scale * (u - zero) */
typedef struct {
    float scale;
    int zero;
} ptq_qp;

/* "zp4-g32-mse", "absmax8-channel", ... (returns buf) */
const char *ptq_spec_name(const ptq_spec *s, char *buf, size_t cap);
/* true if s is valid (bits 2..8, group >= 1) */
bool ptq_spec_valid(const ptq_spec *s);

/* ---- the quantizer (float level) ---------------------------------------------- */
/* Parameters for one group x[0..n): the plain range, or with clipping the best
 * ratio.  imp: NULL or n non-negative weights of the squared error. */
ptq_qp ptq_choose(const ptq_spec *s, const float *x, int64_t n, const float *imp);
/* codes of x[0..n) under qp (nearest, clamped) */
void ptq_codes(const ptq_spec *s, ptq_qp qp, const float *x, int64_t n, uint8_t *u);
/* sum imp_j (x_j - x^_j)^2 of x[0..n) under qp */
double ptq_error(const ptq_spec *s, ptq_qp qp, const float *x, int64_t n, const float *imp);

/* Groups per row (1 for tensor / channel) and total parameter sets of a matrix
 * (1 for tensor, rows for channel, rows * groups per row for group). */
int64_t ptq_groups_per_row(const ptq_spec *s, int64_t cols);
int64_t ptq_n_qp(const ptq_spec *s, int64_t rows, int64_t cols);

/* Quantizes a matrix: u (rows*cols codes, may be NULL) and qp (ptq_n_qp
 * entries, row-major by group).  imp: NULL or cols per-column weights. */
void ptq_quantize_matrix(const ptq_spec *s, const float *x, int64_t rows, int64_t cols, const float *imp,
                         uint8_t *u, ptq_qp *qp);
/* Fake quantization (QAT forward): y = dequant(quant(x)), y may be x.
 * mask: NULL, or rows*cols bytes set to 1 where x was inside the clipping
 * range (the straight-through estimator passes the gradient there). */
void ptq_fake_quant(const ptq_spec *s, const float *x, float *y, int64_t rows, int64_t cols, const float *imp,
                    uint8_t *mask);

/* ---- storage: kvant's PTQ tensor types ----------------------------------------- */
/* The kern type for s when the rows have `cols` elements, or -1.  Group sizes
 * other than 32/64/128 have no type.  When cols is not a multiple of the group
 * size: the largest smaller stored group (128 -> 64 -> 32) that divides cols,
 * else per channel (same scheme and bits); *used (may be NULL) gets the spec
 * actually stored and note a line saying why ("" if nothing to say). */
int ptq_storage_type(const ptq_spec *s, int64_t cols, ptq_spec *used, char *note, size_t note_cap);
/* the spec a PTQ type stores (clip: none); false if t is not a PTQ type */
bool ptq_type_spec(int type, ptq_spec *out);
/* Quantizes a matrix into `type` (a PTQ type from ptq_storage_type, or any
 * kern type with from_float_ref, for tensors kept at other precisions).
 * out holds kern_row_bytes(type, cols) * rows bytes.  PTQ types use s's
 * scheme/bits/granularity and clipping; other types ignore s and imp. */
kvant_code ptq_quantize_tensor(const ptq_spec *s, int type, const float *x, int64_t rows, int64_t cols,
                               const float *imp, void *out, kvant_status *st);

/* GPTQ (Frantar et al. 2022): as ptq_quantize_tensor, but each column's
 * rounding error is compensated on the columns after it through the inverse
 * of H = sum over calibration tokens of x x^T (cols x cols, row-major, the
 * layer input's second moments); diag(H) also weighs the clipping error.
 * H NULL or a non-PTQ type: ptq_quantize_tensor without importance. */
kvant_code ptq_gptq_tensor(const ptq_spec *s, int type, const float *x, int64_t rows, int64_t cols, const double *H,
                           void *out, kvant_status *st);

/* ---- whole models ------------------------------------------------------------------ */
typedef enum {
    PTQ_FALLBACK_CHANNEL = 0, /* rows that fit no group: per channel, same bits */
    PTQ_FALLBACK_F16,         /* ... kept F16 */
    PTQ_FALLBACK_F32,         /* ... kept F32 */
} ptq_fallback;

typedef struct {
    ptq_spec spec;
    ptq_fallback fallback;
    const char *keep;         /* NULL, or comma-separated substrings of tensor names kept F16 */
    const char *tensor_bits;  /* NULL, or "SUBSTR=B,...": tensors whose name contains SUBSTR get
                                 B bits instead of spec.bits (the first match wins) */
    const char *calib_path;   /* NULL, or a text whose activations weight the clipping error */
    bool gptq;                /* with calib_path: GPTQ error compensation (ptq_gptq_tensor) */
    int calib_tokens;         /* tokens of it to run (0: 16384) */
    int n_threads;            /* 0: all CPUs */
    bool quiet;               /* no per-tensor lines on stderr */
} ptq_params;

typedef struct {
    int64_t n_weights;        /* elements of all tensors */
    size_t bytes;             /* bytes of all tensors as written */
    double bpw;               /* 8 * bytes / n_weights (norms included) */
    int64_t n_quant_weights;  /* elements of the matrices quantized */
    size_t quant_bytes;
    double quant_bpw;         /* over the quantized matrices only */
    int n_quantized, n_fallback, n_kept;
    char fallback_names[2048]; /* "name=TYPE,..." of tensors that fell back (truncated) */
    char kept_names[2048];     /* names kept at F16/F32 by the keep list or fallback */
    double seconds;
} ptq_report;

/* Whether tensor `name` of n_dims dimensions is a matrix PTQ quantizes
 * (2-D *weight, not a norm) */
bool ptq_is_quantizable(const char *name, int n_dims);

/* For a caller that builds its own file (training export): adds one tensor
 * to w, quantized per p (its type chosen with ptq_storage_type, the keep list
 * and the fallback), f32 holding its elements; imp may be NULL.  Tensors that
 * ptq_is_quantizable rejects are written F32.  Updates r (may be NULL) and,
 * unless p->quiet, prints one line on stderr. */
kvant_code ptq_add_tensor(gguf_writer *w, const ptq_params *p, const char *name, int n_dims, const int64_t *ne,
                          const float *f32, const float *imp, ptq_report *r, kvant_status *st);
/* Adds the kvant.ptq.* metadata (scheme, bits, granularity, group, clip,
 * calibration, the tensors kept / fallen back, from r) to w. */
void ptq_add_metadata(gguf_writer *w, const ptq_params *p, const ptq_report *r);

/* Reads a GGUF llama model and writes it quantized per p (metadata copied,
 * kvant.ptq.* added).  r may be NULL. */
kvant_code ptq_quantize_file(const char *in_path, const char *out_path, const ptq_params *p, ptq_report *r,
                             kvant_status *st);

#endif
