/* test_tiers.c - every kernel tier this CPU runs (ref, scalar, avx2,
 * avx512) against the _ref spec, for every computable type:
 *   - dispatch: kern_set_tier refuses tiers the CPU lacks, every tier's
 *     table is complete, one-time initialisation is thread-safe;
 *   - from_float (the activation quantizers): the SAME bytes as _ref;
 *   - to_float: the same floats as _ref;
 *   - vec_dot: equal to _ref within a bound derived below (blocks are
 *     summed in another order / with FMA; the integer parts are exact);
 *   - gemm (register-blocked tiles): bit-identical to the tier's vec_dot.
 * Tiers the CPU lacks are skipped (and said so), but ref and scalar always
 * run, so the suite passes, and means something, on any x86-64.
 *
 * Data: random rows, per-block magnitudes from 2^-30 to 2^20, zeros, all
 * equal, exact rounding ties (.5 for Q8, half-ulp midpoints for F16/BF16),
 * huge and small magnitudes (subnormal F16), one outlier per block, random
 * bit patterns, and for F16/BF16 quantizers inf, NaN and -0; rows of one
 * block, an odd number of blocks, 4096 and 11008 elements; buffers that are
 * deliberately not 32-byte aligned, with guard bytes after each output. */
#include <math.h>
#include <pthread.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/quants.h"
#include "kernels/types.h"

static const int k_dot_types[] = {KT_F32, KT_F16, KT_BF16, KT_Q8_0, KT_Q4_0, KT_Q5_0, KT_Q4_1, KT_Q5_1};
static const int64_t k_block_sizes[] = {32, 96, 4096, 11008};             /* 1, 3, 128, 344 blocks */
static const int64_t k_float_sizes[] = {1, 7, 31, 33, 100, 4096, 11008}; /* F32/F16/BF16: tails too */
enum { NMAX = 11008 + 64, GUARD = 64 }; /* longest row, with room for a tail */

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static float frand(void) { return (float)((rnd() >> 40) / 8388608.0 - 1.0); } /* uniform in [-1, 1) */

static bool is_float_type(int t) { return t == KT_F32 || t == KT_F16 || t == KT_BF16; }

/* ---- data patterns ------------------------------------------------------------- */
enum { P_RANDOM, P_MIXED, P_ZERO, P_EQUAL, P_TIES, P_HUGE, P_SMALL, P_OUTLIER, P_BITS, P_SPECIAL, P_COUNT };
static const char *k_pattern_names[] = {"random", "mixed", "zero",  "equal", "ties",
                                        "huge",   "small", "outlier", "bits",  "special"};

/* largest / smallest scale a row of this type can take without its
 * (fp16) block scales or float sums overflowing */
static float huge_scale(int t) { return t == KT_F32 || t == KT_BF16 ? 1e15f : t == KT_F16 ? 3e4f : 1e3f; }
static float small_scale(int t) { return t == KT_F32 || t == KT_BF16 ? 1e-15f : 1e-6f; }

/* P_MIXED: per-block magnitudes 2^-30 .. 2^max_exp, kept below where fp16
 * scales (Q types: d, and s = d * sum(q) of Q8_1) or halves overflow */
static int max_exp(int t) { return t == KT_F32 || t == KT_BF16 ? 20 : t == KT_F16 ? 15 : 10; }

/* a random finite float with exponent in [-e, e] (or now and then a
 * subnormal), random sign and mantissa */
static float rand_bits_float(int e) {
    const uint64_t r = rnd();
    uint32_t bits = (uint32_t)(r & 0x807fffffu);
    if ((r >> 32) % 64 == 0) return kern_fp32_from_bits(bits); /* subnormal (or zero) */
    const int ex = (int)((r >> 40) % (uint64_t)(2 * e + 1)) - e;
    return kern_fp32_from_bits(bits | (uint32_t)(ex + 127) << 23);
}

/* a value exactly halfway between two neighbouring representable values
 * of `t` (F16, BF16) or, for the Q8 types, x*id = k + 0.5 given that the
 * block's first element (amax) is +-127 so that d = 1, id = 1, or one ulp
 * beside such a tie (0.49999997 + 0.5 rounds to 1 in float: a naive
 * "add 0.5 and truncate" gets it wrong) */
