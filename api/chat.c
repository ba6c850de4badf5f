/* chat.c - the public chat-template API over chat/ (rendering, detection)
 * and tok/ (the prompt's tokens). */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "chat/chat.h"
#include "tok/tok.h"

/* chat/ mirrors the public enum, message and reply (it sees only kvant_base.h) */
_Static_assert((int)CHAT_N_TEMPLATES == (int)KVANT_CHAT_N_TEMPLATES, "chat/ and kvant_infer.h list the same templates");
_Static_assert((int)CHAT_ZEPHYR == (int)KVANT_CHAT_ZEPHYR && (int)CHAT_LLAMA3_2 == (int)KVANT_CHAT_LLAMA3_2 &&
                   (int)CHAT_PHI4 == (int)KVANT_CHAT_PHI4 && (int)CHAT_MISTRAL_V7 == (int)KVANT_CHAT_MISTRAL_V7,
               "in the same order");
_Static_assert(sizeof(chat_msg) == sizeof(kvant_chat_msg) && offsetof(chat_msg, content) == offsetof(kvant_chat_msg, content) &&
                   offsetof(chat_msg, tool_calls_json) == offsetof(kvant_chat_msg, tool_calls_json) &&
                   offsetof(chat_msg, tool_call_id) == offsetof(kvant_chat_msg, tool_call_id) &&
                   offsetof(chat_msg, name) == offsetof(kvant_chat_msg, name),
               "messages have one layout");
_Static_assert(sizeof(chat_tool_call) == sizeof(kvant_chat_tool_call) &&
                   offsetof(chat_tool_call, name) == offsetof(kvant_chat_tool_call, name) &&
                   offsetof(chat_tool_call, arguments) == offsetof(kvant_chat_tool_call, arguments) &&
                   sizeof(chat_reply) == sizeof(kvant_chat_reply) &&
                   offsetof(chat_reply, calls) == offsetof(kvant_chat_reply, calls) &&
                   offsetof(chat_reply, n_calls) == offsetof(kvant_chat_reply, n_calls),
               "tool calls have one layout");
_Static_assert((int)KVANT_CHAT_TOOL_CALL == 2 && (int)KVANT_CHAT_TOOL_MAYBE == 1, "chat_tool_prefix's values");

kvant_chat_template kvant_chat_detect_text(const char *jinja) { return (kvant_chat_template)chat_detect(jinja); }

kvant_chat_template kvant_chat_detect(const kvant_model *km) {
    const model *m = km ? km->m : NULL;
    gguf_str s;
    if (!m || !m->gguf || !gguf_get_str(m->gguf, "tokenizer.chat_template", &s) || !s.len) return KVANT_CHAT_PLAIN;
    if (s.len > (uint64_t)INT32_MAX) return KVANT_CHAT_PLAIN;
    char *t = malloc((size_t)s.len + 1); /* the mapped string is not NUL-terminated */
    if (!t) return KVANT_CHAT_PLAIN;
    memcpy(t, s.data, (size_t)s.len);
    t[s.len] = 0;
    const kvant_chat_template r = (kvant_chat_template)chat_detect(t);
    free(t);
    return r;
}

kvant_code kvant_chat_template_by_name(const char *name, kvant_chat_template *out, kvant_status *st) {
    chat_template t;
    if (!name || !out || !chat_from_name(name, &t))
        return core_fail(st, KVANT_ERR_ARG, "unknown chat template '%.64s' (known: %s)", name ? name : "(null)",
                         chat_names());
    *out = (kvant_chat_template)t;
    core_ok(st);
    return KVANT_OK;
}

const char *kvant_chat_template_name(kvant_chat_template t) { return chat_name((chat_template)t); }

const char *kvant_chat_template_list(void) { return chat_names(); }

char *kvant_chat_render(kvant_chat_template t, const kvant_chat_msg *msgs, int n, bool add_assistant,
                        kvant_status *st) {
    return chat_render((chat_template)t, (const chat_msg *)msgs, n, NULL, add_assistant, NULL, st);
}

char *kvant_chat_render_tools(kvant_chat_template t, const kvant_chat_msg *msgs, int n, const char *tools_json,
                              bool add_assistant, kvant_status *st) {
    return chat_render((chat_template)t, (const chat_msg *)msgs, n, tools_json, add_assistant, NULL, st);
}

kvant_code kvant_chat_parse_tool_calls(kvant_chat_template t, const char *text, size_t len, uint64_t id_seed,
                                       kvant_chat_reply *out, kvant_status *st) {
    return chat_parse_tool_calls((chat_template)t, text, len, id_seed, (chat_reply *)out, st);
}

void kvant_chat_reply_free(kvant_chat_reply *r) { chat_reply_free((chat_reply *)r); }

kvant_chat_tool_state kvant_chat_tool_prefix(kvant_chat_template t, const char *text, size_t len, size_t *plain_len) {
    return (kvant_chat_tool_state)chat_tool_prefix((chat_template)t, text, len, plain_len);
}

int kvant_chat_tokenize(const kvant_model *km, const char *text, size_t len, int32_t *tokens, int max) {
    const tok *t = km->m->tok;
    const int32_t bos = tok_bos(t);
    const bool add_bos = bos >= 0 && tok_add_bos(t);
    if (!text) len = 0;
    if (max < 0) max = 0;
    int n = tok_encode(t, text ? text : "", len, false, true, tokens, max);
    if (n == INT_MIN || !add_bos) return n;
    bool starts;
    if (n >= 0) {
        starts = n > 0 && tokens[0] == bos;
    } else { /* too small: encode once more to see whether the text begins with BOS */
        int32_t *tmp = malloc((size_t)-n * sizeof *tmp);
        if (!tmp) return INT_MIN;
        const int m = tok_encode(t, text ? text : "", len, false, true, tmp, -n);
        starts = m > 0 && tmp[0] == bos;
        free(tmp);
        if (m < 0) return m;
        return starts ? n : n - 1;
    }
    if (starts) return n;
    if (n + 1 > max) return -(n + 1);
    memmove(tokens + 1, tokens, (size_t)n * sizeof *tokens);
    tokens[0] = bos;
    return n + 1;
}
