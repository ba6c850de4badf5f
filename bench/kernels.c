/* kernels.c - kvant-kernels: matmul speed per kernel tier and layout.
 *
 * For each weight type, each tier this CPU runs (ref, scalar, avx2, ...)
 * with the row-major kernels (kern_matmul), and the packed 8-row layout
 * (kern_matmul_packed) at the best tier (KVANT_TIER's if set), at avx2
 * when that is below it, and at its plain-C reference:
 *   decode  T = 1 over an N x K matrix larger than the L3 cache (weights
 *           stream from memory): GB/s of weights read, best of R runs;
 *           for the packed layout also over ~8 MiB of weights that stay
 *           in the L3 cache between runs ("decode L3"): what the tile
 *           computes when memory is not the limit, so the two columns
 *           tell whether decode waits on memory or on the core
 *   prefill T = 64 rows against a smaller matrix: GMAC/s (multiply-adds)
 *
 *   kvant-kernels [-t THREADS] [-r REPS] [--types Q4_0,Q8_0,...]
 *   kvant-kernels --attn [-r REPS]
 *
 * --peak first measures what the cores can compute, as the ceilings for
 * the prefill column, with every thread of the pool: FP32 FMAs (8
 * independent chains of vfmadd, registers only, as wide as the row's tier:
 * ymm, or zmm at avx512: GFLOP/s) and the int8 dot
 * product as the AVX2 packed tiles do it (vpsignb, vpmaddubsw, vpmaddwd,
 * vpaddd against 4 broadcast activation rows, 4 KiB of weights in L1, no
 * block epilogue: GMAC/s); the packed F16 and Q8_0 prefill rows then show
 * their % of it, measured again right after the row (the machine's speed
 * drifts) (the 4-bit types use other instructions: no sign, int16
 * sums, so this is not their ceiling).
 *
 * --attn times decode attention instead (kern_attn_flash, T = 1, one
 * thread) over a paged F16 pool at stories110M's shape: 32 sequences of
 * 128 positions whose blocks interleave as when they decode together, 12
 * layers (151 MiB, larger than the L3 cache), with row-major and with
 * head-major blocks (kv/paged.h): ns per (sequence, position, layer, head)
 * and GB/s of K and V read.
 *
 * Weights are random bytes run through the type's quantizer (values do
 * not change the speed).  Figures are for comparison between rows of one
 * run; the machine's noise applies to all rows alike. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/kernels.h"
#include "kernels/repack.h"
#include "kv/paged.h"

static uint64_t g_rng = 0x853c49e6748fea9bull;
static float frand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

typedef enum { ROWS, PACKED, PACKED_REF } layout;

/* best time in ms of R calls of one matmul */
static double time_mm(core_pool *pool, layout lay, const void *W, int type, const float *x, float *y, int T, int64_t N,
                      int64_t K, void *scratch, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = core_time_ms();
        if (lay == ROWS) kern_matmul(pool, scratch, W, type, x, y, T, N, K);
        else if (lay == PACKED) kern_matmul_packed(pool, scratch, W, type, x, y, T, N, K);
        else kern_matmul_packed_ref(W, type, x, y, T, N, K);
        const double dt = core_time_ms() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static void *make_weights(int type, int64_t N, int64_t K) {
    const size_t rb = kern_row_bytes(type, K);
    uint8_t *W = malloc(rb * (size_t)N);
    float *row = malloc(sizeof(float) * (size_t)K);
    if (!W || !row) { fprintf(stderr, "kvant-kernels: out of memory\n"); exit(1); }
    for (int64_t k = 0; k < K; k++) row[k] = frand();
    for (int64_t n = 0; n < N; n++) { /* one quantized row, copied with a cheap perturbation */
        if (n < 64) kern_type_get(type)->from_float_ref(row, W + (size_t)n * rb, K);
        else memcpy(W + (size_t)n * rb, W + (size_t)(n % 64) * rb, rb);
        row[n % K] = frand();
    }
    free(row);
    return W;
}

static void *pack(const void *W, int type, int64_t N, int64_t K) {
    void *P = core_alloc_huge(kern_pack_bytes(type, N, K)); /* as model/pack.c */
    if (!P) { fprintf(stderr, "kvant-kernels: out of memory\n"); exit(1); }
    kern_pack(W, type, N, K, P, 0, (N + KERN_PACK_ROWS - 1) / KERN_PACK_ROWS);
    return P;
}

static void die_st(const kvant_status *st) {
    fprintf(stderr, "kvant-kernels: %s\n", st->msg);
    exit(1);
}

/* ---- --peak: compute ceilings (x86-64 with AVX2 + FMA) ---- */
#if defined(__x86_64__)
#include <immintrin.h>
enum { PK_NB = 16, PK_REPS = 20000 };
typedef struct {
    uint8_t w[PK_NB * 256], a[4 * PK_NB * 32]; /* the int8 run's weights and activations (L1) */
    _Atomic int64_t sink;                      /* results, so no run is optimized away */
} peak_job;
__attribute__((target("avx2,fma"), noinline)) static float peak_fma(int reps) {
    __m256 s[8];
    for (int i = 0; i < 8; i++) s[i] = _mm256_set1_ps(0.1f * (float)i);
    const __m256 x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.999f);
    for (int r = 0; r < reps; r++)
        for (int u = 0; u < 64; u++)
            for (int i = 0; i < 8; i++) s[i] = _mm256_fmadd_ps(s[i], x, y);
    __m256 t = s[0];
    for (int i = 1; i < 8; i++) t = _mm256_add_ps(t, s[i]);
    return _mm256_cvtss_f32(t);
}
/* the same with 512-bit FMAs (16 floats each): the ceiling of the avx512
 * tier's F16 tiles (on Zen 4 a zmm FMA costs two ymm ones, so this reads
 * as the ymm figure there; on Zen 5 and the Intel Xeons twice) */
