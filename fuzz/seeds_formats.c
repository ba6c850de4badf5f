/* seeds_formats.c - writes the seed inputs of the file-format harnesses:
 * fuzz/corpus/gguf and gguf_run (tiny GGUF models made by kvant's own
 * writer, format/gguf_write.c) and fuzz/corpus/llama2c (a tiny llama2.c checkpoint
 * with a cut-down tokenizer.bin, in fuzz/llama2c.c's input layout).
 * Each file is a few KB, so the fuzzer mutates models that load: several
 * architectures (llama, qwen2 with biases, qwen3 and gemma3 with q/k norms,
 * phi3 with fused tensors, a 2-expert llama MoE), a SentencePiece and a
 * GPT-2 BPE vocabulary, F32, F16, Q8_0 and Q4_0 tensors.
 *
 *   cmake --build build --target kvant-fuzz-seeds
 *   ./build/fuzz/kvant-fuzz-seeds fuzz/corpus ../shared/models/tok512.bin
 *
 * Deterministic (a fixed LCG), so running it again changes nothing.  The
 * regression inputs (regress-*) are not written by it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/gguf.h"
#include "kernels/types.h"

static uint64_t g_rng = 42;
static float frand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffff) / 65536.0f - 0.5f;
}

static const char *g_dir;

static int write_bytes(const char *sub, const char *name, const void *data, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, sub);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/%s/%s", g_dir, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "seeds: cannot write %s\n", path);
        if (f) fclose(f);
        return 1;
    }
    fclose(f);
    printf("%-40s %7zu bytes\n", path, n);
    return 0;
}

/* a tensor of ne0 x ne1 random values (norms: around 1), stored as type */
static void tensor(gguf_writer *w, const char *name, int type, int64_t ne0, int64_t ne1, bool norm) {
    const int64_t n = ne0 * ne1;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = norm ? 1.0f + 0.1f * frand() : frand();
    const size_t bytes = kern_row_bytes(type, ne0) * (size_t)ne1;
    void *q = malloc(bytes);
    if (type == KT_F32) memcpy(q, x, bytes);
    else
        for (int64_t r = 0; r < ne1; r++)
            kern_type_get(type)->from_float_ref(x + r * ne0, (uint8_t *)q + (size_t)r * kern_row_bytes(type, ne0), ne0);
    const int64_t ne[2] = {ne0, ne1};
    kvant_status st = {0};
    if (gguf_writer_add_tensor(w, name, type, ne1 > 1 ? 2 : 1, ne, q, &st)) {
        fprintf(stderr, "seeds: %s: %s\n", name, st.msg);
        exit(1);
    }
    free(q);
    free(x);
}

/* SentencePiece vocabulary of V tokens: <unk> <s> </s>, byte tokens, pieces */
static void vocab_spm(gguf_writer *w, int V) {
    static const char *const pieces[] = {"\xe2\x96\x81", "\xe2\x96\x81" "t", "he", "\xe2\x96\x81" "the", "a", "b", "c",
                                         "\xe2\x96\x81" "a", "in", "\xe2\x96\x81" "in", "\xc3\xa4", "\xe4\xb8\xad"};
    char **tok = calloc((size_t)V, sizeof *tok);
    float *score = calloc((size_t)V, sizeof *score);
    int32_t *type = calloc((size_t)V, sizeof *type);
    const char *ctl[3] = {"<unk>", "<s>", "</s>"};
    int np = 0;
    for (int i = 0; i < V; i++) {
        tok[i] = malloc(16);
        if (i < 3) snprintf(tok[i], 16, "%s", ctl[i]), type[i] = i ? 3 : 2;
        else if (i < 3 + 16) snprintf(tok[i], 16, "<0x%02X>", i - 3 + 0x20), type[i] = 6; /* bytes 0x20..0x2f */
        else if (np < (int)(sizeof pieces / sizeof *pieces)) snprintf(tok[i], 16, "%s", pieces[np++]), type[i] = 1;
        else snprintf(tok[i], 16, "x%d", i), type[i] = 1;
        score[i] = -(float)i;
    }
    gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)V);
    gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, score, (uint64_t)V);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, type, (uint64_t)V);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    for (int i = 0; i < V; i++) free(tok[i]);
    free(tok), free(score), free(type);
}

