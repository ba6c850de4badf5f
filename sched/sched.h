/* sched/ - continuous batching: the serving engine's scheduler.
 *
 * Requests (a prompt + sampling settings + n samples) queue as waiting
 * sequences.  Each step builds ONE batch for model_forward_batch:
 *
 *   1. decode: every running sequence with one token to compute (the token
 *      it sampled last) gets that token, oldest first;
 *   2. prompt chunks: running sequences still prefilling get chunks of their
 *      remaining tokens, oldest first, within the chunk budget (chunked
 *      prefill with decode piggybacking, as Sarathi-Serve);
 *   3. admission: waiting sequences (preempted ones first, then new requests
 *      in arrival order) join while the chunk budget, the sequence slots
 *      (max_seqs) and the free KV blocks allow (a sequence is admitted only
 *      when blocks for all of its tokens so far are free); a prefix-cache
 *      hit skips the cached prompt blocks.
 *
 * Token budget: decode tokens + prompt tokens <= max_batch_tokens, and,
 * when the step has decode tokens (whose inter-token gap a long prompt
 * would stretch), prompt tokens <= chunk_budget, which is max_batch_tokens, or, with
 * target_step_ms > 0, adapted after every step that prefilled
 * (sched_next_chunk_budget): step time = d + c * prompt tokens, with d the
 * decoders' own step (smoothed decode-only steps) and c measured on the
 * step just run; the next budget aims at SCHED_AIM x target (a long
 * prompt's later chunks attend over more positions, and step times are
 * noisy), moving at most x2 or /2 per step.  When decode-only
 * steps alone take more than target / 1.5 (a loaded machine, many
 * decoders), the target becomes 1.5 x their smoothed time, so a long prompt
 * still advances instead of shrinking to the 16-token floor.
 *
 * KV memory is one paged pool (kv/paged.h).  When a decode token finds no
 * free block, the NEWEST running sequence is preempted: its blocks are
 * freed, it goes back to the front of the waiting queue keeping its tokens
 * (prompt + generated) and its sampler, and is later recomputed from them;
 * the forward pass gives each row the same bits whatever the batch, so its
 * output is exactly what it would have been without pressure.
 *
 * n > 1: sample 0 prefills the prompt; when its prompt logits arrive the
 * other samples are forked from it (they share the prompt's blocks,
 * copy-on-write), each with its own sampler seeded seed + index.
 *
 * A step is three calls, so the forward pass can run without the engine's
 * lock: sched_plan (builds the batch, reserves its blocks), sched_run (the
 * forward pass; touches only the batch's sequences and the pool),
 * sched_finish (samples, reports events, frees finished sequences, applies
 * cancellations that came in meanwhile).  Everything else (submit, cancel,
 * stats, events) may be called between them; none of these is thread-safe
 * by itself: api/engine.c holds a mutex around every call but sched_run.
 *
 * Memory: the pool, the work buffers, the logits and the batch arrays are
 * allocated once in sched_new; per request, its token arrays and (at
 * admission) its samplers; nothing per step or per token (the event queue
 * grows only when a caller leaves events unread). */
#ifndef KVANT_SCHED_H
#define KVANT_SCHED_H

#include "core/core.h"
#include "model/model.h"
#include "sample/sample.h"

/* What the engine's public types carry (api/engine.c translates; kvant_engine_* in
 * include/kvant_infer.h documents each field). */
#define SCHED_MAX_LOGPROBS 8
typedef struct {
    sample_params sampling;    /* sample i is seeded sampling.seed + i; the logit bias
                                  is copied at submit */
    int max_tokens;            /* > 0 */
    int n;                     /* samples (0: 1) */
    bool ignore_eos;
    int logprobs;              /* 0..SCHED_MAX_LOGPROBS */
    bool embed;                /* the prompt's pooled embedding, no tokens (n 1, max_tokens 0) */
    /* structured outputs: the tokens follow this grammar over these byte
     * strings (grammar/grammar.h); release(release_arg) when the request
     * is freed (the caller's reference) */
    const struct grammar *grammar;
    const struct grammar_vocab *gvocab;
    void (*release)(void *);
    void *release_arg;
} sched_request;

typedef enum {
    SCHED_FINISH_NONE = 0,
    SCHED_FINISH_LENGTH,
    SCHED_FINISH_EOS,
    SCHED_FINISH_CANCELLED,
    SCHED_FINISH_ERROR,
    SCHED_FINISH_EMBEDDING,    /* an embed request's one event: embedding holds it */
} sched_end;

typedef struct {
    int64_t id;
    int index;
    int32_t token;             /* -1: the event only finishes the sample */
    float logprob;
    int n_top;
    int32_t top_tokens[SCHED_MAX_LOGPROBS];
    float top_logprobs[SCHED_MAX_LOGPROBS];
    sched_end finish;
    int n_prompt, n_generated, n_cached;
    float *embedding;          /* SCHED_FINISH_EMBEDDING: [dim], malloc'd; the popper owns it */
} sched_event;

typedef struct {
    int running, waiting, preempted_total;
    int64_t steps, tokens_prefill, tokens_decode;
    int64_t prefix_hit_tokens;
    int64_t blocks_total, blocks_used, blocks_free, blocks_cached;
    int64_t swa_blocks_total, swa_blocks_used, swa_blocks_free, swa_blocks_cached;
    int last_batch_tokens;
    double last_step_ms;
    int chunk_budget;
} sched_stats;

typedef struct {
    int max_seqs;           /* > 0 */
    int max_batch_tokens;   /* >= max_seqs */
    int max_waiting;        /* > 0 */
    int block_size;         /* > 0 */
    int kv_type;            /* KT_F32, KT_F16, KT_Q8_0 */
    int max_ctx;            /* > 0 */
    double kv_mem_mib;      /* 0: max_seqs x max_ctx tokens, capped at 1 GiB */
    bool prefix_cache;
    double target_step_ms;  /* > 0: adaptive chunk budget */
} sched_params;

typedef struct sched sched;

sched *sched_new(const model *m, const sched_params *p, kvant_status *st);
/* frees every request (no events) */
void sched_free(sched *s);

/* as kvant_engine_submit / kvant_engine_cancel */
int64_t sched_submit(sched *s, const int32_t *prompt, int n_prompt, const sched_request *r, kvant_status *st);
void sched_cancel(sched *s, int64_t id);

/* Builds the next batch; returns its token count (0: nothing to run). */
int sched_plan(sched *s);
/* Runs the planned batch (no-op for an empty one); returns its status. */
kvant_code sched_run(sched *s, kvant_status *st);
/* Consumes the batch's logits; rc is sched_run's result (on an error every
 * request in the batch finishes with SCHED_FINISH_ERROR). */
void sched_finish(sched *s, kvant_code rc, double step_ms);

/* Moves up to max_out queued events to out; returns how many. */
int sched_pop_events(sched *s, sched_event *out, int max_out);
/* running or waiting sequences, or unread events */
bool sched_has_work(const sched *s);
void sched_get_stats(const sched *s, sched_stats *out);

/* The adaptive chunk budget's rule (see the top of this file), pure for
 * tests: the budget after a step of step_ms that ran `prefill` prompt
 * tokens under `budget`; decode_ms the smoothed decode-only step (0:
 * unknown); result in [16, max_tokens]. */
#define SCHED_AIM 0.9
int sched_next_chunk_budget(int budget, int prefill, double step_ms, double decode_ms, double target,
                            int max_tokens);

#endif
