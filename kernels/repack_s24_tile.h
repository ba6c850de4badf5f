/* kernels/repack_s24_tile.h - private to the per-ISA packed tiles: the
 * tiles of the packed 2:4 S24_Q8 and S24_F16 (layouts and specs:
 * kernels/repack_s24.c), shared by repack_avx2.c and (with S24_VNNI 1)
 * repack_avx512.c, after kernels/repack_tile.h.
 *
 * S24_Q8:
 * Per chunk j = 2m + h (4 kept values of the 8 rows, one 256-bit load):
 *   index: ix[m] broadcast to both lanes, >> (0, 2) per lane (vpsrlvq)
 *          and & 0x33 for both chunks of m; chunk 2m + 1's bits shifted
 *          down by 4; | the window offset 8h + 4 ((k % 4) / 2) (s24_idx);
 *   gather: one vpshufb of the 16-byte activation window m (activations
 *          16m .. 16m+15, broadcast to both lanes) gives, per row, the 4
 *          activations its kept values meet;
 *   dot:   AVX2: vpmaddubsw(|q|, a with q's sign) + vpmaddwd, exact
 *          (|pair| <= 2 * 128 * 127);  VNNI: vpdpbusd(a + 128, q) (the
 *          window ^ 0x80 as unsigned, once per window for its 2 chunks)
 *          and, shared by the activation rows, vpdpbusd(128, q); their
 *          difference is the exact sum.
 * Each half block's int32 sums (chunks 0-3, 4-7) are scaled by d_w * d_a(h)
 * into one fmaf chain per output: bit-identical to kern_pack_s24_tile_ref.
 * |q| is vpabsb, not vpsignb(q, q) (the same bytes, -128 included): on
 * Zen 3 (AMD EPYC family 25 model 1) vpsignb competes with the multiplies
 * for their pipes.  That and s24_idx, measured on Zen 3 in an isolated
 * loop of dec_s24q8 (4 groups of 32 blocks in L2, one thread, best of 25,
 * prefetches as here): 30.3 TSC cycles per group and block before, 28.6
 * with s24_idx, 28.3 with both (28.8 / 25.4 / 22.9 without the
 * prefetches).  Decode from memory is unchanged within the noise: the
 * synthetic 2:4 tinyllama-1.1b tg32, 2 threads, 12 alternating rounds,
 * median 41.73 t/s against 41.37 (bench/sparse24_tiers.md).  The avx512
 * tier's VNNI form takes s24_idx too (fewer operations; not measured on
 * an AVX-512 machine).
 *
 * Decode: runs of several groups go through dec_s24q8 / dec_s24_f16
 * below; a group decoded alone is one contiguous stream, which both tiles
 * prefetch with prefetch_block_far (repack_tile.h: 8192 bytes ahead into
 * L2 on Zen 4, 2048 into L1 elsewhere).  Zen 4, synthetic 2:4 tinyllama-1.1b tg32, 2
 * threads, alternating runs with the meter at 69-71 GB/s: S24_F16 42.0-43.6
 * t/s far against 38.4-40.3 near, S24_Q8 67.1-70.2 against 67.7-69.3.
 * S24_Q8 on Zen 4 also asks for the lines 1024 bytes ahead into L1
 * (prefetch_block_far_l1): its decode there is this tile, one group at a
 * time (kern_pack_dec_avx512 has no run on Zen 4; dec8_s24_q8 measured
 * 34-39 t/s against 40-50).  Zen 4 (family 25 model 17), synthetic 2:4
 * tinyllama-1.1b, 2 threads, kvant bench -p 0 -n 64..70 -r 4 with the
 * variants switched token by token in one run (a scratch build), six runs
 * with the meter at 34-59 GB/s: 1.008-1.039x (median 1.018) against L2
 * alone; 4096, 12288 or 16384 bytes ahead into L2, or 2048 into L1 alone,
 * 0.89-1.03x; no prefetch 0.85-0.98x.  The index decoding with vpternlogd
 * and lane 1's window transposed (3 operations per two chunks against 5;
 * the same bits) measured 0.983-1.022x: this decode is not held by its
 * operation count. */
