/* test_ptq.c - PTQ quantizers and types (compress/ptq.h, kernels/ptq.h):
 * bit packing, quantizer properties, stored == fake-quantized, kernels of
 * every tier against _ref, and a quantized stories260K. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvant.h"
#include "compress/ptq.h"
#include "kernels/kernels.h"
#include "kernels/ptq.h"
#include "kernels/quants.h"

static uint32_t g_rng = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)(g_rng >> 8) / 8388608.0f - 1.0f;
}
static void fill(float *x, int64_t n, float scale) { for (int64_t i = 0; i < n; i++) x[i] = frand() * scale; }

static void test_types_table(void **state) {
    (void)state;
    for (int t = KERN_PTQ_FIRST; t < KERN_PTQ_FIRST + KERN_PTQ_COUNT; t++) {
        const kern_type_traits *tt = kern_type_get(t);
        assert_non_null(tt);
        assert_non_null(tt->to_float);
        assert_non_null(tt->vec_dot_ref);
        assert_non_null(kern_ops(t));
        ptq_spec s;
        assert_true(ptq_type_spec(t, &s));
        char want[32];
        snprintf(want, sizeof want, "PTQ_%c%d_%s", s.scheme == PTQ_ABSMAX ? 'A' : 'Z', s.bits,
                 s.gran == PTQ_TENSOR ? "T" : s.gran == PTQ_CHANNEL ? "C" : s.group == 32 ? "G32" : s.group == 64 ? "G64" : "G128");
        assert_string_equal(tt->name, want);
        assert_int_equal(ptq_storage_type(&s, 256, NULL, NULL, 0), t);
    }
    assert_null(kern_type_get(KERN_PTQ_FIRST + KERN_PTQ_COUNT));
    /* sizes: A4_G32 is Q4_0's 18 bytes per 32; Z4_G32 19; per-row: header + packed bits */
    assert_int_equal(kern_row_bytes(KERN_PTQ_TYPE(0, 4, KERN_PTQ_G32), 64), 36);
    assert_int_equal(kern_row_bytes(KERN_PTQ_TYPE(1, 4, KERN_PTQ_G32), 64), 38);
    assert_int_equal(kern_row_bytes(KERN_PTQ_TYPE(1, 3, KERN_PTQ_G128), 128), 3 + 48);
    assert_int_equal(kern_row_bytes(KERN_PTQ_TYPE(1, 4, KERN_PTQ_G32), 172), 0);
    assert_int_equal(kern_row_bytes(KERN_PTQ_TYPE(1, 4, KERN_PTQ_CHANNEL), 172), 3 + 86);
    assert_int_equal(kern_row_bytes(KERN_PTQ_TYPE(0, 3, KERN_PTQ_TENSOR), 172), 2 + 65); /* 516 bits */
}

/* every width, lengths that end mid-byte */
static void test_pack_roundtrip(void **state) {
    (void)state;
    static const int64_t lens[] = {1, 2, 3, 7, 8, 13, 32, 43, 172, 1000};
    uint8_t u[1000], v[1000], packed[1001];
    for (int b = 2; b <= 8; b++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const int64_t n = lens[li];
            for (int64_t i = 0; i < n; i++) u[i] = (uint8_t)((uint32_t)(frand() * 1e6f) & ((1u << b) - 1));
            memset(packed, 0xAA, sizeof packed);
            kern_ptq_pack(u, n, b, packed);
            const size_t nb = kern_ptq_packed_bytes(n, b);
            assert_int_equal(nb, (size_t)((n * b + 7) / 8));
            assert_int_equal(packed[nb], 0xAA); /* nothing written past the end */
            if ((n * b) % 8) assert_int_equal(packed[nb - 1] >> ((n * b) % 8), 0); /* unused high bits zero */
            kern_ptq_unpack(packed, n, b, v);
            assert_memory_equal(u, v, (size_t)n);
        }
    /* the documented layouts: 4 bits = low nibble first, 2 bits = 4 per byte LSB first */
    const uint8_t c4[4] = {1, 2, 3, 4}, c2[4] = {1, 2, 3, 0};
    kern_ptq_pack(c4, 4, 4, packed);
    assert_int_equal(packed[0], 0x21);
    assert_int_equal(packed[1], 0x43);
    kern_ptq_pack(c2, 4, 2, packed);
    assert_int_equal(packed[0], 1 | 2 << 2 | 3 << 4);
}

