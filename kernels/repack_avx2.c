/* repack_avx2.c - the AVX2 tile of the packed 8-row groups (kernels/repack.h).
 *
 * One register holds 4 k-positions of the group's 8 rows (32 bytes); the
 * matching 4 activation bytes are broadcast to every lane, so one
 * vpmaddubsw + vpmaddwd gives each row's dot over those 4 positions in its
 * own 32-bit lane.  After a block the 8 lanes hold the 8 rows' exact
 * integer dots, converted and scaled with one cvt + mul + fma per
 * activation row: the arithmetic of the spec, lane by lane, so every
 * output is bit-identical to kern_matmul_packed_ref.
 *   Q8_0: |w| times y with w's sign (activations lie in [-127, 127]).
 *   Q4_0: nibbles q in [0, 15] times y, summed in int16 over the whole
 *         block (8 pair sums of at most 2 * 15 * 127: |sum| <= 30480),
 *         then minus 8 * (sum of the block's y): exact.
 *   Q4_K: per 32-element sub-block, nibbles q in [0, 15] times y summed
 *         in int16 (8 pair sums of at most 2 * 15 * 127: |sum| <= 30480),
 *         then vpmaddwd against the sub-block scale in both int16 halves
 *         of each row's lane gives sc * (exact sub-block dot) in int32
 *         (|.| <= 63 * 60960); the mins: vpmaddwd of each row's (m_2p,
 *         m_2p+1) against the activation's sub-block sums (2p, 2p+1).
 *   Q5_K: as Q4_K with q in [0, 31] (the fifth bit from the qh chunks);
 *         pair sums <= 2 * 31 * 127 = 7874, so the int16 sums are
 *         widened after 4 of them (<= 31496).
 *   Q6_K: q = 4 low | 2 high bits in [0, 63] times y; vpmaddubsw pair sums
 *         are <= 2 * 63 * 127 = 16002, so two are added in int16 (32004 <
 *         32767) before vpmaddwd against the scale widens them; the
 *         offset: minus 32 * sum_s sc_s * bsum_s (vpmaddwd of scale pairs
 *         against the Q8_K bsums pairs).  Every partial sum is an exact
 *         int32 (bounds in kernels/repack.h), so the integers equal the
 *         spec's whatever the order.
 *   Q3_K: as Q6_K with q = 2 low bits | hmask bit << 2 in [0, 7], offset 4.
 *   Q2_K: as Q6_K with q in [0, 3], 4-bit scales, and 4-bit mins as Q4_K's
 *         (against the 16-element bsums directly).
 * Up to 4 activation rows share each weight load. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/avx2_common.h"
#include "kernels/repack_tile.h"

AI void tile_q8(int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                const float *ad, size_t bn) {
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++, w += KERN_Q8_0X8_BYTES) {
        prefetch_block(w, KERN_Q8_0X8_BYTES, C);
        __m256i s[4];
        for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int j = 0; j < 8; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w + KERN_Q8_0X8_QS_AT + 32 * j));
            const __m256i u = _mm256_abs_epi8(q); /* |q|, exact as unsigned even for -128 */
            for (int c = 0; c < C; c++) {
                const __m256i p = _mm256_maddubs_epi16(u, _mm256_sign_epi8(bcast4(AQS(c, b) + 4 * j), q));
                s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(p, ones));
            }
        }
        q8_finish(C, w, s, ad, bn, b, acc);
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

/* Q4_0, Q4_1, Q5_0, Q5_1 (kind): nibbles q, with the fifth bit for Q5 from
 * the canonical qh (repack.c q5_canon: for chunk j, bit 4 of byte i is
 * qh << (4 - j) for the low nibble, qh >> j for the high one).  Q4: q in
 * 0..15, the block's 8 pair sums (<= 2 * 15 * 127 each) add up in one int16
 * accumulator (<= 30480); Q5: q in 0..31, pair sums <= 7874, so chunks 0-1
 * and 2-3 go to two (<= 31496) before vpmaddwd widens them.  Q4_0, Q5_0:
 * minus 8 or 16 times the sum of the block's y, exact; Q4_1, Q5_1: plus
 * m * s_a, the spec's second fmaf (s_a from the extras as a float). */
