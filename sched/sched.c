/* sched.c - the continuous-batching scheduler (see sched.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "kv/paged.h"
#include "sample/sample.h"
#include "sched/sched.h"

typedef enum {
    SQ_PARKED,   /* sample i > 0 of a request, waiting for sample 0's prompt logits */
    SQ_WAITING,  /* in the waiting queue, no KV */
    SQ_RUNNING,  /* in run[], holds a KV sequence */
    SQ_DONE,
} sq_state;

typedef struct sched_req sched_req;

typedef struct sseq {
    sched_req *req;
    int index;                 /* which sample */
    sq_state state;
    kv_store *kv;              /* running only */
    sampler *smp;              /* from first admission (or fork) until done */
    int32_t *toks;             /* [n_prompt + max_tokens]: prompt, then generated */
    int n_toks;
    int n_gen;
    struct sseq *wprev, *wnext;/* waiting queue links */
    /* this step */
    int batch_n;               /* tokens in the batch (0: not in it) */
    int logit_row;             /* its row of the logits, -1: none */
    double *embd;              /* embed requests: [dim] pooled hidden states so far */
    grammar_state *gs;         /* structured outputs: where the sample is in its grammar */
} sseq;

struct sched_req {
    int64_t id;
    sched_request r;
    int n_prompt, n, n_open;   /* samples, samples not finished */
    int n_cached;              /* prompt tokens from the prefix cache */
    bool forked;               /* samples 1..n-1 exist (n > 1) */
    bool forks_reserved;       /* their slots are counted in s->reserved_slots */
    bool admitted;             /* sample 0 ran at least once */
    bool cancelled;            /* cancel arrived during a forward pass */
    bool failed;               /* its batch failed */
    sseq *seqs;                /* [n] */
    sample_bias *bias;         /* [r.sampling.n_bias]: the logit bias, copied at submit */
    sched_req *prev, *next;    /* every live request */
};

struct sched {
    const model *m;
    sched_params p;
    int V;
    kv_pool *pool;
    kv_pool *lpool;            /* sliding-window layers' pool, or NULL (model_kv_pools_new) */
    model_work *work;
    float *logits;             /* [max_seqs][V] */
    float *lp_scratch;         /* [V] logits copy for logprobs */
    float *fork_row;           /* [V] logits copy a forked sample samples from */
    uint8_t *gmask;            /* [V] the grammar's allowed tokens this step */
    /* requests and queues */
    sched_req *reqs;           /* live requests, newest first */
    int64_t next_id;
    sseq **run;                /* [max_seqs] running, in admission order */
    int n_run;
    sseq *wait_head, *wait_tail;
    int n_waiting;             /* sequences in the waiting queue */
    int n_waiting_reqs;        /* requests never admitted yet (the submit limit) */
    int reserved_slots;        /* slots promised to forks not made yet */
    /* the planned batch */
    model_segment *seg;        /* [max_seqs] */
    sseq **seg_seq;            /* [max_seqs] */
    int n_seg, batch_T;
    bool budgeted;             /* the chunk budget applied (decoders in the batch) */
    bool in_forward, pending_cancel;
    /* events */
    sched_event *ev;
    int ev_cap, ev_head, ev_count;
    /* adaptive chunk budget and stats */
    int chunk_budget;
    double decode_ms;          /* smoothed time of decode-only steps */
    sched_stats st;
};

/* ---- events ------------------------------------------------------------- */

static void push_event(sched *s, const sched_event *e) {
    if (s->ev_count == s->ev_cap) {
        /* grow (only when the caller leaves events unread); keep order */
        const int cap = s->ev_cap * 2;
        sched_event *n = malloc((size_t)cap * sizeof *n);
        if (!n) { /* dropping an event beats crashing; cannot happen at sane sizes */
            free(e->embedding);
            return;
        }
        for (int i = 0; i < s->ev_count; i++) n[i] = s->ev[(s->ev_head + i) % s->ev_cap];
        free(s->ev);
        s->ev = n;
        s->ev_cap = cap;
        s->ev_head = 0;
    }
    s->ev[(s->ev_head + s->ev_count) % s->ev_cap] = *e;
    s->ev_count++;
}

int sched_pop_events(sched *s, sched_event *out, int max_out) {
    int n = 0;
    for (; n < max_out && s->ev_count > 0; n++) {
        out[n] = s->ev[s->ev_head];
        s->ev_head = (s->ev_head + 1) % s->ev_cap;
        s->ev_count--;
    }
    return n;
}