/* absmax: the largest |x| is reproduced (exactly when its scale is an F16);
 * zero-point: 0 maps to 0 exactly; without clipping every error <= scale/2
 * (plus the F16 rounding of the scale: (2^b - 1) * scale * 2^-11 at the range end) */
static void test_quantizer_properties(void **state) {
    (void)state;
    float x[257], y[257];
    for (int b = 2; b <= 8; b++)
        for (int scheme = 0; scheme < 2; scheme++)
            for (int trial = 0; trial < 20; trial++) {
                const int64_t n = 1 + trial * 12;
                fill(x, n, 0.01f + 3.0f * (float)trial);
                x[n / 2] = 0.0f;
                if (trial % 3 == 0) for (int64_t i = 0; i < n; i++) x[i] = fabsf(x[i]); /* one-sided */
                const ptq_spec s = {.scheme = (ptq_scheme)scheme, .bits = b, .gran = PTQ_CHANNEL};
                const ptq_qp qp = ptq_choose(&s, x, n, NULL);
                ptq_fake_quant(&s, x, y, 1, n, NULL, NULL);
                assert_float_equal(y[n / 2], 0.0f, 0.0f);
                const float slack = (float)((1 << b) - 1) * qp.scale * (1.0f / 2048.0f);
                for (int64_t i = 0; i < n; i++) assert_true(fabsf(y[i] - x[i]) <= 0.5f * qp.scale + slack + 1e-30f);
                if (scheme == PTQ_ABSMAX) {
                    assert_int_equal(qp.zero, 1 << (b - 1));
                    int64_t im = 0;
                    for (int64_t i = 1; i < n; i++) if (fabsf(x[i]) > fabsf(x[im])) im = i;
                    const float qmax = (float)((1 << (b - 1)) - 1);
                    assert_true(fabsf(fabsf(y[im]) - fabsf(x[im])) <= fabsf(x[im]) * (1.0f / 1024.0f));
                    /* scale exactly representable: the maximum is exact */
                    float z[3] = {0.25f * qmax, -0.1f, 0.0f};
                    float w[3];
                    ptq_fake_quant(&s, z, w, 1, 3, NULL, NULL);
                    assert_float_equal(w[0], z[0], 0.0f);
                    assert_float_equal(w[2], 0.0f, 0.0f);
                } else
                    assert_true(qp.zero >= 0 && qp.zero <= (1 << b) - 1);
            }
}

/* MSE clipping never loses to the plain range (r = 1 is a candidate) */
static void test_clip_mse(void **state) {
    (void)state;
    float x[128], imp[128];
    for (int b = 2; b <= 8; b++)
        for (int scheme = 0; scheme < 2; scheme++) {
            fill(x, 128, 1.0f);
            x[5] = 9.0f; /* an outlier makes clipping worthwhile */
            fill(imp, 128, 1.0f);
            for (int i = 0; i < 128; i++) imp[i] = fabsf(imp[i]) + 0.01f;
            ptq_spec s = {.scheme = (ptq_scheme)scheme, .bits = b, .gran = PTQ_GROUP, .group = 128};
            const ptq_qp plain = ptq_choose(&s, x, 128, imp);
            s.clip = PTQ_CLIP_MSE;
            const ptq_qp clipped = ptq_choose(&s, x, 128, imp);
            assert_true(ptq_error(&s, clipped, x, 128, imp) <= ptq_error(&s, plain, x, 128, imp));
        }
}

