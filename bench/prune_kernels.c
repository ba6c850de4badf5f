/* bench/prune_kernels.c - compute cost of the 2:4 sparse dot products vs
 * their dense peers, data in cache (so memory bandwidth does not count):
 * ns per dense weight for vec_dot and for the packed 8-row tiles at T = 1
 * (decode: what a model's matrices run, kernels/repack.h), and per weight
 * x column for the gemm tiles and the packed tiles at T = 4 (prefill), one
 * thread, the active kernel tier; then decode from memory, row-major and
 * packed, 2 threads.
 *   usage: kvant-prune-kernels [K=2048] [ROWS=64] [REPS=200] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "kernels/repack.h"
#include "kernels/sparse24.h"

static float frand(unsigned *s) { *s = *s * 1664525u + 1013904223u; return (float)(*s >> 8) / 16777216.0f - 0.5f; }

/* ns per dense weight (x column for T = 4) of kern_matmul_packed, one thread, in cache */
static double run_packed(int type, int64_t K, int rows, int reps, int T) {
    const kern_type_traits *tt = kern_type_get(type);
    const size_t rb = kern_row_bytes(type, K);
    float *f = malloc(sizeof(float) * K), *x = malloc(sizeof(float) * K * T), *y = malloc(sizeof(float) * rows * T);
    uint8_t *w = malloc(rb * rows), *P = malloc(kern_pack_bytes(type, rows, K));
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    unsigned s = 3;
    for (int r = 0; r < rows; r++) {
        for (int64_t k = 0; k < K; k++) f[k] = (k % 4 < 2 || type < 1000) ? frand(&s) : 0.0f;
        tt->from_float_ref(f, w + r * rb, K);
    }
    for (int64_t i = 0; i < K * T; i++) x[i] = frand(&s);
    kern_pack(w, type, rows, K, P, 0, (rows + KERN_PACK_ROWS - 1) / KERN_PACK_ROWS);
    float sink = 0;
    double best = 1e30;
    for (int t = 0; t < 5; t++) {
        const double t0 = core_time_ms();
        for (int i = 0; i < reps; i++) {
            kern_matmul_packed(NULL, scratch, P, type, x, y, T, rows, K);
            sink += y[0];
        }
        const double ms = core_time_ms() - t0;
        if (ms < best) best = ms;
    }
    if (sink == 12345.0f) printf(" ");
    free(f); free(x); free(y); free(w); free(P); free(scratch);
    return best * 1e6 / ((double)reps * rows * K * T);
}

static double run(int type, int64_t K, int rows, int reps, bool gemm) {
    const kern_type_traits *tt = kern_type_get(type);
    const kern_type_ops *o = kern_ops(type), *ao = kern_ops(tt->vec_dot_type);
    const size_t rb = kern_row_bytes(type, K), ab = kern_row_bytes(tt->vec_dot_type, K);
    float *f = malloc(sizeof(float) * K);
    uint8_t *w = malloc(rb * rows), *a = malloc(ab * 4);
    unsigned s = 1;
    for (int r = 0; r < rows; r++) {
        for (int64_t k = 0; k < K; k++) f[k] = (k % 4 < 2 || type < 1000) ? frand(&s) : 0.0f;
        tt->from_float_ref(f, w + r * rb, K);
    }
    for (int c = 0; c < 4; c++) {
        for (int64_t k = 0; k < K; k++) f[k] = frand(&s);
        if (tt->vec_dot_type == KT_F32) memcpy(a + c * ab, f, ab);
        else ao->from_float(f, a + c * ab, K);
    }
    float y[16], sink = 0;
    double best = 1e30;
    for (int t = 0; t < 5; t++) {
        const double t0 = core_time_ms();
        for (int i = 0; i < reps; i++)
            for (int r = 0; r < rows; r += 4) {
                if (gemm && o->gemm) o->gemm(K, 4, 4, y, 4, w + r * rb, rb, a, ab);
                else if (gemm) for (int rr = 0; rr < 4; rr++) for (int c = 0; c < 4; c++) o->vec_dot(K, &y[c * 4 + rr], w + (r + rr) * rb, a + c * ab);
                else for (int rr = 0; rr < 4; rr++) o->vec_dot(K, &y[rr], w + (r + rr) * rb, a);
                sink += y[0];
            }
        const double ms = core_time_ms() - t0;
        if (ms < best) best = ms;
    }
    free(f); free(w); free(a);
    if (sink == 12345.0f) printf(" ");
    return best * 1e6 / ((double)reps * rows * K * (gemm ? 4 : 1));
}

/* decode from memory: kern_matmul with T = 1 over N x K weights (about 256 MiB of
 * dense F16, so nothing stays in cache), 2 threads; ms per call and the
 * weight bytes it streams per second */
