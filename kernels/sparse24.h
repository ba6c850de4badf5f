/* kernels/sparse24.h - 2:4 semi-structured sparse weight types.
 *
 * In every group of 4 consecutive weights of a row (along K, the input
 * dimension) at most 2 are non-zero; only those 2 values are stored, in
 * order, with the 2-bit position (0..3) of each inside its group.
 *
 *   S24_F16 (type 1150): blocks of 32 weights = 8 groups = 16 kept values:
 *     v[16]: the kept values as IEEE halves, in slots: slot k (0..15)
 *     holds a value of group 4*(k/8) + kern_s24f16_grp[k%8] (groups 0,0,
 *     2,2,1,1,3,3 of each half block: the order in-lane vpermilps yields);
 *     idx (u32): bits 2k..2k+1 = position (0..3) in its group of slot k's
 *     value.  36 bytes per 32 weights (9 bits/weight; F16 dense: 16).
 *     Pairs with F32 activations: the kernel gathers the 2 activations of
 *     each group (no activation rounding at all).
 *   S24_Q8 (type 1151): blocks of 64 weights = 16 groups = 32 kept values:
 *     d (half): scale, value = q * d (q in -127..127, absmax over the 32
 *     kept values); idx[8]: 64 bits of positions, laid out for AVX2 (read
 *     as two little-endian u32 words w[0], w[1]): kept value j has its
 *     position at bit 8*(j%4) + 2*((j/4)%4) of word j/16; q[32]: the kept
 *     values.  42 bytes per 64 weights (5.25 bits/weight; Q8_0: 8.5).
 *     Pairs with S24_A8 activations (kept values 0..15 meet the first 32
 *     activations, 16..31 the next 32, as integer dot products).
 *   S24_A8 (type 1152, activations only): blocks of 64 = two halves of 32,
 *     each with its own scale (absmax / 127, kept as float), laid out for
 *     the S24_Q8 kernel: d[8] = the first half's scale 4 times, then the
 *     second's; x[32] = q[0..16) q[32..48), y[32] = q[16..32) q[48..64), so
 *     each 128-bit lane of x and y holds what the same lane of the weights
 *     needs (no lane-crossing shuffles, no scale conversions per block).
 * Within a group the two kept positions are ascending and distinct; a
 * group with fewer than 2 non-zeros stores zeros at some unused position.
 * from_float keeps the 2 largest |x| of each group (ties: lower position):
 * it is exact on rows that already satisfy 2:4. */
#ifndef KVANT_KERNELS_SPARSE24_H
#define KVANT_KERNELS_SPARSE24_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/types.h"

#define KT_S24_F16 1150
#define KT_S24_Q8 1151
#define KT_S24_A8 1152

#define QK_S24_F16 32
#define QK_S24_Q8 64

typedef struct {
    uint32_t idx;
    uint16_t v[QK_S24_F16 / 2];
} block_s24_f16;
static_assert(sizeof(block_s24_f16) == 4 + QK_S24_F16, "block_s24_f16 size");

typedef struct {
    uint16_t d;
    uint8_t idx[8];
    int8_t q[QK_S24_Q8 / 2];
} block_s24_q8;
static_assert(sizeof(block_s24_q8) == 2 + 8 + QK_S24_Q8 / 2, "block_s24_q8 size");

typedef struct {
    float d[8];
    int8_t x[32], y[32];
} block_s24_a8;
static_assert(sizeof(block_s24_a8) == 32 + 64, "block_s24_a8 size");

/* S24_F16: the group (0..3 within its half block of 16 weights) of slot k % 8 */
static const int kern_s24f16_grp[8] = {0, 0, 2, 2, 1, 1, 3, 3};

/* position (0..3 within its group) of kept value j of an S24_Q8 block */
static inline int kern_s24q8_pos(const block_s24_q8 *b, int j) {
    const int w = j / 16, bit = 8 * (j % 4) + 2 * ((j / 4) % 4);
    return (b->idx[4 * w + bit / 8] >> (bit % 8)) & 3;
}

/* the activation byte at dense position i (0..63) of an S24_A8 block:
 * lane i / 32 of x (i % 32 < 16) or of y */
static inline int8_t kern_s24a8_at(const block_s24_a8 *a, int i) {
    const int half = i / 32, k = i % 32;
    return k < 16 ? a->x[16 * half + k] : a->y[16 * half + k - 16];
}

/* A model's 2:4 matrices are repacked at load into 8-row groups with
 * tiles of their own (kernels/repack_s24.c); the row-major kernels of
 * sparse24_avx2.c / sparse24_avx512.c serve kern_matmul (KVANT_REPACK=0,
 * and callers that do not pack).
 * Decode (one activation row) streams every weight row once from memory,
 * and the S24 tiles read R <= 4 rows at a time: too few streams for the
 * hardware prefetchers (Intel Xeon, tinyllama-1.1b S24_F16 tg32, 2 threads:
 * 8-11 t/s without; 12-13 with a T0 prefetch 1024 bytes ahead; 14-15.5
 * adding an L2 prefetch 8192 ahead).  The tiles call this once per step of
 * two blocks (72 or 84 bytes), so two lines each keep every line covered.
 * Prefetches never fault: running past a row's end is harmless. */
#define KERN_S24_PF_L1 1024
#define KERN_S24_PF_L2 8192
static inline void kern_s24_prefetch(const void *x, size_t bx, int R, size_t off) {
    for (int r = 0; r < R; r++) {
        const char *p = (const char *)x + (size_t)r * bx + off;
        __builtin_prefetch(p + KERN_S24_PF_L1, 0, 3);
        __builtin_prefetch(p + KERN_S24_PF_L1 + 64, 0, 3);
        __builtin_prefetch(p + KERN_S24_PF_L2, 0, 2);
        __builtin_prefetch(p + KERN_S24_PF_L2 + 64, 0, 2);
    }
}

/* _ref rows of the type table (kernels/types.c) */
void kern_dequant_s24_f16_ref(const void *x, float *y, int64_t n);
void kern_quant_s24_f16_ref(const float *x, void *y, int64_t n);
void kern_vec_dot_s24_f16_f32_ref(int64_t n, float *s, const void *x, const void *y);
void kern_dequant_s24_q8_ref(const void *x, float *y, int64_t n);
void kern_quant_s24_q8_ref(const float *x, void *y, int64_t n);
void kern_vec_dot_s24_q8_a8_ref(int64_t n, float *s, const void *x, const void *y);
void kern_dequant_s24_a8_ref(const void *x, float *y, int64_t n);
void kern_quant_s24_a8_ref(const float *x, void *y, int64_t n);

#endif
