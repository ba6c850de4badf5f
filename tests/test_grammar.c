/* test_grammar.c - the grammar engine (grammar/grammar.h): the JSON reader,
 * GBNF parsing (good grammars and bad ones with their messages), matching
 * (accept / prefix / reject lists, UTF-8 classes against a brute-force
 * membership test, tokens that split a character), JSON Schema
 * compilation checked by sampling: for each schema, outputs drawn uniformly
 * among the allowed tokens of a synthetic vocabulary must parse (cJSON,
 * not kvant's reader) and validate against the schema (a small validator
 * here, patterns through POSIX <regex.h>), the trie mask held equal to the
 * plain per-token reference on every state met, on the synthetic and on
 * two real vocabularies (llama-spm 32000, qwen2 151936), and unsupported
 * keywords refused by name. */
#include <cjson/cJSON.h>
#include <locale.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "format/gguf.h"
#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"
#include "tok/tok.h"

/* ---- helpers ------------------------------------------------------------------------ */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint32_t rng_below(uint64_t *s, uint32_t n) { return (uint32_t)(rng_next(s) % n); }

static grammar *gbnf(const char *text) {
    kvant_status st;
    grammar *g = grammar_from_gbnf(text, strlen(text), &st);
    if (!g) fail_msg("grammar did not compile: %s\n%s", st.msg, text);
    return g;
}

static grammar *schema(const char *json) {
    kvant_status st;
    grammar *g = grammar_from_json_schema(json, json ? strlen(json) : 0, &st);
    if (!g) fail_msg("schema did not compile: %s\n%s", st.msg, json ? json : "(none)");
    return g;
}

/* 0: refused, 1: a viable prefix, 2: complete */
static int match(const grammar *g, const char *s, size_t n) {
    grammar_state *gs = grammar_state_new(g, NULL);
    assert_non_null(gs);
    int r = grammar_accept_bytes(gs, (const uint8_t *)s, n) ? (grammar_can_end(gs) ? 2 : 1) : 0;
    grammar_state_free(gs);
    return r;
}

/* ---- the JSON reader ------------------------------------------------------------------ */
static void test_json_reader(void **state) {
    (void)state;
    kvant_status st;
    const char *doc = " {\"a\": [1, -2.5e3, true, false, null], \"b\": \"x\\u00e9\\ud83d\\ude00\\n\\\"\", \"c\": {}} ";
    gjson *v = gjson_parse(doc, strlen(doc), &st);
    assert_non_null(v);
    assert_int_equal(v->type, GJSON_OBJECT);
    assert_int_equal(v->n, 3);
    const gjson *a = gjson_get(v, "a");
    assert_non_null(a);
    assert_int_equal(a->n, 5);
    assert_true(a->items[1]->type == GJSON_NUMBER && a->items[1]->num == -2500.0);
    assert_string_equal(a->items[1]->str, "-2.5e3");
    assert_true(a->items[2]->type == GJSON_BOOL && a->items[2]->b);
    assert_int_equal(a->items[4]->type, GJSON_NULL);
    const gjson *b = gjson_get(v, "b");
    assert_string_equal(b->str, "x\xc3\xa9\xf0\x9f\x98\x80\n\"");
    assert_int_equal(gjson_get(v, "c")->type, GJSON_OBJECT);
    assert_null(gjson_get(v, "zz"));
    size_t n;
    char *w = gjson_write(v, &n);
    assert_string_equal(w, "{\"a\":[1,-2.5e3,true,false,null],\"b\":\"x\xc3\xa9\xf0\x9f\x98\x80\\n\\\"\",\"c\":{}}");
    assert_int_equal(n, strlen(w));
    /* the writer's text reads back to the same text */
    gjson *v2 = gjson_parse(w, n, &st);
    assert_non_null(v2);
    char *w2 = gjson_write(v2, NULL);
    assert_string_equal(w, w2);
    free(w), free(w2);
    gjson_free(v), gjson_free(v2);

    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"", "unexpected end"},          {"{", "expected a string key"},  {"[1,]", "unexpected character"},
        {"{\"a\" 1}", "expected ':'"},   {"01", "bad number"},            {"-", "bad number"},
        {"1.", "bad number"},            {"\"abc", "unterminated string"}, {"\"\\x\"", "bad escape"},
        {"\"\\ud800\"", "surrogate"},    {"{\"a\":1,\"a\":2}", "duplicate key"}, {"[1] 2", "after the value"},
        {"\"\xff\"", "invalid UTF-8"},   {"\"a\tb\"", "control character"}, {"tru", "unexpected character"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        gjson *x = gjson_parse(bad[i].text, strlen(bad[i].text), &st);
        if (x) fail_msg("parsed bad JSON %s", bad[i].text);
        assert_int_equal(st.code, KVANT_ERR_ARG);
        if (!strstr(st.msg, bad[i].msg)) fail_msg("'%s': message '%s' lacks '%s'", bad[i].text, st.msg, bad[i].msg);
    }
    /* depth limit */
    char deep[600];
    memset(deep, '[', 300);
    memset(deep + 300, ']', 300);
    assert_null(gjson_parse(deep, 600, &st));
    assert_non_null(strstr(st.msg, "too deep"));
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    v = gjson_parse(deep, 200, &st);
    assert_non_null(v);
    gjson_free(v);
}

/* ---- GBNF: errors ---------------------------------------------------------------------- */
static void test_gbnf_errors(void **state) {
    (void)state;
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"", "empty grammar"},
        {"   # only a comment\n", "empty grammar"},
        {"root ::= foo", "line 1, column 10: undefined rule 'foo'"},
        {"root ::= \"a\"\nfoo ::= bar", "line 2, column 9: undefined rule 'bar'"},
        {"root ::= \"abc", "unterminated string"},
        {"root ::= [abc", "unterminated character class"},
        {"root ::= (\"a\"", "missing ')'"},
        {"root ::= \"a\"{2,1}", "n < m"},
        {"root ::= \"a\"{2", "expected '}'"},
        {"x ::= \"a\"", "no rule named 'root'"},
        {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive"},
        {"root ::= a\na ::= b \"x\"\nb ::= a? \"y\"", "left-recursive"},
        {"root ::= \"a\" \"b\" )", "unexpected ')'"},
        {"root ::= * \"a\"", "nothing before it to repeat"},
        {"root ::= \"\\q\"", "unknown escape '\\q'"},
        {"root ::= \"\\x4\"", "needs hex digits"},
        {"root ::= \"\\uD800\"", "not a Unicode scalar value"},
        {"root ::= \"x\"\nroot ::= \"y\"", "rule 'root' is defined twice"},
        {"root ::= <think>", "token references"},
        {"root ::= \"a\"{100001}", "repetition count above 100000"},
        {"root ::= [z-a]", "out of order"},
        {"root ::= []", "empty character class"},
        {"root ::= \"a\" root", "matches nothing"},
        {"root ::= 'a'", "unexpected '''"},
        {"root \"a\"", "expected '::='"},
        {"::= \"a\"", "expected a rule name"},
        {"root ::= \"\xc3\"", "invalid UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kvant_status st;
        grammar *g = grammar_from_gbnf(bad[i].text, strlen(bad[i].text), &st);
        if (g) fail_msg("bad grammar compiled: %s", bad[i].text);
        assert_int_equal(st.code, KVANT_ERR_ARG);
        if (!strstr(st.msg, bad[i].msg)) fail_msg("'%s': message '%s' lacks '%s'", bad[i].text, st.msg, bad[i].msg);
    }
}

