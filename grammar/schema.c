/* grammar/schema.c - JSON Schema to GBNF (the subset grammar.h lists), then
 * through the GBNF compiler.  Every value rule matches its value and the
 * bounded whitespace after it (ws), as llama.cpp's converter does; the
 * root rule is the top schema.  Rules made for a schema are named from
 * its place ("root-address-city"); the shared primitives are json-*. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

/* the shared rules, written when first used */
enum { P_WS, P_CHAR, P_STRING, P_INTPART, P_INTEGER, P_NUMBER, P_BOOLEAN, P_NULL, P_VALUE, P_OBJECT, P_ARRAY, P_N };
static const char *const prim_name[P_N] = {"ws",           "json-char",    "json-string", "json-int-part",
                                           "json-integer", "json-number",  "json-boolean", "json-null",
                                           "json-value",   "json-object",  "json-array"};
static const char *const prim_body[P_N] = {
    "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}",
    /* \uXXXX: a surrogate only as a pair, and never \u0000 (a NUL cuts the
     * string short in C consumers; leaving it out keeps to a subset of JSON) */
    "[^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([1-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | \"0\" ([1-9a-fA-F] "
    "[0-9a-fA-F]{2} | \"0\" ([1-9a-fA-F] [0-9a-fA-F] | \"0\" [1-9a-fA-F])) | [dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] "
    "[0-9a-fA-F]{2} \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F]{2}))",
    "\"\\\"\" json-char* \"\\\"\" ws",
    "\"0\" | [1-9] [0-9]{0,15}",
    "\"-\"? json-int-part ws",
    "\"-\"? json-int-part (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws",
    "(\"true\" | \"false\") ws",
    "\"null\" ws",
    "json-object | json-array | json-string | json-number | json-boolean | json-null",
    "\"{\" ws (json-string \":\" ws json-value (\",\" ws json-string \":\" ws json-value)*)? \"}\" ws",
    "\"[\" ws (json-value (\",\" ws json-value)*)? \"]\" ws",
};
/* what each primitive uses */
static const unsigned prim_deps[P_N] = {
    0, 0, 1u << P_CHAR | 1u << P_WS, 0, 1u << P_INTPART | 1u << P_WS, 1u << P_INTPART | 1u << P_WS, 1u << P_WS,
    1u << P_WS, 1u << P_OBJECT | 1u << P_ARRAY | 1u << P_STRING | 1u << P_NUMBER | 1u << P_BOOLEAN | 1u << P_NULL,
    1u << P_WS | 1u << P_STRING | 1u << P_VALUE, 1u << P_WS | 1u << P_VALUE,
};

typedef struct {
    char *ptr, *name;
} sc_ref;

typedef struct {
    gstr out; /* the rules */
    const gjson *doc;
    kvant_status *st;
    bool failed;
    unsigned prim; /* primitives used */
    char **names;
    int n_names, cap_names;
    uint32_t *name_hash; /* 1 + index into names; 0 = empty */
    uint32_t name_cap;
    sc_ref *refs;
    int n_refs, cap_refs;
    uint32_t *ref_hash; /* 1 + index into refs by ptr; 0 = empty (a linear search was quadratic in the $refs) */
    uint32_t ref_cap;
    int name_seq;  /* the next suffix for a name taken more than NAME_TRIES times */
    char path[1024]; /* JSON pointer of the schema being compiled, for messages */
    size_t path_len;
    int depth; /* compile_rule calls in progress (sub-schemas and $ref targets): GRAMMAR_MAX_SCHEMA_DEPTH */
} sc;

static bool sc_fail(sc *c, kvant_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool sc_fail(sc *c, kvant_code code, const char *fmt, ...) {
    if (c->failed) return false;
    c->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    core_fail(c->st, code, "JSON Schema at %s: %s", c->path_len ? c->path : "/", msg);
    return false;
}

static bool sc_oom(sc *c) {
    if (!c->failed) core_fail(c->st, KVANT_ERR_NOMEM, "JSON Schema: out of memory");
    c->failed = true;
    return false;
}

static size_t path_push(sc *c, const char *seg) {
    size_t save = c->path_len;
    int n = snprintf(c->path + c->path_len, sizeof c->path - c->path_len, "/%s", seg);
    if (n > 0) c->path_len += (size_t)n < sizeof c->path - c->path_len ? (size_t)n : sizeof c->path - c->path_len - 1;
    return save;
}
static void path_pop(sc *c, size_t save) {
    c->path_len = save;
    c->path[save] = 0;
}

static const char *use(sc *c, int p) {
    c->prim |= 1u << p;
    return prim_name[p];
}

/* ---- names ------------------------------------------------------------------------ */
static uint32_t hash_str(const char *t) {
    uint32_t h = 2166136261u;
    for (; *t; t++) h = (h ^ (uint8_t)*t) * 16777619u;
    return h;
}

static bool name_taken(const sc *c, const char *n) {
    for (int i = 0; i < P_N; i++)
        if (!strcmp(prim_name[i], n)) return true;
    if (!c->name_cap) return false;
    for (uint32_t k = hash_str(n) & (c->name_cap - 1); c->name_hash[k]; k = (k + 1) & (c->name_cap - 1))
        if (!strcmp(c->names[c->name_hash[k] - 1], n)) return true;
    return false;
}

/* names[i] into the hash set, grown to stay under half full */
static bool name_insert(sc *c, int i) {
    if ((uint32_t)(i + 1) * 2 > c->name_cap) {
        uint32_t cap = c->name_cap ? c->name_cap * 2 : 64;
        uint32_t *h = calloc(cap, sizeof *h);
        if (!h) return sc_oom(c);
        for (int j = 0; j < i; j++) {
            uint32_t k = hash_str(c->names[j]) & (cap - 1);
            while (h[k]) k = (k + 1) & (cap - 1);
            h[k] = (uint32_t)j + 1;
        }
        free(c->name_hash);
        c->name_hash = h;
        c->name_cap = cap;
    }
    uint32_t k = hash_str(c->names[i]) & (c->name_cap - 1);
    while (c->name_hash[k]) k = (k + 1) & (c->name_cap - 1);
    c->name_hash[k] = (uint32_t)i + 1;
    return true;
}

/* refs[i] into its hash set, grown to stay under half full */
static bool ref_insert(sc *c, int i) {
    if ((uint32_t)(i + 1) * 2 > c->ref_cap) {
        uint32_t cap = c->ref_cap ? c->ref_cap * 2 : 64;
        uint32_t *h = calloc(cap, sizeof *h);
        if (!h) return sc_oom(c);
        for (int j = 0; j < i; j++) {
            uint32_t k = hash_str(c->refs[j].ptr) & (cap - 1);
            while (h[k]) k = (k + 1) & (cap - 1);
            h[k] = (uint32_t)j + 1;
        }
        free(c->ref_hash);
        c->ref_hash = h;
        c->ref_cap = cap;
    }
    uint32_t k = hash_str(c->refs[i].ptr) & (c->ref_cap - 1);
    while (c->ref_hash[k]) k = (k + 1) & (c->ref_cap - 1);
    c->ref_hash[k] = (uint32_t)i + 1;
    return true;
}

static const char *ref_find(const sc *c, const char *ptr) {
    if (!c->ref_cap) return NULL;
    for (uint32_t k = hash_str(ptr) & (c->ref_cap - 1); c->ref_hash[k]; k = (k + 1) & (c->ref_cap - 1))
        if (!strcmp(c->refs[c->ref_hash[k] - 1].ptr, ptr)) return c->refs[c->ref_hash[k] - 1].name;
    return NULL;
}

/* a name taken this many times (base, base-2 ... base-NAME_TRIES) continues
 * with a suffix from a counter: trying -2, -3 ... up to the first free one
 * was quadratic in the sub-schemas whose names clean to the same text */
enum { NAME_TRIES = 16 };

/* a fresh rule name: base, its characters outside [A-Za-z0-9-] made '-', unique */
static const char *new_name(sc *c, const char *base) {
    char clean[80];
    size_t k = 0;
    for (const char *p = base; *p && k < sizeof clean - 12; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
        clean[k++] = ok ? ch : '-';
    }
    if (!k) clean[k++] = 'r';
    clean[k] = 0;
    char buf[96];
    snprintf(buf, sizeof buf, "%s", clean);
    for (int i = 2; name_taken(c, buf); i++)
        snprintf(buf, sizeof buf, "%s-%d", clean, i <= NAME_TRIES ? i : NAME_TRIES + ++c->name_seq);
    if (c->n_names == c->cap_names) {
        int cap = c->cap_names ? c->cap_names * 2 : 32;
        char **p = realloc(c->names, (size_t)cap * sizeof *p);
        if (!p) {
            sc_oom(c);
            return NULL;
        }
        c->names = p;
        c->cap_names = cap;
    }
    char *n = strdup(buf);
    if (!n) {
        sc_oom(c);
        return NULL;
    }
    c->names[c->n_names++] = n;
    if (!name_insert(c, c->n_names - 1)) return NULL;
    return n;
}

static const char *child_name(sc *c, const char *parent, const char *hint) {
    char buf[200];
    snprintf(buf, sizeof buf, "%.60s-%.60s", parent, hint);
    return new_name(c, buf);
}

/* ---- GBNF text ------------------------------------------------------------------------ */
/* bytes as one GBNF literal */
static void lit(gstr *o, const char *s, size_t n) {
    gstr_put(o, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"') gstr_puts(o, "\\\"");
        else if (ch == '\\') gstr_puts(o, "\\\\");
        else if (ch < 0x20 || ch == 0x7F) gstr_printf(o, "\\x%02X", ch);
        else gstr_put(o, (const char *)&ch, 1);
    }
    gstr_put(o, "\"", 1);
}

