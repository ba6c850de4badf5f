/* http.c - the OpenAI-compatible HTTP front end: libmicrohttpd daemon,
 * request parsing and validation (cJSON), the engine thread, SSE streaming.
 *
 * Flow of a request: the access handler collects the body, validates it,
 * tokenizes, kvant_engine_submit()s and suspends the connection.  The
 * engine thread steps the engine and appends each event to its request's
 * queue (found in the registry by id), resuming the connection when there is
 * something to send.  The resumed handler (or, for streams, the content
 * reader) turns events into text: detokenized, stop strings matched across
 * token boundaries, incomplete UTF-8 withheld.  When the client goes away
 * (libmicrohttpd's completion callback) an unfinished request is cancelled,
 * which frees its KV blocks before the next step. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <netinet/in.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/metrics.h"
#include "server/server.h"
#include "server/ui.h"

#define SRV_MAX_N 16       /* most samples per request */
#define SRV_MAX_STOPS 16
#define SRV_MAX_STOP_LEN 256
#define SRV_EVENTS 4096    /* events taken per engine step call */

typedef struct {
    srv_text text;
    int n_tokens;
    int32_t prev;
    kvant_finish engine_finish;
    const char *reason;     /* finish_reason once finished, else NULL */
    bool reason_sent;
    cJSON *lp;              /* pending logprobs (stream: per chunk; else all) */
} choice;

typedef struct sreq {
    struct srv *s;
    pthread_mutex_t mu;
    int refs;               /* atomic: the connection + the registry */
    int64_t id;
    bool chat, stream, include_usage;
    int n;
    choice ch[SRV_MAX_N];
    char *stops[SRV_MAX_STOPS];
    int n_stops;
    int logprobs;           /* -1: off; else top alternatives per token */
    int n_prompt;
    int32_t last_prompt_tok;
    int64_t created;
    /* engine -> consumer queue (mu) */
    kvant_event *q;
    int q_len, q_cap;
    kvant_event *w;         /* the consumer's batch, swapped with q */
    int w_cap;
    int n_engine_finished;
    bool engine_done, http_gone, suspended, cancel_sent, all_finished;
    struct MHD_Connection *conn;
    double t_arrive, t_first, t_last;
    int gen_total;
    /* SSE bytes not yet handed to libmicrohttpd */
    char *out;
    size_t out_len, out_cap, out_pos;
    bool done_written, role_sent, oom;
} sreq;

typedef struct {
    char *body;
    size_t len, cap;
    bool too_big;
    sreq *req;
    double t0;
    int status;
} conn_ctx;

struct srv {
    kvant_model *m;
    kvant_model_info info;
    kvant_engine *e;
    srv_params p;
    char model_id[256];
    char *api_key;
    int max_ctx;
    kvant_chat_template chat_kind;
    struct MHD_Daemon *d;
    int port;
    pthread_t engine_thread;
    _Atomic int engine_stop;   /* set by the stopping thread, read by the engine loop */
    _Atomic int draining;      /* set on SIGTERM, read by the request threads */
    pthread_mutex_t reg_mu;
    sreq **reg;
    int reg_len, reg_cap;
    srv_metrics mt;
    int64_t t_start;
    uint64_t seed_ctr;
    kvant_event *evbuf;
    char ui_etag[32];          /* the chat page's ETag (server/ui.c) */
};

static void slog(kvant_log_level lvl, const char *fmt, ...) {
    (void)lvl;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "kvant serve: %s\n", line);
}

/* ---- requests: lifetime ------------------------------------------------------ */
static void sreq_unref(sreq *r) {
    if (__atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL)) return;
    for (int i = 0; i < r->n; i++) {
        srv_text_free(&r->ch[i].text);
        cJSON_Delete(r->ch[i].lp);
    }
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->q);
    free(r->w);
    free(r->out);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* ---- engine thread ------------------------------------------------------------- */
static sreq *reg_find(srv *s, int64_t id, int *at) {
    for (int i = 0; i < s->reg_len; i++)
        if (s->reg[i]->id == id) {
            *at = i;
            return s->reg[i];
        }
    return NULL;
}

