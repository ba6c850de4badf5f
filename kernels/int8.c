/* int8.c - INT8 GEMM driver, activation/weight quantizer and the _ref tile
 * (contract in kernels/int8.h). */
#include <math.h>
#include <string.h>

#include "kernels/int8.h"
#include "kernels/kernels.h"

void kern_i8_quant_rows(const float *x, int T, int64_t K, int64_t Kp, int8_t *q, float *s, const uint8_t *skip) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * K;
        int8_t *qt = q + (size_t)t * Kp;
        float amax = 0.0f;
        if (skip) {
            for (int64_t k = 0; k < K; k++)
                if (!skip[k] && fabsf(xt[k]) > amax) amax = fabsf(xt[k]);
        } else {
            for (int64_t k = 0; k < K; k++) amax = fabsf(xt[k]) > amax ? fabsf(xt[k]) : amax;
        }
        s[t] = amax / 127.0f;
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int64_t k = 0; k < K; k++) {
            /* round half to even: adding 1.5 * 2^23 leaves no fraction bits
             * (|x * inv| <= 127.x), so the FPU's default rounding does it;
             * nearbyintf is a slow library call here */
            float v = (xt[k] * inv + 12582912.0f) - 12582912.0f;
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            qt[k] = (int8_t)v;
        }
        if (skip)
            for (int64_t k = 0; k < K; k++)
                if (skip[k]) qt[k] = 0;
        memset(qt + K, 0, (size_t)(Kp - K));
    }
}

void kern_i8_tile_ref(int64_t Kp, int nr, int nc, int32_t *out, size_t ldo, const int8_t *w, size_t ldw,
                      const int8_t *x, size_t ldx) {
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++) {
            int32_t acc = 0;
            for (int64_t k = 0; k < Kp; k++) acc += (int32_t)w[r * ldw + k] * (int32_t)x[c * ldx + k];
            out[c * ldo + r] = acc;
        }
}

kern_i8_tile_fn kern_i8_tile_for(kern_tier tier) {
    if (tier > kern_best_tier()) return NULL;
#if defined(__x86_64__) || defined(_M_X64)
    if (tier >= KERN_TIER_AVX512) return kern_i8_tile_avx512;
    if (tier >= KERN_TIER_AVX2) return kern_i8_tile_avx2;
#endif
    return kern_i8_tile_ref;
}

void kern_i8_gemm_ref(const int8_t *xq, const float *sx, int T, const int8_t *wq, const float *sw, float *y,
                      int64_t N, int64_t Kp, bool accumulate) {
    for (int t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            int32_t acc = 0;
            for (int64_t k = 0; k < Kp; k++) acc += (int32_t)xq[(size_t)t * Kp + k] * (int32_t)wq[(size_t)n * Kp + k];
            const float v = (float)acc * (sx[t] * sw[n]);
            y[(size_t)t * N + n] = accumulate ? y[(size_t)t * N + n] + v : v;
        }
}

/* activation rows per block: 64 rows of Kp <= 8192 bytes stay in L2 while
 * a thread's weight rows stream past them in tiles of 4 */
#define I8_TBLOCK 64

typedef struct {
    kern_i8_tile_fn tile;
    const int8_t *xq, *wq;
    const float *sx, *sw;
    float *y;
    int T;
    int64_t N, Kp;
    bool accumulate;
} i8_job;

static void i8_rows(const i8_job *j, int64_t lo, int64_t hi) {
    int32_t acc[4 * 4];
    for (int t0 = 0; t0 < j->T; t0 += I8_TBLOCK) {
        const int t1 = j->T - t0 < I8_TBLOCK ? j->T : t0 + I8_TBLOCK;
        for (int64_t n = lo; n < hi; n += 4) {
            const int nr = hi - n < 4 ? (int)(hi - n) : 4;
            for (int t = t0; t < t1; t += 4) {
                const int nc = t1 - t < 4 ? t1 - t : 4;
                j->tile(j->Kp, nr, nc, acc, 4, j->wq + (size_t)n * j->Kp, (size_t)j->Kp, j->xq + (size_t)t * j->Kp,
                        (size_t)j->Kp);
                for (int c = 0; c < nc; c++) {
                    float *yt = j->y + (size_t)(t + c) * j->N + n;
                    for (int r = 0; r < nr; r++) {
                        const float v = (float)acc[c * 4 + r] * (j->sx[t + c] * j->sw[n + r]);
                        yt[r] = j->accumulate ? yt[r] + v : v;
                    }
                }
            }
        }
    }
}

static void i8_task(void *ctx, int ith, int nth) {
    const i8_job *j = ctx;
    /* split N in multiples of 4 so tiles stay whole */
    int64_t lo, hi;
    core_split((j->N + 3) / 4, ith, nth, &lo, &hi);
    lo *= 4;
    hi = hi * 4 < j->N ? hi * 4 : j->N;
    if (lo < hi) i8_rows(j, lo, hi);
}

void kern_i8_gemm_with(kern_i8_tile_fn tile, const int8_t *xq, const float *sx, int T, const int8_t *wq,
                       const float *sw, float *y, int64_t N, int64_t Kp, bool accumulate) {
    const i8_job j = {tile, xq, wq, sx, sw, y, T, N, Kp, accumulate};
    i8_rows(&j, 0, N);
}

void kern_i8_gemm(core_pool *pool, const int8_t *xq, const float *sx, int T, const int8_t *wq, const float *sw,
                  float *y, int64_t N, int64_t Kp, bool accumulate) {
    CORE_ASSERT(Kp % KERN_I8_KALIGN == 0);
    i8_job j = {kern_i8_tile_for(kern_active_tier()), xq, wq, sx, sw, y, T, N, Kp, accumulate};
    if (pool && (double)N * (double)Kp * T >= KERN_MT_MIN_WORK) core_pool_run(pool, i8_task, &j);
    else i8_task(&j, 0, 1);
}
