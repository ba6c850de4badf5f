/* stream.c - memory read bandwidth of this machine, the ceiling for decode.
 *
 * usage: kvant-stream [-t THREADS] [-m MiB] [-r REPS] [-v]
 *
 * A decode step reads every weight once: a packed tile streams its 8-row
 * groups with wide loads and software prefetch 2048 bytes ahead into L1 or
 * 8192 ahead into L2 (kernels/repack_tile.h), each thread over its own
 * share, from 2 MiB pages.  The meter reads
 * the same way, and tries what could read faster, so that a decode cannot
 * beat it:
 *   - loads 256-bit (AVX2) and 512-bit (AVX-512, where XCR0 enables it;
 *     64-bit scalar loads only on a CPU with neither);
 *   - 1, 2, 4 or 8 streams per thread (the thread's share cut in S parts
 *     read in lockstep: more DRAM pages open at once);
 *   - without prefetching, prefetching PF_DIST (2048) bytes ahead into L1
 *     (prefetcht0) or PF_FAR (8192) ahead into L2 (prefetcht1) in every
 *     stream (the two ways of the decode tiles).
 * The buffer is asked to lie on 2 MiB pages (MADV_HUGEPAGE), as packed
 * weights and the paged KV pool do.
 * Every variant runs REPS times (default 5, after one warm-up pass) over a buffer larger than the
 * last-level cache (default: 4x the L3 that sysfs or sysconf reports, at least
 * 1 GiB; some of these machines have 300 MB of L3, one 480 MB), each
 * thread's share first written by that thread (its NUMA node) with nonzero
 * random bytes, so no read is served by the zero page or a cache.  -m sets
 * the buffer instead: bench/compare.py passes the bytes a decode step
 * reads, so a model that fits in the L3 (read from it token after token)
 * is held to the L3's bandwidth, not to memory's.
 *
 * Output: one line per variant (best and median GB/s, 1e9 bytes/s), then
 *   read   X GB/s  (...)   the best of all variants and repetitions
 *   triad  Y GB/s  (...)   STREAM's a = b + s*c (3 arrays counted)
 * bench/compare.py parses the "read" line: roofline = read / bytes per token.
 * -v prints every repetition. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#define PF_DIST 2048
#define PF_FAR 8192
#define MAX_THREADS 256

typedef enum { K_SCALAR, K_AVX2, K_AVX512, K_TRIAD } kind;

typedef struct {
    uint8_t *buf;           /* the whole buffer; this thread's share is [lo, hi) */
    size_t lo, hi;
    kind k;
    int streams;
    int prefetch; /* 0 none, 1 PF_DIST into L1, 2 PF_FAR into L2 */
    uint64_t sink;
    double t0, t1; /* this thread's start and end of the last pass */
} job;

typedef struct {
    pthread_barrier_t start, done;
    job jobs[MAX_THREADS];
    int threads;
    volatile int quit;
} team;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- read kernels: S streams of len bytes from p, p + len, ... -------------- */
static uint64_t read_scalar(const uint8_t *p, size_t len, int S, int pf) {
    uint64_t acc[8] = {0};
    for (size_t o = 0; o < len; o += 64)
        for (int s = 0; s < S; s++) {
            const uint64_t *u = (const uint64_t *)(p + (size_t)s * len + o);
            if (pf == 1) __builtin_prefetch(p + (size_t)s * len + o + PF_DIST);
            if (pf == 2) __builtin_prefetch(p + (size_t)s * len + o + PF_FAR, 0, 2);
            for (int l = 0; l < 8; l++) acc[l] += u[l];
        }
    uint64_t r = 0;
    for (int l = 0; l < 8; l++) r += acc[l];
    return r;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t len, int S, int pf) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t o = 0; o < len; o += 128)
        for (int s = 0; s < S; s++) {
            const uint8_t *q = p + (size_t)s * len + o;
            if (pf == 1) {
                _mm_prefetch((const char *)q + PF_DIST, _MM_HINT_T0);
                _mm_prefetch((const char *)q + PF_DIST + 64, _MM_HINT_T0);
            } else if (pf == 2) {
                _mm_prefetch((const char *)q + PF_FAR, _MM_HINT_T1);
                _mm_prefetch((const char *)q + PF_FAR + 64, _MM_HINT_T1);
            }
            a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)q));
            a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(q + 32)));
            a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(q + 64)));
            a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(q + 96)));
        }
    const __m256i a = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a, 0) + (uint64_t)_mm256_extract_epi64(a, 3);
}

