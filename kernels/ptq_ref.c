/* ptq_ref.c - the spec of kvant's PTQ types (kernels/ptq.h): bit packing,
 * codes, dequantization and dot products, plain C.
 *
 * Shapes: n elements per row; groups of G = 32/64/128 (a block), or the
 * whole row for per-channel / per-tensor types.  Activations: Q8_0 rows
 * (groups) or F32 rows (per-row types). */
#include <math.h>

#include "kernels/ptq.h"
#include "kernels/quants.h"

void kern_ptq_pack(const uint8_t *u, int64_t n, int bits, uint8_t *out) {
    const size_t nb = kern_ptq_packed_bytes(n, bits);
    memset(out, 0, nb);
    uint64_t bit = 0;
    for (int64_t i = 0; i < n; i++, bit += (uint64_t)bits) {
        const uint32_t v = (uint32_t)u[i] << (bit & 7); /* at most 8 + 7 bits */
        out[bit >> 3] |= (uint8_t)v;
        if ((bit & 7) + (uint64_t)bits > 8) out[(bit >> 3) + 1] |= (uint8_t)(v >> 8);
    }
}

void kern_ptq_unpack(const uint8_t *in, int64_t n, int bits, uint8_t *u) {
    const uint32_t mask = (1u << bits) - 1;
    uint64_t bit = 0;
    for (int64_t i = 0; i < n; i++, bit += (uint64_t)bits) {
        uint32_t v = in[bit >> 3];
        if ((bit & 7) + (uint64_t)bits > 8) v |= (uint32_t)in[(bit >> 3) + 1] << 8;
        u[i] = (uint8_t)((v >> (bit & 7)) & mask);
    }
}

void kern_ptq_codes(const float *x, int64_t n, int bits, float d, int z, uint8_t *u) {
    const int umax = (1 << bits) - 1;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int64_t i = 0; i < n; i++) {
        int q = (int)lrintf(x[i] * id) + z; /* lrintf: nearest, ties to even */
        u[i] = (uint8_t)(q < 0 ? 0 : q > umax ? umax : q);
    }
}

void kern_ptq_range(const float *x, int64_t n, int scheme, int bits, float *d, int *z) {
    if (scheme == KERN_PTQ_ABSMAX) {
        float amax = 0.0f;
        for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
        *d = kern_fp16_to_fp32(kern_fp32_to_fp16(amax / (float)((1 << (bits - 1)) - 1)));
        *z = 1 << (bits - 1);
        return;
    }
    float mn = 0.0f, mx = 0.0f;
    for (int64_t i = 0; i < n; i++) { mn = fminf(mn, x[i]); mx = fmaxf(mx, x[i]); }
    const int umax = (1 << bits) - 1;
    *d = kern_fp16_to_fp32(kern_fp32_to_fp16((mx - mn) / (float)umax));
    int zz = *d > 0.0f ? (int)lrintf(-mn / *d) : 0;
    *z = zz < 0 ? 0 : zz > umax ? umax : zz;
}

size_t kern_ptq_write(uint8_t *out, int scheme, int bits, float d, int z, const uint8_t *u, int64_t n) {
    const uint16_t h = kern_fp32_to_fp16(d);
    memcpy(out, &h, 2);
    if (scheme == KERN_PTQ_ZEROPOINT) out[2] = (uint8_t)z;
    kern_ptq_pack(u, n, bits, out + KERN_PTQ_HDR(scheme));
    return KERN_PTQ_HDR(scheme) + kern_ptq_packed_bytes(n, bits);
}

/* header of a block / row: d and z */
static inline void read_hdr(const uint8_t *p, int scheme, int bits, float *d, int *z) {
    uint16_t h;
    memcpy(&h, p, 2);
    *d = kern_fp16_to_fp32(h);
    *z = scheme == KERN_PTQ_ZEROPOINT ? p[2] : 1 << (bits - 1);
}

size_t kern_ptq_row_bytes(int t, int64_t n) {
    int s = 0, b = 2, g = 0;
    if (!kern_ptq_decode(t, &s, &b, &g) || n < 0) return 0;
    const int G = kern_ptq_group(g);
    if (G) return n % G ? 0 : (size_t)(n / G) * KERN_PTQ_BLOCK_BYTES(s, b, G);
    return KERN_PTQ_HDR(s) + kern_ptq_packed_bytes(n, b);
}

void kern_ptq_dequant_ref(int t, const void *vx, float *y, int64_t n) {
    int s = 0, b = 2, g = 0;
    kern_ptq_decode(t, &s, &b, &g);
    const int G = kern_ptq_group(g);
    const int64_t len = G ? G : n; /* elements per block (the row for per-row types) */
    const uint8_t *x = vx;
    uint8_t u[128];
    for (int64_t i0 = 0; i0 < n; i0 += len) {
        float d;
        int z;
        read_hdr(x, s, b, &d, &z);
        const uint8_t *p = x + KERN_PTQ_HDR(s);
        for (int64_t j0 = 0; j0 < len; j0 += 128) { /* 128 codes at a time (byte-aligned: 128*b/8) */
            const int64_t m = len - j0 < 128 ? len - j0 : 128;
            kern_ptq_unpack(p + j0 * b / 8, m, b, u);
            for (int64_t j = 0; j < m; j++) y[i0 + j0 + j] = d * (float)((int)u[j] - z);
        }
        x += KERN_PTQ_HDR(s) + kern_ptq_packed_bytes(len, b);
    }
}

