/* kv/ - KV caches behind one interface, kv_store: what the forward pass
 * needs from a cache, whatever its memory policy.
 *
 *   contiguous  one [n_ctx][row] region per layer for K and for V, reserved
 *               up front (the reference);
 *   paged       a sequence in a kv_pool of fixed-size blocks with block
 *               tables, sharing, copy-on-write and prefix caching
 *               (kv/paged.h; kv/store_paged.c adapts it);
 *   streaming   StreamingLLM: the first n_sink tokens plus the last
 *               n_window tokens; K is stored BEFORE RoPE and rotated by its
 *               index in the cache when read, so no position exceeds
 *               n_sink + n_window.
 *
 * A row holds Hkv*D elements of the cache type (KT_F32, KT_F16 or KT_Q8_0):
 * contiguous when kv_row's head stride is 0, else head hk's D elements
 * are hk head strides after head 0's (the paged pool's head-major layout;
 * see kv/paged.h).  kv_write_row writes either.
 * One forward chunk of T tokens does:
 *     kv_reserve(s, T)  ->  for each layer: kv_row(...) for cache indices
 *     n_pos .. n_pos+T-1, write K and V;  kv_view(s, layer, n_pos + T)
 *     and attend;  then kv_commit(s, tokens, T).
 * Cache index = RoPE position of the query (and of K when rotated on read).
 */
#ifndef KVANT_KV_H
#define KVANT_KV_H

#include "core/core.h"
#include "kernels/attn.h"

typedef struct kv_store kv_store;

typedef struct {
    /* room for n more rows (may evict: streaming; may copy-on-write or fail
     * with KVANT_ERR_FULL: paged; nothing changes on failure) */
    kvant_code (*reserve)(kv_store *s, int n, kvant_status *st);
    /* where to write cache index pos of `layer`; returns the row's head
     * stride (0: one contiguous row; else head hk's D elements lie hk times
     * it after head 0's; a paged store's layers may differ: its sliding-
     * window layers have their own pool) */
    size_t (*row)(kv_store *s, int layer, int pos, uint8_t **k, uint8_t **v);
    /* layer as an attention view over cache indices 0 .. n_pos-1 */
    void (*view)(kv_store *s, int layer, int n_pos, kern_kv_view *out);
    /* the n rows written after reserve are now part of the cache */
    void (*commit)(kv_store *s, const int32_t *tokens, int n);
    /* forget every row (the memory stays reserved) */
    void (*clear)(kv_store *s);
    void (*destroy)(kv_store *s);
    /* empty store only: reuse cached K/V of a prompt's leading full blocks;
     * returns the tokens now cached (n_pos).  NULL: no prefix caching */
    int (*prefix_match)(kv_store *s, const int32_t *tokens, int n);
    /* a new store sharing this one's rows (copy-on-write).  NULL: no fork */
    kv_store *(*fork)(kv_store *s, kvant_status *st);
    /* bytes of the rows it holds, when not every layer holds every position
     * (sliding windows).  NULL: kv_bytes_per_token x n_pos */
    size_t (*bytes_held)(const kv_store *s);
    /* keep rows 0 .. len-1 (len <= n_pos), forget the rest; returns the
     * rows kept: len, or less where the store keeps whole blocks (paged:
     * len rounded down to the block size), or -1 when it cannot (nothing
     * changes).  NULL: cannot */
    int (*truncate)(kv_store *s, int len);
} kv_store_ops;

struct kv_store {
    const kv_store_ops *ops;
    int type;                /* row type */
    int n_layers, kv_dim;    /* kv_dim = Hkv * D elements per row */
    size_t row_bytes;        /* a position's K (or V), all heads */
    int n_pos;               /* committed cache indices 0 .. n_pos-1 */
    int capacity;            /* most cache indices it can hold */
    int max_chunk;           /* most rows one reserve may ask for */
    bool rope_on_read;       /* K stored before RoPE (streaming) */
    int64_t evicted;         /* tokens dropped so far (streaming) */
    int64_t total_tokens;    /* tokens ever committed */
};

