/* chat_template.c - fuzz harness: the chat templates (chat/chat.c) and the
 * tool-call reader (chat/tool_calls.c) on any bytes.
 * Input: byte 0 picks the template, byte 1 the flags (bit 0 add_assistant,
 * bit 1 the first field is tools_json, bit 2 the tool-call grammar for it
 * too); the rest is split on 0x1E into fields, one message each: its first
 * byte picks the role (system, user, assistant, tool, ipython, an unknown
 * one, or NULL), the rest is split on 0x1F into content, tool_calls_json,
 * tool_call_id and name (absent: NULL).  Every template renders the
 * messages or refuses them with a status; the whole input is also given to
 * chat_detect as Jinja text, and the rest to chat_parse_tool_calls and
 * chat_tool_prefix as a model's reply. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "kvant_infer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_MSGS = 64 };

static char *dup_n(const uint8_t *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the whole input as a GGUF's tokenizer.chat_template */
    char *all = dup_n(data, size);
    const chat_template det = chat_detect(all);
    if ((int)det < 0 || det >= CHAT_N_TEMPLATES) abort();
    chat_template by_name;
    if (chat_from_name(all, &by_name) && by_name >= CHAT_N_TEMPLATES) abort();
    free(all);
    if (size < 2) return 0;

    const chat_template t = (chat_template)(data[0] % CHAT_N_TEMPLATES);
    const uint8_t flags = data[1];
    const uint8_t *rest = data + 2;
    const size_t n_rest = size - 2;

    /* the rest as the model's reply */
    chat_reply r = {0};
    kvant_status st = {0};
    if (chat_parse_tool_calls(t, (const char *)rest, n_rest, 42, &r, &st) == KVANT_OK) {
        for (int i = 0; i < r.n_calls; i++)
            if (!r.calls[i].name || !r.calls[i].arguments || !r.calls[i].id) abort();
    }
    chat_reply_free(&r);
    size_t plain = 0;
    const int ts = chat_tool_prefix(t, (const char *)rest, n_rest, &plain);
    if (ts < 0 || ts > 2 || plain > n_rest) abort();

    /* the rest as fields -> messages */
    char *fields[MAX_MSGS + 1];
    int n_fields = 0;
    size_t start = 0;
    for (size_t i = 0; i <= n_rest && n_fields < MAX_MSGS + 1; i++) {
        if (i == n_rest || rest[i] == 0x1E) {
            fields[n_fields++] = dup_n(rest + start, i - start);
            start = i + 1;
        }
    }
    const char *tools = NULL;
    int first = 0;
    if ((flags & 2) && n_fields > 0) tools = fields[0], first = 1;
    static const char *roles[] = {"system", "user", "assistant", "tool", "ipython", "developer", NULL};
    chat_msg msgs[MAX_MSGS + 1];
    int n = 0;
    for (int f = first; f < n_fields; f++) {
        char *s = fields[f];
        chat_msg *m = &msgs[n++];
        memset(m, 0, sizeof *m);
        m->role = s[0] ? roles[(uint8_t)s[0] % 7] : "user";
        char *part[4] = {s[0] ? s + 1 : s, NULL, NULL, NULL};
        for (int k = 1; k < 4; k++) {
            char *sep = part[k - 1] ? strchr(part[k - 1], 0x1F) : NULL;
            if (!sep) break;
            *sep = 0;
            part[k] = sep + 1;
        }
        m->content = part[0];
        m->tool_calls_json = part[1] && part[1][0] ? part[1] : NULL;
        m->tool_call_id = part[2];
        m->name = part[3];
        if (m->tool_calls_json && (s[0] & 0x80)) m->content = NULL;
    }
    char *text = chat_render(t, msgs, n, tools, flags & 1, "01 Dec 2026", &st);
    if (!text && st.code == KVANT_OK) abort();
    free(text);
    if (tools && (flags & 4)) {
        int bad = -2;
        char *g = kvant_chat_tool_gbnf((kvant_chat_template)t, tools, (flags & 8) && n > 0 ? msgs[0].content : NULL, &bad, &st);
        free(g);
    }
    for (int f = 0; f < n_fields; f++) free(fields[f]);
    return 0;
}