/* ---- GBNF: matching ------------------------------------------------------------------------ */
/* my own JSON grammar, in the style of llama.cpp's grammars/json.gbnf */
static const char JSON_GBNF[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "    string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}   # bounded whitespace\n";

typedef struct {
    const char *grammar;
    const char *accept[8], *prefix[8], *reject[8];
} match_case;

static const match_case CASES[] = {
    {"root ::= \"a\" [b-d]* \"e\"", {"ae", "abcde", "abbbe"}, {"a", "abc"}, {"e", "abx", "aee", "abcdef"}},
    {"root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= [0-9]+ | \"(\" expr \")\"",
     {"1+2", "(1+(2-3))", "12", "((7))"}, {"(1+", "1+", "((", ""}, {"1++", ")", "(1))", "+1"}},
    {"root ::= \"x\"{2,4} \"y\"?", {"xx", "xxxx", "xxxy", "xxy"}, {"x"}, {"x y", "xxxxx", "y", "xxyy"}},
    {"root ::= [0-9]{3} \"-\" [0-9]{4}", {"555-1234", "000-0000"}, {"555-12", "5"}, {"55-1234", "5555-1234", "555-12345"}},
    {"root ::= \"a\"{,2} \"b\"{2,}", {"bb", "abbb", "aabb", "bbbbbbbbbb"}, {"ab", "aa", "b"}, {"aaabb", "ba", "c"}},
    {"root ::= [\xce\xb1-\xcf\x89]+ \"!\"", {"\xce\xb1\xce\xb2\xce\xb3!", "\xcf\x89!"}, {"\xce\xb1", "\xce"},
     {"a!", "!", "\xce\xb1\xce!", "\xcf\x8a!"}},
    {"root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"", {"\"hello w\xc3\xb6rld\"", "\"\""}, {"\"abc", "\"\xe4\xb8"},
     {"\"a\\\"", "\"a\"b", "x", "\"\xff\""}},
    {"root ::= . . .", {"abc", "a\xe4\xb8\xad\xf0\x9f\x98\x80", "\n\t "}, {"ab", "a\xf0\x9f"},
     {"ab\xff", "abcd", "\xed\xa0\x80xx", "\xc0\x80xx", "\xf4\x90\x80\x80xx"}},
    {"root ::= \"\\x41\\u00e9\\t\\n\\\\\\\"\\U0001F600\"", {"A\xc3\xa9\t\n\\\"\xf0\x9f\x98\x80"}, {"A\xc3"}, {"A\xe9"}},
    {"root ::= ( \"yes\" | \"no\" | ) \".\"  # a comment\n# another\n", {"yes.", "no.", "."}, {"ye", "", "yes"},
     {"maybe.", "yesno.", "yes.."}},
    {"root ::= (\"ab\" (\"c\" | \"d\")+)+", {"abc", "abcdabd", "abdddd"}, {"ab", "abcab"}, {"abab", "ac", "b"}},
    {"root ::= \"a\"\n     | \"b\"\n  | \"c\" \"d\"\n", {"a", "b", "cd"}, {"c"}, {"ab", "d"}},
    {"root ::= my-rule_1\nmy-rule_1 ::= \"z\"+", {"z", "zzz"}, {""}, {"y"}},
    {"root ::= (\"a\"?)* \"b\"", {"b", "aab", "ab"}, {"aaaa"}, {"ba", "c"}},
    {"root ::= [\\x00-\\x1F\\]\\[\\-^]+", {"]", "[", "-", "\x01\x1f", "^"}, {""}, {"a", " "}},
    {"root ::= [^a-z\\U00010000-\\U0010FFFF]", {"A", "\xc3\xa9", "\xef\xbf\xbf"}, {"\xe4"}, {"a", "\xf0\x9f\x98\x80", "AB"}},
    {JSON_GBNF, {"{}", "{\"a\": [1, 2.5, -3e7, \"x\", {\"b\": null}], \"c\": true}", "{\n  \"k\": \"\\u00e9\\n\"\n}"},
     {"{\"a\":", "{\"a\": [1,", "{ "}, {"[]", "{\"a\" 1}", "{\"a\": tru}", "{\"a\": 01}", "{,}"}},
    {"root ::= \"{\" \"}\"{0,1} | [\"a-c]", {"{", "{}", "\"", "b"}, {""}, {"d", "{}}"}},
    {"root ::= \"\" | empty\nempty ::= ", {""}, {NULL}, {"a", "\n"}},
};

static void test_gbnf_match(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        grammar *g = gbnf(CASES[i].grammar);
        for (int k = 0; k < 8; k++) {
            const char *a = CASES[i].accept[k], *p = CASES[i].prefix[k], *r = CASES[i].reject[k];
            if (a && match(g, a, strlen(a)) != 2) fail_msg("grammar %zu should accept '%s' (%d)", i, a, match(g, a, strlen(a)));
            if (p && match(g, p, strlen(p)) != 1) fail_msg("grammar %zu: '%s' should be a prefix (%d)", i, p, match(g, p, strlen(p)));
            if (r && match(g, r, strlen(r)) != 0) fail_msg("grammar %zu should refuse '%s'", i, r);
        }
        grammar_free(g);
    }
    /* deep nesting of a non-tail rule: the stacks grow with the text */
    grammar *g = gbnf("root ::= \"(\" root \")\" | \"\"");
    char deep[801];
    memset(deep, '(', 400);
    memset(deep + 400, ')', 400);
    assert_int_equal(match(g, deep, 800), 2);
    assert_int_equal(match(g, deep, 799), 1);
    deep[800] = ')';
    assert_int_equal(match(g, deep, 801), 0);
    grammar_free(g);
    /* long repetition through the state cache and its compaction */
    g = gbnf("root ::= ([a-z] [0-9])*");
    grammar_state *s = grammar_state_new(g, NULL);
    for (int i = 0; i < 200000; i++) {
        uint8_t c[2] = {(uint8_t)('a' + i % 26), (uint8_t)('0' + i % 10)};
        if (!grammar_accept_bytes(s, c, 2)) fail_msg("refused at %d", i);
    }
    assert_true(grammar_can_end(s));
    grammar_state_free(s);
    grammar_free(g);
}

/* character classes: every code point (a stride through Unicode and every
 * boundary) is accepted exactly when it is in the class */
static bool in_class(int which, uint32_t cp) {
    switch (which) {
    case 0: return cp != '"' && cp != '\\';
    case 1: return (cp >= 0xE9 && cp <= 0x7FF) || (cp >= 0x3040 && cp <= 0x30FF) || cp == 0x1F600 || cp == 'x';
    case 2: return !(cp >= 0x80 && cp <= 0xFFFF) && cp != 0x10FFFF;
    default: return true;
    }
}

static void test_utf8_classes(void **state) {
    (void)state;
    static const char *const cls[] = {"root ::= [^\"\\\\]", "root ::= [\\u00e9-\\u07FF\\u3040-\\u30ff\\U0001F600x]",
                                      "root ::= [^\\x80-\\uFFFF\\U0010FFFF]", "root ::= ."};
    for (int c = 0; c < 4; c++) {
        grammar *g = gbnf(cls[c]);
        grammar_state *s0 = grammar_state_new(g, NULL);
        for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x3100 ? 1 : 97)) {
            static const uint32_t edges[] = {0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF, 0x3FFFF, 0x40000};
            for (int e = -1; e < (int)(sizeof edges / sizeof *edges); e++) {
                uint32_t x = e < 0 ? cp : edges[e];
                if (e >= 0 && cp != 0) break;
                if (x >= 0xD800 && x <= 0xDFFF) continue;
                uint8_t u[4];
                int n = x < 0x80 ? 1 : x < 0x800 ? 2 : x < 0x10000 ? 3 : 4;
                if (n == 1) u[0] = (uint8_t)x;
                else if (n == 2) u[0] = (uint8_t)(0xC0 | x >> 6), u[1] = (uint8_t)(0x80 | (x & 63));
                else if (n == 3) u[0] = (uint8_t)(0xE0 | x >> 12), u[1] = (uint8_t)(0x80 | (x >> 6 & 63)), u[2] = (uint8_t)(0x80 | (x & 63));
                else u[0] = (uint8_t)(0xF0 | x >> 18), u[1] = (uint8_t)(0x80 | (x >> 12 & 63)), u[2] = (uint8_t)(0x80 | (x >> 6 & 63)), u[3] = (uint8_t)(0x80 | (x & 63));
                grammar_state *s = grammar_state_clone(s0, NULL);
                bool ok = grammar_accept_bytes(s, u, (size_t)n) && grammar_can_end(s);
                if (ok != in_class(c, x)) fail_msg("class %d, U+%04X: accepted %d", c, x, ok);
                grammar_state_free(s);
            }
        }
        /* surrogates and overlong forms are never accepted */
        static const uint8_t badseq[][4] = {{0xED, 0xA0, 0x80}, {0xC0, 0xAF}, {0xE0, 0x80, 0xAF}, {0xF4, 0x90, 0x80, 0x80}, {0xF5}, {0xFF}};
        for (size_t b = 0; b < sizeof badseq / sizeof *badseq; b++) {
            grammar_state *s = grammar_state_clone(s0, NULL);
            size_t n = 0;
            while (n < 4 && badseq[b][n]) n++;
            assert_false(grammar_accept_bytes(s, badseq[b], n));
            grammar_state_free(s);
        }
        grammar_state_free(s0);
        grammar_free(g);
    }
}

