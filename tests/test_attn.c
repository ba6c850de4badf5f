/* test_attn.c - attention over a KV view (kernels/attn.h): flash vs naive,
 * naive vs kern_attention_ref, rope_k, sink mass, never reading past n_pos.
 *
 * Tolerance 1e-5 relative, max |a - b| <= 1e-5 * max(1, |b|) per element:
 * both kernels compute the same softmax-weighted mean of V rows (|v| <= 1
 * here) from the same dequantized cache; they differ only in float rounding:
 * summation order over at most ~330 positions and D <= 128 products
 * (~sqrt(n) * 2^-24 relative, ~1e-6), the scores' scale folded into q, and
 * flash's exp2 polynomial (2e-7 relative per weight).  So F16 / Q8_0 caches
 * must agree as tightly as F32: quantization error is the same on both
 * sides.
 *
 * Every cache is laid out with its unused bytes (the slots from n_pos to the
 * end of the last block, the pool blocks no table maps, the gaps between
 * blocks) set to NaN, and block tables are allocated with exactly the
 * blocks in use: a read past n_pos makes the output NaN (or trips ASan).
 * Outputs start as NaN too, so an unwritten element fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/attn.h"
#include "kernels/kernels.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next_u64(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static float frand(void) { return (float)((next_u64() >> 40) / 8388608.0 - 1.0); } /* [-1, 1) */
static void fill(float *x, size_t n) { for (size_t i = 0; i < n; i++) x[i] = frand(); }
static void fill_nan(float *x, size_t n) { for (size_t i = 0; i < n; i++) x[i] = NAN; }

/* paged: row-major blocks ([bs][Hkv*D]); heads: head-major ([Hkv][bs][D]) */
enum { CONTIG, PAGED16, PAGED5, HEADS16, HEADS5, N_LAYOUTS };
static const char *layout_name[] = {"contiguous", "paged bs16", "paged bs5", "head-major bs16", "head-major bs5"};

/* head-major needs a head of whole blocks (Q8_0: D % 32 == 0); else its row-major twin */
static int valid_layout(int layout, int type, int D) {
    return layout >= HEADS16 && kern_row_bytes(type, D) == 0 ? layout - HEADS16 + PAGED16 : layout;
}

typedef struct {
    kern_kv_view v;
    uint8_t *k, *vv;
    int32_t *table;
    kern_rope_params rope;
} cache;

/* Writes K and V ([n_pos][Hkv*D] floats) into a cache of `type` in `layout`
 * (paged: blocks mapped to shuffled pool blocks, with unused blocks among
 * them; 64 NaN bytes between blocks).  rope: NULL, or K is pre-RoPE. */
static void cache_build(cache *c, int type, int layout, int Hkv, int D, int n_pos, const float *K, const float *V,
                        const kern_rope_params *rope) {
    memset(c, 0, sizeof *c);
    const int E = Hkv * D, bs = layout == PAGED5 || layout == HEADS5 ? 5 : 16;
    const size_t rb = kern_row_bytes(type, E), hb = layout >= HEADS16 ? kern_row_bytes(type, D) : 0;
    assert_true(rb > 0);
    assert_true(layout < HEADS16 || hb > 0);
    const int nblk = (n_pos + bs - 1) / bs, pool_blocks = layout == CONTIG ? nblk + 1 : 2 * nblk + 1;
    const size_t stride = (size_t)bs * rb + 64;
    c->k = malloc((size_t)pool_blocks * stride);
    c->vv = malloc((size_t)pool_blocks * stride);
    memset(c->k, 0xff, (size_t)pool_blocks * stride); /* all-ones: NaN as F32, F16 and a Q8_0 scale */
    memset(c->vv, 0xff, (size_t)pool_blocks * stride);
    if (layout != CONTIG) { /* a random injective map of nblk blocks into the pool */
        int *perm = malloc(sizeof(int) * pool_blocks);
        for (int i = 0; i < pool_blocks; i++) perm[i] = i;
        for (int i = pool_blocks - 1; i > 0; i--) {
            const int r = (int)(next_u64() % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[r]; perm[r] = t;
        }
        c->table = malloc(sizeof(int32_t) * (nblk > 0 ? nblk : 1));
        for (int i = 0; i < nblk; i++) c->table[i] = perm[i];
        free(perm);
    }
    const kern_type_traits *tt = kern_type_get(type);
    for (int p = 0; p < n_pos; p++) {
        const size_t b = c->table ? (size_t)c->table[p / bs] : (size_t)(p / bs);
        if (hb) /* head h's rows: bs * hb bytes per head */
            for (int h = 0; h < Hkv; h++) {
                const size_t off = b * stride + (size_t)h * bs * hb + (size_t)(p % bs) * hb;
                tt->from_float_ref(K + (size_t)p * E + (size_t)h * D, c->k + off, D);
                tt->from_float_ref(V + (size_t)p * E + (size_t)h * D, c->vv + off, D);
            }
        else {
            const size_t off = b * stride + (size_t)(p % bs) * rb;
            tt->from_float_ref(K + (size_t)p * E, c->k + off, E);
            tt->from_float_ref(V + (size_t)p * E, c->vv + off, E);
        }
    }
    if (rope) c->rope = *rope;
    c->v = (kern_kv_view){c->k, c->vv, stride, c->table, bs, type, hb ? hb : rb, n_pos, rope ? &c->rope : NULL,
                          (size_t)bs * hb};
}

static void cache_free(cache *c) { free(c->k); free(c->vv); free(c->table); }

/* max |a - b| <= tol * max(1, |b|), element-wise; b is the reference */
static void check_close(const float *a, const float *b, size_t n, float tol, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= tol * fmaxf(1.0f, fabsf(b[i]))))
            fail_msg("%s: [%zu] %.9g vs %.9g", what, i, a[i], b[i]);
}

static void run_naive(int threads, const float *q, const kern_kv_view *v, float *out, const kern_attn_dims *d,
                      float *sink, int n_sink) {
    core_pool *pool = core_pool_new(threads);
    void *scratch = malloc((size_t)threads * kern_attn_naive_scratch_bytes(d, v->n_pos));
    fill_nan(out, (size_t)d->T * d->H * d->D);
    kern_attn_naive(pool, scratch, q, v, out, d, sink, n_sink);
    free(scratch);
    core_pool_free(pool);
}

