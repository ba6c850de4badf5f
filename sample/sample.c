/* sample.c - the sampling chain (see sample.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sample.h"

typedef struct {
    float logit;
    int32_t id;
} cand;

struct sampler {
    sample_params p;
    int n_vocab;
    cand *cands;        /* n_vocab candidates, reused every call */
    int32_t *history;   /* ring buffer of the last repeat_last_n tokens */
    int n_hist, hist_pos;
    uint64_t rng;
};

uint64_t sample_rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

float sample_rng_float(uint64_t *s) { return (float)(sample_rng_next(s) >> 40) / 16777216.0f; }

int32_t sample_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

sampler *sampler_new(const sample_params *p, int vocab_size, kvant_status *st) {
    if (vocab_size <= 0) {
        core_fail(st, KVANT_ERR_ARG, "sampler: vocabulary size %d", vocab_size);
        return NULL;
    }
    if (!(p->top_p > 0) || p->min_p < 0 || p->min_p > 1 || !(p->repeat_penalty > 0) || p->repeat_last_n < 0) {
        core_fail(st, KVANT_ERR_ARG, "sampler: top_p must be in (0, 1], min_p in [0, 1], repeat_penalty > 0");
        return NULL;
    }
    sampler *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->p = *p;
    s->n_vocab = vocab_size;
    s->cands = malloc((size_t)vocab_size * sizeof *s->cands);
    s->history = malloc((size_t)(p->repeat_last_n > 0 ? p->repeat_last_n : 1) * sizeof *s->history);
    if (!s->cands || !s->history) goto oom;
    /* splitmix64 of the seed, so seeds 0, 1, 2 ... give unrelated streams */
    s->rng = core_mix64(p->seed) | 1;
    return s;
oom:
    sampler_free(s);
    core_fail(st, KVANT_ERR_NOMEM, "sampler: out of memory");
    return NULL;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->cands);
    free(s->history);
    free(s);
}

void sampler_accept(sampler *s, int32_t token) {
    if (s->p.repeat_last_n <= 0) return;
    s->history[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % s->p.repeat_last_n;
    if (s->n_hist < s->p.repeat_last_n) s->n_hist++;
}

/* llama.cpp's rule: a seen token's positive logit is divided by the
 * penalty, a negative one multiplied (each token penalized once). */
static void apply_penalty(sampler *s, float *logits) {
    if (s->p.repeat_penalty == 1.0f || s->n_hist == 0) return;
    for (int i = 0; i < s->n_hist; i++) {
        const int32_t t = s->history[i];
        if (t < 0 || t >= s->n_vocab) continue;
        bool first = true; /* skip duplicates within the window */
        for (int j = 0; j < i; j++)
            if (s->history[j] == t) { first = false; break; }
        if (!first) continue;
        logits[t] = logits[t] > 0 ? logits[t] / s->p.repeat_penalty : logits[t] * s->p.repeat_penalty;
    }
}

static int cmp_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

int32_t sampler_sample(sampler *s, float *logits) {
    apply_penalty(s, logits);
    if (s->p.temperature <= 0.0f) return sample_argmax(logits, s->n_vocab);

    /* candidates sorted by logit (descending) */
    int n = s->n_vocab;
    for (int i = 0; i < n; i++) s->cands[i] = (cand){logits[i], i};
    qsort(s->cands, (size_t)n, sizeof *s->cands, cmp_desc);
    if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;

    /* probabilities at temperature 1 for top-p / min-p (as llama.cpp) */
    const float max = s->cands[0].logit;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)s->cands[i].logit - max);
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += exp((double)s->cands[i].logit - max) / sum;
            if (cum >= s->p.top_p) { n = i + 1; break; }
        }
    }
    if (s->p.min_p > 0.0f) {
        /* keep tokens with p >= min_p * p_max, i.e. logit >= max + log(min_p) */
        const double cut = max + log((double)s->p.min_p);
        int keep = 1;
        while (keep < n && s->cands[keep].logit >= cut) keep++;
        n = keep;
    }

    /* temperature, then draw */
    double total = 0;
    for (int i = 0; i < n; i++) total += exp(((double)s->cands[i].logit - max) / s->p.temperature);
    const double r = (double)sample_rng_float(&s->rng) * total;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += exp(((double)s->cands[i].logit - max) / s->p.temperature);
        if (r < acc) return s->cands[i].id;
    }
    return s->cands[n - 1].id;
}
