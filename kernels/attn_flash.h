/* kernels/attn_flash.h - private to kernels/attn_flash*.c: the inner loops of
 * kern_attn_flash, one table per ISA.  attn_flash.c has the portable C
 * table (always available, the one tested at tiers ref and scalar);
 * attn_flash_avx2.c has the AVX2 + FMA + F16C one, used when the active
 * kernel tier is avx2 or above.
 *
 * Letters: R query rows of a block, D head dim, Dp = D rounded up to 8,
 * n positions in a tile, nc = n rounded up to 8.  ld* are row strides in
 * floats, multiples of 8; scratch pointers are 32-byte aligned; row
 * pointers (K[j], V[j]: D or Dp floats, maybe straight from the cache)
 * need only float alignment.
 *
 * pf: 0, or how many bytes past each K or V row to ask for (prefetch into
 * L1) as the products take the row, Dp elements of 2 (F16) or 4 bytes: a
 * decode step reads each head's rows as one run (attn_flash.c
 * range_heads), so this asks for the run's lines pf bytes ahead of their
 * use, one request per line, spread over the work.  No result depends on
 * it. */
#ifndef KVANT_KERNELS_ATTN_FLASH_H
#define KVANT_KERNELS_ATTN_FLASH_H

#include <stdint.h>

typedef struct {
    /* S[r][j] = sum_d Q[r][d] * K[j][d]   r < R, j < nc, d < Dp  (K[j]: row
     * pointers, Dp a multiple of 8).  Each S[r][j] is the same chain in
     * every call of a table: 8 lanes, lane i summing over d = i mod 8 in
     * order, then ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)); so it
     * depends neither on R nor on the other rows and keys. */
    void (*scores_rows)(int R, int Dp, int nc, const float *Q, int ldq, const float *const *K, float *S, int lds,
                        int pf);
    /* A[r][c] += sum_j P[r][j] * V[j][c]   r < R, c < Dp, j < n  (V[j]: row pointers) */
    void (*pv)(int R, int Dp, int n, const float *P, int ldp, const float *const *V, float *A, int lda, int pf);
    /* max of s[0..n), n >= 1 */
    float (*row_max)(const float *s, int n);
    /* s[j] = 2^(s[j] - m) for j < nv, 0 for nv <= j < nc; returns the sum.
     * Needs s[j] <= m for j < nv; nc a multiple of 8. */
    float (*row_exp2)(float *s, int nv, int nc, float m);
    /* a[0..n) *= c */
    void (*row_scale)(float *a, int n, float c);
    /* as pv and scores_rows with F16 rows (straight from an F16 cache),
     * converted in registers: the same results as converting the rows first */
    void (*pv_f16)(int R, int Dp, int n, const float *P, int ldp, const uint16_t *const *V, float *A, int lda, int pf);
    void (*scores_rows_f16)(int R, int Dp, int nc, const float *Q, int ldq, const uint16_t *const *K, float *S,
                            int lds, int pf);
    /* y[0..n) = IEEE half x[0..n) as floats */
    void (*f16_to_f32)(const uint16_t *x, float *y, int n);
    /* y[0..32*nb) = nb Q8_0 blocks (kernels/quants.h) as floats */
    void (*q8_0_to_f32)(const void *x, float *y, int nb);
} attn_flash_ops;

extern const attn_flash_ops attn_flash_ops_c;
#if defined(__x86_64__)
extern const attn_flash_ops attn_flash_ops_avx2; /* needs AVX2, FMA, F16C */
/* kernels/attn_flash_avx512.c: overwrites the two products (scores, pv;
 * float and F16 rows) with 512-bit versions bit-identical to the AVX2
 * ones; needs AVX-512 F/BW/DQ/VL */
void attn_flash_avx512_install(attn_flash_ops *ops);
#endif

#endif
