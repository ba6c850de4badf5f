/* testutil.h - helpers shared by the cmocka tests. */
#ifndef KVANT_TESTUTIL_H
#define KVANT_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kvant.h"

/* "<shared>/rel" in one of 8 static buffers used in turn (up to 8 at a time) */
const char *shared_path(const char *rel);
/* "<build>/tests/tmp/name", from the same 8 buffers */
const char *tmp_path(const char *name);
/* Reads a whole file (malloc'd, NUL-terminated); fails the test if absent. */
char *read_file(const char *path, size_t *size);
/* Parses the first `[ ... ]` integer list after "key" in a JSON text. */
int json_int_array(const char *json, const char *key, int32_t *out, int max);
/* Runs a shell command, captures stdout (malloc'd) and the exit status. */
char *run_capture(const char *cmd, int *exit_status);

/* llama.cpp's tokenizer vectors: the strings of an .inp file (split on
 * "\n__ggml_vocab_test__\n", as test-tokenizer-0.cpp does) and the ids of the
 * matching .out lines.  rel: "tokenizers/ggml-vocab-NAME.gguf" under shared. */
typedef struct {
    char **inp;
    size_t *inp_len;
    int32_t **ids;
    int *n_ids;
    int n;
} tok_vectors;
void read_vectors(const char *rel, tok_vectors *v);
void free_vectors(tok_vectors *v);

/* The plain path with a sampler, what the engine tests hold the engine to: a
 * kvant_seq of 512, the prompt accepted by the sampler (so only generated
 * tokens count) and forwarded, then sample / accept / forward up to ng tokens
 * into out.  A token equal to eos ends it unstored (-1: never).  Returns how
 * many tokens are in out. */
int plain_sampled(kvant_model *m, const int32_t *prompt, int np, int ng, const kvant_sampling *sp, int32_t eos,
                  int32_t *out);

#endif
