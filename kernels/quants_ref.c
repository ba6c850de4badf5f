/* quants_ref.c - reference (de)quantization for ggml's block formats.
 * Rounding follows ggml's quantize_row_*_ref exactly, so files written by
 * kvant decode identically in llama.cpp. */
#include <math.h>
#include <string.h>

#include "kernels/quants.h"

#define H2F kern_fp16_to_fp32
#define F2H kern_fp32_to_fp16

/* ---- plain float formats ------------------------------------------------ */
void kern_dequant_f32_ref(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }
void kern_quant_f32_ref(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

void kern_dequant_f16_ref(const void *vx, float *y, int64_t n) {
    const uint8_t *x = vx;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, x + 2 * i, 2);
        y[i] = H2F(h);
    }
}
void kern_quant_f16_ref(const float *x, void *vy, int64_t n) {
    uint8_t *y = vy;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = F2H(x[i]);
        memcpy(y + 2 * i, &h, 2);
    }
}
void kern_dequant_bf16_ref(const void *vx, float *y, int64_t n) {
    const uint8_t *x = vx;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, x + 2 * i, 2);
        y[i] = kern_bf16_to_fp32(h);
    }
}
void kern_quant_bf16_ref(const float *x, void *vy, int64_t n) {
    uint8_t *y = vy;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = kern_fp32_to_bf16(x[i]);
        memcpy(y + 2 * i, &h, 2);
    }
}