/* a JSON value written compactly, as a literal, then ws */
static void json_lit(sc *c, gstr *o, const gjson *v) {
    size_t n;
    char *t = gjson_write(v, &n);
    if (!t) {
        sc_oom(c);
        return;
    }
    lit(o, t, n);
    gstr_printf(o, " %s", use(c, P_WS));
    free(t);
}

static void emit_rule(sc *c, const char *name, const gstr *body) {
    gstr_printf(&c->out, "%s ::= %s\n", name, body->s ? body->s : "\"\"");
}

/* ---- enum: the values' texts as a trie of rules ------------------------------------
 * Alternatives that start alike would each be a stack ("a" "b" ... of a
 * 5000-value enum: 5000 stacks); split by their next byte instead, a rule
 * per branching point, the state holds one stack per distinct next byte. */
typedef struct {
    char *t;
    size_t n;
} lit_t;

static int cmp_lit(const void *x, const void *y) {
    const lit_t *a = x, *b = y;
    size_t n = a->n < b->n ? a->n : b->n;
    int r = memcmp(a->t, b->t, n);
    return r ? r : (a->n > b->n) - (a->n < b->n);
}

/* the alternatives for l[lo..hi), which share their first d bytes */
static void lit_trie(sc *c, const char *name, gstr *o, lit_t *l, int lo, int hi, size_t d) {
    bool first = true;
    for (int i = lo; i < hi && !c->failed;) {
        if (!first) gstr_puts(o, " | ");
        first = false;
        if (l[i].n == d) { /* ends here */
            gstr_puts(o, "\"\"");
            i++;
            continue;
        }
        int j = i + 1;
        while (j < hi && l[j].n > d && l[j].t[d] == l[i].t[d]) j++;
        /* the group's common prefix beyond d */
        size_t e = d + 1;
        for (;;) {
            bool same = l[i].n > e;
            for (int k = i + 1; k < j && same; k++) same = l[k].n > e && l[k].t[e] == l[i].t[e];
            if (!same) break;
            e++;
        }
        lit(o, l[i].t + d, e - d);
        if (j - i > 1 || l[i].n > e) {
            const char *sub = child_name(c, name, "alt");
            if (!sub) return;
            gstr b = {0};
            lit_trie(c, sub, &b, l, i, j, e);
            if (b.oom) sc_oom(c);
            else emit_rule(c, sub, &b);
            gstr_free(&b);
            gstr_printf(o, " %s", sub);
        }
        i = j;
    }
}

static bool enum_body(sc *c, const gjson *v, const char *name, gstr *o) {
    lit_t *l = calloc((size_t)v->n, sizeof *l);
    if (!l) return sc_oom(c);
    int n = 0;
    for (int i = 0; i < v->n; i++) {
        l[n].t = gjson_write(v->items[i], &l[n].n);
        if (!l[n].t) {
            for (int k = 0; k < n; k++) free(l[k].t);
            free(l);
            return sc_oom(c);
        }
        n++;
    }
    qsort(l, (size_t)n, sizeof *l, cmp_lit);
    int m = 0; /* without repeats */
    for (int i = 0; i < n; i++) {
        if (m && !cmp_lit(&l[m - 1], &l[i])) {
            free(l[i].t);
            continue;
        }
        l[m++] = l[i];
    }
    gstr_put(o, "(", 1);
    lit_trie(c, name, o, l, 0, m, 0);
    gstr_printf(o, ") %s", use(c, P_WS));
    for (int i = 0; i < m; i++) free(l[i].t);
    free(l);
    return !c->failed;
}

/* ---- keywords ----------------------------------------------------------------------- */
static const char *const annotations[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "$anchor", "readOnly",
    "writeOnly", "deprecated", "discriminator", "contentEncoding", "contentMediaType", "$defs", "definitions",
    "$vocabulary", NULL};
static const char *const handled[] = {
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required", "additionalProperties",
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength",
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}
static bool is_annotation(const char *k) { return in_list(annotations, k) || !strncmp(k, "x-", 2); }

static bool compile_rule(sc *c, const gjson *s, const char *name);
static const char *compile_sub(sc *c, const gjson *s, const char *parent, const char *hint, const char *seg);

/* a non-negative integer keyword; false (st filled) when it is not one */
static bool get_count(sc *c, const gjson *s, const char *key, long *out, bool *present) {
    const gjson *v = gjson_get(s, key);
    *present = v != NULL;
    if (!v) return true;
    if (v->type != GJSON_NUMBER || v->num < 0 || v->num != floor(v->num))
        return sc_fail(c, KVANT_ERR_ARG, "'%s' must be a non-negative integer", key);
    if (v->num > GRAMMAR_MAX_REPEAT)
        return sc_fail(c, KVANT_ERR_UNSUPPORTED, "'%s' above %d is not supported", key, GRAMMAR_MAX_REPEAT);
    *out = (long)v->num;
    return true;
}

/* ---- $ref ------------------------------------------------------------------------------ */
static const char *compile_ref(sc *c, const char *ref) {
    const char *known = ref_find(c, ref);
    if (known) return known;
    if (ref[0] != '#') {
        sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported '$ref' '%.200s' (only references into this document, "
                                          "\"#...\", are supported)", ref);
        return NULL;
    }
    /* a JSON pointer: /-separated, ~1 = '/', ~0 = '~' */
    const gjson *v = c->doc;
    const char *p = ref + 1;
    char seg[256], last[256] = "root";
    while (*p) {
        if (*p != '/') {
            sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported '$ref' '%.200s' (anchors are not supported)", ref);
            return NULL;
        }
        p++;
        size_t k = 0;
        while (*p && *p != '/' && k < sizeof seg - 1) {
            if (p[0] == '~' && p[1] == '1') seg[k++] = '/', p += 2;
            else if (p[0] == '~' && p[1] == '0') seg[k++] = '~', p += 2;
            else seg[k++] = *p++;
        }
        seg[k] = 0;
        const gjson *next = NULL;
        if (v && v->type == GJSON_OBJECT) next = gjson_get(v, seg);
        else if (v && v->type == GJSON_ARRAY) {
            char *e;
            long idx = strtol(seg, &e, 10);
            if (*seg && !*e && idx >= 0 && idx < v->n) next = v->items[idx];
        }
        if (!next) {
            sc_fail(c, KVANT_ERR_ARG, "'$ref' '%.200s' points at nothing", ref);
            return NULL;
        }
        v = next;
        snprintf(last, sizeof last, "%s", seg);
    }
    const char *name = v == c->doc ? "root" : new_name(c, last);
    if (!name) return NULL;
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? c->cap_refs * 2 : 8;
        sc_ref *r = realloc(c->refs, (size_t)cap * sizeof *r);
        if (!r) {
            sc_oom(c);
            return NULL;
        }
        c->refs = r;
        c->cap_refs = cap;
    }
    char *ptr = strdup(ref);
    if (!ptr) {
        sc_oom(c);
        return NULL;
    }
    c->refs[c->n_refs++] = (sc_ref){ptr, (char *)name};
    if (!ref_insert(c, c->n_refs - 1)) return NULL;
    if (v == c->doc) return name; /* the root is compiled anyway */
    char saved[sizeof c->path];
    size_t saved_len = c->path_len;
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref + 1);
    c->path_len = strlen(c->path);
    bool ok = compile_rule(c, v, name);
    memcpy(c->path, saved, sizeof saved);
    c->path_len = saved_len;
    return ok ? name : NULL;
}

