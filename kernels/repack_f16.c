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
 *         acc = 0; for k in order: acc = fmaf(w[n][k], a[t][k], acc); y = acc
 *   BF16: vdpbf16ps's arithmetic (AVX512_BF16, as Intel's manual gives it;
 *         bit-checked against the instruction on AMD Zen 4):
 *         activations are rounded to BF16 (the BF16 quantizer: nearest
 *         even, the same bytes at every tier); w = the BF16 weight; both
 *         with BF16 denormals read as zero (daz);
 *         acc = 0; for each pair (k, k + 1) in order, k even:
 *           acc = ftz(fmaf(w[n][k + 1], a[t][k + 1], acc))  (0 x 0 past K)
 *           acc = ftz(fmaf(w[n][k], a[t][k], acc))
 *         y = acc; ftz: a denormal result becomes a zero of its sign (the
 *         products of two BF16 values are exact in float, so each step is
 *         the instruction's add, rounded to nearest even).
 *         Where the CPU has AVX512_BF16 the prefill tile runs vdpbf16ps:
 *         two multiply-adds per lane per instruction, twice the FP32 FMA's
 *         rate (Zen 4, one thread: the tile at 98-103 GMAC/s in
 *         `kvant-kernels --types BF16`, the FMA peak 59); elsewhere the
 *         tiles run the same steps as FMAs with MXCSR's FTZ and DAZ set
 *         (tests/test_repack_f16.c holds both to this spec down to
 *         denormals).  The rounding of the activations is llama.cpp's (its
 *         BF16 matmul converts them to BF16 too) and the unpacked BF16
 *         dot's (kernels/vec_dot_avx512.c); it costs 2^-9 relative per
 *         activation, where the earlier spec's F32 activations were exact,
 *         and lifts a prefill that was FMA-bound at 0.71x llama.cpp to
 *         1.24-1.33x (bench/tier_speed.md).
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

/* BF16's flushes (the instruction's DAZ and FTZ) */
static inline float flush_denormal(float x) { return fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x; }

/* the specs: G groups against activation rows a[0..C) (floats, ba apart) */
static inline void tile_ref_t(bool bf, int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w,
                              const float *a, size_t ba) {
    for (int c = 0; c < C; c++)
        for (int gr = 0; gr < G * KERN_PACK_ROWS; gr++) {
            const uint16_t *wg = w + (size_t)(gr / KERN_PACK_ROWS) * KERN_PACK_ROWS * (size_t)K;
            const float *ac = a + (size_t)c * ba;
#define WK(k) wg[(size_t)(k) * KERN_PACK_ROWS + (size_t)(gr % KERN_PACK_ROWS)]
            float acc = 0.0f;
            if (!bf)
                for (int64_t k = 0; k < K; k++) acc = fmaf(kern_fp16_to_fp32(WK(k)), ac[k], acc);
            else
                for (int64_t k = 0; k < K; k += 2) {
                    const float w1 = k + 1 < K ? flush_denormal(kern_bf16_to_fp32(WK(k + 1))) : 0.0f,
                                a1 = k + 1 < K ? flush_denormal(ac[k + 1]) : 0.0f;
                    acc = flush_denormal(fmaf(w1, a1, acc));
                    acc = flush_denormal(fmaf(flush_denormal(kern_bf16_to_fp32(WK(k))), flush_denormal(ac[k]), acc));
                }
#undef WK
            y[(size_t)c * ldy + (size_t)gr] = acc;
        }
}
static void tile_ref_f16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const void *a, size_t ba) {
    tile_ref_t(false, K, G, C, y, ldy, w, a, ba);
}
static void tile_ref_bf16(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const void *a,
                          size_t ba) {
    tile_ref_t(true, K, G, C, y, ldy, w, a, ba);
}

/* a tier's tiles and the shapes the driver gives them: dtile, gd groups per
 * decode (T = 1) tile; tile, gp groups x tc activation rows per prefill tile */
typedef struct {
    kern_pack_f16_tile_fn tile, dtile;
    int gd, gp, tc;
    bool tile_acts16; /* tile takes the activations as BF16 values (dtile: floats) */
} f16_shape;

typedef struct {
    f16_shape s;
    const uint16_t *P;
    const void *a;              /* T rows of K activations, rounded: floats, or BF16 values for tile_acts16 */
    size_t as;                  /* bytes per activation in a (2 or 4) */
    float *y;
    int T;
    int64_t N, K;
    _Atomic int64_t next; /* the next unclaimed group (f16_task) */
} f16_job;

/* groups [g, g + G) against rows [t0, t0 + C) */
static void run_tile(const f16_job *j, int64_t g, int G, int t0, int C) {
    const uint16_t *w = j->P + (size_t)g * KERN_PACK_ROWS * (size_t)j->K;
    const void *a = (const char *)j->a + (size_t)t0 * (size_t)j->K * j->as;
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
    void *a;
    size_t n; /* elements */
    int type; /* KT_F16 or KT_BF16: the rounding */
    bool ref, out16; /* out16: keep the 16-bit values (else widened to floats) */
} prep_job;

