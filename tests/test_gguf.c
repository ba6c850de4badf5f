/* test_gguf.c - the GGUF reader and writer.
 *
 * Real files: the numbers asserted below were read once, independently, by
 * a small Python struct-based parser (not kept in the repository) run on the
 * same files in ../shared.
 * Writer: a copy of a llama.cpp-written file through kvant's writer must be
 * byte-identical to it; a round trip covers every value type.
 * Hostile input: a folder of malformed files (tests/gguf_malformed.c),
 * every prefix of a small valid file, and random byte corruption.
 */
#include "testutil.h"

#include "format/gguf.h"
#include "kernels/types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_malformed.c"

/* ---- helpers --------------------------------------------------------------- */

static bool str_is(gguf_str s, const char *c) { return s.len == strlen(c) && memcmp(s.data, c, s.len) == 0; }

static gguf_ctx *open_ok(const char *path) {
    kvant_status st = {0};
    gguf_ctx *g = gguf_open(path, &st);
    if (!g) fail_msg("gguf_open(%s): %s", path, st.msg);
    assert_int_equal(st.code, KVANT_OK);
    return g;
}

static gguf_ctx *open_mem_ok(const uint8_t *buf, size_t n, const char *name) {
    kvant_status st = {0};
    gguf_ctx *g = gguf_open_mem(buf, n, name, &st);
    if (!g) fail_msg("gguf_open_mem(%s): %s", name, st.msg);
    return g;
}

/* a failure: non-empty, one line, starts with the file name */
static void assert_failure_msg(const kvant_status *st, const char *name) {
    assert_int_not_equal(st->code, KVANT_OK);
    assert_true(st->msg[0] != 0);
    if (strchr(st->msg, '\n')) fail_msg("message has a newline: %s", st->msg);
    if (strncmp(st->msg, name, strlen(name)) != 0 || st->msg[strlen(name)] != ':')
        fail_msg("message does not start with '%s:': %s", name, st->msg);
}

static uint8_t *write_mem_ok(gguf_writer *w, size_t *n) {
    kvant_status st = {0};
    uint8_t *buf = NULL;
    if (gguf_writer_write_mem(w, &buf, n, &st) != KVANT_OK) fail_msg("write_mem: %s", st.msg);
    return buf;
}

static const uint8_t *tdata(const gguf_tensor *t) { return t->data; }

/* ---- real files -------------------------------------------------------------- */

static void test_stories260k(void **state) {
    (void)state;
    gguf_ctx *g = open_ok(shared_path("models/stories260K.gguf"));
    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_file_size(g), 1185376);
    assert_int_equal(gguf_alignment(g), 32);
    assert_int_equal(gguf_data_offset(g), 14176);
    assert_int_equal(gguf_n_kv(g), 19);
    assert_int_equal(gguf_n_tensors(g), 48);
    assert_string_equal(gguf_path(g), shared_path("models/stories260K.gguf"));

    /* metadata, in file order */
    assert_string_equal(gguf_kv_key(g, 0), "tokenizer.ggml.tokens");
    assert_string_equal(gguf_kv_key(g, 4), "general.architecture");
    assert_string_equal(gguf_kv_key(g, 18), "llama.attention.layer_norm_rms_epsilon");
    assert_int_equal(gguf_kv_value(g, 12)->type, GGUF_UINT32);
    gguf_str s;
    assert_true(gguf_get_str(g, "general.architecture", &s) && str_is(s, "llama"));
    assert_true(gguf_get_str(g, "tokenizer.ggml.model", &s) && str_is(s, "llama"));
    static const struct { const char *key; uint32_t v; } u32s[] = {
        {"llama.embedding_length", 64},     {"llama.feed_forward_length", 172},
        {"llama.context_length", 2048},     {"llama.block_count", 5},
        {"llama.attention.head_count", 8},  {"llama.attention.head_count_kv", 4},
        {"llama.rope.dimension_count", 8},  {"tokenizer.ggml.bos_token_id", 1},
        {"tokenizer.ggml.seperator_token_id", 4294967295u}, /* sic */
    };
    uint32_t u;
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        u = 0;
        if (!gguf_get_u32(g, u32s[i].key, &u) || u != u32s[i].v) fail_msg("%s = %u", u32s[i].key, u);
    }
    int64_t i64;
    assert_true(gguf_get_i64(g, "tokenizer.ggml.seperator_token_id", &i64));
    assert_int_equal(i64, 4294967295);
    float f;
    assert_true(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f));
    assert_true(f == 1e-5f);
    assert_false(gguf_get_str(g, "llama.block_count", &s));
    assert_false(gguf_get_u32(g, "general.architecture", &u));
    assert_false(gguf_get_u32(g, "no.such.key", &u));
    assert_null(gguf_find(g, "no.such.key"));

    const gguf_value *tok = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_STRING);
    assert_non_null(tok);
    assert_null(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_INT32));
    assert_ptr_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_ARRAY), tok);
    assert_int_equal(tok->arr.n, 512);
    assert_true(str_is(gguf_arr_str(tok, 0), "<unk>"));
    assert_true(str_is(gguf_arr_str(tok, 1), "<s>"));
    assert_true(str_is(gguf_arr_str(tok, 3), "<0x00>"));
    assert_true(str_is(gguf_arr_str(tok, 300), "\xe2\x96\x81ha")); /* "▁ha" */
    assert_true(str_is(gguf_arr_str(tok, 511), "\xe2\x80\x8a"));   /* U+200A */
    const gguf_value *scores = gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_FLOAT32);
    assert_non_null(scores);
    assert_int_equal(scores->arr.n, 512);
    assert_true(gguf_arr_f64(scores, 0) == 0.0);
    assert_true(gguf_arr_f64(scores, 300) == -41.0);
    assert_true(gguf_arr_f64(scores, 511) == -252.0);
    const gguf_value *tt = gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_INT32);
    assert_non_null(tt);
    assert_int_equal(gguf_arr_i64(tt, 0), 2);
    assert_int_equal(gguf_arr_i64(tt, 1), 3);
    assert_int_equal(gguf_arr_i64(tt, 3), 6);
    assert_int_equal(gguf_arr_i64(tt, 300), 1);

    /* tensors */
    const gguf_tensor *t0 = gguf_tensor_at(g, 0);
    assert_string_equal(t0->name, "token_embd.weight");
    assert_int_equal(t0->type, KT_F32);
    assert_int_equal(t0->n_dims, 2);
    assert_int_equal(t0->ne[0], 64);
    assert_int_equal(t0->ne[1], 512);
    assert_int_equal(t0->ne[2], 1);
    assert_int_equal(t0->ne[3], 1);
    assert_int_equal(t0->offset, 0);
    assert_int_equal(t0->nbytes, 131072);
    assert_ptr_equal(tdata(t0), gguf_file_data(g) + 14176);
    float x[3];
    memcpy(x, t0->data, sizeof x);
    assert_true(x[0] == -0.29474878311157227f && x[1] == 0.5618956089019775f && x[2] == 0.1754225343465805f);
    const gguf_tensor *on = gguf_find_tensor(g, "output_norm.weight");
    assert_ptr_equal(on, gguf_tensor_at(g, 1));
    assert_int_equal(on->n_dims, 1);
    assert_int_equal(on->offset, 131072);
    memcpy(x, on->data, 4);
    assert_true(x[0] == 2.4583089351654053f);
    const gguf_tensor *fd = gguf_find_tensor(g, "blk.2.ffn_down.weight");
    assert_non_null(fd);
    assert_int_equal(fd->ne[0], 172);
    assert_int_equal(fd->ne[1], 64);
    assert_int_equal(fd->offset, 719360);
    assert_int_equal(fd->nbytes, 172 * 64 * 4);
    const gguf_tensor *last = gguf_tensor_at(g, 47);
    assert_string_equal(last->name, "blk.4.ffn_norm.weight");
    assert_int_equal(last->offset, 1170944);
    assert_ptr_equal(tdata(last) + last->nbytes, gguf_file_data(g) + gguf_file_size(g)); /* ends at EOF */
    assert_null(gguf_find_tensor(g, "blk.5.ffn_norm.weight"));
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) /* every lookup by name finds itself */
        assert_ptr_equal(gguf_find_tensor(g, gguf_tensor_at(g, i)->name), gguf_tensor_at(g, i));
    for (int64_t i = 0; i < gguf_n_kv(g); i++) assert_ptr_equal(gguf_find(g, gguf_kv_key(g, i)), gguf_kv_value(g, i));
    gguf_close(g);
}

