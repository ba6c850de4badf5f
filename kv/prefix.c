/* prefix.c - automatic prefix caching for the paged KV cache: full blocks
 * keyed by a chained hash in an open-addressing table, cached blocks in LRU
 * order, matching a new prompt against them.  Contracts in kv/paged.h.
 *
 * Hash: h_i = XXH3_64bits_withSeed(tokens of block i, seed = h_{i-1}),
 * h_{-1} = KV_HASH_ROOT.  xxHash (Debian libxxhash-dev) because it is
 * well kept (one widely used upstream, packaged everywhere), fast (a 64-byte
 * block of 16 tokens hashes in a few nanoseconds, negligible next to
 * computing its K/V), and its output is frozen since 0.8.0 (the same bytes
 * give the same hash on every machine and release, so hashes can be logged,
 * compared across processes or persisted; token ids are hashed as stored,
 * int32 little-endian on x86-64).  It is not a
 * cryptographic hash, and need not be: a hit is confirmed exactly (tokens
 * compared, parent block compared by identity), so a collision, even a
 * crafted one, costs at most a miss.
 *
 * Identity of a cached block = (hash, its B tokens, parent block id, the
 * parent's generation).  Invariant (kept by kv_seq_commit): every full block
 * in a table is registered and its parent is the table entry before it, so
 * "same tokens + same parent block" means "same whole prefix" by induction.
 * Eviction order keeps chains whole: every table holding a block also holds
 * its parent (one entry earlier), so ref(parent) >= ref(child), and a
 * sequence drops its blocks last first, so a parent always enters the LRU
 * list after its children and is evicted after them (kv_pool_check verifies
 * this).  A block's generation, bumped when it is evicted, makes a hit exact
 * even if that ever changed: a child of an evicted parent cannot match
 * through the block's next occupant.
 *
 * Table: linear probing, capacity the power of two >= 2 x n_blocks (load at
 * most 1/2), sized at start-up; deletion by backward shift, no tombstones.
 * Equal hashes may occupy several slots (a lookup checks each).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kv/paged.h"

#define KV_HASH_ROOT 0x6b76616e742d6b76ull /* "kvant-kv" */

kvant_code kv_prefix_init(kv_pool *p, kvant_status *st) {
    size_t nb = (size_t)p->n_blocks;
    uint32_t cap = 2;
    while (cap < 2 * (uint64_t)nb) cap *= 2; /* n_blocks <= INT32_MAX / 2: fits */
    p->prefix = true;
    p->hash = malloc(nb * sizeof *p->hash);
    p->parent = malloc(nb * sizeof *p->parent);
    p->gen = calloc(nb, sizeof *p->gen);
    p->parent_gen = malloc(nb * sizeof *p->parent_gen);
    p->registered = calloc(nb, sizeof *p->registered);
    p->btok = malloc(nb * (size_t)p->block_size * sizeof *p->btok);
    p->lru_prev = malloc(nb * sizeof *p->lru_prev);
    p->lru_next = malloc(nb * sizeof *p->lru_next);
    p->slots = malloc((size_t)cap * sizeof *p->slots);
    if (!p->hash || !p->parent || !p->gen || !p->parent_gen || !p->registered || !p->btok || !p->lru_prev ||
        !p->lru_next || !p->slots)
        return core_fail(st, KVANT_ERR_NOMEM, "paged KV: cannot allocate the prefix cache of %zu blocks", nb);
    memset(p->slots, 0xff, (size_t)cap * sizeof *p->slots);
    p->slot_mask = cap - 1;
    p->lru_head = p->lru_tail = -1;
    return KVANT_OK;
}

void kv_prefix_fini(kv_pool *p) {
    free(p->hash);
    free(p->parent);
    free(p->gen);
    free(p->parent_gen);
    free(p->registered);
    free(p->btok);
    free(p->lru_prev);
    free(p->lru_next);
    free(p->slots);
}

