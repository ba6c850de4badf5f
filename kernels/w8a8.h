/* kernels/w8a8.h - the stored W8A8 type (type number 1100, "W8A8"): INT8
 * weights with one F32 scale per output channel, run against INT8
 * activations with one scale per token (SmoothQuant's W8A8; the INT8 GEMM of
 * kernels/int8.h, but as a file's tensor type, so it loads and runs without
 * conversion).
 *
 * Row of n elements: F32 s | n x int8 q (q in [-127, 127]); w = q * s.
 * It is a per-row type (block_size 1, row_bytes): to_float and vec_dot take
 * exactly one row, activations are F32 rows.
 *
 * Arithmetic (the spec, kernels/int8.h's):  the activation row is quantized
 * by kern_i8_quant_rows (s_x = max|x| / 127, q_x = round-half-even(x / s_x)),
 * acc = sum_k q_w q_x (exact int32, n < 133,000), y = (float)acc * (s_x * s).
 * from_float_ref quantizes a row the same way (the weights' absmax).  The
 * packed 8-row form and its tiles: kernels/repack_w8a8.c. */
#ifndef KVANT_KERNELS_W8A8_H
#define KVANT_KERNELS_W8A8_H

#include "kernels/types.h"

#define KT_W8A8 1100
/* LLM.int8 stored (type 1101, "LLM_INT8"): the W8A8 row layout and functions,
 * but the matrix's outlier input columns are 0 in the int8 rows (and left
 * out of their scales) and kept in F16 in two companion tensors, NAME.outlier_cols
 * (I32, n_o column indices) and NAME.outliers (F16, n_o x rows).  The row
 * functions see the int8 part alone; the forward pass adds the rest
 * (kern_matmul_packed_outl, kernels/repack.h). */
#define KT_LLM_INT8 1101
#define KERN_W8A8_MAX_K 133000 /* |acc| <= K * 127^2 < 2^31 */

/* LLM.int8's outlier input columns of a W8A8-layout matrix (type LLM_INT8,
 * kernels/w8a8.h): n columns cols[i] (distinct, < K) whose weights are w[r *
 * n + i] (F16, row r), 0 in the int8 rows.  The spec, per output:
 *   y = the W8A8 int8 part with x's outlier columns left out of the
 *       activation quantization (kern_i8_quant_rows' skip: 0, and out of its
 *       absmax), then y = fmaf(x[cols[i]], w[r n + i], y) for i = 0 .. n-1. */
typedef struct kern_outliers {
    int n;
    const int32_t *cols;
    const uint16_t *w;
} kern_outliers;

void kern_w8a8_dequant_ref(const void *x, float *y, int64_t n);
void kern_w8a8_quant_ref(const float *x, void *y, int64_t n);
void kern_w8a8_vec_dot_ref(int64_t n, float *s, const void *x, const void *y);
size_t kern_w8a8_row_bytes(int64_t n);

#endif