/* ---- integers with bounds ------------------------------------------------------------- */
enum { INT_DIGITS = 16 };

static int ndigits(int64_t x) {
    int n = 1;
    while (x >= 10) x /= 10, n++;
    return n;
}

/* digit strings X and Y of the same length k, X <= Y: every number between */
static void same_len(gstr *o, const char *X, const char *Y, int k) {
    int i = 0;
    while (i < k && X[i] == Y[i]) i++;
    if (i) {
        gstr_put(o, "\"", 1);
        gstr_put(o, X, (size_t)i);
        gstr_put(o, "\" ", 2);
    }
    if (i == k) return;
    X += i, Y += i, k -= i;
    bool zeros = true, nines = true;
    for (int j = 1; j < k; j++) {
        if (X[j] != '0') zeros = false;
        if (Y[j] != '9') nines = false;
    }
    char lo = X[0], hi = Y[0];
    bool first = true;
    gstr_put(o, "(", 1);
    if (!zeros) {
        char n9[32];
        memset(n9, '9', (size_t)k - 1);
        gstr_printf(o, "\"%c\" ", X[0]);
        same_len(o, X + 1, n9, k - 1);
        first = false;
        lo++;
    }
    bool tail = !nines;
    if (tail) hi--;
    if (lo <= hi) {
        if (!first) gstr_puts(o, " | ");
        gstr_printf(o, "[%c-%c]", lo, hi);
        if (k > 1) gstr_printf(o, " [0-9]{%d}", k - 1);
        first = false;
    }
    if (tail) {
        char n0[32];
        memset(n0, '0', (size_t)k - 1);
        if (!first) gstr_puts(o, " | ");
        gstr_printf(o, "\"%c\" ", Y[0]);
        same_len(o, n0, Y + 1, k - 1);
    }
    gstr_put(o, ")", 1);
}

static int64_t pow10i(int k) {
    int64_t p = 1;
    while (k-- > 0) p *= 10;
    return p;
}

/* [a, b] of non-negative integers (b < 0: unbounded, up to INT_DIGITS digits
 * or a's), as alternatives */
static void nonneg_range(gstr *o, int64_t a, int64_t b) {
    int la = ndigits(a), lb = b < 0 ? (la > INT_DIGITS ? la : INT_DIGITS) : ndigits(b);
    bool first = true;
    for (int len = la; len <= lb; len++) {
        int64_t lo = len == 1 ? 0 : pow10i(len - 1);
        int64_t hi = pow10i(len) - 1;
        if (lo < a) lo = a;
        if (b >= 0 && hi > b) hi = b;
        if (lo > hi) continue;
        if (!first) gstr_puts(o, " | ");
        first = false;
        if (b < 0 && len > la && len == la + 1) { /* every longer length at once */
            gstr_printf(o, "[1-9] [0-9]{%d,%d}", len - 1, lb - 1);
            break;
        }
        char X[32], Y[32];
        /* both have len digits: lo >= 10^(len-1) (or len is 1) */
        snprintf(X, sizeof X, "%lld", (long long)lo);
        snprintf(Y, sizeof Y, "%lld", (long long)hi);
        same_len(o, X, Y, len);
    }
}

static bool int_bound(sc *c, const gjson *s, const char *key, bool upper, bool *has, int64_t *out) {
    const gjson *v = gjson_get(s, key);
    if (!v) return true;
    if (v->type == GJSON_BOOL) return true; /* draft 4 form, read with minimum / maximum */
    if (v->type != GJSON_NUMBER) return sc_fail(c, KVANT_ERR_ARG, "'%s' must be a number", key);
    bool excl = !strncmp(key, "exclusive", 9);
    if (!excl) {
        const gjson *d4 = gjson_get(s, upper ? "exclusiveMaximum" : "exclusiveMinimum");
        excl = d4 && d4->type == GJSON_BOOL && d4->b;
    }
    double x = v->num;
    const double lim = 1e18;
    if (upper ? x >= lim : x <= -lim) return true; /* beyond anything the grammar writes */
    if (upper ? x <= -lim : x >= lim)
        return sc_fail(c, KVANT_ERR_UNSUPPORTED, "'%s' beyond +-10^18 is not supported", key);
    int64_t b;
    if (upper) b = excl ? (int64_t)ceil(x) - 1 : (int64_t)floor(x);
    else b = excl ? (int64_t)floor(x) + 1 : (int64_t)ceil(x);
    if (*has) b = upper ? (b < *out ? b : *out) : (b > *out ? b : *out);
    *has = true;
    *out = b;
    return true;
}

