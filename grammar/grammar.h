/* grammar/ - constrained decoding: a grammar (llama.cpp's GBNF, or a JSON
 * Schema compiled to the same form) as a pushdown automaton over BYTES, and
 * the mask of the tokens a vocabulary may emit next.
 *
 * Objects and who owns what
 *   grammar        compiled, immutable: share it between sequences and
 *                  threads.  From GBNF text, a JSON Schema, or built in.
 *   grammar_vocab  the vocabulary as byte strings, in a trie; immutable, one
 *                  per model, shared by every sequence and thread.
 *   grammar_state  one sequence's position in one grammar: mutable, used by
 *                  one thread at a time (it caches transitions, see below).
 *                  It points at its grammar, which must outlive it.
 *
 * Bytes, not code points.  Every character class is compiled into UTF-8
 * byte sequences ([é-ë] -> \xC3 [\xA9-\xAB]), so the automaton advances one
 * byte at a time and a token that ends in the middle of a multi-byte
 * character simply leaves the state in the middle of that character; the
 * next token continues it.  Only valid UTF-8 (no surrogates, nothing above
 * U+10FFFF, no overlong forms) is ever accepted by a class or by `.`.
 *
 * State.  A set of stacks (llama.cpp's llama_grammar stacks): each stack is
 * the positions still to match in the rules entered so far.  Stacks are
 * persistent (a frame is (position, parent frame), hash-consed), so a state
 * is a sorted set of frame ids, itself hash-consed; a step on a byte maps a
 * state to a state.  grammar_state caches those transitions (a lazily built
 * DFA, as RE2 does for regexes): along a typical output the same few states
 * recur (inside a string, a byte that is not `"` or `\` leads back to the
 * same state), so most steps are one table lookup.  The caches are bounded:
 * when they pass a soft limit they are dropped and rebuilt from the current
 * state between calls (never in the middle of one).  A step that would make
 * more than GRAMMAR_MAX_STACKS stacks is refused and recorded: the call
 * then reports an error (grammar_state_error) instead of silently narrowing
 * the language.
 *
 * Masking.  grammar_mask walks the vocabulary's trie with the automaton, so
 * a prefix shared by many tokens is matched once, and a subtree that is
 * free text for the state is accepted whole without walking it: its bytes
 * step the state along one chain, character by character (inside a string
 * the chain is a loop; under maxLength it counts down and must outlast the
 * subtree), non-ASCII characters included when everything below is valid
 * UTF-8.  The last GM_MEMO (8) masks are remembered by state, so a state
 * met again (it recurs token after token inside a long string) costs
 * writing the mask out.  grammar_mask_ref is the plain reference: every
 * token fed from the current state byte by byte on its own, without the
 * trie, the shortcuts or the caches.  The two are held equal by
 * tests/test_grammar.c.  Measured (bench/grammar_bench.c, a 10-field
 * schema, one core of a shared Xeon): mean 11 us per mask at 32000 tokens,
 * 42 us at 151936 (the slowest state 0.7 ms), 80x-600x faster than the
 * reference; kvant-grammar-bench prints the current figures.
 *
 * End of generation.  The tokens named eog at grammar_vocab_new are allowed
 * exactly where the grammar can end (grammar_can_end); their bytes are never
 * matched.  Tokens given with length 0 (control tokens: build the byte
 * strings with kvant_vocab_piece(v, id, false, ...), which gives them no
 * bytes) are never allowed.
 *
 * The compile-time checks: every referenced rule is defined, a rule named
 * "root" exists, no rule is left-recursive (a rule that can reach itself
 * before consuming a byte, other than by a tail call: that would make the
 * stacks grow without bound; the message names the rule), and alternatives
 * that can never finish (a rule without a way out) are dropped, so from any
 * state the grammar can still be completed; a grammar that matches nothing
 * is refused.
 *
 * Errors: NULL (or false / -1) with st filled: KVANT_ERR_ARG for a malformed
 * grammar or schema (the message says where: "GBNF line 3, column 7: ..."
 * or "JSON Schema at /properties/age: ..."), KVANT_ERR_UNSUPPORTED for a
 * JSON Schema keyword or pattern feature kvant cannot compile (the message
 * names it: "unsupported JSON Schema keyword 'patternProperties'"),
 * KVANT_ERR_NOMEM. */
