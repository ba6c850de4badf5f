/* test_paged.c - the paged KV cache (kv/paged.h): sizing, block accounting,
 * fork + copy-on-write, prefix caching with chained hashes, LRU eviction,
 * running out of blocks, reading through the attention view, and a
 * randomized run checked against a naive model.
 *
 * Row contents: the K/V rows of position p carry a stamp computed from
 * tokens 0..p (as real K/V depend on the whole prefix), so a row reused
 * through a fork or the prefix cache must read back exactly as if the
 * sequence had computed it itself. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/types.h"
#include "kv/paged.h"

#define MAXT 1024

static bool g_row_major; /* pools made with row-major blocks (default: head-major) */

/* kv_dim split in heads of 4 elements (32 for Q8_0, so heads are whole blocks) */
static kv_pool *mkpool(int type, int L, int kv_dim, int B, int64_t nb, int max_ctx, int max_seqs, bool prefix) {
    const int D = type == KT_Q8_0 ? 32 : 4;
    assert_true(kv_dim % D == 0);
    kv_pool_params q = {.n_layers = L, .n_kv_heads = kv_dim / D, .head_dim = D, .type = type, .block_size = B,
                        .n_blocks = nb, .max_ctx = max_ctx, .max_seqs = max_seqs, .prefix_cache = prefix,
                        .row_major = g_row_major};
    kvant_status st;
    kv_pool *p = kv_pool_new(&q, &st);
    if (!p) fail_msg("kv_pool_new: %s", st.msg);
    return p;
}

static kv_pool_stats stats(kv_pool *p) {
    kv_pool_stats s;
    kv_pool_stats_get(p, &s);
    return s;
}

/* every invariant, and used + cached + free == total */
static kv_pool_stats pool_ok(kv_pool *p) {
    char why[256];
    if (!kv_pool_check(p, why, sizeof why)) fail_msg("kv_pool_check: %s", why);
    kv_pool_stats s = stats(p);
    assert_int_equal(s.blocks_used + s.blocks_cached + s.blocks_free, s.blocks_total);
    return s;
}

static void expect_counts(kv_pool *p, int used, int cached, int free_) {
    kv_pool_stats s = pool_ok(p);
    if (s.blocks_used != used || s.blocks_cached != cached || s.blocks_free != free_)
        fail_msg("used/cached/free %lld/%lld/%lld, want %d/%d/%d", (long long)s.blocks_used,
                 (long long)s.blocks_cached, (long long)s.blocks_free, used, cached, free_);
}

/* ---- row contents ------------------------------------------------------------ */

static void stamps_of(const int32_t *tok, int n, uint32_t *out) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) {
        h = (h ^ (uint32_t)tok[i]) * 16777619u;
        h ^= h >> 13;
        out[i] = h;
    }
}

static uint8_t pat(uint32_t stamp, int layer, int kv, size_t j) {
    uint32_t x = stamp * 2654435761u ^ (uint32_t)(layer * 2 + kv) * 40503u ^ (uint32_t)j * 2246822519u;
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return (uint8_t)x;
}

/* Byte j of a position's K or V (all heads in order; n bytes) when its
 * head 0 is at row: heads of hb bytes every hs bytes (head-major), or one
 * run (hs == 0). */
static size_t at(size_t j, size_t hb, size_t hs) { return hs ? j / hb * hs + j % hb : j; }

static bool row_is(const uint8_t *row, size_t n, size_t hb, size_t hs, uint32_t stamp, int layer, int kv) {
    for (size_t j = 0; j < n; j++)
        if (row[at(j, hb, hs)] != pat(stamp, layer, kv, j)) return false;
    return true;
}

/* Writes the rows of positions len .. len+n-1 (not committed). */
static void write_new(kv_pool *p, kv_seq *s, const int32_t *tok, int n) {
    int len = kv_seq_len(s);
    int32_t all[MAXT];
    uint32_t st[MAXT];
    assert_true(len + n <= MAXT);
    memcpy(all, kv_seq_tokens(s), (size_t)len * sizeof *all);
    memcpy(all + len, tok, (size_t)n * sizeof *all);
    stamps_of(all, len + n, st);
    for (int pos = len; pos < len + n; pos++)
        for (int l = 0; l < p->n_layers; l++) {
            uint8_t *k, *v;
            kv_pool_row(p, s, l, pos, &k, &v);
            for (size_t j = 0; j < p->row_bytes; j++) {
                k[at(j, p->head_bytes, p->head_stride)] = pat(st[pos], l, 0, j);
                v[at(j, p->head_bytes, p->head_stride)] = pat(st[pos], l, 1, j);
            }
        }
}

static kvant_code append(kv_pool *p, kv_seq *s, const int32_t *tok, int n) {
    kvant_status st;
    kvant_code c = kv_seq_reserve(p, s, n, &st);
    if (c != KVANT_OK) return c;
    write_new(p, s, tok, n);
    kv_seq_commit(p, s, tok, n);
    return KVANT_OK;
}

/* Position pos read the way kernels/attn.h defines it. */
static const uint8_t *view_row(const kern_kv_view *v, int pos, int kv) {
    int i = pos / v->block_size;
    int32_t b = v->block_table ? v->block_table[i] : i;
    return (kv ? v->v_base : v->k_base) + (size_t)b * v->block_stride + (size_t)(pos % v->block_size) * v->row_bytes;
}

/* Rows 0 .. n_pos-1 of every layer, through kv_pool_view, against the stamps
 * of tokens tok (the committed ones when tok is NULL). */