static void route(srv *s, const kvant_event *evs, int n) {
    const double now = kvant_time_ms();
    pthread_mutex_lock(&s->reg_mu);
    for (int k = 0; k < n; k++) {
        const kvant_event *ev = &evs[k];
        int at;
        sreq *r = reg_find(s, ev->id, &at);
        if (!r) continue;
        pthread_mutex_lock(&r->mu);
        if (ev->token >= 0) {
            if (!r->gen_total) {
                r->t_first = now;
                srv_hist_add(&s->mt, &s->mt.ttft, (now - r->t_arrive) / 1e3);
            }
            r->t_last = now;
            r->gen_total++;
        }
        if (!r->http_gone) {
            if (r->q_len == r->q_cap) {
                int cap = r->q_cap ? r->q_cap * 2 : 64;
                kvant_event *q = realloc(r->q, (size_t)cap * sizeof *q);
                if (q) r->q = q, r->q_cap = cap;
                else r->oom = true;
            }
            if (r->q_len < r->q_cap) r->q[r->q_len++] = *ev;
        }
        bool done = false;
        if (ev->finish != KVANT_FINISH_NONE && ++r->n_engine_finished >= r->n) {
            r->engine_done = done = true;
            s->reg[at] = s->reg[--s->reg_len];
            if (r->gen_total) {
                srv_hist_add(&s->mt, &s->mt.e2e, (now - r->t_arrive) / 1e3);
                if (r->gen_total > r->n)
                    srv_hist_add(&s->mt, &s->mt.tpot, (r->t_last - r->t_first) / 1e3 / (r->gen_total - r->n));
            }
        }
        if (r->suspended && (r->stream || r->n_stops || ev->finish != KVANT_FINISH_NONE)) {
            r->suspended = false;
            MHD_resume_connection(r->conn);
        }
        pthread_mutex_unlock(&r->mu);
        if (done) sreq_unref(r);
    }
    pthread_mutex_unlock(&s->reg_mu);
}

static void *engine_main(void *arg) {
    srv *s = arg;
    kvant_status st;
    while (!atomic_load(&s->engine_stop)) {
        if (!kvant_engine_wait(s->e, 50)) continue;
        const int n = kvant_engine_step(s->e, s->evbuf, SRV_EVENTS, &st);
        if (n < 0) {
            slog(KVANT_LOG_ERROR, "engine step failed: %s", st.msg);
            usleep(10000);
            continue;
        }
        if (n) route(s, s->evbuf, n);
    }
    return NULL;
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

static enum MHD_Result send_error(srv *s, conn_ctx *x, struct MHD_Connection *c, unsigned status, const char *type,
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

/* valid UTF-8 copy (invalid bytes and NUL become U+FFFD) */
static char *utf8_fix(const char *s, size_t n) {
    char *o = malloc(n * 3 + 1), *p = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n;) {
        const unsigned char b = (unsigned char)s[i];
        size_t len = b == 0 ? 0 : b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) ok = ((unsigned char)s[i + k] & 0xC0) == 0x80;
        if (ok && len == 2 && b < 0xC2) ok = false;
        if (ok) {
            memcpy(p, s + i, len);
            p += len;
            i += len;
        } else {
            memcpy(p, "\xEF\xBF\xBD", 3);
            p += 3;
            i++;
        }
    }
    *p = 0;
    return o;
}

static cJSON *str_json(const char *s, size_t n) {
    char *f = utf8_fix(s, n);
    cJSON *j = cJSON_CreateString(f ? f : "");
    free(f);
    return j;
}

/* ---- events -> text ---------------------------------------------------------- */
static void lp_add(sreq *r, choice *c, const kvant_event *ev, int32_t prev, size_t offset) {
    srv *s = r->s;
    char piece[256];
    if (!c->lp) {
        c->lp = cJSON_CreateObject();
        if (r->chat) cJSON_AddArrayToObject(c->lp, "content");
        else {
            cJSON_AddArrayToObject(c->lp, "tokens");
            cJSON_AddArrayToObject(c->lp, "token_logprobs");
            cJSON_AddArrayToObject(c->lp, "top_logprobs");
            cJSON_AddArrayToObject(c->lp, "text_offset");
        }
    }
    int n = kvant_token_to_piece(s->m, prev, ev->token, piece, sizeof piece);
    const int n_top = ev->n_top < r->logprobs ? ev->n_top : r->logprobs;
    if (r->chat) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "token", str_json(piece, (size_t)n));
        cJSON_AddNumberToObject(o, "logprob", ev->logprob);
        cJSON_AddNullToObject(o, "bytes");
        cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int i = 0; i < n_top; i++) {
            cJSON *t = cJSON_CreateObject();
            int m = kvant_token_to_piece(s->m, prev, ev->top_tokens[i], piece, sizeof piece);
            cJSON_AddItemToObject(t, "token", str_json(piece, (size_t)m));
            cJSON_AddNumberToObject(t, "logprob", ev->top_logprobs[i]);
            cJSON_AddNullToObject(t, "bytes");
            cJSON_AddItemToArray(tops, t);
        }
        cJSON_AddItemToArray(cJSON_GetObjectItem(c->lp, "content"), o);
    } else {
        cJSON_AddItemToArray(cJSON_GetObjectItem(c->lp, "tokens"), str_json(piece, (size_t)n));
        cJSON_AddItemToArray(cJSON_GetObjectItem(c->lp, "token_logprobs"), cJSON_CreateNumber(ev->logprob));
        cJSON *tops = cJSON_CreateObject();
        for (int i = 0; i < n_top; i++) {
            int m = kvant_token_to_piece(s->m, prev, ev->top_tokens[i], piece, sizeof piece);
            char *k = utf8_fix(piece, (size_t)m);
            if (k && !cJSON_GetObjectItem(tops, k)) cJSON_AddNumberToObject(tops, k, ev->top_logprobs[i]);
            free(k);
        }
        cJSON_AddItemToArray(cJSON_GetObjectItem(c->lp, "top_logprobs"), tops);
        cJSON_AddItemToArray(cJSON_GetObjectItem(c->lp, "text_offset"), cJSON_CreateNumber((double)offset));
    }
}

