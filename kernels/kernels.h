/* kernels/kernels.h - the compute kernels the forward pass uses.
 *
 * Dimension letters (used in every shape comment below):
 *   T  tokens in the batch        K  input features (row length of W)
 *   N  output features (rows of W) H  query heads, Hkv  KV heads, D head dim
 *   P  positions attended to (cache length)
 * Weight matrices are stored as ggml stores them: N rows of K elements of a
 * type from kernels/types.h, row-major.
 *
 * Each kernel has a _ref version that is the spec (plain loops, no
 * threads, allocation allowed) and a fast version used by the model; tests
 * hold them equal within a stated tolerance.
 */
#ifndef KVANT_KERNELS_H
#define KVANT_KERNELS_H

#include <math.h>

#include "core/core.h"
#include "kernels/types.h"

/* Jobs with fewer multiply-adds than this run on the calling thread only:
 * handing work to the pool costs a few microseconds. */
#define KERN_MT_MIN_WORK 65536.0

/* ---- matmul: y[T][N] = x[T][K] . W[N][K]^T ------------------------------ */
/* weight rows per block in the fast path (each block meets all T inputs) */
#define KERN_MM_ROWS 16

/* Scratch bytes the fast matmul needs for T activation rows of K elements
 * (the quantized activations: at most 4 bytes per element). */
static inline size_t kern_matmul_scratch_bytes(int T, int64_t K) { return (size_t)T * (size_t)K * 4 + 64; }
/* Fast: activations quantized once to the weight type's vec_dot_type, then
 * threads split the N rows and dot KERN_MM_ROWS rows at a time with all T
 * inputs, so W is read once per call whatever T is (prefill is
 * matrix-matrix).  scratch: kern_matmul_scratch_bytes(T, K). */
void kern_matmul(core_pool *pool, void *scratch, const void *W, int wtype,
                 const float *x, float *y, int T, int64_t N, int64_t K);
/* Reference: dequantize each row, sum x[t][k]*w[n][k] in k order. */
void kern_matmul_ref(const void *W, int wtype, const float *x, float *y, int T, int64_t N, int64_t K);

/* dot of two float vectors of length n (8 partial sums) */
float kern_dot_f32(const float *a, const float *b, int64_t n);

/* ---- elementwise ------------------------------------------------------------ */
/* y[K] = x[K] / sqrt(mean(x^2) + eps) * w[K]  (y may alias x) */
void kern_rmsnorm(float *y, const float *x, const float *w, int64_t K, float eps);
void kern_rmsnorm_ref(float *y, const float *x, const float *w, int64_t K, float eps);

/* x[K] = softmax(x) in place */
void kern_softmax(float *x, int64_t K);
void kern_softmax_ref(float *x, int64_t K);

/* h[K] = silu(g[K]) * u[K]  (SwiGLU; h may alias g) */
void kern_swiglu(float *h, const float *g, const float *u, int64_t K);
void kern_swiglu_ref(float *h, const float *g, const float *u, int64_t K);
/* h[i] = gelu_tanh(g[i]) * u[i] (gemma's GeGLU; h may be g).  The fast one
 * rounds GELU's input and output to F16 as ggml's CPU backend does (ops.c). */
void kern_geglu(float *h, const float *g, const float *u, int64_t K);
void kern_geglu_ref(float *h, const float *g, const float *u, int64_t K);
/* x[i] = cap * tanh(x[i] / cap) (gemma2's logit soft-capping) */
void kern_softcap(float *x, int64_t K, float cap);
/* y[i] = expf((x[i] - m) * s), returns the sum of the y[i] (accumulated in
 * double).  x = -inf gives 0.  For sampling: m = the max logit, s = 1 /
 * temperature.  The avx2 tier's exp is within a few ulp of expf's and
 * returns 0 below e^-87.3 (expf: denormals). */
double kern_exp_sum(float *y, const float *x, int64_t n, float m, float s);
double kern_exp_sum_ref(float *y, const float *x, int64_t n, float m, float s);

/* ---- RoPE ---------------------------------------------------------------------
 * Rotates the first rope_dim dims of each of n_heads heads of size D in x
 * (x[n_heads][D]) for position pos.  Adjacent-pair ordering rotates
 * (x[2i], x[2i+1]); NeoX ordering rotates (x[i], x[i + rope_dim/2]).  Angle
 * for pair i: pos * freq_scale * base^(-2i/rope_dim) / freq_factors[i]
 * (ggml's rope with freq factors and linear scaling); the rotated pairs are
 * multiplied by mscale (ggml's attn_factor).  Fields left 0 / NULL mean
 * freq_scale 1, mscale 1, no factors. */
typedef struct {
    int rope_dim;
    float base;
    bool neox;
    const float *freq_factors;  /* [rope_dim/2] or NULL (Llama 3's rope_freqs, phi3's long/short factors) */
    float freq_scale;           /* linear scaling: 1/factor; 0 = 1 */
    float mscale;               /* 0 = 1 */
} kern_rope_params;

/* The angle per position of pair i (the frequency), and the cos/sin factor. */
static inline float kern_rope_freq(const kern_rope_params *p, int i) {
    float f = 1.0f / powf(p->base, (float)(2 * i) / (float)p->rope_dim);
    if (p->freq_scale != 0.0f) f *= p->freq_scale;
    if (p->freq_factors) f /= p->freq_factors[i];
    return f;
}
static inline float kern_rope_mscale(const kern_rope_params *p) { return p->mscale != 0.0f ? p->mscale : 1.0f; }
void kern_rope(float *x, int n_heads, int D, int pos, const kern_rope_params *p);
void kern_rope_ref(float *x, int n_heads, int D, int pos, const kern_rope_params *p);

/* ---- attention reference (causal, one sequence) --------------------------------
 * The model uses kernels/attn.h (naive and flash over KV views); this is the
 * textbook spec both are tested against.
 * q: [T][H][D] queries at positions pos0 .. pos0+T-1.
 * k, v: [P][Hkv][D] cached keys/values for positions 0 .. pos0+T-1 (P >= pos0+T),
 *       row stride kv_stride floats between positions.
 * out: [T][H][D].  Query head h reads KV head h / (H / Hkv). */
typedef struct {
    int T, H, Hkv, D;
    int pos0;
    int64_t kv_stride;
} kern_attn_shape;
/* Reference: expands K/V to H heads and materializes the T x P score matrix. */
void kern_attention_ref(const float *q, const float *k, const float *v, float *out, const kern_attn_shape *s);

#endif
