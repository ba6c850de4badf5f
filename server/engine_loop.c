/* engine_loop.c - requests between the HTTP side and the engine: their
 * lifetime, submission, the registry (engine id -> request), and the engine
 * thread, which steps the engine and routes each event to its request's
 * queue, resuming the connection when there is something to send. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/srv_internal.h"

/* ---- requests: lifetime ------------------------------------------------------ */
void srv_req_unref(sreq *r) {
    if (__atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL)) return;
    for (int i = 0; i < r->n; i++) {
        srv_text_free(&r->ch[i].text);
        cJSON_Delete(r->ch[i].lp);
    }
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->q);
    free(r->w);
    free(r->out);
    srv_embed_free(r->embed);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

sreq *srv_req_submit(srv *s, parsed *p, bool chat, struct MHD_Connection *c, double t_arrive, kvant_status *st) {
    sreq *r = calloc(1, sizeof *r);
    if (!r) {
        st->code = KVANT_ERR_NOMEM;
        snprintf(st->msg, sizeof st->msg, "out of memory");
        return NULL;
    }
    const int32_t *tok = p->tok;
    const int n_prompt = p->n_prompt;
    pthread_mutex_init(&r->mu, NULL);
    r->s = s;
    r->refs = 2;
    r->chat = chat;
    r->stream = p->stream;
    r->include_usage = p->include_usage;
    r->n = p->req.n;
    r->n_return = p->n_return > 0 ? p->n_return : r->n;
    r->logprobs = p->logprobs;
    r->tools = p->tool_calls;
    r->n_prompt = n_prompt;
    r->last_prompt_tok = tok[n_prompt - 1];
    for (int i = 0; i < r->n; i++) {
        choice *ch = &r->ch[i];
        ch->prev = tok[n_prompt - 1];
        if (p->echo_text) { /* the text starts with the prompt; stop strings are looked for after it */
            if (!srv_text_append(&ch->text, p->echo_text, strlen(p->echo_text))) {
                r->refs = 1;
                srv_req_unref(r);
                st->code = KVANT_ERR_NOMEM;
                snprintf(st->msg, sizeof st->msg, "out of memory");
                return NULL;
            }
            ch->text.sent = ch->text.len;
            ch->echo_unsent = true;
        }
    }
    memcpy(r->stops, p->stops, sizeof p->stops);
    r->n_stops = p->n_stops;
    p->n_stops = 0;
    r->conn = c;
    const union MHD_ConnectionInfo *ci = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
    r->fd = ci ? ci->connect_fd : -1;
    r->created = (int64_t)time(NULL);
    r->t_arrive = t_arrive;
    pthread_mutex_lock(&s->reg_mu);
    if (s->reg_len == s->reg_cap) {
        int cap = s->reg_cap ? s->reg_cap * 2 : 64;
        sreq **reg = realloc(s->reg, (size_t)cap * sizeof *reg);
        if (reg) s->reg = reg, s->reg_cap = cap;
    }
    if (s->reg_len < s->reg_cap) {
        r->id = kvant_engine_submit(s->e, tok, n_prompt, &p->req, st);
    } else {
        r->id = -1;
        st->code = KVANT_ERR_NOMEM;
        snprintf(st->msg, sizeof st->msg, "out of memory");
    }
    if (r->id > 0) s->reg[s->reg_len++] = r;
    pthread_mutex_unlock(&s->reg_mu);
    if (r->id <= 0) {
        r->refs = 1;
        srv_req_unref(r);
        return NULL;
    }
    /* tool call ids: the same seed gives the same text, another request other ids */
    r->tool_seed = p->req.sampling.seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)r->id;
    return r;
}

