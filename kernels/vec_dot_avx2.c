/* vec_dot_avx2.c - the AVX2 tier (AVX2 + FMA + F16C): dot products of a
 * weight row with an activation row of its paired type, register-blocked
 * tiles of them (gemm, for prefill), and the activation quantizers.
 * Compiled with -mavx2 -mfma -mf16c; dispatch.c installs it only on CPUs
 * that have all three.
 *
 * Contract (the _ref functions in vec_dot_ref.c / quants_ref.c are the spec):
 *  - vec_dot(n, s, x, y): *s = sum over the row of x[i] * y[i]; n elements,
 *    a multiple of the type's block size; x, y need no alignment beyond
 *    their element type's.  Quantized pairs: each block's integer sum is
 *    exact, as in _ref; the blocks' float contributions are summed in
 *    8-lane partial sums with FMA, so the result differs from _ref only by
 *    float summation order (bound: tests/test_tiers.c).
 *  - gemm (kern_gemm_fn in types.h): every output bit-identical to vec_dot.
 *  - Q8_0 x Q8_0 multiplies |w| (unsigned) by y with w's sign (vpmaddubsw):
 *    exact when the ACTIVATION bytes lie in [-127, 127], which every Q8
 *    quantizer here and in _ref guarantees; weight bytes may be anything
 *    (-128 included).  The 4/5-bit types take any activation bytes.
 *  - from_float: the same bytes as _ref for finite inputs (round half away
 *    from zero is emulated exactly; F16 NaNs are canonicalized as _ref does).
 * Dimension letters: n = elements in the row, nb = n / 32 blocks; a tile
 * has R weight rows (r) and C activation rows (c). */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/avx2_common.h"
#include "kernels/quants.h"
#include "kernels/tiers.h"

static inline float h2f(kern_half h) { return _cvtsh_ss(h); } /* exact */
static inline kern_half f2h(float f) { return (kern_half)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); } /* RNE, as _ref */

/* ---- F16 / BF16 dots: x, y rows of n elements; *s = sum x[i] * y[i] -------------------- */
/* x, y: n IEEE halves (F16C converts exactly; products of halves are exact in float) */
static void vec_dot_f16(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
#define LD(p, i) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((p) + 2 * (i))))
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(LD(x, i), LD(y, i), a0);
        a1 = _mm256_fmadd_ps(LD(x, i + 8), LD(y, i + 8), a1);
        a2 = _mm256_fmadd_ps(LD(x, i + 16), LD(y, i + 16), a2);
        a3 = _mm256_fmadd_ps(LD(x, i + 24), LD(y, i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(LD(x, i), LD(y, i), a0);
#undef LD
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) {
        kern_half a, b;
        memcpy(&a, x + 2 * i, 2);
        memcpy(&b, y + 2 * i, 2);
        sum += h2f(a) * h2f(b);
    }
    *s = sum;
}

/* x, y: n bfloat16.  A bf16 in the high half of a 32-bit lane is its float;
 * unpacking 16 of them against zero permutes them within 128-bit lanes, the
 * same way for x and y, so the products pair up correctly. */
static void vec_dot_bf16(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
    const __m256i z = _mm256_setzero_si256();
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(x + 2 * i));
        const __m256i y0 = _mm256_loadu_si256((const __m256i *)(y + 2 * i));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(x + 2 * i + 32));
        const __m256i y1 = _mm256_loadu_si256((const __m256i *)(y + 2 * i + 32));
        a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, x0)),
                             _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, y0)), a0);
        a1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, x0)),
                             _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, y0)), a1);
        a2 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, x1)),
                             _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, y1)), a2);
        a3 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, x1)),
                             _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, y1)), a3);
    }
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) {
        uint16_t a, b;
        memcpy(&a, x + 2 * i, 2);
        memcpy(&b, y + 2 * i, 2);
        sum += kern_bf16_to_fp32(a) * kern_bf16_to_fp32(b);
    }
    *s = sum;
}

