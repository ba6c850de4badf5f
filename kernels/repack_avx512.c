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
 *   Q6_K, Q3_K, Q2_K (16-element sub-blocks): q unsigned (0..63, 0..7,
 *         0..3, the AVX2 tile's decoding), per sub-block the exact dot in
 *         int32 (4 vpdpbusd; |.| <= 16 * 63 * 127), times the sub-block's
 *         scale (vpmulld: int8 for Q6_K / Q3_K, the low nibble for Q2_K),
 *         summed over the block (|I| < 2^28); the offset (32 or 4 times
 *         sum_s sc_s bsum_s) or the Q2_K mins, and the float scaling,
 *         exactly as the AVX2 tile (repack_avx2.c tile_k16).
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
#define kern_pack_dec_avx512 kern_pack_dec_avx512_emulated
#define kern_pack_tile_dec_avx512 kern_pack_tile_dec_avx512_emulated
kern_pack_tile_fn kern_pack_tile_dec_avx512_emulated(int wtype);
kern_pack_dec_fn kern_pack_dec_avx512_emulated(int wtype, int *ng);
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
    for (int64_t b = 0; b < nb; b++, w += KERN_Q8_0X8_BYTES) {
        prefetch_block(w, KERN_Q8_0X8_BYTES, C);
        __m256i s[4];
        for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w + KERN_Q8_0X8_QS_AT + 32 * j));
            const __m256i u = _mm256_sign_epi8(q, q); /* |q|, exact as unsigned even for -128 */
            for (int c = 0; c < C; c++) s[c] = dpbusd(s[c], u, _mm256_sign_epi8(bcast4(AQS(c, b) + 4 * j), q));
        }
        q8_finish(C, w, s, ad, bn, b, acc);
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

/* Q8_0 decode over NG = 8 consecutive groups at once (kern_pack_dec_fn):
 * 8 streams gs bytes apart, each prefetched 1024 bytes ahead into L1
 * (past a group's end, the next run's: repack_tile.h prefetch_dec), as
 * the F16 tile reads (repack_f16_avx2.c), where tile_q8 reads one group,
 * one stream; the block's 8 activation dwords are broadcast once for the
 * 8 groups.  Each group's integer sums and its fmaf chain are tile_q8's
 * with C = 1, so the same bits.  Zen 5 (family 26 model 2), 2 threads,
 * one matrix shape of 22 tinyllama-1.1b layers (random weights, 112-270
 * MB, all past the L3), mean of 16-20 alternating runs: gate 5632 x 2048
 * 6.12 ms against tile_q8's 7.46, down 2048 x 5632 6.94 against 10.17, q
 * 2048 x 2048 2.50 against 3.44 (4 groups 1024 / 2048 ahead: 6.89 / 6.96,
 * 7.93 / 7.25, 2.80 / 2.83). */
AI void dec_q8(const int NG, int64_t nb, float *y, const uint8_t *w0, size_t gs, const uint8_t *a, const float *ad) {
    __m256 acc[8];
    for (int n = 0; n < NG; n++) acc[n] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *aq = a + (size_t)b * sizeof(block_q8_0) + offsetof(block_q8_0, qs);
        __m256i av[8];
        for (int j = 0; j < 8; j++) av[j] = bcast4(aq + 4 * j);
        for (int n = 0; n < NG; n++) {
            const uint8_t *w = w0 + (size_t)n * gs + (size_t)b * KERN_Q8_0X8_BYTES;
            prefetch_dec(w, (size_t)b * KERN_Q8_0X8_BYTES, KERN_Q8_0X8_BYTES, 1024, gs, NG);
            __m256i s = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(w + KERN_Q8_0X8_QS_AT + 32 * j));
                s = dpbusd(s, _mm256_sign_epi8(q, q), _mm256_sign_epi8(av[j], q));
            }
            q8_finish(1, w, &s, ad, 0, b, &acc[n]);
        }
    }
    for (int n = 0; n < NG; n++) _mm256_storeu_ps(y + (size_t)n * KERN_PACK_ROWS, acc[n]);
}

