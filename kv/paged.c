/* paged.c - the block pool of the paged KV cache: sizing and the one
 * allocation, block references, sequences (tables, reserve with
 * copy-on-write, commit, fork), views for the attention kernels, statistics
 * and the invariant checker.  The prefix cache lives in prefix.c.
 * Contracts are in kv/paged.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "kv/paged.h"

/* ---- sizing ---------------------------------------------------------------- */

/* Fills row_bytes, the layout sizes (paged.h) and n_blocks from the params,
 * checking every product in 64 bits. */
static kvant_code pool_size(kv_pool *p, const kv_pool_params *q, kvant_status *st) {
    if (q->n_layers <= 0 || q->n_kv_heads <= 0 || q->head_dim <= 0 || q->max_ctx <= 0 || q->block_size < 0 ||
        q->max_seqs < 0 || q->n_blocks < 0)
        return core_fail(st, KVANT_ERR_ARG, "paged KV: layers, heads, head dim and max_ctx must be positive");
    if (q->type != KT_F32 && q->type != KT_F16 && q->type != KT_Q8_0)
        return core_fail(st, KVANT_ERR_ARG, "paged KV: cache type %s is not F32, F16 or Q8_0",
                         kern_type_name(q->type));
    uint64_t elems;
    if (!core_mul_ok((uint64_t)q->n_kv_heads, (uint64_t)q->head_dim, &elems) || elems > INT32_MAX)
        return core_fail(st, KVANT_ERR_ARG, "paged KV: row of %d x %d elements is too large", q->n_kv_heads,
                         q->head_dim);
    size_t row = kern_row_bytes(q->type, (int64_t)elems);
    if (row == 0)
        return core_fail(st, KVANT_ERR_ARG, "paged KV: a %s row of %llu elements is not a whole number of blocks",
                         kern_type_name(q->type), (unsigned long long)elems);
    p->block_size = q->block_size ? q->block_size : KV_BLOCK_SIZE_DEFAULT;
    p->max_seqs = q->max_seqs ? q->max_seqs : KV_MAX_SEQS_DEFAULT;
    p->n_layers = q->n_layers;
    p->type = q->type;
    p->max_ctx = q->max_ctx;
    p->max_blocks = (q->max_ctx + p->block_size - 1) / p->block_size;
    p->row_bytes = row;
    const size_t hb = kern_row_bytes(q->type, q->head_dim); /* 0: a Q8_0 head splits a block */
    p->head_bytes = q->row_major || hb == 0 ? 0 : hb;
    p->unit_bytes = p->head_bytes ? p->head_bytes : row;
    p->n_units = (int)(row / p->unit_bytes);

    uint64_t run, units, block;
    if (!core_mul_ok((uint64_t)p->unit_bytes, (uint64_t)p->block_size, &run) || run > ((uint64_t)1 << 36))
        return core_fail(st, KVANT_ERR_NOMEM, "paged KV: a block of %d tokens is too large", p->block_size);
    if (!core_mul_ok(run, 2 * (uint64_t)p->n_units, &units) || !core_mul_ok(units, (uint64_t)q->n_layers, &block) ||
        block > ((uint64_t)1 << 40))
        return core_fail(st, KVANT_ERR_NOMEM, "paged KV: a block of %d tokens is too large", p->block_size);
    p->run_bytes = (size_t)run;
    p->block_bytes = (size_t)block;

    uint64_t nb = q->n_blocks > 0 ? (uint64_t)q->n_blocks : q->budget_bytes / block;
    if (nb == 0)
        return core_fail(st, KVANT_ERR_ARG, "paged KV: a budget of %llu bytes holds no block of %llu bytes",
                         (unsigned long long)q->budget_bytes, (unsigned long long)block);
    uint64_t total;
    if (nb > INT32_MAX / 2 || !core_mul_ok(nb, block, &total) || total > ((uint64_t)1 << 46))
        return core_fail(st, KVANT_ERR_NOMEM, "paged KV: %llu blocks of %llu bytes is too large",
                         (unsigned long long)nb, (unsigned long long)block);
    p->n_blocks = (int32_t)nb;
    p->unit_stride = (size_t)nb * p->run_bytes; /* products of factors of total: no overflow */
    p->kv_bytes = (size_t)p->n_units * p->unit_stride;
    p->layer_bytes = 2 * p->kv_bytes;
    p->head_stride = p->head_bytes ? p->unit_stride : 0;
    return KVANT_OK;
}

