/* vec_dot_avx512.c - the AVX-512 tier (F/BW/VL/DQ + VNNI, BF16 where the
 * CPU has it): dot products of a weight row with an activation row of its
 * paired type, register-blocked tiles of them (gemm, for prefill), and the
 * activation quantizers.  Compiled with the AVX-512 flags plus
 * AVX2/FMA/F16C; dispatch.c installs it only on CPUs that have them (the
 * vdpbf16ps dot only with AVX512_BF16).
 *
 * Contract: as vec_dot_avx2.c (the _ref functions are the spec):
 *  - vec_dot(n, s, x, y): *s = sum over the row of x[i] * y[i]; n a
 *    multiple of the block size.  Quantized pairs: two blocks per 512-bit
 *    register; each block's integer sum is exact (vpdpbusd, below); the
 *    blocks' float contributions are summed in 16 lanes with FMA, so
 *    results differ from _ref only by float summation order.  Activation
 *    bytes may be anything (-128 included).
 *  - gemm (kern_gemm_fn in types.h): every output bit-identical to vec_dot.
 *  - BF16 dot with vdpbf16ps: bf16 products are exact in float and summed
 *    with round-to-nearest-even, but the instruction treats bf16 inputs
 *    below 2^-126 in magnitude as zero and flushes float results below
 *    2^-126 to zero; each such flush moves the sum by less than
 *    2^-126 * max|operand| (the bound in tests/test_tiers.c includes it).
 *  - from_float: the same bytes as _ref for finite inputs.
 * Dimension letters: n = elements in the row, nb = n / 32 blocks; a tile
 * has R weight rows (r) and C activation rows (c). */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/quants.h"
#include "kernels/tiers.h"

static inline float h2f(kern_half h) { return _cvtsh_ss(h); } /* exact */
static inline kern_half f2h(float f) { return (kern_half)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); } /* RNE, as _ref */

static inline float hsum_ps(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* mask of the first k (< 32) 16-bit or 32-bit elements */
static inline __mmask32 first_k(int64_t k) { return (__mmask32)((1u << k) - 1); }

/* ---- F16 / BF16 dots: x, y rows of n elements; *s = sum x[i] * y[i] -------------------- */
/* x, y: n IEEE halves (exact conversion; products of halves are exact in float) */
static void vec_dot_f16(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
#define LD(p, i) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((p) + 2 * (i))))
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(LD(x, i), LD(y, i), a0);
        a1 = _mm512_fmadd_ps(LD(x, i + 16), LD(y, i + 16), a1);
        a2 = _mm512_fmadd_ps(LD(x, i + 32), LD(y, i + 32), a2);
        a3 = _mm512_fmadd_ps(LD(x, i + 48), LD(y, i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(LD(x, i), LD(y, i), a0);
#undef LD
    if (i < n) {
        const __mmask16 m = (__mmask16)first_k(n - i);
        const __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + 2 * i));
        a1 = _mm512_fmadd_ps(xv, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, y + 2 * i)), a1);
    }
    *s = hsum_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* x, y: n bfloat16; vdpbf16ps adds the products of 32 pairs into 16 lanes
 * (subnormal operands and results flushed to zero, see the top comment) */
static void vec_dot_bf16(int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx, *y = vy;
#define LD(p, i) ((__m512bh)_mm512_loadu_si512((p) + 2 * (i)))
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_dpbf16_ps(a0, LD(x, i), LD(y, i));
        a1 = _mm512_dpbf16_ps(a1, LD(x, i + 32), LD(y, i + 32));
    }
#undef LD
    for (; i < n; i += 32) { /* masked: the missing elements load as zero */
        const __mmask32 m = n - i >= 32 ? (__mmask32)0xffffffffu : first_k(n - i);
        a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_maskz_loadu_epi16(m, x + 2 * i),
                              (__m512bh)_mm512_maskz_loadu_epi16(m, y + 2 * i));
    }
    *s = hsum_ps(_mm512_add_ps(a0, a1));
}

