/* vec_dot_scalar.c - the SCALAR tier: portable C that the compiler can
 * unroll and vectorize for any target, same results as _ref up to float
 * summation order.
 *
 * Differences from kernels/vec_dot_ref.c and quants_ref.c, and why the
 * results stay the spec's:
 *  - half floats convert through a table of all 65536 values (filled with
 *    a branch-free exact bit trick; same value as kern_fp16_to_fp32 for
 *    every input, a NaN stays a NaN);
 *  - 4-bit and 5-bit weights unpack 8 at a time in 64-bit words; each
 *    block's integer sum is exact, as in _ref;
 *  - 16-bit elements are read through an unaligned-safe type instead of a
 *    memcpy per element;
 *  - F32/F16/BF16 dots keep 8 partial sums (the F16/BF16 products of two
 *    halves are exact in float, so only the summation order differs from
 *    _ref's double sum);
 *  - quantized dots: each block's integer sum is exact; blocks are summed
 *    in the same order as _ref;
 *  - roundf (a libm call) is replaced by an exact round-half-away-from-zero
 *    on the truncated value, so the quantizers give _ref's bytes.
 * Dimension letter: n = elements in the row (a multiple of the block size). */
#include <math.h>
#include <string.h>

#include "kernels/quants.h"
#include "kernels/tiers.h"

typedef uint16_t u16_any __attribute__((aligned(1), may_alias)); /* 16-bit element at any address */

/* exact IEEE half -> float for every input (M. Dukhan's FP16 library trick):
 * normals/inf/NaN by rebiasing the exponent with one multiply, subnormals
 * by subtracting a magic bias */
static inline float h2f(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
    const float normalized = kern_fp32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float denormalized = kern_fp32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
    const uint32_t bits = two_w < (1u << 27) ? kern_fp32_to_bits(denormalized) : kern_fp32_to_bits(normalized);
    return kern_fp32_from_bits(sign | bits);
}

static inline float bf2f(uint16_t b) { return kern_fp32_from_bits((uint32_t)b << 16); }

/* roundf(v) for |v| < 2^31: truncation and the remainder are exact, so
 * stepping away from zero when |remainder| >= 0.5 rounds half away */
static inline int round_away(float v) {
    const int t = (int)v;
    const float r = v - (float)t;
    return t + (r >= 0.5f) - (r <= -0.5f);
}

/* ---- float dots: x, y rows of n elements; *s = sum x[i] * y[i] ------------------ */
static void vec_dot_f32(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += x[i + j] * y[i + j];
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

/* every half's float value (256 KiB, filled once by the install below):
 * a load is cheaper than converting in portable C */
static float g_f16[65536];

/* x, y: n IEEE halves */
static void vec_dot_f16(int64_t n, float *s, const void *vx, const void *vy) {
    const u16_any *x = vx, *y = vy;
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += g_f16[x[i + j]] * g_f16[y[i + j]];
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) sum += g_f16[x[i]] * g_f16[y[i]];
    *s = sum;
}

/* x, y: n bfloat16 */
static void vec_dot_bf16(int64_t n, float *s, const void *vx, const void *vy) {
    const u16_any *x = vx, *y = vy;
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += bf2f(x[i + j]) * bf2f(y[i + j]);
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) sum += bf2f(x[i]) * bf2f(y[i]);
    *s = sum;
}

/* ---- quantized dots: x n/32 weight blocks, y n/32 activation blocks ---------------- */
/* sum over 32 elements of u[j] * y[j] - off * y[j] (exact in int) */
static inline int dot32(const uint8_t *u, const int8_t *y, int off) {
    int16_t a[32], c[32]; /* widened first: compilers then use 16-bit multiply-add pairs */
    for (int j = 0; j < 32; j++) {
        a[j] = (int16_t)(u[j] - off);
        c[j] = y[j];
    }
    int s = 0;
    for (int j = 0; j < 32; j++) s += a[j] * c[j];
    return s;
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15), then high
 * (16..31), 8 at a time in 64-bit words (per byte, so any endianness) */
static inline void nibbles32(const uint8_t qs[16], uint8_t u[32]) {
    const uint64_t m = 0x0F0F0F0F0F0F0F0Full;
    uint64_t w[2];
    memcpy(w, qs, 16);
    const uint64_t o[4] = {w[0] & m, w[1] & m, (w[0] >> 4) & m, (w[1] >> 4) & m};
    memcpy(u, o, 32);
}

/* g_bit16[v][i] = 0x10 if bit i of v is set: the 5th bits of 8 elements at once */
static uint8_t g_bit16[256][8];

/* Q5: u[j] |= 0x10 where bit j of qh (read as _ref reads it) is set */
static inline void add_bit5(const uint8_t qh8[4], uint8_t u[32]) {
    uint32_t qh;
    memcpy(&qh, qh8, 4);
    for (int k = 0; k < 4; k++) {
        uint64_t w, h;
        memcpy(&w, u + 8 * k, 8);
        memcpy(&h, g_bit16[(qh >> (8 * k)) & 0xff], 8);
        w |= h;
        memcpy(u + 8 * k, &w, 8);
    }
}