/* ---- tiles: nr weight rows x nc activation rows (kern_gemm_fn) ---------------------
 * vec_dot IS the 1x1 tile, so every output of every tile goes through the
 * same float operations in the same order as vec_dot: bit-identical, for
 * any nr, nc.  Per output (acc: 8 lanes; the adds of pairs keep the
 * loop-carried chain at one add per two steps):
 *   F32: per 16 elements t = x[0:8] * a[0:8]; t = fma(x[8:16], a[8:16], t);
 *        acc += t; then 8 more: acc = fma(x, a, acc); s = hsum(acc); then
 *        the last n % 8: s = fma(x[i], a[i], s).
 *   quantized: per pair of blocks t = D_b * L_b; t = fma(D_b+1, L_b+1, t);
 *        acc += t, where L_b (8 lanes) are the block's exact int32 partial
 *        sums as floats and D_b = d_x * d_y (exact); an odd last block:
 *        acc = fma(D_b, L_b, acc).  s = hsum(acc) + ms, where ms (Q4_1 and
 *        Q5_1) adds the exact products m_x * s_y a pair at a time in block
 *        order: ms += (m_b s_b + m_b+1 s_b+1).
 * The weight-side work (unpacking) is shared by the tile's columns, the
 * activation side by its rows.  Tiles are specialised for up to 4 rows x
 * 2 columns; wider requests run as several of those. */
#define AI static inline __attribute__((always_inline))
#define TR 4 /* rows per specialised tile */
#define TC 2 /* columns per specialised tile */

/* F32 x (n floats per row) . F32 a */
AI void tile_f32(int64_t n, const int R, const int C, float *y, size_t ldy, const uint8_t *x, size_t bx,
                 const uint8_t *a, size_t ba) {
    const float *xr[TR], *ac[TC];
    __m256 acc[TR][TC];
    for (int r = 0; r < R; r++) xr[r] = (const float *)(x + (size_t)r * bx);
    for (int c = 0; c < C; c++) ac[c] = (const float *)(a + (size_t)c * ba);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0[TR], x1[TR];
        for (int r = 0; r < R; r++) {
            x0[r] = _mm256_loadu_ps(xr[r] + i);
            x1[r] = _mm256_loadu_ps(xr[r] + i + 8);
        }
        for (int c = 0; c < C; c++) {
            const __m256 a0 = _mm256_loadu_ps(ac[c] + i), a1 = _mm256_loadu_ps(ac[c] + i + 8);
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_fmadd_ps(x1[r], a1, _mm256_mul_ps(x0[r], a0)));
        }
    }
    if (i + 8 <= n) {
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++)
                acc[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[r] + i), _mm256_loadu_ps(ac[c] + i), acc[r][c]);
        i += 8;
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            __m128 s = _mm_set_ss(hsum_ps(acc[r][c]));
            for (int64_t k = i; k < n; k++) s = _mm_fmadd_ss(_mm_set_ss(xr[r][k]), _mm_set_ss(ac[c][k]), s);
            y[(size_t)c * ldy + (size_t)r] = _mm_cvtss_f32(s);
        }
}

/* ---- quantized blocks: 32 weights against 32 int8 activations -------------------------- */
enum { K_Q4_0, K_Q4_1, K_Q5_0, K_Q5_1, K_Q8_0 }; /* weight type of a tile (activation: Q8_0 or Q8_1) */
/* byte offsets inside the blocks (quants.h layouts) and block sizes */
#define XB(K) ((K) == K_Q4_0 ? sizeof(block_q4_0) : (K) == K_Q4_1 ? sizeof(block_q4_1) \
             : (K) == K_Q5_0 ? sizeof(block_q5_0) : (K) == K_Q5_1 ? sizeof(block_q5_1) : sizeof(block_q8_0))
#define HAS_MIN(K) ((K) == K_Q4_1 || (K) == K_Q5_1)      /* x = q d + m, activations Q8_1 */
#define YB(K) (HAS_MIN(K) ? sizeof(block_q8_1) : sizeof(block_q8_0))
#define YQS(K) (HAS_MIN(K) ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs))
#define OFF(K) ((K) == K_Q4_0 ? 8 : (K) == K_Q5_0 ? 16 : 0) /* x = (q - OFF) d */