void srv_req_hangup(sreq *r, bool delivered) {
    srv *s = r->s;
    pthread_mutex_lock(&r->mu);
    r->http_gone = true;
    r->q_len = 0;
    const bool cancel = !r->engine_done && !r->cancel_sent;
    r->cancel_sent = true;
    /* embeddings count their ok in srv_render_embeddings */
    const bool count = !r->counted && (cancel || !r->embed);
    r->counted = true;
    pthread_mutex_unlock(&r->mu);
    if (cancel) {
        if (r->embed) srv_embed_cancel(s, r); /* every input */
        else kvant_engine_cancel(s->e, r->id); /* client gone: free its blocks now */
    }
    if (count) {
        /* all_finished and the choices are the consumer's, which this is (the completion callback) */
        bool ok = !cancel && delivered && r->all_finished;
        for (int i = 0; ok && i < r->n; i++)
            if (r->ch[i].engine_finish == KVANT_FINISH_CANCELLED) ok = false; /* srv_reg_cancel_all */
        pthread_mutex_lock(&s->mt.mu);
        if (ok) s->mt.req_ok++;
        else s->mt.req_cancelled++;
        pthread_mutex_unlock(&s->mt.mu);
    }
    srv_req_unref(r);
}

int srv_reg_count(srv *s) {
    pthread_mutex_lock(&s->reg_mu);
    const int n = s->reg_len;
    pthread_mutex_unlock(&s->reg_mu);
    return n;
}

void srv_reg_cancel_all(srv *s) {
    pthread_mutex_lock(&s->reg_mu);
    for (int i = 0; i < s->reg_len; i++) {
        if (s->reg[i]->embed) srv_embed_cancel(s, s->reg[i]);
        else kvant_engine_cancel(s->e, s->reg[i]->id);
    }
    pthread_mutex_unlock(&s->reg_mu);
}

/* ---- engine thread ------------------------------------------------------------- */
static sreq *reg_find(srv *s, int64_t id, int *at) {
    for (int i = 0; i < s->reg_len; i++)
        if (s->reg[i]->id == id || (s->reg[i]->embed && srv_embed_has(s->reg[i], id))) {
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
        if (r->embed) { /* the vector, copied now: the engine's buffer lasts until the next step */
            srv_embed_event(r, ev);
        } else if (!r->http_gone) {
            if (r->q_len == r->q_cap) {
                int cap = r->q_cap ? r->q_cap * 2 : 64;
                kvant_event *q = realloc(r->q, (size_t)cap * sizeof *q);
                if (q) r->q = q, r->q_cap = cap;
                else r->oom = true;
            }
            if (r->q_len < r->q_cap) r->q[r->q_len++] = *ev;
        }
        bool done = false;
        if (ev->finish != KVANT_FINISH_NONE && ++r->n_engine_finished >= (r->embed ? r->embed->n : r->n)) {
            r->engine_done = done = true;
            s->reg[at] = s->reg[--s->reg_len];
            if (r->gen_total) {
                srv_hist_add(&s->mt, &s->mt.e2e, (now - r->t_arrive) / 1e3);
                if (r->gen_total > r->n)
                    srv_hist_add(&s->mt, &s->mt.tpot, (r->t_last - r->t_first) / 1e3 / (r->gen_total - r->n));
            }
        }
        if (r->suspended && (r->embed ? done : r->stream || r->n_stops || ev->finish != KVANT_FINISH_NONE)) {
            r->suspended = false;
            MHD_resume_connection(r->conn);
        }
        pthread_mutex_unlock(&r->mu);
        if (done) srv_req_unref(r);
    }
    pthread_mutex_unlock(&s->reg_mu);
}

void *srv_engine_main(void *arg) {
    srv *s = arg;
    kvant_status st;
    while (!atomic_load(&s->engine_stop)) {
        if (!kvant_engine_wait(s->e, 50)) continue;
        const int n = kvant_engine_step(s->e, s->evbuf, SRV_EVENTS, &st);
        if (n < 0) {
            srv_log(KVANT_LOG_ERROR, "engine step failed: %s", st.msg);
            usleep(10000);
            continue;
        }
        if (n) route(s, s->evbuf, n);
        srv_embed_watch(s);
    }
    return NULL;
}