/* GPT-2 byte-level vocabulary of V tokens with a few merges; pre = tokenizer.ggml.pre */
static void vocab_bpe(gguf_writer *w, int V, const char *pre) {
    static const char *const base[] = {"a", "b", "c", "d", "e", "h", "t", "\xc4\xa0" /* G-dot: space */, "\xc4\x8a",
                                       "th", "\xc4\xa0t", "he", "the", "\xc4\xa0the", "<|endoftext|>", "<|im_end|>"};
    static const char *const merges[] = {"t h", "\xc4\xa0 t", "h e", "th e", "\xc4\xa0t he"};
    char **tok = calloc((size_t)V, sizeof *tok);
    int32_t *type = calloc((size_t)V, sizeof *type);
    for (int i = 0; i < V; i++) {
        tok[i] = malloc(24);
        if (i < (int)(sizeof base / sizeof *base)) snprintf(tok[i], 24, "%s", base[i]);
        else snprintf(tok[i], 24, "%c%c", 'a' + i % 26, 'a' + i / 26 % 26);
        type[i] = strncmp(tok[i], "<|", 2) ? 1 : 3;
    }
    gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_add_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)V);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, type, (uint64_t)V);
    gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", merges, sizeof merges / sizeof *merges);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 14);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 15);
    for (int i = 0; i < V; i++) free(tok[i]);
    free(tok), free(type);
}

typedef struct {
    const char *file, *arch;
    int C, F, H, Hkv, L, V, type, n_expert;
    bool bias, qk_norm, post_norms, fused, bpe, tied;
} shape;

