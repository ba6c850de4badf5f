/* test_repack_f16.c - packed F16 and BF16 matrices (kernels/repack_f16.c):
 *  1. pack / unpack round-trips every row of both types, missing rows of
 *     the last group are zero, the packed size is the file's;
 *  2. the packed ref equals the spec written out once more here (F16:
 *     activations rounded to F16, one fmaf chain in k order per output;
 *     BF16: activations rounded to BF16, vdpbf16ps's pairs, element k + 1
 *     before k, denormals flushed) on every output, and on this CPU, where
 *     it has AVX512_BF16, the instruction itself gives the spec's bits
 *     (2b, values down to denormals);
 *  3. every tier this CPU has (ref, avx2, avx512) is bit-identical to the
 *     packed ref: decode and prefill T = 1..13, N not a multiple of 8 or 16,
 *     odd K, 1, 2 and 3 threads, and a T = 1 call equals that row of a batch;
 *  4. kern_matmul_packed_n (several BF16 matrices in one call) equals each
 *     matrix's own call;
 *  5. BF16 packed vs the exact dot (double) of the weights and the
 *     BF16-rounded activations: the float summation bound
 *     |y - dot| <= K 2^-24 sum |w a| (1.01 K u, u = 2^-24, K u << 1);
 *  6. stories260K converted to BF16, packed at load, against the weights
 *     widened to F32 (exact; the row-major F32 path, F32 activations), the
 *     same file unpacked (no_repack: the row-major BF16 dot, which rounds
 *     the activations to BF16 too, in another order) and token-by-token
 *     decode against prefill: within 1e-2 of the logits' range (measured
 *     4.2e-3, 2.1e-3 against unpacked: an activation one float ulp apart
 *     can round to BF16 values 2^-8 apart, so summation order alone no
 *     longer stays near 1e-4 as it did with F32 activations; other ops
 *     differ by tier, so tiers are held bit-equal at the matmul level, in
 *     3, not on logits);
 *  3b. each SIMD tile called directly for every G x C it accepts.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/kernels.h"
#include "kernels/repack.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static const int TYPES[2] = {KT_F16, KT_BF16};

#if defined(__x86_64__)
/* kernels/repack_f16_avx512.c compiled for AVX2, its zmm intrinsics
 * emulated exactly (tests/repack_f16_avx512_emulated.c) */
kern_pack_f16_tile_fn kern_pack_f16_tile_avx512_emulated(void);
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx512_emulated(void);
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx512_halved_emulated(void); /* Zen 4's blocks */
#endif

/* N x K weights of type t (16-bit values), a spread of magnitudes; a few exact zeros */
static uint16_t *make_weights(int t, int64_t N, int64_t K) {
    uint16_t *W = malloc(sizeof(uint16_t) * (size_t)(N * K));
    float *row = malloc(sizeof(float) * (size_t)K);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) row[k] = frand() * (1.0f + (float)(n % 3)) * (k % 11 == 0 ? 8.0f : 1.0f);
        if (K > 3) row[n % K] = 0.0f;
        kern_type_get(t)->from_float_ref(row, W + (size_t)(n * K), K);
    }
    free(row);
    return W;
}

static float w_of(int t, uint16_t h) { return t == KT_BF16 ? kern_bf16_to_fp32(h) : kern_fp16_to_fp32(h); }

/* activations as the spec uses them: rounded to the weights' type, as floats */
static void spec_acts(int t, const float *x, float *a, int64_t n) {
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    kern_type_get(t)->from_float_ref(x, h, n);
    for (int64_t i = 0; i < n; i++) a[i] = w_of(t, h[i]);
    free(h);
}

/* BF16's flush (the instruction's DAZ / FTZ), written out again */
static float ftz(float x) {
    return fpclassify(x) == FP_SUBNORMAL ? (signbit(x) ? -0.0f : 0.0f) : x;
}

