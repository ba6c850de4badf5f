/* test_tok_families.c - every tokenizer family against llama.cpp's vectors,
 * the pre-tokenizers' regex semantics, and `kvant tokenize`.
 *
 * Vectors: ../shared/tokenizers/ggml-vocab-NAME.gguf.{inp,out} as llama.cpp's
 * tests/test-tokenizer-0 reads them (inputs split at
 * "\n__ggml_vocab_test__\n", one line of ids each, add_special = false,
 * parse_special = false).  Every input must give exactly its ids; a missing
 * file fails the test. */
#define _GNU_SOURCE /* memmem, strndup */
#include "testutil.h"

#include "format/gguf.h"
#include "kvant.h"
#include "tok/tok.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------- */

static tok *load_vocab(const char *vocab) {
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizers/ggml-vocab-%s.gguf", vocab);
    kvant_status st = {0};
    gguf_ctx *g = gguf_open(shared_path(rel), &st);
    if (!g) fail_msg("%s", st.msg);
    tok *t = tok_from_gguf(g, &st);
    gguf_close(g);
    if (!t) fail_msg("%s", st.msg);
    return t;
}

#include "tok_helpers.h"

static void expect_ids(const tok *t, const char *s, bool bos, bool special, const int32_t *want, int nw) {
    int n;
    int32_t *ids = encode(t, s, strlen(s), bos, special, &n);
    if (n != nw || memcmp(ids, want, (size_t)n * sizeof *ids) != 0) {
        print_message("'%s' (bos %d, special %d)\n", s, bos, special);
        print_ids("want", want, nw);
        print_ids("got ", ids, n);
        free(ids);
        fail();
    }
    free(ids);
}


/* ---- llama.cpp's vectors, every vocabulary ------------------------------------------
 * Each input gives exactly llama.cpp's ids, and the concatenated pieces give
 * the input back.  (llama.cpp's test-tokenizer-0 checks no round trip; here
 * every vector of every vocabulary has one, so none is exempt.) */

static void check_family(const char *vocab, const char *pre) {
    tok *t = load_vocab(vocab);
    assert_string_equal(tok_pre_name(t), pre);
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizers/ggml-vocab-%s.gguf", vocab);
    check_vectors(t, rel, 46);
    tok_free(t);
}

#define FAMILY_TEST(fn, vocab, pre)                                                                          \
    static void fn(void **state) {                                                                           \
        (void)state;                                                                                         \
        check_family(vocab, pre);                                                                            \
    }

FAMILY_TEST(test_llama_spm, "llama-spm", "")
FAMILY_TEST(test_phi3, "phi-3", "")
FAMILY_TEST(test_llama_bpe, "llama-bpe", "llama-bpe")
FAMILY_TEST(test_qwen2, "qwen2", "qwen2")
FAMILY_TEST(test_gpt2, "gpt-2", "gpt-2")
FAMILY_TEST(test_deepseek_llm, "deepseek-llm", "deepseek-llm")
FAMILY_TEST(test_deepseek_coder, "deepseek-coder", "deepseek-coder")
FAMILY_TEST(test_falcon, "falcon", "falcon")
FAMILY_TEST(test_starcoder, "starcoder", "starcoder")
FAMILY_TEST(test_refact, "refact", "refact")
FAMILY_TEST(test_mpt, "mpt", "mpt")

/* ---- pre-tokenizers: hand-written splitters against the regexes they stand for --------
 * llama.cpp runs the GPT-2 and Llama 3 regexes by hand-written code; kvant
 * does too, and keeps PCRE2 running the regexes themselves as the naive
 * reference: on random text over the characters that matter (ASCII and
 * non-ASCII letters, digits, marks, punctuation and symbols; spaces, tabs,
 * CR/LF, NBSP, U+3000, U+2028, U+0085; apostrophes and the contraction
 * letters in both cases; controls, a format character, an emoji, bytes that
 * are not UTF-8) both must split identically. */

static const char *const k_alphabet[] = {
    "a", "Z", "s", "S", "t", "T", "r", "E", "v", "l", "L", "m", "D", "'", "'", " ", " ", " ", "\t", "\n", "\r",
    "1", "7", "\xd9\xa3" /* U+0663 Arabic-Indic three */, "\xc3\xa9", "\xc3\x9f", "\xd0\x96",
    "\xe4\xb8\xad" /* U+4E2D */, "\xf0\x9f\x98\x80" /* U+1F600 */, "\xc2\xa0", "\xe3\x80\x80",
    "\xe2\x80\xa8", "\xc2\x85", ".", ",", "!", "$", "~", "`", "|", "+", "<", "\xcc\x81" /* U+0301 */,
    "\xe2\x80\x8b" /* U+200B */, "\x1f", "\xff", "\xc3", "\xe2\x82", "\xe2\x85\xa7" /* U+2167 Nl */,
};

static uint32_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static char *random_text(uint64_t *seed, size_t *len) {
    int n = 1 + (int)(lcg(seed) % 24);
    char *s = malloc(24 * 4 + 1);
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        const char *a = k_alphabet[lcg(seed) % (sizeof k_alphabet / sizeof *k_alphabet)];
        memcpy(s + o, a, strlen(a));
        o += strlen(a);
    }
    s[o] = 0;
    *len = o;
    return s;
}

static int split(const tok_pre *p, const char *s, size_t len, uint32_t *ends, int max) {
    int n = tok_pre_split(p, s, len, ends, max);
    assert_true(n >= 0);
    return n;
}

