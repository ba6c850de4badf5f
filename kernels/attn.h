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

#include "core/core.h"
#include "kernels/kernels.h"

/* Where cache position p lives: block i = p / block_size, slot p % block_size;
 * pool block b = block_table ? block_table[i] : i; its K row is at
 * k_base + b * block_stride + slot * row_bytes (V likewise from v_base).
 * A row holds Hkv*D elements of `type` (KT_F32, KT_F16 or KT_Q8_0; Q8_0
 * blocks run along the row, so Hkv*D must be a multiple of 32). */
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
} kern_kv_view;

typedef struct {
    int T, H, Hkv, D;
    int q_pos0;     /* cache index of query 0; query t attends to 0 .. q_pos0 + t */
    int tile;       /* flash: positions per K/V tile (0 = default 64) */
} kern_attn_dims;

/* Per-thread scratch bytes either kernel needs (times the pool size). */
size_t kern_attn_scratch_bytes(const kern_attn_dims *d, int n_pos_max);

/* q: [T][H][D] floats (already rotated).  out: [T][H][D].
 * scratch: n_threads * kern_attn_scratch_bytes(d, view->n_pos) bytes.
 * sink_mass: NULL, or [H] floats that receive, summed over the T queries,
 * the attention probability each head puts on cache positions 0..n_sink-1
 * (for attention-sink statistics); n_sink ignored when NULL. */
void kern_attn_naive(core_pool *pool, void *scratch, const float *q, const kern_kv_view *kv, float *out,
                     const kern_attn_dims *d, float *sink_mass, int n_sink);
void kern_attn_flash(core_pool *pool, void *scratch, const float *q, const kern_kv_view *kv, float *out,
                     const kern_attn_dims *d);

#endif
