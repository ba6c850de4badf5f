/* repack.c - packing into groups of 8 rows, the reference tile (the spec
 * of kernels/repack.h in plain C) and the threaded driver. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/ptq.h"
#include "kernels/w8a8.h"
#include "kernels/quants.h"
#include "kernels/repack.h"
#include "kernels/sparse24.h"

#if defined(__x86_64__) || defined(_M_X64)
#define PACK_X86 1
#else
#define PACK_X86 0
#endif

/* ---- the packed layouts as data ------------------------------------------------
 * A packed block is a set of fields, each copied from the (canonical)
 * source block in chunks: chunk j of row r of a field lands at
 * dst + (8 j + r) * chunk.  The Q3_K, Q4_K and Q5_K canonical blocks have
 * their 12 scale bytes unpacked (D->canon); the others are the file's
 * block as is. */
typedef struct {
    uint16_t src, bytes, chunk, dst;
} pack_field;

/* a layout that is not chunked fields (the 2:4 types, kernels/repack_s24.c):
 * its own packing, unpacking and reference tile */
typedef struct {
    void (*pack)(const void *W, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1);
    void (*unpack)(const void *P, int64_t K, int64_t n, void *row);
    void (*tile_ref)(int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba);
} pack_own;
static const pack_own OWN_S24_Q8 = {kern_pack_s24, kern_unpack_s24_row, kern_pack_s24_tile_ref};
static const pack_own OWN_S24_F16 = {kern_pack_s24f16, kern_unpack_s24f16_row, kern_pack_s24f16_tile_ref};

typedef struct {
    int wtype, atype; /* weights, activations (the type's vec_dot_type) */
    int64_t qk;       /* elements per block */
    size_t xb;        /* bytes of a packed block of 8 rows */
    int n_ax;         /* int32 extras per activation block (kernels/repack.h) */
    int nf;
    pack_field f[6];
    /* NULL, or the file's block <-> the canonical block the fields read */
    void (*canon)(const uint8_t *b, size_t sb, uint8_t *c);
    void (*uncanon)(const uint8_t *c, size_t sb, uint8_t *b);
    const pack_own *own; /* NULL: the fields above */
} pack_desc;

/* Q4_K canonical block: d @0, dmin @2, sc[8] @4, m[8] @12, qs[128] @20;
 * Q5_K: the same with qh[32] @20, qs[128] @52 */
enum { K5C_BYTES = 180 }; /* the largest canonical block */

/* Q4_K / Q5_K block <-> canonical block (scales unpacked; a bijection).
 * Both blocks start d, dmin, scales[12]; what follows (Q4_K: qs; Q5_K:
 * qh, qs) is copied as is. */
static_assert(offsetof(block_q4_K, scales) == 4 && offsetof(block_q5_K, scales) == 4 && offsetof(block_q4_K, qs) == 16 &&
                  offsetof(block_q5_K, qh) == 16 && offsetof(block_q5_K, qs) == 48,
              "block_q4_K / block_q5_K layout");
static void k45_canon(const uint8_t *b, size_t sb, uint8_t *c) {
    memcpy(c, b, 4); /* d, dmin */
    for (int s = 0; s < 8; s++) kern_k4_scale_min(s, b + 4, c + 4 + s, c + 12 + s);
    memcpy(c + 20, b + 16, sb - 16);
}

