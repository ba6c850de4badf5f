/* repack.c - packing into groups of 8 rows, the reference tile (the spec
 * of kernels/repack.h in plain C) and the threaded driver. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quants.h"
#include "kernels/repack.h"

#if defined(__x86_64__) || defined(_M_X64)
#define PACK_X86 1
#else
#define PACK_X86 0
#endif

bool kern_pack_supported(int wtype) { return wtype == KT_Q8_0 || wtype == KT_Q4_0; }

/* bytes of one packed block of 8 rows, and of a source block */
static size_t xblock_bytes(int wtype) { return KERN_PACK_ROWS * kern_type_get(wtype)->type_size; }
static int64_t n_groups(int64_t N) { return (N + KERN_PACK_ROWS - 1) / KERN_PACK_ROWS; }

size_t kern_pack_bytes(int wtype, int64_t N, int64_t K) {
    CORE_ASSERT(kern_pack_supported(wtype) && K % 32 == 0);
    return (size_t)n_groups(N) * (size_t)(K / 32) * xblock_bytes(wtype);
}

/* qs bytes of a source block and the chunk width the packed block interleaves */
static size_t qs_bytes(int wtype) { return wtype == KT_Q8_0 ? 32 : 16; }

void kern_pack(const void *W, int wtype, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1) {
    const int64_t nb = K / 32;
    const size_t sb = kern_type_get(wtype)->type_size, xb = xblock_bytes(wtype), nq = qs_bytes(wtype);
    const size_t row = (size_t)nb * sb;
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *o = (uint8_t *)dst + (size_t)g * (size_t)nb * xb;
        for (int64_t b = 0; b < nb; b++, o += xb) {
            memset(o, 0, xb);
            for (int r = 0; r < KERN_PACK_ROWS; r++) {
                const int64_t n = g * KERN_PACK_ROWS + r;
                if (n >= N) break; /* missing rows of the last group: d = 0, q = 0 */
                const uint8_t *s = (const uint8_t *)W + (size_t)n * row + (size_t)b * sb;
                memcpy(o + 2 * r, s, 2); /* d */
                for (size_t j = 0; j < nq / 4; j++) memcpy(o + 16 + 32 * j + 4 * (size_t)r, s + 2 + 4 * j, 4);
            }
        }
    }
}

void kern_unpack_row(const void *P, int wtype, int64_t N, int64_t K, int64_t n, void *rowp) {
    CORE_ASSERT(n >= 0 && n < N);
    const int64_t nb = K / 32, g = n / KERN_PACK_ROWS;
    const int r = (int)(n % KERN_PACK_ROWS);
    const size_t sb = kern_type_get(wtype)->type_size, xb = xblock_bytes(wtype), nq = qs_bytes(wtype);
    const uint8_t *o = (const uint8_t *)P + (size_t)g * (size_t)nb * xb;
    for (int64_t b = 0; b < nb; b++, o += xb) {
        uint8_t *s = (uint8_t *)rowp + (size_t)b * sb;
        memcpy(s, o + 2 * r, 2);
        for (size_t j = 0; j < nq / 4; j++) memcpy(s + 2 + 4 * j, o + 16 + 32 * j + 4 * (size_t)r, 4);
    }
}

/* ---- the reference tile: the spec, one output at a time ---------------------- */
/* weight value q (as stored minus the offset) of row r, element i of packed block w */
static int wq(int wtype, const uint8_t *w, int r, int i) {
    if (wtype == KT_Q8_0) return (int8_t)w[16 + 32 * (i / 4) + 4 * r + i % 4];
    const int hi = i >= 16, e = i % 16; /* element e (low nibble) or 16 + e (high) of byte e */
    const uint8_t byte = w[16 + 32 * (e / 4) + 4 * r + e % 4];
    return (hi ? byte >> 4 : byte & 15) - 8;
}

static void tile_ref(int wtype, int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a,
                     size_t ba, const float *ad, size_t bn) {
    const size_t xb = xblock_bytes(wtype);
    for (int c = 0; c < C; c++)
        for (int r = 0; r < KERN_PACK_ROWS; r++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *wb = w + (size_t)b * xb;
                const block_q8_0 *ab = (const block_q8_0 *)(a + (size_t)c * ba) + b;
                int32_t isum = 0;
                for (int i = 0; i < 32; i++) isum += wq(wtype, wb, r, i) * ab->qs[i];
                kern_half dw;
                memcpy(&dw, wb + 2 * r, 2);
                acc = fmaf((float)isum, kern_fp16_to_fp32(dw) * ad[(size_t)c * bn + (size_t)b], acc);
            }
            y[(size_t)c * ldy + (size_t)r] = acc;
        }
}

/* ---- driver -------------------------------------------------------------------------- */
typedef struct {
    int wtype;
    kern_pack_tile_fn tile; /* NULL: tile_ref */
    const uint8_t *P;
    const uint8_t *a;       /* T Q8_0 rows */
    const float *ad;        /* T x nb scales */
    const int32_t *as;      /* T x nb sums of q */
    float *y;
    int T;
    int64_t N, nb;
} pack_job;

