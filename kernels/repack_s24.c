/* repack_s24.c - the 2:4 sparse types S24_Q8 and S24_F16
 * (kernels/sparse24.h) in the packed 8-row layout, and the specs of their
 * tiles in plain C.  S24_Q8 first, S24_F16 at the end.
 *
 * Why: the row-major S24_Q8 kernels gather each row's activations with
 * their own index decoding, sign handling and float scaling per block and
 * row (kernels/sparse24_avx512.c): about 16 instructions per 64 weights of
 * one row, so decode was compute-bound near 21.5 GB/s per thread
 * (kvant-prune-kernels, Zen 4) and 2:4 tinyllama decoded at only 1.18-1.24x
 * its dense Q8_0 when memory was fast.  Packed like Q8_0x8, one 256-bit
 * register holds 4 kept values of 8 rows; one vpshufb gathers the 8 rows'
 * activations from a 16-byte window broadcast to both lanes, one vpdpbusd
 * (AVX2: vpmaddubsw + vpmaddwd) does 32 multiply-adds, and the scaling
 * costs one conversion and one FMA per half block for 8 outputs.  The 8
 * rows are also one contiguous stream for the prefetchers.
 *
 * Packed layout (S24_Q8x8, 336 bytes = 8 x 42, the file's size): per group
 * of 8 rows and block of 64 columns (32 kept values per row),
 *   @0   d[8]              fp16, row r's scale (the file's bytes)
 *   @16  q[8 j][8 r][4]    row r's kept values 4j .. 4j+3 (the file's q)
 *   @272 ix[4 m][16]       the positions (0..3 in the group) of kept values
 *                          8m .. 8m+7 of the 8 rows: bits 2L..2L+1 of byte
 *                          i of ix[m] (L = 0..3) hold that of row
 *                          4 (L % 2) + i / 4, kept value 8m + 4 (L / 2) + i % 4
 * so chunk j = 2m + h of the q field takes its positions from ix[m]
 * broadcast to both 128-bit lanes and shifted right by 4h (lane 0, rows
 * 0..3) and 4h + 2 (lane 1, rows 4..7), & 3 per byte (the tiles do both
 * chunks of ix[m] with one vpsrlvq: repack_s24_tile.h s24_idx).
 * Kept value k meets the activation at 4 (k / 2) + its position (group k /
 * 2, as in the file), which for chunk 2m + h lies in the 16-byte window of
 * activations 16m .. 16m+15, at 8h + 4 ((k % 4) / 2) + position.
 *
 * Arithmetic (the spec).  Activations: S24_A8 rows from the _ref quantizer
 * (per 32 activations a float scale d_a = amax / 127 and int8 a_e).  Per
 * output (row r, activation row t), acc = 0, then per block b in order and
 * its halves h = 0, 1 (kept values 16h .. 16h+15 meet activations 32h ..
 * 32h+31):
 *     i_h = sum_k q_k a_(4 (k/2) + pos_k)     (exact int32: |i_h| <= 16 * 127 * 128)
 *     acc = fmaf((float)i_h, d_w * d_a(h), acc)
 * d_w * d_a(h) one rounded float product.  Versus the row-major _ref dot
 * (kern_vec_dot_s24_q8_a8_ref, the same integer sums and products) only the
 * float summation differs: fmaf into one chain here, add of the products
 * there (tests/test_repack.c bounds it, as for every packed type). */
#include <math.h>
#include <string.h>

#include "kernels/quants.h"
#include "kernels/repack.h"
#include "kernels/sparse24.h"

/* the names of kernels/repack.h against the layouts above */
static_assert(KERN_S24X8_BYTES == KERN_PACK_ROWS * sizeof(block_s24_q8) && KERN_S24X8_Q_AT == KERN_PACK_ROWS * 2 &&
                  KERN_S24X8_IX_AT == KERN_S24X8_Q_AT + KERN_PACK_ROWS * QK_S24_Q8 / 2,
              "S24_Q8x8 layout");
static_assert(KERN_S24F16X8_BYTES == KERN_PACK_ROWS * sizeof(block_s24_f16) &&
                  KERN_S24F16X8_IX_AT == KERN_PACK_ROWS * 2 * QK_S24_F16 / 2,
              "S24_F16x8 layout");

/* byte and shift of row r's kept value k (0..31) in the ix field */
static size_t ix_byte(int r, int k) {
    return KERN_S24X8_IX_AT + 16 * (size_t)(k / 8) + 4 * (size_t)(r % 4) + (size_t)(k % 4);
}
static int ix_shift(int r, int k) { return 2 * (2 * ((k % 8) / 4) + r / 4); }

int kern_s24x8_pos(const uint8_t *w, int r, int k) { return (w[ix_byte(r, k)] >> ix_shift(r, k)) & 3; }

/* Both types: groups [g0, g1) of W (N rows of nb blocks of sb bytes) into
 * packed blocks of xb bytes, zeroed, then row(o, r, src) for each row the
 * group has (missing rows of the last group stay all zero) */