static void test_gpt2_vocab(void **state) {
    (void)state;
    gguf_ctx *g = open_ok(shared_path("tokenizers/ggml-vocab-gpt-2.gguf"));
    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_n_tensors(g), 0);
    assert_int_equal(gguf_n_kv(g), 16);
    /* the writer did not pad: the data section would start past the end */
    assert_int_equal(gguf_file_size(g), 1766807);
    assert_int_equal(gguf_data_offset(g), 1766816);
    gguf_str s;
    assert_true(gguf_get_str(g, "general.architecture", &s) && str_is(s, "gpt2"));
    assert_true(gguf_get_str(g, "tokenizer.ggml.model", &s) && str_is(s, "gpt2"));
    assert_true(gguf_get_str(g, "tokenizer.ggml.pre", &s) && str_is(s, "gpt-2"));
    uint32_t u;
    assert_true(gguf_get_u32(g, "gpt2.embedding_length", &u));
    assert_int_equal(u, 768);
    assert_true(gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u));
    assert_int_equal(u, 50256);
    const gguf_value *tok = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_STRING);
    assert_non_null(tok);
    assert_int_equal(tok->arr.n, 50257);
    assert_true(str_is(gguf_arr_str(tok, 0), "!"));
    assert_true(str_is(gguf_arr_str(tok, 256), "\xc4\xa0t")); /* "Ġt" */
    assert_true(str_is(gguf_arr_str(tok, 50256), "<|endoftext|>"));
    const gguf_value *m = gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_STRING);
    assert_non_null(m);
    assert_int_equal(m->arr.n, 50000);
    assert_true(str_is(gguf_arr_str(m, 0), "\xc4\xa0 t"));
    assert_true(str_is(gguf_arr_str(m, 49999), "\xc4\xa0g azed"));
    const gguf_value *tt = gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_INT32);
    assert_non_null(tt);
    assert_int_equal(tt->arr.n, 50257);
    gguf_close(g);
}

static void test_kq_q4_0(void **state) {
    (void)state;
    gguf_ctx *g = open_ok(shared_path("reference/llamacpp/kq-Q4_0.gguf"));
    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_n_kv(g), 23);
    assert_int_equal(gguf_n_tensors(g), 21);
    assert_int_equal(gguf_data_offset(g), 12672);
    bool b;
    assert_true(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) && b);
    assert_true(gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) && !b);
    float f;
    assert_true(gguf_get_f32(g, "llama.rope.freq_base", &f) && f == 10000.0f);
    uint32_t u;
    assert_true(gguf_get_u32(g, "general.file_type", &u) && u == 2);
    assert_true(gguf_get_u32(g, "llama.attention.head_count_kv", &u) && u == 2);

    static const struct { const char *name; int type, n_dims; int64_t ne0, ne1; uint64_t offset; size_t nbytes; } want[] = {
        {"output.weight", KT_Q4_0, 2, 256, 512, 0, 73728},
        {"output_norm.weight", KT_F32, 1, 256, 1, 73728, 1024},
        {"token_embd.weight", KT_Q4_0, 2, 256, 512, 74752, 73728},
        {"blk.0.attn_k.weight", KT_Q4_0, 2, 256, 128, 148480, 18432},
        {"blk.0.ffn_down.weight", KT_Q4_0, 2, 768, 256, 260096, 110592},
        {"blk.1.ffn_up.weight", KT_Q4_0, 2, 256, 768, 926720, 110592},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, want[i].name);
        assert_non_null(t);
        assert_int_equal(t->type, want[i].type);
        assert_string_equal(kern_type_name(t->type), i == 1 ? "F32" : "Q4_0");
        assert_int_equal(t->n_dims, want[i].n_dims);
        assert_int_equal(t->ne[0], want[i].ne0);
        assert_int_equal(t->ne[1], want[i].ne1);
        assert_int_equal(t->offset, want[i].offset);
        assert_int_equal(t->nbytes, want[i].nbytes);
    }
    assert_ptr_equal(gguf_tensor_at(g, 20), gguf_find_tensor(g, "blk.1.ffn_up.weight"));
    /* first Q4_0 block of token_embd.weight: d (fp16) then 16 bytes of nibbles */
    static const uint8_t blk[18] = {0xcd, 0xa8, 0x64, 0x78, 0x99, 0x89, 0x67, 0x88, 0x8b,
                                    0x69, 0x97, 0x8a, 0xd7, 0x78, 0x80, 0xb9, 0x79, 0x9a};
    assert_memory_equal(gguf_find_tensor(g, "token_embd.weight")->data, blk, 18);
    gguf_close(g);
}

/* ---- the writer makes llama.cpp's layout ---------------------------------------- */

/* Copies every key and tensor of g into a new writer. */
static gguf_writer *copy_of(const gguf_ctx *g) {
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    for (int64_t i = 0; i < gguf_n_kv(g); i++) gguf_writer_add_value(w, gguf_kv_key(g, i), gguf_kv_value(g, i));
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        kvant_status st;
        if (gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &st)) fail_msg("%s", st.msg);
    }
    return w;
}

static void test_copy_is_byte_identical(void **state) {
    (void)state;
    static const char *files[] = {"models/stories260K.gguf", "reference/llamacpp/kq-Q4_0.gguf",
                                  "reference/llamacpp/kq-Q8_0.gguf", "tokenizers/ggml-vocab-gpt-2.gguf"};
    for (size_t f = 0; f < 4; f++) {
        gguf_ctx *g = open_ok(shared_path(files[f]));
        gguf_writer *w = copy_of(g);
        size_t n;
        uint8_t *buf = write_mem_ok(w, &n);
        size_t orig = gguf_file_size(g);
        if (f < 3) { /* llama.cpp's writer wrote these */
            assert_int_equal(n, orig);
        } else { /* an older writer that does not pad a file without tensors */
            assert_int_equal(n, (orig + 31) / 32 * 32);
            for (size_t i = orig; i < n; i++) assert_int_equal(buf[i], 0);
        }
        if (memcmp(buf, gguf_file_data(g), orig) != 0) fail_msg("copy of %s differs", files[f]);
        free(buf);
        gguf_writer_free(w);
        gguf_close(g);
    }
}

