/* test_server_embed.c - POST /v1/embeddings end to end: a real `kvant serve`
 * on a free loopback port (stories260K), as test_server.c starts it: each
 * embedding equal to kvant_embed alone, in this process, bit for bit; the
 * same alone, in an array and beside a stream (batching invariance);
 * base64; the refusals; a client hanging up. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvant_infer.h"
#include "server_util.h"
#include "testutil.h"

#define KEY "test-key-123"

static server_proc g_srv; /* with --api-key KEY */

/* POSTs to the keyed server, expects 200 and JSON */
static cJSON *post_ok(const char *path, const char *body) { return post_json(g_srv.port, path, body, KEY); }

/* ---- POST /v1/embeddings ----------------------------------------------------------- */
/* kvant_embed alone, in this process, on the model the server runs: the reference */
static int embed_ref(const char *text, float *out, int *n_tok) {
    kvant_status st;
    kvant_model *m = kvant_model_open(shared_path("models/stories260K.gguf"), NULL, &st);
    if (!m) fail_msg("%s", st.msg);
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    int32_t t[512];
    const int n = kvant_tokenize(m, text, strlen(text), true, t, 512);
    assert_true(n > 0);
    kvant_seq *s = kvant_seq_new(m, 0, &st);
    assert_non_null(s);
    assert_int_equal(kvant_embed(s, t, n, out, &st), KVANT_OK);
    kvant_seq_free(s);
    kvant_model_free(m);
    if (n_tok) *n_tok = n;
    return in.dim;
}

/* the text of the k-th "embedding" value in a response body, as sent */
static char *raw_embedding(const char *body, int k) {
    const char *p = body;
    for (int i = 0; i <= k; i++) {
        p = strstr(p, "\"embedding\":");
        assert_non_null(p);
        p += 12;
    }
    const char *e = *p == '[' ? strchr(p, ']') : strchr(p + 1, '"');
    assert_non_null(e);
    const size_t n = (size_t)(e + 1 - p);
    char *o = malloc(n + 1);
    memcpy(o, p, n);
    o[n] = 0;
    return o;
}