static void dec8_q8_0(int64_t nb, float *y, const uint8_t *w, size_t gs, const uint8_t *a, const float *ad,
                      const int32_t *as) {
    (void)as;
    dec_q8(8, nb, y, w, gs, a, ad);
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
    const bool far_l2 = kern_prefetch_l2();
    for (int64_t b = 0; b < nb; b++, w += xb) {
        prefetch_block_far(w, xb, C, far_l2);
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

/* The same kinds' decode over NG = 8 groups at once, as dec_q8: the
 * block's 8 activation dwords broadcast once for the 8 groups, each
 * group's sums and finish tile_legacy's with C = 1, so the same bits. */
AI void dec_legacy(const int NG, int64_t nb, float *y, const uint8_t *w0, size_t gs, const uint8_t *a,
                   const float *ad, const int32_t *as, const int kind) {
    __m256 acc[8];
    for (int n = 0; n < NG; n++) acc[n] = _mm256_setzero_ps();
    const legacy_geo g = legacy_geo_of(kind);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *aq = a + (size_t)b * g.ab + g.aqo;
        __m256i av[8];
        for (int j = 0; j < 8; j++) av[j] = bcast4(aq + 4 * (j % 4) + 16 * (j / 4));
        for (int n = 0; n < NG; n++) {
            const uint8_t *w = w0 + (size_t)n * gs + (size_t)b * g.xb;
            prefetch_dec(w, (size_t)b * g.xb, g.xb, 1024, gs, NG);
            const __m256i qh = g.five ? _mm256_loadu_si256((const __m256i *)(w + g.qho)) : _mm256_setzero_si256();
            __m256i s = _mm256_setzero_si256();
            for (int j = 0; j < 4; j++) {
                __m256i lo, hi;
                legacy_chunk(w, &g, qh, j, &lo, &hi);
                s = dpbusd(dpbusd(s, lo, av[j]), hi, av[4 + j]);
            }
            legacy_finish(1, w, &g, &s, as, ad, 0, b, &acc[n]);
        }
    }
    for (int n = 0; n < NG; n++) _mm256_storeu_ps(y + (size_t)n * KERN_PACK_ROWS, acc[n]);
}

/* Q4_K, and Q5_K (q5: the fifth bit from the qh chunks, q in 0..31); the
 * packed layout of repack.h, the decoding of repack_avx2.c tile_q45k */
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
        /* as the AVX2 tile, both nibbles of each qs load at once: sub-blocks 2p (low) and 2p + 1 (high), one
         * int32 chain each per row (4 rows: 8 chains, which the 32 AVX-512 registers hold) */
        for (int p = 0; p < 4; p++) {
            __m256i se[4], so[4];
            for (int c = 0; c < C; c++) se[c] = so[c] = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                __m256i lo, hi;
                q45k_pair(w, p, j, q5, &lo, &hi);
                for (int c = 0; c < C; c++) {
                    const uint8_t *aq = (const uint8_t *)AK(c, b)->qs + 64 * p + 4 * j;
                    se[c] = dpbusd(se[c], lo, bcast4(aq));
                    so[c] = dpbusd(so[c], hi, bcast4(aq + 32));
                }
            }
            /* the 8 rows' scales of sub-blocks 2p and 2p + 1, one per lane (0..63);
             * |s| <= 32 * 31 * 128, times sc <= 63: exact int32 */
            const __m256i sce = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(w + KERN_Q4_KX8_SC_AT + 16 * p)));
            const __m256i sco = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(w + KERN_Q4_KX8_SC_AT + 8 + 16 * p)));
            for (int c = 0; c < C; c++)
                is[c] = _mm256_add_epi32(is[c], _mm256_add_epi32(_mm256_mullo_epi32(se[c], sce), _mm256_mullo_epi32(so[c], sco)));
        }
        q45k_finish(C, w, is, as, ad, bn, b, acc);
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

