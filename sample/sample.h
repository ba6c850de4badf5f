/* sample/ - choosing the next token from logits.
 *
 * Chain (llama.cpp's default order): repetition penalty -> top-k -> top-p
 * -> min-p -> temperature -> draw with a seeded RNG.  temperature <= 0 is
 * greedy (argmax, lowest id on ties) after the penalty.  Same seed, same
 * logits: same token.  All buffers are allocated once at creation.
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
    float temperature;    /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off; > 1 penalizes recent tokens (llama.cpp rule) */
    int repeat_last_n;    /* tokens of history the penalty looks at */
    uint64_t seed;
} sample_params;

typedef struct sampler sampler;

sampler *sampler_new(const sample_params *p, int vocab_size, kvant_status *st);
void sampler_free(sampler *s);
/* Chooses a token; logits[vocab] are modified in place. */
int32_t sampler_sample(sampler *s, float *logits);
/* Records a token in the penalty history. */
void sampler_accept(sampler *s, int32_t token);
/* For tests: the tokens sampler_sample could return for these logits
 * (after the penalty; logits modified in place as there), in the order its
 * draw walks them (by logit descending when top-k / top-p cut the list,
 * else by id); returns their count.  ids: vocab entries. */
int sampler_support(sampler *s, float *logits, int32_t *ids);

/* building blocks, exposed for tests */
int32_t sample_argmax(const float *x, int n);
uint64_t sample_rng_next(uint64_t *state); /* xorshift64*; state != 0 */
float sample_rng_float(uint64_t *state);   /* uniform in [0, 1) */

#endif
