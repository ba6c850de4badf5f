/* zmm_emulated.h - the AVX-512 intrinsics kernels/repack_f16_avx512.c and
 * the S24_F16 zmm tile (kernels/repack_s24_tile.h) use, in AVX2 + FMA +
 * F16C, exactly: included before those files are compiled once more for
 * AVX2 (tests/repack_f16_avx512_emulated.c, tests/repack_avx512_emulated.c),
 * so the 512-bit F16, BF16 and S24_F16 tiles' logic (pairing, vpermw
 * interleave, odd K, odd group counts, the 2:4 lanes) is tested on CPUs
 * without AVX-512 too.
 *
 * A zmm is a GCC vector of 64 bytes (GCC splits its operations in two, and
 * casts between same-size vectors stay legal, as the kernel's
 * (__m512bh) casts need); each operation that must round as the
 * instruction does runs on the two ymm halves with the AVX2 instruction of
 * the same rounding: vfmadd231ps for _mm512_fmadd_ps, vcvtph2ps (exact)
 * for _mm512_cvtph_ps.  vdpbf16ps is its two FMAs per dword, element
 * 2i + 1 first: exactly the instruction where the caller sets MXCSR's FTZ
 * and DAZ (its flushes), as kernels/repack_f16_avx2.c's BF16 tile does and
 * tests/test_repack_f16.c checks against the spec. */
#ifndef KVANT_TESTS_ZMM_EMULATED_H
#define KVANT_TESTS_ZMM_EMULATED_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* the 64-byte vectors never cross a call (every function is inlined) */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float kvz_ps __attribute__((vector_size(64)));
typedef long long kvz_si __attribute__((vector_size(64)));

#define ZE static inline __attribute__((always_inline))
/* the two ymm halves of a zmm of type Z (float or integer), and back */
#define KVZ_HALVES(Z, Y, sfx)                                                                        \
    ZE Y kvz_lo_##sfx(Z v) { Y h; memcpy(&h, &v, 32); return h; }                                    \
    ZE Y kvz_hi_##sfx(Z v) { Y h; memcpy(&h, (const char *)&v + 32, 32); return h; }                 \
    ZE Z kvz_join_##sfx(Y lo, Y hi) {                                                                \
        Z v;                                                                                         \
        memcpy(&v, &lo, 32);                                                                         \
        memcpy((char *)&v + 32, &hi, 32);                                                            \
        return v;                                                                                    \
    }
KVZ_HALVES(kvz_ps, __m256, ps)
KVZ_HALVES(kvz_si, __m256i, si)
#undef KVZ_HALVES

ZE kvz_ps kvz_setzero_ps(void) { return (kvz_ps){0}; }
ZE kvz_ps kvz_set1_ps(float x) { return kvz_join_ps(_mm256_set1_ps(x), _mm256_set1_ps(x)); }
ZE kvz_si kvz_set1_epi32(int x) { return kvz_join_si(_mm256_set1_epi32(x), _mm256_set1_epi32(x)); }
ZE kvz_ps kvz_fmadd_ps(kvz_ps a, kvz_ps b, kvz_ps c) {
    return kvz_join_ps(_mm256_fmadd_ps(kvz_lo_ps(a), kvz_lo_ps(b), kvz_lo_ps(c)),
                       _mm256_fmadd_ps(kvz_hi_ps(a), kvz_hi_ps(b), kvz_hi_ps(c)));
}
ZE void kvz_storeu_ps(void *p, kvz_ps v) { memcpy(p, &v, 64); }
ZE kvz_si kvz_loadu_si512(const void *p) { kvz_si v; memcpy(&v, p, 64); return v; }
ZE kvz_ps kvz_cvtph_ps(__m256i h) {
    return kvz_join_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
}
ZE __m256i kvz_castsi512_si256(kvz_si v) { return kvz_lo_si(v); }
ZE kvz_si kvz_castsi256_si512(__m256i h) { return kvz_join_si(h, _mm256_setzero_si256()); }
ZE __m256i kvz_extracti64x4_epi64(kvz_si v, int i) { return i ? kvz_hi_si(v) : kvz_lo_si(v); }
ZE kvz_si kvz_setzero_si512(void) { return (kvz_si){0}; }
ZE kvz_si kvz_inserti64x4(kvz_si v, __m256i h, int i) {
    return i ? kvz_join_si(kvz_lo_si(v), h) : kvz_join_si(h, kvz_hi_si(v));
}
/* vpermw: word i of the result is word idx[i] mod n of v (n = 32 or 16) */
ZE void kvz_permw(const uint16_t *idx, const uint16_t *v, uint16_t *out, int n) {
    for (int i = 0; i < n; i++) out[i] = v[idx[i] & (n - 1)];
}
ZE kvz_si kvz_permutexvar_epi16(kvz_si idx, kvz_si v) {
    uint16_t ix[32], vv[32], o[32];
    memcpy(ix, &idx, 64), memcpy(vv, &v, 64);
    kvz_permw(ix, vv, o, 32);
    return kvz_loadu_si512(o);
}
ZE __m256i kvz_permutexvar_epi16_256(__m256i idx, __m256i v) {
    uint16_t ix[16], vv[16], o[16];
    memcpy(ix, &idx, 32), memcpy(vv, &v, 32);
    kvz_permw(ix, vv, o, 16);
    __m256i r;
    memcpy(&r, o, 32);
    return r;
}
/* vdpbf16ps on 8 dwords: acc += a.odd * b.odd, then += a.even * b.even,
 * each one FMA (BF16 -> float is exact: the word in the upper half) */