/* the spec of one output: w, a rows of K (floats as the spec reads them) */
static float spec_dot(int t, const uint16_t *w, const float *a, int64_t K) {
    float acc = 0.0f;
    if (t == KT_F16) {
        for (int64_t k = 0; k < K; k++) acc = fmaf(w_of(t, w[k]), a[k], acc);
        return acc;
    }
    for (int64_t k = 0; k < K; k += 2) {
        acc = k + 1 < K ? ftz(fmaf(ftz(w_of(t, w[k + 1])), ftz(a[k + 1]), acc)) : ftz(fmaf(0.0f, 0.0f, acc));
        acc = ftz(fmaf(ftz(w_of(t, w[k])), ftz(a[k]), acc));
    }
    return acc;
}

static void test_pack_roundtrip(void **state) {
    (void)state;
    const int64_t Ns[] = {1, 7, 21, 136}, Ks[] = {1, 37, 515};
    for (int ti = 0; ti < 2; ti++)
        for (int ni = 0; ni < 4; ni++)
            for (int ki = 0; ki < 3; ki++) {
                const int t = TYPES[ti];
                const int64_t N = Ns[ni], K = Ks[ki], G = (N + 7) / 8;
                assert_true(kern_pack_supported(t));
                assert_true(kern_pack_fits(t, K));
                assert_int_equal(kern_pack_bytes(t, N, K), (size_t)G * 8 * (size_t)K * 2);
                uint16_t *W = make_weights(t, N, K), *P = malloc(kern_pack_bytes(t, N, K)),
                         *row = malloc(sizeof(uint16_t) * (size_t)K);
                memset(P, 0xab, kern_pack_bytes(t, N, K));
                kern_pack(W, t, N, K, P, 0, G / 2); /* two ranges, as threads do */
                kern_pack(W, t, N, K, P, G / 2, G);
                for (int64_t n = 0; n < N; n++) {
                    kern_unpack_row(P, t, N, K, n, row);
                    assert_memory_equal(row, W + (size_t)(n * K), sizeof(uint16_t) * (size_t)K);
                }
                const uint16_t *last = P + (size_t)(G - 1) * 8 * (size_t)K;
                for (int64_t k = 0; k < K; k++)
                    for (int64_t r = N - (G - 1) * 8; r < 8; r++) assert_int_equal(last[k * 8 + r], 0);
                free(W); free(P); free(row);
            }
}

