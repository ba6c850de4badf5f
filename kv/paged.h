/* kv/paged.h - the paged KV cache (PagedAttention): one pool of fixed-size
 * blocks shared by every sequence, per-sequence block tables, reference
 * counts, fork with copy-on-write, and automatic prefix caching.
 *
 * Letters: L layers, Hkv KV heads, D head dim, B tokens per block (block_size).
 *
 * Memory.  kv_pool_new makes ONE allocation of n_blocks * block_bytes bytes
 * and every bookkeeping array; nothing is allocated afterwards (not per token,
 * not per step, not per sequence: sequence slots, their block tables and token
 * arrays are preallocated for max_seqs sequences of up to max_ctx tokens).
 * A position's K (or V) is Hkv*D elements of the cache type (KT_F32, KT_F16
 * or KT_Q8_0), row_bytes = kern_row_bytes(type, Hkv*D) bytes in all, made of
 * units that are either
 *   heads       (head-major, the default when a head is whole blocks of the
 *               type: F32, F16, Q8_0 with D % 32 == 0): unit_bytes = a
 *               head's D elements, Hkv units;
 *   whole rows  (row-major: kv_pool_params.row_major, or Q8_0 heads that
 *               split a block): unit_bytes = row_bytes, 1 unit.
 * The pool is laid out unit by unit, and each unit block by block:
 *
 *     data:  [layer][K, V][unit][block b][B positions][unit_bytes]
 *
 * so one unit of block b is a run of B * unit_bytes bytes (run_bytes; a
 * block's share of the pool is exactly 2 L B row_bytes), and a head's
 * runs of consecutive block ids lie back to back.  Attention reads one
 * head at a time: a sequence whose blocks were handed out in order (a
 * fresh pool gives 0, 1, 2, ...) is one contiguous stream per head and
 * layer, which the hardware prefetchers follow, where a layout by block
 * put each 2 KB run of a head 2 L B row_bytes away from the next (stories110M
 * at depth 8192: 590 KB).  Layer l of the pool is an ordinary kern_kv_view
 * (kernels/attn.h) with k_base = data + l * layer_bytes, v_base = k_base +
 * kv_bytes, block_stride = run_bytes, row_bytes = unit_bytes and
 * head_stride = unit_stride (head-major) or 0.
 *
 * Block states (every block is in exactly one):
 *   used    refcount > 0: in the tables of `refcount` sequences;
 *   cached  refcount 0 but registered in the prefix cache (its K/V are still
 *           valid and can be reused); kept in LRU order, evicted oldest first
 *           and only when no free block is left;
 *   free    refcount 0, content meaningless.
 * used + cached + free == total, always.
 *
 * The life of a step, for one sequence (the forward pass does this):
 *   kv_seq_reserve(pool, s, T)      room for T more tokens (may copy-on-write
 *                                   the last partial block; KVANT_ERR_FULL if
 *                                   the pool or max_ctx is exhausted: then
 *                                   nothing changed);
 *   for each layer: kv_pool_row(..., pos = len .. len+T-1, ...) -> write K, V;
 *                   kv_pool_view(...) and set view.n_pos = len + T, attend;
 *   kv_seq_commit(pool, s, tokens, T)  the length advances; blocks that
 *                                   became full join the prefix cache.
 * A new request first calls kv_prefix_match on its empty sequence and then
 * computes only the prompt tokens after the returned count.
 *
 * Threads: a pool and its sequences belong to one thread at a time (the
 * scheduler's).  Several threads may write rows of DIFFERENT positions
 * between reserve and commit (a forward pass does), and read views.
 */
#ifndef KVANT_KV_PAGED_H
#define KVANT_KV_PAGED_H

#include "core/core.h"
#include "kernels/attn.h"

#define KV_BLOCK_SIZE_DEFAULT 16
#define KV_MAX_SEQS_DEFAULT 64

