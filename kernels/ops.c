/* ops.c - elementwise kernels: RMSNorm, softmax, SwiGLU, RoPE; fast and _ref.
 *
 * The "fast" versions here are the ones the model calls; at this tier they
 * differ from _ref only in accumulation order (partial sums), which the
 * SIMD tiers will keep.  Tolerances are in tests/test_kernels.c. */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/tiers.h"

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
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (int64_t)h * D;
        for (int i = 0; i < half; i++) {
            const float freq = 1.0f / powf(p->base, (float)(2 * i) / (float)p->rope_dim);
            const float a = (float)pos * freq, c = cosf(a), s = sinf(a);
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
    for (int i = 0; i < half; i++) {
        const float freq = 1.0f / powf(p->base, (float)(2 * i) / (float)p->rope_dim);
        const float a = (float)pos * freq;
        cs[i] = cosf(a);
        sn[i] = sinf(a);
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
