/* tool_calls.c - the tool calls in a model's reply, in the format its chat
 * template taught it (chat_tools_of): reading a whole reply into content +
 * calls, and telling of a reply's prefix whether it may still become a call
 * (what a streaming server holds back).  A reply that does not read as
 * calls is content, never an error. */
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "chat/json.h"

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* the first s in text[from..len) (memmem), or -1 */
static long find(const char *text, size_t len, size_t from, const char *s) {
    const size_t k = strlen(s);
    for (size_t i = from; i + k <= len; i++)
        if (text[i] == s[0] && !memcmp(text + i, s, k)) return (long)i;
    return -1;
}

static const char *marker_of(chat_tool_format f) {
    return f == CHAT_TOOLS_MISTRAL ? "[TOOL_CALLS]" : f == CHAT_TOOLS_LLAMA3 ? "<|python_tag|>" : "<tool_call>";
}

/* Hermes formats: a reply that opens with "<think>" holds no calls before
 * its "</think>" (Qwen3's reasoning may mention <tool_call>).  Where calls
 * may start: len when the reasoning has not ended. */
static size_t after_think(const char *text, size_t len) {
    size_t i = 0;
    while (i < len && is_space(text[i])) i++;
    if (len - i < 7 || memcmp(text + i, "<think>", 7)) return 0;
    const long e = find(text, len, i + 7, "</think>");
    return e < 0 ? len : (size_t)e + 8;
}

/* ---- ids ------------------------------------------------------------------------- */
static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* 9 letters and digits from (seed, i); "call_" first except for Mistral,
 * whose templates take ids of exactly 9 letters and digits */
static char *make_id(uint64_t seed, int i, bool mistral) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    char *s = malloc(16);
    if (!s) return NULL;
    size_t o = 0;
    if (!mistral) memcpy(s, "call_", 5), o = 5;
    uint64_t x = mix64(seed ^ mix64((uint64_t)i + 1));
    for (int k = 0; k < 9; k++, x /= 62) s[o++] = A[x % 62];
    s[o] = 0;
    return s;
}

/* ---- reading a reply ------------------------------------------------------------- */
typedef struct {
    chat_reply *out;
    int cap;
    uint64_t seed;
    bool mistral;
    bool oom;
} acc;

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) memcpy(p, s, n), p[n] = 0;
    return p;
}

/* one call object: {"name": "f", "arguments" | "parameters": {...} or a JSON
 * text of one, "id"?} (or {"function": {...}}); false when v is not one */
static bool add_call(acc *a, chat_json_doc *d, const chat_json *v) {
    if (!v || v->kind != CHAT_JSON_OBJ) return false;
    const chat_json *fn = chat_json_get(v, "function");
    if (!fn || fn->kind != CHAT_JSON_OBJ || chat_json_get(v, "name")) fn = v;
    const chat_json *name = chat_json_get(fn, "name"), *args = chat_json_get(fn, "arguments");
    if (!args) args = chat_json_get(fn, "parameters");
    if (!name || name->kind != CHAT_JSON_STR || !name->n || memchr(name->s, 0, name->n)) return false;
    if (args && args->kind == CHAT_JSON_STR) { /* arguments written as a JSON text */
        bool oom = false;
        args = chat_json_parse_all(d, args->s, args->n, &oom);
        if (oom) return a->oom = true, false;
    }
    if (args && args->kind != CHAT_JSON_OBJ) return false;
    if (a->out->n_calls == a->cap) {
        const int cap = a->cap ? 2 * a->cap : 4;
        chat_tool_call *c = realloc(a->out->calls, sizeof *c * (size_t)cap);
        if (!c) return a->oom = true, false;
        a->out->calls = c;
        a->cap = cap;
    }
    chat_buf ab = {0};
    if (args) chat_json_compact(&ab, args);
    else chat_buf_put(&ab, "{}");
    const chat_json *id = chat_json_get(v, "id");
    const int i = a->out->n_calls;
    chat_tool_call *c = &a->out->calls[i];
    c->arguments = ab.p;
    c->name = dup_n(name->s, name->n);
    c->id = id && id->kind == CHAT_JSON_STR && id->n && !memchr(id->s, 0, id->n) ? dup_n(id->s, id->n)
                                                                                 : make_id(a->seed, i, a->mistral);
    a->out->n_calls++;
    if (ab.oom || !c->arguments || !c->name || !c->id) return a->oom = true, false;
    return true;
}