static uint64_t block_hash(uint64_t prev, const int32_t *tokens, int block_size) {
    return XXH3_64bits_withSeed(tokens, (size_t)block_size * sizeof *tokens, prev);
}

/* ---- the LRU list of cached blocks (refcount 0, registered) ------------------ */

void kv_prefix_lru_push(kv_pool *p, int32_t b) {
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_cached++;
}

void kv_prefix_lru_remove(kv_pool *p, int32_t b) {
    int32_t pr = p->lru_prev[b], nx = p->lru_next[b];
    if (pr >= 0) p->lru_next[pr] = nx;
    else p->lru_head = nx;
    if (nx >= 0) p->lru_prev[nx] = pr;
    else p->lru_tail = pr;
    p->n_cached--;
}

/* ---- the hash table ---------------------------------------------------------- */

/* The registered block with this identity, or -1.  parent -1: a first block. */
static int32_t table_find(const kv_pool *p, uint64_t h, int32_t parent, const int32_t *tokens) {
    size_t tb = (size_t)p->block_size * sizeof *tokens;
    for (uint32_t i = (uint32_t)h & p->slot_mask;; i = (i + 1) & p->slot_mask) {
        int32_t b = p->slots[i];
        if (b < 0) return -1;
        if (p->hash[b] == h && p->parent[b] == parent && (parent < 0 || p->parent_gen[b] == p->gen[parent]) &&
            memcmp(p->btok + (size_t)b * p->block_size, tokens, tb) == 0)
            return b;
    }
}

static void table_insert(kv_pool *p, int32_t b) {
    uint32_t i = (uint32_t)p->hash[b] & p->slot_mask;
    while (p->slots[i] >= 0) i = (i + 1) & p->slot_mask;
    p->slots[i] = b;
    p->registered[b] = 1;
    p->n_registered++;
}

/* Backward-shift deletion: every later entry of the probe run whose home
 * slot is not cyclically in (hole, j] moves into the hole. */
static void table_remove(kv_pool *p, int32_t b) {
    uint32_t i = (uint32_t)p->hash[b] & p->slot_mask;
    while (p->slots[i] != b) {
        CORE_ASSERT(p->slots[i] >= 0);
        i = (i + 1) & p->slot_mask;
    }
    for (uint32_t j = i;;) {
        j = (j + 1) & p->slot_mask;
        int32_t e = p->slots[j];
        if (e < 0) break;
        uint32_t home = (uint32_t)p->hash[e] & p->slot_mask;
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            p->slots[i] = e;
            i = j;
        }
    }
    p->slots[i] = -1;
    p->registered[b] = 0;
    p->gen[b]++;
    p->n_registered--;
}

int32_t kv_prefix_evict(kv_pool *p) {
    int32_t b = p->lru_head;
    CORE_ASSERT(b >= 0 && p->ref[b] == 0 && p->registered[b]);
    kv_prefix_lru_remove(p, b);
    table_remove(p, b);
    p->evictions++;
    return b;
}

/* ---- registering and matching -------------------------------------------------- */

void kv_prefix_commit(kv_pool *p, kv_seq *s) {
    const int B = p->block_size;
    for (int i = s->n_full; (i + 1) * B <= s->len; i++) {
        const int32_t *tok = s->tokens + (size_t)i * B;
        int32_t parent = i > 0 ? s->table[i - 1] : -1, own = s->table[i];
        uint64_t h = block_hash(i > 0 ? s->chain : KV_HASH_ROOT, tok, B);
        int32_t same = table_find(p, h, parent, tok);
        CORE_ASSERT(p->ref[own] == 1 && !p->registered[own]); /* just filled by s alone */
        if (same >= 0) {
            /* an identical block is cached already: share it, drop ours */
            kv_block_acquire(p, same);
            s->table[i] = same;
            kv_block_release(p, own);
        } else {
            p->hash[own] = h;
            p->parent[own] = parent;
            p->parent_gen[own] = parent >= 0 ? p->gen[parent] : 0;
            memcpy(p->btok + (size_t)own * B, tok, (size_t)B * sizeof *tok);
            table_insert(p, own);
        }
        s->chain = h;
        s->n_full = i + 1;
    }
}

