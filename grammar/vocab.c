/* grammar/vocab.c - the vocabulary as a trie of byte strings, and the
 * token mask: the trie walked with the automaton (grammar_mask) beside the
 * plain per-token reference (grammar_mask_ref).
 *
 * Tokens are numbered in the trie's pre-order (order[] holds their ids), so
 * a node's own tokens and its subtree's are each one range of that order.
 * The nodes are stored breadth-first: a node's children are contiguous, so
 * the walk scans siblings sequentially and deciding about a whole subtree
 * (dead, or accepted whole) never touches memory far away; only a descent
 * jumps.  set names the bytes on every edge below a node (deduplicated in
 * sets[]), text / height feed the whole-subtree test. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

enum { NO_SET = 0xFFFFFFFFu };

typedef struct {
    uint32_t tok;     /* the subtree's tokens: order[tok .. tok_end) */
    uint32_t tok_end;
    uint32_t set;     /* bytes below, or NO_SET for a leaf */
    uint32_t child;   /* the first child (children are contiguous) */
    uint16_t n_child;
    uint16_t own;     /* tokens that end here: order[tok .. tok + own) */
    uint8_t byte;     /* the edge into this node */
    uint8_t u8;       /* UTF-8 decoder state after this node's bytes (U8_*) */
    uint8_t text;     /* at a character boundary, and everything below is valid UTF-8 (a last character may be cut) */
    uint8_t height;   /* the longest path below, in bytes (HEIGHT_MANY: that or more) */
} gnode;

/* the trie while it is built, in pre-order: the first child of i is i + 1,
 * the next sibling of c is end[c] */
typedef struct {
    uint32_t end, tok;
    uint8_t byte, u8;
} pnode;

enum { HEIGHT_MANY = 255 };

/* a UTF-8 decoder as a table-free state machine: at a boundary, inside a
 * character (how many bytes are left, and the special ranges after E0, ED,
 * F0, F4), or broken */
enum { U8_B, U8_C1, U8_C2, U8_C3, U8_E0, U8_ED, U8_F0, U8_F4, U8_BAD };

static uint8_t u8_next(uint8_t st, uint8_t b) {
    switch (st) {
    case U8_B:
        if (b < 0x80) return U8_B;
        if (b >= 0xC2 && b <= 0xDF) return U8_C1;
        if (b == 0xE0) return U8_E0;
        if (b == 0xED) return U8_ED;
        if (b >= 0xE1 && b <= 0xEF) return U8_C2;
        if (b == 0xF0) return U8_F0;
        if (b >= 0xF1 && b <= 0xF3) return U8_C3;
        if (b == 0xF4) return U8_F4;
        return U8_BAD;
    case U8_C1: return b >= 0x80 && b <= 0xBF ? U8_B : U8_BAD;
    case U8_C2: return b >= 0x80 && b <= 0xBF ? U8_C1 : U8_BAD;
    case U8_C3: return b >= 0x80 && b <= 0xBF ? U8_C2 : U8_BAD;
    case U8_E0: return b >= 0xA0 && b <= 0xBF ? U8_C1 : U8_BAD;
    case U8_ED: return b >= 0x80 && b <= 0x9F ? U8_C1 : U8_BAD;
    case U8_F0: return b >= 0x90 && b <= 0xBF ? U8_C2 : U8_BAD;
    case U8_F4: return b >= 0x80 && b <= 0x8F ? U8_C2 : U8_BAD;
    default: return U8_BAD;
    }
}

struct grammar_vocab {
    int n_tokens;
    uint32_t n_nodes;
    gnode *node; /* (n_nodes), breadth-first; node 0 is the root */
    int32_t *order;
    uint32_t n_order;
    gbits *sets;
    uint32_t n_sets;
    uint8_t *blob;     /* every token's bytes */
    uint64_t *tok_off; /* (n_tokens) */
    int *tok_len;      /* (n_tokens); 0: never allowed */
    uint8_t *is_eog;   /* (n_tokens) */
    int32_t *eog;
    int n_eog;
    int32_t *outside; /* tokens not in the trie (no bytes, or eog) */
    int n_outside;
    int max_len;
};