/* 2 and 3: the spec, then every tier bit-identical to the packed ref */
static void test_tiers_bit_identical(void **state) {
    (void)state;
    enum { TMAX = 13 };
    /* N: 1 partial group; 21 (2 + a partial); 140 (17 full groups + a partial: the
     * 16-group decode tile and a remainder); 1001 (126 groups, threads take
     * several chunks).  K odd, and 1. */
    const int64_t Ns[] = {5, 21, 140, 1001}, Ks[] = {1, 37, 515};
    core_pool *pools[3] = {NULL, core_pool_new(2), core_pool_new(3)};
    const kern_tier best = kern_best_tier();
    for (int ti = 0; ti < 2; ti++)
        for (int ni = 0; ni < 4; ni++)
            for (int ki = 0; ki < 3; ki++) {
                const int t = TYPES[ti];
                const int64_t N = Ns[ni], K = Ks[ki];
                uint16_t *W = make_weights(t, N, K), *P = malloc(kern_pack_bytes(t, N, K));
                kern_pack(W, t, N, K, P, 0, (N + 7) / 8);
                float *x = malloc(sizeof(float) * TMAX * K), *a = malloc(sizeof(float) * TMAX * K),
                      *yr = malloc(sizeof(float) * TMAX * N), *y = malloc(sizeof(float) * TMAX * N),
                      *y1 = malloc(sizeof(float) * N);
                for (int i = 0; i < TMAX * K; i++) x[i] = frand() * 3.0f * (i % 7 == 0 ? 100.0f : 1.0f);
                spec_acts(t, x, a, TMAX * K);
                void *scratch = malloc(kern_matmul_scratch_bytes(TMAX, K));
                kern_matmul_packed_ref(P, t, x, yr, TMAX, N, K);
                for (int tt = 0; tt < TMAX; tt++) /* the spec */
                    for (int64_t n = 0; n < N; n++) {
                        const float acc = spec_dot(t, W + n * K, a + tt * K, K);
                        if (memcmp(&acc, &yr[tt * N + n], 4))
                            fail_msg("%s packed ref != spec at [%d][%d]: %.9g vs %.9g", kern_type_name(t), tt,
                                     (int)n, yr[tt * N + n], acc);
                    }
                for (int T = 1; T <= TMAX; T++) {
                    if (T > 1) kern_matmul_packed_ref(P, t, x, yr, T, N, K);
                    for (int tier = KERN_TIER_REF; tier <= (int)best; tier++) {
                        assert_true(kern_set_tier((kern_tier)tier));
                        for (int pi = 0; pi < 3; pi++) {
                            memset(y, 0xff, sizeof(float) * TMAX * N);
                            kern_matmul_packed(pools[pi], scratch, P, t, x, y, T, N, K);
                            if (memcmp(y, yr, sizeof(float) * (size_t)T * (size_t)N))
                                fail_msg("%s tier %s T=%d N=%d K=%d threads=%d: not bit-identical to the packed ref",
                                         kern_type_name(t), kern_tier_name((kern_tier)tier), T, (int)N, (int)K,
                                         pi + 1);
                        }
                        /* one row alone == that row of the batch */
                        kern_matmul_packed(pools[1], scratch, P, t, x + (T - 1) * K, y1, 1, N, K);
                        if (memcmp(y1, yr + (size_t)(T - 1) * (size_t)N, sizeof(float) * (size_t)N))
                            fail_msg("%s tier %s T=%d N=%d K=%d: a row alone != that row of the batch",
                                     kern_type_name(t), kern_tier_name((kern_tier)tier), T, (int)N, (int)K);
                    }
                    kern_set_tier(best);
                }
                free(W); free(P); free(x); free(a); free(yr); free(y); free(y1); free(scratch);
            }
    core_pool_free(pools[1]);
    core_pool_free(pools[2]);
}

/* 3b: each SIMD tile called directly for every shape it accepts (G = 1 .. 19
 * groups, C = 1 .. 12 rows; the driver gives only some of them) against the
 * packed ref's outputs */
