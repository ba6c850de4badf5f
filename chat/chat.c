/* chat.c - the families' chat templates, detected by markers and rendered by
 * hand.  Each render_* function follows one Jinja template; the comment
 * above it names the template and shows one rendered turn.  Messages are
 * validated once (render) and then read as (role, text) pairs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat.h"
#include "chat/json.h"

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
typedef chat_buf sbuf;

static void putn(sbuf *b, const char *s, size_t n) { chat_buf_putn(b, s, n); }
static void put(sbuf *b, const char *s) { chat_buf_put(b, s); }

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
enum { R_SYSTEM, R_USER, R_ASSISTANT, R_TOOL };

typedef struct {
    int role;
    const char *role_name; /* "system" / "user" / "assistant" / "tool" / "ipython" */
    const char *text;      /* "" for an assistant's NULL content */
    const chat_json *calls; /* an assistant's tool calls: an array of at least one, NULL when none */
    const char *call_id;   /* a tool result's tool_call_id (NULL: none) */
} msg;

/* ---- tools and tool calls --------------------------------------------------------
 * A tool call is an element of the message's tool_calls array, OpenAI's
 * {"id", "type": "function", "function": {"name", "arguments"}} (or the
 * function object itself, as some Hugging Face examples pass it).  Its
 * "arguments", a JSON text in OpenAI's API, has been read in place
 * (prepare_calls): the templates see the object, as llama.cpp passes them
 * to Jinja; a text that is not JSON stays a string. */
static const chat_json *call_fn(const chat_json *call) {
    const chat_json *f = chat_json_get(call, "function");
    return f && f->kind == CHAT_JSON_OBJ ? f : call;
}

static void put_json_str_raw(sbuf *b, const chat_json *v) { /* a string's text as Jinja's `+` adds it */
    if (v && v->kind == CHAT_JSON_STR) putn(b, v->s, v->n);
}

static void put_call_name(sbuf *b, const chat_json *call) { put_json_str_raw(b, chat_json_get(call_fn(call), "name")); }

/* tool_call.arguments | tojson (undefined: null, as @huggingface/jinja writes it) */
static void put_args_tojson(sbuf *b, const chat_json *call) {
    const chat_json *a = chat_json_get(call_fn(call), "arguments");
    if (a) chat_json_tojson(b, a, 0);
    else put(b, "null");
}

/* Qwen3's: a string as it is, anything else | tojson */
static void put_args_raw_or_tojson(sbuf *b, const chat_json *call) {
    const chat_json *a = chat_json_get(call_fn(call), "arguments");
    if (a && a->kind == CHAT_JSON_STR) putn(b, a->s, a->n);
    else put_args_tojson(b, call);
}

/* every arguments text that is JSON, read in place (the member keeps its key and place) */
static bool prepare_calls(chat_json_doc *d, chat_json *calls) {
    for (chat_json *c = calls->child; c; c = c->next) {
        chat_json *a = chat_json_get(call_fn(c), "arguments");
        if (!a || a->kind != CHAT_JSON_STR) continue;
        bool oom = false;
        chat_json *v = chat_json_parse_all(d, a->s, a->n, &oom);
        if (oom) return false;
        if (!v) continue;
        const char *key = a->key;
        const size_t key_n = a->key_n;
        chat_json *next = a->next;
        *a = *v;
        a->key = key, a->key_n = key_n, a->next = next;
    }
    return true;
}

/* Hermes-style calls, as Qwen's templates and the generic rendering write them:
 *   <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call> */
static void put_hermes_call(sbuf *b, const chat_json *call, bool raw_strings) {
    put(b, "<tool_call>\n{\"name\": \""), put_call_name(b, call), put(b, "\", \"arguments\": ");
    if (raw_strings) put_args_raw_or_tojson(b, call);
    else put_args_tojson(b, call);
    put(b, "}\n</tool_call>");
}

/* the tool list of Qwen 2.5 / Qwen 3 (and the generic rendering), after the system text */
static const char HERMES_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char HERMES_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

