/* kernels/repack_ptq_tile.h - private to repack_avx2.c and repack_avx512.c:
 * the packed tile of kvant's PTQ types (the layout and spec of
 * kernels/repack_ptq.c), one source for both tiers.
 *
 * The including file defines PTQ_VNNI (0 or 1), and with 1 an
 * AI __m256i dpbusd(acc, u, s) (vpdpbusd or its exact emulation), then
 * includes this after repack_tile.h; it gets
 *     static kern_pack_ptq_tile_fn ptq_tile_of(int bits, bool zp)
 *
 * Per 32-element sub-block and chunk j (elements 4j..4j+3 and 16+4j.. of
 * the 8 rows) the codes come out of the planes as bytes lo, hi (u in
 * 0..2^b-1), one shift and mask per plane.  Against the 4 activation
 * bytes broadcast to every lane:
 *   VNNI: vpdpbusd (u8 x s8, summed in int32 exactly, u up to 255);
 *   AVX2: vpmaddubsw pair sums, <= 2 * (2^b - 1) * 127, added in int16 as
 *         far as their bound allows (b <= 4: the 4 chunks' lo and hi,
 *         <= 30480; b = 5: 2 chunks, <= 31496; b = 6: one chunk's lo +
 *         hi, <= 32004; b = 7: each alone) before vpmaddwd widens them;
 *         at b = 8 u - 128 as int8 with the Q8_0 tile's sign trick
 *         (|pair| <= 2 * 128 * 127), the 128 moved into the zero point.
 * Then i = dot - z' * sum(a) (z' = z, or z - 128 at AVX2's 8 bits; the
 * block sums are the Q4_0 extras), exact int32, and acc += i * d_w d_a:
 * the spec lane by lane, so every output is bit-identical to
 * kern_pack_ptq_tile_ref. */
#ifndef KVANT_KERNELS_REPACK_PTQ_TILE_H
#define KVANT_KERNELS_REPACK_PTQ_TILE_H

/* bits [from, from + width) of every byte moved to [to, to + width), the
 * rest cleared (16-bit shifts: the mask drops what crossed a byte) */
AI __m256i ptq_move(__m256i v, const int from, const int to, const int width) {
    const __m256i s = to >= from ? _mm256_slli_epi16(v, to - from) : _mm256_srli_epi16(v, from - to);
    return _mm256_and_si256(s, _mm256_set1_epi8((char)(((1 << width) - 1) << to)));
}

/* the codes of chunk j of the sub-block at p (kernels/repack_ptq.c's planes) */
AI void ptq_chunk(const uint8_t *p, const int bits, const int j, __m256i *lo, __m256i *hi) {
    if (bits == 8) {
        *lo = _mm256_loadu_si256((const __m256i *)(p + 32 * j));
        *hi = _mm256_loadu_si256((const __m256i *)(p + 32 * (4 + j)));
        return;
    }
    const int n4 = bits >= 4, rem = bits - 4 * n4;
    __m256i l = _mm256_setzero_si256(), h = _mm256_setzero_si256();
    int sh = 0;
    if (n4) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(p + 32 * j));
        l = _mm256_and_si256(raw, _mm256_set1_epi8(0x0f));
        h = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0x0f));
        p += 128;
        sh = 4;
    }
    if (rem & 2) {
        const __m256i r0 = _mm256_loadu_si256((const __m256i *)p), r1 = _mm256_loadu_si256((const __m256i *)(p + 32));
        l = _mm256_or_si256(l, ptq_move(r0, 2 * j, sh, 2));
        h = _mm256_or_si256(h, ptq_move(r1, 2 * j, sh, 2));
        p += 64;
        sh += 2;
    }
    if (rem & 1) {
        const __m256i r = _mm256_loadu_si256((const __m256i *)p);
        l = _mm256_or_si256(l, ptq_move(r, j, sh, 1));
        h = _mm256_or_si256(h, ptq_move(r, 4 + j, sh, 1));
    }
    *lo = l;
    *hi = h;
}

#if !PTQ_VNNI
/* one chunk half against 4 broadcast activation bytes: vpmaddubsw pair sums */
AI __m256i ptq_pairs(__m256i u, __m256i a4, const int bits) {
    if (bits != 8) return _mm256_maddubs_epi16(u, a4);
    const __m256i w = _mm256_xor_si256(u, _mm256_set1_epi8((char)0x80)); /* u - 128 */
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a4, w));
}
#endif