typedef struct {
    const uint8_t *p;
    int len;
    int32_t id;
} tok_ref;

static int cmp_tok(const void *x, const void *y) {
    const tok_ref *a = x, *b = y;
    int n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->p, b->p, (size_t)n) : 0;
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static uint32_t hash_bits(const gbits *b) {
    uint64_t h = b->w[0] * 0x9E3779B97F4A7C15ull ^ b->w[1] * 0xC2B2AE3D27D4EB4Full ^
                 b->w[2] * 0x165667B19E3779F9ull ^ b->w[3] * 0x27D4EB2F165667C5ull;
    return (uint32_t)(h >> 32) ^ (uint32_t)h;
}

void grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    free(v->node), free(v->order), free(v->sets), free(v->blob), free(v->tok_off), free(v->tok_len);
    free(v->is_eog), free(v->eog), free(v->outside);
    free(v);
}

grammar_vocab *grammar_vocab_new(const uint8_t *const *bytes, const int *lens, int n_tokens, const int32_t *eog,
                                 int n_eog, kvant_status *st) {
    if (n_tokens <= 0 || !lens || (!bytes && n_tokens) || n_eog < 0 || (n_eog && !eog)) {
        core_fail(st, KVANT_ERR_ARG, "grammar_vocab_new: bad arguments");
        return NULL;
    }
    grammar_vocab *v = calloc(1, sizeof *v);
    tok_ref *refs = NULL;
    uint32_t *path = NULL;
    gbits *below = NULL;
    uint32_t *hash = NULL;
    uint8_t *valid = NULL;
    pnode *pre = NULL;
    uint32_t *bfs = NULL;
    if (!v) goto oom;
    v->n_tokens = n_tokens;
    v->tok_off = malloc((size_t)n_tokens * sizeof *v->tok_off);
    v->tok_len = malloc((size_t)n_tokens * sizeof *v->tok_len);
    v->is_eog = calloc((size_t)n_tokens, 1);
    v->eog = malloc(((size_t)n_eog + 1) * sizeof *v->eog);
    if (!v->tok_off || !v->tok_len || !v->is_eog || !v->eog) goto oom;
    for (int i = 0; i < n_eog; i++) {
        if (eog[i] < 0 || eog[i] >= n_tokens) {
            core_fail(st, KVANT_ERR_ARG, "grammar_vocab_new: eog token %d outside the vocabulary of %d", eog[i],
                      n_tokens);
            grammar_vocab_free(v);
            return NULL;
        }
        if (!v->is_eog[eog[i]]) v->eog[v->n_eog++] = eog[i];
        v->is_eog[eog[i]] = 1;
    }
    uint64_t total = 0;
    int n_refs = 0;
    for (int i = 0; i < n_tokens; i++) {
        int len = lens[i] > 0 && bytes[i] && !v->is_eog[i] ? lens[i] : 0;
        v->tok_len[i] = len;
        v->tok_off[i] = total;
        total += (uint64_t)len;
        if (len) n_refs++;
        if (len > v->max_len) v->max_len = len;
    }
    v->blob = malloc(total + 1);
    refs = malloc(((size_t)n_refs + 1) * sizeof *refs);
    v->outside = malloc(((size_t)(n_tokens - n_refs) + 1) * sizeof *v->outside);
    if (!v->blob || !refs || !v->outside) goto oom;
    for (int i = 0; i < n_tokens; i++)
        if (!v->tok_len[i]) v->outside[v->n_outside++] = i;
    n_refs = 0;
    for (int i = 0; i < n_tokens; i++) {
        if (!v->tok_len[i]) continue;
        memcpy(v->blob + v->tok_off[i], bytes[i], (size_t)v->tok_len[i]);
        refs[n_refs++] = (tok_ref){v->blob + v->tok_off[i], v->tok_len[i], i};
    }
    qsort(refs, (size_t)n_refs, sizeof *refs, cmp_tok);

    /* the trie, in pre-order, from the sorted strings: each string shares
     * its longest common prefix with the one before */
    uint64_t cap = 1024;
    pre = malloc(cap * sizeof *pre);
    v->order = malloc(((size_t)n_refs + 1) * sizeof *v->order);
    path = malloc(((size_t)v->max_len + 1) * sizeof *path);
    if (!pre || !v->order || !path) goto oom;
    pre[0] = (pnode){0, 0, 0, U8_B};
    uint32_t n = 1;
    int depth = 0;
    path[0] = 0;
    const uint8_t *prev = NULL;
    for (int k = 0; k < n_refs; k++) {
        const uint8_t *p = refs[k].p;
        int len = refs[k].len;
        int lcp = 0;
        while (lcp < depth && lcp < len && prev[lcp] == p[lcp]) lcp++;
        while (depth > lcp) pre[path[depth--]].end = n;
        while (depth < len) {
            if (n + 1 >= cap) {
                cap *= 2;
                pnode *q = realloc(pre, cap * sizeof *q);
                if (!q) goto oom;
                pre = q;
            }
            pre[n] = (pnode){0, (uint32_t)k, p[depth], u8_next(pre[path[depth]].u8, p[depth])};
            path[++depth] = n++;
        }
        v->order[k] = refs[k].id;
        prev = p;
    }
    while (depth > 0) pre[path[depth--]].end = n;
    pre[0].end = n;
    pre[n] = (pnode){n, (uint32_t)n_refs, 0, U8_B}; /* sentinel: tok = the token count */
    v->n_nodes = n;
    v->n_order = (uint32_t)n_refs;

    /* breadth-first: pre-order index -> final index, children contiguous */
    v->node = calloc(n, sizeof *v->node);
    bfs = malloc((size_t)n * sizeof *bfs);
    if (!v->node || !bfs) goto oom;
    bfs[0] = 0;
    uint32_t filled = 1;
    for (uint32_t q = 0; q < filled; q++) {
        uint32_t i = bfs[q];
        gnode *g = &v->node[q];
        g->byte = pre[i].byte;
        g->u8 = pre[i].u8;
        g->tok = pre[i].tok;
        g->tok_end = pre[pre[i].end].tok;
        g->set = NO_SET;
        g->child = filled;
        uint32_t own = (i + 1 < n ? pre[i + 1].tok : (uint32_t)n_refs) - pre[i].tok;
        if (own > UINT16_MAX) {
            core_fail(st, KVANT_ERR_ARG, "grammar_vocab_new: more than %d tokens with the same bytes", UINT16_MAX);
            goto fail;
        }
        g->own = (uint16_t)own;
        for (uint32_t c = i + 1; c < pre[i].end; c = pre[c].end) bfs[filled++] = c;
        g->n_child = (uint16_t)(filled - g->child);
    }

    /* the bytes below each node, bottom up (a breadth-first order reversed
     * puts children before parents) */
    below = malloc((size_t)n * sizeof *below);
    if (!below) goto oom;
    uint32_t hcap = 1024, n_sets = 0, scap = 256;
    hash = calloc(hcap, sizeof *hash);
    v->sets = malloc(scap * sizeof *v->sets);
    valid = malloc(n); /* everything below is valid UTF-8 */
    if (!hash || !v->sets || !valid) goto oom;
    for (uint32_t i = n; i-- > 0;) {
        gnode *g = &v->node[i];
        gbits b = {{0}};
        valid[i] = 1;
        for (uint32_t c = g->child; c < g->child + g->n_child; c++) {
            gbits_set(&b, v->node[c].byte);
            for (int w = 0; w < 4; w++) b.w[w] |= below[c].w[w];
            if (v->node[c].u8 == U8_BAD || !valid[c]) valid[i] = 0;
            unsigned h = v->node[c].height + 1u;
            if (h > g->height) g->height = (uint8_t)(h < HEIGHT_MANY ? h : HEIGHT_MANY);
        }
        below[i] = b;
        g->text = valid[i] && g->u8 == U8_B;
        if (!g->n_child) continue; /* a leaf */
        if ((n_sets + 1) * 2 > hcap) {
            uint32_t nh = hcap * 2;
            uint32_t *h = calloc(nh, sizeof *h);
            if (!h) goto oom;
            for (uint32_t t = 0; t < n_sets; t++) {
                uint32_t q = hash_bits(&v->sets[t]) & (nh - 1);
                while (h[q]) q = (q + 1) & (nh - 1);
                h[q] = t + 1;
            }
            free(hash);
            hash = h;
            hcap = nh;
        }
        uint32_t q = hash_bits(&b) & (hcap - 1);
        for (; hash[q]; q = (q + 1) & (hcap - 1))
            if (!memcmp(&v->sets[hash[q] - 1], &b, sizeof b)) break;
        if (!hash[q]) {
            if (n_sets == scap) {
                scap *= 2;
                gbits *ns = realloc(v->sets, scap * sizeof *ns);
                if (!ns) goto oom;
                v->sets = ns;
            }
            v->sets[n_sets] = b;
            hash[q] = ++n_sets;
        }
        g->set = hash[q] - 1;
    }
    v->n_sets = n_sets;
    free(refs), free(path), free(below), free(hash), free(valid), free(pre), free(bfs);
    core_ok(st);
    return v;
oom:
    core_fail(st, KVANT_ERR_NOMEM, "grammar_vocab_new: out of memory");
fail:
    free(refs), free(path), free(below), free(hash), free(valid), free(pre), free(bfs);
    grammar_vocab_free(v);
    return NULL;
}