static void test_tile_shapes(void **state) {
    (void)state;
    enum { GMAX = 19, CMAX = KERN_PACK_F16_TC };
    const int64_t K = 29, N = GMAX * 8;
    const kern_tier best = kern_best_tier();
    for (int ti = 0; ti < 2; ti++) {
        const int t = TYPES[ti];
        struct {
            const char *name;
            kern_pack_f16_tile_fn f;
            bool acts16; /* takes BF16 activations (uint16) */
        } tiles[4] = {{"avx2", NULL, false},
                      {"avx512", NULL, t == KT_BF16},
                      {"avx512 emulated", NULL, t == KT_BF16},
                      {"avx512 emulated, 4 x 12 blocks", NULL, true}};
#if defined(__x86_64__)
        if (best >= KERN_TIER_AVX2) {
            tiles[0].f = t == KT_BF16 ? kern_pack_bf16_tile_avx2() : kern_pack_f16_tile_avx2();
            tiles[2].f = t == KT_BF16 ? kern_pack_bf16_tile_avx512_emulated() : kern_pack_f16_tile_avx512_emulated();
            if (t == KT_BF16) tiles[3].f = kern_pack_bf16_tile_avx512_halved_emulated();
        }
        if (best >= KERN_TIER_AVX512)
            tiles[1].f = t == KT_BF16 ? kern_pack_bf16_tile_avx512() : kern_pack_f16_tile_avx512();
#endif
        if (!tiles[0].f && !tiles[1].f && !tiles[2].f) continue; /* tiles[3] only with tiles[2] */
        uint16_t *W = make_weights(t, N, K), *P = malloc(kern_pack_bytes(t, N, K));
        kern_pack(W, t, N, K, P, 0, GMAX);
        float *x = malloc(sizeof(float) * CMAX * K), *a = malloc(sizeof(float) * CMAX * K),
              *yr = malloc(sizeof(float) * CMAX * N), *y = malloc(sizeof(float) * CMAX * N);
        for (int i = 0; i < CMAX * K; i++) x[i] = frand() * 5.0f;
        spec_acts(t, x, a, CMAX * K);
        uint16_t *a16 = malloc(sizeof(uint16_t) * CMAX * K); /* BF16's avx512 tile takes BF16 values */
        kern_type_get(t)->from_float_ref(x, a16, CMAX * K);
        kern_matmul_packed_ref(P, t, x, yr, CMAX, N, K);
        for (int i = 0; i < 4; i++) {
            if (!tiles[i].f) continue;
            const void *ai = tiles[i].acts16 ? (const void *)a16 : (const void *)a;
            for (int G = 1; G <= GMAX; G++)
                for (int C = 1; C <= CMAX; C++) {
                    memset(y, 0xff, sizeof(float) * CMAX * N);
                    tiles[i].f(K, G, C, y, (size_t)N, P, ai, (size_t)K);
                    for (int c = 0; c < C; c++) {
                        if (memcmp(y + (size_t)c * N, yr + (size_t)c * N, sizeof(float) * (size_t)G * 8))
                            fail_msg("%s %s tile G=%d C=%d: row %d != the packed ref", kern_type_name(t),
                                     tiles[i].name, G, C, c);
                        const float *rest = y + (size_t)c * N + (size_t)G * 8; /* nothing past the G groups */
                        for (int64_t n = (int64_t)G * 8; n < N; n++, rest++) {
                            uint32_t b;
                            memcpy(&b, rest, 4);
                            if (b != 0xffffffffu) fail_msg("%s tile G=%d C=%d wrote past its groups", tiles[i].name, G, C);
                        }
                    }
                }
        }
        free(W); free(P); free(x); free(a); free(a16); free(yr); free(y);
    }
}

/* 2b: BF16 down to denormals: weights and activations of magnitudes from
 * 2^-75 to 2^-55 (products near 2^-130, sums in float's denormals) and
 * BF16 denormals (2^-138 to 2^-127), and some normal ones (none in a third
 * of the rows and in the first activation row), so the spec's flushes
 * decide many outputs; every tier (the instruction itself where the CPU
 * has it, FTZ / DAZ under the AVX2 tile) gives the spec's bits */