typedef struct {
    int n_layers;          /* L */
    int n_kv_heads;        /* Hkv */
    int head_dim;          /* D; Hkv*D a multiple of 32 for KT_Q8_0 */
    int type;              /* KT_F32, KT_F16 or KT_Q8_0 */
    int block_size;        /* B tokens per block; 0: KV_BLOCK_SIZE_DEFAULT */
    int64_t n_blocks;      /* > 0: exactly this many blocks ... */
    uint64_t budget_bytes; /* ... else floor(budget_bytes / block_stride) blocks
                              (at least one must fit) */
    int max_ctx;           /* most tokens one sequence may hold */
    int max_seqs;          /* live sequences at once; 0: KV_MAX_SEQS_DEFAULT */
    bool prefix_cache;     /* automatic prefix caching of full blocks */
    bool row_major;        /* a position's heads in one row (see Memory) */
} kv_pool_params;

typedef struct kv_pool kv_pool;
typedef struct kv_seq kv_seq;

/* ---- the pool ------------------------------------------------------------ */

/* Allocates the block memory (not touched, so pages are committed lazily) and
 * all bookkeeping.  NULL + status: KVANT_ERR_ARG (bad shape or type, budget
 * below one block), KVANT_ERR_NOMEM (overflow or allocation failure).  The
 * pool owns every sequence made from it; kv_pool_free frees them all. */
kv_pool *kv_pool_new(const kv_pool_params *params, kvant_status *st);
void kv_pool_free(kv_pool *p);

typedef struct {
    int block_size;
    int64_t blocks_total, blocks_used, blocks_cached, blocks_free;
    size_t bytes_per_block;     /* block_bytes: a block's share of the pool, padding included */
    size_t bytes_total;         /* blocks_total * bytes_per_block */
    size_t bytes_used;          /* blocks_used * bytes_per_block */
    int n_seqs;                 /* live sequences */
    int64_t tokens;             /* sum of the live sequences' lengths */
    /* reserved but unused token slots in used blocks: a block holding the
     * first f rows of its fullest reader wastes B - f slots, counted once
     * however many sequences share it */
    int64_t frag_tokens;
    int64_t prefix_query_tokens;/* cumulative prompt tokens given to kv_prefix_match */
    int64_t prefix_hit_tokens;  /* cumulative tokens it found cached */
    int64_t cow_copies;         /* cumulative copy-on-write block copies */
    int64_t evictions;          /* cumulative cached blocks evicted for reuse */
} kv_pool_stats;

/* O(blocks + live table entries); uses the pool's preallocated scratch. */
void kv_pool_stats_get(kv_pool *p, kv_pool_stats *out);
/* free + cached: the blocks a reserve may still take.  O(1). */
int64_t kv_pool_n_available(const kv_pool *p);

/* Layer `layer` of sequence s as an attention view: n_pos = s's committed
 * length, block_table = s's table (valid until s's next reserve / commit /
 * free).  A forward pass that has written rows len .. len+T-1 after a
 * reserve sets view.n_pos = len + T itself (at most kv_seq_capacity). */
void kv_pool_view(const kv_pool *p, const kv_seq *s, int layer, kern_kv_view *out);
/* Where to write the K and V rows of position pos in layer `layer`:
 * len <= pos < kv_seq_capacity(s) (asserted), i.e. a slot a reserve made
 * room for; its block belongs to s alone (asserted).  With p->head_stride
 * == 0 each is one row of Hkv*D elements; else they are head 0's D elements
 * and head hk's lie hk * p->head_stride bytes further. */
void kv_pool_row(const kv_pool *p, const kv_seq *s, int layer, int pos, uint8_t **k_row, uint8_t **v_row);

/* For tests and debugging: block b's refcount and whether it is in the
 * prefix cache. */
int kv_pool_block_ref(const kv_pool *p, int32_t b);
bool kv_pool_block_registered(const kv_pool *p, int32_t b);
/* Recounts everything from scratch (refcounts from the tables, free list,
 * LRU list, hash table, block states).  false + a reason in why[n] when an
 * invariant is broken.  O(blocks + table entries + hash slots). */
bool kv_pool_check(kv_pool *p, char *why, size_t n);

/* ---- sequences ----------------------------------------------------------- */

/* An empty sequence.  NULL + KVANT_ERR_FULL when max_seqs are live.  O(1). */
kv_seq *kv_seq_new(kv_pool *p, kvant_status *st);
/* Drops s's reference on each of its blocks, last block first (so under LRU a
 * chain's tail is evicted before its head), and returns s's slot.  NULL ok. */
