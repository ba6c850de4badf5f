/* test_kquants.c - the K-quants (Q2_K..Q6_K, Q8_K) against outside ground
 * truth and against their own derived bounds:
 *  1. quantization bit-exact vs llama.cpp's files (same F32 weights);
 *  2. dequantization round trip: every weight decodes to the grid point
 *     nearest to it, and the RMS error is within the grid's noise;
 *  3. vec_dot_ref vs dequantize(x) . dequantize(y) in double;
 *  4. fast matmul (Q8_K activations, threads) vs kern_matmul_ref;
 *  5. model logits vs llama.cpp's on the kq-* files.
 * u = 2^-24 (float unit roundoff) throughout. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "format/gguf.h"
#include "kernels/kernels.h"
#include "kernels/quants.h"
#include "kvant.h"

#define U 0x1p-24

static const int k_types[] = {KT_Q2_K, KT_Q3_K, KT_Q4_K, KT_Q5_K, KT_Q6_K};
#define N_KTYPES (int)(sizeof k_types / sizeof *k_types)

/* ---- test data: Gaussian (Box-Muller on a 64-bit LCG), fixed seed --------------- */
static uint64_t g_rng = 42;
static double urand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((g_rng >> 11) + 0.5) * 0x1p-53;
}
static float gauss(void) { return (float)(sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand())); }
/* n Gaussians times `scale`; with `outliers`, every 7th block of 256 gets
 * one element times 8 (heavy tails are what the scale searches are for) */
static void fill_data(float *x, int64_t n, float scale, bool outliers) {
    for (int64_t i = 0; i < n; i++) x[i] = scale * gauss();
    if (outliers)
        for (int64_t b = 0; b < n / QK_K; b += 7) x[b * QK_K + (b * 37) % QK_K] *= 8.0f;
}
static void fill(float *x, int64_t n, float scale) { fill_data(x, n, scale, true); }

/* the integer view of block b of a row of type t */
static void unpack(int t, const void *row, int64_t b, kern_kblock *u) {
    const uint8_t *p = (const uint8_t *)row + (size_t)b * kern_type_get(t)->type_size;
    switch (t) {
    case KT_Q2_K: kern_unpack_q2_k((const block_q2_K *)p, u); break;
    case KT_Q3_K: kern_unpack_q3_k((const block_q3_K *)p, u); break;
    case KT_Q4_K: kern_unpack_q4_k((const block_q4_K *)p, u); break;
    case KT_Q5_K: kern_unpack_q5_k((const block_q5_K *)p, u); break;
    case KT_Q6_K: kern_unpack_q6_k((const block_q6_K *)p, u); break;
    default: fail_msg("not a K type: %d", t);
    }
}
/* quant range [qlo, qhi] of each type (offsets removed, as kern_kblock holds it) */
static void qrange(int t, int *qlo, int *qhi) {
    static const int lo[] = {[KT_Q2_K] = 0, [KT_Q3_K] = -4, [KT_Q4_K] = 0, [KT_Q5_K] = 0, [KT_Q6_K] = -32};
    static const int hi[] = {[KT_Q2_K] = 3, [KT_Q3_K] = 3, [KT_Q4_K] = 15, [KT_Q5_K] = 31, [KT_Q6_K] = 31};
    *qlo = lo[t];
    *qhi = hi[t];
}

static void test_layouts(void **state) {
    (void)state;
    /* ggml's sizes (ggml-common.h), and the type table agrees with them */
    static const struct { int t; size_t bytes; } want[] = {
        {KT_Q2_K, 84}, {KT_Q3_K, 110}, {KT_Q4_K, 144}, {KT_Q5_K, 176}, {KT_Q6_K, 210}, {KT_Q8_K, 292},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const kern_type_traits *tt = kern_type_get(want[i].t);
        assert_non_null(tt);
        assert_int_equal(tt->block_size, 256);
        assert_int_equal(tt->type_size, want[i].bytes);
        assert_int_equal(kern_row_bytes(want[i].t, 768), 3 * want[i].bytes);
        assert_non_null(tt->to_float);
        assert_non_null(tt->from_float_ref);
        assert_int_equal(tt->vec_dot_type, KT_Q8_K);
        if (want[i].t != KT_Q8_K) assert_non_null(tt->vec_dot_ref);
    }
    assert_int_equal(offsetof(block_q4_K, scales), 4);
    assert_int_equal(offsetof(block_q5_K, qh), 16);
    assert_int_equal(offsetof(block_q3_K, d), 108);
    assert_int_equal(offsetof(block_q6_K, d), 208);
    assert_int_equal(offsetof(block_q8_K, bsums), 260);
}