static void k45_uncanon(const uint8_t *c, size_t sb, uint8_t *b) {
    const uint8_t *sc = c + 4, *m = c + 12;
    memcpy(b, c, 4);
    for (int j = 0; j < 4; j++) {
        b[4 + j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        b[4 + j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        b[4 + j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
    memcpy(b + 16, c + 20, sb - 16);
}

/* Q3_K block <-> canonical block: d @0, sc[16] @2 (int8, -32..31), hmask
 * @18, qs @50 (the 12 scale bytes unpacked; a bijection) */
static_assert(offsetof(block_q3_K, qs) == 32 && offsetof(block_q3_K, scales) == 96 && offsetof(block_q3_K, d) == 108,
              "block_q3_K layout");

static void k3_canon(const uint8_t *b, size_t sb, uint8_t *c) {
    (void)sb;
    memcpy(c, b + 108, 2);
    for (int s = 0; s < 16; s++) c[2 + s] = (uint8_t)(int8_t)kern_q3_k_scale(b + 96, s);
    memcpy(c + 18, b, 96); /* hmask, qs */
}

static void k3_uncanon(const uint8_t *c, size_t sb, uint8_t *b) {
    (void)sb;
    memcpy(b + 108, c, 2);
    memset(b + 96, 0, 12);
    for (int j = 0; j < 16; j++) {
        const int v = (int8_t)c[2 + j] + 32; /* 0..63: low 4 bits in a nibble of bytes 0..7, top 2 in bytes 8..11 */
        b[96 + j % 8] |= (uint8_t)((v & 15) << (j < 8 ? 0 : 4));
        b[96 + 8 + j % 4] |= (uint8_t)((v >> 4) << (2 * (j / 4)));
    }
    memcpy(b, c + 18, 96);
}


/* Q5_0 / Q5_1 block <-> canonical block: the 32 fifth bits (qh, little
 * endian) permuted so a tile finds those of a qs chunk with one shift:
 * element 4j + i (low nibble of qs byte 4j + i) at bit 8i + j, element
 * 16 + 4j + i (its high nibble) at bit 8i + 4 + j.  For chunk j, bit 4 of
 * byte i is then (qh << (4 - j)) for the low nibble, (qh >> j) for the
 * high one. */
static int q5_qh_at(int e) { return e < 16 ? 8 * (e % 4) + e / 4 : 8 * ((e - 16) % 4) + 4 + (e - 16) / 4; }
static size_t q5_qh_off(size_t sb) { return sb == sizeof(block_q5_0) ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh); }
static void q5_canon(const uint8_t *b, size_t sb, uint8_t *c) {
    const size_t o = q5_qh_off(sb);
    uint32_t qh, p = 0;
    memcpy(c, b, sb);
    memcpy(&qh, b + o, 4);
    for (int e = 0; e < 32; e++) p |= ((qh >> e) & 1u) << q5_qh_at(e);
    memcpy(c + o, &p, 4);
}
static void q5_uncanon(const uint8_t *c, size_t sb, uint8_t *b) {
    const size_t o = q5_qh_off(sb);
    uint32_t p, qh = 0;
    memcpy(b, c, sb);
    memcpy(&p, c + o, 4);
    for (int e = 0; e < 32; e++) qh |= ((p >> q5_qh_at(e)) & 1u) << e;
    memcpy(b + o, &qh, 4);
}
static_assert(offsetof(block_q4_1, qs) == 4 && offsetof(block_q5_0, qh) == 2 && offsetof(block_q5_0, qs) == 6 &&
                  offsetof(block_q5_1, qh) == 4 && offsetof(block_q5_1, qs) == 8 && sizeof(block_q5_0) != sizeof(block_q5_1),
              "block_q4_1 / q5_0 / q5_1 layout");

static const pack_desc DESCS[] = {
    {KT_Q8_0, KT_Q8_0, 32, KERN_Q8_0X8_BYTES, 0, 2, {{0, 2, 2, 0}, {2, 32, 4, KERN_Q8_0X8_QS_AT}}, NULL, NULL},
    {KT_Q4_0, KT_Q8_0, 32, KERN_Q4_0X8_BYTES, 1, 2, {{0, 2, 2, 0}, {2, 16, 4, KERN_Q4_0X8_QS_AT}}, NULL, NULL},
    {KT_Q4_1, KT_Q8_1, 32, KERN_Q4_1X8_BYTES, 1, 3,
     {{0, 2, 2, 0}, {2, 2, 2, KERN_Q4_1X8_M_AT}, {4, 16, 4, KERN_Q4_1X8_QS_AT}}, NULL, NULL},
    {KT_Q5_0, KT_Q8_0, 32, KERN_Q5_0X8_BYTES, 1, 3,
     {{0, 2, 2, 0}, {2, 4, 4, KERN_Q5_0X8_QH_AT}, {6, 16, 4, KERN_Q5_0X8_QS_AT}}, q5_canon, q5_uncanon},
    {KT_Q5_1, KT_Q8_1, 32, KERN_Q5_1X8_BYTES, 1, 4,
     {{0, 2, 2, 0}, {2, 2, 2, KERN_Q5_1X8_M_AT}, {4, 4, 4, KERN_Q5_1X8_QH_AT}, {8, 16, 4, KERN_Q5_1X8_QS_AT}},
     q5_canon, q5_uncanon},
    {KT_Q4_K, KT_Q8_K, QK_K, KERN_Q4_KX8_BYTES, 4, 5,
     {{0, 2, 2, 0}, {2, 2, 2, KERN_Q4_KX8_DMIN_AT}, {4, 8, 1, KERN_Q4_KX8_SC_AT}, {12, 8, 2, KERN_Q4_KX8_M_AT},
      {20, 128, 4, KERN_Q4_KX8_QS_AT}},
     k45_canon, k45_uncanon},
    {KT_Q5_K, KT_Q8_K, QK_K, KERN_Q5_KX8_BYTES, 4, 6,
     {{0, 2, 2, 0}, {2, 2, 2, KERN_Q4_KX8_DMIN_AT}, {4, 8, 1, KERN_Q4_KX8_SC_AT}, {12, 8, 2, KERN_Q4_KX8_M_AT},
      {20, 32, 4, KERN_Q5_KX8_QH_AT}, {52, 128, 4, KERN_Q5_KX8_QS_AT}},
     k45_canon, k45_uncanon},
    {KT_Q2_K, KT_Q8_K, QK_K, KERN_Q2_KX8_BYTES, 0, 4,
     {{80, 2, 2, 0}, {82, 2, 2, KERN_Q2_KX8_DMIN_AT}, {0, 16, 1, KERN_Q2_KX8_SC_AT}, {16, 64, 4, KERN_Q2_KX8_QS_AT}},
     NULL, NULL},
    {KT_Q3_K, KT_Q8_K, QK_K, KERN_Q3_KX8_BYTES, 0, 4,
     {{0, 2, 2, 0}, {2, 16, 1, KERN_Q3_KX8_SC_AT}, {50, 64, 4, KERN_Q3_KX8_QS_AT}, {18, 32, 4, KERN_Q3_KX8_HMASK_AT}},
     k3_canon, k3_uncanon},
    {KT_Q6_K, KT_Q8_K, QK_K, KERN_Q6_KX8_BYTES, 0, 4,
     {{208, 2, 2, 0}, {192, 16, 1, KERN_Q6_KX8_SC_AT}, {0, 128, 4, KERN_Q6_KX8_QL_AT}, {128, 64, 4, KERN_Q6_KX8_QH_AT}},
     NULL, NULL},
    /* 2:4 sparse: its layout is not chunked fields (kernels/repack_s24.c packs it) */
    {KT_S24_Q8, KT_S24_A8, QK_S24_Q8, KERN_S24X8_BYTES, 0, 0, {{0, 0, 0, 0}}, NULL, NULL, &OWN_S24_Q8},
    {KT_S24_F16, KT_F32, QK_S24_F16, KERN_S24F16X8_BYTES, 0, 0, {{0, 0, 0, 0}}, NULL, NULL, &OWN_S24_F16}, /* F32 activations as they are */
};
static_assert(KERN_Q8_0X8_BYTES == 8 * sizeof(block_q8_0) && KERN_Q4_0X8_BYTES == 8 * sizeof(block_q4_0) &&
                  KERN_Q4_1X8_BYTES == 8 * sizeof(block_q4_1) && KERN_Q5_0X8_BYTES == 8 * sizeof(block_q5_0) &&
                  KERN_Q5_1X8_BYTES == 8 * sizeof(block_q5_1) && KERN_Q2_KX8_BYTES == 8 * sizeof(block_q2_K) &&
                  KERN_Q6_KX8_BYTES == 8 * sizeof(block_q6_K),
              "a permutation of the file's blocks");
static_assert(offsetof(block_q2_K, qs) == 16 && offsetof(block_q2_K, d) == 80 && offsetof(block_q2_K, dmin) == 82,
              "block_q2_K layout");
static_assert(offsetof(block_q6_K, qh) == 128 && offsetof(block_q6_K, scales) == 192 && offsetof(block_q6_K, d) == 208,
              "block_q6_K layout");

/* every PTQ type: Q8_0 activations with the block sums; its layout and
 * tile are kernels/repack_ptq.c's (the fields are not used) */
static const pack_desc PTQ_DESC = {-1, KT_Q8_0, 32, 0, 1, 0, {{0, 0, 0, 0}}, NULL, NULL};

static const pack_desc *desc_of(int wtype) {
    for (size_t i = 0; i < sizeof DESCS / sizeof *DESCS; i++)
        if (DESCS[i].wtype == wtype) return &DESCS[i];
    return NULL;
}

/* a chunked layout's fields tile its packed block: each holds the 8 rows'
 * copies side by side, so the next starts 8 x its bytes on, and the last
 * ends the block (xb: repack.h's names, which the tiles use too) */
static bool fields_tile(const pack_desc *D) {
    size_t at = 0;
    for (int f = 0; f < D->nf; f++) {
        if (D->f[f].dst != at) return false;
        at += (size_t)KERN_PACK_ROWS * D->f[f].bytes;
    }
    return at == D->xb;
}

/* F16 and BF16 have their own layout and tile (kernels/repack_f16.c); these entry points route them there */
static bool is_16bit(int wtype) { return wtype == KT_F16 || wtype == KT_BF16; }
bool kern_pack_supported(int wtype) { return is_16bit(wtype) || wtype == KT_W8A8 || wtype == KT_LLM_INT8 || kern_ptq_is(wtype) || desc_of(wtype) != NULL; }

bool kern_pack_fits(int wtype, int64_t K) {
    if (is_16bit(wtype)) return K > 0;
    if (kern_ptq_is(wtype)) return kern_pack_ptq_fits(wtype, K);
    if (wtype == KT_W8A8 || wtype == KT_LLM_INT8) return kern_pack_w8a8_fits(K);
    const pack_desc *D = desc_of(wtype);
    return D && K > 0 && K % D->qk == 0;
}

static int64_t n_groups(int64_t N) { return (N + KERN_PACK_ROWS - 1) / KERN_PACK_ROWS; }

size_t kern_pack_bytes(int wtype, int64_t N, int64_t K) {
    if (is_16bit(wtype)) return kern_pack_f16_bytes(N, K);
    if (kern_ptq_is(wtype)) return kern_pack_ptq_bytes(wtype, N, K);
    if (wtype == KT_W8A8 || wtype == KT_LLM_INT8) return kern_pack_w8a8_bytes(N, K);
    const pack_desc *D = desc_of(wtype);
    CORE_ASSERT(D && K % D->qk == 0);
    return (size_t)n_groups(N) * (size_t)(K / D->qk) * D->xb;
}

void kern_pack(const void *W, int wtype, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1) {
    if (is_16bit(wtype)) {
        kern_pack_f16(W, N, K, dst, g0, g1);
        return;
    }
    if (kern_ptq_is(wtype)) {
        kern_pack_ptq(W, wtype, N, K, dst, g0, g1);
        return;
    }
    if (wtype == KT_W8A8 || wtype == KT_LLM_INT8) {
        kern_pack_w8a8(W, N, K, dst, g0, g1);
        return;
    }
    const pack_desc *D = desc_of(wtype);
    CORE_ASSERT(D && K % D->qk == 0);
    if (D->own) {
        D->own->pack(W, N, K, dst, g0, g1);
        return;
    }
    CORE_ASSERT(fields_tile(D));
    const int64_t nb = K / D->qk;
    const size_t sb = kern_type_get(wtype)->type_size, row = (size_t)nb * sb;
    uint8_t canon[K5C_BYTES];
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *o = (uint8_t *)dst + (size_t)g * (size_t)nb * D->xb;
        for (int64_t b = 0; b < nb; b++, o += D->xb) {
            memset(o, 0, D->xb);
            for (int r = 0; r < KERN_PACK_ROWS; r++) {
                const int64_t n = g * KERN_PACK_ROWS + r;
                if (n >= N) break; /* missing rows of the last group: all zero (scales 0) */
                const uint8_t *s = (const uint8_t *)W + (size_t)n * row + (size_t)b * sb;
                if (D->canon) {
                    D->canon(s, sb, canon);
                    s = canon;
                }
                for (int f = 0; f < D->nf; f++) {
                    const pack_field *F = &D->f[f];
                    for (size_t j = 0; j < (size_t)(F->bytes / F->chunk); j++)
                        memcpy(o + F->dst + (KERN_PACK_ROWS * j + (size_t)r) * F->chunk, s + F->src + j * F->chunk,
                               F->chunk);
                }
            }
        }
    }
}

void kern_unpack_row(const void *P, int wtype, int64_t N, int64_t K, int64_t n, void *rowp) {
    if (is_16bit(wtype)) {
        CORE_ASSERT(n >= 0 && n < N);
        kern_unpack_f16_row(P, K, n, rowp);
        return;
    }
    if (kern_ptq_is(wtype)) {
        CORE_ASSERT(n >= 0 && n < N);
        kern_unpack_ptq_row(P, wtype, K, n, rowp);
        return;
    }
    if (wtype == KT_W8A8 || wtype == KT_LLM_INT8) {
        CORE_ASSERT(n >= 0 && n < N);
        kern_unpack_w8a8_row(P, K, n, rowp);
        return;
    }
    const pack_desc *D = desc_of(wtype);
    CORE_ASSERT(D && K % D->qk == 0 && n >= 0 && n < N);
    if (D->own) {
        D->own->unpack(P, K, n, rowp);
        return;
    }
    const int64_t nb = K / D->qk, g = n / KERN_PACK_ROWS;
    const size_t r = (size_t)(n % KERN_PACK_ROWS), sb = kern_type_get(wtype)->type_size;
    const uint8_t *o = (const uint8_t *)P + (size_t)g * (size_t)nb * D->xb;
    uint8_t canon[K5C_BYTES];
    for (int64_t b = 0; b < nb; b++, o += D->xb) {
        uint8_t *s = (uint8_t *)rowp + (size_t)b * sb, *c = D->canon ? canon : s;
        for (int f = 0; f < D->nf; f++) {
            const pack_field *F = &D->f[f];
            for (size_t j = 0; j < (size_t)(F->bytes / F->chunk); j++)
                memcpy(c + F->src + j * F->chunk, o + F->dst + (KERN_PACK_ROWS * j + r) * F->chunk, F->chunk);
        }
        if (D->uncanon) D->uncanon(canon, sb, s);
    }
}

/* ---- the reference tile: the spec, one output at a time ---------------------- */
/* byte of chunked field at @off: row r's byte i of the field */
static uint8_t chunked(const uint8_t *w, size_t off, int r, int i) {
    return w[off + 32 * (size_t)(i / 4) + 4 * (size_t)r + (size_t)(i % 4)];
}

/* weight value q of row r, element i of packed block w: Q8_0 as stored;
 * Q4_0 minus 8, Q5_0 minus 16; Q4_1, Q5_1 as stored (0..15, 0..31) */
static uint32_t u32_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static int wq(int wtype, const uint8_t *w, int r, int i) {
    if (wtype == KT_Q8_0) return (int8_t)chunked(w, 16, r, i);
    const size_t qso = wtype == KT_Q4_0 ? 16 : wtype == KT_Q4_1 ? 32 : wtype == KT_Q5_0 ? 48 : 64;
    const uint8_t byte = chunked(w, qso, r, i % 16); /* element i (low nibble) or 16 + i (high) of byte i */
    int q = i >= 16 ? byte >> 4 : byte & 15;
    if (wtype == KT_Q5_0 || wtype == KT_Q5_1) /* the fifth bit, canonical order (q5_canon) */
        q |= (int)((u32_at(w + (wtype == KT_Q5_0 ? 16 : 32) + 4 * (size_t)r) >> q5_qh_at(i)) & 1u) << 4;
    return q - (wtype == KT_Q4_0 ? 8 : wtype == KT_Q5_0 ? 16 : 0);
}

static float fp16_at(const uint8_t *p) {
    kern_half h;
    memcpy(&h, p, 2);
    return kern_fp16_to_fp32(h);
}

/* Q4_K: q (0..15) of row r, element e; Q5_K: q (0..31); Q6_K: q (0..63), offset not removed */
static int q4k(const uint8_t *w, size_t qs, int r, int e) {
    const uint8_t byte = chunked(w, qs, r, 32 * (e / 64) + e % 32);
    return e % 64 < 32 ? byte & 15 : byte >> 4;
}
static int q5k(const uint8_t *w, int r, int e) {
    return q4k(w, 416, r, e) | (((chunked(w, 160, r, e % 32) >> (e / 32)) & 1) << 4);
}
static int q2k(const uint8_t *w, int r, int e) {
    return (chunked(w, 160, r, 32 * (e / 128) + e % 32) >> (2 * ((e % 128) / 32))) & 3;
}
static int q3k(const uint8_t *w, int r, int e) {
    const int h = e / 128, qq = (e % 128) / 32, l = e % 32;
    return ((chunked(w, 144, r, 32 * h + l) >> (2 * qq)) & 3) | (((chunked(w, 656, r, l) >> (e / 32)) & 1) << 2);
}
static int q6k(const uint8_t *w, int r, int e) {
    const int h = e / 128, qq = (e % 128) / 32, l = e % 32;
    const uint8_t lo = chunked(w, 144, r, 64 * h + l + 32 * (qq & 1)), hi = chunked(w, 1168, r, 32 * h + l);
    return ((qq >> 1 ? lo >> 4 : lo & 15) | (((hi >> (2 * qq)) & 3) << 4));
}

static float out_ref(const pack_desc *D, int64_t nb, int r, const uint8_t *w, const uint8_t *a) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = w + (size_t)b * D->xb;
        if (D->atype == KT_Q8_0) {
            const block_q8_0 *ab = (const block_q8_0 *)a + b;
            int32_t isum = 0;
            for (int i = 0; i < 32; i++) isum += wq(D->wtype, wb, r, i) * ab->qs[i];
            acc = fmaf((float)isum, fp16_at(wb + 2 * r) * kern_fp16_to_fp32(ab->d), acc);
        } else if (D->atype == KT_Q8_1) { /* Q4_1, Q5_1: x = q d + m; s_a = d_a * sum(a_e) as stored */
            const block_q8_1 *ab = (const block_q8_1 *)a + b;
            int32_t isum = 0;
            for (int i = 0; i < 32; i++) isum += wq(D->wtype, wb, r, i) * ab->qs[i];
            acc = fmaf((float)isum, fp16_at(wb + 2 * r) * kern_fp16_to_fp32(ab->d), acc);
            acc = fmaf(fp16_at(wb + 16 + 2 * r), kern_fp16_to_fp32(ab->s), acc);
        } else if (D->wtype == KT_Q4_K || D->wtype == KT_Q5_K) {
            const block_q8_K *ab = (const block_q8_K *)a + b;
            int32_t I = 0, M = 0;
            for (int s = 0; s < 8; s++) {
                int32_t qa = 0;
                for (int e = 32 * s; e < 32 * s + 32; e++)
                    qa += (D->wtype == KT_Q4_K ? q4k(wb, 160, r, e) : q5k(wb, r, e)) * ab->qs[e];
                I += wb[32 + 8 * s + r] * qa;
                M += wb[96 + 16 * (s / 2) + 2 * r + s % 2] * (ab->bsums[2 * s] + ab->bsums[2 * s + 1]);
            }
            acc = fmaf((float)I, fp16_at(wb + 2 * r) * ab->d, acc);
            acc = fmaf((float)M, -(fp16_at(wb + 16 + 2 * r) * ab->d), acc);
        } else if (D->wtype == KT_Q2_K) {
            const block_q8_K *ab = (const block_q8_K *)a + b;
            int32_t I = 0, M = 0;
            for (int s = 0; s < 16; s++) {
                int32_t qa = 0;
                for (int e = 16 * s; e < 16 * s + 16; e++) qa += q2k(wb, r, e) * ab->qs[e];
                I += (wb[32 + 8 * s + r] & 15) * qa;
                M += (wb[32 + 8 * s + r] >> 4) * ab->bsums[s];
            }
            acc = fmaf((float)I, fp16_at(wb + 2 * r) * ab->d, acc);
            acc = fmaf((float)M, -(fp16_at(wb + 16 + 2 * r) * ab->d), acc);
        } else { /* Q6_K, Q3_K */
            const block_q8_K *ab = (const block_q8_K *)a + b;
            int32_t I = 0;
            for (int s = 0; s < 16; s++) {
                int32_t qa = 0;
                for (int e = 16 * s; e < 16 * s + 16; e++)
                    qa += (D->wtype == KT_Q6_K ? q6k(wb, r, e) - 32 : q3k(wb, r, e) - 4) * ab->qs[e];
                I += (int8_t)wb[16 + 8 * s + r] * qa;
            }
            acc = fmaf((float)I, fp16_at(wb + 2 * r) * ab->d, acc);
        }
    }
    return acc;
}

