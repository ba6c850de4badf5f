/* repack_ptq.c - kvant's PTQ types (kernels/ptq.h: absmax / zero-point,
 * 2..8 bits, groups of 32/64/128, per channel, per tensor) in the packed
 * 8-row layout, and the spec of their tile in plain C.
 *
 * Why: the file's layout keeps a row's codes as one LSB-first bit stream,
 * which no SIMD unit reads well at 3, 5, 6 or 7 bits; repacked once at
 * load, every width becomes the 4 + 2 + 1-bit planes the AVX2 and VNNI
 * tiles combine with a shift and a mask, 8 rows side by side as in the
 * other packed types (kernels/repack.h).
 *
 * Packed layout.  A "super-block" is one header's span: G elements for the
 * group types, the whole row (K elements) for per-channel and per-tensor
 * types (their rows must then hold a multiple of 32 elements; others keep
 * the row-major path).  Per group of 8 rows and super-block:
 *   @0  d[8]  fp16, row r's scale (the file's bytes)
 *   @16 z[8]  uint8, row r's zero point (zero-point types only; absmax z is
 *             2^(b-1) and not stored)
 *   then per 32-element sub-block the 8 rows' codes, 32 * b bytes, as
 *   planes (in this order, each present when the width needs it):
 *     b = 8:      P8 [8 j][8 r][4]:  byte [j][r][i] = u of element 4j + i
 *     b >= 4:     P4 [4 j][8 r][4]:  low nibble element 4j + i, high nibble
 *                                    element 16 + 4j + i  (Q4_0x8's order)
 *     b - 4*(b>=4) in {2, 3}:
 *                 P2 [2 h][8 r][4]:  bits 2j..2j+1 of byte [h][r][i] =
 *                                    element 16h + 4j + i
 *     ... in {1, 3}:
 *                 P1 [8 r][4]:       bit j of byte [r][i] = element 4j + i,
 *                                    bit 4 + j = element 16 + 4j + i
 *   u = P4 | P2 << (4 if P4) | P1 << (4 if P4, + 2 if P2); P8 alone at 8
 *   bits.  So the packed matrix takes exactly the file's bytes (codes at b
 *   bits, 2 or 3 header bytes per row and super-block) and chunk j of a
 *   sub-block, elements 4j .. 4j+3 and 16 + 4j .. of the 8 rows, comes out
 *   of each plane with one shift and one mask (repack_ptq_tile.h).
 *
 * Arithmetic (the spec).  Activations: Q8_0 rows from the _ref quantizer
 * (blocks of 32: d_a, a_e in [-127, 127]).  Per output (row r, activation
 * row t), acc = 0, then per 32-element sub-block s in order:
 *     i_s = sum_e (u_e - z) a_e            (exact int32: |i_s| <= 32 * 255 * 127)
 *     acc = fmaf((float)i_s, d_w * d_a, acc)
 * with d_w the super-block's scale (fp16, so d_w * d_a is exact in float)
 * and z its zero point (2^(b-1) for absmax).  y = acc.  For the group types
 * this is the row-major _ref dot (kern_ptq_vec_dot_ref) with its per-block
 * products summed in sub-block order; per-row types there take F32
 * activations, so packed and row-major results differ by the activation
 * rounding, as for every packed type (tests/test_repack_ptq.c bounds it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ptq.h"
#include "kernels/quants.h"
#include "kernels/repack.h"

typedef struct {
    int scheme, bits, G; /* G: elements per super-block (K for per-row types) */
    size_t hdr8;         /* header bytes of a super-block of 8 rows: 16 (+ 8) */
} ptq_geo;

static bool geo_of(int t, int64_t K, ptq_geo *g) {
    int s, b, gran;
    if (!kern_ptq_decode(t, &s, &b, &gran) || K <= 0 || K % 32) return false;
    const int G = kern_ptq_group(gran);
    if (G && K % G) return false;
    if (!G && K > (1 << 30)) return false;
    *g = (ptq_geo){s, b, G ? G : (int)K, 16 + 8 * (size_t)s};
    return true;
}

bool kern_pack_ptq_fits(int t, int64_t K) {
    ptq_geo g = {0};
    return geo_of(t, K, &g);
}

int64_t kern_pack_ptq_ns(int t, int64_t K) {
    ptq_geo g = {0};
    CORE_ASSERT(geo_of(t, K, &g));
    return g.G / 32;
}