static int write_model(const shape *s) {
    gguf_writer *w = gguf_writer_new();
    const int D = s->C / s->H, QD = s->H * D, KVD = s->Hkv * D;
    char k[128], n[96];
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", s->arch, suffix), k)
#define TN(l, suffix) (snprintf(n, sizeof n, "blk.%d.%s", l, suffix), n)
    gguf_writer_add_str(w, "general.architecture", s->arch);
    gguf_writer_add_str(w, "general.name", s->file);
    gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)s->C);
    gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)s->F);
    gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)s->L);
    gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)s->H);
    gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->Hkv);
    gguf_writer_add_u32(w, KEY("context_length"), 64);
    gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    gguf_writer_add_f32(w, KEY("rope.freq_base"), 10000.0f);
    if (!strcmp(s->arch, "gemma3")) {
        gguf_writer_add_u32(w, KEY("attention.sliding_window"), 8);
        gguf_writer_add_u32(w, KEY("attention.key_length"), (uint32_t)D);
        gguf_writer_add_u32(w, KEY("attention.value_length"), (uint32_t)D);
    }
    if (s->n_expert) {
        gguf_writer_add_u32(w, KEY("expert_count"), (uint32_t)s->n_expert);
        gguf_writer_add_u32(w, KEY("expert_used_count"), 1);
    }
    if (s->bpe) vocab_bpe(w, s->V, !strcmp(s->arch, "qwen2") ? "qwen2" : "llama-bpe");
    else vocab_spm(w, s->V);

    const int T = s->type; /* matrices; norms and biases stay F32 (F16 for the F16 file: converted at load) */
    const int VT = T == KT_F16 ? KT_F16 : KT_F32;
    tensor(w, "token_embd.weight", T, s->C, s->V, false);
    tensor(w, "output_norm.weight", VT, s->C, 1, true);
    if (!s->tied) tensor(w, "output.weight", T, s->C, s->V, false);
    for (int l = 0; l < s->L; l++) {
        tensor(w, TN(l, "attn_norm.weight"), VT, s->C, 1, true);
        if (s->fused) {
            tensor(w, TN(l, "attn_qkv.weight"), T, s->C, QD + 2 * KVD, false);
        } else {
            tensor(w, TN(l, "attn_q.weight"), T, s->C, QD, false);
            tensor(w, TN(l, "attn_k.weight"), T, s->C, KVD, false);
            tensor(w, TN(l, "attn_v.weight"), T, s->C, KVD, false);
        }
        if (s->bias) {
            tensor(w, TN(l, "attn_q.bias"), KT_F32, QD, 1, false);
            tensor(w, TN(l, "attn_k.bias"), KT_F32, KVD, 1, false);
            tensor(w, TN(l, "attn_v.bias"), KT_F32, KVD, 1, false);
        }
        if (s->qk_norm) {
            tensor(w, TN(l, "attn_q_norm.weight"), KT_F32, D, 1, true);
            tensor(w, TN(l, "attn_k_norm.weight"), KT_F32, D, 1, true);
        }
        tensor(w, TN(l, "attn_output.weight"), T, QD, s->C, false);
        if (s->post_norms) tensor(w, TN(l, "post_attention_norm.weight"), KT_F32, s->C, 1, true);
        tensor(w, TN(l, "ffn_norm.weight"), VT, s->C, 1, true);
        if (s->n_expert) {
            tensor(w, TN(l, "ffn_gate_inp.weight"), KT_F32, s->C, s->n_expert, false);
            tensor(w, TN(l, "ffn_gate_exps.weight"), T, s->C, s->n_expert * s->F, false);
            tensor(w, TN(l, "ffn_up_exps.weight"), T, s->C, s->n_expert * s->F, false);
            tensor(w, TN(l, "ffn_down_exps.weight"), T, s->F, s->n_expert * s->C, false);
        } else if (s->fused) {
            tensor(w, TN(l, "ffn_up.weight"), T, s->C, 2 * s->F, false);
            tensor(w, TN(l, "ffn_down.weight"), T, s->F, s->C, false);
        } else {
            tensor(w, TN(l, "ffn_gate.weight"), T, s->C, s->F, false);
            tensor(w, TN(l, "ffn_up.weight"), T, s->C, s->F, false);
            tensor(w, TN(l, "ffn_down.weight"), T, s->F, s->C, false);
        }
        if (s->post_norms) tensor(w, TN(l, "post_ffw_norm.weight"), KT_F32, s->C, 1, true);
    }
#undef KEY
#undef TN
    uint8_t *buf;
    size_t size;
    kvant_status st = {0};
    if (gguf_writer_write_mem(w, &buf, &size, &st)) {
        fprintf(stderr, "seeds: %s: %s\n", s->file, st.msg);
        return 1;
    }
    gguf_writer_free(w);
    int rc = write_bytes("gguf", s->file, buf, size) | write_bytes("gguf_run", s->file, buf, size);
    free(buf);
    return rc;
}

/* a vocabulary-only GGUF (as llama.cpp's ggml-vocab-*.gguf) and a header-only one */
static int write_small_ggufs(void) {
    int rc = 0;
    gguf_writer *w = gguf_writer_new();
    vocab_bpe(w, 40, "qwen2");
    uint8_t *buf;
    size_t size;
    kvant_status st = {0};
    if (gguf_writer_write_mem(w, &buf, &size, &st)) return 1;
    rc |= write_bytes("gguf", "vocab-only-bpe", buf, size);
    free(buf);
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u64(w, "general.u64", 1);
    gguf_writer_add_i32(w, "general.i32", -1);
    gguf_writer_add_bool(w, "general.flag", true);
    const uint8_t bytes[3] = {1, 2, 3};
    gguf_writer_add_arr(w, "general.bytes", GGUF_UINT8, bytes, 3);
    gguf_writer_set_alignment(w, 64);
    gguf_writer_add_u32(w, "general.alignment", 64);
    if (gguf_writer_write_mem(w, &buf, &size, &st)) return 1;
    rc |= write_bytes("gguf", "metadata-only", buf, size);
    free(buf);
    gguf_writer_free(w);
    return rc;
}

