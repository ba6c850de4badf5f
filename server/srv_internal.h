/* srv_internal.h - what the server's files share, internal to server/
 * (server.h is what the rest of kvant sees).
 *
 * One file per job:
 *   http.c         libmicrohttpd: callbacks, routing, API key, the send
 *                  helpers, the chat page, start / stop;
 *   validate.c     a JSON body -> a parsed request (one function per
 *                  endpoint), every field checked, prompt tokenized;
 *   engine_loop.c  requests' lifetime, submission, the engine thread that
 *                  steps the engine and routes events to their requests;
 *   render.c       events -> text (stop strings, UTF-8) -> the response
 *                  JSON and SSE chunks: completion and chat bodies, chunks,
 *                  logprobs, usage;
 *   embed.c        POST /v1/embeddings: its validation, its submission (one
 *                  engine request per input, all waited for by one sreq),
 *                  the vectors' arrival and the response body.
 *
 * Flow of a request: the access handler collects the body, validates it
 * (which tokenizes), submits it to the engine and suspends the connection.
 * The engine thread steps the engine and appends each event to its
 * request's queue (found in the registry by id), resuming the connection
 * when there is something to send.  The resumed handler (or, for streams,
 * the content reader) drains the queue into text: detokenized, stop strings
 * matched across token boundaries, incomplete UTF-8 withheld.  When the
 * client goes away (libmicrohttpd's completion callback) an unfinished
 * request is cancelled, which frees its KV blocks before the next step. */
#ifndef KVANT_SERVER_INTERNAL_H
#define KVANT_SERVER_INTERNAL_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "server/metrics.h"
#include "server/server.h"

#define SRV_MAX_N 16       /* most samples per request */
#define SRV_MAX_STOPS 4    /* OpenAI's limit */
#define SRV_MAX_STOP_LEN 256
#define SRV_EVENTS 4096    /* events taken per engine step call */
#define SRV_MAX_EMBED_INPUTS 256 /* inputs per /v1/embeddings request */
/* The limits on what a client controls (README, "Limits", has the table) */
#define SRV_MAX_MESSAGES 4096    /* messages per chat request */
#define SRV_MAX_TOOLS 128        /* tools per chat request */
#define SRV_MAX_LOGIT_BIAS 1024  /* logit_bias entries */
#define SRV_MAX_GRAMMAR_BYTES (64 * 1024) /* a GBNF grammar, or a JSON schema as compact JSON text */
#define SRV_MAX_SCHEMA_DEPTH 64  /* JSON nesting of a schema (response_format, json_schema, tool parameters) */
/* libmicrohttpd's memory per connection: the request line and headers must
 * fit in it with room to spare (a larger header gets 431, a longer URL 414,
 * from libmicrohttpd itself); a streamed response's buffer comes from it too */
#define SRV_CONN_MEMORY (32 * 1024)

/* one of a request's n samples, as the consumer sees it */
typedef struct {
    srv_text text;
    int n_tokens;
    int32_t prev;
    kvant_finish engine_finish;
    const char *reason;     /* finish_reason once finished, else NULL */
    bool reason_sent;
    bool echo_unsent;       /* the echoed prompt at the start of text is not streamed yet */
    cJSON *lp;              /* pending logprobs (stream: per chunk; else all) */
    double lp_sum;          /* sum of the tokens' logprobs (best_of ranks by the mean) */
    bool in_call;           /* tools: the reply has begun a tool call (content held, stops no longer matched) */
} choice;

/* An embeddings request's engine side (sreq.embed): one engine request per
 * input, submitted in order under the registry lock (so ids increase); the
 * engine thread copies each vector in as its event is routed (under the
 * sreq's mu), the handler renders them once all have arrived. */
typedef struct {
    int n;                  /* inputs = engine requests */
    int64_t *ids;           /* [n] their engine ids, increasing */
    int *n_tok;             /* [n] tokens of each input */
    int dim;
    float *vec;             /* [n][dim], filled as the events arrive */
    int n_vec;              /* vectors arrived */
    kvant_finish failed;    /* an input ended without a vector: CANCELLED / ERROR (NONE: none) */
    bool base64;            /* encoding_format "base64" */
    int n_tokens;           /* all inputs' tokens (usage) */
    int fd;                 /* the connection's socket (srv_embed_watch) */
} srv_embed;

