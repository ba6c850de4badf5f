/* tok_helpers.h - the tokenizer tests' helpers (test_tok.c, test_tok_families.c):
 * encode into an array of the exact size (failing the test on out of memory),
 * decode by concatenating pieces, print ids.  Static: each test has its own. */
#ifndef KVANT_TESTS_TOK_HELPERS_H
#define KVANT_TESTS_TOK_HELPERS_H

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tok/tok.h"

/* Encodes into a malloc'd array (*n ids). */
static int32_t *encode(const tok *t, const char *s, size_t len, bool bos, bool special, int *n) {
    int need = tok_encode(t, s, len, bos, special, NULL, 0);
    if (need == INT_MIN) fail_msg("tok_encode: out of memory");
    if (need < 0) need = -need;
    int32_t *ids = malloc(((size_t)need + 1) * sizeof *ids);
    assert_non_null(ids);
    *n = tok_encode(t, s, len, bos, special, ids, need);
    assert_int_equal(*n, need);
    return ids;
}

/* Concatenated pieces (prev = the previous id, -1 first); malloc'd, NUL-terminated. */
static char *decode(const tok *t, const int32_t *ids, int n, size_t *len) {
    size_t cap = 64, pos = 0;
    char *out = malloc(cap);
    int max = tok_max_piece(t);
    for (int i = 0; i < n; i++) {
        while (cap - pos < (size_t)max + 1) out = realloc(out, cap *= 2);
        pos += (size_t)tok_decode_piece(t, i ? ids[i - 1] : -1, ids[i], out + pos, max);
    }
    out[pos] = 0;
    *len = pos;
    return out;
}

static void print_ids(const char *what, const int32_t *ids, int n) {
    char line[4096];
    int k = snprintf(line, sizeof line, "  %s:", what);
    for (int i = 0; i < n && k < (int)sizeof line - 16; i++) k += snprintf(line + k, sizeof line - k, " %d", ids[i]);
    print_message("%s\n", line);
}

/* Every vector of llama.cpp's file `rel` encodes to its ids and decodes back
 * to its text; prints each miss and the counts, then fails on any. */
static void check_vectors(const tok *t, const char *rel, int expect_n) {
    tok_vectors v;
    read_vectors(rel, &v);
    assert_int_equal(v.n, expect_n);
    int bad_ids = 0, bad_text = 0;
    for (int i = 0; i < v.n; i++) {
        int n;
        int32_t *ids = encode(t, v.inp[i], v.inp_len[i], false, false, &n);
        if (n != v.n_ids[i] || memcmp(ids, v.ids[i], (size_t)n * sizeof *ids) != 0) {
            print_message("%s #%d '%s': ids differ\n", rel, i, v.inp[i]);
            print_ids("want", v.ids[i], v.n_ids[i]);
            print_ids("got ", ids, n);
            bad_ids++;
        }
        size_t len;
        char *text = decode(t, ids, n, &len);
        if (len != v.inp_len[i] || memcmp(text, v.inp[i], len) != 0) {
            print_message("%s #%d '%s': decodes to '%s'\n", rel, i, v.inp[i], text);
            bad_text++;
        }
        free(text);
        free(ids);
    }
    print_message("%s: %d/%d vectors, %d/%d round trips\n", rel, v.n - bad_ids, v.n, v.n - bad_text, v.n);
    free_vectors(&v);
    assert_int_equal(bad_ids, 0);
    assert_int_equal(bad_text, 0);
}

#endif