/* ---- Q4_0: 32 x 4-bit, one scale; low nibbles hold x[0..16), high x[16..32) */
void kern_dequant_q4_0_ref(const void *vx, float *y, int64_t n) {
    const block_q4_0 *x = vx;
    for (int64_t b = 0; b < n / QK4_0; b++) {
        const float d = H2F(x[b].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[b * QK4_0 + j] = ((x[b].qs[j] & 0x0f) - 8) * d;
            y[b * QK4_0 + j + QK4_0 / 2] = ((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}
void kern_quant_q4_0_ref(const float *x, void *vy, int64_t n) {
    block_q4_0 *y = vy;
    for (int64_t b = 0; b < n / QK4_0; b++) {
        const float *xb = x + b * QK4_0;
        float amax = 0.0f, max = 0.0f; /* max keeps the sign of the largest |x| */
        for (int j = 0; j < QK4_0; j++)
            if (fabsf(xb[j]) > amax) { amax = fabsf(xb[j]); max = xb[j]; }
        const float d = max / -8, id = d ? 1.0f / d : 0.0f;
        y[b].d = F2H(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int8_t q0 = (int8_t)(xb[j] * id + 8.5f), q1 = (int8_t)(xb[j + QK4_0 / 2] * id + 8.5f);
            const uint8_t a = q0 < 15 ? (uint8_t)q0 : 15, c = q1 < 15 ? (uint8_t)q1 : 15;
            y[b].qs[j] = a | (uint8_t)(c << 4);
        }
    }
}

/* ---- Q4_1: 32 x 4-bit, scale and minimum ------------------------------------ */
void kern_dequant_q4_1_ref(const void *vx, float *y, int64_t n) {
    const block_q4_1 *x = vx;
    for (int64_t b = 0; b < n / QK4_1; b++) {
        const float d = H2F(x[b].d), m = H2F(x[b].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[b * QK4_1 + j] = (x[b].qs[j] & 0x0f) * d + m;
            y[b * QK4_1 + j + QK4_1 / 2] = (x[b].qs[j] >> 4) * d + m;
        }
    }
}
void kern_quant_q4_1_ref(const float *x, void *vy, int64_t n) {
    block_q4_1 *y = vy;
    for (int64_t b = 0; b < n / QK4_1; b++) {
        const float *xb = x + b * QK4_1;
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK4_1; j++) {
            if (xb[j] < min) min = xb[j];
            if (xb[j] > max) max = xb[j];
        }
        const float d = (max - min) / 15, id = d ? 1.0f / d : 0.0f;
        y[b].d = F2H(d);
        y[b].m = F2H(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const uint8_t q0 = (uint8_t)(int8_t)((xb[j] - min) * id + 0.5f);
            const uint8_t q1 = (uint8_t)(int8_t)((xb[j + QK4_1 / 2] - min) * id + 0.5f);
            y[b].qs[j] = (q0 < 15 ? q0 : 15) | (uint8_t)((q1 < 15 ? q1 : 15) << 4);
        }
    }
}

/* ---- Q5_0 / Q5_1: 4 low bits in qs (as Q4), the 5th bit of element j in
 *      bit j of qh (little-endian uint32) ------------------------------------ */
static uint32_t load_qh(const uint8_t qh[4]) { uint32_t v; memcpy(&v, qh, 4); return v; }

void kern_dequant_q5_0_ref(const void *vx, float *y, int64_t n) {
    const block_q5_0 *x = vx;
    for (int64_t b = 0; b < n / QK5_0; b++) {
        const float d = H2F(x[b].d);
        const uint32_t qh = load_qh(x[b].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const uint8_t h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
            y[b * QK5_0 + j] = (((x[b].qs[j] & 0x0f) | h0) - 16) * d;
            y[b * QK5_0 + j + QK5_0 / 2] = (((x[b].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}
void kern_quant_q5_0_ref(const float *x, void *vy, int64_t n) {
    block_q5_0 *y = vy;
    for (int64_t b = 0; b < n / QK5_0; b++) {
        const float *xb = x + b * QK5_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK5_0; j++)
            if (fabsf(xb[j]) > amax) { amax = fabsf(xb[j]); max = xb[j]; }
        const float d = max / -16, id = d ? 1.0f / d : 0.0f;
        y[b].d = F2H(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            int8_t q0 = (int8_t)(xb[j] * id + 16.5f), q1 = (int8_t)(xb[j + QK5_0 / 2] * id + 16.5f);
            const uint8_t a = q0 < 31 ? (uint8_t)q0 : 31, c = q1 < 31 ? (uint8_t)q1 : 31;
            y[b].qs[j] = (a & 0x0f) | (uint8_t)((c & 0x0f) << 4);
            qh |= ((uint32_t)(a & 0x10) >> 4) << j;
            qh |= ((uint32_t)(c & 0x10) >> 4) << (j + QK5_0 / 2);
        }
        memcpy(y[b].qh, &qh, 4);
    }
}

void kern_dequant_q5_1_ref(const void *vx, float *y, int64_t n) {
    const block_q5_1 *x = vx;
    for (int64_t b = 0; b < n / QK5_1; b++) {
        const float d = H2F(x[b].d), m = H2F(x[b].m);
        const uint32_t qh = load_qh(x[b].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const uint8_t h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
            y[b * QK5_1 + j] = ((x[b].qs[j] & 0x0f) | h0) * d + m;
            y[b * QK5_1 + j + QK5_1 / 2] = ((x[b].qs[j] >> 4) | h1) * d + m;
        }
    }
}
void kern_quant_q5_1_ref(const float *x, void *vy, int64_t n) {
    block_q5_1 *y = vy;
    for (int64_t b = 0; b < n / QK5_1; b++) {
        const float *xb = x + b * QK5_1;
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK5_1; j++) {
            if (xb[j] < min) min = xb[j];
            if (xb[j] > max) max = xb[j];
        }
        const float d = (max - min) / 31, id = d ? 1.0f / d : 0.0f;
        y[b].d = F2H(d);
        y[b].m = F2H(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const uint8_t a = (uint8_t)((xb[j] - min) * id + 0.5f);
            const uint8_t c = (uint8_t)((xb[j + QK5_1 / 2] - min) * id + 0.5f);
            y[b].qs[j] = (a & 0x0f) | (uint8_t)((c & 0x0f) << 4);
            qh |= ((uint32_t)(a & 0x10) >> 4) << j;
            qh |= ((uint32_t)(c & 0x10) >> 4) << (j + QK5_1 / 2);
        }
        memcpy(y[b].qh, &qh, 4);
    }
}

/* ---- Q8_0 / Q8_1: 32 x int8, symmetric ------------------------------------ */
void kern_dequant_q8_0_ref(const void *vx, float *y, int64_t n) {
    const block_q8_0 *x = vx;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float d = H2F(x[b].d);
        for (int j = 0; j < QK8_0; j++) y[b * QK8_0 + j] = x[b].qs[j] * d;
    }
}
void kern_quant_q8_0_ref(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float *xb = x + b * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[b].d = F2H(d);
        for (int j = 0; j < QK8_0; j++) y[b].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

void kern_dequant_q8_1_ref(const void *vx, float *y, int64_t n) {
    const block_q8_1 *x = vx;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        const float d = H2F(x[b].d);
        for (int j = 0; j < QK8_1; j++) y[b * QK8_1 + j] = x[b].qs[j] * d;
    }
}
void kern_quant_q8_1_ref(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        const float *xb = x + b * QK8_1;
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            y[b].qs[j] = (int8_t)roundf(xb[j] * id);
            sum += y[b].qs[j];
        }
        y[b].d = F2H(d);
        y[b].s = F2H(sum * d);
    }
}
