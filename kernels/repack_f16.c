/* repack_f16.c - F16 and BF16 weights in groups of 8 rows (kernels/repack.h):
 * the packing, the reference tiles (the specs in plain C) and the driver.
 *
 * Layout (both types): group g, element k: the 8 rows' 16-bit values at
 * [k][r] (16 bytes), so one vcvtph2ps (F16) or one vpmovzxwd + vpslld (BF16)
 * gives element k of 8 rows; missing rows of the last group are zero.  The
 * packed matrix has the file's size.
 *
 * Arithmetic (specs; per output, one chain, so any tile shape, T, tier and
 * thread split give the same bits):
 *   F16:  activations are rounded to F16 (the F16 quantizer, the same bytes
 *         at every tier) and used as floats; w = the F16 weight as float;
 *   BF16: activations are the F32 inputs as they are (no rounding); w = the
 *         BF16 weight as float (bits << 16, exact);
 *   acc = 0; for k in order: acc = fmaf(w[n][k], a[t][k], acc); y = acc
 * BF16 does not use vdpbf16ps (AVX512_BF16): it would need the activations
 * rounded to BF16 (2^-9 relative error per element, 16x F16's) and its
 * pair products are summed with its own rounding (and denormals flushed),
 * which a plain-C spec could only emulate; the FMA chain keeps F32
 * activations exact and the same instruction at every tier.  The
 * conversion costs one shift more than F16's per 8 weights, paid once per
 * tile of C activation rows.
 * The tiles keep many chains in flight (8 or 16 lanes times groups times
 * activation rows) to hide the FMA latency; the shape is the tier's
 * (f16_shape), the arithmetic is not. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/repack.h"

static int64_t n_groups(int64_t N) { return (N + KERN_PACK_ROWS - 1) / KERN_PACK_ROWS; }

size_t kern_pack_f16_bytes(int64_t N, int64_t K) { return (size_t)n_groups(N) * KERN_PACK_ROWS * (size_t)K * 2; }

/* BF16 packs the same 16-bit values the same way */
void kern_pack_f16(const void *W, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; g++) {
        uint16_t *o = (uint16_t *)dst + (size_t)g * KERN_PACK_ROWS * (size_t)K;
        for (int r = 0; r < KERN_PACK_ROWS; r++) {
            const int64_t n = g * KERN_PACK_ROWS + r;
            const uint16_t *s = (const uint16_t *)W + (size_t)n * (size_t)K;
            for (int64_t k = 0; k < K; k++) o[(size_t)k * KERN_PACK_ROWS + (size_t)r] = n < N ? s[k] : 0;
        }
    }
}

void kern_unpack_f16_row(const void *P, int64_t K, int64_t n, void *row) {
    const uint16_t *o = (const uint16_t *)P + (size_t)(n / KERN_PACK_ROWS) * KERN_PACK_ROWS * (size_t)K;
    for (int64_t k = 0; k < K; k++) ((uint16_t *)row)[k] = o[(size_t)k * KERN_PACK_ROWS + (size_t)(n % KERN_PACK_ROWS)];
}

/* the specs: G groups against activation rows a[0..C) (floats, ba apart) */
static inline void tile_ref_t(bool bf, int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w,
                              const float *a, size_t ba) {
    for (int c = 0; c < C; c++)
        for (int gr = 0; gr < G * KERN_PACK_ROWS; gr++) {
            const uint16_t *wg = w + (size_t)(gr / KERN_PACK_ROWS) * KERN_PACK_ROWS * (size_t)K;
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) {
                const uint16_t h = wg[(size_t)k * KERN_PACK_ROWS + (size_t)(gr % KERN_PACK_ROWS)];
                acc = fmaf(bf ? kern_bf16_to_fp32(h) : kern_fp16_to_fp32(h), a[(size_t)c * ba + (size_t)k], acc);
            }
            y[(size_t)c * ldy + (size_t)gr] = acc;
        }
}
static void tile_ref_f16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const float *a, size_t ba) {
    tile_ref_t(false, K, G, C, y, ldy, w, a, ba);
}
static void tile_ref_bf16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const float *a,
                          size_t ba) {
    tile_ref_t(true, K, G, C, y, ldy, w, a, ba);
}

