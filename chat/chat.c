/* chat.c - the families' chat templates, detected by markers and rendered by
 * hand.  Each render_* function follows one Jinja template; the comment
 * above it names the template and shows one rendered turn.  Messages are
 * validated once (render) and then read as (role, text) pairs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat.h"

/* ---- names --------------------------------------------------------------------- */
static const char *const NAMES[CHAT_N_TEMPLATES] = {
    [CHAT_PLAIN] = "plain",
    [CHAT_CHATML] = "chatml",
    [CHAT_QWEN2_5] = "qwen2.5",
    [CHAT_QWEN3] = "qwen3",
    [CHAT_QWEN3_NO_THINK] = "qwen3-no-think",
    [CHAT_LLAMA2] = "llama-2",
    [CHAT_LLAMA3] = "llama-3",
    [CHAT_LLAMA3_1] = "llama-3.1",
    [CHAT_LLAMA3_2] = "llama-3.2",
    [CHAT_GEMMA] = "gemma",
    [CHAT_PHI3] = "phi-3",
    [CHAT_PHI4_MINI] = "phi-4-mini",
    [CHAT_PHI4] = "phi-4",
    [CHAT_MISTRAL_V1] = "mistral-v1",
    [CHAT_MISTRAL_V3] = "mistral-v3",
    [CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [CHAT_MISTRAL_V7] = "mistral-v7",
    [CHAT_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
    [CHAT_ZEPHYR] = "zephyr",
};

/* llama.cpp's names (llama-chat.cpp) and the family names people type */
static const struct {
    const char *name;
    chat_template t;
} ALIASES[] = {
    {"llama2", CHAT_LLAMA2},  {"llama3", CHAT_LLAMA3},  {"llama3.1", CHAT_LLAMA3_1},
    {"llama3.2", CHAT_LLAMA3_2}, {"phi3", CHAT_PHI3},   {"phi4", CHAT_PHI4},
    {"gemma2", CHAT_GEMMA},   {"gemma3", CHAT_GEMMA},
};

const char *chat_name(chat_template t) {
    return (int)t >= 0 && t < CHAT_N_TEMPLATES ? NAMES[t] : "?";
}

bool chat_from_name(const char *name, chat_template *out) {
    if (!name) return false;
    for (int i = 0; i < CHAT_N_TEMPLATES; i++)
        if (!strcmp(name, NAMES[i])) return *out = (chat_template)i, true;
    for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++)
        if (!strcmp(name, ALIASES[i].name)) return *out = ALIASES[i].t, true;
    return false;
}

const char *chat_names(void) { /* NAMES in order (test_chat checks every name is here) */
    return "plain, chatml, qwen2.5, qwen3, qwen3-no-think, llama-2, llama-3, llama-3.1, llama-3.2, gemma, phi-3, "
           "phi-4-mini, phi-4, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7, mistral-v7-tekken, zephyr";
}

/* ---- detection ------------------------------------------------------------------ */
static bool has(const char *t, const char *s) { return strstr(t, s) != NULL; }

chat_template chat_detect(const char *t) {
    chat_template named;
    if (!t || !t[0]) return CHAT_PLAIN;
    if (chat_from_name(t, &named)) return named;
    if (has(t, "<|im_start|>")) {
        if (has(t, "<|im_sep|>")) return CHAT_PHI4;
        /* Qwen2.5 injects its default system turn when there is none (Qwen2's
         * default, "You are a helpful assistant.", is not one kvant renders) */
        if (has(t, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")) return CHAT_QWEN2_5;
        if (has(t, "</think>")) return CHAT_QWEN3; /* strips reasoning from earlier turns */
        return CHAT_CHATML;
    }
    if (!strncmp(t, "mistral", 7) || has(t, "[INST]")) {
        if (has(t, "[SYSTEM_PROMPT]")) /* v7: Tekken (Mistral Small 3) has no space after [INST] */
            return has(t, "'[INST]'") || has(t, "\"[INST]\"") ? CHAT_MISTRAL_V7_TEKKEN : CHAT_MISTRAL_V7;
        if (has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]")) {
            if (has(t, " [INST]")) return CHAT_MISTRAL_V1;
            if (has(t, "\"[INST]\"")) return CHAT_MISTRAL_V3_TEKKEN;
            return CHAT_MISTRAL_V3;
        }
        return CHAT_LLAMA2; /* llama.cpp's llama2 variants */
    }
    if (has(t, "<|assistant|>") && has(t, "<|end|>")) /* Phi-4-mini: no newline after the role */
        return has(t, "<|tool|>") || has(t, "'<|' + message['role'] + '|>' + message['content']") ? CHAT_PHI4_MINI
                                                                                               : CHAT_PHI3;
    if (has(t, "<|user|>")) return CHAT_ZEPHYR;
    if (has(t, "<start_of_turn>")) return CHAT_GEMMA;
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) {
        if (!has(t, "Cutting Knowledge Date")) return CHAT_LLAMA3;
        return has(t, "strftime_now") ? CHAT_LLAMA3_2 : CHAT_LLAMA3_1;
    }
    return CHAT_PLAIN;
}

/* ---- text building ---------------------------------------------------------------- */
typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void putn(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void put(sbuf *b, const char *s) { putn(b, s, strlen(s)); }

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* s without leading / trailing characters of `set` (NULL: ASCII whitespace),
 * as Python's str.strip([chars]) */
static void put_strip(sbuf *b, const char *s, const char *set, bool left, bool right) {
    size_t i = 0, n = strlen(s);
#define STRIP_IN(c) (set ? strchr(set, (c)) != NULL : is_ws(c))
    while (left && i < n && STRIP_IN(s[i])) i++;
    while (right && n > i && STRIP_IN(s[n - 1])) n--;
#undef STRIP_IN
    putn(b, s + i, n - i);
}
static void put_trim(sbuf *b, const char *s) { put_strip(b, s, NULL, true, true); }

/* ---- messages -------------------------------------------------------------------- */
enum { R_SYSTEM, R_USER, R_ASSISTANT };

typedef struct {
    int role;
    const char *role_name; /* "system" / "user" / "assistant" */
    const char *text;
} msg;

typedef struct {
    msg *m;
    int n;
    char **own;  /* merged texts to free */
    int n_own;
} conv;

static void conv_free(conv *c) {
    for (int i = 0; i < c->n_own; i++) free(c->own[i]);
    free(c->own);
    free(c->m);
}

/* For templates without system turns: *sys is the first message's text when
 * it is a system message (NULL otherwise) and c holds the rest, every later
 * system message put in front of the next user message's text
 * ("SYSTEM\n\nUSER"; dropped when no user message follows). */
static bool fold_system(const msg *in, int n, const char **sys, conv *c) {
    *sys = NULL;
    *c = (conv){0};
    int i = 0;
    if (n > 0 && in[0].role == R_SYSTEM) *sys = in[0].text, i = 1;
    c->m = malloc(sizeof *c->m * (size_t)(n > 0 ? n : 1));
    c->own = malloc(sizeof *c->own * (size_t)(n > 0 ? n : 1));
    if (!c->m || !c->own) return false;
    sbuf pending = {0};
    for (; i < n; i++) {
        if (in[i].role == R_SYSTEM) {
            put(&pending, in[i].text), put(&pending, "\n\n");
            continue;
        }
        msg m = in[i];
        if (m.role == R_USER && (pending.len || pending.oom)) {
            put(&pending, m.text);
            if (pending.oom) {
                free(pending.p);
                return false;
            }
            m.text = c->own[c->n_own++] = pending.p;
            pending = (sbuf){0};
        }
        c->m[c->n++] = m;
    }
    const bool ok = !pending.oom;
    free(pending.p);
    return ok;
}

/* ---- the templates ---------------------------------------------------------------
 * plain (no template in the model): "System: s\nUser: u\nAssistant:" */
static void render_plain(sbuf *b, const msg *m, int n, bool add) {
    for (int i = 0; i < n; i++) {
        static const char *const cap[] = {"System", "User", "Assistant"};
        put(b, cap[m[i].role]), put(b, ": "), put(b, m[i].text), put(b, "\n");
    }
    if (add) put(b, "Assistant:");
}

/* ChatML (llama.cpp's chatml): "<|im_start|>user\nu<|im_end|>\n" ... "<|im_start|>assistant\n" */
static void render_chatml(sbuf *b, const msg *m, int n, bool add) {
    for (int i = 0; i < n; i++)
        put(b, "<|im_start|>"), put(b, m[i].role_name), put(b, "\n"), put(b, m[i].text), put(b, "<|im_end|>\n");
    if (add) put(b, "<|im_start|>assistant\n");
}

/* Qwen2.5-Instruct: ChatML; without a system message first, the default
 * "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a
 * helpful assistant.<|im_end|>\n" opens the prompt. */
static void render_qwen25(sbuf *b, const msg *m, int n, bool add) {
    if (n == 0 || m[0].role != R_SYSTEM)
        put(b, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n");
    render_chatml(b, m, n, add);
}

/* Qwen3: ChatML without a default system message.  An assistant message's
 * reasoning ("<think>...</think>" before the answer) is dropped in turns
 * before the last user query and kept, re-spaced, after it:
 *   "<|im_start|>assistant\n<think>\nR\n</think>\n\nA<|im_end|>\n".
 * The generation prompt is "<|im_start|>assistant\n" (the model then thinks
 * first); qwen3-no-think appends "<think>\n\n</think>\n\n", as the template
 * does with enable_thinking=false. */
static const char *last_of(const char *s, const char *sub) {
    const char *r = NULL;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub)) r = p;
    return r;
}
static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !memcmp(s + n - k, suf, k);
}

