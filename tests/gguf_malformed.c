/* tests/gguf_malformed.c - writes malformed GGUF files (see the header).
 *
 * Two ways to break a file:
 *   - patch: take the valid base file (written by kvant's gguf writer) and
 *     overwrite a field found by searching for a unique name next to it;
 *   - raw: assemble the bytes by hand, for structures the writer refuses
 *     to produce (huge counts, deep nesting, bad alignment values).
 */
#include "gguf_malformed.h"

#include "format/gguf.h"
#include "kernels/types.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- a byte buffer for raw files ------------------------------------------- */

typedef struct {
    uint8_t b[4096];
    size_t n;
} rawbuf;

static void raw_bytes(rawbuf *r, const void *p, size_t n) {
    if (r->n + n > sizeof r->b) abort(); /* a generator bug, not a test case */
    memcpy(r->b + r->n, p, n);
    r->n += n;
}
static void raw_u32(rawbuf *r, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    raw_bytes(r, x, 4);
}
static void raw_u64(rawbuf *r, uint64_t v) {
    raw_u32(r, (uint32_t)v);
    raw_u32(r, (uint32_t)(v >> 32));
}
static void raw_str(rawbuf *r, const char *s) {
    raw_u64(r, strlen(s));
    raw_bytes(r, s, strlen(s));
}
static void raw_header(rawbuf *r, uint64_t n_tensors, uint64_t n_kv) {
    raw_bytes(r, "GGUF", 4);
    raw_u32(r, 3);
    raw_u64(r, n_tensors);
    raw_u64(r, n_kv);
}
static void raw_zeros(rawbuf *r, size_t n) {
    static const uint8_t z[256];
    raw_bytes(r, z, n);
}
/* one F32 tensor [8] named "t" at offset 0, then padding and its 32 bytes */
static void raw_tensor_f32_8(rawbuf *r, uint32_t align) {
    raw_str(r, "t");
    raw_u32(r, 1);
    raw_u64(r, 8);
    raw_u32(r, KT_F32);
    raw_u64(r, 0);
    size_t a = align && align < 256 ? align : 32;
    raw_zeros(r, (a - r->n % a) % a);
    raw_zeros(r, 32);
}

/* ---- the valid base file --------------------------------------------------- */

uint8_t *gguf_malformed_base(size_t *size) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return NULL;
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u32(w, "test.k1", 7);
    gguf_writer_add_u32(w, "test.k2", 8);
    gguf_writer_add_f32(w, "test.f", 0.5f);
    gguf_writer_add_bool(w, "test.b", true);
    const char *strs[] = {"a", "bc"};
    gguf_writer_add_str_arr(w, "test.strs", strs, 2);
    int32_t ints[3] = {-1, 0, 1};
    gguf_writer_add_arr(w, "test.ints", GGUF_INT32, ints, 3);
    static const uint8_t u8a[] = {1, 2}, u8b[] = {3};
    gguf_value inner[2] = {
        {.type = GGUF_ARRAY, .arr = {.elem = GGUF_UINT8, .n = 2, .raw = u8a}},
        {.type = GGUF_ARRAY, .arr = {.elem = GGUF_UINT8, .n = 1, .raw = u8b}},
    };
    gguf_value nested = {.type = GGUF_ARRAY, .arr = {.elem = GGUF_ARRAY, .n = 2, .items = inner}};
    gguf_writer_add_value(w, "test.nested", &nested);

    float a[16], c[32];
    for (int i = 0; i < 16; i++) a[i] = (float)i;
    for (int i = 0; i < 32; i++) c[i] = (float)-i;
    uint8_t b[34] = {0}; /* one Q8_0 block: d = 1.0 (0x3c00), q = 0..31 */
    b[0] = 0x00, b[1] = 0x3c;
    for (int i = 0; i < 32; i++) b[2 + i] = (uint8_t)i;
    int64_t ne_a[2] = {8, 2}, ne_b[1] = {32}, ne_c[2] = {8, 4};
    kvant_status st;
    uint8_t *buf = NULL;
    if (gguf_writer_add_tensor(w, "tensor_a", KT_F32, 2, ne_a, a, &st) ||
        gguf_writer_add_tensor(w, "tensor_b", KT_Q8_0, 1, ne_b, b, &st) ||
        gguf_writer_add_tensor(w, "tensor_c", KT_F32, 2, ne_c, c, &st) || gguf_writer_write_mem(w, &buf, size, &st)) {
        fprintf(stderr, "gguf_malformed_base: %s\n", st.msg);
        buf = NULL;
    }
    gguf_writer_free(w);
    return buf;
}