static sched_event event_of(const sseq *q, int32_t token, sched_end fin) {
    const sched_req *r = q->req;
    sched_event e;
    memset(&e, 0, sizeof e);
    e.id = r->id;
    e.index = q->index;
    e.token = token;
    e.finish = fin;
    e.n_prompt = r->n_prompt;
    e.n_generated = q->n_gen;
    e.n_cached = r->n_cached;
    return e;
}

/* ---- queues ------------------------------------------------------------- */

static void wait_push(sched *s, sseq *q, bool front) {
    q->state = SQ_WAITING;
    q->wprev = q->wnext = NULL;
    if (!s->wait_head) {
        s->wait_head = s->wait_tail = q;
    } else if (front) {
        q->wnext = s->wait_head;
        s->wait_head->wprev = q;
        s->wait_head = q;
    } else {
        q->wprev = s->wait_tail;
        s->wait_tail->wnext = q;
        s->wait_tail = q;
    }
    s->n_waiting++;
}

static void wait_remove(sched *s, sseq *q) {
    if (q->wprev) q->wprev->wnext = q->wnext;
    else s->wait_head = q->wnext;
    if (q->wnext) q->wnext->wprev = q->wprev;
    else s->wait_tail = q->wprev;
    q->wprev = q->wnext = NULL;
    s->n_waiting--;
}

static void run_remove(sched *s, sseq *q) {
    int i = 0;
    while (i < s->n_run && s->run[i] != q) i++;
    CORE_ASSERT(i < s->n_run);
    memmove(&s->run[i], &s->run[i + 1], (size_t)(s->n_run - i - 1) * sizeof *s->run);
    s->n_run--;
}

static void req_free(sched *s, sched_req *r) {
    if (r->prev) r->prev->next = r->next;
    else s->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    for (int i = 0; i < r->n; i++) {
        sampler_free(r->seqs[i].smp);
        kv_free(r->seqs[i].kv);
        free(r->seqs[i].toks);
        free(r->seqs[i].embd);
        grammar_state_free(r->seqs[i].gs);
    }
    if (r->r.release) r->r.release(r->r.release_arg);
    free(r->seqs);
    free(r->bias);
    free(r);
}

/* q leaves the engine: blocks freed, sampler freed; the request goes when
 * its last sample does */
static void seq_done(sched *s, sseq *q) {
    sched_req *r = q->req;
    if (q->state == SQ_RUNNING) run_remove(s, q);
    else if (q->state == SQ_WAITING) wait_remove(s, q);
    if (q->index == 0 && !r->admitted) {
        s->n_waiting_reqs--; /* leaves before it ever ran */
        r->admitted = true;
    }
    kv_free(q->kv);
    q->kv = NULL;
    sampler_free(q->smp);
    q->smp = NULL;
    q->state = SQ_DONE;
    if (q->index == 0 && r->forks_reserved) {
        s->reserved_slots -= r->n - 1;
        r->forks_reserved = false;
    }
    if (--r->n_open == 0) req_free(s, r);
}

/* finishes every open sample of r with `fin` (token -1) */
static void req_finish_all(sched *s, sched_req *r, sched_end fin) {
    const int n = r->n;
    for (int i = 0; i < n; i++) {
        sseq *q = &r->seqs[i];
        if (q->state == SQ_DONE) continue;
        const sched_event e = event_of(q, -1, fin);
        push_event(s, &e);
        const bool last = r->n_open == 1;
        seq_done(s, q);
        if (last) return; /* r is freed */
    }
}

static void refresh_pool_stats(sched *s);

/* ---- creation ----------------------------------------------------------- */

