/* server_util.c - see server_util.h. */
#include "server_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

server_proc start_server(const char *model, const char *args, const char *logname) {
    server_proc s = {0};
    char log[512], cmd[2048];
    snprintf(log, sizeof log, "%s", tmp_path(logname));
    snprintf(cmd, sizeof cmd, "exec %s serve -m %s --port 0 -t 1 %s >/dev/null 2>%s", KVANT_BIN, model, args, log);
    unlink(log);
    s.pid = fork();
    if (s.pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 300 && !s.port; i++) { /* up to 30 s (ASan) */
        usleep(100000);
        FILE *f = fopen(log, "r");
        if (!f) continue;
        char line[512];
        while (fgets(line, sizeof line, f)) {
            const char *q = strstr(line, "http://127.0.0.1:");
            if (q) s.port = atoi(q + 17);
        }
        fclose(f);
    }
    if (!s.port) fprintf(stderr, "kvant serve did not start: %s\n", cmd);
    return s;
}

int stop_server(server_proc *s) {
    if (!s->pid) return 0;
    kill(s->pid, SIGTERM);
    int st = 0;
    waitpid(s->pid, &st, 0);
    s->pid = 0;
    return st;
}

static size_t on_body(char *d, size_t sz, size_t nm, void *u) {
    http_buf *b = u;
    const size_t n = sz * nm;
    b->p = realloc(b->p, b->n + n + 1);
    memcpy(b->p + b->n, d, n);
    b->n += n;
    b->p[b->n] = 0;
    if (b->abort_after && b->n >= b->abort_after) return 0;
    return n;
}

static size_t on_header(char *d, size_t sz, size_t nm, void *u) {
    http_buf *b = u;
    const size_t n = sz * nm;
    if (n > 13 && !strncasecmp(d, "Retry-After:", 12))
        snprintf(b->retry_after, sizeof b->retry_after, "%.*s", (int)(n - 12), d + 12);
    return n;
}

CURL *http_make(int port, const char *method, const char *path, const char *body, const char *key, http_buf *b,
                struct curl_slist **hd) {
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *h = curl_easy_init();
    *hd = curl_slist_append(NULL, "Content-Type: application/json");
    if (key) {
        char a[128];
        snprintf(a, sizeof a, "Authorization: Bearer %s", key);
        *hd = curl_slist_append(*hd, a);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hd);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    return h;
}

long http(int port, const char *method, const char *path, const char *body, const char *key, http_buf *b) {
    struct curl_slist *hd;
    memset(b, 0, sizeof *b);
    CURL *h = http_make(port, method, path, body, key, b, &hd);
    long code = 0;
    curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    curl_slist_free_all(hd);
    if (!b->p) b->p = calloc(1, 1);
    return code;
}

cJSON *post_json(int port, const char *path, const char *body, const char *key) {
    http_buf b;
    const long code = http(port, "POST", path, body, key, &b);
    if (code != 200) fprintf(stderr, "POST %s %s -> %ld %s\n", path, body, code, b.p);
    assert_int_equal(code, 200);
    cJSON *j = cJSON_Parse(b.p);
    assert_non_null(j);
    free(b.p);
    return j;
}

/* follows a dotted path ("choices.0.text") from j */
static cJSON *json_at(cJSON *j, const char *path) {
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s", path);
    char *save = NULL;
    for (char *t = strtok_r(tmp, ".", &save); t && j; t = strtok_r(NULL, ".", &save))
        j = (*t >= '0' && *t <= '9') ? cJSON_GetArrayItem(j, atoi(t)) : cJSON_GetObjectItem(j, t);
    return j;
}

const char *json_str(cJSON *j, const char *path) {
    j = json_at(j, path);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

double json_num(cJSON *j, const char *path) {
    j = json_at(j, path);
    assert_true(cJSON_IsNumber(j));
    return j->valuedouble;
}

long metric_value(int port, const char *name) {
    http_buf b;
    assert_int_equal(http(port, "GET", "/metrics", NULL, NULL, &b), 200);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(b.p, key);
    assert_non_null(p);
    long v = atol(p + strlen(key));
    free(b.p);
    return v;
}

long metric_settled(int port, const char *name) {
    long last = -1;
    for (int i = 0, same = 0; i < 200 && same < 4; i++) {
        const long running = metric_value(port, "kvant_num_requests_running");
        const long now = metric_value(port, name);
        same = !running && now == last ? same + 1 : 0;
        last = now;
        usleep(50000);
    }
    return last;
}