/* The K-quants with 16-element sub-blocks: Q6_K, Q3_K, Q2_K (kind), the
 * packed layout of repack.h and the decoding of repack_avx2.c tile_k16.
 * Scales at @16 (Q6_K, Q3_K: int8) or @32 (Q2_K: scale | min << 4);
 * quarter qq of chunk j (0..7) of half h is elements 128h + 32qq + 4j ..
 * +3, sub-block 8h + 2qq + j/4. */
enum { DEC2_NG = 2, DEC2_PF = 4096 }; /* dec_k16, dec_q4k: groups per run, prefetch distance */

/* the 4 quarters q[qq] of chunk j of half h, from one set of loads:
 *   Q6_K: ql chunks 16h + j (quarters 0, 2: low, high nibble) and
 *         16h + 8 + j (1, 3), qh chunk 8h + j (bits 2qq); q in 0..63;
 *   Q3_K: qs chunk 8h + j (bits 2qq), hmask chunk j (bit 4h + qq) << 2;
 *         q in 0..7;
 *   Q2_K: qs chunk 8h + j (bits 2qq); q in 0..3 */
AI void k16_chunk(const uint8_t *w, const int kind, int h, int j, __m256i q[4]) {
    if (kind == K16_Q6) {
        const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(w + KERN_Q6_KX8_QL_AT + 32 * (16 * h + j)));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(w + KERN_Q6_KX8_QL_AT + 32 * (16 * h + 8 + j)));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(w + KERN_Q6_KX8_QH_AT + 32 * (8 * h + j)));
        q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
        q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
        return;
    }
    const size_t qso = k16_qs_at(kind);
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i l = _mm256_loadu_si256((const __m256i *)(w + qso + 32 * (8 * h + j)));
    q[0] = _mm256_and_si256(l, m3);
    q[1] = _mm256_and_si256(_mm256_srli_epi16(l, 2), m3);
    q[2] = _mm256_and_si256(_mm256_srli_epi16(l, 4), m3);
    q[3] = _mm256_and_si256(_mm256_srli_epi16(l, 6), m3);
    if (kind == K16_Q3) {
        const __m256i hm = _mm256_loadu_si256((const __m256i *)(w + KERN_Q3_KX8_HMASK_AT + 32 * j)), m4 = _mm256_set1_epi8(4);
        for (int qq = 0; qq < 4; qq++) {
            const int k = 4 * h + qq; /* the hmask bit, moved to bit 2 */
            const __m256i hb = k >= 2 ? _mm256_srli_epi16(hm, k - 2) : _mm256_slli_epi16(hm, 2 - k);
            q[qq] = _mm256_or_si256(q[qq], _mm256_and_si256(hb, m4));
        }
    }
}