static void put_hermes_tools(sbuf *b, const chat_json *tools) {
    put(b, HERMES_TOOLS_HEAD);
    for (const chat_json *t = tools->child; t; t = t->next) put(b, "\n"), chat_json_tojson(b, t, 0);
    put(b, HERMES_TOOLS_TAIL);
}

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

/* Templates without a tool format of their own (README "Tool calls"): the
 * tools go into the system message as Qwen's template words them (Hermes
 * style; "SYSTEM\n\n" first when there is a system message), an assistant's
 * calls into its text as <tool_call> blocks ("TEXT\n" first when it has
 * text), and a run of tool results into one user message of <tool_response>
 * blocks, one a line; the family's own template then renders that. */
static bool generic_tools(const msg *in, int n, const chat_json *tools, conv *c) {
    *c = (conv){0};
    c->m = malloc(sizeof *c->m * (size_t)(n + 1));
    c->own = malloc(sizeof *c->own * (size_t)(n + 1));
    if (!c->m || !c->own) return false;
    int i = 0;
    if (tools && tools->count) {
        sbuf s = {0};
        if (n > 0 && in[0].role == R_SYSTEM) put(&s, in[0].text), put(&s, "\n\n"), i = 1;
        put_hermes_tools(&s, tools);
        if (s.oom) return free(s.p), false;
        c->own[c->n_own++] = s.p;
        c->m[c->n++] = (msg){R_SYSTEM, "system", s.p, NULL, NULL};
    }
    for (; i < n; i++) {
        msg m = in[i];
        sbuf s = {0};
        if (m.role == R_ASSISTANT && m.calls) {
            put(&s, m.text);
            for (const chat_json *k = m.calls->child; k; k = k->next) {
                if (k != m.calls->child || m.text[0]) put(&s, "\n");
                put_hermes_call(&s, k, true);
            }
            m.calls = NULL;
        } else if (m.role == R_TOOL) {
            for (; i < n && in[i].role == R_TOOL; i++) {
                if (s.len) put(&s, "\n");
                put(&s, "<tool_response>\n"), put(&s, in[i].text), put(&s, "\n</tool_response>");
            }
            i--;
            m = (msg){R_USER, "user", "", NULL, NULL};
        } else {
            c->m[c->n++] = m;
            continue;
        }
        if (s.oom) return free(s.p), false;
        m.text = c->own[c->n_own++] = s.p;
        c->m[c->n++] = m;
    }
    return true;
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

/* Qwen2.5-Instruct and Qwen3: ChatML, with the tools (when the list is not
 * empty) in the system turn that opens the prompt:
 *   "<|im_start|>system\nS\n\n# Tools\n\n...<tools>\n{tool}\n</tools>...<|im_end|>\n"
 * an assistant's calls after its text,
 *   "<|im_start|>assistant\nA\n<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call><|im_end|>\n"
 * and a run of tool results as one user turn,
 *   "<|im_start|>user\n<tool_response>\nR1\n</tool_response>\n<tool_response>\nR2\n</tool_response><|im_end|>\n".
 * Qwen2.5: without a system message first, "You are Qwen, created by
 * Alibaba Cloud. You are a helpful assistant." is the system text.
 * Qwen3: no default system text.  An assistant message's reasoning
 * ("<think>...</think>" before the answer) is dropped in turns before the
 * last user query and kept, re-spaced, after it:
 *   "<|im_start|>assistant\n<think>\nR\n</think>\n\nA<|im_end|>\n".
 * The generation prompt is "<|im_start|>assistant\n" (the model then thinks
 * first); qwen3-no-think appends "<think>\n\n</think>\n\n", as the template
 * does with enable_thinking=false.  Qwen3 writes a call's arguments that
 * are a string (not JSON) as they are, Qwen2.5 | tojson. */
static const char QWEN_DEFAULT_SYSTEM[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

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

static void put_im(sbuf *b, const char *role, const char *text) {
    put(b, "<|im_start|>"), put(b, role), put(b, "\n"), put(b, text), put(b, "<|im_end|>\n");
}

/* Qwen3's assistant turn up to its calls.  *content_nonempty: the template's `content` (after the split) is not empty */
static void qwen3_assistant(sbuf *b, const msg *m, bool after_query, bool last, bool *content_nonempty) {
    sbuf reason = {0}, content = {0};
    qwen3_split(m->text, &content, &reason);
    b->oom |= content.oom || reason.oom;
    const char *c = content.p ? content.p : "", *r = reason.p ? reason.p : "";
    put(b, "<|im_start|>assistant\n");
    if (after_query && (last || r[0])) {
        put(b, "<think>\n"), put_strip(b, r, "\n", true, true), put(b, "\n</think>\n\n");
        put_strip(b, c, "\n", true, false);
    } else {
        put(b, c);
    }
    *content_nonempty = c[0] != 0;
    free(content.p);
    free(reason.p);
}

static void render_qwen(sbuf *b, const msg *m, int n, bool add, const chat_json *tools, chat_template t) {
    const bool q3 = t != CHAT_QWEN2_5, sys0 = n > 0 && m[0].role == R_SYSTEM;
    if (tools && tools->count) {
        put(b, "<|im_start|>system\n");
        if (sys0 || !q3) put(b, sys0 ? m[0].text : QWEN_DEFAULT_SYSTEM), put(b, "\n\n");
        put_hermes_tools(b, tools);
        put(b, "<|im_end|>\n");
    } else if (sys0 || !q3) {
        put_im(b, "system", sys0 ? m[0].text : QWEN_DEFAULT_SYSTEM);
    }
    /* Qwen3: the last user message that is not a tool response (default: the last message) */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (m[i].role == R_USER &&
            !(!strncmp(m[i].text, "<tool_response>", 15) && ends_with(m[i].text, "</tool_response>"))) {
            last_query = i;
            break;
        }
    for (int i = sys0 ? 1 : 0; i < n; i++) {
        const msg *x = &m[i];
        if (x->role == R_TOOL) {
            if (i == 0 || m[i - 1].role != R_TOOL) put(b, "<|im_start|>user");
            put(b, "\n<tool_response>\n"), put(b, x->text), put(b, "\n</tool_response>");
            if (i == n - 1 || m[i + 1].role != R_TOOL) put(b, "<|im_end|>\n");
        } else if (x->role != R_ASSISTANT) {
            put_im(b, x->role_name, x->text);
        } else if (!q3) {
            if (!x->calls) {
                put_im(b, "assistant", x->text);
                continue;
            }
            put(b, "<|im_start|>assistant");
            if (x->text[0]) put(b, "\n"), put(b, x->text);
            for (const chat_json *k = x->calls->child; k; k = k->next) put(b, "\n"), put_hermes_call(b, k, false);
            put(b, "<|im_end|>\n");
        } else {
            bool content;
            qwen3_assistant(b, x, i > last_query, i == n - 1, &content);
            for (const chat_json *k = x->calls ? x->calls->child : NULL; k; k = k->next) {
                if (k != x->calls->child || content) put(b, "\n");
                put_hermes_call(b, k, true);
            }
            put(b, "<|im_end|>\n");
        }
    }
    if (add) {
        put(b, "<|im_start|>assistant\n");
        if (t == CHAT_QWEN3_NO_THINK) put(b, "<think>\n\n</think>\n\n");
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

/* Llama 3.1 / 3.2 / 3.3: a system turn always opens the prompt,
 *   "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date:
 *    December 2023\nToday Date: 26 Jul 2024\n\n" + trimmed system text + "<|eot_id|>",
 * then the other messages as in Llama 3.  3.1 and 3.3 date it 26 Jul 2024
 * (their default date_string); 3.2 with today's date (strftime_now).
 * With tools (even an empty list: the template tests `is not none`) the
 * system turn starts "Environment: ipython\n" and the first message after
 * it becomes a user turn that lists them (tools_in_user_message, the
 * default), each tool | tojson(indent=4):
 *   "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, ...
 *    Do not use variables.\n\n{\n    \"type\": \"function\", ...}\n\n" + trimmed text + "<|eot_id|>"
 * A call is the assistant's whole turn, {"name": "f", "parameters": ARGS};
 * a tool result is an "ipython" turn holding its content | tojson (a string
 * is quoted).  The template takes one call a message: kvant writes each of
 * several as its own assistant turn. */
static void render_llama31(sbuf *b, const msg *m, int n, bool add, const char *date, const chat_json *tools) {
    put(b, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n");
    if (tools) put(b, "Environment: ipython\n");
    put(b, "Cutting Knowledge Date: December 2023\n");
    put(b, "Today Date: "), put(b, date), put(b, "\n\n");
    int i = 0;
    if (n > 0 && m[0].role == R_SYSTEM) put_trim(b, m[0].text), i = 1;
    put(b, "<|eot_id|>");
    if (tools) {
        put(b, "<|start_header_id|>user<|end_header_id|>\n\n"
               "Given the following functions, please respond with a JSON for a function call with its proper "
               "arguments that best answers the given prompt.\n\n"
               "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
               "value}.Do not use variables.\n\n");
        for (const chat_json *t = tools->child; t; t = t->next) chat_json_tojson(b, t, 4), put(b, "\n\n");
        if (i < n) put_trim(b, m[i++].text); /* the template refuses a conversation without one */
        put(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        if (m[i].role == R_TOOL) {
            put(b, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            chat_json_put_str(b, m[i].text, strlen(m[i].text));
            put(b, "<|eot_id|>");
        } else if (m[i].calls) {
            for (const chat_json *k = m[i].calls->child; k; k = k->next) {
                put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \""), put_call_name(b, k);
                put(b, "\", \"parameters\": "), put_args_tojson(b, k), put(b, "}<|eot_id|>");
            }
        } else {
            llama3_turn(b, m[i].role_name, m[i].text);
        }
    }
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
 * the FIRST user turn (no tool format: the generic one).
 *   "<s> [INST] s\n\nu [/INST] a</s> [INST] u2 [/INST]"
 * Mistral v3 (Mistral-7B-Instruct-v0.3): the system text opens the LAST
 * message when it is a user turn (else it is left out); answers trimmed.
 *   "<s>[INST] u [/INST]"... "<s>[INST] u[/INST] a</s>[INST] s\n\nu2[/INST]"
 * Mistral v3-Tekken (Nemo): as v3 without spaces, answers as they are.
 *   "<s>[INST]u[/INST]a</s>[INST]s\n\nu2[/INST]"
 * None has a generation prompt.  v3 and Nemo with tools (even an empty
 * list: `is not none`): before the last user turn,
 *   "[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "f", ...}}][/AVAILABLE_TOOLS]"
 * each function's members written by hand (a string as it is, between
 * quotes; anything else | tojson; "return" left out); an assistant's calls
 * (its text is not rendered)
 *   "[TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "abcDEF123"}]</s>"
 * (function | tojson with the id put in; no id: without it) and a tool result
 *   "[TOOL_RESULTS]{"content": R, "call_id": "abcDEF123"}[/TOOL_RESULTS]"
 * (R as it is).  v3 puts a space after [AVAILABLE_TOOLS], [TOOL_CALLS] and
 * [TOOL_RESULTS]. */
static void mistral_v3_tools(sbuf *b, const chat_json *tools, const char *sp) {
    put(b, "[AVAILABLE_TOOLS]"), put(b, sp), put(b, "[");
    for (const chat_json *t = tools->child; t; t = t->next) {
        const chat_json **mem;
        const int k = chat_json_members(chat_json_get(t, "function"), &mem);
        if (k < 0) {
            b->oom = true;
            return;
        }
        put(b, "{\"type\": \"function\", \"function\": {");
        bool first = true;
        for (int j = 0; j < k; j++) {
            const chat_json *v = mem[j];
            if (v->key_n == 6 && !memcmp(v->key, "return", 6)) continue;
            if (!first) put(b, ", ");
            first = false;
            put(b, "\""), putn(b, v->key, v->key_n), put(b, "\": ");
            if (v->kind == CHAT_JSON_STR) put(b, "\""), putn(b, v->s, v->n), put(b, "\"");
            else chat_json_tojson(b, v, 0);
        }
        free(mem);
        put(b, "}}"), put(b, t->next ? ", " : "]");
    }
    put(b, "[/AVAILABLE_TOOLS]");
}

static void mistral_v3_calls(sbuf *b, const chat_json *calls, const char *sp) {
    put(b, "[TOOL_CALLS]"), put(b, sp), put(b, "[");
    for (const chat_json *k = calls->child; k; k = k->next) {
        sbuf f = {0};
        chat_json_tojson(&f, call_fn(k), 0);
        b->oom |= f.oom;
        const chat_json *id = chat_json_get(k, "id");
        if (f.p && id && id->kind == CHAT_JSON_STR) {
            putn(b, f.p, f.len - 1), put(b, ", \"id\": \""), putn(b, id->s, id->n), put(b, "\"}");
        } else if (f.p) {
            putn(b, f.p, f.len);
        }
        free(f.p);
        put(b, k->next ? ", " : "]</s>");
    }
}

static void render_mistral(sbuf *b, const msg *in, int n, chat_template t, const chat_json *tools) {
    const char *sys;
    conv c;
    if (!fold_system(in, n, &sys, &c)) {
        b->oom = true;
        conv_free(&c);
        return;
    }
    int last_user = -1;
    for (int i = 0; i < c.n; i++)
        if (c.m[i].role == R_USER) last_user = i;
    const bool tekken = t == CHAT_MISTRAL_V3_TEKKEN;
    const char *sp = tekken ? "" : " ";
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
        } else if (m->role == R_USER) {
            if (tools && i == last_user) mistral_v3_tools(b, tools, sp);
            put(b, tekken ? "[INST]" : "[INST] ");
            if (i == c.n - 1 && sys) put(b, sys), put(b, "\n\n");
            put(b, m->text), put(b, "[/INST]");
        } else if (m->calls) {
            mistral_v3_calls(b, m->calls, sp);
        } else if (m->role == R_TOOL) {
            put(b, "[TOOL_RESULTS]"), put(b, sp), put(b, "{\"content\": "), put(b, m->text);
            if (m->call_id) put(b, ", \"call_id\": \""), put(b, m->call_id), put(b, "\"");
            put(b, "}[/TOOL_RESULTS]");
        } else if (tekken) {
            put(b, m->text), put(b, "</s>");
        } else {
            put(b, " "), put_trim(b, m->text), put(b, "</s>");
        }
    }
    conv_free(&c);
}

/* Mistral v7 (Mistral-Large-2411), as llama.cpp renders it; system turns
 * anywhere; no generation prompt:
 *   "<s>[SYSTEM_PROMPT] s[/SYSTEM_PROMPT][INST] u[/INST] a</s>[INST] u2[/INST]"
 * v7-Tekken (Mistral Small 3): the same without the spaces.  (Mistral Small
 * 3's own template also injects a default system prompt: not done here.)
 * Neither Jinja template has tools; they follow mistral_common's v7
 * tokenizer (with the space the SentencePiece v7 puts before each text):
 * the tools (a non-empty list) | tojson before the last user turn,
 *   "[AVAILABLE_TOOLS] [{"type": "function", ...}][/AVAILABLE_TOOLS][INST] u[/INST]"
 * the calls after the assistant's text (if any),
 *   " a[TOOL_CALLS] [{"name": "f", "arguments": {...}, "id": "abcDEF123"}]</s>"
 * and a tool result
 *   "[TOOL_RESULTS] abcDEF123[TOOL_CONTENT] R[/TOOL_RESULTS]". */
static void render_mistral_v7(sbuf *b, const msg *m, int n, bool tekken, const chat_json *tools) {
    const char *sp = tekken ? "" : " ";
    int last_user = -1;
    for (int i = 0; i < n; i++)
        if (m[i].role == R_USER) last_user = i;
    put(b, "<s>");
    for (int i = 0; i < n; i++) {
        if (m[i].role == R_SYSTEM) {
            put(b, "[SYSTEM_PROMPT]"), put(b, sp), put(b, m[i].text), put(b, "[/SYSTEM_PROMPT]");
        } else if (m[i].role == R_USER) {
            if (tools && tools->count && i == last_user)
                put(b, "[AVAILABLE_TOOLS]"), put(b, sp), chat_json_tojson(b, tools, 0), put(b, "[/AVAILABLE_TOOLS]");
            put(b, "[INST]"), put(b, sp), put(b, m[i].text), put(b, "[/INST]");
        } else if (m[i].role == R_TOOL) {
            put(b, "[TOOL_RESULTS]"), put(b, sp), put(b, m[i].call_id ? m[i].call_id : ""), put(b, "[TOOL_CONTENT]");
            put(b, sp), put(b, m[i].text), put(b, "[/TOOL_RESULTS]");
        } else {
            if (m[i].text[0] || !m[i].calls) put(b, sp), put(b, m[i].text);
            if (m[i].calls) {
                put(b, "[TOOL_CALLS]"), put(b, sp), put(b, "[");
                for (const chat_json *k = m[i].calls->child; k; k = k->next) {
                    const chat_json *name = chat_json_get(call_fn(k), "name"), *id = chat_json_get(k, "id");
                    put(b, "{\"name\": ");
                    if (name) chat_json_tojson(b, name, 0);
                    else put(b, "null");
                    put(b, ", \"arguments\": "), put_args_tojson(b, k);
                    if (id && id->kind == CHAT_JSON_STR) put(b, ", \"id\": "), chat_json_tojson(b, id, 0);
                    put(b, k->next ? "}, " : "}]");
                }
            }
            put(b, "</s>");
        }
    }
}

/* Zephyr (zephyr-7b-beta): "<|user|>\nu</s>\n" ... "<|assistant|>\n" (the
 * template adds the generation prompt after the last message only). */
static void render_zephyr(sbuf *b, const msg *m, int n, bool add) {
    for (int i = 0; i < n; i++) put(b, "<|"), put(b, m[i].role_name), put(b, "|>\n"), put(b, m[i].text), put(b, "</s>\n");
    if (add && n > 0) put(b, "<|assistant|>\n");
}

/* ---- entry ------------------------------------------------------------------------- */
chat_tool_format chat_tools_of(chat_template t) {
    switch (t) {
    case CHAT_LLAMA3_1:
    case CHAT_LLAMA3_2: return CHAT_TOOLS_LLAMA3;
    case CHAT_MISTRAL_V3:
    case CHAT_MISTRAL_V3_TEKKEN:
    case CHAT_MISTRAL_V7:
    case CHAT_MISTRAL_V7_TEKKEN: return CHAT_TOOLS_MISTRAL;
    case CHAT_QWEN2_5:
    case CHAT_QWEN3:
    case CHAT_QWEN3_NO_THINK: return CHAT_TOOLS_HERMES;
    default: return CHAT_TOOLS_GENERIC;
    }
}

static int role_of(const char *r) {
    if (!strcmp(r, "system")) return R_SYSTEM;
    if (!strcmp(r, "user")) return R_USER;
    if (!strcmp(r, "assistant")) return R_ASSISTANT;
    if (!strcmp(r, "tool") || !strcmp(r, "ipython")) return R_TOOL;
    return -1;
}

/* m[0..n) from in: roles checked, tool calls read (into d) */
static kvant_code read_messages(const chat_msg *in, int n, chat_json_doc *d, msg *m, kvant_status *st) {
    for (int i = 0; i < n; i++) {
        const char *r = in[i].role;
        if (!r) return core_fail(st, KVANT_ERR_ARG, "message %d has no role", i);
        m[i] = (msg){role_of(r), r, in[i].content, NULL, in[i].tool_call_id};
        if (m[i].role < 0)
            return core_fail(st, KVANT_ERR_ARG, "message %d: unknown role '%.32s' (system, user, assistant or tool)", i, r);
        if (in[i].tool_calls_json) {
            if (m[i].role != R_ASSISTANT)
                return core_fail(st, KVANT_ERR_ARG, "message %d: tool_calls on a message of role '%.32s'", i, r);
            bool oom = false;
            chat_json *v = chat_json_parse_all(d, in[i].tool_calls_json, strlen(in[i].tool_calls_json), &oom);
            if (oom || (v && v->kind == CHAT_JSON_ARR && !prepare_calls(d, v)))
                return core_fail(st, KVANT_ERR_NOMEM, "out of memory");
            bool objects = v && v->kind == CHAT_JSON_ARR;
            for (const chat_json *k = objects ? v->child : NULL; k; k = k->next) objects &= k->kind == CHAT_JSON_OBJ;
            if (!objects) return core_fail(st, KVANT_ERR_ARG, "message %d: tool_calls is not a JSON array of objects", i);
            m[i].calls = v->count ? v : NULL; /* an empty list is no calls */
            if (!m[i].text) m[i].text = ""; /* content null beside tool calls, as OpenAI sends it */
        }
        if (!m[i].text) return core_fail(st, KVANT_ERR_ARG, "message %d has no content", i);
    }
    return KVANT_OK;
}

char *chat_render(chat_template t, const chat_msg *in, int n, const char *tools_json, bool add, const char *date,
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
    chat_json_doc *d = chat_json_doc_new();
    conv g = {0};
    sbuf b = {0};
    if (!m || !d) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    const chat_json *tools = NULL;
    if (tools_json) {
        bool oom = false;
        const chat_json *v = chat_json_parse_all(d, tools_json, strlen(tools_json), &oom);
        if (!v || v->kind != CHAT_JSON_ARR) {
            if (oom) core_fail(st, KVANT_ERR_NOMEM, "out of memory");
            else core_fail(st, KVANT_ERR_ARG, "tools is not a JSON array");
            goto fail;
        }
        tools = v;
    }
    if (read_messages(in, n, d, m, st) != KVANT_OK) goto fail;
    char today[32];
    if (t == CHAT_LLAMA3_2 && !date) {
        const time_t now = time(NULL);
        struct tm tm;
        if (!localtime_r(&now, &tm) || !strftime(today, sizeof today, "%d %b %Y", &tm))
            snprintf(today, sizeof today, "26 Jul 2024");
        date = today;
    }
    const msg *rm = m;
    int rn = n;
    if (chat_tools_of(t) == CHAT_TOOLS_GENERIC) { /* tools, calls and results as text, then the template */
        if (!generic_tools(m, n, tools, &g)) b.oom = true;
        rm = g.m, rn = g.n;
    }
    put(&b, "");
    if (!b.oom) switch (t) {
        case CHAT_PLAIN: render_plain(&b, rm, rn, add); break;
        case CHAT_CHATML: render_chatml(&b, rm, rn, add); break;
        case CHAT_QWEN2_5:
        case CHAT_QWEN3:
        case CHAT_QWEN3_NO_THINK: render_qwen(&b, rm, rn, add, tools, t); break;
        case CHAT_LLAMA2: render_llama2(&b, rm, rn, add); break;
        case CHAT_LLAMA3: render_llama3(&b, rm, rn, add); break;
        case CHAT_LLAMA3_1: render_llama31(&b, rm, rn, add, "26 Jul 2024", tools); break;
        case CHAT_LLAMA3_2: render_llama31(&b, rm, rn, add, date, tools); break;
        case CHAT_GEMMA: render_gemma(&b, rm, rn, add); break;
        case CHAT_PHI3: render_phi3(&b, rm, rn, add); break;
        case CHAT_PHI4_MINI: render_phi4_mini(&b, rm, rn, add); break;
        case CHAT_PHI4: render_phi4(&b, rm, rn, add); break;
        case CHAT_MISTRAL_V1:
        case CHAT_MISTRAL_V3:
        case CHAT_MISTRAL_V3_TEKKEN: render_mistral(&b, rm, rn, t, tools); break;
        case CHAT_MISTRAL_V7: render_mistral_v7(&b, rm, rn, false, tools); break;
        case CHAT_MISTRAL_V7_TEKKEN: render_mistral_v7(&b, rm, rn, true, tools); break;
        case CHAT_ZEPHYR: render_zephyr(&b, rm, rn, add); break;
        default: break;
        }
    if (b.oom) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    conv_free(&g);
    chat_json_doc_free(d);
    free(m);
    core_ok(st);
    return b.p;
fail:
    free(b.p);
    conv_free(&g);
    chat_json_doc_free(d);
    free(m);
    return NULL;
}
