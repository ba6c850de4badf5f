/* kernels/repack_tile.h - private to the per-ISA packed tiles
 * (repack_avx2.c, repack_avx512.c; repack_f16_avx2.c for dec_skip): what
 * they read the same way.  Include it only from files compiled with AVX2
 * (or more) enabled. */
#ifndef KVANT_KERNELS_REPACK_TILE_H
#define KVANT_KERNELS_REPACK_TILE_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "kernels/quants.h"
#include "kernels/repack.h"

#define AI static inline __attribute__((always_inline))

/* 4 activation bytes broadcast to every 32-bit lane */
AI __m256i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Decode (one activation row) streams the weights once from memory, and the
 * first load of each block waited on it (perf: ~40% of the tile's samples).
 * Prefetching ahead keeps enough lines in flight; prefetches never fault,
 * so running past the end of the matrix is harmless.
 *   prefetch_block:     PF_DIST (2048) bytes ahead into L1 (prefetcht0),
 *                       every machine: what the Intel Xeons and the Zen 5
 *                       were tuned with;
 *   prefetch_block_far: the same, except where kern_prefetch_l2 (Zen 4):
 *                       PF_FAR (8192) bytes ahead into L2 (prefetcht1).
 *                       The K-quant tiles but Q3_K, and the 4/5-bit ones,
 *                       whose blocks take longer to compute than one memory
 *                       latency at 2048 bytes ahead.  Zen 4 (family 25
 *                       model 17), synthetic tinyllama-1.1b tg32, 2
 *                       threads, alternating kvant bench runs: Q6_K 37-56
 *                       t/s against 22 near, Q4_K_M 70-84 against 52-77,
 *                       Q4_0 88-89 against 75-81; into L2 because 8192
 *                       bytes of lines in flight outnumber the L1's miss
 *                       buffers (Q6_K far into L1: 21 t/s).  Q8_0 (47-48
 *                       near, 37-40 far) and Q3_K (80-81, 76-77), and the
 *                       PTQ and W8A8 tiles, whose blocks are as light,
 *                       stay near everywhere.  The packed 2:4 tiles
 *                       (repack_s24_tile.h) go far: measured there;
 *                       S24_F16's one group at a time on Zen 5 too
 *                       (kern_prefetch_l2_amd512); its zmm decode of 4
 *                       groups at once prefetches near.
 * A tile reads kern_prefetch_l2 once (far_l2) and passes it down. */
#ifndef PF_DIST
#define PF_DIST 2048
#endif
#ifndef PF_FAR
#define PF_FAR 8192
#endif
/* The lines that start in [p, p + xb), each asked for once as the blocks
 * go by, into L1 (prefetcht0) or, l2, into L2 (prefetcht1): a line that
 * straddles two blocks is the earlier block's to ask for.  Asking from
 * each block's own start (as before) asked again for that shared line,
 * about one request in 7 for the 272-byte Q8_0 and one in 8 for the
 * 336-byte S24_Q8 blocks of 8 rows.  Zen 3 (family 25 model 1), synthetic
 * 2:4 tinyllama-1.1b S24_Q8, 2 threads, the two forms switched token by
 * token in one kvant bench run (a scratch build): 1.07-1.14x with the
 * meter at 43-50 GB/s, 0.97-1.05x at 32-39 GB/s; the dense Q8_0, Q4_0,
 * Q4_K_M, Q6_K and F16 files 0.97-1.04x (bench/sparse24_tiers.md). */
AI void prefetch_lines(const uint8_t *p, size_t xb, const bool l2) {
    for (uintptr_t l = ((uintptr_t)p + 63) & ~(uintptr_t)63; l < (uintptr_t)p + xb; l += 64) {
        if (l2) _mm_prefetch((const char *)l, _MM_HINT_T1);
        else _mm_prefetch((const char *)l, _MM_HINT_T0);
    }
}
/* a block's lines dist bytes ahead into L1 */
AI void prefetch_ahead(const uint8_t *w, size_t xb, const size_t dist) { prefetch_lines(w + dist, xb, false); }
/* The same in a decode run (kern_pack_dec_fn: NG groups of gs bytes, read
 * in lockstep, block by block): block `off` bytes into its group, the lines
 * dist bytes ahead; where those pass the group's end (dec_skip: how much
 * further to go; the F16 tile uses it alone), the same place in the
 * group NG further on, the next run's stream, which is mostly the same
 * thread's next run (it takes runs in contiguous chunks), so that run does
 * not start with every stream cold.  Zen 5 (family 26 model 2), 2 threads,
 * alternating kvant bench tg128: synthetic stories110M Q8_0 (768-wide
 * matrices, 6.5 KB per group) 320-375 t/s against 267-343. */
AI size_t dec_skip(size_t off, size_t xb, size_t dist, size_t gs, const int NG) {
    return off + dist + xb <= gs ? 0 : (size_t)(NG - 1) * gs;
}
AI void prefetch_dec(const uint8_t *w, size_t off, size_t xb, size_t dist, size_t gs, const int NG) {
    prefetch_ahead(w, xb, dist + dec_skip(off, xb, dist, gs, NG));
}
AI void prefetch_block(const uint8_t *w, size_t xb, const int C) {
    if (C != 1) return; /* prefill: the group is reused across rows, already cached */
    prefetch_ahead(w, xb, PF_DIST);
}
AI void prefetch_block_far(const uint8_t *w, size_t xb, const int C, const bool far_l2) {
    if (C != 1) return;
    if (!far_l2) {
        prefetch_block(w, xb, C);
        return;
    }
    prefetch_lines(w + PF_FAR, xb, true);
}
/* prefetch_block_far, and where it goes far (Zen 4) the lines 1024 bytes
 * ahead into L1 as well: the S24_Q8 tile (repack_s24_tile.h, measured there) */
AI void prefetch_block_far_l1(const uint8_t *w, size_t xb, const int C, const bool far_l2) {
    prefetch_block_far(w, xb, C, far_l2);
    if (C == 1 && far_l2) prefetch_ahead(w, xb, 1024);
}

/* activation row c's Q8_0 qs of block b; its Q8_K block b (a, ba: the tile's) */
#define AQS(c, b) (a + (size_t)(c) * ba + (size_t)(b) * sizeof(block_q8_0) + offsetof(block_q8_0, qs))
#define AK(c, b) ((const block_q8_K *)(a + (size_t)(c) * ba) + (b))

/* Q4_0, Q4_1, Q5_0, Q5_1 (the packed layouts of repack.h) */
enum { L_Q4_0, L_Q4_1, L_Q5_0, L_Q5_1 };
typedef struct {
    bool min, five; /* a block minimum (Q4_1, Q5_1; Q8_1 activations); a fifth bit */
    int off;        /* Q4_0, Q5_0: the offset of q (8, 16) */
    size_t xb, qso, qho, mo; /* packed block bytes; offsets of qs, qh and m */
    size_t ab, aqo;       /* activation block bytes; offset of its qs */
} legacy_geo;
AI legacy_geo legacy_geo_of(const int kind) {
    const bool min = kind == L_Q4_1 || kind == L_Q5_1;
    return (legacy_geo){.min = min,
                        .five = kind == L_Q5_0 || kind == L_Q5_1,
                        .off = kind == L_Q4_0 ? 8 : 16,
                        .xb = kind == L_Q4_0   ? KERN_Q4_0X8_BYTES
                              : kind == L_Q4_1 ? KERN_Q4_1X8_BYTES
                              : kind == L_Q5_0 ? KERN_Q5_0X8_BYTES
                                               : KERN_Q5_1X8_BYTES,
                        .qso = kind == L_Q4_0   ? KERN_Q4_0X8_QS_AT
                               : kind == L_Q4_1 ? KERN_Q4_1X8_QS_AT
                               : kind == L_Q5_0 ? KERN_Q5_0X8_QS_AT
                                                : KERN_Q5_1X8_QS_AT,
                        .qho = kind == L_Q5_0 ? KERN_Q5_0X8_QH_AT : KERN_Q5_1X8_QH_AT,
                        .mo = kind == L_Q4_1 ? KERN_Q4_1X8_M_AT : KERN_Q5_1X8_M_AT,
                        .ab = min ? sizeof(block_q8_1) : sizeof(block_q8_0),
                        .aqo = min ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs)};
}