/* ---- round trip of every type ----------------------------------------------------- */

static void test_roundtrip_all_types(void **state) {
    (void)state;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_alignment(w, 64);
    gguf_value v;
    v = (gguf_value){.type = GGUF_UINT8, .u64 = 200};
    gguf_writer_add_value(w, "s.u8", &v);
    v = (gguf_value){.type = GGUF_INT8, .i64 = -100};
    gguf_writer_add_value(w, "s.i8", &v);
    v = (gguf_value){.type = GGUF_UINT16, .u64 = 60000};
    gguf_writer_add_value(w, "s.u16", &v);
    v = (gguf_value){.type = GGUF_INT16, .i64 = -30000};
    gguf_writer_add_value(w, "s.i16", &v);
    gguf_writer_add_u32(w, "s.u32", 4000000000u);
    gguf_writer_add_i32(w, "s.i32", -2000000000);
    gguf_writer_add_f32(w, "s.f32", 3.25f);
    gguf_writer_add_bool(w, "s.true", true);
    gguf_writer_add_bool(w, "s.false", false);
    gguf_writer_add_str(w, "s.str", "h\xc3\xa9llo");
    gguf_writer_add_str(w, "s.empty", "");
    v = (gguf_value){.type = GGUF_STRING, .str = {"a\0b", 3}};
    gguf_writer_add_value(w, "s.nul", &v);
    gguf_writer_add_u64(w, "s.u64", (1ull << 63) + 5);
    v = (gguf_value){.type = GGUF_INT64, .i64 = -(1ll << 62)};
    gguf_writer_add_value(w, "s.i64", &v);
    v = (gguf_value){.type = GGUF_FLOAT64, .f64 = 1e300};
    gguf_writer_add_value(w, "s.f64", &v);

    static const uint8_t a_u8[] = {0, 1, 255};
    static const int8_t a_i8[] = {-128, 127};
    static const uint16_t a_u16[] = {1, 65535};
    static const int16_t a_i16[] = {-32768, 5};
    static const uint32_t a_u32[] = {7, 4294967295u, 0};
    static const int32_t a_i32[] = {-1, 2147483647};
    static const float a_f32[] = {0.5f, -1e30f};
    static const uint8_t a_bool[] = {1, 0, 1};
    static const uint64_t a_u64[] = {UINT64_MAX};
    static const int64_t a_i64[] = {INT64_MIN, 3};
    static const double a_f64[] = {-2.5, 1e-300};
    gguf_writer_add_arr(w, "a.u8", GGUF_UINT8, a_u8, 3);
    gguf_writer_add_arr(w, "a.i8", GGUF_INT8, a_i8, 2);
    gguf_writer_add_arr(w, "a.u16", GGUF_UINT16, a_u16, 2);
    gguf_writer_add_arr(w, "a.i16", GGUF_INT16, a_i16, 2);
    gguf_writer_add_arr(w, "a.u32", GGUF_UINT32, a_u32, 3);
    gguf_writer_add_arr(w, "a.i32", GGUF_INT32, a_i32, 2);
    gguf_writer_add_arr(w, "a.f32", GGUF_FLOAT32, a_f32, 2);
    gguf_writer_add_arr(w, "a.bool", GGUF_BOOL, a_bool, 3);
    gguf_writer_add_arr(w, "a.u64", GGUF_UINT64, a_u64, 1);
    gguf_writer_add_arr(w, "a.i64", GGUF_INT64, a_i64, 2);
    gguf_writer_add_arr(w, "a.f64", GGUF_FLOAT64, a_f64, 2);
    gguf_writer_add_arr(w, "a.empty", GGUF_UINT32, NULL, 0);
    const char *strs[] = {"one", "", "thr\xc3\xa9\xc3\xa9"};
    gguf_writer_add_str_arr(w, "a.str", strs, 3);
    /* [["x", "yy"], [], ["zzz"]] */
    gguf_value sx[2] = {{.type = GGUF_STRING, .str = {"x", 1}}, {.type = GGUF_STRING, .str = {"yy", 2}}};
    gguf_value sz[1] = {{.type = GGUF_STRING, .str = {"zzz", 3}}};
    gguf_value as[3] = {{.type = GGUF_ARRAY, .arr = {.elem = GGUF_STRING, .n = 2, .items = sx}},
                        {.type = GGUF_ARRAY, .arr = {.elem = GGUF_STRING, .n = 0}},
                        {.type = GGUF_ARRAY, .arr = {.elem = GGUF_STRING, .n = 1, .items = sz}}};
    v = (gguf_value){.type = GGUF_ARRAY, .arr = {.elem = GGUF_ARRAY, .n = 3, .items = as}};
    gguf_writer_add_value(w, "n.strs", &v);
    /* [[[1, -2]], [[3], [4, 5, 6]]] of INT32 */
    static const int32_t i12[] = {1, -2}, i3[] = {3}, i456[] = {4, 5, 6};
    gguf_value l2a[1] = {{.type = GGUF_ARRAY, .arr = {.elem = GGUF_INT32, .n = 2, .raw = (const uint8_t *)i12}}};
    gguf_value l2b[2] = {{.type = GGUF_ARRAY, .arr = {.elem = GGUF_INT32, .n = 1, .raw = (const uint8_t *)i3}},
                         {.type = GGUF_ARRAY, .arr = {.elem = GGUF_INT32, .n = 3, .raw = (const uint8_t *)i456}}};
    gguf_value l1[2] = {{.type = GGUF_ARRAY, .arr = {.elem = GGUF_ARRAY, .n = 1, .items = l2a}},
                        {.type = GGUF_ARRAY, .arr = {.elem = GGUF_ARRAY, .n = 2, .items = l2b}}};
    v = (gguf_value){.type = GGUF_ARRAY, .arr = {.elem = GGUF_ARRAY, .n = 2, .items = l1}};
    gguf_writer_add_value(w, "n.i32", &v);

    /* tensors of several types and ranks, filled with a pattern */
    static const struct { const char *name; int type, n_dims; int64_t ne[4]; } ts[] = {
        {"w.f32", KT_F32, 2, {7, 3, 1, 1}},       {"w.f16", KT_F16, 2, {64, 2, 1, 1}},
        {"w.q4_0", KT_Q4_0, 2, {64, 3, 1, 1}},    {"w.q8_0", KT_Q8_0, 3, {32, 2, 2, 1}},
        {"w.4d", KT_F32, 4, {2, 3, 4, 5}},        {"w.1", KT_F32, 1, {1, 1, 1, 1}},
    };
    enum { NT = sizeof ts / sizeof ts[0] };
    uint8_t *data[NT];
    size_t nbytes[NT];
    kvant_status st;
    for (int i = 0; i < NT; i++) {
        nbytes[i] = kern_row_bytes(ts[i].type, ts[i].ne[0]) * (size_t)(ts[i].ne[1] * ts[i].ne[2] * ts[i].ne[3]);
        data[i] = malloc(nbytes[i]);
        for (size_t j = 0; j < nbytes[i]; j++) data[i][j] = (uint8_t)(j * 7 + (size_t)i * 31 + 1);
        assert_int_equal(gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne, data[i], &st), KVANT_OK);
    }
    assert_int_equal(nbytes[2], 3 * 2 * 18); /* Q4_0: 18 bytes per 32 */
    assert_int_equal(nbytes[3], 4 * 34);     /* Q8_0: 34 bytes per 32 */

    size_t n;
    uint8_t *buf = write_mem_ok(w, &n);
    gguf_writer_free(w);
    assert_int_equal(n % 64, 0);
    gguf_ctx *g = open_mem_ok(buf, n, "roundtrip.gguf");
    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_alignment(g), 64);
    assert_int_equal(gguf_data_offset(g) % 64, 0);
    assert_int_equal(gguf_n_kv(g), 1 + 15 + 13 + 2);
    assert_string_equal(gguf_kv_key(g, 0), "general.alignment");
    assert_string_equal(gguf_kv_key(g, 1), "s.u8");
    assert_string_equal(gguf_kv_key(g, 15), "s.f64");
    assert_string_equal(gguf_kv_key(g, 16), "a.u8");
    assert_string_equal(gguf_kv_key(g, 30), "n.i32");

    const gguf_value *x;
    x = gguf_find(g, "s.u8"); assert_int_equal(x->type, GGUF_UINT8); assert_int_equal(x->u64, 200);
    x = gguf_find(g, "s.i8"); assert_int_equal(x->type, GGUF_INT8); assert_int_equal(x->i64, -100);
    x = gguf_find(g, "s.u16"); assert_int_equal(x->type, GGUF_UINT16); assert_int_equal(x->u64, 60000);
    x = gguf_find(g, "s.i16"); assert_int_equal(x->type, GGUF_INT16); assert_int_equal(x->i64, -30000);
    x = gguf_find(g, "s.u32"); assert_int_equal(x->type, GGUF_UINT32); assert_int_equal(x->u64, 4000000000u);
    x = gguf_find(g, "s.i32"); assert_int_equal(x->type, GGUF_INT32); assert_int_equal(x->i64, -2000000000);
    x = gguf_find(g, "s.f32"); assert_int_equal(x->type, GGUF_FLOAT32); assert_true(x->f64 == 3.25);
    x = gguf_find(g, "s.true"); assert_int_equal(x->type, GGUF_BOOL); assert_true(x->b);
    x = gguf_find(g, "s.false"); assert_int_equal(x->type, GGUF_BOOL); assert_false(x->b);
    x = gguf_find(g, "s.str"); assert_int_equal(x->type, GGUF_STRING); assert_true(str_is(x->str, "h\xc3\xa9llo"));
    x = gguf_find(g, "s.empty"); assert_int_equal(x->type, GGUF_STRING); assert_int_equal(x->str.len, 0);
    x = gguf_find(g, "s.nul"); assert_int_equal(x->str.len, 3); assert_memory_equal(x->str.data, "a\0b", 3);
    x = gguf_find(g, "s.u64"); assert_int_equal(x->type, GGUF_UINT64); assert_true(x->u64 == (1ull << 63) + 5);
    x = gguf_find(g, "s.i64"); assert_int_equal(x->type, GGUF_INT64); assert_true(x->i64 == -(1ll << 62));
    x = gguf_find(g, "s.f64"); assert_int_equal(x->type, GGUF_FLOAT64); assert_true(x->f64 == 1e300);