AI void tile_k16(int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,
                 const float *ad, size_t bn, const int kind) {
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const size_t xb = k16_xb(kind);
    const size_t sco = k16_sc_at(kind);
    const bool far_l2 = kind != K16_Q3 && kern_prefetch_l2(); /* Q3_K near: repack_tile.h */
    for (int64_t b = 0; b < nb; b++, w += xb) {
        prefetch_block_far(w, xb, C, far_l2);
        __m256i is[4];
        for (int c = 0; c < C; c++) is[c] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++)
            for (int jh = 0; jh < 2; jh++) { /* sub-blocks 8h + 2qq + jh: chunks 4jh .. 4jh + 3 of the 4 quarters */
                __m256i s[4][4];
                for (int qq = 0; qq < 4; qq++)
                    for (int c = 0; c < C; c++) s[qq][c] = _mm256_setzero_si256();
                for (int jj = 0; jj < 4; jj++) {
                    const int j = 4 * jh + jj;
                    __m256i q[4];
                    k16_chunk(w, kind, h, j, q);
                    for (int qq = 0; qq < 4; qq++)
                        for (int c = 0; c < C; c++)
                            s[qq][c] = dpbusd(s[qq][c], q[qq], bcast4((const uint8_t *)AK(c, b)->qs + 128 * h + 32 * qq + 4 * j));
                }
                /* |s| <= 16 * 63 * 127 (Q6_K), times |sc| <= 128, 16 of them: < 2^28, exact */
                for (int qq = 0; qq < 4; qq++) {
                    const __m128i sb8 = _mm_loadl_epi64((const __m128i *)(w + sco + 8 * (8 * h + 2 * qq + jh)));
                    const __m256i sc = kind == K16_Q2 ? _mm256_and_si256(_mm256_cvtepu8_epi32(sb8), _mm256_set1_epi32(15))
                                                      : _mm256_cvtepi8_epi32(sb8);
                    for (int c = 0; c < C; c++) is[c] = _mm256_add_epi32(is[c], _mm256_mullo_epi32(s[qq][c], sc));
                }
            }
        k16_finish(w, kind, C, is, a, ba, b, ad, bn, acc);
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

/* Q3_K and Q2_K decode (kern_pack_dec_fn) over NG = 2 consecutive groups,
 * two to a zmm: the low half holds group n's 8 lanes, the high half group
 * n + 1's, and every integer operation of tile_k16 (the chunk decoding,
 * vpdpbusd, the scales' vpmulld) acts on both at once, lane for lane as on
 * the ymm, so each group's sums are tile_k16's; the end of each block is
 * k16_finish per group (C = 1), so each group's outputs are tile_k16's,
 * bit for bit.  Half the vector instructions per weight: these two kinds
 * were compute-bound from memory (37-40% of the roofline).  Each stream
 * is prefetched DEC2_PF bytes ahead into L1 (prefetch_dec).
 *
 * Zen 5 (family 26 model 2), 2 threads.  kvant-kernels (K 4096, decode
 * GB/s of weights, three alternating rounds): Q2_K 37-47 -> 58-68, Q3_K
 * 31-38 -> 44-57.  Synthetic tinyllama-1.1b tg32, alternating (kvant
 * bench -p 0 -n 32 -r 2 -t 2, meter 61-62 GB/s): Q2_K 86-91 -> 109-140
 * t/s, Q3_K_S 62-68 -> 88-94 (2048 bytes ahead: 107-123 and 79-83; 4
 * groups: no better).  Q6_K measured no faster this way (tg32 36-45 t/s
 * for 0 / 1024 / 2048 / 4096 / 8192 bytes ahead and 2 or 4 groups,
 * against 42-46 one group at a time: its blocks are twice Q3_K's bytes, so
 * it is nearer its memory bound) and keeps tile_k16.  Not on Zen 4, where
 * a zmm operation costs two (kern_pack_dec_avx512).  In the emulated build
 * each z_ operation is its ymm twin on the two halves. */
AI __m512i z_join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
AI __m256i z_lo(__m512i v) { return _mm512_castsi512_si256(v); }
AI __m256i z_hi(__m512i v) { return _mm512_extracti64x4_epi64(v, 1); }
#ifdef KVANT_VNNI_EMULATED
#define Z_OP2(name, op) \
    AI __m512i name(__m512i x, __m512i y) { return z_join(op(z_lo(x), z_lo(y)), op(z_hi(x), z_hi(y))); }
Z_OP2(z_and, _mm256_and_si256)
Z_OP2(z_or, _mm256_or_si256)
Z_OP2(z_add32, _mm256_add_epi32)
Z_OP2(z_mullo32, _mm256_mullo_epi32)
#undef Z_OP2
AI __m512i z_srl16(__m512i x, int n) {
    return z_join(_mm256_srl_epi16(z_lo(x), _mm_cvtsi32_si128(n)), _mm256_srl_epi16(z_hi(x), _mm_cvtsi32_si128(n)));
}
AI __m512i z_sll16(__m512i x, int n) {
    return z_join(_mm256_sll_epi16(z_lo(x), _mm_cvtsi32_si128(n)), _mm256_sll_epi16(z_hi(x), _mm_cvtsi32_si128(n)));
}
AI __m512i z_dpbusd(__m512i acc, __m512i u, __m512i v) {
    return z_join(dpbusd(z_lo(acc), z_lo(u), z_lo(v)), dpbusd(z_hi(acc), z_hi(u), z_hi(v)));
}
#else
AI __m512i z_and(__m512i x, __m512i y) { return _mm512_and_si512(x, y); }
AI __m512i z_or(__m512i x, __m512i y) { return _mm512_or_si512(x, y); }
AI __m512i z_add32(__m512i x, __m512i y) { return _mm512_add_epi32(x, y); }
AI __m512i z_mullo32(__m512i x, __m512i y) { return _mm512_mullo_epi32(x, y); }
AI __m512i z_srl16(__m512i x, int n) { return _mm512_srl_epi16(x, _mm_cvtsi32_si128(n)); }
AI __m512i z_sll16(__m512i x, int n) { return _mm512_sll_epi16(x, _mm_cvtsi32_si128(n)); }
AI __m512i z_dpbusd(__m512i acc, __m512i u, __m512i v) { return _mm512_dpbusd_epi32(acc, u, v); }
#endif

/* 32 bytes at off of the group at w (low half) and of the next, gs bytes on */
AI __m512i ld_2g(const uint8_t *w, size_t gs, size_t off) {
    return z_join(_mm256_loadu_si256((const __m256i *)(w + off)), _mm256_loadu_si256((const __m256i *)(w + gs + off)));
}

/* 8 bytes at off of the group at w and of the next, widened to int32
 * lanes (sgn: as int8, else as uint8) */
AI __m512i b8_2g(const uint8_t *w, size_t gs, size_t off, const bool sgn) {
    const __m128i x0 = _mm_loadl_epi64((const __m128i *)(w + off)), x1 = _mm_loadl_epi64((const __m128i *)(w + gs + off));
    return sgn ? z_join(_mm256_cvtepi8_epi32(x0), _mm256_cvtepi8_epi32(x1))
               : z_join(_mm256_cvtepu8_epi32(x0), _mm256_cvtepu8_epi32(x1));
}

/* both groups' streams of a run, xb-byte blocks at block offset off */
AI void prefetch_dec_2g(const uint8_t *w, size_t off, size_t xb, size_t gs, const int NG) {
    prefetch_dec(w, off, xb, DEC2_PF, gs, NG);
    prefetch_dec(w + gs, off, xb, DEC2_PF, gs, NG);
}

/* k16_chunk of two groups at once (Q3_K, Q2_K) */
AI void k16_chunk_2g(const uint8_t *w, size_t gs, const int kind, int h, int j, __m512i q[4]) {
    const __m512i m3 = _mm512_set1_epi32(0x03030303);
    const __m512i l = ld_2g(w, gs, k16_qs_at(kind) + 32 * (8 * h + j));
    for (int qq = 0; qq < 4; qq++) q[qq] = z_and(z_srl16(l, 2 * qq), m3);
    if (kind == K16_Q3) {
        const __m512i hm = ld_2g(w, gs, KERN_Q3_KX8_HMASK_AT + 32 * j), m4 = _mm512_set1_epi32(0x04040404);
        for (int qq = 0; qq < 4; qq++) {
            const int k = 4 * h + qq; /* the hmask bit, moved to bit 2 */
            q[qq] = z_or(q[qq], z_and(k >= 2 ? z_srl16(hm, k - 2) : z_sll16(hm, 2 - k), m4));
        }
    }
}

/* the 8 rows' scales of sub-block s of two groups, as int32 lanes */
AI __m512i k16_scales_2g(const uint8_t *w, size_t gs, const int kind, int s) {
    const size_t o = k16_sc_at(kind) + 8 * (size_t)s;
    return kind == K16_Q2 ? z_and(b8_2g(w, gs, o, false), _mm512_set1_epi32(15)) : b8_2g(w, gs, o, true);
}

AI void dec_k16(const int NG, int64_t nb, float *y, const uint8_t *w0, size_t gs, const uint8_t *a, const float *ad,
                const int kind) {
    __m256 acc[8];
    for (int n = 0; n < NG; n++) acc[n] = _mm256_setzero_ps();
    const size_t xb = k16_xb(kind);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *aq = (const uint8_t *)((const block_q8_K *)a + b)->qs;
        for (int n = 0; n < NG; n += 2) {
            const uint8_t *w = w0 + (size_t)n * gs + (size_t)b * xb;
            prefetch_dec_2g(w, (size_t)b * xb, xb, gs, NG);
            __m512i is = _mm512_setzero_si512();
            for (int h = 0; h < 2; h++)
                for (int jh = 0; jh < 2; jh++) { /* sub-blocks 8h + 2qq + jh, as tile_k16 */
                    __m512i s[4];
                    for (int qq = 0; qq < 4; qq++) s[qq] = _mm512_setzero_si512();
                    for (int jj = 0; jj < 4; jj++) {
                        const int j = 4 * jh + jj;
                        __m512i q[4];
                        k16_chunk_2g(w, gs, kind, h, j, q);
                        for (int qq = 0; qq < 4; qq++) {
                            int32_t v;
                            memcpy(&v, aq + 128 * h + 32 * qq + 4 * j, 4);
                            s[qq] = z_dpbusd(s[qq], q[qq], _mm512_set1_epi32(v));
                        }
                    }
                    for (int qq = 0; qq < 4; qq++)
                        is = z_add32(is, z_mullo32(s[qq], k16_scales_2g(w, gs, kind, 8 * h + 2 * qq + jh)));
                }
            const __m256i is0 = z_lo(is), is1 = z_hi(is);
            k16_finish(w, kind, 1, &is0, a, 0, b, ad, 0, &acc[n]);
            k16_finish(w + gs, kind, 1, &is1, a, 0, b, ad, 0, &acc[n + 1]);
        }
    }
    for (int n = 0; n < NG; n++) _mm256_storeu_ps(y + (size_t)n * KERN_PACK_ROWS, acc[n]);
}