AI void tile_ptq(int64_t nb, int64_t ns, const int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a,
                 size_t ba, const float *ad, const int32_t *as, size_t bn, const int bits, const bool zp) {
    __m256 acc[4];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const size_t hdr8 = zp ? 24 : 16, sbb = 32 * (size_t)bits;
    /* the zero point as the integer dot sees it (AVX2 8-bit: u - 128) */
    const int zsh = PTQ_VNNI || bits != 8 ? 0 : 128, zabs = (1 << (bits - 1)) - zsh;
#if !PTQ_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
    const int per16 = bits <= 4 ? 4 : bits == 5 ? 2 : bits == 6 ? 1 : 0; /* chunks summed in int16 */
#endif
    __m256 dw = _mm256_setzero_ps();
    __m256i zv = _mm256_setzero_si256();
    int64_t left = 0; /* sub-blocks left under the current header */
    for (int64_t b = 0; b < nb; b++, w += sbb) {
        if (left == 0) {
            dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
            if (zp) zv = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(w + 16))),
                                          _mm256_set1_epi32(zsh));
            w += hdr8;
            left = ns;
        }
        left--;
        prefetch_block(w, sbb, C);
        __m256i s[4];
        for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
#if !PTQ_VNNI
        __m256i s16[4];
        for (int c = 0; c < C; c++) s16[c] = _mm256_setzero_si256();
#endif
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256i lo, hi;
            ptq_chunk(w, bits, j, &lo, &hi);
            for (int c = 0; c < C; c++) {
                const uint8_t *aq = AQS(c, b);
                const __m256i alo = bcast4(aq + 4 * j), ahi = bcast4(aq + 16 + 4 * j);
#if PTQ_VNNI
                s[c] = dpbusd(dpbusd(s[c], lo, alo), hi, ahi);
#else
                const __m256i plo = ptq_pairs(lo, alo, bits), phi = ptq_pairs(hi, ahi, bits);
                if (per16) {
                    s16[c] = _mm256_add_epi16(s16[c], _mm256_add_epi16(plo, phi));
                    if ((j + 1) % per16 == 0) {
                        s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(s16[c], ones));
                        s16[c] = _mm256_setzero_si256();
                    }
                } else
                    s[c] = _mm256_add_epi32(s[c], _mm256_add_epi32(_mm256_madd_epi16(plo, ones), _mm256_madd_epi16(phi, ones)));
#endif
            }
        }
        for (int c = 0; c < C; c++) {
            const size_t k = (size_t)c * bn + (size_t)b;
            const __m256i corr = zp ? _mm256_mullo_epi32(zv, _mm256_set1_epi32(as[k])) : _mm256_set1_epi32(zabs * as[k]);
            const __m256i i = _mm256_sub_epi32(s[c], corr);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(dw, _mm256_set1_ps(ad[k])), acc[c]);
        }
    }
    for (int c = 0; c < C; c++) _mm256_storeu_ps(y + (size_t)c * ldy, acc[c]);
}

/* a kern_pack_ptq_tile_fn per (bits, zero point): C made a compile-time constant */
#define PTQ_ENTRY(B, Z)                                                                                         \
    static void tile_ptq_##B##_##Z(int64_t nb, int64_t ns, int C, float *y, size_t ldy, const uint8_t *w,      \
                                   const uint8_t *a, size_t ba, const float *ad, const int32_t *as, size_t bn) { \
        switch (C) {                                                                                            \
        case 1: tile_ptq(nb, ns, 1, y, ldy, w, a, ba, ad, as, bn, B, Z); break;                                 \
        case 2: tile_ptq(nb, ns, 2, y, ldy, w, a, ba, ad, as, bn, B, Z); break;                                 \
        case 3: tile_ptq(nb, ns, 3, y, ldy, w, a, ba, ad, as, bn, B, Z); break;                                 \
        default: tile_ptq(nb, ns, 4, y, ldy, w, a, ba, ad, as, bn, B, Z); break;                                \
        }                                                                                                       \
    }
#define PTQ_ENTRY_BITS(B) PTQ_ENTRY(B, 0) PTQ_ENTRY(B, 1)
PTQ_ENTRY_BITS(2) PTQ_ENTRY_BITS(3) PTQ_ENTRY_BITS(4) PTQ_ENTRY_BITS(5) PTQ_ENTRY_BITS(6) PTQ_ENTRY_BITS(7)
PTQ_ENTRY_BITS(8)

static kern_pack_ptq_tile_fn ptq_tile_of(int bits, bool zp) {
    static const kern_pack_ptq_tile_fn fns[7][2] = {
        {tile_ptq_2_0, tile_ptq_2_1}, {tile_ptq_3_0, tile_ptq_3_1}, {tile_ptq_4_0, tile_ptq_4_1},
        {tile_ptq_5_0, tile_ptq_5_1}, {tile_ptq_6_0, tile_ptq_6_1}, {tile_ptq_7_0, tile_ptq_7_1},
        {tile_ptq_8_0, tile_ptq_8_1}};
    return bits >= 2 && bits <= 8 ? fns[bits - 2][zp] : NULL;
}

#endif