/* ---- cases ----------------------------------------------------------------------- */

typedef struct {
    const char *dir;
    gguf_malformed_case *cases;
    int n, cap;
    FILE *list;
    int err;
} gen;

static void emit(gen *g, const char *file, const char *expect, const void *data, size_t n) {
    if (g->err) return;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        gguf_malformed_case *c = realloc(g->cases, (size_t)g->cap * sizeof *c);
        if (!c) { g->err = 1; return; }
        g->cases = c;
    }
    gguf_malformed_case *c = &g->cases[g->n++];
    snprintf(c->file, sizeof c->file, "%s", file);
    snprintf(c->expect, sizeof c->expect, "%s", expect);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g->dir, file);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) g->err = 1;
    if (f && fclose(f) != 0) g->err = 1;
    fprintf(g->list, "%s\n", file);
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* the byte offset of the first occurrence of s in the base file */
static size_t find(const uint8_t *buf, size_t n, const char *s) {
    size_t len = strlen(s);
    for (size_t i = 0; i + len <= n; i++)
        if (memcmp(buf + i, s, len) == 0) return i;
    abort(); /* the base file changed: a generator bug */
}

enum { P_U32, P_U64, P_BYTE };
/* Emits the base file with one field at off overwritten by v. */
static void patched(gen *g, const uint8_t *base, size_t n, const char *file, const char *expect, size_t off, int kind,
                    uint64_t v) {
    uint8_t *b = malloc(n);
    if (!b) { g->err = 1; return; }
    memcpy(b, base, n);
    if (kind == P_U32) put32(b + off, (uint32_t)v);
    else if (kind == P_U64) put64(b + off, v);
    else b[off] = (uint8_t)v;
    emit(g, file, expect, b, n);
    free(b);
}

