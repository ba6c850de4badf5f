/* http.c - the HTTP side of kvant serve: libmicrohttpd's callbacks (body
 * collection, completion), routing, the API key, the send helpers, the chat
 * page, the content reader of streams, start / stop.  The other jobs are
 * validate.c, engine_loop.c, render.c and embed.c (see srv_internal.h). */
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/srv_internal.h"
#include "server/ui.h"

void srv_log(kvant_log_level lvl, const char *fmt, ...) {
    (void)lvl;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "kvant serve: %s\n", line);
}

/* ---- responses ----------------------------------------------------------------- */
static enum MHD_Result send_text(conn_ctx *x, struct MHD_Connection *c, unsigned status, const char *ctype,
                                 char *body, const char *retry_after) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (retry_after) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry_after);
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    x->status = (int)status;
    return ret;
}

static enum MHD_Result send_json(conn_ctx *x, struct MHD_Connection *c, unsigned status, cJSON *j) {
    char *body = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!body) return MHD_NO;
    return send_text(x, c, status, "application/json", body, NULL);
}

__attribute__((format(printf, 8, 9))) static enum MHD_Result send_error(srv *s, conn_ctx *x, struct MHD_Connection *c, unsigned status, const char *type,
                                  const char *param, const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    char *body = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!body) return MHD_NO;
    pthread_mutex_lock(&s->mt.mu);
    if (status == 429) s->mt.req_429++;
    else if (status >= 500) s->mt.req_err5xx++;
    else s->mt.req_err4xx++;
    pthread_mutex_unlock(&s->mt.mu);
    return send_text(x, c, status, "application/json", body, status == 429 || status == 503 ? "1" : NULL);
}

/* GET / and HEAD /: the chat page (server/ui/index.html, in the binary).  It
 * needs no API key, so that it can load and ask for one; it holds no data.
 * Cache-Control no-cache + ETag: a browser keeps the page and revalidates it
 * on each load (a 304 without a body), so a new kvant's page shows at once.
 * The policy lets it reach this server only (connect-src 'self'): no CDN, no
 * other origin, even if the page were changed to ask for one. */
static enum MHD_Result send_page(srv *s, conn_ctx *x, struct MHD_Connection *c) {
    size_t n;
    const char *page = srv_ui_page(&n);
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    const bool fresh = inm && strstr(inm, s->ui_etag);
    struct MHD_Response *resp = MHD_create_response_from_buffer(fresh ? 0 : n, (void *)page, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, s->ui_etag);
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
                            "frame-ancestors 'none'");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    const unsigned status = fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK;
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    x->status = (int)status;
    return ret;
}

/* a refusal from validate.c */
static enum MHD_Result send_verr(srv *s, conn_ctx *x, struct MHD_Connection *c, const verr *v) {
    const unsigned status = v->status ? (unsigned)v->status : 400;
    return send_error(s, x, c, status, status >= 500 ? "server_error" : "invalid_request_error", v->param, v->code,
                      "%s", v->msg);
}

