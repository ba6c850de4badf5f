/* grammar/build.c - the grammar IR builder: rules of alternatives, byte
 * sets, character classes as UTF-8 byte sequences, repetition through
 * generated rules, and gb_finish's checks (undefined rules, root, left
 * recursion, rules that cannot finish) and compilation (grammar_impl.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

/* ---- small helpers ----------------------------------------------------------- */
void gstr_put(gstr *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void gstr_puts(gstr *b, const char *s) { gstr_put(b, s, strlen(s)); }

void gstr_printf(gstr *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        gstr_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    gstr_put(b, big, (size_t)n);
    free(big);
}

void gstr_free(gstr *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

int gutf8_encode(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

int gutf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if (n < (size_t)len) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

static uint32_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

/* ---- builder ------------------------------------------------------------------- */
void gb_init(gbuild *b, kvant_status *st) {
    memset(b, 0, sizeof *b);
    b->st = st;
}

void gb_free(gbuild *b) {
    for (uint32_t i = 0; i < b->n_rules; i++) {
        free(b->rules[i].name);
        free(b->rules[i].body.e);
    }
    free(b->rules);
    free(b->name_hash);
    free(b->sets);
    free(b->set_hash);
    memset(b, 0, sizeof *b);
}

bool gb_push(gbuild *b, gvec *v, uint32_t e) {
    if (b->oom) return false;
    if (++b->total > GRAMMAR_MAX_ELEMS) {
        core_fail(b->st, KVANT_ERR_UNSUPPORTED, "grammar too large (more than %d elements)", GRAMMAR_MAX_ELEMS);
        b->oom = true;
        return false;
    }
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 8;
        uint32_t *p = realloc(v->e, cap * sizeof *p);
        if (!p) {
            core_fail(b->st, KVANT_ERR_NOMEM, "grammar: out of memory");
            b->oom = true;
            return false;
        }
        v->e = p;
        v->cap = cap;
    }
    v->e[v->n++] = e;
    return true;
}

static bool gb_oom(gbuild *b) {
    core_fail(b->st, KVANT_ERR_NOMEM, "grammar: out of memory");
    b->oom = true;
    return false;
}

static uint32_t gb_add_rule(gbuild *b, char *name) {
    if (!name) {
        gb_oom(b);
        return UINT32_MAX;
    }
    if (b->n_rules == b->cap_rules) {
        uint32_t cap = b->cap_rules ? b->cap_rules * 2 : 64;
        gb_rule *p = realloc(b->rules, cap * sizeof *p);
        if (!p) {
            free(name);
            gb_oom(b);
            return UINT32_MAX;
        }
        b->rules = p;
        b->cap_rules = cap;
    }
    /* the name table stays under half full */
    if ((b->n_rules + 1) * 2 > b->name_cap) {
        uint32_t cap = b->name_cap ? b->name_cap * 2 : 128;
        uint32_t *h = calloc(cap, sizeof *h);
        if (!h) {
            free(name);
            gb_oom(b);
            return UINT32_MAX;
        }
        for (uint32_t i = 0; i < b->n_rules; i++) {
            uint32_t k = hash_bytes(b->rules[i].name, strlen(b->rules[i].name)) & (cap - 1);
            while (h[k]) k = (k + 1) & (cap - 1);
            h[k] = i + 1;
        }
        free(b->name_hash);
        b->name_hash = h;
        b->name_cap = cap;
    }
    uint32_t id = b->n_rules++;
    memset(&b->rules[id], 0, sizeof b->rules[id]);
    b->rules[id].name = name;
    uint32_t k = hash_bytes(name, strlen(name)) & (b->name_cap - 1);
    while (b->name_hash[k]) k = (k + 1) & (b->name_cap - 1);
    b->name_hash[k] = id + 1;
    return id;
}

uint32_t gb_rule_named(gbuild *b, const char *name, size_t len) {
    if (b->oom) return UINT32_MAX;
    if (b->name_cap) {
        uint32_t k = hash_bytes(name, len) & (b->name_cap - 1);
        for (; b->name_hash[k]; k = (k + 1) & (b->name_cap - 1)) {
            const char *n = b->rules[b->name_hash[k] - 1].name;
            if (strlen(n) == len && !memcmp(n, name, len)) return b->name_hash[k] - 1;
        }
    }
    char *copy = malloc(len + 1);
    if (copy) {
        memcpy(copy, name, len);
        copy[len] = 0;
    }
    return gb_add_rule(b, copy);
}

uint32_t gb_rule_new(gbuild *b, uint32_t base) {
    if (b->oom) return UINT32_MAX;
    /* generated names hold a '_' + number; names from the text may too, so
     * loop until the name is free */
    const char *bn = b->rules[base].name;
    size_t bl = strlen(bn);
    /* keep the base name of a generated rule's base: "value_7_12" -> "value_12" */
    const char *us = strchr(bn, '_');
    if (us && us != bn) {
        const char *p = us + 1;
        bool gen = *p != 0;
        for (; *p; p++)
            if ((*p < '0' || *p > '9') && *p != '_') gen = false;
        if (gen) bl = (size_t)(us - bn);
    }
    char *name = malloc(bl + 16);
    if (!name) {
        gb_oom(b);
        return UINT32_MAX;
    }
    for (uint32_t n = b->n_rules;; n++) {
        snprintf(name, bl + 16, "%.*s_%u", (int)bl, bn, n);
        bool taken = false;
        uint32_t k = hash_bytes(name, strlen(name)) & (b->name_cap - 1);
        for (; b->name_cap && b->name_hash[k]; k = (k + 1) & (b->name_cap - 1))
            if (!strcmp(b->rules[b->name_hash[k] - 1].name, name)) taken = true;
        if (!taken) break;
    }
    uint32_t id = gb_add_rule(b, name);
    if (id != UINT32_MAX) b->rules[id].defined = true;
    return id;
}

uint32_t gb_set(gbuild *b, const gbits *s) {
    if (b->oom) return UINT32_MAX;
    if ((b->n_sets + 1) * 2 > b->set_cap) {
        uint32_t cap = b->set_cap ? b->set_cap * 2 : 64;
        uint32_t *h = calloc(cap, sizeof *h);
        gbits *p = realloc(b->sets, cap / 2 * sizeof *p);
        if (!h || !p) {
            free(h);
            if (p) b->sets = p;
            gb_oom(b);
            return UINT32_MAX;
        }
        b->sets = p;
        for (uint32_t i = 0; i < b->n_sets; i++) {
            uint32_t k = hash_bytes(&b->sets[i], sizeof(gbits)) & (cap - 1);
            while (h[k]) k = (k + 1) & (cap - 1);
            h[k] = i + 1;
        }
        free(b->set_hash);
        b->set_hash = h;
        b->set_cap = cap;
    }
    uint32_t k = hash_bytes(s, sizeof *s) & (b->set_cap - 1);
    for (; b->set_hash[k]; k = (k + 1) & (b->set_cap - 1))
        if (!memcmp(&b->sets[b->set_hash[k] - 1], s, sizeof *s)) return GE_TERM | (b->set_hash[k] - 1);
    uint32_t id = b->n_sets++;
    b->sets[id] = *s;
    b->set_hash[k] = id + 1;
    return GE_TERM | id;
}

/* ---- character classes ---------------------------------------------------------- */
typedef struct {
    uint8_t n;
    uint8_t lo[4], hi[4];
} gseq; /* one UTF-8 byte-range sequence: byte k in [lo[k], hi[k]] */

typedef struct {
    gseq *s;
    int n, cap;
} gseqv;

static bool seq_push(gseqv *v, const gseq *q) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 16;
        gseq *p = realloc(v->s, (size_t)cap * sizeof *p);
        if (!p) return false;
        v->s = p;
        v->cap = cap;
    }
    v->s[v->n++] = *q;
    return true;
}

