/* grammar/vocab.c - the vocabulary as a trie of byte strings, and the
 * token mask: the trie walked with the automaton (grammar_mask) beside the
 * plain per-token reference (grammar_mask_ref).
 *
 * The trie is stored in pre-order: node i's first child is i + 1, the next
 * sibling of a child c is end[c] (one past c's subtree), so a depth-first
 * walk is a forward scan and skipping a subtree is one jump.  Tokens are
 * numbered in the same order (order[] holds their ids): node i's own tokens
 * are order[tok[i] .. tok[i + 1]) and its subtree's order[tok[i] ..
 * tok[end[i]]).  set[i] names the bytes on every edge below i (deduplicated
 * in sets[]), for the whole-subtree test. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

enum { NO_SET = 0xFFFFFFFFu };

typedef struct {
    uint32_t end; /* one past the subtree */
    uint32_t tok; /* first token (index into order) of the subtree */
    uint32_t set; /* bytes below, or NO_SET for a leaf */
    uint8_t byte; /* the edge into this node */
} gnode;

struct grammar_vocab {
    int n_tokens;
    uint32_t n_nodes;
    gnode *node; /* (n_nodes + 1): the last is a sentinel whose tok is the token count */
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
    free(v->is_eog), free(v->eog);
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
    if (!v->blob || !refs) goto oom;
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
    v->node = malloc(cap * sizeof *v->node);
    v->order = malloc(((size_t)n_refs + 1) * sizeof *v->order);
    path = malloc(((size_t)v->max_len + 1) * sizeof *path);
    if (!v->node || !v->order || !path) goto oom;
    v->node[0] = (gnode){0, 0, NO_SET, 0};
    uint32_t n = 1;
    int depth = 0;
    path[0] = 0;
    const uint8_t *prev = NULL;
    for (int k = 0; k < n_refs; k++) {
        const uint8_t *p = refs[k].p;
        int len = refs[k].len;
        int lcp = 0;
        while (lcp < depth && lcp < len && prev[lcp] == p[lcp]) lcp++;
        while (depth > lcp) v->node[path[depth--]].end = n;
        while (depth < len) {
            if (n + 1 >= cap) {
                cap *= 2;
                gnode *q = realloc(v->node, cap * sizeof *q);
                if (!q) goto oom;
                v->node = q;
            }
            v->node[n] = (gnode){0, (uint32_t)k, NO_SET, p[depth]};
            path[++depth] = n++;
        }
        v->order[k] = refs[k].id;
        prev = p;
    }
    while (depth > 0) v->node[path[depth--]].end = n;
    v->node[0].end = n;
    v->node[n] = (gnode){n, (uint32_t)n_refs, NO_SET, 0}; /* sentinel */
    v->n_nodes = n;
    v->n_order = (uint32_t)n_refs;

