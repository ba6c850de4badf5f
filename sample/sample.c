/* sample.c - the sampling chain (see sample.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "sample/sample.h"

typedef struct {
    float logit;
    int32_t id;
} cand;

struct sampler {
    sample_params p;
    int n_vocab;
    cand *cands;        /* n_vocab candidates, reused every call */
    float *w;           /* n_vocab floats: exps */
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
    s->w = malloc((size_t)vocab_size * sizeof *s->w);
    s->history = malloc((size_t)(p->repeat_last_n > 0 ? p->repeat_last_n : 1) * sizeof *s->history);
    if (!s->cands || !s->w || !s->history) goto oom;
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
    free(s->w);
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
/* x comes before y in the sorted order (higher logit, then lower id) */
static bool before(cand x, cand y) { return x.logit > y.logit || (x.logit == y.logit && x.id < y.id); }

/* c[0..k): the k first candidates of the sorted order, sorted.  A heap of
 * the k best so far with the worst on top, so most tokens cost one
 * comparison; then k log k to sort them. */
static void top_k_sorted(const float *logits, int V, int k, cand *c) {
    int n = 0;
    for (int i = 0; i < V; i++) {
        const cand x = {logits[i], i};
        if (n == k && !before(x, c[0])) continue;
        int j;
        if (n < k) { /* sift up from the new leaf */
            for (j = n++; j > 0 && before(c[(j - 1) / 2], x); j = (j - 1) / 2) c[j] = c[(j - 1) / 2];
        } else { /* replace the root, sift down */
            for (j = 0;;) {
                int w = 2 * j + 1;
                if (w >= k) break;
                if (w + 1 < k && before(c[w], c[w + 1])) w++;
                if (!before(x, c[w])) break;
                c[j] = c[w];
                j = w;
            }
        }
        c[j] = x;
    }
    qsort(c, (size_t)k, sizeof *c, cmp_desc);
}

/* The tokens a draw may return, in the order the draw walks them: c[0..n)
 * sorted when top-k or top-p cut the list (then a prefix of the sorted
 * order), else *all = true and the walk is over logits[] in id order
 * (every token, or those min-p keeps: then c[0..n) in id order); *max:
 * the largest logit.  c = s->cands, w = s->w (V floats of scratch). */
static int support(sampler *s, const float *logits, bool *all, float *max_out) {
    const int V = s->n_vocab;
    cand *c = s->cands;
    float *w = s->w;
    float max = logits[0], min = logits[0];
    for (int i = 1; i < V; i++) {
        max = logits[i] > max ? logits[i] : max;
        min = logits[i] < min ? logits[i] : min;
    }
    *max_out = max;
    int n = V;
    bool sorted = false;
    *all = false;
    if (s->p.top_k > 0 && s->p.top_k < V) {
        n = s->p.top_k;
        top_k_sorted(logits, V, n, c);
        sorted = true;
    }
    if (s->p.top_p < 1.0f) {
        /* probabilities at temperature 1 over the list so far (as llama.cpp) */
        double sum;
        if (sorted) {
            for (int i = 0; i < n; i++) w[i] = c[i].logit;
            sum = kern_exp_sum(w, w, n, max, 1.0f);
        } else {
            /* the tokens within `gap` of the max are a prefix of the sorted
             * order; widen until it holds top_p of the mass, sort only it */
            sum = kern_exp_sum(w, logits, V, max, 1.0f);
            for (float gap = 8;; gap *= 2) {
                const float cut = max - gap;
                double mass = 0;
                n = 0;
                for (int i = 0; i < V; i++)
                    if (logits[i] >= cut || cut <= min) c[n++] = (cand){logits[i], i}, mass += w[i];
                if (mass >= (double)s->p.top_p * sum || cut <= min || n == V) break;
            }
            qsort(c, (size_t)n, sizeof *c, cmp_desc);
            for (int i = 0; i < n; i++) w[i] = c[i].logit;
            kern_exp_sum(w, w, n, max, 1.0f);
            sorted = true;
        }
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += w[i] / sum;
            if (cum >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        /* keep tokens with p >= min_p * p_max, i.e. logit >= max + log(min_p) */
        const float cut = (float)(max + log((double)s->p.min_p));
        if (sorted) {
            int keep = 1;
            while (keep < n && c[keep].logit >= cut) keep++;
            n = keep;
        } else {
            n = 0;
            for (int i = 0; i < V; i++)
                if (logits[i] >= cut) c[n++] = (cand){logits[i], i};
        }
        return n;
    }
    *all = !sorted;
    return n;
}

int32_t sampler_sample(sampler *s, float *logits) {
    apply_penalty(s, logits);
    if (s->p.temperature <= 0.0f) return sample_argmax(logits, s->n_vocab);
    bool all;
    float max;
    const int n = support(s, logits, &all, &max);
    /* temperature, then draw: walk the support until the running sum
     * passes r * total */
    if (!all) /* the support's logits, in walk order (logits[] is ours to overwrite) */
        for (int i = 0; i < n; i++) logits[i] = s->cands[i].logit;
    const double total = kern_exp_sum(s->w, logits, n, max, 1.0f / s->p.temperature);
    const double r = (double)sample_rng_float(&s->rng) * total;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->w[i];
        if (r < acc) return all ? i : s->cands[i].id;
    }
    return all ? n - 1 : s->cands[n - 1].id;
}

int sampler_support(sampler *s, float *logits, int32_t *ids) {
    apply_penalty(s, logits);
    bool all;
    float max;
    const int n = support(s, logits, &all, &max);
    for (int i = 0; i < n; i++) ids[i] = all ? i : s->cands[i].id;
    return n;
}