static float tie_value(int t) {
    if (t == KT_F16) {
        const uint16_t h = (uint16_t)(rnd() % 0x7bff) | (uint16_t)(rnd() & 0x8000); /* finite, below max */
        const double a = kern_fp16_to_fp32(h), b = kern_fp16_to_fp32((uint16_t)(h + 1));
        return (float)((a + b) / 2); /* 12 significant bits: exact in float */
    }
    if (t == KT_BF16) {
        const uint32_t ex = 127 - 50 + (uint32_t)(rnd() % 101); /* 2^-50 .. 2^50: products stay finite */
        const uint32_t hi = (uint32_t)(rnd() & 0x807f) | ex << 7;
        return kern_fp32_from_bits(hi << 16 | 0x8000);
    }
    const float v = (float)((int)(rnd() % 254) - 127) + 0.5f; /* a tie, or the float just below / above it */
    const uint64_t r = rnd() % 3;
    return r == 0 ? v : nextafterf(v, r == 1 ? 0.0f : 2 * v);
}

/* fills x[n] with pattern p for rows that will be converted to type t */
static void gen(float *x, int64_t n, int p, int t) {
    static const float special[] = {INFINITY, -INFINITY, NAN, -NAN, -0.0f, 65504.0f, 65519.99f, 65520.0f,
                                    -65520.0f, 0x1p-25f, 0x3p-25f, 0x1p-149f, 3.4e38f};
    float blk = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) blk = ldexpf(1.0f, (int)(rnd() % (uint64_t)(31 + max_exp(t))) - 30); /* P_MIXED */
        switch (p) {
        case P_RANDOM: x[i] = frand(); break;
        case P_MIXED: x[i] = frand() * blk; break;
        case P_ZERO: x[i] = 0.0f; break;
        case P_EQUAL: x[i] = 0.3f; break;
        case P_TIES: x[i] = i % 32 == 0 && !is_float_type(t) ? (rnd() & 1 ? 127.0f : -127.0f) : tie_value(t); break;
        case P_HUGE: x[i] = frand() * huge_scale(t); break;
        case P_SMALL: x[i] = frand() * small_scale(t); break;
        case P_OUTLIER: x[i] = i % 32 == 5 ? 50.0f : frand(); break;
        case P_BITS:
            x[i] = t == KT_F32 || t == KT_BF16 ? rand_bits_float(50)
                   : t == KT_F16             ? kern_fp16_to_fp32((uint16_t)(rnd() % 0x7c00 | (rnd() & 0x8000)))
                                             : frand() * blk;
            break;
        case P_SPECIAL: x[i] = rnd() % 4 ? frand() : special[rnd() % (sizeof special / sizeof *special)]; break;
        }
    }
}

/* ---- dispatch ----------------------------------------------------------------------- */
static void *first_call(void *arg) {
    *(kern_tier *)arg = kern_best_tier();
    return NULL;
}

/* What this CPU should get, found independently of dispatch.c: CPUID for
 * the instruction sets, XGETBV for the OS saving the YMM (XCR0 bits 1-2)
 * and ZMM (bits 5-7) registers. */
static kern_tier expected_tier(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return KERN_TIER_SCALAR;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), f16c = c & (1u << 29);
    uint64_t xcr0 = 0;
    if (osxsave) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (uint64_t)hi << 32 | lo;
    }
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return KERN_TIER_SCALAR;
    const bool avx2 = b & (1u << 5);
    if (!(avx2 && fma && f16c && (xcr0 & 0x6) == 0x6)) return KERN_TIER_SCALAR;
    const bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31)) /* F DQ BW VL */
                        && (c & (1u << 11)) && (xcr0 & 0xe6) == 0xe6;                                 /* VNNI */
    return avx512 ? KERN_TIER_AVX512 : KERN_TIER_AVX2;
#else
    return KERN_TIER_SCALAR;
#endif
}

