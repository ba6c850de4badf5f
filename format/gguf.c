/* format/gguf.c - GGUF v2/v3 reader.
 *
 * gguf_open maps the file; the parser walks it once, front to back, and
 * validates as it goes: header, key/value pairs, tensor infos, then every
 * tensor's data extent.  The file is untrusted, so:
 *   - every read goes through need(), which checks the bytes that are left;
 *   - every count is checked against the bytes that are left, times the
 *     smallest size an item can have, BEFORE anything is allocated for it;
 *   - sizes and offsets are computed with overflow-checked 64-bit arithmetic;
 *   - arrays nest at most GGUF_MAX_DEPTH deep (the parser recurses).
 * Values are decoded byte by byte (little-endian), so unaligned data and the
 * host's byte order do not matter.
 *
 * Errors are one line: "<file>: <where>: <what>", e.g.
 *   x.gguf: tensor 3 'blk.0.attn_q.weight': data [1024, 66560) extends past
 *   end of file (65536 bytes)
 * Names taken from the file are quoted with control bytes escaped.
 */
#include "format/gguf.h"

#include "kernels/types.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    GGUF_MAX_DEPTH = 8,       /* array nesting levels accepted */
    GGUF_MAX_NAME = 65535,    /* longest key / tensor name in bytes */
    GGUF_DEFAULT_ALIGN = 32,
    GGUF_HEADER_BYTES = 4 + 4 + 8 + 8,
    /* smallest encodings, used to bound counts before allocating */
    MIN_KV_BYTES = 8 + 1 + 4 + 1,             /* key len, 1-byte key, type, 1-byte value */
    MIN_TENSOR_BYTES = 8 + 1 + 4 + 8 + 4 + 8, /* name len, 1-byte name, n_dims, ne[0], type, offset */
    MIN_STR_BYTES = 8,                        /* length of an empty string */
    MIN_ARR_BYTES = 4 + 8,                    /* element type and count of an empty array */
};

/* a name (key or tensor) with its position, for sorting and lookup */
typedef struct {
    const char *s;
    int64_t i;
} name_ix;

struct gguf_ctx {
    core_map map;          /* the mapping gguf_open owns; empty for gguf_open_mem */
    const uint8_t *data;   /* the whole file */
    size_t size;
    char *name;            /* path or caller's name: messages and gguf_path */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;  /* file offset of the data section */
    int64_t n_kv;
    char **keys;           /* [n_kv] NUL-terminated copies */
    gguf_value *vals;      /* [n_kv] */
    name_ix *kv_sorted;    /* [n_kv] by key */
    int64_t n_tensors;
    gguf_tensor *tensors;  /* [n_tensors]; names are owned copies */
    name_ix *t_sorted;     /* [n_tensors] by name */
};

/* ---- parser state and error reporting ----------------------------------- */

typedef struct {
    const uint8_t *base;
    size_t size, pos;
    const char *file;  /* for messages */
    char where[192];   /* the item being parsed: "key 3 'general.name'" */
    kvant_status *st;
} reader;

