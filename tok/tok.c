/* tok/tok.c - encode (special-token partition, then the SPM or GPT-2
 * encoder per text fragment), decode, accessors.  Loading is in load.c. */
#define _GNU_SOURCE /* memmem */
#include "tok/tok_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

tok_kind tok_get_kind(const tok *t) { return t->kind; }
int tok_n_vocab(const tok *t) { return t->n_vocab; }
int tok_bos(const tok *t) { return t->bos; }
int tok_eos(const tok *t) { return t->eos; }
bool tok_add_bos(const tok *t) { return t->add_bos; }
bool tok_add_eos(const tok *t) { return t->add_eos; }
const char *tok_pre_name(const tok *t) { return t->pre_name; }

bool tok_is_eog(const tok *t, int32_t id) {
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}
int tok_max_piece(const tok *t) { return t->max_piece; }

const char *tok_text(const tok *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return "";
    return t->blob + t->v[id].off;
}

int tok_token_type(const tok *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return TOK_TYPE_UNDEFINED;
    return t->v[id].type;
}

int32_t tok_find(const tok *t, const char *text, size_t len) {
    return tok_map_get(&t->vocab, t->blob, text, len, "", 0);
}

/* ---- special-token partition ----------------------------------------------
 * As llama.cpp's tokenizer_st_partition: special tokens are taken longest
 * first; each one splits every still-raw fragment at all its (leftmost,
 * non-overlapping) occurrences.  User-defined tokens are always matched,
 * control and unknown ones only with parse_special.  A token with LSTRIP
 * drops the spaces (C isspace) just before it, one with RSTRIP those just
 * after it. */
typedef struct {
    size_t off, len;        /* raw text span, when id < 0 */
    int32_t id;             /* the special token, or -1 for raw text */
} frag;

typedef struct {
    frag *d;
    size_t n, cap;
    bool oom;
} frags;

static void frags_push(frags *f, frag x) {
    if (f->oom) return;
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        frag *d = realloc(f->d, cap * sizeof *d);
        if (!d) {
            f->oom = true;
            return;
        }
        f->d = d;
        f->cap = cap;
    }
    f->d[f->n++] = x;
}

/* Splits the raw fragments of *cur at occurrences of token id into *next,
 * then swaps the two lists.  O(text length). */
static bool c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static void split_on(const tok *t, const char *text, int32_t id, frags *cur, frags *next) {
    const char *s = t->blob + t->v[id].off;
    size_t sl = t->v[id].len;
    uint8_t attr = t->v[id].attr;
    next->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        frag f = cur->d[i];
        if (f.id >= 0 || f.len < sl) {
            frags_push(next, f);
            continue;
        }
        size_t pos = f.off, end = f.off + f.len;
        for (;;) {
            const char *hit = memmem(text + pos, end - pos, s, sl);
            if (!hit) break;
            size_t at = (size_t)(hit - text), left = at;
            if (attr & TOK_ATTR_LSTRIP)
                while (left > pos && c_space(text[left - 1])) left--;
            if (left > pos) frags_push(next, (frag){pos, left - pos, -1});
            frags_push(next, (frag){0, 0, id});
            pos = at + sl;
            if (attr & TOK_ATTR_RSTRIP)
                while (pos < end && c_space(text[pos])) pos++;
        }
        if (pos < end) frags_push(next, (frag){pos, end - pos, -1});
    }
    frags tmp = *cur;
    *cur = *next;
    *next = tmp;
}