/* the stored type dequantizes to exactly the fake-quantized matrix */
static void test_stored_equals_fake(void **state) {
    (void)state;
    const int64_t rows = 5, cols = 128;
    float *x = malloc(sizeof(float) * rows * cols), *y = malloc(sizeof(float) * rows * cols),
          *z = malloc(sizeof(float) * rows * cols), imp[128];
    uint8_t *buf = malloc((size_t)(rows * cols * 2 + 64 * rows));
    fill(x, rows * cols, 2.0f);
    for (int i = 0; i < cols; i++) imp[i] = 0.1f + (float)i;
    kvant_status st;
    for (int t = KERN_PTQ_FIRST; t < KERN_PTQ_FIRST + KERN_PTQ_COUNT; t++)
        for (int clip = 0; clip < 2; clip++) {
            ptq_spec s;
            ptq_type_spec(t, &s);
            s.clip = (ptq_clip)clip;
            assert_int_equal(ptq_quantize_tensor(&s, t, x, rows, cols, clip ? imp : NULL, buf, &st), KVANT_OK);
            const size_t rb = kern_row_bytes(t, cols);
            for (int64_t r = 0; r < rows; r++) kern_type_get(t)->to_float(buf + r * rb, y + r * cols, cols);
            ptq_fake_quant(&s, x, z, rows, cols, clip ? imp : NULL, NULL);
            assert_memory_equal(y, z, sizeof(float) * rows * cols);
        }
    free(x); free(y); free(z); free(buf);
}

/* GPTQ: with a diagonal Hessian nothing is compensated, so it writes what
 * plain quantization weighted by diag(H) writes; with correlated inputs it
 * lowers the output error sum_t |(W - W^) x_t|^2 = tr((W - W^) H (W - W^)^T) */
static void test_gptq(void **state) {
    (void)state;
    enum { R = 8, N = 64 };
    float x[R * N], imp[N], y[R * N];
    double H[N * N];
    uint8_t a[R * 64], b[R * 64];
    fill(x, R * N, 1.0f);
    kvant_status st;
    const int t = KERN_PTQ_TYPE(1, 3, KERN_PTQ_G32);
    ptq_spec s;
    ptq_type_spec(t, &s);
    memset(H, 0, sizeof H);
    for (int i = 0; i < N; i++) H[i * N + i] = imp[i] = 0.5f + (float)(i % 7);
    assert_int_equal(ptq_gptq_tensor(&s, t, x, R, N, H, a, &st), KVANT_OK);
    assert_int_equal(ptq_quantize_tensor(&s, t, x, R, N, imp, b, &st), KVANT_OK);
    assert_memory_equal(a, b, kern_row_bytes(t, N) * R);
    /* correlated inputs: H_ij = 0.9^|i-j| */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) H[i * N + j] = pow(0.9, abs(i - j));
    for (int i = 0; i < N; i++) imp[i] = 1.0f;
    double err[2];
    for (int k = 0; k < 2; k++) {
        if (k == 0) ptq_gptq_tensor(&s, t, x, R, N, H, a, &st);
        else ptq_quantize_tensor(&s, t, x, R, N, imp, a, &st);
        for (int r = 0; r < R; r++) kern_type_get(t)->to_float(a + r * kern_row_bytes(t, N), y + r * N, N);
        err[k] = 0.0;
        for (int r = 0; r < R; r++)
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++) err[k] += (double)(x[r * N + i] - y[r * N + i]) * H[i * N + j] * (x[r * N + j] - y[r * N + j]);
    }
    assert_true(err[0] < 0.8 * err[1]);
}

/* vec_dot of every tier against the _ref, and the _ref against a double sum
 * of the dequantized operands.  The _ref's integer sums are exact; what
 * differs is float rounding: per product d_w*d_a*int and the running sum,
 * a few ulp of sum |w_i a_i| each; tolerance 1e-5 * sum |w_i a_i| (n <= 512
 * terms, blocks <= 16). */