/* ---- 1. bit-exact quantization vs llama.cpp --------------------------------------
 * kq-<T>.gguf is llama.cpp's `--pure` quantization of kq-F32.gguf (no
 * importance matrix, so llama.cpp runs quantize_row_q*_K_ref on whole
 * tensors; kq-Q4_K_M mixes Q4_K and Q6_K the same way).  For every 2-D
 * tensor of a K type we quantize the F32 tensor and compare the bytes. */
static void compare_file(const gguf_ctx *f32, const char *rel, int *n_tensors, int *n_exact, int *n_blocks,
                         int *n_blocks_diff) {
    kvant_status st;
    gguf_ctx *q = gguf_open(shared_path(rel), &st);
    if (!q) fail_msg("%s: %s", rel, st.msg);
    for (int64_t i = 0; i < gguf_n_tensors(q); i++) {
        const gguf_tensor *t = gguf_tensor_at(q, i);
        if (t->n_dims != 2 || t->type < KT_Q2_K || t->type > KT_Q6_K) continue;
        const gguf_tensor *src = gguf_find_tensor(f32, t->name);
        assert_non_null(src);
        assert_int_equal(src->type, KT_F32);
        assert_memory_equal(src->ne, t->ne, sizeof t->ne);
        const int64_t n = t->ne[0] * t->ne[1];
        const size_t bytes = kern_row_bytes(t->type, t->ne[0]) * (size_t)t->ne[1];
        assert_int_equal(bytes, t->nbytes);
        uint8_t *mine = malloc(bytes);
        kern_type_get(t->type)->from_float_ref(src->data, mine, n);
        const size_t bs = kern_type_get(t->type)->type_size;
        int diff = 0;
        for (size_t b = 0; b < bytes / bs; b++) diff += memcmp(mine + b * bs, (const uint8_t *)t->data + b * bs, bs) != 0;
        print_message("  %-18s %-24s %-4s %6zu blocks, %d differ\n", rel + 19, t->name, kern_type_name(t->type),
                      bytes / bs, diff);
        (*n_tensors)++;
        *n_exact += diff == 0;
        *n_blocks += (int)(bytes / bs);
        *n_blocks_diff += diff;
        free(mine);
    }
    gguf_close(q);
}

static void test_bit_exact_vs_llamacpp(void **state) {
    (void)state;
    kvant_status st;
    gguf_ctx *f32 = gguf_open(shared_path("reference/llamacpp/kq-F32.gguf"), &st);
    if (!f32) fail_msg("kq-F32: %s", st.msg);
    static const char *files[] = {"kq-Q2_K", "kq-Q3_K_S", "kq-Q4_K_S", "kq-Q5_K_S", "kq-Q6_K", "kq-Q4_K_M"};
    int tensors = 0, exact = 0, blocks = 0, blocks_diff = 0;
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "reference/llamacpp/%s.gguf", files[i]);
        compare_file(f32, rel, &tensors, &exact, &blocks, &blocks_diff);
    }
    print_message("bit-exact: %d of %d tensors, %d of %d blocks differ\n", exact, tensors, blocks_diff, blocks);
    assert_int_equal(tensors, 6 * 16); /* 2 layers x 7 matrices + token_embd + output */
    assert_int_equal(exact, tensors);
    gguf_close(f32);
}