/* A request between submission and its last byte.  Two references: the
 * connection's (conn_ctx.req) and the registry's (until the engine reports
 * every sample finished).  The queue fields are the engine thread's and the
 * consumer's (under mu); the rest belongs to the consumer (the
 * connection's handler / content reader). */
typedef struct sreq {
    struct srv *s;
    pthread_mutex_t mu;
    int refs;               /* atomic: the connection + the registry */
    int64_t id;
    bool chat, stream, include_usage;
    bool tools;             /* chat: read each reply for tool calls (render.c) */
    uint64_t tool_seed;     /* the calls' ids: from it and the choice's index */
    int n;                  /* samples the engine generates (best_of); 0 for embeddings */
    srv_embed *embed;       /* POST /v1/embeddings (NULL: a generation) */
    int fd;                 /* the connection's socket, peeked at while suspended (srv_embed_watch) */
    bool counted;           /* its outcome is in kvant_requests_total (mu) */
    int n_return;           /* choices in the response: the n_return best (all when equal) */
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

/* per connection: the body as it arrives, then its request */
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
    double embed_watch_ms;     /* the engine thread's last srv_embed_watch */
};

/* A refused request: the HTTP status (400 unless set), the field it names
 * (param, NULL: none), OpenAI's error code (NULL: none) and the message. */
typedef struct {
    int status;
    const char *param;
    const char *code;
    char msg[512];
} verr;

/* Fills v with the message and the field it names; returns false (the
 * validators' "refused").  validate.c. */
