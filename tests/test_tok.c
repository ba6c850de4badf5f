/* test_tok.c - tokenizers against llama.cpp's vectors and llama2.c files.
 *
 * Vectors: ../shared/tokenizers/ggml-vocab-*.gguf.{inp,out}, read the way
 * llama.cpp's tests/test-tokenizer-0.cpp reads them: inputs separated by
 * "\n__ggml_vocab_test__\n", one line of ids per input, encoded with
 * add_special = false and parse_special = false. */
#define _GNU_SOURCE /* memmem, strndup */
#include "testutil.h"

#include "format/gguf.h"
#include "tok/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------- */

static tok *load_gguf_tok(const char *rel) {
    kvant_status st = {0};
    gguf_ctx *g = gguf_open(shared_path(rel), &st);
    if (!g) fail_msg("%s", st.msg);
    tok *t = tok_from_gguf(g, &st);
    gguf_close(g); /* the tokenizer keeps its own copies */
    if (!t) fail_msg("%s", st.msg);
    return t;
}

static tok *load_l2c_tok(const char *rel, int vocab) {
    kvant_status st = {0};
    tok *t = tok_from_llama2c(shared_path(rel), vocab, &st);
    if (!t) fail_msg("%s", st.msg);
    return t;
}

#include "tok_helpers.h"


/* ---- llama.cpp vectors ------------------------------------------------------- */

static void test_spm_vectors(void **state) {
    (void)state;
    tok *t = load_gguf_tok("tokenizers/ggml-vocab-llama-spm.gguf");
    check_vectors(t, "tokenizers/ggml-vocab-llama-spm.gguf", 46);
    tok_free(t);
}

static void test_gpt2_vectors(void **state) {
    (void)state;
    tok *t = load_gguf_tok("tokenizers/ggml-vocab-gpt-2.gguf");
    check_vectors(t, "tokenizers/ggml-vocab-gpt-2.gguf", 46);
    tok_free(t);
}

/* llama2.c's 32000-token tokenizer.bin is the same SentencePiece model: it
 * gives the GGUF's ids on every vector. */
