/* attn_flash.c - FlashAttention-2 style attention over a KV view
 * (kernels/attn.h): K/V in tiles, online softmax, never a T x P matrix.
 *
 * Letters: T queries, H query heads, Hkv KV heads, G = H / Hkv query heads
 * per KV head, D head dim, Dp = D rounded up to 8, P positions.
 *
 *   q    [T][H][D]   floats, already rotated
 *   out  [T][H][D]
 *
 * Work unit = (KV head hk, block of Tq consecutive queries).  Its R = Tq*G
 * query rows (row r = (t - t0)*G + g is query t, head hk*G + g) share every
 * K/V tile, so a tile is read, dequantized and (rope_k) rotated once per
 * unit, not once per query head.  Per unit, in one thread's scratch:
 *
 *   Qs  [R][Dp]    q * log2(e)/sqrt(D), zero-padded (scores come out in
 *                  log2 units)
 *   kp, vp [TP]    the tile's K / V rows (TP = tile rounded up to 8):
 *                  pointers into the cache (F32 or F16 rows, D % 8 == 0),
 *                  or into Kd [TP][Dp] / Vs [TP][Dp] where rows are
 *                  dequantized (Q8_0), rotated (rope_k) or padded (D % 8
 *                  != 0); K pointers n .. TP-1 point at a zero row
 *   S   [R][TP]    the tile's scores, then its probabilities (unnormalized)
 *   A   [R][Dp]    output accumulators;  m[R] running max, l[R] running sum
 *
 * For each tile [p0, p0 + n) up to the last position of the block's last
 * query (later tiles are never touched):  S = Qs . K^T; per row, m' =
 * max(m, max S over the row's causal part), A and l scaled by 2^(m - m')
 * when the max grew, S = 2^(S - m') (0 past the row's last position),
 * l += sum S;  then A += S . V.  At the end out = A / l.
 *
 * With a sliding window, tiles start at the one holding the block's first
 * query's first position (aligned as without a window), rows before it are
 * never read (a paged cache may have returned their blocks) and each row
 * masks what precedes its own window.
 * Rows whose query comes before the tile (q_pos0 + t < p0) skip it.  The
 * last tile is cut at q_pos0 + t1 (t1: one past the block's last query), so
 * nothing at or past n_pos is read.  Units are handed out through an atomic
 * counter, costliest (latest queries) first; each output row is computed by
 * one thread in a fixed order, so results do not depend on thread count.
 *
 * Chunks (flash-decoding): the positions are cut in chunks of d->split
 * positions (default 8 tiles = 512; a multiple of the tile, aligned at
 * multiples of itself).  Each chunk's online softmax above starts afresh
 * (m = -inf, l = 0, A = 0) and the chunks are folded in order by
 * log-sum-exp (merge_partial): M' = max(M, m), L' = L 2^(M-M') + l 2^(m-M'),
 * Acc' likewise.  A unit whose positions fit one chunk is the plain online
 * softmax, bit for bit.  A unit either runs its chunks one after another
 * in one thread, or, with a single block of queries (one sequence
 * decoding), every (chunk, group of KV heads) is an item of its own that
 * any thread takes (so gemma3-1b's one KV head still uses every thread),
 * walking its chunk tile by tile and, inside a tile, head after head (the
 * paged pool keeps a head's blocks back to back, kv/paged.h, so each head
 * is a stream the item advances a tile at a time); the partials stay in
 * that thread's split area
 * and the calling thread folds them afterwards in chunk order with the
 * same merge_partial.  The
 * chunking depends only on positions, never on threads, so both ways give
 * the same bits, and a query decoded alone still equals itself in a
 * prefill block.
 *
 * A score is one fixed chain whatever R, the block or the thread: 8 lanes,
 * lane i summing q[d] k[d] over d = i mod 8 in order, then ((l0 + l1) +
 * (l2 + l3)) + ((l4 + l5) + (l6 + l7)).  So a query's output is the same
 * bits whether it is decoded alone or sits in a prefill block (the serving
 * engine recomputes preempted sequences by prefill), and no K tile is ever
 * transposed: one query row (a decoding MHA head) reads K rows in place.
 *
 * The inner loops come from an attn_flash_ops table (kernels/attn_flash.h):
 * the portable C one below, written so gcc vectorizes it, the AVX2 one
 * (kernels/attn_flash_avx2.c) when the active kernel tier is avx2, and at
 * avx512 the AVX2 table with 512-bit products (kernels/attn_flash_avx512.c),
 * bit-identical to it. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/attn_flash.h"
#include "kernels/quants.h"

#define FLASH_TILE_DEFAULT 64
#define FLASH_CHUNK_TILES 8 /* default KV chunk: 8 tiles (512 positions) */
#define FLASH_ROWS 128 /* query rows per unit to aim for (Tq = FLASH_ROWS / G) */
/* A decode step (split_item, rows read in place) takes nh KV heads' runs
 * of nt tiles each at once (range_heads; nh nt <= FLASH_SLOTS), the heads'
 * products interleaved in slices of FLASH_SLICE keys, and asks for each
 * row's lines FLASH_PF_STREAM bytes ahead in its run; FLASH_NH_ROWS: for at
 * most this many query rows (T G), the rows the extra slots' scores have
 * room for.  The step's shape is measured per machine kind (decode_step). */
#define FLASH_SLICE 16
#define FLASH_SLOTS 8
#define FLASH_NH_ROWS 16
#define FLASH_PF_STREAM 2048

/* ---- portable C inner loops ----------------------------------------------
 * Written with GNU C vector types of 4 floats (one SSE register on baseline
 * x86-64, one NEON register on arm64), because gcc -O3 on the plain triple
 * loop vectorizes the wrong loop.  Blocks of 4 rows x 8 columns: 8
 * accumulators, each K / V load feeding 4 multiply-adds. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
static inline v4f ld4(const float *p) { v4f v; memcpy(&v, p, sizeof v); return v; }
static inline void st4(float *p, v4f v) { memcpy(p, &v, sizeof v); }

/* the score chain of kernels/attn_flash.h, 8 keys at a time */
static void scores_rows_c(int R, int Dp, int nc, const float *Q, int ldq, const float *const *K, float *S, int lds,
                          int pf) {
    (void)pf; /* the portable table asks for nothing ahead */
    for (int r = 0; r < R; r++) {
        const float *q = Q + (size_t)r * ldq;
        for (int j = 0; j < nc; j++) {
            v4f a = {0}, b = {0}; /* lanes 0..3, 4..7 */
            for (int d = 0; d < Dp; d += 8) {
                a += ld4(q + d) * ld4(K[j] + d);
                b += ld4(q + d + 4) * ld4(K[j] + d + 4);
            }
            S[(size_t)r * lds + j] = ((a[0] + a[1]) + (a[2] + a[3])) + ((b[0] + b[1]) + (b[2] + b[3]));
        }
    }
}

