/* store_paged.c - a sequence of a paged pool (kv/paged.h) behind the
 * kv_store interface the forward pass uses.
 *
 * Sliding-window models (kv_paged_store_new_swa): the local layers' K/V
 * live in a second pool, as a second sequence, and after every commit that
 * sequence gives back the blocks that fell out of the window, so a local
 * layer holds about window positions whatever the context; the global
 * layers keep every position in the first pool.  Layer l's K/V are layer
 * map[l] of its pool.  A prefix match counts only what both pools hold. */
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "kv/kv.h"
#include "kv/paged.h"

typedef struct {
    kv_store base;
    kv_pool *pool;
    kv_seq *seq;
    bool own_pool;
    /* sliding-window layers (lpool NULL: none) */
    kv_pool *lpool;
    kv_seq *lseq;
    int window;
    int16_t *map;             /* [n_layers]: index in its pool, + 0x4000 for the local pool */
} paged_store;

#define LOCAL 0x4000
static kv_pool *pool_of(const paged_store *p, int layer, kv_seq **seq, int *idx) {
    if (p->lpool && (p->map[layer] & LOCAL)) {
        *seq = p->lseq, *idx = p->map[layer] & ~LOCAL;
        return p->lpool;
    }
    *seq = p->seq, *idx = p->lpool ? p->map[layer] : layer;
    return p->pool;
}

/* the local sequence keeps what the next query's window needs: n_pos - window + 1 on */
static void trim(paged_store *p) {
    const int keep = p->base.n_pos - p->window + 1;
    if (p->lpool && keep > 0) kv_seq_release_before(p->lpool, p->lseq, keep);
}

/* both pools or neither: a local reserve that fails leaves the global one's
 * room, which the next reserve reuses (kv.h: nothing of the cache changes) */
static kvant_code p_reserve(kv_store *s, int n, kvant_status *st) {
    paged_store *p = (paged_store *)s;
    kvant_code rc = kv_seq_reserve(p->pool, p->seq, n, st);
    if (!rc && p->lpool) rc = kv_seq_reserve(p->lpool, p->lseq, n, st);
    return rc;
}

static size_t p_row(kv_store *s, int layer, int pos, uint8_t **k, uint8_t **v) {
    paged_store *p = (paged_store *)s;
    kv_seq *q;
    int idx;
    kv_pool *pool = pool_of(p, layer, &q, &idx);
    kv_pool_row(pool, q, idx, pos, k, v);
    return pool->head_stride;
}

static void p_view(kv_store *s, int layer, int n_pos, kern_kv_view *out) {
    paged_store *p = (paged_store *)s;
    kv_seq *q;
    int idx;
    kv_pool *pool = pool_of(p, layer, &q, &idx);
    kv_pool_view(pool, q, idx, out);
    out->n_pos = n_pos;
}

static void p_commit(kv_store *s, const int32_t *tokens, int n) {
    paged_store *p = (paged_store *)s;
    kv_seq_commit(p->pool, p->seq, tokens, n);
    if (p->lpool) kv_seq_commit(p->lpool, p->lseq, tokens, n);
    s->n_pos = kv_seq_len(p->seq);
    s->total_tokens += n;
    trim(p);
}

static void p_clear(kv_store *s) {
    paged_store *p = (paged_store *)s;
    kv_seq_free(p->pool, p->seq);
    p->seq = kv_seq_new(p->pool, NULL); /* a slot was just returned: cannot fail */
    CORE_ASSERT(p->seq);
    if (p->lpool) {
        kv_seq_free(p->lpool, p->lseq);
        p->lseq = kv_seq_new(p->lpool, NULL);
        CORE_ASSERT(p->lseq);
    }
    s->n_pos = 0;
}

static void p_destroy(kv_store *s) {
    paged_store *p = (paged_store *)s;
    kv_seq_free(p->pool, p->seq);
    if (p->lpool) kv_seq_free(p->lpool, p->lseq);
    if (p->own_pool) kv_pool_free(p->pool), kv_pool_free(p->lpool);
    free(p->map);
    free(p);
}

static int p_prefix(kv_store *s, const int32_t *tokens, int n) {
    paged_store *p = (paged_store *)s;
    CORE_ASSERT(s->n_pos == 0);
    int got = kv_prefix_match(p->pool, p->seq, tokens, n);
    if (p->lpool && got > 0) {
        /* the local layers' blocks of the same prefix (a match leaves one token to compute: ask for got + 1) */
        const int local = kv_prefix_match(p->lpool, p->lseq, tokens, got + 1);
        if (local < got) kv_seq_truncate(p->pool, p->seq, local), got = local;
    }
    s->n_pos = got;
    trim(p);
    return s->n_pos;
}

static kv_store *p_fork(kv_store *s, kvant_status *st);

/* whole blocks only (a registered full block must not be rewritten in
 * place); the local pool cannot take back blocks it already released */
static int p_truncate(kv_store *s, int len) {
    paged_store *p = (paged_store *)s;
    const int B = p->pool->block_size;
    if (len >= s->n_pos) return s->n_pos;
    len = len / B * B;
    if (p->lpool && (p->lpool->block_size != B || len / B < kv_seq_n_released(p->lseq))) return -1;
    kv_seq_truncate(p->pool, p->seq, len);
    if (p->lpool) kv_seq_truncate(p->lpool, p->lseq, len);
    return s->n_pos = len;
}