/* ---- tiles: nr weight rows x nc activation rows (kern_gemm_fn) ---------------------
 * vec_dot IS the 1x1 tile, so every output of every tile goes through the
 * same float operations in the same order as vec_dot: bit-identical, for
 * any nr, nc.  Per output (acc: 16 lanes):
 *   F32: per 32 elements t = x[0:16] * a[0:16]; t = fma(x[16:32], a[16:32], t);
 *        acc += t; then 16 more: acc = fma(x, a, acc); then the last n % 16
 *        (masked, missing lanes zero): acc = fma(x, a, acc); s = hsum(acc).
 *   quantized: a register holds two blocks (lanes 0..7 block b, 8..15 block
 *        b+1); L = their exact int32 lane sums as floats, D = [D_b x8, D_b+1 x8]
 *        with D_b = d_x * d_y (exact).  Per 4 blocks t = D01 * L01;
 *        t = fma(D23, L23, t); acc += t; 2 or 3 blocks left:
 *        acc = fma(D01, L01, acc); 1 left: the block twice with D = [D_b, 0]:
 *        acc = fma(D, L, acc).  s = hsum(acc) + ms, where ms (Q4_1, Q5_1)
 *        adds the exact products m_x * s_y a pair at a time in block order.
 * Integer part: vpdpbusd of the weights as unsigned bytes u = q + OFF
 * (Q4_0: q + 8 is the nibble, Q5_0: + 16, Q8_0: + 128 by flipping the sign
 * bit) with the activations, starting from -OFF * (sum of the activations
 * in the lane), so each lane is the exact sum of q * y (any int8 y).
 * Tiles are specialised for up to 4 rows x 2 columns; wider requests run
 * as several of those. */
#define AI static inline __attribute__((always_inline))
#define TR 4 /* rows per specialised tile */
#define TC 2 /* columns per specialised tile */

/* F32 x (n floats per row) . F32 a */
AI void tile_f32(int64_t n, const int R, const int C, float *y, size_t ldy, const uint8_t *x, size_t bx,
                 const uint8_t *a, size_t ba) {
    const float *xr[TR], *ac[TC];
    __m512 acc[TR][TC];
    for (int r = 0; r < R; r++) xr[r] = (const float *)(x + (size_t)r * bx);
    for (int c = 0; c < C; c++) ac[c] = (const float *)(a + (size_t)c * ba);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 x0[TR], x1[TR];
        for (int r = 0; r < R; r++) {
            x0[r] = _mm512_loadu_ps(xr[r] + i);
            x1[r] = _mm512_loadu_ps(xr[r] + i + 16);
        }
        for (int c = 0; c < C; c++) {
            const __m512 a0 = _mm512_loadu_ps(ac[c] + i), a1 = _mm512_loadu_ps(ac[c] + i + 16);
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm512_add_ps(acc[r][c], _mm512_fmadd_ps(x1[r], a1, _mm512_mul_ps(x0[r], a0)));
        }
    }
    for (int k = 0; k < 2 && i < n; k++) { /* 16 more, then the masked rest */
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)first_k(n - i);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++)
                acc[r][c] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xr[r] + i), _mm512_maskz_loadu_ps(m, ac[c] + i),
                                            acc[r][c]);
        i += 16;
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) y[(size_t)c * ldy + (size_t)r] = hsum_ps(acc[r][c]);
}

/* ---- quantized blocks, two per register ---------------------------------------------- */
enum { K_Q4_0, K_Q4_1, K_Q5_0, K_Q5_1, K_Q8_0 }; /* weight type of a tile (activation: Q8_0 or Q8_1) */
#define XB(K) ((K) == K_Q4_0 ? sizeof(block_q4_0) : (K) == K_Q4_1 ? sizeof(block_q4_1) \
             : (K) == K_Q5_0 ? sizeof(block_q5_0) : (K) == K_Q5_1 ? sizeof(block_q5_1) : sizeof(block_q8_0))
#define XQS(K) ((K) == K_Q4_0 ? offsetof(block_q4_0, qs) : (K) == K_Q4_1 ? offsetof(block_q4_1, qs) \
              : (K) == K_Q5_0 ? offsetof(block_q5_0, qs) : (K) == K_Q5_1 ? offsetof(block_q5_1, qs) : offsetof(block_q8_0, qs))
#define XQH(K) ((K) == K_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh))
#define HAS_MIN(K) ((K) == K_Q4_1 || (K) == K_Q5_1) /* x = q d + m, activations Q8_1 */
#define YB(K) (HAS_MIN(K) ? sizeof(block_q8_1) : sizeof(block_q8_0))
#define YQS(K) (HAS_MIN(K) ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs))
#define OFF(K) ((K) == K_Q4_0 ? 8 : (K) == K_Q5_0 ? 16 : (K) == K_Q8_0 ? 128 : 0)

/* nibbles of two Q4/Q5 blocks -> bytes in [0, 15]: per block the low nibbles
 * (elements 0..15) then the high nibbles (16..31), ggml's order */
AI __m512i nibbles64(const uint8_t *qa, const uint8_t *qb) {
    const __m256i t = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qb), _mm_loadu_si128((const __m128i *)qa));
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1); /* qa qb qa>>4 qb>>4 */
    return _mm512_and_si512(_mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0f));
}