sched *sched_new(const model *m, const sched_params *p, kvant_status *st) {
    const model_config *c = &m->cfg;
    sched *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->m = m;
    s->p = *p;
    s->V = c->vocab_size;
    s->next_id = 1;
    const int B = p->block_size;
    uint64_t budget = (uint64_t)(p->kv_mem_mib * 1048576.0);
    int64_t n_blocks = 0;
    if (budget == 0) {
        n_blocks = (int64_t)p->max_seqs * ((p->max_ctx + B - 1) / B + 1); /* + 1: copy-on-write room */
        const uint64_t per_block =
            2ull * c->n_layers * B * kern_row_bytes(p->kv_type, (int64_t)c->n_kv_heads * c->head_dim) + 64;
        if ((uint64_t)n_blocks * per_block > (1ull << 30)) n_blocks = 0, budget = 1ull << 30;
    }
    const kv_pool_params pp = {.n_layers = c->n_layers, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
                               .type = p->kv_type, .block_size = B, .n_blocks = n_blocks,
                               .budget_bytes = budget, .max_ctx = p->max_ctx, .max_seqs = p->max_seqs,
                               .prefix_cache = p->prefix_cache};
    /* one pool, or (sliding-window models) a second one for the local layers, sized for their windows */
    if (model_kv_pools_new(m, &pp, p->max_batch_tokens, &s->pool, &s->lpool, st)) goto fail;
    if (!(s->work = model_work_new(m, p->max_batch_tokens, p->max_ctx, MODEL_ATTN_FLASH, st))) goto fail;
    s->logits = malloc((size_t)p->max_seqs * s->V * sizeof(float));
    s->lp_scratch = malloc((size_t)s->V * sizeof(float));
    s->fork_row = malloc((size_t)s->V * sizeof(float));
    s->gmask = malloc((size_t)s->V);
    s->run = calloc((size_t)p->max_seqs, sizeof *s->run);
    s->seg = calloc((size_t)p->max_seqs, sizeof *s->seg);
    s->seg_seq = calloc((size_t)p->max_seqs, sizeof *s->seg_seq);
    s->ev_cap = 2 * p->max_seqs + 64;
    s->ev = malloc((size_t)s->ev_cap * sizeof *s->ev);
    if (!s->logits || !s->lp_scratch || !s->fork_row || !s->run || !s->seg || !s->seg_seq || !s->ev) goto oom;
    refresh_pool_stats(s);
    s->chunk_budget = p->target_step_ms > 0 ? (p->max_batch_tokens < 64 ? p->max_batch_tokens : 64)
                                            : p->max_batch_tokens;
    return s;
oom:
    core_fail(st, KVANT_ERR_NOMEM, "engine: out of memory");
fail:
    sched_free(s);
    return NULL;
}

void sched_free(sched *s) {
    if (!s) return;
    while (s->reqs) req_free(s, s->reqs);
    for (int i = 0; i < s->ev_count; i++) free(s->ev[(s->ev_head + i) % s->ev_cap].embedding);
    kv_pool_free(s->pool);
    kv_pool_free(s->lpool);
    model_work_free(s->work);
    free(s->logits);
    free(s->lp_scratch);
    free(s->fork_row);
    free(s->gmask);
    free(s->run);
    free(s->seg);
    free(s->seg_seq);
    free(s->ev);
    free(s);
}

/* ---- submit / cancel ---------------------------------------------------- */

