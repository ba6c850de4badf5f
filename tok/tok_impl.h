/* tok/tok_impl.h - private to tok/: the tokenizer struct, the string hash
 * table shared by the vocabulary and the merge ranks, a growable id vector,
 * the Unicode class table, the pre-tokenizer internals and the per-kind
 * encoders.  Nothing outside tok/ includes this file. */
#ifndef KVANT_TOK_IMPL_H
#define KVANT_TOK_IMPL_H

#include "tok/tok.h"

/* GGUF token types (tokenizer.ggml.token_type) */
enum {
    TOK_TYPE_UNDEFINED = 0, TOK_TYPE_NORMAL = 1, TOK_TYPE_UNKNOWN = 2, TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4, TOK_TYPE_UNUSED = 5, TOK_TYPE_BYTE = 6,
};

/* ---- string hash table --------------------------------------------------
 * Open addressing, linear probing.  A key is the pair of byte strings (a, b)
 * (b empty for plain strings); the table stores offsets into a blob the
 * owner keeps alive and passes to every call.  Built once, read-only after:
 * lookups from many threads are safe. */
typedef struct {
    uint32_t a_off, a_len, b_off, b_len;
    int32_t value;          /* -1: empty slot */
} tok_slot;

typedef struct {
    tok_slot *slots;
    uint64_t mask;          /* capacity - 1 (capacity a power of two) */
} tok_map;

/* Sizes the table for n keys; false when memory runs out. */
bool tok_map_init(tok_map *m, uint64_t n);
void tok_map_free(tok_map *m);
/* Inserts (a, b) -> value unless the key is already there (the first value
 * wins, like std::unordered_map::emplace).  The table never fills: it was
 * sized for the keys at init. */
void tok_map_put(tok_map *m, const char *blob, uint32_t a_off, uint32_t a_len,
                 uint32_t b_off, uint32_t b_len, int32_t value);
/* The value of key (a, b), or -1. */
int32_t tok_map_get(const tok_map *m, const char *blob, const char *a, size_t a_len,
                    const char *b, size_t b_len);

/* ---- growable id vector (encode output) ---------------------------------- */
typedef struct {
    int32_t *d;
    int n, cap;
    bool oom;               /* a push failed: the result is incomplete */
} tok_ids;

void tok_ids_push(tok_ids *v, int32_t id);

/* ---- the tokenizer --------------------------------------------------------- */
/* ---- growable u32 vector (word ends, chunk lengths) ----------------------- */
typedef struct {
    uint32_t *d;
    size_t n, cap;
    bool oom;
} tok_u32v;

void tok_u32v_push(tok_u32v *v, uint32_t x);

/* ---- Unicode classes (tok/unicode.c, table in tok/unicode_data.c) ----------
 * One general-category group per code point plus a whitespace bit, as
 * llama.cpp's unicode_cpt_flags: \p{N} \p{L} \p{Z} \p{M} \p{P} \p{S} \p{C}, \s. */
enum {
    TOKU_N = 0x01, TOKU_L = 0x02, TOKU_Z = 0x04, TOKU_M = 0x08,
    TOKU_P = 0x10, TOKU_S = 0x20, TOKU_C = 0x40, TOKU_WS = 0x80,
};
extern const uint32_t tok_uni_ranges[]; /* first code point << 8 | flags, ascending */
extern const int tok_uni_n_ranges;
extern const uint8_t tok_uni_latin1[256]; /* flags of U+0000..U+00FF */
/* Flags of a code point; beyond U+10FFFF: TOKU_C (some class, never 0). */
uint8_t tok_uni_flags(uint32_t cp);
/* One code point from s[0..n), n > 0, decoded as llama.cpp's
 * unicode_cpt_from_utf8 (no overlong or surrogate checks); a byte that
 * starts no complete sequence gives U+FFFD and *len = 1. */
uint32_t tok_uni_decode(const uint8_t *s, size_t n, uint32_t *len);
/* llama.cpp's unicode_cpt_is_han: CJK ideograph blocks. */
bool tok_uni_is_han(uint32_t cp);