static void tile_ref(const pack_desc *D, int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a,
                     size_t ba) {
    if (D->own) {
        D->own->tile_ref(nb, C, y, ldy, w, a, ba);
        return;
    }
    for (int c = 0; c < C; c++)
        for (int r = 0; r < KERN_PACK_ROWS; r++) y[(size_t)c * ldy + (size_t)r] = out_ref(D, nb, r, w, a + (size_t)c * ba);
}

/* ---- driver -------------------------------------------------------------------------- */
typedef struct {
    const pack_desc *D;
    int wtype;
    size_t gbytes;          /* packed bytes of one group of 8 rows */
    int64_t ns;             /* PTQ: sub-blocks per header (kernels/repack_ptq.c) */
    kern_pack_ptq_tile_fn ptile; /* PTQ: NULL, the plain-C spec */
    kern_pack_tile_fn tile; /* NULL: tile_ref */
    kern_pack_dec_fn dec;   /* T = 1: dec_ng groups at once, or NULL */
    int dec_ng;
    const uint8_t *a;       /* T activation rows (D->atype) */
    const float *ad;        /* T x nb scales */
    const int32_t *as;      /* T x nb x D->n_ax extras */
    int T, n_out;
    int64_t nb;
    size_t ba;              /* bytes of an activation row */
    const kern_packed_out *out; /* the n_out matrices (same type and K) */
    int64_t g_end[KERN_PACK_MAX_OUT]; /* their groups, numbered one after the other */
    _Atomic int64_t next;   /* the next unclaimed group (pack_task) */
} pack_job;

