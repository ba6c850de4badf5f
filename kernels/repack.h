/* kernels/repack.h - weights repacked into interleaved groups of 8 rows.
 *
 * Why: the row-major kern_matmul tile converts every (row, activation,
 * block) integer dot to float on its own.  With 8 weight rows interleaved
 * in 4-byte chunks, one 256-bit register holds the same 4 k-positions of 8
 * rows; a broadcast of 4 activation bytes then feeds all 8 rows with one
 * vpmaddubsw, the integer dots of a block land in the 8 lanes already, and
 * the conversion and scaling cost one instruction per block for 8 outputs.
 * llama.cpp repacks Q4_0 the same way at load (its "CPU_REPACK" buffers).
 *
 * Packed layout (G = ceil(N / 8) groups, nb = K / QB blocks per row, QB =
 * 32 for Q4_0 / Q8_0 and 256 for the K-quants): group g holds rows 8g ..
 * 8g+7 (missing rows of the last group are zero), block after block; one
 * packed block of the group ("chunk j of row r" = the row's bytes 4j ..
 * 4j+3 of that field, stored at [j][r][4], so one 32-byte load holds the
 * same 4 byte positions of the 8 rows):
 *   Q8_0x8 (272 bytes): d[8] (fp16, row r's scale), qs[8][32]: chunk j
 *       (k = 4j .. 4j+3) of row r at qs[j][4r .. 4r+3]
 *   Q4_0x8 (144 bytes): d[8], qs[4][32]: byte qs[j][4r + i] is row r's
 *       Q4_0 byte 4j+i, i.e. element 4j+i in the low nibble and element
 *       16+4j+i in the high nibble (x = (q - 8) d)
 *   Q4_1x8 (160 bytes): d[8], m[8] (fp16), qs[4][32] as Q4_0's
 *       (x = q d + m, q in 0..15)
 *   Q5_0x8 (176 bytes): d[8], qh[8 r][4], qs[4][32] as Q4_0's; q = nibble
 *       | fifth bit << 4 (x = (q - 16) d), the row's 32 fifth bits
 *       permuted (repack.c q5_canon: element 4j + i's at bit 8i + j, element
 *       16 + 4j + i's at bit 8i + 4 + j, so chunk j's are one shift away)
 *   Q5_1x8 (192 bytes): d[8], m[8], qh[8 r][4] as Q5_0's, qs[4][32]
 *       (x = q d + m, q in 0..31)
 *   Q4_Kx8 (1184 bytes; 148 per row vs the file's 144, +2.8%):
 *       @0 d[8], @16 dmin[8] (fp16), @32 sc[8 s][8 r] (uint8, 6-bit,
 *       unpacked from the 12 scale bytes), @96 m[4 p][8 r][2] (row r's
 *       mins of sub-blocks 2p, 2p+1 side by side), @160 qs[32 j][8 r][4]
 *       (the row's qs in chunks: byte 32i + l holds element 64i + l in
 *       the low nibble, 64i + 32 + l in the high one)
 *   Q5_Kx8 (1440 bytes; 180 per row vs 176, +2.3%): as Q4_Kx8 with
 *       @160 qh[8 j][8 r][4] (bit s of qh byte l: element 32s + l's fifth
 *       bit) and qs from @416
 *   Q2_Kx8 (672 bytes = the file's 8 x 84): @0 d[8], @16 dmin[8],
 *       @32 scales[16 s][8 r] (the file's bytes: scale | min << 4),
 *       @160 qs[16 j][8 r][4]
 *   Q3_Kx8 (912 bytes; 114 per row vs 110, +3.6%): @0 d[8],
 *       @16 sc[16 s][8 r] (int8, -32..31, unpacked from the 12 scale
 *       bytes), @144 qs[16 j][8 r][4], @656 hmask[8 j][8 r][4]
 *   Q6_Kx8 (1680 bytes = the file's 8 x 210):
 *       @0 d[8], @16 sc[16 s][8 r] (int8), @144 ql[32 j][8 r][4],
 *       @1168 qh[16 j][8 r][4] (ql, qh in chunks, element order of
 *       kernels/quants_k.h)
 *   F16x8 (the file's size): element k of the 8 rows side by side at
 *       [k][r]; its own tile and spec (float FMAs, kernels/repack_f16.c)
 *   BF16x8: as F16x8 (BF16 values; BF16-rounded activations and vdpbf16ps's
 *       arithmetic, kernels/repack_f16.c)
 *   S24_Q8x8 (336 bytes = the file's 8 x 42), S24_F16x8 (288 = 8 x 36): their
 *       own layouts and specs (kernels/repack_s24.c; S24_A8 / F32 activations)
 * The Q4_0 / Q4_1 / Q8_0 / Q2_K / Q6_K packed bytes are a permutation of
 * the file's blocks, Q5_0's and Q5_1's too (their qh bits permuted);
 * Q3_K's, Q4_K's and Q5_K's scale bytes are unpacked (a bijection, so rows
 * unpack to the identical bytes).
 *
 * Arithmetic (the spec; kern_matmul_packed_ref is it in plain C, and every
 * tier gives bit-identical outputs for any T and any split, so a token's
 * logits do not depend on what it was batched with).  Activations are
 * rounded by the _ref quantizer of the weight type's vec_dot_type (Q8_0
 * for Q4_0 / Q5_0 / Q8_0, Q8_1 for Q4_1 / Q5_1, Q8_K for the K-quants; the
 * fast tiers' quantizers give the same bytes or are not used).  Per output (row n, activation t),
 * acc = 0, then per block b in order, with d_a = the activation block's
 * scale (float), a_e its int8 values:
 *   Q4_0, Q5_0, Q8_0: i_b = sum_e q_e a_e (q with the offset removed)
 *       acc = fmaf((float)i_b, d_w * d_a, acc)
 *       (|i_b| <= 32 * 128 * 127 < 2^24: exact in float; the product of
 *       two fp16 scales is exact in float)
 *   Q4_1, Q5_1 (Q8_1 activations, s_a = its stored fp16 d_a * sum a_e):
 *       i_b = sum_e q_e a_e;  acc = fmaf((float)i_b, d_w * d_a, acc);
 *       acc = fmaf(m_w, s_a, acc)  (llama.cpp's d d' sumi + m s' per block)
 *   Q4_K, Q5_K (q in 0..15 / 0..31, sub-blocks s of 32, sc_s, m_s in 0..63):
 *       I = sum_s sc_s * sum_{e in s} q_e a_e
 *       M = sum_s m_s * sum_{e in s} a_e        (from the Q8_K bsums)
 *       acc = fmaf((float)I, d_w * d_a, acc)
 *       acc = fmaf((float)M, -(dmin_w * d_a), acc)
 *       (|I| <= 8 * 63 * 32 * 31 * 127 < 2^26: exact int32, its float
 *       conversion rounds to nearest like every tier's; |M| <= 8 * 63 *
 *       32 * 127 < 2^21: exact)
 *   Q2_K (q in 0..3, sub-blocks s of 16, sc_s, m_s in 0..15):
 *       I = sum_s sc_s * sum_{e in s} q_e a_e,  M = sum_s m_s * bsum_s
 *       acc = fmaf((float)I, d_w * d_a, acc)
 *       acc = fmaf((float)M, -(dmin_w * d_a), acc)
 *       (|I| <= 16 * 15 * 16 * 3 * 127 < 2^21, |M| < 2^19: exact)
 *   Q6_K (q in 0..63, offset 32, sub-blocks s of 16, int8 sc_s), and
 *   Q3_K (q in 0..7, offset 4, sc_s in -32..31):
 *       I = sum_s sc_s * sum_{e in s} (q_e - off) a_e
 *       acc = fmaf((float)I, d_w * d_a, acc)
 *       (|I| <= 16 * 128 * 16 * 32 * 127 < 2^28: exact int32)
 *   y[t][n] = acc
 * d_w * d_a, dmin_w * d_a are one rounded float product each (the Q8_K
 * scale is a float), the same operation at every tier.  Versus
 * kern_matmul_ref this differs only by the activation rounding (|a -
 * a_q| <= d_a / 2, d_a ~ amax / 127) and float summation order, as
 * kern_matmul does; tests/test_repack.c bounds it. */