static void test_dispatch(void **state) {
    (void)state;
    /* first use from several threads at once: one initialisation, one answer */
    pthread_t th[4];
    kern_tier seen[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, first_call, &seen[i]), 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    const kern_tier best = kern_best_tier();
    for (int i = 0; i < 4; i++) assert_int_equal(seen[i], best);

    assert_int_equal(best, expected_tier());
    print_message("best tier on this CPU: %s\n", kern_tier_name(best));
    /* the report names the same tier and the XCR0 state that chose it */
    const char *rep = kern_cpu_report();
    print_message("%s\n", rep);
    char want[64];
    snprintf(want, sizeof want, "best tier %s", kern_tier_name(best));
    assert_non_null(strstr(rep, want));
    if (best >= KERN_TIER_AVX512) assert_non_null(strstr(rep, "avx512 on"));

    const kern_tier start = kern_active_tier();
    for (int tier = 0; tier < KERN_TIER_COUNT; tier++) {
        const bool ok = tier <= (int)best;
        assert_int_equal(kern_set_tier((kern_tier)tier), ok);
        assert_int_equal(kern_active_tier(), ok ? (kern_tier)tier : kern_active_tier());
        for (int t = 0; t < KT_GGML_COUNT; t++) {
            const kern_type_traits *tt = kern_type_get(t);
            const kern_type_ops *o = kern_ops_tier(t, (kern_tier)tier);
            if (!tt || !ok) { assert_null(o); continue; }
            assert_non_null(o);
            if (ok && kern_active_tier() == (kern_tier)tier) assert_ptr_equal(kern_ops(t), o);
            /* complete: every member the spec has, the tier has */
            assert_true(!tt->to_float == !o->to_float);
            assert_true(!tt->from_float_ref == !o->from_float);
            assert_true(!tt->vec_dot_ref == !o->vec_dot);
        }
        if (!ok) assert_false(kern_set_tier((kern_tier)tier)); /* refused again, active unchanged */
    }
    assert_false(kern_set_tier((kern_tier)KERN_TIER_COUNT));
    assert_false(kern_set_tier((kern_tier)-1));
    assert_true(kern_set_tier(start));
    assert_null(kern_ops_tier(-1, KERN_TIER_REF));
    assert_null(kern_ops_tier(KT_GGML_COUNT, KERN_TIER_REF));
    assert_null(kern_ops_tier(4, KERN_TIER_REF)); /* a number ggml retired */
    assert_null(kern_ops_tier(KT_F32, KERN_TIER_COUNT));
    assert_string_equal(kern_tier_name(KERN_TIER_AVX512), "avx512");
    assert_string_equal(kern_tier_name(KERN_TIER_COUNT), "unknown");
    /* the REF tier is the spec itself */
    for (int t = 0; t < KT_GGML_COUNT; t++) {
        const kern_type_traits *tt = kern_type_get(t);
        if (!tt) continue;
        const kern_type_ops *o = kern_ops_tier(t, KERN_TIER_REF);
        assert_true(o->to_float == tt->to_float && o->from_float == tt->from_float_ref && o->vec_dot == tt->vec_dot_ref);
    }
}

/* ---- buffers: not 32-byte aligned, with guard bytes after the row -------------------- */
typedef struct {
    uint8_t *mem, *p; /* p = mem + 4: misaligned for every vector width */
} buf;
static buf buf_new(size_t bytes) {
    buf b = {malloc(bytes + GUARD + 8), NULL};
    assert_non_null(b.mem);
    b.p = b.mem + 4;
    return b;
}
static void guard_set(buf b, size_t bytes) { memset(b.p + bytes, 0xA5, GUARD); }
static void guard_check(buf b, size_t bytes) {
    for (int i = 0; i < GUARD; i++)
        if (b.p[bytes + (size_t)i] != 0xA5) fail_msg("wrote past the end of the row (byte %d)", i);
}

static int tiers_run(int *ran) {
    int count = 0;
    for (int tier = 0; tier < KERN_TIER_COUNT; tier++) {
        ran[tier] = kern_ops_tier(KT_F32, (kern_tier)tier) != NULL;
        if (!ran[tier]) print_message("tier %s: not on this CPU, skipped\n", kern_tier_name((kern_tier)tier));
        count += ran[tier];
    }
    assert_true(ran[KERN_TIER_REF] && ran[KERN_TIER_SCALAR]);
    return count;
}

