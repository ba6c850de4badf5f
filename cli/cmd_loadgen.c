/* cmd_loadgen.c - `kvant loadgen`: a load generator for OpenAI-compatible
 * servers (kvant serve, llama.cpp's llama-server, vLLM), measured the way
 * vLLM's benchmark_serving.py does:
 *   TTFT  request sent -> first chunk with text
 *   ITL   gaps between consecutive chunks with text
 *   TPOT  (E2E - TTFT) / (output tokens - 1), per request (excludes the first)
 *   E2E   request sent -> stream end
 *   throughput = completed requests (or output tokens) / benchmark duration.
 * Output tokens come from the server's `usage` (stream_options.include_usage)
 * or, without it, from the number of chunks with text.  One thread drives
 * every connection through libcurl's multi interface; loopback URLs only. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

typedef struct {
    CURL *h;
    struct curl_slist *hdrs;
    char *body;
    bool inject, done, got_done_marker;
    bool hung_up;           /* --disconnect: the client closed it on purpose */
    int cut_after;          /* --disconnect: close after this many chunks with text (0: never) */
    double t_start, t_first, t_last, t_end;
    int n_chunks, out_tokens, in_tokens;
    long status;
    char *line;             /* partial SSE line */
    size_t line_len, line_cap;
    double *itl;
    int n_itl, cap_itl;
    char err[160];
    char *errbody;          /* first bytes of a non-200 body */
    size_t errlen;
} lg_req;

typedef struct {
    const char *url, *prompts, *model, *api_key, *endpoint, *json_out;
    cJSON *extra;           /* --extra-body: fields added to every request */
    int c, n, max_tokens, prompt_words, inject_words, inject_max_tokens;
    int prompt_tokens, inject_tokens, vocab;  /* > 0: prompts of random token ids */
    double rate, timeout_s, inject_at, temperature;
    double duration_s;      /* > 0: start requests for this long (-n is then a cap) */
    double disconnect_p;    /* share of requests the client abandons mid-stream */
    double backoff_ms;      /* after a 429 / 503, no new request for this long */
    bool json, ignore_eos;
    uint64_t seed;
} lg_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvant loadgen --url http://127.0.0.1:PORT [options]\n"
            "\n"
            "Streams completions from an OpenAI-compatible server and reports request and\n"
            "output-token throughput, TTFT, TPOT (excludes the first token), ITL and E2E latency\n"
            "(mean, p50, p90, p99, max), as vLLM's benchmark_serving.  Loopback URLs only.\n"
            "\n"
            "  --url URL               server base URL (http://127.0.0.1:PORT or localhost)\n"
            "  -c, --concurrency N     requests in flight at most (default 8)\n"
            "  -n, --requests N        requests in all (default 64)\n"
            "  --rate R                Poisson arrivals at R requests/s (default: all at once,\n"
            "                          limited by -c)\n"
            "  --prompts FILE          text the prompts are cut from (default: a few built-in\n"
            "                          sentences; e.g. ../shared/corpora/tinystories_val_subset.txt)\n"
            "  --prompt-words N        words per prompt (default 30, about 40 tokens)\n"
            "  --prompt-tokens N       prompts of N random token ids instead of text (vLLM's random\n"
            "                          dataset; exact lengths whatever the tokenizer)\n"
            "  --vocab V               token ids are drawn from [10, V) (default 32000)\n"
            "  --max-tokens N          tokens to generate per request (default 64)\n"
            "  --no-ignore-eos         let the model stop at end-of-sequence (default: ignore_eos,\n"
            "                          so every request generates --max-tokens)\n"
            "  --temperature T         sampling temperature (default 0: greedy)\n"
            "  --endpoint E            completions (default) or chat\n"
            "  --model NAME            model id to send (default: the first of GET /v1/models)\n"
            "  --api-key KEY           sent as 'Authorization: Bearer KEY'\n"
            "  --seed S                prompt choice (default 1)\n"
            "  --timeout S             stop everything after S seconds (default 600)\n"
            "  --duration S            keep starting requests for S seconds, -n at most (soak runs)\n"
            "  --disconnect P          abandon each request with probability P (0..1) after a random\n"
            "                          number of text chunks, 1 to max(1, max-tokens/2): a client that\n"
            "                          leaves mid-stream; counted apart, not as errors\n"
            "  --backoff MS            after a 429 or 503 answer, start no request for MS ms\n"
            "                          (default 0: at once; a soak's clients past the queue)\n"
            "  --inject-at S           chunked-prefill scenario: S seconds in, send one long prompt\n"
            "  --inject-words N        its length in words (default 1500, about 2000 tokens)\n"
            "  --inject-tokens N       its length in random token ids (with --prompt-tokens; default 2000)\n"
            "  --inject-max-tokens N   tokens it generates (default 16)\n"
            "  --json                  print the results as JSON on stdout (instead of the table)\n"
            "  --json-out FILE         also write the JSON to FILE\n"
            "  --extra-body JSON       an object whose fields are added to every request body\n");
}