#define CHECK_ARR(key, et, want, get)                                                    \
    do {                                                                                \
        const gguf_value *a_ = gguf_get_arr(g, key, et);                                \
        assert_non_null(a_);                                                            \
        assert_int_equal(a_->arr.n, sizeof want / sizeof want[0]);                      \
        for (uint64_t i_ = 0; i_ < a_->arr.n; i_++) assert_true(get(a_, i_) == want[i_]); \
    } while (0)
    CHECK_ARR("a.u8", GGUF_UINT8, a_u8, gguf_arr_i64);
    CHECK_ARR("a.i8", GGUF_INT8, a_i8, gguf_arr_i64);
    CHECK_ARR("a.u16", GGUF_UINT16, a_u16, gguf_arr_i64);
    CHECK_ARR("a.i16", GGUF_INT16, a_i16, gguf_arr_i64);
    CHECK_ARR("a.u32", GGUF_UINT32, a_u32, gguf_arr_i64);
    CHECK_ARR("a.i32", GGUF_INT32, a_i32, gguf_arr_i64);
    CHECK_ARR("a.f32", GGUF_FLOAT32, a_f32, gguf_arr_f64);
    CHECK_ARR("a.bool", GGUF_BOOL, a_bool, gguf_arr_i64);
    CHECK_ARR("a.i64", GGUF_INT64, a_i64, gguf_arr_i64);
    CHECK_ARR("a.f64", GGUF_FLOAT64, a_f64, gguf_arr_f64);
    CHECK_ARR("a.i16", GGUF_INT16, a_i16, gguf_arr_f64);