AI void tile_legacy(int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                    const float *ad, const int32_t *as, size_t bn, const int kind) {
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    const legacy_geo g = legacy_geo_of(kind);
    const bool five = g.five;
    const size_t xb = g.xb, abs_ = g.ab, aqo = g.aqo;
    const bool far_l2 = kern_prefetch_l2();
    for (int64_t b = 0; b < nb; b++, w += xb) {
        prefetch_block_far(w, xb, C, far_l2);
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(w + g.qho)) : _mm256_setzero_si256();
        __m256i s0[4], s1[4];
        for (int c = 0; c < C; c++) s0[c] = s1[c] = _mm256_setzero_si256();
#define LEGACY_STEP(j)                                                                                \
    {                                                                                                 \
        __m256i lo, hi;                                                                               \
        legacy_chunk(w, &g, qh, j, &lo, &hi);                                                         \
        for (int c = 0; c < C; c++) {                                                                 \
            const uint8_t *aq = a + (size_t)c * ba + (size_t)b * abs_ + aqo;                          \
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(aq + 4 * (j))),        \
                                               _mm256_maddubs_epi16(hi, bcast4(aq + 16 + 4 * (j)))); \
            if ((j) < 2 || !five) s0[c] = _mm256_add_epi16(s0[c], p);                                 \
            else s1[c] = _mm256_add_epi16(s1[c], p);                                                  \
        }                                                                                             \
    }
        if (C == 1) /* decode: all 4 chunks' loads early (memory-bound) */
            for (int j = 0; j < 4; j++) LEGACY_STEP(j)
        else /* prefill: unrolled further, the C accumulators spill */
#pragma GCC unroll 2
            for (int j = 0; j < 4; j++) LEGACY_STEP(j)
#undef LEGACY_STEP
        __m256i i32[4];
        for (int c = 0; c < C; c++) {
            i32[c] = _mm256_madd_epi16(s0[c], ones);
            if (five) i32[c] = _mm256_add_epi32(i32[c], _mm256_madd_epi16(s1[c], ones));
        }
        legacy_finish(C, w, &g, i32, as, ad, bn, b, acc);
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

PACK_ENTRY(tile_q8_0, tile_q8(nb, CC, y, ldy, w, a, ba, ad, bn))

PACK_ENTRY(tile_q4_0, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q4_0))

PACK_ENTRY(tile_q4_1, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q4_1))

PACK_ENTRY(tile_q5_0, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q5_0))

PACK_ENTRY(tile_q5_1, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q5_1))

/* Decode (T = 1) over NG consecutive groups at once (kern_pack_dec_fn):
 * NG streams gs bytes apart, each prefetched 1024 bytes ahead into L1
 * (past a group's end, the next run's: repack_tile.h prefetch_dec), as
 * repack_avx512.c's dec_q8 / dec_legacy read them, where tile_q8 and
 * tile_legacy read one group (one stream) at a time.  With 16 ymm
 * registers the block's activation broadcasts are loaded again for each
 * group (a load from L1) rather than held.  Each group's integer sums and
 * its fmaf chain are tile_q8's / tile_legacy's with C = 1, so the same
 * bits (the 16-bit partial sums of tile_legacy too).  tile_q8 and dec_q8
 * take |q| by vpabsb, not vpsignb(q, q) (the same bytes): on Zen 3 vpsignb
 * competes with the multiplies for their pipes (repack_s24_tile.h).  Zen
 * 3, an isolated loop of dec_q8 (4 groups of 64 blocks in L2, one thread,
 * best of 25): 37.2 GB/s of its bytes against 36.0; kvant-kernels -t 1
 * --types Q8_0, packed, from L3: 45.3 and 47.8 against 42.4 and 45.3. */