/* chunk j of a legacy block: the low and high nibbles (elements 4j..4j+3
 * and 16+4j..), with the fifth bit from the canonical qh for Q5 (repack.c
 * q5_canon: bit 4 of byte i is qh << (4 - j) for the low nibble, qh >> j
 * for the high one) */
AI void legacy_chunk(const uint8_t *w, const legacy_geo *g, __m256i qh, int j, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m10 = _mm256_set1_epi8(0x10);
    const __m256i raw = _mm256_loadu_si256((const __m256i *)(w + g->qso + 32 * j));
    *lo = _mm256_and_si256(raw, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    if (g->five) {
        *lo = _mm256_or_si256(*lo, _mm256_and_si256(_mm256_slli_epi32(qh, 4 - j), m10));
        *hi = _mm256_or_si256(*hi, _mm256_and_si256(_mm256_srli_epi32(qh, j), m10));
    }
}

/* Q8_0 block b done: s[c] = each row's exact integer dot; acc += s * d_w d_a */
AI void q8_finish(const int C, const uint8_t *w, const __m256i *s, const float *ad, size_t bn, int64_t b, __m256 *acc) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
    for (int c = 0; c < C; c++) {
        const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(ad[(size_t)c * bn + (size_t)b]));
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), d, acc[c]);
    }
}

