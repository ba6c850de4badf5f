/* core/ - the bottom layer: status and logging, assertions, checked
 * arithmetic, file mapping, a thread pool and a clock.  Nothing here knows
 * about models. */
#ifndef KVANT_CORE_H
#define KVANT_CORE_H

#include "kvant_base.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- bugs: assertion with file:line, then abort ------------------------ */
void core_assert_fail(const char *expr, const char *file, int line);
#define CORE_ASSERT(x) ((x) ? (void)0 : core_assert_fail(#x, __FILE__, __LINE__))

/* ---- recoverable failures --------------------------------------------- */
/* Fills st (if not NULL) with code and a printf-style message; returns code. */
kvant_code core_fail(kvant_status *st, kvant_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void core_ok(kvant_status *st) { if (st) { st->code = KVANT_OK; st->msg[0] = 0; } }

/* ---- logging: one function the embedder can redirect ------------------- */
void core_log(kvant_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- overflow-checked size arithmetic (true when the result fits) ------- */
static inline bool core_add_ok(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_add_overflow(a, b, r); }
static inline bool core_mul_ok(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_mul_overflow(a, b, r); }

/* ---- read-only file mapping -------------------------------------------- */
typedef struct {
    const uint8_t *data;
    size_t size;
} core_map;
/* Maps the whole file read-only.  Empty files map to data == NULL, size 0. */
kvant_code core_map_file(const char *path, core_map *m, kvant_status *st);
void core_unmap(core_map *m);
/* The whole file as a malloc'd, NUL-terminated buffer (*len = its bytes; a
 * text the caller may modify and must free), or NULL + st (KVANT_ERR_IO,
 * KVANT_ERR_NOMEM). */
char *core_read_file(const char *path, size_t *len, kvant_status *st);

/* ---- large buffers in huge pages ----------------------------------------
 * bytes rounded up to 2 MiB, 2 MiB aligned and advised as transparent huge
 * pages (MADV_HUGEPAGE; THP is often "madvise" only).  For packed weights,
 * which decode streams whole every step: with 4 KiB pages that takes a TLB
 * miss every 4 KiB.  (The paged KV pool measured slower with it: bench-batch
 * 32 seqs S_TG -8%, and its first touch of each 2 MiB costs more.)  NULL
 * when out of memory; free() releases it. */
void *core_alloc_huge(size_t bytes);

/* ---- thread pool --------------------------------------------------------
 * core_pool_run(pool, fn, ctx) calls fn(ctx, ith, nth) once on each of the
 * nth threads (the caller is thread 0) and returns when all are done.  The
 * pool is created once; running a job allocates nothing. */
typedef struct core_pool core_pool;
typedef void (*core_task_fn)(void *ctx, int ith, int nth);
core_pool *core_pool_new(int n_threads); /* NULL on failure */
void core_pool_free(core_pool *p);
int  core_pool_size(const core_pool *p);
void core_pool_run(core_pool *p, core_task_fn fn, void *ctx);
/* The idle workers go to sleep now instead of spinning for the next job a
 * while (the spin pays when jobs come back to back; when another pool's
 * work comes next, it would take that pool's CPUs).  The next job wakes
 * them as usual and clears this. */
void core_pool_rest(core_pool *p);
/* splits [0, n) into nth nearly equal parts; part ith is [*lo, *hi) */
/* SplitMix64's finalizer: a well-mixed 64-bit value from any input (seeds,
 * per-row streams).  mix64(z) of consecutive z are independent-looking. */
static inline uint64_t core_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline void core_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}
/* Dynamic (guided) split of [0, n): each call hands the caller the next
 * unclaimed chunk [*lo, *hi) (false when none is left).  Threads that start
 * late or run slow take fewer chunks, so the pool's threads finish together
 * (a static split leaves the early finisher spinning).  A chunk is 1/(2 nth)
 * of what is left (at least min_chunk, and a multiple of align): the first
 * claims are large, the last small, so when one thread runs out of work the
 * other has at most a small chunk to finish.  *next starts at 0. */
static inline bool core_chunk_guided(_Atomic int64_t *next, int64_t n, int nth, int64_t min_chunk, int64_t align,
                                     int64_t *lo, int64_t *hi) {
    int64_t c = atomic_load_explicit(next, memory_order_relaxed);
    for (;;) {
        if (c >= n) return false;
        int64_t k = (n - c) / (2 * (int64_t)nth);
        if (k < min_chunk) k = min_chunk;
        k = (k + align - 1) / align * align;
        if (atomic_compare_exchange_weak_explicit(next, &c, c + k, memory_order_relaxed, memory_order_relaxed)) {
            *lo = c;
            *hi = c + k < n ? c + k : n;
            return true;
        }
    }
}
int core_cpu_count(void);

/* ---- time ---------------------------------------------------------------- */
double core_time_ms(void); /* monotonic clock */

#endif