static void run_flash(int threads, const float *q, const kern_kv_view *v, float *out, const kern_attn_dims *d) {
    core_pool *pool = core_pool_new(threads);
    void *scratch = malloc((size_t)threads * kern_attn_flash_scratch_bytes(d));
    fill_nan(out, (size_t)d->T * d->H * d->D);
    kern_attn_flash(pool, scratch, q, v, out, d);
    free(scratch);
    core_pool_free(pool);
}

/* the tiers flash is checked at: the portable C loops, and the best this CPU has */
static int tiers(kern_tier *out) {
    out[0] = KERN_TIER_SCALAR;
    out[1] = kern_best_tier();
    return out[1] > KERN_TIER_SCALAR ? 2 : 1;
}

typedef struct {
    int T, q_pos0, H, Hkv, D, tile, type, layout, extra; /* extra: readable positions past q_pos0 + T */
    bool rope, neox;
} attn_case;

/* flash (each tier, 1 and 3 threads) == naive on the same cache */
static void check_case(const attn_case *k) {
    const int n_pos = k->q_pos0 + k->T + k->extra, E = k->Hkv * k->D;
    const size_t nq = (size_t)k->T * k->H * k->D;
    float *q = malloc(sizeof(float) * nq), *K = malloc(sizeof(float) * n_pos * E), *V = malloc(sizeof(float) * n_pos * E);
    float *ref = malloc(sizeof(float) * nq), *o = malloc(sizeof(float) * nq), *o3 = malloc(sizeof(float) * nq);
    fill(q, nq); fill(K, (size_t)n_pos * E); fill(V, (size_t)n_pos * E);
    const kern_rope_params rope = {k->D - (k->D >= 16 ? 8 : 0), 10000.0f, k->neox}; /* partial rotary when D >= 16 */
    cache c;
    cache_build(&c, k->type, k->layout, k->Hkv, k->D, n_pos, K, V, k->rope ? &rope : NULL);
    const kern_attn_dims d = {k->T, k->H, k->Hkv, k->D, k->q_pos0, k->tile};
    char what[256];
    snprintf(what, sizeof what, "T=%d q_pos0=%d H=%d Hkv=%d D=%d tile=%d %s %s rope=%d n_pos=%d", k->T, k->q_pos0, k->H,
             k->Hkv, k->D, k->tile, kern_type_name(k->type), layout_name[k->layout], k->rope, n_pos);
    run_naive(2, q, &c.v, ref, &d, NULL, 0);
    for (size_t i = 0; i < nq; i++)
        if (!isfinite(ref[i])) fail_msg("naive not finite: %s", what);
    kern_tier ts[2];
    const kern_tier saved = kern_active_tier();
    for (int i = 0, n = tiers(ts); i < n; i++) {
        assert_true(kern_set_tier(ts[i]));
        char w2[300];
        snprintf(w2, sizeof w2, "flash (%s) vs naive, %s", kern_tier_name(ts[i]), what);
        run_flash(1, q, &c.v, o, &d);
        check_close(o, ref, nq, 1e-5f, w2);
        run_flash(3, q, &c.v, o3, &d);
        if (memcmp(o, o3, sizeof(float) * nq)) fail_msg("flash 1 vs 3 threads differ: %s", w2);
    }
    kern_set_tier(saved);
    cache_free(&c);
    free(q); free(K); free(V); free(ref); free(o); free(o3);
}

static int valid_type(int type, int Hkv, int D) { return type != KT_Q8_0 || (Hkv * D) % 32 == 0 ? type : KT_F16; }

/* every T x q_pos0 x head ratio x D, with type, layout, tile and rope drawn
 * at random for each (seeded: the same draws every run) */
static void test_flash_vs_naive_sweep(void **state) {
    (void)state;
    static const int Ts[] = {1, 7, 64, 129}, pos0s[] = {0, 5, 200}, hkvs[] = {8, 2, 1}, Ds[] = {8, 64, 128};
    static const int types[] = {KT_F32, KT_F16, KT_Q8_0}, tiles[] = {7, 64, 0, 16};
    int n = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++)
            for (int h = 0; h < 3; h++)
                for (int e = 0; e < 3; e++) {
                    attn_case k = {Ts[a], pos0s[b], 8, hkvs[h], Ds[e], tiles[next_u64() % 4], types[next_u64() % 3],
                                   (int)(next_u64() % N_LAYOUTS), (int)(next_u64() % 3), next_u64() % 2,
                                   next_u64() % 2};
                    k.type = valid_type(k.type, k.Hkv, k.D);
                    k.layout = valid_layout(k.layout, k.type, k.D);
                    check_case(&k);
                    n++;
                }
    assert_int_equal(n, 108);
}

/* one mid-sized shape over every type x layout x rope x tile */
static void test_flash_vs_naive_views(void **state) {
    (void)state;
    static const int types[] = {KT_F32, KT_F16, KT_Q8_0}, tiles[] = {7, 64, 16};
    for (int ty = 0; ty < 3; ty++)
        for (int lay = 0; lay < N_LAYOUTS; lay++)
            for (int rope = 0; rope < 2; rope++)
                for (int ti = 0; ti < 3; ti++) {
                    const attn_case k = {20, 37, 8, 2, 64, tiles[ti], types[ty], lay, 2, rope, ti == 1};
                    check_case(&k);
                }
    /* decode shapes: T = 1 at a long position, MHA and MQA, D = 128 */
    for (int lay = 0; lay < N_LAYOUTS; lay++) {
        const attn_case k1 = {1, 300, 8, 8, 128, 0, KT_F16, lay, 0, lay == 1, false};
        const attn_case k2 = {1, 300, 8, 1, 128, 64, KT_Q8_0, lay, 1, false, false};
        check_case(&k1);
        check_case(&k2);
    }
}

/* shapes off the power-of-two path: D not a multiple of 8 (padded V rows,
 * transpose remainders), G = 3 and 5 (row blocks not a multiple of 4),
 * tiles of 1, 13 and 100; and T = 0 touches nothing */
