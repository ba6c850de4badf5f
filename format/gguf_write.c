/* format/gguf_write.c - GGUF v3 writer, llama.cpp's layout.
 *
 * File layout (all little-endian, what llama.cpp's gguf_write_to_buf emits):
 *   "GGUF", u32 version 3, u64 n_tensors, u64 n_kv
 *   n_kv x { string key, u32 type, value }          in insertion order
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset }
 *   zero padding to the alignment
 *   n_tensors x { data, zero padding to the alignment }   offsets are relative
 *                                                          to the data section
 * A string is u64 length + bytes; an array is u32 element type, u64 count,
 * elements (strings and arrays as above, without a type tag each).
 *
 * Each key/value is serialized when it is added (so values are deep-copied
 * and the caller's buffers need not live on); tensor data is copied too.
 * The void add_* calls remember their first error in w->err; the write
 * calls report it.
 */
#include "format/gguf.h"

#include "kernels/types.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_DEPTH = 8, MAX_NAME = 65535, DEFAULT_ALIGN = 32 };

/* a growable byte buffer; `oom` sticks once an allocation failed */
typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} wbuf;

typedef struct {
    char *key;
    wbuf val; /* u32 type + value, serialized */
} wkv;

typedef struct {
    char *name;
    int type, n_dims;
    int64_t ne[4];
    uint8_t *data;
    size_t nbytes;
} wtensor;

struct gguf_writer {
    uint32_t alignment;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    kvant_status err; /* first error of a void add_* call */
};

/* ---- byte buffer ------------------------------------------------------------ */

static void wb_put(wbuf *b, const void *src, size_t n) {
    if (b->oom || n == 0) return;
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n) {
            if (cap > SIZE_MAX / 2) { b->oom = true; return; }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void wb_u32(wbuf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    wb_put(b, x, 4);
}

static void wb_u64(wbuf *b, uint64_t v) {
    wb_u32(b, (uint32_t)v);
    wb_u32(b, (uint32_t)(v >> 32));
}

static void wb_str(wbuf *b, const char *s, uint64_t len) {
    wb_u64(b, len);
    wb_put(b, s, (size_t)len);
}

static void wb_zeros(wbuf *b, size_t n) {
    static const uint8_t z[64];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        wb_put(b, z, k);
        n -= k;
    }
}

/* ---- errors ------------------------------------------------------------------ */