typedef void (*pack_row_fn)(uint8_t *o, int r, const void *src);
static void pack_groups(const void *W, int64_t N, int64_t nb, size_t sb, size_t xb, void *dst, int64_t g0, int64_t g1,
                        pack_row_fn row) {
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *o = (uint8_t *)dst + (size_t)g * (size_t)nb * xb;
        for (int64_t b = 0; b < nb; b++, o += xb) {
            memset(o, 0, xb);
            for (int r = 0; r < KERN_PACK_ROWS && g * KERN_PACK_ROWS + r < N; r++)
                row(o, r, (const uint8_t *)W + ((size_t)(g * KERN_PACK_ROWS + r) * (size_t)nb + (size_t)b) * sb);
        }
    }
}

static void q8_row(uint8_t *o, int r, const void *src) {
    const block_s24_q8 *s = src;
    memcpy(o + 2 * r, &s->d, 2);
    for (int j = 0; j < 8; j++) memcpy(o + KERN_S24X8_Q_AT + 32 * j + 4 * r, s->q + 4 * j, 4);
    for (int k = 0; k < QK_S24_Q8 / 2; k++) o[ix_byte(r, k)] |= (uint8_t)(kern_s24q8_pos(s, k) << ix_shift(r, k));
}

void kern_pack_s24(const void *W, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1) {
    pack_groups(W, N, K / QK_S24_Q8, sizeof(block_s24_q8), KERN_S24X8_BYTES, dst, g0, g1, q8_row);
}

void kern_unpack_s24_row(const void *P, int64_t K, int64_t n, void *row) {
    const int64_t nb = K / QK_S24_Q8;
    const int r = (int)(n % KERN_PACK_ROWS);
    const uint8_t *o = (const uint8_t *)P + (size_t)(n / KERN_PACK_ROWS) * (size_t)nb * KERN_S24X8_BYTES;
    for (int64_t b = 0; b < nb; b++, o += KERN_S24X8_BYTES) {
        block_s24_q8 *s = (block_s24_q8 *)row + b;
        memcpy(&s->d, o + 2 * r, 2);
        for (int j = 0; j < 8; j++) memcpy(s->q + 4 * j, o + KERN_S24X8_Q_AT + 32 * j + 4 * r, 4);
        memset(s->idx, 0, sizeof s->idx);
        for (int k = 0; k < QK_S24_Q8 / 2; k++) { /* kernels/sparse24.h: position of k at bit 8(k%4) + 2((k/4)%4) of word k/16 */
            const int bit = 8 * (k % 4) + 2 * ((k / 4) % 4);
            s->idx[4 * (k / 16) + bit / 8] |= (uint8_t)(kern_s24x8_pos(o, r, k) << (bit % 8));
        }
    }
}

/* the spec: y[c * ldy + r] for the group's 8 rows and C activation rows
 * (S24_A8, ba bytes apart) */
void kern_pack_s24_tile_ref(int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba) {
    for (int c = 0; c < C; c++)
        for (int r = 0; r < KERN_PACK_ROWS; r++) {
            const block_s24_a8 *ab = (const block_s24_a8 *)(a + (size_t)c * ba);
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *wb = w + (size_t)b * KERN_S24X8_BYTES;
                kern_half dh;
                memcpy(&dh, wb + 2 * r, 2);
                const float dw = kern_fp16_to_fp32(dh);
                for (int h = 0; h < 2; h++) {
                    int32_t i = 0;
                    for (int k = 16 * h; k < 16 * h + 16; k++)
                        i += (int8_t)wb[KERN_S24X8_Q_AT + 32 * (k / 4) + 4 * r + k % 4] *
                             kern_s24a8_at(&ab[b], 4 * (k / 2) + kern_s24x8_pos(wb, r, k));
                    acc = fmaf((float)i, dw * ab[b].d[4 * h], acc);
                }
            }
            y[(size_t)c * ldy + (size_t)r] = acc;
        }
}