static void pv_c(int R, int Dp, int n, const float *P, int ldp, const float *const *V, float *A, int lda, int pf) {
    (void)pf;
    int r = 0;
    for (; r + 4 <= R; r += 4) {
        const float *p0 = P + (size_t)r * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
        float *o0 = A + (size_t)r * lda, *o1 = o0 + lda, *o2 = o1 + lda, *o3 = o2 + lda;
        for (int c = 0; c < Dp; c += 8) {
            v4f a0 = ld4(o0 + c), b0 = ld4(o0 + c + 4), a1 = ld4(o1 + c), b1 = ld4(o1 + c + 4);
            v4f a2 = ld4(o2 + c), b2 = ld4(o2 + c + 4), a3 = ld4(o3 + c), b3 = ld4(o3 + c + 4);
            for (int j = 0; j < n; j++) {
                const v4f v0 = ld4(V[j] + c), v1 = ld4(V[j] + c + 4);
                a0 += p0[j] * v0; b0 += p0[j] * v1;
                a1 += p1[j] * v0; b1 += p1[j] * v1;
                a2 += p2[j] * v0; b2 += p2[j] * v1;
                a3 += p3[j] * v0; b3 += p3[j] * v1;
            }
            st4(o0 + c, a0); st4(o0 + c + 4, b0); st4(o1 + c, a1); st4(o1 + c + 4, b1);
            st4(o2 + c, a2); st4(o2 + c + 4, b2); st4(o3 + c, a3); st4(o3 + c + 4, b3);
        }
    }
    for (; r < R; r++) {
        const float *p0 = P + (size_t)r * ldp;
        float *o0 = A + (size_t)r * lda;
        for (int c = 0; c < Dp; c += 8) {
            v4f a0 = ld4(o0 + c), b0 = ld4(o0 + c + 4);
            for (int j = 0; j < n; j++) {
                a0 += p0[j] * ld4(V[j] + c);
                b0 += p0[j] * ld4(V[j] + c + 4);
            }
            st4(o0 + c, a0); st4(o0 + c + 4, b0);
        }
    }
}

/* the F16 rows converted (exactly) 8 at a time, then the float version */
static void scores_rows_f16_c(int R, int Dp, int nc, const float *Q, int ldq, const uint16_t *const *K, float *S,
                              int lds, int pf) {
    float buf[8][256];
    const float *rows[8];
    CORE_ASSERT(Dp <= 256);
    for (int j0 = 0; j0 < nc; j0 += 8) { /* nc is a multiple of 8 */
        for (int i = 0; i < 8; i++) {
            for (int c = 0; c < Dp; c++) buf[i][c] = kern_fp16_to_fp32(K[j0 + i][c]);
            rows[i] = buf[i];
        }
        scores_rows_c(R, Dp, 8, Q, ldq, rows, S + j0, lds, pf);
    }
}

static void pv_f16_c(int R, int Dp, int n, const float *P, int ldp, const uint16_t *const *V, float *A, int lda,
                     int pf) {
    float buf[8][256];
    const float *rows[8];
    CORE_ASSERT(Dp <= 256);
    for (int j0 = 0; j0 < n; j0 += 8) { /* pv_c sums over j in order per output: chunks of j keep that order */
        const int m = n - j0 < 8 ? n - j0 : 8;
        for (int i = 0; i < m; i++) {
            for (int c = 0; c < Dp; c++) buf[i][c] = kern_fp16_to_fp32(V[j0 + i][c]);
            rows[i] = buf[i];
        }
        pv_c(R, Dp, m, P + j0, ldp, rows, A, lda, pf);
    }
}