#ifndef KVANT_KERNELS_REPACK_H
#define KVANT_KERNELS_REPACK_H

#include "core/core.h"
#include "kernels/types.h"
#include "kernels/w8a8.h"

#define KERN_PACK_ROWS 8

/* The chunked packed blocks' sizes and field offsets in bytes, as the
 * layout comment above draws them (d[8] at 0 in every one), named once for
 * the type table (repack.c checks that each layout's fields tile its block)
 * and the tiles.  Q5_Kx8 keeps Q4_Kx8's dmin, sc and m. */
enum {
    KERN_Q8_0X8_BYTES = 272, KERN_Q8_0X8_QS_AT = 16,
    KERN_Q4_0X8_BYTES = 144, KERN_Q4_0X8_QS_AT = 16,
    KERN_Q4_1X8_BYTES = 160, KERN_Q4_1X8_M_AT = 16, KERN_Q4_1X8_QS_AT = 32,
    KERN_Q5_0X8_BYTES = 176, KERN_Q5_0X8_QH_AT = 16, KERN_Q5_0X8_QS_AT = 48,
    KERN_Q5_1X8_BYTES = 192, KERN_Q5_1X8_M_AT = 16, KERN_Q5_1X8_QH_AT = 32, KERN_Q5_1X8_QS_AT = 64,
    KERN_Q4_KX8_BYTES = 1184, KERN_Q4_KX8_DMIN_AT = 16, KERN_Q4_KX8_SC_AT = 32, KERN_Q4_KX8_M_AT = 96,
    KERN_Q4_KX8_QS_AT = 160,
    KERN_Q5_KX8_BYTES = 1440, KERN_Q5_KX8_QH_AT = 160, KERN_Q5_KX8_QS_AT = 416,
    KERN_Q2_KX8_BYTES = 672, KERN_Q2_KX8_DMIN_AT = 16, KERN_Q2_KX8_SC_AT = 32, KERN_Q2_KX8_QS_AT = 160,
    KERN_Q3_KX8_BYTES = 912, KERN_Q3_KX8_SC_AT = 16, KERN_Q3_KX8_QS_AT = 144, KERN_Q3_KX8_HMASK_AT = 656,
    KERN_Q6_KX8_BYTES = 1680, KERN_Q6_KX8_SC_AT = 16, KERN_Q6_KX8_QL_AT = 144, KERN_Q6_KX8_QH_AT = 1168,
};