/* 16 bytes of nibbles -> 32 bytes in [0, 15]: low nibbles (elements 0..15)
 * first, then high nibbles (elements 16..31), ggml's order.  The 16 bytes
 * go to both halves; the upper half's 64-bit lanes shift right by 4. */
AI __m256i nibbles32(const uint8_t *qs) {
    const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi64(t, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0f));
}

/* 32 bits of qh -> 32 bytes, 0x10 where the element's bit is set */
AI __m256i bits32(const uint8_t *qh) {
    uint32_t v;
    memcpy(&v, qh, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf); /* byte j = qh byte j / 8 */
    const __m256i all_but = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);           /* every bit but j % 8 */
    const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(bytes, all_but), _mm256_set1_epi64x(-1));
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/* A weight block ready for vpmaddubsw: u unsigned bytes (q, or |q| for
 * Q8_0, whose signs w then moves onto the activations). */
typedef struct { __m256i u, w; } xblock;
AI xblock prep_x(const int K, const uint8_t *blk) {
    xblock o = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    switch (K) {
    case K_Q4_0: o.u = nibbles32(blk + offsetof(block_q4_0, qs)); break;
    case K_Q4_1: o.u = nibbles32(blk + offsetof(block_q4_1, qs)); break;
    case K_Q5_0:
        o.u = _mm256_or_si256(nibbles32(blk + offsetof(block_q5_0, qs)), bits32(blk + offsetof(block_q5_0, qh)));
        break;
    case K_Q5_1:
        o.u = _mm256_or_si256(nibbles32(blk + offsetof(block_q5_1, qs)), bits32(blk + offsetof(block_q5_1, qh)));
        break;
    default: /* Q8_0: |w| is exact as an unsigned byte, even for -128 */
        o.w = _mm256_loadu_si256((const __m256i *)(blk + offsetof(block_q8_0, qs)));
        o.u = _mm256_sign_epi8(o.w, o.w);
    }
    return o;
}

/* An activation block: y its bytes, off the int16 pair sums of OFF * y
 * (the weight offset, subtracted exactly) */
typedef struct { __m256i y, off; } yblock;
AI yblock prep_y(const int K, const uint8_t *blk) {
    yblock o;
    o.y = _mm256_loadu_si256((const __m256i *)(blk + YQS(K)));
    o.off = OFF(K) ? _mm256_maddubs_epi16(_mm256_set1_epi8((char)OFF(K)), o.y) : _mm256_setzero_si256();
    return o;
}

/* L: 8 lanes (as floats) summing to the block's exact integer dot.  Pairs
 * of products fit int16: |q| <= 31 (or |w| <= 128 against |y| <= 127 for
 * Q8_0, whose activations every Q8 quantizer keeps in [-127, 127]). */