/* [lo, hi] of code points that encode to the same number of bytes, as
 * byte-range sequences whose products are exactly that range (the
 * algorithm of RE2 / regex-syntax's utf8 sequences). */
static bool utf8_split(gseqv *v, uint32_t lo, uint32_t hi) {
    uint8_t a[4], z[4];
    int n = gutf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) return utf8_split(v, lo, lo | m) && utf8_split(v, (lo | m) + 1, hi);
            if ((hi & m) != m) return utf8_split(v, lo, (hi & ~m) - 1) && utf8_split(v, hi & ~m, hi);
        }
    }
    gutf8_encode(hi, z);
    gseq q = {.n = (uint8_t)n};
    for (int k = 0; k < n; k++) q.lo[k] = a[k], q.hi[k] = z[k];
    return seq_push(v, &q);
}

static int cmp_pair(const void *x, const void *y) {
    const uint32_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

bool gb_class(gbuild *b, uint32_t owner, gvec *v, const uint32_t *ranges, int n_pairs, bool negate) {
    if (b->oom) return false;
    /* normalize: sorted, merged, within Unicode, surrogates removed */
    uint32_t *r = malloc(((size_t)n_pairs + 2) * 2 * sizeof *r);
    uint32_t *c = malloc(((size_t)n_pairs + 4) * 4 * sizeof *c);
    if (!r || !c) {
        free(r);
        free(c);
        return gb_oom(b);
    }
    int n = 0;
    for (int i = 0; i < n_pairs; i++) {
        uint32_t lo = ranges[2 * i], hi = ranges[2 * i + 1];
        if (lo > hi) {
            uint32_t t = lo;
            lo = hi;
            hi = t;
        }
        if (lo > 0x10FFFF) continue;
        if (hi > 0x10FFFF) hi = 0x10FFFF;
        r[2 * n] = lo, r[2 * n + 1] = hi, n++;
    }
    qsort(r, (size_t)n, 2 * sizeof *r, cmp_pair);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i], r[2 * m + 1] = r[2 * i + 1], m++;
        }
    }
    if (negate) { /* complement of r[0..m) within [0, 0x10FFFF] */
        int k = 0;
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (r[2 * i] > next) c[2 * k] = next, c[2 * k + 1] = r[2 * i] - 1, k++;
            next = r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) c[2 * k] = next, c[2 * k + 1] = 0x10FFFF, k++;
        memcpy(r, c, (size_t)k * 2 * sizeof *r);
        m = k;
    }
    /* cut out the surrogates and split at the encoding-length boundaries */
    static const uint32_t cut[][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
    int k = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < 5; j++) {
            uint32_t lo = r[2 * i] > cut[j][0] ? r[2 * i] : cut[j][0];
            uint32_t hi = r[2 * i + 1] < cut[j][1] ? r[2 * i + 1] : cut[j][1];
            if (lo <= hi) c[2 * k] = lo, c[2 * k + 1] = hi, k++;
        }
    free(r);
    if (k == 0) {
        free(c);
        core_fail(b->st, KVANT_ERR_ARG, "empty character class");
        return false;
    }
    gbits ascii = {{0}};
    bool has_ascii = false;
    gseqv seqs = {0};
    bool ok = true;
    for (int i = 0; i < k && ok; i++) {
        if (c[2 * i + 1] < 0x80) {
            for (uint32_t x = c[2 * i]; x <= c[2 * i + 1]; x++) gbits_set(&ascii, x);
            has_ascii = true;
        } else {
            ok = utf8_split(&seqs, c[2 * i], c[2 * i + 1]);
        }
    }
    free(c);
    if (!ok) {
        free(seqs.s);
        return gb_oom(b);
    }
    if (seqs.n == 0) {
        uint32_t e = gb_set(b, &ascii);
        return e != UINT32_MAX && gb_push(b, v, e);
    }
    /* sequences that differ only in their first byte become one (the first
     * bytes joined in one set): fewer alternatives, fewer stacks */
    uint32_t rid = gb_rule_new(b, owner);
    if (rid == UINT32_MAX) {
        free(seqs.s);
        return false;
    }
    gvec *body = &b->rules[rid].body;
    if (has_ascii) {
        uint32_t e = gb_set(b, &ascii);
        ok = e != UINT32_MAX && gb_push(b, body, e) && gb_push(b, body, GE_END);
    }
    bool *used = calloc((size_t)seqs.n, 1);
    if (!used) ok = gb_oom(b);
    for (int i = 0; i < seqs.n && ok; i++) {
        if (used[i]) continue;
        gbits first = {{0}};
        for (int j = i; j < seqs.n; j++) {
            if (used[j] || seqs.s[j].n != seqs.s[i].n) continue;
            bool same = true;
            for (int t = 1; t < seqs.s[i].n; t++)
                if (seqs.s[j].lo[t] != seqs.s[i].lo[t] || seqs.s[j].hi[t] != seqs.s[i].hi[t]) same = false;
            if (!same) continue;
            used[j] = true;
            for (unsigned x = seqs.s[j].lo[0]; x <= seqs.s[j].hi[0]; x++) gbits_set(&first, x);
        }
        uint32_t e = gb_set(b, &first);
        ok = e != UINT32_MAX && gb_push(b, body, e);
        for (int t = 1; t < seqs.s[i].n && ok; t++) {
            gbits s = {{0}};
            for (unsigned x = seqs.s[i].lo[t]; x <= seqs.s[i].hi[t]; x++) gbits_set(&s, x);
            e = gb_set(b, &s);
            ok = e != UINT32_MAX && gb_push(b, body, e);
        }
        ok = ok && gb_push(b, body, GE_END);
    }
    free(used);
    free(seqs.s);
    return ok && gb_push(b, v, GE_REF | rid);
}