#undef CHECK_ARR
    x = gguf_get_arr(g, "a.u64", GGUF_UINT64);
    assert_non_null(x);
    assert_true((uint64_t)gguf_arr_i64(x, 0) == UINT64_MAX); /* documented: wraps */
    assert_true(gguf_arr_f64(x, 0) == 18446744073709551615.0);
    x = gguf_get_arr(g, "a.empty", GGUF_UINT32);
    assert_non_null(x);
    assert_int_equal(x->arr.n, 0);
    x = gguf_get_arr(g, "a.str", GGUF_STRING);
    assert_int_equal(x->arr.n, 3);
    assert_true(str_is(gguf_arr_str(x, 0), "one"));
    assert_true(str_is(gguf_arr_str(x, 1), ""));
    assert_true(str_is(gguf_arr_str(x, 2), "thr\xc3\xa9\xc3\xa9"));

    x = gguf_get_arr(g, "n.strs", GGUF_ARRAY);
    assert_non_null(x);
    assert_int_equal(x->arr.elem, GGUF_ARRAY);
    assert_int_equal(x->arr.n, 3);
    assert_int_equal(x->arr.items[0].arr.elem, GGUF_STRING);
    assert_int_equal(x->arr.items[0].arr.n, 2);
    assert_true(str_is(gguf_arr_str(&x->arr.items[0], 0), "x"));
    assert_true(str_is(gguf_arr_str(&x->arr.items[0], 1), "yy"));
    assert_int_equal(x->arr.items[1].arr.n, 0);
    assert_true(str_is(gguf_arr_str(&x->arr.items[2], 0), "zzz"));
    x = gguf_get_arr(g, "n.i32", GGUF_ARRAY);
    assert_int_equal(x->arr.n, 2);
    const gguf_value *b0 = &x->arr.items[0], *b1 = &x->arr.items[1];
    assert_int_equal(b0->arr.n, 1);
    assert_int_equal(b1->arr.n, 2);
    assert_int_equal(b0->arr.items[0].arr.elem, GGUF_INT32);
    assert_int_equal(gguf_arr_i64(&b0->arr.items[0], 1), -2);
    assert_int_equal(gguf_arr_i64(&b1->arr.items[0], 0), 3);
    assert_int_equal(b1->arr.items[1].arr.n, 3);
    assert_int_equal(gguf_arr_i64(&b1->arr.items[1], 2), 6);

    assert_int_equal(gguf_n_tensors(g), NT);
    for (int i = 0; i < NT; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        assert_string_equal(t->name, ts[i].name);
        assert_int_equal(t->type, ts[i].type);
        assert_int_equal(t->n_dims, ts[i].n_dims);
        for (int j = 0; j < 4; j++) assert_int_equal(t->ne[j], ts[i].ne[j]);
        assert_int_equal(t->nbytes, nbytes[i]);
        assert_int_equal(t->offset % 64, 0);
        assert_int_equal((size_t)(tdata(t) - buf) % 64, 0);
        assert_memory_equal(t->data, data[i], nbytes[i]);
        if (i > 0) { /* packed: each tensor starts at the previous one's padded end */
            const gguf_tensor *p = gguf_tensor_at(g, i - 1);
            assert_int_equal(t->offset, p->offset + (p->nbytes + 63) / 64 * 64);
        }
        free(data[i]);
    }
    const gguf_tensor *lt = gguf_tensor_at(g, NT - 1);
    assert_int_equal(gguf_data_offset(g) + lt->offset + 64, n); /* 4 bytes padded to 64 */
    gguf_close(g);
    free(buf);
}

/* write_file and gguf_open agree with write_mem */
static void test_write_file(void **state) {
    (void)state;
    size_t n;
    uint8_t *base = gguf_malformed_base(&n);
    assert_non_null(base);
    gguf_ctx *g = open_mem_ok(base, n, "base.gguf");
    gguf_writer *w = copy_of(g);
    const char *path = tmp_path("gguf_write_file.gguf");
    kvant_status st;
    assert_int_equal(gguf_writer_write_file(w, path, &st), KVANT_OK);
    size_t fn;
    char *file = read_file(path, &fn);
    assert_int_equal(fn, n);
    assert_memory_equal(file, base, n);
    free(file);
    gguf_ctx *h = open_ok(path);
    assert_string_equal(gguf_path(h), path);
    assert_int_equal(gguf_n_tensors(h), 3);
    assert_memory_equal(gguf_find_tensor(h, "tensor_c")->data, gguf_find_tensor(g, "tensor_c")->data, 128);
    gguf_close(h);
    /* a path that cannot be created */
    assert_int_equal(gguf_writer_write_file(w, "/nonexistent-dir/x.gguf", &st), KVANT_ERR_IO);
    assert_failure_msg(&st, "/nonexistent-dir/x.gguf");
    gguf_writer_free(w);
    gguf_close(g);
    free(base);
}

/* the base file has every kind of value; check what it holds */
static void test_base_file_values(void **state) {
    (void)state;
    size_t n;
    uint8_t *base = gguf_malformed_base(&n);
    gguf_ctx *g = open_mem_ok(base, n, "base.gguf");
    assert_int_equal(gguf_n_kv(g), 8);
    assert_int_equal(gguf_n_tensors(g), 3);
    const gguf_tensor *c = gguf_tensor_at(g, 2);
    assert_ptr_equal(tdata(c) + c->nbytes, base + n); /* ends at EOF: every prefix is invalid */
    const gguf_tensor *b = gguf_find_tensor(g, "tensor_b");
    assert_int_equal(b->type, KT_Q8_0);
    assert_int_equal(b->offset, 64);
    assert_int_equal(b->nbytes, 34);
    float y[32];
    kern_type_get(KT_Q8_0)->to_float(b->data, y, 32);
    assert_true(y[5] == 5.0f && y[31] == 31.0f);
    const gguf_value *nest = gguf_get_arr(g, "test.nested", GGUF_ARRAY);
    assert_non_null(nest);
    assert_int_equal(gguf_arr_i64(&nest->arr.items[1], 0), 3);
    gguf_close(g);
    free(base);
}

/* ---- getters ----------------------------------------------------------------------- */

static void test_getters_convert(void **state) {
    (void)state;
    gguf_writer *w = gguf_writer_new();
    gguf_value v;
    gguf_writer_add_u64(w, "u64.5", 5);
    gguf_writer_add_i32(w, "i32.-1", -1);
    gguf_writer_add_u64(w, "u64.big", 1ull << 63);
    v = (gguf_value){.type = GGUF_INT64, .i64 = 1ll << 32};
    gguf_writer_add_value(w, "i64.2e32", &v);
    v = (gguf_value){.type = GGUF_UINT8, .u64 = 200};
    gguf_writer_add_value(w, "u8.200", &v);
    v = (gguf_value){.type = GGUF_FLOAT64, .f64 = 0.25};
    gguf_writer_add_value(w, "f64", &v);
    gguf_writer_add_bool(w, "bool", true);
    gguf_writer_add_str(w, "str", "s");
    size_t n;
    uint8_t *buf = write_mem_ok(w, &n);
    gguf_writer_free(w);
    gguf_ctx *g = open_mem_ok(buf, n, "getters.gguf");
    uint32_t u = 0;
    int64_t i = 0;
    float f = 0;
    bool b = false;
    gguf_str s;
    assert_true(gguf_get_u32(g, "u64.5", &u) && u == 5);
    assert_false(gguf_get_u32(g, "i32.-1", &u));
    assert_true(gguf_get_i64(g, "i32.-1", &i) && i == -1);
    assert_false(gguf_get_u32(g, "u64.big", &u));
    assert_false(gguf_get_i64(g, "u64.big", &i));
    assert_false(gguf_get_u32(g, "i64.2e32", &u));
    assert_true(gguf_get_i64(g, "i64.2e32", &i) && i == 1ll << 32);
    assert_true(gguf_get_u32(g, "u8.200", &u) && u == 200);
    assert_true(gguf_get_f32(g, "u64.5", &f) && f == 5.0f);
    assert_true(gguf_get_f32(g, "i32.-1", &f) && f == -1.0f);
    assert_true(gguf_get_f32(g, "f64", &f) && f == 0.25f);
    assert_false(gguf_get_u32(g, "f64", &u));
    assert_false(gguf_get_bool(g, "u8.200", &b));
    assert_true(gguf_get_bool(g, "bool", &b) && b);
    assert_false(gguf_get_f32(g, "bool", &f));
    assert_false(gguf_get_f32(g, "str", &f));
    assert_true(gguf_get_str(g, "str", &s) && str_is(s, "s"));
    assert_null(gguf_get_arr(g, "str", GGUF_ARRAY));
    assert_string_equal(gguf_vtype_name(GGUF_FLOAT64), "FLOAT64");
    assert_string_equal(gguf_vtype_name((gguf_vtype)99), "unknown");
    gguf_close(g);
    free(buf);
}