/* ---- 2. round trip ------------------------------------------------------------------
 * (a) Nearest grid point.  The last step of every K quantizer re-rounds each
 *     weight against the sub-block grid it will be decoded with,
 *     G = { (d*sc) * q - dmin*mn : q in [qlo, qhi] }, with l =
 *     clamp(nearest((x + dmin*mn) / (d*sc))).  So the decoded value is the
 *     point of G nearest x, up to the float rounding of that quotient
 *     (2 roundings, relative u each, moving x by <= 2u (|x| + |dmin*mn|))
 *     and of the decode itself (2 roundings, <= 2u (|g| + |dmin*mn|)):
 *       |x - xhat| <= min_g |x - g| + 4u (|x| + |dmin*mn| + max|g|).
 *     A sub-block with d*sc = 0 has a one-point grid and keeps its search
 *     result, so the rule holds there too (G is that single point).
 *     Q8_K: q = round(x/d), d = max/-127 over 256 (float scale; q is capped
 *     at 127 only where x/d >= 127), so |x - xhat| <= |d|/2 (1 + 4u). */
static void test_round_trip_nearest(void **state) {
    (void)state;
    const int64_t n = 256 * 64;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    fill(x, n, 1.0f);
    for (int i = 0; i < N_KTYPES; i++) {
        const int t = k_types[i];
        const kern_type_traits *tt = kern_type_get(t);
        uint8_t *q = malloc(kern_row_bytes(t, n));
        tt->from_float_ref(x, q, n);
        tt->to_float(q, y, n);
        int qlo, qhi;
        qrange(t, &qlo, &qhi);
        for (int64_t b = 0; b < n / QK_K; b++) {
            kern_kblock u;
            unpack(t, q, b, &u);
            for (int e = 0; e < QK_K; e++) {
                const int s = e / u.sub;
                const float dl = u.d * u.sc[s], ml = u.dmin * u.mn[s];
                const double xe = x[b * QK_K + e], ye = y[b * QK_K + e];
                double best = INFINITY, gmax = 0;
                for (int g = qlo; g <= qhi; g++) {
                    const double v = (double)dl * g - ml;
                    best = fmin(best, fabs(xe - v));
                    gmax = fmax(gmax, fabs(v));
                }
                if (fabs(xe - ye) > best + 4 * U * (fabs(xe) + fabs(ml) + gmax))
                    fail_msg("%s block %lld elem %d: x %g decodes to %g, nearest grid point at %g", tt->name,
                             (long long)b, e, xe, ye, best);
            }
        }
        free(q);
    }
    /* Q8_K: half a step, |d| = amax/127 with the sign of -max, bsums = sums of 16 */
    block_q8_K *a = malloc(kern_row_bytes(KT_Q8_K, n));
    kern_quant_q8_k_ref(x, a, n);
    kern_dequant_q8_k_ref(a, y, n);
    for (int64_t b = 0; b < n / QK_K; b++) {
        float amax = 0, max = 0;
        for (int e = 0; e < QK_K; e++)
            if (fabsf(x[b * QK_K + e]) > amax) { amax = fabsf(x[b * QK_K + e]); max = x[b * QK_K + e]; }
        assert_true(fabs(a[b].d * -127.0 - max) <= 2 * U * amax);
        for (int e = 0; e < QK_K; e++)
            assert_true(fabs((double)x[b * QK_K + e] - y[b * QK_K + e]) <= fabs(a[b].d) / 2 * (1 + 4 * U));
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int e = 0; e < 16; e++) sum += a[b].qs[16 * g + e];
            assert_int_equal(a[b].bsums[g], sum);
        }
    }
    /* all-zero input: blocks that decode to zeros, for every type */
    memset(x, 0, sizeof(float) * QK_K);
    for (int i = 0; i <= N_KTYPES; i++) {
        const int t = i < N_KTYPES ? k_types[i] : KT_Q8_K;
        uint8_t q[512];
        memset(q, 0xAB, sizeof q);
        kern_type_get(t)->from_float_ref(x, q, QK_K);
        kern_type_get(t)->to_float(q, y, QK_K);
        for (int e = 0; e < QK_K; e++) assert_true(y[e] == 0.0f);
    }
    free(a); free(x); free(y);
}