/* ---- quantizers: same bytes as _ref -------------------------------------------------
 * Finite inputs only for the Q8 types: _ref converts round(x / d) with a
 * C cast, undefined for NaN or inf; F16/BF16 define every input (NaN
 * included), so P_SPECIAL runs for them. */
static void test_from_float(void **state) {
    (void)state;
    int ran[KERN_TIER_COUNT];
    tiers_run(ran);
    float *x = malloc(sizeof(float) * NMAX);
    buf want = buf_new((size_t)NMAX * 4), got = buf_new((size_t)NMAX * 4);
    int checked = 0;
    for (int t = 0; t < KT_GGML_COUNT; t++) {
        const kern_type_traits *tt = kern_type_get(t);
        if (!tt || !tt->from_float_ref) continue;
        const bool flt = is_float_type(t);
        for (size_t si = 0; si < (flt ? sizeof k_float_sizes : sizeof k_block_sizes) / sizeof(int64_t); si++) {
            const int64_t n = flt ? k_float_sizes[si] : k_block_sizes[si];
            if (n % tt->block_size) continue; /* K-quants: super-blocks of 256 */
            for (int p = 0; p < P_COUNT; p++) {
                if (p == P_SPECIAL && t != KT_F16 && t != KT_BF16) continue;
                gen(x, n, p, t);
                const size_t rb = kern_row_bytes(t, n);
                tt->from_float_ref(x, want.p, n);
                for (int tier = 1; tier < KERN_TIER_COUNT; tier++) {
                    if (!ran[tier]) continue;
                    guard_set(got, rb);
                    kern_ops_tier(t, (kern_tier)tier)->from_float(x, got.p, n);
                    guard_check(got, rb);
                    if (memcmp(got.p, want.p, rb)) {
                        size_t i = 0;
                        while (got.p[i] == want.p[i]) i++;
                        fail_msg("%s from_float, tier %s, n=%lld, %s data: byte %zu is %02x, _ref %02x", tt->name,
                                 kern_tier_name((kern_tier)tier), (long long)n, k_pattern_names[p], i, got.p[i],
                                 want.p[i]);
                    }
                    checked++;
                }
            }
        }
    }
    print_message("%d quantizer rows byte-equal to _ref\n", checked);
    free(x); free(want.mem); free(got.mem);
}

/* F16 conversion of a sweep of float bit patterns (every 65537th, both
 * signs, all exponents) and of every fp16 midpoint neighbourhood */
static void test_f16_sweep(void **state) {
    (void)state;
    int ran[KERN_TIER_COUNT];
    tiers_run(ran);
    enum { M = 4 * 65536 };
    float *x = malloc(sizeof(float) * M);
    buf want = buf_new(2 * M), got = buf_new(2 * M);
    int64_t m = 0;
    for (uint64_t b = 0; b < (1ull << 32) && m < 65536; b += 65537) x[m++] = kern_fp32_from_bits((uint32_t)b);
    for (uint32_t h = 0; h < 65536; h += 1) { /* the midpoint below each half and its two float neighbours */
        const float f = kern_fp16_to_fp32((uint16_t)h);
        if (!isfinite(f)) continue;
        x[m++] = f;
        x[m++] = nextafterf(f, 0.0f);
        x[m++] = nextafterf(f, INFINITY);
    }
    static const int types[] = {KT_F16, KT_BF16};
    for (int k = 0; k < 2; k++) {
        const int t = types[k];
        kern_type_get(t)->from_float_ref(x, want.p, m);
        for (int tier = 1; tier < KERN_TIER_COUNT; tier++) {
            if (!ran[tier]) continue;
            kern_ops_tier(t, (kern_tier)tier)->from_float(x, got.p, m);
            for (int64_t i = 0; i < m; i++)
                if (memcmp(got.p + 2 * i, want.p + 2 * i, 2))
                    fail_msg("%s tier %s: %a -> %02x%02x, _ref %02x%02x", kern_type_name(t),
                             kern_tier_name((kern_tier)tier), x[i], got.p[2 * i + 1], got.p[2 * i], want.p[2 * i + 1],
                             want.p[2 * i]);
        }
    }
    free(x); free(want.mem); free(got.mem);
}