static double now_ms(void) { return kvant_time_ms(); }

/* ---- prompts -------------------------------------------------------------------- */
typedef struct {
    char *text;
    const char **w;
    size_t n;
} corpus;

/* the text prompts are cut from when no --prompts FILE is given: a few
 * TinyStories-like sentences written for this (no file beside the binary) */
static const char k_builtin_prompts[] =
    "Once upon a time, there was a little girl named Lily. She loved to play in the park with her dog Max. "
    "One day, Lily saw a big red ball under a tree. She wanted to share it with her friend Tom, who was sad. "
    "Tom smiled and they played together until the sun went down. The next morning, a small bird sang at the "
    "window, and Lily ran outside to find it. Her mom said, \"Be careful, the grass is wet!\" Lily laughed and "
    "promised to be kind to every animal she met. In a quiet town lived an old man who made toys from wood. "
    "Every child in the town knew his shop, and every child had a favorite toy there. One rainy day a boy named "
    "Ben came in with a broken boat. The old man fixed it and Ben was very happy.";

static bool corpus_load(corpus *c, const char *path) {
    size_t sz = 0;
    if (!path) c->text = strdup(k_builtin_prompts);
    else c->text = cli_read_file(path, &sz);
    if (!c->text) return false;
    size_t cap = 1024;
    if (!(c->w = malloc(cap * sizeof *c->w))) return false;
    for (char *p = c->text; *p;) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') *p++ = 0;
        if (!*p) break;
        if (c->n == cap) {
            const char **w = realloc(c->w, (cap *= 2) * sizeof *c->w);
            if (!w) return false;
            c->w = w;
        }
        c->w[c->n++] = p;
        while (*p && *p != ' ' && *p != '\n' && *p != '\t' && *p != '\r') p++;
    }
    return c->n > 0;
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static char *make_prompt(const corpus *c, int words, uint64_t *rng) {
    size_t n = (size_t)words < c->n ? (size_t)words : c->n;
    size_t off = c->n > n ? rng_next(rng) % (c->n - n) : 0;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) len += strlen(c->w[off + i]) + 1;
    char *p = malloc(len + 1), *q = p;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(c->w[off + i]);
        memcpy(q, c->w[off + i], l);
        q += l;
        *q++ = ' ';
    }
    q[n ? -1 : 0] = 0;
    return p;
}

/* ---- SSE ----------------------------------------------------------------------- */
static void on_line(lg_req *r, char *line) {
    if (strncmp(line, "data:", 5)) return;
    line += 5;
    while (*line == ' ') line++;
    if (!strcmp(line, "[DONE]")) {
        r->got_done_marker = true;
        return;
    }
    cJSON *j = cJSON_Parse(line);
    if (!j) return;
    const double t = now_ms();
    cJSON *u = cJSON_GetObjectItem(j, "usage");
    if (cJSON_IsObject(u)) {
        cJSON *ct = cJSON_GetObjectItem(u, "completion_tokens"), *pt = cJSON_GetObjectItem(u, "prompt_tokens");
        if (cJSON_IsNumber(ct)) r->out_tokens = ct->valueint;
        if (cJSON_IsNumber(pt)) r->in_tokens = pt->valueint;
    }
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cJSON *txt = cJSON_GetObjectItem(ch, "text");
    if (!txt) txt = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "delta"), "content");
    if (cJSON_IsString(txt) && txt->valuestring[0]) {
        if (!r->n_chunks) r->t_first = t;
        else {
            if (r->n_itl == r->cap_itl) r->itl = realloc(r->itl, (size_t)(r->cap_itl = r->cap_itl * 2 + 64) * sizeof *r->itl);
            r->itl[r->n_itl++] = t - r->t_last;
        }
        r->t_last = t;
        r->n_chunks++;
    }
    cJSON *e = cJSON_GetObjectItem(j, "error");
    if (e && !r->err[0]) {
        cJSON *m = cJSON_GetObjectItem(e, "message");
        snprintf(r->err, sizeof r->err, "stream error: %s", cJSON_IsString(m) ? m->valuestring : "?");
    }
    cJSON_Delete(j);
}