AI void dec_q8(const int NG, int64_t nb, float *y, const uint8_t *w0, size_t gs, const uint8_t *a, const float *ad) {
    __m256 acc[8];
    for (int n = 0; n < NG; n++) acc[n] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *aq = a + (size_t)b * sizeof(block_q8_0) + offsetof(block_q8_0, qs);
        for (int n = 0; n < NG; n++) {
            const uint8_t *w = w0 + (size_t)n * gs + (size_t)b * KERN_Q8_0X8_BYTES;
            prefetch_dec(w, (size_t)b * KERN_Q8_0X8_BYTES, KERN_Q8_0X8_BYTES, 1024, gs, NG);
            __m256i s = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(w + KERN_Q8_0X8_QS_AT + 32 * j));
                const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(bcast4(aq + 4 * j), q));
                s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
            }
            q8_finish(1, w, &s, ad, 0, b, &acc[n]);
        }
    }
    for (int n = 0; n < NG; n++) _mm256_storeu_ps(y + (size_t)n * KERN_PACK_ROWS, acc[n]);
}

AI void dec_legacy(const int NG, int64_t nb, float *y, const uint8_t *w0, size_t gs, const uint8_t *a,
                   const float *ad, const int32_t *as, const int kind) {
    __m256 acc[8];
    for (int n = 0; n < NG; n++) acc[n] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    const legacy_geo g = legacy_geo_of(kind);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *aq = a + (size_t)b * g.ab + g.aqo;
        for (int n = 0; n < NG; n++) {
            const uint8_t *w = w0 + (size_t)n * gs + (size_t)b * g.xb;
            prefetch_dec(w, (size_t)b * g.xb, g.xb, 1024, gs, NG);
            const __m256i qh = g.five ? _mm256_loadu_si256((const __m256i *)(w + g.qho)) : _mm256_setzero_si256();
            __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
            for (int j = 0; j < 4; j++) {
                __m256i lo, hi;
                legacy_chunk(w, &g, qh, j, &lo, &hi);
                const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(aq + 4 * j)),
                                                   _mm256_maddubs_epi16(hi, bcast4(aq + 16 + 4 * j)));
                if (j < 2 || !g.five) s0 = _mm256_add_epi16(s0, p);
                else s1 = _mm256_add_epi16(s1, p);
            }
            __m256i i32 = _mm256_madd_epi16(s0, ones);
            if (g.five) i32 = _mm256_add_epi32(i32, _mm256_madd_epi16(s1, ones));
            legacy_finish(1, w, &g, &i32, as, ad, 0, b, &acc[n]);
        }
    }
    for (int n = 0; n < NG; n++) _mm256_storeu_ps(y + (size_t)n * KERN_PACK_ROWS, acc[n]);
}

/* groups per decode run: 4 measured within noise of 8 (ahead in 5 of 6
 * pairs), and leaves the registers to the chains */
#define DEC_NG 4
static void dec_q8_0(int64_t nb, float *y, const uint8_t *w, size_t gs, const uint8_t *a, const float *ad,
                     const int32_t *as) {
    (void)as;
    dec_q8(DEC_NG, nb, y, w, gs, a, ad);
}
#define DEC_LEGACY(name, kind)                                                                         \
    static void name(int64_t nb, float *y, const uint8_t *w, size_t gs, const uint8_t *a, const float *ad, \
                     const int32_t *as) {                                                                  \
        dec_legacy(DEC_NG, nb, y, w, gs, a, ad, as, kind);                                                 \
    }
DEC_LEGACY(dec_q4_0, L_Q4_0)
DEC_LEGACY(dec_q4_1, L_Q4_1)
DEC_LEGACY(dec_q5_0, L_Q5_0)
DEC_LEGACY(dec_q5_1, L_Q5_1)

/* 8 bytes (one per row) widened to both int16 halves of each row's lane:
 * broadcast to both 128-bit lanes, vpshufb puts row r's byte in lane r's
 * two int16 (low byte, zero above; or high byte, then an arithmetic shift
 * sign-extends it) */