/* one group of matrix o against activation rows t0 .. t0+C-1 */
static void group_tile(const pack_job *j, const kern_packed_out *o, int64_t g, int t0, int C, float *y, size_t ldy) {
    const size_t bn = (size_t)j->nb;
    const uint8_t *w = (const uint8_t *)o->P + (size_t)g * j->gbytes;
    const uint8_t *a = j->a + (size_t)t0 * j->ba;
    if (j->D == &PTQ_DESC) {
        if (j->ptile) j->ptile(j->nb, j->ns, C, y, ldy, w, a, j->ba, j->ad + (size_t)t0 * bn, j->as + (size_t)t0 * bn, bn);
        else kern_pack_ptq_tile_ref(j->wtype, j->nb, j->ns, C, y, ldy, w, a, j->ba);
    } else if (j->tile)
        j->tile(j->nb, C, y, ldy, w, a, j->ba, j->ad + (size_t)t0 * bn, j->as + (size_t)t0 * bn * (size_t)j->D->n_ax, bn);
    else tile_ref(j->D, j->nb, C, y, ldy, w, a, j->ba);
}

static void pack_groups(const pack_job *j, const kern_packed_out *o, int64_t lo, int64_t hi) {
    const int64_t N = o->N;
    if (j->dec) /* T = 1: runs of whole groups */
        for (; lo + j->dec_ng <= hi && (lo + j->dec_ng) * KERN_PACK_ROWS <= N; lo += j->dec_ng)
            j->dec(j->nb, o->y + (size_t)lo * KERN_PACK_ROWS, (const uint8_t *)o->P + (size_t)lo * j->gbytes, j->gbytes,
                   j->a, j->ad, j->as);
    for (int64_t g = lo; g < hi; g++) {
        const bool full = (g + 1) * KERN_PACK_ROWS <= N;
        for (int t0 = 0; t0 < j->T; t0 += 4) {
            const int C = j->T - t0 < 4 ? j->T - t0 : 4;
            if (full) {
                group_tile(j, o, g, t0, C, o->y + (size_t)t0 * (size_t)N + (size_t)g * KERN_PACK_ROWS, (size_t)N);
                continue;
            }
            float tmp[4 * KERN_PACK_ROWS];
            group_tile(j, o, g, t0, C, tmp, KERN_PACK_ROWS);
            for (int c = 0; c < C; c++)
                for (int64_t n = g * KERN_PACK_ROWS; n < N; n++)
                    o->y[(size_t)(t0 + c) * (size_t)N + (size_t)n] = tmp[c * KERN_PACK_ROWS + (n % KERN_PACK_ROWS)];
        }
    }
}