int64_t sched_submit(sched *s, const int32_t *prompt, int n_prompt, const sched_request *r, kvant_status *st) {
    const sample_params *sp = &r->sampling;
    const int n = r->n > 0 ? r->n : 1;
    if (n_prompt <= 0 || !prompt) return core_fail(st, KVANT_ERR_ARG, "empty prompt"), -1;
    if (r->embed && (n != 1 || r->max_tokens != 0 || r->logprobs))
        return core_fail(st, KVANT_ERR_ARG, "an embedding request has n 1, max_tokens 0 and no logprobs"), -1;
    if (r->max_tokens <= 0 && !r->embed) return core_fail(st, KVANT_ERR_ARG, "max_tokens must be > 0"), -1;
    if ((int64_t)n_prompt + r->max_tokens > s->p.max_ctx)
        return core_fail(st, KVANT_ERR_ARG, "prompt (%d tokens) + max_tokens (%d) > context (%d)", n_prompt,
                         r->max_tokens, s->p.max_ctx), -1;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= s->V)
            return core_fail(st, KVANT_ERR_ARG, "token id %d out of range [0, %d)", prompt[i], s->V), -1;
    if (n > s->p.max_seqs) return core_fail(st, KVANT_ERR_ARG, "n = %d > max_seqs (%d)", n, s->p.max_seqs), -1;
    if (r->logprobs < 0 || r->logprobs > SCHED_MAX_LOGPROBS)
        return core_fail(st, KVANT_ERR_ARG, "logprobs must be in 0..%d", SCHED_MAX_LOGPROBS), -1;
    if (!r->embed && (!(sp->top_p > 0 && sp->top_p <= 1) || !(sp->min_p >= 0 && sp->min_p <= 1) ||
                      !(sp->repeat_penalty > 0) || sp->repeat_last_n < 0 || sp->repeat_last_n > 1 << 16 ||
                      !(sp->temperature >= 0) || sp->top_k < 0))
        return core_fail(st, KVANT_ERR_ARG, "bad sampling settings (temperature >= 0, top_k >= 0, top_p in (0, 1], "
                                            "min_p in [0, 1], repeat_penalty > 0)"), -1;
    if (!r->embed && (!isfinite(sp->presence_penalty) || !isfinite(sp->frequency_penalty) || sp->n_bias < 0 ||
                      sp->n_bias > s->V || (sp->n_bias && !sp->bias)))
        return core_fail(st, KVANT_ERR_ARG, "bad sampling settings (finite presence and frequency penalties, "
                                            "at most one logit bias per vocabulary entry)"), -1;
    for (int i = 0; !r->embed && i < sp->n_bias; i++)
        if (sp->bias[i].token < 0 || sp->bias[i].token >= s->V || !isfinite(sp->bias[i].bias))
            return core_fail(st, KVANT_ERR_ARG, "logit bias: token %d out of range [0, %d) or bias not finite",
                             (int)sp->bias[i].token, s->V), -1;
    const int B = s->pool->block_size;
    if ((int64_t)(n_prompt + r->max_tokens + B - 1) / B > s->pool->n_blocks)
        return core_fail(st, KVANT_ERR_ARG, "prompt + max_tokens need more KV blocks than the pool has (%d)",
                         (int)s->pool->n_blocks), -1;
    if (s->n_waiting_reqs >= s->p.max_waiting)
        return core_fail(st, KVANT_ERR_FULL, "queue full (%d requests waiting)", s->n_waiting_reqs), -1;

    sched_req *q = calloc(1, sizeof *q);
    if (!q) goto oom;
    q->r = *r;
    q->r.sampling.bias = NULL; /* the request keeps its own copy (samplers are made at admission) */
    q->r.sampling.n_bias = r->embed ? 0 : sp->n_bias;
    if (q->r.sampling.n_bias) {
        if (!(q->bias = malloc((size_t)sp->n_bias * sizeof *q->bias))) goto oom;
        memcpy(q->bias, sp->bias, (size_t)sp->n_bias * sizeof *q->bias);
        q->r.sampling.bias = q->bias;
    }
    q->n = q->n_open = n;
    q->n_prompt = n_prompt;
    q->seqs = calloc((size_t)n, sizeof *q->seqs);
    if (!q->seqs) goto oom;
    for (int i = 0; i < n; i++) {
        sseq *x = &q->seqs[i];
        x->req = q;
        x->index = i;
        x->state = SQ_PARKED;
        x->logit_row = -1;
        if (!(x->toks = malloc((size_t)(n_prompt + r->max_tokens) * sizeof(int32_t)))) goto oom;
        if (r->embed && !(x->embd = calloc((size_t)s->m->cfg.dim, sizeof(double)))) goto oom;
        if (r->grammar && !(x->gs = grammar_state_new(r->grammar, st))) goto oom;
        memcpy(x->toks, prompt, (size_t)n_prompt * sizeof(int32_t));
        x->n_toks = n_prompt;
    }
    q->id = s->next_id++;
    q->next = s->reqs;
    if (s->reqs) s->reqs->prev = q;
    s->reqs = q;
    wait_push(s, &q->seqs[0], false);
    s->n_waiting_reqs++;
    core_ok(st);
    return q->id;
oom:
    if (q) {
        if (q->seqs)
            for (int i = 0; i < n; i++)
                free(q->seqs[i].toks), free(q->seqs[i].embd), grammar_state_free(q->seqs[i].gs);
        free(q->seqs);
        free(q->bias);
        free(q);
    }
    return core_fail(st, KVANT_ERR_NOMEM, "out of memory"), -1;
}

void sched_cancel(sched *s, int64_t id) {
    sched_req *r = s->reqs;
    while (r && r->id != id) r = r->next;
    if (!r) return;
    if (s->in_forward) { /* its sequences may be in the batch: after the step */
        r->cancelled = true;
        s->pending_cancel = true;
        return;
    }
    req_finish_all(s, r, SCHED_FINISH_CANCELLED);
    refresh_pool_stats(s);
}

