/* streaming.c - StreamingLLM's cache: attention sinks + a sliding window.
 *
 * Capacity C = n_sink + n_window slots per layer.  Cache index i (= RoPE
 * position, since K is stored before RoPE and rotated on read) maps to a
 * slot through slot_of[i]; the view uses block_size 1 with slot_of as its
 * block table.  When a reserve would overflow C, the oldest window entries
 * (cache indices n_sink ..) are dropped: the table shifts left by the
 * number dropped and their slots are reused for the new rows.  Memory and
 * work per token stay constant however long generation runs. */
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "kv/kv.h"

typedef struct {
    kv_store base;
    int n_sink, n_window;
    uint8_t *mem;          /* (layer, K|V, C, row_bytes) */
    size_t layer_bytes;
    int32_t *slot_of;      /* [C]: cache index -> slot */
    int32_t *spare;        /* [C]: scratch for freed slots */
} stream;

static kvant_code s_reserve(kv_store *s, int n, kvant_status *st) {
    stream *m = (stream *)s;
    if (n > m->n_window)
        return core_fail(st, KVANT_ERR_ARG, "streaming cache: %d new tokens exceed the window of %d", n, m->n_window);
    const int over = s->n_pos + n - s->capacity;
    if (over <= 0) return KVANT_OK;
    /* drop the `over` oldest window entries; their slots go to the end */
    const int first = m->n_sink, keep = s->n_pos - first - over;
    memcpy(m->spare, m->slot_of + first, sizeof(int32_t) * (size_t)over);
    memmove(m->slot_of + first, m->slot_of + first + over, sizeof(int32_t) * (size_t)keep);
    memcpy(m->slot_of + first + keep, m->spare, sizeof(int32_t) * (size_t)over);
    s->n_pos -= over;
    s->evicted += over;
    return KVANT_OK;
}

static size_t s_row(kv_store *s, int layer, int pos, uint8_t **k, uint8_t **v) {
    stream *m = (stream *)s;
    CORE_ASSERT(pos >= 0 && pos < s->capacity);
    uint8_t *base = m->mem + (size_t)layer * m->layer_bytes;
    const size_t slot = (size_t)m->slot_of[pos];
    *k = base + slot * s->row_bytes;
    *v = base + ((size_t)s->capacity + slot) * s->row_bytes;
    return 0; /* rows of all heads */
}

static void s_view(kv_store *s, int layer, int n_pos, kern_kv_view *out) {
    stream *m = (stream *)s;
    uint8_t *base = m->mem + (size_t)layer * m->layer_bytes;
    *out = (kern_kv_view){.k_base = base, .v_base = base + (size_t)s->capacity * s->row_bytes,
                          .block_stride = s->row_bytes, .block_table = m->slot_of, .block_size = 1,
                          .type = s->type, .row_bytes = s->row_bytes, .n_pos = n_pos, .rope_k = NULL};
    /* rope_k is filled by the caller, who knows the model's RoPE */
}

static void s_commit(kv_store *s, const int32_t *tokens, int n) {
    (void)tokens;
    s->n_pos += n;
    s->total_tokens += n;
}

static void s_clear(kv_store *s) {
    stream *m = (stream *)s;
    s->n_pos = 0;
    for (int i = 0; i < s->capacity; i++) m->slot_of[i] = i;
}

static void s_destroy(kv_store *s) {
    stream *m = (stream *)s;
    free(m->mem);
    free(m->slot_of);
    free(m->spare);
    free(m);
}

static const kv_store_ops k_stream_ops = {s_reserve, s_row, s_view, s_commit, s_clear, s_destroy, NULL, NULL};

kv_store *kv_streaming_new(int n_layers, int n_sink, int n_window, int kv_dim, int type, kvant_status *st) {
    if (kv_check_type(type, kv_dim, st)) return NULL;
    if (n_sink < 0 || n_window < 1 || n_sink > (1 << 20) || n_window > (1 << 22)) {
        core_fail(st, KVANT_ERR_ARG, "streaming cache: need sink >= 0 and window >= 1 (got %d, %d)", n_sink, n_window);
        return NULL;
    }
    const int C = n_sink + n_window;
    const size_t row = kern_row_bytes(type, kv_dim);
    stream *m = calloc(1, sizeof *m);
    if (m) {
        m->layer_bytes = 2 * (size_t)C * row;
        m->mem = malloc(m->layer_bytes * (size_t)n_layers);
        m->slot_of = malloc(sizeof(int32_t) * (size_t)C);
        m->spare = malloc(sizeof(int32_t) * (size_t)C);
    }
    if (!m || !m->mem || !m->slot_of || !m->spare) {
        if (m) { free(m->mem); free(m->slot_of); free(m->spare); free(m); }
        core_fail(st, KVANT_ERR_NOMEM, "cannot allocate a streaming KV cache of %d positions", C);
        return NULL;
    }
    m->n_sink = n_sink;
    m->n_window = n_window;
    m->base = (kv_store){.ops = &k_stream_ops, .type = type, .n_layers = n_layers, .kv_dim = kv_dim,
                         .row_bytes = row, .capacity = C, .max_chunk = n_window, .rope_on_read = true};
    s_clear(&m->base);
    return &m->base;
}
