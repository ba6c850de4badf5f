/* grammar/schema_pattern.c - a JSON Schema string "pattern" (the regex
 * subset grammar.h lists: literals, classes, shorthands, groups,
 * alternation, ?*+{m,n}, anchors) as a GBNF rule over JSON string content. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/schema_impl.h"

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

bool schema_pattern_body(sc *c, const char *pat, size_t len, gstr *o) {
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
        if (!start) gstr_printf(o, "%s* ", sc_use(c, P_CHAR));
        gstr_printf(o, "(%s)", e.s ? e.s : "\"\"");
        if (!end) gstr_printf(o, " %s*", sc_use(c, P_CHAR));
        gstr_printf(o, " \"\\\"\" %s", sc_use(c, P_WS));
    }
    if (e.oom) ok = sc_oom(c);
    gstr_free(&e);
    return ok;
}