/* Records the first error of a void call (later ones are dropped). */
static void wfail(gguf_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wfail(gguf_writer *w, const char *fmt, ...) {
    if (w->err.code != KVANT_OK) return;
    char msg[448];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    core_fail(&w->err, KVANT_ERR_ARG, "gguf writer: %s", msg);
}

/* ---- lifetime ---------------------------------------------------------------- */

/* A new, empty writer (alignment 32); NULL if out of memory. */
gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = DEFAULT_ALIGN;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

/* ---- metadata -------------------------------------------------------------------- */

static size_t scalar_bytes(gguf_vtype t) {
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Appends the payload of v (no type tag) to b; false (with w->err) if v is
 * inconsistent. depth counts the arrays around v. */
static bool put_payload(gguf_writer *w, wbuf *b, const gguf_value *v, int depth, const char *key) {
    size_t sz = scalar_bytes(v->type);
    if (sz) {
        uint64_t bits = 0;
        switch (v->type) {
        case GGUF_FLOAT32: { float f = (float)v->f64; uint32_t u; memcpy(&u, &f, 4); bits = u; break; }
        case GGUF_FLOAT64: memcpy(&bits, &v->f64, 8); break;
        case GGUF_BOOL: bits = v->b ? 1 : 0; break;
        case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64: bits = (uint64_t)v->i64; break;
        default: bits = v->u64; break;
        }
        for (size_t i = 0; i < sz; i++) {
            uint8_t c = (uint8_t)(bits >> (8 * i));
            wb_put(b, &c, 1);
        }
        return true;
    }
    if (v->type == GGUF_STRING) {
        if (!v->str.data && v->str.len) return wfail(w, "key '%s': string without data", key), false;
        wb_str(b, v->str.data, v->str.len);
        return true;
    }
    if (v->type != GGUF_ARRAY) return wfail(w, "key '%s': unknown value type %d", key, (int)v->type), false;
    if (depth >= MAX_DEPTH) return wfail(w, "key '%s': arrays nested more than %d deep", key, MAX_DEPTH), false;
    gguf_vtype e = v->arr.elem;
    if ((unsigned)e >= GGUF_NTYPES) return wfail(w, "key '%s': unknown array element type %d", key, (int)e), false;
    wb_u32(b, (uint32_t)e);
    wb_u64(b, v->arr.n);
    size_t esz = scalar_bytes(e);
    if (esz) {
        uint64_t bytes;
        if (!core_mul_ok(v->arr.n, esz, &bytes) || bytes > SIZE_MAX)
            return wfail(w, "key '%s': array of %" PRIu64 " elements is too large", key, v->arr.n), false;
        if (bytes && !v->arr.raw) return wfail(w, "key '%s': array without data", key), false;
        if (e == GGUF_BOOL) { /* bools are written as 0 / 1, as llama.cpp does */
            for (uint64_t i = 0; i < v->arr.n; i++) {
                uint8_t c = v->arr.raw[i] != 0;
                wb_put(b, &c, 1);
            }
        } else {
            wb_put(b, v->arr.raw, (size_t)bytes); /* already little-endian */
        }
        return true;
    }
    if (v->arr.n && !v->arr.items) return wfail(w, "key '%s': array without items", key), false;
    for (uint64_t i = 0; i < v->arr.n; i++) {
        if (v->arr.items[i].type != e)
            return wfail(w, "key '%s': array item %" PRIu64 " is %s, the array holds %s", key, i,
                         gguf_vtype_name(v->arr.items[i].type), gguf_vtype_name(e)), false;
        if (!put_payload(w, b, &v->arr.items[i], depth + 1, key)) return false;
    }
    return true;
}

/* Checks a key or tensor name; false (with w->err) if it is not usable. */
static bool name_ok(gguf_writer *w, const char *what, const char *s) {
    size_t len = strlen(s);
    if (len == 0) return wfail(w, "empty %s", what), false;
    if (len > MAX_NAME) return wfail(w, "%s of %zu bytes (limit %d)", what, len, MAX_NAME), false;
    return true;
}

/* The general.alignment rule: UINT32, a power of 2; sets w->alignment. */
static bool alignment_ok(gguf_writer *w, const gguf_value *v) {
    if (v->type != GGUF_UINT32)
        return wfail(w, "general.alignment must be UINT32, not %s", gguf_vtype_name(v->type)), false;
    if (v->u64 == 0 || v->u64 > UINT32_MAX || (v->u64 & (v->u64 - 1)))
        return wfail(w, "alignment %" PRIu64 " is not a power of 2", v->u64), false;
    w->alignment = (uint32_t)v->u64;
    return true;
}

void gguf_writer_add_value(gguf_writer *w, const char *key, const gguf_value *v) {
    CORE_ASSERT(w && key && v);
    if (!name_ok(w, "key", key)) return;
    if (strcmp(key, "general.alignment") == 0 && !alignment_ok(w, v)) return;
    wkv e = {0};
    wb_u32(&e.val, (uint32_t)v->type);
    bool ok = put_payload(w, &e.val, v, 0, key);
    e.key = strdup(key);
    if (ok && (e.val.oom || !e.key)) {
        wfail(w, "out of memory for key '%s'", key);
        ok = false;
    }
    if (ok && w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) {
            wfail(w, "out of memory for key '%s'", key);
            ok = false;
        } else {
            w->kv = kv;
            w->cap_kv = cap;
        }
    }
    if (!ok) {
        free(e.key);
        free(e.val.p);
        return;
    }
    for (size_t i = 0; i < w->n_kv; i++) { /* replace: drop the old entry */
        if (strcmp(w->kv[i].key, key) == 0) {
            free(w->kv[i].key);
            free(w->kv[i].val.p);
            memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - i - 1) * sizeof *w->kv);
            w->n_kv--;
            break;
        }
    }
    w->kv[w->n_kv++] = e;
}

void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment) {
    gguf_writer_add_u32(w, "general.alignment", alignment);
}

void gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v) {
    gguf_value x = {.type = GGUF_UINT32, .u64 = v};
    gguf_writer_add_value(w, key, &x);
}

void gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v) {
    gguf_value x = {.type = GGUF_INT32, .i64 = v};
    gguf_writer_add_value(w, key, &x);
}

void gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v) {
    gguf_value x = {.type = GGUF_UINT64, .u64 = v};
    gguf_writer_add_value(w, key, &x);
}

void gguf_writer_add_f32(gguf_writer *w, const char *key, float v) {
    gguf_value x = {.type = GGUF_FLOAT32, .f64 = v};
    gguf_writer_add_value(w, key, &x);
}

