/* attn_naive.c - the reference attention over a KV view (kernels/attn.h),
 * and the reference way of reading one row of a view.
 *
 * Letters: T queries, H query heads, Hkv KV heads, D head dim, P = q_pos0 + T
 * positions attended by the last query.  Query head h reads KV head
 * hk = h / (H / Hkv).
 *
 *   q    [T][H][D]   floats, already rotated
 *   out  [T][H][D]
 *   per head h, in one thread's scratch:
 *     Kd [P][D], Vd [P][D]  KV head hk's rows, dequantized (K rotated if rope_k)
 *     S  [T][P]             scores q_t . k_p / sqrt(D) for p <= q_pos0 + t,
 *                           then softmax of each row over that window
 *   out[t][h] = sum_p S[t][p] * Vd[p]   (p ascending)
 *
 * It materializes the whole T x P score matrix of a head, on purpose: it
 * is the plain statement of the math that kern_attn_flash is tested
 * against.  Threads split the H heads; results do not depend on how many. */
#include <math.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/quants.h"

/* ---- reading a view ------------------------------------------------------ */
static const uint8_t *view_row(const kern_kv_view *v, bool is_v, int p) {
    const int blk = p / v->block_size, slot = p % v->block_size;
    const int64_t b = v->block_table ? v->block_table[blk] : blk;
    CORE_ASSERT(b >= 0);
    return (is_v ? v->v_base : v->k_base) + (size_t)b * v->block_stride + (size_t)slot * v->row_bytes;
}

void kern_kv_view_assert(const kern_kv_view *kv, int Hkv, int D) {
    CORE_ASSERT(kv->type == KT_F32 || kv->type == KT_F16 || kv->type == KT_Q8_0);
    /* 0: a Q8_0 row (row-major) or head (head-major) that is not whole blocks */
    const size_t rb = kv->head_stride ? kern_row_bytes(kv->type, D) : kern_row_bytes(kv->type, (int64_t)Hkv * D);
    const size_t al = kv->type == KT_F32 ? 4 : 2; /* rows aligned to their element / block scale */
    CORE_ASSERT(rb > 0 && kv->row_bytes >= rb);
    CORE_ASSERT((uintptr_t)kv->k_base % al == 0 && (uintptr_t)kv->v_base % al == 0 && kv->block_stride % al == 0 &&
                kv->row_bytes % al == 0 && kv->head_stride % al == 0);
}

void kern_kv_view_read(const kern_kv_view *view, bool is_v, int p, int hk, int D, float *dst) {
    CORE_ASSERT(p >= 0 && p < view->n_pos);
    int64_t e0; /* first element of the head in the row */
    const uint8_t *row = view_row(view, is_v, p) + kern_kv_head_offset(view, hk, D, &e0);
    switch (view->type) {
    case KT_F32:
        memcpy(dst, row + e0 * 4, (size_t)D * sizeof *dst);
        break;
    case KT_F16: {
        const uint8_t *h = row + e0 * 2;
        for (int d = 0; d < D; d++) {
            uint16_t x;
            memcpy(&x, h + 2 * d, 2);
            dst[d] = kern_fp16_to_fp32(x);
        }
        break;
    }
    case KT_Q8_0:
        for (int d = 0; d < D; d++) {
            const int64_t e = e0 + d;
            const block_q8_0 *b = (const block_q8_0 *)(row + (size_t)(e / QK8_0) * sizeof(block_q8_0));
            dst[d] = (float)b->qs[e % QK8_0] * kern_fp16_to_fp32(b->d);
        }
        break;
    default:
        CORE_ASSERT(!"kern_kv_view: type must be F32, F16 or Q8_0");
    }
    /* rotating one head alone equals rotating the whole row with n_heads = Hkv */
    if (!is_v && view->rope_k) kern_rope(dst, 1, D, p, view->rope_k);
}

/* ---- scratch -------------------------------------------------------------- */
size_t kern_attn_naive_scratch_bytes(const kern_attn_dims *d, int n_pos_max) {
    const size_t P = (size_t)(n_pos_max > 0 ? n_pos_max : 0);
    return ((size_t)d->T * P + 2 * P * (size_t)d->D) * sizeof(float) + 64;
}

size_t kern_attn_scratch_bytes(const kern_attn_dims *d, int n_pos_max) {
    const size_t a = kern_attn_naive_scratch_bytes(d, n_pos_max), b = kern_attn_flash_scratch_bytes(d);
    return a > b ? a : b;
}