AI __m256 block_lanes(const int K, xblock x, yblock y) {
    __m256i p;
    if (K == K_Q8_0) p = _mm256_maddubs_epi16(x.u, _mm256_sign_epi8(y.y, x.w));
    else p = _mm256_maddubs_epi16(x.u, y.y);
    if (OFF(K)) p = _mm256_sub_epi16(p, y.off);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* the fp16 at byte offset off of 4 consecutive blocks (stride bytes) -> [v0..v3, v0..v3] (exact) */
AI __m256 halves4x2(const uint8_t *p, size_t stride) {
    uint64_t h = 0;
    for (int k = 0; k < 4; k++) {
        kern_half v;
        memcpy(&v, p + (size_t)k * stride, 2);
        h |= (uint64_t)v << (16 * k);
    }
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
    return _mm256_set_m128(f, f);
}
AI float half_at(const uint8_t *p) { kern_half v; memcpy(&v, p, 2); return h2f(v); }
AI __m256 lane_bcast(__m256 v, int k) { return _mm256_permutevar_ps(v, _mm256_set1_epi32(k)); }

/* The quantized tile: x R rows of n/32 weight blocks (bx bytes apart), a C
 * rows of n/32 activation blocks (ba apart). */
AI void tile_q(const int K, int64_t n, const int R, const int C, float *y, size_t ldy, const uint8_t *x, size_t bx,
               const uint8_t *a, size_t ba) {
    const int64_t nb = n / 32;
    __m256 acc[TR][TC];
    float ms[TR][TC];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            acc[r][c] = _mm256_setzero_ps();
            ms[r][c] = 0.0f;
        }
#define XBLK(r, b) (x + (size_t)(r) * bx + (size_t)(b) * XB(K))
#define YBLK(c, b) (a + (size_t)(c) * ba + (size_t)(b) * YB(K))
    /* one pair of blocks (b, b + 1) for every output, scales D0, D1 given per output */
#define PAIR(b, D0, D1)                                                                                 \
    do {                                                                                                \
        xblock xp[TR][2];                                                                               \
        for (int r = 0; r < R; r++) {                                                                   \
            xp[r][0] = prep_x(K, XBLK(r, b));                                                           \
            xp[r][1] = prep_x(K, XBLK(r, (b) + 1));                                                     \
        }                                                                                               \
        for (int c = 0; c < C; c++) {                                                                   \
            const yblock y0 = prep_y(K, YBLK(c, b)), y1 = prep_y(K, YBLK(c, (b) + 1));                  \
            for (int r = 0; r < R; r++) {                                                               \
                const __m256 t = _mm256_mul_ps(D0, block_lanes(K, xp[r][0], y0));                       \
                acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_fmadd_ps(D1, block_lanes(K, xp[r][1], y1), t)); \
            }                                                                                           \
        }                                                                                               \
    } while (0)
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) { /* the scales of 4 blocks convert together */
        __m256 dx[TR], dy[TC];
        for (int r = 0; r < R; r++) dx[r] = halves4x2(XBLK(r, b), XB(K));
        for (int c = 0; c < C; c++) dy[c] = halves4x2(YBLK(c, b), YB(K));
#define D(k) lane_bcast(_mm256_mul_ps(dx[r], dy[c]), k)
        PAIR(b, D(0), D(1));
        PAIR(b + 2, D(2), D(3));
#undef D
        if (HAS_MIN(K)) { /* P = m s exact; lanes 0, 2 of P + P(odd lanes) are the two pair sums */
            __m128 mx[TR];
            for (int r = 0; r < R; r++) mx[r] = _mm256_castps256_ps128(halves4x2(XBLK(r, b) + 2, XB(K)));
            for (int c = 0; c < C; c++) {
                const __m128 sy = _mm256_castps256_ps128(halves4x2(YBLK(c, b) + 2, YB(K)));
                for (int r = 0; r < R; r++) {
                    const __m128 p = _mm_mul_ps(mx[r], sy), q = _mm_add_ps(p, _mm_movehdup_ps(p));
                    ms[r][c] = (ms[r][c] + _mm_cvtss_f32(q)) + _mm_cvtss_f32(_mm_movehl_ps(q, q));
                }
            }
        }
    }
#define DS(k) _mm256_set1_ps(half_at(XBLK(r, b + (k))) * half_at(YBLK(c, b + (k))))
#define MS(k) (half_at(XBLK(r, b + (k)) + 2) * half_at(YBLK(c, b + (k)) + 2))
    if (b + 2 <= nb) {
        PAIR(b, DS(0), DS(1));
        if (HAS_MIN(K))
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++) ms[r][c] += MS(0) + MS(1);
        b += 2;
    }
    if (b < nb) {
        for (int r = 0; r < R; r++) {
            const xblock xb = prep_x(K, XBLK(r, b));
            for (int c = 0; c < C; c++) {
                acc[r][c] = _mm256_fmadd_ps(DS(0), block_lanes(K, xb, prep_y(K, YBLK(c, b))), acc[r][c]);
                if (HAS_MIN(K)) ms[r][c] += MS(0);
            }
        }
    }
#undef DS
#undef MS
#undef PAIR
#undef XBLK
#undef YBLK
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) y[(size_t)c * ldy + (size_t)r] = hsum_ps(acc[r][c]) + ms[r][c];
}

/* vec_dot_<type> and gemm_<type> for every weight type, from the tiles above */
#include "kernels/tile_entries.h"