static size_t on_data(char *p, size_t sz, size_t nm, void *user) {
    lg_req *r = user;
    const size_t n = sz * nm;
    if (!r->status) curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->status != 200) { /* keep the start of an error body */
        if (r->errlen < 400) {
            size_t k = n < 400 - r->errlen ? n : 400 - r->errlen;
            r->errbody = realloc(r->errbody, r->errlen + k + 1);
            memcpy(r->errbody + r->errlen, p, k);
            r->errlen += k;
            r->errbody[r->errlen] = 0;
        }
        return n;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            if (r->line_len && r->line[r->line_len - 1] == '\r') r->line_len--;
            if (r->line) {
                r->line[r->line_len] = 0;
                on_line(r, r->line);
            }
            r->line_len = 0;
            if (r->cut_after && r->n_chunks >= r->cut_after && !r->got_done_marker) {
                r->hung_up = true; /* --disconnect: returning short makes libcurl close the connection */
                return 0;
            }
            continue;
        }
        if (r->line_len + 2 > r->line_cap) r->line = realloc(r->line, r->line_cap = r->line_cap * 2 + 256);
        r->line[r->line_len++] = p[i];
    }
    return n;
}

static bool loopback_url(const char *url) {
    const char *h = strstr(url, "://");
    if (!h || strncmp(url, "http://", 7)) return false;
    h += 3;
    return !strncmp(h, "127.", 4) || (!strncmp(h, "localhost", 9) && (h[9] == ':' || h[9] == '/' || !h[9])) ||
           !strncmp(h, "[::1]", 5);
}

static size_t sink(char *p, size_t sz, size_t nm, void *user) {
    char **buf = user;
    size_t old = *buf ? strlen(*buf) : 0, n = sz * nm;
    if (old + n > (1 << 20)) return 0;
    *buf = realloc(*buf, old + n + 1);
    memcpy(*buf + old, p, n);
    (*buf)[old + n] = 0;
    return n;
}

static char *first_model(const lg_opts *o) {
    char url[1024], *body = NULL, *id = NULL;
    snprintf(url, sizeof url, "%s/v1/models", o->url);
    CURL *h = curl_easy_init();
    struct curl_slist *hd = NULL;
    char auth[512];
    if (o->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        hd = curl_slist_append(hd, auth);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    if (curl_easy_perform(h) == CURLE_OK && body) {
        cJSON *j = cJSON_Parse(body);
        cJSON *m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0), "id");
        if (cJSON_IsString(m)) id = strdup(m->valuestring);
        cJSON_Delete(j);
    }
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    free(body);
    return id;
}

