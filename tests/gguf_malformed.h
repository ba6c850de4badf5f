/* tests/gguf_malformed.h - a generator of malformed GGUF files, for the
 * reader's tests and the CLI's.  Not a test on its own: a test #includes
 * gguf_malformed.c (the test CMake compiles only tests/test_*.c).
 *
 * Every file it writes must be rejected by gguf_open with a one-line
 * message that names the file and contains the case's `expect` text.
 */
#ifndef KVANT_TESTS_GGUF_MALFORMED_H
#define KVANT_TESTS_GGUF_MALFORMED_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char file[64];    /* file name inside the folder */
    char expect[96];  /* the message must contain one of these '|'-separated texts */
} gguf_malformed_case;

/* A small valid GGUF v3 file (metadata of several kinds, nested arrays,
 * three tensors F32/Q8_0/F32) whose last tensor ends exactly at the end
 * of the file, so that every proper prefix of it is invalid.
 * Returns a malloc'd buffer (caller frees) and its size, NULL on failure. */
uint8_t *gguf_malformed_base(size_t *size);

/* Writes every malformed variant into dir (created if missing) and the
 * list of their file names, one per line, into dir/LIST.  Returns the
 * number of cases and sets *cases to a malloc'd array of them (caller
 * frees); -1 on an I/O error. */
int gguf_malformed_write(const char *dir, gguf_malformed_case **cases);

/* True if msg contains one of the '|'-separated alternatives in expect. */
int gguf_malformed_matches(const char *msg, const char *expect);

#endif