static float tiny(bool some_normal) {
    const float m = frand();
    const unsigned r = (unsigned)(g_rng >> 59); /* 0..31 */
    if (some_normal && r < 6) return m;
    if (r < 20) return ldexpf(m, -55 - (int)((g_rng >> 40) % 21)); /* products near 2^-130: denormal sums */
    return ldexpf(m, -127 - (int)((g_rng >> 40) % 12)); /* BF16 denormals */
}
/* the BF16 spec without its flushes: where it differs, a flush decided */
static float noflush_dot(const uint16_t *w, const float *a, int64_t K) {
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k += 2) {
        acc = k + 1 < K ? fmaf(kern_bf16_to_fp32(w[k + 1]), a[k + 1], acc) : fmaf(0.0f, 0.0f, acc);
        acc = fmaf(kern_bf16_to_fp32(w[k]), a[k], acc);
    }
    return acc;
}
static void test_bf16_denormals(void **state) {
    (void)state;
    const int64_t N = 45, K = 67;
    enum { T = 7 };
    uint16_t *W = malloc(sizeof(uint16_t) * (size_t)(N * K)), *P = malloc(kern_pack_bytes(KT_BF16, N, K));
    float *row = malloc(sizeof(float) * (size_t)K), *x = malloc(sizeof(float) * T * K), *a = malloc(sizeof(float) * T * K),
          *y = malloc(sizeof(float) * T * N);
    int n_sub = 0;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) row[k] = tiny(n % 3 != 0);
        kern_type_get(KT_BF16)->from_float_ref(row, W + n * K, K);
        for (int64_t k = 0; k < K; k++) n_sub += fpclassify(kern_bf16_to_fp32(W[n * K + k])) == FP_SUBNORMAL;
    }
    for (int i = 0; i < T * K; i++) x[i] = tiny(i >= K); /* row 0 all tiny */
    assert_true(n_sub > 100); /* the case is there */
    kern_pack(W, KT_BF16, N, K, P, 0, (N + 7) / 8);
    spec_acts(KT_BF16, x, a, T * K);
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    core_pool *pool = core_pool_new(2);
    const kern_tier best = kern_best_tier();
    int n_flushed = 0;
    for (int tier = KERN_TIER_REF; tier <= (int)best; tier++) {
        assert_true(kern_set_tier((kern_tier)tier));
        for (int TT = 1; TT <= T; TT += T - 1) {
            kern_matmul_packed(pool, scratch, P, KT_BF16, x, y, TT, N, K);
            for (int tt = 0; tt < TT; tt++)
                for (int64_t n = 0; n < N; n++) {
                    const float want = spec_dot(KT_BF16, W + n * K, a + tt * K, K),
                                nf = noflush_dot(W + n * K, a + tt * K, K);
                    n_flushed += memcmp(&want, &nf, 4) != 0;
                    if (memcmp(&want, &y[tt * N + n], 4))
                        fail_msg("BF16 tier %s T=%d [%d][%d]: %a, spec %a", kern_tier_name((kern_tier)tier), TT, tt,
                                 (int)n, y[tt * N + n], want);
                }
        }
    }
    kern_set_tier(best);
#if defined(__x86_64__)
    /* the 512-bit vdpbf16ps tile's logic, emulated, on any AVX2 CPU (its
     * flushes by FTZ / DAZ): every row at once, BF16 activations */
    if (best >= KERN_TIER_AVX2) {
        const int G = (int)((N + 7) / 8); /* the tile writes whole groups: rows of G * 8 */
        uint16_t *a16 = malloc(sizeof(uint16_t) * T * K);
        float *yt = malloc(sizeof(float) * T * (size_t)G * 8);
        kern_type_get(KT_BF16)->from_float_ref(x, a16, T * K);
        kern_pack_bf16_tile_avx512_emulated()(K, G, T, yt, (size_t)G * 8, P, a16, (size_t)K);
        for (int tt = 0; tt < T; tt++)
            for (int64_t n = 0; n < N; n++) {
                const float want = spec_dot(KT_BF16, W + n * K, a + tt * K, K), got = yt[(size_t)tt * G * 8 + n];
                if (memcmp(&want, &got, 4))
                    fail_msg("BF16 emulated avx512 tile [%d][%d]: %a, spec %a", tt, (int)n, got, want);
            }
        free(a16);
        free(yt);
    }
#endif
    print_message("BF16 outputs a flush decided: %d\n", n_flushed);
    assert_true(n_flushed > 20);
    core_pool_free(pool);
    free(W); free(P); free(row); free(x); free(a); free(y); free(scratch);
}

