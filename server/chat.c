/* chat.c - the common chat templates, detected by their markers the way
 * llama.cpp's llm_chat_detect_template does, rendered by hand (no Jinja). */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

srv_chat_kind srv_chat_detect(const char *t) {
    if (!t) return CHAT_PLAIN;
    if (strstr(t, "<|im_start|>")) return CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>") && strstr(t, "<|end_header_id|>")) return CHAT_LLAMA3;
    if (strstr(t, "<|user|>")) return CHAT_ZEPHYR;
    if (strstr(t, "[INST]")) return CHAT_LLAMA2;
    return CHAT_PLAIN;
}

const char *srv_chat_name(srv_chat_kind k) {
    switch (k) {
    case CHAT_LLAMA2: return "llama-2";
    case CHAT_CHATML: return "chatml";
    case CHAT_ZEPHYR: return "zephyr";
    case CHAT_LLAMA3: return "llama-3";
    default: return "plain";
    }
}

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s) {
    const size_t n = strlen(s);
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n + 1);
    b->len += n;
}

static void put_cap(sbuf *b, const char *role) { /* "user" -> "User" */
    char tmp[32];
    size_t n = strlen(role);
    if (n >= sizeof tmp) n = sizeof tmp - 1;
    memcpy(tmp, role, n);
    tmp[n] = 0;
    if (tmp[0] >= 'a' && tmp[0] <= 'z') tmp[0] = (char)(tmp[0] - 'a' + 'A');
    put(b, tmp);
}

char *srv_chat_render(srv_chat_kind k, const srv_chat_msg *m, int n) {
    sbuf b = {0};
    put(&b, "");
    switch (k) {
    case CHAT_CHATML:
        for (int i = 0; i < n; i++) {
            put(&b, "<|im_start|>"), put(&b, m[i].role), put(&b, "\n"), put(&b, m[i].content), put(&b, "<|im_end|>\n");
        }
        put(&b, "<|im_start|>assistant\n");
        break;
    case CHAT_LLAMA3:
        for (int i = 0; i < n; i++) {
            put(&b, "<|start_header_id|>"), put(&b, m[i].role), put(&b, "<|end_header_id|>\n\n");
            put(&b, m[i].content), put(&b, "<|eot_id|>");
        }
        put(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case CHAT_ZEPHYR:
        for (int i = 0; i < n; i++) put(&b, "<|"), put(&b, m[i].role), put(&b, "|>\n"), put(&b, m[i].content), put(&b, "</s>\n");
        put(&b, "<|assistant|>\n");
        break;
    case CHAT_LLAMA2: {
        /* [INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] user [/INST] */
        const char *sys = NULL;
        bool first = true;
        for (int i = 0; i < n; i++) {
            if (!strcmp(m[i].role, "system")) {
                sys = m[i].content;
            } else if (!strcmp(m[i].role, "assistant")) {
                put(&b, " "), put(&b, m[i].content), put(&b, " </s><s>");
            } else {
                put(&b, "[INST] ");
                if (sys && first) put(&b, "<<SYS>>\n"), put(&b, sys), put(&b, "\n<</SYS>>\n\n");
                first = false;
                put(&b, m[i].content), put(&b, " [/INST]");
            }
        }
        break;
    }
    default: /* plain: "User: text" lines, then "Assistant:" */
        for (int i = 0; i < n; i++) put_cap(&b, m[i].role), put(&b, ": "), put(&b, m[i].content), put(&b, "\n");
        put(&b, "Assistant:");
        break;
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