kv_pool *kv_pool_new(const kv_pool_params *q, kvant_status *st) {
    kv_pool *p = calloc(1, sizeof *p);
    if (!p) {
        core_fail(st, KVANT_ERR_NOMEM, "paged KV: out of memory");
        return NULL;
    }
    if (pool_size(p, q, st) != KVANT_OK) {
        free(p);
        return NULL;
    }
    size_t nb = (size_t)p->n_blocks;
    /* per sequence: a table of max_blocks ids and max_ctx tokens */
    size_t per_seq = (size_t)p->max_blocks + (size_t)p->max_ctx;
    /* on 2 MiB pages where the kernel gives them: decode attention at
     * depth jumps between blocks every 2 KB (a head's run), a 4 KiB-page
     * TLB miss almost every run (stories110M at depth 8192: 1003-1045 us
     * per layer against 1068-1100 on 4 KiB pages, kvant-kernels --attn,
     * Zen 4) */
    p->data = core_alloc_huge(nb * p->block_bytes);
    p->ref = calloc(nb, sizeof *p->ref);
    p->free_stack = malloc(nb * sizeof *p->free_stack);
    p->scratch = malloc(nb * sizeof *p->scratch);
    p->seqs = calloc((size_t)p->max_seqs, sizeof *p->seqs);
    p->free_slots = malloc((size_t)p->max_seqs * sizeof *p->free_slots);
    p->seq_mem = malloc((size_t)p->max_seqs * per_seq * sizeof *p->seq_mem);
    if (!p->data || !p->ref || !p->free_stack || !p->scratch || !p->seqs || !p->free_slots || !p->seq_mem) {
        core_fail(st, KVANT_ERR_NOMEM, "paged KV: cannot allocate %zu blocks of %zu bytes", nb, p->block_bytes);
        kv_pool_free(p);
        return NULL;
    }
    /* block 0 on top of the stack: a fresh pool hands out 0, 1, 2, ... */
    for (size_t i = 0; i < nb; i++) p->free_stack[i] = (int32_t)(nb - 1 - i);
    p->n_free = p->n_blocks;
    for (int i = 0; i < p->max_seqs; i++) {
        kv_seq *s = &p->seqs[i];
        s->slot = i;
        s->table = p->seq_mem + (size_t)i * per_seq;
        s->tokens = s->table + p->max_blocks;
        p->free_slots[i] = p->max_seqs - 1 - i;
    }
    p->n_free_slots = p->max_seqs;
    p->lru_head = p->lru_tail = -1;
    if (q->prefix_cache && kv_prefix_init(p, st) != KVANT_OK) {
        kv_pool_free(p);
        return NULL;
    }
    core_ok(st);
    return p;
}

void kv_pool_free(kv_pool *p) {
    if (!p) return;
    kv_prefix_fini(p);
    free(p->data);
    free(p->ref);
    free(p->free_stack);
    free(p->scratch);
    free(p->seqs);
    free(p->free_slots);
    free(p->seq_mem);
    free(p);
}

/* ---- block references ---------------------------------------------------------- */

/* One block with refcount 1: a free one if any, else the oldest cached one.
 * The caller has checked that one is available. */
static int32_t block_alloc(kv_pool *p) {
    int32_t b = p->n_free > 0 ? p->free_stack[--p->n_free] : kv_prefix_evict(p);
    CORE_ASSERT(b >= 0 && p->ref[b] == 0);
    p->ref[b] = 1;
    return b;
}

void kv_block_acquire(kv_pool *p, int32_t b) {
    CORE_ASSERT(b >= 0 && b < p->n_blocks);
    if (p->ref[b] == 0) {
        CORE_ASSERT(p->prefix && p->registered[b]); /* only a cached block can be revived */
        kv_prefix_lru_remove(p, b);
    }
    p->ref[b]++;
}

void kv_block_release(kv_pool *p, int32_t b) {
    CORE_ASSERT(b >= 0 && b < p->n_blocks && p->ref[b] > 0);
    if (--p->ref[b] > 0) return;
    if (p->prefix && p->registered[b]) kv_prefix_lru_push(p, b);
    else p->free_stack[p->n_free++] = b;
}

int64_t kv_pool_n_available(const kv_pool *p) { return (int64_t)p->n_free + p->n_cached; }

int kv_pool_block_ref(const kv_pool *p, int32_t b) {
    CORE_ASSERT(b >= 0 && b < p->n_blocks);
    return p->ref[b];
}