__attribute__((target("avx512f"), noinline)) static float peak_fma512(int reps) {
    __m512 s[8];
    for (int i = 0; i < 8; i++) s[i] = _mm512_set1_ps(0.1f * (float)i);
    const __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.999f);
    for (int r = 0; r < reps; r++)
        for (int u = 0; u < 64; u++)
            for (int i = 0; i < 8; i++) s[i] = _mm512_fmadd_ps(s[i], x, y);
    __m512 t = s[0];
    for (int i = 1; i < 8; i++) t = _mm512_add_ps(t, s[i]);
    return _mm512_reduce_add_ps(t);
}
__attribute__((target("avx2"), noinline)) static int peak_int8(int reps, const uint8_t *w, const uint8_t *a) {
    __m256i s[4] = {0};
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < reps; r++)
        for (int b = 0; b < PK_NB; b++)
            for (int j = 0; j < 8; j++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(w + 256 * b + 32 * j)), u = _mm256_sign_epi8(q, q);
                for (int c = 0; c < 4; c++) {
                    int32_t v;
                    memcpy(&v, a + PK_NB * 32 * c + 32 * b + 4 * j, 4);
                    const __m256i p = _mm256_maddubs_epi16(u, _mm256_sign_epi8(_mm256_set1_epi32(v), q));
                    s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(p, ones));
                }
            }
    const __m256i t = _mm256_add_epi32(_mm256_add_epi32(s[0], s[1]), _mm256_add_epi32(s[2], s[3]));
    return _mm256_extract_epi32(t, 0);
}
static void peak_fma_task(void *ctx, int ith, int nth) {
    (void)ith; (void)nth;
    atomic_fetch_add(&((peak_job *)ctx)->sink, (int64_t)peak_fma(PK_REPS));
}
static void peak_fma512_task(void *ctx, int ith, int nth) {
    (void)ith; (void)nth;
    atomic_fetch_add(&((peak_job *)ctx)->sink, (int64_t)peak_fma512(PK_REPS));
}
static void peak_int8_task(void *ctx, int ith, int nth) {
    (void)ith; (void)nth;
    peak_job *j = ctx;
    atomic_fetch_add(&j->sink, peak_int8(PK_REPS / 4, j->w, j->a));
}
/* best of reps runs on all threads, the FMAs as wide as the tier's (zmm
 * at avx512); false if this CPU lacks AVX2 / FMA */
