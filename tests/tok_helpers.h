/* tok_helpers.h - the tokenizer tests' helpers (test_tok.c, test_tok_families.c):
 * encode into an array of the exact size (failing the test on out of memory),
 * decode by concatenating pieces, print ids.  Static: each test has its own. */
#ifndef KVANT_TESTS_TOK_HELPERS_H
#define KVANT_TESTS_TOK_HELPERS_H

#include <limits.h>
#include <stdlib.h>

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

#endif