static bool int_range(sc *c, const gjson *s, gstr *o) {
    bool has_lo = false, has_hi = false;
    int64_t lo = 0, hi = 0;
    if (!int_bound(c, s, "minimum", false, &has_lo, &lo) || !int_bound(c, s, "exclusiveMinimum", false, &has_lo, &lo) ||
        !int_bound(c, s, "maximum", true, &has_hi, &hi) || !int_bound(c, s, "exclusiveMaximum", true, &has_hi, &hi))
        return false;
    if (has_lo && has_hi && lo > hi) return sc_fail(c, KVANT_ERR_ARG, "no integer lies within the bounds");
    gstr_put(o, "(", 1);
    bool any = false;
    if (!has_lo || lo < 0) { /* negatives: "-" and magnitudes [max(1, -hi), -lo] */
        int64_t mlo = has_hi && hi < -1 ? -hi : 1;
        gstr_puts(o, "\"-\" (");
        nonneg_range(o, mlo, has_lo ? -lo : -1);
        gstr_put(o, ")", 1);
        any = true;
    }
    if (!has_hi || hi >= 0) {
        if (any) gstr_puts(o, " | ");
        gstr_put(o, "(", 1);
        nonneg_range(o, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
        gstr_put(o, ")", 1);
    }
    gstr_printf(o, ") %s", use(c, P_WS));
    return true;
}

/* ---- string patterns ------------------------------------------------------------------- */
/* A code point as JSON string content, as a GBNF literal: the characters
 * JSON must escape in their escaped form. */
static void json_char_lit(gstr *o, uint32_t cp) {
    switch (cp) {
    case '"': gstr_puts(o, "\"\\\\\\\"\""); return;  /* \"  */
    case '\\': gstr_puts(o, "\"\\\\\\\\\""); return; /* \\  */
    case '\n': gstr_puts(o, "\"\\\\n\""); return;
    case '\r': gstr_puts(o, "\"\\\\r\""); return;
    case '\t': gstr_puts(o, "\"\\\\t\""); return;
    case '\b': gstr_puts(o, "\"\\\\b\""); return;
    case '\f': gstr_puts(o, "\"\\\\f\""); return;
    }
    if (cp < 0x20 || cp == 0x7F) {
        gstr_printf(o, "\"\\\\u%04x\"", cp);
        return;
    }
    if (cp < 0x80 && ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9')))
        gstr_printf(o, "\"%c\"", (char)cp);
    else if (cp < 0x10000) gstr_printf(o, "\"\\u%04X\"", cp);
    else gstr_printf(o, "\"\\U%08X\"", cp);
}

static bool is_json_special(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\' || cp == 0x7F; }

typedef struct {
    uint32_t *r; /* pairs */
    int n, cap;
} cpset;

static bool cp_add(cpset *s, uint32_t lo, uint32_t hi) {
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        uint32_t *p = realloc(s->r, (size_t)cap * 2 * sizeof *p);
        if (!p) return false;
        s->r = p;
        s->cap = cap;
    }
    s->r[2 * s->n] = lo, s->r[2 * s->n + 1] = hi, s->n++;
    return true;
}

static int cmp_pair(const void *x, const void *y) {
    const uint32_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

/* sorted and merged; negate: the complement within Unicode */
static bool cp_normalize(cpset *s, bool negate) {
    qsort(s->r, (size_t)s->n, 2 * sizeof *s->r, cmp_pair);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->r[2 * i] <= s->r[2 * (m - 1) + 1] + 1) {
            if (s->r[2 * i + 1] > s->r[2 * (m - 1) + 1]) s->r[2 * (m - 1) + 1] = s->r[2 * i + 1];
        } else {
            s->r[2 * m] = s->r[2 * i], s->r[2 * m + 1] = s->r[2 * i + 1], m++;
        }
    }
    s->n = m;
    if (!negate) return true;
    cpset c = {0};
    uint32_t next = 0;
    for (int i = 0; i < m; i++) {
        if (s->r[2 * i] > next && !cp_add(&c, next, s->r[2 * i] - 1)) return false;
        next = s->r[2 * i + 1] + 1;
    }
    if (next <= 0x10FFFF && !cp_add(&c, next, 0x10FFFF)) return false;
    free(s->r);
    *s = c;
    return true;
}

typedef struct {
    sc *c;
    const char *s;
    size_t n, i;
} rx;

static bool rx_fail_unsup(rx *r, const char *what) {
    return sc_fail(r->c, KVANT_ERR_UNSUPPORTED, "unsupported pattern feature %s in 'pattern' \"%.100s\"", what, r->s);
}
static bool rx_fail(rx *r, const char *what) {
    return sc_fail(r->c, KVANT_ERR_ARG, "bad 'pattern' \"%.100s\": %s", r->s, what);
}

/* the class escapes: \d \w \s and their negations */
static bool rx_shorthand(cpset *s, char e, bool *negated) {
    static const uint32_t d[] = {'0', '9'}, w[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'},
                          sp[] = {' ', ' ', '\t', '\r', 0x0B, 0x0C, 0xA0, 0xA0};
    const uint32_t *t;
    int n;
    switch (e) {
    case 'd': case 'D': t = d, n = 1; break;
    case 'w': case 'W': t = w, n = 4; break;
    case 's': case 'S': t = sp, n = 4; break;
    default: return false;
    }
    *negated = e == 'D' || e == 'W' || e == 'S';
    if (!*negated) {
        for (int i = 0; i < n; i++)
            if (!cp_add(s, t[2 * i], t[2 * i + 1])) return false;
        if (e == 's' && !cp_add(s, '\n', '\n')) return false;
        return true;
    }
    /* the complement, added range by range */
    cpset pos = {0};
    for (int i = 0; i < n; i++) cp_add(&pos, t[2 * i], t[2 * i + 1]);
    if (e == 'S') cp_add(&pos, '\n', '\n');
    bool ok = pos.r && cp_normalize(&pos, true);
    for (int i = 0; ok && i < pos.n; i++) ok = cp_add(s, pos.r[2 * i], pos.r[2 * i + 1]);
    free(pos.r);
    return ok;
}

static int hexv(char ch) {
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* one escaped character after '\' (the shorthands and anchors handled by the caller) */
static bool rx_escape_char(rx *r, uint32_t *cp) {
    if (r->i >= r->n) return rx_fail(r, "'\\' at the end");
    char e = r->s[r->i++];
    switch (e) {
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 't': *cp = '\t'; return true;
    case 'f': *cp = '\f'; return true;
    case 'v': *cp = 0x0B; return true;
    case '0': *cp = 0; return true;
    case 'x': case 'u': {
        int k = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int j = 0; j < k; j++) {
            int h = r->i < r->n ? hexv(r->s[r->i]) : -1;
            if (h < 0) return rx_fail(r, "bad \\x / \\u escape");
            v = v * 16 + (uint32_t)h;
            r->i++;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return rx_fail_unsup(r, "'\\u' surrogate escapes");
        *cp = v;
        return true;
    }
    case 'b': case 'B': return rx_fail_unsup(r, "'\\b' (word boundary)");
    case 'c': return rx_fail_unsup(r, "'\\c' (control escape)");
    case 'k': case 'p': case 'P': return rx_fail_unsup(r, e == 'k' ? "'\\k' (named backreference)" : "'\\p' (Unicode property)");
    }
    if (e >= '1' && e <= '9') return rx_fail_unsup(r, "backreferences");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
        char what[32];
        snprintf(what, sizeof what, "'\\%c'", e);
        return rx_fail_unsup(r, what);
    }
    uint32_t v;
    int len = gutf8_decode((const uint8_t *)r->s + r->i - 1, r->n - r->i + 1, &v);
    if (!len) return rx_fail(r, "invalid UTF-8");
    r->i += (size_t)len - 1;
    *cp = v;
    return true;
}

/* a character set as JSON string content: one GBNF group */
static bool emit_set(rx *r, gstr *o, cpset *s, bool negated) {
    if (!cp_normalize(s, negated)) return sc_oom(r->c);
    gstr raw = {0};
    gstr esc = {0};
    bool any_raw = false;
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        /* the specials inside [lo, hi]: escaped forms, for a set the pattern
         * named positively; the rest raw */
        for (uint32_t x = lo; x <= hi && x <= 0x7F; x++)
            if (is_json_special(x) && !negated) {
                if (esc.n) gstr_puts(&esc, " | ");
                json_char_lit(&esc, x);
            }
        uint32_t a = lo;
        while (a <= hi) {
            while (a <= hi && a <= 0x7F && is_json_special(a)) a++;
            if (a > hi) break;
            uint32_t b = a;
            while (b < hi) {
                if (b + 1 > 0x7F) b = hi; /* no specials above ASCII */
                else if (is_json_special(b + 1)) break;
                else b++;
            }
            if (!any_raw) gstr_put(&raw, "[", 1);
            any_raw = true;
            if (b < 0x10000) gstr_printf(&raw, "\\u%04X", a);
            else gstr_printf(&raw, "\\U%08X", a);
            if (b != a) {
                if (b < 0x10000) gstr_printf(&raw, "-\\u%04X", b);
                else gstr_printf(&raw, "-\\U%08X", b);
            }
            a = b + 1;
        }
    }
    if (any_raw) gstr_put(&raw, "]", 1);
    bool ok = true;
    if (!any_raw && !esc.n) ok = rx_fail(r, "a character class that matches nothing");
    else {
        gstr_put(o, "(", 1);
        if (any_raw) gstr_put(o, raw.s, raw.n);
        if (any_raw && esc.n) gstr_puts(o, " | ");
        if (esc.n) gstr_put(o, esc.s, esc.n);
        gstr_put(o, ")", 1);
    }
    if (raw.oom || esc.oom) ok = sc_oom(r->c);
    gstr_free(&raw);
    gstr_free(&esc);
    return ok;
}

static bool rx_alt(rx *r, gstr *o, int depth, int *n_alts);

static bool rx_class(rx *r, gstr *o) {
    r->i++; /* [ */
    bool neg = false;
    if (r->i < r->n && r->s[r->i] == '^') neg = true, r->i++;
    cpset s = {0};
    bool ok = true, first = true;
    while (ok && r->i < r->n && (r->s[r->i] != ']' || first)) {
        first = false;
        uint32_t lo;
        if (r->s[r->i] == '\\' && r->i + 1 < r->n) {
            bool sneg;
            if (rx_shorthand(&s, r->s[r->i + 1], &sneg)) {
                r->i += 2;
                continue;
            }
            r->i++;
            if (r->s[r->i] == 'b') { /* backspace inside a class */
                r->i++;
                lo = '\b';
            } else if (!rx_escape_char(r, &lo)) {
                ok = false;
                break;
            }
        } else {
            int len = gutf8_decode((const uint8_t *)r->s + r->i, r->n - r->i, &lo);
            if (!len) {
                ok = rx_fail(r, "invalid UTF-8");
                break;
            }
            r->i += (size_t)len;
        }
        uint32_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                if (!rx_escape_char(r, &hi)) {
                    ok = false;
                    break;
                }
            } else {
                int len = gutf8_decode((const uint8_t *)r->s + r->i, r->n - r->i, &hi);
                if (!len) {
                    ok = rx_fail(r, "invalid UTF-8");
                    break;
                }
                r->i += (size_t)len;
            }
            if (hi < lo) {
                ok = rx_fail(r, "a class range out of order");
                break;
            }
        }
        if (!cp_add(&s, lo, hi)) ok = sc_oom(r->c);
    }
    if (ok && (r->i >= r->n || r->s[r->i] != ']')) ok = rx_fail(r, "unterminated '['");
    if (ok) {
        r->i++;
        if (s.n == 0 && !neg) ok = rx_fail(r, "an empty class []");
        else ok = emit_set(r, o, &s, neg);
    }
    free(s.r);
    return ok;
}

