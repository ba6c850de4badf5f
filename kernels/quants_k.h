/* kernels/quants_k.h - ggml's K-quants: super-blocks of QK_K = 256 weights
 * split into sub-blocks of 16 or 32, each with its own small integer scale
 * (and minimum) that a per-super-block fp16 scale multiplies.  Layouts are
 * byte-identical to ggml's (ggml-common.h); the _ref routines
 * (kernels/quants_k.c, kernels/vec_dot_k_ref.c) are the spec, and the
 * quantizers reproduce llama.cpp's quantize_row_q*_K_ref bit for bit.
 *
 * Element order inside a super-block (e = 0..255):
 *   Q2_K, Q3_K: qs byte 32*(e/128) + e%32 holds element e in bits
 *               2*((e%128)/32) .. +1;  Q3_K's third bit is bit e/32 of
 *               hmask[e%32] (set: q in 0..3, clear: q - 4).
 *   Q4_K, Q5_K: qs byte 32*(e/64) + e%32, low nibble if e%64 < 32, else
 *               high;  Q5_K's fifth bit is bit e/32 of qh[e%32].
 *   Q6_K:       low 4 bits in ql byte 64*(e/128) + e%32 + 32*(((e%128)/32)&1),
 *               nibble ((e%128)/64); high 2 bits in qh byte 32*(e/128) + e%32,
 *               bits 2*((e%128)/32) .. +1;  q - 32.
 * Sub-block s covers elements [16s, 16s+16) (Q2_K, Q3_K, Q6_K) or
 * [32s, 32s+32) (Q4_K, Q5_K).
 */
#ifndef KVANT_KERNELS_QUANTS_K_H
#define KVANT_KERNELS_QUANTS_K_H

#include "kernels/quants.h" /* QK_K, kern_half (quants.h includes this file back) */

#define K_SCALE_SIZE 12 /* 8 six-bit scales + 8 six-bit mins (Q4_K, Q5_K) */

/* x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4),  q in 0..3 */
typedef struct {
    uint8_t scales[QK_K / 16]; /* 4-bit scale | 4-bit min << 4 per sub-block of 16 */
    uint8_t qs[QK_K / 4];      /* 2-bit quants */
    kern_half d, dmin;
} block_q2_K;
static_assert(sizeof(block_q2_K) == QK_K / 16 + QK_K / 4 + 2 * 2, "block_q2_K size");

/* x = d * (sc[s] - 32) * q,  q in -4..3, sc 6-bit (see kern_q3_k_scale) */
typedef struct {
    uint8_t hmask[QK_K / 8]; /* third bit of each quant */
    uint8_t qs[QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];      /* 16 six-bit scales */
    kern_half d;
} block_q3_K;
static_assert(sizeof(block_q3_K) == QK_K / 8 + QK_K / 4 + 12 + 2, "block_q3_K size");

/* x = d * sc[s] * q - dmin * m[s],  q in 0..15, sc/m 6-bit (kern_k4_scale_min) */
typedef struct {
    kern_half d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 2, "block_q4_K size");

/* as Q4_K with q in 0..31 */
typedef struct {
    kern_half d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8]; /* fifth bit */
    uint8_t qs[QK_K / 2]; /* low 4 bits */
} block_q5_K;
static_assert(sizeof(block_q5_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 8 + QK_K / 2, "block_q5_K size");

/* x = d * scales[s] * q,  q in -32..31 */
typedef struct {
    uint8_t ql[QK_K / 2];     /* low 4 bits */
    uint8_t qh[QK_K / 4];     /* high 2 bits */
    int8_t scales[QK_K / 16]; /* 8-bit scales */
    kern_half d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, "block_q6_K size");

/* activations for the K-quant dot products: x = d * q */
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16]; /* sum of qs over each group of 16 */
} block_q8_K;
static_assert(sizeof(block_q8_K) == 4 + QK_K + QK_K / 16 * 2, "block_q8_K size");

/* the names kernels/types.c uses for the bytes per block */
#define KERN_Q2_K_BYTES sizeof(block_q2_K)
#define KERN_Q3_K_BYTES sizeof(block_q3_K)
#define KERN_Q4_K_BYTES sizeof(block_q4_K)
#define KERN_Q5_K_BYTES sizeof(block_q5_K)
#define KERN_Q6_K_BYTES sizeof(block_q6_K)
#define KERN_Q8_K_BYTES sizeof(block_q8_K)