static void apply_cancels(sched *s) {
    if (!s->pending_cancel) return;
    s->pending_cancel = false;
    for (sched_req *r = s->reqs, *next; r; r = next) {
        next = r->next;
        if (r->cancelled) req_finish_all(s, r, SCHED_FINISH_CANCELLED);
    }
}

/* ---- planning ------------------------------------------------------------ */

static int pending(const sseq *q) { return q->n_toks - q->kv->n_pos; }

static kv_seq *kvs(const sseq *q) { return kv_paged_store_seq(q->kv); }

/* the largest chunk <= want that pool's free blocks can hold for seq */
static int fit_pool(kv_pool *pool, const kv_seq *seq, int want) {
    const int64_t avail = kv_pool_n_available(pool);
    int c = want;
    while (c > 0 && kv_seq_blocks_needed(pool, seq, c) > avail) {
        const int64_t slack = (int64_t)kv_seq_capacity(pool, seq) - kv_seq_len(seq);
        const int64_t cap = slack + avail * pool->block_size;
        c = cap < c ? (int)cap : c - pool->block_size;
    }
    return c > 0 ? c : 0;
}

/* ... in both pools of a sliding-window model */
static int fit_chunk(sched *s, const sseq *q, int want) {
    int c = fit_pool(s->pool, kvs(q), want);
    if (s->lpool && c > 0) c = fit_pool(s->lpool, kv_paged_store_local_seq(q->kv), c);
    return c;
}

static void preempt(sched *s, sseq *q) {
    run_remove(s, q);
    kv_free(q->kv);
    q->kv = NULL;
    if (q->embd) memset(q->embd, 0, (size_t)s->m->cfg.dim * sizeof(double)); /* recomputed from its first token */
    if (q->index == 0 && q->req->forks_reserved) { /* forks come after its re-prefill */
        s->reserved_slots -= q->req->n - 1;
        q->req->forks_reserved = false;
    }
    wait_push(s, q, true);
    s->st.preempted_total++;
}

static void add_segment(sched *s, sseq *q, int n) {
    kvant_status st;
    kvant_code rc = kv_reserve(q->kv, n, &st); /* fits: checked by the caller */
    CORE_ASSERT(rc == KVANT_OK);
    const int at = q->kv->n_pos;
    const bool last = n == pending(q) && !q->embd;
    s->seg[s->n_seg] = (model_segment){q->kv, q->toks + at, n, last ? MODEL_LOGITS_LAST : MODEL_LOGITS_NONE, q->embd};
    s->seg_seq[s->n_seg++] = q;
    q->batch_n = n;
    s->batch_T += n;
}

/* admits the waiting head; false if it does not fit now */
static bool admit(sched *s) {
    sseq *q = s->wait_head;
    sched_req *r = q->req;
    const bool fresh_fan = q->index == 0 && r->n > 1 && !r->forked;
    const int slots = 1 + (fresh_fan ? r->n - 1 : 0);
    if (s->n_run + s->reserved_slots + slots > s->p.max_seqs) return false;
    const int B = s->pool->block_size;
    /* blocks for every token it has, plus one per sample to grow into; an
     * idle engine admits whatever fits at all (submit made sure the whole
     * sequence fits the pool), so nothing waits forever */
    const int64_t need = (q->n_toks + B - 1) / B, avail = kv_pool_n_available(s->pool);
    if (avail < need + slots && !(s->n_run == 0 && avail >= need)) return false;
    kvant_status st;
    if (!q->smp && !q->embd) { /* an embedding samples nothing */
        const sample_params *sp = &r->r.sampling;
        sample_params p = *sp;
        p.seed += (uint64_t)q->index;
        if (!(q->smp = sampler_new(&p, s->V, &st))) return false; /* out of memory: retried later */
        for (int i = 0; i < q->n_toks; i++) /* the prompt, then what it generated before */
            (i < r->n_prompt ? sampler_accept_prompt : sampler_accept)(q->smp, q->toks[i]);
    }
    if (!(q->kv = model_kv_store_new(s->m, s->pool, s->lpool, s->p.max_batch_tokens, false, &st))) return false;
    /* an embedding needs every token's hidden state: no prefix-cache skip */
    const int hit = s->p.prefix_cache && !q->embd ? kv_prefix_match_tokens(q->kv, q->toks, q->n_toks) : 0;
    if (q->index == 0 && !r->admitted) {
        r->n_cached = hit;
        r->admitted = true;
        s->n_waiting_reqs--;
    }
    wait_remove(s, q);
    q->state = SQ_RUNNING;
    s->run[s->n_run++] = q;
    if (fresh_fan) {
        s->reserved_slots += r->n - 1;
        r->forks_reserved = true;
    }
    return true;
}

