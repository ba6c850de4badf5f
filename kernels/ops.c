/* ops.c - elementwise kernels: RMSNorm, softmax, SwiGLU, RoPE; fast and _ref.
 *
 * The "fast" versions here are the ones the model calls; at this tier they
 * differ from _ref only in accumulation order (partial sums), which the
 * SIMD tiers will keep.  Tolerances are in tests/test_kernels.c. */
#include <math.h>
#include <pthread.h>

#include "kernels/kernels.h"
#include "kernels/tiers.h"
#include "kernels/types.h"

float kern_dot_f32(const float *a, const float *b, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- RMSNorm ---------------------------------------------------------------- */
void kern_rmsnorm_ref(float *y, const float *x, const float *w, int64_t K, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < K; i++) ss += x[i] * x[i];
    const float scale = 1.0f / sqrtf(ss / (float)K + eps);
    for (int64_t i = 0; i < K; i++) y[i] = w[i] * (scale * x[i]);
}

void kern_rmsnorm(float *y, const float *x, const float *w, int64_t K, float eps) {
    const float ss = kern_dot_f32(x, x, K);
    const float scale = 1.0f / sqrtf(ss / (float)K + eps);
    for (int64_t i = 0; i < K; i++) y[i] = w[i] * (scale * x[i]);
}

/* ---- softmax ------------------------------------------------------------------ */
void kern_softmax_ref(float *x, int64_t K) {
    float max = x[0];
    for (int64_t i = 1; i < K; i++)
        if (x[i] > max) max = x[i];
    float sum = 0.0f;
    for (int64_t i = 0; i < K; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int64_t i = 0; i < K; i++) x[i] /= sum;
}

void kern_softmax(float *x, int64_t K) {
    float max = x[0];
    for (int64_t i = 1; i < K; i++) max = x[i] > max ? x[i] : max;
    float sum = 0.0f;
    for (int64_t i = 0; i < K; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < K; i++) x[i] *= inv;
}

/* ---- SwiGLU --------------------------------------------------------------------- */
void kern_swiglu_ref(float *h, const float *g, const float *u, int64_t K) {
    for (int64_t i = 0; i < K; i++) {
        const float s = g[i] / (1.0f + expf(-g[i]));
        h[i] = s * u[i];
    }
}

/* AVX2: the same formula with a vector expf (kernels/ops_avx2.c); here libm's */
void kern_swiglu(float *h, const float *g, const float *u, int64_t K) {
#if defined(__x86_64__) || defined(_M_X64)
    if (kern_active_tier() >= KERN_TIER_AVX2) {
        kern_swiglu_avx2(h, g, u, K);
        return;
    }
#endif
    for (int64_t i = 0; i < K; i++) h[i] = g[i] * u[i] / (1.0f + expf(-g[i]));
}

/* ---- GeGLU (gemma): h = gelu_tanh(g) * u ----------------------------------------------
 * GELU with the tanh approximation, 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
 * kern_geglu_ref evaluates it in float (the spec).  kern_geglu does what
 * ggml's CPU backend does (GGML_GELU_FP16): g rounded to F16, GELU looked up
 * in a table of the 65536 F16 inputs whose entries are rounded to F16, 0
 * below -10 and g itself above 10.  It differs from the ref by F16 rounding
 * (relative 2^-11 of each factor, tests/test_kernels.c), and it is what makes
 * gemma logits equal llama.cpp's (NMSE 1e-8 instead of 1.5e-7 on
 * ../shared/reference/arch). */
static float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * x * (1.0f + 0.044715f * x * x)));
}

void kern_geglu_ref(float *h, const float *g, const float *u, int64_t K) {
    for (int64_t i = 0; i < K; i++) h[i] = gelu_tanh(g[i]) * u[i];
}

static uint16_t k_gelu_f16[1 << 16];
static pthread_once_t k_gelu_once = PTHREAD_ONCE_INIT;
static void gelu_table_init(void) {
    for (int i = 0; i < 1 << 16; i++) k_gelu_f16[i] = kern_fp32_to_fp16(gelu_tanh(kern_fp16_to_fp32((uint16_t)i)));
}

void kern_geglu(float *h, const float *g, const float *u, int64_t K) {
    pthread_once(&k_gelu_once, gelu_table_init);
    for (int64_t i = 0; i < K; i++) {
        const float x = g[i];
        if (x <= -10.0f) h[i] = 0.0f;
        else if (x >= 10.0f) h[i] = x * u[i];
        else h[i] = kern_fp16_to_fp32(k_gelu_f16[kern_fp32_to_fp16(x)]) * u[i];
    }
}

/* ---- soft-capping: x = cap * tanh(x / cap) ---------------------------------------------- */
void kern_softcap(float *x, int64_t K, float cap) {
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < K; i++) x[i] = cap * tanhf(x[i] * inv);
}

/* ---- exp and sum (sampling) ------------------------------------------------------- */
double kern_exp_sum_ref(float *y, const float *x, int64_t n, float m, float s) {
    double t = 0;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf((x[i] - m) * s);
        t += y[i];
    }
    return t;
}

double kern_exp_sum(float *y, const float *x, int64_t n, float m, float s) {
#if defined(__x86_64__) || defined(_M_X64)
    if (kern_active_tier() >= KERN_TIER_AVX2) return kern_exp_sum_avx2(y, x, n, m, s);
#endif
    return kern_exp_sum_ref(y, x, n, m, s);
}

/* ---- RoPE ---------------------------------------------------------------------------
 * Angles follow llama2.c / ggml: theta_i = pos * base^(-2i/rope_dim), computed
 * in float with powf, cos/sin per pair.  The fast version computes the
 * per-pair frequencies once per call instead of once per head. */
void kern_rope_ref(float *x, int n_heads, int D, int pos, const kern_rope_params *p) {
    const int half = p->rope_dim / 2;
    const float ms = kern_rope_mscale(p);
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (int64_t)h * D;
        for (int i = 0; i < half; i++) {
            const float a = (float)pos * kern_rope_freq(p, i), c = cosf(a) * ms, s = sinf(a) * ms;
            const int i0 = p->neox ? i : 2 * i, i1 = p->neox ? i + half : 2 * i + 1;
            const float x0 = xh[i0], x1 = xh[i1];
            xh[i0] = x0 * c - x1 * s;
            xh[i1] = x0 * s + x1 * c;
        }
    }
}

void kern_rope(float *x, int n_heads, int D, int pos, const kern_rope_params *p) {
    enum { MAX_HALF = 512 };
    const int half = p->rope_dim / 2;
    CORE_ASSERT(half <= MAX_HALF);
    float cs[MAX_HALF], sn[MAX_HALF];
    const float ms = kern_rope_mscale(p);
    for (int i = 0; i < half; i++) {
        const float a = (float)pos * kern_rope_freq(p, i);
        cs[i] = cosf(a) * ms;
        sn[i] = sinf(a) * ms;
    }
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (int64_t)h * D;
        if (p->neox) {
            for (int i = 0; i < half; i++) {
                const float x0 = xh[i], x1 = xh[i + half];
                xh[i] = x0 * cs[i] - x1 * sn[i];
                xh[i + half] = x0 * sn[i] + x1 * cs[i];
            }
        } else {
            for (int i = 0; i < half; i++) {
                const float x0 = xh[2 * i], x1 = xh[2 * i + 1];
                xh[2 * i] = x0 * cs[i] - x1 * sn[i];
                xh[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
}
