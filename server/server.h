/* server/ - an OpenAI-compatible HTTP server over the engine API.
 *
 * Uses nothing but the public API (include/kvant_infer.h), libmicrohttpd and cJSON.
 * Threads: libmicrohttpd's one internal polling thread (epoll) runs every
 * handler; connections that wait for tokens are suspended and resumed by
 * the engine thread, which loops kvant_engine_wait / kvant_engine_step and
 * routes each event to its request's queue.  Prefix srv_. */
#ifndef KVANT_SERVER_H
#define KVANT_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "kvant_infer.h"

typedef struct {
    const char *host;       /* NULL: 127.0.0.1 (loopback) */
    int port;               /* 0: any free port (see srv_port) */
    const char *api_key;    /* NULL: no key needed */
    const char *model_id;   /* the id /v1/models lists and requests must name */
    size_t max_body;        /* bytes of a request body (0: 1 MiB); more: 413 */
    int max_conns;          /* connections open at once (0: 1000); more wait unaccepted in the
                               listen backlog until one closes */
    int timeout_s;          /* a connection idle this long (nothing read or written, e.g. a
                               half-sent request) is closed (0: 30 s); a suspended one
                               (waiting for the engine) is not idle */
    int default_max_tokens; /* completions without max_tokens (0: 16, OpenAI's) */
    kvant_engine_params engine;
    bool log_requests;      /* one line per request on the library log */
    const char *chat_template; /* NULL: detected from the model; else a name
                               (kvant_chat_template_by_name; unknown: KVANT_ERR_ARG) */
} srv_params;

typedef struct srv srv;

/* Starts the engine thread and the HTTP daemon.  The model must outlive the
 * server.  NULL + st on failure (port in use: KVANT_ERR_IO). */
srv *srv_start(kvant_model *m, const srv_params *p, kvant_status *st);
int srv_port(const srv *s);
/* Graceful stop: stop accepting connections, let in-flight requests finish
 * for up to grace_ms, cancel the rest (their streams end with finish_reason
 * "abort"), then stop both threads and free everything. */
void srv_stop(srv *s, int grace_ms);

/* The chat template /v1/chat/completions and /apply-template render with:
 * p->chat_template by name, else the model's (kvant_chat_detect). */
kvant_chat_template srv_chat_template(const srv *s);

/* ---- stop strings over streamed text (server/text.c) ---------------------------
 * Text arrives in pieces; srv_text_emittable says how many bytes from `sent`
 * may be shown: none of a stop string (the text stops before it) and none of
 * a possible stop-string start or an incomplete UTF-8 sequence at the end. */
typedef struct {
    char *buf;
    size_t len, cap, sent;  /* bytes held, capacity, bytes already shown */
    bool stopped;           /* a stop string was found; len was cut before it */
} srv_text;
bool srv_text_append(srv_text *t, const char *s, size_t n);
/* Looks for the stop strings in the unsent text (a match may span pieces);
 * on a match cuts the text before it and sets stopped.  Returns the end of
 * what may be sent now (>= t->sent); final: the text is complete (no more
 * withholding). */
size_t srv_text_scan(srv_text *t, const char *const *stops, int n_stops, bool final);
void srv_text_free(srv_text *t);
/* bytes of s[0..n) that form complete UTF-8 sequences at the end */
size_t srv_utf8_complete(const char *s, size_t n);

#endif
