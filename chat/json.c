/* json.c - chat/'s JSON: a recursive-descent reader into an arena, and the
 * `tojson` / compact writers (see json.h for what each writes).  Input is
 * untrusted (request bodies, model output): every read is bounded by the
 * length, nesting by MAX_DEPTH, an object's members by MAX_MEMBERS (a key
 * given twice is found by a linear scan up to LINEAR_KEYS members, then by
 * a hash set). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/json.h"

enum { MAX_DEPTH = 256, MAX_MEMBERS = 4096 };

/* ---- text buffer ----------------------------------------------------------------- */
void chat_buf_putn(chat_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (n > SIZE_MAX / 2 - b->len) {
        b->oom = true;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void chat_buf_put(chat_buf *b, const char *s) { chat_buf_putn(b, s, strlen(s)); }

/* ---- arena ----------------------------------------------------------------------- */
typedef struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(max_align_t) unsigned char data[];
} block;

struct chat_json_doc {
    block *head;
};

chat_json_doc *chat_json_doc_new(void) { return calloc(1, sizeof(chat_json_doc)); }

void chat_json_doc_free(chat_json_doc *d) {
    if (!d) return;
    for (block *b = d->head, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    free(d);
}

static void *arena_alloc(chat_json_doc *d, size_t n) {
    n = (n + 15) & ~(size_t)15;
    block *b = d->head;
    if (!b || b->cap - b->used < n) {
        const size_t cap = n > 16384 ? n : 16384;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = d->head;
        d->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

/* ---- reader ---------------------------------------------------------------------- */
typedef struct {
    chat_json_doc *d;
    const char *s;
    size_t n, i;
    bool oom;
} reader;

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_ws(reader *r) {
    while (r->i < r->n && is_space(r->s[r->i])) r->i++;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_hex4(reader *r, unsigned *out) {
    if (r->n - r->i < 4) return false;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        const int h = hexval(r->s[r->i + (size_t)k]);
        if (h < 0) return false;
        v = v * 16 + (unsigned)h;
    }
    r->i += 4;
    *out = v;
    return true;
}

static size_t put_utf8(unsigned char *o, unsigned cp) { /* cp < 0x110000; surrogates as WTF-8 */
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    if (cp < 0x800) return o[0] = (unsigned char)(0xC0 | cp >> 6), o[1] = (unsigned char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* a string at r->i (the opening quote): its decoded bytes in the arena */
static bool read_string(reader *r, const char **out, size_t *out_n) {
    r->i++; /* the quote */
    /* the decoded text is never longer than the escaped one: find the end first */
    size_t j = r->i;
    while (j < r->n && r->s[j] != '"') {
        if (r->s[j] == '\\') j++;
        j++;
    }
    if (j >= r->n) return false;
    unsigned char *o = arena_alloc(r->d, j - r->i + 1);
    if (!o) return r->oom = true, false;
    size_t k = 0;
    while (r->s[r->i] != '"') {
        const unsigned char c = (unsigned char)r->s[r->i];
        if (c < 0x20) return false; /* raw control characters are not JSON */
        if (c != '\\') {
            o[k++] = c;
            r->i++;
            continue;
        }
        r->i++;
        const char e = r->s[r->i++];
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (!read_hex4(r, &cp)) return false;
            if (cp >= 0xD800 && cp < 0xDC00 && r->n - r->i >= 6 && r->s[r->i] == '\\' && r->s[r->i + 1] == 'u') {
                const size_t save = r->i;
                r->i += 2;
                if (read_hex4(r, &lo) && lo >= 0xDC00 && lo < 0xE000)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    r->i = save; /* a lone high surrogate; the next escape is read on its own */
            }
            k += put_utf8(o + k, cp); /* 6 escaped bytes -> at most 3, 12 -> 4 */
            break;
        }
        default: return false;
        }
    }
    r->i++; /* the closing quote */
    o[k] = 0;
    *out = (const char *)o;
    *out_n = k;
    return true;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static bool read_number(reader *r, chat_json *v) {
    const size_t start = r->i;
    if (r->i < r->n && r->s[r->i] == '-') r->i++;
    if (r->i >= r->n || !is_digit(r->s[r->i])) return false;
    if (r->s[r->i] == '0') r->i++;
    else
        while (r->i < r->n && is_digit(r->s[r->i])) r->i++;
    if (r->i < r->n && r->s[r->i] == '.') {
        r->i++;
        if (r->i >= r->n || !is_digit(r->s[r->i])) return false;
        while (r->i < r->n && is_digit(r->s[r->i])) r->i++;
    }
    if (r->i < r->n && (r->s[r->i] == 'e' || r->s[r->i] == 'E')) {
        r->i++;
        if (r->i < r->n && (r->s[r->i] == '+' || r->s[r->i] == '-')) r->i++;
        if (r->i >= r->n || !is_digit(r->s[r->i])) return false;
        while (r->i < r->n && is_digit(r->s[r->i])) r->i++;
    }
    const size_t len = r->i - start;
    char *t = arena_alloc(r->d, len + 1);
    if (!t) return r->oom = true, false;
    memcpy(t, r->s + start, len);
    t[len] = 0;
    v->kind = CHAT_JSON_NUM;
    v->s = t;
    v->n = len;
    v->num = strtod(t, NULL); /* overflow: +-HUGE_VAL, as JSON.parse gives Infinity */
    return true;
}

static bool word(reader *r, const char *w) {
    const size_t k = strlen(w);
    if (r->n - r->i < k || memcmp(r->s + r->i, w, k)) return false;
    r->i += k;
    return true;
}

static chat_json *read_value(reader *r, int depth);

static chat_json *new_node(reader *r) {
    chat_json *v = arena_alloc(r->d, sizeof *v);
    if (!v) return r->oom = true, NULL;
    memset(v, 0, sizeof *v);
    return v;
}

static bool read_array(reader *r, chat_json *v, int depth) {
    v->kind = CHAT_JSON_ARR;
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->s[r->i] == ']') return r->i++, true;
    chat_json **tail = &v->child;
    for (;;) {
        chat_json *e = read_value(r, depth + 1);
        if (!e) return false;
        *tail = e;
        tail = &e->next;
        v->count++;
        skip_ws(r);
        if (r->i >= r->n) return false;
        if (r->s[r->i] == ']') return r->i++, true;
        if (r->s[r->i++] != ',') return false;
    }
}

/* An object's keys past LINEAR_KEYS members are found through a hash set
 * (open addressing over the members, grown at half full): a linear scan
 * per key was quadratic, 40 objects of 4096 members took 4 s, and such
 * text arrives in a request (a tool call's arguments, which the templates
 * parse). */
enum { LINEAR_KEYS = 16 };

typedef struct {
    chat_json **slot;
    size_t cap; /* a power of two, or 0: no set yet */
} key_set;

static uint64_t key_hash(const char *k, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)k[i]) * 1099511628211ull;
    return h;
}

static void key_put(key_set *ks, chat_json *m) {
    size_t i = (size_t)key_hash(m->key, m->key_n) & (ks->cap - 1);
    while (ks->slot[i]) i = (i + 1) & (ks->cap - 1);
    ks->slot[i] = m;
}

/* the member of v named key, or NULL; false when out of memory */
static bool key_find(key_set *ks, const chat_json *v, const char *key, size_t key_n, chat_json **out) {
    *out = NULL;
    if (v->count < LINEAR_KEYS) {
        for (chat_json *m = v->child; m; m = m->next)
            if (m->key_n == key_n && !memcmp(m->key, key, key_n)) return *out = m, true;
        return true;
    }
    if ((size_t)v->count * 2 >= ks->cap) { /* (re)build at half full */
        size_t cap = ks->cap ? ks->cap * 2 : 64;
        chat_json **slot = calloc(cap, sizeof *slot);
        if (!slot) return false;
        free(ks->slot);
        ks->slot = slot, ks->cap = cap;
        for (chat_json *m = v->child; m; m = m->next) key_put(ks, m);
    }
    for (size_t i = (size_t)key_hash(key, key_n) & (ks->cap - 1); ks->slot[i]; i = (i + 1) & (ks->cap - 1))
        if (ks->slot[i]->key_n == key_n && !memcmp(ks->slot[i]->key, key, key_n)) return *out = ks->slot[i], true;
    return true;
}

static bool read_members(reader *r, chat_json *v, int depth, key_set *ks) {
    chat_json **tail = &v->child;
    for (;;) {
        skip_ws(r);
        if (r->i >= r->n || r->s[r->i] != '"') return false;
        const char *key;
        size_t key_n;
        if (!read_string(r, &key, &key_n)) return false;
        skip_ws(r);
        if (r->i >= r->n || r->s[r->i++] != ':') return false;
        chat_json *e = read_value(r, depth + 1);
        if (!e) return false;
        e->key = key;
        e->key_n = key_n;
        chat_json *same; /* a key given twice: its first place, its last value */
        if (!key_find(ks, v, key, key_n, &same)) return r->oom = true, false;
        if (same) {
            chat_json *nx = same->next;
            *same = *e;
            same->next = nx;
        } else {
            if (v->count >= MAX_MEMBERS) return false;
            *tail = e;
            tail = &e->next;
            v->count++;
            if (ks->cap) key_put(ks, e);
        }
        skip_ws(r);
        if (r->i >= r->n) return false;
        if (r->s[r->i] == '}') return r->i++, true;
        if (r->s[r->i++] != ',') return false;
    }
}

static bool read_object(reader *r, chat_json *v, int depth) {
    v->kind = CHAT_JSON_OBJ;
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->s[r->i] == '}') return r->i++, true;
    key_set ks = {0};
    const bool ok = read_members(r, v, depth, &ks);
    free(ks.slot);
    return ok;
}

static chat_json *read_value(reader *r, int depth) {
    if (depth > MAX_DEPTH) return NULL;
    skip_ws(r);
    if (r->i >= r->n) return NULL;
    chat_json *v = new_node(r);
    if (!v) return NULL;
    bool ok;
    switch (r->s[r->i]) {
    case '{': ok = read_object(r, v, depth); break;
    case '[': ok = read_array(r, v, depth); break;
    case '"':
        v->kind = CHAT_JSON_STR;
        ok = read_string(r, &v->s, &v->n);
        break;
    case 't': ok = word(r, "true"), v->kind = CHAT_JSON_TRUE; break;
    case 'f': ok = word(r, "false"), v->kind = CHAT_JSON_FALSE; break;
    case 'n': ok = word(r, "null"), v->kind = CHAT_JSON_NULL; break;
    default: ok = read_number(r, v); break;
    }
    return ok ? v : NULL;
}

chat_json *chat_json_parse(chat_json_doc *d, const char *text, size_t len, size_t *end, bool *oom) {
    reader r = {.d = d, .s = text, .n = text ? len : 0};
    chat_json *v = d ? read_value(&r, 0) : NULL;
    if (oom) *oom = r.oom;
    if (end) *end = r.i;
    return v;
}

chat_json *chat_json_parse_all(chat_json_doc *d, const char *text, size_t len, bool *oom) {
    size_t end;
    chat_json *v = chat_json_parse(d, text, len, &end, oom);
    if (!v) return NULL;
    while (end < len && is_space(text[end])) end++;
    return end == len ? v : NULL;
}

chat_json *chat_json_get(const chat_json *v, const char *key) {
    if (!v || v->kind != CHAT_JSON_OBJ) return NULL;
    const size_t k = strlen(key);
    for (chat_json *m = v->child; m; m = m->next)
        if (m->key_n == k && !memcmp(m->key, key, k)) return m;
    return NULL;
}

bool chat_json_is_str(const chat_json *v, const char *s) {
    return v && v->kind == CHAT_JSON_STR && v->n == strlen(s) && !memcmp(v->s, s, v->n);
}

/* ---- writers --------------------------------------------------------------------- */
/* the code point of a surrogate in raw bytes (ED A0..BF 80..BF: WTF-8 / CESU-8) at s, else 0 */
static unsigned raw_surrogate(const char *s, size_t n) {
    if (n < 3 || (unsigned char)s[0] != 0xED || ((unsigned char)s[1] & 0xE0) != 0xA0 ||
        ((unsigned char)s[2] & 0xC0) != 0x80)
        return 0;
    return 0xD000u | ((unsigned)((unsigned char)s[1] & 0x3F) << 6) | ((unsigned char)s[2] & 0x3F);
}

void chat_json_put_str(chat_buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    chat_buf_putn(b, "\"", 1);
    size_t run = 0; /* bytes copied as they are, in one go */
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        char esc[8];
        size_t en = 0, skip = 0;
        switch (c) {
        case '"': memcpy(esc, "\\\"", en = 2); break;
        case '\\': memcpy(esc, "\\\\", en = 2); break;
        case '\b': memcpy(esc, "\\b", en = 2); break;
        case '\f': memcpy(esc, "\\f", en = 2); break;
        case '\n': memcpy(esc, "\\n", en = 2); break;
        case '\r': memcpy(esc, "\\r", en = 2); break;
        case '\t': memcpy(esc, "\\t", en = 2); break;
        default: {
            const unsigned cp = c == 0xED ? raw_surrogate(s + i, n - i) : 0; /* a surrogate (WTF-8) */
            if (c < 0x20) {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4], esc[5] = hex[c & 15];
                en = 6;
            } else if (cp) {
                const unsigned next = cp < 0xDC00 ? raw_surrogate(s + i + 3, n - i - 3) : 0,
                               lo = next >= 0xDC00 ? next : 0;
                if (lo) { /* a high one and a low one in raw bytes (CESU-8) are one
                           * character, as the escaped pair is: written as its UTF-8 */
                    en = put_utf8((unsigned char *)esc, 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00));
                    skip = 5;
                } else { /* a lone one: escaped, as JSON.stringify does */
                    memcpy(esc, "\\u", 2);
                    for (int k = 0; k < 4; k++) esc[2 + k] = hex[(cp >> (12 - 4 * k)) & 15];
                    en = 6;
                    skip = 2;
                }
            }
        }
        }
        if (!en) {
            run++;
            continue;
        }
        chat_buf_putn(b, s + i - run, run);
        run = 0;
        chat_buf_putn(b, esc, en);
        i += skip;
    }
    chat_buf_putn(b, s + n - run, run);
    chat_buf_putn(b, "\"", 1);
}