/* Appends the ids of text (no BOS) to out. */
static void encode_text(const tok *t, const char *text, size_t len, bool parse_special, tok_ids *out) {
    frags cur = {0}, next = {0};
    frags_push(&cur, (frag){0, len, -1});
    /* which bytes and byte pairs occur in the text: a special token whose
     * first two bytes never do cannot occur and costs no search (a vocabulary
     * may have thousands of them: deepseek-llm) */
    uint64_t pair[1024] = {0}, byte[4] = {0};
    const uint8_t *u = (const uint8_t *)text;
    for (size_t i = 0; i < len; i++) {
        byte[u[i] >> 6] |= 1ull << (u[i] & 63);
        if (i + 1 < len) {
            unsigned p = (unsigned)u[i] << 8 | u[i + 1];
            pair[p >> 6] |= 1ull << (p & 63);
        }
    }
    for (int k = 0; k < t->n_special && !cur.oom && !next.oom; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->v[id].type != TOK_TYPE_USER_DEFINED) continue;
        const uint8_t *s = (const uint8_t *)t->blob + t->v[id].off;
        if (t->v[id].len >= 2) {
            unsigned p = (unsigned)s[0] << 8 | s[1];
            if (!(pair[p >> 6] >> (p & 63) & 1)) continue;
        } else if (!(byte[s[0] >> 6] >> (s[0] & 63) & 1)) {
            continue;
        }
        split_on(t, text, id, &cur, &next);
    }
    if (cur.oom || next.oom) {
        out->oom = true;
    } else {
        bool prev_special = true; /* SPM: a text fragment at the start or after a special gets the space */
        for (size_t i = 0; i < cur.n && !out->oom; i++) {
            frag f = cur.d[i];
            if (f.id >= 0) {
                tok_ids_push(out, f.id);
                prev_special = true;
            } else if (t->kind == TOK_SPM) {
                tok_spm_encode(t, text + f.off, f.len, t->add_space_prefix && prev_special, out);
                prev_special = false;
            } else {
                tok_bpe_encode(t, text + f.off, f.len, out);
            }
        }
    }
    free(cur.d);
    free(next.d);
}

/* Returns the count, -(count) when it exceeds max (out untouched), or
 * INT_MIN when memory runs out.  Allocates per call (symbols, heap, output);
 * the tokenizer itself is only read, so calls may run concurrently. */
int tok_encode(const tok *t, const char *text, size_t len, bool add_bos, bool parse_special,
               int32_t *out, int max) {
    tok_ids ids = {0};
    if (add_bos && t->bos >= 0) tok_ids_push(&ids, t->bos);
    if (len > 0) encode_text(t, text, len, parse_special, &ids);
    int n = ids.n;
    if (ids.oom) n = INT_MIN;
    else if (n > max) n = -n;
    else if (n > 0) memcpy(out, ids.d, (size_t)n * sizeof *out);
    free(ids.d);
    return n;
}

/* The piece was decoded at load (load.c, make_piece); here only the
 * SentencePiece leading-space rule depends on prev.  Out-of-range ids give
 * 0 bytes; the piece is cut at cap (tok_max_piece() bytes always suffice). */
int tok_decode_piece(const tok *t, int32_t prev, int32_t id, char *buf, int cap) {
    if (id < 0 || id >= t->n_vocab || cap <= 0) return 0;
    const char *p = t->pieces + t->v[id].poff;
    size_t n = t->v[id].plen;
    if (t->kind == TOK_SPM && t->add_space_prefix && (prev < 0 || prev == t->bos) && n > 0 && p[0] == ' ') {
        p++;
        n--;
    }
    if (n > (size_t)cap) n = (size_t)cap;
    memcpy(buf, p, n);
    return (int)n;
}

int tok_piece(const tok *t, int32_t id, bool special, char *buf, int cap) {
    if (id < 0 || id >= t->n_vocab) return 0;
    const tok_entry *e = &t->v[id];
    const char *p = t->pieces + e->poff;
    size_t n = e->plen;
    if (special && (e->type == TOK_TYPE_CONTROL || e->type == TOK_TYPE_UNKNOWN)) {
        p = t->blob + e->off;
        n = e->len;
    }
    if (n > (size_t)(cap < 0 ? 0 : cap)) return -(int)n;
    memcpy(buf, p, n);
    return (int)n;
}