/* (b) RMS error on N(0,1) data.  A plain grid over a sub-block has step
 *     range/(2^b - 1) (types with a minimum; range = max - min(min, 0)) or
 *     amax/2^(b-1) (symmetric Q3_K, Q6_K), and rounding noise of RMS
 *     step/sqrt(12).  With the RMS range over 16 Gaussians 3.61 (32: 4.20)
 *     and RMS amax over 16 2.13 (all by simulation), that noise is
 *       Q2_K 3.61/3/sqrt12 = 0.348   Q3_K 2.13/4/sqrt12 = 0.154
 *       Q4_K 4.20/15/sqrt12 = 0.081  Q5_K 4.20/31/sqrt12 = 0.039
 *       Q6_K 2.13/32/sqrt12 = 0.0193
 *     The scale searches minimise a weighted error, with weights |x| (Q2_K)
 *     or rms(x)+|x| (Q4_K, Q5_K) close to uniform, so they beat the plain
 *     grid's RMS; Q3_K and Q6_K weight by x^2, trading small weights'
 *     accuracy for large ones', and the quantized sub-block scales (4 bits
 *     in Q2_K) cost a little more.  Bound: the plain grid's noise x 1.1. */
static void test_round_trip_rms(void **state) {
    (void)state;
    const int64_t n = 256 * 256;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    fill_data(x, n, 1.0f, false);
    static const double plain[] = {[KT_Q2_K] = 0.348, [KT_Q3_K] = 0.154, [KT_Q4_K] = 0.081,
                                   [KT_Q5_K] = 0.039, [KT_Q6_K] = 0.0193};
    for (int i = 0; i < N_KTYPES; i++) {
        const int t = k_types[i];
        const kern_type_traits *tt = kern_type_get(t);
        uint8_t *q = malloc(kern_row_bytes(t, n));
        tt->from_float_ref(x, q, n);
        tt->to_float(q, y, n);
        double sse = 0;
        for (int64_t k = 0; k < n; k++) sse += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
        const double rms = sqrt(sse / (double)n);
        print_message("%s round trip on N(0,1): RMS error %.4f (plain grid %.4f, bound %.4f)\n", tt->name, rms,
                      plain[t], 1.1 * plain[t]);
        free(q);
        assert_true(rms <= 1.1 * plain[t]);
    }
    free(x); free(y);
}

/* ---- 3. vec_dot_ref vs the dequantized rows ------------------------------------------
 * Exact value: sum_e w_e a_e with w_e = (d sc) q - dmin mn and a_e = dy q8.
 * vec_dot_ref: exact integer sums per super-block, then per block at most 6
 * float roundings (dy*d, int->float, product, dy*dmin, product, difference),
 * then nb roundings summing blocks: error <= (6 + nb) u S with
 *   S = sum_e (|d sc q_e| + |dmin mn|) |a_e|.
 * Reference: the dequantized floats (2 roundings each for w, 1 for a) summed
 * in double: error <= 4 u S (+ double rounding, negligible).  Bound: (10 + nb) u S. */
