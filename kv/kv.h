/* kv/ - KV caches.  For now the contiguous per-sequence cache: one float
 * buffer per layer for K and one for V, [n_ctx][kv_dim] each, allocated
 * once at creation.  Bytes = 2 x layers x n_ctx x kv_dim x sizeof(float)
 * (the formula 2 x layers x kv_heads x head_dim x bytes per token). */
#ifndef KVANT_KV_H
#define KVANT_KV_H

#include "core/core.h"

typedef struct {
    int n_layers, n_ctx, kv_dim;
    int n_pos;     /* positions filled: 0 .. n_pos-1 */
    float *k, *v;  /* (layer, n_ctx, kv_dim) */
} kv_cache;

/* Allocates the whole cache; NULL + status on overflow / out of memory. */
kv_cache *kv_cache_new(int n_layers, int n_ctx, int kv_dim, kvant_status *st);
void kv_cache_free(kv_cache *c);
static inline void kv_cache_clear(kv_cache *c) { c->n_pos = 0; }
/* K / V rows of `layer` starting at position 0; row stride kv_dim floats */
static inline float *kv_k(const kv_cache *c, int layer) { return c->k + (size_t)layer * c->n_ctx * c->kv_dim; }
static inline float *kv_v(const kv_cache *c, int layer) { return c->v + (size_t)layer * c->n_ctx * c->kv_dim; }
/* bytes per cached token, in use, and reserved */
static inline size_t kv_bytes_per_token(const kv_cache *c) { return 2 * (size_t)c->n_layers * c->kv_dim * sizeof(float); }
static inline size_t kv_bytes_used(const kv_cache *c) { return kv_bytes_per_token(c) * (size_t)c->n_pos; }
static inline size_t kv_bytes_reserved(const kv_cache *c) { return kv_bytes_per_token(c) * (size_t)c->n_ctx; }

#endif