static void test_kernels_vs_ref(void **state) {
    (void)state;
    static const int64_t lens[] = {32, 64, 128, 172, 256, 512};
    float *x = malloc(512 * sizeof(float)), *a = malloc(512 * sizeof(float)), *wd = malloc(512 * sizeof(float)),
          *ad = malloc(512 * sizeof(float));
    uint8_t *wq = malloc(2048), *aq = malloc(2048);
    for (int t = KERN_PTQ_FIRST; t < KERN_PTQ_FIRST + KERN_PTQ_COUNT; t++) {
        const kern_type_traits *tt = kern_type_get(t);
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const int64_t n = lens[li];
            if (!kern_row_bytes(t, n) || !kern_row_bytes(tt->vec_dot_type, n)) continue;
            fill(x, n, 1.5f);
            fill(a, n, 3.0f);
            tt->from_float_ref(x, wq, n);
            tt->to_float(wq, wd, n);
            kern_type_get(tt->vec_dot_type)->from_float_ref(a, aq, n);
            kern_type_get(tt->vec_dot_type)->to_float(aq, ad, n);
            double exact = 0.0, mag = 0.0;
            for (int64_t i = 0; i < n; i++) { exact += (double)wd[i] * ad[i]; mag += fabs((double)wd[i] * ad[i]); }
            float ref;
            tt->vec_dot_ref(n, &ref, wq, aq);
            assert_true(fabs(ref - exact) <= 1e-5 * mag + 1e-30);
            for (int tier = KERN_TIER_SCALAR; tier <= (int)kern_best_tier(); tier++) {
                const kern_type_ops *ops = kern_ops_tier(t, (kern_tier)tier);
                float s, y[512];
                ops->vec_dot(n, &s, wq, aq);
                if (fabs(s - ref) > 1e-5 * mag + 1e-30)
                    fail_msg("%s n=%lld tier %s: %g vs ref %g", tt->name, (long long)n, kern_tier_name((kern_tier)tier), s, ref);
                ops->to_float(wq, y, n);
                assert_memory_equal(y, wd, (size_t)n * sizeof(float));
            }
        }
    }
    free(x); free(a); free(wd); free(ad); free(wq); free(aq);
}

/* stories260K at 8 bits: loads, finite perplexity within 0.5% of F32 (6
 * chunks); metadata written; ffn_down (172 columns) falls back and is reported */
