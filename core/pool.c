/* pool.c - a fixed thread pool.
 *
 * A job bumps an atomic generation counter.  Workers spin on it for a
 * short while (a forward pass issues jobs back to back, and a futex wake
 * costs tens of microseconds) and only then sleep on a condition variable.
 * The caller works as thread 0 and spins until the others have finished.
 * No allocation per job. */
#include "core.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SPIN_ROUNDS 20000 /* ~ a few hundred microseconds of pause loops */

struct core_pool {
    int n;                        /* threads including the caller */
    pthread_t *threads;           /* n - 1 workers */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    _Atomic uint64_t generation;  /* bumped per job */
    _Atomic int pending;          /* workers still running the current job */
    _Atomic bool quit;
    _Atomic bool rest;            /* core_pool_rest: sleep now instead of spinning */
    core_task_fn fn;              /* written before generation is bumped */
    void *ctx;
};

typedef struct {
    core_pool *pool;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* waits until the generation differs from `seen` (or quit); returns it */
static uint64_t wait_job(core_pool *p, uint64_t seen) {
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen || atomic_load(&p->quit)) return g;
        if (atomic_load_explicit(&p->rest, memory_order_relaxed)) break;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    uint64_t g;
    while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->wake, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    core_pool *p = wa->pool;
    const int ith = wa->ith;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        seen = wait_job(p, seen);
        if (atomic_load(&p->quit)) break;
        p->fn(p->ctx, ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
    return NULL;
}

core_pool *core_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    core_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!p->threads) {
        free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){p, i};
        if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i; /* run with the threads we got */
            break;
        }
    }
    return p;
}

void core_pool_free(core_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p->threads);
    free(p);
}

void core_pool_rest(core_pool *p) {
    if (p) atomic_store(&p->rest, true);
}

int core_pool_size(const core_pool *p) { return p ? p->n : 1; }

void core_pool_run(core_pool *p, core_task_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->rest, false, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu); /* pairs with the sleepers' check-then-wait */
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    for (int i = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; i++) {
        if (i < SPIN_ROUNDS) cpu_relax();
        else sched_yield();
    }
}