#ifndef KVANT_KERNELS_REPACK_S24_TILE_H
#define KVANT_KERNELS_REPACK_S24_TILE_H

#include "kernels/sparse24.h"

#ifndef S24_VNNI
#define S24_VNNI 0
#endif

/* s + the exact dot of one chunk: the 4 gathered activations g (vpshufb
 * of the window; with VNNI the window was already ^ 0x80) against its
 * weights q, per row (the VNNI correction is subtracted by the caller) */
AI __m256i s24_dot(__m256i s, __m256i g, __m256i q) {
#if S24_VNNI
    return dpbusd(s, g, q);
#else
    const __m256i u = _mm256_abs_epi8(q); /* |q|, exact as unsigned even for -128 (not vpsignb: see above) */
    return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(g, q)), _mm256_set1_epi16(1)));
#endif
}

/* the vpshufb indices ix[0], ix[1] of chunks 2m and 2m + 1 of packed block
 * w: its ix[m] broadcast to both lanes, one shift per lane (lane 0 by 0,
 * lane 1 by 2) and & 0x33 leave chunk 2m's positions in bits 0-1 of each
 * byte and chunk 2m + 1's in bits 4-5.  vpshufb reads only bits 0-3 and 7 of an
 * index, so chunk 2m's is that | its window offsets, and chunk 2m + 1's the
 * same after a 16-bit shift right by 4 (a byte's bits 6-7 take the next
 * byte's bits 2-3, which the mask cleared).  Five operations for the two
 * chunks, where a shift, a mask and an or each took six. */
AI void s24_idx(const uint8_t *w, int m, __m256i ix[2]) {
    const __m256i ixm = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(w + KERN_S24X8_IX_AT + 16 * m)));
    const __m256i t = _mm256_and_si256(_mm256_srlv_epi64(ixm, _mm256_setr_epi64x(0, 0, 2, 2)), _mm256_set1_epi8(0x33));
    ix[0] = _mm256_or_si256(t, _mm256_set1_epi32(0x04040000));
    ix[1] = _mm256_or_si256(_mm256_srli_epi16(t, 4), _mm256_set1_epi32(0x0c0c0808));
}

AI void tile_s24q8(int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba) {
    /* offsets of the 16-byte activation windows m = 0..3 in an S24_A8 block (x[0..16), y[0..16), x[16..32), y[16..32)) */
    static const size_t WIN[4] = {offsetof(block_s24_a8, x), offsetof(block_s24_a8, y), offsetof(block_s24_a8, x) + 16,
                                  offsetof(block_s24_a8, y) + 16};
#if S24_VNNI
    const __m256i x80 = _mm256_set1_epi8((char)0x80);
#endif
    const bool far_l2 = kern_prefetch_l2();
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, w += KERN_S24X8_BYTES) {
        prefetch_block_far_l1(w, KERN_S24X8_BYTES, C, far_l2);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
        for (int hh = 0; hh < 2; hh++) {
            __m256i s[4];
            for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
#if S24_VNNI
            __m256i corr = _mm256_setzero_si256();
#endif
            for (int m = 2 * hh; m < 2 * hh + 2; m++) {
                __m256i win[4];
                for (int c = 0; c < C; c++) {
                    win[c] = _mm256_broadcastsi128_si256(
                        _mm_loadu_si128((const __m128i *)(a + (size_t)c * ba + (size_t)b * sizeof(block_s24_a8) + WIN[m])));
#if S24_VNNI
                    win[c] = _mm256_xor_si256(win[c], x80); /* a + 128 as unsigned; vpshufb moves bytes as they are */
#endif
                }
                __m256i ix[2];
                s24_idx(w, m, ix);
                for (int h = 0; h < 2; h++) {
                    const __m256i q = _mm256_loadu_si256((const __m256i *)(w + KERN_S24X8_Q_AT + 32 * (2 * m + h)));
#if S24_VNNI
                    corr = dpbusd(corr, x80, q);
#endif
                    for (int c = 0; c < C; c++) s[c] = s24_dot(s[c], _mm256_shuffle_epi8(win[c], ix[h]), q);
                }
            }
            for (int c = 0; c < C; c++) {
#if S24_VNNI
                const __m256i i = _mm256_sub_epi32(s[c], corr);
#else
                const __m256i i = s[c];
#endif
                float da;
                memcpy(&da, a + (size_t)c * ba + (size_t)b * sizeof(block_s24_a8) + offsetof(block_s24_a8, d) +
                                4 * sizeof(float) * (size_t)hh, sizeof da);
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[c]);
            }
        }
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