/* the groups of all matrices, one numbering, in dynamic chunks
 * (core_chunk_guided): each output is computed the same way whichever thread
 * takes it, and whichever matrices share the call */
static void pack_task(void *ctx, int ith, int nth) {
    pack_job *j = ctx;
    const int64_t G = j->g_end[j->n_out - 1];
    (void)ith;
    const int64_t align = j->dec ? j->dec_ng : 1; /* chunks of whole runs for dec */
    for (int64_t lo, hi; core_chunk_guided(&j->next, G, nth, 2, align, &lo, &hi);)
        for (int i = 0; i < j->n_out && lo < hi; i++) {
            if (lo >= j->g_end[i]) continue;
            const int64_t g0 = i ? j->g_end[i - 1] : 0, e = hi < j->g_end[i] ? hi : j->g_end[i];
            pack_groups(j, &j->out[i], lo - g0, e - g0);
            lo = e;
        }
}

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Activations in the weight type's activation type, with per block its
 * scale as float and D->n_ax int32 extras (kernels/repack.h).  scratch:
 * the T rows, then T*nb floats, then the extras, each 64-byte aligned
 * (Q8_0: <= 1.32 bytes per element, Q8_1: <= 1.38, Q8_K: <= 1.22, plus 128 of padding;
 * run() asserts kern_matmul_scratch_bytes).  Rows are independent: threads
 * split them. */