/* true if wtype has a packed layout (F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K .. Q6_K, and
 * kvant's PTQ types, kernels/repack_ptq.c, W8A8, kernels/repack_w8a8.c, and the 2:4
 * S24_Q8 and S24_F16, kernels/repack_s24.c) */
bool kern_pack_supported(int wtype);
/* true if rows of K elements of wtype can be packed (K a multiple of its block) */
bool kern_pack_fits(int wtype, int64_t K);
/* bytes of the packed N x K matrix (K a multiple of the type's block size) */
size_t kern_pack_bytes(int wtype, int64_t N, int64_t K);
/* Packs row groups [g0, g1) of W (N rows of K elements, row-major, as in
 * the file) into dst (kern_pack_bytes; any alignment).  Groups are
 * independent, so threads may pack disjoint ranges. */
void kern_pack(const void *W, int wtype, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1);
/* and back (tests): row n of the packed matrix as the original row bytes */
void kern_unpack_row(const void *P, int wtype, int64_t N, int64_t K, int64_t n, void *row);

/* kern_matmul_packed of a packed LLM_INT8 (or W8A8) matrix with outliers
 * o; scratch: kern_matmul_scratch_bytes(T, K) */
void kern_matmul_packed_outl(core_pool *pool, void *scratch, const void *P, const float *x, float *y, int T, int64_t N,
                             int64_t K, const kern_outliers *o);