/* prompt: text, or NULL for n_ids random token ids */
static void req_start(CURLM *mh, lg_req *r, const lg_opts *o, const char *model, char *prompt, int n_ids,
                      uint64_t *rng, int max_tokens) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", model);
    const bool chat = !strcmp(o->endpoint, "chat");
    if (chat) {
        cJSON *ms = cJSON_AddArrayToObject(j, "messages"), *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", prompt);
        cJSON_AddItemToArray(ms, m);
    } else if (prompt)
        cJSON_AddStringToObject(j, "prompt", prompt);
    else {
        cJSON *ids = cJSON_AddArrayToObject(j, "prompt");
        for (int i = 0; i < n_ids; i++)
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(10 + (double)(rng_next(rng) % (uint64_t)(o->vocab - 10))));
    }
    free(prompt);
    cJSON_AddNumberToObject(j, "max_tokens", max_tokens);
    cJSON_AddNumberToObject(j, "temperature", o->temperature);
    cJSON_AddBoolToObject(j, "stream", true);
    if (o->ignore_eos) cJSON_AddBoolToObject(j, "ignore_eos", true);
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(j, "stream_options"), "include_usage", true);
    cJSON *x;
    if (o->extra)
        cJSON_ArrayForEach(x, o->extra) {
            cJSON_DeleteItemFromObject(j, x->string);
            cJSON_AddItemToObject(j, x->string, cJSON_Duplicate(x, true));
        }
    r->body = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    char url[1024];
    snprintf(url, sizeof url, "%s/v1/%s", o->url, chat ? "chat/completions" : "completions");
    r->h = curl_easy_init();
    r->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    if (o->api_key) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        r->hdrs = curl_slist_append(r->hdrs, auth);
    }
    curl_easy_setopt(r->h, CURLOPT_URL, url);
    curl_easy_setopt(r->h, CURLOPT_HTTPHEADER, r->hdrs);
    curl_easy_setopt(r->h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(r->h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(r->h, CURLOPT_PRIVATE, r);
    curl_easy_setopt(r->h, CURLOPT_TIMEOUT, (long)ceil(o->timeout_s));
    curl_easy_setopt(r->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(r->h, CURLOPT_TCP_NODELAY, 1L);
    r->t_start = now_ms();
    curl_multi_add_handle(mh, r->h);
}

/* ---- statistics ------------------------------------------------------------------ */
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double mean, p50, p90, p99, max;
    int n;
} lg_stat;

static double pct(const double *v, int n, double p) { /* numpy's linear interpolation */
    if (!n) return 0;
    double k = (n - 1) * p / 100.0;
    int i = (int)k;
    return i + 1 < n ? v[i] + (k - i) * (v[i + 1] - v[i]) : v[n - 1];
}

static lg_stat stat_of(double *v, int n) {
    lg_stat s = {.n = n};
    if (!n) return s;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    s.mean = sum / n;
    s.p50 = pct(v, n, 50), s.p90 = pct(v, n, 90), s.p99 = pct(v, n, 99), s.max = v[n - 1];
    return s;
}

static void print_stat(const char *name, const char *abbr, lg_stat s) {
    static const char *what[] = {"Mean", "Median", "P90", "P99", "Max"};
    const double v[] = {s.mean, s.p50, s.p90, s.p99, s.max};
    printf("%s\n", name);
    for (int i = 0; i < 5; i++) {
        char label[64];
        snprintf(label, sizeof label, "%s %s (ms):", what[i], abbr);
        printf("%-41s%.2f\n", label, v[i]);
    }
}

static cJSON *stat_json(lg_stat s) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "mean", s.mean);
    cJSON_AddNumberToObject(j, "p50", s.p50);
    cJSON_AddNumberToObject(j, "p90", s.p90);
    cJSON_AddNumberToObject(j, "p99", s.p99);
    cJSON_AddNumberToObject(j, "max", s.max);
    cJSON_AddNumberToObject(j, "n", s.n);
    return j;
}