int kv_prefix_match(kv_pool *p, kv_seq *s, const int32_t *tokens, int n) {
    CORE_ASSERT(s->live && s->len == 0 && s->n_blocks == 0 && n >= 0);
    p->query_tokens += n;
    if (!p->prefix || n <= 1) return 0;
    const int B = p->block_size;
    int max = (n - 1) / B, cap = p->max_ctx / B;
    if (max > cap) max = cap;
    uint64_t h = KV_HASH_ROOT;
    int m = 0;
    for (; m < max; m++) {
        const int32_t *tok = tokens + (size_t)m * B;
        uint64_t hm = block_hash(h, tok, B);
        int32_t b = table_find(p, hm, m > 0 ? s->table[m - 1] : -1, tok);
        if (b < 0) break;
        kv_block_acquire(p, b);
        s->table[m] = b;
        h = hm;
    }
    s->n_blocks = s->n_full = m;
    s->len = m * B;
    s->chain = h;
    memcpy(s->tokens, tokens, (size_t)s->len * sizeof *tokens);
    p->hit_tokens += s->len;
    return s->len;
}

/* ---- invariants ------------------------------------------------------------------- */

#define CHECK(cond, ...) do { if (!(cond)) { snprintf(why, n, __VA_ARGS__); return false; } } while (0)

/* Called by kv_pool_check after it marked free-stack blocks with scratch 1. */
bool kv_prefix_check(const kv_pool *p, char *why, size_t n) {
    int32_t cached = 0, prev = -1;
    for (int32_t b = p->lru_head; b >= 0; prev = b, b = p->lru_next[b]) {
        CHECK(++cached <= p->n_blocks, "LRU list has a cycle");
        CHECK(p->lru_prev[b] == prev, "LRU block %d: prev %d, expected %d", b, p->lru_prev[b], prev);
        CHECK(p->ref[b] == 0 && p->registered[b] && p->scratch[b] == 0, "LRU block %d: ref %d, registered %d",
              b, p->ref[b], p->registered[b]);
        p->scratch[b] = 2;
    }
    CHECK(prev == p->lru_tail && cached == p->n_cached, "LRU: %d listed, %d counted", cached, p->n_cached);
    int32_t reg = 0;
    for (int32_t b = 0; b < p->n_blocks; b++) {
        CHECK(p->ref[b] > 0 || p->scratch[b] != 0, "block %d: refcount 0 but neither free nor cached", b);
        if (!p->registered[b]) continue;
        reg++;
        CHECK(table_find(p, p->hash[b], p->parent[b], p->btok + (size_t)b * p->block_size) == b,
              "registered block %d is not found by its identity", b);
        /* leaves are evicted first: a cached chain never loses its head */
        int32_t pa = p->parent[b];
        CHECK(pa < 0 || (p->registered[pa] && p->gen[pa] == p->parent_gen[b]),
              "registered block %d outlived its parent %d", b, pa);
    }
    int32_t occupied = 0;
    for (uint32_t i = 0; i <= p->slot_mask; i++) occupied += p->slots[i] >= 0;
    CHECK(reg == p->n_registered && occupied == reg, "%d registered, %d counted, %d slots", reg,
          p->n_registered, occupied);
    for (int i = 0; i < p->max_seqs; i++) {
        const kv_seq *s = &p->seqs[i];
        if (!s->live) continue;
        for (int j = s->n_released; j < s->n_full; j++) { /* released entries are -1: their blocks left */
            int32_t b = s->table[j];
            CHECK(p->registered[b], "seq %d: full block %d (#%d) is not registered", i, b, j);
            CHECK(j == s->n_released || p->parent[b] == (j > 0 ? s->table[j - 1] : -1),
                  "seq %d: block %d (#%d) has parent %d", i, b, j, p->parent[b]);
        }
    }
    return true;
}