/* ---- writer rules and errors ----------------------------------------------------------- */

static void test_writer_replace_and_errors(void **state) {
    (void)state;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_u32(w, "a", 1);
    gguf_writer_add_u32(w, "b", 2);
    gguf_writer_add_str(w, "a", "x"); /* replaces and moves to the end */
    gguf_writer_set_alignment(w, 64);
    gguf_writer_set_alignment(w, 128);
    kvant_status st;
    int64_t ne[2] = {32, 2};
    assert_int_equal(gguf_writer_add_tensor(w, "t", KT_Q8_0, 2, ne, NULL, &st), KVANT_OK); /* zeros */
    /* rejected tensors leave the writer usable */
    assert_int_equal(gguf_writer_add_tensor(w, "t", KT_F32, 2, ne, NULL, &st), KVANT_ERR_ARG);
    assert_non_null(strstr(st.msg, "duplicate tensor name 't'"));
    assert_int_equal(gguf_writer_add_tensor(w, "u", 4, 2, ne, NULL, &st), KVANT_ERR_ARG);
    assert_non_null(strstr(st.msg, "unknown type 4"));
    int64_t ne48[1] = {48};
    assert_int_equal(gguf_writer_add_tensor(w, "u", KT_Q4_0, 1, ne48, NULL, &st), KVANT_ERR_ARG);
    assert_non_null(strstr(st.msg, "block size 32"));
    assert_int_equal(gguf_writer_add_tensor(w, "u", KT_F32, 0, ne, NULL, &st), KVANT_ERR_ARG);
    assert_int_equal(gguf_writer_add_tensor(w, "u", KT_F32, 5, ne, NULL, &st), KVANT_ERR_ARG);
    int64_t bad[2] = {4, 0};
    assert_int_equal(gguf_writer_add_tensor(w, "u", KT_F32, 2, bad, NULL, &st), KVANT_ERR_ARG);
    bad[1] = -1;
    assert_int_equal(gguf_writer_add_tensor(w, "u", KT_F32, 2, bad, NULL, &st), KVANT_ERR_ARG);
    int64_t huge[2] = {1ll << 40, 1ll << 40};
    assert_int_equal(gguf_writer_add_tensor(w, "u", KT_F32, 2, huge, NULL, &st), KVANT_ERR_ARG);
    assert_int_equal(gguf_writer_add_tensor(w, "", KT_F32, 2, ne, NULL, &st), KVANT_ERR_ARG);
    size_t n;
    uint8_t *buf = write_mem_ok(w, &n);
    gguf_writer_free(w);
    gguf_ctx *g = open_mem_ok(buf, n, "replace.gguf");
    assert_int_equal(gguf_n_kv(g), 3);
    assert_string_equal(gguf_kv_key(g, 0), "b");
    assert_string_equal(gguf_kv_key(g, 1), "a");
    assert_string_equal(gguf_kv_key(g, 2), "general.alignment");
    gguf_str s;
    assert_true(gguf_get_str(g, "a", &s) && str_is(s, "x"));
    assert_int_equal(gguf_alignment(g), 128);
    assert_int_equal(gguf_n_tensors(g), 1);
    const gguf_tensor *t = gguf_tensor_at(g, 0);
    assert_int_equal(t->nbytes, 68);
    for (size_t i = 0; i < t->nbytes; i++) assert_int_equal(tdata(t)[i], 0);
    assert_int_equal(n, gguf_data_offset(g) + 128);
    gguf_close(g);
    free(buf);

    /* the void calls keep their first error; writing reports it */
    static const struct { const char *what, *expect; } sticky[] = {
        {"align48", "alignment 48 is not a power of 2"},
        {"align0", "alignment 0 is not a power of 2"},
        {"alignstr", "general.alignment must be UINT32, not STRING"},
        {"emptykey", "empty key"},
        {"strarr", "add_arr takes scalar elements, not STRING"},
        {"mixed", "array item 1 is UINT8, the array holds STRING"},
        {"deep", "nested more than 8 deep"},
    };
    for (size_t c = 0; c < sizeof sticky / sizeof sticky[0]; c++) {
        w = gguf_writer_new();
        gguf_writer_add_u32(w, "ok", 1);
        const char *k = sticky[c].what;
        if (!strcmp(k, "align48")) gguf_writer_set_alignment(w, 48);
        if (!strcmp(k, "align0")) gguf_writer_add_u32(w, "general.alignment", 0);
        if (!strcmp(k, "alignstr")) gguf_writer_add_str(w, "general.alignment", "32");
        if (!strcmp(k, "emptykey")) gguf_writer_add_u32(w, "", 1);
        if (!strcmp(k, "strarr")) gguf_writer_add_arr(w, "x", GGUF_STRING, "abc", 1);
        if (!strcmp(k, "mixed")) {
            gguf_value items[2] = {{.type = GGUF_STRING, .str = {"a", 1}}, {.type = GGUF_UINT8, .u64 = 1}};
            gguf_value v = {.type = GGUF_ARRAY, .arr = {.elem = GGUF_STRING, .n = 2, .items = items}};
            gguf_writer_add_value(w, "x", &v);
        }
        if (!strcmp(k, "deep")) {
            gguf_value lv[10];
            static const uint8_t one = 1;
            lv[9] = (gguf_value){.type = GGUF_ARRAY, .arr = {.elem = GGUF_UINT8, .n = 1, .raw = &one}};
            for (int d = 8; d >= 0; d--)
                lv[d] = (gguf_value){.type = GGUF_ARRAY, .arr = {.elem = GGUF_ARRAY, .n = 1, .items = &lv[d + 1]}};
            gguf_writer_add_value(w, "x", &lv[0]); /* 10 levels */
        }
        gguf_writer_add_u32(w, "later", 2); /* still accepted, but the error sticks */
        buf = (uint8_t *)"not written";
        assert_int_equal(gguf_writer_write_mem(w, &buf, &n, &st), KVANT_ERR_ARG);
        assert_null(buf);
        if (!strstr(st.msg, sticky[c].expect)) fail_msg("%s: got '%s'", k, st.msg);
        const char *path = tmp_path("gguf_sticky.gguf");
        assert_int_equal(gguf_writer_write_file(w, path, &st), KVANT_ERR_ARG);
        assert_failure_msg(&st, path);
        gguf_writer_free(w);
    }
}

/* ---- versions, nesting, small files ----------------------------------------------- */

static void test_version_2(void **state) {
    (void)state;
    size_t n;
    uint8_t *buf = gguf_malformed_base(&n);
    buf[4] = 2;
    gguf_ctx *g = open_mem_ok(buf, n, "v2.gguf");
    assert_int_equal(gguf_version(g), 2);
    assert_int_equal(gguf_n_kv(g), 8);
    assert_int_equal(gguf_n_tensors(g), 3);
    uint32_t u;
    assert_true(gguf_get_u32(g, "test.k2", &u) && u == 8);
    assert_int_equal(gguf_find_tensor(g, "tensor_c")->ne[1], 4);
    gguf_close(g);
    free(buf);
}