AI __m256i dup_u8(const uint8_t *p) {
    const __m256i ctl = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1, /* rows 0..3 */
                                         4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    return _mm256_shuffle_epi8(_mm256_broadcastq_epi64(_mm_loadl_epi64((const __m128i *)p)), ctl);
}
AI __m256i dup_i8(const uint8_t *p) {
    const __m256i ctl = _mm256_setr_epi8(-1, 0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, /* rows 0..3 */
                                         -1, 4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7);
    return _mm256_srai_epi16(_mm256_shuffle_epi8(_mm256_broadcastq_epi64(_mm_loadl_epi64((const __m128i *)p)), ctl), 8);
}

AI __m256i bcast4s(const int8_t *p) { return bcast4((const uint8_t *)p); }

/* Q4_K, and Q5_K (q5: the fifth bit from the qh chunks, q in 0..31) */
AI void tile_q45k(int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                  const float *ad, const int32_t *as, size_t bn, const bool q5) {
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const size_t xb = q5 ? KERN_Q5_KX8_BYTES : KERN_Q4_KX8_BYTES;
    const bool far_l2 = kern_prefetch_l2();
    for (int64_t b = 0; b < nb; b++, w += xb) {
        prefetch_block_far(w, xb, C, far_l2);
        __m256i is[4];
        for (int c = 0; c < C; c++) is[c] = _mm256_setzero_si256();
        if (C == 1) { /* decode: both nibbles of each qs load at once, sub-blocks 2p and 2p + 1 together */
            const int8_t *aq = AK(0, b)->qs;
            for (int p = 0; p < 4; p++) {
                __m256i se = _mm256_setzero_si256(), so = _mm256_setzero_si256();
                for (int j = 0; j < 8; j++) {
                    __m256i lo, hi;
                    q45k_pair(w, p, j, q5, &lo, &hi);
                    se = _mm256_add_epi16(se, _mm256_maddubs_epi16(lo, bcast4s(aq + 64 * p + 4 * j)));
                    so = _mm256_add_epi16(so, _mm256_maddubs_epi16(hi, bcast4s(aq + 64 * p + 32 + 4 * j)));
                    if (q5 && j == 3) { /* bounds as below */
                        is[0] = _mm256_add_epi32(is[0], _mm256_add_epi32(_mm256_madd_epi16(se, dup_u8(w + KERN_Q4_KX8_SC_AT + 16 * p)),
                                                                         _mm256_madd_epi16(so, dup_u8(w + KERN_Q4_KX8_SC_AT + 8 + 16 * p))));
                        se = so = _mm256_setzero_si256();
                    }
                }
                is[0] = _mm256_add_epi32(is[0], _mm256_add_epi32(_mm256_madd_epi16(se, dup_u8(w + KERN_Q4_KX8_SC_AT + 16 * p)),
                                                                 _mm256_madd_epi16(so, dup_u8(w + KERN_Q4_KX8_SC_AT + 8 + 16 * p))));
            }
            q45k_finish(C, w, is, as, ad, bn, b, acc);
            continue;
        }
        for (int sb = 0; sb < 8; sb++) { /* sub-block: the low (even) or high (odd) nibbles of qs bytes 32(sb/2) .. +31 */
            const __m256i sc = dup_u8(w + KERN_Q4_KX8_SC_AT + 8 * sb);
            __m256i s[4];
            for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int j = 0; j < 8; j++) {
                const __m256i q = q45k_chunk(w, sb, j, q5);
                /* Q4_K: 8 pair sums of <= 2 * 15 * 127 = 3810: <= 30480;
                 * Q5_K: pair sums <= 2 * 31 * 127 = 7874, so widened after 4 (<= 31496) */
                for (int c = 0; c < C; c++)
                    s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(q, bcast4s(AK(c, b)->qs + 32 * sb + 4 * j)));
                if (q5 && j == 3)
                    for (int c = 0; c < C; c++) {
                        is[c] = _mm256_add_epi32(is[c], _mm256_madd_epi16(s[c], sc));
                        s[c] = _mm256_setzero_si256();
                    }
            }
            for (int c = 0; c < C; c++) is[c] = _mm256_add_epi32(is[c], _mm256_madd_epi16(s[c], sc));
        }
        q45k_finish(C, w, is, as, ad, bn, b, acc);
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

