/* engine_stub.c - TEMPORARY stand-in for the engine API (include/kvant.h
 * "engine") so the server can be built and tested before sched/ lands: one
 * kvant_seq per sample, stepped one sequence at a time (no batching).  Deleted
 * when the engine branch is merged. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvant.h"

typedef struct {
    kvant_seq *seq;
    kvant_sampler *smp;
    float *logits;
    int gen;
    bool done;
} stub_sample;

typedef struct stub_req {
    struct stub_req *next;
    int64_t id;
    int32_t *prompt;
    int n_prompt;
    kvant_request r;
    stub_sample *s;
    bool started, cancelled;
} stub_req;

struct kvant_engine {
    kvant_model *m;
    kvant_model_info info;
    kvant_engine_params p;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    stub_req *head;
    int64_t next_id;
    int n_req;
    kvant_engine_stats stats;
};

kvant_engine_params kvant_engine_default(void) {
    return (kvant_engine_params){.max_seqs = 64, .max_batch_tokens = 512, .max_waiting = 1024, .prefix_cache = true};
}

kvant_engine *kvant_engine_new(kvant_model *m, const kvant_engine_params *p, kvant_status *st) {
    kvant_engine *e = calloc(1, sizeof *e);
    e->m = m;
    kvant_model_get_info(m, &e->info);
    e->p = p ? *p : kvant_engine_default();
    if (!e->p.max_seqs) e->p.max_seqs = 64;
    if (!e->p.max_waiting) e->p.max_waiting = 1024;
    if (!e->p.max_ctx) e->p.max_ctx = e->info.n_ctx_train;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->next_id = 1;
    e->stats.blocks_total = 1000;
    e->stats.blocks_free = 1000;
    st->code = KVANT_OK;
    return e;
}

static void req_free(stub_req *q) {
    int n = q->r.n ? q->r.n : 1;
    for (int i = 0; i < n; i++) {
        kvant_seq_free(q->s[i].seq);
        kvant_sampler_free(q->s[i].smp);
        free(q->s[i].logits);
    }
    free(q->s);
    free(q->prompt);
    free(q);
}

void kvant_engine_free(kvant_engine *e) {
    if (!e) return;
    while (e->head) {
        stub_req *q = e->head;
        e->head = q->next;
        req_free(q);
    }
    free(e);
}

int64_t kvant_engine_submit(kvant_engine *e, const int32_t *prompt, int n_prompt, const kvant_request *r,
                            kvant_status *st) {
    if (n_prompt <= 0 || r->max_tokens <= 0 || n_prompt + r->max_tokens > e->p.max_ctx) {
        st->code = KVANT_ERR_ARG;
        strcpy(st->msg, "bad request");
        return -1;
    }
    pthread_mutex_lock(&e->mu);
    if (e->n_req >= e->p.max_seqs + e->p.max_waiting) {
        pthread_mutex_unlock(&e->mu);
        st->code = KVANT_ERR_FULL;
        strcpy(st->msg, "queue full");
        return -1;
    }
    stub_req *q = calloc(1, sizeof *q);
    q->prompt = malloc((size_t)n_prompt * sizeof *prompt);
    memcpy(q->prompt, prompt, (size_t)n_prompt * sizeof *prompt);
    q->n_prompt = n_prompt;
    q->r = *r;
    q->s = calloc((size_t)(r->n ? r->n : 1), sizeof *q->s);
    q->id = e->next_id++;
    stub_req **pp = &e->head;
    while (*pp) pp = &(*pp)->next;
    *pp = q;
    e->n_req++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    st->code = KVANT_OK;
    return q->id;
}

void kvant_engine_cancel(kvant_engine *e, int64_t id) {
    pthread_mutex_lock(&e->mu);
    for (stub_req *q = e->head; q; q = q->next)
        if (q->id == id) q->cancelled = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

bool kvant_engine_wait(kvant_engine *e, int timeout_ms) {
    pthread_mutex_lock(&e->mu);
    if (!e->head) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    }
    bool work = e->head != NULL;
    pthread_mutex_unlock(&e->mu);
    return work;
}

static void ev_fill(kvant_event *ev, stub_req *q, int i, int32_t tok, kvant_finish f) {
    memset(ev, 0, sizeof *ev);
    ev->id = q->id;
    ev->index = i;
    ev->token = tok;
    ev->finish = f;
    ev->n_prompt = q->n_prompt;
    ev->n_generated = q->s[i].gen;
}

int kvant_engine_step(kvant_engine *e, kvant_event *out, int max_out, kvant_status *st) {
    pthread_mutex_lock(&e->mu);
    int n_out = 0, n_running = 0;
    const int V = e->info.vocab_size;
    float *tmp = malloc((size_t)V * sizeof *tmp);
    for (stub_req **pp = &e->head; *pp && n_running < e->p.max_seqs;) {
        stub_req *q = *pp;
        const int n = q->r.n ? q->r.n : 1;
        if (n_out + n + 1 > max_out) break;
        bool all_done = true;
        if (!q->cancelled && !q->started) {
            q->started = true;
            for (int i = 0; i < n; i++) {
                stub_sample *s = &q->s[i];
                kvant_sampling sp = q->r.sampling;
                sp.seed += (uint64_t)i * 7919;
                s->smp = kvant_sampler_new(&sp, V, st);
                s->logits = malloc((size_t)V * sizeof(float));
                for (int t = 0; t < q->n_prompt; t++) kvant_sampler_accept(s->smp, q->prompt[t]);
                if (i == 0) {
                    s->seq = kvant_seq_new(e->m, q->n_prompt + q->r.max_tokens, st);
                    kvant_forward(s->seq, q->prompt, q->n_prompt, s->logits, false, st);
                    e->stats.tokens_prefill += q->n_prompt;
                } else {
                    s->seq = kvant_seq_new(e->m, q->n_prompt + q->r.max_tokens, st);
                    kvant_forward(s->seq, q->prompt, q->n_prompt, s->logits, false, st);
                }
            }
        }
        for (int i = 0; i < n; i++) {
            stub_sample *s = &q->s[i];
            if (s->done) continue;
            if (q->cancelled) {
                s->done = true;
                ev_fill(&out[n_out++], q, i, -1, KVANT_FINISH_CANCELLED);
                continue;
            }
            memcpy(tmp, s->logits, (size_t)V * sizeof *tmp);
            float mx = -INFINITY;
            for (int v = 0; v < V; v++) mx = tmp[v] > mx ? tmp[v] : mx;
            double z = 0;
            for (int v = 0; v < V; v++) z += exp(tmp[v] - mx);
            const int32_t tok = kvant_sampler_sample(s->smp, s->logits);
            if (tok == e->info.eos_id && !q->r.ignore_eos) {
                s->done = true;
                ev_fill(&out[n_out++], q, i, -1, KVANT_FINISH_EOS);
                continue;
            }
            kvant_sampler_accept(s->smp, tok);
            s->gen++;
            kvant_event *ev = &out[n_out++];
            ev_fill(ev, q, i, tok, s->gen >= q->r.max_tokens ? KVANT_FINISH_LENGTH : KVANT_FINISH_NONE);
            ev->logprob = (float)(tmp[tok] - mx - log(z));
            if (q->r.logprobs > 0) {
                int k = q->r.logprobs < KVANT_MAX_LOGPROBS ? q->r.logprobs : KVANT_MAX_LOGPROBS;
                for (int j = 0; j < k; j++) {
                    int best = -1;
                    for (int v = 0; v < V; v++) {
                        bool used = false;
                        for (int u = 0; u < j; u++) used |= ev->top_tokens[u] == v;
                        if (!used && (best < 0 || tmp[v] > tmp[best])) best = v;
                    }
                    ev->top_tokens[j] = best;
                    ev->top_logprobs[j] = (float)(tmp[best] - mx - log(z));
                }
                ev->n_top = k;
            }
            e->stats.tokens_decode++;
            if (s->gen >= q->r.max_tokens) {
                s->done = true;
                continue;
            }
            kvant_forward(s->seq, &tok, 1, s->logits, false, st);
            all_done = false;
        }
        n_running++;
        if (all_done) {
            *pp = q->next;
            e->n_req--;
            req_free(q);
        } else
            pp = &q->next;
    }
    free(tmp);
    e->stats.steps++;
    pthread_mutex_unlock(&e->mu);
    st->code = KVANT_OK;
    return n_out;
}

void kvant_engine_get_stats(kvant_engine *e, kvant_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    int r = 0, w = 0;
    for (stub_req *q = e->head; q; q = q->next) {
        if (q->started) r++;
        else w++;
    }
    out->running = r;
    out->waiting = w;
    pthread_mutex_unlock(&e->mu);
}