static void print_split(const char *what, const char *s, const uint32_t *ends, int n) {
    char line[2048];
    int k = snprintf(line, sizeof line, "  %s:", what);
    for (int i = 0, b = 0; i < n && k < (int)sizeof line - 64; b = (int)ends[i++]) {
        k += snprintf(line + k, sizeof line - k, " [");
        for (int j = b; j < (int)ends[i] && k < (int)sizeof line - 16; j++) {
            unsigned char c = (unsigned char)s[j];
            k += snprintf(line + k, sizeof line - k, c >= 0x20 && c < 0x7f ? "%c" : "\\x%02x", c);
        }
        k += snprintf(line + k, sizeof line - k, "]");
    }
    print_message("%s\n", line);
}

static void test_fast_paths_match_regex(void **state) {
    (void)state;
    static const char *const pres[] = {"gpt-2", "llama-bpe", "falcon", "starcoder", "default", "chameleon"};
    uint64_t seed = 42;
    for (size_t k = 0; k < sizeof pres / sizeof *pres; k++) {
        kvant_status st = {0};
        tok_pre *fast = tok_pre_new(pres[k], strlen(pres[k]), 0, &st);
        tok_pre *re = tok_pre_new(pres[k], strlen(pres[k]), TOK_PRE_REGEX_ONLY, &st);
        assert_non_null(fast);
        assert_non_null(re);
        int bad = 0;
        for (int i = 0; i < 4000; i++) {
            size_t len;
            char *s = random_text(&seed, &len);
            uint32_t a[128], b[128];
            int na = split(fast, s, len, a, 128), nb = split(re, s, len, b, 128);
            if ((na != nb || memcmp(a, b, (size_t)na * sizeof *a)) && bad++ < 5) {
                print_message("%s: splits differ\n", pres[k]);
                print_split("fast ", s, a, na);
                print_split("regex", s, b, nb);
            }
            free(s);
        }
        tok_pre_free(fast);
        tok_pre_free(re);
        if (bad) fail_msg("%s: %d of 4000 texts split differently", pres[k], bad);
    }
}

/* ---- pre-tokenizers: every family's regex list ------------------------------------
 * Expected words from an independent reference: Python's `regex` module
 * running each family's regexes one after the other, each on the pieces the
 * one before left, as llama.cpp applies them.  (Not for youtu and tiny_aya,
 * whose \p{Lu}/\p{Ll} llama.cpp reads as any letter, nor kimi-k2 and
 * afmoe, which llama.cpp splits by hand: see test_pre_quirks.)  Checked with
 * the hand-written splitters and with PCRE2 alone. */

static const char *const k_split_texts[] = {
    "Hello World! I'M fine, you're OK? 1234567 apples",
    "  leading and trailing  \n\n\tmixed\r\n  spaces   ",
    "func(x) { return x+1; } // 2025-01-01 $100 `tick` a|b",
    "中文字符 and 日本語カタカナ 한국어 mixed",
    "naïve café Ωmega Ελληνικά русский — “quotes”…",
    "a1b22c333d4444 3.14159 1,000,000",
    "It's 'quoted' and they'll've done it's DON'T",
    "<sentinel:12> IMGIMGABZ\t\t  x    y",
};