/* ---- vocabularies -------------------------------------------------------------------------- */
typedef struct {
    int n;
    uint8_t **bytes;
    int *lens;
    int32_t eog[8];
    int n_eog;
    grammar_vocab *v;
} vocab;

static void vocab_free(vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->lens);
    grammar_vocab_free(v->v);
}

static void vocab_add(vocab *v, int *cap, const void *b, int len) {
    if (v->n == *cap) {
        *cap = *cap ? *cap * 2 : 512;
        v->bytes = realloc(v->bytes, (size_t)*cap * sizeof *v->bytes);
        v->lens = realloc(v->lens, (size_t)*cap * sizeof *v->lens);
    }
    v->bytes[v->n] = malloc((size_t)len + 1);
    memcpy(v->bytes[v->n], b, (size_t)len);
    v->lens[v->n] = len;
    v->n++;
}

/* every single byte, then pieces JSON output is made of, some duplicated,
 * some that split a UTF-8 character, two control tokens (no bytes), EOS */
static void synthetic_vocab(vocab *v) {
    memset(v, 0, sizeof *v);
    int cap = 0;
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        vocab_add(v, &cap, &c, 1);
    }
    static const char *const pieces[] = {
        "\":", "\": ", "\",", "\", \"", "{\"", "}", "{", "[", "]", "[\"", "\"]", "\"}", "}}", "]}", "},", "],", "true",
        "false", "null", "tr", "ue", "fa", "lse", "nu", "ll", "  ", "    ", "\n", "\n  ", "\n    ", " \"", ", ", ",\"",
        "\\n", "\\\"", "\\\\", "\\u00", "\\ud83d", "\\ude00", "0", "00", "10", "123", "-1", ".5", "e+", "E-", "e1", "42",
        "\xc3\xa9", "\xc3\xbc", "\xe4\xb8\xad", "\xe6\x96\x87", "\xf0\x9f\x98\x80", "\xe4\xb8", "\xb8\xad", "\x9f\x98",
        "ab", "the", " the", "name", "\"name\"", "age", "\"age\"", "id", "x", "yes", "no", "red", "green", "blue",
        "\"red\"", "abc", "foo", "bar", "-0", "12", "99", "2024", "-01-", "T12:", ":30", "Z", "+01:00", ".123",
        "\"value\"", "\"children\"", "\"tags\"", "[]", "{}", "[1", ",2", "\"a\"", "\"b\"", "true,", "null}", "0,",
        "h\xc3\xa9llo", "\xe6\x97\xa5\xe6\x9c\xac", "\"h\xc3\xa9", "llo\"", "a-b", "_", "--", "\t", " ", "  \"", "\r\n",
        "name", "fixed", " \\\"quoted\\\" \\\\ value", "\"fixed", "-4", "567", "0000", "1234", "9", "5-", "aaa", "zz",
        "ffffffff", "-ffff", "-4fff", "8aaa", "deadbeef", "T", "00:00", "\"id\"", "email", "@", ".com", "score",
        "active", "role", "admin", "\"user\"", "city", "zip", "notes", " and", " of", "ing", "ed", "s", "\"\"",
    };
    for (size_t i = 0; i < sizeof pieces / sizeof *pieces; i++) vocab_add(v, &cap, pieces[i], (int)strlen(pieces[i]));
    vocab_add(v, &cap, "", 0); /* control */
    vocab_add(v, &cap, "", 0);
    v->eog[v->n_eog++] = v->n;
    vocab_add(v, &cap, "</s>", 4); /* EOS: its bytes are never matched */
    kvant_status st;
    v->v = grammar_vocab_new((const uint8_t *const *)v->bytes, v->lens, v->n, v->eog, v->n_eog, &st);
    if (!v->v) fail_msg("vocab: %s", st.msg);
}

/* a GGUF vocabulary's pieces: control tokens come out empty */
static bool real_vocab(vocab *v, const char *rel) {
    memset(v, 0, sizeof *v);
    kvant_status st;
    gguf_ctx *g = gguf_open(shared_path(rel), &st);
    if (!g) fail_msg("%s: %s", rel, st.msg);
    tok *t = tok_from_gguf(g, &st);
    gguf_close(g);
    if (!t) fail_msg("%s: %s", rel, st.msg);
    int cap = 0;
    char buf[1024];
    for (int id = 0; id < tok_n_vocab(t); id++) {
        int n = tok_piece(t, id, false, buf, sizeof buf);
        if (n < 0) n = 0;
        if (tok_is_eog(t, id) && v->n_eog < 8) v->eog[v->n_eog++] = id;
        vocab_add(v, &cap, buf, n);
    }
    tok_free(t);
    v->v = grammar_vocab_new((const uint8_t *const *)v->bytes, v->lens, v->n, v->eog, v->n_eog, &st);
    if (!v->v) fail_msg("vocab: %s", st.msg);
    return true;
}

static bool is_eog(const vocab *v, int t) {
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == t) return true;
    return false;
}

/* the trie mask equals the reference, and grammar_allows agrees */
static void check_mask(grammar_state *s, const vocab *v, uint8_t *m1, uint8_t *m2, uint64_t *rng) {
    int c1 = grammar_mask(s, v->v, m1);
    int c2 = grammar_mask_ref(s, v->v, m2);
    if (c1 < 0 || c2 < 0) fail_msg("mask failed: %s", grammar_state_error(s)->msg);
    assert_int_equal(c1, c2);
    if (memcmp(m1, m2, (size_t)v->n)) {
        for (int t = 0; t < v->n; t++)
            if (m1[t] != m2[t]) fail_msg("token %d ('%.*s'): trie %d, reference %d", t, v->lens[t], v->bytes[t], m1[t], m2[t]);
    }
    for (int k = 0; k < 8; k++) {
        int t = (int)rng_below(rng, (uint32_t)v->n);
        assert_int_equal(grammar_allows(s, v->v, t), m1[t]);
    }
}

/* ---- sampling ---------------------------------------------------------------------------- */
typedef struct {
    char *text;
    size_t len, cap;
    bool finished; /* ended by EOS (or only EOS left) */
} sample;

/* one output drawn uniformly among the allowed tokens; check: compare the
 * trie mask to the reference at every step */
static void draw(grammar_state *s, const vocab *v, uint64_t *rng, int max_tokens, bool check, sample *out) {
    uint8_t *m = malloc((size_t)v->n), *m2 = malloc((size_t)v->n);
    int32_t *ids = malloc((size_t)v->n * sizeof *ids);
    out->len = 0;
    out->finished = false;
    for (int step = 0; step < max_tokens; step++) {
        if (check) check_mask(s, v, m, m2, rng);
        int n = grammar_mask(s, v->v, m);
        if (n < 0) fail_msg("mask: %s", grammar_state_error(s)->msg);
        if (n == 0) fail_msg("nothing allowed after '%.*s'", (int)out->len, out->text);
        bool can_end = grammar_can_end(s);
        if (can_end && (grammar_is_done(s) || rng_below(rng, 4) == 0)) {
            out->finished = true;
            break;
        }
        int k = 0;
        for (int t = 0; t < v->n; t++)
            if (m[t]) ids[k++] = t;
        int t = ids[rng_below(rng, (uint32_t)k)];
        if (is_eog(v, t)) {
            assert_true(can_end);
            assert_true(grammar_accept(s, v->v, t));
            assert_true(grammar_is_done(s));
            out->finished = true;
            break;
        }
        if (!grammar_accept(s, v->v, t)) fail_msg("an allowed token was refused");
        if (out->len + (size_t)v->lens[t] + 1 > out->cap) {
            out->cap = (out->len + (size_t)v->lens[t] + 1) * 2;
            out->text = realloc(out->text, out->cap);
        }
        memcpy(out->text + out->len, v->bytes[t], (size_t)v->lens[t]);
        out->len += (size_t)v->lens[t];
        out->text[out->len] = 0;
    }
    free(m), free(m2), free(ids);
}