static void test_vec_dot(void **state) {
    (void)state;
    const int64_t n = 256 * 12;
    const int64_t nb = n / QK_K;
    float *w = malloc(sizeof(float) * n), *x = malloc(sizeof(float) * n);
    float *wd = malloc(sizeof(float) * n), *xd = malloc(sizeof(float) * n);
    block_q8_K *a = malloc(kern_row_bytes(KT_Q8_K, n));
    for (int rep = 0; rep < 20; rep++) {
        fill(w, n, 0.05f * (1 + rep % 3));
        fill(x, n, 3.0f);
        if (rep % 5 == 4) /* shifted weights: large minimums */
            for (int64_t i = 0; i < n; i++) w[i] += 0.2f;
        kern_quant_q8_k_ref(x, a, n);
        kern_dequant_q8_k_ref(a, xd, n);
        for (int i = 0; i < N_KTYPES; i++) {
            const int t = k_types[i];
            const kern_type_traits *tt = kern_type_get(t);
            uint8_t *q = malloc(kern_row_bytes(t, n));
            tt->from_float_ref(w, q, n);
            tt->to_float(q, wd, n);
            double ref = 0, S = 0;
            for (int64_t b = 0; b < nb; b++) {
                kern_kblock u;
                unpack(t, q, b, &u);
                for (int e = 0; e < QK_K; e++) {
                    const int s = e / u.sub;
                    const double ae = fabs(xd[b * QK_K + e]);
                    S += (fabs((double)u.d * u.sc[s] * u.q[e]) + fabs((double)u.dmin * u.mn[s])) * ae;
                }
            }
            for (int64_t k = 0; k < n; k++) ref += (double)wd[k] * xd[k];
            float got;
            tt->vec_dot_ref(n, &got, q, a);
            const double bound = (10.0 + (double)nb) * U * S;
            if (!(fabs(got - ref) <= bound))
                fail_msg("%s rep %d: vec_dot %.9g vs dequantized %.9g (bound %.3g)", tt->name, rep, got, ref, bound);
            free(q);
        }
    }
    free(w); free(x); free(wd); free(xd); free(a);
}

/* ---- 4. fast matmul vs reference --------------------------------------------------------
 * kern_matmul rounds each activation row to Q8_K: per block of 256,
 * |dx| <= amax_b / 254 (1 + 4u) (test 2), contributing
 * sum_b amax_b/254 sum_{k in b} |w_k|.  Summation: the reference sums K
 * float products in order (<= K u sum|x w|), vec_dot_ref is within
 * (10 + nb) u S (test 3) with S <= (1 + 1/127) sum|x w| up to the
 * minimum terms; cover both with 2 (K + nb + 10) u sum(|x| (|w| + |dmin mn|)). */
static void check_matmul(int t, int T, int64_t N, int64_t K, int threads) {
    const kern_type_traits *tt = kern_type_get(t);
    const size_t rb = kern_row_bytes(t, K);
    float *wf = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * T * K);
    float *y = malloc(sizeof(float) * T * N), *yr = malloc(sizeof(float) * T * N), *row = malloc(sizeof(float) * K);
    uint8_t *w = malloc(rb * N);
    fill(wf, N * K, 0.05f);
    fill(x, T * K, 1.0f);
    for (int64_t r = 0; r < N; r++) tt->from_float_ref(wf + r * K, w + r * rb, K);
    core_pool *pool = core_pool_new(threads);
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    kern_matmul(pool, scratch, w, t, x, y, T, N, K);
    kern_matmul_ref(w, t, x, yr, T, N, K);
    for (int64_t r = 0; r < N; r++) {
        tt->to_float(w + r * rb, row, K);
        for (int i = 0; i < T; i++) {
            const float *xt = x + (size_t)i * K;
            double act = 0, mag = 0;
            for (int64_t b = 0; b < K / QK_K; b++) {
                kern_kblock u;
                unpack(t, w + r * rb, b, &u);
                double amax = 0, wsum = 0;
                for (int e = 0; e < QK_K; e++) {
                    const int64_t k = b * QK_K + e;
                    amax = fmax(amax, fabs(xt[k]));
                    wsum += fabs(row[k]);
                    mag += fabs(xt[k]) * (fabs(row[k]) + fabs((double)u.dmin * u.mn[e / u.sub]));
                }
                act += amax / 254 * (1 + 4 * U) * wsum;
            }
            const double bound = act + 2.0 * ((double)K + K / QK_K + 10) * U * mag;
            const double e = fabs((double)y[(size_t)i * N + r] - yr[(size_t)i * N + r]);
            if (!(e <= bound))
                fail_msg("%s T=%d N=%lld K=%lld: y[%d][%lld] %g vs ref %g (bound %g)", tt->name, T, (long long)N,
                         (long long)K, i, (long long)r, y[(size_t)i * N + r], yr[(size_t)i * N + r], bound);
        }
    }
    core_pool_free(pool);
    free(scratch); free(wf); free(x); free(y); free(yr); free(row); free(w);
}