void gguf_writer_add_bool(gguf_writer *w, const char *key, bool v) {
    gguf_value x = {.type = GGUF_BOOL, .b = v};
    gguf_writer_add_value(w, key, &x);
}

void gguf_writer_add_str(gguf_writer *w, const char *key, const char *v) {
    CORE_ASSERT(v);
    gguf_value x = {.type = GGUF_STRING, .str = {v, strlen(v)}};
    gguf_writer_add_value(w, key, &x);
}

void gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data, uint64_t n) {
    CORE_ASSERT(w);
    if (!scalar_bytes(elem)) {
        wfail(w, "key '%s': add_arr takes scalar elements, not %s", key ? key : "", gguf_vtype_name(elem));
        return;
    }
    gguf_value x = {.type = GGUF_ARRAY, .arr = {.elem = elem, .n = n, .raw = data}};
    gguf_writer_add_value(w, key, &x);
}

void gguf_writer_add_str_arr(gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    CORE_ASSERT(w && (v || n == 0));
    gguf_value *items = NULL;
    if (n) {
        items = n <= SIZE_MAX / sizeof *items ? calloc((size_t)n, sizeof *items) : NULL;
        if (!items) {
            wfail(w, "out of memory for key '%s'", key ? key : "");
            return;
        }
    }
    for (uint64_t i = 0; i < n; i++) {
        CORE_ASSERT(v[i]);
        items[i].type = GGUF_STRING;
        items[i].str = (gguf_str){v[i], strlen(v[i])};
    }
    gguf_value x = {.type = GGUF_ARRAY, .arr = {.elem = GGUF_STRING, .n = n, .items = items}};
    gguf_writer_add_value(w, key, &x);
    free(items);
}

/* ---- tensors ------------------------------------------------------------------ */

/* Checks and copies one tensor (data NULL: zeros).  KVANT_ERR_ARG with a
 * message for a bad name, duplicate, type, shape; the writer stays usable. */
kvant_code gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                                  const void *data, kvant_status *st) {
    CORE_ASSERT(w && name && ne);
    size_t len = strlen(name);
    if (len == 0 || len > MAX_NAME)
        return core_fail(st, KVANT_ERR_ARG, "gguf writer: tensor name of %zu bytes (must be 1..%d)", len, MAX_NAME);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return core_fail(st, KVANT_ERR_ARG, "gguf writer: duplicate tensor name '%s'", name);
    const kern_type_traits *tt = kern_type_get(type);
    if (!tt) return core_fail(st, KVANT_ERR_ARG, "gguf writer: tensor '%s': unknown type %d", name, type);
    if (n_dims < 1 || n_dims > 4)
        return core_fail(st, KVANT_ERR_ARG, "gguf writer: tensor '%s': n_dims %d is not in 1..4", name, n_dims);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    uint64_t count = 1;
    for (int j = 0; j < n_dims; j++) {
        if (ne[j] <= 0)
            return core_fail(st, KVANT_ERR_ARG, "gguf writer: tensor '%s': ne[%d] = %" PRId64 " is not positive", name,
                             j, ne[j]);
        if (!core_mul_ok(count, (uint64_t)ne[j], &count) || count > INT64_MAX)
            return core_fail(st, KVANT_ERR_ARG, "gguf writer: tensor '%s': element count overflows", name);
        t.ne[j] = ne[j];
    }
    if (ne[0] % tt->block_size)
        return core_fail(st, KVANT_ERR_ARG,
                         "gguf writer: tensor '%s': ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64,
                         name, ne[0], tt->name, tt->block_size);
    uint64_t nbytes;
    if (!core_mul_ok(kern_row_bytes(type, ne[0]), count / (uint64_t)ne[0], &nbytes) || nbytes > SIZE_MAX)
        return core_fail(st, KVANT_ERR_ARG, "gguf writer: tensor '%s': size overflows", name);
    t.nbytes = (size_t)nbytes;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        wtensor *p = realloc(w->t, cap * sizeof *p);
        if (!p) return core_fail(st, KVANT_ERR_NOMEM, "gguf writer: out of memory");
        w->t = p;
        w->cap_t = cap;
    }
    t.name = strdup(name);
    t.data = data ? malloc(t.nbytes) : calloc(1, t.nbytes);
    if (!t.name || !t.data) {
        free(t.name);
        free(t.data);
        return core_fail(st, KVANT_ERR_NOMEM, "gguf writer: out of memory for tensor '%s' (%zu bytes)", name, t.nbytes);
    }
    if (data) memcpy(t.data, data, t.nbytes);
    w->t[w->n_t++] = t;
    core_ok(st);
    return KVANT_OK;
}

