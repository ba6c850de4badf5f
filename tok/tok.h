/* tok/ - tokenizers: SentencePiece-style BPE as llama uses it
 * (tokenizer.ggml.model = "llama": scores, byte fallback <0xXX>, the
 * leading-space rule, tokenizer.ggml.add_space_prefix) and GPT-2 byte-level
 * BPE ("gpt2": merges, and the pre-tokenizer of the family named by
 * tokenizer.ggml.pre: llama.cpp's regex lists, its hand-written GPT-2 /
 * Llama 3 splitters, PCRE2 for the rest).  A tokenizer is immutable once
 * built; encoding from many threads at once is safe. */
#ifndef KVANT_TOK_H
#define KVANT_TOK_H

#include "core/core.h"
#include "format/gguf.h"

typedef struct tok tok;

typedef enum { TOK_SPM, TOK_GPT2 } tok_kind;

/* From GGUF metadata (tokenizer.ggml.*). */
tok *tok_from_gguf(const gguf_ctx *g, kvant_status *st);
/* From a llama2.c tokenizer.bin (SentencePiece BPE, BOS 1, EOS 2).
 * vocab_size: the model's vocabulary size (the file does not store it). */
tok *tok_from_llama2c(const char *path, int vocab_size, kvant_status *st);
void tok_free(tok *t);

tok_kind tok_get_kind(const tok *t);
int tok_n_vocab(const tok *t);
int tok_bos(const tok *t);   /* -1 if none */
int tok_eos(const tok *t);   /* -1 if none */
/* True for every token that ends a generation as llama.cpp counts them:
 * EOS, tokenizer.ggml.eot_token_id / eom_token_id, and the families'
 * end-of-turn tokens found by text (<|eot_id|>, <|eom_id|>, <|im_end|>,
 * <|end|>, <end_of_turn>, <|endoftext|>, <EOT>). */
bool tok_is_eog(const tok *t, int32_t id);
bool tok_add_bos(const tok *t);  /* tokenizer.ggml.add_bos_token (default true for SPM) */
bool tok_add_eos(const tok *t);  /* tokenizer.ggml.add_eos_token (default false); tok_encode never adds EOS */

/* Encodes UTF-8 text into ids.  add_bos: prepend BOS.  parse_special:
 * text like "<s>" matching a control/user-defined token becomes that token.
 * Returns the token count, or -(needed) when max is too small. */
int tok_encode(const tok *t, const char *text, size_t len, bool add_bos, bool parse_special,
               int32_t *out, int max);

/* The bytes token `id` contributes to the text when it follows `prev`
 * (-1 at the start): byte tokens decode to their byte, the SentencePiece
 * space marker to ' ', the leading space after BOS/start is dropped, GPT-2
 * byte-level pieces map back to bytes, control tokens give "".
 * Writes at most cap bytes (no NUL), returns the byte count. */
int tok_decode_piece(const tok *t, int32_t prev, int32_t id, char *buf, int cap);

/* The raw vocabulary string of id (NUL-terminated). */
const char *tok_text(const tok *t, int32_t id);

/* ---- additions -------------------------------------------------------------
 * tok_encode returns INT_MIN when memory runs out.  tok_decode_piece gives 0
 * bytes for an id outside the vocabulary and cuts a piece at cap; a buffer of
 * tok_max_piece() bytes always holds a whole piece.  tok_text gives "" for an
 * id outside the vocabulary.  As in llama.cpp, user-defined tokens (type 4)
 * are matched in the text even when parse_special is false; control and
 * unknown ones only when it is true. */
int tok_max_piece(const tok *t);
/* GGUF token type of id: 1 normal, 2 unknown, 3 control, 4 user-defined,
 * 5 unused, 6 byte; 0 when undefined or out of range. */
int tok_token_type(const tok *t, int32_t id);
/* The id whose vocabulary text is exactly text[0..len), or -1. */
int32_t tok_find(const tok *t, const char *text, size_t len);

/* The bytes of token id on its own (no leading-space rule).  special:
 * control and unknown tokens give their vocabulary text instead of "".
 * Returns the byte count, or -(needed) when cap is too small (nothing
 * written); 0 for an id outside the vocabulary. */
int tok_piece(const tok *t, int32_t id, bool special, char *buf, int cap);
/* The tokenizer.ggml.pre name in use ("" for SentencePiece). */
const char *tok_pre_name(const tok *t);

/* ---- pre-tokenizers -----------------------------------------------------------
 * The split of a text into words before byte-level BPE, one family per
 * tokenizer.ggml.pre value as llama.cpp maps them: a list of regexes, each
 * splitting the pieces the one before left.  The GPT-2 and Llama 3 regexes
 * run as hand-written splitters (as in llama.cpp's unicode.cpp); the others
 * on PCRE2 over llama.cpp's text forms (Unicode classes collapsed to one
 * byte each, or code points with non-ASCII spaces as \v), so that classes,
 * \s and lookaheads behave as there.  Immutable; split from many threads. */
typedef struct tok_pre tok_pre;
enum { TOK_PRE_REGEX_ONLY = 1 }; /* tok_pre_new: PCRE2 for every regex (no hand-written splitters; tests) */
/* The pre-tokenizer named name[0..len), or NULL with KVANT_ERR_UNSUPPORTED
 * and a message naming it. */
tok_pre *tok_pre_new(const char *name, size_t len, unsigned flags, kvant_status *st);
void tok_pre_free(tok_pre *p);
/* Splits text[0..len) into words: ends[i] = byte offset where word i ends.
 * Returns the count, -(count) when more than max (ends holds the first max),
 * INT_MIN when memory runs out.  Bytes that are not UTF-8 stay in the words,
 * classified as U+FFFD (llama.cpp replaces them by it). */
int tok_pre_split(const tok_pre *p, const char *text, size_t len, uint32_t *ends, int max);

#endif