static void check_rows_n(kv_pool *p, kv_seq *s, const int32_t *tok, int n_pos) {
    uint32_t st[MAXT];
    stamps_of(tok ? tok : kv_seq_tokens(s), n_pos, st);
    for (int l = 0; l < p->n_layers; l++) {
        kern_kv_view v;
        kv_pool_view(p, s, l, &v);
        assert_int_equal(v.n_pos, kv_seq_len(s));
        for (int pos = 0; pos < n_pos; pos++)
            if (!row_is(view_row(&v, pos, 0), p->row_bytes, v.row_bytes, v.head_stride, st[pos], l, 0) ||
                !row_is(view_row(&v, pos, 1), p->row_bytes, v.row_bytes, v.head_stride, st[pos], l, 1))
                fail_msg("layer %d position %d: wrong row", l, pos);
    }
}
static void check_rows(kv_pool *p, kv_seq *s) { check_rows_n(p, s, NULL, kv_seq_len(s)); }

/* a new sequence (src NULL) or a fork of src; fails the test if none */
static kv_seq *seq_or_fork(kv_pool *p, kv_seq *src) {
    kvant_status st;
    kv_seq *s = src ? kv_seq_fork(p, src, &st) : kv_seq_new(p, &st);
    if (!s) fail_msg("kv_seq_new / fork: %s", st.msg);
    return s;
}
#define new_seq(p) seq_or_fork(p, NULL)
#define fork_seq(p, src) seq_or_fork(p, src)

static void seq_of(int32_t *tok, int n, int32_t base) {
    for (int i = 0; i < n; i++) tok[i] = base + i;
}

/* ---- sizing -------------------------------------------------------------------- */

