/* test_server_tools.c - tool calls in kvant serve's /v1/chat/completions.
 *
 * The shipped model (stories260K) has no chat template and never writes a
 * tool call by itself, so the reply side is first driven directly: a fixed
 * reply text is tokenized with the model's vocabulary and fed, token by
 * token, as engine events to the server's own consumer code (srv_drain,
 * srv_render_final), exactly as the engine thread's events would arrive:
 * the non-streamed body and the SSE deltas the openai client reads, per
 * family, with stops, n > 1, held text that was no call.  Then kvant serve
 * over HTTP: requests with tools, calls and results accepted and rendered
 * (the prompt /apply-template shows), every refusal naming its field.  Last,
 * a real call end to end: a copy of stories260K whose vocabulary names the
 * tokens it answers one request with (test_end_to_end_call says how), served
 * by kvant serve.  Control-token text (kvant_token_to_piece_ex) is checked on
 * the model's own control tokens.  tests/node/test_openai.mjs reads what this
 * test writes to tmp/ (the SSE transcript, the relabelled model). */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/gguf.h"
#include "server/srv_internal.h"
#include "server_util.h"
#include "testutil.h"

static kvant_model *g_model;

/* ---- kvant_token_to_piece_ex: control tokens' text ------------------------------- */
static void test_token_piece_special(void **state) {
    (void)state;
    kvant_model_info info;
    kvant_model_get_info(g_model, &info);
    char buf[64];
    /* BOS / EOS are control tokens: nothing without special, their text with it */
    assert_int_equal(kvant_token_to_piece(g_model, -1, info.bos_id, buf, sizeof buf), 0);
    assert_int_equal(kvant_token_to_piece_ex(g_model, -1, info.bos_id, false, buf, sizeof buf), 0);
    int n = kvant_token_to_piece_ex(g_model, -1, info.bos_id, true, buf, sizeof buf);
    assert_int_equal(n, 3);
    assert_memory_equal(buf, "<s>", 3);
    n = kvant_token_to_piece_ex(g_model, 5, info.eos_id, true, buf, sizeof buf);
    assert_int_equal(n, 4);
    assert_memory_equal(buf, "</s>", 4);
    /* cut at cap, as kvant_token_to_piece cuts */
    assert_int_equal(kvant_token_to_piece_ex(g_model, -1, info.eos_id, true, buf, 2), 2);
    assert_memory_equal(buf, "</", 2);
    /* ordinary tokens: the same bytes either way, the leading-space rule included */
    for (int32_t t = 3; t < info.vocab_size; t++) {
        char a[64], b[64];
        for (int prev = -1; prev <= 1; prev += 2) {
            const int na = kvant_token_to_piece(g_model, prev, t, a, sizeof a);
            const int nb = kvant_token_to_piece_ex(g_model, prev, t, true, b, sizeof b);
            assert_int_equal(na, nb);
            assert_memory_equal(a, b, (size_t)na);
        }
    }
    /* outside the vocabulary: nothing */
    assert_int_equal(kvant_token_to_piece_ex(g_model, -1, info.vocab_size, true, buf, sizeof buf), 0);
    assert_int_equal(kvant_token_to_piece_ex(g_model, -1, -1, true, buf, sizeof buf), 0);
}

/* ---- a request built by hand, fed the model's tokens ---------------------------------
 * The server's consumer side without an engine: a srv holding the model and
 * a template, an sreq as srv_req_submit makes one, events pushed into its
 * queue as the engine thread's route() pushes them, and srv_drain after
 * each (as the stream reader / the blocking handler calls it). */
typedef struct {
    srv s;
    sreq *r;
} fake;

static void fake_init(fake *f, kvant_chat_template t, bool stream, bool tools, int n, const char *stop) {
    memset(f, 0, sizeof *f);
    f->s.m = g_model;
    kvant_model_get_info(g_model, &f->s.info);
    snprintf(f->s.model_id, sizeof f->s.model_id, "stories260K");
    f->s.chat_kind = t;
    srv_metrics_init(&f->s.mt);
    sreq *r = f->r = calloc(1, sizeof *r);
    assert_non_null(r);
    pthread_mutex_init(&r->mu, NULL);
    r->s = &f->s;
    r->refs = 1;
    r->id = 7;
    r->chat = true;
    r->stream = stream;
    r->tools = tools;
    r->tool_seed = 42;
    r->n = r->n_return = n;
    r->logprobs = -1;
    r->n_prompt = 10;
    r->created = 1700000000;
    r->engine_done = true; /* no engine to cancel at the end */
    for (int i = 0; i < n; i++) r->ch[i].prev = f->s.info.bos_id; /* the first piece drops SPM's leading space */
    if (stop) r->stops[r->n_stops++] = strdup(stop);
}

static void fake_free(fake *f) {
    srv_req_unref(f->r);
    pthread_mutex_destroy(&f->s.mt.mu);
}

static void push(sreq *r, int index, int32_t token, kvant_finish fin) {
    if (r->q_len == r->q_cap) {
        r->q_cap = r->q_cap ? 2 * r->q_cap : 16;
        r->q = realloc(r->q, (size_t)r->q_cap * sizeof *r->q);
        assert_non_null(r->q);
    }
    r->q[r->q_len++] = (kvant_event){.id = r->id, .index = index, .token = token, .finish = fin};
}

/* choice i generates `text` (as this vocabulary spells it, token by token),
 * then finishes with fin */
static void generate(sreq *r, int i, const char *text, kvant_finish fin) {
    int32_t tok[1024];
    const int n = kvant_tokenize(g_model, text, strlen(text), false, tok, 1024);
    assert_true(n > 0);
    for (int k = 0; k < n; k++) {
        push(r, i, tok[k], KVANT_FINISH_NONE);
        srv_drain(r);
    }
    push(r, i, -1, fin);
    srv_drain(r);
    /* the text is the one asked for (the tokens round-trip) unless a stop cut it */
    if (!r->ch[i].text.stopped) assert_string_equal(r->ch[i].text.buf, text);
}

/* a finished non-streamed request's body */
static cJSON *final_body(fake *f) {
    assert_true(f->r->all_finished);
    cJSON *j = srv_render_final(f->r);
    assert_non_null(j);
    return j;
}

static cJSON *at(cJSON *j, const char *path) { /* "choices.0.message.content" */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *t = strtok(buf, "."); t && j; t = strtok(NULL, "."))
        j = (*t >= '0' && *t <= '9') ? cJSON_GetArrayItem(j, atoi(t)) : cJSON_GetObjectItemCaseSensitive(j, t);
    return j;
}