static bool rx_atom(rx *r, gstr *o, int depth) {
    char ch = r->s[r->i];
    if (ch == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':') r->i += 2;
            else return rx_fail_unsup(r, "'(?' (lookaround or named group)");
        }
        int n_alts;
        gstr_put(o, "(", 1);
        if (!rx_alt(r, o, depth + 1, &n_alts)) return false;
        if (r->i >= r->n || r->s[r->i] != ')') return rx_fail(r, "missing ')'");
        r->i++;
        gstr_put(o, ")", 1);
        return true;
    }
    if (ch == '[') return rx_class(r, o);
    if (ch == '.') { /* any character but line terminators */
        r->i++;
        cpset s = {0};
        bool ok = cp_add(&s, '\n', '\n') && cp_add(&s, '\r', '\r') && cp_add(&s, 0x2028, 0x2029);
        ok = ok ? emit_set(r, o, &s, true) : sc_oom(r->c);
        free(s.r);
        return ok;
    }
    if (ch == '^' || ch == '$') return rx_fail_unsup(r, "'^' or '$' other than at the ends");
    if (ch == '*' || ch == '+' || ch == '?') return rx_fail(r, "a quantifier with nothing to repeat");
    uint32_t cp;
    if (ch == '\\') {
        r->i++;
        if (r->i < r->n) {
            cpset s = {0};
            bool neg;
            if (rx_shorthand(&s, r->s[r->i], &neg)) {
                r->i++;
                bool ok = emit_set(r, o, &s, false);
                free(s.r);
                return ok;
            }
            free(s.r);
        }
        if (!rx_escape_char(r, &cp)) return false;
    } else {
        int len = gutf8_decode((const uint8_t *)r->s + r->i, r->n - r->i, &cp);
        if (!len) return rx_fail(r, "invalid UTF-8");
        r->i += (size_t)len;
    }
    json_char_lit(o, cp);
    return true;
}

/* {m}, {m,}, {m,n} at r->i; false with nothing consumed when it is not one */
static bool rx_braces(rx *r, long *m, long *n) {
    size_t i = r->i + 1;
    long a = 0, b = -1;
    if (i >= r->n || r->s[i] < '0' || r->s[i] > '9') return false;
    for (; i < r->n && r->s[i] >= '0' && r->s[i] <= '9'; i++)
        if (a < 1000000) a = a * 10 + (r->s[i] - '0');
    if (i < r->n && r->s[i] == '}') b = a;
    else if (i < r->n && r->s[i] == ',') {
        i++;
        if (i < r->n && r->s[i] >= '0' && r->s[i] <= '9') {
            b = 0;
            for (; i < r->n && r->s[i] >= '0' && r->s[i] <= '9'; i++)
                if (b < 1000000) b = b * 10 + (r->s[i] - '0');
        }
        if (i >= r->n || r->s[i] != '}') return false;
    } else {
        return false;
    }
    r->i = i + 1;
    *m = a;
    *n = b;
    return true;
}

static bool rx_seq(rx *r, gstr *o, int depth) {
    bool first = true;
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')' && !r->c->failed) {
        gstr atom = {0};
        if (r->s[r->i] == '{') { /* a brace that is no quantifier is a literal */
            long m, n;
            size_t save = r->i;
            if (rx_braces(r, &m, &n)) {
                r->i = save;
                gstr_free(&atom);
                return rx_fail(r, "a quantifier with nothing to repeat");
            }
            r->i++;
            json_char_lit(&atom, '{');
        } else if (!rx_atom(r, &atom, depth)) {
            gstr_free(&atom);
            return false;
        }
        long m = -2, n = -2;
        if (r->i < r->n) {
            char q = r->s[r->i];
            if (q == '*') m = 0, n = -1, r->i++;
            else if (q == '+') m = 1, n = -1, r->i++;
            else if (q == '?') m = 0, n = 1, r->i++;
            else if (q == '{' && !rx_braces(r, &m, &n)) m = -2;
            if (m != -2 && r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: the same language */
            if (m != -2 && r->i < r->n && (r->s[r->i] == '*' || r->s[r->i] == '+' || r->s[r->i] == '?' ||
                                           (r->s[r->i] == '{' && r->i + 1 < r->n && r->s[r->i + 1] >= '0' &&
                                            r->s[r->i + 1] <= '9'))) {
                gstr_free(&atom);
                return rx_fail(r, "a quantifier after a quantifier");
            }
        }
        if (!first) gstr_put(o, " ", 1);
        first = false;
        if (m == -2) {
            gstr_put(o, atom.s ? atom.s : "\"\"", atom.s ? atom.n : 2);
        } else {
            if (m > GRAMMAR_MAX_REPEAT || n > GRAMMAR_MAX_REPEAT) {
                gstr_free(&atom);
                return rx_fail_unsup(r, "a repetition count above 100000");
            }
            if (n >= 0 && n < m) {
                gstr_free(&atom);
                return rx_fail(r, "{m,n} with n < m");
            }
            gstr_put(o, "(", 1);
            gstr_put(o, atom.s ? atom.s : "\"\"", atom.s ? atom.n : 2);
            gstr_put(o, ")", 1);
            if (m == 0 && n == -1) gstr_put(o, "*", 1);
            else if (m == 1 && n == -1) gstr_put(o, "+", 1);
            else if (m == 0 && n == 1) gstr_put(o, "?", 1);
            else if (n == -1) gstr_printf(o, "{%ld,}", m);
            else gstr_printf(o, "{%ld,%ld}", m, n);
        }
        gstr_free(&atom);
    }
    if (first) gstr_puts(o, "\"\"");
    return !r->c->failed;
}

static bool rx_alt(rx *r, gstr *o, int depth, int *n_alts) {
    if (depth > 64) return rx_fail(r, "groups nested too deeply");
    *n_alts = 1;
    if (!rx_seq(r, o, depth)) return false;
    while (r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        ++*n_alts;
        gstr_puts(o, " | ");
        if (!rx_seq(r, o, depth)) return false;
    }
    return true;
}