static void test_flash_vs_naive_odd_shapes(void **state) {
    (void)state;
    static const int shapes[][5] = {/* T, q_pos0, H, Hkv, D */
                                    {7, 3, 6, 2, 12}, {50, 9, 5, 1, 20}, {1, 60, 6, 3, 36}, {130, 2, 3, 3, 4},
                                    {17, 0, 10, 2, 16}};
    static const int tiles[] = {13, 100, 1, 64, 9};
    for (int s = 0; s < 5; s++)
        for (int ty = 0; ty < 2; ty++) {
            const attn_case k = {shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4], tiles[s],
                                 ty ? KT_F16 : KT_F32, s % 3, s % 2, (s + ty) % 2 == 1, ty == 1};
            check_case(&k);
        }
    const kern_attn_dims d0 = {0, 4, 2, 8, 3, 0};
    float out[1] = {42.0f}, sink[4] = {1, 1, 1, 1}, K[4 * 16], V[4 * 16];
    fill(K, 4 * 16); fill(V, 4 * 16);
    cache c;
    cache_build(&c, KT_F32, CONTIG, 2, 8, 4, K, V, NULL);
    kern_attn_flash(NULL, NULL, NULL, &c.v, out, &d0);
    kern_attn_naive(NULL, NULL, NULL, &c.v, out, &d0, sink, 2);
    assert_true(out[0] == 42.0f && sink[0] == 0.0f && sink[3] == 0.0f);
    cache_free(&c);
}

/* naive over a contiguous F32 view == kern_attention_ref (kernels/attention.c) */
static void test_naive_vs_attention_ref(void **state) {
    (void)state;
    static const int shapes[][5] = {/* T, q_pos0, H, Hkv, D */
                                    {1, 0, 8, 8, 8},   {7, 5, 8, 2, 64}, {64, 0, 8, 1, 128},
                                    {9, 200, 8, 8, 64}, {1, 40, 8, 2, 32}, {33, 17, 4, 4, 16}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int T = shapes[s][0], pos0 = shapes[s][1], H = shapes[s][2], Hkv = shapes[s][3], D = shapes[s][4];
        const int P = pos0 + T, E = Hkv * D;
        const size_t nq = (size_t)T * H * D;
        float *q = malloc(sizeof(float) * nq), *K = malloc(sizeof(float) * P * E), *V = malloc(sizeof(float) * P * E);
        float *ref = malloc(sizeof(float) * nq), *o = malloc(sizeof(float) * nq);
        fill(q, nq); fill(K, (size_t)P * E); fill(V, (size_t)P * E);
        const kern_attn_shape as = {T, H, Hkv, D, pos0, E};
        kern_attention_ref(q, K, V, ref, &as);
        /* the same float arrays seen as one contiguous block */
        const kern_kv_view v = {(const uint8_t *)K, (const uint8_t *)V, (size_t)P * E * 4, NULL, P, KT_F32,
                                (size_t)E * 4, P, NULL, 0};
        const kern_attn_dims d = {T, H, Hkv, D, pos0, 0};
        run_naive(3, q, &v, o, &d, NULL, 0);
        char what[128];
        snprintf(what, sizeof what, "naive vs kern_attention_ref T=%d q_pos0=%d H=%d Hkv=%d D=%d", T, pos0, H, Hkv, D);
        check_close(o, ref, nq, 1e-5f, what);
        free(q); free(K); free(V); free(ref); free(o);
    }
}

/* rope_k: naive reading pre-RoPE K through a rotating view equals naive on
 * K rotated beforehand (kern_rope over the whole row, n_heads = Hkv, at
 * position p); the same rotation code both ways, so equal to the last bit
 * up to the 1e-6 allowed here.  And the rotation matters: without it the
 * output moves. */
static void test_rope_k(void **state) {
    (void)state;
    for (int neox = 0; neox < 2; neox++) {
        const int T = 9, pos0 = 23, H = 8, Hkv = 2, D = 64, P = pos0 + T, E = Hkv * D;
        const size_t nq = (size_t)T * H * D;
        float *q = malloc(sizeof(float) * nq), *K = malloc(sizeof(float) * P * E), *Kr = malloc(sizeof(float) * P * E);
        float *V = malloc(sizeof(float) * P * E), *o = malloc(sizeof(float) * nq), *ref = malloc(sizeof(float) * nq);
        float *plain = malloc(sizeof(float) * nq);
        fill(q, nq); fill(K, (size_t)P * E); fill(V, (size_t)P * E);
        const kern_rope_params rope = {neox ? 32 : 64, 10000.0f, neox == 1};
        memcpy(Kr, K, sizeof(float) * P * E);
        for (int p = 0; p < P; p++) kern_rope(Kr + (size_t)p * E, Hkv, D, p, &rope);
        cache pre, rot, none;
        cache_build(&pre, KT_F32, PAGED5, Hkv, D, P, K, V, &rope);
        cache_build(&rot, KT_F32, PAGED16, Hkv, D, P, Kr, V, NULL);
        cache_build(&none, KT_F32, CONTIG, Hkv, D, P, K, V, NULL);
        const kern_attn_dims d = {T, H, Hkv, D, pos0, 0};
        run_naive(2, q, &pre.v, o, &d, NULL, 0);
        run_naive(1, q, &rot.v, ref, &d, NULL, 0);
        check_close(o, ref, nq, 1e-6f, "naive rope_k vs pre-rotated K");
        run_naive(1, q, &none.v, plain, &d, NULL, 0);
        float diff = 0.0f;
        for (size_t i = 0; i < nq; i++) diff = fmaxf(diff, fabsf(plain[i] - ref[i]));
        assert_true(diff > 1e-3f);
        /* flash reading pre-RoPE K agrees too */
        const kern_attn_dims d7 = {T, H, Hkv, D, pos0, 7};
        run_flash(2, q, &pre.v, o, &d7);
        check_close(o, ref, nq, 1e-5f, "flash rope_k vs naive on pre-rotated K");
        cache_free(&pre); cache_free(&rot); cache_free(&none);
        free(q); free(K); free(Kr); free(V); free(o); free(ref); free(plain);
    }
}

/* sink_mass by hand.  D = 4, scale 1/2; K row p = (2 c_p, 2 e_p, 0, 0), so
 * head 0 (q = e_0) scores c_p and head 1 (q = e_1) scores e_p.
 *   c = (0, ln 2, ln 5): weights 1 : 2 : 5     e = (ln 3, 0, 0): 3 : 1 : 1
 * T = 1 at position 2:  head 0 probabilities 1/8 2/8 5/8, head 1 3/5 1/5 1/5.
 * T = 2 from position 1: query 0 sees positions 0..1 (1/3 2/3 ; 3/4 1/4). */