/* ---- output --------------------------------------------------------------------- */

static uint64_t pad_to(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

/* Serializes everything up to the data section into meta and returns the
 * total file size in *total. */
static kvant_code build_meta(gguf_writer *w, wbuf *meta, uint64_t *total, kvant_status *st) {
    if (w->err.code != KVANT_OK) return core_fail(st, w->err.code, "%s", w->err.msg);
    wb_put(meta, "GGUF", 4);
    wb_u32(meta, 3);
    wb_u64(meta, w->n_t);
    wb_u64(meta, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        wb_str(meta, w->kv[i].key, strlen(w->kv[i].key));
        wb_put(meta, w->kv[i].val.p, w->kv[i].val.n);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        wb_str(meta, t->name, strlen(t->name));
        wb_u32(meta, (uint32_t)t->n_dims);
        for (int j = 0; j < t->n_dims; j++) wb_u64(meta, (uint64_t)t->ne[j]);
        wb_u32(meta, (uint32_t)t->type);
        wb_u64(meta, off);
        if (!core_add_ok(off, pad_to(t->nbytes, w->alignment), &off))
            return core_fail(st, KVANT_ERR_NOMEM, "gguf writer: file size overflows");
    }
    wb_zeros(meta, (size_t)(pad_to(meta->n, w->alignment) - meta->n));
    if (meta->oom) return core_fail(st, KVANT_ERR_NOMEM, "gguf writer: out of memory");
    if (!core_add_ok(meta->n, off, total) || *total > SIZE_MAX)
        return core_fail(st, KVANT_ERR_NOMEM, "gguf writer: file size overflows");
    return KVANT_OK;
}

/* Serializes the file into a malloc'd buffer (*out, caller frees). */
kvant_code gguf_writer_write_mem(gguf_writer *w, uint8_t **out, size_t *out_size, kvant_status *st) {
    CORE_ASSERT(w && out && out_size);
    *out = NULL;
    *out_size = 0;
    wbuf meta = {0};
    uint64_t total;
    kvant_code rc = build_meta(w, &meta, &total, st);
    if (rc != KVANT_OK) {
        free(meta.p);
        return rc;
    }
    uint8_t *buf = malloc((size_t)total ? (size_t)total : 1);
    if (!buf) {
        free(meta.p);
        return core_fail(st, KVANT_ERR_NOMEM, "gguf writer: out of memory for %" PRIu64 " bytes", total);
    }
    memcpy(buf, meta.p, meta.n);
    size_t pos = meta.n;
    for (size_t i = 0; i < w->n_t; i++) {
        size_t padded = (size_t)pad_to(w->t[i].nbytes, w->alignment);
        memcpy(buf + pos, w->t[i].data, w->t[i].nbytes);
        memset(buf + pos + w->t[i].nbytes, 0, padded - w->t[i].nbytes);
        pos += padded;
    }
    CORE_ASSERT(pos == total);
    free(meta.p);
    *out = buf;
    *out_size = (size_t)total;
    core_ok(st);
    return KVANT_OK;
}

static bool write_zeros(FILE *f, size_t n) {
    static const uint8_t z[4096];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        if (fwrite(z, 1, k, f) != k) return false;
        n -= k;
    }
    return true;
}

/* Writes the file to path (replacing it).  On failure the partial file is
 * removed and st->msg names path. */
kvant_code gguf_writer_write_file(gguf_writer *w, const char *path, kvant_status *st) {
    CORE_ASSERT(w && path);
    wbuf meta = {0};
    uint64_t total;
    kvant_code rc = build_meta(w, &meta, &total, st);
    if (rc != KVANT_OK) {
        free(meta.p);
        if (st) {
            char msg[sizeof st->msg];
            snprintf(msg, sizeof msg, "%s", st->msg);
            core_fail(st, rc, "%s: %s", path, msg);
        }
        return rc;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        int e = errno;
        free(meta.p);
        return core_fail(st, KVANT_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    bool ok = fwrite(meta.p, 1, meta.n, f) == meta.n;
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        ok = fwrite(t->data, 1, t->nbytes, f) == t->nbytes &&
             write_zeros(f, (size_t)pad_to(t->nbytes, w->alignment) - t->nbytes);
    }
    int e = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    free(meta.p);
    if (!ok) {
        unlink(path);
        return core_fail(st, KVANT_ERR_IO, "%s: cannot write: %s", path, strerror(e ? e : EIO));
    }
    core_ok(st);
    return KVANT_OK;
}
