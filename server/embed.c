/* embed.c - POST /v1/embeddings in OpenAI's shape: the body's validation,
 * the submission (one engine embed request per input, batched with whatever
 * else the engine runs), the vectors' arrival and the response.
 *
 * One sreq waits for all of a request's inputs: they are submitted in order
 * under the registry lock, so their engine ids increase and the registry
 * finds the sreq by any of them (srv_embed_has).  The engine thread copies
 * each KVANT_FINISH_EMBEDDING vector into the sreq as it routes the event
 * (the engine's buffer lives only until the next step) and resumes the
 * connection once every input has ended; the handler (http.c) then renders
 * the body.  A client that goes away has every input cancelled.
 *
 * Request: model (this server's, else 404), input (a string, an array of
 * strings, an array of token ids or an array of arrays of token ids; at most
 * SRV_MAX_EMBED_INPUTS, each non-empty and within the context; strings are
 * tokenized as /v1/completions tokenizes its prompt, BOS first),
 * encoding_format ("float", the default, or "base64": the little-endian
 * float32 bytes, as OpenAI), dimensions (only the model's own: kvant does
 * not shorten vectors), user (an annotation).  Any other field is a 400
 * with code unknown_field, as on the other endpoints. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/srv_internal.h"


static bool oom(verr *v) {
    v->status = 500;
    return srv_bad(v, NULL, "out of memory");
}

static cJSON *field(cJSON *j, const char *name) {
    cJSON *f = cJSON_GetObjectItemCaseSensitive(j, name);
    return f && !cJSON_IsNull(f) ? f : NULL; /* null is absent, as OpenAI's clients send it */
}

/* ---- validation ------------------------------------------------------------------ */
static const char *const embed_fields[] = {"model", "input", "encoding_format", "dimensions", "user"};
enum { N_EMBED_FIELDS = sizeof embed_fields / sizeof *embed_fields };

/* unknown fields and fields given twice, as validate.c's check_known_fields */
static bool check_fields(cJSON *j, verr *v) {
    bool seen[N_EMBED_FIELDS] = {0};
    cJSON *f;
    cJSON_ArrayForEach(f, j) {
        int k = 0;
        while (k < N_EMBED_FIELDS && strcmp(embed_fields[k], f->string)) k++;
        if (k == N_EMBED_FIELDS) {
            v->code = "unknown_field";
            return srv_bad(v, f->string, "unrecognized request argument supplied: '%.64s' (README, \"Request fields\", "
                       "lists what kvant takes)", f->string);
        }
        if (seen[k]) return srv_bad(v, embed_fields[k], "'%s' is given twice", embed_fields[k]);
        seen[k] = true;
    }
    return true;
}

/* input i as token ids: a non-empty array of integers in the vocabulary */
static bool ids_input(srv *s, cJSON *a, int i, bool many, parsed *p, verr *v) {
    const int n = cJSON_GetArraySize(a);
    if (!n) return srv_bad(v, "input", many ? "input[%d] is empty" : "'input' is empty", i);
    if (n > s->max_ctx) {
        v->code = "context_length_exceeded";
        return srv_bad(v, "input", "input[%d] has %d tokens; the context holds %d", i, n, s->max_ctx);
    }
    if (!(p->in_tok[i] = malloc((size_t)n * sizeof **p->in_tok))) return oom(v);
    int k = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble < s->info.vocab_size) ||
            e->valuedouble != (double)(int)e->valuedouble) {
            if (many)
                return srv_bad(v, "input", "token ids must be integers in [0, %d); input[%d][%d] is not",
                           s->info.vocab_size, i, k);
            return srv_bad(v, "input", "token ids must be integers in [0, %d); input[%d] is not", s->info.vocab_size, k);
        }
        p->in_tok[i][k++] = (int32_t)e->valuedouble;
    }
    p->in_n[i] = n;
    return true;
}