#define DEC_K16(name, ng, kind)                                                                             \
    static void name(int64_t nb, float *y, const uint8_t *w, size_t gs, const uint8_t *a, const float *ad,      \
                     const int32_t *as) {                                                                       \
        (void)as;                                                                                               \
        dec_k16(ng, nb, y, w, gs, a, ad, kind);                                                                 \
    }
DEC_K16(dec_q3_k, DEC2_NG, K16_Q3)
DEC_K16(dec_q2_k, DEC2_NG, K16_Q2)

/* Q4_K decode over NG = 2 groups two to a zmm, as dec_k16: tile_q45k's
 * integer work (q5 false) on both groups' lanes at once, q45k_finish per
 * group, so each group's outputs are tile_q45k's, bit for bit.  Zen 5, 2
 * threads: kvant-kernels Q4_K decode 53-55 -> 79-86 GB/s of weights;
 * synthetic tinyllama Q4_K_M tg32 (llama-quantize --pure: every matrix
 * Q4_K), alternating, faster in 18 of 20 rounds, medians 64.5 -> 73.5
 * t/s (2048 bytes ahead or 4 groups: no better).  Q5_K this way (its
 * fifth bits added as tile_q45k adds them) measured no faster: Q5_K_M
 * (kvant quantize, its Q6_K tensors on tile_k16) faster in 6 of 11
 * rounds, medians 56.4 -> 55.8; it keeps tile_q45k, as Q6_K keeps
 * tile_k16 (dec_k16). */
