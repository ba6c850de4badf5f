/* metrics.c - Prometheus text exposition of the engine's state and the
 * server's latency histograms (vLLM's metric set, kvant_ prefix). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/metrics.h"

static void hist_init(srv_hist *h, const char *name, const char *help, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->name = name;
    h->help = help;
    h->n = n;
    memcpy(h->le, le, (size_t)n * sizeof *le);
}

void srv_metrics_init(srv_metrics *mt) {
    memset(mt, 0, sizeof *mt);
    pthread_mutex_init(&mt->mu, NULL);
    static const double ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0};
    static const double tpot[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};
    static const double e2e[] = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0};
    hist_init(&mt->ttft, "kvant_time_to_first_token_seconds", "Time from request arrival to its first token.",
              ttft, 16);
    hist_init(&mt->tpot, "kvant_time_per_output_token_seconds",
              "Mean time per output token after the first, per request.", tpot, 16);
    hist_init(&mt->e2e, "kvant_e2e_request_latency_seconds", "Time from request arrival to its last token.", e2e, 16);
}

void srv_hist_add(srv_metrics *mt, srv_hist *h, double s) {
    pthread_mutex_lock(&mt->mu);
    int i = 0;
    while (i < h->n && s > h->le[i]) i++;
    if (i < h->n) h->count[i]++;
    h->total++;
    h->sum += s;
    pthread_mutex_unlock(&mt->mu);
}

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} obuf;

__attribute__((format(printf, 2, 3))) static void outf(obuf *o, const char *fmt, ...) {
    if (o->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) { o->oom = 1; return; }
        if (o->len + (size_t)n < o->cap) { o->len += (size_t)n; return; }
        size_t cap = o->cap * 2 + (size_t)n;
        char *p = realloc(o->p, cap);
        if (!p) { o->oom = 1; return; }
        o->p = p;
        o->cap = cap;
    }
}

static void gauge(obuf *o, const char *name, const char *type, const char *help, double v) {
    outf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

static void hist(obuf *o, const srv_hist *h) {
    outf(o, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        outf(o, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->le[i], (unsigned long long)cum);
    }
    outf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", h->name, (unsigned long long)h->total,
         h->name, h->sum, h->name, (unsigned long long)h->total);
}

char *srv_metrics_text(srv_metrics *mt, const kvant_engine_stats *es) {
    obuf o = {.cap = 8192};
    if (!(o.p = malloc(o.cap))) return NULL;
    o.p[0] = 0;
    gauge(&o, "kvant_num_requests_running", "gauge", "Sequences in the running batch.", es->running);
    gauge(&o, "kvant_num_requests_waiting", "gauge", "Requests queued for admission.", es->waiting);
    gauge(&o, "kvant_kv_blocks_total", "gauge", "KV cache blocks in the pool.", (double)es->blocks_total);
    gauge(&o, "kvant_kv_blocks_used", "gauge", "KV cache blocks held by sequences.", (double)es->blocks_used);
    gauge(&o, "kvant_kv_blocks_free", "gauge", "KV cache blocks free.", (double)es->blocks_free);
    gauge(&o, "kvant_kv_blocks_cached", "gauge", "Free KV blocks still holding a reusable cached prefix.",
          (double)es->blocks_cached);
    if (es->swa_blocks_total) { /* sliding-window models: the local layers' pool */
        gauge(&o, "kvant_kv_swa_blocks_total", "gauge", "Sliding-window layers' KV blocks.", (double)es->swa_blocks_total);
        gauge(&o, "kvant_kv_swa_blocks_used", "gauge", "Sliding-window layers' KV blocks held.", (double)es->swa_blocks_used);
        gauge(&o, "kvant_kv_swa_blocks_free", "gauge", "Sliding-window layers' KV blocks free.", (double)es->swa_blocks_free);
        gauge(&o, "kvant_kv_swa_blocks_cached", "gauge", "Sliding-window layers' free KV blocks holding a cached prefix.",
              (double)es->swa_blocks_cached);
    }
    gauge(&o, "kvant_kv_cache_usage_ratio", "gauge", "Share of KV blocks in use.",
          es->blocks_total ? (double)es->blocks_used / (double)es->blocks_total : 0.0);
    gauge(&o, "kvant_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
          (double)es->prefix_hit_tokens);
    gauge(&o, "kvant_prompt_tokens_processed_total", "counter", "Prompt tokens run through the model.",
          (double)es->tokens_prefill);
    gauge(&o, "kvant_generation_tokens_total", "counter", "Tokens generated (decode steps).",
          (double)es->tokens_decode);
    gauge(&o, "kvant_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.",
          es->preempted_total);
    gauge(&o, "kvant_engine_steps_total", "counter", "Batched forward passes.", (double)es->steps);
    gauge(&o, "kvant_last_batch_tokens", "gauge", "Tokens in the last step's batch.", es->last_batch_tokens);
    gauge(&o, "kvant_last_step_seconds", "gauge", "Duration of the last step.", es->last_step_ms / 1e3);
    gauge(&o, "kvant_chunk_budget_tokens", "gauge", "Current prompt-chunk token budget.", es->chunk_budget);
    pthread_mutex_lock(&mt->mu);
    outf(&o, "# HELP kvant_requests_total Requests answered, by outcome.\n# TYPE kvant_requests_total counter\n");
    outf(&o, "kvant_requests_total{outcome=\"ok\"} %llu\n", (unsigned long long)mt->req_ok);
    outf(&o, "kvant_requests_total{outcome=\"client_error\"} %llu\n", (unsigned long long)mt->req_err4xx);
    outf(&o, "kvant_requests_total{outcome=\"queue_full\"} %llu\n", (unsigned long long)mt->req_429);
    outf(&o, "kvant_requests_total{outcome=\"server_error\"} %llu\n", (unsigned long long)mt->req_err5xx);
    outf(&o, "kvant_requests_total{outcome=\"cancelled\"} %llu\n", (unsigned long long)mt->req_cancelled);
    gauge(&o, "kvant_request_prompt_tokens_total", "counter", "Prompt tokens of requests admitted.",
          (double)mt->prompt_tokens);
    gauge(&o, "kvant_request_generation_tokens_total", "counter", "Tokens delivered to requests.",
          (double)mt->gen_tokens);
    hist(&o, &mt->ttft);
    hist(&o, &mt->tpot);
    hist(&o, &mt->e2e);
    pthread_mutex_unlock(&mt->mu);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    return o.p;
}