/* legacy block b done: i32[c] = each row's sum of q * a (q with no offset);
 * Q4_0, Q5_0: minus off * the block's sum of a, acc += i * d_w d_a;
 * Q4_1, Q5_1: acc += i * d_w d_a, then acc += m_w * s_a (s_a from the
 * extras as a float: repack.h's second fmaf) */
AI void legacy_finish(const int C, const uint8_t *w, const legacy_geo *g, const __m256i *i32, const int32_t *as,
                      const float *ad, size_t bn, int64_t b, __m256 *acc) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
    const __m256 mw = g->min ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + g->mo))) : _mm256_setzero_ps();
    for (int c = 0; c < C; c++) {
        const size_t k = (size_t)c * bn + (size_t)b;
        const __m256i i = g->min ? i32[c] : _mm256_sub_epi32(i32[c], _mm256_set1_epi32(g->off * as[k]));
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(dw, _mm256_set1_ps(ad[k])), acc[c]);
        if (g->min) {
            float sa;
            memcpy(&sa, &as[k], 4);
            acc[c] = _mm256_fmadd_ps(mw, _mm256_set1_ps(sa), acc[c]);
        }
    }
}

/* Q4_K / Q5_K (q5): chunk j of sub-block sb, q in 0..15 (0..31): the low
 * (even sb) or high (odd sb) nibbles of qs bytes 32(sb/2) .. +31, and for
 * Q5_K bit sb of qh byte l, element 32 sb + l's fifth bit */
AI __m256i q45k_chunk(const uint8_t *w, int sb, int j, const bool q5) {
    const size_t qso = q5 ? KERN_Q5_KX8_QS_AT : KERN_Q4_KX8_QS_AT;
    const __m256i raw = _mm256_loadu_si256((const __m256i *)(w + qso + 32 * (8 * (sb / 2) + j)));
    __m256i q = _mm256_and_si256(sb & 1 ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(0x0f));
    if (q5) {
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(w + KERN_Q5_KX8_QH_AT + 32 * j));
        q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, sb), _mm256_set1_epi8(1)), 4));
    }
    return q;
}

/* Q4_K / Q5_K: chunk j of sub-blocks 2p (lo: the low nibbles) and 2p + 1
 * (hi: the high ones) from one load, as q45k_chunk of each */
AI void q45k_pair(const uint8_t *w, int p, int j, const bool q5, __m256i *lo, __m256i *hi) {
    const size_t qso = q5 ? KERN_Q5_KX8_QS_AT : KERN_Q4_KX8_QS_AT;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i raw = _mm256_loadu_si256((const __m256i *)(w + qso + 32 * (8 * p + j)));
    *lo = _mm256_and_si256(raw, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    if (q5) {
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(w + KERN_Q5_KX8_QH_AT + 32 * j));
        const __m256i one = _mm256_set1_epi8(1);
        *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * p), one), 4));
        *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * p + 1), one), 4));
    }
}

/* Q4_K / Q5_K block b done: is[c] = I (the scaled integer dots) of each
 * row; the mins against the activation's sub-block sums (as), then
 * acc += I * d_w d_a - M * dmin_w d_a (repack.h's two fmaf) */
AI void q45k_finish(const int C, const uint8_t *w, const __m256i *is, const int32_t *as, const float *ad, size_t bn,
                    int64_t b, __m256 *acc) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
    const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + KERN_Q4_KX8_DMIN_AT)));
    __m256i mins[4];
    for (int p = 0; p < 4; p++)
        mins[p] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(w + KERN_Q4_KX8_M_AT + 16 * p)));
    for (int c = 0; c < C; c++) {
        const size_t k = (size_t)c * bn + (size_t)b;
        __m256i ms = _mm256_setzero_si256();
        for (int p = 0; p < 4; p++) ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mins[p], _mm256_set1_epi32(as[4 * k + (size_t)p])));
        const __m256 da = _mm256_set1_ps(ad[k]);
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[c]), _mm256_mul_ps(dw, da), acc[c]);
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_xor_ps(_mm256_mul_ps(dm, da), _mm256_set1_ps(-0.0f)), acc[c]);
    }
}

