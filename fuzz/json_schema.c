/* json_schema.c - fuzz harness: the JSON Schema compiler (grammar/schema.c
 * over the JSON reader grammar/json.c, then the GBNF compiler) on any bytes.
 * Input: a schema, optionally followed by a NUL byte and the bytes to feed
 * the compiled grammar (fuzz/grammar_drive.inc: each byte accepted or
 * refused, the fast mask held equal to the plain one).  A schema must be
 * compiled or refused with a status (KVANT_ERR_ARG / UNSUPPORTED), never
 * overflow the stack on deep nesting, leak or take more than a second; the
 * GBNF text grammar_schema_to_gbnf gives for it must compile again. */
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
    size_t slen;
    if (!fz_compile_and_drive(data, size, grammar_from_json_schema, &slen)) return 0;
    kvant_status st = {0};
    /* the same schema as GBNF text, compiled again (as a user who edits it would) */
    char *gbnf = grammar_schema_to_gbnf((const char *)data, slen, &st);
    if (gbnf) {
        grammar *g2 = grammar_from_gbnf(gbnf, strlen(gbnf), &st);
        if (!g2) abort(); /* the compiler's own output must compile */
        grammar_free(g2);
        free(gbnf);
    }
    return 0;
}