static const struct {
    const char *pre;
    const char *words[8];
} k_splits[] = {
    {"default",
     {
      "[Hello][ World][!][ I]['][M][ fine][,][ you]['][re][ OK][?][ ][123][456][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\t][mixed][\r\n ][ spaces][   ]",
      "[func][(][x][)][ ][{][ return][ x][+][1][;][ ][}][ ][//][ ][202][5][-][01][-][01][ ][$][100][ `][tick][`][ a][|][b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ ][—][ ][“][quotes][”…]",
      "[a][1][b][22][c][333][d][444][4][ ][3][.][141][59][ ][1][,][000][,][000]",
      "[It]['][s][ ]['][quoted]['][ and][ they]['][ll]['][ve][ done][ it]['][s][ DON]['][T]",
      "[<][sentinel][:][12][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"llama3",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][123][456][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][202][5][-][01][-][01][ $][100][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][22][c][333][d][444][4][ ][3][.][141][59][ ][1][,][000][,][000]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][12][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"dbrx",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][123][456][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][202][5][-][01][-][01][ $][100][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][22][c][333][d][444][4][ ][3][.][141][59][ ][1][,][000][,][000]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][12][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"glm4",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][123][456][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][202][5][-][01][-][01][ $][100][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][22][c][333][d][444][4][ ][3][.][141][59][ ][1][,][000][,][000]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][12][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"jais-2",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][123][456][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][  ][ ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][202][5][-][01][-][01][ $][100][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][22][c][333][d][444][4][ ][3][.][141][59][ ][1][,][000][,][000]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][12][>][ IMGIMGABZ][\t\t][ ][ x][  ][ ][ y]",
     }},
    {"deepseek-llm",
     {
      "[Hello][ World][!][ I]['][M][ fine][,][ you]['][re][ OK][?][ ][1234567][ apples]",
      "[ ][ leading][ and][ trailing][  ][\n][\n][\tmixed][\r][\n][ ][ spaces][   ]",
      "[func][(][x][)][ {][ return][ x][+][1][;][ }][ //][ ][2025][-][01][-][01][ $][100][ `][tick][`][ a][|][b]",
      "[中文字符][ and][ ][日本語カタカナ][ ][한국어][ mixed]",
      "[na][ï][ve][ caf][é][ Ω][mega][ Ελληνικά][ русский][ ][—][ ][“][quotes][”][…]",
      "[a][1][b][22][c][333][d][4444][ ][3][.][14159][ ][1][,][000][,][000]",
      "[It]['][s][ '][quoted]['][ and][ they]['][ll]['][ve][ done][ it]['][s][ DON]['][T]",
      "[<][sentinel][:][12][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"deepseek-coder",
     {
      "[Hello][ World][!][ I]['][M][ fine][,][ you]['][re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading][ and][ trailing][  ][\n][\n][\tmixed][\r][\n][ ][ spaces][   ]",
      "[func][(][x][)][ {][ return][ x][+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `][tick][`][ a][|][b]",
      "[中文字符][ and][ ][日本語カタカナ][ ][한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ ][—][ ][“][quotes][”…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['][s][ '][quoted]['][ and][ they]['][ll]['][ve][ done][ it]['][s][ DON]['][T]",
      "[<][sentinel][:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"deepseek-v3",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][123][456][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][202][5][-][01][-][01][ $][100][ `][tick][`][ a][|b]",
      "[中文字符][ and][ ][日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][22][c][333][d][444][4][ ][3][.][141][59][ ][1][,][000][,][000]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][12][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"spark2_5",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r][\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `][tick][`][ a][|b]",
      "[中文字符][ and][ ][日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"falcon",
     {
      "[Hello][ World][!][ I]['][M][ fine][,][ you]['][re][ OK][?][ ][123][456][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\t][mixed][\r\n ][ spaces][   ]",
      "[func][(][x][)][ ][{][ return][ x][+][1][;][ ][}][ ][//][ ][202][5][-][01][-][01][ ][$][100][ ][`][tick][`][ a][|][b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ ][—][ ][“][quotes][”…]",
      "[a][1][b][22][c][333][d][444][4][ 3][.][141][59][ 1][,][000][,][000]",
      "[It]['][s][ ]['][quoted]['][ and][ they]['][ll]['][ve][ done][ it]['][s][ DON]['][T]",
      "[<][sentinel][:][12][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"starcoder",
     {
      "[Hello][ World][!][ I]['][M][ fine][,][ you]['re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\t][mixed][\r\n ][ spaces][   ]",
      "[func][(][x][)][ {][ return][ x][+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `][tick][`][ a][|][b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['][T]",
      "[<][sentinel][:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"gpt-2",
     {
      "[Hello][ World][!][ I]['][M][ fine][,][ you]['re][ OK][?][ 1234567][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\t][mixed][\r\n ][ spaces][   ]",
      "[func][(][x][)][ {][ return][ x][+][1][;][ }][ //][ 2025][-][01][-][01][ $][100][ `][tick][`][ a][|][b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][22][c][333][d][4444][ 3][.][14159][ 1][,][000][,][000]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['][T]",
      "[<][sentinel][:][12][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"qwen2",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"qwen35",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"poro-chat",
     {
      "[Hello][ World][!][ I'M][ fine][,][ you're][ OK][?][ 1234567][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n\t][mixed][\r\n ][ spaces][   ]",
      "[func][(][x][)][ {][ return][ x+1;][ }][ //][ 2025-01-01][ $100][ `tick`][ a][|][b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “quotes”][…]",
      "[a1b22c333d4444][ 3][.][14159][ 1][,][000][,][000]",
      "[It's][ 'quoted'][ and][ they'll've][ done][ it's][ DON'T]",
      "[<sentinel:12>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"viking",
     {
      "[Hello][ World][!][ I'M][ fine][,][ you're][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n\t][mixed][\r\n ][ spaces][   ]",
      "[func][(][x][)][ {][ return][ x+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `tick`][ a][|][b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “quotes”][…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It's][ 'quoted'][ and][ they'll've][ done][ it's][ DON'T]",
      "[<sentinel:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"tekken",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"chameleon",
     {
      "[Hello][ World][!][ I]['][M][ fine][,][ you]['][re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[  ][leading][ and][ trailing][  ][\n][\n][\t][mixed][\r][\n][  ][spaces][  ][ ]",
      "[func][(][x][)][ ][{][ return][ x][+][1][;][ ][}][ ][/][/][ ][2][0][2][5][-][0][1][-][0][1][ ][$][1][0][0][ ][`][tick][`][ a][|][b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ ][—][ ][“][quotes][”][…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['][s][ ]['][quoted]['][ and][ they]['][ll]['][ve][ done][ it]['][s][ DON]['][T]",
      "[<][sentinel][:][1][2][>][ ][IMGIMGABZ][\t][\t][  ][x][    ][y]",
     }},
    {"gpt-4o",
     {
      "[Hello][ World][!][ I'M][ fine][,][ you're][ OK][?][ ][123][456][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][202][5][-][01][-][01][ $][100][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][22][c][333][d][444][4][ ][3][.][141][59][ ][1][,][000][,][000]",
      "[It's][ '][quoted]['][ and][ they'll]['ve][ done][ it's][ DON'T]",
      "[<sentinel][:][12][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"granite-embed-multi-97m",
     {
      "[Hello][ World][!][ I'M][ fine][,][ you're][ OK][?][ ][123][456][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][202][5][-][01][-][01][ $][100][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][22][c][333][d][444][4][ ][3][.][141][59][ ][1][,][000][,][000]",
      "[It's][ '][quoted]['][ and][ they'll]['ve][ done][ it's][ DON'T]",
      "[<sentinel][:][12][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"superbpe",
     {
      "[Hello World! I'M fine, you're OK? ][1][234][567][ apples]",
      "[  leading and trailing  \n\n\tmixed\r\n  spaces   ]",
      "[func(x) { return x+][1][; } // ][2][025][-][01][-][01][ $][100][ `tick` a|b]",
      "[中文字符 and 日本語カタカナ 한국어 mixed]",
      "[naïve café Ωmega Ελληνικά русский — “quotes”…]",
      "[a][1][b][22][c][333][d][4][444][ ][3][.][14][159][ ][1][,][000][,][000]",
      "[It's 'quoted' and they'll've done it's DON'T]",
      "[<sentinel:][12][> IMGIMGABZ\t\t  x    y]",
     }},
    {"bailingmoe",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"seed-coder",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"ufakzeka",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"laguna",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading][ and][ trailing][  ][\n\n][\tmixed][\r][\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"exaone-moe",
     {
      "[Hello World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][1][2][3][4][5][6][7][ apples]",
      "[ ][ leading and trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return x][+][1][;][ }][ //][ ][2][0][2][5][-][0][1][-][0][1][ $][1][0][0][ `][tick][`][ a][|b]",
      "[中文字符 and 日本語カタカナ 한국어 mixed]",
      "[naïve café Ωmega Ελληνικά русский][ —][ “][quotes][”…]",
      "[a][1][b][2][2][c][3][3][3][d][4][4][4][4][ ][3][.][1][4][1][5][9][ ][1][,][0][0][0][,][0][0][0]",
      "[It]['s][ '][quoted]['][ and they]['ll]['ve][ done it]['s][ DON]['T]",
      "[<sentinel][:][1][2][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
    {"minicpm5",
     {
      "[Hello][ World][!][ I]['M][ fine][,][ you]['re][ OK][?][ ][123][456][7][ apples]",
      "[ ][ leading][ and][ trailing][  \n\n][\tmixed][\r\n][ ][ spaces][   ]",
      "[func][(x][)][ {][ return][ x][+][1][;][ }][ //][ ][202][5][-][01][-][01][ $][100][ `][tick][`][ a][|b]",
      "[中文字符][ and][ 日本語カタカナ][ 한국어][ mixed]",
      "[naïve][ café][ Ωmega][ Ελληνικά][ русский][ —][ “][quotes][”…]",
      "[a][1][b][22][c][333][d][444][4][ ][3][.][141][59][ ][1][,][000][,][000]",
      "[It]['s][ '][quoted]['][ and][ they]['ll]['ve][ done][ it]['s][ DON]['T]",
      "[<sentinel][:][12][>][ IMGIMGABZ][\t\t ][ x][   ][ y]",
     }},
};

static char *render(const char *s, const uint32_t *ends, int n) {
    size_t cap = strlen(s) + 2 * (size_t)n + 1, o = 0;
    char *out = malloc(cap);
    for (int i = 0, b = 0; i < n; b = (int)ends[i++]) {
        out[o++] = '[';
        memcpy(out + o, s + b, ends[i] - (uint32_t)b);
        o += ends[i] - (uint32_t)b;
        out[o++] = ']';
    }
    out[o] = 0;
    return out;
}

static void test_pre_families(void **state) {
    (void)state;
    int bad = 0;
    for (size_t f = 0; f < sizeof k_splits / sizeof *k_splits; f++) {
        for (unsigned mode = 0; mode < 2; mode++) {
            kvant_status st = {0};
            tok_pre *p = tok_pre_new(k_splits[f].pre, strlen(k_splits[f].pre), mode ? TOK_PRE_REGEX_ONLY : 0, &st);
            if (!p) fail_msg("%s: %s", k_splits[f].pre, st.msg);
            for (size_t i = 0; i < sizeof k_split_texts / sizeof *k_split_texts; i++) {
                const char *s = k_split_texts[i];
                uint32_t ends[256];
                int n = tok_pre_split(p, s, strlen(s), ends, 256);
                assert_true(n >= 0);
                char *got = render(s, ends, n);
                if (strcmp(got, k_splits[f].words[i])) {
                    print_message("%s%s #%zu\n  want %s\n  got  %s\n", k_splits[f].pre, mode ? " (regex only)" : "",
                                  i, k_splits[f].words[i], got);
                    bad++;
                }
                free(got);
            }
            tok_pre_free(p);
        }
    }
    assert_int_equal(bad, 0);
}

static void expect_split(const char *pre, const char *s, const char *want) {
    kvant_status st = {0};
    tok_pre *p = tok_pre_new(pre, strlen(pre), 0, &st);
    if (!p) fail_msg("%s: %s", pre, st.msg);
    uint32_t ends[256];
    int n = tok_pre_split(p, s, strlen(s), ends, 256);
    assert_true(n >= 0);
    char *got = render(s, ends, n);
    if (strcmp(got, want)) fail_msg("%s '%s'\n  want %s\n  got  %s", pre, s, want, got);
    free(got);
    tok_pre_free(p);
}

/* What llama.cpp does that a plain regex engine would not. */
static void test_pre_quirks(void **state) {
    (void)state;
    /* \p{Lu} \p{Ll} ... all mean "a letter" in llama.cpp's collapsed regexes */
    expect_split("tiny_aya", "HelloWorld fooBar 1234567", "[HelloWorld][ fooBar][ ][1][234][567]");
    expect_split("youtu", "HelloWorld 한국어，中文", "[HelloWorld][ ][한국어][，][中文]");
    /* '~' is not in its \p{S}: here it is no symbol and stays alone */
    expect_split("deepseek-v3", "~$ ~a", "[~][$][ ][~a]");
    /* non-ASCII spaces become \v before a regex without \p{..}: U+3000 is then
     * whitespace, not the U+3000 of the class [\x{3000}-\x{3002}] */
    expect_split("deepseek-llm", "\u3000\u3000a", "[\u3000][\u3000a]");
    /* the hand-written Kimi K2 and AFMoE splitters (AFMoE's leading digits
     * join the text before them, as in llama.cpp) */
    expect_split("kimi-k2", "中文abc's 123456", "[中文][abc's][ ][123][456]");
    expect_split("afmoe", "ab1234 x", "[ab][1][234][ x]");
    /* case-insensitive contractions for Llama 3, case-sensitive for GPT-2 */
    expect_split("llama-bpe", "I'M HE'LL we'Re", "[I]['M][ HE]['LL][ we]['Re]");
    expect_split("gpt-2", "I'M HE'LL we'Re", "[I]['][M][ HE]['][LL][ we]['][Re]");
    /* \s+(?!\S): the last space of a run goes to the next word; at the end all stay */
    expect_split("gpt-2", "a   b   ", "[a][  ][ b][   ]");
    expect_split("gpt-2", "a\t\t\nb", "[a][\t\t][\n][b]");
    expect_split("llama-bpe", "a \n\n b\r\n", "[a][ \n\n][ b][\r\n]");
    /* a regex sees only its chunk: the space before the digit is split off
     * by \p{N} first and does not join it */
    expect_split("starcoder", "a 1b", "[a][ ][1][b]");
    /* bytes that are not UTF-8 break words like U+FFFD and are kept */
    expect_split("gpt-2", "a\xff\xfe b\xc3", "[a][\xff\xfe][ b][\xc3]");
}

/* Arbitrary bytes (NUL, overlong forms, surrogates, code points past
 * U+10FFFF, cut sequences): every family splits them into non-empty words
 * that cover the text, and GPT-2 byte-level BPE gives the bytes back. */
static void test_pre_arbitrary_bytes(void **state) {
    (void)state;
    static const char *const all[] = {
        "default", "llama-bpe", "dbrx", "chatglm-bpe", "jais-2", "deepseek-llm", "deepseek-coder", "deepseek-v3",
        "spark2_5", "youtu", "falcon", "starcoder", "gpt-2", "qwen2", "qwen35", "poro-chat", "viking", "tekken",
        "chameleon", "gpt-4o", "granite-embed-multi-97m", "tiny_aya", "kimi-k2", "superbpe", "bailingmoe",
        "seed-coder", "ufakzeka", "afmoe", "laguna", "exaone-moe", "minicpm5",
    };
    static const char *const odd[] = {"\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf7\xbf\xbf\xbf", "\xe2\x82",
                                      "\xf0\x9f", "\x80", "\xfe", "\x00", " ", "1", "a", "\xe4\xb8\xad", "\xc2\xa0"};
    tok *g2 = load_vocab("gpt-2");
    uint64_t seed = 7;
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) {
        kvant_status st = {0};
        tok_pre *p = tok_pre_new(all[k], strlen(all[k]), 0, &st);
        if (!p) fail_msg("%s: %s", all[k], st.msg);
        for (int i = 0; i < 300; i++) {
            char s[128];
            size_t len = 0;
            int n = 1 + (int)(lcg(&seed) % 24);
            for (int j = 0; j < n; j++) {
                const char *a = odd[lcg(&seed) % (sizeof odd / sizeof *odd)];
                size_t al = a[0] ? strlen(a) : 1;
                memcpy(s + len, a, al);
                len += al;
            }
            uint32_t ends[128];
            int w = tok_pre_split(p, s, len, ends, 128);
            assert_true(w > 0);
            for (int j = 0; j < w; j++) assert_true(ends[j] > (j ? ends[j - 1] : 0));
            assert_int_equal(ends[w - 1], len);
            if (k == 0) {
                int nt;
                int32_t *ids = encode(g2, s, len, false, false, &nt);
                size_t dl;
                char *back = decode(g2, ids, nt, &dl);
                assert_int_equal(dl, len);
                assert_memory_equal(back, s, len);
                free(back);
                free(ids);
            }
        }
        tok_pre_free(p);
    }
    tok_free(g2);
}

/* ---- loader rules: ignore_merges, add_space_prefix, strip, forced types, pre names ---- */

typedef struct {
    const char *model, *pre;
    int n;
    const char *const *tokens;
    const float *scores;
    const int32_t *types;
    int n_merges;
    const char *const *merges;
    int add_space_prefix;   /* -1: no key */
    int add_bos, add_eos;   /* -1: no key */
    int bos;                /* -1: no key */
} synth;

static gguf_writer *synth_writer(const synth *s) {
    gguf_writer *w = gguf_writer_new();
    if (s->model) gguf_writer_add_str(w, "tokenizer.ggml.model", s->model);
    if (s->pre) gguf_writer_add_str(w, "tokenizer.ggml.pre", s->pre);
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", s->tokens, (uint64_t)s->n);
    if (s->scores) gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, s->scores, (uint64_t)s->n);
    if (s->types) gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, s->types, (uint64_t)s->n);
    if (s->merges) gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", s->merges, (uint64_t)s->n_merges);
    if (s->add_space_prefix >= 0) gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", s->add_space_prefix);
    if (s->add_bos >= 0) gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", s->add_bos);
    if (s->add_eos >= 0) gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", s->add_eos);
    if (s->bos >= 0) gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)s->bos);
    return w;
}

static tok *load_synth(const synth *s, kvant_status *st) {
    gguf_writer *w = synth_writer(s);
    uint8_t *data;
    size_t size;
    assert_int_equal(gguf_writer_write_mem(w, &data, &size, st), KVANT_OK);
    gguf_writer_free(w);
    gguf_ctx *g = gguf_open_mem(data, size, "synthetic.gguf", st);
    assert_non_null(g);
    tok *t = tok_from_gguf(g, st);
    gguf_close(g);
    free(data);
    return t;
}

static const char *const k_bpe_toks[] = {"a", "b", "c", "bc", "abc", "d", "e", "f", "g", "h", "i", "j", "k"};
static const char *const k_bpe_merges[] = {"b c"};

/* Llama 3's ignore_merges: "abc" is a token no merge builds; as a whole
 * pre-token it is taken as it is.  dbrx has the same regex without the rule. */
static void test_ignore_merges(void **state) {
    (void)state;
    kvant_status st = {0};
    synth s = {"gpt2", "llama-bpe", 13, k_bpe_toks, NULL, NULL, 1, k_bpe_merges, -1, -1, -1, -1};
    tok *t = load_synth(&s, &st);
    if (!t) fail_msg("%s", st.msg);
    expect_ids(t, "abc", false, false, (int32_t[]){4}, 1);
    expect_ids(t, "abcb", false, false, (int32_t[]){0, 3, 1}, 3);
    /* BPE defaults as llama.cpp's: BOS 11 without a key; Llama 3 adds it */
    assert_int_equal(tok_bos(t), 11);
    assert_true(tok_add_bos(t));
    tok_free(t);
    s.pre = "dbrx";
    t = load_synth(&s, &st);
    expect_ids(t, "abc", false, false, (int32_t[]){0, 3}, 2);
    assert_false(tok_add_bos(t));
    tok_free(t);
    s.pre = "chatglm-bpe"; /* no default BOS */
    t = load_synth(&s, &st);
    assert_int_equal(tok_bos(t), -1);
    tok_free(t);
    s.pre = NULL; /* no pre: llama.cpp's 'default' (with a warning) */
    t = load_synth(&s, &st);
    if (!t) fail_msg("%s", st.msg);
    assert_string_equal(tok_pre_name(t), "default");
    tok_free(t);
}

static void test_unknown_pre(void **state) {
    (void)state;
    static const char *const names[] = {"no-such-pre", "gemma4", "llama-bpe2"};
    for (size_t i = 0; i < 3; i++) {
        kvant_status st = {0};
        synth s = {"gpt2", names[i], 13, k_bpe_toks, NULL, NULL, 1, k_bpe_merges, -1, -1, -1, -1};
        tok *t = load_synth(&s, &st);
        if (t) fail_msg("pre '%s' loaded", names[i]);
        assert_int_equal(st.code, KVANT_ERR_UNSUPPORTED);
        char want[64];
        snprintf(want, sizeof want, "pre-tokenizer '%s'", names[i]);
        if (!strstr(st.msg, want) || !strstr(st.msg, "synthetic.gguf")) fail_msg("message: %s", st.msg);
    }
}

/* tokenizer.ggml.add_space_prefix = false (Gemma): no space before the text
 * or after a special token, and none dropped when decoding. */
static void test_spm_no_space_prefix(void **state) {
    (void)state;
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "ab",
                                       "\xe2\x96\x81" "a", "\xe2\x96\x81" "ab"};
    static const float scores[] = {0, 0, 0, -5, -5, -5, -1, -2, -1};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1};
    kvant_status st = {0};
    synth s = {"llama", NULL, 9, toks, scores, types, 0, NULL, 0, -1, -1, -1};
    tok *t = load_synth(&s, &st);
    if (!t) fail_msg("%s", st.msg);
    expect_ids(t, "ab", false, false, (int32_t[]){6}, 1);
    expect_ids(t, "ab", true, false, (int32_t[]){1, 6}, 2);
    expect_ids(t, "<s>ab", false, true, (int32_t[]){1, 6}, 2);
    expect_ids(t, "a b", false, false, (int32_t[]){4, 3, 5}, 3);
    size_t len;
    char *text = decode(t, (int32_t[]){8, 7}, 2, &len);
    assert_string_equal(text, " ab a"); /* the first space stays */
    free(text);
    tok_free(t);
    s.add_space_prefix = 1; /* the default: "▁ab", and its space dropped at the start */
    t = load_synth(&s, &st);
    expect_ids(t, "ab", false, false, (int32_t[]){8}, 1);
    expect_ids(t, "<s>ab", false, true, (int32_t[]){1, 8}, 2);
    text = decode(t, (int32_t[]){8, 7}, 2, &len);
    assert_string_equal(text, "ab a");
    free(text);
    tok_free(t);
}

/* Phi-3 (general.name "Phi3"): special tokens eat the spaces after them
 * (llama.cpp's RSTRIP), except <unk>, <s>, <|endoftext|>.  (</s> is
 * user-defined in the file but, as an end-of-turn text, control in
 * llama.cpp: plain text never becomes it.) */
static void test_phi3_rstrip(void **state) {
    (void)state;
    tok *t = load_vocab("phi-3");
    expect_ids(t, "</s>  Hello", false, true, (int32_t[]){2, 15043}, 2);
    assert_int_equal(tok_token_type(t, 2), 3);
    expect_ids(t, "<|assistant|> \n Hello", false, true, (int32_t[]){32001, 15043}, 2);
    int n;
    int32_t *ids = encode(t, "<s>  Hello", 10, false, true, &n);
    assert_int_equal(ids[0], 1);
    assert_true(n > 2); /* "   Hello": the spaces stay */
    free(ids);
    tok_free(t);
}

/* End-of-turn and fill-in-the-middle texts become control tokens as in
 * llama.cpp (Qwen's FIM tokens are user-defined in the file): plain text
 * never turns into them, parse_special does. */
static void test_forced_control(void **state) {
    (void)state;
    tok *t = load_vocab("qwen2");
    assert_int_equal(tok_token_type(t, 151659), 3); /* <|fim_prefix|> */
    assert_int_equal(tok_token_type(t, 151667), 4); /* <think> stays user-defined */
    int n;
    int32_t *ids = encode(t, "<|fim_prefix|>", 14, false, false, &n);
    assert_true(n > 1);
    free(ids);
    expect_ids(t, "<|fim_prefix|>", false, true, (int32_t[]){151659}, 1);
    expect_ids(t, "<think>", false, false, (int32_t[]){151667}, 1);
    expect_ids(t, "Hello<|im_end|>", false, true, (int32_t[]){9707, 151645}, 2);
    assert_true(tok_is_eog(t, 151645));
    tok_free(t);
}

/* ---- the public vocabulary handle and `kvant tokenize` ------------------------------- */

static const char *vocab_path(const char *vocab) {
    static char path[512];
    snprintf(path, sizeof path, "%s/tokenizers/ggml-vocab-%s.gguf", KVANT_SHARED_DIR, vocab);
    return path;
}

/* End of generation as llama.cpp's special_eog_ids: each family's end-of-turn
 * token by its text, and EOS; never an ordinary token. */
static void expect_eog(const char *vocab, const char *const *texts, int n) {
    tok *t = load_vocab(vocab);
    for (int i = 0; i < n; i++) {
        const int32_t id = tok_find(t, texts[i], strlen(texts[i]));
        if (id < 0) fail_msg("%s has no %s", vocab, texts[i]);
        if (!tok_is_eog(t, id)) fail_msg("%s: %s (%d) does not end a generation", vocab, texts[i], id);
    }
    assert_true(tok_is_eog(t, tok_eos(t)));
    const int32_t word = tok_find(t, "the", 3);
    if (word >= 0) assert_false(tok_is_eog(t, word));
    tok_free(t);
}

static void test_end_of_generation(void **state) {
    (void)state;
    static const char *const llama3[] = {"<|eot_id|>", "<|end_of_text|>"}; /* Llama 3.0: no <|eom_id|> yet */
    static const char *const qwen[] = {"<|im_end|>", "<|endoftext|>"};
    static const char *const phi3[] = {"<|end|>", "<|endoftext|>"};
    expect_eog("llama-bpe", llama3, 2);
    expect_eog("qwen2", qwen, 2);
    expect_eog("phi-3", phi3, 2);
}

static void test_vocab_api(void **state) {
    (void)state;
    kvant_status st;
    kvant_vocab *v = kvant_vocab_open(vocab_path("qwen2"), &st);
    if (!v) fail_msg("%s", st.msg);
    assert_int_equal(kvant_vocab_n_tokens(v), 151936);
    int32_t ids[8] = {-7, -7};
    assert_int_equal(kvant_vocab_tokenize(v, "Hello world", 11, true, false, ids, 1), -2);
    assert_int_equal(ids[0], -7);
    assert_int_equal(kvant_vocab_tokenize(v, "Hello world", 11, true, false, ids, 8), 2);
    assert_int_equal(ids[0], 9707);
    assert_int_equal(ids[1], 1879);
    assert_int_equal(kvant_vocab_tokenize(v, "<|im_end|>", 10, false, true, ids, 8), 1);
    assert_int_equal(ids[0], 151645);
    char buf[32];
    assert_int_equal(kvant_vocab_piece(v, 1879, false, buf, sizeof buf), 6);
    assert_memory_equal(buf, " world", 6);
    assert_int_equal(kvant_vocab_piece(v, 151645, false, buf, sizeof buf), 0);
    assert_int_equal(kvant_vocab_piece(v, 151645, true, buf, sizeof buf), 10);
    assert_memory_equal(buf, "<|im_end|>", 10);
    assert_int_equal(kvant_vocab_piece(v, 151645, true, buf, 4), -10);
    assert_int_equal(kvant_vocab_piece(v, 151936, true, buf, sizeof buf), 0);
    kvant_vocab_free(v);

    v = kvant_vocab_open(vocab_path("llama-bpe"), &st); /* BOS where the vocabulary asks */
    assert_int_equal(kvant_vocab_tokenize(v, "Hello world", 11, true, false, ids, 8), 3);
    assert_int_equal(ids[0], 128000);
    assert_int_equal(kvant_vocab_tokenize(v, "Hello world", 11, false, false, ids, 8), 2);
    kvant_vocab_free(v);

    /* add_eos_token: EOS last (a GGUF without tensors or architecture) */
    const char *tmp = tmp_path("vocab_eos.gguf");
    synth s = {"gpt2", "gpt-2", 13, k_bpe_toks, NULL, NULL, 1, k_bpe_merges, -1, 1, 1, 5};
    gguf_writer *w = synth_writer(&s);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 6);
    assert_int_equal(gguf_writer_write_file(w, tmp, &st), KVANT_OK);
    gguf_writer_free(w);
    v = kvant_vocab_open(tmp, &st);
    if (!v) fail_msg("%s", st.msg);
    assert_int_equal(kvant_vocab_tokenize(v, "abc", 3, true, false, ids, 2), -4);
    assert_int_equal(kvant_vocab_tokenize(v, "abc", 3, true, false, ids, 3), -4);
    assert_int_equal(kvant_vocab_tokenize(v, "abc", 3, true, false, ids, 4), 4);
    assert_memory_equal(ids, ((int32_t[]){5, 0, 3, 6}), 4 * sizeof(int32_t));
    kvant_vocab_free(v);
    remove(tmp);

    assert_null(kvant_vocab_open(tmp_path("no-such-vocab.gguf"), &st));
    assert_int_equal(st.code, KVANT_ERR_IO);
    assert_non_null(strstr(st.msg, "no-such-vocab.gguf"));
}

static char *kvant_cmd(const char *args, int *rc) {
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "%s %s", KVANT_BIN, args);
    return run_capture(cmd, rc);
}

static void expect_cmd(const char *args, int want_rc, const char *want_out) {
    int rc;
    char *out = kvant_cmd(args, &rc);
    if (rc != want_rc) fail_msg("kvant %s: exit %d, want %d (output: %s)", args, rc, want_rc, out);
    if (want_out && strcmp(out, want_out)) fail_msg("kvant %s:\n  got  '%s'\n  want '%s'", args, out, want_out);
    free(out);
}

/* stderr (only) of a command that must fail with rc, containing has */
static void expect_fail(const char *args, int want_rc, const char *has) {
    char a[4200];
    snprintf(a, sizeof a, "%s 2>&1 >/dev/null", args);
    int rc;
    char *err = kvant_cmd(a, &rc);
    if (rc != want_rc) fail_msg("kvant %s: exit %d, want %d (stderr: %s)", args, rc, want_rc, err);
    if (has && !strstr(err, has)) fail_msg("kvant %s: stderr lacks '%s': %s", args, has, err);
    assert_null(strchr(err, '\n') == err + strlen(err) - 1 ? NULL : strchr(err, '\n')); /* one line */
    free(err);
}

static void test_cli_tokenize(void **state) {
    (void)state;
    char args[2048], qwen[512];
    snprintf(qwen, sizeof qwen, "%s", vocab_path("qwen2"));
    /* a vocabulary-only file: no tensors, no architecture needed */
    snprintf(args, sizeof args, "tokenize -m %s --ids -p 'Hello world'", qwen);
    expect_cmd(args, 0, "9707 1879\n");
    snprintf(args, sizeof args, "tokenize -m %s -p 'Hello world<|im_end|>'", qwen);
    expect_cmd(args, 0, "9707\t'Hello'\n1879\t' world'\n151645\t'<|im_end|>'\n");
    snprintf(args, sizeof args, "tokenize -m %s --ids --no-special -p '<|im_end|>'", qwen);
    int rc;
    char *out = kvant_cmd(args, &rc);
    assert_int_equal(rc, 0);
    assert_null(strstr(out, "151645"));
    assert_true(strchr(out, ' ') != NULL); /* several tokens */
    free(out);
    snprintf(args, sizeof args, "tokenize -m %s --ids -p 'Hello world'", vocab_path("llama-bpe"));
    expect_cmd(args, 0, "128000 9906 1917\n");
    snprintf(args, sizeof args, "tokenize -m %s --ids --no-bos -p 'Hello world'", vocab_path("llama-bpe"));
    expect_cmd(args, 0, "9906 1917\n");
    snprintf(args, sizeof args, "tokenize -m %s --ids -p ' Hello'", vocab_path("llama-spm"));
    expect_cmd(args, 0, "1 29871 15043\n");
    /* -f FILE and -f - read the same text */
    const char *txt = tmp_path("tokenize.txt");
    FILE *f = fopen(txt, "wb");
    assert_non_null(f);
    fputs("Hello world", f);
    fclose(f);
    snprintf(args, sizeof args, "tokenize -m %s --ids -f %s", qwen, txt);
    expect_cmd(args, 0, "9707 1879\n");
    snprintf(args, sizeof args, "tokenize -m %s --ids -f - < %s", qwen, txt);
    expect_cmd(args, 0, "9707 1879\n");
    remove(txt);

    out = kvant_cmd("tokenize --help", &rc);
    assert_int_equal(rc, 0);
    const char *flags[] = {"usage: kvant tokenize", "-m", "-p", "-f", "--ids", "--no-bos", "--no-special"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        if (!strstr(out, flags[i])) fail_msg("tokenize --help lacks '%s'", flags[i]);
    free(out);
    out = kvant_cmd("--help", &rc);
    assert_non_null(strstr(out, "tokenize"));
    free(out);

    expect_fail("tokenize -p x", 2, "-m");
    snprintf(args, sizeof args, "tokenize -m %s", qwen);
    expect_fail(args, 2, "-p TEXT or -f FILE");
    snprintf(args, sizeof args, "tokenize -m %s -p x -f y", qwen);
    expect_fail(args, 2, "-p TEXT or -f FILE");
    snprintf(args, sizeof args, "tokenize -m %s -p x --frobnicate", qwen);
    expect_fail(args, 2, "--frobnicate");
    snprintf(args, sizeof args, "tokenize -m %s -p", qwen);
    expect_fail(args, 2, "-p");
    snprintf(args, sizeof args, "tokenize -m %s -p x", tmp_path("no-such.gguf"));
    expect_fail(args, 2, "no-such.gguf");
    snprintf(args, sizeof args, "tokenize -m %s -f %s", qwen, tmp_path("no-such.txt"));
    expect_fail(args, 2, "no-such.txt");
    /* malformed: a vocabulary naming a pre-tokenizer nobody has */
    const char *bad = tmp_path("vocab_bad_pre.gguf");
    kvant_status st;
    synth s = {"gpt2", "no-such-pre", 13, k_bpe_toks, NULL, NULL, 1, k_bpe_merges, -1, -1, -1, -1};
    gguf_writer *w = synth_writer(&s);
    assert_int_equal(gguf_writer_write_file(w, bad, &st), KVANT_OK);
    gguf_writer_free(w);
    snprintf(args, sizeof args, "tokenize -m %s -p x", bad);
    expect_fail(args, 1, "'no-such-pre'");
    f = fopen(bad, "wb"); /* not a GGUF at all */
    fputs("not a gguf file", f);
    fclose(f);
    expect_fail(args, 1, "vocab_bad_pre.gguf");
    remove(bad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_spm),
        cmocka_unit_test(test_phi3),
        cmocka_unit_test(test_llama_bpe),
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_deepseek_llm),
        cmocka_unit_test(test_deepseek_coder),
        cmocka_unit_test(test_falcon),
        cmocka_unit_test(test_starcoder),
        cmocka_unit_test(test_refact),
        cmocka_unit_test(test_mpt),
        cmocka_unit_test(test_fast_paths_match_regex),
        cmocka_unit_test(test_pre_families),
        cmocka_unit_test(test_pre_quirks),
        cmocka_unit_test(test_pre_arbitrary_bytes),
        cmocka_unit_test(test_ignore_merges),
        cmocka_unit_test(test_unknown_pre),
        cmocka_unit_test(test_spm_no_space_prefix),
        cmocka_unit_test(test_phi3_rstrip),
        cmocka_unit_test(test_forced_control),
        cmocka_unit_test(test_end_of_generation),
        cmocka_unit_test(test_vocab_api),
        cmocka_unit_test(test_cli_tokenize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