bool kv_pool_block_registered(const kv_pool *p, int32_t b) {
    CORE_ASSERT(b >= 0 && b < p->n_blocks);
    return p->prefix && p->registered[b];
}

/* ---- sequences ------------------------------------------------------------------ */

static kv_seq *seq_take(kv_pool *p, kvant_status *st) {
    if (p->n_free_slots == 0) {
        core_fail(st, KVANT_ERR_FULL, "paged KV: all %d sequence slots are in use", p->max_seqs);
        return NULL;
    }
    kv_seq *s = &p->seqs[p->free_slots[--p->n_free_slots]];
    CORE_ASSERT(!s->live);
    s->live = true;
    s->len = s->n_blocks = s->n_full = s->n_released = 0;
    s->chain = 0;
    core_ok(st);
    return s;
}

kv_seq *kv_seq_new(kv_pool *p, kvant_status *st) { return seq_take(p, st); }

void kv_seq_free(kv_pool *p, kv_seq *s) {
    if (!s) return;
    CORE_ASSERT(s->live && s == &p->seqs[s->slot]);
    for (int i = s->n_blocks - 1; i >= s->n_released; i--) kv_block_release(p, s->table[i]);
    s->live = false;
    s->len = s->n_blocks = s->n_full = s->n_released = 0;
    p->free_slots[p->n_free_slots++] = s->slot;
}

kv_seq *kv_seq_fork(kv_pool *p, const kv_seq *src, kvant_status *st) {
    CORE_ASSERT(src->live);
    kv_seq *c = seq_take(p, st);
    if (!c) return NULL;
    int nb = (src->len + p->block_size - 1) / p->block_size;
    for (int i = 0; i < nb; i++) {
        c->table[i] = src->table[i];
        if (i >= src->n_released) kv_block_acquire(p, c->table[i]);
    }
    c->n_blocks = nb;
    c->n_released = src->n_released;
    c->len = src->len;
    memcpy(c->tokens, src->tokens, (size_t)src->len * sizeof *c->tokens);
    c->n_full = src->n_full;
    c->chain = src->chain;
    return c;
}

/* The block holding position len when it is partially filled and shared:
 * the one a write would have to copy first.  -1 if none. */
static int shared_partial(const kv_pool *p, const kv_seq *s) {
    if (s->len % p->block_size == 0) return -1;
    int i = s->len / p->block_size;
    return p->ref[s->table[i]] > 1 ? i : -1;
}

int kv_seq_blocks_needed(const kv_pool *p, const kv_seq *s, int n_new) {
    if (n_new <= 0) return 0;
    int want = (int)(((int64_t)s->len + n_new + p->block_size - 1) / p->block_size);
    int more = want > s->n_blocks ? want - s->n_blocks : 0;
    return more + (shared_partial(p, s) >= 0 ? 1 : 0);
}

/* Copy-on-write of table entry i: the filled rows (0 .. len % B - 1) of
 * every layer (of every head, when head-major) move to a block of s's own;
 * the old block keeps its other readers. */
static void cow_block(kv_pool *p, kv_seq *s, int i) {
    int32_t old = s->table[i], nb = block_alloc(p);
    const size_t filled = (size_t)(s->len - i * p->block_size);
    /* per layer, K then V, per unit (head, or whole row): the block's run */
    const size_t bytes = filled * p->unit_bytes;
    for (size_t off = 0; off < (size_t)p->n_layers * p->layer_bytes; off += p->unit_stride)
        memcpy(p->data + off + (size_t)nb * p->run_bytes, p->data + off + (size_t)old * p->run_bytes, bytes);
    s->table[i] = nb;
    kv_block_release(p, old);
    p->cow_copies++;
}

kvant_code kv_seq_reserve(kv_pool *p, kv_seq *s, int n_new, kvant_status *st) {
    CORE_ASSERT(s->live);
    if (n_new < 0) return core_fail(st, KVANT_ERR_ARG, "paged KV: reserve of %d tokens", n_new);
    if ((int64_t)s->len + n_new > p->max_ctx)
        return core_fail(st, KVANT_ERR_FULL, "paged KV: %d + %d tokens exceed the context of %d", s->len, n_new,
                         p->max_ctx);
    int need = kv_seq_blocks_needed(p, s, n_new);
    if (need > kv_pool_n_available(p))
        return core_fail(st, KVANT_ERR_FULL, "paged KV: %d more blocks needed, %lld available of %d", need,
                         (long long)kv_pool_n_available(p), p->n_blocks);
    /* from here on nothing can fail */
    int cow = shared_partial(p, s);
    if (n_new > 0 && cow >= 0) cow_block(p, s, cow);
    int64_t want = (int64_t)s->len + n_new;
    while ((int64_t)s->n_blocks * p->block_size < want) s->table[s->n_blocks++] = block_alloc(p);
    core_ok(st);
    return KVANT_OK;
}

