/* repack_f16_avx512.c - the AVX-512 tiles of packed F16 and BF16 groups
 * (kernels/repack_f16.c).
 *
 * F16: a zmm holds element k of two groups (16 outputs: the two 16-byte
 * rows of halves joined by one vinserti128, then vcvtph2ps, exact); a
 * broadcast activation and one FMA advance 16 outputs' chains.  Lanes are
 * different outputs, each lane the spec's fmaf chain in k order, so the
 * outputs are the AVX2 tile's and the ref's bits.  An odd group left over runs in a ymm (the same FMA).
 * Prefill: 4 pairs x 6 activation rows (24 chains, the weights converted
 * once per 6 rows; prefill below says why not 2 x 12).  C = 1 runs 8
 * pairs (16 groups, 8 chains); the driver decodes with the AVX2 tile
 * instead, which measured faster (kernels/repack_f16.c shape_of), so C = 1
 * here serves the prefill tails.
 *
 * BF16 (AVX512_BF16): vdpbf16ps, the spec's own arithmetic.  A zmm holds
 * the pair (k, k + 1) of two groups' 8 rows, [row: k, k + 1] in each dword
 * (the two 32-byte runs of elements k and k + 1 joined by one vinserti64x4,
 * interleaved by one vpermw); the activation pair is one broadcast dword of
 * the BF16 row; one vdpbf16ps advances 16 outputs by two multiply-adds,
 * element k + 1 first.  Same shapes as F16's tile (4 x 12 on Zen 4), the
 * weights' shuffles shared by the rows.  Synthetic tinyllama-1.1b BF16
 * pp512 on Zen 4 (2 threads, 512-bit operations in halves): 180-187 t/s
 * against 104 on the AVX2 FMA tile, llama.cpp 136-145 in the same
 * minutes. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/repack.h"

#define AI static inline __attribute__((always_inline))

/* ---- F16 on FMAs ------------------------------------------------------------------ */
/* element k of the groups at p and p + gs (halves) as 16 floats */
AI __m512 wpair(const uint16_t *p, size_t gs) {
    const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
                                              _mm_loadu_si128((const __m128i *)(p + gs)), 1);
    return _mm512_cvtph_ps(h);
}
/* one group's element k as 8 floats */
AI __m256 wone(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* NP (<= 8) pairs of groups (+ one group if ODD) x C (<= 12) activation rows:
 * NP * C + ODD * C chains (<= 26 live; fixed-size arrays, fully unrolled, so
 * they are registers) */
#define UNROLL _Pragma("GCC unroll 16")
AI void tile(int64_t K, const int NP, const bool ODD, const int C, float *y, size_t ldy,
             const uint16_t *w, const float *a, size_t ba) {
    const size_t gs = (size_t)K * KERN_PACK_ROWS; /* halves per group */
    __m512 acc[8][12];
    __m256 acch[12];
    UNROLL for (int p = 0; p < NP; p++) UNROLL for (int c = 0; c < C; c++) acc[p][c] = _mm512_setzero_ps();
    UNROLL for (int c = 0; c < C; c++) acch[c] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const uint16_t *wk = w + (size_t)k * KERN_PACK_ROWS;
        __m512 wv[8];
        UNROLL for (int p = 0; p < NP; p++) wv[p] = wpair(wk + 2 * (size_t)p * gs, gs);
        __m256 wh = _mm256_setzero_ps();
        if (ODD) wh = wone(wk + 2 * (size_t)NP * gs);
        UNROLL for (int c = 0; c < C; c++) {
            const float ac = a[(size_t)c * ba + (size_t)k];
            const __m512 av = _mm512_set1_ps(ac);
            UNROLL for (int p = 0; p < NP; p++) acc[p][c] = _mm512_fmadd_ps(wv[p], av, acc[p][c]);
            if (ODD) acch[c] = _mm256_fmadd_ps(wh, _mm256_set1_ps(ac), acch[c]);
        }
    }
    UNROLL for (int c = 0; c < C; c++) {
        UNROLL for (int p = 0; p < NP; p++) _mm512_storeu_ps(y + (size_t)c * ldy + (size_t)p * 16, acc[p][c]);
        if (ODD) _mm256_storeu_ps(y + (size_t)c * ldy + (size_t)NP * 16, acch[c]);
    }
}
#undef UNROLL

/* ---- BF16 on vdpbf16ps ------------------------------------------------------------ */
/* vpermw: [element k of 8 rows, element k + 1 of 8 rows] per 32 bytes -> [row r: k, k + 1] */
#define IX8(o) o + 0, o + 8, o + 1, o + 9, o + 2, o + 10, o + 3, o + 11, o + 4, o + 12, o + 5, o + 13, o + 6, o + 14, \
               o + 7, o + 15