/* a JSON float list's values, read back as float32 (the shortest text that does) */
static int floats_of_text(const char *raw, float *out, int cap) {
    assert_true(raw[0] == '[');
    int n = 0;
    for (const char *p = raw + 1; *p && *p != ']'; n++) {
        char *end;
        assert_true(n < cap);
        out[n] = strtof(p, &end);
        assert_true(end > p);
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* a JSON base64 string ("...", with its quotes) -> little-endian float32s */
static int floats_of_base64(const char *raw, float *out, int cap) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    assert_true(raw[0] == '"');
    unsigned char b[4096];
    size_t nb = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (const char *p = raw + 1; *p != '"'; p++) {
        if (*p == '=') continue;
        const char *c = strchr(A, *p);
        assert_non_null(c);
        acc = acc << 6 | (uint32_t)(c - A);
        if ((bits += 6) >= 8) {
            bits -= 8;
            assert_true(nb < sizeof b);
            b[nb++] = (unsigned char)(acc >> bits);
        }
    }
    assert_int_equal(nb % 4, 0);
    assert_true((int)(nb / 4) <= cap);
    for (size_t i = 0; i < nb / 4; i++) {
        const uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 |
                           (uint32_t)b[4 * i + 3] << 24;
        memcpy(&out[i], &u, 4);
    }
    return (int)(nb / 4);
}

static long post_embed(const char *body, http_buf *b) { return http(g_srv.port, "POST", "/v1/embeddings", body, KEY, b); }

/* a string and an array of strings / token ids: unit vectors of the model's
 * dim, equal to kvant_embed alone bit for bit, in order, with usage */
static void test_embeddings(void **state) {
    (void)state;
    static const char *const texts[] = {"Once upon a time", "The dog ran to the park.", "A cat."};
    float want[3][64], got[64];
    int n_tok[3], dim = 0;
    for (int i = 0; i < 3; i++) dim = embed_ref(texts[i], want[i], &n_tok[i]);
    assert_int_equal(dim, 64);
    /* one string, floats */
    cJSON *j = post_ok("/v1/embeddings", "{\"model\":\"stories260K\",\"input\":\"Once upon a time\",\"user\":\"u-1\"}");
    assert_string_equal(json_str(j, "object"), "list");
    assert_string_equal(json_str(j, "model"), "stories260K");
    assert_string_equal(json_str(j, "data.0.object"), "embedding");
    assert_int_equal((int)json_num(j, "data.0.index"), 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "data")), 1);
    assert_int_equal((int)json_num(j, "usage.prompt_tokens"), n_tok[0]);
    assert_int_equal((int)json_num(j, "usage.total_tokens"), n_tok[0]);
    cJSON *vec = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0), "embedding");
    assert_int_equal(cJSON_GetArraySize(vec), dim);
    double norm = 0;
    cJSON *x;
    cJSON_ArrayForEach(x, vec) norm += x->valuedouble * x->valuedouble;
    assert_true(fabs(norm - 1) < 1e-5);
    cJSON_Delete(j);
    http_buf b;
    assert_int_equal(post_embed("{\"input\":\"Once upon a time\",\"encoding_format\":\"float\"}", &b), 200);
    char *raw = raw_embedding(b.p, 0);
    assert_int_equal(floats_of_text(raw, got, 64), dim);
    assert_memory_equal(got, want[0], sizeof(float) * (size_t)dim); /* the float text reads back exactly */
    free(raw);
    free(b.p);
    /* an array of strings, base64 */
    assert_int_equal(post_embed("{\"input\":[\"Once upon a time\",\"The dog ran to the park.\",\"A cat.\"],"
                                "\"encoding_format\":\"base64\",\"dimensions\":64}", &b), 200);
    j = cJSON_Parse(b.p);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "data")), 3);
    assert_int_equal((int)json_num(j, "usage.prompt_tokens"), n_tok[0] + n_tok[1] + n_tok[2]);
    for (int i = 0; i < 3; i++) {
        char path[32];
        snprintf(path, sizeof path, "data.%d.index", i);
        assert_int_equal((int)json_num(j, path), i);
        raw = raw_embedding(b.p, i);
        assert_int_equal(floats_of_base64(raw, got, 64), dim);
        assert_memory_equal(got, want[i], sizeof(float) * (size_t)dim);
        norm = 0;
        for (int k = 0; k < dim; k++) norm += (double)got[k] * got[k];
        assert_true(fabs(norm - 1) < 1e-5);
        free(raw);
    }
    cJSON_Delete(j);
    free(b.p);
    /* token ids: [ids] and [[ids], [ids]] (BOS given as the string's tokens have it) */
    j = post_ok("/tokenize", "{\"content\":\"A cat.\",\"add_special\":true,\"parse_special\":false}");
    char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "tokens"));
    cJSON_Delete(j);
    char body[512];
    snprintf(body, sizeof body, "{\"input\":%s,\"encoding_format\":\"base64\"}", ids);
    assert_int_equal(post_embed(body, &b), 200);
    raw = raw_embedding(b.p, 0);
    assert_int_equal(floats_of_base64(raw, got, 64), dim);
    assert_memory_equal(got, want[2], sizeof(float) * (size_t)dim);
    free(raw);
    free(b.p);
    snprintf(body, sizeof body, "{\"input\":[%s,[1,2,3],%s],\"encoding_format\":\"base64\"}", ids, ids);
    assert_int_equal(post_embed(body, &b), 200);
    char *r0 = raw_embedding(b.p, 0), *r2 = raw_embedding(b.p, 2);
    assert_string_equal(r0, r2);
    assert_int_equal(floats_of_base64(r0, got, 64), dim);
    assert_memory_equal(got, want[2], sizeof(float) * (size_t)dim);
    free(r0), free(r2), free(b.p);
    cJSON_free(ids);
}

