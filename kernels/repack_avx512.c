/* repack_avx512.c - the AVX-512 VNNI tile of the packed 8-row groups
 * (kernels/repack.h): the layouts and the integer arithmetic of
 * repack_avx2.c, with vpdpbusd (AVX512_VNNI + VL, on 256-bit registers).
 *
 * vpdpbusd adds the four u8 x s8 products of each 32-bit lane to an int32
 * accumulator, exactly and without saturation, so one instruction does what
 * AVX2 spends vpmaddubsw + vpmaddwd + vpaddd on (and the int16 partial sums,
 * with their bounds, disappear).  Every partial sum is an exact integer as
 * in the AVX2 tile, so every output is bit-identical to
 * kern_matmul_packed_ref (and to the AVX2 tile):
 *   Q8_0: |w| times y with w's sign (activations in [-127, 127]);
 *   Q4_0, Q4_1, Q5_0, Q5_1: nibbles q (0..15, or 0..31 with the fifth bit)
 *         times y directly (q is unsigned), then the offset / min terms of
 *         the AVX2 tile;
 *   Q4_K, Q5_K: per 32-element sub-block the exact dot in int32, times the
 *         sub-block's scale (vpmulld), and the mins as in the AVX2 tile.
 * The 16-element-sub-block K-quants (Q2_K, Q3_K, Q6_K) keep the AVX2 tile
 * (kern_pack_tile_avx512 returns NULL for them; repack.c falls back).
 *
 * Compiled with the AVX-512 flags on x86-64.  tests/repack_avx512_emulated.c
 * compiles this file again with AVX2 only and KVANT_VNNI_EMULATED, which
 * replaces vpdpbusd by an exact AVX2 sequence and renames the entry point,
 * so the tile's logic is tested on CPUs without AVX-512 too. */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "kernels/repack_tile.h"

#ifdef KVANT_VNNI_EMULATED
/* vpdpbusd in AVX2: bytes 0, 2 and 1, 3 of each 16-bit half widened to
 * int16 (u zero-extended, s sign-extended), two vpmaddwd (each |pair| <=
 * 2 * 255 * 128), added: the same exact int32 */
AI __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
    const __m256i lo8 = _mm256_set1_epi16(0x00ff);
    const __m256i u0 = _mm256_and_si256(u, lo8), u1 = _mm256_srli_epi16(u, 8);
    const __m256i s0 = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8), s1 = _mm256_srai_epi16(s, 8);
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(u0, s0), _mm256_madd_epi16(u1, s1)));
}
#define kern_pack_tile_avx512 kern_pack_tile_avx512_emulated
kern_pack_tile_fn kern_pack_tile_avx512_emulated(int wtype); /* test_repack declares it too */
#define kern_pack_ptq_tile_avx512 kern_pack_ptq_tile_avx512_emulated
#define kern_pack_w8a8_tile_avx512 kern_pack_w8a8_tile_avx512_emulated
kern_pack_w8a8_tile_fn kern_pack_w8a8_tile_avx512_emulated(void);
kern_pack_ptq_tile_fn kern_pack_ptq_tile_avx512_emulated(int wtype); /* and test_repack_ptq */
#else
AI __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
#endif

AI void tile_q8(int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                const float *ad, size_t bn) {
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, w += 272) {
        prefetch_block(w, 272, C);
        __m256i s[4];
        for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * j));
            const __m256i u = _mm256_sign_epi8(q, q); /* |q|, exact as unsigned even for -128 */
            for (int c = 0; c < C; c++) s[c] = dpbusd(s[c], u, _mm256_sign_epi8(bcast4(AQS(c, b) + 4 * j), q));
        }
        q8_finish(C, w, s, ad, bn, b, acc);
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

/* Q4_0, Q4_1, Q5_0, Q5_1 (kind): the AVX2 tile's nibble and fifth-bit
 * decoding (repack_avx2.c tile_legacy), dots in int32 */
