/* test_server_limits.c - every size a client of `kvant serve` controls has
 * a limit, and the server says so: one check per row of README's "Limits"
 * table, each the value at the limit accepted and one past it refused with
 * the status and the field (`param`) the table names.  Also the body (413,
 * announced and chunked), a header too large (431) and a URL too long (414),
 * more connections than --max-conns (the one past waits unanswered until
 * one closes), a client that sends half a request and then nothing (closed
 * after --timeout), and the API key (a wrong key of the same length, a
 * shorter, a longer one: 401).  stories260K, context 64 (-c 64). */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server_util.h"
#include "testutil.h"

#define KEY "limits-key-42"
#define CTX 64          /* -c: the context, the prompt-token limit */
#define MAX_BODY 200000 /* --max-body */

static server_proc g_srv; /* --api-key KEY -c CTX --max-body MAX_BODY */
static server_proc g_two; /* --max-conns 2 --timeout 2, started by the tests that need it */

/* ---- a growing string ----------------------------------------------------------- */
typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    if (b->n + (size_t)n + 1 > b->cap) {
        b->cap = (b->n + (size_t)n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

static void sb_rep(sbuf *b, char c, size_t n) { /* n copies of c */
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memset(b->p + b->n, c, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* ---- requests --------------------------------------------------------------------- */
/* POST body to path on the keyed server; the status must be `code`, and for
 * a refusal the error's param must be `param` (NULL: null) */
static void expect(const char *path, const char *body, long code, const char *param) {
    http_buf b;
    const long got = http(g_srv.port, "POST", path, body, KEY, &b);
    if (got != code)
        fprintf(stderr, "POST %s %.300s%s -> %ld (wanted %ld): %.500s\n", path, body, strlen(body) > 300 ? "..." : "",
                got, code, b.p);
    assert_int_equal(got, code);
    if (code != 200) {
        cJSON *j = cJSON_Parse(b.p), *e = cJSON_GetObjectItem(j, "error"), *pa = cJSON_GetObjectItem(e, "param");
        assert_non_null(e);
        if (param) {
            if (!cJSON_IsString(pa) || strcmp(pa->valuestring, param))
                fprintf(stderr, "param: wanted %s, got %s\n", param, b.p);
            assert_true(cJSON_IsString(pa));
            assert_string_equal(pa->valuestring, param);
        } else {
            assert_true(cJSON_IsNull(pa));
        }
        cJSON_Delete(j);
    }
    free(b.p);
}

static void expect_sb(const char *path, sbuf *b, long code, const char *param) {
    expect(path, b->p, code, param);
    free(b->p);
    *b = (sbuf){0};
}

/* a raw TCP connection to the server on port (the tests below need to send
 * what libcurl would not: half a request, a huge header) */
static int tcp_connect(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static void send_all(int fd, const char *p, size_t n) {
    while (n) {
        const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return; /* the server may close while a huge header is still being sent */
        p += k, n -= (size_t)k;
    }
}

/* what the server sends within ms milliseconds (until it closes, or the
 * head of a response has come): *closed when it closed the connection */
static char *recv_for(int fd, int ms, bool *closed) {
    static char buf[8192];
    size_t n = 0;
    *closed = false;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, ms) <= 0) break;
        const ssize_t k = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (k <= 0) {
            *closed = true;
            break;
        }
        n += (size_t)k;
        buf[n] = 0;
        if (strstr(buf, "\r\n\r\n") || n == sizeof buf - 1) break;
    }
    buf[n] = 0;
    return buf;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the request fields ---------------------------------------------------------- */
static void test_n_best_of(void **state) {
    (void)state;
    expect("/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1,\"n\":16}", 200, NULL);
    expect("/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1,\"n\":17}", 400, "n");
    expect("/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1,\"best_of\":16}", 200, NULL);
    expect("/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1,\"best_of\":17}", 400, "best_of");
    expect("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1,\"n\":17}",
           400, "n");
}

/* max_tokens + the prompt's tokens fit the context: a 3-token prompt (ids,
 * nothing added) leaves CTX - 3 */
static void test_max_tokens(void **state) {
    (void)state;
    char b[256];
    snprintf(b, sizeof b, "{\"prompt\":[1,2,3],\"max_tokens\":%d}", CTX - 3);
    expect("/v1/completions", b, 200, NULL);
    snprintf(b, sizeof b, "{\"prompt\":[1,2,3],\"max_tokens\":%d}", CTX - 2);
    expect("/v1/completions", b, 400, "max_tokens");
    snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_completion_tokens\":%d}", CTX);
    expect("/v1/chat/completions", b, 400, "max_completion_tokens");
    expect("/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1000000001}", 400, "max_tokens");
}

static void test_stop(void **state) {
    (void)state;
    expect("/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1,\"stop\":[\"a\",\"b\",\"c\",\"d\"]}", 200, NULL);
    expect("/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1,\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop");
    sbuf b = {0};
    sb_add(&b, "{\"prompt\":\"hi\",\"max_tokens\":1,\"stop\":\"");
    sb_rep(&b, 'x', 256);
    sb_add(&b, "\"}");
    expect_sb("/v1/completions", &b, 200, NULL);
    sb_add(&b, "{\"prompt\":\"hi\",\"max_tokens\":1,\"stop\":[\"a\",\"");
    sb_rep(&b, 'x', 257);
    sb_add(&b, "\"]}");
    expect_sb("/v1/completions", &b, 400, "stop");
    expect("/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1,\"stop\":[\"\"]}", 400, "stop");
}

static void test_logprobs(void **state) {
    (void)state;
    expect("/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1,\"logprobs\":8}", 200, NULL);
    expect("/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1,\"logprobs\":9}", 400, "logprobs");
#define U "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1"
    expect("/v1/chat/completions", "{" U ",\"logprobs\":true,\"top_logprobs\":8}", 200, NULL);
    expect("/v1/chat/completions", "{" U ",\"logprobs\":true,\"top_logprobs\":9}", 400, "top_logprobs");
}

/* 4096 messages (rendered by /apply-template, which has no context to fill),
 * 4097 refused; one message longer than the context: refused by its tokens */
static void test_messages(void **state) {
    (void)state;
    for (int n = 4096; n <= 4097; n++) {
        sbuf b = {0};
        sb_add(&b, "{\"messages\":[");
        for (int i = 0; i < n; i++) sb_add(&b, "%s{\"role\":\"user\",\"content\":\"a\"}", i ? "," : "");
        sb_add(&b, "]}");
        expect_sb("/apply-template", &b, n == 4096 ? 200 : 400, "messages");
    }
    sbuf b = {0};
    sb_add(&b, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (int i = 0; i < CTX; i++) sb_add(&b, "once upon ");
    sb_add(&b, "\"}]}");
    expect_sb("/v1/chat/completions", &b, 400, "messages");
}

/* 128 tools, 129 refused; parameters nested 64 levels, 65 refused; a
 * forced call's tools (their schemas become its grammar) over 64 KiB of
 * JSON refused */
static void test_tools(void **state) {
    (void)state;
    for (int n = 128; n <= 129; n++) {
        sbuf b = {0};
        sb_add(&b, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[");
        for (int i = 0; i < n; i++) sb_add(&b, "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}", i ? "," : "", i);
        sb_add(&b, "]}");
        expect_sb("/apply-template", &b, n == 128 ? 200 : 400, "tools");
    }
    for (int depth = 64; depth <= 65; depth++) { /* parameters nested 64 levels, then 65 */
        sbuf b = {0};
        sb_add(&b, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\",\"function\":"
                   "{\"name\":\"f\",\"parameters\":");
        for (int i = 0; i < depth; i++) sb_add(&b, "{\"a\":");
        sb_add(&b, "1");
        for (int i = 0; i < depth; i++) sb_add(&b, "}");
        sb_add(&b, "}}]}");
        expect_sb("/apply-template", &b, depth == 64 ? 200 : 400, "tools");
    }
    sbuf b = {0};
    sb_add(&b, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tool_choice\":\"required\",\"tools\":[{\"type\":"
               "\"function\",\"function\":{\"name\":\"f\",\"description\":\"");
    sb_rep(&b, 'd', 65536);
    sb_add(&b, "\"}}]}");
    expect_sb("/v1/chat/completions", &b, 400, "tools");
}

/* stories260K has 512 tokens: all of them may be biased; 1024 entries pass
 * the count (and are refused for the ids past the vocabulary), 1025 do not */
static void test_logit_bias(void **state) {
    (void)state;
    const int sizes[] = {512, 1024, 1025};
    const char *says[] = {NULL, "token ids in [0, 512)", "at most 1024"};
    for (int k = 0; k < 3; k++) {
        sbuf b = {0};
        sb_add(&b, "{\"prompt\":\"hi\",\"max_tokens\":1,\"logit_bias\":{");
        for (int i = 0; i < sizes[k]; i++) sb_add(&b, "%s\"%d\":1", i ? "," : "", i);
        sb_add(&b, "}}");
        http_buf r;
        const long code = http(g_srv.port, "POST", "/v1/completions", b.p, KEY, &r);
        assert_int_equal(code, says[k] ? 400 : 200);
        if (says[k]) {
            assert_non_null(strstr(r.p, says[k]));
            assert_non_null(strstr(r.p, "\"param\":\"logit_bias\""));
        }
        free(r.p);
        free(b.p);
    }
}

/* a prompt (text or ids) must leave room for one token in the context */
static void test_prompt_tokens(void **state) {
    (void)state;
    for (int n = CTX - 1; n <= CTX; n++) {
        sbuf b = {0};
        sb_add(&b, "{\"max_tokens\":1,\"prompt\":[");
        for (int i = 0; i < n; i++) sb_add(&b, "%s%d", i ? "," : "", 100 + i);
        sb_add(&b, "]}");
        expect_sb("/v1/completions", &b, n < CTX ? 200 : 400, "prompt");
    }
    sbuf b = {0};
    sb_add(&b, "{\"max_tokens\":1,\"prompt\":\"");
    for (int i = 0; i < CTX; i++) sb_add(&b, "once upon ");
    sb_add(&b, "\"}");
    expect_sb("/v1/completions", &b, 400, "prompt");
    expect("/v1/completions", "{\"max_tokens\":1,\"prompt\":[\"a\",\"b\"]}", 400, "prompt"); /* one prompt a request */
    expect("/v1/completions", "{\"max_tokens\":1,\"prompt\":[[1,2],[3,4]]}", 400, "prompt");
}

static void test_embeddings_inputs(void **state) {
    (void)state;
    for (int n = 256; n <= 257; n++) {
        sbuf b = {0};
        sb_add(&b, "{\"input\":[");
        for (int i = 0; i < n; i++) sb_add(&b, "%s\"a\"", i ? "," : "");
        sb_add(&b, "]}");
        expect_sb("/v1/embeddings", &b, n == 256 ? 200 : 400, "input");
    }
    sbuf b = {0};
    sb_add(&b, "{\"input\":\"");
    for (int i = 0; i < CTX; i++) sb_add(&b, "once upon ");
    sb_add(&b, "\"}");
    expect_sb("/v1/embeddings", &b, 400, "input");
}

/* a schema nested 64 levels (each {"type": "object", "properties": {"a":
 * ...}} is two) is compiled, 65 refused; a schema or a GBNF grammar of
 * 64 KiB is compiled, one byte more refused */
static void test_schema_grammar(void **state) {
    (void)state;
    for (int extra = 0; extra <= 1; extra++) {
        sbuf s = {0}; /* 31 x 2 levels, then {"type":"object","properties":{...}} (2) or one more inside (3) */
        for (int i = 0; i < 31; i++) sb_add(&s, "{\"type\":\"object\",\"properties\":{\"a\":");
        sb_add(&s, "{\"type\":\"object\",\"properties\":{%s}}", extra ? "\"b\":{\"type\":\"string\"}" : "");
        for (int i = 0; i < 31; i++) sb_add(&s, "}}");
        sbuf b = {0};
        sb_add(&b, "{\"prompt\":\"hi\",\"max_tokens\":1,\"json_schema\":%s}", s.p);
        expect_sb("/v1/completions", &b, extra ? 400 : 200, "json_schema");
        sb_add(&b, "{\"prompt\":\"hi\",\"max_tokens\":1,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                   "{\"name\":\"n\",\"schema\":%s}}}", s.p);
        expect_sb("/v1/completions", &b, extra ? 400 : 200, "response_format");
        free(s.p);
    }
    /* {"type":"string","description":"..."}: 34 bytes around the description */
    for (int extra = 0; extra <= 1; extra++) {
        sbuf b = {0};
        sb_add(&b, "{\"prompt\":\"hi\",\"max_tokens\":1,\"json_schema\":{\"type\":\"string\",\"description\":\"");
        sb_rep(&b, 'd', 65536 - 34 + (size_t)extra);
        sb_add(&b, "\"}}");
        expect_sb("/v1/completions", &b, extra ? 400 : 200, "json_schema");
        /* root ::= "aaa...": 11 bytes around the literal */
        sb_add(&b, "{\"prompt\":\"hi\",\"max_tokens\":1,\"grammar\":\"root ::= \\\"");
        sb_rep(&b, 'a', 65536 - 11 + (size_t)extra);
        sb_add(&b, "\\\"\"}");
        expect_sb("/v1/completions", &b, extra ? 400 : 200, "grammar");
    }
}

/* ---- the transport ---------------------------------------------------------------- */
/* a body of exactly --max-body is read, one byte more is 413 (announced by
 * Content-Length: read and dropped, then refused; chunked: once it passes).
 * /apply-template: a long message is rendered, not tokenized. */
static void body_of(sbuf *b, size_t size) {
    static const char head[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"", tail[] = "\"}]}";
    sb_add(b, "%s", head);
    sb_rep(b, 'a', size - (sizeof head - 1) - (sizeof tail - 1));
    sb_add(b, "%s", tail);
    assert_int_equal(b->n, size);
}

static void test_body(void **state) {
    (void)state;
    for (int extra = 0; extra <= 1; extra++) {
        sbuf b = {0};
        body_of(&b, MAX_BODY + (size_t)extra);
        expect_sb("/apply-template", &b, extra ? 413 : 200, NULL);
    }
    sbuf b = {0};
    body_of(&b, MAX_BODY + 1);
    http_buf r = {0};
    struct curl_slist *hd;
    CURL *h = http_make(g_srv.port, "POST", "/apply-template", NULL, KEY, &r, &hd);
    hd = curl_slist_append(hd, "Transfer-Encoding: chunked");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, b.p); /* with the header above: sent chunked, no Content-Length */
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    assert_int_equal(code, 413);
    assert_non_null(strstr(r.p, "request_too_large"));
    curl_easy_cleanup(h);
    curl_slist_free_all(hd);
    free(r.p);
    free(b.p);
}

/* the request line and headers share 32 KiB (libmicrohttpd's memory per
 * connection): 16 KB of header is answered, 40 KB is 431, a 40 KB URL 414 */
static void test_header_size(void **state) {
    (void)state;
    const struct {
        size_t n;
        bool url;
        const char *status;
    } rows[] = {{16000, false, "HTTP/1.1 200"}, {40000, false, "HTTP/1.1 431"}, {40000, true, "HTTP/1.1 414"}};
    for (int k = 0; k < 3; k++) {
        sbuf b = {0};
        sb_add(&b, "GET /health");
        if (rows[k].url) sb_add(&b, "?"), sb_rep(&b, 'u', rows[k].n);
        sb_add(&b, " HTTP/1.1\r\nHost: x\r\n");
        if (!rows[k].url) sb_add(&b, "X-Big: "), sb_rep(&b, 'h', rows[k].n), sb_add(&b, "\r\n");
        sb_add(&b, "\r\n");
        const int fd = tcp_connect(g_srv.port);
        send_all(fd, b.p, b.n);
        bool closed;
        const char *got = recv_for(fd, 5000, &closed);
        if (strncmp(got, rows[k].status, strlen(rows[k].status)))
            fprintf(stderr, "header row %d: wanted %s, got '%.80s'\n", k, rows[k].status, got);
        assert_memory_equal(got, rows[k].status, strlen(rows[k].status));
        close(fd);
        free(b.p);
    }
}

/* the API key: only the key itself; wrong keys of every length are 401 */
static void test_api_key(void **state) {
    (void)state;
    const char *keys[] = {KEY, "limits-key-43", "limits-key-4", "limits-key-42x", "", "LIMITS-KEY-42", NULL};
    for (int k = 0; keys[k]; k++) {
        http_buf b;
        const long code = http(g_srv.port, "GET", "/v1/models", NULL, keys[k], &b);
        assert_int_equal(code, k ? 401 : 200);
        if (k) assert_non_null(strstr(b.p, "invalid_api_key"));
        free(b.p);
    }
    http_buf b;
    assert_int_equal(http(g_srv.port, "GET", "/v1/models", NULL, NULL, &b), 401); /* no header */
    free(b.p);
}

static void start_two(void) {
    if (g_two.pid) return;
    g_two = start_server(shared_path("models/stories260K.gguf"), "--max-conns 2 --timeout 2 -q", "server_limits2.log");
    assert_true(g_two.port > 0);
}

/* --max-conns 2: two connections open, a third is not accepted (it waits in
 * the listen backlog, unanswered); once one closes, it is answered */
static void test_max_conns(void **state) {
    (void)state;
    start_two();
    const int a = tcp_connect(g_two.port), b = tcp_connect(g_two.port);
    send_all(a, "GET /hea", 8);
    send_all(b, "GET /hea", 8);
    usleep(200000);
    const int c = tcp_connect(g_two.port); /* the kernel completes the handshake; the server does not accept */
    static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    send_all(c, req, sizeof req - 1);
    bool closed;
    assert_string_equal(recv_for(c, 1000, &closed), ""); /* nothing within 1 s (the timeout is 2) */
    assert_false(closed);
    close(a);
    const char *got = recv_for(c, 3000, &closed);
    assert_memory_equal(got, "HTTP/1.1 200", 12);
    close(b);
    close(c);
}

/* --timeout 2: a client that sends half a request line and then nothing is
 * closed after about 2 s */
static void test_slow_client(void **state) {
    (void)state;
    start_two();
    const int fd = tcp_connect(g_two.port);
    send_all(fd, "POST /v1/compl", 14);
    const double t0 = now_s();
    bool closed;
    const char *got = recv_for(fd, 8000, &closed);
    const double dt = now_s() - t0;
    assert_true(closed);
    assert_string_equal(got, "");
    fprintf(stderr, "slow client closed after %.2f s\n", dt);
    assert_true(dt > 1.5 && dt < 6);
    close(fd);
    /* and the server still serves */
    http_buf b;
    assert_int_equal(http(g_two.port, "GET", "/health", NULL, NULL, &b), 200);
    free(b.p);
}

static int setup(void **state) {
    (void)state;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char args[256];
    snprintf(args, sizeof args, "--api-key " KEY " -c %d --max-body %d -q", CTX, MAX_BODY);
    g_srv = start_server(shared_path("models/stories260K.gguf"), args, "server_limits.log");
    return g_srv.port > 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    const int st2 = stop_server(&g_two), st = stop_server(&g_srv);
    curl_global_cleanup();
    return WIFEXITED(st) && !WEXITSTATUS(st) && WIFEXITED(st2) && !WEXITSTATUS(st2) ? 0 : -1;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_n_best_of),      cmocka_unit_test(test_max_tokens),
        cmocka_unit_test(test_stop),           cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_messages),       cmocka_unit_test(test_tools),
        cmocka_unit_test(test_logit_bias),     cmocka_unit_test(test_prompt_tokens),
        cmocka_unit_test(test_embeddings_inputs), cmocka_unit_test(test_schema_grammar),
        cmocka_unit_test(test_body),           cmocka_unit_test(test_header_size),
        cmocka_unit_test(test_api_key),        cmocka_unit_test(test_max_conns),
        cmocka_unit_test(test_slow_client),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