/* x as JavaScript's Number.prototype.toString (ECMA-262 Number::toString):
 * the shortest digits that read back as x, positional for 1e-7 < |x| < 1e21 */
static void put_js_number(chat_buf *b, double x) {
    if (!isfinite(x)) { /* JSON.stringify(Infinity) */
        chat_buf_put(b, "null");
        return;
    }
    if (x == 0) {
        chat_buf_put(b, "0");
        return;
    }
    char tmp[40], digits[24];
    int k = 0, e = 0;
    for (int p = 1; p <= 17; p++) { /* the shortest round trip; %e rounds to the nearest */
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, fabs(x));
        if (strtod(tmp, NULL) == fabs(x) || p == 17) break;
    }
    const char *q = tmp;
    for (; *q && *q != 'e'; q++)
        if (is_digit(*q)) digits[k++] = *q;
    if (*q == 'e') e = atoi(q + 1);
    while (k > 1 && digits[k - 1] == '0') k--;
    digits[k] = 0;
    const int n = e + 1; /* x = 0.d1d2...dk * 10^n */
    char out[48];
    size_t o = 0;
    if (x < 0) out[o++] = '-';
    if (k <= n && n <= 21) {
        memcpy(out + o, digits, (size_t)k), o += (size_t)k;
        for (int i = k; i < n; i++) out[o++] = '0';
    } else if (0 < n && n <= 21) {
        memcpy(out + o, digits, (size_t)n), o += (size_t)n;
        out[o++] = '.';
        memcpy(out + o, digits + n, (size_t)(k - n)), o += (size_t)(k - n);
    } else if (-6 < n && n <= 0) {
        out[o++] = '0', out[o++] = '.';
        for (int i = 0; i < -n; i++) out[o++] = '0';
        memcpy(out + o, digits, (size_t)k), o += (size_t)k;
    } else {
        out[o++] = digits[0];
        if (k > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, (size_t)(k - 1)), o += (size_t)(k - 1);
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
    chat_buf_putn(b, out, o);
}

