/* render.c - what a request's events become: text (detokenized, stop
 * strings matched across token boundaries, incomplete UTF-8 withheld) and
 * the OpenAI JSON around it: completion and chat bodies, SSE chunks,
 * logprobs, usage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"

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

cJSON *srv_str_json(const char *s, size_t n) {
    char *f = utf8_fix(s, n);
    cJSON *j = cJSON_CreateString(f ? f : "");
    free(f);
    return j;
}

/* ---- tool calls in replies ---------------------------------------------------------
 * With r->tools (tools given, tool_choice "auto") each reply is read for
 * the calls its family writes (kvant_chat_parse_tool_calls).  The markers
 * the parser reads are control tokens in some vocabularies ([TOOL_CALLS] in
 * Mistral's, <|python_tag|> in Llama 3.1's), which decode to nothing, so a
 * control token whose text is one of these gives its text here; every other
 * control token stays silent as without tools (a stray <s> or <|im_start|>
 * is not content).  The parser takes the markers out of the content. */
static const char *const tool_markers[] = {"[TOOL_CALLS]", "<|python_tag|>", "<tool_call>", "</tool_call>"};

/* the bytes token tok adds to a reply after prev */
static int reply_piece(const sreq *r, int32_t prev, int32_t tok, char *buf, int cap) {
    const int n = kvant_token_to_piece(r->s->m, prev, tok, buf, cap);
    if (!r->tools || n > 0) return n;
    char sp[32];
    const int k = kvant_token_to_piece_ex(r->s->m, prev, tok, true, sp, sizeof sp);
    for (size_t m = 0; m < sizeof tool_markers / sizeof *tool_markers; m++)
        if ((size_t)k == strlen(tool_markers[m]) && !memcmp(sp, tool_markers[m], (size_t)k) && k <= cap) {
            memcpy(buf, sp, (size_t)k);
            return k;
        }
    return n;
}

