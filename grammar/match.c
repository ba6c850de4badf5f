/* grammar/match.c - the pushdown automaton: persistent stacks (frames),
 * states as hash-consed sets of stack tops, the step on one byte, and the
 * cached transitions (a DFA built lazily from the states met).  Layout in
 * grammar_impl.h; the contract in grammar.h. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

/* Soft limits: over them the caches are rebuilt from the current state at
 * the start of the next call.  Hard limit (transition cells): a mask walk
 * that passes it stops and the reference path answers instead. */
enum {
    FR_SOFT = 1 << 18,    /* frames (~20 B each) */
    SFR_SOFT = 1 << 20,   /* frame ids in all states (4 B each) */
    CELLS_SOFT = 1 << 20, /* transition cells, states x classes (4 B each) */
    CELLS_HARD = 1 << 23,
};

static uint32_t hash2(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 29) ^ (uint32_t)h;
}

static bool fail(grammar_state *s, kvant_code code, const char *msg) {
    if (s->err.code == KVANT_OK) core_fail(&s->err, code, "%s", msg);
    return false;
}

/* ---- frames ---------------------------------------------------------------------- */
static bool fr_grow(grammar_state *s) {
    uint32_t cap = s->cap_fr ? s->cap_fr * 2 : 1024;
    uint32_t *p = realloc(s->fpos, cap * sizeof *p);
    if (!p) return false;
    s->fpos = p;
    p = realloc(s->fpar, cap * sizeof *p);
    if (!p) return false;
    s->fpar = p;
    p = realloc(s->stamp, cap * sizeof *p);
    if (!p) return false;
    memset(p + s->cap_fr, 0, (cap - s->cap_fr) * sizeof *p);
    s->stamp = p;
    s->cap_fr = cap;
    /* the hash table at most half full */
    uint32_t hc = cap * 2;
    uint32_t *h = calloc(hc, sizeof *h);
    if (!h) return false;
    for (uint32_t i = 1; i < s->n_fr; i++) {
        uint32_t k = hash2(s->fpos[i], s->fpar[i]) & (hc - 1);
        while (h[k]) k = (k + 1) & (hc - 1);
        h[k] = i;
    }
    free(s->fhash);
    s->fhash = h;
    s->fhcap = hc;
    return true;
}

/* the frame (pos, par), made when new; UINT32_MAX when out of memory */
static uint32_t fr_intern(grammar_state *s, uint32_t pos, uint32_t par) {
    uint32_t k = hash2(pos, par) & (s->fhcap - 1);
    for (uint32_t id; (id = s->fhash[k]) != 0; k = (k + 1) & (s->fhcap - 1))
        if (s->fpos[id] == pos && s->fpar[id] == par) return id;
    if (s->n_fr == s->cap_fr) {
        if (!fr_grow(s)) {
            fail(s, KVANT_ERR_NOMEM, "grammar: out of memory");
            return UINT32_MAX;
        }
        k = hash2(pos, par) & (s->fhcap - 1);
        while (s->fhash[k]) k = (k + 1) & (s->fhcap - 1);
    }
    uint32_t id = s->n_fr++;
    s->fpos[id] = pos;
    s->fpar[id] = par;
    s->stamp[id] = 0;
    s->fhash[k] = id;
    return id;
}

/* ---- closure: positions to stack tops ----------------------------------------------
 * s->work holds (pos, parent) pairs still to expand.  A position at the end
 * of an alternative returns to its parent (or completes the grammar); a rule
 * reference pushes a return frame (none for a tail call, so right recursion
 * and repetition do not grow the stacks) and expands each alternative; a
 * byte set is a stack top.  Each (pos, parent) is expanded once per closure
 * (stamps), which also ends cycles of tail calls. */
static bool work_push(grammar_state *s, uint32_t pos, uint32_t par) {
    if (s->n_work + 2 > s->cap_work) {
        size_t cap = s->cap_work ? s->cap_work * 2 : 256;
        uint32_t *p = realloc(s->work, cap * sizeof *p);
        if (!p) return fail(s, KVANT_ERR_NOMEM, "grammar: out of memory");
        s->work = p;
        s->cap_work = cap;
    }
    s->work[s->n_work++] = pos;
    s->work[s->n_work++] = par;
    return true;
}

static void sort_u32(uint32_t *a, int n) {
    for (int i = 1; i < n; i++) {
        uint32_t x = a[i];
        int j = i - 1;
        while (j >= 0 && a[j] > x) a[j + 1] = a[j], j--;
        a[j + 1] = x;
    }
}

