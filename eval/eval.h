/* eval/ - the arithmetic of evaluation: negative log-likelihood of a
 * target under logits, KL divergence between two next-token
 * distributions, and running statistics.  No model code: callers feed
 * logits.  eval/ppl.c drives models through the public inference API
 * (kvant_perplexity, kvant_stream_ppl). */
#ifndef KVANT_EVAL_H
#define KVANT_EVAL_H

#include "core/core.h"

/* -log softmax(logits)[target], computed in double with the max subtracted */
double eval_nll(const float *logits, int V, int target);

/* KL(p || q) for p = softmax(base), q = softmax(logits), in nats (double) */
double eval_kl(const float *base, const float *logits, int V);

int eval_argmax(const float *logits, int V);

/* running mean / variance (Welford) of a stream of values */
typedef struct {
    int64_t n;
    double mean, m2;
} eval_stats;
static inline void eval_stats_add(eval_stats *s, double x) {
    s->n++;
    const double d = x - s->mean;
    s->mean += d / (double)s->n;
    s->m2 += d * (x - s->mean);
}
static inline double eval_stats_var(const eval_stats *s) { return s->n > 1 ? s->m2 / (double)(s->n - 1) : 0.0; }

/* the q-quantile (0..1) of n values (sorts them in place) */
double eval_quantile(double *v, int64_t n, double q);

#endif