/* y[T][N] = x[T][K] . W^T for packed W, threads splitting the row groups.
 * scratch: kern_matmul_scratch_bytes(T, K). */
void kern_matmul_packed(core_pool *pool, void *scratch, const void *P, int wtype, const float *x, float *y, int T,
                        int64_t N, int64_t K);
/* Several packed matrices of one type and K against the same x (a layer's
 * Q, K and V; gate and up): the activations are quantized once and the
 * threads take the row groups of all of them in one pool run.  Each y is
 * bit-identical to its own kern_matmul_packed.  n_out <= KERN_PACK_MAX_OUT. */
#define KERN_PACK_MAX_OUT 4
typedef struct {
    const void *P; /* packed N x K matrix */
    int64_t N;
    float *y;      /* y[T][N] */
} kern_packed_out;
void kern_matmul_packed_n(core_pool *pool, void *scratch, int wtype, const kern_packed_out *out, int n_out,
                          const float *x, int T, int64_t K);
/* The spec above in plain C, one thread (allocates its scratch). */
void kern_matmul_packed_ref(const void *P, int wtype, const float *x, float *y, int T, int64_t N, int64_t K);

/* ---- private to kernels/: the per-ISA tile ----------------------------------------
 * Outputs of one group (8 rows) for C <= 4 activation rows:
 *   y[c * ldy + r] for r < 8, c < C
 * w: the group's nb packed blocks; a: C activation rows of the type's
 * activation type (Q8_0 or Q8_K), ba bytes apart; ad: per activation row
 * (bn floats apart) its nb block scales as floats; as: per activation row
 * (bn * X int32 apart) X int32 extras per block, X per weight type:
 *   Q4_0, Q5_0: 1, the block's sum of q;  Q4_1, Q5_1: 1, the Q8_1 block's
 *         s as a float's bits;  Q8_0, Q2_K, Q3_K, Q6_K: 0 (as unused);
 *   Q4_K, Q5_K: 4, extra p = the sums of q over the 32-element sub-blocks 2p
 *         and 2p+1 as two int16 (2p in the low half; |sum| <= 4064). */
typedef void (*kern_pack_tile_fn)(int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a,
                                  size_t ba, const float *ad, const int32_t *as, size_t bn);
/* the AVX2 tile of wtype (kernels/repack_avx2.c), NULL if none */
kern_pack_tile_fn kern_pack_tile_avx2(int wtype);
/* the AVX-512 VNNI tile of wtype (kernels/repack_avx512.c), NULL if none
 * (the AVX2 tile serves that type at the avx512 tier) */
kern_pack_tile_fn kern_pack_tile_avx512(int wtype);
/* the tile for decode (T = 1) at the avx512 tier (kernels/repack_avx512.c):
 * kern_pack_tile_avx512's, or NULL where the AVX2 tile measured faster
 * (Q4_K on Zen 4) */
kern_pack_tile_fn kern_pack_tile_dec_avx512(int wtype);
/* Decode (T = 1) over ng consecutive full groups at once, gs bytes apart:
 * y[0 .. 8 ng) from the groups at w and the one activation row (a, ad, as
 * as for the tile); each group's outputs bit-identical to its tile's.  More
 * streams for the prefetchers than one group at a time
 * (kernels/repack_avx512.c, repack_s24_tile.h). */
typedef void (*kern_pack_dec_fn)(int64_t nb, float *y, const uint8_t *w, size_t gs, const uint8_t *a, const float *ad,
                                 const int32_t *as);
