/* engine.c - the serving engine of the public API (include/kvant_infer.h,
 * "engine") over sched/: one mutex guards the scheduler; a step holds it to
 * plan the batch and to consume its logits, but not during the forward
 * pass, so submit / cancel / stats from other threads wait at most for the
 * bookkeeping, never for the model. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "kernels/types.h"
#include "sched/sched.h"

_Static_assert(SCHED_MAX_LOGPROBS == KVANT_MAX_LOGPROBS, "sched/ reports as many alternatives as the API");
_Static_assert((int)SCHED_FINISH_ERROR == (int)KVANT_FINISH_ERROR && (int)SCHED_FINISH_EOS == (int)KVANT_FINISH_EOS &&
                   (int)SCHED_FINISH_LENGTH == (int)KVANT_FINISH_LENGTH &&
                   (int)SCHED_FINISH_CANCELLED == (int)KVANT_FINISH_CANCELLED &&
                   (int)SCHED_FINISH_EMBEDDING == (int)KVANT_FINISH_EMBEDDING,
               "sched/ numbers the finish reasons as the API");

static kvant_event event_of(const sched_event *e) {
    kvant_event o = {.id = e->id, .index = e->index, .token = e->token, .logprob = e->logprob, .n_top = e->n_top,
                     .finish = (kvant_finish)e->finish, .n_prompt = e->n_prompt, .n_generated = e->n_generated,
                     .n_cached = e->n_cached, .embedding = e->embedding};
    memcpy(o.top_tokens, e->top_tokens, sizeof o.top_tokens);
    memcpy(o.top_logprobs, e->top_logprobs, sizeof o.top_logprobs);
    return o;
}

struct kvant_engine {
    kvant_model *km;
    sched *s;
    sched_event *ev;       /* [max_seqs * 2] events popped per call, translated into the caller's array */
    int ev_cap;
    float **embd;          /* embeddings handed out by the last step (freed by the next) */
    int n_embd, cap_embd;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* signalled when work arrives */
};

kvant_engine_params kvant_engine_default(void) {
    return (kvant_engine_params){.max_seqs = 64, .max_batch_tokens = 512, .max_waiting = 1024, .kv_mem_mib = 0,
                                 .block_size = 16, .kv_type = KVANT_KV_F16, .max_ctx = 0, .prefix_cache = true,
                                 .target_step_ms = 0};
}