/* ---- pre-tokenizer (tok/pretok.c) ------------------------------------------ */
enum {
    TOK_PRE_IGNORE_MERGES = 1, /* a word that is a whole vocabulary entry is taken as it is (Llama 3) */
    TOK_PRE_ADD_BOS = 2,       /* add_bos_token defaults to true */
    TOK_PRE_NO_BOS = 4,        /* no default BOS id (chatglm) */
};
/* The family's TOK_PRE_* flags. */
unsigned tok_pre_flags(const tok_pre *p);
/* Appends the end byte offset of every word of text[0..len) to *ends
 * (words are non-empty and in order).  False when memory runs out. */
bool tok_pre_words(const tok_pre *p, const char *text, size_t len, tok_u32v *ends);

/* ---- the tokenizer --------------------------------------------------------- */
enum { TOK_ATTR_LSTRIP = 1, TOK_ATTR_RSTRIP = 2 }; /* special tokens eat the spaces beside them */

typedef struct {
    uint32_t off, len;      /* vocabulary text in t->blob (NUL-terminated there) */
    uint32_t poff, plen;    /* decoded piece in t->pieces (not NUL-terminated) */
    float score;
    uint8_t type;           /* TOK_TYPE_* */
    uint8_t attr;           /* TOK_ATTR_* */
} tok_entry;

struct tok {
    tok_kind kind;
    int n_vocab;
    tok_entry *v;           /* (n_vocab) */
    char *blob;             /* token texts, then (GPT-2) merge strings */
    size_t blob_size;
    char *pieces;           /* decoded pieces, see tok_decode_piece */
    int max_piece;          /* longest decoded piece in bytes */
    tok_map vocab;          /* text -> id */

    int bos, eos, unk;      /* -1 if none */
    int32_t eog[32];        /* end-of-generation ids (eos, eot, eom, FIM pad/repo/sep, the families' end-of-turn) */
    int n_eog;
    bool add_bos;
    bool add_eos;           /* tokenizer.ggml.add_eos_token (tok_add_eos) */
    bool add_space_prefix;  /* SPM: prepend ' ' to the text (and drop it on decode) */

    int32_t *special;       /* ids matched in the raw text before encoding, */
    int n_special;          /* longest text first (control, unknown, user-defined) */

    /* SPM */
    int32_t byte_id[256];   /* token for byte fallback, -1 if none */
    uint8_t lone[16];       /* bit c: ASCII byte c is in no token of 2+ bytes, so
                               it never merges and splits the text for free */

    /* GPT-2 byte-level BPE */
    tok_map merges;         /* (left, right) -> rank */
    tok_pre *pre;           /* pre-tokenizer (tokenizer.ggml.pre) */
    char pre_name[64];      /* its name */
    bool ignore_merges;     /* see TOK_PRE_IGNORE_MERGES */
    uint16_t byte_cp[256];  /* byte -> code point of GPT-2's bytes_to_unicode */
    int16_t cp_byte[0x144]; /* its inverse, -1 where no byte maps */
};

/* Encodes one text fragment (no special tokens inside) and appends ids.
 * SPM: the caller has already added the prefix space; spaces are escaped
 * here.  Allocation failure sets out->oom. */
void tok_spm_encode(const tok *t, const char *text, size_t len, bool prefix_space, tok_ids *out);
void tok_bpe_encode(const tok *t, const char *text, size_t len, tok_ids *out);

/* GPT-2 set-up: the byte table (t->byte_cp, t->cp_byte); the pre-tokenizer
 * and the merges are added by the loader. */
void tok_bpe_init(tok *t);
/* Decodes a GPT-2 byte-level token text into bytes; dst has room for len
 * bytes (a piece is never longer than its text).  Returns the byte count. */
size_t tok_bpe_decode_text(const tok *t, const char *src, size_t len, char *dst);

#endif