static bool peak_measure(core_pool *pool, int reps, kern_tier tier, double *gflop, double *gmac) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
    const bool zmm = tier >= KERN_TIER_AVX512;
    const int n = core_pool_size(pool);
    static peak_job j; /* filled once, read by every thread */
    for (size_t i = 0; i < sizeof j.w; i++) j.w[i] = (uint8_t)(i * 37);
    for (size_t i = 0; i < sizeof j.a; i++) j.a[i] = (uint8_t)(i * 11);
    *gflop = *gmac = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = core_time_ms();
        core_pool_run(pool, zmm ? peak_fma512_task : peak_fma_task, &j);
        double dt = core_time_ms() - t0;
        const double f = (double)n * PK_REPS * 64 * 8 * (zmm ? 16 : 8) * 2 / dt / 1e6;
        if (f > *gflop) *gflop = f;
        t0 = core_time_ms();
        core_pool_run(pool, peak_int8_task, &j);
        dt = core_time_ms() - t0;
        const double m = (double)n * (PK_REPS / 4) * PK_NB * 8 * 8 * 4 * 4 / dt / 1e6;
        if (m > *gmac) *gmac = m;
    }
    return true;
}
#else
static bool peak_measure(core_pool *pool, int reps, kern_tier tier, double *gflop, double *gmac) {
    (void)pool; (void)reps; (void)tier; (void)gflop; (void)gmac;
    return false;
}
#endif

static void attn_bench(int reps) {
    enum { S = 32, P = 128, L = 12, H = 12, D = 64, B = 16 };
    printf("decode attention (kern_attn_flash, T = 1, one thread): %d sequences x %d positions, %d layers, "
           "%d heads x %d, paged F16, blocks of %d interleaved across the sequences\n\n", S, P, L, H, D, B);
    printf("| blocks | ns per position-head | K/V GB/s |\n|---|--:|--:|\n");
    static uint16_t row[H * D];
    static float q[H * D], out[H * D];
    for (int i = 0; i < H * D; i++) row[i] = kern_fp32_to_fp16(frand()), q[i] = frand();
    const kern_attn_dims d = {1, H, H, D, P - 1, 0};
    void *scratch = malloc(kern_attn_flash_scratch_bytes(&d));
    for (int rm = 1; rm >= 0; rm--) {
        kvant_status st;
        const kv_pool_params pp = {.n_layers = L, .n_kv_heads = H, .head_dim = D, .type = KT_F16, .block_size = B,
                                   .n_blocks = S * (P / B), .max_ctx = P, .max_seqs = S, .row_major = rm};
        kv_pool *p = kv_pool_new(&pp, &st);
        if (!p || !scratch) die_st(&st);
        kv_seq *seq[S];
        for (int s = 0; s < S; s++)
            if (!(seq[s] = kv_seq_new(p, &st))) die_st(&st);
        for (int pos = 0; pos < P; pos++) /* one token per sequence per step, as decoding */
            for (int s = 0; s < S; s++) {
                if (kv_seq_reserve(p, seq[s], 1, &st) != KVANT_OK) die_st(&st);
                for (int l = 0; l < L; l++) {
                    uint8_t *k, *v;
                    kv_pool_row(p, seq[s], l, pos, &k, &v);
                    const size_t hs = p->head_stride ? p->head_stride : (size_t)D * 2;
                    for (int h = 0; h < H; h++) {
                        memcpy(k + h * hs, row + h * D, (size_t)D * 2);
                        memcpy(v + h * hs, row + h * D, (size_t)D * 2);
                    }
                }
                const int32_t tok = pos;
                kv_seq_commit(p, seq[s], &tok, 1);
            }
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            const double t0 = core_time_ms();
            for (int l = 0; l < L; l++)
                for (int s = 0; s < S; s++) {
                    kern_kv_view v;
                    kv_pool_view(p, seq[s], l, &v);
                    kern_attn_flash(NULL, scratch, q, &v, out, &d);
                }
            const double dt = core_time_ms() - t0;
            if (dt < best) best = dt;
        }
        const double n = (double)S * P * L * H;
        printf("| %s | %.1f | %.1f |\n", rm ? "row-major" : "head-major", best * 1e6 / n, n * 2 * D * 2 / best / 1e6);
        fflush(stdout);
        kv_pool_free(p);
    }
    free(scratch);
}