static const char *finish_name(kvant_finish f) {
    switch (f) {
    case KVANT_FINISH_LENGTH: return "length";
    case KVANT_FINISH_EOS: return "stop";
    case KVANT_FINISH_CANCELLED: return "abort";
    default: return "error";
    }
}

static void out_put(sreq *r, const char *s, size_t n) {
    if (r->out_len + n > r->out_cap) {
        size_t cap = r->out_cap ? r->out_cap : 1024;
        while (cap < r->out_len + n) cap *= 2;
        char *p = realloc(r->out, cap);
        if (!p) {
            r->oom = true;
            return;
        }
        r->out = p;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, s, n);
    r->out_len += n;
}

static void sse_put(sreq *r, cJSON *j) {
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!t) {
        r->oom = true;
        return;
    }
    out_put(r, "data: ", 6);
    out_put(r, t, strlen(t));
    out_put(r, "\n\n", 2);
    free(t);
}

static cJSON *chunk_head(sreq *r) {
    cJSON *j = cJSON_CreateObject();
    char id[64];
    snprintf(id, sizeof id, "%s-%lld", r->chat ? "chatcmpl" : "cmpl", (long long)r->id);
    cJSON_AddStringToObject(j, "id", id);
    cJSON_AddStringToObject(j, "object", r->chat ? (r->stream ? "chat.completion.chunk" : "chat.completion")
                                                 : "text_completion");
    cJSON_AddNumberToObject(j, "created", (double)r->created);
    cJSON_AddStringToObject(j, "model", r->s->model_id);
    return j;
}

static cJSON *usage_json(sreq *r) {
    int gen = 0;
    for (int i = 0; i < r->n; i++) gen += r->ch[i].n_tokens;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", gen);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + gen);
    return u;
}

/* Advances choice i's text past what arrived: stop strings, finish reason;
 * for streams appends one SSE chunk with the new text. */
static void advance(sreq *r, int i) {
    choice *c = &r->ch[i];
    if (c->reason) return;
    const bool final = c->engine_finish != KVANT_FINISH_NONE;
    const size_t end = srv_text_scan(&c->text, (const char *const *)r->stops, r->n_stops, final);
    if (c->text.stopped) c->reason = "stop";
    else if (final) c->reason = finish_name(c->engine_finish);
    if (!r->stream) {
        c->text.sent = end;
        return;
    }
    if (end == c->text.sent && !c->lp && !c->reason) return;
    cJSON *j = chunk_head(r), *arr = cJSON_AddArrayToObject(j, "choices"), *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", i);
    cJSON *txt = str_json(c->text.buf ? c->text.buf + c->text.sent : "", end - c->text.sent);
    if (r->chat) {
        cJSON *d = cJSON_AddObjectToObject(o, "delta");
        if (!r->role_sent) cJSON_AddStringToObject(d, "role", "assistant");
        if (end > c->text.sent || !c->reason) cJSON_AddItemToObject(d, "content", txt);
        else cJSON_Delete(txt);
    } else
        cJSON_AddItemToObject(o, "text", txt);
    if (c->lp) cJSON_AddItemToObject(o, "logprobs", c->lp), c->lp = NULL;
    else cJSON_AddNullToObject(o, "logprobs");
    if (c->reason) cJSON_AddStringToObject(o, "finish_reason", c->reason), c->reason_sent = true;
    else cJSON_AddNullToObject(o, "finish_reason");
    cJSON_AddItemToArray(arr, o);
    sse_put(r, j);
    r->role_sent = r->n == 1; /* with n > 1 every choice's first chunk names the role */
    c->text.sent = end;
}

/* Takes the queued events and advances every choice's text; for streams,
 * appends SSE chunks to r->out (one per token, and [DONE] at the end). */