static bool pattern_body(sc *c, const char *pat, size_t len, gstr *o) {
    bool start = len && pat[0] == '^';
    bool end = false;
    if (len && pat[len - 1] == '$') {
        size_t bs = 0;
        for (size_t k = len - 1; k > 0 && pat[k - 1] == '\\'; k--) bs++;
        end = bs % 2 == 0;
    }
    rx r = {c, pat, end ? len - 1 : len, start ? 1 : 0};
    gstr e = {0};
    int n_alts = 0;
    bool ok = rx_alt(&r, &e, 0, &n_alts);
    if (ok && r.i < r.n) ok = rx_fail(&r, "unbalanced ')'");
    if (ok && n_alts > 1 && (start || end))
        ok = sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported pattern feature: '^' or '$' with a '|' outside a group "
                                               "in 'pattern' \"%.100s\" (put the alternatives in a group)", pat);
    if (ok) {
        gstr_puts(o, "\"\\\"\" ");
        if (!start) gstr_printf(o, "%s* ", use(c, P_CHAR));
        gstr_printf(o, "(%s)", e.s ? e.s : "\"\"");
        if (!end) gstr_printf(o, " %s*", use(c, P_CHAR));
        gstr_printf(o, " \"\\\"\" %s", use(c, P_WS));
    }
    if (e.oom) ok = sc_oom(c);
    gstr_free(&e);
    return ok;
}

/* ---- one schema ----------------------------------------------------------------------------- */
static const char *const formats[][2] = {
    {"date", "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"},
    {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] "
             "[0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
    {"date-time", NULL},
    {"uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}"},
};

static bool typed_string(sc *c, const gjson *s, gstr *o) {
    const gjson *pat = gjson_get(s, "pattern"), *fmt = gjson_get(s, "format");
    long mn = 0, mx = -1;
    bool has_mn, has_mx;
    if (!get_count(c, s, "minLength", &mn, &has_mn) || !get_count(c, s, "maxLength", &mx, &has_mx)) return false;
    if (has_mx && mx < mn) return sc_fail(c, KVANT_ERR_ARG, "'maxLength' is below 'minLength'");
    if (fmt) {
        if (fmt->type != GJSON_STRING) return sc_fail(c, KVANT_ERR_ARG, "'format' must be a string");
        if (pat || has_mn || has_mx)
            return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema keyword '%s' beside 'format'",
                           pat ? "pattern" : has_mn ? "minLength" : "maxLength");
        for (size_t k = 0; k < sizeof formats / sizeof *formats; k++)
            if (!strcmp(fmt->str, formats[k][0])) {
                gstr_puts(o, "\"\\\"\" ");
                if (k == 2) gstr_printf(o, "%s \"T\" %s", formats[0][1], formats[1][1]);
                else gstr_puts(o, formats[k][1]);
                gstr_printf(o, " \"\\\"\" %s", use(c, P_WS));
                return true;
            }
        return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema format '%.100s' (kvant knows date, time, "
                                                 "date-time, uuid)", fmt->str);
    }
    if (pat) {
        if (pat->type != GJSON_STRING) return sc_fail(c, KVANT_ERR_ARG, "'pattern' must be a string");
        if (has_mn || has_mx)
            return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema keyword '%s' beside 'pattern'",
                           has_mn ? "minLength" : "maxLength");
        return pattern_body(c, pat->str, pat->len, o);
    }
    if (!has_mn && !has_mx) {
        gstr_puts(o, use(c, P_STRING));
        return true;
    }
    gstr_printf(o, "\"\\\"\" %s", use(c, P_CHAR));
    if (has_mx) gstr_printf(o, "{%ld,%ld}", mn, mx);
    else gstr_printf(o, "{%ld,}", mn);
    gstr_printf(o, " \"\\\"\" %s", use(c, P_WS));
    return true;
}

/* comma-separated repetition of item: "[" ws (items) "]" ws */
static void array_of(sc *c, gstr *o, const char *item, long mn, long mx) {
    const char *ws = use(c, P_WS);
    gstr_printf(o, "\"[\" %s ", ws);
    if (mx == 0) {
    } else if (mn == 0) {
        gstr_printf(o, "(%s (\",\" %s %s)", item, ws, item);
        if (mx < 0) gstr_puts(o, "*");
        else gstr_printf(o, "{0,%ld}", mx - 1);
        gstr_puts(o, ")? ");
    } else {
        gstr_printf(o, "%s (\",\" %s %s)", item, ws, item);
        if (mx < 0) gstr_printf(o, "{%ld,}", mn - 1);
        else gstr_printf(o, "{%ld,%ld}", mn - 1, mx - 1);
        gstr_puts(o, " ");
    }
    gstr_printf(o, "\"]\" %s", ws);
}

static bool typed_array(sc *c, const gjson *s, const char *name, gstr *o) {
    long mn = 0, mx = -1;
    bool has_mn, has_mx;
    if (!get_count(c, s, "minItems", &mn, &has_mn) || !get_count(c, s, "maxItems", &mx, &has_mx)) return false;
    if (has_mx && mx < mn) return sc_fail(c, KVANT_ERR_ARG, "'maxItems' is below 'minItems'");
    const gjson *items = gjson_get(s, "items"), *prefix = gjson_get(s, "prefixItems");
    const gjson *extra = gjson_get(s, "additionalItems");
    const gjson *uniq = gjson_get(s, "uniqueItems");
    if (uniq && !(uniq->type == GJSON_BOOL && !uniq->b))
        return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema keyword 'uniqueItems' (only false)");
    if (items && items->type == GJSON_ARRAY) { /* draft 7 tuple */
        if (prefix) return sc_fail(c, KVANT_ERR_ARG, "both 'prefixItems' and an 'items' array");
        prefix = items;
        items = extra;
    } else if (extra) {
        if (!(extra->type == GJSON_BOOL && !extra->b) || !prefix)
            return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema keyword 'additionalItems'");
    }
    if (prefix) {
        if (prefix->type != GJSON_ARRAY) return sc_fail(c, KVANT_ERR_ARG, "'prefixItems' must be an array");
        if (items && !(items->type == GJSON_BOOL && !items->b))
            return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema keyword 'items' beside 'prefixItems' "
                                                     "(only false)");
        long k = prefix->n;
        if (has_mx && mx < k) k = mx;
        if (mn > k) return sc_fail(c, KVANT_ERR_ARG, "'minItems' above the tuple's length");
        const char *ws = use(c, P_WS);
        gstr_printf(o, "\"[\" %s ", ws);
        int open = 0;
        for (long i = 0; i < k; i++) {
            char seg[64], hint[32];
            snprintf(seg, sizeof seg, "prefixItems/%ld", i);
            snprintf(hint, sizeof hint, "item%ld", i);
            const char *it = compile_sub(c, prefix->items[i], name, hint, seg);
            if (!it) return false;
            if (i >= mn) gstr_put(o, "(", 1), open++;
            if (i) gstr_printf(o, "\",\" %s ", ws);
            gstr_printf(o, "%s ", it);
        }
        for (int i = 0; i < open; i++) gstr_puts(o, ")? ");
        gstr_printf(o, "\"]\" %s", ws);
        return true;
    }
    if (items && items->type == GJSON_BOOL && !items->b) {
        if (mn > 0) return sc_fail(c, KVANT_ERR_ARG, "'minItems' with 'items': false");
        array_of(c, o, "", 0, 0);
        return true;
    }
    const char *item = items ? compile_sub(c, items, name, "item", "items") : use(c, P_VALUE);
    if (!item) return false;
    array_of(c, o, item, mn, mx);
    return true;
}