/* input i as text, tokenized as /v1/completions does (BOS first) */
static bool text_input(srv *s, const char *text, int i, bool many, parsed *p, verr *v) {
    const size_t len = strlen(text);
    if (!len) return srv_bad(v, "input", many ? "input[%d] is an empty string" : "'input' is an empty string", i);
    int32_t *t = malloc((size_t)(s->max_ctx + 1) * sizeof *t);
    if (!t) return oom(v);
    int n = kvant_tokenize(s->m, text, len, true, t, s->max_ctx + 1);
    if (n == INT_MIN) return free(t), oom(v);
    if (n < 0 || n > s->max_ctx) {
        free(t);
        v->code = "context_length_exceeded";
        return srv_bad(v, "input", "input[%d] has %d tokens; the context holds %d", i, n < 0 ? -n : n, s->max_ctx);
    }
    int32_t *fit = realloc(t, (size_t)n * sizeof *t);
    p->in_tok[i] = fit ? fit : t;
    p->in_n[i] = n;
    return true;
}

static bool parse_input(srv *s, cJSON *j, parsed *p, verr *v) {
    static const char shape[] = "'input' must be a string, an array of strings, an array of token ids or an array "
                                "of arrays of token ids";
    cJSON *in = field(j, "input");
    if (!in) return srv_bad(v, "input", "'input' is required");
    if (!cJSON_IsString(in) && !cJSON_IsArray(in)) return srv_bad(v, "input", "%s", shape);
    cJSON *first = cJSON_IsArray(in) ? cJSON_GetArrayItem(in, 0) : NULL;
    if (cJSON_IsArray(in) && !first) return srv_bad(v, "input", "'input' is empty");
    /* one input: a string or one array of ids; several: strings or id arrays */
    const bool one = cJSON_IsString(in) || cJSON_IsNumber(first);
    const int n = one ? 1 : cJSON_GetArraySize(in);
    if (n > SRV_MAX_EMBED_INPUTS)
        return srv_bad(v, "input", "'input' has %d items; at most %d", n, SRV_MAX_EMBED_INPUTS);
    if (!(p->in_tok = calloc((size_t)n, sizeof *p->in_tok)) || !(p->in_n = calloc((size_t)n, sizeof *p->in_n)))
        return oom(v);
    p->n_inputs = n;
    if (one) return cJSON_IsString(in) ? text_input(s, in->valuestring, 0, false, p, v)
                                       : ids_input(s, in, 0, false, p, v);
    const bool strings = cJSON_IsString(first);
    if (!strings && !cJSON_IsArray(first)) return srv_bad(v, "input", "%s", shape);
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_GetArrayItem(in, i);
        if (strings ? !cJSON_IsString(e) : !cJSON_IsArray(e))
            return srv_bad(v, "input", "input[%d]: every item must be a %s, as input[0] is", i,
                       strings ? "string" : "array of token ids");
        if (!(strings ? text_input(s, e->valuestring, i, true, p, v) : ids_input(s, e, i, true, p, v))) return false;
    }
    return true;
}