/* ---- random rows in a type's own layout ---------------------------------------------- */
/* a finite fp16 scale of magnitude 2^-14 .. 2^5 (or zero now and then) */
static kern_half rand_scale(void) {
    const float v = rnd() % 32 == 0 ? 0.0f : frand() * ldexpf(1.0f, (int)(rnd() % 20) - 14);
    return kern_fp32_to_fp16(v);
}

/* n elements of type t with random bytes (every nibble, bit and int8 value,
 * -128 included) and, for the blocks of 32, random finite scales */
static void rand_row(int t, void *row, int64_t n) {
    const size_t rb = kern_row_bytes(t, n);
    uint8_t *p = row;
    for (size_t i = 0; i < rb; i++) p[i] = (uint8_t)rnd();
    if (is_float_type(t)) { /* finite values only */
        float *x = malloc(sizeof(float) * (size_t)n);
        gen(x, n, P_BITS, t);
        kern_type_get(t)->from_float_ref(x, row, n);
        free(x);
        return;
    }
    if (kern_type_get(t)->block_size != 32) return; /* K-quants: random bytes (only to_float reads them here) */
    const size_t bs = kern_type_get(t)->type_size;
    const bool has_min = t == KT_Q4_1 || t == KT_Q5_1;
    for (int64_t b = 0; b < n / 32; b++) {
        const kern_half d = rand_scale(), m = rand_scale();
        memcpy(p + b * bs, &d, 2);
        if (has_min) memcpy(p + b * bs + 2, &m, 2);
    }
}

/* ---- to_float: the same values as _ref (NaN: any NaN) -------------------------------- */
static void test_to_float(void **state) {
    (void)state;
    int ran[KERN_TIER_COUNT];
    tiers_run(ran);
    buf row = buf_new((size_t)NMAX * 4);
    float *want = malloc(sizeof(float) * NMAX), *got = malloc(sizeof(float) * NMAX);
    for (int t = 0; t < KT_GGML_COUNT; t++) {
        const kern_type_traits *tt = kern_type_get(t);
        if (!tt || !tt->to_float) continue;
        for (size_t si = 0; si < sizeof k_block_sizes / sizeof *k_block_sizes; si++) {
            const int64_t n = k_block_sizes[si] + (is_float_type(t) ? 3 : 0);
            if (n % tt->block_size) continue;
            rand_row(t, row.p, n);
            if (t == KT_F16 || t == KT_BF16) /* every bit pattern, inf and NaN too */
                for (int64_t i = 0; i < n; i++) { row.p[2 * i] = (uint8_t)rnd(); row.p[2 * i + 1] = (uint8_t)rnd(); }
            tt->to_float(row.p, want, n);
            for (int tier = 1; tier < KERN_TIER_COUNT; tier++) {
                if (!ran[tier]) continue;
                kern_ops_tier(t, (kern_tier)tier)->to_float(row.p, got, n);
                for (int64_t i = 0; i < n; i++)
                    if (!(isnan(want[i]) ? isnan(got[i]) : kern_fp32_to_bits(got[i]) == kern_fp32_to_bits(want[i])))
                        fail_msg("%s to_float tier %s: [%lld] %a, _ref %a", tt->name, kern_tier_name((kern_tier)tier),
                                 (long long)i, got[i], want[i]);
            }
        }
    }
    free(row.mem); free(want); free(got);
}