void kern_ptq_quant_ref(int t, const float *x, void *vy, int64_t n) {
    int s = 0, b = 2, g = 0;
    kern_ptq_decode(t, &s, &b, &g);
    const int G = kern_ptq_group(g);
    const int64_t len = G ? G : n;
    uint8_t *y = vy;
    uint8_t u[128];
    for (int64_t i0 = 0; i0 < n; i0 += len) {
        float d;
        int z;
        kern_ptq_range(x + i0, len, s, b, &d, &z);
        uint16_t h = kern_fp32_to_fp16(d);
        memcpy(y, &h, 2);
        if (s == KERN_PTQ_ZEROPOINT) y[2] = (uint8_t)z;
        uint8_t *p = y + KERN_PTQ_HDR(s);
        for (int64_t j0 = 0; j0 < len; j0 += 128) {
            const int64_t m = len - j0 < 128 ? len - j0 : 128;
            kern_ptq_codes(x + i0 + j0, m, b, d, z, u);
            kern_ptq_pack(u, m, b, p + j0 * b / 8);
        }
        y += KERN_PTQ_HDR(s) + kern_ptq_packed_bytes(len, b);
    }
}

/* Groups: x a row of PTQ blocks, y a Q8_0 row.  For each 32 elements, the
 * integer sums sum (u - c) a and sum a are exact; d * d_a scales them.
 * Per-row types: y an F32 row; sum in float, in element order. */
void kern_ptq_vec_dot_ref(int t, int64_t n, float *s_out, const void *vx, const void *vy) {
    int s = 0, b = 2, g = 0;
    kern_ptq_decode(t, &s, &b, &g);
    const int G = kern_ptq_group(g);
    const uint8_t *x = vx;
    uint8_t u[128];
    if (!G) {
        const float *a = vy;
        float d;
        int z;
        read_hdr(x, s, b, &d, &z);
        const uint8_t *p = x + KERN_PTQ_HDR(s);
        float sum = 0.0f;
        for (int64_t j0 = 0; j0 < n; j0 += 128) {
            const int64_t m = n - j0 < 128 ? n - j0 : 128;
            kern_ptq_unpack(p + j0 * b / 8, m, b, u);
            for (int64_t j = 0; j < m; j++) sum += (float)((int)u[j] - z) * a[j0 + j];
        }
        *s_out = d * sum;
        return;
    }
    const block_q8_0 *a = vy;
    const int c = 1 << (b - 1);
    float sum = 0.0f;
    for (int64_t i0 = 0; i0 < n; i0 += G) {
        float d;
        int z;
        read_hdr(x, s, b, &d, &z);
        kern_ptq_unpack(x + KERN_PTQ_HDR(s), G, b, u);
        float bs = 0.0f;
        for (int k = 0; k < G / 32; k++, a++) {
            int32_t sw = 0, sa = 0;
            for (int j = 0; j < 32; j++) {
                sw += ((int)u[k * 32 + j] - c) * a->qs[j];
                sa += a->qs[j];
            }
            bs += kern_fp16_to_fp32(a->d) * (float)(sw + (c - z) * sa);
        }
        sum += d * bs;
        x += KERN_PTQ_BLOCK_BYTES(s, b, G);
    }
    *s_out = sum;
}

/* ---- per-type wrappers for the type table ---------------------------------- */
#define PTQ_WRAP_(S, B, G, g)                                                                                   \
    void kern_ptq_dequant_##S##B##_##G##_ref(const void *x, float *y, int64_t n) {                             \
        kern_ptq_dequant_ref(KERN_PTQ_T(S, B, G, g), x, y, n);                                                 \
    }                                                                                                          \
    void kern_ptq_quant_##S##B##_##G##_ref(const float *x, void *y, int64_t n) {                               \
        kern_ptq_quant_ref(KERN_PTQ_T(S, B, G, g), x, y, n);                                                   \
    }                                                                                                          \
    void kern_ptq_vec_dot_##S##B##_##G##_ref(int64_t n, float *s, const void *x, const void *y) {              \
        kern_ptq_vec_dot_ref(KERN_PTQ_T(S, B, G, g), n, s, x, y);                                              \
    }                                                                                                          \
    size_t kern_ptq_row_bytes_##S##B##_##G(int64_t n) { return kern_ptq_row_bytes(KERN_PTQ_T(S, B, G, g), n); }
KERN_PTQ_FOR_EACH(PTQ_WRAP_)
