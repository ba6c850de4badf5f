/* kernels/int8.h - INT8 x INT8 matrix multiplication with per-row scales
 * (W8A8 and the INT8 half of LLM.int8).
 *
 * Dimension letters: T activation rows (tokens), N weight rows (output
 * channels), K input features, Kp = K rounded up to KERN_I8_KALIGN (rows
 * are zero-padded, so padding adds nothing to a dot product).
 *
 *   y[t][n] = (float)acc[t][n] * (sx[t] * sw[n]),
 *   acc[t][n] = sum_k xq[t][k] * wq[n][k]   (exact int32)
 *
 * Integer values must lie in [-127, 127] (the quantizer below guarantees
 * it): the AVX2 tier multiplies |x| by w with x's sign (vpmaddubsw), which
 * is exact only then, and |acc| <= Kp * 127^2 fits int32 for Kp < 133,000.
 * Because the int32 sums are exact in every tier and the float epilogue is
 * shared, every tier gives BIT-IDENTICAL results to kern_i8_gemm_ref.
 *
 * Tiers (chosen from kern_active_tier(), so KVANT_TIER applies):
 *   ref/scalar  plain loops (kernels/int8.c)
 *   avx2        vpsignb + vpmaddubsw + vpmaddwd, 4x2 register tiles (int8_avx2.c)
 *   avx512      AVX-512 VNNI vpdpbusd, 4x4 tiles (int8_avx512.c; needs F/BW/VNNI) */
#ifndef KVANT_KERNELS_INT8_H
#define KVANT_KERNELS_INT8_H

#include "core/core.h"
#include "kernels/types.h"

#define KERN_I8_KALIGN 64
static inline int64_t kern_i8_kpad(int64_t K) { return (K + KERN_I8_KALIGN - 1) / KERN_I8_KALIGN * KERN_I8_KALIGN; }

/* Quantizes T rows of K floats (stride K) to int8 rows of Kp bytes
 * (stride Kp, zero-padded), symmetric absmax per row:
 *   s[t] = max_k |x[t][k]| / 127,  q = round-half-even(x / s) in [-127, 127].
 * skip: NULL, or K flags; flagged columns are left out of the absmax and
 * stored as 0 (LLM.int8's outlier columns).  A row of zeros gets s = 0. */
void kern_i8_quant_rows(const float *x, int T, int64_t K, int64_t Kp, int8_t *q, float *s, const uint8_t *skip);

/* A tile of exact integer dot products, the unit each tier provides:
 *   out[c * ldo + r] = sum_{k < Kp} w[r * ldw + k] * x[c * ldx + k]
 * for r < nr <= 4, c < nc <= 4.  Kp a multiple of KERN_I8_KALIGN. */
typedef void (*kern_i8_tile_fn)(int64_t Kp, int nr, int nc, int32_t *out, size_t ldo, const int8_t *w, size_t ldw,
                                const int8_t *x, size_t ldx);
void kern_i8_tile_ref(int64_t Kp, int nr, int nc, int32_t *out, size_t ldo, const int8_t *w, size_t ldw,
                      const int8_t *x, size_t ldx);
void kern_i8_tile_avx2(int64_t Kp, int nr, int nc, int32_t *out, size_t ldo, const int8_t *w, size_t ldw,
                       const int8_t *x, size_t ldx);
void kern_i8_tile_avx512(int64_t Kp, int nr, int nc, int32_t *out, size_t ldo, const int8_t *w, size_t ldw,
                         const int8_t *x, size_t ldx);
/* the tile of a tier (falls back to the next lower one it has); NULL if
 * this CPU cannot run `tier` */
kern_i8_tile_fn kern_i8_tile_for(kern_tier tier);

/* y[T][N] (= or +=, by accumulate) from xq[T][Kp], sx[T], wq[N][Kp], sw[N],
 * with the active tier's tile; threads split the N rows, activation rows
 * are walked in blocks that stay in L2.  Allocates nothing. */
void kern_i8_gemm(core_pool *pool, const int8_t *xq, const float *sx, int T, const int8_t *wq, const float *sw,
                  float *y, int64_t N, int64_t Kp, bool accumulate);
/* the same with one given tile function, single-threaded (tests: every
 * tier against ref) */
void kern_i8_gemm_with(kern_i8_tile_fn tile, const int8_t *xq, const float *sx, int T, const int8_t *wq,
                       const float *sw, float *y, int64_t N, int64_t Kp, bool accumulate);
/* Reference: plain triple loop, the spec. */
void kern_i8_gemm_ref(const int8_t *xq, const float *sx, int T, const int8_t *wq, const float *sw, float *y,
                      int64_t N, int64_t Kp, bool accumulate);

#endif