void kv_seq_commit(kv_pool *p, kv_seq *s, const int32_t *tokens, int n) {
    CORE_ASSERT(s->live && n >= 0 && s->len + n <= kv_seq_capacity(p, s));
    CORE_ASSERT(tokens || !p->prefix || n == 0);
    if (n == 0) return;
    /* the rows just written must have been in blocks of s's own */
    for (int i = s->len / p->block_size; i <= (s->len + n - 1) / p->block_size; i++)
        CORE_ASSERT(p->ref[s->table[i]] == 1);
    if (tokens) memcpy(s->tokens + s->len, tokens, (size_t)n * sizeof *tokens);
    else memset(s->tokens + s->len, 0xff, (size_t)n * sizeof *tokens);
    s->len += n;
    if (p->prefix) kv_prefix_commit(p, s);
}

void kv_seq_release_before(kv_pool *p, kv_seq *s, int pos) {
    CORE_ASSERT(s->live && pos >= 0 && pos <= s->len);
    const int nb = pos / p->block_size;
    for (int i = s->n_released; i < nb; i++) {
        kv_block_release(p, s->table[i]);
        s->table[i] = -1;
    }
    if (nb > s->n_released) s->n_released = nb;
}

void kv_seq_truncate(kv_pool *p, kv_seq *s, int len) {
    const int B = p->block_size, m = len / B;
    CORE_ASSERT(s->live && len % B == 0 && len <= s->len && m >= s->n_released);
    for (int i = s->n_blocks - 1; i >= m; i--) kv_block_release(p, s->table[i]);
    s->n_blocks = m;
    s->len = len;
    if (s->n_full > m) {
        s->n_full = m;
        s->chain = m > 0 ? p->hash[s->table[m - 1]] : 0; /* full blocks are registered: their hash is the chain */
    }
}

int kv_seq_n_released(const kv_seq *s) { return s->n_released; }

int kv_seq_len(const kv_seq *s) { return s->len; }
int kv_seq_capacity(const kv_pool *p, const kv_seq *s) { return s->n_blocks * p->block_size; }
int kv_seq_n_blocks(const kv_seq *s) { return s->n_blocks; }
const int32_t *kv_seq_table(const kv_seq *s) { return s->table; }
const int32_t *kv_seq_tokens(const kv_seq *s) { return s->tokens; }

/* ---- views ------------------------------------------------------------------------ */

void kv_pool_view(const kv_pool *p, const kv_seq *s, int layer, kern_kv_view *out) {
    CORE_ASSERT(s->live && layer >= 0 && layer < p->n_layers);
    const uint8_t *base = p->data + (size_t)layer * p->layer_bytes;
    *out = (kern_kv_view){
        .k_base = base,
        .v_base = base + p->kv_bytes,
        .block_stride = p->run_bytes,
        .block_table = s->table,
        .block_size = p->block_size,
        .type = p->type,
        .row_bytes = p->unit_bytes,
        .n_pos = s->len,
        .rope_k = NULL,
        .head_stride = p->head_stride,
    };
}

void kv_pool_row(const kv_pool *p, const kv_seq *s, int layer, int pos, uint8_t **k_row, uint8_t **v_row) {
    CORE_ASSERT(s->live && layer >= 0 && layer < p->n_layers);
    CORE_ASSERT(pos >= s->len && pos < kv_seq_capacity(p, s));
    int32_t b = s->table[pos / p->block_size];
    CORE_ASSERT(p->ref[b] == 1);
    uint8_t *k = p->data + (size_t)layer * p->layer_bytes + (size_t)b * p->run_bytes +
                 (size_t)(pos % p->block_size) * p->unit_bytes;
    *k_row = k;
    *v_row = k + p->kv_bytes;
}

/* ---- statistics and checks ----------------------------------------------------------- */