/* The K-quants with 16-element sub-blocks: Q6_K, Q3_K, Q2_K (kind).
 * Scales at @16 (Q6_K, Q3_K: int8; Q2_K: @32, the file's byte, scale in
 * the low nibble, min in the high one); quarter qq of chunk j of half h
 * is elements 128h + 32qq + 4j .. +3, sub-block 8h + 2qq + j/4.
 *   Q6_K: ql chunks 16h + j (quarters 0, 2: low, high nibble) and
 *         16h + 8 + j (quarters 1, 3), qh chunk 8h + j (bits 2qq); q - 32.
 *   Q3_K: qs chunk 8h + j (bits 2qq), hmask chunk j (bit 4h + qq); q - 4.
 *   Q2_K: qs chunk 8h + j (bits 2qq); minus the mins (from bsums). */

/* quarter qq of chunk j of half h of a K16 block (q in 0..63, 0..7 or 0..3) */
AI __m256i k16_quarter(const uint8_t *w, const int kind, int h, int j, int qq) {
    if (kind != K16_Q6) { /* Q2_K: q = 2 bits; Q3_K: | hmask bit << 2 (0..7) */
        const size_t qso = k16_qs_at(kind);
        const __m256i l = _mm256_loadu_si256((const __m256i *)(w + qso + 32 * (8 * h + j)));
        __m256i q = _mm256_and_si256(_mm256_srli_epi16(l, 2 * qq), _mm256_set1_epi8(3));
        if (kind == K16_Q3) {
            const __m256i hm = _mm256_loadu_si256((const __m256i *)(w + KERN_Q3_KX8_HMASK_AT + 32 * j));
            const int k = 4 * h + qq; /* the hmask bit, moved to bit 2 */
            const __m256i hb = k >= 2 ? _mm256_srli_epi16(hm, k - 2) : _mm256_slli_epi16(hm, 2 - k);
            q = _mm256_or_si256(q, _mm256_and_si256(hb, _mm256_set1_epi8(4)));
        }
        return q;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m256i l = _mm256_loadu_si256((const __m256i *)(w + KERN_Q6_KX8_QL_AT + 32 * (16 * h + (qq & 1 ? 8 : 0) + j)));
    const __m256i hb = _mm256_loadu_si256((const __m256i *)(w + KERN_Q6_KX8_QH_AT + 32 * (8 * h + j)));
    const __m256i lo = qq < 2 ? l : _mm256_srli_epi16(l, 4);
    const __m256i hi = qq == 0 ? _mm256_slli_epi16(hb, 4) : qq == 1 ? _mm256_slli_epi16(hb, 2) : qq == 2 ? hb : _mm256_srli_epi16(hb, 2);
    return _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(hi, m30));
}