/* Qwen3's split of an assistant text, as its template writes it:
 *   content   = text.split('</think>')[-1].lstrip('\n')
 *   reasoning = text.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
 * (without "</think>": content = text, no reasoning) */
static void qwen3_split(const char *text, sbuf *content, sbuf *reason) {
    const char *end = strstr(text, "</think>");
    if (!end) {
        put(content, text);
        return;
    }
    put_strip(content, last_of(text, "</think>") + 8, "\n", true, false);
    size_t hn = (size_t)(end - text);
    while (hn > 0 && text[hn - 1] == '\n') hn--;
    size_t from = 0;
    for (size_t k = 0; k + 7 <= hn; k++)
        if (!memcmp(text + k, "<think>", 7)) from = k + 7;
    while (from < hn && text[from] == '\n') from++;
    putn(reason, text + from, hn - from);
}

static void render_qwen3(sbuf *b, const msg *m, int n, bool add, bool no_think) {
    /* the last user message that is not a tool response (default: the last message) */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (m[i].role == R_USER &&
            !(!strncmp(m[i].text, "<tool_response>", 15) && ends_with(m[i].text, "</tool_response>"))) {
            last_query = i;
            break;
        }
    for (int i = 0; i < n; i++) {
        if (m[i].role != R_ASSISTANT) { /* the first system message is the same turn, rendered first */
            put(b, "<|im_start|>"), put(b, m[i].role_name), put(b, "\n"), put(b, m[i].text), put(b, "<|im_end|>\n");
            continue;
        }
        sbuf reason = {0}, content = {0};
        qwen3_split(m[i].text, &content, &reason);
        b->oom |= content.oom || reason.oom;
        const char *c = content.p ? content.p : "", *r = reason.p ? reason.p : "";
        put(b, "<|im_start|>assistant\n");
        if (i > last_query && (i == n - 1 || r[0])) {
            put(b, "<think>\n"), put_strip(b, r, "\n", true, true), put(b, "\n</think>\n\n");
            put_strip(b, c, "\n", true, false);
        } else {
            put(b, c);
        }
        put(b, "<|im_end|>\n");
        free(content.p);
        free(reason.p);
    }
    if (add) {
        put(b, "<|im_start|>assistant\n");
        if (no_think) put(b, "<think>\n\n</think>\n\n");
    }
}

