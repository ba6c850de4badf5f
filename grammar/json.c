/* grammar/json.c - a small JSON DOM reader and compact writer for the
 * schema compiler (grammar.h, "the JSON reader").  RFC 8259; the text must
 * be UTF-8; depth-limited; duplicate object keys are refused (a schema
 * with two "type"s has no single meaning). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

typedef struct {
    const char *s;
    size_t n, i;
    kvant_status *st;
    bool failed;
} jp;

static gjson *jerr(jp *p, const char *what) {
    if (!p->failed) core_fail(p->st, KVANT_ERR_ARG, "JSON: %s at offset %zu", what, p->i);
    p->failed = true;
    return NULL;
}

static gjson *joom(jp *p) {
    if (!p->failed) core_fail(p->st, KVANT_ERR_NOMEM, "JSON: out of memory");
    p->failed = true;
    return NULL;
}

static void jspace(jp *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

void gjson_free(gjson *v) {
    if (!v) return;
    for (int i = 0; i < v->n; i++) {
        gjson_free(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->key_lens);
    free(v->sorted);
    free(v->str);
    free(v);
}

static int hex4(const char *s) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* a string at p->i (the opening quote): decoded into *out (malloc'd) */
static bool jstring(jp *p, char **out, size_t *out_len) {
    p->i++;
    /* decoded is never longer than the text */
    size_t start = p->i;
    size_t end = start;
    while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n) {
        p->i = start - 1;
        jerr(p, "unterminated string");
        return false;
    }
    char *d = malloc(end - start + 1);
    if (!d) {
        joom(p);
        return false;
    }
    size_t k = 0;
    while (p->i < end) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c < 0x20) {
            free(d);
            jerr(p, "control character in a string");
            return false;
        }
        if (c != '\\') {
            uint32_t cp;
            int len = gutf8_decode((const uint8_t *)p->s + p->i, end - p->i, &cp);
            if (!len) {
                free(d);
                jerr(p, "invalid UTF-8 in a string");
                return false;
            }
            memcpy(d + k, p->s + p->i, (size_t)len);
            k += (size_t)len;
            p->i += (size_t)len;
            continue;
        }
        char e = p->i + 1 < p->n ? p->s[p->i + 1] : 0;
        p->i += 2;
        switch (e) {
        case '"': d[k++] = '"'; break;
        case '\\': d[k++] = '\\'; break;
        case '/': d[k++] = '/'; break;
        case 'b': d[k++] = '\b'; break;
        case 'f': d[k++] = '\f'; break;
        case 'n': d[k++] = '\n'; break;
        case 'r': d[k++] = '\r'; break;
        case 't': d[k++] = '\t'; break;
        case 'u': {
            int u = p->i + 4 <= p->n ? hex4(p->s + p->i) : -1;
            if (u < 0) {
                free(d);
                jerr(p, "bad \\u escape");
                return false;
            }
            p->i += 4;
            uint32_t cp = (uint32_t)u;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                int lo = p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u' ? hex4(p->s + p->i + 2) : -1;
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    free(d);
                    jerr(p, "unpaired surrogate in \\u escape");
                    return false;
                }
                p->i += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                free(d);
                jerr(p, "unpaired surrogate in \\u escape");
                return false;
            }
            /* the 6 or 12 bytes of text hold the at most 4 of UTF-8 */
            k += (size_t)gutf8_encode(cp, (uint8_t *)d + k);
            break;
        }
        default:
            free(d);
            p->i -= 2;
            jerr(p, "bad escape in a string");
            return false;
        }
    }
    d[k] = 0;
    p->i = end + 1;
    *out = d;
    *out_len = k;
    return true;
}

static gjson *jnew(jp *p, gjson_type t) {
    gjson *v = calloc(1, sizeof *v);
    if (!v) return joom(p);
    v->type = t;
    return v;
}

static bool jappend(jp *p, gjson *v, gjson *item, char *key, size_t key_len, int *cap) {
    if (v->n == *cap) {
        int c = *cap ? *cap * 2 : 4;
        gjson **it = realloc(v->items, (size_t)c * sizeof *it);
        if (!it) goto oom;
        v->items = it;
        if (v->type == GJSON_OBJECT) {
            char **k = realloc(v->keys, (size_t)c * sizeof *k);
            if (!k) goto oom;
            v->keys = k;
            size_t *kl = realloc(v->key_lens, (size_t)c * sizeof *kl);
            if (!kl) goto oom;
            v->key_lens = kl;
        }
        *cap = c;
    }
    v->items[v->n] = item;
    if (v->type == GJSON_OBJECT) v->keys[v->n] = key, v->key_lens[v->n] = key_len;
    v->n++;
    return true;
oom:
    gjson_free(item);
    free(key);
    joom(p);
    return false;
}

