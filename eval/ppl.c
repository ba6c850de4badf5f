/* ppl.c - perplexity and KL divergence through the public API's own
 * forward pass (kvant_perplexity in include/kvant_infer.h).
 *
 * llama.cpp's method (its perplexity tool): the text is tokenized once with
 * BOS; chunk i is tokens [i*c, (i+1)*c) with its first token replaced by
 * BOS, run as one causal batch into an empty cache; the logits at
 * positions c/2 .. c-2 are scored against the tokens that follow them.
 * PPL = exp(mean NLL); +/- = PPL * sqrt(var(NLL) / (n - 1)).
 * Sliding windows (stride S): window w covers [w*S, w*S + c) and scores the
 * targets not scored by an earlier window, so every token after the first
 * is scored exactly once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvant_compress.h" /* kvant_seq_use_int8 */
#include "core/core.h"
#include "eval/eval.h"

typedef struct {
    kvant_seq *seq, *base_seq;
    float *logits, *base_logits;
    int V;
    eval_stats nll, base_nll;
    double *kl;
    int64_t n_kl, same_top;
} ppl_state;

/* runs tokens[0..n) into empty caches and scores targets [lo, hi) (indices
 * into tokens; logits at i-1 predict tokens[i]) */
static kvant_code score_window(ppl_state *s, const int32_t *tokens, int n, int lo, int hi, kvant_status *st) {
    kvant_seq_reset(s->seq);
    if (kvant_forward(s->seq, tokens, n, s->logits, true, st)) return st->code;
    if (s->base_seq) {
        kvant_seq_reset(s->base_seq);
        if (kvant_forward(s->base_seq, tokens, n, s->base_logits, true, st)) return st->code;
    }
    for (int i = lo; i < hi; i++) {
        const float *lg = s->logits + (size_t)(i - 1) * s->V;
        eval_stats_add(&s->nll, eval_nll(lg, s->V, tokens[i]));
        if (s->base_seq) {
            const float *bl = s->base_logits + (size_t)(i - 1) * s->V;
            eval_stats_add(&s->base_nll, eval_nll(bl, s->V, tokens[i]));
            s->kl[s->n_kl++] = eval_kl(bl, lg, s->V);
            s->same_top += eval_argmax(bl, s->V) == eval_argmax(lg, s->V);
        }
    }
    return KVANT_OK;
}

kvant_code kvant_perplexity(kvant_model *m, const char *text, size_t len, const kvant_ppl_params *p,
                            kvant_ppl_result *r, kvant_status *st) {
    memset(r, 0, sizeof *r);
    const int c = p->n_ctx;
    if (c < 4) return core_fail(st, KVANT_ERR_ARG, "context %d too small (at least 4)", c);
    /* windows must overlap, so the first token of each window has context */
    if (p->stride < 0 || p->stride >= c) return core_fail(st, KVANT_ERR_ARG, "stride must be in 1..%d (below the context)", c - 1);
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    if (p->kl_base) {
        kvant_model_info bi;
        kvant_model_get_info(p->kl_base, &bi);
        if (bi.vocab_size != in.vocab_size)
            return core_fail(st, KVANT_ERR_ARG, "base model vocabulary %d != model vocabulary %d", bi.vocab_size,
                             in.vocab_size);
    }
    const double t0 = core_time_ms();

    /* tokenize everything once, BOS first */
    int n_tok;
    int32_t *toks = kvant_tokenize_all(m, text, len, true, &n_tok, st);
    if (!toks) return st->code;
    r->n_text_tokens = n_tok;

    int total;
    if (p->stride == 0) total = n_tok / c;
    else total = n_tok <= c ? 1 : 1 + (n_tok - c + p->stride - 1) / p->stride;
    if (p->n_chunks > 0 && p->n_chunks < total) total = p->n_chunks;
    if (total <= 0 || n_tok < 2) {
        free(toks);
        return core_fail(st, KVANT_ERR_ARG, "text has %d tokens, fewer than one chunk of %d", n_tok, c);
    }

    ppl_state s = {.V = in.vocab_size};
    kvant_seq_params sp = kvant_seq_default();
    sp.n_ctx = c;
    sp.attn = p->attn;
    sp.kv_type = p->kv_type;
    s.seq = kvant_seq_new_ex(m, &sp, st);
    s.logits = malloc(sizeof(float) * (size_t)c * s.V);
    int32_t *win = malloc(sizeof(int32_t) * (size_t)c);
    kvant_code rc = s.seq && s.logits && win ? KVANT_OK : core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    if (rc == KVANT_OK && p->int8) rc = kvant_seq_use_int8(s.seq, p->int8, st);
    if (rc == KVANT_OK && p->kl_base) {
        s.base_seq = kvant_seq_new_ex(p->kl_base, &sp, st); /* the same cache: KL measures the weights only */
        s.base_logits = malloc(sizeof(float) * (size_t)c * s.V);
        s.kl = malloc(sizeof(double) * (size_t)total * c);
        if (!s.base_seq || !s.base_logits || !s.kl) rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    }

    int scored_to = 1; /* sliding mode: next target index not yet scored */
    for (int w = 0; rc == KVANT_OK && w < total; w++) {
        if (p->stride == 0) {
            memcpy(win, toks + (size_t)w * c, sizeof(int32_t) * (size_t)c);
            win[0] = (int32_t)in.bos_id; /* llama.cpp: every chunk starts with BOS */
            rc = score_window(&s, win, c, c / 2 + 1, c, st);
        } else {
            const int b = w * p->stride, n = n_tok - b < c ? n_tok - b : c;
            const int lo = scored_to - b > 1 ? scored_to - b : 1;
            rc = score_window(&s, toks + b, n, lo, n, st);
            scored_to = b + n;
        }
        if (p->progress) p->progress(p->user, w + 1, total, exp(s.nll.mean));
    }
    if (rc == KVANT_OK) {
        r->n_chunks = total;
        r->n_scored = s.nll.n;
        r->ppl = exp(s.nll.mean);
        /* llama.cpp: population variance of the NLL over sqrt(n - 1) */
        const double var = s.nll.n > 1 ? s.nll.m2 / (double)s.nll.n : 0;
        r->ppl_err = s.nll.n > 1 ? r->ppl * sqrt(var / (double)(s.nll.n - 1)) : 0;
        if (p->kl_base) {
            r->has_kl = true;
            r->base_ppl = exp(s.base_nll.mean);
            r->ppl_ratio = r->ppl / r->base_ppl;
            double sum = 0, mx = 0;
            for (int64_t i = 0; i < s.n_kl; i++) {
                sum += s.kl[i];
                mx = s.kl[i] > mx ? s.kl[i] : mx;
            }
            r->kl_mean = s.n_kl ? sum / (double)s.n_kl : 0;
            r->kl_max = mx;
            r->kl_p99 = eval_quantile(s.kl, s.n_kl, 0.99);
            r->same_top = s.n_kl ? (double)s.same_top / (double)s.n_kl : 0;
        }
        r->seconds = (core_time_ms() - t0) / 1e3;
    }
    kvant_seq_free(s.seq);
    kvant_seq_free(s.base_seq);
    free(s.logits);
    free(s.base_logits);
    free(s.kl);
    free(win);
    free(toks);
    return rc;
}