    /* the bytes below each node, bottom up (children have larger indices) */
    below = malloc((size_t)n * sizeof *below);
    if (!below) goto oom;
    uint32_t hcap = 1024, n_sets = 0, scap = 256;
    hash = calloc(hcap, sizeof *hash);
    v->sets = malloc(scap * sizeof *v->sets);
    if (!hash || !v->sets) goto oom;
    for (uint32_t i = n; i-- > 0;) {
        gbits b = {{0}};
        for (uint32_t c = i + 1; c < v->node[i].end; c = v->node[c].end) {
            gbits_set(&b, v->node[c].byte);
            for (int w = 0; w < 4; w++) b.w[w] |= below[c].w[w];
        }
        below[i] = b;
        if (v->node[i].end == i + 1) continue; /* a leaf */
        if ((n_sets + 1) * 2 > hcap) {
            uint32_t nh = hcap * 2;
            uint32_t *h = calloc(nh, sizeof *h);
            if (!h) goto oom;
            for (uint32_t s = 0; s < n_sets; s++) {
                uint32_t q = hash_bits(&v->sets[s]) & (nh - 1);
                while (h[q]) q = (q + 1) & (nh - 1);
                h[q] = s + 1;
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
        v->node[i].set = hash[q] - 1;
    }
    v->n_sets = n_sets;
    free(refs), free(path), free(below), free(hash);
    core_ok(st);
    return v;
oom:
    free(refs), free(path), free(below), free(hash);
    grammar_vocab_free(v);
    core_fail(st, KVANT_ERR_NOMEM, "grammar_vocab_new: out of memory");
    return NULL;
}

int grammar_vocab_n_tokens(const grammar_vocab *v) { return v->n_tokens; }
size_t grammar_vocab_n_nodes(const grammar_vocab *v) { return v->n_nodes; }

/* ---- the mask ------------------------------------------------------------------------ */
static int mark(const grammar_vocab *v, uint32_t lo, uint32_t hi, uint8_t *allowed) {
    for (uint32_t k = lo; k < hi; k++) allowed[v->order[k]] = 1;
    return (int)(hi - lo);
}

static bool covers(const gbits *have, const gbits *need) {
    return !((need->w[0] & ~have->w[0]) | (need->w[1] & ~have->w[1]) | (need->w[2] & ~have->w[2]) |
             (need->w[3] & ~have->w[3]));
}

static int mark_eog(grammar_state *s, const grammar_vocab *v, uint8_t *allowed) {
    if (!gm_can_end_state(s, s->cur)) return 0;
    for (int i = 0; i < v->n_eog; i++) allowed[v->eog[i]] = 1;
    return v->n_eog;
}

/* the trie walk; -1 when the transition cache filled up (s->cache_full) */
static int walk(grammar_state *s, const grammar_vocab *v, uint8_t *allowed) {
    const gnode *nd = v->node;
    uint32_t S0 = s->cur;
    if (nd[0].set != NO_SET && covers(gm_loop(s, S0), &v->sets[nd[0].set])) return mark(v, 0, v->n_order, allowed);
    uint32_t *wend = s->wend, *wst = s->wst;
    int sp = 0, count = 0;
    wend[0] = nd[0].end;
    wst[0] = S0;
    uint32_t i = 1;
    for (;;) {
        while (i >= wend[sp])
            if (sp-- == 0) return s->cache_full ? -1 : count;
        uint32_t S = gm_next(s, wst[sp], nd[i].byte);
        if (!S) {
            i = nd[i].end;
            continue;
        }
        count += mark(v, nd[i].tok, nd[i + 1].tok, allowed);
        uint32_t end = nd[i].end;
        if (end == i + 1) {
            i++;
            continue;
        }
        /* every byte below leads S back to S: the whole subtree is allowed */
        if (covers(gm_loop(s, S), &v->sets[nd[i].set])) {
            count += mark(v, nd[i + 1].tok, nd[end].tok, allowed);
            i = end;
            continue;
        }
        sp++;
        wend[sp] = end;
        wst[sp] = S;
        i++;
    }
}

int grammar_mask(grammar_state *s, const grammar_vocab *v, uint8_t *allowed) {
    gm_begin(s);
    memset(allowed, 0, (size_t)v->n_tokens);
    if (s->ended) return 0;
    if (s->cap_walk < v->max_len + 2) {
        int cap = v->max_len + 2;
        uint32_t *a = realloc(s->wend, (size_t)cap * sizeof *a);
        if (a) s->wend = a;
        uint32_t *b = realloc(s->wst, (size_t)cap * sizeof *b);
        if (b) s->wst = b;
        if (!a || !b) {
            core_fail(&s->err, KVANT_ERR_NOMEM, "grammar: out of memory");
            return -1;
        }
        s->cap_walk = cap;
    }
    int count = walk(s, v, allowed);
    if (count < 0 && s->cache_full && s->err.code == KVANT_OK) {
        /* too many states met in one walk: drop the caches, answer plainly */
        gm_begin(s);
        return grammar_mask_ref(s, v, allowed);
    }
    if (s->err.code != KVANT_OK) return -1;
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