/* ---- generation: the content reader (streams), the blocking body ------------- */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    sreq *r = cls;
    (void)pos;
    for (;;) {
        if (r->out_pos < r->out_len) {
            size_t n = r->out_len - r->out_pos;
            if (n > max) n = max;
            memcpy(buf, r->out + r->out_pos, n);
            r->out_pos += n;
            if (r->out_pos == r->out_len) r->out_pos = r->out_len = 0;
            return (ssize_t)n;
        }
        if (r->all_finished) return MHD_CONTENT_READER_END_OF_STREAM;
        srv_drain(r);
        if (r->out_len || r->all_finished) continue;
        pthread_mutex_lock(&r->mu);
        if (r->http_gone) { /* srv_embed_watch saw the client leave and cancelled it */
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (!r->q_len) {
            r->suspended = true;
            MHD_suspend_connection(r->conn);
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
        pthread_mutex_unlock(&r->mu);
    }
}

static enum MHD_Result finish_blocking(srv *s, conn_ctx *x, struct MHD_Connection *c) {
    sreq *r = x->req;
    for (;;) {
        srv_drain(r);
        if (r->all_finished) break;
        pthread_mutex_lock(&r->mu);
        if (r->http_gone) { /* srv_embed_watch saw the client leave and cancelled it: close */
            pthread_mutex_unlock(&r->mu);
            return MHD_NO;
        }
        if (!r->q_len) {
            r->suspended = true;
            MHD_suspend_connection(c);
            pthread_mutex_unlock(&r->mu);
            return MHD_YES;
        }
        pthread_mutex_unlock(&r->mu);
    }
    (void)s;
    return send_json(x, c, MHD_HTTP_OK, srv_render_final(r));
}

/* the body as a JSON object, or the error sent (413 too big, 400 malformed) */
static cJSON *body_json(srv *s, conn_ctx *x, struct MHD_Connection *c, enum MHD_Result *ret) {
    if (x->too_big) {
        *ret = send_error(s, x, c, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error", NULL, "request_too_large",
                          "request body exceeds %zu bytes", s->p.max_body);
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(x->body ? x->body : "", x->len);
    if (!j) {
        *ret = send_error(s, x, c, 400, "invalid_request_error", NULL, "invalid_json", "malformed JSON body");
        return NULL;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        *ret = send_error(s, x, c, 400, "invalid_request_error", NULL, "invalid_json", "the body must be a JSON object");
        return NULL;
    }
    return j;
}

/* a submission the engine refused: queue full 429, a bad request 400, else 500 */
static enum MHD_Result send_submit_error(srv *s, conn_ctx *x, struct MHD_Connection *c, const kvant_status *st) {
    if (st->code == KVANT_ERR_FULL)
        return send_error(s, x, c, MHD_HTTP_TOO_MANY_REQUESTS, "rate_limit_exceeded", NULL, "queue_full",
                          "the server is busy (request queue full); retry later");
    if (st->code == KVANT_ERR_ARG) return send_error(s, x, c, 400, "invalid_request_error", NULL, NULL, "%s", st->msg);
    return send_error(s, x, c, 500, "server_error", NULL, NULL, "%s", st->msg);
}

/* the body of a request for the engine, or the refusal sent: 413 too big,
 * 503 while the server drains, 400 malformed */
static cJSON *work_body(srv *s, conn_ctx *x, struct MHD_Connection *c, enum MHD_Result *ret) {
    if (x->too_big) return body_json(s, x, c, ret);
    if (atomic_load(&s->draining)) {
        *ret = send_error(s, x, c, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, "shutting_down",
                          "the server is shutting down");
        return NULL;
    }
    return body_json(s, x, c, ret);
}

static enum MHD_Result handle_generate(srv *s, conn_ctx *x, struct MHD_Connection *c, bool chat) {
    enum MHD_Result ret;
    cJSON *j = work_body(s, x, c, &ret);
    if (!j) return ret;
    parsed p = {0};
    verr v = {0};
    if (!(chat ? srv_validate_chat(s, j, &p, &v) : srv_validate_completion(s, j, &p, &v))) {
        ret = send_verr(s, x, c, &v);
        goto out;
    }
    kvant_status st;
    sreq *r = srv_req_submit(s, &p, chat, c, x->t0, &st);
    if (!r) {
        ret = send_submit_error(s, x, c, &st);
        goto out;
    }
    x->req = r;
    if (r->stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r, NULL);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        x->status = 200;
    } else {
        ret = finish_blocking(s, x, c);
    }
out:
    srv_parsed_free(&p);
    cJSON_Delete(j);
    return ret;
}

/* POST /v1/embeddings (embed.c): one engine request per input, batched with
 * the other work; the connection waits suspended, as finish_blocking's,
 * until the engine thread has every vector and resumes it. */
static enum MHD_Result finish_embeddings(srv *s, conn_ctx *x, struct MHD_Connection *c) {
    sreq *r = x->req;
    pthread_mutex_lock(&r->mu);
    if (!r->engine_done) {
        r->suspended = true;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&r->mu);
        return MHD_YES;
    }
    const bool gone = r->http_gone;
    pthread_mutex_unlock(&r->mu);
    if (gone) return MHD_NO; /* srv_embed_watch saw the client leave: close */
    if (r->embed->failed == KVANT_FINISH_CANCELLED) /* srv_reg_cancel_all: the grace period ran out */
        return send_error(s, x, c, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, "shutting_down",
                          "the server is shutting down");
    if (r->embed->failed != KVANT_FINISH_NONE)
        return send_error(s, x, c, 500, "server_error", NULL, NULL, "the engine failed on an input (or its "
                          "embedding is not finite)");
    cJSON *j = srv_render_embeddings(r);
    return j ? send_json(x, c, MHD_HTTP_OK, j) : send_error(s, x, c, 500, "server_error", NULL, NULL, "out of memory");
}