static void drain(sreq *r) {
    srv *s = r->s;
    pthread_mutex_lock(&r->mu);
    kvant_event *evs = r->q;
    const int n_ev = r->q_len;
    r->q = r->w;
    const int qc = r->q_cap;
    r->q_cap = r->w_cap;
    r->w = evs;
    r->w_cap = qc;
    r->q_len = 0;
    const bool oom = r->oom;
    pthread_mutex_unlock(&r->mu);

    bool touched[SRV_MAX_N] = {0};
    for (int k = 0; k < n_ev; k++) {
        const kvant_event *ev = &evs[k];
        if (ev->index < 0 || ev->index >= r->n) continue;
        choice *c = &r->ch[ev->index];
        if (c->reason) continue;
        touched[ev->index] = true;
        if (ev->token >= 0) {
            char piece[256];
            const int len = kvant_token_to_piece(s->m, c->prev, ev->token, piece, sizeof piece);
            if (r->logprobs >= 0) lp_add(r, c, ev, c->prev, c->text.len);
            srv_text_append(&c->text, piece, (size_t)(len > 0 ? len : 0));
            c->prev = ev->token;
            c->n_tokens++;
        }
        if (ev->finish != KVANT_FINISH_NONE) c->engine_finish = ev->finish;
        if (r->stream) advance(r, ev->index);
    }
    if (oom)
        for (int i = 0; i < r->n; i++)
            if (!r->ch[i].reason) r->ch[i].engine_finish = KVANT_FINISH_ERROR, touched[i] = true;
    bool all = true;
    for (int i = 0; i < r->n; i++) {
        if (touched[i]) advance(r, i);
        if (!r->ch[i].reason) all = false;
    }
    if (all && !r->all_finished) {
        r->all_finished = true;
        pthread_mutex_lock(&r->mu);
        const bool cancel = !r->engine_done && !r->cancel_sent;
        r->cancel_sent = true;
        pthread_mutex_unlock(&r->mu);
        if (cancel) kvant_engine_cancel(s->e, r->id); /* stop strings: free the blocks now */
        int gen = 0;
        for (int i = 0; i < r->n; i++) gen += r->ch[i].n_tokens;
        pthread_mutex_lock(&s->mt.mu);
        s->mt.req_ok++;
        s->mt.prompt_tokens += (uint64_t)r->n_prompt;
        s->mt.gen_tokens += (uint64_t)gen;
        pthread_mutex_unlock(&s->mt.mu);
        if (r->stream) {
            if (r->include_usage) {
                cJSON *j = chunk_head(r);
                cJSON_AddArrayToObject(j, "choices");
                cJSON_AddItemToObject(j, "usage", usage_json(r));
                sse_put(r, j);
            }
            out_put(r, "data: [DONE]\n\n", 14);
        }
    }
}

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
        drain(r);
        if (r->out_len || r->all_finished) continue;
        pthread_mutex_lock(&r->mu);
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
        drain(r);
        if (r->all_finished) break;
        pthread_mutex_lock(&r->mu);
        if (!r->q_len) {
            r->suspended = true;
            MHD_suspend_connection(c);
            pthread_mutex_unlock(&r->mu);
            return MHD_YES;
        }
        pthread_mutex_unlock(&r->mu);
    }
    cJSON *j = chunk_head(r), *arr = cJSON_AddArrayToObject(j, "choices");
    for (int i = 0; i < r->n; i++) {
        choice *ch = &r->ch[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", i);
        cJSON *txt = str_json(ch->text.buf ? ch->text.buf : "", ch->text.len);
        if (r->chat) {
            cJSON *msg = cJSON_AddObjectToObject(o, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddItemToObject(msg, "content", txt);
        } else
            cJSON_AddItemToObject(o, "text", txt);
        if (ch->lp) cJSON_AddItemToObject(o, "logprobs", ch->lp), ch->lp = NULL;
        else cJSON_AddNullToObject(o, "logprobs");
        cJSON_AddStringToObject(o, "finish_reason", ch->reason);
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_AddItemToObject(j, "usage", usage_json(r));
    return send_json(x, c, MHD_HTTP_OK, j);
}

/* ---- request parsing ---------------------------------------------------------- */
typedef struct {
    const char *param;
    char msg[256];
} verr;

static bool bad(verr *v, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof v->msg, fmt, ap);
    va_end(ap);
    v->param = param;
    return false;
}

/* number field: absent/null keeps *out; wrong type or range is an error */
static bool get_num(cJSON *j, const char *name, double lo, double hi, bool integer, double *out, verr *v) {
    cJSON *f = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsNumber(f)) return bad(v, name, "'%s' must be a number", name);
    const double x = f->valuedouble;
    if (integer && x != (double)(int64_t)x) return bad(v, name, "'%s' must be an integer", name);
    if (!(x >= lo && x <= hi)) return bad(v, name, "'%s' must be in [%g, %g], got %g", name, lo, hi, x);
    *out = x;
    return true;
}