#ifndef KVANT_GRAMMAR_H
#define KVANT_GRAMMAR_H

#include "core/core.h"

typedef struct grammar grammar;
typedef struct grammar_vocab grammar_vocab;
typedef struct grammar_state grammar_state;

enum {
    /* stacks in one state; more is an error (ambiguity explosion).  A mask
     * costs about 0.1 ms per stack over a 152K vocabulary, and the engine
     * masks every grammar request in each step, so one hostile grammar
     * ("root ::= . root*") at 2409 stacks made every step 240 ms longer.
     * 256 holds that to about 25 ms; the schemas and grammars of the tests
     * and the benchmark never pass 10 stacks. */
    GRAMMAR_MAX_STACKS = 256,
    GRAMMAR_MAX_REPEAT = 100000, /* largest m or n in {m,n} (and minLength, maxItems...) */
    GRAMMAR_MAX_ELEMS = 1 << 22, /* compiled grammar size, in elements */
    GRAMMAR_MAX_SCHEMA_DEPTH = 256, /* JSON Schema sub-schemas nested in one another, $ref chains included */
};

/* ---- grammars ----------------------------------------------------------------
 * GBNF as llama.cpp reads it (grammars/README.md there):
 *   name ::= alternatives          rules; names are [A-Za-z0-9_-]+; "root" is the start
 *   a b c   a | b   ( ... )        sequence, alternatives, group
 *   x* x+ x? x{m} x{m,} x{m,n} x{,n}   repetition (of the element just before)
 *   "text"                         literal; escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH
 *   [a-z0-9_] [^"\\]               class, negated class (code points; same escapes)
 *   .                              any one character (any valid UTF-8 code point)
 *   # comment                      to the end of the line
 * A rule ends at the end of its line, except inside ( ) and after |; a line
 * that starts with | continues the rule above (a small extension).  \xHH
 * is the code point U+00HH (as in llama.cpp), written as its UTF-8 bytes.
 * A rule defined twice is an error (llama.cpp lets the later one win).
 * Not supported: llama.cpp's token references (<[1234]>, <think>), refused
 * by name. */
grammar *grammar_from_gbnf(const char *text, size_t len, kvant_status *st);