static void stream(int type, int64_t N, int64_t K, core_pool *pool, bool packed) {
    const kern_type_traits *tt = kern_type_get(type);
    const size_t rb = kern_row_bytes(type, K);
    uint8_t *w = malloc(rb * N), *P = packed ? malloc(kern_pack_bytes(type, N, K)) : NULL;
    float *f = malloc(sizeof(float) * K), *x = malloc(sizeof(float) * K), *y = malloc(sizeof(float) * N);
    void *scratch = malloc(kern_matmul_scratch_bytes(1, K));
    unsigned s = 7;
    for (int64_t k = 0; k < K; k++) x[k] = frand(&s);
    for (int64_t r = 0; r < N; r++) {
        for (int64_t k = 0; k < K; k++) f[k] = (k % 4 < 2 || type < 1000) ? frand(&s) : 0.0f;
        tt->from_float_ref(f, w + r * rb, K);
    }
    if (P) kern_pack(w, type, N, K, P, 0, (N + KERN_PACK_ROWS - 1) / KERN_PACK_ROWS);
    double best = 1e30;
    for (int t = 0; t < 8; t++) {
        const double t0 = core_time_ms();
        if (P) kern_matmul_packed(pool, scratch, P, type, x, y, 1, N, K);
        else kern_matmul(pool, scratch, w, type, x, y, 1, N, K);
        const double ms = core_time_ms() - t0;
        if (ms < best) best = ms;
    }
    printf("%-8s %s T=1 %lld x %lld: %.2f ms, %.1f GB/s of weights\n", tt->name, P ? "packed" : "matmul", (long long)N,
           (long long)K, best, rb * (double)N / best / 1e6);
    free(w); free(P); free(f); free(x); free(y); free(scratch);
}

int main(int argc, char **argv) {
    const int64_t K = argc > 1 ? atoll(argv[1]) : 2048;
    const int rows = argc > 2 ? atoi(argv[2]) : 64, reps = argc > 3 ? atoi(argv[3]) : 200;
    if (argc > 4 || K < 64 || K % 64 != 0 || rows < 1 || reps < 1) { /* --help, a word, or a K no 2:4 row has */
        fprintf(stderr, "usage: kvant-prune-kernels [K=2048, a multiple of 64] [ROWS=64] [REPS=200]\n");
        return argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? 0 : 2;
    }
    printf("tier %s, K %lld, %d rows, one thread; ns per dense weight (gemm: per weight x column)\n",
           kern_tier_name(kern_active_tier()), (long long)K, rows);
    const int pairs[][2] = {{KT_F16, KT_S24_F16}, {KT_Q8_0, KT_S24_Q8}};
    for (int p = 0; p < 2; p++) {
        double dv = run(pairs[p][0], K, rows, reps, false), sv = run(pairs[p][1], K, rows, reps, false);
        double dg = run(pairs[p][0], K, rows, reps, true), sg = run(pairs[p][1], K, rows, reps, true);
        printf("%-8s vec_dot %.4f  gemm 4x4 %.4f\n", kern_type_name(pairs[p][0]), dv, dg);
        printf("%-8s vec_dot %.4f  gemm 4x4 %.4f   (sparse/dense: vec_dot %.2f, gemm %.2f)\n",
               kern_type_name(pairs[p][1]), sv, sg, sv / dv, sg / dg);
    }
    for (int p = 0; p < 2; p++) /* the packed tiles, where the sparse type has one */
        if (kern_pack_supported(pairs[p][1])) {
            const double d1 = run_packed(pairs[p][0], K, rows, reps, 1), s1 = run_packed(pairs[p][1], K, rows, reps, 1);
            const double d4 = run_packed(pairs[p][0], K, rows, reps, 4), s4 = run_packed(pairs[p][1], K, rows, reps, 4);
            printf("%-8s packed T=1 %.4f  T=4 %.4f\n", kern_type_name(pairs[p][0]), d1, d4);
            printf("%-8s packed T=1 %.4f  T=4 %.4f   (sparse/dense: T=1 %.2f, T=4 %.2f)\n", kern_type_name(pairs[p][1]),
                   s1, s4, s1 / d1, s4 / d4);
        }
    core_pool *pool = core_pool_new(2);
    const int types[] = {KT_F16, KT_S24_F16, KT_Q8_0, KT_S24_Q8};
    for (int i = 0; i < 4; i++) {
        stream(types[i], 65536, 2048, pool, false);
        if (kern_pack_supported(types[i])) stream(types[i], 65536, 2048, pool, true);
    }
    core_pool_free(pool);
    return 0;
}