static bool get_bool(cJSON *j, const char *name, bool *out, verr *v) {
    cJSON *f = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsBool(f)) return bad(v, name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(f);
    return true;
}

typedef struct {
    char *text;             /* prompt text (malloc'd) or NULL when ids */
    int32_t *ids;           /* token ids given directly */
    int n_ids;
    kvant_request req;
    bool stream, include_usage;
    int logprobs;
    char *stops[SRV_MAX_STOPS];
    int n_stops;
    bool has_max_tokens;
} parsed;

static void parsed_free(parsed *p) {
    free(p->text);
    free(p->ids);
    for (int i = 0; i < p->n_stops; i++) free(p->stops[i]);
}

static bool parse_common(srv *s, cJSON *j, bool chat, parsed *p, verr *v) {
    double x;
    kvant_sampling *sp = &p->req.sampling;
    *sp = kvant_sampling_default();
    sp->temperature = 1.0f, sp->top_k = 0, sp->top_p = 1.0f, sp->min_p = 0.0f, sp->repeat_penalty = 1.0f;
    sp->seed = (uint64_t)time(NULL) * 6364136223846793005ULL + __atomic_add_fetch(&s->seed_ctr, 1, __ATOMIC_RELAXED);
    p->req.n = 1;
    p->logprobs = -1;
    x = -1;
    if (!get_num(j, chat ? "max_completion_tokens" : "max_tokens", 1, 1e9, true, &x, v)) return false;
    if (!get_num(j, "max_tokens", 1, 1e9, true, &x, v)) return false;
    if (x > 0) p->req.max_tokens = (int)x, p->has_max_tokens = true;
    x = sp->temperature;
    if (!get_num(j, "temperature", 0, 2, false, &x, v)) return false;
    sp->temperature = (float)x;
    x = sp->top_p;
    if (!get_num(j, "top_p", 0, 1, false, &x, v)) return false;
    sp->top_p = x > 0 ? (float)x : 1.0f;
    x = 0;
    if (!get_num(j, "top_k", -1, 1e6, true, &x, v)) return false;
    sp->top_k = x > 0 ? (int)x : 0;
    x = 0;
    if (!get_num(j, "min_p", 0, 1, false, &x, v)) return false;
    sp->min_p = (float)x;
    x = 1;
    if (!get_num(j, "repetition_penalty", 0.01, 10, false, &x, v)) return false;
    sp->repeat_penalty = (float)x;
    x = -1;
    if (!get_num(j, "seed", -9.2e18, 9.2e18, true, &x, v)) return false;
    if (x != -1) sp->seed = (uint64_t)(int64_t)x;
    x = 1;
    if (!get_num(j, "n", 1, SRV_MAX_N, true, &x, v)) return false;
    p->req.n = (int)x;
    for (const char **pn = (const char *[]){"presence_penalty", "frequency_penalty", NULL}; *pn; pn++) {
        x = 0;
        if (!get_num(j, *pn, -2, 2, false, &x, v)) return false;
    }
    if (!get_bool(j, "stream", &p->stream, v)) return false;
    if (!get_bool(j, "ignore_eos", &p->req.ignore_eos, v)) return false;
    cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return bad(v, "stream_options", "'stream_options' must be an object");
        if (!get_bool(so, "include_usage", &p->include_usage, v)) return false;
    }
    if (chat) {
        bool lp = false;
        if (!get_bool(j, "logprobs", &lp, v)) return false;
        x = 0;
        if (!get_num(j, "top_logprobs", 0, KVANT_MAX_LOGPROBS, true, &x, v)) return false;
        if (lp) p->logprobs = (int)x;
    } else {
        x = -1;
        if (!get_num(j, "logprobs", 0, KVANT_MAX_LOGPROBS, true, &x, v)) return false;
        p->logprobs = (int)x;
    }
    if (p->logprobs >= 0) p->req.logprobs = p->logprobs > 0 ? p->logprobs : 1;
    cJSON *stop = cJSON_GetObjectItemCaseSensitive(j, "stop");
    if (stop && !cJSON_IsNull(stop)) {
        cJSON *one = cJSON_IsString(stop) ? stop : NULL;
        if (!one && !cJSON_IsArray(stop)) return bad(v, "stop", "'stop' must be a string or an array of strings");
        const int n = one ? 1 : cJSON_GetArraySize(stop);
        if (n > SRV_MAX_STOPS) return bad(v, "stop", "at most %d stop strings", SRV_MAX_STOPS);
        for (int i = 0; i < n; i++) {
            cJSON *e = one ? one : cJSON_GetArrayItem(stop, i);
            if (!cJSON_IsString(e)) return bad(v, "stop", "'stop' must be a string or an array of strings");
            const size_t len = strlen(e->valuestring);
            if (!len || len > SRV_MAX_STOP_LEN)
                return bad(v, "stop", "stop strings must have 1 to %d bytes", SRV_MAX_STOP_LEN);
            p->stops[p->n_stops++] = strdup(e->valuestring);
        }
    }
    cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model))
        return bad(v, "model", "'model' must be a string");
    return true;
}

