/* grammar/schema_impl.h - what the JSON Schema compiler's files share
 * (schema.c the walker, schema_int.c integer bounds, schema_pattern.c
 * string patterns): the compiler's state and its failure, primitive and
 * sub-compiler entry points.  Private to grammar/schema*.c. */
#ifndef KVANT_GRAMMAR_SCHEMA_IMPL_H
#define KVANT_GRAMMAR_SCHEMA_IMPL_H

#include "grammar/grammar_impl.h"

/* the shared rules (json-*, ws), written when first used */
enum { P_WS, P_CHAR, P_STRING, P_INTPART, P_INTEGER, P_NUMBER, P_BOOLEAN, P_NULL, P_VALUE, P_OBJECT, P_ARRAY, P_N };

typedef struct {
    char *ptr, *name;
} sc_ref;

typedef struct {
    gstr out; /* the rules */
    const gjson *doc;
    kvant_status *st;
    bool failed;
    unsigned prim; /* primitives used */
    char **names;
    int n_names, cap_names;
    uint32_t *name_hash; /* 1 + index into names; 0 = empty */
    uint32_t name_cap;
    sc_ref *refs;
    int n_refs, cap_refs;
    uint32_t *ref_hash; /* 1 + index into refs by ptr; 0 = empty (a linear search was quadratic in the $refs) */
    uint32_t ref_cap;
    int name_seq;  /* the next suffix for a name taken more than NAME_TRIES times */
    char path[1024]; /* JSON pointer of the schema being compiled, for messages */
    size_t path_len;
    int depth; /* compile_rule calls in progress (sub-schemas and $ref targets): GRAMMAR_MAX_SCHEMA_DEPTH */
} sc;

/* records the first failure (code, message at the schema's place); false */
bool sc_fail(sc *c, kvant_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool sc_oom(sc *c);
/* the name of primitive P (P_WS ...), marked used */
const char *sc_use(sc *c, int p);

/* the body of an integer rule held to the schema's minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum (schema_int.c) */
bool schema_int_range(sc *c, const gjson *s, gstr *o);
/* the body of a string rule matching the regex PAT (schema_pattern.c) */
bool schema_pattern_body(sc *c, const char *pat, size_t len, gstr *o);

#endif