/* ---- a JSON Schema validator over cJSON (the keywords kvant compiles) ---------------- */
typedef struct {
    const cJSON *root;
    char why[300];
} vctx;

static bool vfail(vctx *c, const char *what, const char *arg) {
    snprintf(c->why, sizeof c->why, "%s %s", what, arg ? arg : "");
    return false;
}

static const cJSON *resolve(const cJSON *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    const cJSON *v = root;
    const char *p = ref + 1;
    while (*p == '/') {
        char seg[128];
        size_t k = 0;
        p++;
        while (*p && *p != '/' && k < sizeof seg - 1) seg[k++] = *p++;
        seg[k] = 0;
        v = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, atoi(seg)) : cJSON_GetObjectItemCaseSensitive(v, seg);
        if (!v) return NULL;
    }
    return v;
}

static size_t utf8_count(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* ECMA-ish pattern to POSIX ERE: \d \w \s, (?: (in a UTF-8 locale, so . and classes take characters) */
static bool regex_ok(const char *pat, const char *s) {
    char ere[512];
    size_t k = 0;
    for (const char *p = pat; *p && k < sizeof ere - 16; p++) {
        if (p[0] == '\\' && p[1] == 'd') k += (size_t)sprintf(ere + k, "[0-9]"), p++;
        else if (p[0] == '\\' && p[1] == 'w') k += (size_t)sprintf(ere + k, "[A-Za-z0-9_]"), p++;
        else if (p[0] == '\\' && p[1] == 's') k += (size_t)sprintf(ere + k, "[[:space:]\xc2\xa0]"), p++; /* ECMA's \s has U+00A0 */
        else if (p[0] == '(' && p[1] == '?' && p[2] == ':') ere[k++] = '(', p += 2;
        else ere[k++] = *p;
    }
    ere[k] = 0;
    regex_t re;
    if (regcomp(&re, ere, REG_EXTENDED | REG_NOSUB)) fail_msg("regcomp %s", ere);
    bool ok = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static bool type_is(const cJSON *v, const char *t) {
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    return false;
}

static bool validate(vctx *c, const cJSON *s, const cJSON *v, int depth) {
    if (depth > 200) return vfail(c, "too deep", NULL);
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s) ? true : vfail(c, "schema false", NULL);
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        const cJSON *t = resolve(c->root, k->valuestring);
        if (!t) return vfail(c, "unresolved", k->valuestring);
        return validate(c, t, v, depth + 1);
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "const")) && !cJSON_Compare(k, v, 1)) return vfail(c, "const", NULL);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        bool any = false;
        const cJSON *e;
        cJSON_ArrayForEach(e, k) any |= cJSON_Compare(e, v, 1);
        if (!any) return vfail(c, "enum", NULL);
    }
    static const char *const alts[] = {"anyOf", "oneOf"};
    for (int a = 0; a < 2; a++)
        if ((k = cJSON_GetObjectItemCaseSensitive(s, alts[a]))) {
            bool any = false;
            const cJSON *e;
            cJSON_ArrayForEach(e, k) any = any || validate(c, e, v, depth + 1);
            if (!any) return vfail(c, alts[a], NULL);
        }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "allOf"))) {
        const cJSON *e;
        cJSON_ArrayForEach(e, k) if (!validate(c, e, v, depth + 1)) return false;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        bool ok = false;
        if (cJSON_IsString(k)) ok = type_is(v, k->valuestring);
        const cJSON *e;
        if (cJSON_IsArray(k)) cJSON_ArrayForEach(e, k) ok |= type_is(v, e->valuestring);
        if (!ok) return vfail(c, "type", cJSON_IsString(k) ? k->valuestring : "list");
    }
    if (cJSON_IsObject(v)) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        const cJSON *e;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "required")))
            cJSON_ArrayForEach(e, k) if (!cJSON_GetObjectItemCaseSensitive(v, e->valuestring)) return vfail(c, "required", e->valuestring);
        cJSON_ArrayForEach(e, v) {
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, e->string) : NULL;
            if (ps) {
                if (!validate(c, ps, e, depth + 1)) return false;
            } else if (ap && cJSON_IsObject(ap)) {
                if (!validate(c, ap, e, depth + 1)) return false;
            } else if ((ap && cJSON_IsFalse(ap)) || (props && cJSON_GetArraySize(props) > 0 && !ap)) {
                /* kvant's default: no additional properties beside properties */
                return vfail(c, "additional property", e->string);
            }
        }
    }
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        int np = prefix ? cJSON_GetArraySize(prefix) : 0;
        for (int i = 0; i < n; i++) {
            const cJSON *is = i < np ? cJSON_GetArrayItem(prefix, i) : items;
            if (is && !validate(c, is, cJSON_GetArrayItem(v, i), depth + 1)) return false;
        }
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minItems")) && n < k->valueint) return vfail(c, "minItems", NULL);
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxItems")) && n > k->valueint) return vfail(c, "maxItems", NULL);
    }
    if (cJSON_IsString(v)) {
        size_t n = utf8_count(v->valuestring);
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minLength")) && n < (size_t)k->valueint) return vfail(c, "minLength", v->valuestring);
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxLength")) && n > (size_t)k->valueint) return vfail(c, "maxLength", v->valuestring);
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "pattern")) && !regex_ok(k->valuestring, v->valuestring))
            return vfail(c, "pattern", v->valuestring);
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "format"))) {
            static const char *const f[][2] = {
                {"date", "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$"},
                {"time", "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
                {"date-time", "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
                {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"}};
            for (int i = 0; i < 4; i++)
                if (!strcmp(k->valuestring, f[i][0]) && !regex_ok(f[i][1], v->valuestring)) return vfail(c, "format", v->valuestring);
        }
    }
    if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        const cJSON *e4;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minimum"))) {
            bool ex = (e4 = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum")) && cJSON_IsTrue(e4);
            if (ex ? x <= k->valuedouble : x < k->valuedouble) return vfail(c, "minimum", NULL);
        }
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maximum"))) {
            bool ex = (e4 = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum")) && cJSON_IsTrue(e4);
            if (ex ? x >= k->valuedouble : x > k->valuedouble) return vfail(c, "maximum", NULL);
        }
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum")) && cJSON_IsNumber(k) && x <= k->valuedouble)
            return vfail(c, "exclusiveMinimum", NULL);
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum")) && cJSON_IsNumber(k) && x >= k->valuedouble)
            return vfail(c, "exclusiveMaximum", NULL);
    }
    return true;
}

/* ---- the schemas -------------------------------------------------------------------------- */
#define TEN_FIELDS                                                                                                   \
    "{\"type\":\"object\",\"properties\":{"                                                                          \
    "\"id\":{\"type\":\"integer\",\"minimum\":1},"                                                                   \
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":40},"                                               \
    "\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9.]+@[a-z]+\\\\.[a-z]{2,4}$\"},"                            \
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"                                                  \
    "\"active\":{\"type\":\"boolean\"},"                                                                             \
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"                                                            \
    "\"score\":{\"type\":\"number\"},"                                                                               \
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":5},"                                  \
    "\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\"," \
    "\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\",\"zip\"]},"                                                  \
    "\"notes\":{\"type\":[\"string\",\"null\"]}},"                                                                   \
    "\"required\":[\"id\",\"name\",\"email\",\"age\",\"active\",\"role\",\"score\",\"tags\",\"address\",\"notes\"]}"

static const struct {
    const char *name, *schema;
} SCHEMAS[] = {
    {"json_object", NULL},
    {"{} (any value)", "{}"},
    {"object: required string+integer", "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":"
                                        "{\"type\":\"integer\"}},\"required\":[\"name\",\"age\"]}"},
    {"object: optional interleaved", "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":"
                                     "\"integer\"},\"c\":{\"type\":\"boolean\"},\"d\":{\"type\":\"null\"}},"
                                     "\"required\":[\"a\",\"c\"]}"},
    {"object: all optional", "{\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"},\"z\":{\"type\":"
                             "\"string\",\"maxLength\":3}}}"},
    {"array: integer 2..4", "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":4}"},
    {"enum: mixed values", "{\"enum\":[\"red\",\"green\",\"blue\",42,null,true,{\"x\":1},[1,2],\"h\xc3\xa9llo\","
                           "\"\xe6\x97\xa5\xe6\x9c\xac\"]}"},
    {"const with escapes", "{\"type\":\"object\",\"properties\":{\"v\":{\"const\":\"fixed \\\"quoted\\\" \\\\ value\"},"
                           "\"w\":{\"const\":[1,{\"a\":null}]}},\"required\":[\"v\",\"w\"]}"},
    {"nested objects", "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"properties\":{\"b\":{\"type\":"
                       "\"object\",\"properties\":{\"c\":{\"type\":\"integer\"}},\"required\":[\"c\"]}},\"required\":"
                       "[\"b\"]}},\"required\":[\"a\"]}"},
    {"anyOf string|integer|object", "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":4},{\"type\":\"integer\"},{\"type\":"
                                    "\"object\",\"properties\":{\"k\":{\"type\":\"boolean\"}},\"required\":[\"k\"]}]}"},
    {"oneOf + type list", "{\"type\":\"object\",\"properties\":{\"v\":{\"oneOf\":[{\"type\":\"null\"},{\"type\":\"array\","
                          "\"items\":{\"type\":\"boolean\"},\"maxItems\":3}]},\"w\":{\"type\":[\"string\",\"null\"],"
                          "\"maxLength\":2}},\"required\":[\"v\",\"w\"]}"},
    {"$ref $defs + definitions", "{\"$defs\":{\"point\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"},"
                                 "\"y\":{\"type\":\"integer\"}},\"required\":[\"x\",\"y\"]}},\"definitions\":{\"name\":"
                                 "{\"type\":\"string\",\"pattern\":\"^[A-Z][a-z]*$\"}},\"type\":\"object\",\"properties\":"
                                 "{\"p\":{\"$ref\":\"#/$defs/point\"},\"q\":{\"$ref\":\"#/$defs/point\"},\"n\":{\"$ref\":"
                                 "\"#/definitions/name\"}},\"required\":[\"p\",\"n\"]}"},
    {"recursive tree ($ref #)", "{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},\"children\":{"
                                "\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":2}},\"required\":[\"value\"]}"},
    {"pattern ^[a-z]+$", "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}"},
    {"pattern ^\\d{3}-\\d{4}$", "{\"type\":\"string\",\"pattern\":\"^\\\\d{3}-\\\\d{4}$\"}"},
    {"pattern groups, |, unanchored", "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
                                      "\"^(foo|bar)[0-9]{2,3}$\"},\"b\":{\"type\":\"string\",\"pattern\":\"ab+c\"},\"c\":"
                                      "{\"type\":\"string\",\"pattern\":\"^[^a-z]?x*\\\\.(?:[A-F]|\\\\s)$\"}},"
                                      "\"required\":[\"a\",\"b\",\"c\"]}"},
    {"minLength/maxLength 2..5", "{\"type\":\"string\",\"minLength\":2,\"maxLength\":5}"},
    {"integer bounds", "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-50,\"maximum\":1234},"
                       "\"b\":{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":100},\"c\":{\"type\":"
                       "\"integer\",\"minimum\":990},\"d\":{\"type\":\"integer\",\"maximum\":-7}},\"required\":[\"a\","
                       "\"b\",\"c\",\"d\"]}"},
    {"number, boolean, null", "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\"},\"b\":{\"type\":"
                              "\"boolean\"},\"z\":{\"type\":\"null\"}},\"required\":[\"n\",\"b\",\"z\"]}"},
    {"formats date/date-time/uuid", "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},"
                                    "\"t\":{\"type\":\"string\",\"format\":\"date-time\"},\"u\":{\"type\":\"string\","
                                    "\"format\":\"uuid\"}},\"required\":[\"d\",\"t\",\"u\"]}"},
    {"map: additionalProperties", "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}"},
    {"tuple: prefixItems", "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"},{\"enum\":"
                           "[\"x\",\"y\"]}],\"items\":false,\"minItems\":1}"},
    /* a listed class: glibc's regcomp refuses multi-byte ranges (REG_ECOLLATE) */
    {"unicode keys and values", "{\"type\":\"object\",\"properties\":{\"\xe5\x90\x8d\xe5\x89\x8d\":{\"type\":\"string\","
                                "\"pattern\":\"^[\xe3\x81\x81\xe3\x81\x82\xe3\x81\x83\xe3\x81\x84\xe3\x81\xae\xe3\x81\xb2\xe3\x82\x89]{1,4}$\"},\"caf\xc3\xa9\":{\"const\":"
                                "\"cr\xc3\xa8me\"}},\"required\":[\"\xe5\x90\x8d\xe5\x89\x8d\",\"caf\xc3\xa9\"]}"},
    {"10 fields (the benchmark's)", TEN_FIELDS},
};