static bool parse_prompt(srv *s, cJSON *j, parsed *p, verr *v) {
    cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    if (!pr) return bad(v, "prompt", "'prompt' is required");
    if (cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == 1 && !cJSON_IsNumber(cJSON_GetArrayItem(pr, 0)))
        pr = cJSON_GetArrayItem(pr, 0); /* ["text"] or [[ids]] */
    if (cJSON_IsString(pr)) {
        if (!pr->valuestring[0]) return bad(v, "prompt", "'prompt' is empty");
        p->text = strdup(pr->valuestring);
        return true;
    }
    if (cJSON_IsArray(pr)) {
        const int n = cJSON_GetArraySize(pr);
        if (!n) return bad(v, "prompt", "'prompt' is empty");
        if (cJSON_IsString(cJSON_GetArrayItem(pr, 0)) || cJSON_IsArray(cJSON_GetArrayItem(pr, 0)))
            return bad(v, "prompt", "one prompt per request (got %d)", n);
        if (n > s->max_ctx) return bad(v, "prompt", "the prompt has %d tokens; the context holds %d", n, s->max_ctx);
        p->ids = malloc((size_t)n * sizeof *p->ids);
        if (!p->ids) return bad(v, "prompt", "out of memory");
        for (int i = 0; i < n; i++) {
            cJSON *e = cJSON_GetArrayItem(pr, i);
            if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int)e->valuedouble || e->valueint < 0 ||
                e->valueint >= s->info.vocab_size)
                return bad(v, "prompt", "token ids must be integers in [0, %d)", s->info.vocab_size);
            p->ids[i] = e->valueint;
        }
        p->n_ids = n;
        return true;
    }
    return bad(v, "prompt", "'prompt' must be a string, an array of token ids or an array of one string");
}

static bool parse_messages(srv *s, cJSON *j, parsed *p, verr *v, bool add_assistant) {
    cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "messages");
    if (!ms) return bad(v, "messages", "'messages' is required");
    if (!cJSON_IsArray(ms)) return bad(v, "messages", "'messages' must be an array");
    const int n = cJSON_GetArraySize(ms);
    if (!n) return bad(v, "messages", "'messages' is empty");
    if (n > 4096) return bad(v, "messages", "too many messages");
    kvant_chat_msg *msg = calloc((size_t)n, sizeof *msg);
    char **own = calloc((size_t)n, sizeof *own);
    bool ok = msg && own, any = false;
    for (int i = 0; ok && i < n; i++) {
        cJSON *m = cJSON_GetArrayItem(ms, i);
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            ok = bad(v, "messages", "messages[%d] needs a string 'role'", i);
            break;
        }
        if (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "user") &&
            strcmp(role->valuestring, "assistant") && strcmp(role->valuestring, "developer")) {
            ok = bad(v, "messages", "messages[%d]: unknown role '%.32s'", i, role->valuestring);
            break;
        }
        msg[i].role = strcmp(role->valuestring, "developer") ? role->valuestring : "system";
        if (cJSON_IsString(content)) {
            msg[i].content = content->valuestring;
        } else if (cJSON_IsArray(content)) { /* [{"type":"text","text":...}, ...] */
            size_t len = 0;
            cJSON *part;
            cJSON_ArrayForEach(part, content) {
                cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsString(t)) {
                    ok = bad(v, "messages", "messages[%d]: only text content parts are supported", i);
                    break;
                }
                len += strlen(t->valuestring);
            }
            if (!ok) break;
            char *buf = own[i] = malloc(len + 1);
            if (!buf) { ok = bad(v, "messages", "out of memory"); break; }
            buf[0] = 0;
            cJSON_ArrayForEach(part, content) strcat(buf, cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring);
            msg[i].content = buf;
        } else {
            ok = bad(v, "messages", "messages[%d] needs a string 'content'", i);
            break;
        }
        if (msg[i].content[0]) any = true;
    }
    if (ok && !any) ok = bad(v, "messages", "every message is empty");
    kvant_status st;
    if (ok && !(p->text = kvant_chat_render(s->chat_kind, msg, n, add_assistant, &st))) ok = bad(v, "messages", "%s", st.msg);
    for (int i = 0; own && i < n; i++) free(own[i]);
    free(own);
    free(msg);
    return ok;
}