/* ---- repetition ------------------------------------------------------------------ */
bool gb_repeat(gbuild *b, uint32_t owner, gvec *v, uint32_t from, long min, long max) {
    if (b->oom) return false;
    uint32_t len = v->n - from;
    if (len == 0) return true; /* "" repeated is "" */
    uint32_t x;
    if (len == 1) {
        x = v->e[from];
    } else { /* a sequence: its own rule */
        uint32_t r = gb_rule_new(b, owner);
        if (r == UINT32_MAX) return false;
        /* v may be a rule body that gb_rule_new just moved: index, not pointer */
        for (uint32_t i = 0; i < len; i++)
            if (!gb_push(b, &b->rules[r].body, v->e[from + i])) return false;
        if (!gb_push(b, &b->rules[r].body, GE_END)) return false;
        x = GE_REF | r;
    }
    b->total -= len;
    v->n = from;
    for (long i = 0; i < min; i++)
        if (!gb_push(b, v, x)) return false;
    if (max < 0) { /* R ::= x R | "" */
        uint32_t r = gb_rule_new(b, owner);
        if (r == UINT32_MAX) return false;
        gvec *body = &b->rules[r].body;
        if (!gb_push(b, body, x) || !gb_push(b, body, GE_REF | r) || !gb_push(b, body, GE_END) ||
            !gb_push(b, body, GE_END))
            return false;
        return gb_push(b, v, GE_REF | r);
    }
    /* R1 ::= x | "";  Rk ::= x R(k-1) | "" */
    uint32_t prev = UINT32_MAX;
    for (long k = 1; k <= max - min; k++) {
        uint32_t r = gb_rule_new(b, owner);
        if (r == UINT32_MAX) return false;
        gvec *body = &b->rules[r].body;
        if (!gb_push(b, body, x)) return false;
        if (prev != UINT32_MAX && !gb_push(b, body, GE_REF | prev)) return false;
        if (!gb_push(b, body, GE_END) || !gb_push(b, body, GE_END)) return false;
        prev = r;
    }
    return prev == UINT32_MAX || gb_push(b, v, GE_REF | prev);
}