PACK_ENTRY(tile_s24_q8, tile_s24q8(nb, CC, y, ldy, w, a, ba))

/* Decode over NG consecutive groups at once (kern_pack_dec_fn), as
 * dec_q8 reads Q8_0: NG streams gs bytes apart, each prefetched 1024 bytes
 * ahead into L1 (prefetch_dec), the block's four activation windows loaded
 * once for the NG groups.  Each group's index decoding, exact sums (VNNI
 * or vpmaddubsw, as the tile above) and fmaf chain are tile_s24q8's with
 * C = 1, so the same bits.  NG = 8 at the avx512 tier (repack_avx512.c),
 * 4 at avx2 (repack_avx2.c, DEC_NG).  Zen 3 (AVX2 only), synthetic 2:4
 * tinyllama-1.1b, tg32, 2 threads, alternating: see bench/sparse24_tiers.md. */
AI void dec_s24q8(const int NG, int64_t nb, float *y, const uint8_t *w0, size_t gs, const uint8_t *a) {
    static const size_t WIN[4] = {offsetof(block_s24_a8, x), offsetof(block_s24_a8, y), offsetof(block_s24_a8, x) + 16,
                                  offsetof(block_s24_a8, y) + 16};
#if S24_VNNI
    const __m256i x80 = _mm256_set1_epi8((char)0x80);
#endif
    __m256 acc[8];
    for (int n = 0; n < NG; n++) acc[n] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *ab = a + (size_t)b * sizeof(block_s24_a8);
        __m256i win[4];
        for (int m = 0; m < 4; m++) {
            win[m] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(ab + WIN[m])));
#if S24_VNNI
            win[m] = _mm256_xor_si256(win[m], x80);
#endif
        }
        float da[2];
        for (int hh = 0; hh < 2; hh++) memcpy(&da[hh], ab + offsetof(block_s24_a8, d) + 4 * sizeof(float) * (size_t)hh, 4);
        for (int n = 0; n < NG; n++) {
            const uint8_t *w = w0 + (size_t)n * gs + (size_t)b * KERN_S24X8_BYTES;
            prefetch_dec(w, (size_t)b * KERN_S24X8_BYTES, KERN_S24X8_BYTES, 1024, gs, NG);
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
            for (int hh = 0; hh < 2; hh++) {
                __m256i s = _mm256_setzero_si256();
#if S24_VNNI
                __m256i corr = _mm256_setzero_si256();
#endif
                for (int m = 2 * hh; m < 2 * hh + 2; m++) {
                    __m256i ix[2];
                    s24_idx(w, m, ix);
                    for (int h = 0; h < 2; h++) {
                        const __m256i q = _mm256_loadu_si256((const __m256i *)(w + KERN_S24X8_Q_AT + 32 * (2 * m + h)));
#if S24_VNNI
                        corr = dpbusd(corr, x80, q);
#endif
                        s = s24_dot(s, _mm256_shuffle_epi8(win[m], ix[h]), q);
                    }
                }
#if S24_VNNI
                s = _mm256_sub_epi32(s, corr);
#endif
                acc[n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(da[hh])), acc[n]);
            }
        }
    }
    for (int n = 0; n < NG; n++) _mm256_storeu_ps(y + (size_t)n * KERN_PACK_ROWS, acc[n]);
}