/* the global layers hold every position, the local ones what is left of their blocks */
static size_t p_bytes(const kv_store *s) {
    const paged_store *p = (const paged_store *)s;
    if (!p->lpool) return kv_bytes_per_token(s) * (size_t)s->n_pos;
    int held = s->n_pos - kv_seq_n_released(p->lseq) * p->lpool->block_size;
    if (held < 0) held = 0;
    return 2 * s->row_bytes * ((size_t)p->pool->n_layers * (size_t)s->n_pos + (size_t)p->lpool->n_layers * (size_t)held);
}

static const kv_store_ops k_paged_ops = {p_reserve, p_row, p_view, p_commit, p_clear, p_destroy, p_prefix, p_fork,
                                         p_bytes, p_truncate};

static kv_store *wrap(kv_pool *pool, kv_seq *seq, bool own_pool, const paged_store *swa, kvant_status *st) {
    paged_store *p = calloc(1, sizeof *p);
    const int n_layers = swa ? swa->base.n_layers : pool->n_layers;
    int16_t *map = swa ? malloc((size_t)n_layers * sizeof *map) : NULL;
    if (!p || (swa && !map)) {
        kv_seq_free(pool, seq);
        free(p);
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    p->pool = pool;
    p->seq = seq;
    p->own_pool = own_pool;
    if (swa) {
        p->lpool = swa->lpool, p->lseq = swa->lseq, p->window = swa->window;
        memcpy(map, swa->map, (size_t)n_layers * sizeof *map);
        p->map = map;
    }
    p->base = (kv_store){.ops = &k_paged_ops, .type = pool->type, .n_layers = n_layers,
                         .kv_dim = (int)(pool->row_bytes / kern_type_get(pool->type)->type_size *
                                         (size_t)kern_type_get(pool->type)->block_size),
                         .row_bytes = pool->row_bytes, .n_pos = kv_seq_len(seq), .capacity = pool->max_ctx,
                         .max_chunk = pool->max_ctx};
    if (swa) p->base.max_chunk = swa->base.max_chunk;
    return &p->base;
}

kv_store *kv_paged_store_new(kv_pool *pool, bool own_pool, kvant_status *st) {
    kv_seq *seq = kv_seq_new(pool, st);
    if (!seq) return NULL;
    return wrap(pool, seq, own_pool, NULL, st);
}

kv_store *kv_paged_store_new_swa(kv_pool *global, kv_pool *local, const bool *is_local, int n_layers, int window,
                                 int max_chunk, bool own_pools, kvant_status *st) {
    CORE_ASSERT(window > local->block_size && global->type == local->type && global->row_bytes == local->row_bytes);
    paged_store tmpl = {.lpool = local, .window = window};
    int16_t map[1024];
    int ng = 0, nl = 0;
    CORE_ASSERT(n_layers <= 1024);
    for (int l = 0; l < n_layers; l++) map[l] = is_local[l] ? (int16_t)(LOCAL | nl++) : (int16_t)ng++;
    CORE_ASSERT(ng == global->n_layers && nl == local->n_layers);
    tmpl.map = map;
    tmpl.base.n_layers = n_layers;
    tmpl.base.max_chunk = max_chunk;
    if (!(tmpl.lseq = kv_seq_new(local, st))) return NULL;
    kv_seq *seq = kv_seq_new(global, st);
    if (!seq) {
        kv_seq_free(local, tmpl.lseq);
        return NULL;
    }
    kv_store *s = wrap(global, seq, own_pools, &tmpl, st);
    if (!s) kv_seq_free(local, tmpl.lseq);
    return s;
}

static kv_store *p_fork(kv_store *s, kvant_status *st) {
    paged_store *p = (paged_store *)s;
    paged_store tmpl = *p;
    if (p->lpool && !(tmpl.lseq = kv_seq_fork(p->lpool, p->lseq, st))) return NULL;
    kv_seq *seq = kv_seq_fork(p->pool, p->seq, st);
    if (!seq) {
        if (p->lpool) kv_seq_free(p->lpool, tmpl.lseq);
        return NULL;
    }
    kv_store *f = wrap(p->pool, seq, false, p->lpool ? &tmpl : NULL, st);
    if (!f && p->lpool) kv_seq_free(p->lpool, tmpl.lseq);
    return f;
}

kv_pool *kv_paged_store_pool(kv_store *s) { return s->ops == &k_paged_ops ? ((paged_store *)s)->pool : NULL; }
kv_seq *kv_paged_store_seq(kv_store *s) { return s->ops == &k_paged_ops ? ((paged_store *)s)->seq : NULL; }
kv_pool *kv_paged_store_local_pool(kv_store *s) { return s->ops == &k_paged_ops ? ((paged_store *)s)->lpool : NULL; }
kv_seq *kv_paged_store_local_seq(kv_store *s) { return s->ops == &k_paged_ops ? ((paged_store *)s)->lseq : NULL; }