/* one group against activation rows t0 .. t0+C-1 */
static void group_tile(const pack_job *j, int64_t g, int t0, int C, float *y, size_t ldy) {
    const size_t ba = (size_t)j->nb * sizeof(block_q8_0), bn = (size_t)j->nb;
    const uint8_t *w = j->P + (size_t)g * (size_t)j->nb * xblock_bytes(j->wtype);
    const uint8_t *a = j->a + (size_t)t0 * ba;
    const float *ad = j->ad + (size_t)t0 * bn;
    if (j->tile) j->tile(j->nb, C, y, ldy, w, a, ba, ad, j->as + (size_t)t0 * bn, bn);
    else tile_ref(j->wtype, j->nb, C, y, ldy, w, a, ba, ad, bn);
}

static void pack_task(void *ctx, int ith, int nth) {
    const pack_job *j = ctx;
    int64_t lo, hi;
    core_split(n_groups(j->N), ith, nth, &lo, &hi);
    for (int64_t g = lo; g < hi; g++) {
        const bool full = (g + 1) * KERN_PACK_ROWS <= j->N;
        for (int t0 = 0; t0 < j->T; t0 += 4) {
            const int C = j->T - t0 < 4 ? j->T - t0 : 4;
            if (full) {
                group_tile(j, g, t0, C, j->y + (size_t)t0 * (size_t)j->N + (size_t)g * KERN_PACK_ROWS, (size_t)j->N);
                continue;
            }
            float tmp[4 * KERN_PACK_ROWS];
            group_tile(j, g, t0, C, tmp, KERN_PACK_ROWS);
            for (int c = 0; c < C; c++)
                for (int64_t n = g * KERN_PACK_ROWS; n < j->N; n++)
                    j->y[(size_t)(t0 + c) * (size_t)j->N + (size_t)n] = tmp[c * KERN_PACK_ROWS + (n % KERN_PACK_ROWS)];
        }
    }
}

/* Q8_0 activations and their per-block scales and sums: scratch holds the
 * T rows, then T*nb floats, then T*nb int32 (<= 1.32 K bytes per row) */
static void prep_acts(const kern_from_float_fn quant, const float *x, void *scratch, int T, int64_t K, pack_job *j) {
    const int64_t nb = K / 32;
    uint8_t *a = scratch;
    float *ad = (float *)(a + (size_t)T * (size_t)nb * sizeof(block_q8_0));
    int32_t *as = (int32_t *)(ad + (size_t)T * (size_t)nb);
    for (int t = 0; t < T; t++) {
        block_q8_0 *row = (block_q8_0 *)(a + (size_t)t * (size_t)nb * sizeof(block_q8_0));
        quant(x + (size_t)t * (size_t)K, row, K);
        for (int64_t b = 0; b < nb; b++) {
            int32_t s = 0;
            for (int i = 0; i < 32; i++) s += row[b].qs[i];
            ad[(size_t)t * (size_t)nb + (size_t)b] = kern_fp16_to_fp32(row[b].d);
            as[(size_t)t * (size_t)nb + (size_t)b] = s;
        }
    }
    j->a = a;
    j->ad = ad;
    j->as = as;
}

static void run(core_pool *pool, void *scratch, const void *P, int wtype, const float *x, float *y, int T, int64_t N,
                int64_t K, bool ref) {
    CORE_ASSERT(kern_pack_supported(wtype) && K % 32 == 0 && T >= 1);
    CORE_ASSERT((size_t)T * (size_t)(K / 32) * (sizeof(block_q8_0) + 8) <= kern_matmul_scratch_bytes(T, K));
    pack_job j = {.wtype = wtype, .P = P, .y = y, .T = T, .N = N, .nb = K / 32};
#if PACK_X86
    if (!ref && kern_active_tier() >= KERN_TIER_AVX2) j.tile = kern_pack_tile_avx2(wtype);
#endif
    /* the Q8_0 quantizer gives the same bytes at every tier (kernels/types.h) */
    prep_acts(ref ? kern_type_get(KT_Q8_0)->from_float_ref : kern_ops(KT_Q8_0)->from_float, x, scratch, T, K, &j);
    if (pool && !ref && (double)N * (double)K * T >= KERN_MT_MIN_WORK) core_pool_run(pool, pack_task, &j);
    else pack_task(&j, 0, 1);
}

void kern_matmul_packed(core_pool *pool, void *scratch, const void *P, int wtype, const float *x, float *y, int T,
                        int64_t N, int64_t K) {
    run(pool, scratch, P, wtype, x, y, T, N, K, false);
}

void kern_matmul_packed_ref(const void *P, int wtype, const float *x, float *y, int T, int64_t N, int64_t K) {
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    CORE_ASSERT(scratch);
    run(NULL, scratch, P, wtype, x, y, T, N, K, true);
    free(scratch);
}