/* Replaces control characters in st->msg so the message stays one line. */
static void one_line(kvant_status *st) {
    if (!st) return;
    for (char *c = st->msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

/* Writes s[0..len) to dst as a quoted, escaped, possibly shortened name. */
static void quote(char *dst, size_t cap, const char *s, size_t len) {
    size_t o = 0;
    CORE_ASSERT(cap >= 16);
    dst[o++] = '\'';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o + 8 >= cap) { /* room for "...'" and the NUL */
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        if (c < 0x20 || c == 0x7f || c == '\\' || c == '\'') o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
        else dst[o++] = (char)c;
    }
    dst[o++] = '\'';
    dst[o] = 0;
}

/* Fills r->st with "<file>: <where>: <what>"; returns code. */
static kvant_code rfail(reader *r, kvant_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static kvant_code rfail(reader *r, kvant_code code, const char *fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (r->where[0]) core_fail(r->st, code, "%s: %s: %s", r->file, r->where, what);
    else core_fail(r->st, code, "%s: %s", r->file, what);
    one_line(r->st);
    return code;
}

static size_t left(const reader *r) { return r->size - r->pos; }

/* True if n more bytes exist; otherwise reports `what` as truncated. */
static bool need(reader *r, uint64_t n, const char *what) {
    if (n <= left(r)) return true;
    rfail(r, KVANT_ERR_FORMAT, "truncated: %s at offset %zu needs %" PRIu64 " bytes, file ends at %zu",
          what, r->pos, n, r->size);
    return false;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static bool rd_u32(reader *r, uint32_t *v, const char *what) {
    if (!need(r, 4, what)) return false;
    *v = le32(r->base + r->pos);
    r->pos += 4;
    return true;
}

static bool rd_u64(reader *r, uint64_t *v, const char *what) {
    if (!need(r, 8, what)) return false;
    *v = le64(r->base + r->pos);
    r->pos += 8;
    return true;
}

/* Reads a length-prefixed string as a view into the file. */
static bool rd_str(reader *r, gguf_str *out, const char *what) {
    size_t at = r->pos;
    uint64_t len;
    char lw[64];
    snprintf(lw, sizeof lw, "%s length", what);
    if (!rd_u64(r, &len, lw)) return false;
    if (len > left(r)) {
        rfail(r, KVANT_ERR_FORMAT, "%s length %" PRIu64 " at offset %zu extends past end of file (%zu bytes)",
              what, len, at, r->size);
        return false;
    }
    out->data = (const char *)r->base + r->pos;
    out->len = len;
    r->pos += len;
    return true;
}

/* Reads a key or tensor name: non-empty, at most GGUF_MAX_NAME bytes, no NUL.
 * *out is a malloc'd NUL-terminated copy. */
static bool rd_name(reader *r, char **out, const char *what) {
    gguf_str s;
    if (!rd_str(r, &s, what)) return false;
    /* (r->where already names the offset) */
    if (s.len == 0) return rfail(r, KVANT_ERR_FORMAT, "empty %s", what), false;
    if (s.len > GGUF_MAX_NAME)
        return rfail(r, KVANT_ERR_FORMAT, "%s is %" PRIu64 " bytes long (limit %d)", what, s.len, GGUF_MAX_NAME),
               false;
    if (memchr(s.data, 0, s.len)) return rfail(r, KVANT_ERR_FORMAT, "%s contains a NUL byte", what), false;
    *out = malloc(s.len + 1);
    if (!*out) return rfail(r, KVANT_ERR_NOMEM, "out of memory"), false;
    memcpy(*out, s.data, s.len);
    (*out)[s.len] = 0;
    return true;
}

/* ---- values ---------------------------------------------------------------- */

/* Bytes of one scalar of type t; 0 for STRING, ARRAY and unknown types. */
static size_t scalar_size(gguf_vtype t) {
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static bool is_unsigned(gguf_vtype t) {
    return t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64;
}
static bool is_signed(gguf_vtype t) {
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

/* Decodes the scalar of type t at p (scalar_size(t) bytes) into v. */
static void decode_scalar(gguf_value *v, gguf_vtype t, const uint8_t *p) {
    v->type = t;
    switch (t) {
    case GGUF_UINT8: v->u64 = p[0]; break;
    case GGUF_INT8: v->i64 = (int8_t)p[0]; break;
    case GGUF_UINT16: v->u64 = (uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_INT16: v->i64 = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_UINT32: v->u64 = le32(p); break;
    case GGUF_INT32: v->i64 = (int32_t)le32(p); break;
    case GGUF_UINT64: v->u64 = le64(p); break;
    case GGUF_INT64: v->i64 = (int64_t)le64(p); break;
    case GGUF_FLOAT32: { uint32_t b = le32(p); float f; memcpy(&f, &b, 4); v->f64 = f; break; }
    case GGUF_FLOAT64: { uint64_t b = le64(p); memcpy(&v->f64, &b, 8); break; }
    case GGUF_BOOL: v->b = p[0] != 0; break;
    default: CORE_ASSERT(!"not a scalar type");
    }
}

static void free_value(gguf_value *v) {
    if (v->type != GGUF_ARRAY || !v->arr.items) return;
    for (uint64_t i = 0; i < v->arr.n; i++) free_value(&v->arr.items[i]);
    free(v->arr.items);
    v->arr.items = NULL;
}

/* Parses a value of type t (already read) at r->pos into v.  depth counts
 * the arrays around it.  On failure v may be partly filled; free_value
 * releases it. */
static bool parse_value(reader *r, gguf_value *v, gguf_vtype t, int depth) {
    size_t at = r->pos;
    size_t sz = scalar_size(t);
    if (sz) {
        if (!need(r, sz, gguf_vtype_name(t))) return false;
        decode_scalar(v, t, r->base + r->pos);
        r->pos += sz;
        return true;
    }
    if (t == GGUF_STRING) {
        v->type = GGUF_STRING;
        return rd_str(r, &v->str, "string");
    }
    CORE_ASSERT(t == GGUF_ARRAY);
    if (depth >= GGUF_MAX_DEPTH)
        return rfail(r, KVANT_ERR_FORMAT, "array at offset %zu nested more than %d deep", at, GGUF_MAX_DEPTH), false;
    uint32_t et;
    uint64_t n;
    if (!rd_u32(r, &et, "array element type") || !rd_u64(r, &n, "array length")) return false;
    if (et >= GGUF_NTYPES)
        return rfail(r, KVANT_ERR_FORMAT, "array at offset %zu has unknown element type %" PRIu32, at, et), false;
    v->type = GGUF_ARRAY;
    v->arr.elem = (gguf_vtype)et;
    v->arr.n = 0; /* set to n once items exist, so free_value stays safe */
    v->arr.raw = r->base + r->pos;
    v->arr.items = NULL;
    size_t esz = scalar_size((gguf_vtype)et);
    if (esz) {
        uint64_t bytes;
        if (!core_mul_ok(n, esz, &bytes) || bytes > left(r))
            return rfail(r, KVANT_ERR_FORMAT,
                         "array at offset %zu of %" PRIu64 " %s elements extends past end of file (%zu bytes)", at, n,
                         gguf_vtype_name((gguf_vtype)et), r->size), false;
        v->arr.n = n;
        r->pos += (size_t)bytes;
        return true;
    }
    uint64_t min = et == GGUF_STRING ? MIN_STR_BYTES : MIN_ARR_BYTES;
    if (n > left(r) / min)
        return rfail(r, KVANT_ERR_FORMAT,
                     "array at offset %zu of %" PRIu64 " %s elements cannot fit in the %zu bytes left", at, n,
                     gguf_vtype_name((gguf_vtype)et), left(r)), false;
    if (n == 0) return true;
    gguf_value *items = calloc((size_t)n, sizeof *items);
    if (!items) return rfail(r, KVANT_ERR_NOMEM, "out of memory for an array of %" PRIu64 " elements", n), false;
    v->arr.items = items;
    v->arr.n = n;
    for (uint64_t i = 0; i < n; i++)
        if (!parse_value(r, &items[i], (gguf_vtype)et, depth + 1)) return false;
    return true;
}

/* ---- names: sorted index for duplicates and lookup ---------------------- */

static int cmp_name_ix(const void *a, const void *b) {
    const name_ix *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    if (c) return c;
    return (x->i > y->i) - (x->i < y->i);
}

/* Sorts names[0..n) into a new index; reports the first duplicate as
 * "<what> i 'name' duplicates <what> j".  NULL on error. */
static name_ix *sort_names(reader *r, const char *const *names, size_t stride, int64_t n, const char *what) {
    name_ix *ix = malloc((size_t)(n ? n : 1) * sizeof *ix);
    if (!ix) return rfail(r, KVANT_ERR_NOMEM, "out of memory"), NULL;
    for (int64_t i = 0; i < n; i++) {
        ix[i].s = *(const char *const *)((const char *)names + (size_t)i * stride);
        ix[i].i = i;
    }
    qsort(ix, (size_t)n, sizeof *ix, cmp_name_ix);
    for (int64_t i = 1; i < n; i++) {
        if (strcmp(ix[i - 1].s, ix[i].s) == 0) {
            char q[96];
            quote(q, sizeof q, ix[i].s, strlen(ix[i].s));
            r->where[0] = 0;
            rfail(r, KVANT_ERR_FORMAT, "duplicate %s: %s %" PRId64 " %s repeats %s %" PRId64, what, what, ix[i].i, q,
                  what, ix[i - 1].i);
            free(ix);
            return NULL;
        }
    }
    return ix;
}

static const name_ix *find_name(const name_ix *ix, int64_t n, const char *s) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ix[mid].s, s);
        if (c == 0) return &ix[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* ---- the parser ------------------------------------------------------------ */

static bool parse_header(reader *r, gguf_ctx *g, uint64_t *n_tensors, uint64_t *n_kv) {
    if (!need(r, 4, "magic")) return false;
    const uint8_t *m = r->base;
    if (memcmp(m, "GGUF", 4) != 0)
        return rfail(r, KVANT_ERR_FORMAT, "not a GGUF file (magic bytes %02x %02x %02x %02x, expected 'GGUF')", m[0],
                     m[1], m[2], m[3]), false;
    r->pos = 4;
    uint32_t v;
    if (!rd_u32(r, &v, "version")) return false;
    if (v != 2 && v != 3) {
        uint32_t swapped = __builtin_bswap32(v);
        if (swapped == 2 || swapped == 3)
            return rfail(r, KVANT_ERR_UNSUPPORTED, "big-endian GGUF (version %" PRIu32 " byte-swapped) is not supported",
                         swapped), false;
        if (v == 1)
            return rfail(r, KVANT_ERR_UNSUPPORTED,
                         "GGUF version 1 is not supported (kvant reads versions 2 and 3; convert the file again)"),
                   false;
        return rfail(r, KVANT_ERR_UNSUPPORTED, "unsupported GGUF version %" PRIu32 " (kvant reads versions 2 and 3)",
                     v), false;
    }
    g->version = v;
    if (!rd_u64(r, n_tensors, "tensor count") || !rd_u64(r, n_kv, "key-value count")) return false;
    /* bound both counts by the bytes that could hold them */
    uint64_t kv_min, t_min;
    if (!core_mul_ok(*n_kv, MIN_KV_BYTES, &kv_min) || kv_min > left(r))
        return rfail(r, KVANT_ERR_FORMAT, "header: n_kv = %" PRIu64 " key-value pairs cannot fit in the %zu bytes left",
                     *n_kv, left(r)), false;
    if (!core_mul_ok(*n_tensors, MIN_TENSOR_BYTES, &t_min) || t_min > left(r) - kv_min)
        return rfail(r, KVANT_ERR_FORMAT,
                     "header: n_tensors = %" PRIu64 " tensor infos cannot fit in the %zu bytes left", *n_tensors,
                     left(r)), false;
    return true;
}

static bool parse_kvs(reader *r, gguf_ctx *g, uint64_t n_kv) {
    g->keys = calloc((size_t)(n_kv ? n_kv : 1), sizeof *g->keys);
    g->vals = calloc((size_t)(n_kv ? n_kv : 1), sizeof *g->vals);
    if (!g->keys || !g->vals) return rfail(r, KVANT_ERR_NOMEM, "out of memory for %" PRIu64 " keys", n_kv), false;
    g->n_kv = (int64_t)n_kv; /* the arrays are zeroed: safe to free at any point */
    for (int64_t i = 0; i < g->n_kv; i++) {
        snprintf(r->where, sizeof r->where, "key %" PRId64 " (offset %zu)", i, r->pos);
        if (!rd_name(r, &g->keys[i], "key")) return false;
        char q[128];
        quote(q, sizeof q, g->keys[i], strlen(g->keys[i]));
        snprintf(r->where, sizeof r->where, "key %" PRId64 " %s", i, q);
        uint32_t t;
        size_t at = r->pos;
        if (!rd_u32(r, &t, "value type")) return false;
        if (t >= GGUF_NTYPES)
            return rfail(r, KVANT_ERR_FORMAT, "unknown value type %" PRIu32 " at offset %zu", t, at), false;
        if (!parse_value(r, &g->vals[i], (gguf_vtype)t, 0)) return false;
    }
    r->where[0] = 0;
    g->kv_sorted = sort_names(r, (const char *const *)g->keys, sizeof *g->keys, g->n_kv, "key");
    if (!g->kv_sorted) return false;

    g->alignment = GGUF_DEFAULT_ALIGN;
    const gguf_value *a = gguf_find(g, "general.alignment");
    if (a) {
        if (a->type != GGUF_UINT32)
            return rfail(r, KVANT_ERR_FORMAT, "general.alignment must be UINT32, not %s", gguf_vtype_name(a->type)),
                   false;
        if (a->u64 == 0 || (a->u64 & (a->u64 - 1)))
            return rfail(r, KVANT_ERR_FORMAT, "general.alignment = %" PRIu64 " is not a power of 2", a->u64), false;
        g->alignment = a->u64;
    }
    return true;
}

/* Reads one tensor info into t (shape, type, offset; no data yet). */
static bool parse_tensor_info(reader *r, gguf_ctx *g, int64_t i, gguf_tensor *t) {
    snprintf(r->where, sizeof r->where, "tensor %" PRId64 " (offset %zu)", i, r->pos);
    char *name = NULL;
    if (!rd_name(r, &name, "tensor name")) return false;
    t->name = name;
    char q[128];
    quote(q, sizeof q, name, strlen(name));
    snprintf(r->where, sizeof r->where, "tensor %" PRId64 " %s", i, q);

    uint32_t n_dims;
    if (!rd_u32(r, &n_dims, "n_dims")) return false;
    if (n_dims < 1 || n_dims > 4) return rfail(r, KVANT_ERR_FORMAT, "n_dims = %" PRIu32 " is not in 1..4", n_dims), false;
    t->n_dims = (int)n_dims;
    uint64_t count = 1;
    for (int j = 0; j < 4; j++) {
        t->ne[j] = 1;
        if (j >= t->n_dims) continue;
        uint64_t ne;
        if (!rd_u64(r, &ne, "shape")) return false;
        if (ne > INT64_MAX) return rfail(r, KVANT_ERR_FORMAT, "ne[%d] = %" PRId64 " is negative", j, (int64_t)ne), false;
        if (ne == 0) return rfail(r, KVANT_ERR_FORMAT, "ne[%d] is 0 (empty tensor)", j), false;
        t->ne[j] = (int64_t)ne;
        if (!core_mul_ok(count, ne, &count) || count > INT64_MAX)
            return rfail(r, KVANT_ERR_FORMAT, "element count overflows 63 bits at ne[%d] = %" PRIu64, j, ne), false;
    }

    uint32_t type;
    if (!rd_u32(r, &type, "tensor type")) return false;
    const kern_type_traits *tt = kern_type_get((int)type);
    if (type > INT32_MAX || !tt) return rfail(r, KVANT_ERR_FORMAT, "unknown tensor type %" PRIu32, type), false;
    t->type = (int)type;
    /* every type stores an element in at least 2 bits, so a row longer than
     * 4 elements per byte of the file cannot be in it; refused before the
     * row-size formulas (n * bits for the PTQ types) can overflow */
    if ((uint64_t)t->ne[0] / 4 > (uint64_t)r->size)
        return rfail(r, KVANT_ERR_FORMAT, "row length ne[0] = %" PRId64 " cannot fit in a file of %zu bytes", t->ne[0],
                     r->size), false;
    if (t->ne[0] % tt->block_size)
        return rfail(r, KVANT_ERR_FORMAT, "row length ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64,
                     t->ne[0], tt->name, tt->block_size), false;
    uint64_t rows = (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]); /* <= count: no overflow */
    uint64_t nbytes;
    if (!core_mul_ok(kern_row_bytes(t->type, t->ne[0]), rows, &nbytes) || nbytes > SIZE_MAX)
        return rfail(r, KVANT_ERR_FORMAT, "size in bytes of %" PRIu64 " %s elements overflows", count, tt->name), false;
    t->nbytes = (size_t)nbytes;

    if (!rd_u64(r, &t->offset, "tensor offset")) return false;
    if (t->offset % g->alignment)
        return rfail(r, KVANT_ERR_FORMAT, "offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, t->offset,
                     g->alignment), false;
    return true;
}

static int cmp_extent(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* No two tensors' data may overlap (llama.cpp's reader is stricter still: it
 * wants them back to back, in order).  So the tensors' bytes sum to at most
 * the file's size, and whatever is sized by tensor data (converted vectors,
 * repacked matrices, the experts' views) is bounded by the file. */
static bool check_disjoint(reader *r, gguf_ctx *g) {
    if (g->n_tensors < 2) return true;
    const gguf_tensor **by = malloc((size_t)g->n_tensors * sizeof *by);
    if (!by) return rfail(r, KVANT_ERR_NOMEM, "out of memory"), false;
    for (int64_t i = 0; i < g->n_tensors; i++) by[i] = &g->tensors[i];
    qsort(by, (size_t)g->n_tensors, sizeof *by, cmp_extent);
    for (int64_t i = 1; i < g->n_tensors; i++) {
        const gguf_tensor *a = by[i - 1], *b = by[i];
        if (b->offset < a->offset + a->nbytes) { /* no overflow: both extents lie inside the file */
            char qa[96], qb[96];
            quote(qa, sizeof qa, a->name, strlen(a->name));
            quote(qb, sizeof qb, b->name, strlen(b->name));
            rfail(r, KVANT_ERR_FORMAT, "tensor %" PRId64 " %s: data at offset %" PRIu64 " overlaps tensor %" PRId64
                  " %s at [%" PRIu64 ", %" PRIu64 ")", (int64_t)(b - g->tensors), qb, b->offset,
                  (int64_t)(a - g->tensors), qa, a->offset, a->offset + (uint64_t)a->nbytes);
            free(by);
            return false;
        }
    }
    free(by);
    return true;
}

static bool parse_tensors(reader *r, gguf_ctx *g, uint64_t n_tensors) {
    g->tensors = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *g->tensors);
    if (!g->tensors) return rfail(r, KVANT_ERR_NOMEM, "out of memory for %" PRIu64 " tensors", n_tensors), false;
    g->n_tensors = (int64_t)n_tensors;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (!parse_tensor_info(r, g, i, &g->tensors[i])) return false;
    r->where[0] = 0;
    g->t_sorted = sort_names(r, &g->tensors[0].name, sizeof *g->tensors, g->n_tensors, "tensor");
    if (!g->t_sorted) return false;

    /* the data section starts at the next multiple of the alignment; with
     * no tensors it may lie past the end (writers need not pad then) */
    g->data_offset = ((uint64_t)r->pos + g->alignment - 1) / g->alignment * g->alignment;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        char q[128];
        quote(q, sizeof q, t->name, strlen(t->name));
        snprintf(r->where, sizeof r->where, "tensor %" PRId64 " %s", i, q);
        uint64_t start, end;
        if (!core_add_ok(g->data_offset, t->offset, &start) || !core_add_ok(start, t->nbytes, &end))
            return rfail(r, KVANT_ERR_FORMAT, "data at offset %" PRIu64 " + %zu bytes overflows 64 bits", t->offset,
                         t->nbytes), false;
        if (end > r->size)
            return rfail(r, KVANT_ERR_FORMAT, "data [%" PRIu64 ", %" PRIu64 ") extends past end of file (%zu bytes)",
                         start, end, r->size), false;
        t->data = r->base + start;
    }
    r->where[0] = 0;
    return check_disjoint(r, g);
}

static gguf_ctx *parse(const uint8_t *data, size_t size, const char *name, kvant_status *st) {
    gguf_ctx *g = calloc(1, sizeof *g);
    char *nm = g ? strdup(name) : NULL;
    if (!nm) {
        free(g);
        core_fail(st, KVANT_ERR_NOMEM, "%s: out of memory", name);
        one_line(st);
        return NULL;
    }
    g->name = nm;
    g->data = data;
    g->size = size;
    reader r = {.base = data, .size = size, .pos = 0, .file = name, .st = st};
    uint64_t n_tensors = 0, n_kv = 0;
    if (!parse_header(&r, g, &n_tensors, &n_kv) || !parse_kvs(&r, g, n_kv) || !parse_tensors(&r, g, n_tensors)) {
        gguf_close(g);
        return NULL;
    }
    core_ok(st);
    return g;
}

/* ---- public: open / close -------------------------------------------------- */

/* Maps and parses the file at path.  The context owns the mapping; tensor
 * data and string values are views valid until gguf_close.  NULL on error,
 * with st->msg one line starting with path. */
gguf_ctx *gguf_open(const char *path, kvant_status *st) {
    CORE_ASSERT(path);
    core_map m;
    if (core_map_file(path, &m, st) != KVANT_OK) {
        one_line(st);
        return NULL;
    }
    gguf_ctx *g = parse(m.data, m.size, path, st);
    if (!g) {
        core_unmap(&m);
        return NULL;
    }
    g->map = m;
    return g;
}

/* Parses data[0..size), which the caller keeps alive until gguf_close. */
gguf_ctx *gguf_open_mem(const uint8_t *data, size_t size, const char *name, kvant_status *st) {
    CORE_ASSERT(data || size == 0);
    return parse(data, size, name ? name : "<memory>", st);
}

/* Frees everything the context owns (and unmaps the file it mapped). */
void gguf_close(gguf_ctx *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->keys[i]);
        free_value(&g->vals[i]);
    }
    for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->keys);
    free(g->vals);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->t_sorted);
    free(g->name);
    core_unmap(&g->map);
    free(g);
}