/* ---- checks and compilation --------------------------------------------------------- */
typedef struct {
    uint32_t rule, start, len; /* start: index into the rule's body */
    bool live;
} galt;

/* A fixpoint over the alternatives: a rule gets the property once one of its
 * (live) alternatives has every element with it.  counts_term: a GE_TERM
 * element has the property (productive) or never has it (nullable). */
static bool fixpoint(gbuild *b, const galt *alts, uint32_t n_alts, bool term_has, bool *out) {
    uint32_t R = b->n_rules;
    uint32_t *left = malloc((size_t)n_alts * sizeof *left);
    uint32_t *occ_off = calloc((size_t)R + 1, sizeof *occ_off);
    uint32_t *queue = malloc(((size_t)R + 1) * sizeof *queue);
    uint64_t n_occ = 0;
    for (uint32_t a = 0; a < n_alts; a++)
        if (alts[a].live)
            for (uint32_t i = 0; i < alts[a].len; i++) {
                uint32_t e = b->rules[alts[a].rule].body.e[alts[a].start + i];
                if (GE_KIND(e) == GE_REF && occ_off) occ_off[GE_VAL(e) + 1]++, n_occ++;
            }
    uint32_t *occ = malloc((n_occ + 1) * sizeof *occ);
    uint32_t *fill = malloc(((size_t)R + 1) * sizeof *fill);
    if (!left || !occ_off || !queue || !occ || !fill) {
        free(left), free(occ_off), free(queue), free(occ), free(fill);
        return gb_oom(b);
    }
    for (uint32_t r = 0; r < R; r++) occ_off[r + 1] += occ_off[r];
    memcpy(fill, occ_off, ((size_t)R + 1) * sizeof *fill);
    memset(out, 0, R * sizeof *out);
    uint32_t qn = 0;
    for (uint32_t a = 0; a < n_alts; a++) {
        left[a] = 0;
        if (!alts[a].live) {
            left[a] = UINT32_MAX;
            continue;
        }
        for (uint32_t i = 0; i < alts[a].len; i++) {
            uint32_t e = b->rules[alts[a].rule].body.e[alts[a].start + i];
            if (GE_KIND(e) == GE_REF) {
                left[a]++;
                occ[fill[GE_VAL(e)]++] = a;
            } else if (!term_has) {
                left[a] = UINT32_MAX / 2; /* never reaches 0 */
            }
        }
        if (left[a] == 0 && !out[alts[a].rule]) out[alts[a].rule] = true, queue[qn++] = alts[a].rule;
    }
    for (uint32_t qi = 0; qi < qn; qi++) {
        uint32_t r = queue[qi];
        for (uint32_t k = occ_off[r]; k < occ_off[r + 1]; k++) {
            uint32_t a = occ[k];
            if (--left[a] == 0 && !out[alts[a].rule]) out[alts[a].rule] = true, queue[qn++] = alts[a].rule;
        }
    }
    free(left), free(occ_off), free(queue), free(occ), free(fill);
    return true;
}

