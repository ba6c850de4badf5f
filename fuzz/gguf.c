/* gguf.c - fuzz harness: the GGUF reader and the model loader on top of it.
 * Any bytes are opened as a GGUF in memory (header, metadata, tensor infos,
 * data extents: format/gguf.c); every key, value and tensor the reader
 * accepted is read back through the accessors, and when it opened, the
 * model loader (model/load_gguf.c: architecture, shapes, types, tokenizer)
 * builds a model from it and frees it.  Inputs must be refused with a
 * status, never read out of bounds, leak, or allocate past the limits. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "format/gguf.h"
#include "model/model.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvant_status st = {0};
    gguf_ctx *g = gguf_open_mem(data, size, "fuzz", &st);
    if (!g) return 0;
    walk(g);
    gguf_close(g);

    model *m = calloc(1, sizeof *m);
    if (!m) return 0;
    model_load_gguf_mem(m, data, size, "fuzz", &st); /* refused or loaded: either way closed */
    model_close(m);
    return 0;
}