static float row_max_c(const float *s, int n) {
    float m = s[0];
    for (int j = 1; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}

/* 2^x for x clamped to [-127, 0] (Cephes exp2f: |relative error| < 2e-7;
 * x <= -126.5 gives 0; NaN gives 0 too) */
static inline v4f exp2_c(v4f x) {
    const v4f lo = {-127, -127, -127, -127}, zero = {0};
    const v4i above = x > lo;                              /* false for NaN */
    x = (v4f)((above & (v4i)x) | (~above & (v4i)lo));      /* max(x, -127) */
    x = (v4f)((v4i)(x < zero) & (v4i)x);                   /* min(x, 0) */
    const v4f magic = zero + 12582912.0f;                  /* 1.5 * 2^23 */
    const v4f n = (x + magic) - magic;                     /* round to nearest */
    const v4f f = x - n;                                   /* [-0.5, 0.5] */
    v4f p = zero + 1.535336188319500e-4f;
    p = p * f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
    const v4i e = (__builtin_convertvector(n, v4i) + 127) << 23; /* 2^n; n = -127 gives 0 */
    return p * (v4f)e;
}

static float row_exp2_c(float *s, int nv, int nc, float m) {
    const v4i lane = {0, 1, 2, 3};
    v4f sum = {0};
    for (int j = 0; j < nc; j += 4) {
        const v4i keep = lane < nv - j; /* lanes j + i < nv */
        const v4f e = (v4f)((v4i)exp2_c(ld4(s + j) - m) & keep);
        st4(s + j, e);
        sum += e;
    }
    return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

static void row_scale_c(float *a, int n, float c) {
    for (int i = 0; i < n; i++) a[i] *= c;
}

static void f16_to_f32_c(const uint16_t *x, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = kern_fp16_to_fp32(x[i]);
}

static void q8_0_to_f32_c(const void *x, float *y, int nb) {
    const block_q8_0 *b = x;
    for (int i = 0; i < nb; i++) {
        const float s = kern_fp16_to_fp32(b[i].d);
        for (int k = 0; k < QK8_0; k++) y[i * QK8_0 + k] = (float)b[i].qs[k] * s;
    }
}

const attn_flash_ops attn_flash_ops_c = {.scores_rows = scores_rows_c, .pv = pv_c, .row_max = row_max_c,
                                         .row_exp2 = row_exp2_c, .row_scale = row_scale_c, .pv_f16 = pv_f16_c,
                                         .scores_rows_f16 = scores_rows_f16_c, .f16_to_f32 = f16_to_f32_c,
                                         .q8_0_to_f32 = q8_0_to_f32_c};

/* ---- scratch layout ------------------------------------------------------ */
static int round8(int n) { return (n + 7) & ~7; }
static size_t pad16(size_t n) { return (n + 15) & ~(size_t)15; } /* floats: 64-byte slices */
static size_t ptr_floats(int n) { return pad16((size_t)n * (sizeof(void *) / sizeof(float))); } /* n pointers */

typedef struct {
    int G, Tq, R, tile, TP, Dp; /* R = Tq * G rows per unit */
    size_t qs, kz, kd, vs, s, sx, a, m, l, kp, vp, freq, mm, ll, acc, split, total; /* offsets in floats */
} flash_layout;

/* the rows slots 1 .. FLASH_SLOTS - 1 of a step have room for */
static int nh_rows(int R) { return R < FLASH_NH_ROWS ? R : FLASH_NH_ROWS; }

/* Split mode's partials: this many floats per thread (whatever T, P) */
#define FLASH_SPLIT_FLOATS (64 * 1024)

static flash_layout layout(const kern_attn_dims *d) {
    flash_layout L;
    L.G = d->H / d->Hkv;
    L.Tq = FLASH_ROWS / L.G > 1 ? FLASH_ROWS / L.G : 1;
    if (L.Tq > d->T) L.Tq = d->T > 0 ? d->T : 1;
    L.R = L.Tq * L.G;
    L.tile = d->tile > 0 ? d->tile : FLASH_TILE_DEFAULT;
    L.TP = round8(L.tile);
    L.Dp = round8(d->D);
    size_t o = 0;
    L.qs = o; o += pad16((size_t)L.R * L.Dp);
    L.kz = o; o += pad16((size_t)L.Dp);
    L.kd = o; o += pad16((size_t)L.TP * L.Dp);
    L.vs = o; o += pad16((size_t)L.TP * L.Dp);
    L.s = o; o += pad16((size_t)L.R * L.TP);
    L.sx = o; o += (FLASH_SLOTS - 1) * pad16((size_t)nh_rows(L.R) * L.TP);
    L.a = o; o += pad16((size_t)L.R * L.Dp);
    L.m = o; o += pad16((size_t)L.R);
    L.l = o; o += pad16((size_t)L.R);
    L.kp = o; o += FLASH_SLOTS * ptr_floats(L.TP);
    L.vp = o; o += FLASH_SLOTS * ptr_floats(L.TP);
    L.freq = o; o += pad16((size_t)d->D / 2 + 1);
    L.mm = o; o += pad16((size_t)L.R);
    L.ll = o; o += pad16((size_t)L.R);
    L.acc = o; o += pad16((size_t)L.R * L.Dp);
    L.split = o; o += FLASH_SPLIT_FLOATS;
    L.total = o;
    return L;
}

/* slot h (< FLASH_SLOTS) of a step: the scores S[R][TP] of one head's tile,
 * and its K and V row pointers (load_tile) */
static float *slot_S(const flash_layout *L, float *sc, int h) {
    return h ? sc + L->sx + (size_t)(h - 1) * pad16((size_t)nh_rows(L->R) * L->TP) : sc + L->s;
}
static const float **slot_kp(const flash_layout *L, float *sc, int h) {
    return (const float **)(sc + L->kp + (size_t)h * ptr_floats(L->TP));
}
static const float **slot_vp(const flash_layout *L, float *sc, int h) {
    return (const float **)(sc + L->vp + (size_t)h * ptr_floats(L->TP));
}

size_t kern_attn_flash_scratch_bytes(const kern_attn_dims *d) {
    CORE_ASSERT(d->Hkv > 0 && d->H % d->Hkv == 0);
    return layout(d).total * sizeof(float) + 64;
}

/* ---- the kernel ------------------------------------------------------------ */
typedef struct {
    const float *q;
    const kern_kv_view *kv;
    float *out;
    const kern_attn_dims *d;
    const attn_flash_ops *ops;
    flash_layout L;
    uint8_t *scratch;
    size_t per_thread;
    bool direct_k, direct_v; /* F32 rows used in place (no copy) */
    bool f16_k, f16_v;       /* F16 rows read in place, converted in registers */
    bool in_place;           /* head-major F32 / F16 rows read in place (load_tile's first way) */
    bool pf_l2;              /* kern_prefetch_l2_amd512: load_tile's runs prefetched into L2 */
    int n_units, n_qb;
    int chunk;               /* positions per KV chunk (a multiple of the tile) */
    /* split mode: n_items (chunk, group of hg KV heads) items over nth
     * threads' slots, n_groups groups per chunk */
    bool split;
    int n_items, nth, c0, ps, pe, n_groups, hg;
    int step_nh, step_nt; /* a decode step's heads and tiles per head (range_heads) */
    bool ahead;           /* in place, decode_ahead: one head and tile per step, the next asked for (range_tile nx) */
    size_t slot_floats, q_floats;
    _Atomic int next;
} flash_job;

static const uint8_t *view_row(const kern_kv_view *v, const uint8_t *base, int p) {
    const int blk = p / v->block_size, slot = p % v->block_size;
    const int64_t b = v->block_table ? v->block_table[blk] : blk;
    return base + (size_t)b * v->block_stride + (size_t)slot * v->row_bytes;
}

/* dst[D] = the D elements (F32, F16 or Q8_0) at element e0 of row, as floats */
static void read_head(const flash_job *j, const uint8_t *row, int64_t e0, float *dst) {
    const int D = j->d->D;
    switch (j->kv->type) {
    case KT_F32: memcpy(dst, row + e0 * 4, (size_t)D * 4); break;
    case KT_F16: j->ops->f16_to_f32((const uint16_t *)(row + e0 * 2), dst, D); break;
    default: /* KT_Q8_0 */
        if (e0 % QK8_0 == 0 && D % QK8_0 == 0) { /* the head is whole blocks */
            j->ops->q8_0_to_f32(row + (size_t)(e0 / QK8_0) * sizeof(block_q8_0), dst, D / QK8_0);
            break;
        }
        for (int d = 0; d < D;) { /* a head inside or across blocks */
            const int64_t e = e0 + d;
            const block_q8_0 *b = (const block_q8_0 *)(row + (size_t)(e / QK8_0) * sizeof(block_q8_0));
            const float s = kern_fp16_to_fp32(b->d);
            const int i0 = (int)(e % QK8_0), n = QK8_0 - i0 < D - d ? QK8_0 - i0 : D - d;
            for (int i = 0; i < n; i++) dst[d + i] = (float)b->qs[i0 + i] * s;
            d += n;
        }
    }
}

/* kern_rope on one head with the pair frequencies precomputed (same values) */
static void rope_head(float *x, int pos, const kern_rope_params *p, const float *freq) {
    const int half = p->rope_dim / 2;
    const float ms = kern_rope_mscale(p);
    for (int i = 0; i < half; i++) {
        const float a = (float)pos * freq[i], c = cosf(a) * ms, s = sinf(a) * ms;
        const int i0 = p->neox ? i : 2 * i, i1 = p->neox ? i + half : 2 * i + 1;
        const float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

/* the cache lines of bytes [p, p + n): into L2 (prefetcht2) where
 * kern_prefetch_l2_amd512 (a tile's 256 lines of K and V outnumber the L1's miss
 * buffers), else into L1 */
static inline void prefetch_run(const uint8_t *p, size_t n, bool l2) {
    const size_t skew = (uintptr_t)p & 63;
    if (l2)
        for (size_t o = 0; o < n + skew; o += 64) __builtin_prefetch(p - skew + o, 0, 1);
    else
        for (size_t o = 0; o < n + skew; o += 64) __builtin_prefetch(p - skew + o);
}

/* ask for head hk's K (what 1), V (what 2) or both (3) runs of positions
 * [p0, p0 + n) of an in-place tile (j->in_place), block by block, into L2
 * or L1 (prefetch_run) */
static void prefetch_tile_kv(const flash_job *j, int hk, int p0, int n, bool l2, int what) {
    const kern_kv_view *kv = j->kv;
    int64_t e0;
    const size_t hoff = kern_kv_head_offset(kv, hk, j->d->D, &e0);
    const size_t kbytes = (size_t)j->d->D * (j->f16_k ? 2 : 4), vbytes = (size_t)j->d->D * (j->f16_v ? 2 : 4);
    const size_t hb = hoff + (size_t)e0 * (j->f16_k ? 2 : 4), hv = hoff + (size_t)e0 * (j->f16_v ? 2 : 4);
    for (int jj = 0; jj < n;) {
        const int p = p0 + jj, slot = p % kv->block_size;
        const int cnt = kv->block_size - slot < n - jj ? kv->block_size - slot : n - jj;
        if (what & 1) prefetch_run(view_row(kv, kv->k_base, p) + hb, (size_t)cnt * kbytes, l2);
        if (what & 2) prefetch_run(view_row(kv, kv->v_base, p) + hv, (size_t)cnt * vbytes, l2);
        jj += cnt;
    }
}

/* share k of ns (positions nx[2] k / ns .. nx[2] (k + 1) / ns) of the next
 * step nx = {head, p0, n}: its K (what 1) or V (what 2) runs, into L2 */
static void prefetch_share(const flash_job *j, const int *nx, int k, int ns, int what) {
    const int a = nx[2] * k / ns, b = nx[2] * (k + 1) / ns;
    if (b > a) prefetch_tile_kv(j, nx[0], nx[1] + a, b - a, true, what);
}

/* kp[jj] = K row p0+jj (rotated when rope_k), the zero row for n <= jj <
 * nc; vp[jj] = V row p0+jj.  In place for F32 / F16 rows when D % 8 == 0,
 * else dequantized into Kd / Vs and zero-padded to Dp */
static void load_tile(const flash_job *j, float *sc, int h, int hk, int p0, int n, int nc, int p_lo, bool pf) {
    const flash_layout *L = &j->L;
    const int D = j->d->D, Dp = L->Dp;
    const kern_kv_view *kv = j->kv;
    const float **kp = slot_kp(L, sc, h), **vp = slot_vp(L, sc, h);
    int64_t e0; /* the head: element e0 of the row at hoff bytes */
    const size_t hoff = kern_kv_head_offset(kv, hk, D, &e0);
    /* F32 / F16 rows read in place: the head's first byte */
    const size_t hb = hoff + (size_t)e0 * (j->f16_k ? 2 : 4), hv = hoff + (size_t)e0 * (j->f16_v ? 2 : 4);
    const size_t kbytes = (size_t)D * (j->f16_k ? 2 : 4), vbytes = (size_t)D * (j->f16_v ? 2 : 4);
    /* walk the tile block by block: one table lookup per block, not a
     * division per row */
    const uint8_t *kr = NULL, *vr = NULL;
    int jj = 0;
    for (; jj < n && p0 + jj < p_lo; jj++) /* before every query's window: never read (the block may be gone) */
        kp[jj] = vp[jj] = sc + L->kz;
    if (j->in_place) {
        /* head-major rows read in place (a decoding F16 or F32 cache): a
         * block holds the head's rows back to back, so each block's part
         * of the tile is one run of K and one of V, asked for line by line
         * (the hardware prefetcher loses the stream at every block): into
         * L1, or where kern_prefetch_l2_amd512 into L2.  On Zen 4 (family 25
         * model 17, 2 threads) stories110M Q8_0 decoded at depth 8192 at
         * 58-64 t/s with prefetcht2 against 44-51 with prefetcht0,
         * tinyllama-1.1b at 27 against 23 (alternating kvant bench -d 8192
         * runs); the Intel Xeon was tuned with prefetcht0 */
        if (pf) prefetch_tile_kv(j, hk, p0 + jj, n - jj, j->pf_l2, 3);
        while (jj < n) {
            const int p = p0 + jj, slot = p % kv->block_size;
            const int cnt = kv->block_size - slot < n - jj ? kv->block_size - slot : n - jj;
            const uint8_t *kb = view_row(kv, kv->k_base, p) + hb, *vb = view_row(kv, kv->v_base, p) + hv;
            for (int i = 0; i < cnt; i++, jj++) {
                kp[jj] = (const float *)(kb + (size_t)i * kbytes);
                vp[jj] = (const float *)(vb + (size_t)i * vbytes);
            }
        }
        for (jj = n; jj < nc; jj++) kp[jj] = sc + L->kz;
        return;
    }
    for (int slot = kv->block_size; jj < n; jj++, slot++, kr += kv->row_bytes, vr += kv->row_bytes) {
        const int p = p0 + jj;
        if (slot == kv->block_size) {
            kr = view_row(kv, kv->k_base, p);
            vr = view_row(kv, kv->v_base, p);
            slot = p % kv->block_size;
        }
        /* the tile's rows are read after the loop, a head's 2-8 cache
         * lines every row_bytes: ask for them now (the hardware prefetcher
         * loses such a stride at every block) */
        if (j->direct_k || j->f16_k) { /* every line of the head's row (D = 256 F16: 8 or 9 lines) */
            for (size_t o = 0; o < kbytes; o += 64) __builtin_prefetch(kr + hb + o);
            if ((uintptr_t)(kr + hb) & 63) __builtin_prefetch(kr + hb + kbytes - 1); /* a row across lines */
        }
        if (j->direct_v || j->f16_v) {
            for (size_t o = 0; o < vbytes; o += 64) __builtin_prefetch(vr + hv + o);
            if ((uintptr_t)(vr + hv) & 63) __builtin_prefetch(vr + hv + vbytes - 1);
        }
        if (j->direct_k) kp[jj] = (const float *)(kr + hb);
        else if (j->f16_k) ((const uint16_t **)kp)[jj] = (const uint16_t *)(kr + hb);
        else {
            float *k = sc + L->kd + (size_t)jj * Dp;
            read_head(j, kr + hoff, e0, k);
            if (kv->rope_k) rope_head(k, p, kv->rope_k, sc + L->freq);
            for (int d = D; d < Dp; d++) k[d] = 0.0f;
            kp[jj] = k;
        }
        if (j->direct_v) vp[jj] = (const float *)(vr + hv);
        else if (j->f16_v) ((const uint16_t **)vp)[jj] = (const uint16_t *)(vr + hv);
        else {
            float *v = sc + L->vs + (size_t)jj * Dp;
            read_head(j, vr + hoff, e0, v);
            for (int d = D; d < Dp; d++) v[d] = 0.0f;
            vp[jj] = v;
        }
    }
    for (jj = n; jj < nc; jj++) kp[jj] = sc + L->kz; /* zeros as floats, and as halves */
}

/* Qs = the unit's query rows (queries t0 .. t1-1 of KV head hk) scaled
 * into log2 units: q * log2(e) * scale; with soft-capping q * scale / cap
 * (then cap * log2(e) * tanh(.) per score) */
static void unit_queries(const flash_job *j, float *Qs, int t0, int t1, int hk) {
    const kern_attn_dims *dm = j->d;
    const int G = j->L.G, D = dm->D, Dp = j->L.Dp;
    const float cap = dm->softcap, scale = kern_attn_scale(dm);
    const float qscale = cap > 0.0f ? scale / cap : 1.4426950408889634f * scale;
    for (int t = t0; t < t1; t++)
        for (int g = 0; g < G; g++) {
            const int r = (t - t0) * G + g;
            const float *qr = j->q + ((size_t)t * dm->H + (size_t)hk * G + g) * D;
            for (int d = 0; d < Dp; d++) Qs[(size_t)r * Dp + d] = d < D ? qr[d] * qscale : 0.0f;
        }
}

/* m[R] = -inf, l[R] = 0, A[R][Dp] = 0: an online softmax not yet started */
static void range_start(int R, int Dp, float *m, float *l, float *A) {
    for (int r = 0; r < R; r++) {
        for (int d = 0; d < Dp; d++) A[(size_t)r * Dp + d] = 0.0f;
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
}

/* The products of a loaded tile (slot h: load_tile's row pointers, its
 * scores S): S[r][s0 .. s0+w) = Qs[r] . K^T for rows r0 .. R-1, and
 * A[r] += S[r][s0 .. s0+w) . V.  Slices of a tile's products in order give
 * the bits of the whole: a score depends on its key alone, and A is stored
 * between slices, each output one FMA chain over j in order.  pf: the
 * products ask for each row's lines pf bytes further on (attn_flash.h). */
static void tile_scores(const flash_job *j, float *sc, int h, const float *Qs, int r0, int R, int s0, int w, int pf) {
    const flash_layout *L = &j->L;
    const int Dp = L->Dp, TP = L->TP;
    float *S = slot_S(L, sc, h) + (size_t)r0 * TP + s0;
    const float *const *kp = slot_kp(L, sc, h) + s0;
    const float *q = Qs + (size_t)r0 * Dp;
    if (j->f16_k) j->ops->scores_rows_f16(R - r0, Dp, w, q, Dp, (const uint16_t *const *)kp, S, TP, pf);
    else j->ops->scores_rows(R - r0, Dp, w, q, Dp, kp, S, TP, pf);
}
static void tile_pv(const flash_job *j, float *sc, int h, int r0, int R, int s0, int w, float *A, int pf) {
    const flash_layout *L = &j->L;
    const int Dp = L->Dp, TP = L->TP;
    const float *S = slot_S(L, sc, h) + (size_t)r0 * TP + s0;
    const float *const *vp = slot_vp(L, sc, h) + s0;
    if (j->f16_v) j->ops->pv_f16(R - r0, Dp, w, S, TP, (const uint16_t *const *)vp, A + (size_t)r0 * Dp, Dp, pf);
    else j->ops->pv(R - r0, Dp, w, S, TP, vp, A + (size_t)r0 * Dp, Dp, pf);
}

/* The online softmax's step over a tile's scores S (rows r0 .. R-1 of the
 * unit's queries t0 ..; positions [p0, p0 + n), nc = n rounded up to 8):
 * per row the causal and window mask, soft-capping, m and l brought up to
 * date (A rescaled when the max grew, see the top), and S turned into the
 * weights 2^(s - m) that P.V takes. */
static void tile_softmax(const flash_job *j, float *S, int t0, int r0, int R, int p0, int n, float *m, float *l,
                         float *A) {
    const kern_attn_dims *dm = j->d;
    const attn_flash_ops *ops = j->ops;
    const int G = j->L.G, Dp = j->L.Dp, TP = j->L.TP, nc = round8(n);
    const float cap = dm->softcap;
    for (int r = r0; r < R; r++) {
        const int t = t0 + r / G;
        const int nv = dm->q_pos0 + t - p0 + 1 < n ? dm->q_pos0 + t - p0 + 1 : n; /* causal part */
        float *sr = S + (size_t)r * TP;
        const int lo = kern_attn_first_pos(dm, dm->q_pos0 + t) - p0; /* the window's start in the tile */
        if (lo >= nv) { /* the row's window starts after this tile: nothing of it counts */
            for (int jj = 0; jj < nc; jj++) sr[jj] = 0.0f;
            continue;
        }
        if (cap > 0.0f)
            for (int jj = lo > 0 ? lo : 0; jj < nv; jj++) sr[jj] = cap * 1.4426950408889634f * tanhf(sr[jj]);
        for (int jj = 0; jj < lo; jj++) sr[jj] = -INFINITY; /* before the window: exp2 gives 0 */
        const float mx = ops->row_max(sr, nv);
        if (m[r] == -INFINITY) m[r] = mx; /* first tile: A and l are still 0 */
        else if (mx > m[r]) {             /* the max grew: rescale what was summed so far */
            const float c = exp2f(m[r] - mx);
            l[r] *= c;
            ops->row_scale(A + (size_t)r * Dp, Dp, c);
            m[r] = mx;
        }
        l[r] += ops->row_exp2(sr, nv, nc, m[r]);
    }
}

/* One tile [p0, p0 + n) of the online softmax of the unit's rows (queries
 * t0 .. t1-1 of KV head hk, scaled in Qs): load it (pf: asking for its
 * own runs, load_tile), then S = Qs . K^T,
 * per row m, l and A brought up to date (see the top), A += S . V.  A row
 * whose query sees nothing of the range keeps m = -inf, l = 0, A = 0.
 * nx: NULL, or the next decode step's {head, p0, n} (split_item where
 * j->ahead), whose K runs are asked for into L2 during these scores and
 * its V runs during this P.V: the products then run in slices of
 * FLASH_SLICE keys, each after its share of the runs (prefetch_share), so
 * the requests come at the pace the lines are used, never as a burst.
 * Slices give the bits of the whole (tile_scores).  Measured: decode_ahead. */
static void range_tile(const flash_job *j, float *sc, const float *Qs, int t0, int t1, int hk, int p0, int n,
                       int first, float *m, float *l, float *A, bool pf, const int *nx) {
    const int R = (t1 - t0) * j->L.G, nc = round8(n);
    load_tile(j, sc, 0, hk, p0, n, nc, first, pf);
    /* rows whose query sees p0: q_pos0 + t >= p0 (a suffix of the rows) */
    const int t_first = p0 - j->d->q_pos0 > t0 ? p0 - j->d->q_pos0 : t0;
    if (t_first >= t1) return; /* no query of the unit reaches this tile */
    const int r0 = (t_first - t0) * j->L.G;
    const int ss = nx ? FLASH_SLICE : nc, ns = (nc + ss - 1) / ss; /* score slices */
    for (int s0 = 0, k = 0; s0 < nc; s0 += ss, k++) {
        if (nx) prefetch_share(j, nx, k, ns, 1);
        tile_scores(j, sc, 0, Qs, r0, R, s0, nc - s0 < ss ? nc - s0 : ss, 0);
    }
    tile_softmax(j, slot_S(&j->L, sc, 0), t0, r0, R, p0, n, m, l, A);
    const int vs = nx ? FLASH_SLICE : n, nv = (n + vs - 1) / vs; /* P.V slices */
    for (int s0 = 0, k = 0; s0 < n; s0 += vs, k++) {
        if (nx) prefetch_share(j, nx, k, nv, 2);
        tile_pv(j, sc, 0, r0, R, s0, n - s0 < vs ? n - s0 : vs, A, 0);
    }
}

/* One decode step (split_item, rows read in place): nh KV heads hk0 ..
 * at once, each over its nt tiles from p0 (those before pe), nh nt <=
 * FLASH_SLOTS; range_tile's arithmetic per head and tile (Qs[h] the head's
 * queries; m[h], l[h], A[h] its partials), so the bits do not depend on the
 * step's shape.  A head's scores of all nt tiles come first, its K run read
 * front to back; then per tile its softmax step and P.V, its V run front to
 * back.  The heads' products are interleaved slice by slice, so a thread
 * reads nh runs of K, then nh of V, and the products ask for every line of
 * each run FLASH_PF_STREAM bytes ahead of its use, one request per line
 * spread over the work.  (A head's run goes on past a block's end when the
 * sequence's blocks are consecutive, the usual case, kv/paged.h; elsewhere
 * a request is wasted, never wrong: prefetches do not fault.)  Measured
 * shapes: decode_step. */
static void range_heads(const flash_job *j, float *sc, const float *const *Qs, int hk0, int nh, int nt, int p0,
                        int pe, int first, float *const *m, float *const *l, float *const *A) {
    const int T = j->d->T, R = T * j->L.G, tile = j->L.tile;
    int n[FLASH_SLOTS], r0[FLASH_SLOTS], k = 0; /* tile t: positions p0 + t tile .. + n[t], query rows r0[t] .. */
    for (; k < nt && p0 + k * tile < pe; k++) {
        const int pt = p0 + k * tile, t_first = pt - j->d->q_pos0 > 0 ? pt - j->d->q_pos0 : 0;
        if (t_first >= T) break; /* no query reaches this tile, nor a later one */
        n[k] = pe - pt < tile ? pe - pt : tile;
        r0[k] = t_first * j->L.G;
        for (int h = 0; h < nh; h++) load_tile(j, sc, h * nt + k, hk0 + h, pt, n[k], round8(n[k]), first, false);
    }
    const int nk = k; /* slot of head h, tile t: h nt + t */
    for (int t = 0; t < nk; t++)
        for (int s0 = 0, nc = round8(n[t]); s0 < nc; s0 += FLASH_SLICE)
            for (int h = 0; h < nh; h++)
                tile_scores(j, sc, h * nt + t, Qs[h], r0[t], R, s0, nc - s0 < FLASH_SLICE ? nc - s0 : FLASH_SLICE,
                            FLASH_PF_STREAM);
    for (int t = 0; t < nk; t++) {
        for (int h = 0; h < nh; h++)
            tile_softmax(j, slot_S(&j->L, sc, h * nt + t), 0, r0[t], R, p0 + t * tile, n[t], m[h], l[h], A[h]);
        for (int s0 = 0; s0 < n[t]; s0 += FLASH_SLICE)
            for (int h = 0; h < nh; h++)
                tile_pv(j, sc, h * nt + t, r0[t], R, s0, n[t] - s0 < FLASH_SLICE ? n[t] - s0 : FLASH_SLICE, A[h],
                        FLASH_PF_STREAM);
    }
}

/* The online softmax of the unit's rows (queries in Qs) over the tiles of
 * positions [ps, pe) (ps on a tile boundary): m[R] running max, l[R]
 * running sum, A[R][Dp] unnormalized output, all started here. */
static void unit_range(const flash_job *j, float *sc, int t0, int t1, int hk, int ps, int pe, float *m, float *l,
                       float *A) {
    range_start((t1 - t0) * j->L.G, j->L.Dp, m, l, A);
    const int first = kern_attn_first_pos(j->d, j->d->q_pos0 + t0);
    for (int p0 = ps; p0 < pe; p0 += j->L.tile)
        range_tile(j, sc, sc + j->L.qs, t0, t1, hk, p0, pe - p0 < j->L.tile ? pe - p0 : j->L.tile, first, m, l, A,
                   true, NULL);
}

/* Folds one chunk's partial (m, l, A: unit_range's) into the running
 * result (M, Ls, Acc) of R rows, exactly by log-sum-exp (scores are in
 * log2 units): M' = max(M, m), Ls' = Ls 2^(M - M') + l 2^(m - M'),
 * Acc' = Acc 2^(M - M') + A 2^(m - M').  A row the chunk did not reach
 * (m = -inf) is left as it is; the first reached is copied.  Noinline:
 * the sequential and the split kernel must fold with the same code, so
 * the same bits. */
__attribute__((noinline)) static void merge_partial(int R, int Dp, const float *m, const float *l, const float *A,
                                                    float *M, float *Ls, float *Acc) {
    for (int r = 0; r < R; r++) {
        const float *a = A + (size_t)r * Dp;
        float *o = Acc + (size_t)r * Dp;
        if (m[r] == -INFINITY) continue;
        if (M[r] == -INFINITY) {
            M[r] = m[r], Ls[r] = l[r];
            memcpy(o, a, sizeof(float) * (size_t)Dp);
            continue;
        }
        const float mx = m[r] > M[r] ? m[r] : M[r], ca = exp2f(M[r] - mx), cb = exp2f(m[r] - mx);
        Ls[r] = Ls[r] * ca + l[r] * cb;
        for (int d = 0; d < Dp; d++) o[d] = o[d] * ca + a[d] * cb;
        M[r] = mx;
    }
}

/* out rows of the unit = A / l */
static void unit_out(const flash_job *j, int t0, int t1, int hk, const float *l, const float *A) {
    const int G = j->L.G, D = j->d->D, Dp = j->L.Dp, H = j->d->H;
    for (int t = t0; t < t1; t++)
        for (int g = 0; g < G; g++) {
            const int r = (t - t0) * G + g;
            const float inv = 1.0f / l[r];
            float *o = j->out + ((size_t)t * H + (size_t)(hk * G + g)) * D;
            for (int d = 0; d < D; d++) o[d] = A[(size_t)r * Dp + d] * inv;
        }
}

/* the first tile and the chunks a unit of queries t0 .. t1-1 reads */
static void unit_span(const flash_job *j, int t0, int t1, int *ps, int *pe, int *c0, int *c1) {
    *pe = j->d->q_pos0 + t1; /* positions first .. pe-1 are needed */
    *ps = kern_attn_first_pos(j->d, j->d->q_pos0 + t0) / j->L.tile * j->L.tile; /* tiles aligned as without a window */
    *c0 = *ps / j->chunk;
    *c1 = (*pe - 1) / j->chunk;
}

/* one unit in one thread: its chunks in order, folded as they come */
static void flash_unit(const flash_job *j, float *sc, int u) {
    const kern_attn_dims *dm = j->d;
    const flash_layout *L = &j->L;
    const int qb = j->n_qb - 1 - u / dm->Hkv, hk = u % dm->Hkv; /* latest queries first */
    const int t0 = qb * L->Tq, t1 = t0 + L->Tq < dm->T ? t0 + L->Tq : dm->T;
    const int R = (t1 - t0) * L->G;
    float *A = sc + L->a, *m = sc + L->m, *l = sc + L->l;
    unit_queries(j, sc + L->qs, t0, t1, hk);
    int ps, pe, c0, c1;
    unit_span(j, t0, t1, &ps, &pe, &c0, &c1);
    if (c0 == c1) { /* one chunk: the plain online softmax */
        unit_range(j, sc, t0, t1, hk, ps, pe, m, l, A);
        unit_out(j, t0, t1, hk, l, A);
        return;
    }
    float *M = sc + L->mm, *Ls = sc + L->ll, *Acc = sc + L->acc;
    for (int r = 0; r < R; r++) M[r] = -INFINITY, Ls[r] = 0.0f;
    for (int c = c0; c <= c1; c++) {
        const int a = c * j->chunk > ps ? c * j->chunk : ps, b = (c + 1) * j->chunk < pe ? (c + 1) * j->chunk : pe;
        unit_range(j, sc, t0, t1, hk, a, b, m, l, A);
        merge_partial(R, L->Dp, m, l, A, M, Ls, Acc);
    }
    unit_out(j, t0, t1, hk, Ls, Acc);
}

/* thread ith's 64-byte aligned scratch */
static float *thread_scratch(const flash_job *j, int ith) {
    const uintptr_t base = (uintptr_t)(j->scratch + (size_t)ith * j->per_thread);
    return (float *)((base + 63) & ~(uintptr_t)63);
}

/* split mode (one block of queries, T <= Tq): item i is chunk c0 + i /
 * n_groups of KV heads g hg .. g hg + hg - 1, g = i % n_groups.  A
 * thread's split area starts with the scaled queries of the group it is
 * on (hg x [R][Dp], q_floats), then the partials (m[R], l[R], A[R][Dp]) of
 * item i's heads live in thread (i % nth)'s area, slots (i / nth) hg ..
 * (i / nth) hg + hg - 1 */
static float *head_slot(const flash_job *j, int i, int h) {
    return thread_scratch(j, i % j->nth) + j->L.split + j->q_floats +
           ((size_t)(i / j->nth) * j->hg + h) * j->slot_floats;
}

/* One item: its chunk's tiles in order, and inside each tile its heads in
 * order.  The paged pool lays a head's blocks back to back (kv/paged.h),
 * so each head of the group is one stream of K and one of V that the item
 * advances a tile at a time.  Chosen on Zen 4 over the item's heads one
 * after another (all tiles of a head, then the next): stories110M at
 * depth 8192 in 919-987 us per layer against 1085-1109 (kvant-kernels
 * --attn -t 2 --layers 12).  When the pool was laid out block by block this
 * order read each block front to back (+31% at depth 8192 on the Intel
 * Xeon, against a 2 KB run per head and block).  Rows read in place take
 * step_nh heads of step_nt tiles each per step (range_heads; one head and
 * one tile when the rows outnumber FLASH_NH_ROWS), other caches one head
 * and tile (range_tile).  Where decode_ahead (Zen 4) the item walks its
 * heads one after another instead, each tile by tile, every step asking
 * for the next step's runs into L2 (range_tile's nx: this head's next tile,
 * or the next head's first) and only the item's first step for its own:
 * one run of K and one of V at a time besides the one asked for.  Measured
 * on Zen 4 against the tile-major ahead walk, which asked for every tile's
 * own runs too: see decode_ahead.  Per head the arithmetic is
 * unit_range's, tile for tile, so no walk changes a bit. */
static void split_item(const flash_job *j, float *sc, int i) {
    const int g = i % j->n_groups, c = j->c0 + i / j->n_groups, R = j->d->T * j->L.G;
    const int hk0 = g * j->hg, hk1 = hk0 + j->hg < j->d->Hkv ? hk0 + j->hg : j->d->Hkv;
    const size_t lo = pad16((size_t)R), ao = 2 * pad16((size_t)R), qh = pad16((size_t)R * j->L.Dp);
    float *Qg = sc + j->L.split; /* this thread's: the item's heads' queries */
    for (int hk = hk0; hk < hk1; hk++) {
        float *slot = head_slot(j, i, hk - hk0);
        range_start(R, j->L.Dp, slot, slot + lo, slot + ao);
        unit_queries(j, Qg + (size_t)(hk - hk0) * qh, 0, j->d->T, hk);
    }
    const int a = c * j->chunk > j->ps ? c * j->chunk : j->ps, b = (c + 1) * j->chunk < j->pe ? (c + 1) * j->chunk : j->pe;
    const int first = kern_attn_first_pos(j->d, j->d->q_pos0);
    if (j->ahead) { /* head by head, tile by tile, each step asking for the next's runs: range_tile's nx */
        for (int hk = hk0; hk < hk1; hk++)
            for (int p0 = a; p0 < b; p0 += j->L.tile) {
                float *slot = head_slot(j, i, hk - hk0);
                const bool last = p0 + j->L.tile >= b; /* the next step: this head's next tile, or the next head's first */
                const int nh = last ? hk + 1 : hk, np0 = last ? a : p0 + j->L.tile;
                const int nx[3] = {nh, np0, b - np0 < j->L.tile ? b - np0 : j->L.tile};
                range_tile(j, sc, Qg + (size_t)(hk - hk0) * qh, 0, j->d->T, hk, p0,
                           b - p0 < j->L.tile ? b - p0 : j->L.tile, first, slot, slot + lo, slot + ao,
                           hk == hk0 && p0 == a, nh < hk1 ? nx : NULL);
            }
        return;
    }
    /* heads per range_heads (0: range_tile) and tiles per head; the step's
     * extra slots have room for FLASH_NH_ROWS rows */
    const bool fits = R <= FLASH_NH_ROWS;
    const int step = !j->in_place ? 0 : fits ? j->step_nh : 1, nt = step && fits ? j->step_nt : 1;
    for (int p0 = a; p0 < b; p0 += nt * j->L.tile) {
        const int n = b - p0 < j->L.tile ? b - p0 : j->L.tile;
        if (!step) {
            for (int hk = hk0; hk < hk1; hk++) {
                float *slot = head_slot(j, i, hk - hk0);
                range_tile(j, sc, Qg + (size_t)(hk - hk0) * qh, 0, j->d->T, hk, p0, n, first, slot, slot + lo,
                           slot + ao, true, NULL);
            }
            continue;
        }
        for (int h0 = hk0; h0 < hk1; h0 += step) {
            const int nh = hk1 - h0 < step ? hk1 - h0 : step;
            const float *Qs[FLASH_SLOTS];
            float *m[FLASH_SLOTS], *l[FLASH_SLOTS], *A[FLASH_SLOTS];
            for (int h = 0; h < nh; h++) {
                float *slot = head_slot(j, i, h0 + h - hk0);
                Qs[h] = Qg + (size_t)(h0 + h - hk0) * qh;
                m[h] = slot, l[h] = slot + lo, A[h] = slot + ao;
            }
            range_heads(j, sc, Qs, h0, nh, nt, p0, b, first, m, l, A);
        }
    }
}

static void flash_task(void *ctx, int ith, int nth) {
    (void)nth; /* units come from the shared counter */
    flash_job *j = ctx;
    float *sc = thread_scratch(j, ith);
    const kern_rope_params *rp = j->kv->rope_k;
    if (rp)
        for (int i = 0; i < rp->rope_dim / 2; i++)
            sc[j->L.freq + i] = kern_rope_freq(rp, i);
    for (int d = 0; d < j->L.Dp; d++) sc[j->L.kz + d] = 0.0f;
    const int n = j->split ? j->n_items : j->n_units;
    for (int u; (u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < n;) {
        if (j->split) split_item(j, sc, u);
        else flash_unit(j, sc, u);
    }
}

static _Atomic int64_t g_split_calls;
int64_t kern_attn_flash_split_calls(void) { return atomic_load(&g_split_calls); }

/* The avx512 tier's scores: 512-bit (two keys' 8 lanes a zmm,
 * attn_flash_avx512.c) or the AVX2 table's 256-bit ones (one key's a ymm),
 * bit-identical.  On Zen 4 (kern_zmm_halved: a zmm operation costs two)
 * the 256-bit ones: a K pair costs two loads, an insert, a conversion and
 * an FMA in two halves there, against two loads, two conversions and two
 * FMAs (and the 256-bit reduce8 tree, not pairsum's two-input permutes).
 * Zen 4 (family 25 model 17), one thread, 256 positions in L2,
 * kvant-kernels --attn -t 1 -r 15 --depth 256 --layers 12 --scores
 * 512|256, 4 alternating rounds, us per layer: stories110M (12 / 12 x
 * 64) 39, 27, 27, 27 against 63, 30, 30, 30; tinyllama (32 / 4 x 64) 42,
 * 39, 31, 31 against 44, 34, 34, 34; MQA (8 / 1 x 256, -r 5, 3 rounds)
 * 33, 32, 28 against 32, 33, 31.  The 256-bit P.V as well measured worse
 * for GQA (48-51 against 41-43, screening build).
 * The whole decode, 2 threads, the two forms switched token by token in
 * one run (kvant bench -p 0 -n 64 -r 4 -d N, a scratch build), the meter
 * at 33-66 GB/s: synthetic stories110M Q8_0 at depth 8192 1.042, 1.046,
 * 1.060 and 1.061x, at 16384 1.039 and 1.059x; tinyllama-1.1b Q8_0 at
 * 8192 (-n 32) 1.014 and 1.021x.
 * kern_attn_flash_set_zmm_scores overrides it. */
static _Atomic int g_zmm_scores = -1;
void kern_attn_flash_set_zmm_scores(int on) { atomic_store(&g_zmm_scores, on < 0 ? -1 : on != 0); }

#if defined(__x86_64__)
static attn_flash_ops g_ops_avx512;     /* the AVX2 table with the AVX-512 products */
static attn_flash_ops g_ops_avx512_s8; /* the same with the AVX2 scores */
static pthread_once_t g_ops_once = PTHREAD_ONCE_INIT;
static void ops_avx512_init(void) {
    g_ops_avx512 = attn_flash_ops_avx2;
    attn_flash_avx512_install(&g_ops_avx512);
    g_ops_avx512_s8 = g_ops_avx512;
    g_ops_avx512_s8.scores_rows = attn_flash_ops_avx2.scores_rows;
    g_ops_avx512_s8.scores_rows_f16 = attn_flash_ops_avx2.scores_rows_f16;
}
#endif

static const attn_flash_ops *pick_ops(void) {
#if defined(__x86_64__)
    const kern_tier t = kern_active_tier();
    if (t >= KERN_TIER_AVX512) {
        pthread_once(&g_ops_once, ops_avx512_init);
        const int z = atomic_load(&g_zmm_scores);
        return (z < 0 ? !kern_zmm_halved() : z != 0) ? &g_ops_avx512 : &g_ops_avx512_s8;
    }
    if (t >= KERN_TIER_AVX2) return &attn_flash_ops_avx2;
#endif
    return &attn_flash_ops_c;
}

/* A decode step's shape (range_heads): nh heads of nt tiles each, chosen
 * by measurement per machine kind; no result depends on it.
 *   - avx512 tier: 4 heads of 1 tile.  Zen 5 (family 26 model 2), 2
 *     threads, kvant-kernels --attn --depth 8192 --layers 12, two
 *     alternating rounds, us per layer against one-head steps with the next
 *     step's runs asked for into L2: stories110M (12 / 12 x 64) 696-741
 *     against 1066-1101, tinyllama (32 / 4 x 64) 434-468 against 631-647,
 *     MQA (8 / 1 x 256) 385-467 against 517-527.  Asked for a slice at a
 *     time (32 lines per head, then its products): 845-979 for stories110M;
 *     1 or 2 heads at once 1193-1516; 6 or 12 heads within noise of 4; 1024
 *     or 3072 bytes ahead slower.  (More tiles per head not measured there.)
 *   - below (AVX2 without AVX-512): 2 heads of 4 tiles.  Zen 3 (family 25
 *     model 1, 2 threads), same command, alternating rounds: stories110M
 *     1 thread 1359-1408 us per layer against 1839-1922 for 4 heads of 1
 *     tile, 2 threads 913-1045 against 1012-1096 (at 2 threads the memory
 *     is the limit), 5 more rounds 999-1125 against 1222-1875 (1 head of 8
 *     tiles alike, 2 of 2 between); 1 or 2 heads of 1 tile in between.
 *     kvant bench -m stories110M-q8_0.gguf -p 0 -n 32 -r 2 -d 8192 -t 2
 *     (synthetic), 5 alternating rounds: 55.4-70.9 t/s against 48.7-53.9,
 *     median ratio 1.14.  Fewer runs at once, each longer: kvant-stream
 *     reads fastest there with 2-4 streams per thread and no software
 *     prefetch.
 * kern_attn_flash_set_step overrides it (tests, benchmarks). */
static _Atomic int g_step_nh, g_step_nt;
void kern_attn_flash_set_step(int nh, int nt) {
    CORE_ASSERT((nh == 0 && nt == 0) || (nh > 0 && nt > 0 && nh * nt <= FLASH_SLOTS));
    atomic_store(&g_step_nh, nh);
    atomic_store(&g_step_nt, nt);
}
/* Whether decode steps take one head and one tile, the next step's runs
 * asked for into L2 a slice at a time (range_tile's nx), rather than
 * range_heads': on Zen 4 (kern_prefetch_l2), where that walk was tuned
 * (stories110M at depth 8192: the next step asked for 94-95 t/s against
 * 77-85 with bursts, 72-85 without the tile's own prefetch).  Range_heads'
 * 4-head steps (the avx512 tier's, tuned on Zen 5) took its place there
 * unmeasured; back on Zen 4 (family 25 model 17, 2 threads, synthetic
 * stories110M Q8_0, kvant bench -p 0 -n 32 -r 2 -d 8192, 4 alternating
 * rounds): 71.2-82.6 t/s against 38.9-46.0 with the 4-head steps;
 * kvant-kernels --attn -t 2 --depth 8192 --layers 12: 913-920 us per
 * layer against 1984.  Its walk (split_item) was tile-major, each step
 * asking for its own runs as well as the next's; head-major, the item's
 * first step alone asking for its own (Zen 4 again, 2026-12-07): one
 * thread over 256 positions in L2 28-29 us per layer against 33-34,
 * 2 threads at depth 8192 723-739 against 717-800 (stories110M) and
 * 589-607 against 620-623 (tinyllama), 4 alternating rounds; the whole
 * decode (kvant bench -p 0 -n 32 -r 8 -d 8192, the two walks switched
 * token by token in one run) 1.01x in the slow memory minutes and
 * 1.06-1.07x in the fast ones for stories110M, 1.01x for tinyllama (that
 * with each head's first step asking for its own runs too; the item's
 * first step alone: 0.998x of it, twice); with
 * 2-6 heads a step (range_heads asking for the next step's runs) it was
 * 28-29 us in L2 but 908-1405 us at depth 8192.
 * kern_attn_flash_set_ahead overrides it. */
static _Atomic int g_ahead = -1;
void kern_attn_flash_set_ahead(int on) { atomic_store(&g_ahead, on < 0 ? -1 : on != 0); }
static bool decode_ahead(void) {
    const int a = atomic_load(&g_ahead);
    return a < 0 ? kern_prefetch_l2() : a != 0;
}
static void decode_step(int *nh, int *nt) {
    *nh = atomic_load(&g_step_nh), *nt = atomic_load(&g_step_nt);
    if (*nh) return;
    const bool wide = kern_active_tier() >= KERN_TIER_AVX512;
    *nh = wide ? 4 : 2;
    *nt = wide ? 1 : 4;
}

void kern_attn_flash(core_pool *pool, void *scratch, const float *q, const kern_kv_view *kv, float *out,
                     const kern_attn_dims *d) {
    CORE_ASSERT(d->T >= 0 && d->H > 0 && d->Hkv > 0 && d->H % d->Hkv == 0 && d->D > 0 && d->q_pos0 >= 0);
    CORE_ASSERT(d->q_pos0 + d->T <= kv->n_pos && kv->block_size > 0 && d->tile >= 0);
    kern_kv_view_assert(kv, d->Hkv, d->D);
    CORE_ASSERT(!kv->rope_k || (kv->rope_k->rope_dim % 2 == 0 && kv->rope_k->rope_dim <= d->D));
    if (d->T == 0) return;
    flash_job j = {.q = q, .kv = kv, .out = out, .d = d, .ops = pick_ops(), .L = layout(d),
                   .scratch = scratch, .per_thread = kern_attn_flash_scratch_bytes(d)};
    /* F32 and F16 rows are read in place when D % 8 == 0 (the loops read
     * Dp = D rounded up to 8 elements per row) */
    j.direct_k = kv->type == KT_F32 && !kv->rope_k && d->D % 8 == 0;
    j.direct_v = kv->type == KT_F32 && d->D % 8 == 0;
    j.f16_k = kv->type == KT_F16 && !kv->rope_k && d->D % 8 == 0 && d->D <= 256;
    j.f16_v = kv->type == KT_F16 && d->D % 8 == 0 && d->D <= 256;
    j.in_place = kv->head_stride && (j.direct_k || j.f16_k) && (j.direct_v || j.f16_v) &&
                 kv->row_bytes == (size_t)d->D * (j.f16_k ? 2 : 4);
    j.pf_l2 = kern_prefetch_l2_amd512();
    decode_step(&j.step_nh, &j.step_nt);
    j.ahead = j.in_place && decode_ahead();
    j.n_qb = (d->T + j.L.Tq - 1) / j.L.Tq;
    j.n_units = j.n_qb * d->Hkv;
    j.chunk = d->split < 0 ? INT_MAX / 2 / j.L.tile * j.L.tile
              : d->split == 0 ? FLASH_CHUNK_TILES * j.L.tile
                              : (d->split + j.L.tile - 1) / j.L.tile * j.L.tile;
    atomic_init(&j.next, 0);
    const double work = (double)d->T * d->H * d->D * (d->q_pos0 + d->T);
    if (work < KERN_MT_MIN_WORK) {
        flash_task(&j, 0, 1);
        return;
    }
    /* One block of queries (a sequence decoding): every (chunk, group of
     * KV heads) is an item any thread takes, so a sequence uses every
     * thread even with fewer KV heads than threads (gemma3-1b has one), and
     * a thread reads a group's heads block by block (split_item).  Groups
     * are as large as leaves about 4 items per thread.  The partials are
     * folded in chunk order here, with the code flash_unit folds with, so
     * the bits are those without the split, whatever the thread count. */
    j.nth = core_pool_size(pool);
    if (j.n_qb == 1) {
        const int R = d->T * j.L.G;
        int c1;
        unit_span(&j, 0, d->T, &j.ps, &j.pe, &j.c0, &c1);
        const int nch = c1 - j.c0 + 1, want = (4 * j.nth + nch - 1) / nch;
        j.n_groups = want < d->Hkv ? want : d->Hkv;
        j.hg = (d->Hkv + j.n_groups - 1) / j.n_groups;
        j.n_groups = (d->Hkv + j.hg - 1) / j.hg;
        j.n_items = nch * j.n_groups;
        j.slot_floats = 2 * pad16((size_t)R) + pad16((size_t)R * j.L.Dp);
        j.q_floats = (size_t)j.hg * pad16((size_t)R * j.L.Dp);
        j.split = (nch > 1 || j.hg > 1) && j.q_floats + (size_t)((j.n_items + j.nth - 1) / j.nth) * j.hg *
                                                             j.slot_floats <= FLASH_SPLIT_FLOATS;
    }
    core_pool_run(pool, flash_task, &j);
    if (!j.split) return;
    atomic_fetch_add_explicit(&g_split_calls, 1, memory_order_relaxed);
    float *sc = thread_scratch(&j, 0);
    const int R = d->T * j.L.G, nch = j.n_items / j.n_groups;
    float *M = sc + j.L.mm, *Ls = sc + j.L.ll, *Acc = sc + j.L.acc;
    for (int hk = 0; hk < d->Hkv; hk++) {
        for (int r = 0; r < R; r++) M[r] = -INFINITY, Ls[r] = 0.0f;
        for (int c = 0; c < nch; c++) {
            const float *slot = head_slot(&j, c * j.n_groups + hk / j.hg, hk % j.hg);
            merge_partial(R, j.L.Dp, slot, slot + pad16((size_t)R), slot + 2 * pad16((size_t)R), M, Ls, Acc);
        }
        unit_out(&j, 0, d->T, hk, Ls, Acc);
    }
}