static enum MHD_Result handle_generate(srv *s, conn_ctx *x, struct MHD_Connection *c, bool chat) {
    if (x->too_big)
        return send_error(s, x, c, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error", NULL, "request_too_large",
                          "request body exceeds %zu bytes", s->p.max_body);
    if (atomic_load(&s->draining))
        return send_error(s, x, c, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, "shutting_down",
                          "the server is shutting down");
    cJSON *j = cJSON_ParseWithLength(x->body ? x->body : "", x->len);
    if (!j) return send_error(s, x, c, 400, "invalid_request_error", NULL, "invalid_json", "malformed JSON body");
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return send_error(s, x, c, 400, "invalid_request_error", NULL, "invalid_json", "the body must be a JSON object");
    }
    parsed p = {0};
    verr v = {0};
    enum MHD_Result ret;
    int32_t *tok = NULL;
    bool ok = parse_common(s, j, chat, &p, &v) && (chat ? parse_messages(s, j, &p, &v, true) : parse_prompt(s, j, &p, &v));
    cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (ok && cJSON_IsString(model) && strcmp(model->valuestring, s->model_id)) {
        ret = send_error(s, x, c, MHD_HTTP_NOT_FOUND, "invalid_request_error", "model", "model_not_found",
                         "the model '%.200s' does not exist (this server has '%s')", model->valuestring, s->model_id);
        goto out;
    }
    if (!ok) {
        ret = send_error(s, x, c, 400, "invalid_request_error", v.param, NULL, "%s", v.msg);
        goto out;
    }
    int n_prompt = p.n_ids;
    if (p.text) { /* tokenize with BOS (chat: special tokens too, BOS not doubled); more than the context is an error */
        tok = malloc((size_t)(s->max_ctx + 1) * sizeof *tok);
        if (!tok) {
            ret = send_error(s, x, c, 500, "server_error", NULL, NULL, "out of memory");
            goto out;
        }
        n_prompt = chat ? kvant_chat_tokenize(s->m, p.text, strlen(p.text), tok, s->max_ctx + 1)
                        : kvant_tokenize(s->m, p.text, strlen(p.text), true, tok, s->max_ctx + 1);
        if (n_prompt == INT_MIN) {
            ret = send_error(s, x, c, 500, "server_error", NULL, NULL, "out of memory");
            goto out;
        }
        if (n_prompt < 0) n_prompt = -n_prompt;
    } else
        tok = p.ids, p.ids = NULL;
    if (n_prompt >= s->max_ctx) {
        ret = send_error(s, x, c, 400, "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded",
                         "the prompt has %d tokens; the context holds %d, with room for at least one new token",
                         n_prompt, s->max_ctx);
        goto out;
    }
    if (!p.has_max_tokens) {
        const int def = chat ? s->max_ctx : s->p.default_max_tokens;
        p.req.max_tokens = s->max_ctx - n_prompt < def ? s->max_ctx - n_prompt : def;
    } else if (n_prompt + p.req.max_tokens > s->max_ctx) {
        ret = send_error(s, x, c, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                         "max_tokens %d + %d prompt tokens exceed the context of %d tokens", p.req.max_tokens,
                         n_prompt, s->max_ctx);
        goto out;
    }
    sreq *r = calloc(1, sizeof *r);
    if (!r) {
        ret = send_error(s, x, c, 500, "server_error", NULL, NULL, "out of memory");
        goto out;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->s = s;
    r->refs = 2;
    r->chat = chat;
    r->stream = p.stream;
    r->include_usage = p.include_usage;
    r->n = p.req.n;
    r->logprobs = p.logprobs;
    r->n_prompt = n_prompt;
    r->last_prompt_tok = tok[n_prompt - 1];
    for (int i = 0; i < r->n; i++) r->ch[i].prev = tok[n_prompt - 1];
    memcpy(r->stops, p.stops, sizeof p.stops);
    r->n_stops = p.n_stops;
    p.n_stops = 0;
    r->conn = c;
    r->created = (int64_t)time(NULL);
    r->t_arrive = x->t0;
    kvant_status st;
    pthread_mutex_lock(&s->reg_mu);
    if (s->reg_len == s->reg_cap) {
        int cap = s->reg_cap ? s->reg_cap * 2 : 64;
        sreq **reg = realloc(s->reg, (size_t)cap * sizeof *reg);
        if (reg) s->reg = reg, s->reg_cap = cap;
    }
    r->id = s->reg_len < s->reg_cap ? kvant_engine_submit(s->e, tok, n_prompt, &p.req, &st) : -1;
    if (r->id > 0) s->reg[s->reg_len++] = r;
    pthread_mutex_unlock(&s->reg_mu);
    if (r->id <= 0) {
        r->refs = 1;
        sreq_unref(r);
        if (st.code == KVANT_ERR_FULL)
            ret = send_error(s, x, c, MHD_HTTP_TOO_MANY_REQUESTS, "rate_limit_exceeded", NULL, "queue_full",
                             "the server is busy (request queue full); retry later");
        else if (st.code == KVANT_ERR_ARG)
            ret = send_error(s, x, c, 400, "invalid_request_error", NULL, NULL, "%s", st.msg);
        else
            ret = send_error(s, x, c, 500, "server_error", NULL, NULL, "%s", st.msg);
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
    free(tok);
    parsed_free(&p);
    cJSON_Delete(j);
    return ret;
}

/* POST /apply-template (as llama-server): {"messages": [...]} -> {"prompt": "..."},
 * the text /v1/chat/completions would tokenize; "add_generation_prompt"
 * (default true) ends it where the assistant's reply begins. */
static enum MHD_Result handle_apply_template(srv *s, conn_ctx *x, struct MHD_Connection *c) {
    if (x->too_big)
        return send_error(s, x, c, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error", NULL, "request_too_large",
                          "request body exceeds %zu bytes", s->p.max_body);
    cJSON *j = cJSON_ParseWithLength(x->body ? x->body : "", x->len);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return send_error(s, x, c, 400, "invalid_request_error", NULL, "invalid_json", "the body must be a JSON object");
    }
    parsed p = {0};
    verr v = {0};
    bool add = true;
    enum MHD_Result ret;
    if (get_bool(j, "add_generation_prompt", &add, &v) && parse_messages(s, j, &p, &v, add)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "prompt", p.text);
        ret = send_json(x, c, 200, o);
    } else {
        ret = send_error(s, x, c, 400, "invalid_request_error", v.param, NULL, "%s", v.msg);
    }
    parsed_free(&p);
    cJSON_Delete(j);
    return ret;
}

