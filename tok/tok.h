/* tok/ - tokenizers: SentencePiece-style BPE as llama uses it
 * (tokenizer.ggml.model = "llama": scores, byte fallback <0xXX>, the
 * leading-space rule) and GPT-2 byte-level BPE ("gpt2": merges and the
 * pre-tokenizer regex via PCRE2).  A tokenizer is immutable once built. */
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

#endif