/* Decode attention at depth: ONE sequence of P cached positions (paged F16,
 * head-major blocks of 16; --depth, default 8192), L layers (--layers,
 * default 4: 96 MiB of stories110M K/V, inside a large L3; 12 is the
 * model's 288 MiB), with 1 and `threads` threads: the
 * K/V bytes read per second, to set beside kvant-stream's read bandwidth.
 * Shapes: stories110M (12 heads, MHA), tinyllama (32 query heads on 4 KV
 * heads) and an MQA head (8 on 1, gemma3-1b's KV layout), where only the
 * chunk split (flash-decoding) lets two threads share the work. */
static void attn_depth_bench(int threads, int reps, int P, int L, int tile, const char *only) {
    enum { B = 16 };
    const int shapes[][3] = {{12, 12, 64}, {32, 4, 64}, {8, 1, 256}}; /* H, Hkv, D */
    const char *names[] = {"stories110M (12/12 x 64)", "tinyllama (32/4 x 64)", "MQA (8/1 x 256)"};
    printf("\ndecode attention at depth %d (kern_attn_flash, T = 1, one sequence, paged F16 head-major, %d layers)\n\n"
           "| shape | threads | us per layer | K/V GB/s | split calls |\n|---|--:|--:|--:|--:|\n", P, L);
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const int H = shapes[si][0], Hkv = shapes[si][1], D = shapes[si][2];
        if (only && strncmp(names[si], only, strlen(only))) continue;
        kvant_status st;
        const kv_pool_params pp = {.n_layers = L, .n_kv_heads = Hkv, .head_dim = D, .type = KT_F16, .block_size = B,
                                   .n_blocks = P / B + 1, .max_ctx = P + B, .max_seqs = 1};
        kv_pool *p = kv_pool_new(&pp, &st);
        if (!p) die_st(&st);
        kv_seq *seq = kv_seq_new(p, &st);
        if (!seq || kv_seq_reserve(p, seq, P, &st) != KVANT_OK) die_st(&st);
        const size_t hs = p->head_stride ? p->head_stride : (size_t)D * 2;
        for (int pos = 0; pos < P; pos++)
            for (int l = 0; l < L; l++) {
                uint8_t *k, *v;
                kv_pool_row(p, seq, l, pos, &k, &v);
                for (int h = 0; h < Hkv; h++)
                    for (int e = 0; e < D; e++) {
                        ((uint16_t *)(k + h * hs))[e] = kern_fp32_to_fp16(frand());
                        ((uint16_t *)(v + h * hs))[e] = kern_fp32_to_fp16(frand());
                    }
            }
        int32_t *toks = calloc(P, sizeof *toks);
        kv_seq_commit(p, seq, toks, P);
        free(toks);
        float *q = malloc(sizeof(float) * H * D), *out = malloc(sizeof(float) * H * D);
        for (int i = 0; i < H * D; i++) q[i] = frand();
        const kern_attn_dims d = {1, H, Hkv, D, P - 1, tile};
        for (int nt = 1; nt <= threads; nt += threads > 1 ? threads - 1 : 1) {
            core_pool *pool = core_pool_new(nt);
            void *scratch = malloc((size_t)nt * kern_attn_flash_scratch_bytes(&d));
            const int64_t s0 = kern_attn_flash_split_calls();
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                const double t0 = core_time_ms();
                for (int l = 0; l < L; l++) {
                    kern_kv_view v;
                    kv_pool_view(p, seq, l, &v);
                    kern_attn_flash(pool, scratch, q, &v, out, &d);
                }
                const double dt = core_time_ms() - t0;
                if (dt < best) best = dt;
            }
            const double bytes = 2.0 * P * Hkv * D * 2 * L;
            printf("| %s | %d | %.0f | %.1f | %lld |\n", names[si], nt, best * 1e3 / L, bytes / best / 1e6,
                   (long long)(kern_attn_flash_split_calls() - s0));
            fflush(stdout);
            free(scratch);
            core_pool_free(pool);
        }
        free(q); free(out);
        kv_pool_free(p);
    }
}