/* 4 */
static void test_packed_n(void **state) {
    (void)state;
    core_pool *pool = core_pool_new(2);
    const int64_t Ns[3] = {64, 21, 136}, K = 257;
    for (int ti = 0; ti < 2; ti++) {
        const int t = TYPES[ti];
        uint16_t *P[3];
        float *x = malloc(sizeof(float) * 9 * K), *y[3], *y1 = malloc(sizeof(float) * 9 * 136);
        for (int i = 0; i < 9 * K; i++) x[i] = frand() * 2.0f;
        kern_packed_out out[3];
        for (int i = 0; i < 3; i++) {
            uint16_t *W = make_weights(t, Ns[i], K);
            P[i] = malloc(kern_pack_bytes(t, Ns[i], K));
            kern_pack(W, t, Ns[i], K, P[i], 0, (Ns[i] + 7) / 8);
            free(W);
            y[i] = malloc(sizeof(float) * 9 * (size_t)Ns[i]);
            out[i] = (kern_packed_out){P[i], Ns[i], y[i]};
        }
        void *scratch = malloc(kern_matmul_scratch_bytes(9, K));
        for (int T = 1; T <= 9; T += 4)
            for (int threaded = 0; threaded < 2; threaded++) {
                kern_matmul_packed_n(threaded ? pool : NULL, scratch, t, out, 3, x, T, K);
                for (int i = 0; i < 3; i++) {
                    kern_matmul_packed(threaded ? pool : NULL, scratch, P[i], t, x, y1, T, Ns[i], K);
                    if (memcmp(y1, y[i], sizeof(float) * (size_t)T * (size_t)Ns[i]))
                        fail_msg("%s T=%d threads=%d: matrix %d in one call != its own call", kern_type_name(t), T,
                                 threaded + 1, i);
                }
            }
        for (int i = 0; i < 3; i++) { free(P[i]); free(y[i]); }
        free(x); free(y1); free(scratch);
    }
    core_pool_free(pool);
}

/* 5 */
static void test_bf16_bound(void **state) {
    (void)state;
    const int64_t N = 77, K = 2049;
    const int T = 5;
    uint16_t *W = make_weights(KT_BF16, N, K), *P = malloc(kern_pack_bytes(KT_BF16, N, K));
    kern_pack(W, KT_BF16, N, K, P, 0, (N + 7) / 8);
    float *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N);
    for (int i = 0; i < T * K; i++) x[i] = frand() * 4.0f;
    core_pool *pool = core_pool_new(2);
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    float *a = malloc(sizeof(float) * T * K);
    spec_acts(KT_BF16, x, a, T * K);
    kern_matmul_packed(pool, scratch, P, KT_BF16, x, y, T, N, K);
    for (int t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double dot = 0, sa = 0;
            for (int64_t k = 0; k < K; k++) {
                const double p = (double)kern_bf16_to_fp32(W[n * K + k]) * a[t * K + k];
                dot += p;
                sa += fabs(p);
            }
            const double bound = 1.01 * (double)K * ldexp(1.0, -24) * sa;
            if (fabs(y[t * N + n] - dot) > bound)
                fail_msg("BF16 [%d][%d]: %.9g vs exact %.9g (bound %.3g)", t, (int)n, y[t * N + n], dot, bound);
        }
    core_pool_free(pool);
    free(W); free(P); free(x); free(y); free(a); free(scratch);
}