static void test_model_8bit(void **state) {
    (void)state;
    const char *in = strdup(shared_path("models/stories260K.gguf"));
    const char *text_path = strdup(shared_path("corpora/tinystories_val_subset.txt"));
    char *out = strdup(tmp_path("ptq_zp8_g32.gguf"));
    kvant_status st;
    kvant_ptq_params p = {.scheme = KVANT_PTQ_ZEROPOINT, .granularity = KVANT_PTQ_GROUP, .group = 32, .bits = 8,
                          .clip = KVANT_PTQ_CLIP_MSE, .quiet = true};
    kvant_ptq_report r;
    assert_int_equal(kvant_ptq_quantize(in, out, &p, &r, &st), KVANT_OK);
    assert_int_equal(r.n_fallback, 5); /* the five ffn_down */
    assert_true(r.bpw > 8.0 && r.bpw < 9.0);

    gguf_ctx *g = gguf_open(out, &st);
    assert_non_null(g);
    uint32_t bits = 0;
    assert_true(gguf_get_u32(g, "kvant.ptq.bits", &bits));
    assert_int_equal(bits, 8);
    gguf_str fb;
    assert_true(gguf_get_str(g, "kvant.ptq.fallback_tensors", &fb));
    char fbs[2048];
    snprintf(fbs, sizeof fbs, "%.*s", (int)fb.len, fb.data);
    assert_non_null(strstr(fbs, "blk.0.ffn_down.weight=PTQ_Z8_C"));
    assert_int_equal(gguf_find_tensor(g, "blk.0.ffn_down.weight")->type, KERN_PTQ_TYPE(1, 8, KERN_PTQ_CHANNEL));
    assert_int_equal(gguf_find_tensor(g, "blk.0.attn_q.weight")->type, KERN_PTQ_TYPE(1, 8, KERN_PTQ_G32));
    gguf_close(g);

    size_t len;
    char *text = read_file(text_path, &len);
    kvant_model_params mp = {0};
    kvant_model *m32 = kvant_model_open(in, &mp, &st), *m8 = kvant_model_open(out, &mp, &st);
    assert_non_null(m32);
    assert_non_null(m8);
    kvant_ppl_params pp = {.n_ctx = 512, .n_chunks = 6};
    kvant_ppl_result r32, r8;
    assert_int_equal(kvant_perplexity(m32, text, len, &pp, &r32, &st), KVANT_OK);
    assert_int_equal(kvant_perplexity(m8, text, len, &pp, &r8, &st), KVANT_OK);
    assert_true(isfinite(r8.ppl));
    assert_true(fabs(r8.ppl / r32.ppl - 1.0) < 0.005);

    /* the per-channel 4-bit file loads and runs too (per-row types, F32 activations) */
    p.granularity = KVANT_PTQ_CHANNEL;
    p.bits = 4;
    assert_int_equal(kvant_ptq_quantize(in, out, &p, &r, &st), KVANT_OK);
    assert_int_equal(r.n_fallback, 0);
    kvant_model *m4 = kvant_model_open(out, &mp, &st);
    assert_non_null(m4);
    pp.n_chunks = 2;
    kvant_ppl_result r4;
    assert_int_equal(kvant_perplexity(m4, text, len, &pp, &r4, &st), KVANT_OK);
    assert_true(isfinite(r4.ppl) && r4.ppl < 2.0 * r32.ppl);
    /* tools that read a per-row PTQ file dequantize it row by row: pruning
     * 10% of it by magnitude, or re-quantizing it to Q8_0, keeps its function
     * (read as one long row, a per-row type gave perplexity in the 10^4s) */
    char *pruned = strdup(tmp_path("ptq_zp4_c_pruned.gguf")); /* tmp_path reuses one buffer */
    kvant_prune_params pr = {.method = KVANT_PRUNE_MAGNITUDE, .sparsity = 0.1f, .quiet = true};
    assert_int_equal(kvant_prune(out, pruned, &pr, &st), KVANT_OK);
    kvant_model *mp4 = kvant_model_open(pruned, &mp, &st);
    assert_non_null(mp4);
    kvant_ppl_result rp;
    assert_int_equal(kvant_perplexity(mp4, text, len, &pp, &rp, &st), KVANT_OK);
    assert_true(isfinite(rp.ppl) && rp.ppl < 1.1 * r4.ppl);
    kvant_model_free(mp4);
    char *requant = strdup(tmp_path("ptq_zp4_c_q8.gguf"));
    kvant_quantize_params qp = {.type = KVANT_FTYPE_Q8_0, .quiet = true};
    assert_int_equal(kvant_quantize(out, requant, &qp, &st), KVANT_OK);
    kvant_model *mq = kvant_model_open(requant, &mp, &st);
    assert_non_null(mq);
    kvant_ppl_result rq;
    assert_int_equal(kvant_perplexity(mq, text, len, &pp, &rq, &st), KVANT_OK);
    assert_true(fabs(rq.ppl / r4.ppl - 1.0) < 0.02);
    kvant_model_free(mq);
    /* LLM.int8 takes its outlier columns from the per-row weights (a low
     * threshold makes many columns outliers) */
    kvant_int8_params ip = kvant_int8_default();
    ip.mode = KVANT_INT8_MIXED;
    ip.threshold = 3.0f;
    kvant_int8 *q8 = kvant_int8_new(m4, &ip, &st);
    assert_non_null(q8);
    kvant_ppl_params pq = pp;
    pq.int8 = q8;
    kvant_ppl_result ri;
    assert_int_equal(kvant_perplexity(m4, text, len, &pq, &ri, &st), KVANT_OK);
    assert_true(isfinite(ri.ppl) && fabs(ri.ppl / r4.ppl - 1.0) < 0.02);
    kvant_int8_free(q8);
    free(pruned);
    free(requant);
    kvant_model_free(m4);
    kvant_model_free(m8);
    kvant_model_free(m32);
    free(text);
    free((void *)in);
    free((void *)text_path);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types_table),      cmocka_unit_test(test_pack_roundtrip),
        cmocka_unit_test(test_quantizer_properties), cmocka_unit_test(test_clip_mse),
        cmocka_unit_test(test_stored_equals_fake), cmocka_unit_test(test_kernels_vs_ref),
        cmocka_unit_test(test_gptq),
        cmocka_unit_test(test_model_8bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