/* bytes of one group of 8 rows */
static size_t group_bytes(const ptq_geo *g, int64_t K) {
    return (size_t)(K / g->G) * (g->hdr8 + (size_t)g->G * (size_t)g->bits);
}

size_t kern_pack_ptq_bytes(int t, int64_t N, int64_t K) {
    ptq_geo g = {0};
    CORE_ASSERT(geo_of(t, K, &g));
    return (size_t)((N + KERN_PACK_ROWS - 1) / KERN_PACK_ROWS) * group_bytes(&g, K);
}

/* ---- where element e (0..31) of row r sits in a packed sub-block ------------- */
typedef struct {
    int n4, n2, n1, n8; /* plane present (0/1) */
    size_t o2, o1;      /* byte offsets of P2, P1 in the sub-block */
} planes;

static planes planes_of(int bits) {
    planes p = {0};
    if (bits == 8) {
        p.n8 = 1;
        return p;
    }
    p.n4 = bits >= 4;
    const int rem = bits - 4 * p.n4;
    p.n2 = (rem & 2) != 0;
    p.n1 = (rem & 1) != 0;
    p.o2 = 128 * (size_t)p.n4;
    p.o1 = p.o2 + 64 * (size_t)p.n2;
    return p;
}

static size_t at(int r, int e) { return 4 * (size_t)r + (size_t)(e % 4); }

static int code_at(const uint8_t *sb, const planes *p, int r, int e) {
    if (p->n8) return sb[32 * (size_t)(e / 4) + at(r, e)];
    const int j = (e % 16) / 4, h = e / 16;
    int u = 0, sh = 0;
    if (p->n4) {
        const uint8_t v = sb[32 * (size_t)j + at(r, e)];
        u = h ? v >> 4 : v & 15;
        sh = 4;
    }
    if (p->n2) {
        u |= ((sb[p->o2 + 32 * (size_t)h + at(r, e)] >> (2 * j)) & 3) << sh;
        sh += 2;
    }
    if (p->n1) u |= ((sb[p->o1 + at(r, e)] >> (4 * h + j)) & 1) << sh;
    return u;
}

/* the 32 codes u of row r into sub-block sb, whole bytes at a time (what
 * put_code does per element; load time of a 1.1B model 3x shorter) */
static void put_sub(uint8_t *sb, const planes *p, int r, const uint8_t *u) {
    if (p->n8) {
        for (int e = 0; e < 32; e++) sb[32 * (size_t)(e / 4) + at(r, e)] = u[e];
        return;
    }
    const int s2 = 4 * p->n4, s1 = s2 + 2 * p->n2;
    for (int i = 0; i < 4; i++) {
        uint8_t b1 = 0, b2[2] = {0, 0};
        for (int j = 0; j < 4; j++) {
            const uint8_t lo = u[4 * j + i], hi = u[16 + 4 * j + i];
            if (p->n4) sb[32 * (size_t)j + 4 * (size_t)r + (size_t)i] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            b2[0] |= (uint8_t)(((lo >> s2) & 3) << (2 * j));
            b2[1] |= (uint8_t)(((hi >> s2) & 3) << (2 * j));
            b1 |= (uint8_t)((((lo >> s1) & 1) << j) | (((hi >> s1) & 1) << (4 + j)));
        }
        if (p->n2) {
            sb[p->o2 + 4 * (size_t)r + (size_t)i] = b2[0];
            sb[p->o2 + 32 + 4 * (size_t)r + (size_t)i] = b2[1];
        }
        if (p->n1) sb[p->o1 + 4 * (size_t)r + (size_t)i] = b1;
    }
}