enum { SAMPLES = 50, MAX_TOKENS = 1500 };

static void test_schema_samples(void **state) {
    (void)state;
    setlocale(LC_CTYPE, "C.UTF-8"); /* regexec counts characters, as the grammar does */
    vocab v;
    synthetic_vocab(&v);
    printf("schema sampling over a synthetic vocabulary of %d tokens, %d trie nodes (%d samples each, "
           "at most %d tokens)\n", v.n, (int)grammar_vocab_n_nodes(v.v), SAMPLES, MAX_TOKENS);
    printf("  %-34s %8s %9s %6s %7s %s\n", "schema", "samples", "finished", "valid", "capped", "mean bytes");
    uint64_t rng = 12345;
    int total_valid = 0, total_finished = 0, total = 0;
    for (size_t i = 0; i < sizeof SCHEMAS / sizeof *SCHEMAS; i++) {
        grammar *g = SCHEMAS[i].schema ? schema(SCHEMAS[i].schema) : grammar_json_object(NULL);
        assert_non_null(g);
        const char *sj = SCHEMAS[i].schema ? SCHEMAS[i].schema : "{\"type\":\"object\"}";
        cJSON *sc = cJSON_Parse(sj);
        assert_non_null(sc);
        grammar_state *s0 = grammar_state_new(g, NULL);
        assert_non_null(s0);
        sample out = {0};
        int finished = 0, valid = 0, capped = 0;
        size_t bytes = 0;
        for (int k = 0; k < SAMPLES; k++) {
            grammar_state *s = grammar_state_clone(s0, NULL);
            /* the reference checked on every state of the first samples, then on some */
            draw(s, &v, &rng, MAX_TOKENS, k < 6 || k % 10 == 0, &out);
            grammar_state_free(s);
            if (!out.finished) {
                capped++;
                continue;
            }
            finished++;
            bytes += out.len;
            const char *end = NULL;
            cJSON *j = cJSON_ParseWithLengthOpts(out.text ? out.text : "", out.len + 1, &end, 1); /* + its NUL */
            if (!j) fail_msg("schema '%s': output is not JSON:\n%.*s", SCHEMAS[i].name, (int)out.len, out.text);
            vctx c = {.root = sc};
            if (!validate(&c, sc, j, 0))
                fail_msg("schema '%s': output does not validate (%s):\n%.*s", SCHEMAS[i].name, c.why, (int)out.len,
                         out.text);
            valid++;
            cJSON_Delete(j);
        }
        printf("  %-34s %8d %9d %6d %7d %zu\n", SCHEMAS[i].name, SAMPLES, finished, valid, capped,
               finished ? bytes / (size_t)finished : 0);
        fflush(stdout);
        assert_true(finished >= SAMPLES * 8 / 10);
        total_valid += valid, total_finished += finished, total += SAMPLES;
        free(out.text);
        grammar_state_free(s0);
        cJSON_Delete(sc);
        grammar_free(g);
    }
    printf("  %-34s %8d %9d %6d %7d\n", "all", total, total_finished, total_valid, total - total_finished);
    vocab_free(&v);
}