int grammar_vocab_n_tokens(const grammar_vocab *v) { return v->n_tokens; }
size_t grammar_vocab_n_nodes(const grammar_vocab *v) { return v->n_nodes; }

/* ---- the mask ------------------------------------------------------------------------
 * The walk collects the allowed tokens as ranges of trie order (a subtree
 * is one range); writing them out by id is a scatter, so when most of the
 * vocabulary is allowed (free text) the array is set to 1 and only the gaps
 * are cleared. */
static bool grow_ranges(grammar_state *s) {
    size_t cap = s->cap_ranges ? s->cap_ranges * 2 : 1024;
    uint32_t *p = realloc(s->ranges, cap * 2 * sizeof *p);
    if (!p) {
        core_fail(&s->err, KVANT_ERR_NOMEM, "grammar: out of memory");
        return false;
    }
    s->ranges = p;
    s->cap_ranges = cap;
    return true;
}

static inline bool add_range(grammar_state *s, uint32_t lo, uint32_t hi) {
    if (lo == hi) return true;
    if (s->n_ranges && s->ranges[2 * s->n_ranges - 1] == lo) {
        s->ranges[2 * s->n_ranges - 1] = hi;
        return true;
    }
    if (s->n_ranges == s->cap_ranges && !grow_ranges(s)) return false;
    s->ranges[2 * s->n_ranges] = lo;
    s->ranges[2 * s->n_ranges + 1] = hi;
    s->n_ranges++;
    return true;
}