AI void dec_q4k(const int NG, int64_t nb, float *y, const uint8_t *w0, size_t gs, const uint8_t *a, const float *ad,
                const int32_t *as) {
    __m256 acc[8];
    for (int n = 0; n < NG; n++) acc[n] = _mm256_setzero_ps();
    const __m512i m4 = _mm512_set1_epi32(0x0f0f0f0f);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *aq = (const uint8_t *)((const block_q8_K *)a + b)->qs;
        for (int n = 0; n < NG; n += 2) {
            const uint8_t *w = w0 + (size_t)n * gs + (size_t)b * KERN_Q4_KX8_BYTES;
            prefetch_dec_2g(w, (size_t)b * KERN_Q4_KX8_BYTES, KERN_Q4_KX8_BYTES, gs, NG);
            __m512i is = _mm512_setzero_si512();
            for (int p = 0; p < 4; p++) { /* sub-blocks 2p (low nibbles) and 2p + 1 (high), as tile_q45k */
                __m512i se = _mm512_setzero_si512(), so = _mm512_setzero_si512();
                for (int j = 0; j < 8; j++) {
                    const __m512i raw = ld_2g(w, gs, KERN_Q4_KX8_QS_AT + 32 * (8 * p + j));
                    int32_t ve, vo;
                    memcpy(&ve, aq + 64 * p + 4 * j, 4);
                    memcpy(&vo, aq + 64 * p + 32 + 4 * j, 4);
                    se = z_dpbusd(se, z_and(raw, m4), _mm512_set1_epi32(ve));
                    so = z_dpbusd(so, z_and(z_srl16(raw, 4), m4), _mm512_set1_epi32(vo));
                }
                const size_t o = KERN_Q4_KX8_SC_AT + 16 * (size_t)p; /* the scales of sub-blocks 2p and 2p + 1: o, o + 8 */
                const __m512i sce = b8_2g(w, gs, o, false), sco = b8_2g(w, gs, o + 8, false);
                is = z_add32(is, z_add32(z_mullo32(se, sce), z_mullo32(so, sco)));
            }
            const __m256i is0 = z_lo(is), is1 = z_hi(is);
            q45k_finish(1, w, &is0, as, ad, 0, b, &acc[n]);
            q45k_finish(1, w + gs, &is1, as, ad, 0, b, &acc[n + 1]);
        }
    }
    for (int n = 0; n < NG; n++) _mm256_storeu_ps(y + (size_t)n * KERN_PACK_ROWS, acc[n]);
}
static void dec_q4_k(int64_t nb, float *y, const uint8_t *w, size_t gs, const uint8_t *a, const float *ad,
                     const int32_t *as) {
    dec_q4k(DEC2_NG, nb, y, w, gs, a, ad, as);
}