/* the AVX-512 one of wtype and its ng (kernels/repack_avx512.c), NULL if
 * none: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, S24_Q8 and S24_F16 where a zmm operation
 * costs one (not Zen 4) */
kern_pack_dec_fn kern_pack_dec_avx512(int wtype, int *ng);
/* the AVX2 one of wtype and its ng (kernels/repack_avx2.c), NULL if none:
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1; used at the avx2 tier */
kern_pack_dec_fn kern_pack_dec_avx2(int wtype, int *ng);
/* For tests: kern_matmul_packed_ref's driver (one thread) with this tile
 * instead of the plain-C one, e.g. an AVX-512 tile compiled for emulation
 * (tests/repack_avx512_emulated.c); and, when T = 1, the groups that make
 * whole runs of dec_ng through dec if not NULL. */
void kern_matmul_packed_tile(kern_pack_tile_fn tile, kern_pack_dec_fn dec, int dec_ng, const void *P, int wtype,
                             const float *x, float *y, int T, int64_t N, int64_t K);
/* kern_quant_q8_k_ref in AVX2, the same bytes for finite x (tests/test_repack.c) */
void kern_pack_quant_q8_k_avx2(const float *x, void *y, int64_t n);

/* ---- private to kernels/: F16 and BF16 (kernels/repack_f16.c), reached through the
 * entry points above.  Element k of 8 rows side by side (the 16-bit values, one
 * layout for both); layout and specs in repack_f16.c: F16 rounds the activations
 * to F16, one fmaf chain in k order per output; BF16 rounds them to BF16 and
 * runs vdpbf16ps's arithmetic (pairs, the odd element first, denormals flushed). */
size_t kern_pack_f16_bytes(int64_t N, int64_t K);
void kern_pack_f16(const void *W, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1);
void kern_unpack_f16_row(const void *P, int64_t K, int64_t n, void *row);
/* wtype KT_F16 or KT_BF16: every matrix of out against x, whose rows are rounded once */
void kern_matmul_packed_f16_n(core_pool *pool, void *scratch, int wtype, const kern_packed_out *out, int n_out,
                              const float *x, int T, int64_t K);
void kern_matmul_packed_f16_ref(const void *P, int wtype, const float *x, float *y, int T, int64_t N, int64_t K);
/* most activation rows of one tile call */
#define KERN_PACK_F16_TC 12
/* G >= 1 groups (w: group after group) x C (1..KERN_PACK_F16_TC) activation
 * rows (ba elements apart): y[c * ldy + 8 gi + r].  The activations are
 * floats (F16- or BF16-rounded) for every tile except kern_pack_bf16_tile_avx512's,
 * which takes them as BF16 values (uint16_t). */
typedef void (*kern_pack_f16_tile_fn)(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w,
                                      const void *a, size_t ba);
kern_pack_f16_tile_fn kern_pack_f16_tile_avx2(void);
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx2(void);
kern_pack_f16_tile_fn kern_pack_f16_tile_avx512(void);
/* BF16's is on vdpbf16ps and takes BF16 activations; NULL without AVX512_BF16 */
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx512(void);

/* ---- private to kernels/: kvant's PTQ types (kernels/repack_ptq.c: layout
 * and spec), reached through the entry points above.  Q8_0 activations
 * with the Q4_0 extras (the block sums); a header (d, and z for zero-point)
 * every ns sub-blocks of 32 (ns = G / 32, or K / 32 for per-row types, which
 * pack only when K % 32 == 0). */
bool kern_pack_ptq_fits(int t, int64_t K);
int64_t kern_pack_ptq_ns(int t, int64_t K);
size_t kern_pack_ptq_bytes(int t, int64_t N, int64_t K);
void kern_pack_ptq(const void *W, int t, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1);
void kern_unpack_ptq_row(const void *P, int t, int64_t K, int64_t n, void *row);
/* kern_pack_tile_fn with the header period ns */
typedef void (*kern_pack_ptq_tile_fn)(int64_t nb, int64_t ns, int C, float *y, size_t ldy, const uint8_t *w,
                                      const uint8_t *a, size_t ba, const float *ad, const int32_t *as, size_t bn);
