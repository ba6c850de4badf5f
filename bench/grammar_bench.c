/* grammar_bench.c - the cost of a token mask (grammar/grammar.h) for a
 * 10-field JSON Schema, at two real vocabulary sizes, trie walk beside the
 * plain per-token reference.
 *
 * usage: kvant-grammar-bench [--shared DIR] [--ref-every K] [--reps R]
 *
 * For llama-spm (32000 tokens) and qwen2 (151936) from DIR/tokenizers: the
 * vocabulary's pieces into a grammar_vocab (its build time printed), then
 * a typical output of the schema walked token by token: at each state the
 * mask is timed, and the next token is the longest allowed one that spells
 * the next bytes of the output (so the states are those a model writing it
 * would pass through).  Three figures per state:
 *   trie cold  grammar_mask on a fresh grammar_state: every state is new,
 *              its transitions computed as the walk meets them;
 *   trie warm  the same output again after grammar_state_reset, which keeps
 *              the caches (a server reusing one state per schema);
 *   reference  grammar_mask_ref (every K-th state, once), and the two
 *              masks must agree.
 * Each figure is the least of R runs (default 5: the machine may be
 * shared); mean, median and max microseconds per mask over the states, the
 * slowest states, the CPU as lscpu names it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "format/gguf.h"
#include "grammar/grammar.h"
#include "tok/tok.h"

#ifndef KVANT_SHARED_DIR
#define KVANT_SHARED_DIR "../shared"
#endif

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":1},"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":40},"
    "\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9.]+@[a-z]+\\\\.[a-z]{2,4}$\"},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"active\":{\"type\":\"boolean\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"
    "\"score\":{\"type\":\"number\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":5},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\","
    "\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\",\"zip\"]},"
    "\"notes\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"id\",\"name\",\"email\",\"age\",\"active\",\"role\",\"score\",\"tags\",\"address\",\"notes\"]}";

static const char OUTPUT[] =
    "{\"id\": 1042, \"name\": \"Alice Johnson\", \"email\": \"alice.johnson@example.com\", \"age\": 34, "
    "\"active\": true, \"role\": \"admin\", \"score\": 87.25, \"tags\": [\"engineering\", \"on-call\", \"remote\"], "
    "\"address\": {\"city\": \"Paris\", \"zip\": \"75011\"}, \"notes\": \"Prefers morning meetings; reviewing the "
    "Q3 roadmap with the platform team before the offsite, then a week in M\xc3\xbcnchen.\"}";

typedef struct {
    double sum, max;
    int n;
    double v[1024];
} stat;
static void add(stat *s, double us) {
    s->sum += us;
    if (us > s->max) s->max = us;
    if (s->n < 1024) s->v[s->n] = us;
    s->n++;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(stat *s) {
    int n = s->n < 1024 ? s->n : 1024;
    qsort(s->v, (size_t)n, sizeof *s->v, cmp_d);
    return n ? s->v[n / 2] : 0;
}

static void cpu_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p += 2;
                p[strcspn(p, "\n")] = 0;
                snprintf(out, cap, "%s", p);
            }
            break;
        }
    fclose(f);
}

static int run(const char *shared, const char *file, int ref_every, int reps) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/%s", shared, file);
    kvant_status st;
    gguf_ctx *gg = gguf_open(path, &st);
    if (!gg) {
        fprintf(stderr, "kvant-grammar-bench: %s\n", st.msg);
        return 1;
    }
    tok *t = tok_from_gguf(gg, &st);
    gguf_close(gg);
    if (!t) {
        fprintf(stderr, "kvant-grammar-bench: %s\n", st.msg);
        return 1;
    }
    int V = tok_n_vocab(t);
    uint8_t **bytes = calloc((size_t)V, sizeof *bytes);
    int *lens = calloc((size_t)V, sizeof *lens);
    int32_t eog[32];
    int n_eog = 0;
    char buf[1024];
    for (int id = 0; id < V; id++) {
        int n = tok_piece(t, id, false, buf, sizeof buf);
        if (n < 0) n = 0;
        bytes[id] = malloc((size_t)n + 1);
        memcpy(bytes[id], buf, (size_t)n);
        lens[id] = n;
        if (tok_is_eog(t, id) && n_eog < 32) eog[n_eog++] = id;
    }
    tok_free(t);
    double t0 = core_time_ms();
    grammar_vocab *v = grammar_vocab_new((const uint8_t *const *)bytes, lens, V, eog, n_eog, &st);
    double build_ms = core_time_ms() - t0;
    if (!v) {
        fprintf(stderr, "kvant-grammar-bench: %s\n", st.msg);
        return 1;
    }
    t0 = core_time_ms();
    grammar *g = grammar_from_json_schema(SCHEMA, sizeof SCHEMA - 1, &st);
    double compile_ms = core_time_ms() - t0;
    if (!g) {
        fprintf(stderr, "kvant-grammar-bench: %s\n", st.msg);
        return 1;
    }
    grammar_state *s = grammar_state_new(g, &st);
    uint8_t *m = malloc((size_t)V), *m2 = malloc((size_t)V);
    int32_t *path_tok = malloc(sizeof OUTPUT * sizeof *path_tok);
    size_t *path_at = malloc(sizeof OUTPUT * sizeof *path_at);
    int *path_n = malloc(sizeof OUTPUT * sizeof *path_n);
    int n_path = 0;
    size_t at = 0, len = sizeof OUTPUT - 1;
    /* the path: the longest allowed token spelling the next bytes */
    while (at < len) {
        int n = grammar_mask(s, v, m);
        if (n < 0) {
            fprintf(stderr, "kvant-grammar-bench: mask failed: %s\n", grammar_state_error(s)->msg);
            return 1;
        }
        int best = -1;
        for (int id = 0; id < V; id++)
            if (m[id] && lens[id] > 0 && (size_t)lens[id] <= len - at && !memcmp(bytes[id], OUTPUT + at, (size_t)lens[id]) &&
                (best < 0 || lens[id] > lens[best]))
                best = id;
        if (best < 0) {
            fprintf(stderr, "kvant-grammar-bench: no allowed token spells '%.20s'\n", OUTPUT + at);
            return 1;
        }
        grammar_accept(s, v, best);
        path_at[n_path] = at;
        path_n[n_path] = n;
        path_tok[n_path++] = best;
        at += (size_t)lens[best];
    }
    bool can_end = grammar_can_end(s);
    grammar_state_free(s);
    /* per state, the least of reps timings: cold (a fresh state each pass),
     * warm (the same state again after grammar_state_reset), reference */
    double *tc = malloc((size_t)n_path * sizeof *tc), *tw = malloc((size_t)n_path * sizeof *tw);
    double *tr = malloc((size_t)n_path * sizeof *tr);
    for (int i = 0; i < n_path; i++) tc[i] = tw[i] = tr[i] = 1e30;
    bool equal = true;
    double allowed_sum = 0;
    for (int i = 0; i < n_path; i++) allowed_sum += path_n[i];
    for (int r = 0; r < reps; r++) {
        s = grammar_state_new(g, &st);
        for (int pass = 0; pass < 2; pass++) {
            if (pass) grammar_state_reset(s);
            for (int i = 0; i < n_path; i++) {
                double a = core_time_ms();
                grammar_mask(s, v, m);
                double us = (core_time_ms() - a) * 1000.0;
                double *best = pass ? tw : tc;
                if (us < best[i]) best[i] = us;
                if (pass && r == 0 && ref_every > 0 && i % ref_every == 0) {
                    a = core_time_ms();
                    grammar_mask_ref(s, v, m2);
                    tr[i] = (core_time_ms() - a) * 1000.0;
                    if (memcmp(m, m2, (size_t)V)) equal = false;
                }
                grammar_accept(s, v, path_tok[i]);
            }
        }
        grammar_state_free(s);
    }
    stat cold = {0}, warm = {0}, ref = {0};
    double worst_us[3] = {0};
    int worst_i[3] = {0};
    for (int i = 0; i < n_path; i++) {
        add(&cold, tc[i]);
        add(&warm, tw[i]);
        if (tr[i] < 1e29) add(&ref, tr[i]);
        for (int w = 0; w < 3; w++)
            if (tc[i] > worst_us[w]) {
                for (int k = 2; k > w; k--) worst_us[k] = worst_us[k - 1], worst_i[k] = worst_i[k - 1];
                worst_us[w] = tc[i], worst_i[w] = i;
                break;
            }
    }
    printf("%-10s %7d tokens  %7zu trie nodes  vocab build %6.1f ms  schema compile %.2f ms (%d rules)\n", file + 11,
           V, grammar_vocab_n_nodes(v), build_ms, compile_ms, grammar_n_rules(g));
    printf("           %d states along a %zu-byte output (ends: %s), %.0f tokens allowed on average; least of %d runs\n",
           n_path, len, can_end ? "yes" : "NO", allowed_sum / n_path, reps);
    printf("           trie cold  mean %8.1f us  median %8.1f us  max %8.1f us\n", cold.sum / cold.n, median(&cold),
           cold.max);
    printf("           trie warm  mean %8.1f us  median %8.1f us  max %8.1f us\n", warm.sum / warm.n, median(&warm),
           warm.max);
    if (ref.n)
        printf("           reference  mean %8.1f us  median %8.1f us  max %8.1f us  (%d states, one run; mean %.0fx the "
               "cold trie's; masks %s)\n", ref.sum / ref.n, median(&ref), ref.max, ref.n,
               (ref.sum / ref.n) / (cold.sum / cold.n), equal ? "equal" : "DIFFER");
    for (int w = 0; w < 3; w++) {
        size_t wa = path_at[worst_i[w]], back = wa < 24 ? wa : 24;
        printf("           slowest cold #%d: %7.1f us (%6d allowed) after ...%.*s\n", w + 1, worst_us[w],
               path_n[worst_i[w]], (int)back, OUTPUT + wa - back);
    }
    printf("           the mean cold mask is %.2f%% of a 20 ms decode step\n", cold.sum / cold.n / 200.0);
    free(tc), free(tw), free(tr), free(path_at), free(path_n);
    grammar_free(g);
    grammar_vocab_free(v);
    for (int id = 0; id < V; id++) free(bytes[id]);
    free(bytes), free(lens), free(m), free(m2), free(path_tok);
    return equal && can_end ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *shared = KVANT_SHARED_DIR;
    int ref_every = 1, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shared") && i + 1 < argc) shared = argv[++i];
        else if (!strcmp(argv[i], "--ref-every") && i + 1 < argc) ref_every = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: kvant-grammar-bench [--shared DIR] [--ref-every K (0: no reference)] [--reps R]\n");
            return 2;
        }
    }
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    printf("grammar mask cost, 10-field JSON Schema; CPU: %s (1 thread)\n", cpu);
    if (reps < 1) reps = 1;
    int rc = run(shared, "ggml-vocab-llama-spm.gguf", ref_every, reps);
    rc |= run(shared, "ggml-vocab-qwen2.gguf", ref_every, reps);
    return rc;
}