/* JSON Schema (the subset below) compiled to GBNF (grammar_schema_to_gbnf)
 * and from there to a grammar.  schema_json NULL, empty, "{}" or "true":
 * any JSON value.
 *
 * Supported keywords
 *   type          "object" "array" "string" "number" "integer" "boolean"
 *                 "null", or a list of them (one alternative each); absent:
 *                 inferred from the keywords present, else any value
 *   object        properties (emitted in declaration order; a property not in
 *                 required may be left out), required, additionalProperties:
 *                 false (THE DEFAULT when properties is present: only the
 *                 declared properties, as OpenAI's strict mode and llama.cpp
 *                 do), or true / a schema when there are no properties (a
 *                 map: any keys); an object schema with neither is any object
 *   array         items (a schema; true; false), prefixItems (a tuple; draft-7
 *                 "items": [..] too), minItems, maxItems
 *   string        minLength, maxLength (in characters), pattern (an ECMA
 *                 regex subset: literals, escapes \d \w \s \D \W \S \. etc.,
 *                 classes [a-z] [^...], ., groups ( ) (?: ), |, * + ? {m}
 *                 {m,} {m,n}, lazy ? ignored; ^ and $ only at the ends, and
 *                 a pattern without them may have anything around the match),
 *                 format: date, time, date-time, uuid
 *   integer       minimum, maximum, exclusiveMinimum, exclusiveMaximum (as
 *                 numbers, or draft-4 booleans), to +-10^18
 *   enum, const   any JSON values, written compactly (an enum as a trie of
 *                 rules, so 20000 values cost a few stacks, not 20000)
 *   anyOf, oneOf  alternatives (oneOf is treated as anyOf: exclusivity is not
 *                 checked); allOf with one schema
 *   $ref          "#", "#/$defs/..." and "#/definitions/..." or any JSON
 *                 pointer into the same document (recursion is fine)
 *   annotations   title description default examples $schema $id $comment
 *                 $anchor readOnly writeOnly deprecated discriminator
 *                 contentEncoding contentMediaType, any x-*: ignored; $defs
 *                 and definitions: read through $ref
 * Refused (KVANT_ERR_UNSUPPORTED, the keyword named): every other keyword,
 * among them patternProperties, propertyNames, minProperties,
 * maxProperties, dependentRequired, dependentSchemas, if/then/else, not,
 * contains, uniqueItems true, multipleOf, minimum etc. on "number",
 * unevaluatedProperties, additionalProperties true / a schema beside
 * properties, additionalItems, minLength/maxLength beside a pattern, other
 * formats ("unsupported JSON Schema format 'email'"), $ref outside the
 * document, lookarounds / backreferences / \b in a pattern, a "required"
 * name missing from "properties", and any constraining keyword beside
 * $ref / const / enum / anyOf / oneOf / allOf, which take the whole schema
 * ("unsupported JSON Schema keyword 'type' beside 'anyOf'"; "type" beside
 * const or enum is fine).  A keyword for another type than the value's is
 * ignored, as JSON Schema says (maxLength on an integer); without "type",
 * bounds alone mean an integer.
 *
 * Whitespace (bounded, so the model cannot emit whitespace forever): after
 * every { [ , : and every value, either nothing, one space, or one or two
 * newlines and then up to 20 spaces/tabs (llama.cpp's rule); no whitespace
 * before the first value.  Numbers: up to 16 integer digits, 16 fraction
 * digits, 3 exponent digits.  Strings: no raw control characters nor DEL
 * (they are escaped: \n \uXXXX ...), no \u0000 (a NUL cuts a string short
 * in C consumers), \uD800-\uDFFF only as a surrogate pair; characters that JSON must escape are
 * produced by a pattern only where it names them (a negated class or . in
 * a pattern never produces them). */
grammar *grammar_from_json_schema(const char *schema_json, size_t len, kvant_status *st);
/* The GBNF text grammar_from_json_schema compiles (malloc'd, the caller
 * frees it): for logs, and for users who want to edit it. */
char *grammar_schema_to_gbnf(const char *schema_json, size_t len, kvant_status *st);
/* response_format {"type": "json_object"}: any JSON object. */
grammar *grammar_json_object(kvant_status *st);
void grammar_free(grammar *g);
int grammar_n_rules(const grammar *g); /* after compilation (generated rules included) */

/* ---- vocabulary -----------------------------------------------------------------
 * bytes[i][0..lens[i]): the bytes token i adds to the text (NULL / 0 for a
 * token the grammar must never allow: control, unused); eog[0..n_eog): the
 * end-of-generation tokens.  Everything is copied.  Cost: a sort and a trie
 * over the vocabulary, O(total bytes); ~0.1 s for 152K tokens. */
grammar_vocab *grammar_vocab_new(const uint8_t *const *bytes, const int *lens, int n_tokens, const int32_t *eog,
                                 int n_eog, kvant_status *st);
void grammar_vocab_free(grammar_vocab *v);
int grammar_vocab_n_tokens(const grammar_vocab *v);
size_t grammar_vocab_n_nodes(const grammar_vocab *v); /* trie nodes, the root included */

/* ---- a sequence's state ---------------------------------------------------------- */
grammar_state *grammar_state_new(const grammar *g, kvant_status *st);
/* An independent copy (same position; its caches start empty): for beam
 * search, speculative decoding, or a request forked from a cached prefix. */
grammar_state *grammar_state_clone(const grammar_state *s, kvant_status *st);
void grammar_state_free(grammar_state *s);
/* Back to the start of the grammar (the caches are kept). */
void grammar_state_reset(grammar_state *s);