/* S24_F16x8 (kernels/repack_s24.c) against F32 activations, one activation
 * row after another (the spec's eight chains A[q][e] are eight ymm of 8
 * rows; more rows at once would spill the 16 registers of AVX2).  Per
 * column group g and kept slot e: the 8 rows' halves widened (vcvtph2ps),
 * the group's 4 activations broadcast to both lanes and permuted in-lane
 * by the position word shifted per row (vpsrlvd; vpermilps reads its low
 * 2 bits), one FMA.  On Zen 4 it serves the avx512 tier too (a zmm
 * operation costs two there, so a zmm form saves nothing); other AVX-512
 * CPUs take tile_s24f16_zmm below.
 *
 * Decode at the avx2 tier (dec_s24_f16) takes S24_DEC_NG = 4 consecutive
 * groups at once, as the zmm form does, but four groups' 32 chains do not
 * fit 16 ymm registers: it walks them S24_CH = 4 blocks at a time, group
 * after group, each group's chains kept in registers for its 4 blocks and
 * in memory between them.  Four streams gs bytes apart, each prefetched
 * S24_PF = 4096 bytes ahead into L1 (prefetch_dec); every chain sees its
 * FMAs in the one-group order, so the bits are the same.  Zen 5 (family
 * 26 model 2), KVANT_TIER=avx2, synthetic 2:4 tinyllama-1.1b tg32, 2
 * threads, three alternating rounds: 34.3-38.7 t/s against 27.6-32.1 for
 * one group at a time (8192 bytes ahead into L2).  Screening rounds (one
 * slow minute, where every form read 22-25, left out): this form
 * 37.7-40.8, one group 25.4-33.0, 4 groups in lockstep (the chains
 * spilled by the compiler) 29.3-37.7, 2 groups 28.1-31.7, 8 groups
 * 30.9-40.0, 8 or 16 blocks at a time 23.5-35.1, 1024 bytes ahead
 * 21.5-30.8. */
enum { S24_DEC_NG = 4, S24_CH = 4, S24_ZCH = 2, S24_PF = 4096 };

/* block b of a group (KERN_S24F16X8_BYTES), its lines asked for: a decode run's
 * stream (prefetch_dec), or one group's (prefetch_block_far) */
AI const uint8_t *s24f16_block(const uint8_t *w0, int64_t b, size_t gs, const int NG, const int C, const bool far_l2) {
    const uint8_t *w = w0 + (size_t)b * KERN_S24F16X8_BYTES;
    if (NG > 1) prefetch_dec(w, (size_t)b * KERN_S24F16X8_BYTES, KERN_S24F16X8_BYTES, S24_PF, gs, NG);
    else prefetch_block_far(w, KERN_S24F16X8_BYTES, C, far_l2);
    return w;
}

/* one group's blocks [b0, b1) into its eight chains A */
AI void s24f16_blocks(__m256 A[4][2], int64_t b0, int64_t b1, const uint8_t *w0, size_t gs, const int NG,
                      const float *ac, const int C, const bool far_l2) {
    const __m256i sh0 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14), sh1 = _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *w = s24f16_block(w0, b, gs, NG, C, far_l2);
        const float *ab = ac + (size_t)b * QK_S24_F16;
        for (int g = 0; g < 8; g++) {
            const __m256 win = _mm256_broadcast_ps((const __m128 *)(ab + 4 * g));
            int32_t word;
            memcpy(&word, w + KERN_S24F16X8_IX_AT + 4 * g, 4);
            const __m256i m = _mm256_set1_epi32(word);
            for (int e = 0; e < 2; e++) {
                const __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 16 * (2 * g + e))));
                const __m256 av = _mm256_permutevar_ps(win, _mm256_srlv_epi32(m, e ? sh1 : sh0));
                A[g % 4][e] = _mm256_fmadd_ps(wv, av, A[g % 4][e]);
            }
        }
    }
}

