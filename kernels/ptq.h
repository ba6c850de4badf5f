/* kernels/ptq.h - kvant's PTQ tensor types: absmax and zero-point INT-n,
 * 2..8 bits, per tensor, per channel (row) or per group of 32/64/128.
 *
 * Type numbers 1024..1093 (KT_KVANT_BASE + 35 * scheme + 5 * (bits - 2) + gran):
 *   scheme  0 absmax (A), 1 zero-point (Z)
 *   gran    0 per tensor (T), 1 per channel (C), 2/3/4 groups of 32/64/128 (G32/G64/G128)
 * Names: "PTQ_A4_G32", "PTQ_Z8_C", "PTQ_A3_T", ...
 *
 * Every element is stored as an unsigned code u in [0, 2^b - 1] and stands for
 *     x = d * (u - z)
 * with d an F16 scale and z the zero point: absmax stores no z (it is 2^(b-1),
 * so u - z = q in [-(2^(b-1) - 1), 2^(b-1) - 1]); zero-point stores z as one
 * byte (an integer, so x = 0 is represented exactly).
 *
 * Bit packing (all widths): the codes of a block form an LSB-first bit stream,
 * code i in bits [i*b, i*b + b) of the packed bytes (4 bits: byte j = u[2j] |
 * u[2j+1] << 4; 8 bits: byte j = u[j]).
 *
 * Layouts.
 *  - Groups (G = 32, 64, 128): ggml's block model.  A block is G elements:
 *        F16 d | [u8 z, zero-point only] | G*b/8 bytes of codes
 *    i.e. 2 (+1) + 4G/8 bytes at 4 bits: PTQ_A4_G32 = 18 bytes = 4.5 bits per
 *    weight (Q4_0's size), PTQ_Z4_G32 19 bytes = 4.75, PTQ_Z4_G128 = 4.19.
 *    Rows must be a multiple of G; the activations pair with Q8_0 (blocks of
 *    32), and a weight block spans G/32 activation blocks:
 *        dot = sum_blocks d * sum_32 d_a * (sum_i (u_i - c) a_i + (c - z) sum_i a_i)
 *    (c = 2^(b-1): integer sums, exact in int32).
 *  - Per channel and per tensor: the ROW is the block.  A row of n elements is
 *        F16 d | [u8 z] | ceil(n*b/8) bytes of codes
 *    so rows of any length work (stories260K's 172-column ffn_down), at
 *    2 (3) bytes of scale per row.  Per-tensor types are the same layout with
 *    the tensor's one (d, z) repeated in every row (2-3 bytes per row: kept,
 *    so that every row decodes on its own and the kernels are shared).  These
 *    types report block_size 1 and a row_bytes function; to_float and vec_dot
 *    take exactly ONE row (n = the row length).  Activations stay F32 (a Q8_0
 *    row would need n % 32 == 0):  dot = d * (sum_i u_i a_i - z sum_i a_i).
 *
 * from_float_ref quantizes with plain min/max ranges (no clipping); a per-
 * tensor type's from_float_ref sees one row, so it gives that row its own
 * range.  compress/ptq.h chooses ranges for whole tensors, with MSE clipping. */
#ifndef KVANT_KERNELS_PTQ_H
#define KVANT_KERNELS_PTQ_H

#include "kernels/types.h"

enum { KERN_PTQ_ABSMAX = 0, KERN_PTQ_ZEROPOINT = 1 };
enum { KERN_PTQ_TENSOR = 0, KERN_PTQ_CHANNEL = 1, KERN_PTQ_G32 = 2, KERN_PTQ_G64 = 3, KERN_PTQ_G128 = 4 };
#define KERN_PTQ_FIRST KT_KVANT_BASE
#define KERN_PTQ_COUNT 70
#define KERN_PTQ_TYPE(scheme, bits, gran) (KERN_PTQ_FIRST + 35 * (scheme) + 5 * ((bits) - 2) + (gran))
/* bytes of one group block / of a row header */
#define KERN_PTQ_HDR(scheme) (2 + (scheme))
#define KERN_PTQ_BLOCK_BYTES(scheme, bits, G) (KERN_PTQ_HDR(scheme) + (G) * (bits) / 8)

static inline bool kern_ptq_is(int t) { return t >= KERN_PTQ_FIRST && t < KERN_PTQ_FIRST + KERN_PTQ_COUNT; }
/* decodes a PTQ type number (false if t is not one) */
static inline bool kern_ptq_decode(int t, int *scheme, int *bits, int *gran) {
    if (!kern_ptq_is(t)) return false;
    const int i = t - KERN_PTQ_FIRST;
    *scheme = i / 35;
    *bits = 2 + (i % 35) / 5;
    *gran = i % 5;
    return true;
}
static inline int kern_ptq_group(int gran) { return gran == KERN_PTQ_G32 ? 32 : gran == KERN_PTQ_G64 ? 64 : gran == KERN_PTQ_G128 ? 128 : 0; }