static void write_ranges(const uint32_t *r, size_t n, const grammar_vocab *v, uint32_t count, uint8_t *allowed) {
    if (count * 2 <= v->n_order) {
        memset(allowed, 0, (size_t)v->n_tokens);
        for (size_t k = 0; k < n; k++)
            for (uint32_t t = r[2 * k]; t < r[2 * k + 1]; t++) allowed[v->order[t]] = 1;
        return;
    }
    memset(allowed, 1, (size_t)v->n_tokens);
    for (int i = 0; i < v->n_outside; i++) allowed[v->outside[i]] = 0;
    uint32_t t = 0;
    for (size_t k = 0; k <= n; k++) {
        uint32_t lo = k < n ? r[2 * k] : v->n_order;
        for (; t < lo; t++) allowed[v->order[t]] = 0;
        if (k < n) t = r[2 * k + 1];
    }
}

/* The whole subtree below node i is allowed from S (non-dead) when its
 * bytes are text that S steps through one character at a time: from S, T1,
 * T2 ... (gm_text) as deep as the subtree goes, every ASCII byte below leads
 * Tk to Tk+1, and so does every non-ASCII character if there are any (then
 * node i must be at a character boundary with valid UTF-8 below; a cut last
 * character is a prefix of one that leads on, so it is alive too).  Inside a
 * string Tk+1 = Tk (a loop: any depth); under maxLength the chain counts
 * down and must outlast the subtree. */