/* masks on random states of GBNF grammars, the trie against the reference */
static void test_mask_random_states(void **state) {
    (void)state;
    vocab v;
    synthetic_vocab(&v);
    uint64_t rng = 777;
    sample out = {0};
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        grammar *g = gbnf(CASES[i].grammar);
        for (int k = 0; k < 10; k++) {
            grammar_state *s = grammar_state_new(g, NULL);
            draw(s, &v, &rng, 200, true, &out);
            grammar_state_free(s);
        }
        grammar_free(g);
    }
    free(out.text);
    vocab_free(&v);
}

/* with tiny cache limits every call compacts, and walks overflow the
 * transition cache and fall back to the reference: still the same masks */
static void test_mask_small_caches(void **state) {
    (void)state;
    vocab v;
    synthetic_vocab(&v);
    uint64_t rng = 4242;
    sample out = {0};
    static const size_t hard[] = {1u << 30, 600, 60};
    for (int h = 0; h < 3; h++)
        for (size_t i = 0; i < sizeof SCHEMAS / sizeof *SCHEMAS; i += 3) {
            grammar *g = SCHEMAS[i].schema ? schema(SCHEMAS[i].schema) : grammar_json_object(NULL);
            for (int k = 0; k < 3; k++) {
                grammar_state *s = grammar_state_new(g, NULL);
                gm_set_limits(s, 64, 200, hard[h]);
                draw(s, &v, &rng, 300, true, &out);
                if (!s->ended) { /* a clone of a compacted state goes on */
                    grammar_state *c = grammar_state_clone(s, NULL);
                    gm_set_limits(c, 64, 200, hard[h]);
                    draw(c, &v, &rng, 100, true, &out);
                    grammar_state_free(c);
                }
                grammar_state_free(s);
            }
            grammar_free(g);
        }
    free(out.text);
    vocab_free(&v);
}

/* the same on the real vocabularies, along sampled outputs */
static void real_masks(const char *rel, int want_n) {
    vocab v;
    real_vocab(&v, rel);
    assert_int_equal(v.n, want_n);
    assert_true(v.n_eog >= 1);
    static const char *const sch[] = {TEN_FIELDS, "{}",
                                      "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^[a-z\xc3\xa9 ]{0,12}$\"}}"};
    uint64_t rng = 99;
    uint8_t *m = malloc((size_t)v.n), *m2 = malloc((size_t)v.n);
    for (size_t i = 0; i < sizeof sch / sizeof *sch; i++) {
        grammar *g = schema(sch[i]);
        grammar_state *s = grammar_state_new(g, NULL);
        for (int step = 0; step < 40; step++) {
            int n = grammar_mask(s, v.v, m);
            assert_true(n > 0);
            if (step % 4 == 0) check_mask(s, &v, m, m2, &rng);
            if (grammar_is_done(s)) break;
            /* pick an allowed token, short ones more often so the output moves on */
            int t = -1;
            for (int tries = 0; tries < 1000 && t < 0; tries++) {
                int c = (int)rng_below(&rng, (uint32_t)v.n);
                if (m[c] && !is_eog(&v, c) && (v.lens[c] <= 3 || rng_below(&rng, 4) == 0)) t = c;
            }
            if (t < 0)
                for (int c = 0; c < v.n && t < 0; c++)
                    if (m[c] && !is_eog(&v, c)) t = c;
            if (t < 0) break;
            assert_true(grammar_accept(s, v.v, t));
        }
        grammar_state_free(s);
        grammar_free(g);
    }
    free(m), free(m2);
    vocab_free(&v);
}

static void test_mask_llama_spm(void **state) {
    (void)state;
    real_masks("tokenizers/ggml-vocab-llama-spm.gguf", 32000);
}

static void test_mask_qwen2(void **state) {
    (void)state;
    real_masks("tokenizers/ggml-vocab-qwen2.gguf", 151936);
}

/* ---- JSON Schema: refusals ------------------------------------------------------------------ */
static void test_schema_refused(void **state) {
    (void)state;
    static const struct {
        const char *schema, *msg;
        kvant_code code;
    } bad[] = {
        {"{\"type\":\"object\",\"patternProperties\":{\"^x\":{}}}", "unsupported JSON Schema keyword 'patternProperties'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"format\":\"email\"}", "unsupported JSON Schema format 'email'", KVANT_ERR_UNSUPPORTED},
        {"{\"not\":{\"type\":\"string\"}}", "keyword 'not'", KVANT_ERR_UNSUPPORTED},
        {"{\"if\":{},\"then\":{}}", "keyword 'if'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "keyword 'uniqueItems'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"number\",\"minimum\":0}", "keyword 'minimum' for type 'number'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"integer\",\"multipleOf\":2}", "keyword 'multipleOf'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":true}", "keyword 'additionalProperties'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"^(?=a)b$\"}", "lookaround", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreferences", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"\\\\bx\"}", "word boundary", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", "'^' or '$'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"^a|b$\"}", "'|' outside a group", KVANT_ERR_UNSUPPORTED},
        {"{\"$ref\":\"http://example.com/s.json\"}", "'$ref'", KVANT_ERR_UNSUPPORTED},
        {"{\"allOf\":[{},{}]}", "keyword 'allOf'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"minProperties\":1}", "keyword 'minProperties'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"array\",\"contains\":{}}", "keyword 'contains'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"dependentRequired\":{}}}}", "at /properties/a: unsupported JSON Schema keyword 'dependentRequired'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"^a$\",\"maxLength\":3}", "keyword 'maxLength' beside 'pattern'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"anyOf\":[{}]}", "keyword 'type' beside 'anyOf'", KVANT_ERR_UNSUPPORTED},
        {"{\"unevaluatedProperties\":false}", "keyword 'unevaluatedProperties'", KVANT_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "required property 'b'", KVANT_ERR_UNSUPPORTED},
        {"{", "not valid JSON", KVANT_ERR_ARG},
        {"{\"type\":\"strin\"}", "unknown type 'strin'", KVANT_ERR_ARG},
        {"{\"type\":\"string\",\"minLength\":\"x\"}", "'minLength' must be a non-negative integer", KVANT_ERR_ARG},
        {"false", "matches nothing", KVANT_ERR_ARG},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":1}", "no integer", KVANT_ERR_ARG},
        {"{\"$ref\":\"#/$defs/missing\"}", "points at nothing", KVANT_ERR_ARG},
        {"{\"type\":\"string\",\"pattern\":\"[a-\"}", "bad 'pattern'", KVANT_ERR_ARG},
        {"{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":3,\"maxItems\":2}", "'maxItems' is below", KVANT_ERR_ARG},
        {"{\"$ref\":\"#\"}", "matches nothing", KVANT_ERR_ARG},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kvant_status st;
        grammar *g = grammar_from_json_schema(bad[i].schema, strlen(bad[i].schema), &st);
        if (g) fail_msg("schema compiled: %s", bad[i].schema);
        if (st.code != bad[i].code || !strstr(st.msg, bad[i].msg))
            fail_msg("'%s': code %d message '%s', expected %d '%s'", bad[i].schema, st.code, st.msg, bad[i].code, bad[i].msg);
    }
    /* annotations and x- keywords are ignored; empty / NULL / "true": any value */
    static const char *const fine[] = {("{\"title\":\"t\",\"description\":\"d\",\"default\":1,\"examples\":[1],\"$schema\":"
                                        "\"https://json-schema.org/draft/2020-12/schema\",\"x-order\":3,\"type\":\"integer\"}"),
                                       "", "  ", "true", "{\"type\":\"array\",\"uniqueItems\":false}",
                                       "{\"allOf\":[{\"type\":\"string\"}]}",
                                       "{\"type\":\"integer\",\"minimum\":3,\"exclusiveMinimum\":true}"};
    for (size_t i = 0; i < sizeof fine / sizeof *fine; i++) grammar_free(schema(fine[i]));
    grammar_free(schema(NULL));
    grammar *g = schema("{\"type\":\"integer\",\"minimum\":3,\"exclusiveMinimum\":true}");
    assert_int_equal(match(g, "3", 1), 1); /* "3" refused as a whole, but "30" would do */
    assert_int_equal(match(g, "4", 1), 2);
    grammar_free(g);
}