static void put_rstrip(chat_buf *b, const char *s, size_t n) {
    while (n && is_space(s[n - 1])) n--;
    chat_buf_putn(b, s, n);
}

/* <tool_call> BODY </tool_call> ... (the last one may lack its end tag) */
static bool read_hermes(acc *a, chat_json_doc *d, const char *text, size_t len, chat_buf *content) {
    size_t last = 0, pos = after_think(text, len);
    for (;;) {
        const long p = find(text, len, pos, "<tool_call>");
        if (p < 0) break;
        chat_buf_putn(content, text + last, (size_t)p - last);
        const size_t body = (size_t)p + 11;
        const long q = find(text, len, body, "</tool_call>");
        const size_t end = q < 0 ? len : (size_t)q;
        if (!add_call(a, d, chat_json_parse_all(d, text + body, end - body, &a->oom))) return false;
        last = pos = q < 0 ? len : (size_t)q + 12;
    }
    chat_buf_putn(content, text + last, len - last);
    return a->out->n_calls > 0;
}

/* calls one after another from text[i..len): objects, each followed by ";" or space */
static bool read_sequence(acc *a, chat_json_doc *d, const char *text, size_t len, size_t i) {
    for (;;) {
        while (i < len && (is_space(text[i]) || text[i] == ';')) i++;
        if (i == len) return a->out->n_calls > 0;
        size_t end;
        if (!add_call(a, d, chat_json_parse(d, text + i, len - i, &end, &a->oom))) return false;
        i += end;
    }
}

/* {"name": ..., "parameters": ...} as the whole reply, or after <|python_tag|> */
static bool read_llama3(acc *a, chat_json_doc *d, const char *text, size_t len, chat_buf *content) {
    const long p = find(text, len, 0, "<|python_tag|>");
    if (p >= 0) {
        put_rstrip(content, text, (size_t)p);
        return read_sequence(a, d, text, len, (size_t)p + 14);
    }
    size_t i = 0;
    while (i < len && is_space(text[i])) i++;
    return i < len && text[i] == '{' && read_sequence(a, d, text, len, i);
}

/* TEXT [TOOL_CALLS] [{...}, ...] (or one object) */
static bool read_mistral(acc *a, chat_json_doc *d, const char *text, size_t len, chat_buf *content) {
    const long p = find(text, len, 0, "[TOOL_CALLS]");
    if (p < 0) return false;
    put_rstrip(content, text, (size_t)p);
    const size_t from = (size_t)p + 12;
    const chat_json *v = chat_json_parse_all(d, text + from, len - from, &a->oom);
    if (!v) return false;
    if (v->kind == CHAT_JSON_OBJ) return add_call(a, d, v);
    if (v->kind != CHAT_JSON_ARR || !v->count) return false;
    for (const chat_json *c = v->child; c; c = c->next)
        if (!add_call(a, d, c)) return false;
    return true;
}

void chat_reply_free(chat_reply *r) {
    if (!r) return;
    for (int i = 0; i < r->n_calls; i++) free(r->calls[i].id), free(r->calls[i].name), free(r->calls[i].arguments);
    free(r->calls);
    free(r->content);
    *r = (chat_reply){0};
}