/* Llama-2-chat: a system message goes into the first user turn; every user
 * turn starts with BOS; texts are stripped.
 *   "<s>[INST] <<SYS>>\ns\n<</SYS>>\n\nu [/INST] a </s><s>[INST] u2 [/INST]" */
static void render_llama2(sbuf *b, const msg *in, int n, bool add) {
    (void)add; /* the template has no generation prompt */
    const char *sys;
    conv c;
    if (!fold_system(in, n, &sys, &c)) {
        b->oom = true;
        conv_free(&c);
        return;
    }
    for (int i = 0; i < c.n; i++) {
        sbuf t = {0};
        if (i == 0 && sys) put(&t, "<<SYS>>\n"), put(&t, sys), put(&t, "\n<</SYS>>\n\n");
        put(&t, c.m[i].text);
        b->oom |= t.oom;
        const char *s = t.p ? t.p : "";
        if (c.m[i].role == R_USER) put(b, "<s>[INST] "), put_trim(b, s), put(b, " [/INST]");
        else put(b, " "), put_trim(b, s), put(b, " </s>");
        free(t.p);
    }
    conv_free(&c);
}

/* Llama 3 (Meta-Llama-3-8B-Instruct): BOS before the first message, each
 * "<|start_header_id|>role<|end_header_id|>\n\n" + trimmed text + "<|eot_id|>". */