static const char *str_at(cJSON *j, const char *path) {
    cJSON *x = at(j, path);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* the SSE events of r->out, "[DONE]" as a JSON string */
typedef struct {
    cJSON *ev[256];
    int n;
    bool done;
} sse;

static void sse_read(const sreq *r, sse *o) {
    memset(o, 0, sizeof *o);
    char *t = strndup(r->out ? r->out : "", r->out_len);
    for (char *p = t; *p;) {
        char *e = strstr(p, "\n\n");
        assert_non_null(e); /* every event ends with a blank line */
        *e = 0;
        assert_memory_equal(p, "data: ", 6);
        assert_false(o->done); /* nothing after [DONE] */
        if (!strcmp(p + 6, "[DONE]")) o->done = true;
        else {
            assert_true(o->n < 256);
            assert_non_null(o->ev[o->n++] = cJSON_Parse(p + 6));
        }
        p = e + 2;
    }
    free(t);
    assert_true(o->done);
}

static void sse_free(sse *o) {
    for (int i = 0; i < o->n; i++) cJSON_Delete(o->ev[i]);
}

/* what a client adds up from the deltas of choice i: the content (and in how
 * many deltas it came), the calls (as the openai client accumulates them:
 * by index, arguments appended), the finish reason */
typedef struct {
    char content[4096];
    int content_deltas;
    int n_calls;
    char id[8][64], name[8][64], args[8][256];
    const char *finish;
    int finish_at, last_content_at, first_call_at; /* event numbers */
    bool role;
} acc;

static void accumulate(sse *o, int i, acc *a) {
    memset(a, 0, sizeof *a);
    a->finish_at = a->last_content_at = a->first_call_at = -1;
    for (int k = 0; k < o->n; k++) {
        cJSON *chs = at(o->ev[k], "choices"), *ch;
        cJSON_ArrayForEach(ch, chs) {
            if ((int)at(ch, "index")->valuedouble != i) continue;
            assert_true(a->finish_at < 0); /* nothing after the finish */
            cJSON *d = at(ch, "delta"), *f;
            assert_true(cJSON_IsObject(d));
            cJSON_ArrayForEach(f, d) /* the keys the openai client's stream helpers take */
                assert_true(!strcmp(f->string, "role") || !strcmp(f->string, "content") ||
                            !strcmp(f->string, "tool_calls"));
            if (str_at(d, "role")) assert_string_equal(str_at(d, "role"), "assistant"), a->role = true;
            if (str_at(d, "content") && str_at(d, "content")[0]) {
                strcat(a->content, str_at(d, "content"));
                a->content_deltas++;
                a->last_content_at = k;
            }
            cJSON *tc;
            cJSON_ArrayForEach(tc, at(d, "tool_calls")) {
                const int x = (int)at(tc, "index")->valuedouble;
                assert_true(x >= 0 && x < 8);
                if (x >= a->n_calls) a->n_calls = x + 1;
                if (a->first_call_at < 0) a->first_call_at = k;
                if (str_at(tc, "id")) snprintf(a->id[x], 64, "%s", str_at(tc, "id"));
                if (str_at(tc, "type")) assert_string_equal(str_at(tc, "type"), "function");
                if (str_at(tc, "function.name")) snprintf(a->name[x], 64, "%s", str_at(tc, "function.name"));
                if (str_at(tc, "function.arguments")) strcat(a->args[x], str_at(tc, "function.arguments"));
            }
            if (str_at(ch, "finish_reason")) a->finish = str_at(ch, "finish_reason"), a->finish_at = k;
        }
    }
    assert_true(a->role);
    assert_non_null(a->finish);
}

static void print_sse(const char *title, const sreq *r) {
    printf("---- %s ----\n%.*s", title, (int)r->out_len, r->out);
}

#define QWEN_CALL "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"

/* ---- the non-streamed body -------------------------------------------------------- */
static void test_final_body(void **state) {
    (void)state;
    fake f;
    /* a reply that is one call: content null, tool_calls, finish "tool_calls" */
    fake_init(&f, KVANT_CHAT_QWEN2_5, false, true, 1, NULL);
    generate(f.r, 0, QWEN_CALL, KVANT_FINISH_EOS);
    cJSON *j = final_body(&f);
    char *t = cJSON_PrintUnformatted(j);
    printf("---- non-streamed body ----\n%s\n", t);
    free(t);
    assert_string_equal(str_at(j, "object"), "chat.completion");
    assert_string_equal(str_at(j, "choices.0.message.role"), "assistant");
    assert_true(cJSON_IsNull(at(j, "choices.0.message.content")));
    assert_int_equal(cJSON_GetArraySize(at(j, "choices.0.message.tool_calls")), 1);
    const char *id = str_at(j, "choices.0.message.tool_calls.0.id");
    assert_non_null(id);
    assert_int_equal(strlen(id), 14);
    assert_memory_equal(id, "call_", 5);
    assert_string_equal(str_at(j, "choices.0.message.tool_calls.0.type"), "function");
    assert_string_equal(str_at(j, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    assert_string_equal(str_at(j, "choices.0.message.tool_calls.0.function.arguments"), "{\"city\":\"Paris\"}");
    assert_null(at(j, "choices.0.message.tool_calls.0.index")); /* only a stream's deltas number them */
    assert_string_equal(str_at(j, "choices.0.finish_reason"), "tool_calls");
    assert_int_equal((int)at(j, "usage.completion_tokens")->valuedouble, f.r->ch[0].n_tokens); /* unchanged */
    char first_id[32];
    snprintf(first_id, sizeof first_id, "%s", id);
    cJSON_Delete(j);
    fake_free(&f);

    /* the same reply and seed: the same id; text before the call is content */
    fake_init(&f, KVANT_CHAT_QWEN2_5, false, true, 1, NULL);
    generate(f.r, 0, "Let me check.\n" QWEN_CALL, KVANT_FINISH_EOS);
    j = final_body(&f);
    assert_string_equal(str_at(j, "choices.0.message.content"), "Let me check.");
    assert_string_equal(str_at(j, "choices.0.message.tool_calls.0.id"), first_id);
    assert_string_equal(str_at(j, "choices.0.finish_reason"), "tool_calls");
    cJSON_Delete(j);
    fake_free(&f);

    /* n = 2: each choice read on its own, with ids of its own */
    fake_init(&f, KVANT_CHAT_QWEN2_5, false, true, 2, NULL);
    generate(f.r, 0, QWEN_CALL, KVANT_FINISH_EOS);
    generate(f.r, 1, "No tool needed.", KVANT_FINISH_EOS);
    j = final_body(&f);
    assert_string_equal(str_at(j, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    assert_string_equal(str_at(j, "choices.1.message.content"), "No tool needed.");
    assert_null(at(j, "choices.1.message.tool_calls"));
    assert_string_equal(str_at(j, "choices.1.finish_reason"), "stop");
    cJSON_Delete(j);
    fake_free(&f);
    fake_init(&f, KVANT_CHAT_QWEN2_5, false, true, 2, NULL);
    generate(f.r, 0, QWEN_CALL, KVANT_FINISH_EOS);
    generate(f.r, 1, QWEN_CALL, KVANT_FINISH_EOS);
    j = final_body(&f);
    assert_string_not_equal(str_at(j, "choices.0.message.tool_calls.0.id"), str_at(j, "choices.1.message.tool_calls.0.id"));
    cJSON_Delete(j);
    fake_free(&f);

    /* two calls in one reply */
    fake_init(&f, KVANT_CHAT_QWEN2_5, false, true, 1, NULL);
    generate(f.r, 0, QWEN_CALL "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", KVANT_FINISH_EOS);
    j = final_body(&f);
    assert_int_equal(cJSON_GetArraySize(at(j, "choices.0.message.tool_calls")), 2);
    assert_string_equal(str_at(j, "choices.0.message.tool_calls.1.function.name"), "get_time");
    assert_string_equal(str_at(j, "choices.0.message.tool_calls.1.function.arguments"), "{}");
    assert_string_not_equal(str_at(j, "choices.0.message.tool_calls.0.id"), str_at(j, "choices.0.message.tool_calls.1.id"));
    cJSON_Delete(j);
    fake_free(&f);

    /* a call cut off (max_tokens): no calls, all content, "length" */
    fake_init(&f, KVANT_CHAT_QWEN2_5, false, true, 1, NULL);
    generate(f.r, 0, "<tool_call>\n{\"name\": \"get_weather\", \"argu", KVANT_FINISH_LENGTH);
    j = final_body(&f);
    assert_string_equal(str_at(j, "choices.0.message.content"), "<tool_call>\n{\"name\": \"get_weather\", \"argu");
    assert_null(at(j, "choices.0.message.tool_calls"));
    assert_string_equal(str_at(j, "choices.0.finish_reason"), "length");
    cJSON_Delete(j);
    fake_free(&f);
    /* a whole call, then max_tokens: the call, and "length" (it did not end by itself) */
    fake_init(&f, KVANT_CHAT_QWEN2_5, false, true, 1, NULL);
    generate(f.r, 0, QWEN_CALL "\nMore", KVANT_FINISH_LENGTH);
    j = final_body(&f);
    assert_string_equal(str_at(j, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    assert_string_equal(str_at(j, "choices.0.finish_reason"), "length");
    cJSON_Delete(j);
    fake_free(&f);

    /* without tools (none given, or tool_choice "none"): the text as it is */
    fake_init(&f, KVANT_CHAT_QWEN2_5, false, false, 1, NULL);
    generate(f.r, 0, QWEN_CALL, KVANT_FINISH_EOS);
    j = final_body(&f);
    assert_string_equal(str_at(j, "choices.0.message.content"), QWEN_CALL);
    assert_null(at(j, "choices.0.message.tool_calls"));
    assert_string_equal(str_at(j, "choices.0.finish_reason"), "stop");
    cJSON_Delete(j);
    fake_free(&f);
}

/* ---- the SSE deltas ----------------------------------------------------------------- */
static void test_stream_deltas(void **state) {
    (void)state;
    fake f;
    sse o;
    acc a;
    fake_init(&f, KVANT_CHAT_QWEN2_5, true, true, 1, NULL);
    f.r->include_usage = true;
    generate(f.r, 0, "Let me check.\n" QWEN_CALL, KVANT_FINISH_EOS);
    print_sse("streamed reply with a tool call (qwen2.5)", f.r);
    /* the openai replay in tests/node/test_openai.mjs reads this transcript */
    FILE *fp = fopen(tmp_path("tool_call_stream.sse"), "wb");
    assert_non_null(fp);
    fwrite(f.r->out, 1, f.r->out_len, fp);
    fclose(fp);
    sse_read(f.r, &o);
    accumulate(&o, 0, &a);
    assert_string_equal(a.content, "Let me check.");
    assert_true(a.content_deltas >= 2);   /* streamed as it came, not at the end */
    assert_null(strchr(a.content, '<'));  /* nothing of the call leaked into content */
    assert_int_equal(a.n_calls, 1);
    assert_string_equal(a.name[0], "get_weather");
    assert_string_equal(a.args[0], "{\"city\":\"Paris\"}");
    assert_string_equal(a.finish, "tool_calls");
    assert_true(a.last_content_at < a.first_call_at && a.first_call_at < a.finish_at);
    /* the finish in a chunk of its own with an empty delta, then usage, then [DONE] */
    assert_int_equal(cJSON_GetArraySize(at(o.ev[a.finish_at], "choices.0.delta")), 0);
    assert_int_equal(a.finish_at, o.n - 2);
    assert_int_equal((int)at(o.ev[o.n - 1], "usage.completion_tokens")->valuedouble, f.r->ch[0].n_tokens);
    /* the ids a non-streamed reply gets with the same seed */
    fake g;
    fake_init(&g, KVANT_CHAT_QWEN2_5, false, true, 1, NULL);
    generate(g.r, 0, "Let me check.\n" QWEN_CALL, KVANT_FINISH_EOS);
    cJSON *j = final_body(&g);
    assert_string_equal(a.id[0], str_at(j, "choices.0.message.tool_calls.0.id"));
    cJSON_Delete(j);
    fake_free(&g);
    sse_free(&o);
    fake_free(&f);

    /* a reply that only looked like a call: the held text goes out as content at the end */
    fake_init(&f, KVANT_CHAT_QWEN2_5, true, true, 1, NULL);
    generate(f.r, 0, "Use <tool_call> tags", KVANT_FINISH_EOS);
    sse_read(f.r, &o);
    accumulate(&o, 0, &a);
    assert_string_equal(a.content, "Use <tool_call> tags");
    assert_int_equal(a.n_calls, 0);
    assert_string_equal(a.finish, "stop");
    sse_free(&o);
    fake_free(&f);
    fake_init(&f, KVANT_CHAT_QWEN2_5, true, true, 1, NULL);
    generate(f.r, 0, "Almost <tool_ca", KVANT_FINISH_EOS);
    sse_read(f.r, &o);
    accumulate(&o, 0, &a);
    assert_string_equal(a.content, "Almost <tool_ca");
    assert_string_equal(a.finish, "stop");
    sse_free(&o);
    fake_free(&f);

    /* plain text with tools streams as without them, token by token */
    fake_init(&f, KVANT_CHAT_QWEN2_5, true, true, 1, NULL);
    generate(f.r, 0, "Once upon a time there was a dog.", KVANT_FINISH_EOS);
    sse_read(f.r, &o);
    accumulate(&o, 0, &a);
    assert_string_equal(a.content, "Once upon a time there was a dog.");
    assert_true(a.content_deltas >= 5);
    assert_string_equal(a.finish, "stop");
    sse_free(&o);
    fake_free(&f);

    /* Llama 3.1: a reply that is the call, {"name", "parameters"}: no content at all */
    fake_init(&f, KVANT_CHAT_LLAMA3_1, true, true, 1, NULL);
    generate(f.r, 0, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", KVANT_FINISH_EOS);
    print_sse("streamed reply with a tool call (llama-3.1)", f.r);
    sse_read(f.r, &o);
    accumulate(&o, 0, &a);
    assert_int_equal(a.content_deltas, 0);
    assert_int_equal(a.n_calls, 1);
    assert_string_equal(a.args[0], "{\"city\":\"Paris\"}");
    assert_string_equal(a.finish, "tool_calls");
    sse_free(&o);
    fake_free(&f);

    /* Mistral: the model's own id is kept */
    fake_init(&f, KVANT_CHAT_MISTRAL_V3_TEKKEN, true, true, 1, NULL);
    generate(f.r, 0, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]",
             KVANT_FINISH_EOS);
    sse_read(f.r, &o);
    accumulate(&o, 0, &a);
    assert_int_equal(a.content_deltas, 0);
    assert_string_equal(a.id[0], "abcDEF123");
    assert_string_equal(a.finish, "tool_calls");
    sse_free(&o);
    fake_free(&f);

    /* n = 2 streamed: each choice its own deltas */
    fake_init(&f, KVANT_CHAT_QWEN2_5, true, true, 2, NULL);
    generate(f.r, 0, "Hi.", KVANT_FINISH_EOS);
    generate(f.r, 1, QWEN_CALL, KVANT_FINISH_EOS);
    sse_read(f.r, &o);
    accumulate(&o, 0, &a);
    assert_string_equal(a.content, "Hi.");
    assert_string_equal(a.finish, "stop");
    accumulate(&o, 1, &a);
    assert_int_equal(a.n_calls, 1);
    assert_string_equal(a.finish, "tool_calls");
    sse_free(&o);
    fake_free(&f);

    /* without tools the call's text streams as content, as before */
    fake_init(&f, KVANT_CHAT_QWEN2_5, true, false, 1, NULL);
    generate(f.r, 0, QWEN_CALL, KVANT_FINISH_EOS);
    sse_read(f.r, &o);
    accumulate(&o, 0, &a);
    assert_string_equal(a.content, QWEN_CALL);
    assert_int_equal(a.n_calls, 0);
    sse_free(&o);
    fake_free(&f);
}

/* ---- stop strings: matched until a call begins, so none cuts one ---------------------- */
static void test_stops_and_calls(void **state) {
    (void)state;
    for (int stream = 0; stream < 2; stream++) {
        fake f;
        /* "}" is in the call: not matched there */
        fake_init(&f, KVANT_CHAT_QWEN2_5, stream, true, 1, "}");
        generate(f.r, 0, QWEN_CALL, KVANT_FINISH_EOS);
        if (stream) {
            sse o;
            acc a;
            sse_read(f.r, &o);
            accumulate(&o, 0, &a);
            assert_string_equal(a.args[0], "{\"city\":\"Paris\"}");
            assert_string_equal(a.finish, "tool_calls");
            sse_free(&o);
        } else {
            cJSON *j = final_body(&f);
            assert_string_equal(str_at(j, "choices.0.message.tool_calls.0.function.arguments"), "{\"city\":\"Paris\"}");
            assert_string_equal(str_at(j, "choices.0.finish_reason"), "tool_calls");
            cJSON_Delete(j);
        }
        fake_free(&f);
        /* a stop before the call: the reply ends there, no call */
        fake_init(&f, KVANT_CHAT_QWEN2_5, stream, true, 1, "check");
        generate(f.r, 0, "Let me check.\n" QWEN_CALL, KVANT_FINISH_EOS);
        assert_true(f.r->ch[0].text.stopped);
        if (stream) {
            sse o;
            acc a;
            sse_read(f.r, &o);
            accumulate(&o, 0, &a);
            assert_string_equal(a.content, "Let me ");
            assert_int_equal(a.n_calls, 0);
            assert_string_equal(a.finish, "stop");
            sse_free(&o);
        } else {
            cJSON *j = final_body(&f);
            assert_string_equal(str_at(j, "choices.0.message.content"), "Let me ");
            assert_null(at(j, "choices.0.message.tool_calls"));
            assert_string_equal(str_at(j, "choices.0.finish_reason"), "stop");
            cJSON_Delete(j);
        }
        fake_free(&f);
    }
}

/* with tools, control tokens other than the markers stay silent (a stray BOS is not content) */
static void test_control_tokens_silent(void **state) {
    (void)state;
    fake f;
    fake_init(&f, KVANT_CHAT_QWEN2_5, false, true, 1, NULL);
    int32_t tok[64];
    const int n = kvant_tokenize(g_model, "Hi", 2, false, tok, 64);
    for (int k = 0; k < n; k++) push(f.r, 0, tok[k], KVANT_FINISH_NONE);
    push(f.r, 0, f.s.info.bos_id, KVANT_FINISH_NONE);
    push(f.r, 0, -1, KVANT_FINISH_EOS);
    srv_drain(f.r);
    cJSON *j = final_body(&f);
    assert_string_equal(str_at(j, "choices.0.message.content"), "Hi");
    cJSON_Delete(j);
    fake_free(&f);
}

/* ---- kvant serve over HTTP ----------------------------------------------------------- */
static server_proc g_srv; /* stories260K with --chat-template qwen2.5 */
static server_proc g_e2e; /* the relabelled copy (stopped in teardown if a test failed) */

/* POSTs without a key */
static long http_post(int port, const char *path, const char *body, http_buf *b) {
    return http(port, "POST", path, body, NULL, b);
}

/* POSTs without a key, expects 200 and JSON */
static cJSON *post_ok(int port, const char *path, const char *body) { return post_json(port, path, body, NULL); }

#define TOOLS                                                                                                        \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"The weather in a city\","     \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}," \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]"
/* a question, the model's call (content null, arguments a JSON text), its result */
#define HISTORY                                                                                                      \
    "[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"                                                        \
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_abc123\",\"type\":\"function\","        \
    "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"                    \
    "{\"role\":\"tool\",\"tool_call_id\":\"call_abc123\",\"content\":\"22 degrees, clear\"}]"

/* the prompt tokens /v1/chat/completions counts for a conversation: those of
 * the text /apply-template renders it to (one BOS) */
static int template_tokens(const char *body) {
    cJSON *t = post_ok(g_srv.port, "/apply-template", body);
    const char *prompt = str_at(t, "prompt");
    assert_non_null(prompt);
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "content", prompt);
    cJSON_AddBoolToObject(req, "add_special", true);
    char *rb = cJSON_PrintUnformatted(req);
    cJSON *tk = post_ok(g_srv.port, "/tokenize", rb);
    const int n = cJSON_GetArraySize(at(tk, "tokens"));
    free(rb);
    cJSON_Delete(req);
    cJSON_Delete(tk);
    cJSON_Delete(t);
    return n;
}

/* requests with tools, calls and results are accepted and rendered with them */
static void test_requests_with_tools(void **state) {
    (void)state;
    assert_true(g_srv.port > 0);
    /* the prompt holds the tools, the call and the result, as /apply-template shows it */
    cJSON *t = post_ok(g_srv.port, "/apply-template", "{\"tools\":" TOOLS ",\"messages\":" HISTORY "}");
    const char *prompt = str_at(t, "prompt");
    assert_non_null(strstr(prompt, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""));
    assert_non_null(strstr(prompt, "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                   "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>"));
    assert_non_null(strstr(prompt, "<tool_response>\n22 degrees, clear\n</tool_response>"));
    cJSON_Delete(t);
    const int n_prompt = template_tokens("{\"tools\":" TOOLS ",\"messages\":" HISTORY "}");
    const int n_plain = template_tokens("{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]}");
    assert_true(n_prompt > n_plain + 100);
    /* chat completions: the same prompt (usage.prompt_tokens), an ordinary message back */
    static const char *const choices[] = {"", ",\"tool_choice\":\"auto\"", ",\"tool_choice\":\"none\"",
                                          ",\"parallel_tool_calls\":false"};
    for (int i = 0; i < 4; i++) {
        char body[4096];
        snprintf(body, sizeof body, "{\"tools\":" TOOLS ",\"messages\":" HISTORY ",\"max_tokens\":8,\"temperature\":0%s}",
                 choices[i]);
        cJSON *j = post_ok(g_srv.port, "/v1/chat/completions", body);
        assert_int_equal((int)at(j, "usage.prompt_tokens")->valuedouble, n_prompt);
        assert_string_equal(str_at(j, "choices.0.message.role"), "assistant");
        assert_non_null(str_at(j, "choices.0.message.content")); /* stories260K writes no calls */
        assert_null(at(j, "choices.0.message.tool_calls"));
        assert_string_equal(str_at(j, "choices.0.finish_reason"), "length");
        cJSON_Delete(j);
    }
    /* streamed with tools: deltas of content, a finish, [DONE] */
    http_buf b;
    assert_int_equal(http_post(g_srv.port, "/v1/chat/completions",
                               "{\"tools\":" TOOLS ",\"messages\":" HISTORY ",\"max_tokens\":8,\"stream\":true,"
                               "\"stream_options\":{\"include_usage\":true}}", &b), 200);
    assert_non_null(strstr(b.p, "\"delta\":{\"role\":\"assistant\""));
    assert_non_null(strstr(b.p, "\"finish_reason\":\"length\""));
    assert_non_null(strstr(b.p, "\"prompt_tokens\":"));
    assert_non_null(strstr(b.p, "data: [DONE]\n\n"));
    free(b.p);
    /* keys beyond OpenAI's go to the template with the tool (it renders or leaves them, as Jinja's would) */
    cJSON_Delete(post_ok(g_srv.port, "/v1/chat/completions", "{\"tools\":[{\"type\":\"function\",\"function\":"
                         "{\"name\":\"f\",\"return\":{\"type\":\"string\"}}}],\"messages\":" HISTORY ",\"max_tokens\":2}"));
    /* an empty list is no tools; results without tools render too */
    cJSON_Delete(post_ok(g_srv.port, "/v1/chat/completions", "{\"tools\":[],\"messages\":" HISTORY ",\"max_tokens\":2}"));
    cJSON_Delete(post_ok(g_srv.port, "/v1/chat/completions", "{\"messages\":" HISTORY ",\"max_tokens\":2}"));
    /* content as text parts in a tool result; a name beside it (llama-server's and vLLM's clients send one) */
    cJSON_Delete(post_ok(g_srv.port, "/v1/chat/completions",
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":\"assistant\",\"tool_calls\":"
                         "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
                         "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"name\":\"f\",\"content\":[{\"type\":\"text\","
                         "\"text\":\"ok\"}]}],\"max_tokens\":2}"));
}

/* what is refused, each naming its field */
static void test_tool_refusals(void **state) {
    (void)state;
    assert_true(g_srv.port > 0);
#define U "{\"role\":\"user\",\"content\":\"x\"}"
#define FN(x) "{\"messages\":[" U "],\"tools\":[{\"type\":\"function\",\"function\":" x "}]}"
#define MSG(x) "{\"messages\":[" U "," x "]}"
#define CALL(x) MSG("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[" x "]}")
    static const struct {
        const char *body, *param, *msg;
    } refused[] = {
        /* tool_choice: its values; a forced call needs a listed tool, and is the request's one constraint */
        {"{\"messages\":[" U "],\"tools\":" TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
         "\"get_date\"}}}", "tool_choice", "no tool is named 'get_date'"},
        {"{\"messages\":[" U "],\"tool_choice\":\"required\"}", "tool_choice", "needs tools to call; 'tools' is absent"},
        {"{\"messages\":[" U "],\"tools\":[],\"tool_choice\":\"required\"}", "tool_choice", "'tools' is empty"},
        {"{\"messages\":[" U "],\"tools\":" TOOLS ",\"tool_choice\":\"required\",\"response_format\":{\"type\":"
         "\"json_object\"}}", "tool_choice", "give one"},
        {"{\"messages\":[" U "],\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
         "\"f\",\"parameters\":{\"type\":\"object\",\"patternProperties\":{}}}}]}", "tools", "tools[0].function.parameters: JSON Schema at /: unsupported JSON Schema keyword "
         "'patternProperties'"},
        {"{\"messages\":[" U "],\"tools\":" TOOLS ",\"tool_choice\":\"any\"}", "tool_choice", "'tool_choice' must be"},
        {"{\"messages\":[" U "],\"tool_choice\":{\"type\":\"function\"}}", "tool_choice", "'tool_choice' must be"},
        /* strict is enforced only where the call is forced */
        {FN("{\"name\":\"f\",\"strict\":true}"), "tools",
         "tools[0].function.strict: true is enforced only when tool_choice forces a call"},
        /* tools, as OpenAI checks them */
        {"{\"messages\":[" U "],\"tools\":{}}", "tools", "'tools' must be an array"},
        {"{\"messages\":[" U "],\"tools\":[\"f\"]}", "tools", "tools[0] must be an object"},
        {"{\"messages\":[" U "],\"tools\":[{\"type\":\"retrieval\",\"function\":{\"name\":\"f\"}}]}", "tools",
         "tools[0].type must be \"function\""},
        {"{\"messages\":[" U "],\"tools\":[{\"type\":\"function\"}]}", "tools", "tools[0].function must be an object"},
        {FN("{\"description\":\"d\"}"), "tools", "tools[0].function.name is required"},
        {FN("{\"name\":\"get weather\"}"), "tools", "tools[0].function.name 'get weather' must be"},
        {FN("{\"name\":\"\"}"), "tools", "tools[0].function.name '' must be"},
        {FN("{\"name\":\"a234567890123456789012345678901234567890123456789012345678901234X\"}"), "tools", "must be 1 to 64"},
        {FN("{\"name\":\"f\",\"parameters\":\"object\"}"), "tools", "tools[0].function.parameters must be an object"},
        {FN("{\"name\":\"f\",\"description\":5}"), "tools", "tools[0].function.description must be a string"},
        {"{\"messages\":[" U "],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\","
         "\"function\":{\"name\":\"f\"}}]}", "tools", "tools[1].function.name 'f' is tools[0]'s too"},
        /* tool messages and calls in the history */
        {MSG("{\"role\":\"tool\",\"content\":\"r\"}"), "messages", "messages[1]: a tool message needs a string 'tool_call_id'"},
        {MSG("{\"role\":\"tool\",\"tool_call_id\":\"c\"}"), "messages", "messages[1] needs a string 'content'"},
        {MSG("{\"role\":\"assistant\",\"content\":null}"), "messages", "messages[1] needs a string 'content'"},
        {MSG("{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}"), "messages",
         "messages[1].tool_calls: only assistant messages carry tool calls"},
        {MSG("{\"role\":\"user\",\"content\":\"x\",\"tool_call_id\":\"c\"}"), "messages",
         "messages[1].tool_call_id: only tool messages answer a call"},
        {MSG("{\"role\":\"user\",\"content\":\"x\",\"name\":\"ann\"}"), "messages", "messages[1].name is not supported"},
        {CALL("{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{}}}"), "messages",
         "messages[1].tool_calls[0].function.arguments must be a string"},
        {CALL("{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}"), "messages",
         "messages[1].tool_calls[0].id must be a string"},
        {CALL("{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}"), "messages",
         "messages[1].tool_calls[0].type must be \"function\""},
        {CALL("{\"id\":\"c\",\"type\":\"function\",\"function\":{\"arguments\":\"{}\"}}"), "messages",
         "messages[1].tool_calls[0].function.name must be a string"},
        {MSG("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":{}}"), "messages",
         "messages[1]: tool_calls is not a JSON array of objects"},
        /* OpenAI's deprecated function calling, by name */
        {MSG("{\"role\":\"function\",\"name\":\"f\",\"content\":\"r\"}"), "messages", "role 'function' (deprecated"},
        {MSG("{\"role\":\"assistant\",\"content\":\"\",\"function_call\":{\"name\":\"f\",\"arguments\":\"{}\"}}"),
         "messages", "messages[1].function_call (deprecated"},
        {"{\"messages\":[" U "],\"functions\":[{\"name\":\"f\"}]}", "functions", "'functions' (deprecated"},
        {"{\"messages\":[" U "],\"function_call\":\"auto\"}", "function_call", "'function_call' (deprecated"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        http_buf b;
        const long code = http_post(g_srv.port, "/v1/chat/completions", refused[i].body, &b);
        cJSON *j = cJSON_Parse(b.p);
        const char *param = j ? str_at(j, "error.param") : NULL, *msg = j ? str_at(j, "error.message") : NULL;
        if (code != 400 || !param || strcmp(param, refused[i].param) || !msg || !strstr(msg, refused[i].msg))
            fail_msg("refused case %zu: %s -> %ld %s (want %s: %s)", i, refused[i].body, code, b.p, refused[i].param,
                     refused[i].msg);
        cJSON_Delete(j);
        free(b.p);
        /* /apply-template reads messages and tools with the same code (not tool_choice, which changes no prompt) */
        if (strcmp(refused[i].param, "tool_choice") && strcmp(refused[i].param, "functions") &&
            strcmp(refused[i].param, "function_call") && !strstr(refused[i].msg, "strict") &&
            !strstr(refused[i].msg, "parameters:")) {
            assert_int_equal(http_post(g_srv.port, "/apply-template", refused[i].body, &b), 400);
            j = cJSON_Parse(b.p);
            msg = j ? str_at(j, "error.message") : NULL;
            if (!msg || !strstr(msg, refused[i].msg)) fail_msg("/apply-template case %zu: %s", i, b.p);
            cJSON_Delete(j);
            free(b.p);
        }
    }
#undef U
#undef FN
#undef MSG
#undef CALL
}

/* ---- tool_choice "required" / a named function: a forced call --------------------------
 * The grammar (kvant_chat_tool_grammar) holds each reply to one call of a
 * listed tool, arguments valid for its schema, in the family's format;
 * stories260K at temperature 1 then writes calls it never writes freely. */
#define FTOOLS                                                                                                         \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"strict\":true,\"parameters\":{\"type\":"        \
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"enum\":[\"Paris\",\"Rome\"]}},\"required\":"         \
    "[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\","      \
    "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}}}]"

static bool is_int(const cJSON *x) {
    return cJSON_IsNumber(x) && x->valuedouble == (double)(long long)x->valuedouble;
}

/* name / arguments (a JSON text) are a valid call of FTOOLS' (want: that name) */
static bool valid_call(const char *name, const char *args, const char *want) {
    if (!name || !args || (want && strcmp(name, want))) return false;
    cJSON *a = cJSON_Parse(args);
    bool ok = cJSON_IsObject(a);
    if (ok && !strcmp(name, "get_weather")) {
        cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "city");
        ok = cJSON_GetArraySize(a) == 1 && cJSON_IsString(c) &&
             (!strcmp(c->valuestring, "Paris") || !strcmp(c->valuestring, "Rome"));
    } else if (ok && !strcmp(name, "add")) {
        ok = cJSON_GetArraySize(a) == 2 && is_int(cJSON_GetObjectItemCaseSensitive(a, "a")) &&
             is_int(cJSON_GetObjectItemCaseSensitive(a, "b"));
    } else {
        ok = false;
    }
    cJSON_Delete(a);
    return ok;
}

/* a non-streamed request of n choices: each exactly one valid call, finish tool_calls; counts of each name */
static void forced_calls(int port, const char *tc_json, int n, const char *want, int *n_weather, int *n_add) {
    char body[4096];
    snprintf(body, sizeof body, "{\"tools\":" FTOOLS ",\"messages\":[{\"role\":\"user\",\"content\":\"Weather in "
             "Paris?\"}],\"tool_choice\":%s,\"temperature\":1,\"n\":%d,\"seed\":7,\"max_tokens\":200}", tc_json, n);
    cJSON *j = post_ok(port, "/v1/chat/completions", body);
    cJSON *cs = at(j, "choices");
    assert_int_equal(cJSON_GetArraySize(cs), n);
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_GetArrayItem(cs, i), *calls = at(c, "message.tool_calls");
        const char *name = str_at(c, "message.tool_calls.0.function.name"),
                   *args = str_at(c, "message.tool_calls.0.function.arguments");
        if (cJSON_GetArraySize(calls) != 1 || !valid_call(name, args, want) ||
            strcmp(str_at(c, "finish_reason"), "tool_calls") || !cJSON_IsNull(at(c, "message.content")) ||
            strcmp(str_at(c, "message.tool_calls.0.type"), "function"))
            fail_msg("tool_choice %s, choice %d: %s", tc_json, i, cJSON_PrintUnformatted(c));
        if (!strcmp(name, "get_weather")) (*n_weather)++;
        else (*n_add)++;
    }
    cJSON_Delete(j);
}

/* streamed: per choice, the tool_calls deltas add up to one valid call; finish tool_calls */
static void forced_stream(int port, const char *tc_json, int n, const char *want, bool print) {
    char body[4096];
    snprintf(body, sizeof body, "{\"tools\":" FTOOLS ",\"messages\":[{\"role\":\"user\",\"content\":\"Weather in "
             "Paris?\"}],\"tool_choice\":%s,\"temperature\":1,\"n\":%d,\"seed\":11,\"max_tokens\":200,\"stream\":true}",
             tc_json, n);
    http_buf b;
    assert_int_equal(http_post(port, "/v1/chat/completions", body, &b), 200);
    if (print) printf("streamed, tool_choice %s:\n%s", tc_json, b.p);
    char name[8][128] = {{0}}, args[8][1024] = {{0}}, finish[8][32] = {{0}};
    int n_calls[8] = {0};
    char *save = NULL; /* at() tokenizes its path with strtok */
    for (char *line = strtok_r(b.p, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "data: {", 7)) continue;
        cJSON *e = cJSON_Parse(line + 6), *c = cJSON_GetArrayItem(at(e, "choices"), 0);
        assert_non_null(c);
        const int i = (int)at(c, "index")->valuedouble;
        assert_true(i >= 0 && i < n);
        cJSON *content = at(c, "delta.content"), *tcs = at(c, "delta.tool_calls"), *tc;
        assert_true(!content || cJSON_IsNull(content) || !content->valuestring[0]);
        cJSON_ArrayForEach(tc, tcs) {
            assert_int_equal((int)at(tc, "index")->valuedouble, 0);
            const char *nm = str_at(tc, "function.name"), *ar = str_at(tc, "function.arguments");
            if (nm) snprintf(name[i] + strlen(name[i]), sizeof name[i] - strlen(name[i]), "%s", nm), n_calls[i]++;
            if (ar) snprintf(args[i] + strlen(args[i]), sizeof args[i] - strlen(args[i]), "%s", ar);
        }
        const char *f = str_at(c, "finish_reason");
        if (f) snprintf(finish[i], sizeof finish[i], "%s", f);
        cJSON_Delete(e);
    }
    for (int i = 0; i < n; i++)
        if (n_calls[i] != 1 || !valid_call(name[i], args[i], want) || strcmp(finish[i], "tool_calls"))
            fail_msg("streamed tool_choice %s, choice %d: %d calls, %s(%s), finish %s", tc_json, i, n_calls[i], name[i],
                     args[i], finish[i]);
    free(b.p);
}

static void test_forced_calls(void **state) {
    (void)state;
    assert_true(g_srv.port > 0);
    int w = 0, a = 0;
    /* Qwen 2.5: <tool_call>\n{"name", "arguments"}\n</tool_call>, read back as with "auto" */
    forced_calls(g_srv.port, "\"required\"", 8, NULL, &w, &a);
    printf("qwen2.5, required, n 8: %d get_weather, %d add\n", w, a);
    w = a = 0;
    forced_calls(g_srv.port, "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}", 6, "add", &w, &a);
    assert_int_equal(a, 6);
    forced_calls(g_srv.port, "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}", 4, "get_weather", &w, &a);
    assert_int_equal(w, 4);
    forced_stream(g_srv.port, "\"required\"", 1, NULL, true);
    forced_stream(g_srv.port, "\"required\"", 4, NULL, false);
    forced_stream(g_srv.port, "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}", 2, "add", false);
    /* Llama 3.2: the reply is {"name", "parameters"} */
    server_proc l = start_server(shared_path("models/stories260K.gguf"), "--chat-template llama-3.2",
                                 "tools_llama_server.log");
    assert_true(l.port > 0);
    w = a = 0;
    forced_calls(l.port, "\"required\"", 8, NULL, &w, &a);
    printf("llama-3.2, required, n 8: %d get_weather, %d add\n", w, a);
    forced_calls(l.port, "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}", 4, "get_weather", &w, &a);
    forced_stream(l.port, "\"required\"", 3, NULL, false);
    assert_int_equal(stop_server(&l), 0);
    /* Mistral: [TOOL_CALLS] is a control token, which no grammar allows: refused by name */
    server_proc m = start_server(shared_path("models/stories260K.gguf"), "--chat-template mistral-v3",
                                 "tools_mistral_server.log");
    assert_true(m.port > 0);
    static const char *const forced[] = {"\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}"};
    for (int i = 0; i < 2; i++) {
        char body[4096];
        snprintf(body, sizeof body, "{\"tools\":" FTOOLS ",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                 "\"tool_choice\":%s}", forced[i]);
        http_buf b;
        assert_int_equal(http_post(m.port, "/v1/chat/completions", body, &b), 400);
        cJSON *j = cJSON_Parse(b.p);
        assert_string_equal(str_at(j, "error.param"), "tool_choice");
        assert_non_null(strstr(str_at(j, "error.message"), "[TOOL_CALLS], a control token"));
        cJSON_Delete(j);
        free(b.p);
    }
    assert_int_equal(stop_server(&m), 0);
}

/* ---- a real tool call, end to end ------------------------------------------------------
 * stories260K never writes a call, but its greedy reply to a prompt is fixed:
 * so a copy of it whose vocabulary names the tokens it will write (the same
 * weights, the same ids, three tokens relabelled) makes a model that answers
 * a tool call.  The prompt is rendered as kvant serve renders it
 * (mistral-v3 with the tools); its greedy first three tokens become
 * [TOOL_CALLS] (a control token, as in Mistral's vocabulary, so the marker
 * path of the pieces is what reads it), the call's JSON, and EOS.  The
 * request bans (logit_bias -100) the prompt's own tokens and the byte and
 * control tokens, so the three are ordinary tokens the prompt does not
 * hold; the copy is usable when they are distinct and the prompt tokenizes
 * to the same ids with the new vocabulary; a few questions are tried until
 * one is.  kvant serve then has to give the openai client a
 * real call, streamed and not; test_openai.mjs drives the same file
 * through the client (tools_e2e.json says which request). */
#define E2E_TOOLS                                                                                                    \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"The weather in a city\","     \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]"
#define E2E_CALL "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}]"

/* greedy, as the engine samples at temperature 0 with logit_bias -100 on the banned ids */
static void greedy(kvant_model *m, const int32_t *prompt, int n, const bool *banned, int32_t *out, int k) {
    kvant_status st;
    kvant_model_info info;
    kvant_model_get_info(m, &info);
    kvant_seq *s = kvant_seq_new(m, 0, &st);
    float *logits = malloc((size_t)info.vocab_size * sizeof *logits);
    assert_true(s && logits);
    assert_int_equal(kvant_forward(s, prompt, n, logits, false, &st), KVANT_OK);
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int t = 0; t < info.vocab_size; t++)
            if (!banned[t] && (best < 0 || logits[t] > logits[best])) best = t;
        out[i] = best;
        assert_int_equal(kvant_forward(s, &out[i], 1, logits, false, &st), KVANT_OK);
    }
    free(logits);
    kvant_seq_free(s);
}

/* stories260K with g[0] named [TOOL_CALLS] (control), g[1] the call, g[2] EOS */
static bool write_relabelled(const char *path, const int32_t *g) {
    kvant_status st;
    gguf_ctx *gc = gguf_open(shared_path("models/stories260K.gguf"), &st);
    assert_non_null(gc);
    const gguf_value *toks = gguf_find(gc, "tokenizer.ggml.tokens"), *types = gguf_find(gc, "tokenizer.ggml.token_type");
    assert_true(toks && types && toks->arr.n == types->arr.n);
    const uint64_t n = toks->arr.n;
    char **tv = calloc(n, sizeof *tv);
    int32_t *ty = calloc(n, sizeof *ty);
    bool ok = true;
    for (uint64_t i = 0; i < n; i++) {
        const gguf_str t = gguf_arr_str(toks, i);
        tv[i] = strndup(t.data, t.len);
        ty[i] = (int32_t)gguf_arr_i64(types, i);
    }
    for (int k = 0; k < 3; k++) ok &= ty[g[k]] == 1; /* ordinary tokens only (no byte, no control) */
    free(tv[g[0]]), tv[g[0]] = strdup("[TOOL_CALLS]"), ty[g[0]] = 3;
    free(tv[g[1]]), tv[g[1]] = strdup(E2E_CALL);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(gc); i++) {
        const char *k = gguf_kv_key(gc, i);
        if (strcmp(k, "tokenizer.ggml.tokens") && strcmp(k, "tokenizer.ggml.token_type") &&
            strcmp(k, "tokenizer.ggml.eos_token_id"))
            gguf_writer_add_value(w, k, gguf_kv_value(gc, i));
    }
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)tv, n);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, ty, n);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)g[2]);
    for (int64_t i = 0; i < gguf_n_tensors(gc); i++) {
        const gguf_tensor *t = gguf_tensor_at(gc, i);
        assert_int_equal(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &st), KVANT_OK);
    }
    assert_int_equal(gguf_writer_write_file(w, path, &st), KVANT_OK);
    gguf_writer_free(w);
    gguf_close(gc);
    for (uint64_t i = 0; i < n; i++) free(tv[i]);
    free(tv);
    free(ty);
    return ok;
}

