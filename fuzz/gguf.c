/* gguf.c - fuzz harness: the GGUF reader and the model loader on top of it.
 * Any bytes are opened as a GGUF in memory (header, metadata, tensor infos,
 * data extents: format/gguf.c); every key, value and tensor the reader
 * accepted is read back through the accessors, and when it opened, the
 * model loader (model/load_gguf.c: architecture, shapes, types, tokenizer)
 * builds a model from it and frees it.  Any file that opens also goes to
 * the tokenizer loader on its own (tok/load.c: vocabulary-only files, and
 * vocabularies of models the loader refuses for other reasons), which then
 * encodes and decodes a fixed text.  Inputs must be refused with a status,
 * never read out of bounds, leak, or allocate past the limits. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "format/gguf.h"
#include "model/model.h"
#include "tok/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(const gguf_ctx *g) {
    volatile uint64_t sink = gguf_version(g) + gguf_alignment(g) + gguf_data_offset(g);
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        sink += strlen(key);
        const gguf_value *v = gguf_kv_value(g, i);
        if (gguf_find(g, key) == NULL) abort(); /* a listed key must be found */
        sink += (uint64_t)strlen(gguf_vtype_name(v->type));
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (gguf_find_tensor(g, t->name) == NULL) abort();
    }
    (void)sink;
}

/* a hostile vocabulary must still give ids inside it and pieces within tok_max_piece */
static void use_tokenizer(const tok *t) {
    static const char text[] = "Hello w\xc3\xb6rld <s></s><|endoftext|> \xff\xe2\x82 123\n\tx";
    const int V = tok_n_vocab(t), max = tok_max_piece(t);
    int32_t ids[256];
    char *piece = malloc((size_t)max + 1);
    if (!piece) return;
    for (int mode = 0; mode < 2; mode++) {
        int n = tok_encode(t, text, sizeof text - 1, mode, mode, ids, 256);
        if (n == INT_MIN) continue; /* out of memory */
        if (n < 0) abort(); /* 50 bytes give at most 3 tokens a byte (a space as U+2581 in byte tokens) */
        for (int i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= V) abort();
            if (tok_decode_piece(t, i ? ids[i - 1] : -1, ids[i], piece, max) > max) abort();
            int k = tok_piece(t, ids[i], mode, piece, max);
            if (k > max) abort();
        }
    }
    (void)tok_is_eog(t, 0), (void)tok_bos(t), (void)tok_eos(t);
    free(piece);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvant_status st = {0};
    gguf_ctx *g = gguf_open_mem(data, size, "fuzz", &st);
    if (!g) return 0;
    walk(g);
    tok *t = tok_from_gguf(g, &st);
    if (t) {
        use_tokenizer(t);
        tok_free(t);
    }
    gguf_close(g);

    model *m = calloc(1, sizeof *m);
    if (!m) return 0;
    model_load_gguf_mem(m, data, size, "fuzz", &st); /* refused or loaded: either way closed */
    model_close(m);
    return 0;
}
