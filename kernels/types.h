/* kernels/types.h - THE table of tensor types (one row per type).
 *
 * Type numbers and block layouts are ggml's, so GGUF files move freely
 * between kvant and llama.cpp.  Types kvant defines itself (2:4 sparse,
 * zero-point INT-n, ...) will take numbers from KT_KVANT_BASE up and are
 * written to GGUF with kvant.* metadata.
 *
 * A row of n elements of type t takes kern_row_bytes(t, n) bytes; n must be
 * a multiple of the block size.  Every block struct has a static_assert on
 * its size (kernels/quants.h).
 */
#ifndef KVANT_KERNELS_TYPES_H
#define KVANT_KERNELS_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    KT_F32 = 0,
    KT_F16 = 1,
    KT_Q4_0 = 2,
    KT_Q4_1 = 3,
    KT_Q5_0 = 6,
    KT_Q5_1 = 7,
    KT_Q8_0 = 8,
    KT_Q8_1 = 9,
    KT_Q2_K = 10,
    KT_Q3_K = 11,
    KT_Q4_K = 12,
    KT_Q5_K = 13,
    KT_Q6_K = 14,
    KT_Q8_K = 15,
    KT_I8 = 24,
    KT_I16 = 25,
    KT_I32 = 26,
    KT_I64 = 27,
    KT_F64 = 28,
    KT_BF16 = 30,
    KT_GGML_COUNT = 40,   /* ggml's numbers stay below this */
    KT_KVANT_BASE = 1024, /* kvant's own types start here:
                           * 1024..1099  PTQ absmax / zero-point INT-n (compress/ptq)
                           * 1100..1149  W8A8 / LLM.int8 (compress/int8)
                           * 1150..1199  2:4 and 4:8 sparse (compress/sparse) */
    KT_KVANT_END = 1200,  /* one past kvant's last type number */
} kern_type;

/* y[0..n) = dequantized x;  n a multiple of block_size */
typedef void (*kern_to_float_fn)(const void *x, float *y, int64_t n);
/* y = quantized x (reference rounding);  n a multiple of block_size */
typedef void (*kern_from_float_fn)(const float *x, void *y, int64_t n);

/* *s = sum_i x[i] * y[i] over n elements: x a row of the weight type, y a
 * row of that type's vec_dot_type (the activation format it pairs with). */
typedef void (*kern_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);

typedef struct {
    const char *name;            /* ggml's name: "F32", "Q4_0", ... */
    int64_t block_size;          /* elements per block */
    size_t type_size;            /* bytes per block */
    kern_to_float_fn to_float;   /* _ref dequantization; NULL: kvant cannot compute with it yet */
    kern_from_float_fn from_float_ref; /* _ref quantization; NULL if none */
    int vec_dot_type;            /* activations are quantized to this type (llama.cpp's pairing) */
    kern_vec_dot_fn vec_dot_ref; /* _ref dot product with a vec_dot_type row; NULL if none */
    /* non-NULL: bytes of a row of n elements, for types whose row is one
     * block with a header (kvant's per-row PTQ types, kernels/ptq.h); their
     * block_size is 1 and to_float / vec_dot take exactly one row */
    size_t (*row_bytes)(int64_t n);
} kern_type_traits;

/* ---- tiers: the same operations, chosen at run time -------------------------
 * _ref is the spec (the rows above).  Faster tiers are selected by CPU
 * feature detection (kernels/dispatch.c), so one binary runs on any x86-64;
 * every tier is tested against _ref (tests/test_tiers.c). */
typedef enum { KERN_TIER_REF, KERN_TIER_SCALAR, KERN_TIER_AVX2, KERN_TIER_AVX512, KERN_TIER_COUNT } kern_tier;

/* A register-blocked tile of dot products (prefill: weights reused across
 * activation rows, activations across weight rows):
 *   y[c * ldy + r] = vec_dot(n, x + r * bx, a + c * ba)  for r < nr, c < nc
 * x: nr weight rows of n elements of the type, bx bytes apart; a: nc
 * activation rows of its vec_dot_type, ba bytes apart (byte offsets);
 * 1 <= nr <= KERN_GEMM_MAX, 1 <= nc <= KERN_GEMM_MAX.  Every y is
 * BIT-IDENTICAL to the same tier's vec_dot of that pair of rows, whatever
 * nr, nc and the tile's position, so callers may tile and split rows
 * among threads freely. */
#define KERN_GEMM_MAX 4
typedef void (*kern_gemm_fn)(int64_t n, int nr, int nc, float *y, size_t ldy, const void *x, size_t bx,
                             const void *a, size_t ba);

typedef struct {
    kern_to_float_fn to_float;      /* dequantize a row */
    kern_from_float_fn from_float;  /* quantize a row (used for activations) */
    kern_vec_dot_fn vec_dot;        /* dot with a vec_dot_type row */
    kern_gemm_fn gemm;              /* tile of vec_dots (above); NULL: call vec_dot per pair */
} kern_type_ops;

/* Operations of type t at the active tier (the best this CPU supports,
 * unless kern_set_tier chose another); members may fall back to a lower
 * tier where a tier has no special version.  NULL if t is unknown. */
