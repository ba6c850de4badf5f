/* metrics.c - NLL, KL divergence, quantiles. */
#include <math.h>
#include <stdlib.h>

#include "eval/eval.h"

static double logsumexp(const float *x, int V, float *max_out) {
    float max = x[0];
    for (int i = 1; i < V; i++) max = x[i] > max ? x[i] : max;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)x[i] - max);
    *max_out = max;
    return log(sum) + max;
}

double eval_nll(const float *logits, int V, int target) {
    float max;
    return logsumexp(logits, V, &max) - logits[target];
}

double eval_kl(const float *base, const float *logits, int V) {
    float mb, ml;
    const double lb = logsumexp(base, V, &mb), ll = logsumexp(logits, V, &ml);
    double kl = 0;
    for (int i = 0; i < V; i++) {
        const double lp = base[i] - lb, lq = logits[i] - ll;
        kl += exp(lp) * (lp - lq);
    }
    return kl > 0 ? kl : 0; /* rounding can leave a tiny negative */
}

int eval_argmax(const float *x, int V) {
    int b = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double eval_quantile(double *v, int64_t n, double q) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double pos = q * (double)(n - 1);
    int64_t i = (int64_t)pos;
    if (i >= n - 1) return v[n - 1];
    return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}