AI __m512i load2x32(const uint8_t *a, const uint8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* the two blocks' 5th bits: bit j of A's qh for byte j, of B's for byte 32 + j */
AI __mmask64 bits64(const uint8_t *qha, const uint8_t *qhb) {
    uint32_t a, b;
    memcpy(&a, qha, 4);
    memcpy(&b, qhb, 4);
    return (__mmask64)a | (__mmask64)b << 32;
}

/* the weights of blocks A and B as unsigned bytes u = q + OFF */
AI __m512i prep_x(const int K, const uint8_t *xa, const uint8_t *xb) {
    if (K == K_Q8_0) return _mm512_xor_si512(load2x32(xa + XQS(K), xb + XQS(K)), _mm512_set1_epi8((char)0x80));
    const __m512i nib = nibbles64(xa + XQS(K), xb + XQS(K));
    if (K == K_Q4_0 || K == K_Q4_1) return nib;
    return _mm512_mask_add_epi8(nib, bits64(xa + XQH(K), xb + XQH(K)), nib, _mm512_set1_epi8(0x10));
}

/* activations of blocks A and B: y their bytes, corr = -OFF * (each lane's sum of 4 y) */
typedef struct { __m512i y, corr; } yblock;
AI yblock prep_y(const int K, const uint8_t *ya, const uint8_t *yb) {
    yblock o;
    o.y = load2x32(ya + YQS(K), yb + YQS(K));
    const __m512i z = _mm512_setzero_si512();
    o.corr = OFF(K) ? _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, _mm512_set1_epi8((char)OFF(K)), o.y)) : z;
    return o;
}

/* L: lanes 0..7 sum to block A's exact integer dot, 8..15 to B's */
AI __m512 block_lanes(__m512i u, yblock y) { return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(y.corr, u, y.y)); }

/* four fp16 values `stride` bytes apart -> 4 floats (exact) */
AI __m128 halves4(const uint8_t *p, size_t stride) {
    uint64_t h = 0;
    for (int k = 0; k < 4; k++) {
        kern_half v;
        memcpy(&v, p + (size_t)k * stride, 2);
        h |= (uint64_t)v << (16 * k);
    }
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
}
AI float half_at(const uint8_t *p) { kern_half v; memcpy(&v, p, 2); return h2f(v); }
/* [v[i] x8, v[j] x8] */
AI __m512 spread2(__m128 v, int i, int j) {
    const __m512i idx = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(i), _mm512_set1_epi32(j));
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

/* The quantized tile: x R rows of n/32 weight blocks (bx bytes apart), a C
 * rows of n/32 activation blocks (ba apart). */
AI void tile_q(const int K, int64_t n, const int R, const int C, float *y, size_t ldy, const uint8_t *x, size_t bx,
               const uint8_t *a, size_t ba) {
    const int64_t nb = n / 32;
    __m512 acc[TR][TC];
    float ms[TR][TC];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            acc[r][c] = _mm512_setzero_ps();
            ms[r][c] = 0.0f;
        }
#define XBLK(r, b) (x + (size_t)(r) * bx + (size_t)(b) * XB(K))
#define YBLK(c, b) (a + (size_t)(c) * ba + (size_t)(b) * YB(K))
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        __m512 dx01[TR], dx23[TR];
        __m512i w01[TR], w23[TR];
        for (int r = 0; r < R; r++) {
            const __m128 d4 = halves4(XBLK(r, b), XB(K));
            dx01[r] = spread2(d4, 0, 1);
            dx23[r] = spread2(d4, 2, 3);
            w01[r] = prep_x(K, XBLK(r, b), XBLK(r, b + 1));
            w23[r] = prep_x(K, XBLK(r, b + 2), XBLK(r, b + 3));
        }
        for (int c = 0; c < C; c++) {
            const __m128 d4 = halves4(YBLK(c, b), YB(K));
            const __m512 dy01 = spread2(d4, 0, 1), dy23 = spread2(d4, 2, 3);
            const yblock y01 = prep_y(K, YBLK(c, b), YBLK(c, b + 1)), y23 = prep_y(K, YBLK(c, b + 2), YBLK(c, b + 3));
            for (int r = 0; r < R; r++) {
                const __m512 t = _mm512_mul_ps(_mm512_mul_ps(dx01[r], dy01), block_lanes(w01[r], y01));
                acc[r][c] = _mm512_add_ps(acc[r][c],
                                          _mm512_fmadd_ps(_mm512_mul_ps(dx23[r], dy23), block_lanes(w23[r], y23), t));
            }
        }
        if (HAS_MIN(K)) /* P = m s exact; lanes 0, 2 of P + P(odd lanes) are the two pair sums */
            for (int r = 0; r < R; r++) {
                const __m128 mx = halves4(XBLK(r, b) + 2, XB(K));
                for (int c = 0; c < C; c++) {
                    const __m128 p = _mm_mul_ps(mx, halves4(YBLK(c, b) + 2, YB(K))), q = _mm_add_ps(p, _mm_movehdup_ps(p));
                    ms[r][c] = (ms[r][c] + _mm_cvtss_f32(q)) + _mm_cvtss_f32(_mm_movehl_ps(q, q));
                }
            }
    }