/* allowed[0..n_tokens) = 1 for every token the state accepts next, else 0;
 * returns how many are allowed (0: nothing can follow, which cannot happen
 * before grammar_is_done unless the vocabulary lacks the bytes the grammar
 * needs), or -1 when a step exploded past GRAMMAR_MAX_STACKS or memory ran
 * out (grammar_state_error says which; the request should fail).  After an
 * end-of-generation token was accepted nothing is allowed.
 * Cost: see the file comment; allocation-free once the caches are warm. */
int grammar_mask(grammar_state *s, const grammar_vocab *v, uint8_t *allowed);
/* The same answer by the plain path (each token on its own), for tests and
 * the benchmark. */
int grammar_mask_ref(grammar_state *s, const grammar_vocab *v, uint8_t *allowed);
/* logits[i] = -INFINITY where !allowed[i]. */
void grammar_apply_mask(const uint8_t *allowed, float *logits, int n_tokens);
/* Whether token would be accepted now, without advancing: one token's
 * bytes through the transition cache (a few ns per byte).  For a sampler
 * that samples first and masks only when the pick is refused. */
bool grammar_allows(grammar_state *s, const grammar_vocab *v, int32_t token);
/* Advances by one token; false (state unchanged) when the token is not
 * allowed.  An eog token is accepted where grammar_can_end, and ends the
 * state (nothing is allowed after it). */
bool grammar_accept(grammar_state *s, const grammar_vocab *v, int32_t token);
/* Advances by raw bytes (text forced into the output, tests); all or
 * nothing: false and unchanged when some prefix of them is refused. */
bool grammar_accept_bytes(grammar_state *s, const uint8_t *bytes, size_t len);
/* The grammar is complete here (an eog token would be allowed). */
bool grammar_can_end(const grammar_state *s);
/* Complete and nothing more can follow (only eog is allowed), or an eog
 * token was accepted. */
bool grammar_is_done(const grammar_state *s);
/* The last error of grammar_mask / grammar_accept (KVANT_OK when none). */
const kvant_status *grammar_state_error(const grammar_state *s);
/* The number of stacks in the current state (tests, diagnostics). */
int grammar_state_n_stacks(const grammar_state *s);

/* ---- the JSON reader the schema compiler uses --------------------------------
 * A small DOM parser (RFC 8259: UTF-8 text, \uXXXX with surrogate pairs
 * decoded to UTF-8, numbers kept as their text and as a double, object
 * members in order, duplicate keys refused), nesting limited to
 * GJSON_MAX_DEPTH; trailing text after the value is an error.  Exposed for
 * its tests. */
enum { GJSON_MAX_DEPTH = 128, GJSON_LINEAR = 16 /* objects up to this many members are searched linearly */ };
typedef enum { GJSON_NULL, GJSON_BOOL, GJSON_NUMBER, GJSON_STRING, GJSON_ARRAY, GJSON_OBJECT } gjson_type;
typedef struct gjson gjson;
struct gjson {
    gjson_type type;
    bool b;            /* BOOL */
    double num;        /* NUMBER (strtod of the text) */
    char *str;         /* STRING: decoded UTF-8, NUL-terminated (may hold NULs: see len); NUMBER: its text */
    size_t len;        /* bytes of str */
    int n;             /* ARRAY / OBJECT: element count */
    gjson **items;     /* ARRAY / OBJECT: the values */
    char **keys;       /* OBJECT: the keys (decoded, NUL-terminated) */
    size_t *key_lens;  /* OBJECT: their byte counts */
    int *sorted;       /* OBJECT of more than GJSON_LINEAR members: member indices by key (length, then
                          bytes), for gjson_get's binary search; else NULL */
};
/* NULL + KVANT_ERR_ARG ("JSON: expected ':' at offset 17") or NOMEM. */
gjson *gjson_parse(const char *text, size_t len, kvant_status *st);
void gjson_free(gjson *v);
/* The member named key (NUL-terminated), or NULL (also for a non-object). */
const gjson *gjson_get(const gjson *obj, const char *key);
/* Compact JSON text of v (malloc'd, NUL-terminated; *len its bytes), as
 * the schema compiler writes enum / const values; NULL when out of memory. */
char *gjson_write(const gjson *v, size_t *len);

#endif