void kv_seq_free(kv_pool *p, kv_seq *s);
/* A new sequence sharing src's committed blocks (refcount + 1 each, no copy):
 * same length, same tokens.  Costs O(len) for the token copy.  Blocks src
 * reserved beyond its length stay src's.  NULL + KVANT_ERR_FULL when
 * max_seqs are live. */
kv_seq *kv_seq_fork(kv_pool *p, const kv_seq *src, kvant_status *st);

/* Makes room for n_new tokens after the committed length: allocates blocks
 * (free ones first, then evicting the least recently used cached ones) and,
 * if the last partially filled block is shared, copies its filled rows into
 * a block of s's own first (copy-on-write).  Returns KVANT_OK, KVANT_ERR_ARG
 * (n_new < 0) or KVANT_ERR_FULL (out of blocks, or len + n_new > max_ctx);
 * on an error nothing changed, in s or anywhere else.  Call it before every
 * write, even when kv_seq_capacity already suffices: after a fork it is what
 * un-shares the partially filled block (kv_pool_row asserts it was done). */
kvant_code kv_seq_reserve(kv_pool *p, kv_seq *s, int n_new, kvant_status *st);
/* Blocks a kv_seq_reserve(s, n_new) would take from the pool (the scheduler's
 * admission test: compare with kv_pool_n_available). */
int kv_seq_blocks_needed(const kv_pool *p, const kv_seq *s, int n_new);
/* After the rows of positions len .. len+n-1 were written: advances the
 * length by n (n <= capacity - len, asserted) and records their token ids
 * (tokens[n]; may be NULL only when the pool has no prefix cache).  Blocks
 * that became full are registered in the prefix cache; if an identical block
 * (same tokens, same prefix) is already there, s switches to that block and
 * frees its own copy (so a full block is never cached twice).  No
 * allocation; O(n) plus one hash per block filled. */
void kv_seq_commit(kv_pool *p, kv_seq *s, const int32_t *tokens, int n);

/* Sliding-window layers: gives back s's blocks that hold only positions
 * before pos (their table entries become -1; never read again: attention
 * of a window starting at or after pos does not touch them).  pos <= len.
 * Registered blocks stay in the prefix cache as cached blocks.  O(blocks). */
void kv_seq_release_before(kv_pool *p, kv_seq *s, int pos);
/* Drops s's positions from len (a multiple of the block size, >= its
 * released blocks) on: blocks past it are given back.  For a prefix match
 * shortened by a second pool's. */
void kv_seq_truncate(kv_pool *p, kv_seq *s, int len);
/* Leading blocks given back by kv_seq_release_before. */
int kv_seq_n_released(const kv_seq *s);
int kv_seq_len(const kv_seq *s);            /* committed tokens */
int kv_seq_capacity(const kv_pool *p, const kv_seq *s); /* tokens its blocks can hold */
int kv_seq_n_blocks(const kv_seq *s);
const int32_t *kv_seq_table(const kv_seq *s);   /* [n_blocks] pool block ids */
const int32_t *kv_seq_tokens(const kv_seq *s);  /* [len] token ids */

/* ---- automatic prefix caching (kv/prefix.c) -------------------------------
 * A full block is identified by h_i = XXH3(tokens of block i, seed h_{i-1})
 * (h_{-1} a constant): the hash of its tokens chained with everything before
 * it, so an equal block after a different prefix is a different block.  A hit
 * is confirmed exactly (same tokens and same parent block), so a hash
 * collision costs a miss at worst, never wrong K/V. */

/* s must be empty (new).  Walks the full blocks of tokens[0..n) and puts the
 * cached ones into s's table (refcount + 1; a cached block becomes used),
 * stopping at the first miss.  Returns the tokens matched: a multiple of the
 * block size and at most n - 1 rounded down to one (at least the last prompt
 * token is always left to compute so the caller gets its logits; a fully
 * cached prompt recomputes its last block, and at commit that block resolves
 * to the cached copy again).  s's length becomes the returned count; the
 * caller reserves and computes tokens[count .. n).  0 when the pool has no
 * prefix cache.  Costs one hash and one probe per block; no allocation. */