static enum MHD_Result handle_embeddings(srv *s, conn_ctx *x, struct MHD_Connection *c) {
    enum MHD_Result ret;
    cJSON *j = work_body(s, x, c, &ret);
    if (!j) return ret;
    parsed p = {0};
    verr v = {0};
    kvant_status st;
    sreq *r = NULL;
    if (!srv_validate_embeddings(s, j, &p, &v)) ret = send_verr(s, x, c, &v);
    else if (!(r = srv_embed_submit(s, &p, c, x->t0, &st))) ret = send_submit_error(s, x, c, &st);
    else x->req = r, ret = finish_embeddings(s, x, c);
    srv_parsed_free(&p);
    cJSON_Delete(j);
    return ret;
}

/* POST /apply-template (as llama-server): {"messages": [...]} -> {"prompt": "..."},
 * the text /v1/chat/completions would tokenize; "add_generation_prompt"
 * (default true) ends it where the assistant's reply begins. */
static enum MHD_Result handle_apply_template(srv *s, conn_ctx *x, struct MHD_Connection *c) {
    enum MHD_Result ret;
    if (x->too_big) return body_json(s, x, c, &ret), ret;
    cJSON *j = cJSON_ParseWithLength(x->body ? x->body : "", x->len);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return send_error(s, x, c, 400, "invalid_request_error", NULL, "invalid_json", "the body must be a JSON object");
    }
    parsed p = {0};
    verr v = {0};
    if (srv_validate_apply_template(s, j, &p, &v)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "prompt", p.text);
        ret = send_json(x, c, 200, o);
    } else {
        ret = send_verr(s, x, c, &v);
    }
    srv_parsed_free(&p);
    cJSON_Delete(j);
    return ret;
}

/* POST /tokenize {"content", "add_special", "parse_special", "with_pieces"}
 * -> {"tokens": [...]}, and POST /detokenize {"tokens": [...]} ->
 * {"content": "..."}: llama-server's endpoints, keyed as the /v1 endpoints are. */
static enum MHD_Result handle_tokens(srv *s, conn_ctx *x, struct MHD_Connection *c, bool detok) {
    enum MHD_Result ret;
    cJSON *j = body_json(s, x, c, &ret);
    if (!j) return ret;
    parsed p = {0};
    verr v = {0};
    cJSON *o = NULL;
    if (!(detok ? srv_validate_detokenize(s, j, &p, &v) : srv_validate_tokenize(s, j, &p, &v))) {
        ret = send_verr(s, x, c, &v);
        goto out;
    }
    if (detok) {
        o = srv_render_detokenize(s, p.ids, p.n_ids);
    } else {
        const size_t len = strlen(p.text);
        int cap = len < (size_t)INT_MAX / 2 ? (int)len + 8 : 0, n = -1;
        for (int tries = 0; tries < 2 && cap > 0 && n < 0; tries++) {
            free(p.tok);
            if (!(p.tok = malloc((size_t)cap * sizeof *p.tok))) break;
            n = kvant_tokenize_ex(s->m, p.text, len, p.add_special, p.parse_special, p.tok, cap);
            if (n == INT_MIN) break;
            if (n < 0) cap = -n;
        }
        if (n >= 0) o = srv_render_tokens(s, p.tok, n, p.with_pieces);
    }
    ret = o ? send_json(x, c, 200, o) : send_error(s, x, c, 500, "server_error", NULL, NULL, "out of memory");
out:
    srv_parsed_free(&p);
    cJSON_Delete(j);
    return ret;
}

/* ---- routing ------------------------------------------------------------------ */
static bool authorized(srv *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    /* Constant time: every byte of the key is compared, whatever the sent
     * key holds or how long it is (a shorter one is read as NUL-padded, a
     * longer one past the key's length only decides the length check), and
     * nothing branches on a secret byte; the time depends on the key's
     * length and on the length of what was sent, both of which the client
     * knows or may learn (the key's length is not the secret). */
    const size_t n = strlen(s->api_key), hn = strlen(h);
    volatile unsigned char diff = (unsigned char)(hn != n);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)((i < hn ? (unsigned char)h[i] : 0u) ^ (unsigned char)s->api_key[i]);
    return !diff;
}