/* 8 nested arrays are accepted (9 are in the malformed folder) */
static void test_nesting_8_ok(void **state) {
    (void)state;
    rawbuf r = {.n = 0};
    raw_header(&r, 0, 1);
    raw_str(&r, "deep");
    raw_u32(&r, GGUF_ARRAY);
    for (int d = 0; d < 8; d++) {
        raw_u32(&r, d < 7 ? GGUF_ARRAY : GGUF_UINT8);
        raw_u64(&r, 1);
    }
    raw_bytes(&r, "\x2a", 1);
    gguf_ctx *g = open_mem_ok(r.b, r.n, "deep8.gguf");
    const gguf_value *v = gguf_find(g, "deep");
    for (int d = 0; d < 7; d++) v = &v->arr.items[0];
    assert_int_equal(v->arr.elem, GGUF_UINT8);
    assert_int_equal(gguf_arr_i64(v, 0), 42);
    gguf_close(g);
}

static void test_smallest_files(void **state) {
    (void)state;
    /* header only: no metadata, no tensors */
    rawbuf r = {.n = 0};
    raw_header(&r, 0, 0);
    gguf_ctx *g = open_mem_ok(r.b, r.n, "header.gguf");
    assert_int_equal(gguf_n_kv(g), 0);
    assert_int_equal(gguf_n_tensors(g), 0);
    assert_int_equal(gguf_alignment(g), 32);
    assert_null(gguf_find(g, "x"));
    assert_null(gguf_find_tensor(g, "x"));
    gguf_close(g);
    /* an empty writer writes the same header, padded */
    gguf_writer *w = gguf_writer_new();
    size_t n;
    uint8_t *buf = write_mem_ok(w, &n);
    assert_int_equal(n, 32);
    assert_memory_equal(buf, r.b, 24);
    gguf_writer_free(w);
    free(buf);
}

static void test_open_errors(void **state) {
    (void)state;
    kvant_status st;
    const char *p = tmp_path("no-such-file.gguf");
    assert_null(gguf_open(p, &st));
    assert_failure_msg(&st, p);
    assert_int_equal(st.code, KVANT_ERR_IO);
    assert_null(gguf_open(shared_path("models"), &st)); /* a directory */
    assert_failure_msg(&st, shared_path("models"));
    assert_null(gguf_open(shared_path("models/stories260K.bin"), &st));
    assert_failure_msg(&st, shared_path("models/stories260K.bin"));
    assert_non_null(strstr(st.msg, "not a GGUF file"));
    assert_int_equal(st.code, KVANT_ERR_FORMAT);
    assert_null(gguf_open_mem(NULL, 0, NULL, &st));
    assert_failure_msg(&st, "<memory>");
    /* control bytes in a name from the file never break the line */
    rawbuf r = {.n = 0};
    raw_header(&r, 0, 2);
    raw_str(&r, "a\nb");
    raw_u32(&r, GGUF_UINT8);
    raw_bytes(&r, "\1", 1);
    raw_str(&r, "a\nb");
    raw_u32(&r, GGUF_UINT8);
    raw_bytes(&r, "\1", 1);
    assert_null(gguf_open_mem(r.b, r.n, "ctl.gguf", &st));
    assert_failure_msg(&st, "ctl.gguf");
    assert_non_null(strstr(st.msg, "duplicate key: key 1 'a\\x0ab' repeats key 0"));
}

/* ---- hostile input -------------------------------------------------------------------- */

static void test_malformed_folder(void **state) {
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tmp_path("malformed"));
    gguf_malformed_case *cases;
    int n = gguf_malformed_write(dir, &cases);
    assert_true(n >= 30);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
        kvant_status st = {0};
        gguf_ctx *g = gguf_open(path, &st);
        if (g) {
            print_error("%s: opened, expected '%s'\n", cases[i].file, cases[i].expect);
            gguf_close(g);
            bad++;
            continue;
        }
        assert_failure_msg(&st, path);
        if (!gguf_malformed_matches(st.msg, cases[i].expect)) {
            print_error("%s: message '%s' lacks '%s'\n", cases[i].file, st.msg, cases[i].expect);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
    /* LIST names every file, in order */
    char lp[4200];
    snprintf(lp, sizeof lp, "%s/LIST", dir);
    char *list = read_file(lp, NULL);
    char *save = NULL;
    int k = 0;
    for (char *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save), k++) {
        assert_true(k < n);
        assert_string_equal(line, cases[k].file);
    }
    assert_int_equal(k, n);
    free(list);
    free(cases);
}

/* every proper prefix of a valid file fails cleanly; the buffer is an
 * exact-size heap copy, so a read past the end is caught by ASan */
static void test_every_prefix_fails(void **state) {
    (void)state;
    size_t n;
    uint8_t *base = gguf_malformed_base(&n);
    for (size_t len = 0; len <= n; len++) {
        uint8_t *b = malloc(len ? len : 1);
        memcpy(b, base, len);
        kvant_status st = {0};
        gguf_ctx *g = gguf_open_mem(len ? b : NULL, len, "prefix.gguf", &st);
        if (len < n) {
            if (g) fail_msg("prefix of %zu of %zu bytes opened", len, n);
            assert_failure_msg(&st, "prefix.gguf");
            if (!gguf_malformed_matches(st.msg, "truncated|past end of file|cannot fit"))
                fail_msg("prefix %zu: %s", len, st.msg);
        } else {
            assert_non_null(g);
            gguf_close(g);
        }
        free(b);
    }
    free(base);
}

/* touches every byte the context points at (for ASan) */
static uint64_t walk_value(const gguf_value *v) {
    uint64_t h = v->type;
    if (v->type == GGUF_STRING) {
        for (uint64_t i = 0; i < v->str.len; i++) h += (uint8_t)v->str.data[i];
    } else if (v->type == GGUF_ARRAY) {
        for (uint64_t i = 0; i < v->arr.n; i++) {
            if (v->arr.items) h += walk_value(&v->arr.items[i]);
            else {
                double d = gguf_arr_f64(v, i);
                uint64_t bits;
                memcpy(&bits, &d, 8);
                h += bits;
            }
        }
    }
    return h;
}

static void test_random_corruption(void **state) {
    (void)state;
    size_t n;
    uint8_t *base = gguf_malformed_base(&n);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int opened = 0, failed = 0;
    for (int it = 0; it < 4000; it++) {
        uint8_t *b = malloc(n);
        memcpy(b, base, n);
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int flips = 1 + (int)((rng >> 60) & 3);
        for (int k = 0; k < flips; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)((rng >> 33) % n);
            uint8_t val = (uint8_t)(rng >> 20);
            b[at] = (rng >> 28) & 1 ? val : (uint8_t)(b[at] ^ (1u << ((rng >> 40) & 7)));
        }
        kvant_status st = {0};
        gguf_ctx *g = gguf_open_mem(b, n, "fuzz.gguf", &st);
        if (g) {
            uint64_t h = 0;
            for (int64_t i = 0; i < gguf_n_kv(g); i++) h += walk_value(gguf_kv_value(g, i)) + strlen(gguf_kv_key(g, i));
            for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
                const gguf_tensor *t = gguf_tensor_at(g, i);
                assert_true(tdata(t) >= b && tdata(t) + t->nbytes <= b + n);
                for (size_t j = 0; j < t->nbytes; j++) h += tdata(t)[j];
            }
            (void)h;
            gguf_close(g);
            opened++;
        } else {
            assert_failure_msg(&st, "fuzz.gguf");
            failed++;
        }
        free(b);
    }
    /* both outcomes occur (flipping tensor data bytes keeps a file valid) */
    assert_true(opened > 100 && failed > 100);
    free(base);
}