AI void tile_k16(int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                 const float *ad, size_t bn, const int kind) {
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const __m256i lo4 = _mm256_set1_epi16(0x0f);
    const size_t xb = k16_xb(kind);
    const size_t sco = k16_sc_at(kind);
    const bool far_l2 = kind != K16_Q3 && kern_prefetch_l2(); /* Q3_K near: repack_tile.h */
    for (int64_t b = 0; b < nb; b++, w += xb) {
        prefetch_block_far(w, xb, C, far_l2);
        __m256i is[4];
        for (int c = 0; c < C; c++) is[c] = _mm256_setzero_si256();
        if (C == 1) { /* decode: the order below, the 4 sub-blocks' scales widened once per 2 chunk pairs */
            const int8_t *aq = AK(0, b)->qs;
            for (int h = 0; h < 2; h++)
#pragma GCC unroll 1
                for (int jh = 0; jh < 2; jh++) {
                    __m256i sc[4];
                    for (int qq = 0; qq < 4; qq++) {
                        const int sb = 8 * h + 2 * qq + jh;
                        sc[qq] = kind == K16_Q2 ? _mm256_and_si256(dup_u8(w + sco + 8 * sb), lo4) : dup_i8(w + sco + 8 * sb);
                    }
                    for (int jq = 0; jq < 2; jq++) {
                        const int jp = 2 * jh + jq;
                        for (int qq = 0; qq < 4; qq++) {
                            const __m256i q0 = k16_quarter(w, kind, h, 2 * jp, qq), q1 = k16_quarter(w, kind, h, 2 * jp + 1, qq);
                            const int e = 128 * h + 32 * qq + 8 * jp;
                            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(q0, bcast4s(aq + e)),
                                                               _mm256_maddubs_epi16(q1, bcast4s(aq + e + 4)));
                            is[0] = _mm256_add_epi32(is[0], _mm256_madd_epi16(p, sc[qq]));
                        }
                    }
                }
        } else
        /* chunks go in pairs (2 pair sums per int16 lane); each quarter is
         * decoded from its loads when used (L1 hits) rather than 8 held at
         * once: fewer spills of the C accumulators (Q6_K prefill +6%) */
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 1
            for (int jp = 0; jp < 4; jp++)
                for (int qq = 0; qq < 4; qq++) {
                    const __m256i q0 = k16_quarter(w, kind, h, 2 * jp, qq), q1 = k16_quarter(w, kind, h, 2 * jp + 1, qq);
                    const int sb = 8 * h + 2 * qq + jp / 2, e = 128 * h + 32 * qq + 8 * jp;
                    const __m256i sc = kind == K16_Q2 ? _mm256_and_si256(dup_u8(w + sco + 8 * sb), lo4) : dup_i8(w + sco + 8 * sb);
                    for (int c = 0; c < C; c++) { /* Q6_K q in 0..63: pair sums <= 16002, two <= 32004 (Q3_K: 3556, Q2_K: 1524) */
                        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(q0, bcast4s(AK(c, b)->qs + e)),
                                                           _mm256_maddubs_epi16(q1, bcast4s(AK(c, b)->qs + e + 4)));
                        is[c] = _mm256_add_epi32(is[c], _mm256_madd_epi16(p, sc));
                    }
                }
        k16_finish(w, kind, C, is, a, ba, b, ad, bn, acc);
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

PACK_ENTRY(tile_q4_k, tile_q45k(nb, CC, y, ldy, w, a, ba, ad, as, bn, false))

PACK_ENTRY(tile_q5_k, tile_q45k(nb, CC, y, ldy, w, a, ba, ad, as, bn, true))

PACK_ENTRY(tile_q6_k, tile_k16(nb, CC, y, ldy, w, a, ba, ad, bn, K16_Q6))

PACK_ENTRY(tile_q3_k, tile_k16(nb, CC, y, ldy, w, a, ba, ad, bn, K16_Q3))

PACK_ENTRY(tile_q2_k, tile_k16(nb, CC, y, ldy, w, a, ba, ad, bn, K16_Q2))

/* Q8_K rows as kern_quant_q8_k_ref, byte for byte, for any input: the
 * first element of largest |x| gives max (the ref's strict > scan, which
 * NaN never wins), iscale = -127 / max, q = min(127, nearest_int(iscale
 * x)) with the ref's own trick (add 1.5 * 2^23, keep the mantissa: round
 * half to even, and a NaN gives 0), bsums from the bytes, d = 1 / iscale.
 * A block whose amax or iscale is not finite (inf inputs, amax below
 * ~2^-126) goes to the ref, where out-of-range values wrap. */