kvant_code chat_parse_tool_calls(chat_template t, const char *text, size_t len, uint64_t id_seed, chat_reply *out,
                                 kvant_status *st) {
    if (!out) return core_fail(st, KVANT_ERR_ARG, "no reply to fill");
    *out = (chat_reply){0};
    if ((int)t < 0 || t >= CHAT_N_TEMPLATES) return core_fail(st, KVANT_ERR_ARG, "unknown chat template %d", (int)t);
    if (!text) len = 0, text = "";
    const chat_tool_format f = chat_tools_of(t);
    acc a = {.out = out, .seed = id_seed, .mistral = f == CHAT_TOOLS_MISTRAL};
    chat_json_doc *d = chat_json_doc_new();
    chat_buf content = {0};
    bool found = false;
    if (d) {
        if (f == CHAT_TOOLS_LLAMA3) found = read_llama3(&a, d, text, len, &content);
        else if (f == CHAT_TOOLS_MISTRAL) found = read_mistral(&a, d, text, len, &content);
        else found = read_hermes(&a, d, text, len, &content);
    }
    chat_json_doc_free(d);
    if (!d || a.oom || content.oom) {
        free(content.p);
        chat_reply_free(out);
        return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    }
    if (found) { /* the text outside the calls, without the whitespace that led to them */
        out->content = content.p ? content.p : dup_n("", 0);
        if (out->content) {
            size_t n = strlen(out->content);
            while (n && is_space(out->content[n - 1])) n--;
            out->content[n] = 0;
        }
    } else { /* no calls, or calls that do not read: all of it is content */
        free(content.p);
        for (int i = 0; i < out->n_calls; i++) free(out->calls[i].id), free(out->calls[i].name), free(out->calls[i].arguments);
        free(out->calls);
        out->calls = NULL;
        out->n_calls = 0;
        out->content = dup_n(text, len);
    }
    if (!out->content) {
        chat_reply_free(out);
        return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    }
    core_ok(st);
    return KVANT_OK;
}

/* ---- a prefix while it streams ----------------------------------------------------- */
/* Llama 3.x: may text[i..len) (after leading space) still be, or has it begun,
 * {"name" / {"type" ?  0 no, 1 maybe, 2 yes */
static int llama3_json_start(const char *text, size_t len) {
    size_t i = 0;
    while (i < len && is_space(text[i])) i++;
    if (i == len) return 1;
    if (text[i++] != '{') return 0;
    while (i < len && is_space(text[i])) i++;
    if (i == len) return 1;
    if (text[i++] != '"') return 0;
    static const char *const keys[] = {"name\"", "type\""};
    int r = 0;
    for (int k = 0; k < 2; k++) {
        const size_t kn = strlen(keys[k]), have = len - i < kn ? len - i : kn;
        if (!memcmp(text + i, keys[k], have)) r = have == kn ? 2 : (r > 1 ? r : 1);
    }
    return r;
}

int chat_tool_prefix(chat_template t, const char *text, size_t len, size_t *plain_len) {
    size_t plain = len;
    int state = 0;
    if (!text) len = 0, plain = 0;
    if ((int)t >= 0 && t < CHAT_N_TEMPLATES && text) {
        const chat_tool_format f = chat_tools_of(t);
        const char *mk = marker_of(f);
        const size_t mn = strlen(mk);
        const size_t from = f == CHAT_TOOLS_HERMES || f == CHAT_TOOLS_GENERIC ? after_think(text, len) : 0;
        const long p = find(text, len, from, mk);
        if (p >= 0) {
            state = 2, plain = (size_t)p;
        } else {
            for (size_t k = mn - 1; k > 0; k--) /* the longest end of the text that begins the marker */
                if (len - from >= k && !memcmp(text + len - k, mk, k)) {
                    state = 1, plain = len - k;
                    break;
                }
            if (f == CHAT_TOOLS_LLAMA3) {
                const int j = llama3_json_start(text, len);
                if (j) state = state > j ? state : j, plain = 0;
            }
        }
    }
    while (plain > 0 && is_space(text[plain - 1])) plain--;
    if (plain_len) *plain_len = plain;
    return state;
}