static int cmp_u32(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

static void sort_frames(uint32_t *a, int n) {
    if (n < 32) sort_u32(a, n);
    else qsort(a, (size_t)n, sizeof *a, cmp_u32);
}

static int closure(grammar_state *s, uint32_t *out) {
    const grammar *g = s->g;
    if (++s->gen == 0) { /* wrapped: old stamps could collide */
        memset(s->stamp, 0, s->cap_fr * sizeof *s->stamp);
        s->gen = 1;
    }
    int n = 0;
    bool nil = false;
    while (s->n_work) {
        uint32_t par = s->work[--s->n_work];
        uint32_t pos = s->work[--s->n_work];
        uint32_t e = g->elems[pos];
        while (e == GE_END) {
            if (par == 0) break;
            pos = s->fpos[par];
            par = s->fpar[par];
            e = g->elems[pos];
        }
        if (e == GE_END) {
            nil = true;
            continue;
        }
        uint32_t id = fr_intern(s, pos, par);
        if (id == UINT32_MAX) goto bad;
        if (s->stamp[id] == s->gen) continue;
        s->stamp[id] = s->gen;
        if (GE_KIND(e) == GE_TERM) {
            if (n >= GRAMMAR_MAX_STACKS) {
                fail(s, KVANT_ERR_UNSUPPORTED,
                     "grammar too ambiguous: a state would hold more than GRAMMAR_MAX_STACKS stacks");
                goto bad;
            }
            out[n++] = id;
        } else {
            uint32_t r = GE_VAL(e);
            uint32_t ret = par;
            if (g->elems[pos + 1] != GE_END) {
                ret = fr_intern(s, pos + 1, par);
                if (ret == UINT32_MAX) goto bad;
            }
            for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
                if (!work_push(s, g->alts[a], ret)) goto bad;
        }
    }
    if (nil) out[n++] = 0; /* room: out holds GRAMMAR_MAX_STACKS + 1 */
    sort_frames(out, n);
    return n;
bad:
    s->n_work = 0;
    return -1;
}

int gm_step_raw(grammar_state *s, const uint32_t *in, int n, uint8_t byte, uint32_t *out) {
    const grammar *g = s->g;
    s->n_work = 0;
    for (int i = 0; i < n; i++) {
        uint32_t f = in[i];
        if (f == 0) continue; /* complete: takes no more bytes */
        uint32_t pos = s->fpos[f];
        if (gbits_has(&g->sets[GE_VAL(g->elems[pos])], byte) && !work_push(s, pos + 1, s->fpar[f])) return -1;
    }
    return closure(s, out);
}

static int initial(grammar_state *s, uint32_t *out) {
    const grammar *g = s->g;
    s->n_work = 0;
    for (uint32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        if (!work_push(s, g->alts[a], 0)) return -1;
    return closure(s, out);
}

/* ---- states ------------------------------------------------------------------------- */
static uint32_t hash_list(const uint32_t *f, int n) {
    uint32_t h = 0x811C9DC5u ^ (uint32_t)n;
    for (int i = 0; i < n; i++) h = hash2(h, f[i]);
    return h;
}

static bool st_grow(grammar_state *s) {
    uint32_t cap = s->cap_st ? s->cap_st * 2 : 256;
    uint32_t nc = s->g->n_cls;
    uint32_t *p = realloc(s->soff, cap * sizeof *p);
    if (!p) return false;
    s->soff = p;
    p = realloc(s->slen, cap * sizeof *p);
    if (!p) return false;
    s->slen = p;
    p = realloc(s->trans, (size_t)cap * nc * sizeof *p);
    if (!p) return false;
    s->trans = p;
    p = realloc(s->tnext, cap * sizeof *p);
    if (!p) return false;
    s->tnext = p;
    gbits *l = realloc(s->tbits, cap * sizeof *l);
    if (!l) return false;
    s->tbits = l;
    uint8_t *d = realloc(s->tflags, cap);
    if (!d) return false;
    s->tflags = d;
    s->cap_st = cap;
    uint32_t hc = cap * 2;
    uint32_t *h = calloc(hc, sizeof *h);
    if (!h) return false;
    for (uint32_t i = 1; i < s->n_st; i++) {
        uint32_t k = hash_list(s->sfr + s->soff[i], (int)s->slen[i]) & (hc - 1);
        while (h[k]) k = (k + 1) & (hc - 1);
        h[k] = i;
    }
    free(s->shash);
    s->shash = h;
    s->shcap = hc;
    return true;
}

/* the state of frames f[0..n) (sorted), made when new; 0 for n == 0;
 * UINT32_MAX when out of memory */
static uint32_t st_intern(grammar_state *s, const uint32_t *f, int n) {
    if (n <= 0) return 0;
    uint32_t hh = hash_list(f, n);
    uint32_t k = hh & (s->shcap - 1);
    for (uint32_t id; (id = s->shash[k]) != 0; k = (k + 1) & (s->shcap - 1))
        if (s->slen[id] == (uint32_t)n && !memcmp(s->sfr + s->soff[id], f, (size_t)n * sizeof *f)) return id;
    if (s->n_st == s->cap_st) {
        if (!st_grow(s)) goto oom;
        k = hh & (s->shcap - 1);
        while (s->shash[k]) k = (k + 1) & (s->shcap - 1);
    }
    if (s->n_sfr + (size_t)n > s->cap_sfr) {
        size_t cap = s->cap_sfr ? s->cap_sfr : 1024;
        while (cap < s->n_sfr + (size_t)n) cap *= 2;
        uint32_t *p = realloc(s->sfr, cap * sizeof *p);
        if (!p) goto oom;
        s->sfr = p;
        s->cap_sfr = cap;
    }
    uint32_t id = s->n_st++;
    s->soff[id] = (uint32_t)s->n_sfr;
    s->slen[id] = (uint32_t)n;
    memcpy(s->sfr + s->n_sfr, f, (size_t)n * sizeof *f);
    s->n_sfr += (size_t)n;
    for (uint32_t c = 0; c < s->g->n_cls; c++) s->trans[(size_t)id * s->g->n_cls + c] = GM_UNKNOWN;
    s->tflags[id] = 0;
    s->shash[k] = id;
    return id;
oom:
    fail(s, KVANT_ERR_NOMEM, "grammar: out of memory");
    return UINT32_MAX;
}

/* empties the state table (state 0, dead, stays) */
static void st_clear(grammar_state *s) {
    s->n_st = 1;
    s->n_sfr = 0;
    memset(s->shash, 0, s->shcap * sizeof *s->shash);
    for (uint32_t c = 0; c < s->g->n_cls; c++) s->trans[c] = 0; /* dead stays dead */
    s->tnext[0] = 0;
    memset(&s->tbits[0], 0, sizeof s->tbits[0]);
    s->tflags[0] = GM_TEXT_DONE;
}

uint32_t gm_next_slow(grammar_state *s, uint32_t S, uint8_t byte) {
    const grammar *g = s->g;
    uint32_t t;
    /* only a walk stops at the hard cap (and answers by the reference);
     * a token's few bytes may always pass, compaction bounds them */
    if (s->in_walk && (size_t)s->n_st * g->n_cls > s->lim_cells_hard) {
        s->cache_full = true;
        return 0;
    }
    int n = gm_step_raw(s, s->sfr + s->soff[S], (int)s->slen[S], byte, s->buf[0]);
    t = n < 0 ? 0 : st_intern(s, s->buf[0], n);
    if (t == UINT32_MAX) return 0;
    s->trans[(size_t)S * g->n_cls + g->cls[byte]] = t; /* st_intern may have moved trans */
    return t;
}


/* The valid non-ASCII UTF-8 characters as byte-range sequences (RFC 3629). */
static const uint8_t utf8_shapes[8][4][2] = {
    {{0xC2, 0xDF}, {0x80, 0xBF}},
    {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
    {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
    {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
};
static const int utf8_shape_len[8] = {2, 3, 3, 3, 3, 4, 4, 4};

/* every byte sequence of shape k from position j on, from state T, ends at
 * S; bytes of one class step alike, so one byte per class is tried.
 * *budget bounds the work (false when it runs out: "no") */
static bool shape_to(grammar_state *s, uint32_t S, uint32_t T, int k, int j, int *budget) {
    if (j >= utf8_shape_len[k] || j >= 4) return T == S;
    const grammar *g = s->g;
    uint8_t seen[256 / 8] = {0};
    for (unsigned b = utf8_shapes[k][j][0]; b <= utf8_shapes[k][j][1]; b++) {
        uint8_t c = g->cls[b];
        if (seen[c >> 3] >> (c & 7) & 1) continue;
        seen[c >> 3] |= (uint8_t)(1u << (c & 7));
        if (--*budget < 0) return false;
        uint32_t U = gm_next(s, T, (uint8_t)b);
        if (!U || !shape_to(s, S, U, k, j + 1, budget)) return false;
    }
    return true;
}

bool gm_text_slow(grammar_state *s, uint32_t S) {
    {
        /* the non-dead state most ASCII bytes lead to */
        uint32_t to[128], best = 0;
        int best_n = 0;
        for (int b = 0; b < 128; b++) to[b] = gm_next(s, S, (uint8_t)b);
        for (int b = 0; b < 128; b++) {
            if (!to[b] || (b && to[b] == to[b - 1])) continue; /* runs: counted at their first byte */
            int n = 0;
            for (int c = 0; c < 128; c++) n += to[c] == to[b];
            if (n > best_n || (n == best_n && to[b] < best)) best = to[b], best_n = n;
        }
        gbits tb = {{0}};
        for (int b = 0; best && b < 128; b++)
            if (to[b] == best) gbits_set(&tb, (unsigned)b);
        int budget = 4096;
        bool u8 = best != 0;
        for (int k = 0; k < 8 && u8; k++) u8 = shape_to(s, best, S, k, 0, &budget);
        /* gm_next may have moved the arrays: index them only now */
        s->tnext[S] = best;
        s->tbits[S] = tb;
        s->tflags[S] = (uint8_t)(GM_TEXT_DONE | (u8 ? GM_TEXT_UTF8 : 0));
    }
    return s->tflags[S] & GM_TEXT_UTF8;
}

bool gm_can_end_state(const grammar_state *s, uint32_t S) { return S && s->sfr[s->soff[S]] == 0; }

/* ---- compaction: keep only what the current state needs ---------------------------- */
static bool compact(grammar_state *s) {
    uint32_t n_old = s->n_fr;
    uint32_t *opos = malloc((size_t)n_old * sizeof *opos), *opar = malloc((size_t)n_old * sizeof *opar);
    uint32_t *map = calloc((size_t)n_old, sizeof *map);
    uint32_t *chain = malloc((size_t)n_old * sizeof *chain);
    int n = (int)s->slen[s->cur];
    uint32_t *cur = malloc(((size_t)n + 1) * sizeof *cur);
    if (!opos || !opar || !map || !chain || !cur) {
        free(opos), free(opar), free(map), free(chain), free(cur);
        return fail(s, KVANT_ERR_NOMEM, "grammar: out of memory");
    }
    memcpy(opos, s->fpos, (size_t)n_old * sizeof *opos);
    memcpy(opar, s->fpar, (size_t)n_old * sizeof *opar);
    memcpy(cur, s->sfr + s->soff[s->cur], (size_t)n * sizeof *cur);
    s->n_fr = 1;
    memset(s->fhash, 0, s->fhcap * sizeof *s->fhash);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        /* the unmapped part of the chain, top first; then mapped bottom up */
        uint32_t len = 0;
        for (uint32_t f = cur[i]; f && !map[f]; f = opar[f]) chain[len++] = f;
        while (len && ok) {
            uint32_t f = chain[--len];
            uint32_t par = opar[f] ? map[opar[f]] : 0;
            uint32_t id = fr_intern(s, opos[f], par);
            if (id == UINT32_MAX) ok = false;
            else map[f] = id;
        }
        cur[i] = cur[i] ? map[cur[i]] : 0;
    }
    free(opos), free(opar), free(map), free(chain);
    if (ok) {
        sort_frames(cur, n);
        st_clear(s);
        for (int k = 0; k < GM_MEMO; k++) s->memo[k].v = NULL; /* the ids change */
        uint32_t c = st_intern(s, cur, n);
        ok = c != UINT32_MAX;
        if (ok) s->cur = c;
    }
    free(cur);
    if (!ok) s->ended = true; /* the tables are half rebuilt: nothing more is allowed */
    return ok;
}

void gm_begin(grammar_state *s) {
    core_ok(&s->err);
    s->cache_full = false;
    if (s->n_fr > s->lim_frames || s->n_sfr > s->lim_sfr || (size_t)s->n_st * s->g->n_cls > s->lim_cells) compact(s);
}

void gm_set_limits(grammar_state *s, uint32_t frames, size_t cells_soft, size_t cells_hard) {
    s->lim_frames = frames;
    s->lim_sfr = frames;
    s->lim_cells = cells_soft;
    s->lim_cells_hard = cells_hard;
}

/* ---- the public state ------------------------------------------------------------------ */
static bool state_init(grammar_state *s, const grammar *g) {
    memset(s, 0, sizeof *s);
    s->g = g;
    s->n_fr = 1; /* frame 0: the empty stack */
    s->n_st = 1; /* state 0: dead */
    s->lim_frames = FR_SOFT;
    s->lim_sfr = SFR_SOFT;
    s->lim_cells = CELLS_SOFT;
    s->lim_cells_hard = CELLS_HARD;
    s->buf[0] = malloc((GRAMMAR_MAX_STACKS + 1) * sizeof(uint32_t));
    s->buf[1] = malloc((GRAMMAR_MAX_STACKS + 1) * sizeof(uint32_t));
    if (!s->buf[0] || !s->buf[1] || !fr_grow(s) || !st_grow(s)) return false;
    s->fpos[0] = s->fpar[0] = 0;
    st_clear(s);
    return true;
}

grammar_state *grammar_state_new(const grammar *g, kvant_status *st) {
    if (!g) {
        core_fail(st, KVANT_ERR_ARG, "grammar_state_new: no grammar");
        return NULL;
    }
    grammar_state *s = malloc(sizeof *s);
    if (!s || !state_init(s, g)) {
        grammar_state_free(s);
        core_fail(st, KVANT_ERR_NOMEM, "grammar: out of memory");
        return NULL;
    }
    int n = initial(s, s->buf[0]);
    uint32_t c = n < 0 ? UINT32_MAX : st_intern(s, s->buf[0], n);
    if (c == UINT32_MAX || c == 0) {
        core_fail(st, s->err.code ? s->err.code : KVANT_ERR_ARG, "%s",
                  s->err.code ? s->err.msg : "grammar matches nothing");
        grammar_state_free(s);
        return NULL;
    }
    s->cur = c;
    core_ok(st);
    return s;
}

void grammar_state_reset(grammar_state *s) {
    gm_begin(s);
    s->ended = false;
    int n = initial(s, s->buf[0]);
    uint32_t c = n < 0 ? UINT32_MAX : st_intern(s, s->buf[0], n);
    if (c != UINT32_MAX && c != 0) s->cur = c;
}

grammar_state *grammar_state_clone(const grammar_state *src, kvant_status *st) {
    grammar_state *s = malloc(sizeof *s);
    if (!s || !state_init(s, src->g)) goto oom;
    /* the current state's frames, re-made in the new tables */
    int n = (int)src->slen[src->cur];
    const uint32_t *f = src->sfr + src->soff[src->cur];
    uint32_t *out = s->buf[0];
    for (int i = 0; i < n; i++) {
        uint32_t chain[256], len = 0, id = 0;
        uint32_t *big = NULL;
        uint32_t depth = 0;
        for (uint32_t x = f[i]; x; x = src->fpar[x]) depth++;
        uint32_t *c = depth <= 256 ? chain : (big = malloc(depth * sizeof *big));
        if (!c) goto oom;
        for (uint32_t x = f[i]; x; x = src->fpar[x]) c[len++] = x;
        while (len) {
            uint32_t x = c[--len];
            id = fr_intern(s, src->fpos[x], id);
            if (id == UINT32_MAX) {
                free(big);
                goto oom;
            }
        }
        free(big);
        out[i] = id;
    }
    sort_frames(out, n);
    s->cur = st_intern(s, out, n);
    if (s->cur == UINT32_MAX) goto oom;
    s->ended = src->ended;
    core_ok(st);
    return s;
oom:
    grammar_state_free(s);
    core_fail(st, KVANT_ERR_NOMEM, "grammar: out of memory");
    return NULL;
}

void grammar_state_free(grammar_state *s) {
    if (!s) return;
    free(s->fpos), free(s->fpar), free(s->stamp), free(s->fhash);
    free(s->soff), free(s->slen), free(s->sfr), free(s->shash), free(s->trans), free(s->tnext), free(s->tbits);
    free(s->tflags);
    free(s->work), free(s->buf[0]), free(s->buf[1]), free(s->wend), free(s->wst), free(s->wnext), free(s->ranges);
    for (int k = 0; k < GM_MEMO; k++) free(s->memo[k].ranges);
    free(s);
}

bool grammar_accept_bytes(grammar_state *s, const uint8_t *bytes, size_t len) {
    gm_begin(s);
    if (s->ended) return false;
    uint32_t S = s->cur;
    for (size_t i = 0; i < len && S; i++) S = gm_next(s, S, bytes[i]);
    if (!S) return false;
    s->cur = S;
    return true;
}

bool grammar_can_end(const grammar_state *s) { return !s->ended && gm_can_end_state(s, s->cur); }

bool grammar_is_done(const grammar_state *s) {
    return s->ended || (s->slen[s->cur] == 1 && s->sfr[s->soff[s->cur]] == 0);
}

const kvant_status *grammar_state_error(const grammar_state *s) { return &s->err; }

int grammar_state_n_stacks(const grammar_state *s) { return (int)s->slen[s->cur]; }
