/* matmul.c - y[T][N] = x[T][K] . W[N][K]^T for any computable weight type.
 *
 * Fast path (llama.cpp's scheme): the T activation rows are quantized once
 * to the weight type's vec_dot_type (Q8_0, Q8_1, F16, ...), then threads
 * split the N weight rows; each thread walks its rows in blocks of
 * KERN_MM_ROWS and dots every block with all T activation rows, so each
 * weight byte is read from memory once per call whatever T is.
 * Reference: dequantize W to float and sum in k order (no activation
 * rounding); tests bound the difference by the activation rounding. */
#include <stdlib.h>

#include "kernels/kernels.h"

typedef struct {
    kern_vec_dot_fn vec_dot;
    kern_gemm_fn gemm;   /* NULL: vec_dot per (row, activation) pair */
    const uint8_t *W;
    size_t w_row;        /* bytes per weight row */
    const uint8_t *xa;   /* activation rows in vec_dot_type */
    size_t a_row;        /* bytes per activation row */
    float *y;
    int T;
    int64_t N, K;
} dot_job;

static void dot_task(void *ctx, int ith, int nth) {
    const dot_job *j = ctx;
    int64_t lo, hi;
    core_split(j->N, ith, nth, &lo, &hi);
    for (int64_t n0 = lo; n0 < hi; n0 += KERN_MM_ROWS) {
        const int64_t n1 = hi - n0 < KERN_MM_ROWS ? hi : n0 + KERN_MM_ROWS;
        /* prefill: register tiles of up to 4 x 4, each y bit-identical to vec_dot's.
         * Decode (T = 1) stays on vec_dot: one weight row streaming from memory at a
         * time is served better by the prefetchers than 4 (quantized: ~1.5x faster). */
        if (j->gemm && j->T > 1) {
            /* one tile of weight rows against every activation row in turn: the
             * rows stay in L1 (and a tile may keep them unpacked between calls) */
            for (int64_t n = n0; n < n1; n += KERN_GEMM_MAX) {
                const int nr = n1 - n < KERN_GEMM_MAX ? (int)(n1 - n) : KERN_GEMM_MAX;
                for (int t0 = 0; t0 < j->T; t0 += KERN_GEMM_MAX) {
                    const int nc = j->T - t0 < KERN_GEMM_MAX ? j->T - t0 : KERN_GEMM_MAX;
                    j->gemm(j->K, nr, nc, j->y + (size_t)t0 * j->N + n, (size_t)j->N, j->W + (size_t)n * j->w_row,
                            j->w_row, j->xa + (size_t)t0 * j->a_row, j->a_row);
                }
            }
            continue;
        }
        for (int t = 0; t < j->T; t++) {
            const uint8_t *xt = j->xa + (size_t)t * j->a_row;
            float *yt = j->y + (size_t)t * j->N;
            for (int64_t n = n0; n < n1; n++) j->vec_dot(j->K, &yt[n], j->W + (size_t)n * j->w_row, xt);
        }
    }
}

typedef struct {
    kern_from_float_fn quant;
    const float *x;
    uint8_t *xa;
    size_t a_row;
    int T;
    int64_t K;
} act_job;

static void act_task(void *ctx, int ith, int nth) {
    const act_job *j = ctx;
    int64_t lo, hi;
    core_split(j->T, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) j->quant(j->x + (size_t)t * j->K, j->xa + (size_t)t * j->a_row, j->K);
}

void kern_matmul(core_pool *pool, void *scratch, const void *W, int wtype,
                 const float *x, float *y, int T, int64_t N, int64_t K) {
    const kern_type_traits *tt = kern_type_get(wtype);
    CORE_ASSERT(tt && tt->vec_dot_ref && K % tt->block_size == 0);
    const int at = tt->vec_dot_type;
    const kern_type_ops *ops = kern_ops(wtype), *aops = kern_ops(at);
    /* below ~64K multiply-adds a thread hand-off costs more than it saves */
    const bool threaded = (double)N * (double)K * T >= KERN_MT_MIN_WORK;

    /* activations in the paired type (F32 weights use x as it is) */
    const uint8_t *xa = (const uint8_t *)x;
    const size_t a_row = kern_row_bytes(at, K);
    if (at != KT_F32) {
        act_job aj = {aops->from_float, x, scratch, a_row, T, K};
        if (threaded && T > 1) core_pool_run(pool, act_task, &aj);
        else act_task(&aj, 0, 1);
        xa = scratch;
    }
    dot_job j = {ops->vec_dot, ops->gemm, W, kern_row_bytes(wtype, K), xa, a_row, y, T, N, K};
    if (threaded) core_pool_run(pool, dot_task, &j);
    else dot_task(&j, 0, 1);
}

void kern_matmul_ref(const void *W, int wtype, const float *x, float *y, int T, int64_t N, int64_t K) {
    const kern_type_traits *tt = kern_type_get(wtype);
    CORE_ASSERT(tt && tt->to_float);
    const size_t rb = kern_row_bytes(wtype, K);
    float *row = malloc((size_t)K * sizeof *row);
    CORE_ASSERT(row);
    for (int64_t n = 0; n < N; n++) {
        tt->to_float((const uint8_t *)W + (size_t)n * rb, row, K);
        for (int t = 0; t < T; t++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) s += x[(size_t)t * K + k] * row[k];
            y[(size_t)t * N + n] = s;
        }
    }
    free(row);
}
