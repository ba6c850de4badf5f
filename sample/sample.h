/* sample/ - choosing the next token from logits.
 *
 * Chain (llama.cpp's default order): logit bias -> repetition penalty ->
 * presence / frequency penalties -> top-k -> top-p -> min-p -> temperature
 * -> draw with a seeded RNG.  temperature <= 0 is greedy (argmax, lowest id
 * on ties) after the bias and the penalties.  Same seed, same logits: same
 * token.  All buffers are allocated once at creation.
 *
 * The penalties look at different tokens:
 *   repetition (llama.cpp's rule): the last repeat_last_n tokens accepted,
 *     prompt (sampler_accept_prompt) and generated (sampler_accept) alike;
 *     each such token's positive logit is divided by the penalty, a
 *     negative one multiplied, once however often it occurs;
 *   presence / frequency (OpenAI's rule): the tokens generated so far in
 *     this sequence (sampler_accept only; no window, the prompt not
 *     counted): logit[t] -= frequency * count[t] + presence * (count[t] > 0).
 * Logit bias: bias[i].bias is added to logit[bias[i].token] before anything
 * else (OpenAI's logit_bias; -100 all but bans a token, +100 all but forces
 * it); entries for the same token add up.
 *
 * Cost: the draw walks the tokens top-k / top-p / min-p keep; the vocabulary
 * is sorted only where a cut needs the order, and then only its head: top-k
 * keeps a heap of k, top-p sorts the tokens within a widening logit gap of
 * the max until they hold top_p of the mass.  Plain temperature sampling
 * walks the vocabulary in id order (the same distribution as a walk in
 * sorted order; a given seed picks another token than a sorted walk would). */
#ifndef KVANT_SAMPLE_H
#define KVANT_SAMPLE_H

#include "core/core.h"

typedef struct {
    int32_t token;
    float bias;
} sample_bias;

typedef struct {
    float temperature;    /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off; > 1 penalizes recent tokens (llama.cpp rule) */
    int repeat_last_n;    /* tokens of history the penalty looks at */
    uint64_t seed;
    float presence_penalty;   /* 0: off; subtracted once from a token generated before */
    float frequency_penalty;  /* 0: off; subtracted per time a token was generated */
    const sample_bias *bias;  /* n_bias entries (copied by sampler_new); NULL: none */
    int n_bias;
} sample_params;

typedef struct sampler sampler;

/* KVANT_ERR_ARG for settings out of range (a bias token outside the
 * vocabulary, a penalty or bias not finite). */
sampler *sampler_new(const sample_params *p, int vocab_size, kvant_status *st);
void sampler_free(sampler *s);
/* Chooses a token; logits[vocab] are modified in place. */
int32_t sampler_sample(sampler *s, float *logits);
/* Records a generated token: the repetition history and the counts of the
 * presence / frequency penalties. */
void sampler_accept(sampler *s, int32_t token);
/* Records a prompt (context) token: the repetition history only. */
void sampler_accept_prompt(sampler *s, int32_t token);
/* For tests: the tokens sampler_sample could return for these logits
 * (after the bias and penalties; logits modified in place as there), in the order its
 * draw walks them (by logit descending when top-k / top-p cut the list,
 * else by id); returns their count.  ids: vocab entries. */
int sampler_support(sampler *s, float *logits, int32_t *ids);

/* The reference of the bias and penalties (the spec the sampler is tested
 * against, O(V x history)): logits[V] adjusted in place as sampler_sample
 * would before its cuts, for a sampler that accepted ctx[0..n_ctx) with
 * sampler_accept_prompt and then gen[0..n_gen) with sampler_accept. */
void sample_adjust_ref(const sample_params *p, float *logits, int V, const int32_t *ctx, int n_ctx,
                       const int32_t *gen, int n_gen);

/* building blocks, exposed for tests */
int32_t sample_argmax(const float *x, int n);
uint64_t sample_rng_next(uint64_t *state); /* xorshift64*; state != 0 */
float sample_rng_float(uint64_t *state);   /* uniform in [0, 1) */

#endif
