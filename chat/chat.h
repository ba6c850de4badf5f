/* chat/ - the chat templates of the model families kvant runs, written out
 * in C (no Jinja engine): each renders a conversation exactly as that
 * family's own Jinja chat template does with add_generation_prompt=true
 * (and, with add_assistant false, as it does with add_generation_prompt
 * false), special tokens as their text ("<|im_start|>", "<bos>").
 * Detection from a GGUF tokenizer.chat_template follows llama.cpp's
 * llm_chat_detect_template (markers in the template text), with a few more
 * markers where one llama.cpp kind covers families that render differently
 * (Qwen 2.5 / Qwen 3 / ChatML, Llama 3 / 3.1 / 3.2, Phi-3 / Phi-4-mini).
 *
 * Where a Jinja template refuses a conversation (raise_exception: roles that
 * do not alternate, a system message after the first in a template without
 * system turns) these render it anyway: a later system message is put in
 * front of the next user message ("SYSTEM\n\nUSER"); none is an error.
 * Whitespace trimming (Jinja's trim / strip) removes ASCII whitespace only.
 *
 * The public names and types are in include/kvant_infer.h ("chat templates");
 * prefix chat_. */
#ifndef KVANT_CHAT_H
#define KVANT_CHAT_H

#include "core/core.h"

/* The templates, in the order of include/kvant_infer.h's kvant_chat_template
 * (api/chat.c checks that the two agree). */
typedef enum {
    CHAT_PLAIN = 0, CHAT_CHATML, CHAT_QWEN2_5, CHAT_QWEN3, CHAT_QWEN3_NO_THINK, CHAT_LLAMA2, CHAT_LLAMA3,
    CHAT_LLAMA3_1, CHAT_LLAMA3_2, CHAT_GEMMA, CHAT_PHI3, CHAT_PHI4_MINI, CHAT_PHI4, CHAT_MISTRAL_V1,
    CHAT_MISTRAL_V3, CHAT_MISTRAL_V3_TEKKEN, CHAT_MISTRAL_V7, CHAT_MISTRAL_V7_TEKKEN, CHAT_ZEPHYR,
    CHAT_N_TEMPLATES
} chat_template;

/* One message (the layout of kvant_chat_msg): role "system", "user",
 * "assistant" or "tool" ("ipython" is "tool"), UTF-8 content; an
 * assistant's tool calls as the JSON text of OpenAI's tool_calls array, a
 * tool result's tool_call_id, its function's name (NULL when absent). */
typedef struct {
    const char *role;
    const char *content;
    const char *tool_calls_json;
    const char *tool_call_id;
    const char *name;
} chat_msg;

/* The template a Jinja chat template text is, by its markers.  NULL, empty
 * or unrecognised: CHAT_PLAIN.  A text that is exactly a template name
 * ("chatml") is that template, as in llama.cpp. */
chat_template chat_detect(const char *jinja);

/* The canonical name ("llama-3.1"); "?" for a value out of range. */
const char *chat_name(chat_template t);
/* By canonical name or by llama.cpp's name for it ("llama3", "phi3",
 * "gemma"...).  false when unknown. */
bool chat_from_name(const char *name, chat_template *out);
/* Every canonical name, ", "-separated (a static string). */
const char *chat_names(void);

/* The prompt text for msgs[0..n) (malloc'd, NUL-terminated), ending where
 * the assistant's reply begins when add_assistant.  tools_json: the JSON
 * text of OpenAI's tools array (NULL: no tools).  Roles: "system", "user",
 * "assistant", "tool"; anything else, a NULL role or content (content may be
 * NULL beside tool_calls_json), tools or tool_calls that are not JSON
 * arrays (of objects) is KVANT_ERR_ARG.  date: the "Today Date" of
 * llama-3.2 ("01 Dec 2026"); NULL: today, local time, as
 * strftime_now("%d %b %Y") gives it.  NULL + st on failure. */
char *chat_render(chat_template t, const chat_msg *msgs, int n, const char *tools_json, bool add_assistant,
                  const char *date, kvant_status *st);

/* ---- tool calls in the model's reply (tool_calls.c) ---------------------------
 * How a template's family writes calls:
 *   HERMES   Qwen 2.5 / 3:  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call> (any number, after text)
 *   LLAMA3   Llama 3.1/3.2: the whole reply {"name": "f", "parameters": {...}} (several: ";"- or
 *                           space-separated), or after <|python_tag|>
 *   MISTRAL  v3 / v7:       [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "..."}, ...] (after text)
 *   GENERIC  the rest: rendered and read as HERMES */
typedef enum { CHAT_TOOLS_GENERIC, CHAT_TOOLS_HERMES, CHAT_TOOLS_LLAMA3, CHAT_TOOLS_MISTRAL } chat_tool_format;

chat_tool_format chat_tools_of(chat_template t);

/* the layouts of kvant_chat_tool_call / kvant_chat_reply */
typedef struct {
    char *id;
    char *name;
    char *arguments;
} chat_tool_call;

typedef struct {
    char *content;
    chat_tool_call *calls;
    int n_calls;
} chat_reply;

/* The calls in text[0..len) (see kvant_chat_parse_tool_calls). */
kvant_code chat_parse_tool_calls(chat_template t, const char *text, size_t len, uint64_t id_seed, chat_reply *out,
                                 kvant_status *st);
void chat_reply_free(chat_reply *r);
/* 0, 1 or 2 (kvant_chat_tool_state) and *plain_len (see kvant_chat_tool_prefix) */
int chat_tool_prefix(chat_template t, const char *text, size_t len, size_t *plain_len);

#endif