/* ---- vec_dot: equal to _ref up to float summation order ------------------------------
 * Both _ref and a fast tier compute S = sum over terms of exactly known
 * values and differ only in how the float roundings fall:
 *  - quantized pairs: the terms are, per block b, c_b = sumi_b * D_b
 *    (+ m_b * s_b for Q4_1/Q5_1), with D_b = d_x * d_y and m_b * s_b
 *    products of two halves (exact in float) and sumi_b an exact integer.
 *    _ref adds the nb = n/32 terms in order with <= 2 roundings each; a
 *    fast tier splits sumi_b into integer lane sums P_bl (exact,
 *    |P_bl| <= sum over the lane of |q_x q_y|), scales and accumulates them
 *    lane-wise (a multiply, an FMA or an add: at most two roundings per
 *    block), then combines the lanes and adds the m*s sum: fewer than
 *    nb + 16 roundings on every path.  With gamma_k = k u / (1 - k u), u = 2^-24 (Higham,
 *    "Accuracy and Stability of Numerical Algorithms", 3.1), each result is
 *    within gamma_{nb+16} * A of S, where
 *        A = sum_b (D_b * sum_j |q_x,j q_y,j| + |m_b s_b|),
 *    so |fast - ref| <= 2 gamma_{nb+16} A.
 *  - F32: terms x_i y_i; _ref: n roundings of products and sums; fast:
 *    8..64 partial sums, so <= n/8 + 16 roundings; bound 2 gamma_{n+16} A,
 *    A = sum |x_i y_i|.
 *  - F16, BF16: the products of two halves / bfloat16 are exact in float
 *    (11+11 and 8+8 significant bits); _ref sums them in double (error
 *    below gamma_{n+16}'s 2^-24 relative), fast tiers in >= 8 float
 *    partial sums: bound 2 gamma_{n/8+16} A.
 *  - eta, floats only: a product or partial sum below 2^-126 may underflow
 *    (gradually, or flushed to zero by vdpbf16ps, which also reads bf16
 *    inputs below 2^-126 as zero): eta = the sum of |x_i y_i| over the pairs
 *    with such an input, plus (n + 64) * 2^-126 for the flushed sums.
 * The bound is at most 2 * (11008/8 + 16) * 2^-24 = 1.7e-4 of A (F32:
 * 1.3e-3), while a wrong nibble order, scale, block or sign moves the
 * result by a large fraction of A. */
static double gamma_k(double k) { const double u = 0x1p-24; return k * u / (1 - k * u); }

/* the integer weight q_j of one block of type t and its scales, read here
 * from ggml's layout independently of the kernels */
static int block_q(int t, const uint8_t *blk, int j) {
    uint32_t qh;
    switch (t) {
    case KT_Q4_0: return (j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4) - 8;
    case KT_Q4_1: return j < 16 ? blk[4 + j] & 15 : blk[4 + j - 16] >> 4;
    case KT_Q5_0: memcpy(&qh, blk + 2, 4); return ((j < 16 ? blk[6 + j] & 15 : blk[6 + j - 16] >> 4) | ((qh >> j) & 1) << 4) - 16;
    case KT_Q5_1: memcpy(&qh, blk + 4, 4); return (j < 16 ? blk[8 + j] & 15 : blk[8 + j - 16] >> 4) | ((qh >> j) & 1) << 4;
    case KT_Q8_0: return (int8_t)blk[2 + j];
    case KT_Q8_1: return (int8_t)blk[4 + j];
    }
    fail_msg("no integer layout for type %d", t);
    return 0;
}
static double half_at(const uint8_t *p) { kern_half h; memcpy(&h, p, 2); return kern_fp16_to_fp32(h); }

/* A (and eta through *eta) for x of type t and y of its vec_dot_type */
static double dot_magnitude(int t, const uint8_t *x, const uint8_t *y, int64_t n, double *eta) {
    const kern_type_traits *tt = kern_type_get(t), *at = kern_type_get(tt->vec_dot_type);
    double A = 0;
    *eta = 0;
    if (is_float_type(t)) {
        float *xf = malloc(sizeof(float) * (size_t)n), *yf = malloc(sizeof(float) * (size_t)n);
        tt->to_float(x, xf, n);
        at->to_float(y, yf, n);
        for (int64_t i = 0; i < n; i++) {
            const double p = fabs((double)xf[i] * yf[i]);
            A += p;
            if (fabsf(xf[i]) < 0x1p-126f || fabsf(yf[i]) < 0x1p-126f) *eta += p;
        }
        *eta += (double)(n + 64) * 0x1p-126;
        free(xf); free(yf);
        return A;
    }
    const bool has_min = t == KT_Q4_1 || t == KT_Q5_1;
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *xb = x + b * tt->type_size, *yb = y + b * at->type_size;
        double s = 0;
        for (int j = 0; j < 32; j++) s += fabs((double)block_q(t, xb, j) * block_q(tt->vec_dot_type, yb, j));
        A += fabs(half_at(xb) * half_at(yb)) * s;
        if (has_min) A += fabs(half_at(xb + 2) * half_at(yb + 2));
    }
    return A;
}