bool srv_bad(verr *v, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A validated request, ready to submit (generation) or to answer. */
typedef struct {
    char *text;             /* prompt text (malloc'd) or NULL when ids; /tokenize: the content */
    int32_t *ids;           /* token ids given directly; /detokenize: the tokens */
    int n_ids;
    int32_t *tok;           /* the prompt's tokens (malloc'd), n_prompt of them */
    int n_prompt;
    kvant_request req;      /* req.n: samples generated (best_of) */
    int n_return;           /* samples returned (n <= best_of): the best by mean logprob */
    bool stream, include_usage;
    int logprobs;           /* -1: off; else top alternatives per token */
    char *stops[SRV_MAX_STOPS];
    int n_stops;
    bool has_max_tokens;
    const char *max_name;   /* "max_tokens" or "max_completion_tokens", for errors */
    bool tool_calls;        /* chat: tools given and tool_choice not "none": read the replies for calls */
    kvant_logit_bias *bias; /* req.sampling.logit_bias (malloc'd) */
    bool echo;              /* completions: the prompt's text before each completion */
    char *echo_text;
    bool add_special, parse_special, with_pieces; /* /tokenize */
    /* /v1/embeddings: n_inputs token lists, each malloc'd */
    int32_t **in_tok;
    int *in_n;
    int n_inputs;
    bool base64;
} parsed;

/* ---- http.c ------------------------------------------------------------------ */
void srv_log(kvant_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- validate.c: one function per endpoint ----------------------------------- *
 * Each reads the body object j into *p; false + *v when the request is
 * refused.  p is freed with srv_parsed_free either way. */
bool srv_validate_completion(srv *s, cJSON *j, parsed *p, verr *v);   /* POST /v1/completions */
bool srv_validate_chat(srv *s, cJSON *j, parsed *p, verr *v);         /* POST /v1/chat/completions */
bool srv_validate_apply_template(srv *s, cJSON *j, parsed *p, verr *v); /* POST /apply-template: p->text */
bool srv_validate_tokenize(srv *s, cJSON *j, parsed *p, verr *v);     /* POST /tokenize */
bool srv_validate_detokenize(srv *s, cJSON *j, parsed *p, verr *v);   /* POST /detokenize: p->ids */
bool srv_check_model(srv *s, cJSON *j, verr *v);  /* the model named, if any, is this server's (else 404) */
void srv_parsed_free(parsed *p);

/* ---- engine_loop.c ------------------------------------------------------------ */
void *srv_engine_main(void *arg);   /* the engine thread */
/* Submits p (its prompt tokens and stop strings move into the request) for
 * connection c; the request is registered before the engine can report on
 * it.  NULL + st when the engine refuses (KVANT_ERR_FULL: queue full). */
sreq *srv_req_submit(srv *s, parsed *p, bool chat, struct MHD_Connection *c, double t_arrive, kvant_status *st);
void srv_req_unref(sreq *r);
/* The connection is gone: cancel r if it is unfinished, drop its reference.
 * A generation's outcome is counted here, once (unless srv_embed_watch
 * counted it): ok when every choice finished and the whole response was
 * delivered (libmicrohttpd's COMPLETED_OK), else cancelled (the client left
 * before the end, or the server's shutdown cancelled it: finish "abort"). */
void srv_req_hangup(sreq *r, bool delivered);
int srv_reg_count(srv *s);          /* requests the engine still runs */
void srv_reg_cancel_all(srv *s);

/* ---- embed.c: POST /v1/embeddings ------------------------------------------------ */
/* the body -> p->in_tok / in_n / n_inputs (tokenized as /v1/completions), p->base64 */
bool srv_validate_embeddings(srv *s, cJSON *j, parsed *p, verr *v);
/* Submits every input of p (their tokens stay in p) as one request waited
 * for by connection c; all or none: when the engine refuses one (st:
 * KVANT_ERR_FULL when the queue is full) those already queued are cancelled
 * and NULL is returned. */
sreq *srv_embed_submit(srv *s, parsed *p, struct MHD_Connection *c, double t_arrive, kvant_status *st);
/* the engine thread, routing ev to r (under r->mu): takes its vector */
void srv_embed_event(sreq *r, const kvant_event *ev);
/* whether id is one of r's engine requests (r->embed set) */
bool srv_embed_has(const sreq *r, int64_t id);
void srv_embed_cancel(srv *s, sreq *r);    /* cancels every input's engine request */
/* The engine thread, after each step (every 100 ms at most): libmicrohttpd
 * does not see a suspended connection close, so the sockets of suspended
 * requests (embeddings, non-streamed generations waiting for their end,
 * streams waiting for a token or for admission) are peeked at; one whose
 * client has gone is cancelled (every input of an embeddings request), r->
 * http_gone set and counted cancelled; the resumed handler or stream
 * reader then closes the connection. */
void srv_embed_watch(srv *s);
void srv_embed_free(srv_embed *e);
/* the response body of a request whose vectors have all arrived (NULL:
 * out of memory); counts it in /metrics */
cJSON *srv_render_embeddings(sreq *r);

/* ---- render.c ------------------------------------------------------------------ */
/* Takes the queued events and advances every choice's text; for streams,
 * appends SSE chunks to r->out (one per token, and [DONE] at the end).
 * Sets r->all_finished when every choice has its finish reason. */
void srv_drain(sreq *r);
/* Advances choice i over the text it holds (srv_drain calls it after each
 * token's piece): stop strings, the finish reason, with r->tools the tool
 * calls (content held once a call begins, the calls read at the end); for
 * streams appends its SSE chunks to r->out.  Tests call it (and
 * srv_drain) on a request they build, without an engine. */
void srv_advance(sreq *r, int i);
/* the whole (non-streamed) response body of a finished request */
cJSON *srv_render_final(sreq *r);
/* {"tokens": [ids]}, or with_pieces [{"id", "piece"}] (llama-server's /tokenize) */
cJSON *srv_render_tokens(srv *s, const int32_t *tok, int n, bool with_pieces);
/* {"content": text} (NULL when out of memory) */
cJSON *srv_render_detokenize(srv *s, const int32_t *tok, int n);
/* a JSON string of s[0..n) made valid UTF-8 (bad bytes become U+FFFD) */
cJSON *srv_str_json(const char *s, size_t n);

#endif