/* ---- packing -------------------------------------------------------------------- */
void kern_pack_ptq(const void *W, int t, int64_t N, int64_t K, void *dst, int64_t g0, int64_t g1) {
    ptq_geo g = {0};
    CORE_ASSERT(geo_of(t, K, &g));
    const planes p = planes_of(g.bits);
    const size_t rowb = kern_ptq_row_bytes(t, K), hb = (size_t)KERN_PTQ_HDR(g.scheme);
    const size_t fb = hb + kern_ptq_packed_bytes(g.G, g.bits); /* a super-block of one row in the file */
    const int64_t nsb = K / g.G;
    uint8_t *u = malloc((size_t)g.G);
    CORE_ASSERT(u);
    for (int64_t gi = g0; gi < g1; gi++) {
        uint8_t *o = (uint8_t *)dst + (size_t)gi * group_bytes(&g, K);
        memset(o, 0, group_bytes(&g, K)); /* missing rows of the last group: all zero */
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t *hd = o + (size_t)s * (g.hdr8 + (size_t)g.G * (size_t)g.bits), *codes = hd + g.hdr8;
            for (int r = 0; r < KERN_PACK_ROWS; r++) {
                const int64_t n = gi * KERN_PACK_ROWS + r;
                if (n >= N) break;
                const uint8_t *src = (const uint8_t *)W + (size_t)n * rowb + (size_t)s * fb;
                memcpy(hd + 2 * r, src, 2);
                if (g.scheme == KERN_PTQ_ZEROPOINT) hd[16 + r] = src[2];
                kern_ptq_unpack(src + hb, g.G, g.bits, u);
                for (int e0 = 0; e0 < g.G; e0 += 32) put_sub(codes + (size_t)(e0 / 32) * 32 * (size_t)g.bits, &p, r, u + e0);
            }
        }
    }
    free(u);
}

void kern_unpack_ptq_row(const void *P, int t, int64_t K, int64_t n, void *row) {
    ptq_geo g = {0};
    CORE_ASSERT(geo_of(t, K, &g));
    const planes p = planes_of(g.bits);
    const size_t hb = (size_t)KERN_PTQ_HDR(g.scheme), fb = hb + kern_ptq_packed_bytes(g.G, g.bits);
    const int r = (int)(n % KERN_PACK_ROWS);
    const uint8_t *o = (const uint8_t *)P + (size_t)(n / KERN_PACK_ROWS) * group_bytes(&g, K);
    uint8_t *u = malloc((size_t)g.G);
    CORE_ASSERT(u);
    for (int64_t s = 0; s < K / g.G; s++) {
        const uint8_t *hd = o + (size_t)s * (g.hdr8 + (size_t)g.G * (size_t)g.bits), *codes = hd + g.hdr8;
        uint8_t *dstb = (uint8_t *)row + (size_t)s * fb;
        memcpy(dstb, hd + 2 * r, 2);
        if (g.scheme == KERN_PTQ_ZEROPOINT) dstb[2] = hd[16 + r];
        for (int e = 0; e < g.G; e++) u[e] = (uint8_t)code_at(codes + (size_t)(e / 32) * 32 * (size_t)g.bits, &p, r, e % 32);
        kern_ptq_pack(u, g.G, g.bits, dstb + hb);
    }
    free(u);
}

/* ---- the spec: one output at a time ---------------------------------------------- */
static float fp16_at(const uint8_t *q) {
    kern_half h;
    memcpy(&h, q, 2);
    return kern_fp16_to_fp32(h);
}

void kern_pack_ptq_tile_ref(int t, int64_t nb, int64_t ns, int C, float *y, size_t ldy, const uint8_t *w,
                            const uint8_t *a, size_t ba) {
    int scheme = 0, bits = 2, gran = 0;
    CORE_ASSERT(kern_ptq_decode(t, &scheme, &bits, &gran) && ns > 0 && nb % ns == 0);
    const planes p = planes_of(bits);
    const size_t hdr8 = 16 + 8 * (size_t)scheme, sbb = 32 * (size_t)bits;
    for (int c = 0; c < C; c++)
        for (int r = 0; r < KERN_PACK_ROWS; r++) {
            const block_q8_0 *ab = (const block_q8_0 *)(a + (size_t)c * ba);
            const uint8_t *q = w;
            float acc = 0.0f, dw = 0.0f;
            int z = 0;
            for (int64_t b = 0; b < nb; b++, q += sbb) {
                if (b % ns == 0) {
                    dw = fp16_at(q + 2 * r);
                    z = scheme == KERN_PTQ_ZEROPOINT ? q[16 + r] : 1 << (bits - 1);
                    q += hdr8;
                }
                int32_t i = 0;
                for (int e = 0; e < 32; e++) i += (code_at(q, &p, r, e) - z) * ab[b].qs[e];
                acc = fmaf((float)i, dw * kern_fp16_to_fp32(ab[b].d), acc);
            }
            y[(size_t)c * ldy + (size_t)r] = acc;
        }
}