static inline bool whole(grammar_state *s, const grammar_vocab *v, const gnode *nd, uint32_t S) {
    const gbits *need = &v->sets[nd->set];
    bool high = need->w[2] | need->w[3];
    if (high && !nd->text) return false;
    unsigned depth = nd->height;
    uint32_t T = S;
    for (unsigned k = 0; k < depth || depth == HEIGHT_MANY; k++) {
        uint32_t next;
        const gbits *have;
        bool u8 = gm_text(s, T, &next, &have);
        if (!next || (need->w[0] & ~have->w[0]) || (need->w[1] & ~have->w[1]) || (high && !u8)) return false;
        if (next == T) return true; /* a loop */
        if (k >= 4 * HEIGHT_MANY) return false;
        T = next;
    }
    return true;
}

static int mark_eog(grammar_state *s, const grammar_vocab *v, uint8_t *allowed) {
    if (!gm_can_end_state(s, s->cur)) return 0;
    for (int i = 0; i < v->n_eog; i++) allowed[v->eog[i]] = 1;
    return v->n_eog;
}

/* the trie walk into s->ranges; the count of allowed tokens, -1 when the
 * transition cache filled up (s->cache_full) or memory ran out.  A stack
 * frame is a run of siblings still to try (next, end) and their parent's
 * state. */
static int walk(grammar_state *s, const grammar_vocab *v) {
    const gnode *nd = v->node;
    uint32_t S0 = s->cur;
    s->n_ranges = 0;
    if (nd[0].set != NO_SET && whole(s, v, &nd[0], S0)) return add_range(s, 0, v->n_order) ? (int)v->n_order : -1;
    uint32_t *wnext = s->wend, *wend = s->wnext, *wst = s->wst;
    int sp = 0;
    uint32_t count = 0;
    wnext[0] = nd[0].child;
    wend[0] = nd[0].child + nd[0].n_child;
    wst[0] = S0;
    for (;;) {
        if (wnext[sp] == wend[sp]) {
            if (sp-- == 0) return s->cache_full || s->err.code != KVANT_OK ? -1 : (int)count;
            continue;
        }
        const gnode *c = &nd[wnext[sp]++];
        uint32_t S = gm_next(s, wst[sp], c->byte);
        if (!S) continue;
        if (!c->n_child || whole(s, v, c, S)) { /* a leaf, or all of it */
            count += c->tok_end - c->tok;
            if (!add_range(s, c->tok, c->tok_end)) return -1;
            continue;
        }
        count += c->own;
        if (!add_range(s, c->tok, c->tok + c->own)) return -1;
        sp++;
        wnext[sp] = c->child;
        wend[sp] = c->child + c->n_child;
        wst[sp] = S;
    }
}

int grammar_mask(grammar_state *s, const grammar_vocab *v, uint8_t *allowed) {
    gm_begin(s);
    if (s->ended) {
        memset(allowed, 0, (size_t)v->n_tokens);
        return 0;
    }
    if (s->cap_walk < v->max_len + 2) {
        int cap = v->max_len + 2;
        uint32_t *a = realloc(s->wend, (size_t)cap * sizeof *a);
        if (a) s->wend = a;
        uint32_t *b = realloc(s->wst, (size_t)cap * sizeof *b);
        if (b) s->wst = b;
        uint32_t *c = realloc(s->wnext, (size_t)cap * sizeof *c);
        if (c) s->wnext = c;
        if (!a || !b || !c) {
            core_fail(&s->err, KVANT_ERR_NOMEM, "grammar: out of memory");
            return -1;
        }
        s->cap_walk = cap;
    }
    for (int k = 0; k < GM_MEMO; k++)
        if (s->memo[k].v == v && s->memo[k].state == s->cur) {
            s->memo[k].used = ++s->memo_clock;
            write_ranges(s->memo[k].ranges, s->memo[k].n_ranges, v, s->memo[k].count, allowed);
            return (int)s->memo[k].count + mark_eog(s, v, allowed);
        }
    s->in_walk = true;
    int count = walk(s, v);
    s->in_walk = false;
    if (count >= 0 && s->n_ranges <= GM_MEMO_MAX_RANGES) { /* remembered in the least recently used slot */
        int k = 0;
        for (int j = 1; j < GM_MEMO; j++)
            if (s->memo[j].used < s->memo[k].used) k = j;
        if (s->memo[k].cap < s->n_ranges) {
            uint32_t *p = realloc(s->memo[k].ranges, s->n_ranges * 2 * sizeof *p);
            if (p) s->memo[k].ranges = p, s->memo[k].cap = s->n_ranges;
        }
        if (s->memo[k].cap >= s->n_ranges) {
            if (s->n_ranges) memcpy(s->memo[k].ranges, s->ranges, s->n_ranges * 2 * sizeof *s->ranges);
            s->memo[k].n_ranges = s->n_ranges;
            s->memo[k].v = v;
            s->memo[k].state = s->cur;
            s->memo[k].count = (uint32_t)count;
            s->memo[k].used = ++s->memo_clock;
        }
    }
    if (count < 0 && s->cache_full && s->err.code == KVANT_OK) {
        /* too many states met in one walk: drop the caches, answer plainly */
        gm_begin(s);
        return grammar_mask_ref(s, v, allowed);
    }
    if (count < 0 || s->err.code != KVANT_OK) {
        memset(allowed, 0, (size_t)v->n_tokens);
        return -1;
    }
    write_ranges(s->ranges, s->n_ranges, v, (uint32_t)count, allowed);
    return count + mark_eog(s, v, allowed);
}