void kern_pack_ptq_tile_ref(int t, int64_t nb, int64_t ns, int C, float *y, size_t ldy, const uint8_t *w,
                            const uint8_t *a, size_t ba);
kern_pack_ptq_tile_fn kern_pack_ptq_tile_avx2(int t);
kern_pack_ptq_tile_fn kern_pack_ptq_tile_avx512(int t);
/* ---- private to kernels/: the stored W8A8 type (kernels/repack_w8a8.c), reached
 * through the entry points above: per-token INT8 activations, any K */
bool kern_pack_w8a8_fits(int64_t K);
size_t kern_pack_w8a8_bytes(int64_t N, int64_t K);
void kern_pack_w8a8(const void *W, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1);
void kern_unpack_w8a8_row(const void *P, int64_t K, int64_t n, void *row);
/* outl: NULL, or LLM_INT8's outlier columns (kern_outliers) for out[0] (n_out 1) */
void kern_matmul_packed_w8a8_n(core_pool *pool, void *scratch, const kern_packed_out *out, int n_out, const float *x,
                               int T, int64_t K, const kern_outliers *outl);
/* y[c * ldy + r] for one group (8 rows) and C <= 4 tokens: x their int8 rows
 * (4 nc bytes, ldx apart), sx their scales */
typedef void (*kern_pack_w8a8_tile_fn)(int64_t nc, int C, float *y, size_t ldy, const uint8_t *w, const int8_t *x,
                                       size_t ldx, const float *sx);
kern_pack_w8a8_tile_fn kern_pack_w8a8_tile_avx2(void);
kern_pack_w8a8_tile_fn kern_pack_w8a8_tile_avx512(void);
/* For tests: one thread with this tile (NULL: the plain-C spec) */
void kern_matmul_packed_w8a8_tile(kern_pack_w8a8_tile_fn tile, const void *P, const float *x, float *y, int T,
                                  int64_t N, int64_t K, const kern_outliers *outl);

/* ---- private to kernels/: the 2:4 sparse S24_Q8 and S24_F16 (kernels/repack_s24.c:
 * layouts and specs), reached through the entry points above: S24_A8 activations
 * (S24_Q8) or F32 ones (S24_F16), the tiles' kern_pack_tile_fn (ad, as unused: the
 * scales are in the S24_A8 blocks) */
/* the packed blocks' sizes and field offsets in bytes (the layouts:
 * kernels/repack_s24.c, which checks them), named once for the packer, the
 * type table (repack.c) and the tiles */
enum {
    KERN_S24X8_BYTES = 336,
    KERN_S24X8_Q_AT = 16,
    KERN_S24X8_IX_AT = 272,
    KERN_S24F16X8_BYTES = 288,
    KERN_S24F16X8_IX_AT = 256,
};
void kern_pack_s24(const void *W, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1);
void kern_unpack_s24_row(const void *P, int64_t K, int64_t n, void *row);
/* position (0..3) of row r's kept value k (0..31) in packed block w */
int kern_s24x8_pos(const uint8_t *w, int r, int k);
void kern_pack_s24_tile_ref(int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba);
/* S24_F16: F32 activations as they are (a: C rows of floats, ba bytes apart) */
void kern_pack_s24f16(const void *W, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1);
void kern_unpack_s24f16_row(const void *P, int64_t K, int64_t n, void *row);
int kern_s24f16x8_pos(const uint8_t *w, int r, int k);
void kern_pack_s24f16_tile_ref(int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a,
                               size_t ba);

/* For tests: kern_matmul_packed_tile for a PTQ type */
void kern_matmul_packed_ptq_tile(kern_pack_ptq_tile_fn tile, const void *P, int wtype, const float *x, float *y,
                                 int T, int64_t N, int64_t K);

#endif