/* 6 */
static void test_bf16_model(void **state) {
    (void)state;
    kvant_status st;
    const char *src = shared_path("models/stories260K.gguf");
    char bf[512], f32[512];
    snprintf(bf, sizeof bf, "%s", tmp_path("repack_f16_bf16.gguf"));
    snprintf(f32, sizeof f32, "%s", tmp_path("repack_f16_bf16_f32.gguf"));
    kvant_quantize_params qp = {.type = KVANT_FTYPE_BF16, .pure = true, .n_threads = 2, .quiet = true};
    if (kvant_quantize(src, bf, &qp, &st) != KVANT_OK) fail_msg("%s", st.msg);
    qp.type = KVANT_FTYPE_F32; /* BF16 -> F32 is exact */
    if (kvant_quantize(bf, f32, &qp, &st) != KVANT_OK) fail_msg("%s", st.msg);
    kvant_model_params mp = {.n_threads = 2};
    kvant_model *mb = kvant_model_open(bf, &mp, &st);
    if (!mb) fail_msg("%s", st.msg);
    kvant_model *mf = kvant_model_open(f32, &mp, &st);
    if (!mf) fail_msg("%s", st.msg);
    kvant_model_params mpu = {.n_threads = 2, .no_repack = 1};
    kvant_model *mu = kvant_model_open(bf, &mpu, &st);
    if (!mu) fail_msg("%s", st.msg);
    kvant_model_info in;
    kvant_model_get_info(mb, &in);
    const size_t V = (size_t)in.vocab_size;
    enum { NT = 24 };
    int32_t toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = i == 0 ? 1 : (int32_t)(3 + (i * 37) % (in.vocab_size - 3));
    float *lb = malloc(sizeof(float) * V * NT), *lf = malloc(sizeof(float) * V * NT),
          *lu = malloc(sizeof(float) * V * NT), *l1 = malloc(sizeof(float) * V);
    kvant_seq_params sp = kvant_seq_default();
    sp.n_ctx = NT;
    sp.kv_type = KVANT_KV_F32;
    kvant_seq *sb = kvant_seq_new_ex(mb, &sp, &st), *sf = kvant_seq_new_ex(mf, &sp, &st),
              *s1 = kvant_seq_new_ex(mb, &sp, &st), *su = kvant_seq_new_ex(mu, &sp, &st);
    assert_non_null(su);
    assert_non_null(sb);
    assert_non_null(sf);
    assert_non_null(s1);
    assert_int_equal(kvant_forward(sb, toks, NT, lb, true, &st), KVANT_OK);
    assert_int_equal(kvant_forward(sf, toks, NT, lf, true, &st), KVANT_OK);
    assert_int_equal(kvant_forward(su, toks, NT, lu, true, &st), KVANT_OK);
    float d = 0, du = 0, mx = 0;
    for (size_t i = 0; i < V * NT; i++) {
        d = fmaxf(d, fabsf(lb[i] - lf[i]));
        du = fmaxf(du, fabsf(lb[i] - lu[i]));
        mx = fmaxf(mx, fabsf(lf[i]));
    }
    if (!(du <= 1e-2f * mx)) fail_msg("BF16 packed vs unpacked: max |logit diff| %g (max |logit| %g)", du, mx);
    if (!(d <= 1e-2f * mx)) fail_msg("BF16 packed vs widened F32: max |logit diff| %g (max |logit| %g)", d, mx);
    /* decode one token at a time (the T = 1 tiles) against the batch: within the same bound */
    for (int i = 0; i < NT; i++) assert_int_equal(kvant_forward(s1, toks + i, 1, l1, false, &st), KVANT_OK);
    float d1 = 0;
    for (size_t v = 0; v < V; v++) d1 = fmaxf(d1, fabsf(l1[v] - lb[(NT - 1) * V + v]));
    if (!(d1 <= 1e-2f * mx)) fail_msg("BF16 decode vs prefill: max |logit diff| %g", d1);
    print_message("BF16 packed vs unpacked %g, vs widened F32 %g, decode vs prefill %g (max |logit| %g)\n", du, d, d1,
                  mx);
    kvant_seq_free(sb); kvant_seq_free(sf); kvant_seq_free(s1); kvant_seq_free(su);
    kvant_model_free(mb); kvant_model_free(mf); kvant_model_free(mu);
    free(lb); free(lf); free(lu); free(l1);
    remove(bf);
    remove(f32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_roundtrip),
        cmocka_unit_test(test_tiers_bit_identical),
        cmocka_unit_test(test_tile_shapes),
        cmocka_unit_test(test_bf16_denormals),
        cmocka_unit_test(test_packed_n),
        cmocka_unit_test(test_bf16_bound),
        cmocka_unit_test(test_bf16_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
