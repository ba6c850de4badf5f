/* gbnf.c - fuzz harness: the GBNF compiler (grammar/gbnf.c, grammar/build.c)
 * and the byte matcher (grammar/match.c) on any bytes.
 * Input: GBNF text, optionally followed by a NUL byte and the bytes to feed
 * the compiled grammar.  The text must be compiled or refused with a
 * status (never read out of bounds, leak, recurse without bound, or take
 * more than a second); when it compiles, the bytes after the NUL drive a
 * state (each one accepted or refused; a refused byte leaves the state
 * unchanged), a clone of it must agree, and now and then the fast token
 * mask (grammar_mask) is held equal to the plain one (grammar_mask_ref)
 * over a small vocabulary of single bytes and a few multi-byte tokens. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "fuzz/grammar_drive.inc"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_vocab_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t len;
    fz_compile_and_drive(data, size, grammar_from_gbnf, &len);
    return 0;
}