AI void tile_s24f16(const int NG, int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w0, size_t gs,
                    const uint8_t *a, size_t ba) {
    const bool far_l2 = NG == 1 && kern_prefetch_l2_amd512(); /* Zen 4 and Zen 5: kernels/types.h */
    for (int c = 0; c < C; c++) {
        const float *ac = (const float *)(a + (size_t)c * ba);
        __m256 A[S24_DEC_NG][4][2];
        for (int n = 0; n < NG; n++)
            for (int q = 0; q < 4; q++) A[n][q][0] = A[n][q][1] = _mm256_setzero_ps();
        if (NG == 1) s24f16_blocks(A[0], 0, nb, w0, gs, NG, ac, C, far_l2);
        else
            for (int64_t b0 = 0; b0 < nb; b0 += S24_CH) {
                const int64_t b1 = nb - b0 < S24_CH ? nb : b0 + S24_CH;
                for (int n = 0; n < NG; n++) {
                    __m256 An[4][2];
                    memcpy(An, A[n], sizeof An);
                    s24f16_blocks(An, b0, b1, w0 + (size_t)n * gs, gs, NG, ac, C, far_l2);
                    memcpy(A[n], An, sizeof An);
                }
            }
        for (int n = 0; n < NG; n++) {
            __m256(*An)[2] = A[n];
            const __m256 s =
                _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(An[0][0], An[0][1]), _mm256_add_ps(An[1][0], An[1][1])),
                              _mm256_add_ps(_mm256_add_ps(An[2][0], An[2][1]), _mm256_add_ps(An[3][0], An[3][1])));
            _mm256_storeu_ps(y + (size_t)c * ldy + (size_t)n * KERN_PACK_ROWS, s);
        }
    }
}

PACK_ENTRY(tile_s24_f16, tile_s24f16(1, nb, CC, y, ldy, w, 0, a, ba))

#if !S24_VNNI
static void dec_s24_f16(int64_t nb, float *y, const uint8_t *w, size_t gs, const uint8_t *a, const float *ad,
                        const int32_t *as) {
    (void)ad, (void)as;
    tile_s24f16(S24_DEC_NG, nb, 1, y, 0, w, gs, a, 0);
}
#endif

#if S24_VNNI
/* The same tile on 512-bit registers, for the AVX-512 CPUs whose zmm
 * operations cost one (not Zen 4: kern_zmm_halved).  A group g's two kept
 * slots are one 32-byte load of 16 halves (slot 0's 8 rows, then slot
 * 1's), widened to one zmm whose halves are the ymm tile's A[g % 4][0] and
 * A[g % 4][1]; the activations go to all four 128-bit lanes (vpermilps
 * permutes inside each) and the position word is shifted by 0, 2 .. 30
 * across the 16 lanes.  Each lane is the ymm tile's chain, FMA for FMA,
 * and the halves are summed as it sums its eight: the same bits, with half
 * the conversions, permutes, shifts and FMAs.  Zen 5 (family 26 model 2),
 * one thread, matrix in cache (kvant-prune-kernels): 0.61-0.67 of the
 * packed F16 tile's time per dense weight, against 0.81-0.89 for the ymm
 * tile.
 *
 * Decode takes NG = 4 consecutive groups at once (dec4_s24_f16_zmm):
 * four streams gs bytes apart, each prefetched ahead into L1
 * (prefetch_dec), as the F16 tile reads 8 (repack_f16_avx2.c); one group
 * alone is one stream, which the Zen 5 read from memory at three quarters
 * of the F16 tile's bytes per second.  A group's chains are the same whichever
 * groups share the call, so the bits are those of one group at a time.
 * Zen 5, the FFN gate matrices of 22 tinyllama-1.1b layers (5632 x 2048,
 * 285 MB, random weights), 2 threads, alternating, mean of 20: 6.94 and
 * 7.10 ms with 4 groups against 7.96 and 8.39 for one (which prefetched
 * 8192 bytes ahead into L2, kern_prefetch_l2_amd512, the better choice
 * for a single stream: 8.33-9.37 against 8.88-9.88 into L1).  The whole
 * synthetic 2:4 tinyllama-1.1b, tg32, 2 threads, five alternating rounds:
 * 29.2-35.4 t/s against 23.9-30.2, ahead in each round by 14-22%; the
 * dense F16 file beside it 19.6-22.8 (S24_F16 / F16 1.44-1.55, was
 * 1.22-1.36).  That read the four groups in lockstep, block by block,
 * 2048 bytes ahead; S24_ZCH = 2 blocks of a group, then the same of the
 * next, each S24_PF = 4096 ahead (as the ymm decode above, whose chains
 * must leave the registers between chunks; these stay), gave 35.7-38.0 t/s
 * against 32.1-36.7 in three alternating rounds (the lockstep 4096 ahead
 * 33.8-34.6, one block at a time 33.7-34.4, 4 blocks 34.6-36.4, 8 blocks
 * 30.8-31.6). */