/* ---- activation quantizers: x n floats -> y in the type's layout ---------------------- */
static void quant_q8_0(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / QK8_0; b++) y[b].d = f2h(quant_block_q8(x + b * QK8_0, y[b].qs, NULL));
}

/* Q8_1: as Q8_0, plus s = d * sum(q) */
static void quant_q8_1(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        int sum;
        const float d = quant_block_q8(x + b * QK8_1, y[b].qs, &sum);
        y[b].d = f2h(d);
        y[b].s = f2h((float)sum * d);
    }
}

/* F16C rounds to nearest even like _ref; NaNs are rewritten to _ref's
 * canonical quiet NaN (F16C would keep payload bits). */
static void quant_f16(const float *x, void *vy, int64_t n) {
    uint8_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        _mm_storeu_si128((__m128i *)(y + 2 * i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        if (!_mm256_testz_ps(nan, nan)) /* rare: redo the 8 with _ref's rule */
            for (int j = 0; j < 8; j++) {
                const kern_half h = kern_fp32_to_fp16(x[i + j]);
                memcpy(y + 2 * (i + j), &h, 2);
            }
    }
    for (; i < n; i++) {
        const kern_half h = kern_fp32_to_fp16(x[i]);
        memcpy(y + 2 * i, &h, 2);
    }
}

/* bf16 = the float's high half, rounded to nearest even by adding
 * 0x7fff + lsb; NaN: the high half with the quiet bit set (_ref's rule) */
static void quant_bf16(const float *x, void *vy, int64_t n) {
    uint8_t *y = vy;
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h[2];
        for (int k = 0; k < 2; k++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(x + i + 8 * k));
            const __m256i hi = _mm256_srli_epi32(v, 16);
            const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(v, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
            const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs_mask), inf);
            h[k] = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(64)), nan);
        }
        const __m256i p = _mm256_packus_epi32(h[0], h[1]); /* values < 2^16: exact; lanes interleaved */
        _mm256_storeu_si256((__m256i *)(y + 2 * i), _mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0)));
    }
    for (; i < n; i++) {
        const uint16_t h = kern_fp32_to_bf16(x[i]);
        memcpy(y + 2 * i, &h, 2);
    }
}

/* ---- dequantizers of the float formats: x n elements -> y n floats ---------------------- */
static void dequant_f16(const void *vx, float *y, int64_t n) {
    const uint8_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + 2 * i))));
    for (; i < n; i++) {
        kern_half h;
        memcpy(&h, x + 2 * i, 2);
        y[i] = h2f(h);
    }
}

void kern_tier_avx2_install(kern_type_ops *ops) {
    ops[KT_F32].vec_dot = vec_dot_f32;
    ops[KT_F32].gemm = gemm_f32;
    ops[KT_F16].vec_dot = vec_dot_f16;
    ops[KT_F16].from_float = quant_f16;
    ops[KT_F16].to_float = dequant_f16;
    ops[KT_BF16].vec_dot = vec_dot_bf16;
    ops[KT_BF16].from_float = quant_bf16;
    ops[KT_Q4_0].vec_dot = vec_dot_q4_0_q8_0;
    ops[KT_Q4_0].gemm = gemm_q4_0_q8_0;
    ops[KT_Q4_1].vec_dot = vec_dot_q4_1_q8_1;
    ops[KT_Q4_1].gemm = gemm_q4_1_q8_1;
    ops[KT_Q5_0].vec_dot = vec_dot_q5_0_q8_0;
    ops[KT_Q5_0].gemm = gemm_q5_0_q8_0;
    ops[KT_Q5_1].vec_dot = vec_dot_q5_1_q8_1;
    ops[KT_Q5_1].gemm = gemm_q5_1_q8_1;
    ops[KT_Q8_0].vec_dot = vec_dot_q8_0_q8_0;
    ops[KT_Q8_0].gemm = gemm_q8_0_q8_0;
    ops[KT_Q8_0].from_float = quant_q8_0;
    ops[KT_Q8_1].from_float = quant_q8_1;
}