static void patch_cases(gen *g, const uint8_t *base, size_t n) {
    /* header */
    patched(g, base, n, "bad_magic.gguf", "not a GGUF file", 0, P_U32, 0x4c4d4747); /* "GGML" */
    patched(g, base, n, "version_0.gguf", "unsupported GGUF version 0", 4, P_U32, 0);
    patched(g, base, n, "version_1.gguf", "GGUF version 1 is not supported", 4, P_U32, 1);
    patched(g, base, n, "version_99.gguf", "unsupported GGUF version 99", 4, P_U32, 99);
    patched(g, base, n, "big_endian.gguf", "big-endian", 4, P_U32, 0x03000000);
    patched(g, base, n, "n_tensors_2e63.gguf", "n_tensors = 9223372036854775808", 8, P_U64, 1ull << 63);
    patched(g, base, n, "n_kv_2e63.gguf", "n_kv = 9223372036854775808", 16, P_U64, 1ull << 63);
    patched(g, base, n, "n_kv_1000.gguf", "n_kv = 1000", 16, P_U64, 1000);

    /* metadata: general.architecture is key 0, a STRING "llama" */
    size_t k = find(base, n, "general.architecture");
    patched(g, base, n, "key_len_2e63.gguf", "key length 9223372036854775808", k - 8, P_U64, 1ull << 63);
    patched(g, base, n, "key_len_past_eof.gguf", "key length", k - 8, P_U64, n);
    patched(g, base, n, "key_with_nul.gguf", "contains a NUL byte", k + 7, P_BYTE, 0);
    patched(g, base, n, "key_empty_len.gguf", "empty key", k - 8, P_U64, 0);
    patched(g, base, n, "value_type_13.gguf", "unknown value type 13", k + 20, P_U32, 13);
    patched(g, base, n, "value_type_huge.gguf", "unknown value type 4294967295", k + 20, P_U32, 0xffffffffu);
    patched(g, base, n, "string_len_2e63.gguf", "string length 9223372036854775808", k + 24, P_U64, 1ull << 63);
    patched(g, base, n, "string_len_past_eof.gguf", "string length", k + 24, P_U64, n);
    size_t k2 = find(base, n, "test.k2");
    patched(g, base, n, "duplicate_key.gguf", "duplicate key", k2 + 6, P_BYTE, '1');
    size_t ka = find(base, n, "test.ints");
    patched(g, base, n, "array_elem_type_99.gguf", "unknown element type 99", ka + 9 + 4, P_U32, 99);
    patched(g, base, n, "array_len_past_eof.gguf", "extends past end of file", ka + 9 + 8, P_U64, n);

    /* tensor infos: tensor_b is Q8_0 [32] at offset 64; tensor_c F32 [8, 4] last */
    size_t tb = find(base, n, "tensor_b") + 8, tc = find(base, n, "tensor_c") + 8;
    patched(g, base, n, "duplicate_tensor.gguf", "duplicate tensor", tb - 1, P_BYTE, 'a');
    patched(g, base, n, "tensor_name_nul.gguf", "contains a NUL byte", tb - 2, P_BYTE, 0);
    patched(g, base, n, "tensor_name_empty.gguf", "empty tensor name", tb - 16, P_U64, 0);
    patched(g, base, n, "tensor_name_len_2e63.gguf", "tensor name length 9223372036854775808", tb - 16, P_U64,
            1ull << 63);
    patched(g, base, n, "n_dims_0.gguf", "n_dims = 0 is not in 1..4", tb, P_U32, 0);
    patched(g, base, n, "n_dims_5.gguf", "n_dims = 5 is not in 1..4", tb, P_U32, 5);
    patched(g, base, n, "ne_0.gguf", "ne[0] is 0", tb + 4, P_U64, 0);
    patched(g, base, n, "ne_negative.gguf", "ne[0] = -32 is negative", tb + 4, P_U64, (uint64_t)-32);
    patched(g, base, n, "ne_not_block_multiple.gguf", "not a multiple of the Q8_0 block size 32", tb + 4, P_U64, 48);
    patched(g, base, n, "tensor_type_4.gguf", "unknown tensor type 4", tb + 12, P_U32, 4);
    patched(g, base, n, "tensor_type_huge.gguf", "unknown tensor type 2147483648", tb + 12, P_U32, 0x80000000u);
    patched(g, base, n, "offset_unaligned.gguf", "offset 80 is not a multiple of the alignment 32", tb + 16, P_U64, 80);
    patched(g, base, n, "offset_huge.gguf", "overflows 64 bits", tb + 16, P_U64, UINT64_MAX - 31);
    patched(g, base, n, "data_past_eof.gguf", "extends past end of file", tc + 24, P_U64, 256);
    patched(g, base, n, "ne1_0.gguf", "ne[1] is 0", tc + 12, P_U64, 0);
    {
        uint8_t *b = malloc(n);
        if (!b) { g->err = 1; return; }
        memcpy(b, base, n);
        put64(b + tc + 4, 1ull << 32); /* 2^32 x 2^32 elements */
        put64(b + tc + 12, 1ull << 32);
        emit(g, "ne_count_overflow.gguf", "element count overflows 63 bits", b, n);
        put64(b + tc + 4, 4);          /* 2^62 elements, 2^64 bytes (a short row: */
        put64(b + tc + 12, 1ull << 60); /* a row longer than the file is refused first) */
        emit(g, "ne_bytes_overflow.gguf", "size in bytes", b, n);
        free(b);
    }

    /* truncations: a dense sample of prefixes (the test checks every one) */
    static const char *trunc_msg = "truncated|past end of file|cannot fit";
    size_t step = n / 24 ? n / 24 : 1;
    for (size_t len = 0; len < n; len += step) {
        char name[64];
        snprintf(name, sizeof name, "truncated_%05zu.gguf", len);
        emit(g, name, trunc_msg, base, len);
    }
    emit(g, "truncated_last_byte.gguf", trunc_msg, base, n - 1);
}

