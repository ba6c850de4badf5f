/* kernels/attn.h - attention over a KV cache seen through a view, so one
 * kernel serves the contiguous cache, the paged cache (block tables) and
 * quantized K/V.
 *
 * Letters: T queries, H query heads, Hkv KV heads, D head dim, P cached
 * positions.  Query head h reads KV head h / (H / Hkv) (GQA/MQA: no copy).
 *
 * Two kernels with the same contract:
 *  - naive: materializes each head's T x P score matrix and a full softmax
 *    (the reference);
 *  - flash: K/V in tiles with a running max and running sum (online
 *    softmax), never materializing T x P; exact up to float rounding.
 */
#ifndef KVANT_KERNELS_ATTN_H
#define KVANT_KERNELS_ATTN_H

#include <math.h>

#include "core/core.h"
#include "kernels/kernels.h"

/* Where cache position p lives: block i = p / block_size, slot p % block_size;
 * pool block b = block_table ? block_table[i] : i; its K row is at
 * k_base + b * block_stride + slot * row_bytes (V likewise from v_base).
 * Two layouts of the KV heads:
 *  - head_stride == 0 (row-major): the row holds Hkv*D elements of `type`
 *    (KT_F32, KT_F16 or KT_Q8_0; Q8_0 blocks run along the row, so Hkv*D
 *    must be a multiple of 32), head hk at element hk*D;
 *  - head_stride > 0 (head-major): the row above is head 0's D elements
 *    (whole Q8_0 blocks: D % 32 == 0), and head hk's are head_stride bytes
 *    after head 0's.  A paged block then keeps each head's rows together
 *    ([Hkv][block_size][D]), so a head's K and V are read as runs of
 *    block_size * D elements, not D elements every Hkv*D.
 * Rows are aligned to 4 bytes (F32) or 2 bytes (F16, Q8_0): k_base, v_base,
 * block_stride, row_bytes and head_stride are multiples of that. */
typedef struct {
    const uint8_t *k_base, *v_base;
    size_t block_stride;
    const int32_t *block_table;     /* NULL: contiguous, block i is block i */
    int block_size;
    int type;
    size_t row_bytes;
    int n_pos;                      /* positions 0 .. n_pos-1 are readable */
    /* non-NULL: K rows are stored BEFORE RoPE (StreamingLLM); row p is
     * rotated by position p (its index in the cache) when read */
    const kern_rope_params *rope_k;
    size_t head_stride;             /* 0: row-major heads; else see above */
} kern_kv_view;

/* The first byte of the row of position p's head hk is row + the returned
 * offset, and the head starts at element *e0 of what is there (0 when
 * head-major; hk*D, maybe inside a Q8_0 block, when row-major). */
static inline size_t kern_kv_head_offset(const kern_kv_view *v, int hk, int D, int64_t *e0) {
    if (v->head_stride) {
        *e0 = 0;
        return (size_t)hk * v->head_stride;
    }
    *e0 = (int64_t)hk * D;
    return 0;
}

typedef struct {
    int T, H, Hkv, D;
    int q_pos0;     /* cache index of query 0; query t attends to 0 .. q_pos0 + t */
    int tile;       /* flash: positions per K/V tile (0 = default 64) */
    float scale;    /* scores = q.k * scale; 0 = 1/sqrt(D) */
    float softcap;  /* scores = softcap * tanh(scores / softcap) before the softmax (gemma2); 0 = none */
    int window;     /* > 0: query t attends only to q_pos0 + t - window + 1 .. q_pos0 + t (sliding window) */
    /* flash: positions per KV chunk, rounded up to a multiple of the tile
     * (0 = default, 8 tiles; < 0 = one chunk: the plain online softmax).
     * Each chunk's softmax is computed alone and the chunks are folded in
     * order by log-sum-exp, so that a decode can spread one head's chunks
     * over threads (flash-decoding) with the same bits as one thread. */
    int split;
} kern_attn_dims;

/* The first cache index query position qp attends to. */
static inline int kern_attn_first_pos(const kern_attn_dims *d, int qp) {
    return d->window > 0 && qp - d->window + 1 > 0 ? qp - d->window + 1 : 0;
}
static inline float kern_attn_scale(const kern_attn_dims *d) {
    return d->scale != 0.0f ? d->scale : 1.0f / sqrtf((float)d->D);
}