/* one group's blocks [b0, b1) into its four zmm chains A */
AI void s24f16_zmm_blocks(__m512 A[4], int64_t b0, int64_t b1, const uint8_t *w0, size_t gs, const int NG,
                          const float *ac, const int C, const bool far_l2) {
    const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *w = s24f16_block(w0, b, gs, NG, C, far_l2);
        const float *ab = ac + (size_t)b * QK_S24_F16;
        for (int g = 0; g < 8; g++) {
            const __m512 win = _mm512_broadcast_f32x4(_mm_loadu_ps(ab + 4 * g));
            int32_t word;
            memcpy(&word, w + KERN_S24F16X8_IX_AT + 4 * g, 4);
            const __m512 wv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + 32 * g)));
            const __m512 av = _mm512_permutevar_ps(win, _mm512_srlv_epi32(_mm512_set1_epi32(word), sh));
            A[g % 4] = _mm512_fmadd_ps(wv, av, A[g % 4]);
        }
    }
}

AI void tile_s24f16_zmm(const int NG, int64_t nb, const int C, float *y, size_t ldy, const uint8_t *w0, size_t gs,
                        const uint8_t *a, size_t ba) {
    const bool far_l2 = NG == 1 && kern_prefetch_l2_amd512();
    for (int c = 0; c < C; c++) {
        const float *ac = (const float *)(a + (size_t)c * ba);
        __m512 A[4][4];
        for (int n = 0; n < NG; n++)
            for (int q = 0; q < 4; q++) A[n][q] = _mm512_setzero_ps();
        if (NG == 1) s24f16_zmm_blocks(A[0], 0, nb, w0, gs, NG, ac, C, far_l2);
        else
            for (int64_t b0 = 0; b0 < nb; b0 += S24_ZCH) {
                const int64_t b1 = nb - b0 < S24_ZCH ? nb : b0 + S24_ZCH;
                for (int n = 0; n < NG; n++)
                    s24f16_zmm_blocks(A[n], b0, b1, w0 + (size_t)n * gs, gs, NG, ac, C, far_l2);
            }
        for (int n = 0; n < NG; n++) {
            __m256 h[4];
            for (int q = 0; q < 4; q++)
                h[q] = _mm256_add_ps(_mm512_castps512_ps256(A[n][q]), _mm512_extractf32x8_ps(A[n][q], 1));
            _mm256_storeu_ps(y + (size_t)c * ldy + (size_t)n * KERN_PACK_ROWS,
                             _mm256_add_ps(_mm256_add_ps(h[0], h[1]), _mm256_add_ps(h[2], h[3])));
        }
    }
}

PACK_ENTRY(tile_s24_f16_zmm, tile_s24f16_zmm(1, nb, CC, y, ldy, w, 0, a, ba))

static void dec4_s24_f16_zmm(int64_t nb, float *y, const uint8_t *w, size_t gs, const uint8_t *a, const float *ad,
                             const int32_t *as) {
    (void)ad, (void)as;
    tile_s24f16_zmm(4, nb, 1, y, 0, w, gs, a, 0);
}
#endif

#endif