/* ---- streaming evaluation --------------------------------------------------- */
kvant_code kvant_stream_ppl(kvant_model *m, const char *text, size_t len, const kvant_stream_params *p,
                            kvant_stream_result *r, kvant_status *st) {
    memset(r, 0, sizeof *r);
    const bool full = p->policy == KVANT_STREAM_FULL, stream = p->policy == KVANT_STREAM_SINKS,
               recompute = p->policy == KVANT_STREAM_RECOMPUTE;
    if (!full && !stream && !recompute) return core_fail(st, KVANT_ERR_ARG, "policy %d is none of kvant_stream_policy", (int)p->policy);
    if (!full && p->window < 1) return core_fail(st, KVANT_ERR_ARG, "the %s policy needs a window", stream ? "streaming" : "recompute");
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    int n_tok;
    int32_t *toks = kvant_tokenize_all(m, text, len, true, &n_tok, st);
    float *lg = toks ? malloc(sizeof(float) * (size_t)in.vocab_size) : NULL;
    if (!toks || !lg) {
        free(toks);
        return toks ? core_fail(st, KVANT_ERR_NOMEM, "out of memory") : st->code;
    }
    int n = n_tok - 1; /* targets 1 .. n_tok-1 */
    if (p->max_tokens > 0 && p->max_tokens < n) n = p->max_tokens;
    kvant_seq_params sp = kvant_seq_default();
    if (full) sp.n_ctx = n + 1;
    else if (stream) { sp.sink = p->sink; sp.window = p->window; }
    else sp.n_ctx = p->window;
    kvant_seq *s = n > 0 ? kvant_seq_new_ex(m, &sp, st) : NULL;
    kvant_code rc = s ? KVANT_OK : (n > 0 ? st->code : core_fail(st, KVANT_ERR_ARG, "text too short"));
    eval_stats nll = {0};
    const double t0 = core_time_ms();
    for (int i = 0; rc == KVANT_OK && i < n; i++) {
        if (recompute) {
            const int lo = i + 1 - p->window > 0 ? i + 1 - p->window : 0;
            kvant_seq_reset(s);
            rc = kvant_forward(s, toks + lo, i + 1 - lo, lg, false, st);
        } else {
            rc = kvant_forward(s, &toks[i], 1, lg, false, st);
        }
        if (rc) break;
        const double x = eval_nll(lg, in.vocab_size, toks[i + 1]);
        eval_stats_add(&nll, x);
        if (p->nll_out) p->nll_out[i] = (float)x;
        if (p->progress && ((i + 1) % 1000 == 0 || i + 1 == n)) p->progress(p->user, i + 1, n, exp(nll.mean));
    }
    if (rc == KVANT_OK) {
        r->seconds = (core_time_ms() - t0) / 1e3;
        r->n_scored = nll.n;
        r->ppl = exp(nll.mean);
        r->tokens_per_s = r->seconds > 0 ? nll.n / r->seconds : 0;
        r->kv_bytes = kvant_seq_kv_bytes(s);
    }
    kvant_seq_free(s);
    free(toks);
    free(lg);
    return rc;
}