__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint8_t *p, size_t len, int S, int pf) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0;
    for (size_t o = 0; o < len; o += 128)
        for (int s = 0; s < S; s++) {
            const uint8_t *q = p + (size_t)s * len + o;
            if (pf == 1) {
                _mm_prefetch((const char *)q + PF_DIST, _MM_HINT_T0);
                _mm_prefetch((const char *)q + PF_DIST + 64, _MM_HINT_T0);
            } else if (pf == 2) {
                _mm_prefetch((const char *)q + PF_FAR, _MM_HINT_T1);
                _mm_prefetch((const char *)q + PF_FAR + 64, _MM_HINT_T1);
            }
            a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)q));
            a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(q + 64)));
        }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(a0, a1));
}

static uint64_t xcr0(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static bool kind_ok(kind k) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    const uint64_t x = xcr0();
    if (k == K_AVX2) return (x & 6) == 6 && __builtin_cpu_supports("avx2");
    if (k == K_AVX512) return (x & 0xe6) == 0xe6 && __builtin_cpu_supports("avx512f");
    return true;
#else
    return k == K_SCALAR || k == K_TRIAD;
#endif
}

static void run_job(job *j) {
    uint8_t *p = j->buf + j->lo;
    const size_t len = (j->hi - j->lo) / (size_t)j->streams / 128 * 128;
    switch (j->k) {
    case K_SCALAR: j->sink += read_scalar(p, len, j->streams, j->prefetch); break;
#if defined(__x86_64__)
    case K_AVX2: j->sink += read_avx2(p, len, j->streams, j->prefetch); break;
    case K_AVX512: j->sink += read_avx512(p, len, j->streams, j->prefetch); break;
#endif
    case K_TRIAD: { /* three thirds of the share: a = b + 3 c, as doubles */
        const size_t n = (j->hi - j->lo) / 3 / sizeof(double);
        double *a = (double *)p, *b = a + n, *c = b + n;
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
        j->sink += (uint64_t)a[n / 2];
        break;
    }
    default: break;
    }
}

/* the team's threads wait at `start`, run their job, meet at `done` */
typedef struct {
    team *t;
    int i;
} slot;
static void *loop(void *arg) {
    slot *s = arg;
    for (;;) {
        pthread_barrier_wait(&s->t->start);
        if (s->t->quit) return NULL;
        job *j = &s->t->jobs[s->i];
        j->t0 = now();
        run_job(j);
        j->t1 = now();
        pthread_barrier_wait(&s->t->done);
    }
}

/* seconds of one pass of every thread's job: from the first thread's start
 * to the last one's end, as the threads clocked them.  (Timed by the main
 * thread, a pass over a buffer in the L3 could read as 1000 GB/s: with as
 * many workers as cores, the main thread could run again only after they
 * had finished.) */
static double pass(team *t) {
    pthread_barrier_wait(&t->start);
    pthread_barrier_wait(&t->done);
    double t0 = t->jobs[0].t0, t1 = t->jobs[0].t1;
    for (int i = 1; i < t->threads; i++) {
        if (t->jobs[i].t0 < t0) t0 = t->jobs[i].t0;
        if (t->jobs[i].t1 > t1) t1 = t->jobs[i].t1;
    }
    return t1 - t0;
}

/* first touch: each thread writes its own share with nonzero random bytes */
static void *fill(void *arg) {
    job *j = arg;
    uint64_t x = 0x9e3779b97f4a7c15ull ^ j->lo;
    for (size_t o = j->lo; o + 8 <= j->hi; o += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(j->buf + o, &x, 8);
    }
    return NULL;
}

/* the L3 cache this CPU shares: the kernel's sysfs entry (on an AMD EPYC
 * Zen 4 guest sysfs said 32 MiB, the CCX's, where glibc's sysconf said 320),
 * else sysconf, else 32 MiB */