static void test_sizing(void **state) {
    (void)state;
    kvant_status st;
    /* F32, 2 layers, row 32 floats = 128 B, B 16: 2 x 2 x 16 x 128 = 8192 B/block */
    kv_pool_params q = {.n_layers = 2, .n_kv_heads = 2, .head_dim = 16, .type = KT_F32, .max_ctx = 64,
                        .budget_bytes = 8192 * 10 + 8191};
    kv_pool *p = kv_pool_new(&q, &st);
    assert_non_null(p);
    kv_pool_stats s = stats(p);
    assert_int_equal(s.block_size, KV_BLOCK_SIZE_DEFAULT);
    assert_int_equal(s.bytes_per_block, 8192);
    assert_int_equal(s.blocks_total, 10); /* rounded down */
    assert_int_equal(s.bytes_total, 81920);
    assert_int_equal(s.blocks_free, 10);
    kern_kv_view v0, v1;
    kv_seq *a = new_seq(p);
    kv_pool_view(p, a, 0, &v0);
    kv_pool_view(p, a, 1, &v1);
    /* [layer][K, V][head][block][16 rows]: a head's run of one block is 16 x 64 B,
     * a head 10 blocks of them, K (or V) of a layer 2 heads */
    assert_int_equal(v0.row_bytes, 64); /* head-major: a row is one head's 16 floats */
    assert_int_equal(v0.block_stride, 16 * 64);
    assert_int_equal(v0.head_stride, 10 * 16 * 64);
    assert_int_equal(v0.v_base - v0.k_base, 2 * 10 * 16 * 64);
    assert_int_equal(v1.k_base - v0.k_base, 2 * 2 * 10 * 16 * 64);
    assert_int_equal(v0.type, KT_F32);
    assert_int_equal(v0.n_pos, 0);
    kv_pool_free(p);
    q.row_major = true; /* the same sizes; a row is both heads */
    p = kv_pool_new(&q, &st);
    assert_non_null(p);
    assert_int_equal(stats(p).bytes_per_block, 8192);
    kv_pool_view(p, new_seq(p), 0, &v0);
    assert_int_equal(v0.row_bytes, 128);
    assert_int_equal(v0.head_stride, 0);
    assert_int_equal(v0.block_stride, 16 * 128);
    assert_int_equal(v0.v_base - v0.k_base, 10 * 16 * 128);
    kv_pool_free(p);
    /* Q8_0 heads of 16 split a block of 32: row-major whatever is asked */
    q = (kv_pool_params){.n_layers = 1, .n_kv_heads = 2, .head_dim = 16, .type = KT_Q8_0, .max_ctx = 64, .n_blocks = 2};
    p = kv_pool_new(&q, &st);
    assert_non_null(p);
    kv_pool_view(p, new_seq(p), 0, &v0);
    assert_int_equal(v0.row_bytes, 34);
    assert_int_equal(v0.head_stride, 0);
    kv_pool_free(p);

    /* Q8_0, 1 layer, 32 elements = 34 B/row, B 8: 2 x 8 x 34 = 544 B, the formula exactly */
    q = (kv_pool_params){.n_layers = 1, .n_kv_heads = 1, .head_dim = 32, .type = KT_Q8_0, .block_size = 8,
                         .max_ctx = 64, .budget_bytes = 544 * 3 - 1};
    p = kv_pool_new(&q, &st);
    assert_non_null(p);
    s = stats(p);
    assert_int_equal(s.bytes_per_block, 544);
    assert_int_equal(s.blocks_total, 2);
    kv_pool_free(p);
    q.budget_bytes = 543; /* not one block */
    assert_null(kv_pool_new(&q, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);

    /* F16, 3 layers, 32 elements = 64 B/row, B 8: 3072 B; n_blocks wins over the budget */
    q = (kv_pool_params){.n_layers = 3, .n_kv_heads = 4, .head_dim = 8, .type = KT_F16, .block_size = 8,
                         .max_ctx = 64, .n_blocks = 5, .budget_bytes = 1};
    p = kv_pool_new(&q, &st);
    assert_non_null(p);
    s = stats(p);
    assert_int_equal(s.bytes_per_block, 3072);
    assert_int_equal(s.blocks_total, 5);
    assert_int_equal(s.block_size, 8);
    kv_pool_free(p);

    /* Q8_0 rows must be whole blocks of 32; Q4_0 is no cache type; shapes > 0 */
    q = (kv_pool_params){.n_layers = 1, .n_kv_heads = 3, .head_dim = 16, .type = KT_Q8_0, .max_ctx = 64, .n_blocks = 4};
    assert_null(kv_pool_new(&q, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    q.head_dim = 32;
    q.type = KT_Q4_0;
    assert_null(kv_pool_new(&q, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    q.type = KT_F32;
    q.max_ctx = 0;
    assert_null(kv_pool_new(&q, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
}

/* ---- accounting through alloc / free / fork / CoW ----------------------------- */

static void test_accounting(void **state) {
    (void)state;
    kv_pool *p = mkpool(KT_F32, 2, 8, 4, 8, 64, 8, true);
    int32_t t[16];
    seq_of(t, 16, 100);
    expect_counts(p, 0, 0, 8);
    kv_seq *a = new_seq(p);
    assert_int_equal(append(p, a, t, 6), KVANT_OK); /* blocks 0 (full) and 1 (2 rows) */
    expect_counts(p, 2, 0, 6);
    assert_int_equal(stats(p).frag_tokens, 2);
    assert_int_equal(kv_seq_reserve(p, a, 3, NULL), KVANT_OK); /* 9 tokens: a third block */
    expect_counts(p, 3, 0, 5);
    assert_int_equal(stats(p).frag_tokens, 6); /* 2 in block 1, 4 in block 2 */
    write_new(p, a, t + 6, 3);
    kv_seq_commit(p, a, t + 6, 3);
    expect_counts(p, 3, 0, 5);
    assert_true(kv_pool_block_registered(p, kv_seq_table(a)[1]));
    assert_false(kv_pool_block_registered(p, kv_seq_table(a)[2]));

    kv_seq *b = fork_seq(p, a); /* shares all 3 blocks */
    expect_counts(p, 3, 0, 5);
    for (int i = 0; i < 3; i++) assert_int_equal(kv_pool_block_ref(p, kv_seq_table(a)[i]), 2);
    assert_int_equal(stats(p).frag_tokens, 3); /* the shared partial block, once */
    assert_int_equal(append(p, b, t + 9, 1), KVANT_OK); /* copy-on-write of block 2 */
    expect_counts(p, 4, 0, 4);
    assert_int_equal(stats(p).cow_copies, 1);
    assert_int_equal(stats(p).frag_tokens, 3 + 2);

    kv_seq_free(p, a); /* its block 2 is free, 0 and 1 stay b's */
    expect_counts(p, 3, 0, 5);
    kv_seq_free(p, b); /* 0 and 1 are registered: cached; b's block 2: free */
    expect_counts(p, 0, 2, 6);

    kv_seq *c = new_seq(p);
    assert_int_equal(kv_prefix_match(p, c, t, 9), 8);
    expect_counts(p, 2, 0, 6);
    assert_int_equal(stats(p).frag_tokens, 0);
    assert_int_equal(kv_seq_reserve(p, c, 1, NULL), KVANT_OK);
    expect_counts(p, 3, 0, 5);
    kv_seq *d = fork_seq(p, c); /* len 8: shares 2 full blocks, not c's reserved one */
    assert_int_equal(kv_seq_n_blocks(d), 2);
    expect_counts(p, 3, 0, 5);
    assert_int_equal(stats(p).frag_tokens, 4);
    assert_int_equal(stats(p).n_seqs, 2);
    assert_int_equal(stats(p).tokens, 16);
    kv_seq_free(p, c);
    expect_counts(p, 2, 0, 6);
    kv_seq_free(p, d);
    expect_counts(p, 0, 2, 6);
    kv_pool_free(p);
}

/* ---- fork + copy-on-write --------------------------------------------------------- */

static void test_fork_cow(void **state) {
    (void)state;
    kv_pool *p = mkpool(KT_F16, 2, 32, 16, 16, 128, 8, true);
    int32_t t[64], x = 1000, y = 2000;
    seq_of(t, 64, 1);
    kv_seq *a = new_seq(p);
    assert_int_equal(append(p, a, t, 20), KVANT_OK);
    kv_seq *b = fork_seq(p, a);
    assert_memory_equal(kv_seq_table(a), kv_seq_table(b), 2 * sizeof(int32_t));
    expect_counts(p, 2, 0, 14);

    assert_int_equal(append(p, b, &x, 1), KVANT_OK); /* writes into the shared block 1 */
    assert_int_equal(stats(p).cow_copies, 1);
    assert_int_equal(kv_seq_table(a)[0], kv_seq_table(b)[0]);
    assert_int_not_equal(kv_seq_table(a)[1], kv_seq_table(b)[1]);
    check_rows(p, a); /* the parent did not change */
    check_rows(p, b); /* the child has the parent's 20 rows and its own */
    expect_counts(p, 3, 0, 13);

    assert_int_equal(append(p, a, &y, 1), KVANT_OK); /* block 1 is a's alone now: no copy */
    assert_int_equal(stats(p).cow_copies, 1);
    check_rows(p, a);
    check_rows(p, b); /* b's row 20 is still x's */
    assert_int_not_equal(kv_seq_tokens(a)[20], kv_seq_tokens(b)[20]);

    /* a full last block: the next write starts a new block, nothing to copy */
    assert_int_equal(append(p, a, t + 21, 11), KVANT_OK);
    kv_seq *c = fork_seq(p, a);
    assert_int_equal(append(p, c, &x, 1), KVANT_OK);
    assert_int_equal(stats(p).cow_copies, 1);
    check_rows(p, a);
    check_rows(p, c);

    /* parallel sampling, n = 4: every writer but the last copies once */
    kv_seq_free(p, c);
    assert_int_equal(append(p, a, t + 32, 5), KVANT_OK); /* 37: block 2 partial */
    kv_seq *kids[3];
    for (int i = 0; i < 3; i++) kids[i] = fork_seq(p, a);
    assert_int_equal(kv_pool_block_ref(p, kv_seq_table(a)[2]), 4);
    for (int i = 0; i < 3; i++) {
        int32_t tok = 3000 + i;
        assert_int_equal(append(p, kids[i], &tok, 1), KVANT_OK);
        assert_int_equal(stats(p).cow_copies, 2 + i);
    }
    assert_int_equal(append(p, a, &y, 1), KVANT_OK);
    assert_int_equal(stats(p).cow_copies, 4);
    check_rows(p, a);
    for (int i = 0; i < 3; i++) check_rows(p, kids[i]);
    pool_ok(p);
    kv_pool_free(p);
}

/* ---- prefix caching ---------------------------------------------------------------- */

static void test_prefix_match(void **state) {
    (void)state;
    kv_pool *p = mkpool(KT_F32, 2, 8, 4, 32, 64, 16, true);
    int32_t P[14], Q[14];
    seq_of(P, 14, 10);
    kv_seq *a = new_seq(p);
    assert_int_equal(kv_prefix_match(p, a, P, 14), 0);
    assert_int_equal(append(p, a, P, 14), KVANT_OK); /* 3 full blocks registered */

    kv_seq *b = new_seq(p); /* same prompt: the 3 full blocks */
    assert_int_equal(kv_prefix_match(p, b, P, 14), 12);
    assert_int_equal(kv_seq_len(b), 12);
    assert_memory_equal(kv_seq_table(a), kv_seq_table(b), 3 * sizeof(int32_t));
    assert_int_equal(append(p, b, P + 12, 2), KVANT_OK);
    check_rows(p, b);
    assert_int_equal(stats(p).prefix_hit_tokens, 12);

    memcpy(Q, P, sizeof P);
    Q[6] = 999; /* differs in the middle of the 2nd block: only the 1st matches */
    kv_seq *c = new_seq(p);
    assert_int_equal(kv_prefix_match(p, c, Q, 14), 4);
    assert_int_equal(append(p, c, Q + 4, 10), KVANT_OK);
    check_rows(p, c);

    memcpy(Q, P, sizeof P);
    Q[1] = 999; /* differs in block 1; blocks 2 and 3 equal P's but follow another prefix */
    kv_seq *d = new_seq(p);
    assert_int_equal(kv_prefix_match(p, d, Q, 14), 0);
    assert_int_equal(append(p, d, Q, 14), KVANT_OK);
    for (int i = 1; i < 3; i++) assert_int_not_equal(kv_seq_table(d)[i], kv_seq_table(a)[i]);
    kv_seq *e = new_seq(p); /* matches d's chain, not a's */
    assert_int_equal(kv_prefix_match(p, e, Q, 13), 12);
    assert_memory_equal(kv_seq_table(e), kv_seq_table(d), 3 * sizeof(int32_t));
    check_rows(p, e);
    assert_int_equal(stats(p).prefix_hit_tokens, 12 + 4 + 12);

    /* a fully cached prompt leaves its last block to compute; at commit the
     * recomputed block resolves to the cached copy */
    kv_pool_stats s0 = stats(p);
    kv_seq *f = new_seq(p);
    assert_int_equal(kv_prefix_match(p, f, P, 12), 8);
    assert_int_equal(append(p, f, P + 8, 4), KVANT_OK);
    assert_memory_equal(kv_seq_table(f), kv_seq_table(a), 3 * sizeof(int32_t));
    check_rows(p, f);
    kv_pool_stats s1 = stats(p);
    assert_int_equal(s1.blocks_used, s0.blocks_used);
    assert_int_equal(s1.blocks_free, s0.blocks_free);
    kv_seq *g = new_seq(p);
    assert_int_equal(kv_prefix_match(p, g, P, 13), 12);
    kv_seq_free(p, g);
    g = new_seq(p);
    assert_int_equal(kv_prefix_match(p, g, P, 1), 0);
    assert_int_equal(kv_prefix_match(p, g, P, 0), 0);
    assert_int_equal(stats(p).prefix_query_tokens, 14 * 4 + 13 + 12 + 13 + 1);
    pool_ok(p);
    kv_pool_free(p);

    /* no prefix cache: never a match, no registration */
    p = mkpool(KT_F32, 1, 8, 4, 8, 64, 4, false);
    a = new_seq(p);
    assert_int_equal(append(p, a, P, 14), KVANT_OK);
    assert_false(kv_pool_block_registered(p, kv_seq_table(a)[0]));
    b = new_seq(p);
    assert_int_equal(kv_prefix_match(p, b, P, 14), 0);
    kv_seq_free(p, a);
    expect_counts(p, 0, 0, 8);
    kv_pool_free(p);
}

/* ---- sliding windows: blocks given back, truncation --------------------------------- */

/* A sliding-window pool's sequence gives back the blocks before its window:
 * their entries become -1, the blocks free (or cached when registered), a
 * fork shares only what is left, the rows after the window still read
 * right; truncation drops trailing blocks and a later match still finds the
 * chain. */
static void test_release_window(void **state) {
    (void)state;
    kv_pool *p = mkpool(KT_F32, 2, 8, 4, 12, 64, 4, true);
    int32_t P[40];
    seq_of(P, 40, 100);
    kv_seq *a = new_seq(p);
    assert_int_equal(append(p, a, P, 18), KVANT_OK); /* 5 blocks, 4 full */
    kv_seq_release_before(p, a, 9);                 /* blocks 0, 1 hold positions 0..7 only */
    assert_int_equal(kv_seq_n_released(a), 2);
    assert_int_equal(kv_seq_table(a)[0], -1);
    assert_int_equal(kv_seq_table(a)[1], -1);
    expect_counts(p, 3, 2, 7);                      /* registered: cached, not free */
    kv_seq_release_before(p, a, 9);                 /* again: nothing more */
    expect_counts(p, 3, 2, 7);
    assert_int_equal(append(p, a, P + 18, 6), KVANT_OK); /* grows past the window on the right */
    kv_seq_release_before(p, a, 24 - 8);            /* keep 8 positions */
    assert_int_equal(kv_seq_n_released(a), 4);
    kv_seq *f = fork_seq(p, a);                     /* shares blocks 4, 5 only */
    assert_int_equal(kv_seq_n_released(f), 4);
    assert_int_equal(kv_pool_block_ref(p, kv_seq_table(a)[4]), 2);
    pool_ok(p);
    /* positions 16 .. 23 still read what was written there */
    for (int l = 0; l < p->n_layers; l++) {
        kern_kv_view v;
        kv_pool_view(p, a, l, &v);
        uint32_t st[MAXT];
        stamps_of(kv_seq_tokens(a), 24, st);
        for (int pos = 16; pos < 24; pos++)
            if (!row_is(view_row(&v, pos, 0), p->row_bytes, v.row_bytes, v.head_stride, st[pos], l, 0))
                fail_msg("layer %d position %d after release: wrong row", l, pos);
    }
    kv_seq_free(p, f);
    kv_seq_free(p, a);
    pool_ok(p);
    /* the released blocks stayed cached: a new prompt of the same tokens matches the whole chain */
    kv_seq *b = new_seq(p);
    assert_int_equal(kv_prefix_match(p, b, P, 24), 20);
    kv_seq_truncate(p, b, 8); /* a second pool matched less: keep 8 */
    assert_int_equal(kv_seq_len(b), 8);
    assert_int_equal(kv_seq_n_blocks(b), 2);
    assert_int_equal(append(p, b, P + 8, 4), KVANT_OK); /* the recomputed block resolves to the cached copy */
    assert_int_equal(kv_seq_len(b), 12);
    pool_ok(p);
    kv_seq_free(p, b);
    kv_pool_free(p);
}

/* ---- LRU eviction ------------------------------------------------------------------- */

static int matched(kv_pool *p, const int32_t *tok, int n) {
    kv_seq *s = new_seq(p);
    int m = kv_prefix_match(p, s, tok, n);
    kv_seq_free(p, s); /* the matched blocks become the most recently used */
    return m;
}

static void test_lru(void **state) {
    (void)state;
    kv_pool *p = mkpool(KT_F32, 1, 8, 4, 6, 64, 8, true);
    int32_t X[5], Y[5], Z[5], W[32];
    seq_of(X, 5, 100);
    seq_of(Y, 5, 200);
    seq_of(Z, 5, 300);
    seq_of(W, 32, 400);
    kv_seq *sx = new_seq(p), *sy = new_seq(p), *sz = new_seq(p);
    assert_int_equal(append(p, sx, X, 4), KVANT_OK);
    assert_int_equal(append(p, sy, Y, 4), KVANT_OK);
    assert_int_equal(append(p, sz, Z, 4), KVANT_OK);
    int32_t bx = kv_seq_table(sx)[0], by = kv_seq_table(sy)[0], bz = kv_seq_table(sz)[0];
    kv_seq_free(p, sy);
    kv_seq_free(p, sx);
    kv_seq_free(p, sz); /* oldest first: Y, X, Z */
    expect_counts(p, 0, 3, 3);
    assert_int_equal(matched(p, Y, 5), 4); /* Y is touched: X, Z, Y */
    expect_counts(p, 0, 3, 3);

    kv_seq *w = new_seq(p);
    assert_int_equal(kv_seq_reserve(p, w, 16, NULL), KVANT_OK); /* 3 free + evict X */
    expect_counts(p, 4, 2, 0);
    assert_int_equal(stats(p).evictions, 1);
    assert_int_equal(kv_seq_table(w)[3], bx);
    assert_false(kv_pool_block_registered(p, bx));
    assert_int_equal(kv_seq_reserve(p, w, 20, NULL), KVANT_OK); /* evicts Z */
    assert_int_equal(kv_seq_table(w)[4], bz);
    assert_int_equal(stats(p).evictions, 2);
    assert_int_equal(matched(p, X, 5), 0);
    assert_int_equal(matched(p, Z, 5), 0);
    assert_int_equal(matched(p, Y, 5), 4);
    assert_int_equal(kv_seq_reserve(p, w, 24, NULL), KVANT_OK); /* evicts Y */
    assert_int_equal(kv_seq_table(w)[5], by);
    expect_counts(p, 6, 0, 0);
    assert_int_equal(kv_seq_reserve(p, w, 25, NULL), KVANT_ERR_FULL);
    kv_seq_free(p, w);
    expect_counts(p, 0, 0, 6);

    /* a freed chain is evicted tail first: its head still matches */
    kv_seq *c = new_seq(p);
    assert_int_equal(append(p, c, W, 12), KVANT_OK);
    kv_seq_free(p, c);
    expect_counts(p, 0, 3, 3);
    c = new_seq(p);
    assert_int_equal(kv_seq_reserve(p, c, 16, NULL), KVANT_OK); /* evicts the 3rd block only */
    assert_int_equal(matched(p, W, 13), 8);
    assert_int_equal(kv_seq_reserve(p, c, 20, NULL), KVANT_OK); /* then the 2nd */
    assert_int_equal(matched(p, W, 13), 4);
    kv_seq_free(p, c);
    pool_ok(p);
    kv_pool_free(p);
}

/* ---- out of blocks -------------------------------------------------------------------- */

static void same_seq(kv_seq *s, int len, int nb, const int32_t *table) {
    assert_int_equal(kv_seq_len(s), len);
    assert_int_equal(kv_seq_n_blocks(s), nb);
    if (nb > 0) assert_memory_equal(kv_seq_table(s), table, (size_t)nb * sizeof *table);
}

static void test_full(void **state) {
    (void)state;
    kv_pool *p = mkpool(KT_F32, 2, 16, 4, 10, 40, 4, true);
    int32_t t[64];
    seq_of(t, 64, 1);
    kv_seq *a = new_seq(p), *b = new_seq(p);
    assert_int_equal(append(p, a, t, 10), KVANT_OK);
    assert_int_equal(append(p, b, t + 20, 7), KVANT_OK);
    kv_seq *c = fork_seq(p, a);
    expect_counts(p, 5, 0, 5);
    int32_t ta[3], tc[3];
    memcpy(ta, kv_seq_table(a), sizeof ta);
    memcpy(tc, kv_seq_table(c), sizeof tc);
    kv_pool_stats before = stats(p);

    kv_seq *d = new_seq(p);
    kvant_status st;
    assert_int_equal(kv_seq_reserve(p, d, 30, &st), KVANT_ERR_FULL); /* 8 blocks > 5 */
    assert_int_equal(st.code, KVANT_ERR_FULL);
    same_seq(d, 0, 0, NULL);
    kv_pool_stats after = stats(p);
    after.n_seqs--; /* d is live but empty */
    assert_memory_equal(&before, &after, sizeof before);
    assert_int_equal(kv_seq_reserve(p, d, 20, NULL), KVANT_OK); /* exactly the 5 left */
    write_new(p, d, t + 40, 20);
    kv_seq_commit(p, d, t + 40, 20);
    expect_counts(p, 10, 0, 0);

    int32_t z = 77;
    assert_int_equal(kv_seq_blocks_needed(p, c, 1), 1);
    assert_int_equal(append(p, c, &z, 1), KVANT_ERR_FULL); /* needs a copy of the shared block */
    same_seq(c, 10, 3, tc);
    assert_int_equal(append(p, a, &z, 1), KVANT_ERR_FULL); /* the same block from a's side */
    same_seq(a, 10, 3, ta);
    assert_int_equal(kv_seq_blocks_needed(p, b, 1), 0);
    assert_int_equal(append(p, b, &z, 1), KVANT_OK); /* room in b's own block */
    assert_int_equal(kv_seq_reserve(p, d, 21, NULL), KVANT_ERR_FULL);
    assert_int_equal(kv_seq_reserve(p, b, 41, &st), KVANT_ERR_FULL); /* past max_ctx */
    assert_int_equal(kv_seq_reserve(p, b, -1, &st), KVANT_ERR_ARG);
    assert_null(kv_seq_new(p, &st)); /* 4 slots in use */
    assert_int_equal(st.code, KVANT_ERR_FULL);
    assert_null(kv_seq_fork(p, a, &st));
    assert_int_equal(st.code, KVANT_ERR_FULL);
    check_rows(p, a);
    check_rows(p, b);
    check_rows(p, c);
    check_rows(p, d);
    assert_int_equal(stats(p).cow_copies, 0);

    kv_seq_free(p, d); /* room again */
    assert_int_equal(append(p, c, &z, 1), KVANT_OK);
    check_rows(p, a);
    check_rows(p, c);
    pool_ok(p);
    kv_pool_free(p);
}

/* ---- the attention view over shuffled block tables ---------------------------------------- */

static void test_view(void **state) {
    (void)state;
    const int types[3] = {KT_F32, KT_F16, KT_Q8_0};
    for (int ti = 0; ti < 3; ti++) {
        kv_pool *p = mkpool(types[ti], 3, 64, 4, 64, 64, 8, ti == 0);
        assert_int_equal(p->row_bytes, kern_row_bytes(types[ti], 64));
        kv_seq *s[4];
        for (int i = 0; i < 4; i++) s[i] = new_seq(p);
        uint32_t r = 12345;
        int32_t tok[4];
        for (int step = 0; step < 120; step++) {
            r = r * 1103515245u + 12345u;
            int i = (int)(r >> 16) % 4, n = 1 + (int)(r >> 8) % 3;
            if (kv_seq_len(s[i]) + n > 48 || (r >> 4) % 13 == 0) { /* restart: takes recycled blocks */
                kv_seq_free(p, s[i]);
                s[i] = new_seq(p);
            }
            for (int j = 0; j < n; j++) tok[j] = (int32_t)((r >> (j * 5)) & 31);
            assert_int_equal(append(p, s[i], tok, n), KVANT_OK);
        }
        bool shuffled = false;
        for (int i = 0; i < 4; i++) {
            check_rows(p, s[i]);
            for (int j = 0; j + 1 < kv_seq_n_blocks(s[i]); j++)
                shuffled |= kv_seq_table(s[i])[j + 1] != kv_seq_table(s[i])[j] + 1;
        }
        assert_true(shuffled);
        /* rows written after a reserve are readable before the commit with n_pos extended */
        int32_t more[6] = {1, 2, 3, 4, 5, 6}, all[MAXT];
        int len = kv_seq_len(s[0]);
        assert_int_equal(kv_seq_reserve(p, s[0], 6, NULL), KVANT_OK);
        write_new(p, s[0], more, 6);
        memcpy(all, kv_seq_tokens(s[0]), (size_t)len * sizeof *all);
        memcpy(all + len, more, sizeof more);
        check_rows_n(p, s[0], all, len + 6);
        kv_seq_commit(p, s[0], more, 6);
        check_rows(p, s[0]);
        pool_ok(p);
        kv_pool_free(p);
    }
}

/* ---- randomized run against a naive model ----------------------------------------------------
 * The model keeps, per block, a refcount and (if registered) the WHOLE token
 * prefix the block ends; it finds cached blocks by comparing prefixes (no
 * hashing), keeps the LRU order in an array, and predicts every refcount,
 * every registration, which block an eviction takes, each reserve's success,
 * each match's length and the copy count. */

enum { SB = 4, SNB = 40, SCTX = 64, SSEQ = 10, SOPS = 20000 };

typedef struct {
    kv_seq *s;
    int len, nb, nfull;
    int32_t table[SCTX / SB], tok[SCTX];
} mseq;

static struct {
    mseq seq[SSEQ];
    int ref[SNB];
    bool reg[SNB];
    int32_t pre[SNB][SCTX]; /* registered block's whole prefix */
    int prelen[SNB];
    int32_t lru[SNB];
    int nlru;
    int64_t cow, hits, dedups;
} M;

static void m_lru_remove(int32_t b) {
    int i = 0;
    while (i < M.nlru && M.lru[i] != b) i++;
    assert_true(i < M.nlru);
    memmove(M.lru + i, M.lru + i + 1, (size_t)(M.nlru - i - 1) * sizeof *M.lru);
    M.nlru--;
}
static void m_acquire(int32_t b) {
    if (M.ref[b] == 0) m_lru_remove(b);
    M.ref[b]++;
}
static void m_release(int32_t b) {
    assert_true(M.ref[b] > 0);
    if (--M.ref[b] == 0 && M.reg[b]) M.lru[M.nlru++] = b;
}
static int m_available(void) {
    int n = 0;
    for (int b = 0; b < SNB; b++) n += M.ref[b] == 0;
    return n;
}
/* the implementation handed out block b: was it the one to take? */
static void m_alloc(int32_t b) {
    assert_true(b >= 0 && b < SNB);
    if (m_available() > M.nlru) {
        assert_true(M.ref[b] == 0 && !M.reg[b]); /* a free block first */
    } else {
        assert_int_equal(b, M.lru[0]); /* else the least recently used */
        m_lru_remove(b);
        M.reg[b] = false;
    }
    M.ref[b] = 1;
}
static int32_t m_find(const int32_t *tok, int n) {
    for (int32_t b = 0; b < SNB; b++)
        if (M.reg[b] && M.prelen[b] == n && memcmp(M.pre[b], tok, (size_t)n * sizeof *tok) == 0) return b;
    return -1;
}

static void m_same(mseq *m) {
    same_seq(m->s, m->len, m->nb, m->table);
}

static kvant_code m_reserve(kv_pool *p, mseq *m, int n) {
    int want = (m->len + n + SB - 1) / SB;
    bool cow = n > 0 && m->len % SB && M.ref[m->table[m->len / SB]] > 1;
    int need = (want > m->nb ? want - m->nb : 0) + cow;
    bool ok = m->len + n <= SCTX && need <= m_available();
    kvant_code c = kv_seq_reserve(p, m->s, n, NULL);
    assert_int_equal(c, ok ? KVANT_OK : KVANT_ERR_FULL);
    if (ok) {
        const int32_t *t = kv_seq_table(m->s);
        if (cow) {
            int i = m->len / SB;
            int32_t old = m->table[i];
            m_alloc(t[i]);
            m_release(old);
            m->table[i] = t[i];
            M.cow++;
        }
        for (int i = m->nb; i < want; i++) {
            m_alloc(t[i]);
            m->table[i] = t[i];
        }
        if (want > m->nb) m->nb = want;
    }
    m_same(m);
    return c;
}

static void m_commit(kv_pool *p, mseq *m, const int32_t *tok, int n) {
    write_new(p, m->s, tok, n);
    kv_seq_commit(p, m->s, tok, n);
    memcpy(m->tok + m->len, tok, (size_t)n * sizeof *tok);
    m->len += n;
    for (int i = m->nfull; (i + 1) * SB <= m->len; i++) {
        int32_t same = m_find(m->tok, (i + 1) * SB), own = m->table[i];
        if (same >= 0) {
            m_acquire(same);
            m_release(own);
            m->table[i] = same;
            M.dedups++;
        } else {
            M.reg[own] = true;
            memcpy(M.pre[own], m->tok, (size_t)(i + 1) * SB * sizeof *m->tok);
            M.prelen[own] = (i + 1) * SB;
        }
        m->nfull = i + 1;
    }
    m_same(m);
}

static void m_match(kv_pool *p, mseq *m, const int32_t *prompt, int n) {
    int max = n > 1 ? (n - 1) / SB : 0, k = 0;
    for (; k < max; k++) {
        int32_t b = m_find(prompt, (k + 1) * SB);
        if (b < 0) break;
        m_acquire(b);
        m->table[k] = b;
    }
    m->nb = m->nfull = k;
    m->len = k * SB;
    memcpy(m->tok, prompt, (size_t)m->len * sizeof *prompt);
    M.hits += m->len;
    assert_int_equal(kv_prefix_match(p, m->s, prompt, n), m->len);
    m_same(m);
}

static void m_free(kv_pool *p, mseq *m) {
    for (int i = m->nb - 1; i >= 0; i--) m_release(m->table[i]);
    kv_seq_free(p, m->s);
    m->s = NULL;
}

static void m_fork(kv_pool *p, mseq *src, mseq *dst) {
    dst->s = fork_seq(p, src->s);
    dst->len = src->len;
    dst->nb = (src->len + SB - 1) / SB;
    dst->nfull = src->nfull;
    memcpy(dst->table, src->table, sizeof dst->table);
    memcpy(dst->tok, src->tok, sizeof dst->tok);
    for (int i = 0; i < dst->nb; i++) m_acquire(dst->table[i]);
    m_same(dst);
}

static void m_check(kv_pool *p) {
    int used = 0, cached = 0;
    for (int32_t b = 0; b < SNB; b++) {
        if (kv_pool_block_ref(p, b) != M.ref[b] || kv_pool_block_registered(p, b) != M.reg[b])
            fail_msg("block %d: ref %d registered %d, model %d %d", b, kv_pool_block_ref(p, b),
                     kv_pool_block_registered(p, b), M.ref[b], M.reg[b]);
        used += M.ref[b] > 0;
        cached += M.ref[b] == 0 && M.reg[b];
    }
    assert_int_equal(cached, M.nlru);
    expect_counts(p, used, cached, SNB - used - cached);
    kv_pool_stats s = stats(p);
    assert_int_equal(s.cow_copies, M.cow);
    assert_int_equal(s.prefix_hit_tokens, M.hits);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

static mseq *pick_live(void) {
    int n = 0, idx[SSEQ];
    for (int i = 0; i < SSEQ; i++)
        if (M.seq[i].s) idx[n++] = i;
    return n ? &M.seq[idx[rnd() % (uint32_t)n]] : NULL;
}
static mseq *pick_empty(void) {
    for (int i = 0; i < SSEQ; i++)
        if (!M.seq[i].s) return &M.seq[i];
    return NULL;
}

static void test_stress(void **state) {
    (void)state;
    memset(&M, 0, sizeof M);
    kv_pool *p = mkpool(KT_F32, 2, 32, SB, SNB, SCTX, SSEQ, true);
    int32_t tmpl[4][SCTX], tok[SCTX];
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < SCTX; i++) tmpl[t][i] = (int32_t)(1 + rnd() % 50);
    int fulls = 0, ops[5] = {0};
    for (int op = 0; op < SOPS; op++) {
        uint32_t r = rnd() % 100;
        mseq *m = r < 25 ? pick_empty() : pick_live(), *d;
        if (!m) continue;
        if (r < 25) { /* a new request: match, then compute the rest of the prompt */
            int n = 1 + (int)(rnd() % 40);
            memcpy(tok, tmpl[rnd() % 4], (size_t)n * sizeof *tok);
            if (rnd() % 10 < 3) tok[rnd() % (uint32_t)n] = (int32_t)(1000 + rnd() % 3);
            m->s = new_seq(p);
            m_match(p, m, tok, n);
            if (m_reserve(p, m, n - m->len) == KVANT_OK) m_commit(p, m, tok + m->len, n - m->len);
            else fulls++, m_free(p, m); /* a scheduler would wait and retry */
            ops[0]++;
        } else if (r < 60) { /* decode / chunk: tokens from a small alphabet */
            int n = 1 + (int)(rnd() % 6);
            for (int i = 0; i < n; i++) tok[i] = (int32_t)(1 + rnd() % 3);
            if (m_reserve(p, m, n) == KVANT_OK) m_commit(p, m, tok, n);
            else fulls++;
            ops[1]++;
        } else if (r < 72) { /* parallel sampling */
            if ((d = pick_empty())) m_fork(p, m, d), ops[2]++;
        } else if (r < 82) { /* reserve ahead, commit later */
            fulls += m_reserve(p, m, 1 + (int)(rnd() % 8)) != KVANT_OK;
            ops[3]++;
        } else {
            m_free(p, m);
            ops[4]++;
        }
        m_check(p);
        if (op % 97 == 0)
            for (int i = 0; i < SSEQ; i++)
                if (M.seq[i].s) check_rows(p, M.seq[i].s);
    }
    for (int i = 0; i < SSEQ; i++)
        if (M.seq[i].s) check_rows(p, M.seq[i].s), m_free(p, &M.seq[i]);
    m_check(p);
    kv_pool_stats s = stats(p);
    print_message("stress: %d new, %d append, %d fork, %d reserve, %d free; %d full, %lld cow, %d dedup, "
                  "%lld hit tokens, %lld evictions\n", ops[0], ops[1], ops[2], ops[3], ops[4], fulls,
                  (long long)M.cow, (int)M.dedups, (long long)M.hits, (long long)s.evictions);
    /* every path was taken, many times */
    assert_true(fulls > 100 && M.cow > 100 && M.dedups > 100 && M.hits > 1000 && s.evictions > 100);
    kv_pool_free(p);
}

/* the same over row-major blocks */
static void test_view_row_major(void **state) {
    g_row_major = true;
    test_view(state);
    g_row_major = false;
}
static void test_stress_row_major(void **state) {
    g_row_major = true;
    test_stress(state);
    g_row_major = false;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizing),      cmocka_unit_test(test_accounting), cmocka_unit_test(test_fork_cow),
        cmocka_unit_test(test_prefix_match), cmocka_unit_test(test_lru),        cmocka_unit_test(test_full),
        cmocka_unit_test(test_view),        cmocka_unit_test(test_stress),
        cmocka_unit_test(test_view_row_major), cmocka_unit_test(test_stress_row_major),
        cmocka_unit_test(test_release_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