AI void tile_legacy(int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                    const float *ad, const int32_t *as, size_t bn, const int kind) {
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const legacy_geo g = legacy_geo_of(kind);
    const bool five = g.five;
    const size_t xb = g.xb, abs_ = g.ab, aqo = g.aqo;
    for (int64_t b = 0; b < nb; b++, w += xb) {
        prefetch_block(w, xb, C);
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(w + g.qho)) : _mm256_setzero_si256();
        __m256i s[4];
        for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i lo, hi;
            legacy_chunk(w, &g, qh, j, &lo, &hi);
            for (int c = 0; c < C; c++) {
                const uint8_t *aq = a + (size_t)c * ba + (size_t)b * abs_ + aqo;
                s[c] = dpbusd(dpbusd(s[c], lo, bcast4(aq + 4 * j)), hi, bcast4(aq + 16 + 4 * j));
            }
        }
        legacy_finish(C, w, &g, s, as, ad, bn, b, acc);
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

/* Q4_K, and Q5_K (q5: the fifth bit from the qh chunks, q in 0..31); the
 * packed layout of repack.h, the decoding of repack_avx2.c tile_q45k */
AI void tile_q45k(int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                  const float *ad, const int32_t *as, size_t bn, const bool q5) {
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const size_t xb = q5 ? 1440 : 1184;
    for (int64_t b = 0; b < nb; b++, w += xb) {
        prefetch_block(w, xb, C);
        __m256i is[4];
        for (int c = 0; c < C; c++) is[c] = _mm256_setzero_si256();
        for (int sb = 0; sb < 8; sb++) { /* sub-block: the low (even) or high (odd) nibbles of qs bytes 32(sb/2) .. +31 */
            /* the 8 rows' scales of this sub-block, one per lane (0..63) */
            const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(w + 32 + 8 * sb)));
            __m256i s[4];
            for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                const __m256i q = q45k_chunk(w, sb, j, q5);
                for (int c = 0; c < C; c++) s[c] = dpbusd(s[c], q, bcast4((const uint8_t *)AK(c, b)->qs + 32 * sb + 4 * j));
            }
            /* |s| <= 32 * 31 * 128, times sc <= 63: exact int32 */
            for (int c = 0; c < C; c++) is[c] = _mm256_add_epi32(is[c], _mm256_mullo_epi32(s[c], sc));
        }
        q45k_finish(C, w, is, as, ad, bn, b, acc);
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

PACK_ENTRY(tile_q8_0, tile_q8(nb, CC, y, ldy, w, a, ba, ad, bn))
PACK_ENTRY(tile_q4_0, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q4_0))
PACK_ENTRY(tile_q4_1, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q4_1))
PACK_ENTRY(tile_q5_0, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q5_0))
PACK_ENTRY(tile_q5_1, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q5_1))
PACK_ENTRY(tile_q4_k, tile_q45k(nb, CC, y, ldy, w, a, ba, ad, as, bn, false))
PACK_ENTRY(tile_q5_k, tile_q45k(nb, CC, y, ldy, w, a, ba, ad, as, bn, true))

kern_pack_tile_fn kern_pack_tile_avx512(int wtype) {
    switch (wtype) {
    case KT_Q8_0: return tile_q8_0;
    case KT_Q4_0: return tile_q4_0;
    case KT_Q4_1: return tile_q4_1;
    case KT_Q5_0: return tile_q5_0;
    case KT_Q5_1: return tile_q5_1;
    case KT_Q4_K: return tile_q4_k;
    case KT_Q5_K: return tile_q5_k;
    default: return NULL; /* Q2_K, Q3_K, Q6_K: the AVX2 tile */
    }
}

/* kvant's PTQ types (kernels/repack_ptq.c): the shared tile, vpdpbusd dots */
#define PTQ_VNNI 1
#include "kernels/ptq.h"
#include "kernels/repack_ptq_tile.h"

kern_pack_ptq_tile_fn kern_pack_ptq_tile_avx512(int wtype) {
    int scheme, bits, gran;
    return kern_ptq_decode(wtype, &scheme, &bits, &gran) ? ptq_tile_of(bits, scheme == KERN_PTQ_ZEROPOINT) : NULL;
}
/* the stored W8A8 type (kernels/repack_w8a8.c) */
#define W8_VNNI 1
#include "kernels/repack_w8a8_tile.h"

kern_pack_w8a8_tile_fn kern_pack_w8a8_tile_avx512(void) { return tile_w8a8; }
#else
typedef int repack_avx512_unused; /* not an x86-64 build: nothing here */
#endif
