/* contiguous.c - the contiguous KV cache (the reference the paged cache
 * will be tested against). */
#include <stdlib.h>

#include "kv/kv.h"

kv_cache *kv_cache_new(int n_layers, int n_ctx, int kv_dim, kvant_status *st) {
    uint64_t per_layer, total;
    if (n_layers <= 0 || n_ctx <= 0 || kv_dim <= 0 ||
        !core_mul_ok((uint64_t)n_ctx, (uint64_t)kv_dim, &per_layer) ||
        !core_mul_ok(per_layer, (uint64_t)n_layers * sizeof(float), &total) || total > ((uint64_t)1 << 40)) {
        core_fail(st, KVANT_ERR_NOMEM, "KV cache of %d layers x %d positions x %d floats is too large",
                  n_layers, n_ctx, kv_dim);
        return NULL;
    }
    kv_cache *c = calloc(1, sizeof *c);
    if (c) {
        c->k = malloc((size_t)total);
        c->v = malloc((size_t)total);
    }
    if (!c || !c->k || !c->v) {
        kv_cache_free(c);
        core_fail(st, KVANT_ERR_NOMEM, "cannot allocate a KV cache of %.1f MiB", 2.0 * (double)total / (1 << 20));
        return NULL;
    }
    c->n_layers = n_layers;
    c->n_ctx = n_ctx;
    c->kv_dim = kv_dim;
    return c;
}

void kv_cache_free(kv_cache *c) {
    if (!c) return;
    free(c->k);
    free(c->v);
    free(c);
}