/* Q4_0 x (x = (q - 8) d) . Q8_0 y */
static void vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q4_0 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK4_0; b++) {
        uint8_t u[32];
        nibbles32(x[b].qs, u);
        sum += (float)dot32(u, y[b].qs, 8) * (g_f16[x[b].d] * g_f16[y[b].d]);
    }
    *s = sum;
}

/* Q4_1 x (x = q d + m) . Q8_1 y (y.s = d_y * sum q_y) */
static void vec_dot_q4_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q4_1 *x = vx;
    const block_q8_1 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK4_1; b++) {
        uint8_t u[32];
        nibbles32(x[b].qs, u);
        sum += (float)dot32(u, y[b].qs, 0) * (g_f16[x[b].d] * g_f16[y[b].d]) + g_f16[x[b].m] * g_f16[y[b].s];
    }
    *s = sum;
}

/* Q5_0 x (x = (q - 16) d) . Q8_0 y */
static void vec_dot_q5_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q5_0 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK5_0; b++) {
        uint8_t u[32];
        nibbles32(x[b].qs, u);
        add_bit5(x[b].qh, u);
        sum += (float)dot32(u, y[b].qs, 16) * (g_f16[x[b].d] * g_f16[y[b].d]);
    }
    *s = sum;
}

/* Q5_1 x (x = q d + m) . Q8_1 y */
static void vec_dot_q5_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q5_1 *x = vx;
    const block_q8_1 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK5_1; b++) {
        uint8_t u[32];
        nibbles32(x[b].qs, u);
        add_bit5(x[b].qh, u);
        sum += (float)dot32(u, y[b].qs, 0) * (g_f16[x[b].d] * g_f16[y[b].d]) + g_f16[x[b].m] * g_f16[y[b].s];
    }
    *s = sum;
}

/* Q8_0 x . Q8_0 y */
static void vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q8_0 *x = vx, *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int16_t a[32], c[32];
        for (int j = 0; j < 32; j++) {
            a[j] = x[b].qs[j];
            c[j] = y[b].qs[j];
        }
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += a[j] * c[j];
        sum += (float)sumi * (g_f16[x[b].d] * g_f16[y[b].d]);
    }
    *s = sum;
}

/* ---- activation quantizers: x n floats -> y in the type's layout ----------------------
 * Same bytes as _ref for finite inputs.  (For NaN or infinite inputs, or a
 * block whose 127 / amax overflows, _ref converts an out-of-range float to
 * int8, which C leaves undefined; no tier promises its bytes there.) */

/* Q8_0: d = amax / 127, q = round(x / d) */
static void quant_q8_0(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float *xb = x + b * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) {
            const float a = fabsf(xb[j]);
            amax = a > amax ? a : amax; /* fmaxf without the call; a NaN never wins, as in fmaxf */
        }
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[b].d = kern_fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[b].qs[j] = (int8_t)round_away(xb[j] * id);
    }
}

/* Q8_1: as Q8_0, plus s = d * sum(q) */
static void quant_q8_1(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        const float *xb = x + b * QK8_1;
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) {
            const float a = fabsf(xb[j]);
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            const int q = round_away(xb[j] * id);
            y[b].qs[j] = (int8_t)q;
            sum += (int8_t)q;
        }
        y[b].d = kern_fp32_to_fp16(d);
        y[b].s = kern_fp32_to_fp16((float)sum * d);
    }
}

static void quant_f16(const float *x, void *vy, int64_t n) {
    u16_any *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = kern_fp32_to_fp16(x[i]);
}

static void quant_bf16(const float *x, void *vy, int64_t n) {
    u16_any *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = kern_fp32_to_bf16(x[i]);
}

/* ---- dequantizers of the float formats (x n elements -> y n floats) ------------------- */
static void dequant_f16(const void *vx, float *y, int64_t n) {
    const u16_any *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = g_f16[x[i]];
}

static void dequant_bf16(const void *vx, float *y, int64_t n) {
    const u16_any *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = bf2f(x[i]);
}

/* Fills the tables (dispatch.c calls this once, before any use) and the ops. */
void kern_tier_scalar_install(kern_type_ops *ops) {
    for (uint32_t h = 0; h < 65536; h++) g_f16[h] = h2f((uint16_t)h);
    for (int v = 0; v < 256; v++)
        for (int i = 0; i < 8; i++) g_bit16[v][i] = (uint8_t)(((v >> i) & 1) << 4);
    ops[KT_F32].vec_dot = vec_dot_f32;
    ops[KT_F16].vec_dot = vec_dot_f16;
    ops[KT_F16].from_float = quant_f16;
    ops[KT_F16].to_float = dequant_f16;
    ops[KT_BF16].vec_dot = vec_dot_bf16;
    ops[KT_BF16].from_float = quant_bf16;
    ops[KT_BF16].to_float = dequant_bf16;
    ops[KT_Q4_0].vec_dot = vec_dot_q4_0_q8_0;
    ops[KT_Q4_1].vec_dot = vec_dot_q4_1_q8_1;
    ops[KT_Q5_0].vec_dot = vec_dot_q5_0_q8_0;
    ops[KT_Q5_1].vec_dot = vec_dot_q5_1_q8_1;
    ops[KT_Q8_0].vec_dot = vec_dot_q8_0_q8_0;
    ops[KT_Q8_0].from_float = quant_q8_0;
    ops[KT_Q8_1].from_float = quant_q8_1;
}
