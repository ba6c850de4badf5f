/* kernels/quants.h - ggml's block layouts (byte-identical) and their _ref
 * dequantize / quantize routines.  The _ref routines are the spec: plain C,
 * one element at a time, the same rounding rules as ggml's reference
 * quantizers, so a file kvant writes decodes the same in llama.cpp. */
#ifndef KVANT_KERNELS_QUANTS_H
#define KVANT_KERNELS_QUANTS_H

#include <assert.h>
#include <stdint.h>

#include "kernels/types.h"

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256

typedef uint16_t kern_half; /* IEEE binary16 bits */

typedef struct { kern_half d; uint8_t qs[QK4_0 / 2]; } block_q4_0;            /* x = (q - 8) * d */
static_assert(sizeof(block_q4_0) == 2 + QK4_0 / 2, "block_q4_0 size");
typedef struct { kern_half d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;         /* x = q * d + m */
static_assert(sizeof(block_q4_1) == 4 + QK4_1 / 2, "block_q4_1 size");
typedef struct { kern_half d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0; /* x = (q - 16) * d */
static_assert(sizeof(block_q5_0) == 2 + 4 + QK5_0 / 2, "block_q5_0 size");
typedef struct { kern_half d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1; /* x = q * d + m */
static_assert(sizeof(block_q5_1) == 4 + 4 + QK5_1 / 2, "block_q5_1 size");
typedef struct { kern_half d; int8_t qs[QK8_0]; } block_q8_0;                 /* x = q * d */
static_assert(sizeof(block_q8_0) == 2 + QK8_0, "block_q8_0 size");
typedef struct { kern_half d, s; int8_t qs[QK8_1]; } block_q8_1;              /* s = d * sum(q) */
static_assert(sizeof(block_q8_1) == 4 + QK8_1, "block_q8_1 size");

/* K-quant super-blocks (block_q2_K .. block_q8_K) and their _ref routines */
#include "kernels/quants_k.h"

void kern_dequant_f32_ref(const void *x, float *y, int64_t n);
void kern_dequant_f16_ref(const void *x, float *y, int64_t n);
void kern_dequant_bf16_ref(const void *x, float *y, int64_t n);
void kern_dequant_q4_0_ref(const void *x, float *y, int64_t n);
void kern_dequant_q4_1_ref(const void *x, float *y, int64_t n);
void kern_dequant_q5_0_ref(const void *x, float *y, int64_t n);
void kern_dequant_q5_1_ref(const void *x, float *y, int64_t n);
void kern_dequant_q8_0_ref(const void *x, float *y, int64_t n);
void kern_dequant_q8_1_ref(const void *x, float *y, int64_t n);

void kern_quant_f32_ref(const float *x, void *y, int64_t n);
void kern_quant_f16_ref(const float *x, void *y, int64_t n);
void kern_quant_bf16_ref(const float *x, void *y, int64_t n);
void kern_quant_q4_0_ref(const float *x, void *y, int64_t n);
void kern_quant_q4_1_ref(const float *x, void *y, int64_t n);
void kern_quant_q5_0_ref(const float *x, void *y, int64_t n);
void kern_quant_q5_1_ref(const float *x, void *y, int64_t n);
void kern_quant_q8_0_ref(const float *x, void *y, int64_t n);
void kern_quant_q8_1_ref(const float *x, void *y, int64_t n);

/* dot products with the paired activation type (see kern_type_traits):
 * per block, an integer sum of products scaled by both block scales */
void kern_vec_dot_f32_ref(int64_t n, float *s, const void *x, const void *y);
void kern_vec_dot_f16_ref(int64_t n, float *s, const void *x, const void *y);
void kern_vec_dot_bf16_ref(int64_t n, float *s, const void *x, const void *y);
void kern_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void kern_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void kern_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void kern_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void kern_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);

#endif
