/* core.c - status, logging, assertions, clock. */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void default_log(kvant_log_level level, const char *line, void *user) {
    (void)user;
    static const char *tag[] = {"error", "warn", "info", "debug"};
    fprintf(stderr, "kvant %s: %s\n", tag[level], line);
}

static kvant_log_fn g_log_fn = default_log;
static void *g_log_user;
static kvant_log_level g_log_max = KVANT_LOG_INFO;

void kvant_set_log(kvant_log_fn fn, void *user, kvant_log_level max_level) {
    g_log_fn = fn ? fn : default_log;
    g_log_user = user;
    g_log_max = max_level;
}

void core_log(kvant_log_level level, const char *fmt, ...) {
    if (level > g_log_max) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    g_log_fn(level, line, g_log_user);
}

void core_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "kvant: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

kvant_code core_fail(kvant_status *st, kvant_code code, const char *fmt, ...) {
    if (st) {
        st->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st->msg, sizeof st->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

double core_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int core_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