static void test_sink_mass(void **state) {
    (void)state;
    const float c[3] = {0.0f, logf(2.0f), logf(5.0f)}, e[3] = {logf(3.0f), 0.0f, 0.0f};
    float K[3][4], V[3][4];
    for (int p = 0; p < 3; p++) {
        K[p][0] = 2 * c[p]; K[p][1] = 2 * e[p]; K[p][2] = K[p][3] = 0.0f;
        for (int i = 0; i < 4; i++) V[p][i] = (float)((p + 1) * (i == 0 ? 1 : i == 1 ? 10 : 0));
    }
    const float q[2][2][4] = {{{1, 0, 0, 0}, {0, 1, 0, 0}}, {{1, 0, 0, 0}, {0, 1, 0, 0}}};
    for (int lay = 0; lay < 2; lay++) {
        cache cc;
        cache_build(&cc, KT_F32, lay ? PAGED5 : CONTIG, 1, 4, 3, &K[0][0], &V[0][0], NULL);
        float out[2 * 2 * 4], sink[2];
        kern_attn_dims d = {1, 2, 1, 4, 2, 0};
        run_naive(1, &q[0][0][0], &cc.v, out, &d, sink, 1);
        assert_float_equal(sink[0], 1.0f / 8, 1e-6f);
        assert_float_equal(sink[1], 3.0f / 5, 1e-6f);
        /* out = sum_p prob_p * v_p: head 0 column 0 = (1*1 + 2*2 + 5*3) / 8 */
        assert_float_equal(out[0], 20.0f / 8, 1e-5f);
        assert_float_equal(out[4 + 1], 10.0f * (3 * 1 + 1 * 2 + 1 * 3) / 5, 1e-4f);
        run_naive(2, &q[0][0][0], &cc.v, out, &d, sink, 2);
        assert_float_equal(sink[0], 3.0f / 8, 1e-6f);
        assert_float_equal(sink[1], 4.0f / 5, 1e-6f);
        run_naive(1, &q[0][0][0], &cc.v, out, &d, sink, 3);
        assert_float_equal(sink[0], 1.0f, 1e-6f);
        /* two queries: masses add up over T */
        d = (kern_attn_dims){2, 2, 1, 4, 1, 0};
        run_naive(1, &q[0][0][0], &cc.v, out, &d, sink, 1);
        assert_float_equal(sink[0], 1.0f / 3 + 1.0f / 8, 1e-6f);
        assert_float_equal(sink[1], 3.0f / 4 + 3.0f / 5, 1e-6f);
        run_naive(1, &q[0][0][0], &cc.v, out, &d, NULL, 1); /* NULL: no statistics, still attends */
        assert_float_equal(out[0], (1.0f + 2 * 2.0f) / 3, 1e-5f);
        cache_free(&cc);
    }
}

/* Reading stops at q_pos0 + T - 1: with q_pos0 + T == n_pos and NaN from
 * slot n_pos on (mid-block, and at a block edge), outputs stay finite.  And
 * the canary is live: a view that claims one more position and a query that
 * attends it gives NaN. */
static void test_never_reads_past_n_pos(void **state) {
    (void)state;
    static const int cases[][4] = {/* T, q_pos0, layout, tile */
                                   {13, 20, PAGED16, 7}, {13, 20, PAGED5, 64}, {1, 32, CONTIG, 64},
                                   {3, 77, PAGED5, 16},  {64, 0, PAGED16, 64}, {1, 0, PAGED5, 7}};
    const int H = 4, Hkv = 2, D = 32, E = Hkv * D;
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++)
        for (int ty = 0; ty < 3; ty++) {
            const int T = cases[s][0], pos0 = cases[s][1], n_pos = pos0 + T;
            const int type = (int[]){KT_F32, KT_F16, KT_Q8_0}[ty];
            float *q = malloc(sizeof(float) * T * H * D), *K = malloc(sizeof(float) * n_pos * E);
            float *V = malloc(sizeof(float) * n_pos * E), *o = malloc(sizeof(float) * T * H * D);
            fill(q, (size_t)T * H * D); fill(K, (size_t)n_pos * E); fill(V, (size_t)n_pos * E);
            cache c;
            cache_build(&c, type, cases[s][2], Hkv, D, n_pos, K, V, ty == 1 ? &(kern_rope_params){D, 1e4f, false} : NULL);
            const kern_attn_dims d = {T, H, Hkv, D, pos0, cases[s][3]};
            kern_tier ts[2];
            const kern_tier saved = kern_active_tier();
            for (int i = 0, n = tiers(ts); i < n; i++) {
                kern_set_tier(ts[i]);
                run_flash(2, q, &c.v, o, &d);
                for (int x = 0; x < T * H * D; x++)
                    if (!isfinite(o[x])) fail_msg("flash (%s) read past n_pos (case %zu, %s)", kern_tier_name(ts[i]), s,
                                                  kern_type_name(type));
            }
            kern_set_tier(saved);
            run_naive(2, q, &c.v, o, &d, NULL, 0);
            for (int x = 0; x < T * H * D; x++)
                if (!isfinite(o[x])) fail_msg("naive read past n_pos (case %zu)", s);
            if (n_pos % c.v.block_size) { /* the slot after n_pos is a NaN canary in the same block */
                kern_kv_view v1 = c.v;
                v1.n_pos = n_pos + 1;
                const kern_attn_dims d1 = {1, H, Hkv, D, n_pos, d.tile};
                run_flash(1, q, &v1, o, &d1);
                assert_true(isnan(o[0]));
                run_naive(1, q, &v1, o, &d1, NULL, 0);
                assert_true(isnan(o[0]));
            }
            cache_free(&c);
            free(q); free(K); free(V); free(o);
        }
}

/* kern_kv_view_read: each layout and type returns exactly what the type
 * table's own dequantizer makes of the row that was written (heads of whole
 * Q8_0 blocks, and heads of D = 8 inside one block) */
