/* format/gguf.h - GGUF v2/v3 reader (and a writer for tools and tests).
 *
 * The reader maps the file, parses and validates header, metadata and
 * tensor infos, and hands out views into the mapping.  The file is
 * untrusted: every count, string length, offset and tensor extent is
 * checked against the bytes that exist, with 64-bit overflow checks, and
 * no allocation is sized from a count that the file could not hold.  On
 * error, st->msg is one line naming the file and what is wrong.
 */
#ifndef KVANT_FORMAT_GGUF_H
#define KVANT_FORMAT_GGUF_H

#include "core/core.h"

typedef enum {
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3,
    GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7,
    GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10, GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
    GGUF_NTYPES
} gguf_vtype;

typedef struct {      /* a string inside the mapping: NOT NUL-terminated */
    const char *data;
    uint64_t len;
} gguf_str;

typedef struct gguf_value gguf_value;
struct gguf_value {
    gguf_vtype type;
    union {
        uint64_t u64;     /* UINT8..UINT64 */
        int64_t i64;      /* INT8..INT64 */
        double f64;       /* FLOAT32, FLOAT64 */
        bool b;           /* BOOL */
        gguf_str str;     /* STRING */
        struct {          /* ARRAY */
            gguf_vtype elem;
            uint64_t n;
            const uint8_t *raw;  /* scalar elements: packed little-endian in the file */
            gguf_value *items;   /* STRING / ARRAY elements: n parsed values */
        } arr;
    };
};

typedef struct {
    const char *name;    /* NUL-terminated copy */
    int type;            /* kern_type number */
    int n_dims;          /* 1..4 */
    int64_t ne[4];       /* ne[0] = row length (contiguous); unused dims are 1 */
    uint64_t offset;     /* relative to the data section */
    const void *data;    /* view into the mapping */
    size_t nbytes;
} gguf_tensor;

typedef struct gguf_ctx gguf_ctx;

gguf_ctx *gguf_open(const char *path, kvant_status *st);
/* Parses a buffer the caller keeps alive; `name` is used in messages. */
gguf_ctx *gguf_open_mem(const uint8_t *data, size_t size, const char *name, kvant_status *st);
void gguf_close(gguf_ctx *g);

uint32_t gguf_version(const gguf_ctx *g);
uint64_t gguf_alignment(const gguf_ctx *g);
const char *gguf_path(const gguf_ctx *g);
size_t gguf_file_size(const gguf_ctx *g);

/* Where the data section starts in the file (a multiple of the alignment;
 * past the end when there are no tensors and the writer did not pad). */
uint64_t gguf_data_offset(const gguf_ctx *g);
/* The whole file (the mapping, or the caller's buffer for gguf_open_mem). */
const uint8_t *gguf_file_data(const gguf_ctx *g);

/* metadata */
int64_t gguf_n_kv(const gguf_ctx *g);
const char *gguf_kv_key(const gguf_ctx *g, int64_t i);        /* NUL-terminated */
const gguf_value *gguf_kv_value(const gguf_ctx *g, int64_t i);
const gguf_value *gguf_find(const gguf_ctx *g, const char *key); /* NULL if absent */
const char *gguf_vtype_name(gguf_vtype t);

/* Typed getters: false if the key is absent or of an incompatible type
 * (integers convert when the value fits, floats accept any number). */
bool gguf_get_u32(const gguf_ctx *g, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_ctx *g, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_ctx *g, const char *key, float *out);
bool gguf_get_bool(const gguf_ctx *g, const char *key, bool *out);
bool gguf_get_str(const gguf_ctx *g, const char *key, gguf_str *out);
/* Array with elements of the given type (GGUF_ARRAY to accept any). */
const gguf_value *gguf_get_arr(const gguf_ctx *g, const char *key, gguf_vtype elem);

/* Array element access (caller checks i < v->arr.n). */
gguf_str gguf_arr_str(const gguf_value *v, uint64_t i);     /* STRING arrays */
double gguf_arr_f64(const gguf_value *v, uint64_t i);       /* any numeric array */
int64_t gguf_arr_i64(const gguf_value *v, uint64_t i);      /* any integer/bool array */

/* tensors */
int64_t gguf_n_tensors(const gguf_ctx *g);
const gguf_tensor *gguf_tensor_at(const gguf_ctx *g, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name);

/* ---- writer ---------------------------------------------------------------
 * Builds a GGUF v3 file in memory: add metadata and tensors, then write.
 * Tensor data is copied at add time (the writer owns it).
 * Adding a key that exists replaces it and moves it to the end (llama.cpp's
 * gguf_set_* rule).  "general.alignment" is the alignment: set_alignment
 * adds it as UINT32, and adding it sets the alignment (UINT32, a power of 2).
 * The void add_* calls keep their first error (bad key or value, out of
 * memory); the write calls then fail with it.  Layout: llama.cpp's. */
typedef struct gguf_writer gguf_writer;
gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment); /* default 32 */
void gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_add_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_add_str(gguf_writer *w, const char *key, const char *v);
/* scalar array: n elements of `elem`, packed little-endian in `data` */
void gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data, uint64_t n);
void gguf_writer_add_str_arr(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* Any value, arrays nested up to 8 deep (e.g. one read with gguf_kv_value,
 * to copy metadata from another file).  Serialized at once: v need not
 * outlive the call.  Scalar arrays take their elements from v->arr.raw,
 * STRING and ARRAY arrays from v->arr.items. */
void gguf_writer_add_value(gguf_writer *w, const char *key, const gguf_value *v);
/* ne[0] is the row length; data holds kern_row_bytes(type, ne[0]) * rows bytes */
kvant_code gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, int n_dims,
                                  const int64_t *ne, const void *data, kvant_status *st);
kvant_code gguf_writer_write_file(gguf_writer *w, const char *path, kvant_status *st);
/* Serializes to a malloc'd buffer (caller frees). */
kvant_code gguf_writer_write_mem(gguf_writer *w, uint8_t **out, size_t *out_size, kvant_status *st);

#endif
