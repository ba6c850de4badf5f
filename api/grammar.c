/* grammar.c - structured outputs in the public API (include/kvant_infer.h,
 * "structured outputs") over grammar/: a kvant_grammar is a compiled grammar
 * (GBNF, a JSON Schema, or any JSON object) plus the model's vocabulary as
 * byte strings, which the engine masks the logits with.  The vocabulary is
 * built once per model, on the first grammar; handles are reference counted
 * so a request keeps its grammar after the caller frees its handle. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "grammar/grammar.h"
#include "tok/tok.h"

struct kvant_grammar {
    grammar *g;
    const grammar_vocab *v;    /* the model's (it outlives every grammar of it) */
    _Atomic int refs;
};

/* the model's vocabulary: each token's bytes (control tokens none, so never
 * allowed), end-of-generation tokens allowed only where the grammar ends */
static const grammar_vocab *model_vocab(kvant_model *km, kvant_status *st) {
    pthread_mutex_lock(&km->gv_mu);
    if (!km->gv) {
        const tok *t = km->m->tok;
        const int n = tok_n_vocab(t), cap = tok_max_piece(t) + 8;
        uint8_t **bytes = calloc((size_t)n, sizeof *bytes);
        int *lens = calloc((size_t)n, sizeof *lens);
        int32_t *eog = malloc((size_t)n * sizeof *eog);
        char *buf = malloc((size_t)cap);
        int n_eog = 0;
        bool ok = bytes && lens && eog && buf;
        for (int i = 0; ok && i < n; i++) {
            if (tok_is_eog(t, i)) eog[n_eog++] = i;
            const int k = tok_piece(t, i, false, buf, cap);
            if (k <= 0) continue;
            if (!(bytes[i] = malloc((size_t)k))) ok = false;
            else memcpy(bytes[i], buf, (size_t)k), lens[i] = k;
        }
        if (ok) km->gv = grammar_vocab_new((const uint8_t *const *)bytes, lens, n, eog, n_eog, st);
        else core_fail(st, KVANT_ERR_NOMEM, "out of memory building the grammar vocabulary");
        for (int i = 0; bytes && i < n; i++) free(bytes[i]);
        free(bytes), free(lens), free(eog), free(buf);
    }
    const grammar_vocab *v = km->gv;
    pthread_mutex_unlock(&km->gv_mu);
    return v;
}

void api_grammar_vocab_free(kvant_model *km) {
    grammar_vocab_free(km->gv);
    km->gv = NULL;
}

kvant_grammar *kvant_grammar_new(kvant_model *km, kvant_grammar_kind kind, const char *text, size_t len,
                                 kvant_status *st) {
    const grammar_vocab *v = model_vocab(km, st);
    if (!v) return NULL;
    grammar *g = NULL;
    switch (kind) {
    case KVANT_GRAMMAR_GBNF: g = grammar_from_gbnf(text ? text : "", text ? len : 0, st); break;
    case KVANT_GRAMMAR_JSON_SCHEMA: g = grammar_from_json_schema(text, text ? len : 0, st); break;
    case KVANT_GRAMMAR_JSON_OBJECT: g = grammar_json_object(st); break;
    default: core_fail(st, KVANT_ERR_ARG, "grammar kind %d is none of kvant_grammar_kind", (int)kind); return NULL;
    }
    if (!g) return NULL;
    kvant_grammar *h = malloc(sizeof *h);
    if (!h) {
        grammar_free(g);
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    h->g = g;
    h->v = v;
    atomic_init(&h->refs, 1);
    core_ok(st);
    return h;
}

void api_grammar_ref(kvant_grammar *g) { atomic_fetch_add(&g->refs, 1); }

void api_grammar_release(void *p) {
    kvant_grammar *g = p;
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    grammar_free(g->g);
    free(g);
}

void kvant_grammar_free(kvant_grammar *g) { api_grammar_release(g); }

const struct grammar *api_grammar_of(const kvant_grammar *g) { return g->g; }
const struct grammar_vocab *api_grammar_vocab_of(const kvant_grammar *g) { return g->v; }

char *kvant_grammar_schema_gbnf(const char *schema_json, size_t len, kvant_status *st) {
    return grammar_schema_to_gbnf(schema_json, len, st);
}
