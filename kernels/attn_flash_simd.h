/* kernels/attn_flash_simd.h - private to kernels/attn_flash_avx2.c and
 * kernels/attn_flash_avx512.c: the pieces both tiers must share to give the
 * same bits (a row's 8 elements as floats, and the reduction tree of a
 * score's 8 lanes, kernels/attn_flash.h; the avx512 table sums the lanes
 * in the same order on zmm registers, its pairsum).  Needs AVX2 + FMA +
 * F16C. */
#ifndef KVANT_KERNELS_ATTN_FLASH_SIMD_H
#define KVANT_KERNELS_ATTN_FLASH_SIMD_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#define AI static inline __attribute__((always_inline))

/* 8 floats (or halves, converted exactly) of row `row` from element c */
AI __m256 ld8(const void *row, int c, const bool f16) {
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + c)))
               : _mm256_loadu_ps((const float *)row + c);
}

/* the lines of a row of `bytes` bytes, pf bytes further on, into L1
 * (kernels/attn_flash.h's pf; nothing when pf = 0) */
AI void pf_row(const void *row, int pf, int bytes) {
    if (!pf) return;
    const char *p = (const char *)row + pf;
    for (int o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

/* The tree of kernels/attn_flash.h for 8 accumulators a[0..7] (each one
 * score's 8 lanes): hadd pairs lanes (0+1, 2+3, ..), the second hadd the
 * pairs, and the two 128-bit halves are added last.  Returns the 8 scores. */
AI __m256 reduce8(const __m256 *a) {
    const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    /* h0 = [a0 L, a1 L, a2 L, a3 L | a0 H, a1 H, a2 H, a3 H], L = (l0+l1)+(l2+l3), H = (l4+l5)+(l6+l7) */
    return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
}

#endif