static void check_view_read(int Hkv, int D) {
    const int E = Hkv * D, n_pos = 41;
    float *K = malloc(sizeof(float) * n_pos * E), *V = malloc(sizeof(float) * n_pos * E), row[32], want[3 * 32];
    uint8_t q[3 * 32 * 4];
    fill(K, (size_t)n_pos * E); fill(V, (size_t)n_pos * E);
    static const int types[] = {KT_F32, KT_F16, KT_Q8_0};
    for (int ty = 0; ty < 3; ty++)
        for (int lay = 0; lay < N_LAYOUTS; lay++) {
            if (valid_layout(lay, types[ty], D) != lay) continue; /* a Q8_0 head inside a block: no head-major */
            const kern_type_traits *tt = kern_type_get(types[ty]);
            cache c;
            cache_build(&c, types[ty], lay, Hkv, D, n_pos, K, V, NULL);
            for (int p = 0; p < n_pos; p++)
                for (int isv = 0; isv < 2; isv++) {
                    tt->from_float_ref((isv ? V : K) + (size_t)p * E, q, E);
                    tt->to_float(q, want, E);
                    for (int hk = 0; hk < Hkv; hk++) {
                        kern_kv_view_read(&c.v, isv, p, hk, D, row);
                        assert_memory_equal(row, want + hk * D, sizeof(float) * D);
                    }
                }
            cache_free(&c);
        }
    free(K); free(V);
}

static void test_view_read(void **state) {
    (void)state;
    check_view_read(3, 32);
    check_view_read(4, 8);
}

/* flash's scratch does not grow with P; naive's grows with T * P; the
 * combined size covers both (runs with it, 2 threads) */
static void test_scratch_bytes(void **state) {
    (void)state;
    const kern_attn_dims d1 = {1024, 32, 4, 64, 0, 0}, d8 = {8192, 32, 4, 64, 0, 0};
    assert_true(kern_attn_flash_scratch_bytes(&d1) == kern_attn_flash_scratch_bytes(&d8));
    assert_true(kern_attn_flash_scratch_bytes(&d8) < 512 * 1024); /* incl. 256 KiB of split partials */
    assert_true(kern_attn_naive_scratch_bytes(&d8, 8192) >= (size_t)8192 * 8192 * 4);
    assert_true(kern_attn_scratch_bytes(&d8, 8192) >= kern_attn_naive_scratch_bytes(&d8, 8192));
    /* sized once for the largest T serves every smaller T (the model allocates once) */
    for (int hkv = 1; hkv <= 32; hkv *= 2)
        for (int T = 1; T < 300; T++) {
            const kern_attn_dims a = {T, 32, hkv, 64, 0, 0}, b = {T + 1, 32, hkv, 64, 0, 0};
            assert_true(kern_attn_flash_scratch_bytes(&a) <= kern_attn_flash_scratch_bytes(&b));
            assert_true(kern_attn_naive_scratch_bytes(&a, 500) <= kern_attn_naive_scratch_bytes(&b, 500));
        }
    const kern_attn_dims d = {5, 4, 4, 16, 3, 0};
    assert_true(kern_attn_scratch_bytes(&d, 8) >= kern_attn_flash_scratch_bytes(&d));
    float q[5 * 4 * 16], o[5 * 4 * 16], r[5 * 4 * 16], K[8 * 64], V[8 * 64];
    fill(q, 5 * 4 * 16); fill(K, 8 * 64); fill(V, 8 * 64);
    cache c;
    cache_build(&c, KT_F32, PAGED5, 4, 16, 8, K, V, NULL);
    core_pool *pool = core_pool_new(2);
    void *scratch = malloc(2 * kern_attn_scratch_bytes(&d, 8));
    kern_attn_flash(pool, scratch, q, &c.v, o, &d);
    kern_attn_naive(pool, scratch, q, &c.v, r, &d, NULL, 0);
    check_close(o, r, 5 * 4 * 16, 1e-5f, "combined scratch");
    free(scratch);
    core_pool_free(pool);
    cache_free(&c);
}

/* An F16 cache is read in place (halves converted in registers, no float
 * copy); the result must be bit-identical to an F32 cache holding the same
 * (exactly converted) values, at each tier, whatever the layout, for decode
 * (T = 1) and prefill rows, MHA and GQA, D with and without a tail of 8. */
static void test_flash_f16_in_place(void **state) {
    (void)state;
    const int shapes[][5] = {{1, 8, 8, 64, 200}, {1, 8, 2, 64, 37}, {5, 4, 1, 40, 90}, {3, 6, 3, 12, 70}};
    kern_tier tl[2];
    const int nt = tiers(tl);
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int layout = CONTIG; layout < N_LAYOUTS; layout++) {
            const int T = shapes[si][0], H = shapes[si][1], Hkv = shapes[si][2], D = shapes[si][3], P = shapes[si][4];
            const int n_pos = P + T, E = Hkv * D;
            const size_t nq = (size_t)T * H * D;
            float *q = malloc(sizeof(float) * nq), *K = malloc(sizeof(float) * n_pos * E),
                  *V = malloc(sizeof(float) * n_pos * E), *o16 = malloc(sizeof(float) * nq),
                  *o32 = malloc(sizeof(float) * nq);
            fill(q, nq);
            for (size_t i = 0; i < (size_t)n_pos * E; i++) { /* values that F16 holds exactly */
                K[i] = kern_fp16_to_fp32(kern_fp32_to_fp16(frand()));
                V[i] = kern_fp16_to_fp32(kern_fp32_to_fp16(frand()));
            }
            cache c16, c32;
            cache_build(&c16, KT_F16, layout, Hkv, D, n_pos, K, V, NULL);
            cache_build(&c32, KT_F32, layout, Hkv, D, n_pos, K, V, NULL);
            const kern_attn_dims d = {T, H, Hkv, D, P, 0};
            for (int ti = 0; ti < nt; ti++) {
                assert_true(kern_set_tier(tl[ti]));
                run_flash(2, q, &c16.v, o16, &d);
                run_flash(2, q, &c32.v, o32, &d);
                if (memcmp(o16, o32, sizeof(float) * nq))
                    fail_msg("tier %s T=%d H=%d Hkv=%d D=%d %s: F16 cache != its F32 copy", kern_tier_name(tl[ti]), T,
                             H, Hkv, D, layout_name[layout]);
            }
            kern_set_tier(kern_best_tier());
            cache_free(&c16);
            cache_free(&c32);
            free(q); free(K); free(V); free(o16); free(o32);
        }
}

