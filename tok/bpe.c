/* tok/bpe.c - GPT-2 byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * 1. Pre-tokenize: the family's pre-tokenizer (tok/pretok.c, chosen by
 *    tokenizer.ggml.pre) splits the text into words.
 * 2. Each word's bytes become characters through GPT-2's bytes_to_unicode
 *    table (printable bytes map to themselves, the other 68 to U+0100..).
 * 3. With ignore_merges (Llama 3) a word that is a vocabulary entry as it
 *    stands is that token.  Otherwise BPE per word: starting from one symbol
 *    per byte, repeatedly merge the adjacent pair with the lowest merge rank
 *    (ties: leftmost), as llama.cpp's llm_tokenizer_bpe_session: a priority
 *    queue of pairs, stale entries skipped when popped.  O(n log n) per word.
 * 4. Each final symbol is looked up in the vocabulary.
 * Decoding maps the characters of a token back to bytes. */
#include "tok/tok_impl.h"

#include <stdlib.h>
#include <string.h>

void tok_bpe_init(tok *t) {
    /* bytes_to_unicode: bytes in '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF
     * keep their value; the rest get U+0100 + n in increasing byte order */
    int n = 0;
    for (int i = 0; i < 0x144; i++) t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        t->byte_cp[b] = (uint16_t)(keep ? b : 0x100 + n++);
        t->cp_byte[t->byte_cp[b]] = (int16_t)b;
    }
}

size_t tok_bpe_decode_text(const tok *t, const char *src, size_t len, char *dst) {
    const uint8_t *s = (const uint8_t *)src;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        /* every mapped code point is below U+0800: one or two UTF-8 bytes */
        uint32_t cp = 0x200000, cl = 1;
        if (s[i] < 0x80) cp = s[i];
        else if ((s[i] & 0xE0) == 0xC0 && i + 1 < len && (s[i + 1] & 0xC0) == 0x80)
            cp = (uint32_t)(s[i] & 0x1F) << 6 | (s[i + 1] & 0x3F), cl = 2;
        if (cp < 0x144 && t->cp_byte[cp] >= 0) {
            dst[n++] = (char)t->cp_byte[cp];
        } else { /* not from the byte table (e.g. a user-added token): keep the bytes */
            memcpy(dst + n, src + i, cl);
            n += cl;
        }
        i += cl;
    }
    return n;
}

/* ---- BPE on one word --------------------------------------------------------- */

typedef struct {
    int32_t prev, next;
    uint32_t off, n;        /* bytes of the mapped word; n == 0: merged away */
} sym;

typedef struct {
    int32_t rank, left, right;
    uint32_t size;
} bigram;

typedef struct {            /* buffers reused across the words of one call */
    char *buf;              /* the word in byte-level characters (<= 2 bytes per byte) */
    sym *s;
    size_t cap;             /* capacity of s in symbols, of buf in 2*cap bytes */
    bigram *h;
    size_t hn, hcap;
    bool oom;
} work;

static bool before(const bigram *a, const bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(work *w, bigram x) {
    if (w->oom) return;
    if (w->hn == w->hcap) {
        size_t cap = w->hcap ? 2 * w->hcap : 64;
        bigram *d = realloc(w->h, cap * sizeof *d);
        if (!d) {
            w->oom = true;
            return;
        }
        w->h = d;
        w->hcap = cap;
    }
    size_t i = w->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&x, &w->h[p])) break;
        w->h[i] = w->h[p];
        i = p;
    }
    w->h[i] = x;
}

static bigram heap_pop(work *w) {
    bigram top = w->h[0], x = w->h[--w->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->hn) break;
        if (c + 1 < w->hn && before(&w->h[c + 1], &w->h[c])) c++;
        if (!before(&w->h[c], &x)) break;
        w->h[i] = w->h[c];
        i = c;
    }
    if (w->hn > 0) w->h[i] = x;
    return top;
}

/* Queues (left, right) when "left right" is a merge. */
static void try_add(const tok *t, work *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const sym *l = &w->s[left], *r = &w->s[right];
    int32_t rank = tok_map_get(&t->merges, t->blob, w->buf + l->off, l->n, w->buf + r->off, r->n);
    if (rank >= 0) heap_push(w, (bigram){rank, left, right, l->n + r->n});
}

/* Appends the ids of one symbol: its token, else, as llama.cpp, the token of
 * each single byte of its text that has one (the others are dropped).  With
 * a vocabulary holding every merge result and all 256 byte characters the
 * fallback is never taken. */
static void emit(const tok *t, const char *p, uint32_t n, tok_ids *out) {
    int32_t id = tok_map_get(&t->vocab, t->blob, p, n, "", 0);
    if (id >= 0) {
        tok_ids_push(out, id);
        return;
    }
    for (uint32_t k = 0; k < n; k++) {
        id = tok_map_get(&t->vocab, t->blob, p + k, 1, "", 0);
        if (id >= 0) tok_ids_push(out, id);
    }
}

static void encode_word(const tok *t, const uint8_t *p, size_t len, work *w, tok_ids *out) {
    if (len == 0) return;
    if (len > INT32_MAX / 2) {
        w->oom = true;
        return;
    }
    if (len > w->cap) {
        free(w->buf);
        free(w->s);
        w->cap = len > 2 * w->cap ? len : 2 * w->cap;
        w->buf = malloc(2 * w->cap);
        w->s = malloc(w->cap * sizeof *w->s);
        if (!w->buf || !w->s) {
            w->oom = true;
            return;
        }
    }
    uint32_t off = 0;
    for (size_t i = 0; i < len; i++) { /* one symbol per byte */
        uint16_t cp = t->byte_cp[p[i]];
        uint32_t cl = cp < 0x80 ? 1 : 2;
        if (cl == 1) w->buf[off] = (char)cp;
        else w->buf[off] = (char)(0xC0 | cp >> 6), w->buf[off + 1] = (char)(0x80 | (cp & 0x3F));
        w->s[i] = (sym){(int32_t)i - 1, i + 1 == len ? -1 : (int32_t)i + 1, off, cl};
        off += cl;
    }
    if (t->ignore_merges) { /* the whole word is a token: take it as it is */
        int32_t id = tok_map_get(&t->vocab, t->blob, w->buf, off, "", 0);
        if (id >= 0) {
            tok_ids_push(out, id);
            return;
        }
    }

    w->hn = 0;
    for (size_t i = 1; i < len; i++) try_add(t, w, (int32_t)i - 1, (int32_t)i);
    while (w->hn > 0 && !w->oom) {
        bigram b = heap_pop(w);
        sym *l = &w->s[b.left], *r = &w->s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->s[r->next].prev = b.left;
        try_add(t, w, l->prev, b.left);
        try_add(t, w, b.left, l->next);
    }
    if (w->oom) return;
    for (int32_t i = 0; i != -1; i = w->s[i].next) emit(t, w->buf + w->s[i].off, w->s[i].n, out);
}

void tok_bpe_encode(const tok *t, const char *text, size_t len, tok_ids *out) {
    tok_u32v ends = {0};
    work w = {0};
    if (!tok_pre_words(t->pre, text, len, &ends)) {
        out->oom = true;
        free(ends.d);
        return;
    }
    const uint8_t *s = (const uint8_t *)text;
    size_t pos = 0;
    for (size_t i = 0; i < ends.n && !w.oom && !out->oom; i++) {
        encode_word(t, s + pos, ends.d[i] - pos, &w, out);
        pos = ends.d[i];
    }
    if (w.oom) out->oom = true;
    free(w.buf);
    free(w.s);
    free(w.h);
    free(ends.d);
}
