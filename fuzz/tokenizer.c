/* tokenizer.c - fuzz harness: both tokenizers' encode and decode (tok/)
 * on any bytes, valid UTF-8 or not.  Input: one control byte, then the text.
 *   bits 0-2: the vocabulary (mod the ones loaded): the built-in model's
 *             SentencePiece one (stories260K), and when ../shared is there
 *             llama-spm (SentencePiece, 32000), llama-bpe (GPT-2 BPE with
 *             the hand-written Llama 3 splitter), qwen2 (its regex run by
 *             PCRE2) and gpt-2 (the hand-written GPT-2 splitter)
 *   bit 3: add BOS; bit 4: parse special tokens
 * Invariants (abort() when broken):
 *   - the sizing call (max 0) and the real call agree on the count;
 *     every id is inside the vocabulary;
 *   - GPT-2 BPE is byte-level: decoding gives the input back, whatever the
 *     bytes (without parse_special: with it, control tokens decode to "");
 *   - SentencePiece with byte fallback gives valid UTF-8 back (tests/test_tok.c
 *     test_invalid_utf8 says why broken UTF-8 next to a space cannot), when
 *     the text holds no U+2581 (the space marker, which decodes to ' ');
 *   - tok_piece and tok_text of every id stay in bounds. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "model/model.h"
#include "tok/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

enum { MAX_VOCABS = 5 };
static tok *g_tok[MAX_VOCABS];
static bool g_byte_fallback[MAX_VOCABS]; /* SPM: every byte has a <0xXX> token */
static int g_n;

static void add(tok *t) {
    if (!t) return;
    bool all = true;
    for (int b = 0; b < 256 && all; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        all = tok_find(t, s, 6) >= 0;
    }
    g_byte_fallback[g_n] = all;
    g_tok[g_n++] = t;
}

static tok *load_vocab(const char *name) {
#ifdef KVANT_SHARED_DIR
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/ggml-vocab-%s.gguf", KVANT_SHARED_DIR, name);
    kvant_status st = {0};
    gguf_ctx *g = gguf_open(path, &st);
    if (!g) return NULL; /* ../shared absent: fuzz the built-in vocabulary only */
    tok *t = tok_from_gguf(g, &st);
    if (!t) {
        fprintf(stderr, "tokenizer fuzz: %s\n", st.msg);
        abort();
    }
    gguf_close(g); /* the tokenizer keeps copies */
    return t;
#else
    (void)name;
    return NULL;
#endif
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    size_t size;
    const uint8_t *data = model_builtin_gguf(&size);
    kvant_status st = {0};
    gguf_ctx *g = gguf_open_mem(data, size, "builtin", &st);
    tok *t = g ? tok_from_gguf(g, &st) : NULL;
    if (!t) {
        fprintf(stderr, "tokenizer fuzz: built-in vocabulary: %s\n", st.msg);
        abort();
    }
    gguf_close(g);
    add(t);
    add(load_vocab("llama-spm"));
    add(load_vocab("llama-bpe"));
    add(load_vocab("qwen2"));
    add(load_vocab("gpt-2"));
    return 0;
}

static bool valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (!k || i + k > n) return false;
        uint32_t cp = k == 1 ? c : (uint32_t)(c & (0x7f >> k));
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || g_n == 0) return 0;
    const int which = (data[0] & 7) % g_n;
    const bool bos = data[0] & 8, special = data[0] & 16;
    const tok *t = g_tok[which];
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;

    int need = tok_encode(t, text, len, bos, special, NULL, 0);
    if (need == INT_MIN) return 0; /* out of memory: a refusal */
    if (need < 0) need = -need;
    int32_t *ids = malloc(((size_t)need + 1) * sizeof *ids);
    if (!ids) return 0;
    const int n = tok_encode(t, text, len, bos, special, ids, need);
    if (n != need) abort();
    const int V = tok_n_vocab(t);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) abort();

    /* decode: the pieces one after another */
    const int max = tok_max_piece(t);
    char *out = malloc((size_t)n * (size_t)max + 1);
    char *piece = malloc((size_t)max + 1);
    if (!out || !piece) abort();
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        int k = tok_decode_piece(t, i ? ids[i - 1] : -1, ids[i], out + pos, max);
        if (k < 0 || k > max) abort();
        pos += (size_t)k;
        int p = tok_piece(t, ids[i], special, piece, max);
        if (p > max) abort();
        (void)tok_text(t, ids[i]);
        (void)tok_token_type(t, ids[i]);
    }
    if (!special) {
        bool check;
        if (tok_get_kind(t) == TOK_GPT2) check = true;
        else check = g_byte_fallback[which] && valid_utf8(data + 1, len) && !memmem(text, len, "\xe2\x96\x81", 3);
        if (check && (pos != len || memcmp(out, text, len) != 0)) {
            fprintf(stderr, "tokenizer fuzz: vocabulary %d: %zu bytes in, %zu bytes decoded\n", which, len, pos);
            abort();
        }
    }
    /* ids outside the vocabulary decode to nothing */
    if (tok_decode_piece(t, -1, V, piece, max) != 0 || tok_decode_piece(t, -1, -1, piece, max) != 0) abort();
    free(piece);
    free(out);
    free(ids);
    return 0;
}