/* ---- S24_F16 ---------------------------------------------------------------------
 * Why: the row-major S24_F16 kernels decode each row's index word and
 * gather its activations with 2-3 permutes per 8 kept values; on the Intel
 * Xeon (2 threads) that vec_dot ran at about 8.6 GB/s per thread from cache,
 * compute-bound below the memory (1.22-1.44x dense F16, not 1.4), and on
 * Zen 4 it held 2:4 tinyllama at 1.38-1.40x F16 once memory ran at 70 GB/s.
 * Packed, the 8 rows' kept values of one group of 4 columns meet the same 4
 * activations: one 128-bit broadcast and one in-lane vpermilps per 8 rows
 * and kept slot, whose index is the group's 32-bit position word shifted
 * per lane (vpermilps reads the low 2 bits only).
 *
 * Packed layout (S24_F16x8, 288 bytes = 8 x 36, the file's size): per group
 * of 8 rows and block of 32 columns (16 kept values per row, 8 column
 * groups of 4),
 *   @0   v[16 k][8 r]  fp16, row r's kept value k in column order: column
 *                      group k / 2, the lower position first (k even)
 *   @256 ix[8 g]       u32: bits 2l..2l+1 (l = 0..15) = the position (0..3
 *                      in column group g) of row l % 8's kept value 2g + l / 8
 * (the file keeps its slots in the order vpermilps wants for one row:
 * column group 4 (s / 8) + grp[s % 8]; the packing reorders them).
 *
 * Arithmetic (the spec).  Activations: the F32 inputs as they are.  Per
 * output (row r, activation row t), eight fmaf chains A[q][e] (q = 0..3, e
 * = 0, 1), all 0; for every column group i of the row in order (i = 8b +
 * g), e = 0, 1:
 *     A[i % 4][e] = fmaf(w_(2i+e), a_(4i + pos_(2i+e)), A[i % 4][e])
 * then y = ((A00 + A01) + (A10 + A11)) + ((A20 + A21) + (A30 + A31)).
 * Eight chains, so a decode tile keeps FMAs in flight for one row group.
 * Versus the row-major _ref dot (one sum in slot order, products rounded)
 * only the float summation differs (tests/test_repack.c bounds it). */
/* the file's slot (0..15 of its block) of kept value k (natural order) */
static int f16_slot(int k) {
    static const int sbase[4] = {0, 4, 2, 6}; /* inverse of kern_s24f16_grp's pairs */
    const int gg = k / 2;
    return 8 * (gg / 4) + sbase[gg % 4] + k % 2;
}

int kern_s24f16x8_pos(const uint8_t *w, int r, int k) {
    uint32_t word;
    memcpy(&word, w + KERN_S24F16X8_IX_AT + 4 * (size_t)(k / 2), 4);
    return (int)(word >> (2 * (r + 8 * (k % 2)))) & 3;
}

static void f16_row(uint8_t *o, int r, const void *src) {
    const block_s24_f16 *s = src;
    for (int k = 0; k < QK_S24_F16 / 2; k++) {
        const int sl = f16_slot(k);
        uint32_t word;
        memcpy(o + 2 * (KERN_PACK_ROWS * (size_t)k + (size_t)r), &s->v[sl], 2);
        memcpy(&word, o + KERN_S24F16X8_IX_AT + 4 * (size_t)(k / 2), 4);
        word |= ((s->idx >> (2 * sl)) & 3u) << (2 * (r + 8 * (k % 2)));
        memcpy(o + KERN_S24F16X8_IX_AT + 4 * (size_t)(k / 2), &word, 4);
    }
}

void kern_pack_s24f16(const void *W, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1) {
    pack_groups(W, N, K / QK_S24_F16, sizeof(block_s24_f16), KERN_S24F16X8_BYTES, dst, g0, g1, f16_row);
}

void kern_unpack_s24f16_row(const void *P, int64_t K, int64_t n, void *row) {
    const int64_t nb = K / QK_S24_F16;
    const int r = (int)(n % KERN_PACK_ROWS);
    const uint8_t *o = (const uint8_t *)P + (size_t)(n / KERN_PACK_ROWS) * (size_t)nb * KERN_S24F16X8_BYTES;
    for (int64_t b = 0; b < nb; b++, o += KERN_S24F16X8_BYTES) {
        block_s24_f16 *s = (block_s24_f16 *)row + b;
        s->idx = 0;
        for (int k = 0; k < QK_S24_F16 / 2; k++) {
            const int sl = f16_slot(k);
            memcpy(&s->v[sl], o + 2 * (KERN_PACK_ROWS * (size_t)k + (size_t)r), 2);
            s->idx |= (uint32_t)kern_s24f16x8_pos(o, r, k) << (2 * sl);
        }
    }
}

/* the spec: y[c * ldy + r] for the group's 8 rows and C activation rows
 * (floats, ba bytes apart) */
void kern_pack_s24f16_tile_ref(int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba) {
    for (int c = 0; c < C; c++)
        for (int r = 0; r < KERN_PACK_ROWS; r++) {
            const float *ac = (const float *)(a + (size_t)c * ba);
            float A[4][2] = {{0}};
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *wb = w + (size_t)b * KERN_S24F16X8_BYTES;
                for (int g = 0; g < 8; g++) {
                    const int64_t i = 8 * b + g;
                    for (int e = 0; e < 2; e++) {
                        const int k = 2 * g + e;
                        kern_half h;
                        memcpy(&h, wb + 2 * (KERN_PACK_ROWS * (size_t)k + (size_t)r), 2);
                        A[i % 4][e] = fmaf(kern_fp16_to_fp32(h), ac[4 * i + kern_s24f16x8_pos(wb, r, k)], A[i % 4][e]);
                    }
                }
            }
            y[(size_t)c * ldy + (size_t)r] = ((A[0][0] + A[0][1]) + (A[1][0] + A[1][1])) + ((A[2][0] + A[2][1]) + (A[3][0] + A[3][1]));
        }
}