ZE __m256 kvz_dpbf16_256(__m256 acc, __m256i a, __m256i b) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    acc = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(a, hi)), _mm256_castsi256_ps(_mm256_and_si256(b, hi)),
                          acc);
    return _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(a, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(b, 16)),
                           acc);
}
ZE kvz_ps kvz_dpbf16_ps(kvz_ps acc, kvz_si a, kvz_si b) {
    return kvz_join_ps(kvz_dpbf16_256(kvz_lo_ps(acc), kvz_lo_si(a), kvz_lo_si(b)),
                       kvz_dpbf16_256(kvz_hi_ps(acc), kvz_hi_si(a), kvz_hi_si(b)));
}
/* for the 2:4 S24_F16 zmm tile (kernels/repack_s24_tile.h): vpermilps and
 * vpsrlvd act per 128-bit lane and per dword, so per ymm half as in AVX2 */
ZE kvz_si kvz_setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7, int e8, int e9, int e10,
                         int e11, int e12, int e13, int e14, int e15) {
    return kvz_join_si(_mm256_setr_epi32(e0, e1, e2, e3, e4, e5, e6, e7),
                       _mm256_setr_epi32(e8, e9, e10, e11, e12, e13, e14, e15));
}
ZE kvz_ps kvz_broadcast_f32x4(__m128 x) { return kvz_join_ps(_mm256_set_m128(x, x), _mm256_set_m128(x, x)); }
ZE kvz_ps kvz_permutevar_ps(kvz_ps v, kvz_si c) {
    return kvz_join_ps(_mm256_permutevar_ps(kvz_lo_ps(v), kvz_lo_si(c)), _mm256_permutevar_ps(kvz_hi_ps(v), kvz_hi_si(c)));
}
ZE kvz_si kvz_srlv_epi32(kvz_si v, kvz_si n) {
    return kvz_join_si(_mm256_srlv_epi32(kvz_lo_si(v), kvz_lo_si(n)), _mm256_srlv_epi32(kvz_hi_si(v), kvz_hi_si(n)));
}
ZE __m256 kvz_castps512_ps256(kvz_ps v) { return kvz_lo_ps(v); }
ZE __m256 kvz_extractf32x8_ps(kvz_ps v, int i) { return i ? kvz_hi_ps(v) : kvz_lo_ps(v); }
#undef ZE

/* the names the kernel uses (undefined first: GCC defines some intrinsics
 * that take immediates as macros when not optimizing) */
#undef __m512
#undef __m512i
#undef __m512bh
#undef __m256bh
#define __m512 kvz_ps
#define __m512i kvz_si
#define __m512bh kvz_si
#define __m256bh __m256i
#undef _mm512_setzero_ps
#undef _mm512_set1_ps
#undef _mm512_set1_epi32
#undef _mm512_fmadd_ps
#undef _mm512_storeu_ps
#undef _mm512_loadu_si512
#undef _mm512_cvtph_ps
#undef _mm512_castsi512_si256
#undef _mm512_castsi256_si512
#undef _mm512_inserti64x4
#undef _mm512_extracti64x4_epi64
#undef _mm512_setzero_si512
#undef _mm512_permutexvar_epi16
#undef _mm256_permutexvar_epi16
#undef _mm512_dpbf16_ps
#undef _mm256_dpbf16_ps
#undef _mm512_setr_epi32
#undef _mm512_broadcast_f32x4
#undef _mm512_permutevar_ps
#undef _mm512_srlv_epi32
#undef _mm512_castps512_ps256
#undef _mm512_extractf32x8_ps
#define _mm512_setzero_ps kvz_setzero_ps
#define _mm512_set1_ps kvz_set1_ps
#define _mm512_set1_epi32 kvz_set1_epi32
#define _mm512_fmadd_ps kvz_fmadd_ps
#define _mm512_storeu_ps kvz_storeu_ps
#define _mm512_loadu_si512 kvz_loadu_si512
#define _mm512_cvtph_ps kvz_cvtph_ps
#define _mm512_castsi512_si256 kvz_castsi512_si256
#define _mm512_castsi256_si512 kvz_castsi256_si512
#define _mm512_inserti64x4 kvz_inserti64x4
#define _mm512_extracti64x4_epi64 kvz_extracti64x4_epi64
#define _mm512_setzero_si512 kvz_setzero_si512
#define _mm512_permutexvar_epi16 kvz_permutexvar_epi16
#define _mm256_permutexvar_epi16 kvz_permutexvar_epi16_256
#define _mm512_dpbf16_ps kvz_dpbf16_ps
#define _mm256_dpbf16_ps kvz_dpbf16_256
#define _mm512_setr_epi32 kvz_setr_epi32
#define _mm512_broadcast_f32x4 kvz_broadcast_f32x4
#define _mm512_permutevar_ps kvz_permutevar_ps
#define _mm512_srlv_epi32 kvz_srlv_epi32
#define _mm512_castps512_ps256 kvz_castps512_ps256
#define _mm512_extractf32x8_ps kvz_extractf32x8_ps
#endif