static void test_matmul(void **state) {
    (void)state;
    for (int i = 0; i < N_KTYPES; i++) {
        check_matmul(k_types[i], 1, 37, 256, 1);  /* decode shape, rows not a multiple of 16 */
        check_matmul(k_types[i], 5, 64, 768, 3);  /* prefill shape, threaded */
        check_matmul(k_types[i], 1, 300, 512, 4); /* threaded decode */
    }
}

/* ---- 5. model logits vs llama.cpp ----------------------------------------------------------
 * NMSE = sum (x - ref)^2 / sum ref^2 over all logits (64 ids, one causal
 * batch), kvant vs llama.cpp on the SAME file.  Both engines multiply the
 * K-quant weights with Q8_K activations; they differ in summation order,
 * llama.cpp's F16 KV cache and its other activation roundings, which the
 * chaotic kq model amplifies.  Bound: a tenth of the type's NMSE from F32
 * (reference/llamacpp/README.md); a wrong layout, scale or bit order moves
 * the logits by at least the whole distance from F32. */
static double nmse(const float *x, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return num / den;
}

static double logits_vs_llamacpp(const char *type) {
    char rel[128];
    char *json = read_file(shared_path("reference/llamacpp/kq-ids.json"), NULL);
    int32_t ids[128];
    int n = 0; /* the file is one bare JSON array */
    for (char *q = strchr(json, '['), *end; q && *q && *q != ']' && n < 128;) {
        const long v = strtol(q + 1, &end, 10);
        if (end == q + 1) { q++; continue; }
        ids[n++] = (int32_t)v;
        q = end;
    }
    free(json);
    assert_int_equal(n, 64);
    snprintf(rel, sizeof rel, "reference/llamacpp/kq-%s.gguf", type);
    kvant_status st;
    kvant_model_params p = {.n_threads = 2};
    kvant_model *m = kvant_model_open(shared_path(rel), &p, &st);
    if (!m) fail_msg("open %s: %s", rel, st.msg);
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    snprintf(rel, sizeof rel, "reference/llamacpp/kq-%s.logits.f32", type);
    size_t sz;
    float *ref = (float *)read_file(shared_path(rel), &sz);
    assert_int_equal(sz, sizeof(float) * (size_t)n * in.vocab_size);
    kvant_seq *s = kvant_seq_new(m, n, &st);
    assert_non_null(s);
    float *lg = malloc(sz);
    assert_int_equal(kvant_forward(s, ids, n, lg, true, &st), KVANT_OK);
    const double e = nmse(lg, ref, (size_t)n * in.vocab_size);
    free(lg); free(ref);
    kvant_seq_free(s);
    kvant_model_free(m);
    return e;
}

static void test_llamacpp_logits(void **state) {
    (void)state;
    static const struct { const char *type; double bound; } kq[] = {
        {"Q2_K", 1.6e-1}, {"Q3_K_S", 8.3e-2}, {"Q4_K_S", 2.5e-2},
        {"Q5_K_S", 7.2e-3}, {"Q6_K", 2.1e-3}, {"Q4_K_M", 2.4e-2},
    };
    for (size_t i = 0; i < sizeof kq / sizeof *kq; i++) {
        const double e = logits_vs_llamacpp(kq[i].type);
        print_message("kq-%-6s NMSE vs llama.cpp %.3g (bound %.3g)\n", kq[i].type, e, kq[i].bound);
        if (!(e <= kq[i].bound)) fail_msg("kq-%s: NMSE %g > %g", kq[i].type, e, kq[i].bound);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_bit_exact_vs_llamacpp),
        cmocka_unit_test(test_round_trip_nearest),
        cmocka_unit_test(test_round_trip_rms),
        cmocka_unit_test(test_vec_dot),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_llamacpp_logits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
