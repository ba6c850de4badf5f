/* server_util.h - what the `kvant serve` tests share (test_server,
 * test_server_embed, test_server_tools, test_server_limits; linked into those): the server as a child process
 * on a free loopback port, and HTTP requests to it with libcurl. */
#ifndef KVANT_SERVER_UTIL_H
#define KVANT_SERVER_UTIL_H

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    int port;
} server_proc;

/* Starts `kvant serve -m MODEL --port 0 -t 1 ARGS` (stdout dropped, stderr to
 * tmp/LOGNAME) and reads the port from its log, waiting up to 30 s (ASan).
 * Not started: port 0, and the command on stderr. */
server_proc start_server(const char *model, const char *args, const char *logname);
/* SIGTERM and the wait status (0 for a server not running; pid zeroed). */
int stop_server(server_proc *s);

/* A response body, NUL-terminated; Retry-After's value if one came. */
typedef struct {
    char *p;
    size_t n;
    size_t abort_after; /* > 0: stop reading (disconnect) after this many bytes */
    char retry_after[32];
} http_buf;

/* An easy handle for METHOD http://127.0.0.1:PORT/PATH with a JSON body (or
 * none), Bearer KEY (or none), the response into b; *hd to free after. */
CURL *http_make(int port, const char *method, const char *path, const char *body, const char *key, http_buf *b,
                struct curl_slist **hd);
/* One request; the status (0: no answer).  b->p is malloc'd, never NULL. */
long http(int port, const char *method, const char *path, const char *body, const char *key, http_buf *b);
/* POSTs BODY to PATH (Bearer KEY, or none); the test fails unless the answer
 * is 200 and JSON, which is returned (cJSON_Delete it). */
cJSON *post_json(int port, const char *path, const char *body, const char *key);

/* The string / number at a dotted path ("choices.0.text": digits index
 * arrays); json_str gives NULL when it is absent or not a string, json_num
 * fails the test unless it is a number. */
const char *json_str(cJSON *j, const char *path);
double json_num(cJSON *j, const char *path);
/* The value of the unlabelled metric NAME in GET /metrics (the test fails if
 * it is missing). */
long metric_value(int port, const char *name);
/* The same once nothing runs and the value has held for 200 ms (a hang-up
 * an earlier test made is counted when the server notices it, a moment
 * later), waiting up to 10 s: a baseline for a counter. */
long metric_settled(int port, const char *name);

#endif