int kv_prefix_match(kv_pool *p, kv_seq *s, const int32_t *tokens, int n);

/* ---- internals shared by kv/paged.c and kv/prefix.c ----------------------
 * Other modules use only the functions above. */
struct kv_seq {
    int slot;          /* index in the pool's sequence array */
    bool live;
    int len;           /* committed tokens */
    int n_blocks;      /* entries in table */
    int32_t *table;    /* [max_blocks] pool block ids */
    int32_t *tokens;   /* [max_ctx] token ids of positions 0 .. len-1 */
    int n_full;        /* blocks 0 .. n_full-1 are full and went through the prefix cache */
    uint64_t chain;    /* hash of block n_full-1 (the seed of block n_full) */
    int n_released;    /* table[0 .. n_released-1] were given back (-1): a sliding window left them */
};

struct kv_pool {
    int n_layers, block_size, type, max_ctx, max_blocks, max_seqs;
    size_t row_bytes;              /* one position's K (or V): Hkv * D elements */
    size_t head_bytes, head_stride; /* head-major: a head's D elements and unit_stride; row-major: 0, 0 */
    /* the layout (see the top): a unit is a head (head-major) or a row */
    size_t unit_bytes;             /* head_bytes, or row_bytes when row-major */
    int n_units;                   /* Hkv, or 1 */
    size_t run_bytes;              /* B * unit_bytes: a unit's part of a block */
    size_t unit_stride;            /* n_blocks * run_bytes: one unit of one layer's K (or V) */
    size_t kv_bytes, layer_bytes;  /* n_units * unit_stride; 2 * kv_bytes */
    size_t block_bytes;            /* a block's share of the pool: 2 * L * n_units * run_bytes */
    int32_t n_blocks;
    uint8_t *data;                 /* [L][K, V][n_units][n_blocks][run_bytes] */
    int32_t *ref;                  /* [n_blocks] */
    int32_t *free_stack, n_free;   /* [n_blocks]: free block ids, top at n_free-1 */
    /* sequences */
    kv_seq *seqs;                  /* [max_seqs] */
    int32_t *seq_mem;              /* backing store of every table and token array */
    int *free_slots, n_free_slots; /* [max_seqs] */
    int32_t *scratch;              /* [n_blocks], for stats and checks */
    /* prefix cache (NULL arrays when disabled) */
    bool prefix;
    uint64_t *hash;                /* [n_blocks] h_i of a registered block */
    int32_t *parent;               /* [n_blocks] the block before it (-1: first) */
    uint32_t *gen;                 /* [n_blocks] bumped when a block leaves the cache */
    uint32_t *parent_gen;          /* [n_blocks] gen of parent at registration */
    uint8_t *registered;           /* [n_blocks] */
    int32_t *btok;                 /* [n_blocks][B] tokens of a registered block */
    int32_t *lru_prev, *lru_next;  /* [n_blocks] cached blocks, oldest at lru_head */
    int32_t lru_head, lru_tail, n_cached;
    int32_t *slots;                /* [slot_mask+1] open addressing, -1 empty */
    uint32_t slot_mask;
    int32_t n_registered;
    /* counters */
    int64_t query_tokens, hit_tokens, cow_copies, evictions;
};

/* paged.c: take one more reference on b (a cached b leaves the LRU list) /
 * drop one (at 0 it becomes cached if registered, else free). */
void kv_block_acquire(kv_pool *p, int32_t b);
void kv_block_release(kv_pool *p, int32_t b);
/* prefix.c */
kvant_code kv_prefix_init(kv_pool *p, kvant_status *st); /* allocates the cache's arrays */
void kv_prefix_fini(kv_pool *p);
void kv_prefix_commit(kv_pool *p, kv_seq *s);       /* registers s's newly full blocks */
void kv_prefix_lru_push(kv_pool *p, int32_t b);     /* refcount hit 0: newest cached */
void kv_prefix_lru_remove(kv_pool *p, int32_t b);   /* cached -> used */
int32_t kv_prefix_evict(kv_pool *p);                /* oldest cached -> unregistered, returned */
bool kv_prefix_check(const kv_pool *p, char *why, size_t n);

#endif