int cmd_loadgen(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant loadgen", false};
    lg_opts o = {.prompts = NULL, .endpoint = "completions", .c = 8,
                 .n = 64, .max_tokens = 64, .prompt_words = 30, .inject_words = 1500, .inject_max_tokens = 16, .inject_tokens = 2000, .vocab = 32000,
                 .timeout_s = 600, .inject_at = -1, .ignore_eos = true, .seed = 1};
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            usage(stdout);
            return CLI_OK;
        } else if (cli_is(&a, "--url", NULL)) o.url = cli_str(&a);
        else if (cli_is(&a, "-c", "--concurrency")) o.c = cli_int(&a, 1, 4096);
        else if (cli_is(&a, "-n", "--requests")) o.n = cli_int(&a, 1, 1000000);
        else if (cli_is(&a, "--rate", NULL)) o.rate = cli_float(&a, 0, 1e6);
        else if (cli_is(&a, "--prompts", NULL)) o.prompts = cli_str(&a);
        else if (cli_is(&a, "--prompt-words", NULL)) o.prompt_words = cli_int(&a, 1, 100000);
        else if (cli_is(&a, "--prompt-tokens", NULL)) o.prompt_tokens = cli_int(&a, 1, 1 << 20);
        else if (cli_is(&a, "--inject-tokens", NULL)) o.inject_tokens = cli_int(&a, 1, 1 << 20);
        else if (cli_is(&a, "--vocab", NULL)) o.vocab = cli_int(&a, 11, 1 << 24);
        else if (cli_is(&a, "--max-tokens", NULL)) o.max_tokens = cli_int(&a, 1, 1 << 20);
        else if (cli_is(&a, "--no-ignore-eos", NULL)) o.ignore_eos = false;
        else if (cli_is(&a, "--temperature", NULL)) o.temperature = cli_float(&a, 0, 2);
        else if (cli_is(&a, "--endpoint", NULL)) o.endpoint = cli_str(&a);
        else if (cli_is(&a, "--model", NULL)) o.model = cli_str(&a);
        else if (cli_is(&a, "--api-key", NULL)) o.api_key = cli_str(&a);
        else if (cli_is(&a, "--seed", NULL)) o.seed = cli_u64(&a);
        else if (cli_is(&a, "--timeout", NULL)) o.timeout_s = cli_float(&a, 1, 86400);
        else if (cli_is(&a, "--duration", NULL)) o.duration_s = cli_float(&a, 0.1, 86400);
        else if (cli_is(&a, "--disconnect", NULL)) o.disconnect_p = cli_float(&a, 0, 1);
        else if (cli_is(&a, "--backoff", NULL)) o.backoff_ms = cli_float(&a, 0, 1e6);
        else if (cli_is(&a, "--inject-at", NULL)) o.inject_at = cli_float(&a, 0, 86400);
        else if (cli_is(&a, "--inject-words", NULL)) o.inject_words = cli_int(&a, 1, 1000000);
        else if (cli_is(&a, "--inject-max-tokens", NULL)) o.inject_max_tokens = cli_int(&a, 1, 1 << 20);
        else if (cli_is(&a, "--json", NULL)) o.json = true;
        else if (cli_is(&a, "--json-out", NULL)) o.json_out = cli_str(&a);
        else if (cli_is(&a, "--extra-body", NULL)) {
            const char *v = cli_str(&a);
            cJSON_Delete(o.extra);
            if (v && !cJSON_IsObject(o.extra = cJSON_Parse(v))) {
                fprintf(stderr, "kvant loadgen: --extra-body needs a JSON object\n");
                a.error = true;
            }
        }
        else cli_unknown(&a);
    }
    if (a.error) {
        cJSON_Delete(o.extra);
        return CLI_USAGE;
    }
    if (!o.url) {
        fprintf(stderr, "kvant loadgen: --url is required (see --help)\n");
        return CLI_USAGE;
    }
    if (!loopback_url(o.url)) {
        fprintf(stderr, "kvant loadgen: '%s' is not a loopback http:// URL (127.x.x.x, localhost, [::1])\n", o.url);
        return CLI_USAGE;
    }
    if (strcmp(o.endpoint, "completions") && strcmp(o.endpoint, "chat")) {
        fprintf(stderr, "kvant loadgen: --endpoint must be completions or chat\n");
        return CLI_USAGE;
    }
    if (o.prompt_tokens && !strcmp(o.endpoint, "chat")) {
        fprintf(stderr, "kvant loadgen: --prompt-tokens needs --endpoint completions\n");
        return CLI_USAGE;
    }
    char url[1024];
    snprintf(url, sizeof url, "%s", o.url);
    size_t ul = strlen(url);
    while (ul && url[ul - 1] == '/') url[--ul] = 0;
    o.url = url;
    corpus cp = {0};
    if (!corpus_load(&cp, o.prompts)) {
        fprintf(stderr, "kvant loadgen: cannot read prompts from '%s'\n", o.prompts ? o.prompts : "(built in)");
        return CLI_USAGE;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *model = o.model ? strdup(o.model) : first_model(&o);
    if (!model) {
        fprintf(stderr, "kvant loadgen: GET %s/v1/models failed; is the server up? (or pass --model)\n", o.url);
        free(cp.text);
        free(cp.w);
        curl_global_cleanup();
        return CLI_FAIL;
    }
    const int n_total = o.n + (o.inject_at >= 0);
    lg_req *rs = calloc((size_t)n_total, sizeof *rs);
    CURLM *mh = curl_multi_init();
    curl_multi_setopt(mh, CURLMOPT_MAX_HOST_CONNECTIONS, (long)o.c + 1);
    uint64_t rng = o.seed, arr_rng = o.seed ^ 0xabcdefULL, cut_rng = o.seed ^ 0x5eedc0deULL;
    const double t0 = now_ms();
    double t_next = t0;
    int started = 0, finished = 0, active = 0;
    bool injected = o.inject_at < 0, timed_out = false;
    fprintf(stderr, "kvant loadgen: %d requests, concurrency %d, %s, %d %s/prompt, %d tokens each -> %s (model '%s')\n",
            o.n, o.c, o.rate > 0 ? "Poisson arrivals" : "all at once", o.prompt_tokens ? o.prompt_tokens : o.prompt_words,
            o.prompt_tokens ? "token ids" : "words", o.max_tokens, o.url, model);
    int n_planned = o.n; /* --duration: lowered to what was started when the time is up */
    double t_hold = 0;   /* --backoff: no start before this */
    while (finished < n_planned + (o.inject_at >= 0)) {
        const double t = now_ms();
        if (t - t0 > o.timeout_s * 1e3) {
            timed_out = true;
            break;
        }
        if (o.duration_s > 0 && t - t0 >= o.duration_s * 1e3) n_planned = started;
        while (started < n_planned && active < o.c && t >= t_next && t >= t_hold) {
            lg_req *r = &rs[started++];
            if (o.disconnect_p > 0 && (rng_next(&cut_rng) >> 11) * 0x1.0p-53 < o.disconnect_p) {
                const int half = o.max_tokens / 2 > 1 ? o.max_tokens / 2 : 1;
                r->cut_after = 1 + (int)(rng_next(&cut_rng) % (uint64_t)half);
            }
            req_start(mh, r, &o, model, o.prompt_tokens ? NULL : make_prompt(&cp, o.prompt_words, &rng), o.prompt_tokens,
                      &rng, o.max_tokens);
            active++;
            if (o.rate > 0) {
                double u = (rng_next(&arr_rng) >> 11) * 0x1.0p-53;
                t_next += -log(1.0 - u) / o.rate * 1e3;
            }
        }
        if (!injected && t - t0 >= o.inject_at * 1e3) {
            lg_req *r = &rs[o.n];
            r->inject = true;
            req_start(mh, r, &o, model, o.prompt_tokens ? NULL : make_prompt(&cp, o.inject_words, &rng), o.inject_tokens,
                      &rng, o.inject_max_tokens);
            injected = true;
        }
        int running;
        curl_multi_perform(mh, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(mh, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            lg_req *r;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            r->t_end = now_ms();
            r->done = true;
            curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
            if (r->status == 429 || r->status == 503) t_hold = r->t_end + o.backoff_ms;
            if (r->hung_up)
                ; /* --disconnect: an outcome of its own */
            else if (msg->data.result != CURLE_OK)
                snprintf(r->err, sizeof r->err, "%s", curl_easy_strerror(msg->data.result));
            else if (r->status != 200)
                snprintf(r->err, sizeof r->err, "HTTP %ld: %.120s", r->status, r->errbody ? r->errbody : "");
            else if (!r->n_chunks && !r->err[0])
                snprintf(r->err, sizeof r->err, "no text streamed");
            curl_multi_remove_handle(mh, r->h);
            curl_easy_cleanup(r->h);
            curl_slist_free_all(r->hdrs);
            r->h = NULL;
            finished++;
            if (!r->inject) active--;
        }
        if (finished < n_planned + (o.inject_at >= 0)) curl_multi_poll(mh, NULL, 0, 2, NULL);
    }
    double t_end = now_ms();
    if (timed_out) {
        for (int i = 0; i < started + (o.inject_at >= 0 && injected); i++) {
            lg_req *r = &rs[i < started ? i : o.n];
            if (r->h) {
                curl_multi_remove_handle(mh, r->h);
                curl_easy_cleanup(r->h);
                curl_slist_free_all(r->hdrs);
                r->h = NULL;
                snprintf(r->err, sizeof r->err, "timed out (--timeout)");
            }
        }
        fprintf(stderr, "kvant loadgen: --timeout %.0f s reached, %d of %d requests finished\n", o.timeout_s,
                finished, n_total);
    }
    curl_multi_cleanup(mh);

    /* statistics over successful ordinary requests */
    double *ttft = malloc((size_t)n_total * sizeof *ttft), *tpot = malloc((size_t)n_total * sizeof *tpot),
           *e2e = malloc((size_t)n_total * sizeof *e2e);
    int n_ok = 0, n_err = 0, n_itl = 0, n_tpot = 0, n_hung = 0, n_transport = 0;
    /* outcomes by HTTP status (what a soak compares with the server's counters) */
    int st_code[16] = {0}, st_count[16] = {0}, n_codes = 0;
    int64_t in_tok = 0, out_tok = 0;
    for (int i = 0; i < o.n; i++) n_itl += rs[i].n_itl;
    double *itl = malloc((size_t)(n_itl + 1) * sizeof *itl);
    n_itl = 0;
    const char *first_err = NULL;
    for (int i = 0; i < o.n; i++) {
        lg_req *r = &rs[i];
        if (i >= started) continue;
        if (r->hung_up) {
            n_hung++;
            continue;
        }
        if (r->done && r->status > 0 && r->err[0] && !strncmp(r->err, "HTTP ", 5)) {
            int k = 0;
            while (k < n_codes && st_code[k] != (int)r->status) k++;
            if (k == n_codes && n_codes < 16) st_code[n_codes++] = (int)r->status;
            if (k < n_codes) st_count[k]++;
        } else if (r->err[0] || !r->done) {
            n_transport++; /* no clean answer: connection error, cut stream, no text, not finished */
        }
        if (r->err[0] || !r->done) {
            n_err++;
            if (!first_err) first_err = r->err[0] ? r->err : "not finished";
            continue;
        }
        const int out = r->out_tokens ? r->out_tokens : r->n_chunks;
        ttft[n_ok] = r->t_first - r->t_start;
        e2e[n_ok] = r->t_end - r->t_start;
        if (out > 1) tpot[n_tpot++] = (e2e[n_ok] - ttft[n_ok]) / (out - 1);
        for (int k = 0; k < r->n_itl; k++) itl[n_itl++] = r->itl[k];
        in_tok += r->in_tokens;
        out_tok += out;
        n_ok++;
    }
    const double dur = (t_end - t0) / 1e3;
    lg_stat s_ttft = stat_of(ttft, n_ok), s_tpot = stat_of(tpot, n_tpot), s_itl = stat_of(itl, n_itl),
            s_e2e = stat_of(e2e, n_ok);
    lg_req *inj = o.inject_at >= 0 ? &rs[o.n] : NULL;
    const bool inj_ok = inj && inj->done && !inj->err[0];
    if (o.json || o.json_out) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "url", o.url);
        cJSON_AddStringToObject(j, "model", model);
        cJSON_AddNumberToObject(j, "concurrency", o.c);
        cJSON_AddNumberToObject(j, "requests", o.n);
        cJSON_AddNumberToObject(j, "completed", n_ok);
        cJSON_AddNumberToObject(j, "errors", n_err);
        cJSON_AddNumberToObject(j, "started", started);
        cJSON_AddNumberToObject(j, "disconnected", n_hung);
        cJSON_AddNumberToObject(j, "transport_errors", n_transport);
        cJSON *sc = cJSON_AddObjectToObject(j, "http_errors");
        for (int k = 0; k < n_codes; k++) {
            char code[16];
            snprintf(code, sizeof code, "%d", st_code[k]);
            cJSON_AddNumberToObject(sc, code, st_count[k]);
        }
        if (first_err) cJSON_AddStringToObject(j, "first_error", first_err);
        cJSON_AddNumberToObject(j, "duration_s", dur);
        cJSON_AddNumberToObject(j, "input_tokens", (double)in_tok);
        cJSON_AddNumberToObject(j, "output_tokens", (double)out_tok);
        cJSON_AddNumberToObject(j, "request_throughput", n_ok / dur);
        cJSON_AddNumberToObject(j, "output_throughput", out_tok / dur);
        cJSON_AddNumberToObject(j, "total_token_throughput", (in_tok + out_tok) / dur);
        cJSON_AddItemToObject(j, "ttft_ms", stat_json(s_ttft));
        cJSON_AddItemToObject(j, "tpot_ms", stat_json(s_tpot));
        cJSON_AddItemToObject(j, "itl_ms", stat_json(s_itl));
        cJSON_AddItemToObject(j, "e2e_ms", stat_json(s_e2e));
        if (inj) {
            cJSON *ij = cJSON_AddObjectToObject(j, "inject");
            cJSON_AddBoolToObject(ij, "ok", inj_ok);
            if (inj->err[0]) cJSON_AddStringToObject(ij, "error", inj->err);
            cJSON_AddNumberToObject(ij, "at_s", o.inject_at);
            cJSON_AddNumberToObject(ij, "prompt_tokens", inj->in_tokens);
            cJSON_AddNumberToObject(ij, "ttft_ms", inj_ok ? inj->t_first - inj->t_start : -1);
            cJSON_AddNumberToObject(ij, "e2e_ms", inj_ok ? inj->t_end - inj->t_start : -1);
        }
        char *t = cJSON_Print(j);
        if (o.json) printf("%s\n", t);
        FILE *f = o.json_out ? fopen(o.json_out, "w") : NULL;
        if (o.json_out && !f) fprintf(stderr, "kvant loadgen: cannot write %s\n", o.json_out);
        if (f) fprintf(f, "%s\n", t), fclose(f);
        free(t);
        cJSON_Delete(j);
    }
    if (!o.json) {
        printf("============ Serving Benchmark Result ============\n");
        printf("Server:                                  %s\n", o.url);
        printf("Successful requests:                     %d\n", n_ok);
        printf("Failed requests:                         %d\n", n_err);
        if (o.disconnect_p > 0) printf("Abandoned by the client (--disconnect):  %d\n", n_hung);
        for (int k = 0; k < n_codes; k++) printf("  HTTP %d:                                %d\n", st_code[k], st_count[k]);
        if (n_transport) printf("  no clean answer:                       %d\n", n_transport);
        if (first_err) printf("First error:                             %s\n", first_err);
        printf("Benchmark duration (s):                  %.2f\n", dur);
        printf("Total input tokens:                      %lld\n", (long long)in_tok);
        printf("Total generated tokens:                  %lld\n", (long long)out_tok);
        printf("Request throughput (req/s):              %.2f\n", n_ok / dur);
        printf("Output token throughput (tok/s):         %.2f\n", out_tok / dur);
        printf("Total Token throughput (tok/s):          %.2f\n", (in_tok + out_tok) / dur);
        print_stat("---------------Time to First Token----------------", "TTFT", s_ttft);
        print_stat("-----Time per Output Token (excl. 1st token)------", "TPOT", s_tpot);
        print_stat("---------------Inter-token Latency----------------", "ITL", s_itl);
        print_stat("----------------End-to-end Latency----------------", "E2E", s_e2e);
        if (inj) {
            printf("--------------Injected long prompt-----------------\n");
            printf("Sent at (s):                             %.2f\n", o.inject_at);
            printf("Prompt tokens:                           %d\n", inj->in_tokens);
            if (inj_ok) printf("TTFT (ms):                               %.2f\n", inj->t_first - inj->t_start);
            else printf("Error:                                   %s\n", inj->err[0] ? inj->err : "not finished");
        }
        printf("==================================================\n");
    }
    for (int i = 0; i < n_total; i++) {
        free(rs[i].body);
        free(rs[i].line);
        free(rs[i].itl);
        free(rs[i].errbody);
    }
    free(rs);
    free(ttft), free(tpot), free(e2e), free(itl);
    free(model);
    free(cp.text);
    free(cp.w);
    cJSON_Delete(o.extra);
    curl_global_cleanup();
    return n_err || timed_out || (inj && !inj_ok) ? CLI_FAIL : CLI_OK;
}
