/* grammar/gbnf.c - llama.cpp's GBNF text into the builder (grammar.h has
 * the syntax).  Recursive descent; errors name the line and column. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

enum { GBNF_MAX_DEPTH = 256 };

typedef struct {
    const char *s;
    size_t n, i;
    gbuild *b;
    kvant_status *st;
    bool failed;
    int depth;
} gp;

static void where(const gp *p, size_t at, int *line, int *col) {
    int l = 1;
    size_t ls = 0;
    for (size_t k = 0; k < at && k < p->n; k++)
        if (p->s[k] == '\n') l++, ls = k + 1;
    *line = l;
    *col = (int)(at - ls) + 1;
}

static bool vperr_at(gp *p, size_t at, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
static bool vperr_at(gp *p, size_t at, const char *fmt, va_list ap) {
    if (p->failed) return false;
    p->failed = true;
    if (p->b->oom) return false; /* st already says why */
    int line, col;
    where(p, at, &line, &col);
    char msg[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    core_fail(p->st, KVANT_ERR_ARG, "GBNF line %d, column %d: %s", line, col, msg);
    return false;
}
static bool perr_at(gp *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool perr_at(gp *p, size_t at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bool r = vperr_at(p, at, fmt, ap);
    va_end(ap);
    return r;
}
static bool perr(gp *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool perr(gp *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bool r = vperr_at(p, p->i, fmt, ap);
    va_end(ap);
    return r;
}
static bool fail_oom(gp *p) {
    p->failed = true;
    return false;
}

static int peek(const gp *p, size_t k) { return p->i + k < p->n ? (unsigned char)p->s[p->i + k] : -1; }

static bool is_name_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void skip_space(gp *p, bool newline_ok) {
    while (p->i < p->n) {
        int c = peek(p, 0);
        if (c == ' ' || c == '\t') {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r') p->i++;
        } else if (newline_ok && (c == '\n' || c == '\r')) {
            p->i++;
        } else {
            break;
        }
    }
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* one character of a literal or class: an escape or a UTF-8 character */
static bool parse_char(gp *p, uint32_t *cp) {
    size_t at = p->i;
    if (p->i >= p->n) return perr(p, "unexpected end of the grammar");
    int c = peek(p, 0);
    if (c == '\\') {
        int e = peek(p, 1);
        int digits = 0;
        switch (e) {
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'n': *cp = '\n'; break;
        case 'r': *cp = '\r'; break;
        case 't': *cp = '\t'; break;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': *cp = (uint32_t)e; break;
        default: {
            char esc[8];
            snprintf(esc, sizeof esc, "\\%c", e > 32 && e < 127 ? e : '?');
            return perr(p, "unknown escape '%s'", esc);
        }
        }
        p->i += 2;
        if (digits) {
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                int h = hexval(peek(p, 0));
                if (h < 0) return perr_at(p, at, "escape '\\%c' needs hex digits", e);
                v = v * 16 + (uint32_t)h;
                p->i++;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return perr_at(p, at, "escape is not a Unicode scalar value");
            *cp = v;
        }
        return true;
    }
    int len = gutf8_decode((const uint8_t *)p->s + p->i, p->n - p->i, cp);
    if (!len) return perr(p, "invalid UTF-8");
    p->i += (size_t)len;
    return true;
}

static bool push(gp *p, gvec *v, uint32_t e) { return gb_push(p->b, v, e) || fail_oom(p); }

static bool push_byte(gp *p, gvec *v, uint8_t c) {
    gbits s = {{0}};
    gbits_set(&s, c);
    uint32_t e = gb_set(p->b, &s);
    if (e == UINT32_MAX) return fail_oom(p);
    return push(p, v, e);
}

static bool parse_literal(gp *p, gvec *v) {
    size_t at = p->i++;
    while (p->i < p->n && p->s[p->i] != '"') {
        if (p->s[p->i] == '\n' || p->s[p->i] == '\r') break;
        uint32_t cp;
        if (!parse_char(p, &cp)) return false;
        uint8_t u[4];
        int k = gutf8_encode(cp, u);
        for (int j = 0; j < k; j++)
            if (!push_byte(p, v, u[j])) return false;
    }
    if (p->i >= p->n || p->s[p->i] != '"') return perr_at(p, at, "unterminated string literal");
    p->i++;
    return true;
}

static bool parse_class(gp *p, uint32_t owner, gvec *v) {
    size_t at = p->i++;
    bool neg = false;
    if (peek(p, 0) == '^') neg = true, p->i++;
    uint32_t *r = NULL;
    int n = 0, cap = 0;
    bool ok = true;
    while (ok && p->i < p->n && p->s[p->i] != ']') {
        if (p->s[p->i] == '\n' || p->s[p->i] == '\r') break;
        uint32_t lo, hi;
        if (!parse_char(p, &lo)) {
            ok = false;
            break;
        }
        hi = lo;
        if (peek(p, 0) == '-' && peek(p, 1) != ']' && peek(p, 1) >= 0) {
            p->i++;
            if (!parse_char(p, &hi)) {
                ok = false;
                break;
            }
            if (hi < lo) {
                free(r);
                return perr_at(p, at, "character class range out of order");
            }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            uint32_t *q = realloc(r, (size_t)cap * 2 * sizeof *q);
            if (!q) {
                free(r);
                core_fail(p->st, KVANT_ERR_NOMEM, "grammar: out of memory");
                p->b->oom = true;
                return fail_oom(p);
            }
            r = q;
        }
        r[2 * n] = lo, r[2 * n + 1] = hi, n++;
    }
    if (!ok) {
        free(r);
        return false;
    }
    if (p->i >= p->n || p->s[p->i] != ']') {
        free(r);
        return perr_at(p, at, "unterminated character class");
    }
    p->i++;
    if (n == 0 && !neg) {
        free(r);
        return perr_at(p, at, "empty character class []");
    }
    ok = gb_class(p->b, owner, v, r, n, neg);
    free(r);
    if (!ok) return p->b->oom ? fail_oom(p) : perr_at(p, at, "character class matches no character");
    return true;
}

static bool parse_int(gp *p, long *out) {
    if (peek(p, 0) < '0' || peek(p, 0) > '9') return false;
    long v = 0;
    while (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
        if (v <= GRAMMAR_MAX_REPEAT) v = v * 10 + (peek(p, 0) - '0');
        p->i++;
    }
    *out = v;
    return true;
}

static bool parse_alternates(gp *p, uint32_t rid, bool nested);

static bool parse_sequence(gp *p, uint32_t rid, gvec *seq, bool nested) {
    uint32_t last = seq->n;
    bool have = false; /* an element to repeat */
    while (p->i < p->n && !p->failed) {
        int c = peek(p, 0);
        size_t at = p->i;
        if (c == '"') {
            last = seq->n;
            have = true;
            if (!parse_literal(p, seq)) return false;
        } else if (c == '[') {
            last = seq->n;
            have = true;
            if (!parse_class(p, rid, seq)) return false;
        } else if (c == '.') {
            last = seq->n;
            have = true;
            p->i++;
            if (!gb_class(p->b, rid, seq, NULL, 0, true)) return fail_oom(p);
        } else if (is_name_char(c)) {
            size_t s = p->i;
            while (is_name_char(peek(p, 0))) p->i++;
            uint32_t r = gb_rule_named(p->b, p->s + s, p->i - s);
            if (r == UINT32_MAX) return fail_oom(p);
            if (!p->b->rules[r].ref_at) p->b->rules[r].ref_at = s + 1;
            last = seq->n;
            have = true;
            if (!push(p, seq, GE_REF | r)) return false;
        } else if (c == '(') {
            if (++p->depth > GBNF_MAX_DEPTH) return perr(p, "groups nested too deeply");
            p->i++;
            skip_space(p, true);
            uint32_t sub = gb_rule_new(p->b, rid);
            if (sub == UINT32_MAX) return fail_oom(p);
            if (!parse_alternates(p, sub, true)) return false;
            if (peek(p, 0) != ')') return perr_at(p, at, "missing ')' for this '('");
            p->i++;
            p->depth--;
            last = seq->n;
            have = true;
            if (!push(p, seq, GE_REF | sub)) return false;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (!have) {
                char op[2] = {(char)c, 0};
                return perr(p, "'%s' with nothing before it to repeat", op);
            }
            long min = 0, max = -1;
            p->i++;
            if (c == '+') min = 1;
            else if (c == '?') max = 1;
            else if (c == '{') {
                skip_space(p, false);
                bool has_min = parse_int(p, &min);
                skip_space(p, false);
                if (peek(p, 0) == ',') {
                    p->i++;
                    skip_space(p, false);
                    if (!parse_int(p, &max)) max = -1;
                    skip_space(p, false);
                } else {
                    if (!has_min) return perr_at(p, at, "expected a count in '{...}'");
                    max = min;
                }
                if (!has_min) min = 0;
                if (peek(p, 0) != '}') return perr_at(p, at, "expected '}' to close the repetition");
                p->i++;
                if (min > GRAMMAR_MAX_REPEAT || max > GRAMMAR_MAX_REPEAT) {
                    char lim[32];
                    snprintf(lim, sizeof lim, "%d", GRAMMAR_MAX_REPEAT);
                    return perr_at(p, at, "repetition count above %s", lim);
                }
                if (max >= 0 && max < min) return perr_at(p, at, "repetition {m,n} with n < m");
            }
            if (!gb_repeat(p->b, rid, seq, last, min, max)) return fail_oom(p);
        } else if (c == '<') {
            return perr(p, "token references (<...>) are not supported");
        } else {
            break;
        }
        skip_space(p, nested);
    }
    return !p->failed;
}

static bool end_alt(gp *p, uint32_t rid, gvec *seq) {
    for (uint32_t i = 0; i < seq->n; i++)
        if (!gb_push(p->b, &p->b->rules[rid].body, seq->e[i])) return fail_oom(p);
    p->b->total -= seq->n; /* counted twice */
    if (!gb_push(p->b, &p->b->rules[rid].body, GE_END)) return fail_oom(p);
    return true;
}

static bool parse_alternates(gp *p, uint32_t rid, bool nested) {
    for (;;) {
        gvec seq = {0};
        bool ok = parse_sequence(p, rid, &seq, nested) && end_alt(p, rid, &seq);
        free(seq.e);
        if (!ok) return false;
        if (peek(p, 0) == '|') {
            p->i++;
            skip_space(p, true);
            continue;
        }
        if (!nested) { /* a line that starts with | continues the rule */
            size_t save = p->i;
            skip_space(p, true);
            if (peek(p, 0) == '|') {
                p->i++;
                skip_space(p, true);
                continue;
            }
            p->i = save;
        }
        return true;
    }
}

static bool parse_rule(gp *p) {
    size_t s = p->i;
    while (is_name_char(peek(p, 0))) p->i++;
    if (p->i == s) {
        char c[2] = {p->s[p->i], 0};
        return perr(p, "expected a rule name, found '%s'", c);
    }
    size_t name_end = p->i;
    skip_space(p, false);
    if (p->i + 3 > p->n || memcmp(p->s + p->i, "::=", 3) != 0) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(name_end - s > 60 ? 60 : name_end - s), p->s + s);
        return perr(p, "expected '::=' after the rule name '%s'", name);
    }
    p->i += 3;
    uint32_t rid = gb_rule_named(p->b, p->s + s, name_end - s);
    if (rid == UINT32_MAX) return fail_oom(p);
    if (p->b->rules[rid].defined) return perr_at(p, s, "rule '%s' is defined twice", p->b->rules[rid].name);
    p->b->rules[rid].defined = true;
    skip_space(p, true);
    if (!parse_alternates(p, rid, false)) return false;
    if (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r') {
        char c[2] = {p->s[p->i], 0};
        return perr(p, "unexpected '%s' (expected the end of the line)", c);
    }
    skip_space(p, true);
    return true;
}

grammar *gbnf_compile(const char *text, size_t len, kvant_status *st) {
    if (!text) len = 0;
    gbuild b;
    gb_init(&b, st);
    gp p = {.s = text, .n = len, .b = &b, .st = st};
    skip_space(&p, true);
    if (p.i >= p.n) {
        core_fail(st, KVANT_ERR_ARG, "empty grammar (it needs a rule named 'root')");
        gb_free(&b);
        return NULL;
    }
    while (p.i < p.n)
        if (!parse_rule(&p)) break;
    for (uint32_t r = 0; !p.failed && r < b.n_rules; r++)
        if (!b.rules[r].defined) perr_at(&p, b.rules[r].ref_at - 1, "undefined rule '%s'", b.rules[r].name);
    grammar *g = p.failed ? NULL : gb_finish(&b, st);
    gb_free(&b);
    return g;
}

grammar *grammar_from_gbnf(const char *text, size_t len, kvant_status *st) { return gbnf_compile(text, len, st); }
