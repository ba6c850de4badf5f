/* kernels/repack.h - weights repacked into interleaved groups of 8 rows.
 *
 * Why: the row-major kern_matmul tile converts every (row, activation,
 * block) integer dot to float on its own.  With 8 weight rows interleaved
 * in 4-byte chunks, one 256-bit register holds the same 4 k-positions of 8
 * rows; a broadcast of 4 activation bytes then feeds all 8 rows with one
 * vpmaddubsw, the integer dots of a block land in the 8 lanes already, and
 * the conversion and scaling cost one instruction per block for 8 outputs.
 * llama.cpp repacks Q4_0 the same way at load (its "CPU_REPACK" buffers).
 *
 * Packed layout (G = ceil(N / 8) groups, nb = K / 32 blocks per row): group
 * g holds rows 8g .. 8g+7 (missing rows of the last group are zero), block
 * after block; one packed block of the group:
 *   Q8_0x8 (272 bytes): d[8] (fp16, row r's scale), qs[8][32]: chunk j
 *       (k = 4j .. 4j+3) of row r at qs[j][4r .. 4r+3]
 *   Q4_0x8 (144 bytes): d[8], qs[4][32]: byte qs[j][4r + i] is row r's
 *       Q4_0 byte 4j+i, i.e. element 4j+i in the low nibble and element
 *       16+4j+i in the high nibble (x = (q - 8) d)
 * The packed bytes are a permutation of the Q8_0 / Q4_0 blocks, so the
 * packed matrix has the file's size.
 *
 * Arithmetic (the spec; kern_matmul_packed_ref is it in plain C, and every
 * tier gives bit-identical outputs for any T and any split, so a token's
 * logits do not depend on what it was batched with): activations are
 * rounded to Q8_0 by the Q8_0 quantizer; per output (row n, activation t):
 *   acc = 0; for b in block order:
 *       i_b = exact integer dot of the block's weight and activation bytes
 *       acc = fmaf((float)i_b, d_w[n][b] * d_a[t][b], acc)
 *   y[t][n] = acc
 * (i_b fits float exactly: |i_b| <= 32 * 128 * 127 < 2^24; the product of
 * two fp16 scales is exact in float.)  Versus kern_matmul_ref this differs
 * only by the activation rounding and float summation order, as
 * kern_matmul does; tests/test_repack.c bounds it. */
#ifndef KVANT_KERNELS_REPACK_H
#define KVANT_KERNELS_REPACK_H

#include "core/core.h"
#include "kernels/types.h"

#define KERN_PACK_ROWS 8

/* true if wtype has a packed layout (Q4_0, Q8_0) */
bool kern_pack_supported(int wtype);
/* bytes of the packed N x K matrix (K a multiple of 32) */
size_t kern_pack_bytes(int wtype, int64_t N, int64_t K);
/* Packs row groups [g0, g1) of W (N rows of K elements, row-major, as in
 * the file) into dst (kern_pack_bytes; any alignment).  Groups are
 * independent, so threads may pack disjoint ranges. */
void kern_pack(const void *W, int wtype, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1);
/* and back (tests): row n of the packed matrix as the original row bytes */
void kern_unpack_row(const void *P, int wtype, int64_t N, int64_t K, int64_t n, void *row);

/* y[T][N] = x[T][K] . W^T for packed W, threads splitting the row groups.
 * scratch: kern_matmul_scratch_bytes(T, K). */
void kern_matmul_packed(core_pool *pool, void *scratch, const void *P, int wtype, const float *x, float *y, int T,
                        int64_t N, int64_t K);
/* The spec above in plain C, one thread (allocates its scratch). */
void kern_matmul_packed_ref(const void *P, int wtype, const float *x, float *y, int T, int64_t N, int64_t K);

/* ---- private to kernels/: the per-ISA tile ----------------------------------------
 * Outputs of one group (8 rows) for C <= 4 activation rows:
 *   y[c * ldy + r] for r < 8, c < C
 * w: the group's nb packed blocks; a: C Q8_0 activation rows, ba bytes
 * apart; ad / as: per activation row (bn apart) its nb block scales as
 * floats and, for Q4_0, its nb block sums of q. */
typedef void (*kern_pack_tile_fn)(int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a,
                                  size_t ba, const float *ad, const int32_t *as, size_t bn);
/* the AVX2 tile of wtype (kernels/repack_avx2.c), NULL if none */
kern_pack_tile_fn kern_pack_tile_avx2(int wtype);

/* ---- F16 (kernels/repack_f16.c): element k of 8 rows side by side -------------------
 * Layout and spec in repack_f16.c: activations rounded to F16, one fmaf
 * chain in k order per output. */
size_t kern_pack_f16_bytes(int64_t N, int64_t K);
void kern_pack_f16(const void *W, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1);
void kern_unpack_f16_row(const void *P, int64_t K, int64_t n, void *row);
void kern_matmul_packed_f16(core_pool *pool, void *scratch, const void *P, const float *x, float *y, int T, int64_t N,
                            int64_t K);
void kern_matmul_packed_f16_ref(const void *P, const float *x, float *y, int T, int64_t N, int64_t K);
/* G (1, 2 or 8) groups x C (1..4) activation rows: y[c * ldy + 8 gi + r] */
typedef void (*kern_pack_f16_tile_fn)(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w,
                                      const float *a, size_t ba);
kern_pack_f16_tile_fn kern_pack_f16_tile_avx2(void);

#endif