static void test_llama2_bin_matches_gguf(void **state) {
    (void)state;
    tok *g = load_gguf_tok("tokenizers/ggml-vocab-llama-spm.gguf");
    tok *b = load_l2c_tok("tokenizers/llama2-tokenizer.bin", 32000);
    check_vectors(b, "tokenizers/ggml-vocab-llama-spm.gguf", 46);
    tok_vectors v;
    read_vectors("tokenizers/ggml-vocab-llama-spm.gguf", &v);
    for (int i = 0; i < v.n; i++) { /* with BOS and special parsing too */
        int n1, n2;
        int32_t *a = encode(g, v.inp[i], v.inp_len[i], true, true, &n1);
        int32_t *c = encode(b, v.inp[i], v.inp_len[i], true, true, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(a, c, (size_t)n1 * sizeof *a);
        free(a);
        free(c);
    }
    free_vectors(&v);
    assert_int_equal(tok_n_vocab(b), 32000);
    assert_int_equal(tok_bos(b), 1);
    assert_int_equal(tok_eos(b), 2);
    assert_string_equal(tok_text(b, 1), "<s>");
    assert_string_equal(tok_text(b, 29871), "\xe2\x96\x81");
    for (int id = 0; id < 32000; id++) {
        assert_string_equal(tok_text(b, id), tok_text(g, id));
        assert_int_equal(tok_token_type(b, id), tok_token_type(g, id));
    }
    tok_free(g);
    tok_free(b);
}

/* ---- stories260K: llama2.c tokenizer and its GGUF ----------------------------- */

static const char k_story[] =
    "Once upon a time, there was a little dog named Max. He liked to run in the park with his friend Sue.";

static void check_story(const tok *t) {
    char *json = read_file(shared_path("reference/llamacpp/stories260K-ids.json"), NULL);
    int32_t want[64];
    int nw = 0;
    for (char *p = strchr(json, '[') + 1, *e; nw < 64; p = e + (*e == ',')) {
        long x = strtol(p, &e, 10);
        if (e == p) break;
        want[nw++] = (int32_t)x;
    }
    free(json);
    assert_int_equal(nw, 35);
    assert_true(tok_add_bos(t));
    int n;
    int32_t *ids = encode(t, k_story, strlen(k_story), tok_add_bos(t), false, &n);
    assert_int_equal(n, nw);
    assert_memory_equal(ids, want, (size_t)n * sizeof *ids);
    size_t len;
    char *text = decode(t, ids, n, &len);
    assert_string_equal(text, k_story);
    free(text);
    free(ids);
}

static void test_stories_llama2c(void **state) {
    (void)state;
    tok *t = load_l2c_tok("models/tok512.bin", 512);
    assert_int_equal(tok_get_kind(t), TOK_SPM);
    assert_int_equal(tok_n_vocab(t), 512);
    check_story(t);
    tok_free(t);
}

static void test_stories_gguf(void **state) {
    (void)state;
    tok *t = load_gguf_tok("models/stories260K.gguf");
    check_story(t);
    tok_free(t);
}

/* ---- malformed tokenizer.bin ------------------------------------------------------ */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes bytes to a temp file, loads it, expects failure with code and a
 * message naming the file and containing `what`. */
static void expect_bad_bin(const char *name, const uint8_t *data, size_t n, int vocab, kvant_code code,
                           const char *what) {
    char path[4096];
    snprintf(path, sizeof path, "%s", tmp_path(name));
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    kvant_status st = {0};
    tok *t = tok_from_llama2c(path, vocab, &st);
    if (t) fail_msg("%s: loaded, expected '%s'", name, what);
    assert_int_equal(st.code, code);
    if (!strstr(st.msg, path) || !strstr(st.msg, what)) fail_msg("%s: message '%s'", name, st.msg);
    assert_null(strchr(st.msg, '\n'));
    remove(path);
}

static void test_llama2c_malformed(void **state) {
    (void)state;
    size_t size;
    uint8_t *good = (uint8_t *)read_file(shared_path("models/tok512.bin"), &size);
    uint8_t buf[64] = {0};

    expect_bad_bin("tok_empty.bin", buf, 0, 512, KVANT_ERR_FORMAT, "too short");
    expect_bad_bin("tok_short.bin", buf, 3, 512, KVANT_ERR_FORMAT, "too short");
    expect_bad_bin("tok_trunc.bin", good, 1000, 512, KVANT_ERR_FORMAT, "cannot hold 512 tokens");
    expect_bad_bin("tok_trunc1.bin", good, size, 600, KVANT_ERR_FORMAT, "truncated at token 512 of 600");
    expect_bad_bin("tok_trunc2.bin", good, size - 1, 512, KVANT_ERR_FORMAT, "runs past the end");
    /* one token whose length is huge / negative */
    put32(buf, 8);
    put32(buf + 4, 0);
    put32(buf + 8, 0x7fffffff);
    expect_bad_bin("tok_huge.bin", buf, 20, 1, KVANT_ERR_FORMAT, "runs past the end");
    put32(buf + 8, (uint32_t)-5);
    expect_bad_bin("tok_neg.bin", buf, 20, 1, KVANT_ERR_FORMAT, "negative length");
    put32(buf, (uint32_t)-1);
    expect_bad_bin("tok_negmax.bin", buf, 20, 1, KVANT_ERR_FORMAT, "max_token_length");
    /* a vocabulary the file cannot hold: refused before allocating for it */
    expect_bad_bin("tok_big_vocab.bin", good, size, 1 << 30, KVANT_ERR_FORMAT, "cannot hold");
    expect_bad_bin("tok_small_vocab.bin", good, size, 0, KVANT_ERR_ARG, "vocabulary size");
    free(good);

    kvant_status st = {0};
    assert_null(tok_from_llama2c(tmp_path("does-not-exist.bin"), 512, &st));
    assert_int_equal(st.code, KVANT_ERR_IO);
    assert_non_null(strstr(st.msg, "does-not-exist.bin"));
}

/* ---- special tokens, BOS, accessors, buffer sizes, decode rules ------------------- */

static void expect_ids(const tok *t, const char *s, bool bos, bool special, const int32_t *want, int nw) {
    int n;
    int32_t *ids = encode(t, s, strlen(s), bos, special, &n);
    if (n != nw || memcmp(ids, want, (size_t)n * sizeof *ids) != 0) {
        print_message("'%s' (bos %d, special %d)\n", s, bos, special);
        print_ids("want", want, nw);
        print_ids("got ", ids, n);
        fail();
    }
    free(ids);
}

static void test_spm_special(void **state) {
    (void)state;
    tok *t = load_gguf_tok("tokenizers/ggml-vocab-llama-spm.gguf");
    assert_int_equal(tok_get_kind(t), TOK_SPM);
    assert_int_equal(tok_n_vocab(t), 32000);
    assert_int_equal(tok_bos(t), 1);
    assert_int_equal(tok_eos(t), 2);
    assert_true(tok_add_bos(t));
    assert_int_equal(tok_token_type(t, 0), 2);
    assert_int_equal(tok_token_type(t, 1), 3);
    assert_int_equal(tok_token_type(t, 13), 6);
    assert_int_equal(tok_token_type(t, 15043), 1);
    assert_int_equal(tok_token_type(t, -1), 0);
    assert_int_equal(tok_find(t, "\xe2\x96\x81Hello", 8), 15043);
    assert_int_equal(tok_find(t, "no such token", 13), -1);
    assert_string_equal(tok_text(t, 15043), "\xe2\x96\x81Hello");
    assert_string_equal(tok_text(t, 32000), "");

    /* each text fragment after a special token gets the space prefix */
    expect_ids(t, "<s>Hello</s>", false, true, (int32_t[]){1, 15043, 2}, 3);
    expect_ids(t, "Hello world", true, false, (int32_t[]){1, 15043, 3186}, 3);
    expect_ids(t, "", true, false, (int32_t[]){1}, 1);
    expect_ids(t, "", false, false, (int32_t[]){0}, 0);
    /* without parse_special the same text is plain text */
    int n;
    int32_t *ids = encode(t, "<s>Hello</s>", 12, false, false, &n);
    assert_true(n > 3);
    for (int i = 0; i < n; i++) assert_true(ids[i] > 2);
    free(ids);

    /* buffer too small: -(needed), out untouched */
    int32_t out[2] = {-7, -7};
    assert_int_equal(tok_encode(t, "Hello world", 11, true, false, out, 2), -3);
    assert_int_equal(out[0], -7);
    assert_int_equal(tok_encode(t, "Hello world", 11, true, false, out, 0), -3);
    tok_free(t);
}

static void test_gpt2_special(void **state) {
    (void)state;
    tok *t = load_gguf_tok("tokenizers/ggml-vocab-gpt-2.gguf");
    assert_int_equal(tok_get_kind(t), TOK_GPT2);
    assert_int_equal(tok_n_vocab(t), 50257);
    assert_int_equal(tok_bos(t), 50256);
    assert_int_equal(tok_eos(t), 50256);
    assert_false(tok_add_bos(t));
    assert_string_equal(tok_text(t, 50256), "<|endoftext|>");
    expect_ids(t, "<|endoftext|> Hello", false, true, (int32_t[]){50256, 18435}, 2);
    expect_ids(t, "Hello<|endoftext|>", true, true, (int32_t[]){50256, 15496, 50256}, 3);
    int n;
    int32_t *ids = encode(t, "<|endoftext|>", 13, false, false, &n);
    assert_true(n > 1);
    for (int i = 0; i < n; i++) assert_int_not_equal(ids[i], 50256);
    free(ids);
    tok_free(t);
}

/* \s is Unicode-aware (PCRE2_UCP): U+00A0, U+3000, U+2003, U+0085 are
 * whitespace to the pre-tokenizer.  Ids from an independent reference:
 * Python's `regex` module with the same pattern plus OpenAI's encoder.py
 * BPE loop over this vocabulary and merge list. */
static void test_gpt2_unicode_space(void **state) {
    (void)state;
    tok *t = load_gguf_tok("tokenizers/ggml-vocab-gpt-2.gguf");
    expect_ids(t, "\xc2\xa0\xc2\xa0.", false, false, (int32_t[]){1849, 1849, 13}, 3);
    expect_ids(t, "x\xe3\x80\x80\xe3\x80\x80" "y\xc2\xa0" "z \xe2\x80\x83 w\xc2\x85" "v", false, false,
               (int32_t[]){87, 5099, 222, 5099, 222, 88, 1849, 89, 564, 225, 266, 126, 227, 85}, 14);
    tok_free(t);
}

static void expect_piece(const tok *t, int32_t prev, int32_t id, const char *want) {
    char buf[256];
    int n = tok_decode_piece(t, prev, id, buf, (int)sizeof buf);
    assert_int_equal(n, (int)strlen(want));
    assert_memory_equal(buf, want, (size_t)n);
}

static void test_decode_rules(void **state) {
    (void)state;
    tok *t = load_gguf_tok("tokenizers/ggml-vocab-llama-spm.gguf");
    expect_piece(t, -1, 15043, "Hello");  /* leading space dropped at the start */
    expect_piece(t, 1, 15043, "Hello");   /* ... and after BOS */
    expect_piece(t, 3186, 15043, " Hello");
    expect_piece(t, 15043, 3186, " world");
    expect_piece(t, 15043, 13, "\n");     /* <0x0A> */
    expect_piece(t, 15043, 1, "");        /* control */
    expect_piece(t, 15043, 2, "");
    expect_piece(t, 15043, 0, "");        /* unknown */
    expect_piece(t, 15043, 32000, "");    /* out of range */
    char buf[8];
    assert_int_equal(tok_decode_piece(t, 3186, 15043, buf, 3), 3); /* cut at cap */
    assert_memory_equal(buf, " He", 3);
    assert_true(tok_max_piece(t) >= 16);
    tok_free(t);

    t = load_gguf_tok("tokenizers/ggml-vocab-gpt-2.gguf");
    expect_piece(t, -1, 995, " world");   /* no space rule for GPT-2 */
    expect_piece(t, -1, 198, "\n");       /* "Ċ" */
    expect_piece(t, -1, 220, " ");        /* "Ġ" */
    expect_piece(t, -1, 50256, "");
    tok_free(t);
}

/* Bytes that are not valid UTF-8 survive a round trip: SPM falls back to
 * byte tokens, GPT-2 is byte-level.  (SPM cannot round-trip a broken UTF-8
 * sequence followed within 3 bytes by a space: the space is escaped to
 * U+2581 first and its bytes end up in the byte tokens; llama.cpp alike.) */
static void check_roundtrip(const tok *t, const char *s, size_t len) {
    int n;
    int32_t *ids = encode(t, s, len, true, false, &n);
    size_t got;
    char *text = decode(t, ids, n, &got);
    assert_int_equal(got, len);
    assert_memory_equal(text, s, len);
    free(text);
    free(ids);
}

static void test_invalid_utf8(void **state) {
    (void)state;
    static const char spm_s[] = "ab\xff" "cdef\x80gh \xc3\xa4x\xe2\x82";
    static const char gpt_s[] = "a\xff b\xc3 \xe2\x82 x\x80\x80 \xf0\x9f";
    tok *t = load_gguf_tok("tokenizers/ggml-vocab-llama-spm.gguf");
    check_roundtrip(t, spm_s, sizeof spm_s - 1);
    tok_free(t);
    t = load_gguf_tok("tokenizers/ggml-vocab-gpt-2.gguf");
    check_roundtrip(t, gpt_s, sizeof gpt_s - 1);
    check_roundtrip(t, spm_s, sizeof spm_s - 1);
    tok_free(t);
}

/* ---- synthetic vocabularies: merge order, ties, load errors ------------------------ */

typedef struct {
    const char *model, *pre;
    int n;
    const char *const *tokens;
    const float *scores;
    int n_merges;
    const char *const *merges;
} synth;

static tok *load_synth(const synth *s, kvant_status *st) {
    gguf_writer *w = gguf_writer_new();
    if (s->model) gguf_writer_add_str(w, "tokenizer.ggml.model", s->model);
    if (s->pre) gguf_writer_add_str(w, "tokenizer.ggml.pre", s->pre);
    if (s->tokens) gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", s->tokens, (uint64_t)s->n);
    if (s->scores) gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, s->scores, (uint64_t)s->n);
    if (s->merges) gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", s->merges, (uint64_t)s->n_merges);
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

static void test_spm_ties(void **state) {
    (void)state;
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "ab", "ba", "<0x61>"};
    float eq[] = {0, 0, 0, -1, -1, -1, -2, -2, 0};
    float ba_wins[] = {0, 0, 0, -1, -1, -1, -3, -2, 0};
    kvant_status st = {0};
    synth s = {"llama", NULL, 9, toks, eq, 0, NULL};
    tok *t = load_synth(&s, &st);
    assert_non_null(t);
    /* no token types in the file: byte tokens by their spelling */
    assert_int_equal(tok_token_type(t, 8), 6);
    expect_ids(t, "aba", false, false, (int32_t[]){3, 6, 4}, 3); /* equal scores: leftmost pair */
    expect_ids(t, "abab", false, false, (int32_t[]){3, 6, 6}, 3);
    tok_free(t);
    s.scores = ba_wins;
    t = load_synth(&s, &st);
    expect_ids(t, "aba", false, false, (int32_t[]){3, 4, 7}, 3); /* higher score first */
    expect_ids(t, "c", false, false, (int32_t[]){3, 0}, 2);     /* no byte token for 'c': <unk> */
    tok_free(t);
}