/* The K-quants with 16-element sub-blocks (Q6_K, Q3_K, Q2_K: kind), whose
 * tiles (repack_avx2.c, repack_avx512.c) end each block the same way */
enum { K16_Q6, K16_Q3, K16_Q2 };

/* a K16 kind's packed block (repack.h): its bytes, where its scales start,
 * and where the 2-bit qs of Q3_K and Q2_K start */
AI size_t k16_xb(const int kind) {
    return kind == K16_Q6 ? KERN_Q6_KX8_BYTES : kind == K16_Q3 ? KERN_Q3_KX8_BYTES : KERN_Q2_KX8_BYTES;
}
AI size_t k16_sc_at(const int kind) {
    return kind == K16_Q6 ? KERN_Q6_KX8_SC_AT : kind == K16_Q3 ? KERN_Q3_KX8_SC_AT : KERN_Q2_KX8_SC_AT;
}
AI size_t k16_qs_at(const int kind) { return kind == K16_Q3 ? KERN_Q3_KX8_QS_AT : KERN_Q2_KX8_QS_AT; }

/* The end of K16 block b for C activation rows, given each row's integer
 * sum is[c] of sub-block dots times scales: each row's (x_2pp, x_2pp+1)
 * against the bsums (2pp, 2pp+1), x = the scales (Q6_K, Q3_K: the offset)
 * or the mins (Q2_K), then the float scaling into acc[c] (repack.h's
 * spec, every sum exact) */
AI void k16_finish(const uint8_t *w, const int kind, const int C, const __m256i *is, const uint8_t *a, size_t ba,
                   int64_t b, const float *ad, size_t bn, __m256 *acc) {
    const size_t sco = k16_sc_at(kind);
    __m256i ms[4];
    for (int c = 0; c < C; c++) ms[c] = _mm256_setzero_si256();
    for (int pp = 0; pp < 8; pp++) {
        const __m128i v = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(w + sco + 16 * pp)),
                                            _mm_loadl_epi64((const __m128i *)(w + sco + 8 + 16 * pp)));
        const __m256i sp = kind == K16_Q2 ? _mm256_srli_epi16(_mm256_cvtepu8_epi16(v), 4) : _mm256_cvtepi8_epi16(v);
        for (int c = 0; c < C; c++) {
            int32_t bs;
            memcpy(&bs, AK(c, b)->bsums + 2 * pp, 4);
            ms[c] = _mm256_add_epi32(ms[c], _mm256_madd_epi16(sp, _mm256_set1_epi32(bs)));
        }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w)), neg = _mm256_set1_ps(-0.0f);
    for (int c = 0; c < C; c++) {
        const __m256 da = _mm256_set1_ps(ad[(size_t)c * bn + (size_t)b]);
        if (kind == K16_Q2) { /* |is| <= 16 * 15 * 16 * 3 * 127 < 2^21, |ms| <= 16 * 15 * 2032 < 2^19 */
            const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + KERN_Q2_KX8_DMIN_AT)));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[c]), _mm256_mul_ps(dw, da), acc[c]);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms[c]), _mm256_xor_ps(_mm256_mul_ps(dm, da), neg), acc[c]);
            continue;
        }
        /* Q6_K: |is| <= 16 * 128 * 16 * 63 * 127 < 2^28, |32 ms| <= 32 * 16 * 128 * 2032 < 2^27;
         * Q3_K: |is| <= 16 * 32 * 16 * 7 * 127 < 2^23, |4 ms| <= 4 * 16 * 32 * 2032 < 2^23: exact */
        const __m256i I = _mm256_sub_epi32(is[c], _mm256_slli_epi32(ms[c], kind == K16_Q3 ? 2 : 5));
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(dw, da), acc[c]);
    }
}

/* The kern_pack_tile_fn of a type: C (1..4) becomes a compile-time constant
 * CC inside CALL, so each width gets its own register-allocated copy. */
#define PACK_ENTRY(name, CALL)                                                                                  \
    static void name(int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,   \
                     const float *ad, const int32_t *as, size_t bn) {                                           \
        (void)as;                                                                                               \
        switch (C) {                                                                                            \
        case 1: { enum { CC = 1 }; CALL; } break;                                                               \
        case 2: { enum { CC = 2 }; CALL; } break;                                                               \
        case 3: { enum { CC = 3 }; CALL; } break;                                                               \
        default: { enum { CC = 4 }; CALL; } break;                                                              \
        }                                                                                                       \
    }

#endif