/* NP (<= 8) pairs of groups (+ one group if ODD) x C (<= 12) rows of BF16 activations */
#define UNROLL _Pragma("GCC unroll 16")
AI void dtile(int64_t K, const int NP, const bool ODD, const int C, float *y, size_t ldy, const uint16_t *w,
              const uint16_t *a, size_t ba) {
    const size_t gs = (size_t)K * KERN_PACK_ROWS; /* halves per group */
    static const uint16_t ixs[32] = {IX8(0), IX8(16)};
    const __m512i ix = _mm512_loadu_si512(ixs);
    const __m256i ix8 = _mm512_castsi512_si256(ix);
    __m512 acc[8][12];
    __m256 acch[12];
    UNROLL for (int p = 0; p < NP; p++) UNROLL for (int c = 0; c < C; c++) acc[p][c] = _mm512_setzero_ps();
    UNROLL for (int c = 0; c < C; c++) acch[c] = _mm256_setzero_ps();
    /* one pair: the weights (full: both elements; else element k alone, k + 1 as zero) */
#define PAIR(full)                                                                                                \
    {                                                                                                             \
        const uint16_t *wk = w + (size_t)k * KERN_PACK_ROWS;                                                      \
        __m512i wv[8];                                                                                            \
        UNROLL for (int p = 0; p < NP; p++) {                                                                     \
            const uint16_t *w0 = wk + 2 * (size_t)p * gs, *w1 = w0 + gs;                                          \
            const __m256i lo = full ? _mm256_loadu_si256((const __m256i *)w0)                                     \
                                    : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)w0));               \
            const __m256i hi = full ? _mm256_loadu_si256((const __m256i *)w1)                                     \
                                    : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)w1));               \
            wv[p] = _mm512_permutexvar_epi16(ix, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));           \
        }                                                                                                         \
        __m256i wh = _mm256_setzero_si256();                                                                      \
        if (ODD) {                                                                                                \
            const uint16_t *w0 = wk + 2 * (size_t)NP * gs;                                                        \
            wh = _mm256_permutexvar_epi16(ix8, full ? _mm256_loadu_si256((const __m256i *)w0)                     \
                                                    : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)w0))); \
        }                                                                                                         \
        UNROLL for (int c = 0; c < C; c++) {                                                                      \
            uint32_t d = 0;                                                                                       \
            memcpy(&d, a + (size_t)c * ba + (size_t)k, full ? 4 : 2);                                             \
            const __m512i av = _mm512_set1_epi32((int)d);                                                         \
            UNROLL for (int p = 0; p < NP; p++) acc[p][c] = _mm512_dpbf16_ps(acc[p][c], (__m512bh)wv[p], (__m512bh)av); \
            if (ODD) acch[c] = _mm256_dpbf16_ps(acch[c], (__m256bh)wh, (__m256bh)_mm512_castsi512_si256(av));    \
        }                                                                                                         \
    }
    int64_t k = 0;
    for (; k + 1 < K; k += 2) PAIR(true)
    if (k < K) PAIR(false)
#undef PAIR
    UNROLL for (int c = 0; c < C; c++) {
        UNROLL for (int p = 0; p < NP; p++) _mm512_storeu_ps(y + (size_t)c * ldy + (size_t)p * 16, acc[p][c]);
        if (ODD) _mm256_storeu_ps(y + (size_t)c * ldy + (size_t)NP * 16, acch[c]);
    }
}
#undef UNROLL
#undef IX8

/* ---- the entries ----------------------------------------------------------------- */
/* Prefill in blocks of 2 NPB groups x CB rows, then what is left of the
 * groups as pairs and a single one; dp: BF16's vdpbf16ps tile (BF16
 * activations), else F16's FMA tile.  8 groups x 6 rows (4 pairs: four
 * conversions per k shared by 6 rows, 6 broadcasts per 24 FMAs) where a
 * zmm operation costs one: on Zen 5 the F16 tile alone (one thread,
 * K = 256 and 4096) ran at 95-103 GMAC/s against 61-88 for 4 groups x 12
 * rows (twice the broadcasts; peak 110), 3 pairs x 8 rows 87-101; and
 * synthetic tinyllama-1.1b pp512 (2 threads, alternating) F16 159-168
 * against 137-159 t/s, BF16 294-322 against 259-308 (ahead in 9 of 10
 * rounds).  4 groups x 12 rows for BF16 where zmm operations run as
 * halves (kern_zmm_halved, Zen 4: what was measured there, above; F16
 * takes the AVX2 tile there). */
#define TL(NP, ODD, CC)                                                                                     \
    (dp ? dtile(K, NP, ODD, CC, yg, ldy, wg, (const uint16_t *)ac, ba)                                      \
        : tile(K, NP, ODD, CC, yg, ldy, wg, (const float *)ac, ba))
