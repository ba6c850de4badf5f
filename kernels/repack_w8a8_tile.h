/* kernels/repack_w8a8_tile.h - private to repack_avx2.c and repack_avx512.c:
 * the packed W8A8 tile (layout and spec in kernels/repack_w8a8.c), one
 * source for both tiers.  The including file defines W8_VNNI (0 or 1), with
 * 1 an AI __m256i dpbusd(acc, u, s), and includes this after
 * repack_tile.h; it gets static void tile_w8a8(...) (kern_pack_w8a8_tile_fn).
 *
 * Per 4 inputs: the 8 rows' int8 weights w in one register, the token's 4
 * activation bytes broadcast; |w| times a with w's sign (both in
 * [-127, 127]): AVX2 vpmaddubsw pairs (<= 2 * 127 * 127) widened by
 * vpmaddwd at once, VNNI vpdpbusd.  Four int32 accumulators per token (one
 * per chunk of a 4-chunk step) for the adds' latency; their sum is the exact
 * dot, then (float)acc * (s_x * s_w) as the spec. */
#ifndef KVANT_KERNELS_REPACK_W8A8_TILE_H
#define KVANT_KERNELS_REPACK_W8A8_TILE_H

AI __m256i w8_dot(__m256i acc, __m256i w, __m256i a4) {
    const __m256i u = _mm256_sign_epi8(w, w), s = _mm256_sign_epi8(a4, w);
#if W8_VNNI
    return dpbusd(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

AI void tile_w8a8_c(int64_t nc, const int C, float *y, size_t ldy, const uint8_t *w, const int8_t *x, size_t ldx,
                    const float *sx) {
    __m256i s[4][4];
    for (int c = 0; c < C; c++)
        for (int u = 0; u < 4; u++) s[c][u] = _mm256_setzero_si256();
    const __m256 sw = _mm256_loadu_ps((const float *)w);
    const uint8_t *q = w + 32;
    int64_t j = 0;
    for (; j + 4 <= nc; j += 4, q += 128) {
        prefetch_block(q, 128, C);
        for (int u = 0; u < 4; u++) {
            const __m256i wv = _mm256_loadu_si256((const __m256i *)(q + 32 * u));
            for (int c = 0; c < C; c++)
                s[c][u] = w8_dot(s[c][u], wv, bcast4((const uint8_t *)x + (size_t)c * ldx + 4 * (size_t)(j + u)));
        }
    }
    for (; j < nc; j++, q += 32) {
        const __m256i wv = _mm256_loadu_si256((const __m256i *)q);
        for (int c = 0; c < C; c++) s[c][0] = w8_dot(s[c][0], wv, bcast4((const uint8_t *)x + (size_t)c * ldx + 4 * (size_t)j));
    }
    for (int c = 0; c < C; c++) {
        const __m256i acc = _mm256_add_epi32(_mm256_add_epi32(s[c][0], s[c][1]), _mm256_add_epi32(s[c][2], s[c][3]));
        _mm256_storeu_ps(y + (size_t)c * ldy, _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(_mm256_set1_ps(sx[c]), sw)));
    }
}

static void tile_w8a8(int64_t nc, int C, float *y, size_t ldy, const uint8_t *w, const int8_t *x, size_t ldx,
                      const float *sx) {
    switch (C) {
    case 1: tile_w8a8_c(nc, 1, y, ldy, w, x, ldx, sx); break;
    case 2: tile_w8a8_c(nc, 2, y, ldy, w, x, ldx, sx); break;
    case 3: tile_w8a8_c(nc, 3, y, ldy, w, x, ldx, sx); break;
    default: tile_w8a8_c(nc, 4, y, ldy, w, x, ldx, sx); break;
    }
}

#endif
