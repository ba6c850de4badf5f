/* ops_avx2.c - AVX2 + FMA versions of element-wise ops of kernels/ops.c
 * (kernels/tiers.h); ops.c calls them when the active tier is avx2 or above.
 *
 * exp: Cephes' expf scheme, as in the common AVX "mathfun" code:
 * x = n ln2 + r with n = round(x log2 e) and ln2 split in two constants
 * (so r is exact to a few ulp even at |x| = 88), a degree-5 polynomial for
 * e^r on |r| <= ln2 / 2 (relative error ~1e-7), times 2^n built in the
 * exponent bits.  x is clamped to [-87.3, 88.3] so 2^n stays a normal
 * float; above it the result is inf (as expf's), below it 0 (expf's is a
 * denormal there, or 0): 1 + e^-g is 1 either way, and a -inf logit gets
 * probability 0 (tests/test_kernels.c holds both to libm's). */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/tiers.h"

static inline __m256 exp_avx2(__m256 x0) {
    const __m256 x = _mm256_min_ps(_mm256_max_ps(x0, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 big = _mm256_cmp_ps(x0, _mm256_set1_ps(88.3f), _CMP_GT_OQ); /* e^x0 overflows: inf, as expf */
    const __m256 tiny = _mm256_cmp_ps(x0, _mm256_set1_ps(-87.3f), _CMP_LT_OQ); /* below a normal float: 0 */
    const __m256 v = _mm256_blendv_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), _mm256_set1_ps(INFINITY), big);
    return _mm256_andnot_ps(tiny, v);
}

void kern_swiglu_avx2(float *h, const float *g, const float *u, int64_t K) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= K; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 e = exp_avx2(_mm256_xor_ps(gv, sign));
        _mm256_storeu_ps(h + i, _mm256_div_ps(_mm256_mul_ps(gv, _mm256_loadu_ps(u + i)), _mm256_add_ps(one, e)));
    }
    if (i < K) { /* the tail through a padded copy: the same formula */
        float gt[8] = {0}, ut[8] = {0}, ht[8];
        for (int64_t k = i; k < K; k++) gt[k - i] = g[k], ut[k - i] = u[k];
        kern_swiglu_avx2(ht, gt, ut, 8);
        for (int64_t k = i; k < K; k++) h[k] = ht[k - i];
    }
}
double kern_exp_sum_avx2(float *y, const float *x, int64_t n, float m, float s) {
    const __m256 mv = _mm256_set1_ps(m), sv = _mm256_set1_ps(s);
    __m256d t0 = _mm256_setzero_pd(), t1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp_avx2(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), sv));
        _mm256_storeu_ps(y + i, e);
        t0 = _mm256_add_pd(t0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        t1 = _mm256_add_pd(t1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(t0, t1));
    double t = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    if (i < n) { /* the tail through a padded copy (pad: -inf, i.e. 0) */
        float xt[8], yt[8];
        for (int k = 0; k < 8; k++) xt[k] = i + k < n ? x[i + k] : -INFINITY;
        const __m256 e = exp_avx2(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xt), mv), sv));
        _mm256_storeu_ps(yt, e);
        for (int64_t k = i; k < n; k++) y[k] = yt[k - i], t += yt[k - i];
    }
    return t;
}
#else
typedef int ops_avx2_unused; /* not an x86-64 AVX2 build: nothing here */
#endif
