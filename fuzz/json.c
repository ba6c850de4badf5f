/* json.c - fuzz harness: kvant's two JSON readers on any bytes: the schema
 * compiler's DOM reader (grammar/json.c: gjson_parse, gjson_write) and the
 * chat templates' reader and writers (chat/json.c: chat_json_parse_all,
 * tojson, compact).  Each must parse or refuse, never read out of bounds,
 * recurse past its depth limit or leak; what one writes must read back to
 * the same text (gjson_write and chat_json_compact are fixed points). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/json.h"
#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void gjson_round(const char *text, size_t len) {
    kvant_status st = {0};
    gjson *v = gjson_parse(text, len, &st);
    if (!v) {
        if (st.code == KVANT_OK) abort();
        return;
    }
    if (v->type == GJSON_OBJECT) (void)gjson_get(v, "type");
    size_t n1 = 0;
    char *w1 = gjson_write(v, &n1);
    gjson_free(v);
    if (!w1) return;
    gjson *v2 = gjson_parse(w1, n1, &st);
    if (!v2) abort(); /* what it writes, it reads */
    size_t n2 = 0;
    char *w2 = gjson_write(v2, &n2);
    gjson_free(v2);
    if (w2 && (n1 != n2 || memcmp(w1, w2, n1))) abort();
    free(w1);
    free(w2);
}

static void chat_json_round(const char *text, size_t len) {
    chat_json_doc *d = chat_json_doc_new();
    if (!d) return;
    bool oom = false;
    chat_json *v = chat_json_parse_all(d, text, len, &oom);
    if (v) {
        chat_buf b1 = {0}, b2 = {0}, t = {0};
        chat_json_tojson(&t, v, 0);
        chat_json_tojson(&t, v, 2);
        if (v->kind == CHAT_JSON_OBJ) {
            const chat_json **mem = NULL;
            int n = chat_json_members(v, &mem);
            if (n > v->count) abort();
            free(mem);
            (void)chat_json_get(v, "name");
        }
        chat_json_compact(&b1, v);
        if (!b1.oom && b1.p) {
            chat_json *v2 = chat_json_parse_all(d, b1.p, b1.len, &oom);
            if (!v2 && !oom) abort(); /* what it writes, it reads */
            if (v2) {
                chat_json_compact(&b2, v2);
                if (!b2.oom && (b2.len != b1.len || memcmp(b1.p, b2.p, b1.len))) abort();
            }
        }
        free(b1.p);
        free(b2.p);
        free(t.p);
    }
    chat_json_doc_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gjson_round((const char *)data, size);
    chat_json_round((const char *)data, size);
    return 0;
}