/* ---- routing ------------------------------------------------------------------ */
static bool authorized(srv *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    const size_t n = strlen(s->api_key);
    if (strlen(h) != n) return false;
    unsigned char diff = 0; /* constant time in the key's length */
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(h[i] ^ s->api_key[i]);
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
    const bool v1 = !strncmp(url, "/v1/", 4) || !strcmp(url, "/apply-template");
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
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions")) {
        if (!post) goto method;
        return handle_generate(s, x, c, url[4] == 'c' && url[5] == 'h');
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
    if (x->req) return finish_blocking(s, x, c); /* resumed: more events */
    return route_request(s, x, c, url, method);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    conn_ctx *x = *con_cls;
    (void)c;
    if (!x) return;
    *con_cls = NULL;
    if (s->p.log_requests)
        slog(KVANT_LOG_INFO, "%d %.1f ms%s", x->status, kvant_time_ms() - x->t0,
             toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection ended early)");
    if (x->req) {
        sreq *r = x->req;
        pthread_mutex_lock(&r->mu);
        r->http_gone = true;
        r->q_len = 0;
        const bool cancel = !r->engine_done && !r->cancel_sent;
        r->cancel_sent = true;
        pthread_mutex_unlock(&r->mu);
        if (cancel) {
            kvant_engine_cancel(s->e, r->id); /* client gone: free its blocks now */
            pthread_mutex_lock(&s->mt.mu);
            s->mt.req_cancelled++;
            pthread_mutex_unlock(&s->mt.mu);
        }
        sreq_unref(r);
    }
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
    if (pthread_create(&s->engine_thread, NULL, engine_main, s)) {
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
                            (unsigned)120, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000, MHD_OPTION_END);
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

static int reg_count(srv *s) {
    pthread_mutex_lock(&s->reg_mu);
    const int n = s->reg_len;
    pthread_mutex_unlock(&s->reg_mu);
    return n;
}

void srv_stop(srv *s, int grace_ms) {
    if (!s) return;
    atomic_store(&s->draining, 1);
    const MHD_socket ls = MHD_quiesce_daemon(s->d); /* no new connections */
    if (ls != MHD_INVALID_SOCKET) close(ls);
    double t0 = kvant_time_ms();
    while (reg_count(s) && kvant_time_ms() - t0 < grace_ms) usleep(20000);
    if (reg_count(s)) {
        slog(KVANT_LOG_INFO, "cancelling %d requests still running", reg_count(s));
        pthread_mutex_lock(&s->reg_mu);
        for (int i = 0; i < s->reg_len; i++) kvant_engine_cancel(s->e, s->reg[i]->id);
        pthread_mutex_unlock(&s->reg_mu);
        t0 = kvant_time_ms();
        while (reg_count(s) && kvant_time_ms() - t0 < 5000) usleep(20000);
    }
    usleep(100000); /* let resumed streams write their last bytes */
    atomic_store(&s->engine_stop, 1);
    pthread_join(s->engine_thread, NULL);
    MHD_stop_daemon(s->d);
    kvant_engine_free(s->e);
    free(s->reg);
    free(s->evbuf);
    free(s->api_key);
    free(s);
}