static bool typed_object(sc *c, const gjson *s, const char *name, gstr *o) {
    const gjson *props = gjson_get(s, "properties"), *req = gjson_get(s, "required");
    const gjson *ap = gjson_get(s, "additionalProperties");
    const char *ws = use(c, P_WS);
    if (props && props->type != GJSON_OBJECT) return sc_fail(c, KVANT_ERR_ARG, "'properties' must be an object");
    if (req && req->type != GJSON_ARRAY) return sc_fail(c, KVANT_ERR_ARG, "'required' must be an array");
    if (ap && ap->type != GJSON_BOOL && ap->type != GJSON_OBJECT)
        return sc_fail(c, KVANT_ERR_ARG, "'additionalProperties' must be a boolean or a schema");
    for (int i = 0; req && i < req->n; i++) {
        if (req->items[i]->type != GJSON_STRING) return sc_fail(c, KVANT_ERR_ARG, "'required' must list strings");
        if (!gjson_get(props, req->items[i]->str))
            return sc_fail(c, KVANT_ERR_UNSUPPORTED, "required property '%.100s' is not in 'properties' (kvant "
                                                     "needs its schema there)", req->items[i]->str);
    }
    if (!props || props->n == 0) {
        if (ap && ap->type == GJSON_BOOL && !ap->b) {
            gstr_printf(o, "\"{\" %s \"}\" %s", ws, ws);
            return true;
        }
        const char *val = ap && ap->type == GJSON_OBJECT ? compile_sub(c, ap, name, "value", "additionalProperties")
                                                         : use(c, P_VALUE);
        if (!val) return false;
        const char *str = use(c, P_STRING);
        gstr_printf(o, "\"{\" %s (%s \":\" %s %s (\",\" %s %s \":\" %s %s)*)? \"}\" %s", ws, str, ws, val, ws, str,
                    ws, val, ws);
        return true;
    }
    if (ap && !(ap->type == GJSON_BOOL && !ap->b))
        return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema keyword 'additionalProperties' beside "
                                                 "'properties' (only false, the default)");
    int n = props->n;
    const char **kv = calloc((size_t)n, sizeof *kv);
    bool *need = calloc((size_t)n, sizeof *need);
    if (!kv || !need) {
        free(kv), free(need);
        return sc_oom(c);
    }
    bool ok = true, all = true;
    for (int i = 0; i < n && ok; i++) {
        for (int k = 0; req && k < req->n; k++)
            if (req->items[k]->len == props->key_lens[i] && !memcmp(req->items[k]->str, props->keys[i], props->key_lens[i]))
                need[i] = true;
        if (!need[i]) all = false;
        size_t save = path_push(c, "properties");
        const char *val = compile_sub(c, props->items[i], name, props->keys[i], props->keys[i]);
        path_pop(c, save);
        if (!val) {
            ok = false;
            break;
        }
        /* "key": value */
        gstr b = {0};
        gjson key = {.type = GJSON_STRING, .str = props->keys[i], .len = props->key_lens[i]};
        size_t kl;
        char *kt = gjson_write(&key, &kl);
        if (!kt) {
            ok = sc_oom(c);
            break;
        }
        lit(&b, kt, kl);
        free(kt);
        gstr_printf(&b, " %s \":\" %s %s", ws, ws, val);
        char hint[100];
        snprintf(hint, sizeof hint, "%.60s-kv", props->keys[i]);
        kv[i] = child_name(c, name, hint);
        if (!kv[i] || b.oom) ok = b.oom ? sc_oom(c) : false;
        else emit_rule(c, kv[i], &b);
        gstr_free(&b);
    }
    if (ok && all) {
        gstr_printf(o, "\"{\" %s ", ws);
        for (int i = 0; i < n; i++) gstr_printf(o, "%s%s%s%s ", i ? "\",\" " : "", i ? ws : "", i ? " " : "", kv[i]);
        gstr_printf(o, "\"}\" %s", ws);
    } else if (ok) {
        /* rest(i): the properties from i on, after one was written (each
         * with its comma); first(i): from i on, none written yet */
        const char **rest = calloc((size_t)n + 1, sizeof *rest), **first = calloc((size_t)n + 1, sizeof *first);
        if (!rest || !first) ok = sc_oom(c);
        for (int i = n - 1; i >= 0 && ok; i--) {
            gstr b = {0};
            char hint[32];
            if (need[i]) gstr_printf(&b, "\",\" %s %s", ws, kv[i]);
            else gstr_printf(&b, "(\",\" %s %s)?", ws, kv[i]);
            if (rest[i + 1]) gstr_printf(&b, " %s", rest[i + 1]);
            snprintf(hint, sizeof hint, "rest-%d", i);
            rest[i] = child_name(c, name, hint);
            if (!rest[i]) ok = false;
            else emit_rule(c, rest[i], &b);
            gstr_free(&b);
            if (!ok) break;
            gstr f = {0};
            gstr_printf(&f, "%s%s%s", kv[i], rest[i + 1] ? " " : "", rest[i + 1] ? rest[i + 1] : "");
            if (!need[i]) gstr_printf(&f, " | %s", first[i + 1] ? first[i + 1] : "\"\"");
            snprintf(hint, sizeof hint, "first-%d", i);
            first[i] = child_name(c, name, hint);
            if (!first[i]) ok = false;
            else emit_rule(c, first[i], &f);
            gstr_free(&f);
        }
        if (ok) gstr_printf(o, "\"{\" %s %s \"}\" %s", ws, first[0], ws);
        free(rest);
        free(first);
    }
    free(kv);
    free(need);
    return ok;
}

static bool typed(sc *c, const gjson *s, const char *type, const char *name, gstr *o) {
    if (!strcmp(type, "null")) gstr_puts(o, use(c, P_NULL));
    else if (!strcmp(type, "boolean")) gstr_puts(o, use(c, P_BOOLEAN));
    else if (!strcmp(type, "integer")) {
        if (gjson_get(s, "minimum") || gjson_get(s, "maximum") || gjson_get(s, "exclusiveMinimum") ||
            gjson_get(s, "exclusiveMaximum"))
            return int_range(c, s, o);
        gstr_puts(o, use(c, P_INTEGER));
    } else if (!strcmp(type, "number")) {
        static const char *const b[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        for (int k = 0; k < 4; k++)
            if (gjson_get(s, b[k]))
                return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema keyword '%s' for type 'number' "
                                                         "(kvant bounds integers only)", b[k]);
        gstr_puts(o, use(c, P_NUMBER));
    } else if (!strcmp(type, "string")) return typed_string(c, s, o);
    else if (!strcmp(type, "array")) return typed_array(c, s, name, o);
    else if (!strcmp(type, "object")) return typed_object(c, s, name, o);
    else return sc_fail(c, KVANT_ERR_ARG, "unknown type '%.60s'", type);
    return true;
}