typedef struct {
    uint32_t to;
    bool tail;
} gedge;

/* Rejects left recursion: a cycle of "A can start with B" edges (B reached
 * before any byte is matched) that holds a non-tail call, which would push
 * a frame each time round.  Tarjan's strongly connected components,
 * iteratively; then each non-tail edge inside one component is a cycle. */
static bool check_left_recursion(gbuild *b, const galt *alts, uint32_t n_alts, const bool *nullable) {
    uint32_t R = b->n_rules;
    uint32_t *eoff = calloc((size_t)R + 1, sizeof *eoff);
    if (!eoff) return gb_oom(b);
    uint64_t n_edges = 0;
    for (int pass = 0; pass < 2; pass++) {
        gedge *edges = NULL;
        uint32_t *fill = NULL;
        if (pass == 1) {
            for (uint32_t r = 0; r < R; r++) eoff[r + 1] += eoff[r];
            edges = malloc((n_edges + 1) * sizeof *edges);
            fill = malloc(((size_t)R + 1) * sizeof *fill);
            if (!edges || !fill) {
                free(edges), free(fill), free(eoff);
                return gb_oom(b);
            }
            memcpy(fill, eoff, ((size_t)R + 1) * sizeof *fill);
        }
        for (uint32_t a = 0; a < n_alts; a++) {
            if (!alts[a].live) continue;
            const uint32_t *e = b->rules[alts[a].rule].body.e + alts[a].start;
            for (uint32_t i = 0; i < alts[a].len; i++) {
                if (GE_KIND(e[i]) != GE_REF) break;
                if (pass == 0) eoff[alts[a].rule + 1]++, n_edges++;
                else edges[fill[alts[a].rule]++] = (gedge){GE_VAL(e[i]), i + 1 == alts[a].len};
                if (!nullable[GE_VAL(e[i])]) break;
            }
        }
        if (pass == 0) continue;
        free(fill);
        /* Tarjan */
        uint32_t *index = malloc((size_t)R * sizeof *index), *low = malloc((size_t)R * sizeof *low);
        uint32_t *comp = malloc((size_t)R * sizeof *comp), *stk = malloc((size_t)R * sizeof *stk);
        uint32_t *cs_node = malloc((size_t)R * sizeof *cs_node), *cs_edge = malloc((size_t)R * sizeof *cs_edge);
        bool *on = calloc((size_t)R, 1);
        bool ok = index && low && comp && stk && cs_node && cs_edge && on;
        if (ok) {
            for (uint32_t r = 0; r < R; r++) index[r] = UINT32_MAX;
            uint32_t next = 0, sp = 0, ncomp = 0;
            for (uint32_t s = 0; s < R; s++) {
                if (index[s] != UINT32_MAX) continue;
                uint32_t csp = 0;
                cs_node[csp] = s, cs_edge[csp] = eoff[s], csp++;
                index[s] = low[s] = next++;
                stk[sp++] = s, on[s] = true;
                while (csp) {
                    uint32_t v = cs_node[csp - 1];
                    if (cs_edge[csp - 1] < eoff[v + 1]) {
                        uint32_t w = edges[cs_edge[csp - 1]++].to;
                        if (index[w] == UINT32_MAX) {
                            index[w] = low[w] = next++;
                            stk[sp++] = w, on[w] = true;
                            cs_node[csp] = w, cs_edge[csp] = eoff[w], csp++;
                        } else if (on[w] && index[w] < low[v]) {
                            low[v] = index[w];
                        }
                        continue;
                    }
                    if (low[v] == index[v]) {
                        uint32_t w;
                        do {
                            w = stk[--sp];
                            on[w] = false;
                            comp[w] = ncomp;
                        } while (w != v);
                        ncomp++;
                    }
                    csp--;
                    if (csp) {
                        uint32_t u = cs_node[csp - 1];
                        if (low[v] < low[u]) low[u] = low[v];
                    }
                }
            }
            for (uint32_t r = 0; r < R && ok; r++)
                for (uint32_t k = eoff[r]; k < eoff[r + 1]; k++)
                    if (!edges[k].tail && comp[edges[k].to] == comp[r]) {
                        core_fail(b->st, KVANT_ERR_ARG,
                                  "rule '%s' is left-recursive (it can reach itself again before matching a "
                                  "character); rewrite it with repetition, e.g. a ::= b (\"x\" b)*",
                                  b->rules[r].name);
                        ok = false;
                        break;
                    }
        } else {
            gb_oom(b);
        }
        free(index), free(low), free(comp), free(stk), free(cs_node), free(cs_edge), free(on), free(edges);
        free(eoff);
        return ok;
    }
    return true; /* not reached */
}