static void test_bpe_ranks(void **state) {
    (void)state;
    static const char *const toks[] = {"a", "b", "ab", "ba", "\xc4\xa0", ("\xc4\xa0" "a")};
    static const char *const m1[] = {"a b", "b a", "\xc4\xa0 a"};
    static const char *const m2[] = {"b a", "a b"};
    kvant_status st = {0};
    synth s = {"gpt2", "gpt-2", 6, toks, NULL, 3, m1};
    tok *t = load_synth(&s, &st);
    assert_non_null(t);
    expect_ids(t, "aba", false, false, (int32_t[]){2, 0}, 2);
    expect_ids(t, "abab a", false, false, (int32_t[]){2, 2, 5}, 3); /* " a" is one regex word */
    tok_free(t);
    s.merges = m2;
    s.n_merges = 2;
    t = load_synth(&s, &st);
    expect_ids(t, "aba", false, false, (int32_t[]){0, 3}, 2);
    tok_free(t);
}

static void test_gguf_errors(void **state) {
    (void)state;
    static const char *const toks[] = {"a", "b"};
    static const char *const merges[] = {"a b"};
    static const float one[] = {0};
    kvant_status st = {0};
    struct {
        synth s;
        kvant_code code;
        const char *what;
    } cases[] = {
        {{NULL, NULL, 2, toks, NULL, 0, NULL}, KVANT_ERR_FORMAT, "tokenizer.ggml.model"},
        {{"bert", NULL, 2, toks, NULL, 0, NULL}, KVANT_ERR_UNSUPPORTED, "bert"},
        {{"llama", NULL, 0, NULL, NULL, 0, NULL}, KVANT_ERR_FORMAT, "tokenizer.ggml.tokens"},
        {{"gpt2", NULL, 2, toks, NULL, 0, NULL}, KVANT_ERR_FORMAT, "merges"},
        {{"gpt2", "no-such-pre", 2, toks, NULL, 1, merges}, KVANT_ERR_UNSUPPORTED, "pre-tokenizer 'no-such-pre'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tok *t = load_synth(&cases[i].s, &st);
        if (t) fail_msg("case %zu loaded", i);
        assert_int_equal(st.code, cases[i].code);
        if (!strstr(st.msg, cases[i].what) || !strstr(st.msg, "synthetic.gguf"))
            fail_msg("case %zu: '%s'", i, st.msg);
    }
    /* scores shorter than the vocabulary */
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, 2);
    gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, one, 1);
    uint8_t *data;
    size_t size;
    assert_int_equal(gguf_writer_write_mem(w, &data, &size, &st), KVANT_OK);
    gguf_writer_free(w);
    gguf_ctx *g = gguf_open_mem(data, size, "synthetic.gguf", &st);
    assert_non_null(g);
    assert_null(tok_from_gguf(g, &st));
    assert_int_equal(st.code, KVANT_ERR_FORMAT);
    assert_non_null(strstr(st.msg, "scores"));
    gguf_close(g);
    free(data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_vectors),
        cmocka_unit_test(test_gpt2_vectors),
        cmocka_unit_test(test_llama2_bin_matches_gguf),
        cmocka_unit_test(test_stories_llama2c),
        cmocka_unit_test(test_stories_gguf),
        cmocka_unit_test(test_llama2c_malformed),
        cmocka_unit_test(test_spm_special),
        cmocka_unit_test(test_gpt2_special),
        cmocka_unit_test(test_gpt2_unicode_space),
        cmocka_unit_test(test_decode_rules),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_spm_ties),
        cmocka_unit_test(test_bpe_ranks),
        cmocka_unit_test(test_gguf_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