/* ---- bit packing ----------------------------------------------------------
 * packs n codes (each < 2^bits) into ceil(n*bits/8) bytes (the last byte's
 * unused high bits are 0) / unpacks them. */
void kern_ptq_pack(const uint8_t *u, int64_t n, int bits, uint8_t *out);
void kern_ptq_unpack(const uint8_t *in, int64_t n, int bits, uint8_t *u);
static inline size_t kern_ptq_packed_bytes(int64_t n, int bits) { return (size_t)((n * bits + 7) / 8); }

/* ---- one group: codes and dequantization (the spec) ------------------------
 * Writes the codes of x[0..n) for scale d and zero point z (rounding to
 * nearest, clamped to [0, 2^bits - 1]). */
void kern_ptq_codes(const float *x, int64_t n, int bits, float d, int z, uint8_t *u);
/* plain range (no clipping): absmax d = max|x| / (2^(b-1) - 1), z = 2^(b-1);
 * zero-point over [min(x, 0), max(x, 0)]: d = (max - min) / (2^b - 1),
 * z = round(-min / d).  d is rounded to F16 (as stored) before z is chosen. */
void kern_ptq_range(const float *x, int64_t n, int scheme, int bits, float *d, int *z);

/* Writes one group block / one row (header + packed codes) for given (d, z);
 * n = G for groups, the row length for rows.  Returns the bytes written. */
size_t kern_ptq_write(uint8_t *out, int scheme, int bits, float d, int z, const uint8_t *u, int64_t n);

/* generic _ref routines of PTQ type t (one row for per-row types) */
void kern_ptq_dequant_ref(int t, const void *x, float *y, int64_t n);
void kern_ptq_quant_ref(int t, const float *x, void *y, int64_t n);
void kern_ptq_vec_dot_ref(int t, int64_t n, float *s, const void *x, const void *y);
size_t kern_ptq_row_bytes(int t, int64_t n);

/* ---- the rows of the type table (kernels/types.c) ------------------------
 * Each type has its own wrapper functions (the table's signatures carry no
 * type), generated from this list. */
#define KERN_PTQ_GRANS_(X, S, B) X(S, B, T, 0) X(S, B, C, 1) X(S, B, G32, 2) X(S, B, G64, 3) X(S, B, G128, 4)
#define KERN_PTQ_BITS_(X, S)                                                                                \
    KERN_PTQ_GRANS_(X, S, 2) KERN_PTQ_GRANS_(X, S, 3) KERN_PTQ_GRANS_(X, S, 4) KERN_PTQ_GRANS_(X, S, 5) \
    KERN_PTQ_GRANS_(X, S, 6) KERN_PTQ_GRANS_(X, S, 7) KERN_PTQ_GRANS_(X, S, 8)
/* X(scheme letter A|Z, bits, gran suffix T|C|G32|G64|G128, gran index) */
#define KERN_PTQ_FOR_EACH(X) KERN_PTQ_BITS_(X, A) KERN_PTQ_BITS_(X, Z)
#define KERN_PTQ_SCHEME_A 0
#define KERN_PTQ_SCHEME_Z 1
#define KERN_PTQ_T(S, B, G, g) KERN_PTQ_TYPE(KERN_PTQ_SCHEME_##S, B, g)

#define KERN_PTQ_DECL_(S, B, G, g)                                                   \
    void kern_ptq_dequant_##S##B##_##G##_ref(const void *x, float *y, int64_t n);     \
    void kern_ptq_quant_##S##B##_##G##_ref(const float *x, void *y, int64_t n);       \
    void kern_ptq_vec_dot_##S##B##_##G##_ref(int64_t n, float *s, const void *x, const void *y); \
    size_t kern_ptq_row_bytes_##S##B##_##G(int64_t n);
KERN_PTQ_FOR_EACH(KERN_PTQ_DECL_)

/* a row of the type table (kern_type_traits) */
#define KERN_PTQ_ROW_(S, B, G, g)                                                                           \
    [KERN_PTQ_T(S, B, G, g) - KT_KVANT_BASE] = {                                                            \
        "PTQ_" #S #B "_" #G, (g) >= 2 ? 8 << (g) : 1,                                                      \
        (g) >= 2 ? KERN_PTQ_BLOCK_BYTES(KERN_PTQ_SCHEME_##S, B, 8 << (g)) : 1,                              \
        kern_ptq_dequant_##S##B##_##G##_ref, kern_ptq_quant_##S##B##_##G##_ref, (g) >= 2 ? KT_Q8_0 : KT_F32, \
        kern_ptq_vec_dot_##S##B##_##G##_ref, (g) >= 2 ? 0 : kern_ptq_row_bytes_##S##B##_##G},
#define KERN_PTQ_TYPE_ROWS KERN_PTQ_FOR_EACH(KERN_PTQ_ROW_)

/* installs the AVX2 kernels (kernels/ptq_avx2.c) into a tier's ops */
void kern_ptq_avx2_install(kern_type_ops *ops);

#endif