/* the prompt kvant serve renders for one user message and E2E_TOOLS, as tokens of m */
static int e2e_prompt(kvant_model *m, const char *question, int32_t *tok, int max) {
    const kvant_chat_msg msg[] = {{"user", question}};
    kvant_status st;
    char *text = kvant_chat_render_tools(KVANT_CHAT_MISTRAL_V3, msg, 1, E2E_TOOLS, true, &st);
    assert_non_null(text);
    const int n = kvant_chat_tokenize(m, text, strlen(text), tok, max);
    free(text);
    assert_true(n > 0);
    return n;
}

static void test_end_to_end_call(void **state) {
    (void)state;
    static const char *const questions[] = {"What is the weather in Paris?", "Weather in Paris, please.",
                                            "Is it raining in Paris?", "How warm is Paris today?",
                                            "Tell me the weather in Paris.", "Paris weather?", "Is Paris sunny?",
                                            "Weather report for Paris.", "Should I take an umbrella in Paris?",
                                            "What is it like outside in Paris?"};
    const char *path = tmp_path("tools_e2e.gguf");
    char model_path[512];
    snprintf(model_path, sizeof model_path, "%s", path);
    const char *question = NULL;
    int32_t a[2048], b[2048], g[3];
    kvant_model_info info;
    kvant_model_get_info(g_model, &info);
    bool *banned = calloc((size_t)info.vocab_size, 1);
    for (size_t q = 0; q < sizeof questions / sizeof *questions && !question; q++) {
        const int n = e2e_prompt(g_model, questions[q], a, 2048);
        memset(banned, 0, (size_t)info.vocab_size);
        for (int t = 0; t < 259; t++) banned[t] = true; /* <unk> <s> </s>, the 256 bytes */
        for (int i = 0; i < n; i++) banned[a[i]] = true;
        greedy(g_model, a, n, banned, g, 3);
        bool usable = g[0] != g[1] && g[1] != g[2] && g[0] != g[2];
        for (int i = 0; i < n && usable; i++) usable = a[i] != g[0] && a[i] != g[1] && a[i] != g[2];
        {
            char pc[3][64];
            for (int k = 0; k < 3; k++) {
                const int l = kvant_token_to_piece(g_model, 5, g[k], pc[k], 63);
                pc[k][l > 0 ? l : 0] = 0;
            }
            printf("end to end: \"%s\": greedy %d '%s' %d '%s' %d '%s'%s\n", questions[q], g[0], pc[0], g[1], pc[1],
                   g[2], pc[2], usable ? "" : " (not distinct)");
        }
        if (!usable || !write_relabelled(model_path, g)) continue;
        kvant_status st;
        kvant_model *m2 = kvant_model_open(model_path, NULL, &st);
        assert_non_null(m2);
        if (e2e_prompt(m2, questions[q], b, 2048) == n && !memcmp(a, b, (size_t)n * sizeof *a)) {
            int32_t g2[3];
            greedy(m2, a, n, banned, g2, 3); /* the same weights: the same reply */
            assert_memory_equal(g, g2, sizeof g);
            char piece[128];
            assert_int_equal(kvant_token_to_piece(m2, a[n - 1], g[0], piece, sizeof piece), 0); /* control */
            assert_true(kvant_token_is_eog(m2, g[2]));
            question = questions[q];
        }
        kvant_model_free(m2);
    }
    if (!question) fail_msg("no question gives a usable relabelling");
    printf("end to end: \"%s\": tokens %d %d %d named [TOOL_CALLS], the call, EOS in %s\n", question, g[0], g[1],
           g[2], model_path);
    /* what test_openai.mjs sends */
    cJSON *req = cJSON_CreateObject(), *ms = cJSON_AddArrayToObject(req, "messages"), *u = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model_path", model_path);
    cJSON_AddStringToObject(req, "chat_template", "mistral-v3");
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", question);
    cJSON_AddItemToArray(ms, u);
    cJSON_AddItemToObject(req, "tools", cJSON_Parse(E2E_TOOLS));
    cJSON *lb = cJSON_AddObjectToObject(req, "logit_bias");
    for (int t = 0; t < info.vocab_size; t++) {
        char key[16];
        snprintf(key, sizeof key, "%d", t);
        if (banned[t]) cJSON_AddNumberToObject(lb, key, -100);
    }
    free(banned);
    char *rj = cJSON_Print(req);
    FILE *fp = fopen(tmp_path("tools_e2e.json"), "w");
    assert_non_null(fp);
    fputs(rj, fp);
    fclose(fp);
    free(rj);

    g_e2e = start_server(model_path, "--chat-template mistral-v3", "tools_e2e_server.log");
    const int port = g_e2e.port;
    assert_true(port > 0);
    cJSON_DeleteItemFromObject(req, "model_path");
    cJSON_DeleteItemFromObject(req, "chat_template");
    cJSON_AddNumberToObject(req, "temperature", 0);
    char *body = cJSON_PrintUnformatted(req);
    cJSON *j = post_ok(port, "/v1/chat/completions", body);
    char *t = cJSON_PrintUnformatted(j);
    printf("---- kvant serve, non-streamed ----\n%s\n", t);
    free(t);
    assert_true(cJSON_IsNull(at(j, "choices.0.message.content")));
    assert_string_equal(str_at(j, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    assert_string_equal(str_at(j, "choices.0.message.tool_calls.0.function.arguments"), "{\"city\":\"Paris\"}");
    assert_int_equal(strlen(str_at(j, "choices.0.message.tool_calls.0.id")), 9); /* Mistral's ids: 9 letters and digits */
    assert_string_equal(str_at(j, "choices.0.finish_reason"), "tool_calls");
    assert_int_equal((int)at(j, "usage.completion_tokens")->valuedouble, 2); /* [TOOL_CALLS], the call (EOS not counted) */
    cJSON_Delete(j);
    free(body);
    /* streamed */
    cJSON_AddBoolToObject(req, "stream", true);
    body = cJSON_PrintUnformatted(req);
    http_buf sb;
    assert_int_equal(http_post(port, "/v1/chat/completions", body, &sb), 200);
    printf("---- kvant serve, streamed ----\n%s", sb.p);
    sreq fake_r = {.out = sb.p, .out_len = sb.n};
    sse o;
    acc ac;
    sse_read(&fake_r, &o);
    accumulate(&o, 0, &ac);
    assert_int_equal(ac.content_deltas, 0);
    assert_int_equal(ac.n_calls, 1);
    assert_string_equal(ac.name[0], "get_weather");
    assert_string_equal(ac.args[0], "{\"city\":\"Paris\"}");
    assert_string_equal(ac.finish, "tool_calls");
    sse_free(&o);
    free(sb.p);
    free(body);
    /* tool_choice none: the same tokens, read as content ("[TOOL_CALLS]" is a control token: silent) */
    cJSON_DeleteItemFromObject(req, "stream");
    cJSON_AddStringToObject(req, "tool_choice", "none");
    body = cJSON_PrintUnformatted(req);
    j = post_ok(port, "/v1/chat/completions", body);
    assert_string_equal(str_at(j, "choices.0.message.content"), E2E_CALL);
    assert_null(at(j, "choices.0.message.tool_calls"));
    assert_string_equal(str_at(j, "choices.0.finish_reason"), "stop");
    cJSON_Delete(j);
    free(body);
    cJSON_Delete(req);
    assert_int_equal(stop_server(&g_e2e), 0);
}

static int setup(void **state) {
    (void)state;
    kvant_status st;
    g_model = kvant_model_open(shared_path("models/stories260K.gguf"), NULL, &st);
    if (!g_model) fprintf(stderr, "stories260K: %s\n", st.msg);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    g_srv = start_server(shared_path("models/stories260K.gguf"), "--chat-template qwen2.5", "tools_server.log");
    return g_model ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    kvant_model_free(g_model);
    stop_server(&g_e2e);
    const int st = stop_server(&g_srv);
    curl_global_cleanup();
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_piece_special),
        cmocka_unit_test(test_final_body),
        cmocka_unit_test(test_stream_deltas),
        cmocka_unit_test(test_stops_and_calls),
        cmocka_unit_test(test_control_tokens_silent),
        cmocka_unit_test(test_requests_with_tools),
        cmocka_unit_test(test_tool_refusals),
        cmocka_unit_test(test_forced_calls),
        cmocka_unit_test(test_end_to_end_call),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