static void prep_task(void *ctx, int ith, int nth) {
    const prep_job *p = ctx;
    const kern_from_float_fn q = p->ref ? kern_type_get(p->type)->from_float_ref : kern_ops(p->type)->from_float;
    const kern_to_float_fn d = p->ref ? kern_type_get(p->type)->to_float : kern_ops(p->type)->to_float;
    int64_t lo, hi; /* in chunks of 256 elements */
    core_split((int64_t)((p->n + 255) / 256), ith, nth, &lo, &hi);
    uint16_t h[256];
    for (size_t i = (size_t)lo * 256; i < (size_t)hi * 256 && i < p->n; i += 256) {
        const int64_t m = p->n - i < 256 ? (int64_t)(p->n - i) : 256;
        if (p->out16) {
            q(p->x + i, (uint16_t *)p->a + i, m);
            continue;
        }
        q(p->x + i, h, m);
        d(h, (float *)p->a + i, m);
    }
}

/* x rounded to F16 or BF16, T rows of K, into a (threads split a prefill batch) */
static void prep_acts(core_pool *pool, int type, const float *x, void *a, int T, int64_t K, bool ref, bool out16) {
    prep_job p = {x, a, (size_t)T * (size_t)K, type, ref, out16};
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
 * 2 x 6 (T = 48: 108 vs 56 GMAC/s, both types).  Both now prefill in 8
 * groups x 6 rows (half the broadcasts per FMA; kernels/repack_f16_avx512.c
 * prefill), except BF16 on Zen 4: on Zen 5 kvant-kernels' F16 prefill
 * (T = 64, K = 4096, one thread) 95 against 62 GMAC/s.  Not where 512-bit
 * operations run as two halves (kern_zmm_halved: Zen 4, family 25 model
 * 17): there the 512-bit F16 prefill tile lost to the AVX2 one (synthetic
 * tinyllama-1.1b F16 pp512, 2 threads: 86-89 vs 103-108 t/s; 6 or 8 rows
 * per block and 8 groups x 6 rows the same), so F16 keeps the AVX2 tile.
 * BF16 prefills on vdpbf16ps wherever the CPU has AVX512_BF16 (twice the
 * multiply-adds per instruction, Zen 4 included), else on the AVX2 tile. */
static f16_shape shape_of(bool bf, bool ref) {
    f16_shape s = {bf ? tile_ref_bf16 : tile_ref_f16, bf ? tile_ref_bf16 : tile_ref_f16, 8, 2, 6, false};
#if defined(__x86_64__) || defined(_M_X64)
    if (ref) return s;
    const kern_tier tier = kern_active_tier();
    if (tier >= KERN_TIER_AVX2) {
        const kern_pack_f16_tile_fn t2 = bf ? kern_pack_bf16_tile_avx2() : kern_pack_f16_tile_avx2();
        s = (f16_shape){t2, t2, 8, 2, 6, false};
    }
    if (tier < KERN_TIER_AVX512) return s;
    /* the 512-bit tiles' own blocks: 8 groups x 6 rows, BF16's 4 x 12 on Zen 4 */
    const bool halved = kern_zmm_halved();
    const kern_pack_f16_tile_fn t512 = bf ? kern_pack_bf16_tile_avx512() : halved ? NULL : kern_pack_f16_tile_avx512();
    if (t512) {
        s.tile = t512;
        s.gp = bf && halved ? 4 : 8;
        s.tc = bf && halved ? 12 : 6;
        s.tile_acts16 = bf;
    }
#else
    (void)ref;
#endif
    return s;
}

/* every output of out[0..n_out) against the same activations, rounded once */
static void run(core_pool *pool, void *scratch, bool bf, const kern_packed_out *out, int n_out, const float *x, int T,
                int64_t K, bool ref) {
    f16_job j = {.s = shape_of(bf, ref), .a = scratch, .T = T, .K = K};
    const bool acts16 = T > 1 && j.s.tile_acts16;
    j.as = acts16 ? sizeof(uint16_t) : sizeof(float);
    prep_acts(pool, bf ? KT_BF16 : KT_F16, x, scratch, T, K, ref, acts16);
    for (int i = 0; i < n_out; i++) {
        j.P = out[i].P, j.N = out[i].N, j.y = out[i].y;
        atomic_init(&j.next, 0);
        if (pool && !ref && (double)j.N * (double)K * T >= KERN_MT_MIN_WORK) core_pool_run(pool, f16_task, &j);
        else f16_task(&j, 0, 1);
    }
}

void kern_matmul_packed_f16_n(core_pool *pool, void *scratch, int wtype, const kern_packed_out *out, int n_out,
                              const float *x, int T, int64_t K) {
    run(pool, scratch, wtype == KT_BF16, out, n_out, x, T, K, false);
}

void kern_matmul_packed_f16_ref(const void *P, int wtype, const float *x, float *y, int T, int64_t N, int64_t K) {
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    CORE_ASSERT(scratch);
    const kern_packed_out o = {P, N, y};
    run(NULL, scratch, wtype == KT_BF16, &o, 1, x, T, K, true);
    free(scratch);
}
