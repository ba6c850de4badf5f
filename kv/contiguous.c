/* contiguous.c - the contiguous KV cache (the reference the paged and
 * streaming caches are tested against): per layer, K rows then V rows for
 * n_ctx positions, allocated once. */
#include <stdlib.h>

#include "kernels/types.h"
#include "kv/kv.h"

typedef struct {
    kv_store base;
    uint8_t *mem;            /* (layer, K|V, n_ctx, row_bytes) */
    size_t layer_bytes;      /* 2 * n_ctx * row_bytes */
} contig;

kvant_code kv_check_type(int type, int kv_dim, kvant_status *st) {
    if (type != KT_F32 && type != KT_F16 && type != KT_Q8_0)
        return core_fail(st, KVANT_ERR_ARG, "KV cache type must be f32, f16 or q8_0 (got %s)", kern_type_name(type));
    if (kern_row_bytes(type, kv_dim) == 0)
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "KV rows of %d elements do not divide %s blocks", kv_dim,
                         kern_type_name(type));
    return KVANT_OK;
}

static kvant_code c_reserve(kv_store *s, int n, kvant_status *st) {
    if ((int64_t)s->n_pos + n > s->capacity)
        return core_fail(st, KVANT_ERR_FULL, "context full: %d cached + %d new tokens > %d positions", s->n_pos, n,
                         s->capacity);
    return KVANT_OK;
}

static size_t c_row(kv_store *s, int layer, int pos, uint8_t **k, uint8_t **v) {
    contig *c = (contig *)s;
    CORE_ASSERT(pos >= 0 && pos < s->capacity);
    uint8_t *base = c->mem + (size_t)layer * c->layer_bytes;
    *k = base + (size_t)pos * s->row_bytes;
    *v = base + ((size_t)s->capacity + (size_t)pos) * s->row_bytes;
    return 0; /* rows of all heads */
}

static void c_view(kv_store *s, int layer, int n_pos, kern_kv_view *out) {
    contig *c = (contig *)s;
    uint8_t *base = c->mem + (size_t)layer * c->layer_bytes;
    *out = (kern_kv_view){.k_base = base, .v_base = base + (size_t)s->capacity * s->row_bytes,
                          .block_stride = (size_t)s->capacity * s->row_bytes, .block_table = NULL,
                          .block_size = s->capacity, .type = s->type, .row_bytes = s->row_bytes, .n_pos = n_pos,
                          .rope_k = NULL};
}

static void c_commit(kv_store *s, const int32_t *tokens, int n) {
    (void)tokens;
    s->n_pos += n;
    s->total_tokens += n;
}

static void c_clear(kv_store *s) { s->n_pos = 0; }
static int c_truncate(kv_store *s, int len) { return s->n_pos = len < s->n_pos ? len : s->n_pos; }

static void c_destroy(kv_store *s) {
    contig *c = (contig *)s;
    free(c->mem);
    free(c);
}

static const kv_store_ops k_contig_ops = {c_reserve, c_row, c_view, c_commit, c_clear, c_destroy, NULL, NULL, NULL,
                                          c_truncate};

kv_store *kv_contiguous_new(int n_layers, int n_ctx, int kv_dim, int type, kvant_status *st) {
    if (kv_check_type(type, kv_dim, st)) return NULL;
    const size_t row = kern_row_bytes(type, kv_dim);
    uint64_t layer_bytes, total;
    if (n_layers <= 0 || n_ctx <= 0 || !core_mul_ok((uint64_t)n_ctx * 2, row, &layer_bytes) ||
        !core_mul_ok(layer_bytes, (uint64_t)n_layers, &total) || total > ((uint64_t)1 << 40)) {
        core_fail(st, KVANT_ERR_NOMEM, "KV cache of %d layers x %d positions is too large", n_layers, n_ctx);
        return NULL;
    }
    contig *c = calloc(1, sizeof *c);
    if (c) c->mem = malloc((size_t)total);
    if (!c || !c->mem) {
        free(c);
        core_fail(st, KVANT_ERR_NOMEM, "cannot allocate a KV cache of %.1f MiB", (double)total / (1 << 20));
        return NULL;
    }
    c->layer_bytes = (size_t)layer_bytes;
    c->base = (kv_store){.ops = &k_contig_ops, .type = type, .n_layers = n_layers, .kv_dim = kv_dim,
                         .row_bytes = row, .capacity = n_ctx, .max_chunk = n_ctx};
    return &c->base;
}

size_t kv_reserved_bytes(const kv_store *s) { return kv_bytes_per_token(s) * (size_t)s->capacity; }