#define DS(k) (half_at(XBLK(r, b + (k))) * half_at(YBLK(c, b + (k))))
#define MS(k) (half_at(XBLK(r, b + (k)) + 2) * half_at(YBLK(c, b + (k)) + 2))
    while (b < nb) { /* 1..3 blocks: a pair, then a single block paired with itself at scale 0 */
        const int two = b + 2 <= nb;
        for (int r = 0; r < R; r++) {
            const __m512i w = prep_x(K, XBLK(r, b), XBLK(r, b + two));
            for (int c = 0; c < C; c++) {
                const __m512 d = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(DS(0)), _mm512_set1_ps(two ? DS(1) : 0.0f));
                acc[r][c] = _mm512_fmadd_ps(d, block_lanes(w, prep_y(K, YBLK(c, b), YBLK(c, b + two))), acc[r][c]);
                if (HAS_MIN(K)) ms[r][c] += two ? MS(0) + MS(1) : MS(0);
            }
        }
        b += 1 + two;
    }
#undef DS
#undef MS
#undef XBLK
#undef YBLK
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) y[(size_t)c * ldy + (size_t)r] = hsum_ps(acc[r][c]) + ms[r][c];
}

/* vec_dot_<type> and gemm_<type> for every weight type, from the tiles above */
#include "kernels/tile_entries.h"

/* ---- activation quantizers: x n floats -> y in the type's layout ---------------------- */
/* roundf, exactly: truncate, then step away from zero where |remainder| >= 0.5 */
static inline __m512 round_away(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 step = _mm512_castsi512_ps(_mm512_or_epi32(_mm512_and_epi32(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)),
                                                            _mm512_castps_si512(_mm512_set1_ps(1.0f))));
    return _mm512_mask_add_ps(t, up, t, step);
}

/* One block of 32 floats -> 32 int8 = round(x * id) into q; returns d and
 * (through sum, if not NULL) the sum of the q.  d = amax / 127 as _ref. */
static inline float quant_block_q8(const float *x, int8_t *q, int *sum) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    /* vmaxps returns its second operand when either is NaN: a NaN never wins, as in fmaxf */
    const __m512 amax = _mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps()));
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(amax), _mm512_extractf32x8_ps(amax, 1));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127, id = d ? 1.0f / d : 0.0f;
    const __m512 mul = _mm512_set1_ps(id);
    const __m512i i0 = _mm512_cvtps_epi32(round_away(_mm512_mul_ps(v0, mul)));
    const __m512i i1 = _mm512_cvtps_epi32(round_away(_mm512_mul_ps(v1, mul)));
    if (sum) *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    /* |q| <= 127: the saturating narrowing is exact */
    _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(i0));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(i1));
    return d;
}

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

/* round to nearest even like _ref; NaNs are rewritten to _ref's canonical
 * quiet NaN (the hardware would keep payload bits) */
static void quant_f16(const float *x, void *vy, int64_t n) {
    uint8_t *y = vy;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)first_k(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm256_mask_storeu_epi16(y + 2 * i, m, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) /* rare: redo these with _ref's rule */
            for (int64_t j = i; j < i + 16 && j < n; j++) {
                const kern_half hv = kern_fp32_to_fp16(x[j]);
                memcpy(y + 2 * j, &hv, 2);
            }
    }
}

/* bf16 = the float's high half, rounded to nearest even by adding
 * 0x7fff + lsb; NaN: the high half with the quiet bit set (_ref's rule) */
static void quant_bf16(const float *x, void *vy, int64_t n) {
    uint8_t *y = vy;
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), q = _mm512_set1_epi32(64);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)first_k(n - i);
        const __m512i v = _mm512_maskz_loadu_epi32(m, x + i);
        const __m512i hi = _mm512_srli_epi32(v, 16);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(v, _mm512_add_epi32(bias, _mm512_and_si512(hi, one))), 16);
        const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(v, abs_mask), inf);
        r = _mm512_mask_or_epi32(r, nan, hi, q);
        _mm256_mask_storeu_epi16(y + 2 * i, m, _mm512_cvtepi32_epi16(r)); /* values < 2^16: exact */
    }
}

void kern_tier_avx512_install(kern_type_ops *ops, bool has_bf16) {
    /* the AVX2 tiles are bit-identical to the AVX2 dots, not to these */
    for (int t = 0; t < KT_GGML_COUNT; t++) ops[t].gemm = NULL;
    ops[KT_F32].vec_dot = vec_dot_f32;
    ops[KT_F32].gemm = gemm_f32;
    ops[KT_F16].vec_dot = vec_dot_f16;
    ops[KT_F16].from_float = quant_f16;
    if (has_bf16) ops[KT_BF16].vec_dot = vec_dot_bf16;
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