int sched_plan(sched *s) {
    apply_cancels(s);
    s->n_seg = s->batch_T = 0;
    const int budget = s->p.max_batch_tokens;

    /* 1. decode: one token for every running sequence that has sampled */
    for (int i = 0; i < s->n_run && s->batch_T < budget; i++) {
        sseq *q = s->run[i];
        q->batch_n = 0;
        if (pending(q) != 1) continue;
        bool gone = false;
        while (!gone && fit_chunk(s, q, 1) < 1) {
            sseq *victim = s->run[s->n_run - 1]; /* newest; never one already in the batch */
            gone = victim == q;
            preempt(s, victim);
        }
        if (!gone) add_segment(s, q, 1);
    }
    for (int i = 0; i < s->n_run; i++)
        if (pending(s->run[i]) != 1) s->run[i]->batch_n = 0;

    /* 2. prompt chunks of running sequences, then 3. admission */
    /* the chunk budget protects decoders' inter-token gaps: with none in
     * the batch a step may take the whole token budget */
    s->budgeted = s->batch_T > 0;
    int chunk_left = budget - s->batch_T;
    if (s->budgeted && s->chunk_budget < chunk_left) chunk_left = s->chunk_budget;
    for (;;) {
        for (int i = 0; i < s->n_run && chunk_left > 0; i++) {
            sseq *q = s->run[i];
            if (q->batch_n || pending(q) < 1) continue;
            const int want = pending(q) < chunk_left ? pending(q) : chunk_left;
            const int c = fit_chunk(s, q, want);
            if (c <= 0) continue;
            add_segment(s, q, c);
            chunk_left -= c;
        }
        while (chunk_left > 0 && s->wait_head && s->n_run < s->p.max_seqs && admit(s)) {
            sseq *q = s->run[s->n_run - 1];
            q->batch_n = 0;
            const int want = pending(q) < chunk_left ? pending(q) : chunk_left;
            const int c = fit_chunk(s, q, want);
            if (c <= 0) break;
            add_segment(s, q, c);
            chunk_left -= c;
        }
        /* every running sequence stuck on blocks (prefills holding the pool):
         * give the newest one's blocks to the older ones */
        if (s->batch_T > 0 || s->n_run <= 1) break;
        preempt(s, s->run[s->n_run - 1]);
    }
    s->in_forward = s->batch_T > 0;
    return s->batch_T;
}

kvant_code sched_run(sched *s, kvant_status *st) {
    if (s->n_seg == 0) return core_ok(st), KVANT_OK;
    int row = 0;
    for (int i = 0; i < s->n_seg; i++)
        s->seg_seq[i]->logit_row = s->seg[i].logits == MODEL_LOGITS_LAST ? row++ : -1;
    return model_forward_batch(s->m, s->work, s->seg, s->n_seg, s->logits, st);
}

/* ---- sampling and events ---------------------------------------------------- */

/* log-probabilities of the raw logits (temperature 1): the chosen token's
 * and the top n alternatives (the first is the most likely) */