/* an array index as JavaScript orders object keys: "0" or 1-9 then digits, below 2^32 - 1 */
static bool array_index(const chat_json *m, uint64_t *out) {
    if (!m->key_n || m->key_n > 10 || (m->key[0] == '0' && m->key_n > 1)) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < m->key_n; i++) {
        if (!is_digit(m->key[i])) return false;
        v = v * 10 + (uint64_t)(m->key[i] - '0');
    }
    *out = v;
    return v < 4294967295u;
}

int chat_json_members(const chat_json *obj, const chat_json ***out) {
    *out = NULL;
    if (!obj || obj->kind != CHAT_JSON_OBJ || !obj->count) return 0;
    const chat_json **m = malloc(sizeof *m * (size_t)obj->count);
    uint64_t *idx = malloc(sizeof *idx * (size_t)obj->count);
    if (!m || !idx) {
        free(m);
        free(idx);
        return -1;
    }
    int n = 0, ni = 0;
    for (const chat_json *c = obj->child; c; c = c->next) /* the indices first, ascending (insertion sort) */
        if (array_index(c, &idx[ni])) {
            int j = ni;
            const uint64_t v = idx[ni];
            while (j > 0 && idx[j - 1] > v) idx[j] = idx[j - 1], m[j] = m[j - 1], j--;
            idx[j] = v;
            m[j] = c;
            ni++;
        }
    n = ni;
    for (const chat_json *c = obj->child; c; c = c->next) {
        uint64_t v;
        if (!array_index(c, &v)) m[n++] = c;
    }
    free(idx);
    *out = m;
    return n;
}