/* ---- events -> text ---------------------------------------------------------- */
static void lp_add(sreq *r, choice *c, const kvant_event *ev, int32_t prev, size_t offset) {
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
    int n = reply_piece(r, prev, ev->token, piece, sizeof piece);
    const int n_top = ev->n_top < r->logprobs ? ev->n_top : r->logprobs;
    if (r->chat) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "token", srv_str_json(piece, (size_t)n));
        cJSON_AddNumberToObject(o, "logprob", ev->logprob);
        cJSON_AddNullToObject(o, "bytes");
        cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int i = 0; i < n_top; i++) {
            cJSON *t = cJSON_CreateObject();
            int m = reply_piece(r, prev, ev->top_tokens[i], piece, sizeof piece);
            cJSON_AddItemToObject(t, "token", srv_str_json(piece, (size_t)m));
            cJSON_AddNumberToObject(t, "logprob", ev->top_logprobs[i]);
            cJSON_AddNullToObject(t, "bytes");
            cJSON_AddItemToArray(tops, t);
        }
        cJSON_AddItemToArray(cJSON_GetObjectItem(c->lp, "content"), o);
    } else {
        cJSON_AddItemToArray(cJSON_GetObjectItem(c->lp, "tokens"), srv_str_json(piece, (size_t)n));
        cJSON_AddItemToArray(cJSON_GetObjectItem(c->lp, "token_logprobs"), cJSON_CreateNumber(ev->logprob));
        cJSON *tops = cJSON_CreateObject();
        for (int i = 0; i < n_top; i++) {
            int m = reply_piece(r, prev, ev->top_tokens[i], piece, sizeof piece);
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

/* choice i's reply read for calls (out of memory: none, all content) */
static void read_reply(const sreq *r, int i, kvant_chat_reply *out) {
    const choice *c = &r->ch[i];
    kvant_status st;
    if (kvant_chat_parse_tool_calls(r->s->chat_kind, c->text.buf, c->text.len,
                                    r->tool_seed + (uint64_t)i * 0x9E3779B97F4A7C15ull, out, &st) ||
        !out->content) {
        kvant_chat_reply_free(out);
        *out = (kvant_chat_reply){0};
    }
}

/* a reply with calls that ended by itself (EOS, not a stop string: one
 * before the calls cut them off) finishes with "tool_calls", as OpenAI's */
static const char *tool_reason(const char *reason, const kvant_chat_reply *rep) {
    return rep->n_calls && !strcmp(reason, "stop") ? "tool_calls" : reason;
}

/* a call as OpenAI writes it: {id, type: "function", function: {name, arguments}};
 * index >= 0: a stream's delta, which numbers the calls */
static cJSON *call_json(const kvant_chat_tool_call *tc, int index) {
    cJSON *o = cJSON_CreateObject(), *fn;
    if (index >= 0) cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddItemToObject(o, "id", srv_str_json(tc->id, strlen(tc->id)));
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddItemToObject(o, "function", fn = cJSON_CreateObject());
    cJSON_AddItemToObject(fn, "name", srv_str_json(tc->name, strlen(tc->name)));
    cJSON_AddItemToObject(fn, "arguments", srv_str_json(tc->arguments, strlen(tc->arguments)));
    return o;
}

/* ---- streaming ------------------------------------------------------------------- */
/* a chat delta, naming the role in a choice's first chunk */
static cJSON *new_delta(const sreq *r) {
    cJSON *d = cJSON_CreateObject();
    if (!r->role_sent) cJSON_AddStringToObject(d, "role", "assistant");
    return d;
}

/* one SSE chunk of choice i: body is chat's delta or completions' text; the
 * pending logprobs go with it; finish NULL: not finished yet */
static void send_chunk(sreq *r, int i, cJSON *body, const char *finish) {
    choice *c = &r->ch[i];
    cJSON *j = chunk_head(r), *arr = cJSON_AddArrayToObject(j, "choices"), *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", i);
    cJSON_AddItemToObject(o, r->chat ? "delta" : "text", body);
    if (c->lp) cJSON_AddItemToObject(o, "logprobs", c->lp), c->lp = NULL;
    else cJSON_AddNullToObject(o, "logprobs");
    if (finish) cJSON_AddStringToObject(o, "finish_reason", finish), c->reason_sent = true;
    else cJSON_AddNullToObject(o, "finish_reason");
    cJSON_AddItemToArray(arr, o);
    sse_put(r, j);
    r->role_sent = r->n == 1; /* with n > 1 every choice's first chunk names the role */
}

/* The end of a streamed reply read for calls: the content beyond what was
 * sent (no calls: the text held back), then one chunk per call with its
 * index, id, type, name and whole arguments (the openai client's stream
 * helpers add up argument strings, so one piece is as good as many), then
 * the finish reason in a chunk of its own, as OpenAI ends a tool stream. */
static void stream_tool_end(sreq *r, int i) {
    choice *c = &r->ch[i];
    kvant_chat_reply rep;
    read_reply(r, i, &rep);
    const char *text = rep.n_calls ? rep.content : c->text.buf ? c->text.buf : "";
    const size_t len = rep.n_calls ? strlen(rep.content) : c->text.len;
    const char *reason = tool_reason(c->reason, &rep);
    if (len > c->text.sent || !rep.n_calls) { /* the content's rest; without calls it carries the finish */
        cJSON *d = new_delta(r);
        if (len > c->text.sent) cJSON_AddItemToObject(d, "content", srv_str_json(text + c->text.sent, len - c->text.sent));
        send_chunk(r, i, d, rep.n_calls ? NULL : reason);
    }
    for (int k = 0; k < rep.n_calls; k++) {
        cJSON *d = new_delta(r), *calls = cJSON_AddArrayToObject(d, "tool_calls");
        cJSON_AddItemToArray(calls, call_json(&rep.calls[k], k));
        send_chunk(r, i, d, NULL);
    }
    if (rep.n_calls) send_chunk(r, i, new_delta(r), reason);
    c->text.sent = c->text.len;
    kvant_chat_reply_free(&rep);
}

void srv_advance(sreq *r, int i) {
    choice *c = &r->ch[i];
    if (c->reason) return;
    const bool final = c->engine_finish != KVANT_FINISH_NONE;
    size_t plain = 0;
    if (r->tools && !c->in_call) /* has a call begun?  plain: what is surely content */
        c->in_call = kvant_chat_tool_prefix(r->s->chat_kind, c->text.buf, c->text.len, &plain) == KVANT_CHAT_TOOL_CALL;
    /* stop strings are matched until a call begins, so none cuts a call */
    size_t end = c->in_call ? c->text.sent : srv_text_scan(&c->text, (const char *const *)r->stops, r->n_stops, final);
    if (c->text.stopped) c->reason = "stop";
    else if (final) c->reason = finish_name(c->engine_finish);
    if (r->tools && !c->reason && end > plain) /* hold what may still become a call */
        end = plain > c->text.sent ? srv_utf8_complete(c->text.buf, plain) : c->text.sent;
    if (end < c->text.sent) end = c->text.sent;
    if (!r->stream) {
        c->text.sent = end;
        return;
    }
    if (r->tools && c->reason) {
        stream_tool_end(r, i);
        return;
    }
    if (end == c->text.sent && !c->lp && !c->reason) return;
    const size_t from = c->echo_unsent ? 0 : c->text.sent; /* echo: the prompt goes with the first chunk */
    c->echo_unsent = false;
    cJSON *txt = srv_str_json(c->text.buf ? c->text.buf + from : "", end - from);
    if (r->chat) {
        cJSON *d = new_delta(r);
        if (end > c->text.sent || !c->reason) cJSON_AddItemToObject(d, "content", txt);
        else cJSON_Delete(txt);
        txt = d;
    }
    send_chunk(r, i, txt, c->reason);
    c->text.sent = end;
}

void srv_drain(sreq *r) {
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
            const int len = reply_piece(r, c->prev, ev->token, piece, sizeof piece);
            if (r->logprobs >= 0) lp_add(r, c, ev, c->prev, c->text.len);
            srv_text_append(&c->text, piece, (size_t)(len > 0 ? len : 0));
            c->prev = ev->token;
            c->n_tokens++;
            c->lp_sum += ev->logprob;
        }
        if (ev->finish != KVANT_FINISH_NONE) c->engine_finish = ev->finish;
        if (r->stream) srv_advance(r, ev->index);
    }
    if (oom)
        for (int i = 0; i < r->n; i++)
            if (!r->ch[i].reason) r->ch[i].engine_finish = KVANT_FINISH_ERROR, touched[i] = true;
    bool all = true;
    for (int i = 0; i < r->n; i++) {
        if (touched[i]) srv_advance(r, i);
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
        pthread_mutex_lock(&s->mt.mu); /* the outcome is counted when the connection ends (srv_req_hangup) */
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

/* best_of: a choice's rank is its mean token logprob (the model's, at
 * temperature 1, before bias and penalties); a choice without tokens ranks
 * last; ties keep the sample order */
static double mean_logprob(const choice *c) { return c->n_tokens ? c->lp_sum / c->n_tokens : -INFINITY; }

cJSON *srv_render_final(sreq *r) {
    int order[SRV_MAX_N];
    for (int i = 0; i < r->n; i++) order[i] = i;
    if (r->n_return < r->n) /* insertion sort, best first (stable) */
        for (int i = 1; i < r->n; i++)
            for (int k = i; k > 0 && mean_logprob(&r->ch[order[k]]) > mean_logprob(&r->ch[order[k - 1]]); k--) {
                const int t = order[k];
                order[k] = order[k - 1];
                order[k - 1] = t;
            }
    cJSON *j = chunk_head(r), *arr = cJSON_AddArrayToObject(j, "choices");
    for (int i = 0; i < r->n_return; i++) {
        choice *ch = &r->ch[order[i]];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", i);
        cJSON *txt = srv_str_json(ch->text.buf ? ch->text.buf : "", ch->text.len);
        const char *reason = ch->reason;
        if (r->chat) {
            cJSON *msg = cJSON_AddObjectToObject(o, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            kvant_chat_reply rep = {0};
            if (r->tools) read_reply(r, order[i], &rep);
            if (rep.n_calls) { /* content null when the reply is only calls, as OpenAI's */
                cJSON_Delete(txt);
                if (rep.content[0]) cJSON_AddItemToObject(msg, "content", srv_str_json(rep.content, strlen(rep.content)));
                else cJSON_AddNullToObject(msg, "content");
                cJSON *calls = cJSON_AddArrayToObject(msg, "tool_calls");
                for (int k = 0; k < rep.n_calls; k++) cJSON_AddItemToArray(calls, call_json(&rep.calls[k], -1));
                reason = tool_reason(reason, &rep);
            } else
                cJSON_AddItemToObject(msg, "content", txt);
            kvant_chat_reply_free(&rep);
        } else
            cJSON_AddItemToObject(o, "text", txt);
        if (ch->lp) cJSON_AddItemToObject(o, "logprobs", ch->lp), ch->lp = NULL;
        else cJSON_AddNullToObject(o, "logprobs");
        cJSON_AddStringToObject(o, "finish_reason", reason);
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_AddItemToObject(j, "usage", usage_json(r));
    return j;
}

/* ---- /tokenize, /detokenize ---------------------------------------------------- */
static bool utf8_valid(const char *s, size_t n) {
    char *f = utf8_fix(s, n);
    const bool ok = f && strlen(f) == n && !memcmp(f, s, n);
    free(f);
    return ok;
}

cJSON *srv_render_tokens(srv *s, const int32_t *tok, int n, bool with_pieces) {
    cJSON *j = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(j, "tokens");
    char piece[256];
    for (int i = 0; i < n; i++) {
        if (!with_pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(tok[i]));
            continue;
        }
        /* the bytes the token adds after the one before it, so the pieces
         * concatenate to /detokenize's text; not valid UTF-8 alone (a
         * byte-fallback token): the bytes as numbers, as llama-server */
        const int m = kvant_token_to_piece(s->m, i ? tok[i - 1] : -1, tok[i], piece, sizeof piece);
        const size_t len = (size_t)(m > 0 ? m : 0);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", tok[i]);
        if (utf8_valid(piece, len)) {
            cJSON_AddItemToObject(o, "piece", srv_str_json(piece, len));
        } else {
            cJSON *b = cJSON_AddArrayToObject(o, "piece");
            for (size_t k = 0; k < len; k++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)piece[k]));
        }
        cJSON_AddItemToArray(arr, o);
    }
    return j;
}

cJSON *srv_render_detokenize(srv *s, const int32_t *tok, int n) {
    srv_text t = {0};
    char piece[256];
    bool ok = srv_text_append(&t, "", 0);
    for (int i = 0; ok && i < n; i++) {
        const int m = kvant_token_to_piece(s->m, i ? tok[i - 1] : -1, tok[i], piece, sizeof piece);
        ok = srv_text_append(&t, piece, (size_t)(m > 0 ? m : 0));
    }
    cJSON *j = NULL;
    if (ok) {
        j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "content", srv_str_json(t.buf, t.len));
    }
    srv_text_free(&t);
    return j;
}