typedef struct {
    const pack_desc *D;
    kern_from_float_fn quant;
    const float *x;
    int64_t K;
    pack_job *j;
} prep_job;

static void prep_rows(const prep_job *p, int64_t t0, int64_t t1) {
    const pack_desc *D = p->D;
    const int64_t nb = p->K / D->qk;
    float *ad = (float *)p->j->ad;
    int32_t *as = (int32_t *)p->j->as;
    for (int64_t t = t0; t < t1; t++) {
        uint8_t *row = (uint8_t *)p->j->a + (size_t)t * p->j->ba;
        p->quant(p->x + (size_t)t * (size_t)p->K, row, p->K);
        if (D->atype == KT_S24_A8) continue; /* the tile reads the scales from the blocks */
        for (int64_t b = 0; b < nb; b++) {
            const size_t k = (size_t)t * (size_t)nb + (size_t)b;
            if (D->atype == KT_Q8_0) {
                const block_q8_0 *q = (const block_q8_0 *)row + b;
                ad[k] = kern_fp16_to_fp32(q->d);
                if (D->n_ax == 1) { /* Q4_0, Q5_0: the block's sum of q */
                    int32_t s = 0;
                    for (int i = 0; i < 32; i++) s += q->qs[i];
                    as[k] = s;
                }
            } else if (D->atype == KT_Q8_1) { /* Q4_1, Q5_1: s (d * sum q, as stored) as a float's bits */
                const block_q8_1 *q = (const block_q8_1 *)row + b;
                const float sf = kern_fp16_to_fp32(q->s);
                ad[k] = kern_fp16_to_fp32(q->d);
                memcpy(&as[k], &sf, 4);
            } else {
                const block_q8_K *q = (const block_q8_K *)row + b;
                ad[k] = q->d;
                if (D->n_ax == 4) /* Q4_K: sums over the 32-element sub-blocks, in int16 pairs */
                    for (int i = 0; i < 4; i++) {
                        const int16_t pr[2] = {(int16_t)(q->bsums[4 * i] + q->bsums[4 * i + 1]),
                                               (int16_t)(q->bsums[4 * i + 2] + q->bsums[4 * i + 3])};
                        memcpy(&as[k * 4 + (size_t)i], pr, 4);
                    }
            }
        }
    }
}