/* ---- hostile counts: refused before anything is sized by them (README, "Hostile files") ----
 * 2^40 keys, tensors, or array items of each kind in a file of a few dozen bytes: the reader bounds every
 * count by the bytes left times the smallest size an item has, so each is refused with "cannot fit" /
 * "extends past end of file" - the checks made before allocating - and never with "out of memory" or a
 * "truncated" found after allocating 2^40 items (44 TB of gguf_value). */
static void expect_refused_early(const rawbuf *r, const char *what) {
    kvant_status st = {0};
    assert_null(gguf_open_mem(r->b, r->n, "huge.gguf", &st));
    if (st.code != KVANT_ERR_FORMAT || !gguf_malformed_matches(st.msg, "cannot fit|extends past end of file"))
        fail_msg("%s: %s", what, st.msg);
}

static void test_huge_counts_refused_early(void **state) {
    (void)state;
    const uint64_t huge = 1ull << 40;
    rawbuf r = {.n = 0};
    raw_header(&r, 0, huge);
    raw_zeros(&r, 64);
    expect_refused_early(&r, "2^40 keys");
    r.n = 0;
    raw_header(&r, huge, 1);
    raw_zeros(&r, 64);
    expect_refused_early(&r, "2^40 tensors");
    static const uint32_t elems[] = {GGUF_UINT8, GGUF_UINT64, GGUF_STRING, GGUF_ARRAY};
    for (size_t i = 0; i < sizeof elems / sizeof *elems; i++) {
        r.n = 0;
        raw_header(&r, 0, 1);
        raw_str(&r, "a");
        raw_u32(&r, GGUF_ARRAY);
        raw_u32(&r, elems[i]);
        raw_u64(&r, huge);
        raw_zeros(&r, 64);
        expect_refused_early(&r, gguf_vtype_name((gguf_vtype)elems[i]));
    }
    /* the same 2^40 one level down: an array holding one array of 2^40 strings */
    r.n = 0;
    raw_header(&r, 0, 1);
    raw_str(&r, "a");
    raw_u32(&r, GGUF_ARRAY);
    raw_u32(&r, GGUF_ARRAY);
    raw_u64(&r, 1);
    raw_u32(&r, GGUF_STRING);
    raw_u64(&r, huge);
    raw_zeros(&r, 64);
    expect_refused_early(&r, "nested");
}

/* a row of 2^62 (or 5e18) elements in a file of 100 bytes, for every tensor type: refused as not fitting
 * the file before the row-size formulas run (the fuzzer's fuzz/corpus/gguf/regress-ptq-row-bytes-overflow:
 * a PTQ type's n * bits overflowed int64, undefined behaviour under UBSan) */
static void test_huge_row_refused_every_type(void **state) {
    (void)state;
    static const uint64_t rows[] = {1ull << 62, 5067956955675385872ull};
    int checked = 0;
    for (int type = 0; type < KT_KVANT_END; type++) {
        if (!kern_type_get(type)) continue;
        for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
            rawbuf r = {.n = 0};
            raw_header(&r, 1, 0);
            raw_str(&r, "t");
            raw_u32(&r, 1);
            raw_u64(&r, rows[k]);
            raw_u32(&r, (uint32_t)type);
            raw_u64(&r, 0);
            raw_zeros(&r, 48);
            kvant_status st = {0};
            assert_null(gguf_open_mem(r.b, r.n, "row.gguf", &st));
            if (st.code != KVANT_ERR_FORMAT || !strstr(st.msg, "cannot fit in a file"))
                fail_msg("type %d, row %llu: %s", type, (unsigned long long)rows[k], st.msg);
            checked++;
        }
    }
    assert_true(checked > 60);
}

/* two tensors whose data overlap are refused: with disjoint extents the tensors' bytes sum to at most the
 * file's size, which bounds what is sized by them (converted vectors, repacked matrices) */
static void test_overlapping_tensors_refused(void **state) {
    (void)state;
    rawbuf r = {.n = 0};
    raw_header(&r, 2, 0);
    raw_str(&r, "a");
    raw_u32(&r, 1);
    raw_u64(&r, 16); /* 64 bytes at 0 */
    raw_u32(&r, KT_F32);
    raw_u64(&r, 0);
    raw_str(&r, "b");
    raw_u32(&r, 1);
    raw_u64(&r, 8); /* 32 bytes at 0 too */
    raw_u32(&r, KT_F32);
    raw_u64(&r, 0);
    raw_zeros(&r, (32 - r.n % 32) % 32);
    raw_zeros(&r, 96);
    kvant_status st = {0};
    assert_null(gguf_open_mem(r.b, r.n, "overlap.gguf", &st));
    assert_int_equal(st.code, KVANT_ERR_FORMAT);
    assert_non_null(strstr(st.msg, "overlaps tensor"));
    /* b at 64: back to back is fine */
    size_t off_b = 24 + (8 + 1 + 4 + 8 + 4 + 8) + (8 + 1 + 4 + 8 + 4);
    r.b[off_b] = 64;
    gguf_ctx *g = gguf_open_mem(r.b, r.n, "adjacent.gguf", &st);
    if (!g) fail_msg("%s", st.msg);
    assert_int_equal(gguf_n_tensors(g), 2);
    gguf_close(g);
    /* b at 32: overlaps a's last 32 bytes */
    r.b[off_b] = 32;
    assert_null(gguf_open_mem(r.b, r.n, "overlap16.gguf", &st));
    assert_non_null(strstr(st.msg, "overlaps tensor"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories260k),
        cmocka_unit_test(test_gpt2_vocab),
        cmocka_unit_test(test_kq_q4_0),
        cmocka_unit_test(test_copy_is_byte_identical),
        cmocka_unit_test(test_roundtrip_all_types),
        cmocka_unit_test(test_write_file),
        cmocka_unit_test(test_base_file_values),
        cmocka_unit_test(test_getters_convert),
        cmocka_unit_test(test_writer_replace_and_errors),
        cmocka_unit_test(test_version_2),
        cmocka_unit_test(test_nesting_8_ok),
        cmocka_unit_test(test_smallest_files),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_malformed_folder),
        cmocka_unit_test(test_every_prefix_fails),
        cmocka_unit_test(test_random_corruption),
        cmocka_unit_test(test_huge_counts_refused_early),
        cmocka_unit_test(test_huge_row_refused_every_type),
        cmocka_unit_test(test_overlapping_tensors_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