kvant_engine *kvant_engine_new(kvant_model *km, const kvant_engine_params *p, kvant_status *st) {
    const kvant_engine_params d = kvant_engine_default();
    if (!p) p = &d;
    const model *m = km->m;
    sched_params sp = {
        .max_seqs = p->max_seqs > 0 ? p->max_seqs : 64,
        .max_batch_tokens = p->max_batch_tokens > 0 ? p->max_batch_tokens : 512,
        .max_waiting = p->max_waiting > 0 ? p->max_waiting : 1024,
        .block_size = p->block_size > 0 ? p->block_size : 16,
        .max_ctx = p->max_ctx > 0 ? p->max_ctx : m->cfg.n_ctx_train,
        .kv_mem_mib = p->kv_mem_mib > 0 ? p->kv_mem_mib : 0,
        .prefix_cache = p->prefix_cache,
        .target_step_ms = p->target_step_ms > 0 ? p->target_step_ms : 0,
    };
    if ((sp.kv_type = api_kv_type(p->kv_type)) < 0) {
        core_fail(st, KVANT_ERR_ARG, "KV cache type %d is none of kvant_kv_type", (int)p->kv_type);
        return NULL;
    }
    if (sp.max_seqs > 4096 || sp.max_batch_tokens > 65536 || sp.block_size > 4096 || sp.max_ctx > (1 << 22)) {
        core_fail(st, KVANT_ERR_ARG, "engine limits out of range (max_seqs <= 4096, max_batch_tokens <= 65536)");
        return NULL;
    }
    /* every running sequence must be able to decode in one step */
    if (sp.max_batch_tokens < sp.max_seqs) sp.max_batch_tokens = sp.max_seqs;
    kvant_engine *e = calloc(1, sizeof *e);
    if (!e) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    e->km = km;
    e->ev_cap = 2 * sp.max_seqs + 16;
    if (!(e->ev = malloc((size_t)e->ev_cap * sizeof *e->ev))) {
        free(e);
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (!(e->s = sched_new(m, &sp, st))) {
        free(e->ev);
        free(e);
        return NULL;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    core_ok(st);
    return e;
}

void kvant_engine_free(kvant_engine *e) {
    if (!e) return;
    sched_free(e->s);
    free(e->ev);
    for (int i = 0; i < e->n_embd; i++) free(e->embd[i]);
    free(e->embd);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

int64_t kvant_engine_submit(kvant_engine *e, const int32_t *prompt, int n_prompt, const kvant_request *r,
                            kvant_status *st) {
    if (!r) return core_fail(st, KVANT_ERR_ARG, "no request settings"), -1;
    sched_request sr = {.max_tokens = r->max_tokens, .n = r->n, .ignore_eos = r->ignore_eos,
                        .logprobs = r->logprobs, .embed = r->embed};
    if (r->grammar && r->embed) return core_fail(st, KVANT_ERR_ARG, "an embedding request takes no grammar"), -1;
    sample_bias *bias;
    if (!api_sample_params(&r->sampling, &sr.sampling, &bias, st)) return -1;
    if (r->grammar) { /* the request's own reference, released by sched/ when it is freed */
        sr.grammar = api_grammar_of(r->grammar);
        sr.gvocab = api_grammar_vocab_of(r->grammar);
        sr.release = api_grammar_release;
        sr.release_arg = r->grammar;
        api_grammar_ref(r->grammar);
    }
    pthread_mutex_lock(&e->mu);
    const int64_t id = sched_submit(e->s, prompt, n_prompt, &sr, st); /* copies the bias */
    if (id <= 0 && sr.release) sr.release(sr.release_arg); /* refused: nothing keeps it */
    if (id > 0) pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    free(bias);
    return id;
}

void kvant_engine_cancel(kvant_engine *e, int64_t id) {
    pthread_mutex_lock(&e->mu);
    sched_cancel(e->s, id);
    pthread_cond_broadcast(&e->cv); /* its events are work for the loop */
    pthread_mutex_unlock(&e->mu);
}

/* keeps an event's embedding until the next step (false: out of memory, freed) */
static bool keep_embedding(kvant_engine *e, float *v) {
    if (e->n_embd == e->cap_embd) {
        const int cap = e->cap_embd ? 2 * e->cap_embd : 16;
        float **k = realloc(e->embd, (size_t)cap * sizeof *k);
        if (!k) return free(v), false;
        e->embd = k;
        e->cap_embd = cap;
    }
    e->embd[e->n_embd++] = v;
    return true;
}

int kvant_engine_step(kvant_engine *e, kvant_event *out, int max_out, kvant_status *st) {
    for (int i = 0; i < e->n_embd; i++) free(e->embd[i]); /* the last step's results are read */
    e->n_embd = 0;
    pthread_mutex_lock(&e->mu);
    const int T = sched_plan(e->s);
    pthread_mutex_unlock(&e->mu);
    kvant_code rc = KVANT_OK;
    double ms = 0;
    if (T > 0) { /* the forward pass, unlocked (see sched.h) */
        const double t0 = core_time_ms();
        rc = sched_run(e->s, st);
        ms = core_time_ms() - t0;
    }
    pthread_mutex_lock(&e->mu);
    if (T > 0) sched_finish(e->s, rc, ms);
    /* after an error its KVANT_FINISH_ERROR events wait for the next call */
    int n = 0;
    while (rc == KVANT_OK && n < max_out) { /* in pieces of ev_cap (the step's thread owns e->ev) */
        const int want = max_out - n < e->ev_cap ? max_out - n : e->ev_cap;
        const int got = sched_pop_events(e->s, e->ev, want);
        for (int i = 0; i < got; i++) {
            if (e->ev[i].embedding && !keep_embedding(e, e->ev[i].embedding))
                e->ev[i].embedding = NULL, e->ev[i].finish = SCHED_FINISH_ERROR;
            out[n + i] = event_of(&e->ev[i]);
        }
        n += got;
        if (got < want) break;
    }
    pthread_mutex_unlock(&e->mu);
    if (rc != KVANT_OK) return -1;
    core_ok(st);
    return n;
}

bool kvant_engine_wait(kvant_engine *e, int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    while (!sched_has_work(e->s) && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    const bool work = sched_has_work(e->s);
    pthread_mutex_unlock(&e->mu);
    return work;
}

void kvant_engine_get_stats(kvant_engine *e, kvant_engine_stats *out) {
    sched_stats s;
    pthread_mutex_lock(&e->mu);
    sched_get_stats(e->s, &s);
    pthread_mutex_unlock(&e->mu);
    *out = (kvant_engine_stats){.running = s.running, .waiting = s.waiting, .preempted_total = s.preempted_total,
                                .steps = s.steps, .tokens_prefill = s.tokens_prefill, .tokens_decode = s.tokens_decode,
                                .prefix_hit_tokens = s.prefix_hit_tokens, .blocks_total = s.blocks_total,
                                .blocks_used = s.blocks_used, .blocks_free = s.blocks_free,
                                .blocks_cached = s.blocks_cached, .swa_blocks_total = s.swa_blocks_total,
                                .swa_blocks_used = s.swa_blocks_used, .swa_blocks_free = s.swa_blocks_free,
                                .swa_blocks_cached = s.swa_blocks_cached, .last_batch_tokens = s.last_batch_tokens,
                                .last_step_ms = s.last_step_ms, .chunk_budget = s.chunk_budget};
}
