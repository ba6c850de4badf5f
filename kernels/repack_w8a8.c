/* repack_w8a8.c - the stored W8A8 type (kernels/w8a8.h) in the packed 8-row
 * layout, the spec of its tile in plain C, and its threaded driver.
 *
 * Packed layout, per group of 8 rows (rows past N are zero):
 *   @0  s[8]  F32, row r's scale
 *   @32 q[ceil(K/4) j][8 r][4]  int8: row r's weights 4j .. 4j+3 (0 past K)
 * so one 32-byte load holds 4 inputs of the 8 rows, and the 4 matching
 * activation bytes, broadcast, feed all 8 (kernels/repack.h's idea; there
 * are no blocks: one int32 per row and token over the whole row).
 *
 * Arithmetic: kernels/w8a8.h's spec, unchanged: per token the activation
 * row is quantized by kern_i8_quant_rows (one scale s_x), acc = the exact
 * int32 dot, y = (float)acc * (s_x * s).  Every tier's tile gives the same
 * int32 (exact) and the same one float expression, so every output is
 * bit-identical to kern_w8a8_vec_dot_ref and to kern_i8_gemm_ref, and does
 * not depend on T, the threads or what it was batched with. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/int8.h"
#include "kernels/kernels.h"
#include "kernels/repack.h"
#include "kernels/w8a8.h"

#if defined(__x86_64__) || defined(_M_X64)
#define W8_X86 1
#else
#define W8_X86 0
#endif

static int64_t n_chunks(int64_t K) { return (K + 3) / 4; }
static size_t group_bytes(int64_t K) { return 32 + 32 * (size_t)n_chunks(K); }

bool kern_pack_w8a8_fits(int64_t K) { return K > 0 && K <= KERN_W8A8_MAX_K; }

size_t kern_pack_w8a8_bytes(int64_t N, int64_t K) {
    return (size_t)((N + KERN_PACK_ROWS - 1) / KERN_PACK_ROWS) * group_bytes(K);
}

void kern_pack_w8a8(const void *W, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1) {
    const size_t rb = kern_w8a8_row_bytes(K);
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *o = (uint8_t *)dst + (size_t)g * group_bytes(K);
        memset(o, 0, group_bytes(K));
        for (int r = 0; r < KERN_PACK_ROWS; r++) {
            const int64_t n = g * KERN_PACK_ROWS + r;
            if (n >= N) break;
            const uint8_t *src = (const uint8_t *)W + (size_t)n * rb;
            memcpy(o + 4 * r, src, 4);
            for (int64_t k = 0; k < K; k++) o[32 + 32 * (size_t)(k / 4) + 4 * (size_t)r + (size_t)(k % 4)] = src[4 + k];
        }
    }
}

void kern_unpack_w8a8_row(const void *P, int64_t K, int64_t n, void *row) {
    const uint8_t *o = (const uint8_t *)P + (size_t)(n / KERN_PACK_ROWS) * group_bytes(K);
    const size_t r = (size_t)(n % KERN_PACK_ROWS);
    uint8_t *d = row;
    memcpy(d, o + 4 * r, 4);
    for (int64_t k = 0; k < K; k++) d[4 + k] = o[32 + 32 * (size_t)(k / 4) + 4 * r + (size_t)(k % 4)];
}

/* the spec, one output at a time */
static void tile_ref(int64_t nc, int C, float *y, size_t ldy, const uint8_t *w, const int8_t *x, size_t ldx,
                     const float *sx) {
    for (int c = 0; c < C; c++)
        for (int r = 0; r < KERN_PACK_ROWS; r++) {
            int32_t acc = 0;
            for (int64_t j = 0; j < nc; j++)
                for (int i = 0; i < 4; i++)
                    acc += (int32_t)(int8_t)w[32 + 32 * (size_t)j + 4 * (size_t)r + (size_t)i] *
                           x[(size_t)c * ldx + 4 * (size_t)j + (size_t)i];
            float sw;
            memcpy(&sw, w + 4 * r, 4);
            y[(size_t)c * ldy + (size_t)r] = (float)acc * (sx[c] * sw);
        }
}

/* ---- driver ------------------------------------------------------------------------ */
typedef struct {
    kern_pack_w8a8_tile_fn tile;
    const kern_packed_out *out;
    int n_out, T;
    int64_t K, nc;
    const int8_t *xq; /* T rows of 4 nc bytes */
    const float *sx;  /* T scales */
    const float *x;   /* the float activations (outliers) */
    const kern_outliers *outl;
    int64_t g_end[KERN_PACK_MAX_OUT];
    _Atomic int64_t next;
} w8_job;

/* the spec's outlier terms for rows [n0, n1) and tokens [t0, t0 + C) */
static void add_outliers(const w8_job *j, const kern_packed_out *o, int64_t n0, int64_t n1, int t0, int C) {
    const kern_outliers *q = j->outl;
    for (int c = 0; c < C; c++) {
        const float *xt = j->x + (size_t)(t0 + c) * (size_t)j->K;
        float *yt = o->y + (size_t)(t0 + c) * (size_t)o->N;
        for (int64_t n = n0; n < n1; n++) {
            float v = yt[n];
            for (int i = 0; i < q->n; i++) v = fmaf(xt[q->cols[i]], kern_fp16_to_fp32(q->w[(size_t)n * (size_t)q->n + (size_t)i]), v);
            yt[n] = v;
        }
    }
}