/* Scale and minimum of sub-block j (0..7) of a Q4_K / Q5_K block: 6 bits
 * each.  Bytes 0..3 hold scales 0..3 (low 6 bits), bytes 4..7 mins 0..3;
 * scales/mins 4..7 keep their low 4 bits in the nibbles of bytes 8..11 and
 * their top 2 bits in the top bits of bytes 0..3 / 4..7. */
static inline void kern_k4_scale_min(int j, const uint8_t q[K_SCALE_SIZE], uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Scale of sub-block j (0..15) of a Q3_K block, -32..31: low 4 bits in the
 * nibbles of bytes 0..7 (j < 8: low nibble of byte j, else high nibble of
 * byte j-8), top 2 bits in byte 8 + j%4 at bit 2*(j/4). */
static inline int kern_q3_k_scale(const uint8_t q[12], int j) {
    const int lo = j < 8 ? q[j] & 0xF : q[j - 8] >> 4;
    const int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* One super-block as integers: element e is (d * sc[s]) * q[e] - dmin * mn[s]
 * with s = e / sub.  The _ref dequantizers and dot products are written on
 * this view. */
typedef struct {
    int8_t q[QK_K];     /* quants, offsets removed (Q3_K -4..3, Q6_K -32..31) */
    int sc[QK_K / 16];  /* sub-block scales (first QK_K/sub used) */
    int mn[QK_K / 16];  /* sub-block minimums; 0 for Q3_K, Q6_K */
    int sub;            /* elements per sub-block: 16 or 32 */
    bool has_min;       /* Q2_K, Q4_K, Q5_K */
    float d, dmin;      /* super-block scales (dmin 0 without minimums) */
} kern_kblock;

/* Unpack one block of each type into the integer view (cost: 256 loads). */
void kern_unpack_q2_k(const block_q2_K *b, kern_kblock *u);
void kern_unpack_q3_k(const block_q3_K *b, kern_kblock *u);
void kern_unpack_q4_k(const block_q4_K *b, kern_kblock *u);
void kern_unpack_q5_k(const block_q5_K *b, kern_kblock *u);
void kern_unpack_q6_k(const block_q6_K *b, kern_kblock *u);

/* y[0..n) = dequantized x;  n a multiple of QK_K (as ggml's dequantize_row_q*_K) */
void kern_dequant_q2_k_ref(const void *x, float *y, int64_t n);
void kern_dequant_q3_k_ref(const void *x, float *y, int64_t n);
void kern_dequant_q4_k_ref(const void *x, float *y, int64_t n);
void kern_dequant_q5_k_ref(const void *x, float *y, int64_t n);
void kern_dequant_q6_k_ref(const void *x, float *y, int64_t n);
void kern_dequant_q8_k_ref(const void *x, float *y, int64_t n);

/* y = x quantized exactly as llama.cpp's quantize_row_q*_K_ref (no
 * importance matrix): the same searches, the same float operations in the
 * same order, so the bytes are identical.  n a multiple of QK_K.  Cost: a
 * few dozen passes over each sub-block (the scale searches). */
void kern_quant_q2_k_ref(const float *x, void *y, int64_t n);
void kern_quant_q3_k_ref(const float *x, void *y, int64_t n);
void kern_quant_q4_k_ref(const float *x, void *y, int64_t n);
void kern_quant_q5_k_ref(const float *x, void *y, int64_t n);
void kern_quant_q6_k_ref(const float *x, void *y, int64_t n);
void kern_quant_q8_k_ref(const float *x, void *y, int64_t n);

/* *s = x . y for a K-quant row x and a Q8_K row y of n elements */
void kern_vec_dot_q2_k_q8_k_ref(int64_t n, float *s, const void *x, const void *y);
void kern_vec_dot_q3_k_q8_k_ref(int64_t n, float *s, const void *x, const void *y);
void kern_vec_dot_q4_k_q8_k_ref(int64_t n, float *s, const void *x, const void *y);
void kern_vec_dot_q5_k_q8_k_ref(int64_t n, float *s, const void *x, const void *y);
void kern_vec_dot_q6_k_q8_k_ref(int64_t n, float *s, const void *x, const void *y);

#endif
