/* kernels/tiers.h - private to kernels/: how dispatch.c builds one tier's
 * table of operations from the per-ISA files.
 *
 * dispatch.c fills tier k as a copy of tier k-1 and then calls tier k's
 * install function, which overwrites only the members it has a faster
 * version of; so every member of every tier is set, falling back to the
 * next lower tier (and at the bottom to the _ref row of the type table).
 *
 * ops has KT_GGML_COUNT entries indexed by type number.  The AVX2 and
 * AVX-512 files exist only on x86-64 and must be installed only after the
 * CPU has been checked for their instruction sets. */
#ifndef KVANT_KERNELS_TIERS_H
#define KVANT_KERNELS_TIERS_H

#include "kernels/types.h"

void kern_tier_scalar_install(kern_type_ops *ops);
void kern_tier_avx2_install(kern_type_ops *ops);   /* needs AVX2, FMA, F16C */
/* needs AVX-512 F/BW/VL/DQ/VNNI (and AVX2, FMA, F16C); the BF16 dot uses
 * vdpbf16ps only when has_bf16 (AVX512_BF16), otherwise keeps the lower tier's */
void kern_tier_avx512_install(kern_type_ops *ops, bool has_bf16);
/* element-wise ops (kernels/ops_avx2.c); kernels/ops.c calls them at the avx2 tier and above */
void kern_swiglu_avx2(float *h, const float *g, const float *u, int64_t K);
double kern_exp_sum_avx2(float *y, const float *x, int64_t n, float m, float s);
/* the 2:4 sparse types' AVX2 kernels (kernels/sparse24_avx2.c), into their two entries */
void kern_sparse24_avx2_install(kern_type_ops *s24_f16, kern_type_ops *s24_q8, kern_type_ops *s24_a8);
/* their AVX-512 kernels (kernels/sparse24_avx512.c; S24_A8 keeps the AVX2 quantizer) */
void kern_sparse24_avx512_install(kern_type_ops *s24_f16, kern_type_ops *s24_q8);

#endif