PACK_ENTRY(tile_q8_0, tile_q8(nb, CC, y, ldy, w, a, ba, ad, bn))
PACK_ENTRY(tile_q4_0, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q4_0))
PACK_ENTRY(tile_q4_1, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q4_1))
PACK_ENTRY(tile_q5_0, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q5_0))
PACK_ENTRY(tile_q5_1, tile_legacy(nb, CC, y, ldy, w, a, ba, ad, as, bn, L_Q5_1))
#define DEC_LEGACY(name, kind)                                                                              \
    static void name(int64_t nb, float *y, const uint8_t *w, size_t gs, const uint8_t *a, const float *ad,      \
                     const int32_t *as) {                                                                       \
        dec_legacy(8, nb, y, w, gs, a, ad, as, kind);                                                           \
    }
DEC_LEGACY(dec8_q4_0, L_Q4_0)
DEC_LEGACY(dec8_q4_1, L_Q4_1)
DEC_LEGACY(dec8_q5_0, L_Q5_0)
DEC_LEGACY(dec8_q5_1, L_Q5_1)
PACK_ENTRY(tile_q4_k, tile_q45k(nb, CC, y, ldy, w, a, ba, ad, as, bn, false))
PACK_ENTRY(tile_q5_k, tile_q45k(nb, CC, y, ldy, w, a, ba, ad, as, bn, true))
PACK_ENTRY(tile_q6_k, tile_k16(nb, CC, y, ldy, w, a, ba, ad, bn, K16_Q6))
PACK_ENTRY(tile_q3_k, tile_k16(nb, CC, y, ldy, w, a, ba, ad, bn, K16_Q3))
PACK_ENTRY(tile_q2_k, tile_k16(nb, CC, y, ldy, w, a, ba, ad, bn, K16_Q2))