void kern_pack_quant_q8_k_avx2(const float *x, void *vy, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    block_q8_K *y = vy;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        __m256 am = _mm256_setzero_ps();
        for (int k = 0; k < QK_K / 8; k++) am = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), am);
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        if (!amax) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0;
        if (!(amax <= 3.4e38f)) { /* inf */
            kern_quant_q8_k_ref(x, &y[b], QK_K);
            continue;
        }
        for (int k = 0; k < QK_K / 8; k++) {
            const int msk = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (msk) {
                max = x[8 * k + __builtin_ctz((unsigned)msk)];
                break;
            }
        }
        const float iscale = -127.f / max;
        if (!(fabsf(iscale) <= 3.4e38f)) {
            kern_quant_q8_k_ref(x, &y[b], QK_K);
            continue;
        }
        const __m256 mul = _mm256_set1_ps(iscale), magic = _mm256_set1_ps(12582912.f);
        const __m256i lim = _mm256_set1_epi32(127), perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        const __m256i mant = _mm256_set1_epi32(0x007fffff), half = _mm256_set1_epi32(0x00400000);
        for (int k = 0; k < QK_K / 32; k++) {
            __m256i i[4];
            for (int u = 0; u < 4; u++) { /* |iscale x| <= 127 (1 + 2^-22) for finite x: in [-127, 127] */
                const __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * k + 8 * u), mul), magic);
                i[u] = _mm256_min_epi32(lim, _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(t), mant), half));
            }
            /* |q| <= 127: the saturating packs are exact; the permute undoes their lane interleave */
            const __m256i p = _mm256_permutevar8x32_epi32(
                _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3])), perm);
            _mm256_storeu_si256((__m256i *)(y[b].qs + 32 * k), p);
            /* sums of 8 bytes as unsigned (q + 128), then of 16 */
            const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(p, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
            y[b].bsums[2 * k] = (int16_t)(_mm256_extract_epi64(sad, 0) + _mm256_extract_epi64(sad, 1) - 16 * 128);
            y[b].bsums[2 * k + 1] = (int16_t)(_mm256_extract_epi64(sad, 2) + _mm256_extract_epi64(sad, 3) - 16 * 128);
        }
        y[b].d = 1 / iscale;
    }
}

/* the 2:4 sparse S24_Q8 (kernels/repack_s24.c): the shared tile, vpmaddubsw dots */
#define S24_VNNI 0
#include "kernels/repack_s24_tile.h"

static void dec_s24_q8(int64_t nb, float *y, const uint8_t *w, size_t gs, const uint8_t *a, const float *ad,
                       const int32_t *as) {
    (void)ad, (void)as;
    dec_s24q8(DEC_NG, nb, y, w, gs, a);
}

kern_pack_dec_fn kern_pack_dec_avx2(int wtype, int *ng) {
    *ng = DEC_NG;
    switch (wtype) {
    case KT_S24_F16: *ng = S24_DEC_NG; return dec_s24_f16;
    case KT_S24_Q8: return dec_s24_q8;
    case KT_Q8_0: return dec_q8_0;
    case KT_Q4_0: return dec_q4_0;
    case KT_Q4_1: return dec_q4_1;
    case KT_Q5_0: return dec_q5_0;
    case KT_Q5_1: return dec_q5_1;
    default: return NULL;
    }
}

kern_pack_tile_fn kern_pack_tile_avx2(int wtype) {
    switch (wtype) {
    case KT_Q8_0: return tile_q8_0;
    case KT_Q4_0: return tile_q4_0;
    case KT_Q4_1: return tile_q4_1;
    case KT_Q5_0: return tile_q5_0;
    case KT_Q5_1: return tile_q5_1;
    case KT_Q2_K: return tile_q2_k;
    case KT_Q3_K: return tile_q3_k;
    case KT_Q4_K: return tile_q4_k;
    case KT_Q5_K: return tile_q5_k;
    case KT_Q6_K: return tile_q6_k;
    case KT_S24_Q8: return tile_s24_q8;
    case KT_S24_F16: return tile_s24_f16;
    default: return NULL;
    }
}

/* kvant's PTQ types (kernels/repack_ptq.c): the shared tile, vpmaddubsw dots */
#define PTQ_VNNI 0
#include "kernels/ptq.h"
#include "kernels/repack_ptq_tile.h"

kern_pack_ptq_tile_fn kern_pack_ptq_tile_avx2(int wtype) {
    int scheme, bits, gran;
    return kern_ptq_decode(wtype, &scheme, &bits, &gran) ? ptq_tile_of(bits, scheme == KERN_PTQ_ZEROPOINT) : NULL;
}

/* the stored W8A8 type (kernels/repack_w8a8.c) */
#define W8_VNNI 0
#include "kernels/repack_w8a8_tile.h"

kern_pack_w8a8_tile_fn kern_pack_w8a8_tile_avx2(void) { return tile_w8a8; }
