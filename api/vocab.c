/* api/vocab.c - a tokenizer opened from a GGUF without its weights
 * (include/kvant_infer.h, "vocabulary only"). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kvant.h"
#include "core/core.h"
#include "format/gguf.h"
#include "tok/tok.h"

struct kvant_vocab {
    tok *t;
};

kvant_vocab *kvant_vocab_open(const char *path, kvant_status *st) {
    if (!path) {
        core_fail(st, KVANT_ERR_ARG, "no vocabulary file given");
        return NULL;
    }
    gguf_ctx *g = gguf_open(path, st);
    if (!g) return NULL;
    tok *t = tok_from_gguf(g, st); /* copies what it keeps: the file can go */
    gguf_close(g);
    if (!t) return NULL;
    kvant_vocab *v = malloc(sizeof *v);
    if (!v) {
        tok_free(t);
        core_fail(st, KVANT_ERR_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    v->t = t;
    core_ok(st);
    return v;
}

void kvant_vocab_free(kvant_vocab *v) {
    if (!v) return;
    tok_free(v->t);
    free(v);
}

int kvant_vocab_n_tokens(const kvant_vocab *v) { return tok_n_vocab(v->t); }

int kvant_vocab_tokenize(const kvant_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                         int32_t *tokens, int max_tokens) {
    if (!text) len = 0;
    if (max_tokens < 0) max_tokens = 0;
    const bool eos = add_special && tok_add_eos(v->t);
    /* room for the EOS is kept back; tok_encode leaves tokens untouched when short */
    int n = tok_encode(v->t, text, len, add_special && tok_add_bos(v->t), parse_special, tokens,
                       eos && max_tokens > 0 ? max_tokens - 1 : max_tokens);
    if (n == INT_MIN) return INT32_MIN;
    if (!eos) return n;
    if (n < 0) return n - 1; /* -(needed) without the EOS, one more with it */
    if (n + 1 > max_tokens) return -(n + 1);
    tokens[n] = tok_eos(v->t);
    return n + 1;
}

int kvant_vocab_piece(const kvant_vocab *v, int32_t token, bool special, char *buf, int cap) {
    return tok_piece(v->t, token, special, buf, cap);
}