uint32_t gguf_version(const gguf_ctx *g) { return g->version; }
uint64_t gguf_alignment(const gguf_ctx *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf_ctx *g) { return g->data_offset; }
const char *gguf_path(const gguf_ctx *g) { return g->name; }
size_t gguf_file_size(const gguf_ctx *g) { return g->size; }
const uint8_t *gguf_file_data(const gguf_ctx *g) { return g->data; }

/* ---- public: metadata ------------------------------------------------------ */

int64_t gguf_n_kv(const gguf_ctx *g) { return g->n_kv; }

const char *gguf_kv_key(const gguf_ctx *g, int64_t i) {
    CORE_ASSERT(i >= 0 && i < g->n_kv);
    return g->keys[i];
}

const gguf_value *gguf_kv_value(const gguf_ctx *g, int64_t i) {
    CORE_ASSERT(i >= 0 && i < g->n_kv);
    return &g->vals[i];
}

/* O(log n_kv). */
const gguf_value *gguf_find(const gguf_ctx *g, const char *key) {
    const name_ix *e = find_name(g->kv_sorted, g->n_kv, key);
    return e ? &g->vals[e->i] : NULL;
}

const char *gguf_vtype_name(gguf_vtype t) {
    static const char *names[GGUF_NTYPES] = {"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                             "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};
    return (unsigned)t < GGUF_NTYPES ? names[t] : "unknown";
}