/* the tile for cc (1 .. CB) rows */
#define ROWS(NP, ODD)                                                                                       \
    switch (cc) {                                                                                           \
    case 1: TL(NP, ODD, 1); break;                                                                          \
    case 2: TL(NP, ODD, 2); break;                                                                          \
    case 3: TL(NP, ODD, 3); break;                                                                          \
    case 4: TL(NP, ODD, 4); break;                                                                          \
    case 5: TL(NP, ODD, 5); break;                                                                          \
    default:                                                                                                \
        if (CB == 6) TL(NP, ODD, 6);                                                                        \
        else switch (cc) {                                                                                  \
            case 6: TL(NP, ODD, 6); break;                                                                  \
            case 7: TL(NP, ODD, 7); break;                                                                  \
            case 8: TL(NP, ODD, 8); break;                                                                  \
            case 9: TL(NP, ODD, 9); break;                                                                  \
            case 10: TL(NP, ODD, 10); break;                                                                \
            case 11: TL(NP, ODD, 11); break;                                                                \
            default: TL(NP, ODD, 12); break;                                                                \
            }                                                                                               \
    }
AI void prefill(const bool dp, const int NPB, const int CB, int64_t K, int G, int C, float *y, size_t ldy,
                const uint16_t *w, const void *a, size_t ba) {
    const size_t gs = (size_t)K * KERN_PACK_ROWS;
    for (int c0 = 0; c0 < C; c0 += CB) {
        const int cc = C - c0 < CB ? C - c0 : CB;
        const void *ac = (const char *)a + (size_t)c0 * ba * (dp ? sizeof(uint16_t) : sizeof(float));
        int g = 0;
        for (; G - g >= 2 * NPB; g += 2 * NPB) {
            float *yg = y + (size_t)c0 * ldy + (size_t)g * 8;
            const uint16_t *wg = w + (size_t)g * gs;
            ROWS(NPB, false)
        }
        float *yg = y + (size_t)c0 * ldy + (size_t)g * 8;
        const uint16_t *wg = w + (size_t)g * gs;
        switch (G - g) { /* 0 .. 2 NPB - 1 groups left */
        case 0: break;
        case 1: ROWS(0, true) break;
        case 2: ROWS(1, false) break;
        case 3: ROWS(1, true) break;
        default:
            if (NPB > 2) switch (G - g) {
                case 4: ROWS(2, false) break;
                case 5: ROWS(2, true) break;
                case 6: ROWS(3, false) break;
                default: ROWS(3, true) break;
                }
        }
    }
}
#undef ROWS
#undef TL

/* any G x C of F16: decode (C = 1) in blocks of 16 groups, then pairs;
 * prefill in blocks of 8 groups x 6 rows */
static void tile_f16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const void *av, size_t ba) {
    const float *a = av;
    const size_t gs = (size_t)K * KERN_PACK_ROWS;
    if (C == 1) {
        int g = 0;
        for (; G - g >= 16; g += 16) tile(K, 8, false, 1, y + (size_t)g * 8, ldy, w + (size_t)g * gs, a, ba);
        float *yg = y + (size_t)g * 8;
        const uint16_t *wg = w + (size_t)g * gs;
        switch (G - g) {
        case 0: break;
        case 1: tile(K, 0, true, 1, yg, ldy, wg, a, ba); break;
        case 2: tile(K, 1, false, 1, yg, ldy, wg, a, ba); break;
        case 3: tile(K, 1, true, 1, yg, ldy, wg, a, ba); break;
        case 4: tile(K, 2, false, 1, yg, ldy, wg, a, ba); break;
        case 5: tile(K, 2, true, 1, yg, ldy, wg, a, ba); break;
        case 6: tile(K, 3, false, 1, yg, ldy, wg, a, ba); break;
        case 7: tile(K, 3, true, 1, yg, ldy, wg, a, ba); break;
        case 8: tile(K, 4, false, 1, yg, ldy, wg, a, ba); break;
        case 9: tile(K, 4, true, 1, yg, ldy, wg, a, ba); break;
        case 10: tile(K, 5, false, 1, yg, ldy, wg, a, ba); break;
        case 11: tile(K, 5, true, 1, yg, ldy, wg, a, ba); break;
        case 12: tile(K, 6, false, 1, yg, ldy, wg, a, ba); break;
        case 13: tile(K, 6, true, 1, yg, ldy, wg, a, ba); break;
        case 14: tile(K, 7, false, 1, yg, ldy, wg, a, ba); break;
        default: tile(K, 7, true, 1, yg, ldy, wg, a, ba); break;
        }
        return;
    }
    prefill(false, 4, 6, K, G, C, y, ldy, w, a, ba);
}

/* any G x C of BF16 (the driver gives it prefill only; decode runs the
 * AVX2 tile): 8 groups x 6 rows, or 4 x 12 where zmm operations run as
 * halves (kernels/repack_f16.c shape_of blocks the work the same way) */
static void tile_bf16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const void *a, size_t ba) {
    prefill(true, 4, 6, K, G, C, y, ldy, w, a, ba);
}
static void tile_bf16_halved(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const void *a,
                             size_t ba) {
    prefill(true, 2, 12, K, G, C, y, ldy, w, a, ba);
}

kern_pack_f16_tile_fn kern_pack_f16_tile_avx512(void) { return tile_f16; }
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx512(void) {
    return !kern_has_avx512_bf16() ? NULL : kern_zmm_halved() ? tile_bf16_halved : tile_bf16;
}
