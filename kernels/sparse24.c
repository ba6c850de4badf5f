/* sparse24.c - _ref (spec) routines of the 2:4 sparse types
 * (layouts in kernels/sparse24.h). */
#include <math.h>
#include <string.h>

#include "kernels/quants.h"
#include "kernels/sparse24.h"

/* the 2 positions kept in group x[0..4): the 2 largest |x|, ties to the
 * lower position; ascending */
static void keep2(const float *x, int *p0, int *p1) {
    int a = 0;
    for (int i = 1; i < 4; i++)
        if (fabsf(x[i]) > fabsf(x[a])) a = i;
    int b = a == 0 ? 1 : 0;
    for (int i = 0; i < 4; i++)
        if (i != a && fabsf(x[i]) > fabsf(x[b])) b = i;
    *p0 = a < b ? a : b;
    *p1 = a < b ? b : a;
}

/* ---- S24_F16 -------------------------------------------------------------------- */
void kern_quant_s24_f16_ref(const float *x, void *vy, int64_t n) {
    block_s24_f16 *y = vy;
    for (int64_t b = 0; b < n / QK_S24_F16; b++, x += QK_S24_F16) {
        uint32_t idx = 0;
        for (int k = 0; k < QK_S24_F16 / 2; k += 2) { /* slots k, k+1: the two kept of one group */
            const int g = 4 * (k / 8) + kern_s24f16_grp[k % 8];
            int p0, p1;
            keep2(x + 4 * g, &p0, &p1);
            idx |= (uint32_t)p0 << (2 * k) | (uint32_t)p1 << (2 * k + 2);
            y[b].v[k] = kern_fp32_to_fp16(x[4 * g + p0]);
            y[b].v[k + 1] = kern_fp32_to_fp16(x[4 * g + p1]);
        }
        y[b].idx = idx;
    }
}

void kern_dequant_s24_f16_ref(const void *vx, float *y, int64_t n) {
    const block_s24_f16 *x = vx;
    for (int64_t b = 0; b < n / QK_S24_F16; b++, y += QK_S24_F16) {
        memset(y, 0, QK_S24_F16 * sizeof *y);
        for (int k = 0; k < QK_S24_F16 / 2; k++)
            y[16 * (k / 8) + 4 * kern_s24f16_grp[k % 8] + ((x[b].idx >> (2 * k)) & 3)] += kern_fp16_to_fp32(x[b].v[k]);
    }
}

/* y: n floats.  Sum in slot order. */
void kern_vec_dot_s24_f16_f32_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_s24_f16 *x = vx;
    const float *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_S24_F16; b++, y += QK_S24_F16)
        for (int k = 0; k < QK_S24_F16 / 2; k++)
            sum += kern_fp16_to_fp32(x[b].v[k]) * y[16 * (k / 8) + 4 * kern_s24f16_grp[k % 8] + ((x[b].idx >> (2 * k)) & 3)];
    *s = sum;
}

/* ---- S24_Q8 ---------------------------------------------------------------------- */
void kern_quant_s24_q8_ref(const float *x, void *vy, int64_t n) {
    block_s24_q8 *y = vy;
    for (int64_t b = 0; b < n / QK_S24_Q8; b++, x += QK_S24_Q8) {
        float kept[QK_S24_Q8 / 2];
        int pos[QK_S24_Q8 / 2];
        float amax = 0.0f;
        for (int g = 0; g < QK_S24_Q8 / 4; g++) {
            keep2(x + 4 * g, &pos[2 * g], &pos[2 * g + 1]);
            for (int i = 0; i < 2; i++) {
                kept[2 * g + i] = x[4 * g + pos[2 * g + i]];
                if (fabsf(kept[2 * g + i]) > amax) amax = fabsf(kept[2 * g + i]);
            }
        }
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = kern_fp32_to_fp16(d);
        memset(y[b].idx, 0, sizeof y[b].idx);
        for (int j = 0; j < QK_S24_Q8 / 2; j++) {
            y[b].q[j] = (int8_t)roundf(kept[j] * id);
            const int w = j / 16, bit = 8 * (j % 4) + 2 * ((j / 4) % 4);
            y[b].idx[4 * w + bit / 8] |= (uint8_t)(pos[j] << (bit % 8));
        }
    }
}

void kern_dequant_s24_q8_ref(const void *vx, float *y, int64_t n) {
    const block_s24_q8 *x = vx;
    for (int64_t b = 0; b < n / QK_S24_Q8; b++, y += QK_S24_Q8) {
        const float d = kern_fp16_to_fp32(x[b].d);
        memset(y, 0, QK_S24_Q8 * sizeof *y);
        for (int j = 0; j < QK_S24_Q8 / 2; j++) y[4 * (j / 2) + kern_s24q8_pos(&x[b], j)] += (float)x[b].q[j] * d;
    }
}

void kern_quant_s24_a8_ref(const float *x, void *vy, int64_t n) {
    block_s24_a8 *y = vy;
    for (int64_t b = 0; b < n / QK_S24_Q8; b++, x += QK_S24_Q8) {
        for (int h = 0; h < 2; h++) {
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * h + i]));
            const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
            for (int k = 0; k < 4; k++) y[b].d[4 * h + k] = d;
            for (int i = 0; i < 32; i++) {
                const int8_t q = (int8_t)roundf(x[32 * h + i] * id);
                if (i < 16) y[b].x[16 * h + i] = q;
                else y[b].y[16 * h + i - 16] = q;
            }
        }
    }
}

void kern_dequant_s24_a8_ref(const void *vx, float *y, int64_t n) {
    const block_s24_a8 *x = vx;
    for (int64_t b = 0; b < n / QK_S24_Q8; b++, y += QK_S24_Q8)
        for (int i = 0; i < QK_S24_Q8; i++) y[i] = (float)kern_s24a8_at(&x[b], i) * x[b].d[4 * (i / 32)];
}

/* y: n / 64 S24_A8 blocks.  Per weight block: two exact integer sums (one
 * per half of 32 activations), each scaled by d_w * d_a, summed in order. */
void kern_vec_dot_s24_q8_a8_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_s24_q8 *x = vx;
    const block_s24_a8 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_S24_Q8; b++) {
        const float dw = kern_fp16_to_fp32(x[b].d);
        for (int h = 0; h < 2; h++) {
            int32_t isum = 0;
            for (int j = 16 * h; j < 16 * h + 16; j++)
                isum += (int32_t)x[b].q[j] * kern_s24a8_at(&y[b], 4 * (j / 2) + kern_s24q8_pos(&x[b], j));
            sum += (float)isum * (dw * y[b].d[4 * h]);
        }
    }
    *s = sum;
}