/* A query row's output does not depend on the rows computed with it: row t
 * of a whole prefill (T = P, q_pos0 = 0) equals, bit for bit, the same
 * query decoded alone (T = 1, q_pos0 = t) and inside a block of 7.  The
 * serving engine relies on it: a preempted sequence is recomputed by
 * prefill and must continue with the tokens it would have produced.  Each
 * tier, cache type, MHA / GQA / MQA, D with and without a tail of 8,
 * rotation on read. */
static void test_flash_rows_batch_invariant(void **state) {
    (void)state;
    const int shapes[][3] = {{8, 8, 64}, {8, 2, 64}, {4, 1, 40}, {6, 3, 12}}; /* H, Hkv, D */
    const int types[] = {KT_F32, KT_F16, KT_Q8_0};
    const int P = 150, rows[] = {0, 1, 7, 63, 64, 100, 149};
    kern_tier tl[2];
    const int nt = tiers(tl);
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (size_t ty = 0; ty < sizeof types / sizeof *types; ty++)
            for (int rope_on = 0; rope_on < 2; rope_on++) {
                const int H = shapes[si][0], Hkv = shapes[si][1], D = shapes[si][2], E = Hkv * D;
                const int type = valid_type(types[ty], Hkv, D);
                const size_t per = (size_t)H * D, nq = (size_t)P * per;
                float *q = malloc(sizeof(float) * nq), *K = malloc(sizeof(float) * P * E),
                      *V = malloc(sizeof(float) * P * E), *full = malloc(sizeof(float) * nq),
                      *part = malloc(sizeof(float) * 7 * per);
                fill(q, nq); fill(K, (size_t)P * E); fill(V, (size_t)P * E);
                const kern_rope_params rope = {D, 10000.0f, false};
                cache c;
                cache_build(&c, type, PAGED5, Hkv, D, P, K, V, rope_on ? &rope : NULL);
                for (int ti = 0; ti < nt; ti++) {
                    assert_true(kern_set_tier(tl[ti]));
                    const kern_attn_dims all = {P, H, Hkv, D, 0, 0};
                    run_flash(2, q, &c.v, full, &all);
                    for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
                        const int t = rows[ri], n = t + 7 <= P ? 7 : 1;
                        const kern_attn_dims one = {1, H, Hkv, D, t, 0}, blk = {n, H, Hkv, D, t, 0};
                        run_flash(1, q + (size_t)t * per, &c.v, part, &one);
                        if (memcmp(part, full + (size_t)t * per, sizeof(float) * per))
                            fail_msg("tier %s %s H=%d Hkv=%d D=%d rope=%d: row %d decoded alone != in the prefill",
                                     kern_tier_name(tl[ti]), kern_type_name(type), H, Hkv, D, rope_on, t);
                        run_flash(2, q + (size_t)t * per, &c.v, part, &blk);
                        if (memcmp(part, full + (size_t)t * per, sizeof(float) * n * per))
                            fail_msg("tier %s %s H=%d Hkv=%d D=%d rope=%d: rows %d.. in a block of %d != in the prefill",
                                     kern_tier_name(tl[ti]), kern_type_name(type), H, Hkv, D, rope_on, t, n);
                    }
                }
                kern_set_tier(kern_best_tier());
                cache_free(&c);
                free(q); free(K); free(V); free(full); free(part);
            }
}

/* A decoding step over rows read in place (F16 / F32, head-major) takes
 * several KV heads, each over several tiles, at once (range_heads); its
 * shape is tuned per machine kind (kern_attn_flash_set_step), so no bit
 * may depend on it: every shape gives the bits of the same rows in a
 * prefill, which takes one head and one tile at a time (range_tile).  MHA,
 * GQA and MQA, a D with a tail of 8, KV blocks of 16 and 5, the default
 * tile and a small one (more tiles per chunk than a step takes), chunks
 * that end inside a step, a query alone and a block of 3, 1-3 threads,
 * each tier; the ahead steps likewise (one head and tile, the next
 * step's rows asked for: "step 0x0"); and the step path did run
 * (kern_attn_flash_split_calls). */
static void test_flash_decode_step_shapes(void **state) {
    (void)state;
    const int shapes[][3] = {{16, 16, 64}, {16, 4, 64}, {8, 1, 64}, {12, 12, 40}}; /* H, Hkv, D */
    const int steps[][2] = {{1, 1}, {4, 1}, {2, 4}, {1, 8}, {3, 2}, {8, 1}, {0, 0}}; /* heads, tiles per head; */
    /* 0, 0: the ahead steps (kern_attn_flash_set_ahead) */
    const int types[] = {KT_F16, KT_F32}, layouts[] = {HEADS16, HEADS5}, tiles_[] = {0, 24};
    const int P = 300, rows[] = {0, 63, 64, 200, 297};
    kern_tier tl[2];
    const int nt = tiers(tl);
    const int64_t calls0 = kern_attn_flash_split_calls();
    int n_cases = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (size_t ty = 0; ty < 2; ty++) {
            const int H = shapes[si][0], Hkv = shapes[si][1], D = shapes[si][2], E = Hkv * D;
            const size_t per = (size_t)H * D, nq = (size_t)P * per;
            float *q = malloc(sizeof(float) * nq), *K = malloc(sizeof(float) * P * E),
                  *V = malloc(sizeof(float) * P * E), *full = malloc(sizeof(float) * nq),
                  *part = malloc(sizeof(float) * 3 * per);
            fill(q, nq); fill(K, (size_t)P * E); fill(V, (size_t)P * E);
            for (size_t i = 0; i < nq; i++) q[i] *= 3.0f; /* peaked: the running max moves between tiles */
            cache c;
            cache_build(&c, types[ty], layouts[(si + ty) % 2], Hkv, D, P, K, V, NULL);
            for (int ti = 0; ti < nt; ti++) {
                assert_true(kern_set_tier(tl[ti]));
                for (size_t ki = 0; ki < 2; ki++) {
                    /* chunks of 96 or 128 positions: several per decode, so even MQA splits */
                    const kern_attn_dims all = {.T = P, .H = H, .Hkv = Hkv, .D = D, .tile = tiles_[ki], .split = 96};
                    kern_attn_flash_set_step(1, 1);
                    kern_attn_flash_set_ahead(0);
                    run_flash(2, q, &c.v, full, &all);
                    for (size_t st = 0; st < sizeof steps / sizeof *steps; st++) {
                        kern_attn_flash_set_step(steps[st][0], steps[st][1]);
                        kern_attn_flash_set_ahead(!steps[st][0]);
                        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
                            const int t = rows[ri], n = 1 + (int)(ri % 2) * 2, threads = 1 + (int)((ri + st) % 3);
                            const kern_attn_dims blk = {.T = n, .H = H, .Hkv = Hkv, .D = D, .q_pos0 = t,
                                                        .tile = tiles_[ki], .split = 96};
                            run_flash(threads, q + (size_t)t * per, &c.v, part, &blk);
                            if (memcmp(part, full + (size_t)t * per, sizeof(float) * n * per))
                                fail_msg("tier %s %s %s H=%d Hkv=%d D=%d tile=%d step %dx%d, %d threads: rows %d.. "
                                         "(%d) decoded != in the prefill",
                                         kern_tier_name(tl[ti]), kern_type_name(types[ty]),
                                         layout_name[layouts[(si + ty) % 2]], H, Hkv, D, tiles_[ki], steps[st][0],
                                         steps[st][1], threads, t, n);
                            n_cases++;
                        }
                    }
                }
            }
            kern_attn_flash_set_step(0, 0);
            kern_attn_flash_set_ahead(-1);
            kern_set_tier(kern_best_tier());
            cache_free(&c);
            free(q); free(K); free(V); free(full); free(part);
        }
    const int64_t split_runs = kern_attn_flash_split_calls() - calls0;
    print_message("%d decode cases, %lld took the split path\n", n_cases, (long long)split_runs);
    assert_true(split_runs > n_cases / 2);
}

