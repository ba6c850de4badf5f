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
    sample_bias *bias;  /* [p.n_bias], the caller's copied */
    int32_t *counts;    /* [n_vocab] times generated; NULL when presence and frequency are 0 */
    int32_t *seen;      /* [n_vocab] the distinct generated tokens, in first-seen order */
    int n_seen;
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
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty) || p->n_bias < 0 ||
        (p->n_bias > 0 && !p->bias)) {
        core_fail(st, KVANT_ERR_ARG, "sampler: presence and frequency penalties must be finite");
        return NULL;
    }
    for (int i = 0; i < p->n_bias; i++)
        if (p->bias[i].token < 0 || p->bias[i].token >= vocab_size || !isfinite(p->bias[i].bias)) {
            core_fail(st, KVANT_ERR_ARG, "sampler: logit bias for token %d (vocabulary %d) must be finite",
                      (int)p->bias[i].token, vocab_size);
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
    if (p->n_bias > 0) {
        if (!(s->bias = malloc((size_t)p->n_bias * sizeof *s->bias))) goto oom;
        memcpy(s->bias, p->bias, (size_t)p->n_bias * sizeof *s->bias);
    }
    s->p.bias = s->bias;
    if (p->presence_penalty != 0 || p->frequency_penalty != 0) {
        s->counts = calloc((size_t)vocab_size, sizeof *s->counts);
        s->seen = malloc((size_t)vocab_size * sizeof *s->seen);
        if (!s->counts || !s->seen) goto oom;
    }
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
    free(s->bias);
    free(s->counts);
    free(s->seen);
    free(s);
}

void sampler_accept_prompt(sampler *s, int32_t token) {
    if (s->p.repeat_last_n <= 0) return;
    s->history[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % s->p.repeat_last_n;
    if (s->n_hist < s->p.repeat_last_n) s->n_hist++;
}

void sampler_accept(sampler *s, int32_t token) {
    sampler_accept_prompt(s, token);
    if (!s->counts || token < 0 || token >= s->n_vocab) return;
    if (s->counts[token]++ == 0) s->seen[s->n_seen++] = token;
}

void sample_adjust_ref(const sample_params *p, float *logits, int V, const int32_t *ctx, int n_ctx,
                       const int32_t *gen, int n_gen) {
    for (int i = 0; i < p->n_bias; i++) logits[p->bias[i].token] += p->bias[i].bias;
    /* repetition: the last repeat_last_n of ctx ++ gen, each distinct token once */
    const int n_all = n_ctx + n_gen, from = n_all > p->repeat_last_n ? n_all - p->repeat_last_n : 0;
    if (p->repeat_penalty != 1.0f)
        for (int v = 0; v < V; v++) {
            bool in = false;
            for (int i = from; i < n_all && !in; i++) in = (i < n_ctx ? ctx[i] : gen[i - n_ctx]) == v;
            if (in) logits[v] = logits[v] > 0 ? logits[v] / p->repeat_penalty : logits[v] * p->repeat_penalty;
        }
    /* presence / frequency: every generated token, the prompt not counted */
    for (int v = 0; v < V; v++) {
        int c = 0;
        for (int i = 0; i < n_gen; i++) c += gen[i] == v;
        if (c) logits[v] -= p->frequency_penalty * (float)c + p->presence_penalty;
    }
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

/* the logit bias, then the repetition penalty, then presence / frequency
 * over the distinct generated tokens (O(n_bias + window^2 + distinct), not
 * O(vocabulary)) */
static void adjust(sampler *s, float *logits) {
    for (int i = 0; i < s->p.n_bias; i++) logits[s->bias[i].token] += s->bias[i].bias;
    apply_penalty(s, logits);
    for (int i = 0; i < s->n_seen; i++) {
        const int32_t t = s->seen[i];
        logits[t] -= s->p.frequency_penalty * (float)s->counts[t] + s->p.presence_penalty;
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
    adjust(s, logits);
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
    adjust(s, logits);
    bool all;
    float max;
    const int n = support(s, logits, &all, &max);
    for (int i = 0; i < n; i++) ids[i] = all ? i : s->cands[i].id;
    return n;
}