static double dot_bound(int t, int64_t n, double A, double eta) {
    if (t == KT_F32) return 2 * gamma_k((double)n + 16) * A + eta;
    if (is_float_type(t)) return 2 * gamma_k((double)n / 8 + 16) * A + eta;
    return 2 * gamma_k((double)(n / 32) + 16) * A;
}

static void test_vec_dot(void **state) {
    (void)state;
    int ran[KERN_TIER_COUNT];
    const int ntiers = tiers_run(ran);
    /* weight rows: random bytes (-1) or these float patterns quantized by _ref */
    static const int wpat[] = {-1, P_RANDOM, P_MIXED, P_ZERO, P_EQUAL, P_HUGE, P_SMALL, P_OUTLIER, P_TIES};
    static const int apat[] = {P_RANDOM, P_MIXED, P_ZERO, P_EQUAL, P_HUGE, P_SMALL, P_OUTLIER, P_TIES, P_BITS};
    enum { NW = sizeof wpat / sizeof *wpat, NA = sizeof apat / sizeof *apat };
    float *f = malloc(sizeof(float) * NMAX);
    buf x = buf_new((size_t)NMAX * 4), y = buf_new((size_t)NMAX * 4);
    int checked = 0;
    for (size_t ti = 0; ti < sizeof k_dot_types / sizeof *k_dot_types; ti++) {
        const int t = k_dot_types[ti];
        const kern_type_traits *tt = kern_type_get(t);
        const kern_type_traits *at = kern_type_get(tt->vec_dot_type);
        const bool flt = is_float_type(t);
        double worst[KERN_TIER_COUNT] = {0};
        for (size_t si = 0; si < (flt ? sizeof k_float_sizes : sizeof k_block_sizes) / sizeof(int64_t); si++) {
            const int64_t n = flt ? k_float_sizes[si] : k_block_sizes[si];
            for (int wi = 0; wi < NW; wi++)
                for (int ai = 0; ai < NA; ai++) {
                    if (n >= 4096 && ai != (int)((wi + (int)si) % NA)) continue; /* long rows: one activation pattern each */
                    if (wpat[wi] < 0) rand_row(t, x.p, n);
                    else {
                        gen(f, n, wpat[wi], t);
                        tt->from_float_ref(f, x.p, n);
                    }
                    gen(f, n, apat[ai], tt->vec_dot_type);
                    at->from_float_ref(f, y.p, n);
                    float ref;
                    tt->vec_dot_ref(n, &ref, x.p, y.p);
                    if (!isfinite(ref)) fail_msg("%s n=%lld: test data overflowed", tt->name, (long long)n);
                    double eta;
                    const double A = dot_magnitude(t, x.p, y.p, n, &eta), bound = dot_bound(t, n, A, eta);
                    for (int tier = 1; tier < KERN_TIER_COUNT; tier++) {
                        if (!ran[tier]) continue;
                        float got = NAN;
                        kern_ops_tier(t, (kern_tier)tier)->vec_dot(n, &got, x.p, y.p);
                        const double e = fabs((double)got - ref);
                        if (!(e <= bound))
                            fail_msg("%s vec_dot tier %s n=%lld weights %s activations %s: %.9g, _ref %.9g, "
                                     "|diff| %.3g > bound %.3g (A %.3g)",
                                     tt->name, kern_tier_name((kern_tier)tier), (long long)n,
                                     wpat[wi] < 0 ? "bytes" : k_pattern_names[wpat[wi]], k_pattern_names[apat[ai]],
                                     got, ref, e, bound, A);
                        if (bound > 0 && e / bound > worst[tier]) worst[tier] = e / bound;
                        checked++;
                    }
                }
        }
        for (int tier = 1; tier < KERN_TIER_COUNT; tier++)
            if (ran[tier]) print_message("%-4s %-6s worst |fast - ref| / bound = %.3g\n", tt->name,
                                         kern_tier_name((kern_tier)tier), worst[tier]);
    }
    print_message("%d dot products on %d tiers within bound\n", checked, ntiers);
    free(f); free(x.mem); free(y.mem);
}