/* ---- the kernel ------------------------------------------------------------ */
typedef struct {
    const float *q;
    const kern_kv_view *kv;
    float *out;
    const kern_attn_dims *d;
    float *sink_mass;
    int n_sink;
    uint8_t *scratch;
    size_t per_thread;
} naive_job;

/* one head: all T queries against positions 0 .. q_pos0 + T - 1 */
static void naive_head(const naive_job *j, float *sc, int h) {
    const kern_attn_dims *dm = j->d;
    const int T = dm->T, H = dm->H, D = dm->D, P = dm->q_pos0 + dm->T;
    const int hk = h / (H / dm->Hkv);
    const float scale = kern_attn_scale(dm), cap = dm->softcap;
    float *S = sc, *Kd = S + (size_t)T * P, *Vd = Kd + (size_t)P * D;
    /* positions before the first query's window are never read (a paged cache may have returned them) */
    for (int p = kern_attn_first_pos(dm, dm->q_pos0); p < P; p++) {
        kern_kv_view_read(j->kv, false, p, hk, D, Kd + (size_t)p * D);
        kern_kv_view_read(j->kv, true, p, hk, D, Vd + (size_t)p * D);
    }
    float sink = 0.0f;
    for (int t = 0; t < T; t++) {
        const int n = dm->q_pos0 + t + 1;                 /* causal: 0 .. q_pos0 + t */
        const int lo = kern_attn_first_pos(dm, n - 1);     /* and the sliding window's start */
        const float *qt = j->q + ((size_t)t * H + h) * D;
        float *st = S + (size_t)t * P;
        for (int p = lo; p < n; p++) {
            float dot = 0.0f;
            for (int d = 0; d < D; d++) dot += qt[d] * Kd[(size_t)p * D + d];
            st[p] = dot * scale;
            if (cap > 0.0f) st[p] = cap * tanhf(st[p] / cap);
        }
        for (int p = 0; p < lo; p++) st[p] = 0.0f; /* masked: probability 0 */
        for (int p = n; p < P; p++) st[p] = 0.0f;
        float mx = st[lo];
        for (int p = lo + 1; p < n; p++) mx = st[p] > mx ? st[p] : mx;
        float sum = 0.0f;
        for (int p = lo; p < n; p++) {
            st[p] = expf(st[p] - mx);
            sum += st[p];
        }
        for (int p = lo; p < n; p++) st[p] /= sum;
        for (int p = lo; p < n && p < j->n_sink; p++) sink += st[p];
        float *o = j->out + ((size_t)t * H + h) * D;
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        for (int p = lo; p < n; p++) {
            const float a = st[p], *vp = Vd + (size_t)p * D;
            for (int d = 0; d < D; d++) o[d] += a * vp[d];
        }
    }
    if (j->sink_mass) j->sink_mass[h] = sink;
}

static void naive_task(void *ctx, int ith, int nth) {
    const naive_job *j = ctx;
    uintptr_t base = (uintptr_t)(j->scratch + (size_t)ith * j->per_thread);
    float *sc = (float *)((base + 63) & ~(uintptr_t)63);
    int64_t lo, hi;
    core_split(j->d->H, ith, nth, &lo, &hi);
    for (int64_t h = lo; h < hi; h++) naive_head(j, sc, (int)h);
}

void kern_attn_naive(core_pool *pool, void *scratch, const float *q, const kern_kv_view *kv, float *out,
                     const kern_attn_dims *d, float *sink_mass, int n_sink) {
    CORE_ASSERT(d->T >= 0 && d->H > 0 && d->Hkv > 0 && d->H % d->Hkv == 0 && d->D > 0 && d->q_pos0 >= 0);
    CORE_ASSERT(d->q_pos0 + d->T <= kv->n_pos && kv->block_size > 0);
    kern_kv_view_assert(kv, d->Hkv, d->D);
    if (d->T == 0) {
        if (sink_mass)
            for (int h = 0; h < d->H; h++) sink_mass[h] = 0.0f;
        return;
    }
    naive_job j = {q, kv, out, d, sink_mass, sink_mass ? n_sink : 0, scratch,
                   kern_attn_naive_scratch_bytes(d, kv->n_pos)};
    const double work = (double)d->T * d->H * d->D * (d->q_pos0 + d->T);
    if (work < KERN_MT_MIN_WORK) naive_task(&j, 0, 1);
    else core_pool_run(pool, naive_task, &j);
}