static long l3_bytes(void) {
    long kb = 0;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    if (f) {
        char unit = 0;
        if (fscanf(f, "%ld%c", &kb, &unit) < 1) kb = 0;
        else if (unit == 'M') kb *= 1024;
        fclose(f);
    }
    if (kb > 0) return kb << 10;
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return l3 > 0 ? l3 : 32l << 20;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 5;
    bool verbose = false;
    size_t mib = 0;
    for (int i = 1; i < argc; i++) {
        const bool has = i + 1 < argc;
        if (!strcmp(argv[i], "-t") && has) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-m") && has) mib = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "-r") && has) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-v")) verbose = true;
        else {
            fprintf(stderr, "usage: kvant-stream [-t THREADS] [-m MiB >= 16] [-r REPS] [-v]\n"
                            "(the read bandwidth decode cannot beat; see bench/stream.c)\n");
            return !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    long l3 = l3_bytes();
    if (!mib) mib = (size_t)(4 * l3 >> 20) > 1024 ? (size_t)(4 * l3 >> 20) : 1024;
    if (threads < 1 || threads > MAX_THREADS || mib < 16 || reps < 1 || reps > 1000) {
        fprintf(stderr, "kvant-stream: -t 1..%d, -m >= 16, -r 1..1000\n", MAX_THREADS);
        return 2;
    }
    const size_t bytes = mib << 20;
    const size_t huge = (size_t)2 << 20; /* on 2 MiB pages: C11 wants a size of whole alignments */
    uint8_t *buf = aligned_alloc(huge, (bytes + huge - 1) / huge * huge);
    if (!buf) { fprintf(stderr, "kvant-stream: cannot allocate %zu MiB\n", mib); return 1; }
    madvise(buf, bytes, MADV_HUGEPAGE); /* advice only */
    team t = {.threads = threads};
    for (int i = 0; i < threads; i++) /* shares of whole 4 KiB pages */
        t.jobs[i] = (job){buf, bytes / 4096 * (size_t)i / (size_t)threads * 4096,
                          bytes / 4096 * (size_t)(i + 1) / (size_t)threads * 4096};
    pthread_t th[MAX_THREADS];
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, fill, &t.jobs[i]);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);

    pthread_barrier_init(&t.start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&t.done, NULL, (unsigned)threads + 1);
    slot slots[MAX_THREADS];
    for (int i = 0; i < threads; i++) {
        slots[i] = (slot){&t, i};
        pthread_create(&th[i], NULL, loop, &slots[i]);
    }
    const char *kname[] = {"scalar", "avx2", "avx512", "triad"}, *pfname[] = {"off", "L1 2K", "L2 8K"};
    const int stream_counts[] = {1, 2, 4, 8};
    double best_all = 0, *ts = malloc(sizeof(double) * (size_t)reps);
    char best_what[96] = "";
    uint64_t sink = 0;
    for (int k = K_SCALAR; k <= K_TRIAD; k++) {
        if (!kind_ok((kind)k)) { printf("  %-6s not enabled on this CPU/OS, skipped\n", kname[k]); continue; }
        if (k == K_SCALAR && kind_ok(K_AVX2)) continue; /* 64-bit loads only where nothing wider runs */
        for (int si = 0; si < (k == K_TRIAD ? 1 : 4); si++)
            for (int pf = 0; pf < (k == K_TRIAD ? 1 : 3); pf++) {
                const int S = stream_counts[si];
                size_t moved = 0;
                for (int i = 0; i < threads; i++) {
                    job *j = &t.jobs[i];
                    j->k = (kind)k, j->streams = S, j->prefetch = pf;
                    moved += k == K_TRIAD ? (j->hi - j->lo) / 3 / sizeof(double) * 3 * sizeof(double)
                                          : (j->hi - j->lo) / (size_t)S / 128 * 128 * (size_t)S;
                }
                pass(&t); /* warm-up: page tables, clocks */
                for (int r = 0; r < reps; r++) {
                    ts[r] = moved / pass(&t) / 1e9;
                    if (verbose) printf("  %s S=%d pf=%d rep %d: %.1f GB/s\n", kname[k], S, pf, r, ts[r]);
                }
                qsort(ts, (size_t)reps, sizeof *ts, cmp_d);
                const double best = ts[reps - 1], med = ts[reps / 2];
                if (k == K_TRIAD) {
                    printf("triad  %6.1f GB/s  (median %.1f; %d threads, %zu MiB, best of %d)\n", best, med, threads,
                           mib, reps);
                    continue;
                }
                printf("  %-6s %d stream%s/thread, prefetch %-6s  best %6.1f  median %6.1f GB/s\n", kname[k], S,
                       S > 1 ? "s" : " ", pfname[pf], best, med);
                if (best > best_all) {
                    best_all = best;
                    snprintf(best_what, sizeof best_what, "%s, %d stream%s/thread, prefetch %s", kname[k], S,
                             S > 1 ? "s" : "", pfname[pf]);
                }
            }
    }
    for (int i = 0; i < threads; i++) sink += t.jobs[i].sink;
    printf("read   %6.1f GB/s  (best of all above: %s; %d threads, %zu MiB %s L3 %ld MiB, best of %d)\n", best_all,
           best_what, threads, mib, bytes > (size_t)l3 ? ">" : "<=", l3 >> 20, reps);
    t.quit = 1;
    pthread_barrier_wait(&t.start);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    if (sink == 42) printf("\n");
    free(ts);
    free(buf);
    return 0;
}