bool srv_validate_embeddings(srv *s, cJSON *j, parsed *p, verr *v) {
    if (!check_fields(j, v)) return false;
    cJSON *f;
    if ((f = field(j, "model")) && !cJSON_IsString(f)) return srv_bad(v, "model", "'model' must be a string");
    if ((f = field(j, "user")) && !cJSON_IsString(f)) return srv_bad(v, "user", "'user' must be a string");
    p->base64 = false;
    if ((f = field(j, "encoding_format"))) {
        if (!cJSON_IsString(f) || (strcmp(f->valuestring, "float") && strcmp(f->valuestring, "base64")))
            return srv_bad(v, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        p->base64 = !strcmp(f->valuestring, "base64");
    }
    if ((f = field(j, "dimensions"))) {
        if (!cJSON_IsNumber(f) || f->valuedouble != floor(f->valuedouble))
            return srv_bad(v, "dimensions", "'dimensions' must be an integer");
        if (f->valuedouble != s->info.dim)
            return srv_bad(v, "dimensions", "'dimensions' must be the model's %d (kvant does not shorten embeddings), "
                       "got %g", s->info.dim, f->valuedouble);
    }
    return parse_input(s, j, p, v) && srv_check_model(s, j, v);
}

/* ---- submission, arrival ------------------------------------------------------------ */
void srv_embed_free(srv_embed *e) {
    if (!e) return;
    free(e->ids);
    free(e->n_tok);
    free(e->vec);
    free(e);
}

/* which input engine request id is (-1: none of r's); ids increase */
static int slot(const srv_embed *e, int64_t id) {
    if (!e->n || id < e->ids[0] || id > e->ids[e->n - 1]) return -1;
    int lo = 0, hi = e->n - 1;
    while (lo <= hi) {
        const int mid = lo + (hi - lo) / 2;
        if (e->ids[mid] == id) return mid;
        if (e->ids[mid] < id) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

bool srv_embed_has(const sreq *r, int64_t id) { return slot(r->embed, id) >= 0; }

void srv_embed_cancel(srv *s, sreq *r) {
    for (int i = 0; i < r->embed->n; i++) kvant_engine_cancel(s->e, r->embed->ids[i]); /* finished: no-op */
}

void srv_embed_event(sreq *r, const kvant_event *ev) {
    srv_embed *e = r->embed;
    const int k = slot(e, ev->id);
    if (k < 0 || ev->finish == KVANT_FINISH_NONE) return;
    bool ok = ev->finish == KVANT_FINISH_EMBEDDING && ev->embedding;
    for (int i = 0; ok && i < e->dim; i++) ok = isfinite(ev->embedding[i]);
    if (ok) {
        memcpy(e->vec + (size_t)k * (size_t)e->dim, ev->embedding, (size_t)e->dim * sizeof *e->vec);
        e->n_vec++;
    } else if (e->failed != KVANT_FINISH_ERROR) {
        e->failed = ev->finish == KVANT_FINISH_CANCELLED ? KVANT_FINISH_CANCELLED : KVANT_FINISH_ERROR;
    }
}

sreq *srv_embed_submit(srv *s, parsed *p, struct MHD_Connection *c, double t_arrive, kvant_status *st) {
    const int n = p->n_inputs, dim = s->info.dim;
    sreq *r = calloc(1, sizeof *r);
    srv_embed *e = calloc(1, sizeof *e);
    if (r) r->embed = e;
    if (!r || !e || !(e->ids = malloc((size_t)n * sizeof *e->ids)) || !(e->n_tok = malloc((size_t)n * sizeof *e->n_tok)) ||
        !(e->vec = malloc((size_t)n * (size_t)dim * sizeof *e->vec))) {
        srv_embed_free(e);
        free(r);
        st->code = KVANT_ERR_NOMEM;
        snprintf(st->msg, sizeof st->msg, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->s = s;
    r->refs = 2;
    r->conn = c;
    r->created = (int64_t)time(NULL);
    r->t_arrive = t_arrive;
    e->n = n;
    e->dim = dim;
    e->base64 = p->base64;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    e->fd = ci ? ci->connect_fd : -1;
    for (int i = 0; i < n; i++) e->n_tok[i] = p->in_n[i], e->n_tokens += p->in_n[i];
    r->n_prompt = e->n_tokens;
    const kvant_request req = {.embed = true}; /* n 1, max_tokens 0, no logprobs */
    int k = 0;
    pthread_mutex_lock(&s->reg_mu);
    if (s->reg_len == s->reg_cap) {
        int cap = s->reg_cap ? s->reg_cap * 2 : 64;
        sreq **reg = realloc(s->reg, (size_t)cap * sizeof *reg);
        if (reg) s->reg = reg, s->reg_cap = cap;
    }
    if (s->reg_len < s->reg_cap) {
        for (; k < n; k++)
            if ((e->ids[k] = kvant_engine_submit(s->e, p->in_tok[k], p->in_n[k], &req, st)) <= 0) break;
    } else {
        st->code = KVANT_ERR_NOMEM;
        snprintf(st->msg, sizeof st->msg, "out of memory");
    }
    if (k == n) {
        r->id = e->ids[0];
        s->reg[s->reg_len++] = r;
    } else { /* all or none: those queued go (their events find no request) */
        for (int i = 0; i < k; i++) kvant_engine_cancel(s->e, e->ids[i]);
    }
    pthread_mutex_unlock(&s->reg_mu);
    if (k < n) {
        r->refs = 1;
        srv_req_unref(r);
        return NULL;
    }
    return r;
}

/* whether the client of a suspended connection has closed it: EOF or an
 * error (a pipelined next request is data, not a close) */
static bool client_gone(int fd) {
    char c;
    const ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void srv_embed_watch(srv *s) {
    const double now = kvant_time_ms();
    if (now - s->embed_watch_ms < 100) return;
    s->embed_watch_ms = now;
    pthread_mutex_lock(&s->reg_mu);
    for (int i = 0; i < s->reg_len; i++) {
        sreq *r = s->reg[i];
        const int fd = r->embed ? r->embed->fd : r->fd;
        if (fd < 0) continue;
        pthread_mutex_lock(&r->mu); /* suspended under mu: the socket stays open */
        const bool gone = r->suspended && !r->cancel_sent && !r->engine_done && client_gone(fd);
        if (gone) r->http_gone = r->cancel_sent = r->counted = true, r->q_len = 0;
        pthread_mutex_unlock(&r->mu);
        if (!gone) continue;
        /* the cancelled events end it; the resumed handler (or stream reader) closes the connection */
        if (r->embed) srv_embed_cancel(s, r);
        else kvant_engine_cancel(s->e, r->id);
        pthread_mutex_lock(&s->mt.mu);
        s->mt.req_cancelled++;
        pthread_mutex_unlock(&s->mt.mu);
    }
    pthread_mutex_unlock(&s->reg_mu);
}

/* ---- the response ----------------------------------------------------------------- */
/* the shortest "%.*g" text that reads back as the same float32 */
static cJSON *float_json(float x) {
    char t[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(t, sizeof t, "%.*g", prec, (double)x);
        if (strtof(t, NULL) == x) break;
    }
    return cJSON_CreateRaw(t);
}

/* base64 (RFC 4648, padded) of the vector's float32 values, little-endian */
static cJSON *base64_json(const float *x, int n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t nb = (size_t)n * 4;
    unsigned char *b = malloc(nb ? nb : 1);
    char *o = malloc((nb + 2) / 3 * 4 + 1), *w = o;
    if (!b || !o) {
        free(b);
        free(o);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        for (int k = 0; k < 4; k++) b[(size_t)i * 4 + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    for (size_t i = 0; i < nb; i += 3) {
        const uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) |
                           (i + 2 < nb ? (uint32_t)b[i + 2] : 0);
        *w++ = A[v >> 18 & 63];
        *w++ = A[v >> 12 & 63];
        *w++ = i + 1 < nb ? A[v >> 6 & 63] : '=';
        *w++ = i + 2 < nb ? A[v & 63] : '=';
    }
    *w = 0;
    cJSON *j = cJSON_CreateString(o);
    free(b);
    free(o);
    return j;
}

cJSON *srv_render_embeddings(sreq *r) {
    srv *s = r->s;
    const srv_embed *e = r->embed;
    cJSON *j = cJSON_CreateObject(), *data = NULL, *u = NULL;
    bool ok = j && cJSON_AddStringToObject(j, "object", "list") && (data = cJSON_AddArrayToObject(j, "data"));
    for (int i = 0; ok && i < e->n; i++) {
        const float *x = e->vec + (size_t)i * (size_t)e->dim;
        cJSON *o = cJSON_CreateObject(), *vec = NULL;
        if (!o || !cJSON_AddItemToArray(data, o)) {
            cJSON_Delete(o);
            ok = false;
            break;
        }
        ok = cJSON_AddStringToObject(o, "object", "embedding") && cJSON_AddNumberToObject(o, "index", i);
        if (ok && e->base64) {
            ok = (vec = base64_json(x, e->dim)) != NULL;
        } else if (ok) {
            ok = (vec = cJSON_CreateArray()) != NULL;
            for (int k = 0; ok && k < e->dim; k++) {
                cJSON *f = float_json(x[k]);
                ok = f && cJSON_AddItemToArray(vec, f);
                if (!ok) cJSON_Delete(f);
            }
        }
        if (vec && !(ok = ok && cJSON_AddItemToObject(o, "embedding", vec))) cJSON_Delete(vec);
    }
    ok = ok && cJSON_AddStringToObject(j, "model", s->model_id) && (u = cJSON_AddObjectToObject(j, "usage")) &&
         cJSON_AddNumberToObject(u, "prompt_tokens", e->n_tokens) && cJSON_AddNumberToObject(u, "total_tokens", e->n_tokens);
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    pthread_mutex_lock(&s->mt.mu);
    s->mt.req_ok++;
    s->mt.prompt_tokens += (uint64_t)e->n_tokens;
    pthread_mutex_unlock(&s->mt.mu);
    return j;
}