static enum MHD_Result route_request(srv *s, conn_ctx *x, struct MHD_Connection *c, const char *url,
                                     const char *method) {
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/")) { /* the chat page: open, with or without --api-key */
        if (!get && strcmp(method, "HEAD")) goto method;
        return send_page(s, x, c);
    }
    if (!strcmp(url, "/health")) {
        if (!get) goto method;
        const bool draining = atomic_load(&s->draining);
        return send_text(x, c, draining ? 503 : 200, "application/json",
                         strdup(draining ? "{\"status\":\"shutting_down\"}" : "{\"status\":\"ok\"}"), NULL);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) goto method;
        kvant_engine_stats es;
        kvant_engine_get_stats(s->e, &es);
        char *t = srv_metrics_text(&s->mt, &es);
        if (!t) return MHD_NO;
        return send_text(x, c, 200, "text/plain; version=0.0.4; charset=utf-8", t, NULL);
    }
    const bool v1 = !strncmp(url, "/v1/", 4) || !strcmp(url, "/apply-template") || !strcmp(url, "/tokenize") ||
                    !strcmp(url, "/detokenize");
    if (v1 && !authorized(s, c))
        return send_error(s, x, c, MHD_HTTP_UNAUTHORIZED, "invalid_request_error", NULL, "invalid_api_key",
                          "missing or wrong API key (send 'Authorization: Bearer KEY')");
    if (!strcmp(url, "/v1/models")) {
        if (!get) goto method;
        cJSON *j = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(j, "data"), *o = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "object", "list");
        cJSON_AddStringToObject(o, "id", s->model_id);
        cJSON_AddStringToObject(o, "object", "model");
        cJSON_AddNumberToObject(o, "created", (double)s->t_start);
        cJSON_AddStringToObject(o, "owned_by", "kvant");
        cJSON_AddNumberToObject(o, "max_model_len", s->max_ctx);
        cJSON_AddItemToArray(d, o);
        return send_json(x, c, 200, j);
    }
    if (!strcmp(url, "/apply-template")) {
        if (!post) goto method;
        return handle_apply_template(s, x, c);
    }
    if (!strcmp(url, "/tokenize") || !strcmp(url, "/detokenize")) {
        if (!post) goto method;
        return handle_tokens(s, x, c, url[1] == 'd');
    }
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions")) {
        if (!post) goto method;
        return handle_generate(s, x, c, url[4] == 'c' && url[5] == 'h');
    }
    if (!strcmp(url, "/v1/embeddings")) {
        if (!post) goto method;
        return handle_embeddings(s, x, c);
    }
    return send_error(s, x, c, MHD_HTTP_NOT_FOUND, "invalid_request_error", NULL, "not_found", "no route %s %.200s",
                      method, url);
method:
    return send_error(s, x, c, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error", NULL, "method_not_allowed",
                      "%s is not allowed on %.200s", method, url);
}

