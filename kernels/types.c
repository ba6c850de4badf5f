/* types.c - the one table of tensor types.  Row = ggml type number. */
#include "kernels/quants.h"
#include "kernels/types.h"
#include "kernels/ptq.h"
#include "kernels/sparse24.h"
#include "kernels/w8a8.h"

static const kern_type_traits g_types[KT_GGML_COUNT] = {
    /* name    block   bytes/block          to_float               from_float_ref       vec_dot_type  vec_dot_ref */
    [KT_F32]  = {"F32", 1, 4, kern_dequant_f32_ref, kern_quant_f32_ref, KT_F32, kern_vec_dot_f32_ref},
    [KT_F16]  = {"F16", 1, 2, kern_dequant_f16_ref, kern_quant_f16_ref, KT_F16, kern_vec_dot_f16_ref},
    [KT_BF16] = {"BF16", 1, 2, kern_dequant_bf16_ref, kern_quant_bf16_ref, KT_BF16, kern_vec_dot_bf16_ref},
    [KT_Q4_0] = {"Q4_0", QK4_0, sizeof(block_q4_0), kern_dequant_q4_0_ref, kern_quant_q4_0_ref, KT_Q8_0, kern_vec_dot_q4_0_q8_0_ref},
    [KT_Q4_1] = {"Q4_1", QK4_1, sizeof(block_q4_1), kern_dequant_q4_1_ref, kern_quant_q4_1_ref, KT_Q8_1, kern_vec_dot_q4_1_q8_1_ref},
    [KT_Q5_0] = {"Q5_0", QK5_0, sizeof(block_q5_0), kern_dequant_q5_0_ref, kern_quant_q5_0_ref, KT_Q8_0, kern_vec_dot_q5_0_q8_0_ref},
    [KT_Q5_1] = {"Q5_1", QK5_1, sizeof(block_q5_1), kern_dequant_q5_1_ref, kern_quant_q5_1_ref, KT_Q8_1, kern_vec_dot_q5_1_q8_1_ref},
    [KT_Q8_0] = {"Q8_0", QK8_0, sizeof(block_q8_0), kern_dequant_q8_0_ref, kern_quant_q8_0_ref, KT_Q8_0, kern_vec_dot_q8_0_q8_0_ref},
    [KT_Q8_1] = {"Q8_1", QK8_1, sizeof(block_q8_1), kern_dequant_q8_1_ref, kern_quant_q8_1_ref, KT_Q8_1, 0},
    /* K-quants: super-blocks of 256 (kernels/quants_k.c) */
    [KT_Q2_K] = {"Q2_K", QK_K, sizeof(block_q2_K), kern_dequant_q2_k_ref, kern_quant_q2_k_ref, KT_Q8_K, kern_vec_dot_q2_k_q8_k_ref},
    [KT_Q3_K] = {"Q3_K", QK_K, sizeof(block_q3_K), kern_dequant_q3_k_ref, kern_quant_q3_k_ref, KT_Q8_K, kern_vec_dot_q3_k_q8_k_ref},
    [KT_Q4_K] = {"Q4_K", QK_K, sizeof(block_q4_K), kern_dequant_q4_k_ref, kern_quant_q4_k_ref, KT_Q8_K, kern_vec_dot_q4_k_q8_k_ref},
    [KT_Q5_K] = {"Q5_K", QK_K, sizeof(block_q5_K), kern_dequant_q5_k_ref, kern_quant_q5_k_ref, KT_Q8_K, kern_vec_dot_q5_k_q8_k_ref},
    [KT_Q6_K] = {"Q6_K", QK_K, sizeof(block_q6_K), kern_dequant_q6_k_ref, kern_quant_q6_k_ref, KT_Q8_K, kern_vec_dot_q6_k_q8_k_ref},
    [KT_Q8_K] = {"Q8_K", QK_K, sizeof(block_q8_K), kern_dequant_q8_k_ref, kern_quant_q8_k_ref, KT_Q8_K, 0},
    [KT_I8]   = {"I8", 1, 1, 0, 0, 0, 0},
    [KT_I16]  = {"I16", 1, 2, 0, 0, 0, 0},
    [KT_I32]  = {"I32", 1, 4, 0, 0, 0, 0},
    [KT_I64]  = {"I64", 1, 8, 0, 0, 0, 0},
    [KT_F64]  = {"F64", 1, 8, 0, 0, 0, 0},
};

/* kvant's own types, numbered from KT_KVANT_BASE (row = number - KT_KVANT_BASE) */
static const kern_type_traits g_kvant_types[KT_KVANT_END - KT_KVANT_BASE] = {
    KERN_PTQ_TYPE_ROWS /* 1024..1093: PTQ absmax / zero-point INT-n (kernels/ptq.h) */
    /* INT8 weights per channel x INT8 activations per token (kernels/w8a8.h) */
    [KT_W8A8 - KT_KVANT_BASE] = {"W8A8", 1, 1, kern_w8a8_dequant_ref, kern_w8a8_quant_ref, KT_F32, kern_w8a8_vec_dot_ref, kern_w8a8_row_bytes},
    [KT_LLM_INT8 - KT_KVANT_BASE] = {"LLM_INT8", 1, 1, kern_w8a8_dequant_ref, kern_w8a8_quant_ref, KT_F32, kern_w8a8_vec_dot_ref, kern_w8a8_row_bytes},
    /* 2:4 sparse (kernels/sparse24.h) */
    [KT_S24_F16 - KT_KVANT_BASE] = {"S24_F16", QK_S24_F16, sizeof(block_s24_f16), kern_dequant_s24_f16_ref, kern_quant_s24_f16_ref, KT_F32, kern_vec_dot_s24_f16_f32_ref},
    [KT_S24_Q8 - KT_KVANT_BASE] = {"S24_Q8", QK_S24_Q8, sizeof(block_s24_q8), kern_dequant_s24_q8_ref, kern_quant_s24_q8_ref, KT_S24_A8, kern_vec_dot_s24_q8_a8_ref},
    [KT_S24_A8 - KT_KVANT_BASE] = {"S24_A8", QK_S24_Q8, sizeof(block_s24_a8), kern_dequant_s24_a8_ref, kern_quant_s24_a8_ref, KT_S24_A8, 0},
};

const kern_type_traits *kern_type_get(int t) {
    if (t >= KT_KVANT_BASE && t < KT_KVANT_END)
        return g_kvant_types[t - KT_KVANT_BASE].name ? &g_kvant_types[t - KT_KVANT_BASE] : 0;
    if (t < 0 || t >= KT_GGML_COUNT || !g_types[t].name) return 0;
    return &g_types[t];
}

const char *kern_type_name(int t) {
    const kern_type_traits *tt = kern_type_get(t);
    return tt ? tt->name : "unknown";
}

size_t kern_row_bytes(int t, int64_t n) {
    const kern_type_traits *tt = kern_type_get(t);
    if (!tt || n < 0 || n % tt->block_size) return 0;
    if (tt->row_bytes) return tt->row_bytes(n);
    uint64_t r;
    if (__builtin_mul_overflow((uint64_t)(n / tt->block_size), (uint64_t)tt->type_size, &r)) return 0;
    return (size_t)r;
}

bool kern_rows_to_float(int t, const void *x, int64_t rows, int64_t cols, float *y) {
    const kern_type_traits *tt = kern_type_get(t);
    const size_t rb = kern_row_bytes(t, cols);
    if (!tt || !tt->to_float || !rb) return false;
    for (int64_t r = 0; r < rows; r++) tt->to_float((const uint8_t *)x + (size_t)r * rb, y + r * cols, cols);
    return true;
}