static inline kvant_code kv_reserve(kv_store *s, int n, kvant_status *st) { return s->ops->reserve(s, n, st); }
static inline size_t kv_row(kv_store *s, int layer, int pos, uint8_t **k, uint8_t **v) {
    return s->ops->row(s, layer, pos, k, v);
}
static inline void kv_view(kv_store *s, int layer, int n_pos, kern_kv_view *out) { s->ops->view(s, layer, n_pos, out); }
/* Converts Hkv*D floats (one position's K or V) to the cache type at dst,
 * a pointer from kv_row, whose head stride hs kv_row returned. */
static inline void kv_write_row(const kv_store *s, kern_from_float_fn to_row, const float *src, uint8_t *dst, int D,
                                size_t hs) {
    if (!hs) {
        to_row(src, dst, s->kv_dim);
        return;
    }
    for (int h = 0; h < s->kv_dim / D; h++) to_row(src + (size_t)h * D, dst + (size_t)h * hs, D);
}
static inline void kv_commit(kv_store *s, const int32_t *tokens, int n) { s->ops->commit(s, tokens, n); }
static inline void kv_clear(kv_store *s) { s->ops->clear(s); }
static inline int kv_truncate(kv_store *s, int len) { return s->ops->truncate ? s->ops->truncate(s, len) : -1; }
static inline void kv_free(kv_store *s) { if (s) s->ops->destroy(s); }

static inline int kv_prefix_match_tokens(kv_store *s, const int32_t *tokens, int n) {
    return s->ops->prefix_match ? s->ops->prefix_match(s, tokens, n) : 0;
}

/* bytes of one cached token (all layers, K and V) and of the rows in use */
static inline size_t kv_bytes_per_token(const kv_store *s) { return 2 * (size_t)s->n_layers * s->row_bytes; }
static inline size_t kv_bytes_used(const kv_store *s) {
    return s->ops->bytes_held ? s->ops->bytes_held(s) : kv_bytes_per_token(s) * (size_t)s->n_pos;
}

/* Row types a cache can hold: KT_F32, KT_F16, KT_Q8_0 (kv_dim % 32 == 0). */
kvant_code kv_check_type(int type, int kv_dim, kvant_status *st);

kv_store *kv_contiguous_new(int n_layers, int n_ctx, int kv_dim, int type, kvant_status *st);
kv_store *kv_streaming_new(int n_layers, int n_sink, int n_window, int kv_dim, int type, kvant_status *st);
/* bytes the store reserved up front (contiguous, streaming) */
size_t kv_reserved_bytes(const kv_store *s);

/* A sequence in a paged pool (kv/paged.h) as a kv_store; with own_pool the
 * store frees the pool with itself. */
struct kv_pool;
kv_store *kv_paged_store_new(struct kv_pool *pool, bool own_pool, kvant_status *st);
struct kv_pool *kv_paged_store_pool(kv_store *s);
/* the pool sequence behind a paged store (NULL for other stores), for a
 * scheduler's block accounting (kv_seq_blocks_needed) */
struct kv_seq;
struct kv_seq *kv_paged_store_seq(kv_store *s);
/* Sliding-window models: layer l's K/V in `local` when is_local[l], else in
 * `global` (each pool made for its layer count); the local sequence gives
 * back the blocks older than `window` positions (window > block size).
 * Both pools index positions up to the full context (max_ctx); the local
 * one needs blocks for window + max_chunk positions per sequence, and
 * max_chunk is the most rows one reserve asks for.  own_pools: the store
 * frees both pools. */
kv_store *kv_paged_store_new_swa(struct kv_pool *global, struct kv_pool *local, const bool *is_local, int n_layers,
                                 int window, int max_chunk, bool own_pools, kvant_status *st);
/* the local pool's sequence of a sliding-window store (NULL otherwise) */
struct kv_seq *kv_paged_store_local_seq(kv_store *s);
struct kv_pool *kv_paged_store_local_pool(kv_store *s);

#endif