/* Flash-decoding: the context is cut in chunks of `split` positions, each
 * chunk's softmax computed alone and the chunks folded in order by
 * log-sum-exp; with few KV heads and several threads, one head's chunks
 * run on different threads.  For many splits, tiles, block sizes, cache
 * types and lengths (decode T = 1 and a block of 3 queries, MQA / GQA /
 * MHA, windows and soft-caps):
 *   - equal to the unsplit kernel (split < 0) within the flash tolerance;
 *   - for a fixed split, bit-identical whatever the thread count (1: the
 *     chunks in one thread; 2, 3, 8: split across threads), and a query
 *     decoded alone equals it inside the block;
 *   - and the split path did run (kern_attn_flash_split_calls). */
static int split_cases(int type, int layout, int H, int Hkv, int D, int P, int T, int window, float softcap) {
    const int splits[] = {0, 64, 100, 192}, tiles_[] = {0, 16, 40}, threads[] = {2, 3, 8};
    kern_tier tl[2];
    const int nt = tiers(tl), E = Hkv * D;
    int n_cases = 0;
    const size_t per = (size_t)H * D, nq = (size_t)T * per;
    float *q = malloc(sizeof(float) * nq), *K = malloc(sizeof(float) * P * E), *V = malloc(sizeof(float) * P * E);
    float *ref = malloc(sizeof(float) * nq), *o1 = malloc(sizeof(float) * nq), *on = malloc(sizeof(float) * nq);
    fill(q, nq); fill(K, (size_t)P * E); fill(V, (size_t)P * E);
    for (size_t i = 0; i < nq; i++) q[i] *= 3.0f; /* peaked softmax: the chunks' maxima differ */
    cache c;
    cache_build(&c, type, layout, Hkv, D, P, K, V, NULL);
    for (int ti = 0; ti < nt; ti++) {
        assert_true(kern_set_tier(tl[ti]));
        for (size_t ki = 0; ki < sizeof tiles_ / sizeof *tiles_; ki++) {
            kern_attn_dims d = {.T = T, .H = H, .Hkv = Hkv, .D = D, .q_pos0 = P - T, .tile = tiles_[ki],
                                .softcap = softcap, .window = window, .split = -1};
            run_flash(1, q, &c.v, ref, &d);
            for (size_t pi = 0; pi < sizeof splits / sizeof *splits; pi++) {
                d.split = splits[pi];
                char what[256];
                snprintf(what, sizeof what, "tier %s %s %s H=%d Hkv=%d D=%d P=%d T=%d tile=%d split=%d window=%d",
                         kern_tier_name(tl[ti]), kern_type_name(type), layout_name[layout], H, Hkv, D, P, T,
                         tiles_[ki], splits[pi], window);
                run_flash(1, q, &c.v, o1, &d);
                check_close(o1, ref, nq, 1e-5f, what);
                for (size_t hi = 0; hi < sizeof threads / sizeof *threads; hi++) {
                    run_flash(threads[hi], q, &c.v, on, &d);
                    if (memcmp(on, o1, sizeof(float) * nq)) fail_msg("%s: %d threads != 1 thread", what, threads[hi]);
                }
                if (T > 1) { /* the last query alone */
                    kern_attn_dims one = d;
                    one.T = 1, one.q_pos0 = P - 1;
                    run_flash(2, q + (size_t)(T - 1) * per, &c.v, on, &one);
                    if (memcmp(on, o1 + (size_t)(T - 1) * per, sizeof(float) * per))
                        fail_msg("%s: last query alone != in its block", what);
                }
                n_cases++;
            }
        }
    }
    kern_set_tier(kern_best_tier());
    cache_free(&c);
    free(q); free(K); free(V); free(ref); free(o1); free(on);
    return n_cases;
}

