/* grammar/schema.c - JSON Schema to GBNF (the subset grammar.h lists), then
 * through the GBNF compiler: the walker over the schema (names, $ref,
 * enum/const, strings, arrays, objects, anyOf); integer bounds are
 * schema_int.c's, string patterns schema_pattern.c's.  Every value rule matches its value and the
 * bounded whitespace after it (ws), as llama.cpp's converter does; the
 * root rule is the top schema.  Rules made for a schema are named from
 * its place ("root-address-city"); the shared primitives are json-*. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/schema_impl.h"

/* the shared rules, written when first used */
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


bool sc_fail(sc *c, kvant_code code, const char *fmt, ...) {
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

bool sc_oom(sc *c) {
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

const char *sc_use(sc *c, int p) {
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
    gstr_printf(o, " %s", sc_use(c, P_WS));
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
    gstr_printf(o, ") %s", sc_use(c, P_WS));
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
                gstr_printf(o, " \"\\\"\" %s", sc_use(c, P_WS));
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
        return schema_pattern_body(c, pat->str, pat->len, o);
    }
    if (!has_mn && !has_mx) {
        gstr_puts(o, sc_use(c, P_STRING));
        return true;
    }
    gstr_printf(o, "\"\\\"\" %s", sc_use(c, P_CHAR));
    if (has_mx) gstr_printf(o, "{%ld,%ld}", mn, mx);
    else gstr_printf(o, "{%ld,}", mn);
    gstr_printf(o, " \"\\\"\" %s", sc_use(c, P_WS));
    return true;
}

/* comma-separated repetition of item: "[" ws (items) "]" ws */
static void array_of(sc *c, gstr *o, const char *item, long mn, long mx) {
    const char *ws = sc_use(c, P_WS);
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
        const char *ws = sc_use(c, P_WS);
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
    const char *item = items ? compile_sub(c, items, name, "item", "items") : sc_use(c, P_VALUE);
    if (!item) return false;
    array_of(c, o, item, mn, mx);
    return true;
}

static bool typed_object(sc *c, const gjson *s, const char *name, gstr *o) {
    const gjson *props = gjson_get(s, "properties"), *req = gjson_get(s, "required");
    const gjson *ap = gjson_get(s, "additionalProperties");
    const char *ws = sc_use(c, P_WS);
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
                                                         : sc_use(c, P_VALUE);
        if (!val) return false;
        const char *str = sc_use(c, P_STRING);
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
    if (!strcmp(type, "null")) gstr_puts(o, sc_use(c, P_NULL));
    else if (!strcmp(type, "boolean")) gstr_puts(o, sc_use(c, P_BOOLEAN));
    else if (!strcmp(type, "integer")) {
        if (gjson_get(s, "minimum") || gjson_get(s, "maximum") || gjson_get(s, "exclusiveMinimum") ||
            gjson_get(s, "exclusiveMaximum"))
            return schema_int_range(c, s, o);
        gstr_puts(o, sc_use(c, P_INTEGER));
    } else if (!strcmp(type, "number")) {
        static const char *const b[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        for (int k = 0; k < 4; k++)
            if (gjson_get(s, b[k]))
                return sc_fail(c, KVANT_ERR_UNSUPPORTED, "unsupported JSON Schema keyword '%s' for type 'number' "
                                                         "(kvant bounds integers only)", b[k]);
        gstr_puts(o, sc_use(c, P_NUMBER));
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
        gstr_puts(o, sc_use(c, P_VALUE));
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
            gstr_puts(o, sc_use(c, P_VALUE));
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
                if (!strcmp(t->str, m[k].t)) r = sc_use(c, m[k].p);
        }
    } else if (s->type == GJSON_BOOL && s->b) {
        r = sc_use(c, P_VALUE);
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
            gstr_puts(&b, sc_use(&c, P_VALUE));
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