int grammar_mask_ref(grammar_state *s, const grammar_vocab *v, uint8_t *allowed) {
    core_ok(&s->err);
    memset(allowed, 0, (size_t)v->n_tokens);
    if (s->ended) return 0;
    /* copied: the steps below may grow the state table */
    int n0 = (int)s->slen[s->cur];
    uint32_t *cur = malloc(((size_t)n0 + 1) * sizeof *cur);
    if (!cur) {
        core_fail(&s->err, KVANT_ERR_NOMEM, "grammar: out of memory");
        return -1;
    }
    memcpy(cur, s->sfr + s->soff[s->cur], (size_t)n0 * sizeof *cur);
    int count = 0;
    for (int t = 0; t < v->n_tokens && s->err.code == KVANT_OK; t++) {
        int len = v->tok_len[t];
        if (!len) continue;
        const uint8_t *p = v->blob + v->tok_off[t];
        const uint32_t *in = cur;
        int n = n0;
        for (int k = 0; k < len && n > 0; k++) {
            uint32_t *out = s->buf[k & 1];
            n = gm_step_raw(s, in, n, p[k], out);
            in = out;
        }
        if (n > 0) allowed[t] = 1, count++;
    }
    free(cur);
    if (s->err.code != KVANT_OK) return -1;
    return count + mark_eog(s, v, allowed);
}

void grammar_apply_mask(const uint8_t *allowed, float *logits, int n_tokens) {
    for (int i = 0; i < n_tokens; i++)
        if (!allowed[i]) logits[i] = -INFINITY;
}

/* the state after token t from S (0: refused) */
static uint32_t after_token(grammar_state *s, const grammar_vocab *v, uint32_t S, int32_t t) {
    int len = v->tok_len[t];
    if (!len) return 0;
    const uint8_t *p = v->blob + v->tok_off[t];
    for (int k = 0; k < len && S; k++) S = gm_next(s, S, p[k]);
    return S;
}

bool grammar_allows(grammar_state *s, const grammar_vocab *v, int32_t token) {
    gm_begin(s);
    if (s->ended || token < 0 || token >= v->n_tokens) return false;
    if (v->is_eog[token]) return gm_can_end_state(s, s->cur);
    return after_token(s, v, s->cur, token) != 0;
}

bool grammar_accept(grammar_state *s, const grammar_vocab *v, int32_t token) {
    gm_begin(s);
    if (s->ended || token < 0 || token >= v->n_tokens) return false;
    if (v->is_eog[token]) {
        if (!gm_can_end_state(s, s->cur)) return false;
        s->ended = true;
        return true;
    }
    uint32_t S = after_token(s, v, s->cur, token);
    if (!S) return false;
    s->cur = S;
    return true;
}