/* a tier's tiles and the shapes the driver gives them: dtile, gd groups per
 * decode (T = 1) tile; tile, gp groups x tc activation rows per prefill tile */
typedef struct {
    kern_pack_f16_tile_fn tile, dtile;
    int gd, gp, tc;
} f16_shape;

typedef struct {
    f16_shape s;
    const uint16_t *P;
    const float *a;             /* T rows of K floats (F16: F16-rounded) */
    float *y;
    int T;
    int64_t N, K;
    _Atomic int64_t next; /* the next unclaimed group (f16_task) */
} f16_job;

/* groups [g, g + G) against rows [t0, t0 + C) */
static void run_tile(const f16_job *j, int64_t g, int G, int t0, int C) {
    const uint16_t *w = j->P + (size_t)g * KERN_PACK_ROWS * (size_t)j->K;
    const float *a = j->a + (size_t)t0 * (size_t)j->K;
    const int64_t n0 = g * KERN_PACK_ROWS;
    float *y = j->y + (size_t)t0 * (size_t)j->N + (size_t)n0;
    const kern_pack_f16_tile_fn tile = j->T == 1 ? j->s.dtile : j->s.tile;
    if (n0 + (int64_t)G * KERN_PACK_ROWS <= j->N) {
        tile(j->K, G, C, y, (size_t)j->N, w, a, (size_t)j->K);
        return;
    }
    float tmp[KERN_PACK_F16_TC * KERN_PACK_ROWS]; /* the last, partial group (G = 1) */
    tile(j->K, 1, C, tmp, KERN_PACK_ROWS, w, a, (size_t)j->K);
    for (int c = 0; c < C; c++)
        for (int64_t n = n0; n < j->N; n++) y[(size_t)c * (size_t)j->N + (size_t)(n - n0)] = tmp[c * KERN_PACK_ROWS + (n - n0)];
}

static void f16_groups(const f16_job *j, int64_t lo, int64_t hi) {
    const int64_t full = hi < j->N / KERN_PACK_ROWS ? hi : j->N / KERN_PACK_ROWS; /* groups before it have 8 rows */
    /* decode: gd groups per tile; prefill: gp groups x tc rows, each set of
     * groups against every activation row while it sits in L2 */
    const int GB = j->T == 1 ? j->s.gd : j->s.gp, TC = j->s.tc;
    for (int64_t g = lo; g < full;) {
        const int G = full - g >= GB ? GB : (int)(full - g);
        for (int t0 = 0; t0 < j->T; t0 += TC) run_tile(j, g, G, t0, j->T - t0 < TC ? j->T - t0 : TC);
        g += G;
    }
    if (hi > full && full >= lo) /* the partial last group */
        for (int t0 = 0; t0 < j->T; t0 += TC) run_tile(j, full, 1, t0, j->T - t0 < TC ? j->T - t0 : TC);
}

/* groups in guided chunks (core_chunk_guided), multiples of 8 groups */
static void f16_task(void *ctx, int ith, int nth) {
    f16_job *j = ctx;
    const int64_t G = n_groups(j->N);
    (void)ith;
    for (int64_t lo, hi; core_chunk_guided(&j->next, G, nth, 8, 8, &lo, &hi);) f16_groups(j, lo, hi);
}

typedef struct {
    const float *x;
    float *a;
    size_t n; /* elements */
    bool ref;
} prep_job;

static void prep_task(void *ctx, int ith, int nth) {
    const prep_job *p = ctx;
    const kern_from_float_fn q = p->ref ? kern_type_get(KT_F16)->from_float_ref : kern_ops(KT_F16)->from_float;
    const kern_to_float_fn d = p->ref ? kern_type_get(KT_F16)->to_float : kern_ops(KT_F16)->to_float;
    int64_t lo, hi; /* in chunks of 256 elements */
    core_split((int64_t)((p->n + 255) / 256), ith, nth, &lo, &hi);
    uint16_t h[256];
    for (size_t i = (size_t)lo * 256; i < (size_t)hi * 256 && i < p->n; i += 256) {
        const int64_t m = p->n - i < 256 ? (int64_t)(p->n - i) : 256;
        q(p->x + i, h, m);
        d(h, p->a + i, m);
    }
}