/* the 2:4 sparse S24_Q8 (kernels/repack_s24.c): the shared tile, vpdpbusd
 * dots; S24_F16 on zmm, and decode over several groups at once
 * (kern_pack_dec_avx512), where a zmm operation costs one: ZMM_FULL (the
 * emulated build always: its tests are those paths') */
#define S24_VNNI 1
#ifdef KVANT_VNNI_EMULATED
#define ZMM_FULL 1
#else
#define ZMM_FULL (!kern_zmm_halved())
#endif
#include "kernels/repack_s24_tile.h"

static void dec8_s24_q8(int64_t nb, float *y, const uint8_t *w, size_t gs, const uint8_t *a, const float *ad,
                        const int32_t *as) {
    (void)ad, (void)as;
    dec_s24q8(8, nb, y, w, gs, a);
}

kern_pack_tile_fn kern_pack_tile_avx512(int wtype) {
    switch (wtype) {
    case KT_Q8_0: return tile_q8_0;
    case KT_Q4_0: return tile_q4_0;
    case KT_Q4_1: return tile_q4_1;
    case KT_Q5_0: return tile_q5_0;
    case KT_Q5_1: return tile_q5_1;
    case KT_Q4_K: return tile_q4_k;
    case KT_Q5_K: return tile_q5_k;
    case KT_Q2_K: return tile_q2_k;
    case KT_Q3_K: return tile_q3_k;
    case KT_Q6_K: return tile_q6_k;
    case KT_S24_Q8: return tile_s24_q8;
    case KT_S24_F16: return ZMM_FULL ? tile_s24_f16_zmm : tile_s24_f16;
    default: return NULL;
    }
}

/* Decode (T = 1) where kern_pack_dec_avx512 has no run: the tile above,
 * except Q4_K on Zen 4 (a zmm operation in two halves), where the AVX2
 * tile (NULL: repack.c takes it) decodes faster.  Zen 4 (family 25 model
 * 17), 2 threads, synthetic tinyllama-1.1b Q4_K_M tg32, 15 alternating
 * rounds: 1.01-1.11x this tile (median 1.045), same bits; 4 int32 chains
 * instead of 2 here measured no faster (68-77 against 76-84 t/s).  Q5_K
 * (5 rounds: 2 for one, 3 for the other) and Q2_K (mixed) keep this one. */
kern_pack_tile_fn kern_pack_tile_dec_avx512(int wtype) {
    if (wtype == KT_Q4_K && !ZMM_FULL) return NULL;
    return kern_pack_tile_avx512(wtype);
}

kern_pack_dec_fn kern_pack_dec_avx512(int wtype, int *ng) {
    if (!ZMM_FULL) return NULL; /* Zen 4: measured with one group at a time */
    *ng = 8;
    switch (wtype) {
    case KT_Q8_0: return dec8_q8_0;
    case KT_Q4_0: return dec8_q4_0;
    case KT_Q4_1: return dec8_q4_1;
    case KT_Q5_0: return dec8_q5_0;
    case KT_Q5_1: return dec8_q5_1;
    case KT_S24_Q8: return dec8_s24_q8;
    case KT_S24_F16: *ng = 4; return dec4_s24_f16_zmm;
    case KT_Q3_K: *ng = DEC2_NG; return dec_q3_k;
    case KT_Q4_K: *ng = DEC2_NG; return dec_q4_k;
    case KT_Q2_K: *ng = DEC2_NG; return dec_q2_k;
    default: return NULL;
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