void kv_pool_stats_get(kv_pool *p, kv_pool_stats *o) {
    *o = (kv_pool_stats){0};
    o->block_size = p->block_size;
    o->blocks_total = p->n_blocks;
    o->blocks_free = p->n_free;
    o->blocks_cached = p->n_cached;
    o->blocks_used = (int64_t)p->n_blocks - p->n_free - p->n_cached;
    o->bytes_per_block = p->block_bytes;
    o->bytes_total = (size_t)p->n_blocks * p->block_bytes;
    o->bytes_used = (size_t)o->blocks_used * p->block_bytes;
    /* scratch[b]: the most rows any reader has filled in block b */
    memset(p->scratch, 0, (size_t)p->n_blocks * sizeof *p->scratch);
    for (int i = 0; i < p->max_seqs; i++) {
        const kv_seq *s = &p->seqs[i];
        if (!s->live) continue;
        o->n_seqs++;
        o->tokens += s->len;
        for (int j = s->n_released; j < s->n_blocks; j++) {
            int f = s->len - j * p->block_size;
            f = f < 0 ? 0 : f > p->block_size ? p->block_size : f;
            if (f > p->scratch[s->table[j]]) p->scratch[s->table[j]] = f;
        }
    }
    for (int32_t b = 0; b < p->n_blocks; b++)
        if (p->ref[b] > 0) o->frag_tokens += p->block_size - p->scratch[b];
    o->prefix_query_tokens = p->query_tokens;
    o->prefix_hit_tokens = p->hit_tokens;
    o->cow_copies = p->cow_copies;
    o->evictions = p->evictions;
}

#define CHECK(cond, ...) do { if (!(cond)) { snprintf(why, n, __VA_ARGS__); return false; } } while (0)

bool kv_pool_check(kv_pool *p, char *why, size_t n) {
    /* refcounts recounted from the live tables */
    memset(p->scratch, 0, (size_t)p->n_blocks * sizeof *p->scratch);
    int live = 0;
    for (int i = 0; i < p->max_seqs; i++) {
        const kv_seq *s = &p->seqs[i];
        if (!s->live) continue;
        live++;
        CHECK(s->len >= 0 && s->len <= s->n_blocks * p->block_size && s->n_blocks <= p->max_blocks,
              "seq %d: len %d, %d blocks", i, s->len, s->n_blocks);
        CHECK(s->n_full <= s->len / p->block_size, "seq %d: %d full blocks at len %d", i, s->n_full, s->len);
        CHECK(s->n_released >= 0 && s->n_released <= s->n_blocks, "seq %d: %d released of %d", i, s->n_released,
              s->n_blocks);
        for (int j = 0; j < s->n_released; j++) CHECK(s->table[j] == -1, "seq %d: released entry %d is %d", i, j, s->table[j]);
        for (int j = s->n_released; j < s->n_blocks; j++) {
            CHECK(s->table[j] >= 0 && s->table[j] < p->n_blocks, "seq %d: block id %d", i, s->table[j]);
            p->scratch[s->table[j]]++;
        }
        /* blocks past the one holding position len are s's alone */
        for (int j = (s->len + p->block_size - 1) / p->block_size; j < s->n_blocks; j++)
            CHECK(p->ref[s->table[j]] == 1, "seq %d: reserved block %d is shared", i, s->table[j]);
    }
    CHECK(live + p->n_free_slots == p->max_seqs, "%d live sequences + %d free slots", live, p->n_free_slots);
    int64_t used = 0;
    for (int32_t b = 0; b < p->n_blocks; b++) {
        CHECK(p->ref[b] == p->scratch[b], "block %d: refcount %d, in %d tables", b, p->ref[b], p->scratch[b]);
        used += p->ref[b] > 0;
    }
    /* every block with refcount 0 is on the free stack or the LRU list, once */
    memset(p->scratch, 0, (size_t)p->n_blocks * sizeof *p->scratch);
    for (int32_t i = 0; i < p->n_free; i++) {
        int32_t b = p->free_stack[i];
        CHECK(b >= 0 && b < p->n_blocks && p->ref[b] == 0 && p->scratch[b] == 0, "free block %d", b);
        CHECK(!p->prefix || !p->registered[b], "free block %d is registered", b);
        p->scratch[b] = 1;
    }
    CHECK(used + p->n_free + p->n_cached == p->n_blocks, "%lld used + %d free + %d cached != %d",
          (long long)used, p->n_free, p->n_cached, p->n_blocks);
    return !p->prefix || kv_prefix_check(p, why, n);
}