static void logprobs_of(float *x, int V, int n, int32_t token, sched_event *e) {
    float mx = x[0];
    for (int i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    int cnt = 0; /* insertion into a sorted top-n */
    for (int i = 0; i < V; i++) {
        int j;
        if (cnt < n) j = cnt++;
        else if (x[i] > x[e->top_tokens[n - 1]]) j = n - 1;
        else continue;
        while (j > 0 && x[i] > x[e->top_tokens[j - 1]]) {
            e->top_tokens[j] = e->top_tokens[j - 1];
            j--;
        }
        e->top_tokens[j] = i;
    }
    while (cnt > 0 && x[e->top_tokens[cnt - 1]] == -INFINITY) cnt--; /* masked (a grammar's): no alternative */
    e->n_top = cnt;
    for (int k = 0; k < e->n_top; k++) e->top_logprobs[k] = x[e->top_tokens[k]];
    const float lt = x[token];
    /* log-sum-exp; x becomes the exps (a vector exp at the avx2 tier) */
    const double lse = mx + log(kern_exp_sum(x, x, V, mx, 1.0f));
    e->logprob = (float)(lt - lse);
    for (int k = 0; k < e->n_top; k++) e->top_logprobs[k] = (float)(e->top_logprobs[k] - lse);
}

/* samples q's next token from row (modified), reports it, finishes q at
 * EOS or max_tokens */
static void finish_now(sched *s, sseq *q, sched_end fin) {
    sched_event e = event_of(q, -1, fin);
    push_event(s, &e);
    seq_done(s, q);
}

/* structured outputs: only the tokens q's grammar accepts keep their logits
 * (the end-of-generation tokens only where it can end); false when none does */
static bool grammar_restrict(sched *s, sseq *q, float *row) {
    const grammar_vocab *v = q->req->r.gvocab;
    const int nv = grammar_vocab_n_tokens(v);
    if (grammar_mask(q->gs, v, s->gmask) <= 0) return false;
    grammar_apply_mask(s->gmask, row, nv < s->V ? nv : s->V);
    for (int i = nv; i < s->V; i++) row[i] = -INFINITY; /* ids past the tokenizer's */
    return true;
}

static void sample_next(sched *s, sseq *q, float *row) {
    const sched_req *r = q->req;
    const int nlp = r->r.logprobs;
    if (q->gs && !grammar_restrict(s, q, row)) {
        finish_now(s, q, SCHED_FINISH_ERROR);
        return;
    }
    if (nlp > 0) memcpy(s->lp_scratch, row, (size_t)s->V * sizeof(float)); /* as the grammar leaves them */
    const int32_t token = sampler_sample(q->smp, row);
    sampler_accept(q->smp, token);
    /* with a grammar, an end-of-generation token was allowed only where it may end */
    if (tok_is_eog(s->m->tok, token) && (!r->r.ignore_eos || q->gs)) {
        finish_now(s, q, SCHED_FINISH_EOS);
        return;
    }
    if (q->gs && !grammar_accept(q->gs, r->r.gvocab, token)) {
        finish_now(s, q, SCHED_FINISH_ERROR);
        return;
    }
    q->toks[q->n_toks++] = token;
    q->n_gen++;
    const bool done = q->gs && grammar_is_done(q->gs); /* nothing can follow: the reply is complete */
    const sched_end fin = done ? SCHED_FINISH_NONE : q->n_gen >= r->r.max_tokens ? SCHED_FINISH_LENGTH
                                                                                   : SCHED_FINISH_NONE;
    sched_event e = event_of(q, token, fin);
    if (nlp > 0) logprobs_of(s->lp_scratch, s->V, nlp, token, &e);
    push_event(s, &e);
    if (done) finish_now(s, q, SCHED_FINISH_EOS);
    else if (fin) seq_done(s, q);
}

/* sample 0 of r has its prompt's logits: make samples 1..n-1 share its blocks */
static void fork_samples(sched *s, sseq *q0, const float *row) {
    sched_req *r = q0->req;
    r->forked = true;
    if (r->forks_reserved) {
        s->reserved_slots -= r->n - 1;
        r->forks_reserved = false;
    }
    for (int i = 1; i < r->n; i++) {
        sseq *q = &r->seqs[i];
        kvant_status st;
        const sample_params *sp = &r->r.sampling;
        sample_params p = *sp;
        p.seed += (uint64_t)i;
        q->kv = q0->kv->ops->fork(q0->kv, &st);
        q->smp = sampler_new(&p, s->V, &st);
        if (!q->kv || !q->smp) {
            sched_event e = event_of(q, -1, SCHED_FINISH_ERROR);
            push_event(s, &e);
            q->state = SQ_PARKED; /* seq_done frees what exists */
            seq_done(s, q);
            continue;
        }
        for (int k = 0; k < q->n_toks; k++)
            (k < r->n_prompt ? sampler_accept_prompt : sampler_accept)(q->smp, q->toks[k]);
        q->state = SQ_RUNNING;
        s->run[s->n_run++] = q;
        memcpy(s->fork_row, row, (size_t)s->V * sizeof(float)); /* each sampler edits its copy */
        sample_next(s, q, s->fork_row);
    }
}

void sched_finish(sched *s, kvant_code rc, double step_ms) {
    s->in_forward = false;
    if (rc != KVANT_OK) {
        for (int i = 0; i < s->n_seg; i++) s->seg_seq[i]->req->failed = true;
        for (sched_req *r = s->reqs, *next; r; r = next) {
            next = r->next;
            if (r->failed) req_finish_all(s, r, SCHED_FINISH_ERROR);
        }
        s->n_seg = 0;
    }
    int decode = 0;
    for (int i = 0; i < s->n_seg; i++) {
        sseq *q = s->seg_seq[i];
        if (s->seg[i].n == 1 && q->n_gen > 0 && pending(q) == 0) decode++;
    }
    for (int i = 0; i < s->n_seg; i++) {
        sseq *q = s->seg_seq[i];
        q->batch_n = 0;
        if (q->embd && pending(q) == 0 && !q->req->cancelled) { /* the whole prompt pooled */
            sched_event e = event_of(q, -1, SCHED_FINISH_EMBEDDING);
            if ((e.embedding = malloc((size_t)s->m->cfg.dim * sizeof(float))))
                model_embd_finish(s->m, q->embd, q->n_toks, e.embedding);
            else e.finish = SCHED_FINISH_ERROR;
            push_event(s, &e);
            seq_done(s, q);
            continue;
        }
        if (q->logit_row < 0 || q->req->cancelled) continue;
        float *row = s->logits + (size_t)q->logit_row * s->V;
        q->logit_row = -1;
        if (q->index == 0 && q->req->n > 1 && !q->req->forked) fork_samples(s, q, row);
        sample_next(s, q, row);
    }
    apply_cancels(s);

    /* statistics and the adaptive chunk budget */
    if (s->batch_T > 0) {
        s->st.steps++;
        s->st.tokens_decode += decode;
        s->st.tokens_prefill += s->batch_T - decode;
        s->st.last_batch_tokens = s->batch_T;
        s->st.last_step_ms = step_ms;
        const int prefill = s->batch_T - decode;
        if (prefill == 0) /* decode-only step time, smoothed */
            s->decode_ms = s->decode_ms > 0 ? 0.7 * s->decode_ms + 0.3 * step_ms : step_ms;
        /* a target the decoders alone already miss cannot be met: then a
         * prompt chunk may add half a decode step (the prompt still moves) */
        const double target = s->p.target_step_ms > 1.5 * s->decode_ms ? s->p.target_step_ms : 1.5 * s->decode_ms;
        if (s->p.target_step_ms > 0 && s->budgeted && prefill > 0 && step_ms > 0 &&
            (prefill >= s->chunk_budget || step_ms > target))
            s->chunk_budget = sched_next_chunk_budget(s->chunk_budget, prefill, step_ms, s->decode_ms, target,
                                                      s->p.max_batch_tokens);
    }
    s->n_seg = s->batch_T = 0;
    refresh_pool_stats(s);
}

int sched_next_chunk_budget(int budget, int prefill, double step_ms, double decode_ms, double target,
                            int max_tokens) {
    /* step = d + c * prompt tokens: d the decoders' part (their smoothed
     * decode-only step, when known and below this step), c this step's cost
     * per prompt token */
    const double d = decode_ms > 0 && decode_ms < step_ms ? decode_ms : 0;
    const double c = (step_ms - d) / prefill;
    double want = (SCHED_AIM * target - d) / c;
    if (want > 2.0 * budget) want = 2.0 * budget;
    if (want < 0.5 * budget) want = 0.5 * budget;
    int nb = (int)want;
    return nb < 16 ? 16 : nb > max_tokens ? max_tokens : nb;
}

static void refresh_pool_stats(sched *s) {
    kv_pool_stats ps;
    kv_pool_stats_get(s->pool, &ps);
    s->st.blocks_total = ps.blocks_total;
    s->st.blocks_used = ps.blocks_used;
    s->st.blocks_free = ps.blocks_free;
    s->st.blocks_cached = ps.blocks_cached;
    s->st.prefix_hit_tokens = ps.prefix_hit_tokens;
    if (s->lpool) {
        kv_pool_stats_get(s->lpool, &ps);
        s->st.swa_blocks_total = ps.blocks_total;
        s->st.swa_blocks_used = ps.blocks_used;
        s->st.swa_blocks_free = ps.blocks_free;
        s->st.swa_blocks_cached = ps.blocks_cached;
    }
}

bool sched_has_work(const sched *s) { return s->n_run > 0 || s->n_waiting > 0 || s->ev_count > 0; }

void sched_get_stats(const sched *s, sched_stats *o) {
    *o = s->st;
    o->running = s->n_run;
    o->waiting = s->n_waiting;
    o->chunk_budget = s->chunk_budget;
}
