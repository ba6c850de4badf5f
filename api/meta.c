/* meta.c - the model file's metadata by key, for front ends (the server's
 * chat template). */
#include <string.h>

#include "api/api.h"

int kvant_model_meta_str(const kvant_model *km, const char *key, char *buf, size_t cap) {
    const model *m = km->m;
    gguf_str s;
    if (!m->gguf || !key || !gguf_get_str(m->gguf, key, &s)) return -1;
    if (s.len > (uint64_t)INT32_MAX - 1) return -1;
    if (buf && cap) {
        const size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
        memcpy(buf, s.data, n);
        buf[n] = 0;
    }
    return (int)s.len;
}