/* keys of an object: by length, then bytes (the order of gjson.sorted) */
static int key_cmp(const char *a, size_t al, const char *b, size_t bl) {
    if (al != bl) return al < bl ? -1 : 1;
    return al ? memcmp(a, b, al) : 0;
}

typedef struct {
    const char *k;
    size_t l;
    int i;
} jkey;

static int jkey_cmp(const void *x, const void *y) {
    const jkey *a = x, *b = y;
    int c = key_cmp(a->k, a->l, b->k, b->l);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

/* A finished object of more than GJSON_LINEAR members: v->sorted, and the
 * duplicate-key check by sorting (a check of each key against all before
 * it was quadratic: 20000 members took 9 s); false + the error. */
static bool jsort(jp *p, gjson *v, size_t at) {
    jkey *t = malloc((size_t)v->n * sizeof *t);
    v->sorted = malloc((size_t)v->n * sizeof *v->sorted);
    if (!t || !v->sorted) {
        free(t);
        joom(p);
        return false;
    }
    for (int i = 0; i < v->n; i++) t[i] = (jkey){v->keys[i], v->key_lens[i], i};
    qsort(t, (size_t)v->n, sizeof *t, jkey_cmp);
    int dup = -1; /* the first member, in the text's order, whose key came before */
    for (int i = 0; i < v->n; i++) {
        v->sorted[i] = t[i].i;
        if (i && !key_cmp(t[i - 1].k, t[i - 1].l, t[i].k, t[i].l) && (dup < 0 || t[i].i < dup)) dup = t[i].i;
    }
    free(t);
    if (dup < 0) return true;
    char what[160];
    snprintf(what, sizeof what, "duplicate key '%.100s' in the object", v->keys[dup]);
    p->i = at;
    jerr(p, what);
    return false;
}

static gjson *jvalue(jp *p, int depth) {
    if (depth > GJSON_MAX_DEPTH) return jerr(p, "nesting too deep");
    jspace(p);
    if (p->i >= p->n) return jerr(p, "unexpected end of the text");
    char c = p->s[p->i];
    if (c == '{' || c == '[') {
        bool obj = c == '{';
        const size_t open_at = p->i;
        gjson *v = jnew(p, obj ? GJSON_OBJECT : GJSON_ARRAY);
        if (!v) return NULL;
        int cap = 0;
        p->i++;
        jspace(p);
        if (p->i < p->n && p->s[p->i] == (obj ? '}' : ']')) {
            p->i++;
            return v;
        }
        for (;;) {
            char *key = NULL;
            size_t key_len = 0;
            if (obj) {
                jspace(p);
                if (p->i >= p->n || p->s[p->i] != '"') {
                    gjson_free(v);
                    return jerr(p, "expected a string key");
                }
                size_t at = p->i;
                if (!jstring(p, &key, &key_len)) {
                    gjson_free(v);
                    return NULL;
                }
                for (int k = 0; k < v->n && v->n < GJSON_LINEAR; k++) /* larger: jsort at the end */
                    if (v->key_lens[k] == key_len && !memcmp(v->keys[k], key, key_len)) {
                        free(key);
                        gjson_free(v);
                        p->i = at;
                        return jerr(p, "duplicate key");
                    }
                jspace(p);
                if (p->i >= p->n || p->s[p->i] != ':') {
                    free(key);
                    gjson_free(v);
                    return jerr(p, "expected ':'");
                }
                p->i++;
            }
            gjson *item = jvalue(p, depth + 1);
            if (!item || !jappend(p, v, item, key, key_len, &cap)) {
                if (!item) free(key);
                gjson_free(v);
                return NULL;
            }
            jspace(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == (obj ? '}' : ']')) {
                p->i++;
                if (obj && v->n > GJSON_LINEAR && !jsort(p, v, open_at)) {
                    gjson_free(v);
                    return NULL;
                }
                return v;
            }
            gjson_free(v);
            return jerr(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    if (c == '"') {
        gjson *v = jnew(p, GJSON_STRING);
        if (v && !jstring(p, &v->str, &v->len)) {
            gjson_free(v);
            return NULL;
        }
        return v;
    }
    static const struct {
        const char *w;
        gjson_type t;
        bool b;
    } words[] = {{"true", GJSON_BOOL, true}, {"false", GJSON_BOOL, false}, {"null", GJSON_NULL, false}};
    for (int k = 0; k < 3; k++) {
        size_t l = strlen(words[k].w);
        if (p->i + l <= p->n && !memcmp(p->s + p->i, words[k].w, l)) {
            gjson *v = jnew(p, words[k].t);
            if (v) v->b = words[k].b;
            p->i += l;
            return v;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        size_t s = p->i;
        if (p->s[p->i] == '-') p->i++;
        size_t d = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
        if (p->i == d || (p->s[d] == '0' && p->i > d + 1)) return jerr(p, "bad number");
        if (p->i < p->n && p->s[p->i] == '.') {
            p->i++;
            size_t f = p->i;
            while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
            if (p->i == f) return jerr(p, "bad number");
        }
        if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
            p->i++;
            if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
            size_t f = p->i;
            while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
            if (p->i == f) return jerr(p, "bad number");
        }
        gjson *v = jnew(p, GJSON_NUMBER);
        if (!v) return NULL;
        v->len = p->i - s;
        v->str = malloc(v->len + 1);
        if (!v->str) {
            gjson_free(v);
            return joom(p);
        }
        memcpy(v->str, p->s + s, v->len);
        v->str[v->len] = 0;
        v->num = strtod(v->str, NULL);
        return v;
    }
    return jerr(p, "unexpected character");
}

gjson *gjson_parse(const char *text, size_t len, kvant_status *st) {
    jp p = {.s = text ? text : "", .n = text ? len : 0, .st = st};
    gjson *v = jvalue(&p, 0);
    if (!v) return NULL;
    jspace(&p);
    if (p.i < p.n) {
        gjson_free(v);
        return jerr(&p, "unexpected text after the value");
    }
    core_ok(st);
    return v;
}

const gjson *gjson_get(const gjson *obj, const char *key) {
    if (!obj || obj->type != GJSON_OBJECT) return NULL;
    size_t l = strlen(key);
    if (obj->sorted) { /* a large object: binary search */
        int lo = 0, hi = obj->n;
        while (lo < hi) {
            const int mid = lo + (hi - lo) / 2, i = obj->sorted[mid];
            const int c = key_cmp(obj->keys[i], obj->key_lens[i], key, l);
            if (!c) return obj->items[i];
            if (c < 0) lo = mid + 1;
            else hi = mid;
        }
        return NULL;
    }
    for (int i = 0; i < obj->n; i++)
        if (obj->key_lens[i] == l && !memcmp(obj->keys[i], key, l)) return obj->items[i];
    return NULL;
}

/* ---- writer ------------------------------------------------------------------------- */
static void wstring(gstr *b, const char *s, size_t n) {
    gstr_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': gstr_put(b, "\\\"", 2); break;
        case '\\': gstr_put(b, "\\\\", 2); break;
        case '\n': gstr_put(b, "\\n", 2); break;
        case '\r': gstr_put(b, "\\r", 2); break;
        case '\t': gstr_put(b, "\\t", 2); break;
        case '\b': gstr_put(b, "\\b", 2); break;
        case '\f': gstr_put(b, "\\f", 2); break;
        default:
            if (c < 0x20) gstr_printf(b, "\\u%04x", c);
            else gstr_put(b, s + i, 1);
        }
    }
    gstr_put(b, "\"", 1);
}

static void wvalue(gstr *b, const gjson *v) {
    switch (v->type) {
    case GJSON_NULL: gstr_puts(b, "null"); break;
    case GJSON_BOOL: gstr_puts(b, v->b ? "true" : "false"); break;
    case GJSON_NUMBER: gstr_put(b, v->str, v->len); break;
    case GJSON_STRING: wstring(b, v->str, v->len); break;
    case GJSON_ARRAY:
    case GJSON_OBJECT:
        gstr_put(b, v->type == GJSON_ARRAY ? "[" : "{", 1);
        for (int i = 0; i < v->n; i++) {
            if (i) gstr_put(b, ",", 1);
            if (v->type == GJSON_OBJECT) {
                wstring(b, v->keys[i], v->key_lens[i]);
                gstr_put(b, ":", 1);
            }
            wvalue(b, v->items[i]);
        }
        gstr_put(b, v->type == GJSON_ARRAY ? "]" : "}", 1);
        break;
    }
}

char *gjson_write(const gjson *v, size_t *len) {
    gstr b = {0};
    wvalue(&b, v);
    if (b.oom || !b.s) {
        gstr_free(&b);
        return NULL;
    }
    if (len) *len = b.n;
    return b.s;
}