static enum MHD_Result ahc(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                           const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn_ctx *x = *con_cls;
    (void)version;
    if (!x) {
        if (!(x = calloc(1, sizeof *x))) return MHD_NO;
        x->t0 = kvant_time_ms();
        *con_cls = x;
        /* A body announced larger than --max-body is 413.  Up to 1 MiB over,
         * it is read and dropped, and the 413 sent after it: a client still
         * sending when the connection closed unread would often get a reset
         * instead of the answer (bench/soak.sh saw curl fail to send, rc 55).
         * More than that, or a client that waits (Expect: 100-continue), gets
         * the 413 now, before the body is read (then the connection closes). */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        const unsigned long long announced = cl ? strtoull(cl, NULL, 10) : 0;
        if (announced > s->p.max_body) {
            x->too_big = true;
            const char *ex = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
            if ((ex && !strcasecmp(ex, "100-continue")) || announced - s->p.max_body > (1u << 20)) {
                enum MHD_Result ret;
                body_json(s, x, c, &ret);
                return ret;
            }
        }
        return MHD_YES;
    }
    if (*upload_size) {
        const size_t n = *upload_size;
        *upload_size = 0;
        if (x->too_big || x->len + n > s->p.max_body) {
            x->too_big = true;
            free(x->body);
            x->body = NULL;
            x->len = x->cap = 0;
            return MHD_YES;
        }
        if (x->len + n + 1 > x->cap) {
            size_t cap = x->cap ? x->cap : 4096;
            while (cap < x->len + n + 1) cap *= 2;
            char *b = realloc(x->body, cap);
            if (!b) return MHD_NO;
            x->body = b;
            x->cap = cap;
        }
        memcpy(x->body + x->len, upload, n);
        x->len += n;
        return MHD_YES;
    }
    if (x->req) /* resumed: more events */
        return x->req->embed ? finish_embeddings(s, x, c) : finish_blocking(s, x, c);
    return route_request(s, x, c, url, method);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    conn_ctx *x = *con_cls;
    (void)c;
    if (!x) return;
    *con_cls = NULL;
    if (s->p.log_requests)
        srv_log(KVANT_LOG_INFO, "%d %.1f ms%s", x->status, kvant_time_ms() - x->t0,
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection ended early)");
    if (x->req) srv_req_hangup(x->req, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    free(x->body);
    free(x);
}

/* ---- start / stop ------------------------------------------------------------- */
srv *srv_start(kvant_model *m, const srv_params *p, kvant_status *st) {
    srv *s = calloc(1, sizeof *s);
    if (!s) {
        st->code = KVANT_ERR_NOMEM;
        snprintf(st->msg, sizeof st->msg, "out of memory");
        return NULL;
    }
    s->m = m;
    s->p = *p;
    if (!s->p.max_body) s->p.max_body = 1 << 20;
    if (s->p.max_conns <= 0) s->p.max_conns = 1000;
    if (s->p.timeout_s <= 0) s->p.timeout_s = 30;
    if (!s->p.default_max_tokens) s->p.default_max_tokens = 16;
    kvant_model_get_info(m, &s->info);
    snprintf(s->model_id, sizeof s->model_id, "%s", p->model_id ? p->model_id : s->info.name);
    s->api_key = p->api_key && p->api_key[0] ? strdup(p->api_key) : NULL;
    s->max_ctx = p->engine.max_ctx > 0 ? p->engine.max_ctx : s->info.n_ctx_train;
    if (p->chat_template) {
        if (kvant_chat_template_by_name(p->chat_template, &s->chat_kind, st)) {
            free(s->api_key);
            free(s);
            return NULL;
        }
    } else {
        s->chat_kind = kvant_chat_detect(m);
    }
    s->t_start = (int64_t)time(NULL);
    srv_ui_etag(s->ui_etag);
    srv_metrics_init(&s->mt);
    pthread_mutex_init(&s->reg_mu, NULL);
    s->evbuf = malloc(SRV_EVENTS * sizeof *s->evbuf);
    s->e = s->evbuf ? kvant_engine_new(m, &p->engine, st) : NULL;
    if (!s->e) {
        free(s->evbuf);
        free(s->api_key);
        free(s);
        return NULL;
    }
    if (pthread_create(&s->engine_thread, NULL, srv_engine_main, s)) {
        kvant_engine_free(s->e);
        free(s->evbuf);
        free(s->api_key);
        free(s);
        st->code = KVANT_ERR_NOMEM;
        snprintf(st->msg, sizeof st->msg, "cannot start the engine thread");
        return NULL;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    const char *host = p->host ? p->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        st->code = KVANT_ERR_ARG;
        snprintf(st->msg, sizeof st->msg, "bad --host '%s' (an IPv4 address, e.g. 127.0.0.1 or 0.0.0.0)", host);
        goto fail;
    }
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC,
                            (uint16_t)p->port, NULL, NULL, ahc, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)s->p.timeout_s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->p.max_conns,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SRV_CONN_MEMORY, MHD_OPTION_END);
    if (!s->d) {
        st->code = KVANT_ERR_IO;
        snprintf(st->msg, sizeof st->msg, "cannot listen on %s:%d (in use?)", host, p->port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : p->port;
    st->code = KVANT_OK;
    return s;
fail:
    atomic_store(&s->engine_stop, 1);
    pthread_join(s->engine_thread, NULL);
    kvant_engine_free(s->e);
    free(s->evbuf);
    free(s->api_key);
    free(s);
    return NULL;
}

int srv_port(const srv *s) { return s->port; }

kvant_chat_template srv_chat_template(const srv *s) { return s->chat_kind; }

void srv_stop(srv *s, int grace_ms) {
    if (!s) return;
    atomic_store(&s->draining, 1);
    /* No new connections: refused from now on (shutdown stops a listening
     * socket and keeps its fd), closed only after MHD_stop_daemon, since
     * libmicrohttpd's thread may still use it (its manual says so; closing
     * it here raced with that thread's epoll_ctl, ThreadSanitizer saw it). */
    const MHD_socket ls = MHD_quiesce_daemon(s->d);
    if (ls != MHD_INVALID_SOCKET) shutdown(ls, SHUT_RDWR);
    double t0 = kvant_time_ms();
    while (srv_reg_count(s) && kvant_time_ms() - t0 < grace_ms) usleep(20000);
    if (srv_reg_count(s)) {
        srv_log(KVANT_LOG_INFO, "cancelling %d requests still running", srv_reg_count(s));
        srv_reg_cancel_all(s);
        t0 = kvant_time_ms();
        while (srv_reg_count(s) && kvant_time_ms() - t0 < 5000) usleep(20000);
    }
    usleep(100000); /* let resumed streams write their last bytes */
    atomic_store(&s->engine_stop, 1);
    pthread_join(s->engine_thread, NULL);
    MHD_stop_daemon(s->d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    kvant_engine_free(s->e);
    free(s->reg);
    free(s->evbuf);
    free(s->api_key);
    free(s);
}