/* ---- gemm tiles: bit-identical to the same tier's vec_dot ---------------------------
 * Every output of a tile must equal vec_dot on its pair of rows exactly,
 * for every tile shape (so a caller may tile and split rows among threads
 * without changing a bit), with rows further apart than they are long,
 * and without touching y outside the tile. */
static void test_gemm(void **state) {
    (void)state;
    int ran[KERN_TIER_COUNT];
    tiers_run(ran);
    enum { R = KERN_GEMM_MAX, LDY = 7 };
    static const int64_t qsizes[] = {32, 64, 96, 160, 224, 4096 + 64, 11008};  /* 1..7 blocks: every tail */
    static const int64_t fsizes[] = {1, 7, 8, 15, 16, 17, 24, 40, 100, 4096 + 7};
    float *f = malloc(sizeof(float) * NMAX);
    const size_t row_max = (size_t)NMAX * 4 + 68; /* a row and some padding */
    buf x = buf_new(row_max * R), a = buf_new(row_max * R);
    float y[R * LDY + GUARD];
    int tiles = 0, gemm_types = 0;
    for (int t = 0; t < KT_GGML_COUNT; t++) {
        const kern_type_traits *tt = kern_type_get(t);
        if (!tt || !tt->vec_dot_ref) continue;
        for (int tier = 0; tier < KERN_TIER_COUNT; tier++) {
            const kern_type_ops *o = ran[tier] ? kern_ops_tier(t, (kern_tier)tier) : NULL;
            if (!o || !o->gemm) continue;
            gemm_types++;
            const bool flt = t == KT_F32;
            const int64_t *sizes = flt ? fsizes : qsizes;
            const size_t nsizes = flt ? sizeof fsizes / sizeof *fsizes : sizeof qsizes / sizeof *qsizes;
            for (size_t si = 0; si < nsizes; si++) {
                const int64_t n = sizes[si];
                if (n % tt->block_size) continue;
                /* rows further apart than they are long (keeping F32 rows 4-byte aligned) */
                const size_t bx = kern_row_bytes(t, n) + 4 * (si % 3), ba = kern_row_bytes(tt->vec_dot_type, n) + 36;
                for (int r = 0; r < R; r++) { /* row r: random bytes or a quantized float pattern */
                    if (r == 0) rand_row(t, x.p + r * bx, n);
                    else {
                        gen(f, n, (int)((si + (size_t)r) % P_BITS), t);
                        tt->from_float_ref(f, x.p + r * bx, n);
                    }
                    gen(f, n, (int)((si + 3 * (size_t)r) % P_BITS), tt->vec_dot_type);
                    kern_type_get(tt->vec_dot_type)->from_float_ref(f, a.p + r * ba, n);
                }
                for (int nr = 1; nr <= R; nr++)
                    for (int nc = 1; nc <= R; nc++) {
                        for (size_t i = 0; i < sizeof y / sizeof *y; i++) y[i] = -1234.5f;
                        o->gemm(n, nr, nc, y, LDY, x.p, bx, a.p, ba);
                        for (int c = 0; c < R; c++)
                            for (int r = 0; r < LDY; r++) {
                                const float got = y[c * LDY + r];
                                if (r >= nr || c >= nc) { /* outside the tile: untouched */
                                    if (got != -1234.5f) fail_msg("%s gemm %dx%d wrote y[%d][%d]", tt->name, nr, nc, c, r);
                                    continue;
                                }
                                float want;
                                o->vec_dot(n, &want, x.p + r * bx, a.p + c * ba);
                                if (memcmp(&got, &want, sizeof got))
                                    fail_msg("%s tier %s n=%lld tile %dx%d: y[%d][%d] = %.9g, vec_dot %.9g", tt->name,
                                             kern_tier_name((kern_tier)tier), (long long)n, nr, nc, c, r, got, want);
                            }
                        tiles++;
                    }
            }
        }
    }
    print_message("%d tiles (%d type x tier pairs with a gemm) bit-identical to vec_dot\n", tiles, gemm_types);
    free(f); free(x.mem); free(a.mem);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_from_float),
        cmocka_unit_test(test_f16_sweep),
        cmocka_unit_test(test_to_float),
        cmocka_unit_test(test_vec_dot),
        cmocka_unit_test(test_gemm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
