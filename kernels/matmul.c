/* matmul.c - y[T][N] = x[T][K] . W[N][K]^T for any computable weight type.
 *
 * Fast path: rows of W split across threads; each thread dequantizes
 * KERN_MM_ROWS rows at a time into its scratch (F32 rows are used in
 * place) and dots them with every input row, so the weights are read from
 * memory once per call for the whole batch. */
#include <stdlib.h>

#include "kernels/kernels.h"

typedef struct {
    float *scratch;
    const uint8_t *W;
    const kern_type_traits *tt;
    int wtype;
    const float *x;
    float *y;
    int T;
    int64_t N, K;
    size_t row_bytes;
} mm_job;

static void mm_task(void *ctx, int ith, int nth) {
    const mm_job *j = ctx;
    int64_t lo, hi;
    core_split(j->N, ith, nth, &lo, &hi);
    float *buf = j->scratch + (size_t)ith * KERN_MM_ROWS * (size_t)j->K;
    for (int64_t n0 = lo; n0 < hi; n0 += KERN_MM_ROWS) {
        const int64_t nr = hi - n0 < KERN_MM_ROWS ? hi - n0 : KERN_MM_ROWS;
        const float *rows;
        if (j->wtype == KT_F32) {
            rows = (const float *)(j->W + (size_t)n0 * j->row_bytes);
        } else {
            for (int64_t r = 0; r < nr; r++)
                j->tt->to_float(j->W + (size_t)(n0 + r) * j->row_bytes, buf + r * j->K, j->K);
            rows = buf;
        }
        for (int t = 0; t < j->T; t++) {
            const float *xt = j->x + (size_t)t * j->K;
            float *yt = j->y + (size_t)t * j->N + n0;
            for (int64_t r = 0; r < nr; r++) yt[r] = kern_dot_f32(rows + r * j->K, xt, j->K);
        }
    }
}

void kern_matmul(core_pool *pool, float *scratch, const void *W, int wtype,
                 const float *x, float *y, int T, int64_t N, int64_t K) {
    const kern_type_traits *tt = kern_type_get(wtype);
    CORE_ASSERT(tt && tt->to_float && K % tt->block_size == 0);
    mm_job j = {scratch, W, tt, wtype, x, y, T, N, K, kern_row_bytes(wtype, K)};
    /* below ~64K multiply-adds a thread hand-off costs more than it saves */
    if ((double)N * (double)K * T < KERN_MT_MIN_WORK) mm_task(&j, 0, 1);
    else core_pool_run(pool, mm_task, &j);
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
