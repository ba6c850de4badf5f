/* tok/spm.c - SentencePiece-style BPE as llama.cpp's llm_tokenizer_spm does it.
 *
 * The text (spaces escaped to U+2581, optionally with one space prepended)
 * is split into UTF-8 characters, the symbols.  A priority queue holds every
 * adjacent pair whose concatenation is a vocabulary token, ordered by that
 * token's score (higher first; equal scores: leftmost first).  The best pair
 * is merged, its two new neighbour pairs are queued, stale entries (a side
 * already merged) are skipped when popped; this repeats until the queue is
 * empty.  Each remaining symbol is then emitted as its token, or as byte
 * tokens <0xXX> when it is not in the vocabulary.
 *
 * llama.cpp's resegment step can also undo merges (rev_merge), but a merged
 * symbol is by construction a vocabulary token and an unmerged one is a
 * single character, so that branch never fires; it is left out here.
 *
 * Cost: n symbols, at most 3n queue entries, O(n log n); less where
 * bytes that no multi-byte token contains (often '\n') split the text. */
#include "tok/tok_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t prev, next;     /* neighbours in the live chain, -1 at the ends */
    uint32_t off, n;        /* bytes of the escaped text; n == 0: merged away */
} sym;

typedef struct {
    float score;            /* score of the merged token */
    int32_t left, right;    /* symbol indices */
    uint32_t size;          /* byte length of the pair when queued */
} bigram;

typedef struct {
    bigram *d;
    size_t n, cap;
    bool oom;
} heap;

/* true when a must be popped before b */
static bool before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(heap *h, bigram x) {
    if (h->oom) return;
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        bigram *d = realloc(h->d, cap * sizeof *d);
        if (!d) {
            h->oom = true;
            return;
        }
        h->d = d;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&x, &h->d[p])) break;
        h->d[i] = h->d[p];
        i = p;
    }
    h->d[i] = x;
}

static bigram heap_pop(heap *h) {
    bigram top = h->d[0], x = h->d[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(&h->d[c + 1], &h->d[c])) c++;
        if (!before(&h->d[c], &x)) break;
        h->d[i] = h->d[c];
        i = c;
    }
    if (h->n > 0) h->d[i] = x;
    return top;
}

/* Queues (left, right) when their concatenation is a token. */
static void try_add(const tok *t, const char *buf, const sym *s, int32_t left, int32_t right, heap *h) {
    if (left < 0 || right < 0) return;
    uint32_t size = s[left].n + s[right].n;
    int32_t id = tok_map_get(&t->vocab, t->blob, buf + s[left].off, size, "", 0);
    if (id < 0) return;
    heap_push(h, (bigram){t->v[id].score, left, right, size});
}

/* UTF-8 sequence length from the lead byte, as llama.cpp's unicode_len_utf8
 * (a stray continuation byte counts as one). */
static uint32_t utf8_len(uint8_t c) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

static bool is_lone(const tok *t, char c) {
    uint8_t u = (uint8_t)c;
    return u < 128 && (t->lone[u / 8] >> (u % 8) & 1);
}

/* Emits the token of one final symbol, or its bytes. */
static void emit(const tok *t, const char *p, uint32_t n, tok_ids *out) {
    int32_t id = tok_map_get(&t->vocab, t->blob, p, n, "", 0);
    if (id >= 0) {
        tok_ids_push(out, id);
        return;
    }
    for (uint32_t k = 0; k < n; k++) {
        int32_t b = t->byte_id[(uint8_t)p[k]];
        if (b < 0) b = t->unk; /* no byte token: llama.cpp would throw */
        if (b >= 0) tok_ids_push(out, b);
    }
}

void tok_spm_encode(const tok *t, const char *text, size_t len, bool prefix_space, tok_ids *out) {
    static const char space[3] = {'\xe2', '\x96', '\x81'};
    if (len == 0 && !prefix_space) return;
    if (len > (INT32_MAX - 3) / 3) { /* offsets and indices are 32-bit */
        out->oom = true;
        return;
    }
    char *buf = malloc(3 * len + 3);
    sym *s = NULL;
    heap h = {0};
    if (!buf) {
        out->oom = true;
        goto done;
    }

    /* escape: ' ' -> U+2581, with the optional leading one */
    size_t L = 0;
    if (prefix_space) memcpy(buf, space, 3), L = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') memcpy(buf + L, space, 3), L += 3;
        else buf[L++] = text[i];
    }
    /* at most L symbols (not len: escaping can split stray bytes apart) */
    s = malloc(L * sizeof *s);
    if (!s) {
        out->oom = true;
        goto done;
    }

    /* one symbol per UTF-8 character */
    int32_t n = 0;
    for (uint32_t off = 0; off < L;) {
        uint32_t cl = utf8_len((uint8_t)buf[off]);
        if (cl > L - off) cl = (uint32_t)(L - off);
        s[n] = (sym){n - 1, off + cl == L ? -1 : n + 1, off, cl};
        off += cl;
        n++;
    }

    /* A symbol that is one "lone" byte (see tok_impl.h) never merges, so the
     * runs between such symbols are merged one after the other with a small
     * queue; the result is the same as one queue over the whole text. */
    for (int32_t a = 0; a < n && !h.oom;) {
        int32_t e = a;
        while (e < n && !(s[e].n == 1 && is_lone(t, buf[s[e].off]))) e++;
        for (int32_t i = a + 1; i < e; i++) try_add(t, buf, s, i - 1, i, &h);
        while (h.n > 0 && !h.oom) {
            bigram b = heap_pop(&h);
            sym *l = &s[b.left], *r = &s[b.right];
            if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
            l->n += r->n;
            r->n = 0;
            l->next = r->next;
            if (r->next >= 0) s[r->next].prev = b.left;
            try_add(t, buf, s, l->prev, b.left, &h);
            try_add(t, buf, s, b.left, l->next, &h);
        }
        a = e + 1;
    }
    if (h.oom) {
        out->oom = true;
        goto done;
    }
    for (int32_t i = 0; n > 0 && i != -1; i = s[i].next) emit(t, buf + s[i].off, s[i].n, out);
done:
    free(h.d);
    free(s);
    free(buf);
}