static void llama3_turn(sbuf *b, const char *role, const char *text) {
    put(b, "<|start_header_id|>"), put(b, role), put(b, "<|end_header_id|>\n\n"), put_trim(b, text), put(b, "<|eot_id|>");
}

static void render_llama3(sbuf *b, const msg *m, int n, bool add) {
    if (n > 0) put(b, "<|begin_of_text|>");
    for (int i = 0; i < n; i++) llama3_turn(b, m[i].role_name, m[i].text);
    if (add) put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 3.1 / 3.2 / 3.3 (no tools): a system turn always opens the prompt,
 *   "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date:
 *    December 2023\nToday Date: 26 Jul 2024\n\n" + trimmed system text + "<|eot_id|>",
 * then the other messages as in Llama 3.  3.1 and 3.3 date it 26 Jul 2024
 * (their default date_string); 3.2 with today's date (strftime_now). */
static void render_llama31(sbuf *b, const msg *m, int n, bool add, const char *date) {
    put(b, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n");
    put(b, "Today Date: "), put(b, date), put(b, "\n\n");
    int i = 0;
    if (n > 0 && m[0].role == R_SYSTEM) put_trim(b, m[0].text), i = 1;
    put(b, "<|eot_id|>");
    for (; i < n; i++) llama3_turn(b, m[i].role_name, m[i].text);
    if (add) put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Gemma 2 / 3: BOS, role "model" for the assistant, no system turn: the
 * system text + "\n\n" opens the first user turn (Gemma 3's template; Gemma
 * 2's refuses a system message); texts are trimmed.
 *   "<bos><start_of_turn>user\ns\n\nu<end_of_turn>\n<start_of_turn>model\n" */
static void render_gemma(sbuf *b, const msg *in, int n, bool add) {
    const char *sys;
    conv c;
    if (!fold_system(in, n, &sys, &c)) {
        b->oom = true;
        conv_free(&c);
        return;
    }
    put(b, "<bos>");
    for (int i = 0; i < c.n; i++) {
        put(b, "<start_of_turn>"), put(b, c.m[i].role == R_ASSISTANT ? "model" : "user"), put(b, "\n");
        if (i == 0 && sys) put(b, sys), put(b, "\n\n");
        put_trim(b, c.m[i].text), put(b, "<end_of_turn>\n");
    }
    if (add) put(b, "<start_of_turn>model\n");
    conv_free(&c);
}

/* Phi-3 / Phi-3.5-mini: "<|user|>\nu<|end|>\n" ... "<|assistant|>\n"; an empty
 * system message is left out (3.5); without the generation prompt the
 * template ends with EOS "<|endoftext|>". */
static void render_phi3(sbuf *b, const msg *m, int n, bool add) {
    for (int i = 0; i < n; i++) {
        if (m[i].role == R_SYSTEM && !m[i].text[0]) continue;
        put(b, "<|"), put(b, m[i].role_name), put(b, "|>\n"), put(b, m[i].text), put(b, "<|end|>\n");
    }
    put(b, add ? "<|assistant|>\n" : "<|endoftext|>");
}

/* Phi-4-mini: as Phi-3 without the newlines: "<|user|>u<|end|><|assistant|>" */
static void render_phi4_mini(sbuf *b, const msg *m, int n, bool add) {
    for (int i = 0; i < n; i++) put(b, "<|"), put(b, m[i].role_name), put(b, "|>"), put(b, m[i].text), put(b, "<|end|>");
    put(b, add ? "<|assistant|>" : "<|endoftext|>");
}

/* Phi-4 (14B): "<|im_start|>user<|im_sep|>u<|im_end|>" ... "<|im_start|>assistant<|im_sep|>" */
static void render_phi4(sbuf *b, const msg *m, int n, bool add) {
    for (int i = 0; i < n; i++)
        put(b, "<|im_start|>"), put(b, m[i].role_name), put(b, "<|im_sep|>"), put(b, m[i].text), put(b, "<|im_end|>");
    if (add) put(b, "<|im_start|>assistant<|im_sep|>");
}

/* Mistral v1 (Mistral-7B-Instruct-v0.1, Mixtral-8x7B): the system text opens
 * the FIRST user turn.
 *   "<s> [INST] s\n\nu [/INST] a</s> [INST] u2 [/INST]"
 * Mistral v3 (Mistral-7B-Instruct-v0.3): the system text opens the LAST
 * message when it is a user turn (else it is left out); answers trimmed.
 *   "<s>[INST] u [/INST]"... "<s>[INST] u[/INST] a</s>[INST] s\n\nu2[/INST]"
 * Mistral v3-Tekken (Nemo): as v3 without spaces, answers as they are.
 *   "<s>[INST]u[/INST]a</s>[INST]s\n\nu2[/INST]"
 * None has a generation prompt. */
static void render_mistral(sbuf *b, const msg *in, int n, chat_template t) {
    const char *sys;
    conv c;
    if (!fold_system(in, n, &sys, &c)) {
        b->oom = true;
        conv_free(&c);
        return;
    }
    put(b, "<s>");
    for (int i = 0; i < c.n; i++) {
        const msg *m = &c.m[i];
        if (t == CHAT_MISTRAL_V1) {
            if (m->role == R_USER) {
                put(b, " [INST] ");
                if (i == 0 && sys) put(b, sys), put(b, "\n\n");
                put(b, m->text), put(b, " [/INST]");
            } else {
                put(b, " "), put(b, m->text), put(b, "</s>");
            }
        } else {
            const bool tekken = t == CHAT_MISTRAL_V3_TEKKEN;
            if (m->role == R_USER) {
                put(b, tekken ? "[INST]" : "[INST] ");
                if (i == c.n - 1 && sys) put(b, sys), put(b, "\n\n");
                put(b, m->text), put(b, "[/INST]");
            } else if (tekken) {
                put(b, m->text), put(b, "</s>");
            } else {
                put(b, " "), put_trim(b, m->text), put(b, "</s>");
            }
        }
    }
    conv_free(&c);
}

/* Mistral v7 (Mistral-Large-2411), as llama.cpp renders it; system turns
 * anywhere; no generation prompt:
 *   "<s>[SYSTEM_PROMPT] s[/SYSTEM_PROMPT][INST] u[/INST] a</s>[INST] u2[/INST]"
 * v7-Tekken (Mistral Small 3): the same without the spaces.  (Mistral Small
 * 3's own template also injects a default system prompt: not done here.) */
static void render_mistral_v7(sbuf *b, const msg *m, int n, bool tekken) {
    const char *sp = tekken ? "" : " ";
    put(b, "<s>");
    for (int i = 0; i < n; i++) {
        if (m[i].role == R_SYSTEM) put(b, "[SYSTEM_PROMPT]"), put(b, sp), put(b, m[i].text), put(b, "[/SYSTEM_PROMPT]");
        else if (m[i].role == R_USER) put(b, "[INST]"), put(b, sp), put(b, m[i].text), put(b, "[/INST]");
        else put(b, sp), put(b, m[i].text), put(b, "</s>");
    }
}

/* Zephyr (zephyr-7b-beta): "<|user|>\nu</s>\n" ... "<|assistant|>\n" (the
 * template adds the generation prompt after the last message only). */
static void render_zephyr(sbuf *b, const msg *m, int n, bool add) {
    for (int i = 0; i < n; i++) put(b, "<|"), put(b, m[i].role_name), put(b, "|>\n"), put(b, m[i].text), put(b, "</s>\n");
    if (add && n > 0) put(b, "<|assistant|>\n");
}

/* ---- entry ------------------------------------------------------------------------- */
char *chat_render(chat_template t, const chat_msg *in, int n, bool add, const char *date,
                  kvant_status *st) {
    if ((int)t < 0 || t >= CHAT_N_TEMPLATES) {
        core_fail(st, KVANT_ERR_ARG, "unknown chat template %d", (int)t);
        return NULL;
    }
    if (n < 0 || (n > 0 && !in)) {
        core_fail(st, KVANT_ERR_ARG, "bad message list");
        return NULL;
    }
    msg *m = malloc(sizeof *m * (size_t)(n > 0 ? n : 1));
    if (!m) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        const char *r = in[i].role;
        if (!r || !in[i].content) {
            free(m);
            core_fail(st, KVANT_ERR_ARG, "message %d has no %s", i, r ? "content" : "role");
            return NULL;
        }
        m[i].role = !strcmp(r, "system") ? R_SYSTEM : !strcmp(r, "user") ? R_USER : !strcmp(r, "assistant") ? R_ASSISTANT : -1;
        if (m[i].role < 0) {
            free(m);
            core_fail(st, KVANT_ERR_ARG, "message %d: unknown role '%.32s' (system, user or assistant)", i, r);
            return NULL;
        }
        m[i].role_name = r;
        m[i].text = in[i].content;
    }
    char today[32];
    if (t == CHAT_LLAMA3_2 && !date) {
        const time_t now = time(NULL);
        struct tm tm;
        if (!localtime_r(&now, &tm) || !strftime(today, sizeof today, "%d %b %Y", &tm))
            snprintf(today, sizeof today, "26 Jul 2024");
        date = today;
    }
    sbuf b = {0};
    put(&b, "");
    switch (t) {
    case CHAT_PLAIN: render_plain(&b, m, n, add); break;
    case CHAT_CHATML: render_chatml(&b, m, n, add); break;
    case CHAT_QWEN2_5: render_qwen25(&b, m, n, add); break;
    case CHAT_QWEN3: render_qwen3(&b, m, n, add, false); break;
    case CHAT_QWEN3_NO_THINK: render_qwen3(&b, m, n, add, true); break;
    case CHAT_LLAMA2: render_llama2(&b, m, n, add); break;
    case CHAT_LLAMA3: render_llama3(&b, m, n, add); break;
    case CHAT_LLAMA3_1: render_llama31(&b, m, n, add, "26 Jul 2024"); break;
    case CHAT_LLAMA3_2: render_llama31(&b, m, n, add, date); break;
    case CHAT_GEMMA: render_gemma(&b, m, n, add); break;
    case CHAT_PHI3: render_phi3(&b, m, n, add); break;
    case CHAT_PHI4_MINI: render_phi4_mini(&b, m, n, add); break;
    case CHAT_PHI4: render_phi4(&b, m, n, add); break;
    case CHAT_MISTRAL_V1:
    case CHAT_MISTRAL_V3:
    case CHAT_MISTRAL_V3_TEKKEN: render_mistral(&b, m, n, t); break;
    case CHAT_MISTRAL_V7: render_mistral_v7(&b, m, n, false); break;
    case CHAT_MISTRAL_V7_TEKKEN: render_mistral_v7(&b, m, n, true); break;
    case CHAT_ZEPHYR: render_zephyr(&b, m, n, add); break;
    default: break;
    }
    free(m);
    if (b.oom) {
        free(b.p);
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    core_ok(st);
    return b.p;
}