/* the type a schema without "type" has, from its keywords; NULL: any */
static const char *infer_type(const gjson *s) {
    static const struct {
        const char *key, *type;
    } t[] = {{"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
             {"items", "array"},       {"prefixItems", "array"}, {"minItems", "array"},
             {"maxItems", "array"},    {"minLength", "string"}, {"maxLength", "string"},
             {"pattern", "string"},    {"format", "string"},    {"minimum", "integer"},
             {"maximum", "integer"},   {"exclusiveMinimum", "integer"}, {"exclusiveMaximum", "integer"}};
    for (size_t k = 0; k < sizeof t / sizeof *t; k++)
        if (gjson_get(s, t[k].key)) return t[k].type;
    return NULL;
}

static bool compile_body(sc *c, const gjson *s, const char *name, gstr *o) {
    if (s->type == GJSON_BOOL) {
        if (!s->b) return sc_fail(c, KVANT_ERR_ARG, "the schema false matches nothing");
        gstr_puts(o, use(c, P_VALUE));
        return true;
    }
    if (s->type != GJSON_OBJECT) return sc_fail(c, KVANT_ERR_ARG, "a schema must be an object or a boolean");
    const char *assertion = NULL; /* the first keyword that constrains */
    for (int i = 0; i < s->n; i++) {
        const char *k = s->keys[i];
        if (is_annotation(k)) continue;
        if (!in_list(handled, k)) return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema keyword '%.100s'", k);
        if (!assertion) assertion = k;
    }
    /* the combinators take the whole schema: nothing else may constrain beside them */
    static const char *const whole[] = {"$ref", "const", "enum", "anyOf", "oneOf", "allOf"};
    for (size_t w = 0; w < sizeof whole / sizeof *whole; w++) {
        const gjson *v = gjson_get(s, whole[w]);
        if (!v) continue;
        for (int i = 0; i < s->n; i++) {
            const char *k = s->keys[i];
            if (is_annotation(k) || !strcmp(k, whole[w])) continue;
            /* "type" beside const / enum says nothing more */
            if (!strcmp(k, "type") && (w == 1 || w == 2)) continue;
            return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema keyword '%.100s' beside '%s'", k,
                           whole[w]);
        }
        if (w == 0) {
            if (v->type != GJSON_STRING) return sc_fail(c, KVANT_ERR_ARG, "'$ref' must be a string");
            const char *r = compile_ref(c, v->str);
            if (!r) return false;
            gstr_puts(o, r);
            return true;
        }
        if (w == 1) {
            json_lit(c, o, v);
            return !c->failed;
        }
        if (v->type != GJSON_ARRAY || v->n == 0)
            return sc_fail(c, KVANT_ERR_ARG, "'%s' must be a non-empty array", whole[w]);
        if (w == 5 && v->n > 1)
            return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema keyword 'allOf' with more than one "
                                                     "schema");
        if (w == 2) return enum_body(c, v, name, o);
        for (int i = 0; i < v->n; i++) {
            if (i) gstr_puts(o, " | ");
            char seg[64], hint[32];
            snprintf(seg, sizeof seg, "%s/%d", whole[w], i);
            snprintf(hint, sizeof hint, "%d", i);
            const char *sub = compile_sub(c, v->items[i], name, hint, seg);
            if (!sub) return false;
            gstr_puts(o, sub);
        }
        return !c->failed;
    }
    const gjson *t = gjson_get(s, "type");
    if (!t) {
        const char *it = infer_type(s);
        if (!it) {
            gstr_puts(o, use(c, P_VALUE));
            return true;
        }
        return typed(c, s, it, name, o);
    }
    if (t->type == GJSON_STRING) return typed(c, s, t->str, name, o);
    if (t->type != GJSON_ARRAY || t->n == 0)
        return sc_fail(c, KVANT_ERR_ARG, "'type' must be a string or a non-empty array");
    for (int i = 0; i < t->n; i++) {
        if (t->items[i]->type != GJSON_STRING) return sc_fail(c, KVANT_ERR_ARG, "'type' must list strings");
        if (i) gstr_puts(o, " | ");
        gstr_put(o, "(", 1);
        if (!typed(c, s, t->items[i]->str, name, o)) return false;
        gstr_put(o, ")", 1);
    }
    return true;
}

/* Recursive: a sub-schema's rule is compiled inside its parent's, and a
 * $ref's target where it is first met, so a chain of $refs (a -> b -> c ...)
 * nests one call per link: bounded by GRAMMAR_MAX_SCHEMA_DEPTH (a 1 MiB body
 * holds a chain of 30000, which overflowed the stack). */
static bool compile_rule(sc *c, const gjson *s, const char *name) {
    if (c->depth >= GRAMMAR_MAX_SCHEMA_DEPTH)
        return sc_fail(c, KVANT_ERR_ARG, "sub-schemas nested more than %d deep (through properties, items, anyOf "
                                         "and $ref chains)", GRAMMAR_MAX_SCHEMA_DEPTH);
    c->depth++;
    gstr body = {0};
    bool ok = compile_body(c, s, name, &body);
    c->depth--;
    if (ok && body.oom) ok = sc_oom(c);
    if (ok) emit_rule(c, name, &body);
    gstr_free(&body);
    return ok;
}

/* a rule for sub-schema s (seg: its place under the current path) */
static const char *compile_sub(sc *c, const gjson *s, const char *parent, const char *hint, const char *seg) {
    size_t save = path_push(c, seg);
    const char *r = NULL;
    /* a bare {"type": "<primitive>"} is the shared rule */
    if (s->type == GJSON_OBJECT) {
        const gjson *t = NULL;
        bool only_type = true;
        for (int i = 0; i < s->n; i++) {
            if (is_annotation(s->keys[i])) continue;
            if (!strcmp(s->keys[i], "type")) t = s->items[i];
            else only_type = false;
        }
        if (only_type && t && t->type == GJSON_STRING) {
            static const struct {
                const char *t;
                int p;
            } m[] = {{"string", P_STRING}, {"number", P_NUMBER}, {"integer", P_INTEGER}, {"boolean", P_BOOLEAN},
                     {"null", P_NULL},     {"object", P_OBJECT}, {"array", P_ARRAY}};
            for (size_t k = 0; k < sizeof m / sizeof *m; k++)
                if (!strcmp(t->str, m[k].t)) r = use(c, m[k].p);
        }
    } else if (s->type == GJSON_BOOL && s->b) {
        r = use(c, P_VALUE);
    }
    if (!r) {
        const char *name = child_name(c, parent, hint);
        if (name && compile_rule(c, s, name)) r = name;
    }
    path_pop(c, save);
    return r;
}

static void sc_free(sc *c) {
    gstr_free(&c->out);
    for (int i = 0; i < c->n_names; i++) free(c->names[i]);
    free(c->names);
    free(c->name_hash);
    for (int i = 0; i < c->n_refs; i++) free(c->refs[i].ptr);
    free(c->refs);
    free(c->ref_hash);
}

char *grammar_schema_to_gbnf(const char *schema_json, size_t len, kvant_status *st) {
    /* empty means any value */
    size_t k = 0;
    while (schema_json && k < len && (schema_json[k] == ' ' || schema_json[k] == '\n' || schema_json[k] == '\t' ||
                                      schema_json[k] == '\r'))
        k++;
    gjson *doc = NULL;
    if (schema_json && k < len) {
        doc = gjson_parse(schema_json, len, st);
        if (!doc) {
            if (st && st->code == KVANT_ERR_ARG) {
                char m[sizeof st->msg];
                snprintf(m, sizeof m, "%s", st->msg);
                core_fail(st, KVANT_ERR_ARG, "JSON Schema is not valid JSON: %s", m);
            }
            return NULL;
        }
    }
    sc c = {.doc = doc, .st = st};
    const char *root = new_name(&c, "root");
    bool ok = root != NULL;
    if (ok) {
        if (doc) ok = compile_rule(&c, doc, root);
        else {
            gstr b = {0};
            gstr_puts(&b, use(&c, P_VALUE));
            emit_rule(&c, root, &b);
            gstr_free(&b);
        }
    }
    /* the primitives used, and what they use */
    for (int changed = 1; ok && changed;) {
        changed = 0;
        for (int p = 0; p < P_N; p++)
            if ((c.prim >> p & 1) && (c.prim | prim_deps[p]) != c.prim) c.prim |= prim_deps[p], changed = 1;
    }
    for (int p = 0; ok && p < P_N; p++)
        if (c.prim >> p & 1) gstr_printf(&c.out, "%s ::= %s\n", prim_name[p], prim_body[p]);
    if (ok && c.out.oom) ok = sc_oom(&c);
    gjson_free(doc);
    if (!ok) {
        sc_free(&c);
        return NULL;
    }
    char *text = c.out.s;
    c.out.s = NULL;
    sc_free(&c);
    core_ok(st);
    return text;
}

grammar *grammar_from_json_schema(const char *schema_json, size_t len, kvant_status *st) {
    char *text = grammar_schema_to_gbnf(schema_json, len, st);
    if (!text) return NULL;
    grammar *g = gbnf_compile(text, strlen(text), st);
    if (!g && st && st->code == KVANT_ERR_ARG) {
        char m[sizeof st->msg];
        snprintf(m, sizeof m, "%s", st->msg);
        core_fail(st, KVANT_ERR_ARG, "JSON Schema compiled to a bad grammar (a kvant bug): %s", m);
    }
    free(text);
    return g;
}

grammar *grammar_json_object(kvant_status *st) {
    static const char schema[] = "{\"type\": \"object\"}";
    return grammar_from_json_schema(schema, sizeof schema - 1, st);
}