static void groups(const w8_job *j, const kern_packed_out *o, int64_t lo, int64_t hi) {
    const size_t ldx = 4 * (size_t)j->nc;
    for (int64_t g = lo; g < hi; g++) {
        const uint8_t *w = (const uint8_t *)o->P + (size_t)g * group_bytes(j->K);
        const bool full = (g + 1) * KERN_PACK_ROWS <= o->N;
        for (int t0 = 0; t0 < j->T; t0 += 4) {
            const int C = j->T - t0 < 4 ? j->T - t0 : 4;
            const int8_t *x = j->xq + (size_t)t0 * ldx;
            if (full) j->tile(j->nc, C, o->y + (size_t)t0 * (size_t)o->N + (size_t)g * KERN_PACK_ROWS, (size_t)o->N, w, x,
                              ldx, j->sx + t0);
            else {
                float tmp[4 * KERN_PACK_ROWS];
                j->tile(j->nc, C, tmp, KERN_PACK_ROWS, w, x, ldx, j->sx + t0);
                for (int c = 0; c < C; c++)
                    for (int64_t n = g * KERN_PACK_ROWS; n < o->N; n++)
                        o->y[(size_t)(t0 + c) * (size_t)o->N + (size_t)n] = tmp[c * KERN_PACK_ROWS + (n % KERN_PACK_ROWS)];
            }
            if (j->outl && j->outl->n > 0)
                add_outliers(j, o, g * KERN_PACK_ROWS, full ? (g + 1) * KERN_PACK_ROWS : o->N, t0, C);
        }
    }
}

static void task(void *ctx, int ith, int nth) {
    w8_job *j = ctx;
    const int64_t G = j->g_end[j->n_out - 1];
    (void)ith;
    for (int64_t lo, hi; core_chunk_guided(&j->next, G, nth, 2, 1, &lo, &hi);)
        for (int i = 0; i < j->n_out && lo < hi; i++) {
            if (lo >= j->g_end[i]) continue;
            const int64_t g0 = i ? j->g_end[i - 1] : 0, e = hi < j->g_end[i] ? hi : j->g_end[i];
            groups(j, &j->out[i], lo - g0, e - g0);
            lo = e;
        }
}

static void run(core_pool *pool, void *scratch, const kern_packed_out *out, int n_out, const float *x, int T, int64_t K,
                kern_pack_w8a8_tile_fn tile, const kern_outliers *outl) {
    CORE_ASSERT(T >= 1 && n_out >= 1 && n_out <= KERN_PACK_MAX_OUT && kern_pack_w8a8_fits(K));
    CORE_ASSERT(!outl || outl->n == 0 || n_out == 1);
    w8_job j = {.tile = tile, .out = out, .n_out = n_out, .T = T, .K = K, .nc = n_chunks(K), .x = x, .outl = outl};
    const size_t ldx = 4 * (size_t)j.nc, xb = ((size_t)T * ldx + 63) & ~(size_t)63;
    const bool skip = outl && outl->n > 0;
    CORE_ASSERT(xb + sizeof(float) * (size_t)T + (skip ? (size_t)K : 0) <= kern_matmul_scratch_bytes(T, K));
    int8_t *xq = scratch;
    float *sx = (float *)((uint8_t *)scratch + xb);
    uint8_t *flags = skip ? (uint8_t *)(sx + T) : NULL;
    if (skip) {
        memset(flags, 0, (size_t)K);
        for (int i = 0; i < outl->n; i++) flags[outl->cols[i]] = 1;
    }
    kern_i8_quant_rows(x, T, K, (int64_t)ldx, xq, sx, flags);
    j.xq = xq;
    j.sx = sx;
    atomic_init(&j.next, 0);
    double work = 0;
    for (int i = 0; i < n_out; i++) {
        j.g_end[i] = (i ? j.g_end[i - 1] : 0) + (out[i].N + KERN_PACK_ROWS - 1) / KERN_PACK_ROWS;
        work += (double)out[i].N * (double)K * T;
    }
    if (pool && work >= KERN_MT_MIN_WORK) core_pool_run(pool, task, &j);
    else task(&j, 0, 1);
}

static kern_pack_w8a8_tile_fn best_tile(void) {
#if W8_X86
    if (kern_active_tier() >= KERN_TIER_AVX512) return kern_pack_w8a8_tile_avx512();
    if (kern_active_tier() >= KERN_TIER_AVX2) return kern_pack_w8a8_tile_avx2();
#endif
    return tile_ref;
}

void kern_matmul_packed_w8a8_n(core_pool *pool, void *scratch, const kern_packed_out *out, int n_out, const float *x,
                               int T, int64_t K, const kern_outliers *outl) {
    run(pool, scratch, out, n_out, x, T, K, best_tile(), outl);
}

void kern_matmul_packed_outl(core_pool *pool, void *scratch, const void *P, const float *x, float *y, int T, int64_t N,
                             int64_t K, const kern_outliers *o) {
    const kern_packed_out out = {P, N, y};
    run(pool, scratch, &out, 1, x, T, K, best_tile(), o);
}

void kern_matmul_packed_w8a8_tile(kern_pack_w8a8_tile_fn tile, const void *P, const float *x, float *y, int T,
                                  int64_t N, int64_t K, const kern_outliers *outl) {
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    CORE_ASSERT(scratch);
    const kern_packed_out o = {P, N, y};
    run(NULL, scratch, &o, 1, x, T, K, tile ? tile : tile_ref, outl);
    free(scratch);
}