/* ---- llama2.c: fuzz/llama2c.c's layout is u32 checkpoint length, checkpoint, tokenizer.bin ---- */

/* the first n tokens of a tokenizer.bin (max_token_length, then score, len, bytes each) */
static size_t cut_tokenizer(const uint8_t *tb, size_t size, int n, uint8_t *out) {
    size_t pos = 4;
    for (int i = 0; i < n && pos + 8 <= size; i++) {
        uint32_t len;
        memcpy(&len, tb + pos + 4, 4);
        pos += 8 + len;
    }
    memcpy(out, tb, pos);
    return pos;
}

static int write_llama2c(const char *tok512, int C, int F, int L, int H, int Hkv, int V, int ctx, bool shared,
                         const char *name) {
    FILE *f = fopen(tok512, "rb");
    if (!f) { fprintf(stderr, "seeds: cannot open %s\n", tok512); return 1; }
    static uint8_t tb[1 << 16];
    size_t tsize = fread(tb, 1, sizeof tb, f);
    fclose(f);
    const int D = C / H;
    const int64_t floats = (int64_t)V * C + L * C + (int64_t)L * C * H * D + 2 * (int64_t)L * C * Hkv * D +
                           (int64_t)L * H * D * C + L * C + 3 * (int64_t)L * C * F + C + (int64_t)ctx * D +
                           (shared ? 0 : (int64_t)V * C);
    const size_t ck = 28 + (size_t)floats * 4;
    uint8_t *buf = malloc(4 + ck + tsize);
    uint32_t ck32 = (uint32_t)ck;
    memcpy(buf, &ck32, 4);
    int32_t hdr[7] = {C, F, L, H, Hkv, shared ? V : -V, ctx};
    memcpy(buf + 4, hdr, sizeof hdr);
    float *wts = (float *)(buf + 4 + 28);
    for (int64_t i = 0; i < floats; i++) wts[i] = frand();
    size_t tn = cut_tokenizer(tb, tsize, V, buf + 4 + ck);
    int rc = write_bytes("llama2c", name, buf, 4 + ck + tn);
    free(buf);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s CORPUS_DIR TOK512_BIN\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    static const shape shapes[] = {
        /* file              arch      C   F  H Hkv L  V  type    experts bias   qk_norm post   fused  bpe    tied */
        {"llama-spm-f32",    "llama",  8, 16, 2, 1, 1, 32, KT_F32,  0,    false, false,  false, false, false, false},
        {"llama-spm-f16",    "llama",  8, 16, 2, 2, 2, 32, KT_F16,  0,    false, false,  false, false, false, true},
        {"llama-spm-q8_0",   "llama", 32, 32, 2, 1, 1, 32, KT_Q8_0, 0,    false, false,  false, false, false, true},
        {"llama-bpe-q4_0",   "llama", 32, 32, 4, 2, 1, 24, KT_Q4_0, 0,    false, false,  false, false, true,  true},
        {"llama-moe-f32",    "llama",  8,  8, 2, 1, 1, 24, KT_F32,  2,    false, false,  false, false, false, true},
        {"qwen2-bpe-f32",    "qwen2",  8, 16, 2, 1, 1, 24, KT_F32,  0,    true,  false,  false, false, true,  true},
        {"qwen3-spm-f32",    "qwen3",  8, 16, 2, 1, 1, 24, KT_F32,  0,    false, true,   false, false, false, true},
        {"gemma3-spm-f32",   "gemma3", 8, 16, 2, 1, 1, 24, KT_F32,  0,    false, true,   true,  false, false, true},
        {"phi3-spm-f32",     "phi3",   8, 16, 2, 2, 1, 24, KT_F32,  0,    false, false,  false, true,  false, false},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) rc |= write_model(&shapes[i]);
    rc |= write_small_ggufs();
    rc |= write_llama2c(argv[2], 8, 16, 1, 2, 2, 32, 8, true, "shared-8x1");
    rc |= write_llama2c(argv[2], 8, 8, 2, 2, 1, 24, 4, false, "unshared-gqa-8x2");
    return rc;
}