static void put_pad(chat_buf *b, int indent, int depth) {
    chat_buf_putn(b, "\n", 1);
    for (int i = 0; i < indent * depth; i++) chat_buf_putn(b, " ", 1);
}

static void tojson(chat_buf *b, const chat_json *v, int indent, int depth) {
    switch (v->kind) {
    case CHAT_JSON_NULL: chat_buf_put(b, "null"); return;
    case CHAT_JSON_FALSE: chat_buf_put(b, "false"); return;
    case CHAT_JSON_TRUE: chat_buf_put(b, "true"); return;
    case CHAT_JSON_NUM: put_js_number(b, v->num); return;
    case CHAT_JSON_STR: chat_json_put_str(b, v->s, v->n); return;
    case CHAT_JSON_ARR:
        chat_buf_putn(b, "[", 1);
        for (const chat_json *c = v->child; c; c = c->next) {
            if (c != v->child) chat_buf_put(b, indent ? "," : ", ");
            if (indent) put_pad(b, indent, depth + 1);
            tojson(b, c, indent, depth + 1);
        }
        if (indent && v->count) put_pad(b, indent, depth);
        chat_buf_putn(b, "]", 1);
        return;
    case CHAT_JSON_OBJ: {
        const chat_json **m;
        const int n = chat_json_members(v, &m);
        if (n < 0) {
            b->oom = true;
            return;
        }
        chat_buf_putn(b, "{", 1);
        for (int i = 0; i < n; i++) {
            if (i) chat_buf_put(b, indent ? "," : ", ");
            if (indent) put_pad(b, indent, depth + 1);
            chat_json_put_str(b, m[i]->key, m[i]->key_n);
            chat_buf_putn(b, ": ", 2);
            tojson(b, m[i], indent, depth + 1);
        }
        if (indent && n) put_pad(b, indent, depth);
        chat_buf_putn(b, "}", 1);
        free(m);
        return;
    }
    }
}

void chat_json_tojson(chat_buf *b, const chat_json *v, int indent) { tojson(b, v, indent, 0); }

void chat_json_compact(chat_buf *b, const chat_json *v) {
    switch (v->kind) {
    case CHAT_JSON_NULL: chat_buf_put(b, "null"); return;
    case CHAT_JSON_FALSE: chat_buf_put(b, "false"); return;
    case CHAT_JSON_TRUE: chat_buf_put(b, "true"); return;
    case CHAT_JSON_NUM: chat_buf_putn(b, v->s, v->n); return;
    case CHAT_JSON_STR: chat_json_put_str(b, v->s, v->n); return;
    case CHAT_JSON_ARR:
    case CHAT_JSON_OBJ: {
        const bool obj = v->kind == CHAT_JSON_OBJ;
        chat_buf_putn(b, obj ? "{" : "[", 1);
        for (const chat_json *c = v->child; c; c = c->next) {
            if (c != v->child) chat_buf_putn(b, ",", 1);
            if (obj) chat_json_put_str(b, c->key, c->key_n), chat_buf_putn(b, ":", 1);
            chat_json_compact(b, c);
        }
        chat_buf_putn(b, obj ? "}" : "]", 1);
        return;
    }
    }
}
