/* stream.c - memory bandwidth of this machine, the ceiling for decode.
 *
 * usage: kvant-stream [-t THREADS] [-m MiB]
 * Prints GB/s (1e9 bytes/s) for two kernels, best of 10, threads splitting
 * the arrays:
 *   read   s += a[i]            (what decode does to the weights)
 *   triad  a[i] = b[i] + s*c[i] (STREAM's triad: 3 arrays counted)
 * Decode roofline = read GB/s / bytes of weights read per token. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    double *a, *b, *c;
    size_t lo, hi;
    int kernel;
    double sum;
    pthread_barrier_t *bar;
} job;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *work(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    if (j->kernel == 0) {
        /* integer lanes: the compiler vectorizes this reduction, so the
         * loop is limited by memory, not by add latency */
        const uint64_t *u = (const uint64_t *)j->a;
        uint64_t acc[8] = {0};
        for (size_t i = j->lo; i + 8 <= j->hi; i += 8)
            for (int l = 0; l < 8; l++) acc[l] += u[i + l];
        uint64_t s = 0;
        for (int l = 0; l < 8; l++) s += acc[l];
        j->sum = (double)(s & 1);
    } else {
        for (size_t i = j->lo; i < j->hi; i++) j->a[i] = j->b[i] + 3.0 * j->c[i];
    }
    pthread_barrier_wait(j->bar);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 2;
    size_t mib = 256;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-m")) mib = (size_t)atol(argv[i + 1]);
    }
    if (threads < 1 || threads > 256 || mib < 16) {
        fprintf(stderr, "usage: kvant-stream [-t THREADS] [-m MiB >= 16]\n");
        return 2;
    }
    const size_t n = mib * 1048576 / sizeof(double);
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    if (!a || !b || !c) { fprintf(stderr, "kvant-stream: out of memory\n"); return 1; }
    for (size_t i = 0; i < n; i++) { a[i] = 1.0; b[i] = 2.0; c[i] = 0.5; }
    const char *names[2] = {"read", "triad"};
    double sink = 0;
    for (int k = 0; k < 2; k++) {
        double best = 1e30;
        for (int rep = 0; rep < 10; rep++) {
            pthread_barrier_t bar;
            pthread_barrier_init(&bar, NULL, (unsigned)threads + 1);
            pthread_t th[256];
            job jobs[256];
            for (int t = 0; t < threads; t++) {
                jobs[t] = (job){a, b, c, n * t / threads, n * (t + 1) / threads, k, 0, &bar};
                pthread_create(&th[t], NULL, work, &jobs[t]);
            }
            pthread_barrier_wait(&bar);
            const double t0 = now();
            pthread_barrier_wait(&bar);
            const double dt = now() - t0;
            for (int t = 0; t < threads; t++) { pthread_join(th[t], NULL); sink += jobs[t].sum; }
            pthread_barrier_destroy(&bar);
            if (dt < best) best = dt;
        }
        const double bytes = (k == 0 ? 1.0 : 3.0) * n * sizeof(double);
        printf("%-5s %6.1f GB/s  (%d threads, %zu MiB arrays, best of 10)\n", names[k], bytes / best / 1e9, threads, mib);
    }
    if (sink == 42.0) printf("\n");
    free(a); free(b); free(c);
    return 0;
}