static void prep_task(void *ctx, int ith, int nth) {
    const prep_job *p = ctx;
    int64_t lo, hi;
    core_split(p->j->T, ith, nth, &lo, &hi);
    prep_rows(p, lo, hi);
}

static void prep_acts(core_pool *pool, const pack_desc *D, const kern_from_float_fn quant, const float *x,
                      void *scratch, int T, int64_t K, pack_job *j) {
    const int64_t nb = K / D->qk;
    const size_t rowb = (size_t)nb * kern_type_get(D->atype)->type_size;
    j->a = scratch;
    j->ad = (const float *)(j->a + up64((size_t)T * rowb));
    j->as = (const int32_t *)((const uint8_t *)j->ad + up64((size_t)T * (size_t)nb * sizeof(float)));
    j->ba = rowb;
    prep_job p = {D, quant, x, K, j};
    if (pool && T >= 4) core_pool_run(pool, prep_task, &p);
    else prep_rows(&p, 0, T);
}

/* ref: one thread, the plain-C tile (or `tile` when not NULL), the _ref quantizers */
static void run(core_pool *pool, void *scratch, int wtype, const kern_packed_out *out, int n_out, const float *x, int T,
                int64_t K, bool ref, kern_pack_tile_fn tile, kern_pack_dec_fn dec, int dec_ng,
                kern_pack_ptq_tile_fn ptile) {
    const bool ptq = kern_ptq_is(wtype);
    const pack_desc *D = ptq ? &PTQ_DESC : desc_of(wtype);
    CORE_ASSERT(D && K % D->qk == 0 && T >= 1 && n_out >= 1 && n_out <= KERN_PACK_MAX_OUT);
    const size_t nbT = (size_t)T * (size_t)(K / D->qk);
    CORE_ASSERT(up64(nbT * kern_type_get(D->atype)->type_size) + up64(nbT * 4) + nbT * 4 * (size_t)D->n_ax <=
                kern_matmul_scratch_bytes(T, K));
    pack_job j = {.D = D, .wtype = wtype, .gbytes = kern_pack_bytes(wtype, KERN_PACK_ROWS, K), .T = T,
                  .n_out = n_out, .nb = K / D->qk, .out = out};
    if (ptq) j.ns = kern_pack_ptq_ns(wtype, K);
    atomic_init(&j.next, 0);
    double work = 0;
    for (int i = 0; i < n_out; i++) {
        j.g_end[i] = (i ? j.g_end[i - 1] : 0) + n_groups(out[i].N);
        work += (double)out[i].N * (double)K * T;
    }
    j.tile = tile;
    j.dec = dec;
    j.dec_ng = dec_ng;
    j.ptile = ptile;
#if PACK_X86
    if (!ref && ptq && kern_active_tier() >= KERN_TIER_AVX512) j.ptile = kern_pack_ptq_tile_avx512(wtype);
    if (!ref && ptq && !j.ptile && kern_active_tier() >= KERN_TIER_AVX2) j.ptile = kern_pack_ptq_tile_avx2(wtype);
    if (!ref && !ptq && kern_active_tier() >= KERN_TIER_AVX512) {
        j.tile = T == 1 ? kern_pack_tile_dec_avx512(wtype) : kern_pack_tile_avx512(wtype);
        j.dec = kern_pack_dec_avx512(wtype, &j.dec_ng);
    }
    if (!ref && !ptq && !j.tile && kern_active_tier() >= KERN_TIER_AVX2) j.tile = kern_pack_tile_avx2(wtype);
    /* the avx2 tier's decode runs (repack_avx2.c dec_q8, dec_legacy); at the
     * avx512 tier Zen 4 (no kern_pack_dec_avx512) keeps one group at a time:
     * its runs of 8 there measured slower (tg32 Q4_K_M 33-37 against 51-54
     * t/s, Q2_K 52-53 against 81-92, Q8_0 25-26 against 30-31) */
    if (!ref && !ptq && kern_active_tier() == KERN_TIER_AVX2) j.dec = kern_pack_dec_avx2(wtype, &j.dec_ng);
#endif
    if (T != 1) j.dec = NULL; /* decode only */
    /* the quantizers give the _ref bytes at every tier: Q8_0's and Q8_1's
     * (tests/test_tiers.c), S24_A8's (tests/test_sparse24.c), Q8_K's AVX2 one here
     * (tests/test_repack.c) */
    kern_from_float_fn quant = kern_type_get(D->atype)->from_float_ref;
    if (!ref && (D->atype == KT_Q8_0 || D->atype == KT_Q8_1 || D->atype == KT_S24_A8))
        quant = kern_ops(D->atype)->from_float;
#if PACK_X86
    if (!ref && D->atype == KT_Q8_K && kern_active_tier() >= KERN_TIER_AVX2) quant = kern_pack_quant_q8_k_avx2;
#endif
    if (D->atype == KT_F32) { /* S24_F16: the inputs as they are */
        j.a = (const uint8_t *)x;
        j.ba = (size_t)K * sizeof(float);
    } else
        prep_acts(ref ? NULL : pool, D, quant, x, scratch, T, K, &j);
    if (pool && !ref && work >= KERN_MT_MIN_WORK) core_pool_run(pool, pack_task, &j);
    else pack_task(&j, 0, 1);
}

