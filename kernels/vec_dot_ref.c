/* vec_dot_ref.c - reference dot products of a weight row with an
 * activation row of its paired type (the spec the SIMD tiers match).
 * Quantized pairs: per block of 32, an exact integer sum of q_w * q_a,
 * scaled by d_w * d_a (plus m_w * s_a for the types with a minimum, where
 * s_a = d_a * sum(q_a) is stored in the Q8_1 block); blocks summed in float. */
#include <string.h>

#include "kernels/quants.h"

#define H2F kern_fp16_to_fp32

void kern_vec_dot_f32_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

void kern_vec_dot_f16_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    double sum = 0.0; /* ggml sums F16 products in double */
    for (int64_t i = 0; i < n; i++) {
        uint16_t a, b;
        memcpy(&a, x + 2 * i, 2);
        memcpy(&b, y + 2 * i, 2);
        sum += (double)H2F(a) * (double)H2F(b);
    }
    *s = (float)sum;
}

void kern_vec_dot_bf16_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t a, b;
        memcpy(&a, x + 2 * i, 2);
        memcpy(&b, y + 2 * i, 2);
        sum += (double)kern_bf16_to_fp32(a) * (double)kern_bf16_to_fp32(b);
    }
    *s = (float)sum;
}

void kern_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q4_0 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK4_0; b++) {
        int sumi = 0;
        for (int j = 0; j < QK4_0 / 2; j++)
            sumi += ((x[b].qs[j] & 0x0f) - 8) * y[b].qs[j] + ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + QK4_0 / 2];
        sum += (float)sumi * (H2F(x[b].d) * H2F(y[b].d));
    }
    *s = sum;
}

void kern_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q4_1 *x = vx;
    const block_q8_1 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK4_1; b++) {
        int sumi = 0;
        for (int j = 0; j < QK4_1 / 2; j++)
            sumi += (x[b].qs[j] & 0x0f) * y[b].qs[j] + (x[b].qs[j] >> 4) * y[b].qs[j + QK4_1 / 2];
        sum += (float)sumi * (H2F(x[b].d) * H2F(y[b].d)) + H2F(x[b].m) * H2F(y[b].s);
    }
    *s = sum;
}

static uint32_t qh32(const uint8_t qh[4]) { uint32_t v; memcpy(&v, qh, 4); return v; }

void kern_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q5_0 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK5_0; b++) {
        const uint32_t qh = qh32(x[b].qh);
        int sumi = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int q0 = ((x[b].qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10)) - 16;
            const int q1 = ((x[b].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            sumi += q0 * y[b].qs[j] + q1 * y[b].qs[j + QK5_0 / 2];
        }
        sum += (float)sumi * (H2F(x[b].d) * H2F(y[b].d));
    }
    *s = sum;
}

void kern_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q5_1 *x = vx;
    const block_q8_1 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK5_1; b++) {
        const uint32_t qh = qh32(x[b].qh);
        int sumi = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int q0 = (x[b].qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10);
            const int q1 = (x[b].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
            sumi += q0 * y[b].qs[j] + q1 * y[b].qs[j + QK5_1 / 2];
        }
        sum += (float)sumi * (H2F(x[b].d) * H2F(y[b].d)) + H2F(x[b].m) * H2F(y[b].s);
    }
    *s = sum;
}

void kern_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q8_0 *x = vx, *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[b].qs[j] * y[b].qs[j];
        sum += (float)sumi * (H2F(x[b].d) * H2F(y[b].d));
    }
    *s = sum;
}