/* The batching-invariance result: the same text's vector alone, second of
 * three in one request, and while a long generation streams beside it, is
 * the same floats bit for bit (the float text and the base64 bytes as sent) */
static void test_embeddings_batching_invariance(void **state) {
    (void)state;
    const char *T = "The little dog ran to the park and played with a big red ball.";
    char alone_f[256], alone_b[256], arr_f[320], arr_b[320];
    snprintf(alone_f, sizeof alone_f, "{\"input\":\"%s\"}", T);
    snprintf(alone_b, sizeof alone_b, "{\"input\":[\"%s\"],\"encoding_format\":\"base64\"}", T);
    snprintf(arr_f, sizeof arr_f, "{\"input\":[\"Once upon a time\",\"%s\",\"A cat sat on the mat.\"]}", T);
    snprintf(arr_b, sizeof arr_b, "{\"input\":[\"Once upon a time\",\"%s\",\"A cat sat on the mat.\"],"
             "\"encoding_format\":\"base64\"}", T);
    const char *bodies[4] = {alone_f, alone_b, arr_f, arr_b};
    const int at[4] = {0, 0, 1, 1};
    char *seq[4], *conc[4];
    for (int i = 0; i < 4; i++) {
        http_buf b;
        assert_int_equal(post_embed(bodies[i], &b), 200);
        seq[i] = raw_embedding(b.p, at[i]);
        free(b.p);
    }
    /* a long generation streaming, then the four at once beside it */
    http_buf sb = {0}, eb[4];
    struct curl_slist *shd, *ehd[4];
    CURL *sh = http_make(g_srv.port, "POST", "/v1/completions",
                         "{\"prompt\":\"Once upon a time\",\"max_tokens\":2000,\"stream\":true,\"ignore_eos\":true}",
                         KEY, &sb, &shd);
    CURLM *mh = curl_multi_init();
    curl_multi_add_handle(mh, sh);
    int running = 1;
    for (int i = 0; i < 2000 && sb.n < 200; i++) { /* a few tokens in */
        curl_multi_perform(mh, &running);
        curl_multi_poll(mh, NULL, 0, 10, NULL);
    }
    assert_true(sb.n >= 200);
    const size_t streamed_before = sb.n;
    CURL *eh[4];
    for (int i = 0; i < 4; i++) {
        memset(&eb[i], 0, sizeof eb[i]);
        eh[i] = http_make(g_srv.port, "POST", "/v1/embeddings", bodies[i], KEY, &eb[i], &ehd[i]);
        curl_multi_add_handle(mh, eh[i]);
    }
    int left = 4;
    while (left) {
        curl_multi_perform(mh, &running);
        CURLMsg *msg;
        int q;
        while ((msg = curl_multi_info_read(mh, &q)))
            if (msg->msg == CURLMSG_DONE && msg->easy_handle != sh) left--;
            else if (msg->msg == CURLMSG_DONE) fail_msg("the stream ended before the embeddings");
        if (left) curl_multi_poll(mh, NULL, 0, 10, NULL);
    }
    assert_null(strstr(sb.p, "[DONE]")); /* still generating: the embeddings ran beside it */
    const size_t streamed = sb.n - streamed_before;
    for (int i = 0; i < 4; i++) {
        long code = 0;
        curl_easy_getinfo(eh[i], CURLINFO_RESPONSE_CODE, &code);
        assert_int_equal(code, 200);
        conc[i] = raw_embedding(eb[i].p, at[i]);
        curl_multi_remove_handle(mh, eh[i]);
        curl_easy_cleanup(eh[i]);
        curl_slist_free_all(ehd[i]);
        free(eb[i].p);
    }
    curl_multi_remove_handle(mh, sh); /* hang up on the stream */
    curl_easy_cleanup(sh);
    curl_slist_free_all(shd);
    curl_multi_cleanup(mh);
    free(sb.p);
    /* float text alone == in the array == beside the stream; base64 the same;
     * and both encodings the same float32s */
    for (int i = 0; i < 4; i++) assert_string_equal(conc[i], seq[i]);
    assert_string_equal(seq[0], seq[2]);
    assert_string_equal(seq[1], seq[3]);
    float ft[64], fb[64];
    const int dim = floats_of_text(seq[0], ft, 64);
    assert_int_equal(floats_of_base64(seq[1], fb, 64), dim);
    assert_memory_equal(ft, fb, sizeof(float) * (size_t)dim);
    printf("embeddings batching invariance: \"%.24s...\" alone, 2nd of 3 in one request, and beside a streaming "
           "generation (%zu SSE bytes streamed meanwhile): the same %d float32s bit for bit (float text %zu bytes "
           "x 4 equal, base64 %zu chars x 4 equal, base64 == float text)\n",
           T, streamed, dim, strlen(seq[0]), strlen(seq[1]));
    for (int i = 0; i < 4; i++) free(seq[i]), free(conc[i]);
}