int main(int argc, char **argv) {
    int threads = 2, reps = 5, depth = 8192, layers = 4, tile = 0, step_nh = 0, step_nt = 0, scores = 0;
    const char *shape = NULL;
    bool attn = false, peak = false;
    const char *types_arg = "F16,Q8_0,Q4_0,Q4_K,Q6_K";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types_arg = argv[++i];
        else if (!strcmp(argv[i], "--attn")) attn = true;
        else if (!strcmp(argv[i], "--depth") && i + 1 < argc) depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tile") && i + 1 < argc) tile = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) shape = argv[++i];
        else if (!strcmp(argv[i], "--step") && i + 1 < argc) {
            if (!strcmp(argv[++i], "ahead")) step_nh = -1;
            else if (sscanf(argv[i], "%dx%d", &step_nh, &step_nt) != 2 || step_nh < 1 || step_nt < 1 ||
                     step_nh * step_nt > 8) {
                fprintf(stderr, "kvant-kernels: --step wants HEADSxTILES, at most 8 in all (e.g. 4x1, 2x4), or ahead\n");
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--scores") && i + 1 < argc) {
            scores = atoi(argv[++i]);
            if (scores != 256 && scores != 512) {
                fprintf(stderr, "kvant-kernels: --scores wants 256 or 512\n");
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--peak")) peak = true;
        else {
            const bool help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
            fprintf(help ? stdout : stderr, "usage: kvant-kernels [-t THREADS] [-r REPS] [--peak] [--types F16,Q8_0,Q4_0,Q4_K,Q6_K]\n"
                            "       kvant-kernels --attn [-t THREADS] [-r REPS] [--depth 8192] [--layers 4] [--tile 0 = default]\n"
                            "                     [--shape stories110M|tinyllama|MQA] [--step HEADSxTILES: a decode step's\n"
                            "                     KV heads and tiles per head, or ahead: one head and tile, the next\n"
                            "                     step's rows asked for meanwhile (default: the CPU's, kernels/attn_flash.c)]\n"
                            "                     [--scores 256|512: the avx512 tier's attention scores in 256- or\n"
                            "                     512-bit registers, the same bits (default: the CPU's)]\n");
            return help ? 0 : 2;
        }
    }
    if (threads < 1 || reps < 1 || depth < 16 || layers < 1) {
        fprintf(stderr, "kvant-kernels: -t, -r and --layers must be >= 1, --depth >= 16\n");
        return 2;
    }
    if (attn) {
        if (step_nh > 0) kern_attn_flash_set_step(step_nh, step_nt);
        if (step_nh) kern_attn_flash_set_ahead(step_nh < 0);
        if (scores) kern_attn_flash_set_zmm_scores(scores == 512);
        if (!shape) attn_bench(reps);
        attn_depth_bench(threads, reps, depth, layers, tile, shape);
        return 0;
    }
    if (scores) fprintf(stderr, "kvant-kernels: --scores applies to --attn only; ignored\n");
    core_pool *pool = core_pool_new(threads);
    const int64_t K = 4096, N_dec = 16384, N_pre = 1024, T = 64; /* decode: 32..128 MiB of weights */
    float *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N_dec); /* N_dec >= N_pre, N_l3 */
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    for (int64_t i = 0; i < T * K; i++) x[i] = frand();
    const kern_tier best = kern_active_tier(); /* the best this CPU runs, or KVANT_TIER's */
    double pk_flop = 0, pk_mac = 0;
    if (peak && !peak_measure(pool, reps, best, &pk_flop, &pk_mac)) {
        fprintf(stderr, "kvant-kernels: --peak needs an x86-64 CPU with AVX2 and FMA\n");
        peak = false;
    }
    if (peak)
        printf("peak, %d threads: FP32 FMA (%s) %.1f GFLOP/s (%.1f GMAC/s); int8 x int8 dot (the Q8_0 tile's instructions, L1) %.1f GMAC/s\n",
               threads, best >= KERN_TIER_AVX512 ? "zmm" : "ymm", pk_flop, pk_flop / 2, pk_mac);
    printf("threads %d, K %lld; decode: T=1, N=%lld (GB/s of weights); prefill: T=%lld, N=%lld (GMAC/s)\n\n", threads,
           (long long)K, (long long)N_dec, (long long)T, (long long)N_pre);
    printf("| type | kernel | decode GB/s | decode L3 GB/s | prefill GMAC/s |\n|---|---|--:|--:|--:|\n");
    char list[256];
    snprintf(list, sizeof list, "%s", types_arg);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int type = -1;
        for (int t = 0; t < KT_KVANT_END; t++)
            if (kern_type_get(t) && !strcmp(kern_type_get(t)->name, tok)) type = t;
        if (type < 0 || !kern_type_get(type)->from_float_ref) {
            fprintf(stderr, "kvant-kernels: unknown or unquantizable type %s\n", tok);
            return 2;
        }
        const double wbytes = (double)kern_row_bytes(type, K) * (double)N_dec;
        void *Wd = make_weights(type, N_dec, K), *Wp = make_weights(type, N_pre, K);
        for (int tier = KERN_TIER_REF; tier <= (int)best; tier++) {
            kern_set_tier((kern_tier)tier);
            const int r = tier == KERN_TIER_REF ? 1 : reps; /* _ref is slow: one run */
            const double dd = time_mm(pool, ROWS, Wd, type, x, y, 1, N_dec, K, scratch, r);
            const double dp = time_mm(pool, ROWS, Wp, type, x, y, (int)T, N_pre, K, scratch, r);
            printf("| %s | rows %s | %.1f | - | %.1f |\n", tok, kern_tier_name((kern_tier)tier), wbytes / dd / 1e6,
                   (double)N_pre * K * T / dp / 1e6);
            fflush(stdout);
        }
        kern_set_tier(best);
        if (kern_pack_supported(type) && kern_pack_fits(type, K)) {
            /* the L3 case: the first rows of the decode matrix, ~8 MiB, whole 8-row groups */
            const int64_t N_l3 = ((int64_t)(8 << 20) / (int64_t)kern_row_bytes(type, K)) & ~(int64_t)7;
            void *Pd = pack(Wd, type, N_dec, K), *Pp = pack(Wp, type, N_pre, K), *Pc = pack(Wd, type, N_l3, K);
            /* the packed tiles at the top tier and, below it, at avx2 (the
             * table's AVX2 vs AVX-512 per type) */
            const kern_tier ptiers[2] = {KERN_TIER_AVX2, best};
            for (int pi = best > KERN_TIER_AVX2 ? 0 : 1; pi < 2; pi++) {
                kern_set_tier(ptiers[pi]);
                const double dd = time_mm(pool, PACKED, Pd, type, x, y, 1, N_dec, K, scratch, reps);
                const double dc = time_mm(pool, PACKED, Pc, type, x, y, 1, N_l3, K, scratch, 4 * reps);
                const double dp = time_mm(pool, PACKED, Pp, type, x, y, (int)T, N_pre, K, scratch, reps);
                const double gm = (double)N_pre * K * T / dp / 1e6;
                printf("| %s | packed %s | %.1f | %.1f | %.1f", tok, kern_tier_name(ptiers[pi]), wbytes / dd / 1e6,
                       (double)kern_row_bytes(type, K) * (double)N_l3 / dc / 1e6, gm);
                if (peak && (type == KT_F16 || type == KT_Q8_0)) { /* the ceiling again, in the same minute */
                    double f, m;
                    peak_measure(pool, reps, ptiers[pi], &f, &m);
                    const double pk = type == KT_F16 ? f / 2 : m;
                    printf(" (%.0f%% of %.1f peak)", 100 * gm / pk, pk);
                }
                printf(" |\n");
            }
            kern_set_tier(best);
            const double rd = time_mm(pool, PACKED_REF, Pd, type, x, y, 1, N_dec, K, scratch, 1);
            const double rp = time_mm(pool, PACKED_REF, Pp, type, x, y, (int)T, N_pre, K, scratch, 1);
            printf("| %s | packed plain-C ref (1 thread) | %.1f | - | %.1f |\n", tok, wbytes / rd / 1e6,
                   (double)N_pre * K * T / rp / 1e6);
            fflush(stdout);
            free(Pd); free(Pp); free(Pc);
        }
        free(Wd); free(Wp);
    }
    free(x); free(y); free(scratch);
    core_pool_free(pool);
    return 0;
}