/* a 5000-value enum is a trie of rules: few stacks, every value and nothing else */
static void test_schema_big_enum(void **state) {
    (void)state;
    gstr b = {0};
    gstr_puts(&b, "{\"enum\":[");
    for (int i = 0; i < 5000; i++) gstr_printf(&b, "%s\"item-%d\"", i ? "," : "", i * 7);
    gstr_puts(&b, ",1,12,120,true,null,\"\",\"item-7\"]}"); /* numbers that are prefixes, a repeat */
    assert_false(b.oom);
    grammar *g = schema(b.s);
    grammar_state *s = grammar_state_new(g, NULL);
    assert_true(grammar_state_n_stacks(s) <= 8);
    grammar_state_free(s);
    char t[64];
    for (int i = 0; i < 5000 * 7; i += 3) {
        int n = sprintf(t, "\"item-%d\"", i);
        assert_int_equal(match(g, t, (size_t)n), i % 7 ? 0 : 2);
    }
    static const char *const more[] = {"1", "12", "120", "true", "null", "\"\""};
    for (int i = 0; i < 6; i++) assert_int_equal(match(g, more[i], strlen(more[i])), 2);
    assert_int_equal(match(g, "121", 3), 0);
    assert_int_equal(match(g, "\"item-\"", 8), 0);
    grammar_free(g);
    gstr_free(&b);
}

/* integers with bounds: each value in a window is accepted exactly when in range */
static void test_integer_ranges(void **state) {
    (void)state;
    static const struct {
        long lo, hi;
        bool has_lo, has_hi;
    } r[] = {{0, 150, 1, 1}, {-50, 1234, 1, 1}, {1, 99, 1, 1}, {990, 0, 1, 0}, {0, -7, 0, 1}, {-1000, -10, 1, 1},
             {123, 45678, 1, 1}, {0, 0, 1, 1}, {-5, 5, 1, 1}, {100, 100, 1, 1}, {0, 0, 0, 0}, {7, 0, 1, 0}};
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        char sj[200] = "{\"type\":\"integer\"";
        if (r[i].has_lo) sprintf(sj + strlen(sj), ",\"minimum\":%ld", r[i].lo);
        if (r[i].has_hi) sprintf(sj + strlen(sj), ",\"maximum\":%ld", r[i].hi);
        strcat(sj, "}");
        grammar *g = schema(sj);
        for (long x = -1200; x <= 50000; x += (x > 2000 ? 37 : 1)) {
            char t[32];
            int n = sprintf(t, "%ld", x);
            bool want = (!r[i].has_lo || x >= r[i].lo) && (!r[i].has_hi || x <= r[i].hi);
            if ((match(g, t, (size_t)n) == 2) != want) fail_msg("%s: %ld accepted %d", sj, x, !want);
        }
        /* no leading zeros, no -0 for negatives, no fractions */
        assert_true(match(g, "01", 2) != 2);
        assert_true(match(g, "1.5", 3) != 2);
        grammar_free(g);
    }
}