/* bytes no set tells apart share a class: partition refinement */
static void byte_classes(grammar *g) {
    uint8_t cls[256] = {0};
    uint16_t n = 1;
    for (uint32_t s = 0; s < g->n_sets; s++) {
        int16_t map[256][2];
        for (int i = 0; i < n; i++) map[i][0] = map[i][1] = -1;
        uint16_t m = 0;
        uint8_t next[256];
        for (int c = 0; c < 256; c++) {
            int in = gbits_has(&g->sets[s], (unsigned)c);
            if (map[cls[c]][in] < 0) map[cls[c]][in] = (int16_t)m++;
            next[c] = (uint8_t)map[cls[c]][in];
        }
        memcpy(cls, next, sizeof cls);
        n = m;
        if (n == 256) break;
    }
    memcpy(g->cls, cls, sizeof cls);
    g->n_cls = n;
    memset(g->cls_bits, 0, 256 * sizeof *g->cls_bits);
    for (int c = 255; c >= 0; c--) {
        g->cls_rep[cls[c]] = (uint8_t)c;
        gbits_set(&g->cls_bits[cls[c]], (unsigned)c);
    }
}

grammar *gb_finish(gbuild *b, kvant_status *st) {
    if (b->oom) return NULL;
    uint32_t R = b->n_rules;
    for (uint32_t r = 0; r < R; r++)
        if (!b->rules[r].defined) { /* the GBNF parser says where before it calls here */
            core_fail(st, KVANT_ERR_ARG, "undefined rule '%s'", b->rules[r].name);
            return NULL;
        }
    uint32_t root = UINT32_MAX;
    if (b->name_cap) {
        uint32_t k = hash_bytes("root", 4) & (b->name_cap - 1);
        for (; b->name_hash[k]; k = (k + 1) & (b->name_cap - 1))
            if (!strcmp(b->rules[b->name_hash[k] - 1].name, "root")) root = b->name_hash[k] - 1;
    }
    if (root == UINT32_MAX) {
        core_fail(st, KVANT_ERR_ARG, "grammar has no rule named 'root'");
        return NULL;
    }
    /* the alternatives */
    uint32_t n_alts = 0;
    for (uint32_t r = 0; r < R; r++)
        for (uint32_t i = 0; i < b->rules[r].body.n; i++) n_alts += b->rules[r].body.e[i] == GE_END;
    galt *alts = malloc(((size_t)n_alts + 1) * sizeof *alts);
    bool *prod = malloc(((size_t)R + 1) * sizeof *prod), *nullable = malloc(((size_t)R + 1) * sizeof *nullable);
    if (!alts || !prod || !nullable) {
        free(alts), free(prod), free(nullable);
        gb_oom(b);
        return NULL;
    }
    uint32_t a = 0;
    for (uint32_t r = 0; r < R; r++) {
        uint32_t s = 0;
        for (uint32_t i = 0; i < b->rules[r].body.n; i++)
            if (b->rules[r].body.e[i] == GE_END) {
                alts[a++] = (galt){r, s, i - s, true};
                s = i + 1;
            }
    }
    grammar *g = NULL;
    if (!fixpoint(b, alts, n_alts, true, prod)) goto done;
    if (!prod[root]) {
        core_fail(st, KVANT_ERR_ARG, "grammar matches nothing: rule 'root' can never finish (every way through it "
                                     "recurses without end)");
        goto done;
    }
    for (a = 0; a < n_alts; a++)
        for (uint32_t i = 0; i < alts[a].len; i++) {
            uint32_t e = b->rules[alts[a].rule].body.e[alts[a].start + i];
            if (GE_KIND(e) == GE_REF && !prod[GE_VAL(e)]) alts[a].live = false;
        }
    if (!fixpoint(b, alts, n_alts, false, nullable)) goto done;
    if (!check_left_recursion(b, alts, n_alts, nullable)) goto done;

    g = calloc(1, sizeof *g);
    uint64_t n_el = 0;
    uint32_t n_live = 0;
    for (a = 0; a < n_alts; a++)
        if (alts[a].live) n_el += alts[a].len + 1, n_live++;
    if (g) {
        g->elems = malloc((n_el + 1) * sizeof *g->elems);
        g->alts = malloc(((size_t)n_live + 1) * sizeof *g->alts);
        g->rule_alt = malloc(((size_t)R + 1) * sizeof *g->rule_alt);
        g->sets = malloc(((size_t)b->n_sets + 1) * sizeof *g->sets);
        g->cls_bits = malloc(256 * sizeof *g->cls_bits);
    }
    if (!g || !g->elems || !g->alts || !g->rule_alt || !g->sets || !g->cls_bits) {
        grammar_free(g);
        g = NULL;
        gb_oom(b);
        goto done;
    }
    g->n_rules = R;
    g->root = root;
    uint32_t pos = 0, ai = 0;
    a = 0;
    for (uint32_t r = 0; r < R; r++) {
        g->rule_alt[r] = ai;
        for (; a < n_alts && alts[a].rule == r; a++) {
            if (!alts[a].live) continue;
            g->alts[ai++] = pos;
            memcpy(g->elems + pos, b->rules[r].body.e + alts[a].start, alts[a].len * sizeof *g->elems);
            pos += alts[a].len;
            g->elems[pos++] = GE_END;
        }
    }
    g->rule_alt[R] = ai;
    g->n_elems = pos;
    if (b->n_sets) memcpy(g->sets, b->sets, b->n_sets * sizeof *g->sets);
    g->n_sets = b->n_sets;
    byte_classes(g);
    core_ok(st);
done:
    free(alts), free(prod), free(nullable);
    if (!g && b->oom && st && st->code == KVANT_OK) core_fail(st, KVANT_ERR_NOMEM, "grammar: out of memory");
    return g;
}

void grammar_free(grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->alts);
    free(g->rule_alt);
    free(g->sets);
    free(g->cls_bits);
    free(g);
}

int grammar_n_rules(const grammar *g) { return (int)g->n_rules; }