static void test_flash_split(void **state) {
    (void)state;
    const int shapes[][3] = {{8, 1, 64}, {8, 2, 64}, {4, 4, 40}, {6, 3, 12}, {4, 1, 256}}; /* H, Hkv, D */
    const int types[] = {KT_F32, KT_F16, KT_Q8_0}, layouts[] = {CONTIG, PAGED5, HEADS16};
    const int lens[] = {1, 65, 200, 700, 1500};
    const int64_t calls0 = kern_attn_flash_split_calls();
    int n_cases = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const int H = shapes[si][0], Hkv = shapes[si][1], D = shapes[si][2], P = lens[li];
            const int type = valid_type(types[(si + li) % 3], Hkv, D);
            const int layout = valid_layout(layouts[(si * 2 + li) % 3], type, D);
            const int T = P >= 3 && li % 2 ? 3 : 1, window = si == 3 && P > 300 ? 250 : 0;
            n_cases += split_cases(type, layout, H, Hkv, D, P, T, window, si == 2 ? 3.0f : 0.0f);
        }
    /* groups of several KV heads (hg > 1) in more than one group, many
     * chunks, and the decoding cache's rows read in place (F16 / F32,
     * head-major): with 8 KV heads and 2-8 threads, 200-700 positions in
     * chunks of 64-192 leave 2-4 groups of 2-4 heads; with 12 (stories110M's
     * MHA) groups of 12, 6 or 4, which range_heads takes as many heads at a
     * time as the tier's step has (avx512: 4, so 4 + 2 for a group of 6;
     * below: 2 heads of 4 tiles); test_flash_decode_step_shapes tries the
     * other shapes */
    const int group_types[] = {KT_F16, KT_F32};
    for (size_t gi = 0; gi < 2; gi++)
        for (int P = 200; P <= 700; P += 500) {
            n_cases += split_cases(group_types[gi], valid_layout(HEADS16, group_types[gi], 64), 16, 8, 64, P, 1, 0, 0.0f);
            n_cases += split_cases(group_types[gi], valid_layout(PAGED5, group_types[gi], 64), 16, 8, 64, P, 1, 0, 0.0f);
            n_cases += split_cases(group_types[gi], valid_layout(HEADS16, group_types[gi], 64), 12, 12, 64, P, 1, 0, 0.0f);
        }
    const int64_t split_runs = kern_attn_flash_split_calls() - calls0;
    print_message("%d split cases, %lld kernel calls took the split path\n", n_cases, (long long)split_runs);
    assert_true(split_runs > n_cases); /* most multi-chunk cases at 2, 3 and 8 threads */
}

/* The avx512 tier's 512-bit products (kernels/attn_flash_avx512.c), with
 * the 512-bit scores or the 256-bit ones (kern_attn_flash_set_zmm_scores), give
 * the AVX2 table's bits exactly: decode and prefill row counts (every
 * 8/4/2/1-row block and the 16-key blocks of one row), MQA / GQA / MHA,
 * D with tails of 8 and 16 past 32-column blocks and up to 256, F32 / F16 / Q8_0 caches, tiles
 * with a partial last block of keys, multi-chunk contexts.  Skipped where
 * the CPU has no AVX-512 (the AVX2 table is then what runs). */
static void test_flash_avx512_equals_avx2(void **state) {
    (void)state;
    if (kern_best_tier() < KERN_TIER_AVX512) {
        print_message("no AVX-512 on this CPU: skipped\n");
        return;
    }
    const int shapes[][3] = {{8, 1, 64}, {8, 8, 64}, {32, 4, 64}, {4, 2, 40}, {6, 3, 24}, {4, 1, 256}, {2, 2, 8},
                             {16, 2, 48}, {8, 1, 80}};
    const int Ts[] = {1, 2, 3, 5, 8, 13, 37}, types[] = {KT_F32, KT_F16, KT_Q8_0}, tiles_[] = {0, 24};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
            const int H = shapes[si][0], Hkv = shapes[si][1], D = shapes[si][2], E = Hkv * D, T = Ts[ti];
            const int P = 40 + 97 * (int)ti + (si == 0 ? 1200 : 0), type = valid_type(types[(si + ti) % 3], Hkv, D);
            const size_t nq = (size_t)T * H * D;
            float *q = malloc(sizeof(float) * nq), *K = malloc(sizeof(float) * P * E), *V = malloc(sizeof(float) * P * E);
            float *a = malloc(sizeof(float) * nq), *b = malloc(sizeof(float) * nq);
            fill(q, nq); fill(K, (size_t)P * E); fill(V, (size_t)P * E);
            cache c;
            cache_build(&c, type, valid_layout(ti % 2 ? HEADS16 : PAGED5, type, D), Hkv, D, P, K, V, NULL);
            for (size_t ki = 0; ki < sizeof tiles_ / sizeof *tiles_; ki++) {
                const kern_attn_dims d = {.T = T, .H = H, .Hkv = Hkv, .D = D, .q_pos0 = P - T, .tile = tiles_[ki]};
                assert_true(kern_set_tier(KERN_TIER_AVX2));
                run_flash(2, q, &c.v, a, &d);
                assert_true(kern_set_tier(KERN_TIER_AVX512));
                for (int zs = 1; zs >= 0; zs--) { /* the 512-bit scores, and the 256-bit ones Zen 4 takes */
                    kern_attn_flash_set_zmm_scores(zs);
                    memset(b, 0xff, sizeof(float) * nq);
                    run_flash(2, q, &c.v, b, &d);
                    if (memcmp(a, b, sizeof(float) * nq))
                        fail_msg("avx512 (%d-bit scores) != avx2: %s H=%d Hkv=%d D=%d T=%d P=%d tile=%d", zs ? 512 : 256,
                                 kern_type_name(type), H, Hkv, D, T, P, tiles_[ki]);
                }
                kern_attn_flash_set_zmm_scores(-1);
            }
            cache_free(&c);
            free(q); free(K); free(V); free(a); free(b);
        }
    kern_set_tier(kern_best_tier());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flash_avx512_equals_avx2),
        cmocka_unit_test(test_flash_split),
        cmocka_unit_test(test_flash_rows_batch_invariant),
        cmocka_unit_test(test_flash_decode_step_shapes),
        cmocka_unit_test(test_flash_f16_in_place),
        cmocka_unit_test(test_view_read),
        cmocka_unit_test(test_naive_vs_attention_ref),
        cmocka_unit_test(test_rope_k),
        cmocka_unit_test(test_sink_mass),
        cmocka_unit_test(test_never_reads_past_n_pos),
        cmocka_unit_test(test_flash_vs_naive_views),
        cmocka_unit_test(test_flash_vs_naive_sweep),
        cmocka_unit_test(test_flash_vs_naive_odd_shapes),
        cmocka_unit_test(test_scratch_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