const kern_type_ops *kern_ops(int t);
/* Operations at one tier, or NULL if this CPU cannot run that tier. */
const kern_type_ops *kern_ops_tier(int t, kern_tier tier);
kern_tier kern_best_tier(void);
kern_tier kern_active_tier(void);
/* Whether the avx512 tier runs here with AVX512_BF16 (vdpbf16ps): CPUID
 * lists it and XCR0 enables AVX-512 (the active tier is asked separately) */
bool kern_has_avx512_bf16(void);
/* Forces a tier (tests, benchmarks); false if this CPU cannot run it. */
bool kern_set_tier(kern_tier tier);
const char *kern_tier_name(kern_tier tier);
/* One line on this CPU: what CPUID lists (AVX2, AVX-512 F/VNNI/BF16, AMX),
 * what the OS enables in XCR0 (and for AMX whether Linux permits it), and
 * the best tier, which follows XCR0, not CPUID alone. */
const char *kern_cpu_report(void);
/* Whether this CPU runs a 512-bit operation as two 256-bit halves (AMD
 * family 0x19 with AVX-512, Zen 4): a tile that gains from zmm registers
 * only through wider FMAs may then be slower than its AVX2 form (the
 * packed F16/BF16 prefill, kernels/repack_f16.c).  False off x86-64. */
bool kern_zmm_halved(void);
/* Whether decode prefetches go into L2 (prefetcht1/t2), further ahead,
 * rather than into L1 (prefetcht0) at the distances measured on the Intel
 * Xeons and the Zen 5: true on Zen 4 (AMD family 0x19 with AVX-512), where
 * a tile's lines in flight outnumber the L1's miss buffers and the L2
 * ways measured 10-150% faster (kernels/repack_tile.h, repack_f16_avx2.c,
 * attn_flash.c give the figures).  On the Intel Xeon an added L2 prefetch
 * of the next attention tile measured 25% slower, so the choice follows
 * the CPU each way was measured on. */
bool kern_prefetch_l2(void);
/* The same choice where the L2 way measured better on both AMD AVX-512
 * generations, Zen 4 and Zen 5 (families 0x19 and 0x1A with AVX-512), L1
 * elsewhere: the K / V runs of a tile attention reads one head at a time
 * (kernels/attn_flash.c load_tile: prefill units, and caches not read in
 * place; a decode step over rows read in place asks for its lines into L1
 * inside the products, range_heads) and the packed S24_F16 tile
 * (repack_s24_tile.h).  Zen 5 (family 26 model 2, 2 threads, synthetic
 * models, alternating kvant bench -n 32): stories110M Q8_0 at depth 8192
 * 53-60 t/s with them in L2 against 43-53 in L1 (before range_heads);
 * tinyllama-1.1b S24_F16 24.8-29.5 against 22.7-25.2 (one group, one
 * stream, at a time; its decode now reads 4 groups at once into L1 where
 * the zmm tile serves, repack_s24_tile.h); while its dense
 * weight tiles measured no better with L2 (F16 tg32 14.6-19.6 t/s
 * against 20.0-21.3; Q8_0, Q4_K_M, S24_Q8 within the noise), so the two
 * choices are apart. */
bool kern_prefetch_l2_amd512(void);

/* The row for type t, or NULL if t is not a type kvant knows at all.
 * Known-but-not-computable types (e.g. K-quants before they are
 * implemented) have sizes but to_float == NULL. */
const kern_type_traits *kern_type_get(int t);
/* "F32", ... or "unknown" */
const char *kern_type_name(int t);
/* Bytes of a row of n elements; 0 if t is unknown or n is not a multiple
 * of the block size. */
size_t kern_row_bytes(int t, int64_t n);
/* y[rows][cols] = the rows x cols matrix x of type t dequantized, one row
 * at a time (per-row types such as kvant's per-channel PTQ carry a header
 * per row, so a matrix is never one long row).  false if t cannot be
 * converted (unknown, no to_float, or cols not a multiple of its block). */
bool kern_rows_to_float(int t, const void *x, int64_t rows, int64_t cols, float *y);

/* ---- scalar conversions (IEEE half, bfloat16) ------------------------- */
static inline float kern_fp32_from_bits(uint32_t w) { float f; memcpy(&f, &w, 4); return f; }
static inline uint32_t kern_fp32_to_bits(float f) { uint32_t w; memcpy(&w, &f, 4); return w; }

/* exact conversion of an IEEE binary16 to float (handles subnormals, inf, nan) */
static inline float kern_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: value = man * 2^-24 */
            float f = (float)man * 5.9604644775390625e-8f;
            return sign ? -f : f;
        }
    } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 112) << 23) | (man << 13);
    return kern_fp32_from_bits(bits);
}

/* float to binary16, round to nearest even (overflow to inf) */
static inline uint16_t kern_fp32_to_fp16(float f) {
    uint32_t x = kern_fp32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) { /* result is subnormal or zero: scale to units of 2^-24 */
        float a = kern_fp32_from_bits(ax);
        float r = a * 16777216.0f; /* exact */
        uint32_t m = (uint32_t)r;
        float frac = r - (float)m;
        if (frac > 0.5f || (frac == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t exp = (ax >> 23) - 112, man = ax & 0x7fffffu;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static inline float kern_bf16_to_fp32(uint16_t b) { return kern_fp32_from_bits((uint32_t)b << 16); }
/* round to nearest even; NaN stays NaN (ggml's rule) */
static inline uint16_t kern_fp32_to_bf16(float f) {
    uint32_t x = kern_fp32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1))) >> 16);
}

#endif