/* ---- the state API -------------------------------------------------------------------------- */
static void test_state_api(void **state) {
    (void)state;
    vocab v;
    synthetic_vocab(&v);
    grammar *g = gbnf("root ::= \"ab\" \"c\"?");
    grammar_state *s = grammar_state_new(g, NULL);
    uint8_t *m = malloc((size_t)v.n);
    const int eos = v.eog[0];
    assert_false(grammar_can_end(s));
    assert_false(grammar_allows(s, v.v, eos));
    assert_false(grammar_accept(s, v.v, eos));
    assert_false(grammar_accept(s, v.v, 'b'));
    assert_true(grammar_accept(s, v.v, 'a'));
    grammar_state *c = grammar_state_clone(s, NULL); /* after "a" */
    assert_true(grammar_accept(s, v.v, 'b'));
    assert_true(grammar_can_end(s));
    assert_false(grammar_is_done(s));
    int n = grammar_mask(s, v.v, m);
    assert_int_equal(n, 2); /* "c" and EOS */
    assert_true(m['c'] && m[eos]);
    assert_true(grammar_accept(s, v.v, 'c'));
    assert_true(grammar_is_done(s));
    assert_int_equal(grammar_mask(s, v.v, m), 1);
    assert_true(grammar_accept(s, v.v, eos));
    assert_true(grammar_is_done(s));
    assert_false(grammar_can_end(s));
    assert_int_equal(grammar_mask(s, v.v, m), 0);
    assert_false(grammar_accept(s, v.v, 'c'));
    /* the clone went on from "a" on its own */
    assert_false(grammar_accept(c, v.v, 'c'));
    assert_true(grammar_accept(c, v.v, 'b'));
    /* control tokens (no bytes) are never allowed; out of range refused */
    assert_false(grammar_allows(c, v.v, v.n - 2));
    assert_false(grammar_accept(c, v.v, -1));
    assert_false(grammar_accept(c, v.v, v.n));
    grammar_state_reset(c);
    assert_true(grammar_accept(c, v.v, 'a'));
    /* the "ab" token: one token, two bytes */
    grammar_state_reset(c);
    int ab = -1;
    for (int t = 0; t < v.n; t++)
        if (v.lens[t] == 2 && !memcmp(v.bytes[t], "ab", 2)) ab = t;
    assert_true(ab >= 0);
    assert_true(grammar_accept(c, v.v, ab));
    assert_true(grammar_can_end(c));
    grammar_state_free(c);
    grammar_state_free(s);
    grammar_free(g);

    /* tokens that split a UTF-8 character: accepted byte by byte */
    g = gbnf("root ::= \"\xe4\xb8\xad\" [\xe6\x96\x87]");
    s = grammar_state_new(g, NULL);
    int t1 = -1, t2 = -1;
    for (int t = 0; t < v.n; t++) {
        if (v.lens[t] == 2 && !memcmp(v.bytes[t], "\xe4\xb8", 2)) t1 = t;
        if (v.lens[t] == 3 && !memcmp(v.bytes[t], "\xe6\x96\x87", 3)) t2 = t;
    }
    assert_true(t1 >= 0 && t2 >= 0);
    n = grammar_mask(s, v.v, m);
    assert_true(m[t1] && m[0xe4]);
    assert_true(grammar_accept(s, v.v, t1));
    n = grammar_mask(s, v.v, m);
    assert_int_equal(n, 1);
    assert_true(m[0xad]);
    assert_true(grammar_accept(s, v.v, 0xad));
    assert_true(grammar_accept(s, v.v, t2));
    assert_true(grammar_is_done(s));
    grammar_state_free(s);
    grammar_free(g);

    /* ambiguity that explodes: an error, not a silent subset */
    g = gbnf("root ::= x*\nx ::= [a-z]* \" \"");
    s = grammar_state_new(g, NULL);
    assert_true(grammar_accept_bytes(s, (const uint8_t *)"ab ab ab ", 9));
    grammar_state_free(s);
    grammar_free(g);
    g = gbnf("root ::= (a | b)*\na ::= \"x\" root \"y\"\nb ::= \"x\" root \"z\"");
    s = grammar_state_new(g, NULL);
    bool failed = false;
    for (int i = 0; i < 30 && !failed; i++) {
        n = grammar_mask(s, v.v, m);
        if (n < 0) {
            failed = true;
            assert_non_null(strstr(grammar_state_error(s)->msg, "too ambiguous"));
            break;
        }
        assert_true(grammar_accept(s, v.v, 'x'));
    }
    assert_true(failed);
    grammar_state_free(s);
    grammar_free(g);

    /* apply */
    float logits[4] = {1, 2, 3, 4};
    uint8_t allow[4] = {1, 0, 1, 0};
    grammar_apply_mask(allow, logits, 4);
    assert_true(logits[0] == 1 && isinf(logits[1]) && logits[1] < 0 && logits[2] == 3 && isinf(logits[3]));
    free(m);
    vocab_free(&v);

    /* vocabulary arguments */
    kvant_status st;
    const uint8_t *b[1] = {(const uint8_t *)"a"};
    int l[1] = {1};
    int32_t e[1] = {5};
    assert_null(grammar_vocab_new(b, l, 1, e, 1, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    assert_null(grammar_vocab_new(b, l, 0, NULL, 0, &st));
}


/* ---- hostile schemas (fuzz/corpus/json_schema/regress-*) --------------------------------
 * A chain of $refs nested one compile call per link and overflowed the stack
 * (a 1 MiB body holds 30000 links): refused past GRAMMAR_MAX_SCHEMA_DEPTH.
 * Objects of 20000 members (duplicate-key check, gjson_get, $ref lookup and
 * rule names were each quadratic: 9 s) are now linear. */
static char *ref_chain(int links) {
    gstr b = {0};
    gstr_puts(&b, "{\"$defs\":{");
    for (int i = 0; i < links; i++) gstr_printf(&b, "\"a%d\":{\"$ref\":\"#/$defs/a%d\"},", i, i + 1);
    gstr_printf(&b, "\"a%d\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/a0\"}", links);
    assert_false(b.oom);
    return b.s;
}

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_schema_hostile(void **state) {
    (void)state;
    kvant_status st;
    char *ok = ref_chain(GRAMMAR_MAX_SCHEMA_DEPTH - 2); /* the root's rule and the integer's are two more */
    grammar *g = schema(ok);
    assert_int_equal(match(g, "42", 2), 2);
    grammar_free(g);
    free(ok);
    const int links[] = {GRAMMAR_MAX_SCHEMA_DEPTH, 30000};
    for (int k = 0; k < 2; k++) {
        char *deep = ref_chain(links[k]);
        assert_null(grammar_from_json_schema(deep, strlen(deep), &st));
        assert_int_equal(st.code, KVANT_ERR_ARG);
        if (!strstr(st.msg, "nested more than 256 deep")) fail_msg("message: %s", st.msg);
        free(deep);
    }

    /* 20000 members: parsed, found by gjson_get, duplicates named; $refs to each and names that clean alike */
    enum { N = 20000 };
    gstr b = {0};
    gstr_puts(&b, "{\"$defs\":{");
    for (int i = 0; i < N; i++) gstr_printf(&b, "%s\"d%d\":{\"type\":\"integer\",\"minimum\":%d}", i ? "," : "", i, i);
    gstr_puts(&b, "},\"properties\":{");
    for (int i = 0; i < N; i++)
        gstr_printf(&b, "%s\"%s%d\":{\"$ref\":\"#/$defs/d%d\"}", i ? "," : "",
                    "a-long-property-name-that-every-member-shares-up-to-its-last-digits-", i, i);
    gstr_puts(&b, "}}");
    assert_false(b.oom);
    gjson *v = gjson_parse(b.s, b.n, &st);
    assert_non_null(v);
    const gjson *defs = gjson_get(v, "$defs");
    assert_non_null(defs);
    assert_int_equal(defs->n, N);
    assert_non_null(defs->sorted);
    char key[32];
    for (int i = 0; i < N; i += 997) {
        snprintf(key, sizeof key, "d%d", i);
        const gjson *d = gjson_get(defs, key);
        assert_non_null(d);
        assert_true(gjson_get(d, "minimum")->num == i);
    }
    assert_null(gjson_get(defs, "d20000"));
    assert_null(gjson_get(defs, "d"));
    gjson_free(v);
    const double t0 = mono_ms();
    g = schema(b.s);
    const double ms = mono_ms() - t0;
    grammar_free(g);
    printf("a schema of %d $defs and %d properties referring to them (%zu bytes): compiled in %.0f ms\n", N, N, b.n, ms);
    gstr_free(&b);

    /* a key given twice in a large object: refused, the key named; in a small one as before */
    gstr_puts(&b, "{");
    for (int i = 0; i < 100; i++) gstr_printf(&b, "\"k%d\":%d,", i, i);
    gstr_puts(&b, "\"k57\":0}");
    assert_null(gjson_parse(b.s, b.n, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    if (!strstr(st.msg, "duplicate key 'k57'")) fail_msg("message: %s", st.msg);
    gstr_free(&b);
    assert_null(gjson_parse("{\"a\":1,\"b\":2,\"a\":3}", 19, &st));
    assert_non_null(strstr(st.msg, "duplicate key at offset 13"));
}

/* An ambiguous grammar (fuzz/corpus/gbnf/regress-ambiguous-mask: each byte of
 * "root ::= . root*" may open one more nesting, so the state gains a stack
 * per byte) stays correct up to GRAMMAR_MAX_STACKS and then fails cleanly:
 * the masks equal the reference, the step past the limit is an error.  The
 * cost of a mask grows with the stacks (printed; the fuzz harness checks
 * masks only on states of at most FZ_MASK_STACKS stacks, to stay within its
 * 1 s per input under the sanitizers). */
static void test_gbnf_ambiguous(void **state) {
    (void)state;
    vocab v;
    synthetic_vocab(&v);
    uint8_t *m1 = malloc((size_t)v.n), *m2 = malloc((size_t)v.n);
    uint64_t rng = 5;
    grammar *g = gbnf("root ::= . root*");
    grammar_state *s = grammar_state_new(g, NULL);
    assert_non_null(s);
    int fed = 0, last_stacks = 0;
    for (; fed < 8192; fed++) {
        const uint8_t c = (uint8_t)('a' + fed % 26);
        if (!grammar_accept_bytes(s, &c, 1)) break;
        const int n = grammar_state_n_stacks(s);
        assert_true(n <= GRAMMAR_MAX_STACKS + 1); /* + the empty stack (the grammar can end here) */
        if (fed == 3 || fed == 7) { /* past ~100 stacks a mask itself explodes (its tokens step several bytes on) */
            const double t0 = mono_ms();
            check_mask(s, &v, m1, m2, &rng);
            printf("root ::= . root*: %d bytes, %d stacks: a mask and its reference over %d tokens in %.1f ms\n",
                   fed + 1, n, v.n, mono_ms() - t0);
        }
        last_stacks = n;
    }
    assert_true(fed < 8192); /* the stacks passed the limit: refused, and reported */
    assert_int_equal(grammar_state_error(s)->code, KVANT_ERR_UNSUPPORTED);
    assert_non_null(strstr(grammar_state_error(s)->msg, "GRAMMAR_MAX_STACKS"));
    printf("root ::= . root*: refused after %d bytes at %d stacks\n", fed, last_stacks);
    grammar_state_free(s);
    grammar_free(g);
    free(m1), free(m2);
    vocab_free(&v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_reader),     cmocka_unit_test(test_gbnf_errors),
        cmocka_unit_test(test_gbnf_match),      cmocka_unit_test(test_utf8_classes),
        cmocka_unit_test(test_integer_ranges),  cmocka_unit_test(test_state_api),
        cmocka_unit_test(test_schema_refused),  cmocka_unit_test(test_mask_random_states),
        cmocka_unit_test(test_mask_small_caches), cmocka_unit_test(test_schema_big_enum),
        cmocka_unit_test(test_schema_samples),  cmocka_unit_test(test_mask_llama_spm),
        cmocka_unit_test(test_mask_qwen2),
        cmocka_unit_test(test_schema_hostile),
        cmocka_unit_test(test_gbnf_ambiguous),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