static void raw_cases(gen *g) {
    rawbuf r;
    /* arrays whose element count the file cannot hold */
    static const struct { const char *file; uint32_t elem; const char *expect; } arrays[] = {
        {"array_u8_2e62.gguf", GGUF_UINT8, "array at offset 41 of 4611686018427387904 UINT8 elements extends past"},
        {"array_u64_2e62.gguf", GGUF_UINT64, "4611686018427387904 UINT64 elements extends past end of file"},
        {"array_str_2e62.gguf", GGUF_STRING, "4611686018427387904 STRING elements cannot fit"},
        {"array_arr_2e62.gguf", GGUF_ARRAY, "4611686018427387904 ARRAY elements cannot fit"},
    };
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        r.n = 0;
        raw_header(&r, 0, 1);
        raw_str(&r, "a.key");
        raw_u32(&r, GGUF_ARRAY);
        raw_u32(&r, arrays[i].elem);
        raw_u64(&r, 1ull << 62);
        raw_zeros(&r, 64);
        emit(g, arrays[i].file, arrays[i].expect, r.b, r.n);
    }

    /* 9 nested arrays (8 are allowed) */
    r.n = 0;
    raw_header(&r, 0, 1);
    raw_str(&r, "deep");
    raw_u32(&r, GGUF_ARRAY);
    for (int d = 0; d < 9; d++) {
        raw_u32(&r, d < 8 ? GGUF_ARRAY : GGUF_UINT8);
        raw_u64(&r, 1);
    }
    raw_zeros(&r, 1);
    emit(g, "nesting_9_deep.gguf", "nested more than 8 deep", r.b, r.n);

    /* general.alignment: bad values and type */
    static const struct { const char *file; uint32_t v; } aligns[] = {
        {"alignment_0.gguf", 0}, {"alignment_3.gguf", 3}, {"alignment_48.gguf", 48}};
    for (size_t i = 0; i < 3; i++) {
        r.n = 0;
        raw_header(&r, 1, 1);
        raw_str(&r, "general.alignment");
        raw_u32(&r, GGUF_UINT32);
        raw_u32(&r, aligns[i].v);
        raw_tensor_f32_8(&r, aligns[i].v);
        char expect[64];
        snprintf(expect, sizeof expect, "general.alignment = %u is not a power of 2", aligns[i].v);
        emit(g, aligns[i].file, expect, r.b, r.n);
    }
    r.n = 0;
    raw_header(&r, 1, 1);
    raw_str(&r, "general.alignment");
    raw_u32(&r, GGUF_UINT64);
    raw_u64(&r, 32);
    raw_tensor_f32_8(&r, 32);
    emit(g, "alignment_u64.gguf", "general.alignment must be UINT32, not UINT64", r.b, r.n);

    /* a key longer than 64 KiB (all of it present) */
    {
        size_t len = 70000, n = 24 + 8 + len + 4 + 1;
        uint8_t *b = calloc(1, n);
        if (!b) { g->err = 1; return; }
        memcpy(b, "GGUF", 4);
        put32(b + 4, 3);
        put64(b + 16, 1);
        put64(b + 24, len);
        memset(b + 32, 'k', len);
        emit(g, "key_too_long.gguf", "is 70000 bytes long (limit 65535)", b, n);
        free(b);
    }

    /* the smallest files */
    emit(g, "empty.gguf", "truncated: magic at offset 0 needs 4 bytes, file ends at 0", "", 0);
    emit(g, "magic_only.gguf", "truncated: version", "GGUF", 4);
    r.n = 0;
    raw_header(&r, 0, 0);
    emit(g, "header_short.gguf", "truncated: key-value count", r.b, 20);
}

int gguf_malformed_write(const char *dir, gguf_malformed_case **cases) {
    *cases = NULL;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return -1;
    size_t n;
    uint8_t *base = gguf_malformed_base(&n);
    if (!base) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/LIST", dir);
    gen g = {.dir = dir, .list = fopen(path, "w")};
    if (!g.list) {
        free(base);
        return -1;
    }
    patch_cases(&g, base, n);
    raw_cases(&g);
    if (fclose(g.list) != 0) g.err = 1;
    free(base);
    if (g.err) {
        free(g.cases);
        return -1;
    }
    *cases = g.cases;
    return g.n;
}

int gguf_malformed_matches(const char *msg, const char *expect) {
    const char *p = expect;
    for (;;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        char alt[96];
        snprintf(alt, sizeof alt, "%.*s", (int)len, p);
        if (strstr(msg, alt)) return 1;
        if (!bar) return 0;
        p = bar + 1;
    }
}
