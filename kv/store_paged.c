/* store_paged.c - a sequence of a paged pool (kv/paged.h) behind the
 * kv_store interface the forward pass uses. */
#include <stdlib.h>

#include "kernels/types.h"
#include "kv/kv.h"
#include "kv/paged.h"

typedef struct {
    kv_store base;
    kv_pool *pool;
    kv_seq *seq;
    bool own_pool;
} paged_store;

static kvant_code p_reserve(kv_store *s, int n, kvant_status *st) {
    paged_store *p = (paged_store *)s;
    return kv_seq_reserve(p->pool, p->seq, n, st);
}

static void p_row(kv_store *s, int layer, int pos, uint8_t **k, uint8_t **v) {
    paged_store *p = (paged_store *)s;
    kv_pool_row(p->pool, p->seq, layer, pos, k, v);
}

static void p_view(kv_store *s, int layer, int n_pos, kern_kv_view *out) {
    paged_store *p = (paged_store *)s;
    kv_pool_view(p->pool, p->seq, layer, out);
    out->n_pos = n_pos;
}

static void p_commit(kv_store *s, const int32_t *tokens, int n) {
    paged_store *p = (paged_store *)s;
    kv_seq_commit(p->pool, p->seq, tokens, n);
    s->n_pos = kv_seq_len(p->seq);
    s->total_tokens += n;
}

static void p_clear(kv_store *s) {
    paged_store *p = (paged_store *)s;
    kv_seq_free(p->pool, p->seq);
    p->seq = kv_seq_new(p->pool, NULL); /* a slot was just returned: cannot fail */
    CORE_ASSERT(p->seq);
    s->n_pos = 0;
}

static void p_destroy(kv_store *s) {
    paged_store *p = (paged_store *)s;
    kv_seq_free(p->pool, p->seq);
    if (p->own_pool) kv_pool_free(p->pool);
    free(p);
}

static int p_prefix(kv_store *s, const int32_t *tokens, int n) {
    paged_store *p = (paged_store *)s;
    CORE_ASSERT(s->n_pos == 0);
    s->n_pos = kv_prefix_match(p->pool, p->seq, tokens, n);
    return s->n_pos;
}

static kv_store *p_fork(kv_store *s, kvant_status *st);

static const kv_store_ops k_paged_ops = {p_reserve, p_row, p_view, p_commit, p_clear, p_destroy, p_prefix, p_fork};

static kv_store *wrap(kv_pool *pool, kv_seq *seq, bool own_pool, kvant_status *st) {
    paged_store *p = calloc(1, sizeof *p);
    if (!p) {
        kv_seq_free(pool, seq);
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    p->pool = pool;
    p->seq = seq;
    p->own_pool = own_pool;
    p->base = (kv_store){.ops = &k_paged_ops, .type = pool->type, .n_layers = pool->n_layers,
                         .kv_dim = (int)(pool->row_bytes / kern_type_get(pool->type)->type_size *
                                         (size_t)kern_type_get(pool->type)->block_size),
                         .row_bytes = pool->row_bytes, .head_stride = pool->head_stride, .n_pos = kv_seq_len(seq), .capacity = pool->max_ctx,
                         .max_chunk = pool->max_ctx};
    return &p->base;
}

kv_store *kv_paged_store_new(kv_pool *pool, bool own_pool, kvant_status *st) {
    kv_seq *seq = kv_seq_new(pool, st);
    if (!seq) return NULL;
    return wrap(pool, seq, own_pool, st);
}

static kv_store *p_fork(kv_store *s, kvant_status *st) {
    paged_store *p = (paged_store *)s;
    kv_seq *seq = kv_seq_fork(p->pool, p->seq, st);
    if (!seq) return NULL;
    return wrap(p->pool, seq, false, st);
}

kv_pool *kv_paged_store_pool(kv_store *s) { return s->ops == &k_paged_ops ? ((paged_store *)s)->pool : NULL; }
kv_seq *kv_paged_store_seq(kv_store *s) { return s->ops == &k_paged_ops ? ((paged_store *)s)->seq : NULL; }
