/* chat/json.h - the small JSON reader and writers the chat templates need
 * (libkvant depends on no JSON library): a tree read from untrusted text,
 * written back as a Jinja template's `tojson` writes it, or compactly.
 * Internal to chat/ (prefix chat_json_ / chat_buf_).
 *
 * `tojson` is @huggingface/jinja's (the renderer tests/node compares
 * against), which writes what JavaScript holds after JSON.parse:
 *   - separators ", " and ": " (indent: "," and ": ", one member a line,
 *     "[]" / "{}" when empty), as Python's json.dumps;
 *   - strings as JSON.stringify: \" \\ \b \f \n \r \t, other controls as
 *     \u00xx, a lone surrogate as \udxxx, everything else as it is
 *     (ensure_ascii=False);
 *   - numbers as JavaScript prints a double (1.0 -> 1, 1e21 -> 1e+21,
 *     0.0000001 -> 1e-7, 1e400 -> null);
 *   - an object's members in JavaScript's order: keys that are array indices
 *     ("0", "7", "42"; below 2^32 - 1, no leading zero) first, ascending,
 *     then the rest as written; a key given twice keeps its first place and
 *     its last value.
 * Python's json.dumps (transformers' tojson) differs only in the last two:
 * it keeps 1.0 as "1.0" and keeps every key where it was written. */
#ifndef KVANT_CHAT_JSON_H
#define KVANT_CHAT_JSON_H

#include <stdbool.h>
#include <stddef.h>

/* a growing NUL-terminated text; oom sticks once set (every later put is a no-op) */
typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} chat_buf;

void chat_buf_putn(chat_buf *b, const char *s, size_t n);
void chat_buf_put(chat_buf *b, const char *s);

typedef enum {
    CHAT_JSON_NULL,
    CHAT_JSON_FALSE,
    CHAT_JSON_TRUE,
    CHAT_JSON_NUM,
    CHAT_JSON_STR,
    CHAT_JSON_ARR,
    CHAT_JSON_OBJ,
} chat_json_kind;

typedef struct chat_json chat_json;
struct chat_json {
    chat_json_kind kind;
    const char *s;       /* STR: the decoded bytes, NUL-terminated (may hold NULs: n counts);
                            a lone surrogate is kept as its 3-byte WTF-8 form.  NUM: the token as written */
    size_t n;
    double num;          /* NUM: its value (strtod) */
    const char *key;     /* a member of an object: its decoded key */
    size_t key_n;
    chat_json *child;    /* ARR / OBJ: the first element / member, in the order written */
    chat_json *next;     /* the next element / member */
    int count;           /* ARR / OBJ: how many */
};

/* Owns every node and string of the values parsed into it. */
typedef struct chat_json_doc chat_json_doc;

chat_json_doc *chat_json_doc_new(void);
void chat_json_doc_free(chat_json_doc *d);

/* One JSON value from text[0..len) after any whitespace; *end (if not NULL)
 * is the offset just past it.  NULL when the text there is not a value
 * (RFC 8259, as JSON.parse: no comments, no trailing commas, no raw control
 * characters in strings), nests deeper than 256, has an object of more than
 * 4096 members, or memory runs out (*oom true then, when oom is not NULL). */
chat_json *chat_json_parse(chat_json_doc *d, const char *text, size_t len, size_t *end, bool *oom);
/* The same for a whole text: only whitespace may follow the value. */
chat_json *chat_json_parse_all(chat_json_doc *d, const char *text, size_t len, bool *oom);

/* The member `key` of an object (NULL when v is not an object or has none). */
chat_json *chat_json_get(const chat_json *v, const char *key);
/* v is a string equal to s */
bool chat_json_is_str(const chat_json *v, const char *s);

/* v as the template's `tojson` writes it (indent 0: on one line; else
 * tojson(indent=N)), appended to b. */
void chat_json_tojson(chat_buf *b, const chat_json *v, int indent);
/* A string as JSON.stringify writes it. */
void chat_json_put_str(chat_buf *b, const char *s, size_t n);
/* v on one line without spaces, numbers as written, members as written
 * (a key given twice: its first place, its last value): {"a":1,"b":[true]}. */
void chat_json_compact(chat_buf *b, const chat_json *v);

/* An object's members in JavaScript's order (see above): fills out[0..count)
 * and returns count, or -1 when out of memory (out: malloc'd, the caller
 * frees it; NULL when count is 0). */
int chat_json_members(const chat_json *obj, const chat_json ***out);

#endif