/* x rounded to F16 and back, T rows of K floats, into a (threads split a prefill batch) */
static void prep_acts(core_pool *pool, const float *x, float *a, int T, int64_t K, bool ref) {
    prep_job p = {x, a, (size_t)T * (size_t)K, ref};
    if (pool && !ref && T >= 4) core_pool_run(pool, prep_task, &p);
    else prep_task(&p, 0, 1);
}

/* the active tier's tiles and shapes (ref: the spec).  The avx512 tier
 * decodes with the AVX2 tile: a zmm of 16 outputs needs two groups' halves
 * joined (vinserti128) for every 16 weights, which made decode slower on
 * the Zen 5 this was measured on (F16 over an L3-resident 2048 x 2048
 * matrix, one thread: 70 vs 96 GB/s of weights; BF16 about even, 70 vs 68;
 * from memory 24 vs 28 GB/s), while prefill (4 groups x 12 rows: the
 * conversion and inserts shared by 12 rows) ran ~1.9x the AVX2 tile's
 * 2 x 6 (T = 48: 108 vs 56 GMAC/s, both types).  Not where 512-bit
 * operations run as two halves (kern_zmm_halved: Zen 4, family 25 model
 * 17): there the 512-bit prefill tile lost to the AVX2 one (synthetic
 * tinyllama-1.1b F16 pp512, 2 threads: 86-89 vs 103-108 t/s; 6 or 8 rows
 * per block and 8 groups x 6 rows the same), so both tiers keep the AVX2
 * tiles. */
static f16_shape shape_of(bool bf, bool ref) {
    f16_shape s = {bf ? tile_ref_bf16 : tile_ref_f16, bf ? tile_ref_bf16 : tile_ref_f16, 8, 2, 6};
#if defined(__x86_64__) || defined(_M_X64)
    if (ref) return s;
    if (kern_active_tier() >= KERN_TIER_AVX2) {
        const kern_pack_f16_tile_fn t2 = bf ? kern_pack_bf16_tile_avx2() : kern_pack_f16_tile_avx2();
        s = (f16_shape){t2, t2, 8, 2, 6};
    }
    if (kern_active_tier() >= KERN_TIER_AVX512 && !kern_zmm_halved()) {
        s.tile = bf ? kern_pack_bf16_tile_avx512() : kern_pack_f16_tile_avx512();
        s.gp = 4;
        s.tc = 12;
    }
#else
    (void)ref;
#endif
    return s;
}

static void run(core_pool *pool, void *scratch, bool bf, const void *P, const float *x, float *y, int T, int64_t N,
                int64_t K, bool ref) {
    f16_job j = {.s = shape_of(bf, ref), .P = P, .a = bf ? x : scratch, .y = y, .T = T, .N = N, .K = K};
    atomic_init(&j.next, 0);
    if (!bf) prep_acts(pool, x, scratch, T, K, ref);
    if (pool && !ref && (double)N * (double)K * T >= KERN_MT_MIN_WORK) core_pool_run(pool, f16_task, &j);
    else f16_task(&j, 0, 1);
}

void kern_matmul_packed_f16(core_pool *pool, void *scratch, const void *P, const float *x, float *y, int T, int64_t N,
                            int64_t K) {
    run(pool, scratch, false, P, x, y, T, N, K, false);
}

void kern_matmul_packed_f16_ref(const void *P, const float *x, float *y, int T, int64_t N, int64_t K) {
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    CORE_ASSERT(scratch);
    run(NULL, scratch, false, P, x, y, T, N, K, true);
    free(scratch);
}

void kern_matmul_packed_bf16(core_pool *pool, const void *P, const float *x, float *y, int T, int64_t N, int64_t K) {
    run(pool, NULL, true, P, x, y, T, N, K, false);
}

void kern_matmul_packed_bf16_ref(const void *P, const float *x, float *y, int T, int64_t N, int64_t K) {
    run(NULL, NULL, true, P, x, y, T, N, K, true);
}