void kern_matmul_packed(core_pool *pool, void *scratch, const void *P, int wtype, const float *x, float *y, int T,
                        int64_t N, int64_t K) {
    const kern_packed_out o = {P, N, y};
    kern_matmul_packed_n(pool, scratch, wtype, &o, 1, x, T, K);
}

void kern_matmul_packed_n(core_pool *pool, void *scratch, int wtype, const kern_packed_out *out, int n_out,
                          const float *x, int T, int64_t K) {
    if (is_16bit(wtype)) kern_matmul_packed_f16_n(pool, scratch, wtype, out, n_out, x, T, K); /* its own rounding */
    else if (wtype == KT_W8A8 || wtype == KT_LLM_INT8) kern_matmul_packed_w8a8_n(pool, scratch, out, n_out, x, T, K, NULL);
    else run(pool, scratch, wtype, out, n_out, x, T, K, false, NULL, NULL, 0, NULL);
}

void kern_matmul_packed_ref(const void *P, int wtype, const float *x, float *y, int T, int64_t N, int64_t K) {
    if (is_16bit(wtype)) {
        kern_matmul_packed_f16_ref(P, wtype, x, y, T, N, K);
        return;
    }
    if (wtype == KT_W8A8 || wtype == KT_LLM_INT8) {
        kern_matmul_packed_w8a8_tile(NULL, P, x, y, T, N, K, NULL);
        return;
    }
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    CORE_ASSERT(scratch);
    const kern_packed_out o = {P, N, y};
    run(NULL, scratch, wtype, &o, 1, x, T, K, true, NULL, NULL, 0, NULL);
    free(scratch);
}

void kern_matmul_packed_tile(kern_pack_tile_fn tile, kern_pack_dec_fn dec, int dec_ng, const void *P, int wtype,
                             const float *x, float *y, int T, int64_t N, int64_t K) {
    CORE_ASSERT(tile && !is_16bit(wtype));
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    CORE_ASSERT(scratch);
    const kern_packed_out o = {P, N, y};
    run(NULL, scratch, wtype, &o, 1, x, T, K, true, tile, dec, dec_ng, NULL);
    free(scratch);
}

void kern_matmul_packed_ptq_tile(kern_pack_ptq_tile_fn tile, const void *P, int wtype, const float *x, float *y,
                                 int T, int64_t N, int64_t K) {
    CORE_ASSERT(tile && kern_ptq_is(wtype));
    void *scratch = malloc(kern_matmul_scratch_bytes(T, K));
    CORE_ASSERT(scratch);
    const kern_packed_out o = {P, N, y};
    run(NULL, scratch, wtype, &o, 1, x, T, K, true, NULL, NULL, 0, tile);
    free(scratch);
}