bool gguf_get_u32(const gguf_ctx *g, const char *key, uint32_t *out) {
    const gguf_value *v = gguf_find(g, key);
    if (!v) return false;
    if (is_unsigned(v->type) && v->u64 <= UINT32_MAX) { *out = (uint32_t)v->u64; return true; }
    if (is_signed(v->type) && v->i64 >= 0 && v->i64 <= UINT32_MAX) { *out = (uint32_t)v->i64; return true; }
    return false;
}

bool gguf_get_i64(const gguf_ctx *g, const char *key, int64_t *out) {
    const gguf_value *v = gguf_find(g, key);
    if (!v) return false;
    if (is_unsigned(v->type) && v->u64 <= INT64_MAX) { *out = (int64_t)v->u64; return true; }
    if (is_signed(v->type)) { *out = v->i64; return true; }
    return false;
}

bool gguf_get_f32(const gguf_ctx *g, const char *key, float *out) {
    const gguf_value *v = gguf_find(g, key);
    if (!v) return false;
    if (v->type == GGUF_FLOAT32 || v->type == GGUF_FLOAT64) *out = (float)v->f64;
    else if (is_unsigned(v->type)) *out = (float)v->u64;
    else if (is_signed(v->type)) *out = (float)v->i64;
    else return false;
    return true;
}