/* Per-thread scratch bytes either kernel needs (times the pool size): the
 * larger of the two below. */
size_t kern_attn_scratch_bytes(const kern_attn_dims *d, int n_pos_max);
/* Per-thread scratch of each kernel alone.  naive: (T*P + 2*P*D) floats for
 * P = n_pos_max (the T x P score matrix of one head and that head's K/V
 * rows, dequantized).  flash: independent of P: a tile of K and V, the
 * scores of a tile and the accumulators of one block of query rows
 * (about 150 KB at D = 64, H / Hkv = 8, tile 64).  All three never shrink
 * as T, n_pos_max or tile grow, so a buffer sized once for the largest T
 * and P serves every call with the same H, Hkv, D and tile. */
size_t kern_attn_naive_scratch_bytes(const kern_attn_dims *d, int n_pos_max);
size_t kern_attn_flash_scratch_bytes(const kern_attn_dims *d);

/* Reads cache position p, KV head hk (D elements at element hk*D of the row)
 * through the view into dst[D] as floats; K (is_v false) is rotated by
 * position p when view->rope_k is set.  The reference way to read a view
 * (the naive kernel uses it; tests use it to check layouts). */
void kern_kv_view_read(const kern_kv_view *view, bool is_v, int p, int hk, int D, float *dst);
/* Asserts what both kernels need of a view of Hkv heads of D elements:
 * a cache type, rows (or heads) of whole blocks, alignment. */
void kern_kv_view_assert(const kern_kv_view *view, int Hkv, int D);

/* q: [T][H][D] floats (already rotated).  out: [T][H][D].
 * scratch: n_threads * kern_attn_scratch_bytes(d, view->n_pos) bytes (or the
 * kernel's own *_scratch_bytes), n_threads = core_pool_size(pool); any
 * alignment (the kernels align their slices to 64 bytes themselves, and
 * the sizes above include that slack).
 * Needs q_pos0 + T <= n_pos: nothing at or past n_pos is ever read.
 * Results do not depend on the number of threads (each output row is
 * computed by one thread in a fixed order).
 * sink_mass: NULL, or [H] floats that receive, summed over the T queries,
 * the attention probability each head puts on cache positions 0..n_sink-1
 * (for attention-sink statistics); n_sink ignored when NULL.  The values
 * are overwritten, not added to (sum across layers / steps in the caller).
 * flash has no sink_mass: ask naive, or compute it from a decode step.
 * flash runs its tile loops at the active kernel tier (kern_active_tier():
 * AVX2 + FMA + F16C code at avx2 and above, portable C below). */
void kern_attn_naive(core_pool *pool, void *scratch, const float *q, const kern_kv_view *kv, float *out,
                     const kern_attn_dims *d, float *sink_mass, int n_sink);
void kern_attn_flash(core_pool *pool, void *scratch, const float *q, const kern_kv_view *kv, float *out,
                     const kern_attn_dims *d);
/* how many kern_attn_flash calls so far split a head's chunks across
 * threads (flash-decoding); for tests and benchmarks */
int64_t kern_attn_flash_split_calls(void);
/* a decoding step's shape when rows are read in place: nh KV heads of nt
 * tiles each at once (nh nt <= 8); 0, 0 = the measured default of the
 * active tier.  No result depends on it; for tests and benchmarks */
void kern_attn_flash_set_step(int nh, int nt);
/* whether decoding steps over rows read in place take one head and one
 * tile each while asking for the next step's rows into L2 a slice at a
 * time (1), or the step shape above (0); -1 = the measured default (1 on
 * Zen 4).  No result depends on it; for tests and benchmarks */
void kern_attn_flash_set_ahead(int on);
/* whether the avx512 tier's attention scores take 512-bit registers (1) or
 * the AVX2 table's 256-bit ones (0); -1 = the measured default (0 on Zen
 * 4).  The two are bit-identical; for tests and benchmarks */
void kern_attn_flash_set_zmm_scores(int on);

#endif
