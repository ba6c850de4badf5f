/* metrics.h - latency histograms and counters for GET /metrics (Prometheus
 * text format), internal to server/. */
#ifndef KVANT_SERVER_METRICS_H
#define KVANT_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "kvant_infer.h"

#define SRV_HIST_MAX 24
typedef struct {
    const char *name, *help;
    int n;                         /* buckets (upper bounds, seconds) */
    double le[SRV_HIST_MAX];
    uint64_t count[SRV_HIST_MAX];  /* per bucket (not cumulative) */
    uint64_t total;
    double sum;
} srv_hist;

typedef struct {
    pthread_mutex_t mu;
    srv_hist ttft, tpot, e2e;
    uint64_t req_ok, req_err4xx, req_err5xx, req_429, req_cancelled;
    uint64_t prompt_tokens, gen_tokens;
} srv_metrics;

void srv_metrics_init(srv_metrics *mt);
void srv_hist_add(srv_metrics *mt, srv_hist *h, double seconds);
/* appends the Prometheus text to a malloc'd string (returned, NULL on OOM) */
char *srv_metrics_text(srv_metrics *mt, const kvant_engine_stats *es);

#endif