bool gguf_get_bool(const gguf_ctx *g, const char *key, bool *out) {
    const gguf_value *v = gguf_find(g, key);
    if (!v || v->type != GGUF_BOOL) return false;
    *out = v->b;
    return true;
}

bool gguf_get_str(const gguf_ctx *g, const char *key, gguf_str *out) {
    const gguf_value *v = gguf_find(g, key);
    if (!v || v->type != GGUF_STRING) return false;
    *out = v->str;
    return true;
}

const gguf_value *gguf_get_arr(const gguf_ctx *g, const char *key, gguf_vtype elem) {
    const gguf_value *v = gguf_find(g, key);
    if (!v || v->type != GGUF_ARRAY) return NULL;
    return elem == GGUF_ARRAY || v->arr.elem == elem ? v : NULL;
}

gguf_str gguf_arr_str(const gguf_value *v, uint64_t i) {
    CORE_ASSERT(v->type == GGUF_ARRAY && v->arr.elem == GGUF_STRING && i < v->arr.n);
    return v->arr.items[i].str;
}

double gguf_arr_f64(const gguf_value *v, uint64_t i) {
    CORE_ASSERT(v->type == GGUF_ARRAY && scalar_size(v->arr.elem) && i < v->arr.n);
    size_t sz = scalar_size(v->arr.elem);
    gguf_value x;
    decode_scalar(&x, v->arr.elem, v->arr.raw + i * sz);
    if (x.type == GGUF_FLOAT32 || x.type == GGUF_FLOAT64) return x.f64;
    if (x.type == GGUF_BOOL) return x.b;
    return is_unsigned(x.type) ? (double)x.u64 : (double)x.i64;
}

int64_t gguf_arr_i64(const gguf_value *v, uint64_t i) {
    gguf_vtype e = v->arr.elem;
    CORE_ASSERT(v->type == GGUF_ARRAY && (is_unsigned(e) || is_signed(e) || e == GGUF_BOOL) && i < v->arr.n);
    gguf_value x;
    decode_scalar(&x, e, v->arr.raw + i * scalar_size(e));
    if (e == GGUF_BOOL) return x.b;
    return is_unsigned(e) ? (int64_t)x.u64 : x.i64;
}

/* ---- public: tensors ------------------------------------------------------- */

int64_t gguf_n_tensors(const gguf_ctx *g) { return g->n_tensors; }

const gguf_tensor *gguf_tensor_at(const gguf_ctx *g, int64_t i) {
    CORE_ASSERT(i >= 0 && i < g->n_tensors);
    return &g->tensors[i];
}

/* O(log n_tensors). */
const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name) {
    const name_ix *e = find_name(g->t_sorted, g->n_tensors, name);
    return e ? &g->tensors[e->i] : NULL;
}