/* every refusal names its field (param); unknown fields have code unknown_field */
static void test_embeddings_refusals(void **state) {
    (void)state;
    char *many = malloc(8 * 300), *p = many;
    p += sprintf(p, "{\"input\":[");
    for (int i = 0; i < 257; i++) p += sprintf(p, "%s\"a\"", i ? "," : "");
    sprintf(p, "]}");
    char *tlong = malloc(20000);
    p = tlong + sprintf(tlong, "{\"input\":\"");
    for (int i = 0; i < 2100; i++) p += sprintf(p, "a ");
    sprintf(p, "\"}");
    static const struct {
        const char *body;
        int status;
        const char *param, *code;
    } cases[] = {
        {"{\"input\":\"\"}", 400, "input", NULL},
        {"{\"input\":[]}", 400, "input", NULL},
        {"{\"input\":[\"a\",\"\"]}", 400, "input", NULL},
        {"{\"input\":[[]]}", 400, "input", NULL},
        {"{\"input\":[[1],[]]}", 400, "input", NULL},
        {"{\"input\":[1,\"a\"]}", 400, "input", NULL},
        {"{\"input\":[\"a\",[1]]}", 400, "input", NULL},
        {"{\"input\":[512]}", 400, "input", NULL},
        {"{\"input\":[1.5]}", 400, "input", NULL},
        {"{\"input\":42}", 400, "input", NULL},
        {"{\"input\":{\"text\":\"a\"}}", 400, "input", NULL},
        {"{\"model\":\"stories260K\"}", 400, "input", NULL},
        {"{\"input\":\"a\",\"dimensions\":32}", 400, "dimensions", NULL},
        {"{\"input\":\"a\",\"dimensions\":64.5}", 400, "dimensions", NULL},
        {"{\"input\":\"a\",\"dimensions\":\"64\"}", 400, "dimensions", NULL},
        {"{\"input\":\"a\",\"encoding_format\":\"int8\"}", 400, "encoding_format", NULL},
        {"{\"input\":\"a\",\"user\":7}", 400, "user", NULL},
        {"{\"input\":\"a\",\"model\":7}", 400, "model", NULL},
        {"{\"input\":\"a\",\"model\":\"gpt-4\"}", 404, "model", "model_not_found"},
        {"{\"input\":\"a\",\"temperature\":0}", 400, "temperature", "unknown_field"},
        {"{\"input\":\"a\",\"input\":\"b\"}", 400, "input", NULL},
        {"{\"input\":\"a\",\"prompt\":\"b\"}", 400, "prompt", "unknown_field"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases + 2; i++) {
        const bool extra = i >= sizeof cases / sizeof *cases;
        const char *body = extra ? (i == sizeof cases / sizeof *cases ? many : tlong) : cases[i].body;
        http_buf b;
        const long code = post_embed(body, &b);
        cJSON *j = cJSON_Parse(b.p);
        if (code != (extra ? 400 : cases[i].status)) fail_msg("%.80s -> %ld %s", body, code, b.p);
        assert_non_null(j);
        const char *param = json_str(j, "error.param"), *ecode = json_str(j, "error.code");
        if (!param || strcmp(param, extra ? "input" : cases[i].param)) fail_msg("%.80s -> %s", body, b.p);
        if (extra && i > sizeof cases / sizeof *cases) assert_string_equal(ecode, "context_length_exceeded");
        if (!extra && cases[i].code) assert_string_equal(ecode, cases[i].code);
        if (!extra && !cases[i].code && ecode && !strcmp(ecode, "unknown_field")) fail_msg("%s -> %s", body, b.p);
        cJSON_Delete(j);
        free(b.p);
    }
    free(many);
    free(tlong);
    http_buf b; /* the method, the key */
    assert_int_equal(http(g_srv.port, "GET", "/v1/embeddings", NULL, KEY, &b), 405);
    free(b.p);
    assert_int_equal(http(g_srv.port, "POST", "/v1/embeddings", "{\"input\":\"a\"}", NULL, &b), 401);
    free(b.p);
    cJSON_Delete(post_ok("/v1/embeddings", "{\"input\":\"a\",\"encoding_format\":null,\"dimensions\":null}"));
}

/* a client that hangs up while its inputs run: libmicrohttpd does not see a
 * suspended connection close, the server's watch does; every input is
 * cancelled and the blocks come back */
static void test_embeddings_disconnect(void **state) {
    (void)state;
    char *body = malloc(70000), *p = body;
    p += sprintf(p, "{\"input\":[");
    for (int i = 0; i < 64; i++) {
        p += sprintf(p, "%s\"", i ? "," : "");
        for (int k = 0; k < 500; k++) p += sprintf(p, "a ");
        p += sprintf(p, "\"");
    }
    sprintf(p, "]}");
    const long cancelled = metric_settled(g_srv.port, "kvant_requests_total{outcome=\"cancelled\"}");
    http_buf b = {0};
    struct curl_slist *hd;
    CURL *h = http_make(g_srv.port, "POST", "/v1/embeddings", body, KEY, &b, &hd);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 150L);
    assert_int_equal(curl_easy_perform(h), CURLE_OPERATION_TIMEDOUT);
    curl_easy_cleanup(h);
    curl_slist_free_all(hd);
    free(b.p);
    free(body);
    long running = -1, used = -1, now = cancelled;
    for (int i = 0; i < 100; i++) {
        running = metric_value(g_srv.port, "kvant_num_requests_running");
        used = metric_value(g_srv.port, "kvant_kv_blocks_used");
        now = metric_value(g_srv.port, "kvant_requests_total{outcome=\"cancelled\"}");
        if (!running && !used && now > cancelled) break;
        usleep(50000);
    }
    assert_int_equal(running, 0);
    assert_int_equal(used, 0);
    if (now != cancelled + 1)
        fail_msg("cancelled requests went from %ld to %ld (ok: %ld)", cancelled, now,
                 metric_value(g_srv.port, "kvant_requests_total{outcome=\"ok\"}"));
    cJSON_Delete(post_ok("/v1/embeddings", "{\"input\":\"still serving\"}"));
}


static int setup(void **state) {
    (void)state;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    g_srv = start_server(shared_path("models/stories260K.gguf"), "--api-key " KEY " --max-body 65536 --max-seqs 32",
                         "server_embed.log");
    assert_true(g_srv.port > 0);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    int st = stop_server(&g_srv);
    curl_global_cleanup();
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return 0;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embeddings),
        cmocka_unit_test(test_embeddings_batching_invariance),
        cmocka_unit_test(test_embeddings_refusals),
        cmocka_unit_test(test_embeddings_disconnect),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
