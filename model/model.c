/* model.c - open / close a model and validate its config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

model *model_open(const char *path, const char *tokenizer_path, int n_threads, kvant_status *st) {
    model *m = calloc(1, sizeof *m);
    if (!m) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    /* choose the loader by the file's first four bytes */
    FILE *f = fopen(path, "rb");
    if (!f) {
        free(m);
        core_fail(st, KVANT_ERR_IO, "%s: cannot open", path);
        return NULL;
    }
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    kvant_code rc;
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) rc = model_load_gguf(m, path, st);
    else rc = model_load_llama2c(m, path, tokenizer_path, st);
    if (rc == KVANT_OK) {
        m->pool = core_pool_new(n_threads > 0 ? n_threads : core_cpu_count());
        if (!m->pool) rc = core_fail(st, KVANT_ERR_NOMEM, "cannot start threads");
    }
    if (rc != KVANT_OK) {
        model_close(m);
        return NULL;
    }
    return m;
}

void model_close(model *m) {
    if (!m) return;
    core_pool_free(m->pool);
    tok_free(m->tok);
    gguf_close(m->gguf);
    core_unmap(&m->map);
    free(m->owned);
    for (int i = 0; i < m->n_packed; i++) free(m->packed[i]);
    free(m->packed);
    free(m->layers);
    free(m->tensors);
    free(m);
}

/* Limits keep a hostile header from asking for absurd buffers: the largest
 * real llama models stay far inside them. */
kvant_code model_check_config(const model_config *c, const char *path, kvant_status *st) {
#define BAD(...) return core_fail(st, KVANT_ERR_FORMAT, __VA_ARGS__)
    if (c->dim <= 0 || c->dim > (1 << 16)) BAD("%s: embedding size %d out of range (1..65536)", path, c->dim);
    if (c->hidden_dim <= 0 || c->hidden_dim > (1 << 18)) BAD("%s: FFN size %d out of range", path, c->hidden_dim);
    if (c->n_layers <= 0 || c->n_layers > 1024) BAD("%s: layer count %d out of range (1..1024)", path, c->n_layers);
    if (c->n_heads <= 0 || c->n_heads > 1024) BAD("%s: head count %d out of range", path, c->n_heads);
    if (c->n_kv_heads <= 0 || c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads)
        BAD("%s: KV head count %d must divide the head count %d", path, c->n_kv_heads, c->n_heads);
    if (c->head_dim <= 0 || c->head_dim > 1024 || c->head_dim % 2)
        BAD("%s: head dimension %d out of range (even, 2..1024)", path, c->head_dim);
    if (c->rope_dim <= 0 || c->rope_dim > c->head_dim || c->rope_dim % 2)
        BAD("%s: rope dimension %d must be even and <= head dimension %d", path, c->rope_dim, c->head_dim);
    if (c->vocab_size <= 0 || c->vocab_size > (1 << 22)) BAD("%s: vocabulary size %d out of range", path, c->vocab_size);
    if (c->n_ctx_train <= 0 || c->n_ctx_train > (1 << 22)) BAD("%s: context length %d out of range", path, c->n_ctx_train);
    if (!(c->norm_eps > 0 && c->norm_eps < 1)) BAD("%s: RMSNorm epsilon %g out of range", path, c->norm_eps);
    if (!(c->rope_base > 1 && c->rope_base < 1e12f)) BAD("%s: rope base %g out of range", path, c->rope_base);
#undef BAD
    return KVANT_OK;
}
