/* tok/map.c - the string hash table (vocabulary text -> id, merge pair ->
 * rank) and the growable id vector the encoders append to. */
#include "tok/tok_impl.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a over a then b, finished with a 64-bit mixer so that linear probing
 * on the low bits sees well-spread values. */
static uint64_t pair_hash(const char *a, size_t a_len, const char *b, size_t b_len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < a_len; i++) h = (h ^ (uint8_t)a[i]) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull; /* separates ("ab","c") from ("a","bc") a little */
    for (size_t i = 0; i < b_len; i++) h = (h ^ (uint8_t)b[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

bool tok_map_init(tok_map *m, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n + 1) cap *= 2; /* load factor <= 1/2 */
    m->slots = malloc(cap * sizeof *m->slots);
    m->mask = cap - 1;
    if (!m->slots) return false;
    for (uint64_t i = 0; i < cap; i++) m->slots[i].value = -1;
    return true;
}

void tok_map_free(tok_map *m) {
    free(m->slots);
    m->slots = NULL;
    m->mask = 0;
}

static bool slot_is(const tok_slot *s, const char *blob, const char *a, size_t a_len,
                    const char *b, size_t b_len) {
    return s->a_len == a_len && s->b_len == b_len && memcmp(blob + s->a_off, a, a_len) == 0 &&
           memcmp(blob + s->b_off, b, b_len) == 0;
}

void tok_map_put(tok_map *m, const char *blob, uint32_t a_off, uint32_t a_len,
                 uint32_t b_off, uint32_t b_len, int32_t value) {
    const char *a = blob + a_off, *b = blob + b_off;
    uint64_t i = pair_hash(a, a_len, b, b_len) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        tok_slot *s = &m->slots[i];
        if (s->value < 0) {
            *s = (tok_slot){a_off, a_len, b_off, b_len, value};
            return;
        }
        if (slot_is(s, blob, a, a_len, b, b_len)) return; /* first one wins */
    }
}

int32_t tok_map_get(const tok_map *m, const char *blob, const char *a, size_t a_len,
                    const char *b, size_t b_len) {
    if (!m->slots) return -1;
    uint64_t i = pair_hash(a, a_len, b, b_len) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        const tok_slot *s = &m->slots[i];
        if (s->value < 0) return -1;
        if (slot_is(s, blob, a, a_len, b, b_len)) return s->value;
    }
}

void tok_ids_push(tok_ids *v, int32_t id) {
    if (v->oom) return;
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap : 64;
        if (cap > (1 << 29)) { /* the count must stay an int */
            v->oom = true;
            return;
        }
        int32_t *d = realloc(v->d, (size_t)cap * 2 * sizeof *d);
        if (!d) {
            v->oom = true;
            return;
        }
        v->d = d;
        v->cap = cap * 2;
    }
    v->d[v->n++] = id;
}

void tok_u32v_push(tok_u32v *v, uint32_t x) {
    if (v->oom) return;
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 64;
        uint32_t *d = realloc(v->d, cap * sizeof *d);
        if (!d) {
            v->oom = true;
            return;
        }
        v->d = d;
        v->cap = cap;
    }
    v->d[v->n++] = x;
}
